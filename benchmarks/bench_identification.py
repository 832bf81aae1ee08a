"""Identification accuracy versus LLM calls for every policy (SPEC 6.1 protocol).

For each dataset and K, every policy runs on the same instances (K candidates drawn
from the non-training pool) and the same per-arm item orders (same seed => same
replicate keys => same instance choice and order streams); the recommended arm at each
budget of the SPEC 6.1 grid is scored (ties count), and the calls needed for 95% / 90%
accuracy are interpolated linearly. Duplicated rows are removed; half of the models
train the factorization used by PULSE and naive pooling.

Usage (from the repository root; data in ../shared/data or the bundled copies):

    python benchmarks/bench_identification.py --K 10 --reps 40 --max-frac 0.5
    python benchmarks/bench_identification.py --datasets ifeval musr --K 50 --reps 20

Prints a markdown table (calls to 95% as a share of K*n) and writes every curve as JSON
to ``--out``. ``--plot PATH`` draws the accuracy-versus-calls curves (one panel per
dataset and K, one line per policy) to a PNG. ``--replot A.json B.json ...`` skips the
simulation and rebuilds the table and the plot from earlier ``--out`` files (later files
win on repeated curves), so datasets run in separate processes can be combined:

    python benchmarks/bench_identification.py --K 50 --datasets ifeval --out /tmp/a.json
    python benchmarks/bench_identification.py --K 50 --datasets musr --out /tmp/b.json
    python benchmarks/bench_identification.py --replot /tmp/a.json /tmp/b.json \
        --plot benchmarks/plots/identification_K50.png
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

import jaxeval
from jaxeval._policies import PREDICTION_POLICIES

# one set of settings is passed to every policy; those a policy does not read are
# expected here, not a mistake to warn about
warnings.filterwarnings("ignore", message=r".* (has|have) no effect for policy ")
from bench_args import (
    at_least_one,
    at_least_two_arms,
    budget_fractions_upto,
    prepare_outputs,
    short_error,
)

DATASETS = {
    "ifeval": "oll2_ifeval",
    "musr": "oll2_musr",
    "arc": "oll2_arc_challenge",
    "math5": "oll2_math_lvl5",
}
POLICIES = ("uniform", "ucbe", "sysrs", "naive", "pulse_ucb", "pulse")


def _fmt(x):
    return ">max" if not np.isfinite(x) else f"{100 * x:.1f}%"


def _panels(curves):
    """The (dataset, "K<k>") pairs present in ``curves``, by K then DATASETS order."""
    order = list(DATASETS)
    return sorted({tuple(k.split("/")[:2]) for k in curves},
                  key=lambda t: (int(t[1][1:]), order.index(t[0]) if t[0] in order else 99))


def print_table(curves, policies):
    """Print the calls-to-95% (90%) markdown table from a ``curves`` dict."""
    keys = _panels(curves)
    print("| dataset | K | median gap | calls to 95% (90%): " + " | ".join(policies) + " |")
    print("|---|---|---|" + "---|" * len(policies))
    for ds, kk in keys:
        if not any(f"{ds}/{kk}/{p}" in curves for p in policies):
            continue  # (a panel of other policies only: no row of "not run" and a NaN gap)
        cells, gap = [], float("nan")
        for p in policies:
            c = curves.get(f"{ds}/{kk}/{p}")
            if c is None:
                cells.append("not run")
                continue
            gap = c["median_gap"]
            cells.append(f"{_fmt(c['calls_to_95'])} ({_fmt(c['calls_to_90'])})")
        print(f"| {ds} | {kk[1:]} | {gap:.3f} | " + " | ".join(cells) + " |")


def panel_grid(n_panels, **subplots_kw):
    """A figure of ``n_panels`` panels, at most four a row (the benchmarks' figures)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncol = min(4, n_panels)
    nrow = -(-n_panels // ncol)
    return plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 3.0 * nrow), squeeze=False,
                        **subplots_kw)


def save_panels(fig, axes, n_panels, path, *, ylabel, title, legend_loc):
    """Hide the unused panels, label the first column, legend on the first panel, and
    write the figure to ``path`` (PNG, 90 dpi)."""
    import matplotlib.pyplot as plt

    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel, fontsize=8)
    axes.flat[0].legend(fontsize=7, loc=legend_loc)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"plot written to {path}")


def plot_curves(curves, policies, path, reps=None):
    """Accuracy versus calls (share of K*n), one panel per (dataset, K), to a PNG."""
    import matplotlib.ticker

    panels = _panels(curves)
    if not panels:
        raise ValueError("--plot: no curves to draw")
    fig, axes = panel_grid(len(panels), sharey=True)
    for ax, (ds, kk) in zip(axes.flat, panels):
        for p in policies:
            c = curves.get(f"{ds}/{kk}/{p}")
            if c is None:
                continue
            x = 100 * np.asarray(c["budget_fractions"])
            ax.plot(x, c["accuracy"], marker="o", ms=3, lw=1.2, label=p)
        gap = next(c["median_gap"] for k, c in curves.items() if k.startswith(f"{ds}/{kk}/"))
        ax.set_xscale("log")
        ticks = [0.5, 1, 2, 5, 10, 20, 50, 100]
        ax.set_xticks([t for t in ticks if t <= x.max() * 1.01])
        ax.set_xticklabels([f"{t:g}" for t in ticks if t <= x.max() * 1.01])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.axhline(0.95, color="grey", lw=0.6, ls="--")
        ax.set_title(f"{ds}, K = {kk[1:]} (median gap {gap:.3f})", fontsize=9)
        ax.set_xlabel("LLM calls (% of K*n)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, lw=0.5)
    note = f"{reps} replicates per point; " if reps else ""
    save_panels(fig, axes, len(panels), path, ylabel="identification accuracy",
                title=f"Best-model identification ({note}same instances and item orders "
                      "for every policy)", legend_loc="lower right")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--K", nargs="+", type=int, default=[10])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--instances", type=int, default=None,
                    help="default 10 (K <= 10) / 5 (larger K)")
    ap.add_argument("--max-frac", type=float, default=0.5)
    ap.add_argument("--a", type=float, default=1.0, help="UCB-E / pulse_ucb / naive constant")
    ap.add_argument("--scale", type=float, default=1.0, help="PULSE exploration scale")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/bench_identification.json")
    ap.add_argument("--plot", default=None, help="write the accuracy-vs-calls curves here (PNG)")
    ap.add_argument("--replot", nargs="+", default=None, metavar="JSON",
                    help="no simulation: table and plot from earlier --out files")
    args = ap.parse_args(argv)
    unknown = [d for d in args.datasets if d not in DATASETS]
    if unknown:
        ap.error(f"--datasets: unknown {unknown}; choose from {list(DATASETS)}")

    at_least_one(ap, args, ("reps", "instances", "rank", "batch"))
    at_least_two_arms(ap, args.K)

    if args.replot:
        prepare_outputs(ap, args, ("plot",))
        curves, reps = {}, set()
        for path in args.replot:
            try:
                with open(path) as fh:
                    blob = json.load(fh)
                c, r = blob["curves"], blob["args"]["reps"]
                curves.update(c)
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"--replot: {path} is not a results file of this script "
                                 f"({short_error(e)})") from None
            reps.add(r)
        print_table(curves, args.policies)
        if args.plot:
            plot_curves(curves, args.policies, args.plot,
                        reps="/".join(str(r) for r in sorted(reps)))
        return

    fracs = budget_fractions_upto(ap, args.max_frac)
    prepare_outputs(ap, args, ("out", "plot"))
    curves = {}
    for ds in args.datasets:
        sm = jaxeval.load(DATASETS[ds])
        # fit the factorization once per dataset on the same training rows that
        # simulate_identification uses (same seed => same split)
        dd = sm.drop_duplicates()
        train, _ = dd.split([dd.n_models // 2], seed=args.seed)
        factors = None
        if any(p in PREDICTION_POLICIES for p in args.policies):
            factors = jaxeval.fit_factorization(
                train, rank=args.rank, rho=1.0, seed=args.seed, num_steps=1000
            )
        for K in args.K:
            inst = args.instances or (10 if K <= 10 else 5)
            res = {}
            for pol in args.policies:
                t0 = time.time()
                rep = jaxeval.simulate_identification(
                    sm, pol, K=K, budget_fractions=fracs, n_replicates=args.reps,
                    seed=args.seed, n_instances=inst, a=args.a, scale=args.scale,
                    rank=args.rank, batch_size=args.batch, cs_kinds=("eb",),
                    factors=factors,
                )
                wall = time.time() - t0
                gaps = np.sort(rep.theta, axis=1)
                gap = float(np.median(gaps[:, -1] - gaps[:, -2]))
                res[pol] = (rep.calls_to(0.95, fraction=True), rep.calls_to(0.90, fraction=True))
                curves[f"{ds}/K{K}/{pol}"] = dict(
                    budget_fractions=rep.budget_fractions.tolist(),
                    accuracy=rep.accuracy.tolist(), calls_to_95=res[pol][0],
                    calls_to_90=res[pol][1], coverage_family=rep.coverage_family.tolist(),
                    wall_s=wall, median_gap=gap,
                )
                print(f"{ds} K={K} {pol:>9}: to95 {_fmt(res[pol][0])} to90 {_fmt(res[pol][1])} "
                      f"cov {rep.coverage_family[0]:.3f} acc@max {rep.accuracy[-1]:.3f} "
                      f"({wall:.0f}s)", flush=True)
                # save after every policy so that an interrupted run keeps its curves
                with open(args.out, "w") as fh:
                    json.dump(dict(args=vars(args), curves=curves), fh, indent=1)
    print()
    print_table(curves, args.policies)
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), curves=curves), fh, indent=1)
    print(f"\ncurves written to {args.out}")
    if args.plot:
        plot_curves(curves, args.policies, args.plot, reps=args.reps)


if __name__ == "__main__":
    main()
