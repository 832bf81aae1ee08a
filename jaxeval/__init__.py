"""jaxeval: cheap, statistically valid LLM evaluation in JAX.

Public API (everything else lives in private ``_module`` files):

- data: :class:`ScoreMatrix`, :func:`load`, :mod:`jaxeval.datasets`
"""

from jaxeval import datasets
from jaxeval._data import ScoreMatrix, Split
from jaxeval._io import load

__version__ = "0.1.0"

__all__ = [
    "ScoreMatrix",
    "Split",
    "datasets",
    "load",
    "__version__",
]
