"""``jaxeval anchors predict FILE SCORES`` reads many models' scores from lm-evaluation-
harness output (a folder of samples files) and takes the loading options ``anchors fit``
takes (``--sep``, ``--metric``, ``--filter``, ``--runs``, ``--duplicate-names``); with one
model's JSON scores those options are refused by name."""

import dataclasses
import json

import numpy as np
import pytest
from test_anchor_api_mutants import _by_hand
from test_data_mutants import _samples

from jaxeval._cli import main


def _numbered():
    """The hand-made predictor with lm-eval item names (doc ids "0".."9"): anchors 2, 5, 7
    weighted 0.6, 0.6, 0.2."""
    return dataclasses.replace(_by_hand(), items=np.array([str(j) for j in range(10)]))


def _lm_eval_run(folder, model, ones, metric="acc"):
    """One model's samples file: doc ids 0..9, score 1 on ``ones``."""
    rows = [{"doc_id": j, metric: float(j in ones)} for j in range(10)]
    return _samples(folder / model, "task", rows)


def _lines(capsys):
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_predict_reads_lm_eval_output_of_many_models(tmp_path, capsys):
    p = _numbered().save(tmp_path / "p.npz")
    runs = tmp_path / "runs"
    _lm_eval_run(runs, "alpha-7b", {2, 9})  # anchor 2 (0.6) and a non-anchor
    _lm_eval_run(runs, "beta-70b", {5, 7})  # 0.6 + 0.2
    assert main(["anchors", "predict", str(p), str(runs)]) == 0
    got = {d["model"]: d for d in _lines(capsys)}
    assert sorted(got) == ["alpha-7b", "beta-70b"]
    assert got["alpha-7b"]["estimate"] == pytest.approx(0.6, abs=1e-6)
    assert got["beta-70b"]["estimate"] == pytest.approx(0.8, abs=1e-6)
    assert got["beta-70b"]["lower"] == pytest.approx(0.65, abs=1e-6)
    # one samples file is one model (its folder's name)
    one = _lm_eval_run(tmp_path / "single", "gamma", {2, 5, 7})
    assert main(["anchors", "predict", str(p), str(one)]) == 0
    (d,) = _lines(capsys)
    assert d["estimate"] == pytest.approx(1.0, abs=1e-6)


def test_predict_passes_the_lm_eval_options(tmp_path, capsys):
    """A samples file logging two metrics: --metric picks one, as for `anchors fit`."""
    p = _numbered().save(tmp_path / "p.npz")
    runs = tmp_path / "runs"
    rows = [{"doc_id": j, "acc": float(j == 2), "exact_match": float(j in (5, 7))}
            for j in range(10)]
    _samples(runs / "m", "task", rows)
    assert main(["anchors", "predict", str(p), str(runs), "--metric", "exact_match"]) == 0
    (d,) = _lines(capsys)
    assert d["estimate"] == pytest.approx(0.8, abs=1e-6)
    assert main(["anchors", "predict", str(p), str(runs), "--metric", "acc"]) == 0
    assert _lines(capsys)[0]["estimate"] == pytest.approx(0.6, abs=1e-6)
    assert main(["anchors", "predict", str(p), str(runs), "--metric", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no field 'nope' (metric fields: ['acc', 'exact_match'])" in err


def test_predict_reads_a_table_with_another_separator(tmp_path, capsys):
    p = _by_hand().save(tmp_path / "p.npz")
    t = tmp_path / "new.csv"
    t.write_text("model;" + ";".join(f"q{j}" for j in range(10)) + "\n"
                 + "a;" + ";".join("1" if j in (5, 7) else "0" for j in range(10)) + "\n")
    assert main(["anchors", "predict", str(p), str(t), "--sep", ";"]) == 0
    (d,) = _lines(capsys)
    assert d["model"] == "a" and d["estimate"] == pytest.approx(0.8, abs=1e-6)
    # without it the one-column table has no anchor columns: refused, not misread
    assert main(["anchors", "predict", str(p), str(t)]) == 2
    assert "scores" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [["--sep", ";"], ["--metric", "acc"], ["--filter", "x"],
                                  ["--runs", "latest"], ["--duplicate-names", "rename"]])
def test_loading_options_are_refused_for_one_models_json(tmp_path, capsys, flag):
    p = _by_hand().save(tmp_path / "p.npz")
    js = tmp_path / "one.json"
    js.write_text(json.dumps({"q2": 1, "q5": 0, "q7": 0}))
    assert main(["anchors", "predict", str(p), str(js)]) == 0  # (fine without the flag)
    capsys.readouterr()
    assert main(["anchors", "predict", str(p), str(js), *flag]) == 2
    err = capsys.readouterr().err
    assert f"{flag[0]}: only for a score table or lm-evaluation-harness output" in err
    assert str(js) in err
