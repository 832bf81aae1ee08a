"""IdentificationCampaign: the status table and plot, the bookkeeping of requests and
answers, saved files and the constructor's argument checks, pinned to exact values."""

import dataclasses
import re

import numpy as np
import pytest
from test_campaign import _answer, _small_truth

import jaxeval
from jaxeval._campaign import CampaignStatus, IdentificationCampaign

# These tests edit saved files on purpose; the warning that a file changed since it
# was saved is asserted where it is the subject (test_campaign_deep_mutants.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*changed since it was saved:UserWarning")


def _status(**changes):
    """A hand-made status of three models, the second one the leader."""
    base = dict(models=np.array(["a", "long-model-name", "c"]),
                estimate=np.array([0.5, 0.75, 0.25]), lower=np.array([0.4, 0.6, 0.1]),
                upper=np.array([0.6, 0.9, 0.35]), bounds={}, pulls=np.array([10, 20, 5]),
                calls=35, budget=100, recommended="long-model-name", confident=False,
                done=False, reason="")
    return CampaignStatus(**{**base, **changes})


def _ucbe(truth, **kw):
    kw = {"policy": "ucbe", "batch_size": 3, "budget": 150, "seed": 0, **kw}
    return IdentificationCampaign(truth.models, items=truth.items, **kw)


def test_the_status_table_lists_models_best_first_with_their_intervals():
    """The table: names padded to the longest, best estimate first, the interval as
    [lower, upper], the items scored, a star on the recommended model, and a last line
    with calls of budget, the state and the confidence; str() is the table."""
    st = _status()
    assert st.table().splitlines() == [
        "model            estimate  interval            scored",
        "long-model-name    0.7500  [0.6000, 0.9000]      20 *",
        "a                  0.5000  [0.4000, 0.6000]      10",
        "c                  0.2500  [0.1000, 0.3500]       5",
        "35 of 100 calls; running; not yet confident that long-model-name is best",
    ]
    assert str(st) == st.table()
    done = _status(done=True, reason="budget", calls=100)
    assert done.table().splitlines()[-1] == (
        "100 of 100 calls; done (budget); not yet confident that long-model-name is best")
    sure = _status(done=True, reason="confident", confident=True)
    assert sure.table().splitlines()[-1] == (
        "35 of 100 calls; done (confident); confident that long-model-name is best")


def test_the_status_plot_puts_the_best_on_top_and_names_the_png(tmp_path, monkeypatch):
    """The forest plot: models from worst (bottom) to best (top), each interval drawn
    from its lower to its upper bound, the recommended model in its own colour; a path
    without a suffix gets ".png" and the returned path is the file written."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    figs, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: figs.append(fig))
    st = _status()
    out = st.plot(tmp_path / "forest")
    assert out == tmp_path / "forest.png" and out.is_file()
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["c", "a", "long-model-name"]
    spans = [ln for ln in ax.get_lines() if len(ln.get_xdata()) == 2]
    assert [list(ln.get_xdata()) for ln in spans] == [[0.1, 0.35], [0.4, 0.6], [0.6, 0.9]]
    assert [ln.get_color() for ln in spans] == ["C0", "C0", "C3"]
    assert ax.get_title(loc="left") == "35 of 100 calls, running; leader not yet separated"
    svg = st.plot(tmp_path / "forest.svg")
    assert svg == tmp_path / "forest.svg" and svg.is_file()
    for fig in figs:
        close(fig)


def test_status_counts_calls_pulls_and_budget_and_owns_its_names():
    """status(): calls and per-model pulls are the answered cells, budget the setting;
    its model names are a copy (editing them leaves the campaign's names alone)."""
    truth = _small_truth()
    camp = _ucbe(truth)
    st = camp.status()
    assert (st.calls, st.budget, st.pulls.tolist(), st.done, st.reason) == (
        0, 150, [0, 0, 0, 0], False, "")
    _answer(camp, truth, 5)
    st = camp.status()
    assert (st.calls, st.budget) == (15, 150)
    np.testing.assert_array_equal(st.pulls, camp.scores().mask.sum(1))
    st.models[0] = "edited"
    assert camp.candidates[0] == "m0" and camp.status().models[0] == "m0"


def test_a_campaign_that_scores_every_cell_ends_exhausted():
    """With the budget K n and no confident stop, the campaign ends when every model
    is fully evaluated, with reason "exhausted"; a later answer is refused naming it."""
    truth = _small_truth(K=2, n=4)
    camp = _ucbe(truth, batch_size=2, budget=None, stop_when_confident=False)
    first = camp.ask()
    _answer(camp, truth, 100)
    st = camp.status()
    assert (st.done, st.reason, st.calls) == (True, "exhausted", 8)
    assert st.pulls.tolist() == [4, 4] and camp.ask() is None
    with pytest.raises(ValueError, match=r"the campaign is done \(exhausted\)"):
        camp.tell(first, [1.0, 1.0])


def test_refused_scores_name_how_many_and_the_first_one():
    """With several bad scores in one answer, the error counts them all and names the
    first one's position and item; nothing is changed."""
    camp = _ucbe(_small_truth(), batch_size=4)
    req = camp.ask()
    it = [str(x) for x in req.items]
    with pytest.raises(ValueError, match=re.escape(
            f"scores: 2 NaN or infinite value(s), the first at position 1 (item {it[1]!r})")):
        camp.tell(req, [0.5, np.nan, 0.5, np.inf])
    with pytest.raises(ValueError, match=re.escape(
            f"scores: must lie in [0, 1]; 2 do not, the first at position 1 (item {it[1]!r}) "
            "is 2.0")):
        camp.tell(req, [0.5, 2.0, -1.0, 0.5])
    with pytest.raises(ValueError, match=re.escape(
            f"scores: no score (None or NA) at 2 position(s), the first 1 (item {it[1]!r})")):
        camp.tell(req, [0.5, None, None, 1.0])
    with pytest.raises(ValueError, match=re.escape(
            f"scores: 2 masked (missing) value(s), the first at position 1 (item {it[1]!r})")):
        camp.tell(req, np.ma.masked_array([0.5, 1.0, 0.0, 1.0], mask=[0, 1, 1, 0]))
    assert camp.calls == 0 and camp.ask() == req


def test_a_mapping_with_an_item_not_requested_is_refused():
    """A mapping of scores must cover exactly the request's items: one more item is
    refused, naming it."""
    camp = _ucbe(_small_truth(), batch_size=2)
    req = camp.ask()
    extra = next(str(i) for i in camp.items if i not in req.items)
    scores = {**{str(k): 1.0 for k in req.items}, extra: 0.0}
    with pytest.raises(ValueError, match=re.escape(
            f"missing [], not requested [{extra!r}]")):
        camp.tell(req, scores)
    assert camp.calls == 0


def test_a_request_with_a_negative_step_is_not_the_pending_one():
    """A request whose step is negative is never taken for an answered one (a
    negative step must not index the answers from the end)."""
    truth = _small_truth()
    camp = _ucbe(truth)
    req = camp.ask()
    camp.tell(req, [1.0, 0.0, 1.0])
    camp.ask()
    with pytest.raises(ValueError, match="request: not the pending request"):
        camp.tell(dataclasses.replace(req, step=-1), [1.0, 0.0, 1.0])
    assert camp.calls == 3


def test_repr_shows_the_size_policy_calls_and_batch():
    truth = _small_truth()
    camp = _ucbe(truth)
    _answer(camp, truth, 5)
    assert repr(camp) == ("IdentificationCampaign(K=4, n=60, policy='ucbe', calls=15/150, "
                          "batch_size=3)")


def _saved(tmp_path, steps=4, name="c.npz"):
    """A small campaign told ``steps`` answers of two items, saved; its arrays."""
    truth = _small_truth()
    camp = _ucbe(truth, batch_size=2, stop_when_confident=False)
    _answer(camp, truth, steps)
    path = camp.save(tmp_path / name)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return camp, path, arrays


def test_saved_scores_refuse_the_first_index_past_the_end(tmp_path):
    """saved_scores: an answer naming model K or item n (one past the last) marks a
    damaged file; the matrix it reads names the file as its source."""
    camp, path, arrays = _saved(tmp_path)
    told = IdentificationCampaign.saved_scores(path)
    assert told.source == str(path)
    np.testing.assert_array_equal(told.mask, camp.scores().mask)
    for field, value in (("arms", 4), ("index", 60)):
        edited = arrays[field].copy()
        edited[0] = value
        np.savez(tmp_path / "d.npz", **{**arrays, field: edited})
        with pytest.raises(ValueError, match="outside its 4 candidates and 60 items"):
            IdentificationCampaign.saved_scores(tmp_path / "d.npz")


def test_a_partly_replayed_file_names_the_answers_it_holds_more(tmp_path, monkeypatch):
    """load(strict=False) of a file whose third answer does not replay keeps two; saving
    back there (a relative path too) is refused naming the 2 answers it would delete."""
    _, _, arrays = _saved(tmp_path)
    arrays = {k: v for k, v in arrays.items() if not k.startswith("state_")}
    arrays["index"] = arrays["index"].copy()
    arrays["index"][4:6] = arrays["index"][4:6][::-1]  # the third answer's items swapped
    np.savez(tmp_path / "t.npz", **arrays)
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="continuing after 2 answers"):
        cut = IdentificationCampaign.load("t.npz", strict=False)
    assert cut.calls == 4
    with pytest.raises(ValueError, match=r"path: t\.npz holds 2 more answers that did not "
                                         r"replay \(loaded with strict=False\)"):
        cut.save("t.npz")


def test_a_loaded_campaign_saves_back_over_its_own_file(tmp_path):
    """Saving a loaded campaign back unchanged, or a campaign with no answers over its
    own empty file, replaces the file (its answers are the campaign's own)."""
    camp, path, _ = _saved(tmp_path)
    back = IdentificationCampaign.load(path)
    assert back.save(path) == path
    assert IdentificationCampaign.saved_scores(path).mask.sum() == 8
    empty = _ucbe(_small_truth(), batch_size=2)
    p = empty.save(tmp_path / "empty.npz")
    assert empty.save(p) == p and IdentificationCampaign.load(p).calls == 0


def test_more_bad_settings_are_named():
    """Each refused argument of the constructor is named in its error."""
    truth = _small_truth()
    names, items = truth.models.tolist(), truth.items.tolist()
    kw = dict(items=items, policy="ucbe")
    with pytest.raises(ValueError, match=r"^items: expected at least 2 items, got 1$"):
        IdentificationCampaign(names, items=["q0"], policy="ucbe")
    with pytest.raises(ValueError, match=re.escape("items: repeated item names, e.g. ['q1']")):
        IdentificationCampaign(names, items=["q0", "q1", "q1"], policy="ucbe")
    with pytest.raises(ValueError, match=r"^a must lie in \[0, 1e\+06\], got -1"):
        IdentificationCampaign(names, a=-1.0, **kw)
    for arg in ("stop_when_confident", "refit", "progress"):
        with pytest.raises(TypeError, match=f"^{arg}: expected True or False, got 'no'$"):
            IdentificationCampaign(names, **{arg: "no"}, **kw)
    with pytest.raises(ValueError, match=r"^fit_steps: expected an integer >= 1, got 0$"):
        IdentificationCampaign(names, fit_steps=0, **kw)
    with pytest.raises(ValueError, match="^cs_kinds: expected at least one interval kind"):
        IdentificationCampaign(names, cs_kinds=(), **kw)


def test_history_rows_with_some_scores_are_fitted_and_an_empty_history_is_named(capsys):
    """The factorization fits every history row holding at least one score (a partly
    scored model too); a history without any score is refused naming history."""
    rng = np.random.default_rng(0)
    S = rng.random((8, 8)).round()
    S[1, :5] = np.nan  # partly scored: kept
    S[2] = np.nan  # never scored: left out
    hist = jaxeval.ScoreMatrix(S, items=[f"i{j}" for j in range(8)])
    IdentificationCampaign(["x", "y"], hist, rank=1, fit_steps=5, progress=True)
    assert ("fitting a rank-1 factorization on the 7 history models x 8 items (5 steps)"
            in capsys.readouterr().err)
    with pytest.raises(ValueError, match="^history: no model in it has any observed score"):
        IdentificationCampaign(["x", "y"], jaxeval.ScoreMatrix(np.full((2, 8), np.nan),
                                                               items=hist.items), rank=1)


def test_load_reads_the_path_named_before_the_one_with_npz_added(tmp_path):
    """A campaign saved under a name without ".npz" (the file existed) is loaded from
    that name even when a file with ".npz" added exists beside it."""
    truth = _small_truth()
    one, two = _ucbe(truth, batch_size=2), _ucbe(truth, batch_size=2)
    _answer(one, truth, 1)
    _answer(two, truth, 3)
    (tmp_path / "c").write_bytes(b"")
    assert two.save(tmp_path / "c", overwrite=True) == tmp_path / "c"
    one.save(tmp_path / "c.npz")
    assert IdentificationCampaign.load(tmp_path / "c").calls == 6
    assert IdentificationCampaign.load(tmp_path / "c.npz").calls == 2
