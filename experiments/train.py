"""Train agents in a marlgrid environment (Hydra entry point).

    python experiments/train.py                                 # the default experiment
    python experiments/train.py agent=ppo_gru env=goal_cycle_13x13 seed=3
    python experiments/train.py agent=drqn                      # recurrent DQN instead of PPO
    python experiments/train.py -m seed=0,1 hydra/launcher=joblib    # a sweep

The run directory (``runs/<name>/seed_<seed>`` by default) holds the composed config
(``.hydra/``), ``metrics.csv``, TensorBoard events, checkpoints and videos. Running the same
command again resumes from the newest checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from marlgrid.agents.learner import LEARNERS, load_builtin_learners
from marlgrid.agents.trainer import TrainConfig, train

load_builtin_learners()
store = ConfigStore.instance()
store.store(name="train_schema", node=TrainConfig)
for algo, spec in LEARNERS.items():  # one schema per algorithm: agent=<preset> is checked by it
    store.store(group="agent", name=f"{algo}_schema", node=spec.config)


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float:
    config: TrainConfig = OmegaConf.to_object(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        metrics = train(config, run_dir)
    except KeyboardInterrupt:
        sys.exit(130)
    return float(metrics.get("charts/episodic_return", float("nan")))


if __name__ == "__main__":
    main()
