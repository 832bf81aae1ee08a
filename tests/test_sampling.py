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


def test_first_draw_uniform_over_many_items():
    """At n = 4096 the first item is uniform: keys coarse enough to tie often (ties go
    to the lower index) would pull it towards the first items. Its mean index over
    2000 replicate keys lies within 4 standard deviations of (n - 1) / 2, and so does
    the share that falls in the first half."""
    n, reps = 4096, 2000
    base = jax.random.key(77)
    first = np.asarray(jax.vmap(lambda i: smp.arm_order(jax.random.fold_in(base, i), 1, n)[0])(
        jnp.arange(reps)))
    sd = n / np.sqrt(12) / np.sqrt(reps)
    assert abs(first.mean() - (n - 1) / 2) < 4 * sd, first.mean()
    assert abs((first < n // 2).mean() - 0.5) < 4 * np.sqrt(0.25 / reps)


def test_state_is_o_of_k_not_k_times_n():
    for n in (10, 10_000):
        state = smp.init(7)
        shapes = {leaf.shape for leaf in jax.tree_util.tree_leaves(state)}
        assert shapes == {(7,)}
        keys, seen = smp.arm_view(jax.random.key(0), state, 3, n)
        _, _, state = smp.take_batch(keys, seen, state, 3, 4)
        assert {leaf.shape for leaf in jax.tree_util.tree_leaves(state)} == {(7,)}
        assert all(leaf.dtype == jnp.int32 for leaf in jax.tree_util.tree_leaves(state))


@pytest.mark.parametrize("synchronized", [False, True])
@pytest.mark.parametrize("n,b", [(10, 3), (17, 4), (6, 6)])
def test_order_table_draws_equal_regenerated_keys(n, b, synchronized):
    """Reading the materialised order gives the same items, validity and sampler state
    (count and threshold pair) as regenerating the keys, batch after batch, including
    capped batches and an exhausted arm."""
    key = jax.random.key(5)
    table = smp.order_table(key, 3, n, synchronized)
    assert table.order.shape == (1 if synchronized else 3, n)
    limits = [b, 1, b, 2, b, b, b, b, b]

    @jax.jit
    def both(s_a, s_b, arm, limit):
        keys, seen = smp.arm_view(key, s_a, arm, n, synchronized)
        ia, va, s_a = smp.take_batch(keys, seen, s_a, arm, b, limit)
        ib, vb, s_b = smp.take_from_table(table, key, s_b, arm, b, limit, synchronized)
        return ia, va, s_a, ib, vb, s_b, seen

    s_a = s_b = smp.init(3)
    for i, limit in enumerate(limits):
        arm = i % 2
        seen_before = np.asarray(smp.table_seen(table, s_b, arm))
        ia, va, s_a, ib, vb, s_b, seen = both(s_a, s_b, arm, limit)
        np.testing.assert_array_equal(seen_before, np.asarray(seen))
        np.testing.assert_array_equal(np.asarray(va), np.asarray(vb))
        va = np.asarray(va)
        np.testing.assert_array_equal(np.asarray(ia)[va], np.asarray(ib)[va])
        for x, y in zip(s_a, s_b):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(s_a.count[0]) == n  # arm 0 was drained
    # the table holds the regenerated keys and their (key, index) order
    for a in range(table.order.shape[0]):
        keys = np.asarray(smp.arm_keys(key, a, n, synchronized))
        np.testing.assert_array_equal(np.asarray(table.keys[a]), keys)
        np.testing.assert_array_equal(np.asarray(table.order[a]),
                                      np.lexsort((np.arange(n), keys)))
    # without the keys the draws are the same
    bare = smp.order_table(key, 3, n, synchronized, with_keys=False)
    assert bare.keys is None
    np.testing.assert_array_equal(np.asarray(bare.order), np.asarray(table.order))


@pytest.mark.parametrize("n", [1, 2, 3, 8, 100, 1000])
def test_sorted_order_exact_with_ties_and_shared_top_bits(n):
    """The packed-key sort plus its fix-up passes is exactly the (key, index) order,
    also for keys with many ties and long runs of equal top bits (which random keys
    make rare: the fix-up loop is what keeps those exact)."""
    rng = np.random.default_rng(n)
    paths = {
        "dispatch": jax.jit(smp._sorted_order),
        "xla": jax.jit(smp._xla_sorted_order),
        "host": smp._host_sorted_order,
        # the callback under vmap receives the whole batch (leading axes)
        "host-vmapped": lambda k: jax.jit(jax.vmap(smp._host_sort_callback))(
            jnp.stack([k, k[::-1]]))[0],
    }
    for case in range(6):
        if case == 0:
            keys = rng.integers(0, 2**31 - 1, n)
        elif case == 1:
            keys = rng.integers(0, 4, n)  # heavy ties
        elif case == 2:  # one long run of equal top bits, random low bits
            keys = (1234 << 20) | rng.integers(0, 2**10, n)
        elif case == 3:  # reversed low bits inside one run
            keys = (7 << 24) + np.arange(n)[::-1]
        elif case == 4:
            keys = np.full(n, 2**31 - 1)
        else:
            keys = np.asarray(smp.arm_keys(jax.random.key(case), 0, n))
        keys = keys.astype(np.int32)
        want = np.lexsort((np.arange(n), keys))
        for name, sort in paths.items():
            got = np.asarray(sort(jnp.asarray(keys)))
            assert got.dtype == np.int32, name
            np.testing.assert_array_equal(got, want, err_msg=f"case {case}, {name}")


def test_host_sort_batches_and_matches_xla_on_order_tables(monkeypatch):
    """On a CPU the order tables are sorted by NumPy; with the host path switched off
    (XLA's sort) every replicate's table is identical, vmapped or not."""
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(5), i))(jnp.arange(6))

    def tables():
        jax.clear_caches()
        f = jax.jit(jax.vmap(lambda k: smp.order_table(k, 4, 300, with_keys=False).order))
        return np.asarray(f(keys))

    k = jnp.zeros((300,), jnp.int32)  # one row, as order_table maps it
    try:
        # forced on: these programs run on one device, where the callback is safe
        monkeypatch.setattr(smp, "HOST_SORT_ON_CPU", True)
        assert "pure_callback" in str(jax.make_jaxpr(smp._sorted_order)(k))
        host = tables()
        monkeypatch.setattr(smp, "HOST_SORT_ON_CPU", False)
        assert "pure_callback" not in str(jax.make_jaxpr(smp._sorted_order)(k))
        xla = tables()
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    np.testing.assert_array_equal(host, xla)
    assert host.shape == (6, 4, 300)
    assert (np.sort(host, axis=-1) == np.arange(300)).all()
    # a different replicate gets a different order
    assert not np.array_equal(host[0], host[1])


def test_host_sort_is_off_by_default_with_several_cpu_devices(monkeypatch):
    """The default (None) keeps the callback out of programs when the CPU backend has
    several devices (a sharded run calls it from every device at once and can deadlock;
    this test process has eight fake devices) and uses it with a single device."""
    assert smp.HOST_SORT_ON_CPU is None
    k = jnp.zeros((50,), jnp.int32)
    n_cpu = len(jax.local_devices(backend="cpu"))
    assert n_cpu > 1  # conftest's --xla_force_host_platform_device_count=8
    assert not smp._use_host_sort()
    assert "pure_callback" not in str(jax.make_jaxpr(smp._sorted_order)(k))
    monkeypatch.setattr(jax, "local_devices", lambda *a, **kw: [object()])
    try:
        assert smp._use_host_sort()
        jax.clear_caches()  # the jaxpr above is cached per function and argument
        assert "pure_callback" in str(jax.make_jaxpr(smp._sorted_order)(k))
    finally:
        monkeypatch.undo()
        jax.clear_caches()


def test_xla_sorted_order_under_x64():
    """Under x64 a Python shift amount became int64 against int32 keys (a study with
    x64 enabled failed inside the kernel); the order is the same as without x64."""
    keys = jnp.asarray(np.random.default_rng(0).integers(0, 2**31 - 1, 50), jnp.int32)
    ref = np.asarray(smp._xla_sorted_order(keys))
    with jax.enable_x64(True):
        got = np.asarray(smp._xla_sorted_order(jnp.asarray(keys, jnp.int32)))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(ref, np.lexsort((np.arange(50), np.asarray(keys))))
