"""Tests of the low-rank logistic factorization (jaxeval._factorization)."""

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
    g, H = jax.jit(fz._row_grad_hess)(
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


def test_newton_reaches_the_map_estimate():
    scipy_opt = pytest.importorskip("scipy.optimize")
    f = _item_factors(jax.random.key(2))
    rng = np.random.default_rng(3)
    K, (n, r) = 6, f.V.shape
    S = (rng.uniform(size=(K, n)) < 0.5).astype(np.float32)
    M = rng.uniform(size=(K, n)) < 0.5
    u0 = np.tile(np.asarray(f.u_mean), (K, 1))
    u, H = fz.update_model_factors(f, S, M, u0, 0.5, num_newton=8)
    V, c, um = (np.asarray(a, np.float64) for a in f)
    for i in range(K):
        ref = scipy_opt.minimize(
            _np_objective,
            np.zeros(r),
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
    K, (n, r) = 6, f.V.shape
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
    K, (n, r) = 6, f.V.shape
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
    f = _item_factors(jax.random.key(8))
    V = np.asarray(f.V)
    s = (V[:, 0] > 0).astype(np.float32)[None, :]
    m = np.ones_like(s, bool)
    rho = 1e-4
    u = jnp.asarray([[-30.0, 40.0, 10.0]])
    V64, c64, um = (np.asarray(a, np.float64) for a in f)
    prev = _np_objective(np.asarray(u[0], np.float64), V64, c64, s[0], m[0], um, rho)
    for _ in range(6):
        u, H = fz.update_model_factors(f, s, m, u, rho, num_newton=1)
        assert np.isfinite(np.asarray(u)).all() and np.isfinite(np.asarray(H)).all()
        cur = _np_objective(np.asarray(u[0], np.float64), V64, c64, s[0], m[0], um, rho)
        assert cur <= prev * (1 + 1e-6) + 1e-6
        prev = cur


@pytest.mark.parametrize("r", [1, 3, 8, 16, 20])
def test_online_cholesky_direction_equals_the_lapack_solve(r):
    # the online refit's unrolled Cholesky (r <= 16; LAPACK above) solves the same system
    rng = np.random.default_rng(r)
    eye = jnp.eye(r, dtype=jnp.float32)
    for cond in (1.0, 1e3):
        A = rng.normal(size=(r, r))
        Q, _ = np.linalg.qr(A)
        H = (Q * np.geomspace(1.0, cond, r)) @ Q.T
        g = rng.normal(size=r)
        H32, g32 = jnp.asarray(H, jnp.float32), jnp.asarray(g, jnp.float32)
        d = np.asarray(jax.jit(fz._spd_direction)(g32, H32, eye))
        ref = -np.linalg.solve(H + 1e-6 * max(np.trace(H) / r, 1.0) * np.eye(r), g)
        np.testing.assert_allclose(d, ref, rtol=2e-4 * cond, atol=1e-5 * cond)
    # a singular Hessian (rho = 0, nothing informative) still gives a finite step
    d0 = fz._spd_direction(jnp.ones(r), jnp.zeros((r, r)), eye)
    assert np.isfinite(np.asarray(d0)).all()


def test_refit_row_never_increases_objective_on_separable_data():
    # the online refit (full step or none) keeps the safeguard of the offline iterations
    f = _item_factors(jax.random.key(8))
    V = np.asarray(f.V)
    s = (V[:, 0] > 0).astype(np.float32)
    m = np.ones_like(s, bool)
    rho = 1e-4
    u = jnp.asarray([-30.0, 40.0, 10.0])
    V64, c64, um = (np.asarray(a, np.float64) for a in f)
    prev = _np_objective(np.asarray(u, np.float64), V64, c64, s, m, um, rho)
    refit = jax.jit(fz.refit_row)
    for _ in range(6):
        u = refit(f, jnp.asarray(s), jnp.asarray(m), u, jnp.float32(rho))
        assert np.isfinite(np.asarray(u)).all()
        cur = _np_objective(np.asarray(u, np.float64), V64, c64, s, m, um, rho)
        assert cur <= prev * (1 + 1e-6) + 1e-6
        prev = cur


def test_refit_makes_progress_from_a_far_start_on_separable_data():
    """From far away on separable data with a weak prior the full Newton step overshoots
    and fails the Armijo rule; the refit then takes the majorization step ``-g / L``
    instead of staying put (it used to stay put forever). The whole-row and the streamed
    (blocked) refits take the same steps."""
    f = _item_factors(jax.random.key(8))
    V = np.asarray(f.V)
    n, r = V.shape
    s = (V[:, 0] > 0).astype(np.float32)
    m = np.ones_like(s, bool)
    rho = 1e-4
    u0 = jnp.asarray([-30.0, 40.0, 10.0])
    V64, c64, um = (np.asarray(a, np.float64) for a in f)

    def obj(u):
        return _np_objective(np.asarray(u, np.float64), V64, c64, s, m, um, rho)

    # the full Newton step is rejected here (else this test would not test the fallback)
    g, H = fz._row_grad_hess(u0, f.V, f.c, jnp.asarray(s), jnp.asarray(m), f.u_mean, rho)
    d = fz._spd_direction(g, H, jnp.eye(r))
    assert obj(u0 + d) > obj(u0)

    B = 16
    blocks = [(k * B, min(B, n - k * B)) for k in range(-(-n // B))]

    def block_fn(k):
        st = jnp.asarray([b[0] for b in blocks], jnp.int32)[k]
        own = (st + jnp.arange(B)) < n
        pad = lambda x: jnp.concatenate([x, jnp.zeros((B,) + x.shape[1:], x.dtype)])  # noqa: E731
        sl = lambda x: jax.lax.dynamic_slice_in_dim(pad(x), st, B)  # noqa: E731
        return sl(f.V), sl(f.c), sl(jnp.asarray(s)), sl(jnp.asarray(m)) & own

    whole = jax.jit(fz.refit_row)
    blocked = jax.jit(lambda u: fz.update_model_factor_blocked(
        block_fn, len(blocks), u, f.u_mean, rho, 1, return_hessian=False, online=True))
    u = ub = u0
    prev = obj(u0)
    for _ in range(6):
        u = whole(f, jnp.asarray(s), jnp.asarray(m), u, jnp.float32(rho))
        ub = blocked(ub)
        np.testing.assert_allclose(np.asarray(ub), np.asarray(u), rtol=1e-4, atol=1e-4)
        cur = obj(u)
        assert cur < prev  # strictly: the factor moves every time
        prev = cur
    assert prev < 0.9 * obj(u0)


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
    K, (n, r) = 6, f.V.shape
    S = jnp.zeros((K, n))
    M = jnp.ones((K, n), bool)
    # one compilation per shape of rho (a scalar, or one per model); warm both first, or
    # the count depends on which tests ran before in this process
    fz.update_model_factors(f, S, M, jnp.zeros((K, r)), 1.0)
    fz.update_model_factors(f, S, M, jnp.zeros((K, r)), np.full(K, 1.0, np.float32))
    before = fz._update_model_factors._cache_size()
    # new values, and Python / NumPy / JAX scalars alike, hit the same compilation
    for rho in (0.1, jnp.float32(0.2), np.float64(3.0), 7, np.full(K, 0.5)):
        fz.update_model_factors(f, S, M, jnp.zeros((K, r)), rho)
    assert fz._update_model_factors._cache_size() == before


def test_predict_scores_and_logit_variance():
    f = _item_factors(jax.random.key(12))
    n, r = f.V.shape
    u = jax.random.normal(jax.random.key(13), (2, 5, r))
    p = jax.jit(fz.predict_scores)(u, f)
    assert p.shape == (2, 5, n)
    ref = 1 / (1 + np.exp(-(np.asarray(u) @ np.asarray(f.V).T + np.asarray(f.c))))
    np.testing.assert_allclose(np.asarray(p), ref, rtol=1e-5)
    A = jax.random.normal(jax.random.key(14), (5, r, r))
    H = A @ jnp.swapaxes(A, -1, -2) + jnp.eye(r)
    var = jax.jit(fz.predictive_logit_variance)(H, f)
    ref = np.einsum("nr,krs,ns->kn", np.asarray(f.V), np.linalg.inv(np.asarray(H)), np.asarray(f.V))
    np.testing.assert_allclose(np.asarray(var), ref, rtol=1e-3, atol=1e-6)


def test_empirical_prior_keeps_predictions_and_whitens():
    kU, kV = jax.random.split(jax.random.key(15))
    A = jnp.array([[2.0, 0.0, 0.0], [1.0, 0.5, 0.0], [0.0, 0.3, 0.1]])
    U = 0.4 + jax.random.normal(kU, (80, 3)) @ A.T
    f = fz.ItemFactors(jax.random.normal(kV, (40, 3)), jnp.linspace(-1, 1, 40), U.mean(0))
    fw, Uw = jax.jit(fz.empirical_prior)(U, f)
    np.testing.assert_allclose(
        np.asarray(fz.predict_logits(Uw, fw)), np.asarray(fz.predict_logits(U, f)), atol=1e-4
    )
    np.testing.assert_allclose(np.cov(np.asarray(Uw).T, bias=True), np.eye(3), atol=1e-3)
    np.testing.assert_allclose(np.asarray(fw.u_mean), np.asarray(Uw).mean(0), atol=1e-5)
    # a zero-padded column stays zero and finite
    fw, Uw = fz.empirical_prior(U.at[:, 2].set(0.0), f._replace(V=f.V.at[:, 2].set(0.0)))
    assert np.isfinite(np.asarray(Uw)).all() and np.all(np.asarray(fw.V)[:, 2] == 0)


# ------------------------------------------------------------------ offline fit
FIT = dict(learning_rate=0.1, num_steps=300)


@pytest.fixture(scope="module")
def planted():
    """160 models x 120 items from planted rank-2 factors, 10% cells missing."""
    U, V, c, P, S = _planted(jax.random.key(20), 160, 120, 2, scale=1.5)
    M = jax.random.uniform(jax.random.key(21), S.shape) > 0.1
    return dict(U=U, V=V, c=c, P=P, S=S, M=M)


def _fit(S, M, key=0, rank=2, rho=1.0, **kw):
    return fz.fit_factors(
        jax.random.key(key), S, M, rank=rank, rho_u=rho, rho_v=rho, **{**FIT, **kw}
    )


def test_fit_recovers_planted_factors(planted):
    res = _fit(planted["S"], planted["M"])
    assert int(res.status) == fz.STATUS_OK
    P_hat = np.asarray(fz.predict_scores(res.U, res.item_factors))
    P = np.asarray(planted["P"])
    # probabilities recovered (Bernoulli noise limits it; a rank-0 fit gets ~0.75)
    assert np.corrcoef(P_hat.ravel(), P.ravel())[0, 1] > 0.93
    assert np.abs(P_hat - P).mean() < 0.06
    # the item-factor subspace is recovered (factors are identified up to rotation)
    Q1, _ = np.linalg.qr(np.asarray(res.item_factors.V))
    Q2, _ = np.linalg.qr(np.asarray(planted["V"]))
    cosines = np.linalg.svd(Q1.T @ Q2, compute_uv=False)
    assert cosines.min() > 0.95
    # the loss history decreases and ends at the final loss
    h = np.asarray(res.loss_history)
    assert h.shape == (50,) and np.all(np.diff(h) <= 1e-6)
    assert abs(h[-1] - float(res.final_loss)) < 1e-3
    # u_mean is the mean training factor
    np.testing.assert_allclose(
        np.asarray(res.item_factors.u_mean), np.asarray(res.U).mean(0), atol=1e-6
    )


@pytest.mark.slow  # benchmarks/bench_factorization.py re-checks the optimum on real data
def test_fit_reaches_the_scipy_optimum():
    scipy_opt = pytest.importorskip("scipy.optimize")
    _, _, _, _, S = _planted(jax.random.key(22), 25, 20, 2)
    M = np.asarray(jax.random.uniform(jax.random.key(23), S.shape) > 0.2)
    S = np.asarray(S)
    m, n, r, rho = 25, 20, 2, 0.5
    res = _fit(S, M, rank=r, rho=rho, num_steps=2000)

    def f(x):
        U, V, c = x[: m * r].reshape(m, r), x[m * r : (m + n) * r].reshape(n, r), x[-n:]
        z = U @ V.T + c
        p = 1 / (1 + np.exp(-z))
        val = np.sum(M * (np.logaddexp(0, z) - S * z)) + rho * (np.sum(U**2) + np.sum(V**2))
        G = M * (p - S)
        grad = np.concatenate(
            [(G @ V + 2 * rho * U).ravel(), (G.T @ U + 2 * rho * V).ravel(), G.sum(0)]
        )
        return val, grad

    best = min(
        (
            scipy_opt.minimize(
                f,
                np.random.default_rng(s).normal(0, scale, (m + n) * r + n),
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": 20000, "gtol": 1e-10, "ftol": 1e-15},
            )
            for s in range(3)
            for scale in (0.1, 1.0)
        ),
        key=lambda o: o.fun,
    )
    # the objective has several local optima (this problem: 199.26 and 200.19); the
    # best of six L-BFGS starts and the Adam fit must agree
    ours = float(res.final_loss) * M.sum()
    assert abs(ours - best.fun) < 1e-4 * best.fun


def test_fit_masked_cells_have_no_influence(planted):
    S, M = np.asarray(planted["S"]), np.asarray(planted["M"])
    S2 = np.where(M, S, 0.37).astype(np.float32)
    a, b = _fit(S, M), _fit(S2, M)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_fit_vmapped_over_seeds_and_rho_equals_looped(planted):
    S, M = planted["S"], planted["M"]
    keys = jax.random.split(jax.random.key(3), 3)
    rhos = jnp.array([0.5, 2.0, 8.0])
    grid = jax.vmap(
        lambda k, r: fz.fit_factors(
            k, S, M, rank=2, rho_u=r, rho_v=r, learning_rate=0.1, num_steps=300
        )
    )(keys, rhos)
    assert grid.U.shape == (3, 160, 2) and grid.status.shape == (3,)
    for i in range(3):
        one = fz.fit_factors(
            keys[i], S, M, rank=2, rho_u=rhos[i], rho_v=rhos[i], learning_rate=0.1, num_steps=300
        )
        for x, y in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(grid)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y)[i], rtol=2e-4, atol=2e-5)
    # stronger regularisation gives smaller factors
    norms = np.asarray(jnp.sum(grid.U**2, axis=(1, 2)))
    assert norms[0] > norms[1] > norms[2]


def test_fit_does_not_retrace_for_new_seed_or_rho():
    S = jnp.asarray(np.random.default_rng(0).uniform(size=(25, 20)) < 0.5, jnp.float32)
    M = jnp.ones_like(S, bool)
    kw = dict(rank=2, learning_rate=0.1, num_steps=2000)
    fz.fit_factors(jax.random.key(0), S, M, rho_u=1.0, rho_v=1.0, **kw)
    before = fz._fit_factors._cache_size()
    fz.fit_factors(jax.random.key(1), S, M, rho_u=3.0, rho_v=0.5, **kw)
    fz.fit_factors(
        jax.random.key(2), S, M, rho_u=jnp.float32(9.0), rho_v=0.1, **{**kw, "learning_rate": 0.01}
    )
    assert fz._fit_factors._cache_size() == before


def test_fit_reports_nonfinite_status_and_returns_finite_factors(planted):
    S = np.asarray(planted["S"]).copy()
    M = np.asarray(planted["M"])
    S[0, np.flatnonzero(M[0])[0]] = np.nan  # an observed NaN poisons the loss
    res = _fit(S, M)
    assert int(res.status) == fz.STATUS_NONFINITE
    for leaf in (res.U, *res.item_factors):
        assert np.isfinite(np.asarray(leaf)).all()
    # an absurd learning rate overflows; the status says so
    res = _fit(planted["S"], planted["M"], learning_rate=1e38)
    assert int(res.status) == fz.STATUS_NONFINITE


def test_padded_rank_masks_columns(planted):
    S, M = planted["S"], planted["M"]
    pad = _fit(S, M, rank=4, active_rank=jnp.int32(2))
    assert np.all(np.asarray(pad.U)[:, 2:] == 0) and np.all(
        np.asarray(pad.item_factors.V)[:, 2:] == 0
    )
    exact = _fit(S, M, rank=2)
    assert abs(float(pad.final_loss) - float(exact.final_loss)) < 2e-3


def test_holdout_mask_keeps_every_row_and_column():
    M = jax.random.uniform(jax.random.key(30), (50, 40)) > 0.3
    H = np.asarray(fz.holdout_mask(jax.random.key(31), M, 0.5))
    M = np.asarray(M)
    assert not (H & ~M).any()
    train = M & ~H
    assert train.any(axis=1).all() and train.any(axis=0).all()
    assert 0.4 < H.sum() / M.sum() < 0.55
    # rows are never held out whole (cells, not candidates)
    assert not np.any(H.sum(1) == M.sum(1))


def test_select_prefers_true_rank_over_rank_one(planted):
    sel = fz.select_factors(
        jax.random.key(40),
        planted["S"],
        planted["M"],
        ranks=(1, 2),
        rhos=(1.0, 4.0),
        num_steps=300,
        learning_rate=0.1,
    )
    assert sel.heldout_loss.shape == (2, 2) and sel.status.shape == (2, 2, 1)
    assert (sel.status == fz.STATUS_OK).all()
    assert sel.rank == 2
    assert sel.heldout_loss[1].min() < sel.heldout_loss[0].min() - 0.02
    assert (
        sel.heldout_loss.min()
        == sel.heldout_loss[0 if sel.rank == 1 else 1, list(sel.rhos).index(sel.rho)]
    )


# ------------------------------------------------------------------ numpy wrapper
@pytest.fixture(scope="module")
def wrapped(planted):
    import jaxeval

    S = np.where(np.asarray(planted["M"]), np.asarray(planted["S"]), np.nan)
    train = jaxeval.ScoreMatrix(S[:120])
    model = jaxeval.fit_factorization(train, rank=2, rho=1.0, num_steps=300, learning_rate=0.1)
    return model, np.asarray(planted["S"])[120:], np.asarray(planted["P"])[120:]


def test_wrapper_fits_and_predicts_new_models(wrapped):
    model, S_new, P_new = wrapped
    assert model.V.shape == (120, 2) and model.U.shape == (120, 2) and model.rank == 2
    assert model.selection is None and "rank=2" in repr(model)
    K, n = S_new.shape
    rng = np.random.default_rng(0)
    few = rng.uniform(size=(K, n)) < 0.25
    p_none = model.predict()
    p_few, sd_few = model.predict(S_new, few, return_std=True)
    p_all, sd_all = model.predict(S_new, np.ones_like(few), return_std=True)
    # nothing observed: the prior mean factor
    ref = 1 / (1 + np.exp(-(model.V @ model.u_mean + model.c)))
    assert p_none.shape == (n,)  # one model: no model axis, like a 1-D row
    np.testing.assert_allclose(p_none, ref, rtol=1e-5)
    # observing items moves each model towards its truth and shrinks the uncertainty
    err = [np.abs(p - P_new).mean() for p in (np.broadcast_to(p_none, P_new.shape), p_few, p_all)]
    assert err[0] > err[1] > err[2]
    assert sd_all.mean() < sd_few.mean() and (sd_few > 0).all()
    # NaN marks unobserved cells when no mask is given
    np.testing.assert_allclose(model.predict(np.where(few, S_new, np.nan)), p_few, rtol=1e-6)
    # pooled accuracy is exact once every item is observed
    np.testing.assert_allclose(
        model.predict_accuracy(S_new, np.ones_like(few)), S_new.mean(1), rtol=1e-6
    )
    # one model's row (1-D) gives its results without the model axis, as numpy does
    p1, sd1 = model.predict(S_new[3], few[3], return_std=True)
    assert p1.shape == sd1.shape == (n,)
    np.testing.assert_allclose(p1, p_few[3], rtol=1e-6)
    np.testing.assert_allclose(sd1, sd_few[3], rtol=1e-6)
    u1, H1 = model.update(S_new[3], few[3])
    u2, H2 = model.update(S_new[3:4], few[3:4])
    assert u1.shape == (2,) and H1.shape == (2, 2)
    np.testing.assert_allclose(u1, u2[0], rtol=1e-6)
    np.testing.assert_allclose(H1, H2[0], rtol=1e-6)
    np.testing.assert_allclose(model.update(S_new[3], few[3], u_init=u1)[0], u1, atol=1e-5)
    acc1 = model.predict_accuracy(S_new[3], few[3])
    assert np.ndim(acc1) == 0
    np.testing.assert_allclose(acc1, model.predict_accuracy(S_new, few)[3], rtol=1e-6)
    assert model.predict(list(S_new[3]), list(few[3])).shape == (n,)


def test_wrapper_refuses_bad_input(wrapped, planted):
    import jaxeval

    model, S_new, _ = wrapped
    S = np.asarray(planted["S"])[:30, :20]
    with pytest.raises(ValueError, match="larger than the data allows"):
        jaxeval.fit_factorization(S, rank=21, rho=1.0)
    with pytest.raises(ValueError, match="rank"):
        jaxeval.fit_factorization(S, rank=0, rho=1.0)
    with pytest.raises(ValueError, match="larger than the data allows"):
        jaxeval.fit_factorization(S, ranks=(25, 40), rho=1.0)
    with pytest.raises(ValueError, match="rho"):
        jaxeval.fit_factorization(S, rank=2, rho=-1.0)
    # checked before any fitting (the selection grid alone takes seconds)
    for kw, msg in ((dict(rho_v=-1.0), "rho_v"), (dict(selection_steps=0), "selection_steps"),
                    (dict(learning_rate=0.0), "learning_rate"), (dict(ranks=()), "ranks: the"),
                    (dict(rhos=(), rank=2, rho="auto"), "rhos: the"), (dict(seed=-1), "seed"),
                    (dict(holdout_fraction="x"), "holdout_fraction")):
        with pytest.raises(ValueError, match=msg):
            jaxeval.fit_factorization(S, **{"rank": "auto", "rho": 1.0, **kw})
    # a grid that is no sequence is named (None, a bare number and a string raised
    # TypeErrors from len() or passed the letters on)
    for kw, msg in ((dict(ranks=None), "ranks: expected a sequence"),
                    (dict(ranks=4), "ranks: expected a sequence"),
                    (dict(ranks="48"), "ranks: expected a sequence"),
                    (dict(rank=2, rho="auto", rhos=0.1), "rhos: expected a sequence")):
        with pytest.raises(TypeError, match=msg):
            jaxeval.fit_factorization(S, **{"rank": "auto", "rho": 1.0, **kw})
    bad = S.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="model rows have no observed cell"):
        jaxeval.fit_factorization(bad, rank=2, rho=1.0)
    bad = S.copy()
    bad[:, 5] = np.nan
    with pytest.raises(ValueError, match="item columns have no observed cell"):
        jaxeval.fit_factorization(bad, rank=2, rho=1.0)
    with pytest.raises(ValueError, match=r"scores: expected shape \[K, 120\]"):
        model.predict(S_new[:, :100])
    with pytest.raises(ValueError, match="mask: expected shape"):
        model.predict(S_new, np.ones((2, 120), bool))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        model.predict(S_new * 2)
    with pytest.raises(FloatingPointError, match="non-finite"):
        train = np.asarray(planted["S"])[:120]
        jaxeval.fit_factorization(train, rank=2, rho=1.0, learning_rate=1e38, num_steps=300)
    with pytest.raises(ValueError, match="learning_rate"):
        jaxeval.fit_factorization(S, rank=2, rho=1.0, learning_rate=True)
    with pytest.raises(ValueError, match=r"^data: field 'scores' must be 2-D"):  # said once
        jaxeval.fit_factorization(np.ones(5), rank=1, rho=1.0)
    with pytest.raises(ValueError, match="rho: expected a finite value"):
        model.update(S_new, rho="x")
    with pytest.raises(ValueError, match="mask: given without scores"):
        model.predict(None, np.ones((1, 120), bool))
    # a hold-out that holds out nothing would score every grid cell 0 and pick the first
    with pytest.raises(ValueError, match="holdout_fraction: 0.01 of the 48 observed cells"):
        jaxeval.fit_factorization(S[:4, :12], rank=1, rho="auto", holdout_fraction=0.01)


def test_loss_history_has_no_empty_records():
    import jaxeval

    S = np.random.default_rng(0).integers(0, 2, (30, 40)).astype(float)
    h = jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=70).loss_history
    assert h.shape == (50,) and np.isfinite(h).all()
    h = jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=20).loss_history
    assert np.isfinite(h[:20]).all() and np.isnan(h[20:]).all()


@pytest.mark.parametrize("steps", [(1.0,), (1.0, 0.5), (0.5, 1.0, 0.0), (1.0, -0.5, 0.0), ()])
def test_line_search_must_end_with_the_zero_step(steps):
    """The Armijo rule compares each trial with the last one: without a final 0 it would
    accept a full step that raises the objective."""
    f = _item_factors(jax.random.key(0))
    s, m = jnp.ones(40), jnp.ones(40, bool)
    with pytest.raises(ValueError, match="line_search: expected decreasing positive"):
        fz.refit_row(f, s, m, jnp.zeros(3), 1.0, line_search=steps)


def test_wrapper_saves_and_loads_every_field(wrapped, tmp_path):
    """``to_npz`` / ``from_npz`` round-trip the whole fit (``final_loss`` and ``info``
    included; they were not saved before and nothing read the file back); a file that
    is not one is refused naming it."""
    import dataclasses

    import jaxeval

    model, S_new, _ = wrapped
    path = model.to_npz(tmp_path / "fit")
    assert path == tmp_path / "fit.npz"
    back = jaxeval.LowRankLogistic.from_npz(path)
    for f in dataclasses.fields(model):
        a, b = getattr(model, f.name), getattr(back, f.name)
        if f.name in ("info", "selection"):
            assert (None if a is None else dict(a)) == (None if b is None else dict(b)), f.name
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f.name)
    np.testing.assert_array_equal(back.predict(S_new[:2]), model.predict(S_new[:2]))
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(ValueError, match="x.npy: not a factorization saved by to_npz"):
        jaxeval.LowRankLogistic.from_npz(tmp_path / "x.npy")
    with pytest.raises(FileNotFoundError, match="nope.npz: no such file"):
        jaxeval.LowRankLogistic.from_npz(tmp_path / "nope.npz")  # as every other loader


def test_wrapper_auto_selection(planted):
    import jaxeval

    S = np.asarray(planted["S"])
    model = jaxeval.fit_factorization(
        S,
        rank="auto",
        rho="auto",
        ranks=(1, 2),
        rhos=(1.0, 4.0),
        selection_steps=300,
        num_steps=300,
    )
    sel = model.selection
    assert sel["heldout_loss"].shape == (2, 2)
    a, b = np.unravel_index(np.argmin(sel["heldout_loss"]), (2, 2))
    assert model.rank == sel["ranks"][a] == 2 and model.rho_u == sel["rhos"][b]
    assert "held-out log-loss" in model.summary()


@pytest.mark.slow
def test_factorization_beats_item_mean_on_real_heldout_cells():
    import jaxeval

    sm = jaxeval.load("oll2_ifeval").drop_duplicates()
    S, M = jnp.asarray(sm.scores), jnp.asarray(sm.mask)
    held = fz.holdout_mask(jax.random.key(0), M, 0.1)
    train = M & ~held
    res = fz.fit_factors(
        jax.random.key(1),
        S,
        train,
        rank=4,
        rho_u=3.0,
        rho_v=3.0,
        learning_rate=0.1,
        num_steps=300,
    )
    assert int(res.status) == fz.STATUS_OK
    ll = float(fz.heldout_log_loss(res.U, res.item_factors, S, held))
    Snp, Tnp, Hnp = np.asarray(S), np.asarray(train), np.asarray(held)
    p_item = (np.where(Tnp, Snp, 0).sum(0) + 1) / (Tnp.sum(0) + 2)
    P = np.broadcast_to(p_item, Snp.shape)[Hnp]
    ll_item = float(-np.mean(Snp[Hnp] * np.log(P) + (1 - Snp[Hnp]) * np.log1p(-P)))
    # benchmarks/bench_factorization.py: 0.337 vs 0.534 (rank 4)
    assert ll < ll_item - 0.1


def test_selection_scores_the_fixed_rho_v_that_will_be_fitted():
    """With an explicit rho_v the selection grid fits that rho_v on V (it used rho on
    both, so the rank and rho chosen were tuned for a model never fitted)."""
    import jaxeval

    tr = jaxeval.load("oll2_musr").take(models=range(40), items=range(120))
    kw = dict(rank="auto", rho="auto", ranks=(1, 2), rhos=(0.3, 3.0), num_steps=20,
              selection_steps=40, seed=0)
    a = jaxeval.fit_factorization(tr, **kw)
    b = jaxeval.fit_factorization(tr, rho_v=1000.0, **kw)
    assert not np.array_equal(a.selection["heldout_loss"], b.selection["heldout_loss"])
    assert b.rho_v == 1000.0
    for bad in (-1, 0, True, 2.5, 10**9):  # refused, not u_mean returned (or minutes spent
        # inside XLA, beyond Ctrl-C's reach)
        with pytest.raises(TypeError if isinstance(bad, (bool, float)) else ValueError,
                           match=r"num_newton: expected an integer in \[1, 10000\]"):
            a.update(tr.scores[:1], tr.mask[:1], num_newton=bad)
    with pytest.raises(ValueError, match=r"scores: no model \(shape \(0, 120\)\)"):
        a.predict(np.ones((0, 120)))
    with pytest.raises(ValueError, match=r"seed: the folds' fits use seed \.\. seed \+ 1"):
        jaxeval.learn_lam0(tr, rank=2, seed=2**63 - 1, num_steps=5)


# ------------------------------------------------------------------ learned λ prior
def test_learn_lam0_is_near_one_on_low_rank_truth_and_near_zero_on_noise():
    """The cross-fitted slope Cov(S, Ŝ) / Var(Ŝ): predictions of a planted low-rank
    matrix carry the held-out scores (λ₀ well above 0), predictions fitted to coin
    flips carry nothing (λ₀ near 0; an in-sample slope would not be, the fit overfits)."""
    import jaxeval

    _, _, _, _, S = _planted(jax.random.key(11), 60, 80, 2, scale=1.5)
    kw = dict(rank=2, rho=1.0, n_observed=(10, 20), num_steps=150, seed=3)
    lam_truth = jaxeval.learn_lam0(np.asarray(S), **kw)
    noise = np.random.default_rng(5).integers(0, 2, size=(60, 80)).astype(float)
    lam_noise = jaxeval.learn_lam0(noise, **kw)
    assert 0.6 <= lam_truth <= 1.0, lam_truth
    assert 0.0 <= lam_noise <= 0.25, lam_noise
    assert jaxeval.learn_lam0(np.asarray(S), **kw) == lam_truth  # same seed, same value


def test_progress_lines_say_each_stage_and_change_nothing(capsys):
    """``progress=True`` prints a line per stage (and per rank of the selection grid, per
    fold of learn_lam0) on stderr, nothing on stdout, and fits the same factors."""
    import jaxeval

    _, _, _, _, S = _planted(jax.random.key(2), 30, 40, 2)
    kw = dict(ranks=(1, 2), rhos=(1.0, 3.0), num_steps=30, selection_steps=20, seed=1)
    quiet = jaxeval.fit_factorization(np.asarray(S), **kw)
    assert capsys.readouterr().err == ""
    loud = jaxeval.fit_factorization(np.asarray(S), progress=True, **kw)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 6, err
    assert lines[0].startswith("fit_factorization: choosing rank x rho") and "2 ranks x 2 rhos" \
        in lines[0]
    assert lines[1].startswith("fit_factorization: rank 1 (1 of 2): best held-out log loss")
    assert lines[2].startswith("fit_factorization: rank 2 (2 of 2)")
    assert f"chose rank {loud.rank}" in lines[3] and "fitting rank" in lines[4]
    assert lines[5].startswith("fit_factorization: done: log loss") and lines[5].endswith(" s]")
    np.testing.assert_array_equal(quiet.V, loud.V)
    lam = jaxeval.learn_lam0(np.asarray(S), rank=1, num_steps=10, n_observed=(5,),
                             progress=True)
    err = capsys.readouterr().err.splitlines()
    assert [e.split(":")[1].strip() for e in err] == ["fold 1 of 2", "fold 2 of 2", "done"]
    assert f"lam0 = {lam:.3f}" in err[-1]
    with pytest.raises(TypeError, match="progress: expected True or False"):
        jaxeval.fit_factorization(np.asarray(S), 1, 1.0, progress="yes")
    with pytest.raises(TypeError, match="progress: expected True or False"):
        jaxeval.learn_lam0(np.asarray(S), rank=1, progress=1)


def test_learn_lam0_refuses_bad_input():
    import jaxeval

    S = np.ones((10, 30))
    for kw, word in ((dict(folds=1), "folds"), (dict(folds=6), "at least 12 models"),
                     (dict(n_observed=()), "n_observed"), (dict(n_observed=(0,)), "n_observed"),
                     (dict(seed=-1), "seed"), (dict(n_observed=(29,)), "no held-out model"),
                     (dict(n_observed=5), "n_observed: expected a sequence"),
                     (dict(num_steps=0), "^num_steps: expected an integer >= 1, got 0"),
                     (dict(rho=-1.0), "^rho: expected a finite value")):
        with pytest.raises(ValueError, match=word):
            jaxeval.learn_lam0(S, **{"rank": 1, "num_steps": 5, **kw})


def test_dataframes_are_read_by_their_labels_not_by_position():
    """A DataFrame (or Series) whose labels name the items is matched to the fit by name:
    its columns in another order give the same predictions (they were read by position,
    silently wrong), unknown names are refused, and fit_factorization keeps the names."""
    pd = pytest.importorskip("pandas")
    import jaxeval

    sm = jaxeval.synthetic_score_matrix(0, 40, 60)
    train, new = sm.take(models=range(36)), sm.take(models=range(36, 40))
    lr = jaxeval.fit_factorization(train, 2, 1.0, num_steps=50)
    seen = np.random.default_rng(0).uniform(size=new.shape) < 0.4
    df = pd.DataFrame(np.where(seen, new.scores, np.nan), index=new.models, columns=new.items)
    want = lr.predict(np.asarray(df, float))
    np.testing.assert_array_equal(lr.predict(df), want)
    np.testing.assert_array_equal(lr.predict(df[df.columns[::-1]]), want)
    np.testing.assert_array_equal(lr.predict_accuracy(df[df.columns[::-1]]),
                                  lr.predict_accuracy(np.asarray(df, float)))
    # fitted items a frame lacks are unobserved
    arr = np.asarray(df, float).copy()
    arr[:, 1::2] = np.nan
    np.testing.assert_array_equal(lr.update(df.iloc[:, ::2])[0], lr.update(arr)[0])
    one = df.iloc[1]  # a Series indexed by item: one model
    np.testing.assert_array_equal(lr.predict(one[::-1]), lr.predict(np.asarray(df, float)[1]))
    assert lr.predict(one).shape == (60,) and np.ndim(lr.predict_accuracy(one)) == 0
    # pandas' default labels 0, 1, ... name nothing: read by position, as an array
    np.testing.assert_array_equal(lr.predict(pd.DataFrame(df.to_numpy())), want)
    with pytest.raises(ValueError, match="60 of the DataFrame's items were not in the fit"):
        lr.predict(df.rename(columns=lambda c: f"{c}?"))
    with pytest.raises(ValueError, match="mask: not used with a DataFrame"):
        lr.predict(df, np.ones(df.shape, bool))
    # integer labels that are not fitted item names are positions, as they always were
    # (a fit on an unlabelled frame names its items item_0, ...)
    plain = jaxeval.fit_factorization(pd.DataFrame(np.asarray(train.scores, float)), 2, 1.0,
                                      num_steps=50)
    rows = pd.DataFrame(np.asarray(df, float))
    for frame in (rows.iloc[:, ::-1], rows.iloc[:, 1:].join(rows.iloc[:, :1])):
        np.testing.assert_array_equal(plain.predict(frame), plain.predict(np.asarray(frame)))
    np.testing.assert_array_equal(plain.predict(rows.iloc[0][::-1]),
                                  plain.predict(np.asarray(rows.iloc[0])[::-1]))
    named = jaxeval.fit_factorization(pd.DataFrame(np.asarray(train.scores, float),
                                                   index=train.models, columns=train.items),
                                      2, 1.0, num_steps=50)
    assert named.items.tolist() == train.items.tolist()
    assert named.models.tolist() == train.models.tolist()
    np.testing.assert_array_equal(named.V, lr.V)


def test_wrapper_takes_a_score_matrix_matched_by_item_name(wrapped, tmp_path):
    import jaxeval

    model, S_new, _ = wrapped
    K, n = S_new.shape
    few = np.random.default_rng(1).uniform(size=(K, n)) < 0.3
    ref = model.predict(S_new, few)
    items = model.items
    perm = np.random.default_rng(2).permutation(n)
    sm = jaxeval.ScoreMatrix(np.where(few, S_new, np.nan)[:, perm], items=items[perm])
    # columns in another order are matched by name, not by position
    np.testing.assert_allclose(model.predict(sm), ref, rtol=1e-6)
    np.testing.assert_allclose(model.update(sm)[0], model.update(S_new, few)[0], rtol=1e-6)
    np.testing.assert_allclose(model.predict_accuracy(sm), model.predict_accuracy(S_new, few),
                               rtol=1e-6)
    # fitted items the matrix lacks are unobserved; items the fit does not know are refused
    part = sm.take(items=items[:10])
    np.testing.assert_allclose(
        model.predict(part), model.predict(S_new, few & (np.arange(n) < 10)), rtol=1e-6)
    other = jaxeval.ScoreMatrix(np.ones((1, 2)), items=["not-fitted", items[0]])
    with pytest.raises(ValueError, match=r"scores: 1 of the ScoreMatrix's items.*not-fitted"):
        model.predict(other)
    with pytest.raises(ValueError, match="mask: not used with a ScoreMatrix"):
        model.predict(sm, few)
    # a mask must be boolean (0/1 accepted): 0.5 is not silently True
    with pytest.raises(ValueError, match="mask: expected booleans"):
        model.predict(S_new, np.where(few, 0.5, 0.0))
    np.testing.assert_allclose(model.predict(S_new, few.astype(int)), ref, rtol=1e-6)


def test_to_npz_keeps_numeric_info_numeric(tmp_path):
    import jaxeval

    S = (np.random.default_rng(0).uniform(size=(30, 12)) < 0.5).astype(float)
    lr = jaxeval.fit_factorization(S, rank=2, rho=1.0, num_steps=20, seed=np.int64(3),
                                   learning_rate=np.float32(0.1))
    back = jaxeval.LowRankLogistic.from_npz(lr.to_npz(tmp_path / "f"))
    assert back.info["seed"] == 3 and isinstance(back.info["seed"], int)
    assert isinstance(back.info["learning_rate"], float)
    assert back.info["learning_rate"] == pytest.approx(0.1)


def test_from_npz_refuses_corrupt_files_naming_the_field(wrapped, tmp_path):
    """A saved fit whose factors disagree with its names, hold NaN, or whose metadata is
    not a mapping is refused on load, not later inside ``predict``."""
    import jaxeval

    model, _, _ = wrapped
    good = dict(np.load(model.to_npz(tmp_path / "good")))
    cases = {
        "U_shape": (dict(U=np.zeros((5, 7), np.float32)), "inconsistent shapes"),
        "models": (dict(models=np.array(["a"])), "inconsistent shapes"),
        "rho": (dict(online_rho=np.float64(-1.0)), "online_rho .* not a finite value >= 0"),
        "rho_vec": (dict(rho_u=np.array([1.0, 2.0])), "rho_u .* not a finite value >= 0"),
        "nan_V": (dict(V=np.full_like(good["V"], np.nan)), "V has non-finite values"),
        "meta_list": (dict(meta=np.asarray("[1]")), "meta is a list"),
        "info_list": (dict(meta=np.asarray('{"format": "jaxeval-lowrank/1", "info": [1]}')),
                      "info is a list"),
    }
    for name, (change, msg) in cases.items():
        p = tmp_path / f"{name}.npz"
        np.savez(p, **{**good, **change})
        with pytest.raises(ValueError, match=f"{name}.npz: not a factorization.*{msg}"):
            jaxeval.LowRankLogistic.from_npz(p)


def test_float64_factors_round_trip_exactly(wrapped, tmp_path):
    """A fit made under jax x64 holds float64 factors; saving and loading keeps them."""
    import dataclasses

    import jaxeval

    model, S_new, _ = wrapped
    f64 = {f: getattr(model, f).astype(np.float64) for f in ("V", "c", "u_mean", "U")}
    f64["V"] = f64["V"] + 1e-12  # not representable in float32
    m64 = dataclasses.replace(model, **f64)
    back = jaxeval.LowRankLogistic.from_npz(m64.to_npz(tmp_path / "f64"))
    for f in f64:
        assert getattr(back, f).dtype == np.float64, f
        np.testing.assert_array_equal(getattr(back, f), f64[f], err_msg=f)
    # float32 factors stay float32
    assert jaxeval.LowRankLogistic.from_npz(model.to_npz(tmp_path / "f32")).V.dtype == np.float32


def test_fitted_arrays_are_read_only(wrapped, tmp_path):
    """A frozen fit is frozen: fitted and loaded arrays alike refuse in-place writes."""
    import jaxeval

    model, _, _ = wrapped
    loaded = jaxeval.LowRankLogistic.from_npz(model.to_npz(tmp_path / "f"))
    for m in (model, loaded):
        for f in ("V", "c", "u_mean", "U", "items", "models"):
            with pytest.raises(ValueError, match="read-only"):
                getattr(m, f)[0] = getattr(m, f)[0]


def test_online_input_errors_name_the_problem(wrapped):
    model, S_new, _ = wrapped
    x = S_new[:1].copy()
    x[0, 3] = np.nan
    with pytest.raises(ValueError, match=r"scores: 1 observed scores are not finite \(first at "
                                         r"row 0, item 3: nan\)"):
        model.update(x, np.ones_like(x, bool))
    with pytest.raises(ValueError, match="u_init: the warm start has non-finite values"):
        model.update(S_new[:1], u_init=np.full((1, model.rank), np.nan))
    with pytest.raises(TypeError, match=r"u_init: expected a \[1, \d+\] array of numbers"):
        model.update(S_new[:1], u_init=np.full((1, model.rank), "a"))
    with pytest.raises(ValueError, match="scores: expected real numbers"):
        model.predict(np.full((1, model.n_items), "a"))
    with pytest.raises(ValueError, match="scores: expected real numbers"):
        model.predict(S_new[:1] + 0j)
    # an object array of floats and None (None = unobserved) is still read as NaN
    obj = S_new[:1].astype(object)
    obj[0, 5:] = None
    nan = S_new[:1].copy()
    nan[0, 5:] = np.nan
    np.testing.assert_array_equal(model.predict(obj), model.predict(nan))


def test_fit_refuses_strings_and_bools_for_numbers():
    import jaxeval

    S = (np.random.default_rng(0).uniform(size=(30, 12)) < 0.5).astype(float)
    for kw, msg in ((dict(holdout_fraction="0.1"), "holdout_fraction"),
                    (dict(learning_rate="0.1"), "learning_rate"),
                    (dict(num_steps=True), "num_steps"),
                    (dict(selection_steps=True), "selection_steps"),
                    (dict(rhos=("0.3",)), "rhos"),
                    (dict(rho_v="1"), "rho_v")):
        error = TypeError if msg.endswith("steps") else ValueError  # (an integer's type)
        with pytest.raises(error, match=f"^{msg}: expected"):
            jaxeval.fit_factorization(S, **{"rank": "auto", "rho": "auto", **kw})


def test_selected_rho_is_the_grid_value_exactly(planted):
    """With rank and rho selected, the stored (and refitted) rho is the user's grid value,
    not its float32 rounding."""
    import jaxeval

    S = np.asarray(planted["S"])[:60, :40]
    model = jaxeval.fit_factorization(S, rank=1, rho="auto", rhos=(0.3, 3.3),
                                      selection_steps=30, num_steps=30)
    assert model.rho_u in (0.3, 3.3) and model.rho_v == model.rho_u
    assert model.selection["rhos"].tolist() == [0.3, 3.3]


def test_update_runs_newton_to_convergence_by_default():
    """From u_mean on a rank-16 fit, five damped Newton steps stop short (the former
    default); the default now iterates until the factors stop moving."""
    import jaxeval

    sm = jaxeval.load("oll2_musr").drop_duplicates()
    lr = jaxeval.fit_factorization(sm.take(models=range(100)), rank=16, rho=0.3,
                                   num_steps=150)
    S = sm.scores[100:110]
    m = np.zeros_like(S, bool)
    m[:, ::25] = True
    ref = lr.predict(S, m, num_newton=400)
    assert np.abs(lr.predict(S, m, num_newton=5) - ref).max() > 1e-3
    np.testing.assert_allclose(lr.predict(S, m), ref, atol=2e-6)
    np.testing.assert_allclose(lr.predict_accuracy(S, m), np.where(m, S, ref).mean(1),
                               atol=1e-6)
    with pytest.raises(ValueError,
                       match=r"num_newton: expected an integer in \[1, 10000\] \(or None"):
        lr.update(S, m, num_newton=0)


def test_a_fit_worse_than_predicting_one_half_warns():
    """A learning rate far too large ended the fit at a loss above log 2 (the cost of
    predicting 0.5 everywhere, every factor at 0) and returned it without a word; a
    sound fit is silent."""
    import warnings

    import jaxeval

    S = (np.random.default_rng(0).random((40, 30)) < 0.5).astype(float)
    with pytest.warns(UserWarning, match=r"fit_factorization: the fit ended at a loss of "
                      r"[0-9.]+ per observed cell, more than 10% above the 0.6931 of predicting "
                      r"0.5 everywhere \(learning_rate=1000 too large"):
        bad = jaxeval.fit_factorization(S, rank=2, rho=1.0, num_steps=200,
                                        learning_rate=1e3)
    assert bad.final_loss > 1.1 * np.log(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        good = jaxeval.fit_factorization(S, rank=2, rho=1.0, num_steps=200)
    assert good.final_loss < np.log(2.0)
