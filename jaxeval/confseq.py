"""Anytime-valid confidence sequences for a mean from terms of known range, in JAX.

The sequences the identification loop uses for its intervals (empirical Bernstein, the
default; Hoeffding; betting), usable on their own: ``get(kind)`` returns a
:class:`ConfSeq` of pure, jittable functions over a NamedTuple state, elementwise over
any batch shape. The formulas, their validity and the rounding margin are in
:mod:`jaxeval._confseq`'s module docstring (METHODS.md 2.4).

Concrete arguments are checked (``alpha`` in (0, 1), ``lo <= y <= hi``); inside ``jit``
or ``vmap`` they are the caller's to keep so.

Example:
  Doubly robust terms of one model, drawn without replacement (their ranges from
  :func:`jaxeval.estimators.dr_range`), here simply scores in [0, 1]:

  >>> import jax.numpy as jnp
  >>> from jaxeval import confseq
  >>> cs = confseq.get("eb")
  >>> st = cs.init()
  >>> for y in (1.0, 0.0, 1.0, 1.0, 0.0, 1.0):
  ...     st = cs.update(st, y, 0.0, 1.0, 0.5, 0.05)
  >>> lower, upper = cs.bounds(st)
  >>> bool(0.0 <= lower <= 4 / 6 <= upper <= 1.0)
  True
"""

from jaxeval._confseq import (
    KINDS,
    NUM_TOL,
    BettingState,
    ConfSeq,
    EBState,
    HoeffdingState,
    finalize,
    get,
)

__all__ = [
    "KINDS",
    "NUM_TOL",
    "BettingState",
    "ConfSeq",
    "EBState",
    "HoeffdingState",
    "finalize",
    "get",
]
