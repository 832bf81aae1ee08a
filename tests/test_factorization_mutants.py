"""Gaps found by a mutation review of the low-rank logistic factorization: each test pins
a behaviour that a plausible one-line bug changed without any other test failing (the
offline objective and its normalisation per observed cell, the held-out log loss, the
selection grid's training cells, the initial item biases, the online refit of a row with
nothing observed, the delta-method standard deviation of a prediction, and the final
fit's ``rho_v``, ``online_rho`` and their round trip through ``to_npz``)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _factorization as fz


def _np_objective(U, V, c, S, M, rho_u, rho_v):
    """The offline objective in float64 NumPy: masked BCE + rho_u ||U||^2 + rho_v ||V||^2."""
    U, V, c, S = (np.asarray(a, np.float64) for a in (U, V, c, S))
    z = U @ V.T + c
    bce = np.logaddexp(0.0, z) - np.where(M, S, 0.0) * z
    return float(np.sum(np.where(M, bce, 0.0)) + rho_u * np.sum(U**2) + rho_v * np.sum(V**2))


def _np_sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


@pytest.fixture(scope="module")
def small():
    """14 models x 11 items, soft and 0/1 targets, ~30% of cells missing (each row and
    column keeps observed cells); unobserved cells hold junk (0.9) that must not count."""
    rng = np.random.default_rng(0)
    m, n = 14, 11
    S = (rng.uniform(size=(m, n)) < 0.6).astype(np.float32)
    S[:, :3] = rng.uniform(size=(m, 3))  # soft targets
    M = rng.uniform(size=(m, n)) < 0.7
    M[np.arange(m), np.arange(m) % n] = True
    S = np.where(M, S, 0.9).astype(np.float32)
    return S, M


# ---------------------------------------------------------------- offline objective
def test_offline_objective_is_masked_bce_plus_separate_penalties(small):
    """``rho_u`` on ``U`` only, ``rho_v`` on ``V`` only, no penalty on ``c``, the masked
    columns out, unobserved cells contributing nothing."""
    S, M = small
    (m, n), r = S.shape, 3
    rng = np.random.default_rng(1)
    U = rng.normal(size=(m, r)).astype(np.float32)
    V = rng.normal(size=(n, r)).astype(np.float32)
    c = rng.normal(size=n).astype(np.float32)
    colmask = np.array([1.0, 1.0, 0.0], np.float32)
    got = jax.jit(fz._objective)((U, V, c), jnp.asarray(S), jnp.asarray(M), 0.3, 2.0,
                                 jnp.asarray(colmask))
    want = _np_objective(U * colmask, V * colmask, c, S, M, 0.3, 2.0)
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_fit_final_loss_is_the_objective_per_observed_cell(small):
    """``final_loss`` is the objective at the returned factors divided by the number of
    observed cells (not of all cells), with ``rho_u`` and ``rho_v`` where they belong."""
    S, M = small
    res = fz.fit_factors(jax.random.key(0), S, M, rank=2, rho_u=0.3, rho_v=2.0,
                         learning_rate=0.1, num_steps=25)
    assert int(res.status) == fz.STATUS_OK
    want = _np_objective(res.U, res.item_factors.V, res.item_factors.c, S, M, 0.3, 2.0)
    np.testing.assert_allclose(float(res.final_loss), want / M.sum(), rtol=1e-5)


def test_fit_with_learning_rate_zero_starts_at_smoothed_observed_item_means(small):
    """The item biases start at the logit of each item's mean over its *observed* cells,
    smoothed towards the global observed mean (two pseudo-counts)."""
    S, M = small
    res = fz.fit_factors(jax.random.key(0), S, M, rank=2, rho_u=1.0, rho_v=1.0,
                         learning_rate=0.0, num_steps=1)
    S64 = np.where(M, S, 0.0).astype(np.float64)
    glob = (S64.sum() + 1.0) / (M.sum() + 2.0)
    mean = (S64.sum(0) + 2.0 * glob) / (M.sum(0) + 2.0)
    np.testing.assert_allclose(np.asarray(res.item_factors.c), np.log(mean / (1 - mean)),
                               rtol=1e-5, atol=1e-6)


def test_heldout_log_loss_averages_over_the_given_cells(small):
    S, M = small
    rng = np.random.default_rng(2)
    U = rng.normal(size=(S.shape[0], 2)).astype(np.float32)
    f = fz.ItemFactors(jnp.asarray(rng.normal(size=(S.shape[1], 2)), jnp.float32),
                       jnp.asarray(rng.normal(size=S.shape[1]), jnp.float32), jnp.zeros(2))
    got = float(jax.jit(fz.heldout_log_loss)(U, f, S, M))
    want = _np_objective(U, f.V, f.c, S, M, 0.0, 0.0) / M.sum()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_selection_fits_on_the_training_cells_and_scores_the_heldout_ones(small):
    """Each grid cell of ``select_factors`` is the fit on ``mask & ~heldout`` scored on
    the held-out cells (a fit that also saw them would score itself on its own training
    cells), and the choice is the grid's minimum."""
    S, M = small
    key = jax.random.key(7)
    rhos = (0.3, 3.0)
    kw = dict(rank=2, learning_rate=0.1, num_steps=20)
    sel = fz.select_factors(key, S, M, ranks=(2,), rhos=rhos, holdout_fraction=0.3,
                            num_steps=20, learning_rate=0.1)
    kk = jax.random.fold_in(key, 0)
    held = fz.holdout_mask(jax.random.fold_in(kk, 0), M, 0.3)
    # about the fraction asked of the cells that may be held out (observed, and not the
    # first observed cell of their row or column): 30% of the 80, not 70%
    eligible = M & (np.cumsum(M, 1) > 1) & (np.cumsum(M, 0) > 1)
    assert not (np.asarray(held) & ~eligible).any()
    assert 0.15 < int(held.sum()) / eligible.sum() < 0.45
    for b, rho in enumerate(rhos):
        res = fz.fit_factors(jax.random.fold_in(kk, 1), S, M & ~held, rho_u=rho, rho_v=rho, **kw)
        ll = float(fz.heldout_log_loss(res.U, res.item_factors, S, held))
        np.testing.assert_allclose(sel.heldout_loss[0, b], ll, rtol=1e-4)
        np.testing.assert_allclose(sel.train_loss[0, b], float(res.final_loss), rtol=1e-4)
    assert sel.rho == rhos[int(np.argmin(sel.heldout_loss[0]))]


# ---------------------------------------------------------------- online refit
def test_refit_row_with_nothing_observed_returns_u_mean_exactly():
    """As its docstring says (and as update_model_factors does): an empty row gives
    ``u_mean`` exactly, whatever the warm start."""
    f = fz.ItemFactors(jnp.ones((4, 2)) / 2, jnp.zeros(4), jnp.asarray([0.3, -0.2]))
    u = jax.jit(fz.refit_row)(f, jnp.ones(4), jnp.zeros(4, bool), jnp.asarray([2.0, 1.0]),
                              jnp.float32(1.0))
    np.testing.assert_array_equal(np.asarray(u), np.asarray(f.u_mean))


# ---------------------------------------------------------------- numpy wrapper
@pytest.fixture(scope="module")
def fitted():
    """A rank-2 fit with rho_u != rho_v on a planted 40 x 30 matrix (20% missing), and
    the data: the wrapper's arguments must reach the kernel as given."""
    import jaxeval

    rng = np.random.default_rng(3)
    P = _np_sigmoid(rng.normal(size=(44, 2)) @ rng.normal(size=(2, 30)))
    S = (rng.uniform(size=P.shape) < P).astype(float)
    M = rng.uniform(size=P.shape) < 0.8
    train = np.where(M[:40], S[:40], np.nan)
    lr = jaxeval.fit_factorization(train, rank=2, rho=0.5, rho_v=4.0, num_steps=40, seed=3)
    return lr, train, S[40:], M[40:]


def test_final_fit_uses_rho_u_and_rho_v_as_given(fitted):
    lr, train, _, _ = fitted
    M = ~np.isnan(train)
    ref = fz.fit_factors(jax.random.fold_in(jax.random.key(3), 0), np.nan_to_num(train), M,
                         rank=2, rho_u=0.5, rho_v=4.0, learning_rate=0.1, num_steps=40)
    want = np.asarray(fz.predict_logits(ref.U, ref.item_factors))
    # the stored factors are whitened: the same logits (u . v is unchanged)
    np.testing.assert_allclose(lr.U @ lr.V.T + lr.c, want, atol=1e-4)
    assert (lr.rho_u, lr.rho_v) == (0.5, 4.0)
    # ... re-expressed so that the training factors have identity covariance around u_mean
    np.testing.assert_allclose(np.cov(lr.U.T, bias=True), np.eye(2), atol=1e-3)
    np.testing.assert_allclose(lr.u_mean, lr.U.mean(0), atol=1e-5)


def test_npz_round_trip_keeps_the_three_prior_strengths_apart(fitted, tmp_path):
    lr, _, S_new, M_new = fitted
    lr = dataclasses.replace(lr, online_rho=2.0)
    back = type(lr).from_npz(lr.to_npz(tmp_path / "f"))
    assert (back.rho_u, back.rho_v, back.online_rho) == (0.5, 4.0, 2.0)
    # update's default prior is the fit's online_rho
    np.testing.assert_array_equal(back.update(S_new, M_new, num_newton=3)[0],
                                  lr.update(S_new, M_new, rho=2.0, num_newton=3)[0])


def test_predict_std_is_the_delta_method_sd_of_the_probability(fitted):
    """``sd = p (1 - p) sqrt(v^T H^-1 v)`` with ``H`` the Hessian that ``update``
    returns (computed in float64 here)."""
    lr, _, S_new, M_new = fitted
    few = M_new & (np.arange(S_new.shape[1]) % 3 == 0)
    p, sd = lr.predict(S_new, few, return_std=True, num_newton=4)
    u, H = lr.update(S_new, few, num_newton=4)
    V, c = lr.V.astype(np.float64), lr.c.astype(np.float64)
    p_ref = _np_sigmoid(u.astype(np.float64) @ V.T + c)
    var = np.einsum("nr,krs,ns->kn", V, np.linalg.inv(H.astype(np.float64)), V)
    np.testing.assert_allclose(p, p_ref, rtol=1e-5)
    np.testing.assert_allclose(sd, p_ref * (1 - p_ref) * np.sqrt(var), rtol=1e-4)


def test_blocked_fallback_step_bounds_the_observed_items_only():
    """When the full Newton step is rejected the streamed refit takes the majorization
    step ``-g / L`` with ``L`` summed over the *observed* items, as the whole-row refit
    does: with unobserved items in the blocks both still take the same steps."""
    kv, kc = jax.random.split(jax.random.key(8))
    n, r, B = 40, 3, 16
    V = jax.random.normal(kv, (n, r)) / np.sqrt(r)
    f = fz.ItemFactors(V, 0.5 * jax.random.normal(kc, (n,)), jnp.zeros(r))
    s = jnp.asarray(np.asarray(V)[:, 0] > 0, jnp.float32)
    m = jnp.asarray(np.arange(n) % 3 != 0)  # a third of the items unobserved
    rho, u0 = 1e-4, jnp.asarray([-30.0, 40.0, 10.0])
    g, H = fz._row_grad_hess(u0, f.V, f.c, s, m, f.u_mean, rho)
    d = fz._spd_direction(g, H, jnp.eye(r))
    obj = jax.jit(lambda u: fz.masked_bce(f.V @ u + f.c, s, m) + rho * jnp.dot(u, u))
    assert float(obj(u0 + d)) > float(obj(u0))  # the fallback is taken

    def block_fn(k):
        st = k * B
        pad = lambda x: jnp.concatenate([x, jnp.zeros((B,) + x.shape[1:], x.dtype)])  # noqa: E731
        sl = lambda x: jax.lax.dynamic_slice_in_dim(pad(x), st, B)  # noqa: E731
        return sl(f.V), sl(f.c), sl(s), sl(m) & ((st + jnp.arange(B)) < n)

    whole = jax.jit(lambda u: fz.refit_row(f, s, m, u, jnp.float32(rho)))
    blocked = jax.jit(lambda u: fz.update_model_factor_blocked(
        block_fn, -(-n // B), u, f.u_mean, rho, 1, return_hessian=False, online=True))
    u = ub = u0
    for _ in range(3):
        u, ub = whole(u), blocked(ub)
        np.testing.assert_allclose(np.asarray(ub), np.asarray(u), rtol=1e-4, atol=1e-4)


def test_update_default_warm_start_is_u_mean(fitted):
    """``u_init`` defaults to ``u_mean``: with a fixed number of Newton steps the default
    and an explicit ``u_mean`` start give the same factors."""
    lr, _, S_new, M_new = fitted
    u0 = np.tile(lr.u_mean, (S_new.shape[0], 1))
    np.testing.assert_array_equal(lr.update(S_new, M_new, num_newton=1)[0],
                                  lr.update(S_new, M_new, u_init=u0, num_newton=1)[0])


def test_learn_lam0_scores_only_the_items_the_factor_was_not_fitted_on():
    """λ₀ is the pooled slope ``Σ Cov(S, Ŝ) / Σ Var(Ŝ)`` over each held-out row's observed
    items *other than* the ``c`` its factor was fitted on (recomputed here step by step,
    with the same row groups, draws and fits)."""
    import jaxeval

    rng = np.random.default_rng(6)
    P = _np_sigmoid(rng.normal(size=(24, 1)) @ rng.normal(size=(1, 30)) * 3.0
                    + rng.normal(size=30))
    S = np.where(rng.uniform(size=P.shape) < 0.9, (rng.uniform(size=P.shape) < P), np.nan)
    kw = dict(rank=1, rho=1.0, num_steps=100)
    lam = jaxeval.learn_lam0(S, n_observed=(4,), folds=2, seed=5, **kw)
    slope = lam0_by_hand(S, 4, 5, **kw)
    assert 0.0 < slope < 1.0  # not clipped
    np.testing.assert_allclose(lam, slope, rtol=1e-6)


def lam0_by_hand(S, c, seed, **kw):
    """``learn_lam0``'s pooled slope (two folds, ``c`` observed items per held-out row,
    NaN = missing), recomputed step by step with its row groups, draws and fits."""
    import jaxeval

    draw = np.random.default_rng([seed, 0x1A40])
    group = draw.permutation(S.shape[0]) % 2
    num = den = 0.0
    for f in range(2):
        fit = jaxeval.fit_factorization(S[group != f], seed=seed + f, **kw)
        held = S[group == f]
        M = ~np.isnan(held)
        obs = np.zeros_like(M)
        for i in range(M.shape[0]):
            obs[i, draw.choice(np.flatnonzero(M[i]), size=c, replace=False)] = True
        p = fit.predict(np.where(obs, held, 0.0), obs).astype(np.float64)
        for s, q, m in zip(held, p, M & ~obs):
            num += np.mean((s[m] - s[m].mean()) * (q[m] - q[m].mean()))
            den += np.var(q[m])
    return num / den


def test_update_by_default_iterates_until_the_factors_stop_moving(fitted, monkeypatch):
    """With ``num_newton=None`` the update repeats rounds of ``NEWTON_ROUND`` steps until
    no factor entry moves (a round of one step here, so that one round is not enough)."""
    from jaxeval import _factorization_api as fa

    lr, _, S_new, M_new = fitted
    u0 = np.tile([[20.0, -20.0]], (S_new.shape[0], 1)).astype(np.float32)  # far away
    ref = lr.update(S_new, M_new, u_init=u0, num_newton=50)[0]
    assert np.abs(lr.update(S_new, M_new, u_init=u0, num_newton=1)[0] - ref).max() > 1e-2
    monkeypatch.setattr(fa, "NEWTON_ROUND", 1)
    np.testing.assert_allclose(lr.update(S_new, M_new, u_init=u0)[0], ref, atol=1e-4)
