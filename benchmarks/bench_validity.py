"""Family-wise coverage of every confidence-sequence kind (SPEC 2.4, 5).

For each truth source (the OLL v2 sets, TailoredBench GSM8K and the eight metabench
OLL v1 files from ../shared/data, and synthetic low-rank truth) and each kind of
predictions (the fitted factorization, biased by ``--bias`` (+0.3), random, adversarial
``1 - S``), PULSE runs ``--reps`` replicates and we count the replicates in which *all K
intervals hold at every checkpoint at once* (anytime, simultaneous). Validity requires coverage
>= 1 - alpha within the binomial tolerance ``3 sqrt(alpha (1 - alpha) / R)``. The same
widths centred on the naive pooled estimate (observed scores plus raw predictions, no
correction) show naive pooling's coverage collapsing under biased predictions.

Usage (from the repository root):

    python benchmarks/bench_validity.py --reps 2000
    python benchmarks/bench_validity.py --reps 2000 --sources synthetic --preds none biased
    python benchmarks/bench_validity.py --reps 2000 --sources metabench --preds biased

``--sources metabench`` expands to the eight ``mb_*`` sources. The metabench files are
loaded with ``duplicate_names="rename"``; the truth for identification is always the
row mean over the file's items (never the file's ``full_score_pct`` target). Candidate
models with missing cells (only in ``mb_aggregate``, six benchmark-level scores) are
dropped, since the simulation needs each candidate's full row; with its six items the
factorization rank is capped at 3 and the 1/3/5/10% checkpoints round to 1, 2 and 3
calls out of K*n = 30.

Prints a markdown table; exits non-zero if a DR interval misses its target.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import jaxeval
from jaxeval._identification import CORRUPTIONS, CS_KINDS
from jaxeval._policies import POLICIES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import at_least_one, at_least_two_arms  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SOURCES = {
    "ifeval": "oll2_ifeval",
    "musr": "oll2_musr",
    "arc": "oll2_arc_challenge",
    "math5": "oll2_math_lvl5",
    "gsm8k_tb": str(SHARED / "tailoredbench_gsm8k.npz"),
    "mb_aggregate": str(SHARED / "metabench_oll1_aggregate_6bench.npz"),
    "mb_arc": str(SHARED / "metabench_oll1_arc_selected.npz"),
    "mb_arc_v2": str(SHARED / "metabench_oll1_arc_v2_selected.npz"),
    "mb_gsm8k": str(SHARED / "metabench_oll1_gsm8k_selected.npz"),
    "mb_gsm8k_v2": str(SHARED / "metabench_oll1_gsm8k_v2_selected.npz"),
    "mb_mmlu": str(SHARED / "metabench_oll1_mmlu_selected.npz"),
    "mb_truthfulqa": str(SHARED / "metabench_oll1_truthfulqa_selected.npz"),
    "mb_winogrande": str(SHARED / "metabench_oll1_winogrande_selected.npz"),
    "synthetic": None,
}
#: source groups accepted by ``--sources``
GROUPS = {"metabench": [s for s in SOURCES if s.startswith("mb_")]}


def load_source(src: str) -> jaxeval.ScoreMatrix:
    """Load a truth source; metabench files keep repeated names (renamed) and lose
    the models with missing cells (the simulation needs every candidate's full row)."""
    path = SOURCES[src]
    if not path.endswith(".npz"):
        return jaxeval.load(path)
    sm = jaxeval.load(path, duplicate_names="rename")
    complete = np.asarray(sm.mask).all(axis=1)
    if not complete.all():
        print(f"{src}: dropping {int((~complete).sum())} of {sm.n_models} models with "
              "missing cells", flush=True)
        sm = sm.take(models=np.flatnonzero(complete))
    return sm


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sources", nargs="+", default=list(SOURCES),
                    help=f"sources {list(SOURCES)} or groups {list(GROUPS)}")
    ap.add_argument("--preds", nargs="+", default=list(CORRUPTIONS), choices=list(CORRUPTIONS))
    ap.add_argument("--kinds", nargs="+", default=list(CS_KINDS), choices=list(CS_KINDS))
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--K", type=int, default=5)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--fracs", nargs="+", type=float, default=[0.01, 0.03, 0.05, 0.1])
    ap.add_argument("--n-synthetic", type=int, default=200)
    ap.add_argument("--rank", type=int, default=8,
                    help="factorization rank (capped at n_items // 2 for tiny item sets)")
    ap.add_argument("--bias", type=float, default=0.3, help="shift of the biased predictions")
    ap.add_argument("--policy", default="pulse", choices=list(POLICIES))
    ap.add_argument("--synchronized", action=argparse.BooleanOptionalAction, default=None,
                    help="one item order shared by all arms (default: the policy's own "
                         "default, see jaxeval.simulate_identification)")
    ap.add_argument("--chunk", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sources = [s for src in args.sources for s in GROUPS.get(src, [src])]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        ap.error(f"--sources: unknown {unknown}; choose from {list(SOURCES)} or {list(GROUPS)}")
    at_least_one(ap, args, ("reps", "chunk", "n_synthetic", "rank"))
    at_least_two_arms(ap, args.K)
    bad = [f for f in args.fracs if not 0.0 < f <= 1.0]
    if bad:
        ap.error(f"--fracs: budget fractions of K*n must lie in (0, 1], got {bad}")
    if not 0.0 < args.alpha < 1.0:
        ap.error(f"--alpha: must lie in (0, 1), got {args.alpha}")

    tol = 3 * np.sqrt(args.alpha * (1 - args.alpha) / args.reps)
    target = 1 - args.alpha - tol
    rows, failed = [], False
    for src in sources:
        if src == "synthetic":
            data = jaxeval.SyntheticSpec(n_items=args.n_synthetic, rank=4)
            factors = None
        else:
            path = SOURCES[src]
            if path.endswith(".npz") and not Path(path).exists():
                print(f"skip {src}: {path} not found")
                continue
            data = load_source(src)
            dd = data.drop_duplicates()
            train, _ = dd.split([dd.n_models // 2], seed=args.seed)
            rank = min(args.rank, max(1, data.n_items // 2))
            if rank != args.rank:
                print(f"{src}: rank {rank} (only {data.n_items} items)", flush=True)
            factors = jaxeval.fit_factorization(train, rank=rank, rho=1.0, seed=args.seed,
                                                num_steps=1000)
        for pred in args.preds:
            t0 = time.time()
            rep = jaxeval.simulate_identification(
                data, args.policy, K=args.K, budget_fractions=args.fracs, alpha=args.alpha,
                n_replicates=args.reps, seed=args.seed, cs_kinds=tuple(args.kinds),
                corruption=pred, bias=args.bias, factors=factors, chunk_size=args.chunk,
                synchronized=args.synchronized,
            )
            wall = time.time() - t0
            cov = dict(zip(rep.cs_kinds, rep.coverage_family))
            naive = float(np.min(rep.naive_coverage_family))
            ok = all(c >= target for c in cov.values())
            failed |= not ok
            rows.append((src, pred, cov, naive, rep.width[:, -1], ok))
            print(f"{src:>9} {pred:>11}: "
                  + " ".join(f"{k}={c:.4f}" for k, c in cov.items())
                  + f" naive(min over budgets)={naive:.4f} {'ok' if ok else 'FAIL'} "
                  f"(budgets {rep.budgets.tolist()} calls; {wall:.0f}s)", flush=True)
    print()
    print(f"R = {args.reps}, K = {args.K}, alpha = {args.alpha}, policy = {args.policy}, "
          f"synchronized = {args.synchronized}, "
          f"bias = {args.bias}, "
          f"checkpoints at {args.fracs} of K*n; target >= {target:.4f} (1 - alpha - 3 se)")
    print()
    print("| truth | predictions | " + " | ".join(args.kinds)
          + " | naive pooling (worst checkpoint) | width at last checkpoint |")
    print("|---|---|" + "---|" * (len(args.kinds) + 2))
    for src, pred, cov, naive, w, _ok in rows:
        print(f"| {src} | {pred} | " + " | ".join(f"{cov[k]:.4f}" for k in args.kinds)
              + f" | {naive:.4f} | " + " / ".join(f"{x:.3f}" for x in w) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
