"""Saved runs: a training run directory read back (its config, checkpoints, metrics, policies).

Every script and test loads runs through :class:`SavedRun`::

    from marlgrid.agents.bookkeeping.saved_run import SavedRun

    run = SavedRun("runs/default/seed_0")  # a run directory, or one of its checkpoint files
    run.config  # the resolved config as plain data (config.json)
    cfg = run.train_config  # ... rebuilt as a TrainConfig
    run.checkpoint, run.metric_columns  # the newest checkpoint, the metrics.csv columns
    policies = run.policies(greedy=True)  # every role's policy, as the checkpoint left it
    returns = policies.evaluate(episodes=100)  # (episodes, agents) returns on fresh layouts

The trainer writes ``config.json`` beside the checkpoints when a run starts or resumes
(:func:`write_run_config`): :func:`dataclasses.asdict` of the :class:`TrainConfig`, every learner
config resolved to its dataclass (``agent: null`` is written as the PPO defaults it stands for).
A run from before that has only Hydra's record, ``.hydra/config.yaml``; it loads the same way.
The plain-data reading itself is :func:`marlgrid.analysis.runs.read_config` (torch-free, for the
analysis side). Frozen roles' checkpoint paths are saved absolute; a relative one (a run from
before, or Hydra's record) is read relative to the run's launch directory (:func:`launch_dir`), so
a run evaluates from any working directory.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from marlgrid.agents.bookkeeping.launch import absolute_checkpoints
from marlgrid.agents.bookkeeping.run_dir import replace_atomically
from marlgrid.analysis.curves import AnalysisError, CurveError, metric_columns, read_curve
from marlgrid.analysis.runs import CONFIG_FILE, HYDRA_CONFIG, config_path, read_config
from marlgrid.config import ConfigError
from marlgrid.plugins import load_plugins

if TYPE_CHECKING:
    from marlgrid.agents.training.train_config import TrainConfig

__all__ = [
    "CONFIG_FILE",
    "HYDRA_CONFIG",
    "RunPolicies",
    "SavedRun",
    "SavedRunError",
    "config_data",
    "launch_dir",
    "train_config_from_data",
    "write_run_config",
]


class SavedRunError(ValueError):
    """A path that is not a loadable run (or checkpoint of one); the message names it."""


# -- writing -------------------------------------------------------------------------------------


def config_data(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as plain, JSON-safe data: :func:`dataclasses.asdict`, each learner config
    resolved (:func:`~marlgrid.agents.training.train_config.learner_configs`) to its ``asdict``,
    frozen roles' checkpoints absolute (a relative one is relative to the working directory,
    as the trainer loads it)."""
    from marlgrid.agents.training.roles import MAIN
    from marlgrid.agents.training.train_config import learner_configs

    configs = learner_configs(cfg)
    data = dataclasses.asdict(absolute_checkpoints(cfg, Path.cwd()))
    data["agent"] = dataclasses.asdict(configs[MAIN])
    data["learners"] = {k: dataclasses.asdict(configs[k]) for k in cfg.learners}
    return json.loads(json.dumps(data, default=_json_value))


def write_run_config(run_dir: str | Path, cfg: TrainConfig) -> Path:
    """Write ``run_dir/config.json`` (:func:`config_data`) atomically: through a temporary file
    in the same folder, flushed and renamed, so a reader never sees it half written."""
    text = json.dumps(config_data(cfg), indent=2) + "\n"
    return replace_atomically(Path(run_dir) / CONFIG_FILE, lambda f: f.write(text.encode()))


def _json_value(value: Any) -> Any:
    """What :func:`json.dumps` cannot write itself: numpy values and paths."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"a {type(value).__name__} ({value!r}) cannot be saved in {CONFIG_FILE}")


# -- reading -------------------------------------------------------------------------------------

#: Hydra's record of the job (``hydra.runtime.cwd`` is the directory it was launched from)
HYDRA_RECORD = ".hydra/hydra.yaml"


def launch_dir(run_dir: str | Path) -> Path | None:
    """The directory a run was launched from, which its relative paths are relative to: Hydra's
    ``hydra.runtime.cwd`` (:data:`HYDRA_RECORD`) while that folder exists, else the folder that
    holds the ``runs/`` folder the run lies in; None when neither is known."""
    cwd = _hydra_cwd(Path(run_dir) / HYDRA_RECORD)
    if isinstance(cwd, str) and cwd and Path(cwd).is_dir():
        return Path(cwd)
    for folder in Path(run_dir).absolute().parents:
        if folder.name == "runs":
            return folder.parent
    return None


def _hydra_cwd(record: Path) -> Any:
    """``hydra.runtime.cwd`` of Hydra's record ``record`` (None where it cannot be read)."""
    try:
        import yaml
    except ImportError:  # PyYAML comes with the train extra that writes the record
        return None
    try:
        return yaml.safe_load(record.read_text(encoding="utf-8"))["hydra"]["runtime"]["cwd"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return None


def train_config_from_data(data: Mapping[str, Any]) -> TrainConfig:
    """The :class:`TrainConfig` of plain ``data`` (``config.json``, or a Hydra record): nested
    dataclasses rebuilt from their type hints, learner configs from their ``algo``. Raises
    :class:`SavedRunError` naming the first key that does not fit."""
    from marlgrid.agents.training.train_config import TrainConfig

    if not isinstance(data, Mapping):
        raise SavedRunError(f"the config must be a mapping of TrainConfig fields, got {data!r}")
    data = dict(data)
    if "agent" in data:
        data["agent"] = _learner(data["agent"], "agent")
    if "learners" in data:
        value = data["learners"]
        if not isinstance(value, Mapping):
            raise SavedRunError(f"learners must be a mapping of learner configs, got {value!r}")
        data["learners"] = {k: _learner(v, f"learners.{k}") for k, v in value.items()}
    return _build(TrainConfig, data, "")


def _build(cls: type, data: Any, key: str) -> Any:
    """A ``cls`` dataclass from a mapping of its fields (missing ones keep their defaults)."""
    if isinstance(data, cls):
        return data
    where = key or "the config"
    if not isinstance(data, Mapping):
        raise SavedRunError(f"{where} must be a mapping of {cls.__name__} fields, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(data) - set(names), key=str)
    if unknown:
        raise SavedRunError(f"{where}: unknown key(s) {unknown}; {cls.__name__} has {names}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _typed(hints[name], value, f"{key}.{name}" if key else name)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SavedRunError(f"{where}: {exc}") from None


def _typed(hint: Any, value: Any, key: str) -> Any:
    """``value`` as the field type ``hint`` asks: dataclasses (also as dict values), tuples."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return _build(hint, value, key)
    if origin in (dict, Mapping) and len(args) == 2 and isinstance(value, Mapping):
        return {k: _typed(args[1], v, f"{key}.{k}") for k, v in value.items()}
    if origin is tuple and isinstance(value, list | tuple):
        return tuple(value)
    if origin in (typing.Union, types.UnionType) and value is not None:
        arms = [a for a in args if a is not type(None)]
        return _typed(arms[0], value, key) if len(arms) == 1 else value
    return value


def _learner(value: Any, key: str) -> Any:
    """A learner config dataclass from its ``asdict`` form (``None`` and dataclasses as is)."""
    if not isinstance(value, Mapping):
        return value
    from marlgrid.agents.learner import config_from_dict, load_builtin_learners

    load_builtin_learners()
    try:
        return config_from_dict(value)
    except (KeyError, TypeError, ValueError) as exc:
        raise SavedRunError(f"{key}: {exc}") from None


class SavedRun:
    """A training run directory on disk, or one checkpoint file of one (``<run>/checkpoints/
    ckpt_*.pt``: then :attr:`checkpoint` is that file), or an exported expert file
    (:func:`~marlgrid.agents.bookkeeping.checkpoint.export_policies`, e.g. ``experiments/experts/
    *.pt``) outside any run: its config is then the identity the file carries (env, learners,
    roles, curriculum), enough to play it but not to resume it.

    Raises :class:`SavedRunError` naming ``target`` when it is neither; the config and the
    checkpoints are read when first asked for (a run without them says so then).
    """

    def __init__(self, target: str | Path) -> None:
        target = Path(target)
        self.target = target
        if target.is_file():
            self.path, self._checkpoint = target.parent.parent, target
        elif target.is_dir():
            self.path, self._checkpoint = target, None
        else:
            raise SavedRunError(f"{target} is neither a run directory nor a checkpoint file")

    def __repr__(self) -> str:
        return f"SavedRun({str(self.target)!r})"

    # -- config --------------------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        """``config.json``, or for a run from before it ``.hydra/config.yaml``."""
        path = config_path(self.path)
        if path is None:
            raise SavedRunError(
                f"{self.path} holds neither {CONFIG_FILE} nor {HYDRA_CONFIG}: is it a training "
                "run directory?"
            )
        return path

    @cached_property
    def config(self) -> dict[str, Any]:
        """The run's resolved config as plain data (read once); relative frozen-role
        checkpoints made absolute against the run's :func:`launch_dir`; for an exported expert
        file outside a run, the identity it carries. Its ``plugins`` are imported here."""
        exported = self._exported_identity
        if exported is None:
            self.config_file  # noqa: B018  (raises naming the run when it has no config)
            try:
                data = read_config(self.path) or {}
            except AnalysisError as exc:
                raise SavedRunError(str(exc)) from None
            base = launch_dir(self.path)
            exported = data if base is None else absolute_checkpoints(data, base)
        try:  # the outside code the run was trained with, before anything is built from it
            load_plugins(exported.get("plugins") or [])
        except ConfigError as exc:
            raise SavedRunError(f"{self.target}: {exc}") from None
        return exported

    @cached_property
    def _exported_identity(self) -> dict[str, Any] | None:
        """The identity of an exported expert file (None for a run directory, for a checkpoint
        in a run's ``checkpoints/`` folder and for a file that is not an export). An export is
        never written into a ``checkpoints/`` folder, so a file elsewhere plays as itself even
        when the folder above it holds some other run's config. Frozen-role checkpoints in the
        identity are used as stored (``train.py`` stores them absolute)."""
        target = self._checkpoint
        if target is None or (target.parent.name == "checkpoints" and config_path(self.path)):
            return None
        from marlgrid.agents.bookkeeping.checkpoint import CheckpointError, load_checkpoint

        try:
            payload = load_checkpoint(target)
        except CheckpointError as exc:
            raise SavedRunError(str(exc)) from None
        if "exported_from" not in payload:
            return None
        identity = payload.get("identity")
        if not isinstance(identity, dict) or not identity:
            raise SavedRunError(
                f"{target} is an exported expert file without the identity (env, learners) it "
                "needs to play; export it again with experiments/export_expert.py"
            )
        return dict(identity)

    @property
    def train_config(self) -> TrainConfig:
        """The :class:`TrainConfig` the run trained with (a new object on every access)."""
        config = self.config
        try:
            return train_config_from_data(config)
        except SavedRunError as exc:
            source = self._checkpoint if self._exported_identity is not None else None
            raise SavedRunError(f"{source or self.config_file}: {exc}") from None

    # -- checkpoints and metrics ---------------------------------------------------------------

    @property
    def checkpoints(self) -> list[Path]:
        """The run's checkpoint files, oldest first."""
        from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints

        return list_checkpoints(self.path / "checkpoints")

    @property
    def newest_checkpoint(self) -> Path:
        """The run's newest checkpoint file."""
        found = self.checkpoints
        if not found:
            raise SavedRunError(f"no checkpoints in {self.path / 'checkpoints'}")
        return found[-1]

    @property
    def checkpoint(self) -> Path:
        """The checkpoint file given, else the newest one."""
        return self._checkpoint if self._checkpoint is not None else self.newest_checkpoint

    @property
    def metric_columns(self) -> list[str]:
        """The metric columns of ``metrics.csv`` (``step`` left out), in file order."""
        try:
            return metric_columns(self.path)
        except CurveError as exc:
            raise SavedRunError(str(exc)) from None

    def curve(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of ``metric`` in ``metrics.csv`` (rows without it skipped)."""
        try:
            return read_curve(self.path, metric)
        except CurveError as exc:
            raise SavedRunError(str(exc)) from None

    # -- policies ------------------------------------------------------------------------------

    def policies(self, greedy: bool = False, rules: Mapping[str, Any] | None = None) -> RunPolicies:
        """Every role's policy at :attr:`checkpoint`, frozen: trained learners with the
        checkpoint's weights, frozen ones from their own files, scripted ones built anew. They
        play under the rules the run's curriculum had reached there
        (:func:`~marlgrid.agents.training.curriculum.checkpoint_rules`), ``rules`` overriding
        them; ``greedy`` learners take the likeliest action. The checkpoint's learners are checked
        (:func:`~marlgrid.agents.bookkeeping.checkpoint.load_learners`) before any is built; an
        unusable one raises :class:`~marlgrid.agents.bookkeeping.checkpoint.CheckpointError`."""
        from marlgrid.agents.bookkeeping.checkpoint import load_learners
        from marlgrid.agents.training.curriculum import checkpoint_rules
        from marlgrid.agents.training.env_sources import make_env_source
        from marlgrid.agents.training.roles import build_groups, load_saved_state, resolve_roles
        from marlgrid.agents.training.train_config import learner_configs

        cfg, ckpt = self.train_config, self.checkpoint
        payload = load_learners(ckpt)
        stage = {**checkpoint_rules(cfg.curriculum, payload), **(rules or {})}
        settings = {**cfg.env.settings, **stage}
        vec = make_env_source(cfg.env.id, 1, settings)
        saved = payload.get("learners", {})
        configs = {
            name: _acting_config(c, saved.get(name)) for name, c in learner_configs(cfg).items()
        }
        roles = resolve_roles(cfg.roles, vec.possible_agents, sorted(configs))
        groups, scripted = build_groups(roles, vec, configs, cfg.seed)
        for g in groups:
            if g.train:  # a trained learner: its weights come from the checkpoint
                if g.name not in saved:
                    raise SavedRunError(
                        f"{ckpt} holds no learner {g.name!r} (it holds {sorted(saved)}): does it "
                        f"belong to {self.path}?"
                    )
                load_saved_state(g.learner, saved[g.name], f"learner {g.name!r} of {ckpt}")
                g.train = False
            g.explore = g.explore and not greedy
        agents = list(vec.possible_agents)
        return RunPolicies(cfg, ckpt, stage, settings, agents, roles, groups, scripted)


def _acting_config(config: Any, state: Mapping[str, Any] | None) -> Any:
    """The config to build a trained learner from: the one its saved ``state`` holds where it
    has one (an exported policy's drops the loss terms its file has no heads for), else
    ``config``, the run's."""
    from marlgrid.agents.learner import config_from_dict

    if not isinstance(state, Mapping) or not isinstance(state.get("config"), Mapping):
        return config
    return config_from_dict(state["config"])


@dataclasses.dataclass
class RunPolicies:
    """A run's checkpoint rebuilt for acting (:meth:`SavedRun.policies`)."""

    cfg: TrainConfig
    checkpoint: Path
    stage: dict[str, Any]  # the rules played under (the curriculum's, then the overrides)
    settings: dict[str, Any]  # the env settings with ``stage`` applied
    agents: list[str]  # the env's agent ids, in column order
    roles: dict[str, Any]  # agent id -> its RoleConfig
    groups: list[Any]  # PolicyGroups of the learner and frozen roles (none of them trains)
    scripted: dict[str, Any]  # agent id -> scripted policy

    @property
    def learner_columns(self) -> list[int]:
        """Columns (of :attr:`agents`) of the agents the run trained."""
        return [k for k, a in enumerate(self.agents) if self.roles[a].kind == "learner"]

    def evaluate(self, episodes: int, seed: int = 12345, num_envs: int = 16) -> np.ndarray:
        """``(episodes, len(agents))`` returns of ``episodes`` episodes on fresh envs seeded from
        ``seed``, each group exploring as :meth:`SavedRun.policies` set it."""
        from marlgrid.agents.training.evaluation import evaluate_groups

        return evaluate_groups(
            self.cfg.env.id, self.settings, self.groups, self.scripted, episodes, seed, num_envs,
            explore=None,
        )  # fmt: skip

    def record_video(self, path: str | Path, seed: int) -> Path:
        """One greedy episode in a fresh env seeded with ``seed``, written to ``path``."""
        from marlgrid.agents.training.evaluation import record_groups_video

        return record_groups_video(
            self.cfg.env.id, self.settings, self.groups, self.scripted, Path(path), seed
        )
