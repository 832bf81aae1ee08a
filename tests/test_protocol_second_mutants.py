"""Gaps a second mutation review of ``evaluate_protocol`` found: scoring against an
external target, Kendall's tau-b values, clipped predictions, the split-size boundary,
the too-few-models warning when only some intervals are unbounded, ``auto``'s level,
choice and pick for the unbiased estimate, coverage at a clipped upper end, and the
reported info fields. Each test fails on a plausible bug the rest of the suite let
through."""

import functools
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from test_runner_mutants import _fake_protocol, _protocol_matrix

from jaxeval import ScoreMatrix
from jaxeval.anchors import Settings, _protocol, conformal_quantile, fit_anchors


def _distinct(m, n, seed=0):
    """``m`` distinct 0/1 score rows of ``n`` items (nothing for ``dedup`` to drop)."""
    rng = np.random.default_rng(seed)
    s = (rng.random((m, n)) < rng.uniform(0.2, 0.8, (m, 1))).astype(np.float64)
    for b in range(6):  # the first items spell the row's index in binary
        s[:, b] = (np.arange(m) >> b) & 1
    assert len({r.tobytes() for r in s}) == m
    return ScoreMatrix(s)


# ------------------------------------------------------------------ external target
def test_an_external_target_is_what_models_are_scored_against():
    """With ``target`` the test MAE, Kendall tau-b and coverage are measured against the
    external score (``true_score()``), not the items' mean; so are the validation MSE
    and the residuals the radius is calibrated on; and the settings say ``external``."""
    sm = _protocol_matrix()
    mean = np.asarray(sm.scores, np.float64).mean(1)
    target = np.clip(1.0 - mean + 0.1 * np.sin(np.arange(sm.n_models)), 0, 1)
    ext = ScoreMatrix(sm.scores, target=target)
    r = _protocol.evaluate_protocol(ext, 4, ("random_mean",), seeds=(1, 2))
    assert r.info["external_target"] is True and "external=True" in r.info["settings"]
    row = {m: i for i, m in enumerate(ext.models)}
    for j, seed in enumerate((1, 2)):
        sp = ext.drop_duplicates().protocol_split(seed)
        y = target[[row[m] for m in sp.test.models]]
        p = r.predictions[0, j].astype(np.float64)
        assert r.mae_pp[0, j] == pytest.approx(100 * np.abs(p - y).mean(), rel=1e-5)
        assert r.tau_b[0, j] == pytest.approx(stats.kendalltau(p, y).statistic, abs=1e-5)
        rad = r.info["radius"][0][j]
        lo, hi = np.clip(p - rad, 0, 1), np.clip(p + rad, 0, 1)
        assert r.coverage[0, j] == ((lo <= y) & (y <= hi)).mean()
        yv = target[[row[m] for m in sp.validation.models]]
        assert not np.allclose(yv, sp.validation.scores.mean(1))  # (the check can tell)
        fa = fit_anchors(sp.train, 4, method="random_mean", seed=seed,
                         validation=sp.validation)
        np.testing.assert_array_equal(r.anchors[0, j], fa.anchor_index)
        pv = np.clip(fa.predict(sp.validation.take(items=fa.anchor_items).scores)[0], 0, 1)
        assert r.info["val_mse"][j][0] == pytest.approx(((pv - yv) ** 2).mean(), rel=1e-4)
        want = float(conformal_quantile(np.asarray(pv - yv, np.float32), r.info["alpha"]))
        assert rad == pytest.approx(want, rel=1e-5)


# ------------------------------------------------------------------ Kendall tau-b
def test_tau_b_is_kendalls_tau_b_of_the_reported_predictions_and_test_targets():
    """``tau_b[i, j]`` is scipy's Kendall tau-b (ties included) of method ``i``'s
    reported (clipped) test predictions for seed ``j`` against the test models' scores."""
    sm = _protocol_matrix()
    methods, seeds = ("random_mean", "random_ridge"), (5, 3)
    r = _protocol.evaluate_protocol(sm, 4, methods, seeds=seeds)
    dd = sm.drop_duplicates()
    for j, seed in enumerate(seeds):
        y = np.asarray(dd.protocol_split(seed).test.true_score(), np.float64)
        for i in range(len(methods)):
            p = r.predictions[i, j].astype(np.float64)
            want = stats.kendalltau(p, y).statistic
            assert r.tau_b[i, j] == pytest.approx(want, abs=1e-5), (i, j)
    assert np.all(r.tau_b > 0.2)  # (a reversed or shuffled target would not be)


# ------------------------------------------------------------------ argument checks
def test_exactly_the_fewest_models_a_method_needs_are_enough():
    """20 models: 4 test, 4 validation, 12 train; ``random_mean`` is fitted with as few as
    4 models, so the split is accepted (and scored); 15 models leave 3 and are refused."""
    sm = _distinct(20, 12)
    assert sm.protocol_split(1).validation.n_models == 4
    r = _protocol.evaluate_protocol(sm, 3, ("random_mean",), seeds=(1,), alpha=0.5)
    assert r.mae_pp.shape == (1, 1) and np.isfinite(r.mae_pp).all()
    with pytest.raises(ValueError, match="leaves 3 validation models; 4 are needed"):
        _protocol.evaluate_protocol(_distinct(15, 12), 3, ("random_mean",), seeds=(1,),
                                    alpha=0.5)


# ------------------------------------------------------------------ the too-few warning
def test_too_few_models_warning_when_only_a_halved_method_is_unbounded():
    """45 models, 9 validation models: enough for ``random_mean``'s 90% interval, not for
    ``random_ridge``'s on two halves of 4 (8 cross-fitted residuals). The protocol warns
    (one interval is [0, 1] though the other is bounded) and counts the models in the
    halves."""
    sm = _distinct(45, 20)
    with pytest.warns(UserWarning, match=r"evaluate_protocol: too few models \(9 validation "
                                         r"models, 8 of them in the validation halves, or "
                                         r"cross-fitted residuals\) for a 90% conformal"):
        r = _protocol.evaluate_protocol(sm, 4, ("random_mean", "random_ridge"), seeds=(1,))
    rad = np.asarray(r.info["radius"])
    assert np.isfinite(rad[0]).all() and np.isinf(rad[1]).all()
    assert r.coverage[1].tolist() == [1.0] and r.width[1].tolist() == [1.0]
    assert r.coverage[0, 0] < 1.0 or r.width[0, 0] < 1.0
    # bounded everywhere: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,))


# ------------------------------------------------------------------ info fields
def test_info_describes_the_data_and_the_settings_run():
    """``info``: the matrix's source, ``k``, its (deduplicated) models and items, the
    settings actually run (the defaults when none are given, ``external`` False
    without a target), the time taken, and no ``auto`` fields when ``auto`` did not run."""
    sm = _protocol_matrix()
    r = _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,))
    info = r.info
    assert info["dataset"] == sm.source and info["k"] == 4
    assert info["n_models"] == 60 and info["n_items"] == 40
    assert info["external_target"] is False
    assert info["settings"].startswith("Settings(") and "external=False" in info["settings"]
    assert repr(Settings()).split("external")[0] in info["settings"]
    assert info["seconds"] > 0
    assert info["auto_picks"] is None and info["auto_calibration"] is None
    assert info["half_picks"] is None and info["cv_mse"] is None


# ------------------------------------------------------------------ auto's pick, the DR estimate
def test_the_unbiased_estimate_is_told_auto_s_cross_validated_pick_never_a_failed_one(
        monkeypatch):
    """A candidate whose cross-validation failed (NaN) is never ``auto``'s pick, and the
    kernel that builds the unbiased estimate on ``auto``'s anchors gets the position (among
    the candidates present) of the candidate actually picked, not of the failed one."""
    seen = {}

    class Stop(Exception):
        pass

    def fake_cv(keys, fd, s_ho, y_ho, k, cands, st, vmap):
        S, F, h = np.shape(y_ho)
        res = np.full((S, len(cands), F, h), 0.3)
        res[:, 0] = np.nan  # the first candidate's fit failed
        res[0, 3], res[1, 5] = 0.01, 0.02  # the best finite ones, per seed
        return res

    def fake_kernel(keys, d, s_te, k, fit_names, st, dr_m, alpha, picks, cands, *rest):
        seen.update(picks=np.asarray(picks).tolist(), cands=cands, fit_names=fit_names,
                    dr_m=dr_m)
        raise Stop

    monkeypatch.setattr(_protocol, "_cv_jit", fake_cv)
    monkeypatch.setattr(_protocol, "_kernel_jit", fake_kernel)
    with pytest.raises(Stop):
        _protocol.evaluate_protocol(_protocol_matrix(), 4, ("auto",), seeds=(5, 3),
                                    settings=Settings(named_halves=False), dr_items=6)
    present = [m for m in seen["cands"] if m in seen["fit_names"]]
    assert seen["dr_m"] == 6
    assert seen["picks"] == [present.index(seen["cands"][3]), present.index(seen["cands"][5])]


# ------------------------------------------------------------------ clipped predictions
def test_mae_and_tau_b_score_the_clipped_predictions():
    """A linear map fitted to a step-like external target predicts below 0 and above 1
    for some test models; the reported predictions are clipped to [0, 1] and the MAE
    and tau-b are those of the clipped predictions (a score is never outside [0, 1])."""
    rng = np.random.default_rng(0)
    s = (rng.random((60, 20)) < rng.uniform(0, 1, (60, 1))).astype(np.float64)
    t = np.where(s.mean(1) > 0.5, 0.95, 0.05)
    sm = ScoreMatrix(s, target=t)
    seeds = (1, 2, 3)
    r = _protocol.evaluate_protocol(sm, 6, ("random_linear",), seeds=seeds)
    p = r.predictions.astype(np.float64)
    assert p.min() >= 0 and p.max() <= 1
    assert ((p == 0) | (p == 1)).sum() >= 3  # (clipped: the check can tell)
    dd = sm.drop_duplicates()
    for j, seed in enumerate(seeds):
        y = np.asarray(dd.protocol_split(seed).test.true_score(), np.float64)
        assert r.mae_pp[0, j] == pytest.approx(100 * np.abs(p[0, j] - y).mean(), rel=1e-5)
        assert r.tau_b[0, j] == pytest.approx(stats.kendalltau(p[0, j], y).statistic,
                                              abs=1e-5)


# ------------------------------------------------------------------ alpha reaches every radius
@pytest.mark.parametrize("below", [100, 12])
def test_auto_s_radius_is_at_the_level_asked_for(monkeypatch, below):
    """At ``alpha = 0.3`` ``auto``'s radius is the conformal quantile at 0.3 of the
    residuals it is calibrated on, whether it chose by cross-validation (the chosen
    candidate's cross-fitted residuals) or on validation models (the halves' residuals);
    the fakes' residuals are those of ``_fake_protocol``."""
    real = _protocol.evaluate_protocol
    monkeypatch.setattr(_protocol, "evaluate_protocol", functools.partial(real, alpha=0.3))
    st = Settings(named_halves=False, auto_cv_below=below)  # 12 validation models
    r, seen = _fake_protocol(monkeypatch, ("random_ridge", "auto"), (5, 3), st,
                             cv_best=(4, 0))
    assert r.info["alpha"] == 0.3
    assert r.info["auto_choice"] == ("cv" if below == 100 else "validation")
    for s in range(2):
        if below == 100:
            F, h = seen["cv"][2].shape[1:]
            res = np.linspace(-0.01, 0.02, F * h) * (s + 1)
        else:
            res = np.linspace(-0.1, 0.2, 12) * (s + 1)
        want = float(conformal_quantile(np.asarray(res, np.float32), 0.3))
        assert r.info["radius"][1][s] == pytest.approx(want, rel=1e-6)
        assert want != pytest.approx(float(conformal_quantile(np.asarray(res, np.float32),
                                                              0.1)))


def test_auto_chooses_on_validation_by_the_clipped_predictions_error(monkeypatch):
    """``auto`` picks the candidate whose *clipped* validation predictions err least (the
    ``val_mse`` it reports): one predicting ``y + 3`` (clipped to 1, except one exact
    model) beats one predicting ``y + 1.5`` (also 1 once clipped), though unclipped it
    errs twice as much. The kernel is a fake with those validation predictions."""
    def fake_kernel(keys, d, s_te, k, fit_names, st, dr_m, alpha, picks, cands, halves,
                    vmap, halved, auto_halved):
        y_val = np.asarray(d.y_val, np.float64)
        S, hv = y_val.shape
        M, h = len(fit_names), s_te.shape[1]
        val = np.repeat((y_val + 3.0)[:, None], M, 1)
        val[:, fit_names.index(cands[0]), 0] = y_val[:, 0]  # exact on one model
        val[:, fit_names.index(cands[1])] = y_val + 1.5
        test = np.broadcast_to((0.2 + 0.01 * np.arange(M))[None, :, None], (S, M, h))
        return {"val": val, "test": test.copy(),
                "anchors": np.broadcast_to(np.arange(k), (S, M, k)).copy()}

    monkeypatch.setattr(_protocol, "_kernel_jit", fake_kernel)
    st = Settings(auto_cv_below=12, named_halves=False, auto_halves=False)
    cands = _protocol.auto_candidates(12, st)
    r = _protocol.evaluate_protocol(_protocol_matrix(), 4, (cands[0], cands[1], "auto"),
                                    seeds=(5, 3), settings=st)
    assert r.info["auto_choice"] == "validation"
    assert r.info["auto_picks"] == [cands[0]] * 2
    np.testing.assert_array_equal(r.predictions[2], r.predictions[0])
    for s in range(2):
        assert r.info["val_mse"][s][2] == r.info["val_mse"][s][0] < r.info["val_mse"][s][1]


def test_coverage_counts_a_target_on_a_clipped_upper_end():
    """Models that answer everything (target 1) predicted 1 by the anchor mean: the
    interval's upper end is clipped to 1 and the target on it is covered."""
    rng = np.random.default_rng(1)
    s = (rng.random((60, 30)) < 0.4).astype(np.float64)
    s[::4] = 1.0  # 15 models with every answer right
    sm = ScoreMatrix(s)
    r = _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,), dedup=False)
    y = sm.protocol_split(1).test.true_score()
    one = y == 1
    assert one.any() and np.all(r.predictions[0, 0][one] == 1)
    rad = r.info["radius"][0][0]
    lo = np.clip(r.predictions[0, 0] - rad, 0, 1)
    hi = np.clip(r.predictions[0, 0] + rad, 0, 1)
    assert r.coverage[0, 0] == pytest.approx(((lo <= y) & (y <= hi)).mean(), abs=1e-12)
    assert r.coverage[0, 0] >= one.mean()


# ---------------------------------------------------------------- fixes the review found
def test_the_unbiased_estimate_never_takes_a_failed_candidates_anchors(monkeypatch):
    """Without a given pick, the unbiased estimate's anchors are those of the candidate
    with the lowest finite validation error: a candidate whose predictions are NaN (a
    failed fit) came first under ``jnp.argmin``, while ``evaluate_protocol`` reports the
    other (``nan_last_argmin``)."""
    from test_runner_mutants import _kernel_with_fake_maps

    out = _kernel_with_fake_maps(monkeypatch, {"kmeans_ridge": np.nan, "greedy_ridge": 0.7})
    assert int(out["dr_pick"]) == 1  # greedy_ridge, as nan_last_argmin picks
    assert _protocol.nan_last_argmin(np.array([np.nan, 0.04])) == 1


def test_crossfit_selection_never_picks_a_failed_candidate(monkeypatch):
    """``auto``'s half-cross-fitted pick on each half is the lowest *finite* MSE."""
    from jaxeval.anchors import _methods

    res = jnp.arange(2 * 3 * 4, dtype=jnp.float32).reshape(2, 3, 4)
    mses = jnp.array([[np.nan, 0.3, 0.2], [0.1, np.nan, 0.5]], jnp.float32)
    monkeypatch.setattr(_methods, "crossfit_residuals", lambda *a, **k: (res, mses))
    r, picks = _methods.crossfit_selected_residuals(None, None, 3, ("a", "b", "c"), None,
                                                    None, None)
    assert picks.tolist() == [2, 0]
    np.testing.assert_array_equal(np.asarray(r), np.asarray(res)[[0, 1], [2, 0]])
