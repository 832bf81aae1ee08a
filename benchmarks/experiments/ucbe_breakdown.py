"""Where a UCB-E replicate's time goes (IFEval, K = 10, b = 32, budget 20% of K*n, no
interval, 256 vmapped replicates): the whole kernel, the order table alone, its threefry
keys alone, NumPy's sort of the same keys, the host sort and an identity callback, and a
draw of the same number of keys from both threefry words. Microseconds per replicate
(or milliseconds per 256-replicate chunk for the host-side pieces), warm, plain
means over ``--reps`` calls. BUILD_NOTES.md, "Twenty-fourth session", tables its output.

    python benchmarks/experiments/ucbe_breakdown.py
"""

import argparse
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
from jaxeval import _identification as idn  # noqa: E402
from jaxeval import _sampling as smp  # noqa: E402
from jaxeval._factorization import ItemFactors  # noqa: E402


def _mean_seconds(f, reps):
    jax.block_until_ready(f())
    t = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(f())
    return (time.perf_counter() - t) / reps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lanes", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args(argv)
    L, K = a.lanes, 10
    sm = jaxeval.load(DATASETS["ifeval"]).drop_duplicates()
    _, pool = sm.split([sm.n_models // 2], seed=0)
    pool_s = np.asarray(pool.scores, np.float32)
    n = pool_s.shape[1]
    rng = np.random.default_rng(0)
    inst = np.stack([rng.choice(pool_s.shape[0], K, replace=False) for _ in range(10)])
    budgets = tuple(sorted({max(1, round(f * K * n)) for f in (.01, .02, .05, .1, .15, .2)}))
    zeros = ItemFactors(jnp.zeros((n, 8)), jnp.zeros(n), jnp.zeros(8))
    data = idn.ProblemData(jnp.asarray(pool_s), jnp.asarray(inst, jnp.int32), zeros)
    params = idn.Params.make(a=1.0)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(L))
    per_rep = 1e6 / L
    cfg = idn.Config("ucbe", num_arms=K, num_items=n, budgets=budgets, batch_size=32,
                     cs_kinds=())
    full = jax.jit(jax.vmap(lambda k: idn.run_identification(k, data, params, cfg)))
    table = jax.jit(jax.vmap(lambda k: smp.order_table(jax.random.fold_in(k, 1), K, n).order))
    draw = jax.jit(jax.vmap(lambda k: jax.vmap(lambda r: smp.arm_keys(k, r, n))(jnp.arange(K))))

    @jax.jit
    def two_words(ks):
        def one(k, r):
            d = jax.random.key_data(jax.random.fold_in(k, r))
            c = jnp.arange((n + 1) // 2, dtype=jnp.uint32)
            w0, w1 = threefry2x32_p.bind(d[0], d[1], jnp.zeros_like(c), c)
            return (jnp.stack([w0, w1], -1).reshape(-1)[:n] >> 1).astype(jnp.int32)
        return jax.vmap(lambda k: jax.vmap(lambda r: one(k, r))(jnp.arange(K)))(ks)

    print(f"IFEval K={K} n={n} b=32, {L} replicates per call; us per replicate:")
    for name, f in (("whole UCB-E kernel", lambda: full(keys)),
                    ("order table alone", lambda: table(keys)),
                    ("its threefry keys alone", lambda: draw(keys)),
                    ("keys from both threefry words", lambda: two_words(keys))):
        print(f"  {name:32s} {_mean_seconds(f, a.reps) * per_rep:8.1f}")
    k_np = np.asarray(draw(keys)).reshape(L * K, n)
    ident = jax.jit(lambda x: jax.pure_callback(np.asarray, jax.ShapeDtypeStruct(x.shape,
                                                                               x.dtype), x))
    k_dev = jnp.asarray(k_np)
    print("ms per chunk of the same keys:")
    for name, f in (("np.sort", lambda: np.sort(k_np, axis=-1)),
                    ("_host_sorted_order", lambda: smp._host_sorted_order(k_np)),
                    ("identity pure_callback", lambda: ident(k_dev))):
        print(f"  {name:32s} {_mean_seconds(f, a.reps) * 1e3:8.2f}")


if __name__ == "__main__":
    main()
