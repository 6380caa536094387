"""SumTree and PrioritizedSampler against brute-force numpy computations."""

from __future__ import annotations

import io

import numpy as np
import pytest

from marlgrid.agents.storage import PrioritizedSampler, SumTree

# Upper 0.1% points of the chi-square distribution, by degrees of freedom (computed once with
# mpmath's regularised incomplete gamma; scipy is not a dependency).
CHI2_999 = {13: 34.528, 34: 65.247, 49: 85.351}


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def brute_find(leaves: np.ndarray, u: np.ndarray) -> np.ndarray:
    """searchsorted on the cumulative sums; past the total, the last positive leaf."""
    idx = np.searchsorted(np.cumsum(leaves), u, side="right")
    return np.minimum(idx, np.flatnonzero(leaves > 0)[-1])


def filled_tree(leaves: np.ndarray) -> SumTree:
    tree = SumTree(len(leaves))
    tree.update(np.arange(len(leaves)), leaves)
    return tree


def assert_consistent(tree: SumTree) -> None:
    """Every inner node is the sum (and min) of its children; leaves past capacity are empty."""
    b = tree._base
    s, m = tree._sum, tree._min
    np.testing.assert_array_equal(s[1:b], s[2 : 2 * b : 2] + s[3 : 2 * b : 2])
    np.testing.assert_array_equal(m[1:b], np.minimum(m[2 : 2 * b : 2], m[3 : 2 * b : 2]))
    np.testing.assert_array_equal(m[b:], np.where(s[b:] > 0, s[b:], np.inf))
    assert not s[b + tree.capacity :].any()


LEAVES16 = np.array([3, 0, 1, 7, 2, 2, 0.5, 9, 4, 1, 6, 0.25, 5, 8, 3, 1], dtype=float)
LEAVES16[[1, 6]] = 0.0  # 14 positive leaves: 13 degrees of freedom


def test_stratified_frequencies_match_priorities() -> None:
    tree, rng = filled_tree(LEAVES16), np.random.default_rng(1)
    counts = np.zeros(16)
    for _ in range(1000):  # 64k draws
        np.add.at(counts, tree.sample_stratified(64, rng), 1)
    assert counts[[1, 6]].sum() == 0
    pos = LEAVES16 > 0
    stat = chi_square(counts[pos], LEAVES16[pos] / LEAVES16.sum())
    assert stat < CHI2_999[13], stat


def test_iid_find_frequencies_match_priorities() -> None:
    tree, rng = filled_tree(LEAVES16), np.random.default_rng(2)
    counts = np.bincount(tree.find(rng.random(64_000) * tree.total), minlength=16)
    pos = LEAVES16 > 0
    assert counts[~pos].sum() == 0
    assert chi_square(counts[pos], LEAVES16[pos] / LEAVES16.sum()) < CHI2_999[13]


@pytest.mark.parametrize("capacity", [1, 2, 5, 16, 37, 1000])
def test_find_matches_searchsorted_at_exact_boundaries(capacity: int) -> None:
    """Integer leaves make every sum exact, so boundaries and the total are hit exactly."""
    rng = np.random.default_rng(capacity)
    leaves = rng.integers(0, 5, capacity).astype(float)
    leaves[rng.integers(capacity)] = 3.0  # at least one positive leaf
    tree = filled_tree(leaves)
    cums = np.cumsum(leaves)
    eighths = rng.integers(0, 8 * cums[-1], 200) / 8  # exact in float64, like the sums
    u = np.concatenate([[0.0], cums, np.maximum(cums - 0.5, 0), [cums[-1] + 1], eighths])
    np.testing.assert_array_equal(tree.find(u), brute_find(leaves, u))
    assert tree.total == cums[-1]


def test_find_matches_searchsorted_on_random_floats() -> None:
    rng = np.random.default_rng(3)
    for capacity in (3, 64, 777):
        leaves = rng.random(capacity) * (rng.random(capacity) > 0.3)
        leaves[-1] = 0.0
        tree = filled_tree(leaves)
        u = rng.random(5000) * tree.total
        got, want = tree.find(u), brute_find(leaves, u)
        # pairwise (tree) and sequential (cumsum) sums may differ in the last bits near a boundary
        near = np.abs(u[:, None] - np.cumsum(leaves)[None, :]).min(1) < 1e-9 * tree.total
        np.testing.assert_array_equal(got[~near], want[~near])
        assert (leaves[got] > 0).all()


def test_update_duplicates_last_write_wins() -> None:
    tree = SumTree(10)
    tree.update([3, 5, 3, 3], [1.0, 2.0, 7.0, 4.0])
    np.testing.assert_array_equal(tree.get([3, 5, 0]), [4.0, 2.0, 0.0])
    assert tree.total == 6.0
    assert tree.min == 2.0
    assert_consistent(tree)


def test_random_updates_keep_total_and_min() -> None:
    rng = np.random.default_rng(4)
    tree, ref = SumTree(300), np.zeros(300)
    for _ in range(200):
        idx = rng.integers(0, 300, 40)
        vals = rng.random(40) * (rng.random(40) > 0.2)  # some zeros: leaves leave use
        tree.update(idx, vals)
        for i, v in zip(idx, vals, strict=True):  # sequential reference: last write wins
            ref[i] = v
        np.testing.assert_array_equal(tree.values, ref)
        assert tree.total == pytest.approx(ref.sum(), rel=1e-12)
        assert tree.min == ref[ref > 0].min()
    assert_consistent(tree)
    tree.update(np.arange(300), np.zeros(300))
    assert tree.total == 0.0 and tree.min == np.inf
    with pytest.raises(ValueError):
        tree.sample_stratified(4, rng)


def test_zero_leaves_never_returned_past_round_off() -> None:
    rng = np.random.default_rng(5)
    leaves = np.zeros(1024)
    leaves[rng.choice(1000, 30, replace=False)] = rng.random(30) * 1e-3 + 1e-12
    tree = filled_tree(leaves)
    last = np.flatnonzero(leaves)[-1]
    edge = tree.total * (1 - np.logspace(-16, -10, 50))
    above = np.array([tree.total, np.nextafter(tree.total, np.inf), 2 * tree.total, np.inf])
    assert (leaves[tree.find(np.concatenate([edge, above, [-1.0, np.nan]]))] > 0).all()
    np.testing.assert_array_equal(tree.find(above), last)
    draws = np.concatenate([tree.sample_stratified(256, rng) for _ in range(200)])
    assert (leaves[draws] > 0).all()


def test_invalid_input_raises() -> None:
    tree = SumTree(8)
    with pytest.raises(IndexError):
        tree.update([8], [1.0])
    with pytest.raises(IndexError):
        tree.get([-1])
    with pytest.raises(ValueError):
        tree.update([0], [-1.0])
    with pytest.raises(ValueError):
        tree.update([0], [np.nan])
    with pytest.raises(ValueError):
        tree.find([0.5])  # empty tree
    assert tree.total == 0.0


def filled_sampler(is_norm: str = "buffer", seed: int = 6) -> tuple[PrioritizedSampler, np.ndarray]:
    """50 slots, 40 added, random priorities, 5 removed; returns the raw priorities too."""
    rng = np.random.default_rng(seed)
    sampler = PrioritizedSampler(50, alpha=0.7, eps=0.01, is_norm=is_norm)
    sampler.add(np.arange(40))
    prio = rng.exponential(size=40)
    sampler.update(np.arange(40), -prio)  # the sign is dropped: |p|
    sampler.remove([3, 17, 18, 30, 39])
    return sampler, prio


@pytest.mark.parametrize("is_norm", ["buffer", "batch"])
def test_is_weights_match_brute_force(is_norm: str) -> None:
    sampler, prio = filled_sampler(is_norm)
    present = np.ones(40, bool)
    present[[3, 17, 18, 30, 39]] = False
    assert sampler.size == 35
    leaf = np.where(present, (prio + 0.01) ** 0.7, 0.0)
    np.testing.assert_allclose(sampler.tree.values[:40], leaf, rtol=1e-14)
    probs = leaf / leaf.sum()
    w_all = (35 * probs[present]) ** -0.4
    rng = np.random.default_rng(7)
    for _ in range(20):
        idx, w = sampler.sample(64, 0.4, rng)
        assert present[idx].all()
        w_idx = (35 * probs[idx]) ** -0.4
        ref = w_idx / (w_all.max() if is_norm == "buffer" else w_idx.max())
        np.testing.assert_allclose(w, ref, rtol=1e-12)
        assert w.max() <= 1.0


def test_sampler_frequencies_match_priorities() -> None:
    sampler, prio = filled_sampler()
    present = np.flatnonzero(sampler.tree.values > 0)
    rng = np.random.default_rng(8)
    counts = np.zeros(50)
    for _ in range(500):
        np.add.at(counts, sampler.sample(128, 0.5, rng)[0], 1)
    leaf = (prio[present] + 0.01) ** 0.7
    assert counts.sum() == counts[present].sum()
    assert chi_square(counts[present], leaf / leaf.sum()) < CHI2_999[34]


def test_new_items_get_running_max_priority() -> None:
    sampler = PrioritizedSampler(8, alpha=0.5, eps=0.1)
    sampler.add([0])
    assert sampler.tree.get([0])[0] == pytest.approx(1.1**0.5)  # initial_priority 1
    sampler.add([1, 2, 3])
    sampler.update([1, 2, 3], [3.0, 7.0, 2.0])
    sampler.update([2], [0.5])  # lowering a priority does not lower the max
    assert sampler.max_priority == 7.0
    sampler.add([4, 5])
    np.testing.assert_allclose(sampler.tree.get([2, 4, 5]), [0.6**0.5, 7.1**0.5, 7.1**0.5])
    sampler.update([6], [100.0])  # not present: ignored, stays zero
    assert sampler.tree.get([6])[0] == 0.0 and sampler.max_priority == 7.0
    sampler.add([0, 0, 4])  # re-adding present items does not grow size
    assert sampler.size == 6


def test_uniform_mode() -> None:
    rng = np.random.default_rng(9)
    sampler = PrioritizedSampler(100, uniform=True)
    sampler.add(np.arange(60))
    sampler.update(np.arange(60), rng.exponential(size=60))
    idx, w = sampler.sample(1000, 0.4, rng)
    assert idx.min() >= 0 and idx.max() < 60 and (w == 1).all()
    sampler.remove(np.arange(0, 20, 2))  # 10 gone: 50 present, not contiguous
    assert sampler.size == 50
    idx = np.concatenate([sampler.sample(100, 0.4, rng)[0] for _ in range(600)])
    counts = np.bincount(idx, minlength=100)
    present = np.setdiff1d(np.arange(60), np.arange(0, 20, 2))
    assert counts.sum() == counts[present].sum() == 60_000
    assert chi_square(counts[present], np.full(50, 1 / 50)) < CHI2_999[49]
    sampler.remove(np.setdiff1d(present, [5, 44]))  # 2 of 60 left: rejection gives up, exact path
    counts = np.bincount(sampler.sample(4000, 0.4, rng)[0], minlength=100)
    assert counts[[5, 44]].sum() == 4000 and abs(counts[5] - 2000) < 200  # 6.3 sigma


def test_state_dict_round_trip_gives_identical_samples() -> None:
    torch = pytest.importorskip("torch")
    sampler, _ = filled_sampler()
    buf = io.BytesIO()
    torch.save(sampler.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    copy = PrioritizedSampler(50)  # alpha and eps come from the state
    copy.load_state_dict(state)
    assert (copy.size, copy.max_priority, copy.alpha) == (sampler.size, sampler.max_priority, 0.7)
    np.testing.assert_array_equal(copy.tree._sum, sampler.tree._sum)
    np.testing.assert_array_equal(copy.tree._min, sampler.tree._min)
    r1, r2 = np.random.default_rng(10), np.random.default_rng(10)
    for _ in range(5):
        (i1, w1), (i2, w2) = sampler.sample(32, 0.6, r1), copy.sample(32, 0.6, r2)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(w1, w2)
        sampler.update(i1, w1 * 3)
        copy.update(i2, w2 * 3)
    tree = filled_tree(LEAVES16)
    other = SumTree(16)
    other.load_state_dict(tree.state_dict())
    r1, r2 = np.random.default_rng(11), np.random.default_rng(11)
    np.testing.assert_array_equal(tree.sample_stratified(50, r1), other.sample_stratified(50, r2))


def test_sampler_bookkeeping_and_errors() -> None:
    sampler = PrioritizedSampler(16, eps=1e-3)
    assert SumTree(1000).nbytes == 2 * 2 * 1024 * 8  # two heaps of 2 x 1024 float64 nodes
    with pytest.raises(ValueError):
        sampler.sample(4, 0.4, np.random.default_rng(0))  # nothing present
    sampler.add(np.arange(8))
    sampler.remove([2, 2, 12])  # a duplicate and an absent item: one removal
    assert sampler.size == 7 and sampler.tree.get([2])[0] == 0.0
    sampler.update([2], [5.0])  # absent: ignored
    assert sampler.tree.get([2])[0] == 0.0 and sampler.max_priority == 1.0
    assert sampler.sample(0, 0.4, np.random.default_rng(0))[0].shape == (0,)
    with pytest.raises(IndexError):
        sampler.add([16])
    with pytest.raises(ValueError):
        sampler.update([0], [np.inf])
    for bad in ({"eps": 0.0}, {"is_norm": "max"}, {"alpha": -1.0}):
        with pytest.raises(ValueError):
            PrioritizedSampler(16, **bad)


def test_tree_loads_numpy_state() -> None:
    tree = filled_tree(LEAVES16)
    state = {"capacity": 16, "leaves": np.array(tree.values)}
    other = SumTree(16)
    other.load_state_dict(state)
    np.testing.assert_array_equal(other._sum, tree._sum)
    np.testing.assert_array_equal(other._min, tree._min)
    with pytest.raises(ValueError):
        SumTree(17).load_state_dict(state)
