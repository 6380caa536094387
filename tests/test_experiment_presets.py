"""The social-learning experiment presets (``conf/experiment/``, ``experiment=<name>``).

Every preset composes at both scales (``scale=full``, the default, and ``scale=small``) into the
task, roles, learners, curriculum and run length its header states, and trains a couple of
updates with tiny overrides. Presets that play trained experts get a checkpoint made here by the
expert preset itself (one tiny run each). On goal cycles every agent sees its last reward
(``extras: [reward]``; the expert recipe's learners also their last action) and experts beside
a novice wear prestige colours; a library expert trained without extras still plays beside such
a novice.
"""

from __future__ import annotations

import csv
import dataclasses
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hydra")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import marlgrid  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import (  # noqa: E402
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
)
from marlgrid.agents.training.train_config import identity, identity_defaults  # noqa: E402
from marlgrid.agents.training.trainer import TrainConfig, Trainer, train  # noqa: E402
from marlgrid.agents.training.warm_start import EXTRA_HEADS_PREFIX  # noqa: E402
from marlgrid.config import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRESET_DIR = ROOT / "conf" / "experiment"
PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))

CANON_3 = "MarlGrid-GoalCycle-13x13-3Agents-v0"
CANON_1 = "MarlGrid-GoalCycle-13x13-v0"
CLUTTER_3 = "MarlGrid-Cluttered-11x11-3Agents-v0"
CLUTTER_1 = "MarlGrid-Cluttered-11x11-v0"
TWO_TILES = "MarlGrid-GoalCycle-7x7-v0"
NINE_3 = "MarlGrid-GoalCycle-9x9-3Agents-v0"
NINE_1 = "MarlGrid-GoalCycle-9x9-v0"
#: env id -> full-scale size, penalty, n_goals, episode length (goal cycles)
TASKS = {
    CANON_3: (13, 1.5, 3, 250),
    CANON_1: (13, 1.5, 3, 250),
    CLUTTER_3: (11, None, None, None),
    CLUTTER_1: (11, None, None, None),
    TWO_TILES: (7, 0.5, 2, 60),
    NINE_3: (9, 0.5, 3, 150),
    NINE_1: (9, 0.5, 3, 150),
}
SEPARATE = {"agent_0": "main", "agent_1": "expert_1", "agent_2": "expert_2"}
SHARED = {"agent_0": "main", "agent_1": "main", "agent_2": "main"}
ORACLES = {"agent_1": "oracle", "agent_2": "oracle"}
FROZEN = {"agent_1": "expert_1", "agent_2": "expert_2"}
#: full scale, small scale: (total env steps, the step at which the penalty anneal reaches 1.5)
RUN = {
    "expert": ((4_000_000, 2_000_000), (400_000, 200_000)),
    "novice": ((2_000_000, None), (200_000, None)),
    "clutter": ((1_000_000, None), (200_000, None)),
    "refresh": ((1_000_000, None), (200_000, None)),
    "recipe": ((16_000_000, None), (3_000_000, None)),
    "recipe_4tiles": ((16_000_000, None), (6_000_000, None)),
    "hidden_goal": ((10_000_000, None), (200_000, None)),
}
#: the expert library files the recipes start from (experiments/experts/)
EXPERT_7X7 = "experiments/experts/goal_cycle_7x7_3agents_expert_seed0.pt"
EXPERT_7X7_4TILES = "experiments/experts/goal_cycle_7x7_4tiles_3agents_expert_6m_seed2.pt"
STAGES = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]


def linear(points: list) -> dict:
    """A linear penalty schedule through ``points``, as it composes (every field)."""
    fields = {"metric": None, "threshold": None, "values": None, "window": 1, "patience": 1}
    return {"mode": "linear", "points": points, **fields}


def gated(threshold: float) -> dict:
    """The recipes' gated penalty: a stage of 0.25 each time the training return holds."""
    return {
        "mode": "threshold",
        "points": None,
        "metric": "charts/episodic_return",
        "threshold": threshold,
        "values": STAGES,
        "window": 5,
        "patience": 3,
    }


#: full scale, small scale: the expert recipe's penalty (small: 0, held, then linear to 1.5)
RECIPE_PENALTY = (gated(10.0), linear([[0, 0.0], [300_000, 0.0], [2_000_000, 1.5]]))

SOLO = {"agent_0": "main"}


@dataclass
class Expected:
    """What a preset trains, as its header states."""

    env: str  # registered env id
    trained: dict[str, str] = field(default_factory=lambda: dict(SOLO))  # agent -> learner name
    scripted: dict[str, str] = field(default_factory=dict)  # agent -> policy
    frozen: dict[str, str] = field(default_factory=dict)  # agent -> learner in the checkpoint
    run: str = "novice"  # key of RUN
    anneal: bool = False  # the penalty curriculum
    blind: bool = False  # agent_0 cannot see the tiles
    prestige: bool = False  # the experts (agent_1, agent_2) in prestige colours
    experts: str | None = None  # the expert preset whose checkpoint it plays
    penalty: tuple[dict, dict] | None = None  # (full, small) schedule other than the anneal
    extras: tuple[str, ...] = ("reward",)  # what goal-cycle agents see beside their view
    init_from: tuple[str | None, str | None] = (None, None)  # (full, small) start weights
    n_goals: int | None = None  # the tiles, where not the task's
    terms: tuple[str, ...] = ()  # the learners' auxiliary loss terms
    tiny: tuple[str, ...] = ()  # what a two-update run adds to TINY (one agent's few chunks)


EXPECTED = {
    "expert_curriculum": Expected(CANON_3, SEPARATE, anneal=True, run="expert"),
    "expert_curriculum_shared": Expected(CANON_3, SHARED, anneal=True, run="expert"),
    "expert_fixed_penalty": Expected(CANON_3, SEPARATE, run="expert"),
    "expert_fixed_penalty_shared": Expected(CANON_3, SHARED, run="expert"),
    "goal_cycle_expert": Expected(
        CANON_3,
        SHARED,
        anneal=True,
        run="recipe",
        penalty=RECIPE_PENALTY,
        extras=("reward", "action"),
        init_from=(EXPERT_7X7, None),
    ),
    "goal_cycle_expert_fixed_penalty": Expected(
        CANON_3, SHARED, run="recipe", extras=("reward", "action"), init_from=(EXPERT_7X7, None)
    ),
    "goal_cycle_expert_4tiles": Expected(
        CANON_3,
        SHARED,
        anneal=True,
        run="recipe_4tiles",
        penalty=(gated(10.0), gated(8.0)),
        extras=("reward", "action"),
        init_from=(EXPERT_7X7_4TILES, EXPERT_7X7),
        n_goals=4,
        terms=("next_reward",),
    ),
    "goal_cycle_expert_4tiles_fixed_penalty": Expected(
        CANON_3,
        SHARED,
        run="recipe_4tiles",
        extras=("reward", "action"),
        init_from=(EXPERT_7X7_4TILES, EXPERT_7X7),
        n_goals=4,
        terms=("next_reward",),
    ),
    "solo_novice": Expected(CANON_1),
    "blind_solo_novice": Expected(CANON_1, blind=True),
    "novice_with_experts": Expected(CANON_3, scripted=ORACLES, prestige=True),
    "blind_novice_with_experts": Expected(CANON_3, scripted=ORACLES, blind=True, prestige=True),
    "prestige_on": Expected(CANON_3, scripted=ORACLES, prestige=True),
    "prestige_off": Expected(CANON_3, scripted=ORACLES),
    # a behaviour-cloning novice beside the oracles (its own preset keeps fixed colours)
    "bc_on_experts": Expected(CANON_3, scripted=ORACLES),
    "cluttered_solo": Expected(CLUTTER_1, run="clutter"),
    "cluttered_experts": Expected(CLUTTER_3, SHARED, run="clutter"),
    "hidden_goal_9x9": Expected(
        NINE_3,
        scripted=ORACLES,
        blind=True,
        prestige=True,
        run="hidden_goal",
        extras=("reward", "action"),
        tiny=("agent.num_minibatches=2",),
    ),  # fmt: skip
    "hidden_goal_9x9_solo": Expected(
        NINE_1,
        blind=True,
        run="hidden_goal",
        extras=("reward", "action"),
        tiny=("agent.num_minibatches=2",),
    ),  # fmt: skip
    "refresh_on": Expected(TWO_TILES, run="refresh"),
    "refresh_off": Expected(TWO_TILES, run="refresh"),
    "cluttered_with_experts": Expected(
        CLUTTER_3, frozen=FROZEN, run="clutter", experts="cluttered_experts"
    ),
}

#: a couple of updates: 2 envs x 16 steps per update, 2 updates
TINY = [
    "scale=small",
    "env.num_envs=2",
    "agent.num_steps=16",
    "total_timesteps=64",
    "checkpoint_every=1",
    "video=false",
    "logger.tensorboard=false",
    "logger.progress=false",
]
TINY_UPDATES, TINY_STEPS = 2, 64


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch):
    """Presets name library files relative to the repository, where train.py is run from."""
    monkeypatch.chdir(ROOT)


def _compose(overrides: list[str]) -> TrainConfig:
    import experiments.train  # noqa: F401  (registers the schema)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _newest(run_dir: Path) -> Path:
    found = list_checkpoints(run_dir / "checkpoints")
    assert found, f"no checkpoint in {run_dir}"
    return found[-1]


@pytest.fixture(scope="session")
def expert_checkpoint(tmp_path_factory) -> Callable[[str], Path]:
    """``expert_checkpoint(preset)``: the newest checkpoint of a tiny run of an expert preset
    (trained once per session)."""
    made: dict[str, Path] = {}

    def make(preset: str) -> Path:
        if preset not in made:
            run_dir = tmp_path_factory.mktemp(preset)
            train(_compose([f"experiment={preset}", *TINY, "total_timesteps=32"]), run_dir)
            made[preset] = _newest(run_dir)
        return made[preset]

    return make


# -- composing ---------------------------------------------------------------------------------


def test_every_preset_has_its_expectations():
    assert sorted(EXPECTED) == PRESETS


def _documented_commands(preset: str) -> list[list[str]]:
    """The launch commands of a preset's header, as the shell splits them (after train.py)."""
    lines = [line[1:].strip() for line in (PRESET_DIR / f"{preset}.yaml").read_text().splitlines()]
    joined = "\n".join(lines).replace("\\\n", " ")
    found = re.findall(r"^python experiments/train\.py (.*)$", joined, re.M)
    return [shlex.split(command) for command in found]


@pytest.mark.parametrize("preset", PRESETS)
def test_header_launch_commands_sweep_seeds_at_both_scales_and_compose(preset):
    header = (PRESET_DIR / f"{preset}.yaml").read_text().split("\ndefaults:")[0]
    assert header.startswith("# @package _global_\n")
    assert re.search(r"^# full: ", header, re.M) and re.search(r"^# small: ", header, re.M)
    commands = _documented_commands(preset)
    scales = set()
    for args in commands:
        seeds = [a.split("=", 1)[1].split(",") for a in args if a.startswith("seed=")]
        assert args[:2] == ["-m", f"experiment={preset}"] and len(seeds[0]) >= 3, args
        scales.add("small" if "scale=small" in args else "full")
        cfg = _compose([a for a in args if a != "-m" and not a.startswith("seed=")])
        assert cfg.name == preset
        checkpoint = [a for a in args if "checkpoint=" in a]
        if checkpoint:  # a run-directory path, quoted for Hydra: '=' and ',' survive
            path = cfg.roles["agent_1"].checkpoint
            assert path == checkpoint[0].split("=", 1)[1].strip('"'), checkpoint
            assert path.startswith("runs/multirun/") and path.endswith(".pt")
            assert cfg.roles["agent_2"].checkpoint == path
            assert [cfg.roles[a].kind for a in ("agent_1", "agent_2")] == ["frozen", "frozen"]
    assert scales == {"full", "small"}


@pytest.mark.parametrize("scale", ["full", "small"])
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_into_its_task(preset, scale):
    spec = EXPECTED[preset]
    cfg = _compose([f"experiment={preset}", f"scale={scale}"])
    small = scale == "small"
    total, anneal_end = RUN[spec.run][small]
    assert cfg.name == preset and cfg.env.id == spec.env
    assert cfg.total_timesteps == total
    assert (cfg.env.settings.get("size"), cfg.env.settings.get("max_steps")) == (
        (7, 100) if small else (None, None)
    )
    roles = {agent: (role.kind, role.learner, role.policy) for agent, role in cfg.roles.items()}
    env = marlgrid.make(cfg.env.id, **cfg.env.settings)
    for agent in env.possible_agents:  # agents without a role are driven by main
        kind, learner, policy = roles.get(agent, ("learner", "main", "oracle"))
        if agent in spec.trained:
            assert (kind, learner) == ("learner", spec.trained[agent]), agent
        elif agent in spec.scripted:
            assert (kind, policy) == ("scripted", spec.scripted[agent]), agent
        else:
            assert (kind, learner) == ("frozen", spec.frozen[agent]), agent
    extra = {n for n in spec.trained.values() if n != "main"}
    assert set(cfg.learners) == extra
    for name in extra:  # each separate expert is a copy of the agent config
        assert cfg.learners[name] == cfg.agent
    if spec.anneal:
        penalty = spec.penalty[small] if spec.penalty else linear([[0, 0.0], [anneal_end, 1.5]])
        assert dataclasses.asdict(cfg.curriculum["penalty"]) == penalty
    else:
        assert cfg.curriculum == {}
    assert cfg.init_from == spec.init_from[small]
    terms = getattr(cfg.agent, "aux_losses", [])  # learners without loss terms have none
    assert [term["name"] for term in terms] == list(spec.terms)
    # the env as built: size, penalty, per-agent sight and colours
    full_size, penalty, n_goals, full_steps = TASKS[spec.env]
    assert (env.width, env.height) == ((7, 7) if small else (full_size, full_size))
    if "GoalCycle" in spec.env:
        assert env.rules.penalty == penalty and env.rules.n_goals == (spec.n_goals or n_goals)
        assert env.max_steps == (100 if small else full_steps)
    hides = [a.hide for a in env.agent_configs]
    assert hides == [("cycle_tile",) if spec.blind and i == 0 else () for i in range(len(hides))]
    colors = [a.color for a in env.agent_configs]
    defaults = ["red", "blue", "purple"][: len(colors)]
    assert colors == (["red", "prestige", "prestige"] if spec.prestige else defaults)
    # goal cycles: every agent sees its last reward (the tiles look alike); the cluttered room
    # (one reward, at the end) keeps the bare view
    reward = spec.extras if "GoalCycle" in spec.env else ()
    assert [a.extras for a in env.agent_configs] == [reward] * len(colors)
    if "GoalCycle-13x13" in spec.env:  # the canonical view survives the per-agent settings
        assert {(a.view_size, a.view_offset) for a in env.agent_configs} == {(7, 1)}


def test_command_line_overrides_win_over_the_preset():
    cfg = _compose(
        [
            "experiment=prestige_on",
            "roles=novice_with_trained_experts",
            "roles.agent_1.checkpoint=experts.pt",
            "curriculum=penalty_anneal",
            "total_timesteps=1000",
        ]
    )
    assert cfg.name == "prestige_on" and cfg.total_timesteps == 1000
    prestige = {"color": "prestige"}
    assert cfg.env.settings == {
        "agent": {"extras": ["reward"]},
        "agents": {"agent_1": prestige, "agent_2": prestige},
    }
    # agent_2 takes agent_1's checkpoint unless given its own
    assert [(r.kind, r.checkpoint) for r in cfg.roles.values()] == [
        ("learner", None),
        ("frozen", "experts.pt"),
        ("frozen", "experts.pt"),
    ]
    assert cfg.curriculum["penalty"].points == [[0, 0.0], [200000, 1.5]]
    own = _compose(
        [
            "experiment=novice_with_experts",
            "roles=novice_with_trained_experts",
            "roles.agent_1.checkpoint=a.pt",
            "roles.agent_2.checkpoint=b.pt",
        ]
    )
    assert [own.roles["agent_1"].checkpoint, own.roles["agent_2"].checkpoint] == ["a.pt", "b.pt"]


def test_experts_in_fixed_colours_by_switching_their_prestige_off():
    """The documented switch gives novice_with_experts' env the env of prestige_off."""
    off = ["env.settings.agents.agent_1.color=null", "env.settings.agents.agent_2.color=null"]
    switched = _compose(["experiment=novice_with_experts", *off])
    assert switched.env == _compose(["experiment=prestige_off"]).env
    env = marlgrid.make(switched.env.id, **switched.env.settings)
    assert [a.color for a in env.agent_configs] == ["red", "blue", "purple"]
    blind = _compose(["experiment=blind_novice_with_experts", *off])
    env = marlgrid.make(blind.env.id, **blind.env.settings)
    assert [(a.color, a.hide) for a in env.agent_configs] == [
        ("red", ("cycle_tile",)),
        ("blue", ()),
        ("purple", ()),
    ]


def test_the_previous_action_is_one_override_away():
    cfg = _compose(["experiment=solo_novice", "env.settings.agent.extras=[reward,action]"])
    space = marlgrid.make(cfg.env.id, **cfg.env.settings).observation_space("agent_0")
    assert sorted(space.spaces) == ["action", "image", "reward"]
    assert space["action"].n == 8  # 7 actions and "none yet"


#: a library expert trained without extras (experiments/experts/README.md)
LIBRARY_EXPERT = ROOT / "experiments" / "experts" / "goal_cycle_7x7_3agents_curriculum_seed1.pt"


def _novice_beside(path: Path, *overrides: str) -> TrainConfig:
    return _compose(
        [
            "experiment=novice_with_experts",
            *TINY,
            "roles=novice_with_trained_experts",
            f"roles.agent_1.checkpoint={path}",
            *overrides,
        ]
    )


def test_a_library_expert_without_extras_plays_beside_a_novice_with_them(tmp_path):
    saved = load_checkpoint(LIBRARY_EXPERT)
    assert saved["identity"]["env"]["settings"] == {"size": 7, "max_steps": 100}  # no extras
    trainer = Trainer(_novice_beside(LIBRARY_EXPERT), tmp_path / "run")
    for agent in ("agent_0", "agent_1"):  # the env gives every agent the reward input
        assert sorted(trainer.vec.single_observation_space(agent).spaces) == ["image", "reward"]
    # both experts play the same file's one network: one group, one forward per step
    (experts,) = [g for g in trainer.groups if not g.train]
    assert experts.agents == ["agent_1", "agent_2"] and experts.name == "agent_1+agent_2"
    frozen = experts.learner
    assert frozen.keys == ()  # it sees the bare view, as in training
    for key, tensor in frozen.net.state_dict().items():
        assert torch.equal(tensor, saved["learners"]["main"]["net"][key]), key
    obs, _ = trainer.vec.reset(seed=0)
    experts.begin(obs, trainer.vec.num_envs)
    assert experts.act().shape == (2, 2)  # (envs, agents of the group)


def test_frozen_agents_share_a_group_only_when_they_play_the_same_policy_the_same_way(tmp_path):
    greedy = _novice_beside(LIBRARY_EXPERT, "roles.agent_2.deterministic=true")
    groups = [g for g in Trainer(greedy, tmp_path / "a").groups if not g.train]
    assert [g.agents for g in groups] == [["agent_1"], ["agent_2"]]
    assert [g.explore for g in groups] == [True, False]
    plain = _novice_beside(LIBRARY_EXPERT, "env.settings.agents.agent_2.color=null")
    groups = [g for g in Trainer(plain, tmp_path / "b").groups if not g.train]
    assert [g.agents for g in groups] == [["agent_1"], ["agent_2"]]  # other agent settings


def test_an_expert_trained_with_another_view_is_refused_naming_the_setting(tmp_path):
    cfg = _novice_beside(LIBRARY_EXPERT, "env.settings.agent.view_size=5")
    with pytest.raises(ConfigError, match=r"frozen agent_1: .* view_size=7 \(here 5\); give "
                       r"agent_1 .* env\.settings\.agents\.agent_1\.view_size=7"):  # fmt: skip
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_expert_trained_with_the_reward_input_needs_it(tmp_path, expert_checkpoint):
    path = expert_checkpoint("expert_curriculum_shared")  # trained with extras: [reward]
    cfg = _novice_beside(path, "env.settings.agent.extras=[]")
    with pytest.raises(ConfigError, match=r"extras=\[reward\] \(here \[\]\); give agent_1 "):
        Trainer(cfg, tmp_path / "run")


def test_trained_experts_without_a_checkpoint_are_refused(tmp_path):
    cfg = _compose(["experiment=cluttered_with_experts", *TINY])
    with pytest.raises(ConfigError, match="frozen role of agent_1 needs a checkpoint path"):
        Trainer(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


# -- a couple of updates -----------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_trains_a_couple_of_updates(preset, tmp_path, expert_checkpoint):
    spec = EXPECTED[preset]
    overrides = [f"experiment={preset}", *TINY, *spec.tiny]
    if spec.experts:
        overrides.append(f"roles.agent_1.checkpoint={expert_checkpoint(spec.experts)}")
    run_dir = tmp_path / "run"
    train(_compose(overrides), run_dir)
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows] == [32, 64]
    payload = load_checkpoint(_newest(run_dir))
    assert sorted(payload["learners"]) == sorted(set(spec.trained.values()))
    if spec.anneal:  # the penalty new episodes started with, from the small-scale schedule
        penalty = spec.penalty[1] if spec.penalty else linear([[0, 0.0], [200_000, 1.5]])
        if penalty["mode"] == "threshold":  # two tiny updates never reach the gate
            expected = [penalty["values"][0]] * 2
        else:
            steps, values = zip(*penalty["points"], strict=True)
            expected = [float(np.interp(step, steps, values)) for step in (0, 32)]
        assert [float(r["curriculum/penalty"]) for r in rows] == pytest.approx(expected)
    else:
        assert "curriculum/penalty" not in rows[0]


WARM_STARTED = [p for p in PRESETS if EXPECTED[p].init_from[0]]


@pytest.mark.parametrize("preset", WARM_STARTED)
def test_full_scale_recipe_starts_from_its_library_expert(preset, tmp_path):
    """The full-scale recipes start from a library file: it fits their task and learner (a
    loss term's head new beside it), and training goes on from its weights."""
    tiny = [override for override in TINY if override != "scale=small"]
    cfg = _compose([f"experiment={preset}", *tiny, "total_timesteps=32"])
    saved = load_checkpoint(ROOT / EXPECTED[preset].init_from[0])["learners"]["main"]["net"]
    trainer = Trainer(cfg, tmp_path / "run")
    assert list(trainer.warm_started) == ["main"]
    net = trainer.learners["main"].learner.net.state_dict()
    new = sorted(set(net) - set(saved))  # only the loss terms' heads are new
    assert all(key.startswith(EXTRA_HEADS_PREFIX) for key in new), new
    assert bool(new) == bool(EXPECTED[preset].terms)
    for key, tensor in saved.items():
        assert torch.equal(net[key], tensor), key
    trainer.run()
    assert trainer.global_step == 32


#: library experts made by the recipes: file -> the overrides that made it
RECIPE_EXPERTS = {
    "goal_cycle_7x7_3agents_expert_seed0.pt": "experiment=goal_cycle_expert scale=small seed=0",
    "goal_cycle_7x7_3agents_expert_seed1.pt": "experiment=goal_cycle_expert scale=small seed=1",
    "goal_cycle_13x13_3agents_expert_seed1.pt": "experiment=goal_cycle_expert seed=1",
    "goal_cycle_7x7_4tiles_3agents_expert_seed2.pt": "experiment=goal_cycle_expert_4tiles "
    "scale=small seed=2 total_timesteps=3000000",
    "goal_cycle_7x7_4tiles_3agents_expert_6m_seed2.pt": "experiment=goal_cycle_expert_4tiles "
    "scale=small seed=2",
}


@pytest.mark.parametrize(("file", "made_by"), RECIPE_EXPERTS.items())
def test_the_recipe_presets_are_what_trained_the_library_experts(file, made_by: str):
    """Each expert the recipes made (experiments/experts/README.md) was trained with exactly
    what its preset composes to today: task, learners, roles, batch, seed, curriculum (the
    identity a resume checks; learner settings added since the file read at their defaults)
    and budget."""
    cfg = _compose(made_by.split())
    path = ROOT / "experiments" / "experts" / file
    saved = load_checkpoint(path, identity(cfg), identity_defaults(cfg))  # raises on a mismatch
    assert cfg.total_timesteps == saved["total_timesteps"]
    with pytest.raises(CheckpointError, match="seed"):  # the check does tell seeds apart
        load_checkpoint(path, identity(dataclasses.replace(cfg, seed=cfg.seed + 1)))


@pytest.mark.parametrize(
    ("expert_preset", "plays"),
    [
        ("expert_curriculum", {"agent_1": "expert_1", "agent_2": "expert_2"}),
        ("expert_curriculum_shared", {"agent_1": "main", "agent_2": "main"}),
    ],
)
def test_novice_plays_beside_the_trained_experts_of_a_checkpoint(
    expert_preset, plays, expert_checkpoint, tmp_path
):
    path = expert_checkpoint(expert_preset)
    saved = load_checkpoint(path)["learners"]
    cfg = _compose(
        [
            "experiment=blind_novice_with_experts",
            *TINY,
            "roles=novice_with_trained_experts",
            f"roles.agent_1.checkpoint={path}",
        ]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    groups = {a: g for g in trainer.groups for a in g.agents}
    assert sorted(trainer.learners) == ["main"] and not trainer.scripted
    shared = len(set(plays.values())) == 1  # one network plays both: one group
    assert len(trainer.groups) == (2 if shared else 3)
    for agent, learner in plays.items():
        group = groups[agent]
        assert not group.train and group.agents == (sorted(plays) if shared else [agent])
        net = group.learner.net.state_dict()
        assert net.keys() == saved[learner]["net"].keys()
        for key, tensor in net.items():
            assert torch.equal(tensor, saved[learner]["net"][key]), (agent, key)
    if expert_preset == "expert_curriculum":  # the two experts really are different networks
        a, b = saved["expert_1"]["net"], saved["expert_2"]["net"]
        assert any(not torch.equal(a[k], b[k]) for k in a)
    metrics = trainer.run()
    assert trainer.global_step == TINY_STEPS and trainer.iteration == TINY_UPDATES
    assert "charts/SPS" in metrics


@pytest.mark.parametrize(("preset", "interval"), [("refresh_on", 4), ("refresh_off", 0)])
def test_refresh_presets_differ_only_in_the_refresh_interval(preset, interval):
    on, other = _compose(["experiment=refresh_on"]), _compose([f"experiment={preset}"])
    assert other.agent.refresh_interval == interval
    assert other.agent == dataclasses.replace(on.agent, refresh_interval=interval)
    assert (other.env, other.curriculum, other.roles) == (on.env, on.curriculum, on.roles)


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_train_the_fast_symbolic_torso_one_thread_per_run(preset):
    cfg = _compose([f"experiment={preset}"])
    assert cfg.torch_threads == 1  # sweeps run two at a time (benchmarks README)
    assert _compose([f"experiment={preset}", "torch_threads=2"]).torch_threads == 2
    assert cfg.agent.network.symbolic_encoder == "bag"
    assert all(c.network.symbolic_encoder == "bag" for c in cfg.learners.values())


@pytest.mark.parametrize(
    ("social", "solo"),
    [
        ("novice_with_experts", "solo_novice"),
        ("blind_novice_with_experts", "blind_solo_novice"),
        ("prestige_on", "solo_novice"),
        ("cluttered_with_experts", "cluttered_solo"),
    ],
)
def test_a_novice_beside_experts_gets_the_batch_of_its_solo_baseline(social, solo):
    for scale in ("full", "small"):
        paired = [_compose([f"experiment={p}", f"scale={scale}"]) for p in (social, solo)]
        assert paired[0].env.num_envs == paired[1].env.num_envs == 16
        assert paired[0].agent == paired[1].agent
        assert paired[0].total_timesteps == paired[1].total_timesteps
