"""Deeper mutation-review tests for the statistical core (_confseq, _estimators): each pins a
behaviour that a plausible one-line slip would change and that the other tests (including
test_confseq_mutants.py) let pass. Expected values come from hand calculation or float64
formulas written here from METHODS.md / the module docstrings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _confseq as cs_mod
from jaxeval._estimators import (
    lambda_stats_init,
    lambda_stats_update,
    plugin_lambda,
)


def _spread_pairs(spread, n_pairs=100):
    """``n_pairs`` (score, prediction) pairs whose predictions alternate 0.5 -/+ ``spread``
    and whose scores alternate 0 / 1: slope ``1 / (2 spread)``, mean square spread
    ``spread**2``."""
    st = lambda_stats_init()
    upd = jax.jit(lambda_stats_update)
    for i in range(n_pairs):
        sgn = 1.0 if i % 2 else -1.0
        st = upd(st, 0.5 + 0.5 * sgn, 0.5 + sgn * spread)
    return st


def test_plugin_lambda_is_clipped_for_out_of_range_priors():
    """The documented return range ``[0, 1]`` holds even when the prior does not (e.g. a
    ``lam0`` fitted by regression on training models): with no pairs the result is
    ``clip(lam0, 0, 1)``, and half-way shrinkage of a slope 1 toward ``lam0 = -0.6`` gives
    ``clip(0.2, 0, 1)``. (A negative ``lam`` would break :func:`dr_range`, whose lower end
    uses ``max S_hat``, the minimiser only for ``lam >= 0``; the public entry points refuse
    a ``lam0`` outside [0, 1].)"""
    empty = lambda_stats_init((2,))
    lam = np.asarray(plugin_lambda(empty, lam0=jnp.array([-0.25, 1.3]), shrink=5.0))
    np.testing.assert_array_equal(lam, [0.0, 1.0])
    st = _spread_pairs(0.25)  # slope 2 -> lam_hat 1; 100 pairs, shrink 100: w = 1/2
    np.testing.assert_allclose(float(plugin_lambda(st, lam0=-0.6, shrink=100.0)), 0.2, atol=1e-6)
    np.testing.assert_allclose(float(plugin_lambda(st, lam0=-1.6, shrink=100.0)), 0.0, atol=0)


@pytest.mark.parametrize("kind", ["eb", "hoeffding"])
def test_sequences_are_scale_invariant_down_to_tiny_ranges(kind):
    """DR ranges shrink to ``1/n`` (below 1e-4 for large n) and the bets, penalties and
    variance estimate are all defined relative to the range: for terms ``a + w x`` on
    ``[a, a + w]`` with centre ``a + w m`` the bet sums scale as ``1/w`` and the penalty and
    normalised-residual sums are unchanged. Checked at ``w = 2**-13`` against ``w = 1`` (all
    values exact in float32); the only floor allowed is ``_EPS = 1e-6`` on ranges far below."""
    cs = cs_mod.get(kind)
    rng = np.random.default_rng(5)
    t = 120
    x = (rng.uniform(size=t) < 0.3).astype(np.float32)
    a, w = np.float32(0.25), np.float32(2.0**-13)

    def final_state(ys, lo, hi, m):
        st = cs.init(())
        for y in ys:
            st = cs.update(st, jnp.float32(y), lo, hi, m, jnp.float32(0.1))
        return jax.tree.map(lambda v: np.float64(v), st)

    unit = final_state(x, np.float32(0.0), np.float32(1.0), np.float32(0.25))
    tiny = final_state(a + w * x, a, a + w, a + w * np.float32(0.25))
    if kind == "eb":
        pairs = [
            (tiny.sum_b_lo * w, unit.sum_b_lo),
            (tiny.sum_b_hi * w, unit.sum_b_hi),
            (tiny.sum_pen_lo, unit.sum_pen_lo),
            (tiny.sum_pen_hi, unit.sum_pen_hi),
            (tiny.sum_z2, unit.sum_z2),
        ]
    else:
        pairs = [(tiny.sum_l * w, unit.sum_l), (tiny.sum_pen, unit.sum_pen)]
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=1e-4)


def test_plugin_lambda_clips_a_negative_slope_before_shrinking():
    """The plug-in slope is clipped to ``[0, 1]`` *before* it is mixed with the prior:
    3 pairs with slope about -1.3, ``lam0 = 0.8``, ``shrink = 3`` (weight 1/2) give
    ``0.5 * 0 + 0.5 * 0.8 = 0.4``. Clipping only the mixture (or the slope to [-1, 1]) would
    drag ``lam`` to 0 here; the existing edge-case test uses ``shrink = 0``, where the final
    clip hides the difference."""
    st = lambda_stats_init()
    for s_, p_ in [(1.0, 0.1), (0.0, 0.9), (1.0, 0.2)]:
        st = lambda_stats_update(st, s_, p_)
    assert float(st.c_sp / st.m2_p) < -1.0  # the trap is real
    np.testing.assert_allclose(float(plugin_lambda(st, lam0=0.8, shrink=3.0)), 0.4, atol=1e-6)
