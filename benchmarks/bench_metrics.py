"""Speed of the JAX metrics and the synthetic generator against NumPy/SciPy loops.

Side by side in one process on the same data; prints ratios. Compile time is
measured separately (first call) and excluded from the throughput figures.

    python benchmarks/bench_metrics.py [--replicates 1000] [--n 200]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxeval import metrics, synthetic_matrix


def _best_of(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--n", type=int, default=200, help="models ranked per replicate")
    ap.add_argument("--items", type=int, default=500)
    args = ap.parse_args()
    R, n = args.replicates, args.n
    rng = np.random.default_rng(0)
    true = (rng.binomial(100, 0.5, (R, n)) / 100).astype(np.float32)
    pred = np.round(true + rng.normal(0, 0.03, (R, n)), 2).astype(np.float32)

    tau = jax.jit(metrics.kendall_tau_b)
    t0 = time.perf_counter()
    jax.block_until_ready(tau(pred, true))
    compile_s = time.perf_counter() - t0
    t_jax = _best_of(lambda: jax.block_until_ready(tau(pred, true)))
    t_scipy = _best_of(lambda: [stats.kendalltau(a, b) for a, b in zip(pred, true)], repeat=1)
    print(f"kendall_tau_b, {R} replicates x n={n} (ties): jax {t_jax * 1e3:.1f} ms "
          f"(compile {compile_s:.2f} s), scipy loop {t_scipy * 1e3:.1f} ms, "
          f"ratio scipy/jax = {t_scipy / t_jax:.1f}x")

    m, items = 50, args.items
    keys = jax.random.split(jax.random.key(0), R)
    gen = jax.jit(jax.vmap(lambda k: synthetic_matrix(k, m, items, 3, gap=0.02).scores))
    t0 = time.perf_counter()
    jax.block_until_ready(gen(keys))
    compile_s = time.perf_counter() - t0
    t_gen = _best_of(lambda: jax.block_until_ready(gen(keys)))

    def numpy_loop():
        for i in range(R):
            r = np.random.default_rng(i)
            U = r.normal(size=(m, 3))
            V = (1 + r.normal(size=(items, 3))) / np.sqrt(3)
            c = 1.5 * r.normal(size=items)
            p = 1 / (1 + np.exp(-(U @ V.T + c)))
            s = (r.random((m, items)) < p).astype(np.float32)
            k = s.sum(1).astype(int)
            b = int(np.argmax(k))
            second = np.max(np.delete(k, b))
            d = second + round(0.02 * items) - k[b]
            cand = np.flatnonzero(s[b] == (0 if d > 0 else 1))
            s[b, r.choice(cand, abs(d), replace=False)] = 1 if d > 0 else 0

    t_np = _best_of(numpy_loop, repeat=1)
    print(f"synthetic_matrix, {R} replicates of {m}x{items}, rank 3, gap: jax {t_gen * 1e3:.1f} ms "
          f"(compile {compile_s:.2f} s), numpy loop {t_np * 1e3:.1f} ms, "
          f"ratio numpy/jax = {t_np / t_gen:.1f}x")
    print(f"devices: {jax.devices()}; jax {jax.__version__}; float32: "
          f"{jnp.zeros(()).dtype == jnp.float32}")


if __name__ == "__main__":
    main()
