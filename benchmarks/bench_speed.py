"""Speed of jaxeval's identification kernels against the same algorithms in NumPy and banditeval.

Same work for every implementation: one dataset, ``K`` candidates drawn from the
candidate pool (the non-training half of the deduplicated models), the SPEC 6.1 budget
grid up to ``--max-frac`` of ``K * n`` LLM calls, checkpoints recorded at every budget.

- jaxeval: :func:`jaxeval._identification.run_identification`, ``jit(vmap(...))`` over
  chunks of ``--chunk`` replicate keys (``fold_in(key(seed), i)``), ``--reps`` in all;
  compile time (``lower().compile()``) is reported separately and the run is timed warm.
  Chunks of ~64 replicates keep the per-step working set (a few ``[chunk, n]`` arrays)
  small; one call over all 512 replicates ran at 4.4 PULSE replicates/s against 10 for
  chunks of 64 (two runs under different machine load, so only indicative).
- NumPy: ``benchmarks/numpy_reference.py`` (the same UCB-E and PULSE, a Python loop over
  steps, one replicate at a time), over ``--np-reps`` replicates.
- banditeval (optional): its own UCB-E step, one replicate at a time (see
  ``bench_banditeval.py``), over ``--be-reps`` replicates.

Figures: replicates per second, simulated LLM calls per second, and the ratio of
jaxeval's throughput to each peer's, all measured in one run of this script. PULSE uses
a factorization fitted on the training models (rank ``--rank``), the kernels' defaults
otherwise (one Newton step per refit, λ prior 1 with pseudo-count 10, EB interval).

Usage (from the repository root):

    python benchmarks/bench_speed.py --dataset ifeval --K 10 --max-frac 0.2 --reps 512 --chunk 64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy_reference as ref  # noqa: E402
from bench_banditeval import DATASETS, banditeval_ucbe, have_banditeval  # noqa: E402

import jaxeval  # noqa: E402
from jaxeval import _identification as idn  # noqa: E402
from jaxeval._factorization import ItemFactors  # noqa: E402
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS  # noqa: E402


def _time_jax(policy, data, params, K, n, budgets, b, reps, chunk, seed, order_table=None):
    """Compile once for ``chunk`` replicates, then run ``reps`` in chunks (timed warm)."""
    cfg = idn.Config(policy, num_arms=K, num_items=n, budgets=budgets, batch_size=b,
                     cs_kinds=("eb",), order_table=order_table)
    base = jax.random.key(seed)
    chunk = min(chunk, reps)
    n_chunks = -(-reps // chunk)
    keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(n_chunks * chunk))
    keys = keys.reshape(n_chunks, chunk)
    fn = jax.jit(jax.vmap(lambda k, d, p: idn.run_identification(k, d, p, cfg),
                          in_axes=(0, None, None)))
    t0 = time.perf_counter()
    compiled = fn.lower(keys[0], data, params).compile()
    t_compile = time.perf_counter() - t0
    jax.block_until_ready(compiled(keys[0], data, params))  # warm-up
    t0 = time.perf_counter()
    calls = 0
    for i in range(n_chunks):
        out = jax.block_until_ready(compiled(keys[i], data, params))
        calls += int(np.asarray(out.checkpoints.calls)[:, -1].sum())
    t_run = time.perf_counter() - t0
    return t_compile, t_run, calls, n_chunks * chunk


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dataset", default="ifeval", choices=list(DATASETS))
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--max-frac", type=float, default=0.2)
    ap.add_argument("--reps", type=int, default=512, help="jaxeval replicates")
    ap.add_argument("--chunk", type=int, default=64, help="jaxeval replicates per compiled call")
    ap.add_argument("--np-reps", type=int, default=4, help="NumPy reference replicates")
    ap.add_argument("--be-reps", type=int, default=4, help="banditeval replicates (b = 32)")
    ap.add_argument("--be-reps-b1", type=int, default=None,
                    help="banditeval replicates at b = 1 (~0.5 s each; default --be-reps)")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--regenerated", action="store_true",
                    help="also time the kernels with the item-order keys regenerated every "
                         "step (order_table=False, the kernel before order tables)")
    ap.add_argument("--out", default="/tmp/bench_speed.json")
    args = ap.parse_args(argv)

    sm = jaxeval.load(DATASETS[args.dataset]).drop_duplicates()
    train, pool = sm.split([sm.n_models // 2], seed=args.seed)
    pool_s = np.asarray(pool.scores, np.float32)
    K, n = args.K, pool_s.shape[1]
    rng = np.random.default_rng(args.seed)
    instances = np.stack([rng.choice(pool_s.shape[0], K, replace=False) for _ in range(10)])
    fracs = [f for f in DEFAULT_BUDGET_FRACTIONS if f <= args.max_frac + 1e-12]
    budgets = tuple(sorted({max(1, round(f * K * n)) for f in fracs}))
    lr = jaxeval.fit_factorization(train, rank=args.rank, rho=1.0, seed=args.seed,
                                   num_steps=500)
    V, c, u_mean = (np.asarray(x, np.float32) for x in (lr.V, lr.c, lr.u_mean))
    rho = float(getattr(lr, "rho_u", 1.0))
    data = idn.ProblemData(jnp.asarray(pool_s), jnp.asarray(instances, jnp.int32),
                           ItemFactors(jnp.asarray(V), jnp.asarray(c), jnp.asarray(u_mean)))
    params = idn.Params.make(a=1.0, scale=1.0, rho=rho)
    calls_per_rep = budgets[-1]
    print(f"{args.dataset}: K={K}, n={n}, budget {calls_per_rep} calls "
          f"({100 * args.max_frac:g}% of K*n), {len(budgets)} checkpoints; "
          f"jax devices {jax.devices()}", flush=True)

    rows = []

    def add(name, reps, seconds, compile_s=None):
        row = dict(name=name, reps=reps, seconds=seconds, reps_per_s=reps / seconds,
                   calls_per_s=reps * calls_per_rep / seconds, compile_s=compile_s)
        rows.append(row)
        cs = "" if compile_s is None else f", compile {compile_s:.1f} s"
        print(f"  {name:<28} {reps:>5} reps in {seconds:8.2f} s: {row['reps_per_s']:10.2f} "
              f"reps/s, {row['calls_per_s']:12.0f} calls/s{cs}", flush=True)
        return row

    def orders_for(r):
        g = np.random.default_rng([args.seed, r])
        return np.stack([g.permutation(n) for _ in range(K)])

    # --- PULSE
    tc, tr, calls, reps = _time_jax("pulse", data, params, K, n, budgets, 1, args.reps,
                                    args.chunk, args.seed)
    assert calls == reps * calls_per_rep
    j_pulse = add("jaxeval PULSE (b=1)", reps, tr, tc)
    if args.regenerated:
        tc, tr, _, reps = _time_jax("pulse", data, params, K, n, budgets, 1, args.reps,
                                    args.chunk, args.seed, order_table=False)
        g_pulse = add("jaxeval PULSE (b=1, regen.)", reps, tr, tc)
    t0 = time.perf_counter()
    for r in range(args.np_reps):
        S = pool_s[instances[r % len(instances)]]
        ref.pulse(S, orders_for(r), budgets, V, c, u_mean, rho=rho)
    n_pulse = add("NumPy PULSE (b=1)", args.np_reps, time.perf_counter() - t0)

    # --- UCB-E
    res_u, res_g = {}, {}
    for b in (1, 32):
        tc, tr, _, reps = _time_jax("ucbe", data, params, K, n, budgets, b, args.reps,
                                    args.chunk, args.seed)
        res_u[b] = add(f"jaxeval UCB-E (b={b})", reps, tr, tc)
        if args.regenerated:
            tc, tr, _, reps = _time_jax("ucbe", data, params, K, n, budgets, b, args.reps,
                                        args.chunk, args.seed, order_table=False)
            res_g[b] = add(f"jaxeval UCB-E (b={b}, regen.)", reps, tr, tc)
    t0 = time.perf_counter()
    for r in range(args.np_reps):
        ref.ucbe(pool_s[instances[r % len(instances)]], orders_for(r), budgets, a=1.0)
    n_ucbe = add("NumPy UCB-E (b=1)", args.np_reps, time.perf_counter() - t0)
    be = {}
    if have_banditeval():
        import torch

        torch.set_num_threads(1)
        for b in (32, 1):
            be_reps = args.be_reps if b == 32 or args.be_reps_b1 is None else args.be_reps_b1
            t0 = time.perf_counter()
            for r in range(be_reps):
                banditeval_ucbe(pool_s[instances[r % len(instances)]], budgets, a=1.0,
                                batch_size=b, seed=r)
            be[b] = add(f"banditeval UCB-E (b={b})", be_reps, time.perf_counter() - t0)
    else:
        print("  banditeval not installed (pip install banditeval==0.1.1): skipped")

    ratios = {
        "PULSE jaxeval / NumPy": j_pulse["reps_per_s"] / n_pulse["reps_per_s"],
        "UCB-E jaxeval / NumPy (b=1)": res_u[1]["reps_per_s"] / n_ucbe["reps_per_s"],
    }
    for b, row in be.items():
        ratios[f"UCB-E jaxeval / banditeval (b={b})"] = res_u[b]["reps_per_s"] / row["reps_per_s"]
    if args.regenerated:
        ratios["PULSE order table / regenerated"] = j_pulse["reps_per_s"] / g_pulse["reps_per_s"]
        for b, row in res_g.items():
            ratios[f"UCB-E order table / regenerated (b={b})"] = (
                res_u[b]["reps_per_s"] / row["reps_per_s"])
    print("\nthroughput ratios (same work, this run):")
    for k, v in ratios.items():
        print(f"  {k:<36} {v:8.1f}x")
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), n=n, budgets=budgets, rows=rows, ratios=ratios), fh,
                  indent=1)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
