"""The confident stop with and without ``skip_separated``, side by side, same instances.

Fixed-confidence identification (``mode="confidence"``, the default of
:class:`jaxeval.IdentificationCampaign`): a run stops once the leader's lower bound
clears every other upper bound. Without ``skip_separated`` a policy keeps pulling arms
that are already separated from the leader (once the leaders are fully evaluated, the
UCB index has nothing else to pull), which cannot bring the stop closer. With it those
arms are skipped. Both runs of a row play the same instances and item orders (same
seed), so the difference is the rule alone.

Per (dataset, K, policy): LLM calls to the stop (mean and median, share of K·n),
the share of runs that stopped confident, and the share of runs whose final
recommendation is not a true best arm (must stay within alpha).

    python benchmarks/bench_skip_separated.py --out benchmarks/results/skip_separated.json
"""

from __future__ import annotations

import argparse
import json
import time

import bench_tuning as bt
import numpy as np
from bench_args import at_least_one, at_least_two_arms, prepare_outputs

import jaxeval
from jaxeval import _identification as idn
from jaxeval._policies import PREDICTION_POLICIES


def one(sm, policy, K, args, skip, factors):
    n_inst = args.instances or (50 if K <= 10 else 20)
    rep = jaxeval.simulate_identification(
        sm, policy, K=K, mode="confidence", n_replicates=args.reps, n_instances=n_inst,
        seed=args.seed, batch_size=args.batch, alpha=args.alpha, cs_kinds=("eb",),
        skip_separated=skip, factors=factors if policy in PREDICTION_POLICIES else None)
    calls = rep.calls[:, -1].astype(float) / (K * rep.settings["n_items"])
    # a run ends confident, or with every arm it may still pull fully evaluated (exact
    # means): a wrong final recommendation is a wrong confident stop or an interval
    # that failed; its share must stay within alpha
    rec = np.asarray(rep.recommended[:, -1])
    wrong = rep.theta[np.arange(args.reps), rec] < rep.theta.max(1) - 1e-9
    return dict(mean=float(calls.mean()), median=float(np.median(calls)),
                confident=float(rep.status_counts[-1, idn.STATUS_CONFIDENT] / args.reps),
                wrong=float(wrong.mean()), status=rep.status_counts[-1].tolist())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["ifeval", "musr", "arc", "math5",
                                                      "tailored"], choices=list(bt.DATASETS))
    ap.add_argument("--K", nargs="+", type=int, default=[10, 50])
    ap.add_argument("--policies", nargs="+", default=["pulse_ucb", "ucbe"])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--instances", type=int, default=None,
                    help="instances per row (default 50 at K <= 10, 20 above)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/bench_skip_separated.json")
    args = ap.parse_args(argv)
    at_least_one(ap, args, ("reps", "instances", "batch"))
    at_least_two_arms(ap, args.K)
    if not 0.0 < args.alpha < 1.0:
        ap.error(f"--alpha: must lie in (0, 1), got {args.alpha}")
    prepare_outputs(ap, args, ("out",))
    rows = {}
    print("| dataset | K | policy | calls to the stop, mean (median), share of K·n: off | "
          "on | on / off | stopped confident off / on | wrong recommendation off / on |")
    print("|---|---|---|---|---|---|---|---|")
    for ds in args.datasets:
        sm = bt.load(ds)
        f = bt._factors(sm, args.seed, 8) if any(
            p in PREDICTION_POLICIES for p in args.policies) else None
        for K in args.K:
            for pol in args.policies:
                t = time.time()
                off = one(sm, pol, K, args, False, f)
                on = one(sm, pol, K, args, True, f)
                r = dict(off=off, on=on, ratio=on["mean"] / off["mean"], seconds=time.time() - t)
                rows[f"{ds}/K{K}/{pol}"] = r
                print(f"| {ds} | {K} | {pol} | {100 * off['mean']:.1f}% "
                      f"({100 * off['median']:.1f}%) | {100 * on['mean']:.1f}% "
                      f"({100 * on['median']:.1f}%) | {r['ratio']:.2f} | "
                      f"{off['confident']:.3f} / {on['confident']:.3f} | "
                      f"{off['wrong']:.3f} / {on['wrong']:.3f} |", flush=True)
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), results=rows), fh, indent=1)
    print(f"\nresults written to {args.out}")


if __name__ == "__main__":
    main()
