"""Every loader on small fixtures written here, and every refusal of bad input.

Each refusal test checks that the message names the file, the field and the problem.
"""

import json
import re

import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix
from jaxeval._lmeval import load_lm_eval
from jaxeval._tables import load_table


def _write(path, text):
    path.write_text(text)
    return path


def _raises(match, fn, *args, **kw):
    with pytest.raises(ValueError) as exc:
        fn(*args, **kw)
    msg = str(exc.value)
    for part in match:
        assert re.search(part, msg), f"{part!r} not in {msg!r}"
    return msg


# --------------------------------------------------------------------- tables
LONG = "model,item,score,full\nm1,q1,1,0.9\nm1,q2,0,0.9\nm2,q2,0.5,0.4\nm2,q3,1,0.4\n"


def test_long_csv_with_missing_pairs_and_target(tmp_path):
    p = _write(tmp_path / "long.csv", LONG)
    sm = jaxeval.load(p, target_col="full")
    assert sm.models.tolist() == ["m1", "m2"] and sm.items.tolist() == ["q1", "q2", "q3"]
    np.testing.assert_array_equal(sm.scores, [[1, 0, 0], [0, 0.5, 1]])
    np.testing.assert_array_equal(sm.mask, [[True, True, False], [False, True, True]])
    np.testing.assert_allclose(sm.target, [0.9, 0.4])
    assert sm.metadata["format"] == "table (long)"
    assert any("2 (model, item) pairs absent" in c for c in sm.metadata["conversions"])
    np.testing.assert_allclose(sm.accuracy(), [0.5, 0.75])


def test_long_tsv_and_parquet_match_csv(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    csv = jaxeval.load(_write(tmp_path / "a.csv", LONG))
    tsv = jaxeval.load(_write(tmp_path / "a.tsv", LONG.replace(",", "\t")))
    df = pd.read_csv(tmp_path / "a.csv")
    df.to_parquet(tmp_path / "a.parquet")
    pq = jaxeval.load(tmp_path / "a.parquet")
    for other in (tsv, pq):
        np.testing.assert_array_equal(other.scores, csv.scores)
        np.testing.assert_array_equal(other.mask, csv.mask)
        assert other.items.tolist() == csv.items.tolist()
    # Wide Parquet too.
    wide = pd.DataFrame({"model": ["a", "b"], "x": [1.0, np.nan], "y": [0.0, 1.0]})
    wide.to_parquet(tmp_path / "w.parquet")
    sw = jaxeval.load(tmp_path / "w.parquet")
    assert sw.mask.tolist() == [[True, True], [False, True]]
    # a wide table indexed by model (pivot(...).to_parquet()) keeps its model names
    long = pd.read_csv(tmp_path / "a.csv")
    long.pivot(index="model", columns="item", values="score").to_parquet(tmp_path / "p.parquet")
    sp = jaxeval.load(tmp_path / "p.parquet")
    assert sp.models.tolist() == sorted(set(csv.models.tolist()))
    assert sorted(sp.items.tolist()) == sorted(csv.items.tolist())


def test_wide_csv_blank_cells_and_target(tmp_path):
    p = _write(tmp_path / "wide.csv", "name,q1,q2,q3,target\na,1,0,,0.7\nb,0.25,1,1,0.6\n")
    sm = jaxeval.load(p, target_col="target")
    assert sm.metadata["format"] == "table (wide)"
    assert sm.models.tolist() == ["a", "b"] and sm.items.tolist() == ["q1", "q2", "q3"]
    np.testing.assert_array_equal(sm.scores, [[1, 0, 0], [0.25, 1, 1]])
    assert sm.mask.tolist() == [[True, True, False], [True, True, True]]
    np.testing.assert_allclose(sm.target, [0.7, 0.6])
    assert any("NaN cells read as unobserved" in c for c in sm.metadata["conversions"])
    # model_col found anywhere in the header; true/false read as 1/0 and noted.
    p2 = _write(tmp_path / "w2.csv", "q1,model,q2\ntrue,a,false\n")
    s2 = load_table(p2, layout="wide")
    assert s2.models.tolist() == ["a"] and s2.scores.tolist() == [[1.0, 0.0]]
    assert "true/false cells read as 1/0" in s2.metadata["conversions"]


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        ("model,item,score\nm1,q1,1\nm2,q1,0\nm1,q1,0\n", {},
         [r"duplicate \(model, item\) pair \('m1', 'q1'\) on line 2 and line 4"]),
        ("model,item,score\nm1,q1,1\nm1,q2,1.5\n", {},
         [r"line 3: field 'score' must lie in \[0, 1\], got 1.5"]),
        ("model,item,score\nm1,q1,75\n", {}, [r"field 'score'.*got 75.0 \(percent\?"]),
        ("model,item,score\nm1,q1,yes\n", {}, [r"line 2, column 'score' is not a number: 'yes'"]),
        ("model,item,score\nm1,q1,\n", {}, [r"line 2: field 'score' is empty/NaN"]),
        ("model,item,score,t\nm1,q1,1,0.5\nm1,q2,1,0.6\n", {"target_col": "t"},
         [r"field 't' differs between line 2 and line 3 of model 'm1'"]),
        ("model,item,score,t\nm1,q1,1,55\n", {"target_col": "t"},
         [r"line 2: field 't' must lie in \[0, 1\], got 55\.0 \(percent\? divide by 100"]),
        ("model,item,value\nm1,q1,1\n", {"layout": "long"},
         [r"missing score column 'score' \(columns present: \['model', 'item', 'value'\]\)"]),
        ("m,q1,q1\na,1,0\n", {}, [r"duplicate column name 'q1'"]),
        ("m,q1,q2\na,1,0\na,0,0\n", {}, [r"model 'a' is on line 2 and on line 3"]),
        ("m,q1,q2\na,1,0\nb,0,0,1\n", {}, [r"malformed table"]),
        ("m,q1,q2\na,1,-0.5\n", {}, [r"line 2 \(model 'a'\), column 'q2': the score .*-0.5"]),
        ("m,q1,q2\na,1,nope\n", {}, [r"column 'q2' is not a number: 'nope'"]),
        ("m,q1,q2\n", {}, [r"header but no rows"]),
        ("m,q1,q2,q3\na,1,0,1\nb,0,1\n", {}, [r"line 3 has 3 fields, the header 4"]),
        ("m,q1,q2,\na,1,0,\nb,0,1,\n", {}, [r"header column\(s\) \[4\] have no name"]),
        ("", {}, [r"the table is empty"]),
        ("m\na\n", {}, [r"needs item columns"]),
    ],
)
def test_table_refusals_name_file_field_and_problem(tmp_path, text, kwargs, match):
    p = _write(tmp_path / "bad.csv", text)
    _raises([re.escape(str(p))] + match, jaxeval.load, p, **kwargs)


def test_table_bad_layout_argument(tmp_path):
    p = _write(tmp_path / "x.csv", LONG)
    _raises([r"layout must be 'auto', 'long' or 'wide', got 'tall'"], load_table, p, layout="tall")


# ------------------------------------------------------- lm-evaluation-harness
TS = "2025-03-04T10-11-12.123456"


def _sample(doc_id, acc, acc_norm=None, filt="none", **extra):
    """One line as lm-evaluation-harness --log_samples writes it (multiple choice)."""
    rec = {
        "doc_id": doc_id,
        "doc": {"question": f"Question {doc_id}?", "choices": ["A", "B"], "answerKey": "A"},
        "target": 0,
        "arguments": {
            "gen_args_0": {"arg_0": f"Question {doc_id}?\nAnswer:", "arg_1": " A"},
            "gen_args_1": {"arg_0": f"Question {doc_id}?\nAnswer:", "arg_1": " B"},
        },
        "resps": [[["-1.25", "False"]], [["-2.5", "False"]]],
        "filtered_resps": [["-1.25", "False"], ["-2.5", "False"]],
        "filter": filt,
        "metrics": ["acc", "acc_norm"],
        "doc_hash": f"hash{doc_id:04d}",
        "prompt_hash": f"p{doc_id}",
        "target_hash": "t0",
        "acc": acc,
        "acc_norm": acc if acc_norm is None else acc_norm,
    }
    rec.update(extra)
    return rec


def _run(root, model, task, records, ts=TS):
    d = root / model
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"samples_{task}_{ts}.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    return p


def _two_models(root):
    a = _run(root, "org__model-a", "arc_easy", [_sample(i, float(i % 2), 1.0) for i in range(4)])
    b = _run(root, "org__model-b", "arc_easy", [_sample(i, 1.0, 0.0) for i in (0, 1, 3)])
    return a, b


def test_lm_eval_single_file_is_one_row(tmp_path):
    a, _ = _two_models(tmp_path)
    sm = jaxeval.load(a)
    assert sm.models.tolist() == ["org__model-a"]
    assert sm.items.tolist() == ["0", "1", "2", "3"]
    assert sm.scores.tolist() == [[0, 1, 0, 1]] and sm.is_complete
    assert sm.metadata["metric"] == {"arc_easy": "acc"}
    assert sm.metadata["format"] == "lm-evaluation-harness samples"
    assert load_lm_eval(a, metric="acc_norm").scores.tolist() == [[1, 1, 1, 1]]
    assert load_lm_eval(a, model="mine").models.tolist() == ["mine"]


def test_lm_eval_directory_of_runs_aligns_on_doc_id_with_mask(tmp_path):
    _two_models(tmp_path)
    sm = jaxeval.load(tmp_path)
    assert sm.models.tolist() == ["org__model-a", "org__model-b"]
    assert sm.items.tolist() == ["0", "1", "2", "3"]
    np.testing.assert_array_equal(sm.scores, [[0, 1, 0, 1], [1, 1, 0, 1]])
    np.testing.assert_array_equal(sm.mask, [[1, 1, 1, 1], [1, 1, 0, 1]])
    assert any("1 (model, doc_id) cells absent" in c for c in sm.metadata["conversions"])
    # One model folder alone is one row.
    one = jaxeval.load(tmp_path / "org__model-b")
    assert one.models.tolist() == ["org__model-b"] and one.items.tolist() == ["0", "1", "3"]
    # Unaligned doc_id sets can be refused instead.
    _raises(
        [re.escape(str(tmp_path)), "doc_ids are not aligned", "'org__model-b' lacks doc_id '2'"],
        load_lm_eval, tmp_path, missing="error",
    )


def test_lm_eval_model_folders_that_are_not_read_are_named(tmp_path):
    """A model folder with results_*.json but no samples (run without --log_samples),
    and samples folders below a folder that is itself read as one model, are named in
    a warning and in the conversions, not skipped silently."""
    _two_models(tmp_path)
    nos = tmp_path / "org__model-c"
    nos.mkdir()
    (nos / f"results_{TS}.json").write_text("{}")
    with pytest.warns(UserWarning, match=r"\['org__model-c'\].*no samples_\*.jsonl"):
        sm = jaxeval.load(tmp_path)
    assert sm.models.tolist() == ["org__model-a", "org__model-b"]
    assert any("org__model-c" in c for c in sm.metadata["conversions"])
    top = tmp_path / "org__model-a"
    _run(top, "nested", "arc_easy", [_sample(0, 1.0)])
    with pytest.warns(UserWarning, match=r"subfolders with samples files \['nested'\]"):
        one = jaxeval.load(top)
    assert one.models.tolist() == ["org__model-a"]


def test_lm_eval_several_tasks_and_runs(tmp_path):
    _two_models(tmp_path)
    _run(tmp_path, "org__model-a", "piqa", [_sample(i, 1.0) for i in range(2)])
    _run(tmp_path, "org__model-b", "piqa", [_sample(i, 0.0) for i in range(2)])
    sm = jaxeval.load(tmp_path)
    assert sm.items.tolist() == [f"arc_easy/{i}" for i in range(4)] + ["piqa/0", "piqa/1"]
    assert sm.metadata["tasks"] == ["arc_easy", "piqa"]
    only = jaxeval.load(tmp_path, task="piqa")
    assert only.items.tolist() == ["0", "1"] and only.scores.tolist() == [[1, 1], [0, 0]]
    _raises([r"no samples file for task\(s\) \['mmlu'\]", r"'arc_easy', 'piqa'"],
            jaxeval.load, tmp_path, task="mmlu")
    # A second run of the same task: refused unless runs='latest'.
    _run(tmp_path, "org__model-b", "piqa", [_sample(i, 1.0) for i in range(2)],
         ts="2025-03-05T00-00-00.000001")
    _raises([re.escape(str(tmp_path / "org__model-b")), "2 runs of task 'piqa'", "runs='latest'"],
            jaxeval.load, tmp_path, task="piqa")
    latest = jaxeval.load(tmp_path, task="piqa", runs="latest")
    assert latest.scores.tolist() == [[1, 1], [1, 1]]
    assert "latest" in latest.metadata["runs"]
    assert any("1 older run(s)" in c and f"samples_piqa_{TS}" in c
               for c in latest.metadata["conversions"])


def test_lm_eval_filters_need_choosing(tmp_path):
    recs = []
    for i in range(3):
        for filt, em in (("strict-match", 0.0), ("flexible-extract", 1.0)):
            r = _sample(i, 0.0, filt=filt, exact_match=em, metrics=["exact_match"])
            del r["acc"], r["acc_norm"]
            recs.append(r)
    p = _run(tmp_path, "org__model-g", "gsm8k", recs)
    _raises([re.escape(str(p)), "field 'filter' takes several values",
             r"\['flexible-extract', 'strict-match'\]", "filter="], jaxeval.load, p)
    assert jaxeval.load(p, filter="flexible-extract").scores.tolist() == [[1, 1, 1]]
    sm = jaxeval.load(p, filter="strict-match")
    assert sm.scores.tolist() == [[0, 0, 0]] and sm.metadata["metric"] == {"gsm8k": "exact_match"}
    _raises([re.escape(str(p)), "no line has filter 'x'"], jaxeval.load, p, filter="x")


def _gsm8k_two_filters(root, model, strict, flexible):
    recs = []
    for i in range(3):
        for filt, em in (("strict-match", strict), ("flexible-extract", flexible)):
            r = _sample(i, 0.0, filt=filt, exact_match=em, metrics=["exact_match"])
            del r["acc"], r["acc_norm"]
            recs.append(r)
    return _run(root, model, "gsm8k", recs)


def test_lm_eval_filter_per_task(tmp_path):
    """A folder whose tasks log different filters (one with ``none`` only, one with two)
    loads with ``filter={task: filter}``; one name for every task could not load it."""
    _two_models(tmp_path)  # arc_easy, filter "none"
    _gsm8k_two_filters(tmp_path, "org__model-a", 0.0, 1.0)
    _gsm8k_two_filters(tmp_path, "org__model-b", 1.0, 1.0)
    _raises(["field 'filter' takes several values"], jaxeval.load, tmp_path)
    _raises(["no line has filter 'strict-match'"], jaxeval.load, tmp_path, filter="strict-match")
    sm = jaxeval.load(tmp_path, filter={"gsm8k": "strict-match"})
    assert sm.items.tolist()[-3:] == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]
    assert sm.take(items=["gsm8k/0"]).scores.ravel().tolist() == [0.0, 1.0]
    assert sm.metadata["filter"] == {"gsm8k": "strict-match"}
    _raises([r"filter: no task \['mmlu'\] in "], jaxeval.load, tmp_path,
            filter={"mmlu": "strict-match"})


def test_lm_eval_bool_metric_is_converted_and_noted(tmp_path):
    recs = [_sample(i, True if i else False) for i in range(3)]
    sm = jaxeval.load(_run(tmp_path, "m", "t", recs))
    assert sm.scores.tolist() == [[0, 1, 1]]
    assert "true/false metric values read as 1/0" in sm.metadata["conversions"]


def _bad_lines(tmp_path, lines):
    d = tmp_path / "org__bad"
    d.mkdir()
    p = d / f"samples_arc_easy_{TS}.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(
    "lines, kwargs, match",
    [
        ([json.dumps(_sample(0, 1.0)), '{"doc_id": 1, "acc": 1.0', json.dumps(_sample(2, 1.0))],
         {}, [r"line 2: corrupt JSON"]),
        ([json.dumps(_sample(0, 1.0)), json.dumps(_sample(0, 0.0))], {},
         [r"line 2: duplicate doc_id 0 \(first on line 1\)"]),
        ([json.dumps({k: v for k, v in _sample(0, 1.0).items() if k not in ("acc", "acc_norm")}
                     | {"bleu": [["ref"], "pred"], "metrics": ["bleu"]})], {},
         [r"no usable metric field", r"Fields seen: \[.*'bleu'.*'doc_id'", "metric="]),
        ([json.dumps(_sample(0, 1.0, acc_norm="high"))], {"metric": "acc_norm"},
         [r"line 1: field 'acc_norm' is not a number for doc_id 0: 'high'"]),
        ([json.dumps(_sample(0, 1.0)), json.dumps(_sample(1, 2.0))], {},
         [r"line 2: field 'acc' must lie in \[0, 1\], got 2.0 for doc_id 1"]),
        ([json.dumps(_sample(0, float("nan")))], {},
         [r"line 1: field 'acc' must lie in \[0, 1\], got nan"]),
        ([json.dumps(_sample(0, 1.0)), json.dumps({"acc": 1.0})], {},
         [r"line 2: missing field 'doc_id'"]),
        ([json.dumps(_sample(0, 1.0)), json.dumps({k: v for k, v in _sample(1, 1.0).items()
                                                   if k != "acc"})], {},
         [r"line 2: missing field 'acc' for doc_id 1"]),
        ([json.dumps(_sample(0, 1.0))], {"metric": "f1"},
         [r"line 1: no field 'f1' \(metric fields: \['acc', 'acc_norm'\]\)"]),
        (["[1, 2]"], {}, [r"line 1: expected a JSON object, got list"]),
        ([""], {}, [r"no samples \(empty file\)"]),
    ],
)
def test_lm_eval_refusals_name_file_line_field_and_problem(tmp_path, lines, kwargs, match):
    p = _bad_lines(tmp_path, lines)
    _raises([re.escape(str(p))] + match, jaxeval.load, p, **kwargs)


def test_lm_eval_unaligned_doc_hashes_refused(tmp_path):
    _run(tmp_path, "org__a", "arc_easy", [_sample(i, 1.0) for i in range(3)])
    other = [_sample(i, 1.0) for i in range(3)]
    other[1]["doc_hash"] = "somethingelse"
    b = _run(tmp_path, "org__b", "arc_easy", other)
    _raises([re.escape(str(b)), "doc_id 1 has field 'doc_hash'", "not aligned on doc_id"],
            jaxeval.load, tmp_path)


def test_lm_eval_results_json_refused(tmp_path):
    p = _write(tmp_path / f"results_{TS}.json", json.dumps({"results": {"arc_easy": {}}}))
    _raises([re.escape(str(p)), r"not a samples_\*.jsonl \(or .jsonl.gz\) file",
             "--log_samples"], jaxeval.load, p)


def test_lm_eval_empty_directory_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    _raises([re.escape(str(tmp_path)), r"no samples_\*.jsonl files", "--log_samples"],
            jaxeval.load, tmp_path)


# ------------------------------------------------------------------------ npz
def test_to_npz_round_trips_through_load(tmp_path):
    sm = ScoreMatrix(
        np.array([[1.0, np.nan, 0.25], [0.0, 1.0, 1.0]]),
        models=["a", "b"], items=["x", "y", "z"], target=[0.3, 0.7], source="mine",
        metadata={"note": "hello", "arr": np.arange(3)},
    )
    p = sm.to_npz(tmp_path / "m")
    assert p.name == "m.npz"
    back = jaxeval.load(p)
    for f in ("scores", "mask", "models", "items", "target"):
        np.testing.assert_array_equal(getattr(back, f), getattr(sm, f))
    assert back.scores.dtype == np.float32 and back.target.dtype == np.float32
    assert back.source == "mine" and back.metadata["note"] == "hello"
    assert back.metadata["arr"] == [0, 1, 2]
    assert back.metadata["conversions"] == sm.metadata["conversions"]
    # A bundled dataset round-trips too (names, licence and all).
    ds = jaxeval.load("oll2_musr")
    b2 = jaxeval.load(ds.to_npz(tmp_path / "musr.npz"))
    np.testing.assert_array_equal(b2.scores, ds.scores)
    assert b2.models.tolist() == ds.models.tolist() and b2.metadata["licence"] == "MIT"
    assert b2.target is None


def test_npz_refusals(tmp_path):
    p = tmp_path / "bad.npz"
    np.savez(p, scores=np.array([[0, 2]], np.uint8))
    _raises([re.escape(str(p)), r"field 'scores' must lie in \[0, 1\]; found 2.0"], jaxeval.load, p)
    # a fill value in cells the mask leaves unobserved is not data: accepted, as for floats
    np.savez(p, scores=np.array([[1, 255]], np.uint8), mask=np.array([[True, False]]))
    sm = jaxeval.load(p)
    assert sm.scores.tolist() == [[1.0, 0.0]] and sm.mask.tolist() == [[True, False]]
    np.savez(p, scores=np.array([[1.0, -np.inf]]), mask=np.array([[True, False]]))
    assert jaxeval.load(p).mask.tolist() == [[True, False]]
    (tmp_path / "text.npz").write_text("model,q1\na,1\n")
    _raises([r"text.npz: not a readable .npz file", "not the zip signature"], jaxeval.load,
            tmp_path / "text.npz")
    np.savez(p, other=np.zeros(2))
    _raises([re.escape(str(p)), r"missing field 'scores' \(fields present: \['other'\]\)"],
            jaxeval.load, p)
    np.savez(p, scores=np.zeros((2, 2)), mask=np.ones((2, 3), bool))
    _raises([re.escape(str(p)), r"field 'mask' has shape \(2, 3\), expected \(2, 2\)"],
            jaxeval.load, p)
    np.savez(p, scores=np.array([[0.5, np.nan]]), mask=np.ones((1, 2), bool))
    _raises([re.escape(str(p)), "field 'scores' has 1 NaN cells marked observed"], jaxeval.load, p)
    np.savez(p, scores=np.zeros((2, 2)), models=np.array(["a", "a"]))
    _raises([re.escape(str(p)), "field 'models' has duplicate names"], jaxeval.load, p)
    np.savez(p, scores=np.array([[0.5, 1.25]], np.float32))
    _raises([re.escape(str(p)), r"field 'scores' must lie in \[0, 1\]; found 1.25 at",
             r"row 0, column 1 \(range 0.5..1.25\)"], jaxeval.load, p)
    np.savez(p, scores=np.zeros((1, 2)), items=np.array(["q", "q"]))
    _raises([re.escape(str(p)), "field 'items' has duplicate names"], jaxeval.load, p)
    np.savez(p, scores=np.zeros((2, 2)), models=np.array(["a", "b", "c"]))
    _raises([re.escape(str(p)), "field 'models' must be a 1-D array of 2 names"], jaxeval.load, p)
    np.savez(p, scores=np.zeros((0, 4)))
    _raises([re.escape(str(p)), "field 'scores' is empty"], jaxeval.load, p)
    np.savez(p, scores=np.zeros(4))
    _raises([re.escape(str(p)), "field 'scores' must be 2-D"], jaxeval.load, p)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    _raises([r"junk.npz: not a readable .npz file"], jaxeval.load, tmp_path / "junk.npz")
    np.save(tmp_path / "arr.npy", np.zeros((2, 2)))
    (tmp_path / "arr.npy").rename(tmp_path / "arr.npz")
    _raises([r"arr.npz: not a readable .npz file.*a single array"], jaxeval.load,
            tmp_path / "arr.npz")
    good = jaxeval.ScoreMatrix(np.random.default_rng(0).uniform(size=(40, 50))).to_npz(
        tmp_path / "good.npz")
    raw = bytearray(good.read_bytes())
    start = raw.index(b"scores.npy") + 200  # inside the compressed member's data
    raw[start:start + 64] = bytes(64)
    (tmp_path / "flipped.npz").write_bytes(bytes(raw))
    _raises([r"flipped.npz: not a readable .npz file"], jaxeval.load, tmp_path / "flipped.npz")


def test_every_shared_npz_loads(shared_data):
    files = sorted(shared_data.glob("*.npz"))
    assert len(files) >= 13
    for f in files:
        sm = jaxeval.load(f, duplicate_names="rename")
        assert sm.scores.dtype == np.float32 and sm.n_models >= 100
    oll = shared_data / "benchpred_oll2_musr.npz"
    _raises([re.escape(str(oll)), "field 'models' has duplicate names",
             "duplicate_names='rename'"], jaxeval.load, oll)


def test_npz_full_score_pct_becomes_target(shared_data):
    path = shared_data / "metabench_oll1_arc_selected.npz"
    sm = jaxeval.load(path, duplicate_names="rename")
    assert sm.target is not None and sm.target.shape == (sm.n_models,)
    with np.load(path, allow_pickle=False) as raw:  # rows keep the file's order
        pct = np.asarray(raw["full_score_pct"], np.float64)
    np.testing.assert_allclose(sm.target, pct / 100.0, equal_nan=True)
    fin = sm.target[np.isfinite(sm.target)]
    assert fin.size and 0 <= fin.min() and fin.max() <= 1
    assert any("full_score_pct / 100" in c for c in sm.metadata["conversions"])


def test_load_dispatch_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a bundled dataset"):
        jaxeval.load(tmp_path / "nothing.csv")
    _raises([r"cannot tell the format", r"'\.xyz'"], jaxeval.load, _write(tmp_path / "a.xyz", ""))
    with pytest.raises(TypeError, match="load: expected a dataset name, a path"):
        jaxeval.load(None)
    with pytest.raises(TypeError, match=r"bundled dataset; options \['sep'\]"):
        jaxeval.load("oll2_musr", sep=";")


def test_table_encoding_and_separator_hints(tmp_path):
    """A file that is not UTF-8 and a table written with another separator get a message
    naming the file and what to do, not a codec traceback or a layout complaint."""
    latin = tmp_path / "latin.csv"
    latin.write_bytes("model,item,score\nmod\xe8le,q1,1\n".encode("latin-1"))
    _raises([r"latin\.csv: not UTF-8 text", "re-save the table as UTF-8"], jaxeval.load, latin)
    blob = tmp_path / "blob.csv"
    blob.write_bytes(bytes(range(128, 256)) * 4)
    _raises([r"blob\.csv: not UTF-8"], jaxeval.load, blob)
    semi = _write(tmp_path / "semi.csv", "model;q1;q2\na;1;0\nb;0;1\n")
    _raises([r"semi\.csv: the header is one column", r"pass sep=';'"], jaxeval.load, semi)
    assert jaxeval.load(semi, sep=";").shape == (2, 2)
    comma = _write(tmp_path / "comma.csv", "model;q1;q2\na;0,5;1\nb;0;1\n")  # decimal commas
    _raises([r"comma\.csv: malformed table", r"pass sep=';'"], jaxeval.load, comma)
    # a two-character sep is no separator: pandas took it as a regular expression, and
    # the check of truncated rows (one character only) was skipped -- a short last row
    # read as unscored items
    tsv = _write(tmp_path / "short.csv", "model\tq1\tq2\tq3\na\t1\t0\t1\nb\t1\t1\n")
    _raises([r"line 3 has 3 fields, the header 4"], jaxeval.load, tsv, sep="\t")
    _raises([r"sep: expected one character, got '\\\\t' \(for a tab pass"],
            jaxeval.load, tsv, sep="\\t")
    _raises([r"sep: expected one character, got ';;'"], jaxeval.load, semi, sep=";;")


def test_long_table_with_other_column_names_says_it_was_read_as_wide(tmp_path):
    p = _write(tmp_path / "l.csv", "Model,Item,Score\nm1,q1,1\nm1,q2,0\nm2,q1,1\n")
    _raises([r"column 'Item' is not a number: 'q1'; read as a wide table",
             r"pass layout='long' with model_col=, item_col=, score_col="], jaxeval.load, p)
    sm = jaxeval.load(p, layout="long", model_col="Model", item_col="Item", score_col="Score")
    assert sm.shape == (2, 2) and sm.mask.tolist() == [[True, True], [True, False]]
    # a wide table (it has the model column) with a bad cell is not sent to the long layout
    w = _write(tmp_path / "w.csv", "model,q1,q2\nm1,1,abc\nm2,0,1\n")
    msg = _raises([r"column 'q2' is not a number: 'abc'"], jaxeval.load, w)
    assert "read as a wide table" not in msg


def test_table_index_columns_are_not_items(tmp_path):
    """A DataFrame index written beside a named model column (to_csv's unnamed first
    column, a filtered frame's row numbers in Parquet) is not a scored item."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"model": ["a", "b"], "q1": [1, 0], "q2": [0, 1]})
    df.to_csv(tmp_path / "w.csv")  # index=True: an unnamed first column 0, 1
    sm = jaxeval.load(tmp_path / "w.csv")
    assert sm.items.tolist() == ["q1", "q2"] and sm.models.tolist() == ["a", "b"]
    assert sm.scores.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert any("unnamed first column ignored" in c for c in sm.metadata["conversions"])
    pytest.importorskip("pyarrow")
    d = pd.DataFrame({"model": list("abcd"), "q1": [1, 0, 1, 0]}).sample(frac=1, random_state=1)
    d[d.index < 2].to_parquet(tmp_path / "w.parquet")
    sm = jaxeval.load(tmp_path / "w.parquet")
    assert sm.items.tolist() == ["q1"] and sorted(sm.models.tolist()) == ["a", "b"]
    # without a model column an unnamed integer index may be the model ids: kept
    pd.DataFrame({"q1": [1, 0], "q2": [0, 1]}, index=[101, 205]).to_parquet(tmp_path / "i.parquet")
    sm = jaxeval.load(tmp_path / "i.parquet")
    assert sm.models.tolist() == ["101", "205"] and sm.items.tolist() == ["q1", "q2"]
    # a filtered frame whose model column has another name (the first column): the
    # row numbers are dropped, the first column names the models
    df = pd.DataFrame({"name": list("abcde"), "q1": [1, 0, 1, 0, 1], "q2": [0, 1, 1, 0, 0]})
    df.iloc[[0, 1, 3]].to_parquet(tmp_path / "n.parquet")
    sm = jaxeval.load(tmp_path / "n.parquet")
    assert sm.models.tolist() == ["a", "b", "d"] and sm.items.tolist() == ["q1", "q2"]
    # a table indexed by model (pivot) keeps its index as the model column
    wide = pd.DataFrame({"model": ["a", "b"], "item": ["x", "y"], "score": [1, 0]}).pivot(
        index="model", columns="item", values="score").fillna(0)
    wide.to_parquet(tmp_path / "p.parquet")
    assert jaxeval.load(tmp_path / "p.parquet").models.tolist() == ["a", "b"]


def test_lm_eval_doc_ids_written_as_numbers_and_text_are_refused(tmp_path):
    _run(tmp_path, "m1", "arc_easy", [_sample(i, 1.0, 1.0) for i in range(2)])
    _run(tmp_path, "m2", "arc_easy", [dict(_sample(i, 1.0, 1.0), doc_id=str(i)) for i in range(2)])
    _raises([r"doc_id '0' both as 0 and as '0'", r"\['m1', 'm2'\]"], load_lm_eval, tmp_path)
    _raises([r"model='x' names the one model", "folder of model folders"], load_lm_eval,
            tmp_path, model="x")
    # within one file the refusal names both lines, whichever form comes first
    one = tmp_path / "one"
    for first, second in [(0, "0"), ("-1", -1)]:
        lines = [dict(_sample(0, 1.0, 1.0), doc_id=first), _sample(5, 1.0, 1.0),
                 dict(_sample(0, 0.0, 0.0), doc_id=second)]
        _run(one, "m", "arc_easy", lines)
        _raises([rf"line 3: doc_id {second!r} names the same item as doc_id {first!r} on "
                 r"line 1 \(a number on one line, text on the other\)"],
                load_lm_eval, one / "m")
    _run(one, "m", "arc_easy", [dict(_sample(7, 1.0, 1.0), doc_id="007"), _sample(7, 0.0, 0.0)])
    assert load_lm_eval(one / "m").items.tolist() == ["7", "007"]  # two names: two items


def test_load_refuses_options_for_a_score_matrix():
    sm = jaxeval.ScoreMatrix(np.eye(3))
    assert jaxeval.load(sm) is sm
    with pytest.raises(TypeError, match=r"options \['layout'\] are for files"):
        jaxeval.load(sm, layout="long")


def test_lm_eval_unicode_line_separators_and_bom_are_read(tmp_path):
    """The harness writes samples with ensure_ascii=False: U+2028 / U+2029 / U+0085 inside
    a string are not line ends in JSON Lines; a BOM at the start is not corrupt JSON."""
    recs = [_sample(0, 1.0, doc={"question": "a\u2028b\u2029c\x85d"}), _sample(1, 0.0)]
    p = tmp_path / "m" / f"samples_arc_easy_{TS}.jsonl"
    p.parent.mkdir()
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs),
                 encoding="utf-8")
    assert "\u2028" in p.read_text(encoding="utf-8")
    sm = jaxeval.load(p)
    assert sm.scores.tolist() == [[1.0, 0.0]] and sm.items.tolist() == ["0", "1"]
    q = tmp_path / "bom" / f"samples_arc_easy_{TS}.jsonl"
    q.parent.mkdir()
    q.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in recs).encode())
    assert jaxeval.load(q).scores.tolist() == [[1.0, 0.0]]
    # a real corrupt line still names its (correct) line number
    bad = tmp_path / "bad" / f"samples_arc_easy_{TS}.jsonl"
    bad.parent.mkdir()
    bad.write_text(json.dumps(recs[0], ensure_ascii=False) + "\n{oops\n", encoding="utf-8")
    _raises([str(bad), "line 2", "corrupt JSON"], jaxeval.load, bad)


def test_npz_byte_string_names_are_utf8(tmp_path):
    p = tmp_path / "bytes.npz"
    np.savez(p, scores=np.eye(2, dtype=np.uint8),
             models=np.array(["modèle-a".encode(), b"model-b"]), items=np.array([b"q1", b"q2"]))
    sm = jaxeval.load(p)
    assert sm.models.tolist() == ["modèle-a", "model-b"] and sm.items.tolist() == ["q1", "q2"]
    q = tmp_path / "latin1.npz"
    np.savez(q, scores=np.eye(2, dtype=np.uint8), models=np.array([b"\xe9t\xe9", b"b"]))
    _raises([str(q), "'models'", "not UTF-8"], jaxeval.load, q)


def test_wide_table_whose_first_column_holds_scores_is_refused(tmp_path):
    """pd.DataFrame(S, columns=items).to_csv(index=False) has no model column: taking its
    first item for the model names would drop that item silently."""
    p = _write(tmp_path / "graded.csv", "q1,q2,q3\n0.25,1,0\n0.75,0,1\n0.5,0.5,0.5\n")
    _raises([str(p), "no 'model' column", "'q1'", "model_col='q1'"], jaxeval.load, p)
    # the caller who does mean it says so
    sm = jaxeval.load(p, model_col="q1")
    assert sm.models.tolist() == ["0.25", "0.75", "0.5"] and sm.items.tolist() == ["q2", "q3"]
    # a first column of names (or of ids outside [0, 1]) is still taken as before
    ids = jaxeval.load(_write(tmp_path / "ids.csv", "id,q1\n7,1\n8,0\n"))
    assert ids.models.tolist() == ["7", "8"] and ids.items.tolist() == ["q1"]
    # and so are integer ids 0 / 1 of one or two models (a parquet pivot's index)
    two = jaxeval.load(_write(tmp_path / "two.csv", "model_id,q1,q2\n0,1,0\n1,0,1\n"))
    assert two.models.tolist() == ["0", "1"] and two.items.tolist() == ["q1", "q2"]
    one = jaxeval.load(_write(tmp_path / "one.csv", "model_id,q1,q2\n1,0.5,1\n"))
    assert one.models.tolist() == ["1"]
    # three 0 / 1 values cannot be distinct names: an item column
    _raises(["no 'model' column"], jaxeval.load,
            _write(tmp_path / "bin.csv", "q1,q2\n1,0\n0,1\n1,1\n"))


def test_transposed_wide_table_is_refused(tmp_path):
    """Items as rows and models as columns (a first header such as 'item') would load
    with models and items swapped: refused, with the way out named."""
    text = "item,gpt-a,llama-b,mistral-c\nq1,1,0,1\nq2,0,0,1\nq3,1,1,0\n"
    for head in ("item", "Items", "question_id", "doc_id", "PromptName"):
        p = _write(tmp_path / f"{head}.csv", text.replace("item", head, 1))
        _raises([str(p), f"first column is {head!r}", "looks transposed", "DataFrame.T",
                 f"model_col={head!r}"], jaxeval.load, p)
    sm = jaxeval.load(tmp_path / "item.csv", model_col="item")  # the caller who means it
    assert sm.models.tolist() == ["q1", "q2", "q3"]
    # headers that merely contain such a word are item names as before
    ok = jaxeval.load(_write(tmp_path / "ok.csv", "model,item_1,item_2\na,1,0\nb,0,1\n"))
    assert ok.items.tolist() == ["item_1", "item_2"]
    ok = jaxeval.load(_write(tmp_path / "ok2.csv", "name,items_hard,q2\na,1,0\nb,0,1\n"))
    assert ok.models.tolist() == ["a", "b"]


def test_a_table_cut_off_mid_cell_warns(tmp_path):
    """A CSV ending without a line break may have lost the end of its last cell (0.75
    cut to "0." reads as 0 with nothing else amiss): the loader says so; a file ending
    with a newline (any style) and Parquet say nothing."""
    import warnings

    cut = _write(tmp_path / "cut.csv", "model,q1,q2\na,1,0\nb,0,0.")
    with pytest.warns(UserWarning, match=r"cut\.csv: the file does not end with a line break"):
        sm = jaxeval.load(cut)
    assert sm.scores.tolist() == [[1.0, 0.0], [0.0, 0.0]]  # loaded all the same
    long_cut = _write(tmp_path / "long.csv", "model,item,score\na,q1,1\na,q2,0.")
    with pytest.warns(UserWarning, match="does not end with a line break"):
        jaxeval.load(long_cut)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i, end in enumerate(("\n", "\r\n", "\r")):
            ok = tmp_path / f"ok{i}.csv"
            ok.write_bytes(f"model,q1,q2{end}a,1,0{end}b,0,0.75{end}".encode())
            assert jaxeval.load(ok).scores[1, 1] == pytest.approx(0.75)
        pd = pytest.importorskip("pandas")
        pytest.importorskip("pyarrow")
        pq = tmp_path / "t.parquet"
        pd.DataFrame({"model": ["a", "b"], "q1": [1.0, 0.0]}).to_parquet(pq)
        assert jaxeval.load(pq).shape == (2, 1)


def test_wide_table_of_one_or_two_models_keeps_its_first_item(tmp_path):
    """A first column of 0/1 scores under an item's header is an item even with one or
    two rows (it was taken for model names "1" / "0" and dropped); under an index's
    header (empty, 'index') it stays the names."""
    for text in ("q1,q2,q3\n1,0,1\n", "q1,q2,q3\n1,0,1\n0,1,1\n", "0,1,2\n1,0,1\n",
                 "id_3,q2,q3\n1,0,1\n0,1,1\n", "name_1,q2\n1,0\n"):
        p = _write(tmp_path / "w.csv", text)
        _raises([r"first column '(q1|0|id_3|name_1)', which would name the models, holds "],
                jaxeval.load, p)
    named = _write(tmp_path / "n.csv", "model,q1,q2,q3\nm1,1,0,1\n")
    assert jaxeval.load(named).items.tolist() == ["q1", "q2", "q3"]
    for head in ("", "index", "Unnamed: 0", "model id", "ModelName", "name", "ids", "run_id",
                 "hf_model_id", "model.name"):
        p = _write(tmp_path / "i.csv", f"{head},q1,q2\n0,1,0\n1,0,1\n")
        sm = jaxeval.load(p)
        assert sm.models.tolist() == ["0", "1"] and sm.items.tolist() == ["q1", "q2"]


def test_lm_eval_task_a_model_lacks_is_unobserved_like_without_task(tmp_path):
    """task= with a model folder lacking one of the tasks masks that model's documents
    (as the same folder does without task=), refuses it under missing='error', and
    refuses a task no folder has."""
    _run(tmp_path, "m1", "t1", [_sample(i, 1.0) for i in range(2)])
    _run(tmp_path, "m1", "t2", [_sample(i, 0.0) for i in range(2)])
    _run(tmp_path, "m2", "t1", [_sample(i, 0.0) for i in range(2)])
    every = jaxeval.load(tmp_path)
    both = jaxeval.load(tmp_path, task=["t1", "t2"])
    assert both.items.tolist() == every.items.tolist() == ["t1/0", "t1/1", "t2/0", "t2/1"]
    assert both.mask.tolist() == every.mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert np.array_equal(both.scores, every.scores)
    _raises(["not aligned", "missing='mask'"], jaxeval.load, tmp_path, task=["t1", "t2"],
            missing="error")
    _raises([r"no samples file for task\(s\) \['t3'\]", r"tasks present: \['t1', 't2'\]"],
            jaxeval.load, tmp_path, task=["t1", "t3"])
    with pytest.warns(UserWarning, match=r"\['m2'\] have none of the tasks \['t2'\]"):
        only = jaxeval.load(tmp_path, task="t2")
    assert only.mask.tolist() == [[True, True], [False, False]]


def test_lm_eval_odd_values_and_names(tmp_path):
    """An integer too large for a float is refused as out of range (it raised a bare
    OverflowError); an upper-case .JSONL file is a samples file."""
    p = _run(tmp_path, "m", "t", [{"doc_id": 0, "acc": 10**400}])
    _raises([r"line 1: field 'acc' must lie in \[0, 1\], got inf"], jaxeval.load, p)
    up = tmp_path / "u" / f"samples_t_{TS}.JSONL"
    up.parent.mkdir()
    up.write_text(json.dumps({"doc_id": 0, "acc": 1.0}) + "\n")
    sm = jaxeval.load(up)
    assert sm.scores.tolist() == [[1.0]] and sm.metadata["tasks"] == ["t"]


def test_table_error_positions_are_the_file_s(tmp_path):
    """A bad byte past pandas' first decode chunk is reported at its offset in the
    file; a file ending inside a quoted cell is said to be cut off."""
    bad = tmp_path / "u.csv"
    bad.write_bytes(b"model,q1\n" + b"a,1\n" * 3000 + b"m\xe9,1\n")
    _raises([r"not UTF-8 text \(invalid continuation byte at byte 12010\)"], jaxeval.load, bad)
    cut = _write(tmp_path / "q.csv", 'model,q1\nm0,1\nm1,"b')
    _raises([r"q\.csv: a quoted cell is never closed", "cut off"], jaxeval.load, cut)


def test_table_messages_name_the_file_s_lines(tmp_path):
    """Blank lines and line breaks inside quoted cells shift records from lines: the
    messages name the line the bad record starts on (they counted records); Parquet
    rows are named by their position from 0."""
    blank = _write(tmp_path / "b.csv", "model,item,score\n\n\na,q1,x\n")
    _raises([r"b\.csv: line 4, column 'score' is not a number: 'x'"], jaxeval.load, blank)
    quoted = _write(tmp_path / "q.csv", 'model,item,score\n"m\n1",a,1\nm2,a\n')
    _raises([r"line 4 has 2 fields, the header 3"], jaxeval.load, quoted)
    wide = _write(tmp_path / "w.csv", 'model,q1\n"a\nb",1\n\nc,2\n')
    # (a wide table has no field 'score': its cell is named by model and column)
    _raises([r"line 5 \(model 'c'\), column 'q1': the score must lie in \[0, 1\], got 2\.0 "
             r"\(percent\? divide by 100 first\)"], jaxeval.load, wide)
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pq = tmp_path / "t.parquet"
    pd.DataFrame({"model": ["a", "b"], "q1": [1.0, 3.0]}).to_parquet(pq)
    _raises([r"row 1 \(from 0\) \(model 'b'\), column 'q1'"], jaxeval.load, pq)


def test_lm_eval_review_follow_ups(tmp_path):
    """missing='error' with a model folder holding none of the tasks asked for names it
    (it raised a bare KeyError); upper-case .JSONL files inside folders are read (one
    model was dropped silently)."""
    _run(tmp_path / "a", "m1", "t1", [_sample(i, 1.0) for i in range(2)])
    _run(tmp_path / "a", "m1", "t2", [_sample(i, 0.0) for i in range(2)])
    _run(tmp_path / "a", "m2", "t1", [_sample(i, 0.0) for i in range(2)])
    with pytest.warns(UserWarning, match="none of the tasks"):
        _raises(["model 'm2' lacks", "no samples file of task 't2'"],
                jaxeval.load, tmp_path / "a", task="t2", missing="error")
    # a model with some of the tasks: the message names the task it lacks, not a file of
    # another task
    _raises(["model 'm2' lacks doc_id 't2/0' \\(no samples file of task 't2'\\)"],
            jaxeval.load, tmp_path / "a", missing="error")
    # a dangling link where a samples file should be is reported, not skipped
    (tmp_path / "a" / "m2" / f"samples_t2_{TS}.jsonl").symlink_to(tmp_path / "gone.jsonl")
    _raises(["cannot read the file"], jaxeval.load, tmp_path / "a")
    root = tmp_path / "b"
    _run(root, "m1", "t", [_sample(i, 1.0) for i in range(2)])
    up = root / "m2" / f"samples_t_{TS}.JSONL"
    up.parent.mkdir()
    up.write_text("".join(json.dumps(_sample(i, 0.0)) + "\n" for i in range(2)))
    sm = jaxeval.load(root)
    assert sm.models.tolist() == ["m1", "m2"] and sm.scores.tolist() == [[1, 1], [0, 0]]


def test_table_review_follow_ups(tmp_path):
    """The byte offset counts a UTF-8 BOM; the unterminated-quote message leaves out
    pandas' 0-based "row"; a file ending with a closing quote does not warn."""
    import warnings

    bad = tmp_path / "bom.csv"
    bad.write_bytes(b"\xef\xbb\xbfmodel,q1\nm\xe9,1\n")
    _raises([r"not UTF-8 text \(invalid continuation byte at byte 13\)"], jaxeval.load, bad)
    cut = _write(tmp_path / "q.csv", 'model,q1\nm0,1\nm1,"b')
    with pytest.raises(ValueError) as exc:
        jaxeval.load(cut)
    assert "never closed" in str(exc.value) and "row 2" not in str(exc.value)
    quoted = _write(tmp_path / "end.csv", 'model,q1\n"a",1\n"b","0"')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jaxeval.load(quoted).scores.tolist() == [[1.0], [0.0]]
