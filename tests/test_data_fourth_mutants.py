"""Gaps a fourth mutation review of ``jaxeval/_data.py`` found (after
tests/test_data_mutants.py, tests/test_data_deep_mutants.py and
tests/test_data_third_mutants.py): which metadata follows a selection and which does not,
the notes a matrix owns, the messages of the selection checks, and the temporary files
a save sweeps or leaves. Each test fails on a plausible bug the suite let through."""

import os
import pickle
import time

import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix
from jaxeval._data import _pid_alive, atomic_open


# ------------------------------------------------------- metadata after take
def test_the_truths_u_follows_models_only_even_when_its_rank_equals_the_items():
    """``U`` is ``[models, rank]``: a rank that equals the number of items must not make
    a selection of items reorder its columns."""
    syn = jaxeval.synthetic_score_matrix(seed=1, n_models=4, n_items=2, rank=2, gap=0.1)
    u = np.asarray(syn.metadata["synthetic"]["U"])
    assert u.shape == (4, 2)
    part = syn.take(models=[3, 0], items=[1, 0]).metadata["synthetic"]
    np.testing.assert_array_equal(part["U"], u[[3, 0]])


def test_the_truths_item_offsets_follow_items_only_on_a_square_matrix():
    """``c`` is per item: on a square matrix a selection of models must leave it whole."""
    syn = jaxeval.synthetic_score_matrix(seed=1, n_models=4, n_items=4, gap=0.1)
    c = np.asarray(syn.metadata["synthetic"]["c"])
    part = syn.take(models=[3, 1]).metadata["synthetic"]
    np.testing.assert_array_equal(part["c"], c)
    both = syn.take(models=[3, 1], items=[2, 0]).metadata["synthetic"]
    np.testing.assert_array_equal(both["c"], c[[2, 0]])


def test_drop_duplicates_realigns_the_per_model_notes_of_the_kept_rows():
    sm = ScoreMatrix(np.array([[1, 0], [1, 0], [0, 1]]), models=["a", "b", "c"],
                     metadata={"is_source": [True, False, False]})
    out = sm.drop_duplicates()
    assert out.models.tolist() == ["a", "c"]
    assert out.metadata["is_source"] == [True, False]
    assert out.metadata["dropped_duplicates"] == ["b"]


# ------------------------------------------------------------ owned notes
def test_a_matrix_owns_its_notes_the_callers_lists_do_not_reach_it():
    """The notes are copied deeply: arrays in them (a synthetic truth's, say) and lists
    the caller changes later do not change the matrix's."""
    weights = np.arange(3.0)
    notes = {"conversions": ["read as percent"], "synthetic": {"c": weights}}
    sm = ScoreMatrix(np.eye(2), metadata=notes)
    notes["conversions"].append("later")
    weights[0] = 99.0
    assert sm.metadata["conversions"] == ["read as percent"]
    assert sm.metadata["synthetic"]["c"].tolist() == [0.0, 1.0, 2.0]


def test_metadata_may_hold_a_tuple_of_other_matrices_read_only_metadata(tmp_path):
    """Mappings inside tuples (another matrix's read-only metadata, say) are copied as
    dicts, so the matrix builds, pickles and saves."""
    a = ScoreMatrix(np.eye(2), metadata={"licence": "CC-BY"})
    sm = ScoreMatrix(np.eye(2), metadata={"parts": (a.metadata, {"n": 1})})
    assert sm.metadata["parts"][0] == {"licence": "CC-BY"}
    back = jaxeval.load(sm.to_npz(tmp_path / "m.npz"))
    assert back.metadata["parts"][0] == {"licence": "CC-BY"}


# ------------------------------------------------------------- selections
def test_an_empty_selection_error_counts_models_and_items_in_their_places():
    sm = ScoreMatrix(np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"selection is empty \(0 models, 4 items\)"):
        sm.take(models=np.zeros(3, bool))
    with pytest.raises(ValueError, match=r"selection is empty \(3 models, 0 items\)"):
        sm.take(items=[])


# ------------------------------------------------------- temporary files
def test_another_users_process_counts_as_alive(monkeypatch):
    """``os.kill(pid, 0)`` on another user's process raises PermissionError: that pid is
    live, and its writer's temporary file must not be swept."""
    def kill(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    assert _pid_alive(12345) is True


def _stale(folder, name):
    p = folder / name
    p.write_bytes(b"partial")
    t = os.path.getmtime(p) - 3 * 3600.0
    os.utime(p, (t, t))
    return p


def test_atomic_open_without_sweep_leaves_stale_temporaries_to_its_caller(tmp_path):
    stale = _stale(tmp_path, ".tmp-999999999-m.bin")
    with atomic_open(tmp_path / "m.bin", sweep=False) as fh:
        fh.write(b"x")
    assert stale.exists() and (tmp_path / "m.bin").read_bytes() == b"x"
    with atomic_open(tmp_path / "m.bin") as fh:
        fh.write(b"y")
    assert not stale.exists()



def test_take_of_every_row_in_another_order_still_realigns_the_notes():
    """A selection of every model (or item) in a new order is a reordering, not the
    whole matrix: the per-model notes follow it."""
    syn = jaxeval.synthetic_score_matrix(seed=3, n_models=3, n_items=5, gap=0.1)
    truth = syn.metadata["synthetic"]
    sm = ScoreMatrix(syn.scores, metadata={**syn.metadata, "is_source": [True, False, False]})
    out = sm.take(models=[2, 0, 1])
    assert out.metadata["is_source"] == [False, True, False]
    np.testing.assert_array_equal(out.metadata["synthetic"]["U"],
                                  np.asarray(truth["U"])[[2, 0, 1]])
    cols = sm.take(items=[4, 3, 2, 1, 0]).metadata["synthetic"]
    np.testing.assert_array_equal(cols["c"], np.asarray(truth["c"])[::-1])


# -------------------------------------------------------- checks, read-only
def test_a_mask_of_minus_one_is_not_zero_one():
    with pytest.raises(ValueError, match=r"field 'mask' must be boolean \(0/1\)"):
        ScoreMatrix(np.eye(2), mask=np.array([[1, -1], [1, 1]]))


def test_the_target_is_read_only_like_the_other_arrays():
    sm = ScoreMatrix(np.eye(2), target=[0.25, 0.5])
    for arr in (sm.scores, sm.mask, sm.models, sm.items, sm.target,
                sm.take(models=[1, 0]).target):
        assert not arr.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        sm.target[0] = 1.0
    assert not pickle.loads(pickle.dumps(sm)).target.flags.writeable


def test_a_target_with_missing_entries_survives_the_npz_round_trip(tmp_path):
    sm = ScoreMatrix(np.array([[1.0, 0.0], [0.5, 1.0]]), target=[np.nan, 0.75])
    back = jaxeval.load(sm.to_npz(tmp_path / "m.npz"))
    assert back.target is not None
    np.testing.assert_array_equal(back.target, np.array([np.nan, 0.75], np.float32))


# ----------------------------------------------------------------- splits
def test_split_pool_reads_a_numpy_float_as_a_share():
    sm = ScoreMatrix(np.eye(10))
    share = np.float32(7) / 10  # a share computed with numpy (float32 is no Python float)
    train, pool = sm.split_pool(share, seed=4)
    assert (train.n_models, pool.n_models) == (7, 3)
    assert train.models.tolist() == sm.split_pool(0.7, seed=4)[0].models.tolist()


def test_split_sizes_mixing_a_count_and_fractions_are_refused_as_fractions():
    """Any float makes the sizes fractions: a stray int among them is a fraction too,
    and the error says the fractions are wrong, not that a group came out empty."""
    sm = ScoreMatrix(np.eye(10))
    with pytest.raises(ValueError, match=r"fractional 'sizes' must be >= 0 and sum to <= 1, "
                                         r"got \[0\.5, 1\]"):
        sm.split([0.5, 1])


def test_staleness_is_read_from_the_last_change_not_the_last_read(tmp_path):
    """A dead writer's file changed hours ago but read a moment ago (a backup, a
    ``cat``) is stale; one changed just now but last read hours ago (another host's
    writer, its atime kept by ``relatime``) is not."""
    now = time.time()
    old = now - 3 * 3600.0
    read_late = tmp_path / ".tmp-999999998-m.bin"
    written_late = tmp_path / ".tmp-999999999-m.bin"
    for p, (atime, mtime) in ((read_late, (now, old)), (written_late, (old, now))):
        p.write_bytes(b"partial")
        os.utime(p, (atime, mtime))
    with atomic_open(tmp_path / "m.bin") as fh:
        fh.write(b"x")
    assert not read_late.exists() and written_late.exists()


# ------------------------------------------------ problems the review found (fixed)
def test_an_integer_that_is_a_models_name_gets_the_hint_to_pass_strings():
    sm = ScoreMatrix(np.eye(3), models=[10, 20, 30], source="s.csv")
    with pytest.raises(IndexError, match=r"s\.csv: models index 20 out of range for 3 models "
                                         r"\(integers are positions; '20' is a name: pass "
                                         r"names as strings, e\.g\. \['20'\]\)"):
        sm.take(models=[20])
    assert sm.take(models=["20"]).models.tolist() == ["20"]
    with pytest.raises(IndexError, match=r"items index 7 out of range for 3 items$"):
        sm.take(items=[0, 7])


def test_an_empty_boolean_mask_of_the_wrong_length_is_named_as_such():
    sm = ScoreMatrix(np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"models mask has shape \(0,\), expected \(4,\)"):
        sm.take(models=np.zeros(0, bool))
    with pytest.raises(ValueError, match="selection is empty"):
        sm.take(models=np.zeros(4, bool))


def test_a_temporary_file_named_for_pid_0_is_swept_when_stale(tmp_path):
    import os

    assert not _pid_alive(0) and not _pid_alive(-5)
    target = tmp_path / "m.npz"
    stale = tmp_path / ".tmp-0-m.npz"
    stale.write_bytes(b"x")
    os.utime(stale, (1.0, 1.0))
    with atomic_open(target) as fh:
        fh.write(b"new")
    assert not stale.exists() and target.read_bytes() == b"new"
