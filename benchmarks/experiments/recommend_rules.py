"""Which arm to recommend at a budget? Other rules than the argmax of the estimate,
evaluated offline on the kernel's own checkpoint records (thirty-eighth session).

    python benchmarks/experiments/recommend_rules.py ifeval,arc,math5,musr 10 100 1000 \\
        > benchmarks/results/recommend_rules_tuning.txt

Arguments: comma-separated ``bench_tuning`` dataset names, K, replicates, seed (1000 =
the tuning seed). 50 instances at K = 10 (20 above), the SPEC 6.1 budget grid to 100%,
rank-8 factors as ``bench_tuning`` fits them, EB intervals. Each line: dataset, policy,
``a``, then per rule calls to 95% as a share of K n / mean accuracy over the grid.

Rules, all on the same runs (same pulls; only the recommendation differs):
``est`` argmax of the ranking estimate (the package's rule, SPEC 6.1); ``mpa`` the most
pulled arm (ties by estimate); ``lcb`` argmax of the EB lower bound; ``pessC`` argmax of
``estimate - C / sqrt(N)``; ``top2pulled`` the higher estimate of the two most pulled.
The records are taken by wrapping ``jaxeval._simulate._summarise`` (private, used here
only to see each replicate's estimates and pulls at every checkpoint).
"""

import sys
import time
from pathlib import Path

import numpy as np

import jaxeval
import jaxeval._simulate as S
from jaxeval._report import calls_to_target, true_best
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_tuning as bt  # noqa: E402

_CAPTURED = {}
_summarise = S._summarise


def _capture(out, *args, **kwargs):
    _CAPTURED["out"] = out
    return _summarise(out, *args, **kwargs)


def rules(out):
    cp = out.checkpoints
    est = np.asarray(cp.estimate, np.float64)  # [R, C, K]
    pulls = np.asarray(cp.pulls, np.float64)
    lower = np.asarray(cp.lower)[:, :, 0, :]
    rec = {"est": np.asarray(cp.recommended),
           "mpa": np.argmax(pulls * 10 + (est - est.min()) / 10, axis=-1),
           "lcb": np.argmax(lower, axis=-1)}
    for c in (0.1, 0.25, 0.5, 1.0):
        rec[f"pess{c}"] = np.argmax(est - c / np.sqrt(np.maximum(pulls, 1)), axis=-1)
    top2 = np.argsort(-pulls - 1e-6 * est, axis=-1)[..., :2]
    pick = np.argmax(np.take_along_axis(est, top2, -1), -1)[..., None]
    rec["top2pulled"] = np.take_along_axis(top2, pick, -1)[..., 0]
    return rec


def main(argv):
    datasets, K, reps, seed = argv[0].split(","), int(argv[1]), int(argv[2]), int(argv[3])
    S._summarise = _capture
    for ds in datasets:
        sm = bt.load(ds)
        fac = bt._factors(sm, seed, 8)
        kw = dict(K=K, budget_fractions=DEFAULT_BUDGET_FRACTIONS, n_replicates=reps,
                  n_instances=50 if K <= 10 else 20, rank=8, cs_kinds=("eb",), seed=seed)
        for pol, a in (("ucbe", 1.0), ("ucbe", 3.0), ("pulse_ucb", 1.0)):
            t = time.time()
            rep = jaxeval.simulate_identification(
                sm, pol, a=a, factors=None if pol == "ucbe" else fac, **kw)
            out = _CAPTURED["out"]
            best = true_best(np.asarray(out.theta))
            calls = np.asarray(out.checkpoints.calls).mean(0)
            line = [ds, pol, str(a)]
            for name, r in rules(out).items():
                acc = np.take_along_axis(best, r, axis=1).mean(0)
                c95 = calls_to_target(calls, acc, 0.95)
                c95 = np.inf if c95 is None else c95 / rep.total_calls
                line.append(f"{name} {c95:.3f}/{acc.mean():.3f}")
            print(" | ".join(line), f"{time.time() - t:.0f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
