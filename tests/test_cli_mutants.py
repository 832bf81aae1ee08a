"""Gaps a mutation review of the command line (``_cli``), the lm-evaluation-harness
reader (``_lmeval``) and the table reader (``_tables``) found: each test fails on a
plausible bug the rest of the suite let through."""

import io
import json

import numpy as np
import pytest

import jaxeval
from jaxeval._cli import main
from jaxeval._lmeval import load_lm_eval
from jaxeval._tables import load_table


def _write(path, text):
    path.write_text(text)
    return path


# --------------------------------------------------------------------- tables
def test_a_table_cut_off_after_a_digit_warns(tmp_path):
    """The missing final line break is the sign, whatever the last character: a cell
    cut from 0.75 to 0.7, 0 or 0.5 (a digit) warns as one cut to "0." does."""
    for i, tail in enumerate(("0.7", "0", "1", "0.5")):
        cut = _write(tmp_path / f"cut{i}.csv", f"model,q1,q2\na,1,0\nb,0,{tail}")
        with pytest.warns(UserWarning, match=rf"cut{i}\.csv: the file does not end with a line "
                          "break"):
            sm = jaxeval.load(cut)
        assert sm.scores[1, 1] == pytest.approx(float(tail))


def test_an_unnamed_second_column_is_refused(tmp_path):
    """A trailing separator after the first column is a phantom item '' too."""
    p = _write(tmp_path / "t.csv", "model,\na,1\nb,0\n")
    with pytest.raises(ValueError, match=r"t\.csv: header column\(s\) \[2\] have no name"):
        load_table(p)


def test_na_and_null_cells_are_unobserved(tmp_path):
    p = _write(tmp_path / "w.csv", "model,q1,q2,q3\na,NA,1,null\nb,0,na,None\n")
    sm = load_table(p)
    assert sm.mask.tolist() == [[False, True, False], [True, False, False]]
    assert sm.scores[sm.mask].tolist() == [1.0, 0.0]


def test_an_empty_model_name_in_a_wide_table_is_refused_with_its_line(tmp_path):
    p = _write(tmp_path / "w.csv", "model,q1\na,1\n ,0\n")
    with pytest.raises(ValueError, match=r"w\.csv: line 3: empty model name in column 'model'"):
        load_table(p)


def test_a_four_column_long_table_under_other_names_says_it_was_read_as_wide(tmp_path):
    """With a target column the long table has four columns: the hint is given too."""
    p = _write(tmp_path / "l.csv", "Model,Item,Score,Full\nm1,q1,1,0.5\nm2,q1,0,0.5\n")
    with pytest.raises(ValueError, match="read as a wide table") as e:
        load_table(p)
    assert "is not a number: 'q1'" in str(e.value)


def test_an_explicit_wide_layout_gets_no_guessed_layout_hint(tmp_path):
    """The "read as a wide table since ..." advice is for a guessed layout only."""
    p = _write(tmp_path / "l.csv", "Model,Item,Score\nm1,q1,1\n")
    with pytest.raises(ValueError, match="is not a number: 'q1'") as e:
        load_table(p, layout="wide")
    assert "read as a wide table" not in str(e.value)


def test_three_zero_one_values_under_a_names_header_are_an_item(tmp_path):
    """Three or more 0 / 1 values cannot be distinct model names, even under an empty
    (index-like) header: the first column is refused as an item, not taken as names."""
    p = _write(tmp_path / "w.csv", ",q1\n1,0.5\n0,0.25\n1,1\n")
    with pytest.raises(ValueError, match=r"w\.csv: no 'model' column, and the first column "
                       r"'', which would name the models, holds only scores in \[0, 1\]"):
        load_table(p)
    two = load_table(_write(tmp_path / "two.csv", ",q1\n0,0.5\n1,0.25\n"))  # ids of 2 models
    assert two.models.tolist() == ["0", "1"] and two.items.tolist() == ["q1"]


# ------------------------------------------------------- lm-evaluation-harness
def _lines(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_lm_eval_samples_file_without_a_timestamp_names_its_task(tmp_path):
    """samples_<task>.jsonl (renamed, or from a tool that drops the timestamp): the task
    is <task>, without the samples_ prefix."""
    f = _lines(tmp_path / "org__m" / "samples_arc_easy.jsonl",
               [{"doc_id": i, "acc": float(i % 2)} for i in range(3)])
    sm = load_lm_eval(f, task="arc_easy")
    assert sm.metadata["tasks"] == ["arc_easy"] and sm.models.tolist() == ["org__m"]
    assert sm.scores.tolist() == [[0.0, 1.0, 0.0]]


def test_lm_eval_a_single_true_false_metric_is_not_taken_by_default(tmp_path):
    """The fallback to the one name in 'metrics' is for a number: a true/false field
    outside DEFAULT_METRICS is read only when named (metric=...), as 1 / 0."""
    f = _lines(tmp_path / "m" / "samples_t_2025-01-01T00-00-00.jsonl",
               [{"doc_id": i, "metrics": ["solved"], "solved": i == 1} for i in range(3)])
    with pytest.raises(ValueError, match="no usable metric field"):
        load_lm_eval(f)
    sm = load_lm_eval(f, metric="solved")
    assert sm.scores.tolist() == [[0.0, 1.0, 0.0]]
    assert "true/false metric values read as 1/0" in sm.metadata["conversions"]


def test_lm_eval_a_true_false_doc_id_is_refused(tmp_path):
    """doc_id true would be the same key as doc_id 1 (True == 1 in Python)."""
    f = _lines(tmp_path / "m" / "samples_t_2025-01-01T00-00-00.jsonl",
               [{"doc_id": 1, "acc": 1.0}, {"doc_id": True, "acc": 0.0}])
    with pytest.raises(ValueError, match=r"line 2: field 'doc_id' must be an int or a string, "
                       "got True"):
        load_lm_eval(f)


def test_lm_eval_bad_runs_missing_and_task_arguments_are_refused(tmp_path):
    f = _lines(tmp_path / "m" / "samples_arc_easy_2025-01-01T00-00-00.jsonl",
               [{"doc_id": i, "acc": 1.0} for i in range(2)])
    with pytest.raises(ValueError, match="runs must be 'error' or 'latest', got 'newest'"):
        load_lm_eval(f, runs="newest")
    with pytest.raises(ValueError, match="missing must be 'mask' or 'error', got 'drop'"):
        load_lm_eval(f, missing="drop")
    with pytest.raises(ValueError, match="file holds task 'arc_easy', not 'gsm8k'"):
        load_lm_eval(f, task="gsm8k")
    assert load_lm_eval(f, task=["gsm8k", "arc_easy"]).n_items == 2


# ---------------------------------------------------------------- command line
@pytest.mark.parametrize("filters, match", [
    (["strict-match", "arc=flexible-extract"],
     "--filter: either one FILTER for every task or TASK=FILTER pairs, not both"),
    (["arc=strict-match", "arc=flexible-extract"], "--filter: a task given twice in"),
])
def test_contradictory_filter_flags_are_refused(tmp_path, capsys, filters, match):
    """Neither is settled silently (a bare FILTER dropped, or the last TASK=FILTER
    winning): refused before any data is read."""
    args = ["anchors", "fit", str(tmp_path / "runs"), "--k", "3", "--out", str(tmp_path / "a")]
    for f in filters:
        args += ["--filter", f]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"jaxeval anchors: error: {match}" in err, err
    assert not (tmp_path / "a.npz").exists()


# ---------------------------------------------------------------- anchors commands
@pytest.fixture(scope="module")
def predictor_file(tmp_path_factory):
    """A small saved predictor (12 items, 3 anchors), fitted fast."""
    from jaxeval.anchors import Settings
    from jaxeval.anchors._irt import IRTConfig

    rng = np.random.default_rng(0)
    ability = rng.normal(size=(60, 1))
    s = (rng.random((60, 12)) < 1 / (1 + np.exp(-(ability + rng.normal(size=(1, 12)))))
         ).astype(np.float32)
    sm = jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(12)]).drop_duplicates()
    fast = Settings(proxy_steps=60, final_steps=200, init_steps=60, eval_every=20,
                    num_swaps=3, kmeans_iters=10, ridge_swaps=5, irt=IRTConfig(num_steps=50))
    pred = jaxeval.fit_anchors(sm, 3, method="random_ridge", seed=0, settings=fast)
    return pred.save(tmp_path_factory.mktemp("pred") / "p.npz")


def test_anchors_extra_beyond_the_non_anchors_is_refused_naming_the_flag(predictor_file,
                                                                         capsys):
    assert main(["anchors", "items", str(predictor_file), "--extra", "9"]) == 0
    assert len(capsys.readouterr().out.split()) == 9  # every non-anchor
    assert main(["anchors", "items", str(predictor_file), "--extra", "10"]) == 2
    err = capsys.readouterr().err
    assert ("jaxeval anchors: error: --extra: at most 9 items are not anchors (12 items, 3 "
            "anchors), got 10") in err, err


def _incomplete_csv(path, lacking):
    """A long table of 6 distinct models on 4 items; model i in ``lacking`` has no score
    for item i % 4."""
    rows = ["model,item,score"]
    for i in range(6):
        for j in range(4):
            if not (i in lacking and j == i % 4):
                rows.append(f"m{i},q{j},{(i >> j) & 1}")
    return _write(path, "\n".join(rows) + "\n")


def test_anchors_fit_drop_incomplete_of_every_model_is_refused(tmp_path, capsys):
    data = _incomplete_csv(tmp_path / "d.csv", lacking=range(6))
    args = ["anchors", "fit", str(data), "--k", "2", "--out", str(tmp_path / "a"), "--quiet"]
    assert main(args + ["--drop-incomplete"]) == 2
    err = capsys.readouterr().err
    assert "--drop-incomplete: left out 6 of 6 models with unscored items" in err
    assert f"jaxeval anchors: error: --drop-incomplete: every model of {data} has unscored " \
           "items" in err, err
    assert not (tmp_path / "a.npz").exists()


def test_anchors_fit_drop_incomplete_fits_on_the_complete_models(tmp_path, capsys):
    """The 5 complete models go on to the fit (refused here at once for --k, whose message
    counts the models it was given), not the 6 with the incomplete one."""
    data = _incomplete_csv(tmp_path / "d.csv", lacking=[5])
    args = ["anchors", "fit", str(data), "--k", "9", "--out", str(tmp_path / "a"), "--quiet"]
    assert main(args) == 2
    assert "1 of 6 models have unscored items (e.g. ['m5'])" in capsys.readouterr().err
    assert main(args + ["--drop-incomplete"]) == 2
    err = capsys.readouterr().err
    assert "--drop-incomplete: left out 1 of 6 models with unscored items" in err
    assert f"jaxeval anchors: error: DATA {data} (5 models after removing duplicates, 4 " \
           "items), --k 9: " in err, err


# --------------------------------------------------------------- campaign commands
def test_campaign_tell_from_stdin_ask_items_only_when_done_and_status_json(tmp_path, capsys,
                                                                           monkeypatch):
    """A shell loop `while items=$(jaxeval campaign ask c --items-only) ...` ends on an
    empty output: a finished campaign prints no JSON there (plain `ask` does). Answers
    '-' are read from stdin. Its status as JSON puts each interval's ends in their
    fields."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.txt").write_text("q0\nq1\nq2\nq3\n")
    assert main(["campaign", "new", "c", "--items-file", "items.txt", "--candidates", "a",
                 "b", "--policy", "ucbe", "--batch-size", "2", "--budget", "2"]) == 0
    capsys.readouterr()
    assert main(["campaign", "ask", "c.npz", "--items-only"]) == 0
    items = capsys.readouterr().out.split()
    assert len(items) == 2 and set(items) <= {"q0", "q1", "q2", "q3"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps([1, 0])))  # answers '-'
    assert main(["campaign", "tell", "c.npz", "-", "--step", "0"]) == 0
    assert "2 of 2 calls" in capsys.readouterr().out
    assert main(["campaign", "ask", "c.npz", "--items-only"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["campaign", "ask", "c.npz"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["done"] is True and done["calls"] == 2
    assert main(["campaign", "status", "c.npz", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["models"] == ["a", "b"] and st["calls"] == 2 and st["budget"] == 2
    assert sum(st["pulls"]) == 2 and st["done"] is True
    lo, est, hi = (np.array(st[k]) for k in ("lower", "estimate", "upper"))
    assert np.all(lo <= est) and np.all(est <= hi) and np.all(lo < hi), st


def test_campaign_new_sep_without_history_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.txt").write_text("q0\nq1\n")
    assert main(["campaign", "new", "c", "--items-file", "items.txt", "--candidates", "a",
                 "b", "--policy", "ucbe", "--sep", ";"]) == 2
    err = capsys.readouterr().err
    assert "jaxeval campaign: error: --sep: only with --history" in err, err
    assert not (tmp_path / "c.npz").exists()


# ----------------------------------------------------------------------- datasets
def test_datasets_json_ranks_the_best_models_of_the_unique_rows(capsys):
    from jaxeval import datasets

    assert main(["datasets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == list(datasets.names())
    for r in rows:
        sm = datasets.load(r["name"])
        dd = sm.drop_duplicates()
        assert (r["models"], r["unique_models"], r["items"]) == (
            sm.n_models, dd.n_models, sm.n_items)
        top = [a for _, a in r["top_models"]]
        assert top[0] == pytest.approx(r["accuracy_max"]) and top == sorted(top, reverse=True)
        assert r["top2_gap"] >= 0
    assert any(r["unique_models"] < r["models"] for r in rows)  # the resubmissions


# ------------------------------------------------------------------ study commands
def test_summary_json_and_plot_out(tmp_path, capsys, monkeypatch):
    """`summary --json` prints the JSON summary (and writes summary.json); `plot DIR
    --out P` hands P to the plotting, DIR/plots only without --out."""
    from pathlib import Path

    import jaxeval._report as report

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    cfg = {"kind": "replicates", "name": "cli-toy", "target": "test_study:toy",
           "n_replicates": 40, "seed": 1, "chunk_size": 32, "lanes": 8}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(cfg))
    s = str(tmp_path / "s")
    assert main(["run", str(p), "--out", s, "--quiet", "--no-report"]) == 0
    assert not (tmp_path / "s" / "summary.json").exists()  # --no-report
    capsys.readouterr()
    assert main(["summary", s, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["replicates"] == 40 and printed["fields"]["mean"]["shape"] == [40]
    assert json.loads((tmp_path / "s" / "summary.json").read_text()) == printed
    seen = []

    def fake_plot(summary, out):
        seen.append(Path(out))
        return [Path(out) / "fig.png"]

    monkeypatch.setattr(report, "plot_study", fake_plot)
    assert main(["plot", s, "--out", str(tmp_path / "figs")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "figs" / "fig.png")]
    assert main(["plot", s]) == 0
    assert seen == [tmp_path / "figs", tmp_path / "s" / "plots"]


def test_merge_of_part_of_the_ranges_says_incomplete(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    cfg = {"kind": "replicates", "name": "cli-toy", "target": "test_study:toy",
           "n_replicates": 100, "seed": 1, "chunk_size": 32, "lanes": 8}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(cfg))
    a, m = str(tmp_path / "a"), str(tmp_path / "m")
    assert main(["run", str(p), "--out", a, "--range", "0:40", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["merge", a, "--out", m]) == 0
    out = capsys.readouterr().out
    # the units done of the study's, as a count (not the per-task dict)
    assert out.rstrip() == (f"merged 1 folder into {m}: 40 of 100 units (incomplete: units "
                            f"40:100 missing; `jaxeval resume {m}` computes them, or merge "
                            "their folders too)"), out


def test_campaign_items_file_keeps_items_that_start_with_a_hash(tmp_path, capsys,
                                                                 monkeypatch):
    """Comment lines are for --candidates-file only: every non-blank line of
    --items-file is an item (#1 may well be one)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.txt").write_text("#1\n#2\n\nq3\n")
    (tmp_path / "cands.txt").write_text("# the models\na\nb\n")
    assert main(["campaign", "new", "c", "--items-file", "items.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe"]) == 0
    assert "left out 1 comment line(s)" in capsys.readouterr().err
    camp = jaxeval.IdentificationCampaign.load("c.npz")
    assert camp.items.tolist() == ["#1", "#2", "q3"]
    assert camp.candidates.tolist() == ["a", "b"]
