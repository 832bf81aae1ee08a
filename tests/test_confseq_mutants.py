"""Mutation-review tests for the statistical core (_confseq, _estimators): each pins a
behaviour that a plausible one-line slip would change and that the other tests let pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_confseq import _run, ref_betting  # (a sequence's scan; float64 betting)

from jaxeval import _confseq as cs_mod
from jaxeval import _sampling as smp
from jaxeval._estimators import lambda_stats_init, lambda_stats_update, plugin_lambda

TOL = cs_mod.NUM_TOL


def _ref_eb(ys, los, his, ms, alpha):
    """float64 empirical Bernstein straight from the module docstring (both sides)."""
    big_l = np.log(2 / alpha)
    sz2 = s_lo = sy_lo = p_lo = s_hi = sy_hi = p_hi = 0.0
    lower, upper = 0.0, 1.0
    out = []
    for k, (y, lo, hi, m) in enumerate(zip(ys, los, his, ms), start=1):
        w = max(hi - lo, 1e-6)
        bb = np.sqrt(2 * big_l / (w**2 * (0.25 + sz2) / k * k * np.log1p(k)))
        c, cp = max(m - lo, 1e-6), max(hi - m, 1e-6)
        b, bp = min(bb, 0.5 / c), min(bb, 0.5 / cp)
        psi = lambda g: -np.log1p(-g) - g  # noqa: E731
        s_lo, sy_lo, p_lo = s_lo + b, sy_lo + b * y, p_lo + psi(b * c) * (y - m) ** 2 / c**2
        s_hi, sy_hi = s_hi + bp, sy_hi + bp * y
        p_hi += psi(bp * cp) * (y - m) ** 2 / cp**2
        lower = np.clip(max(lower, max((sy_lo - big_l - p_lo) / s_lo, lo) - TOL), 0, 1)
        upper = np.clip(min(upper, min((sy_hi + big_l + p_hi) / s_hi, hi) + TOL), 0, 1)
        sz2 += (y - m) ** 2 / w**2
        out.append((lower, upper))
    return np.array(out)


@pytest.mark.parametrize("centre,lo,hi", [(0.15, 0.0, 1.0), (0.85, 0.0, 1.0), (0.5, 0.3, 0.7)])
def test_eb_bounds_from_the_sequence_match_reference(centre, lo, hi):
    """Long runs whose final bounds come from the sequence, not from the range: (1) a
    centre near one end, so the two sides' distances ``m - lo`` and ``hi - m`` and their
    caps ``0.5 / c`` differ (every other reference run has a centre near the middle, where
    swapping them changes nothing); (2) a constant range of width 0.4, so the variance
    estimate's normalisation by ``w**2`` matters (the other long run has ``w = 1``)."""
    rng = np.random.default_rng(7)
    t = 300
    p = (centre - lo) / (hi - lo)
    ys = np.where(rng.uniform(size=t) < p, hi, lo)
    los, his, ms = np.full(t, lo), np.full(t, hi), np.full(t, centre)
    got = _run(cs_mod.get("eb"), ys, los, his, ms, 0.1)
    want = _ref_eb(ys, los, his, ms, 0.1)
    np.testing.assert_allclose(got, want, atol=2e-5)
    # both final bounds strictly inside the range: they come from the sums
    assert lo + 0.01 < want[-1, 0] < want[-1, 1] < hi - 0.01


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_finalize_replaces_an_interval_that_excludes_the_exact_value(kind):
    """``finalize`` sets the interval to the exact value whatever the sequence said, also
    when the running interval had (on the miscoverage event) moved away from it."""
    cs = cs_mod.get(kind, grid_size=16)
    st = cs.init((2,))
    for _ in range(60):  # terms all at 0.9: the interval leaves 0.2 behind
        st = cs.update(st, jnp.full(2, 0.9), 0.0, 1.0, 0.9, jnp.float32(0.1))
    lo, hi = cs.bounds(st)
    assert float(lo[0]) > 0.3  # the trap is real
    fin = cs.finalize(st, jnp.array([0.2, 0.2]), jnp.array([True, False]))
    flo, fhi = (np.asarray(a) for a in cs.bounds(fin))
    np.testing.assert_allclose([flo[0], fhi[0]], [0.2 - TOL, 0.2 + TOL], rtol=0, atol=3e-8)
    assert (flo[1], fhi[1]) == (float(lo[1]), float(hi[1]))


def test_finalize_clips_to_unit_interval():
    """Exact values at the ends of [0, 1]: the margin must not push a bound outside."""
    st = cs_mod.get("eb").init((3,))
    fin = cs_mod.finalize(st, jnp.array([0.0, 1.0, 0.5]), jnp.array([True, True, True]), 0.01)
    np.testing.assert_allclose(fin.lower, [0.0, 0.99, 0.49], rtol=0, atol=1e-7)
    np.testing.assert_allclose(fin.upper, [0.01, 1.0, 0.51], rtol=0, atol=1e-7)


@pytest.mark.parametrize("n_obs", [None, 1, 100])
def test_plugin_lambda_variance_floor_is_per_pair(n_obs):
    """``min_var`` floors the *mean* squared spread of the predictions over the pairs in
    the stats: 100 pairs whose predictions spread by 5e-4 (mean square 2.5e-7 < 1e-6, sum
    2.5e-5 > 1e-6) give ``lam0``, not their (huge) slope; a spread of 5e-3 uses the slope.
    ``n_obs`` only sets the shrinkage weight (a floor scaled by ``n_obs = 1`` would pass
    the first pair's slope)."""
    st = lambda_stats_init((2,))
    upd = jax.jit(lambda_stats_update)
    for i in range(100):
        sgn = 1.0 if i % 2 else -1.0
        p = 0.5 + sgn * jnp.array([5e-4, 5e-3])
        st = upd(st, jnp.full(2, 0.5 + 0.5 * sgn), p)
    m2 = np.asarray(st.m2_p)
    assert 1e-6 < m2[0] < 100 * 1e-6 < m2[1]  # the trap is real
    n = None if n_obs is None else jnp.full(2, n_obs, jnp.int32)
    lam = np.asarray(plugin_lambda(st, lam0=0.3, n_obs=n, shrink=0.0))
    np.testing.assert_allclose(lam, [0.3, 1.0], rtol=1e-6)


def test_betting_rejection_is_forever():
    """40 terms at 0 then 60 at 1 (a miscoverage path): the upper tests reject the high
    cells first, their capital then falls back below the threshold, and the lower tests
    reject the low cells. A cell is rejected once its *running maximum* of log capital
    crossed the threshold, so every cell ends rejected (an empty interval), exactly as the
    float64 reference says; reading the current capital would revive the high cells."""
    t0, t1 = 40, 60
    ys = np.concatenate([np.zeros(t0), np.ones(t1)])
    los, his, ms = np.zeros(t0 + t1), np.ones(t0 + t1), np.full(t0 + t1, 0.5)
    got = _run(cs_mod.get("betting", grid_size=32), ys, los, his, ms, 0.1)
    want = ref_betting(ys, los, his, ms, 0.1, 32)
    assert want[-1, 0] > want[-1, 1]  # the path does empty the set
    np.testing.assert_allclose(got, want, atol=2e-4)


def test_betting_mean_estimate_clipped_to_current_range():
    """Ranges that jump (as DR ranges do when a surprising score is seen): the predictable
    mean of past terms lies above the current range, and the bets use it clipped to the
    range, as the float64 reference does."""
    t0, t1 = 30, 50
    ys = np.concatenate([np.full(t0, 0.9), np.full(t1, 0.2)])
    los = np.concatenate([np.full(t0, 0.5), np.zeros(t1)])
    his = np.concatenate([np.ones(t0), np.full(t1, 0.4)])
    ms = (los + his) / 2
    got = _run(cs_mod.get("betting", grid_size=32), ys, los, his, ms, 0.1)
    want = ref_betting(ys, los, his, ms, 0.1, 32)
    np.testing.assert_allclose(got, want, atol=2e-4)


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_bounds_stay_in_unit_interval_on_negative_terms(kind):
    """Negative terms (DR terms can be) far below a range whose top is 0: the sequence's
    own upper bound goes negative, and the reported bounds are still clipped to [0, 1]."""
    cs = cs_mod.get(kind, grid_size=16)
    t = 200
    b = _run(cs, np.full(t, -0.9), np.full(t, -1.0), np.zeros(t), np.full(t, -0.5), 0.1)
    assert np.all((b >= 0.0) & (b <= 1.0)), b.min()


def test_largest_possible_key_is_drawn():
    """A key of ``2**31 - 1`` (the largest 31-bit key) maps to the score 0, which is still a
    valid candidate: every item is drawn, by the whole-row and the blockwise search."""
    kmax = 2**31 - 1
    keys = jnp.array([kmax, 3, kmax, 0], jnp.int32)
    state = smp.init(1)
    seen = smp.seen_mask(keys, state.thr_key[0], state.thr_idx[0])
    items, valid, new = smp.take_batch(keys, seen, state, 0, 4)
    assert np.asarray(valid).all()
    assert np.asarray(items).tolist() == [3, 1, 0, 2]
    assert (int(new.count[0]), int(new.thr_key[0]), int(new.thr_idx[0])) == (4, kmax, 2)
    idx = jnp.arange(4, dtype=jnp.int32)
    top = smp.block_top(keys, idx, ~seen, 4)
    b_items, b_valid, b_new, _ = smp.finish_top(top, state, 0)
    assert np.asarray(b_valid).all()
    assert np.asarray(b_items).tolist() == [3, 1, 0, 2]
    assert all(np.array_equal(x, y) for x, y in zip(b_new, new))
