"""The check every learner that trains on sequence chunks shares (PPO, behaviour cloning).

An update cuts each of ``columns`` stored sequences of ``num_steps`` steps into
``ceil(num_steps / chunk_len)`` chunks and deals them into ``num_minibatches`` minibatches;
:func:`check_chunking` refuses settings that cannot do that, naming ``<key>.<field>``.
"""

from __future__ import annotations

from marlgrid.config import ConfigError, check_int

__all__ = ["check_chunking"]


def check_chunking(
    key: str,
    num_steps: int,
    chunk_len: int,
    num_minibatches: int,
    columns: int | None = None,
    columns_text: str = "num_envs * agents",
    kind: str = "trajectory",
) -> None:
    """Raise :class:`~marlgrid.config.ConfigError` for a bad ``num_steps`` / ``chunk_len`` /
    ``num_minibatches``; with ``columns`` (the sequences of one update, described as
    ``columns_text``), also where an update has fewer chunks than minibatches."""
    check_int(f"{key}.num_steps", num_steps, low=1)
    check_int(f"{key}.chunk_len", chunk_len, low=1)
    if chunk_len > num_steps:
        raise ConfigError(
            f"{key}.chunk_len must be <= {key}.num_steps ({num_steps}), got {chunk_len}"
        )
    check_int(f"{key}.num_minibatches", num_minibatches, low=1)
    if columns is None:
        return
    per_column = -(-num_steps // chunk_len)
    chunks = per_column * columns
    if num_minibatches > chunks:
        raise ConfigError(
            f"{key}.num_minibatches must be <= the {kind} chunks of one update, "
            f"ceil(num_steps / chunk_len) * ({columns_text}) = {per_column} * {columns} = "
            f"{chunks}, got {num_minibatches}"
        )
