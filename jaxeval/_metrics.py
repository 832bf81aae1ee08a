"""Evaluation metrics as pure JAX functions (jittable and vmappable).

All functions take arrays and return arrays; none moves data to the host, so
they can be used inside a jitted, vmapped Monte Carlo study. Leading axes are
batch axes (replicates, checkpoints, ...): the metric is taken over the last
axis, which indexes models ("arms").

- :func:`mae_pp`: mean absolute error in accuracy percentage points.
- :func:`kendall_tau_b`: Kendall's tau-b with ties, equal to
  ``scipy.stats.kendalltau(x, y)`` (its default variant ``'b'``).
- :func:`best_arms`, :func:`identification_correct`,
  :func:`identification_accuracy`: best-model identification, where every arm
  tied for the best true score counts as correct.
- :func:`coverage`: per-arm and family-wise coverage of confidence intervals.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "TIE_ATOL",
    "best_arms",
    "coverage",
    "identification_accuracy",
    "identification_correct",
    "kendall_tau_b",
    "mae_pp",
]


def mae_pp(
    pred: jax.Array,
    true: jax.Array,
    axis: int | tuple[int, ...] | None = None,
    where: jax.Array | None = None,
) -> jax.Array:
    """Mean absolute error in percentage points: ``100 * mean(|pred - true|)``.

    Args:
      pred: predicted accuracies (fractions in [0, 1]), any shape.
      true: true accuracies, broadcastable against ``pred``.
      axis: axes to average over; ``None`` (default) averages over all elements
        and returns a scalar. Use ``axis=-1`` to keep leading batch axes.
      where: optional bool mask (broadcastable): only True elements count (for
        padded batches); an all-False slice gives NaN.

    Returns:
      float32 array: the MAE in percentage points.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.metrics import mae_pp
      >>> float(mae_pp(jnp.array([0.5, 0.7]), jnp.array([0.6, 0.7])))  # doctest: +ELLIPSIS
      5.0...
    """
    where = _bool_mask("mae_pp", where)
    _shapes_agree("mae_pp", pred=pred, true=true, where=where)
    pred = jnp.asarray(pred, dtype=jnp.float32)
    true = jnp.asarray(true, dtype=jnp.float32)
    return 100.0 * jnp.mean(jnp.abs(pred - true), axis=axis, where=where)


def _bool_mask(fn: str, where: Any) -> Any:
    """``where`` checked to be a bool mask (None passes): an integer mask combined by ``&``
    dropped elements silently (``2 & 1 == 0``), a float one failed inside JAX naming
    nothing; as NumPy's ``where=``, it takes bools only."""
    if where is None:
        return None
    dtype = where.dtype if hasattr(where, "dtype") else np.asarray(where).dtype
    if dtype != np.bool_:
        raise TypeError(f"{fn}: where must be a bool mask, got dtype {dtype} (write "
                        "where=mask != 0 to keep the non-zero elements)")
    return jnp.asarray(where)


def _shapes_agree(fn: str, **arrays: Any) -> None:
    """Refuse arguments whose shapes do not broadcast together, naming them (JAX's own
    error named none). Shapes are static, so this holds under jit too."""
    shapes = {k: tuple(np.shape(v)) for k, v in arrays.items() if v is not None}
    try:
        jnp.broadcast_shapes(*shapes.values())
    except ValueError:
        raise ValueError(f"{fn}: shapes do not broadcast together: " + ", ".join(
            f"{k} {v}" for k, v in shapes.items())) from None


def _pair_signs(a: jax.Array) -> jax.Array:
    """``sign(a_i - a_j)`` for all pairs, as int32 ``[..., n, n]``, by comparison (exact in
    any dtype: no subtraction to round or overflow)."""
    ai, aj = a[..., :, None], a[..., None, :]
    return (ai > aj).astype(jnp.int32) - (ai < aj).astype(jnp.int32)


def kendall_tau_b(x: jax.Array, y: jax.Array, where: jax.Array | None = None) -> jax.Array:
    """Kendall's rank correlation tau-b over the last axis, with ties.

    ``tau_b = (P - Q) / sqrt((n0 - n1) (n0 - n2))`` where ``P``/``Q`` count the
    concordant/discordant pairs, ``n0 = n (n - 1) / 2`` and ``n1``/``n2`` count the
    pairs tied in ``x``/``y``. This is exactly ``scipy.stats.kendalltau(x, y)``
    (variant ``'b'``) on the values as JAX holds them: NaN when either input is
    constant, has fewer than two elements or contains a NaN. Values are compared
    exactly in their own dtype; but without ``jax_enable_x64`` JAX holds float64 inputs
    as float32 (and int64 as int32), so float64 values closer than float32 resolves
    (e.g. ``0.1`` and ``0.1 + 1e-9``) count as ties; enable x64 to compare them
    exactly. Pair counts are
    accumulated in int32, exact for ``n`` up to 46,000; memory is O(n^2) per call (fine
    for a few thousand).

    Args:
      x: ``[..., n]`` scores (e.g. predicted accuracies).
      y: ``[..., n]`` scores (e.g. true accuracies); same shape as ``x``.
      where: optional bool ``[..., n]``: only pairs of True elements count, so
        ``kendall_tau_b(x, y, where=w)`` equals ``kendall_tau_b(x[w], y[w])``
        with a fixed shape (padded batches, variable group sizes).

    Returns:
      float32 ``[...]``: tau-b per leading index.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.metrics import kendall_tau_b
      >>> round(float(kendall_tau_b(jnp.array([1., 2., 2., 3.]), jnp.array([1., 3., 2., 4.]))), 4)
      0.9129
    """
    x = jnp.asarray(x)
    y = jnp.asarray(y)
    if x.shape != y.shape:
        raise ValueError(f"kendall_tau_b: x and y must have the same shape, got x {x.shape} "
                         f"and y {y.shape}")
    if where is not None:
        where = _bool_mask("kendall_tau_b", where)
        _shapes_agree("kendall_tau_b", x=x, where=where)
        if jnp.broadcast_shapes(x.shape, np.shape(where)) != x.shape:
            raise ValueError(f"kendall_tau_b: where {np.shape(where)} must broadcast to the "
                             f"shape of x {x.shape}")

    def nan_free(a):  # (a with NaN set to 0, where it was NaN), in a's own dtype
        if not jnp.issubdtype(a.dtype, jnp.inexact):
            return a, jnp.zeros(a.shape, bool)
        nan = jnp.isnan(a)
        return jnp.where(nan, jnp.zeros((), a.dtype), a), nan

    x, nan_x = nan_free(x)
    y, nan_y = nan_free(y)
    w = jnp.ones(x.shape, bool) if where is None else jnp.broadcast_to(where, x.shape)
    bad = jnp.any((nan_x | nan_y) & w, axis=-1)
    pair = (w[..., :, None] & w[..., None, :]).astype(jnp.int32)
    sx = _pair_signs(x) * pair
    sy = _pair_signs(y) * pair
    # Sums over ordered pairs count every unordered pair twice; the factor cancels.
    num = jnp.sum(sx * sy, axis=(-2, -1))
    nx = jnp.sum(jnp.abs(sx), axis=(-2, -1))  # 2 * (n0 - n1)
    ny = jnp.sum(jnp.abs(sy), axis=(-2, -1))  # 2 * (n0 - n2)
    fx, fy = nx.astype(jnp.float32), ny.astype(jnp.float32)
    # Equal tie structure (e.g. no ties at all): the denominator is exact, so a
    # perfect (anti-)concordance gives exactly +-1.
    den = jnp.where(nx == ny, fx, jnp.sqrt(fx) * jnp.sqrt(fy))
    tau = jnp.where(den > 0, num.astype(jnp.float32) / jnp.where(den > 0, den, 1.0), jnp.nan)
    tau = jnp.clip(tau, -1.0, 1.0)
    return jnp.where(bad, jnp.nan, tau)


#: Default tie tolerance of :func:`best_arms`: the float32 means of two rows with equal
#: mathematical means (e.g. permutations of one graded row) can differ in the last bit,
#: ~6e-8 at accuracies near 0.5; the identification reports use the same tolerance.
TIE_ATOL = 1e-6


def best_arms(true_scores: jax.Array, atol: float | jax.Array = TIE_ATOL) -> jax.Array:
    """Which arms are a true best: ``true_scores >= max(true_scores) - atol``.

    Args:
      true_scores: ``[..., K]`` true scores (accuracies) of the K arms.
      atol: arms within ``atol`` of the best also count as best (default
        :data:`TIE_ATOL` = 1e-6, float32 rounding of equal means; 0 for exact ties
        only). A dynamic value: changing it does not recompile.

    Returns:
      bool ``[..., K]``; at least one True per leading index (unless NaN).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.metrics import best_arms
      >>> best_arms(jnp.array([0.5, 0.7, 0.7])).tolist()
      [False, True, True]
    """
    s = jnp.asarray(true_scores)
    if not jnp.issubdtype(s.dtype, jnp.floating):
        s = s.astype(jnp.float32)  # (an unsigned top - atol wrapped around: no best arm)
    top = jnp.max(s, axis=-1, keepdims=True)
    return s >= top - jnp.asarray(atol, dtype=s.dtype)


def _check_indices(dtype: Any, size: int) -> None:
    """Refuse recommendations that are not integer arm indices (an empty array passes)."""
    if size == 0 or np.issubdtype(dtype, np.integer):
        return
    why = {"f": "a float would be truncated, NaN read as arm 0", "b": "a bool is not an arm",
           "O": "Python ints beyond 64 bits, or mixed values?"}.get(np.dtype(dtype).kind, "")
    raise TypeError(f"recommended: expected integer arm indices, got dtype {dtype}"
                    + (f" ({why})" if why else ""))


def identification_correct(
    recommended: jax.Array, true_scores: jax.Array, atol: float | jax.Array = TIE_ATOL
) -> jax.Array:
    """Whether each recommended arm is a true best arm (ties count as correct).

    Args:
      recommended: int ``[...]`` index of the recommended arm. An index outside
        ``[0, K)`` (e.g. ``-1`` for "no recommendation") counts as wrong.
      true_scores: ``[..., K]`` true scores, with the same leading shape (or
        broadcastable to it).
      atol: tolerance of :func:`best_arms`.

    Returns:
      bool ``[...]``.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.metrics import identification_correct
      >>> identification_correct(jnp.array([1, 2, 0]), jnp.array([0.5, 0.7, 0.7])).tolist()
      [True, True, False]
    """
    top = np.iinfo(np.int32).max
    if isinstance(recommended, jax.Array):
        _check_indices(recommended.dtype, recommended.size)
        r = recommended
        if r.size == 0 or not jnp.issubdtype(r.dtype, jnp.integer):
            r = r.astype(jnp.int32)
        if jnp.iinfo(r.dtype).max > top:
            # an index past int32 (uint32, or int64 under x64) is out of range, not
            # wrapped around onto an arm (a narrower dtype cannot hold one, and the
            # bound itself would wrap in it)
            r = jnp.where((r < 0) | (r > top), -1, r)
        rec = r.astype(jnp.int32)
    else:
        r = np.asarray(recommended)
        _check_indices(r.dtype, r.size)
        if r.size == 0:
            r = r.astype(np.int32)
        rec = jnp.asarray(np.where((r < 0) | (r > top), -1, r).astype(np.int32))
    best = best_arms(true_scores, atol)
    k = best.shape[-1]
    lead = jnp.broadcast_shapes(rec.shape, best.shape[:-1])
    best = jnp.broadcast_to(best, lead + (k,))
    rec = jnp.broadcast_to(rec, lead)
    valid = (rec >= 0) & (rec < k)
    hit = jnp.take_along_axis(best, jnp.clip(rec, 0, k - 1)[..., None], axis=-1)[..., 0]
    return hit & valid


def identification_accuracy(
    recommended: jax.Array,
    true_scores: jax.Array,
    atol: float | jax.Array = TIE_ATOL,
    axis: int | tuple[int, ...] | None = None,
) -> jax.Array:
    """Share of recommendations that are a true best arm (ties count as correct).

    Args:
      recommended: int ``[...]`` recommended arm per replicate.
      true_scores: ``[..., K]`` true scores (see :func:`identification_correct`).
      atol: tolerance of :func:`best_arms`.
      axis: axes of ``recommended`` to average over (default: all -> scalar).

    Returns:
      float32 accuracy in [0, 1].

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.metrics import identification_accuracy
      >>> float(identification_accuracy(jnp.array([1, 1]), jnp.array([[.1, .9], [.3, .2]])))
      0.5
    """
    ok = identification_correct(recommended, true_scores, atol)
    return jnp.mean(ok.astype(jnp.float32), axis=axis)


def coverage(
    lower: jax.Array, upper: jax.Array, truth: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Interval coverage, per arm and family-wise (all arms at once).

    An interval covers when ``lower <= truth <= upper`` (closed). A NaN bound or
    truth does not cover.

    Args:
      lower: ``[..., K]`` lower bounds.
      upper: ``[..., K]`` upper bounds.
      truth: ``[..., K]`` true values (broadcastable).

    Returns:
      ``(per_arm, family_wise)``: bool ``[..., K]`` and bool ``[...]`` (True when
      every arm's interval covers). Average them over replicates for rates.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.metrics import coverage
      >>> per_arm, fw = coverage(jnp.array([.1, .5]), jnp.array([.3, .6]), jnp.array([.2, .7]))
      >>> per_arm.tolist(), bool(fw)
      ([True, False], False)
    """
    _shapes_agree("coverage", lower=lower, upper=upper, truth=truth)
    lower, upper, truth = jnp.asarray(lower), jnp.asarray(upper), jnp.asarray(truth)
    per_arm = (lower <= truth) & (truth <= upper)
    return per_arm, jnp.all(per_arm, axis=-1)
