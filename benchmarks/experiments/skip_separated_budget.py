"""Does ``skip_separated`` change fixed-budget identification? Same instances, both ways.

``pulse_ucb`` (a = 1) in fixed-budget mode on the tuning seed (1000), K = 10, 50
instances, SPEC 6.1's budget grid to 100%; calls to 95% / 90% and the mean accuracy over
the grid with the skip off (the fixed-budget default) and on.

    python benchmarks/experiments/skip_separated_budget.py --datasets ifeval arc --reps 100
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_tuning as bt  # noqa: E402

import jaxeval  # noqa: E402
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["ifeval", "arc"])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--out", default="/tmp/skip_separated_budget.json")
    args = ap.parse_args(argv)
    out = {}
    for ds in args.datasets:
        sm = bt.load(ds)
        f = bt._factors(sm, args.seed, 8)
        row = {}
        for skip in (False, True):
            rep = jaxeval.simulate_identification(
                sm, "pulse_ucb", K=10, seed=args.seed, factors=f, n_replicates=args.reps,
                n_instances=50, budget_fractions=DEFAULT_BUDGET_FRACTIONS, cs_kinds=("eb",),
                skip_separated=skip)
            row["on" if skip else "off"] = dict(
                to95=rep.calls_to(0.95, fraction=True), to90=rep.calls_to(0.90, fraction=True),
                mean_accuracy=float(np.mean(rep.accuracy)),
                accuracy=rep.accuracy.tolist())
        out[ds] = row
        print(f"{ds}: off to95 {row['off']['to95']:.3f} to90 {row['off']['to90']:.3f} mean acc "
              f"{row['off']['mean_accuracy']:.3f} | on to95 {row['on']['to95']:.3f} to90 "
              f"{row['on']['to90']:.3f} mean acc {row['on']['mean_accuracy']:.3f}", flush=True)
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), results=out), fh, indent=1)


if __name__ == "__main__":
    main()
