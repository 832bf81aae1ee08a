"""Reports of finished studies: a JSON summary, a text table, and plots.

:func:`summarize` turns a study's arrays into a JSON-ready summary:

- identification: per policy and checkpoint budget, the identification accuracy
  (share of replicates whose recommendation is a true best arm, ties count) with
  a Wilson 95% interval, LLM calls to reach 95% (linear interpolation, METHODS.md 6.1),
  family-wise coverage of the intervals (all K arms at that checkpoint, and at
  every checkpoint at once) and per-arm coverage for each confidence-sequence
  kind, mean interval width, the naive pooled estimate's error, and the status
  counts;
- anchors: per method and k, test MAE (pp), Kendall τ-b, interval coverage and
  width, mean ± sd over repetitions.

:func:`plot_study` draws the figures with matplotlib (the optional ``plots``
extra) on the Agg backend, so it works on machines without a display.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "calls_to_target",
    "format_summary",
    "plot_calls_bars",
    "plot_reports",
    "plot_study",
    "reports_summary",
    "summarize",
    "wilson_interval",
]

TARGET_ACCURACY = 0.95


def wilson_interval(successes: np.ndarray, n: int, z: float = 1.959964) -> tuple:
    """Wilson score interval of a binomial proportion (elementwise).

    Example:
      >>> lo, hi = wilson_interval(np.array([95]), 100)
      >>> round(float(lo[0]), 3), round(float(hi[0]), 3)
      (0.888, 0.978)
    """
    k = np.asarray(successes, np.float64)
    p = k / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return centre - half, centre + half


def binomial_band(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Where an empirical frequency of a true probability ``p`` over ``n`` trials falls
    with ~95% probability (normal approximation)."""
    half = z * math.sqrt(p * (1 - p) / n)
    return max(0.0, p - half), min(1.0, p + half)


def true_best(theta: np.ndarray) -> np.ndarray:
    """bool ``[R, K]``: the true best arms of each replicate, ties counted (within
    1e-6: float32 means of two equal graded rows can differ in the last bit; the same
    tolerance as :func:`jaxeval.metrics.best_arms`)."""
    from jaxeval._metrics import TIE_ATOL

    return theta >= theta.max(axis=1, keepdims=True) - TIE_ATOL


def recommended_correct(best: np.ndarray, rec: np.ndarray) -> np.ndarray:
    """bool ``[R, C]``: whether each recommendation ``rec [R, C]`` is one of the true best
    arms ``best [R, K]``. An index outside ``[0, K)`` (such as -1, "none") is wrong, as
    in :func:`jaxeval.metrics.identification_correct`; ``np.take_along_axis`` alone would
    wrap -1 onto the last arm."""
    rec = np.asarray(rec).astype(np.int64)
    K = best.shape[1]
    ok = (rec >= 0) & (rec < K)
    return np.take_along_axis(best, np.clip(rec, 0, K - 1), axis=1) & ok


def calls_to_target(
    calls: Sequence[float], accuracy: Sequence[float], target: float = TARGET_ACCURACY
) -> float | None:
    """LLM calls at which the accuracy curve first reaches ``target`` (linear interpolation).

    Returns ``None`` when the curve never reaches it.

    Raises:
      ValueError: when ``calls`` and ``accuracy`` differ in length or hold NaN (a
        NaN accuracy would otherwise read as never reached, or interpolate to NaN).

    Example:
      >>> round(calls_to_target([10, 20, 40], [0.5, 0.9, 1.0]), 6)
      30.0
    """
    c = np.asarray(calls, np.float64)
    a = np.asarray(accuracy, np.float64)
    if c.shape != a.shape or c.ndim != 1:
        raise ValueError(f"calls_to_target: calls {c.shape} and accuracy {a.shape} must be "
                         "1-D curves of one length")
    for name, x in (("calls", c), ("accuracy", a)):
        if np.isnan(x).any():
            raise ValueError(f"calls_to_target: {name} holds NaN at index "
                             f"{int(np.flatnonzero(np.isnan(x))[0])}")
    hit = np.flatnonzero(a >= target)
    if hit.size == 0:
        return None
    j = int(hit[0])
    if j == 0:
        return float(c[0])
    c0, c1, a0, a1 = c[j - 1], c[j], a[j - 1], a[j]
    return float(c0 + (target - a0) * (c1 - c0) / (a1 - a0))


def _round(x: Any, nd: int = 5) -> Any:
    if isinstance(x, dict):
        return {k: _round(v, nd) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v, nd) for v in x]
    if isinstance(x, (float, np.floating)):
        return None if not math.isfinite(float(x)) else round(float(x), nd)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.ndarray):
        return _round(x.tolist(), nd)
    return x


# ===================================================== identification
def _identification_summary(study: Any, results: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    from jaxeval._study import study_budgets

    info, _ = study_budgets(study)
    policies = {}
    gaps = []
    for spec in study.policies:
        r = results[spec.name]
        theta = r["theta"].astype(np.float64)  # [R, K]
        rec = r["checkpoints.recommended"]  # [R, C]
        calls = r["checkpoints.calls"]  # [R, C]
        # one checkpoint per budget of the study, every field over the same replicates
        R, C = (np.shape(rec)[0] if np.ndim(rec) else 0), len(info["budgets"])
        K, Q = study.num_arms, len(study.cs_kinds)
        rc, arms = "replicates, checkpoints", "arms"
        for field, want, dims in (
                ("checkpoints.recommended", (R, C), rc),
                ("theta", (R, K), f"replicates, {arms}"),
                ("checkpoints.calls", (R, C), rc), ("checkpoints.status", (R, C), rc),
                ("checkpoints.estimate", (R, C, K), f"{rc}, {arms}"),
                ("checkpoints.naive", (R, C, K), f"{rc}, {arms}"),
                ("checkpoints.lower", (R, C, Q, K), f"{rc}, interval kinds, {arms}"),
                ("checkpoints.upper", (R, C, Q, K), f"{rc}, interval kinds, {arms}")):
            # a hand-built or damaged result would otherwise broadcast into wrong figures
            if np.shape(r[field]) != want:
                raise ValueError(f"results[{spec.name!r}][{field!r}]: expected shape {want} "
                                 f"({dims}), got {np.shape(r[field])}")
        best = true_best(theta)
        correct = recommended_correct(best, rec)  # [R, C]
        k_ok = correct.sum(axis=0)
        acc = k_ok / R
        lo, hi = wilson_interval(k_ok, R)
        budgets = info["budgets"]
        kn = info["calls_full"]
        c95 = calls_to_target(calls.mean(axis=0), acc)  # calls spent, as calls_to
        entry: dict[str, Any] = {
            "policy": spec.policy,
            "settings": dict(spec.settings),
            "replicates": R,
            "budgets": budgets,
            "calls_mean": calls.mean(axis=0),
            "accuracy": acc,
            "accuracy_ci95": [lo, hi],
            "calls_to_95": c95,
            "calls_to_95_fraction": None if c95 is None else c95 / kn,
        }
        lower = r["checkpoints.lower"].astype(np.float64)  # [R, C, Q, K]
        upper = r["checkpoints.upper"].astype(np.float64)
        th = theta[:, None, None, :]
        hold = (lower <= th) & (th <= upper)  # [R, C, Q, K]
        entry["coverage"] = {}
        for q, kind in enumerate(study.cs_kinds):
            hq = hold[:, :, q, :]  # [R, C, K]
            entry["coverage"][kind] = {
                "family_wise": hq.all(axis=2).mean(axis=0),
                "family_wise_all_checkpoints": float(hq.all(axis=(1, 2)).mean()),
                "per_arm": hq.mean(axis=(0, 2)),
                "per_arm_all_checkpoints": float(hq.all(axis=1).mean()),
                "mean_width": (upper[:, :, q, :] - lower[:, :, q, :]).mean(axis=(0, 2)),
            }
        naive = r["checkpoints.naive"].astype(np.float64)  # [R, C, K]
        est = r["checkpoints.estimate"].astype(np.float64)
        entry["estimate_mae"] = np.abs(est - theta[:, None, :]).mean(axis=(0, 2))
        entry["naive_mae"] = np.abs(naive - theta[:, None, :]).mean(axis=(0, 2))
        entry["naive_bias"] = (naive - theta[:, None, :]).mean(axis=(0, 2))
        # the naive baseline's claim: intervals of the same widths centred on its estimate
        q = study.cs_kinds.index("eb") if "eb" in study.cs_kinds else 0
        shift = naive - est
        tk = theta[:, None, :]
        nl, nu = lower[:, :, q, :] + shift, upper[:, :, q, :] + shift
        from jaxeval._policies import PREDICTION_POLICIES

        pred = dict(spec.settings).get("use_predictions", spec.policy in PREDICTION_POLICIES)
        entry["naive_coverage_family"] = (
            ((nl <= tk) & (tk <= nu)).all(axis=-1).mean(axis=0) if pred else None
        )
        status = r["checkpoints.status"][:, -1]
        entry["final_status_counts"] = {
            str(int(s)): int(c) for s, c in zip(*np.unique(status, return_counts=True))
        }
        policies[spec.name] = entry
        top = -np.sort(-theta, axis=1)
        gaps.append(top[:, 0] - top[:, 1])
    info["median_top2_gap"] = float(np.median(np.concatenate(gaps)))
    out = {
        "kind": "identification",
        "name": study.name,
        "dataset": study.data.describe(),
        "num_arms": study.num_arms,
        "alpha": study.alpha,
        "nominal_coverage": 1.0 - study.alpha,
        # the replicates summarised (fewer than planned in partial results)
        "replicates": min(e["replicates"] for e in policies.values()),
        "budget_fractions": list(study.budgets),
        "problem": info,
        "policies": policies,
    }
    return _planned(out, study)


def _planned(out: dict, study: Any) -> dict:
    """``out`` with ``replicates_planned`` where it summarises fewer replicates than the
    study plans (results loaded with ``allow_partial=True``)."""
    if out["replicates"] != study.n_replicates:
        out["replicates_planned"] = study.n_replicates
    return out


# ============================================================ anchors
def _mean_sd_defined(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column means and sds (ddof 1) of ``v [seeds, k]`` over its finite entries, and
    their count per column (NaN where none; sd 0 where one)."""
    ok = np.isfinite(v)
    n = ok.sum(axis=0)
    x = np.where(ok, v, 0.0)
    mean = np.where(n > 0, x.sum(axis=0) / np.maximum(n, 1), np.nan)
    dev = np.where(ok, v - mean, 0.0)
    var = (dev**2).sum(axis=0) / np.maximum(n - 1, 1)
    sd = np.where(n > 1, np.sqrt(var), np.where(n == 1, 0.0, np.nan))
    return mean, sd, n


def _anchor_summary(study: Any, results: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    methods = {}
    for m in study.methods:
        entry: dict[str, Any] = {"k": list(study.k)}
        for f in ("mae_pp", "tau", "coverage", "width"):
            v = np.stack([results[f"k{k}"][f"{m}.{f}"] for k in study.k], axis=1)  # [seeds, k]
            if f == "tau":
                # tau-b is undefined (NaN) for a split whose predictions are all equal:
                # averaged over the splits where it is defined, their count kept
                entry[f], entry[f + "_sd"], n_def = _mean_sd_defined(v)
                entry["tau_undefined"] = v.shape[0] - n_def
                continue
            entry[f] = v.mean(axis=0)
            entry[f + "_sd"] = v.std(axis=0, ddof=1) if v.shape[0] > 1 else np.zeros(v.shape[1])
        methods[m] = entry
    seconds = {f"k{k}": float(results[f"k{k}"]["seconds"].sum()) for k in study.k}
    out = {
        "kind": "anchors",
        "name": study.name,
        "dataset": study.data.describe(),
        "seeds": study.n_seeds,
        "first_seed": study.first_seed,
        "alpha": study.alpha,
        "nominal_coverage": 1.0 - study.alpha,
        "k": list(study.k),
        "methods": methods,
        "seconds": seconds,
    }
    try:  # the matrix the splits were drawn from (results alone summarise without it)
        from jaxeval._study import _duplicates_removed

        sm = study.data.load()
    except (OSError, ValueError):
        return out
    out["problem"] = {"models": sm.n_models, "items": sm.n_items,
                      "duplicates_removed": _duplicates_removed(sm)}
    return out


def _duplicates(n: int) -> str:
    return f"{n} duplicate model{'s' if n != 1 else ''}"


def _replicate_summary(study: Any, results: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    r = results["replicates"]
    fields, skipped = {}, {}
    for k, v in r.items():
        # true/false outcomes ("covered", "correct") are the commonest Monte Carlo
        # result: their mean is the rate (they used to be left out without a word)
        # (complex numbers have no one mean and sd here: skipped by name, not cast to
        # their real part)
        real = np.issubdtype(v.dtype, np.number) and not np.issubdtype(v.dtype,
                                                                      np.complexfloating)
        if (real or v.dtype == bool) and v.size:
            x = v.reshape(v.shape[0], -1).astype(np.float64)
            fields[k] = {
                "shape": list(v.shape),
                "mean": x.mean(axis=0)[:_SHOWN],
                "sd": x.std(axis=0)[:_SHOWN],
            }
            bad = int((~np.isfinite(x)).any(axis=1).sum())
            if bad:  # (their mean is NaN: null in JSON; said, not left to be guessed)
                fields[k]["non_finite_replicates"] = bad
            if x.shape[1] > _SHOWN:
                fields[k]["components_shown"] = _SHOWN  # of prod(shape[1:])
        else:
            skipped[k] = f"dtype {v.dtype}" if v.size else "empty"
    rows = {int(v.shape[0]) for v in r.values() if np.ndim(v)}
    out = {
        "kind": "replicates",
        "name": study.name,
        "replicates": min(rows) if rows else study.n_replicates,
        "fields": fields,
    }
    if skipped:
        out["skipped_fields"] = skipped
    return _planned(out, study)


#: Components of a vector field a replicates summary shows (means and sds).
_SHOWN = 8


def summarize(study: Any, results: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    """A JSON-ready summary of a finished study (see the module docstring).

    Args:
      study: the study definition.
      results: ``{task: {field: array}}`` as returned by
        :func:`jaxeval._study.load_results`.
    """
    import jax

    import jaxeval

    if study.kind == "identification":
        s = _identification_summary(study, results)
    elif study.kind == "anchors":
        s = _anchor_summary(study, results)
    else:
        s = _replicate_summary(study, results)
    s["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    s["versions"] = {"jax": jax.__version__, "jaxeval": jaxeval.__version__}
    s["definition"] = study.to_dict()
    return _round(s)


def write_summary(summary: Mapping[str, Any], out: str | Path) -> Path:
    """Write ``summary.json`` in folder ``out``."""
    from jaxeval._data import atomic_open

    p = Path(out) / "summary.json"
    with atomic_open(p) as f:  # (an interrupted write never leaves half a file)
        f.write((json.dumps(summary, indent=1) + "\n").encode())
    return p


def _fmt_num(x: Any, width: int, nd: int) -> str:
    if x is None or not math.isfinite(float(x)):
        return "n/a".rjust(width)
    return f"{x:{width}.{nd}f}"


def _pct(x: Any) -> Any:
    return None if x is None else 100 * float(x)


def _fmt_pct(x: Any) -> str:
    """A share as ``' 94.1%'`` (``'   n/a'`` where there is none)."""
    s = _fmt_num(_pct(x), 5, 1)
    return s + "%" if s.strip() != "n/a" else s.rjust(6)


def format_summary(summary: Mapping[str, Any]) -> str:
    """A plain-text table of a summary, for the terminal."""
    lines = []
    if summary["kind"] == "identification":
        prob = summary["problem"]
        lines.append(
            f"Identification study {summary['name']!r} on {summary['dataset']}: "
            f"K={summary['num_arms']}, n={prob.get('items')}, {_reps(summary)}, "
            f"alpha={summary['alpha']}"
        )
        if "training_models" in prob:
            dup = prob.get("duplicates_removed", 0)
            lines.append(
                f"  {prob['training_models']} training models, {prob['pool_models']} candidates, "
                f"{prob['instances']} instances"
                + (f" ({_duplicates(dup)} removed first)" if dup else "")
                + f"; median top-2 gap {prob['median_top2_gap']:.3f}"
            )
        else:
            lines.append(f"  median top-2 gap {prob['median_top2_gap']:.3f}")
        fr = summary["budget_fractions"]
        pick = sorted({0, len(fr) // 4, len(fr) // 2, (3 * len(fr)) // 4, len(fr) - 1})
        head = "  policy        calls to 95%  " + "".join(
            f"acc@{100 * fr[j]:g}%".rjust(11) for j in pick
        )
        kinds = list(next(iter(summary["policies"].values()))["coverage"])
        head += "".join(f"  cover({k})" for k in kinds)
        lines.append(head)
        for name, e in summary["policies"].items():
            row = f"  {name:<13} {_fmt_pct(e['calls_to_95_fraction']):>12}  "
            row += "".join(f"{100 * e['accuracy'][j]:10.1f}%" for j in pick)
            for k in kinds:
                cov = 100 * e['coverage'][k]['family_wise_all_checkpoints']
                row += f"  {cov:>{len(k) + 6}.1f}%"  # as wide as 'cover(<kind>)'
            lines.append(row)
        lines.append(
            "  (calls as a share of K*n; accuracy = P(recommended arm is a true best); "
            f"coverage = all K intervals hold at every checkpoint, nominal "
            f"{100 * summary['nominal_coverage']:.0f}%)"
        )
    elif summary["kind"] == "anchors":
        lines.append(
            f"Anchor study {summary['name']!r} on {summary['dataset']}: "
            f"{summary['seeds']} seeds (first {summary['first_seed']}), test MAE (pp) / tau-b"
        )
        prob = summary.get("problem")
        if prob:
            dup = prob.get("duplicates_removed", 0)
            lines.append(f"  {prob['models']} models x {prob['items']} items"
                         + (f" ({_duplicates(dup)} removed first)" if dup else ""))
        lines.append("  method            " + "".join(f"k={k}".rjust(15) for k in summary["k"]))
        for name, e in summary["methods"].items():
            row = f"  {name:<17} "
            row += "".join(
                f"{_fmt_num(m, 6, 2)} / {_fmt_num(t, 4, 2)}".rjust(15)
                for m, t in zip(e["mae_pp"], e["tau"])
            )
            lines.append(row)
        undefined = [
            f"{name} at k={k}: {int(u)}"
            for name, e in summary["methods"].items()
            for k, u in zip(summary["k"], e.get("tau_undefined", ()))
            if u
        ]
        if undefined:
            lines.append(
                "  (tau-b undefined, all predictions equal, on some splits -- averaged over the "
                "others: " + "; ".join(undefined) + ")"
            )
        lines.append(f"  interval coverage / mean width (pp), nominal "
                     f"{100 * summary['nominal_coverage']:.0f}%")
        for name, e in summary["methods"].items():
            lines.append(f"  {name:<17} " + "".join(
                f"{_fmt_pct(c)} / {_fmt_num(_pct(w), 5, 2)}".rjust(15)
                for c, w in zip(e["coverage"], e["width"])))
    else:
        lines.append(f"Replicate study {summary['name']!r}: {_reps(summary)}")
        for k, v in summary["fields"].items():
            more = (f" (first {v['components_shown']} components)"
                    if "components_shown" in v else "")
            mean = [math.nan if m is None else m for m in np.ravel(v["mean"]).tolist()]
            if v.get("non_finite_replicates"):
                more += (f"; {v['non_finite_replicates']} of {v['shape'][0]} replicates hold "
                         "NaN or inf (load_results gives every value)")
            lines.append(f"  {k}: shape {v['shape']}, mean {mean}{more}")
        for k, why in summary.get("skipped_fields", {}).items():
            lines.append(f"  {k}: not summarised ({why})")
    return "\n".join(lines)


# ============================================================== plots
def _plt():
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'jaxeval[plots]'") from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (used as matplotlib.ticker)

    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "font.size": 10,
            "legend.frameon": False,
        }
    )
    return plt


_COLORS = {
    "pulse": "#d62728",
    "pulse_ucb": "#ff7f0e",
    "ucbe": "#1f77b4",
    "naive": "#9467bd",
    "sysrs": "#2ca02c",
    "uniform": "#7f7f7f",
}
_NAMES = {
    "pulse": "PULSE",
    "pulse_ucb": "PULSE-UCB",
    "ucbe": "UCB-E",
    "naive": "naive pooling",
    "sysrs": "SySRs",
    "uniform": "uniform",
}


def _style(name: str, entry: Mapping[str, Any], i: int) -> dict:
    pol = entry.get("policy", name)
    color = _COLORS.get(pol) or f"C{i % 10}"
    label = _NAMES.get(name, name)
    return {"color": color, "label": label}


def _bottom_legend(fig: Any, ax: Any) -> None:
    """One legend for all panels, centred below them."""
    handles, labels = ax.get_legend_handles_labels()
    ncols = min(len(labels), 3)
    rows = -(-len(labels) // max(ncols, 1))
    fig.legend(handles, labels, loc="lower center", ncols=ncols, fontsize=8)
    h = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.2 * rows + 0.05) / h, 1, 1 - 0.3 / h))


def _reps(s: Mapping[str, Any]) -> str:
    """``"200 replicates"``, or ``"120 of 200 replicates"`` for partial results."""
    planned = s.get("replicates_planned")
    return (f"{s['replicates']} replicates" if planned is None
            else f"{s['replicates']} of {planned} replicates")


def _budget_axis(ax: Any, fr: np.ndarray) -> None:
    """Log x axis of budgets in % of K·n, with plain-number ticks inside the data range
    (the budgets themselves where no round number lies inside it)."""
    ax.set_xscale("log")
    ticks = [t for t in (0.5, 1, 2, 5, 10, 20, 50, 100) if fr.min() * 0.99 <= t <= fr.max() * 1.01]
    if not ticks:  # (e.g. budgets of 3% and 4%)
        ticks = sorted({float(f"{t:.3g}") for t in fr})
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlim(fr.min() / 1.15, fr.max() * 1.15)
    # (a checkpoint holds the state after the last whole batch within its budget)
    ax.set_xlabel("LLM call budget (% of K·n, log scale)")


def _calls_label(c95: float | None, budgets_pct: np.ndarray) -> str:
    """``(12.5%)``, or ``(>20%)`` when 95% is not reached within the budget grid (whose
    largest budget may be below 100% of K·n)."""
    return f"({100 * c95:.1f}%)" if c95 is not None else f"(>{budgets_pct[-1]:g}%)"


def _identification_plots(s: Mapping[str, Any], out: Path) -> list[Path]:
    plt = _plt()
    import matplotlib

    paths = []
    fr = np.asarray(s["budget_fractions"]) * 100
    title = f"{s['dataset']}, K={s['num_arms']}, {_reps(s)}"

    # 1. accuracy vs calls
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (name, e) in enumerate(s["policies"].items()):
        st = _style(name, e, i)
        acc = np.asarray(e["accuracy"])
        lo, hi = (np.asarray(v) for v in e["accuracy_ci95"])
        c95 = e["calls_to_95_fraction"]
        lab = st["label"] + "  " + _calls_label(c95, fr)
        ax.plot(fr, acc, "o-", ms=3.5, lw=1.8, color=st["color"], label=lab)
        ax.fill_between(fr, lo, hi, color=st["color"], alpha=0.12, lw=0)
    ax.axhline(TARGET_ACCURACY, color="k", ls="--", lw=1)
    _budget_axis(ax, fr)
    ax.text(fr[0], TARGET_ACCURACY + 0.01, "95%", va="bottom", fontsize=9)
    ax.set_ylabel("P(recommended model is the best)")
    lowest = float(np.nanmin([min(e["accuracy"]) for e in s["policies"].values()]))
    ax.set_ylim(min(0.5, lowest) - 0.03, 1.01)
    ax.set_title(f"Best-model identification — {title}", fontsize=10)
    ax.legend(title="policy (calls to 95%)", fontsize=9, title_fontsize=9, loc="lower right")
    fig.tight_layout()
    paths.append(out / "identification_accuracy.png")
    fig.savefig(paths[-1])
    plt.close(fig)

    # 2. coverage vs budget (family-wise, all K arms at that checkpoint)
    kinds = list(next(iter(s["policies"].values()))["coverage"])
    nominal = s["nominal_coverage"]
    band = binomial_band(nominal, s["replicates"])
    naive = [
        (name, e) for name, e in s["policies"].items() if e.get("naive_coverage_family") is not None
    ]
    lows = [band[0] - 0.03]
    for e in s["policies"].values():
        lows += [min(e["coverage"][k]["family_wise"]) - 0.02 for k in kinds]
    for _, e in naive:
        lows.append(min(e["naive_coverage_family"]) - 0.02)
    ymin = max(0.0, min(lows))
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.4), squeeze=False)
    # the naive baseline's curve uses the eb widths (summarize; a report's: its stopping
    # kind's, "naive_kind"), so it goes on that panel
    nk = s.get("naive_kind", "eb")
    j_naive = kinds.index(nk) if nk in kinds else (kinds.index("eb") if "eb" in kinds else 0)
    for j, (ax, kind) in enumerate(zip(axes[0], kinds)):
        ax.axhspan(*band, color="0.88", lw=0, label=f"binomial 95% band ({s['replicates']} reps)")
        ax.axhline(nominal, color="k", ls="--", lw=1, label=f"nominal {100 * nominal:.0f}%")
        for i, (name, e) in enumerate(s["policies"].items()):
            st = _style(name, e, i)
            cov = np.asarray(e["coverage"][kind]["family_wise"])
            ax.plot(fr, cov, "o-", ms=3.5, lw=1.6, color=st["color"], label=st["label"])
        if j == j_naive:
            for i, (name, e) in enumerate(naive):
                st = _style(name, e, i)
                ax.plot(
                    fr,
                    e["naive_coverage_family"],
                    "x:",
                    ms=4,
                    lw=1.2,
                    color=st["color"],
                    label=f"{st['label']}: same widths around the naive pooled estimate",
                )
        _budget_axis(ax, fr)
        ax.set_ylim(ymin, 1.01)
        ax.set_ylabel("P(all K intervals hold)")
        ax.set_title(f"{kind} confidence sequences", fontsize=10)
    _bottom_legend(fig, axes[0][j_naive])
    fig.suptitle(f"Family-wise coverage at each budget — {title}", fontsize=10)
    paths.append(out / "identification_coverage.png")
    fig.savefig(paths[-1])
    plt.close(fig)

    # 3. widths
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for i, (name, e) in enumerate(s["policies"].items()):
            st = _style(name, e, i)
            w = np.asarray(e["coverage"][kind]["mean_width"], dtype=float)
            # every arm fully evaluated: exact up to the rounding margin (~5e-5 at n = 541)
            w = np.where(w > 1e-3, w, np.nan)
            ax.plot(fr, w, "o-", ms=3.5, lw=1.6, color=st["color"], label=st["label"])
        _budget_axis(ax, fr)
        if not any((np.asarray(e["coverage"][kind]["mean_width"], dtype=float) > 1e-3).any()
                   for e in s["policies"].values()):
            # every arm fully evaluated at every budget (e.g. one budget of all K n):
            # widths are exact, nothing to draw on a log axis
            ax.text(0.5, 0.5, "every interval exact\n(all items evaluated)",
                    ha="center", va="center", transform=ax.transAxes, fontsize=9)
            ax.set_title(f"{kind} confidence sequences", fontsize=10)
            continue
        ax.set_yscale("log")
        fmt = matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}")
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(fmt)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_ylabel("mean interval width (accuracy)")
        ax.set_title(f"{kind} confidence sequences", fontsize=10)
    _bottom_legend(fig, axes[0][0])
    fig.suptitle(f"Interval widths (mean over arms and replicates) — {title}", fontsize=10)
    paths.append(out / "identification_widths.png")
    fig.savefig(paths[-1])
    plt.close(fig)

    paths.append(plot_calls_bars([s], out / "identification_calls_to_95.png"))
    return paths


def plot_calls_bars(summaries: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Bars of LLM calls to 95% accuracy (share of K·n), one group per dataset and K."""
    plt = _plt()
    from matplotlib.patches import Patch

    groups = [f"{s['dataset']}\nK={s['num_arms']}" for s in summaries]
    names: list[str] = []
    for s in summaries:
        names += [n for n in s["policies"] if n not in names]
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(2.2 + max(3.0, 0.45 * len(groups) * len(names)), 3.8))
    handles = []
    for i, name in enumerate(names):
        xs, ys, missing = [], [], []
        st = None
        for g, s in enumerate(summaries):
            e = s["policies"].get(name)
            if e is None:
                continue
            st = _style(name, e, i)
            x = g + (i - (len(names) - 1) / 2) * width
            v = e["calls_to_95_fraction"]
            if v is None:
                missing.append(x)
            else:
                xs.append(x)
                ys.append(100 * v)
        if st is None:
            continue
        # (the legend's own patch: a policy with no bar would get the default colour)
        handles.append(Patch(color=st["color"], label=st["label"]))
        bars = ax.bar(xs, ys, width * 0.92, color=st["color"])
        for b, y in zip(bars, ys):
            ax.text(
                b.get_x() + b.get_width() / 2, y, f"{y:.1f}", ha="center", va="bottom", fontsize=8
            )
        for x in missing:
            ax.text(x, 1, "not\nreached", ha="center", va="bottom", fontsize=7, color=st["color"])
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_xlim(-0.5, len(groups) - 0.5)  # every slot, "not reached" ones included
    ax.set_ylabel("LLM calls to 95% accuracy (% of K·n)")
    ax.set_title("Cost of finding the best model (lower is better)", fontsize=10)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="x", visible=False)
    ax.set_ylim(0, 105)
    fig.tight_layout()
    path = Path(path)
    if not path.suffix:  # (matplotlib would add ".png" to the file it writes)
        path = path.with_suffix(".png")
    fig.savefig(path, bbox_inches="tight")  # (the legend sits outside the axes)
    plt.close(fig)
    return path


_METHOD_NAMES = {
    "auto": "auto (recommended)",
    "random_mean": "random anchors + mean",
    "kmeans_ridge": "k-means anchors + ridge",
    "random_ridge": "random anchors + ridge",
    "anchor_points": "Anchor Points (cluster weights)",
    "sparseeval": "SparseEval (MLP)",
    "sparseeval_ridge": "SparseEval anchors + ridge",
    "gpirt": "gp-IRT",
}


def _anchor_plots(s: Mapping[str, Any], out: Path) -> list[Path]:
    plt = _plt()
    ks = np.asarray(s["k"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (name, e) in enumerate(s["methods"].items()):
        col = f"C{i % 10}"
        for ax, f in zip(axes, ("mae_pp", "tau")):
            # (summary.json writes NaN as null)
            m, sd = (np.asarray([np.nan if x is None else x for x in e[g]], float)
                     for g in (f, f + "_sd"))
            label = _METHOD_NAMES.get(name, name)
            ax.errorbar(ks, m, yerr=sd, fmt="o-", ms=4, lw=1.6, capsize=3, color=col, label=label)
    axes[0].set_ylabel("test MAE (percentage points)")
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylabel("Kendall τ-b (predicted vs true)")
    for ax in axes:
        ax.set_xlabel("anchor items k")
        ax.set_xticks(ks)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Accuracy from k anchor items — {s['dataset']}, mean ± sd over {s['seeds']} splits",
        fontsize=10,
    )
    fig.tight_layout()
    p = out / "anchors_mae_tau.png"
    fig.savefig(p)
    plt.close(fig)
    return [p]


#: The settings reports must share to be summarised together (:func:`reports_summary`).
_SAME_PROBLEM = ("data", "synthetic", "K", "n_items", "n_train", "budgets", "alpha",
                 "cs_kinds", "stop_kind", "mode", "corruption", "bias")


def reports_summary(reports: Any) -> dict:
    """The summary of :func:`summarize` for :class:`~jaxeval.IdentificationReport` s of one
    problem (one per policy), so that :func:`format_summary` and :func:`plot_reports`
    treat them as a study's policies.

    Args:
      reports: ``{label: report}``, or a list of reports labelled by their policies
        (which must then differ). Every report must come from the same problem: the
        same data (a synthetic truth's scales included), ``K``, training models,
        candidate sets, budgets, mode, ``alpha``, interval kinds and stopping kind, and
        corruption; replicates may differ (the summary's ``"replicates"`` is the
        fewest).

    Raises:
      ValueError: no report, repeated policies in a list, or reports of different
        problems (the differing setting named).
    """
    from jaxeval._simulate import IdentificationReport

    if isinstance(reports, IdentificationReport):
        reports = [reports]
    if isinstance(reports, Mapping):
        items = list(reports.items())
    else:
        try:
            items = [(getattr(r, "settings", {}).get("policy"), r) for r in reports]
        except TypeError:
            raise TypeError("reports: expected {label: IdentificationReport} or a list of "
                            f"them, got {type(reports).__name__}") from None
        names = [n for n, _ in items]
        if len(set(names)) != len(names):
            raise ValueError(f"reports: several reports of one policy ({names}); give them "
                             "labels: {label: report}")
    if not items:
        raise ValueError("reports: no report to summarize")
    for name, r in items:
        if not isinstance(r, IdentificationReport):
            raise TypeError(f"reports[{name!r}]: expected an IdentificationReport, got "
                            f"{type(r).__name__}")
    (ref_name, ref), rest = items[0], items[1:]
    for name, r in rest:
        # what makes the problem (the data and its scales, the candidates, the budgets, the
        # intervals); a policy's own settings and the seed may differ
        for what in _SAME_PROBLEM:
            a, b = ref.settings.get(what), r.settings.get(what)
            if what == "budgets":
                a, b = ref.budgets.tolist(), r.budgets.tolist()
            elif what == "cs_kinds":
                a, b = list(ref.cs_kinds), list(r.cs_kinds)
            if a != b:
                raise ValueError(f"reports[{name!r}]: {what} is {b!r}, but {a!r} in "
                                 f"reports[{ref_name!r}]; one summary holds one problem")
        if not np.array_equal(np.asarray(ref.instances), np.asarray(r.instances)):
            raise ValueError(f"reports[{name!r}]: its candidate sets (instances) are not "
                             f"those of reports[{ref_name!r}]; play the policies on the same "
                             "instances (the same seed and n_instances, or instances=)")
    policies = {}
    for name, r in items:
        R = int(np.shape(r.correct)[0])
        lo, hi = wilson_interval(np.asarray(r.correct).sum(axis=0), R)
        c95 = r.calls_to(TARGET_ACCURACY, fraction=True)
        naive = np.asarray(r.naive_coverage_family, np.float64)
        policies[str(name)] = {
            "policy": r.settings.get("policy"),
            "replicates": R,
            "budgets": r.budgets,
            "calls_mean": r.calls_used,
            "accuracy": r.accuracy,
            "accuracy_ci95": [lo, hi],
            "calls_to_95_fraction": None if math.isinf(c95) else c95,
            "coverage": {
                kind: {"family_wise": r.coverage_family_at[q],
                       "family_wise_all_checkpoints": float(r.coverage_family[q]),
                       "mean_width": r.width[q]}
                for q, kind in enumerate(r.cs_kinds)},
            "naive_coverage_family": None if np.isnan(naive).all() else naive,
        }
    alpha = float(ref.settings["alpha"])
    return {
        "kind": "identification",
        "name": "simulate_identification",
        "dataset": str(ref.settings.get("data")),
        "num_arms": int(ref.settings["K"]),
        "alpha": alpha,
        "nominal_coverage": 1.0 - alpha,
        "replicates": min(e["replicates"] for e in policies.values()),
        "budget_fractions": [float(f) for f in ref.budget_fractions],
        # (a report's naive curve uses its stopping kind's widths)
        "naive_kind": str(ref.settings.get("stop_kind", "eb")),
        "problem": {"items": int(ref.settings["n_items"]), "median_top2_gap": float(
            np.median(np.concatenate([r.top_two_gap for _, r in items])))},
        "policies": policies,
    }


def plot_reports(reports: Any, out: str | Path) -> list[Path]:
    """Draw the figures of a study (:func:`plot_study`) for
    :class:`~jaxeval.IdentificationReport` s of one problem: accuracy against LLM calls,
    family-wise coverage and interval widths per budget, and calls to 95% accuracy.

    Args:
      reports: ``{label: report}`` or a list of reports (labelled by their policies);
        see :func:`reports_summary`.
      out: a folder for the PNG files (created if absent).

    Returns:
      The paths written.

    Example:
      >>> import tempfile, jaxeval
      >>> truth = jaxeval.SyntheticSpec(n_items=40)
      >>> reps = [jaxeval.simulate_identification(truth, p, K=3, n_replicates=16,
      ...                                         budget_fractions=(0.1, 0.5, 1.0))
      ...         for p in ("ucbe", "uniform")]
      >>> paths = jaxeval.plot_reports(reps, tempfile.mkdtemp())
      >>> [p.name for p in paths][:2]
      ['identification_accuracy.png', 'identification_coverage.png']
    """
    summary = reports_summary(reports)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return _identification_plots(summary, out)


def plot_study(summary: Mapping[str, Any], out: str | Path) -> list[Path]:
    """Draw a study's figures (PNG) into folder ``out``; returns their paths.

    Identification: accuracy vs LLM calls with the 95% line, family-wise coverage
    vs budget with the nominal level and a binomial band, interval widths, and
    calls-to-95% bars. Anchors: MAE and τ-b vs k.
    """
    if summary["kind"] not in ("identification", "anchors"):
        return []  # (a replicates study: its fields are the user's own; nothing to draw)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if summary["kind"] == "identification":
        return _identification_plots(summary, out)
    return _anchor_plots(summary, out)
