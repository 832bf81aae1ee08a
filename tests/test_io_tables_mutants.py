"""Gaps a mutation review of the file loaders (``jaxeval._io``: ``load_npz``/``load``;
``jaxeval._tables``: ``load_table``) found: each test fails on a plausible bug the rest of
the suite let through."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_loaders import _raises, _write

from jaxeval._io import load_npz
from jaxeval._tables import load_table


# ------------------------------------------------------------------------ npz
def test_npz_duplicate_names_accepts_only_error_or_rename(tmp_path):
    p = tmp_path / "d.npz"
    np.savez(p, scores=np.eye(2), models=np.array(["a", "b"]))
    for bad in ("keep", "ignore", None):
        _raises([r"duplicate_names must be 'error' or 'rename', got " + repr(bad)],
                load_npz, p, duplicate_names=bad)


def test_npz_metadata_json_that_is_not_an_object_is_refused_naming_the_field(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, scores=np.eye(2), metadata_json=np.array(json.dumps(["a", "list"])))
    _raises([str(p), "field 'metadata_json' must hold a JSON object"], load_npz, p)
    np.savez(p, scores=np.eye(2), metadata_json=np.array("{not json"))
    _raises([str(p), "field 'metadata_json' is not valid JSON"], load_npz, p)


def test_npz_uint8_scores_are_noted_as_converted(tmp_path):
    p = tmp_path / "u.npz"
    np.savez(p, scores=np.array([[1, 0], [0, 1]], np.uint8))
    sm = load_npz(p)
    assert sm.scores.dtype == np.float32 and sm.scores.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert "uint8 0/1 scores converted to float32" in sm.metadata["conversions"]
    f = tmp_path / "f.npz"
    np.savez(f, scores=np.eye(2, dtype=np.float32))
    assert not any("converted to float32" in c for c in load_npz(f).metadata["conversions"])


def test_npz_is_source_array_and_theta_note_are_kept_in_the_metadata(tmp_path):
    p = tmp_path / "s.npz"
    np.savez(p, scores=np.eye(3), is_source=np.array([True, False, True]),
             theta_note=np.array("theta from the 2PL fit"))
    md = load_npz(p).metadata
    assert md["is_source"] == [True, False, True]  # a list, one flag per model
    assert md["theta_note"] == "theta from the 2PL fit"


def test_npz_repeated_item_names_are_refused_or_renamed(tmp_path):
    p = tmp_path / "i.npz"
    np.savez(p, scores=np.eye(3), models=np.array(["a", "b", "c"]),
             items=np.array(["q", "r", "q"]))
    _raises([str(p), "field 'items' has duplicate names", r"\['q'\]",
             "duplicate_names='rename'"], load_npz, p)
    sm = load_npz(p, duplicate_names="rename")
    assert sm.items.tolist() == ["q", "r", "q#2"] and sm.models.tolist() == ["a", "b", "c"]
    assert any("1 repeated 'items' names" in c for c in sm.metadata["conversions"])


# ------------------------------------------------------------------- tables
def test_a_tab_separated_table_read_with_commas_gets_the_tab_hint(tmp_path):
    """Read with ',' a tab-separated table whose cells hold a decimal comma has rows of
    different lengths: the refusal says to pass sep='\\t'."""
    p = _write(tmp_path / "t.csv", "model\tq1\tq2\na\t0,5\t1\nb\t0\t1\n")
    _raises([r"malformed table", r"pass sep='\\t'"], load_table, p)


def test_a_wide_table_with_an_item_named_score_stays_wide(tmp_path):
    """``auto`` is long only when the header has all three of model, item and score."""
    p = _write(tmp_path / "w.csv", "model,score,q2\na,1,0\nb,0.5,1\n")
    sm = load_table(p)
    assert sm.metadata["format"] == "table (wide)"
    assert sm.items.tolist() == ["score", "q2"] and sm.scores.tolist() == [[1, 0], [0.5, 1]]


def test_a_long_table_model_name_of_spaces_is_refused_as_empty(tmp_path):
    p = _write(tmp_path / "l.csv", "model,item,score\nm1,q1,1\n  ,q2,0\n")
    _raises([str(p), r"line 3: empty 'model'"], load_table, p)


def test_a_long_table_target_left_empty_on_every_row_of_a_model_is_nan(tmp_path):
    """An unknown target (empty on all of a model's rows) is the same on all of them:
    NaN for that model, not a "differs" refusal."""
    p = _write(tmp_path / "l.csv", "model,item,score,t\na,q1,1,0.5\na,q2,0,0.5\nb,q1,1,\n"
               "b,q2,1,\n")
    sm = load_table(p, target_col="t")
    assert sm.target[0] == pytest.approx(0.5) and np.isnan(sm.target[1])


def test_a_long_table_with_one_absent_pair_records_it(tmp_path):
    p = _write(tmp_path / "l.csv", "model,item,score\na,q1,1\na,q2,0\nb,q1,1\n")
    sm = load_table(p)
    assert sm.mask.tolist() == [[True, True], [True, False]]
    assert ("1 (model, item) pairs absent from the table: unobserved (mask=False)"
            in sm.metadata["conversions"])


def test_an_unnamed_first_column_of_model_names_is_not_noted_as_ignored(tmp_path):
    """An empty first header over the model names (to_csv of a model-indexed frame) is
    the model column: no "unnamed first column ignored" record; beside a 'model' column
    it is an index and is noted."""
    sm = load_table(_write(tmp_path / "a.csv", ",q1,q2\nm1,1,0\nm2,0,1\n"))
    assert sm.models.tolist() == ["m1", "m2"] and sm.items.tolist() == ["q1", "q2"]
    assert not any("unnamed first column" in c for c in sm.metadata["conversions"])
    sm = load_table(_write(tmp_path / "b.csv", ",model,q1\n0,m1,1\n1,m2,0\n"))
    assert sm.models.tolist() == ["m1", "m2"] and sm.items.tolist() == ["q1"]
    assert any("unnamed first column ignored" in c for c in sm.metadata["conversions"])


def test_wide_items_keep_the_file_s_column_order(tmp_path):
    p = _write(tmp_path / "w.csv", "model,zeta,alpha,mid\na,1,0,0.25\nb,0,1,0.75\n")
    sm = load_table(p)
    assert sm.items.tolist() == ["zeta", "alpha", "mid"]
    np.testing.assert_array_equal(sm.scores, [[1, 0, 0.25], [0, 1, 0.75]])
    long = load_table(_write(tmp_path / "l.csv", "model,item,score\na,zeta,1\na,alpha,0\n"))
    assert long.items.tolist() == ["zeta", "alpha"]  # first appearance, not sorted


def test_a_cell_too_long_for_the_csv_module_still_names_its_line(tmp_path):
    """A cell over the csv module's field limit (131072 characters) leaves the line
    positions to be counted from the records: line 1 is the header."""
    long_name = "x" * 140_000
    p = _write(tmp_path / "l.csv", f"model,item,score\na,{long_name},1\nb,q,2\n")
    _raises([str(p), r"line 3: field 'score' must lie in \[0, 1\], got 2.0"], load_table, p)


def test_a_first_header_that_only_starts_like_an_items_header_is_not_transposed(tmp_path):
    """The transposed-table refusal is for a whole header such as 'item' or 'doc_id';
    'docker_image' or 'examplesLLM' naming the models is read as the model column."""
    for head in ("docker_image", "examplesLLM", "tasker"):
        p = _write(tmp_path / "w.csv", f"{head},q1,q2\nimg-a,1,0\nimg-b,0,1\n")
        sm = load_table(p)
        assert sm.models.tolist() == ["img-a", "img-b"] and sm.items.tolist() == ["q1", "q2"]


def test_a_parquet_index_named_model_is_the_model_column_even_beside_text_cells(tmp_path):
    """An integer index named 'model' (a pivot's, of model ids) is the model column, not
    row numbers to drop, when the first column holds its scores as text."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame({"q1": ["1", "0"], "q2": [0.5, 1.0]},
                      index=pd.Index([101, 205], name="model"))
    df.to_parquet(tmp_path / "m.parquet")
    sm = load_table(tmp_path / "m.parquet")
    assert sm.models.tolist() == ["101", "205"] and sm.items.tolist() == ["q1", "q2"]
    assert sm.scores.tolist() == [[1.0, 0.5], [0.0, 1.0]]


def test_a_named_integer_index_beside_the_model_column_is_row_numbers(tmp_path):
    """A DataFrame with a model column and an integer index named, say, 'row' (a
    filtered frame's numbers, kept by to_parquet) loads as the model column's table: the
    index is not read as a scored item (before, it was an item 'row' of 0s and 1s, or a
    refusal of 'row' as a score outside [0, 1])."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    for rows in ([0, 1], [3, 7]):
        df = pd.DataFrame({"model": ["a", "b"], "q1": [1.0, 0.0]},
                          index=pd.Index(rows, name="row"))
        df.to_parquet(tmp_path / "r.parquet")
        sm = load_table(tmp_path / "r.parquet")
        assert sm.models.tolist() == ["a", "b"] and sm.items.tolist() == ["q1"]
        assert sm.scores.tolist() == [[1.0], [0.0]]


def test_a_long_parquet_table_indexed_by_its_item_column_keeps_it(tmp_path):
    """``df.set_index("item").to_parquet()`` of a long table: the index named like the
    item column is that column, not row numbers to drop."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame({"model": ["a", "a", "b", "b"], "item": [10, 11, 10, 11],
                       "score": [1.0, 0.0, 0.5, 1.0]}).set_index("item")
    df.to_parquet(tmp_path / "l.parquet")
    sm = load_table(tmp_path / "l.parquet")
    assert sm.items.tolist() == ["10", "11"] and sm.scores.tolist() == [[1.0, 0.0], [0.5, 1.0]]


def test_npz_saved_conversions_of_any_form_load_as_a_list_of_text(tmp_path):
    """The ScoreMatrix contract lists what the loader converted in
    ``metadata['conversions']``: a saved entry that is a string, null or a list of other
    values (a matrix built by hand and saved by ``to_npz``) loads as a list of strings
    (a string was a bare AttributeError on the uint8 note; null was kept as None)."""
    from jaxeval import ScoreMatrix

    p = tmp_path / "c.npz"
    for saved, want in (('"x"', ["x"]), ("null", []), ("[1]", ["1"]), ('["kept"]', ["kept"])):
        np.savez(p, scores=np.eye(2, dtype=np.uint8),
                 metadata_json=np.array(f'{{"conversions": {saved}}}'))
        conv = load_npz(p).metadata["conversions"]
        assert conv[:-1] == want and conv[-1].startswith("uint8 0/1 scores converted")
    for given, want in (([{"step": 1}], ["{'step': 1}"]), (None, []), ("clipped", ["clipped"])):
        ScoreMatrix(np.eye(2), metadata={"conversions": given}).to_npz(p)
        assert load_npz(p).metadata["conversions"] == want


# ------------------------------------------------------------- messages a user met
def test_load_names_an_option_its_file_kind_does_not_take(tmp_path):
    """A misspelt option names the likely one and lists the kind's options (it was
    Python's bare "unexpected keyword argument")."""
    import jaxeval

    p = _write(tmp_path / "w.csv", "model,q1\na,1\nb,0\n")
    for bad, guess in (("seperator", "sep"), ("delimiter", "sep"), ("layot", "layout")):
        with pytest.raises(TypeError, match=re.escape(
                f"load: .csv table files take no option {bad!r} (did you mean {guess}=?); "
                "their options: layout, model_col, item_col, score_col, target_col, sep, "
                "name")):
            jaxeval.load(p, **{bad: ";"})
    q = tmp_path / "s.npz"
    np.savez(q, scores=np.eye(2))
    with pytest.raises(TypeError, match=re.escape(
            "load: .npz files take no option 'metric'; their options: name, "
            "duplicate_names")):
        jaxeval.load(q, metric="acc")
    assert jaxeval.load(p, sep=",").shape == (2, 1)


def test_load_lists_the_suffixes_it_reads():
    import jaxeval

    _raises([re.escape("from suffix '.py' (read: .npz, .csv, .tsv, .parquet, .pq, and "
                       "lm-evaluation-harness samples_*.jsonl(.gz) files or folders)")],
            jaxeval.load, Path(__file__))  # (a .py file: read by no loader)


def test_a_saved_campaign_or_predictor_read_as_a_matrix_says_what_it_is(tmp_path):
    """The .npz files jaxeval saves for a campaign or an anchor predictor are named as
    such, with the call that reads them (was "field 'scores' must be 2-D")."""
    for fmt, what, how in (
            ("jaxeval.campaign/1", "a saved IdentificationCampaign",
             "IdentificationCampaign.saved_scores(path) reads its answers"),
            ("jaxeval.anchors/1", "a saved AnchorPredictor", "AnchorPredictor.load reads it")):
        p = tmp_path / "x.npz"
        np.savez(p, meta=np.asarray(json.dumps({"format": fmt})), scores=np.zeros(4))
        _raises([re.escape(f"{p}: {what}, not a score matrix"), re.escape(how)], load_npz, p)
    p = tmp_path / "y.npz"  # a 'meta' entry of another program: read as data
    np.savez(p, meta=np.asarray("not json"), scores=np.eye(2))
    assert load_npz(p).shape == (2, 2)


def test_scores_in_percent_get_the_percent_hint():
    from jaxeval import ScoreMatrix

    _raises([re.escape("(range 0.0..87.5) (percent? divide by 100 first)")],
            ScoreMatrix, np.array([[0.0, 87.5], [50.0, 25.0]]))
    with pytest.raises(ValueError) as e:
        ScoreMatrix(np.array([[0.0, 870.0]]))
    assert str(e.value).endswith("(range 0.0..870.0)")


def test_a_truncated_npz_leaves_no_file_open(tmp_path):
    """A zip cut short is refused with its file closed at once (np.load's own handle
    stayed open while the error's traceback lived, and was closed late by the garbage
    collector with a ResourceWarning); a good file is closed with the archive."""
    from jaxeval._data import NPZ_READ_ERRORS
    from jaxeval._io import open_npz

    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd to count open files")
    good = tmp_path / "g.npz"
    np.savez(good, scores=np.eye(40))
    (tmp_path / "cut.npz").write_bytes(good.read_bytes()[:200])
    before = len(list(fds.iterdir()))
    with pytest.raises(NPZ_READ_ERRORS) as e:
        open_npz(tmp_path / "cut.npz")
    assert len(list(fds.iterdir())) == before, e.value  # (the traceback still alive)
    with open_npz(good) as z:
        assert z["scores"].shape == (40, 40)
        assert len(list(fds.iterdir())) == before + 1
    assert len(list(fds.iterdir())) == before
