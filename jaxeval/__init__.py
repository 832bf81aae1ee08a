"""jaxeval: cheap, statistically valid LLM evaluation in JAX.

Public API (everything else lives in private ``_module`` files):

- data: :class:`ScoreMatrix`, :func:`load`, :mod:`jaxeval.datasets`
- synthetic truth: :func:`synthetic_matrix` (JAX), :func:`synthetic_score_matrix` (numpy)
- metrics: :mod:`jaxeval.metrics` (MAE pp, Kendall tau-b, identification, coverage)
- factorization: :func:`fit_factorization` -> :class:`LowRankLogistic` (kernels in
  ``jaxeval._factorization``)
- studies at scale: :func:`run_replicates` (chunked, sharded), :func:`run_study` /
  :func:`resume_study` / :func:`merge_studies` / :func:`load_results` for studies on
  disk (:class:`IdentificationStudy`, :class:`AnchorStudy`, :class:`ReplicateStudy`);
  the ``jaxeval`` command line
- identification: :func:`simulate_identification` -> :class:`IdentificationReport`
  (kernels in ``jaxeval._identification``; truth :class:`SyntheticSpec` or a ScoreMatrix)
"""

import os as _os

# jaxlib 0.10.x runs a batched LAPACK call (vmapped eigh / solve / svd: the ridge and
# low-rank grids, the cross-validation folds of ``fit_anchors(method="auto")``) by
# fanning the batch out onto XLA:CPU's intra-op thread pool and blocking a pool thread
# until the chunks finish. When as many such calls run concurrently as the pool has
# threads (2 on a 2-core machine) every thread waits and the process hangs at 0% CPU.
# A larger pool makes that practically impossible; the CPU client sizes it from NPROC
# when JAX first starts its backend, so it is set here (an explicit NPROC wins; it has
# no effect if JAX already ran a computation before jaxeval was imported).
_os.environ.setdefault("NPROC", str(max(32, _os.cpu_count() or 1)))

from jaxeval import datasets, metrics  # noqa: E402
from jaxeval._data import ScoreMatrix, Split  # noqa: E402
from jaxeval._factorization_api import LowRankLogistic, fit_factorization  # noqa: E402
from jaxeval._io import load  # noqa: E402
from jaxeval._runner import run_replicates  # noqa: E402
from jaxeval._simulate import IdentificationReport, SyntheticSpec, simulate_identification  # noqa: E402
from jaxeval._study import (  # noqa: E402
    AnchorStudy,
    IdentificationStudy,
    ReplicateStudy,
    load_results,
    merge_studies,
    resume_study,
    run_study,
    study_from_dict,
)
from jaxeval._synthetic import SyntheticTruth, synthetic_matrix, synthetic_score_matrix  # noqa: E402
from jaxeval.anchors import AnchorPredictor, fit_anchors  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "ScoreMatrix",
    "Split",
    "datasets",
    "metrics",
    "load",
    "SyntheticTruth",
    "synthetic_matrix",
    "synthetic_score_matrix",
    "LowRankLogistic",
    "fit_factorization",
    "AnchorPredictor",
    "fit_anchors",
    "simulate_identification",
    "IdentificationReport",
    "SyntheticSpec",
    "run_replicates",
    "IdentificationStudy",
    "AnchorStudy",
    "ReplicateStudy",
    "study_from_dict",
    "run_study",
    "resume_study",
    "merge_studies",
    "load_results",
    "__version__",
]
