"""Memoryless PPO against PPO-LSTM on ``env=goal_cycle_7x7_3tiles`` at the default budget.

Skipped: the data do not support the separation this test checks. Over 5 seeds at 300k steps
(``experiments/results/memory_default.md``) PPO-LSTM ends at 5.63-7.53 and memoryless PPO at
4.87-7.62: two memoryless seeds end above the bound and above most LSTM seeds, so no bound
separates the learners on this task. Run once at full budget (seed 0, 848 s under load) it
passed (memoryless 4.94, LSTM 5.67), but only because of the seed it uses. It is kept, skipped,
for a task where 5 memoryless seeds all stay below 5 recurrent ones (then set the task and the
bound from those runs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hydra")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from experiments.plot_curves import read_curve  # noqa: E402
from marlgrid.agents.trainer import TrainConfig, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The default run's budget (293 updates of 16 envs x 64 steps). Over 5 seeds the two lines do
# not separate at this budget (the 3-seed gap after about 130k steps did not hold up).
BUDGET = 300_000  # env steps
LAST = 50  # updates averaged (the write-up's "final return")
BOUND = 5.4  # mean episode return; random policy about 0.4, discoverer 9.4, oracle 12.1


def _config(agent: str) -> TrainConfig:
    import experiments.train  # noqa: F401  (registers the schemas)

    overrides = [
        "env=goal_cycle_7x7_3tiles",
        f"agent={agent}",
        "seed=0",
        f"total_timesteps={BUDGET}",
        f"checkpoint_every={10**6}",
        "video=false",
        "logger.progress=false",
        "logger.tensorboard=false",
    ]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose("train", overrides=overrides))


def _final_return(agent: str, run_dir: Path) -> float:
    train(_config(agent), run_dir)
    _, values = read_curve(run_dir, "charts/episodic_return")
    return float(np.mean(values[-LAST:]))


@pytest.mark.slow
@pytest.mark.skip(
    reason="no bound separates memoryless PPO from PPO-LSTM on goal_cycle_7x7_3tiles over 5 "
    "seeds (memoryless up to 7.62, LSTM down to 5.63): see experiments/results/memory_default.md"
)
def test_memoryless_ppo_stays_below_the_bound_that_ppo_lstm_passes(tmp_path):
    memoryless = _final_return("ppo_mlp", tmp_path / "mlp")
    recurrent = _final_return("ppo_lstm", tmp_path / "lstm")
    assert memoryless < BOUND < recurrent, (memoryless, recurrent)
