"""Identification accuracy versus LLM calls for every policy (SPEC 6.1 protocol).

For each dataset and K, every policy runs on the same instances (K candidates drawn
from the non-training pool) and the same per-arm item orders (same seed => same
replicate keys => same instance choice and order streams); the recommended arm at each
budget of the SPEC 6.1 grid is scored (ties count), and the calls needed for 95% / 90%
accuracy are interpolated linearly. Duplicated rows are removed; half of the models
train the factorization used by PULSE and naive pooling.

Usage (from the repository root; data in ../shared/data or the bundled copies):

    python benchmarks/bench_identification.py --K 10 --reps 40 --max-frac 0.5
    python benchmarks/bench_identification.py --datasets ifeval musr --K 50 --reps 20

Prints a markdown table (calls to 95% as a share of K*n) and writes every curve as JSON
to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import jaxeval
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

DATASETS = {
    "ifeval": "oll2_ifeval",
    "musr": "oll2_musr",
    "arc": "oll2_arc_challenge",
    "math5": "oll2_math_lvl5",
}
POLICIES = ("uniform", "ucbe", "sysrs", "naive", "pulse_ucb", "pulse")


def _fmt(x):
    return ">max" if not np.isfinite(x) else f"{100 * x:.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--K", nargs="+", type=int, default=[10])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--instances", type=int, default=None, help="default 10 (K=10) / 5 (K=50)")
    ap.add_argument("--max-frac", type=float, default=0.5)
    ap.add_argument("--a", type=float, default=1.0, help="UCB-E / pulse_ucb / naive constant")
    ap.add_argument("--scale", type=float, default=1.0, help="PULSE exploration scale")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/bench_identification.json")
    args = ap.parse_args(argv)

    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= args.max_frac + 1e-12)
    rows, curves = [], {}
    for ds in args.datasets:
        sm = jaxeval.load(DATASETS[ds])
        # fit the factorization once per dataset on the same training rows that
        # simulate_identification uses (same seed => same split)
        dd = sm.drop_duplicates()
        train, _ = dd.split([dd.n_models // 2], seed=args.seed)
        factors = None
        if any(p in ("naive", "pulse", "pulse_ucb") for p in args.policies):
            factors = jaxeval.fit_factorization(
                train, rank=args.rank, rho=1.0, seed=args.seed, num_steps=1000
            )
        for K in args.K:
            inst = args.instances or (10 if K <= 10 else 5)
            res = {}
            for pol in args.policies:
                t0 = time.time()
                rep = jaxeval.simulate_identification(
                    sm, pol, K=K, budget_fractions=fracs, n_replicates=args.reps,
                    seed=args.seed, n_instances=inst, a=args.a, scale=args.scale,
                    rank=args.rank, batch_size=args.batch, cs_kinds=("eb",),
                    factors=factors,
                )
                wall = time.time() - t0
                gaps = np.sort(rep.theta, axis=1)
                gap = float(np.median(gaps[:, -1] - gaps[:, -2]))
                res[pol] = (rep.calls_to(0.95, fraction=True), rep.calls_to(0.90, fraction=True))
                curves[f"{ds}/K{K}/{pol}"] = dict(
                    budget_fractions=rep.budget_fractions.tolist(),
                    accuracy=rep.accuracy.tolist(), calls_to_95=res[pol][0],
                    calls_to_90=res[pol][1], coverage_family=rep.coverage_family.tolist(),
                    wall_s=wall, median_gap=gap,
                )
                print(f"{ds} K={K} {pol:>9}: to95 {_fmt(res[pol][0])} to90 {_fmt(res[pol][1])} "
                      f"cov {rep.coverage_family[0]:.3f} acc@max {rep.accuracy[-1]:.3f} "
                      f"({wall:.0f}s)", flush=True)
            rows.append((ds, K, gap, res))
    print()
    print("| dataset | K | median gap | " + " | ".join(args.policies) + " |")
    print("|---|---|---|" + "---|" * len(args.policies))
    for ds, K, gap, res in rows:
        cells = " | ".join(f"{_fmt(res[p][0])} ({_fmt(res[p][1])})" for p in args.policies)
        print(f"| {ds} | {K} | {gap:.3f} | {cells} |")
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), curves=curves), fh, indent=1)
    print(f"\ncurves written to {args.out}")


if __name__ == "__main__":
    main()
