"""Bundled real score matrices: Open LLM Leaderboard v2 (MIT licence).

The four matrices come from the public repository
``socialfoundations/benchmark-prediction`` (data of "How Benchmark Prediction
from Fewer Data Misses the Mark", 2025), MIT licence; see ``LICENSE.md`` beside
this file. Rows are the leaderboard's "official provider" models; some rows are
identical to another row -- resubmissions, and on MATH level 5 also distinct models
that solve nothing (all-zero rows) -- use ``ScoreMatrix.drop_duplicates``: it drops
4.1% of ARC-Challenge's rows, 4.7% of IFEval's and MuSR's, 16.1% of MATH level 5's
(447 -> 375).

Example:
  >>> from jaxeval import datasets
  >>> datasets.names()[:2]
  ('oll2_arc_challenge', 'oll2_ifeval')
"""

from __future__ import annotations

from importlib import resources

from jaxeval._data import ScoreMatrix

__all__ = ["names", "load", "DEFAULT"]

_FILES = {
    "oll2_arc_challenge": "benchpred_oll2_arc_challenge.npz",
    "oll2_ifeval": "benchpred_oll2_ifeval_promptstrict.npz",
    "oll2_math_lvl5": "benchpred_oll2_mathlvl5_5of7subsets.npz",
    "oll2_musr": "benchpred_oll2_musr.npz",
}
_SOURCE = (
    "Open LLM Leaderboard v2 per-item results, from socialfoundations/benchmark-prediction "
    "(MIT licence)"
)
DEFAULT = "oll2_ifeval"


def names() -> tuple[str, ...]:
    """Names of the bundled datasets."""
    return tuple(sorted(_FILES))


def load(name: str = DEFAULT) -> ScoreMatrix:
    """Load a bundled dataset by name."""
    from jaxeval._io import load_npz

    if name not in _FILES:
        raise KeyError(f"datasets.load: unknown dataset {name!r}; bundled: {', '.join(names())}")
    ref = resources.files(__name__).joinpath(_FILES[name])
    with resources.as_file(ref) as path:
        sm = load_npz(path, name=name, duplicate_names="rename")
    meta = dict(sm.metadata)
    meta.update(licence="MIT", origin=_SOURCE, file=_FILES[name])
    import dataclasses

    return dataclasses.replace(sm, metadata=meta)
