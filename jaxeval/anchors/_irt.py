"""The factorization-based anchor estimate (gp-IRT family, tinyBenchmarks).

Item parameters come from the low-rank logistic factorization of METHODS.md section 1
(``jaxeval._factorization``) fitted offline on training models, with the fixed settings
of ``Settings.irt`` (no rank or rho selection). For a new model,
its factor ``u`` is the MAP fit on its anchor scores only (item factors frozen);
the factorization then predicts every item:

- p-IRT: ``(1/n) [sum_anchors S + sum_non-anchors p_j]`` (observed anchors plus
  predicted non-anchors);
- gp-IRT: ``lam * (weighted anchor mean) + (1 - lam) * p-IRT`` with ``lam`` chosen on
  validation models (tinyBenchmarks chooses it by a heuristic; validation is more
  direct).

With an external target (the matrix holds part of a benchmark) the item mean is not
the target, so a linear calibration ``a * est + b`` is fitted on training models.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxeval._factorization import ItemFactors, fit_factors, predict_scores, update_model_factors
from jaxeval.anchors._lowrank import check_anchor_indices

__all__ = ["IRTConfig", "fit_item_factors", "irt_item_predictions", "pirt_estimate"]


class IRTConfig(NamedTuple):
    """Factorization settings for the IRT maps (numeric fields are traced)."""

    rank: int = 5
    rho_u: float = 1.0
    rho_v: float = 1.0
    rho_online: float = 1.0
    learning_rate: float = 0.05
    num_steps: int = 400


def fit_item_factors(key: jax.Array, s_tr: jax.Array, cfg: IRTConfig) -> ItemFactors:
    """Offline factorization on complete training rows -> frozen :class:`ItemFactors`."""
    res = fit_factors(
        key,
        s_tr,
        jnp.ones(s_tr.shape, bool),
        rank=cfg.rank,
        rho_u=cfg.rho_u,
        rho_v=cfg.rho_v,
        learning_rate=cfg.learning_rate,
        num_steps=cfg.num_steps,
    )
    return res.item_factors


def irt_item_predictions(
    item_factors: ItemFactors, anchors: jax.Array, x: jax.Array, rho: float | jax.Array = 1.0
) -> jax.Array:
    """Per-item predictions ``[m, n]`` from each model's anchor scores ``x [m, k]``.

    The model factor is the MAP fit on the anchors alone (three safeguarded Newton
    steps from the prior centre); anchors keep their observed scores.
    """
    n = item_factors.V.shape[0]
    check_anchor_indices(anchors, n, "the item factors' items")
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        # integer or bool 0/1 scores: in the factors' float dtype, not rho cast to an integer
        x = x.astype(jnp.result_type(x.dtype, item_factors.V.dtype))
    m = x.shape[0]
    full = jnp.zeros((m, n), x.dtype).at[:, anchors].set(x)
    mask = jnp.zeros((m, n), bool).at[:, anchors].set(True)
    u0 = jnp.broadcast_to(item_factors.u_mean, (m, item_factors.u_mean.shape[0]))
    u, _ = update_model_factors(item_factors, full, mask, u0, jnp.asarray(rho, x.dtype))
    p = predict_scores(u, item_factors)
    return jnp.where(mask, full, p)


def pirt_estimate(
    item_factors: ItemFactors, anchors: jax.Array, x: jax.Array, rho: float | jax.Array = 1.0
) -> jax.Array:
    """p-IRT: mean of observed anchors and predicted non-anchors (``[m]``)."""
    return jnp.mean(irt_item_predictions(item_factors, anchors, x, rho), axis=1)
