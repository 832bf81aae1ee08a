"""IdentificationCampaign, a fourth mutation review: saved_scores on a non-finite arm,
the equality of statuses (NaN, bound kinds, sequence lengths), the table's mark of the
recommended model, files of another jaxeval version, hand-made files (one candidate, no
item names), the mode bits kept by a save over a file, a stale copy one answer behind."""

import json
import re
import warnings

import numpy as np
import pytest
from test_campaign import _answer, _small_truth
from test_campaign_deep_mutants import _arrays
from test_campaign_mutants import _saved, _status, _ucbe
from test_campaign_third_mutants import _write

from jaxeval import _campaign
from jaxeval._campaign import IdentificationCampaign

# These tests edit saved files on purpose.
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*changed since it was saved:UserWarning")


# ------------------------------------------------------------- saved_scores
def test_saved_scores_refuse_an_infinite_arm_as_not_a_whole_number(tmp_path):
    """An infinite arm in a float-typed file is not a whole number: refused naming the
    entry (not cast to some integer and reported as out of range)."""
    _, _, arrays = _saved(tmp_path)
    arms = arrays["arms"].astype(np.float64)
    arms[1] = np.inf
    p = _write(tmp_path / "inf.npz", {**arrays, "arms": arms})
    with pytest.raises(ValueError, match=re.escape(
            f"{p}: a damaged campaign file: its 'arms' entry holds other values than whole "
            "numbers")):
        IdentificationCampaign.saved_scores(p)


# ------------------------------------------------------------------ table
def test_the_table_marks_the_recommended_model_even_when_not_the_top_estimate():
    """recommended is the best estimate among the models the policy keeps (SySRs rejects
    some): the table marks that model's row, wherever it sorts."""
    st = _status(recommended="a")
    lines = st.table().splitlines()
    assert lines[1].startswith("long-model-name") and not lines[1].endswith(" *")
    assert lines[2].startswith("a ") and lines[2].endswith(" *")
    assert lines[-1].endswith("not yet confident that a is best")


# ------------------------------------------------------------------ equality
def test_statuses_with_nan_estimates_are_equal():
    """Statuses compare arrays whole with NaN equal to NaN (a model without a score
    may have no estimate): two equal statuses holding a NaN are equal."""
    est = np.array([0.5, np.nan, 0.25])
    assert _status(estimate=est) == _status(estimate=est.copy())
    assert _status(estimate=est) != _status(estimate=np.array([0.5, 0.75, 0.25]))


def test_statuses_with_other_interval_kinds_are_not_equal():
    """bounds of other kinds (one more kind on either side) make statuses unequal."""
    lo, up = np.array([0.1, 0.2, 0.3]), np.array([0.4, 0.5, 0.6])
    one = _status(bounds={"eb": (lo, up)})
    two = _status(bounds={"eb": (lo, up), "hoeffding": (lo, up)})
    assert one != two and two != one
    assert one == _status(bounds={"eb": (lo.copy(), up.copy())})


def test_same_value_compares_sequences_of_other_lengths_as_different():
    """_same_value: tuples / lists of other lengths differ (zip must not cut the longer)."""
    assert not _campaign._same_value((1, 2), (1, 2, 3))
    assert not _campaign._same_value([np.zeros(2)], [np.zeros(2), np.zeros(2)])
    assert _campaign._same_value((1, np.zeros(2)), [1, np.zeros(2)])


# ------------------------------------------------------------------ load
def test_a_file_of_another_jaxeval_version_is_not_said_edited(tmp_path):
    """The state's inputs checksum is compared only when this jaxeval wrote the file (a
    hash from another version may be computed otherwise): a file of another version is
    replayed silently, not said edited."""
    camp, _, arrays = _saved(tmp_path)
    meta = json.loads(str(arrays["meta"]))
    meta["state"] = dict(meta["state"], jaxeval="0.0.0-other", inputs="another-hash")
    p = _write(tmp_path / "old.npz", {**arrays, "meta": np.asarray(json.dumps(meta))})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = IdentificationCampaign.load(p)
    assert again.calls == camp.calls == 8
    assert again.ask() == camp.ask()


def test_a_file_with_one_candidate_is_refused_naming_the_candidates(tmp_path):
    """A hand-made file of one candidate is refused as the constructor refuses it."""
    truth = _small_truth()
    camp = _ucbe(truth, batch_size=2)
    p = camp.save(tmp_path / "c.npz")
    arrays = _arrays(p)
    meta = json.loads(str(arrays["meta"]))
    meta["candidates"] = meta["candidates"][:1]
    q = _write(tmp_path / "one.npz", {**arrays, "meta": np.asarray(json.dumps(meta))})
    with pytest.raises(ValueError, match=re.escape(
            f"{q}: not a usable saved campaign (candidates: expected at least 2 distinct "
            "names)")):
        IdentificationCampaign.load(q)


def test_a_file_without_item_names_is_not_a_campaign(tmp_path):
    """meta without its 'items' entry: refused naming the entry, by saved_scores and load
    alike (not a bare KeyError)."""
    _, _, arrays = _saved(tmp_path)
    meta = json.loads(str(arrays["meta"]))
    del meta["items"]
    p = _write(tmp_path / "noitems.npz", {**arrays, "meta": np.asarray(json.dumps(meta))})
    for read in (IdentificationCampaign.saved_scores, IdentificationCampaign.load):
        with pytest.raises(ValueError, match=re.escape(
                f"{p}: not a saved jaxeval campaign (no 'items' entry)")):
            read(p)


# ------------------------------------------------------------------ save
def test_a_save_over_a_file_keeps_its_special_mode_bits(tmp_path):
    """A file saved over keeps its whole mode, the sticky / set-id bits included."""
    truth = _small_truth()
    camp = _ucbe(truth, batch_size=2)
    _answer(camp, truth, 1)
    p = camp.save(tmp_path / "c.npz")
    p.chmod(0o1640)
    if p.stat().st_mode & 0o7777 != 0o1640:  # pragma: no cover - a file system without it
        pytest.skip("the file system does not keep the sticky bit of a file")
    _answer(camp, truth, 1)
    camp.save(p)
    assert p.stat().st_mode & 0o7777 == 0o1640


def test_a_stale_copy_one_answer_behind_is_refused_naming_the_one_answer(tmp_path):
    """A copy loaded before one more answer was told elsewhere: saving it over the file
    is refused saying the file holds one more answer than it."""
    _, path, _ = _saved(tmp_path)
    stale = IdentificationCampaign.load(path)
    live = IdentificationCampaign.load(path)
    truth = _small_truth()
    _answer(live, truth, 1)
    live.save(path)
    with pytest.raises(ValueError, match=re.escape(
            f"path: {path} holds 5 answers, 1 more than this campaign has")):
        stale.save(path)
    assert IdentificationCampaign.saved_scores(path).mask.sum() == 10


def test_load_reads_whole_answer_lengths_stored_as_floats(tmp_path):
    """``lens`` of whole numbers stored as floats loads as saved_scores reads it (a bare
    slice TypeError escaped ``load``); a fractional length is refused as not usable."""
    camp, _, arrays = _saved(tmp_path)
    p = _write(tmp_path / "f.npz", {**arrays, "lens": arrays["lens"].astype(np.float64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the checksums see the new dtype: said, not here)
        back = IdentificationCampaign.load(p)
    assert back.calls == camp.calls
    np.testing.assert_array_equal(back.status().estimate, camp.status().estimate)
    lens = arrays["lens"].astype(np.float64)
    lens[0] -= 0.5
    lens[1] += 0.5
    bad = _write(tmp_path / "g.npz", {**arrays, "lens": lens})
    with pytest.raises(ValueError, match=r"not a usable saved campaign \(its 'lens' entry "
                       "holds other values than whole numbers\\)"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            IdentificationCampaign.load(bad)
