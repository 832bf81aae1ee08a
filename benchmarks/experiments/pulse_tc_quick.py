"""A top-two policy on PULSE's estimate (twentieth session): tried, not adopted.

Needs the kernel patch beside this file (it adds a policy ``"pulse_tc"``):

    git apply benchmarks/experiments/pulse_tc.patch
    python benchmarks/experiments/pulse_tc_quick.py ifeval,arc 10 100
    python benchmarks/experiments/pulse_tc_quick.py math5,musr 10 100
    git apply -R benchmarks/experiments/pulse_tc.patch

Arguments: comma-separated ``bench_tuning`` dataset names, K, replicates. Runs on the
TUNING seed (1000) only, 50 instances (20 above K = 10), SPEC 6.1 budget grid to 50%,
rank-8 factors fitted on half of the other models, and prints calls to 95% / 90% of
K n and the mean accuracy over the grid for UCB-E, ``pulse_ucb`` and ``pulse_tc``.

``pulse_tc`` (as patched): leader = argmax of ``estimate + sqrt(a / N)`` (the
``pulse_ucb`` index), challenger = the other arm with the smallest Gaussian
transportation cost ``(est_L - est_j)^2 / (var_L + var_j)``, where ``var`` is the
variance of the difference estimate: the residual variance of ``s - lam p`` on the
observed items (``Var s`` bounded by ``mean_s (1 - mean_s)``) shrunk toward 1/4 with
two pseudo-observations, times ``(1 - N/n) / N``; the less-evaluated of the two is
pulled. The results are in BUILD_NOTES.md ("A top-two policy on PULSE's estimate").
"""

import sys
import time
from pathlib import Path

import numpy as np

import jaxeval
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_tuning as bt  # noqa: E402

FRACS = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5 + 1e-12)
RUNS = [("ucbe", 0.3, False), ("ucbe", 1.0, False), ("ucbe", 3.0, False),
        ("ucbe", 10.0, False), ("pulse_ucb", 1.0, True), ("pulse_tc", 1.0, True),
        ("pulse_tc", 3.0, True)]


def main(argv):
    datasets, K, reps = argv[0].split(","), int(argv[1]), int(argv[2])
    for ds in datasets:
        sm = bt.load(ds)
        fac = bt._factors(sm, 1000, 8)
        kw = dict(K=K, budget_fractions=FRACS, n_replicates=reps,
                  n_instances=50 if K <= 10 else 20, rank=8, cs_kinds=("eb",), seed=1000)
        for pol, a, pred in RUNS:
            t = time.time()
            r = jaxeval.simulate_identification(sm, pol, a=a, factors=fac if pred else None,
                                                **kw)
            print(ds, pol, a, f"to95 {r.calls_to(0.95, fraction=True):.3f} "
                  f"to90 {r.calls_to(0.90, fraction=True):.3f} "
                  f"meanacc {np.mean(r.accuracy):.3f}  {time.time() - t:.0f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
