"""Tune UCB-E's ``a`` and PULSE's exploration scale on tuning instances; report on others.

Protocol, per dataset and K:

1. *Tuning*: :func:`jaxeval.simulate_identification` with seed ``--tune-seed`` (a different
   split of training models / candidate pool, different instances and item orders from
   the report seed). For every value of the grid, the calls needed for 95% identification
   (as a share of ``K * n``, linear interpolation on the SPEC 6.1 budget grid) are
   measured; the value with the fewest calls wins (ties, and grids that never reach 95%:
   the largest mean accuracy over the budget grid).
2. *Report*: the chosen values run with seed ``--seed`` (the instances of
   ``bench_identification.py``), next to SySRs, on the same instances and item orders.
   SySRs is run once per budget, planned for that budget (:func:`sysrs_per_budget`).

With ``--defaults POLICY ...`` the named policies are not tuned: they run at the
package default of their grid's parameter (``simulate_identification``'s default,
``a = 1`` for ``pulse_ucb``), as issue 7's "the defaults that reach these are the
package's defaults" asks, while UCB-E keeps its per-dataset tuned ``a``.

The grids are dynamic parameters of the kernels (no recompilation across the grid).
PULSE's other knobs (λ prior, shrinkage, rank, refit frequency) stay at the package
defaults here. A policy name ending in ``_sync`` (``ucbe_sync``, ``pulse_ucb_sync``) runs
that policy on one item order shared by all arms (``synchronized=True``, SySRs' order);
the plain names draw each arm's items in its own order (UCB-E as in ``banditeval``).

Issue 7 asks for the comparison "with the gap between the top two models reported per
instance bin": a second table splits the report instances into ``--gap-bins`` bins of
their true top-two gap (quantiles over instances, the same bins for every policy, since
every policy plays the same instances; :meth:`jaxeval.IdentificationReport.by_gap`) and
gives each policy's calls to 95% (90%) within each bin; the JSON has it under
``by_gap``.

``--plot PATH`` draws the report seed's accuracy-versus-calls curves (one panel per
dataset and K, one line per policy) to a PNG; the curves are also in the ``--out`` JSON.
``--gap-plot PATH`` draws the per-bin table as bars (calls to 95% per gap bin, one
panel per dataset and K). ``--replot JSON`` draws either figure from a saved ``--out``
file without simulating anything.

Usage (from the repository root):

    python benchmarks/bench_tuning.py --datasets ifeval musr arc math5 --K 10 --reps 200

The whole issue-7 comparison (five sets, K = 10 and 50, PULSE at its package defaults,
the budget grid to 100% of K n so that every policy reaches 95%), table and curves:

    python benchmarks/bench_tuning.py --datasets ifeval musr arc math5 tailored --K 10 50 \
        --reps 200 --max-frac 1.0 --policies ucbe pulse_ucb --defaults pulse_ucb \
        --out benchmarks/results/issue7_defaults.json --plot benchmarks/plots/issue7_defaults.png \
        --gap-plot benchmarks/plots/issue7_defaults_gap.png

Both figures again from the saved results, in seconds:

    python benchmarks/bench_tuning.py --replot benchmarks/results/issue7_defaults.json \
        --plot benchmarks/plots/issue7_defaults.png \
        --gap-plot benchmarks/plots/issue7_defaults_gap.png
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

import jaxeval

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
    # SPEC 6.1's fifth identification set; read from ../shared/data (not bundled)
    "tailored": "tailoredbench_gsm8k.npz",
}
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load(name: str) -> jaxeval.ScoreMatrix:
    """The score matrix of a ``DATASETS`` name (bundled, or a file of ``../shared/data``)."""
    src = DATASETS[name]
    if src.endswith(".npz"):
        path = SHARED / src
        if not path.exists():
            raise SystemExit(f"--datasets {name}: {path} not found (the shared data folder "
                             "must sit beside the repository)")
        return jaxeval.load(str(path), duplicate_names="rename")
    return jaxeval.load(src)
_A_GRID = ("a", (0.1, 0.3, 1.0, 3.0, 10.0))
GRIDS = {
    "ucbe": _A_GRID,
    "pulse": ("scale", (0.1, 0.3, 1.0, 2.0)),
    "pulse_ucb": _A_GRID,
    "ucbe_sync": _A_GRID,
    "pulse_ucb_sync": _A_GRID,
}
#: Policies that use the factorization's predictions.
PRED = ("pulse", "pulse_ucb", "pulse_ucb_sync")
#: Policies run on one item order shared by all arms (SySRs' synchronized order);
#: the others draw each arm's items in its own order.
SYNC = ("ucbe_sync", "pulse_ucb_sync")


def _policy(name):
    """(kernel policy, synchronized) of a row name: ``<policy>[_sync]``."""
    if name in SYNC:
        return name[: -len("_sync")], True
    return name, None


def _fmt(x):
    return ">max" if not np.isfinite(x) else f"{100 * x:.1f}%"


def _factors(sm, seed, rank):
    dd = sm.drop_duplicates()
    train, _ = dd.split([dd.n_models // 2], seed=seed)
    return jaxeval.fit_factorization(train, rank=rank, rho=1.0, seed=seed, num_steps=1000)


def _ratio(x, u):
    """``x / u`` of two calls-to-95% shares, with the unreached cases spelled out."""
    if not np.isfinite(u):
        return "<1" if np.isfinite(x) else "-"
    return f"{x / u:.2f}" if np.isfinite(x) else ">max"


def _score(rep):
    to95 = rep.calls_to(0.95, fraction=True)
    return (to95 if np.isfinite(to95) else math.inf, -float(np.mean(rep.accuracy)))


def package_default(name: str) -> float:
    """``simulate_identification``'s default for the keyword ``name`` (``a``, ``scale``)."""
    return float(inspect.signature(jaxeval.simulate_identification).parameters[name].default)


def _curve(rep, gap):
    """What ``--plot`` and the JSON keep of a report run."""
    return dict(budget_fractions=np.asarray(rep.budget_fractions).tolist(),
                accuracy=np.asarray(rep.accuracy).tolist(),
                calls_to_95=rep.calls_to(0.95, fraction=True),
                calls_to_90=rep.calls_to(0.90, fraction=True), median_gap=gap)


def sysrs_per_budget(sm, K, seed, fracs, *, with_report=False, **kw):
    """SySRs as SPEC 6.1 runs it, ``(calls to 95%, calls to 90%)`` as shares of ``K n``:
    successive rejects is a fixed-budget method, so each point of its curve is its own
    run planned for that budget (what the kernel does for SySRs without a ``horizon``;
    same seed: same instances and item orders as every other policy).

    (One run planned for the largest budget and read at the smaller checkpoints, as
    before the eighteenth session, scores SySRs mid-schedule: at IFEval K = 10 it needed
    35.5% of K n for 95% instead of 21.4%.)
    """
    rep = jaxeval.simulate_identification(sm, "sysrs", K=K, seed=seed,
                                          budget_fractions=fracs, **kw)
    out = rep.calls_to(0.95, fraction=True), rep.calls_to(0.90, fraction=True)
    return (out, rep) if with_report else out


def gap_bins(reps, bins, *, n):
    """Calls to 95% / 90% per bin of the report instances' true top-two gap.

    The edges are the quantiles of UCB-E's report instances' gaps
    (:meth:`jaxeval.IdentificationReport.by_gap`); every policy ran on the same instances
    and replicates, so the same edges give every policy the same bins. Returns one dict
    per bin: the edges (accuracy units and items), instance and replicate counts, the
    median gap, and ``to95`` / ``to90`` per policy (shares of ``K n``; ``inf`` where the
    bin never reaches the target on the budget grid).
    """
    if bins <= 0:
        return []
    ref = reps["ucbe"].by_gap(bins)
    edges = [ref[0].lo] + [b.hi for b in ref]
    per = {pol: rep.by_gap(edges=edges) for pol, rep in reps.items()}
    out = []
    for j, b in enumerate(ref):
        out.append(dict(
            lo=b.lo, hi=b.hi, lo_items=b.lo * n, hi_items=b.hi * n,
            n_instances=b.n_instances, n_replicates=b.n_replicates, median_gap=b.median_gap,
            to95={p: per[p][j].calls_to(0.95, fraction=True) for p in per},
            to90={p: per[p][j].calls_to(0.90, fraction=True) for p in per},
        ))
    return out


def print_gap_table(gap_rows, pols):
    """The per-bin table: calls to 95% (90%) per policy and the ratios to UCB-E."""
    if not any(b for _, _, b in gap_rows):
        return
    others = [p for p in pols if p != "ucbe"]
    print("\nper bin of the true top-two gap (report instances; quantile bins):")
    print("| dataset | K | gap (pp) | gap (items) | instances | calls to 95% (90%): "
          + " | ".join(pols) + " | " + " | ".join(f"{p} / ucbe" for p in others) + " |")
    print("|---" * (5 + len(pols) + len(others)) + "|")
    for ds, K, bins in gap_rows:
        for b in bins:
            print(f"| {ds} | {K} | {100 * b['lo']:.1f}-{100 * b['hi']:.1f} | "
                  f"{b['lo_items']:.0f}-{b['hi_items']:.0f} | {b['n_instances']} | "
                  + " | ".join(f"{_fmt(b['to95'][p])} ({_fmt(b['to90'][p])})" for p in pols)
                  + " | " + " | ".join(_ratio(b["to95"][p], b["to95"]["ucbe"]) for p in others)
                  + " |")


def plot_gap_bins(results, policies, path, *, reps=None):
    """Calls to 95% per bin of the true top-two gap, one panel per (dataset, K), to a PNG.

    ``results`` is the ``results`` mapping of the ``--out`` JSON (its ``by_gap`` lists);
    one group of bars per bin, smallest gaps (the hard bin) on the left, one bar per
    policy in the colours of the accuracy curves, each bar labelled with its value. A bin
    a policy never takes to 95% on the budget grid is drawn as a hatched bar to the top
    of its panel.
    """
    from bench_identification import panel_grid, save_panels

    panels = [(key, r["by_gap"]) for key, r in results.items() if r.get("by_gap")]
    if not panels:
        raise ValueError("--gap-plot: the results hold no per-bin figures (by_gap); "
                         "run with --gap-bins > 0")
    fig, axes = panel_grid(len(panels))
    colours = {p: f"C{i}" for i, p in enumerate(policies)}
    width = 0.8 / len(policies)
    for ax, (key, bins) in zip(axes.flat, panels):
        vals = [100 * b["to95"][p] for b in bins for p in policies if p in b["to95"]]
        finite = [v for v in vals if math.isfinite(v)]
        top = 1.15 * max(finite) if finite else 100.0
        for i, p in enumerate(policies):
            x = np.arange(len(bins)) + (i - (len(policies) - 1) / 2) * width
            y = np.array([100 * b["to95"].get(p, math.nan) for b in bins])
            missing = ~np.isfinite(y)
            ax.bar(x, np.where(missing, 0.0, y), width, color=colours[p], label=p)
            for xi, yi in zip(x[~missing], y[~missing]):
                ax.text(xi, yi, f"{yi:.3g}", ha="center", va="bottom", fontsize=5.5)
            if missing.any():
                ax.bar(x[missing], np.full(missing.sum(), top), width, color="white",
                       edgecolor=colours[p], hatch="///", lw=0.5)
        ds, kk = key.split("/")
        ax.set_ylim(0, top)
        ax.set_xticks(np.arange(len(bins)))
        ax.set_xticklabels([f"{100 * b['lo']:.1f}-{100 * b['hi']:.1f} pp\n"
                            f"{b['n_instances']} inst." for b in bins], fontsize=7)
        ax.set_title(f"{ds}, K = {kk[1:]}", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3, lw=0.5)
    note = f"{reps} replicates per (dataset, K), " if reps else ""
    save_panels(fig, axes, len(panels), path, ylabel="LLM calls to 95% (% of K*n)",
                title="Calls to 95% identification per bin of the true top-two gap "
                      f"(x: gap range, instances per bin; {note}same instances for every "
                      "policy)", legend_loc="upper right")


def replot(path, *, plot=None, gap_plot=None):
    """Draw ``--plot`` / ``--gap-plot`` from a saved ``--out`` JSON (no simulation)."""
    if not (plot or gap_plot):
        raise SystemExit("--replot: give --plot PATH and/or --gap-plot PATH to draw")
    try:
        with open(path) as fh:
            saved = json.load(fh)
        args, results = saved["args"], saved["results"]
        pols = [*args["policies"], "sysrs"]
        has_bins = any(r.get("by_gap") for r in results.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(f"--replot: {path} is not a results file of this script "
                         f"({short_error(e)})") from None
    if gap_plot and not has_bins:
        raise SystemExit(f"--replot: {path} holds no per-bin figures (by_gap) for --gap-plot; "
                         "run with --gap-bins > 0")
    if plot:
        from bench_identification import plot_curves

        if not saved.get("curves"):
            raise SystemExit(f"--replot: {path} holds no curves (a --sysrs-only run?)")
        plot_curves(saved["curves"], pols, plot, reps=args.get("reps"))
    if gap_plot:
        plot_gap_bins(results, pols, gap_plot, reps=args.get("reps"))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--K", nargs="+", type=int, default=[10])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--instances", type=int, default=None,
                    help="default 50 (K <= 10) / 20 (larger K): with 10 instances the "
                         "calls-to-95%% point hangs on one or two near-tied instances "
                         "(BUILD_NOTES.md; the tables before 2026-11-30 used 10 / 5)")
    ap.add_argument("--max-frac", type=float, default=0.5)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="report seed")
    ap.add_argument("--tune-seed", type=int, default=1000, help="tuning seed")
    ap.add_argument("--out", default="/tmp/bench_tuning.json")
    ap.add_argument("--policies", nargs="+", default=list(GRIDS), choices=list(GRIDS),
                    help="tuned policies (SySRs is always reported)")
    ap.add_argument("--defaults", nargs="*", default=[], choices=list(GRIDS),
                    help="policies run at the package default of their grid's parameter "
                         "(no tuning); ucbe is always tuned")
    ap.add_argument("--gap-bins", type=int, default=3,
                    help="bins of the report instances' true top-two gap (quantiles over "
                         "instances) for the per-bin table; 0: no per-bin table")
    ap.add_argument("--plot", default=None,
                    help="PNG of the report seed's accuracy-versus-calls curves")
    ap.add_argument("--gap-plot", default=None,
                    help="PNG of the report seed's calls to 95%% per bin of the true "
                         "top-two gap (bars, one panel per dataset and K)")
    ap.add_argument("--replot", default=None, metavar="JSON",
                    help="draw --plot / --gap-plot from a saved --out JSON and stop "
                         "(no simulation)")
    ap.add_argument("--sysrs-only", action="store_true",
                    help="only SySRs (run per budget) on the report seed: no tuning, no "
                         "other policy; to set SySRs beside earlier tables of this script")
    args = ap.parse_args(argv)
    if args.replot:
        prepare_outputs(ap, args, ("plot", "gap_plot"))
        return replot(args.replot, plot=args.plot, gap_plot=args.gap_plot)
    at_least_one(ap, args, ("reps", "instances", "rank"))
    at_least_two_arms(ap, args.K)
    if args.gap_bins < 0:
        ap.error(f"--gap-bins: must be 0 (no per-bin table) or more, got {args.gap_bins}")
    fracs = budget_fractions_upto(ap, args.max_frac)
    if args.sysrs_only:
        prepare_outputs(ap, args, ("out",))
        return _sysrs_only(args, fracs)
    grids = {p: GRIDS[p] for p in args.policies}
    if "ucbe" not in grids:
        ap.error("--policies must include ucbe (the reference of the ratios)")
    if "ucbe" in args.defaults or not set(args.defaults) <= set(grids):
        ap.error("--defaults: policies of --policies other than ucbe (the tuned reference)")
    prepare_outputs(ap, args, ("out", "plot", "gap_plot"))

    rows, results, curves, gap_rows = [], {}, {}, []
    for ds in args.datasets:
        sm = load(ds)
        f_tune = _factors(sm, args.tune_seed, args.rank)
        f_rep = _factors(sm, args.seed, args.rank)
        for K in args.K:
            inst = args.instances or (50 if K <= 10 else 20)
            kw = dict(K=K, budget_fractions=fracs, n_replicates=args.reps,
                      n_instances=inst, rank=args.rank, cs_kinds=("eb",))
            chosen, tuning = {}, {}
            t0 = time.time()
            for pol, (name, grid) in grids.items():
                if pol in args.defaults:
                    chosen[pol] = package_default(name)
                    continue
                scores = []
                kpol, sync = _policy(pol)
                for v in grid:
                    rep = jaxeval.simulate_identification(
                        sm, kpol, seed=args.tune_seed, synchronized=sync,
                        factors=f_tune if pol in PRED else None, **{name: v}, **kw)
                    scores.append(_score(rep))
                    tuning[f"{pol}/{name}={v:g}"] = scores[-1][0]
                chosen[pol] = grid[min(range(len(grid)), key=lambda i: scores[i])]
            report = {}
            skw = {k: v for k, v in kw.items() if k not in ("K", "budget_fractions")}
            report["sysrs"], sysrs_rep = sysrs_per_budget(sm, K, args.seed, fracs,
                                                          with_report=True, **skw)
            reps = {"sysrs": sysrs_rep}
            for pol in grids:
                extra = {grids[pol][0]: chosen[pol]}
                kpol, sync = _policy(pol)
                rep = jaxeval.simulate_identification(
                    sm, kpol, seed=args.seed, synchronized=sync,
                    factors=f_rep if pol in PRED else None, **extra, **kw)
                report[pol] = (rep.calls_to(0.95, fraction=True),
                               rep.calls_to(0.90, fraction=True))
                reps[pol] = rep
                if pol == "ucbe":
                    gaps = np.sort(rep.theta, axis=1)
                    gap = float(np.median(gaps[:, -1] - gaps[:, -2]))
            wall = time.time() - t0
            for pol, rep in reps.items():
                curves[f"{ds}/K{K}/{pol}"] = _curve(rep, gap)
            bins = gap_bins(reps, args.gap_bins, n=int(reps["ucbe"].settings["n_items"]))
            results[f"{ds}/K{K}"] = dict(chosen=chosen, tuning_to95=tuning, report=report,
                                         median_gap=gap, wall_s=wall,
                                         defaults=list(args.defaults), by_gap=bins)
            rows.append((ds, K, gap, chosen, report))
            gap_rows.append((ds, K, bins))
            print(f"{ds} K={K}: chosen {chosen}; to95 "
                  + ", ".join(f"{p} {_fmt(report[p][0])}" for p in report)
                  + f" ({wall:.0f}s)", flush=True)
    pols = (*grids, "sysrs")
    others = [p for p in pols if p != "ucbe"]
    print()
    print("| dataset | K | median gap | tuned | calls to 95% (90%): "
          + " | ".join(pols) + " | " + " | ".join(f"{p} / ucbe" for p in others) + " |")
    print("|---" * (4 + len(pols) + len(others)) + "|")
    for ds, K, gap, ch, r in rows:
        tuned = ", ".join(f"{p} {grids[p][0]}={ch[p]:g}"
                          + (" (default)" if p in args.defaults else "") for p in grids)
        print(f"| {ds} | {K} | {gap:.3f} | {tuned} | "
              + " | ".join(f"{_fmt(r[p][0])} ({_fmt(r[p][1])})" for p in pols) + " | "
              + " | ".join(_ratio(r[p][0], r["ucbe"][0]) for p in others) + " |")
    print_gap_table(gap_rows, list(pols))
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), results=results, curves=curves), fh, indent=1)
    print(f"\nresults written to {args.out}")
    if args.plot:
        from bench_identification import plot_curves

        plot_curves(curves, list(pols), args.plot, reps=args.reps)
    if args.gap_plot:
        plot_gap_bins(results, list(pols), args.gap_plot, reps=args.reps)


def _sysrs_only(args, fracs) -> int:
    results = {}
    for ds in args.datasets:
        sm = load(ds)
        for K in args.K:
            inst = args.instances or (50 if K <= 10 else 20)
            t0 = time.time()
            to95, to90 = sysrs_per_budget(sm, K, args.seed, fracs, n_replicates=args.reps,
                                          n_instances=inst, rank=args.rank, cs_kinds=("eb",))
            wall = time.time() - t0
            results[f"{ds}/K{K}"] = dict(report={"sysrs": (to95, to90)}, wall_s=wall)
            print(f"| {ds} | {K} | SySRs per budget: {_fmt(to95)} ({_fmt(to90)}) | "
                  f"{wall:.0f} s |", flush=True)
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), results=results), fh, indent=1)
    print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    main()
