"""Sequence replay: layout, episode boundaries, padding, priorities, refresh and checkpoints.

Observations encode where a step comes from, ``[slot, episode, t, is_final_row]``, so every
window can be checked against the ground truth of the scripted episodes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.learner import Step
from marlgrid.agents.networks.models import NetworkConfig, Torso
from marlgrid.agents.returns import n_step_returns
from marlgrid.agents.storage.sequence_replay import SequenceReplay, sequence_priority
from marlgrid.agents.storage.state_refresh import refresh_states

torch.set_num_threads(1)

SPACE = spaces.Box(-1e6, 1e6, (4,), np.float32)
S = 3  # state size of the scripted "actor": [slot + 1, episode + 1, t]


def make_step(obs, state, resets, actions, rewards, term, trunc, valid=None, final=None) -> Step:
    """A :class:`Step` from numpy arrays; ``final``: ``{slot: obs}`` of truncated slots."""
    B = len(resets)
    ids = sorted(final or {})
    final_obs = torch.tensor(np.stack([final[i] for i in ids])) if ids else None
    as_t = torch.as_tensor
    return Step(
        obs=as_t(obs),
        resets=as_t(resets),
        state=as_t(state),
        actions=as_t(actions),
        extras={},
        rewards=as_t(rewards, dtype=torch.float32),
        terminations=as_t(term),
        truncations=as_t(trunc),
        valid=as_t(np.ones(B, bool) if valid is None else valid),
        next_obs=as_t(obs),
        next_state=as_t(state),
        final_ids=torch.tensor(ids, dtype=torch.long),
        final_obs=final_obs,
    )


@dataclass
class Script:
    """Random episodes for ``B`` slots: ends by termination, truncation (with or without a final
    observation), idle out-of-play stretches after an end; ground truth in ``episodes``."""

    B: int
    seed: int = 0
    p_end: float = 0.15
    episodes: dict = field(default_factory=dict)  # (slot, ep) -> [length, kind]

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.ep = np.zeros(self.B, int)
        self.t = np.zeros(self.B, int)
        self.idle = np.zeros(self.B, int)
        self.fresh = np.ones(self.B, bool)

    def obs(self, b: int, t: int | None = None, final: bool = False) -> np.ndarray:
        return np.array([b, self.ep[b], self.t[b] if t is None else t, final], np.float32)

    def step(self) -> Step:
        B, rng = self.B, self.rng
        obs = np.stack([self.obs(b) for b in range(B)])
        valid = self.idle == 0
        resets = self.fresh & valid
        state = np.stack([[b + 1, self.ep[b] + 1, self.t[b]] for b in range(B)]).astype(np.float32)
        state[resets] = 0.0  # the state used after a reset
        u = rng.random(B)
        term = valid & (u < self.p_end / 2)
        trunc = valid & ~term & (u < self.p_end)
        final = {}
        for b in range(B):
            if not valid[b]:
                self.idle[b] -= 1
                continue
            self.fresh[b] = False
            self.episodes.setdefault((b, self.ep[b]), [0, None])[0] += 1
            if term[b] or trunc[b]:
                kind = "term" if term[b] else "trunc"
                if trunc[b] and rng.random() < 0.7:
                    final[b] = self.obs(b, self.t[b] + 1, final=True)
                elif trunc[b]:
                    kind = "cut"  # a truncation without a final observation
                self.episodes[(b, self.ep[b])][1] = kind
                self.ep[b] += 1
                self.t[b] = 0
                self.idle[b] = rng.integers(0, 3)
                self.fresh[b] = True
            else:
                self.t[b] += 1
        actions = (obs[:, 2] % 3).astype(np.int64)
        rewards = obs[:, 2] + 1.0  # reward of step t is t + 1
        return make_step(obs, state, resets, actions, rewards, term, trunc, valid, final)


def filled(replay_kwargs: dict, B: int = 3, steps: int = 300, seed: int = 0):
    replay = SequenceReplay(capacity=B * 1000, num_slots=B, observation_space=SPACE,
                            state_size=S, num_actions=3, **replay_kwargs)  # fmt: skip
    script = Script(B, seed)
    for _ in range(steps):
        replay.add(script.step())
    return replay, script


CFG = dict(seq_len=6, burn_in=2, overlap=2, n_step=2)  # period 4: every step trains exactly once


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sequences_never_cross_episode_ends_and_cover_every_step_once(seed: int) -> None:
    replay, script = filled(CFG, seed=seed)
    replay.cut_open_episodes()
    for b in range(script.B):  # the open episodes were cut: their end kind is now a cut
        if script.episodes.get((b, script.ep[b]), [0, None])[1] is None:
            script.episodes[(b, script.ep[b])][1] = "cut"
    batch = replay.gather(replay.sequence_ids())
    obs, mask = batch.obs.numpy(), batch.mask.numpy()
    trained = []
    for i in range(obs.shape[1]):
        rows = obs[:, i]
        slot, ep, t0 = rows[0, :3].astype(int)
        length, kind = script.episodes[(slot, ep)]
        assert t0 % 4 == 0 and rows[0, 3] == 0
        n_real = min(6, length - t0)  # steps of the sequence: it stops at the episode end
        np.testing.assert_array_equal(
            rows[:n_real, :3], [[slot, ep, t0 + j] for j in range(n_real)]
        )
        burn = 0 if t0 == 0 else 2
        expect = np.zeros(len(rows), bool)
        expect[burn:n_real] = True
        if kind == "cut":  # no observation follows a cut: its last n = 2 steps have no target
            expect[max(length - t0 - 2, 0) :] = False
        np.testing.assert_array_equal(mask[:, i], expect)
        if n_real < 6:  # the episode ends inside: its end flags sit on its last step
            assert batch.dones[n_real - 1, i] and not batch.dones[: n_real - 1, i].any()
            assert bool(batch.terminations[n_real - 1, i]) == (kind == "term")
            if kind == "trunc":  # the next row holds the true final observation
                np.testing.assert_array_equal(rows[n_real], [slot, ep, length, 1])
        state = batch.state[i].numpy()
        np.testing.assert_array_equal(state, [0, 0, 0] if t0 == 0 else [slot + 1, ep + 1, t0])
        assert bool(batch.fresh[i]) == (t0 == 0)
        assert not batch.resets[1:, i].any() and bool(batch.resets[0, i]) == (t0 == 0)
        trained += [(slot, ep, int(t)) for t in rows[mask[:, i], 2]]
    expected = []
    for (slot, ep), (length, kind) in script.episodes.items():
        usable = length - 2 if kind == "cut" else length
        expected += [(slot, ep, t) for t in range(usable)]
    assert sorted(trained) == sorted(expected)  # every step once; idle steps never


def test_n_step_targets_in_a_window_stop_at_termination_and_bootstrap_at_truncation() -> None:
    """One slot: episode 0 terminates after 3 steps, episode 1 truncates after 2 (final row).

    Window of the sequence at episode 0 step 0 (seq_len 4, n 2): rows 0..2 are episode 0, row 3+
    episode 1 (padding). With V(row) = 10 * (row + 1) and gamma 0.5:
      t0: 1 + 0.5*2 + 0.25*V(row 2)=30*0.25  -> 1 + 1 + 7.5 = 9.5
      t1: 2 + 0.5*3 (terminated at t2: no bootstrap)  -> 3.5
      t2: 3 (terminated)  -> 3.0
    Sequence at episode 1 step 0: rows 0, 1 are its steps, row 2 the final observation:
      t0: 1 + 0.5*2 + 0.25*V(row 2)=30*0.25 -> 9.5 (bootstrap from the final observation)
      t1: 2 + 0.5*V(row 2)=30*0.5 -> 17.0
    """
    replay = SequenceReplay(64, 1, SPACE, S, 3, seq_len=4, n_step=2)
    zero = np.zeros((1, S), np.float32)
    f = np.array([False])
    for t in range(3):  # episode 0
        ob = np.array([[0, 0, t, 0]], np.float32)
        replay.add(make_step(ob, zero, [t == 0], [0], [t + 1.0], [t == 2], f))
    for t in range(2):  # episode 1
        ob = np.array([[0, 1, t, 0]], np.float32)
        final = {0: np.array([0, 1, 2, 1], np.float32)} if t == 1 else None
        replay.add(make_step(ob, zero, [t == 0], [0], [t + 1.0], f, [t == 1], final=final))
    batch = replay.gather(replay.sequence_ids())
    W = batch.rewards.shape[0]
    v = 10.0 * (torch.arange(W, dtype=torch.float32) + 1).unsqueeze(1).expand(W, 2)
    next_v = torch.cat([v[1:], torch.zeros(1, 2)])
    g, k = n_step_returns(batch.rewards, next_v, batch.terminations, batch.dones, 0.5, 2)
    m = batch.mask
    assert m.sum(0).tolist() == [3, 2]
    torch.testing.assert_close(g[:, 0][m[:, 0]], torch.tensor([9.5, 3.5, 3.0]))
    torch.testing.assert_close(g[:, 1][m[:, 1]], torch.tensor([9.5, 17.0]))
    assert k[:, 0][m[:, 0]].tolist() == [2, 2, 1] and k[:, 1][m[:, 1]].tolist() == [2, 1]


def test_full_sequences_wait_for_their_look_ahead() -> None:
    """A sequence inside a long episode is sampled only once n_step more steps exist."""
    replay = SequenceReplay(256, 1, SPACE, S, 3, seq_len=4, n_step=3)
    zero = np.zeros((1, S), np.float32)
    f = np.array([False])
    ready_at = []
    for t in range(12):
        ob = np.array([[0, 0, t, 0]], np.float32)
        replay.add(make_step(ob, zero, [t == 0], [0], [1.0], f, f))
        ready_at.append(replay.num_sequences)
    # sequence k starts at 4k and needs rows 4k .. 4k + 6: ready after step 4k + 6
    assert ready_at == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    batch = replay.gather(replay.sequence_ids())
    np.testing.assert_array_equal(batch.obs[:, 1, 2].numpy(), np.arange(4, 11))
    assert batch.mask[:4].all() and not batch.mask[4:].any() and not batch.dones.any()


def test_a_reset_inside_a_window_is_padding_and_a_reset_on_an_open_episode_cuts_it() -> None:
    """Episode 0 runs 5 steps, then the slot resets with no end recorded (e.g. a resumed run):
    the episode is cut, its last n steps lose their targets; the next episode's rows in the
    window are padding: no mask, no reset flag inside, and the n-step sums never reach them."""
    replay = SequenceReplay(128, 1, SPACE, S, 3, seq_len=8, n_step=2)
    zero = np.zeros((1, S), np.float32)
    f = np.array([False])
    for ep, length in ((0, 5), (1, 9)):
        for t in range(length):
            ob = np.array([[0, ep, t, 0]], np.float32)
            replay.add(make_step(ob, zero, [t == 0], [0], [100.0 * ep + 1], f, f))
    replay.cut_open_episodes()
    batch = replay.gather(replay.sequence_ids())
    first = int(np.flatnonzero(batch.obs[0, :, 1].numpy() == 0)[0])
    assert batch.mask[:, first].tolist() == [True] * 3 + [False] * 7  # 5 steps, last 2 cut
    assert batch.dones[4, first] and not batch.terminations[:, first].any()
    assert not batch.resets[1:, first].any()
    next_v = torch.zeros_like(batch.rewards)
    g, _ = n_step_returns(batch.rewards, next_v, batch.terminations, batch.dones, 1.0, 2)
    assert g[:, first][batch.mask[:, first]].max() == 2.0  # never 100: episode 1 not reached


def test_out_of_play_steps_create_no_learning_steps() -> None:
    replay = SequenceReplay(128, 2, SPACE, S, 3, seq_len=4, n_step=1)
    zero = np.zeros((2, S), np.float32)
    f = np.zeros(2, bool)
    for t in range(10):
        ob = np.array([[0, 0, t, 0], [1, 0, t, 0]], np.float32)
        valid = np.array([True, t < 3])  # slot 1 leaves play after its step 2
        replay.add(make_step(ob, zero, [t == 0, t == 0], [0, 0], [1.0, 1.0], f, f, valid))
    replay.cut_open_episodes()
    batch = replay.gather(replay.sequence_ids())
    slot1 = batch.obs[:, :, 0] == 1
    steps1 = batch.obs[:, :, 2][slot1 & batch.mask]
    assert sorted(steps1.tolist()) == [0.0, 1.0]  # steps 0..2, cut: last (n=1) step has no target
    assert replay.steps_added == 13


def test_sequence_priority_hand_computed_and_padding_ignored() -> None:
    td = torch.tensor([[1.0, 4.0], [3.0, 99.0], [2.0, 99.0]])  # column 1: rows 1, 2 are padding
    mask = torch.tensor([[True, True], [True, False], [True, False]])
    p = sequence_priority(td, mask, eta=0.9)
    torch.testing.assert_close(p, torch.tensor([0.9 * 3 + 0.1 * 2, 4.0]))
    torch.testing.assert_close(sequence_priority(td, mask, eta=0.0), torch.tensor([2.0, 4.0]))
    empty = sequence_priority(td, torch.zeros_like(mask), 0.9)
    assert empty.tolist() == [0.0, 0.0]


def test_priorities_land_on_their_own_sequences_whatever_the_padding() -> None:
    """One priority per sampled sequence, written at its own id (RLlib #27544 shifted them)."""
    replay, _ = filled(dict(seq_len=6, burn_in=0, overlap=0, n_step=1, alpha=1.0, eps=1e-9))
    ids = replay.sequence_ids()
    n_seq = len(ids)
    assert replay.num_sequences == n_seq  # exactly one sampler item per kept sequence
    batch = replay.gather(ids)
    lengths = batch.mask.sum(0).numpy()
    assert lengths.min() < 6 <= lengths.max()  # padded and full sequences side by side
    prio = torch.tensor(lengths * 10.0 + ids, dtype=torch.float64)
    replay.update_priorities(batch.indices, prio)
    leaves = replay.sampler.tree.get(ids)
    np.testing.assert_allclose(leaves, prio.numpy(), rtol=1e-9)
    others = np.setdiff1d(np.arange(replay.max_sequences), ids)
    assert not replay.sampler.tree.get(others).any()  # padding made no priority of its own
    draws = replay.sample(20_000, 0.4, np.random.default_rng(0)).indices.numpy()
    freq = np.bincount(draws, minlength=replay.max_sequences)[ids] / len(draws)
    np.testing.assert_allclose(freq, leaves / leaves.sum(), atol=0.01)


def test_eviction_keeps_every_sampled_window_intact() -> None:
    replay = SequenceReplay(3 * 40, 3, SPACE, S, 3, seq_len=6, burn_in=2, overlap=2, n_step=2)
    script = Script(3, seed=5)
    for _ in range(400):
        replay.add(script.step())
        if replay.num_sequences:
            batch = replay.gather(replay.sequence_ids())
            obs, mask = batch.obs.numpy(), batch.mask.numpy()
            for i in range(obs.shape[1]):
                rows = obs[:, i][mask[:, i]]
                assert (rows[:, :2] == rows[0, :2]).all()  # one slot, one episode
                assert (np.diff(rows[:, 2]) == 1).all()  # consecutive, nothing overwritten
    assert replay.rec_row.max() > replay.rows  # the ring wrapped


def test_bytes_per_step_matches_the_documented_formula() -> None:
    space = spaces.Box(0, 255, (7, 7, 3), np.uint8)
    replay = SequenceReplay(40_000, 4, space, 256, 7, seq_len=40, overlap=20, burn_in=20)
    per_record = 4 * 256 + 54
    expected = 147 + 11 + per_record * replay.max_sequences / replay.capacity
    assert replay.max_sequences == 2 * 40_000 // 20
    assert abs(replay.bytes_per_step() - expected) / expected < 0.05
    assert replay.obs.dtype == np.uint8


def test_state_dict_round_trip_gives_identical_samples() -> None:
    replay, script = filled(CFG, steps=150)
    replay.update_priorities(replay.sequence_ids(), np.arange(replay.num_sequences) + 1.0)
    buf = io.BytesIO()
    torch.save(replay.state_dict(), buf)
    buf.seek(0)
    loaded = SequenceReplay(3 * 1000, 3, SPACE, S, 3, **CFG)
    loaded.load_state_dict(torch.load(buf, weights_only=True))
    for _ in range(2):
        a = replay.sample(16, 0.5, np.random.default_rng(3))
        b = loaded.sample(16, 0.5, np.random.default_rng(3))
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        step = script.step()  # both keep filling the same way
        replay.add(step)
        loaded.add(step)
    with pytest.raises(ValueError, match="shape"):
        SequenceReplay(3 * 1000, 3, SPACE, S, 3, seq_len=8).load_state_dict(replay.state_dict())


def _actor_fill(torso: Torso, replay: SequenceReplay, steps: int, B: int, seed: int) -> None:
    """Run ``torso`` as the actor over random episodes and record every step with its state."""
    rng = np.random.default_rng(seed)
    state = torso.initial_state(B)
    resets = np.ones(B, bool)
    for _ in range(steps):
        obs = rng.normal(size=(B, 4)).astype(np.float32)
        used = state.masked_fill(torch.as_tensor(resets).unsqueeze(-1), 0.0)
        with torch.no_grad():
            _, new = torso.step(torch.as_tensor(obs), state, torch.as_tensor(resets))
        term = rng.random(B) < 0.05
        f = np.zeros(B, bool)
        replay.add(make_step(obs, used.numpy(), resets, np.zeros(B, int), np.zeros(B), term, f))
        state, resets = new, term


def test_refresh_recomputes_stored_states_and_reports_staleness() -> None:
    torch.manual_seed(0)
    cfg = NetworkConfig(memory="lstm", hidden_size=8, trunk_sizes=(8,))
    old, new = Torso(SPACE, cfg), Torso(SPACE, cfg)
    replay = SequenceReplay(4 * 200, 4, SPACE, old.state_size, 3, seq_len=6, burn_in=2, overlap=2)
    _actor_fill(old, replay, 120, 4, seed=0)

    def unroll_with(torso: Torso):
        return lambda obs, s, r: torso.chunk_unroll(obs, s, r, replay.period).final

    same = refresh_states(replay, unroll_with(old))  # the actor's own network: nothing changes
    assert same["count"] > 20 and same["cos"] == pytest.approx(1.0, abs=1e-5)
    assert same["mse"] < 1e-10
    stale = refresh_states(replay, unroll_with(new))
    assert stale["cos"] < 0.99 and stale["mse"] > 1e-4
    # every refreshed state equals the new network run over the episode from its start
    ids = replay.sequence_ids()
    batch = replay.gather(ids)
    expect = torch.zeros(len(ids), old.state_size)
    for i, rid in enumerate(ids):
        b, s = int(replay.rec_slot[rid]), int(replay.rec_s[rid])
        start = int(replay.rec_row[rid]) - s  # the episode's first row
        rows = np.arange(start, start + s) % replay.rows
        if s == 0:
            continue
        x = torch.as_tensor(replay.obs[rows, b]).unsqueeze(1)
        first = torch.zeros(s, 1, dtype=torch.bool)
        first[0] = True
        with torch.no_grad():
            _, expect[i] = new(x, new.initial_state(1), first)
    torch.testing.assert_close(batch.state, expect, atol=1e-5, rtol=1e-5)
