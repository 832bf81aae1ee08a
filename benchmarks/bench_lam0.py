"""The λ prior learned on training models (``jaxeval.learn_lam0``) against λ₀ = 1.

The nineteenth session's comparison (BUILD_NOTES "The λ prior learned on training
models"): `pulse_ucb` (a = 1), K = 10, 50 instances, SPEC 6.1 grid to 50% of K·n,
factors fitted as ``bench_tuning.py`` fits them, on one seed; prints the learned λ₀ and
calls to 95% / 90% and the mean accuracy over the grid for both priors.

    python benchmarks/bench_lam0.py --seed 1000 --reps 100 --datasets ifeval arc math5 musr
"""

from __future__ import annotations

import argparse
import json
import time

import bench_tuning as bt
import numpy as np
from bench_args import at_least_one, prepare_outputs

import jaxeval
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=1000, help="the tuning seed (default)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--datasets", nargs="+", default=["ifeval", "arc", "math5", "musr"],
                    choices=list(bt.DATASETS))
    ap.add_argument("--out", default="/tmp/bench_lam0.json")
    args = ap.parse_args(argv)
    at_least_one(ap, args, ("reps",))
    prepare_outputs(ap, args, ("out",))
    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5 + 1e-12)
    out = {}
    for ds in args.datasets:
        sm = bt.load(ds)
        dd = sm.drop_duplicates()
        train, _ = dd.split([dd.n_models // 2], seed=args.seed)
        f = bt._factors(sm, args.seed, 8)
        t = time.time()
        lam = jaxeval.learn_lam0(train, rank=8, seed=args.seed, num_steps=1000)
        row = {"lam0_learned": lam, "learn_s": time.time() - t}
        for name, l0 in (("lam1", 1.0), ("learned", lam)):
            rep = jaxeval.simulate_identification(
                sm, "pulse_ucb", K=10, seed=args.seed, factors=f, lam0=l0,
                budget_fractions=fracs, n_replicates=args.reps, n_instances=50,
                cs_kinds=("eb",))
            row[name] = (rep.calls_to(0.95, fraction=True), rep.calls_to(0.90, fraction=True),
                         float(np.mean(rep.accuracy)))
        out[ds] = row
        print(ds, row, flush=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
