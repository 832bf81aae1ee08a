"""Gaps a mutation review of the anchor internals (selection, ridge, intervals, IRT,
low-rank, looped linear algebra) found: each test fails on a plausible bug the rest of
the suite let through, and checks values against a reference computed another way."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval.anchors import conformal_quantile, dr_estimate, fit_ridge, kmeans_anchors
from jaxeval.anchors._intervals import betting_wor_interval, serfling_radius


# -------------------------------------------------------------------- k-means
def test_kmeans_anchors_stay_distinct_when_centroids_coincide():
    """Three distinct item vectors, each twice, and k = 5: two centroids share a nearest
    item, and the anchors must still be five distinct items (both copies of a vector
    may be taken only once the other vectors' items are exhausted)."""
    rng = np.random.default_rng(0)
    base = (rng.random((20, 3)) < 0.5).astype(np.float32)
    base[:, 1] = 1.0 - base[:, 0]  # three clearly different directions
    s = jnp.asarray(np.repeat(base, 2, axis=1))  # items 2j and 2j + 1 identical
    for seed in range(5):
        a, w = kmeans_anchors(jax.random.key(seed), s, 5, 10)
        assert np.unique(np.asarray(a)).size == 5, (seed, a.tolist())
        np.testing.assert_allclose(float(w.sum()), 1.0, rtol=1e-6)


def test_kmeans_empty_cluster_keeps_its_centroid():
    """Lloyd's update leaves an empty cluster's centroid where it was (not at the mean of
    no items, the origin): a centre started on a vector another cluster owns stays on
    it, and its anchor is that vector's other copy (at the origin every item is at
    distance 1 and the lowest free index was taken)."""
    from jaxeval.anchors._select import _kmeans_pp_init

    rng = np.random.default_rng(0)
    base = (rng.random((20, 3)) < 0.5).astype(np.float32)
    base[:, 1] = 1.0 - base[:, 0]
    s = np.repeat(base, 2, axis=1)  # items 2v and 2v + 1 hold vector v
    x = (2 * s - 1).T / np.sqrt(20.0)  # the item vectors k-means clusters
    for seed in range(4):
        key = jax.random.key(seed)
        cent = np.asarray(_kmeans_pp_init(key, jnp.asarray(x), 5))
        on = [int(np.argmin(((x - c) ** 2).sum(1))) // 2 for c in cent]
        a, w = kmeans_anchors(key, jnp.asarray(s), 5, 10)
        a, w = np.asarray(a), np.asarray(w)
        np.testing.assert_allclose(np.sort(w), [0, 0, 1 / 3, 1 / 3, 1 / 3], atol=1e-6)
        c = int(np.flatnonzero(w == 0)[0])  # the first empty cluster
        assert sorted(on[:c]) == [0, 1, 2]  # (its vector is owned by an earlier centre)
        assert a[c] == 2 * on[c] + 1, (seed, on, a.tolist())


# ----------------------------------------------------------------------- ridge
def _ridge_np(x, y, alpha):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xm, ym = x.mean(0), y.mean()
    xc = x - xm
    w = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ (y - ym))
    return w, ym - xm @ w


def test_fit_ridge_penalty_is_relative_to_the_mean_column_sum_of_squares():
    """``alpha = lam * mean(diag(Xc^T Xc))``: the float64 closed form at that alpha (an
    absolute ``alpha = lam`` gives other weights on columns far from unit scale)."""
    rng = np.random.default_rng(0)
    x = rng.random((40, 3)) * np.array([3.0, 0.5, 8.0])
    y = x @ np.array([0.2, -1.0, 0.1]) + rng.normal(0, 0.3, 40)
    xc = x - x.mean(0)
    for lam in (0.05, 0.5, 2.0):
        got = fit_ridge(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), lam)
        w, b = _ridge_np(x, y, lam * np.mean(np.diag(xc.T @ xc)))
        np.testing.assert_allclose(np.asarray(got.w), w, rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(float(got.b), b, rtol=1e-3, atol=1e-5)


def test_fit_ridge_at_zero_strength_ignores_a_constant_column():
    """At lam = 0 a constant anchor column has a zero eigenvalue: it gets weight 0 and
    the others are the least-squares fit (1 / 0 made every weight NaN)."""
    rng = np.random.default_rng(1)
    x = (rng.random((30, 4)) < 0.5).astype(np.float64)
    x[:, 2] = 1.0
    y = x @ np.array([0.3, -0.2, 0.0, 0.5]) + rng.normal(0, 0.05, 30)
    got = fit_ridge(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), 0.0)
    keep = [0, 1, 3]
    w, b = _ridge_np(x[:, keep], y, 0.0)
    assert np.isfinite(np.asarray(got.w)).all()
    np.testing.assert_allclose(np.asarray(got.w)[keep], w, rtol=1e-3, atol=1e-4)
    assert abs(float(got.w[2])) < 1e-4
    np.testing.assert_allclose(float(got.b), b, atol=1e-3)


# ------------------------------------------------------------------- conformal
def test_conformal_margin_is_at_least_absolute():
    """The radius is widened by ``1e-6 * max(q, 1)``: absolute below 1, relative above."""
    q = float(conformal_quantile(jnp.full((9,), 1e-3, jnp.float32), 0.1))
    assert q - 1e-3 == pytest.approx(1e-6, rel=1e-3)
    q = float(conformal_quantile(jnp.full((9,), 50.0, jnp.float32), 0.1))
    assert q == pytest.approx(50.0 * (1 + 1e-6), rel=1e-7)  # a float32 step: 7.6e-8


def test_conformal_quantile_with_a_traced_level_takes_the_same_rank():
    """Under jit (alpha traced) the rank is ``ceil((n + 1)(1 - alpha))`` as with a float."""
    f = jax.jit(conformal_quantile)
    for n, alpha in ((19, 0.1), (24, 0.33), (9, 0.25), (49, 0.07), (5, 0.3)):
        r = jnp.arange(1.0, n + 1.0)
        want = float(conformal_quantile(r, alpha))
        assert float(f(r, jnp.asarray(alpha))) == pytest.approx(want, rel=1e-6), (n, alpha)
        assert want == pytest.approx(float(np.ceil((n + 1) * (1 - alpha))), rel=2e-6)


def test_conformal_quantile_refuses_a_level_of_zero():
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="alpha: expected a level in"):
            conformal_quantile(jnp.arange(1.0, 5.0), bad)


# ----------------------------------------------------------- betting / WoR / DR
def test_betting_interval_never_empty_when_every_candidate_is_rejected():
    """Two draws of 0.5 from a population of 2 on the grid {0, 1}: both candidates are
    impossible, and the interval falls back to [0, 1] rather than (1, 0)."""
    lo, hi = betting_wor_interval(jnp.array([0.5, 0.5]), 2, 0.1, 2)
    assert (float(lo), float(hi)) == (0.0, 1.0)


def test_betting_interval_is_the_kept_hull_widened_by_one_grid_step():
    """The bounds are the extreme candidates never rejected, each moved out by one grid
    step: the float64 reference's to within half a step (a lost widening is one step)."""
    from test_anchors_reference import _betting_reference

    rng = np.random.default_rng(7)
    G = 201
    for m, pop, p, alpha in ((30, 300, 0.4, 0.1), (50, 80, 0.7, 0.05), (20, 500, 0.2, 0.2)):
        x = (rng.random(m) < p).astype(np.float32)
        lo, hi = (float(v) for v in betting_wor_interval(jnp.asarray(x), pop, alpha, G))
        want = _betting_reference(x, pop, alpha, G)
        assert 0.0 < want[0] and want[1] < 1.0  # neither bound clipped
        np.testing.assert_allclose((lo, hi), want, atol=0.5 / (G - 1))


def test_betting_interval_rejects_means_the_sample_makes_impossible():
    """A candidate whose conditional mean leaves [0, 1] is rejected whatever the capital:
    the bounds lie within ``[S / N, (S + N - m + 1) / N]`` (``S`` the sum of the first
    ``m - 1`` draws) widened by one grid step."""
    G = 101
    for x, pop in (([1, 1, 1, 1], 4), ([1, 0, 1, 1, 0, 1], 6), ([0, 0, 1, 0, 0], 6),
                   ([1, 1, 0, 1, 1, 1, 1, 0], 9)):
        x = np.asarray(x, np.float32)
        lo, hi = (float(v) for v in betting_wor_interval(jnp.asarray(x), pop, 0.1, G))
        head, m, step = x[:-1].sum(), x.size, 1 / (G - 1)
        assert lo >= head / pop - step - 1e-6, (x, pop, lo)
        assert hi <= (head + pop - m + 1) / pop + step + 1e-6, (x, pop, hi)
        assert lo <= x.sum() / pop <= hi or pop > m


def _dr_case(seed=0, n=120, k=10, m=40):
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.6).astype(np.float32)
    p = np.clip(0.35 + 0.3 * s + rng.normal(0, 0.1, n), 0.05, 0.9).astype(np.float32)
    anchors = np.arange(k)
    samp = rng.choice(np.arange(k, n), m, replace=False)
    return s, p, anchors, samp


@pytest.mark.parametrize("interval", ["betting", "serfling"])
def test_dr_interval_ignores_the_anchors_predictions(interval):
    """Anchors are observed: their predictions enter neither the estimate nor the
    residual range of the interval (a prediction of 1 on an anchor widened it)."""
    s, p, anchors, samp = _dr_case()
    args = (jnp.asarray(anchors), jnp.asarray(s[anchors]), jnp.asarray(samp),
            jnp.asarray(s[samp]), 0.1, interval)
    base = dr_estimate(jnp.asarray(p), *args)
    for v in (0.0, 1.0):
        q = p.copy()
        q[anchors] = v
        other = dr_estimate(jnp.asarray(q), *args)
        np.testing.assert_allclose(np.asarray(other), np.asarray(base), atol=1e-6)


def test_dr_serfling_radius_is_the_residual_radius_scaled_by_the_unseen_share():
    """The serfling interval is ``est +- (|U| / n) t + 1e-6`` with ``t`` the radius for
    the mean residual over the ``|U| = n - k`` non-anchors (where no clip binds)."""
    s, p, anchors, samp = _dr_case(n=400, k=20, m=120)
    n, pop = 400, 380
    est, lo, hi = dr_estimate(jnp.asarray(p), jnp.asarray(anchors), jnp.asarray(s[anchors]),
                              jnp.asarray(samp), jnp.asarray(s[samp]), 0.1, "serfling")
    rest = np.setdiff1d(np.arange(n), anchors)
    t = float(serfling_radius(jnp.asarray(s[samp] - p[samp]), -p[rest].max(),
                              1 - p[rest].min(), pop, 0.1))
    rad = pop / n * t + 1e-6
    assert 0.0 < float(lo) and float(hi) < 1.0  # nothing clipped
    np.testing.assert_allclose((float(lo), float(hi)), (float(est) - rad, float(est) + rad),
                               atol=2e-6)


# ------------------------------------------------------------ AIS/CIS swaps
def test_swap_step_skips_a_blocked_item_with_the_highest_cis():
    from jaxeval.anchors._select import swap_step

    blocked = jnp.array([False, False, True, False])
    new, pos, j = swap_step(jnp.array([0, 1]), jnp.array([1.0, 2.0]),
                            jnp.array([0.0, 0.0, 5.0, 3.0]), blocked)
    assert (int(pos), int(j), new.tolist()) == (0, 3, [3, 1])


def _refine_case(seed=0, guard=True, num_swaps=8):
    from jaxeval.anchors import refine_anchors

    rng = np.random.default_rng(seed)
    s = jnp.asarray(rng.random((60, 20)) < rng.uniform(0.2, 0.9, 60)[:, None], jnp.float32)
    y = s.mean(1)

    def proxy(key, x, t):
        lin = fit_ridge(x, t, 0.1)
        return lambda v: v @ lin.w + lin.b

    a0 = jnp.arange(5, dtype=jnp.int32)
    out, trace = refine_anchors(jax.random.key(0), a0, s[:30], y[:30], s[30:45], y[30:45], proxy,
                                num_swaps=num_swaps, guard=guard)
    return s, y, a0, out, jax.tree.map(np.asarray, trace)


def test_guarded_refinement_trace_replays_and_blocks_rejected_items():
    """Replaying the trace: each outgoing anchor belongs to the last accepted set; after a
    rejection the anchors revert, the next proposal comes from the last accepted proxy
    (same outgoing anchor) and the rejected item never comes in again."""
    _, _, a0, _, tr = _refine_case()
    assert (~tr.accepted).sum() >= 2 and tr.accepted[0]  # the case exercises rejections
    acc, cur, rejected = None, list(np.asarray(a0)), set()
    for t in range(len(tr.accepted)):
        if tr.accepted[t]:
            acc = list(cur)
        else:
            rejected.add(int(tr.incoming[t - 1]))
            assert tr.outgoing[t] == tr.outgoing[t - 1], t
        assert int(tr.outgoing[t]) in acc, (t, tr.outgoing[t], acc)
        assert int(tr.incoming[t]) not in rejected | set(acc), t
        cur = [int(tr.incoming[t]) if a == tr.outgoing[t] else a for a in acc]


def test_unguarded_refinement_returns_the_anchors_after_the_last_swap():
    _, _, a0, out, tr = _refine_case(guard=False)
    assert tr.accepted.all()
    cur = list(np.asarray(a0))
    for o, i in zip(tr.outgoing, tr.incoming):
        assert o in cur and i not in cur
        cur = [int(i) if a == o else a for a in cur]
    assert sorted(np.asarray(out).tolist()) == sorted(cur)
    assert np.asarray(out).tolist() == cur


def test_refinement_guard_scores_the_proxy_on_validation_models():
    """The first step's recorded MSE is the ridge proxy's (fitted on the training
    models) on the validation models, in float64."""
    s, y, a0, _, tr = _refine_case(num_swaps=1)
    x = np.asarray(s, np.float64)[:, np.asarray(a0)]
    yy = np.asarray(y, np.float64)
    xc = x[:30] - x[:30].mean(0)
    w, b = _ridge_np(x[:30], yy[:30], 0.1 * np.mean(np.diag(xc.T @ xc)))
    want = np.mean((x[30:45] @ w + b - yy[30:45]) ** 2)
    np.testing.assert_allclose(float(tr.val_mse[0]), want, rtol=1e-3)


def test_guarded_refinement_accepts_a_proposal_that_ties():
    """A step is rejected only when the validation MSE *rose*: with a constant proxy
    every proposal ties and every one is accepted. The anchors returned are the earliest
    of the tied sets (the documented rule), here the starting ones."""
    from jaxeval.anchors import refine_anchors

    rng = np.random.default_rng(2)
    s = jnp.asarray(rng.random((40, 12)) < 0.5, jnp.float32)
    y = s.mean(1)
    const = lambda key, x, t: (lambda v: jnp.mean(t) + 0.0 * v.sum())  # noqa: E731
    a, tr = refine_anchors(jax.random.key(0), jnp.arange(4, dtype=jnp.int32), s[:25], y[:25],
                           s[25:], y[25:], const, num_swaps=4, guard=True)
    assert np.asarray(tr.accepted).all() and (np.asarray(tr.incoming) >= 0).all()
    assert np.asarray(a).tolist() == [0, 1, 2, 3]


def test_greedy_ridge_penalty_is_relative_to_the_mean_column_sum_of_squares():
    """With a strong ``lam`` the greedy search follows refitted leave-one-out errors at
    ``alpha = lam * mean column sum of squares`` (not ``alpha = lam``)."""
    from test_anchors_reference import _loo_refits

    from jaxeval.anchors import greedy_ridge_anchors

    rng = np.random.default_rng(3)
    m, n, lam = 40, 8, 2.0
    s = (rng.random((m, n)) < rng.uniform(0.1, 0.9, n)).astype(np.float32)
    y = (s @ rng.normal(0, 1, n) + rng.normal(0, 0.5, m)).astype(np.float32)
    alpha = lam * np.mean(((s - s.mean(0)) ** 2).sum(0))
    got = greedy_ridge_anchors(jnp.asarray(s), jnp.asarray(y), 3, lam).tolist()
    chosen = []
    for step in range(3):
        cand = [j for j in range(n) if j not in chosen]
        loo = [np.mean(_loo_refits(s[:, chosen + [j]], y, alpha) ** 2) for j in cand]
        chosen.append(cand[int(np.argmin(loo))])
        assert got[step] == chosen[-1], (step, got, chosen)


# ------------------------------------------------------------------------- IRT
def test_irt_prior_strength_reaches_the_model_factor_fit():
    """``rho`` is the prior precision of the online fit: a very strong prior pins the
    model factor at the prior centre (the training models' mean factor)."""
    from jaxeval._factorization import predict_scores
    from jaxeval.anchors._irt import IRTConfig, fit_item_factors, irt_item_predictions

    rng = np.random.default_rng(2)
    s = (rng.random((60, 20)) < rng.uniform(0.2, 0.9, 60)[:, None]).astype(np.float32)
    F = fit_item_factors(jax.random.key(0), jnp.asarray(s), IRTConfig(rank=2, num_steps=50))
    anchors = jnp.array([1, 5, 9, 14])
    x = jnp.asarray(s[:6][:, [1, 5, 9, 14]])
    prior = np.asarray(predict_scores(F.u_mean, F))
    rest = np.setdiff1d(np.arange(20), [1, 5, 9, 14])
    strong = np.asarray(irt_item_predictions(F, anchors, x, 1e5))
    np.testing.assert_allclose(strong[:, rest], np.broadcast_to(prior[rest], (6, 16)), atol=1e-3)
    weak = np.asarray(irt_item_predictions(F, anchors, x, 1e-2))
    assert np.abs(weak[:, rest] - prior[rest]).max() > 0.05


@pytest.mark.parametrize("lr", [0.05, 0.3])  # (0.05 is the default: 0.3 shows it is passed)
def test_fit_item_factors_passes_each_penalty_to_its_own_side(lr):
    from jaxeval._factorization import fit_factors
    from jaxeval.anchors._irt import IRTConfig, fit_item_factors

    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.random((30, 12)) < 0.5, jnp.float32)
    cfg = IRTConfig(rank=2, rho_u=0.01, rho_v=3.0, learning_rate=lr, num_steps=40)
    got = fit_item_factors(jax.random.key(1), s, cfg)
    want = fit_factors(jax.random.key(1), s, jnp.ones(s.shape, bool), rank=2, rho_u=0.01,
                       rho_v=3.0, learning_rate=lr, num_steps=40).item_factors
    for u, v in zip(got, want):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------- low-rank
def test_lowrank_loadings_reproduce_the_training_covariance():
    """At full rank ``V V^T`` is the (1/m) covariance of the training scores: the
    training models' coordinates have unit variance."""
    from jaxeval.anchors import lowrank_basis

    rng = np.random.default_rng(4)
    s = (rng.random((50, 10)) < rng.uniform(0.2, 0.8, 10)).astype(np.float32)
    b = lowrank_basis(jnp.asarray(s), 32)
    assert b.V.shape == (10, 10)
    xc = s.astype(np.float64) - s.mean(0)
    V = np.asarray(b.V, np.float64)
    np.testing.assert_allclose(V @ V.T, xc.T @ xc / 50, atol=1e-5)
    np.testing.assert_allclose(np.asarray(b.mu), s.mean(0), atol=1e-6)


def test_guard_blocks_a_rejected_item_zero():
    """Item 0 is a valid index to block: a guard criterion that rejects every set holding
    item 0 sees it proposed once, then the next-best candidates (item 0 kept coming back
    when a rejected item was taken for "none" by ``> 0``)."""
    from jaxeval.anchors import refine_anchors

    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.random((40, 10)) < 0.5, jnp.float32)
    y = 0.6 * s[:, 0] + 0.1 * s[:, 1:4].mean(1)  # item 0: the top candidate

    def proxy(key, x, t):
        lin = fit_ridge(x, t, 0.1)
        return lambda v: v @ lin.w + lin.b

    score = lambda anc: jnp.where(jnp.any(anc == 0), 1.0, 0.0)  # noqa: E731
    out, tr = refine_anchors(jax.random.key(0), jnp.array([1, 2, 3], jnp.int32), s[:30], y[:30],
                             s[30:], y[30:], proxy, num_swaps=4, guard=True, guard_score=score)
    inc = np.asarray(tr.incoming).tolist()
    assert inc[0] == 0 and inc.count(0) == 1, inc
    assert np.asarray(tr.accepted).tolist() == [True, False, True, True]
    assert 0 not in np.asarray(out).tolist()



def test_bernstein_serfling_radius_where_it_is_the_smaller_bound():
    """Where the empirical-Bernstein bound is the smaller one, the radius is
    ``sd sqrt(2 rho log(5 / delta) / m) + kappa w log(5 / delta) / m`` (Bardenet and
    Maillard, Thm 3; ``rho = 1 - (m - 1) / N`` up to half the population,
    ``delta = alpha / 4``, ``sd`` the biased standard deviation, ``w`` the width of the
    known range): both terms count here (the first is 40% of the radius)."""
    m, pop, alpha = 4000, 10_000, 0.1
    res = (0.5 + 0.28 * np.sin(np.arange(m))).astype(np.float32)
    t = float(serfling_radius(jnp.asarray(res), -0.5, 1.5, pop, alpha))
    rho, w = 1 - (m - 1) / pop, 2.0
    lg = np.log(5 / (alpha / 4))
    kappa = 7 / 3 + 3 / np.sqrt(2)
    sd = np.std(res.astype(np.float64))
    first, second = sd * np.sqrt(2 * rho * lg / m), kappa * w * lg / m
    assert 0.3 < first / (first + second) < 0.5
    t_h = w * np.sqrt(rho * np.log(2 / (alpha / 2)) / (2 * m))
    assert first + second < t_h  # (the Bernstein bound is the one that counts)
    np.testing.assert_allclose(t, first + second, rtol=1e-5)
