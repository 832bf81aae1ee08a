"""Anchor methods = an anchor selector + a map, as pure kernels over one split.

A method sees training scores/targets (anchor choice, map fitting) and validation
scores/targets (choices the reference rules make on validation models: the
initialisation, ridge strength, blend weights, MLP checkpoints). Test models never
enter a fit. Every kernel takes a PRNG key first and returns fixed-shape arrays, so
a whole split can be vmapped (or ``lax.map``-ped) over seeds.

Maps (``kind`` -> ``params`` pytree, see :func:`apply_map`):

- ``"weighted_mean"``: ``x @ w`` (uniform weights = plain mean; cluster-size
  weights = Anchor Points).
- ``"linear"``: ``x @ w + b`` (ridge, least squares, ridge shrunk toward the
  plain anchor mean, the low-rank difference estimator of
  :mod:`jaxeval.anchors._lowrank`, or the average of the last two).
- ``"mlp"``: the SparseEval MLP.
- ``"mlp_mean"``: the average of several SparseEval MLPs (parameters stacked on a
  leading member axis), each trained from its own initialisation on the same anchors.
- ``"resmlp"``: a small regularised MLP correcting a linear map in logit space
  (``sigmoid(logit(lin(x)) + net(x))``), weight decay and checkpoint on validation.
- ``"irt"``: ``cal_a * (lam * x @ w + (1 - lam) * pIRT) + cal_b`` (p-IRT: ``lam = 0``).
- ``"blend"``: ``beta * ridge + (1 - beta) * calibrated p-IRT``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxeval._runner import check_int
from jaxeval.anchors._irt import IRTConfig, fit_item_factors, pirt_estimate
from jaxeval.anchors._lowrank import fit_lowrank_validated, lowrank_basis
from jaxeval.anchors._mlp import RES_HIDDEN, init_mlp, mlp_apply, train_mlp
from jaxeval.anchors._ridge import (
    RIDGE_GRID,
    LinearMap,
    apply_linear,
    fit_ridge,
    fit_ridge_validated,
    greedy_ridge_anchors,
    loo_ridge_residuals,
)
from jaxeval.anchors._select import check_k, kmeans_anchors, random_anchors, refine_anchors

__all__ = [
    "Settings",
    "SplitData",
    "Fitted",
    "apply_map",
    "fit_method",
    "METHODS",
    "AUTO_CANDIDATES",
    "AUTO_VALIDATION_EXTRA",
    "HALVES_METHODS",
    "auto_candidates",
    "min_models",
    "cv_folds",
    "candidate_cv_mse",
    "candidate_cv_residuals",
    "crossfit_residuals",
    "crossfit_selected_residuals",
    "validation_halves",
    "TRAIN_ONLY",
    "PATH_METHODS",
    "halved_methods",
    "REUSED",
]

# purposes for fold_in
_K_RANDOM, _K_KMEANS, _K_MLP, _K_REFINE, _K_IRT, _K_FINAL = range(1, 7)
#: Member ``e >= 1`` of an MLP ensemble trains from ``fold_in(final_key, _K_MEMBER + e)``;
#: member 0 from the final key itself (so it is the single network of the same method).
_K_MEMBER = 1000

#: Blend / gp-IRT weights tried on validation models.
_WEIGHT_GRID = tuple(i / 10 for i in range(11))

#: Weight decays (AdamW, decoupled) tried by the residual MLP on validation models.
RESMLP_DECAYS = (0.0, 0.1, 1.0, 10.0)

#: Relative strengths of the shrunk ridge: the ridge grid plus two very strong ones
#: (toward the plain anchor mean, strong shrinkage is the random-mean estimator).
SHRINK_GRID = RIDGE_GRID + (1e3, 1e4)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Static settings of the anchor methods (hashable; shapes and step counts).

    Attributes:
      proxy_steps: Adam steps of each AIS/CIS proxy MLP (reference 2000).
      final_steps: Adam steps of the final MLP (reference 20000).
      init_steps: steps of the MLPs that choose between k-means and random anchors.
      eval_every: checkpoint spacing on validation models.
      num_swaps: AIS/CIS refinement steps R (reference 10).
      guard: keep a swap only when the proxy's validation MSE does not rise.
      kmeans_iters: Lloyd iterations.
      ridge_swaps: AIS/CIS swaps when the proxy is the ridge map.
      greedy_lams: relative ridge strengths tried by greedy selection (the strong
        ones keep the search sane when there are fewer training models than anchors).
      irt: factorization settings.
      external: the target is an external full-benchmark score (calibrate IRT).
      auto_cv_below: ``auto`` chooses its candidate by ``auto_folds``-fold
        cross-validation over the training + validation models (never test models)
        when there are fewer validation models than this (its interval then comes
        from the cross-fitted residuals); else on validation models. Default 100,
        the setting the issue-8 tables were measured with (``bench_anchors.py``). Up
        to the fifteenth session it was 50, held there only because vmapped folds
        could deadlock jaxlib 0.10's CPU thread pool on 2-core machines (the folds now
        run one after another). At 75-85 validation models (MuSR, IFEval, MATH-5; 5
        seeds) cross-validation gave the same MAE within -0.06..+0.01 pp and coverage
        closer to nominal (0.880-0.909 vs 0.854-0.899) than the choice on validation
        models (BUILD_NOTES.md).
      auto_folds: folds of that cross-validation.
      resmlp_steps: AdamW steps of the residual MLP (``greedy_resmlp``).
      resmlp_lr: its learning rate.
      mlp_members: networks averaged by ``greedy_mlp_ens`` (each trained from its own
        initialisation and dropout stream on the same anchors, each with its own
        checkpoint chosen on validation models; member 0 is ``greedy_mlp``'s network).
        Five on metabench MMLU (k = 100, 3 000 steps, seeds 42-46) took the test MAE
        from 1.04 to 1.00 pp, lower on every seed (BUILD_NOTES.md, thirty-second
        session); the training time grows in proportion. ``auto`` weighs this
        ensemble when it chooses on validation models; 1 makes that candidate a
        single network (``greedy_mlp``'s, up to float rounding), 5 times cheaper.
      auto_halves: when ``auto`` chooses on validation models, calibrate its
        interval on residuals that no tuning saw (:func:`crossfit_selected_residuals`:
        the candidate chosen on one half of the validation models, scored on the
        other half) instead of on the validation models its choices were tuned on.
        On by default since the twenty-eighth session (opt-in before): calibrated on
        the tuning models, coverage was 0.891 for a nominal 0.90 on average over
        the 20 metabench cells of BUILD_NOTES.md, on halves 0.907 (widths ~7%
        larger). ``False`` restores the validation calibration and saves the
        halves' refits (per half, the validation-tuned parts of every candidate:
        ridge strengths, greedy pick, low-rank rank, the residual MLP's trainings,
        the reference MLP's checkpoint, retrained only where a half picks other
        greedy anchors): ``fit_anchors`` with default settings on a 2-core CPU took
        1.16x the time on metabench ARC v2 (k = 50) and 1.32x on MMLU (k = 100).
        Matters only at ``auto_cv_below`` or more validation models.
      named_halves: calibrate the interval of a named method of
        :data:`HALVES_METHODS` the same way (its own choices -- ridge strength, greedy
        anchor pick, shrinkage prior, low-rank rank, blend, MLP checkpoint and weight
        decay, SparseEval's start and, with ``guard``, its guarded swaps -- made on one
        half of the validation models, its residuals taken on the other half), instead
        of on the validation models those choices were tuned on. Calibrated on the
        tuning models, the greedy methods covered 0.86-0.88 at a nominal 0.90
        (synthetic splits, 40 validation models; BUILD_NOTES.md, twenty-fifth
        session), the MLP-trained ones 0.86-0.89 (twenty-seventh session). On by
        default; ``False`` restores the plain validation calibration (and saves the
        halves' extra work: for ``random_mlp``, ``greedy_mlp`` and an unguarded
        ``sparseeval`` up to two more trainings where a half's anchors differ from
        the fit's, for ``greedy_resmlp`` and a guarded ``sparseeval`` two refits;
        :func:`crossfit_residuals`).
    """

    proxy_steps: int = 2000
    final_steps: int = 20000
    init_steps: int = 2000
    eval_every: int = 100
    num_swaps: int = 10
    guard: bool = False
    kmeans_iters: int = 50
    ridge_swaps: int = 30
    greedy_lams: tuple = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
    irt: IRTConfig = IRTConfig()
    external: bool = False
    auto_cv_below: int = 100
    auto_folds: int = 5
    resmlp_steps: int = 2000
    resmlp_lr: float = 1e-3
    mlp_members: int = 5
    auto_halves: bool = True
    named_halves: bool = True


class SplitData(NamedTuple):
    """One split's arrays: training and validation scores ``[m, n]`` and targets ``[m]``."""

    s_tr: jax.Array
    y_tr: jax.Array
    s_val: jax.Array
    y_val: jax.Array


class Fitted(eqx.Module):
    """A fitted method: its anchors, its map kind (static) and the map's parameters."""

    anchors: jax.Array
    kind: str = eqx.field(static=True)
    params: dict = eqx.field(default_factory=dict)


def apply_map(fitted: Fitted, x: jax.Array) -> jax.Array:
    """Predicted accuracy ``[m]`` from anchor scores ``x [m, k]`` (anchor order).

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> rng = np.random.default_rng(0)
      >>> s = jnp.asarray(rng.random((60, 40)) < rng.uniform(0.2, 0.9, 60)[:, None],
      ...                 jnp.float32)  # 60 models x 40 items
      >>> y, x = s.mean(axis=1), s[:, :8]  # accuracies; the first 8 items as anchors
      >>> from jaxeval.anchors import Fitted, apply_map, fit_ridge
      >>> f = Fitted(anchors=jnp.arange(8), kind="linear",
      ...            params={"lin": fit_ridge(x[:40], y[:40], jnp.asarray(1.0))})
      >>> apply_map(f, s[40:, f.anchors]).shape
      (20,)
    """
    p = fitted.params
    kind = fitted.kind
    if kind == "weighted_mean":
        return x @ p["w"]
    if kind == "linear":
        return apply_linear(p["lin"], x)
    if kind in ("mlp", "mlp_mean"):
        static = init_mlp(jax.random.key(0), x.shape[1])[1]
        if kind == "mlp":
            return mlp_apply(p["mlp"], static, x)
        return jnp.mean(jax.vmap(lambda q: mlp_apply(q, static, x))(p["mlp"]), axis=0)
    if kind == "resmlp":
        static = init_mlp(jax.random.key(0), x.shape[1], hidden=RES_HIDDEN)[1]
        base = jnp.clip(apply_linear(p["lin"], x), 0.0, 1.0)
        return mlp_apply(p["mlp"], static, x, base=base)
    if kind in ("irt", "blend"):
        pirt = pirt_estimate(p["F"], fitted.anchors, x, p["rho"])
        if kind == "irt":
            est = p["lam"] * (x @ p["w"]) + (1 - p["lam"]) * pirt
            return p["cal"][0] * est + p["cal"][1]
        cal = p["cal"][0] * pirt + p["cal"][1]
        return p["beta"] * apply_linear(p["lin"], x) + (1 - p["beta"]) * cal
    raise ValueError(f"unknown map kind {kind!r}")


# ----------------------------------------------------------------- map fitting
def _mse(a, b):
    return jnp.mean((a - b) ** 2)


def nan_last_argmin_traced(err: jax.Array, axis: int = -1) -> jax.Array:
    """``jnp.argmin`` with NaN as the worst error (``jnp.argmin`` picks a NaN entry), so
    a method whose fit failed is never chosen over one with a finite error (the rule of
    :func:`jaxeval.anchors._protocol.nan_last_argmin`, traced)."""
    return jnp.argmin(jnp.where(jnp.isnan(err), jnp.inf, err), axis=axis)


def _fit_ridge_map(anchors, d: SplitData) -> Fitted:
    lin, lam, _ = fit_ridge_validated(d.s_tr[:, anchors], d.y_tr, d.s_val[:, anchors], d.y_val)
    return Fitted(anchors, "linear", {"lin": lin, "lam": lam})


def _fit_shrunk_map(anchors, d: SplitData) -> Fitted:
    """Ridge shrunk toward the plain anchor mean, or toward zero: both on validation.

    With the prior ``w0 = 1/k`` the ridge fits the residual ``y - x @ w0``, so strong
    shrinkage gives the (intercept-corrected) random-mean estimator and weak shrinkage
    the plain ridge map; the prior (``w0`` or 0) and the strength are chosen on
    validation models. The result is an ordinary ``"linear"`` map.
    """
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    k = anchors.shape[0]
    w0 = jnp.full((k,), 1.0 / k, x_tr.dtype)
    lams = jnp.asarray(SHRINK_GRID, x_tr.dtype)
    lin0, lam0, mse0 = fit_ridge_validated(x_tr, d.y_tr, x_val, d.y_val, lams)
    lin1, lam1, mse1 = fit_ridge_validated(
        x_tr, d.y_tr - x_tr @ w0, x_val, d.y_val - x_val @ w0, lams
    )
    lin1 = LinearMap(lin1.w + w0, lin1.b)
    use1 = mse1 <= mse0
    lin = jax.tree.map(lambda a, b: jnp.where(use1, a, b), lin1, lin0)
    return Fitted(anchors, "linear", {"lin": lin, "lam": jnp.where(use1, lam1, lam0)})


def _fit_lowrank_map(basis, anchors, d: SplitData, st: Settings) -> Fitted:
    """The low-rank difference estimator (rank and noise chosen on validation)."""
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    lin, _ = fit_lowrank_validated(basis, anchors, x_tr, d.y_tr, x_val, d.y_val, st.external)
    return Fitted(anchors, "linear", {"lin": lin, "lam": jnp.asarray(0.0, x_tr.dtype)})


def _fit_mix_map(shrunk: Fitted, lowrank: Fitted) -> Fitted:
    """Equal-weight average of the shrunk ridge and the low-rank estimator (still linear).

    Both maps (fitted on the same anchors) make their own choices on validation
    models; averaging two estimators whose errors are not perfectly correlated lowers
    the variance without another validation-tuned weight (which would make the
    validation error optimistic).
    """
    a, b = shrunk.params["lin"], lowrank.params["lin"]
    lin = LinearMap(0.5 * (a.w + b.w), 0.5 * (a.b + b.b))
    return Fitted(shrunk.anchors, "linear", {"lin": lin, "lam": jnp.asarray(0.0, a.w.dtype)})


def _fit_mlp_map(key, anchors, d: SplitData, st: Settings, cache: dict | None = None,
                 name: str = "", ensemble: bool = False) -> Fitted:
    """The reference MLP on ``anchors`` (map kind ``"mlp"``), or with ``ensemble`` the
    average of ``st.mlp_members`` of them (``"mlp_mean"``, :func:`_train_final_mlps`).
    With a ``cache``, the validation-prediction path (``[C + 1, m]``, an ensemble's
    ``[E, C + 1, m]``) is kept there as ``"path:" + name`` (``(anchors, path)``, see
    :func:`crossfit_residuals`)."""
    train = _train_final_mlps if ensemble else _train_final_mlp
    fit = train(key, anchors, d, st, return_path=cache is not None)
    if cache is not None:
        cache["path:" + name] = (anchors, fit.val_path)
    return Fitted(anchors, "mlp_mean" if ensemble else "mlp",
                  {"mlp": fit.params, "best_step": fit.best_step})


def _train_final_mlp(key, anchors, d: SplitData, st: Settings, return_path: bool):
    """The training of :func:`_fit_mlp_map` (its :class:`MLPFit`)."""
    fit, _ = train_mlp(key, d.s_tr[:, anchors], d.y_tr, d.s_val[:, anchors], d.y_val,
                       num_steps=st.final_steps, eval_every=st.eval_every,
                       return_path=return_path)
    return fit


def _member_keys(key, members: int):
    """Keys of an ensemble's members: ``key`` itself first (see :data:`_K_MEMBER`)."""
    return jnp.stack([key] + [jax.random.fold_in(key, _K_MEMBER + e)
                              for e in range(1, members)])


def _train_final_mlps(key, anchors, d: SplitData, st: Settings, return_path: bool):
    """``st.mlp_members`` trainings of :func:`_train_final_mlp` on the same anchors, one
    after the other (``lax.map``: one network's temporaries at a time); every field
    of the :class:`MLPFit` gets a leading member axis."""
    return jax.lax.map(lambda kk: _train_final_mlp(kk, anchors, d, st, return_path),
                       _member_keys(key, st.mlp_members))


def _path_prediction(path, rows, y):
    """A path method's prediction of every validation model when its checkpoint is
    chosen on the models ``rows`` (targets ``y``), the trainer's rule (earliest
    best): ``path [C + 1, m]`` of one network, or ``[E, C + 1, m]`` of an ensemble
    (each member's own checkpoint, the members averaged)."""
    if path.ndim == 3:
        j = jnp.argmin(jax.vmap(lambda q: _checkpoint_mses(q, rows, y))(path), axis=1)
        return jnp.mean(path[jnp.arange(path.shape[0]), j], axis=0)
    return path[jnp.argmin(_checkpoint_mses(path, rows, y))]


def _checkpoint_mses(path, rows, y):
    """MSE of every checkpoint of a validation ``path`` on its validation models ``rows``
    (targets ``y``): what the trainer's checkpoint rule compares."""
    return jnp.mean((path[:, rows] - y) ** 2, axis=1)


def _fit_resmlp_map(key, shrunk: Fitted, d: SplitData, st: Settings) -> Fitted:
    """A regularised, early-stopped MLP on top of the shrunk ridge map.

    The network (``k -> 32 -> 16 -> 1``, GELU, dropout 0.1) corrects the ridge
    prediction in logit space and starts as the zero correction, so its step-0
    checkpoint *is* the ridge map: the validation checkpoint rule (every
    ``eval_every`` steps) can only move away from ridge when that lowers the
    validation error. The decoupled weight decay is chosen on validation models from
    :data:`RESMLP_DECAYS` (the trainings for the decays are vmapped).
    """
    anchors, lin = shrunk.anchors, shrunk.params["lin"]
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    b_tr = jnp.clip(apply_linear(lin, x_tr), 0.0, 1.0)
    b_val = jnp.clip(apply_linear(lin, x_val), 0.0, 1.0)
    decays = jnp.asarray(RESMLP_DECAYS, x_tr.dtype)

    def train(wd):
        fit, _ = train_mlp(
            key, x_tr, d.y_tr, x_val, d.y_val,
            num_steps=st.resmlp_steps, eval_every=st.eval_every,
            learning_rate=st.resmlp_lr, weight_decay=wd, hidden=RES_HIDDEN,
            base_tr=b_tr, base_val=b_val,
        )
        return fit

    fits = jax.vmap(train)(decays)
    i = jnp.argmin(fits.best_val)
    mlp = jax.tree.map(lambda a: a[i], fits.params)
    params = {"lin": lin, "mlp": mlp, "best_step": fits.best_step[i], "decay": decays[i]}
    return Fitted(anchors, "resmlp", params)


def _calibration(est, y, external: bool):
    if not external:
        return jnp.array([1.0, 0.0], est.dtype)
    lin = fit_ridge(est[:, None], y, 1e-6)
    return jnp.stack([lin.w[0], lin.b])


def _fit_irt_map(F, anchors, w, d: SplitData, st: Settings, gp: bool) -> Fitted:
    rho = jnp.asarray(st.irt.rho_online, d.s_tr.dtype)
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    p_tr = pirt_estimate(F, anchors, x_tr, rho)
    p_val = pirt_estimate(F, anchors, x_val, rho)
    lams = jnp.asarray(_WEIGHT_GRID if gp else (0.0,), d.s_tr.dtype)

    def for_lam(lam):
        cal = _calibration(lam * (x_tr @ w) + (1 - lam) * p_tr, d.y_tr, st.external)
        pred = cal[0] * (lam * (x_val @ w) + (1 - lam) * p_val) + cal[1]
        return _mse(pred, d.y_val), cal

    errs, cals = jax.vmap(for_lam)(lams)
    i = jnp.argmin(errs)
    return Fitted(anchors, "irt", {"F": F, "rho": rho, "lam": lams[i], "w": w, "cal": cals[i]})


def _fit_blend_map(F, anchors, d: SplitData, st: Settings) -> Fitted:
    rho = jnp.asarray(st.irt.rho_online, d.s_tr.dtype)
    ridge = _fit_ridge_map(anchors, d)
    x_tr, x_val = d.s_tr[:, anchors], d.s_val[:, anchors]
    p_tr = pirt_estimate(F, anchors, x_tr, rho)
    cal = _calibration(p_tr, d.y_tr, st.external)
    c_val = cal[0] * pirt_estimate(F, anchors, x_val, rho) + cal[1]
    r_val = apply_linear(ridge.params["lin"], x_val)
    betas = jnp.asarray(_WEIGHT_GRID, d.s_tr.dtype)
    errs = jax.vmap(lambda b: _mse(b * r_val + (1 - b) * c_val, d.y_val))(betas)
    beta = betas[jnp.argmin(errs)]
    params = {"F": F, "rho": rho, "cal": cal, "lin": ridge.params["lin"], "beta": beta}
    return Fitted(anchors, "blend", params)


# ------------------------------------------------------------------ selectors
def _uniform(k, dtype):
    return jnp.full((k,), 1.0 / k, dtype)


def _val_mse(f: Fitted, d: SplitData):
    return _mse(apply_map(f, d.s_val[:, f.anchors]), d.y_val)


def _ridge_proxy(key, x, y):
    lin = fit_ridge(x, y, 1e-2)
    return lambda v: apply_linear(lin, v)


def _sparseeval_anchors(key, d: SplitData, k: int, st: Settings, sh, reuse=None,
                        rows=None):
    """SparseEval anchors: k-means or random start (chosen on validation) + AIS/CIS.

    ``sh``: the fit's :class:`_Shared` (its k-means and random anchors are the
    starts). ``reuse``: ``(use_km, anchors, path_km, path_rd)`` of a fit
    of the same split and key with other validation models (the start, anchors and
    validation paths of the two start MLPs on that fit's validation models), with
    ``rows`` the indices of this fit's validation models among those: the start is
    then chosen from the paths (no start training: the trainings never see
    validation models), and without the validation guard, which alone makes the
    refinement look at validation models, the anchors are reused when the start is
    the same (``lax.cond``); the trace is then None.

    Returns ``(anchors, use_km, trace, (path_km, path_rd))``; with ``rows`` the paths
    are ``reuse``'s (on its validation models), passed on unchanged.
    """
    a_km, a_rd = sh.a_km, sh.a_rand

    def init_fit(a, i):
        fit, _ = train_mlp(
            jax.random.fold_in(jax.random.fold_in(key, _K_MLP), i),
            d.s_tr[:, a], d.y_tr, d.s_val[:, a], d.y_val,
            num_steps=st.init_steps, eval_every=st.eval_every, return_path=True,
        )
        return fit.best_val, fit.val_path

    if reuse is not None and rows is not None:
        paths = reuse[2:]
        v_km, v_rd = (jnp.min(_checkpoint_mses(p, rows, d.y_val)) for p in paths)
    else:
        (v_km, p_km), (v_rd, p_rd) = init_fit(a_km, 0), init_fit(a_rd, 1)
        paths = (p_km, p_rd)
    use_km = v_km <= v_rd
    a0 = jnp.where(use_km, a_km, a_rd)

    def fit_proxy(pkey, x, y):
        fit, static = train_mlp(
            pkey, x, y, x[:1], y[:1],
            num_steps=st.proxy_steps, eval_every=st.eval_every, use_validation=False,
        )
        return lambda v: mlp_apply(fit.params, static, v[None, :])[0]

    def refine(a0):
        return refine_anchors(
            jax.random.fold_in(key, _K_REFINE), a0, d.s_tr, d.y_tr, d.s_val, d.y_val,
            fit_proxy, num_swaps=st.num_swaps, guard=st.guard,
        )

    if reuse is not None and not st.guard:
        km_before, anchors_before = reuse[:2]
        anchors = jax.lax.cond(use_km == km_before, lambda: anchors_before,
                               lambda: refine(a0)[0])
        return anchors, use_km, None, paths
    anchors, trace = refine(a0)
    return anchors, use_km, trace, paths


def _greedy_candidates(d: SplitData, k: int, st: Settings):
    """Greedy leave-one-out ridge anchors, one set per ``st.greedy_lams`` (training only)."""
    lams = jnp.asarray(st.greedy_lams, d.s_tr.dtype)
    return jax.vmap(lambda lam: greedy_ridge_anchors(d.s_tr, d.y_tr, k, lam))(lams)


def _greedy_pick(cands, d: SplitData):
    """The greedy anchor set whose ridge map has the lowest validation MSE."""
    errs = jax.vmap(lambda a: _val_mse(_fit_ridge_map(a, d), d))(cands)
    return cands[jnp.argmin(errs)]


def _aiscis_ridge(key, a0, d: SplitData, st: Settings):
    """AIS/CIS swaps with a ridge proxy, guarded by the training leave-one-out error.

    Validation models are not used (a validation guard would make the validation
    error of the result optimistic, which misleads ``auto`` and the interval).
    """
    loo = lambda anc: jnp.mean(loo_ridge_residuals(d.s_tr[:, anc], d.y_tr, 1e-2) ** 2)
    anchors, _ = refine_anchors(
        key, a0, d.s_tr, d.y_tr, d.s_tr[:1], d.y_tr[:1], _ridge_proxy,
        num_swaps=st.ridge_swaps, guard=True, guard_score=loo,
    )
    return anchors


#: Every method name understood by :func:`fit_method`.
METHODS = (
    "random_mean",
    "anchor_points",
    "random_linear",
    "random_ridge",
    "kmeans_ridge",
    "random_mlp",
    "sparseeval",
    "sparseeval_ridge",
    "pirt",
    "gpirt",
    "greedy_ridge",
    "aiscis_ridge",
    "kmeans_blend",
    "greedy_blend",
    "random_shrunk",
    "greedy_shrunk",
    "random_lowrank",
    "greedy_lowrank",
    "greedy_mix",
    "greedy_resmlp",
    "greedy_mlp",
    "greedy_mlp_ens",
)

#: Named methods whose interval is calibrated on validation halves
#: (``Settings.named_halves``): every method that chooses something on the validation
#: models (ridge strength, greedy anchor pick, shrinkage, rank, blend weight, MLP
#: checkpoint and weight decay, SparseEval's k-means-or-random start). Left out
#: (:data:`_NOT_HALVED`): the methods that make no choice on validation models, whose
#: validation residuals are already exchangeable with test residuals. The refits
#: reuse the fit's training-only pieces (:data:`TRAIN_ONLY`); a method of
#: :data:`PATH_METHODS` retrains only where a half's anchors are not the fit's
#: (:data:`REUSED`; ``greedy_resmlp``, whose base map is tuned on validation models,
#: and a guarded ``sparseeval``'s refinement are refitted on each half): on MuSR
#: (k = 100, seed 0, default settings) ``random_mlp`` took 1.05x the time of its
#: plain fit, ``greedy_mlp`` 1.7x and ``sparseeval`` 1.9x (there a half picked other
#: greedy anchors, another SparseEval start, and retrained).
_NOT_HALVED = ("random_mean", "anchor_points", "random_linear", "pirt")
HALVES_METHODS = tuple(m for m in METHODS if m not in _NOT_HALVED)


def halved_methods(methods, st: Settings) -> tuple:
    """The methods of ``methods`` whose interval ``st`` calibrates on validation halves
    (``Settings.named_halves``), in their order: what ``evaluate_protocol`` reports
    as ``info["named_halves"]``."""
    return tuple(m for m in methods if m in HALVES_METHODS) if st.named_halves else ()

#: Candidates of ``method="auto"`` (chosen by validation MSE, or by cross-validation
#: over training + validation models when validation is small, see :class:`Settings`).
AUTO_CANDIDATES = (
    "kmeans_ridge",
    "greedy_ridge",
    "aiscis_ridge",
    "kmeans_blend",
    "greedy_blend",
    "random_shrunk",
    "greedy_shrunk",
    "greedy_lowrank",
    "greedy_mix",
)


#: Extra candidates of ``auto`` when it chooses on validation models (at least
#: ``Settings.auto_cv_below`` of them: the large-data regime, where a small MLP
#: correction of the ridge map, or the reference MLP on the greedy anchors, can pay;
#: neither is cross-validated below that). ``greedy_mlp_ens`` trains
#: ``Settings.mlp_members`` (5) reference MLPs for ``Settings.final_steps`` each
#: (20 000 by default: on metabench MMLU, 3 400 training models, k = 100, ~2.5 min
#: of a 2-core CPU per network, against ~20 s for ``greedy_resmlp``);
#: ``Settings(mlp_members=1)`` makes it ``greedy_mlp``'s single network again (up to
#: float rounding; the candidate of the eighth to thirty-third sessions). It replaced
#: ``greedy_mlp`` here after the metabench cells of the issue-8 table were rerun with it
#: (BUILD_NOTES.md).
AUTO_VALIDATION_EXTRA = ("greedy_resmlp", "greedy_mlp_ens")


def checked_settings(settings, external: bool, auto: bool = True) -> Settings:
    """``settings`` (default :class:`Settings`) with ``external`` set, checked where a
    bad value would fail deep inside a fit with another argument's name (``auto``:
    whether ``"auto"``, the only user of ``auto_*``, will run)."""
    if settings is None:
        settings = Settings()
    if not isinstance(settings, Settings):
        raise TypeError(f"settings: expected jaxeval.anchors.Settings(...), got "
                        f"{type(settings).__name__}")

    def real(x: Any) -> bool:
        return (isinstance(x, (int, float, np.integer, np.floating))
                and not isinstance(x, (bool, np.bool_)) and bool(np.isfinite(x)))

    st, irt = settings, settings.irt
    # the checked counts are kept as Python ints: the settings are a static (hashed)
    # argument of the compiled fits, which a 0-d array could not be
    ints = {name: check_int(f"settings.{name}", getattr(st, name), lo, 2**31 - 1)
            for name, lo in (("proxy_steps", 1), ("final_steps", 1), ("init_steps", 1),
                             ("eval_every", 1), ("resmlp_steps", 1), ("num_swaps", 0),
                             ("ridge_swaps", 0), ("kmeans_iters", 0))}
    irt_ints = {name: check_int(f"settings.irt.{name}", getattr(irt, name), 1, 2**31 - 1)
                for name in ("rank", "num_steps")}
    if auto:  # only "auto" reads them (a float or None failed in its fit, unnamed)
        ints["auto_folds"] = check_int("settings.auto_folds", st.auto_folds, 3)
        ints["auto_cv_below"] = check_int("settings.auto_cv_below", st.auto_cv_below, 0)
    # one key per member is built while tracing: a count no ensemble needs is refused
    ints["mlp_members"] = check_int("settings.mlp_members", st.mlp_members, 1, 1000)
    for name, v, lo in (("resmlp_lr", st.resmlp_lr, 0.0), ("irt.learning_rate",
                                                          irt.learning_rate, 0.0)):
        if not real(v) or not v > lo:
            raise ValueError(f"settings.{name}: expected a finite value > {lo:g}, got {v!r}")
    for name, v in (("irt.rho_u", irt.rho_u), ("irt.rho_v", irt.rho_v),
                    ("irt.rho_online", irt.rho_online)):
        if not real(v) or v < 0:
            raise ValueError(f"settings.{name}: expected a finite value >= 0, got {v!r}")
    try:
        lams = np.atleast_1d(np.asarray(st.greedy_lams, dtype=float))
    except (TypeError, ValueError):
        lams = np.array([np.nan])
    if lams.ndim != 1 or lams.size == 0 or not (np.isfinite(lams).all() and (lams > 0).all()):
        raise ValueError(f"settings.greedy_lams: expected relative ridge strengths > 0 (0 "
                         f"leaves nothing to rank constant items by), got {st.greedy_lams!r}")
    for name in ("guard", "auto_halves", "named_halves"):  # ("False" would be truthy)
        if not isinstance(getattr(st, name), (bool, np.bool_)):
            raise ValueError(f"settings.{name}: expected True or False, got "
                             f"{getattr(st, name)!r}")
    # kept as a tuple of floats: a scalar failed in a vmap deep inside the greedy search,
    # and a list was refused as jit's static argument (Settings is one)
    return dataclasses.replace(settings, external=bool(external), **ints,
                               greedy_lams=tuple(float(v) for v in lams),
                               irt=irt._replace(**irt_ints))


def check_level(alpha) -> float:
    """``alpha`` as a float in (0, 1): a Python, NumPy or 0-d array real number."""
    a = np.asarray(alpha) if not isinstance(alpha, (str, bytes)) else None
    if (a is None or a.ndim != 0 or a.dtype == bool
            or not np.issubdtype(a.dtype, np.number) or np.iscomplexobj(a)
            or not 0 < float(a) < 1):
        raise ValueError(f"alpha: expected a level in (0, 1), got {alpha!r}")
    return float(a)


def min_models(method: str) -> int:
    """The fewest training (and validation) models a method is fitted with."""
    return 4 if method in ("random_mean", "anchor_points") else 8


def auto_candidates(n_validation: int, st: Settings) -> tuple:
    """The candidates ``auto`` chooses among for ``n_validation`` validation models:
    :data:`AUTO_CANDIDATES`, plus :data:`AUTO_VALIDATION_EXTRA` (the MLP-trained maps)
    from ``st.auto_cv_below`` validation models on.

    Example:
      >>> from jaxeval.anchors import AUTO_CANDIDATES, Settings, auto_candidates
      >>> auto_candidates(30, Settings()) == AUTO_CANDIDATES
      True
      >>> auto_candidates(300, Settings())[len(AUTO_CANDIDATES):]
      ('greedy_resmlp', 'greedy_mlp_ens')
    """
    if n_validation < st.auto_cv_below:
        return AUTO_CANDIDATES
    return AUTO_CANDIDATES + AUTO_VALIDATION_EXTRA


class _Shared(NamedTuple):
    a_rand: jax.Array
    a_km: jax.Array
    w_km: jax.Array


def _shared(key, d: SplitData, k: int, st: Settings) -> _Shared:
    n = d.s_tr.shape[1]
    a_rand = random_anchors(jax.random.fold_in(key, _K_RANDOM), n, k)
    a_km, w_km = kmeans_anchors(jax.random.fold_in(key, _K_KMEANS), d.s_tr, k, st.kmeans_iters)
    return _Shared(a_rand, a_km, w_km)


def fit_method(
    key: jax.Array, d: SplitData, k: int, method: str, st: Settings, cache: dict | None = None,
    anchors_only: bool = False,
) -> Fitted:
    """Fit one method on one split (pure, jittable; ``k``, ``method``, ``st`` static).

    ``cache`` (a dict, filled inside one trace) shares the expensive pieces between
    methods fitted in the same kernel: the random and k-means anchors, the item
    factors, the SparseEval and greedy anchors, and the shrunk-ridge and low-rank maps
    on the greedy anchors (which ``greedy_mix`` and ``greedy_resmlp`` build on); and
    what :func:`crossfit_residuals` reuses (:data:`REUSED`). ``anchors_only``: for
    the methods of :data:`PATH_METHODS`, return their anchors (an array), not a fit.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval.anchors import Settings, SplitData, apply_map, fit_method
      >>> s = jax.random.bernoulli(jax.random.key(0), 0.5, (40, 30)).astype(jnp.float32)
      >>> d = SplitData(s[:30], s[:30].mean(1), s[30:], s[30:].mean(1))
      >>> f = fit_method(jax.random.key(1), d, 5, "random_ridge", Settings())
      >>> apply_map(f, s[30:, f.anchors]).shape
      (10,)
    """
    k = check_k(k, d.s_tr.shape[1])
    c = {} if cache is None else cache
    dt = d.s_tr.dtype
    if "shared" not in c:
        c["shared"] = _shared(key, d, k, st)
    sh = c["shared"]

    def factors():
        if "F" not in c:
            c["F"] = fit_item_factors(jax.random.fold_in(key, _K_IRT), d.s_tr, st.irt)
        return c["F"]

    def greedy():
        if "greedy_cands" not in c:
            c["greedy_cands"] = _greedy_candidates(d, k, st)
        if "greedy" not in c:
            c["greedy"] = _greedy_pick(c["greedy_cands"], d)
        return c["greedy"]

    def aiscis():
        if "aiscis" not in c:
            c["aiscis"] = _aiscis_ridge(jax.random.fold_in(key, _K_REFINE), sh.a_km, d, st)
        return c["aiscis"]

    def basis():
        if "basis" not in c:
            c["basis"] = lowrank_basis(d.s_tr)
        return c["basis"]

    def greedy_shrunk():  # shared by greedy_shrunk, greedy_mix and greedy_resmlp
        if "greedy_shrunk" not in c:
            c["greedy_shrunk"] = _fit_shrunk_map(greedy(), d)
        return c["greedy_shrunk"]

    def greedy_lowrank():  # shared by greedy_lowrank and greedy_mix
        if "greedy_lowrank" not in c:
            c["greedy_lowrank"] = _fit_lowrank_map(basis(), greedy(), d, st)
        return c["greedy_lowrank"]

    def sparseeval():
        if "se" not in c:
            anchors, use_km, _, paths = _sparseeval_anchors(
                key, d, k, st, sh, c.get("se_start"), c.get("val_rows"))
            c["se"] = anchors
            c.setdefault("se_start", (use_km, anchors, *paths))
        return c["se"]

    if anchors_only:
        if method not in PATH_METHODS:
            raise ValueError(f"anchors_only: for {PATH_METHODS}, got {method!r}")
        return {"random_mlp": lambda: sh.a_rand, "sparseeval": sparseeval,
                "greedy_mlp": greedy, "greedy_mlp_ens": greedy}[method]()
    if method == "random_mean":
        return Fitted(sh.a_rand, "weighted_mean", {"w": _uniform(k, dt)})
    if method == "anchor_points":
        return Fitted(sh.a_km, "weighted_mean", {"w": sh.w_km})
    if method == "random_linear":
        lin = fit_ridge(d.s_tr[:, sh.a_rand], d.y_tr, 1e-6)
        return Fitted(sh.a_rand, "linear", {"lin": lin, "lam": jnp.asarray(1e-6, dt)})
    if method == "random_ridge":
        return _fit_ridge_map(sh.a_rand, d)
    if method == "kmeans_ridge":
        return _fit_ridge_map(sh.a_km, d)
    if method == "random_mlp":
        return _fit_mlp_map(jax.random.fold_in(key, _K_FINAL), sh.a_rand, d, st, c, method)
    if method == "sparseeval":
        return _fit_mlp_map(jax.random.fold_in(key, _K_FINAL), sparseeval(), d, st, c, method)
    if method == "sparseeval_ridge":
        return _fit_ridge_map(sparseeval(), d)
    if method == "pirt":
        return _fit_irt_map(factors(), sh.a_km, sh.w_km, d, st, gp=False)
    if method == "gpirt":
        return _fit_irt_map(factors(), sh.a_km, sh.w_km, d, st, gp=True)
    if method == "greedy_ridge":
        return _fit_ridge_map(greedy(), d)
    if method == "aiscis_ridge":
        return _fit_ridge_map(aiscis(), d)
    if method == "kmeans_blend":
        return _fit_blend_map(factors(), sh.a_km, d, st)
    if method == "greedy_blend":
        return _fit_blend_map(factors(), greedy(), d, st)
    if method == "random_shrunk":
        return _fit_shrunk_map(sh.a_rand, d)
    if method == "greedy_shrunk":
        return greedy_shrunk()
    if method == "random_lowrank":
        return _fit_lowrank_map(basis(), sh.a_rand, d, st)
    if method == "greedy_lowrank":
        return greedy_lowrank()
    if method == "greedy_mix":
        return _fit_mix_map(greedy_shrunk(), greedy_lowrank())
    if method == "greedy_resmlp":
        return _fit_resmlp_map(jax.random.fold_in(key, _K_FINAL), greedy_shrunk(), d, st)
    if method == "greedy_mlp":
        return _fit_mlp_map(jax.random.fold_in(key, _K_FINAL), greedy(), d, st, c, method)
    if method == "greedy_mlp_ens":
        return _fit_mlp_map(jax.random.fold_in(key, _K_FINAL), greedy(), d, st, c, method,
                            ensemble=True)
    raise ValueError(f"method must be one of {METHODS + ('auto',)}, got {method!r}")


# ------------------------------------- auto's interval when it chooses on validation
#: Entries of :func:`fit_method`'s cache that depend on the training models (and the
#: key) only, never on validation models: refits of the same split with other
#: validation models reuse them.
TRAIN_ONLY = ("shared", "F", "basis", "greedy_cands", "aiscis")

#: Methods whose only validation choice, given their anchors, is the MLP checkpoint:
#: :func:`crossfit_residuals` chooses it on each half from the full fit's validation
#: path instead of retraining when the half's anchors are the fit's.
PATH_METHODS = ("random_mlp", "sparseeval", "greedy_mlp", "greedy_mlp_ens")

#: Entries of :func:`fit_method`'s cache that depend on validation models and that
#: :func:`crossfit_residuals` reuses knowingly: SparseEval's start, anchors and
#: start-MLP validation paths (``"se_start"``: a half chooses its start from the
#: paths and reuses the anchors when it picks the same start) and each
#: :data:`PATH_METHODS` fit's ``"path:<method>"`` (its anchors and validation path).
REUSED = ("se_start",) + tuple("path:" + m for m in PATH_METHODS)


def validation_halves(n_validation: int, seed: int):
    """Two disjoint halves (index arrays of ``n_validation // 2`` each) of the validation models.

    A seeded permutation (``numpy.random.default_rng(seed)``), so a validation set
    listed in some order (say, by model family) is still cut at random; with an odd
    count one model is left out of both.
    """
    import numpy as np

    if n_validation < 2:
        raise ValueError(f"validation: need at least 2 models to halve, got {n_validation}")
    perm = np.random.default_rng(seed).permutation(n_validation)
    h = n_validation // 2
    return perm[:h], perm[h:2 * h]


def crossfit_selected_residuals(
    key, d: SplitData, k: int, methods: tuple, st: Settings, idx_a, idx_b,
    cache: dict | None = None,
):
    """Residuals of the candidate chosen on one validation half, on the other half.

    What ``auto``'s interval is calibrated on when it chooses on validation models.
    The validation models are cut into halves ``A`` and ``B`` (equal-length index
    arrays). For each half every method of ``methods`` is refitted with that half as
    its validation set (ridge strengths, greedy strength, low-rank rank, MLP
    checkpoint and weight decay: every choice a method makes on validation models),
    the method with the lowest MSE on that half is picked -- ``auto``'s rule -- and
    its residuals (clipped prediction minus target) on the *other* half are kept.
    No residual comes from a model that tuned or chose the predictor that made it,
    so the split-conformal quantile of the pooled ``2 h`` residuals does not inherit
    the optimism of choices tuned on the calibration models. The final predictor is
    tuned on all validation models (at least as good as a half-tuned one), so the
    interval errs on the safe side.

    Pure and jittable (``k``, ``methods``, ``st`` static). Pass the ``cache`` of the
    fit on the full split: its training-only entries (:data:`TRAIN_ONLY`: random
    and k-means anchors, item factors, greedy and AIS/CIS anchor searches) are
    reused, so the refits cost only their validation-dependent parts (and the MLP
    trainings of :data:`PATH_METHODS` are reused where a half's anchors are the
    fit's, see :func:`crossfit_residuals`).

    Returns:
      ``(residuals [2, h], picks [2])``: row 0 = chosen on ``A``, scored on ``B``;
      row 1 the reverse; ``picks`` index ``methods``.
    """
    res, mses = crossfit_residuals(key, d, k, methods, st, idx_a, idx_b, cache)
    picks = nan_last_argmin_traced(mses, axis=1)
    return res[jnp.arange(2), picks], picks


def crossfit_residuals(
    key, d: SplitData, k: int, methods: tuple, st: Settings, idx_a, idx_b,
    cache: dict | None = None,
):
    """Every method's half-cross-fitted residuals and fitting-half MSEs.

    Each method of ``methods`` refitted with validation half ``A`` as its validation
    set and scored on half ``B``, and the reverse (:func:`crossfit_selected_residuals`
    picks among them; a named method alone calibrates on its own row,
    ``Settings.named_halves``). One program for all methods: the halves run one after
    the other in a single ``lax.map``, which holds one half's arrays at a time. (It was
    first done to keep independent batched LAPACK calls from being in flight at once,
    which deadlocked jaxlib 0.10.2's CPU thread pool on 2-core machines; BUILD_NOTES
    "Hang on 2-core machines". Every such call now goes through
    :mod:`jaxeval._seqlinalg`, which never batches one.)

    The full fit's :data:`REUSED` cache entries save retraining: a method of
    :data:`PATH_METHODS` whose anchors on a half are the full fit's (always for
    ``random_mlp``; for the others when the half picks the same greedy set, or the
    same SparseEval start without ``guard``) trains the same network (the training
    never sees validation models), so its checkpoint for the half is chosen from the
    full fit's validation path (earliest best, the trainer's rule) instead of by a new
    training; with other anchors it trains on them (``lax.cond``; under ``vmap`` both
    branches run, except for ``random_mlp``, whose anchors are the cached training-only
    ones, so no check is traced). Same residuals as full refits up to rounding.

    Returns:
      ``(residuals [2, len(methods), h], mses [2, len(methods)])``.
    """
    base = {} if cache is None else {n: v for n, v in cache.items()
                                     if n in TRAIN_ONLY or n in REUSED}

    def half(idx):
        fit_idx, ho_idx = idx
        dh = SplitData(d.s_tr, d.y_tr, d.s_val[fit_idx], d.y_val[fit_idx])
        s_ho, y_ho = d.s_val[ho_idx], d.y_val[ho_idx]
        c = dict(base)
        c["val_rows"] = fit_idx  # where dh's validation models are in d's
        mses, rs = [], []
        for name in methods:
            if "path:" + name in base:
                a_full, p_full = base["path:" + name]
                a_h = fit_method(key, dh, k, name, st, c, anchors_only=True)
                if a_h is a_full:  # the same cached array (random_mlp's): no check needed
                    p = p_full
                else:
                    train = _train_final_mlps if p_full.ndim == 3 else _train_final_mlp
                    p = jax.lax.cond(
                        jnp.all(a_h == a_full), lambda p=p_full: p,
                        lambda a=a_h, t=train: t(jax.random.fold_in(key, _K_FINAL), a, d,
                                                 st, return_path=True).val_path)
                pred = _path_prediction(p, fit_idx, dh.y_val)
                pv = jnp.clip(pred[fit_idx], 0.0, 1.0)
                mses.append(_mse(pv, dh.y_val))
                rs.append(jnp.clip(pred[ho_idx], 0.0, 1.0) - y_ho)
                continue
            f = fit_method(key, dh, k, name, st, c)
            pv = jnp.clip(apply_map(f, dh.s_val[:, f.anchors]), 0.0, 1.0)
            mses.append(_mse(pv, dh.y_val))
            rs.append(jnp.clip(apply_map(f, s_ho[:, f.anchors]), 0.0, 1.0) - y_ho)
        return jnp.stack(rs), jnp.stack(mses)

    idx_a, idx_b = jnp.asarray(idx_a), jnp.asarray(idx_b)
    return jax.lax.map(half, (jnp.stack([idx_a, idx_b]), jnp.stack([idx_b, idx_a])))


# ------------------------------------------------------- auto by cross-validation
def cv_folds(d, folds: int, seed: int, what: str = "folds"):
    """Cross-validation splits of the pooled training + validation models (numpy).

    The ``m`` pooled models are permuted with ``default_rng(seed)`` and cut into
    ``folds`` blocks of ``h = m // folds`` (the ``m mod folds`` leftovers only ever
    train). For fold ``f`` block ``f`` is held out, block ``f + 1`` (cyclically) is
    the inner validation set of the candidate's own choices, and the rest trains, so
    every fold has the same shapes (the folds run in one ``lax.map``). Test models are never
    involved: the caller passes training and validation rows only.

    Args:
      d: a :class:`SplitData` of host or device arrays.
      folds: number of folds (>= 3).
      seed: permutation seed.
      what: how errors name ``folds`` (``"settings.auto_folds"`` for ``auto``).

    Returns:
      ``(SplitData [folds, ...], s_ho [folds, h, n], y_ho [folds, h])``.
    """
    import numpy as np

    if folds < 3:
        raise ValueError(f"{what}: expected at least 3, got {folds}")
    s = np.concatenate([np.asarray(d.s_tr), np.asarray(d.s_val)])
    y = np.concatenate([np.asarray(d.y_tr), np.asarray(d.y_val)])
    m = s.shape[0]
    h = m // folds
    if h < 2:
        raise ValueError(f"{what}: {folds} folds of {m} models leave fewer than 2 per fold")
    perm = np.random.default_rng(seed).permutation(m)
    blocks = [perm[f * h:(f + 1) * h] for f in range(folds)]
    rest = perm[folds * h:]
    tr, va, ho = [], [], []
    for f in range(folds):
        g = (f + 1) % folds
        tr.append(np.concatenate([b for i, b in enumerate(blocks) if i not in (f, g)] + [rest]))
        va.append(blocks[g])
        ho.append(blocks[f])
    tr, va, ho = np.stack(tr), np.stack(va), np.stack(ho)
    out = SplitData(s[tr], y[tr], s[va], y[va])
    return out, s[ho], y[ho]


def candidate_cv_residuals(
    key, folds: SplitData, s_ho, y_ho, k: int, methods: tuple, st: Settings
):
    """Held-out residuals ``[len(methods), folds, h]`` of each method refitted on every fold.

    Pure and jittable (``k``, ``methods``, ``st`` static); ``folds`` has a leading
    fold axis as built by :func:`cv_folds`. Predictions are clipped to ``[0, 1]``
    like the protocol's. Residual ``f, i`` is ``prediction - target`` of held-out
    model ``i`` of fold ``f``, from a fit (anchors, map and its validation choices)
    that never saw that model: these cross-fitted residuals give ``auto`` its
    interval when it chooses by cross-validation.
    """

    def one(i, d, s, y):
        fkey = jax.random.fold_in(key, 1000 + i)
        cache: dict = {}
        res = []
        for name in methods:
            f = fit_method(fkey, d, k, name, st, cache)
            pred = jnp.clip(apply_map(f, s[:, f.anchors]), 0.0, 1.0)
            res.append(pred - y)
        return jnp.stack(res)

    n_f = folds.s_tr.shape[0]
    # One fold after another (lax.map), not vmapped: vmapped folds batch every LAPACK
    # call of every candidate, and on 2-core machines jaxlib 0.10.2's concurrent batched
    # LAPACK calls can deadlock XLA's CPU thread pool (MuSR, k = 100: 2 of 2 runs hung;
    # looped: 2 of 2 finished in 28-31 s; BUILD_NOTES "Hang on 2-core machines").
    out = jax.lax.map(lambda a: one(*a), (jnp.arange(n_f), folds, s_ho, y_ho))
    return jnp.moveaxis(out, 0, 1)


def candidate_cv_mse(key, folds: SplitData, s_ho, y_ho, k: int, methods: tuple, st: Settings):
    """Mean held-out MSE ``[len(methods)]`` of each method refitted on every fold.

    The mean square of :func:`candidate_cv_residuals`.
    """
    res = candidate_cv_residuals(key, folds, s_ho, y_ho, k, methods, st)
    return jnp.mean(res**2, axis=(1, 2))
