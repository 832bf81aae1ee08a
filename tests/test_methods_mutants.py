"""The anchor-method kernels of ``jaxeval.anchors._methods``, called directly on small
hand-built inputs: each map kind's exact formula in ``apply_map`` (gp-IRT's weight on the
anchor mean, the blend's calibrated p-IRT, the residual MLP's clipped base, the ensemble
mean), the shrunk ridge's prior and the two choices it makes on validation models, the
mix's average, the checkpoint rule of the validation paths (earliest best, chosen on the
given rows, per member), the external calibration and where it is fitted (training
models), the IRT and blend weights chosen on validation models, the greedy pick, the
settings and level checks, the validation halves, the cross-validation folds and the
cross-fitted residuals (scored on the other half / held-out block, clipped; a reused
path method's fitting-half MSE on clipped predictions)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_anchors import FAST, _planted

from jaxeval.anchors import Settings, SplitData
from jaxeval.anchors import _methods as M
from jaxeval.anchors._irt import IRTConfig, fit_item_factors, pirt_estimate
from jaxeval.anchors._mlp import RES_HIDDEN, init_mlp, mlp_apply
from jaxeval.anchors._ridge import LinearMap, apply_linear, fit_ridge, fit_ridge_validated


def _split(seed=0, m_tr=40, m_val=20, n=20):
    s, y, _ = _planted(seed=seed, m=m_tr + m_val, n=n, informative=(1, 5, 9))
    a = [jnp.asarray(v) for v in (s[:m_tr], y[:m_tr], s[m_tr:], y[m_tr:])]
    return SplitData(*a)


def _factors(d, seed=0):
    return fit_item_factors(jax.random.key(seed), d.s_tr, IRTConfig(rank=2, num_steps=30))


def _jit(f, *static):
    """``f`` compiled as one program (its ``static`` positions hashed): an internal
    function called eagerly dispatches, and compiles, hundreds of small operations."""
    return jax.jit(f, static_argnums=static)


def _fit_np(x, y):
    """Least-squares slope and intercept (float64): the external calibration's reference."""
    a = np.stack([np.asarray(x, np.float64), np.ones(len(x))], 1)
    return np.linalg.lstsq(a, np.asarray(y, np.float64), rcond=None)[0]


# -------------------------------------------------------------------------- apply_map
def test_apply_map_irt_and_blend_formulas():
    """``"irt"`` is ``cal_a * (lam * x @ w + (1 - lam) * pIRT) + cal_b`` and ``"blend"``
    is ``beta * ridge + (1 - beta) * (cal_a * pIRT + cal_b)``. Weights of 0.3 (not 0.5) and
    a non-trivial calibration tell a swapped ``lam`` / ``1 - lam`` or an uncalibrated
    p-IRT in the blend apart."""
    d = _split()
    F = _factors(d)
    anchors = jnp.array([1, 4, 9, 13])
    x = d.s_val[:, anchors]
    rho = jnp.asarray(1.0)
    p = np.asarray(pirt_estimate(F, anchors, x, rho), np.float64)
    w = jnp.array([0.1, 0.2, 0.3, 0.4])
    cal = jnp.array([2.0, -0.1])
    f = M.Fitted(anchors, "irt", {"F": F, "rho": rho, "lam": jnp.asarray(0.3), "w": w,
                                  "cal": cal})
    xw = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(M.apply_map(f, x)),
                               2.0 * (0.3 * xw + 0.7 * p) - 0.1, rtol=1e-5, atol=1e-6)
    lin = LinearMap(w, jnp.asarray(0.05))
    g = M.Fitted(anchors, "blend", {"F": F, "rho": rho, "cal": cal, "lin": lin,
                                    "beta": jnp.asarray(0.3)})
    np.testing.assert_allclose(np.asarray(M.apply_map(g, x)),
                               0.3 * (xw + 0.05) + 0.7 * (2.0 * p - 0.1), rtol=1e-5, atol=1e-6)


def test_apply_map_resmlp_clips_its_base_and_mlp_mean_averages_members():
    """The residual MLP starts as the zero correction, so its prediction is its linear
    base clipped into ``[0, 1]`` (up to the logit's 1e-4 clip: a base of 1.3 or -0.2 gives
    1 or 0, never NaN). An ``"mlp_mean"`` map is the mean of its members' predictions
    (member 0 alone would differ)."""
    x = jnp.array([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    mlp, _ = init_mlp(jax.random.key(0), 2, hidden=RES_HIDDEN, zero_last=True)
    lin = LinearMap(jnp.array([0.6, 0.6]), jnp.asarray(-0.2))  # 1.0, -0.2, 0.4
    f = M.Fitted(jnp.array([0, 1]), "resmlp", {"lin": lin, "mlp": mlp})
    np.testing.assert_allclose(np.asarray(M.apply_map(f, x)), [1.0, 0.0, 0.4], atol=2e-4)
    lin2 = LinearMap(jnp.array([0.75, 0.75]), jnp.asarray(-0.2))  # 1.3 -> 1
    f2 = M.Fitted(jnp.array([0, 1]), "resmlp", {"lin": lin2, "mlp": mlp})
    np.testing.assert_allclose(np.asarray(M.apply_map(f2, x)), [1.0, 0.0, 0.55], atol=2e-4)

    ps = [init_mlp(jax.random.key(i), 2)[0] for i in (1, 2)]
    static = init_mlp(jax.random.key(0), 2)[1]
    each = [np.asarray(mlp_apply(q, static, x)) for q in ps]
    assert not np.allclose(each[0], each[1])
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), *ps)
    ens = M.Fitted(jnp.array([0, 1]), "mlp_mean", {"mlp": stacked})
    np.testing.assert_allclose(np.asarray(M.apply_map(ens, x)), (each[0] + each[1]) / 2,
                               rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ shrunk and mix maps
def test_shrunk_map_recovers_the_plain_mean_prior_from_too_few_training_models():
    """Targets equal to the plain anchor mean, with fewer training models (5) than
    anchors (6): the residual fit toward ``w0 = 1/k`` is exactly zero, so the shrunk map
    is the prior itself (``w = 1/6``, ``b = 0``), which no ridge toward zero reaches.
    Without adding ``w0`` back, or with the validation MSE of the prior candidate taken on
    raw targets, the result is not the prior."""
    rng = np.random.default_rng(3)
    s = jnp.asarray((rng.random((15, 10)) < 0.5).astype(np.float32))
    anchors = jnp.arange(6)
    y = s[:, :6].mean(1)
    d = SplitData(s[:5], y[:5], s[5:], y[5:])
    f = M._fit_shrunk_map(anchors, d)
    np.testing.assert_allclose(np.asarray(f.params["lin"].w), np.full(6, 1 / 6), atol=1e-5)
    assert abs(float(f.params["lin"].b)) < 1e-5


def test_shrunk_map_keeps_the_candidate_and_strength_chosen_on_validation():
    """With anchors that miss most informative items the map is whichever of the two
    validated fits (toward zero, toward the mean) has the lower validation MSE, with that
    fit's own strength (here the two strengths differ, 3.16 and 0.1, so a swapped ``lam``
    shows)."""
    d = _split(seed=2, m_tr=30, m_val=30)
    anchors = jnp.array([0, 2, 4, 6, 8, 10, 12])
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    w0 = jnp.full((7,), 1 / 7)
    lams = jnp.asarray(M.SHRINK_GRID)
    lin0, lam0, m0 = fit_ridge_validated(x_tr, d.y_tr, x_val, d.y_val, lams)
    lin1, lam1, m1 = fit_ridge_validated(x_tr, d.y_tr - x_tr @ w0, x_val, d.y_val - x_val @ w0,
                                         lams)
    assert float(lam0) != float(lam1)
    use1 = float(m1) <= float(m0)
    want_w = np.asarray(lin1.w + w0) if use1 else np.asarray(lin0.w)
    f = M._fit_shrunk_map(anchors, d)
    np.testing.assert_allclose(np.asarray(f.params["lin"].w), want_w, rtol=1e-5, atol=1e-6)
    assert float(f.params["lam"]) == float(lam1 if use1 else lam0)


def test_mix_map_averages_weights_and_intercepts():
    """``greedy_mix`` is the equal average of both maps' weights and of their intercepts."""
    a = M.Fitted(jnp.array([0, 1]), "linear", {"lin": LinearMap(jnp.array([1.0, 3.0]),
                                                                jnp.asarray(0.2))})
    b = M.Fitted(jnp.array([0, 1]), "linear", {"lin": LinearMap(jnp.array([0.0, 1.0]),
                                                                jnp.asarray(0.6))})
    f = M._fit_mix_map(a, b)
    np.testing.assert_allclose(np.asarray(f.params["lin"].w), [0.5, 2.0])
    np.testing.assert_allclose(float(f.params["lin"].b), 0.4, rtol=1e-6)


# ---------------------------------------------------------------- checkpoint paths
def test_path_prediction_takes_the_earliest_best_checkpoint_on_the_given_rows():
    """Checkpoint MSEs are taken on the validation models ``rows`` only (targets ``y``):
    on rows 2, 3 with targets 0.5, 0.5 checkpoints 1 and 2 tie at 0 and the earlier one
    (1) wins; on rows 0, 1 checkpoint 0 is exact. The last checkpoint, or rows
    ``0 .. len(y) - 1``, would pick otherwise. An ensemble path picks per member and
    averages: on rows 0, 1 member 0's best is checkpoint 0, member 1's checkpoint 0 (tied
    with 1); on rows 2, 3 member 0's is checkpoint 1, member 1's checkpoint 2."""
    path = jnp.array([[0.1, 0.2, 0.9, 0.9],
                      [0.8, 0.8, 0.5, 0.5],
                      [0.7, 0.7, 0.5, 0.5]])
    y = jnp.array([0.5, 0.5])
    np.testing.assert_allclose(np.asarray(M._checkpoint_mses(path, jnp.array([2, 3]), y)),
                               [0.16, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(np.asarray(M._path_prediction(path, jnp.array([2, 3]), y)),
                               [0.8, 0.8, 0.5, 0.5])
    got = M._path_prediction(path, jnp.array([0, 1]), jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(np.asarray(got), [0.1, 0.2, 0.9, 0.9])
    other = jnp.array([[0.0, 0.0, 0.0, 0.0],
                       [0.3, 0.3, 0.3, 0.3],
                       [0.5, 0.5, 0.5, 0.5]])
    ens = jnp.stack([path, other])
    got = M._path_prediction(ens, jnp.array([0, 1]), jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(np.asarray(got), [0.05, 0.1, 0.45, 0.45], atol=1e-6)
    got = M._path_prediction(ens, jnp.array([2, 3]), jnp.array([0.5, 0.5]))
    np.testing.assert_allclose(np.asarray(got), [0.65, 0.65, 0.5, 0.5], atol=1e-6)


# ------------------------------------------------------------- IRT maps and calibration
def test_calibration_is_slope_then_intercept_and_identity_when_not_external():
    """Internal targets need no calibration (``[1, 0]``); an external one is the
    least-squares line of the target on the estimate, stored ``[slope, intercept]``:
    ``y = 0.5 * est - 0.5`` gives ``[0.5, -0.5]``."""
    est = jnp.array([1.2, 1.6, 1.9, 2.4, 2.8])
    y = 0.5 * est - 0.5
    np.testing.assert_allclose(np.asarray(M._calibration(est, y, False)), [1.0, 0.0])
    np.testing.assert_allclose(np.asarray(M._calibration(est, y, True)), [0.5, -0.5],
                               atol=1e-4)


@pytest.mark.parametrize("gp", [False, True])
def test_irt_map_weight_on_validation_and_calibration_on_training(gp):
    """p-IRT keeps ``lam = 0``; gp-IRT takes the grid weight with the lowest validation
    MSE, with an external calibration fitted on the training models' estimates (a fit on
    the validation models would be another line). The validation targets are built as
    the training-calibrated mix at ``lam = 0.3`` of the anchor mean and p-IRT, so 0.3 wins
    on validation with zero error, while on the training models another weight would
    win. ``rho`` is ``irt.rho_online``."""
    d = _split(seed=4)
    F = _factors(d)
    anchors = jnp.array([0, 2, 4, 6, 12])  # none of the informative items 1, 5, 9
    w = jnp.full((5,), 0.2)
    st = Settings(external=True, irt=IRTConfig(rho_online=0.5))
    rho = jnp.asarray(0.5)
    p_tr = np.asarray(pirt_estimate(F, anchors, d.s_tr[:, anchors], rho), np.float64)
    p_val = np.asarray(pirt_estimate(F, anchors, d.s_val[:, anchors], rho), np.float64)
    m_tr = np.asarray(d.s_tr[:, anchors], np.float64).mean(1)
    m_val = np.asarray(d.s_val[:, anchors], np.float64).mean(1)
    y_tr = 0.8 * np.asarray(d.y_tr, np.float64) + 0.1
    c3 = _fit_np(0.3 * m_tr + 0.7 * p_tr, y_tr)
    y_val = c3[0] * (0.3 * m_val + 0.7 * p_val) + c3[1]
    d = d._replace(y_tr=jnp.asarray(y_tr, jnp.float32), y_val=jnp.asarray(y_val, jnp.float32))
    f = M._fit_irt_map(F, anchors, w, d, st, gp=gp)
    assert float(f.params["rho"]) == 0.5
    grid = M._WEIGHT_GRID if gp else (0.0,)
    errs, cals, on_train = [], [], []
    for lam in grid:
        c = _fit_np(lam * m_tr + (1 - lam) * p_tr, y_tr)
        cals.append(c)
        errs.append(np.mean((c[0] * (lam * m_val + (1 - lam) * p_val) + c[1] - y_val) ** 2))
        on_train.append(np.mean((c[0] * (lam * m_tr + (1 - lam) * p_tr) + c[1] - y_tr) ** 2))
    i = int(np.argmin(errs))
    if gp:
        assert grid[i] == 0.3 and errs[i] < 1e-12 and sorted(errs)[1] > 1e-7  # clear
        assert grid[int(np.argmin(on_train))] != 0.3  # chosen on training: another weight
    assert float(f.params["lam"]) == pytest.approx(grid[i])
    np.testing.assert_allclose(np.asarray(f.params["cal"]), cals[i], rtol=1e-3, atol=1e-3)


def test_blend_map_calibrates_on_training_and_weighs_on_validation():
    """The blend's p-IRT calibration is fitted on training models (rho ``rho_online``),
    its ridge is ``_fit_ridge_map``'s, and ``beta`` (the ridge's weight) is the grid value
    with the lowest validation MSE of ``beta * ridge + (1 - beta) * calibrated p-IRT``.
    The validation targets are that blend at ``beta = 0.3``, so 0.3 wins with zero error;
    ``1 - beta`` (0.7), the uncalibrated p-IRT, or a choice on the training models would
    each pick another weight."""
    d = _split(seed=5)
    F = _factors(d)
    anchors = jnp.array([0, 2, 4, 6, 12])  # none of the informative items 1, 5, 9
    st = Settings(external=True, irt=IRTConfig(rho_online=0.5))
    rho = jnp.asarray(0.5)
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    y_tr = 0.8 * np.asarray(d.y_tr, np.float64) + 0.1
    d = d._replace(y_tr=jnp.asarray(y_tr, jnp.float32))
    p_tr = np.asarray(pirt_estimate(F, anchors, x_tr, rho), np.float64)
    p_val = np.asarray(pirt_estimate(F, anchors, x_val, rho), np.float64)
    c = _fit_np(p_tr, y_tr)
    lin = M._fit_ridge_map(anchors, d).params["lin"]
    r_tr = np.asarray(apply_linear(lin, x_tr), np.float64)
    r_val = np.asarray(apply_linear(lin, x_val), np.float64)
    c_val = c[0] * p_val + c[1]
    y_val = 0.3 * r_val + 0.7 * c_val
    d = d._replace(y_val=jnp.asarray(y_val, jnp.float32))
    f = M._fit_blend_map(F, anchors, d, st)
    np.testing.assert_allclose(np.asarray(f.params["cal"]), c, rtol=1e-3, atol=1e-3)
    assert float(f.params["rho"]) == 0.5

    def best(r, p, y):
        return M._WEIGHT_GRID[int(np.argmin([np.mean((b * r + (1 - b) * p - y) ** 2)
                                             for b in M._WEIGHT_GRID]))]

    assert best(r_val, c_val, y_val) == 0.3
    assert best(r_val, p_val, y_val) != 0.3  # the p-IRT side uncalibrated
    assert best(r_tr, c[0] * p_tr + c[1], y_tr) != 0.3  # chosen on the training models
    assert float(f.params["beta"]) == pytest.approx(0.3)


# ------------------------------------------------------------------------ selectors
def test_greedy_pick_takes_the_lowest_validation_mse():
    """Of candidate anchor sets the pick is the one whose validated ridge map has the
    lowest *validation* MSE. The training target is the mean of items 3-5 and items 0-2
    are their copies with 20% flips; on validation models the target is the mean of items
    0-2 and items 3-5 are their copies with 40% flips. Validation MSEs (0.095, 0.101,
    0.028) pick ``[0, 1, 2]``; the training MSEs (0.019, 0.040, 0.032) would pick
    ``[3, 4, 5]``."""
    rng = np.random.default_rng(0)
    s = (rng.random((60, 9)) < 0.5).astype(np.float32)
    s[:30, 0:3] = np.where(rng.random((30, 3)) < 0.2, 1 - s[:30, 3:6], s[:30, 3:6])
    s[30:, 3:6] = np.where(rng.random((30, 3)) < 0.4, 1 - s[30:, 0:3], s[30:, 0:3])
    y = np.empty(60, np.float32)
    y[:30] = s[:30, 3:6].mean(1)
    y[30:] = s[30:, 0:3].mean(1)
    d = SplitData(*(jnp.asarray(v) for v in (s[:30], y[:30], s[30:], y[30:])))
    cands = jnp.array([[3, 4, 5], [6, 7, 8], [0, 1, 2]])
    np.testing.assert_array_equal(np.asarray(M._greedy_pick(cands, d)), [0, 1, 2])


def test_aiscis_ridge_is_the_loo_guarded_refinement_and_ignores_validation_models():
    """``aiscis_ridge``'s anchors are ``refine_anchors`` with the ridge proxy, guarded by
    the training leave-one-out MSE at strength 1e-2, for ``ridge_swaps`` swaps: here the
    guarded search ends at a lower LOO MSE than the unguarded one (so a dropped guard
    shows), never above the start's, and replacing the validation models changes
    nothing."""
    from jaxeval.anchors._ridge import loo_ridge_residuals
    from jaxeval.anchors._select import refine_anchors

    d = _split(seed=0, m_tr=20, m_val=10, n=14)
    st = dataclasses.replace(FAST, ridge_swaps=4)
    key = jax.random.key(0)
    a0 = _jit(M._shared, 2, 3)(key, d, 4, st).a_km

    def loo(a):
        return jnp.mean(loo_ridge_residuals(d.s_tr[:, a], d.y_tr, 1e-2) ** 2)

    aiscis_ridge = _jit(M._aiscis_ridge, 3)
    got = aiscis_ridge(key, a0, d, st)
    args = (key, a0, d.s_tr, d.y_tr, d.s_tr[:1], d.y_tr[:1], M._ridge_proxy)
    want, _ = refine_anchors(*args, num_swaps=4, guard=True, guard_score=loo)
    free, _ = refine_anchors(*args, num_swaps=4, guard=False, guard_score=loo)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert float(loo(got)) < float(loo(free)) and float(loo(got)) <= float(loo(a0))
    d2 = d._replace(s_val=1.0 - d.s_val, y_val=1.0 - d.y_val)
    np.testing.assert_array_equal(np.asarray(aiscis_ridge(key, a0, d2, st)), np.asarray(got))


def test_random_linear_is_least_squares_and_aiscis_starts_from_kmeans():
    """``random_linear`` is the ridge at relative strength 1e-6 on the random anchors;
    ``aiscis_ridge`` with no swaps keeps its start, the k-means anchors."""
    d = _split(seed=1)
    st = dataclasses.replace(FAST, ridge_swaps=0)
    c = {}
    f = M.fit_method(jax.random.key(0), d, 4, "random_linear", st, c)
    a = c["shared"].a_rand
    lin = fit_ridge(d.s_tr[:, a], d.y_tr, 1e-6)
    np.testing.assert_allclose(np.asarray(f.params["lin"].w), np.asarray(lin.w), rtol=1e-4,
                               atol=1e-5)
    assert float(f.params["lam"]) == pytest.approx(1e-6)
    g = M.fit_method(jax.random.key(0), d, 4, "aiscis_ridge", st, c)
    np.testing.assert_array_equal(np.asarray(g.anchors), np.asarray(c["shared"].a_km))


# ------------------------------------------------------------ settings and small helpers
def test_checked_settings_boundaries():
    """Three folds, zero swaps and zero IRT penalties are allowed; two folds and a zero
    greedy strength are not; the ``external`` argument overrides the settings' field."""
    ok = M.checked_settings(Settings(auto_folds=3, num_swaps=0, ridge_swaps=0, kmeans_iters=0,
                                     irt=IRTConfig(rho_u=0.0, rho_v=0.0, rho_online=0.0)),
                            external=True)
    assert ok.external is True and ok.auto_folds == 3 and ok.num_swaps == 0
    assert M.checked_settings(Settings(external=True), external=False).external is False
    with pytest.raises(ValueError, match="auto_folds"):
        M.checked_settings(Settings(auto_folds=2), external=False)
    M.checked_settings(Settings(auto_folds=2), external=False, auto=False)
    with pytest.raises(ValueError, match="greedy_lams"):
        M.checked_settings(Settings(greedy_lams=(1.0, 0.0)), external=False)
    with pytest.raises(ValueError, match="proxy_steps"):
        M.checked_settings(Settings(proxy_steps=0), external=False)
    with pytest.raises(ValueError, match="mlp_members"):
        M.checked_settings(Settings(mlp_members=0), external=False)


def test_check_level_min_models_and_auto_candidates():
    """Levels are open-interval reals (0, 1 and booleans refused); the mean methods need
    4 models, the rest 8; the MLP-trained candidates join ``auto`` from exactly
    ``auto_cv_below`` validation models on."""
    assert M.check_level(np.float32(0.25)) == 0.25
    for bad in (0, 0.0, 1.0, True, np.bool_(True), "0.1", np.array([0.1])):
        with pytest.raises(ValueError, match="alpha"):
            M.check_level(bad)
    assert [M.min_models(m) for m in ("random_mean", "anchor_points", "random_ridge",
                                      "sparseeval")] == [4, 4, 8, 8]
    st = Settings(auto_cv_below=40)
    assert M.auto_candidates(39, st) == M.AUTO_CANDIDATES
    assert M.auto_candidates(40, st) == M.AUTO_CANDIDATES + M.AUTO_VALIDATION_EXTRA


def test_validation_halves_are_disjoint_equal_and_leave_one_out_when_odd():
    """Seven validation models: two disjoint halves of 3, one model in neither; two
    models are the fewest that can be halved."""
    a, b = M.validation_halves(7, 0)
    assert len(a) == len(b) == 3 and not set(a) & set(b)
    assert set(a) | set(b) < set(range(7))
    a, b = M.validation_halves(2, 1)
    assert sorted([*a, *b]) == [0, 1]
    with pytest.raises(ValueError, match="at least 2"):
        M.validation_halves(1, 0)


def test_cv_folds_leftovers_train_in_every_fold():
    """With 13 pooled models and 3 folds (h = 4) the one leftover model trains in every
    fold, and the inner validation block of fold ``f`` is the held-out block of fold
    ``f + 1`` (cyclically)."""
    s = np.arange(13, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    d = SplitData(s[:9], s[:9, 0], s[9:], s[9:, 0])
    folds, _, y_ho = M.cv_folds(d, 3, seed=0)
    held = set(np.asarray(y_ho).ravel().tolist())
    (left,) = set(range(13)) - held
    for f in range(3):
        assert left in folds.y_tr[f].tolist()
        np.testing.assert_array_equal(folds.y_val[f], y_ho[(f + 1) % 3])


# --------------------------------------------------------------- cross-fitted residuals
def test_crossfit_residuals_fit_on_one_half_and_score_the_other():
    """Row 0 of ``crossfit_residuals`` is each method refitted with half A as its
    validation set and scored (clipped) on half B, row 1 the reverse; the MSE is the
    fitting half's. ``crossfit_selected_residuals`` keeps, per row, the method with the
    lower fitting-half MSE."""
    d = _split(seed=6, m_tr=40, m_val=16)
    d = d._replace(y_tr=d.y_tr + 0.7, y_val=d.y_val + 0.7)  # some predictions above 1
    ia, ib = (jnp.asarray(i) for i in M.validation_halves(16, 2))
    methods = ("random_ridge", "random_mean")
    res, mses = M.crossfit_residuals(jax.random.key(3), d, 4, methods, FAST, ia, ib)
    above = False
    for r, (fi, hi) in enumerate(((ia, ib), (ib, ia))):
        dh = SplitData(d.s_tr, d.y_tr, d.s_val[fi], d.y_val[fi])
        for j, name in enumerate(methods):
            f = M.fit_method(jax.random.key(3), dh, 4, name, FAST)
            pv = np.clip(np.asarray(M.apply_map(f, dh.s_val[:, f.anchors])), 0, 1)
            raw = np.asarray(M.apply_map(f, d.s_val[hi][:, f.anchors]))
            above |= bool((raw > 1).any())
            ph = np.clip(raw, 0, 1)
            np.testing.assert_allclose(np.asarray(res[r, j]), ph - np.asarray(d.y_val[hi]),
                                       atol=1e-5)
            assert float(mses[r, j]) == pytest.approx(np.mean((pv - np.asarray(dh.y_val)) ** 2),
                                                      rel=1e-4)
    assert above  # the clip matters
    sel, picks = M.crossfit_selected_residuals(jax.random.key(3), d, 4, methods, FAST, ia, ib)
    want = np.argmin(np.asarray(mses), axis=1)
    np.testing.assert_array_equal(np.asarray(picks), want)
    np.testing.assert_allclose(np.asarray(sel), np.asarray(res)[[0, 1], want], atol=1e-6)


def test_candidate_cv_residuals_are_clipped_fold_keyed_held_out_errors():
    """Residual ``[j, f]`` is method ``j`` refitted on fold ``f`` with key
    ``fold_in(key, 1000 + f)`` and scored, clipped to ``[0, 1]``, on that fold's held-out
    block; the CV MSE is its mean square per method."""
    d = _split(seed=8, m_tr=30, m_val=15)
    d = d._replace(y_tr=d.y_tr + 0.7, y_val=d.y_val + 0.7)  # some predictions above 1
    folds, s_ho, y_ho = M.cv_folds(d, 3, seed=1)
    folds = jax.tree.map(jnp.asarray, folds)
    y_ho = np.asarray(y_ho)
    methods = ("random_ridge", "random_mean")
    key = jax.random.key(4)
    res = np.asarray(M.candidate_cv_residuals(key, folds, jnp.asarray(s_ho), jnp.asarray(y_ho),
                                              4, methods, FAST))
    assert res.shape == (2, 3, 15)
    above = False
    for f in range(3):
        df = jax.tree.map(lambda a, f=f: a[f], folds)
        for j, name in enumerate(methods):
            fit = M.fit_method(jax.random.fold_in(key, 1000 + f), df, 4, name, FAST)
            raw = np.asarray(M.apply_map(fit, jnp.asarray(s_ho[f])[:, fit.anchors]))
            above |= bool((raw > 1).any())
            p = np.clip(raw, 0, 1)
            np.testing.assert_allclose(res[j, f], p - y_ho[f], atol=1e-5)
    assert above  # the clip matters
    mse = M.candidate_cv_mse(key, folds, jnp.asarray(s_ho), jnp.asarray(y_ho), 4, methods, FAST)
    np.testing.assert_allclose(np.asarray(mse), (res ** 2).mean((1, 2)), rtol=1e-5)


# ---------------------------------------------------------------- SparseEval and keys
def test_sparseeval_start_mlps_use_their_own_keys_and_reuse_only_the_same_start():
    """The two start MLPs train from ``fold_in(fold_in(key, _K_MLP), i)``, ``i = 0`` on the
    k-means anchors and ``i = 1`` on the random ones (one shared key would make the two
    trainings' streams the same); the start is the one with the lower best validation
    MSE (with no swaps the anchors are the start). Given ``reuse`` from a fit that
    picked the *other* start, the anchors are recomputed, not reused."""
    from jaxeval.anchors._mlp import train_mlp

    d = _split(seed=9, m_tr=24, m_val=12, n=16)
    st = Settings(init_steps=20, eval_every=10, proxy_steps=10, num_swaps=0, kmeans_iters=3)
    key = jax.random.key(5)
    sh = _jit(M._shared, 2, 3)(key, d, 4, st)
    sparseeval_anchors = _jit(M._sparseeval_anchors, 2, 3)
    anchors, use_km, _, (p_km, p_rd) = sparseeval_anchors(key, d, 4, st, sh)
    for i, (a, p) in enumerate(((sh.a_km, p_km), (sh.a_rand, p_rd))):
        k_i = jax.random.fold_in(jax.random.fold_in(key, M._K_MLP), i)
        fit, _ = train_mlp(k_i, d.s_tr[:, a], d.y_tr, d.s_val[:, a], d.y_val, num_steps=20,
                           eval_every=10, return_path=True)
        np.testing.assert_allclose(np.asarray(p), np.asarray(fit.val_path), rtol=1e-5,
                                   atol=1e-6)
    rows = jnp.arange(12)
    v_km = float(jnp.min(M._checkpoint_mses(p_km, rows, d.y_val)))
    v_rd = float(jnp.min(M._checkpoint_mses(p_rd, rows, d.y_val)))
    assert v_km != v_rd and bool(use_km) == (v_km <= v_rd)
    np.testing.assert_array_equal(np.asarray(anchors),
                                  np.asarray(sh.a_km if v_km <= v_rd else sh.a_rand))
    sentinel = jnp.arange(4) + 10
    reuse = (jnp.logical_not(use_km), sentinel, p_km, p_rd)
    again, use2, trace, _ = sparseeval_anchors(key, d, 4, st, sh, reuse, rows)
    assert trace is None and bool(use2) == bool(use_km)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(anchors))
    reuse = (use_km, sentinel, p_km, p_rd)
    again, _, _, _ = sparseeval_anchors(key, d, 4, st, sh, reuse, rows)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(sentinel))


def test_member_keys_start_with_the_key_and_fold_in_distinct_offsets():
    """Member 0 trains from the key itself (so it is ``greedy_mlp``'s network), member
    ``e >= 1`` from ``fold_in(key, _K_MEMBER + e)``: all distinct."""
    key = jax.random.key(11)
    ks = M._member_keys(key, 3)
    data = np.asarray(jax.random.key_data(ks))
    want = [jax.random.key_data(key)] + [jax.random.key_data(jax.random.fold_in(key, 1000 + e))
                                        for e in (1, 2)]
    np.testing.assert_array_equal(data, np.stack([np.asarray(w) for w in want]))
    assert len({tuple(r) for r in data}) == 3


def test_greedy_blend_is_fitted_on_the_greedy_anchors():
    """``greedy_blend`` blends on the greedy pick (the cache's ``"greedy"``), not on the
    k-means anchors ``kmeans_blend`` uses."""
    d = _split(seed=10, m_tr=30, m_val=12, n=16)
    c = {}
    f = M.fit_method(jax.random.key(2), d, 4, "greedy_blend", FAST, c)
    assert f.kind == "blend"
    np.testing.assert_array_equal(np.asarray(f.anchors), np.asarray(c["greedy"]))
    assert not np.array_equal(np.sort(np.asarray(c["greedy"])),
                              np.sort(np.asarray(c["shared"].a_km)))


def test_resmlp_keeps_the_decay_and_network_with_the_lowest_validation_error():
    """The residual MLP is trained once per weight decay of :data:`RESMLP_DECAYS` (same
    key, same base) and keeps the training with the lowest best validation MSE: its
    decay, its checkpoint and its network (the prediction equals that training's)."""
    from jaxeval.anchors._mlp import train_mlp

    rng = np.random.default_rng(2)
    s = (rng.random((60, 6)) < 0.5).astype(np.float32)
    y = (0.2 + 0.6 * s[:, 0] * s[:, 1] + 0.05 * rng.normal(size=60)).astype(np.float32)
    d = SplitData(*(jnp.asarray(v) for v in (s[:40], y[:40], s[40:], y[40:])))
    st = dataclasses.replace(FAST, resmlp_steps=60, eval_every=10, resmlp_lr=3e-2)
    anchors = jnp.array([0, 1, 2, 3])  # an interaction of items 0 and 1: ridge cannot fit it
    shrunk = M._fit_shrunk_map(anchors, d)
    key = jax.random.key(7)
    f = _jit(M._fit_resmlp_map, 3)(key, shrunk, d, st)
    lin = shrunk.params["lin"]
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    b_tr = jnp.clip(apply_linear(lin, x_tr), 0.0, 1.0)
    b_val = jnp.clip(apply_linear(lin, x_val), 0.0, 1.0)
    fits = [train_mlp(key, x_tr, d.y_tr, x_val, d.y_val, num_steps=60, eval_every=10,
                      learning_rate=3e-2, weight_decay=wd, hidden=RES_HIDDEN, base_tr=b_tr,
                      base_val=b_val)
            for wd in M.RESMLP_DECAYS]
    best = [float(fit.best_val) for fit, _ in fits]
    i = int(np.argmin(best))
    assert i != 0 and best[i] < 0.97 * sorted(best)[1]  # a clear winner, not decay 0
    assert float(f.params["decay"]) == pytest.approx(M.RESMLP_DECAYS[i])
    fit, static = fits[i]
    want = mlp_apply(fit.params, static, x_val, base=b_val)
    np.testing.assert_allclose(np.asarray(M.apply_map(f, x_val)), np.asarray(want), rtol=1e-4,
                               atol=1e-5)


def test_crossfit_path_methods_choose_on_clipped_fitting_half_predictions():
    """A :data:`PATH_METHODS` method whose training is reused (``random_mlp``: the cache
    holds its anchors and a hand-made validation path) is scored on the fitting half by
    its clipped predictions, as every other method. The path predicts 5 for the even
    validation models, whose target is set to 1, and the target itself for the others
    (its checkpoint 0, -5 everywhere, is worse: the earliest-best rule picks checkpoint 1
    on the raw values). Clipped, its fitting-half MSE is exactly 0 on both halves and so
    are its residuals on the other half, so ``crossfit_selected_residuals`` picks it over
    ``random_mean`` (MSE 0.28 to 0.42) on both rows; unclipped its MSE would be 16 times
    the share of even models (about 10) and ``random_mean`` would be picked."""
    d = _split(seed=6, m_tr=40, m_val=16)
    even = np.arange(16) % 2 == 0
    y = np.where(even, 1.0, np.asarray(d.y_val)).astype(np.float32)
    d = d._replace(y_val=jnp.asarray(y))
    path = jnp.asarray(np.stack([np.full(16, -5.0), np.where(even, 5.0, y)]), jnp.float32)
    ia, ib = (jnp.asarray(i) for i in M.validation_halves(16, 2))
    assert even[np.asarray(ia)].any() and even[np.asarray(ib)].any()  # the clip matters
    methods = ("random_mean", "random_mlp")

    def run(key, d, path, ia, ib):
        sh = M._shared(key, d, 4, FAST)
        cache = {"shared": sh, "path:random_mlp": (sh.a_rand, path)}
        return (M.crossfit_residuals(key, d, 4, methods, FAST, ia, ib, cache),
                M.crossfit_selected_residuals(key, d, 4, methods, FAST, ia, ib, cache))

    (res, mses), (sel, picks) = _jit(run)(jax.random.key(3), d, path, ia, ib)
    np.testing.assert_array_equal(np.asarray(mses[:, 1]), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(res[:, 1]), np.zeros((2, 8)))
    assert np.all(np.asarray(mses[:, 0]) > 0.1), mses
    np.testing.assert_array_equal(np.asarray(picks), [1, 1])
    np.testing.assert_array_equal(np.asarray(sel), np.zeros((2, 8)))
