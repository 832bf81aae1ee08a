"""Gaps a deep mutation review of ``evaluate_protocol`` found: ``auto``'s choice and
calibration, the unbiased estimate's anchors, the reported info fields, seeds and
argument checks. Each test fails on a plausible bug the rest of the suite let through."""

import dataclasses

import jax
import numpy as np
import pytest
from test_anchors import FAST
from test_runner_mutants import (
    _captured_protocol,
    _fake_protocol,
    _logistic_split,
    _protocol_matrix,
)

from jaxeval import ScoreMatrix
from jaxeval.anchors import AUTO_CANDIDATES, Settings, _protocol, conformal_quantile


# ------------------------------------------------------------------ argument checks
def test_seeds_as_bytes_or_several_non_integers_are_refused_naming_the_seed():
    """``seeds=b"*+"`` is not a sequence of split seeds (iterated it reads as 42, 43);
    several non-integer seeds are refused as not integers, not as repeats of each other."""
    sm = _protocol_matrix()
    with pytest.raises(TypeError, match="seeds: expected a sequence of split seeds"):
        _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=b"*+")
    with pytest.raises(TypeError, match="seed: expected an integer >= 0, got float 1.5"):
        _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=[1.5, 2.5])


def test_auto_settings_are_checked_only_when_auto_runs():
    """``auto_folds`` / ``auto_cv_below`` are read by ``"auto"`` alone: a value it would
    refuse is no error for the other methods, and is refused naming it with ``auto``."""
    sm = _protocol_matrix()
    st = dataclasses.replace(FAST, auto_folds=2)
    r = _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,), settings=st)
    assert r.mae_pp.shape == (1, 1)
    with pytest.raises(ValueError, match="settings.auto_folds"):
        _protocol.evaluate_protocol(sm, 4, ("random_mean", "auto"), seeds=(1,), settings=st)


def test_an_incomplete_matrix_is_refused_naming_the_protocol():
    s = np.asarray(_protocol_matrix().scores, np.float64).copy()
    s[3, 5] = np.nan
    with pytest.raises(ValueError, match="evaluate_protocol needs a fully observed matrix"):
        _protocol.evaluate_protocol(ScoreMatrix(s), 4, ("random_mean",), seeds=(1,))


# ------------------------------------------------------------------ defaults and info
def test_default_seeds_and_how_they_ran():
    """The default split seeds are 42 + r, r = 0..4; ``info["seeds_batched"]`` says
    whether they were looped (the default) or vmapped."""
    r = _protocol.evaluate_protocol(_protocol_matrix(), 4, ("random_mean",))
    assert r.seeds == (42, 43, 44, 45, 46) and r.mae_pp.shape == (1, 5)
    assert r.info["seeds_batched"] == "loop"
    v = _protocol.evaluate_protocol(_protocol_matrix(), 4, ("random_mean",), seeds=(42, 43),
                                    vmap_seeds=True)
    assert v.info["seeds_batched"] == "vmap"
    np.testing.assert_allclose(v.mae_pp, r.mae_pp[:, :2], rtol=1e-5)


def test_validation_choice_info_names_candidates_and_calibration(monkeypatch):
    """Choosing on validation models, ``auto`` reports ``"validation halves"`` as its
    calibration and ``half_picks`` as names of candidates (the kernel's picks are
    positions among them, not among all methods fitted)."""
    st = Settings(auto_cv_below=12, named_halves=False)
    r, seen = _fake_protocol(monkeypatch, ("random_ridge", "auto"), (5, 3), st)
    assert r.info["auto_calibration"] == "validation halves"
    assert r.info["half_picks"] == [[seen["cands"][0]] * 2] * 2
    assert seen["cands"][0] != seen["fit_names"][0]  # (the check can tell)


def test_auto_halves_off_calibrates_on_the_chosen_candidates_validation_residuals(
        monkeypatch):
    """``Settings.auto_halves=False``: no halves are cut, and ``auto``'s radius is the
    conformal quantile of its pick's validation residuals (the fake's pick errs by
    exactly 0.02 on every validation model)."""
    st = Settings(auto_cv_below=12, named_halves=False, auto_halves=False)
    r, seen = _fake_protocol(monkeypatch, ("random_ridge", "auto"), (5, 3), st)
    assert seen["halves"] is None
    assert r.info["auto_calibration"] == "validation models" and r.info["half_picks"] is None
    assert r.info["radius"][1] == pytest.approx([0.02, 0.02], rel=1e-4)


def test_cross_validation_uses_auto_folds_and_the_small_candidate_set(monkeypatch):
    """Below ``auto_cv_below`` validation models ``auto`` chooses among
    :data:`AUTO_CANDIDATES` (the MLP extras join from that many *validation* models
    on, however many training models there are), by ``Settings.auto_folds``-fold
    cross-validation, and reports ``cv_mse`` as the mean *squared* cross-fitted
    residual of each candidate."""
    st = Settings(named_halves=False, auto_cv_below=13, auto_folds=3)  # 12 val, 36 train
    cv_best = (2, 0)
    r, seen = _fake_protocol(monkeypatch, ("random_ridge", "auto"), (5, 3), st,
                             cv_best=cv_best)
    assert seen["cands"] == AUTO_CANDIDATES
    assert r.info["auto_choice"] == "cv"
    S, F, h = seen["cv"][2].shape
    assert F == 3
    assert np.shape(r.info["cv_mse"]) == (2, len(AUTO_CANDIDATES))
    for s in range(2):
        best = np.linspace(-0.01, 0.02, F * h) * (s + 1)
        want = np.full(len(AUTO_CANDIDATES), 0.09)
        want[cv_best[s]] = (best**2).mean()
        np.testing.assert_allclose(r.info["cv_mse"][s], want, rtol=1e-9)


def _named_fake(monkeypatch, val_shift):
    """``evaluate_protocol`` on a fake kernel: two named methods calibrated on halves
    (each with half residuals of its own size), validation predictions the targets
    plus ``val_shift[j]`` for method ``j``."""
    def fake_kernel(keys, d, s_te, k, fit_names, st, dr_m, alpha, picks, cands, halves,
                    vmap, halved, auto_halved):
        y_val = np.asarray(d.y_val)
        S, hv = y_val.shape
        M, h, n_half = len(fit_names), s_te.shape[1], len(halves[0][0])
        val = np.stack([np.stack([y_val[s] + val_shift[j] for j in range(M)])
                        for s in range(S)])
        out = {"val": val, "test": np.full((S, M, h), 0.5),
               "anchors": np.broadcast_to(np.arange(k), (S, M, k))}
        base = np.linspace(0.01, 0.02, 2 * n_half).reshape(2, n_half)
        out["named_half_res"] = np.stack([np.stack([base * (j + 1) * (s + 1)
                                                    for j in range(len(halved))])
                                          for s in range(S)])  # [S, named, 2, h]
        return out

    monkeypatch.setattr(_protocol, "_kernel_jit", fake_kernel)
    return _protocol.evaluate_protocol(_protocol_matrix(), 4, ("random_ridge", "random_shrunk"),
                                       seeds=(5, 3), settings=Settings())


def test_each_named_method_gets_its_own_halves_radius_and_clipped_val_mse(monkeypatch):
    """With two methods calibrated on validation halves each gets the radius of its
    own half residuals; ``val_mse`` is the error of the *clipped* validation
    predictions (a prediction 0.8 above a target is at most 1 - target off)."""
    r = _named_fake(monkeypatch, (0.0, 0.8))
    assert r.info["named_halves"] == ["random_ridge", "random_shrunk"]
    for j in range(2):
        for s in range(2):
            res = np.linspace(0.01, 0.02, 12) * (j + 1) * (s + 1)
            want = float(conformal_quantile(np.asarray(res, np.float32), 0.1))
            assert r.info["radius"][j][s] == pytest.approx(want, rel=1e-6)
    sm = _protocol_matrix().drop_duplicates()
    for s, seed in enumerate((5, 3)):
        yv = sm.protocol_split(seed).validation.true_score().astype(np.float64)
        want = ((np.clip(yv + 0.8, 0, 1) - yv) ** 2).mean()
        assert r.info["val_mse"][s][1] == pytest.approx(want, rel=1e-6)
        assert r.info["val_mse"][s][0] == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ coverage ties
def test_coverage_counts_a_target_on_a_clipped_end():
    """Models that answer nothing (target 0) predicted 0 by the anchor mean: the
    interval's lower end is clipped to 0 and the target on it is covered."""
    rng = np.random.default_rng(1)
    s = (rng.random((60, 30)) < 0.6).astype(np.float64)
    s[::4] = 0.0  # 15 models with every answer wrong
    sm = ScoreMatrix(s)
    r = _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,), dedup=False)
    sp = sm.protocol_split(1)
    zero = sp.test.true_score() == 0
    assert zero.any() and np.all(r.predictions[0, 0][zero] == 0)
    lo = np.clip(r.predictions[0, 0] - r.info["radius"][0][0], 0, 1)
    hi = np.clip(r.predictions[0, 0] + r.info["radius"][0][0], 0, 1)
    y = sp.test.true_score()
    assert r.coverage[0, 0] == pytest.approx(((lo <= y) & (y <= hi)).mean(), abs=1e-12)
    assert r.coverage[0, 0] >= zero.mean()


# ------------------------------------------------------------------ the DR estimate
def test_unbiased_coverage_counts_a_target_on_its_clipped_upper_end(monkeypatch):
    """Models that answer every item right (target 1): the unbiased estimate's upper
    bound is clipped to 1 and the target on it is covered, as the named intervals' are."""
    rng = np.random.default_rng(1)
    s = (rng.random((60, 30)) < 0.6).astype(np.float64)
    s[::4] = 1.0  # 15 models with every answer right
    sm = ScoreMatrix(s)
    r, raw = _captured_protocol(monkeypatch, sm, 4, ("random_mean",), (1,), dedup=False,
                                dr_items=6)
    dlo, dhi = raw["dr"][:, 1], raw["dr"][:, 2]
    y = sm.protocol_split(1).test.true_score()
    assert (y == dhi).any()  # (the tie the check is about)
    np.testing.assert_array_equal(r.dr["coverage"], ((dlo <= y) & (y <= dhi)).mean(-1))


# ------------------------------------------------------------------ auto's halves in the kernel
def test_kernel_half_residuals_are_crossfit_selected_residuals():
    """``protocol_kernel``'s ``half_res`` / ``half_pick`` are
    :func:`crossfit_selected_residuals` of ``auto``'s candidates present (the last one
    included, a halved named method that is no candidate excluded), and
    ``named_half_res`` is the same for the named method alone."""
    import jax.numpy as jnp

    from jaxeval.anchors._methods import (
        crossfit_selected_residuals,
        validation_halves,
    )

    s, d = _logistic_split(3, 90, 50)
    methods = ("random_ridge", "random_mean", "random_shrunk")
    cands = ("random_mean", "random_shrunk")
    ia, ib = (jnp.asarray(i) for i in validation_halves(20, 3))
    key = jax.random.key(3)
    kernel = jax.jit(_protocol.protocol_kernel, static_argnums=(3, 4, 5, 6, 9, 11))
    out = kernel(key, d, jnp.asarray(s[70:]), 4, methods, FAST, 0, 0.1, -1, cands,
                 (ia, ib), ("random_ridge",))
    sel = jax.jit(crossfit_selected_residuals, static_argnums=(2, 3, 4))
    hr, picks = sel(key, d, 4, cands, FAST, ia, ib)
    assert np.asarray(out["half_pick"]).tolist() == np.asarray(picks).tolist() == [1, 1]
    np.testing.assert_allclose(out["half_res"], hr, rtol=1e-5, atol=1e-7)
    named, _ = sel(key, d, 4, ("random_ridge",), FAST, ia, ib)
    np.testing.assert_allclose(out["named_half_res"][0], named, rtol=1e-5, atol=1e-7)


def test_kernel_half_residuals_follow_each_halfs_own_pick():
    """When the two validation halves choose different candidates, each half's
    residuals are those of the candidate *it* chose (scored on the other half)."""
    import jax.numpy as jnp

    from jaxeval.anchors._methods import (
        crossfit_selected_residuals,
        validation_halves,
    )

    # few training models: the ridge map wins on one half, the plain mean on the other
    s, d = _logistic_split(0, 70, 14)
    cands = ("random_mean", "random_ridge")
    ia, ib = (jnp.asarray(i) for i in validation_halves(20, 0))
    key = jax.random.key(0)
    sel = jax.jit(crossfit_selected_residuals, static_argnums=(2, 3, 4))
    hr, picks = sel(key, d, 4, cands, FAST, ia, ib)
    assert np.asarray(picks).tolist() == [1, 0]  # (the case the check is about)
    kernel = jax.jit(_protocol.protocol_kernel, static_argnums=(3, 4, 5, 6, 9, 11))
    out = kernel(key, d, jnp.asarray(s[14:50]), 4, cands, FAST, 0, 0.1, -1, cands,
                 (ia, ib), ())
    assert np.asarray(out["half_pick"]).tolist() == [1, 0]
    np.testing.assert_allclose(out["half_res"], hr, rtol=1e-5, atol=1e-7)


def test_kernel_dr_pick_follows_the_candidates_order_not_the_methods():
    """``auto_pick`` is a position among ``auto_cands`` present, in the candidates'
    order; ``dr_pick`` is the index of that candidate in ``methods``."""
    import jax.numpy as jnp

    from jaxeval.anchors._methods import SplitData

    rng = np.random.default_rng(0)
    s = (rng.random((60, 20)) < 0.6).astype(np.float32)
    y = s.mean(1)
    d = SplitData(*(jnp.asarray(a) for a in (s[:30], y[:30], s[30:45], y[30:45])))
    methods = ("random_ridge", "random_shrunk")
    kernel = jax.jit(_protocol.protocol_kernel, static_argnums=(3, 4, 5, 6, 9))
    for pick, want in ((0, 1), (1, 0)):
        out = kernel(jax.random.key(0), d, jnp.asarray(s[45:]), 4, methods, FAST, 3, 0.1,
                     jnp.int32(pick), methods[::-1])
        assert int(out["dr_pick"]) == want


def test_the_protocol_clears_jax_caches_near_the_mapping_limit(monkeypatch):
    """Past ``MAP_PRESSURE`` of Linux's mapping limit, ``evaluate_protocol`` clears JAX's
    caches before compiling (saying so) and still gives the same result."""
    from jaxeval import _runner

    sm = _protocol_matrix()
    ref = _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,))
    monkeypatch.setattr(_runner, "_max_map_count", lambda: 100)
    monkeypatch.setattr(_runner, "_maps_held", lambda: 81)
    monkeypatch.setattr(_runner, "_MAPS_AFTER_CLEAR", [])
    with pytest.warns(RuntimeWarning, match=r"^evaluate_protocol: this process held 81 "
                      r"memory mappings of the 100") as rec:
        r = _protocol.evaluate_protocol(sm, 4, ("random_mean",), seeds=(1,))
    np.testing.assert_array_equal(r.mae_pp, ref.mae_pp)
    assert [w.filename for w in rec] == [__file__]
