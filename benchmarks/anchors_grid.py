"""Issue 5's full anchors grid: every dataset x k x method, 10 seeds, resumable.

For every dataset of ``bench_anchors.DATASETS`` and every k in {100, 20, 60, 40, 80}
(k = 100 first for all datasets; only k < number of items), one call of
``evaluate_protocol`` (SPEC 6.2 splits, seeds 42..51; vmapped with ``--vmap-seeds``, as the
recorded cells were, else one seed after another) runs the issue-5 methods
and appends one JSON line per finished (dataset, k) cell to ``--out``: per-seed test
MAE (pp), Kendall tau-b, split-conformal coverage and width of the 90% interval, their
means and sds, the wall time, the settings and the git commit of the jaxeval that ran.
A cell already in the file with the same settings, seeds and methods, run the same way
(seeds vmapped or not, same ``NPROC``) and with the same methods' intervals calibrated
on validation halves (``Settings.named_halves``) is skipped, so an interrupted grid
continues where it stopped.

    # run (or continue) the grid; point PYTHONPATH at a frozen jaxeval checkout. The
    # cells in benchmarks/results/anchors_grid.jsonl ran with the seeds vmapped and
    # before any method was calibrated on validation halves: none of them counts as
    # done now (the script says so) and every cell reruns
    PYTHONPATH=/path/to/snapshot nice -n 19 python benchmarks/anchors_grid.py --vmap-seeds
    # the markdown tables from what is in the file
    python benchmarks/anchors_grid.py --table
    # and a figure: MAE against k, one panel per dataset
    python benchmarks/anchors_grid.py --plot benchmarks/plots/anchors_grid.png

Coverage check: with ``n`` calibration (validation) models the split-conformal coverage
of one split is Beta(r, n + 1 - r) distributed, ``r = ceil((n + 1)(1 - alpha))``, when
the map was not tuned on those models; averaged over ``h`` test models and ``S``
independent splits its sd is ``sqrt((Var_beta + E[c(1 - c)] / h) / S)``. ``--table``
marks a method's mean coverage outside ``r/(n+1) +- 2 sd``. In the committed cells the
MLP checkpoints and the ridge strength were chosen on the same validation models that
calibrated the interval, so a small shortfall there is expected and is reported, not
hidden; since the twenty-fifth session the ridge methods, and since the twenty-seventh
the MLP-trained ones, are calibrated on validation halves instead (a new record's
``named_halves`` lists them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import jaxeval
from jaxeval.anchors import Settings
from jaxeval.anchors._methods import halved_methods
from jaxeval.anchors._protocol import evaluate_protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_anchors import DATASETS, load, same_run  # noqa: E402
from bench_args import prepare_outputs  # noqa: E402

#: The methods of issue 5, in table order.
METHODS = ("random_mean", "anchor_points", "random_linear", "random_ridge", "random_mlp",
           "pirt", "gpirt", "sparseeval")
#: k = 100 for every dataset first, then the rest in this order.
K_ORDER = (100, 20, 60, 40, 80)
SEEDS = tuple(range(42, 52))
ALPHA = 0.1
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "anchors_grid.jsonl"


def _commit() -> str:
    """Git commit of the jaxeval checkout that is imported (``unknown`` outside git)."""
    root = Path(jaxeval.__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "jaxeval"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


#: Settings fields that change the issue-5 methods' numbers; fields added later for other
#: methods (e.g. ``auto``'s cross-validation, the greedy strengths) do not invalidate cells.
KEY_FIELDS = ("proxy_steps", "final_steps", "init_steps", "eval_every", "num_swaps", "guard",
              "kmeans_iters", "irt")


def _key_from_fields(fields: dict, seeds, methods) -> str:
    sub = {f: fields.get(f) for f in KEY_FIELDS}
    return json.dumps({"settings": sub, "seeds": list(seeds), "methods": list(methods)},
                      sort_keys=True)


def _settings_key(st: Settings, seeds, methods) -> str:
    fields = {f.name: repr(getattr(st, f.name)) for f in dataclasses.fields(st)}
    return _key_from_fields(fields, seeds, methods)


def _record_key(rec: dict) -> str:
    """The resume key of a stored cell, recomputed from its recorded settings fields."""
    return _key_from_fields(rec.get("settings_fields", {}), rec.get("seeds", []),
                            rec.get("methods", []))


def read_cells(path: Path) -> list[dict]:
    """Every record of the results file (an absent file holds none)."""
    if not path.exists():
        return []
    recs = []
    with open(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if line:
                try:
                    recs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {i + 1} is not JSON ({e})") from None
    return recs


def _load_avg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def run_cell(name: str, sm: jaxeval.ScoreMatrix, k: int, st: Settings, seeds, methods,
             vmap_seeds: bool = False) -> dict:
    """Run one (dataset, k) cell and return its JSON record."""
    load_before = _load_avg()
    t0, c0 = time.perf_counter(), time.process_time()
    r = evaluate_protocol(sm, k, tuple(methods), tuple(seeds), st, alpha=ALPHA, dr_items=0,
                          vmap_seeds=vmap_seeds)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_models = int(r.info["n_models"])
    h = 200 if n_models >= 1000 else int(round(0.2 * n_models))
    per = {}
    for i, m in enumerate(r.methods):
        mae, tau = r.mae_pp[i], r.tau_b[i]
        cov, wid = r.coverage[i], 100 * r.width[i]
        per[m] = {
            "mae_pp": mae.tolist(), "tau_b": tau.tolist(), "coverage": cov.tolist(),
            "width_pp": wid.tolist(),
            "mae_mean": float(mae.mean()), "mae_sd": float(mae.std(ddof=1)),
            "tau_mean": float(tau.mean()), "tau_sd": float(tau.std(ddof=1)),
            "coverage_mean": float(cov.mean()), "width_mean_pp": float(wid.mean()),
        }
    return {
        "dataset": name, "k": int(k), "source": str(r.info["dataset"]),
        "n_models": n_models, "n_items": int(r.info["n_items"]), "n_test": h, "n_val": h,
        "external_target": bool(r.info["external_target"]),
        "seeds": list(seeds), "methods": list(methods), "alpha": ALPHA,
        "results": per, "seconds": secs, "cpu_seconds": cpu, "settings": repr(st),
        "settings_fields": {f.name: repr(getattr(st, f.name)) for f in dataclasses.fields(st)},
        "key": _settings_key(st, seeds, methods), "commit": _commit(),
        "named_halves": r.info["named_halves"],
        "seeds_batched": r.info["seeds_batched"], "nproc": os.environ.get("NPROC"),
        "jaxeval_path": str(Path(jaxeval.__file__).resolve().parent),
        "load_before": load_before, "load_after": _load_avg(), "cpus": os.cpu_count(),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def conformal_tolerance(n_val: int, n_test: int, n_seeds: int, alpha: float = ALPHA):
    """Expected split-conformal coverage and the sd of its mean over seeds.

    Args:
      n_val: calibration models per split.
      n_test: test models per split.
      n_seeds: independent splits averaged.
      alpha: miscoverage level.

    Returns:
      ``(mean, sd)`` of the seed-averaged test coverage for a map not tuned on the
      calibration models (exchangeable, continuous residuals).
    """
    if n_val < 1 or n_test < 1 or n_seeds < 1:
        raise ValueError(f"n_val, n_test, n_seeds must be >= 1, got {n_val}, {n_test}, {n_seeds}")
    r = math.ceil((n_val + 1) * (1 - alpha))
    if r > n_val:
        return 1.0, 0.0
    a, b = r, n_val + 1 - r
    mu = a / (a + b)
    var_beta = a * b / ((a + b) ** 2 * (a + b + 1))
    e_binom = mu * (1 - mu) - var_beta
    return mu, math.sqrt((var_beta + e_binom / n_test) / n_seeds)


def _cells(recs: list[dict]) -> tuple[dict, list, list[str]]:
    """``({(dataset, k): record}, keys in table order, methods in table order)``; the
    last record of a (dataset, k) wins."""
    cells = {}
    for rec in recs:
        cells[(rec["dataset"], rec["k"])] = rec
    order = {d: i for i, d in enumerate(DATASETS)}
    keys = sorted(cells, key=lambda c: (order.get(c[0], 99), c[1]))
    methods = list(METHODS)
    for rec in cells.values():
        methods += [m for m in rec["methods"] if m not in methods]
    return cells, keys, methods


def print_tables(recs: list[dict]) -> None:
    """Markdown tables (MAE, tau-b, coverage/width) and the k = 100 winners."""
    if not recs:
        print("no finished cells")
        return
    cells, keys, methods = _cells(recs)
    head = "| dataset | k | " + " | ".join(methods) + " |\n|---|---|" + "---|" * len(methods)

    def metric_table(title, name, fmt, pick):
        print(f"{title}\n\n{head}")
        for c in keys:
            res = cells[c]["results"]
            best = pick(res[m][f"{name}_mean"] for m in res)
            row = []
            for m in methods:
                if m not in res:
                    row.append("–")
                    continue
                s = f"{res[m][f'{name}_mean']:{fmt}} ± {res[m][f'{name}_sd']:{fmt}}"
                row.append(f"**{s}**" if res[m][f"{name}_mean"] == best else s)
            print(f"| {c[0]} | {c[1]} | " + " | ".join(row) + " |")

    metric_table("### Test MAE (pp), mean ± sd over seeds; best per row in bold", "mae", ".2f", min)
    metric_table("\n### Kendall τ-b, mean ± sd over seeds; best per row in bold", "tau", ".3f", max)

    print("\n### 90% split-conformal interval on test models: coverage / mean width (pp)\n")
    print("Expected coverage ± 2 sd (Beta-binomial, see the module docstring) per row; "
          "a coverage outside that band is marked with `!` (a method calibrated on the "
          "halves of an odd validation count: against its own band, one model fewer).\n")
    print("| dataset | k | expected ± 2 sd | " + " | ".join(methods) + " |\n|---|---|---|"
          + "---|" * len(methods))
    for c in keys:
        rec = cells[c]
        mu, sd = conformal_tolerance(rec["n_val"], rec["n_test"], len(rec["seeds"]),
                                     rec.get("alpha", ALPHA))
        row = []
        for m in methods:
            if m not in rec["results"]:
                row.append("–")
                continue
            v = rec["results"][m]
            mu_m, sd_m = mu, sd
            if m in (rec.get("named_halves") or []) and rec["n_val"] % 2:
                # calibrated on two halves of the validation models: one is left out
                mu_m, sd_m = conformal_tolerance(rec["n_val"] - 1, rec["n_test"],
                                                 len(rec["seeds"]), rec.get("alpha", ALPHA))
            flag = "" if abs(v["coverage_mean"] - mu_m) <= 2 * sd_m else " !"
            row.append(f"{v['coverage_mean']:.3f}{flag} / {v['width_mean_pp']:.1f}")
        print(f"| {c[0]} | {c[1]} | {mu:.3f} ± {2 * sd:.3f} | " + " | ".join(row) + " |")

    print("\n### Cells: models, wall time, machine load, commit\n")
    print("| dataset | k | models (train/val/test) | target | wall (s) | CPU (s) | load before → "
          "after (1 min) | commit |\n|---|---|---|---|---|---|---|---|")
    for c in keys:
        rec = cells[c]
        tr = rec["n_models"] - 2 * rec["n_test"]
        print(f"| {c[0]} | {c[1]} | {rec['n_models']} ({tr}/{rec['n_val']}/{rec['n_test']}) | "
              f"{'full score' if rec['external_target'] else 'row mean'} | "
              f"{rec['seconds']:.0f} | "
              + (f"{rec['cpu_seconds']:.0f}" if "cpu_seconds" in rec else "not recorded")
              + f" | {rec['load_before'][0]} → {rec['load_after'][0]} | "
              f"{rec['commit'][:7]} |")

    print("\n### k = 100: lowest test MAE per dataset\n")
    print("| dataset | winner (MAE pp) | runner-up | sparseeval (rank) |\n|---|---|---|---|")
    for c in keys:
        if c[1] != 100:
            continue
        res = cells[c]["results"]
        ranked = sorted(res, key=lambda m: res[m]["mae_mean"])
        se = (f"{res['sparseeval']['mae_mean']:.2f} ({ranked.index('sparseeval') + 1} of "
              f"{len(ranked)})" if "sparseeval" in res else "–")
        second = (f"{ranked[1]} ({res[ranked[1]]['mae_mean']:.2f})" if len(ranked) > 1
                  else "–")  # (a cell run with one method)
        print(f"| {c[0]} | {ranked[0]} ({res[ranked[0]]['mae_mean']:.2f}) | {second} | {se} |")


def mae_panels(n: int):
    """``pyplot`` and a figure of ``n`` panels (4 a row) for test MAE against k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    return plt, fig, axes


def style_mae_panel(ax, ks, title: str) -> None:
    """One panel's axes: log MAE scale with plain tick labels, ``ks`` as x ticks."""
    from matplotlib.ticker import FormatStrFormatter

    ax.set_title(title, fontsize=8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xticks(ks)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3, which="both")


def save_mae_panels(plt, fig, axes, n_used: int, handles, labels, ncol: int, title: str,
                    bottom: float, path) -> Path:
    """Hide the unused panels, label the outer axes, add the legend and title, write
    ``path`` (PNG, its folder made) and return it."""
    for ax in axes.ravel()[n_used:]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("test MAE (pp)", fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel("anchor items k", fontsize=8)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_grid(recs: list[dict], path: Path) -> Path:
    """One panel per dataset: test MAE (pp, log scale) against k for every method,
    mean over seeds with a +-1 sd bar; SparseEval drawn thicker."""
    if not recs:
        raise ValueError("--plot: no finished cells to draw")
    cells, keys, methods = _cells(recs)
    names = list(dict.fromkeys(d for d, _ in keys))  # datasets in table order
    plt, fig, axes = mae_panels(len(names))
    colors = plt.get_cmap("tab10")
    for ax, d in zip(axes.ravel(), names):
        ks = sorted(k for dd, k in cells if dd == d)
        for j, m in enumerate(methods):
            pts = [(k, cells[(d, k)]["results"][m]) for k in ks if m in cells[(d, k)]["results"]]
            if not pts:
                continue
            x = [k for k, _ in pts]
            y = [v["mae_mean"] for _, v in pts]
            e = [v["mae_sd"] for _, v in pts]
            se = m == "sparseeval"
            ax.errorbar(x, y, yerr=e, color="black" if se else colors(j % 10), marker="o",
                        ms=3, capsize=2, lw=2.2 if se else 1.0, label=m, zorder=3 if se else 2)
        rec = cells[(d, ks[0])]
        style_mae_panel(ax, ks, f"{d} ({rec['n_models']} models, {rec['n_items']} items)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    n_seeds = len(next(iter(cells.values()))["seeds"])
    return save_mae_panels(plt, fig, axes, len(names), handles, labels, min(8, len(labels)),
                           f"Anchors grid: test MAE vs k, mean ± sd over {n_seeds} seeds",
                           0.05, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", action="store_true", help="print the tables from --out and exit")
    ap.add_argument("--plot", type=Path, metavar="PNG",
                    help="draw MAE against k per dataset from --out into this PNG and exit")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--k", nargs="*", type=int, default=list(K_ORDER))
    ap.add_argument("--methods", nargs="*", default=list(METHODS))
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="r seeds -> 42 .. 42 + r - 1")
    ap.add_argument("--init-steps", type=int, default=500)
    ap.add_argument("--proxy-steps", type=int, default=500)
    ap.add_argument("--final-steps", type=int, default=3000)
    ap.add_argument("--vmap-seeds", action="store_true",
                    help="vmap the protocol over the seeds (how the earlier cells were run)")
    ap.add_argument("--max-cells", type=int, default=0, help="stop after this many (0 = all)")
    a = ap.parse_args(argv)

    if a.table or a.plot:
        prepare_outputs(ap, a, ("plot",))
        if a.table:
            print_tables(read_cells(a.out))
        if a.plot:
            print(f"wrote {plot_grid(read_cells(a.out), a.plot)}")
        return
    bad = [d for d in a.datasets if d not in DATASETS]
    if bad:
        raise ValueError(f"--datasets: unknown {bad}; expected names from {list(DATASETS)}")
    if a.seeds < 1 or any(k < 1 for k in a.k):
        raise ValueError(f"--seeds and --k must be >= 1, got {a.seeds}, {a.k}")
    prepare_outputs(ap, a, ("out",), append=("out",))
    st = Settings(init_steps=a.init_steps, proxy_steps=a.proxy_steps,
                  final_steps=a.final_steps)
    seeds = tuple(42 + r for r in range(a.seeds))
    key = _settings_key(st, seeds, a.methods)
    stored = read_cells(a.out)
    halved = list(halved_methods(a.methods, st))
    done = {(r["dataset"], r["k"]) for r in stored
            if _record_key(r) == key and same_run(r, a.vmap_seeds)
            and (r.get("named_halves") or []) == halved}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    print(f"jaxeval {jaxeval.__file__} (commit {_commit()}); {st}; seeds {seeds}; "
          f"{len(done)} cells already in {a.out}", flush=True)
    if stored and not done:
        print(f"note: none of the {len(stored)} records in {a.out} ran with these settings, "
              f"seeds and methods, these methods calibrated on validation halves "
              f"({', '.join(halved) or 'none'}) and this seed batching (--vmap-seeds "
              f"{'on' if a.vmap_seeds else 'off'}, NPROC {os.environ.get('NPROC')}): every "
              "cell runs and is appended", flush=True)

    n_items = {}
    ran = 0
    for k in a.k:
        for d in a.datasets:
            if (d, k) in done:
                continue
            if d not in n_items:
                n_items[d] = load(d).drop_duplicates().n_items
            if k >= n_items[d]:
                print(f"skip {d} k={k}: only {n_items[d]} items", flush=True)
                continue
            if a.max_cells and ran >= a.max_cells:
                return
            sm = load(d)
            print(f"{time.strftime('%H:%M:%S')} start {d} k={k}, load {_load_avg()}", flush=True)
            rec = run_cell(d, sm, k, st, seeds, a.methods, a.vmap_seeds)
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            ran += 1
            res = rec["results"]
            print(f"{time.strftime('%H:%M:%S')} done {d} k={k} in {rec['seconds']:.0f} s: "
                  + ", ".join(f"{m} {res[m]['mae_mean']:.2f}" for m in a.methods), flush=True)


if __name__ == "__main__":
    main()
