"""The score-matrix container: a frozen, validated numpy-side object.

A :class:`ScoreMatrix` holds one row per model and one column per benchmark item.
Scores live in ``[0, 1]``; a boolean ``mask`` says which cells were observed
(unobserved cells hold 0 in ``scores`` so kernels can use the array directly).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import io
import json
import os
import time
import tokenize
import types
import zipfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ScoreMatrix", "Split", "rename_duplicates"]


def out_of_unit_hint(lo: float, hi: float) -> str:
    """The likely cause of scores ``lo..hi`` that leave ``[0, 1]``, as a parenthesised
    hint for an error message (``""`` when there is none to guess).

    Percent is guessed only for a largest score above 1.5: dividing scores that reach
    just past 1 by 100 would squeeze them into ``[0, 0.015]``.

    Example:
      >>> out_of_unit_hint(0.0, 1.0000001), out_of_unit_hint(0.0, 87.5)
      (' (rounding? clip the scores to [0, 1] first)', ' (percent? divide by 100 first)')
      >>> out_of_unit_hint(0.0, 1.0005)
      ''
    """
    if lo >= -1e-6 and hi <= 1 + 1e-6:
        return " (rounding? clip the scores to [0, 1] first)"
    if lo >= 0 and 1.5 < hi <= 100:
        return " (percent? divide by 100 first)"
    return ""


def is_missing(v: Any) -> bool:
    """Whether ``v`` marks a missing value: ``None``, or pandas' ``NA`` / ``NaT``
    (checked by type name, without importing pandas). NaN is a number here.

    Example:
      >>> is_missing(None), is_missing(float("nan")), is_missing(0.0)
      (True, False, False)
    """
    return v is None or type(v).__name__ in ("NAType", "NaTType")


def names_as_str(names: Any, what: str, source: str) -> np.ndarray:
    """Names as a str array; byte strings (dtype ``S``, e.g. from HDF5) decoded as UTF-8."""
    arr = np.asarray(names)
    if arr.dtype.kind == "S" or (
        arr.dtype == object and any(isinstance(v, bytes) for v in arr.ravel().tolist())
    ):
        try:
            vals = [v.decode("utf-8") if isinstance(v, bytes) else str(v)
                    for v in arr.ravel().tolist()]
            return np.array(vals, dtype=str).reshape(arr.shape)
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{source}: field '{what}' holds byte strings that are not UTF-8 ({e})"
            ) from None
    return arr.astype(str)


def rename_duplicates(names: Any, what: str, notes: dict, source: str = "") -> np.ndarray:
    """Make names unique by suffixing repeats with ``#2``, ``#3``, ...; records it in notes."""
    arr = names_as_str(names, what, source)
    taken = set(arr.tolist())  # a new name must not collide with any given one
    seen: dict[str, int] = {}
    out = []
    renamed = []
    for name in arr.tolist():
        if name not in seen:
            seen[name] = 1
            out.append(name)
            continue
        k = seen[name] + 1
        while f"{name}#{k}" in taken:
            k += 1
        seen[name] = k
        new = f"{name}#{k}"
        taken.add(new)
        renamed.append(new)
        out.append(new)
    if renamed:
        notes.setdefault("conversions", [])
        notes["conversions"] = list(notes["conversions"]) + [
            f"{len(renamed)} repeated '{what}' names made unique with a '#k' suffix "
            f"(e.g. {renamed[:3]})"
        ]
    return np.array(out)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, types.MappingProxyType):
        return dict(obj)
    return str(obj)


def _plain(obj: Any, key: Any = None) -> Any:
    """Mappings (a read-only ``MappingProxyType`` included, which cannot be deep-copied)
    as dicts, recursively, their keys passed through ``key`` when given; lists and
    tuples walked; anything else as is."""
    if isinstance(obj, Mapping):
        return {(k if key is None else key(k)): _plain(v, key) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_plain(v, key) for v in obj)
    return obj


class FrozenState:
    """Pickling and deep copies for the package's frozen dataclasses: their read-only
    mappings (``types.MappingProxyType``, which pickle refuses) travel as dicts and come
    back read-only, and arrays that were read-only stay so. Used by :class:`ScoreMatrix`
    and :class:`~jaxeval.LowRankLogistic` (multiprocessing, joblib, ``copy.deepcopy``).
    """

    def __getstate__(self) -> dict[str, Any]:
        state, proxied, frozen = {}, [], []
        for name, value in self.__dict__.items():
            if isinstance(value, types.MappingProxyType):
                value = dict(value)
                proxied.append(name)
            elif isinstance(value, np.ndarray) and not value.flags.writeable:
                frozen.append(name)
            state[name] = value
        return {"fields": state, "proxied": proxied, "readonly": frozen}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state["fields"].items():
            if name in state["proxied"]:
                value = types.MappingProxyType(value)
            elif name in state["readonly"]:
                value.setflags(write=False)
            object.__setattr__(self, name, value)


def _json_key(k: Any) -> Any:
    """A mapping key JSON can write: numpy scalars, tuples and the like as their ``str``."""
    return k if isinstance(k, (str, int, float, bool)) or k is None else str(k)


def _realigned(meta: Mapping[str, Any], r: np.ndarray, c: np.ndarray, m: int,
               n: int) -> dict[str, Any]:
    """``meta`` after :meth:`ScoreMatrix.take` kept rows ``r`` of ``m`` and columns ``c``
    of ``n``: the per-model and per-item notes the loaders write (``is_source``; the
    synthetic truth's ``probabilities``, ``U``, ``V``, ``c``) follow the selection, and
    the synthetic truth's ``best`` / ``gap`` / ``status``, which describe the whole
    matrix, are set to None with a note saying so."""
    same_r = r.size == m and bool(np.all(r == np.arange(m)))
    same_c = c.size == n and bool(np.all(c == np.arange(n)))
    if same_r and same_c:
        return dict(meta)
    out = dict(meta)
    src = out.get("is_source")
    if isinstance(src, (list, tuple, np.ndarray)) and len(src) == m:
        out["is_source"] = np.asarray(src)[r].tolist()
    truth = out.get("synthetic")
    if isinstance(truth, Mapping):
        t = dict(truth)
        for key, rows, cols in (("probabilities", True, True), ("U", True, False),
                                ("V", False, None), ("c", False, None)):
            a = t.get(key)
            listed = isinstance(a, (list, tuple))  # as a saved and reloaded .npz holds it
            if listed:
                try:
                    a = np.asarray(a, dtype=np.float64)
                except (TypeError, ValueError):
                    continue
            if not isinstance(a, np.ndarray):
                continue
            if rows and a.ndim >= 1 and a.shape[0] == m:
                a = a[r]
            if cols and a.ndim == 2 and a.shape[1] == n:
                a = a[:, c]
            if cols is None and a.ndim >= 1 and a.shape[0] == n:
                a = a[c]
            t[key] = a.tolist() if listed else a
        if any(t.get(k) is not None for k in ("best", "gap", "status")):
            t.update(best=None, gap=None, status=None)
            t["subset_note"] = ("best, gap and status described the whole synthetic matrix "
                                "and were cleared when models or items were taken from it")
        out["synthetic"] = t
    return out


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def _check_names(names: Any, length: int, what: str, source: str) -> np.ndarray:
    arr = np.asarray(names)
    if arr.ndim != 1 or arr.shape[0] != length:
        raise ValueError(
            f"{source}: field '{what}' must be a 1-D array of {length} names, got shape {arr.shape}"
        )
    arr = names_as_str(arr, what, source)
    uniq, counts = np.unique(arr, return_counts=True)
    if np.any(counts > 1):
        dup = uniq[counts > 1][:5].tolist()
        raise ValueError(f"{source}: field '{what}' has duplicate names, e.g. {dup}")
    return arr



def _is_frame(x: Any) -> bool:
    """A pandas DataFrame (or a look-alike), recognised without importing pandas."""
    return all(callable(getattr(x, a, None)) for a in ("to_numpy", "items")) and all(
        hasattr(x, a) for a in ("index", "columns", "dtypes"))


def as_score_matrix(data: Any, what: str, *, row_prefix: str | None = None,
                    items: Any = None) -> ScoreMatrix:
    """``data`` as a :class:`ScoreMatrix`: one as is, a pandas DataFrame with its labels
    (rows name the models, columns the items; pandas' default ``0, 1, ...`` names
    nothing, see :func:`frame_names`), or a 2-D array of scores in [0, 1] (NaN =
    unobserved) with default names. Rows that name nothing (an array's, or a frame's
    default labels) are named ``f"{row_prefix}{i}"`` when ``row_prefix`` is given
    (for a second matrix that must not share the first's made-up names) and columns
    that name nothing by ``items`` when it is given. Errors start with ``what``; a
    string is refused with the way to load a dataset."""
    if isinstance(data, ScoreMatrix):
        return data
    if isinstance(data, Split):
        raise TypeError(f"{what}: expected a ScoreMatrix, got a Split (pass split.train, "
                        "split.validation or split.test)")
    frame = _is_frame(data)
    if not frame and (data is None or isinstance(data, (str, bytes, os.PathLike, Mapping))):
        hint = f" (jaxeval.load({str(data)!r}) reads that file or bundled dataset)" if \
            isinstance(data, (str, os.PathLike)) else ""
        raise TypeError(f"{what}: expected a ScoreMatrix, a pandas DataFrame or a 2-D array "
                        f"of scores, got {type(data).__name__}{hint}")
    if frame:
        table, rows_named, cols_named = data, not default_labels(data.index), \
            not default_labels(data.columns)
        shape = data.shape
    else:
        try:
            table = np.asarray(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}: not a 2-D array of scores ({e})") from None
        rows_named = cols_named = False
        shape = table.shape
    models = None
    if row_prefix is not None and not rows_named and len(shape) == 2:
        models = [f"{row_prefix}{i}" for i in range(shape[0])]
    cols = None if items is None or cols_named else items
    return ScoreMatrix(table, models=models, items=cols, source=what)  # errors: `what`


def frame_names(labels: Any, prefix: str) -> np.ndarray:
    """The names a :class:`ScoreMatrix` gives a DataFrame's rows (``prefix="model_"``)
    or columns (``"item_"``): ``str`` of each label, or ``f"{prefix}{j}"`` for pandas'
    default ``0, 1, ...`` (a ``RangeIndex`` from 0; other integer labels, such as those
    of ``df.iloc[30:]`` or ``df[[0, 1]]``, are names: ``"30"``, ``"0"``)."""
    if default_labels(labels):
        return np.array([f"{prefix}{j}" for j in range(len(labels))])
    return np.array([str(x) for x in labels])


def default_labels(labels: Any) -> bool:
    """Whether pandas labels are the default ``0, 1, ...`` (made from an array, not
    named): they name nothing, and such a Series or DataFrame is read by position."""
    return type(labels).__name__ == "RangeIndex" and labels.start == 0 and labels.step == 1


def _check_seed(seed: Any, where: str) -> int:
    """Split seeds are non-negative ints (``None`` would silently draw a random split)."""
    from jaxeval._runner import check_int  # (jax is imported there)

    return check_int(f"{where}: seed", seed, 0)

@dataclasses.dataclass(frozen=True, eq=False)
class ScoreMatrix(FrozenState):
    """A validated ``[models, items]`` matrix of per-item scores in ``[0, 1]``.

    Attributes:
      scores: float32 ``[m, n]``; unobserved cells hold 0.
      mask: bool ``[m, n]``; True where a cell was observed.
      models: ``[m]`` unique model names.
      items: ``[n]`` unique item names.
      target: optional float32 ``[m]`` external full-benchmark score in ``[0, 1]``
        (used when the matrix holds only part of a benchmark); NaN where unknown.
      source: where the matrix came from (file path or dataset name).
      metadata: read-only mapping of provenance notes (licence, conversions made
        by the loader, rows removed, ...).

    ``scores`` may be a pandas DataFrame with models as rows and items as columns: its
    index and columns name the models and items (unless ``models`` / ``items`` are
    given; pandas' default labels ``0, 1, ...`` name nothing), and its missing values
    (NaN, or NA of a nullable column) are unobserved cells.

    Example:
      >>> import numpy as np, jaxeval
      >>> sm = jaxeval.ScoreMatrix(np.array([[1, 0, 1, 1], [0, 0, 1, 0]]))
      >>> sm.shape, sm.accuracy().tolist()
      ((2, 4), [0.75, 0.25])
    """

    scores: np.ndarray
    mask: np.ndarray | None = None
    models: Any = None
    items: Any = None
    target: np.ndarray | None = None
    source: str = "<array>"
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        src = self.source
        if self.metadata is None:
            meta: Any = {}
        elif isinstance(self.metadata, Mapping):
            meta = self.metadata
        else:
            raise TypeError(f"{src}: field 'metadata' must be a mapping, got "
                            f"{type(self.metadata).__name__}")
        notes = copy.deepcopy(_plain(meta))  # each matrix owns its notes' lists
        hidden = None  # the cells a numpy masked array masks
        table = self.scores
        if _is_frame(table):
            # a pandas DataFrame: models as rows, items as columns; its labels name them
            # (pandas' default 0, 1, ... names nothing), its missing values (NaN, NA of a
            # nullable column) are unobserved cells
            from pandas.api.types import is_bool_dtype, is_numeric_dtype

            for field, axis, prefix in (("models", table.index, "model_"),
                                        ("items", table.columns, "item_")):
                if getattr(self, field) is None:
                    object.__setattr__(self, field, frame_names(axis, prefix).tolist())
            bad = {str(c): str(t) for c, t in table.dtypes.items()
                   if not (is_numeric_dtype(t) or is_bool_dtype(t))}
            if bad:  # (text such as "1" would be read as a number)
                raise TypeError(f"{src}: field 'scores' must be real numbers; DataFrame "
                                f"column(s) {list(bad)[:5]} are not (dtype "
                                f"{', '.join(sorted(set(bad.values())))})")
            object.__setattr__(self, "scores",
                               table.to_numpy(dtype=np.float64, na_value=np.nan))
        if np.ma.isMaskedArray(self.scores):
            hidden = np.ma.getmaskarray(self.scores)
            raw = np.asarray(np.ma.getdata(self.scores))
        else:
            raw = np.asarray(self.scores)
        if raw.ndim != 2:
            raise ValueError(
                f"{src}: field 'scores' must be 2-D [models, items], got shape {raw.shape}"
            )
        m, n = raw.shape
        if m == 0 or n == 0:
            raise ValueError(f"{src}: field 'scores' is empty (shape {raw.shape})")
        if raw.dtype == bool:
            raw = raw.astype(np.uint8)
        if not np.issubdtype(raw.dtype, np.number) or np.issubdtype(raw.dtype, np.complexfloating):
            raise TypeError(
                f"{src}: field 'scores' must be real numbers, got dtype {raw.dtype}"
            )
        scores = raw.astype(np.float64)
        if hidden is not None and hidden.any():
            notes["conversions"] = list(notes.get("conversions", [])) + [
                f"{int(hidden.sum())} masked cells of a numpy masked array read as "
                "unobserved (mask=False)"
            ]
            scores = np.where(hidden, np.nan, scores)
        nan = np.isnan(scores)
        if self.mask is None:
            mask = ~nan
            own_nan = int((nan if hidden is None else nan & ~hidden).sum())  # not masked
            if own_nan:
                notes["conversions"] = list(notes.get("conversions", [])) + [
                    f"{own_nan} NaN cells read as unobserved (mask=False)"
                ]
        else:
            mask_hidden = None  # masked entries of a numpy masked array given as mask
            if np.ma.isMaskedArray(self.mask):
                mask_hidden = np.ma.getmaskarray(self.mask)
                mask = np.asarray(np.ma.filled(self.mask, 0))
            else:
                mask = np.asarray(self.mask)
            if mask.shape != raw.shape:
                raise ValueError(
                    f"{src}: field 'mask' has shape {mask.shape}, expected {raw.shape}"
                )
            if mask.dtype != bool:
                if not np.isin(mask, (0, 1)).all():
                    raise ValueError(f"{src}: field 'mask' must be boolean (0/1)")
                mask = mask.astype(bool)
            if mask_hidden is not None and mask_hidden.any():
                # an entry of the mask that is itself masked says nothing: unobserved
                notes["conversions"] = list(notes.get("conversions", [])) + [
                    f"{int(mask_hidden.sum())} masked entries of the numpy masked array "
                    "given as 'mask' read as unobserved (mask=False)"
                ]
            if hidden is not None:
                mask = mask & ~hidden
            bad = nan & mask
            if bad.any():
                i, j = np.argwhere(bad)[0]
                raise ValueError(
                    f"{src}: field 'scores' has {int(bad.sum())} NaN cells marked observed by "
                    f"'mask' (first at row {i}, column {j})"
                )
        if (np.isinf(scores) & mask).any():
            raise ValueError(f"{src}: field 'scores' holds infinite values in observed cells")
        obs = scores[mask]
        if obs.size and (obs.min() < 0.0 or obs.max() > 1.0):
            i, j = np.argwhere(mask & ((scores < 0) | (scores > 1)))[0]
            raise ValueError(
                f"{src}: field 'scores' must lie in [0, 1]; found {float(scores[i, j])!r} at "
                f"row {i}, column {j} (range {float(obs.min())!r}..{float(obs.max())!r})"
                + out_of_unit_hint(float(obs.min()), float(obs.max()))
            )
        scores = np.where(mask, scores, 0.0).astype(np.float32)
        models = (
            np.array([f"model_{i}" for i in range(m)])
            if self.models is None
            else _check_names(self.models, m, "models", src)
        )
        items = (
            np.array([f"item_{j}" for j in range(n)])
            if self.items is None
            else _check_names(self.items, n, "items", src)
        )
        target = None
        if self.target is not None:
            try:
                if np.iscomplexobj(self.target):
                    raise TypeError(f"complex values (dtype {np.asarray(self.target).dtype})")
                t = np.asarray(self.target, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"{src}: field 'target' must hold numbers (fractions in [0, 1], NaN for "
                    f"missing): {e}"
                ) from None
            if t.shape != (m,):
                raise ValueError(f"{src}: field 'target' must have shape ({m},), got {t.shape}")
            if np.isinf(t).any():
                raise ValueError(
                    f"{src}: field 'target' holds inf at models "
                    f"{np.flatnonzero(np.isinf(t))[:5].tolist()} (NaN marks a missing target)"
                )
            fin = t[np.isfinite(t)]
            if fin.size and (fin.min() < 0 or fin.max() > 1):
                raise ValueError(
                    f"{src}: field 'target' must lie in [0, 1] (fractions, not percent); "
                    f"range is {float(fin.min())!r}..{float(fin.max())!r}"
                )
            target = _readonly(t.astype(np.float32))
        object.__setattr__(self, "scores", _readonly(scores))
        object.__setattr__(self, "mask", _readonly(mask))
        object.__setattr__(self, "models", _readonly(models))
        object.__setattr__(self, "items", _readonly(items))
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "metadata", types.MappingProxyType(notes))

    # ------------------------------------------------------------------ basics
    @property
    def shape(self) -> tuple[int, int]:
        """``(n_models, n_items)``, as ``scores.shape``."""
        return self.scores.shape  # type: ignore[return-value]

    @property
    def n_models(self) -> int:
        """Rows of the matrix (models, the bandit's arms)."""
        return self.scores.shape[0]

    @property
    def n_items(self) -> int:
        """Columns of the matrix (benchmark items)."""
        return self.scores.shape[1]

    @property
    def is_complete(self) -> bool:
        """True when every cell is observed."""
        return bool(self.mask.all())

    @property
    def is_binary(self) -> bool:
        """True when every observed score is exactly 0 or 1."""
        obs = self.scores[self.mask]
        return bool(np.all((obs == 0) | (obs == 1)))

    def __repr__(self) -> str:
        kind = "binary" if self.is_binary else "graded"
        n_miss = int(self.mask.size - np.count_nonzero(self.mask))
        share = n_miss / max(self.mask.size, 1)
        # a few missing cells of a large matrix are not "0.0% missing"
        miss = f"{share:.1%}" if share >= 0.001 or n_miss == 0 else \
            f"{n_miss} cell{'s' if n_miss > 1 else ''}"
        tgt = ", external target" if self.target is not None else ""
        return (
            f"ScoreMatrix({self.n_models} models x {self.n_items} items, {kind}, "
            f"{miss} missing{tgt}, source={self.source!r})"
        )

    def accuracy(self) -> np.ndarray:
        """Per-model mean over observed items (float32 ``[m]``; NaN for an empty row).

        Example:
          >>> import numpy as np, jaxeval
          >>> jaxeval.ScoreMatrix(np.array([[1, np.nan, 0, 1]])).accuracy().tolist()
          [0.6666666865348816]
        """
        cnt = self.mask.sum(axis=1)
        tot = self.scores.sum(axis=1, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
        return acc.astype(np.float32)

    def true_score(self) -> np.ndarray:
        """The quantity to predict per model: ``target`` when present, else the row mean.

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.array([[1, 0], [1, 1]]), target=np.array([0.25, 0.75]))
          >>> sm.true_score().tolist(), sm.accuracy().tolist()
          ([0.25, 0.75], [0.5, 1.0])
        """
        return self.target if self.target is not None else self.accuracy()

    def require_complete(self, what: str = "this operation") -> ScoreMatrix:
        """Raise a clear error if any cell is missing; returns self otherwise.

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.array([[1, np.nan], [0, 1]]))
          >>> sm.take(models=[1]).require_complete().shape
          (1, 2)
          >>> try:
          ...     sm.require_complete("the factorization")
          ... except ValueError as e:
          ...     print(str(e)[:56])
          <array>: the factorization needs a fully observed matrix
        """
        if not self.is_complete:
            rows = np.flatnonzero(~self.mask.all(axis=1))
            if rows.size < self.n_models:
                fix = "restrict to complete rows with .take(models=...) first"
            else:  # (no complete row to keep: the items all of them answered, if any)
                cols = int(self.mask.all(axis=0).sum())
                fix = (f"no model row is complete; keep the {cols} item(s) every model "
                       "answered with .take(items=sm.mask.all(axis=0))" if cols else
                       "no model row is complete and no item was answered by every model")
            raise ValueError(
                f"{self.source}: {what} needs a fully observed matrix, but {rows.size} model "
                f"rows have missing cells (e.g. {self.models[rows[:3]].tolist()}); {fix}"
            )
        return self

    # ------------------------------------------------------------- reshaping
    def _index(self, sel: Any, names: np.ndarray, what: str) -> np.ndarray:
        if sel is None:
            return np.arange(names.size)
        orig = sel
        if isinstance(sel, range):
            sel = np.arange(sel.start, sel.stop, sel.step, dtype=np.int64)
        try:
            sel = np.asarray(sel)
        except ValueError as e:  # ragged nested lists
            raise ValueError(f"{what}: expected a 1-D selection ({e})") from None
        if sel.ndim == 0:  # one name or one index
            sel = sel.reshape(1)
        if sel.dtype == object and sel.size and all(isinstance(x, str) for x in sel.ravel()):
            sel = sel.astype(str)  # names in an object array (a pandas Series or Index)
        if sel.dtype.kind == "S" or (sel.dtype == object and sel.size and all(
                isinstance(x, (str, bytes)) for x in sel.ravel())):
            # byte-string names (HDF5 files) are decoded as the matrix's own were
            try:
                sel = names_as_str(sel, what, self.source)
            except ValueError:
                raise ValueError(f"{what}: the selection holds byte strings that are not "
                                 "UTF-8") from None
        if sel.ndim != 1:
            raise ValueError(f"{what}: expected a 1-D selection, got shape {sel.shape}")
        if sel.dtype == bool:  # (an empty mask too: its length is checked)
            if sel.shape != names.shape:
                raise ValueError(f"{what} mask has shape {sel.shape}, expected {names.shape}")
            return np.flatnonzero(sel)
        if sel.size == 0:
            return np.zeros(0, np.int64)
        if sel.dtype.kind in "US":
            lookup = {name: i for i, name in enumerate(names.tolist())}
            missing = [s for s in sel.tolist() if s not in lookup]
            if missing:
                one = {"models": "model", "items": "item"}.get(what, what)
                mixed = (" (a selection mixing names and indices is read as names: give "
                         "one or the other)" if isinstance(orig, (list, tuple)) and any(
                             isinstance(x, (int, np.integer)) for x in orig) else "")
                raise KeyError(f"{self.source}: unknown {one} names {missing[:5]}{mixed}")
            idx = np.array([lookup[s] for s in sel.tolist()], dtype=np.int64)
        elif sel.dtype.kind in "iu":
            idx = sel.astype(np.int64)
            if idx.min() < -names.size or idx.max() >= names.size:
                bad = idx[(idx < -names.size) | (idx >= names.size)]
                known = set(names.tolist())
                named = [str(int(i)) for i in bad if str(int(i)) in known]
                hint = (f" (integers are positions; {named[0]!r} is a name: pass names as "
                        f"strings, e.g. {named[:3]})" if named else "")
                raise IndexError(f"{self.source}: {what} index {int(bad[0])} out of range "
                                 f"for {names.size} {what}{hint}")
            idx = idx % names.size
        else:
            raise TypeError(
                f"{what}: expected integer indices, a boolean mask or names, got "
                f"{sel.dtype} values such as {sel[:3].tolist()}"
            )
        uniq, counts = np.unique(idx, return_counts=True)
        if (counts > 1).any():
            raise ValueError(
                f"{what}: the selection repeats {names[uniq[counts > 1][:5]].tolist()}"
            )
        return idx

    def take(self, models: Any = None, items: Any = None) -> ScoreMatrix:
        """Restrict to some rows and/or columns (indices, boolean masks or names).

        Per-model and per-item notes in ``metadata`` that the loaders write (the
        synthetic truth's arrays, ``is_source``) follow the selection.

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.eye(3), models=["a", "b", "c"])
          >>> sub = sm.take(models=["c", "a"], items=[0, 2])
          >>> sub.models.tolist(), sub.scores.tolist()
          (['c', 'a'], [[0.0, 1.0], [1.0, 0.0]])
        """
        r = self._index(models, self.models, "models")
        c = self._index(items, self.items, "items")
        if r.size == 0 or c.size == 0:
            raise ValueError(f"{self.source}: selection is empty ({r.size} models, {c.size} items)")
        return dataclasses.replace(
            self,
            scores=self.scores[np.ix_(r, c)],
            mask=self.mask[np.ix_(r, c)],
            models=self.models[r],
            items=self.items[c],
            target=None if self.target is None else self.target[r],
            metadata=_realigned(self.metadata, r, c, self.n_models, self.n_items),
        )

    def drop_duplicates(self, *, include_target: bool = False) -> ScoreMatrix:
        """Remove models whose observed row (scores and mask) repeats an earlier row.

        The names of removed models are recorded in ``metadata['dropped_duplicates']``.

        Args:
          include_target: also require the external ``target`` to repeat. By default
            (the METHODS.md 6.2 protocol as every table of this project ran it) only the
            item scores are compared, so on a matrix that holds a subset of a
            benchmark's items (metabench) models that agree on those items but differ
            in their full-benchmark score are dropped too: metabench ARC keeps 3 456 of
            4 280 models by rows, 3 838 with ``include_target=True``.

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.array([[1, 0], [1, 0], [0, 1]]),
          ...                          target=np.array([0.8, 0.3, 0.5]))
          >>> sm.drop_duplicates().n_models, sm.drop_duplicates(include_target=True).n_models
          (2, 3)
        """
        if not isinstance(include_target, (bool, np.bool_)):
            raise TypeError(f"include_target: expected a bool, got {include_target!r}")
        cols = [np.where(self.mask, self.scores, -1.0)]
        if include_target and self.target is not None:
            t = np.asarray(self.target, np.float64)
            cols.append(np.where(np.isnan(t), -1.0, t)[:, None])
        key = np.concatenate(cols, axis=1)
        _, first = np.unique(key, axis=0, return_index=True)
        keep = np.sort(first)
        if keep.size == self.n_models:
            return self
        dropped = np.setdiff1d(np.arange(self.n_models), keep)
        out = self.take(models=keep)
        meta = dict(out.metadata)
        meta["dropped_duplicates"] = (
            list(meta.get("dropped_duplicates", [])) + self.models[dropped].tolist()
        )
        return dataclasses.replace(out, metadata=meta)

    # ---------------------------------------------------------------- splits
    def split(self, sizes: Sequence[int | float], seed: int = 0) -> tuple[ScoreMatrix, ...]:
        """Seeded random split of the models into consecutive groups.

        Args:
          sizes: group sizes as counts (ints) or fractions (floats summing to <= 1,
            rounded cumulatively, halves to even as Python's ``round`` does, so
            fractions summing to 1 use every model); any models left over form one
            extra trailing group.
          seed: seed of ``np.random.default_rng`` for the permutation.

        Returns:
          One ScoreMatrix per group, in order.

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.eye(10))
          >>> [g.n_models for g in sm.split([3, 5])], [g.n_models for g in sm.split([0.5])]
          ([3, 5, 2], [5, 5])
        """
        m = self.n_models
        if isinstance(sizes, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"split: 'sizes' must be a sequence of group sizes, got {sizes!r} "
                f"(for one training group: split([{sizes!r}]))"
            )
        seed = _check_seed(seed, "split")
        if isinstance(sizes, np.ndarray):
            sizes = sizes.tolist()
        elif not isinstance(sizes, (str, bytes)):
            try:
                sizes = list(sizes)  # a generator would be used up by the checks below
            except TypeError:
                raise TypeError(f"split: 'sizes' must be a sequence of group sizes, got "
                                f"{sizes!r}") from None
        if not sizes:
            raise ValueError("split: 'sizes' is empty")
        if any(isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating))
               or not np.isfinite(s) for s in sizes):
            raise ValueError(f"split: 'sizes' must be finite numbers, got {list(sizes)!r}")
        if all(isinstance(s, (int, np.integer)) for s in sizes):
            counts = [int(s) for s in sizes]
        else:
            if any(s < 0 for s in sizes) or sum(sizes) > 1 + 1e-9:
                raise ValueError(
                    f"split: fractional 'sizes' must be >= 0 and sum to <= 1, got {sizes}"
                )
            # cumulative rounding: the groups of fractions summing to 1 use every model
            # (rounding each fraction on its own could leave one over or need one more)
            cum = np.cumsum([float(s) for s in sizes])
            ends = [int(round(c * m)) for c in cum]
            if abs(cum[-1] - 1.0) <= 1e-9:
                ends[-1] = m
            counts = np.diff([0] + ends).tolist()
        if any(c <= 0 for c in counts):
            raise ValueError(
                f"split: every group needs at least one model; sizes {sizes} -> {counts}"
            )
        if sum(counts) > m:
            raise ValueError(f"split: sizes {counts} need {sum(counts)} models, matrix has {m}")
        perm = np.random.default_rng(seed).permutation(m)
        bounds = np.cumsum([0] + counts)
        groups = [perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        if bounds[-1] < m:
            groups.append(perm[bounds[-1] :])
        return tuple(self.take(models=g) for g in groups)

    def split_pool(self, n_train: int | float, seed: int = 0) -> tuple[ScoreMatrix, ScoreMatrix]:
        """Seeded split of the models into training models and a candidate pool.

        Training models are the free history a factorization is fitted on; the
        candidate pool is where identification instances draw their arms from.

        Args:
          n_train: number of training models (int) or their share of the models
            (float in (0, 1), ``round(n_train * m)`` models, halves to even); the rest
            form the pool.
          seed: seed of ``np.random.default_rng`` for the permutation (the same
            permutation as :meth:`split` with one group).

        Returns:
          ``(train, pool)``.

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.eye(10))
          >>> train, pool = sm.split_pool(0.7, seed=0)
          >>> train.n_models, pool.n_models
          (7, 3)
        """
        m = self.n_models
        seed = _check_seed(seed, "split_pool")  # (named here, not as split's)
        if isinstance(n_train, (bool, np.bool_)) or not isinstance(
            n_train, (int, float, np.integer, np.floating)
        ):
            raise TypeError(f"split_pool: 'n_train' must be an int or a float, got {n_train!r}")
        if isinstance(n_train, (float, np.floating)):
            if not 0.0 < n_train < 1.0:
                raise ValueError(
                    f"split_pool: fractional 'n_train' must lie in (0, 1), got {n_train!r}"
                )
            count = int(round(n_train * m))
        else:
            count = int(n_train)
        if not 1 <= count <= m - 1:
            raise ValueError(
                f"split_pool: 'n_train' must leave at least one model on each side; "
                f"got {n_train!r} -> {count} of {m} models"
            )
        train, pool = self.split([count], seed=seed)
        return train, pool

    def to_npz(self, path: str | os.PathLike) -> Path:
        """Save to a ``.npz`` file that :func:`jaxeval.load` reads back.

        Writes ``scores`` (float32), ``mask``, ``models``, ``items``, ``target``
        (when present), ``source`` and the metadata as JSON (``metadata_json``;
        numpy arrays and tuples become lists, other objects their ``str``). Scores,
        mask, names and target come back unchanged, and the source too unless it is
        ``"<array>"`` (a matrix built in memory names no source: it comes back as the
        file's path); the metadata's ``file`` becomes the path it was read from.

        Args:
          path: destination; ``.npz`` is appended when missing (in any case: ``m.NPZ``
            is written as is, as :func:`jaxeval.load` reads it). An existing file
            there is replaced (atomically: an interrupted write leaves the old one).

        Returns:
          The path written.

        Example:
          >>> import numpy as np, pathlib, tempfile, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.array([[1.0, 0.5]]), models=["m"])
          >>> p = sm.to_npz(pathlib.Path(tempfile.mkdtemp()) / "m.npz")
          >>> back = jaxeval.load(p)
          >>> back.scores.tolist(), back.models.tolist()
          ([[1.0, 0.5]], ['m'])
        """
        path = npz_name(path)
        arrays = dict(
            scores=self.scores,
            mask=self.mask,
            models=self.models,
            items=self.items,
            source=np.array(self.source),
            metadata_json=np.array(json.dumps(_plain(self.metadata, _json_key),
                                              default=_json_default)),
        )
        if self.target is not None:
            arrays["target"] = self.target
        atomic_savez(path, arrays, compressed=True)
        return path

    def to_csv(self, path: str | os.PathLike, *, sep: str | None = None) -> Path:
        """Save as a wide table (models as rows, items as columns) that
        :func:`jaxeval.load` reads back.

        The header is ``model``, the items, and ``target`` when there is one; an
        unobserved cell (and an unknown target) is left empty. Scores, mask, names, their
        order and the target come back unchanged (each score is written with the fewest
        digits that read back as the same float32); the source and metadata are not
        written (:meth:`to_npz` keeps them).

        Args:
          path: destination ending in ``.csv`` or ``.tsv`` (any case; tab-separated by
            default). An existing file there is replaced (atomically: an interrupted
            write leaves the old one).
          sep: one-character separator; default ``,``, a tab for a ``.tsv`` path (as
            :func:`jaxeval.load` reads them).

        Returns:
          The path written.

        Raises:
          ValueError: a name the table would read back as something else: one with
            spaces around it (a table's cells are stripped), an empty one or one holding a
            carriage return, an item named ``model`` (the model column) or ``target`` /
            ``full_score_pct`` (read back as the target), items named both ``item`` and
            ``score`` (read back as a long table); :meth:`to_npz` keeps such names.

        Example:
          >>> import numpy as np, pathlib, tempfile, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.array([[1.0, np.nan], [0.25, 0.0]]),
          ...                          models=["a", "b, large"], items=["q1", "q2"])
          >>> p = sm.to_csv(pathlib.Path(tempfile.mkdtemp()) / "scores.csv")
          >>> print(p.read_text(), end="")
          model,q1,q2
          a,1,
          "b, large",0.25,0
          >>> back = jaxeval.load(p)
          >>> back.mask.tolist(), back.models.tolist()
          ([[True, False], [True, True]], ['a', 'b, large'])
        """
        import csv

        path = Path(path)
        if path.suffix.lower() not in (".csv", ".tsv"):
            raise ValueError(f"to_csv: path must end in .csv or .tsv (jaxeval.load tells a "
                             f"table by its suffix), got {str(path)!r}")
        if sep is None:
            sep = "\t" if path.suffix.lower() == ".tsv" else ","
        if not isinstance(sep, str) or len(sep) != 1 or sep in ('"', "\n", "\r"):
            raise ValueError(f"to_csv: sep must be one character (not a quote or line "
                             f"break), got {sep!r}")
        for what, names in (("model", self.models), ("item", self.items)):
            bad = [str(x) for x in names if str(x) != str(x).strip()]
            if bad:
                raise ValueError(
                    f"to_csv: {what} name {bad[0]!r} has spaces around it, which a table "
                    f"read back strips ({len(bad)} such {what} name(s)); rename it, or "
                    "save with to_npz, which keeps names as they are")
            bad = [str(x) for x in names if str(x) == "" or "\r" in str(x)]
            if bad:
                raise ValueError(
                    f"to_csv: {what} name {bad[0]!r} is empty or holds a carriage return, "
                    "which a table cannot hold; rename it, or save with to_npz")
        if {"item", "score"} <= set(map(str, self.items)):
            raise ValueError(
                "to_csv: items are named 'item' and 'score', which make a table read back "
                "as a long one (model, item, score columns); rename one "
                "(ScoreMatrix(..., items=...)), or save with to_npz")
        taken = sorted(set(map(str, self.items)) & {"model", "target", "full_score_pct"})
        if taken:
            role = ("the model column" if taken[0] == "model"
                    else "the models' full-benchmark score (target)")
            raise ValueError(
                f"to_csv: an item is named {taken[0]!r}, which a table read back takes for "
                f"{role}; rename it (ScoreMatrix(..., items=...)), or save with to_npz")

        def cell(v: Any, seen: bool = True) -> str:
            if not seen or np.isnan(v):
                return ""
            return np.format_float_positional(np.float32(v), unique=True, trim="-")

        header = ["model", *map(str, self.items)]
        if self.target is not None:
            header.append("target")
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter=sep, lineterminator="\n")
        writer.writerow(header)
        for r, name in enumerate(self.models):
            row = [str(name), *(cell(v, o) for v, o in zip(self.scores[r], self.mask[r]))]
            if self.target is not None:
                row.append(cell(self.target[r]))
            writer.writerow(row)
        with atomic_open(path) as fh:
            fh.write(buf.getvalue().encode("utf-8"))
        return path

    def to_pandas(self, layout: str = "wide") -> Any:
        """The scores as a pandas DataFrame (needs pandas).

        Args:
          layout: ``"wide"`` (default): models as rows (index named ``model``), items as
            columns (named ``item``), NaN where a cell is unobserved; ``ScoreMatrix(df)``
            reads it back (names, scores and mask; pass ``target=sm.target`` for the
            target). ``"long"``: one row per observed cell, columns ``model``, ``item``,
            ``score``, and ``target`` when there is one (NaN where unknown).

        Example:
          >>> import numpy as np, jaxeval
          >>> sm = jaxeval.ScoreMatrix(np.array([[1.0, np.nan], [0.25, 0.0]]),
          ...                          models=["a", "b"], items=["q1", "q2"])
          >>> sm.to_pandas()                                   # doctest: +SKIP
          item     q1   q2
          model
          a      1.00  NaN
          b      0.25  0.0
          >>> sm.to_pandas("long").shape                       # doctest: +SKIP
          (3, 3)
        """
        if layout not in ("wide", "long"):
            raise ValueError(f"to_pandas: layout must be 'wide' or 'long', got {layout!r}")
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - exercised only without pandas
            raise ImportError("to_pandas needs pandas; pip install 'jaxeval[dataframes]'") \
                from e
        if layout == "wide":
            return pd.DataFrame(
                np.where(self.mask, self.scores, np.float32(np.nan)),
                index=pd.Index(self.models.tolist(), name="model", dtype=object),
                columns=pd.Index(self.items.tolist(), name="item", dtype=object))
        r, c = np.nonzero(self.mask)
        cols = {"model": pd.Series(self.models[r].tolist(), dtype=object),
                "item": pd.Series(self.items[c].tolist(), dtype=object),
                "score": self.scores[r, c]}  # (names stay text with no cell observed)
        if self.target is not None:
            cols["target"] = self.target[r]
        return pd.DataFrame(cols)

    def protocol_split(self, seed: int) -> Split:
        """The anchor-evaluation split of METHODS.md section 6.2.

        Models are permuted with ``np.random.default_rng(seed).permutation``;
        ``h = 200`` when there are at least 1000 models, else ``round(0.2 * m)``;
        test = first ``h``, validation = next ``h``, train = the rest.
        Deduplicate first (``drop_duplicates``) to follow the protocol exactly.
        """
        seed = _check_seed(seed, "protocol_split")
        m = self.n_models
        h = 200 if m >= 1000 else int(round(0.2 * m))
        if h < 1 or m - 2 * h < 1:
            raise ValueError(f"protocol_split: {m} models are too few for train/validation/test")
        perm = np.random.default_rng(seed).permutation(m)
        return Split(
            train=self.take(models=perm[2 * h :]),
            validation=self.take(models=perm[h : 2 * h]),
            test=self.take(models=perm[:h]),
            seed=seed,
        )


@dataclasses.dataclass(frozen=True)
class Split:
    """Train / validation / test score matrices from one seeded split
    (:meth:`ScoreMatrix.protocol_split`: the METHODS.md 6.2 protocol's split).

    Example:
      >>> import jaxeval
      >>> sp = jaxeval.load("oll2_musr").drop_duplicates().protocol_split(seed=42)
      >>> sp.test.n_models, sp.validation.n_models, sp.train.n_models  # h = 0.2 * 427
      (85, 85, 257)
      >>> train, validation, test = sp  # it unpacks (the seed stays an attribute)
      >>> train is sp.train
      True
    """

    train: ScoreMatrix
    validation: ScoreMatrix
    test: ScoreMatrix
    seed: int

    def __iter__(self) -> Iterator[ScoreMatrix]:
        """``train, validation, test = split``, the three matrices in that order."""
        return iter((self.train, self.validation, self.test))


def cannot_write(folder: str | os.PathLike) -> str | None:
    """Why this process cannot create a file in the existing ``folder`` (``None`` when
    it can): checked before long work whose result would be written there. A probe file,
    since ``os.access`` says yes to root on a read-only mount or an immutable folder."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tmp-probe-"):
            return None
    except OSError as e:
        return e.strerror or str(e)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, *, sweep: bool = True) -> Iterator[Any]:
    """A binary file to write ``path`` through: written beside it (``.tmp-<pid>-<name>``),
    synced and renamed into place on success, removed on failure, so an interrupted
    write (a kill, a full disk) never leaves half a file under ``path``. A temporary
    file of ``path`` that a killed process (``kill -9``, a lost node) left behind is
    removed by the next successful write of ``path`` (see :func:`_sweep_stale_tmp`;
    ``sweep=False`` for a caller that sweeps its folder itself, as a study does on
    resuming: it writes a chunk at a time into a folder of many)."""
    path = Path(path)
    if not path.parent.is_dir():  # (else the error names the temporary file)
        raise FileNotFoundError(f"{path}: no such folder {str(path.parent)!r} to write into")
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if sweep:
        _sweep_stale_tmp(path)


# A temporary file untouched this long whose writer is not a live process here is stale.
_STALE_TMP_SECONDS = 600.0


def _sweep_stale_tmp(path: Path) -> None:
    """Remove ``.tmp-<pid>-<name>`` files of ``path`` left by writers that died: the
    pid is no live process on this host and the file has not changed for
    ``_STALE_TMP_SECONDS`` (a writer on another host of a shared filesystem keeps its
    file fresh while it writes). Best effort: nothing here raises."""
    prefix, suffix = ".tmp-", f"-{path.name}"
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return
    now = time.time()
    for entry in entries:
        name = entry.name
        pid = name[len(prefix):-len(suffix)] if name.startswith(prefix) and \
            name.endswith(suffix) else ""
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if now - entry.stat().st_mtime < _STALE_TMP_SECONDS or _pid_alive(int(pid)):
                continue
            entry.unlink()
        except OSError:
            continue


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process on this host (one of another user counts);
    always True on Windows, where ``os.kill`` would end the process."""
    if os.name == "nt":
        return True
    if pid <= 0:  # (os.kill(0, 0) signals this process group: never a writer's pid)
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, OSError):  # (PermissionError: another user's process)
        return True
    return True


def array_digest(*arrays: Any) -> str:
    """SHA-256 of the arrays' dtypes, shapes and bytes, in order."""
    h = hashlib.sha256()
    for x in arrays:
        x = np.ascontiguousarray(x)
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(x.tobytes())
    return h.hexdigest()


def npz_name(path: str | os.PathLike) -> Path:
    """``path`` with ``.npz`` appended unless it ends so, in any case (``m.NPZ`` stays:
    :func:`jaxeval.load` reads the suffix in any case), as the ``.npz`` writers name
    their files."""
    path = Path(path)
    return path if path.suffix.lower() == ".npz" else path.with_name(path.name + ".npz")


def saved_npz(path: str | os.PathLike) -> Path:
    """The file an ``.npz`` writer saved as ``path``: ``path`` itself, or
    :func:`npz_name` of it when only that exists (the readers accept either)."""
    path = Path(path)
    if not path.exists() and npz_name(path) != path and npz_name(path).exists():
        return npz_name(path)
    return path


# What reading a damaged .npz raises besides OSError and ValueError: a cut or garbled zip
# member (EOFError, BadZipFile, zlib.error), or a garbled .npy header, which numpy reads
# as a Python literal (tokenize.TokenError, SyntaxError). The readers catch these and say
# which file is not what they read.
NPZ_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
                   tokenize.TokenError, SyntaxError)


def atomic_savez(path: Path, arrays: Mapping[str, Any], *, compressed: bool = False) -> None:
    """``np.savez`` (or ``savez_compressed``) of ``arrays`` to ``path`` through
    :func:`atomic_open`."""
    with atomic_open(path) as fh:
        (np.savez_compressed if compressed else np.savez)(fh, **arrays)
