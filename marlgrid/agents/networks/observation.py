"""Which image encoder an agent's observation settings call for, given to its network explicitly.

A marlgrid agent's ``observation`` setting says what its view is: ``symbolic`` cells, a
``onehot`` grid or ``rgb`` pixels (:data:`OBSERVATION_IMAGE_MODES` names the encoder of each).
The trainer builds every learner's network with ``network.image_mode`` set from the settings of
the agents it drives (:func:`with_observed_image_mode`), so the encoder never guesses the kind
from the view's shape (a 17-cell symbolic view is not pixels, a 15-pixel RGB view not cells).
``image_mode='auto'`` takes the settings' kind; a mode that contradicts them is refused, and an
``rgb`` view must be a whole number of ``network.tile_size`` cells. Envs without marlgrid agent
settings (POPGym, Memory Gym) keep the network's own ``image_mode``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from marlgrid.agents.networks.config import NetworkConfig
from marlgrid.config import AgentConfig, ConfigError

__all__ = ["OBSERVATION_IMAGE_MODES", "network_for_agent", "with_observed_image_mode"]

#: marlgrid's ``observation`` setting -> the ``NetworkConfig.image_mode`` that reads it
OBSERVATION_IMAGE_MODES = {"symbolic": "symbolic", "onehot": "onehot", "rgb": "pixels"}


def network_for_agent(network: NetworkConfig, agent: AgentConfig, name: str) -> NetworkConfig:
    """``network`` with the ``image_mode`` agent ``name``'s settings ``agent`` call for;
    :class:`~marlgrid.config.ConfigError` names the setting that contradicts them."""
    mode = OBSERVATION_IMAGE_MODES[agent.observation]
    if network.image_mode not in ("auto", mode):
        raise ConfigError(
            f"network.image_mode is {network.image_mode!r}, but {name} has observation="
            f"{agent.observation}, which the {mode!r} encoder reads: set "
            f"network.image_mode={mode} (or auto)"
        )
    if mode == "pixels":
        side = agent.view_size * agent.tile_size
        if side % network.tile_size:
            raise ConfigError(
                f"network.tile_size {network.tile_size} does not divide the {side}x{side} px rgb "
                f"views of {name} (view_size {agent.view_size} x tile_size {agent.tile_size}): "
                f"set network.tile_size={agent.tile_size}"
            )
    return network if network.image_mode == mode else dataclasses.replace(network, image_mode=mode)


def with_observed_image_mode(cfg: Any, vec: Any, agents: Sequence[str]) -> Any:
    """Learner config ``cfg`` with its network's ``image_mode`` taken from the observation
    settings of ``agents`` in env batch ``vec`` (its ``agent_configs``); unchanged for envs
    without them or a config without a :class:`NetworkConfig` ``network``."""
    settings = getattr(vec, "agent_configs", None)
    network = getattr(cfg, "network", None)
    if settings is None or not isinstance(network, NetworkConfig) or not agents:
        return cfg
    index = {a: k for k, a in enumerate(vec.possible_agents)}
    built = {a: network_for_agent(network, settings[index[a]], a) for a in agents}
    modes = {a: n.image_mode for a, n in built.items()}
    if len(set(modes.values())) > 1:
        raise ConfigError(
            f"agents {list(agents)} share one network but their observation settings need "
            f"different image encoders ({modes}): give them separate learner names"
        )
    resolved = built[agents[0]]
    return cfg if resolved is network else dataclasses.replace(cfg, network=resolved)
