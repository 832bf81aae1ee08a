"""IdentificationCampaign, a second mutation review: what tell() refuses and records,
status fields, when a campaign ends, saved files (round trips, integrity checks,
permissions, damaged entries) and the history / lam0 / rho options."""

import dataclasses
import json
import os
import re
import warnings

import jax
import numpy as np
import pytest
from test_campaign import _answer, _load_counting, _small_truth
from test_campaign_mutants import _saved, _status, _ucbe

import jaxeval
from jaxeval import _campaign
from jaxeval._campaign import IdentificationCampaign

# These tests edit saved files on purpose; the warning that a file changed since it
# was saved is asserted where it is the subject (test_campaign_deep_mutants.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*changed since it was saved:UserWarning")


def _arrays(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------ tell()
def test_an_answered_steps_request_naming_another_model_is_not_already_answered():
    """A request with an answered step's items but another model was never asked:
    it is "no pending request", not "already answered"."""
    camp = _ucbe(_small_truth())
    req = camp.ask()
    camp.tell(req, [1.0, 0.0, 1.0])
    other = (req.arm + 1) % 4
    alien = dataclasses.replace(req, arm=other, model=str(camp.candidates[other]))
    with pytest.raises(ValueError, match=r"^request: no pending request; call ask\(\) first$"):
        camp.tell(alien, [1.0, 0.0, 1.0])
    assert camp.calls == 3


def test_the_pending_requests_items_with_another_step_are_refused():
    """The request's step is part of what identifies it: the pending request's model
    and items under another step number are refused, and nothing is changed."""
    camp = _ucbe(_small_truth())
    req = camp.ask()
    with pytest.raises(ValueError, match="request: not the pending request"):
        camp.tell(dataclasses.replace(req, step=5), [1.0, 0.0, 1.0])
    assert camp.calls == 0 and camp.ask() == req


def test_scores_must_be_one_flat_score_per_item():
    """A [1, b] table of scores (one row, not matched by name) is refused by its shape,
    as is a scalar; the request stays pending."""
    camp = _ucbe(_small_truth())
    req = camp.ask()
    with pytest.raises(ValueError, match=re.escape(
            "scores: expected 3 scores (one per requested item), got shape (1, 3)")):
        camp.tell(req, np.array([[1.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match=re.escape("expected 3 scores (one per requested "
                                                   "item), got shape ()")):
        camp.tell(req, 1.0)
    assert camp.calls == 0 and camp.ask() == req


def test_an_infinite_score_is_refused_as_not_finite():
    camp = _ucbe(_small_truth())
    req = camp.ask()
    with pytest.raises(ValueError, match=re.escape(
            f"scores: 1 NaN or infinite value(s), the first at position 2 "
            f"(item {str(req.items[2])!r})")):
        camp.tell(req, [0.5, 0.5, np.inf])
    assert camp.calls == 0


def test_fractional_scores_are_recorded_saved_and_loaded_exactly(tmp_path):
    """What tell() records is the scores told (float32), in the request's order: in
    scores(), in the saved file (saved_scores) and in a loaded or replayed campaign."""
    camp = _ucbe(_small_truth(), batch_size=3, stop_when_confident=False)
    told = {}
    for j in range(4):
        req = camp.ask()
        vals = np.array([0.1, 0.25, 0.7]) + 0.01 * j
        camp.tell(req, vals)
        for i, v in zip(req.index, vals):
            told[(req.arm, int(i))] = np.float32(v)
    rows, cols = zip(*told)
    want = np.array(list(told.values()), np.float32)
    np.testing.assert_array_equal(camp.scores().scores[rows, cols], want)
    path = camp.save(tmp_path / "c.npz")
    np.testing.assert_array_equal(IdentificationCampaign.saved_scores(path).scores[rows, cols],
                                  want)
    for replay in (False, True):
        back = IdentificationCampaign.load(path, replay=replay)
        np.testing.assert_array_equal(back.scores().scores[rows, cols], want)
        assert back.status() == camp.status()


# ----------------------------------------------------------------- status
def test_confident_is_reported_without_stopping_when_the_stop_is_off():
    """With stop_when_confident=False a separated leader makes status().confident True
    while the campaign goes on (not done); confident agrees with the bounds."""
    rng = np.random.default_rng(0)
    n = 200
    S = np.stack([(rng.random(n) < p).astype(np.float32) for p in (0.9, 0.3, 0.25, 0.2)])
    truth = jaxeval.ScoreMatrix(S, models=list("abcd"), items=[f"q{i}" for i in range(n)])
    camp = IdentificationCampaign(truth.models, items=truth.items, policy="ucbe",
                                  batch_size=10, seed=1, stop_when_confident=False)
    for _ in range(60):
        st = camp.status()
        if st.confident:
            break
        _answer(camp, truth, 1)
    assert st.confident and not st.done and st.reason == "" and st.recommended == "a"
    assert st.lower[0] > st.upper[1:].max() - camp.settings["eps"]
    assert camp.ask() is not None


def test_the_status_table_pads_short_names_to_the_header():
    """Names shorter than the "model" header are padded to its five characters."""
    st = _status(models=np.array(["a", "bb", "c"]), recommended="bb")
    assert st.table().splitlines()[:2] == [
        "model  estimate  interval            scored",
        "bb       0.7500  [0.6000, 0.9000]      20 *",
    ]


# ------------------------------------------------------------- save / load
def test_a_new_file_takes_the_umask_and_a_file_saved_over_keeps_its_mode(tmp_path):
    truth = _small_truth()
    camp = _ucbe(truth, batch_size=2)
    _answer(camp, truth, 1)
    umask = os.umask(0o027)
    try:
        p = camp.save(tmp_path / "c.npz")
        assert p.stat().st_mode & 0o777 == 0o640
        p.chmod(0o400)  # read-only for its owner: a save over it keeps that
        _answer(camp, truth, 1)
        camp.save(p)
        assert p.stat().st_mode & 0o777 == 0o400
    finally:
        os.umask(umask)


def test_saving_over_a_campaign_with_the_same_candidates_and_other_items_is_refused(
        tmp_path):
    truth = _small_truth()
    camp, path, _ = _saved(tmp_path)
    renamed = IdentificationCampaign(truth.models, items=[f"x{j}" for j in range(60)],
                                     policy="ucbe", batch_size=2, budget=150, seed=0)
    with pytest.raises(ValueError, match=re.escape(
            "holds 4 answers, another campaign's (other candidates or items)")):
        renamed.save(path)
    assert IdentificationCampaign.saved_scores(path).mask.sum() == 8


def test_saved_scores_leave_an_infinite_saved_score_unobserved(tmp_path):
    camp, path, arrays = _saved(tmp_path)
    scores = arrays["scores"].copy()
    scores[1] = np.inf
    np.savez(tmp_path / "inf.npz", **{**arrays, "scores": scores})
    with pytest.warns(UserWarning, match="1 saved scores are not finite"):
        told = IdentificationCampaign.saved_scores(tmp_path / "inf.npz")
    assert told.mask.sum() == 7
    assert not told.mask[int(arrays["arms"][0]), int(arrays["index"][1])]
    assert np.all(np.isfinite(told.scores))


def test_answers_arrays_of_disagreeing_lengths_and_another_format_are_refused(tmp_path):
    _, path, arrays = _saved(tmp_path)
    lens = arrays["lens"].copy()
    lens[0] += 1
    np.savez(tmp_path / "lens.npz", **{**arrays, "lens": lens})
    for read in (IdentificationCampaign.saved_scores, IdentificationCampaign.load):
        with pytest.raises(ValueError, match=r"lens\.npz: not a saved jaxeval campaign \(the "
                                             r"answers' arrays disagree in length\)"):
            read(tmp_path / "lens.npz")
    meta = json.loads(str(arrays["meta"]))
    np.savez(tmp_path / "fmt.npz", **{**arrays, "meta": np.asarray(json.dumps(
        dict(meta, format="jaxeval.campaign/2")))})
    with pytest.raises(ValueError, match=re.escape(
            "not a saved jaxeval campaign (format 'jaxeval.campaign/2', expected "
            "'jaxeval.campaign/1')")):
        IdentificationCampaign.load(tmp_path / "fmt.npz")


def test_a_file_partly_refused_on_replay_is_not_saved_over(tmp_path):
    """load(strict=False) that stops at a refused answer (a NaN score) keeps the answers
    before it; saving back to that file is refused naming how many it would delete."""
    _, path, arrays = _saved(tmp_path)
    scores = arrays["scores"].copy()
    scores[2] = np.nan  # the second answer
    p = tmp_path / "nan.npz"
    np.savez(p, **{**arrays, "scores": scores})
    with pytest.warns(UserWarning, match="saved answer 1 is refused on replay"):
        kept = IdentificationCampaign.load(p, strict=False)
    assert kept.calls == 2
    with pytest.raises(ValueError, match=r"holds 3 more answers that did not replay"):
        kept.save(p)
    kept.save(tmp_path / "other.npz")


def test_a_replayed_answer_for_another_model_is_refused(tmp_path):
    """With synchronized orders every model draws the same items first: a saved answer
    edited to name another model has the request's items but not its model, and the
    replay refuses it instead of filing the scores under the wrong model."""
    truth = _small_truth()
    camp = _ucbe(truth, batch_size=2, synchronized=True, stop_when_confident=False)
    _answer(camp, truth, 1)
    path = camp.save(tmp_path / "c.npz")
    arrays = _arrays(path)
    arms = arrays["arms"].copy()
    arms[0] = (arms[0] + 1) % 4
    np.savez(tmp_path / "arm.npz", **{**arrays, "arms": arms})
    with pytest.raises(ValueError, match="saved answer 0 of 1 does not replay"):
        IdentificationCampaign.load(tmp_path / "arm.npz")


def test_a_resealed_state_whose_score_sums_disagree_a_little_is_replayed(tmp_path,
                                                                        monkeypatch):
    """A state whose score sum is off by 0.05 (digest recomputed, as a buggy writer
    would) disagrees with the answers: the answers are replayed."""
    camp, path, arrays = _saved(tmp_path, steps=10)
    meta = json.loads(str(arrays["meta"]))
    leaves = sorted((k for k in arrays if k.startswith("state_")),
                    key=lambda k: int(k.split("_")[1]))
    marker = np.full(np.shape(camp._state.sum_s), -12345.0, np.float32)
    pos = next(i for i, x in enumerate(jax.tree.leaves(camp._state._replace(sum_s=marker)))
               if x is marker)
    bad = dict(arrays)
    bad[f"state_{pos}"] = arrays[f"state_{pos}"] + np.float32(0.05)
    content = _campaign._digest(*(bad[k] for k in ("arms", "lens", "index", "scores")),
                                np.asarray(meta["policy_done"] is True),
                                *(bad[k] for k in leaves))
    bad["meta"] = np.asarray(json.dumps(dict(meta, state=dict(meta["state"],
                                                                content=content))))
    np.savez(tmp_path / "sum.npz", **bad)
    back, asked = _load_counting(tmp_path / "sum.npz", monkeypatch)
    assert asked == 10 and back.status() == camp.status()


# ------------------------------------------------------- history / lam0 / rho
def _history(m=20, n=12, seed=0):
    rng = np.random.default_rng(seed)
    p = np.clip(rng.random((m, 1)) * 0.6 + rng.random((1, n)) * 0.4, 0, 1)
    return jaxeval.ScoreMatrix((rng.random((m, n)) < p).astype(np.float32),
                               items=[f"i{j}" for j in range(n)])


def test_a_learned_prior_with_given_factors_uses_their_rank():
    """lam0="learned" with given factors learns on history at the factors' rank."""
    hist = _history()
    lr = jaxeval.fit_factorization(hist, rank=2, rho=1.0, seed=0, num_steps=20)
    camp = IdentificationCampaign(["x", "y"], hist, factors=lr, lam0="learned",
                                  fit_steps=20, budget=10)
    want = jaxeval.learn_lam0(hist, rank=2, seed=0, num_steps=20)
    assert camp.settings["lam0"] == pytest.approx(want)


def test_a_given_rho_overrides_the_fits():
    """rho given explicitly is the online refit's prior strength, not the fit's."""
    hist = _history(n=6)
    lr = jaxeval.fit_factorization(hist, rank=2, rho=1.0, seed=0, num_steps=20)
    camp = IdentificationCampaign(["x", "y"], hist, factors=lr, rho=2.5, budget=10)
    assert camp.settings["rho"] == 2.5


def test_a_campaign_file_edited_since_it_was_saved_is_said_so(tmp_path):
    """The file keeps a checksum of its answers and of the state's inputs: an edited score
    (the last one: it replays without a conflict) loads with a warning that the answers
    changed since the save, and an edited budget that stops the replay says the settings
    changed, not that another JAX or platform wrote the file."""
    camp, path, arrays = _saved(tmp_path)
    meta = json.loads(str(arrays["meta"]))
    assert meta["answers_sha256"] == jaxeval._data.array_digest(
        *(arrays[k] for k in ("arms", "lens", "index", "scores")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        IdentificationCampaign.load(path)  # unedited: restored, no warning
    scores = arrays["scores"].copy()
    scores[-1] = 1.0 - scores[-1]
    np.savez(tmp_path / "last.npz", **{**arrays, "scores": scores})
    with pytest.warns(UserWarning, match=re.escape(
            "last.npz: the file's answers changed since it was saved (checksums differ: "
            "edited by hand, or damaged); its answers are replayed")):
        got = IdentificationCampaign.load(tmp_path / "last.npz")
    assert got.calls == camp.calls
    np.testing.assert_array_equal(got.scores().scores[got.scores().mask],
                                  IdentificationCampaign.saved_scores(tmp_path / "last.npz")
                                  .scores[got.scores().mask])
    meta["settings"]["budget"] = 4  # below the 8 calls answered
    np.savez(tmp_path / "budget.npz", **{**arrays, "meta": np.asarray(json.dumps(meta))})
    with pytest.warns(UserWarning, match="the file's settings, seed, item factors or names "
                                         "changed since it was saved"), \
            pytest.raises(ValueError, match=re.escape(
                "saved answer 2 of 4 does not replay (the file's settings, seed, item "
                "factors or names changed since it was saved)")):
        IdentificationCampaign.load(tmp_path / "budget.npz")


def test_a_replay_failure_of_an_unedited_file_names_the_versions(tmp_path, monkeypatch):
    """Where nothing says the file was edited, a replay that asks something else names
    the jaxeval and JAX versions and the platform: "the same as now" when they are (another
    build, or a damaged file?), else then and now."""
    _, path, arrays = _saved(tmp_path)
    meta = json.loads(str(arrays["meta"]))
    del meta["answers_sha256"]  # a file from before the answers' checksum
    index = arrays["index"].copy()
    index[[0, 1]] = index[[1, 0]]  # the first answer's items in another order
    np.savez(tmp_path / "old.npz", **{**arrays, "index": index,
                                      "meta": np.asarray(json.dumps(meta))})
    now = f"jaxeval {jaxeval.__version__}, jax {jax.__version__} on {jax.default_backend()}"
    with pytest.raises(ValueError, match=re.escape(
            f"saved answer 0 of 4 does not replay (saved with {now}, the same as now: another "
            "build of this jaxeval version, or a damaged file?)")):
        IdentificationCampaign.load(tmp_path / "old.npz")
    monkeypatch.setattr(jax, "__version__", "0.0.1")
    with pytest.raises(ValueError, match=re.escape(
            f"(saved with {now}, now jaxeval {jaxeval.__version__}, jax 0.0.1 on "
            f"{jax.default_backend()}; or a damaged file)")):
        IdentificationCampaign.load(tmp_path / "old.npz")
    monkeypatch.undo()
    meta["state"]["jaxeval"] = "0.0.9"  # another jaxeval wrote it: not "the same"
    np.savez(tmp_path / "other.npz", **{**arrays, "index": index,
                                        "meta": np.asarray(json.dumps(meta))})
    with pytest.raises(ValueError, match=re.escape(
            f"(saved with jaxeval 0.0.9, jax {jax.__version__} on {jax.default_backend()}, "
            f"now {now}; or a damaged file)")):
        IdentificationCampaign.load(tmp_path / "other.npz")


def test_a_count_for_candidates_and_a_path_for_history_are_explained(tmp_path):
    """``IdentificationCampaign(3, ...)`` names the candidates argument (not "'int' object
    is not iterable"); a file path as history points at jaxeval.load for that file."""
    with pytest.raises(TypeError, match=r"^candidates: expected a sequence of model names, "
                                        r"got int 3 \(the candidates are named"):
        IdentificationCampaign(3)
    for path in ("mine.csv", tmp_path / "mine.npz"):
        with pytest.raises(TypeError, match=re.escape(
                f"history: expected a ScoreMatrix, a pandas DataFrame or a 2-D array of "
                f"scores, got {type(path).__name__} (jaxeval.load({str(path)!r}) reads that "
                "file or bundled dataset)")):
            IdentificationCampaign(["a", "b"], path)


def test_a_prediction_policy_without_history_is_refused_before_the_item_names():
    """Without history or items, a prediction policy's first error is the missing
    history (which would give the items too); a policy without predictions asks for the
    item names."""
    with pytest.raises(ValueError, match=r"^history: policy 'pulse' predicts unseen items"):
        IdentificationCampaign(["a", "b"], policy="pulse")
    with pytest.raises(ValueError, match=r"^history: policy 'naive' predicts unseen items"):
        IdentificationCampaign(["a", "b"], items=["q0", "q1"], policy="naive")
    with pytest.raises(ValueError, match=r"^items: give the benchmark's item names or a "
                                         r"history$"):
        IdentificationCampaign(["a", "b"], policy="sysrs")
