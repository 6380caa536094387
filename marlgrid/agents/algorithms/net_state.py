"""What every learner made of one network (its memory core inside), an optimizer, a torch RNG and
counters shares: memory states and checkpoints.

:class:`NetworkLearnerState` gives such a learner (PPO, behaviour cloning) ``initial_state`` and
``reset_state`` (the network's memory core owns them), and ``state_dict`` / ``acting_state`` /
``load_state_dict``: the network, the optimizer, the
generator, every counter named in ``COUNTERS`` and the config as plain data
(``torch.load(weights_only=True)`` loads it). An exported policy (``acting_state``) drops the
optimizer and the heads only loss terms use, and loading it restores the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

__all__ = ["NetworkLearnerState"]


class NetworkLearnerState:
    """Mixin: checkpoints of a learner with ``net``, ``optimizer``, ``generator``, ``cfg`` and
    the integer counters of :attr:`COUNTERS`."""

    #: integer attributes saved and restored with the network
    COUNTERS: ClassVar[tuple[str, ...]] = ("num_updates",)
    WEIGHTS: ClassVar[tuple[str, ...]] = ("net",)  # what init_from takes (warm_start.py)

    def initial_state(self, num_slots: int) -> Tensor:
        """Zero memory state for ``num_slots`` slots."""
        me: Any = self
        return me.net.initial_state(num_slots)

    def reset_state(self, state: Tensor, resets: Tensor) -> Tensor:
        """``state`` with the slots where ``resets`` is set reset by the memory core."""
        me: Any = self
        return me.net.memory.reset_state(state, resets)

    def state_dict(self) -> dict[str, Any]:
        """Network, optimizer, RNG, counters and config."""
        me: Any = self
        return {
            "net": me.net.state_dict(),
            "optimizer": me.optimizer.state_dict(),
            "generator": me.generator.get_state(),
            **{name: getattr(self, name) for name in self.COUNTERS},
            "config": dataclasses.asdict(me.cfg),
        }

    @staticmethod
    def acting_state(state: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` without what only training needs: the optimizer, and the loss terms of
        ``config.aux_losses`` with the heads they added to the network (``extra_heads.<name>``
        entries that ``config.network.extra_heads`` does not configure). Acting never calls
        those heads; a next-view decoder is about half of a novice's weights."""
        acting = {k: v for k, v in state.items() if k != "optimizer"}
        config = state.get("config")
        if not isinstance(config, Mapping) or not config.get("aux_losses"):
            return acting
        own = set((config.get("network") or {}).get("extra_heads") or {})
        acting["config"] = {**config, "aux_losses": []}
        acting["net"] = {k: v for k, v in state["net"].items() if not _term_head(k, own)}
        return acting

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the config entry is informational)."""
        me: Any = self
        me.net.load_state_dict(state["net"])
        if "optimizer" in state:  # absent from an exported policy (acting only)
            me.optimizer.load_state_dict(state["optimizer"])
        me.generator.set_state(state["generator"])
        for name in self.COUNTERS:
            setattr(self, name, int(state[name]))


def _term_head(key: str, own: set[str]) -> bool:
    """Whether network entry ``key`` belongs to an extra head that is not one of ``own`` (the
    configured heads), i.e. one a loss term added."""
    parts = key.split(".")
    return len(parts) > 2 and parts[0] == "extra_heads" and parts[1] not in own
