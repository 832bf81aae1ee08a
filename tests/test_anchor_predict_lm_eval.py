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


# ------------------------------------------------------------ a lab's walk (lm-eval)
def _lab_folder(root, n_models, seed, tasks=("gsm8k",), items=12):
    """Folders of lm-eval samples files: models m0.., doc ids 0..items-1, fields ``acc``
    and ``acc_norm`` (different 0/1 draws) per task."""
    rng = np.random.default_rng(seed)
    for i in range(n_models):
        for t in tasks:
            rows = [{"doc_id": j, "acc": float(rng.random() < 0.5),
                     "acc_norm": float(rng.random() < 0.5)} for j in range(items)]
            _samples(root / f"m{seed}_{i}", t, rows)
    return root


def _lab_predictor(tmp_path):
    import jaxeval

    old = jaxeval.load(_lab_folder(tmp_path / "old", 40, 0), metric="acc")
    with pytest.warns(UserWarning):  # (few validation models: a wide interval, said)
        pred = jaxeval.fit_anchors(old, 3, method="random_mean", seed=0, progress=False)
    return pred


def test_a_fit_on_lm_eval_output_records_how_it_was_read(tmp_path):
    import warnings

    import jaxeval

    pred = _lab_predictor(tmp_path)
    assert pred.info["lm_eval"] == {"tasks": ["gsm8k"], "metric": {"gsm8k": "acc"},
                                    "filter": {"gsm8k": "none"}}  # (the one logged)
    p = pred.save(tmp_path / "p.npz")
    again = jaxeval.AnchorPredictor.load(p)
    assert again.info["lm_eval"] == pred.info["lm_eval"]
    new = _lab_folder(tmp_path / "new", 3, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read as fitted: no warning
        est = again.predict(jaxeval.load(new, metric="acc"))[0]
    with pytest.warns(UserWarning, match=r"anchor_scores: lm-evaluation-harness scores read "
                      r"with metric \{'gsm8k': 'acc_norm'\} where the fit read \{'gsm8k': "
                      r"'acc'\}"):
        other = again.predict(jaxeval.load(new, metric="acc_norm"))[0]
    assert est.shape == other.shape == (3,)


def test_cli_predict_warns_of_another_metric_and_picks_a_task(tmp_path, capsys):
    pred = _lab_predictor(tmp_path)
    p = str(pred.save(tmp_path / "p.npz"))
    mixed = _lab_folder(tmp_path / "new", 2, 1, tasks=("gsm8k", "arc_easy"))
    # two tasks: items are TASK/doc_id; the refusal shows them and names --task
    assert main(["anchors", "predict", p, str(mixed), "--metric", "acc"]) == 2
    err = capsys.readouterr().err
    assert "named like ['arc_easy/0', 'arc_easy/1'" in err and "--task picks one" in err
    assert main(["anchors", "predict", p, str(mixed), "--metric", "acc",
                 "--task", "gsm8k"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and "warning" not in err
    with pytest.warns(UserWarning, match=rf"^scores \({mixed}\): lm-evaluation-harness scores "
                      r"read with metric \{'gsm8k': 'acc_norm'\} where the fit "
                      r"read \{'gsm8k': 'acc'\}") as got:
        assert main(["anchors", "predict", p, str(mixed), "--metric", "acc_norm",
                     "--task", "gsm8k"]) == 0
    assert len(got) == 1  # (said once, in the command's words)
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_cli_task_option_is_for_lm_eval_output_only(tmp_path, capsys):
    p = str(_by_hand().save(tmp_path / "p.npz"))
    t = tmp_path / "new.csv"
    t.write_text("model," + ",".join(f"q{j}" for j in range(10)) + "\n"
                 + "a," + ",".join("1" for _ in range(10)) + "\n")
    assert main(["anchors", "predict", p, str(t), "--task", "gsm8k"]) == 2
    assert "--task / --runs: only for lm-evaluation-harness output" in capsys.readouterr().err
    runs = _lab_folder(tmp_path / "runs", 1, 2)
    assert main(["anchors", "predict", p, str(runs), "--task", "x", "--task", "x"]) == 2
    assert "--task: a task given twice" in capsys.readouterr().err
    assert main(["anchors", "predict", p, str(runs), "--task", "nope", "--metric", "acc"]) == 2
    assert "no samples file for task(s) ['nope']" in capsys.readouterr().err


def test_cli_fit_says_what_the_predictor_estimates(tmp_path, capsys):
    import jaxeval

    rng = np.random.default_rng(3)
    scores = (rng.random((40, 12)) < 0.5).astype(np.float32)
    items = [f"q{j}" for j in range(12)]
    models = [f"m{i}" for i in range(40)]
    plain = jaxeval.ScoreMatrix(scores, models=models, items=items).to_npz(tmp_path / "a.npz")
    full = jaxeval.ScoreMatrix(scores, models=models, items=items,
                               target=rng.random(40)).to_npz(tmp_path / "b.npz")
    for data, what in ((plain, "each model's mean score over the 12 items"),
                       (full, "each model's full-benchmark score (the data's target)")):
        out = tmp_path / f"p_{data.stem}.npz"
        with pytest.warns(UserWarning):  # (few validation models: said)
            assert main(["anchors", "fit", str(data), "--k", "3", "--method", "random_mean",
                         "--out", str(out), "--quiet"]) == 0
        err = capsys.readouterr().err
        assert f"it estimates {what}, as a fraction in [0, 1]" in err


def test_review_follow_ups_of_the_lab_walk(tmp_path, capsys):
    """A filter named at predict time for output logging that one filter is no change
    (no warning); one model's JSON scores in a .jsonl file are still one model's (a
    harness samples file is named samples_*)."""
    import warnings

    import jaxeval

    pred = _lab_predictor(tmp_path)  # (fitted without filter=)
    new = _lab_folder(tmp_path / "new", 2, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pred.predict(jaxeval.load(new, metric="acc", filter="none"))
    p = _by_hand().save(tmp_path / "p.npz")
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"q2": 1, "q5": 0, "q7": 0}) + "\n")
    assert main(["anchors", "predict", str(p), str(one)]) == 0
    assert json.loads(capsys.readouterr().out)["estimate"] == pytest.approx(0.6, abs=1e-6)


def test_second_review_follow_ups_of_the_lab_walk(tmp_path, capsys):
    """The filter compared is the one the lines were read under, named or not (output
    logging only another filter, read without the option, is warned of); harness files
    of other names are still harness output where they cannot be one model's JSON."""
    import gzip
    import shutil

    import jaxeval

    rng = np.random.default_rng(5)

    def two_filters(root, i, keep=("strict-match", "flexible-extract")):
        rows = [{"doc_id": j, "filter": f, "acc": float(rng.random() < 0.5)}
                for j in range(12) for f in keep]
        return _samples(root / f"m{i}", "gsm8k", rows)

    for i in range(40):
        two_filters(tmp_path / "old", i)
    old = jaxeval.load(tmp_path / "old", filter="strict-match")
    with pytest.warns(UserWarning):
        pred = jaxeval.fit_anchors(old, 3, method="random_mean", seed=0, progress=False)
    assert pred.info["lm_eval"]["filter"] == {"gsm8k": "strict-match"}
    f = two_filters(tmp_path / "new", 0, keep=("flexible-extract",))
    with pytest.warns(UserWarning, match=r"filter \{'gsm8k': 'flexible-extract'\} where "
                      r"the fit read \{'gsm8k': 'strict-match'\}"):
        pred.predict(jaxeval.load(f.parent))
    # harness output named otherwise: a .jsonl.gz, a .jsonl of several lines
    p = str(pred.save(tmp_path / "p.npz"))
    same = two_filters(tmp_path / "n2", 1, keep=("strict-match",))
    gz = tmp_path / "run.jsonl.gz"
    gz.write_bytes(gzip.compress(same.read_bytes()))
    plain = tmp_path / "run.jsonl"
    shutil.copy(same, plain)
    for path in (gz, plain):
        # (a file not named samples_<task>_... names its task by its name: said)
        with pytest.warns(UserWarning, match=r"tasks \['run'\] where the fit read "
                          r"\['gsm8k'\]"):
            assert main(["anchors", "predict", p, str(path)]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 1
