"""Without-replacement sampler with O(K) state (jaxeval._sampling)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxeval import _sampling as smp


def _drain(order_key, n, b, arm=0, synchronized=False, num_arms=2):
    """Draw batches until the arm is exhausted; returns (items drawn in order, counts)."""

    @jax.jit
    def step(state):
        keys, seen = smp.arm_view(order_key, state, arm, n, synchronized)
        return smp.take_batch(keys, seen, state, arm, b)

    state = smp.init(num_arms)
    drawn, counts = [], []
    for _ in range(-(-n // b) + 1):
        items, valid, state = step(state)
        drawn.extend(np.asarray(items)[np.asarray(valid)].tolist())
        counts.append(int(state.count[arm]))
    return drawn, counts, state


@pytest.mark.parametrize("n,b", [(10, 1), (10, 3), (17, 4), (5, 5)])
def test_never_twice_and_matches_order(n, b):
    key = jax.random.key(3)
    drawn, counts, state = _drain(key, n, b)
    assert sorted(drawn) == list(range(n))  # every item exactly once
    assert drawn == np.asarray(smp.arm_order(key, 0, n)).tolist()
    assert counts[-1] == n and counts[-2] == n  # an exhausted arm draws nothing more
    assert counts[0] == min(b, n)
    # the other arm is untouched
    assert int(state.count[1]) == 0 and int(state.thr_key[1]) == -1


def test_ties_in_keys_never_repeat():
    # keys with many ties: the (key, index) order still draws each item exactly once
    keys = jnp.array([5, 1, 5, 1, 5, 0, 5, 1], jnp.int32)
    state = smp.init(1)
    drawn = []
    for _ in range(5):
        seen = smp.seen_mask(keys, state.thr_key[0], state.thr_idx[0])
        items, valid, state = smp.take_batch(keys, seen, state, 0, 2)
        drawn.extend(np.asarray(items)[np.asarray(valid)].tolist())
    assert drawn == [5, 1, 3, 7, 0, 2, 4, 6]


def test_limit_caps_the_batch():
    key = jax.random.key(0)
    state = smp.init(1)
    keys, seen = smp.arm_view(key, state, 0, 12)
    items, valid, state = smp.take_batch(keys, seen, state, 0, 5, limit=2)
    assert np.asarray(valid).tolist() == [True, True, False, False, False]
    assert int(state.count[0]) == 2
    keys, seen = smp.arm_view(key, state, 0, 12)
    items2, valid2, state = smp.take_batch(keys, seen, state, 0, 5)
    order = np.asarray(smp.arm_order(key, 0, 12)).tolist()
    assert np.asarray(items)[:2].tolist() + np.asarray(items2).tolist() == order[:7]


def test_arms_independent_and_synchronized_shared():
    key = jax.random.key(11)
    n = 50
    o0 = np.asarray(smp.arm_order(key, 0, n))
    o1 = np.asarray(smp.arm_order(key, 1, n))
    assert not np.array_equal(o0, o1)
    s0 = np.asarray(smp.arm_order(key, 0, n, synchronized=True))
    s1 = np.asarray(smp.arm_order(key, 7, n, synchronized=True))
    np.testing.assert_array_equal(s0, s1)


def test_first_draws_uniform_chi_square():
    # position-0 and position-3 items over many replicate keys are uniform on n items
    n, reps = 8, 4000
    base = jax.random.key(2024)
    orders = jax.vmap(lambda i: smp.arm_order(jax.random.fold_in(base, i), 2, n))(
        jnp.arange(reps)
    )
    orders = np.asarray(orders)
    for pos in (0, 3, 7):
        counts = np.bincount(orders[:, pos], minlength=n)
        p = stats.chisquare(counts).pvalue
        assert p > 1e-3, (pos, counts)
    # pairs (first, second) uniform over the n(n-1) ordered pairs
    pair = orders[:, 0] * n + orders[:, 1]
    counts = np.bincount(pair, minlength=n * n).reshape(n, n)
    off = counts[~np.eye(n, dtype=bool)]
    assert np.all(np.diag(counts) == 0)
    assert stats.chisquare(off).pvalue > 1e-3


def test_state_is_o_of_k_not_k_times_n():
    for n in (10, 10_000):
        state = smp.init(7)
        shapes = {leaf.shape for leaf in jax.tree_util.tree_leaves(state)}
        assert shapes == {(7,)}
        keys, seen = smp.arm_view(jax.random.key(0), state, 3, n)
        _, _, state = smp.take_batch(keys, seen, state, 3, 4)
        assert {leaf.shape for leaf in jax.tree_util.tree_leaves(state)} == {(7,)}
        assert all(leaf.dtype == jnp.int32 for leaf in jax.tree_util.tree_leaves(state))
