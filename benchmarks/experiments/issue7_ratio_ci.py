"""How sure are issue 7's ratios? Paired bootstrap intervals over instances.

Replays the report runs of the issue-7 table (``benchmarks/results/issue7_defaults.json``:
report seed 0, 200 replicates over 50 instances at K = 10 and 20 at K = 50, budget grid
to 100% of K·n, factors fitted as ``bench_tuning.py`` fits them) for tuned UCB-E (its
recorded ``a``) and ``pulse_ucb`` at its default, checks that the calls to 95% are the
recorded ones, and gives for each row the ratio PULSE / UCB-E with a 90% paired
bootstrap interval (:meth:`jaxeval.IdentificationReport.calls_to_ratio`: the row's
instances resampled, each with all its replicates, the same draw for both policies).
The median over the five sets gets an interval too: each draw resamples every set's
instances independently and takes the median of the five ratios.

    python benchmarks/experiments/issue7_ratio_ci.py --out benchmarks/results/issue7_ratio_ci.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_tuning as bt  # noqa: E402

import jaxeval  # noqa: E402
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS, _ratio  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "issue7_defaults.json"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["ifeval", "musr", "arc", "math5",
                                                      "tailored"])
    ap.add_argument("--K", nargs="+", type=int, default=[10, 50])
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--out", default="/tmp/issue7_ratio_ci.json")
    args = ap.parse_args(argv)
    recorded = json.loads(RESULTS.read_text())
    rargs = recorded["args"]
    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= rargs["max_frac"] + 1e-12)
    q = (1 - args.level) / 2
    rows, draws = {}, {K: [] for K in args.K}
    for ds in args.datasets:
        sm = bt.load(ds)
        f_rep = bt._factors(sm, rargs["seed"], rargs["rank"])
        for K in args.K:
            rec = recorded["results"][f"{ds}/K{K}"]
            inst = rargs["instances"] or (50 if K <= 10 else 20)
            kw = dict(K=K, budget_fractions=fracs, n_replicates=rargs["reps"],
                      n_instances=inst, rank=rargs["rank"], cs_kinds=("eb",),
                      seed=rargs["seed"])
            t = time.time()
            u = jaxeval.simulate_identification(sm, "ucbe", a=rec["chosen"]["ucbe"], **kw)
            p = jaxeval.simulate_identification(sm, "pulse_ucb", a=rec["chosen"]["pulse_ucb"],
                                                factors=f_rep, **kw)
            for pol, rep in (("ucbe", u), ("pulse_ucb", p)):
                want = rec["report"][pol][0]
                got = rep.calls_to(0.95, fraction=True)
                if not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
                    raise SystemExit(f"{ds} K={K} {pol}: calls to 95% {got} is not the "
                                     f"recorded {want}: not the same run")
            ratio, lo, hi = p.calls_to_ratio(u, 0.95, level=args.level, n_boot=args.n_boot,
                                             seed=0)
            dp, du = p._boot_calls_to(0.95, args.n_boot, 1 + len(rows), u)
            draws[K].append([_ratio(a, b) for a, b in zip(dp, du)])
            rows[f"{ds}/K{K}"] = dict(ratio=ratio, low=lo, high=hi, pulse_to95=p.calls_to(
                0.95, fraction=True), ucbe_to95=u.calls_to(0.95, fraction=True),
                seconds=time.time() - t)
            print(f"| {ds} | {K} | {ratio:.2f} | [{lo:.2f}, {hi:.2f}] |", flush=True)
    med = {}
    for K in args.K:
        d = np.array(draws[K], float)  # [sets, n_boot]; NaN: neither reached 95%
        m = np.array([np.median(col[~np.isnan(col)]) if (~np.isnan(col)).any() else np.nan
                      for col in d.T])
        point = float(np.median([rows[f"{ds}/K{K}"]["ratio"] for ds in args.datasets]))
        med[K] = dict(median=point, low=float(np.nanquantile(m, q)),
                      high=float(np.nanquantile(m, 1 - q)),
                      share_at_or_below_070=float(np.nanmean(m <= 0.70)))
        print(f"K = {K}: median ratio {point:.2f}, {args.level:.0%} interval "
              f"[{med[K]['low']:.2f}, {med[K]['high']:.2f}]; share of draws <= 0.70: "
              f"{med[K]['share_at_or_below_070']:.3f}", flush=True)
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), rows=rows, median=med), fh, indent=1)


if __name__ == "__main__":
    main()
