"""Anytime-valid confidence sequences for a mean from terms of known range, in JAX.

The sequences the identification loop uses for its intervals (empirical Bernstein, the
default; Hoeffding; betting), usable on their own: ``get(kind)`` returns a
:class:`ConfSeq` of pure, jittable functions over a NamedTuple state, elementwise over
any batch shape. The formulas, their validity and the rounding margin are in
:mod:`jaxeval._confseq`'s module docstring (METHODS.md 2.4).

Concrete arguments are checked (``alpha`` in (0, 1), ``lo <= hi``, ``lo <= y <= hi`` and,
for ``"eb"`` and ``"betting"``, a finite ``center``, where ``active``); traced ones, inside
``jit`` or ``vmap``, are not checked (at no cost) and are the caller's to keep valid. In
particular a traced ``alpha`` must lie in (0, 1): outside it the bounds mean nothing and
may look confident. With the six terms of the example below, ``alpha = 0.05`` gives
[0, 1], while ``alpha = 1.5`` under ``jit`` or ``vmap`` gives about [0.52, 0.83] (a
concrete 1.5 is refused) and ``alpha >= 2`` gives NaN.

Dtypes. ``init()`` builds float32 states (``count`` int32), and ``update`` (like
:func:`finalize`) returns a state of the dtypes of the one it was given, so a ``lax.scan``
carry keeps its type. Under x64, float64 terms (or ranges, centres, ``alpha``) fed to a
float32 state enter that step's arithmetic in float64, but every sum and bound is rounded
to float32 when stored: the sequence is float32. A float64 state, built by the caller
(``init()``'s fields cast with ``astype``), stays float64, float32 terms being promoted
to it (a few internal factors, such as ``k log(1 + k)`` and the betting grid, are
float32 constants).

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
