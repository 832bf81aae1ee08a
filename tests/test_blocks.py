"""Items streamed in blocks (issue 4): the blocked kernel is the whole-row kernel.

With ``Config.item_block < num_items`` the identification loop never builds a row of
length ``n``; these tests pin that it computes the same thing: the counter-based
generators reproduce JAX's draws bit for bit, the running top-b merge reproduces the
whole-row batch, the blocked Newton update reproduces ``update_model_factors`` and the
whole trajectory matches the whole-row kernel (integers exactly, floats to float32
summation order), and that the compiled program's temporaries stop growing with ``n``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _identification as idn
from jaxeval import _sampling as smp
from jaxeval._factorization import (
    ItemFactors,
    update_model_factor_blocked,
    update_model_factors,
)

N = 50
BLOCK = 7  # 8 blocks, the last one shifted back to end at N (overlap of 6 items)


def _blocks(n, size):
    """(start, idx, own) of every block, as the kernel builds them."""
    out = []
    for k in range(-(-n // size)):
        start = min(k * size, n - size)
        idx = start + np.arange(size)
        out.append((start, idx, idx >= k * size))
    return out


# ---------------------------------------------------------------- generators
def test_counter_generators_equal_jax_draws():
    key = jax.random.fold_in(jax.random.key(11), 3)
    for shape in [(257,), (61, 4)]:
        ctr = jnp.arange(int(np.prod(shape))).reshape(shape)
        b, u, z = jax.jit(lambda k, c: (smp.bits_at(k, c), smp.uniform_at(k, c),
                                        smp.normal_at(k, c)))(key, ctr)
        np.testing.assert_array_equal(b, jax.random.bits(key, shape, jnp.uint32))
        np.testing.assert_array_equal(u, jax.random.uniform(key, shape))
        np.testing.assert_array_equal(z, jax.random.normal(key, shape))
    # any slice on its own, under vmap over keys (as in the vmapped kernel)
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(3))
    idx = jnp.arange(40, 90)
    got = jax.jit(jax.vmap(lambda k: smp.normal_at(k, idx)))(keys)
    want = jax.vmap(lambda k: jax.random.normal(k, (100,))[40:90])(keys)
    np.testing.assert_array_equal(got, want)
    # the sampler's order keys, item by item
    ok = jax.random.key(5)
    for arm, sync in [(2, False), (0, True)]:
        np.testing.assert_array_equal(
            smp.keys_at(ok, arm, jnp.arange(10, 60), sync),
            np.asarray(smp.arm_keys(ok, arm, 100, sync))[10:60],
        )
    with pytest.raises(ValueError, match="key"):
        smp.bits_at(jnp.zeros((3,), jnp.int32), jnp.arange(4))


# ------------------------------------------------------------------ top-b
@pytest.mark.parametrize("b", [1, 4, 9])
def test_blockwise_top_b_equals_whole_row(b):
    rng = np.random.default_rng(b)

    @jax.jit
    def both(keys, thr_key, thr_idx, limit):
        state = smp.SamplerState(jnp.array([5, 0], jnp.int32), jnp.stack([thr_key, -1]),
                                 jnp.stack([thr_idx, -1]))
        seen = smp.seen_mask(keys, thr_key, thr_idx)
        items, valid, st = smp.take_batch(keys, seen, state, 0, b, limit)
        z = jnp.zeros((1,), jnp.float32)
        top = smp.empty_top(b, (z,))
        for start, idx, own in _blocks(N, BLOCK):
            kb = keys[start:start + BLOCK]
            elig = jnp.asarray(own) & ~smp.seen_mask(kb, thr_key, thr_idx, jnp.asarray(idx))
            cand = smp.block_top(kb, jnp.asarray(idx, jnp.int32), elig, b,
                                 (kb.astype(jnp.float32),))
            top = smp.merge_top(top, cand, b)
        items2, valid2, st2, (pay,) = smp.finish_top(top, state, 0, limit)
        return items, valid, st, items2, valid2, st2, pay

    for trial in range(6):
        # few distinct keys: many ties, broken by the item index
        keys = jnp.asarray(rng.integers(0, 6, N), jnp.int32)
        order = np.lexsort((np.arange(N), np.asarray(keys)))
        cut = int(rng.integers(0, N + 1))  # items already seen (possibly none or all)
        if cut == 0:
            thr_key, thr_idx = -1, -1
        else:
            j = order[cut - 1]
            thr_key, thr_idx = int(keys[j]), int(j)
        limit = b if trial % 2 == 0 else max(b - 2, 0)
        items, valid, st, items2, valid2, st2, pay = both(
            keys, jnp.int32(thr_key), jnp.int32(thr_idx), jnp.int32(limit))
        np.testing.assert_array_equal(valid2, valid)
        np.testing.assert_array_equal(np.asarray(items2)[valid], np.asarray(items)[valid])
        want = order[cut:cut + b][:int(valid.sum())]  # the (key, index) order
        np.testing.assert_array_equal(np.asarray(items)[valid], want)
        np.testing.assert_array_equal(np.asarray(pay)[valid], np.asarray(keys)[items2][valid])
        for x, y in zip(st2, st):
            np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------- Newton
@pytest.mark.parametrize("num_newton", [1, 3])
def test_blocked_newton_equals_update_model_factors(num_newton):
    rng = np.random.default_rng(num_newton)
    r = 3
    V = jnp.asarray(rng.normal(size=(N, r)), jnp.float32)
    c = jnp.asarray(rng.normal(size=N), jnp.float32)
    u_mean = jnp.asarray([0.2, -0.1, 0.3], jnp.float32)
    f = ItemFactors(V, c, u_mean)
    S = jnp.asarray(rng.random((3, N)) < 0.6, jnp.float32)
    M = jnp.asarray(rng.random((3, N)) < 0.5).at[2].set(False)  # row 2: nothing observed
    u0 = jnp.asarray(rng.normal(size=(3, r)), jnp.float32)
    rho = 0.7
    u_ref, H_ref = update_model_factors(f, S, M, u0, rho, num_newton)
    blocks = _blocks(N, BLOCK)
    starts = jnp.asarray([s for s, _, _ in blocks], jnp.int32)
    owns = jnp.asarray(np.stack([o for _, _, o in blocks]))

    @jax.jit
    def blocked(s, m, u_init):
        def block_fn(k):
            st = starts[k]
            sl = lambda x: jax.lax.dynamic_slice_in_dim(x, st, BLOCK)  # noqa: E731
            return sl(V), sl(c), sl(s), sl(m) & owns[k]

        return update_model_factor_blocked(block_fn, len(blocks), u_init, u_mean, rho,
                                           num_newton)

    for i in range(3):
        u, H = blocked(S[i], M[i], u0[i])
        np.testing.assert_allclose(u, u_ref[i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(H, H_ref[i], rtol=1e-5, atol=1e-5)
    u_empty, _ = blocked(S[2], M[2], u0[2])
    np.testing.assert_array_equal(u_empty, u_mean)  # exactly, as update_model_factors


def test_blocked_newton_hooks():
    """``data_grad_hess`` (derivatives accumulated by the caller) and ``trial_sums``
    (sums riding on the last line search) give what separate passes give."""
    rng = np.random.default_rng(9)
    r = 2
    V = jnp.asarray(rng.normal(size=(N, r)), jnp.float32)
    c = jnp.asarray(rng.normal(size=N), jnp.float32)
    s = jnp.asarray(rng.random(N) < 0.5, jnp.float32)
    m = jnp.asarray(rng.random(N) < 0.4)
    u0 = jnp.asarray([0.3, -0.2], jnp.float32)
    um = jnp.zeros((r,), jnp.float32)
    blocks = _blocks(N, BLOCK)
    starts = jnp.asarray([b_[0] for b_ in blocks], jnp.int32)
    owns = jnp.asarray(np.stack([b_[2] for b_ in blocks]))

    def block_fn(k):
        sl = lambda x: jax.lax.dynamic_slice_in_dim(x, starts[k], BLOCK)  # noqa: E731
        return sl(V), sl(c), sl(s), sl(m) & owns[k], owns[k]

    def sums(z, blk):
        return jnp.sum(jnp.where(blk[4][None, :], jax.nn.sigmoid(z), 0.0), axis=1)

    @jax.jit
    def run():
        plain = update_model_factor_blocked(block_fn, len(blocks), u0, um, 1.0, 2,
                                            return_hessian=False)
        p0 = jax.nn.sigmoid(V @ u0 + c) * m
        g = V.T @ (p0 - s * m)
        H = (V * (p0 * (1 - p0))[:, None]).T @ V
        vv = jnp.sum(jnp.where(m, jnp.sum(V * V, axis=1), 0.0))
        hooked, total = update_model_factor_blocked(
            block_fn, len(blocks), u0, um, 1.0, 2, return_hessian=False,
            data_grad_hess=(g, H, jnp.sum(m), vv), trial_sums=sums)
        return plain, hooked, total

    plain, hooked, total = run()
    np.testing.assert_allclose(hooked, plain, rtol=1e-5, atol=1e-6)
    want = jnp.sum(jax.nn.sigmoid(V @ hooked + c))
    np.testing.assert_allclose(total, want, rtol=1e-5)
    with pytest.raises(ValueError, match="num_newton"):
        update_model_factor_blocked(block_fn, len(blocks), u0, um, 1.0, 0, trial_sums=sums)


# ------------------------------------------------------------ trajectories
def _real_data(K, r=3):
    rng = np.random.default_rng(4)
    pool = (rng.random((2 * K, N)) < rng.random((2 * K, 1))).astype(np.float32)
    inst = np.arange(2 * K, dtype=np.int32).reshape(2, K)
    f = ItemFactors(jnp.asarray(rng.normal(size=(N, r)) / 2, jnp.float32),
                    jnp.asarray(rng.normal(size=N), jnp.float32),
                    jnp.asarray(rng.normal(size=r) / 4, jnp.float32))
    return idn.ProblemData(jnp.asarray(pool), jnp.asarray(inst), f)


def _run_variants(policy, b, truth, variants, seed, **kw):
    """The same 3 replicates under each Config variant (a dict of Config fields)."""
    K = 3
    base = dict(num_arms=K, num_items=N, budgets=(13, 40, 75), batch_size=b, truth=truth,
                cs_kinds=("eb", "betting"), **kw)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(3))
    outs = []
    for variant in variants:
        cfg = idn.Config(policy, **variant, **base)
        data = _real_data(K) if truth == "real" else idn.dummy_data(cfg)
        fn = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                     static_argnums=3)
        outs.append(jax.tree.map(np.asarray, fn(keys, data, idn.Params.make(rho=0.5), cfg)))
    return outs


def _both(policy, b, truth, **kw):
    """Blocked rows (BLOCK < N) and whole rows, same replicates."""
    assert idn.Config(policy, 3, N, budgets=(4,), item_block=BLOCK).blocked
    assert not idn.Config(policy, 3, N, budgets=(4,)).blocked
    return _run_variants(policy, b, truth, [{"item_block": BLOCK}, {}], 21, **kw)


def _assert_same_trajectory(blocked, whole, exact):
    """Integers (calls, pulls, recommendation, status, instance) exactly; floats exactly
    when no prediction enters (sums of 0/1 scores are exact in float32), else to float32
    rounding (block sums are added in a different order, the Newton sums too)."""
    a, w = blocked.checkpoints, whole.checkpoints
    for name in ("calls", "pulls", "recommended", "status"):
        np.testing.assert_array_equal(getattr(a, name), getattr(w, name), err_msg=name)
    np.testing.assert_array_equal(blocked.instance, whole.instance)
    np.testing.assert_allclose(blocked.theta, whole.theta, rtol=0, atol=1e-6)
    for name in ("estimate", "lower", "upper", "naive", "lam"):
        if exact:
            np.testing.assert_array_equal(getattr(a, name), getattr(w, name), err_msg=name)
        else:
            np.testing.assert_allclose(getattr(a, name), getattr(w, name), rtol=0, atol=2e-5,
                                       err_msg=name)


# a representative subset by default (predictions on real truth, the synchronized
# order); the full grid with --slow (compilation dominates: two programs per case,
# ~30-40 s each on 2 cores)
_FAST = [("pulse", 1, "real"), ("sysrs", 1, "real")]
_GRID = [(p, b, t) for p in ("pulse", "ucbe", "sysrs") for b in (1, 4)
         for t in ("real", "synthetic") if (p, b, t) not in _FAST]


@pytest.mark.default_codegen
@pytest.mark.parametrize("policy,b,truth", _FAST)
def test_blocked_trajectory_equals_whole_rows(policy, b, truth):
    blocked, whole = _both(policy, b, truth)
    _assert_same_trajectory(blocked, whole, exact=policy != "pulse")
    assert blocked.checkpoints.calls[:, -1].tolist() == [75, 75, 75]


@pytest.mark.slow
@pytest.mark.default_codegen
@pytest.mark.parametrize("policy,b,truth", _GRID)
def test_blocked_trajectory_equals_whole_rows_grid(policy, b, truth):
    blocked, whole = _both(policy, b, truth)
    _assert_same_trajectory(blocked, whole, exact=policy != "pulse")


@pytest.mark.slow
@pytest.mark.default_codegen
@pytest.mark.parametrize("corruption", ["biased", "random", "adversarial"])
def test_blocked_trajectory_corruptions_and_confidence(corruption):
    blocked, whole = _both("pulse", 2, "synthetic", corruption=corruption, mode="confidence")
    _assert_same_trajectory(blocked, whole, exact=False)


# ------------------------------------------------------------------- memory
def test_blocked_temporaries_flat_in_n():
    """XLA's peak temporaries of the vmapped kernel are flat in n once blocked. Compile
    only; nothing is run."""
    def temp_bytes(n, block):
        cfg = idn.Config("pulse", 2, n, budgets=(8,), truth="synthetic", item_block=block,
                         cs_kinds=("eb",))
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(4))
        fn = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                     static_argnums=3)
        compiled = fn.lower(keys, idn.dummy_data(cfg), idn.Params.make(), cfg).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    small, large = temp_bytes(2_000, 256), temp_bytes(32_000, 256)
    # 16x the items, about the same temporaries (the whole-row kernel's grow ~16x:
    # benchmarks/bench_memory.py)
    assert large < 1.5 * small, (small, large)


def test_item_block_validated():
    with pytest.raises(ValueError, match="item_block"):
        idn.Config("ucbe", 2, 10, budgets=(4,), item_block=0)
    with pytest.raises(TypeError, match="item_block: expected an integer >= 1, got float 2.5"):
        idn.Config("ucbe", 2, 10, budgets=(4,), item_block=2.5)


# ------------------------------------------------------------ order tables
def _tabled_and_regenerated(policy, b, truth, **kw):
    for tabled in (True, False):
        cfg = idn.Config(policy, 3, N, budgets=(4,), order_table=tabled)
        assert cfg.tabled == tabled and not cfg.blocked
    return _run_variants(policy, b, truth,
                         [{"order_table": True}, {"order_table": False}], 23, **kw)


_TABLE_CASES = [("ucbe", 4, "real", {}), ("pulse", 1, "real", {}),
                ("sysrs", 2, "real", {}), ("pulse", 3, "synthetic", {"mode": "confidence"})]


@pytest.mark.default_codegen
@pytest.mark.parametrize("policy,b,truth,kw", _TABLE_CASES)
def test_order_table_trajectory_equals_regenerated_keys(policy, b, truth, kw):
    """Materialised item orders (the default for small K n) change nothing: every
    output of every replicate is the same as with the keys regenerated each step."""
    tabled, regen = _tabled_and_regenerated(policy, b, truth, **kw)
    _assert_same_trajectory(tabled, regen, exact=True)


def test_order_table_default_and_refusals():
    assert idn.Config("ucbe", 10, 541, budgets=(8,)).tabled
    assert not idn.Config("ucbe", 10, 541, budgets=(8,), order_table=False).tabled
    big = idn.ORDER_TABLE_MAX // 100 + 1
    assert not idn.Config("ucbe", 100, big, budgets=(8,)).tabled
    assert idn.Config("sysrs", 100, big, budgets=(8,)).tabled  # one shared stream
    assert not idn.Config("ucbe", 2, 5000, budgets=(8,)).tabled  # blocked rows
    with pytest.raises(ValueError, match="order_table"):
        idn.Config("ucbe", 2, 5000, budgets=(8,), order_table=True)
    with pytest.raises(ValueError, match="order_table"):
        idn.Config("ucbe", 2, 50, budgets=(8,), order_table=1)
