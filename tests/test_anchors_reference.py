"""The anchor estimators' building blocks against references computed another way:
float64 NumPy re-derivations, brute-force refits, closed forms and sampling
frequencies. Each test here was written against a planted bug that the rest of the
suite let through (a mutation review; BUILD_NOTES.md, forty-third session)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval.anchors import (
    Settings,
    SplitData,
    dr_estimate,
    evaluate_protocol,
    fit_method,
    fit_ridge,
    greedy_ridge_anchors,
)
from jaxeval.anchors._intervals import betting_wor_interval, serfling_radius
from jaxeval.anchors._irt import IRTConfig, fit_item_factors, irt_item_predictions, pirt_estimate
from jaxeval.anchors._methods import TRAIN_ONLY
from jaxeval.anchors._mlp import init_mlp, mlp_apply
from jaxeval.anchors._ridge import loo_ridge_residuals
from jaxeval.anchors._select import _kmeans_pp_init

FAST = Settings(proxy_steps=60, final_steps=200, init_steps=60, eval_every=20, num_swaps=3,
                kmeans_iters=10, ridge_swaps=5, irt=IRTConfig(num_steps=50))


# ------------------------------------------------------------------- intervals
def _betting_reference(x, pop, alpha, grid_size):
    """The betting interval of ``betting_wor_interval``'s docstring, in float64 NumPy:
    for each candidate mean, the WoR conditional means, the predictable
    empirical-Bernstein bets capped at half the capital-preserving bound, the hedged
    capital ``max(K+, K-) / 2`` and Ville's threshold ``1 / alpha``."""
    x = np.asarray(x, np.float64)
    m = x.size
    grid = np.linspace(0.0, 1.0, grid_size)
    kept = []
    for mu in grid:
        seen, cap_p, cap_m, mean_est, sq, ok = 0.0, 1.0, 1.0, 0.5, 0.0, True
        for t in range(1, m + 1):
            mu_t = (pop * mu - seen) / max(pop - t + 1, 1)
            if not 0.0 <= mu_t <= 1.0:
                ok = False
                break
            var = 0.25 if t == 1 else (0.25 + sq) / t
            lam = np.sqrt(2 * np.log(2 / alpha) / (max(var, 1e-6) * m))
            lam_p, lam_m = min(lam, 0.5 / max(mu_t, 1e-6)), min(lam, 0.5 / max(1 - mu_t, 1e-6))
            cap_p *= 1 + lam_p * (x[t - 1] - mu_t)
            cap_m *= 1 - lam_m * (x[t - 1] - mu_t)
            if max(cap_p, cap_m) / 2 >= 1 / alpha:
                ok = False
                break
            sq += (x[t - 1] - mean_est) ** 2
            seen += x[t - 1]
            mean_est = (0.5 + seen) / (t + 1)
        if ok:
            kept.append(mu)
    step = 1.0 / (grid_size - 1)
    return max(min(kept) - step, 0.0), min(max(kept) + step, 1.0)


def test_betting_interval_matches_a_float64_reference():
    """Bounds equal the reference's to the grid step on fixed samples (a coverage test
    cannot see a lost hedge factor: the interval is conservative either way)."""
    rng = np.random.default_rng(0)
    G = 501
    for m, pop, p, alpha in ((40, 200, 0.3, 0.1), (60, 100, 0.5, 0.05), (25, 1000, 0.8, 0.2)):
        x = (rng.random(m) < p).astype(np.float32)
        lo, hi = (float(v) for v in betting_wor_interval(jnp.asarray(x), pop, alpha, G))
        want = _betting_reference(x, pop, alpha, G)
        assert want[1] - want[0] < 0.6  # an informative interval, not [0, 1]
        np.testing.assert_allclose((lo, hi), want, atol=1.5 / (G - 1))


def test_serfling_bernstein_branch_is_the_closed_form():
    """Where the empirical-Bernstein-Serfling bound is the smaller one, the radius is
    its closed form at delta = alpha / 4 per side (alpha / 2 per bound)."""
    res = np.asarray(0.5 + 0.001 * np.sin(np.arange(4000)), np.float32)
    m, N, a = 4000, 100_000, 0.1
    t = float(serfling_radius(jnp.asarray(res), 0.0, 1.0, N, a))
    lg = np.log(5 / (a / 4))
    want = (np.std(res.astype(np.float64)) * np.sqrt(2 * (1 - (m - 1) / N) * lg / m)
            + (7 / 3 + 3 / np.sqrt(2)) * lg / m)
    np.testing.assert_allclose(t, want, rtol=1e-4)


def test_dr_estimate_is_the_difference_estimator_exactly():
    """``(sum over anchors of S + sum over the other items of p + |U| * mean over the
    sample of (S - p)) / n``, per draw."""
    rng = np.random.default_rng(3)
    n, k, m = 200, 15, 30
    s = (rng.random(n) < 0.55).astype(np.float32)
    p = np.clip(0.3 + 0.4 * s + rng.normal(0, 0.15, n), 0, 1).astype(np.float32)
    anchors = np.arange(k)
    rest = np.arange(k, n)
    for seed in range(5):
        samp = np.random.default_rng(seed).choice(rest, m, replace=False)
        est, _, _ = dr_estimate(jnp.asarray(p), jnp.asarray(anchors), jnp.asarray(s[anchors]),
                                jnp.asarray(samp), jnp.asarray(s[samp]))
        want = (s[anchors].sum() + p[rest].sum()
                + rest.size * (s[samp].astype(np.float64) - p[samp]).mean()) / n
        np.testing.assert_allclose(float(est), want, atol=2e-6)


# ----------------------------------------------------------------------- ridge
def _loo_refits(x, y, alpha):
    """Leave-one-out residuals by refitting ridge (unpenalised intercept, absolute
    penalty ``alpha``) on the other rows, recentred each time; float64."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    out = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        xm, ym = x[keep].mean(0), y[keep].mean()
        xc = x[keep] - xm
        w = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ (y[keep] - ym))
        out.append(y[i] - (ym + (x[i] - xm) @ w))
    return np.array(out)


def test_loo_ridge_residuals_equal_refits():
    """The hat-matrix shortcut (``+ 1/m`` for the intercept) is exact: it equals
    refitting without each model."""
    rng = np.random.default_rng(0)
    x = rng.random((30, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.3, 30)
    lam = 0.1
    xc = x - x.mean(0)
    alpha = lam * np.mean(np.diag(xc.T @ xc))
    got = np.asarray(loo_ridge_residuals(jnp.asarray(x, jnp.float32),
                                         jnp.asarray(y, jnp.float32), lam), np.float64)
    np.testing.assert_allclose(got, _loo_refits(x, y, alpha), rtol=1e-4, atol=1e-5)


def test_greedy_ridge_follows_refitted_leave_one_out_error():
    """Each greedy step picks the item whose addition has the smallest leave-one-out
    error of refitted ridge maps (not the smallest in-sample error: the data plant an
    item that fits one outlying model perfectly)."""
    rng = np.random.default_rng(0)
    m, n, lam = 40, 6, 1e-3
    s = (rng.random((m, n)) < 0.5).astype(np.float32)
    s[:, 0] = 0.0
    s[0, 0] = 1.0  # item 0: one high-leverage model ...
    y = (0.3 * s[:, 1] + 0.15 * s[:, 3] + 0.05 * rng.normal(size=m)).astype(np.float32)
    y[0] += 3.0  # ... which is an outlier that item 0 alone can fit
    alpha = lam * np.mean(((s - s.mean(0)) ** 2).sum(0))  # the greedy search's fixed penalty
    got = greedy_ridge_anchors(jnp.asarray(s), jnp.asarray(y), 3, lam).tolist()
    chosen = []
    for step in range(3):
        cand = [j for j in range(n) if j not in chosen]
        loo = [np.mean(_loo_refits(s[:, chosen + [j]], y, alpha) ** 2) for j in cand]
        best = np.sort(loo)
        assert best[1] - best[0] > 1e-3 * best[0], step  # a clear winner at each step
        chosen.append(cand[int(np.argmin(loo))])
        assert got[step] == chosen[-1], (step, got, chosen)
    # in-sample error would take the outlier's item first
    ins = [np.mean((y - y.mean() - (s[:, j] - s[:, j].mean()) * np.dot(
        s[:, j] - s[:, j].mean(), y - y.mean()) / (((s[:, j] - s[:, j].mean()) ** 2).sum()
                                                 + alpha)) ** 2) for j in range(n)]
    assert int(np.argmin(ins)) == 0 and got[0] != 0


def test_fit_ridge_leaves_the_intercept_unpenalised():
    """Shifting the targets by c shifts the intercept by c and leaves the weights; a
    very strong penalty leaves the mean of the targets."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.random((50, 4)), jnp.float32)
    y = jnp.asarray(rng.random(50), jnp.float32)
    for lam in (0.0, 1.0, 10.0):
        a, b = fit_ridge(x, y, lam), fit_ridge(x, y + 0.7, lam)
        np.testing.assert_allclose(b.w, a.w, atol=1e-5)
        np.testing.assert_allclose(float(b.b), float(a.b) + 0.7, atol=1e-5)
    strong = fit_ridge(x, y, 1e6)
    assert float(jnp.abs(strong.w).max()) < 1e-4
    np.testing.assert_allclose(float(strong.b), float(y.mean()), atol=1e-4)


# -------------------------------------------------------------------- k-means++
def test_kmeans_pp_draws_the_next_centre_with_squared_distance_weights():
    """On points 0, 1, 3 of a line: the first centre is uniform and the second is drawn
    with probability proportional to the squared distance to the first (4 binomial sd
    over 3 000 keys); the third is the point left."""
    pts = jnp.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    keys = jax.random.split(jax.random.key(0), 3000)
    cent = np.asarray(jax.jit(jax.vmap(lambda k: _kmeans_pp_init(k, pts, 3)))(keys))[:, :, 0]
    first = cent[:, 0]
    for v in (0.0, 1.0, 3.0):
        assert abs((first == v).mean() - 1 / 3) < 4 * np.sqrt(2 / 9 / 3000)
        sel = first == v
        others = [o for o in (0.0, 1.0, 3.0) if o != v]
        d2 = np.array([(o - v) ** 2 for o in others])
        for o, prob in zip(others, d2 / d2.sum()):
            freq = (cent[sel, 1] == o).mean()
            assert abs(freq - prob) < 4 * np.sqrt(prob * (1 - prob) / sel.sum()), (v, o, freq)
    assert (np.sort(cent, axis=1) == [0.0, 1.0, 3.0]).all()


def test_kmeans_anchors_ignore_an_items_contrast():
    """Item vectors are normalised per item: graded items rescaled towards 0.5 (the same
    direction at half the contrast) give the same anchors and weights (normalising per
    model instead would not; for 0/1 scores the two coincide)."""
    from jaxeval.anchors import kmeans_anchors

    rng = np.random.default_rng(0)
    ab = rng.normal(size=(60, 1)) + rng.normal(size=(1, 30))
    s = np.clip(1 / (1 + np.exp(-ab)) + rng.normal(0, 0.1, (60, 30)), 0, 1)
    s = (np.round(8 * s) / 8).astype(np.float32)  # eighths: the rescaling below is exact
    half = s.copy()
    half[:, ::3] = 0.5 + 0.5 * (s[:, ::3] - 0.5)  # 2 s - 1 halved exactly
    run = jax.jit(jax.vmap(lambda key, x: kmeans_anchors(key, x, 5, 20), (0, None)))
    keys = jax.random.split(jax.random.key(0), 10)
    (a1, w1), (a2, w2) = run(keys, jnp.asarray(s)), run(keys, jnp.asarray(half))
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(w1, w2, atol=1e-6)


# ------------------------------------------------------------------------- IRT
def test_irt_predictions_keep_the_anchor_scores():
    """Anchors keep their observed scores, and p-IRT is the mean of observed anchors and
    predicted non-anchors."""
    rng = np.random.default_rng(2)
    s = (rng.random((60, 25)) < 0.6).astype(np.float32)
    F = fit_item_factors(jax.random.key(0), jnp.asarray(s), IRTConfig(rank=2, num_steps=50))
    anchors = jnp.array([2, 7, 11, 20])
    x = jnp.asarray(s[:10][:, [2, 7, 11, 20]])
    p = np.asarray(irt_item_predictions(F, anchors, x))
    np.testing.assert_array_equal(p[:, [2, 7, 11, 20]], np.asarray(x))
    rest = np.setdiff1d(np.arange(25), [2, 7, 11, 20])
    assert ((p[:, rest] > 0) & (p[:, rest] < 1)).all()  # predicted, not observed
    top, bottom = np.argmax(x.sum(1)), np.argmin(x.sum(1))  # more anchors right: higher
    assert x.sum(1)[top] > x.sum(1)[bottom] and p[top, rest].mean() > p[bottom, rest].mean()
    np.testing.assert_allclose(np.asarray(pirt_estimate(F, anchors, x)), p.mean(1), rtol=1e-6)


# -------------------------------------------------------------------- the MLPs
def test_batched_dropout_is_inverted_dropout():
    """With one hidden layer the logit is linear in the dropped activations, so its mean
    over dropout masks is the logit without dropout (4 sd over 4 000 masks)."""
    params, static = init_mlp(jax.random.key(0), 6, dropout=0.3, hidden=(16,))
    params = jax.tree.map(lambda a: 6.0 * a, params)  # the hidden layer's part: far from 0
    x = jnp.asarray(np.random.default_rng(0).random((3, 6)), jnp.float32)
    logit = lambda p: np.log(p) - np.log1p(-p)  # noqa: E731
    plain = logit(np.asarray(mlp_apply(params, static, x), np.float64))
    keys = jax.random.split(jax.random.key(1), 4000)
    draws = logit(np.asarray(jax.jit(jax.vmap(
        lambda k: mlp_apply(params, static, x, k)))(keys), np.float64))  # [4000, 3]
    bias = float(jax.tree.leaves(params)[-1][0])  # the output layer's bias
    assert np.abs(plain - bias).min() > 1.0  # (an outer factor 0.49 would move it by > 0.5)
    se = draws.std(0) / np.sqrt(draws.shape[0])
    assert (np.abs(draws.mean(0) - plain) < 4 * se).all(), (draws.mean(0), plain, se)


# ------------------------------------------------------------------ no leakage
def test_training_only_pieces_never_read_validation_models():
    """The cache entries a method builds from training models only (random and k-means
    anchors, greedy and AIS/CIS searches, item factors) are bit-identical when the
    validation models are replaced by others."""
    rng = np.random.default_rng(0)
    s = (rng.random((120, 30)) < 0.5).astype(np.float32)
    y = s[:, :6].mean(1)
    d = SplitData(*(jnp.asarray(a) for a in (s[:80], y[:80], s[80:], y[80:])))
    # other validation models altogether (flipping every score would not do: it is an
    # isometry of the item vectors k-means clusters)
    other = (rng.random((40, 30)) < 0.3).astype(np.float32)
    swapped = d._replace(s_val=jnp.asarray(other), y_val=jnp.asarray(other[:, ::2].mean(1)))
    methods = ("kmeans_ridge", "greedy_ridge", "aiscis_ridge", "pirt")

    @jax.jit
    def caches(d):
        cache = {}
        for mth in methods:
            fit_method(jax.random.key(0), d, 5, mth, FAST, cache)
        return {k: v for k, v in cache.items() if k in TRAIN_ONLY}

    a, b = caches(d), caches(swapped)
    assert {"shared", "greedy_cands", "aiscis", "F"} <= set(a)
    for key in a:
        for u, v in zip(jax.tree.leaves(a[key]), jax.tree.leaves(b[key])):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=key)


def test_protocol_radius_is_the_conformal_quantile_of_validation_residuals():
    """For a method that makes no choice on validation models (``random_mean``), the
    reported radius is the conformal quantile at alpha of its validation residuals."""
    from jaxeval.anchors import conformal_quantile

    rng = np.random.default_rng(4)
    s = (rng.random((150, 40)) < rng.random((150, 1))).astype(np.float32)
    sm = jaxeval.ScoreMatrix(s)
    for alpha in (0.1, 0.3):
        r = evaluate_protocol(sm, 5, ["random_mean"], seeds=(1, 2), alpha=alpha,
                              settings=FAST, dedup=False)
        for j, seed in enumerate((1, 2)):
            val = sm.protocol_split(seed).validation
            est = np.clip(val.scores[:, r.anchors[0, j]].mean(1), 0, 1)
            want = float(conformal_quantile(jnp.asarray(est - val.true_score()), alpha))
            assert r.info["radius"][0][j] == pytest.approx(want, rel=1e-6, abs=1e-7)


def test_lowrank_external_calibration_is_fitted_on_training_models():
    """With an external target, each (rank, strength) difference estimator is
    calibrated by least squares on the training models and the pair is chosen by
    validation error: the same map as a float64 loop over the grid."""
    from jaxeval.anchors._lowrank import (
        LOWRANK_LAMS,
        LOWRANK_RANKS,
        _linear_for,
        fit_lowrank_validated,
        lowrank_basis,
    )

    rng = np.random.default_rng(5)
    ability = rng.normal(size=(140, 1))
    s = (rng.random((140, 30)) < 1 / (1 + np.exp(-(ability + rng.normal(size=(1, 30))))))
    s = s.astype(np.float32)
    y = (0.6 * s.mean(1) + 0.2 * np.tanh(ability[:, 0]) + 0.1).astype(np.float32)  # external
    tr, val = slice(0, 100), slice(100, 140)
    anchors = jnp.array([1, 4, 9, 15, 22, 28])
    basis = lowrank_basis(jnp.asarray(s[tr]))
    x = s[:, np.asarray(anchors)].astype(np.float64)
    got, err = fit_lowrank_validated(basis, anchors, jnp.asarray(x[tr], jnp.float32),
                                     jnp.asarray(y[tr]), jnp.asarray(x[val], jnp.float32),
                                     jnp.asarray(y[val]), external=True)
    R = basis.V.shape[1]
    best, errs = (np.inf, None), []
    for rank in sorted({min(r, R) for r in LOWRANK_RANKS}):
        for lam in LOWRANK_LAMS:
            lin = _linear_for(basis, anchors, rank, lam)
            w, b = np.asarray(lin.w, np.float64), float(lin.b)
            z = x[tr] @ w + b
            (a, c), *_ = np.linalg.lstsq(np.c_[z, np.ones_like(z)], y[tr], rcond=None)
            e = np.mean((x[val] @ (a * w) + a * b + c - y[val]) ** 2)
            errs.append(e)
            best = min(best, (e, (a * w, a * b + c)), key=lambda t: t[0])
    first, second = np.sort(errs)[:2]
    assert second - first > 1e-4 * first  # the best cell wins by more than float32 noise
    np.testing.assert_allclose(float(err), best[0], rtol=1e-3)
    np.testing.assert_allclose(np.asarray(got.w), best[1][0], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(float(got.b), best[1][1], rtol=1e-3, atol=1e-5)
