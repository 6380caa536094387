"""R2D2-style sequence replay, filled one step at a time for every slot of a batch.

**Layout.** Steps are kept once, in one ring column per slot: ``R = capacity // num_slots`` rows,
time-major ``(R, num_slots, ...)`` numpy arrays (observations in their own dtype, uint8 for
marlgrid). Each slot writes its own column at its own pace: a step the slot took out of play
(``valid`` false) writes nothing, and a truncated step is followed by one extra *final row*
holding the true last observation (no action, no reward), so the observation that follows step
``t`` always sits in row ``t + 1`` of the column.

**Sequences.** Inside an episode, a sequence starts at episode steps ``0, p, 2p, ...`` with
period ``p = seq_len - overlap``; it covers up to ``seq_len`` steps and never crosses the
episode's end (a shorter last sequence is padded). A sequence is a *record* (start row, slot,
length, the memory state the actor used at its first step, and whether that step started an
episode); its sample is a window of ``W = seq_len + n_step`` rows from the start row, so the
targets of its last steps can look ``n_step`` rows ahead. Rows past the episode's end are
padding: they never count as steps (mask), never feed a target (the n-step sums stop at the
episode's end) and never set a priority. A sequence joins the sampler (at the running max
priority) once its window is known: when its episode has ended, or ``n_step`` steps after its
last step. The first ``burn_in`` steps of a sequence are burn-in (no loss, no priority), except
for a sequence that starts an episode: its stored state is exact, so all its steps train.
Sequences without a step to train are not kept.

**Episode ends.** A termination stops the n-step sums; a truncation bootstraps from its final
row; an episode that is *cut* (the slot resets, or leaves play, with no end recorded, e.g. after
resuming from a checkpoint; or a truncation without a final observation) has no bootstrap
observation, so the steps whose n-step horizon reaches the cut are masked.

**Eviction.** Writing a row drops the sequence that started there (its oldest row). Records are a
second ring of ``max_sequences`` entries; when it is full the oldest record is dropped first.

**Memory use** (bytes per step of ``capacity``, see :meth:`SequenceReplay.bytes_per_step`):
``obs_bytes + a + 10`` per row (``a``: 1 byte per action up to 256 actions, else 8; then 4
reward, 1 kind, 1 reset flag, 4 sequence index), plus ``4 * state_size + 54`` bytes per record
(state, record fields, sampler trees; up to 86 when ``max_sequences`` is just above a power of
2) times ``max_sequences / capacity`` records per step (default ``2 / period``). Example:
marlgrid's 7x7x3 uint8 view, 7 actions, an LSTM of 128 (state 256 floats), period 20:
``147 + 11 + (1024 + 54) / 10 = 266`` bytes per step, 27 MB for 100k steps. Final rows share
the ring, one per truncated episode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from marlgrid.agents.arrays import Obs, alloc_obs, obs_copy_, obs_index, tree_map
from marlgrid.agents.learner import Step
from marlgrid.agents.storage.priority import PrioritizedSampler

CONTINUES, TERMINATED, TRUNCATED, CUT = 0, 1, 2, 3  #: per-row episode-end kind


class SequenceSample(NamedTuple):
    """A batch of ``N`` sequence windows of ``W = seq_len + n_step`` rows, time-major."""

    obs: Obs  #: ``(W, N, ...)`` observations, stored dtype
    #: ``(W, N)`` bool: the first row starts an episode (the core resets there); later rows are
    #: never set: a window holds one episode, the rows past its end are padding
    resets: Tensor
    actions: Tensor  #: ``(W, N)`` long
    rewards: Tensor  #: ``(W, N)`` float32
    terminations: Tensor  #: ``(W, N)`` bool: the step ended its episode by termination
    dones: Tensor  #: ``(W, N)`` bool: the step ended its episode (termination, truncation, cut)
    mask: Tensor  #: ``(W, N)`` bool: the steps that enter the loss and the priorities
    state: Tensor  #: ``(N, S)`` the memory state the actor used at the first step
    fresh: Tensor  #: ``(N,)`` bool: the sequence starts an episode (no burn-in)
    indices: Tensor  #: ``(N,)`` long sequence ids, for :meth:`SequenceReplay.update_priorities`
    weights: Tensor  #: ``(N,)`` float32 importance-sampling weights (1 when uniform)


def sequence_priority(td_abs: Tensor, mask: Tensor, eta: float) -> Tensor:
    """R2D2's ``eta * max|delta| + (1 - eta) * mean|delta|`` per column over the masked steps.

    ``td_abs``, ``mask``: ``(T, N)``; a column without a masked step gets 0.
    """
    m = mask.to(td_abs.dtype)
    count = m.sum(0)
    mean = (td_abs * m).sum(0) / count.clamp(min=1.0)
    peak = torch.where(mask, td_abs, torch.zeros_like(td_abs)).amax(0)
    return torch.where(count > 0, eta * peak + (1.0 - eta) * mean, torch.zeros_like(mean))


def _numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


class SequenceReplay:
    """Sequence replay over ``num_slots`` slots (see the module docstring).

    ``capacity`` is in rows (steps plus final rows) over all slots; ``max_sequences`` (0: auto,
    ``2 * capacity // period``) bounds the records. Sampling is prioritized (``alpha``, ``eps``,
    ``is_norm``) or ``uniform`` through :class:`PrioritizedSampler`.
    """

    def __init__(
        self,
        capacity: int,
        num_slots: int,
        observation_space: spaces.Space,
        state_size: int,
        num_actions: int,
        seq_len: int,
        burn_in: int = 0,
        overlap: int = 0,
        n_step: int = 1,
        max_sequences: int = 0,
        alpha: float = 0.6,
        eps: float = 1e-6,
        is_norm: str = "buffer",
        uniform: bool = False,
    ) -> None:
        if not 0 <= burn_in < seq_len or not 0 <= overlap < seq_len or n_step < 1:
            raise ValueError("need 0 <= burn_in < seq_len, 0 <= overlap < seq_len, n_step >= 1")
        self.seq_len, self.burn_in, self.n_step = seq_len, burn_in, n_step
        self.period, self.window = seq_len - overlap, seq_len + n_step
        self.num_slots, self.state_size = num_slots, state_size
        R = self.rows = capacity // num_slots
        if self.rows < 2 * self.window:
            raise ValueError(
                f"capacity {capacity} gives {R} rows per slot; need >= {2 * self.window}"
            )
        self.capacity = R * num_slots
        M = self.max_sequences = max_sequences or max(2 * self.capacity // self.period, 1)
        B = num_slots
        self.obs = tree_map(lambda t: t.numpy(), alloc_obs(observation_space, (R, B), "cpu"))
        self.actions = np.zeros((R, B), dtype=np.uint8 if num_actions <= 256 else np.int64)
        self.rewards = np.zeros((R, B), dtype=np.float32)
        self.kinds = np.zeros((R, B), dtype=np.uint8)
        self.resets = np.zeros((R, B), dtype=np.bool_)
        self.seq_at = np.full((R, B), -1, dtype=np.int32)  # record starting at a row, or -1
        # per slot: next absolute row, the open episode's first row and its step count
        self.ptr = np.zeros(B, dtype=np.int64)
        self.ep_start = np.zeros(B, dtype=np.int64)
        self.ep_step = np.zeros(B, dtype=np.int64)
        self.open = np.zeros(B, dtype=np.bool_)
        # records
        self.rec_row = np.full(M, -1, dtype=np.int64)  # absolute start row, -1: free
        self.rec_slot = np.zeros(M, dtype=np.int32)
        self.rec_s = np.zeros(M, dtype=np.int32)  # episode step of the first step
        self.rec_len = np.zeros(M, dtype=np.int32)  # steps (0 while pending)
        self.rec_state = np.zeros((M, state_size), dtype=np.float32)
        self.rec_fresh = np.zeros(M, dtype=np.bool_)
        self.rec_in = np.zeros(M, dtype=np.bool_)  # in the sampler
        self.rec_next = 0
        self.steps_added = 0  # valid steps recorded, in total
        self.sampler = PrioritizedSampler(M, alpha=alpha, eps=eps, is_norm=is_norm, uniform=uniform)

    # -- size --------------------------------------------------------------------------------

    @property
    def num_sequences(self) -> int:
        """Sequences that can be sampled."""
        return self.sampler.size

    def bytes_per_step(self) -> float:
        """Bytes held per row of capacity (arrays, records and sampler; see the module doc)."""
        arrays = [self.actions, self.rewards, self.kinds, self.resets, self.seq_at]
        arrays += [self.rec_row, self.rec_slot, self.rec_s, self.rec_len, self.rec_state]
        arrays += [self.rec_fresh, self.rec_in]
        total = sum(a.nbytes for a in arrays) + self.sampler.nbytes
        leaves = self.obs.values() if isinstance(self.obs, dict) else [self.obs]
        return (total + sum(a.nbytes for a in leaves)) / self.capacity

    # -- writing -----------------------------------------------------------------------------

    def add(self, step: Step) -> None:
        """Record one step of every slot (steps out of play are skipped)."""
        valid = _numpy(step.valid).astype(bool)
        resets = _numpy(step.resets).astype(bool)
        term = _numpy(step.terminations).astype(bool)
        trunc = _numpy(step.truncations).astype(bool) & ~term
        cut = self.open & (~valid | resets)
        if cut.any():
            self._cut(np.flatnonzero(cut))
        v = np.flatnonzero(valid)
        if not len(v):
            return
        begin = v[~self.open[v]]
        self.ep_start[begin], self.ep_step[begin], self.open[begin] = self.ptr[begin], 0, True
        final_ids = _numpy(step.final_ids).astype(np.int64)
        has_final = np.zeros(self.num_slots, dtype=bool)
        if step.final_obs is not None:
            has_final[final_ids] = True
        else:
            final_ids = final_ids[:0]
        kinds = np.where(term, TERMINATED, np.where(trunc, np.where(has_final, TRUNCATED, CUT), 0))
        obs = tree_map(_numpy, step.obs)
        actions, rewards = _numpy(step.actions)[v], _numpy(step.rewards)[v]
        self._write(v, obs_index(obs, v), actions, rewards, kinds[v], resets[v])
        starts = v[self.ep_step[v] % self.period == 0]
        if len(starts):
            fresh = resets[starts] & (self.ep_step[starts] == 0)
            self._new_records(starts, _numpy(step.state)[starts], fresh)
        self.ptr[v] += 1
        self.ep_step[v] += 1
        self.steps_added += len(v)
        pos = np.flatnonzero(valid[final_ids] & trunc[final_ids])  # positions in final_obs
        if len(pos):
            self._write_final_rows(final_ids[pos], obs_index(tree_map(_numpy, step.final_obs), pos))
        self._ready_inside(v)
        ended = v[kinds[v] != CONTINUES]
        if len(ended):
            self._resolve(ended, kinds[ended] == CUT)

    def _write(
        self, slots: np.ndarray, obs: Any, actions: Any, rewards: Any, kinds: Any, resets: Any
    ) -> None:
        """Write one row per slot at its pointer, dropping the sequence that started there."""
        rows = self.ptr[slots] % self.rows
        old = self.seq_at[rows, slots]
        hit = old >= 0
        if hit.any():
            ids, s = old[hit], slots[hit]
            self._drop(
                ids[(self.rec_row[ids] == self.ptr[s] - self.rows) & (self.rec_slot[ids] == s)]
            )
            self.seq_at[rows[hit], s] = -1
        obs_copy_(self.obs, (rows, slots), obs)
        self.actions[rows, slots] = actions
        self.rewards[rows, slots] = rewards
        self.kinds[rows, slots] = kinds
        self.resets[rows, slots] = resets

    def _write_final_rows(self, slots: np.ndarray, final_obs: Any) -> None:
        """After truncated steps: a row with the true final observation (no action, reward)."""
        zero = np.zeros(len(slots))
        self._write(slots, final_obs, zero, zero, zero, np.zeros(len(slots), dtype=bool))
        self.ptr[slots] += 1

    def _new_records(self, slots: np.ndarray, states: np.ndarray, fresh: np.ndarray) -> None:
        ids = (self.rec_next + np.arange(len(slots))) % self.max_sequences
        self.rec_next = int(ids[-1] + 1) % self.max_sequences
        self._drop(ids[self.rec_row[ids] >= 0])
        self.rec_row[ids], self.rec_slot[ids] = self.ptr[slots], slots
        self.rec_s[ids], self.rec_len[ids] = self.ep_step[slots], 0
        self.rec_state[ids], self.rec_fresh[ids] = states, fresh
        self.seq_at[self.ptr[slots] % self.rows, slots] = ids

    def _drop(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        self.sampler.remove(ids[self.rec_in[ids]])
        self.rec_in[ids] = False
        self.rec_row[ids] = -1

    def _record_at(self, slots: np.ndarray, ep_steps: np.ndarray) -> np.ndarray:
        """Live record ids starting at episode step ``ep_steps`` of each slot's episode (or -1)."""
        abs_rows = self.ep_start[slots] + ep_steps
        ids = self.seq_at[abs_rows % self.rows, slots].astype(np.int64)
        ok = (ids >= 0) & (self.rec_row[ids] == abs_rows) & (self.rec_slot[ids] == slots)
        return np.where(ok, ids, -1)

    def _ready_inside(self, slots: np.ndarray) -> None:
        """Full-length sequences whose ``n_step`` rows of look-ahead were just written."""
        s = self.ep_step[slots] - self.window
        ok = (s >= 0) & (s % self.period == 0)
        if ok.any():
            ids = self._record_at(slots[ok], s[ok])
            ids = ids[ids >= 0]
            self._finalize(ids, np.full(len(ids), self.seq_len), np.full(len(ids), 1 << 30))

    def _resolve(self, slots: np.ndarray, cuts: np.ndarray) -> None:
        """Close the episodes of ``slots`` (their last step is written): ready their sequences.

        ``cuts[i]``: slot ``i``'s episode was cut (no observation follows its last step).
        """
        self.open[slots] = False
        for b, cut in zip(slots.tolist(), cuts.tolist(), strict=True):
            E = int(self.ep_step[b])
            first = max(E - self.window + 1, 0)
            s = np.arange(-(-first // self.period) * self.period, E, self.period)
            if not len(s):
                continue
            ids = self._record_at(np.full(len(s), b), s)
            ok = ids >= 0
            ep_left = E - s[ok]  # steps from the sequence start to the episode end
            # a cut leaves the steps whose n-step horizon reaches it without a target
            usable = ep_left - self.n_step if cut else ep_left
            self._finalize(ids[ok], np.minimum(ep_left, self.seq_len), usable)

    def _finalize(self, ids: np.ndarray, lengths: np.ndarray, usable: np.ndarray) -> None:
        """Set lengths; add sequences with a step to train to the sampler, drop the others."""
        burn = np.where(self.rec_fresh[ids], 0, self.burn_in)
        keep = np.minimum(lengths, usable) > burn
        self.rec_len[ids] = lengths
        self._drop(ids[~keep])
        ids = ids[keep]
        self.rec_in[ids] = True
        self.sampler.add(ids)

    def _cut(self, slots: np.ndarray) -> None:
        """End the open episodes of ``slots`` at their last written step, with no bootstrap."""
        rows = (self.ptr[slots] - 1) % self.rows
        self.kinds[rows, slots] = CUT
        self._resolve(slots, np.ones(len(slots), dtype=bool))

    def cut_open_episodes(self) -> None:
        """Close every open episode as cut (e.g. before the envs restart after a resume)."""
        if self.open.any():
            self._cut(np.flatnonzero(self.open))

    # -- reading -----------------------------------------------------------------------------

    def _windows(self, ids: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Ring rows and slots ``(length, N)`` of the windows starting at records ``ids``."""
        rows = (self.rec_row[ids][None, :] + np.arange(length)[:, None]) % self.rows
        return rows, np.broadcast_to(self.rec_slot[ids][None, :], rows.shape)

    def sequence_ids(self) -> np.ndarray:
        """Ids of the sequences that can be sampled."""
        return np.flatnonzero(self.rec_in)

    def sample(
        self,
        n: int,
        beta: float,
        rng: np.random.Generator,
        device: torch.device | str = "cpu",
    ) -> SequenceSample:
        """``n`` sequences drawn by priority (or uniformly), as tensors on ``device``."""
        ids, weights = self.sampler.sample(n, beta, rng)
        return self.gather(ids, weights, device)

    def gather(
        self, ids: Any, weights: Any = None, device: torch.device | str = "cpu"
    ) -> SequenceSample:
        """The windows of sequences ``ids`` (weights 1 unless given)."""
        ids = np.asarray(ids, dtype=np.int64)
        weights = np.ones(len(ids)) if weights is None else np.asarray(weights)
        rows, cols = self._windows(ids, self.window)
        kinds = self.kinds[rows, cols]
        dones = kinds != CONTINUES
        t = np.arange(self.window)[:, None]
        burn = np.where(self.rec_fresh[ids], 0, self.burn_in)
        mask = (t >= burn) & (t < self.rec_len[ids])
        # no target where the n-step horizon runs into a cut (no observation follows it)
        alive, cut_ahead = np.ones_like(dones), np.zeros_like(dones)
        for i in range(self.n_step):
            k = kinds[i:]
            cut_ahead[: self.window - i] |= alive[: self.window - i] & (k == CUT)
            alive[: self.window - i] &= k == CONTINUES
        mask &= ~cut_ahead

        def put(x: np.ndarray, dtype: torch.dtype | None = None) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(x)).to(device=device, dtype=dtype)

        return SequenceSample(
            obs=tree_map(put, obs_index(self.obs, (rows, cols))),
            resets=put(self.resets[rows, cols] & (t == 0)),
            actions=put(self.actions[rows, cols], torch.long),
            rewards=put(self.rewards[rows, cols]),
            terminations=put(kinds == TERMINATED),
            dones=put(dones),
            mask=put(mask),
            state=put(self.rec_state[ids]),
            fresh=put(self.rec_fresh[ids]),
            indices=put(ids),
            weights=put(weights, torch.float32),
        )

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Raw priorities of sampled sequences (those dropped since are ignored)."""
        self.sampler.update(_numpy(indices), _numpy(priorities))

    # -- checkpoints -------------------------------------------------------------------------

    _ARRAYS = (
        *("actions", "rewards", "kinds", "resets", "seq_at"),
        *("ptr", "ep_start", "ep_step", "open"),
        *("rec_row", "rec_slot", "rec_s", "rec_len", "rec_state", "rec_fresh", "rec_in"),
    )
    _SHAPE = (
        *("rows", "num_slots", "seq_len", "burn_in", "period", "n_step"),
        *("max_sequences", "state_size"),
    )

    def state_dict(self) -> dict[str, Any]:
        """Everything as CPU tensors and ints (``torch.load(weights_only=True)`` loads it)."""
        copy = lambda a: torch.from_numpy(np.array(a))  # noqa: E731
        return {
            "shape": {k: int(getattr(self, k)) for k in self._SHAPE},
            "obs": tree_map(copy, self.obs),
            "arrays": {k: copy(getattr(self, k)) for k in self._ARRAYS},
            "rec_next": self.rec_next,
            "steps_added": self.steps_added,
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the replay's shape must match)."""
        shape = {k: int(getattr(self, k)) for k in self._SHAPE}
        saved = {k: int(v) for k, v in state["shape"].items()}
        if saved != shape:
            raise ValueError(f"replay state has shape {saved}, this replay has {shape}")
        obs_copy_(self.obs, slice(None), tree_map(_numpy, state["obs"]))
        for k in self._ARRAYS:
            getattr(self, k)[...] = _numpy(state["arrays"][k])
        self.rec_next, self.steps_added = int(state["rec_next"]), int(state["steps_added"])
        self.sampler.load_state_dict(state["sampler"])
