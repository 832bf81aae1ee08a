"""How well the factorization predicts the unseen items of the models PULSE must separate.

For each dataset: the factorization (rank ``--rank``) is fitted on half of the
deduplicated models (the split of ``bench_tuning.py`` / ``bench_banditeval.py`` with the
same seed); for each of the ``--top`` best models of the other half (the candidates that
identification has to tell apart), a random ``frac`` of its items is observed, its factor
is refitted on them (5 Newton steps from the prior mean, ``rho = 1``) and the item-level
predictions on the unseen items are compared with the truth: their correlation, and
``var(S - p) / var(S)`` on the unseen items — the variance left for the doubly robust
terms with ``lambda = 1`` relative to the plain mean's (lower = PULSE's estimate is more
precise than UCB-E's at the same number of observations).

Usage (from the repository root):

    python benchmarks/bench_prediction_quality.py --datasets ifeval musr arc math5
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import jaxeval


def main(argv=None):
    import jax.numpy as jnp

    from jaxeval import _factorization as fz

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from bench_args import at_least_one
    from bench_banditeval import DATASETS

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--fracs", nargs="+", type=float, default=[0.05, 0.2])
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    bad = [f for f in args.fracs if not 0.0 < f < 1.0]
    if bad:
        ap.error(f"--fracs: each share of items observed must lie in (0, 1), got {bad}")
    at_least_one(ap, args, ("top",))

    rng = np.random.default_rng(args.seed)
    print("| dataset | n | " + " | ".join(
        f"obs {f:.0%}: corr / var(S-p)/var(S)" for f in args.fracs) + " |")
    print("|---|---|" + "---|" * len(args.fracs))
    for name in args.datasets:
        sm = jaxeval.load(DATASETS[name]).drop_duplicates()
        train, pool = sm.split([sm.n_models // 2], seed=args.seed)
        lr = jaxeval.fit_factorization(train, rank=args.rank, rho=1.0, seed=args.seed,
                                       num_steps=500)
        f = fz.ItemFactors(*(jnp.asarray(np.asarray(x, np.float32))
                             for x in (lr.V, lr.c, lr.u_mean)))
        S = np.asarray(pool.scores, np.float32)
        n = S.shape[1]
        top = np.argsort(S.mean(1))[-args.top:]
        cells = []
        for frac in args.fracs:
            cors, vr = [], []
            for i in top:
                obs = rng.random(n) < frac
                u = fz.refit_row(f, jnp.asarray(S[i]), jnp.asarray(obs), f.u_mean, 1.0, 5)
                p = np.asarray(fz.predict_scores(u, f))
                un = ~obs
                cors.append(np.corrcoef(S[i, un], p[un])[0, 1])
                vr.append(np.var(S[i, un] - p[un]) / np.var(S[i, un]))
            cells.append(f"{np.mean(cors):.3f} / {np.mean(vr):.3f}")
        print(f"| {name} | {n} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
