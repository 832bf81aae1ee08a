"""The anchor evaluation protocol of METHODS.md section 6.2, as code.

For repetition ``r`` the deduplicated matrix is split with seed ``42 + r``
(:meth:`ScoreMatrix.protocol_split`: test = first ``h`` permuted models,
validation = next ``h``, train = the rest); every method is fitted on train (and
validation where its rules say so) and scored on test: MAE in percentage points
and Kendall's tau-b against ``true_score()`` (the external full-benchmark score
when the file has one). All splits of a dataset have the same shapes, so the
seeds are stacked and the whole comparison is one jitted kernel that loops over them
(``lax.map``: each seed's arithmetic is the same whatever other seeds run with it) or,
with ``vmap_seeds=True``, is vmapped over them (faster for the MLP methods, but XLA
rounds a batch of seeds differently from one seed, and k-means' or a greedy search's
discrete choices can amplify that into a different anchor set).

``"auto"`` is scored exactly as a user would get it: per seed, the candidate of
:func:`auto_candidates` with the lowest validation MSE, or, when there are fewer
than ``Settings.auto_cv_below`` validation models, the lowest cross-validated MSE
over the training + validation models (:func:`cv_folds`; test models never enter).
Each method's 90% interval is split-conformal on validation models. ``"auto"``'s
is calibrated on residuals from models that never tuned the predictor that made
them: after a cross-validated choice, the chosen candidate's cross-fitted
residuals (the same residuals chose it among the candidates, so the winner is
slightly favoured; the candidates' errors are highly correlated and the measured
coverage includes it); after a choice on validation models, the residuals of the
candidate chosen on one half of them, on the other half
(:func:`crossfit_selected_residuals`, ``Settings.auto_halves``, on by default; with it
off, the chosen candidate's validation residuals, slightly optimistic).
Coverage and width are measured on test models. For row-mean targets the unbiased estimate
(anchors of ``"auto"`` plus ``m`` random non-anchor items, DR-corrected with the
factorization's predictions) is also scored.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval._data import ScoreMatrix, as_score_matrix
from jaxeval._metrics import kendall_tau_b, mae_pp
from jaxeval._runner import _concrete_int, as_key, check_int, relieve_map_pressure
from jaxeval.anchors._intervals import (
    conformal_quantile,
    dr_estimate,
    level_text,
    sample_non_anchors,
)
from jaxeval.anchors._irt import fit_item_factors, irt_item_predictions
from jaxeval.anchors._methods import (
    AUTO_CANDIDATES,
    METHODS,
    Settings,
    SplitData,
    apply_map,
    auto_candidates,
    candidate_cv_residuals,
    check_level,
    checked_settings,
    crossfit_residuals,
    cv_folds,
    fit_method,
    halved_methods,
    min_models,
    nan_last_argmin_traced,
    validation_halves,
)

__all__ = ["ProtocolResult", "evaluate_protocol", "protocol_kernel"]

_K_DR = 101


def protocol_kernel(
    key: jax.Array,
    d: SplitData,
    s_te: jax.Array,
    k: int,
    methods: tuple,
    st: Settings,
    dr_items: int,
    alpha: float | jax.Array,
    auto_pick: jax.Array | int = -1,
    auto_cands: tuple = AUTO_CANDIDATES,
    halves: tuple | None = None,
    halved: tuple = (),
    auto_halved: bool = True,
):
    """One split: validation and test predictions and anchors of every method.

    Returns a dict of arrays: ``val`` ``[M, h_val]``, ``test`` ``[M, h]``, ``anchors``
    ``[M, k]``, and with ``dr_items > 0`` the unbiased estimate ``dr`` ``[3, h]``
    (estimate, lower, upper) on the anchors of the auto candidate: position
    ``auto_pick`` of the candidates ``auto_cands`` present, or (``auto_pick < 0``) the
    one with the lowest validation MSE (of all methods when none of them is present).
    With ``halves`` (two index arrays into the validation models) also ``half_res``
    ``[2, h]`` and ``half_pick`` ``[2]``: the cross-fitted residuals of the candidate
    chosen on each half (:func:`~jaxeval.anchors._methods.crossfit_selected_residuals`),
    which calibrate ``auto``'s interval when it chooses on validation models (unless
    ``auto_halved`` is False), and ``named_half_res`` ``[len(halved), 2, h]``: the same
    for each named method of ``halved`` alone (``Settings.named_halves``).
    """
    cache: dict = {}
    vals, tests, ancs = [], [], []
    for name in methods:
        f = fit_method(key, d, k, name, st, cache)
        vals.append(apply_map(f, d.s_val[:, f.anchors]))
        tests.append(apply_map(f, s_te[:, f.anchors]))
        ancs.append(f.anchors)
    out = {"val": jnp.stack(vals), "test": jnp.stack(tests), "anchors": jnp.stack(ancs)}
    if halves is not None and (auto_halved or halved):
        # auto's candidates and the halved named methods refitted in one cross-fit (one
        # lax.map over the halves: see crossfit_residuals on the 2-core deadlock)
        present = tuple(m for m in auto_cands if m in methods) if auto_halved else ()
        every = present + tuple(m for m in halved if m not in present)
        res, mses = crossfit_residuals(key, d, k, every, st, halves[0], halves[1], cache)
        if auto_halved:  # crossfit_selected_residuals' pick among auto's candidates
            pick = nan_last_argmin_traced(mses[:, :len(present)], axis=1)
            out["half_res"], out["half_pick"] = res[jnp.arange(2), pick], pick
        if halved:
            out["named_half_res"] = jnp.stack([res[:, every.index(m)] for m in halved])
    if dr_items > 0:
        # auto's candidates that ran; without any, every method run (best on validation)
        auto = [methods.index(m) for m in auto_cands if m in methods] or list(range(len(methods)))
        # clipped to [0, 1] as evaluate_protocol's reported pick is (same choice but
        # for float32-vs-float64 rounding of an exact tie)
        mse = jnp.mean((jnp.clip(out["val"][jnp.array(auto)], 0, 1) - d.y_val) ** 2, axis=1)
        # (NaN last, as evaluate_protocol's nan_last_argmin: never a failed fit's anchors)
        pick = jnp.where(jnp.asarray(auto_pick) >= 0, auto_pick, nan_last_argmin_traced(mse))
        anchors = out["anchors"][jnp.array(auto)][pick]
        F = cache["F"] if "F" in cache else fit_item_factors(
            jax.random.fold_in(key, 5), d.s_tr, st.irt
        )
        preds = irt_item_predictions(F, anchors, s_te[:, anchors], st.irt.rho_online)
        n = s_te.shape[1]
        kdr = jax.random.fold_in(key, _K_DR)

        def one(i, p, s):
            samp = sample_non_anchors(jax.random.fold_in(kdr, i), anchors, n, dr_items)
            return dr_estimate(p, anchors, s[anchors], samp, s[samp], alpha)

        est, lo, hi = jax.vmap(one)(jnp.arange(s_te.shape[0]), preds, s_te)
        out["dr"] = jnp.stack([est, lo, hi])
        out["dr_pick"] = jnp.asarray(auto, jnp.int32)[pick]  # index into ``methods``
    return out


def nan_last_argmin(err: np.ndarray) -> np.ndarray:
    """``argmin`` over the last axis with NaN treated as the worst error (``np.argmin``
    picks a NaN entry), so a candidate whose fit failed is never chosen over a finite one.

    Example:
      >>> nan_last_argmin(np.array([[np.nan, 2.0, 1.0], [3.0, np.nan, 4.0]])).tolist()
      [2, 0]
    """
    err = np.asarray(err, np.float64)
    return np.where(np.isnan(err), np.inf, err).argmin(-1)


def _over_seeds(fn, args, vmap_seeds: bool):
    """``fn`` applied to each seed's slice of ``args`` (leading axis): one ``lax.map``
    iteration per seed (the compiled arithmetic of one seed, whatever the number of
    seeds) or, with ``vmap_seeds``, one vmapped batch."""
    if vmap_seeds:
        return jax.vmap(fn)(*args)
    return jax.lax.map(lambda a: fn(*a), args)


def _kernel_seeds(keys, d, s_te, k, methods, st, dr_items, alpha, picks, cands, halves,
                  vmap_seeds, halved=(), auto_halved=True):
    def one(key, dd, s, pick, hv):
        return protocol_kernel(key, dd, s, k, methods, st, dr_items, alpha, pick, cands, hv,
                               halved, auto_halved)

    return _over_seeds(one, (keys, d, s_te, picks, halves), vmap_seeds)


def _cv_seeds(keys, folds, s_ho, y_ho, k, methods, st, vmap_seeds):
    def one(key, f, s, y):
        return candidate_cv_residuals(key, f, s, y, k, methods, st)

    return _over_seeds(one, (keys, folds, s_ho, y_ho), vmap_seeds)


_kernel_jit = jax.jit(_kernel_seeds, static_argnums=(3, 4, 5, 6, 9, 11, 12, 13))
_cv_jit = jax.jit(_cv_seeds, static_argnums=(4, 5, 6, 7))


@dataclasses.dataclass(frozen=True)
class ProtocolResult:
    """Per-seed results of :func:`evaluate_protocol` (numpy).

    Attributes:
      methods: method names (``"auto"`` last when requested).
      seeds: the split seeds.
      mae_pp, tau_b: ``[methods, seeds]`` test MAE (pp) and Kendall tau-b.
      coverage, width: ``[methods, seeds]`` test coverage and mean width of the
        split-conformal ``1 - alpha`` intervals.
      anchors: ``[methods, seeds, k]`` anchor indices.
      predictions: ``[methods, seeds, test models]`` the test models' predicted scores
        (clipped to [0, 1]), in the order of each seed's test split.
      dr: optional dict with the unbiased estimate's ``mae_pp``, ``coverage`` and
        ``width`` per seed, and ``anchors_of``: the method whose anchors it used, per seed.
      info: dataset, k, settings, seconds, how the seeds ran (``seeds_batched``), auto's
        choices, ``val_mse`` (``[seeds][methods]`` validation MSE of the clipped
        predictions), ``radius`` (``[methods][seeds]`` the intervals' conformal radius).
    """

    methods: tuple
    seeds: tuple
    mae_pp: np.ndarray
    tau_b: np.ndarray
    coverage: np.ndarray
    width: np.ndarray
    anchors: np.ndarray
    dr: dict | None
    info: dict
    predictions: np.ndarray | None = None

    def summary(self) -> str:
        """One line per method: MAE and tau-b mean +- sd, coverage, width."""
        lines = [f"{self.info.get('dataset', '')} k={self.info.get('k')} seeds={len(self.seeds)}"]
        for i, m in enumerate(self.methods):
            lines.append(
                f"  {m:18s} MAE {self.mae_pp[i].mean():6.2f} +- {self.mae_pp[i].std():5.2f}  "
                f"tau {self.tau_b[i].mean():5.3f} +- {self.tau_b[i].std():5.3f}  "
                f"cov {self.coverage[i].mean():5.3f}  width {100 * self.width[i].mean():5.2f} pp"
            )
        if self.dr:
            lines.append(
                f"  {'unbiased (DR)':18s} MAE {self.dr['mae_pp'].mean():6.2f}  "
                f"cov {self.dr['coverage'].mean():5.3f}  "
                f"width {100 * self.dr['width'].mean():5.2f} pp"
            )
        return "\n".join(lines)


def evaluate_protocol(
    sm: ScoreMatrix | Any,
    k: int,
    methods: Sequence[str] = ("random_ridge", "kmeans_ridge", "auto"),
    seeds: Sequence[int] = (42, 43, 44, 45, 46),
    settings: Settings | None = None,
    alpha: float = 0.1,
    dr_items: int = 0,
    dedup: bool = True,
    vmap_seeds: bool = False,
) -> ProtocolResult:
    """Run the METHODS.md 6.2 protocol for several methods over seeded splits.

    Args:
      sm: the complete score matrix (all models): a :class:`~jaxeval.ScoreMatrix`, a
        pandas DataFrame (models as rows, items as columns) or a 2-D array.
      k: number of anchors.
      methods: names from :data:`METHODS`, plus ``"auto"``.
      seeds: split seeds (the protocol uses ``42 + r``).
      settings: static settings (``external`` is set from ``sm.target``).
      alpha: interval level.
      dr_items: extra random items of the unbiased estimate (0 = skip; mean targets only).
        It is built on the anchors of ``auto``'s pick when ``"auto"`` is among
        ``methods``; otherwise on those of the candidate of ``auto`` among ``methods``
        best on validation, or, with none, of the method best on validation.
      dedup: drop duplicate rows first (the protocol does).
      vmap_seeds: vmap the kernel over the seeds instead of looping over them. Faster
        for the MLP methods (~1.3x for ``"sparseeval"``, 10 seeds) and holds every
        seed's arrays at once; but a seed's float32 rounding then depends on how many
        seeds run together (one seed or several), and the k-means and greedy anchor
        choices can turn that into different anchors (TailoredBench GSM8K, k = 100,
        seed 44, ``aiscis_ridge``: 0.04 pp apart with XLA's default CPU thread pool on
        2 cores, 0.34 pp with ``NPROC=32``). The default loop gives each seed the same
        numbers alone or with others. The size of XLA's CPU thread pool (``NPROC``)
        changes the rounding as well, so compare runs made with the same one. (Before
        :mod:`jaxeval._seqlinalg` the vmapped kernel's batched LAPACK calls could
        deadlock jaxlib 0.10.2's CPU pool on 2-core machines; every LAPACK call of the
        anchor programs now runs one matrix at a time, vmapped or not.)

    Returns:
      A :class:`ProtocolResult`.

    Example:
      >>> import numpy as np
      >>> from jaxeval import synthetic_score_matrix
      >>> from jaxeval.anchors import evaluate_protocol
      >>> sm = synthetic_score_matrix(seed=0, n_models=60, n_items=80)
      >>> r = evaluate_protocol(sm, 10, ["random_mean", "random_ridge"], seeds=(42, 43),
      ...                       dr_items=20)
      >>> r.mae_pp.shape, r.anchors.shape  # [methods, seeds], [methods, seeds, k]
      ((2, 2), (2, 2, 10))
      >>> bool(np.all(r.dr["coverage"] >= 0)), r.dr["m"]
      (True, 20)
    """
    import time

    if isinstance(methods, str):
        raise TypeError(f"methods: expected a sequence of method names, got the string "
                        f"{methods!r} (write ({methods!r},))")
    try:
        methods = tuple(methods)
    except TypeError:
        raise TypeError(f"methods: expected a sequence of method names, got {methods!r}") \
            from None
    if not methods:
        raise ValueError("methods: expected at least one method name, got none")
    bad = [m for m in methods if m != "auto" and m not in METHODS]
    if bad:
        raise ValueError(f"methods: unknown {bad}; expected names from {METHODS} or 'auto'")
    if len(set(methods)) != len(methods):
        raise ValueError(f"methods: each name at most once, got {list(methods)}")
    sm = as_score_matrix(sm, "sm")
    sm = sm.drop_duplicates() if dedup else sm
    sm.require_complete("evaluate_protocol")
    k = check_int("k", k, 1, sm.n_items - 1)
    alpha = check_level(alpha)
    dr_items = check_int("dr_items", dr_items, 0, sm.n_items - k)  # the non-anchors
    external = sm.target is not None
    st = checked_settings(settings, external, auto="auto" in methods)
    if isinstance(seeds, (str, bytes)):
        raise TypeError(f"seeds: expected a sequence of split seeds, got {seeds!r}")
    try:
        seeds = tuple(seeds)
    except TypeError:
        raise TypeError(f"seeds: expected a sequence of split seeds such as (42, 43), got "
                        f"{seeds!r}") from None
    if not seeds:
        raise ValueError("seeds: expected at least one split seed, got none")
    ints = [_concrete_int(s) for s in seeds]  # (what protocol_split reads as an int)
    if None not in ints and len(set(ints)) < len(ints):  # (others: protocol_split)
        raise ValueError(f"seeds: each split seed at most once (a repeat would be averaged "
                         f"twice), got {ints}")
    splits = [sm.protocol_split(s) for s in seeds]  # checks each seed (non-negative int)
    # the fewest models fit_anchors fits a method with (it refuses below; the test
    # models are as many as the validation ones)
    sp0, need = splits[0], max(min_models(m) for m in methods)
    for what, part in (("train", sp0.train), ("validation", sp0.validation)):
        if part.n_models < need:
            raise ValueError(
                f"sm: the protocol split of its {sm.n_models} models leaves {part.n_models} "
                f"{what} models; {need} are needed (by "
                f"{', '.join(m for m in methods if min_models(m) == need)})"
            )
    cands = auto_candidates(splits[0].validation.n_models, st)
    fit_names = [m for m in methods if m != "auto"]
    if "auto" in methods:
        fit_names += [m for m in cands if m not in fit_names]
    stack = lambda f: jnp.asarray(np.stack([f(sp) for sp in splits]))
    d = SplitData(
        stack(lambda sp: sp.train.scores),
        stack(lambda sp: sp.train.true_score()),
        stack(lambda sp: sp.validation.scores),
        stack(lambda sp: sp.validation.true_score()),
    )
    s_te = stack(lambda sp: sp.test.scores)
    y_te = np.stack([sp.test.true_score() for sp in splits]).astype(np.float64)
    keys = jnp.stack([as_key(int(s)) for s in seeds])  # all 64 bits of a seed count
    dr_m = 0 if external else int(dr_items)
    relieve_map_pressure("evaluate_protocol")
    t0 = time.perf_counter()
    S = len(seeds)
    names = list(fit_names)
    cv_mse = None
    picks = np.full(S, -1, np.int32)
    use_cv = "auto" in methods and d.y_val.shape[1] < st.auto_cv_below
    if use_cv:
        fs = [cv_folds(jax.tree.map(lambda a, i=i: a[i], d), st.auto_folds, int(s),
                       "settings.auto_folds")
              for i, s in enumerate(seeds)]
        fd = jax.tree.map(lambda *a: jnp.asarray(np.stack(a)), *[f[0] for f in fs])
        cv_res = np.asarray(_cv_jit(
            keys, fd, jnp.asarray(np.stack([f[1] for f in fs])),
            jnp.asarray(np.stack([f[2] for f in fs])), int(k), cands, st, bool(vmap_seeds),
        ), np.float64)  # [S, C, folds, h]
        cv_mse = (cv_res**2).mean(axis=(2, 3))  # [S, C]
        present = [m for m in cands if m in names]
        picks = np.array([present.index(cands[c]) for c in nan_last_argmin(cv_mse)],
                         np.int32)
    halves = None
    auto_halved = "auto" in methods and not use_cv and st.auto_halves
    # the named methods calibrated on validation halves (Settings.named_halves)
    halved = halved_methods(methods, st)
    if auto_halved or halved:
        hs = [validation_halves(d.y_val.shape[1], int(s)) for s in seeds]
        halves = (jnp.asarray(np.stack([h[0] for h in hs])),
                  jnp.asarray(np.stack([h[1] for h in hs])))
    out = _kernel_jit(keys, d, s_te, int(k), tuple(fit_names), st, dr_m, alpha,
                      jnp.asarray(picks), cands, halves, bool(vmap_seeds), halved,
                      bool(auto_halved))
    out = jax.tree.map(np.asarray, out)
    secs = time.perf_counter() - t0
    val = np.clip(out["val"].astype(np.float64), 0, 1)  # [S, M, hv]
    test = np.clip(out["test"].astype(np.float64), 0, 1)
    anchors = out["anchors"]
    y_val = np.asarray(d.y_val, np.float64)
    if "auto" in methods:
        idx = [names.index(m) for m in cands]
        mse = ((val[:, idx] - y_val[:, None]) ** 2).mean(-1)  # [S, C]
        crit = cv_mse if use_cv else mse
        pick = np.array(idx)[nan_last_argmin(crit)]
        val = np.concatenate([val, val[np.arange(S), pick][:, None]], 1)
        test = np.concatenate([test, test[np.arange(S), pick][:, None]], 1)
        anchors = np.concatenate([anchors, anchors[np.arange(S), pick][:, None]], 1)
        names.append("auto")
    keep = [names.index(m) for m in methods]
    val, test, anchors = val[:, keep], test[:, keep], anchors[:, keep]
    mae = np.asarray(mae_pp(jnp.asarray(test), jnp.asarray(y_te[:, None]), axis=-1)).T
    tau = np.asarray(
        jax.vmap(jax.vmap(kendall_tau_b, (0, None)))(jnp.asarray(test), jnp.asarray(y_te))
    ).T
    rad = np.array(
        [[float(conformal_quantile(jnp.asarray(v - yv), alpha)) for v in vs] for vs, yv in
         zip(val, y_val)]
    ).T  # [M, S]
    if use_cv:
        # auto chose by cross-validation: its radius comes from the cross-fitted
        # residuals of the chosen candidate (models never used by the fit that
        # predicted them), not from the validation models its choices were tuned on
        c_pick = nan_last_argmin(cv_mse)  # the candidate auto picked
        rad[methods.index("auto")] = [
            float(conformal_quantile(jnp.asarray(cv_res[i, c].ravel()), alpha))
            for i, c in enumerate(c_pick)
        ]
    if auto_halved:
        # auto chose on validation models: its radius comes from the residuals of the
        # candidate chosen on one half of them, scored on the other half
        rad[methods.index("auto")] = [
            float(conformal_quantile(jnp.asarray(r.ravel()), alpha)) for r in out["half_res"]
        ]
    for j, name in enumerate(halved):
        # a named method's own validation choices, made on one half, scored on the other
        rad[methods.index(name)] = [
            float(conformal_quantile(jnp.asarray(r.ravel()), alpha))
            for r in out["named_half_res"][:, j]
        ]
    if not np.isfinite(rad).all():
        warnings.warn(
            f"evaluate_protocol: too few models ({y_val.shape[-1]} validation models, "
            + (f"{2 * (y_val.shape[-1] // 2)} of them in the validation halves, "
               if halves is not None else "")
            + f"or cross-fitted residuals) for a {level_text(alpha)} conformal interval "
            "in some splits: those intervals are [0, 1] (coverage 1, width 1); use a larger alpha",
            stacklevel=2,
        )
    lo = np.clip(test - rad.T[:, :, None], 0, 1)
    hi = np.clip(test + rad.T[:, :, None], 0, 1)
    cov = ((lo <= y_te[:, None]) & (y_te[:, None] <= hi)).mean(-1).T
    width = (hi - lo).mean(-1).T
    dr = None
    if dr_m > 0:
        est, dlo, dhi = out["dr"][:, 0], out["dr"][:, 1], out["dr"][:, 2]
        dr = {
            "mae_pp": 100 * np.abs(est - y_te).mean(-1),
            "coverage": ((dlo <= y_te) & (y_te <= dhi)).mean(-1),
            "width": (dhi - dlo).mean(-1),
            "m": dr_m,
            # whose anchors (and item predictions) the estimate used, per seed
            "anchors_of": [fit_names[int(i)] for i in np.asarray(out["dr_pick"]).ravel()],
        }
    info = {
        "dataset": sm.source,
        "k": int(k),
        "n_models": sm.n_models,
        "n_items": sm.n_items,
        "external_target": external,
        "settings": repr(st),
        "seconds": secs,
        "seeds_batched": "vmap" if vmap_seeds else "loop",
        "alpha": alpha,
        "auto_choice": "cv" if use_cv else "validation",
        "auto_picks": [names[i] for i in pick] if "auto" in methods else None,
        "cv_mse": None if cv_mse is None else cv_mse.tolist(),
        # validation MSE of each reported method's clipped predictions, [seeds][methods]
        "val_mse": ((val - y_val[:, None]) ** 2).mean(-1).tolist(),
        # the conformal radius of each method's interval, [methods][seeds]
        "radius": rad.tolist(),
        "auto_calibration": None if "auto" not in methods else (
            "cross-fitted folds" if use_cv else
            "validation halves" if auto_halved else "validation models"),
        "named_halves": list(halved),
        "half_picks": None if not auto_halved else [
            [cands[i] for i in row] for row in np.asarray(out["half_pick"]).tolist()],
    }
    return ProtocolResult(
        tuple(methods), tuple(int(s) for s in seeds), mae, tau, cov, width,
        np.transpose(anchors, (1, 0, 2)), dr, info, np.transpose(test, (1, 0, 2)),
    )
