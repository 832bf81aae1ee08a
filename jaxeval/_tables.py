"""Score matrices from tables: long or wide CSV/TSV and Parquet.

Two layouts:

- **long**: one row per observed ``(model, item, score)``; pairs that do not
  appear are unobserved (``mask`` False). A duplicate ``(model, item)`` pair is
  refused, naming the first offending pair and its rows.
- **wide**: one row per model and one column per item; the first column (or
  ``model_col`` when present) names the models. Empty cells are unobserved and
  the count is recorded in ``metadata['conversions']``.

CSV/TSV cells are read as text and converted here, so nothing is coerced
silently: a non-numeric cell is refused with its row and column, and duplicate
column headers are refused (pandas would rename them). ``true``/``false`` cells
are read as 1/0 and recorded. Needs pandas (and pyarrow for Parquet):
``pip install 'jaxeval[dataframes]'``.
"""

from __future__ import annotations

import codecs
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from jaxeval._data import ScoreMatrix, out_of_unit_hint, rename_duplicates

__all__ = ["load_table"]

#: Cell texts read as a missing score (lower-cased; pandas' default NA spellings).
_MISSING = frozenset((
    "nan", "-nan", "na", "n/a", "#n/a", "#n/a n/a", "#na", "<na>", "null", "none",
    "1.#ind", "-1.#ind", "1.#qnan", "-1.#qnan",
))

_BOOL = {"true": 1.0, "false": 0.0, "True": 1.0, "False": 0.0, "TRUE": 1.0, "FALSE": 0.0}


def _pandas():
    try:
        import pandas as pd
    except ImportError as e:  # pragma: no cover - exercised only without pandas
        raise ImportError(
            "load_table needs pandas (and pyarrow for Parquet); install them with "
            "pip install 'jaxeval[dataframes]'"
        ) from e
    return pd


def _sep_hint(path: Path, sep: str) -> str:
    """'; pass sep=...' when the first line holds another separator but not ``sep``."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return ""
    other = [s for s in (";", "\t", "|") if s != sep and s in first]
    return (f"; the header has {other[0]!r} in it: pass sep={other[0]!r} (--sep on the "
            "command line)?") if other and (
        sep not in first) else ""


def _check_row_lengths(path: Path, sep: str, src: str) -> list[int]:
    """Refuse a row with fewer fields than the header (pandas pads it with empty
    cells, which would read as unscored items: a truncated file would lose data).
    ``sep`` is one character (checked by the caller).

    Returns the line of the file each non-blank record (the header first) starts on,
    for messages: blank lines and line breaks inside quoted cells make it differ from
    the record's position."""
    import csv

    starts: list[int] = []
    with open(path, encoding="utf-8-sig", newline="") as fh:
        width = None
        reader = csv.reader(fh, delimiter=sep)
        while True:
            first = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error:
                return []  # pandas read it; the positions are then not known
            if not row:
                continue  # blank lines are skipped, as pandas does
            starts.append(first)
            if width is None:
                width = len(row)
            elif len(row) < width:
                raise ValueError(
                    f"{src}: line {first} has {len(row)} fields, the header {width} (a "
                    "truncated row?); leave a cell empty, not out, for a missing score"
                )
    return starts


def _check_final_line_break(path: Path, src: str) -> None:
    """Warn when a text table does not end with a line break: every common writer ends
    one, and a file cut off while being written loses the end of its last cell
    (``0.75`` read as ``0.``, i.e. 0) without any other sign."""
    try:
        with open(path, "rb") as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                return
            fh.seek(-1, os.SEEK_END)
            last = fh.read(1)
    except OSError:
        return
    if last not in (b"\n", b"\r", b'"'):  # (a closed quote ends a whole cell)
        from jaxeval._runner import _user_stacklevel

        warnings.warn(
            f"{src}: the file does not end with a line break; if it was cut off while "
            "being written, the last cell of its last line may be incomplete (check that "
            "line; a file ending with a newline does not warn)",
            # (the caller of jaxeval.load or of load_table, whichever it called)
            stacklevel=_user_stacklevel(),
        )


def _check_header(header: list[str], src: str) -> None:
    """Refuse empty column names after the first (a trailing separator would make a
    phantom item ''); the first may be empty (pandas' to_csv of an unnamed index)."""
    empty = [j + 1 for j, h in enumerate(header) if j > 0 and not str(h).strip()]
    if empty:
        raise ValueError(
            f"{src}: header column(s) {empty[:5]} have no name (a trailing separator?); "
            "name every column or remove the empty ones"
        )


def _read_cells(path: Path, sep: str | None, model_col: str = "model",
                data_cols: tuple[str | None, ...] = ("item", "score")
                ) -> tuple[list[str], list[list[Any]], list[str]]:
    """Header and body rows of the file, every cell as text (CSV) or value (Parquet),
    and where each body row is, for messages (``line 7``; ``row 5`` of a Parquet
    table, counting from 0)."""
    pd = _pandas()
    src = str(path)
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        try:
            df = pd.read_parquet(path)
        except ImportError as e:
            raise ImportError(
                f"{src}: reading Parquet needs pyarrow; pip install 'jaxeval[dataframes]'"
            ) from e
        except Exception as e:
            raise ValueError(f"{src}: not a readable Parquet file ({type(e).__name__}: {e})") from e
        if not isinstance(df.index, pd.RangeIndex) or df.index.name is not None:
            # a table saved from a DataFrame indexed by model (e.g. pivot(...).to_parquet())
            # keeps that index as metadata, not as a column: make it the first column.
            # An unnamed integer index beside a column of names (the model column, or a
            # first column of text) is the row numbers of a filtered or shuffled
            # DataFrame, not data: dropped (it would otherwise become an item); so is a
            # named one ("row") beside the model column itself, unless its name is one of
            # the table's columns (a long table indexed by "item"). With only numeric
            # columns it may be the model ids: kept as the model column.
            has_model = model_col in [str(c) for c in df.columns]
            names_col = has_model or (
                df.shape[1] > 0 and not pd.api.types.is_numeric_dtype(df.iloc[:, 0])
                and not pd.api.types.is_bool_dtype(df.iloc[:, 0]))
            row_numbers = (pd.api.types.is_integer_dtype(df.index) and names_col
                           and (df.index.name is None
                                or (has_model and str(df.index.name) != model_col
                                    and str(df.index.name) not in data_cols)))
            df = df.reset_index(drop=row_numbers)
        header = [str(c) for c in df.columns]
        _check_header(header, src)
        body = df.astype(object).where(df.notna(), "").values.tolist()
        return header, body, [f"row {i} (from 0)" for i in range(len(body))]
    if sep is None:
        sep = "\t" if suffix == ".tsv" else ","
    if not isinstance(sep, str) or len(sep) != 1:
        # (pandas would take a longer sep as a regular expression, and the check of
        # truncated rows below needs one character)
        tab = " (for a tab pass '\\t', the tab character itself)" if sep == "\\t" else ""
        raise ValueError(f"sep: expected one character, got {sep!r}{tab}")
    try:
        df = pd.read_csv(
            path, sep=sep, header=None, dtype=str, keep_default_na=False, na_filter=False
        )
    except pd.errors.EmptyDataError as e:
        raise ValueError(f"{src}: the table is empty") from e
    except pd.errors.ParserError as e:
        if "EOF inside string" in str(e):  # (pandas' "row" there counts from 0)
            raise ValueError(
                f"{src}: a quoted cell is never closed (the file ends inside it: cut off "
                "while being written?)"
            ) from e
        raise ValueError(
            f"{src}: malformed table, rows of different lengths ({e})" + _sep_hint(path, sep)
        ) from e
    except UnicodeDecodeError as e:
        reason, at = e.reason, e.start
        try:  # pandas decodes in chunks: its offset is within a chunk, not the file
            data = path.read_bytes()
            bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
            data[bom:].decode("utf-8")
        except UnicodeDecodeError as whole:
            reason, at = whole.reason, whole.start + bom
        except OSError:
            pass
        raise ValueError(
            f"{src}: not UTF-8 text ({reason} at byte {at}); re-save the table as "
            "UTF-8, or check that it is a CSV at all"
        ) from None
    rows = df.values.tolist()
    if not rows:
        raise ValueError(f"{src}: the table is empty")
    starts = _check_row_lengths(path, sep, src)
    _check_final_line_break(path, src)
    header = [str(h).strip() for h in rows[0]]
    _check_header(header, src)
    if len(header) == 1:
        other = [s for s in (";", "\t", ",", "|") if s != sep and s in header[0]]
        if other:
            raise ValueError(
                f"{src}: the header is one column {header[0][:60]!r} with {other[0]!r} in it; "
                f"pass sep={other[0]!r} (--sep on the command line)"
            )
    if len(starts) != len(rows):  # the two readers disagree: count records instead
        starts = list(range(1, len(rows) + 1))
    return header, rows[1:], [f"line {line}" for line in starts[1:]]


def _to_float(cell: Any, src: str, where: str, notes: dict) -> float:
    """One cell as float; '' and the NA spellings of ``_MISSING`` -> NaN; true/false ->
    1/0 (noted); anything else refused."""
    if isinstance(cell, (bool, np.bool_)):
        notes["bool"] = True
        return float(cell)
    if isinstance(cell, (int, float, np.integer, np.floating)):
        return float(cell)
    text = str(cell).strip()
    if text == "" or text.lower() in _MISSING:
        return float("nan")
    if text in _BOOL:
        notes["bool"] = True
        return _BOOL[text]
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{src}: {where} is not a number: {text!r}") from None


def _number(cell: Any) -> float | None:
    """A cell as a float when it reads as a number (True / False as 1 / 0), else None."""
    try:
        return float(cell) if isinstance(cell, (bool, int, float, np.bool_, np.number)) \
            else float(str(cell).strip())
    except ValueError:
        return None


def _check_range(value: float, src: str, where: str, field: str | None) -> None:
    """A score outside [0, 1] refused, naming the long table's ``field`` (``None``: a
    wide table's cell, which ``where`` names)."""
    if np.isinf(value) or not 0.0 <= value <= 1.0:
        what = "the score" if field is None else f"field '{field}'"
        raise ValueError(
            f"{src}: {where}: {what} must lie in [0, 1], got {value!r}"
            + (out_of_unit_hint(value, value) if np.isfinite(value) else "")
        )


def load_table(
    path: str | os.PathLike,
    layout: str = "auto",
    model_col: str = "model",
    item_col: str = "item",
    score_col: str = "score",
    target_col: str | None = "auto",
    sep: str | None = None,
    name: str | None = None,
    duplicate_names: str = "error",
) -> ScoreMatrix:
    """Load a score matrix from a long or wide CSV/TSV/Parquet table.

    Args:
      path: ``.csv``, ``.tsv``, ``.parquet`` or ``.pq`` file.
      layout: ``"long"`` (one row per model, item, score), ``"wide"`` (models as
        rows, items as columns) or ``"auto"``: long when the header has
        ``model_col``, ``item_col`` and ``score_col``, else wide.
      model_col: column naming the models (long; optional in wide, where the first
        column is used when it is absent).
      item_col: column naming the items (long only).
      score_col: column holding the scores in [0, 1] (long only).
      target_col: optional column with each model's external full-benchmark score
        in [0, 1] (long: must be the same on all of a model's rows); ``None``: none.
        Default ``"auto"``: a column named ``target`` (fractions) or ``full_score_pct``
        (percent, divided by 100; a warning where every value is at most 1), as the .npz
        loader reads them, where it holds one number in range (or a blank) per model
        (noted in ``metadata['conversions']``; else the table reads as without it). A long
        table's other columns are not read (noted).
      sep: CSV separator (default ``,``; tab for ``.tsv``).
      name: the ``source`` to record (default: the path).
      duplicate_names: a wide table whose rows repeat a model name: ``"error"``
        (default) refuses it, naming the rows; ``"rename"`` suffixes repeats with
        ``#2``, ``#3``, ... (noted), as for an .npz file. (A long table's rows of one
        name are that one model's cells.)

    An empty cell, or one reading ``NaN``, ``NA``, ``N/A``, ``#N/A``, ``<NA>``, ``NULL``
    or ``None`` (any case; pandas' spellings of a missing value), is an unobserved score.

    Returns:
      A :class:`~jaxeval.ScoreMatrix`; what the loader converted is listed in
      ``metadata['conversions']``.

    Example:
      >>> import pathlib, tempfile, jaxeval
      >>> p = pathlib.Path(tempfile.mkdtemp()) / "long.csv"
      >>> _ = p.write_text("model,item,score\\na,q1,1\\na,q2,0\\nb,q1,0\\n")
      >>> sm = jaxeval.load(p)
      >>> sm.mask.tolist(), sm.models.tolist(), sm.items.tolist()
      ([[True, True], [True, False]], ['a', 'b'], ['q1', 'q2'])
    """
    path = Path(path)
    src = name or str(path)
    if duplicate_names not in ("error", "rename"):
        raise ValueError(f"load_table: duplicate_names must be 'error' or 'rename', got "
                         f"{duplicate_names!r}")
    if layout not in ("auto", "long", "wide"):
        raise ValueError(f"load_table: layout must be 'auto', 'long' or 'wide', got {layout!r}")
    header, rows, where = _read_cells(path, sep, model_col, (
        item_col, score_col, None if target_col == "auto" else target_col))
    if not rows:
        raise ValueError(f"{src}: the table has a header but no rows")
    guessed = layout == "auto"
    if guessed:
        layout = "long" if {model_col, item_col, score_col} <= set(header) else "wide"
    seen: set[str] = set()
    for h in header:
        if h in seen:
            raise ValueError(f"{src}: duplicate column name {h!r} in the header")
        seen.add(h)
    notes: dict[str, Any] = {"format": f"table ({layout})", "conversions": []}
    flags: dict[str, bool] = {}
    auto = None
    if target_col == "auto":
        # the columns the .npz loader reads as the target (a wide table read them as
        # benchmark items, a long one dropped them, without a word); not the first
        # column of a wide table without a model column (it names the models)
        target_col = None
        found = [c for c in _TARGET_COLUMNS if c in header
                 and c not in (model_col, item_col, score_col)
                 and not (layout == "wide" and model_col not in header and c == header[0])]
        if len(found) > 1:
            raise ValueError(f"{src}: columns {found} are both present (each would be the "
                             "models' full-benchmark score): pass target_col= to choose, "
                             "or target_col=None for none")
        if found:
            auto = found[0]

    def parse(tcol):
        # (a named target column's cells are checked where they are, naming it; one
        # found by "auto" is checked as a whole below, percent for full_score_pct)
        check = tcol is not None and tcol != auto
        if layout == "long":
            return _long(header, rows, where, src, model_col, item_col, score_col, tcol,
                         notes, flags, check)
        try:
            return _wide(header, rows, where, src, model_col, tcol, notes, flags, check)
        except ValueError as e:
            named = {model_col, item_col, score_col} & set(header)
            if guessed and len(header) in (3, 4) and not named and "is not a number" in str(e):
                # e.g. "Model,Item,Score": read as wide
                raise ValueError(
                    f"{e}; read as a wide table (models as rows, items as columns) since "
                    f"the header has none of '{model_col}', '{item_col}', '{score_col}': for "
                    f"a long table (one row per model, item and score) name its columns so "
                    f"(in Python, or pass layout='long' with model_col=, item_col=, "
                    f"score_col=)"
                ) from None
            raise

    if auto is not None:
        # taken only where it is one number per model in range (percent for
        # full_score_pct); else the table reads as without it (a gold-answer column
        # named 'target' in a long table, a per-row value), as it always did
        saved = (list(notes["conversions"]), dict(flags))
        try:
            sm_args = parse(auto)
            t = np.asarray(sm_args["target"], np.float64)
            t = t / 100.0 if auto == "full_score_pct" else t
            if not np.all(np.isnan(t) | ((t >= 0) & (t <= 1))):
                raise ValueError("out of range")
            if auto == "full_score_pct" and np.nanmax(t, initial=0.0) <= 0.01 \
                    and np.any(t > 0):
                warnings.warn(
                    f"{src}: column 'full_score_pct' is read as percent, but every value is "
                    f"at most 1 (fractions?): the targets are at most 1%; pass "
                    f"target_col='full_score_pct' to read the column as fractions",
                    UserWarning, stacklevel=3)
            sm_args["target"] = t
        except ValueError:
            notes["conversions"][:] = saved[0]
            flags.clear()
            flags.update(saved[1])
            auto = None
    if auto is None:
        sm_args = parse(target_col)
    if auto is not None:
        notes["conversions"].append(
            f"column {auto!r} read as each model's full-benchmark score (target"
            + (", percent / 100" if auto == "full_score_pct" else "") + "), not as an item; "
            "pass target_col= to name it yourself")
    if flags.get("bool"):
        notes["conversions"].append("true/false cells read as 1/0")
    if layout == "wide":
        sm_args["models"] = _unique_models(sm_args["models"], where, src, duplicate_names,
                                           notes)
    elif duplicate_names == "rename":
        raise ValueError(f"{src}: duplicate_names='rename' is for a wide table (a model per "
                         "row); a long table's rows of one model name are that model's cells")
    return ScoreMatrix(**sm_args, source=src, metadata=notes)


def _unique_models(models: list[str], wheres: list[str], src: str, duplicate_names: str,
                   notes: dict) -> Any:
    """A wide table's model names, repeats refused naming their rows (``"error"``) or
    suffixed ``#2``, ``#3``, ... (``"rename"``, noted)."""
    first: dict[str, int] = {}
    for r, m in enumerate(models):
        if m in first and duplicate_names == "error":
            raise ValueError(
                f"{src}: model {m!r} is on {wheres[first[m]]} and on {wheres[r]} (a wide "
                "table has one row per model); pass duplicate_names='rename' to suffix "
                "repeats with '#2', '#3', ..."
            )
        first.setdefault(m, r)
    if len(first) == len(models):
        return models
    return rename_duplicates(models, "models", notes, src).tolist()


#: Columns read as the target when ``target_col`` is not given (as the .npz loader does).
_TARGET_COLUMNS = ("target", "full_score_pct")


def _col(header: list[str], col: str, src: str, what: str) -> int:
    if col not in header:
        raise ValueError(f"{src}: missing {what} column '{col}' (columns present: {header})")
    return header.index(col)


def _long(header, rows, wheres, src, model_col, item_col, score_col, target_col, notes, flags,
          check_target=False):
    im = _col(header, model_col, src, "model")
    ii = _col(header, item_col, src, "item")
    isc = _col(header, score_col, src, "score")
    it = None if target_col is None else _col(header, target_col, src, "target")
    unread = [h for j, h in enumerate(header) if j not in (im, ii, isc, it)]
    if unread:  # (said: a long table's other columns hold no scores jaxeval reads)
        notes["conversions"].append(f"columns {unread} not read (a long table's scores are "
                                    f"'{score_col}'; pass target_col= for a target column)")
    models: dict[str, int] = {}
    items: dict[str, int] = {}
    first_row: dict[tuple[int, int], int] = {}
    cells = []
    targets: dict[int, tuple[float, int]] = {}
    for r, (row, where) in enumerate(zip(rows, wheres)):
        m_name, i_name = str(row[im]).strip(), str(row[ii]).strip()
        if m_name == "" or i_name == "":
            raise ValueError(f"{src}: {where}: empty '{model_col if m_name == '' else item_col}'")
        value = _to_float(row[isc], src, f"{where}, column '{score_col}'", flags)
        if np.isnan(value):
            raise ValueError(
                f"{src}: {where}: field '{score_col}' is empty/NaN for ({m_name!r}, {i_name!r}); "
                "leave unobserved pairs out of a long table instead"
            )
        _check_range(value, src, where, score_col)
        mi = models.setdefault(m_name, len(models))
        ii_ = items.setdefault(i_name, len(items))
        if (mi, ii_) in first_row:
            raise ValueError(
                f"{src}: duplicate (model, item) pair ({m_name!r}, {i_name!r}) on "
                f"{wheres[first_row[(mi, ii_)]]} and {where}"
            )
        first_row[(mi, ii_)] = r
        cells.append((mi, ii_, value))
        if it is not None:
            t = _to_float(row[it], src, f"{where}, column '{target_col}'", flags)
            if check_target and not np.isnan(t):
                _check_range(t, src, where, target_col)
            if mi in targets and not (
                targets[mi][0] == t or (np.isnan(t) and np.isnan(targets[mi][0]))
            ):
                raise ValueError(
                    f"{src}: field '{target_col}' differs between {wheres[targets[mi][1]]} and "
                    f"{where} of model {m_name!r} ({targets[mi][0]!r} vs {t!r})"
                )
            targets.setdefault(mi, (t, r))
    scores = np.zeros((len(models), len(items)), np.float32)
    mask = np.zeros(scores.shape, bool)
    idx = np.array([(a, b) for a, b, _ in cells], np.int64)
    scores[idx[:, 0], idx[:, 1]] = [v for _, _, v in cells]
    mask[idx[:, 0], idx[:, 1]] = True
    missing = int((~mask).sum())
    if missing:
        notes["conversions"].append(
            f"{missing} (model, item) pairs absent from the table: unobserved (mask=False)"
        )
    target = None
    if it is not None:
        target = np.array([targets[i][0] for i in range(len(models))], np.float64)
    return dict(scores=scores, mask=mask, models=list(models), items=list(items), target=target)


_NAMES_HEADER = re.compile(
    r"(unnamed: ?\d+|index|(hf ?)?(model|llm|run)s?( ?(id|name|idx|index)(e?s)?)?|(id|name)s?)?",
    re.IGNORECASE)


def _names_header(h: Any) -> bool:
    """Whether a column header as a whole reads as a column of names or ids (empty,
    ``index``, ``Unnamed: 0``, ``model``, ``model_id``, ``ModelName``, ``name``, ``ids``)
    rather than as an item's name (``q1``, ``0``, ``id_3``)."""
    h = re.sub(r"([a-z])([A-Z])", r"\1 \2", str(h).strip())  # camelCase -> two words
    return _NAMES_HEADER.fullmatch(re.sub(r"[\s_\-.]+", " ", h)) is not None


#: First-column headers of a transposed wide table (items as rows, models as columns).
_ITEMS_HEADER = re.compile(
    r"(items?|questions?|prompts?|examples?|samples?|problems?|docs?|tasks?)"
    r"( ?(id|name|idx|index|no|number)s?)?", re.IGNORECASE)


def _wide(header, rows, wheres, src, model_col, target_col, notes, flags, check_target=False):
    im = header.index(model_col) if model_col in header else 0
    h0 = re.sub(r"[\s_\-.]+", " ", re.sub(r"([a-z])([A-Z])", r"\1 \2", str(header[0]).strip()))
    if model_col not in header and _ITEMS_HEADER.fullmatch(h0):
        # read as it stands, the items would become models and the models items
        raise ValueError(
            f"{src}: the first column is {header[0]!r}, which names items, so the table "
            "looks transposed (items as rows, models as columns); a wide table has one row "
            f"per model: transpose it (DataFrame.T), or pass model_col={header[0]!r} if "
            "that column does name the models"
        )
    first = [_number(row[0]) for row in rows]
    index_like = _names_header(header[0])
    if model_col not in header and first and all(v is not None and 0 <= v <= 1 for v in first) \
            and (len(first) >= 3 or not all(v.is_integer() for v in first) or not index_like):
        # no model column: the first column is taken for the names, but every value in
        # it is a score, so it is an item (pd.DataFrame(S).to_csv(index=False)) and
        # taking it would silently drop that item. (Integer ids 0 / 1 of one or two
        # models under a header of names -- empty or 'Unnamed: 0' from to_csv with the
        # index, 'index' from a parquet pivot's, 'model_id', 'name' -- are names; three
        # or more 0 / 1 values cannot be distinct names, and under an item's name, such
        # as 'q1' or '0', they are an item.)
        raise ValueError(
            f"{src}: no '{model_col}' column, and the first column {header[0]!r}, which "
            "would name the models, holds only scores in [0, 1] (an item?); add a column "
            f"'{model_col}' of model names, or pass model_col={header[0]!r} if that column "
            "does name the models"
        )
    it = None if target_col is None else _col(header, target_col, src, "target")
    skip = {im, it}
    if im != 0 and not str(header[0]).strip():
        # an unnamed first column beside a named model column is a DataFrame index
        # written by to_csv (row numbers), not an item
        skip.add(0)
        notes["conversions"].append(
            f"unnamed first column ignored (a DataFrame index written by to_csv?); the "
            f"models are in column '{model_col}'"
        )
    item_cols = [j for j in range(len(header)) if j not in skip]
    if not item_cols:
        raise ValueError(f"{src}: a wide table needs item columns beside the model column")
    scores = np.empty((len(rows), len(item_cols)), np.float64)
    models, target = [], []
    for r, (row, where) in enumerate(zip(rows, wheres)):
        name = str(row[im]).strip()
        if name == "":
            raise ValueError(f"{src}: {where}: empty model name in column '{header[im]}'")
        models.append(name)
        for k, j in enumerate(item_cols):
            v = _to_float(row[j], src, f"{where} (model {name!r}), column {header[j]!r}", flags)
            if not np.isnan(v):
                _check_range(v, src, f"{where} (model {name!r}), column {header[j]!r}", None)
            scores[r, k] = v
        if it is not None:
            t = _to_float(row[it], src, f"{where}, column '{target_col}'", flags)
            if check_target and not np.isnan(t):
                _check_range(t, src, f"{where} (model {name!r})", target_col)
            target.append(t)
    return dict(
        scores=scores,
        models=models,
        items=[header[j] for j in item_cols],
        target=None if it is None else np.array(target),
    )
