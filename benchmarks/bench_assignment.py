"""Calls to 95% of `pulse_ucb` and tuned UCB-E under random and balanced instance
assignment (``simulate_identification(instance_assignment=...)``).

The nineteenth session's table (BUILD_NOTES "Balanced instance assignment"): report
seed 0, K = 10, 200 replicates over 50 instances, the tuned ``a`` of the "50 instances
instead of 10" table, the full SPEC 6.1 grid, factors as ``bench_tuning.py`` fits them.

    python benchmarks/bench_assignment.py --datasets ifeval arc math5 musr tailored
"""

from __future__ import annotations

import argparse
import json
import time

import bench_tuning as bt
from bench_args import at_least_one, prepare_outputs

import jaxeval
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

#: (UCB-E a, pulse_ucb a) tuned on seed 1000 (BUILD_NOTES, K = 10 tables)
TUNED = {"arc": (3.0, 1.0), "math5": (0.3, 1.0), "ifeval": (10.0, 1.0), "musr": (1.0, 1.0),
         "tailored": (3.0, 3.0)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--datasets", nargs="+", default=list(TUNED), choices=list(TUNED))
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default="/tmp/bench_assignment.json")
    args = ap.parse_args(argv)
    at_least_one(ap, args, ("reps",))
    prepare_outputs(ap, args, ("out",))
    out = {}
    for ds in args.datasets:
        sm = bt.load(ds)
        f = bt._factors(sm, 0, 8)
        row = {}
        for assign in ("random", "balanced"):
            for pol, a in zip(("ucbe", "pulse_ucb"), TUNED[ds]):
                t = time.time()
                rep = jaxeval.simulate_identification(
                    sm, pol, K=10, seed=0, n_replicates=args.reps, n_instances=50,
                    budget_fractions=DEFAULT_BUDGET_FRACTIONS, rank=8, cs_kinds=("eb",), a=a,
                    factors=f if pol == "pulse_ucb" else None, instance_assignment=assign)
                row[f"{assign}/{pol}"] = (rep.calls_to(0.95, fraction=True),
                                          rep.calls_to(0.90, fraction=True),
                                          round(time.time() - t, 1))
            # the ratio's cell as bench_tuning writes it (<1, >max, -: one or both never
            # reach 95%), not the 0 of x / inf nor a NaN (a calls-to figure never reached
            # is still written as Infinity)
            row[f"{assign}/ratio"] = bt._ratio(row[f"{assign}/pulse_ucb"][0],
                                               row[f"{assign}/ucbe"][0])
        out[ds] = row
        print(ds, json.dumps(row), flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
