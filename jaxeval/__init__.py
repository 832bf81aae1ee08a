"""jaxeval: cheap, statistically valid LLM evaluation in JAX.

Public API (everything else lives in private ``_module`` files):

- data: :class:`ScoreMatrix`, :func:`load`, :mod:`jaxeval.datasets`
- metrics: :mod:`jaxeval.metrics` (MAE pp, Kendall tau-b, identification, coverage)
"""

from jaxeval import datasets, metrics
from jaxeval._data import ScoreMatrix, Split
from jaxeval._io import load

__version__ = "0.1.0"

__all__ = [
    "ScoreMatrix",
    "Split",
    "datasets",
    "metrics",
    "load",
    "__version__",
]
