"""What learners need of a network, as protocols: PPO and the hidden-state refresh are typed to
these, not to a class (any network registered with
:func:`~marlgrid.agents.networks.registry.register_network` that has these members will do)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from marlgrid.agents.arrays import Obs
    from marlgrid.agents.memory import MemoryCore
    from marlgrid.agents.networks.models import Torso
    from marlgrid.agents.networks.registry import NetOutput

__all__ = ["PolicyValueNet", "ValueNet"]


class ValueNet(Protocol):
    """What the hidden-state refresh (:func:`~marlgrid.agents.algorithms.refresh.refresh_rollout`)
    needs: the torso and the value head."""

    torso: Torso

    def heads(self, core_out: Tensor, policy: bool = True) -> tuple[Tensor | None, Tensor]: ...


class PolicyValueNet(ValueNet, Protocol):
    """What :class:`~marlgrid.agents.algorithms.ppo.PPO` needs of its network (an ``nn.Module``).

    ``act``/``step`` run one step for a batch; ``evaluate`` gives ``(logits, values)`` of
    sequences and ``output`` a :class:`NetOutput` (with the extra heads' outputs, which read the
    one-hot of ``actions``), both by the core's fastest path.
    """

    action_start: int
    extra_heads: nn.ModuleDict

    @property
    def state_size(self) -> int: ...

    @property
    def memory(self) -> MemoryCore: ...

    def initial_state(self, batch_size: int) -> Tensor: ...

    def log_prob_entropy(self, logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]: ...

    def act(
        self,
        obs: Obs,
        state: Tensor,
        resets: Tensor | None = None,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]: ...

    def step(
        self, obs: Obs, state: Tensor, resets: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]: ...

    def evaluate(self, obs: Obs, state: Tensor, resets: Tensor) -> tuple[Tensor, Tensor]: ...

    def output(
        self, obs: Obs, state: Tensor, resets: Tensor, actions: Tensor | None = None
    ) -> NetOutput: ...

    # the nn.Module members PPO uses
    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any: ...

    def to(self, *args: Any, **kwargs: Any) -> Any: ...
