"""Gaps a hand mutation review of ``anchors/_mlp.py``, ``anchors/_intervals.py`` and
``_seqlinalg.py`` found: each test fails on a planted bug that the rest of the suite let
through."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval.anchors._intervals import sample_non_anchors


# ------------------------------------------------------------ extra-item draw
def test_sample_non_anchors_never_draws_an_anchor_even_when_taking_every_non_anchor():
    """``m = n - k`` takes every non-anchor exactly once and no anchor, whatever the
    key: anchors sort after *every* uniform draw (a placeholder just below 1 let an
    anchor in whenever some non-anchor drew above it)."""
    n = 3000
    anchors = jnp.arange(0, n, 2)  # interleaved with the non-anchors
    rest = np.arange(1, n, 2)
    for seed in range(6):
        s = np.asarray(sample_non_anchors(jax.random.key(seed), anchors, n, rest.size))
        np.testing.assert_array_equal(np.sort(s), rest)

