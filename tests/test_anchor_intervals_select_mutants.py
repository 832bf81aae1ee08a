"""Gaps a third mutation review of the anchor intervals, selection and ridge code found:
the extra-item draw's range, the betting grid step, the DR interval's betting call and
defaults, the k-means++ start and Lloyd iterations, the refinement trace's recorded MSE,
and the validated ridge's reported strength and MSE. Each test fails on a planted bug
the rest of the suite let through."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_anchor_internals_mutants import _dr_case, _refine_case

from jaxeval.anchors import dr_estimate, fit_ridge, fit_ridge_validated, kmeans_anchors
from jaxeval.anchors._intervals import betting_wor_interval, sample_non_anchors
from jaxeval.anchors._select import _kmeans_pp_init


# ------------------------------------------------------------ extra-item draw
def test_sample_non_anchors_takes_zero_to_every_non_anchor():
    """``m`` runs from 0 (no extra items) to ``n - k`` (every non-anchor, none twice);
    one more is refused naming ``m``, its range and what bounds it."""
    key, anchors = jax.random.key(0), jnp.array([0, 1, 2])
    none = sample_non_anchors(key, anchors, 6, 0)
    assert none.shape == (0,) and none.dtype == jnp.int32
    assert sorted(sample_non_anchors(key, anchors, 6, 3).tolist()) == [3, 4, 5]
    with pytest.raises(ValueError, match=r"m: expected an integer in \[0, 3\] \(the 6 items "
                                         r"less the 3 anchors\), got 4"):
        sample_non_anchors(key, anchors, 6, 4)


def test_betting_bounds_are_grid_points_moved_out_by_one_grid_step():
    """On a coarse grid (``grid_size = 11``: candidates ``0, 0.1, ..., 1``) the bounds are
    kept candidates widened by one step ``1 / (grid_size - 1)``: themselves on the grid
    (a step of ``1 / grid_size`` left them off it)."""
    rng = np.random.default_rng(2)
    for m, pop, p in ((20, 200, 0.5), (40, 60, 0.3), (10, 1000, 0.3)):
        x = (rng.random(m) < p).astype(np.float32)
        lo, hi = (float(v) for v in betting_wor_interval(jnp.asarray(x), pop, 0.1, 11))
        assert lo < hi < 1.0, (m, pop, lo, hi)  # (the upper bound is not clipped)
        np.testing.assert_allclose(np.array([lo, hi]) * 10, np.round([lo * 10, hi * 10]),
                                   atol=1e-4)


# ------------------------------------------------------------------- DR interval
def _dr_args(seed=0):
    s, p, anchors, samp = _dr_case(seed)
    return s, p, anchors, samp, (jnp.asarray(p), jnp.asarray(anchors), jnp.asarray(s[anchors]),
                                 jnp.asarray(samp), jnp.asarray(s[samp]))


def test_dr_betting_interval_is_the_betting_interval_of_the_rescaled_residuals():
    """The betting bounds are those of :func:`betting_wor_interval` at the *same* level
    on the residuals mapped to [0, 1] by their known range (the non-anchors'
    predictions), mapped back and scaled by the unseen share ``|U| / n``."""
    s, p, anchors, samp, args = _dr_args()
    n, alpha = p.size, 0.1
    rest = np.setdiff1d(np.arange(n), anchors)
    lo_r, hi_r = -p[rest].max(), 1.0 - p[rest].min()
    w = hi_r - lo_r
    res = s[samp] - p[samp]
    ml, mh = (float(v) for v in betting_wor_interval(jnp.asarray((res - lo_r) / w), rest.size,
                                                     alpha))
    known = s[anchors].sum() + p[rest].sum()
    want = [(known + rest.size * (lo_r + w * v)) / n for v in (ml, mh)]
    _, lo, hi = dr_estimate(*args, alpha, "betting")
    assert 0.0 < want[0] and want[1] < 1.0  # (no clip binds)
    np.testing.assert_allclose((float(lo), float(hi)), want, atol=2e-5)


def test_dr_estimate_defaults_to_a_90_percent_betting_interval():
    """Documented defaults: ``alpha=0.1`` and ``interval="betting"``."""
    *_, args = _dr_args(1)
    got = np.asarray(dr_estimate(*args))
    np.testing.assert_array_equal(got, np.asarray(dr_estimate(*args, 0.1, "betting")))
    # (the case tells the level and the kind apart)
    for other in (dr_estimate(*args, 0.05, "betting"), dr_estimate(*args, 0.1, "serfling")):
        assert np.abs(np.asarray(other)[1:] - got[1:]).max() > 1e-3


# ------------------------------------------------------------------------ k-means
def test_kmeans_pp_first_centre_is_uniform_over_items():
    """The first k-means++ centre is drawn uniformly from *all* ``n`` items, the last one
    included (each of 4 items within 4 binomial sd over 2 000 keys)."""
    pts = jnp.eye(4, dtype=jnp.float32)
    keys = jax.random.split(jax.random.key(0), 2000)
    cent = np.asarray(jax.vmap(lambda kk: _kmeans_pp_init(kk, pts, 1))(keys))[:, 0, :]
    counts = np.bincount(cent.argmax(1), minlength=4)
    assert np.all(np.abs(counts - 500) < 4 * np.sqrt(2000 * 0.25 * 0.75)), counts


def _lloyd_reference(key, s, k, iters):
    """``iters`` Lloyd steps in float64 from the k-means++ centres (an empty cluster keeps
    its centre), then for each centre in turn the nearest item not yet taken."""
    x = (2.0 * np.asarray(s, np.float64) - 1.0).T
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cent = np.asarray(_kmeans_pp_init(key, jnp.asarray(x, jnp.float32), k), np.float64)
    d = lambda c: ((x[:, None, :] - c[None]) ** 2).sum(-1)  # noqa: E731
    for _ in range(iters):
        lab = d(cent).argmin(1)
        for c in range(k):
            if (lab == c).any():
                cent[c] = x[lab == c].mean(0)
    dist = d(cent)
    lab = dist.argmin(1)
    taken, anchors = set(), []
    for c in range(k):
        order = [j for j in np.argsort(dist[:, c]) if j not in taken]
        anchors.append(order[0])
        taken.add(order[0])
    return anchors, np.bincount(lab, minlength=k) / x.shape[0]


def test_kmeans_anchors_run_exactly_num_iters_lloyd_steps():
    """``num_iters`` Lloyd iterations, no fewer (0: the k-means++ centres' own items);
    checked against a float64 replay on graded scores (no ties)."""
    rng = np.random.default_rng(5)
    s = rng.random((10, 16)).astype(np.float32)
    seen = set()
    for seed in range(3):
        key = jax.random.key(seed)
        for iters in (0, 1, 2, 4):
            a, w = kmeans_anchors(key, jnp.asarray(s), 4, iters)
            want_a, want_w = _lloyd_reference(key, s, 4, iters)
            assert np.asarray(a).tolist() == want_a, (seed, iters)
            np.testing.assert_allclose(np.asarray(w), want_w, atol=1e-6)
            seen.add((seed, tuple(want_a)))
    assert len(seen) > 3  # (the iterations move the anchors)


# ------------------------------------------------------------------- refinement
def test_refinement_trace_records_each_steps_own_validation_mse():
    """``val_mse`` is the MSE of the anchors the step trained on, rejected or not: a
    rejected step's is above the last accepted one's (that is why it was rejected), an
    accepted step's at most that."""
    _, _, _, _, tr = _refine_case()
    assert (~tr.accepted).sum() >= 2  # the case exercises rejections
    last = np.inf
    for t in range(len(tr.accepted)):
        if tr.accepted[t]:
            assert tr.val_mse[t] <= last, t
            last = tr.val_mse[t]
        else:
            assert tr.val_mse[t] > last, (t, tr.val_mse[t], last)


# ------------------------------------------------------------------------- ridge
def _ridge_case(seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.random((50, 6)) < 0.5).astype(np.float32)
    y = (x @ rng.normal(0, 0.2, 6) + rng.normal(0, 0.3, 50)).astype(np.float32)
    return [jnp.asarray(a) for a in (x[:30], y[:30], x[30:], y[30:])]


def _val_mse(args, lam):
    lin = fit_ridge(args[0], args[1], jnp.asarray(lam, jnp.float32))
    pred = np.asarray(args[2], np.float64) @ np.asarray(lin.w, np.float64) + float(lin.b)
    return float(np.mean((pred - np.asarray(args[3], np.float64)) ** 2))


def test_fit_ridge_validated_reports_the_chosen_strengths_validation_mse():
    """``(params, lam, val_mse)`` all belong to the strength with the lowest validation
    MSE, wherever it sits in ``lams``."""
    args = _ridge_case()
    lams = [0.001, 0.1, 3.0, 100.0]
    mses = [_val_mse(args, v) for v in lams]
    best = int(np.argmin(mses))
    assert best != 0  # (the case puts the winner after the first strength)
    lin, lam, mse = fit_ridge_validated(*args, lams=jnp.asarray(lams))
    assert float(lam) == pytest.approx(lams[best])
    assert float(mse) == pytest.approx(mses[best], rel=1e-4)
    want = fit_ridge(args[0], args[1], jnp.asarray(lams[best], jnp.float32))
    np.testing.assert_allclose(np.asarray(lin.w), np.asarray(want.w), rtol=1e-5, atol=1e-7)



def test_greedy_ridge_alpha_is_lam_times_the_mean_not_the_sum_of_column_sums():
    """The greedy search's fixed penalty is ``lam`` times the *mean* centred column sum
    of squares (as in :func:`fit_ridge`): its choices are the float64 refitted
    leave-one-out winners at that ``alpha`` (clear winners, 5% apart); at ``lam`` times
    the sum the third choice differs."""
    from test_anchors_reference import _loo_refits

    from jaxeval.anchors import greedy_ridge_anchors

    rng = np.random.default_rng(0)
    m, n, lam = 30, 6, 0.3
    s = (rng.random((m, n)) < rng.uniform(0.1, 0.9, n)).astype(np.float32)
    y = (s @ rng.normal(0, 1, n) + rng.normal(0, 0.5, m)).astype(np.float32)
    g0 = ((s - s.mean(0)) ** 2).sum(0)

    def replay(alpha):
        chosen = []
        for _ in range(3):
            cand = [j for j in range(n) if j not in chosen]
            loo = [np.mean(_loo_refits(s[:, chosen + [j]], y, alpha) ** 2) for j in cand]
            best = np.sort(loo)
            assert best[1] - best[0] > 0.02 * best[0]  # a clear winner
            chosen.append(cand[int(np.argmin(loo))])
        return chosen

    want = replay(lam * g0.mean())
    assert want != replay(lam * g0.sum())  # (the case tells the two apart)
    assert greedy_ridge_anchors(jnp.asarray(s), jnp.asarray(y), 3, lam).tolist() == want
