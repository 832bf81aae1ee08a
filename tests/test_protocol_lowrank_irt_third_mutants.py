"""Gaps a third mutation review of the anchor protocol, the low-rank estimator and the
IRT predictions found: the level ``alpha`` of the unbiased estimate's interval, the prior
strength its item predictions use, ``nan_last_argmin``'s ties, the too-few-models warning
when only ``auto`` is calibrated on validation halves, how the seeds run, and ``auto``'s
half picks beside a halved named method. Each test fails on a plausible bug the rest of
the suite let through."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_anchors import FAST
from test_runner_mutants import _fake_protocol, _logistic_split, _protocol_matrix

from jaxeval.anchors import Settings, _protocol


# ------------------------------------------------------------------ the level alpha
def test_the_unbiased_interval_is_at_the_level_asked_for():
    """The unbiased estimate's interval is a ``1 - alpha`` interval too: the same
    estimate (same anchors, same extra items) with a narrower interval at 0.5 than at
    0.1."""
    sm = _protocol_matrix()
    kw = dict(seeds=(5, 3), settings=FAST, dr_items=10)
    wide = _protocol.evaluate_protocol(sm, 4, ("random_mean",), alpha=0.1, **kw)
    narrow = _protocol.evaluate_protocol(sm, 4, ("random_mean",), alpha=0.5, **kw)
    np.testing.assert_allclose(narrow.dr["mae_pp"], wide.dr["mae_pp"], rtol=1e-6)
    assert np.all(narrow.dr["width"] < wide.dr["width"] - 1e-3)


def test_the_unbiased_estimate_predicts_with_the_settings_prior_strength():
    """The unbiased estimate's item predictions are the IRT factorization's with
    ``settings.irt.rho_online``: a much stronger prior changes the estimate (and nothing
    else the named methods report)."""
    sm = _protocol_matrix()
    kw = dict(seeds=(5,), dr_items=10)
    base = _protocol.evaluate_protocol(sm, 4, ("random_mean",), settings=FAST, **kw)
    st = dataclasses.replace(FAST, irt=FAST.irt._replace(rho_online=1e3))
    strong = _protocol.evaluate_protocol(sm, 4, ("random_mean",), settings=st, **kw)
    np.testing.assert_array_equal(strong.mae_pp, base.mae_pp)
    np.testing.assert_array_equal(strong.anchors, base.anchors)
    assert abs(float(strong.dr["mae_pp"][0]) - float(base.dr["mae_pp"][0])) > 1e-3


# ------------------------------------------------------------------ nan_last_argmin
def test_nan_last_argmin_keeps_the_first_of_tied_errors():
    """Like ``argmin``, the first of equal lowest errors wins (candidates are in their
    documented order of preference); NaN never wins over a finite error, and a row of
    failed fits only gives position 0."""
    err = np.array([[0.2, 0.1, 0.1], [np.nan, 0.3, 0.3], [np.nan, np.nan, np.nan],
                    [0.5, np.nan, 0.5]])
    assert _protocol.nan_last_argmin(err).tolist() == [1, 1, 0, 0]


# ------------------------------------------------------------------ the too-few warning
def test_too_few_models_warning_counts_auto_s_halves(monkeypatch):
    """Only ``auto`` calibrated on validation halves (no named method halved): at a 95%
    level its 12 half residuals are too few, and the warning counts the models in the
    halves as well."""
    real = _protocol.evaluate_protocol
    monkeypatch.setattr(_protocol, "evaluate_protocol", functools.partial(real, alpha=0.05))
    st = Settings(auto_cv_below=12, named_halves=False)  # 12 validation models
    with pytest.warns(UserWarning, match=r"too few models \(12 validation models, 12 of them "
                                         r"in the validation halves, or cross-fitted "
                                         r"residuals\) for a 95% conformal"):
        r, _ = _fake_protocol(monkeypatch, ("random_ridge", "auto"), (5, 3), st)
    assert r.info["auto_calibration"] == "validation halves" and r.info["named_halves"] == []


# ------------------------------------------------------------------ how the seeds run
def test_seeds_run_one_at_a_time_unless_vmapped():
    """By default each seed's slice runs alone (one ``lax.map`` iteration per seed, the
    arithmetic of one seed whatever the others), and with ``vmap_seeds`` as one batch: a
    callback in the function sees one seed's shape three times, or the batch once."""
    import jax

    seen = []

    def fn(x, y):
        def cb(v):
            seen.append(np.shape(v))
            return v

        return jax.pure_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x + y,
                                 vmap_method="expand_dims")

    args = (jnp.arange(6.0).reshape(3, 2), jnp.ones((3, 1)))
    want = np.arange(6.0).reshape(3, 2) + 1
    np.testing.assert_array_equal(_protocol._over_seeds(fn, args, False), want)
    assert seen == [(2,)] * 3
    seen.clear()
    np.testing.assert_array_equal(_protocol._over_seeds(fn, args, True), want)
    assert seen == [(3, 2)]


# ------------------------------------------------------------------ auto's halves in the kernel
def test_auto_s_half_pick_never_takes_a_halved_method_that_is_no_candidate():
    """``auto``'s pick on each validation half is among *its candidates*: a named method
    calibrated on halves in the same cross-fit (``random_ridge``, better on both halves
    here) is no candidate and is never picked; the halves' residuals are the candidate's."""
    import jax

    from jaxeval.anchors._methods import crossfit_selected_residuals, validation_halves

    s, d = _logistic_split(3, 90, 50)
    ia, ib = (jnp.asarray(i) for i in validation_halves(20, 3))
    key = jax.random.key(3)
    sel = jax.jit(crossfit_selected_residuals, static_argnums=(2, 3, 4))
    _, both = sel(key, d, 4, ("random_mean", "random_ridge"), FAST, ia, ib)
    assert np.asarray(both).tolist() == [1, 1]  # (ridge would win: the check can tell)
    kernel = jax.jit(_protocol.protocol_kernel, static_argnums=(3, 4, 5, 6, 9, 11))
    out = kernel(key, d, jnp.asarray(s[70:]), 4, ("random_ridge", "random_mean"), FAST, 0,
                 0.1, -1, ("random_mean",), (ia, ib), ("random_ridge",))
    hr, picks = sel(key, d, 4, ("random_mean",), FAST, ia, ib)
    assert np.asarray(out["half_pick"]).tolist() == np.asarray(picks).tolist() == [0, 0]
    np.testing.assert_allclose(out["half_res"], hr, rtol=1e-5, atol=1e-7)


def test_irt_and_lowrank_refuse_anchors_and_ranks_they_cannot_use():
    """p-IRT dropped an anchor index past the end (a scatter discards it) and took a
    repeated one; a low-rank basis took a rank below 1 as a slice."""
    from jaxeval.anchors._irt import IRTConfig, fit_item_factors, pirt_estimate
    from jaxeval.anchors._lowrank import lowrank_basis

    s = jax.random.bernoulli(jax.random.key(0), 0.5, (30, 12)).astype(jnp.float32)
    F = fit_item_factors(jax.random.key(1), s, IRTConfig(rank=2, num_steps=20))
    x = s[:3, [0, 11]]
    assert pirt_estimate(F, np.array([0, 11]), x).shape == (3,)
    for bad, text in (([0, 12], r"must lie in \[0, 12\) \(the item factors' items\)"),
                      ([0, 0], "expected distinct items")):
        with pytest.raises(ValueError, match=rf"anchors: .*{text}"):
            pirt_estimate(F, np.array(bad), x)
    for r in (0, -1):
        with pytest.raises(ValueError, match="max_rank"):
            lowrank_basis(s, r)
    assert lowrank_basis(s, 1).V.shape == (12, 1)
