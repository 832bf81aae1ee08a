"""Deeper checks of ``jaxeval.anchors._methods`` and ``_mlp``: which anchors, which map and
which key each named method of ``fit_method`` uses (checked against the shared random /
k-means anchors and the trainer called by hand), ``fit_method``'s argument errors, the
trainer's one checkpoint when fewer steps than ``eval_every`` are asked for, the
cross-validation folds (seeded, a real permutation, the per-fold minimum named through
``what``) and the settings checks that name their field."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_methods_mutants import _jit, _split

from jaxeval.anchors import Settings, SplitData
from jaxeval.anchors import _methods as M
from jaxeval.anchors._irt import IRTConfig
from jaxeval.anchors._mlp import mlp_apply, train_mlp

#: tiny trainings: every MLP method compiles and runs in about a second
TINY = Settings(proxy_steps=10, final_steps=40, init_steps=20, eval_every=20, num_swaps=2,
                kmeans_iters=5, ridge_swaps=3, irt=IRTConfig(rank=2, num_steps=30),
                mlp_members=2, resmlp_steps=40)
K = 4


class _Fits(dict):
    """Named methods fitted on one small split with one key, each on first use (one
    compiled program per method)."""

    def __init__(self):
        super().__init__()
        self.d = _split(seed=5, m_tr=40, m_val=20, n=20)
        self.key = jax.random.key(22)
        self.sh = _jit(M._shared, 2, 3)(self.key, self.d, K, TINY)
        self._fit = _jit(M.fit_method, 2, 3, 4)

    def __missing__(self, method):
        self[method] = self._fit(self.key, self.d, K, method, TINY)
        return self[method]


@pytest.fixture(scope="module")
def fits():
    f = _Fits()
    return f.d, f.key, f.sh, f


def _same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_random_and_kmeans_methods_use_their_own_shared_anchors(fits):
    """The ``random_*`` methods fit on the shared random anchors, ``anchor_points``,
    ``kmeans_ridge`` and the IRT methods on the k-means ones (the two sets differ here);
    ``anchor_points`` weighs by cluster size, ``random_mean`` uniformly."""
    d, _, sh, f = fits
    assert not _same(np.sort(sh.a_rand), np.sort(sh.a_km))
    for m in ("random_mean", "random_ridge", "random_mlp", "random_shrunk", "random_lowrank"):
        assert _same(f[m].anchors, sh.a_rand), m
    for m in ("anchor_points", "kmeans_ridge", "pirt", "gpirt"):
        assert _same(f[m].anchors, sh.a_km), m
    np.testing.assert_allclose(f["anchor_points"].params["w"], sh.w_km)
    assert np.ptp(np.asarray(sh.w_km)) > 0  # cluster sizes differ: uniform would show
    np.testing.assert_allclose(f["random_mean"].params["w"], np.full(K, 1 / K))
    kinds = {m: f[m].kind for m in (
        "random_mean", "anchor_points", "random_ridge", "kmeans_ridge", "random_mlp",
        "sparseeval", "sparseeval_ridge", "pirt", "gpirt", "random_shrunk", "random_lowrank",
        "greedy_shrunk", "greedy_resmlp")}
    assert kinds == {"random_mean": "weighted_mean", "anchor_points": "weighted_mean",
                     "random_ridge": "linear", "kmeans_ridge": "linear", "random_mlp": "mlp",
                     "sparseeval": "mlp", "sparseeval_ridge": "linear", "pirt": "irt",
                     "gpirt": "irt", "random_shrunk": "linear", "random_lowrank": "linear",
                     "greedy_shrunk": "linear", "greedy_resmlp": "resmlp"}


def test_pirt_is_gpirt_at_weight_zero_and_both_keep_the_kmeans_weights(fits):
    """p-IRT puts no weight on the anchor mean (``lam = 0``); gp-IRT's anchor mean is
    weighted by the k-means cluster sizes (``w = w_km``), for both."""
    _, _, sh, f = fits
    assert float(f["pirt"].params["lam"]) == 0.0
    for m in ("pirt", "gpirt"):
        np.testing.assert_allclose(f[m].params["w"], sh.w_km)
    # gp-IRT's weight is chosen on the grid; p-IRT's grid is {0}: a gp-IRT fit with a
    # positive weight tells the two apart (checked so that the first assert is not vacuous)
    assert float(f["gpirt"].params["lam"]) > 0.0


@pytest.mark.parametrize("method, anchors", [("random_mlp", "random"),
                                             ("sparseeval", "sparseeval_ridge")])
def test_mlp_methods_train_the_reference_mlp_from_the_final_key(fits, method, anchors):
    """``random_mlp`` and ``sparseeval`` are the reference trainer run from
    ``fold_in(key, _K_FINAL)`` with ``final_steps`` and ``eval_every`` on their anchors
    (the random ones; SparseEval's, which ``sparseeval_ridge`` shares)."""
    d, key, sh, f = fits
    a = sh.a_rand if anchors == "random" else f[anchors].anchors
    assert _same(f[method].anchors, a)
    if anchors != "random":  # SparseEval's swaps moved the anchors off both starts
        assert not _same(a, sh.a_km) and not _same(a, sh.a_rand)
    fit, static = train_mlp(jax.random.fold_in(key, M._K_FINAL), d.s_tr[:, a], d.y_tr,
                            d.s_val[:, a], d.y_val, num_steps=TINY.final_steps,
                            eval_every=TINY.eval_every)
    x = d.s_val[:, a]
    np.testing.assert_allclose(M.apply_map(f[method], x), mlp_apply(fit.params, static, x),
                               rtol=1e-5, atol=1e-6)
    assert int(f[method].params["best_step"]) == int(fit.best_step)


def test_greedy_resmlp_corrects_the_greedy_shrunk_ridge(fits):
    """``greedy_resmlp`` sits on ``greedy_shrunk``'s anchors and linear map."""
    _, _, sh, f = fits
    r, g = f["greedy_resmlp"], f["greedy_shrunk"]
    assert _same(r.anchors, g.anchors) and not _same(np.sort(g.anchors), np.sort(sh.a_km))
    for a, b in zip(jax.tree.leaves(r.params["lin"]), jax.tree.leaves(g.params["lin"])):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_fit_method_argument_errors_name_the_argument():
    """An unknown method lists the methods (``auto`` too); ``anchors_only`` for a method
    without a validation path is refused naming ``anchors_only`` (``random_ridge`` and the
    other methods dispatched first were not refused: they returned a whole fit)."""
    d = _split(seed=1, m_tr=16, m_val=8, n=10)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"method must be one of .*'auto'.*got 'ridge'"):
        M.fit_method(key, d, 3, "ridge", TINY)
    for method in ("greedy_ridge", "random_ridge", "random_mean", "kmeans_ridge"):
        with pytest.raises(ValueError, match=rf"anchors_only: .*got '{method}'"):
            M.fit_method(key, d, 3, method, TINY, anchors_only=True)
    a = M.fit_method(key, d, 3, "random_mlp", TINY, anchors_only=True)
    sh = M._shared(key, d, 3, TINY)
    assert _same(a, sh.a_rand)


# ----------------------------------------------------------------------------- trainer
@pytest.mark.parametrize("use_validation", [True, False])
def test_train_mlp_takes_one_checkpoint_when_steps_are_below_eval_every(use_validation):
    """``num_steps < eval_every``: one checkpoint of ``eval_every`` steps is still taken
    (documented "at least eval_every"); the path has the initialisation and that
    checkpoint, and the last iterate (``use_validation=False``) is that step's."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.random((18, 3)), jnp.float32)
    y = jnp.asarray(0.2 + 0.6 * np.asarray(x).mean(1), jnp.float32)
    fit, _ = train_mlp(jax.random.key(0), x[:12], y[:12], x[12:], y[12:], num_steps=3,
                       eval_every=5, learning_rate=0.05, hidden=(8,), return_path=True,
                       use_validation=use_validation)
    assert fit.val_path.shape == (2, 6)
    assert not np.allclose(fit.val_path[0], fit.val_path[1])  # it trained
    if not use_validation:
        assert int(fit.best_step) == 5
    else:
        assert int(fit.best_step) in (0, 5)


def test_train_mlp_keeps_the_hand_rolled_adamw_checkpoint_with_the_lowest_validation_mse():
    """With validation, ``train_mlp`` is a hand-written AdamW loop (dropout key
    ``fold_in(kdrop, t)`` at step ``t``) whose weights are kept at the earliest checkpoint
    (every ``eval_every`` steps, step 0 included) with the lowest validation MSE; its
    path is the no-dropout validation prediction at every checkpoint."""
    import optax

    from jaxeval.anchors._mlp import init_mlp

    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.random((18, 3)), jnp.float32)
    y = jnp.asarray(0.2 + 0.6 * np.asarray(x).mean(1) ** 2, jnp.float32)
    x_tr, y_tr, x_val, y_val = x[:12], y[:12], x[12:], y[12:]
    key, lr, wd, every, steps = jax.random.key(3), 0.08, 0.2, 3, 12
    fit, static = train_mlp(key, x_tr, y_tr, x_val, y_val, num_steps=steps, eval_every=every,
                            learning_rate=lr, weight_decay=wd, dropout=0.2, hidden=(8,),
                            return_path=True)
    kinit, kdrop = jax.random.split(key)
    p, st = init_mlp(kinit, 3, 0.2, hidden=(8,))
    opt = optax.adamw(lr, weight_decay=wd)
    s = opt.init(p)

    def loss(p, k):
        return jnp.mean((mlp_apply(p, st, x_tr, k) - y_tr) ** 2)

    ckpts, preds = [p], [mlp_apply(p, st, x_val)]
    for t in range(steps):
        g = jax.grad(loss)(p, jax.random.fold_in(kdrop, t))
        upd, s = opt.update(g, s, p)
        p = optax.apply_updates(p, upd)
        if (t + 1) % every == 0:
            ckpts.append(p)
            preds.append(mlp_apply(p, st, x_val))
    preds = np.stack([np.asarray(q) for q in preds])
    np.testing.assert_allclose(fit.val_path, preds, rtol=1e-4, atol=1e-6)
    mse = ((preds - np.asarray(y_val)) ** 2).mean(1)
    j = int(np.argmin(mse))
    assert 0 < j < len(mse) - 1  # neither the start nor the last iterate: the rule matters
    assert int(fit.best_step) == j * every
    assert float(fit.best_val) == pytest.approx(float(mse[j]), rel=1e-4)
    for a, b in zip(jax.tree.leaves(fit.params), jax.tree.leaves(ckpts[j])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------ cv folds
def _pooled(m_tr, m_val, n=2):
    s = np.arange(m_tr + m_val, dtype=np.float32)[:, None] * np.ones((1, n), np.float32)
    return SplitData(s[:m_tr], s[:m_tr, 0], s[m_tr:], s[m_tr:, 0])


def test_cv_folds_are_a_seeded_random_partition():
    """The same seed gives the same folds, another seed other folds; the blocks are a
    random cut of the pooled models (not the training rows first), and every held-out
    block has ``m // folds`` models, each model held out at most once."""
    d = _pooled(30, 10)
    _, _, y0 = M.cv_folds(d, 4, seed=0)
    _, _, y0b = M.cv_folds(d, 4, seed=0)
    _, _, y1 = M.cv_folds(d, 4, seed=1)
    np.testing.assert_array_equal(y0, y0b)
    assert not np.array_equal(y0, y1)
    assert y0.shape == (4, 10) and np.unique(y0).size == 40
    assert not np.array_equal(np.sort(y0, axis=1), np.arange(40).reshape(4, 10))


def test_cv_folds_need_two_models_per_fold_and_name_what():
    """Five models in three folds leave one per fold: refused; the error names the
    argument as the caller spells it (``what``)."""
    with pytest.raises(ValueError, match=r"settings.auto_folds: 3 folds of 5 models leave"):
        M.cv_folds(_pooled(3, 2), 3, seed=0, what="settings.auto_folds")
    folds, _, _ = M.cv_folds(_pooled(4, 2), 3, seed=0)  # 6 models: two per fold
    assert folds.s_val.shape[1] == 2
    with pytest.raises(ValueError, match=r"settings.auto_folds: expected at least 3, got 2"):
        M.cv_folds(_pooled(30, 10), 2, seed=0, what="settings.auto_folds")


# ------------------------------------------------------------------------- settings
@pytest.mark.parametrize("field, value", [
    ("eval_every", 0), ("resmlp_steps", 0), ("resmlp_lr", 0.0), ("auto_halves", "no"),
    ("named_halves", 1), ("guard", None), ("mlp_members", 1001)])
def test_settings_boundaries_are_refused_naming_the_field(field, value):
    """Zero checkpoint spacing / residual-MLP steps, a zero learning rate, non-boolean
    switches and more than 1000 ensemble members are refused, each naming its field."""
    with pytest.raises(ValueError, match=f"settings.{field}: expected"):
        M.checked_settings(Settings(**{field: value}), external=False)


@pytest.mark.parametrize("irt, field", [
    (IRTConfig(rank=0), "irt.rank"), (IRTConfig(rho_online=-0.1), "irt.rho_online"),
    (IRTConfig(rho_u=float("nan")), "irt.rho_u"), (IRTConfig(learning_rate=0.0),
                                                   "irt.learning_rate")])
def test_irt_settings_are_refused_naming_the_field(irt, field):
    with pytest.raises(ValueError, match=f"settings.{field}: expected"):
        M.checked_settings(Settings(irt=irt), external=False)


def test_checked_settings_returns_python_ints_and_keeps_other_fields():
    """The checked counts stay (hashable) Python ints with their values, NumPy integers
    included; fields that are not checked pass through."""
    st = M.checked_settings(Settings(final_steps=np.int64(30), eval_every=np.int32(10),
                                     mlp_members=np.int16(3), resmlp_lr=0.5),
                            external=False)
    assert (st.final_steps, st.eval_every, st.mlp_members) == (30, 10, 3)
    assert all(type(v) is int for v in (st.final_steps, st.eval_every, st.mlp_members))
    assert st.resmlp_lr == 0.5
    hash(st)
    with pytest.raises(TypeError, match=r"settings: expected jaxeval.anchors.Settings"):
        M.checked_settings(dataclasses.asdict(Settings()), external=False)
