"""Tests of the low-rank logistic factorization (jaxeval._factorization)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _factorization as fz


# ------------------------------------------------------------------ helpers
def _planted(key, m, n, r, scale=1.0):
    """Planted factors: U [m, r], V [n, r], c [n] and Bernoulli scores."""
    ku, kv, kc, ks = jax.random.split(key, 4)
    U = scale * jax.random.normal(ku, (m, r))
    V = scale * jax.random.normal(kv, (n, r)) / np.sqrt(r)
    c = 0.5 * jax.random.normal(kc, (n,))
    P = jax.nn.sigmoid(U @ V.T + c)
    S = jax.random.bernoulli(ks, P).astype(jnp.float32)
    return U, V, c, P, S


def _np_objective(u, V, c, s, m, u_mean, rho):
    """The row objective in float64 NumPy (reference for finite differences)."""
    z = V @ u + c
    bce = np.logaddexp(0.0, z) - s * z
    d = u - u_mean
    return float(np.sum(np.where(m, bce, 0.0)) + rho * d @ d)


def _item_factors(key, n=40, r=3):
    kv, kc, km = jax.random.split(key, 3)
    V = jax.random.normal(kv, (n, r)) / np.sqrt(r)
    c = 0.5 * jax.random.normal(kc, (n,))
    u_mean = 0.3 * jax.random.normal(km, (r,))
    return fz.ItemFactors(V, c, u_mean)


# ------------------------------------------------------------------ online update
def test_grad_and_hessian_match_finite_differences():
    f = _item_factors(jax.random.key(0))
    n, r = f.V.shape
    rng = np.random.default_rng(1)
    s = rng.uniform(size=n).astype(np.float32)  # soft targets
    m = rng.uniform(size=n) < 0.6
    u = rng.normal(size=r).astype(np.float32)
    rho = 0.7
    g, H = fz._row_grad_hess(
        jnp.asarray(u), f.V, f.c, jnp.asarray(s), jnp.asarray(m), f.u_mean, rho
    )
    V, c, um = (np.asarray(a, np.float64) for a in f)
    u64 = u.astype(np.float64)
    eps = 1e-5
    fd_g = np.zeros(r)
    fd_H = np.zeros((r, r))
    for k in range(r):
        e = np.zeros(r)
        e[k] = eps
        fd_g[k] = (
            _np_objective(u64 + e, V, c, s, m, um, rho)
            - _np_objective(u64 - e, V, c, s, m, um, rho)
        ) / (2 * eps)

        def grad64(x):
            p = 1.0 / (1.0 + np.exp(-(V @ x + c)))
            return V.T @ (m * (p - s)) + 2 * rho * (x - um)

        fd_H[:, k] = (grad64(u64 + e) - grad64(u64 - e)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(g), fd_g, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(H), fd_H, rtol=1e-4, atol=1e-4)
    # and the same as autodiff of the jitted objective
    obj = lambda x: fz._row_objective(x, f.V, f.c, jnp.asarray(s), jnp.asarray(m), f.u_mean, rho)
    np.testing.assert_allclose(
        np.asarray(jax.grad(obj)(jnp.asarray(u))), fd_g, rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(jax.hessian(obj)(jnp.asarray(u))), fd_H, rtol=1e-4, atol=1e-4
    )


def test_newton_reaches_the_map_estimate():
    scipy_opt = pytest.importorskip("scipy.optimize")
    f = _item_factors(jax.random.key(2), n=60, r=4)
    rng = np.random.default_rng(3)
    K, n = 5, 60
    S = (rng.uniform(size=(K, n)) < 0.5).astype(np.float32)
    M = rng.uniform(size=(K, n)) < 0.5
    u0 = np.tile(np.asarray(f.u_mean), (K, 1))
    u, H = fz.update_model_factors(f, S, M, u0, 0.5, num_newton=8)
    V, c, um = (np.asarray(a, np.float64) for a in f)
    for i in range(K):
        ref = scipy_opt.minimize(
            _np_objective,
            np.zeros(4),
            args=(V, c, S[i], M[i], um, 0.5),
            method="BFGS",
            options={"gtol": 1e-9},
        )
        np.testing.assert_allclose(np.asarray(u[i]), ref.x, atol=2e-4)
        # the Hessian is the objective's Hessian at the optimum: symmetric positive definite
        Hi = np.asarray(H[i])
        np.testing.assert_allclose(Hi, Hi.T, atol=1e-5)
        assert np.linalg.eigvalsh(Hi).min() >= 2 * 0.5 - 1e-4


def test_nothing_observed_returns_prior_mean_exactly():
    f = _item_factors(jax.random.key(4))
    K, (n, r) = 3, f.V.shape
    S = jnp.ones((K, n))
    M = jnp.zeros((K, n), bool)
    u0 = jax.random.normal(jax.random.key(5), (K, r))  # deliberately not u_mean
    u, H = fz.update_model_factors(f, S, M, u0, 0.3)
    np.testing.assert_array_equal(np.asarray(u), np.tile(np.asarray(f.u_mean), (K, 1)))
    np.testing.assert_allclose(np.asarray(H), np.tile(0.6 * np.eye(r), (K, 1, 1)), rtol=1e-6)
    # also with rho = 0 (no prior): still the prior mean, still finite
    u, H = fz.update_model_factors(f, S, M, u0, 0.0)
    np.testing.assert_array_equal(np.asarray(u), np.tile(np.asarray(f.u_mean), (K, 1)))
    assert np.isfinite(np.asarray(H)).all()


def test_masked_cells_have_no_influence_online():
    f = _item_factors(jax.random.key(6))
    K, (n, r) = 4, f.V.shape
    rng = np.random.default_rng(7)
    S = (rng.uniform(size=(K, n)) < 0.5).astype(np.float32)
    M = rng.uniform(size=(K, n)) < 0.3
    S2 = np.where(M, S, rng.uniform(size=(K, n))).astype(np.float32)
    S3 = np.where(M, S, np.nan).astype(np.float32)
    u0 = jnp.zeros((K, r))
    out = [fz.update_model_factors(f, s, M, u0, 1.0) for s in (S, S2, S3)]
    for u, H in out[1:]:
        np.testing.assert_array_equal(np.asarray(u), np.asarray(out[0][0]))
        np.testing.assert_array_equal(np.asarray(H), np.asarray(out[0][1]))


def test_newton_never_increases_objective_on_separable_data():
    # Separable data with a weak prior: plain Newton from far away overshoots;
    # the safeguarded step must decrease the objective monotonically and stay finite.
    f = _item_factors(jax.random.key(8), n=30, r=2)
    V = np.asarray(f.V)
    s = (V[:, 0] > 0).astype(np.float32)[None, :]
    m = np.ones_like(s, bool)
    rho = 1e-4
    u = jnp.asarray([[-30.0, 40.0]])
    V64, c64, um = (np.asarray(a, np.float64) for a in f)
    prev = _np_objective(np.asarray(u[0], np.float64), V64, c64, s[0], m[0], um, rho)
    for _ in range(6):
        u, H = fz.update_model_factors(f, s, m, u, rho, num_newton=1)
        assert np.isfinite(np.asarray(u)).all() and np.isfinite(np.asarray(H)).all()
        cur = _np_objective(np.asarray(u[0], np.float64), V64, c64, s[0], m[0], um, rho)
        assert cur <= prev * (1 + 1e-6) + 1e-6
        prev = cur


def test_online_vmapped_equals_looped_and_rho_per_row():
    f = _item_factors(jax.random.key(9))
    K, (n, r) = 6, f.V.shape
    rng = np.random.default_rng(10)
    S = (rng.uniform(size=(K, n)) < 0.5).astype(np.float32)
    M = rng.uniform(size=(K, n)) < 0.5
    rho = np.linspace(0.1, 2.0, K).astype(np.float32)
    u0 = jnp.zeros((K, r))
    u, H = fz.update_model_factors(f, S, M, u0, rho)
    for i in range(K):
        ui, Hi = fz.update_model_factors(f, S[i : i + 1], M[i : i + 1], u0[i : i + 1], rho[i])
        np.testing.assert_allclose(np.asarray(u[i]), np.asarray(ui[0]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(H[i]), np.asarray(Hi[0]), rtol=1e-5, atol=1e-6)


def test_online_update_does_not_retrace_for_new_rho():
    f = _item_factors(jax.random.key(11))
    K, (n, r) = 3, f.V.shape
    S = jnp.zeros((K, n))
    M = jnp.ones((K, n), bool)
    traced = chex.assert_max_traces(fz._newton_row, n=1)
    fz._newton_row = traced
    try:
        fz.update_model_factors.clear_cache()
        for rho in (0.1, 0.2, 3.0):
            fz.update_model_factors(f, S, M, jnp.zeros((K, r)), jnp.float32(rho))
    finally:
        chex.clear_trace_counter()
        fz._newton_row = traced.__wrapped__


def test_predict_scores_and_logit_variance():
    f = _item_factors(jax.random.key(12))
    n, r = f.V.shape
    u = jax.random.normal(jax.random.key(13), (2, 5, r))
    p = fz.predict_scores(u, f)
    assert p.shape == (2, 5, n)
    ref = 1 / (1 + np.exp(-(np.asarray(u) @ np.asarray(f.V).T + np.asarray(f.c))))
    np.testing.assert_allclose(np.asarray(p), ref, rtol=1e-5)
    A = jax.random.normal(jax.random.key(14), (5, r, r))
    H = A @ jnp.swapaxes(A, -1, -2) + jnp.eye(r)
    var = fz.predictive_logit_variance(H, f)
    ref = np.einsum("nr,krs,ns->kn", np.asarray(f.V), np.linalg.inv(np.asarray(H)), np.asarray(f.V))
    np.testing.assert_allclose(np.asarray(var), ref, rtol=1e-3, atol=1e-6)
