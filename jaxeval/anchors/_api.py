"""Numpy surface: ``fit_anchors`` -> :class:`AnchorPredictor` (predict, save, load).

The only place in :mod:`jaxeval.anchors` that moves data to the host and raises
exceptions; the kernels in the private modules report through values.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval._data import (
    ScoreMatrix,
    _is_frame,
    as_score_matrix,
    atomic_savez,
    default_labels,
    frame_names,
    is_missing,
    npz_name,
    out_of_unit_hint,
    saved_npz,
)
from jaxeval._runner import _concrete_int, as_key, check_int, int_seed, stage_printer
from jaxeval.anchors._intervals import (
    conformal_quantile,
    dr_estimate,
    level_text,
    sample_non_anchors,
)
from jaxeval.anchors._irt import fit_item_factors, irt_item_predictions
from jaxeval.anchors._methods import (
    METHODS,
    Fitted,
    Settings,
    SplitData,
    apply_map,
    auto_candidates,
    candidate_cv_residuals,
    check_level,
    checked_settings,
    crossfit_selected_residuals,
    cv_folds,
    fit_method,
    halved_methods,
    min_models,
    validation_halves,
)

__all__ = ["AnchorPredictor", "fit_anchors"]

_FORMAT = "jaxeval.anchors/1"


def _nan_last(err: float) -> float:
    """A candidate's error for choosing the smallest: NaN (a failed fit) ranks last."""
    err = float(err)
    return float("inf") if err != err else err


def _key(seed: Any) -> jax.Array:
    """An int seed (>= 0), a typed key or raw ``uint32[2]`` key data, as the runner takes."""
    return as_key(seed)


def _keyed(x: Any) -> bool:
    """A mapping, or a keyed container that is not one (a pandas Series indexed by
    item name): read by name, never by position."""
    return isinstance(x, Mapping) or (
        callable(getattr(x, "items", None)) and callable(getattr(x, "keys", None)))


def _by_extra_name(scores: Any, names: np.ndarray) -> Any:
    """Extra items' scores given by name (a mapping or a pandas Series indexed by item)
    as a list in the order of ``names``; anything else is returned as it is. A Series
    with pandas' default labels ``0, 1, ...`` is read by position."""
    if not isinstance(scores, Mapping) and default_labels(getattr(scores, "index", None)):
        return scores.to_numpy()
    if not _keyed(scores):
        return scores
    pairs = list(scores.items())
    by = {str(k): v for k, v in pairs}
    want = names.tolist()
    if len(by) != len(pairs) or set(by) != set(want):
        missing = [c for c in want if c not in by]
        extra = sorted(set(by) - set(want))
        raise ValueError(
            f"extra_scores: named scores must cover exactly the {len(want)} extra_items "
            f"(each once); missing {missing[:5]}, not in extra_items {extra[:5]}")
    return [by[c] for c in want]


def _refuse_missing(scores: Any, what: str, names: Any = None) -> None:
    """Refuse masked entries of a masked array (``np.asarray`` would keep the hidden
    values as scores) and ``None`` / pandas ``NA`` (a float conversion fails on them
    with a message about types, or makes ``None`` a NaN). ``names``: the item of each
    position along the last axis, named in the message."""

    def item(at: tuple) -> str:
        ok = names is not None and at and at[-1] < len(names)
        return f" (item {str(names[at[-1]])!r})" if ok else ""

    if np.ma.isMaskedArray(scores):
        mask = np.ma.getmaskarray(scores)
        if mask.any():
            at = tuple(int(i) for i in np.argwhere(mask)[0])
            raise ValueError(
                f"{what}: {int(mask.sum())} masked (missing) score(s), the first at "
                f"{at}{item(at)}; every item must be scored")
        return
    if isinstance(scores, (list, tuple)) or (
            isinstance(scores, np.ndarray) and scores.dtype.kind == "O"):
        try:
            raw = np.asarray(scores, dtype=object)
        except ValueError:  # ragged: the shape check says so
            return
        flat = raw.ravel().tolist()
        miss = [i for i, v in enumerate(flat) if is_missing(v)]
        if miss:
            at = tuple(int(i) for i in np.unravel_index(miss[0], raw.shape))
            raise ValueError(
                f"{what}: {len(miss)} missing score(s) (None or NA), the first at "
                f"{at}{item(at)}; "
                "every item must be scored")


@jax.jit
def _unbiased(F, anchors, x, rho, idx, ys, alpha):
    """:meth:`AnchorPredictor.predict_unbiased`'s arithmetic, compiled as one program (run
    op by op it compiled ~100 small ones: seconds in every new process)."""
    preds = irt_item_predictions(F, anchors, x, rho)[0]
    return dr_estimate(preds, anchors, x[0], idx, ys, alpha)


@dataclasses.dataclass(frozen=True, eq=False)
class AnchorPredictor:
    """Predicts a model's benchmark accuracy from its scores on ``k`` anchor items.

    Build one with :func:`fit_anchors`. Run only :attr:`anchor_items` through your
    evaluation harness, then call :meth:`predict` with the scores in that order.

    Attributes:
      items: all item names of the benchmark the predictor was fitted on.
      anchor_index: int ``[k]`` positions of the anchors in ``items``.
      method: the method used (for ``"auto"``, the one chosen on validation models, or
        by cross-validation when there are fewer than ``settings.auto_cv_below`` of them).
      kind: the map kind (see :mod:`jaxeval.anchors._methods`).
      params: the map's parameters (numpy arrays).
      radius: half-width of the conformal interval: from validation models for a
        named method; for ``"auto"`` from residuals of models that never tuned the
        predictor that made them when it chose by cross-validation (the
        cross-fitted residuals; the same residuals also chose the method among
        the candidates, a mild winner's selection that the measured coverage,
        0.88-0.93 for a nominal 0.90, includes) or, when it chose on validation
        models, from validation halves (``settings.auto_halves``, the default: the
        candidate chosen on one half of the validation models, scored on the other
        half); with ``auto_halves=False`` from its validation residuals (slightly
        optimistic, see :class:`Settings`). A named method of :data:`HALVES_METHODS` (those that
        tune something on the validation models) is calibrated on validation halves
        by default (``Settings.named_halves``: its choices made on one half, its
        residuals taken on the other): calibrated on the models that tuned them, the
        greedy methods covered 0.86-0.88 at a nominal 0.90 (synthetic splits, 40
        validation models); on halves 0.90 (BUILD_NOTES.md, twenty-fifth session).
        The MLP-trained methods are halved too (their checkpoint, weight decay and,
        for ``sparseeval``, its start chosen on one half). ``random_mlp``,
        ``greedy_mlp`` and ``sparseeval`` (without ``guard``) retrain a network only
        where a half's anchors are not the fit's (up to ~2x the plain fit);
        ``greedy_resmlp``, whose base map is tuned on validation models, and a
        guarded ``sparseeval`` refit on each half (~3x).
      alpha: error level of the interval.
      external_target: the target was an external full-benchmark score.
      validation_mae_pp: validation MAE of the chosen method (percentage points).
      info: provenance (seed, candidates' validation errors, settings).
      item_model: the factorization's item parameters (for :meth:`predict_unbiased`),
        fitted on training models; None for an external target.

    Example:
      Fit on training models, score a new model on the anchors (and on 100 random
      other items for the unbiased estimate), save for later:

      >>> import pathlib, tempfile
      >>> import jaxeval
      >>> split = jaxeval.load("oll2_musr").drop_duplicates().protocol_split(seed=0)
      >>> pred = jaxeval.fit_anchors(split.train, 20, method="gpirt", seed=0,
      ...                            validation=split.validation)
      >>> new = split.test.take(models=[0])  # stands in for a model you evaluate
      >>> x = new.take(items=pred.anchor_items).scores[0]  # run only these 20 items
      >>> est, lo, hi = pred.predict(x)  # 90% split-conformal interval
      >>> extra = pred.extra_items(100, seed=1)  # fixed before scoring them
      >>> y = new.take(items=extra).scores[0]
      >>> est, lo, hi = pred.predict_unbiased(x, extra, y)  # valid whatever the map
      >>> bool(lo <= new.accuracy()[0] <= hi)
      True
      >>> path = pred.save(pathlib.Path(tempfile.mkdtemp()) / "musr_anchors")
      >>> back = jaxeval.AnchorPredictor.load(path, items=split.train)
      >>> path.name, bool(back.predict(x)[0] == pred.predict(x)[0])
      ('musr_anchors.npz', True)
    """

    items: np.ndarray
    anchor_index: np.ndarray
    method: str
    kind: str
    params: dict
    radius: float
    alpha: float
    external_target: bool
    validation_mae_pp: float
    info: dict
    item_model: dict | None = None

    @property
    def anchor_items(self) -> np.ndarray:
        """Names of the anchor items, in the order :meth:`predict` expects."""
        return self.items[self.anchor_index]

    @property
    def k(self) -> int:
        """Number of anchor items (``anchor_index.size``)."""
        return int(self.anchor_index.size)

    def _fitted(self) -> Fitted:
        params = jax.tree.map(jnp.asarray, self.params)
        return Fitted(jnp.asarray(self.anchor_index, jnp.int32), self.kind, params)

    def _by_name(self, anchor_scores: Any, what: str) -> Any:
        """Scores given with item names (a mapping or pandas Series ``{item: score}``,
        or a DataFrame whose columns are items) put in the order of
        :attr:`anchor_items`; anything else is returned as it is (read by position)."""
        names = self.anchor_items.tolist()

        def check(keys):
            got = [str(c) for c in keys]  # item names are strings
            if len(set(got)) != len(got):
                seen, twice = set(), []
                for c in got:
                    if c in seen and c not in twice:
                        twice.append(c)
                    seen.add(c)
                raise ValueError(f"{what}: {len(twice)} item(s) named more than once "
                                 f"({twice[:6]})")
            given = set(got)
            if given != set(names):
                missing = [c for c in names if c not in given]
                extra = sorted(given - set(names))
                raise ValueError(
                    f"{what}: named scores must cover exactly the {self.k} anchor items; "
                    f"missing {missing[:5]}, not anchors {extra[:5]} (to give scores by "
                    "position instead, pass a plain array in the order of the predictor's "
                    "anchor_items)")
            return got

        cols = getattr(anchor_scores, "columns", None)
        if cols is not None and callable(getattr(anchor_scores, "to_numpy", None)):
            if default_labels(cols):
                return anchor_scores.to_numpy()
            got = check(cols)  # a DataFrame: one row per model, one column per item
            pos = {c: i for i, c in enumerate(got)}
            return np.asarray(anchor_scores.to_numpy())[:, [pos[c] for c in names]]
        if not isinstance(anchor_scores, Mapping) and default_labels(
                getattr(anchor_scores, "index", None)):
            return anchor_scores.to_numpy()  # a Series made from an array
        if _keyed(anchor_scores):
            pairs = list(anchor_scores.items())  # a dict, or a Series indexed by item
            got = check([k for k, _ in pairs])
            by = dict(zip(got, (v for _, v in pairs)))
            vals = [by[c] for c in names]
            if all(np.ndim(v) == 0 for v in vals):
                return vals  # one model
            lens = {np.ndim(v) == 1 and len(v) for v in vals}
            if len(lens) != 1 or False in lens:
                raise ValueError(
                    f"{what}: a mapping holds either one score per item (one model) or "
                    "equally long lists of scores per item (one per model, as "
                    "DataFrame.to_dict('list') gives)")
            return np.column_stack(vals)  # [models, k]
        return anchor_scores

    def _check_source(self, sm: ScoreMatrix, what: str) -> None:
        """Warn when lm-evaluation-harness scores were read with other tasks, metrics or
        filters than the predictor's fit (both recorded; other data is not compared)."""
        want = dict(self.info or {}).get("lm_eval")
        got = _lm_eval_source(sm)
        if not want or got is None:
            return
        # (the filters the lines were read under, named by the option or the one logged)
        diff = [f"{k} {got.get(k)!r} where the fit read {want.get(k)!r}"
                for k in ("tasks", "metric", "filter") if got.get(k) != want.get(k)
                and not (k == "filter" and None in (got.get(k), want.get(k)))]
        if diff:
            warnings.warn(
                f"{what}: lm-evaluation-harness scores read with {'; '.join(diff)}: the "
                "predictor maps its anchors' scores as it was fitted, so another task, "
                "metric or filter gives a wrong estimate without an error", stacklevel=4)

    def _missing_anchors(self, sm: ScoreMatrix) -> list[str]:
        """The anchor items that ScoreMatrix ``sm`` has no column for, in anchor order."""
        have = set(np.asarray(sm.items).astype(str).tolist())
        return [a for a in self.anchor_items.tolist() if a not in have]

    def _check_scores(self, anchor_scores: Any,
                      what: str = "anchor_scores") -> tuple[np.ndarray, bool]:
        """``(x [models, k] float32, single)``: the checked scores, in anchor order, and
        whether one model's scores were given as ``[k]`` (or ``{item: score}``)."""
        if isinstance(anchor_scores, ScoreMatrix):
            # its anchor columns by name; a missing cell (0 under the mask) becomes NaN,
            # refused below with its item (its raw .scores would read it as a 0)
            sm = anchor_scores
            missing = self._missing_anchors(sm)
            if missing:
                raise ValueError(f"{what}: the ScoreMatrix has no column for {len(missing)} "
                                 f"of the {self.k} anchor items, e.g. {missing[:5]}")
            self._check_source(sm, what)
            t = sm.take(items=self.anchor_items)
            anchor_scores = t.scores if t.mask is None else np.where(t.mask, t.scores, np.nan)
        anchor_scores = self._by_name(anchor_scores, what)
        _refuse_missing(anchor_scores, what, self.anchor_items)
        raw = np.asarray(anchor_scores) if not isinstance(anchor_scores, np.ndarray) \
            else anchor_scores
        if raw.dtype.kind in "USO" and any(
                isinstance(v, (str, bytes, np.str_, np.bytes_)) for v in raw.ravel().tolist()):
            # "1" would be read as 1.0: scores stored as text are a mistake upstream
            raise TypeError(f"{what}: expected numbers, got text (dtype {raw.dtype})")
        try:
            x = np.asarray(anchor_scores, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}: expected an array of numbers ({e})") from None
        single = x.ndim == 1
        x2 = x[None, :] if single else x
        if x2.ndim != 2 or x2.shape[1] != self.k:
            raise ValueError(
                f"{what}: expected {self.k} scores per model (one per anchor item, in the "
                f"order of the predictor's anchor_items, which `jaxeval anchors items FILE` "
                f"lists), got shape {x.shape}"
            )
        if x2.shape[0] == 0:
            raise ValueError(f"{what}: no model to predict (shape {x.shape})")
        if not np.all(np.isfinite(x2)):
            bad = np.argwhere(~np.isfinite(x2))[0]
            at = (int(bad[1]),) if single else tuple(int(b) for b in bad)
            raise ValueError(
                f"{what}: holds NaN/inf (first at {at}, item "
                f"{str(self.anchor_items[bad[1]])!r}); every anchor item must be scored"
            )
        if x2.min() < 0 or x2.max() > 1:
            raise ValueError(
                f"{what}: scores must lie in [0, 1], got {float(x2.min())!r}.."
                f"{float(x2.max())!r}{out_of_unit_hint(x2.min(), x2.max())}")
        return x2.astype(np.float32), single

    def predict(self, anchor_scores: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Estimated accuracy with its ``1 - alpha`` split-conformal interval.

        Args:
          anchor_scores: ``[k]`` or ``[models, k]`` scores on :attr:`anchor_items`, in
            that order; or named, in any order: a mapping or pandas Series ``{item:
            score}`` (one model), a mapping ``{item: [score per model]}``, a
            DataFrame with the anchor items as columns (one row per model), or a
            :class:`~jaxeval.ScoreMatrix` holding them (other items are ignored; a
            missing anchor cell is refused). A Series or DataFrame with pandas' default
            labels ``0, 1, ...`` is read by position.

        Returns:
          ``(estimate, lower, upper)`` numpy arrays (scalars for a single model),
          clipped to [0, 1].

        Example:
          >>> import jaxeval
          >>> sm = jaxeval.load("oll2_musr").drop_duplicates()
          >>> pred = jaxeval.fit_anchors(sm, 20, method="random_ridge", seed=0)
          >>> est, lo, hi = pred.predict(sm.take(items=pred.anchor_items).scores[0])
          >>> bool(lo <= est <= hi)
          True
          >>> pred.predict(sm.take(models=[0, 1]))[0].shape  # a ScoreMatrix: by item name
          (2,)
        """
        x, single = self._check_scores(anchor_scores)
        est = np.asarray(_apply_jit(self._fitted(), jnp.asarray(x)), dtype=np.float64)
        est = np.clip(est, 0.0, 1.0)
        lo = np.clip(est - self.radius, 0.0, 1.0)
        hi = np.clip(est + self.radius, 0.0, 1.0)
        if single:
            return est[0], lo[0], hi[0]
        return est, lo, hi

    def _check_unbiased(self, what: str) -> None:
        """Refuse a predictor that has no unbiased estimate (see :meth:`predict_unbiased`)."""
        if self.external_target:
            raise ValueError(
                f"{what}: this predictor was fitted on an external target (a "
                "full-benchmark score); the unbiased estimate is for the row mean of the "
                "matrix's items only, so extra items cannot be used"
            )
        if self.item_model is None:  # (a predictor built by hand, or a file cut short)
            raise ValueError(
                f"{what}: this predictor has no item model (item_model=None) to "
                "predict the items it does not observe; fit_anchors saves one with every "
                "row-mean predictor"
            )

    def extra_items(self, m: int, seed: int = 0) -> np.ndarray:
        """``m`` random non-anchor item names for :meth:`predict_unbiased`.

        Args:
          m: how many, ``1 <= m <= n_items - k``.
          seed: int seed of the draw (uniform without replacement over the
            non-anchors). Fix ``m`` and ``seed`` before seeing any score, one seed per
            model when intervals about several models are read together.

        Raises:
          ValueError: the predictor has no unbiased estimate (an external target, or no
            item model), so extra items would be scored for nothing.
        """
        # refused before the user pays to score items predict_unbiased cannot use
        self._check_unbiased("extra_items")
        n = self.items.size
        m = check_int("m", m, 1, n - self.k, why=f"the {n} items less the {self.k} anchors")
        idx = sample_non_anchors(_key(seed), jnp.asarray(self.anchor_index), n, m)
        return self.items[np.asarray(idx)]

    def predict_unbiased(
        self, anchor_scores: Any, extra_items: Any, extra_scores: Any, alpha: float | None = None
    ) -> tuple[np.float64, np.float64, np.float64]:
        """Unbiased estimate of the row mean from the anchors plus random extra items.

        The extra items must be drawn uniformly without replacement from the
        non-anchors (use :meth:`extra_items`); the interval is then valid in finite
        samples whatever the quality of the per-item predictions (see
        :func:`jaxeval.anchors.dr_estimate`). The per-item predictions come from the
        factorization's item parameters (:attr:`item_model`, fitted on the training
        models for every method) with the new model's factor fitted on its anchor
        scores. Estimates the mean over this matrix's items, so a predictor fitted on
        an external target (a full-benchmark score) has none.

        Args:
          anchor_scores: ``[k]`` the model's scores on :attr:`anchor_items` (or a
            mapping / Series ``{item: score}``, as in :meth:`predict`).
          extra_items: ``[m]`` names from :meth:`extra_items`, in its order.
          extra_scores: ``[m]`` their scores in [0, 1], in the order of ``extra_items``;
            or a mapping / pandas Series ``{item: score}`` over exactly those items
            (read in the order of ``extra_items``).
          alpha: error level of the interval (default: the predictor's ``alpha``).

        Returns:
          ``(estimate, lower, upper)`` for one model (numpy scalars, as :meth:`predict`
          returns for one model).
        """
        self._check_unbiased("predict_unbiased")
        x, _ = self._check_scores(anchor_scores)
        if x.shape[0] != 1:
            raise ValueError("predict_unbiased: one model at a time (anchor_scores of shape [k])")
        lookup = {s: i for i, s in enumerate(self.items.tolist())}
        try:
            given = np.asarray(extra_items)
            names = given.astype(str).ravel()
        except (TypeError, ValueError) as e:
            raise TypeError(f"extra_items: expected a sequence of item names ({e})") from None
        if given.dtype.kind in "iub" and not all(s in lookup for s in names.tolist()):
            # positions, not names (they were read as the names "220", ... and unknown)
            raise TypeError(
                f"extra_items: expected item names (what extra_items() returns), got "
                f"{given.dtype} values; for positions in items, pass pred.items[positions]")
        unknown = [s for s in names.tolist() if s not in lookup]
        if unknown:
            raise ValueError(f"extra_items: unknown item names {unknown[:5]}")
        if names.size == 0:
            raise ValueError("extra_items: at least one extra item is needed (see extra_items())")
        idx = np.array([lookup[s] for s in names.tolist()], dtype=np.int32)
        if np.isin(idx, self.anchor_index).any() or np.unique(idx).size != idx.size:
            raise ValueError("extra_items: must be distinct non-anchor items")
        extra_scores = _by_extra_name(extra_scores, names)
        _refuse_missing(extra_scores, "extra_scores", names)
        try:
            ys = np.asarray(extra_scores, dtype=np.float64).ravel()
        except (TypeError, ValueError) as e:
            raise TypeError(f"extra_scores: expected numbers in [0, 1] ({e})") from None
        if ys.shape != idx.shape:
            raise ValueError(
                f"extra_scores: expected {idx.size} scores (one per extra item), got shape "
                f"{ys.shape}")
        if not np.all(np.isfinite(ys)):
            j = int(np.flatnonzero(~np.isfinite(ys))[0])
            raise ValueError(f"extra_scores: holds NaN/inf (first at {j}, item "
                             f"{str(names[j])!r}); every extra item must be scored")
        if ys.min() < 0 or ys.max() > 1:
            raise ValueError(
                f"extra_scores: scores must lie in [0, 1], got {float(ys.min())!r}.."
                f"{float(ys.max())!r}{out_of_unit_hint(ys.min(), ys.max())}")
        a = check_level(self.alpha if alpha is None else alpha)  # as fit_anchors checks it
        f = self._fitted()
        im = jax.tree.map(jnp.asarray, self.item_model)
        est, lo, hi = _unbiased(im["F"], f.anchors, jnp.asarray(x), im["rho"], jnp.asarray(idx),
                                jnp.asarray(ys, jnp.float32), a)
        return np.float64(est), np.float64(lo), np.float64(hi)

    # ------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path | None:
        """Write the predictor to a ``.npz`` file (no pickle); returns the path written.

        ``.npz`` is appended to a path without it, as :func:`numpy.savez` does;
        :meth:`load` accepts the path with or without it. A writable binary file
        object works too (``None`` is returned). An existing file is refused (its
        anchors may already be scored: a new fit picks other items) unless
        ``overwrite=True``; the file is written whole or not at all.
        """
        if not isinstance(overwrite, (bool, np.bool_)):
            raise TypeError(f"overwrite: expected True or False, got {overwrite!r}")
        if isinstance(path, (str, os.PathLike)):
            p = npz_name(path)
            if p.exists() and not overwrite:
                raise FileExistsError(
                    f"path: {p} exists (a predictor whose anchor items may already be "
                    "scored); choose another path, or pass overwrite=True to replace it")
        leaves, treedef = jax.tree.flatten(self.params)
        meta = {
            "format": _FORMAT,
            "method": self.method,
            "kind": self.kind,
            "radius": self.radius,
            "alpha": self.alpha,
            "external_target": self.external_target,
            "validation_mae_pp": self.validation_mae_pp,
            "info": self.info,
            "param_keys": _param_paths(self.params),
        }
        arrays = {f"leaf_{i}": np.asarray(v) for i, v in enumerate(leaves)}
        if self.item_model is not None:
            F = self.item_model["F"]
            arrays.update(
                item_V=np.asarray(F.V),
                item_c=np.asarray(F.c),
                item_u_mean=np.asarray(F.u_mean),
                item_rho=np.asarray(self.item_model["rho"]),
            )
        arrays = dict(
            meta=np.array(json.dumps(meta)),
            items=self.items.astype(str),
            anchor_index=self.anchor_index,
            **arrays,
        )
        del treedef
        if not isinstance(path, (str, os.PathLike)):
            if not callable(getattr(path, "write", None)):
                raise TypeError(f"path: expected a file path or a binary file object, got "
                                f"{path!r}")
            np.savez(path, **arrays)
            return None  # a file object: written as given
        p = npz_name(path)
        atomic_savez(p, arrays)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike, items: Any = None) -> AnchorPredictor:
        """Read a predictor written by :meth:`save`.

        Args:
          path: the ``.npz`` file.
          items: optional item names (or a :class:`ScoreMatrix`, or a pandas DataFrame whose
            columns are the items) of the benchmark it will be used with; refused when
            they are not the saved ones (in any order: scores are read by item name).
        """
        if isinstance(path, (str, os.PathLike)):
            p = saved_npz(path)  # save() appends .npz, as numpy does
            if not p.is_file():
                raise FileNotFoundError(f"{path}: no such file")
            with open(p, "rb") as fh:
                if fh.read(2) != b"PK":  # every .npz is a zip archive
                    raise ValueError(f"{p}: not a saved AnchorPredictor (not an .npz file)")
        else:  # a file object
            p = path
        try:
            with np.load(p, allow_pickle=False) as z:
                if "meta" not in z.files:
                    raise ValueError("no 'meta' entry: another kind of .npz file")
                meta = json.loads(str(z["meta"]))
                if meta.get("format") != _FORMAT:
                    raise ValueError(f"format {meta.get('format')!r}, expected {_FORMAT!r}")
                saved_items = z["items"].astype(str)
                anchor_index = z["anchor_index"]
                if not np.issubdtype(anchor_index.dtype, np.integer):
                    raise ValueError(f"anchor_index: expected integers, got dtype "
                                     f"{anchor_index.dtype}")
                anchor_index = anchor_index.astype(np.int32)
                leaves = [z[f"leaf_{i}"] for i in range(len(meta["param_keys"]))]
                item_model = None
                parts = [k for k in ("item_V", "item_c", "item_u_mean", "item_rho")
                         if k in z.files]
                if parts and len(parts) < 4:
                    raise ValueError(f"the item model is cut: only {parts} of item_V, item_c, "
                                     "item_u_mean and item_rho are saved")
                if parts:
                    from jaxeval._factorization import ItemFactors

                    F = ItemFactors(z["item_V"], z["item_c"], z["item_u_mean"])
                    item_model = {"F": F, "rho": z["item_rho"]}
            params = _rebuild(meta["kind"], meta["param_keys"], leaves, int(anchor_index.size))
            out = cls(
                items=saved_items,
                anchor_index=anchor_index,
                method=meta["method"],
                kind=meta["kind"],
                params=params,
                radius=float(meta["radius"]),
                alpha=float(meta["alpha"]),
                external_target=bool(meta["external_target"]),
                validation_mae_pp=float(meta["validation_mae_pp"]),
                info=meta["info"],
                item_model=item_model,
            )
            out._check_loaded()
        except Exception as e:  # truncated, corrupt or foreign files: say which and why
            raise ValueError(
                f"{p}: not a readable saved AnchorPredictor ({type(e).__name__}: {e})"
            ) from None
        if items is not None:
            names = (items.items if isinstance(items, ScoreMatrix) else
                     frame_names(items.columns, "item_") if _is_frame(items) else
                     np.asarray(items).astype(str))  # (a frame: its columns name the items)
            # (the predictor reads scores by item name: the same items in another order
            # are the same benchmark)
            if names.shape != saved_items.shape or not np.array_equal(
                    np.sort(names), np.sort(saved_items)):
                diff = np.setdiff1d(saved_items, names)[:3].tolist()
                how = (f"e.g. missing {diff}" if diff else
                       f"e.g. not fitted on {np.setdiff1d(names, saved_items)[:3].tolist()}"
                       if np.setdiff1d(names, saved_items).size else "an item given twice")
                raise ValueError(
                    f"items: the predictor in {path} was fitted on {saved_items.size} items "
                    f"that differ from the {names.size} given ({how}); "
                    "refit it for this benchmark"
                )
        return out

    def _check_loaded(self) -> None:
        """Refuse a loaded predictor whose parts do not fit together (a corrupt or
        hand-edited file) instead of predicting from it."""
        n = self.items.size
        idx = np.asarray(self.anchor_index)
        if (idx.ndim != 1 or idx.size < 1 or idx.min() < 0 or idx.max() >= n
                or np.unique(idx).size != idx.size):
            raise ValueError(f"anchor_index: expected distinct indices in 0..{n - 1}")
        if not (self.radius >= 0):  # inf allowed, NaN refused
            raise ValueError(f"radius: expected >= 0, got {self.radius}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha: expected a level in (0, 1), got {self.alpha}")
        # (method is a label, and a hand-built predictor may have no validation MAE: NaN)
        if not isinstance(self.method, str):
            raise ValueError(f"method: expected a name, got {self.method!r}")
        if not (np.isnan(self.validation_mae_pp) or 0 <= self.validation_mae_pp < np.inf):
            raise ValueError(f"validation_mae_pp: expected a finite value >= 0 (or NaN), got "
                             f"{self.validation_mae_pp}")
        if self.external_target and self.item_model is not None:
            # predict_unbiased estimates the row mean: an external target's predictor
            # never has the item model it uses (an edited or damaged file)
            raise ValueError("external_target is True but the file holds an item model "
                             "(only a predictor of the row-mean target has one)")
        for name, leaf in zip(_param_paths(self.params), jax.tree.leaves(self.params)):
            if not np.all(np.isfinite(np.asarray(leaf, np.float64))):
                raise ValueError(f"params: {name} holds non-finite values (every prediction "
                                 "would be NaN)")
        if self.item_model is not None:
            _check_factors(self.item_model["F"], self.item_model["rho"], n, "item factors")
        if self.kind in ("irt", "blend"):  # the map's own factors (a cut file predicted
            # from the rows left: the anchors past them were dropped without a word)
            _check_factors(self.params["F"], self.params["rho"], n, "params['F']")
        try:
            est = np.asarray(_apply_jit(self._fitted(),
                                        jnp.full((1, idx.size), 0.5, jnp.float32)))
        except (TypeError, ValueError) as e:  # (JAX's shape errors: weights of another k)
            raise ValueError(f"the map's parameters do not fit {idx.size} anchors "
                             f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
        if est.shape != (1,):
            raise ValueError(f"the map's parameters do not fit {idx.size} anchors")
        if not np.all(np.isfinite(est)):
            raise ValueError(f"the map predicts {float(est[0])} (not a finite number) from "
                             "its parameters")

    def __repr__(self) -> str:
        return (
            f"AnchorPredictor(k={self.k}, method={self.method!r}, kind={self.kind!r}, "
            + (f"interval=+-{self.radius:.4f}" if np.isfinite(self.radius)
               else "interval=[0, 1] (too few validation models)")
            + f" at {level_text(self.alpha)}, "
            f"validation MAE {self.validation_mae_pp:.2f} pp)"
        )


def _check_factors(F: Any, rho: Any, n: int, what: str) -> None:
    """Item factors ``V [n, r]``, ``c [n]``, ``u_mean [r]`` and a prior strength ``rho``
    (one number >= 0), all finite: what the item predictions need (a loaded file whose
    parts disagree failed deep inside JAX, or predicted from the wrong rows)."""
    V, c, u = (np.asarray(x) for x in (F.V, F.c, F.u_mean))
    if V.ndim != 2 or V.shape[0] != n or c.shape != (n,) or u.shape != V.shape[1:]:
        raise ValueError(f"{what}: expected V [{n}, r], c [{n}] and u_mean [r], got "
                         f"{V.shape}, {c.shape} and {u.shape}")
    r = np.asarray(rho)
    if r.size != 1:
        raise ValueError(f"{what}: expected one prior strength rho, got shape {r.shape}")
    if not (all(np.all(np.isfinite(np.asarray(x, np.float64))) for x in (V, c, u))
            and np.isfinite(float(r.ravel()[0])) and float(r.ravel()[0]) >= 0):
        raise ValueError(f"{what}: non-finite values, or a negative prior strength rho "
                         "(predict_unbiased would give NaN)")


def _param_paths(params: dict) -> list[str]:
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def _rebuild(kind: str, keys: list[str], leaves: list[np.ndarray], k: int) -> dict:
    # the MLP kinds hold equinox modules whose tree structure records their widths
    tmpl = _TEMPLATES[kind](k)
    flat, treedef = jax.tree_util.tree_flatten_with_path(tmpl)
    got = [jax.tree_util.keystr(p) for p, _ in flat]
    if got != keys:
        raise ValueError(f"saved parameters {keys} do not match map kind {kind!r}")
    return jax.tree.unflatten(jax.tree.structure(tmpl), [np.asarray(v) for v in leaves])


def _templates():
    from jaxeval._factorization import ItemFactors
    from jaxeval.anchors._mlp import RES_HIDDEN, init_mlp
    from jaxeval.anchors._ridge import LinearMap

    z = np.zeros(1, np.float32)
    lin = LinearMap(z, z[0])
    F = ItemFactors(z, z, z)
    return {
        "weighted_mean": lambda k: {"w": z},
        "linear": lambda k: {"lin": lin, "lam": z[0]},
        "mlp": lambda k: {"mlp": init_mlp(jax.random.key(0), k)[0], "best_step": z[0]},
        # the members' parameters stacked (the same tree; the leaves' shapes are saved)
        "mlp_mean": lambda k: {"mlp": init_mlp(jax.random.key(0), k)[0], "best_step": z},
        "resmlp": lambda k: {
            "lin": lin, "mlp": init_mlp(jax.random.key(0), k, hidden=RES_HIDDEN)[0],
            "best_step": z[0], "decay": z[0],
        },
        "irt": lambda k: {"F": F, "rho": z[0], "lam": z[0], "w": z, "cal": z},
        "blend": lambda k: {"F": F, "rho": z[0], "cal": z, "lin": lin, "beta": z[0]},
    }


class _LazyTemplates(dict):
    def __missing__(self, key):
        t = _templates()
        if key not in t:
            raise KeyError(f"unknown map kind {key!r}; expected one of {sorted(t)}")
        self.update(t)
        return dict.__getitem__(self, key)


_TEMPLATES = _LazyTemplates()


@jax.jit
def _apply_jit(fitted: Fitted, x: jax.Array) -> jax.Array:
    return apply_map(fitted, x)


def _as_host(tree):
    return jax.tree.map(lambda a: np.asarray(a), tree)


def _fit_many(key, d: SplitData, k: int, methods: tuple, st: Settings, with_factors: bool,
              halves=None):
    cache: dict = {}
    out = []
    for name in methods:
        f = fit_method(key, d, k, name, st, cache)
        out.append((f, apply_map(f, d.s_val[:, f.anchors])))
    half_res = None
    if halves is not None:
        half_res, _ = crossfit_selected_residuals(key, d, k, methods, st, *halves, cache)
    factors = None
    if with_factors:
        factors = cache["F"] if "F" in cache else fit_item_factors(
            jax.random.fold_in(key, 5), d.s_tr, st.irt
        )
    return out, factors, half_res


_fit_jit = jax.jit(_fit_many, static_argnums=(2, 3, 4, 5))
_cv_jit = jax.jit(candidate_cv_residuals, static_argnums=(4, 5, 6))


def _lm_eval_source(sm: Any) -> dict | None:
    """How a score matrix was read from lm-evaluation-harness output (its tasks, the
    metric and filter per task), or None for other data: recorded by a fit, compared by
    ``predict`` so that another task, metric or filter is not mapped without a word."""
    md = getattr(sm, "metadata", None) or {}
    if md.get("format") != "lm-evaluation-harness samples":
        return None
    tasks = sorted(str(t) for t in md.get("tasks") or ())
    f = md.get("filter")
    read = md.get("filters_read")  # (the filter each task was read under, named or not)
    return {
        "tasks": tasks,
        "metric": {str(t): str(m) for t, m in sorted(dict(md.get("metric") or {}).items())},
        "filter": ({str(t): "/".join(v) for t, v in sorted(dict(read).items())} if read
                   else None if f is None else
                   {t: str(f) for t in tasks} if isinstance(f, str)
                   else {str(t): str(v) for t, v in sorted(dict(f).items()) if t in tasks}),
    }


def _warn_shared_rows(train: ScoreMatrix, validation: ScoreMatrix) -> None:
    """Warn when a validation model's scores equal a training model's on every item
    (a duplicate under another name: it makes validation optimistic)."""
    seen = {np.asarray(r).tobytes() for r in np.asarray(train.scores, np.float32)}
    dup = [m for m, r in zip(validation.models.tolist(), np.asarray(validation.scores, np.float32))
           if r.tobytes() in seen]
    if dup:
        warnings.warn(
            f"validation: {len(dup)} validation model(s) score exactly like a training model "
            f"on every item ({dup[:3]}); duplicates make the validation choice and the "
            "interval optimistic: drop_duplicates() first",
            stacklevel=3,
        )


def fit_anchors(
    train: ScoreMatrix | Any,
    k: int,
    method: str = "auto",
    seed: int | jax.Array = 0,
    validation: ScoreMatrix | Any | None = None,
    *,
    alpha: float = 0.1,
    settings: Settings | None = None,
    progress: bool = False,
) -> AnchorPredictor:
    """Choose ``k`` anchor items on training models and fit a predictor of accuracy.

    Args:
      train: complete score matrix of the training models (rows = models): a
        :class:`~jaxeval.ScoreMatrix`, a pandas DataFrame (read with its labels) or a
        2-D array. The target is ``train.true_score()`` (an external full-benchmark
        score when the matrix has one, else the row mean).
      k: number of anchor items (``1 <= k < n_items``).
      method: ``"auto"`` (default; chooses among :data:`AUTO_CANDIDATES` plus the
        residual MLP ``greedy_resmlp`` and the mean of ``settings.mlp_members``
        reference MLPs on the greedy anchors ``greedy_mlp_ens`` on validation
        models, or among
        :data:`AUTO_CANDIDATES` by cross-validation over training + validation
        models when there are fewer than ``settings.auto_cv_below`` validation
        models; see :func:`auto_candidates`) or one of :data:`METHODS`
        (``"sparseeval"`` is the faithful SparseEval protocol).
      seed: int seed or PRNG key.
      validation: models (as ``train``; an array's rows are named ``validation_i``)
        for the choices made on validation (ridge strength,
        method, MLP checkpoint) and for the conformal interval (calibrated on
        residuals that no choice saw: cross-fitted folds when ``"auto"`` chooses by
        cross-validation, else validation halves for ``"auto"`` and the methods of
        :data:`HALVES_METHODS`; see ``AnchorPredictor.radius``); by
        default a seeded 20% of ``train`` is held out for this.
      alpha: error level of the interval (0.1 -> 90% intervals).
      settings: step counts and other static settings (:class:`Settings`).
      progress: a line on stderr as each stage starts and when the fit is done, with
        the seconds spent (a fit is one or two compiled programs, mostly compilation
        at first: from seconds to a few minutes).

    Returns:
      An :class:`AnchorPredictor`.

    The order of the training rows is part of the input, as the seed is: the methods
    with a fitted logistic factorization (``gpirt``, ``pirt``, the ``*_blend``
    maps) start its non-convex fit from random per-row factors, so
    permuting the rows moves their predictions like another seed would (a review,
    MuSR, same seed and anchors: ``gpirt`` up to 0.7 pp per model; the ridge maps
    within 3e-4 pp).

    Example:
      >>> import jaxeval
      >>> sm = jaxeval.load("oll2_ifeval").drop_duplicates()
      >>> pred = jaxeval.fit_anchors(sm, 20, method="kmeans_ridge", seed=0)
      >>> pred.anchor_items.shape
      (20,)
    """
    train = as_score_matrix(train, "train")
    if method != "auto" and method not in METHODS:
        raise ValueError(f"method: expected 'auto' or one of {METHODS}, got {method!r}")
    n = train.n_items
    k = check_int("k", k, 1, n - 1, why=f"fewer than the {n} items")
    alpha = check_level(alpha)
    say = stage_printer("fit_anchors", progress)
    train.require_complete("fit_anchors")
    key = _key(seed)
    st = checked_settings(settings, train.target is not None, auto=method == "auto")
    # the int seed of the NumPy splits (validation hold-out, halves, CV folds); a key
    # gives one drawn from it, so different keys split differently too

    split_seed = int_seed(seed, key, 0x5EED)
    held_out = validation is None
    if validation is None:
        n_val = max(int(round(0.2 * train.n_models)), 1)
        if train.n_models - n_val < 1:
            raise ValueError(
                f"train: {train.n_models} model(s) are too few to hold out validation: at "
                "least 2 are needed (a fifth, at least one, is held out; dozens in practice), "
                "or pass validation=")
        validation, train = train.split([n_val], seed=split_seed)
    else:
        if type(validation).__name__ == "Split":
            raise TypeError("validation: expected a ScoreMatrix or None, got Split (pass "
                            "split.validation, and split.train as train)")
        # (an array's rows are named validation_i: they name no training model)
        validation = as_score_matrix(validation, "validation", row_prefix="validation_")
        validation.require_complete("fit_anchors (validation)")
        if not np.array_equal(validation.items, train.items):
            raise ValueError("validation: item names must equal those of train, in the same order")
        both = sorted(set(validation.models.tolist()) & set(train.models.tolist()))
        if both:
            raise ValueError(
                f"validation: {len(both)} of its models are also training models ({both[:3]}); "
                "the validation models choose the ridge strength, the method and the "
                "interval, so they must be held out"
            )
        if (validation.target is None) != (train.target is None):
            has, lacks = (("train", "validation") if train.target is not None
                          else ("validation", "train"))
            raise ValueError(
                f"validation: {has} has an external target and {lacks} has none; the map "
                "would be fitted on one target and tuned and calibrated on another"
            )
    _warn_shared_rows(train, validation)
    need = min_models(method)
    for what, sm in (("train", train), ("validation", validation)):
        if sm.n_models < need:
            how = (f" (validation=None held out {validation.n_models} of train's "
                   f"{train.n_models + validation.n_models} models, 20%, leaving "
                   f"{train.n_models})" if held_out else "")
            raise ValueError(
                f"{what}: method {method!r} needs at least {need} models, got "
                f"{sm.n_models}{how}"
            )
        y = sm.true_score()
        if not np.all(np.isfinite(y)):
            raise ValueError(f"{what}: target is missing for {int((~np.isfinite(y)).sum())} models")
    d = SplitData(
        jnp.asarray(train.scores),
        jnp.asarray(train.true_score()),
        jnp.asarray(validation.scores),
        jnp.asarray(validation.true_score()),
    )
    y_val = np.asarray(d.y_val, np.float64)
    cands = auto_candidates(validation.n_models, st) if method == "auto" else (method,)
    with_factors = train.target is None
    use_cv = method == "auto" and validation.n_models < st.auto_cv_below
    if use_cv:  # (numpy only: checked before the candidates are fitted)
        folds, s_ho, y_ho = cv_folds(d, st.auto_folds, split_seed, "settings.auto_folds")
        if folds.s_tr.shape[1] < 8 or folds.s_val.shape[1] < 2:
            raise ValueError(
                f"train: {train.n_models + validation.n_models} models are too few for "
                f"auto's {st.auto_folds}-fold cross-validation; pass a larger validation "
                "set or a method name"
            )
    halves = None
    if (method == "auto" and not use_cv and st.auto_halves) or (
            halved_methods((method,), st)):
        halves = tuple(jnp.asarray(h) for h in validation_halves(validation.n_models, split_seed))
    say(f"fitting {len(cands)} method(s) with k = {k} on {train.n_models} training models, "
        f"{validation.n_models} validation models"
        + (" (one compiled program: the next line comes when all are fitted; minutes on "
           "thousands of models)" if len(cands) > 1 else ""))
    fits, factors, half_res = _fit_jit(key, d, int(k), tuple(cands), st, with_factors, halves)
    results = {}
    for name, (f, vp) in zip(cands, fits):
        vp = np.clip(np.asarray(vp, np.float64), 0, 1)
        results[name] = (f, vp, float(np.mean((vp - y_val) ** 2)))
    cv_mse = None
    if use_cv:
        say(f"choosing among them by {st.auto_folds}-fold cross-validation")
        res = np.asarray(_cv_jit(key, jax.tree.map(jnp.asarray, folds), jnp.asarray(s_ho),
                                 jnp.asarray(y_ho), int(k), tuple(cands), st), np.float64)
        errs = (res**2).mean(axis=(1, 2))
        cv_mse = dict(zip(cands, errs.tolist()))
        best = min(cv_mse, key=lambda m: _nan_last(cv_mse[m]))
        # the interval of a cross-validated choice: cross-fitted residuals of the
        # chosen candidate (the validation models tuned its choices)
        radius = float(conformal_quantile(jnp.asarray(res[cands.index(best)].ravel()), alpha))
    else:
        best = min(results, key=lambda s: _nan_last(results[s][2]))
        radius = None
        if half_res is not None:
            # the interval of a choice made on validation models: residuals of the
            # candidate chosen on one half of them, scored on the other half
            radius = float(conformal_quantile(jnp.asarray(np.asarray(half_res).ravel()), alpha))
    f, vp, _ = results[best]
    if radius is None:
        radius = float(conformal_quantile(jnp.asarray(vp - y_val), alpha))
    if not np.isfinite(radius):
        need_val = int(np.ceil((1 - alpha) / alpha - 1e-9))
        if half_res is not None:  # two equal halves: an odd one out is left unused
            need_val = 2 * -(-need_val // 2)
        warnings.warn(
            f"fit_anchors: {validation.n_models} validation models are too few for a "
            f"{level_text(alpha)} conformal interval (at least {need_val} are needed"
            + (" when the interval is calibrated on two equal halves of them"
               if half_res is not None else "")
            + "), so every interval is [0, 1]; pass a larger validation set or a "
            "larger alpha",
            stacklevel=2,
        )
    say(f"done: {best}" + (f" (chosen among {len(cands)})" if len(cands) > 1 else ""))
    info = {
        "seed": _concrete_int(seed),
        "requested_method": method,
        "validation_mse": {s: r[2] for s, r in results.items()},
        "auto_choice": None if method != "auto" else ("cv" if cv_mse else "validation"),
        "interval_calibration": "cross-fitted folds" if cv_mse else (
            "validation halves" if half_res is not None else "validation models"),
        "cv_mse": cv_mse,
        "n_train": train.n_models,
        "n_validation": validation.n_models,
        "settings": repr(st),
        "jax_version": jax.__version__,
    }
    source = _lm_eval_source(train)
    if source is not None:
        info["lm_eval"] = source
    return AnchorPredictor(
        items=np.asarray(train.items),
        anchor_index=np.asarray(f.anchors, np.int32),
        method=best,
        kind=f.kind,
        params=_as_host(f.params),
        radius=radius,
        alpha=float(alpha),
        external_target=train.target is not None,
        validation_mae_pp=float(100 * np.mean(np.abs(vp - y_val))),
        info=info,
        item_model=None
        if factors is None
        else _as_host({"F": factors, "rho": jnp.asarray(st.irt.rho_online, jnp.float32)}),
    )
