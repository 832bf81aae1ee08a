"""Doubly robust estimates of a finite-population mean under sampling without
replacement, in JAX: the per-draw term and its range, the difference estimate, the naive
pooled estimate, and the plug-in coefficient ``lam`` with its running statistics.

Pure, jittable and elementwise over any batch shape; the definitions and why each term
has conditional mean ``theta`` whatever the predictions are in
:mod:`jaxeval._estimators`'s module docstring (METHODS.md 2.3). Their terms feed
:mod:`jaxeval.confseq`.

Dtypes: the results follow the arguments (float32; under x64, float64 arguments give
float64 results), while :func:`lambda_stats_init` builds a float32 state (``count``
int32) that :func:`lambda_stats_update` keeps in its own dtypes (float64 pairs are
rounded to float32 when stored; a float64 state built by the caller stays float64).
Nothing here is checked, concrete or traced: ``lam`` and ``lam0`` in [0, 1] and scores
and predictions in [0, 1] are the caller's to keep (a term fed to
:mod:`jaxeval.confseq` with its range is checked there, where concrete).

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
