"""Intervals for anchor estimates: split-conformal, and an unbiased DR estimate.

**Split-conformal** (:func:`conformal_quantile`): with ``n_cal`` calibration
(validation) models exchangeable with the test models, the interval
``yhat +- q`` with ``q`` the ``ceil((n_cal + 1)(1 - alpha))``-th smallest absolute
calibration residual covers a new model's target with probability at least
``1 - alpha`` (marginally over models). The map must not have been fitted on the
calibration models; choices made on them (ridge strength, method) make the
guarantee approximate, which is why coverage is *measured* on test models.

**Unbiased estimate** (:func:`dr_estimate`, METHODS.md section 2.3 with a finite
population): the anchors ``A`` are observed, per-item predictions ``p`` are fixed
from them, and ``m`` further items are drawn uniformly without replacement from the
non-anchors ``U``. Then

    theta_hat = (1/n) [ sum_A S + sum_U p + |U| * mean_sample(S - p) ]

is exactly unbiased for the row mean over all ``n`` items, whatever the quality of
``p``. Its error is ``(|U|/n)`` times the error of a without-replacement sample
mean of the residuals ``r_j = S_j - p_j``. The interval bounds that error at level
``alpha`` with a betting confidence interval for sampling without replacement
(Waudby-Smith & Ramdas 2020; default), or, more conservatively, by the intersection
of a Hoeffding-Serfling bound (range known from the predictions: ``r_j in [-p_j,
1 - p_j]`` for scores in [0, 1]) and the empirical Bernstein-Serfling bound of
Bardenet & Maillard (2015, Thm 3), each at ``alpha/2`` (union bound). The
guarantee is finite-sample and holds for every model and any predictions:
``P(theta in [lo, hi]) >= 1 - alpha`` over the random draw of the ``m`` items.
It holds for the *row mean of the matrix's items*, not for an external
full-benchmark score.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval._confseq import NUM_TOL
from jaxeval._runner import check_int, concrete_array

__all__ = [
    "conformal_quantile",
    "dr_estimate",
    "serfling_radius",
    "betting_wor_interval",
    "sample_non_anchors",
]


#: Relative widening of a conformal radius: residuals are float32 differences, and a
#: test model whose residual equals the radius must count as covered (a tie lost to
#: rounding, against a float64 truth, undercounted coverage by up to 1.7 pp).
CONFORMAL_MARGIN = 1e-6


def conformal_quantile(residuals: jax.Array, alpha: float | jax.Array) -> jax.Array:
    """Split-conformal radius: the ``ceil((n+1)(1-alpha))``-th smallest ``|residual|``,
    widened by :data:`CONFORMAL_MARGIN` (relative, at least that much absolute) so that
    rounding never turns a tie at the radius into a miss.

    The rank is computed exactly for the float ``alpha`` given (in float32 arithmetic
    ``(n+1)(1-alpha)`` could land just above a whole number and take one rank more, e.g.
    16 instead of 15 at ``n = 24, alpha = 0.4``); a traced ``alpha`` uses float64 where
    enabled, else float32. Returns ``inf`` when ``n`` is too small for the level.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.anchors import conformal_quantile
      >>> round(float(conformal_quantile(jnp.arange(1.0, 20.0), 0.1)), 4)
      18.0
      >>> round(float(conformal_quantile(jnp.arange(1.0, 25.0), 0.4)), 4)  # rank 15
      15.0
    """
    r = jnp.sort(jnp.abs(residuals))
    n = r.shape[0]
    if isinstance(alpha, jax.core.Tracer):
        rank = jnp.ceil((n + 1) * (1 - jnp.asarray(alpha, jnp.result_type(float))))
        rank = rank.astype(jnp.int32)
    else:
        a = float(alpha)
        if not 0.0 < a < 1.0:
            raise ValueError(f"alpha: expected a level in (0, 1), got {alpha!r}")
        # exact rational arithmetic on the binary value of alpha
        rank = math.ceil((n + 1) * (1 - Fraction(a)))
    q = r[jnp.clip(rank - 1, 0, n - 1)]
    q = q + CONFORMAL_MARGIN * jnp.maximum(q, 1.0)
    return jnp.where(rank <= n, q, jnp.inf)


def serfling_radius(
    res: jax.Array, lo_r: jax.Array, hi_r: jax.Array, pop: jax.Array, alpha: float | jax.Array
) -> jax.Array:
    """Two-sided radius for the mean of a finite population from a WoR sample.

    Args:
      res: ``[m]`` sampled values (drawn without replacement from ``pop`` values).
      lo_r, hi_r: known bounds of *every* population value.
      pop: population size ``N`` (``>= m``).
      alpha: total error level (split equally between the two bounds used).

    Returns:
      A radius ``t`` with ``P(|mean(res) - population mean| > t) <= alpha``.
    """
    m = res.shape[0]
    pop = jnp.asarray(pop, res.dtype)
    width = hi_r - lo_r
    a2 = jnp.asarray(alpha, res.dtype) / 2  # per bound; each bound two-sided
    # Hoeffding-Serfling: P(|mean - mu| >= t) <= 2 exp(-2 m t^2 / ((1 - (m-1)/N) w^2))
    rho_h = jnp.maximum(1.0 - (m - 1) / pop, 0.0)
    t_h = width * jnp.sqrt(rho_h * jnp.log(2.0 / a2) / (2.0 * m))
    # Empirical Bernstein-Serfling (Bardenet & Maillard 2015, Thm 3); two-sided via
    # delta = a2 / 2 on each side.
    rho_b = jnp.where(m <= pop / 2, 1.0 - (m - 1) / pop, (1.0 - m / pop) * (1.0 + 1.0 / m))
    sd = jnp.std(res)  # biased (1/m) estimator, as in the theorem
    kappa = 7.0 / 3.0 + 3.0 / math.sqrt(2.0)
    lg = jnp.log(5.0 / (a2 / 2.0))
    t_b = sd * jnp.sqrt(2.0 * jnp.maximum(rho_b, 0.0) * lg / m) + kappa * width * lg / m
    t = jnp.minimum(t_h, t_b)
    return jnp.where(m >= pop, 0.0, t)


def betting_wor_interval(
    x: jax.Array, pop: jax.Array, alpha: float | jax.Array, grid_size: int = 1000
) -> tuple[jax.Array, jax.Array]:
    """Betting confidence interval for a finite population mean, sampling WoR.

    Waudby-Smith & Ramdas (2020): for a candidate mean ``mu`` of the ``pop`` values
    in [0, 1], the ``t``-th draw (in draw order) has conditional mean
    ``mu_t = (pop * mu - sum_{i<t} x_i) / (pop - t + 1)``; the hedged capital
    ``max(K+/2, K-/2)`` with ``K+- = prod (1 +- lam_i (x_i - mu_t))`` and predictable
    bets (empirical-Bernstein plug-in, capped at ``1/2`` of the bound that keeps the
    capital non-negative) is a non-negative supermartingale under ``mu``, so by
    Ville's inequality ``mu`` is rejected with probability at most ``alpha`` when it is
    the truth. The interval is the hull of the candidates never rejected on a grid
    (widened by one grid step). Candidates that the sample makes impossible
    (``mu_t`` outside [0, 1]) are rejected.

    Args:
      x: ``[m]`` draws in [0, 1], in the order they were drawn.
      pop: population size ``N >= m``.
      alpha: error level.
      grid_size: candidates on [0, 1] (static).

    Returns:
      ``(lower, upper)`` for the population mean.
    """
    grid_size = check_int("grid_size", grid_size, 2)  # (one candidate has no grid step)
    m = x.shape[0]
    dt = x.dtype
    pop = jnp.asarray(pop, dt)
    grid = jnp.linspace(0.0, 1.0, grid_size, dtype=dt)
    t = jnp.arange(1, m + 1, dtype=dt)
    prev = jnp.concatenate([jnp.zeros((1,), dt), jnp.cumsum(x)[:-1]])
    mu_t = (pop * grid[:, None] - prev[None, :]) / jnp.maximum(pop - t + 1.0, 1.0)  # [G, m]
    # predictable variance estimate and bet size (depend on past draws only)
    xbar = (0.5 + jnp.cumsum(x)) / (t + 1.0)
    xbar_prev = jnp.concatenate([jnp.full((1,), 0.5, dt), xbar[:-1]])
    sq = jnp.cumsum((x - xbar_prev) ** 2)
    var_prev = jnp.concatenate([jnp.full((1,), 0.25, dt), (0.25 + sq[:-1]) / (t[:-1] + 1.0)])
    lam = jnp.sqrt(2.0 * jnp.log(2.0 / jnp.asarray(alpha, dt)) / (jnp.maximum(var_prev, 1e-6) * m))
    lam_p = jnp.minimum(lam[None, :], 0.5 / jnp.maximum(mu_t, 1e-6))
    lam_m = jnp.minimum(lam[None, :], 0.5 / jnp.maximum(1.0 - mu_t, 1e-6))
    d = x[None, :] - mu_t
    logk_p = jnp.cumsum(jnp.log1p(lam_p * d), axis=1)
    logk_m = jnp.cumsum(jnp.log1p(-lam_m * d), axis=1)
    logk = jnp.maximum(logk_p, logk_m) + jnp.log(0.5)
    impossible = jnp.any((mu_t < 0.0) | (mu_t > 1.0), axis=1)
    reject = impossible | jnp.any(logk >= jnp.log(1.0 / jnp.asarray(alpha, dt)), axis=1)
    reject = jnp.where(jnp.all(reject), False, reject)  # never return an empty set
    step = 1.0 / (grid_size - 1)
    lo = jnp.min(jnp.where(reject, jnp.inf, grid)) - step
    hi = jnp.max(jnp.where(reject, -jnp.inf, grid)) + step
    return jnp.clip(lo, 0.0, 1.0), jnp.clip(hi, 0.0, 1.0)


def sample_non_anchors(key: jax.Array, anchors: jax.Array, n: int, m: int) -> jax.Array:
    """``m`` items drawn uniformly without replacement from the non-anchors (int32).

    ``n`` and ``m`` are static; ``m`` may be at most ``n - k`` (``k`` distinct anchors).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import sample_non_anchors
      >>> s = sample_non_anchors(jax.random.key(0), jnp.array([0, 1, 2]), 6, 3)
      >>> sorted(s.tolist())
      [3, 4, 5]
    """
    k = anchors.shape[0]
    m = check_int("m", m, 0, n - k, why=f"the {n} items less the {k} anchors")
    is_anchor = jnp.zeros((n,), bool).at[anchors].set(True)
    u = jnp.where(is_anchor, jnp.inf, jax.random.uniform(key, (n,), jnp.float32))
    return _draw_order(u, jax.random.fold_in(key, 1))[:m].astype(jnp.int32)


def _draw_order(u: jax.Array, key: jax.Array) -> jax.Array:
    """Indices sorting ``u`` ascending, equal values in an order drawn with ``key``.

    A float32 uniform takes 2**23 values, so among 10^4 items about six pairs tie; a
    stable sort would put the lower index first and make the draw slightly
    non-uniform. 32 more random bits break the ties (no change where none tie)."""
    v = jax.random.bits(key, u.shape, jnp.uint32)
    return jnp.lexsort((v, u))


def _concrete_indices(x: Any) -> np.ndarray | None:
    """``x`` as a NumPy array keeping its dtype, or None when traced."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


def _check_dr_arguments(preds, anchors, anchor_scores, sample, sample_scores, alpha,
                        interval) -> None:
    """:func:`dr_estimate`'s argument checks: shapes and ``interval`` always (static),
    values only where concrete (a traced value, under ``jit`` or ``vmap``, is the
    caller's to keep valid, and costs nothing here)."""
    fn = "dr_estimate"
    if not isinstance(interval, str) or interval not in ("betting", "serfling"):
        raise ValueError(f"{fn}: interval must be 'betting' or 'serfling', got {interval!r}")
    if jnp.ndim(preds) != 1:
        raise ValueError(f"{fn}: preds: expected a 1-d array of per-item predictions, got "
                         f"shape {jnp.shape(preds)}")
    n = jnp.shape(preds)[0]
    for name, idx, sc, sc_name in (("anchors", anchors, anchor_scores, "anchor_scores"),
                                   ("sample", sample, sample_scores, "sample_scores")):
        if jnp.ndim(idx) != 1:
            raise ValueError(f"{fn}: {name}: expected a 1-d array of item indices, got "
                             f"shape {jnp.shape(idx)}")
        if jnp.shape(sc) != jnp.shape(idx):
            raise ValueError(f"{fn}: {sc_name}: expected one score per item of {name}, "
                             f"shape {jnp.shape(idx)}, got shape {jnp.shape(sc)}")
    a = concrete_array(alpha)
    if a is not None and not np.all((a > 0) & (a < 1)):
        raise ValueError(f"{fn}: alpha must lie in (0, 1), got {alpha!r}")
    got = {}
    for name, idx in (("anchors", anchors), ("sample", sample)):
        v = _concrete_indices(idx)
        if v is None:
            continue
        if not np.issubdtype(v.dtype, np.integer):
            raise TypeError(f"{fn}: {name}: expected integer item indices, got dtype "
                            f"{v.dtype}")
        out = v[(v < -n) | (v >= n)]
        if out.size:
            raise ValueError(f"{fn}: {name}: item indices must lie in [-{n}, {n}) (the "
                             f"items of preds), got {out[:5].tolist()}")
        v = v % n if n else v  # (negative indices count from the end, as numpy's)
        uniq, counts = np.unique(v, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"{fn}: {name}: expected distinct items, got "
                             f"{uniq[counts > 1][:5].tolist()} more than once")
        got[name] = v
    # (within a float32 rounding margin, as the confidence sequences take their terms;
    # predictions are read at the non-anchor items only)
    lo, hi = -NUM_TOL, 1 + NUM_TOL
    for name, x in (("preds", preds), ("anchor_scores", anchor_scores),
                    ("sample_scores", sample_scores)):
        v = concrete_array(x)
        if v is None:
            continue
        ok = (v >= lo) & (v <= hi)
        if name == "preds" and "anchors" in got:
            ok[got["anchors"]] = True
        bad = np.flatnonzero(~ok)
        if bad.size:
            raise ValueError(f"{fn}: {name} must lie in [0, 1], got {float(v[bad[0]])} at "
                             f"index {int(bad[0])}")
    if len(got) == 2:
        both = np.intersect1d(got["anchors"], got["sample"])
        if both.size:
            raise ValueError(f"{fn}: sample: expected non-anchor items, got the anchor(s) "
                             f"{both.tolist()}")


def dr_estimate(
    preds: jax.Array,
    anchors: jax.Array,
    anchor_scores: jax.Array,
    sample: jax.Array,
    sample_scores: jax.Array,
    alpha: float | jax.Array = 0.1,
    interval: str = "betting",
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unbiased anchors + random-items estimate of the row mean, with a valid interval.

    Args:
      preds: ``[n]`` per-item predictions in [0, 1], fixed before ``sample`` is drawn.
      anchors: ``[k]`` anchor indices; ``anchor_scores`` their scores.
      sample: ``[m]`` non-anchor items drawn uniformly without replacement, in draw order.
      sample_scores: ``[m]`` their scores.
      alpha: error level of the interval.
      interval: ``"betting"`` (default; :func:`betting_wor_interval` on the residuals,
        variance-adaptive) or ``"serfling"`` (:func:`serfling_radius`).

    Returns:
      ``(estimate, lower, upper)``, the bounds clipped to [0, 1] and to what the
      observed scores make certain (every unobserved item scoring 0, or 1), so the
      interval shrinks to the true mean as ``sample`` covers every non-anchor.

    Raises:
      ValueError: ``interval`` is unknown, or the shapes do not match (``preds``
        1-d, ``anchor_scores`` shaped like ``anchors``, ``sample_scores`` like
        ``sample``), always (both are static); and, for concrete values only:
        ``alpha`` outside (0, 1), ``preds`` or a score outside [0, 1] (or NaN),
        ``anchors`` or ``sample`` not distinct integer indices of the ``n`` items, or
        a ``sample`` item that is an anchor.

    Concrete arguments are checked; traced ones are the caller's to keep valid: under
    ``jit`` or ``vmap`` nothing is checked (at no cost), and bad values give numbers
    without meaning (``alpha = 1.5`` a narrow interval that need not contain its own
    estimate; an anchor index past the end is dropped from the anchor mask and a
    sample index past the end reads the last prediction).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.anchors import dr_estimate
      >>> p = jnp.full(6, 0.5)
      >>> est, lo, hi = dr_estimate(p, jnp.array([0]), jnp.array([1.0]),
      ...                           jnp.array([1, 2]), jnp.array([1.0, 0.0]))
      >>> round(float(est), 4)
      0.5833
    """
    _check_dr_arguments(preds, anchors, anchor_scores, sample, sample_scores, alpha, interval)
    n = preds.shape[0]
    k = anchors.shape[0]
    is_anchor = jnp.zeros((n,), bool).at[anchors].set(True)
    pop = n - k
    known = jnp.sum(anchor_scores) + jnp.sum(jnp.where(is_anchor, 0.0, preds))
    res = sample_scores - preds[sample]
    est = (known + pop * jnp.mean(res)) / n
    # every non-anchor residual lies in [-max p, 1 - min p]
    lo_r = -jnp.max(jnp.where(is_anchor, -jnp.inf, preds))
    hi_r = 1.0 - jnp.min(jnp.where(is_anchor, jnp.inf, preds))
    if interval == "serfling":
        # (+1e-6: at m = N the radius is 0 and float32 rounding of est would decide)
        rad = (pop / n) * serfling_radius(res, lo_r, hi_r, pop, alpha) + 1e-6
        lo, hi = est - rad, est + rad
    elif interval == "betting":
        w = jnp.maximum(hi_r - lo_r, 1e-6)
        ml, mh = betting_wor_interval((res - lo_r) / w, pop, alpha)
        lo = (known + pop * (lo_r + w * ml)) / n
        hi = (known + pop * (lo_r + w * mh)) / n
    else:  # (refused by _check_dr_arguments)
        raise AssertionError(interval)
    # what is certain: the unobserved non-anchors score in [0, 1]. Intersecting with
    # these bounds keeps the interval valid, makes it exact once every item is
    # observed, and replaces the betting grid's [0, 1] fallback when it is too coarse
    # for the few items left (a margin of 1e-6 absorbs float32 rounding of the sums).
    # An interval wholly outside them has missed the mean: the certain bounds replace
    # it (clamping both ends collapsed it onto a point just outside the mean, which at
    # full sampling missed ~1% of rows)
    seen = jnp.sum(anchor_scores) + jnp.sum(sample_scores)
    left = pop - sample.shape[0]
    sure_lo, sure_hi = seen / n - 1e-6, (seen + left) / n + 1e-6
    lo, hi = jnp.maximum(lo, sure_lo), jnp.minimum(hi, sure_hi)
    empty = lo > hi
    lo, hi = jnp.where(empty, sure_lo, lo), jnp.where(empty, sure_hi, hi)
    return est, jnp.clip(lo, 0.0, 1.0), jnp.clip(hi, 0.0, 1.0)


def level_text(alpha: float) -> str:
    """The coverage ``1 - alpha`` in percent for messages: ``"90%"``, ``"97.5%"``,
    ``"99.999%"`` (four significant figures, more where four would print 100%: up to
    17, and for an ``alpha`` below float64's resolution of ``1 - alpha``, such as
    ``1e-17``, ``"(100 - 1e-15)%"``; never ``"100%"`` for ``alpha > 0``)."""
    alpha = float(alpha)
    pct = 100.0 * (1.0 - alpha)
    text = f"{pct:.4g}"
    if text == "100" and alpha > 0:
        text = f"{pct:.12g}"
        for digits in range(13, 18):  # (12 digits print 100 from alpha ~ 5e-15 down)
            if text != "100":
                break
            text = f"{pct:.{digits}g}"
        if text == "100":  # (1 - alpha rounds to 1)
            text = f"(100 - {100.0 * alpha:.4g})"
    return text + "%"
