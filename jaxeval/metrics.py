"""Evaluation metrics in JAX: MAE (pp), Kendall tau-b, identification accuracy, coverage.

Pure, jittable and vmappable; see :mod:`jaxeval._metrics` for the definitions.

Example:
  >>> import jax.numpy as jnp
  >>> from jaxeval import metrics
  >>> float(metrics.identification_accuracy(jnp.array([0]), jnp.array([[0.9, 0.9]])))
  1.0
"""

from jaxeval._metrics import (
    TIE_ATOL,
    best_arms,
    coverage,
    identification_accuracy,
    identification_correct,
    kendall_tau_b,
    mae_pp,
)

__all__ = [
    "TIE_ATOL",
    "best_arms",
    "coverage",
    "identification_accuracy",
    "identification_correct",
    "kendall_tau_b",
    "mae_pp",
]
