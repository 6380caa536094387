"""``marlgrid.agents.bookkeeping.saved_run``: a run directory read back (config, checkpoints,
metrics, every role's policy), for runs with ``config.json`` and for older ones with only Hydra's
``.hydra/config.yaml``."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from marlgrid.agents.algorithms.ppo import PPOConfig  # noqa: E402
from marlgrid.agents.bookkeeping.checkpoint import list_checkpoints, load_checkpoint  # noqa: E402
from marlgrid.agents.bookkeeping.saved_run import (  # noqa: E402
    CONFIG_FILE,
    SavedRun,
    SavedRunError,
    config_data,
    train_config_from_data,
    write_run_config,
)
from marlgrid.agents.networks.models import NetworkConfig  # noqa: E402
from marlgrid.agents.training.curriculum import ScheduleConfig, checkpoint_rules  # noqa: E402
from marlgrid.agents.training.roles import RoleConfig  # noqa: E402
from marlgrid.agents.training.trainer import (  # noqa: E402
    EnvConfig,
    LoggerConfig,
    TrainConfig,
    train,
)

ROOT = Path(__file__).resolve().parents[1]
ENV = "MarlGrid-GoalCycle-13x13-3Agents-v0"
SMALL = NetworkConfig(hidden_size=16, trunk_sizes=(16,), head_sizes=(8,), conv_channels=(4,))


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _cfg(**kwargs) -> TrainConfig:
    agent = PPOConfig(network=SMALL, num_steps=8, chunk_len=4, num_minibatches=2, update_epochs=1)
    base = {
        "env": EnvConfig(ENV, num_envs=2, settings={"max_steps": 12}),
        "agent": agent,
        "total_timesteps": 32,
        "checkpoint_every": 1,
        "video": False,
        "logger": LoggerConfig(tensorboard=False, progress=False),
    }
    return TrainConfig(**{**base, **kwargs})


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, object]:
    """An expert run, then a run with every role kind: agent_0 frozen (the expert's newest
    checkpoint), agent_1 the trained learner, agent_2 scripted; a penalty curriculum."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("saved_runs")
    train(_cfg(), root / "expert")
    expert = list_checkpoints(root / "expert" / "checkpoints")[-1]
    cfg = _cfg(
        roles={
            "agent_0": RoleConfig(kind="frozen", checkpoint=str(expert), learner="main"),
            "agent_1": RoleConfig(kind="learner"),
            "agent_2": RoleConfig(kind="scripted", policy="oracle", epsilon=0.1),
        },
        curriculum={"penalty": ScheduleConfig(points=[[0, 0.0], [64, 1.0]])},
        seed=3,
    )
    train(cfg, root / "run")
    return {"cfg": cfg, "run": root / "run", "expert": expert}


def test_the_trainer_writes_the_config_as_plain_json_that_round_trips(runs):
    cfg, run_dir = runs["cfg"], runs["run"]
    saved = json.loads((run_dir / CONFIG_FILE).read_text())
    assert saved == config_data(cfg) and saved["roles"]["agent_2"]["policy"] == "oracle"
    assert saved["agent"]["network"]["trunk_sizes"] == [16]  # tuples saved as lists
    assert not list(run_dir.glob(".config_*"))  # written atomically: no temporary file left
    run = SavedRun(run_dir)
    assert run.config == saved and run.config_file == run_dir / CONFIG_FILE
    rebuilt = run.train_config
    assert rebuilt == cfg and isinstance(rebuilt.agent, PPOConfig)
    assert rebuilt.agent.network.trunk_sizes == (16,)  # tuples restored
    assert isinstance(rebuilt.curriculum["penalty"], ScheduleConfig)
    assert run.train_config is not rebuilt  # a fresh object each time: callers may edit it


def test_the_newest_checkpoint_and_a_given_one(runs):
    run_dir = runs["run"]
    found = list_checkpoints(run_dir / "checkpoints")
    run = SavedRun(run_dir)
    assert run.checkpoints == found and run.newest_checkpoint == run.checkpoint == found[-1]
    older = SavedRun(found[0])
    assert older.path == run_dir and older.checkpoint == found[0]
    assert older.newest_checkpoint == found[-1]


def test_policies_of_every_role_load_and_act(runs):
    cfg, run_dir = runs["cfg"], runs["run"]
    policies = SavedRun(run_dir).policies(greedy=True)
    assert policies.agents == ["agent_0", "agent_1", "agent_2"]
    assert {a: r.kind for a, r in policies.roles.items()} == {
        "agent_0": "frozen",
        "agent_1": "learner",
        "agent_2": "scripted",
    }
    assert sorted(g.agents[0] for g in policies.groups) == ["agent_0", "agent_1"]
    assert set(policies.scripted) == {"agent_2"}
    assert not any(g.train or g.explore for g in policies.groups)  # frozen and greedy
    payload = load_checkpoint(policies.checkpoint)
    trained = next(g for g in policies.groups if g.agents == ["agent_1"])
    weights = payload["learners"]["main"]["net"]
    assert all(torch.equal(v, weights[k]) for k, v in trained.learner.net.state_dict().items())
    # the curriculum's stage at the checkpoint: step 32 of the 0 -> 1 anneal over 64 steps
    assert policies.stage == checkpoint_rules(cfg.curriculum, payload) == {"penalty": 0.5}
    assert policies.settings == {"max_steps": 12, "penalty": 0.5}
    assert policies.learner_columns == [1]
    returns = policies.evaluate(episodes=3, seed=0, num_envs=2)
    assert returns.shape == (3, 3) and np.isfinite(returns).all()
    # rules override the curriculum's; sampled learners explore again
    sampled = SavedRun(run_dir).policies(rules={"penalty": 1.5})
    assert sampled.stage == {"penalty": 1.5}
    assert next(g for g in sampled.groups if g.agents == ["agent_1"]).explore


def test_metrics_columns_and_curves(runs):
    run = SavedRun(runs["run"])
    columns = run.metric_columns
    assert "step" not in columns and {"charts/update", "charts/SPS"} <= set(columns)
    steps, values = run.curve("charts/update")
    assert steps.tolist() == [8 * 2 * k for k in range(1, 3)] and values.tolist() == [1.0, 2.0]
    with pytest.raises(SavedRunError, match="metric 'nope' is not in"):
        run.curve("nope")


def test_the_analysis_side_reads_the_same_config(runs):
    pytest.importorskip("yaml")
    from marlgrid.analysis import find_runs
    from marlgrid.analysis.runs import COMPLETE, read_config

    assert read_config(runs["run"]) == SavedRun(runs["run"]).config
    (found,) = find_runs([runs["run"]]).runs  # no .hydra/: seed and total from config.json
    assert (found.seed, found.status, found.config["total_timesteps"]) == (3, COMPLETE, 32)


def _old_style_copy(run_dir: Path, dest: Path, text: str) -> Path:
    """``run_dir`` as a run from before config.json: only ``.hydra/config.yaml`` (``text``)."""
    shutil.copytree(run_dir, dest)
    (dest / CONFIG_FILE).unlink()
    (dest / ".hydra").mkdir()
    (dest / ".hydra" / "config.yaml").write_text(text)
    return dest


def test_an_old_run_with_only_the_hydra_config_loads(runs, tmp_path):
    omegaconf = pytest.importorskip("omegaconf")
    cfg = runs["cfg"]
    text = omegaconf.OmegaConf.to_yaml(omegaconf.OmegaConf.structured(cfg))
    old = SavedRun(_old_style_copy(runs["run"], tmp_path / "old", text))
    assert old.config_file == old.path / ".hydra" / "config.yaml"
    assert old.train_config == cfg
    policies = old.policies(greedy=True)
    assert policies.stage == {"penalty": 0.5}
    assert policies.evaluate(episodes=2, seed=1, num_envs=2).shape == (2, 3)


def test_a_hydra_record_loads_as_train_py_composed_it(tmp_path):
    """What experiments/train.py wrote before config.json: the composed config, interpolations
    (``learners.expert_1: ${agent}``) unresolved."""
    pytest.importorskip("hydra")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from experiments.train import CONF_DIR

    overrides = ["experiment=expert_curriculum", "scale=small", "run=smoke"]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        composed = compose("train", overrides=overrides)
    text = OmegaConf.to_yaml(composed)
    assert "${agent}" in text
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(text)
    expected = OmegaConf.to_object(composed)
    loaded = SavedRun(tmp_path).train_config
    # the same settings (Hydra's objects hold lists where the dataclasses declare tuples)
    assert config_data(loaded) == config_data(expected)
    assert loaded.learners["expert_1"] == loaded.agent and isinstance(loaded.agent, PPOConfig)
    assert set(loaded.roles) == set(expected.roles) and loaded.curriculum == expected.curriculum


def test_bad_paths_and_runs_give_errors_naming_them(runs, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(
        SavedRunError, match=f"{missing} is neither a run directory nor a checkpoint"
    ):
        SavedRun(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    run = SavedRun(empty)
    with pytest.raises(SavedRunError, match=f"{empty} holds neither config.json nor .hydra"):
        run.config  # noqa: B018
    with pytest.raises(SavedRunError, match=f"no checkpoints in {empty / 'checkpoints'}"):
        run.checkpoint  # noqa: B018
    with pytest.raises(SavedRunError, match=f"{empty} is not a run directory: it has no metrics"):
        run.metric_columns  # noqa: B018
    (empty / CONFIG_FILE).write_text("{not json")
    with pytest.raises(SavedRunError, match=f"{empty / CONFIG_FILE} is not valid JSON"):
        SavedRun(empty).config  # noqa: B018
    data = config_data(runs["cfg"])
    (empty / CONFIG_FILE).write_text(json.dumps({**data, "env": {**data["env"], "idd": 1}}))
    with pytest.raises(SavedRunError, match=r"config.json: env: unknown key\(s\) \['idd'\]"):
        SavedRun(empty).train_config  # noqa: B018


def test_the_evaluate_and_export_commands_name_a_bad_path(tmp_path):
    from experiments.evaluate import main as evaluate_main
    from experiments.export_expert import main as export_main

    missing = tmp_path / "nope"
    with pytest.raises(SystemExit, match=f"{missing} is neither a run directory"):
        evaluate_main([str(missing), "--episodes", "1"])
    with pytest.raises(SystemExit, match=f"no checkpoints in {tmp_path / 'checkpoints'}"):
        export_main([str(tmp_path), str(tmp_path / "out.pt")])


def test_config_data_is_json_safe_and_resolves_the_learner_configs():
    cfg = TrainConfig(env=EnvConfig(settings={"penalty": np.float64(0.5), "size": (7, 7)}))
    data = config_data(cfg)
    assert data["env"]["settings"] == {"penalty": 0.5, "size": [7, 7]}
    assert data["agent"] == json.loads(json.dumps(dataclasses.asdict(PPOConfig())))
    assert train_config_from_data(data).agent == PPOConfig()  # agent: None stands for these
    with pytest.raises(TypeError, match="cannot be saved in config.json"):
        config_data(TrainConfig(env=EnvConfig(settings={"bad": object()})))


def test_write_run_config_replaces_the_file(tmp_path):
    first = write_run_config(tmp_path, TrainConfig(total_timesteps=10))
    write_run_config(tmp_path, TrainConfig(total_timesteps=20))  # extend=true rewrites it
    assert json.loads(first.read_text())["total_timesteps"] == 20
    assert [p.name for p in tmp_path.iterdir()] == [CONFIG_FILE]


def test_an_exported_expert_file_plays_as_itself_outside_any_run(runs, tmp_path):
    from marlgrid.agents.bookkeeping.checkpoint import export_policies

    run_dir = runs["run"]
    exported = export_policies(SavedRun(run_dir).checkpoint, tmp_path / "expert.pt")
    alone = SavedRun(exported)
    assert alone.checkpoint == exported
    cfg = alone.train_config
    assert cfg.env == runs["cfg"].env and cfg.seed == 3
    assert cfg.curriculum["penalty"].points == runs["cfg"].curriculum["penalty"].points
    assert {a: r.kind for a, r in cfg.roles.items()} == {
        "agent_0": "frozen",
        "agent_1": "learner",
        "agent_2": "scripted",
    }
    # the curriculum's stage at export (step 32 of the 0 -> 1 anneal over 64 steps), as the run's
    assert alone.policies().stage == SavedRun(run_dir).policies().stage == {"penalty": 0.5}
    policies = alone.policies(greedy=True, rules={"penalty": 1.5})
    played = SavedRun(run_dir).policies(greedy=True, rules={"penalty": 1.5})
    assert policies.stage == played.stage == {"penalty": 1.5}
    mine = next(g for g in policies.groups if g.agents == ["agent_1"]).learner.net.state_dict()
    theirs = next(g for g in played.groups if g.agents == ["agent_1"]).learner.net.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in mine.items())
    np.testing.assert_array_equal(
        policies.evaluate(episodes=3, seed=0, num_envs=2),
        played.evaluate(episodes=3, seed=0, num_envs=2),
    )
    # an export kept in a folder under another run plays as itself, not as that run
    inside = runs["expert"].parent.parent / "exports" / "expert.pt"
    inside.parent.mkdir(exist_ok=True)
    shutil.copy(exported, inside)
    assert SavedRun(inside).train_config.roles == cfg.roles
    assert SavedRun(inside).train_config.roles != SavedRun(runs["expert"]).train_config.roles
    # an export without its identity cannot play: the error names the file
    from marlgrid.agents.bookkeeping.checkpoint import DIGEST_KEY, content_digest

    bare = {**torch.load(exported, weights_only=True), "identity": {}}
    bare[DIGEST_KEY] = content_digest(bare)  # a file written so, not damaged later
    torch.save(bare, tmp_path / "bare.pt")
    with pytest.raises(SavedRunError, match=f"{tmp_path / 'bare.pt'} is an exported expert file"):
        SavedRun(tmp_path / "bare.pt").config  # noqa: B018
    # a plain checkpoint file outside a run is still refused, naming the folder
    stray = tmp_path / "stray" / "x" / "ckpt.pt"
    stray.parent.mkdir(parents=True)
    shutil.copy(SavedRun(run_dir).checkpoint, stray)
    with pytest.raises(SavedRunError, match="holds neither config.json"):
        SavedRun(stray).config  # noqa: B018


def test_an_exported_next_view_novice_plays_without_its_decoder(tmp_path):
    from marlgrid.agents.bookkeeping.checkpoint import export_policies

    term = {"name": "next_view", "coef": 3.0, "options": {"loss": "l1"}}
    agent = dataclasses.replace(_cfg().agent, aux_losses=[term])
    run_dir = tmp_path / "run"
    train(_cfg(agent=agent, total_timesteps=16), run_dir)
    source = SavedRun(run_dir).checkpoint
    exported = export_policies(source, tmp_path / "novice.pt")
    assert exported.stat().st_size < source.stat().st_size
    alone, played = (
        SavedRun(exported).policies(greedy=True),
        SavedRun(run_dir).policies(greedy=True),
    )
    (mine,), (theirs,) = alone.groups, played.groups
    assert "next_view" in theirs.learner.net.extra_heads
    assert "next_view" not in mine.learner.net.extra_heads
    assert SavedRun(exported).config["learners"]["main"]["aux_losses"] == [term]  # how it trained
    np.testing.assert_array_equal(
        alone.evaluate(episodes=2, seed=0, num_envs=2),
        played.evaluate(episodes=2, seed=0, num_envs=2),
    )
