"""Third review of ``jaxeval.anchors._methods``: the settings plumbed into SparseEval's
refinement (proxy steps, swaps, guard, the refinement key), its k-means start on a tie,
the shared random / k-means anchors (their keys and ``kmeans_iters``), one greedy
candidate per greedy strength, the low-rank map's external calibration, the shrunk
ridge's tie rule, the halved methods and the settings boundaries."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_methods_mlp_deep_mutants import TINY
from test_methods_mutants import _jit, _split

from jaxeval.anchors import Settings
from jaxeval.anchors import _methods as M
from jaxeval.anchors._lowrank import fit_lowrank_validated, lowrank_basis
from jaxeval.anchors._mlp import mlp_apply, train_mlp
from jaxeval.anchors._ridge import greedy_ridge_anchors
from jaxeval.anchors._select import kmeans_anchors, random_anchors, refine_anchors


# ------------------------------------------------------------------ SparseEval anchors
def test_sparseeval_refinement_uses_the_proxy_settings_and_its_own_key():
    """From its start, SparseEval's anchors are ``refine_anchors`` run from
    ``fold_in(key, _K_REFINE)`` on training and validation models, with a proxy MLP
    trained ``proxy_steps`` steps without validation, for ``num_swaps`` swaps and the
    ``guard`` setting (on here: its trace, validation MSEs included, must match too).
    ``proxy_steps``, ``init_steps``, ``num_swaps`` and ``ridge_swaps`` all differ, so a
    setting read from another field shows."""
    guard = True
    d = _split(seed=9, m_tr=24, m_val=12, n=16)
    st = Settings(init_steps=20, eval_every=10, proxy_steps=40, num_swaps=3, ridge_swaps=1,
                  kmeans_iters=3, guard=guard)
    key = jax.random.key(5)
    sh = _jit(M._shared, 2, 3)(key, d, 4, st)
    anchors, use_km, trace, _ = _jit(M._sparseeval_anchors, 2, 3)(key, d, 4, st, sh)
    a0 = jnp.where(use_km, sh.a_km, sh.a_rand)

    def fit_proxy(pkey, x, y):
        fit, static = train_mlp(pkey, x, y, x[:1], y[:1], num_steps=40, eval_every=10,
                                use_validation=False)
        return lambda v: mlp_apply(fit.params, static, v[None, :])[0]

    @jax.jit
    def want(a0):
        return refine_anchors(jax.random.fold_in(key, M._K_REFINE), a0, d.s_tr, d.y_tr,
                              d.s_val, d.y_val, fit_proxy, num_swaps=3, guard=guard)

    a_want, t_want = want(a0)
    np.testing.assert_array_equal(np.asarray(anchors), np.asarray(a_want))
    for a, b in zip(jax.tree.leaves(trace), jax.tree.leaves(t_want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert not np.array_equal(np.asarray(anchors), np.asarray(a0))  # the swaps moved it


def test_sparseeval_start_is_kmeans_on_a_validation_tie():
    """Start MLPs equally good on validation (here the same reused path for both): the
    k-means start is taken, and with an earlier fit that also started from k-means its
    anchors are reused (a strict rule would start from the random anchors and refine)."""
    d = _split(seed=9, m_tr=24, m_val=12, n=16)
    st = Settings(init_steps=20, eval_every=10, proxy_steps=10, num_swaps=1, kmeans_iters=3)
    key = jax.random.key(5)
    sh = _jit(M._shared, 2, 3)(key, d, 4, st)
    path = jnp.asarray(np.random.default_rng(0).random((3, 12)), jnp.float32)
    sentinel = jnp.arange(4) + 10
    reuse = (jnp.asarray(True), sentinel, path, path)
    got, use_km, _, _ = _jit(M._sparseeval_anchors, 2, 3)(key, d, 4, st, sh, reuse,
                                                           jnp.arange(12))
    assert bool(use_km)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(sentinel))


# ------------------------------------------------------------------ shared anchors
def test_shared_anchors_come_from_their_own_keys_and_kmeans_iters():
    """The random anchors are ``random_anchors(fold_in(key, _K_RANDOM))`` and the k-means
    anchors and weights ``kmeans_anchors(fold_in(key, _K_KMEANS), s_tr, k, kmeans_iters)``:
    distinct items in range, drawn from their own keys, with the configured Lloyd
    iterations (zero iterations here give other anchors than the default 50)."""
    d = _split(seed=3, m_tr=30, m_val=10, n=20)
    key = jax.random.key(8)
    st = dataclasses.replace(TINY, kmeans_iters=0)
    sh = _jit(M._shared, 2, 3)(key, d, 5, st)
    a_rd = random_anchors(jax.random.fold_in(key, M._K_RANDOM), 20, 5)
    a_km, w_km = kmeans_anchors(jax.random.fold_in(key, M._K_KMEANS), d.s_tr, 5, 0)
    np.testing.assert_array_equal(np.asarray(sh.a_rand), np.asarray(a_rd))
    np.testing.assert_array_equal(np.asarray(sh.a_km), np.asarray(a_km))
    np.testing.assert_allclose(np.asarray(sh.w_km), np.asarray(w_km))
    for a in (sh.a_rand, sh.a_km):
        a = np.asarray(a)
        assert len(set(a.tolist())) == 5 and a.min() >= 0 and a.max() < 20
    a50, _ = kmeans_anchors(jax.random.fold_in(key, M._K_KMEANS), d.s_tr, 5, 50)
    assert not np.array_equal(np.sort(np.asarray(a50)), np.sort(np.asarray(a_km)))


# ------------------------------------------------------------------ greedy candidates
def test_one_greedy_candidate_per_greedy_strength():
    """``greedy_lams`` gives one greedy leave-one-out ridge anchor set per strength
    (training models only), in order; the greedy pick is one of them."""
    d = _split(seed=2, m_tr=30, m_val=12, n=16)
    st = dataclasses.replace(TINY, greedy_lams=(1e-3, 1.0, 100.0))
    c = {}
    f = _jit(lambda d: (M.fit_method(jax.random.key(0), d, 4, "greedy_ridge", st, c),
                        c["greedy_cands"]))
    fit, cands = f(d)
    assert cands.shape == (3, 4)
    for row, lam in zip(np.asarray(cands), st.greedy_lams):
        want = greedy_ridge_anchors(d.s_tr, d.y_tr, 4, jnp.asarray(lam))
        np.testing.assert_array_equal(row, np.asarray(want))
    assert any(np.array_equal(np.asarray(fit.anchors), r) for r in np.asarray(cands))
    assert len({tuple(r) for r in np.asarray(cands).tolist()}) > 1  # strengths matter


# ------------------------------------------------------------------ maps
def test_lowrank_map_calibrates_an_external_target():
    """``random_lowrank`` / ``greedy_lowrank`` pass ``Settings.external`` on: with an
    external target the map is ``fit_lowrank_validated(..., external=True)``'s, which
    here differs from the internal one."""
    d = _split(seed=4, m_tr=40, m_val=20, n=20)
    d = d._replace(y_tr=0.5 * d.y_tr + 0.3, y_val=0.5 * d.y_val + 0.3)
    anchors = jnp.array([1, 3, 5, 9, 12])
    basis = lowrank_basis(d.s_tr)
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    got = {}
    for ext in (False, True):
        f = M._fit_lowrank_map(basis, anchors, d, dataclasses.replace(TINY, external=ext))
        want, _ = fit_lowrank_validated(basis, anchors, x_tr, d.y_tr, x_val, d.y_val, ext)
        np.testing.assert_allclose(np.asarray(f.params["lin"].w), np.asarray(want.w),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(f.params["lin"].b), float(want.b), rtol=1e-5,
                                   atol=1e-6)
        got[ext] = np.asarray(f.params["lin"].w)
    assert not np.allclose(got[False], got[True], atol=1e-3)


def test_shrunk_map_keeps_the_mean_prior_on_a_validation_tie():
    """Anchors that are 0 for every model make both validated fits (toward 0 and toward
    the plain anchor mean) the same problem, so their validation MSEs tie exactly; the
    tie goes to the mean prior (``w = 1/k``), the estimator strong shrinkage is meant
    to reach, not to the ridge toward zero (``w = 0``)."""
    d = _split(seed=3)
    d = d._replace(s_tr=d.s_tr.at[:, :3].set(0.0), s_val=d.s_val.at[:, :3].set(0.0))
    f = M._fit_shrunk_map(jnp.arange(3), d)
    np.testing.assert_allclose(np.asarray(f.params["lin"].w), np.full(3, 1 / 3), atol=1e-6)


# ------------------------------------------------------------------ halves and settings
def test_halved_methods_are_those_that_choose_on_validation():
    """Every method but the four that make no validation choice (the two means,
    least squares and p-IRT, whose weight is 0 and calibration fitted on training
    models) is calibrated on halves, in the caller's order; none with
    ``named_halves=False``."""
    assert set(M.METHODS) - set(M.HALVES_METHODS) == {"random_mean", "anchor_points",
                                                      "random_linear", "pirt"}
    methods = ("pirt", "greedy_ridge", "random_mean", "sparseeval", "gpirt")
    assert M.halved_methods(methods, Settings()) == ("greedy_ridge", "sparseeval", "gpirt")
    assert M.halved_methods(methods, Settings(named_halves=False)) == ()


def test_settings_edges_accepted():
    """``auto_cv_below=0`` (always choose on validation models) and 1000 ensemble members
    are allowed."""
    st = M.checked_settings(Settings(auto_cv_below=0, mlp_members=1000), external=False)
    assert st.auto_cv_below == 0 and st.mlp_members == 1000
    with pytest.raises(ValueError, match="settings.auto_cv_below"):
        M.checked_settings(Settings(auto_cv_below=-1), external=False)


@pytest.mark.parametrize("field", ["resmlp_lr", "irt.learning_rate", "irt.rho_online"])
def test_settings_refuse_a_boolean_rate_or_penalty(field):
    """``True`` is not a learning rate or a penalty (it would pass as 1): refused
    naming the field."""
    from jaxeval.anchors._irt import IRTConfig

    if field.startswith("irt."):
        st = Settings(irt=IRTConfig(**{field[4:]: True}))
    else:
        st = Settings(**{field: True})
    with pytest.raises(ValueError, match=f"settings.{field}: expected"):
        M.checked_settings(st, external=False)


def test_aiscis_ridge_proxy_is_the_ridge_at_the_guards_strength():
    """``aiscis_ridge``'s proxy is the ridge map at relative strength 1e-2, the strength
    of its leave-one-out guard (built by hand here, not with the module's proxy), so a
    proxy at another strength, which ranks other items, shows."""
    from jaxeval.anchors._ridge import apply_linear, fit_ridge, loo_ridge_residuals

    d = _split(seed=3, m_tr=20, m_val=10, n=14)
    st = dataclasses.replace(TINY, ridge_swaps=6)
    key = jax.random.key(0)
    a0 = jnp.arange(4)

    def proxy(_, x, y):
        lin = fit_ridge(x, y, 1e-2)
        return lambda v: apply_linear(lin, v)

    def loo(a):
        return jnp.mean(loo_ridge_residuals(d.s_tr[:, a], d.y_tr, 1e-2) ** 2)

    got = _jit(M._aiscis_ridge, 3)(key, a0, d, st)
    want, _ = refine_anchors(key, a0, d.s_tr, d.y_tr, d.s_tr[:1], d.y_tr[:1], proxy,
                             num_swaps=6, guard=True, guard_score=loo)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_guarded_sparseeval_refines_again_instead_of_reusing_anchors():
    """With ``guard`` the refinement looks at validation models, so a fit given an
    earlier fit's start and anchors (``reuse``, same start) still refines: the same
    validation models give the same anchors and a trace, never the reused ones."""
    d = _split(seed=9, m_tr=24, m_val=12, n=16)
    st = Settings(init_steps=20, eval_every=10, proxy_steps=10, num_swaps=2, kmeans_iters=3,
                  guard=True)
    key = jax.random.key(5)
    sh = _jit(M._shared, 2, 3)(key, d, 4, st)
    sparseeval_anchors = _jit(M._sparseeval_anchors, 2, 3)
    anchors, use_km, _, paths = sparseeval_anchors(key, d, 4, st, sh)
    sentinel = jnp.arange(4) + 10
    again, use2, trace, _ = sparseeval_anchors(key, d, 4, st, sh, (use_km, sentinel, *paths),
                                               jnp.arange(12))
    assert bool(use2) == bool(use_km) and trace is not None
    np.testing.assert_array_equal(np.asarray(again), np.asarray(anchors))


def test_greedy_resmlp_trains_from_the_final_key():
    """``greedy_resmlp`` is ``_fit_resmlp_map`` run from ``fold_in(key, _K_FINAL)`` (the
    key of every method's final map) on ``greedy_shrunk``'s map; the network moved off
    its ridge start here, so the key shows in the prediction."""
    rng = np.random.default_rng(2)
    s = (rng.random((60, 6)) < 0.5).astype(np.float32)
    y = (0.2 + 0.6 * s[:, 0] * s[:, 1] + 0.05 * rng.normal(size=60)).astype(np.float32)
    d = M.SplitData(*(jnp.asarray(v) for v in (s[:40], y[:40], s[40:], y[40:])))
    st = dataclasses.replace(TINY, resmlp_steps=60, eval_every=10, resmlp_lr=3e-2)
    key = jax.random.key(7)

    @jax.jit
    def run(key, d):
        c = {}
        f = M.fit_method(key, d, 4, "greedy_resmlp", st, c)
        want = M._fit_resmlp_map(jax.random.fold_in(key, M._K_FINAL), c["greedy_shrunk"], d,
                                 st)
        x = d.s_val[:, f.anchors]
        return M.apply_map(f, x), M.apply_map(want, x), f.params["best_step"]

    got, want, step = run(key, d)
    assert int(step) > 0
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_shrunk_map_reaches_the_very_strong_shrinkage_strengths():
    """Training targets that are the plain anchor mean plus noise unrelated to the items,
    validation targets the plain mean itself: the validation choice is the strongest
    shrinkage toward the mean prior, one of the two strengths :data:`SHRINK_GRID` adds
    beyond the ridge grid, and the map is then nearly the plain mean."""
    from jaxeval.anchors._ridge import RIDGE_GRID

    rng = np.random.default_rng(5)
    s = jnp.asarray((rng.random((60, 12)) < 0.5).astype(np.float32))
    anchors = jnp.arange(6)
    y = np.asarray(s[:, :6].mean(1))
    noise = rng.normal(size=40)
    y_tr = (y[:40] + 0.2 * (noise - noise.mean())).astype(np.float32)  # centred
    d = M.SplitData(s[:40], jnp.asarray(y_tr), s[40:], jnp.asarray(y[40:]))
    f = M._fit_shrunk_map(anchors, d)
    assert float(f.params["lam"]) > max(RIDGE_GRID)
    np.testing.assert_allclose(np.asarray(f.params["lin"].w), np.full(6, 1 / 6), atol=0.02)


# ---------------------------------------------------------------- fixes the review found
@pytest.mark.parametrize("given, want", [(1.0, (1.0,)), ([1.0, 2.0], (1.0, 2.0)),
                                         (np.array([0.1, 10.0]), (0.1, 10.0))])
def test_checked_greedy_strengths_are_a_tuple_of_floats(given, want):
    """A scalar or a list of greedy strengths passed the check and then failed (a vmap
    over a 0-d array, or an unhashable static argument under jit); the checked settings
    hold them as a hashable tuple of floats."""
    st = M.checked_settings(Settings(greedy_lams=given), False)
    assert st.greedy_lams == want and all(type(v) is float for v in st.greedy_lams)
    hash(st)
    assert M.checked_settings(Settings(), False).greedy_lams == Settings().greedy_lams
