"""A fourth mutation review of ``jaxeval.anchors._methods``: the cross-fitted residuals
carry only training-only cache entries into the halves (a validation-tuned map of the
full fit is refitted on each half), the validation halves are a seeded random cut, the
residual MLP records the checkpoint of the decay it keeps, the minimum model counts, and
argument checks that name their argument (the start MLPs' steps, ``irt.rho_v``,
non-numeric greedy strengths, a complex level, ``anchors_only``)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_anchors import FAST
from test_methods_mutants import _jit, _split

from jaxeval.anchors import Settings
from jaxeval.anchors import _methods as M
from jaxeval.anchors._irt import IRTConfig


# ----------------------------------------------------------------- cross-fitted residuals
def test_crossfit_with_the_full_fits_cache_equals_the_refits_without_it():
    """The full fit's cache carries only training-only entries into the halves: its
    validation-tuned greedy shrunk ridge (strength and prior chosen on all validation
    models) is refitted on each half, so the residuals and fitting-half MSEs are those
    of the refits without any cache. (The target, the mean of all items, leaves the
    strength to choose: 1.0 on all validation models, 0.32 on each half.)"""
    d = _split(seed=2, m_tr=40, m_val=16)
    d = d._replace(y_tr=d.s_tr.mean(1), y_val=d.s_val.mean(1))
    ia, ib = (jnp.asarray(i) for i in M.validation_halves(16, 0))
    st = Settings(greedy_lams=(1e-2, 1.0), kmeans_iters=3)
    methods = ("greedy_shrunk",)

    def run(key, d, ia, ib):
        cache = {}
        M.fit_method(key, d, 4, "greedy_shrunk", st, cache)
        with_cache = M.crossfit_residuals(key, d, 4, methods, st, ia, ib, cache)
        return with_cache, M.crossfit_residuals(key, d, 4, methods, st, ia, ib)

    (r1, m1), (r0, m0) = _jit(run)(jax.random.key(1), d, ia, ib)
    np.testing.assert_allclose(np.asarray(r1), np.asarray(r0), atol=1e-5)
    np.testing.assert_allclose(np.asarray(m1), np.asarray(m0), rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------ halves and folds
def test_validation_halves_are_a_seeded_random_cut():
    """The same seed gives the same halves, another seed others; the cut is a random
    permutation (not the first and second half of the listed order)."""
    a0, b0 = M.validation_halves(20, 0)
    a0b, b0b = M.validation_halves(20, 0)
    a1, _ = M.validation_halves(20, 1)
    np.testing.assert_array_equal(a0, a0b)
    np.testing.assert_array_equal(b0, b0b)
    assert not np.array_equal(a0, a1)
    assert sorted([*a0, *b0]) == list(range(20))
    assert sorted(a0) != list(range(10))


# --------------------------------------------------------------------- argument checks
def test_zero_start_mlp_steps_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="settings.init_steps: expected"):
        M.checked_settings(Settings(init_steps=0), external=False)


def test_a_negative_rho_v_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"settings\.irt\.rho_v: expected"):
        M.checked_settings(Settings(irt=IRTConfig(rho_v=-1.0)), external=False)


@pytest.mark.parametrize("lams", [("a",), None])
def test_non_numeric_greedy_strengths_are_refused_naming_the_field(lams):
    with pytest.raises(ValueError, match="settings.greedy_lams: expected"):
        M.checked_settings(Settings(greedy_lams=lams), external=False)


@pytest.mark.parametrize("alpha", [0.1 + 0.2j, np.complex64(0.1), np.array(0.1 + 0j)])
def test_a_complex_level_is_refused_naming_alpha(alpha):
    with pytest.raises(ValueError, match="alpha: expected a level"):
        M.check_level(alpha)


def test_min_models_four_for_the_means_eight_for_every_other_method():
    assert {m: M.min_models(m) for m in M.METHODS} == {
        m: 4 if m in ("random_mean", "anchor_points") else 8 for m in M.METHODS}


def test_anchors_only_for_a_method_without_a_path_is_refused_naming_it():
    d = _split(seed=1, m_tr=20, m_val=10, n=12)
    with pytest.raises(ValueError, match="anchors_only: for"):
        M.fit_method(jax.random.key(0), d, 4, "random_ridge", FAST, anchors_only=True)


# ------------------------------------------------------------------------ residual MLP
def test_resmlp_records_the_checkpoint_of_the_decay_it_keeps():
    """The fitted residual MLP records the checkpoint step of the training it keeps (the
    decay with the lowest best validation MSE), not another decay's: here decay 1.0 wins
    at step 60, where decay 0 stopped at step 40."""
    from jaxeval.anchors import SplitData
    from jaxeval.anchors._mlp import RES_HIDDEN, train_mlp
    from jaxeval.anchors._ridge import apply_linear

    rng = np.random.default_rng(2)
    s = (rng.random((60, 6)) < 0.5).astype(np.float32)
    y = (0.2 + 0.6 * s[:, 0] * s[:, 1] + 0.05 * rng.normal(size=60)).astype(np.float32)
    d = SplitData(*(jnp.asarray(v) for v in (s[:40], y[:40], s[40:], y[40:])))
    st = dataclasses.replace(FAST, resmlp_steps=60, eval_every=10, resmlp_lr=3e-2)
    shrunk = M._fit_shrunk_map(jnp.array([0, 1, 2, 3]), d)
    key = jax.random.key(7)
    f = _jit(M._fit_resmlp_map, 3)(key, shrunk, d, st)
    x_tr, x_val = d.s_tr[:, :4], d.s_val[:, :4]
    lin = shrunk.params["lin"]
    steps = {}
    for wd in (0.0, float(f.params["decay"])):
        fit, _ = train_mlp(key, x_tr, d.y_tr, x_val, d.y_val, num_steps=60, eval_every=10,
                           learning_rate=3e-2, weight_decay=wd, hidden=RES_HIDDEN,
                           base_tr=jnp.clip(apply_linear(lin, x_tr), 0.0, 1.0),
                           base_val=jnp.clip(apply_linear(lin, x_val), 0.0, 1.0))
        steps[wd] = int(fit.best_step)
    assert float(f.params["decay"]) != 0.0 and len(set(steps.values())) == 2
    assert int(f.params["best_step"]) == steps[float(f.params["decay"])]
