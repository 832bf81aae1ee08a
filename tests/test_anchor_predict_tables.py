"""Predictions for a table of models: ``AnchorPredictor.predict`` of a ScoreMatrix (its
anchor columns by name; a missing anchor cell refused, never read as its stored 0) and
``jaxeval anchors predict FILE TABLE`` (a JSON line per model)."""

import json

import numpy as np
import pytest
from test_anchor_api_mutants import _by_hand
from test_anchor_api_third_mutants import _unbiased_by_hand

import jaxeval
from jaxeval._cli import main


def _table(scores, models=("m0", "m1")):
    """Scores on items q0..q9 (NaN: not scored), the anchors q2, q5, q7 among them."""
    return jaxeval.ScoreMatrix(np.asarray(scores, np.float64), models=list(models),
                               items=[f"q{j}" for j in range(10)])


def test_a_score_matrix_is_read_by_its_anchor_columns():
    pred = _by_hand()
    rows = np.zeros((2, 10))
    rows[0, [2, 9]] = 1.0  # q2 (weight 0.6) and a non-anchor
    rows[1, [5, 7]] = 1.0  # q5 (0.6) and q7 (0.2)
    est, lo, hi = pred.predict(_table(rows))
    np.testing.assert_allclose(est, [0.6, 0.8], atol=1e-6)
    np.testing.assert_allclose(pred.predict(rows[:, [2, 5, 7]])[0], est, atol=0)
    # the columns in another order are found by name
    perm = np.arange(10)[::-1]
    flipped = jaxeval.ScoreMatrix(rows[:, perm], models=["m0", "m1"],
                                  items=[f"q{j}" for j in perm])
    np.testing.assert_allclose(pred.predict(flipped)[0], est, atol=0)


def test_a_missing_anchor_cell_or_column_is_refused_not_read_as_zero():
    """A ScoreMatrix holds 0 under its mask for a cell not scored: taken as an array (the
    old hint, ``sm.take(items=...).scores``) it predicted as if the model had failed the
    item."""
    pred = _by_hand()
    rows = np.ones((2, 10))
    rows[1, 5] = np.nan
    with pytest.raises(ValueError, match=r"holds NaN/inf \(first at \(1, 1\), item 'q5'\)"):
        pred.predict(_table(rows))
    few = jaxeval.ScoreMatrix(np.ones((1, 2)), models=["m"], items=["q2", "q9"])
    with pytest.raises(ValueError, match=r"no column for 2 of the 3 anchor items, e.g. "
                       r"\['q5', 'q7'\]"):
        pred.predict(few)


def test_jaxeval_anchors_predict_reads_a_table_of_models(tmp_path, capsys):
    p = _by_hand().save(tmp_path / "p.npz")
    rows = np.zeros((2, 10))
    rows[0, 2] = rows[1, 5] = rows[1, 7] = 1.0
    table = _table(rows, ("alpha-7b", "beta-70b")).to_npz(tmp_path / "new.npz")
    assert main(["anchors", "predict", str(p), str(table)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [d["model"] for d in lines] == ["alpha-7b", "beta-70b"]
    np.testing.assert_allclose([d["estimate"] for d in lines], [0.6, 0.8], atol=1e-6)
    np.testing.assert_allclose([d["lower"] for d in lines], [0.45, 0.65], atol=1e-6)
    assert all(d["level"] == pytest.approx(0.9) for d in lines)
    # a CSV table too; an unscored anchor is refused naming the item and the model
    csv = tmp_path / "new.csv"
    csv.write_text("model," + ",".join(f"q{j}" for j in range(10)) + "\n"
                   + "a," + ",".join(["1"] * 10) + "\n"
                   + "b,1,1,1,1,1,,1,1,1,1\n")
    assert main(["anchors", "predict", str(p), str(csv)]) == 2
    out, err = capsys.readouterr()
    assert [json.loads(x)["model"] for x in out.splitlines()] == ["a"]  # the others kept
    assert "model 'b' has no score for 1 of the 3 anchor items, e.g. ['q5']" in err
    # the unbiased estimate stays one model at a time
    p = _unbiased_by_hand().save(tmp_path / "u.npz")
    assert main(["anchors", "predict", str(p), str(table), "--extra", "2"]) == 2
    assert "--extra: the unbiased estimate is one model at a time" in capsys.readouterr().err
