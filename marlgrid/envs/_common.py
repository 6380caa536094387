"""Pieces shared by the environment files."""

from __future__ import annotations

from pettingzoo.utils.conversions import parallel_to_aec

from marlgrid.config import ConfigError, check_float, check_int


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
        check_int("n_clutter", n_clutter, low=0)
        return n_clutter
    density = 0.0 if clutter_density is None else clutter_density
    check_float("clutter_density", density, low=0.0)
    if density >= 1.0:
        raise ConfigError(f"clutter_density must be in [0, 1), got {density}")
    return int(density * (width - 2) * (height - 2))


def check_fits(width: int, height: int, needed: int, what: str) -> None:
    """Raise when ``needed`` cells cannot fit inside the map's walls."""
    interior = (width - 2) * (height - 2)
    if needed > interior:
        raise ConfigError(
            f"{what} need {needed} cells but the {width}x{height} map has only {interior} "
            "inside its walls"
        )


def aec_from(parallel_factory):
    """An ``env(**kwargs)`` AEC factory from a ``parallel_env(**kwargs)`` factory."""

    def env(**kwargs):
        return parallel_to_aec(parallel_factory(**kwargs))

    env.__doc__ = "The AEC version of :func:`parallel_env` (PettingZoo's ``parallel_to_aec``)."
    return env
