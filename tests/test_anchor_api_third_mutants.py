"""The public anchor API pinned where a third mutation review found it unpinned: save /
load round trips (an anchor order that is not sorted, an infinite radius) and the
refusal of corrupt files (an empty or 2-D anchor index, a NaN radius, an infinite
validation MAE, weights that overflow, a blend map cut short, a folder given as the
file), the unbiased estimate's argument checks (alpha 0, unknown names, the first NaN, a
missing score past the end), named extra scores paired with their items, and named
anchor scores that are neither one score per item nor a list per item."""

import dataclasses
import json

import numpy as np
import pytest
from test_anchor_api_mutants import _by_hand
from test_anchors import FAST, _planted, edited_npz

import jaxeval
from jaxeval._factorization import ItemFactors
from jaxeval.anchors import AnchorPredictor, fit_anchors


def _unbiased_by_hand():
    """:func:`_by_hand` with a (flat) item model over its ten items, so that the
    unbiased estimate's arguments are checked without a fit."""
    return dataclasses.replace(_by_hand(), item_model={
        "F": ItemFactors(np.zeros((10, 1), np.float32), np.zeros(10, np.float32),
                         np.zeros(1, np.float32)), "rho": np.float32(1.0)})


def test_save_load_keeps_an_anchor_order_that_is_not_sorted(tmp_path):
    """anchor_index is kept in its own order (the order predict reads a plain array
    in), not sorted: the loaded predictor reads the same array as the same anchors."""
    pred = dataclasses.replace(_by_hand(), anchor_index=np.array([7, 2, 5], np.int32))
    back = AnchorPredictor.load(pred.save(tmp_path / "p"))
    assert back.anchor_items.tolist() == ["q7", "q2", "q5"]
    x = np.array([0.0, 0.0, 1.0])  # 1 on q5, weighted 0.2
    np.testing.assert_allclose(back.predict(x), pred.predict(x), atol=1e-7)
    np.testing.assert_allclose(back.predict(x)[0], 0.2, atol=1e-6)


def test_an_infinite_radius_saves_and_loads_as_the_interval_0_1(tmp_path):
    """A predictor fitted on too few validation models has radius inf (every interval
    [0, 1]); saved, it loads as it was."""
    back = AnchorPredictor.load(_by_hand(radius=np.inf).save(tmp_path / "p"))
    assert back.radius == np.inf
    np.testing.assert_allclose(back.predict(np.array([1, 0, 0])), (0.6, 0.0, 1.0), atol=1e-6)


@pytest.mark.parametrize("change, msg", [
    ({"anchor_index": np.zeros(0, np.int32)}, r"anchor_index: expected distinct indices"),
    ({"anchor_index": np.array([[2, 5, 7]], np.int32)}, r"anchor_index: expected distinct"),
    ({"radius": float("nan")}, r"radius: expected >= 0, got nan"),
    ({"validation_mae_pp": float("inf")}, r"validation_mae_pp: expected a finite value"),
    # finite weights whose prediction overflows float32 (inf: no estimate)
    ({"leaf_0": np.full(3, 3e38, np.float32)},
     r"the map predicts inf \(not a finite number\) from its parameters"),
    # weights of another k: JAX's shape error was the message
    ({"leaf_0": np.full(4, 0.25, np.float32)},
     r"the map's parameters do not fit 3 anchors \(TypeError: "),
])
def test_load_refuses_a_corrupt_field_naming_it(tmp_path, change, msg):
    """An empty or 2-D anchor index, a NaN radius (inf is allowed), an infinite
    validation MAE (NaN is allowed), weights whose prediction overflows and weights of
    another k are refused at load, the message naming the problem."""
    p = _by_hand().save(tmp_path / "p")
    bad = edited_npz(p, tmp_path / "bad.npz", **change)
    with pytest.raises(ValueError, match=r"bad\.npz: not a readable saved AnchorPredictor "
                                         r"\(ValueError: " + msg):
        AnchorPredictor.load(bad)


def test_load_refuses_a_blend_map_whose_factors_were_cut_short(tmp_path):
    """A blend map holds its own item factors, checked at load as an IRT map's are:
    rows cut from them are refused naming params['F']."""
    s, _, _ = _planted(m=60, n=16, informative=(1, 5, 9))
    sm = jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(16)])
    pred = fit_anchors(sm, 3, method="kmeans_blend", seed=0, settings=FAST)
    assert pred.kind == "blend"
    path = pred.save(tmp_path / "p")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    keys = json.loads(str(arrays["meta"]))["param_keys"]
    for name in ("['F'].V", "['F'].c"):
        i = keys.index(name)
        arrays[f"leaf_{i}"] = arrays[f"leaf_{i}"][:8]
    np.savez(tmp_path / "cut.npz", **arrays)
    with pytest.raises(ValueError, match=r"params\['F'\]: expected V \[16, r\]"):
        AnchorPredictor.load(tmp_path / "cut.npz")


def test_load_of_a_folder_is_file_not_found(tmp_path):
    """A path that is a folder is no saved predictor: FileNotFoundError naming it."""
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match="d: no such file"):
        AnchorPredictor.load(tmp_path / "d")


def test_predict_unbiased_refuses_alpha_zero_rather_than_using_the_default():
    """alpha=0 is a level outside (0, 1), refused naming alpha: not read as "no alpha
    given" (the predictor's own level)."""
    pred = _unbiased_by_hand()
    with pytest.raises(ValueError, match=r"alpha: expected a level in \(0, 1\)"):
        pred.predict_unbiased(np.ones(3), ["q0", "q1"], [1.0, 0.0], alpha=0.0)
    pred.predict_unbiased(np.ones(3), ["q0", "q1"], [1.0, 0.0])  # the default works


def test_predict_unbiased_names_unknown_items_and_the_first_bad_score():
    """An extra item that is no item of the predictor is refused naming it (ValueError);
    NaN scores name the first of them; a None past the end of too many scores is a
    missing score (refused as such, not an IndexError)."""
    pred = _unbiased_by_hand()
    with pytest.raises(ValueError, match=r"^extra_items: unknown item names \['zz'\]"):
        pred.predict_unbiased(np.ones(3), ["q0", "zz"], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"^extra_scores: holds NaN/inf \(first at 0, "
                                         r"item 'q0'\)"):
        pred.predict_unbiased(np.ones(3), ["q0", "q1", "q3"], [np.nan, 1.0, np.nan])
    with pytest.raises(ValueError, match=r"^extra_scores: 1 missing score\(s\) \(None or NA\), "
                                         r"the first at \(2,\)"):
        pred.predict_unbiased(np.ones(3), ["q0", "q1"], [1.0, 0.0, None])


@pytest.mark.parametrize("scores", [
    {"q2": 1.0, "q5": [1.0, 0.0], "q7": [0.0, 1.0]},  # one scalar among lists
    {"q2": [[1.0], [0.0]], "q5": [[1.0], [0.0]], "q7": [[0.0], [1.0]]},  # nested lists
])
def test_a_mapping_of_neither_scores_nor_lists_of_scores_is_refused(scores):
    """Named anchor scores are one score per item (one model) or equally long flat
    lists per item (one score per model); anything else is refused saying so."""
    with pytest.raises(ValueError, match=r"^anchor_scores: a mapping holds either one score "
                                         r"per item"):
        _by_hand().predict(scores)


def test_named_extra_scores_are_paired_with_their_items_in_draw_order():
    """extra_scores given as a mapping in another order are read in the order of
    extra_items, each score with its own item: the interval (which depends on the draw
    order, here at 60 items) is the positional one, not that of the scores in the
    mapping's order."""
    s, _, _ = _planted(m=60, n=60)
    sm = jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(60)])
    pred = fit_anchors(sm, 3, method="random_mean", seed=0, settings=FAST)
    x = sm.take(items=pred.anchor_items).scores[1]
    extra = pred.extra_items(12, seed=1)
    ys = sm.take(items=extra).scores[1]
    want = pred.predict_unbiased(x, extra, ys, alpha=0.3)
    # (the check can tell: the scores in the mapping's order give another interval)
    assert pred.predict_unbiased(x, extra, ys[::-1], alpha=0.3) != want
    named = dict(zip(extra[::-1].tolist(), ys[::-1].tolist()))
    assert pred.predict_unbiased(x, extra, named, alpha=0.3) == want


def test_auto_cross_validates_only_below_auto_cv_below_validation_models():
    """"fewer than ``auto_cv_below``": at exactly that many validation models ``auto``
    chooses on them, not by cross-validation."""
    s, _, _ = _planted(m=60, n=16, informative=(1, 5, 9))
    sm = jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(16)])
    train, val = sm.take(models=np.arange(40)), sm.take(models=np.arange(40, 60))
    pred = fit_anchors(train, 3, method="auto", seed=0, validation=val,
                       settings=dataclasses.replace(FAST, auto_cv_below=20))
    assert pred.info["auto_choice"] == "validation"
