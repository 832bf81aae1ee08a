"""Linear maps from anchor scores to accuracy: ridge, least squares, and greedy selection.

All functions are pure and jittable with fixed shapes. Intercepts are unpenalised:
features and targets are centred with the *training* means, the slope is solved in
closed form, and the intercept restores the means.

The ridge strength is relative: ``alpha = lam * mean(diag(Xc^T Xc))``, so one grid of
``lam`` serves matrices of any size. ``lam`` is chosen on validation models.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval import _seqlinalg as seqlinalg
from jaxeval.anchors._select import check_k

__all__ = [
    "LinearMap",
    "RIDGE_GRID",
    "fit_ridge",
    "fit_ridge_path",
    "fit_ridge_validated",
    "apply_linear",
    "greedy_ridge_anchors",
    "loo_ridge_residuals",
]

#: Relative ridge strengths tried on validation models.
RIDGE_GRID = tuple(float(x) for x in np.logspace(-4.0, 2.0, 13))


class LinearMap(NamedTuple):
    """``y = X @ w + b``.

    Attributes:
      w: float32 ``[k]`` slopes.
      b: float32 scalar intercept.
    """

    w: jax.Array
    b: jax.Array


def apply_linear(params: LinearMap, x: jax.Array) -> jax.Array:
    """Apply a :class:`LinearMap` to ``x [..., k]``."""
    return x @ params.w + params.b


def _float_dtype(x: jax.Array):
    """The float dtype strengths take beside ``x`` (float32 for integer or bool scores:
    cast to an integer dtype, a strength of 0.3 would become 0)."""
    return jnp.result_type(x.dtype, jnp.float32)


def _centre(x: jax.Array, y: jax.Array):
    xm = jnp.mean(x, axis=0)
    ym = jnp.mean(y)
    # a constant column centres to exact zeros: its float mean is off by rounding, and
    # a relative penalty shrinks with that residue, so the fit would read a slope from it
    xc, yc = x - xm, y - ym  # (float, also for integer or bool scores)
    xc = jnp.where(jnp.all(x == x[:1], axis=0), jnp.zeros_like(xc), xc)
    yc = jnp.where(jnp.all(y == y[:1]), jnp.zeros_like(yc), yc)
    return xc, yc, xm, ym


def _check_strengths(lams: Any, name: str) -> None:
    """Refuse concrete strengths that are NaN, infinite or negative (a NaN gave the
    intercept-only fit, w = 0, as if it were a strength); traced ones are the caller's."""
    from jaxeval._runner import concrete_array

    x = concrete_array(lams)
    if x is not None and not np.all(np.isfinite(x) & (x >= 0)):
        raise ValueError(f"{name}: ridge strengths must be finite and >= 0, got {lams!r}")


def fit_ridge_path(x: jax.Array, y: jax.Array, lams: jax.Array) -> LinearMap:
    """Ridge fits for several relative strengths at once (one eigendecomposition).

    Args:
      x: ``[m, k]`` training features.
      y: ``[m]`` training targets.
      lams: ``[L]`` relative strengths (``alpha = lam * mean diag(Xc^T Xc)``).

    Returns:
      A :class:`LinearMap` with a leading ``[L]`` axis.

    Example:
      >>> import jax.numpy as jnp
      >>> x = jnp.array([[0.0], [1.0], [2.0]]); y = 2 * x[:, 0] + 1
      >>> p = fit_ridge_path(x, y, jnp.array([0.0]))
      >>> [round(float(v), 4) for v in (p.w[0, 0], p.b[0])]
      [2.0, 1.0]
    """
    xc, yc, xm, ym = _centre(x, y)
    g = xc.T @ xc
    scale = jnp.maximum(jnp.mean(jnp.diag(g)), 1e-12)
    evals, evecs = seqlinalg.eigh(g)  # (vmapped: one matrix at a time, see _seqlinalg)
    evals = jnp.maximum(evals, 0.0)
    proj = evecs.T @ (xc.T @ yc)

    def one(lam):
        alpha = lam * scale
        inv = jnp.where(evals + alpha > 1e-9 * scale, 1.0 / (evals + alpha), 0.0)
        w = evecs @ (inv * proj)
        return LinearMap(w=w, b=ym - xm @ w)

    _check_strengths(lams, "lams")
    return jax.vmap(one)(jnp.asarray(lams, dtype=_float_dtype(x)))


def fit_ridge(x: jax.Array, y: jax.Array, lam: jax.Array) -> LinearMap:
    """Ridge regression with an unpenalised intercept and relative strength ``lam``.

    The penalty is ``lam`` times the mean diagonal of the centred ``x.T @ x``, so one
    ``lam`` means the same on any number of models and anchors.

    Args:
      x: ``[m, k]`` anchor scores of the training models.
      y: ``[m]`` their targets (accuracies).
      lam: relative strength (a scalar array; traced, so it can be vmapped).

    Returns:
      a :class:`LinearMap` (``x @ w + b``).

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> s = jnp.asarray(rng.random((60, 40)) < rng.uniform(0.2, 0.9, 60)[:, None],
      ...                 jnp.float32)  # 60 models x 40 items
      >>> y, x = s.mean(axis=1), s[:, :8]  # accuracies; the first 8 items as anchors
      >>> from jaxeval.anchors import fit_ridge
      >>> lin = fit_ridge(x[:40], y[:40], jnp.asarray(1.0))
      >>> lin.w.shape, round(float(jnp.abs(x[40:] @ lin.w + lin.b - y[40:]).mean()), 2)
      ((8,), 0.1)
      >>> path = jax.vmap(fit_ridge, in_axes=(None, None, 0))(x[:40], y[:40],
      ...                                                     jnp.array([0.1, 1.0, 10.0]))
      >>> path.w.shape  # one map per strength
      (3, 8)
    """
    _check_strengths(lam, "lam")
    p = fit_ridge_path(x, y, jnp.reshape(lam, (1,)))
    return jax.tree.map(lambda a: a[0], p)


def fit_ridge_validated(
    x_tr: jax.Array,
    y_tr: jax.Array,
    x_val: jax.Array,
    y_val: jax.Array,
    lams: jax.Array | None = None,
) -> tuple[LinearMap, jax.Array, jax.Array]:
    """Ridge with ``lam`` chosen by validation mean squared error.

    Args:
      x_tr, y_tr: ``[m, k]`` training anchor scores and ``[m]`` targets.
      x_val, y_val: the validation models' (the choice is made on them only).
      lams: candidate relative strengths (default ``RIDGE_GRID``); see :func:`fit_ridge`.

    Returns:
      ``(params, lam, val_mse)`` for the chosen strength.

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> s = jnp.asarray(rng.random((60, 40)) < rng.uniform(0.2, 0.9, 60)[:, None],
      ...                 jnp.float32)  # 60 models x 40 items
      >>> y, x = s.mean(axis=1), s[:, :8]  # accuracies; the first 8 items as anchors
      >>> from jaxeval.anchors import fit_ridge_validated
      >>> lin, lam, mse = fit_ridge_validated(x[:40], y[:40], x[40:50], y[40:50])
      >>> round(float(lam), 3), round(float(mse), 4)
      (0.032, 0.0067)
    """
    lams = jnp.asarray(RIDGE_GRID if lams is None else lams, dtype=_float_dtype(x_tr))
    path = fit_ridge_path(x_tr, y_tr, lams)
    pred = jnp.einsum("mk,lk->lm", x_val, path.w) + path.b[:, None]
    mse = jnp.mean((pred - y_val[None, :]) ** 2, axis=1)
    mse = jnp.where(jnp.isfinite(mse), mse, jnp.inf)
    i = jnp.argmin(mse)
    return jax.tree.map(lambda a: a[i], path), lams[i], mse[i]


def loo_ridge_residuals(x: jax.Array, y: jax.Array, lam: jax.Array) -> jax.Array:
    """Exact leave-one-out residuals ``y_i - yhat_{-i}`` of ridge with intercept.

    Uses the hat-matrix identity ``r_i / (1 - h_ii)`` (centring adds ``1/m`` to
    ``h_ii``). Exact, not an approximation: ridge with an unpenalised intercept is
    penalised least squares on ``[1, x]`` with a fixed penalty, for which the identity
    holds, so the residuals equal refits without each model (recentred, same absolute
    ``alpha``; ``tests/test_anchors_reference.py``).
    """
    m = x.shape[0]
    xc, yc, _, _ = _centre(x, y)
    g = xc.T @ xc
    alpha = lam * jnp.maximum(jnp.mean(jnp.diag(g)), 1e-12)
    a = g + alpha * jnp.eye(g.shape[0], dtype=x.dtype)
    sol = seqlinalg.solve(a, xc.T)  # [k, m]
    h = jnp.sum(xc * sol.T, axis=1) + 1.0 / m
    r = yc - xc @ (sol @ yc)
    return r / jnp.maximum(1.0 - h, 1e-6)


class _GreedyState(NamedTuple):
    q: jax.Array  # [m, n] (I - H) x_j for every item
    g: jax.Array  # [n]  x_j^T (I - H) x_j
    h: jax.Array  # [m]  hat diagonal (with the intercept)
    r: jax.Array  # [m]  in-sample residuals
    chosen: jax.Array  # [n] bool
    order: jax.Array  # [k] int32


def greedy_ridge_anchors(scores: jax.Array, y: jax.Array, k: int, lam: jax.Array) -> jax.Array:
    """Forward selection of ``k`` items minimising the leave-one-out ridge error.

    At every step each remaining item is scored by the exact leave-one-out mean
    squared error of the ridge map (fixed ``alpha``) with that item added, using
    rank-one (bordered) updates of the hat matrix: ``O(m n)`` per step, ``O(k m n)``
    in all, with no matrix inverse. Training models only.

    Args:
      scores: ``[m, n]`` training scores.
      y: ``[m]`` training targets.
      k: number of anchors (static).
      lam: relative ridge strength (``alpha = lam * mean column sum of squares``).

    Returns:
      int32 ``[k]`` item indices in the order chosen.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import greedy_ridge_anchors
      >>> s = jax.random.bernoulli(jax.random.key(0), 0.5, (50, 6)).astype(jnp.float32)
      >>> y = s[:, 4] + 0.5 * s[:, 1]
      >>> greedy_ridge_anchors(s, y, 2, 1e-3).tolist()
      [4, 1]
    """
    m, n = scores.shape
    k = check_k(k, n)
    scores = jnp.asarray(scores)
    scores = scores.astype(_float_dtype(scores))  # (integer or bool 0/1 scores: as floats)
    xc = scores - jnp.mean(scores, axis=0)
    yc = y - jnp.mean(y)
    g0 = jnp.sum(xc * xc, axis=0)
    # in the scores' dtype, as fit_ridge (a float64 lam under x64 must not promote the carry)
    alpha = (jnp.asarray(lam) * jnp.maximum(jnp.mean(g0), 1e-12)).astype(scores.dtype)
    st = _GreedyState(
        q=xc,
        g=g0,
        h=jnp.full((m,), 1.0 / m, scores.dtype),
        r=yc,
        chosen=jnp.zeros((n,), bool),
        order=jnp.zeros((k,), jnp.int32),
    )

    def step(st: _GreedyState, t):
        d = alpha + st.g  # [n]
        qty = st.q.T @ yc  # [n]
        coef = qty / d
        r_new = st.r[:, None] - st.q * coef[None, :]  # [m, n]
        h_new = st.h[:, None] + st.q**2 / d[None, :]
        loo = jnp.mean((r_new / jnp.maximum(1.0 - h_new, 1e-6)) ** 2, axis=0)
        # a column with nothing left to explain (0/0 at lam = 0, or its centred rank
        # used up) is the worst unchosen candidate, never a reason to pick a chosen one
        loo = jnp.where(jnp.isfinite(loo), loo, jnp.finfo(loo.dtype).max)
        loo = jnp.where(st.chosen, jnp.inf, loo)
        j = jnp.argmin(loo)
        qs = st.q[:, j]
        ds = d[j]
        proj = xc.T @ qs  # [n] q*^T x
        q = st.q - qs[:, None] * (proj / ds)[None, :]
        g = st.g - proj**2 / ds
        st = _GreedyState(
            q=q,
            g=jnp.maximum(g, 0.0),
            h=st.h + qs**2 / ds,
            r=st.r - qs * coef[j],
            chosen=st.chosen.at[j].set(True),
            order=st.order.at[t].set(j.astype(jnp.int32)),
        )
        return st, None

    st, _ = jax.lax.scan(step, st, jnp.arange(k))
    return st.order
