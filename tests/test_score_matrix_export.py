"""ScoreMatrix.to_csv / to_pandas: tables that load back unchanged, names a table would
change refused, and the NA spellings of other tools read as unobserved cells."""

import numpy as np
import pytest

import jaxeval

pd = pytest.importorskip("pandas")


def _same(a, b):
    assert a.models.tolist() == b.models.tolist()
    assert a.items.tolist() == b.items.tolist()
    np.testing.assert_array_equal(a.mask, b.mask)
    np.testing.assert_array_equal(np.where(a.mask, a.scores, 0), np.where(b.mask, b.scores, 0))
    assert a.scores.dtype == b.scores.dtype
    if a.target is None:
        assert b.target is None
    else:
        np.testing.assert_array_equal(a.target, b.target)


def _awkward():
    """Names with separators, quotes, line breaks, unicode, numbers and NA-like text;
    scores that are not short decimals; a partly unknown target; unobserved cells,
    a fully unobserved model and item."""
    rng = np.random.default_rng(3)
    scores = rng.random((6, 5)).astype(np.float32)
    scores[0, :2] = [1.0, 0.0]
    mask = rng.random((6, 5)) < 0.75
    mask[4, :] = False
    mask[:, 3] = False
    models = ["a, b", 'say "hi"', "line\nbreak", "modèle ✓", "1", "NA"]
    items = ["q,1", "q\t2", "nan", "0.5", "‘x’"]
    target = np.array([0.5, np.nan, 1 / 3, 0.0, 1.0, 0.123456789])
    return jaxeval.ScoreMatrix(scores, mask=mask, models=models, items=items, target=target)


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_to_csv_loads_back_unchanged(tmp_path, suffix):
    sm = _awkward()
    back = jaxeval.load(sm.to_csv(tmp_path / f"m{suffix}"))
    _same(sm, back)


def test_to_csv_bundled_dataset_with_a_mask_round_trip(tmp_path):
    sm = jaxeval.load("oll2_ifeval")
    mask = np.random.default_rng(0).random(sm.shape) < 0.6
    part = jaxeval.ScoreMatrix(sm.scores, mask=mask, models=sm.models, items=sm.items,
                               target=sm.target)
    _same(part, jaxeval.load(part.to_csv(tmp_path / "ifeval.csv")))
    _same(sm, jaxeval.load(sm.to_csv(tmp_path / "full.csv")))


def test_to_csv_text_and_separator(tmp_path):
    sm = jaxeval.ScoreMatrix(np.array([[1.0, np.nan], [0.25, 0.0]]),
                             models=["a", "b;c"], items=["q1", "q2"], target=[0.5, np.nan])
    p = sm.to_csv(tmp_path / "s.CSV", sep=";")
    assert p.read_text() == 'model;q1;q2;target\na;1;;0.5\n"b;c";0.25;0;\n'
    _same(sm, jaxeval.load(p, sep=";"))
    # replaced, not appended to
    sm.take(models=[0]).to_csv(p, sep=";")
    assert p.read_text() == "model;q1;q2;target\na;1;;0.5\n"


def test_to_csv_refuses_a_suffix_load_cannot_read(tmp_path):
    sm = jaxeval.ScoreMatrix(np.ones((1, 1)))
    with pytest.raises(ValueError, match=r"to_csv: path must end in \.csv or \.tsv"):
        sm.to_csv(tmp_path / "s.txt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", ["", ";;", '"', "\n", 3])
def test_to_csv_refuses_a_bad_separator(tmp_path, bad):
    sm = jaxeval.ScoreMatrix(np.ones((1, 1)))
    with pytest.raises(ValueError, match="sep must be one character"):
        sm.to_csv(tmp_path / "s.csv", sep=bad)
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("models, items, match", [
    ([" a"], ["q"], "model name ' a' has spaces around it"),
    (["a"], ["q "], "item name 'q ' has spaces around it"),
    (["a"], ["model"], "an item is named 'model'.*the model column"),
    (["a"], ["target"], "an item is named 'target'.*full-benchmark score"),
    (["a"], ["full_score_pct"], "an item is named 'full_score_pct'"),
])
def test_to_csv_refuses_names_a_table_would_change(tmp_path, models, items, match):
    sm = jaxeval.ScoreMatrix(np.ones((1, 1)), models=models, items=items)
    with pytest.raises(ValueError, match=match):
        sm.to_csv(tmp_path / "s.csv")
    assert not (tmp_path / "s.csv").exists()
    # to_npz keeps them
    back = jaxeval.load(sm.to_npz(tmp_path / "s.npz"))
    assert back.models.tolist() == models and back.items.tolist() == items


def test_to_pandas_wide_reads_back(tmp_path):
    sm = _awkward()
    df = sm.to_pandas()
    assert df.shape == sm.shape and df.index.name == "model" and df.columns.name == "item"
    assert int(df.notna().to_numpy().sum()) == int(sm.mask.sum())
    _same(sm, jaxeval.ScoreMatrix(df, target=sm.target))


def test_to_pandas_long():
    sm = _awkward()
    df = sm.to_pandas("long")
    assert list(df.columns) == ["model", "item", "score", "target"]
    assert len(df) == int(sm.mask.sum())
    r, c = np.nonzero(sm.mask)
    assert df["model"].tolist() == sm.models[r].tolist()
    assert df["item"].tolist() == sm.items[c].tolist()
    np.testing.assert_array_equal(df["score"].to_numpy(), sm.scores[r, c])
    np.testing.assert_array_equal(df["target"].to_numpy(), sm.target[r])
    no_target = jaxeval.ScoreMatrix(np.array([[1.0, 0.0]]))
    assert list(no_target.to_pandas("long").columns) == ["model", "item", "score"]
    with pytest.raises(ValueError, match="layout must be 'wide' or 'long'"):
        sm.to_pandas("tall")


@pytest.mark.parametrize("na", ["N/A", "n/a", "#N/A", "<NA>", "NULL", "None", "NaN", "-nan",
                                "NA", ""])
def test_na_spellings_are_unobserved(tmp_path, na):
    p = tmp_path / "t.csv"
    p.write_text(f"model,q1,q2\na,1,{na}\nb,0,1\n")
    sm = jaxeval.load(p)
    assert sm.mask.tolist() == [[True, False], [True, True]]


def test_other_text_is_still_refused(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("model,q1,q2\na,1,missing\nb,0,1\n")
    with pytest.raises(ValueError, match="is not a number: 'missing'"):
        jaxeval.load(p)


def test_a_wide_table_repeating_a_model_name(tmp_path):
    p = tmp_path / "dup.csv"
    p.write_text("model,q1,q2\na,1,0\nb,1,1\na,0,1\n")
    with pytest.raises(ValueError, match=r"model 'a' is on line 2 and on line 4 .*pass "
                                         r"duplicate_names='rename'"):
        jaxeval.load(p)
    sm = jaxeval.load(p, duplicate_names="rename")
    assert sm.models.tolist() == ["a", "b", "a#2"]
    assert sm.scores.tolist() == [[1, 0], [1, 1], [0, 1]]
    assert any("'#k' suffix" in c for c in sm.metadata["conversions"])
    with pytest.raises(ValueError, match="duplicate_names must be 'error' or 'rename'"):
        jaxeval.load(p, duplicate_names="keep")
    long = tmp_path / "long.csv"
    long.write_text("model,item,score\na,q1,1\na,q2,0\n")
    assert jaxeval.load(long).shape == (1, 2)
    with pytest.raises(ValueError, match="duplicate_names='rename' is for a wide table"):
        jaxeval.load(long, duplicate_names="rename")


def test_the_command_line_renames_a_tables_repeated_models(tmp_path, capsys, monkeypatch):
    from jaxeval._cli import main

    monkeypatch.chdir(tmp_path)
    sm = jaxeval.load("oll2_musr").take(models=np.arange(60), items=np.arange(40))
    sm = jaxeval.ScoreMatrix(sm.scores, models=[f"m{i}" for i in range(60)], items=sm.items)
    text = sm.to_csv("s.csv").read_text().replace("\nm7,", "\nm3,")  # m3 twice
    (tmp_path / "s.csv").write_text(text)
    (tmp_path / "t.csv").write_text(text.replace(",", ";"))
    base = ["anchors", "fit", "--k", "5", "--method", "random_mean"]
    assert main(base[:2] + ["s.csv"] + base[2:] + ["--out", "a.npz"]) == 2
    assert "pass --duplicate-names rename" in capsys.readouterr().err
    assert main(base[:2] + ["s.csv"] + base[2:] + ["--out", "a.npz", "--duplicate-names",
                                                   "rename"]) == 0
    err = capsys.readouterr().err  # what the loader changed is said
    assert "DATA: 1 repeated 'models' names made unique with a '#k' suffix (e.g. ['m3#2'])" \
        in err
    assert main(base[:2] + ["t.csv"] + base[2:] + ["--out", "b.npz", "--duplicate-names",
                                                   "rename", "--sep", ";"]) == 0
    a, b = (jaxeval.AnchorPredictor.load(f) for f in ("a.npz", "b.npz"))
    assert a.anchor_items.tolist() == b.anchor_items.tolist()


def test_the_command_line_says_which_runs_it_dropped(tmp_path, capsys, monkeypatch):
    """``--history-runs latest`` kept the newest run of a task without a word."""
    import json

    from jaxeval._cli import main

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for m in range(12):
        d = tmp_path / "runs" / f"org__m{m}"
        d.mkdir(parents=True)
        stamps = ["2025-01-01T00-00-00.000001"] + (["2025-02-01T00-00-00.000001"] if m == 4
                                                   else [])
        for stamp in stamps:
            lines = [json.dumps({"doc_id": i, "acc": float(rng.random() < 0.5)})
                     for i in range(10)]
            (d / f"samples_arc_{stamp}.jsonl").write_text("\n".join(lines))
    args = ["campaign", "new", "c.npz", "--candidates", "x1", "x2", "--policy", "ucbe",
            "--history", "runs", "--history-runs", "latest"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "--history: 1 older run(s) of the same task ignored (runs='latest')" in err
    assert "2025-01-01T00-00-00.000001" in err


def test_the_command_line_says_which_cells_it_read_as_unobserved(tmp_path, capsys, monkeypatch):
    from jaxeval._cli import main

    monkeypatch.chdir(tmp_path)
    sm = jaxeval.load("oll2_musr").take(models=np.arange(60), items=np.arange(40))
    text = sm.to_csv("s.csv").read_text()
    lines = text.splitlines()
    lines[5] = ",".join(lines[5].split(",")[:-1] + ["N/A"])
    (tmp_path / "s.csv").write_text("\n".join(lines) + "\n")
    assert main(["anchors", "fit", "s.csv", "--k", "5", "--method", "random_mean", "--out",
                 "a.npz", "--drop-incomplete"]) == 0
    err = capsys.readouterr().err
    assert "DATA: 1 NaN cells read as unobserved (mask=False)" in err
    assert "0/1 scores" not in err


# ------------------------------------------------ a read of the change found (fixed)
@pytest.mark.parametrize("items, match", [
    (["item", "score", "z"], "items are named 'item' and 'score'"),
    (["q", ""], "item name '' is empty or holds a carriage return"),
    (["q", "a\rb"], "item name 'a\\\\rb' is empty or holds a carriage return"),
])
def test_to_csv_refuses_what_would_load_back_otherwise(tmp_path, items, match):
    sm = jaxeval.ScoreMatrix(np.ones((2, 3))[:, :len(items)], items=items)
    with pytest.raises(ValueError, match=match):
        sm.to_csv(tmp_path / "s.csv")
    assert not (tmp_path / "s.csv").exists()
    ok = jaxeval.ScoreMatrix(np.ones((2, 2)), items=["item", "z"])  # one of them alone
    _same(ok, jaxeval.load(ok.to_csv(tmp_path / "ok.csv")))


def test_the_command_line_does_not_repeat_the_notes_an_npz_was_saved_with(
        tmp_path, capsys, monkeypatch):
    from jaxeval._cli import main

    monkeypatch.chdir(tmp_path)
    sm = jaxeval.load("oll2_musr").take(models=np.arange(60), items=np.arange(40))
    assert any("'#k' suffix" in c for c in sm.metadata["conversions"])  # from the bundle
    sm.to_npz("sub.npz")
    assert main(["anchors", "fit", "sub.npz", "--k", "5", "--method", "random_mean",
                 "--out", "a.npz"]) == 0
    assert "'#k' suffix" not in capsys.readouterr().err


def test_to_pandas_long_of_nothing_observed_keeps_text_columns():
    sm = jaxeval.ScoreMatrix(np.ones((2, 2)), mask=np.zeros((2, 2), bool))
    df = sm.to_pandas("long")
    assert len(df) == 0 and df["model"].dtype == object and df["item"].dtype == object
    assert df["score"].dtype == np.float32
