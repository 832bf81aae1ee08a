"""Accuracy from a few anchor items: SparseEval, its baselines, strong maps and intervals.

Public surface:

- :func:`fit_anchors` -> :class:`AnchorPredictor` (numpy in, numpy out; save/load).
- kernels for composing your own protocols: :func:`fit_method`, :func:`apply_map`,
  :class:`Settings`, :class:`SplitData`, the selectors (:func:`kmeans_anchors`,
  :func:`random_anchors`, :func:`greedy_ridge_anchors`, :func:`refine_anchors`,
  :func:`ais_scores`, :func:`cis_scores`), the SparseEval MLP (:func:`train_mlp`,
  :func:`mlp_apply`) and
  the low-rank difference estimator (:func:`lowrank_basis`,
  :func:`fit_lowrank_validated`) and the intervals (:func:`conformal_quantile`,
  :func:`dr_estimate`).
- :func:`evaluate_protocol`: the METHODS.md 6.2 protocol (seeded splits, MAE, tau-b,
  interval coverage) for a list of methods, one jitted kernel over the seeds.
"""

from jaxeval.anchors._api import AnchorPredictor, fit_anchors
from jaxeval.anchors._intervals import conformal_quantile, dr_estimate, sample_non_anchors
from jaxeval.anchors._lowrank import fit_lowrank_validated, lowrank_basis
from jaxeval.anchors._methods import (
    AUTO_CANDIDATES,
    AUTO_VALIDATION_EXTRA,
    HALVES_METHODS,
    METHODS,
    Fitted,
    Settings,
    SplitData,
    apply_map,
    auto_candidates,
    fit_method,
)
from jaxeval.anchors._mlp import AnchorMLP, mlp_apply, train_mlp
from jaxeval.anchors._protocol import ProtocolResult, evaluate_protocol
from jaxeval.anchors._ridge import fit_ridge, fit_ridge_validated, greedy_ridge_anchors
from jaxeval.anchors._select import (
    ais_scores,
    cis_scores,
    kmeans_anchors,
    random_anchors,
    refine_anchors,
)

__all__ = [
    "AUTO_CANDIDATES",
    "AUTO_VALIDATION_EXTRA",
    "HALVES_METHODS",
    "METHODS",
    "AnchorMLP",
    "AnchorPredictor",
    "Fitted",
    "ProtocolResult",
    "Settings",
    "SplitData",
    "ais_scores",
    "apply_map",
    "auto_candidates",
    "cis_scores",
    "conformal_quantile",
    "dr_estimate",
    "evaluate_protocol",
    "fit_anchors",
    "fit_lowrank_validated",
    "fit_method",
    "fit_ridge",
    "fit_ridge_validated",
    "greedy_ridge_anchors",
    "kmeans_anchors",
    "lowrank_basis",
    "random_anchors",
    "refine_anchors",
    "sample_non_anchors",
    "train_mlp",
    "mlp_apply",
]
