"""Gaps a third mutation review of the ridge maps (``anchors/_ridge.py``) and the anchor
selection (``anchors/_select.py``) found: each test fails on a plausible bug the rest of
the suite let through, and checks documented behaviour against a reference computed
another way."""

import jax.numpy as jnp
import numpy as np
import pytest
from test_anchor_intervals_select_mutants import _ridge_case
from test_anchors_reference import _loo_refits

from jaxeval.anchors import fit_ridge, greedy_ridge_anchors


# ------------------------------------------------------------------------- ridge
@pytest.mark.parametrize("c", [1e-2, 1e-6])
@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_fit_ridge_strength_is_relative_at_any_feature_scale(c, lam):
    """``alpha = lam * mean diag(Xc^T Xc)``: scaling the features by ``c`` scales the
    slopes by ``1 / c`` and leaves the intercept, however small the features (no floor
    at 1 on the scale, no absolute eigenvalue cut-off that drops small features)."""
    x, y, _, _ = _ridge_case()
    ref = fit_ridge(x, y, jnp.asarray(lam))
    got = fit_ridge(x * c, y, jnp.asarray(lam))
    np.testing.assert_allclose(np.asarray(got.w) * c, np.asarray(ref.w), rtol=2e-3, atol=1e-5)
    np.testing.assert_allclose(float(got.b), float(ref.b), rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(("seed", "lam"), [(0, 1.0), (4, 1.0), (4, 10.0)])
def test_greedy_ridge_follows_refitted_leave_one_out_error_under_a_strong_penalty(seed, lam):
    """Every one of six greedy steps (not only the first, where the hat update is a
    projection) picks the item whose addition gives the smallest leave-one-out error of
    ridge maps refitted with the search's fixed penalty at a strong ``lam`` (float64
    refits; each step's winner leads by at least 0.05 %, far above float32 rounding)."""
    rng = np.random.default_rng(seed)
    m, n, k = 30, 8, 6
    s = (rng.random((m, n)) < rng.uniform(0.2, 0.8, n)).astype(np.float32)
    y = (s @ rng.normal(0, 0.3, n) + 0.1 * rng.normal(size=m)).astype(np.float32)
    alpha = lam * np.mean(((s - s.mean(0)) ** 2).sum(0))  # the search's fixed penalty
    got = greedy_ridge_anchors(jnp.asarray(s), jnp.asarray(y), k, lam).tolist()
    chosen = []
    for step in range(k):
        cand = [j for j in range(n) if j not in chosen]
        loo = np.array([np.mean(_loo_refits(s[:, chosen + [j]], y, alpha) ** 2) for j in cand])
        best = np.sort(loo)
        assert best[1] - best[0] > 5e-4 * best[0], step  # a clear winner at each step
        chosen.append(cand[int(np.argmin(loo))])
    assert got == chosen


def test_each_refinement_step_fits_its_proxy_with_its_own_key():
    """As the docstring says: step ``t`` fits with ``fold_in(key, t)``. A proxy that
    predicts one number drawn from its key makes each step's validation MSE a function
    of that key alone (the same key at every step gave one MSE throughout)."""
    import jax
    import jax.numpy as jnp

    from jaxeval.anchors import refine_anchors

    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.random((30, 12)) < 0.5, jnp.float32)
    y = s.mean(axis=1)

    def fit_proxy(key, x_tr, y_tr):
        c = jax.random.uniform(key)
        return lambda xi: c + 0.0 * jnp.sum(xi)

    key = jax.random.key(7)
    _, trace = refine_anchors(key, jnp.arange(4), s[:20], y[:20], s[20:], y[20:],
                              fit_proxy, num_swaps=3)
    want = [float(jnp.mean((jax.random.uniform(jax.random.fold_in(key, t)) - y[20:]) ** 2))
            for t in range(3)]
    np.testing.assert_allclose(np.asarray(trace.val_mse), want, rtol=1e-6)
    assert len(set(np.round(want, 6))) == 3  # (the steps' keys differ)


def test_ridge_strengths_that_are_not_finite_and_non_negative_are_refused():
    """A NaN strength fitted the intercept alone (w = 0) and fit_ridge_validated could
    report it as the strength chosen; a negative one is no ridge. Traced strengths (jit,
    vmap over a grid) are not looked at."""
    import jax
    import jax.numpy as jnp

    from jaxeval.anchors import fit_ridge, fit_ridge_validated

    x = np.random.default_rng(0).random((20, 3)).astype(np.float32)
    y = x.sum(axis=1)
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="lam: ridge strengths must be finite and >= 0"):
            fit_ridge(x, y, bad)
    with pytest.raises(ValueError, match="lams: ridge strengths must be finite and >= 0"):
        fit_ridge_validated(x, y, x, y, [float("nan"), 0.1])
    grid = jax.vmap(lambda lam: fit_ridge(x, y, lam).b)(jnp.array([0.1, 1.0]))
    assert np.all(np.isfinite(np.asarray(grid)))
