"""Doubly robust (DR) estimation of a finite-population mean under sampling without replacement.

For one arm (model) with scores ``S_j in [0, 1]`` on ``n`` items, true accuracy
``theta = (1/n) sum_j S_j``, seen items ``O`` and unseen items ``U`` (``|O| + |U| = n``),
predictions ``S_hat`` on every item and a coefficient ``lam in [0, 1]``, the per-draw term of
METHODS.md section 2.3 for an item ``j`` drawn uniformly from ``U`` is::

    Y = (1/n) [ sum_O S + lam * sum_U S_hat + |U| * (S_j - lam * S_hat_j) ].

``E[Y | past] = theta`` exactly, whatever the predictions, as long as ``S_hat`` and ``lam``
are fixed before the draw (they may depend on everything seen so far). The deviation
``Y - theta = (|U|/n) (r_j - mean_U r)`` with ``r = S - lam * S_hat`` is therefore a
martingale difference; its conditional variance ``(|U|/n)^2 Var_U(S - lam * S_hat)`` is smallest
at ``lam* = Cov_U(S, S_hat) / Var_U(S_hat)``, which :func:`plugin_lambda` estimates from the
arm's past pairs.

Batches. Within a batch of ``b`` items the bandit loop applies the terms one at a time: after
each item, that item moves from ``U`` to ``O`` (``sum_s_obs``, ``sum_pred_unseen``,
``n_unseen`` updated) while ``S_hat`` and ``lam`` stay frozen for the whole batch. Each item of
the batch is uniform on the then-unseen set, so every term is a martingale difference with
conditional mean ``theta`` with respect to the filtration that reveals items one at a time.

Every function here is elementwise: each argument may carry a leading ``[K]`` (arms) or any
broadcastable batch shape. All are jittable and take numeric hyper-parameters (``lam``,
``lam0``, ``shrink``) as dynamic arrays, so new values never retrace. Counts (``n``,
``n_unseen``, ``n_obs``) are integers; sums are float32 (under x64, float64 arguments
give float64 results; the :class:`LambdaStats` state keeps its own dtypes).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

__all__ = [
    "LambdaStats",
    "difference_estimate",
    "dr_range",
    "dr_term",
    "lambda_stats_init",
    "lambda_stats_update",
    "naive_pooled",
    "plugin_lambda",
]


def _f(x: ArrayLike) -> Array:
    """As a floating array (float32 unless the input is already a wider float)."""
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def dr_term(
    sum_s_obs: ArrayLike,
    sum_pred_unseen: ArrayLike,
    n_unseen: ArrayLike,
    s_j: ArrayLike,
    pred_j: ArrayLike,
    lam: ArrayLike,
    n: ArrayLike,
) -> Array:
    """The doubly robust per-draw term ``Y`` of METHODS.md 2.3.

    ``Y = (sum_O S + lam * sum_U S_hat + |U| * (S_j - lam * S_hat_j)) / n`` for the item ``j``
    drawn uniformly from the unseen set ``U``; all of ``sum_s_obs``, ``sum_pred_unseen`` and
    ``n_unseen`` are taken *before* ``j`` moves to the seen set. Given the past (and ``S_hat``,
    ``lam`` fixed before the draw) ``E[Y] = theta`` exactly, so ``Y - theta`` is a martingale
    difference. ``lam = 0`` gives the plain without-replacement term
    ``(sum_O S + |U| S_j) / n``.

    Args:
      sum_s_obs: ``sum_O S``, the arm's observed scores summed.
      sum_pred_unseen: ``sum_U S_hat``, predictions summed over the unseen items (including j).
      n_unseen: ``|U| >= 1`` (integer).
      s_j: the drawn item's observed score.
      pred_j: the drawn item's prediction ``S_hat_j``.
      lam: the predictable coefficient in [0, 1].
      n: the number of items (integer).

    Returns:
      ``Y``, broadcast over the arguments' shapes (float32).

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(dr_term(1.0, 1.2, 3, 1.0, 0.5, 1.0, 4)), 6)  # (1 + 1.2 + 3 * (1 - 0.5)) / 4
      0.925
    """
    n_unseen = _f(n_unseen)
    lam = _f(lam)
    return (
        _f(sum_s_obs) + lam * _f(sum_pred_unseen) + n_unseen * (_f(s_j) - lam * _f(pred_j))
    ) / _f(n)


def dr_range(
    sum_s_obs: ArrayLike,
    sum_pred_unseen: ArrayLike,
    n_unseen: ArrayLike,
    max_pred_unseen: ArrayLike,
    min_pred_unseen: ArrayLike,
    lam: ArrayLike,
    n: ArrayLike,
) -> tuple[Array, Array]:
    """Range ``[lo, hi]`` of the next DR term, known before the draw (METHODS.md 2.3).

    With ``A = sum_O S + lam * sum_U S_hat`` and scores bounded in [0, 1]::

        lo = (A + |U| * (0 - lam * max_U S_hat)) / n
        hi = (A + |U| * (1 - lam * min_U S_hat)) / n

    ``lo <= Y <= hi`` for every possible draw, and ``lo <= theta <= hi`` (the conditional
    mean lies in the range), so the range itself is a deterministic confidence interval that
    the confidence sequences intersect with. Width ``|U| (1 + lam (max - min)) / n`` shrinks to
    0 as ``U`` empties. Any ``max_pred_unseen`` at least ``max_U S_hat`` and any
    ``min_pred_unseen`` at most ``min_U S_hat`` still give a valid (looser) range, e.g. the
    maximum and minimum over all items, or 1 and 0, when the unseen set is not tracked.

    Args:
      sum_s_obs: ``sum_O S``.
      sum_pred_unseen: ``sum_U S_hat``.
      n_unseen: ``|U|`` (integer).
      max_pred_unseen: ``max_U S_hat``.
      min_pred_unseen: ``min_U S_hat``.
      lam: the coefficient in [0, 1] that the draw will use.
      n: the number of items (integer).

    Returns:
      ``(lo, hi)`` float32 arrays.

    Example:
      >>> lo, hi = dr_range(1.0, 1.2, 3, 0.5, 0.3, 1.0, 4)
      >>> round(float(lo), 6), round(float(hi), 6)  # (2.2 - 1.5) / 4, (2.2 + 3 * 0.7) / 4
      (0.175, 1.075)
    """
    u = _f(n_unseen)
    lam = _f(lam)
    a = _f(sum_s_obs) + lam * _f(sum_pred_unseen)
    nf = _f(n)
    lo = (a - u * lam * _f(max_pred_unseen)) / nf
    hi = (a + u * (1.0 - lam * _f(min_pred_unseen))) / nf
    return lo, hi


def difference_estimate(
    sum_s_obs: ArrayLike,
    sum_pred_obs: ArrayLike,
    n_obs: ArrayLike,
    sum_pred_all: ArrayLike,
    lam: ArrayLike,
    n: ArrayLike,
) -> Array:
    """The difference (regression) estimate of the arm's accuracy.

    ``theta_hat = lam * mean_all(S_hat) + mean_O(S - lam * S_hat)``, which is algebraically
    the same as each of::

        mean_O(S) + lam * (|U|/n) * (mean_U S_hat - mean_O S_hat)
        (1/n) [ sum_O S + sum_U (lam * S_hat + mean_O(S - lam * S_hat)) ]

    (the second form: observed scores exactly on ``O``; on ``U`` the scaled prediction
    corrected by the mean observed residual). It is exact once the arm is fully observed
    (``|U| = 0`` gives ``mean_O S = theta``), equals the sample mean for ``lam = 0``, and is
    design-unbiased for a fixed sample size with predictions and ``lam`` fixed in advance.
    In the identification loop neither holds (the predictions are refitted on ``O``, ``lam``
    is estimated from the observed pairs, and how many items an arm gets depends on the
    scores), so there it is only approximately unbiased and serves for ranking (METHODS.md 6.3
    found it ranks better than the average of the DR terms); the certified interval and
    the unbiased estimate come from the DR terms.
    With nothing observed (``n_obs = 0``) it returns the mean prediction ``sum_pred_all / n``.

    Args:
      sum_s_obs: ``sum_O S``.
      sum_pred_obs: ``sum_O S_hat`` under the *current* predictions.
      n_obs: ``|O|`` (integer).
      sum_pred_all: ``sum over all n items of S_hat``.
      lam: coefficient in [0, 1].
      n: the number of items (integer).

    Returns:
      The estimate (float32).

    Example:
      >>> # O = {0}, S_0 = 1, S_hat = [0.5, 0.3, 0.2, 0.7]: 0.425 + (1 - 0.5) = 0.925
      >>> round(float(difference_estimate(1.0, 0.5, 1, 1.7, 1.0, 4)), 6)
      0.925
    """
    lam = _f(lam)
    k = _f(n_obs)
    mean_all_pred = _f(sum_pred_all) / _f(n)
    resid = (_f(sum_s_obs) - lam * _f(sum_pred_obs)) / jnp.maximum(k, 1.0)
    return jnp.where(k > 0, lam * mean_all_pred + resid, mean_all_pred)


def naive_pooled(sum_s_obs: ArrayLike, sum_pred_unseen: ArrayLike, n: ArrayLike) -> Array:
    """Naive pooling ``(sum_O S + sum_U S_hat) / n``: observed scores plus raw predictions.

    Biased whenever the predictions are (it has no correction term); it serves as a
    predictable centre for the confidence sequences and as the naive-pooling baseline,
    never as a certified estimate.

    Example:
      >>> round(float(naive_pooled(1.0, 1.2, 4)), 6)
      0.55
    """
    return (_f(sum_s_obs) + _f(sum_pred_unseen)) / _f(n)


class LambdaStats(NamedTuple):
    """Running moments of an arm's past (score, prediction) pairs (Welford updates).

    Attributes:
      count: number of pairs (int32).
      mean_s: mean of the scores.
      mean_p: mean of the predictions (as they were when each item was observed).
      c_sp: ``sum (s - mean_s)(p - mean_p)`` (co-moment).
      m2_p: ``sum (p - mean_p)^2``.
    """

    count: Array
    mean_s: Array
    mean_p: Array
    c_sp: Array
    m2_p: Array


def lambda_stats_init(shape: tuple[int, ...] = ()) -> LambdaStats:
    """Empty :class:`LambdaStats` of the given batch shape (e.g. ``(K,)``).

    Example:
      >>> lambda_stats_init((3,)).count
      Array([0, 0, 0], dtype=int32)
    """
    z = jnp.zeros(shape, jnp.float32)
    return LambdaStats(jnp.zeros(shape, jnp.int32), z, z, z, z)


def lambda_stats_update(
    stats: LambdaStats, s: ArrayLike, p: ArrayLike, valid: ArrayLike = True
) -> LambdaStats:
    """Add one (score, prediction) pair per element; elements with ``valid=False`` are unchanged.

    Numerically stable (Welford); call it once per observed item, e.g. inside the batch loop.

    Example:
      >>> st = lambda_stats_init()
      >>> for s, p in [(1.0, 0.9), (0.0, 0.2), (1.0, 0.7)]:
      ...     st = lambda_stats_update(st, s, p)
      >>> int(st.count), round(float(st.c_sp / st.m2_p), 4)  # least-squares slope
      (3, 1.5385)
    """
    valid = jnp.asarray(valid, bool)
    s = _f(s)
    p = _f(p)
    count = stats.count + valid.astype(jnp.int32)
    w = valid.astype(jnp.float32)
    inv = w / jnp.maximum(count, 1).astype(jnp.float32)
    dp = p - stats.mean_p
    ds = s - stats.mean_s
    mean_p = stats.mean_p + inv * dp
    mean_s = stats.mean_s + inv * ds
    c_sp = stats.c_sp + w * ds * (p - mean_p)
    m2_p = stats.m2_p + w * dp * (p - mean_p)
    # (the state keeps its dtypes: float64 pairs under x64 would widen it, and a lax.scan
    # carry refuses a state whose dtype changed)
    return LambdaStats(count, *(a.astype(b.dtype) for a, b in zip(
        (mean_s, mean_p, c_sp, m2_p), (stats.mean_s, stats.mean_p, stats.c_sp, stats.m2_p))))


def plugin_lambda(
    stats: LambdaStats,
    lam0: ArrayLike,
    n_obs: ArrayLike | None = None,
    shrink: ArrayLike = 10.0,
    min_var: ArrayLike = 1e-6,
) -> Array:
    """Predictable coefficient: the clipped plug-in slope, shrunk toward a prior ``lam0``.

    ``lam_hat = clip(Cov(S, S_hat) / Var(S_hat), 0, 1)`` from the arm's past pairs estimates
    the variance-optimal ``lam* = Cov_U(S, S_hat) / Var_U(S_hat)``; the returned value is
    ``w * lam_hat + (1 - w) * lam0`` with ``w = k / (k + shrink)`` (``k`` = number of pairs),
    clipped to [0, 1]. While the predictions have (almost) no spread on the past pairs
    (``Var <= min_var``) the slope is undefined and ``lam0`` is returned. Use it before a
    draw (or before a batch) and freeze it for that draw: it depends on the past only, so the
    DR term stays unbiased.

    Args:
      stats: the arm's :class:`LambdaStats`.
      lam0: prior coefficient (e.g. learned on training models), in [0, 1].
      n_obs: the number of observations that sets the shrinkage weight; defaults to
        ``stats.count``.
      shrink: pseudo-count of the prior (``0`` = pure plug-in).
      min_var: floor on the mean squared spread of the predictions below which the slope is
        not used.

    Returns:
      ``lam`` in [0, 1] (float32), shaped like the stats.

    Example:
      >>> st = lambda_stats_init()
      >>> for s, p in [(1.0, 0.9), (0.0, 0.2), (1.0, 0.7)]:
      ...     st = lambda_stats_update(st, s, p)
      >>> round(float(plugin_lambda(st, lam0=0.5, shrink=3.0)), 4)  # slope 1.5385 clipped to 1
      0.75
    """
    k = _f(stats.count if n_obs is None else n_obs)
    var_ok = stats.m2_p > _f(min_var) * jnp.maximum(_f(stats.count), 1.0)
    slope = stats.c_sp / jnp.where(var_ok, stats.m2_p, 1.0)
    lam0 = _f(lam0)
    lam_hat = jnp.where(var_ok, jnp.clip(slope, 0.0, 1.0), lam0)
    w = k / (k + _f(shrink))
    w = jnp.where(k > 0, w, 0.0)
    return jnp.clip(w * lam_hat + (1.0 - w) * lam0, 0.0, 1.0)
