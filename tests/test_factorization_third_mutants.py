"""Gaps found by a third mutation review of the factorization kernels: each test pins a
behaviour that a plausible one-line bug changed without any other test failing (the
offline Adam schedule from the peak learning rate down to 2% of it, a fit with nothing
observed, the streamed empty row when the derivative hook is given, the argument checks'
messages, the selection's progress line and the Armijo rule's absolute slack). References
are computed another way, in float64 NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_factorization import _item_factors
from test_factorization_deep_mutants import _blocked_fn
from test_factorization_mutants import _np_sigmoid, small  # noqa: F401 (a fixture)

from jaxeval import _factorization as fz


# ------------------------------------------------------------------ offline fit
def _np_adam_fit(U, V, c, S, M, rho_u, rho_v, lr, num_steps):
    """Full-batch Adam (optax defaults: b1 0.9, b2 0.999, eps 1e-8) on the objective per
    observed cell, the step size cosine-decayed from ``lr`` at step 0 to 2% of it:
    ``lr (0.02 + 0.98 (1 + cos(pi t / num_steps)) / 2)`` (BUILD_NOTES), in float64."""
    p = [np.asarray(a, np.float64) for a in (U, V, c)]
    n_obs = max(int(M.sum()), 1)
    mom = [np.zeros_like(a) for a in p]
    var = [np.zeros_like(a) for a in p]
    for t in range(num_steps):
        U, V, c = p
        dz = np.where(M, _np_sigmoid(U @ V.T + c) - S, 0.0) / n_obs
        g = [dz @ V + 2 * rho_u * U / n_obs, dz.T @ U + 2 * rho_v * V / n_obs, dz.sum(0)]
        lr_t = lr * (0.02 + 0.98 * 0.5 * (1.0 + np.cos(np.pi * t / num_steps)))
        for i in range(3):
            mom[i] = 0.9 * mom[i] + 0.1 * g[i]
            var[i] = 0.999 * var[i] + 0.001 * g[i] ** 2
            mh = mom[i] / (1 - 0.9 ** (t + 1))
            vh = var[i] / (1 - 0.999 ** (t + 1))
            p[i] = p[i] - lr_t * mh / (np.sqrt(vh) + 1e-8)
    return p


def test_adam_steps_start_at_the_peak_learning_rate_and_decay_to_two_percent(small):  # noqa: F811
    """``learning_rate`` is the peak: the first step takes it, and the cosine decay ends at
    2% of it, not at 0 (four steps, compared with a float64 Adam from the same start,
    which ``learning_rate=0`` returns)."""
    S, M = small
    key, kw = jax.random.key(3), dict(rank=2, rho_u=0.7, rho_v=1.3, num_steps=4)
    start = fz.fit_factors(key, S, M, learning_rate=0.0, **kw)
    res = fz.fit_factors(key, S, M, learning_rate=0.3, **kw)
    want = _np_adam_fit(start.U, start.item_factors.V, start.item_factors.c,
                        np.where(M, S, 0.0), M, 0.7, 1.3, 0.3, 4)
    for got, w in zip((res.U, res.item_factors.V, res.item_factors.c), want):
        np.testing.assert_allclose(np.asarray(got), w, rtol=0, atol=2e-4)


def test_a_fit_with_nothing_observed_is_no_failure():
    """With no observed cell the objective is the penalty alone (per observed cell with
    the count floored at 1): the run meets no non-finite value, so the status is OK and
    the loss finite; the factors shrink towards zero."""
    S = np.zeros((5, 4), np.float32)
    res = fz.fit_factors(jax.random.key(0), S, np.zeros(S.shape, bool), rank=2, rho_u=1.0,
                         rho_v=1.0, learning_rate=0.05, num_steps=20, num_records=5)
    assert int(res.status) == fz.STATUS_OK
    assert np.isfinite(float(res.final_loss)) and np.isfinite(np.asarray(res.loss_history)).all()
    want = float(jnp.sum(res.U**2) + jnp.sum(res.item_factors.V**2))
    np.testing.assert_allclose(float(res.final_loss), want, rtol=1e-5)


# ------------------------------------------------------------------ online refit
def test_streamed_empty_row_with_the_derivative_hook_returns_u_mean_exactly():
    """A row with no observed item gives ``u_mean`` exactly also when the caller passes
    the derivatives (count 0) instead of the first pass."""
    f = _item_factors(jax.random.key(0))
    n, r = f.V.shape
    block_fn, nb = _blocked_fn(f, np.ones(n), np.zeros(n, bool), 16)
    u0 = jnp.asarray([2.0, -1.0, 0.5])
    hook = (jnp.zeros(r), jnp.zeros((r, r)), 0, 0.0)
    for online in (False, True):
        u = fz.update_model_factor_blocked(block_fn, nb, u0, f.u_mean, 1.0, 1,
                                           return_hessian=False, data_grad_hess=hook,
                                           online=online)
        np.testing.assert_array_equal(np.asarray(u), np.asarray(f.u_mean))


def test_a_derivative_hook_with_too_many_elements_is_refused_naming_it():
    f = _item_factors(jax.random.key(0))
    n, r = f.V.shape
    block_fn, nb = _blocked_fn(f, np.ones(n), np.ones(n, bool), 16)
    with pytest.raises(ValueError, match=r"^data_grad_hess: expected \(g, H, count, vv\), "
                                         r"got 5 elements"):
        fz.update_model_factor_blocked(block_fn, nb, jnp.zeros(r), f.u_mean, 1.0, 1,
                                       data_grad_hess=(jnp.zeros(r), jnp.eye(r), n, 1.0, 0))


def test_trial_sums_without_a_newton_step_are_refused_naming_num_newton():
    """``trial_sums`` rides on the last Newton step: one step is enough, none is refused
    with a message naming the argument and its value."""
    f = _item_factors(jax.random.key(0))
    n, r = f.V.shape
    block_fn, nb = _blocked_fn(f, np.ones(n), np.ones(n, bool), 16)
    sums = lambda z, blk: jnp.sum(z, axis=1)  # noqa: E731
    with pytest.raises(ValueError, match=r"^trial_sums needs num_newton >= 1, got num_newton=0"):
        fz.update_model_factor_blocked(block_fn, nb, jnp.zeros(r), f.u_mean, 1.0, 0,
                                       trial_sums=sums)
    u, s = fz.update_model_factor_blocked(block_fn, nb, jnp.zeros(r), f.u_mean, 1.0, 1,
                                          return_hessian=False, trial_sums=sums)
    assert u.shape == (r,) and np.isfinite(float(s))


def test_trial_steps_refused_are_echoed_as_given():
    """The message names the argument and quotes the value the caller gave."""
    f = _item_factors(jax.random.key(0))
    with pytest.raises(ValueError, match=r"^line_search: expected decreasing positive trial "
                                         r"steps ending with 0\.0, e\.g\. \(1\.0, 0\.5, 0\.0\); "
                                         r"got \(1, 2, 0\)$"):
        fz.refit_row(f, jnp.ones(40), jnp.ones(40, bool), jnp.zeros(3), 1.0,
                     line_search=(1, 2, 0))


# ------------------------------------------------------------------ selection
def test_selection_progress_reports_each_ranks_best_heldout_loss(small):  # noqa: F811
    """``on_rank`` gets one line per rank, with that rank's *best* (smallest) held-out
    log loss over the ``rhos`` grid."""
    S, M = small
    lines = []
    sel = fz.select_factors(jax.random.key(2), S, M, ranks=(1, 2), rhos=(0.01, 30.0),
                            holdout_fraction=0.3, num_steps=15, learning_rate=0.1,
                            on_rank=lines.append)
    assert len(lines) == 2
    for a, line in enumerate(lines):
        assert line.startswith(f"rank {a + 1} ({a + 1} of 2): best held-out log loss ")
        best = float(line.rsplit(" ", 1)[1])
        assert abs(np.ptp(sel.heldout_loss[a])) > 1e-3  # the grid's losses differ
        assert best == pytest.approx(float(np.min(sel.heldout_loss[a])), abs=1e-4)


# ------------------------------------------------------------------ Armijo rule
def test_the_armijo_slack_has_an_absolute_part_near_a_zero_objective():
    """The rounding slack is ``1e-6 (|f(0)| + 1)``: with the objective at ~0 (a fit that
    is near exact) a trial that is up by less than ``1e-6`` still passes."""
    steps = jnp.asarray([1.0, 0.0])
    g, d = jnp.zeros(2), jnp.zeros(2)
    assert float(fz._armijo_step(jnp.asarray([5e-7, 0.0]), g, d, steps)) == 1.0
    assert float(fz._armijo_step(jnp.asarray([2e-6, 0.0]), g, d, steps)) == 0.0
