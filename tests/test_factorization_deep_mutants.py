"""Gaps found by a second mutation review of the factorization kernels: each test pins a
behaviour that a plausible one-line bug changed without any other test failing (which
trial step of the safeguarded Newton iteration is accepted and the majorization step
taken when none is, the number of Newton steps and their defaults, the streamed refit
against the whole-row one for several block sizes and masks, the trial sums at a
fallback step, the Armijo rule's sufficient decrease and slack, the argument checks of
the trial steps and of the derivative hook, the held-out cells of ``holdout_mask`` and
the repeats of
``select_factors``). References are computed another way, in float64 NumPy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_factorization import _item_factors

from jaxeval import _factorization as fz

OFFLINE_STEPS = np.asarray(fz._LINE_SEARCH_STEPS)
ONLINE_STEPS = np.asarray(fz.ONLINE_LINE_SEARCH_STEPS)


# ------------------------------------------------------------------ references
def _ref_step(u, V, c, s, m, u_mean, rho, steps):
    """One safeguarded Newton step of the row objective in float64 NumPy, as documented:
    the direction ``-(H + ridge)^{-1} g``, the largest trial step passing the Armijo rule
    against the current point, else the majorization step ``-g / (vv_obs / 4 + 2 rho)``.
    Returns the new factor and the step taken (0.0 for the majorization step)."""
    r = u.shape[0]
    z = V @ u + c
    p = 1.0 / (1.0 + np.exp(-z))
    g = V.T @ (m * (p - s)) + 2.0 * rho * (u - u_mean)
    H = (V * (m * p * (1.0 - p))[:, None]).T @ V + 2.0 * rho * np.eye(r)
    scale = max(np.trace(H) / r, 1.0)
    d = -np.linalg.solve(H + 1e-6 * scale * np.eye(r), g)
    zt = z[None, :] + steps[:, None] * (V @ d)[None, :]
    f = np.sum(np.where(m, np.logaddexp(0.0, zt) - s * zt, 0.0), axis=1)
    f = f + rho * np.sum(((u - u_mean)[None, :] + steps[:, None] * d) ** 2, axis=1)
    ok = f <= f[-1] + 1e-4 * steps * (g @ d) + 1e-6 * (abs(f[-1]) + 1.0)
    t = float(steps[int(np.argmax(ok))])
    if t > 0:
        return u + t * d, t
    vv = np.sum(np.where(m, np.sum(V * V, axis=1), 0.0))
    return u - g / (0.25 * vv + 2.0 * rho), 0.0


def _ref_iterate(u, V, c, s, m, u_mean, rho, steps, num):
    taken = []
    for _ in range(num):
        u, t = _ref_step(u, V, c, s, m, u_mean, rho, steps)
        taken.append(t)
    return u, taken


def _ref_hessian(u, V, c, m, rho):
    p = 1.0 / (1.0 + np.exp(-(V @ u + c)))
    return (V * (m * p * (1.0 - p))[:, None]).T @ V + 2.0 * rho * np.eye(u.shape[0])


@functools.cache
def _separable():
    """40 items, rank 3, separable 0/1 scores, a non-zero prior centre."""
    f = _item_factors(jax.random.key(8))
    V, c, um = (np.asarray(a, np.float64) for a in f)
    s = (V[:, 0] > 0).astype(np.float64)
    return f, V, c, um, s


def _mask(kind, n):
    return np.ones(n, bool) if kind == "all" else np.arange(n) % 3 != 0


def _blocked_fn(f, s, m, B):
    """``block_fn`` over items in blocks of ``B`` (the last block padded, unobserved)."""
    n = f.V.shape[0]
    s, m = jnp.asarray(s, jnp.float32), jnp.asarray(m)

    def block_fn(k):
        st = k * B
        pad = lambda x: jnp.concatenate([x, jnp.zeros((B,) + x.shape[1:], x.dtype)])  # noqa: E731
        sl = lambda x: jax.lax.dynamic_slice_in_dim(pad(x), st, B)  # noqa: E731
        return sl(f.V), sl(f.c), sl(s), sl(m) & ((st + jnp.arange(B)) < n)

    return block_fn, -(-n // B)


_refit = jax.jit(fz.refit_row, static_argnames=("num_newton", "line_search"))


# --------------------------------------------------- which step is accepted
# (mask, rho, start, the first offline step, the first online step): a far start on
# separable data makes the full Newton step overshoot; the cases cover the full step, an
# intermediate trial and the majorization step, with the prior weak and not so weak.
_CASES = [
    ("all", 1e-4, (-30.0, 40.0, 10.0), 0.0, 0.0),
    ("all", 0.05, (-30.0, 40.0, 10.0), 0.5, 0.0),
    ("third", 0.05, (-8.0, 6.0, 3.0), 0.5, 0.0),
    ("all", 1e-4, (-8.0, 6.0, 3.0), 0.25, 0.0),
    ("third", 1e-4, (-30.0, 40.0, 10.0), 2.0**-6, 0.0),
    ("third", 0.5, (-8.0, 6.0, 3.0), 1.0, 1.0),
]


@pytest.mark.parametrize("mask,rho,u0,t_off,t_on", _CASES)
def test_a_newton_step_takes_the_largest_armijo_trial_else_the_majorization_step(
        mask, rho, u0, t_off, t_on):
    """``update_model_factors`` (trials 1, 1/2, ..., 1/64, 0), ``refit_row`` (1, 0) and
    the streamed refit (both) take the step the documented rule picks: the largest trial
    with sufficient decrease of the row objective, prior ``rho ||u - u_mean||^2``
    included, else the gradient step ``-g / (vv_obs / 4 + 2 rho)``."""
    f, V, c, um, s = _separable()
    m = _mask(mask, V.shape[0])
    u0 = np.asarray(u0)
    want_off, (t,) = _ref_iterate(u0, V, c, s, m, um, rho, OFFLINE_STEPS, 1)
    assert t == t_off  # the case exercises what it says
    want_on, (t,) = _ref_iterate(u0, V, c, s, m, um, rho, ONLINE_STEPS, 1)
    assert t == t_on
    tol = dict(rtol=2e-4, atol=2e-4)
    u, _ = fz.update_model_factors(f, s[None], m[None], u0[None], rho, num_newton=1)
    np.testing.assert_allclose(np.asarray(u[0]), want_off, **tol)
    S, Mk, U0 = jnp.asarray(s, jnp.float32), jnp.asarray(m), jnp.asarray(u0, jnp.float32)
    got = _refit(f, S, Mk, U0, jnp.float32(rho))
    np.testing.assert_allclose(np.asarray(got), want_on, **tol)
    got = _refit(f, S, Mk, U0, jnp.float32(rho), line_search=fz._LINE_SEARCH_STEPS)
    np.testing.assert_allclose(np.asarray(got), want_off, **tol)
    block_fn, nb = _blocked_fn(f, s, m, 16)
    for online, want in ((False, want_off), (True, want_on)):
        got = fz.update_model_factor_blocked(block_fn, nb, U0, f.u_mean, rho, 1,
                                             return_hessian=False, online=online)
        np.testing.assert_allclose(np.asarray(got), want, **tol)


def test_num_newton_steps_are_taken_and_the_defaults_are_three_and_one():
    """``num_newton`` safeguarded steps, each from the last (``update_model_factors``
    by default 3, ``refit_row`` by default 1), and the Hessian is the objective's at the
    returned factor (``2 rho`` on the diagonal, the prior centre ``u_mean``)."""
    f, V, c, um, s = _separable()
    m = _mask("third", V.shape[0])
    rho, u0 = 0.05, np.asarray([-8.0, 6.0, 3.0])
    tol = dict(rtol=5e-4, atol=5e-4)
    for num in (1, 2, 3):
        want, taken = _ref_iterate(u0, V, c, s, m, um, rho, OFFLINE_STEPS, num)
        u, H = fz.update_model_factors(f, s[None], m[None], u0[None], rho, num_newton=num)
        np.testing.assert_allclose(np.asarray(u[0]), want, **tol)
        np.testing.assert_allclose(np.asarray(H[0]), _ref_hessian(want, V, c, m, rho),
                                   rtol=1e-3, atol=1e-4)
    assert taken == [0.5, 0.5, 1.0]
    u, _ = fz.update_model_factors(f, s[None], m[None], u0[None], rho)
    np.testing.assert_allclose(np.asarray(u[0]), want, **tol)  # the default: 3 steps
    S, Mk = jnp.asarray(s, jnp.float32), jnp.asarray(m)
    U0 = jnp.asarray(u0, jnp.float32)
    want1, _ = _ref_iterate(u0, V, c, s, m, um, rho, ONLINE_STEPS, 1)
    want2, _ = _ref_iterate(u0, V, c, s, m, um, rho, ONLINE_STEPS, 2)
    assert np.abs(want2 - want1).max() > 0.1
    np.testing.assert_allclose(np.asarray(fz.refit_row(f, S, Mk, U0, rho)), want1, **tol)
    got = _refit(f, S, Mk, U0, jnp.float32(rho), num_newton=2)
    np.testing.assert_allclose(np.asarray(got), want2, **tol)


# ------------------------------------------------ streamed equals whole row
@pytest.mark.parametrize("B", [1, 6, 40, 64])
def test_streamed_refit_equals_the_whole_row_for_any_block_size_and_mask(B):
    """Blocks of one item, blocks that do not divide the items, one block, one block
    larger than the row: the streamed refit equals ``update_model_factors`` (and, online,
    ``refit_row``) on random, full and single-item masks, soft targets included."""
    f = _item_factors(jax.random.key(3))
    n, r = f.V.shape
    rng = np.random.default_rng(B)
    S = rng.uniform(size=(3, n)).astype(np.float32)
    S[1] = (S[1] < 0.5).astype(np.float32)
    M = np.stack([rng.uniform(size=n) < 0.4, np.ones(n, bool), np.arange(n) == 17])
    U0 = rng.normal(size=(3, r)).astype(np.float32)
    rho = 0.3
    u_ref, H_ref = fz.update_model_factors(f, S, M, U0, rho, num_newton=2)
    for i in range(3):
        block_fn, nb = _blocked_fn(f, S[i], M[i], B)
        u, H = fz.update_model_factor_blocked(block_fn, nb, U0[i], f.u_mean, rho, 2)
        np.testing.assert_allclose(np.asarray(u), np.asarray(u_ref[i]), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(H), np.asarray(H_ref[i]), rtol=1e-4, atol=1e-5)
        u = fz.update_model_factor_blocked(block_fn, nb, U0[i], f.u_mean, rho, 2,
                                           return_hessian=False, online=True)
        want = _refit(f, jnp.asarray(S[i]), jnp.asarray(M[i]), jnp.asarray(U0[i]),
                      jnp.float32(rho), num_newton=2)
        np.testing.assert_allclose(np.asarray(u), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_trial_sums_at_a_majorization_step_are_the_sums_at_the_returned_factor():
    """When no trial passes, the streamed refit moves by the majorization step, and the
    ``trial_sums`` it returns are those at that step (not at the rejected zero trial)."""
    f, V, c, um, s = _separable()
    m = _mask("all", V.shape[0])
    rho, u0 = 0.05, jnp.asarray([-30.0, 40.0, 10.0])
    _, (t,) = _ref_iterate(np.asarray(u0, np.float64), V, c, s, m, um, rho, ONLINE_STEPS, 1)
    assert t == 0.0
    block_fn, nb = _blocked_fn(f, s, m, 16)

    def sums(z, blk):
        return jnp.sum(jnp.where(blk[3][None, :], jax.nn.sigmoid(z), 0.0), axis=1)

    u, total = fz.update_model_factor_blocked(block_fn, nb, u0, f.u_mean, rho, 1,
                                              return_hessian=False, online=True,
                                              trial_sums=sums)
    assert np.abs(np.asarray(u) - np.asarray(u0)).max() > 1e-2  # it moved
    want = jnp.sum(jnp.where(jnp.asarray(m), jax.nn.sigmoid(f.V @ u + f.c), 0.0))
    np.testing.assert_allclose(float(total), float(want), rtol=1e-4)


def test_the_armijo_rule_wants_sufficient_decrease_within_a_rounding_slack():
    """A trial is accepted when ``f(t) <= f(0) + 1e-4 t g.d`` up to a slack of ``1e-6
    (|f(0)| + 1)`` for float32 rounding: a decrease smaller than ``1e-4 t |g.d|`` is not
    enough, a rise within the slack is not a failure."""
    g, d = jnp.asarray([10.0]), jnp.asarray([-10.0])  # g.d = -100
    steps = jnp.asarray([1.0, 0.5, 0.0])
    # 1: decreases by 0.005 < 0.01 (rejected); 0.5: by 0.006 > 0.005 (accepted)
    f = jnp.asarray([-0.005, -0.006, 0.0])
    assert float(fz._armijo_step(f, g, d, steps)) == 0.5
    f = jnp.asarray([0.02, -0.004, 0.0])  # neither passes: the zero step
    assert float(fz._armijo_step(f, g, d, steps)) == 0.0
    # near the optimum (g.d = -1 at f(0) = 1000, slack ~1e-3): a rise of 5e-4 passes
    g, d = jnp.asarray([1.0]), jnp.asarray([-1.0])
    f = jnp.asarray([1000.0005, 1000.0, 1000.0])
    assert float(fz._armijo_step(f, g, d, steps)) == 1.0
    f = jnp.asarray([1000.003, 1000.0, 1000.0])  # beyond the slack: the next trial
    assert float(fz._armijo_step(f, g, d, steps)) == 0.5


# --------------------------------------------------------- argument checks
@pytest.mark.parametrize("steps", [(1.0, 1.0, 0.0), (1.0, 0.5, 0.5, 0.0), (0.0,)])
def test_trial_steps_must_strictly_decrease_with_a_positive_one_first(steps):
    f = _item_factors(jax.random.key(0))
    with pytest.raises(ValueError, match=r"line_search: expected decreasing positive"):
        fz.refit_row(f, jnp.ones(40), jnp.ones(40, bool), jnp.zeros(3), 1.0,
                     line_search=steps)


def test_a_derivative_hook_of_the_wrong_length_is_refused_naming_it():
    f = _item_factors(jax.random.key(0))
    block_fn, nb = _blocked_fn(f, np.ones(40), np.ones(40, bool), 16)
    r = f.V.shape[1]
    with pytest.raises(ValueError, match=r"^data_grad_hess: expected \(g, H, count, vv\), "
                                         r"got 3 elements"):
        fz.update_model_factor_blocked(block_fn, nb, jnp.zeros(r), f.u_mean, 1.0, 1,
                                       data_grad_hess=(jnp.zeros(r), jnp.eye(r), 40))


# ------------------------------------------------------------ held-out cells
def test_holdout_mask_holds_out_every_observed_cell_but_each_lines_first():
    """With ``fraction`` 1 every observed cell is held out except the first observed one
    of each row and of each column (so every row and column keeps a training cell);
    with ``fraction`` 0 none is."""
    M = np.asarray([[0, 1, 1, 0, 1],
                    [1, 1, 0, 1, 1],
                    [0, 0, 1, 1, 1],
                    [1, 1, 1, 1, 0]], bool)
    first_row = M & (np.cumsum(M, 1) == 1)
    first_col = M & (np.cumsum(M, 0) == 1)
    H = np.asarray(fz.holdout_mask(jax.random.key(0), M, 1.0))
    np.testing.assert_array_equal(H, M & ~first_row & ~first_col)
    train = M & ~H
    assert train.any(1).all() and train.any(0).all()
    assert not np.asarray(fz.holdout_mask(jax.random.key(0), M, 0.0)).any()


def test_selection_averages_independent_held_out_draws_over_repeats():
    """With ``num_repeats = 2`` the held-out curve is the mean of the two repeats' curves,
    each on its own held-out draw (``fold_in(key, k)``)."""
    rng = np.random.default_rng(0)
    S = (rng.uniform(size=(12, 9)) < 0.6).astype(np.float32)
    M = np.ones(S.shape, bool)
    key, rhos = jax.random.key(3), (0.5, 4.0)
    kw = dict(num_steps=10, learning_rate=0.1)
    sel = fz.select_factors(key, S, M, ranks=(1,), rhos=rhos, holdout_fraction=0.3,
                            num_repeats=2, **kw)
    per = []
    for k in range(2):
        kk = jax.random.fold_in(key, k)
        held = fz.holdout_mask(jax.random.fold_in(kk, 0), M, 0.3)
        row = []
        for rho in rhos:
            res = fz.fit_factors(jax.random.fold_in(kk, 1), S, M & ~held, rank=1, rho_u=rho,
                                 rho_v=rho, **kw)
            row.append(float(fz.heldout_log_loss(res.U, res.item_factors, S, held)))
        per.append(row)
    assert per[0] != per[1]
    np.testing.assert_allclose(sel.heldout_loss[0], np.mean(per, axis=0), rtol=1e-4)
    assert sel.status.shape == (1, 2, 2)


def test_refits_ignore_whatever_unobserved_scores_hold():
    """``scores`` are ignored where ``mask`` is False, NaN included, in the online refit
    and in the streamed one."""
    f, V, c, um, s = _separable()
    m = _mask("third", V.shape[0])
    junk = np.where(m, s, np.nan)
    u0 = jnp.asarray([-8.0, 6.0, 3.0])
    want = _refit(f, jnp.asarray(s, jnp.float32), jnp.asarray(m), u0, jnp.float32(0.05))
    got = fz.refit_row(f, jnp.asarray(junk, jnp.float32), jnp.asarray(m), u0, 0.05)
    assert np.isfinite(np.asarray(want)).all()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    block_fn, nb = _blocked_fn(f, junk, m, 16)
    got = fz.update_model_factor_blocked(block_fn, nb, u0, f.u_mean, 0.05, 1,
                                         return_hessian=False, online=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_streamed_line_search_centres_the_prior_on_u_mean():
    """The streamed refit's trial objective has the prior ``rho ||u - u_mean||^2``: with a
    prior centre far from the origin it takes the step the whole-row refit takes."""
    f, V, c, um, s = _separable()
    f = f._replace(u_mean=jnp.asarray([6.0, -6.0, 6.0]))
    m = _mask("all", V.shape[0])
    u0 = jnp.asarray([-8.0, 6.0, 3.0])
    block_fn, nb = _blocked_fn(f, s, m, 16)
    for rho in (0.05, 0.5, 2.0):
        want, _ = fz.update_model_factors(f, s[None], m[None], u0[None], rho, num_newton=1)
        got = fz.update_model_factor_blocked(block_fn, nb, u0, f.u_mean, rho, 1,
                                             return_hessian=False)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want[0]), rtol=1e-4, atol=1e-4)


def test_empirical_prior_of_training_factors_that_do_not_vary():
    """All training rows equal: the documented tiny ridge (``1e-12`` here) is the
    variance, the factors are stretched by ``1e6`` and the predictions are unchanged."""
    U = jnp.tile(jnp.array([[0.3, -1.0]], jnp.float32), (5, 1))
    V = jax.random.normal(jax.random.key(0), (4, 2))
    f = fz.ItemFactors(V, jnp.zeros(4), U.mean(0))
    fw, Uw = fz.empirical_prior(U, f)
    np.testing.assert_allclose(np.asarray(Uw[0]), [0.3e6, -1.0e6], rtol=1e-4)
    np.testing.assert_allclose(np.asarray(fw.V), np.asarray(V) * 1e-6, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(fw.u_mean), np.asarray(Uw[0]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(Uw @ fw.V.T), np.asarray(U @ V.T), atol=1e-6)


def test_the_row_objectives_derivatives_are_the_closed_form_ones():
    """``_row_grad_hess`` is the gradient and Hessian of ``_row_objective`` (the objective
    ``benchmarks/bench_online_refit.py`` measures refits by), soft targets and a mask."""
    f = _item_factors(jax.random.key(3))
    n, r = f.V.shape
    rng = np.random.default_rng(4)
    s = jnp.asarray(rng.uniform(size=n), jnp.float32)
    m = jnp.asarray(rng.uniform(size=n) < 0.5)
    u = jnp.asarray(rng.normal(size=r), jnp.float32)
    obj = functools.partial(fz._row_objective, V=f.V, c=f.c, s=s, m=m, u_mean=f.u_mean,
                            rho=0.7)
    g, H = fz._row_grad_hess(u, f.V, f.c, s, m, f.u_mean, 0.7)
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(obj)(u)), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(H), np.asarray(jax.hessian(obj)(u)), rtol=1e-4,
                               atol=1e-5)
    d = np.asarray(u - f.u_mean, np.float64)
    bce = float(fz.masked_bce(f.V @ u + f.c, s, m))
    assert float(obj(u)) == pytest.approx(bce + 0.7 * d @ d, rel=1e-5)


def test_select_factors_never_chooses_a_fit_that_failed(monkeypatch):
    """A fit that hit a non-finite value keeps its last finite factors (finite held-out
    loss), but its status says it failed: the grid scores it ``inf`` (so the selection,
    the grid's minimiser, never takes it), however good its held-out loss looks. The fit
    is replaced by one whose grid point ``rho = 1`` fails with the better factors."""
    real = fz.fit_factors

    def fit(key, scores, mask, *, rho_u, **kw):
        res = real(key, scores, mask, rho_u=rho_u, **kw)
        # the failed fit (rho 1) predicts the held-out cells perfectly; rho 10 does not
        good = jnp.where(scores > 0.5, 20.0, -20.0)
        failed = rho_u < 2.0
        U = jnp.where(failed, jnp.ones_like(res.U), res.U)
        V = jnp.where(failed, good.T[:, :1] * jnp.ones_like(res.item_factors.V),
                      res.item_factors.V)
        return res._replace(U=U, item_factors=res.item_factors._replace(V=V),
                            status=jnp.where(failed, fz.STATUS_NONFINITE, res.status))

    monkeypatch.setattr(fz, "fit_factors", fit)
    S = jnp.tile((jnp.arange(12) % 2).astype(jnp.float32), (8, 1))  # every row the same
    grid = functools.partial(fz._heldout_grid.__wrapped__, rank=1, num_steps=20,
                             learning_rate=jnp.float32(0.05))
    held = fz.holdout_mask(jax.random.key(3), jnp.ones_like(S, bool), 0.3)
    ll, _, st = grid(jax.random.key(0), S, jnp.ones_like(S, bool), held,
                     jnp.asarray([1.0, 10.0]), jnp.asarray([1.0, 10.0]))
    assert np.asarray(st).tolist() == [fz.STATUS_NONFINITE, fz.STATUS_OK]
    assert np.isinf(float(ll[0])) and np.isfinite(float(ll[1]))
    # the failed fit's factors would have won by their held-out loss
    U = jnp.ones((8, 1))
    V = jnp.where(S[0] > 0.5, 20.0, -20.0)[:, None]
    f = fz.ItemFactors(V, jnp.zeros(12), jnp.ones(1))
    assert float(fz.heldout_log_loss(U, f, S, held)) < float(ll[1])
