"""Doubly robust estimator: hand-checked values, exact unbiasedness, plug-in lambda."""

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval._estimators import (
    difference_estimate,
    dr_range,
    dr_term,
    lambda_stats_init,
    lambda_stats_update,
    naive_pooled,
    plugin_lambda,
)

# jitted once for the many small calls below (eager dispatch is slow)
_term = jax.jit(dr_term)
_range = jax.jit(dr_range)
_plugin = jax.jit(plugin_lambda)
_update = jax.jit(lambda_stats_update)

# A tiny row: theta = 0.75. Seen O = {0}, unseen U = {1, 2, 3}.
S = np.array([1.0, 0.0, 1.0, 1.0])
P = np.array([0.5, 0.3, 0.2, 0.7])
N = 4


def _sums(seen, pred=P, s=S):
    seen = np.asarray(seen, bool)
    return (
        s[seen].sum(),
        pred[~seen].sum(),
        int((~seen).sum()),
        pred[~seen].max(),
        pred[~seen].min(),
    )


def test_dr_term_hand_values():
    # lam = 1: A = 1 + 1.2 = 2.2; Y_j = (2.2 + 3 (S_j - P_j)) / 4
    #   j=1: (2.2 - 0.9)/4 = 0.325; j=2: (2.2 + 2.4)/4 = 1.15; j=3: (2.2 + 0.9)/4 = 0.775
    y = dr_term(1.0, 1.2, 3, S[1:], P[1:], 1.0, N)
    np.testing.assert_allclose(y, [0.325, 1.15, 0.775], rtol=1e-6)
    # lam = 0.5: A = 1.6; j=1: (1.6 - 0.45)/4 = 0.2875; j=2: (1.6 + 2.7)/4 = 1.075;
    #   j=3: (1.6 + 1.95)/4 = 0.8875
    y = dr_term(1.0, 1.2, 3, S[1:], P[1:], 0.5, N)
    np.testing.assert_allclose(y, [0.2875, 1.075, 0.8875], rtol=1e-6)
    # all three average to theta = 0.75
    assert float(jnp.mean(y)) == pytest.approx(0.75, abs=1e-6)
    assert y.dtype == jnp.float32


def test_dr_range_hand_values_and_contains_terms():
    # lam = 1: lo = (2.2 - 3 * 0.7)/4 = 0.025, hi = (2.2 + 3 * (1 - 0.2))/4 = 1.15
    lo, hi = dr_range(1.0, 1.2, 3, 0.7, 0.2, 1.0, N)
    assert float(lo) == pytest.approx(0.025, abs=1e-6)
    assert float(hi) == pytest.approx(1.15, abs=1e-6)
    # lam = 0: the plain range [sum_O S / n, (sum_O S + |U|) / n] = [0.25, 1.0]
    lo0, hi0 = dr_range(1.0, 1.2, 3, 0.7, 0.2, 0.0, N)
    np.testing.assert_allclose([lo0, hi0], [0.25, 1.0], rtol=1e-6)
    # Every possible term (any unseen score in {0, 1}) and theta lie in [lo, hi].
    for lam in (0.0, 0.3, 1.0):
        lo, hi = dr_range(1.0, 1.2, 3, 0.7, 0.2, lam, N)
        for s_j in (0.0, 1.0):
            y = dr_term(1.0, 1.2, 3, s_j, P[1:], lam, N)
            assert bool(jnp.all((y >= lo - 1e-6) & (y <= hi + 1e-6)))
        assert float(lo) <= 0.75 <= float(hi)
    # nothing left unseen: lo = hi = the exact value
    lo, hi = dr_range(3.0, 0.0, 0, 0.0, 0.0, 0.7, N)
    assert float(lo) == float(hi) == pytest.approx(0.75)


def test_naive_and_difference_hand_values():
    assert float(naive_pooled(1.0, 1.2, N)) == pytest.approx(0.55, abs=1e-6)
    # mean_O S + lam |U|/n (mean_U P - mean_O P) = 1 + 0.75 * (0.4 - 0.5) = 0.925
    assert float(difference_estimate(1.0, 0.5, 1, P.sum(), 1.0, N)) == pytest.approx(0.925, 1e-6)
    # lam = 0: the sample mean of the seen items
    assert float(difference_estimate(1.0, 0.5, 1, P.sum(), 0.0, N)) == pytest.approx(1.0)
    # nothing seen: the mean prediction
    assert float(difference_estimate(0.0, 0.0, 0, P.sum(), 0.6, N)) == pytest.approx(0.425)


@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0])
def test_difference_estimate_forms_agree_and_exact_when_full(lam):
    rng = np.random.default_rng(0)
    n = 30
    s = rng.integers(0, 2, n).astype(float)
    p = rng.uniform(size=n)
    for k in (1, 5, 17, 29, 30):
        seen = np.zeros(n, bool)
        seen[rng.permutation(n)[:k]] = True
        est = difference_estimate(s[seen].sum(), p[seen].sum(), k, p.sum(), lam, n)
        mu = s[~seen].size and p[~seen].mean()
        form1 = s[seen].mean() + lam * ((n - k) / n) * (mu - p[seen].mean())
        resid = (s[seen] - lam * p[seen]).mean()
        form2 = (s[seen].sum() + (lam * p[~seen] + resid).sum()) / n
        np.testing.assert_allclose(est, form1, atol=2e-6)
        np.testing.assert_allclose(est, form2, atol=2e-6)
    # fully observed: exact whatever the predictions
    est = difference_estimate(s.sum(), p.sum(), n, p.sum(), lam, n)
    assert float(est) == pytest.approx(s.mean(), abs=1e-6)


@pytest.mark.parametrize("shift", [0.0, 0.3, -0.25])
def test_dr_term_exactly_unbiased_by_enumeration(shift):
    """E[Y | past] = theta exactly for biased predictions, every seen set, every lam."""
    rng = np.random.default_rng(1)
    n = 9
    s = rng.uniform(size=n).round(2)  # graded scores
    s[:3] = (0.0, 1.0, 1.0)
    theta = s.mean()
    p = np.clip(rng.uniform(size=n) + shift, 0, 1)
    for k in range(n):
        for seen_idx in itertools.islice(itertools.combinations(range(n), k), 12):
            seen = np.zeros(n, bool)
            seen[list(seen_idx)] = True
            sum_o, sum_pu, nu, pmax, pmin = _sums(seen, p, s)
            for lam in (0.0, 0.37, 1.0):
                ys = _term(sum_o, sum_pu, nu, s[~seen], p[~seen], lam, n)
                assert float(jnp.mean(ys)) == pytest.approx(theta, abs=2e-6)
                lo, hi = _range(sum_o, sum_pu, nu, pmax, pmin, lam, n)
                assert float(jnp.min(ys)) >= float(lo) - 1e-6
                assert float(jnp.max(ys)) <= float(hi) + 1e-6


def test_martingale_with_adaptive_lambda_all_orders():
    """Over all 5! draw orders, with lam set from the past by plugin_lambda (frozen within
    batches of 2), the k-th term averages to theta at every k: a martingale difference."""
    s = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    p = np.array([0.9, 0.6, 0.2, 0.7, 0.1])  # poorly calibrated on purpose
    n = s.size
    theta = s.mean()
    total = np.zeros(n)
    perms = list(itertools.permutations(range(n)))
    for order in perms:
        st = lambda_stats_init()
        seen = np.zeros(n, bool)
        lam = 0.5
        for k, j in enumerate(order):
            if k % 2 == 0:  # new batch: refresh lam from the past only
                lam = float(_plugin(st, 0.5, None, 1.0))
            sum_o, sum_pu, nu, _, _ = _sums(seen, p, s)
            total[k] += float(_term(sum_o, sum_pu, nu, s[j], p[j], lam, n))
            seen[j] = True
            st = _update(st, s[j], p[j])
    np.testing.assert_allclose(total / len(perms), theta, atol=1e-5)


def test_lambda_zero_is_plain_without_replacement():
    rng = np.random.default_rng(2)
    n = 50
    s = rng.integers(0, 2, n).astype(float)
    p = rng.uniform(size=n)
    order = rng.permutation(n)
    seen = np.zeros(n, bool)
    for j in order[:20]:
        sum_o, sum_pu, nu, pmax, pmin = _sums(seen, p, s)
        y = dr_term(sum_o, sum_pu, nu, s[j], p[j], 0.0, n)
        # (sum_O S + |U| S_j) / n, predictions play no role
        assert float(y) == pytest.approx((s[seen].sum() + nu * s[j]) / n, abs=1e-6)
        lo, hi = dr_range(sum_o, sum_pu, nu, pmax, pmin, 0.0, n)
        assert float(lo) == pytest.approx(s[seen].sum() / n, abs=1e-6)
        assert float(hi) == pytest.approx((s[seen].sum() + nu) / n, abs=1e-6)
        seen[j] = True
    assert float(difference_estimate(s[seen].sum(), p[seen].sum(), 20, p.sum(), 0.0, n)) == (
        pytest.approx(s[seen].mean(), abs=1e-6)
    )


def test_elementwise_over_arms_and_broadcast():
    k = 5
    rng = np.random.default_rng(3)
    so = rng.uniform(0, 10, k)
    pu = rng.uniform(0, 10, k)
    nu = rng.integers(1, 20, k)
    sj = rng.integers(0, 2, k).astype(float)
    pj = rng.uniform(size=k)
    lam = rng.uniform(size=k)
    y = dr_term(so, pu, nu, sj, pj, lam, 30)
    assert y.shape == (k,)
    for i in range(k):
        assert float(y[i]) == pytest.approx(
            float(dr_term(so[i], pu[i], nu[i], sj[i], pj[i], lam[i], 30)), rel=1e-6
        )
    lo, hi = dr_range(so, pu, nu, pj + 0.1, pj, 0.5, 30)  # scalar lam broadcasts
    assert lo.shape == hi.shape == (k,)


def test_plugin_lambda_matches_least_squares_slope():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.2, 0.8, size=(3, 200))
    slopes = np.array([0.6, 0.3, 2.0])
    s = np.clip(slopes[:, None] * (p - 0.5) + 0.5 + 0.05 * rng.normal(size=p.shape), 0, 1)
    st = lambda_stats_init((3,))
    upd = jax.jit(lambda_stats_update)
    for t in range(p.shape[1]):
        st = upd(st, s[:, t], p[:, t])
    assert st.count.dtype == jnp.int32
    np.testing.assert_array_equal(st.count, [200, 200, 200])
    ls = np.array([np.polyfit(p[i], s[i], 1)[0] for i in range(3)])
    np.testing.assert_allclose(st.c_sp / st.m2_p, ls, rtol=1e-4)
    lam = plugin_lambda(st, lam0=0.5, shrink=0.0)
    np.testing.assert_allclose(lam, np.clip(ls, 0, 1), rtol=1e-4)
    # shrinkage: weight k / (k + shrink) on the plug-in
    lam = plugin_lambda(st, lam0=0.0, shrink=200.0)
    np.testing.assert_allclose(lam, 0.5 * np.clip(ls, 0, 1), rtol=1e-4)
    # n_obs overrides the weight
    lam = plugin_lambda(st, lam0=1.0, n_obs=jnp.array([0, 1, 2]), shrink=1.0)
    w = np.array([0.0, 0.5, 2 / 3])
    np.testing.assert_allclose(lam, w * np.clip(ls, 0, 1) + (1 - w), rtol=1e-4)


def test_plugin_lambda_edge_cases():
    st = lambda_stats_init((2,))
    np.testing.assert_allclose(plugin_lambda(st, lam0=0.3, shrink=0.0), [0.3, 0.3])
    # constant predictions: slope undefined -> lam0
    for _ in range(10):
        st = _update(st, jnp.array([1.0, 0.0]), jnp.array([0.4, 0.4]))
    np.testing.assert_allclose(plugin_lambda(st, lam0=0.7, shrink=0.0), [0.7, 0.7])
    # negative slope clips to 0; valid mask leaves the other arm untouched
    st = lambda_stats_init((2,))
    for s_, p_ in [(1.0, 0.1), (0.0, 0.9), (1.0, 0.2)]:
        st = lambda_stats_update(
            st, jnp.array([s_, s_]), jnp.array([p_, p_]), valid=jnp.array([True, False])
        )
    np.testing.assert_array_equal(st.count, [3, 0])
    assert float(st.m2_p[1]) == 0.0 and float(st.mean_s[1]) == 0.0
    np.testing.assert_allclose(plugin_lambda(st, lam0=0.8, shrink=0.0), [0.0, 0.8])


def test_no_retrace_for_new_lambda_values():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(stats, lam0, shrink, lam):
        y = dr_term(1.0, 1.2, 3, 1.0, 0.5, lam, 4)
        lo, hi = dr_range(1.0, 1.2, 3, 0.7, 0.2, lam, 4)
        return y, lo, hi, plugin_lambda(stats, lam0, shrink=shrink)

    chex.clear_trace_counter()
    st = lambda_stats_init((3,))
    for v in (0.1, 0.5, 0.9):
        f(st, jnp.float32(v), jnp.float32(10 * v), jnp.float32(v))  # traced once (chex)
