"""Coverage and width of the confidence sequences under doubly robust sampling without
replacement, by prediction quality and dataset.

For each dataset a few real rows (models) are taken as truth; each replicate draws the row's
items in a uniform random order (without replacement), forms the doubly robust terms of SPEC 2.3
with predictions of a given quality and a predictable plug-in lambda (frozen within batches),
centres the sequences at the naive pooled estimate, and updates every confidence sequence one
term at a time. Reported per (sequence, quality, dataset):

- ``miss``: time-uniform miscoverage, the share of replicates whose interval ever excluded the
  true mean (the bounds are running intersections, so this is the miscoverage at any stopping
  time, data-dependent or not);
- ``miss@tau``: miscoverage at the data-dependent stopping time ``tau`` = first time the EB
  interval is at most 0.1 wide;
- mean width after 5%, 10%, 25% and 50% of the items;
- with lam = plug-in (lam0 = 1, shrink = 10) and lam = 0 (the latter only for good and
  adversarial predictions: at lam = 0 the predictions only move the centre);
- a second table: bias and RMSE of naive pooling, the mean of the DR terms and the difference
  estimate after 10% of the items.

Run (about 20 minutes wall, 5 CPU-minutes, on the shared two-core machine; results in
BUILD_NOTES.md, section "Estimators and confidence sequences")::

    python benchmarks/bench_confseq.py --replicates 2000

The simulation kernel :func:`simulate` is also used by ``tests/test_confseq.py``.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from bench_args import at_least_one

from jaxeval import _confseq as cs_mod
from jaxeval._estimators import (
    difference_estimate,
    dr_range,
    dr_term,
    lambda_stats_init,
    lambda_stats_update,
    naive_pooled,
    plugin_lambda,
)

# a fully evaluated arm's interval after finalize: a band of NUM_TOL on either side of
# theta, plus float32 rounding
EXACT_WIDTH = 2 * cs_mod.NUM_TOL + 4 * float(np.finfo(np.float32).eps)

QUALITIES = ("good", "biased", "random", "adversarial")
REAL_DATASETS = ("oll2_musr", "oll2_ifeval", "oll2_arc_challenge", "oll2_math_lvl5")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
EXTRA_DATASETS = {  # from ../shared/data when present
    "tailored_gsm8k": SHARED / "tailoredbench_gsm8k.npz",
    "metabench_gsm8k": SHARED / "metabench_oll1_gsm8k_selected.npz",
}


def calibrated_predictions(train: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """ "Good" predictions for each truth row: item difficulty from the training rows (logit of
    the smoothed column mean) plus a per-row ability shift that matches the row's mean
    (an oracle-calibrated one-parameter logistic model)."""
    p = (train.sum(0) + 0.5) / (train.shape[0] + 1.0)
    b = np.log(p) - np.log1p(-p)
    out = []
    for row in rows:
        a = 0.0
        for _ in range(30):  # Newton on mean(sigmoid(b + a)) = mean(row)
            q = 1.0 / (1.0 + np.exp(-(b + a)))
            g = q.mean() - row.mean()
            a -= g / max((q * (1 - q)).mean(), 1e-6)
        out.append(1.0 / (1.0 + np.exp(-(b + a))))
    return np.asarray(out, np.float32)


def predictions(key, s, good, quality):
    """Predictions of quality code ``quality`` (index into :data:`QUALITIES`, a dynamic
    integer so that one compiled kernel serves every quality)."""
    cands = jnp.stack(
        [good, jnp.clip(good + 0.3, 0.0, 1.0), jax.random.uniform(key, s.shape), 1.0 - s]
    )
    return cands[quality]


def simulate(
    key,
    s,
    good,
    alpha,
    lam0,
    shrink,
    quality,
    *,
    kinds: tuple[str, ...] = cs_mod.KINDS,
    batch: int = 1,
    stop_width: float = 0.1,
    checkpoints: tuple[int, ...] = (),
    grid_size: int = 128,
):
    """One replicate: draw all ``n`` items of row ``s`` without replacement in random order.

    Returns a dict with, per kind, ``miss`` (interval ever excluded theta), ``miss_stop``
    (excluded theta at the stopping time: the first step where the first of ``kinds``,
    EB in :func:`main`, is at most ``stop_width`` wide), ``width`` at each checkpoint
    (number of terms),
    ``final_width`` (after the last term, before finalize), ``final_exact_width`` and
    ``final_exact_err`` (width after :func:`finalize`, and its centre's distance to theta), and
    ``est_err`` ``[3, checkpoints]``: signed errors of the naive pooled estimate, the mean of
    the DR terms and the difference estimate at each checkpoint.
    """
    n = s.shape[0]
    k_perm, k_pred = jax.random.split(key)
    pred = predictions(k_pred, s, good, quality)
    perm = jax.random.permutation(k_perm, n)
    sp, pp = s[perm], pred[perm]
    theta = jnp.mean(s)
    # before draw t (0-based) the seen set is perm[:t], the unseen set perm[t:]
    sum_s_obs = jnp.concatenate([jnp.zeros(1), jnp.cumsum(sp)[:-1]])
    sum_p_unseen = jnp.cumsum(pp[::-1])[::-1]
    max_p_unseen = jax.lax.cummax(pp[::-1])[::-1]
    min_p_unseen = jax.lax.cummin(pp[::-1])[::-1]
    n_unseen = n - jnp.arange(n)
    sum_p_all = jnp.sum(pred)
    seqs = [cs_mod.get(k, grid_size=grid_size) for k in kinds]
    ckpt = jnp.asarray(checkpoints, jnp.int32) if checkpoints else jnp.zeros(0, jnp.int32)

    def step(carry, x):
        states, lstats, lam, miss, stopped, miss_stop, widths, sum_y, errs = carry
        t, s_j, p_j, so, pu, pmax, pmin, nu = x
        lam = jnp.where(t % batch == 0, plugin_lambda(lstats, lam0, shrink=shrink), lam)
        y = dr_term(so, pu, nu, s_j, p_j, lam, n)
        lo, hi = dr_range(so, pu, nu, pmax, pmin, lam, n)
        center = naive_pooled(so, pu, n)
        states = tuple(
            q.update(st, y, lo, hi, center, alpha) for q, st in zip(seqs, states, strict=True)
        )
        lstats = lambda_stats_update(lstats, s_j, p_j)
        bnds = [q.bounds(st) for q, st in zip(seqs, states, strict=True)]
        out = jnp.stack([(theta < lw) | (theta > up) for lw, up in bnds])
        miss = miss | out
        w_eb = bnds[0][1] - bnds[0][0]  # (the first kind's: EB's in main)
        stop_now = (~stopped) & (w_eb <= stop_width)
        miss_stop = jnp.where(stop_now, out, miss_stop)
        stopped = stopped | stop_now
        wid = jnp.stack([up - lw for lw, up in bnds])
        widths = jnp.where((ckpt == t + 1)[None, :], wid[:, None], widths)
        # point estimates after this item: naive pooling, mean of the DR terms, difference
        sum_y = sum_y + y
        so1, po1 = so + s_j, sum_p_all - pu + p_j
        est = jnp.stack(
            [
                naive_pooled(so1, pu - p_j, n),
                sum_y / (t + 1),
                difference_estimate(so1, po1, t + 1, sum_p_all, lam, n),
            ]
        )
        errs = jnp.where((ckpt == t + 1)[None, :], (est - theta)[:, None], errs)
        return (states, lstats, lam, miss, stopped, miss_stop, widths, sum_y, errs), None

    nk = len(kinds)
    carry0 = (
        tuple(q.init(()) for q in seqs),
        lambda_stats_init(),
        jnp.asarray(lam0, jnp.float32),
        jnp.zeros(nk, bool),
        jnp.asarray(False),
        jnp.zeros(nk, bool),
        jnp.ones((nk, ckpt.shape[0]), jnp.float32),
        jnp.zeros((), jnp.float32),
        jnp.zeros((3, ckpt.shape[0]), jnp.float32),
    )
    xs = (jnp.arange(n), sp, pp, sum_s_obs, sum_p_unseen, max_p_unseen, min_p_unseen, n_unseen)
    (states, _, _, miss, stopped, miss_stop, widths, _, errs), _ = jax.lax.scan(step, carry0, xs)
    bnds = [q.bounds(st) for q, st in zip(seqs, states, strict=True)]
    final_width = jnp.stack([up - lw for lw, up in bnds])
    miss_stop = jnp.where(stopped, miss_stop, miss)  # never stopped: tau = n
    fin = [q.finalize(st, theta, True) for q, st in zip(seqs, states, strict=True)]
    fin_b = [q.bounds(st) for q, st in zip(seqs, fin, strict=True)]
    fin_width = jnp.stack([up - lw for lw, up in fin_b])
    fin_err = jnp.stack([jnp.abs(0.5 * (lw + up) - theta) for lw, up in fin_b])  # centre
    return {
        "miss": miss,
        "miss_stop": miss_stop,
        "width": widths,
        "est_err": errs,
        "final_width": final_width,
        "final_exact_width": fin_width,
        "final_exact_err": fin_err,
    }


@partial(jax.jit, static_argnames=("kinds", "batch", "checkpoints", "grid_size"))
def simulate_many(
    key,
    s,
    good,
    alpha,
    lam0,
    shrink,
    quality,
    replicates_idx,
    *,
    kinds=cs_mod.KINDS,
    batch=1,
    checkpoints=(),
    grid_size=128,
):
    """:func:`simulate` vmapped over replicate indices ``i`` (key ``fold_in(key, i)``)."""

    def one(i):
        return simulate(
            jax.random.fold_in(key, i),
            s,
            good,
            alpha,
            lam0,
            shrink,
            quality,
            kinds=kinds,
            batch=batch,
            checkpoints=checkpoints,
            grid_size=grid_size,
        )

    return jax.vmap(one)(replicates_idx)


def synthetic_rows(seed: int, n: int, thetas=(0.3, 0.7)):
    """Synthetic 0/1 rows from a logistic item model, with training rows for predictions."""
    rng = np.random.default_rng(seed)
    b = rng.normal(0, 1.5, n)
    abil = rng.normal(0, 1, 200)
    train = (rng.uniform(size=(200, n)) < 1 / (1 + np.exp(-(b + abil[:, None])))).astype(np.float32)
    rows = []
    for th in thetas:
        a = np.log(th / (1 - th))
        rows.append((rng.uniform(size=n) < 1 / (1 + np.exp(-(b + a)))).astype(np.float32))
    return train, np.asarray(rows)


def real_rows(name: str, k_rows: int = 2):
    """``k_rows`` truth rows spread over the 20th..80th accuracy percentiles (the 20th and
    80th for two); the other rows (duplicates removed) train the "good" predictions."""
    import jaxeval

    m = jaxeval.load(EXTRA_DATASETS.get(name, name)).drop_duplicates()
    if not m.is_complete:
        raise ValueError(f"{name}: needs a complete matrix")
    acc = m.scores.mean(1)
    order = np.argsort(acc)
    pick = order[np.round(np.linspace(0.2, 0.8, k_rows) * (len(order) - 1)).astype(int)]
    train = np.delete(m.scores, pick, axis=0)
    return train.astype(np.float32), m.scores[pick].astype(np.float32)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=2000)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument(
        "--datasets", default=",".join(REAL_DATASETS + tuple(EXTRA_DATASETS) + ("synthetic",))
    )
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--grid-size", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    at_least_one(ap, args, ("replicates", "batch", "grid_size"))
    if not 0.0 < args.alpha < 1.0:
        ap.error(f"--alpha: must lie in (0, 1), got {args.alpha}")
    kinds = cs_mod.KINDS
    alpha = jnp.float32(args.alpha)
    idx = jnp.arange(args.replicates)
    print(
        f"alpha={args.alpha} replicates={args.replicates} batch={args.batch} "
        f"grid={args.grid_size} seed={args.seed}; 2 truth rows per dataset, "
        "miss pooled over rows; binomial 3-se tolerance "
        f"{3 * np.sqrt(args.alpha * (1 - args.alpha) / (2 * args.replicates)):.4f}"
    )
    print(
        "| dataset | n | lambda | quality | CS | miss | miss@tau | width 5% | width 10% "
        "| width 25% | width 50% | exact at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    t_all = time.time()
    est_lines = []
    lam_modes = {"plug-in": (1.0, 10.0), "0": (0.0, 1e30)}  # (lam0, shrink)
    for ds in args.datasets.split(","):
        if ds == "synthetic":
            train, rows = synthetic_rows(args.seed, 1000)
        else:
            try:
                train, rows = real_rows(ds)
            except (OSError, ValueError) as e:  # (a file not there, an incomplete matrix)
                print(f"| {ds} | skipped: {e} |")
                continue
        good_all = calibrated_predictions(train, rows)
        n = rows.shape[1]
        ckpts = tuple(int(max(1, round(f * n))) for f in (0.05, 0.10, 0.25, 0.50))
        for lam_name, (lam0, shrink) in lam_modes.items():
            for qi, quality in enumerate(QUALITIES):
                if lam_name == "0" and quality not in ("good", "adversarial"):
                    continue  # with lam = 0 the predictions only move the centre
                res = []
                for r in range(rows.shape[0]):
                    key = jax.random.fold_in(jax.random.key(args.seed), r)
                    out = simulate_many(
                        key,
                        jnp.asarray(rows[r]),
                        jnp.asarray(good_all[r]),
                        alpha,
                        jnp.float32(lam0),
                        jnp.float32(shrink),
                        jnp.int32(qi),
                        idx,
                        kinds=kinds,
                        batch=args.batch,
                        checkpoints=ckpts,
                        grid_size=args.grid_size,
                    )
                    res.append(jax.tree.map(np.asarray, out))
                miss = np.concatenate([o["miss"] for o in res])
                miss_stop = np.concatenate([o["miss_stop"] for o in res])
                width = np.concatenate([o["width"] for o in res])
                fin = np.concatenate([o["final_exact_width"] for o in res])
                if lam_name == "plug-in":
                    err = np.concatenate([o["est_err"] for o in res])[:, :, 1]  # at 10%
                    est_lines.append(
                        f"| {ds} | {quality} | "
                        + " | ".join(
                            f"{100 * e.mean():+.2f} / {100 * np.sqrt((e**2).mean()):.2f}"
                            for e in err.T
                        )
                        + " |"
                    )
                for ki, kind in enumerate(kinds):
                    w = width[:, ki].mean(0)
                    print(
                        f"| {ds} | {n} | {lam_name} | {quality} | {kind} | "
                        f"{miss[:, ki].mean():.4f} | {miss_stop[:, ki].mean():.4f} | "
                        + " | ".join(f"{x:.3f}" for x in w)
                        + f" | {'yes' if fin[:, ki].max() <= EXACT_WIDTH else 'NO'} |",
                        flush=True,
                    )
    print("\nPoint estimates after 10% of the items, plug-in lambda: bias / RMSE in points")
    print("| dataset | quality | naive pooled | mean of DR terms | difference estimate |")
    print("|---|---|---|---|---|")
    print("\n".join(est_lines))
    print(f"total wall time {time.time() - t_all:.0f} s")


if __name__ == "__main__":
    main()
