"""Would a sort-free sampler make UCB-E faster? A stand-alone UCB-E loop (IFEval, K = 10,
b = 32, budget 20% of K n, a = 1, 256 vmapped replicates, no interval) run twice with
the same index and bookkeeping: once reading the package's order table
(``jaxeval._sampling.order_table``: K n threefry keys and a sort per replicate), once
with a lazy Fisher-Yates shuffle (``[K, n]`` permutation state; each draw one threefry
word and one swap, so only the items actually drawn cost anything). Both draw
uniformly without replacement. Microseconds per replicate, warm, three rounds.
BUILD_NOTES.md, "Twenty-fifth session", has the figures (the shuffle is slower: its
per-lane swaps under ``vmap`` lower to scatters).

    python benchmarks/experiments/fisher_yates_proto.py
"""

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_banditeval import DATASETS  # noqa: E402

import jaxeval  # noqa: E402
from jaxeval import _sampling as smp  # noqa: E402

K, B, LANES, A = 10, 32, 256, 1.0


def _ucb_arm(sums, cnt, n):
    mean = sums / jnp.maximum(cnt, 1)
    idx = jnp.where(cnt == 0, jnp.inf, mean + jnp.sqrt(A / jnp.maximum(cnt, 1)))
    return jnp.argmax(jnp.where(cnt >= n, -jnp.inf, idx))


def _pull(c, arm, items, pool, budget):
    sums, cnt, calls = c
    n = pool.shape[1]
    pos = cnt[arm] + jnp.arange(B)
    valid = (pos < n) & (calls + jnp.arange(B) < budget)
    s = jnp.sum(jnp.where(valid, pool[arm, items], 0.0))
    nv = jnp.sum(valid)
    return sums.at[arm].add(s), cnt.at[arm].add(nv), calls + nv


def make_kernels(pool, budget):
    n = pool.shape[1]
    steps = -(-budget // B)
    start = (jnp.zeros(K), jnp.zeros(K, jnp.int32), jnp.zeros((), jnp.int32))

    def with_table(key):
        order = smp.order_table(key, K, n, with_keys=False).order

        def body(c, _):
            arm = _ucb_arm(c[0], c[1], n)
            pos = jnp.minimum(c[1][arm] + jnp.arange(B), n - 1)
            return _pull(c, arm, order[arm][pos], pool, budget), None

        (sums, cnt, _), _ = jax.lax.scan(body, start, None, length=steps)
        return cnt

    def with_shuffle(key):
        perm0 = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (K, n))

        def body(c, _):
            c, perm = c
            arm = _ucb_arm(c[0], c[1], n)
            ka = jax.random.key_data(jax.random.fold_in(key, arm))
            c0 = c[1][arm]

            def swap(j, carry):
                row, items = carry
                t = jnp.minimum(c0 + j, n - 1)
                w0, _ = threefry2x32_p.bind(ka[0], ka[1], jnp.uint32(0), t.astype(jnp.uint32))
                r = t + jax.lax.mulhi(w0, (n - t).astype(jnp.uint32)).astype(jnp.int32)
                vt, vr = row[t], row[r]  # r uniform in [t, n)
                return row.at[t].set(vr).at[r].set(vt), items.at[j].set(vr)

            row, items = jax.lax.fori_loop(0, B, swap, (perm[arm], jnp.zeros(B, jnp.int32)),
                                           unroll=True)
            return (_pull(c, arm, items, pool, budget), perm.at[arm].set(row)), None

        ((sums, cnt, _), _), _ = jax.lax.scan(body, (start, perm0), None, length=steps)
        return cnt

    return jax.jit(jax.vmap(with_table)), jax.jit(jax.vmap(with_shuffle))


def _us_per_rep(f, keys, reps=20):
    jax.block_until_ready(f(keys))
    t0 = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(f(keys))
    return (time.perf_counter() - t0) / reps / keys.shape[0] * 1e6


def main():
    sm = jaxeval.load(DATASETS["ifeval"]).drop_duplicates()
    scores = np.asarray(sm.scores, np.float32)
    rows = np.random.default_rng(0).choice(scores.shape[0], K, replace=False)
    pool = jnp.asarray(scores[rows])
    budget = round(0.2 * K * pool.shape[1])
    table, shuffle = make_kernels(pool, budget)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(LANES))
    assert (np.asarray(table(keys)).sum(1) == budget).all()
    assert (np.asarray(shuffle(keys)).sum(1) == budget).all()
    print(f"IFEval K={K} n={pool.shape[1]} b={B}, budget {budget}, {LANES} replicates per call")
    for r in range(3):
        print(f"  round {r}: order table {_us_per_rep(table, keys):7.1f} us/rep   "
              f"lazy Fisher-Yates {_us_per_rep(shuffle, keys):7.1f} us/rep")


if __name__ == "__main__":
    main()
