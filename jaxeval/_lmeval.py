"""Score matrices from lm-evaluation-harness ``--log_samples`` output.

The harness writes, under ``<output_path>/<model_name_sanitized>/``, one
``samples_<task>_<timestamp>.jsonl`` per task: one JSON object per line and
document, with ``doc_id``, ``doc``, ``target``, ``arguments``, ``resps``,
``filtered_resps``, ``filter`` (e.g. ``"none"``, or ``"strict-match"`` and
``"flexible-extract"`` on two lines for the same ``doc_id``), ``metrics`` (the
metric names), hashes (``doc_hash``, ``prompt_hash``, ``target_hash``) and the
metric values as top-level fields (``"acc": 1.0``, ``"exact_match": 0.0``, ...).

Rules:

- One file is one model's row; the model is named after the folder holding it.
- A samples file compressed with gzip (``samples_*.jsonl.gz``) is read like the
  plain one.
- A folder holding ``samples_*.jsonl`` files is one model; a folder of such
  folders is one model per subfolder. Rows are aligned on ``doc_id`` (on
  ``(task, doc_id)`` when several tasks are loaded, items then named
  ``"<task>/<doc_id>"``). A document that a model lacks is unobserved
  (``mask`` False, recorded in ``metadata['conversions']``; ``missing="error"``
  refuses instead). The same ``doc_id`` with different ``doc_hash`` values in two
  runs means the runs are not aligned and is refused.
- The metric is ``metric=`` or else the first of :data:`DEFAULT_METRICS` present
  (on a file's first line of the filter chosen), or else, when none is, the one field
  that line's ``metrics`` list names, if that line holds it as a number (a
  ``true``/``false`` there is not taken as a metric: the file is refused as having no
  usable metric field; ``metric=`` reads it); values must be numbers in [0, 1]
  (``true``/``false`` are read as 1/0 and recorded, e.g. in ``acc`` or a field named
  by ``metric=``).
  Several filters per document need ``filter=``; the documents of a run with no line
  for the filter chosen are recorded.
- Refused, naming the file (and line): corrupt JSON, a line without ``doc_id``,
  duplicate ``doc_id`` (``0`` and ``"0"`` in one file included), a missing,
  non-numeric, NaN or out-of-range metric, an empty file, several runs of one task for
  one model (unless ``runs="latest"``).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from jaxeval._data import ScoreMatrix

__all__ = ["DEFAULT_METRICS", "load_lm_eval"]

DEFAULT_METRICS = (
    "acc",
    "exact_match",
    "acc_norm",
    "prompt_level_strict_acc",
    "pass@1",
    "em",
    "f1",
    "mc2",
    "mc1",
)

_NAME = re.compile(
    r"^samples_(?P<task>.+?)_(?P<ts>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl(?:\.gz)?$", re.IGNORECASE)
_BOOKKEEPING = {
    "doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
    "doc_hash", "prompt_hash", "target_hash",
}


def is_samples_name(name: str) -> bool:
    """Whether a file name ends as a samples file does (``.jsonl`` or ``.jsonl.gz``, in
    any case)."""
    return name.lower().endswith((".jsonl", ".jsonl.gz"))


def _task_of(path: Path) -> tuple[str, str]:
    m = _NAME.match(path.name)
    if m:
        return m["task"], m["ts"]
    low = path.name.lower()
    cut = next((len(x) for x in (".jsonl.gz", ".jsonl") if low.endswith(x)), None)
    stem = path.name[:-cut] if cut else path.stem
    # (the prefix in any case, as _NAME and _samples_files read it)
    return (stem[len("samples_"):] if stem.lower().startswith("samples_") else stem), ""


def _raw(path: Path) -> bytes:
    """A samples file's bytes, decompressed where it is a ``.gz`` file."""
    try:
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            raw = gzip.decompress(raw)  # (a truncated or damaged one: EOFError, zlib.error)
        return raw
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(f"{path}: cannot read the file ({type(e).__name__}: {e})") from e


def _read_samples(path: Path) -> list[tuple[int, dict]]:
    out = []
    raw = _raw(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: cannot read the file ({type(e).__name__}: {e})") from e
    # JSON Lines ends records at "\n" only: str.splitlines() would also split at
    # U+2028 / U+2029 / U+0085, which the harness writes unescaped inside strings
    # (ensure_ascii=False)
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {lineno}: corrupt JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise ValueError(
                f"{path}, line {lineno}: expected a JSON object, got {type(obj).__name__}"
            )
        if "doc_id" not in obj:
            raise ValueError(
                f"{path}, line {lineno}: missing field 'doc_id' (fields: {sorted(obj)[:12]})"
            )
        out.append((lineno, obj))
    if not out:
        raise ValueError(f"{path}: no samples (empty file)")
    return out


def _pick_metric(path: Path, samples: list[tuple[int, dict]], metric: str | None) -> str:
    first = samples[0][1]
    if metric is not None:
        if metric not in first:
            named = first.get("metrics")
            raise ValueError(
                f"{path}, line {samples[0][0]}: no field '{metric}' (metric fields: "
                f"{named if named is not None else _candidates(first)})"
            )
        return metric
    for m in DEFAULT_METRICS:
        if m in first:
            return m
    named = first.get("metrics")
    if isinstance(named, list) and len(named) == 1 and named[0] in first:
        value = first[named[0]]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return named[0]
    raise ValueError(
        f"{path}: no usable metric field; none of {list(DEFAULT_METRICS)} is present. "
        f"Fields seen: {sorted(first)}; pass metric=<field> to choose one"
    )


def _candidates(obj: dict) -> list[str]:
    return sorted(k for k in obj if k not in _BOOKKEEPING)


def _read_run(
    path: Path, metric: str | None, filter: str | None, flags: dict
) -> tuple[str, dict[Any, float], dict[Any, str]]:
    """One samples file -> (metric used, {doc_id: value}, {doc_id: doc_hash})."""
    samples = _read_samples(path)
    filters = sorted({str(obj.get("filter", "none")) for _, obj in samples})
    if filter is None and len(filters) > 1:
        raise ValueError(
            f"{path}: field 'filter' takes several values {filters} (one line per filter and "
            "document); pass filter=<name> to choose one"
        )
    if filter is not None:
        if filter not in filters:
            raise ValueError(
                f"{path}: no line has filter {filter!r}; field 'filter' takes values {filters}"
                "; where tasks log different filters, name the task: filter={task: name}"
            )
        docs = {o["doc_id"] for _, o in samples if isinstance(o["doc_id"], (int, str))}
        samples = [(ln, o) for ln, o in samples if str(o.get("filter", "none")) == filter]
        kept = {o["doc_id"] for _, o in samples if isinstance(o["doc_id"], (int, str))}
        if docs - kept:  # documents logged under other filters only: recorded, not lost
            flags["lost"] = sorted(docs - kept, key=lambda d: (isinstance(d, str), d))
    flags["filter_read"] = filter if filter is not None else filters[0]
    used = _pick_metric(path, samples, metric)
    values: dict[Any, float] = {}
    hashes: dict[Any, str] = {}
    lines: dict[Any, int] = {}
    named: dict[str, Any] = {}
    for lineno, obj in samples:
        doc = obj["doc_id"]
        if isinstance(doc, bool) or not isinstance(doc, (int, str)):
            raise ValueError(
                f"{path}, line {lineno}: field 'doc_id' must be an int or a string, got {doc!r}"
            )
        if doc in lines:
            raise ValueError(
                f"{path}, line {lineno}: duplicate doc_id {doc!r} (first on line {lines[doc]})"
            )
        twin = named.setdefault(str(doc), doc)
        if twin != doc:  # 0 and "0": one item name, written as a number and as text
            raise ValueError(
                f"{path}, line {lineno}: doc_id {doc!r} names the same item as doc_id {twin!r} "
                f"on line {lines[twin]} (a number on one line, text on the other)"
            )
        lines[doc] = lineno
        if used not in obj:
            raise ValueError(f"{path}, line {lineno}: missing field '{used}' for doc_id {doc!r}")
        v = obj[used]
        if isinstance(v, bool):
            flags["bool"] = True
            v = float(v)
        if not isinstance(v, (int, float)):
            raise ValueError(
                f"{path}, line {lineno}: field '{used}' is not a number for doc_id {doc!r}: "
                f"{str(v)[:60]!r}; pick another field with metric="
            )
        try:
            v = float(v)
        except OverflowError:  # an int too large for a float
            v = math.inf
        if math.isnan(v) or not 0.0 <= v <= 1.0:
            raise ValueError(
                f"{path}, line {lineno}: field '{used}' must lie in [0, 1], got {v!r} for "
                f"doc_id {doc!r}"
            )
        values[doc] = v
        if "doc_hash" in obj:
            hashes[doc] = str(obj["doc_hash"])
    return used, values, hashes


def _samples_files(folder: Path) -> list[Path]:
    """The ``samples_*.jsonl`` (or ``.jsonl.gz``) files of a folder, the prefix and
    suffix in any case, as a single file's name is read (sorted)."""
    # (not is_dir() rather than is_file(): a dangling link is a samples file that
    # cannot be read, to be reported, not skipped)
    try:
        entries = list(folder.iterdir())
    except OSError:  # (an unreadable folder beside the model folders holds no samples)
        return []
    return sorted(f for f in entries if f.name.lower().startswith("samples_")
                  and is_samples_name(f.name) and not f.is_dir())


def _runs_in(folder: Path, task: Any, runs: str, dropped: list[str],
             present: set[str], copies: list[str]) -> dict[str, Path]:
    """{task: file} for the samples files of one model folder (older runs -> dropped).

    With ``task``, only those tasks; one this folder lacks is left out (its documents
    are then unobserved for this model, as without ``task``; :func:`load_lm_eval`
    refuses a task no folder has). Every task found is added to ``present``. A
    ``.jsonl.gz`` beside the plain file of the same name (``gzip -k``) is the same run:
    read once, the copy listed in ``copies``, or refused where the two differ. Only the
    copies of the files read are compared (a task not asked for, or an older run dropped,
    is not opened)."""
    files = _samples_files(folder)
    plain = {f.name.lower(): f for f in files if not f.name.lower().endswith(".gz")}
    twins = {f: plain[f.name.lower()[:-3]] for f in files
             if f.name.lower().endswith(".gz") and f.name.lower()[:-3] in plain}
    files = [f for f in files if f not in twins]
    by_task: dict[str, list[tuple[str, Path]]] = {}
    for f in files:
        t, ts = _task_of(f)
        by_task.setdefault(t, []).append((ts, f))
    present.update(by_task)
    if task is not None:
        wanted = [task] if isinstance(task, str) else list(task)
        by_task = {t: by_task[t] for t in wanted if t in by_task}
    out = {}
    for t, lst in by_task.items():
        if len(lst) > 1 and runs != "latest":
            raise ValueError(
                f"{folder}: {len(lst)} runs of task {t!r} ({[p.name for _, p in lst]}); "
                "pass runs='latest' to keep the newest"
            )
        out[t] = max(lst, key=lambda x: (x[0], x[1].name))[1]
        dropped.extend(str(p) for _, p in lst if p != out[t])
    kept = set(out.values())
    for gz, twin in twins.items():
        if twin not in kept:
            continue
        if _raw(gz) != _raw(twin):
            raise ValueError(f"{gz}: a compressed copy of {twin.name} whose contents differ "
                             "from it; keep one of the two")
        copies.append(str(gz))
    return out


def load_lm_eval(
    path: str | os.PathLike,
    metric: str | None = None,
    filter: str | dict[str, str] | None = None,
    task: str | list[str] | None = None,
    runs: str = "error",
    missing: str = "mask",
    model: str | None = None,
    name: str | None = None,
) -> ScoreMatrix:
    """Load lm-evaluation-harness ``--log_samples`` output as a score matrix.

    Args:
      path: one ``samples_<task>_<timestamp>.jsonl`` file (or ``.jsonl.gz``; one model), a model's
        output folder (one model, possibly several tasks), or a folder of model
        folders (one row per model).
      metric: the per-sample field to read (default: the first of
        :data:`DEFAULT_METRICS` present on a file's first line, or else the single
        field named by that line's ``metrics`` list, if its value there is a number
        and not ``true``/``false``, which is refused as no usable metric; ``true``/
        ``false`` in a default metric such as ``acc``, or in the field ``metric=``
        names, are read as 1/0).
      filter: which ``filter`` value to keep when a task logs several per document
        (e.g. ``"strict-match"`` or ``"flexible-extract"``); one name for every task,
        or a mapping ``{task: filter}`` for a folder whose tasks log different filters
        (tasks not in it are read as without ``filter``).
      task: task name(s) to keep when a folder holds several (default: all). A model
        folder that lacks one of them leaves its documents unobserved for that model
        (as without ``task``; refused under ``missing="error"``); a task that no
        folder has is refused.
      runs: ``"error"`` (default) refuses several runs of one task for one model;
        ``"latest"`` keeps the newest timestamp and records it.
      missing: ``"mask"`` (default) leaves documents a model lacks unobserved;
        ``"error"`` refuses unaligned ``doc_id`` sets.
      model: model name for a single file (default: its folder's name).
      name: the ``source`` to record (default: the path).

    Returns:
      A :class:`~jaxeval.ScoreMatrix` with items named by ``doc_id`` (sorted), or
      ``"<task>/<doc_id>"`` when several tasks are loaded.

    Example:
      >>> import json, pathlib, tempfile, jaxeval
      >>> run = pathlib.Path(tempfile.mkdtemp()) / "org__model-7b"
      >>> run.mkdir()
      >>> lines = [{"doc_id": i, "filter": "none", "metrics": ["acc"], "acc": float(i % 2)}
      ...          for i in range(4)]
      >>> f = run / "samples_arc_easy_2025-01-01T00-00-00.000000.jsonl"
      >>> _ = f.write_text("\\n".join(json.dumps(x) for x in lines))
      >>> sm = jaxeval.load(f)
      >>> sm.models.tolist(), sm.scores.tolist()
      (['org__model-7b'], [[0.0, 1.0, 0.0, 1.0]])
    """
    path = Path(path)
    src = name or str(path)
    if runs not in ("error", "latest"):
        raise ValueError(f"load_lm_eval: runs must be 'error' or 'latest', got {runs!r}")
    if missing not in ("mask", "error"):
        raise ValueError(f"load_lm_eval: missing must be 'mask' or 'error', got {missing!r}")
    # model name -> {task: file}
    dropped: list[str] = []
    present: set[str] = set()  # every task found in the model folders
    copies: list[str] = []  # .jsonl.gz copies of plain samples files, not read twice
    skipped: list[str] = []
    skipped_why = ""
    if path.is_file():
        if not is_samples_name(path.name):
            raise ValueError(
                f"{path}: not a samples_*.jsonl (or .jsonl.gz) file; lm-evaluation-harness "
                "results_*.json "
                "files hold aggregates only. Run with --log_samples and pass the samples file "
                "or the output folder (a table of scores of your own is read from .csv, .tsv, "
                ".parquet or .npz, not JSON)"
            )
        t, _ = _task_of(path)
        if task is not None and t not in ([task] if isinstance(task, str) else task):
            raise ValueError(f"{path}: file holds task {t!r}, not {task!r}")
        layout = {model or path.parent.name or "model_0": {t: path}}
    elif path.is_dir():
        if _samples_files(path):
            layout = {model or path.name: _runs_in(path, task, runs, dropped, present,
                                                   copies)}
            skipped = sorted(d.name for d in path.iterdir()
                             if d.is_dir() and _samples_files(d))
            if skipped:
                skipped_why = (f"{path} holds samples files itself, so it is read as one "
                               f"model; its subfolders with samples files {skipped[:5]} are "
                               "not read (pass them one by one, or a folder of model "
                               "folders only)")
        else:
            if model is not None:
                raise ValueError(
                    f"load_lm_eval: model={model!r} names the one model of a folder of samples "
                    f"files; {path} is a folder of model folders (each named by its folder)"
                )
            subs = sorted(
                d for d in path.iterdir() if d.is_dir() and _samples_files(d)
            )
            skipped = sorted(d.name for d in path.iterdir() if d.is_dir() and d not in subs
                             and any(d.glob("results_*.json")))
            if skipped:
                skipped_why = (f"model folders {skipped[:5]} of {path} have results_*.json "
                               "but no samples_*.jsonl (run without --log_samples?): not read")
            if not subs:
                raise ValueError(
                    f"{path}: no samples_*.jsonl files here or in its subfolders "
                    "(run lm-evaluation-harness with --log_samples)"
                )
            layout = {d.name: _runs_in(d, task, runs, dropped, present, copies)
                      for d in subs}
    else:
        raise FileNotFoundError(f"load_lm_eval: {str(path)!r} does not exist")
    if task is not None and path.is_dir():
        wanted = [task] if isinstance(task, str) else list(task)
        absent = [t for t in wanted if t not in present]
        if absent:
            raise ValueError(
                f"{path}: no samples file for task(s) {absent}; tasks present: {sorted(present)}"
            )
        empty = [m for m, per in layout.items() if not per]
        if empty:
            warnings.warn(f"load_lm_eval: model folders {empty[:5]} have none of the tasks "
                          f"{wanted}: their rows are unobserved", stacklevel=3)
    notes: dict[str, Any] = {"format": "lm-evaluation-harness samples", "conversions": []}
    if skipped:
        notes["conversions"].append(skipped_why)
        warnings.warn(f"load_lm_eval: {skipped_why}", stacklevel=3)
    flags: dict[str, bool] = {}
    tasks = sorted({t for per in layout.values() for t in per})
    multi = len(tasks) > 1
    rows: dict[str, dict[Any, float]] = {}
    hash_of: dict[Any, tuple[str, Path]] = {}
    metrics_used: dict[str, str] = {}
    files: dict[str, list[str]] = {}
    lost: dict[str, tuple[int, int, Any]] = {}
    if isinstance(filter, dict):
        # (an entry for a task the folder has but task= left out is not an error: one
        # filter mapping may serve several task choices)
        unknown = sorted(set(filter) - set(tasks) - present)
        if unknown:
            raise ValueError(f"filter: no task {unknown} in {path}; the tasks there are "
                             f"{sorted(present | set(tasks))}")
    elif filter is not None and not isinstance(filter, str):
        raise TypeError(f"filter: expected a filter name or a {{task: filter}} mapping, got "
                        f"{type(filter).__name__}")
    filters_read: dict[str, set] = {}  # (the filter each task's lines were read under)
    for m_name, per_task in layout.items():
        row: dict[Any, float] = {}
        for t, f in sorted(per_task.items()):
            f_t = filter.get(t) if isinstance(filter, dict) else filter
            used, values, hashes = _read_run(f, metric, f_t, flags)
            filters_read.setdefault(t, set()).add(flags.pop("filter_read"))
            if "lost" in flags:  # per task: runs, documents, the first run's examples
                runs_t, n_t, first = lost.get(t, (0, 0, None))
                lost[t] = (runs_t + 1, n_t + len(flags["lost"]),
                           first or (str(f), flags["lost"][:3], f_t))
                del flags["lost"]
            if metrics_used.setdefault(t, used) != used:
                raise ValueError(
                    f"{f}: default metric is '{used}' but other runs of task {t!r} use "
                    f"'{metrics_used[t]}'; pass metric= explicitly"
                )
            for doc, v in values.items():
                key = (t, doc) if multi else doc
                row[key] = v
                if doc in hashes:
                    prev = hash_of.setdefault(key, (hashes[doc], f))
                    if prev[0] != hashes[doc]:
                        raise ValueError(
                            f"{f}: doc_id {doc!r} has field 'doc_hash' {hashes[doc][:12]!r} but "
                            f"{prev[1]} has {prev[0][:12]!r}: the runs are not aligned on doc_id "
                            "(different documents or task versions)"
                        )
            files.setdefault(m_name, []).append(str(f))
        rows[m_name] = row
    keys = sorted({k for r in rows.values() for k in r}, key=_sort_key)
    names: dict[str, Any] = {}
    for k in keys:
        other = names.setdefault(_item_name(k, multi), k)
        if other != k:
            holders = [m for m, r in rows.items() if k in r or other in r]
            raise ValueError(
                f"{src}: the runs write doc_id {_item_name(k, multi)!r} both as {other!r} and "
                f"as {k!r} (a number in some runs, text in others?); models involved: "
                f"{holders[:5]} (files {[files[m][0] for m in holders[:2]]})"
            )
    col = {k: j for j, k in enumerate(keys)}
    models = list(rows)
    scores = np.zeros((len(models), len(keys)), np.float32)
    mask = np.zeros(scores.shape, bool)
    for i, m_name in enumerate(models):
        for k, v in rows[m_name].items():
            scores[i, col[k]] = v
            mask[i, col[k]] = True
    lacking = int((~mask).sum())
    if lacking:
        short = [models[i] for i in np.flatnonzero(~mask.all(1))]
        if missing == "error":
            i = int(np.flatnonzero(~mask.all(1))[0])
            j = int(np.flatnonzero(~mask[i])[0])
            task_j = keys[j][0] if multi else tasks[0]
            run = layout[models[i]].get(task_j)
            where = str(run) if run is not None else f"no samples file of task {task_j!r}"
            raise ValueError(
                f"{src}: doc_ids are not aligned across runs: model {models[i]!r} lacks "
                f"doc_id {_item_name(keys[j], multi)!r} ({where}) among {lacking} missing "
                "cells; use missing='mask' to keep them unobserved"
            )
        notes["conversions"].append(
            f"{lacking} (model, doc_id) cells absent from the runs of {short[:3]}"
            f"{'...' if len(short) > 3 else ''}: unobserved (mask=False)"
        )
    if flags.get("bool"):
        notes["conversions"].append("true/false metric values read as 1/0")
    for t, (runs_t, n_t, (f0, eg, f_t)) in sorted(lost.items()):
        notes["conversions"].append(
            f"task {t!r}: {n_t} doc_id(s) in {runs_t} run(s) have no line with filter "
            f"{f_t!r} (e.g. {eg} in {f0}): not read from those runs")
    if copies:
        notes["conversions"].append(
            f"{len(copies)} .jsonl.gz copies of plain samples files, the same contents, "
            f"read once: {copies[:5]}{'...' if len(copies) > 5 else ''}")
    if dropped:
        notes["runs"] = "latest timestamp kept per (model, task)"
        notes["conversions"].append(
            f"{len(dropped)} older run(s) of the same task ignored (runs='latest'): {dropped}"
        )
    notes.update(metric=metrics_used, tasks=tasks, files=files,
                 filters_read={t: sorted(v) for t, v in sorted(filters_read.items())})
    if filter is not None:
        notes["filter"] = filter
    return ScoreMatrix(
        scores=scores,
        mask=mask,
        models=models,
        items=[_item_name(k, multi) for k in keys],
        source=src,
        metadata=notes,
    )


def _sort_key(k: Any) -> tuple:
    if isinstance(k, tuple):
        return (k[0],) + _sort_key(k[1])
    return (0, k, "") if isinstance(k, int) else (1, 0, str(k))


def _item_name(k: Any, multi: bool) -> str:
    return f"{k[0]}/{k[1]}" if multi else str(k)
