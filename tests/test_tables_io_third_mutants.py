"""Gaps a third mutation review of the file loaders (``jaxeval._tables.load_table``:
the automatic ``target`` / ``full_score_pct`` column, its notes, BOM and messages;
``jaxeval._io``: ``open_npz`` / ``load_npz`` / ``load``) found: each test fails on a
plausible bug the rest of the suite let through."""

import io
import re

import numpy as np
import pytest
from test_loaders import _raises, _write

import jaxeval
from jaxeval._io import load_npz, open_npz
from jaxeval._tables import load_table

_FULL = "read as each model's full-benchmark score"


# ------------------------------------------------------------------- separators
def test_a_pipe_separated_table_of_one_column_gets_the_pipe_hint(tmp_path):
    p = _write(tmp_path / "p.csv", "model|q1|q2\na|1|0\nb|0|1\n")
    _raises([re.escape(str(p)), r"the header is one column 'model\|q1\|q2' with '\|' in it",
             r"pass sep='\|'"], jaxeval.load, p)


# ------------------------------------------------------------ the automatic target
def test_a_model_column_named_target_is_not_taken_for_the_target(tmp_path):
    p = _write(tmp_path / "m.csv", "target,item,score\n0,q1,1\n1,q1,0\n")
    sm = load_table(p, model_col="target")
    assert sm.models.tolist() == ["0", "1"] and sm.target is None
    assert not any(_FULL in c for c in sm.metadata["conversions"])


def test_a_target_of_exactly_zero_or_blank_is_in_range(tmp_path):
    """0 is a score in [0, 1] and a blank cell an unknown target: the column is still
    the target (not an item), 0 and NaN kept."""
    p = _write(tmp_path / "z.csv", "model,q1,q2,target\nm1,1,0,0\nm2,0,1,\nm3,1,1,1\n")
    sm = jaxeval.load(p)
    assert sm.items.tolist() == ["q1", "q2"]
    np.testing.assert_array_equal(sm.target, [0.0, np.nan, 1.0])
    assert any(_FULL in c for c in sm.metadata["conversions"])


def test_a_target_column_out_of_range_leaves_a_long_table_as_without_it(tmp_path):
    """'target' holding 55 (percent under the fractions' name) is not the target: the
    long table loads as without it, the column noted unread once, the absent pair once."""
    p = _write(tmp_path / "p.csv", "model,item,score,target\na,q1,1,55\na,q2,0,55\nb,q1,1,40\n")
    sm = jaxeval.load(p)
    assert sm.target is None and sm.shape == (2, 2)
    assert sm.metadata["conversions"] == [
        "columns ['target'] not read (a long table's scores are 'score'; pass target_col= "
        "for a target column)",
        "1 (model, item) pairs absent from the table: unobserved (mask=False)",
    ]


def test_true_false_in_a_target_column_that_is_not_taken_are_not_noted(tmp_path):
    """A per-row true/false 'target' (a gold answer) is not the target; the scores are
    plain numbers, so no true/false conversion is recorded."""
    p = _write(tmp_path / "g.csv", "model,item,score,target\na,q1,1,true\na,q2,0,false\n")
    sm = jaxeval.load(p)
    assert sm.target is None
    assert not any("true/false" in c for c in sm.metadata["conversions"])


def test_true_false_in_a_wide_target_column_are_noted(tmp_path):
    p = _write(tmp_path / "w.csv", "model,q1,t\na,1,true\nb,0,false\n")
    sm = jaxeval.load(p, target_col="t")
    np.testing.assert_array_equal(sm.target, [1.0, 0.0])
    assert "true/false cells read as 1/0" in sm.metadata["conversions"]


# ------------------------------------------------------------------ long tables
def test_a_named_target_column_is_not_listed_as_unread(tmp_path):
    p = _write(tmp_path / "t.csv", "model,item,score,t,extra\na,q1,1,0.5,x\na,q2,0,0.5,y\n")
    sm = load_table(p, target_col="t")
    np.testing.assert_allclose(sm.target, [0.5])
    assert sm.metadata["conversions"] == [
        "columns ['extra'] not read (a long table's scores are 'score'; pass target_col= "
        "for a target column)"]


def test_a_target_left_empty_on_one_of_a_model_s_rows_differs(tmp_path):
    p = _write(tmp_path / "d.csv", "model,item,score,t\na,q1,1,0.5\na,q2,0,\n")
    _raises([r"field 't' differs between line 2 and line 3 of model 'a' \(0\.5 vs nan\)"],
            load_table, p, target_col="t")


def test_a_bom_before_a_quoted_first_header_cell_is_no_field_count_problem(tmp_path):
    """The UTF-8 BOM (Excel's 'CSV UTF-8') is not part of the first cell: a quoted first
    header holding the separator is one column; CRLF line ends and a blank line keep
    the line numbers of the file."""
    p = tmp_path / "bom.csv"
    p.write_bytes('\ufeff"model, name",q1\r\na,1\r\nb,0\r\n'.encode())
    sm = load_table(p, model_col="model, name")
    assert sm.models.tolist() == ["a", "b"] and sm.items.tolist() == ["q1"]
    d = tmp_path / "dup.csv"
    d.write_bytes('\ufeffmodel,item,score\r\na,q1,1\r\n\r\na,q1,0\r\n'.encode())
    _raises([r"duplicate \(model, item\) pair \('a', 'q1'\) on line 2 and line 4"],
            jaxeval.load, d)


def test_a_long_parquet_table_indexed_by_its_named_target_column_keeps_it(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame({"model": ["a", "a", "b"], "item": ["q1", "q2", "q1"],
                       "score": [1.0, 0.0, 1.0], "t": [1, 1, 0]})
    df.set_index("t").to_parquet(tmp_path / "l.parquet")
    sm = load_table(tmp_path / "l.parquet", target_col="t")
    np.testing.assert_array_equal(sm.target, [1.0, 0.0])


# ------------------------------------------------------------------ wide tables
def test_an_empty_model_name_names_the_model_column(tmp_path):
    p = _write(tmp_path / "e.csv", "q1,model,q2\n1,,0\n")
    _raises([r"line 2: empty model name in column 'model'"], jaxeval.load, p)


def test_the_long_table_hint_covers_a_fourth_column_and_only_a_guessed_layout(tmp_path):
    four = _write(tmp_path / "f.csv", "Model,Item,Score,Extra\nm1,q1,1,x\n")
    _raises([r"column 'Item' is not a number: 'q1'; read as a wide table",
             "pass layout='long'"], jaxeval.load, four)
    three = _write(tmp_path / "t.csv", "Model,Item,Score\nm1,q1,1\n")
    msg = _raises([r"column 'Item' is not a number: 'q1'"], jaxeval.load, three, layout="wide")
    assert "read as a wide table" not in msg  # the caller said wide


# ------------------------------------------------------------------- .npz files
def test_npz_with_both_target_fields_is_refused(tmp_path):
    p = tmp_path / "b.npz"
    np.savez(p, scores=np.eye(2), target=np.array([0.5, 0.5]),
             full_score_pct=np.array([50.0, 50.0]))
    _raises([re.escape(str(p)), "fields 'target' and 'full_score_pct' are both present"],
            load_npz, p)


def test_npz_name_overrides_the_saved_source_and_file_is_the_path(tmp_path):
    p = jaxeval.ScoreMatrix(np.eye(2), source="saved-name").to_npz(tmp_path / "s.npz")
    assert load_npz(p).source == "saved-name"
    sm = load_npz(p, name="mine")
    assert sm.source == "mine" and sm.metadata["file"] == str(p)


def test_npz_bool_scores_are_noted_as_converted(tmp_path):
    p = tmp_path / "b.npz"
    np.savez(p, scores=np.array([[True, False], [False, True]]))
    sm = load_npz(p)
    assert sm.scores.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert "bool 0/1 scores converted to float32" in sm.metadata["conversions"]


def test_npz_object_arrays_are_not_unpickled(tmp_path):
    """.npz files are read without pickle (a pickle runs code): an object array is
    refused, from a path or from an open file."""
    p = tmp_path / "o.npz"
    np.savez(p, scores=np.eye(2), models=np.array(["a", "b"], dtype=object))
    _raises([r"o\.npz: not a readable \.npz file", "allow_pickle"], load_npz, p)
    with open_npz(io.BytesIO(p.read_bytes())) as z, pytest.raises(ValueError,
                                                                  match="allow_pickle"):
        z["models"]


# ------------------------------------------------------------------------ load
def test_load_reads_upper_case_suffixes_and_pq(tmp_path):
    up = _write(tmp_path / "W.CSV", "model,q1\na,1\nb,0\n")
    assert jaxeval.load(up).shape == (2, 1)
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pd.DataFrame({"model": ["a", "b"], "q1": [1.0, 0.0]}).to_parquet(tmp_path / "w.pq")
    assert jaxeval.load(tmp_path / "w.pq").models.tolist() == ["a", "b"]


def test_an_alias_for_an_option_another_kind_takes_is_not_suggested(tmp_path):
    """'metrics' is an alias of lm-evaluation-harness' metric=, which a table does not
    take: no "did you mean metric=?" for a table."""
    p = _write(tmp_path / "w.csv", "model,q1\na,1\nb,0\n")
    with pytest.raises(TypeError) as exc:
        jaxeval.load(p, metrics="acc")
    assert "take no option 'metrics'" in str(exc.value) and "did you mean" not in str(exc.value)


# ------------------------------------------------ problems the review found (fixed)
def test_a_full_score_pct_column_of_fractions_warns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("model,q1,full_score_pct\na,1,0.8\nb,0,0.3\n")
    with pytest.warns(UserWarning, match=r"'full_score_pct' is read as percent, but every "
                                         r"value is at most 1 \(fractions\?\)"):
        sm = jaxeval.load(p)
    np.testing.assert_allclose(sm.target, [0.008, 0.003], rtol=1e-6)  # as documented
    back = jaxeval.load(p, target_col="full_score_pct")  # named: fractions, no warning
    np.testing.assert_allclose(back.target, [0.8, 0.3], rtol=1e-6)
    p.write_text("model,q1,full_score_pct\na,1,80\nb,0,30\n")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(jaxeval.load(p).target, [0.8, 0.3], rtol=1e-6)


@pytest.mark.parametrize("text, where", [
    ("model,item,score,t\nm1,q1,1,0.5\nm2,q1,0,55\n", r"line 3: field 't'"),
    ("model,q1,t\nm1,1,0.5\nm2,0,-0.1\n", r"line 3 \(model 'm2'\): field 't'"),
])
def test_a_named_target_out_of_range_names_its_column_and_line(tmp_path, text, where):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=where + r" must lie in \[0, 1\]"):
        jaxeval.load(p, target_col="t")
