"""Gaps a second (deeper) mutation review of the anchor internals found: argument
messages, the k = n edge of random anchors, the guard's proposals replayed against a
float64 reference, the Bernstein-Serfling factor past half the population, the DR
interval's kind check, the level text, the default ridge grid and the IRT warm start.
Each test fails on a planted bug the rest of the suite let through."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_anchor_internals_mutants import _refine_case, _ridge_np

from jaxeval.anchors import dr_estimate, fit_ridge_validated, random_anchors
from jaxeval.anchors._intervals import level_text, serfling_radius
from jaxeval.anchors._ridge import RIDGE_GRID


# ------------------------------------------------------------------ selection
def test_k_refusal_says_what_the_range_means():
    """The error names ``k``, its range and what bounds it (the number of items)."""
    with pytest.raises(ValueError, match=r"k: expected an integer in \[1, 6\] "
                                         r"\(the number of items\), got 7"):
        random_anchors(jax.random.key(0), 6, 7)


def test_random_anchors_with_k_equal_to_n_are_every_item():
    """``k = n`` is allowed and gives every item once, sorted; for ``k < n`` each item is
    an anchor with probability ``k / n`` (4 binomial sd over 2 000 keys)."""
    for seed in range(3):
        a = random_anchors(jax.random.key(seed), 5, 5)
        assert a.tolist() == [0, 1, 2, 3, 4]
    keys = jax.random.split(jax.random.key(1), 2000)
    a = np.asarray(jax.vmap(lambda kk: random_anchors(kk, 6, 2))(keys))
    freq = np.bincount(a.ravel(), minlength=6) / 2000
    assert np.all(np.abs(freq - 1 / 3) < 4 * np.sqrt(2 / 9 / 2000)), freq


def _replay_reference(s, y, a0, tr, lam=0.1):
    """Replay a guarded ridge-proxy refinement in float64: at every step the proposal is
    made from the proxy fitted on the *last accepted* anchors (lowest |w| = lowest AIS
    leaves, highest CIS among non-anchors not blocked enters)."""
    x = np.asarray(s, np.float64)[:30]
    yy = np.asarray(y, np.float64)[:30]
    acc, cur, blocked, checked = None, list(np.asarray(a0)), set(), 0
    for t in range(len(tr.accepted)):
        if tr.accepted[t]:
            acc = list(cur)
        else:
            blocked.add(int(tr.incoming[t - 1]))
        xa = x[:, acc]
        xc = xa - xa.mean(0)
        w, b = _ridge_np(xa, yy, lam * np.mean(np.diag(xc.T @ xc)))
        e = xa @ w + b - yy
        ais = np.mean(np.abs(2 * e[:, None] * w[None, :]), 0)
        cis = np.abs((x - 0.5).T @ e)
        cis[list(set(acc) | blocked)] = -np.inf
        top = np.sort(cis)[-2:]
        if top[1] - top[0] > 1e-4 * top[1] and np.sort(ais)[1] - ais.min() > 1e-4 * ais.min():
            assert int(tr.incoming[t]) == int(np.argmax(cis)), (t, tr.incoming, np.argmax(cis))
            assert int(tr.outgoing[t]) == acc[int(np.argmin(ais))], t
            checked += 1
        cur = [int(tr.incoming[t]) if a == tr.outgoing[t] else a for a in acc]
    return checked


def test_guarded_refinement_proposes_from_the_last_accepted_proxy():
    """After a rejection both AIS and CIS come from the last accepted proxy (a CIS taken
    from the rejected proxy brings in another item): every proposal equals the float64
    replay's."""
    s, y, a0, _, tr = _refine_case(num_swaps=8)
    assert (~tr.accepted).sum() >= 2  # the case exercises rejections
    assert _replay_reference(s, y, a0, tr) >= 6


# ------------------------------------------------------------------ intervals
def test_bernstein_serfling_factor_beyond_half_the_population():
    """Past half the population the Bernstein-Serfling factor is
    ``rho = (1 - m / N)(1 + 1 / m)`` (Bardenet & Maillard, Thm 3), not ``1 - m / N``;
    at ``m = N / 2`` the two forms of ``rho`` agree."""
    kappa = 7 / 3 + 3 / np.sqrt(2)

    def closed_form(res, N, alpha, rho):
        m = res.size
        lg = np.log(5 / (alpha / 4))
        return np.std(res.astype(np.float64)) * np.sqrt(2 * rho * lg / m) + kappa * lg / m

    m, N, alpha = 2001, 4000, 0.1
    res = (0.5 + 0.1414 * np.sin(np.arange(m))).astype(np.float32)
    t = float(serfling_radius(jnp.asarray(res), 0.0, 1.0, N, alpha))
    want = closed_form(res, N, alpha, (1 - m / N) * (1 + 1 / m))
    t_h = np.sqrt((1 - (m - 1) / N) * np.log(2 / (alpha / 2)) / (2 * m))
    assert want < t_h  # the Bernstein bound is the one that counts
    assert abs(want - closed_form(res, N, alpha, 1 - m / N)) > 6e-5 * want  # (detectable)
    np.testing.assert_allclose(t, want, rtol=1e-5)
    # m = N / 2 exactly: both branches give 1/2 + 1/N
    res = res[:2000]
    t = float(serfling_radius(jnp.asarray(res), 0.0, 1.0, N, alpha))
    np.testing.assert_allclose(t, closed_form(res, N, alpha, 0.5 + 1 / N), rtol=1e-5)


def test_dr_estimate_refuses_an_unknown_interval_kind():
    p = jnp.full(6, 0.5)
    args = (p, jnp.array([0]), jnp.array([1.0]), jnp.array([1, 2]), jnp.array([1.0, 0.0]), 0.1)
    with pytest.raises(ValueError, match="interval must be 'betting' or 'serfling', "
                                         "got 'hoeffding'"):
        dr_estimate(*args, "hoeffding")


@pytest.mark.parametrize("alpha, text", [
    (0.1, "90%"), (0.025, "97.5%"), (0.0275, "97.25%"), (0.1234, "87.66%"), (1e-5, "99.999%"),
    (1e-9, "99.9999999%"), (0.5, "50%")])
def test_level_text_four_significant_figures_more_near_100(alpha, text):
    assert level_text(alpha) == text


# ----------------------------------------------------------------------- ridge
def test_fit_ridge_validated_default_grid_is_the_whole_ridge_grid():
    """Without ``lams`` the choice is over all of ``RIDGE_GRID``, its smallest strength
    included: on noise-free linear targets the weakest penalty wins, and the result is
    the one an explicit ``lams=RIDGE_GRID`` gives."""
    assert RIDGE_GRID == tuple(float(v) for v in np.logspace(-4, 2, 13))
    rng = np.random.default_rng(0)
    x = rng.random((60, 4)).astype(np.float32)
    y = x @ np.array([0.5, -0.3, 0.2, 0.1], np.float32) + 0.1
    args = [jnp.asarray(a) for a in (x[:40], y[:40], x[40:], y[40:])]
    lin, lam, mse = fit_ridge_validated(*args)
    assert float(lam) == pytest.approx(RIDGE_GRID[0])
    lin2, lam2, mse2 = fit_ridge_validated(*args, lams=jnp.asarray(RIDGE_GRID))
    np.testing.assert_allclose(np.asarray(lin.w), np.asarray(lin2.w), rtol=1e-6)
    assert float(mse) == pytest.approx(float(mse2), rel=1e-6)
    # the reported MSE is the chosen map's on the validation models
    pred = x[40:].astype(np.float64) @ np.asarray(lin.w, np.float64) + float(lin.b)
    assert float(mse) == pytest.approx(np.mean((pred - y[40:]) ** 2), rel=1e-3, abs=1e-12)


# ------------------------------------------------------------------------- IRT
def test_irt_model_factor_starts_from_the_prior_centre():
    """The model factor is three safeguarded Newton steps from ``u_mean`` (the prior
    centre): the predictions equal ``update_model_factors`` started there, and a weak
    prior (not yet converged in three steps) makes the start matter."""
    from jaxeval._factorization import predict_scores, update_model_factors
    from jaxeval.anchors._irt import IRTConfig, fit_item_factors, irt_item_predictions

    rng = np.random.default_rng(3)
    s = (rng.random((60, 20)) < rng.uniform(0.1, 0.9, 60)[:, None]).astype(np.float32)
    F = fit_item_factors(jax.random.key(0), jnp.asarray(s), IRTConfig(rank=3, num_steps=80))
    F = F._replace(u_mean=F.u_mean + 1.5)  # a prior centre far from the origin
    anchors = jnp.array([0, 3, 7, 12, 18])
    x = jnp.asarray(s[:8][:, [0, 3, 7, 12, 18]])
    rho = 1e-3
    got = np.asarray(irt_item_predictions(F, anchors, x, rho))
    full = jnp.zeros((8, 20)).at[:, anchors].set(x)
    mask = jnp.zeros((8, 20), bool).at[:, anchors].set(True)

    def from_start(u0):
        u, _ = update_model_factors(F, full, mask, u0, jnp.asarray(rho, jnp.float32))
        return np.asarray(jnp.where(mask, full, predict_scores(u, F)))

    want = from_start(jnp.broadcast_to(F.u_mean, (8, 3)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(from_start(jnp.zeros((8, 3))) - want).max() > 1e-3  # (the start matters)
