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
jaxeval's throughput to each peer's, all measured in one run of this script. Every
implementation is timed once per round, ``--rounds`` rounds interleaved (so a burst of
load on a shared machine hits all of them alike); a figure is the median over rounds and
a ratio the median of the rounds' own ratios. jaxeval's UCB-E is timed twice: as run in
studies (it also updates an empirical-Bernstein interval per item, which neither the NumPy
UCB-E nor banditeval computes) and with ``cs_kinds=()`` (no interval: the same work as
the peers, every decision the same; the "no interval" rows and ratios). PULSE (both
indices, ``pulse`` and ``pulse_ucb``) computes the same interval on both sides. PULSE uses
a factorization fitted on the training models (rank ``--rank``), the kernels' defaults
otherwise (one Newton step per refit, λ prior 1 with pseudo-count 10, EB interval).

Usage (from the repository root):

    python benchmarks/bench_speed.py --dataset ifeval --K 10 --max-frac 0.2 --reps 512 --chunk 64

On a GPU the kernels need thousands of vmapped replicates per call to fill the chip, e.g.
``--reps 65536 --chunk 16384`` (``benchmarks/experiments/gpu_run.sh`` runs the grid of
BUILD_NOTES.md "Speed on a GPU"); the peers still run on the CPU.
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
from bench_args import (  # noqa: E402
    at_least_one,
    at_least_two_arms,
    budget_fractions_upto,
    prepare_outputs,
)
from bench_banditeval import DATASETS, banditeval_ucbe, have_banditeval  # noqa: E402
from speed_problem import speed_problem  # noqa: E402

from jaxeval import _identification as idn  # noqa: E402


def _compile_jax(policy, data, params, K, n, budgets, b, reps, chunk, seed, order_table=None,
                 cs_kinds=("eb",)):
    """Compile once for ``chunk`` replicates (and warm up); returns the compile seconds
    and a timing closure. ``reps`` is rounded up to whole chunks (``--reps 100 --chunk
    64`` runs 128); the closure returns the count it ran, which the rates use."""
    cfg = idn.Config(policy, num_arms=K, num_items=n, budgets=budgets, batch_size=b,
                     cs_kinds=cs_kinds, order_table=order_table)
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

    def run():
        """Run every chunk (warm); ``(seconds, calls, replicates)``."""
        t0 = time.perf_counter()
        calls = 0
        for i in range(n_chunks):
            out = jax.block_until_ready(compiled(keys[i], data, params))
            calls += int(np.asarray(out.checkpoints.calls)[:, -1].sum())
        return time.perf_counter() - t0, calls, n_chunks * chunk

    return t_compile, run


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
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved timing rounds (figures are medians over rounds)")
    ap.add_argument("--out", default="/tmp/bench_speed.json")
    args = ap.parse_args(argv)
    at_least_one(ap, args, ("K", "reps", "chunk", "np_reps", "be_reps", "be_reps_b1",
                            "rounds", "rank"))
    if not 0.0 < args.max_frac <= 1.0:
        ap.error(f"--max-frac: must lie in (0, 1], got {args.max_frac}")
    at_least_two_arms(ap, args.K)
    budget_fractions_upto(ap, args.max_frac)
    prepare_outputs(ap, args, ("out",))

    prob = speed_problem(args.dataset, K=args.K, max_frac=args.max_frac, seed=args.seed,
                         rank=args.rank)
    pool_s, instances, budgets = prob.pool_scores, prob.instances, prob.budgets
    K, n = prob.K, prob.n
    V, c, u_mean, rho, data, params = prob.V, prob.c, prob.u_mean, prob.rho, prob.data, prob.params
    calls_per_rep = budgets[-1]
    print(f"{args.dataset}: K={K}, n={n}, budget {calls_per_rep} calls "
          f"({100 * args.max_frac:g}% of K*n), {len(budgets)} checkpoints; "
          f"jax devices {jax.devices()}", flush=True)

    # Every implementation is timed once per round, the rounds interleaved, so that a
    # burst of load on a shared machine hits all of them alike; each figure is the median
    # over rounds and each ratio the median of the rounds' own ratios.
    impls = {}  # name -> (timing closure returning (seconds, reps), compile seconds)

    def jax_impl(name, policy, b, order_table=None, cs_kinds=("eb",)):
        tc, run = _compile_jax(policy, data, params, K, n, budgets, b, args.reps,
                               args.chunk, args.seed, order_table, cs_kinds)

        def timed():
            sec, calls, reps = run()
            assert calls == reps * calls_per_rep, (name, calls, reps)
            return sec, reps

        impls[name] = (timed, tc)

    def orders_for(r):
        g = np.random.default_rng([args.seed, r])
        return np.stack([g.permutation(n) for _ in range(K)])

    def loop_impl(name, reps, one):
        def timed():
            t0 = time.perf_counter()
            for r in range(reps):
                one(r)
            return time.perf_counter() - t0, reps

        impls[name] = (timed, None)

    jax_impl("jaxeval PULSE (b=1)", "pulse", 1)
    if args.regenerated:
        jax_impl("jaxeval PULSE (b=1, regen.)", "pulse", 1, order_table=False)
    loop_impl("NumPy PULSE (b=1)", args.np_reps, lambda r: ref.pulse(
        pool_s[instances[r % len(instances)]], orders_for(r), budgets, V, c, u_mean, rho=rho))
    # pulse_ucb, the PULSE of the issue-7 accuracy tables (a = 1, its tuned value)
    jax_impl("jaxeval pulse_ucb (b=1)", "pulse_ucb", 1)
    loop_impl("NumPy pulse_ucb (b=1)", args.np_reps, lambda r: ref.pulse(
        pool_s[instances[r % len(instances)]], orders_for(r), budgets, V, c, u_mean, rho=rho,
        a=1.0))
    for b in (1, 32):
        jax_impl(f"jaxeval UCB-E (b={b})", "ucbe", b)
        jax_impl(f"jaxeval UCB-E (b={b}, no int.)", "ucbe", b, cs_kinds=())
        if args.regenerated:
            jax_impl(f"jaxeval UCB-E (b={b}, regen.)", "ucbe", b, order_table=False)
    loop_impl("NumPy UCB-E (b=1)", args.np_reps, lambda r: ref.ucbe(
        pool_s[instances[r % len(instances)]], orders_for(r), budgets, a=1.0))
    have_be = have_banditeval()
    if have_be:
        import torch

        torch.set_num_threads(1)
        for b in (32, 1):
            be_reps = args.be_reps if b == 32 or args.be_reps_b1 is None else args.be_reps_b1
            loop_impl(f"banditeval UCB-E (b={b})", be_reps, lambda r, b=b: banditeval_ucbe(
                pool_s[instances[r % len(instances)]], budgets, a=1.0, batch_size=b, seed=r))
    else:
        print("  banditeval not installed (pip install banditeval==0.1.1): skipped")

    per_round = {name: [] for name in impls}  # replicates per second, one per round
    for rnd in range(args.rounds):
        print(f"round {rnd + 1} of {args.rounds}", flush=True)
        for name, (timed, _) in impls.items():
            sec, reps = timed()
            per_round[name].append(reps / sec)
            print(f"  {name:<28} {reps:>5} reps in {sec:8.2f} s: {reps / sec:10.2f} reps/s",
                  flush=True)

    rows = []
    for name, (_, tc) in impls.items():
        rps = float(np.median(per_round[name]))
        rows.append(dict(name=name, reps_per_s=rps, calls_per_s=rps * calls_per_rep,
                         reps_per_s_rounds=per_round[name], compile_s=tc))
    print(f"\nmedian over {args.rounds} rounds:")
    for r in rows:
        cs = "" if r["compile_s"] is None else f", compile {r['compile_s']:.1f} s"
        print(f"  {r['name']:<28} {r['reps_per_s']:10.2f} reps/s, {r['calls_per_s']:12.0f} "
              f"calls/s{cs}")

    def ratio(a, b):
        return float(np.median(np.asarray(per_round[a]) / np.asarray(per_round[b])))

    ratios = {
        "PULSE jaxeval / NumPy": ratio("jaxeval PULSE (b=1)", "NumPy PULSE (b=1)"),
        "pulse_ucb jaxeval / NumPy": ratio("jaxeval pulse_ucb (b=1)", "NumPy pulse_ucb (b=1)"),
        "UCB-E jaxeval / NumPy (b=1)": ratio("jaxeval UCB-E (b=1)", "NumPy UCB-E (b=1)"),
        "UCB-E no interval jaxeval / NumPy (b=1)": ratio("jaxeval UCB-E (b=1, no int.)",
                                                         "NumPy UCB-E (b=1)"),
    }
    if have_be:
        for b in (32, 1):
            ratios[f"UCB-E jaxeval / banditeval (b={b})"] = ratio(
                f"jaxeval UCB-E (b={b})", f"banditeval UCB-E (b={b})")
            ratios[f"UCB-E no interval jaxeval / banditeval (b={b})"] = ratio(
                f"jaxeval UCB-E (b={b}, no int.)", f"banditeval UCB-E (b={b})")
    if args.regenerated:
        ratios["PULSE order table / regenerated"] = ratio(
            "jaxeval PULSE (b=1)", "jaxeval PULSE (b=1, regen.)")
        for b in (1, 32):
            ratios[f"UCB-E order table / regenerated (b={b})"] = ratio(
                f"jaxeval UCB-E (b={b})", f"jaxeval UCB-E (b={b}, regen.)")
    print("\nthroughput ratios (same work, this run):")
    for k, v in ratios.items():
        print(f"  {k:<46} {v:8.1f}x")
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), n=n, budgets=budgets, rows=rows, ratios=ratios), fh,
                  indent=1)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
