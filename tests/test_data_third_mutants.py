"""Gaps a third mutation review of ``jaxeval/_data.py`` found (after
tests/test_data_mutants.py and tests/test_data_deep_mutants.py): argument checks and
the names their errors give, index and name handling, which rows survive, missing-cell
masks and the notes carried along. Each test fails on a plausible bug the suite let
through."""

import re

import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix
from jaxeval._data import as_score_matrix, is_missing, rename_duplicates


# ------------------------------------------------------------------ helpers
def test_is_missing_knows_pandas_na_and_nat():
    pd = pytest.importorskip("pandas")
    assert is_missing(None) and is_missing(pd.NA) and is_missing(pd.NaT)
    assert not is_missing(float("nan")) and not is_missing(0)


def test_rename_duplicates_skips_every_taken_suffix_and_notes_three_examples():
    notes: dict = {}
    out = rename_duplicates(["a", "a", "a#2", "a#3"], "models", notes).tolist()
    assert out == ["a", "a#4", "a#2", "a#3"]  # a#2 and a#3 are both taken
    many: dict = {}
    rename_duplicates(["b"] * 5, "items", many)
    assert many["conversions"] == ["4 repeated 'items' names made unique with a '#k' "
                                   "suffix (e.g. ['b#2', 'b#3', 'b#4'])"]


def test_names_mixing_bytes_and_text_in_an_object_array_are_decoded():
    names = np.array(["é".encode(), "b"], dtype=object)  # as an HDF5 reader may hand them
    assert ScoreMatrix(np.eye(2), models=names).models.tolist() == ["é", "b"]


# ------------------------------------------------------------- construction
def test_names_must_be_one_dimensional_even_when_the_length_fits():
    with pytest.raises(ValueError, match=re.escape(
            "s: field 'models' must be a 1-D array of 1 names, got shape (1, 1)")):
        ScoreMatrix(np.ones((1, 2)), models=[["a"]], source="s")


def test_duplicate_names_error_names_up_to_five_of_them():
    names = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f", "f"]
    with pytest.raises(ValueError, match=re.escape(
            "field 'items' has duplicate names, e.g. ['a', 'b', 'c', 'd', 'e']")):
        ScoreMatrix(np.ones((1, 12)), items=names)


def test_boolean_scores_are_read_as_zero_one():
    sm = ScoreMatrix(np.array([[True, False], [False, True]]))
    assert sm.scores.dtype == np.float32 and sm.scores.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert sm.is_complete and sm.is_binary


def test_a_pyarrow_boolean_column_is_a_score_column():
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    df = pd.DataFrame({"q1": pd.array([True, None], dtype="bool[pyarrow]"), "q2": [1.0, 0.0]},
                      index=["a", "b"])
    sm = ScoreMatrix(df)
    assert sm.scores.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert sm.mask.tolist() == [[True, True], [False, True]]


def test_nan_marked_observed_error_counts_and_locates_the_first_such_cell():
    s = np.array([[np.nan, 1.0], [np.nan, np.nan]])
    with pytest.raises(ValueError, match=re.escape(
            "s: field 'scores' has 2 NaN cells marked observed by 'mask' (first at row 1, "
            "column 0)")):
        ScoreMatrix(s, mask=[[0, 1], [1, 1]], source="s")


def test_target_errors_name_the_models_and_the_finite_range():
    with pytest.raises(ValueError, match=re.escape("'target' holds inf at models [1, 2] (NaN")):
        ScoreMatrix(np.ones((4, 2)), target=[np.nan, np.inf, -np.inf, 0.5])
    with pytest.raises(ValueError, match=re.escape("range is 0.2..1.5")):
        ScoreMatrix(np.ones((3, 2)), target=[np.nan, 0.2, 1.5])


def test_target_has_one_entry_per_model_not_per_item():
    with pytest.raises(ValueError, match=re.escape("'target' must have shape (3,), got (2,)")):
        ScoreMatrix(np.ones((3, 2)), target=[0.1, 0.2])
    sm = ScoreMatrix(np.ones((3, 2)), target=[0.1, 0.2, 0.3])
    assert sm.target.dtype == np.float32 and sm.target.shape == (3,)


def test_accuracy_of_a_row_with_no_observed_cell_is_nan():
    sm = ScoreMatrix(np.array([[1.0, 0.0], [0.0, 1.0]]), mask=[[1, 1], [0, 0]])
    acc = sm.accuracy()
    assert acc[0] == 0.5 and np.isnan(acc[1])
    assert np.isnan(sm.true_score()[1])  # no target: the row mean, NaN as well


def test_require_complete_names_three_of_the_incomplete_rows():
    s = np.ones((5, 2))
    s[:4, 0] = np.nan
    sm = ScoreMatrix(s, models=list("abcde"))
    with pytest.raises(ValueError, match=re.escape(
            "but 4 model rows have missing cells (e.g. ['a', 'b', 'c']); restrict")):
        sm.require_complete()


# ------------------------------------------------------------------ take
def test_take_reads_a_range_with_its_step():
    sm = ScoreMatrix(np.eye(6), models=list("abcdef"))
    assert sm.take(models=range(0, 6, 2)).models.tolist() == ["a", "c", "e"]
    assert sm.take(models=range(5, 0, -2)).models.tolist() == ["f", "d", "b"]


def test_a_tuple_mixing_indices_and_names_gets_the_same_hint_as_a_list():
    sm = ScoreMatrix(np.eye(3), models=["a", "b", "c"])
    for sel in ((0, "b"), (np.int64(0), "b")):
        with pytest.raises(KeyError, match="a selection mixing names and indices is read "
                                           "as names"):
            sm.take(models=sel)


def test_take_lists_up_to_five_unknown_names():
    sm = ScoreMatrix(np.eye(3), models=["a", "b", "c"])
    with pytest.raises(KeyError, match=re.escape("unknown model names ['p', 'q', 'r', 's']")):
        sm.take(models=["a", "p", "q", "r", "s"])


def test_a_negative_index_and_its_positive_twin_are_one_repeated_row():
    sm = ScoreMatrix(np.eye(3), models=["a", "b", "c"])
    with pytest.raises(ValueError, match=re.escape("models: the selection repeats ['c']")):
        sm.take(models=[2, -1])
    with pytest.raises(ValueError, match=re.escape("items: the selection repeats ['item_0']")):
        sm.take(items=[-3, 0])


def test_a_repeated_selection_names_every_repeated_row():
    sm = ScoreMatrix(np.eye(3), models=["a", "b", "c"])
    with pytest.raises(ValueError, match=re.escape("models: the selection repeats ['a', 'b']")):
        sm.take(models=[0, 1, 0, 1])


# ------------------------------------------------------------ dedup, splits
def test_drop_duplicates_without_repeats_records_nothing():
    sm = ScoreMatrix(np.eye(3), metadata={"x": 1})
    out = sm.drop_duplicates()
    assert out.models.tolist() == sm.models.tolist()
    assert "dropped_duplicates" not in out.metadata and dict(out.metadata) == {"x": 1}


def test_split_refuses_no_sizes_and_bool_sizes():
    sm = ScoreMatrix(np.eye(10))
    for empty in ([], (), np.array([], dtype=int)):
        with pytest.raises(ValueError, match="split: 'sizes' is empty"):
            sm.split(empty)
    with pytest.raises(ValueError, match=re.escape("'sizes' must be finite numbers, got [True]")):
        sm.split([True])


def test_split_needing_one_model_too_many_is_refused_with_the_model_count():
    sm = ScoreMatrix(np.ones((10, 3)))
    with pytest.raises(ValueError, match=re.escape(
            "split: sizes [6, 5] need 11 models, matrix has 10")):
        sm.split([6, 5])
    assert [g.n_models for g in sm.split([6, 4])] == [6, 4]  # exactly every model


def test_split_pool_share_of_zero_or_one_is_refused_as_a_share():
    sm = ScoreMatrix(np.eye(10))
    for share in (0.0, 1.0):
        with pytest.raises(ValueError, match=re.escape(
                f"split_pool: fractional 'n_train' must lie in (0, 1), got {share!r}")):
            sm.split_pool(share)


def test_drop_duplicates_refuses_an_int_for_include_target():
    sm = ScoreMatrix(np.array([[1, 0], [1, 0]]), target=[0.2, 0.4])
    for bad in (1, 0, None):
        with pytest.raises(TypeError, match=re.escape(
                f"include_target: expected a bool, got {bad!r}")):
            sm.drop_duplicates(include_target=bad)


def test_the_rounding_hint_covers_float_error_only():
    from jaxeval._data import out_of_unit_hint

    rounding = " (rounding? clip the scores to [0, 1] first)"
    assert out_of_unit_hint(0.0, 1.0 + 5e-7) == rounding
    assert out_of_unit_hint(0.0, 1.0 + 1e-4) != rounding  # 100 ppm over is no float error


def test_an_object_array_mixing_indices_and_names_is_refused_by_type():
    sm = ScoreMatrix(np.eye(3), models=["a", "b", "c"])
    with pytest.raises(TypeError, match=re.escape(
            "models: expected integer indices, a boolean mask or names, got object")):
        sm.take(models=np.array([0, "b"], dtype=object))


def test_masked_entries_of_a_masked_mask_are_counted():
    m = np.ma.masked_array([[1, 1], [1, 1]], mask=[[0, 1], [0, 0]])
    sm = ScoreMatrix(np.eye(2), mask=m)
    assert sm.mask.tolist() == [[True, False], [True, True]]
    assert sm.metadata["conversions"] == [
        "1 masked entries of the numpy masked array given as 'mask' read as unobserved "
        "(mask=False)"]


def test_split_error_shows_the_sizes_given_and_the_counts_they_became():
    with pytest.raises(ValueError, match=re.escape(
            "every group needs at least one model; sizes [0.05] -> [0]")):
        ScoreMatrix(np.eye(10)).split([0.05])


# ------------------------------------------------------- notes carried along
def test_take_clears_whichever_whole_matrix_note_the_truth_holds():
    """A truth whose gap is unknown (None) still has its best and status cleared."""
    sm = ScoreMatrix(np.eye(3), metadata={"synthetic": {"best": 2, "gap": None, "status": 0}})
    part = sm.take(models=[0, 1]).metadata["synthetic"]
    assert part["best"] is None and part["status"] is None
    assert "cleared" in part["subset_note"]
    assert sm.metadata["synthetic"]["best"] == 2


def test_as_score_matrix_offers_load_only_for_a_path():
    with pytest.raises(TypeError, match="d: expected a ScoreMatrix, a pandas DataFrame or a "
                                        "2-D array of scores, got bytes$"):
        as_score_matrix(b"oll2_musr", "d")


def test_a_save_leaves_other_files_stale_temporaries_alone(tmp_path):
    import os

    other = tmp_path / ".tmp-999999999-x.npz"  # a dead writer's, but of x.npz
    other.write_bytes(b"partial")
    t = os.path.getmtime(other) - 3 * 3600.0
    os.utime(other, (t, t))
    ScoreMatrix(np.eye(2)).to_npz(tmp_path / "m.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-999999999-x.npz", "m.npz"]


def test_a_reloaded_truth_keeps_its_lists_as_lists_after_take(tmp_path):
    """A saved and reloaded truth holds lists; take realigns them and keeps them lists
    (plain JSON-like notes, as the file gave them)."""
    syn = jaxeval.synthetic_score_matrix(seed=1, n_models=4, n_items=5)
    back = jaxeval.load(syn.to_npz(tmp_path / "s.npz"))
    assert isinstance(back.metadata["synthetic"]["V"], list)
    part = back.take(models=[3, 1], items=[4, 0]).metadata["synthetic"]
    for key in ("probabilities", "U", "V", "c"):
        assert isinstance(part[key], list), key
    assert part["V"] == [back.metadata["synthetic"]["V"][j] for j in (4, 0)]


# ---------------------------------------------------------------- fixes the review found
@pytest.mark.parametrize("seed, exc", [(-1, ValueError), (None, TypeError), (1.5, TypeError)])
def test_split_pool_names_itself_for_a_bad_seed(seed, exc):
    """A bad seed is refused as ``split_pool``'s (it was reported as ``split``'s)."""
    with pytest.raises(exc, match=r"^split_pool: seed: expected an integer"):
        ScoreMatrix(np.eye(10)).split_pool(5, seed=seed)


def test_the_percent_hint_needs_scores_well_past_one():
    """Scores reaching just past 1 are not percentages (dividing by 100 would squeeze
    them into [0, 0.015]): no hint; from above 1.5 to 100 the percent hint."""
    from jaxeval._data import out_of_unit_hint

    for hi in (1.0005, 1.2, 1.5):
        assert out_of_unit_hint(0.0, hi) == ""
    for hi in (1.51, 2.0, 87.5, 100.0):
        assert out_of_unit_hint(0.0, hi) == " (percent? divide by 100 first)"
    with pytest.raises(ValueError) as e:
        ScoreMatrix(np.array([[0.0, 1.0005]]))
    assert "percent" not in str(e.value) and "1.0005" in str(e.value)
