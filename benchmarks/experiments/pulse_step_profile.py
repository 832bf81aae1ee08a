"""Where a PULSE step goes: ``pulse_ucb`` compiled with and without its online refit and
its intervals, timed in interleaved rounds. IFEval, K = 10, rank-8 factorization fitted
on the training half, b = 1, budget grid to 20% of K n (the set-up of
``bench_speed.py``), 2 chunks of 256 vmapped replicates. Microseconds per
replicate-step (median over rounds). BUILD_NOTES.md, "Thirtieth session", has the
figures.

    python benchmarks/experiments/pulse_step_profile.py
"""

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from speed_problem import speed_problem  # noqa: E402

from jaxeval import _identification as idn  # noqa: E402

VARIANTS = {
    "pulse_ucb (EB + Hoeffding, as studies run)": dict(),
    "without the online refit": dict(refit=False),
    "EB interval only": dict(cs_kinds=("eb",)),
    "no interval": dict(cs_kinds=()),
}


def timed_kernel(cfg, keys, data, params):
    """``run_identification`` under ``cfg`` compiled for a row of ``keys`` (``[chunks,
    lanes]`` replicate keys) and warmed up; returns a closure that runs every chunk and
    gives the seconds per replicate."""
    fn = jax.jit(jax.vmap(lambda k, d, p: idn.run_identification(k, d, p, cfg),
                          in_axes=(0, None, None)))
    compiled = fn.lower(keys[0], data, params).compile()
    jax.block_until_ready(compiled(keys[0], data, params))

    def run():
        t0 = time.perf_counter()
        for ks in keys:
            jax.block_until_ready(compiled(ks, data, params))
        return (time.perf_counter() - t0) / keys.size

    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)

    prob = speed_problem("ifeval", K=10, max_frac=0.2, seed=0, rank=8)
    K, n, budgets, data, params = prob.K, prob.n, prob.budgets, prob.data, prob.params
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(
        jnp.arange(512)).reshape(2, 256)
    runs = {}
    for name, kw in VARIANTS.items():
        cfg = idn.Config("pulse_ucb", num_arms=K, num_items=n, budgets=budgets,
                         batch_size=1, **kw)
        runs[name] = timed_kernel(cfg, keys, data, params)
    per = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            per[name].append(run())
    steps = budgets[-1]  # b = 1: one step per call
    for name, sec in per.items():
        med = float(np.median(sec))
        print(f"{name:<44} {1e3 * med:7.3f} ms/replicate  {1e6 * med / steps:6.2f} "
              "us/replicate-step")


if __name__ == "__main__":
    main()
