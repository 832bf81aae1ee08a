"""Choosing anchor items: random, k-means (SparseEval / Anchor Points), AIS/CIS refinement.

All selectors are pure functions of arrays with fixed shapes and take a PRNG key first.
They see **training models only** (validation models only where a rule says so: the
choice between two initialisations and the optional swap guard).

AIS / CIS (SparseEval, METHODS.md section 3), for a proxy predictor ``f`` on the current
anchors, training scores ``S`` and targets ``y``:

- ``AIS_a = mean_i |d l_i / d x_ia|`` with ``l_i = (f(x_i) - y_i)^2`` (proxy without
  dropout): how much the loss moves with anchor ``a``; the lowest-AIS anchor leaves.
- ``CIS_j = |(S_:,j - 0.5)^T e|`` with ``e_i = f(x_i) - y_i`` (the residuals): how much a
  non-anchor item is aligned with what the proxy still gets wrong; the highest enters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxeval._runner import check_int

__all__ = [
    "check_k",
    "random_anchors",
    "kmeans_anchors",
    "ais_scores",
    "cis_scores",
    "swap_step",
    "RefineTrace",
    "refine_anchors",
]


def check_k(k: int, n: int) -> int:
    """``k`` as an int, refusing an anchor count that cannot give ``k`` distinct items
    out of ``n`` (trace time: both are static)."""
    return check_int("k", k, 1, n, why="the number of items")


def random_anchors(key: jax.Array, n: int, k: int) -> jax.Array:
    """``k`` distinct items chosen uniformly at random (int32 ``[k]``, sorted).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import random_anchors
      >>> keys = jax.random.split(jax.random.key(0), 3)
      >>> a = jax.vmap(random_anchors, in_axes=(0, None, None))(keys, 40, 8)  # 3 seeds
      >>> a.shape, a.dtype, bool((jnp.diff(a, axis=1) > 0).all())
      ((3, 8), dtype('int32'), True)
    """
    k = check_k(k, n)
    return jnp.sort(jax.random.permutation(key, n)[:k]).astype(jnp.int32)


def _kmeans_pp_init(key: jax.Array, pts: jax.Array, k: int) -> jax.Array:
    n = pts.shape[0]
    sq = jnp.sum(pts**2, axis=1)
    first = jax.random.randint(jax.random.fold_in(key, 0), (), 0, n, jnp.int32)  # (x64: same)
    d2 = jnp.maximum(sq + sq[first] - 2 * pts @ pts[first], 0.0)
    cent = jnp.zeros((k, pts.shape[1]), pts.dtype).at[0].set(pts[first])

    def body(carry, t):
        cent, d2 = carry
        p = d2 / jnp.maximum(jnp.sum(d2), 1e-12)
        j = jax.random.choice(jax.random.fold_in(key, t), n, p=p)
        cent = cent.at[t].set(pts[j])
        d2 = jnp.minimum(d2, jnp.maximum(sq + sq[j] - 2 * pts @ pts[j], 0.0))
        return (cent, d2), None

    (cent, _), _ = jax.lax.scan(body, (cent, d2), jnp.arange(1, k))
    return cent


def kmeans_anchors(
    key: jax.Array, scores: jax.Array, k: int, num_iters: int = 50
) -> tuple[jax.Array, jax.Array]:
    """SparseEval's k-means initial anchors and Anchor Points' cluster-size weights.

    Item vectors are the columns of the *training* scores with 0/1 mapped to -1/+1
    (graded scores to ``2 s - 1``), each L2-normalised across training models. Lloyd's
    algorithm (k-means++ start, ``num_iters`` iterations) clusters them; the anchor of
    a cluster is the item nearest its centroid. Distinct anchors are guaranteed by
    taking, for each centroid in turn, the nearest item not yet taken.

    Args:
      key: PRNG key (k-means++ start).
      scores: ``[m, n]`` training scores.
      k: number of anchors (static).
      num_iters: Lloyd iterations (static).

    Returns:
      ``(anchors int32 [k], weights float32 [k])``; the weights are cluster sizes / n.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import kmeans_anchors
      >>> s = jax.random.bernoulli(jax.random.key(0), 0.5, (30, 12)).astype(jnp.float32)
      >>> a, w = kmeans_anchors(jax.random.key(1), s, 4)
      >>> a.shape, round(float(w.sum()), 4)
      ((4,), 1.0)
    """
    x = (2.0 * scores - 1.0).T  # [n, m]
    x = x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    n = x.shape[0]
    k = check_k(k, n)
    sq = jnp.sum(x**2, axis=1)

    def dists(cent):
        return jnp.maximum(sq[:, None] + jnp.sum(cent**2, 1)[None, :] - 2 * x @ cent.T, 0.0)

    def lloyd(cent, _):
        lab = jnp.argmin(dists(cent), axis=1)
        oh = jax.nn.one_hot(lab, k, dtype=x.dtype)  # [n, k]
        cnt = oh.sum(0)
        new = (oh.T @ x) / jnp.maximum(cnt, 1.0)[:, None]
        return jnp.where(cnt[:, None] > 0, new, cent), None

    cent = _kmeans_pp_init(key, x, k)
    cent, _ = jax.lax.scan(lloyd, cent, None, length=num_iters)
    d = dists(cent)
    lab = jnp.argmin(d, axis=1)
    cnt = jnp.bincount(lab, length=k).astype(x.dtype)

    def pick(taken, c):
        dc = jnp.where(taken, jnp.inf, d[:, c])
        j = jnp.argmin(dc)
        return taken.at[j].set(True), j.astype(jnp.int32)

    _, anchors = jax.lax.scan(pick, jnp.zeros((n,), bool), jnp.arange(k))
    return anchors, cnt / n


def ais_scores(predict: Callable, x: jax.Array, y: jax.Array) -> jax.Array:
    """Anchor importance: ``mean_i |d (f(x_i) - y_i)^2 / d x_ia|`` for each anchor ``a``.

    Args:
      predict: maps one model's anchor scores ``[k]`` to a scalar prediction.
      x: ``[m, k]`` training anchor scores.
      y: ``[m]`` targets.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.anchors import ais_scores
      >>> f = lambda v: v @ jnp.array([1.0, -2.0])
      >>> ais_scores(f, jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.zeros(2)).tolist()
      [3.0, 6.0]
    """
    g = jax.vmap(jax.grad(lambda xi, yi: (predict(xi) - yi) ** 2))(x, y)
    return jnp.mean(jnp.abs(g), axis=0)


def cis_scores(scores: jax.Array, residuals: jax.Array) -> jax.Array:
    """Candidate importance ``|(S_:,j - 0.5)^T e|`` for every item ``j`` (``[n]``).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxeval.anchors import cis_scores
      >>> cis_scores(jnp.array([[1.0, 0.0], [0.0, 0.0]]), jnp.array([1.0, -1.0])).tolist()
      [1.0, 0.0]
    """
    return jnp.abs((scores - 0.5).T @ residuals)


def swap_step(anchors: jax.Array, ais: jax.Array, cis: jax.Array, blocked: jax.Array):
    """Swap the lowest-AIS anchor for the highest-CIS non-anchor (not ``blocked``).

    Returns:
      ``(new_anchors, position, incoming_item)``; when every non-anchor is blocked the
      anchors are returned unchanged and ``incoming_item`` is -1.
    """
    n = cis.shape[0]
    is_anchor = jnp.zeros((n,), bool).at[anchors].set(True)
    cand = jnp.where(is_anchor | blocked, -jnp.inf, cis)
    # every non-anchor blocked (few items beyond k): no swap, rather than argmax's item
    # 0 of an all -inf row, which may be an anchor already (a duplicate)
    has = jnp.any(~(is_anchor | blocked))
    j = jnp.where(has, jnp.argmax(cand), -1).astype(anchors.dtype)
    pos = jnp.argmin(ais)
    return jnp.where(has, anchors.at[pos].set(j), anchors), pos, j


class RefineTrace(NamedTuple):
    """Per-step record of :func:`refine_anchors` (leading axis: the R steps)."""

    val_mse: jax.Array  # proxy validation MSE on the anchors *before* the step's swap
    accepted: jax.Array  # bool: the anchors the step trained on were kept
    outgoing: jax.Array  # int32 anchor the proposed swap removes (-1 incoming: no swap)
    incoming: jax.Array  # int32 item added by the proposed swap; -1: none was left


def refine_anchors(
    key: jax.Array,
    anchors: jax.Array,
    s_tr: jax.Array,
    y_tr: jax.Array,
    s_val: jax.Array,
    y_val: jax.Array,
    fit_proxy: Callable,
    *,
    num_swaps: int = 10,
    guard: bool = False,
    guard_score: Callable | None = None,
) -> tuple[jax.Array, RefineTrace]:
    """SparseEval's AIS/CIS refinement: ``num_swaps`` swaps, proxy retrained each step.

    ``fit_proxy(key, x_tr, y_tr) -> predict`` trains a proxy on training anchors and
    returns a function of one model's anchor scores (no dropout). Each step retrains
    the proxy on the current anchors, scores AIS/CIS on training models, and swaps.

    With ``guard=True`` (our choice, off in the reference) a step first checks the
    proxy's validation MSE on the current anchors; when it rose above that of the last
    accepted set, the anchors revert and the rejected item is blocked, and the next
    swap is proposed from the last accepted proxy's scores (a tie is accepted). The
    final anchors are then the accepted set with the lowest validation MSE, the
    earliest of several tied ones; without the guard, the
    anchors after the last swap (the reference rule). With the guard every one of the
    ``num_swaps`` proposals is scored (the last one after the loop, one more proxy fit).
    ``guard_score(anchors) ->
    scalar`` replaces the validation MSE as the guard's criterion (e.g. a
    leave-one-out error on training models, which keeps validation models untouched).

    Keys: step ``t`` (``0 <= t < num_swaps``) fits its proxy with ``fold_in(key, t)``,
    and the guard's fit of the last proposal, after the loop, with ``fold_in(key,
    num_swaps)``; so every fit has its own draws, and a fit is reproduced from ``key``
    and its step alone.

    Returns:
      ``(anchors [k], RefineTrace)``.

    Example:
      A ridge proxy, three swaps from 8 random anchors:

      >>> import jax, jax.numpy as jnp, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> s = jnp.asarray(rng.random((60, 40)) < rng.uniform(0.2, 0.9, 60)[:, None],
      ...                 jnp.float32)  # 60 models x 40 items
      >>> y, x = s.mean(axis=1), s[:, :8]  # accuracies; the first 8 items as anchors
      >>> from jaxeval.anchors import fit_ridge, random_anchors, refine_anchors
      >>> def fit_proxy(key, x_tr, y_tr):
      ...     lin = fit_ridge(x_tr, y_tr, jnp.asarray(0.1))
      ...     return lambda xi: xi @ lin.w + lin.b
      >>> a0 = random_anchors(jax.random.key(1), 40, 8)
      >>> a1, trace = refine_anchors(jax.random.key(2), a0, s[:40], y[:40], s[40:50],
      ...                            y[40:50], fit_proxy, num_swaps=3)
      >>> a1.shape, len(set(a1.tolist())), trace.accepted.shape
      ((8,), 8, (3,))
    """
    n = s_tr.shape[1]

    def proxy_state(t, anc):
        predict = fit_proxy(jax.random.fold_in(key, t), s_tr[:, anc], y_tr)
        pred_tr = jax.vmap(predict)(s_tr[:, anc])
        if guard_score is None:
            vm = jnp.mean((jax.vmap(predict)(s_val[:, anc]) - y_val) ** 2)
        else:
            vm = guard_score(anc)
        ais = ais_scores(predict, s_tr[:, anc], y_tr)
        cis = cis_scores(s_tr, pred_tr - y_tr)
        return vm, ais, cis

    def body(carry, t):
        anc, acc_anc, acc_vm, acc_ais, acc_cis, blocked, best_anc, best_vm = carry
        vm, ais, cis = proxy_state(t, anc)
        ok = (vm <= acc_vm) if guard else jnp.asarray(True)
        # on rejection: revert to the last accepted anchors and block the item that came in
        came_in = jnp.setdiff1d(anc, acc_anc, size=1, fill_value=-1)[0]
        reject = ~ok & (came_in >= 0)
        blocked = jnp.where(reject, blocked.at[jnp.maximum(came_in, 0)].set(True), blocked)
        acc_anc = jnp.where(ok, anc, acc_anc)
        acc_vm = jnp.where(ok, vm, acc_vm)
        acc_ais = jnp.where(ok, ais, acc_ais)
        acc_cis = jnp.where(ok, cis, acc_cis)
        better = ok & (vm < best_vm)
        best_anc = jnp.where(better, anc, best_anc)
        best_vm = jnp.where(better, vm, best_vm)
        new, pos, j = swap_step(acc_anc, acc_ais, acc_cis, blocked)
        trace = RefineTrace(vm, ok, acc_anc[pos], j)
        return (new, acc_anc, acc_vm, acc_ais, acc_cis, blocked, best_anc, best_vm), trace

    k = anchors.shape[0]
    dt = s_tr.dtype
    init = (
        anchors,
        anchors,
        jnp.asarray(jnp.inf, dt),
        jnp.zeros((k,), dt),
        jnp.zeros((n,), dt),
        jnp.zeros((n,), bool),
        anchors,
        jnp.asarray(jnp.inf, dt),
    )
    (last, _, acc_vm, _, _, _, best_anc, best_vm), trace = jax.lax.scan(
        body, init, jnp.arange(num_swaps))
    if not guard:
        return last, trace
    # each step scores the anchors the step before proposed: the last proposal is scored
    # here, under the same rule, so that the R swaps are R tested proposals (not R - 1)
    vm, _, _ = proxy_state(num_swaps, last)
    better = (vm <= acc_vm) & (vm < best_vm)
    return jnp.where(better, last, best_anc), trace
