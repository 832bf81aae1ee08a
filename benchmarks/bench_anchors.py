"""Anchor benchmark: the SPEC 6.2 protocol for every dataset, k and method.

Examples::

    # the ten SPEC 6.2 rows, 5 seeds; every method, with the MLP methods on the rows
    # with a SparseEval cell (--mlp auto; add --mlp never for the cheap methods only)
    python benchmarks/bench_anchors.py --rows spec --seeds 5
    python benchmarks/bench_anchors.py --rows spec --seeds 5 --mlp never
    # a subset
    python benchmarks/bench_anchors.py --datasets oll2_musr --k 20 100 --methods random_ridge auto
    # the full grid of issue 5 (slow)
    python benchmarks/bench_anchors.py --rows grid --seeds 10
    # issue 8: every dataset at k in {20, 50, 100} (the SPEC rows first), resumable
    python benchmarks/bench_anchors.py --rows issue8 --seeds 5 --mlp never --resume \
        --out benchmarks/results/anchors_issue8.jsonl
    # the summary table of a results file (one line per cell; the newest record wins)
    python benchmarks/bench_anchors.py --table benchmarks/results/anchors_issue8.jsonl
    # auto before / after a change, cell by cell (MAE, coverage vs its band, width)
    python benchmarks/bench_anchors.py --compare benchmarks/results/anchors_issue8.jsonl \
        benchmarks/results/anchors_issue8_halves.jsonl

Each finished (dataset, k) cell is appended as one JSON line to ``--out`` (so an
interrupted run keeps what it finished) and printed as markdown rows.
"""

from __future__ import annotations

import os

# jaxlib 0.10.2 runs batched LAPACK calls (the vmapped ridge eigh / solve, the
# factorization's Cholesky) by fanning the batch out onto XLA:CPU's intra-op pool and
# blocking a pool thread until the chunks finish. When as many independent batched
# calls run concurrently as the pool has threads (2 on a 2-core machine), every
# thread waits and the process hangs at 0% CPU. A larger pool (the PjRt CPU client
# reads NPROC before creating it) makes that practically impossible; it must be set
# before JAX starts its backend. Since the twenty-eighth session no anchor program
# makes a batched LAPACK call (jaxeval._seqlinalg loops over the batch), so the hang
# cannot happen there any more; NPROC stays 32 because the pool size changes float32
# rounding and every record in benchmarks/results/ was made with it.
os.environ.setdefault("NPROC", "32")

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

import jaxeval
from jaxeval.anchors import Settings, _methods
from jaxeval.anchors._methods import halved_methods
from jaxeval.anchors._protocol import evaluate_protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_args import at_least_one, prepare_outputs  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

DATASETS = {
    "oll2_musr": "oll2_musr",
    "oll2_ifeval": "oll2_ifeval",
    "oll2_arc": "oll2_arc_challenge",
    "oll2_math5": "oll2_math_lvl5",
    "tailored_gsm8k": "tailoredbench_gsm8k.npz",
    "mb_gsm8k": "metabench_oll1_gsm8k_selected.npz",
    "mb_gsm8k_v2": "metabench_oll1_gsm8k_v2_selected.npz",
    "mb_arc": "metabench_oll1_arc_selected.npz",
    "mb_arc_v2": "metabench_oll1_arc_v2_selected.npz",
    "mb_mmlu": "metabench_oll1_mmlu_selected.npz",
    "mb_truthfulqa": "metabench_oll1_truthfulqa_selected.npz",
    "mb_winogrande": "metabench_oll1_winogrande_selected.npz",
}

#: (dataset, k) rows of SPEC section 6.2 with the best cell (MAE pp, tau-b) to beat.
SPEC_ROWS = {
    ("oll2_musr", 100): (1.39, 0.73),
    ("oll2_musr", 20): (2.17, 0.56),
    ("oll2_ifeval", 100): (2.32, 0.90),
    ("oll2_arc", 100): (2.18, 0.87),
    ("oll2_math5", 100): (1.03, 0.89),
    ("tailored_gsm8k", 100): (1.93, 0.92),
    ("mb_gsm8k", 100): (2.10, 0.91),
    ("mb_gsm8k", 20): (4.22, 0.83),
    ("mb_arc_v2", 100): (1.33, 0.90),
    ("mb_mmlu", 50): (2.31, 0.84),
}
#: rows of SPEC 6.2 with a measured SparseEval cell (the faithful MLP is run there).
SPARSEEVAL_ROWS = {("oll2_musr", 100), ("oll2_ifeval", 100), ("oll2_arc", 100),
                   ("tailored_gsm8k", 100)}

BASELINES = ("random_mean", "anchor_points", "random_linear", "random_ridge", "kmeans_ridge",
             "pirt", "gpirt")
STRONG = ("greedy_ridge", "aiscis_ridge", "kmeans_blend", "greedy_blend", "random_shrunk",
          "greedy_shrunk", "random_lowrank", "greedy_lowrank", "greedy_mix", "greedy_resmlp",
          "greedy_mlp", "auto")
#: order of the SPEC rows for ``--rows spec`` (the rows whose target was missed or not
#: measured first, so an interrupted run keeps the most informative cells).
SPEC_ORDER = (("oll2_arc", 100), ("tailored_gsm8k", 100), ("mb_gsm8k", 100), ("mb_gsm8k", 20),
              ("mb_arc_v2", 100), ("oll2_musr", 100), ("oll2_musr", 20), ("oll2_ifeval", 100),
              ("oll2_math5", 100), ("mb_mmlu", 50))
MLPS = ("random_mlp", "sparseeval", "sparseeval_ridge")


def load(name: str) -> jaxeval.ScoreMatrix:
    src = DATASETS[name]
    if src.endswith(".npz"):
        return jaxeval.load(str(DATA / src), duplicate_names="rename")
    return jaxeval.load(src)


def _git_commit() -> str:
    """Commit of the imported jaxeval (``anchors_grid._commit``: ``-dirty`` if edited)."""
    from anchors_grid import _commit  # same folder (sys.path[0])

    return _commit()


def _coverage_band(r: dict) -> tuple[float, float]:
    """Expected coverage of a conformal 90% interval and the sd of its seed mean.

    :func:`anchors_grid.conformal_tolerance` with this record's calibration count: the
    validation count (= test count in the protocol); the cross-fitted pool (folds x
    fold size) when ``auto`` chose by cross-validation; both halves' residuals (twice
    half the validation count) when it was calibrated on validation halves. The
    Beta-binomial law is exact for one split-conformal predictor; for pooled
    cross-fitted residuals it is the usual approximation.
    """
    from anchors_grid import conformal_tolerance  # same folder (sys.path[0])

    n_te = r["n_test"]
    n_cal = n_te
    if r.get("auto_choice") == "cv":  # the folds its settings text names (5 by default)
        folds = re.search(r"\bauto_folds=(\d+)", r.get("settings") or "")
        folds = int(folds.group(1)) if folds else 5
        n_cal = folds * ((r["n_models"] - n_te) // folds)
    elif r.get("auto_calibration") == "validation halves":
        n_cal = 2 * (n_te // 2)
    return conformal_tolerance(n_cal, n_te, len(r["seeds"]), 0.1)


def _seed_maes(paths, pick, missing_ok: bool = False) -> dict:
    """``{(dataset, k): {seed: MAE (pp)}}`` from the JSON-lines results files ``paths``;
    ``pick(record)`` gives a record's per-seed MAEs of the method wanted (None: skip).
    Every record of a cell contributes its seeds (later files and lines win for a seed
    they repeat), so give only files whose records are meant to be pooled."""
    out = {}
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        if missing_ok and not Path(path).exists():
            continue
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            maes = pick(r)
            if maes is not None:
                out.setdefault((r["dataset"], r["k"]), {}).update(zip(r["seeds"], maes))
    return out


def _sparseeval_seeds(paths) -> dict:
    """Per-seed MAEs of the faithful SparseEval in ``anchors_grid.py`` results files, or in
    this script's own (a record with ``sparseeval`` among its methods, e.g. the SPEC-step
    rerun ``anchors_sparseeval_specsteps_k100.jsonl``); absent files are skipped (the
    defaults name files a checkout may not have)."""
    def pick(g):
        if "results" in g:
            return g["results"].get("sparseeval", {}).get("mae_pp")
        if "sparseeval" in g.get("methods", ()):
            return g["mae_pp"][g["methods"].index("sparseeval")]
        return None

    return _seed_maes(paths, pick, missing_ok=True)


def _auto_seeds(paths) -> dict:
    """Per-seed MAEs of ``auto`` in ``bench_anchors.py`` results files."""
    return _seed_maes(paths, lambda r: r["mae_pp"][r["methods"].index("auto")]
                      if "auto" in r["methods"] else None)


def versus_sparseeval(auto_from, sparseeval_from) -> str:
    """Markdown: ``auto`` against the faithful SparseEval, paired by seed (same split), on
    every cell where both ran: means, the mean paired difference with its standard
    error, on how many seeds ``auto`` is lower, and the one-sided paired t-test of
    "``auto`` is worse" (p)."""
    from scipy import stats

    auto, se = _auto_seeds(auto_from), _sparseeval_seeds(sparseeval_from)
    out = ["| cell | seeds | `auto` MAE (pp) | SparseEval MAE (pp) | `auto` − SparseEval "
           "(± se) | `auto` lower on | p (`auto` worse) |", "|---|---|---|---|---|---|---|"]
    below = worse = n = 0
    for c in sorted(set(auto) & set(se), key=lambda c: (c[0].split("_")[0], c[0], c[1])):
        seeds = sorted(set(auto[c]) & set(se[c]))
        if len(seeds) < 2:
            continue
        a = np.array([auto[c][s] for s in seeds])
        b = np.array([se[c][s] for s in seeds])
        d = a - b
        err = d.std(ddof=1) / np.sqrt(d.size)
        if err > 0:
            p = float(stats.t.sf(d.mean() / err, d.size - 1))
        else:  # every seed the same difference: certain either way
            p = 0.0 if d.mean() > 0 else 1.0
        n += 1
        below += d.mean() <= 0
        worse += p < 0.05
        out.append(f"| {c[0]} {c[1]} | {seeds[0]}–{seeds[-1]} ({d.size}) | {a.mean():.3f} | "
                   f"{b.mean():.3f} | {d.mean():+.3f} ± {err:.3f} | {(d < 0).sum()} of "
                   f"{d.size} | {p:.2f} |")
    out.append(f"\n`auto`'s mean MAE ≤ the faithful SparseEval's on {below} of {n} cells; "
               f"significantly worse (one-sided paired t, p < 0.05) on {worse} of {n}.")
    return "\n".join(out)


_PER_METHOD = ("mae_pp", "tau_b", "coverage", "width")


def merged_records(paths) -> dict:
    """Per (dataset, k), the cell's records in ``paths`` (files in the order given, lines
    in file order: later is newer) merged method by method: a method's per-seed figures
    come from the newest record that ran it; every other field (``auto``'s picks, the
    unbiased estimate, the commit) from the newest record of the cell, and
    ``"sources"`` lists each method's ``"file:line"``. Records of one cell with other
    seeds are not mixed: a ``ValueError`` names the cell and both files.

    So a rerun of ``auto`` alone (say, with other candidates) replaces ``auto``'s
    column and keeps the other methods' figures of the earlier full run.
    """
    recs: dict = {}
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        for i, line in enumerate(Path(path).read_text().splitlines(), 1):
            r = json.loads(line)
            c = (r["dataset"], r["k"])
            where = f"{Path(path).name}:{i}"
            old = recs.get(c)
            if old is not None and old["seeds"] != r["seeds"]:
                raise ValueError(
                    f"cell {c}: {where} has seeds {r['seeds']} but {old['sources']} has "
                    f"{old['seeds']}; records of other seeds are not merged")
            fig = {} if old is None else {m: {f: old[f][j] for f in _PER_METHOD if old.get(f)}
                                          for j, m in enumerate(old["methods"])}
            src = {} if old is None else dict(old["sources"])
            for j, m in enumerate(r["methods"]):
                fig[m] = {f: r[f][j] for f in _PER_METHOD if r.get(f)}
                src[m] = where
            new = dict(r, methods=list(fig), sources=src)
            for f in _PER_METHOD:  # a field some method lacks is dropped, not misaligned
                if all(f in v for v in fig.values()):
                    new[f] = [fig[m][f] for m in fig]
                else:
                    new.pop(f, None)
            recs[c] = new
    return recs


def _mean_sd(x) -> str:
    """``mean ± sd`` over seeds (pp), the mean alone for one seed (no sd to give)."""
    x = np.asarray(x)
    if x.size < 2:
        return f"{x.mean():.2f}"
    return f"{x.mean():.2f} ± {x.std(ddof=1):.2f}"


def summary_table(paths, sparseeval_from=None) -> str:
    """Markdown: per (dataset, k) the recommended ``auto`` against the SPEC best cell,
    the best single method, the faithful SparseEval (when run here, or taken from the
    same seeds of an ``anchors_grid.py`` results file), tau-b against the best
    baseline, coverage of the 90% interval and the unbiased estimate. ``paths``: one
    results file or several, merged method by method (:func:`merged_records`)."""
    se_grid = _sparseeval_seeds(sparseeval_from or [])
    recs = merged_records(paths)
    order = [c for c in SPEC_ORDER if c in recs] + sorted(c for c in recs if c not in SPEC_ORDER)
    out = ["| row | SPEC best MAE / τ | `auto` MAE (pp) | ≤ SPEC best? | best single method | "
           "SparseEval MAE | `auto` τ-b vs best baseline τ-b | `auto` τ-b ≥ SPEC best τ? | "
           "`auto` 90% coverage (n test; expected ± 2 sd) | "
           "unbiased DR MAE / cov / width (pp) |", "|---|---|---|---|---|---|---|---|---|---|"]
    met = n_spec = tau_wins = n_out = tau_spec = tau_tie = n_rows = 0
    for c in order:
        r = recs[c]
        names = r["methods"]
        mae = {m: np.asarray(r["mae_pp"][i]) for i, m in enumerate(names)}
        tau = {m: np.asarray(r["tau_b"][i]) for i, m in enumerate(names)}
        cov = {m: np.asarray(r["coverage"][i]) for i, m in enumerate(names)}
        if "auto" not in mae:
            continue
        n_rows += 1  # (the rows shown: a cell without auto has none)
        best = r.get("spec_best")
        ok = "–"
        if best:
            n_spec += 1
            ok = "yes" if mae["auto"].mean() <= best[0] else "**no**"
            met += ok == "yes"
        others = [m for m in names if m != "auto"]  # a run of auto alone has none
        single = min(others, key=lambda m: mae[m].mean()) if others else None
        base = [m for m in BASELINES if m in tau]
        bt = max(base, key=lambda m: tau[m].mean()) if base else None
        if bt and tau["auto"].mean() >= tau[bt].mean():
            tau_wins += 1
        # the SPEC's τ-b are given to two decimals: a tie at that precision is said so
        ts = "–"
        if best:
            t_a = float(tau["auto"].mean())
            ts = ("yes" if t_a >= best[1] else "tie (2 d.p.)" if round(t_a, 2) >= best[1]
                  else "**no**")
            tau_spec += ts == "yes"
            tau_tie += ts.startswith("tie")
        se = f"{mae['sparseeval'].mean():.2f}" if "sparseeval" in mae else "not run"
        if "sparseeval" not in mae and all(sd in se_grid.get(c, {}) for sd in r["seeds"]):
            se = f"{np.mean([se_grid[c][sd] for sd in r['seeds']]):.2f} (grid)"
        n_te = r["n_test"] * len(r["seeds"])
        dr = r.get("dr")
        drs = (f"{np.mean(dr['mae_pp']):.2f} / {np.mean(dr['coverage']):.3f} / "
               f"{100 * np.mean(dr['width']):.1f}") if dr else "– (external target)"
        exp, sd = _coverage_band(r)
        flag = "" if abs(cov["auto"].mean() - exp) <= 2 * sd else " !"
        n_out += bool(flag)
        out.append(
            f"| {c[0]} {c[1]} | " + (f"{best[0]:.2f} / {best[1]:.2f}" if best else "–")
            + f" | {_mean_sd(mae['auto'])} | {ok} | "
            + (f"{single} {mae[single].mean():.2f}" if single else "– (auto alone)")
            + f" | {se} | {tau['auto'].mean():.3f} vs "
            + (f"{tau[bt].mean():.3f} ({bt})" if bt else "–")
            + f" | {ts} | {cov['auto'].mean():.3f}{flag} ({n_te}; {exp:.3f} ± {2 * sd:.3f}) "
            f"| {drs} |"
        )
    out.append(f"\nSPEC rows met: {met} of {n_spec}; `auto` τ-b ≥ best baseline's on "
               f"{tau_wins} of {n_rows} rows, ≥ the SPEC row's best τ-b on {tau_spec} of "
               f"{n_spec} (tied at two decimals on {tau_tie}); `auto` coverage outside its "
               "2-sd band "
               f"(marked !) on {n_out} of {n_rows} rows.")
    return "\n".join(out)


def plot_table(paths, out, sparseeval_from=None) -> Path:
    """The summary table as a figure: one panel per dataset, test MAE (pp, log scale)
    against k, mean over seeds with a +-1 sd bar, for ``auto`` (thick), the best other
    method of each cell, the best baseline of each cell and the faithful SparseEval
    (same seeds, from ``sparseeval_from``); the SPEC 6.2 best cell as a star. ``paths``
    as :func:`summary_table`; writes ``out`` (PNG) and returns its path."""
    from anchors_grid import mae_panels, save_mae_panels, style_mae_panel  # same folder

    se_grid = _sparseeval_seeds(sparseeval_from or [])
    recs = {c: r for c, r in merged_records(paths).items() if "auto" in r["methods"]}
    if not recs:
        raise ValueError(f"--plot: no cell with auto in {paths}")
    names = sorted({d for d, _ in recs})
    plt, fig, axes = mae_panels(len(names))
    lines = {"auto": dict(color="C3", lw=2.4, zorder=4),
             "best other method": dict(color="C0", lw=1.0, ls="--"),
             "best baseline": dict(color="0.55", lw=1.0),
             "SparseEval (faithful)": dict(color="black", lw=1.2, ls=":")}
    for ax, d in zip(axes.ravel(), names):
        ks = sorted(k for dd, k in recs if dd == d)
        pts = {name: [] for name in lines}
        for k in ks:
            r = recs[(d, k)]
            mae = {m: np.asarray(v) for m, v in zip(r["methods"], r["mae_pp"])}
            pts["auto"].append((k, mae["auto"]))
            others = [m for m in mae if m != "auto"]
            if others:
                pts["best other method"].append(
                    (k, mae[min(others, key=lambda m: mae[m].mean())]))
            base = [m for m in BASELINES if m in mae]
            if base:
                pts["best baseline"].append((k, mae[min(base, key=lambda m: mae[m].mean())]))
            grid = se_grid.get((d, k), {})
            if "sparseeval" in mae:
                pts["SparseEval (faithful)"].append((k, mae["sparseeval"]))
            elif all(sd in grid for sd in r["seeds"]):
                pts["SparseEval (faithful)"].append(
                    (k, np.asarray([grid[sd] for sd in r["seeds"]])))
            if r.get("spec_best"):
                ax.plot([k], [r["spec_best"][0]], marker="*", ms=9, color="C2", ls="none",
                        label="SPEC 6.2 best", zorder=5)
        for name, style in lines.items():
            if pts[name]:
                x = [k for k, _ in pts[name]]
                ax.errorbar(x, [v.mean() for _, v in pts[name]],
                            yerr=[v.std(ddof=1) if v.size > 1 else 0.0 for _, v in pts[name]],
                            marker="o", ms=3, capsize=2, label=name, **style)
        style_mae_panel(ax, ks, f"{d} ({recs[(d, ks[0])]['n_models']} models)")
    handles = {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    n_seeds = len(next(iter(recs.values()))["seeds"])
    return save_mae_panels(plt, fig, axes, len(names), list(handles.values()), list(handles),
                           len(handles), "Anchor estimators: test MAE vs k, mean ± sd over "
                           f"{n_seeds} seeds", 0.06, out)


def calibration_table(before: str, after: str, grid=None) -> str:
    """Markdown: ``auto`` per cell in two results files (say, before and after a change of
    its interval's calibration): MAE, coverage against its band, mean width, and the
    faithful SparseEval's MAE on the same seeds from an ``anchors_grid.py`` file."""
    def cells(path):  # merged method by method, as summary_table does
        out = merged_records(path)
        for c, r in out.items():
            if "auto" not in r["methods"]:
                raise ValueError(f"{path}: cell {c} has no record of 'auto' (methods "
                                 f"{r['methods']}); calibration_table compares auto")
        return out

    old, new = cells(before), cells(after)
    g = _sparseeval_seeds(grid or [])
    out = ["| cell | `auto` MAE before → after (pp) | coverage before (band) | coverage after "
           "(band) | mean width before → after (pp) | SparseEval MAE, same seeds | s |",
           "|---|---|---|---|---|---|---|"]
    cov_b, cov_a, wid_b, wid_a = [], [], [], []
    for c in sorted(set(old) & set(new), key=lambda c: (c[1], c[0])):
        o, n = old[c], new[c]
        i, j = o["methods"].index("auto"), n["methods"].index("auto")
        cells_ = []
        for r, ix, covs, wids in ((o, i, cov_b, wid_b), (n, j, cov_a, wid_a)):
            cov, wid = float(np.mean(r["coverage"][ix])), 100 * float(np.mean(r["width"][ix]))
            exp, sd = _coverage_band(r)
            covs.append(cov)
            wids.append(wid)
            flag = "" if abs(cov - exp) <= 2 * sd else " !"
            cells_.append((float(np.mean(r["mae_pp"][ix])), f"{cov:.3f}{flag} ({exp:.3f} ± "
                           f"{2 * sd:.3f})", wid))
        se = "–"
        if c in g and all(x in g[c] for x in n["seeds"]):
            se = f"{np.mean([g[c][x] for x in n['seeds']]):.2f}"
        out.append(f"| {c[0]} {c[1]} | {cells_[0][0]:.2f} → {cells_[1][0]:.2f} | {cells_[0][1]} | "
                   f"{cells_[1][1]} | {cells_[0][2]:.1f} → {cells_[1][2]:.1f} | {se} | "
                   f"{n['seconds']:.0f} |")
    out.append(f"\nMean over the {len(cov_a)} cells: coverage {np.mean(cov_b):.3f} → "
               f"{np.mean(cov_a):.3f}, width {np.mean(wid_b):.2f} → {np.mean(wid_a):.2f} pp.")
    return "\n".join(out)


def same_run(rec: dict, vmap_seeds: bool) -> bool:
    """Whether a stored cell ran the way this run would, besides its settings: with the
    seeds vmapped or not, and with the same XLA CPU thread pool (``NPROC``); both change
    the rounding, and so a seed's anchors and MAE.

    ``rec["seeds_batched"]`` is what ``evaluate_protocol`` reports (``"vmap"`` or
    ``"loop"``); records written before it was recorded were all vmapped. Records
    without ``nproc`` predate recording it and match any pool size.

    >>> same_run({"seeds_batched": "loop", "nproc": os.environ.get("NPROC")}, False)
    True
    >>> same_run({}, False)
    False
    """
    batched = rec.get("seeds_batched", "vmap") in ("vmap", True)
    return batched == vmap_seeds and rec.get("nproc") in (None, os.environ.get("NPROC"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", choices=["spec", "issue8", "grid", "custom"], default="custom",
                    help="spec: the ten SPEC 6.2 rows; issue8: those, then every other dataset "
                         "at k in {20, 50, 100}; grid/custom: --datasets x --k")
    ap.add_argument("--table", metavar="JSONL", nargs="+", default=None,
                    help="only print the summary table of results files and exit (several: "
                         "a cell's methods each from the newest record that ran them)")
    ap.add_argument("--plot", metavar="PNG", default=None,
                    help="with --table: also draw it (MAE vs k per dataset: auto, the best "
                         "other method, the best baseline, SparseEval, the SPEC best)")
    ap.add_argument("--sparseeval-from", nargs="+",
                    default=["benchmarks/results/anchors_grid.jsonl",
                             "benchmarks/results/anchors_sparseeval_k50.jsonl"],
                    help="with --table, --compare or --versus-sparseeval: faithful "
                         "SparseEval MAE of the same seeds from anchors_grid.py results files")
    ap.add_argument("--versus-sparseeval", nargs="+", metavar="JSONL", default=None,
                    help="only print auto against the faithful SparseEval (--sparseeval-from), "
                         "paired by seed, for every cell of these results files, and exit")
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--k", nargs="*", type=int, default=[20, 40, 60, 80, 100])
    ap.add_argument("--methods", nargs="*", default=None, choices=[*_methods.METHODS, "auto"])
    ap.add_argument("--seeds", type=int, default=5,
                    help="repetitions r -> seeds first-seed + r")
    ap.add_argument("--first-seed", type=int, default=42,
                    help="the first seed (default 42, SPEC 6.2); e.g. 47 with --seeds 5 "
                         "adds seeds 47-51 to cells run on 42-46")
    ap.add_argument("--mlp", choices=["auto", "always", "never"], default="auto",
                    help="run the MLP methods (auto: on the SPEC rows with a SparseEval cell)")
    ap.add_argument("--proxy-steps", type=int, default=500)
    ap.add_argument("--final-steps", type=int, default=3000)
    ap.add_argument("--init-steps", type=int, default=500)
    ap.add_argument("--dr-items", type=int, default=100)
    ap.add_argument("--auto-cv-below", type=int, default=100,
                    help="auto cross-validates below this many validation models (the "
                         "library default too)")
    ap.add_argument("--auto-halves", action=argparse.BooleanOptionalAction, default=True,
                    help="calibrate auto's interval on validation halves when it chooses on "
                         "validation models (Settings.auto_halves; the library default "
                         "too)")
    ap.add_argument("--out", default="benchmarks/results_anchors.jsonl")
    ap.add_argument("--vmap-seeds", action="store_true",
                    help="vmap the protocol over the seeds (evaluate_protocol's vmap_seeds; "
                         "the records before this option were made so: a seed's numbers "
                         "then depend on how many seeds run together)")
    ap.add_argument("--resume", action="store_true",
                    help="skip (dataset, k) cells already in --out with the same seeds, "
                         "methods and settings, run the same way (--vmap-seeds, NPROC)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                    help="only print auto's MAE, coverage and width per cell of two results "
                         "files side by side (with --sparseeval-from) and exit")
    a = ap.parse_args(argv)
    at_least_one(ap, a, ("k", "seeds"))
    if a.compare:
        print(calibration_table(*a.compare, a.sparseeval_from))
        return
    if a.versus_sparseeval:
        print(versus_sparseeval(a.versus_sparseeval, a.sparseeval_from))
        return
    if a.table:
        prepare_outputs(ap, a, ("plot",))
        print(summary_table(a.table, a.sparseeval_from))
        if a.plot:
            print(f"wrote {plot_table(a.table, a.plot, a.sparseeval_from)}")
        return

    if a.rows == "spec":
        cells = [c for c in SPEC_ORDER if c[0] in a.datasets]
    elif a.rows == "issue8":
        cells = [c for c in SPEC_ORDER if c[0] in a.datasets]
        cells += [(d, k) for d in a.datasets for k in (20, 50, 100) if (d, k) not in cells]
    else:
        cells = []
        for d in a.datasets:
            for k in a.k:
                cells.append((d, k))
    prepare_outputs(ap, a, ("out",), append=("out",))
    st = Settings(proxy_steps=a.proxy_steps, final_steps=a.final_steps,
                  init_steps=a.init_steps, auto_cv_below=a.auto_cv_below,
                  auto_halves=a.auto_halves)
    seeds = tuple(a.first_seed + r for r in range(a.seeds))
    print(f"settings: {st}\nseeds: {seeds}")
    done = set()
    if a.resume and Path(a.out).exists():
        stored = [json.loads(line) for line in Path(a.out).read_text().splitlines()
                  if line.strip()]
        for rec in stored:
            if same_run(rec, a.vmap_seeds):
                done.add((rec["dataset"], rec["k"], tuple(rec["seeds"]),
                          tuple(rec["methods"]), rec["settings"],
                          tuple(rec.get("named_halves") or ())))
        # a cell is reused only if it ran with the same settings text (every Settings
        # field, e.g. named_halves), seeds, methods, seed batching and the same methods
        # calibrated on validation halves (records before that field: none match a cell
        # that halves a method, as the MLP-trained ones were not halved then); say when
        # nothing can be
        print(f"--resume: {len(stored)} records in {a.out}, {len(done)} run this way "
              f"(--vmap-seeds {'on' if a.vmap_seeds else 'off'}, NPROC "
              f"{os.environ.get('NPROC')}); a cell is skipped only if one of them has its "
              "dataset, k, seeds, methods and settings text", flush=True)
    cache = {}
    for d, k in cells:
        if d not in cache:
            cache = {d: load(d)}
        sm = cache[d]
        if k >= sm.n_items:
            continue
        methods = list(a.methods) if a.methods else list(BASELINES + STRONG)
        want_mlp = a.mlp == "always" or (a.mlp == "auto" and (d, k) in SPARSEEVAL_ROWS)
        if want_mlp and not a.methods:
            methods = list(BASELINES) + list(MLPS) + list(STRONG)
        st_cell = repr(dataclasses.replace(st, external=sm.target is not None))
        halved = halved_methods(methods, st)
        if (d, k, seeds, tuple(methods), st_cell, halved) in done:
            print(f"\n### {d} k={k}: already in {a.out}, skipped (--resume)")
            continue
        t0 = time.perf_counter()
        # the unbiased estimate is for mean targets, over the non-anchor items there are
        dr_items = 0 if sm.target is not None else min(a.dr_items, sm.n_items - k)
        r = evaluate_protocol(sm, k, tuple(methods), seeds, st, dr_items=dr_items,
                              vmap_seeds=a.vmap_seeds)
        secs = time.perf_counter() - t0
        best = SPEC_ROWS.get((d, k))
        print(f"\n### {d} k={k} ({sm.n_models} models after dedup: "
              f"{r.info['n_models']}, {sm.n_items} items, {len(seeds)} seeds, {secs:.0f} s)"
              + (f" -- SPEC best cell {best[0]:.2f} / {best[1]:.2f}" if best else ""))
        print("| method | MAE (pp) | tau-b | 90% coverage | width (pp) |\n|---|---|---|---|---|")
        for i, m in enumerate(r.methods):
            print(f"| {m} | {r.mae_pp[i].mean():.2f} ± {r.mae_pp[i].std():.2f} | "
                  f"{r.tau_b[i].mean():.3f} ± {r.tau_b[i].std():.3f} | "
                  f"{r.coverage[i].mean():.3f} | {100 * r.width[i].mean():.2f} |")
        if r.dr:
            print(f"| unbiased DR (auto anchors + {r.dr['m']} random) | "
                  f"{r.dr['mae_pp'].mean():.2f} ± {r.dr['mae_pp'].std():.2f} | – | "
                  f"{r.dr['coverage'].mean():.3f} | {100 * r.dr['width'].mean():.2f} |")
        if r.info.get("auto_picks"):
            print(f"\nauto chose by {r.info['auto_choice']}: {r.info['auto_picks']}")
        rec = {
            "dataset": d, "k": k, "seeds": list(seeds), "methods": list(r.methods),
            "mae_pp": r.mae_pp.tolist(), "tau_b": r.tau_b.tolist(),
            "coverage": r.coverage.tolist(), "width": r.width.tolist(),
            "dr": None if r.dr is None else {kk: np.asarray(v).tolist() for kk, v in r.dr.items()},
            "seconds": secs, "settings": r.info["settings"], "spec_best": best,
            "auto_choice": r.info.get("auto_choice"), "auto_picks": r.info.get("auto_picks"),
            "cv_mse": r.info.get("cv_mse"), "auto_calibration": r.info.get("auto_calibration"),
            "half_picks": r.info.get("half_picks"), "commit": _git_commit(),
            # the candidates auto weighs in the validation regime (experiments patch it)
            "auto_validation_extra": list(_methods.AUTO_VALIDATION_EXTRA)
            if "auto" in r.methods else None,
            "named_halves": r.info.get("named_halves"),
            "seeds_batched": r.info["seeds_batched"], "nproc": os.environ.get("NPROC"),
            "n_models": r.info["n_models"], "n_test": int(round(0.2 * r.info["n_models"]))
            if r.info["n_models"] < 1000 else 200,
        }
        with open(a.out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
