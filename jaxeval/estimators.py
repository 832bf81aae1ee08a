"""Doubly robust estimates of a finite-population mean under sampling without
replacement, in JAX: the per-draw term and its range, the difference estimate, the naive
pooled estimate, and the plug-in coefficient ``lam`` with its running statistics.

Pure, jittable and elementwise over any batch shape; the definitions and why each term
has conditional mean ``theta`` whatever the predictions are in
:mod:`jaxeval._estimators`'s module docstring (METHODS.md 2.3). Their terms feed
:mod:`jaxeval.confseq`.

Example:
  The term of an item drawn from the unseen ones: exact whatever the prediction, in
  expectation over the draw.

  >>> import jax.numpy as jnp
  >>> from jaxeval import estimators
  >>> s = jnp.array([1.0, 0.0, 1.0, 1.0])          # the true scores (theta = 0.75)
  >>> pred = jnp.array([0.9, 0.9, 0.9, 0.9])       # poor predictions
  >>> terms = [estimators.dr_term(0.0, pred.sum(), 4, s[j], pred[j], 1.0, 4)
  ...          for j in range(4)]                  # nothing seen yet, lam = 1
  >>> round(float(sum(terms) / 4), 6)
  0.75
"""

from jaxeval._estimators import (
    LambdaStats,
    difference_estimate,
    dr_range,
    dr_term,
    lambda_stats_init,
    lambda_stats_update,
    naive_pooled,
    plugin_lambda,
)

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
