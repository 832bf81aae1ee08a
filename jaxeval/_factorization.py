"""Low-rank logistic factorization of a score matrix (METHODS.md section 1).

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
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxeval import _seqlinalg as seqlinalg

__all__ = [
    "ItemFactors",
    "FitResult",
    "SelectionResult",
    "STATUS_OK",
    "STATUS_NONFINITE",
    "ONLINE_LINE_SEARCH_STEPS",
    "refit_row",
    "update_model_factors",
    "update_model_factor_blocked",
    "predict_scores",
    "predict_logits",
    "predictive_logit_variance",
    "empirical_prior",
    "masked_bce",
    "fit_factors",
    "heldout_log_loss",
    "holdout_mask",
    "select_factors",
]

#: Fit finished with finite factors.
STATUS_OK = 0
#: A non-finite loss or parameter appeared; the last finite iterate is returned.
STATUS_NONFINITE = 1

# Step sizes tried by the Newton safeguard: 1, 1/2, ..., 1/16, 1/64 and 0 (when only 0
# passes, the majorization gradient step of :func:`_fallback_step` is taken instead).
_LINE_SEARCH_STEPS = (1.0, 0.5, 0.25, 0.125, 0.0625, 2.0**-6, 0.0)
#: Trial steps of the bandit loop's online refit (:func:`refit_row`): the full Newton
#: step or none. Warm-started after every batch, the full step passed the Armijo test in
#: all of 15,642 online refits measured on IFEval, ARC and MATH-5 (PULSE, K = 10, to 20%
#: of K n, the default rank 8 fitted with rho 1; BUILD_NOTES "PULSE against the peers"),
#: so intermediate trials only cost time (each is a softplus over every item: one more
#: trial, 0.5, makes a PULSE step ~16% slower); the trial 0 keeps the safeguard: a full
#: step that does not decrease the objective is dropped and the factor takes
#: :func:`_fallback_step`'s gradient step, which never raises it. With weakly
#: regularised or higher-rank factors the full step is rejected more often and the
#: factor can lag the MAP for a while (MuSR, offline rho 0.3, rank 16: largest
#: objective gap 2.9-3.6 nats, predictions off by up to 0.6-0.8; the trial 0.5 cuts that
#: to 0.1-1.6 nats / 0.2-0.5, varying between runs): an efficiency loss only, since the
#: DR estimate and its interval are valid whatever the predictions (BUILD_NOTES "The
#: online refit's trial steps"; benchmarks/bench_online_refit.py).
ONLINE_LINE_SEARCH_STEPS = (1.0, 0.0)

#: Largest rank whose online Newton direction is an unrolled Cholesky solve
#: (:func:`_spd_direction`) rather than a batched LAPACK call.
_UNROLLED_SOLVE_MAX_RANK = 16


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
    """Elementwise binary cross-entropy with soft targets, stable in the logit.

    ``softplus(z) = max(z, 0) + log1p(exp(-|z|))`` written out: the same operations as
    ``jax.nn.softplus`` (``logaddexp(z, 0)``) for every non-NaN ``z``, without its NaN
    select, which made it ~1.7x slower on CPU (it is most of the online refit's line
    search).
    """
    sp = jnp.maximum(logits, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    return sp - targets * logits


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
      >>> loss = masked_bce(jnp.zeros(2), jnp.array([1.0, 0.0]), jnp.array([True, False]))
      >>> round(float(loss), 4)
      0.6931
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
    probability is approximately ``(p (1 - p))^2`` times this. ``H + 1e-6 I`` is
    inverted (the ridge keeps a singular ``H`` defined), so where ``H``'s eigenvalues
    come near 1e-4 — a prior strength that small and few items seen — the variance is
    visibly below the exact one (1% at ``H = 1e-4``); with the wrappers' prior (0.5) it
    is not.

    Args:
      hessian: ``[..., r, r]`` symmetric positive definite.
      item_factors: the frozen :class:`ItemFactors`.

    Returns:
      ``[..., n]`` logit variances.

    Example:
      >>> import jax.numpy as jnp
      >>> f = ItemFactors(jnp.ones((3, 1)), jnp.zeros(3), jnp.zeros(1))
      >>> predictive_logit_variance(2.0 * jnp.ones((1, 1)), f).round(4).tolist()
      [0.5, 0.5, 0.5]
    """
    V = item_factors.V
    r = V.shape[-1]
    eye = jnp.eye(r, dtype=hessian.dtype)
    # A batched potrf then a batched trsm on its result: one chain, never two
    # independent batched LAPACK calls in flight at once (the 2-core deadlock of
    # jaxeval._seqlinalg needs two), so these stay batched for speed.
    chol = jnp.linalg.cholesky(hessian + 1e-6 * eye)
    # Solve L W = V^T for every batch element; variance = column norms of W.
    Vt = jnp.broadcast_to(V.T, hessian.shape[:-2] + V.T.shape)
    W = jax.scipy.linalg.solve_triangular(chol, Vt, lower=True)
    return jnp.sum(W * W, axis=-2)


def empirical_prior(U: jax.Array, item_factors: ItemFactors) -> tuple[ItemFactors, jax.Array]:
    """Re-express fitted factors so the training model factors have identity covariance.

    The products ``u . v`` are unchanged (``u -> L^{-1} u``, ``v -> L^T v`` with
    ``L L^T`` the covariance of the training ``U``), so predictions are identical;
    but afterwards the Gaussian fitted to the training models' factors is
    ``N(u_mean, I)``, i.e. :func:`update_model_factors` with ``rho = 0.5`` is MAP
    under the empirical-Bayes prior. The offline penalty ``rho_u`` is *not* a good
    online prior: the L2 penalty on both ``U`` and ``V`` balances their norms, so
    the spread of the training ``u_i`` is usually far wider than ``1 / (2 rho_u)``
    and new models would be pulled too hard towards the mean.

    A direction in which the training factors do not vary (all rows equal, say) keeps a
    tiny ridge (``1e-6`` of the mean variance, or ``1e-12``) as its variance: it is
    stretched by up to ``1e6`` and the prior pins new models to the training mean there,
    which is what the data say; predictions are unchanged.

    Args:
      U: ``[m, r]`` training model factors (zero padded columns are allowed).
      item_factors: the fitted :class:`ItemFactors`.

    Returns:
      ``(ItemFactors, U)`` whitened; ``u_mean`` is the mean of the returned ``U``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> U = jax.random.normal(jax.random.key(0), (50, 2)) * jnp.array([3.0, 0.5])
      >>> f = ItemFactors(jnp.ones((4, 2)), jnp.zeros(4), U.mean(0))
      >>> fw, Uw = empirical_prior(U, f)
      >>> jnp.allclose(jnp.cov(Uw.T, bias=True), jnp.eye(2), atol=1e-4).item()
      True
    """
    m, r = U.shape
    D = U - jnp.mean(U, axis=0)
    cov = D.T @ D / m
    eps = 1e-6 * (jnp.trace(cov) / r) + 1e-12
    L = jnp.linalg.cholesky(cov + eps * jnp.eye(r, dtype=U.dtype))
    Uw = jax.scipy.linalg.solve_triangular(L, U.T, lower=True).T
    Vw = item_factors.V @ L
    return ItemFactors(Vw, item_factors.c, jnp.mean(Uw, axis=0)), Uw


# --------------------------------------------------------------------- online fit
def _row_objective(u, V, c, s, m, u_mean, rho):
    """The online row objective (``benchmarks/bench_online_refit.py`` measures refits by
    it; :func:`_row_grad_hess` is its gradient and Hessian)."""
    logits = V @ u + c
    d = u - u_mean
    return masked_bce(logits, s, m) + rho * jnp.dot(d, d)


def _outer_items(V):
    """``[n, r*r]`` per-item outer products ``v_j v_j^T``, flattened.

    With them every row's Hessian ``sum_j w_j v_j v_j^T`` is one row of a single
    ``[K, n] @ [n, r*r]`` matrix product under vmap (BLAS-friendly).
    """
    n, r = V.shape
    return (V[:, :, None] * V[:, None, :]).reshape(n, r * r)


def _row_grad_hess(u, V, c, s, m, u_mean, rho, VV=None):
    """Gradient and Hessian of the row objective ``masked_bce(V @ u + c, s, m) + rho *
    ||u - u_mean||^2`` in closed form."""
    r = u.shape[0]
    if VV is None:
        VV = _outer_items(V)
    p = jax.nn.sigmoid(V @ u + c)
    mf = m.astype(V.dtype)
    g = V.T @ (mf * (p - s)) + 2.0 * rho * (u - u_mean)
    w = mf * p * (1.0 - p)
    H = (w @ VV).reshape(r, r) + 2.0 * rho * jnp.eye(r, dtype=V.dtype)
    return g, H


def _newton_direction(g, H, eye):
    """Newton direction ``-H^{-1} g``; a gradient step if the solve is not finite."""
    r = g.shape[0]
    # A small ridge keeps the solve defined when rho = 0 and few items are seen.
    scale = jnp.maximum(jnp.trace(H) / r, 1.0)
    # vmapped over rows: one solve after another (a batched LAPACK call can hang
    # XLA's CPU thread pool beside another one, see jaxeval._seqlinalg)
    d = -seqlinalg.solve(H + 1e-6 * scale * eye, g)
    return jnp.where(jnp.all(jnp.isfinite(d)), d, -g / scale)


def _spd_direction(g, H, eye):
    """Newton direction ``-H^{-1} g`` by an unrolled Cholesky solve (online refit).

    ``H`` is the row objective's Hessian, symmetric positive definite for ``rho > 0``
    (plus the same small ridge as :func:`_newton_direction`). For ``r <=``
    :data:`_UNROLLED_SOLVE_MAX_RANK` the factorisation and both triangular solves are
    written out as ``O(r^2)`` vector operations, which XLA fuses and batches across a
    vmap; a batched LAPACK ``getrf`` / ``getrs`` call per step costs ~2.3 µs per
    replicate-step on CPU (PULSE, r = 8: ~20% of a step). Larger ranks use
    :func:`_newton_direction`. Pivots are floored at ``1e-12`` times the Hessian's
    scale; a non-finite result gives a gradient step, as in :func:`_newton_direction`.
    """
    r = g.shape[0]
    if r > _UNROLLED_SOLVE_MAX_RANK:
        return _newton_direction(g, H, eye)
    scale = jnp.maximum(jnp.trace(H) / r, 1.0)
    A = H + 1e-6 * scale * eye
    floor = 1e-12 * scale
    cols = []  # columns of the lower factor L, each [r] (zeros above the diagonal)
    diag = []
    for j in range(r):
        # column j of A minus the contribution of the columns already factored
        a = A[:, j]
        for k in range(j):
            a = a - cols[k] * cols[k][j]
        ljj = jnp.sqrt(jnp.maximum(a[j], floor))
        col = jnp.where(jnp.arange(r) >= j, a / ljj, 0.0)
        cols.append(col)
        diag.append(ljj)
    # L y = g (forward), L^T x = y (backward)
    y = []
    for i in range(r):
        acc = g[i]
        for k in range(i):
            acc = acc - cols[k][i] * y[k]
        y.append(acc / diag[i])
    x = [None] * r
    for i in reversed(range(r)):
        acc = y[i]
        for k in range(i + 1, r):
            acc = acc - cols[i][k] * x[k]
        x[i] = acc / diag[i]
    d = -jnp.stack(x)
    return jnp.where(jnp.all(jnp.isfinite(d)), d, -g / scale)


def _fallback_step(g, vv_obs, rho):
    """The majorization-minimization gradient step ``-g / L`` taken when no trial step of
    a Newton direction passes the Armijo rule.

    ``L = vv_obs / 4 + 2 rho`` (``vv_obs``: the sum of ``||v_j||^2`` over the observed
    items) bounds the row objective's curvature everywhere (``sigma' <= 1/4``), so
    ``f(u - g / L) <= f(u) - ||g||^2 / (2 L)``: the step never raises the objective and
    moves the factor whenever the gradient is not zero. Without it a Newton direction
    that overshoots from far away (separable data, weak prior) would be rejected at
    every refit and the factor would never move.
    """
    L = 0.25 * vv_obs + 2.0 * rho
    return -g / jnp.maximum(L, jnp.finfo(g.dtype).tiny)


def _check_line_search(line_search) -> tuple[float, ...]:
    """The Armijo trial steps as a tuple: positive and decreasing, then a final 0 (the
    rule compares every trial with the objective at the last one, which must be the
    current point)."""
    steps = tuple(float(t) for t in line_search)
    if (len(steps) < 2 or steps[-1] != 0.0 or any(not t > 0 for t in steps[:-1])
            or any(a <= b for a, b in zip(steps[:-2], steps[1:-1]))):
        raise ValueError(
            "line_search: expected decreasing positive trial steps ending with 0.0, e.g. "
            f"(1.0, 0.5, 0.0); got {tuple(line_search)!r}"
        )
    return steps


def _armijo_index(f, g, d, steps):
    """Index of the largest trial step with sufficient decrease (``f`` at every step).

    The slack absorbs float32 rounding near the optimum, where the full step is right;
    ``steps[-1] = 0`` always satisfies the rule.
    """
    slack = 1e-6 * (jnp.abs(f[-1]) + 1.0)
    ok = f <= f[-1] + 1e-4 * steps * jnp.dot(g, d) + slack
    return jnp.argmax(ok)


def _armijo_step(f, g, d, steps):
    """The largest trial step with sufficient decrease (see :func:`_armijo_index`)."""
    return steps[_armijo_index(f, g, d, steps)]


def _newton_row(u0, V, c, s, m, u_mean, rho, VV, num_newton, line_search=_LINE_SEARCH_STEPS,
                with_hessian=True, direction=_newton_direction):
    """Safeguarded Newton iterations for one row; returns (u, H at u), or u alone."""
    r = u0.shape[0]
    s = jnp.where(m, s, 0.0)
    eye = jnp.eye(r, dtype=V.dtype)
    steps = jnp.asarray(_check_line_search(line_search), dtype=V.dtype)

    def objective_along(u, d):
        # Loss at u + t d for every trial t, using base logits and V d once.
        base = V @ u + c
        vd = V @ d
        z = base[None, :] + steps[:, None] * vd[None, :]
        bce = jnp.sum(jnp.where(m[None, :], _bce_from_logits(z, s[None, :]), 0.0), axis=1)
        diff = (u - u_mean)[None, :] + steps[:, None] * d[None, :]
        f = bce + rho * jnp.sum(diff * diff, axis=1)
        return jnp.where(jnp.isfinite(f), f, jnp.inf)

    vv_obs = jnp.sum(jnp.where(m, jnp.sum(V * V, axis=-1), 0.0))

    def body(u, _):
        g, H = _row_grad_hess(u, V, c, s, m, u_mean, rho, VV)
        d = direction(g, H, eye)
        f = objective_along(u, d)
        t = _armijo_step(f, g, d, steps)
        # no trial step passed (only the zero step): the majorization step instead
        return u + jnp.where(t > 0, t * d, _fallback_step(g, vv_obs, rho)), None

    if not with_hessian:
        # unrolled (num_newton is static and small): no loop, no final Hessian
        u = u0
        for _ in range(num_newton):
            u, _ = body(u, None)
        return u
    u, _ = jax.lax.scan(body, u0, None, length=num_newton)
    _, H = _row_grad_hess(u, V, c, s, m, u_mean, rho, VV)
    return u, H


def refit_row(
    item_factors: ItemFactors,
    scores: jax.Array,
    mask: jax.Array,
    u_init: jax.Array,
    rho: jax.Array,
    num_newton: int = 1,
    line_search: tuple[float, ...] = ONLINE_LINE_SEARCH_STEPS,
) -> jax.Array:
    """One model's factor after ``num_newton`` safeguarded Newton steps (the bandit loop's
    online refit; to be called inside a jitted kernel).

    The iterations of :func:`update_model_factors` for a single row, unrolled, without
    the final Hessian, with the trial steps ``line_search`` (default
    :data:`ONLINE_LINE_SEARCH_STEPS`) and the Newton direction from an unrolled Cholesky
    solve for small ranks (:func:`_spd_direction`). A row with no observed item returns
    ``u_mean``.

    Args:
      item_factors: frozen :class:`ItemFactors`.
      scores: ``[n]`` targets; ignored where ``mask`` is False.
      mask: ``[n]`` bool, True where observed.
      u_init: ``[r]`` warm start.
      rho: scalar prior strength.
      num_newton: Newton steps (static).
      line_search: trial step sizes (static), largest first, ending with 0.

    Returns:
      ``u [r]``.

    Example:
      >>> import jax.numpy as jnp
      >>> f = ItemFactors(jnp.ones((4, 2)), jnp.zeros(4), jnp.zeros(2))
      >>> m = jnp.array([True, True, False, False])
      >>> refit_row(f, jnp.array([1.0, 1.0, 0.0, 0.0]), m, jnp.zeros(2), 1.0).shape
      (2,)
    """
    V, c, u_mean = item_factors
    u = _newton_row(u_init, V, c, scores, mask, u_mean, rho, _outer_items(V), num_newton,
                    line_search=tuple(line_search), with_hessian=False,
                    direction=_spd_direction)
    return jnp.where(jnp.any(mask), u, u_mean)


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
    1/16, 1/64, 0`` (the largest with sufficient decrease), so the objective never
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
    dtype = jnp.result_type(float)
    item_factors = ItemFactors(*(jnp.asarray(a, dtype) for a in item_factors))
    # Canonical dtypes (and no weak types) so that new values never retrace.
    return _update_model_factors(
        item_factors,
        jnp.asarray(scores, dtype),
        jnp.asarray(mask, bool),
        jnp.asarray(u_init, dtype),
        jnp.asarray(rho, dtype),
        num_newton=int(num_newton),
    )


@functools.partial(jax.jit, static_argnames=("num_newton",))
def _update_model_factors(item_factors, scores, mask, u_init, rho, num_newton):
    V, c, u_mean = item_factors
    K = scores.shape[0]
    rho = jnp.broadcast_to(rho, (K,))
    row = functools.partial(_newton_row, num_newton=num_newton)
    u, H = jax.vmap(row, in_axes=(0, None, None, 0, 0, None, 0, None))(
        u_init, V, c, scores, mask, u_mean, rho, _outer_items(V)
    )
    empty = ~jnp.any(mask, axis=1)
    u = jnp.where(empty[:, None], u_mean[None, :], u)
    return u, H


def update_model_factor_blocked(
    block_fn,
    num_blocks: int,
    u_init: jax.Array,
    u_mean: jax.Array,
    rho: jax.Array,
    num_newton: int = 3,
    return_hessian: bool = True,
    *,
    data_grad_hess=None,
    trial_sums=None,
    online: bool = False,
    line_search: tuple[float, ...] | None = None,
):
    """One model's MAP factor, as :func:`update_model_factors`, with items streamed in blocks.

    The same safeguarded Newton iterations (same ridge, same Armijo trial steps, same
    fallback to a gradient step) on the same row objective, but every sum over items
    (gradient, Hessian, the objective at each trial step) is accumulated over
    ``num_blocks`` blocks in a ``lax.scan``, so the memory is ``O(B r + r^2)`` for a
    block of ``B`` items whatever the number of items. Results equal
    :func:`update_model_factors` on the concatenated row up to float32 summation order
    (about 1e-6 relative; ``tests/test_blocks.py``). Each Newton step reads every block
    twice (derivatives, then the line search); the final Hessian costs one more pass
    (skip it with ``return_hessian=False``). Two hooks let a caller that streams the
    same blocks anyway save passes: ``data_grad_hess`` replaces the first derivative
    pass, and ``trial_sums`` rides on the last line-search pass.

    Args:
      block_fn: ``k -> (V [B, r], c [B], scores [B], mask [B] bool, *extra)`` for block
        ``k`` (int32 scalar); items outside the row (padding) must have ``mask`` False.
      num_blocks: static number of blocks.
      u_init: ``[r]`` warm start.
      u_mean: ``[r]`` prior centre.
      rho: scalar prior strength.
      num_newton: number of Newton steps (static).
      return_hessian: also return the Hessian at the returned ``u``.
      data_grad_hess: optional ``(g [r], H [r, r], count, vv)``: the data part (no
        prior) of the gradient and Hessian at ``u_init``, the number of observed items and
        the sum of ``||v_j||^2`` over them (for the fallback step, :func:`_fallback_step`),
        already accumulated by the caller; the first derivative pass is then skipped.
      trial_sums: optional ``fn(z [T + 1, B], block) -> pytree of [T + 1] arrays`` with
        ``block`` what ``block_fn`` returned and ``z`` the block's logits at each of the
        ``T`` trial steps of the last Newton step and at its fallback step; the sums over
        blocks at the step taken are returned too (e.g. sums of the new predictions
        without a pass of their own; they are taken at ``u_init``'s last Newton
        iterate, before the empty-row rule).
        Needs ``num_newton >= 1``.
      online: refit as :func:`refit_row` does (the Newton direction from an unrolled
        Cholesky solve for small ranks, :func:`_spd_direction`, and the trial steps
        :data:`ONLINE_LINE_SEARCH_STEPS`); the bandit loop's streamed refit passes True.
      line_search: the Armijo trial steps (static), overriding the default of
        ``online`` (:data:`ONLINE_LINE_SEARCH_STEPS` if True, else the offline fit's
        ``1, 1/2, ..., 1/16, 1/64, 0``).

    Returns:
      ``(u [r], hessian [r, r])``, or ``u`` alone when ``return_hessian`` is False, with
      the ``trial_sums`` appended when given. A row with no observed item returns
      ``u_mean`` exactly.
    """
    if trial_sums is not None and num_newton < 1:
        raise ValueError(f"trial_sums needs num_newton >= 1, got num_newton={num_newton}")
    dtype = jnp.result_type(float)
    u_init = jnp.asarray(u_init, dtype)
    u_mean = jnp.asarray(u_mean, dtype)
    rho = jnp.asarray(rho, dtype)
    r = u_init.shape[0]
    eye = jnp.eye(r, dtype=dtype)
    if line_search is None:
        line_search = ONLINE_LINE_SEARCH_STEPS if online else _LINE_SEARCH_STEPS
    steps = jnp.asarray(_check_line_search(line_search), dtype=dtype)
    ks = jnp.arange(num_blocks, dtype=jnp.int32)

    def block(k):
        out = block_fn(k)
        V, c, s, m = out[:4]
        m = jnp.asarray(m, bool)
        return (V.astype(dtype), c.astype(dtype), jnp.where(m, s, 0.0).astype(dtype), m), out

    def with_prior(g, H, cnt, u):
        return g + 2.0 * rho * (u - u_mean), H + 2.0 * rho * eye, cnt

    def grad_hess(u):
        def acc(carry, k):
            g, H, cnt, vv = carry
            (V, c, s, m), _ = block(k)
            p = jax.nn.sigmoid(V @ u + c)
            mf = m.astype(dtype)
            g = g + V.T @ (mf * (p - s))
            w = mf * p * (1.0 - p)
            H = H + (V * w[:, None]).T @ V
            vv = vv + jnp.sum(mf * jnp.sum(V * V, axis=-1))
            return (g, H, cnt + jnp.sum(m, dtype=jnp.int32), vv), None

        init = (jnp.zeros((r,), dtype), jnp.zeros((r, r), dtype), jnp.zeros((), jnp.int32),
                jnp.zeros((), dtype))
        (g, H, cnt, vv), _ = jax.lax.scan(acc, init, ks)
        return with_prior(g, H, cnt, u) + (vv,)

    direction = _spd_direction if online else _newton_direction

    def newton_step(u, g, H, vv, sums_fn):
        d = direction(g, H, eye)
        fallback = _fallback_step(g, vv, rho)

        def acc(carry, k):
            f, sm = carry
            (V, c, s, m), out = block(k)
            base = V @ u + c
            z = base[None, :] + steps[:, None] * (V @ d)[None, :]
            bce = jnp.where(m[None, :], _bce_from_logits(z, s[None, :]), 0.0)
            if sums_fn is not None:
                z_all = jnp.concatenate([z, (base + V @ fallback)[None, :]])
                sm = jax.tree.map(jnp.add, sm, sums_fn(z_all, out))
            return (f + jnp.sum(bce, axis=1), sm), None

        sm0 = None
        if sums_fn is not None:

            def probe(k):
                (_, _, s, _), out = block(k)
                return sums_fn(jnp.zeros((steps.shape[0] + 1,) + s.shape, dtype), out)

            shapes = jax.eval_shape(probe, ks[0])
            sm0 = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
        (f, sm), _ = jax.lax.scan(acc, (jnp.zeros(steps.shape, dtype), sm0), ks)
        diff = (u - u_mean)[None, :] + steps[:, None] * d[None, :]
        f = f + rho * jnp.sum(diff * diff, axis=1)
        f = jnp.where(jnp.isfinite(f), f, jnp.inf)
        j = _armijo_index(f, g, d, steps)
        # no trial step passed (only the zero step): the fallback step, as _newton_row
        moved = steps[j] > 0
        j_sum = jnp.where(moved, j, steps.shape[0])
        sm = None if sm is None else jax.tree.map(lambda x: x[j_sum], sm)
        return u + jnp.where(moved, steps[j] * d, fallback), sm

    if data_grad_hess is None:
        g, H, cnt, vv = grad_hess(u_init)
    else:
        if len(data_grad_hess) != 4:
            raise ValueError("data_grad_hess: expected (g, H, count, vv), got "
                             f"{len(data_grad_hess)} elements")
        g0, H0, cnt0, vv = data_grad_hess
        g, H, cnt = with_prior(jnp.asarray(g0, dtype), jnp.asarray(H0, dtype),
                               jnp.asarray(cnt0, jnp.int32), u_init)
        vv = jnp.asarray(vv, dtype)
    u, sums = u_init, None
    for i in range(num_newton):
        if i > 0:
            g, H, _, vv = grad_hess(u)
        last = i == num_newton - 1
        u, sums = newton_step(u, g, H, vv, trial_sums if last else None)
    if return_hessian:
        _, H, _, _ = grad_hess(u)
    u = jnp.where(cnt > 0, u, u_mean)
    out = (u, H) if return_hessian else (u,)
    if trial_sums is not None:
        out = out + (sums,)
    return out if len(out) > 1 else out[0]


# --------------------------------------------------------------------- offline fit
class FitResult(NamedTuple):
    """Outcome of :func:`fit_factors` (every leaf gains a leading axis under vmap).

    Attributes:
      item_factors: the fitted :class:`ItemFactors` (``u_mean`` = mean row of ``U``).
      U: ``[m, r]`` model factors of the training models.
      loss_history: ``[num_records]`` objective per observed cell, recorded at the
        last step of each of ``num_records`` chunks of the run (chunk sizes differ by at
        most one step; with fewer steps than records, one per step and NaN after).
      final_loss: objective per observed cell at the returned factors.
      status: int32 :data:`STATUS_OK`, or :data:`STATUS_NONFINITE` when the run hit a
        non-finite value (the factors are then the last finite iterate, frozen).
    """

    item_factors: ItemFactors
    U: jax.Array
    loss_history: jax.Array
    final_loss: jax.Array
    status: jax.Array


def _objective(params, scores, mask, rho_u, rho_v, colmask):
    """Total objective: masked BCE + rho_u ||U||^2 + rho_v ||V||^2 (columns masked)."""
    U, V, c = params
    U = U * colmask
    V = V * colmask
    logits = U @ V.T + c[None, :]
    return masked_bce(logits, scores, mask) + rho_u * jnp.sum(U * U) + rho_v * jnp.sum(V * V)


def _initial_params(key, scores, mask, rank, init_scale, colmask):
    m, n = scores.shape
    ku, kv = jax.random.split(key)
    U = init_scale * jax.random.normal(ku, (m, rank), scores.dtype) * colmask
    V = init_scale * jax.random.normal(kv, (n, rank), scores.dtype) * colmask
    # Item biases start at the logit of the smoothed item means (prior: global mean).
    ok = mask & jnp.isfinite(scores)  # a non-finite target is reported by the loss
    cnt = jnp.sum(ok, axis=0).astype(scores.dtype)
    tot = jnp.sum(jnp.where(ok, scores, 0.0), axis=0)
    glob = (jnp.sum(tot) + 1.0) / (jnp.sum(cnt) + 2.0)
    mean = (tot + 2.0 * glob) / (cnt + 2.0)
    c = jnp.log(mean) - jnp.log1p(-mean)
    return U, V, c


def fit_factors(
    key: jax.Array,
    scores: jax.Array,
    mask: jax.Array,
    *,
    rank: int,
    rho_u: jax.Array,
    rho_v: jax.Array,
    learning_rate: jax.Array,
    num_steps: int,
    active_rank: jax.Array | None = None,
    init_scale: jax.Array = 0.1,
    num_records: int = 50,
) -> FitResult:
    """Offline fit of ``U, V, c`` on training models (full batch Adam in one scan).

    Minimises ``sum_observed BCE(S_ij, sigmoid(u_i . v_j + c_j)) + rho_u ||U||^2 +
    rho_v ||V||^2`` (item biases are not penalised) with Adam and a cosine-decayed
    learning rate, full batch, inside one ``lax.scan``. Missing cells are masked out.
    Numeric hyper-parameters are traced, so the function can be vmapped over seeds,
    regularisation strengths, learning rates and ``active_rank`` -- a whole grid in
    one call -- and a new value never recompiles. Ranks of different size share one
    compilation by padding: ``rank`` is the static (maximum) width and
    ``active_rank`` masks the columns beyond it (exactly zero in the result).

    Args:
      key: PRNG key for the initial factors.
      scores: ``[m, n]`` scores in ``[0, 1]`` (soft targets allowed).
      mask: ``[m, n]`` bool, True where observed.
      rank: static number of factor columns.
      rho_u: L2 strength on ``U``.
      rho_v: L2 strength on ``V``.
      learning_rate: Adam peak learning rate (0.05 works for 0/1 benchmark matrices).
      num_steps: static number of full-batch steps.
      active_rank: optional traced number of leading columns in use (default ``rank``).
      init_scale: standard deviation of the random initial factors.
      num_records: static length of ``loss_history``.

    Returns:
      A :class:`FitResult`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> S = jax.random.bernoulli(jax.random.key(0), 0.6, (20, 30)).astype(jnp.float32)
      >>> res = fit_factors(jax.random.key(1), S, jnp.ones_like(S, bool), rank=2,
      ...                   rho_u=1.0, rho_v=1.0, learning_rate=0.05, num_steps=200)
      >>> res.item_factors.V.shape, int(res.status)
      ((30, 2), 0)
    """
    dtype = jnp.result_type(float)
    # Canonical dtypes (and no weak types) so that new values never retrace.
    return _fit_factors(
        key,
        jnp.asarray(scores, dtype),
        jnp.asarray(mask, bool),
        jnp.asarray(rho_u, dtype),
        jnp.asarray(rho_v, dtype),
        jnp.asarray(learning_rate, dtype),
        jnp.asarray(rank if active_rank is None else active_rank, jnp.int32),
        jnp.asarray(init_scale, dtype),
        rank=int(rank),
        num_steps=int(num_steps),
        num_records=int(num_records),
    )


@functools.partial(jax.jit, static_argnames=("rank", "num_steps", "num_records"))
def _fit_factors(
    key, scores, mask, rho_u, rho_v, lr, active_rank, init_scale, *, rank, num_steps, num_records
):
    dtype = scores.dtype
    scores = jnp.where(mask, scores, 0.0)
    colmask = (jnp.arange(rank) < active_rank).astype(dtype)
    n_obs = jnp.maximum(jnp.sum(mask), 1).astype(dtype)
    params = _initial_params(key, scores, mask, rank, init_scale, colmask)

    def normalised(p):
        return _objective(p, scores, mask, rho_u, rho_v, colmask) / n_obs

    value_and_grad = jax.value_and_grad(normalised)
    adam = optax.scale_by_adam()
    n_rec = min(num_records, num_steps)  # chunk of step t: t * n_rec // num_steps

    def step(carry, t):
        p, opt_state, status, hist = carry
        loss, g = value_and_grad(p)
        updates, new_state = adam.update(g, opt_state, p)
        frac = t.astype(dtype) / num_steps
        lr_t = lr * (0.02 + 0.98 * 0.5 * (1.0 + jnp.cos(jnp.pi * frac)))
        new_p = jax.tree_util.tree_map(lambda a, u: a - lr_t * u, p, updates)
        finite = jnp.isfinite(loss) & jnp.all(
            jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(new_p)])
        )
        go = finite & (status == STATUS_OK)
        p = jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), new_p, p)
        opt_state = jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), new_state, opt_state)
        status = jnp.where(finite, status, STATUS_NONFINITE).astype(jnp.int32)
        hist = hist.at[t * n_rec // num_steps].set(jnp.where(jnp.isfinite(loss), loss, jnp.inf))
        return (p, opt_state, status, hist), None

    hist0 = jnp.full((n_rec,), jnp.nan, dtype)
    init = (params, adam.init(params), jnp.asarray(STATUS_OK, jnp.int32), hist0)
    (params, _, status, hist), _ = jax.lax.scan(step, init, jnp.arange(num_steps))
    final = normalised(params)
    status = jnp.where(jnp.isfinite(final), status, STATUS_NONFINITE).astype(jnp.int32)
    U, V, c = params
    U = U * colmask
    V = V * colmask
    hist = jnp.pad(hist, (0, num_records - hist.shape[0]), constant_values=jnp.nan)
    return FitResult(ItemFactors(V, c, jnp.mean(U, axis=0)), U, hist, final, status)


def heldout_log_loss(
    U: jax.Array, item_factors: ItemFactors, scores: jax.Array, mask: jax.Array
) -> jax.Array:
    """Mean binary cross-entropy (nats) of the fitted model over the cells in ``mask``.

    Example:
      >>> import jax.numpy as jnp
      >>> f = ItemFactors(jnp.zeros((3, 1)), jnp.zeros(3), jnp.zeros(1))
      >>> round(float(heldout_log_loss(jnp.zeros((2, 1)), f, jnp.ones((2, 3)),
      ...                              jnp.ones((2, 3), bool))), 4)
      0.6931
    """
    logits = predict_logits(U, item_factors)
    return masked_bce(logits, scores, mask) / jnp.maximum(jnp.sum(mask), 1)


def holdout_mask(key: jax.Array, mask: jax.Array, fraction: float) -> jax.Array:
    """Random held-out *cells* among the observed ones (each with probability ``fraction``).

    Every row and every column keeps at least one training cell: a cell that is
    the first observed one of its row or of its column is never held out.

    Returns:
      bool ``[m, n]``, True for held-out cells (a subset of ``mask``).
    """
    mask = jnp.asarray(mask, bool)
    draw = jax.random.uniform(key, mask.shape, jnp.float32) < fraction
    first_in_row = mask & (jnp.cumsum(mask, axis=1) == 1)
    first_in_col = mask & (jnp.cumsum(mask, axis=0) == 1)
    return mask & draw & ~first_in_row & ~first_in_col


class SelectionResult(NamedTuple):
    """Outcome of :func:`select_factors`.

    Attributes:
      rank: the chosen rank (Python int).
      rho: the chosen regularisation strength (``rho_u = rho_v = rho``).
      ranks: the rank grid, ``[R]``.
      rhos: the regularisation grid, ``[P]``.
      heldout_loss: ``[R, P]`` held-out log-loss (nats per held-out cell), averaged
        over repeats; ``inf`` where a fit failed.
      train_loss: ``[R, P]`` training objective per observed cell.
      status: ``[R, P, repeats]`` status codes of the fits.
    """

    rank: int
    rho: float
    ranks: np.ndarray
    rhos: np.ndarray
    heldout_loss: np.ndarray
    train_loss: np.ndarray
    status: np.ndarray


@functools.partial(jax.jit, static_argnames=("rank", "num_steps"))
def _heldout_grid(key, scores, mask, heldout, rhos, rho_vs, *, rank, num_steps, learning_rate):
    """Fits on ``mask & ~heldout`` for every pair ``(rhos[i], rho_vs[i])`` (priors on U
    and V); held-out loss on ``heldout``."""
    train = mask & ~heldout

    def one(rho, rho_v):
        res = fit_factors(
            key,
            scores,
            train,
            rank=rank,
            rho_u=rho,
            rho_v=rho_v,
            learning_rate=learning_rate,
            num_steps=num_steps,
        )
        ll = heldout_log_loss(res.U, res.item_factors, scores, heldout)
        ll = jnp.where((res.status == STATUS_OK) & jnp.isfinite(ll), ll, jnp.inf)
        return ll, res.final_loss, res.status

    return jax.vmap(one)(rhos, rho_vs)


def select_factors(
    key: jax.Array,
    scores: jax.Array,
    mask: jax.Array,
    *,
    ranks=(1, 2, 4, 8, 16, 32),
    rhos=(0.3, 1.0, 3.0, 10.0),
    holdout_fraction: float = 0.1,
    num_repeats: int = 1,
    learning_rate: float = 0.05,
    num_steps: int = 1000,
    rho_v: float | None = None,
    on_rank: Callable[[str], None] | None = None,
) -> SelectionResult:
    """Choose rank and regularisation by log-loss on held-out cells of training models.

    For each repeat a random ``holdout_fraction`` of the observed cells (never whole
    rows: candidates are not involved) is held out; for each rank (one compilation
    per rank) the whole ``rhos`` grid is fitted in one vmapped call with
    ``rho_u = rho`` and ``rho_v = rho`` (or the fixed ``rho_v`` given, so that the
    grid scores the model that will be fitted); the held-out log-loss is averaged over
    repeats and the minimiser is returned with the whole curve. This is a host-level
    driver over jitted kernels; refit on all cells with the chosen values afterwards.

    Args:
      key: PRNG key (held-out cells and initialisations).
      scores: ``[m, n]`` training scores.
      mask: ``[m, n]`` bool observed cells.
      ranks: rank grid.
      rhos: regularisation grid.
      holdout_fraction: share of observed cells held out per repeat.
      num_repeats: number of independent held-out draws.
      learning_rate: Adam peak learning rate.
      num_steps: full-batch steps per fit.
      rho_v: a fixed prior strength on V for every grid fit (default: each grid rho).
      on_rank: called with a one-line summary after each rank's grid (progress).

    Returns:
      A :class:`SelectionResult`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> S = jax.random.bernoulli(jax.random.key(0), 0.6, (30, 40)).astype(jnp.float32)
      >>> sel = select_factors(jax.random.key(1), S, jnp.ones_like(S, bool), ranks=(1, 2),
      ...                      rhos=(1.0, 10.0), num_steps=100)
      >>> sel.heldout_loss.shape
      (2, 2)
    """
    ranks = tuple(int(r) for r in ranks)
    rhos_arr = jnp.asarray(rhos, jnp.result_type(float))
    scores = jnp.asarray(scores, jnp.result_type(float))
    mask = jnp.asarray(mask, bool)
    held = np.zeros((len(ranks), len(rhos), num_repeats))
    train = np.zeros_like(held)
    status = np.zeros(held.shape, np.int32)
    for k in range(num_repeats):
        kk = jax.random.fold_in(key, k)
        heldout = holdout_mask(jax.random.fold_in(kk, 0), mask, holdout_fraction)
        if not bool(jnp.any(heldout)):
            raise ValueError(
                f"holdout_fraction: {holdout_fraction!r} of the {int(jnp.sum(mask))} observed "
                "cells held out none (each row's and column's first cell is always kept "
                "for training); raise it, or give rank and rho instead of choosing them"
            )
        for a, r in enumerate(ranks):
            ll, tl, st = _heldout_grid(
                jax.random.fold_in(kk, 1),
                scores,
                mask,
                heldout,
                rhos_arr,
                rhos_arr if rho_v is None else jnp.full_like(rhos_arr, rho_v),
                rank=r,
                num_steps=num_steps,
                learning_rate=jnp.asarray(learning_rate, rhos_arr.dtype),
            )
            held[a, :, k] = np.asarray(ll)
            train[a, :, k] = np.asarray(tl)
            status[a, :, k] = np.asarray(st)
            if on_rank is not None:
                on_rank(f"rank {r} ({a + 1} of {len(ranks)}"
                        + (f", repeat {k + 1} of {num_repeats}" if num_repeats > 1 else "")
                        + f"): best held-out log loss {float(np.nanmin(held[a, :, k])):.4f}")
    curve = held.mean(axis=2)
    a, b = np.unravel_index(np.argmin(curve), curve.shape)
    return SelectionResult(
        rank=ranks[a],
        rho=float(rhos[b]),
        ranks=np.asarray(ranks),
        rhos=np.asarray([float(x) for x in rhos]),
        heldout_loss=curve,
        train_loss=train.mean(axis=2),
        status=status,
    )
