"""How much of the calls to 95% identification is spent ordering the top two?

For every report instance of ``bench_tuning.py`` (same seed, split and instances), the
study is run twice per policy:

1. as is, ``K`` candidates;
2. on the instance's **true top two** only (``instances=`` of
   :func:`jaxeval.simulate_identification`), on the same absolute budget grid
   (in LLM calls, capped at ``2 n``), with the exploration constant ``a`` that is best
   for this oracle on the grid ``--a-grid`` (a generous choice: it is picked on the
   report instances themselves).

The second run is a policy told which two candidates lead and left only to order them.
Its two arms read the item-order streams of arms 0 and 1 of the replicate key, not the
streams the two models had in the full run (same distribution, other draws: noise, not
bias).
Its calls to 95% approximate what any policy with the same estimator must spend on
that part of the problem whatever it does with the other ``K - 2`` candidates; the
ratio of the two runs says how much of a policy's budget the search among all ``K``
candidates costs. Not a proof of a lower bound (the two-arm index is not the optimal
two-arm allocation), a measurement of where the calls go.

Usage (from the repository root; ``a`` of the full runs: the tuned values of
BUILD_NOTES "50 instances instead of 10"):

    python benchmarks/bench_top2.py --datasets arc math5 ifeval musr --reps 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import jaxeval

# one set of settings is passed to every policy; those a policy does not read are
# expected here, not a mistake to warn about
warnings.filterwarnings("ignore", message=r".* (has|have) no effect for policy ")

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the same datasets and offline factorization as the tuning tables
from bench_args import (  # noqa: E402
    at_least_one,
    at_least_two_arms,
    budget_fractions_upto,
    prepare_outputs,
)
from bench_tuning import DATASETS, _factors, _ratio, load  # noqa: E402

#: UCB-E's and ``pulse_ucb``'s ``a`` tuned on the tuning seed (BUILD_NOTES, 50 instances,
#: K = 10; TailoredBench: "TailoredBench GSM8K, SPEC 6.1's fifth set").
TUNED_UCBE_A = {"arc": 3.0, "math5": 0.3, "ifeval": 10.0, "musr": 1.0, "tailored": 3.0}
TUNED_PULSE_A = {"arc": 1.0, "math5": 1.0, "ifeval": 1.0, "musr": 1.0, "tailored": 3.0}


def _fmt(calls, total):
    return ">max" if not np.isfinite(calls) else f"{100 * calls / total:.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--max-frac", type=float, default=1.0)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--a-grid", nargs="+", type=float, default=[0.3, 1.0, 3.0, 10.0])
    ap.add_argument("--out", default="/tmp/bench_top2.json")
    args = ap.parse_args(argv)
    K = args.K
    at_least_one(ap, args, ("reps", "instances", "rank"))
    at_least_two_arms(ap, K)
    fracs = budget_fractions_upto(ap, args.max_frac)
    prepare_outputs(ap, args, ("out",))
    rows, results = [], {}
    for ds in args.datasets:
        t0 = time.time()
        sm = load(ds)
        n = sm.n_items
        total = K * n
        f = _factors(sm, args.seed, args.rank)
        kw = dict(seed=args.seed, n_replicates=args.reps, rank=args.rank, cs_kinds=("eb",))
        full = {}
        for pol, a in (("ucbe", TUNED_UCBE_A[ds]), ("pulse_ucb", TUNED_PULSE_A[ds])):
            rep = jaxeval.simulate_identification(
                sm, pol, K=K, budget_fractions=fracs, n_instances=args.instances, a=a,
                factors=f if pol == "pulse_ucb" else None, **kw)
            full[pol] = (rep.calls_to(0.95), a)
        inst = rep.instances  # [I, K] pool rows, shared by every policy
        # the true top two of every instance (pool rows; the row means of the complete
        # matrix), in instance order, so replicate r plays the top two of the instance it
        # played above (a replicate's instance index comes from its key and I)
        row_mean = dict(zip(np.asarray(sm.models).tolist(), np.asarray(sm.scores).mean(1)))
        means = {i: np.array([row_mean[m] for m in rep.pool_models[inst[i]]])
                 for i in range(len(inst))}
        top2 = np.stack([inst[i][np.argsort(means[i])[-2:][::-1]] for i in range(len(inst))])
        played = sorted(set(rep.instance.tolist()))
        gaps = np.sort([np.sort(means[i])[-1] - np.sort(means[i])[-2] for i in played])
        budgets = sorted({min(int(round(fr * total)), 2 * n) for fr in fracs} | {2 * n})
        top = {}
        for pol in ("ucbe", "pulse_ucb"):
            best = (np.inf, float("nan"))  # no a of the grid reaching 95%: a shows as nan
            for a in args.a_grid:
                r2 = jaxeval.simulate_identification(
                    sm, pol, K=2, budgets=budgets, instances=top2, a=a,
                    factors=f if pol == "pulse_ucb" else None, **kw)
                c = r2.calls_to(0.95)
                if c < best[0]:
                    best = (c, a)
            top[pol] = best
        wall = time.time() - t0
        results[ds] = dict(n=n, K=K, full={p: list(v) for p, v in full.items()},
                           top2={p: list(v) for p, v in top.items()},
                           gaps_items=(gaps * n).tolist(), wall_s=wall)
        rows.append((ds, n, gaps, full, top))
        print(f"{ds}: full {full}, top-2 oracle {top} ({wall:.0f}s)", flush=True)
        with open(args.out, "w") as fh:  # after every dataset: a crash loses no finished one
            json.dump(dict(args=vars(args), results=results), fh, indent=1)
    print()
    print(f"Calls to 95% as a share of K*n (K = {K}); oracle = the same policy on the true "
          "top two only, best a of the grid")
    print("| dataset | n | gaps (items): 3 smallest / median | UCB-E | UCB-E top-2 oracle "
          "| oracle / UCB-E | `pulse_ucb` | `pulse_ucb` top-2 oracle | oracle / UCB-E "
          "| `pulse_ucb` / UCB-E |")
    print("|---" * 10 + "|")
    for ds, n, gaps, full, top in rows:
        u = full["ucbe"][0]
        g = gaps * n
        low = ", ".join(f"{x:.0f}" for x in g[:3])
        print(f"| {ds} | {n} | {low} / {np.median(g):.0f} | "
              f"{_fmt(u, K * n)} | {_fmt(top['ucbe'][0], K * n)} (a={top['ucbe'][1]:g}) | "
              f"{_ratio(top['ucbe'][0], u)} | {_fmt(full['pulse_ucb'][0], K * n)} | "
              f"{_fmt(top['pulse_ucb'][0], K * n)} (a={top['pulse_ucb'][1]:g}) | "
              f"{_ratio(top['pulse_ucb'][0], u)} | {_ratio(full['pulse_ucb'][0], u)} |")
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), results=results), fh, indent=1)
    print(f"\nresults written to {args.out}")


if __name__ == "__main__":
    main()
