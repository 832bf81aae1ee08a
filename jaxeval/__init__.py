"""jaxeval: cheap, statistically valid LLM evaluation in JAX.

Public API (everything else lives in private ``_module`` files):

- data: :class:`ScoreMatrix` (and its :class:`Split` of the anchor protocol),
  :func:`load`, :mod:`jaxeval.datasets`
- synthetic truth: :func:`synthetic_matrix` (JAX), :func:`synthetic_score_matrix` (numpy)
- metrics: :mod:`jaxeval.metrics` (MAE pp, Kendall tau-b, identification, coverage)
- intervals: :mod:`jaxeval.confseq` (anytime-valid confidence sequences) and
  :mod:`jaxeval.estimators` (doubly robust terms and estimates under sampling without
  replacement), the identification loop's own kernels
- factorization: :func:`fit_factorization` -> :class:`LowRankLogistic` (kernels in
  ``jaxeval._factorization``); :func:`learn_lam0`, the DR estimate's λ prior
- studies at scale: :func:`run_replicates` (chunked, sharded), :func:`run_study` /
  :func:`resume_study` / :func:`merge_studies` / :func:`extend_study` /
  :func:`load_results` / :func:`study_status` for studies on disk (:class:`IdentificationStudy`,
  :class:`AnchorStudy`, :class:`ReplicateStudy`); the ``jaxeval`` command line
- identification: :func:`simulate_identification` -> :class:`IdentificationReport`
  (truth :class:`SyntheticSpec` or a ScoreMatrix); :func:`plot_reports` draws several
  policies' reports; :func:`identification_kernel` -> :class:`IdentificationKernel`, the
  same loop as a pure JAX function for your own ``jit`` / ``vmap`` / ``shard_map``
- a real identification campaign: :class:`IdentificationCampaign` (ask which model to
  evaluate on which items, tell the scores, read anytime-valid intervals; save / load)
- accuracy from anchor items: :func:`fit_anchors` -> :class:`AnchorPredictor`
  (SparseEval, its baselines and the recommended ``"auto"``; the protocol, methods and
  intervals in :mod:`jaxeval.anchors`)
- study definitions from JSON-like dicts: :func:`study_from_dict`
"""

from jaxeval import confseq, datasets, estimators, metrics
from jaxeval._campaign import IdentificationCampaign
from jaxeval._data import ScoreMatrix, Split
from jaxeval._factorization_api import LowRankLogistic, fit_factorization, learn_lam0
from jaxeval._io import load
from jaxeval._report import plot_reports
from jaxeval._runner import run_replicates
from jaxeval._simulate import (
    GapBin,
    IdentificationKernel,
    IdentificationReport,
    SyntheticSpec,
    identification_kernel,
    simulate_identification,
)
from jaxeval._study import (
    AnchorStudy,
    IdentificationStudy,
    ReplicateStudy,
    extend_study,
    load_results,
    merge_studies,
    resume_study,
    run_study,
    study_from_dict,
    study_status,
)
from jaxeval._synthetic import SyntheticTruth, synthetic_matrix, synthetic_score_matrix
from jaxeval.anchors import AnchorPredictor, fit_anchors

__version__ = "0.1.0"

__all__ = [
    "ScoreMatrix",
    "Split",
    "datasets",
    "confseq",
    "estimators",
    "metrics",
    "load",
    "SyntheticTruth",
    "synthetic_matrix",
    "synthetic_score_matrix",
    "LowRankLogistic",
    "fit_factorization",
    "learn_lam0",
    "AnchorPredictor",
    "fit_anchors",
    "simulate_identification",
    "identification_kernel",
    "IdentificationKernel",
    "plot_reports",
    "IdentificationReport",
    "GapBin",
    "IdentificationCampaign",
    "SyntheticSpec",
    "run_replicates",
    "IdentificationStudy",
    "AnchorStudy",
    "ReplicateStudy",
    "study_from_dict",
    "run_study",
    "resume_study",
    "extend_study",
    "merge_studies",
    "load_results",
    "study_status",
    "__version__",
]
