"""Pieces shared by the environment files."""

from __future__ import annotations

from typing import Any

from pettingzoo.utils.conversions import parallel_to_aec

from marlgrid.config import MAX_SIDE, ConfigError, check_float, check_int


def clutter_count(
    width: int, height: int, n_clutter: int | None, clutter_density: float | None
) -> int:
    """Number of clutter walls from a count or a density of the map's interior."""
    if n_clutter is not None and clutter_density is not None:
        raise ConfigError(
            f"give n_clutter or clutter_density, not both (got n_clutter={n_clutter}, "
            f"clutter_density={clutter_density})"
        )
    if n_clutter is not None:
        return check_int("n_clutter", n_clutter, low=0)
    density = 0.0 if clutter_density is None else clutter_density
    density = check_float("clutter_density", density, low=0, high=1, high_open=True)
    return int(density * (width - 2) * (height - 2))


def check_fits(width: int, height: int, needed: dict[str, int]) -> None:
    """Raise when the cells ``needed`` (setting label -> cells) cannot fit inside the walls of a
    square map."""
    interior = (width - 2) * (height - 2)
    total = sum(needed.values())
    if total > interior:
        parts = " + ".join(f"{label} ({n})" for label, n in needed.items())
        raise ConfigError(
            f"{parts} need {total} cells but the {width}x{height} map (size={width}) has only "
            f"{interior} inside its walls"
        )


def clutter_label(n_clutter: int | None, clutter_density: float | None) -> str:
    """How the user asked for clutter, for error messages: ``n_clutter`` or ``clutter_density``."""
    if n_clutter is not None:
        return "n_clutter"
    return f"clutter_density={clutter_density}"


def square_size(env: str, size: Any, kwargs: dict[str, Any]) -> int:
    """Validated ``size`` of a square env; ``width`` / ``height`` settings are refused."""
    given = sorted(k for k in ("width", "height") if k in kwargs)
    if given:
        raise ConfigError(f"{env} is square: set size, not {given}")
    return check_int("size", size, low=3, high=MAX_SIDE)


def aec_from(parallel_factory):
    """An ``env(**kwargs)`` AEC factory from a ``parallel_env(**kwargs)`` factory."""

    def env(**kwargs):
        return parallel_to_aec(parallel_factory(**kwargs))

    env.__doc__ = "The AEC version of :func:`parallel_env` (PettingZoo's ``parallel_to_aec``)."
    return env
