"""Low-rank logistic factorization of a score matrix (SPEC section 1).

The model is ``S_ij ~ sigmoid(u_i . v_j + c_j)``: a multidimensional 2PL IRT model
with model factors ``u_i`` (rows), item factors ``v_j`` and item biases ``c_j``.

Two levels of API, both pure functions of arrays:

- **Online** (the bandit calls this after every batch): :func:`update_model_factors`
  fits each row's ``u`` with the item factors frozen, by a few warm-started,
  safeguarded Newton steps; :func:`predict_scores` and
  :func:`predictive_logit_variance` give the per-item predictions and their
  delta-method uncertainty.
- **Offline**: :func:`fit_factors` fits ``U, V, c`` on training models with Adam
  inside one ``lax.scan`` (vmappable over seeds and regularisation strengths), and
  :func:`select_factors` chooses the rank and regularisation on held-out *cells*.

Objective (shared by both levels, so the online prior is the offline one)::

    sum_{observed ij} BCE(S_ij, sigmoid(u_i . v_j + c_j)) + rho_u ||U||^2 + rho_v ||V||^2

with soft targets for graded scores. Online, each row solves
``sum_j m_ij BCE(S_ij, .) + rho ||u_i - u_mean||^2`` with ``u_mean`` the mean of the
training ``U``.

Failures inside kernels are status codes (:data:`STATUS_OK`, :data:`STATUS_NONFINITE`),
never exceptions; the numpy wrapper in :mod:`jaxeval._factorization_api` turns them
into errors.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "ItemFactors",
    "STATUS_OK",
    "STATUS_NONFINITE",
    "update_model_factors",
    "predict_scores",
    "predict_logits",
    "predictive_logit_variance",
    "masked_bce",
]

#: Fit finished with finite factors.
STATUS_OK = 0
#: A non-finite loss or parameter appeared; the last finite iterate is returned.
STATUS_NONFINITE = 1

# Step sizes tried by the Newton safeguard: 1, 1/2, ..., 1/128 and 0 (keep the iterate).
_LINE_SEARCH_STEPS = tuple([2.0**-k for k in range(8)] + [0.0])


class ItemFactors(NamedTuple):
    """Frozen item side of a fitted factorization.

    Attributes:
      V: float32 ``[n, r]`` item factors.
      c: float32 ``[n]`` item biases (logit scale).
      u_mean: float32 ``[r]`` mean model factor of the training models; the prior
        centre of the online update.
    """

    V: jax.Array
    c: jax.Array
    u_mean: jax.Array


# --------------------------------------------------------------------------- losses
def _bce_from_logits(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Elementwise binary cross-entropy with soft targets, stable in the logit."""
    return jax.nn.softplus(logits) - targets * logits


def masked_bce(logits: jax.Array, scores: jax.Array, mask: jax.Array) -> jax.Array:
    """Sum of the binary cross-entropy over observed cells (soft targets allowed).

    Unobserved cells contribute exactly zero, whatever ``scores`` holds there.

    Args:
      logits: ``[..., n]`` predicted logits.
      scores: ``[..., n]`` targets in ``[0, 1]``.
      mask: ``[..., n]`` bool, True where observed.

    Returns:
      The scalar sum over observed cells.

    Example:
      >>> import jax.numpy as jnp
      >>> float(masked_bce(jnp.zeros(2), jnp.array([1.0, 0.0]), jnp.array([True, False])))
      0.6931...
    """
    s = jnp.where(mask, scores, 0.0)
    z = jnp.where(mask, logits, 0.0)
    return jnp.sum(jnp.where(mask, _bce_from_logits(z, s), 0.0))


# -------------------------------------------------------------------- predictions
def predict_logits(u: jax.Array, item_factors: ItemFactors) -> jax.Array:
    """Logits ``u . v_j + c_j`` for all items: ``u [..., r] -> [..., n]``."""
    return jnp.einsum("...r,nr->...n", u, item_factors.V) + item_factors.c


def predict_scores(u: jax.Array, item_factors: ItemFactors) -> jax.Array:
    """Predicted probabilities of a correct answer on every item.

    Args:
      u: ``[..., r]`` model factors.
      item_factors: the frozen :class:`ItemFactors`.

    Returns:
      ``[..., n]`` probabilities ``sigmoid(u . v_j + c_j)``.

    Example:
      >>> import jax.numpy as jnp
      >>> f = ItemFactors(jnp.ones((3, 1)), jnp.zeros(3), jnp.zeros(1))
      >>> predict_scores(jnp.zeros((2, 1)), f).shape
      (2, 3)
    """
    return jax.nn.sigmoid(predict_logits(u, item_factors))


def predictive_logit_variance(hessian: jax.Array, item_factors: ItemFactors) -> jax.Array:
    """Delta-method variance of each item's logit, ``v_j^T H^{-1} v_j``.

    ``H`` is the Hessian returned by :func:`update_model_factors` (the posterior
    precision of ``u`` under the Laplace approximation). The variance of the
    probability is approximately ``(p (1 - p))^2`` times this.

    Args:
      hessian: ``[..., r, r]`` symmetric positive definite.
      item_factors: the frozen :class:`ItemFactors`.

    Returns:
      ``[..., n]`` logit variances.

    Example:
      >>> import jax.numpy as jnp
      >>> f = ItemFactors(jnp.ones((3, 1)), jnp.zeros(3), jnp.zeros(1))
      >>> predictive_logit_variance(2.0 * jnp.ones((1, 1)), f).tolist()
      [0.5, 0.5, 0.5]
    """
    V = item_factors.V
    r = V.shape[-1]
    eye = jnp.eye(r, dtype=hessian.dtype)
    chol = jnp.linalg.cholesky(hessian + 1e-6 * eye)
    # Solve L W = V^T for every batch element; variance = column norms of W.
    Vt = jnp.broadcast_to(V.T, hessian.shape[:-2] + V.T.shape)
    W = jax.scipy.linalg.solve_triangular(chol, Vt, lower=True)
    return jnp.sum(W * W, axis=-2)


# --------------------------------------------------------------------- online fit
def _row_objective(u, V, c, s, m, u_mean, rho):
    logits = V @ u + c
    d = u - u_mean
    return masked_bce(logits, s, m) + rho * jnp.dot(d, d)


def _row_grad_hess(u, V, c, s, m, u_mean, rho):
    """Gradient and Hessian of the row objective in closed form."""
    r = u.shape[0]
    p = jax.nn.sigmoid(V @ u + c)
    mf = m.astype(V.dtype)
    g = V.T @ (mf * (p - s)) + 2.0 * rho * (u - u_mean)
    w = mf * p * (1.0 - p)
    H = (V * w[:, None]).T @ V + 2.0 * rho * jnp.eye(r, dtype=V.dtype)
    return g, H


def _newton_row(u0, V, c, s, m, u_mean, rho, num_newton):
    """Safeguarded Newton iterations for one row; returns (u, H at u)."""
    r = u0.shape[0]
    s = jnp.where(m, s, 0.0)
    eye = jnp.eye(r, dtype=V.dtype)
    steps = jnp.asarray(_LINE_SEARCH_STEPS, dtype=V.dtype)

    def objective_along(u, d):
        # Loss at u + t d for every trial t, using base logits and V d once.
        base = V @ u + c
        vd = V @ d
        z = base[None, :] + steps[:, None] * vd[None, :]
        bce = jnp.sum(jnp.where(m[None, :], _bce_from_logits(z, s[None, :]), 0.0), axis=1)
        diff = (u - u_mean)[None, :] + steps[:, None] * d[None, :]
        f = bce + rho * jnp.sum(diff * diff, axis=1)
        return jnp.where(jnp.isfinite(f), f, jnp.inf)

    def body(u, _):
        g, H = _row_grad_hess(u, V, c, s, m, u_mean, rho)
        # A small ridge keeps the solve defined when rho = 0 and few items are seen.
        scale = jnp.maximum(jnp.trace(H) / r, 1.0)
        d = -jnp.linalg.solve(H + 1e-6 * scale * eye, g)
        d = jnp.where(jnp.all(jnp.isfinite(d)), d, -g / scale)
        f = objective_along(u, d)
        # Armijo rule: the largest trial step with sufficient decrease. The slack
        # absorbs float32 rounding near the optimum, where the full step is right.
        slack = 1e-6 * (jnp.abs(f[-1]) + 1.0)
        ok = f <= f[-1] + 1e-4 * steps * jnp.dot(g, d) + slack
        t = steps[jnp.argmax(ok)]  # steps[-1] = 0 always satisfies the rule
        return u + t * d, None

    u, _ = jax.lax.scan(body, u0, None, length=num_newton)
    _, H = _row_grad_hess(u, V, c, s, m, u_mean, rho)
    return u, H


@functools.partial(jax.jit, static_argnames=("num_newton",))
def update_model_factors(
    item_factors: ItemFactors,
    scores: jax.Array,
    mask: jax.Array,
    u_init: jax.Array,
    rho: jax.Array,
    num_newton: int = 3,
) -> tuple[jax.Array, jax.Array]:
    """MAP estimate of each model's factor with the item factors frozen.

    Each row ``i`` minimises ``sum_j mask_ij BCE(scores_ij, sigmoid(u . v_j + c_j))
    + rho ||u - u_mean||^2``, an ``r``-dimensional logistic regression, by
    ``num_newton`` warm-started Newton steps with an ``r x r`` solve. Every step is
    safeguarded by an Armijo backtracking over the fixed trial sizes ``1, 1/2, ...,
    1/128, 0`` (the largest with sufficient decrease), so the objective never
    increases beyond float32 rounding and the iterate never diverges. Rows with no
    observed item return ``u_mean`` exactly. Shapes are fixed; ``rho`` is traced (a
    new value does not recompile), ``num_newton`` is static.

    Args:
      item_factors: frozen :class:`ItemFactors` (``V [n, r]``, ``c [n]``, ``u_mean [r]``).
      scores: ``[K, n]`` scores in ``[0, 1]`` (soft targets allowed); ignored where
        ``mask`` is False.
      mask: ``[K, n]`` bool, True where observed.
      u_init: ``[K, r]`` warm start (e.g. the previous estimate, or ``u_mean``).
      rho: scalar or ``[K]`` prior strength (> 0 recommended; 0 gives the plain MLE,
        which may be unbounded on separable data).
      num_newton: number of Newton steps (static).

    Returns:
      ``(u [K, r], hessian [K, r, r])``; the Hessian of the objective at the returned
      ``u`` (the Laplace posterior precision), for :func:`predictive_logit_variance`.

    Example:
      >>> import jax.numpy as jnp
      >>> f = ItemFactors(jnp.ones((4, 2)), jnp.zeros(4), jnp.zeros(2))
      >>> s = jnp.array([[1.0, 1.0, 0.0, 0.0]]); m = jnp.array([[True, True, False, False]])
      >>> u, H = update_model_factors(f, s, m, jnp.zeros((1, 2)), 1.0)
      >>> u.shape, H.shape
      ((1, 2), (1, 2, 2))
    """
    V, c, u_mean = item_factors
    K = scores.shape[0]
    dtype = V.dtype
    scores = jnp.asarray(scores, dtype)
    mask = jnp.asarray(mask, bool)
    u_init = jnp.asarray(u_init, dtype)
    rho = jnp.broadcast_to(jnp.asarray(rho, dtype), (K,))
    row = functools.partial(_newton_row, num_newton=num_newton)
    u, H = jax.vmap(row, in_axes=(0, None, None, 0, 0, None, 0))(
        u_init, V, c, scores, mask, u_mean, rho
    )
    empty = ~jnp.any(mask, axis=1)
    u = jnp.where(empty[:, None], u_mean[None, :], u)
    return u, H
