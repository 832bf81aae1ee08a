"""Gaps a second mutation review of the file loaders (``jaxeval._tables.load_table``,
``jaxeval._io.load_npz`` / ``load``) found: each test fails on a plausible bug the rest
of the suite let through."""

import re
import sys

import numpy as np
import pytest
from test_loaders import _raises, _write

import jaxeval
from jaxeval._tables import load_table


# ------------------------------------------------------------- separators, header
def test_a_pipe_separated_table_read_with_commas_gets_the_pipe_hint(tmp_path):
    p = _write(tmp_path / "p.csv", "model|q1|q2\na|1|0,5\nb|0|1\n")
    _raises([re.escape(str(p)), "malformed table", r"pass sep='\|'"], load_table, p)


def test_no_separator_hint_when_the_header_holds_the_separator_given(tmp_path):
    """A header with ',' (the sep) and a ';' inside a name is not a ';' table: a ragged
    row is reported without advice to pass sep=';'."""
    p = _write(tmp_path / "m.csv", "model,q1;x,q2\na,1,0,1\nb,0,1\n")
    msg = _raises([re.escape(str(p)), "malformed table"], load_table, p)
    assert "pass sep" not in msg


def test_an_empty_separator_is_refused_naming_sep(tmp_path):
    p = _write(tmp_path / "s.csv", "model,q1\na,1\n")
    _raises([r"sep: expected one character, got ''"], load_table, p, sep="")


def test_header_names_padded_with_spaces_are_the_names(tmp_path):
    """'model, item, score' (a space after each comma) is the long layout's header."""
    p = _write(tmp_path / "l.csv", "model, item, score\na, q1, 1\na, q2, 0\nb, q1, 0.5\n")
    sm = load_table(p)
    assert sm.metadata["format"] == "table (long)"
    assert sm.models.tolist() == ["a", "b"] and sm.items.tolist() == ["q1", "q2"]
    assert sm.scores.tolist() == [[1.0, 0.0], [0.5, 0.0]]
    assert sm.mask.tolist() == [[True, True], [True, False]]


# ------------------------------------------------------------------ cell values
def test_na_null_and_none_cells_of_a_wide_table_are_unobserved(tmp_path):
    p = _write(tmp_path / "w.csv", "model,q1,q2,q3\na,NA,null,1\nb,None,nan,0\n")
    sm = load_table(p)
    assert sm.mask.tolist() == [[False, False, True], [False, False, True]]
    assert sm.scores[:, 2].tolist() == [1.0, 0.0]


def test_upper_case_true_false_cells_read_as_1_and_0(tmp_path):
    sm = load_table(_write(tmp_path / "u.csv", "model,q1,q2\na,TRUE,FALSE\nb,False,True\n"))
    assert sm.scores.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert "true/false cells read as 1/0" in sm.metadata["conversions"]


def test_a_parquet_bool_column_is_noted_as_converted(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame({"model": ["a", "b"], "q1": [True, False]}).to_parquet(tmp_path / "b.parquet")
    sm = load_table(tmp_path / "b.parquet")
    assert sm.scores.tolist() == [[1.0], [0.0]]
    assert "true/false cells read as 1/0" in sm.metadata["conversions"]


# --------------------------------------------------------------------- warnings
def test_the_cut_off_warning_points_at_the_caller_of_load(tmp_path):
    cut = _write(tmp_path / "cut.csv", "model,q1\na,1\nb,0.")
    with pytest.warns(UserWarning, match="does not end with a line break") as rec:
        jaxeval.load(cut)
    assert rec[0].filename == __file__
    # load_table, one frame shallower, is pointed at its caller too (a fixed stack level
    # pointed one frame above it)
    with pytest.warns(UserWarning, match="does not end with a line break") as rec:
        load_table(cut)
    assert (rec[0].filename, rec[0].lineno) == (__file__, sys._getframe().f_lineno - 1)


# ------------------------------------------------------------------ long layout
def test_name_is_the_recorded_source_and_the_prefix_of_messages(tmp_path):
    p = _write(tmp_path / "l.csv", "model,item,score\na,q1,1\n")
    assert load_table(p, name="mine").source == "mine"
    assert load_table(p).source == str(p)
    bad = _write(tmp_path / "b.csv", "model,item,score\na,q1,2\n")
    msg = _raises([r"^mine: line 2: field 'score' must lie in \[0, 1\]"], load_table, bad,
                  name="mine")
    assert str(bad) not in msg


def test_a_long_table_without_the_model_column_names_that_column(tmp_path):
    p = _write(tmp_path / "l.csv", "name,item,score\nm1,q1,1\n")
    _raises([re.escape(str(p)), r"missing model column 'model' \(columns present: "
             r"\['name', 'item', 'score'\]\)"], load_table, p, layout="long")
    _raises([r"missing item column 'q' "], load_table, p, layout="long", model_col="name",
            item_col="q")


def test_long_item_names_padded_with_spaces_are_the_same_item(tmp_path):
    p = _write(tmp_path / "l.csv", "model,item,score\na, q1 ,1\nb,q1,0\n")
    sm = load_table(p)
    assert sm.items.tolist() == ["q1"] and sm.scores.tolist() == [[1.0], [0.0]]
    dup = _write(tmp_path / "d.csv", "model,item,score\na,q1,1\na, q1,0\n")
    _raises([r"duplicate \(model, item\) pair \('a', 'q1'\) on line 2 and line 3"],
            load_table, dup)


def test_a_target_that_differs_names_the_model_s_first_row(tmp_path):
    """The refusal compares with the first row of the model (rows 2 and 3 agree)."""
    p = _write(tmp_path / "l.csv", "model,item,score,t\na,q1,1,0.5\na,q2,1,0.5\na,q3,0,0.6\n")
    _raises([r"field 't' differs between line 2 and line 4 of model 'a' \(0.5 vs 0.6\)"],
            load_table, p, target_col="t")


def test_a_missing_model_or_item_in_a_parquet_long_table_is_refused_as_empty(tmp_path):
    """A null in Parquet is an empty cell, as in CSV: not a model or item named 'None'."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pq = tmp_path / "l.parquet"
    pd.DataFrame({"model": ["a", None], "item": ["q1", "q1"], "score": [1.0, 0.0]}).to_parquet(pq)
    _raises([re.escape(str(pq)), r"row 1 \(from 0\): empty 'model'"], load_table, pq)
    pd.DataFrame({"model": ["a", "b"], "item": ["q1", None], "score": [1.0, 0.0]}).to_parquet(pq)
    _raises([r"row 1 \(from 0\): empty 'item'"], load_table, pq)


# ------------------------------------------------------------------ wide layout
def test_three_integer_0_1_ids_under_an_ids_header_are_refused_as_an_item(tmp_path):
    """Three or more 0 / 1 values cannot be distinct model names even under a header of
    names: the first column is said to be an item (not reported as duplicate names)."""
    p = _write(tmp_path / "w.csv", "model_id,q1,q2\n0,1,0\n1,0,1\n1,1,1\n")
    _raises([re.escape(str(p)), "no 'model' column", "'model_id'", "holds only scores"],
            load_table, p)


# ------------------------------------------------------------------------ npz
def test_an_npz_archive_is_closed_by_its_with_block_not_left_to_the_collector(tmp_path):
    """open_npz's archive closes the file it opened when the with block ends (a file
    left for the garbage collector is a ResourceWarning, and stays open on PyPy)."""
    import gc
    import warnings

    from jaxeval._io import load_npz, open_npz

    p = tmp_path / "g.npz"
    np.savez(p, scores=np.eye(3))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with open_npz(p) as z:
            assert z["scores"].shape == (3, 3)
        assert load_npz(p).shape == (3, 3)
        gc.collect()
    assert not [w for w in rec if issubclass(w.category, ResourceWarning)]
