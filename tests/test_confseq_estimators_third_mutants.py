"""Third mutation-review pass over the statistical core (_confseq, _estimators): edge cases,
argument validation and defaults that the earlier reviews (test_confseq_mutants.py,
test_confseq_deep_mutants.py) left open. Each test pins a documented behaviour that a
plausible one-line slip would change and that every other test lets pass."""

import re

import jax.numpy as jnp
import numpy as np
import pytest
from test_confseq import _random_terms, _run, ref_betting

from jaxeval import _confseq as cs_mod
from jaxeval._estimators import lambda_stats_init, lambda_stats_update, plugin_lambda


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_bounds_stay_in_unit_interval_on_terms_above_one(kind):
    """DR terms can exceed 1 (``dr_range`` gives ``hi = 1.15`` in its example): terms at
    1.15 on ``[0.9, 1.2]`` push the sequence's own lower bound above 1, and the reported
    lower bound is still clipped to 1 (the mirror of the existing negative-terms test)."""
    cs = cs_mod.get(kind, grid_size=16)
    t = 100
    b = _run(cs, np.full(t, 1.15), np.full(t, 0.9), np.full(t, 1.2), np.full(t, 1.1), 0.1)
    assert np.all((b >= 0.0) & (b <= 1.0)), b.max()
    if kind != "betting":  # the trap is real: the sums alone put the lower bound above 1
        assert b[-1, 0] == 1.0


def test_get_validation_edges_and_messages():
    """``grid_size`` must be an integer ``>= 2`` (2 itself is allowed) and ``truncation`` a
    number in the open interval ``(0, 1)`` (0 refused); each message names the argument and
    its value, whatever the bad value's type (a float grid size is not rounded)."""
    cs = cs_mod.get("betting", grid_size=2)
    assert cs.init((3,)).logk_lo.shape == (3, 2)
    assert cs_mod.get("betting", grid_size=np.int64(8)) is cs_mod.get("betting", grid_size=8)
    with pytest.raises(ValueError, match=r"grid_size: expected an integer >= 2, got 1$"):
        cs_mod.get("betting", grid_size=1, truncation=0.25)
    for bad in (2.9, None, "x", True):
        with pytest.raises(ValueError, match=r"^confseq.get: grid_size: expected an integer "
                                             rf">= 2, got {type(bad).__name__} "):
            cs_mod.get("betting", grid_size=bad)
    with pytest.raises(ValueError, match=r"truncation must be a number in \(0, 1\), got 0\.0"):
        cs_mod.get("betting", truncation=0.0)
    with pytest.raises(ValueError, match=r"truncation must be a number in \(0, 1\), got -0\.5"):
        cs_mod.get("betting", grid_size=8, truncation=-0.5)
    for bad in (None, "x", True, float("nan")):
        with pytest.raises(ValueError, match=rf"^confseq.get: truncation must be a number in "
                                             rf"\(0, 1\), got {re.escape(repr(bad))}$"):
            cs_mod.get("betting", truncation=bad)


def test_finalize_refuses_a_negative_margin():
    """A negative margin would give an interval whose lower end lies above its upper end;
    a concrete one is refused by name (the default and zero are fine)."""
    st = cs_mod.get("eb").init((1,))
    with pytest.raises(ValueError, match=r"^confseq.finalize: margin must be >= 0 .*got -0.1$"):
        cs_mod.finalize(st, [0.5], [True], -0.1)
    out = cs_mod.finalize(st, [0.5], [True], 0.0)
    assert float(out.lower[0]) == float(out.upper[0]) == 0.5


def test_betting_uses_its_truncation():
    """``truncation`` sets the betting cap: two kinds that differ only in it are different
    objects and each follows the float64 reference at its own truncation (on these terms
    the two references differ by up to 1/16)."""
    ys, los, his, ms = _random_terms(0)
    quarter = cs_mod.get("betting", grid_size=32, truncation=0.25)
    half = cs_mod.get("betting", grid_size=32, truncation=0.5)
    assert quarter is not half
    want_q = ref_betting(ys, los, his, ms, 0.1, 32, trunc=0.25)
    want_h = ref_betting(ys, los, his, ms, 0.1, 32, trunc=0.5)
    assert np.abs(want_q - want_h).max() > 0.01  # the trap is real
    np.testing.assert_allclose(_run(quarter, ys, los, his, ms, 0.1), want_q, atol=2e-4)
    np.testing.assert_allclose(_run(half, ys, los, his, ms, 0.1), want_h, atol=2e-4)


def test_betting_defaults_are_128_cells_and_half_truncation():
    """``get("betting")`` is the documented default: ``grid_size=128``, ``truncation=0.5``
    (the same object as asked for explicitly, and the float64 reference's bounds)."""
    cs = cs_mod.get("betting")
    assert cs is cs_mod.get("betting", grid_size=128, truncation=0.5)
    assert cs.init(()).logk_lo.shape == (128,)
    ys, los, his, ms = _random_terms(1)
    want = ref_betting(ys, los, his, ms, 0.1, 128, trunc=0.5)
    np.testing.assert_allclose(_run(cs, ys, los, his, ms, 0.1), want, atol=2e-4)


def _doc_pairs():
    """The docstring's three pairs: slope 1.5385 (clipped to 1)."""
    st = lambda_stats_init()
    for s_, p_ in [(1.0, 0.9), (0.0, 0.2), (1.0, 0.7)]:
        st = lambda_stats_update(st, s_, p_)
    return st


def test_plugin_lambda_default_shrink_is_ten():
    """The default prior pseudo-count is ``shrink = 10``: 3 pairs with clipped slope 1 and
    ``lam0 = 0.5`` give ``w = 3 / 13`` and ``0.5 + 0.5 * 3 / 13``."""
    got = float(plugin_lambda(_doc_pairs(), lam0=0.5))
    np.testing.assert_allclose(got, 0.5 + 0.5 * 3 / 13, atol=1e-6)


def test_plugin_lambda_zero_min_var_with_constant_predictions_gives_lam0():
    """Predictions without spread leave the slope undefined and ``lam0`` is returned, also
    with ``min_var = 0`` (the floor is strict: a zero spread never uses the slope), so the
    result stays in [0, 1] instead of becoming 0/0."""
    st = lambda_stats_init((2,))
    for s_ in (1.0, 0.0, 1.0):
        st = lambda_stats_update(st, jnp.full(2, s_), jnp.full(2, 0.4))
    assert np.all(np.asarray(st.m2_p) == 0.0)  # the trap is real: 0 <= 0 * count
    lam = np.asarray(plugin_lambda(st, lam0=jnp.array([0.3, 0.9]), shrink=0.0, min_var=0.0))
    np.testing.assert_array_equal(lam, np.float32([0.3, 0.9]))


def test_eb_bets_capped_through_the_eps_floor_when_the_centre_is_a_range_end():
    """A centre on a range end (``m = hi`` on the upper side, ``m = lo`` on the lower side)
    on a range of width ``2e-6``: the plug-in bet ``b`` is about ``2.9e6`` here, above the
    cap ``0.5 / c`` with ``c = max(distance, eps) = eps = 1e-6`` of the module docstring, so
    the side whose centre sits on its end bets exactly ``0.5 / eps`` (a zero distance must
    not lift the cap)."""
    cs = cs_mod.get("eb")
    lo = jnp.float32(0.25)
    hi = lo + jnp.float32(2.0**-19)  # width 1.9e-6, exact in float32
    up = cs.update(cs.init(()), lo, lo, hi, hi, jnp.float32(0.1))
    down = cs.update(cs.init(()), hi, lo, hi, lo, jnp.float32(0.1))
    cap = 0.5 / cs_mod._EPS
    np.testing.assert_allclose([float(up.sum_b_hi), float(down.sum_b_lo)], cap, rtol=1e-6)
    # the other side is capped by its true distance (the whole width): 0.5 / 2**-19
    np.testing.assert_allclose([float(up.sum_b_lo), float(down.sum_b_hi)], 2.0**18, rtol=1e-6)



def test_lambda_stats_invalid_pairs_leave_every_moment_unchanged():
    """Pairs passed with ``valid=False`` leave *every* field unchanged, not only the count
    and the means: the docstring's three pairs interleaved with two masked-out pairs give
    the same stats (co-moment and spread included) and the same ``lam`` as the three alone.
    (The existing mask test masks an arm out entirely, where a leaking co-moment is hidden
    by the zero prediction spread.)"""
    ref = _doc_pairs()
    seq = [(0.0, 0.95, False), (1.0, 0.9, True), (0.0, 0.2, True), (1.0, 0.05, False),
           (1.0, 0.7, True)]
    st = lambda_stats_init()
    for s_, p_, v in seq:
        st = lambda_stats_update(st, s_, p_, valid=v)
    for name in ("count", "mean_s", "mean_p", "c_sp", "m2_p"):
        np.testing.assert_allclose(getattr(st, name), getattr(ref, name), atol=1e-6, err_msg=name)
    np.testing.assert_allclose(
        plugin_lambda(st, lam0=0.0, shrink=0.0), plugin_lambda(ref, lam0=0.0, shrink=0.0),
        atol=1e-6,
    )


def test_get_takes_a_concrete_zero_d_truncation():
    """A 0-d NumPy or JAX array is a number here, as 0-d integer arrays are for
    grid_size; a 1-d one is not."""
    want = cs_mod.get("betting", truncation=0.3)
    for t in (np.array(0.3), jnp.array(0.3, jnp.float32), np.float32(0.3)):
        got = cs_mod.get("betting", truncation=t)
        assert got.init((1,)).logk_lo.shape == want.init((1,)).logk_lo.shape
    with pytest.raises(ValueError, match="truncation must be a number in"):
        cs_mod.get("betting", truncation=np.array([0.3]))
