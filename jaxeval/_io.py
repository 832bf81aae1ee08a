"""Loading score matrices from files and bundled datasets.

``load`` dispatches on the source: a bundled dataset name, a ``.npz`` file in
the layout of the project's shared data, a long or wide CSV/Parquet table, or
lm-evaluation-harness ``--log_samples`` output (one ``samples_*.jsonl`` file, plain or
gzip-compressed, or a directory of runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxeval._data import NPZ_READ_ERRORS, ScoreMatrix, names_as_str, rename_duplicates

__all__ = ["load", "load_npz"]


def open_npz(path: str | os.PathLike):
    """``np.load(path)`` as an open :class:`numpy.lib.npyio.NpzFile` (no pickle);
    a plain ``.npy`` array is a ``ValueError`` (numpy would return the array)."""
    if not isinstance(path, (str, os.PathLike)):  # a file object: the caller's to close
        z = np.load(path, allow_pickle=False)
    else:
        # opened here, not by np.load: numpy leaves its own handle open when the zip
        # directory cannot be read (a truncated file)
        f = open(path, "rb")
        try:
            magic = f.read(6)
            if not magic.startswith(b"PK") and not magic.startswith(b"\x93NUMPY"):
                raise ValueError(
                    f"not an .npz archive (the file starts with {magic!r}, not the zip "
                    "signature 'PK')"
                )
            f.seek(0)
            z = np.load(f, allow_pickle=False)
        except BaseException:
            f.close()
            raise
        if isinstance(z, np.lib.npyio.NpzFile):
            z.fid = f  # its close() (or the with block) closes the file, as np.load's own
        else:
            f.close()
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError("a single array (.npy), not an .npz archive")
    return z


#: Other names people give the options of :func:`load` (the table separator above all).
_OPTION_ALIASES = {"separator": "sep", "seperator": "sep", "delimiter": "sep",
                   "delim": "sep", "metrics": "metric", "tasks": "task"}


def _options(fn: Any, kwargs: dict, what: str) -> dict:
    """``kwargs`` when ``fn`` takes every one of them; else a TypeError naming the one it
    does not take, the options it does, and the likely intended one."""
    import difflib
    import inspect

    names = [p for p in inspect.signature(fn).parameters if p != "path"]
    for k in kwargs:
        if k not in names:
            guess = _OPTION_ALIASES.get(k) or next(iter(
                difflib.get_close_matches(k, names, n=1, cutoff=0.6)), None)
            raise TypeError(f"load: {what} files take no option {k!r}"
                            + (f" (did you mean {guess}=?)" if guess in names else "")
                            + f"; their options: {', '.join(names)}")
    return kwargs


def _saved_kind(data: dict) -> str | None:
    """``"campaign"`` or ``"anchors"`` for a file jaxeval saved as such (its ``meta``
    entry names the format), else None."""
    if "meta" not in data:
        return None
    try:
        fmt = json.loads(str(data["meta"])).get("format", "")
    except (ValueError, AttributeError):
        return None
    if isinstance(fmt, str) and fmt.startswith("jaxeval.campaign/"):
        return "campaign"
    if isinstance(fmt, str) and fmt.startswith("jaxeval.anchors/"):
        return "anchors"
    return None


def load_npz(
    path: str | os.PathLike, *, name: str | None = None, duplicate_names: str = "error"
) -> ScoreMatrix:
    """Load a ``.npz`` score matrix (keys ``scores``, optional ``mask``, ``models``,
    ``items``, ``target`` (fractions) or ``full_score_pct`` (percent) -> ``target``,
    ``is_source``; ``source`` and ``metadata_json`` as written by
    :meth:`ScoreMatrix.to_npz`).

    Args:
      path: the file.
      name: the ``source`` to record (defaults to the path).
      duplicate_names: ``"error"`` refuses repeated model/item names; ``"rename"``
        suffixes repeats with ``#2``, ``#3``... and notes it in the metadata
        (the Open LLM Leaderboard files repeat a few resubmitted model names).
    """
    if duplicate_names not in ("error", "rename"):
        raise ValueError(
            f"load_npz: duplicate_names must be 'error' or 'rename', got {duplicate_names!r}"
        )
    path = Path(path)
    src = name or str(path)
    try:
        with open_npz(path) as z:
            data = {k: z[k] for k in z.files}
    except NPZ_READ_ERRORS as e:
        raise ValueError(f"{src}: not a readable .npz file ({type(e).__name__}: {e})") from e
    kind = _saved_kind(data)
    if kind == "campaign":
        raise ValueError(f"{src}: a saved IdentificationCampaign, not a score matrix; "
                         "IdentificationCampaign.saved_scores(path) reads its answers as one "
                         "(`jaxeval campaign export` on the command line)")
    if kind == "anchors":
        raise ValueError(f"{src}: a saved AnchorPredictor, not a score matrix "
                         "(AnchorPredictor.load reads it)")
    if "scores" not in data:
        raise ValueError(f"{src}: missing field 'scores' (fields present: {sorted(data)})")
    scores = data["scores"]
    notes: dict[str, Any] = {"format": "npz", "conversions": []}
    if "metadata_json" in data:  # written by ScoreMatrix.to_npz
        try:
            saved = json.loads(str(data["metadata_json"]))
        except json.JSONDecodeError as e:
            raise ValueError(f"{src}: field 'metadata_json' is not valid JSON ({e.msg})") from e
        if not isinstance(saved, dict):
            raise ValueError(f"{src}: field 'metadata_json' must hold a JSON object")
        notes = saved
        # (a list of notes, as the loaders write it; a matrix built by hand may have
        # saved None, one string or other values there: kept, as text)
        conv = notes.get("conversions")
        notes["conversions"] = ([] if conv is None else [str(c) for c in conv]
                                if isinstance(conv, list) else [str(conv)])
        if name is None and "source" in data and str(data["source"]) != "<array>":
            src = str(data["source"])  # a saved name; an in-memory matrix keeps the path
        notes["file"] = str(path)
    if scores.dtype == np.uint8 or scores.dtype == bool:
        # (cells outside 'mask' may hold a fill value such as 255; the observed ones are
        # checked to lie in [0, 1] by ScoreMatrix)
        notes["conversions"].append(f"{scores.dtype} 0/1 scores converted to float32")
    target = None
    if "target" in data and "full_score_pct" in data:
        raise ValueError(f"{src}: fields 'target' and 'full_score_pct' are both present")
    if "target" in data:
        target = data["target"]
    if "full_score_pct" in data:
        pct = np.asarray(data["full_score_pct"], dtype=np.float64)
        target = pct / 100.0
        notes["conversions"].append("target = full_score_pct / 100 (full-benchmark score)")
    for k in ("is_source", "theta_note"):
        if k in data:
            v = data[k]
            notes[k] = v.tolist() if v.ndim else str(v)
    models, items = data.get("models"), data.get("items")
    if duplicate_names == "error":
        for what, names in (("models", models), ("items", items)):
            if names is not None and np.ndim(names) == 1:
                uniq, counts = np.unique(names_as_str(names, what, src), return_counts=True)
                if np.any(counts > 1):
                    raise ValueError(
                        f"{src}: field '{what}' has duplicate names, e.g. "
                        f"{uniq[counts > 1][:3].tolist()}; pass duplicate_names='rename' to "
                        "suffix repeats with '#2', '#3', ..."
                    )
    if duplicate_names == "rename":
        if models is not None:
            models = rename_duplicates(models, "models", notes, src)
        if items is not None:
            items = rename_duplicates(items, "items", notes, src)
    return ScoreMatrix(
        scores=scores,
        mask=data.get("mask"),
        models=models,
        items=items,
        target=target,
        source=src,
        metadata=notes,
    )


def load(source: Any, **kwargs: Any) -> ScoreMatrix:
    """Load a :class:`ScoreMatrix` from a bundled dataset name or a file/directory.

    Args:
      source: a bundled dataset name (see ``jaxeval.datasets.names()``), a path to
        ``.npz``, ``.csv``/``.tsv``, ``.parquet``, an lm-evaluation-harness
        ``samples_*.jsonl`` (or ``.jsonl.gz``) file, or a directory of such runs; or a
        ScoreMatrix (returned as is).
      **kwargs: passed to the format's loader (e.g. ``layout="long"`` for tables,
        ``metric="acc"`` for lm-evaluation-harness samples).

    Example:
      >>> import jaxeval
      >>> sm = jaxeval.load("oll2_musr")
      >>> sm.shape
      (448, 756)
    """
    from jaxeval import datasets

    if isinstance(source, ScoreMatrix):
        if kwargs:
            raise TypeError(
                f"load: options {sorted(kwargs)} are for files; a ScoreMatrix is returned as is"
            )
        return source
    if isinstance(source, str) and source in datasets.names():
        if kwargs:
            raise TypeError(
                f"load: {source!r} is a bundled dataset; options {sorted(kwargs)} are for files"
            )
        return datasets.load(source)
    if not isinstance(source, (str, os.PathLike)):
        hint = ("; a pandas DataFrame (models as rows, items as columns) is read by "
                "jaxeval.ScoreMatrix(df)") if type(source).__name__ == "DataFrame" else ""
        raise TypeError(
            f"load: expected a dataset name, a path or a ScoreMatrix, got "
            f"{type(source).__name__}{hint}"
        )
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(
            f"load: {str(source)!r} is neither a bundled dataset ({', '.join(datasets.names())}) "
            "nor an existing file or directory"
        )
    suffix = path.suffix.lower()
    if path.is_dir() or suffix in (".jsonl", ".json") or path.name.lower().endswith(".jsonl.gz"):
        from jaxeval._lmeval import load_lm_eval

        return load_lm_eval(path, **_options(load_lm_eval, kwargs, "lm-evaluation-harness"))
    if suffix == ".npz":
        return load_npz(path, **_options(load_npz, kwargs, ".npz"))
    if suffix in (".csv", ".tsv", ".parquet", ".pq"):
        from jaxeval._tables import load_table

        return load_table(path, **_options(load_table, kwargs, f"{suffix} table"))
    raise ValueError(f"load: cannot tell the format of {str(path)!r} from suffix {suffix!r} "
                     "(read: .npz, .csv, .tsv, .parquet, .pq, and lm-evaluation-harness "
                     "samples_*.jsonl(.gz) files or folders)")
