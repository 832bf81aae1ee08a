"""IdentificationCampaign, a third mutation review: each kind's own interval in
status(), budgets that cut the last batch, what load() must not trust in a saved
state (each check that sends a file to replay), the save overwrite rule and
saved_scores' range checks."""

import json
import re

import jax
import numpy as np
import pytest
from test_campaign import _answer, _leaf_position, _load_counting, _small_truth
from test_campaign_deep_mutants import _arrays
from test_campaign_mutants import _saved, _ucbe

from jaxeval import _campaign
from jaxeval._campaign import IdentificationCampaign


def _resealed(camp, arrays, drop=(), **changes):
    """``arrays`` with ``changes`` (and without the entries in ``drop``), both checksums
    recomputed as ``save`` does (as a buggy writer would leave them): only the checks of
    the state against the answers can then send the file to replay."""
    a = {k: v for k, v in {**arrays, **changes}.items() if k not in drop}
    meta = json.loads(str(arrays["meta"]))
    n_leaves = len(jax.tree.leaves(camp._state))
    leaves = [a[f"state_{i}"] for i in range(n_leaves) if f"state_{i}" in a]
    answers = [a[k] for k in ("arms", "lens", "index", "scores")]
    done = np.asarray(meta["policy_done"] is True)
    stamp = dict(meta["state"], answers=int(a["arms"].size),
                 content=_campaign._digest(*answers, done, *leaves))
    meta = dict(meta, answers_sha256=_campaign._digest(*answers), state=stamp)
    return dict(a, meta=np.asarray(json.dumps(meta)))


def _write(path, arrays):
    np.savez(path, **arrays)
    return path


def _same_state(a, b):
    for x, y in zip(jax.tree.leaves(a._state), jax.tree.leaves(b._state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ----------------------------------------------------------------- status
def test_status_bounds_hold_each_kinds_own_interval():
    """bounds[kind] is that kind's interval: the hoeffding bounds of a campaign that stops
    on eb are the lower / upper of the same campaign stopping on hoeffding."""
    truth = _small_truth(K=2, n=200)  # (few items scored: both uppers are the same cap)
    st = {}
    for kind in ("eb", "hoeffding"):
        camp = _ucbe(truth, batch_size=20, stop_when_confident=False, stop_kind=kind)
        _answer(camp, truth, 2)
        st[kind] = camp.status()
    for kind in ("eb", "hoeffding"):
        np.testing.assert_array_equal(st["eb"].bounds[kind][0], st[kind].lower)
        np.testing.assert_array_equal(st["eb"].bounds[kind][1], st[kind].upper)
        np.testing.assert_array_equal(st["hoeffding"].bounds[kind][1], st[kind].upper)
    assert not np.array_equal(st["eb"].upper, st["hoeffding"].upper)
    assert not np.array_equal(st["eb"].lower, st["hoeffding"].lower)


# ------------------------------------------------------------------ tell
def test_text_in_an_object_array_of_scores_is_refused():
    """A score stored as text is refused inside an object array too (np.asarray(...,
    float) would read "1" as 1.0); nothing is changed."""
    camp = _ucbe(_small_truth())
    req = camp.ask()
    with pytest.raises(TypeError, match="scores: expected numbers, got text such as '1'"):
        camp.tell(req, np.array([0.0, "1", 1.0], dtype=object))
    assert camp.calls == 0 and camp.ask() == req


def test_one_score_too_many_with_a_none_is_refused_by_its_length():
    """A None past the request's last item is a wrong length first (not a missing score
    of an item that was never requested)."""
    camp = _ucbe(_small_truth())
    req = camp.ask()
    with pytest.raises(ValueError, match=re.escape(
            "scores: expected 3 scores (one per requested item), got shape (4,)")):
        camp.tell(req, [1.0, 0.0, 1.0, None])
    assert camp.calls == 0


# ----------------------------------------------------------------- budget
def test_a_budget_that_cuts_the_last_batch_is_spent_exactly():
    """With a budget that is not a multiple of the batch size, the last request holds
    the calls left (fewer items), and the campaign ends with exactly the budget spent."""
    truth = _small_truth(K=2, n=10)
    camp = _ucbe(truth, batch_size=3, budget=7, stop_when_confident=False)
    sizes = []
    while (req := camp.ask()) is not None:
        sizes.append(req.index.size)
        camp.tell(req, truth.take(models=[req.model], items=req.items).scores[0])
    st = camp.status()
    assert sizes == [3, 3, 1]
    assert (st.calls, st.budget, st.done, st.reason, int(st.pulls.sum())) == (
        7, 7, True, "budget", 7)


# ------------------------------------------------------ load: what is trusted
def test_a_resealed_state_missing_its_last_leaf_is_replayed(tmp_path, monkeypatch):
    camp, _, arrays = _saved(tmp_path)
    last = len(jax.tree.leaves(camp._state)) - 1
    p = _write(tmp_path / "short.npz", _resealed(camp, arrays, drop=(f"state_{last}",)))
    back, asked = _load_counting(p, monkeypatch)
    assert asked == 4
    _same_state(back, camp)


def test_a_resealed_state_leaf_of_another_dtype_is_replayed(tmp_path, monkeypatch):
    """A leaf saved as float64 (the layout says float32) is not restored."""
    camp, _, arrays = _saved(tmp_path)
    i = _leaf_position(camp._state, "estimate")
    p = _write(tmp_path / "f64.npz", _resealed(
        camp, arrays, **{f"state_{i}": arrays[f"state_{i}"].astype(np.float64)}))
    back, asked = _load_counting(p, monkeypatch)
    assert asked == 4
    _same_state(back, camp)
    assert back.status() == camp.status()


def test_resealed_float_typed_answers_are_replayed(tmp_path, monkeypatch):
    """Arms saved as floats (checksums recomputed) are not trusted as indices: the
    answers replay to the same campaign."""
    camp, _, arrays = _saved(tmp_path)
    p = _write(tmp_path / "float.npz", _resealed(camp, arrays,
                                                 arms=arrays["arms"].astype(np.float64)))
    back, asked = _load_counting(p, monkeypatch)
    assert asked == 4
    _same_state(back, camp)


def test_a_resealed_answer_naming_model_k_does_not_replay(tmp_path):
    """An answer naming model K (one past the last) is not restored: its replay is
    refused naming the answer (not an IndexError)."""
    camp, _, arrays = _saved(tmp_path)
    arms = arrays["arms"].copy()
    arms[-1] = 4
    p = _write(tmp_path / "k.npz", _resealed(camp, arrays, arms=arms))
    with pytest.raises(ValueError, match=r"saved answer 3 of 4 does not replay"):
        IdentificationCampaign.load(p)


def test_an_answer_without_items_or_of_negative_length_is_a_damaged_file(tmp_path):
    """Every answer holds at least one item: lengths 0 or negative (the total still
    right) are refused when the file is read, by load and saved_scores alike, naming
    the entry (a negative one was a bare NumPy error in saved_scores)."""
    camp, _, arrays = _saved(tmp_path)
    p = _write(tmp_path / "empty.npz", _resealed(
        camp, arrays, lens=np.array([2, 2, 2, 0]), index=arrays["index"][:6],
        scores=arrays["scores"][:6]))
    q = _write(tmp_path / "neg.npz", {**arrays, "lens": np.array([-1, 5, 2, 2])})
    for f in (p, q):
        for read in (IdentificationCampaign.load, IdentificationCampaign.saved_scores):
            with pytest.raises(ValueError, match=re.escape(
                    f"{f}: not a saved jaxeval campaign (its 'lens' entry holds an answer of "
                    "fewer than one item)")):
                read(f)


def test_saved_scores_read_whole_numbers_stored_as_floats(tmp_path):
    """Arms and items stored as floats (a hand-made file) are read where they are whole
    numbers, and refused as a damaged file naming the entry where they are not (was a
    bare IndexError)."""
    camp, _, arrays = _saved(tmp_path)
    p = _write(tmp_path / "f.npz", {**arrays, "arms": arrays["arms"].astype(np.float64),
                                    "index": arrays["index"].astype(np.float64)})
    got = IdentificationCampaign.saved_scores(p)
    np.testing.assert_array_equal(got.mask, camp.scores().mask)
    arms = arrays["arms"].astype(np.float64)
    arms[0] += 0.5
    q = _write(tmp_path / "g.npz", {**arrays, "arms": arms})
    with pytest.raises(ValueError, match=re.escape(
            f"{q}: a damaged campaign file: its 'arms' entry holds other values than whole "
            "numbers")):
        IdentificationCampaign.saved_scores(q)


def test_resealed_scores_outside_the_unit_interval_are_refused_on_replay(tmp_path):
    """Scores moved out of [0, 1] with the model's sum unchanged (so the state's score
    sum still agrees) are not restored: the replay refuses them."""
    camp, _, arrays = _saved(tmp_path)
    scores = arrays["scores"].copy()
    scores[0] += 2.0
    scores[1] -= 2.0
    p = _write(tmp_path / "range.npz", _resealed(camp, arrays, scores=scores))
    with pytest.raises(ValueError, match=r"saved answer 0 is refused on replay \(scores: "
                                         r"must lie in \[0, 1\]"):
        IdentificationCampaign.load(p)


def test_a_resealed_state_with_other_last_items_is_replayed(tmp_path, monkeypatch):
    """Each model's last item drawn (the sampler's thr_idx) must be its last answered
    item: a state with them rotated is replayed."""
    camp, _, arrays = _saved(tmp_path)
    i = _leaf_position(camp._state.sampler, "thr_idx")
    rolled = np.roll(arrays[f"state_{i}"], 1)
    assert not np.array_equal(rolled, arrays[f"state_{i}"])
    p = _write(tmp_path / "thr.npz", _resealed(camp, arrays, **{f"state_{i}": rolled}))
    back, asked = _load_counting(p, monkeypatch)
    assert asked == 4
    _same_state(back, camp)


def test_a_file_with_a_renamed_item_is_said_edited_and_replayed(tmp_path, monkeypatch):
    """The item names are among the saved state's inputs: a file whose item was renamed
    since the save warns so and replays (to the same requests, under the new name)."""
    camp, _, arrays = _saved(tmp_path)
    meta = json.loads(str(arrays["meta"]))
    meta["items"][0] = "renamed"
    p = _write(tmp_path / "names.npz", {**arrays, "meta": np.asarray(json.dumps(meta))})
    with pytest.warns(UserWarning, match="the file's settings, seed, item factors or names "
                                         "changed since it was saved"):
        back, asked = _load_counting(p, monkeypatch)
    assert asked == 4 and back.items[0] == "renamed"
    _same_state(back, camp)


def test_a_file_with_an_edited_seed_key_is_said_edited(tmp_path):
    """The seed key is among the saved state's inputs: a flipped bit is reported as an
    edit, also by the replay it stops (not blamed on JAX or the platform)."""
    camp, _, arrays = _saved(tmp_path)
    key = arrays["key"].copy()
    key[-1] ^= 1
    p = _write(tmp_path / "key.npz", {**arrays, "key": key})
    with pytest.warns(UserWarning, match="the file's settings, seed, item factors or names "
                                         "changed since it was saved"), \
            pytest.raises(ValueError, match=re.escape(
                "does not replay (the file's settings, seed, item factors or names changed "
                "since it was saved)")):
        IdentificationCampaign.load(p)


# ------------------------------------------------------------------ save
def test_saving_over_a_file_with_the_same_models_and_scores_but_other_items_is_refused(
        tmp_path):
    """Two campaigns of other seeds asked the same models in the same order, scored all
    1.0, but on other items: the second is not a continuation of the first's file."""
    truth = _small_truth()
    one, two = _ucbe(truth, batch_size=2), _ucbe(truth, batch_size=2, seed=1)
    for camp in (one, two):
        for _ in range(3):
            req = camp.ask()
            camp.tell(req, [1.0, 1.0])
    assert [a for a, _, _ in one._log] == [a for a, _, _ in two._log]
    path = one.save(tmp_path / "c.npz")
    with pytest.raises(ValueError, match="holds 3 answers, other answers than this"):
        two.save(path)
    np.testing.assert_array_equal(IdentificationCampaign.saved_scores(path).mask,
                                  one.scores().mask)


def test_saving_over_a_file_whose_one_answer_has_other_scores_is_refused(tmp_path):
    """A file holding one answer, for the same request with other scores, is not this
    campaign's first answer: saving over it is refused."""
    truth = _small_truth()
    one, two = _ucbe(truth, batch_size=2), _ucbe(truth, batch_size=2)
    for camp, score in ((one, 1.0), (two, 0.0)):
        camp.tell(camp.ask(), [score, score])
    path = one.save(tmp_path / "c.npz")
    with pytest.raises(ValueError, match="holds 1 answers, other answers than this"):
        two.save(path)
    assert IdentificationCampaign.saved_scores(path).scores.sum() == 2.0


# ------------------------------------------------------------ saved_scores
def test_saved_scores_refuse_a_negative_item_index(tmp_path):
    _, path, arrays = _saved(tmp_path)
    index = arrays["index"].copy()
    index[0] = -1
    p = _write(tmp_path / "neg.npz", {**arrays, "index": index})
    with pytest.raises(ValueError, match="a damaged campaign file: answers name models or "
                                         "items outside its 4 candidates and 60 items"):
        IdentificationCampaign.saved_scores(p)
    assert _arrays(path)["index"][0] >= 0
