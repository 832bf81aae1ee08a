"""``simulate_identification``: the numpy-facing wrapper of the identification loop.

It canonicalises and checks the inputs (refusing bad ones with messages that name the
argument, the expected and the actual value), splits a real score matrix into training
models (for the offline factorization) and a candidate pool, draws the instances, runs
the jitted kernel of :mod:`jaxeval._identification` chunk by chunk through
:func:`jaxeval._runner.run_replicates` (replicate ``i`` gets ``fold_in(base, i)``), and
summarises the per-replicate outputs into an :class:`IdentificationReport` of numpy
arrays.

Same seed, same data, same ``K`` and split settings => the same instances and the same
item orders for every policy, so policies are compared on identical work.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import json
import math
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from numpy.typing import ArrayLike

from jaxeval import _identification as idn
from jaxeval import _policies
from jaxeval._data import (
    NPZ_READ_ERRORS,
    ScoreMatrix,
    _is_frame,
    array_digest,
    as_score_matrix,
    atomic_savez,
    names_as_str,
    npz_name,
    saved_npz,
)
from jaxeval._factorization import ItemFactors
from jaxeval._report import calls_to_target, recommended_correct, true_best
from jaxeval._runner import DEFAULT_LANES, as_key, check_int, run_replicates

__all__ = [
    "DEFAULT_BUDGET_FRACTIONS",
    "GapBin",
    "IdentificationReport",
    "SyntheticSpec",
    "simulate_identification",
]

#: The budget grid of METHODS.md 6.1, as fractions of ``K * n`` LLM calls.
DEFAULT_BUDGET_FRACTIONS = (
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20, 0.30, 0.50, 0.75, 1.0,
)


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """Synthetic low-rank logistic truth, drawn afresh for every replicate.

    ``V ~ N(0, 1/rank)``, ``c ~ N(difficulty_mean, difficulty_scale^2)``,
    ``u_i ~ N(0, model_scale^2)``, ``S_ij ~ Bernoulli(sigmoid(u_i . v_j + c_j))``; rows are
    regenerated on demand, so memory does not grow with ``n_items``. PULSE's predictions
    use the true item factors (corrupt them with ``corruption=`` to test validity).

    Example:
      >>> from jaxeval import SyntheticSpec
      >>> SyntheticSpec(n_items=500).rank
      4
    """

    n_items: int
    rank: int = 4
    model_scale: float = 1.0
    difficulty_scale: float = 1.5
    difficulty_mean: float = 0.0

    def __post_init__(self):
        # stored as the checked Python numbers (a NumPy int or 0-d array given stays
        # hashable, static and JSON-writable)
        set_ = lambda name, v: object.__setattr__(self, name, v)  # noqa: E731 (frozen)
        set_("n_items", check_int("n_items", self.n_items, 2))
        set_("rank", check_int("rank", self.rank, 1, 256))
        # the study JSON's ranges
        set_("model_scale", _check_real("model_scale", self.model_scale, 0.0, 100.0))
        set_("difficulty_scale", _check_real("difficulty_scale", self.difficulty_scale,
                                             0.0, 100.0))
        set_("difficulty_mean", _check_real("difficulty_mean", self.difficulty_mean,
                                            -100.0, 100.0))


@dataclasses.dataclass(frozen=True, eq=False)
class GapBin:
    """The replicates of an :class:`IdentificationReport` whose instances have a true
    top-two gap in ``[lo, hi)`` (``[lo, hi]`` for the last bin), from
    :meth:`IdentificationReport.by_gap`.

    The gap of a replicate is the true accuracy of its best candidate minus that of the
    second best (0 for a tie), in accuracy units; ``gap * n_items`` is the same gap in
    items. Small gaps are the hard instances: the calls they need decide the
    calls-to-95% point of the whole run.

    Attributes:
      lo, hi: the bin's gap edges.
      n_replicates: replicates in the bin (0 for an empty bin, whose curves are NaN).
      n_instances: distinct instances among them (replicates for synthetic truth).
      median_gap: median gap of the bin's replicates.
      budgets: int64 ``[C]`` checkpoint budgets in LLM calls (the report's).
      accuracy: ``[C]`` share of the bin's replicates that recommend a true best arm.
      accuracy_se: ``[C]`` binomial standard error of ``accuracy``.
      calls_used: ``[C]`` mean LLM calls the bin's replicates spent at each checkpoint.
      total_calls: ``K * n`` of the report.
    """

    lo: float
    hi: float
    n_replicates: int
    n_instances: int
    median_gap: float
    budgets: np.ndarray
    accuracy: np.ndarray
    accuracy_se: np.ndarray
    calls_used: np.ndarray
    total_calls: int

    def calls_to(self, accuracy: float = 0.95, *, fraction: bool = False) -> float:
        """LLM calls for the bin's replicates to reach ``accuracy`` (as
        :meth:`IdentificationReport.calls_to`; ``inf`` if never reached or the bin is
        empty)."""
        accuracy = _target_accuracy(accuracy)
        if self.n_replicates == 0:
            return math.inf
        out = calls_to_target(self.calls_used, self.accuracy, accuracy)
        out = math.inf if out is None else out
        return out / self.total_calls if fraction else out


MIN_INSTANCES_FOR_INTERVAL = 20
"""Fewest instances for which :meth:`IdentificationReport.calls_to_interval` does not
warn: its cluster bootstrap covered 89% (nominal 90%) at 20 instances, 78% at 10 (200
simulated studies each; ``tests/test_simulate.py`` checks 20)."""


def _share(fraction: float, unit: str = "") -> str:
    """A share of K*n as text, ``"not reached"`` for ``inf`` (as the report's repr)."""
    return "not reached" if math.isinf(fraction) else f"{fraction:.2%}{unit}"


@dataclasses.dataclass(frozen=True, eq=False)
class IdentificationReport:
    """Results of :func:`simulate_identification` (numpy arrays; ``C`` checkpoints,
    ``Q`` interval kinds, ``R`` replicates).

    Attributes:
      budgets: int64 ``[C]`` checkpoint budgets in LLM calls.
      budget_fractions: ``[C]`` budgets as fractions of ``K * n``.
      accuracy: ``[C]`` share of replicates whose recommended arm is a true best arm.
      accuracy_se: ``[C]`` binomial standard error of ``accuracy``.
      calls_used: ``[C]`` mean LLM calls actually spent at each checkpoint.
      cs_kinds: the ``Q`` interval kinds, in order.
      coverage_family: ``[Q]`` share of replicates where all K intervals hold at every
        checkpoint at once (the anytime, simultaneous claim).
      coverage_family_at: ``[Q, C]`` family-wise coverage at each checkpoint.
      coverage_arm: ``[Q]`` share of (replicate, arm) pairs whose interval holds at every
        checkpoint.
      width: ``[Q, C]`` mean interval width.
      naive_coverage_family: ``[C]`` family-wise coverage of intervals of the same widths
        centred on the naive pooled estimate (NaN without predictions): the naive
        baseline's claim, expected to fail under biased predictions.
      status_counts: int64 ``[C, 5]`` replicates per status code at each checkpoint.
      correct: bool ``[R, C]`` per replicate.
      recommended: int32 ``[R, C]`` recommended arm.
      theta: float32 ``[R, K]`` true accuracies.
      instance: int32 ``[R]`` instance index (``-1`` for synthetic truth).
      instances: int64 ``[I, K]`` the candidate rows of each instance (models of the pool).
      pool_models: names of the pool's models (empty for synthetic truth).
      settings: every setting needed to reproduce the run (seed, versions, chunking).
      calls: int64 ``[R, C]`` LLM calls each replicate spent at each checkpoint
        (``None`` in reports built without it; :attr:`calls_used` is its mean).

    Example:
      >>> import jaxeval
      >>> rep = jaxeval.simulate_identification(
      ...     jaxeval.SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=8,
      ...     budget_fractions=(0.1, 0.5, 1.0))
      >>> rep.budgets.tolist(), rep.correct.shape, rep.width.shape  # C = 3, R = 8, Q = 2
      ([12, 60, 120], (8, 3), (2, 3))
      >>> rep.calls_to(0.95, fraction=True) <= 1.0  # share of K n for 95% accuracy
      True
    """

    budgets: np.ndarray
    budget_fractions: np.ndarray
    accuracy: np.ndarray
    accuracy_se: np.ndarray
    calls_used: np.ndarray
    cs_kinds: tuple[str, ...]
    coverage_family: np.ndarray
    coverage_family_at: np.ndarray
    coverage_arm: np.ndarray
    width: np.ndarray
    naive_coverage_family: np.ndarray
    status_counts: np.ndarray
    correct: np.ndarray
    recommended: np.ndarray
    theta: np.ndarray
    instance: np.ndarray
    instances: np.ndarray
    pool_models: np.ndarray
    settings: dict
    calls: np.ndarray | None = None

    @property
    def total_calls(self) -> int:
        """``K * n``: the calls that evaluate every candidate on every item."""
        return int(self.settings["K"]) * int(self.settings["n_items"])

    def calls_to(self, accuracy: float = 0.95, *, fraction: bool = False) -> float:
        """LLM calls needed to reach ``accuracy``, interpolated linearly (METHODS.md 6.1).

        The first checkpoint whose accuracy reaches the target is found; the answer is
        interpolated between it and the previous checkpoint, in the calls actually
        spent there (:attr:`calls_used`: the budgets themselves at ``batch_size`` 1 in
        fixed-budget mode; fewer where a checkpoint keeps only whole batches, or where
        runs stop early). ``inf`` if never reached. A curve that dips below the target
        again later still answers with its first crossing.

        Args:
          accuracy: target identification accuracy in (0, 1].
          fraction: return a fraction of ``K * n`` instead of a number of calls.

        Example:
          >>> import jaxeval
          >>> rep = jaxeval.simulate_identification(
          ...     jaxeval.SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=64,
          ...     budget_fractions=(0.1, 0.25, 0.5, 1.0), seed=0)
          >>> rep.budgets.tolist(), rep.accuracy.round(3).tolist()
          ([12, 30, 60, 120], [0.531, 0.578, 0.719, 1.0])
          >>> round(rep.calls_to(0.9), 1), round(rep.calls_to(0.9, fraction=True), 3)
          (98.7, 0.822)
        """
        accuracy = _target_accuracy(accuracy)
        out = calls_to_target(self.calls_used, self.accuracy, accuracy)
        out = math.inf if out is None else out
        return out / self.total_calls if fraction else out

    @property
    def top_two_gap(self) -> np.ndarray:
        """``[R]`` true accuracy of each replicate's best candidate minus the second
        best's (0 for a tie)."""
        top = np.sort(np.asarray(self.theta, np.float64), axis=1)
        return top[:, -1] - top[:, -2]

    def _clusters(self):
        """``(codes [R], m, real)``: each replicate's cluster of the bootstrap (its
        instance on real data, itself for synthetic truth) and how many there are."""
        inst = np.asarray(self.instance)
        real = inst.size > 0 and bool((inst >= 0).all())
        codes = np.unique(inst, return_inverse=True)[1] if real else np.arange(inst.size)
        return codes, int(codes.max()) + 1 if codes.size else 0, real

    def _boot_calls_to(self, accuracy, n_boot, seed, other=None):
        """Bootstrap draws of :meth:`calls_to` (``[n_boot]``, and ``other``'s on the same
        draws): instances resampled with replacement, each with all its replicates
        (replicates themselves for synthetic truth). Paired when ``other`` is given."""
        accuracy = _target_accuracy(accuracy)
        n_boot = check_int("n_boot", n_boot, 100, 10**6)
        seed = check_int("seed", seed, 0)
        reps = [self] if other is None else [self, other]
        if other is not None:
            if not isinstance(other, IdentificationReport):
                raise TypeError(
                    f"other: expected an IdentificationReport, got {type(other).__name__}")
            if not (np.array_equal(self.instance, other.instance)
                    and np.array_equal(self.instances, other.instances)
                    and np.array_equal(self.theta, other.theta)):
                raise ValueError(
                    "other: not played on the same instances (same data, seed, K, "
                    "instances and replicates are needed for a paired comparison)")
        if any(r.calls is None for r in reps):
            raise ValueError("the report has no per-replicate calls (an older report)")
        codes, m, _ = self._clusters()
        if m < 2:
            raise ValueError(
                f"a bootstrap over instances needs at least 2 of them, the report has {m}")
        rng = np.random.default_rng(seed)
        w = rng.multinomial(m, np.full(m, 1.0 / m), size=int(n_boot))[:, codes]  # [B, R]
        w = w.astype(np.float64) / w.sum(1, keepdims=True)
        out = []
        for r in reps:
            acc = w @ np.asarray(r.correct, np.float64)
            used = w @ np.asarray(r.calls, np.float64)
            draws = [calls_to_target(u, a, accuracy) for u, a in zip(used, acc)]
            out.append(np.array([math.inf if d is None else d for d in draws]))
        return out

    def calls_to_interval(self, accuracy: float = 0.95, *, level: float = 0.9,
                          n_boot: int = 1000, seed: int = 0,
                          fraction: bool = False) -> tuple[float, float]:
        """A bootstrap interval for :meth:`calls_to`: how much the answer depends on
        the draw of instances (candidate sets) and item orders.

        Instances are resampled with replacement, each with all its replicates (a
        cluster bootstrap: replicates of one instance share its gap, so they are not
        independent); with synthetic truth every replicate is its own instance. The
        percentile interval of the resampled ``calls_to``; an end is ``inf`` where that
        share of the draws never reaches ``accuracy``. With few instances (the default
        ``n_instances=10``) the interval is wide and, worse, too short: over 200
        simulated studies of 10 instances its nominal 90% covered the true
        ``calls_to`` 78% of the time (89% at 20 instances), so below 20 instances it
        warns. Compare policies with
        :meth:`calls_to_ratio` on the same instances instead (its paired interval
        covered 95% at 10 and at 20).

        Args:
          accuracy: target identification accuracy in (0, 1].
          level: coverage of the interval in (0, 1).
          n_boot: bootstrap draws (at least 100).
          seed: seed of the resampling.
          fraction: a fraction of ``K * n`` instead of calls.

        Returns:
          ``(low, high)``.

        Example:
          >>> import jaxeval
          >>> rep = jaxeval.simulate_identification(
          ...     jaxeval.SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=64,
          ...     budget_fractions=(0.1, 0.25, 0.5, 1.0), seed=0)
          >>> lo, hi = rep.calls_to_interval(0.9)
          >>> bool(lo <= rep.calls_to(0.9) <= hi), bool(hi <= 120)
          (True, True)
        """
        level = _check_level_open(level)
        if not isinstance(fraction, (bool, np.bool_)):
            raise TypeError(f"fraction: expected True or False, got {fraction!r}")
        (d,) = self._boot_calls_to(accuracy, n_boot, seed)
        _, m, real = self._clusters()
        if real and m < MIN_INSTANCES_FOR_INTERVAL:
            warnings.warn(
                f"calls_to_interval: a bootstrap over {m} instances can undercover (in "
                f"simulated studies a nominal 90% covered 78% at 10 instances); use "
                f"n_instances >= {MIN_INSTANCES_FOR_INTERVAL}, or calls_to_ratio on the "
                "same instances to compare policies", UserWarning, stacklevel=2)
        q = (1.0 - level) / 2
        lo = float(np.quantile(d, q, method="lower"))
        hi = float(np.quantile(d, 1.0 - q, method="higher"))
        if fraction:
            lo, hi = lo / self.total_calls, hi / self.total_calls
        return lo, hi

    def calls_to_ratio(self, other: IdentificationReport, accuracy: float = 0.95, *,
                       level: float = 0.9, n_boot: int = 1000,
                       seed: int = 0) -> tuple[float, float, float]:
        """This report's :meth:`calls_to` over ``other``'s, with a paired bootstrap
        interval: both played the same instances (same data, seed and settings of the
        draw), which are resampled together, each with all its replicates.

        Returns:
          ``(ratio, low, high)``. A draw where neither reaches ``accuracy`` has no
          ratio and is left out; one where only ``other`` reaches it counts as
          ``inf``, one where only this report does as 0. NaN ends mean that more than
          ``(1 - level) / 2`` of the draws had no ratio.

        Example:
          >>> import jaxeval
          >>> kw = dict(K=3, n_replicates=64, budget_fractions=(0.1, 0.25, 0.5, 1.0),
          ...           seed=0)
          >>> spec = jaxeval.SyntheticSpec(n_items=40)
          >>> a = jaxeval.simulate_identification(spec, "ucbe", **kw)
          >>> b = jaxeval.simulate_identification(spec, "uniform", **kw)
          >>> r, lo, hi = a.calls_to_ratio(b, 0.9)
          >>> bool(lo <= r <= hi)
          True
        """
        level = _check_level_open(level)
        da, db = self._boot_calls_to(accuracy, n_boot, seed, other)
        point = _ratio(self.calls_to(accuracy), other.calls_to(accuracy))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.array([_ratio(x, y) for x, y in zip(da, db)])
        q = (1.0 - level) / 2
        if np.isnan(r).mean() > q:
            return point, math.nan, math.nan
        r = np.where(np.isnan(r), -np.inf, r)  # dropped below, whatever their share
        r = np.sort(r[np.isfinite(r) | (r == np.inf)])
        lo = float(np.quantile(r, q, method="lower"))
        hi = float(np.quantile(r, 1.0 - q, method="higher"))
        return point, lo, hi

    def by_gap(self, bins: int = 3, *, edges: ArrayLike | None = None) -> list[GapBin]:
        """Accuracy versus calls per bin of the true top-two gap (:class:`GapBin`).

        Args:
          bins: number of bins of (nearly) equal numbers of *instances*, the edges at
            the quantiles of the instances' gaps (of the replicates' gaps for synthetic
            truth, where every replicate is its own instance). Ignored with ``edges``.
          edges: increasing finite gap edges ``[B + 1]`` instead, e.g. the edges of
            another policy's report, so that several policies run on the same instances
            are binned alike. Replicates outside ``[edges[0], edges[-1]]`` are in no bin.
            Two equal edges ``[g, g]`` are one bin of the gap ``g`` (the bin this method
            returns when every gap is equal).

        Returns:
          ``B`` bins, smallest gaps first. Quantile edges that coincide (many equal
          gaps) are merged, so there may be fewer than ``bins``.

        Example:
          >>> import jaxeval
          >>> rep = jaxeval.simulate_identification(
          ...     jaxeval.SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=64,
          ...     budget_fractions=(0.1, 0.25, 0.5, 1.0), seed=0)
          >>> hard, easy = rep.by_gap(2)
          >>> hard.n_replicates + easy.n_replicates, hard.hi == easy.lo
          (64, True)
          >>> bool(hard.median_gap < easy.median_gap), float(easy.accuracy[-1])
          (True, 1.0)
        """
        gap = self.top_two_gap
        inst = np.asarray(self.instance)
        real = inst.size > 0 and bool((inst >= 0).all())
        if edges is None:
            bins = check_int("bins", bins, 1)
            if gap.size == 0:
                raise ValueError("by_gap: the report has no replicates")
            if real:
                per_inst = np.unique(inst, return_index=True)[1]
                base = gap[per_inst]
            else:
                base = gap
            e = np.unique(np.quantile(base, np.linspace(0.0, 1.0, int(bins) + 1)))
            if e.size == 1:  # every gap equal: one bin holding them all
                e = np.array([e[0], e[0]])
        else:
            e = np.asarray(edges, np.float64)
            one = e.shape == (2,) and e[0] == e[1]  # (the single bin of equal gaps)
            if (e.ndim != 1 or e.size < 2 or not np.isfinite(e).all()
                    or ((np.diff(e) <= 0).any() and not one)):
                raise ValueError(
                    "edges: expected at least two increasing finite gap values, got "
                    f"{np.asarray(edges).tolist()!r}")
        calls = (np.asarray(self.calls, np.float64) if self.calls is not None
                 else np.broadcast_to(self.calls_used, self.correct.shape))
        out = []
        for b in range(e.size - 1):
            lo, hi = float(e[b]), float(e[b + 1])
            last = b == e.size - 2
            sel = (gap >= lo) & ((gap <= hi) if last else (gap < hi))
            r = int(sel.sum())
            if r:
                acc = np.asarray(self.correct, np.float64)[sel].mean(axis=0)
                used = calls[sel].mean(axis=0)
                n_inst = int(np.unique(inst[sel]).size) if real else r
                med = float(np.median(gap[sel]))
            else:
                acc = np.full(self.budgets.shape, np.nan)
                used = np.full(self.budgets.shape, np.nan)
                n_inst, med = 0, math.nan
            out.append(GapBin(lo=lo, hi=hi, n_replicates=r, n_instances=n_inst,
                              median_gap=med, budgets=self.budgets, accuracy=acc,
                              accuracy_se=np.sqrt(acc * (1 - acc) / max(r, 1)),
                              calls_used=used, total_calls=self.total_calls))
        return out

    def summary(self) -> str:
        """A plain-text table: accuracy, calls used and coverage per checkpoint."""
        s = self.settings
        lines = [
            f"identification: policy={s['policy']} data={s['data']} K={s['K']} "
            f"n={s['n_items']} b={s['batch_size']} alpha={s['alpha']} R={s['n_replicates']} "
            f"seed={s['seed']}",
        ]
        if s.get("duplicates_removed"):
            lines.append(f"data: {s['duplicates_removed']} duplicate model rows removed before "
                         "the split into training models and candidates")
        lines += [
            f"calls to 95%: {_share(self.calls_to(0.95, fraction=True), ' of K*n')}; "
            f"to 90%: {_share(self.calls_to(0.90, fraction=True))}",
            "family-wise coverage (all arms, all checkpoints): "
            + ", ".join(f"{k}={c:.4f}" for k, c in zip(self.cs_kinds, self.coverage_family)),
            f"{'budget':>9} {'frac':>7} {'accuracy':>9} {'calls':>9} "
            + " ".join(f"{'w_' + k:>10}" for k in self.cs_kinds),
        ]
        for c, b in enumerate(self.budgets):
            lines.append(
                f"{b:>9d} {self.budget_fractions[c]:>7.3f} {self.accuracy[c]:>9.4f} "
                f"{self.calls_used[c]:>9.1f} "
                + " ".join(f"{self.width[q, c]:>10.4f}" for q in range(len(self.cs_kinds)))
            )
        return "\n".join(lines)

    def _arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                out[f.name] = v
        out["cs_kinds"] = np.array(self.cs_kinds)
        return out

    def __repr__(self) -> str:
        s = self.settings
        try:
            to95 = self.calls_to(0.95, fraction=True)
            to95 = "not reached" if math.isinf(to95) else f"{to95:.1%} of K*n"
        except (KeyError, TypeError, ValueError, ZeroDivisionError):  # hand-made settings
            to95 = "?"
        return (f"IdentificationReport(policy={s.get('policy')!r}, data={s.get('data')!r}, "
                f"K={s.get('K')}, n={s.get('n_items')}, R={s.get('n_replicates')}, "
                f"{np.size(self.budgets)} budgets; calls to 95%: {to95})")

    def to_npz(self, path: str | os.PathLike | Any) -> Path | None:
        """Save every array and the settings (as JSON text under ``settings``), atomically
        (an interrupted write leaves any earlier file as it was); :meth:`from_npz` reads
        it back. ``.npz`` is appended to a path without it, as numpy does; returns the
        path written (``None`` for a writable binary file object, written as is)."""
        arrays = self._arrays()
        arrays["settings"] = np.array(json.dumps(self.settings, default=str))
        if hasattr(path, "write"):
            np.savez_compressed(path, **arrays)
            return None
        path = npz_name(path)
        atomic_savez(path, arrays, compressed=True)
        return path

    @classmethod
    def from_npz(cls, path: str | os.PathLike) -> IdentificationReport:
        """A report saved by :meth:`to_npz` (its settings as JSON gives them back:
        tuples as lists, values JSON cannot hold as text).

        Example:
          >>> import pathlib, tempfile, jaxeval
          >>> rep = jaxeval.simulate_identification(jaxeval.SyntheticSpec(n_items=40), "ucbe",
          ...                                       K=3, n_replicates=8, progress=False)
          >>> with tempfile.TemporaryDirectory() as d:
          ...     back = jaxeval.IdentificationReport.from_npz(rep.to_npz(pathlib.Path(d) / "r"))
          >>> back.calls_to(0.9) == rep.calls_to(0.9)
          True
        """
        path = saved_npz(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such report file")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        try:
            with np.load(path, allow_pickle=False) as z:
                got = {k: z[k] for k in z.files}
        except NPZ_READ_ERRORS as e:
            raise ValueError(f"{path}: not an identification report saved by to_npz ({e})") \
                from None
        missing = sorted(set(fields) - set(got) - {"calls"})
        if missing:
            raise ValueError(f"{path}: not an identification report saved by to_npz (missing "
                             f"{missing[:5]})")
        try:
            settings = json.loads(str(got.pop("settings")))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: its settings are not valid JSON ({e})") from None
        cs_kinds = tuple(str(k) for k in got.pop("cs_kinds").tolist())
        unknown = sorted(set(got) - set(fields))
        if unknown:
            raise ValueError(f"{path}: unexpected arrays {unknown[:5]} (a newer version's "
                             "report?)")
        return cls(settings=settings, cs_kinds=cs_kinds, **got)

    def to_json(self, path: str | None = None) -> str:
        """The summary figures (not the per-replicate arrays) as JSON; written if ``path``."""
        doc = {
            "settings": self.settings,
            "budgets": self.budgets.tolist(),
            "budget_fractions": self.budget_fractions.tolist(),
            "accuracy": self.accuracy.tolist(),
            "accuracy_se": self.accuracy_se.tolist(),
            "calls_used": self.calls_used.tolist(),
            "calls_to_95": self.calls_to(0.95),
            "calls_to_90": self.calls_to(0.90),
            "cs_kinds": list(self.cs_kinds),
            "coverage_family": self.coverage_family.tolist(),
            "coverage_family_at": self.coverage_family_at.tolist(),
            "coverage_arm": self.coverage_arm.tolist(),
            "width": self.width.tolist(),
            "naive_coverage_family": self.naive_coverage_family.tolist(),
            "status_counts": self.status_counts.tolist(),
        }
        text = json.dumps(_finite_json(doc), default=lambda x: None if x is None else str(x),
                          indent=1, allow_nan=False)
        if path is not None:
            with open(path, "w") as fh:
                fh.write(text)
        return text


def _finite_json(x):
    """``x`` with every non-finite float written as the string ``"nan"``, ``"inf"`` or
    ``"-inf"`` (strict JSON has no NaN or Infinity)."""
    if isinstance(x, dict):
        return {k: _finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_json(v) for v in x]
    if isinstance(x, (float, np.floating)) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


# ----------------------------------------------------------------- kernel cache
@functools.lru_cache(maxsize=64)
def _replicate_fn(config: idn.Config, treedef, balanced: bool = False):
    """One function object per (config, operand structure, assignment): the runner's
    compile cache hits for new seeds, α or exploration settings (they are operands).
    ``balanced``: the runner passes the replicate index, and replicate ``i`` plays
    instance ``i mod I``."""
    if balanced:

        def fn_i(key, index, *leaves):
            data, params = jax.tree.unflatten(treedef, leaves)
            return idn.run_identification(key, data, params, config, instance=index)

        return fn_i

    def fn(key, *leaves):
        data, params = jax.tree.unflatten(treedef, leaves)
        return idn.run_identification(key, data, params, config)

    return fn


def draw_instances(n_pool: int, K: int, n_instances: int, seed: int) -> np.ndarray:
    """The candidate sets of a real-data simulation: ``n_instances`` K-subsets of a
    pool of ``n_pool`` models, seeded by ``(seed, K)``. Shared with
    :class:`jaxeval.IdentificationStudy`, so both play the same instances."""
    n_pool = check_int("n_pool", n_pool, 1)
    K = check_int("K", K, 1, n_pool, why=f"a pool of {n_pool} models")
    n_instances = check_int("n_instances", n_instances, 1)
    seed = check_int("seed", seed, 0)
    rng = np.random.default_rng([seed, K])
    return np.stack([rng.choice(n_pool, K, replace=False) for _ in range(n_instances)])


class PoolError(ValueError):
    """A train / pool split that cannot host the simulation (``.arg`` names the argument)."""

    def __init__(self, arg: str, message: str) -> None:
        super().__init__(message)
        self.arg = arg


def split_pool(sm: ScoreMatrix, n_train: int | None, K: int, seed: int):
    """``(train, pool, n_train)`` of a deduplicated real score matrix.

    ``n_train`` training models (``None``: half of the models; ``0``: none, and
    ``train`` is ``None``) are split off with ``seed``; the rest is the candidate
    pool, which must hold ``K`` models and be fully observed (the simulation plays
    every candidate's true scores). Shared with :class:`jaxeval.IdentificationStudy`,
    so a study and :func:`simulate_identification` split alike. Raises
    :class:`PoolError` (a ``ValueError``) naming the argument at fault.
    """
    m = sm.n_models
    if m < 2:
        raise PoolError(
            "data",
            f"data: {m} distinct model(s) after removing duplicate rows; identification "
            "needs at least 2 models that differ on some item",
        )
    default = n_train is None
    if default:
        n_train = m // 2
    try:
        n_train = check_int("n_train", n_train, 0, m - 2)
    except ValueError as e:
        why = (f"n_train: the default (half of the models, {n_train}) leaves fewer than 2 "
               f"candidates of the {m} distinct models (after removing duplicate rows); "
               "give n_train explicitly") if default else (
            f"{e} ({m} distinct models after removing duplicate rows, and at least 2 "
            "stay candidates)")
        raise PoolError("n_train", why) from None
    if n_train > 0:
        train, pool = sm.split([n_train], seed=seed)
    else:
        train, pool = None, sm
    if K > pool.n_models:
        raise PoolError(
            "K",
            f"K must be at most the candidate pool size: K={K}, but the pool has "
            f"{pool.n_models} models ({m} after removing duplicates, {n_train} for training)"
            + f"; choose K <= {pool.n_models}"
            + (f", or fewer training models (n_train; at most {m - K} leave K candidates)"
               if n_train and m >= K else ""),
        )
    if not pool.mask.all():
        bad = int((~pool.mask).any(axis=1).sum())
        raise PoolError(
            "data",
            f"data: the simulation needs the full truth of every candidate, but {bad} pool "
            f"models have missing cells ({int((~pool.mask).sum())} cells); drop them or "
            "fill them before simulating",
        )
    return train, pool, n_train


#: ``simulate_identification``'s default ``n_instances`` (a setting it refuses where it
#: would change nothing only when it differs from this).
_N_INSTANCES_DEFAULT = 10

#: Defaults of the settings that only some configurations read (see
#: :func:`unused_settings`).
_SETTING_DEFAULTS = {"a": 1.0, "scale": 1.0, "eps": 0.0, "bias": 0.3, "lam0": 1.0,
                     "shrink": 10.0, "rank": 8, "rho": None, "num_newton": 1, "refit": True,
                     "factors": None, "fit_steps": 500}


def unused_settings(policy: str, predictions: bool, mode: str, corruption: str,
                    synthetic: bool, skip_separated: bool = False,
                    **given: Any) -> list[str]:
    """The names among ``given`` that differ from their defaults yet change nothing in
    this configuration (``a`` for a policy whose index has no ``sqrt(a / N)`` term,
    ``eps`` outside the fixed-confidence mode, the prediction settings for a policy
    that makes no predictions, ...), as ``name=value`` strings.

    Example:
      >>> unused_settings("uniform", False, "budget", "none", False, a=5.0, eps=0.0)
      ['a=5.0']
    """
    def changed(name: str) -> bool:
        v, d = given.get(name, _SETTING_DEFAULTS[name]), _SETTING_DEFAULTS[name]
        if d is None or v is None:
            return v is not d
        return isinstance(v, str) or bool(v != d)

    unused = []
    if policy not in ("ucbe", "naive", "pulse_ucb"):
        unused.append("a")
    if policy != "pulse":
        unused.append("scale")
    if mode != "confidence" and not skip_separated:  # eps: the stop's and the skip's test
        unused.append("eps")
    if corruption != "biased":
        unused.append("bias")
    if not predictions:
        unused += ["lam0", "shrink", "rho", "num_newton", "refit", "factors"]
    elif not given.get("refit", True) or corruption in ("random", "adversarial"):
        # the online refit's settings: no refit, or predictions that ignore the refitted
        # factor (random and adversarial corruptions replace them whole)
        unused += ["rho", "num_newton"]
    elif given.get("num_newton", 1) == 0:
        unused += ["rho"]  # a refit of zero Newton steps leaves the factor as it is
    if not predictions or synthetic or given.get("factors") is not None:
        # the offline fit (its rank and steps) runs only for real data with predictions
        # and no given factors; a learned lam0 prior is fitted with the steps too (its
        # rank is then the factors' own)
        learned = predictions and given.get("lam0") == "learned"
        unused += ["rank"] + ([] if learned else ["fit_steps"])
    return [f"{k}={given[k]!r}" if not hasattr(given[k], "shape") and k != "factors"
            else k for k in unused if k in given and changed(k)]


def no_effect(unused: Sequence[str], policy: str) -> str:
    """``"a=2.0, lam0=0.2 have no effect for policy 'ucbe'"``: the start of the warning
    about :func:`unused_settings`."""
    verb = "has" if len(unused) == 1 else "have"
    return f"{', '.join(unused)} {verb} no effect for policy {policy!r}"


def fit_default_factors(train: ScoreMatrix, rank: int, seed: int, fit_steps: int):
    """The factorization a simulation fits on its training models when none is given,
    ``(model, item_factors, rho)``: the :class:`~jaxeval.LowRankLogistic`, its float32
    :class:`ItemFactors` and the prior strength of the online refit (its
    ``online_rho``). Shared with :class:`jaxeval.IdentificationStudy`, so both refit
    the same way."""
    from jaxeval._factorization_api import fit_factorization

    lr = fit_factorization(train, rank=rank, rho=1.0, seed=seed, num_steps=fit_steps)
    f, rho = item_factors_of(lr)
    return lr, f, rho


def item_factors_of(factors, items=None) -> tuple[ItemFactors, float | None]:
    """``(float32 ItemFactors, online rho)`` of what a user passes as ``factors``: an
    :class:`ItemFactors` (no rho of its own: ``None``) or a fitted model with ``V``,
    ``c``, ``u_mean`` (its ``online_rho``, 1.0 if it has none).

    ``items``: the item names the factors are used for. A fitted model that names its
    items (``factors.items``) must name the same ones in the same order: each item
    would otherwise get another item's factor, and the predictions, though the
    estimates stay valid, would be worthless. (A different number of items is left to
    the caller's shape check.)"""
    own = getattr(factors, "items", None)
    if items is not None and own is not None and not isinstance(factors, ItemFactors):
        own = names_as_str(own, "items", "factors")  # (byte strings decoded as UTF-8)
        want = names_as_str(items, "items", "data")
        if own.shape == want.shape and not np.array_equal(own, want):
            i = int(np.flatnonzero(own != want)[0])
            what = ("the same items in another order"
                    if set(own.tolist()) == set(want.tolist()) else "other items")
            raise ValueError(
                f"factors: fitted on {what} (position {i}: {str(own[i])!r} in factors, "
                f"{str(want[i])!r} here); fit them on these items, in this order")
    with np.errstate(over="ignore"):  # (values beyond float32 are refused below)
        if isinstance(factors, ItemFactors):
            f, rho = ItemFactors(*(np.asarray(x, np.float32) for x in factors)), None
        elif not all(hasattr(factors, a) for a in ("V", "c", "u_mean")):
            raise TypeError(f"factors: expected a fitted LowRankLogistic (or ItemFactors), "
                            f"got {type(factors).__name__}")
        else:
            f = ItemFactors(
                *(np.asarray(getattr(factors, a), np.float32) for a in ("V", "c", "u_mean"))
            )
            rho = float(getattr(factors, "online_rho", 1.0))
    for name, x in zip(("V", "c", "u_mean"), f):
        if not np.all(np.isfinite(x)):
            bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
            raise ValueError(f"factors: {name} has {bad} non-finite value(s) (in float32); "
                             "predictions from it would be NaN")
    return f, rho


def _check_unit(name, value, lo=0.0, hi=1.0):
    v = _as_number(name, value)
    if not (lo < v < hi) or not math.isfinite(v):
        raise ValueError(f"{name} must lie strictly between {lo} and {hi}, got {value!r}")
    return v


#: Smallest accepted ``alpha``: the kernels hold ``alpha / K`` in float32, and below about
#: 1e-38 ``log(2 K / alpha)`` is no longer finite (the Hoeffding bounds turn NaN); 1e-30
#: leaves room for K up to 1e7.
MIN_ALPHA = 1e-30


def _ratio(x: float, y: float) -> float:
    """``x / y`` of two calls-to figures (``inf`` = never reached): NaN when neither is
    reached, ``inf`` when only ``y`` is, 0 when only ``x`` is."""
    if math.isinf(x) and math.isinf(y):
        return math.nan
    if math.isinf(y):
        return 0.0
    if math.isinf(x):
        return math.inf
    return x / y


def _check_level_open(level) -> float:
    """A level strictly inside (0, 1)."""
    v = _as_number("level", level)
    if not 0.0 < v < 1.0:
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    return v


def _check_alpha(value, name="alpha"):
    v = _check_unit(name, value)
    if v < MIN_ALPHA:
        raise ValueError(
            f"{name} must be at least {MIN_ALPHA:g} (the kernels hold alpha / K in float32), "
            f"got {value!r}"
        )
    return v


def _as_number(name, value) -> float:
    """A real scalar (Python, NumPy or 0-d JAX); bools, strings and arrays are refused."""
    if isinstance(value, (bool, str, bytes, np.bool_)) or np.ndim(value) != 0:
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}") from None


def _target_accuracy(accuracy) -> float:
    """``calls_to``'s target: a number in (0, 1] (95 or NaN is refused, not read as
    "never reached")."""
    acc = _as_number("accuracy", accuracy)
    if not 0.0 < acc <= 1.0:
        raise ValueError(f"accuracy: expected a number in (0, 1] (a share, not a percent), "
                         f"got {accuracy!r}")
    return acc


def _check_real(name, value, lo, hi):
    v = _as_number(name, value)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{name} must lie in [{lo:g}, {hi:g}], got {value!r}")
    return v


def _config(policy, K, n, batch_size, budgets, budget_fractions, mode, cs_kinds, stop_kind,
            use_predictions, refit, num_newton, synchronized, horizon, truth, rank, corruption,
            item_block, warn: bool = True, skip_separated: bool = False) -> idn.Config:
    """The kernel's static configuration; every argument checked, with its name
    (``warn=False``: a first check whose warnings the second call gives)."""
    batch_size = check_int("batch_size", batch_size, 1, n)
    if not isinstance(skip_separated, (bool, np.bool_)):
        raise TypeError(f"skip_separated: expected True or False, got {skip_separated!r}")
    budget_tuple = _canonical_budgets(budgets, budget_fractions, K * n, warn)
    return idn.Config(
        policy=policy,
        num_arms=K,
        num_items=n,
        budgets=budget_tuple,
        batch_size=batch_size,
        mode=mode,
        cs_kinds=cs_kinds,
        stop_kind=stop_kind,
        use_predictions=use_predictions,
        refit=bool(refit),
        num_newton=int(num_newton),
        synchronized=synchronized,
        horizon=horizon,
        truth=truth,
        rank=rank,
        corruption=corruption,
        item_block=item_block,
        skip_separated=bool(skip_separated),
    )


def _refuse_text_and_bools(name: str, values: Any, what: str) -> Any:
    """``values`` (a generator as a tuple), after refusing a string or a bool where a
    sequence of numbers is due: iterated, ``"05"`` would be the checkpoints 0 and 5 and
    ``[True]`` the number 1."""
    expected = f"{name} must be a sequence of {what}"
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{expected}, not a string, got {values!r}")
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "bSU":
            raise TypeError(f"{expected}, got an array of {values.dtype}: {values!r}")
        items = values.ravel().tolist() if values.dtype == object else ()
    elif isinstance(values, Sequence):
        items = values
    else:
        try:
            values = items = tuple(values)
        except TypeError:  # (not iterable: refused by the caller's checks)
            return values
    for v in items:
        if isinstance(v, (bool, np.bool_, str, bytes)):
            raise TypeError(f"{expected}, got {values!r} (holding {type(v).__name__} {v!r})")
    return values


def _canonical_budgets(budgets, fractions, total, warn=True):
    if budgets is not None and fractions is not None:
        raise ValueError("give either budgets or budget_fractions, not both")
    budgets_given = budgets is not None
    if budgets is None:
        if fractions is None:
            fr = DEFAULT_BUDGET_FRACTIONS
        else:
            fractions = _refuse_text_and_bools("budget_fractions", fractions, "numbers")
            try:
                fr = tuple(float(f) for f in fractions)
            except (TypeError, ValueError):
                raise TypeError(
                    f"budget_fractions must be a sequence of numbers, got {fractions!r}"
                ) from None
            if not fr:
                raise ValueError("budget_fractions must not be empty")
        if any(not (0 < f <= 1) for f in fr):
            raise ValueError(f"budget_fractions must lie in (0, 1], got {fr}")
        budgets = [max(1, int(round(f * total))) for f in fr]
    else:
        budgets = _refuse_text_and_bools("budgets", budgets, "integers (LLM calls)")
    arr = np.asarray(budgets)
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise ValueError(f"budgets must be finite counts of LLM calls, got {budgets!r}")
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        hint = ""
        if (arr.ndim == 1 and arr.size and np.issubdtype(arr.dtype, np.floating)
                and np.any(arr != np.round(arr))):  # (finite: NaN and inf are refused above)
            hint = ("; budgets are counts of LLM calls: shares of K*n (as a study's "
                    "budgets) go in budget_fractions=")
        raise ValueError(f"budgets must be a non-empty 1-D sequence of integers, got "
                         f"{budgets!r}{hint}")
    if arr.min() < 1 or arr.max() > total:
        raise ValueError(
            f"budgets must lie in [1, K*n] = [1, {total}] LLM calls, got min {arr.min()} "
            f"and max {arr.max()}"
        )
    out = tuple(int(b) for b in np.unique(arr))
    if warn and len(out) < arr.size and (budgets_given or fractions is not None):
        # (the default grid on a tiny problem merges its smallest points: expected)
        what = "budgets" if budgets_given else "budget_fractions"
        warnings.warn(
            f"{what}: {arr.size} checkpoints requested, {len(out)} distinct budgets in LLM "
            f"calls of K*n = {total} (repeats, or fractions rounding to the same call count, "
            "are merged); the report has one checkpoint per distinct budget",
            stacklevel=4,
        )
    return out


def _content_digest(sm: ScoreMatrix) -> str:
    """The first 12 hex digits of a SHA-256 over a matrix's scores, mask and names: two
    simulations on frames or arrays ran on the same data when their settings agree."""
    return array_digest(sm.scores, sm.mask, sm.models, sm.items)[:12]


def simulate_identification(
    data: ScoreMatrix | SyntheticSpec | Any,
    policy: str = "pulse_ucb",
    *,
    K: int = 10,
    budgets: Sequence[int] | None = None,
    budget_fractions: Sequence[float] | None = None,
    alpha: float = 0.05,
    n_replicates: int = 200,
    seed: int = 0,
    batch_size: int = 1,
    n_train: int | None = None,
    n_instances: int | None = 10,
    instances: ArrayLike | None = None,
    instance_assignment: str = "random",
    cs_kinds: Sequence[str] = ("eb", "hoeffding"),
    stop_kind: str = "eb",
    mode: str = "budget",
    eps: float = 0.0,
    a: float = 1.0,
    scale: float = 1.0,
    rank: int = 8,
    rho: float | None = None,
    lam0: float | str = 1.0,
    shrink: float = 10.0,
    num_newton: int = 1,
    refit: bool = True,
    use_predictions: bool | None = None,
    synchronized: bool | None = None,
    skip_separated: bool | None = None,
    horizon: int | None = None,
    corruption: str = "none",
    bias: float = 0.3,
    factors: Any = None,
    fit_steps: int = 500,
    chunk_size: int | None = None,
    lanes: int = DEFAULT_LANES,
    devices: Sequence[Any] | None = None,
    progress: bool = False,
    item_block: int = idn.ITEM_BLOCK,
) -> IdentificationReport:
    """Monte Carlo study of best-model identification with anytime-valid intervals.

    Real data: duplicate rows are removed (their number is ``settings["duplicates_removed"]``,
    and :meth:`IdentificationReport.summary` says so), the models are split at random
    (``seed``) into ``n_train`` training models (the offline factorization is fitted on
    them when the policy uses predictions) and a candidate pool; ``n_instances``
    instances of ``K`` candidates are drawn from the pool; each replicate plays one
    instance (chosen from its key) with its own item orders. Synthetic truth draws a
    fresh matrix per replicate.
    A setting changed from its default that this configuration never reads (``a`` for
    ``"uniform"``, ``lam0`` for a policy without predictions, ``eps`` outside
    ``mode="confidence"``, ...) is named in a ``UserWarning`` (:func:`unused_settings`).

    Args:
      data: a :class:`~jaxeval.ScoreMatrix` (candidate rows must be fully observed), a
        pandas DataFrame (models as rows, items as columns, read with its labels) or a
        2-D array of scores, or a :class:`SyntheticSpec`. A frame or array (or a
        ScoreMatrix built in memory, source ``"<array>"``) names no data set, so
        ``settings["data"]`` records its type, shape and a content digest
        (``"DataFrame [300, 541] sha256:..."``) to tell runs on other data apart.
      policy: ``"pulse_ucb"`` (the default, as in :class:`~jaxeval.IdentificationCampaign`
        and a study's first policy: PULSE's difference estimate + ``sqrt(a / N)``, the
        index measured in BUILD_NOTES.md "PULSE against the peers"), ``"pulse"`` (the
        interval's upper bound as the index), ``"ucbe"``, ``"naive"``, ``"sysrs"`` or
        ``"uniform"``.
      K: candidates per instance (>= 2).
      budgets: checkpoint budgets in LLM calls (sorted, within ``[1, K*n]``); default the
        METHODS.md 6.1 grid of ``budget_fractions``.
      budget_fractions: checkpoint budgets as fractions of ``K*n``.
      alpha: family-wise error level in (0, 1) (each arm gets ``alpha / K``).
      n_replicates: Monte Carlo replicates.
      seed: base seed; replicate ``i`` uses ``fold_in(key(seed), i)``.
      batch_size: items per pull, ``1 <= b <= n``.
      n_train: training models (default ``None``: half of the deduplicated models;
        ``0``: none, for policies without predictions. A study definition's
        ``"n_train": 0`` means half instead).
      n_instances: instances drawn from the pool (real data; left at its default when
        ``instances`` are given, or equal to their number). ``None`` means the default
        (10; what synthetic truth records in ``settings``).
      instances: the instances themselves instead of ``n_instances`` random draws: an
        ``[I, K]`` array of candidate-pool rows (as in a report's ``instances``) or of
        model names (each must be a pool model, i.e. not one of the ``n_train``
        training models of this ``seed``'s split). Each row lists ``K`` distinct models.
        A report's own ``instances`` passed back with its seed reproduce it exactly.
      instance_assignment: ``"random"`` (default): each replicate draws its instance
        from its key, so instances are played unequally often (the tables of
        BUILD_NOTES.md); ``"balanced"``: replicate ``i`` plays instance ``i mod I``,
        every instance ``⌊R/I⌋`` or ``⌈R/I⌉`` times (METHODS.md 6.1's instances × replicates
        design: less Monte Carlo noise between instances). Item orders come from the
        replicate's key either way. Real data only.
      cs_kinds: interval kinds (``"eb"``, ``"hoeffding"``, ``"betting"``).
      stop_kind: kind used by PULSE's radius and the fixed-confidence stop.
      mode: ``"budget"`` (checkpoints) or ``"confidence"`` (stop when confident; the
        largest budget caps the calls).
      eps: ε of the ε-good stopping rule.
      a: UCB-E / naive / pulse_ucb exploration constant.
      scale: PULSE exploration scale.
      rank: rank of the offline factorization.
      rho: prior strength of the online refit (default: the fit's ``online_rho``, the
        empirical-Bayes 0.5 on whitened factors; else 1).
      lam0, shrink: λ prior and its pseudo-count. ``lam0="learned"`` learns the prior on
        the training models (:func:`~jaxeval.learn_lam0`, cross-fitted, same rank and
        seed; real data with a prediction policy only); the value used is in
        ``settings["lam0"]``.
      num_newton: Newton steps per refit.
      refit: refit the pulled arm's factor after each batch.
      use_predictions: force the DR estimator on/off (default: on for prediction policies).
      synchronized: one item order for all arms (default: only for SySRs).
      skip_separated: never pull an arm already separated from the leader (its upper
        bound below the leader's lower bound plus ``eps``, the stop's own test; see
        ``jaxeval._identification.Config``). Default ``None``: on in confidence mode for
        every policy but SySRs (the confident stop then needs 25-80% fewer calls on the
        five development sets: BUILD_NOTES.md, "Thirty-seventh session"), off in budget mode
        (within the noise there, and the bounds would cost every step).
      horizon: SySRs' planning horizon in calls. Default: SySRs is run once per budget,
        planned for that budget (METHODS.md 2.5); a value plans one run read at every budget.
      corruption: ``"none"``, ``"biased"``, ``"random"``, ``"adversarial"`` predictions.
      bias: size of the ``"biased"`` corruption.
      factors: a fitted :class:`~jaxeval.LowRankLogistic` (or ``ItemFactors``) to use
        instead of fitting one on the training models. Fit it on those models only, or
        the candidates' own scores leak into their predictions: they are
        ``sm.drop_duplicates().split_pool(n, seed=seed)[0]`` with ``n = n_train`` (by
        default half the distinct models, rounded down). Recorded in the report's
        ``settings["factorization"]`` as given.
      fit_steps: Adam steps of the offline fit (``num_steps`` of
        :func:`~jaxeval.fit_factorization`; named apart from the bandit's steps).
      chunk_size: replicates per compiled chunk (bounds memory; one progress line
        each; default an eighth of the run; rounded up to whole blocks of ``lanes`` on
        every device, capped near ``n_replicates``).
      lanes: replicates vmapped together per device step (default 32). Results are
        bit-identical for a fixed ``lanes`` whatever the chunk size or device count; a
        wider vmap can change float sums in the last bit. Wider is faster for the
        prediction policies on CPU (PULSE on IFEval, K = 10: ~1.3-1.5x from 64 to 256 lanes,
        BUILD_NOTES "PULSE against the peers") and on accelerators (an H200 ran PULSE
        1.9x faster at 16 384 lanes than at 4 096: use thousands there); ``chunk_size``
        is rounded up to a multiple of ``lanes`` times the device count.
      devices: devices of the replicate mesh (default all).
      progress: print one line per chunk.
      item_block: items handled at once per replicate. Rows longer than this are
        streamed in blocks, so peak memory stays flat in ``n`` (same item orders and
        truth; float sums may differ in the last bit); rows up to it run whole, which is
        faster. Raise it to trade memory for speed on large ``n``.

    Returns:
      An :class:`IdentificationReport`.

    Raises:
      ValueError / TypeError: bad input, named in the message.

    Example:
      >>> import jaxeval
      >>> rep = jaxeval.simulate_identification(
      ...     jaxeval.SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=8,
      ...     budget_fractions=(0.1, 0.5, 1.0))
      >>> float(rep.accuracy[-1])
      1.0
    """
    if policy not in _policies.POLICIES:
        raise ValueError(f"policy must be one of {_policies.POLICIES}, got {policy!r}")
    unnamed = None  # a frame or an array names no data set: its settings say what it was
    if _is_frame(data) or isinstance(data, (np.ndarray, jax.Array, list, tuple)):
        unnamed = "jax.Array" if isinstance(data, jax.Array) else type(data).__name__
        data = as_score_matrix(data, "data")  # (labelled frames keep their names)
    elif isinstance(data, ScoreMatrix) and data.source == "<array>":
        unnamed = "ScoreMatrix"  # (built in memory: no file or data set name)
    if unnamed is not None:
        unnamed = (f"{unnamed} [{data.n_models}, {data.n_items}] sha256:"
                   f"{_content_digest(data)}")
    K = check_int("K", K, 2)
    alpha = _check_alpha(alpha)
    n_replicates = check_int("n_replicates", n_replicates, 1)
    lanes = check_int("lanes", lanes, 1, 2**20)
    # the checked values (plain Python numbers) go on, so settings hold numbers JSON
    # writes as numbers and a saved report's settings rerun the study
    seed = check_int("seed", seed, 0)
    a, scale, shrink, eps, bias = (
        _check_real(name, v, lo, hi)
        for name, v, lo, hi in (("a", a, 0.0, 1e6), ("scale", scale, 0.0, 1e6),
                                ("shrink", shrink, 0.0, 1e6), ("eps", eps, 0.0, 1.0),
                                ("bias", bias, -1.0, 1.0)))
    learn_prior = isinstance(lam0, str)
    if learn_prior and lam0 != "learned":
        raise ValueError(f"lam0 must be a number in [0, 1] or 'learned', got {lam0!r}")
    if not learn_prior:
        lam0 = _check_real("lam0", lam0, 0.0, 1.0)
    if rho is not None:
        rho = _check_real("rho", rho, 0.0, 1e6)
    num_newton = check_int("num_newton", num_newton, 0, 10_000)
    fit_steps = check_int("fit_steps", fit_steps, 1)
    if horizon is not None:
        horizon = check_int("horizon", horizon, 1)
    if chunk_size is not None:
        chunk_size = check_int("chunk_size", chunk_size, 1)
    for name, v in (("refit", refit), ("use_predictions", use_predictions),
                    ("synchronized", synchronized)):
        idn.check_flag(name, v, none_ok=name != "refit")
    if isinstance(cs_kinds, str) or not isinstance(cs_kinds, (tuple, list)):
        raise TypeError(f"cs_kinds: expected a tuple of interval kinds such as ('eb',), got "
                        f"{cs_kinds!r}")
    cs_kinds = tuple(cs_kinds)
    if not cs_kinds:  # the report's coverage and widths need intervals
        raise ValueError("cs_kinds: expected at least one interval kind, got none")
    key = as_key(seed)
    needs_pred = (
        policy in _policies.PREDICTION_POLICIES if use_predictions is None else use_predictions
    )
    notes: dict[str, Any] = {}

    # settings that would otherwise be ignored without a word (and still be recorded)
    if corruption != "none" and corruption in idn.CORRUPTIONS and not needs_pred:
        raise ValueError(
            f"corruption={corruption!r}: corrupts predictions, which policy {policy!r} does "
            "not use (pass use_predictions=True, or a prediction policy)"
        )
    if horizon is not None and policy != "sysrs":
        raise ValueError(f"horizon: only SySRs plans for a horizon, not policy {policy!r}")
    if policy == "sysrs" and synchronized is False:
        warnings.warn(
            "simulate_identification: synchronized=False gives each arm its own item order; "
            "SySRs is defined by one order shared by all arms, so these are not SySRs' "
            "results (a variant of successive rejects)", stacklevel=2)
    if skip_separated is None:  # the confident stop's default (see the docstring)
        skip_separated = mode == "confidence" and policy != "sysrs"
    if instance_assignment not in ("random", "balanced"):
        raise ValueError(
            f"instance_assignment must be 'random' or 'balanced', got {instance_assignment!r}"
        )
    if n_instances is None:  # (as synthetic truth records it)
        n_instances = _N_INSTANCES_DEFAULT
    n_instances = check_int("n_instances", n_instances, 1)
    if isinstance(data, SyntheticSpec):
        given = [k for k, v in (("factors", factors), ("n_train", n_train)) if v is not None]
        if instance_assignment != "random":
            given.append("instance_assignment")
        if n_instances != _N_INSTANCES_DEFAULT:
            given.append("n_instances")
        if given:
            raise ValueError(
                f"{', '.join(given)}: only for real data (synthetic truth draws its own "
                "matrix per replicate; predictions use its true item factors)"
            )
    if learn_prior and not (isinstance(data, ScoreMatrix) and needs_pred):
        raise ValueError(
            "lam0='learned' needs real data (a ScoreMatrix) and a policy that uses predictions"
        )
    unused = unused_settings(
        policy, needs_pred, mode, corruption, isinstance(data, SyntheticSpec),
        skip_separated=bool(skip_separated), a=a, scale=scale, eps=eps, bias=bias,
        lam0=lam0, shrink=shrink, rank=rank, rho=rho, num_newton=num_newton, refit=refit,
        factors=factors, fit_steps=fit_steps,
    )
    if unused:
        # (settings holds the rank the run used, and neither fit_steps nor factors)
        names = [u.split("=")[0] for u in unused]
        recorded = [n for n in names if n not in ("rank", "fit_steps", "factors")]
        warnings.warn(
            f"simulate_identification: {no_effect(unused, policy)} "
            f"(mode {mode!r}, corruption {corruption!r}, "
            f"{'with' if needs_pred else 'without'} predictions): the run is the same as with "
            "their defaults"
            + (f" ({', '.join(recorded)} still recorded in settings as given)"
               if recorded else ""),
            stacklevel=2,
        )
    if isinstance(data, SyntheticSpec):
        if instances is not None:
            raise ValueError("instances: only for real data (synthetic truth draws its own)")
        n = check_int("data.n_items", data.n_items, 2)
        truth = "synthetic"
        r = check_int("data.rank", data.rank, 1)
        pdata = None
        instances = np.zeros((0, K), np.int64)
        pool_models = np.array([], dtype=str)
        data_name = f"synthetic(n={n}, rank={r})"
        notes["synthetic"] = dataclasses.asdict(data)  # (its scales: not in the name)
        fit_rho = 1.0
    elif isinstance(data, ScoreMatrix):
        truth = "real"
        sm = data.drop_duplicates()
        m, n = sm.shape
        notes["duplicates_removed"] = int(data.n_models - m)  # (said by summary())
        train, pool, n_train = split_pool(sm, n_train, K, seed)
        if learn_prior and (train is None or train.n_models < 4):
            raise ValueError(f"lam0='learned' needs at least 4 training models, n_train={n_train}")
        if instances is None:
            instances = draw_instances(pool.n_models, K, n_instances, seed)
        else:
            instances = _check_instances(instances, K, pool, train,
                                         sm.metadata.get("dropped_duplicates", ()))
            if n_instances not in (_N_INSTANCES_DEFAULT, len(instances)):
                raise ValueError(
                    f"n_instances={n_instances}: the {len(instances)} instances are given "
                    "(instances=); leave n_instances at its default or pass their number"
                )
        pool_models = np.asarray(pool.models)
        data_name = str(sm.source) if unnamed is None else unnamed
        # every setting the kernel checks, checked before the (slow) factorization fit
        _config(policy, K, n, batch_size, budgets, budget_fractions, mode, cs_kinds,
                stop_kind, use_predictions, refit, num_newton, synchronized, horizon, truth,
                1, corruption, item_block, warn=False, skip_separated=skip_separated)
        r = 1
        fit_rho = 1.0
        item_factors = ItemFactors(
            np.zeros((n, 1), np.float32), np.zeros((n,), np.float32), np.zeros((1,), np.float32)
        )
        if needs_pred:
            if factors is None:
                if train is None:
                    raise ValueError("n_train must be >= 1 when the policy uses predictions")
                factors, _, _ = fit_default_factors(train, rank, seed, fit_steps)
                notes["factorization"] = repr(factors)
            item_factors, own_rho = item_factors_of(factors, np.asarray(sm.items))
            if "factorization" not in notes:  # given: traced as a default fit is
                notes["factorization"] = "given (factors=): " + (
                    f"ItemFactors of rank {item_factors.V.shape[1]} over "
                    f"{item_factors.V.shape[0]} items" if isinstance(factors, ItemFactors)
                    else repr(factors))
            fit_rho = fit_rho if own_rho is None else own_rho
            if item_factors.V.shape[0] != n:
                raise ValueError(
                    f"factors: item factors cover {item_factors.V.shape[0]} items, data has {n}"
                )
            r = int(item_factors.V.shape[1])
            if learn_prior:
                from jaxeval._factorization_api import learn_lam0, wrapped_lam0_error

                try:
                    lam0 = learn_lam0(train, rank=r, seed=seed, num_steps=fit_steps)
                except ValueError as e:
                    raise ValueError(f"lam0='learned': {wrapped_lam0_error(e)}") from None
                notes["lam0_source"] = "learned on the training models (learn_lam0)"
        pdata = idn.ProblemData(
            pool=np.asarray(pool.scores, np.float32),
            instances=instances.astype(np.int32),
            item_factors=item_factors,
        )
    else:
        raise TypeError(
            f"data must be a ScoreMatrix, a pandas DataFrame, a 2-D array of scores or a "
            f"SyntheticSpec, got {type(data).__name__}"
        )

    config = _config(policy, K, n, batch_size, budgets, budget_fractions, mode, cs_kinds,
                     stop_kind, use_predictions, refit, num_newton, synchronized, horizon, truth,
                     r, corruption, item_block, skip_separated=skip_separated)
    budget_tuple, batch_size = config.budgets, config.batch_size
    if pdata is None:
        pdata = idn.dummy_data(config)
        pdata = jax.tree.map(np.asarray, pdata)
    if rho is None:
        rho = fit_rho
    if isinstance(data, SyntheticSpec):
        syn = dict(
            scale_u=data.model_scale, scale_c=data.difficulty_scale, mean_c=data.difficulty_mean
        )
    else:
        syn = {}
    params = idn.Params.make(
        alpha=alpha, a=a, scale=scale, rho=rho, lam0=lam0, shrink=shrink, eps=eps, bias=bias,
        **syn,
    )
    params = jax.tree.map(np.asarray, params)
    wanted = _KERNEL_WANTED.get()
    if wanted is not None:  # (identification_kernel: the checked set-up, no run)
        wanted.append((pdata, params, config))
        return None  # type: ignore[return-value]
    leaves, treedef = jax.tree.flatten((pdata, params))
    balanced = instance_assignment == "balanced"
    fn = _replicate_fn(config, treedef, balanced)
    out = run_replicates(
        fn,
        key,
        n_replicates,
        chunk_size=chunk_size,
        devices=devices,
        operands=leaves,
        lanes=lanes,
        progress=progress,
        with_index=balanced,
    )
    settings = dict(
        policy=policy, data=data_name, K=K, n_items=n, budgets=list(budget_tuple),
        alpha=alpha, n_replicates=n_replicates, seed=seed, batch_size=batch_size,
        n_train=n_train if truth == "real" else None,
        n_instances=len(instances) if truth == "real" else None,
        instance_assignment=instance_assignment,
        cs_kinds=list(cs_kinds), stop_kind=stop_kind, mode=mode, eps=eps, a=a, scale=scale,
        rank=r, rho=float(rho), lam0=lam0, shrink=shrink, num_newton=num_newton, refit=refit,
        use_predictions=bool(needs_pred), synchronized=config.sync,
        skip_separated=config.skip_separated, horizon=horizon,
        corruption=corruption, bias=bias, chunk_size=chunk_size, lanes=lanes,
        item_block=item_block,
        n_devices=len(devices) if devices is not None else jax.device_count(),
        jax_version=jax.__version__, numpy_version=np.__version__,
        jaxeval_version=_version(), **notes,
    )
    return _summarise(out, config, settings, instances, pool_models, needs_pred)


# set by identification_kernel: simulate_identification then hands back its set-up
_KERNEL_WANTED: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "jaxeval_identification_kernel", default=None)


@dataclasses.dataclass(frozen=True, eq=False)
class IdentificationKernel:
    """One identification problem as a pure JAX function, for your own ``jit``, ``vmap``,
    ``lax.scan`` or ``shard_map`` (from :func:`identification_kernel`).

    Calling it, ``kernel(key)`` (or ``kernel(key, instance=i)``), runs one replicate:
    ``kernel.fn(key, kernel.data, kernel.params)``. ``fn`` is pure and traceable; the
    static settings are baked into it (:attr:`config`), the arrays are its operands, so
    new keys, new ``params`` values (``kernel.params._replace(alpha=jnp.float32(0.1))``;
    a Python float is weakly typed under ``jit`` and compiles once more) or new data of
    the same shapes never recompile. Operands you replace are not checked (the kernel
    runs traced): keep ``alpha`` in (0, 1), scores in [0, 1] and ``instances`` rows
    indexing ``pool`` (an index past the end reads the last row).

    Attributes:
      fn: ``(key, data, params, instance=None) -> IdentificationOutput``; ``instance``
        (real data) plays row ``instance % I`` of ``data.instances`` instead of one drawn
        from the key, as ``instance_assignment="balanced"`` does.
      data: the truth's arrays (a NamedTuple pytree: ``pool`` ``[m, n]`` float32,
        ``instances`` ``[I, K]`` int32, ``item_factors``), as
        :func:`simulate_identification` builds them.
      params: the dynamic settings (a NamedTuple of float32 scalars: ``alpha``, ``a``,
        ``scale``, ``rho``, ``lam0``, ``shrink``, ``eps``, ``bias``, ...).
      config: the static settings (hashable; policy, K, budgets, interval kinds, ...).

    The output (a NamedTuple pytree) holds ``theta`` ``[K]`` (true accuracies),
    ``instance`` and ``checkpoints``, a record per budget: ``recommended``, ``calls``,
    ``pulls`` ``[K]``, ``estimate`` / ``naive`` ``[K]`` (the difference estimate is
    unbiased, not bounded: after few pulls it can leave [0, 1]), ``lower`` / ``upper``
    ``[Q, K]`` for the ``Q`` interval kinds of ``config.cs_kinds``, ``lam``, and
    ``status`` (0 ok; codes as in :attr:`IdentificationReport.status_counts`). Replicate
    ``i`` of ``simulate_identification(..., seed=s)`` is
    ``kernel(jax.random.fold_in(jax.random.key(s), i))`` (``instance=i`` as well under
    ``instance_assignment="balanced"``): the same truth, recommendations and calls (floats
    may differ in the last bits where replicates are batched in other shapes).

    Everything is float32: float64 operands (under x64) are cast. Under your own
    ``jax.shard_map`` pass ``check_vma=False`` (as :func:`run_replicates` does): the
    loop's scans start from constants, which the varying-axis check refuses.

    See :func:`identification_kernel` for an example.
    """

    fn: Any
    data: Any
    params: Any
    config: Any

    def __call__(self, key: Any, instance: Any = None) -> Any:
        """One replicate: ``fn(key, data, params, instance)``."""
        return self.fn(key, self.data, self.params, instance=instance)


def identification_kernel(data: ScoreMatrix | SyntheticSpec | Any, policy: str = "pulse_ucb",
                          **kwargs: Any) -> IdentificationKernel:
    """The identification loop of :func:`simulate_identification` as a pure JAX function,
    for composing in your own JAX code (the low-level API).

    Takes :func:`simulate_identification`'s arguments and checks them alike (the same
    split of training and pool models, instances and factorization for the same
    ``seed``), but runs nothing: it returns the kernel, its operands and its static
    settings (:class:`IdentificationKernel`). ``n_replicates``, ``chunk_size``,
    ``lanes``, ``devices``, ``progress`` and ``instance_assignment`` are the runner's
    and are not taken.

    Example:
      >>> import jax, jax.numpy as jnp, jaxeval
      >>> kern = jaxeval.identification_kernel(jaxeval.SyntheticSpec(n_items=40), "ucbe",
      ...                                      K=3, budgets=(12, 60))
      >>> keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(8))
      >>> out = jax.jit(jax.vmap(kern))(keys)         # 8 replicates in one call
      >>> out.checkpoints.calls.shape, out.checkpoints.lower.shape
      ((8, 2), (8, 2, 2, 3))
      >>> loose = kern.params._replace(alpha=jnp.float32(0.2))  # no recompilation
      >>> out2 = jax.jit(jax.vmap(kern.fn, (0, None, None)))(keys, kern.data, loose)
      >>> bool((out2.checkpoints.upper - out2.checkpoints.lower
      ...       <= out.checkpoints.upper - out.checkpoints.lower).all())
      True
    """
    runner = [k for k in _RUNNER_ARGS if k in kwargs]
    if runner:
        raise TypeError(f"identification_kernel: {', '.join(runner)} belong(s) to the runner "
                        "(simulate_identification), not to the kernel")
    got: list = []
    said: list = []
    token = _KERNEL_WANTED.set(got)
    try:
        with warnings.catch_warnings(record=True) as said:  # (the caller's filters hold)
            simulate_identification(data, policy, n_replicates=1, **kwargs)
    finally:
        _KERNEL_WANTED.reset(token)
        for w in said:  # (also when the set-up failed: its warnings said what went wrong)
            text = str(w.message)
            if text.startswith("simulate_identification:"):  # ours: named for this call
                warnings.warn("identification_kernel:" + text[len("simulate_identification:"):],
                              w.category, stacklevel=2)
            else:  # (another library's: where it was raised)
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    pdata, params, config = got[0]
    as_jax = functools.partial(jax.tree.map, jax.numpy.asarray)
    return IdentificationKernel(fn=functools.partial(idn.run_identification, config=config),
                                data=as_jax(pdata), params=as_jax(params), config=config)


_RUNNER_ARGS = ("n_replicates", "chunk_size", "lanes", "devices", "progress",
                "instance_assignment")
# help() and inspect show simulate_identification's own arguments (less the runner's)
_SIM_SIGNATURE = inspect.signature(simulate_identification)
identification_kernel.__signature__ = _SIM_SIGNATURE.replace(  # type: ignore[attr-defined]
    parameters=[p for name, p in _SIM_SIGNATURE.parameters.items() if name not in _RUNNER_ARGS],
    return_annotation="IdentificationKernel")


def _check_instances(instances, K: int, pool: ScoreMatrix, train: ScoreMatrix | None = None,
                     dropped: Sequence[str] = ()) -> np.ndarray:
    """``instances`` (pool rows or model names) as an int64 ``[I, K]`` array of pool rows.

    ``train`` (this seed's training models) and ``dropped`` (the names that
    ``drop_duplicates`` removed) only say why a name is not a candidate."""
    arr = np.asarray(instances)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != K:
        raise ValueError(
            f"instances: expected shape [I, K] = [I, {K}] with I >= 1, got {arr.shape}"
        )
    if arr.dtype.kind == "O" and all(
        isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
        for x in arr.ravel()
    ):  # pool rows held as Python objects (a pandas column, a list of mixed ints)
        arr = arr.astype(np.int64)
    if arr.dtype.kind in "USO":
        try:  # (byte strings decoded as UTF-8)
            arr = names_as_str(arr, "names", "instances")
        except ValueError:
            raise ValueError("instances: model names given as byte strings must be UTF-8")\
                from None
        names = {str(m): i for i, m in enumerate(pool.models)}
        missing = sorted({str(m) for m in arr.ravel()} - names.keys())
        if missing:
            trained = set() if train is None else {str(m) for m in train.models}
            removed = {str(m) for m in dropped}
            groups = (
                ("training model(s) of this seed's split", [m for m in missing if m in trained]),
                ("removed as exact duplicate(s) of another model's row (drop_duplicates)",
                 [m for m in missing if m in removed and m not in trained]),
                ("unknown", [m for m in missing if m not in trained and m not in removed]),
            )
            why = "; ".join(f"{len(ms)} {what}: {ms[:5]}" for what, ms in groups if ms)
            raise ValueError(
                f"instances: {len(missing)} model name(s) are not in the candidate pool of "
                f"this seed's split: {why}"
            )
        rows = np.vectorize(lambda m: names[str(m)], otypes=[np.int64])(arr)
    elif arr.dtype.kind in "iu":
        rows = arr.astype(np.int64)
        if rows.min() < 0 or rows.max() >= pool.n_models:
            raise ValueError(
                f"instances: pool rows must lie in [0, {pool.n_models}), got "
                f"[{rows.min()}, {rows.max()}]"
            )
    else:
        raise TypeError(
            f"instances: expected integer pool rows or model names, got dtype {arr.dtype}"
        )
    dup = [i for i, r in enumerate(rows) if len(set(r.tolist())) != K]
    if dup:
        raise ValueError(f"instances: rows {dup[:5]} repeat a model (each needs K distinct)")
    return rows


def _version() -> str:
    try:
        from jaxeval import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


def _summarise(out, config, settings, instances, pool_models, has_pred) -> IdentificationReport:
    cp = out.checkpoints
    theta = np.asarray(out.theta)  # [R, K]
    R = theta.shape[0]
    best = true_best(theta)
    rec = np.asarray(cp.recommended)  # [R, C]
    correct = recommended_correct(best, rec)  # [R, C]
    acc = correct.mean(axis=0)
    th = theta[:, None, None, :]
    lower, upper = np.asarray(cp.lower), np.asarray(cp.upper)  # [R, C, Q, K]
    covered = (lower <= th) & (th <= upper)
    fam_at = covered.all(axis=-1)  # [R, C, Q]
    coverage_family = fam_at.all(axis=1).mean(axis=0)  # [Q]
    coverage_family_at = fam_at.mean(axis=0).T  # [Q, C]
    coverage_arm = covered.all(axis=1).mean(axis=(0, 2))  # [Q]
    width = (upper - lower).mean(axis=(0, 3)).T  # [Q, C]
    if has_pred:
        q = config.cs_kinds.index(config.stop_kind)
        shift = np.asarray(cp.naive) - np.asarray(cp.estimate)  # [R, C, K]
        nl = lower[:, :, q, :] + shift
        nu = upper[:, :, q, :] + shift
        tk = theta[:, None, :]
        naive_cov = ((nl <= tk) & (tk <= nu)).all(axis=-1).mean(axis=0)
    else:
        naive_cov = np.full(len(config.budgets) if config.mode == "budget" else 1, np.nan)
    status = np.asarray(cp.status)
    counts = np.stack([(status == s).sum(axis=0) for s in range(5)], axis=-1)
    budgets = np.asarray(config.budgets if config.mode == "budget" else config.budgets[-1:])
    total = config.num_arms * config.num_items
    return IdentificationReport(
        budgets=budgets.astype(np.int64),
        budget_fractions=budgets / total,
        accuracy=acc,
        accuracy_se=np.sqrt(acc * (1 - acc) / R),
        calls_used=np.asarray(cp.calls).mean(axis=0),
        cs_kinds=tuple(config.cs_kinds),
        coverage_family=coverage_family,
        coverage_family_at=coverage_family_at,
        coverage_arm=coverage_arm,
        width=width,
        naive_coverage_family=naive_cov,
        status_counts=counts.astype(np.int64),
        correct=correct,
        recommended=rec.astype(np.int32),
        theta=theta.astype(np.float32),
        instance=np.asarray(out.instance).astype(np.int32),
        instances=np.asarray(instances, np.int64),
        pool_models=pool_models,
        settings=settings,
        calls=np.asarray(cp.calls).astype(np.int64),
    )
