"""Mutation review of the low-rank difference estimator, the IRT anchor predictions and
the looped linear algebra: the validated low-rank map is the best of the *whole* rank x
``lam`` grid (full rank included) and reports that map's own validation MSE; an external
target is calibrated by least squares on the training models only; the default basis
keeps the largest rank tried; the IRT fits honour every setting and the documented
default prior strength; the looped helpers refuse a vector as a matrix and promote
integers to JAX's default float (float64 under x64), as ``jnp.linalg`` does."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _seqlinalg as sl
from jaxeval.anchors._irt import (
    IRTConfig,
    fit_item_factors,
    irt_item_predictions,
    pirt_estimate,
)
from jaxeval.anchors._lowrank import (
    LOWRANK_LAMS,
    LOWRANK_RANKS,
    _linear_for,
    fit_lowrank_validated,
    lowrank_basis,
)


# -------------------------------------------------------------------- low-rank
def _rank2(seed=0, m=90, n=24, noise=0.01):
    """Smooth rank-2 scores in [0, 1] with a strong second direction, a few anchors."""
    rng = np.random.default_rng(seed)
    u, v = rng.normal(size=(m, 2)), rng.normal(size=(2, n))
    s = 0.5 + 0.2 * np.tanh(u @ v / 2) + noise * rng.normal(size=(m, n))
    a = np.array([1, 4, 9, 13, 17, 22])
    return np.clip(s, 0, 1).astype(np.float32), a


def _grid_reference(basis, a, x_tr, y_tr, x_val, y_val, external):
    """Every (rank, lam) of the documented grid by hand: map (calibrated by ordinary
    least squares on the training models when external) and its validation MSE."""
    R = basis.V.shape[1]
    out = []
    for r, lam in itertools.product(sorted({min(r, R) for r in LOWRANK_RANKS}), LOWRANK_LAMS):
        lin = _linear_for(basis, jnp.asarray(a), jnp.asarray(r), jnp.asarray(lam, jnp.float32))
        w, b = np.asarray(lin.w, np.float64), float(lin.b)
        if external:
            est = x_tr.astype(np.float64) @ w + b
            slope, icpt = np.polyfit(est, y_tr.astype(np.float64), 1)
            w, b = slope * w, slope * b + icpt
        out.append((float(np.mean((x_val @ w + b - y_val) ** 2)), w, b, r, lam))
    return out


@pytest.mark.parametrize("external", [False, True])
def test_lowrank_validated_is_the_best_of_the_whole_grid(external):
    """The returned map is the grid point with the lowest validation MSE over *all*
    rank x lam pairs (the full rank included) and the MSE returned is that map's own
    mean squared validation error. With an external target the map is ``a * yhat + b``
    fitted by least squares on the training models (the validation models only choose);
    without one it is the uncalibrated difference estimator."""
    s, a = _rank2()
    rng = np.random.default_rng(1)
    y = s.mean(1)
    if external:  # a target that is not the row mean: calibration matters
        y = (0.6 * y + 0.3 + 0.002 * rng.normal(size=y.shape)).astype(np.float32)
    basis = lowrank_basis(jnp.asarray(s[:50]), 2)
    x = s[:, a]
    args = (x[:50], y[:50], x[50:], y[50:])
    lin, mse = fit_lowrank_validated(basis, jnp.asarray(a), *(jnp.asarray(t) for t in args),
                                     external=external)
    ref = _grid_reference(basis, a, *args, external)
    best = min(ref, key=lambda t: t[0])
    # the planted data need the full rank 2 and little shrinkage: a grid that misses
    # (2, small lam) cannot reach the best error
    assert best[3] == 2 and best[4] <= 0.03
    assert min(t[0] for t in ref if t[3] == 1) > 1.5 * best[0]
    np.testing.assert_allclose(float(mse), best[0], rtol=2e-3)
    np.testing.assert_allclose(np.asarray(lin.w), best[1], rtol=2e-3, atol=1e-5)
    np.testing.assert_allclose(float(lin.b), best[2], rtol=2e-3, atol=1e-5)
    own = np.mean((x[50:] @ np.asarray(lin.w) + float(lin.b) - y[50:]) ** 2)
    np.testing.assert_allclose(float(mse), own, rtol=1e-3)


def test_lowrank_basis_default_keeps_the_largest_rank_tried():
    """By default the basis keeps ``max(LOWRANK_RANKS)`` columns (clipped to
    ``min(m, n)``), so every rank of the grid can be validated."""
    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.random((40, 36)) < 0.5, jnp.float32)
    assert lowrank_basis(s).V.shape == (36, max(LOWRANK_RANKS))
    assert lowrank_basis(s[:10]).V.shape == (36, 10)


# ------------------------------------------------------------------------- IRT
def _irt_data():
    rng = np.random.default_rng(2)
    s = (rng.random((40, 14)) < rng.uniform(0.2, 0.9, 40)[:, None]).astype(np.float32)
    return jnp.asarray(s)


def test_pirt_default_prior_strength_is_one():
    """Documented default ``rho = 1.0`` for both the item predictions and p-IRT, and
    p-IRT is the row mean of the item predictions."""
    s = _irt_data()
    F = fit_item_factors(jax.random.key(0), s, IRTConfig(rank=2, num_steps=30))
    anchors = jnp.array([0, 5, 11])
    x = s[:6][:, anchors]
    preds = np.asarray(irt_item_predictions(F, anchors, x, 1.0))
    np.testing.assert_allclose(np.asarray(irt_item_predictions(F, anchors, x)), preds,
                               rtol=1e-6)
    np.testing.assert_allclose(np.asarray(pirt_estimate(F, anchors, x)), preds.mean(1),
                               rtol=1e-5)
    assert not np.allclose(np.asarray(pirt_estimate(F, anchors, x, 0.01)), preds.mean(1),
                           rtol=1e-4)


# -------------------------------------------------------------- looped linalg
def _re_shape(shape):
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


@pytest.mark.parametrize("f, arg", [
    (sl.svd_thin, jnp.ones(3)), (sl.eigh, jnp.ones(3)), (sl.svd_thin, jnp.float32(2.0))])
def test_looped_helpers_refuse_a_vector_or_scalar_naming_the_argument(f, arg):
    """A vector or scalar is not one matrix: refused naming ``a`` and its shape (not
    passed on to LAPACK, whose error names nothing)."""
    with pytest.raises(ValueError, match=rf"a must be one \[.\, .\] matrix \(vmap for a "
                       rf"batch\), got shape {_re_shape(arg.shape)}"):
        f(arg)
    with pytest.raises(ValueError, match=r"a must be one \[r, r\] matrix"):
        sl.solve(jnp.ones(3), jnp.ones(3))


def test_integers_promote_to_float64_under_x64_like_jnp_linalg():
    """Integer input is promoted as ``jnp.linalg`` does: to JAX's default float, which
    is float64 when x64 is enabled (not always float32)."""
    with jax.enable_x64(True):
        a = jnp.array([[2, 1], [1, 2]], jnp.int64)
        w, _ = sl.eigh(a)
        assert w.dtype == jnp.linalg.eigh(a)[0].dtype == jnp.float64
        assert sl.svd_thin(a)[1].dtype == jnp.float64
        x = sl.solve(a, jnp.array([1, 0]))
        assert x.dtype == jnp.float64
        np.testing.assert_allclose(x, [2 / 3, -1 / 3], rtol=1e-14)


# ---------------------------------------------------------- fixes the review found
@pytest.mark.parametrize("anchors, match", [
    ([1, 11, 12], r"anchors: item indices must lie in \[0, 12\)"),  # JAX would clamp 12
    ([1, 11, -1], r"anchors: item indices must lie in \[0, 12\)"),  # -1 is item 11 again
    ([1.0, 2.0], r"anchors: expected a 1-d array of integer item indices"),
    ([[1, 2]], r"anchors: expected a 1-d array of integer item indices"),
    ([1, 11, 11], r"anchors: expected distinct items"),
])
def test_lowrank_refuses_anchors_out_of_range_or_not_integer_by_name(anchors, match):
    """A concrete ``anchors`` out of ``[0, n)`` used to be clamped (an index past the end)
    or wrapped (a negative one, counting an item twice) without a word."""
    rng = np.random.default_rng(0)
    s = jnp.asarray(rng.random((30, 12)) < 0.5, jnp.float32)
    x = s[:, :3]
    with pytest.raises(ValueError, match=match):
        fit_lowrank_validated(lowrank_basis(s[:20], 4), anchors, x[:20], s[:20].mean(1),
                              x[20:], s[20:].mean(1))


def test_irt_integer_scores_keep_the_prior_strength():
    """0/1 scores given as integers (or bools) predict as the same scores in float: the
    prior strength is not cast to the scores' integer dtype (``rho = 0.5`` used to become
    0, the unregularised fit)."""
    s = _irt_data()
    F = fit_item_factors(jax.random.key(0), s, IRTConfig(rank=2, num_steps=30))
    anchors = jnp.array([0, 3, 7])
    x = s[:6][:, anchors]
    want = np.asarray(irt_item_predictions(F, anchors, x, 0.5))
    assert not np.allclose(want, np.asarray(irt_item_predictions(F, anchors, x, 0.0)),
                           atol=1e-3)
    for xi in (x.astype(jnp.int32), x.astype(bool)):
        got = irt_item_predictions(F, anchors, xi, 0.5)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(pirt_estimate(F, anchors, xi, 0.5)),
                                   want.mean(1), rtol=1e-6)


def test_ridge_on_a_constant_feature_has_zero_slope():
    """A feature equal on every training model carries no information: its slope is 0
    and the intercept the mean target, whatever its value (a float mean off by rounding
    used to leave a residue the relative penalty shrank with, and a slope read from it)."""
    from jaxeval.anchors import fit_ridge

    rng = np.random.default_rng(3)
    y = jnp.asarray(rng.random(30), jnp.float32)
    values = (1.0, 0.1, 0.7310586, 0.3, 0.9)
    # most of them the float32 mean of 30 copies misses by rounding
    assert sum(float(jnp.mean(jnp.full(30, c, jnp.float32))) != float(jnp.float32(c))
               for c in values) >= 3
    for c in values:
        x = jnp.full((30, 1), c, jnp.float32)
        lin = fit_ridge(x, y, jnp.asarray(1e-6))
        assert float(lin.w[0]) == 0.0
        np.testing.assert_allclose(float(lin.b), float(jnp.mean(y)), rtol=1e-6)
    # a constant column beside an informative one leaves the informative fit unchanged
    z = jnp.asarray(rng.random((30, 1)), jnp.float32)
    two = fit_ridge(jnp.concatenate([z, jnp.full((30, 1), 0.1, jnp.float32)], 1), 2 * z[:, 0],
                    jnp.asarray(1e-6))
    np.testing.assert_allclose(np.asarray(two.w), [2.0, 0.0], atol=1e-4)


def test_ridge_fits_of_integer_or_bool_scores_equal_the_float_ones():
    """0/1 scores given as integers or bools fit as the same scores in float (the
    constant-column centring once cast the centred features back to the input's dtype:
    every slope became 0)."""
    from jaxeval.anchors import fit_ridge, fit_ridge_validated, greedy_ridge_anchors
    from jaxeval.anchors._ridge import loo_ridge_residuals

    rng = np.random.default_rng(0)
    s = rng.random((60, 40)) < rng.uniform(0.2, 0.9, 60)[:, None]
    y = jnp.asarray(s.mean(1), jnp.float32)
    xf = jnp.asarray(s[:, :4], jnp.float32)
    want = fit_ridge(xf[:40], y[:40], jnp.asarray(1.0))
    assert np.abs(np.asarray(want.w)).min() > 0.01
    for x in (xf.astype(jnp.int32), xf.astype(bool)):
        got = fit_ridge(x[:40], y[:40], jnp.asarray(1.0))
        np.testing.assert_allclose(np.asarray(got.w), np.asarray(want.w), rtol=1e-5)
        np.testing.assert_allclose(float(got.b), float(want.b), rtol=1e-5)
        np.testing.assert_allclose(
            np.asarray(loo_ridge_residuals(x, y, jnp.asarray(1.0))),
            np.asarray(loo_ridge_residuals(xf, y, jnp.asarray(1.0))), rtol=1e-4, atol=1e-6)
        assert (greedy_ridge_anchors(x, y, 3, 1e-3).tolist()
                == greedy_ridge_anchors(xf, y, 3, 1e-3).tolist())
        _, lam, mse = fit_ridge_validated(x[:40], y[:40], x[40:], y[40:])
        _, lam_f, mse_f = fit_ridge_validated(xf[:40], y[:40], xf[40:], y[40:])
        np.testing.assert_allclose(float(mse), float(mse_f), rtol=1e-4)
