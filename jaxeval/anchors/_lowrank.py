"""The low-rank difference estimator: a linear map built from the training matrix.

A new model's scores on all ``n`` items are modelled as ``mu + V z + noise`` with
``mu`` the training item means and ``V`` the top-``r`` principal directions of the
centred training scores, scaled so that the training models' coordinates ``z`` have
unit variance. From the model's ``k`` anchor scores ``x`` the posterior mean of ``z``
under a ``N(0, I)`` prior and noise variance ``lam`` is
``z = (V_a^T V_a + lam I)^{-1} V_a^T (x - mu_a)``, and the benchmark mean is estimated
by the *difference* form

    yhat = ( sum(x) + sum_{j not anchor} (mu_j + V_j z) ) / n,

i.e. the anchors count exactly and only the unseen items are predicted. The estimate
is linear in ``x`` with ``O(r)`` parameters learned per model (the loadings come from
the whole training matrix, not from a regression of ``k`` weights on ``m`` models),
which is what makes it strong when there are fewer training models than anchors.
It is returned as an ordinary :class:`~jaxeval.anchors._ridge.LinearMap`; ``r`` and
``lam`` are chosen on validation models. For an external target the row-mean
estimate is calibrated linearly on the training models.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval import _seqlinalg as seqlinalg
from jaxeval.anchors._ridge import LinearMap, fit_ridge

__all__ = [
    "LOWRANK_RANKS",
    "LOWRANK_LAMS",
    "LowRankBasis",
    "lowrank_basis",
    "fit_lowrank_validated",
]

#: Ranks tried on validation models (clipped to what the training matrix supports).
LOWRANK_RANKS = (1, 2, 3, 5, 8, 12, 20, 32)
#: Noise variances ``lam`` tried on validation models (scores live in ``[0, 1]``).
LOWRANK_LAMS = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


class LowRankBasis(NamedTuple):
    """Item means ``mu [n]`` and scaled loadings ``V [n, R]`` of the training scores."""

    mu: jax.Array
    V: jax.Array


def check_anchor_indices(anchors: Any, n: int, what: str) -> None:
    """Refuse concrete ``anchors`` that are not distinct integer indices of ``n`` items
    (a scatter would drop an index past the end, or keep one of two repeats, silently);
    traced ones are the caller's."""
    if isinstance(anchors, jax.core.Tracer):
        return
    a = np.asarray(anchors)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"anchors: expected a 1-d array of integer item indices, got "
                         f"shape {a.shape} and dtype {a.dtype}")
    if a.size and (a.min() < 0 or a.max() >= n):
        raise ValueError(f"anchors: item indices must lie in [0, {n}) ({what}), got "
                         f"{a.tolist()}")
    if np.unique(a).size != a.size:
        raise ValueError(f"anchors: expected distinct items, got {a.tolist()}")


def lowrank_basis(s_tr: jax.Array, max_rank: int = max(LOWRANK_RANKS)) -> LowRankBasis:
    """Principal directions of the centred training scores (one thin SVD).

    Args:
      s_tr: ``[m, n]`` training scores.
      max_rank: columns kept (static, >= 1); clipped to ``min(m, n)``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import lowrank_basis
      >>> s = jax.random.bernoulli(jax.random.key(0), 0.5, (30, 12)).astype(jnp.float32)
      >>> lowrank_basis(s, 4).V.shape
      (12, 4)
    """
    from jaxeval._runner import check_int

    max_rank = check_int("max_rank", max_rank, 1)
    m, n = s_tr.shape
    R = min(max_rank, m, n)
    mu = jnp.mean(s_tr, axis=0)
    _, sv, vt = seqlinalg.svd_thin(s_tr - mu)  # (vmapped: one matrix at a time)
    V = vt[:R].T * (sv[:R] / jnp.sqrt(jnp.asarray(m, s_tr.dtype)))[None, :]
    return LowRankBasis(mu, V)


def _linear_for(basis: LowRankBasis, anchors: jax.Array, rank: jax.Array, lam: jax.Array):
    mu, V = basis
    n, R = V.shape
    mask = (jnp.arange(R) < rank).astype(V.dtype)
    Vm = V * mask[None, :]
    Va = Vm[anchors]  # [k, R]
    A = Va.T @ Va + lam * jnp.eye(R, dtype=V.dtype)
    M = seqlinalg.solve(A, Va.T)  # [R, k] (vmapped over the grid: one after another)
    c1 = jnp.sum(Vm, axis=0) - jnp.sum(Va, axis=0)  # loadings summed over non-anchors
    c0 = jnp.sum(mu) - jnp.sum(mu[anchors])
    mu_a = mu[anchors]
    w = (1.0 + M.T @ c1) / n
    b = (c0 - c1 @ (M @ mu_a)) / n
    return LinearMap(w, b)


def fit_lowrank_validated(
    basis: LowRankBasis,
    anchors: jax.Array,
    x_tr: jax.Array,
    y_tr: jax.Array,
    x_val: jax.Array,
    y_val: jax.Array,
    external: bool = False,
) -> tuple[LinearMap, jax.Array]:
    """The difference estimator with rank and ``lam`` chosen by validation MSE.

    Args:
      basis: from :func:`lowrank_basis` on the training scores.
      anchors: int ``[k]`` distinct anchor items in ``[0, n)`` (a repeated anchor would be
        counted twice in the estimate, and JAX clamps an index out of range: both are
        refused when ``anchors`` is concrete, i.e. outside jit).
      x_tr, y_tr: training anchor scores ``[m, k]`` and targets (used only to
        calibrate an external target).
      x_val, y_val: validation anchor scores and targets.
      external: the target is not the row mean (calibrate ``a * yhat + b``).

    Returns:
      ``(LinearMap, validation MSE)``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import fit_lowrank_validated, lowrank_basis
      >>> key = jax.random.key(0)
      >>> ab = jax.random.normal(key, (80, 1)) @ jax.random.normal(key, (1, 40))
      >>> s = jax.random.bernoulli(key, jax.nn.sigmoid(ab)).astype(jnp.float32)
      >>> a = jnp.arange(0, 40, 4)
      >>> lin, mse = fit_lowrank_validated(
      ...     lowrank_basis(s[:60]), a, s[:60, a], s[:60].mean(1), s[60:, a], s[60:].mean(1))
      >>> lin.w.shape, bool(mse < jnp.var(s[60:].mean(1)))
      ((10,), True)
    """
    check_anchor_indices(anchors, basis.V.shape[0], "the basis's items")
    R = basis.V.shape[1]
    ranks = sorted({min(r, R) for r in LOWRANK_RANKS})
    grid_r = jnp.repeat(jnp.asarray(ranks), len(LOWRANK_LAMS))
    grid_l = jnp.tile(jnp.asarray(LOWRANK_LAMS, x_tr.dtype), len(ranks))

    def one(rank, lam):
        lin = _linear_for(basis, anchors, rank, lam)
        if external:
            cal = fit_ridge((x_tr @ lin.w + lin.b)[:, None], y_tr, 1e-6)
            lin = LinearMap(cal.w[0] * lin.w, cal.w[0] * lin.b + cal.b)
        err = jnp.mean((x_val @ lin.w + lin.b - y_val) ** 2)
        return lin, jnp.where(jnp.isfinite(err), err, jnp.inf)

    lins, errs = jax.vmap(one)(grid_r, grid_l)
    i = jnp.argmin(errs)
    return jax.tree.map(lambda a: a[i], lins), errs[i]
