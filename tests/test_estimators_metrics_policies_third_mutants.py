"""Third mutation review of the doubly robust helpers, the metrics and the bandit index
policies: the plug-in lambda's variance floor (a floor on the *mean* squared spread of the
predictions over the arm's own pairs, default ``1e-6``, independent of the ``n_obs`` that
only sets the shrinkage weight), best arms within an *absolute* tolerance, Kendall's NaN
rule per leading index, coverage with a NaN upper bound or truth, the shape check naming
``upper``, and SySRs rejecting by the ranking estimate."""

import jax.numpy as jnp
import numpy as np
import pytest
from test_metrics_policies_mutants import _sysrs, _view

from jaxeval import _policies as pol
from jaxeval import metrics
from jaxeval._estimators import lambda_stats_init, lambda_stats_update, plugin_lambda


def _alternating(k, half_spread):
    """``k`` pairs: predictions ``0.5 +- half_spread`` alternately, scores 1 on the high
    ones and 0 on the low ones (least-squares slope ``0.5 / half_spread``, clipped to 1)."""
    st = lambda_stats_init()
    for i in range(k):
        hi = i % 2 == 0
        st = lambda_stats_update(st, 1.0 if hi else 0.0, 0.5 + (half_spread if hi else
                                                              -half_spread))
    return st


def test_plugin_lambda_floor_is_on_the_mean_squared_spread():
    """``min_var`` floors the *mean* squared spread ``m2_p / count``: 100 pairs spread by
    ``+-5e-4`` have a mean squared spread of ``2.5e-7 < 1e-6`` (so ``lam0`` is returned)
    although their summed spread ``m2_p = 2.5e-5`` is above ``1e-6``; a floor of ``1e-7``
    lets the (clipped) slope through."""
    st = _alternating(100, 5e-4)
    assert float(st.m2_p) > 1e-6  # the trap is real: the unscaled sum clears the floor
    np.testing.assert_allclose(float(st.m2_p) / 100, 2.5e-7, rtol=1e-2)
    assert float(plugin_lambda(st, lam0=0.3, shrink=0.0)) == pytest.approx(0.3)
    assert float(plugin_lambda(st, lam0=0.3, shrink=0.0, min_var=1e-7)) == pytest.approx(1.0)


def test_plugin_lambda_default_floor_is_one_in_a_million():
    """Four pairs spread by ``+-0.01`` (mean squared spread ``1e-4``, far above the default
    ``min_var = 1e-6``) use the slope (``50``, clipped to 1); a floor of ``1e-3`` would
    not, and returns ``lam0``."""
    st = _alternating(4, 0.01)
    assert float(plugin_lambda(st, lam0=0.0, shrink=0.0)) == pytest.approx(1.0)
    assert float(plugin_lambda(st, lam0=0.0, shrink=0.0, min_var=1e-3)) == 0.0


def test_plugin_lambda_n_obs_sets_the_weight_not_the_floor():
    """``n_obs`` only sets the shrinkage weight: the variance floor stays a mean over the
    arm's own ``count`` pairs. Four pairs with mean squared spread ``1e-4`` and
    ``min_var = 1e-6`` use the slope (clipped to 1) even with ``n_obs = 1000`` (a floor
    scaled by ``n_obs`` would be ``1e-3`` and return ``lam0``); the weight is
    ``1000 / (1000 + shrink)``."""
    st = _alternating(4, 0.01)
    got = float(plugin_lambda(st, lam0=0.2, n_obs=1000, shrink=0.0))
    assert got == pytest.approx(1.0)
    got = float(plugin_lambda(st, lam0=0.2, n_obs=1000, shrink=1000.0))
    assert got == pytest.approx(0.5 * 1.0 + 0.5 * 0.2)


def test_plugin_lambda_negative_slope_is_clipped_before_shrinking():
    """``lam_hat = clip(slope, 0, 1)`` comes *before* the shrinkage toward ``lam0``: three
    pairs with a negative slope give ``lam_hat = 0``, so with ``shrink = 3`` (``w = 1/2``)
    and ``lam0 = 0.8`` the result is ``0.5 * 0 + 0.5 * 0.8 = 0.4`` (a slope clipped only at
    the end would pull it to 0)."""
    st = lambda_stats_init()
    for s_, p_ in [(1.0, 0.1), (0.0, 0.9), (1.0, 0.2)]:
        st = lambda_stats_update(st, s_, p_)
    assert float(st.c_sp) < 0
    assert float(plugin_lambda(st, lam0=0.8, shrink=3.0)) == pytest.approx(0.4, abs=1e-6)
    # above 1 the same: slope 1.54 -> 1, half way to lam0 = 0.2 gives 0.6
    hi = lambda_stats_init()
    for s_, p_ in [(1.0, 0.9), (0.0, 0.2), (1.0, 0.7)]:
        hi = lambda_stats_update(hi, s_, p_)
    assert float(plugin_lambda(hi, lam0=0.2, shrink=3.0)) == pytest.approx(0.6, abs=1e-6)


def test_best_arms_tolerance_is_absolute():
    """``atol`` is an absolute distance from the best score: with ``atol = 0.05`` an arm at
    0.46 is within 0.05 of 0.5 (a relative tolerance, ``0.5 * 0.95 = 0.475``, would miss
    it); an arm at 0.44 is not. Identification counts it as correct."""
    truth = jnp.array([0.5, 0.46, 0.44], jnp.float32)
    assert metrics.best_arms(truth, atol=0.05).tolist() == [True, True, False]
    ok = metrics.identification_correct(jnp.array([0, 1, 2]), truth, 0.05)
    assert ok.tolist() == [True, True, False]
    # accuracies near 1: 0.95 is 0.04 below 0.99 (relative: 0.99 * 0.96 = 0.9504)
    assert metrics.best_arms(jnp.array([0.99, 0.95]), atol=0.04).tolist() == [True, True]


def test_kendall_nan_is_per_leading_index():
    """A NaN in one row of a batch makes only that row's tau NaN; the other rows keep
    their value (as row-by-row calls give)."""
    x = np.array([[0.0, 1.0, 2.0, 3.0], [0.0, np.nan, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
    y = np.tile(np.arange(4.0), (3, 1))
    got = np.asarray(metrics.kendall_tau_b(x, y))
    assert got[0] == 1.0 and np.isnan(got[1]) and got[2] == -1.0
    got = np.asarray(metrics.kendall_tau_b(y, x))
    assert got[0] == 1.0 and np.isnan(got[1]) and got[2] == -1.0


def test_coverage_nan_upper_bound_or_truth_does_not_cover():
    """Documented: a NaN bound or truth does not cover; the existing test has a NaN lower
    bound only. A NaN upper bound, a NaN truth, and an interval around a NaN truth all
    fail to cover, and the family-wise flag is False."""
    per_arm, fw = metrics.coverage(jnp.array([0.1, 0.1, 0.0]), jnp.array([jnp.nan, 0.9, 1.0]),
                                   jnp.array([0.5, jnp.nan, 0.5]))
    assert per_arm.tolist() == [False, False, True] and not bool(fw)
    per_arm, fw = metrics.coverage(jnp.array([0.1]), jnp.array([jnp.nan]), jnp.array([0.5]))
    assert per_arm.tolist() == [False] and not bool(fw)


def test_coverage_names_an_upper_bound_of_the_wrong_shape():
    """An ``upper`` that does not broadcast with the others is refused naming it and all
    three shapes (the existing test only mismatches ``truth``)."""
    with pytest.raises(ValueError, match=r"^coverage: shapes do not broadcast together: "
                       r"lower \(3,\), upper \(4,\), truth \(3,\)$"):
        metrics.coverage(np.zeros(3), np.ones(4), np.ones(3))


def test_sysrs_rejects_by_the_ranking_estimate_not_the_observed_mean():
    """At the end of a phase SySRs rejects the surviving arm with the lowest *estimate*
    (``ArmView.estimate``, the ranking estimate), whatever the observed means say: here
    arm 0 has the lowest estimate but the highest observed mean."""
    v = _view([2, 2, 2], mean_obs=[0.9, 0.1, 0.5], estimate=[0.3, 0.5, 0.4])
    ps = pol.PolicyState(jnp.ones(3, bool), jnp.int32(0))
    arm, cap, ok, new = pol.choose_arm("sysrs", v, ps, jnp.float32(0.5), jnp.float32(1.0),
                                       (2, 4))
    assert np.asarray(new.alive).tolist() == [False, True, True]
    assert (int(arm), int(cap), bool(ok), int(new.phase)) == (1, 2, True, 1)
    assert _sysrs([2, 2, 2], [0.3, 0.5, 0.4], [True] * 3, 0, (2, 4))[3] == [False, True, True]
