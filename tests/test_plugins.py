"""Outside code from the command line: ``plugins=[module]`` (marlgrid.plugins)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.schemas import check_group_overrides, plugin_overrides
from marlgrid.config import ConfigError
from marlgrid.plugins import check_plugin_names, load_plugins

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "experiments" / "examples" / "plugin" / "myext.py"


def test_plugin_names_are_checked_and_a_missing_module_is_named(tmp_path, monkeypatch):
    assert check_plugin_names(None) == [] and check_plugin_names(["a.b", "c"]) == ["a.b", "c"]
    for bad in ("myext", ["my-ext"], [3]):
        with pytest.raises(ConfigError, match="plugins"):
            check_plugin_names(bad)
    with pytest.raises(ConfigError, match="cannot import module 'no_such_plugin_xyz'.*PYTHONPATH"):
        load_plugins(["no_such_plugin_xyz"])
    # a plugin whose own import fails keeps its traceback (the missing module is not the plugin)
    (tmp_path / "broken_plugin_xyz.py").write_text("import not_installed_anywhere_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="not_installed_anywhere_xyz"):
        load_plugins(["broken_plugin_xyz"])


def test_plugin_overrides_are_read_from_the_command_line():
    assert plugin_overrides(["plugins=[a,b.c]", "seed=1"]) == ["a", "b.c"]
    assert plugin_overrides(["plugins=a"]) == ["a"]
    assert plugin_overrides(["seed=1"]) == []


def test_a_config_folder_on_hydra_searchpath_adds_group_choices(tmp_path):
    conf_dir = ROOT / "conf"
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "my_room.yaml").write_text("# @package _global_\nseed: 3\n")
    searchpath = f"hydra.searchpath=[file://{tmp_path}]"
    check_group_overrides(conf_dir, [searchpath, "experiment=my_room"])  # accepted
    with pytest.raises(ConfigError, match="my_room"):  # its choices are listed with conf/'s
        check_group_overrides(conf_dir, [searchpath, "experiment=nope"])
    with pytest.raises(ConfigError, match="experiment='my_room'"):  # not without the path
        check_group_overrides(conf_dir, ["experiment=my_room"])


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_outside_code_trains_then_its_run_evaluates_and_continues(tmp_path):
    """The acceptance: a module outside the package registers an env, a scripted policy, a loss
    term and a memory core; train.py trains with all four from the command line, then the run
    summary's evaluate and continue commands work on the run (the module on PYTHONPATH)."""
    ext = tmp_path / "ext"
    ext.mkdir()
    shutil.copy(EXAMPLE, ext / "myext.py")
    work = tmp_path / "work"
    work.mkdir()
    # the module's folder on the path, then this checkout (the package the test imports)
    env = {**os.environ, "PYTHONPATH": f"{ext}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    train = [
        sys.executable, str(ROOT / "experiments" / "train.py"), "plugins=[myext]",
        "env.id=MyExt-Room-v0", "roles=novice_with_expert", "roles.agent_0.policy=spinner",
        "agent.network.memory=leaky", "agent.aux_losses=[{name: value_l2, coef: 0.01}]",
        "total_timesteps=2048", "video=false", "logger.progress=false", "logger.tensorboard=false",
    ]  # fmt: skip
    summary = _run(train, work, env)
    commands = dict(re.findall(r"^  (evaluate|continue) +(.+)$", summary, re.MULTILINE))
    assert set(commands) == {"evaluate", "continue"}, summary
    run_dir = next(work.glob("runs/default/*/seed_0"))
    config = (run_dir / "config.json").read_text()
    assert '"plugins": [\n    "myext"\n  ]' in config
    assert "losses/value_l2" in (run_dir / "metrics.csv").read_text().splitlines()[0]

    evaluate = shlex.split(commands["evaluate"])
    out = _run([sys.executable, *evaluate[1:], "--episodes", "3"], work, env)
    assert "MyExt-Room-v0" in out and "agent_0 (scripted)" in out
    out = _run([sys.executable, *shlex.split(commands["continue"])[1:]], work, env)
    assert "run complete at update 4 (step 4096)" in out
    # without the module on the path, reading the run back says what is missing
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, *evaluate[1:]], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0 and "cannot import module 'myext'" in done.stderr


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import experiments.train  # noqa: F401  (registers the schemas)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def test_any_agent_takes_a_scripted_policy_on_the_command_line_without_a_preset():
    from marlgrid.agents.training.roles import as_role

    cfg = _compose(["env.id=MarlGrid-Empty-8x8-3Agents-v0", "roles.agent_0.kind=scripted",
                    "roles.agent_0.policy=goal_seeker", "roles.agent_2.epsilon=0.1"])  # fmt: skip
    assert as_role(cfg.roles["agent_0"]).policy == "goal_seeker"
    assert as_role(cfg.roles["agent_2"]).kind == "learner"  # the other fields keep defaults
    with pytest.raises(ConfigError, match=r"role of agent_0 has no settings \['polcy'\]"):
        as_role({"kind": "scripted", "polcy": "oracle"}, "agent_0")
    preset = _compose(["roles=novice_with_experts", "roles.agent_1.policy=discoverer"])
    assert as_role(preset.roles["agent_1"]).policy == "discoverer"


def test_runs_saved_before_plugins_existed_pool_with_runs_that_name_none():
    from marlgrid.analysis.runs import config_differences

    old, new = {"seed": 1, "total_timesteps": 5}, {"seed": 2, "total_timesteps": 5, "plugins": []}
    assert config_differences([old, new]) == []  # a run from before plugins had none
    assert config_differences([old, {**new, "plugins": ["myext"]}]) == ["plugins"]
