"""Gaps a second, deeper mutation review of ``jaxeval/_data.py`` found (the first was
tests/test_data_mutants.py): each test fails on a plausible bug of the ScoreMatrix
container, its selections, splits, dedup, notes and files that the suite let through."""

import re

import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix
from jaxeval._data import (
    array_digest,
    as_score_matrix,
    npz_name,
    out_of_unit_hint,
    rename_duplicates,
    saved_npz,
)


# ------------------------------------------------------------------ helpers
def test_out_of_unit_hint_guesses_at_both_boundaries():
    """A score of exactly 100 is still percent; a float error just below 0 is rounding."""
    assert out_of_unit_hint(0.0, 100.0) == " (percent? divide by 100 first)"
    assert out_of_unit_hint(-1e-7, 1.0) == " (rounding? clip the scores to [0, 1] first)"
    assert out_of_unit_hint(-0.5, 1.0) == "" and out_of_unit_hint(0.0, 100.5) == ""


def test_rename_duplicates_counts_from_two_and_notes_how_many():
    notes: dict = {"conversions": ["earlier"]}
    out = rename_duplicates(["a", "b", "a", "a", "b"], "models", notes)
    assert out.tolist() == ["a", "b", "a#2", "a#3", "b#2"]
    assert notes["conversions"][0] == "earlier"
    assert notes["conversions"][1].startswith("3 repeated 'models' names made unique")
    quiet: dict = {}
    assert rename_duplicates(["x", "y"], "items", quiet).tolist() == ["x", "y"]
    assert quiet == {}  # nothing renamed, nothing noted


def test_utf8_byte_names_are_decoded_and_bad_bytes_named():
    names = np.array(["é".encode(), b"b"])  # dtype S, as HDF5 stores text
    assert ScoreMatrix(np.eye(2), models=names).models.tolist() == ["é", "b"]
    with pytest.raises(ValueError, match="x.h5: field 'items' holds byte strings that are "
                                         "not UTF-8"):
        ScoreMatrix(np.eye(2), items=np.array([b"\xff", b"a"]), source="x.h5")


def test_array_digest_tells_dtypes_and_shapes_apart():
    a = np.zeros((2, 3), np.uint8)
    assert array_digest(a) == array_digest(a.copy())
    assert array_digest(a) != array_digest(a.astype(np.int8))  # same bytes, other dtype
    assert array_digest(a) != array_digest(a.reshape(3, 2))  # same bytes, other shape


def test_npz_name_appends_to_any_other_suffix_and_saved_npz_prefers_the_path(tmp_path):
    assert npz_name("run.v1").name == "run.v1.npz"  # not "run.npz"
    assert npz_name("m.npz").name == "m.npz"
    p = ScoreMatrix(np.eye(2)).to_npz(tmp_path / "run.v1")
    assert p.name == "run.v1.npz" and jaxeval.load(p).shape == (2, 2)
    assert saved_npz(tmp_path / "run.v1") == p  # only the .npz exists
    (tmp_path / "run.v1").write_bytes(b"x")  # both exist: the path itself
    assert saved_npz(tmp_path / "run.v1") == tmp_path / "run.v1"


def test_to_npz_into_a_missing_folder_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder") as e:
        ScoreMatrix(np.eye(2)).to_npz(tmp_path / "nope" / "m.npz")
    assert ".tmp-" not in str(e.value)


def test_numpy_scalars_in_metadata_come_back_as_numbers(tmp_path):
    sm = ScoreMatrix(np.eye(2), metadata={"f": np.float32(0.5), "i": np.int64(3)})
    back = jaxeval.load(sm.to_npz(tmp_path / "m.npz"))
    assert back.metadata["f"] == 0.5 and back.metadata["i"] == 3
    assert isinstance(back.metadata["i"], int)


# ------------------------------------------------------------- construction
def test_duplicate_names_error_lists_only_the_repeated_ones():
    with pytest.raises(ValueError, match=r"field 'models' has duplicate names, e.g. \['b'\]$"):
        ScoreMatrix(np.eye(3), models=["a", "b", "b"])


def test_masked_array_notes_count_the_masked_cells_only():
    ma = np.ma.masked_array([[np.nan, 0.5, 1.0], [0.0, 1.0, np.nan]],
                            mask=[[1, 0, 0], [0, 0, 0]])
    sm = ScoreMatrix(ma)
    conv = sm.metadata["conversions"]
    assert conv[0].startswith("1 masked cells of a numpy masked array")
    # the NaN under the array's mask is not counted again as a NaN cell
    assert conv[1] == "1 NaN cells read as unobserved (mask=False)" and len(conv) == 2
    assert sm.mask.tolist() == [[False, True, True], [True, True, False]]


def test_unobserved_cells_may_hold_anything_and_errors_name_an_observed_cell():
    sm = ScoreMatrix(np.array([[np.inf, 0.5], [7.0, 1.0]]), mask=[[0, 1], [0, 1]])
    assert sm.scores.tolist() == [[0.0, 0.5], [0.0, 1.0]]
    with pytest.raises(ValueError, match=r"found 2.0 at row 1, column 1 \(range 0.5..2.0\)"):
        ScoreMatrix(np.array([[5.0, 0.5], [7.0, 2.0]]), mask=[[0, 1], [0, 1]])


def test_mask_must_be_zero_one():
    with pytest.raises(ValueError, match=r"field 'mask' must be boolean \(0/1\)"):
        ScoreMatrix(np.eye(2), mask=np.array([[1, 2], [1, 1]]))
    assert ScoreMatrix(np.eye(2), mask=np.array([[1, 0], [1, 1]])).mask.tolist() == [
        [True, False], [True, True]]


def test_target_must_be_a_fraction_per_model():
    with pytest.raises(ValueError, match=r"'target' must lie in \[0, 1\].*-0.1"):
        ScoreMatrix(np.eye(2), target=[-0.1, 0.5])
    with pytest.raises(ValueError, match=r"'target' must have shape \(2,\), got \(2, 1\)"):
        ScoreMatrix(np.eye(2), target=[[0.1], [0.2]])
    ok = ScoreMatrix(np.eye(2), target=[np.nan, 0.0])  # NaN: unknown; 0 is a fraction
    assert np.isnan(ok.target[0]) and ok.target[1] == 0.0


def test_repr_boundary_and_external_target():
    s = np.ones((10, 100))
    s[0, 0] = np.nan  # 1 of 1000 cells: exactly 0.1%
    assert "0.1% missing" in repr(ScoreMatrix(s))
    r = repr(ScoreMatrix(np.eye(2), target=[0.5, 0.5], source="t"))
    assert r == "ScoreMatrix(2 models x 2 items, binary, 0.0% missing, external target, " \
                "source='t')"
    assert "external target" not in repr(ScoreMatrix(np.eye(2)))


def test_require_complete_counts_and_names_the_incomplete_rows():
    s = np.ones((3, 5))
    s[0, 1] = s[2, 4] = np.nan
    sm = ScoreMatrix(s, models=["a", "b", "c"], source="src")
    with pytest.raises(ValueError, match=r"^src: the fit needs a fully observed matrix, but 2 "
                                         r"model rows have missing cells \(e.g. \['a', 'c'\]\)"):
        sm.require_complete("the fit")
    assert sm.take(models=["b"]).require_complete() is not None


# ------------------------------------------------------------------ take
def test_take_index_bounds_and_errors_name_the_axis():
    sm = ScoreMatrix(np.eye(3), models=["a", "b", "c"], items=["x", "y", "z"])
    assert sm.take(models=[-3, -1]).models.tolist() == ["a", "c"]
    with pytest.raises(IndexError, match="models index 3 out of range for 3 models"):
        sm.take(models=[3])
    with pytest.raises(IndexError, match="items index -4 out of range for 3 items"):
        sm.take(items=[-4])
    with pytest.raises(KeyError, match=r"unknown item names \['q'\]"):
        sm.take(items=["x", "q"])
    with pytest.raises(ValueError, match=r"models mask has shape \(2,\), expected \(3,\)"):
        sm.take(models=np.array([True, False]))
    assert sm.take(items=np.array([False, True, True])).items.tolist() == ["y", "z"]


def test_take_of_items_alone_realigns_the_synthetic_truth():
    syn = jaxeval.synthetic_score_matrix(seed=2, n_models=5, n_items=8, gap=0.1)
    truth = syn.metadata["synthetic"]
    cols = [6, 1, 3]
    part = syn.take(items=cols).metadata["synthetic"]
    np.testing.assert_array_equal(part["V"], np.asarray(truth["V"])[cols])
    np.testing.assert_array_equal(part["probabilities"],
                                  np.asarray(truth["probabilities"])[:, cols])
    np.testing.assert_array_equal(part["U"], truth["U"])  # every model kept
    assert part["best"] is None and part["status"] is None


def test_is_source_follows_the_rows_of_a_non_square_matrix():
    sm = ScoreMatrix(np.ones((4, 3)), metadata={"is_source": [True, False, False, True]})
    assert sm.take(models=[3, 1]).metadata["is_source"] == [True, False]
    assert sm.take(items=[0]).metadata["is_source"] == [True, False, False, True]


# ------------------------------------------------------------ dedup, splits
def test_drop_duplicates_adds_to_an_earlier_record():
    sm = ScoreMatrix(np.array([[1, 0], [1, 0]]), models=["a", "b"],
                     metadata={"dropped_duplicates": ["z"]})
    assert sm.drop_duplicates().metadata["dropped_duplicates"] == ["z", "b"]


def test_drop_duplicates_accepts_a_numpy_bool_and_missing_targets_are_equal():
    sm = ScoreMatrix(np.array([[1, 0], [1, 0], [1, 0]]), target=[np.nan, np.nan, 0.5])
    out = sm.drop_duplicates(include_target=np.True_)
    assert out.models.tolist() == ["model_0", "model_2"]
    assert out.metadata["dropped_duplicates"] == ["model_1"]


def test_split_refuses_empty_and_negative_groups_by_name():
    sm = ScoreMatrix(np.eye(10))
    with pytest.raises(ValueError, match=r"every group needs at least one model; sizes \[3, 0\]"):
        sm.split([3, 0])
    with pytest.raises(ValueError, match="fractional 'sizes' must be >= 0"):
        sm.split([-0.1, 0.5])


def test_split_pool_refuses_no_training_model_and_a_bool():
    sm = ScoreMatrix(np.eye(10))
    with pytest.raises(ValueError, match=r"'n_train' must leave at least one model on each "
                                         r"side; got 0 -> 0 of 10"):
        sm.split_pool(0)
    with pytest.raises(ValueError, match=r"'n_train' .* got 0.01 -> 0 of 10"):
        sm.split_pool(0.01)
    with pytest.raises(TypeError, match="'n_train' must be an int or a float, got True"):
        sm.split_pool(True)


def test_protocol_split_rounds_h_and_caps_it_at_200_and_keeps_its_seed():
    small = ScoreMatrix(np.eye(8)).protocol_split(seed=5)  # h = round(1.6) = 2
    assert [small.test.n_models, small.validation.n_models, small.train.n_models] == [2, 2, 4]
    assert small.seed == 5
    perm = np.random.default_rng(5).permutation(8)
    assert small.validation.models.tolist() == [f"model_{i}" for i in perm[2:4]]
    big = ScoreMatrix(np.ones((1100, 1))).protocol_split(seed=0)  # 0.2 * 1100 = 220 -> 200
    assert (big.test.n_models, big.validation.n_models, big.train.n_models) == (200, 200, 700)
    with pytest.raises(ValueError, match="2 models are too few"):
        ScoreMatrix(np.eye(2)).protocol_split(0)


# ------------------------------------------------------------ as_score_matrix
def test_as_score_matrix_refuses_a_mapping_and_names_the_argument():
    with pytest.raises(TypeError, match="anchors: expected a ScoreMatrix, a pandas DataFrame "
                                        "or a 2-D array of scores, got dict$"):
        as_score_matrix({"a": [1.0]}, "anchors")
    with pytest.raises(TypeError, match=r"got str \(jaxeval.load\('oll2_musr'\) reads"):
        as_score_matrix("oll2_musr", "data")


def test_as_score_matrix_prefix_and_items_only_replace_default_labels():
    pd = pytest.importorskip("pandas")
    rows_named = pd.DataFrame([[1.0, 0.0]], index=["gpt"])  # default columns
    sm = as_score_matrix(rows_named, "d", row_prefix="new_", items=["x", "y"])
    assert sm.models.tolist() == ["gpt"] and sm.items.tolist() == ["x", "y"]
    plain = as_score_matrix(pd.DataFrame([[1.0], [0.0]]), "d", row_prefix="new_")
    assert plain.models.tolist() == ["new_0", "new_1"]


def test_a_strided_range_index_is_names_not_defaults():
    pd = pytest.importorskip("pandas")
    sm = ScoreMatrix(pd.DataFrame(np.eye(6)[:, :2]).iloc[::2])  # RangeIndex(0, 6, 2)
    assert sm.models.tolist() == ["0", "2", "4"]


def test_take_reads_byte_string_names_as_the_matrix_does():
    """Names given as byte strings (HDF5 files) are decoded when the matrix is built;
    selecting with byte strings finds the same names (it was a KeyError)."""
    sm = ScoreMatrix(np.eye(3), models=np.array([b"a", b"b", b"c"]),
                     items=["x", "y", "z"])
    assert sm.models.tolist() == ["a", "b", "c"]
    assert sm.take(models=np.array([b"c", b"a"])).models.tolist() == ["c", "a"]
    assert sm.take(items=np.array([b"y"], dtype=object)).items.tolist() == ["y"]
    with pytest.raises(KeyError, match=r"unknown model names \['q'\]"):
        sm.take(models=[b"q"])


def test_shares_round_halves_to_even_as_documented():
    """``split`` and ``split_pool`` round a share with Python's ``round`` (halves to
    even): 0.25 of 10 models is 2, 0.5 of 5 is 2."""
    sm = ScoreMatrix(np.eye(10))
    assert [g.n_models for g in sm.split([0.25])] == [2, 8]
    assert sm.take(models=range(5)).split_pool(0.5)[0].n_models == 2


def test_unknown_names_mixed_with_indices_are_said_to_be_read_as_names():
    """``take(models=[0, "name"])`` reads every entry as a name (NumPy makes the list
    text): the error says so, and speaks of model names in the singular."""
    sm = ScoreMatrix(np.eye(3, dtype=np.float32), models=["a", "b", "c"])
    with pytest.raises(KeyError, match=re.escape(
            "unknown model names ['0'] (a selection mixing names and indices is read as "
            "names: give one or the other)")):
        sm.take(models=[0, "b"])
    with pytest.raises(KeyError) as e:
        sm.take(models=["z", "b"])
    assert e.value.args[0] == "<array>: unknown model names ['z']"


def test_require_complete_suggests_only_a_fix_that_exists():
    """With no complete model row, "restrict to complete rows" is impossible: the error
    says how many items every model answered (or that none was)."""
    mask = np.array([[1, 1, 0], [1, 0, 1], [1, 1, 1]], bool)
    sm = ScoreMatrix(np.eye(3, dtype=np.float32), mask=mask)
    with pytest.raises(ValueError, match=r"restrict to complete rows with \.take\(models="):
        sm.require_complete("the fit")
    sm = ScoreMatrix(np.eye(3, dtype=np.float32)[:2], mask=mask[:2])  # no complete row
    with pytest.raises(ValueError, match=re.escape(
            "no model row is complete; keep the 1 item(s) every model answered with "
            ".take(items=sm.mask.all(axis=0))")):
        sm.require_complete("the fit")
    sm = ScoreMatrix(np.eye(3, dtype=np.float32)[:2],
                     mask=np.array([[0, 1, 1], [1, 0, 0]], bool))
    with pytest.raises(ValueError, match="no model row is complete and no item was "
                                         "answered by every model"):
        sm.require_complete("the fit")
