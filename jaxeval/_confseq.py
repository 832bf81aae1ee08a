"""Anytime-valid confidence sequences for the mean of martingale terms with known ranges.

Setting. An arm produces terms ``Y_1, Y_2, ...`` (e.g. the doubly robust terms of
:mod:`jaxeval._estimators`) with ``E[Y_k | past] = theta`` and a range ``lo_k <= Y_k <= hi_k``
known before the draw. A confidence sequence ``[L_t, U_t]`` satisfies
``P(exists t: theta not in [L_t, U_t]) <= alpha`` — valid at every time at once, hence at any
adaptive, data-dependent stopping time. Each side spends ``alpha / 2`` (two-sided level
``alpha``; the bandit loop passes ``alpha' = alpha / K`` per arm for simultaneity over arms).

Every kind is three pure functions over a NamedTuple state (plus :func:`finalize`),
elementwise over any batch shape (arms, replicates), jittable, with ``alpha`` a dynamic array
(a new level never retraces)::

    cs = get("eb")                          # or "hoeffding", "betting"
    state = cs.init((K,))
    state = cs.update(state, y, lo, hi, center, alpha)   # one term per element
    lower, upper = cs.bounds(state)
    state = cs.finalize(state, exact_value, done)        # fully evaluated arms are exact

``lo``, ``hi`` and ``center`` must be *predictable*: fixed before ``y`` is drawn. ``update``
takes an optional ``active`` mask (elements where it is False are left unchanged), which is how
a loop that pulls one arm updates a ``[K]`` state. Bounds are the running intersection of the
per-time intervals, clipped to [0, 1] (the mean of scores in [0, 1]) and intersected with every
``[lo_k, hi_k]`` (the conditional mean always lies in the range, so this is free), each new
bound moved out by a float32 rounding margin ``NUM_TOL = 1e-5`` (theta can sit exactly on a
range end, e.g. once every unseen score is 0, and float32 may put it one ulp outside). The
intervals are nested in time, so "theta ever left the interval" equals "theta is outside the
current interval". ``lower > upper`` (an empty set) can only happen on the miscoverage event,
whose probability is at most ``alpha``; the bounds are reported as they are.

Kinds:

- ``"eb"`` — empirical Bernstein with predictable plug-in bets and per-step ranges, METHODS.md 2.4.
  Lower side, with ``m_k`` the predictable centre, ``c_k = max(m_k - lo_k, eps)``,
  ``b_k = min(sqrt(2 log(2/alpha) / (sigma2_k k log(1 + k))), 0.5 / c_k)``, ``g_k = b_k c_k``,
  ``psi(g) = -log(1 - g) - g``::

      LCB_t = [sum_k b_k Y_k - log(2/alpha) - sum_k psi(g_k) (Y_k - m_k)^2 / c_k^2] / sum_k b_k

  and the mirror image with ``c'_k = max(hi_k - m_k, eps)``. Validity: with
  ``xi = (Y - m)/c >= -1``, Fan et al.'s inequality ``exp(g xi - psi(g) xi^2) <= 1 + g xi``
  and ``1 + x <= e^x`` make ``prod_k exp(b_k (Y_k - theta) - psi(g_k) xi_k^2)`` a non-negative
  supermartingale; Ville's inequality bounds its crossing of ``2/alpha``.
  Variance estimate *(our choice)*: the terms' scale shrinks with the range (for DR terms the
  spread is ``(|U|/n)`` times a fixed population spread), so the running estimate is kept on
  *normalised residuals* ``z_i = (Y_i - m_i) / w_i`` with ``w_i = hi_i - lo_i``::

      s2_{k-1} = (1/4 + sum_{i<k} z_i^2) / k,        sigma2_k = w_k^2 * s2_{k-1}

  (prior: one pseudo-observation of variance 1/4, the largest for a [0, 1] variable). It is
  the second moment about the centre, which is what the penalty term charges. It is
  predictable, so any value keeps validity; it only moves the width.
- ``"hoeffding"`` — predictable-mixture Hoeffding: ``Y_k`` is sub-Gaussian with variance
  proxy ``w_k^2 / 4`` (Hoeffding's lemma), so ``prod exp(l_k (Y_k - theta) - l_k^2 w_k^2 / 8)``
  is a supermartingale; ``l_k = sqrt(8 log(2/alpha) / (k log(1 + k))) / w_k`` and
  ``LCB_t = [sum l Y - log(2/alpha) - sum l^2 w^2 / 8] / sum l`` (UCB mirrored). The centre is
  unused. The identification loop feeds it the plain (``lam = 0``) terms and ranges whatever
  the policy's ``lam``: this is what a careful user of the plain mean would report (METHODS.md 2.4).
- ``"betting"`` — the tight reference: for each of ``G`` cells ``[e_g, e_{g+1}]`` of a grid on
  [0, 1], a lower-side capital process ``prod (1 + l_k (Y_k - e_{g+1}))`` and an upper-side
  one ``prod (1 + l'_k (e_g - Y_k))``, with predictable aGRAPA bets
  ``l = clip((mu - m) / (v + (mu - m)^2), 0, 1 / (2 (m - lo)))`` (mirrored for the upper side),
  ``mu`` a predictable inverse-variance weighted running mean of the terms (the centre counts
  as one pseudo-observation) and ``v = w_k^2 s2`` with ``s2`` as in EB but measured about
  ``mu`` rather than the centre. If ``theta`` is in cell ``g`` each
  process is dominated by a non-negative martingale at ``theta`` (testing at the cell's far
  edge only lowers the capital, and the cap keeps every factor positive), so by Ville's
  inequality the cell is ever rejected (running maximum of the log capital
  ``>= log(2/alpha)``) with probability at most ``alpha``. Bounds are the outer edges of the
  cells never rejected: valid without any monotonicity of the capital in ``m``, conservative at
  grid resolution ``1/G``. Memory is ``4 G`` floats per element.

Example:
  >>> import jax.numpy as jnp
  >>> cs = get("eb")
  >>> st = cs.init((2,))
  >>> for y in (0.7, 0.4, 0.6, 0.5):
  ...     st = cs.update(st, jnp.full(2, y), 0.0, 1.0, 0.5, jnp.float32(0.05))
  >>> lo, hi = cs.bounds(st)
  >>> bool(jnp.all(lo <= hi)), lo.shape
  (True, (2,))
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

__all__ = [
    "KINDS",
    "NUM_TOL",
    "BettingState",
    "ConfSeq",
    "EBState",
    "HoeffdingState",
    "finalize",
    "get",
]

KINDS = ("eb", "hoeffding", "betting")
_EPS = 1e-6  # floor on ranges and on the distance from the centre to a range end
# Rounding margin added to every new bound. In float32 a range end that equals theta exactly
# (e.g. every remaining unseen score at its bound) can come out one ulp on the wrong side, and
# the running sums of weighted terms carry relative errors of order 1e-7 * sqrt(terms).
NUM_TOL = 1e-5
_PRIOR_VAR = 0.25  # prior second moment of the normalised residuals (one pseudo-observation)


def _f(x: ArrayLike) -> Array:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def _select(active: ArrayLike | None, new: Any, old: Any) -> Any:
    """Tree-wise ``where(active, new, old)``; ``active`` broadcasts over trailing grid axes.
    The new state keeps the old one's dtypes (float64 terms under x64 made its sums
    float64, which a ``lax.scan`` carry refuses)."""
    new = jax.tree.map(lambda a, b: jnp.asarray(a).astype(b.dtype), new, old)
    if active is None:
        return new
    active = jnp.asarray(active, bool)

    def pick(a, b):
        m = active.reshape(active.shape + (1,) * (a.ndim - active.ndim))
        return jnp.where(m, a, b)

    return jax.tree.map(pick, new, old)


def _psi_over_g2(g: Array) -> Array:
    """``psi(g) / g^2`` with ``psi(g) = -log(1 - g) - g``, stable for small g (g in [0, 1))."""
    small = g < 1e-2
    gs = jnp.where(small, 0.5, g)  # a safe stand-in where the series is used
    series = 0.5 + g / 3.0 + g**2 / 4.0 + g**3 / 5.0
    direct = (-jnp.log1p(-gs) - gs) / gs**2
    return jnp.where(small, series, direct)


def _time_factor(k: Array) -> Array:
    """``k log(1 + k)`` for the (1-based, integer) term index ``k``."""
    kf = k.astype(jnp.float32)
    return kf * jnp.log1p(kf)


def _clip_running(lower, upper, new_lower, new_upper, lo, hi):
    """Running intersection with the new interval and with the range, clipped to [0, 1];
    each new bound is first moved out by the float32 rounding margin :data:`NUM_TOL`."""
    lower = jnp.maximum(lower, jnp.maximum(new_lower, lo) - NUM_TOL)
    upper = jnp.minimum(upper, jnp.minimum(new_upper, hi) + NUM_TOL)
    return jnp.clip(lower, 0.0, 1.0), jnp.clip(upper, 0.0, 1.0)


def finalize(
    state: Any, exact_value: ArrayLike, done: ArrayLike, margin: ArrayLike = NUM_TOL
) -> Any:
    """Set the interval to ``[exact - margin, exact + margin]`` where ``done`` (the arm is
    fully evaluated), clipped to [0, 1].

    Works for every kind's state (it only touches the ``lower`` and ``upper`` fields).
    ``exact`` is a float32 running sum divided by ``n``; the true mean, computed by
    another reduction, can differ from it by rounding (none for 0/1 scores, whose sums
    are exact; up to ``n`` ulps of the mean for graded ones), so the exact interval gets
    a rounding margin (:data:`NUM_TOL`, or what the caller passes: the identification
    loop adds the worst-case ``n * 2**-24 * exact``). The margin must be ``>= 0`` (a
    concrete negative one is refused; a traced one is the caller's to keep so).

    Example:
      >>> import jax.numpy as jnp
      >>> st = finalize(get("hoeffding").init((2,)), jnp.array([0.3, 0.6]),
      ...               jnp.array([True, False]))
      >>> [round(float(x), 3) for x in st.lower], [round(float(x), 3) for x in st.upper]
      ([0.3, 0.0], [0.3, 1.0])
    """
    done = jnp.asarray(done, bool)
    exact = _f(exact_value)
    from jaxeval._runner import concrete_array

    concrete = concrete_array(margin)
    if concrete is not None and not np.all(concrete >= 0):
        raise ValueError(f"confseq.finalize: margin must be >= 0 (the interval "
                         f"[exact - margin, exact + margin]), got {margin!r}")
    margin = _f(margin)
    lo = jnp.clip(exact - margin, 0.0, 1.0)
    hi = jnp.clip(exact + margin, 0.0, 1.0)
    return state._replace(
        lower=jnp.where(done, lo, state.lower).astype(state.lower.dtype),
        upper=jnp.where(done, hi, state.upper).astype(state.upper.dtype),
    )


def _bounds(state: Any) -> tuple[Array, Array]:
    return state.lower, state.upper


# --------------------------------------------------------------------------------------------
# Empirical Bernstein


class EBState(NamedTuple):
    """State of the empirical-Bernstein sequence (every field shaped like the arms).

    Attributes:
      count: terms seen (int32).
      sum_z2: sum of squared normalised residuals ``((Y - m) / w)^2``.
      sum_b_lo, sum_by_lo, sum_pen_lo: lower side ``sum b``, ``sum b Y``, ``sum psi xi^2``.
      sum_b_hi, sum_by_hi, sum_pen_hi: the same for the upper side.
      lower, upper: the running bounds.
    """

    count: Array
    sum_z2: Array
    sum_b_lo: Array
    sum_by_lo: Array
    sum_pen_lo: Array
    sum_b_hi: Array
    sum_by_hi: Array
    sum_pen_hi: Array
    lower: Array
    upper: Array


def eb_init(shape: tuple[int, ...] = ()) -> EBState:
    """Empty :class:`EBState`: interval [0, 1]."""
    z = jnp.zeros(shape, jnp.float32)
    return EBState(
        jnp.zeros(shape, jnp.int32), z, z, z, z, z, z, z, z, jnp.ones(shape, jnp.float32)
    )


def eb_update(
    state: EBState,
    y: ArrayLike,
    lo: ArrayLike,
    hi: ArrayLike,
    center: ArrayLike,
    alpha: ArrayLike,
    active: ArrayLike | None = None,
) -> EBState:
    """One empirical-Bernstein step (METHODS.md 2.4); see the module docstring for the formula."""
    y, lo, hi, m, alpha = (_f(a) for a in (y, lo, hi, center, alpha))
    log_term = jnp.log(2.0 / alpha)
    k = state.count + 1
    w = jnp.maximum(hi - lo, _EPS)
    s2 = (_PRIOR_VAR + state.sum_z2) / k.astype(jnp.float32)
    sigma2 = w**2 * s2
    b_base = jnp.sqrt(2.0 * log_term / (sigma2 * _time_factor(k)))
    c_lo = jnp.maximum(m - lo, _EPS)
    c_hi = jnp.maximum(hi - m, _EPS)
    b_lo = jnp.minimum(b_base, 0.5 / c_lo)
    b_hi = jnp.minimum(b_base, 0.5 / c_hi)
    d2 = (y - m) ** 2
    # psi(g) (Y - m)^2 / c^2 = [psi(g) / g^2] b^2 (Y - m)^2, stable when g is tiny
    pen_lo = _psi_over_g2(b_lo * c_lo) * b_lo**2 * d2
    pen_hi = _psi_over_g2(b_hi * c_hi) * b_hi**2 * d2
    sum_b_lo = state.sum_b_lo + b_lo
    sum_by_lo = state.sum_by_lo + b_lo * y
    sum_pen_lo = state.sum_pen_lo + pen_lo
    sum_b_hi = state.sum_b_hi + b_hi
    sum_by_hi = state.sum_by_hi + b_hi * y
    sum_pen_hi = state.sum_pen_hi + pen_hi
    lcb = (sum_by_lo - log_term - sum_pen_lo) / sum_b_lo
    ucb = (sum_by_hi + log_term + sum_pen_hi) / sum_b_hi
    lower, upper = _clip_running(state.lower, state.upper, lcb, ucb, lo, hi)
    new = EBState(
        k,
        state.sum_z2 + d2 / w**2,
        sum_b_lo,
        sum_by_lo,
        sum_pen_lo,
        sum_b_hi,
        sum_by_hi,
        sum_pen_hi,
        lower,
        upper,
    )
    return _select(active, new, state)


# --------------------------------------------------------------------------------------------
# Hoeffding


class HoeffdingState(NamedTuple):
    """State of the predictable-mixture Hoeffding sequence.

    Attributes:
      count: terms seen (int32).
      sum_l, sum_ly, sum_pen: ``sum l``, ``sum l Y``, ``sum l^2 w^2 / 8``.
      lower, upper: the running bounds.
    """

    count: Array
    sum_l: Array
    sum_ly: Array
    sum_pen: Array
    lower: Array
    upper: Array


def hoeffding_init(shape: tuple[int, ...] = ()) -> HoeffdingState:
    """Empty :class:`HoeffdingState`: interval [0, 1]."""
    z = jnp.zeros(shape, jnp.float32)
    return HoeffdingState(jnp.zeros(shape, jnp.int32), z, z, z, z, jnp.ones(shape, jnp.float32))


def hoeffding_update(
    state: HoeffdingState,
    y: ArrayLike,
    lo: ArrayLike,
    hi: ArrayLike,
    center: ArrayLike,
    alpha: ArrayLike,
    active: ArrayLike | None = None,
) -> HoeffdingState:
    """One Hoeffding step with per-step range ``w = hi - lo``; ``center`` is unused."""
    del center
    y, lo, hi, alpha = (_f(a) for a in (y, lo, hi, alpha))
    log_term = jnp.log(2.0 / alpha)
    k = state.count + 1
    w = jnp.maximum(hi - lo, _EPS)
    lam = jnp.sqrt(8.0 * log_term / _time_factor(k)) / w
    sum_l = state.sum_l + lam
    sum_ly = state.sum_ly + lam * y
    sum_pen = state.sum_pen + log_term / _time_factor(k)  # = lam^2 w^2 / 8
    lcb = (sum_ly - log_term - sum_pen) / sum_l
    ucb = (sum_ly + log_term + sum_pen) / sum_l
    lower, upper = _clip_running(state.lower, state.upper, lcb, ucb, lo, hi)
    new = HoeffdingState(k, sum_l, sum_ly, sum_pen, lower, upper)
    return _select(active, new, state)


# --------------------------------------------------------------------------------------------
# Betting over a grid of candidate means


class BettingState(NamedTuple):
    """State of the grid betting sequence; grid fields carry a trailing ``[G]`` axis.

    Attributes:
      count: terms seen (int32).
      sum_wy, sum_w: inverse-variance weighted sums ``sum Y / w^2`` and ``sum 1 / w^2``.
      sum_z2: sum of squared normalised residuals about the running mean.
      logk_lo, logk_hi: ``[..., G]`` current log capital of the lower / upper tests per cell.
      maxlog_lo, maxlog_hi: ``[..., G]`` running maxima of the log capitals.
      lower, upper: the running bounds.
    """

    count: Array
    sum_wy: Array
    sum_w: Array
    sum_z2: Array
    logk_lo: Array
    logk_hi: Array
    maxlog_lo: Array
    maxlog_hi: Array
    lower: Array
    upper: Array


def _betting_fns(grid_size: int, truncation: float):
    edges = np.linspace(0.0, 1.0, grid_size + 1, dtype=np.float32)  # constants, not tracers
    left, right = edges[:-1], edges[1:]

    def init(shape: tuple[int, ...] = ()) -> BettingState:
        z = jnp.zeros(shape, jnp.float32)
        zg = jnp.zeros(tuple(shape) + (grid_size,), jnp.float32)
        return BettingState(
            jnp.zeros(shape, jnp.int32), z, z, z, zg, zg, zg, zg, z, jnp.ones(shape, jnp.float32)
        )

    def update(state, y, lo, hi, center, alpha, active=None):
        y, lo, hi, m0, alpha = (_f(a) for a in (y, lo, hi, center, alpha))
        log_thr = jnp.log(2.0 / alpha)
        k = state.count + 1
        w = jnp.maximum(hi - lo, _EPS)
        iw = 1.0 / w**2
        # predictable mean estimate: past terms (inverse-variance weights) + the centre
        mu = jnp.clip((state.sum_wy + m0 * iw) / (state.sum_w + iw), lo, hi)
        v = w**2 * (_PRIOR_VAR + state.sum_z2) / k.astype(jnp.float32)
        mu_, v_, y_, lo_, hi_ = (a[..., None] for a in (mu, v, y, lo, hi))
        # lower side: test at the cell's right edge, bet that the mean is above it
        d_lo = mu_ - right
        cap_lo = truncation / jnp.maximum(right - lo_, _EPS)
        l_lo = jnp.clip(d_lo / (v_ + d_lo**2), 0.0, cap_lo)
        # in exact arithmetic l * (y - m) >= -truncation; the clamp only absorbs rounding
        logk_lo = state.logk_lo + jnp.log1p(jnp.maximum(l_lo * (y_ - right), -truncation))
        # upper side: test at the cell's left edge, bet that the mean is below it
        d_hi = left - mu_
        cap_hi = truncation / jnp.maximum(hi_ - left, _EPS)
        l_hi = jnp.clip(d_hi / (v_ + d_hi**2), 0.0, cap_hi)
        logk_hi = state.logk_hi + jnp.log1p(jnp.maximum(l_hi * (left - y_), -truncation))
        maxlog_lo = jnp.maximum(state.maxlog_lo, logk_lo)
        maxlog_hi = jnp.maximum(state.maxlog_hi, logk_hi)
        alive = (maxlog_lo < log_thr[..., None]) & (maxlog_hi < log_thr[..., None])
        new_lower = jnp.min(jnp.where(alive, left, 1.0), axis=-1)
        new_upper = jnp.max(jnp.where(alive, right, 0.0), axis=-1)
        lower, upper = _clip_running(state.lower, state.upper, new_lower, new_upper, lo, hi)
        new = BettingState(
            k,
            state.sum_wy + y * iw,
            state.sum_w + iw,
            state.sum_z2 + (y - mu) ** 2 / w**2,
            logk_lo,
            logk_hi,
            maxlog_lo,
            maxlog_hi,
            lower,
            upper,
        )
        return _select(active, new, state)

    return init, update


# --------------------------------------------------------------------------------------------
# Registry


class ConfSeq(eqx.Module):
    """A confidence-sequence kind: ``init``, ``update``, ``bounds``, ``finalize``.

    All fields are static, so the object is a leafless pytree: it can be closed over or passed
    through ``jax.jit`` freely, and equal kinds hit the same compile cache.

    Attributes:
      name: ``"eb"``, ``"hoeffding"`` or ``"betting"``.
      init: ``init(shape) -> state`` with interval [0, 1].
      update: ``update(state, y, lo, hi, center, alpha, active=None) -> state``.
      bounds: ``bounds(state) -> (lower, upper)``.
      finalize: ``finalize(state, exact_value, done, margin=NUM_TOL) -> state``.
    """

    name: str = eqx.field(static=True)
    init: Callable[..., Any] = eqx.field(static=True)
    update: Callable[..., Any] = eqx.field(static=True)
    bounds: Callable[..., Any] = eqx.field(static=True)
    finalize: Callable[..., Any] = eqx.field(static=True)


_CACHE: dict[tuple, ConfSeq] = {}


def _on_active(arrays: list[np.ndarray], act: np.ndarray | None, shape: tuple = ()):
    """``arrays`` broadcast together and with the state's ``shape`` (on trailing axes, as
    ``update`` broadcasts them; and to ``act``'s shape where the mask has more axes), with
    the mask of their elements that ``update`` changes; None where the shapes do not
    broadcast (JAX's to refuse, with its own message)."""
    try:
        arrays = np.broadcast_arrays(*arrays, np.empty(shape, bool))[:-1]
        if act is not None and act.ndim > arrays[0].ndim:
            # terms of fewer axes than the mask (scalars over a [K] state): to its shape,
            # so that its active elements are checked (they were skipped)
            arrays = np.broadcast_arrays(*arrays, np.empty(act.shape, bool))[:-1]
        shape = arrays[0].shape
        if act is None:
            on = np.ones(shape, bool)
        else:  # (on the leading axes, as update applies it: a [K] mask of [K, M] terms)
            act = act != 0
            on = np.broadcast_to(act.reshape(act.shape + (1,) * (len(shape) - act.ndim)),
                                 shape)
    except ValueError:
        return None
    return arrays, on


def _check_update(y: Any, lo: Any, hi: Any, alpha: Any, active: Any, center: Any = 0.5,
                  uses_center: bool = True, shape: tuple = ()) -> None:
    """Refuse concrete arguments no confidence sequence can take (a traced one, inside
    ``jit`` or ``vmap``, is the caller's to keep so): ``alpha`` outside (0, 1) (it gave
    NaN bounds, or bounds with ``lower > upper``, without a word), a range with ``lo >
    hi``, a term outside its range (the validity needs ``lo <= y <= hi``), or, for the
    kinds that use it (not ``"hoeffding"``), a non-finite ``center`` (it gave NaN bounds
    without a word), where ``active``. A finite centre outside ``[lo, hi]`` is accepted:
    the validity holds for any finite predictable centre (the identification loop clips
    it to the range)."""
    from jaxeval._runner import concrete_array

    a = concrete_array(alpha)
    if a is not None and not np.all((a > 0) & (a < 1)):
        raise ValueError(f"confseq update: alpha must lie in (0, 1), got {alpha!r}")
    act = concrete_array(active) if active is not None else None
    if active is not None and act is None:
        return
    l, h, yy = concrete_array(lo), concrete_array(hi), concrete_array(y)
    got = None if l is None or h is None or yy is None else _on_active([l, h, yy], act,
                                                                        shape)
    if got is not None:
        (l, h, yy), on = got
        if np.any(on & ~(l <= h)):
            raise ValueError("confseq update: every range needs lo <= hi (a NaN or a "
                             f"reversed range), got lo={lo!r}, hi={hi!r}")
        bad = on & ~((yy >= l - NUM_TOL) & (yy <= h + NUM_TOL))
        if np.any(bad):
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"confseq update: each term y must lie in its range [lo, hi], fixed before "
                f"the draw (the sequence's validity rests on it); at {at}: y={float(yy[at])}, "
                f"range [{float(l[at])}, {float(h[at])}]")
    c = concrete_array(center) if uses_center and center is not None else None
    got = None if c is None else _on_active([c], act, shape)
    if got is not None:
        (c,), on = got
        bad = on & ~np.isfinite(c)
        if np.any(bad):
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"confseq update: center must be finite (the predictable centre of the "
                f"terms, fixed before the draw); at {at}: center={float(c[at])}")


def _checked(update: Callable[..., Any], uses_center: bool = True) -> Callable[..., Any]:
    """``update`` with :func:`_check_update` first (free under ``jit``: traced values are
    not checked)."""

    @functools.wraps(update)
    def checked(state, y, lo, hi, center, alpha, active=None):
        _check_update(y, lo, hi, alpha, active, center, uses_center, np.shape(state.count))
        return update(state, y, lo, hi, center, alpha, active)

    return checked


def get(name: str, *, grid_size: int = 128, truncation: float = 0.5) -> ConfSeq:
    """The confidence-sequence kind ``name`` (one of :data:`KINDS`).

    Args:
      name: ``"eb"`` (empirical Bernstein, the default of METHODS.md 2.4), ``"hoeffding"`` or
        ``"betting"``.
      grid_size: number of grid cells ``G`` (betting only; static, sets the state shape).
      truncation: the betting cap as a fraction of ``1 / (m - lo)`` (betting only, in (0, 1)).

    Returns:
      A :class:`ConfSeq`; the same object for the same arguments.

    Example:
      >>> cs = get("betting", grid_size=64)
      >>> cs.init((3,)).logk_lo.shape
      (3, 64)
    """
    if name not in KINDS:
        raise ValueError(f"confseq.get: name must be one of {KINDS}, got {name!r}")
    if name != "betting":
        grid_size, truncation = 0, 0.0
    else:
        from jaxeval._runner import check_int

        try:
            grid_size = check_int("confseq.get: grid_size", grid_size, 2)
        except TypeError as e:  # (a float, None, a string: one kind of error for all)
            raise ValueError(str(e)) from None
        try:  # a Python or NumPy real, or a concrete 0-d real array (NumPy or JAX)
            dt = np.asarray(truncation).dtype if np.ndim(truncation) == 0 else None
            ok = dt is not None and dt.kind in "iuf" and not isinstance(truncation, str) \
                and 0.0 < float(truncation) < 1.0
        except (TypeError, ValueError, jax.errors.ConcretizationTypeError,
                jax.errors.TracerArrayConversionError):
            ok = False
        if not ok:
            raise ValueError(f"confseq.get: truncation must be a number in (0, 1), got "
                             f"{truncation!r}")
    key = (name, int(grid_size), float(truncation))
    if key not in _CACHE:
        if name == "eb":
            fns = (eb_init, eb_update)
        elif name == "hoeffding":
            fns = (hoeffding_init, hoeffding_update)
        else:
            fns = _betting_fns(int(grid_size), float(truncation))
        _CACHE[key] = ConfSeq(name, fns[0], _checked(fns[1], name != "hoeffding"), _bounds,
                              finalize)
    return _CACHE[key]
