"""A Hydra callback that ends a sweep (``train.py -m``) by pointing at its summary: the
``aggregate.py`` command that makes its tables and curves (registered in ``conf/train.yaml``)."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def aggregate_command(sweep_dir: str) -> str:
    """The command that aggregates the sweep in ``sweep_dir``."""
    return f"python experiments/aggregate.py {sweep_dir} --out {sweep_dir}/summary"


class AggregateHint(Callback):
    """Prints, once every job of a sweep has ended, how to aggregate its runs."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = str(config.hydra.sweep.dir)
        print(f"sweep done: {sweep_dir}\n  its table and curves: {aggregate_command(sweep_dir)}")
