"""One runner for the studies whose arms are a table (``<study>/arms.toml``).

    python experiments/results/runner.py                                # the studies it knows
    python experiments/results/runner.py following_pays                 # arms, seeds, status
    python experiments/results/runner.py following_pays run social:3,4 solo   # ARM[:SEEDS]
    python experiments/results/runner.py following_pays dry social      # print the commands only
    python experiments/results/runner.py following_pays analyse         # the study's analysis

A run of arm ``A``, seed ``k`` of study ``S`` trains in ``$OUT/S/A/seed_k`` (``OUT``, default
``runs``), named ``S_A``, its output appended to ``$OUT/S/logs/A.seed_k.log``, with one OpenMP
and one torch thread; ``JOBS`` runs (default 2, the 2-core machine's fastest layout) play at
once. Rerunning resumes an unfinished run from its newest checkpoint and skips a finished one
(``train.py`` does both). Everything asked for is checked before anything runs: the study, its
arms, the seeds, and every file an arm ``needs`` (e.g. the policy of the arm it starts from).
A signal to the runner reaches every run it started (each checkpoints and stops).

``arms.toml`` holds ``[study]`` (``common`` overrides of every run, the ``analyse`` command or
commands, where ``{runs_dir}`` is ``$OUT/<runs folder>``; optionally ``runs``, the folder of
its runs under ``OUT``, ``template``, the order of a run's arguments when it differs from
:data:`TEMPLATE`, and ``order = "seed"`` to queue seed by seed instead of arm by arm),
``[vars]`` (named groups of overrides, written ``@NAME@`` in an arm's overrides) and one
``[[arm]]`` table per arm: ``name``, ``seeds``, ``overrides``, and optionally ``budget`` (what
the plan gives it, shown by ``status``), ``steps`` (its ``total_timesteps``, where the template
names ``{steps}``), ``depends_on`` (the arm whose results it starts from) and ``needs`` (a file
each seed needs before it runs). ``@SEED@`` becomes the run's seed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from marlgrid.analysis.runs import COMPLETE, find_runs

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ACTIONS = ("status", "run", "dry", "analyse")


class StudyError(Exception):
    """A study, arm or seed that cannot be run as asked (the message says why)."""


#: a run's command after ``OMP_NUM_THREADS=1 PY experiments/train.py`` (``[study] template``)
TEMPLATE = "{overrides} name={study}_{arm} seed={seed} {common} hydra.run.dir={run_dir}"


@dataclass
class Arm:
    name: str
    seeds: list[int]
    overrides: str
    budget: str = ""
    depends_on: str = ""
    needs: str = ""
    steps: int | None = None  # total_timesteps, for a template that names {steps}


@dataclass
class Study:
    name: str
    folder: Path
    common: str
    analyse: list[str]  # commands, in order; {runs_dir} is $OUT/<runs folder>
    runs: str = ""  # the folder of its runs under OUT (default: the study's name)
    template: str = TEMPLATE
    order: str = "arm"  # "arm": an arm's seeds before the next arm's; "seed": seed by seed
    arms: dict[str, Arm] = field(default_factory=dict)

    @property
    def runs_folder(self) -> str:
        return self.runs or self.name


def studies() -> dict[str, Path]:
    """Study name -> its ``arms.toml``, for every study folder that has one."""
    return {p.parent.name: p for p in sorted(HERE.glob("*/arms.toml"))}


def _expand(text: str, names: dict[str, str], where: str) -> str:
    for _ in range(10):  # a group may use another group
        for key, value in names.items():
            text = text.replace(f"@{key}@", value)
    if "@" in text.replace("@SEED@", ""):
        left = [w for w in text.split() if "@" in w and "@SEED@" not in w]
        raise StudyError(f"{where}: unknown group in {left}; the groups are {sorted(names)}")
    return " ".join(text.split())


def load_study(name: str) -> Study:
    """The study ``name`` from its ``arms.toml``; :class:`StudyError` names what is wrong."""
    known = studies()
    if name not in known:
        raise StudyError(f"unknown study {name!r}; studies with an arms.toml: {sorted(known)}")
    path = known[name]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise StudyError(f"{path}: {exc}") from None
    head, names = data.get("study", {}), {k: str(v) for k, v in data.get("vars", {}).items()}
    analyse = head.get("analyse", [])
    study = Study(name, path.parent, _expand(head.get("common", ""), names, f"{path} common"),
                  [analyse] if isinstance(analyse, str) else list(analyse), head.get("runs", ""),
                  head.get("template", TEMPLATE), head.get("order", "arm"))  # fmt: skip
    if study.order not in ("arm", "seed"):
        raise StudyError(f"{path}: order must be 'arm' or 'seed', got {study.order!r}")
    for entry in data.get("arm", []):
        arm = Arm(**entry)
        where = f"{path} arm {arm.name!r}"
        if arm.name in study.arms:
            raise StudyError(f"{where}: a second arm of that name")
        if not arm.seeds or not all(isinstance(s, int) and s >= 0 for s in arm.seeds):
            raise StudyError(f"{where}: seeds must be whole numbers >= 0, got {arm.seeds!r}")
        arm.overrides = _expand(arm.overrides, names, where)
        study.arms[arm.name] = arm
    for arm in study.arms.values():
        if arm.depends_on and arm.depends_on not in study.arms:
            raise StudyError(f"{path} arm {arm.name!r} depends on unknown arm {arm.depends_on!r}")
    return study


def requested(study: Study, requests: list[str]) -> list[tuple[Arm, int]]:
    """``ARM[:SEEDS]`` requests as (arm, seed) pairs, in order (every arm's seeds: no request)."""
    if not requests:
        pairs = [(arm, seed) for arm in study.arms.values() for seed in arm.seeds]
        if study.order == "seed":  # seed by seed, the arms in order within each
            pairs.sort(key=lambda pair: pair[1])  # stable: the arms keep their order
        return pairs
    out = []
    for request in requests:
        name, _, seeds = request.partition(":")
        if name not in study.arms:
            raise StudyError(f"unknown arm {name!r} of {study.name}; arms: {list(study.arms)}")
        arm = study.arms[name]
        chosen = arm.seeds
        if seeds:
            try:
                chosen = [int(s) for s in seeds.split(",")]
            except ValueError:
                raise StudyError(
                    f"seeds of arm {name!r} must be whole numbers: {seeds!r}"
                ) from None
        out += [(arm, seed) for seed in chosen]
    return out


def run_dir(study: Study, arm: Arm, seed: int, out: str) -> str:
    return f"{out}/{study.runs_folder}/{arm.name}/seed_{seed}"


def log_file(study: Study, arm: Arm, seed: int, out: str) -> Path:
    return ROOT / out / study.runs_folder / "logs" / f"{arm.name}.seed_{seed}.log"


def command(study: Study, arm: Arm, seed: int, py: str, out: str) -> str:
    """The shell command of one run (the study's :data:`TEMPLATE`, as its shell script wrote
    it)."""
    fields = {"overrides": arm.overrides.replace("@SEED@", str(seed)), "study": study.name,
              "arm": arm.name, "seed": seed, "common": study.common, "steps": arm.steps,
              "run_dir": run_dir(study, arm, seed, out)}  # fmt: skip
    return f"OMP_NUM_THREADS=1 {py} experiments/train.py " + study.template.format(**fields)


def check_needs(pairs: list[tuple[Arm, int]]) -> None:
    """Refuse a run whose ``needs`` file is missing, naming it and the arm it comes from."""
    for arm, seed in pairs:
        if arm.needs:
            need = ROOT / arm.needs.replace("@SEED@", str(seed))
            if not need.exists():
                source = f" (from arm {arm.depends_on!r}: run it and the analysis first)"
                raise StudyError(f"arm {arm.name!r} seed {seed} needs {need}"
                                 f"{source if arm.depends_on else ''}")  # fmt: skip


def status_lines(study: Study, out: str) -> list[str]:
    lines = [f"{study.name}: {len(study.arms)} arms ({study.folder / 'arms.toml'})"]
    for arm in study.arms.values():
        extra = f", from {arm.depends_on}" if arm.depends_on else ""
        lines.append(f"  {arm.name} (seeds {','.join(map(str, arm.seeds))}; "
                     f"{arm.budget or 'budget as its overrides give'}{extra})")  # fmt: skip
        dirs = [ROOT / run_dir(study, arm, s, out) for s in arm.seeds]
        here = [d for d in dirs if d.is_dir()]
        found = {Path(r.path).resolve(): r for r in find_runs(here).runs} if here else {}
        for seed, d in zip(arm.seeds, dirs, strict=True):
            r = found.get(d.resolve())
            state = ("absent" if r is None else "finished" if r.status == COMPLETE
                     else f"{r.status} ({r.detail})")  # fmt: skip
            lines.append(f"    seed {seed}: {state}")
    return lines


def play(commands: list[tuple[str, Path, str]], jobs: int) -> int:
    """Run ``(command, log, label)`` triples, ``jobs`` at once; the number that failed."""
    procs: list[subprocess.Popen] = []

    def one(item: tuple[str, Path, str]) -> bool:
        cmd, log, label = item
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as f:
            proc = subprocess.Popen(["bash", "-c", cmd], cwd=ROOT, stdout=f, stderr=f)
            procs.append(proc)
            ok = proc.wait() == 0
        print(f"done {label}" if ok else f"failed {label} (see {log})", flush=True)
        return ok

    def forward(signum: int, frame: object) -> None:  # every run checkpoints and stops
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, commands))
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    return results.count(False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="?")
    parser.add_argument("action", nargs="?", default="status", choices=ACTIONS)
    parser.add_argument("arms", nargs="*", metavar="ARM[:SEEDS]")
    args = parser.parse_args(argv)
    if args.study is None:
        print("\n".join(f"{name}  ({path})" for name, path in studies().items()))
        return 0
    py, out = os.environ.get("PY", ".venv/bin/python"), os.environ.get("OUT", "runs")
    try:
        study = load_study(args.study)
        if args.action == "status":
            print("\n".join(status_lines(study, out)))
            return 0
        if args.action == "analyse":
            if not study.analyse:
                raise StudyError(f"{study.name} names no analyse command in its arms.toml")
            runs_dir = str(Path(out) / study.runs_folder)
            for line in study.analyse:  # each in order; the first failure stops the rest
                cmd = shlex.split(line.replace("{runs_dir}", runs_dir))
                if cmd[0] == "python":  # the runner's own Python (a venv's), not PATH's
                    cmd[0] = sys.executable
                print(" ".join(cmd), flush=True)
                done = subprocess.run([*cmd, *args.arms], cwd=ROOT)
                if done.returncode:
                    return done.returncode
            return 0
        pairs = requested(study, args.arms)
        jobs = int(os.environ.get("JOBS", "2"))
        if jobs < 1:
            raise StudyError(f"JOBS must be >= 1, got {jobs}")
        if args.action == "run":
            check_needs(pairs)
    except (StudyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    queue = [(command(study, arm, seed, py, out), log_file(study, arm, seed, out),
              f"{arm.name}.seed_{seed}") for arm, seed in pairs]  # fmt: skip
    print("\n".join(cmd for cmd, _, _ in queue))
    print(f"{len(queue)} runs, {jobs} at a time")
    if args.action == "dry":
        return 0
    return 1 if play(queue, jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
