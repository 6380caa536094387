"""Checkpoints: state dicts plus counters, written atomically, loaded with ``weights_only``.

:func:`load_learners` loads one and checks its learners (:func:`check_learners`: saved configs
as a fresh config is checked, finite weights) before any network is built from it: frozen roles,
evaluation and :func:`export_policies` all read learners through it.
"""

from __future__ import annotations

import hashlib
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from marlgrid.agents.bookkeeping.run_dir import replace_atomically
from marlgrid.agents.learner import LEARNERS, load_builtin_learners
from marlgrid.agents.training.learner_checks import check_saved_learners
from marlgrid.config import ConfigError

#: 3: networks are a torso (encoder, trunk, core) plus heads, and every learner saves its own
#: config (format 2 named the parameters differently; format 1 flattened image features channel
#: by channel): older files are refused
FORMAT = 3
_NAME = re.compile(r"^ckpt_(\d{9})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: corrupt, or written by a different configuration."""


def checkpoint_path(directory: Path, update: int) -> Path:
    return Path(directory) / f"ckpt_{update:09d}.pt"


def save_checkpoint(
    directory: Path, update: int, payload: dict[str, Any], keep: int | None = 3
) -> Path:
    """Write ``payload`` as ``ckpt_<update>.pt`` atomically; keep the newest ``keep`` (>= 1)
    files, or all with ``keep=None``. The file just written and the newest are never removed.

    The file is written to a temporary name in the same folder, flushed to disk, then renamed,
    so a crash leaves either the old set of checkpoints or the new one, never a partial file.
    """
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"keep must be an integer >= 1 or None (keep all), got {keep!r}")
    directory = Path(directory)
    target = checkpoint_path(directory, update)
    write_atomically(target, payload)
    if keep is not None:
        for old in list_checkpoints(directory)[:-keep]:
            if old != target:
                old.unlink(missing_ok=True)
    return target


def write_atomically(target: Path, payload: dict[str, Any]) -> Path:
    """``torch.save`` ``payload`` (with the format number and its :func:`content_digest`) to
    ``target`` through a temporary file in the same folder, flushed and renamed: ``target`` is
    never left partly written."""
    full = {"format": FORMAT, **{k: v for k, v in payload.items() if k != DIGEST_KEY}}
    full[DIGEST_KEY] = content_digest(full)
    return replace_atomically(target, lambda f: torch.save(full, f))


#: the payload entry holding the SHA-256 of the rest (checked on load; files written before it
#: existed have none and load as before)
DIGEST_KEY = "content_sha256"


def content_digest(payload: Any) -> str:
    """SHA-256 of a checkpoint payload's content (every tensor's dtype, shape and bytes and
    every plain value, in a fixed order), leaving out :data:`DIGEST_KEY`."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, dict):
            digest.update(b"{")
            for key in sorted(value, key=repr):
                if key != DIGEST_KEY:
                    digest.update(repr(key).encode())
                    feed(value[key])
            digest.update(b"}")
        elif isinstance(value, list | tuple):
            digest.update(b"[" if isinstance(value, list) else b"(")
            for item in value:
                feed(item)
            digest.update(b"]")
        else:
            digest.update(f"{type(value).__name__}:{value!r};".encode())

    feed(payload)
    return digest.hexdigest()


#: learner-state entries only training needs: an exported policy leaves them out
TRAINING_ONLY = ("optimizer",)


def acting_state(state: dict[str, Any]) -> dict[str, Any]:
    """What acting needs of a learner's saved state: its learner class's ``acting_state``
    where it has one (by the ``algo`` of the state's config), else all but ``TRAINING_ONLY``."""
    algo = state.get("config", {}).get("algo")
    load_builtin_learners()
    spec = LEARNERS.get(str(algo))
    own = getattr(spec.build, "acting_state", None) if spec is not None else None
    if callable(own):
        return own(state)
    return {k: v for k, v in state.items() if k not in TRAINING_ONLY}


def export_policies(
    source: Path, target: Path, learners: list[str] | None = None, note: str | None = None
) -> Path:
    """Write the learners of checkpoint ``source`` (all, or those named) to ``target`` for
    acting only: no optimizer state, no replay, no RNG of the run. The file loads as a frozen
    role's checkpoint (``roles.<agent>.checkpoint=...``); it cannot resume training.

    Refused with :class:`CheckpointError`, before anything is written: learners that fail
    :func:`check_learners`, and a ``target`` that is ``source`` or lies in a run's
    ``checkpoints/`` folder (the run would take it for its newest checkpoint and fail to resume).
    The file is written atomically."""
    _check_export_target(Path(source), Path(target))
    payload = load_checkpoint(source)
    found = check_learners(payload, source, ())  # only that it holds learners
    names = list(found) if learners is None else learners
    missing = [n for n in names if n not in found]
    if missing or not names:
        raise CheckpointError(
            f"checkpoint {source} holds learners {sorted(found)}; cannot export {missing or names}"
        )
    check_learners(payload, source, names)
    policies = {name: acting_state(found[name]) for name in names}
    exported = {
        "identity": payload.get("identity", {}),
        "learners": policies,
        "update": payload.get("update"),
        "global_step": payload.get("global_step"),
        "total_timesteps": payload.get("total_timesteps"),
        "exported_from": str(source),
    }
    if "curriculum" in payload:
        exported["curriculum"] = payload["curriculum"]
    if note:
        exported["note"] = note
    return write_atomically(target, exported)


def _check_export_target(source: Path, target: Path) -> None:
    """Refuse to export onto ``source`` or into a run's ``checkpoints/`` folder."""
    if target.exists() and target.resolve() == source.resolve():
        raise CheckpointError(f"{target} is the checkpoint being exported; write to another file")
    if target.is_dir():
        raise CheckpointError(f"{target} is a folder; give the file to write (OUT.pt)")
    folder = target.absolute().parent
    run = folder.parent
    is_run = any((run / name).exists() for name in ("config.json", ".hydra", "metrics.csv"))
    if folder.name == "checkpoints" and (is_run or list_checkpoints(folder)):
        raise CheckpointError(
            f"{target} is in the checkpoints folder of run {run}: the run would take an exported "
            "policy there for its own checkpoint and could not resume from it. Write it "
            "elsewhere (e.g. experiments/experts/NAME.pt)"
        )


def check_learners(
    payload: dict[str, Any], path: str | Path, names: Iterable[str] | None = None
) -> dict[str, Any]:
    """The learners of checkpoint ``payload`` (read from ``path``), checked by
    :func:`~marlgrid.agents.training.learner_checks.check_saved_learners`: those in ``names``
    (default all) hold a config that passes the checks a fresh one gets and finite weights.
    Raises :class:`CheckpointError` naming the file and the first key at fault."""
    try:
        return check_saved_learners(payload, names)
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None


def load_learners(path: str | Path, names: Iterable[str] | None = None) -> dict[str, Any]:
    """:func:`load_checkpoint` of ``path``, its learners (``names``, default all) checked by
    :func:`check_learners`: what may be built into networks."""
    payload = load_checkpoint(path)
    check_learners(payload, path, names)
    return payload


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in ``directory``, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def load_checkpoint(
    path: Path,
    expected_config: dict[str, Any] | None = None,
    defaults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True)``.

    With ``expected_config``, the settings that shape the networks and the task must match the
    ones the checkpoint was written with; otherwise :class:`CheckpointError` names the first
    difference. A setting the checkpoint does not record (one added to marlgrid since) counts
    as its value in ``defaults`` (the same layout), so older runs still resume while they use
    it at its default. The file is never modified. A missing file raises "checkpoint <path> not
    found". The learners are not checked here: :func:`load_learners` does that.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} not found")
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a folder, not a checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        refused = _refused_object(str(exc))
        if refused is not None:
            raise CheckpointError(
                f"checkpoint {path} was refused: it holds a Python object that is not plain "
                f"data ({refused}), so loading it could run code. marlgrid only loads tensors "
                "and plain containers, and never writes such objects: this file was not "
                "written by marlgrid or was altered. Do not load it"
            ) from None
        raise _unreadable(path, f"UnpicklingError: {_without_hint(str(exc))}") from None
    except Exception as exc:
        raise _unreadable(path, f"{type(exc).__name__}: {_without_hint(str(exc))}") from exc
    if not isinstance(payload, dict) or "format" not in payload:
        raise CheckpointError(f"{path} is not a marlgrid checkpoint (format {FORMAT})")
    if payload["format"] != FORMAT:
        raise CheckpointError(
            f"checkpoint {path} has format {payload['format']!r}; this version of marlgrid reads "
            f"format {FORMAT} only (older networks are laid out differently). "
            "Retrain, or use another run name (name=...) or resume=false to start over"
        )
    if DIGEST_KEY in payload and content_digest(payload) != payload[DIGEST_KEY]:
        raise CheckpointError(
            f"checkpoint {path}: its content does not match the digest it was written with "
            f"({DIGEST_KEY}): the file was altered or damaged after it was saved. Do not use "
            "it; resume from an older checkpoint or export the expert again"
        )
    if expected_config is not None:
        diff = first_difference(payload.get("identity", {}), expected_config, defaults=defaults)
        if diff is not None:
            key, saved, now = diff
            raise CheckpointError(
                f"checkpoint {path} was written by a different configuration: {key} is "
                f"{saved!r} there but {now!r} now. Use another run name (name=...) or "
                "resume=false to start over"
            )
    return payload


def _unreadable(path: Path, reason: str) -> CheckpointError:
    """The error of a file that cannot be read, with the advice that fits where it lies: in a
    run's ``checkpoints/`` folder (resume from the previous one) or elsewhere (an exported
    expert: export or fetch it again)."""
    if _NAME.match(path.name) and path.parent.name == "checkpoints":
        advice = (
            "Other checkpoints in its folder are untouched: remove this one to resume from the "
            "previous one"
        )
    else:
        advice = "It is not a run's checkpoint: export it again, or restore it from git"
    return CheckpointError(
        f"checkpoint {path} cannot be read ({reason}); it may be truncated or corrupt. {advice}"
    )


def _refused_object(message: str) -> str | None:
    """What torch's weights-only unpickler refused (``GLOBAL posix.system``...), if it did."""
    match = re.search(r"(?:unsupported|Unsupported global:)\s*(GLOBAL\s+[\w.<>]+)", message)
    if match:
        return match.group(1)
    if "Weights only load failed" in message and "GLOBAL" in message:
        return "an unsupported GLOBAL"
    return None


def _without_hint(message: str) -> str:
    """``message`` without torch's advice to retry with ``weights_only=False``."""
    kept = [
        part.strip()
        for part in message.split("\n\n")
        if part.strip() and "weights_only" not in part and "torch.load" not in part
    ]
    return " ".join(kept) or "unreadable pickle data"


def first_difference(
    saved: Any, now: Any, prefix: str = "", defaults: Any = None
) -> tuple[str, Any, Any] | None:
    """The first differing key of two nested dicts, as ``(dotted.key, saved, now)``.

    A key missing from ``saved`` takes its value from ``defaults`` (same nesting) when given.
    """
    if isinstance(saved, dict) and isinstance(now, dict):
        defaults = defaults if isinstance(defaults, dict) else {}
        for key in sorted(set(saved) | set(now), key=str):
            old = saved[key] if key in saved else defaults.get(key)
            diff = first_difference(old, now.get(key), f"{prefix}{key}.", defaults.get(key))
            if diff is not None:
                return diff
        return None
    if isinstance(saved, list | tuple) and isinstance(now, list | tuple):
        saved, now = list(saved), list(now)
    return None if saved == now else (prefix.rstrip("."), saved, now)
