"""How often the bootstrap intervals of calls-to-X cover, on real-data-style reports.

    python benchmarks/experiments/calls_to_interval_coverage.py --instances 10 20 50 \\
        --runs 200 --out benchmarks/results/calls_to_interval_coverage.json

A 40 x 30 logistic score matrix (model accuracies uniform on [0.3, 0.8], item
difficulties normal), K = 3, every model in the candidate pool. The truth is the
``calls_to(0.8)`` of UCB-E and of uniform sampling over 4 000 instances (16 384
replicates); each of ``--runs`` studies plays ``I`` instances, 8 replicates each
(balanced), and asks ``calls_to_interval`` (90%, 400 bootstrap draws) and the paired
``calls_to_ratio`` (UCB-E / uniform) whether they cover it. The test
``tests/test_simulate.py::test_calls_to_intervals_cover_over_instances`` is the
20-instance row at 60 studies.
"""

import argparse
import json
import time
import warnings

import numpy as np

import jaxeval
from jaxeval import simulate_identification

KW = dict(K=3, budget_fractions=(0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0), cs_kinds=("eb",),
          n_train=0)


def matrix(m=40, n=30, seed=0):
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.3, 0.8, m)
    logit = np.log(theta / (1 - theta))[:, None] + rng.normal(0, 1, n)[None, :]
    s = rng.random((m, n)) < 1 / (1 + np.exp(-logit))
    return jaxeval.ScoreMatrix(s.astype(np.float32))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, nargs="+", default=[10, 20, 50])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--accuracy", type=float, default=0.8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    sm, acc = matrix(), args.accuracy
    big = dict(KW, n_replicates=16384, n_instances=4000, seed=999)
    tu = simulate_identification(sm, "ucbe", **big).calls_to(acc)
    tv = simulate_identification(sm, "uniform", **big).calls_to(acc)
    print(f"truth: UCB-E {tu:.2f} calls, uniform {tv:.2f}, ratio {tu / tv:.3f}")
    rows = []
    for n_inst in args.instances:
        t = time.time()
        hit_u = hit_r = 0
        w_u, w_r = [], []
        for s in range(args.runs):
            k2 = dict(KW, n_replicates=8 * n_inst, n_instances=n_inst,
                      instance_assignment="balanced", seed=s)
            u = simulate_identification(sm, "ucbe", **k2)
            v = simulate_identification(sm, "uniform", **k2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lo, hi = u.calls_to_interval(acc, level=0.9, n_boot=400, seed=s)
            hit_u += lo <= tu <= hi
            w_u.append(hi - lo)
            _, lo, hi = u.calls_to_ratio(v, acc, level=0.9, n_boot=400, seed=s)
            hit_r += lo <= tu / tv <= hi
            w_r.append(hi - lo)
        row = dict(instances=n_inst, runs=args.runs, interval_coverage=hit_u / args.runs,
                   ratio_coverage=hit_r / args.runs,
                   interval_median_width_calls=float(np.median(w_u)),
                   ratio_median_width=float(np.median(w_r)))
        rows.append(row)
        print(f"{n_inst} instances: calls_to_interval covers {row['interval_coverage']:.3f}, "
              f"calls_to_ratio {row['ratio_coverage']:.3f} (nominal 0.90; widths "
              f"{row['interval_median_width_calls']:.1f} calls, ratio "
              f"{row['ratio_median_width']:.3f}); {time.time() - t:.0f} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(truth=dict(ucbe=tu, uniform=tv, ratio=tu / tv), accuracy=acc,
                           total_calls=3 * 30, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
