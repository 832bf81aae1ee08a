"""Coverage of the 90% split-conformal intervals of validation-tuned named anchor
methods, calibrated on all validation models (``Settings(named_halves=False)``, the
calibration before the twenty-fifth session) and on validation halves (the default):
synthetic low-rank matrices (200 models, 150 items; seeds 100 .. 100 + N - 1), the
SPEC 6.2 split (40 validation and 40 test models), seeds 42 .. 51, k = 10. Exact
split-conformal coverage with 40 calibration residuals is 37/41 = 0.902. Standard
errors are between matrices. BUILD_NOTES.md, "Twenty-fifth session", has the table;
``--mlp`` measures the MLP-trained methods instead (halved since the twenty-seventh
session; final MLP 2 000 steps, 3 AIS/CIS swaps, so that a run takes minutes), its
table in "Twenty-seventh session".

    python benchmarks/experiments/named_halves_coverage.py 20
    python benchmarks/experiments/named_halves_coverage.py 10 --mlp
"""

import dataclasses
import sys
import time
import warnings

import numpy as np

import jaxeval
from jaxeval.anchors import Settings, evaluate_protocol

METHODS = ["random_ridge", "greedy_ridge", "greedy_shrunk", "greedy_mix", "greedy_lowrank",
           "kmeans_blend"]
MLP_METHODS = ["random_mlp", "sparseeval", "greedy_mlp", "greedy_resmlp", "sparseeval_ridge"]


def main(n_matrices: int, mlp: bool = False) -> None:
    warnings.simplefilter("ignore")  # (too-few-models warnings cannot occur here)
    if mlp:
        methods = MLP_METHODS
        st = Settings(proxy_steps=200, final_steps=2000, init_steps=200, ridge_swaps=10,
                      num_swaps=3)
    else:
        methods = METHODS
        st = Settings(proxy_steps=200, final_steps=500, init_steps=200, ridge_swaps=10)
    cov = {True: [], False: []}
    width = {True: [], False: []}
    t0 = time.time()
    for ms in range(100, 100 + n_matrices):
        sm = jaxeval.synthetic_score_matrix(seed=ms, n_models=200, n_items=150)
        for halves in (True, False):
            r = evaluate_protocol(sm, 10, methods, seeds=range(42, 52),
                                  settings=dataclasses.replace(st, named_halves=halves))
            cov[halves].append(r.coverage)
            width[halves].append(r.width)
        print(f"matrix {ms} done, {time.time() - t0:.0f} s", flush=True)
    for halves in (False, True):
        c, w = np.concatenate(cov[halves], 1), np.concatenate(width[halves], 1)
        by_matrix = np.stack(cov[halves]).mean(2)
        print(f"calibrated on {'validation halves' if halves else 'all validation models'}:")
        for i, m in enumerate(methods):
            se = by_matrix[:, i].std(ddof=1) / np.sqrt(by_matrix.shape[0])
            print(f"  {m:15s} coverage {c[i].mean():.4f} (se {se:.4f})  width "
                  f"{w[i].mean():.4f}  splits {c.shape[1]}")
    print(f"exact split-conformal with 40 calibration residuals: 37/41 = {37 / 41:.4f}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--mlp"]
    main(int(args[0]) if args else 20, mlp="--mlp" in sys.argv[1:])
