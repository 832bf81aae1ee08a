"""Gaps a second, deeper mutation review of the lm-evaluation-harness reader (``_lmeval``)
and the file loaders (``_io``) found: each test fails on a plausible bug the rest of the
suite let through."""

import json
import re

import numpy as np
import pytest
from test_loaders import TS, _raises, _run, _sample

import jaxeval
from jaxeval import ScoreMatrix
from jaxeval._io import load_npz
from jaxeval._lmeval import load_lm_eval


def _plain(doc_id, **fields):
    """A bare samples line: doc_id and the given fields only."""
    return {"doc_id": doc_id, **fields}


# ------------------------------------------------------------ reading the lines
def test_lm_eval_whitespace_only_lines_are_blank_not_corrupt(tmp_path):
    """A CRLF file with a blank line, or a line of spaces, holds no record."""
    p = tmp_path / "m" / f"samples_t_{TS}.jsonl"
    p.parent.mkdir()
    body = "\r\n".join(json.dumps(_plain(i, acc=float(i))) for i in range(2))
    p.write_bytes(body.replace("\r\n", "\r\n  \r\n\r\n").encode() + b"\r\n")
    sm = jaxeval.load(p)
    assert sm.scores.tolist() == [[0.0, 1.0]] and sm.items.tolist() == ["0", "1"]


def test_lm_eval_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path):
    p = tmp_path / "m" / f"samples_t_{TS}.jsonl"
    p.parent.mkdir()
    p.write_bytes(b'{"doc_id": 0, "acc": 1.0, "doc": "caf\xe9"}\n')
    _raises([re.escape(str(p)), "cannot read the file", "UnicodeDecodeError"], jaxeval.load, p)


# ------------------------------------------------------------ choosing the metric
def test_lm_eval_several_named_metrics_outside_the_defaults_need_metric(tmp_path):
    """The fallback to the ``metrics`` list is for exactly one name: with two, neither is
    guessed."""
    p = _run(tmp_path, "m", "t", [_plain(i, metrics=["bleu", "rouge"], bleu=0.5, rouge=0.25)
                                  for i in range(2)])
    _raises([re.escape(str(p)), "no usable metric field", "metric="], jaxeval.load, p)
    assert jaxeval.load(p, metric="rouge").scores.tolist() == [[0.25, 0.25]]


def test_lm_eval_mc2_is_a_default_metric(tmp_path):
    """truthfulqa-style lines with ``mc1`` and ``mc2`` (and no ``metrics`` list): the
    first of DEFAULT_METRICS present, mc2, is read."""
    p = _run(tmp_path, "m", "truthfulqa", [_plain(i, mc2=0.25 * i, mc1=1.0) for i in range(3)])
    sm = jaxeval.load(p)
    assert sm.metadata["metric"] == {"truthfulqa": "mc2"}
    assert sm.scores.tolist() == [[0.0, 0.25, 0.5]]


def test_lm_eval_an_absent_metric_lists_the_fields_it_could_be(tmp_path):
    """Without a ``metrics`` list the message lists the candidate fields (not None)."""
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0, filter="none", doc_hash="h")])
    _raises([re.escape(str(p)), r"line 1: no field 'f1' \(metric fields: \['acc'\]\)"],
            jaxeval.load, p, metric="f1")


def test_lm_eval_the_same_task_with_different_default_metrics_is_refused(tmp_path):
    _run(tmp_path, "a", "t", [_plain(i, acc=1.0) for i in range(2)])
    b = _run(tmp_path, "b", "t", [_plain(i, exact_match=0.0) for i in range(2)])
    _raises([re.escape(str(b)), "default metric is 'exact_match'", "use 'acc'", "metric="],
            jaxeval.load, tmp_path)


# ------------------------------------------------------------------- filters
def test_lm_eval_lines_without_a_filter_field_are_filter_none(tmp_path):
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0), _plain(1, acc=0.0, filter="none")])
    assert jaxeval.load(p).scores.tolist() == [[1.0, 0.0]]
    assert jaxeval.load(p, filter="none").scores.tolist() == [[1.0, 0.0]]


def test_lm_eval_three_filters_need_choosing(tmp_path):
    recs = [_plain(i, exact_match=float(k == 1), filter=f)
            for i in range(2) for k, f in enumerate(("strict", "flexible", "maj@8"))]
    p = _run(tmp_path, "m", "gsm8k", recs)
    _raises([re.escape(str(p)), "field 'filter' takes several values",
             r"\['flexible', 'maj@8', 'strict'\]"], jaxeval.load, p)
    assert jaxeval.load(p, filter="flexible").scores.tolist() == [[1.0, 1.0]]


def test_lm_eval_a_filter_that_is_neither_a_name_nor_a_mapping_is_a_type_error(tmp_path):
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0)])
    with pytest.raises(TypeError, match=r"filter: expected a filter name or a \{task: filter\} "
                       "mapping, got list"):
        jaxeval.load(p, filter=["none"])


def test_lm_eval_a_task_left_out_of_the_filter_mapping_is_read_as_without_filter(tmp_path):
    """Its one filter, whatever its name, is read (not a filter called 'none')."""
    _run(tmp_path, "m", "arc", [_plain(i, acc=1.0, filter="only-one") for i in range(2)])
    _run(tmp_path, "m", "gsm8k", [_plain(i, exact_match=float(f == "strict"), filter=f)
                                  for i in range(2) for f in ("strict", "flexible")])
    sm = jaxeval.load(tmp_path / "m", filter={"gsm8k": "strict"})
    assert sm.items.tolist() == ["arc/0", "arc/1", "gsm8k/0", "gsm8k/1"]
    assert sm.scores.tolist() == [[1.0, 1.0, 1.0, 1.0]]


# ------------------------------------------------------------------- values
def test_lm_eval_a_negative_metric_value_is_refused(tmp_path):
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0), _plain(1, acc=-0.25)])
    _raises([re.escape(str(p)), r"line 2: field 'acc' must lie in \[0, 1\], got -0.25 for "
             "doc_id 1"], jaxeval.load, p)


def test_lm_eval_a_float_doc_id_is_refused(tmp_path):
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0), _plain(1.0, acc=0.0)])
    _raises([re.escape(str(p)), "line 2: field 'doc_id' must be an int or a string, got 1.0"],
            jaxeval.load, p)


def test_lm_eval_bool_note_survives_an_older_run_being_dropped(tmp_path):
    _run(tmp_path, "m", "t", [_plain(i, acc=bool(i)) for i in range(2)])
    _run(tmp_path, "m", "t", [_plain(i, acc=1.0) for i in range(2)],
         ts="2025-01-01T00-00-00.000000")
    sm = jaxeval.load(tmp_path / "m", runs="latest")
    assert sm.scores.tolist() == [[0.0, 1.0]]
    assert "true/false metric values read as 1/0" in sm.metadata["conversions"]
    assert any("1 older run(s)" in c for c in sm.metadata["conversions"])


# ------------------------------------------------------------------ alignment
def test_lm_eval_doc_hash_in_one_run_only_is_no_conflict(tmp_path):
    """Only two different doc_hash values refuse a doc_id; a run without hashes (or with
    other prompt hashes: another few-shot prompt) is aligned on doc_id alone."""
    _run(tmp_path, "a", "t", [_sample(i, 1.0) for i in range(2)])
    _run(tmp_path, "b", "t", [_plain(i, acc=0.0) for i in range(2)])
    _run(tmp_path, "c", "t", [_sample(i, 0.0, prompt_hash=f"other{i}") for i in range(2)])
    sm = jaxeval.load(tmp_path)
    assert sm.models.tolist() == ["a", "b", "c"]
    assert sm.scores.tolist() == [[1, 1], [0, 0], [0, 0]] and sm.is_complete


def test_lm_eval_doc_hash_conflict_names_each_file_with_its_own_hash(tmp_path):
    a = _run(tmp_path, "a", "t", [_sample(i, 1.0) for i in range(2)])
    other = [_sample(i, 1.0) for i in range(2)]
    other[1]["doc_hash"] = "somethingelse"
    b = _run(tmp_path, "b", "t", other)
    msg = _raises(["not aligned on doc_id"], jaxeval.load, tmp_path)
    assert (f"{b}: doc_id 1 has field 'doc_hash' 'somethingels' but {a} has 'hash0001'"
            in msg), msg


def test_lm_eval_absent_cells_are_counted_and_their_models_named(tmp_path):
    _run(tmp_path, "full", "t", [_plain(i, acc=1.0) for i in range(4)])
    _run(tmp_path, "half", "t", [_plain(i, acc=0.0) for i in (0, 3)])
    _run(tmp_path, "most", "t", [_plain(i, acc=0.0) for i in (0, 1, 2)])
    sm = jaxeval.load(tmp_path)
    note = [c for c in sm.metadata["conversions"] if "cells absent" in c]
    assert note == ["3 (model, doc_id) cells absent from the runs of ['half', 'most']: "
                    "unobserved (mask=False)"]
    assert sm.mask.sum(1).tolist() == [4, 2, 3]


# --------------------------------------------------------------- names and records
def test_lm_eval_model_name_for_a_model_folder_and_source_name(tmp_path):
    f = _run(tmp_path, "org__m", "t", [_plain(i, acc=1.0) for i in range(2)])
    sm = load_lm_eval(tmp_path / "org__m", model="mine", name="my-runs")
    assert sm.models.tolist() == ["mine"] and sm.source == "my-runs"
    assert sm.metadata["files"] == {"mine": [str(f)]}
    assert jaxeval.load(tmp_path).source == str(tmp_path)


# ----------------------------------------------------------------------- npz
def test_npz_bool_scores_are_noted_as_converted(tmp_path):
    p = tmp_path / "b.npz"
    np.savez(p, scores=np.array([[True, False]]))
    sm = load_npz(p)
    assert sm.scores.tolist() == [[1.0, 0.0]] and sm.scores.dtype == np.float32
    assert "bool 0/1 scores converted to float32" in sm.metadata["conversions"]


def test_npz_bad_duplicate_names_argument_is_refused(tmp_path):
    p = tmp_path / "d.npz"
    np.savez(p, scores=np.eye(2), models=np.array(["a", "a"]))
    with pytest.raises(ValueError, match="duplicate_names must be 'error' or 'rename', got 'x'"):
        load_npz(p, duplicate_names="x")


def test_npz_of_an_in_memory_matrix_is_named_by_its_path(tmp_path):
    """A matrix made from an array (source '<array>') is named by the file it was read
    from, not by the placeholder."""
    p = ScoreMatrix(np.eye(2)).to_npz(tmp_path / "a.npz")
    assert load_npz(p).source == str(p)
    assert load_npz(p, name="mine").source == "mine"


def test_npz_round_trip_keeps_the_saved_format_record(tmp_path):
    """An lm-eval matrix saved with to_npz keeps its own metadata (format included)."""
    f = _run(tmp_path, "m", "t", [_plain(i, acc=float(i % 2)) for i in range(3)])
    sm = jaxeval.load(f)
    back = jaxeval.load(sm.to_npz(tmp_path / "m.npz"))
    assert back.metadata["format"] == "lm-evaluation-harness samples"
    assert back.metadata["metric"] == {"t": "acc"}


# ------------------------------------------------------------------- dispatch
def test_load_reads_a_pq_suffix_as_parquet(tmp_path):
    """``.pq`` is a Parquet file (read by load_table), not an unknown format."""
    p = tmp_path / "t.pq"
    try:
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError:
        p.write_bytes(b"PAR1")
        with pytest.raises(ImportError, match="pandas"):
            jaxeval.load(p)
        return
    pd.DataFrame({"model": ["a", "b"], "q1": [1.0, 0.0]}).to_parquet(p)
    assert jaxeval.load(p).scores.tolist() == [[1.0], [0.0]]


# ------------------------------------------------------------------ fixes from this review
def test_lm_eval_gzip_samples_are_read_like_plain_ones(tmp_path):
    """A model folder holding ``samples_*.jsonl.gz`` beside a plain samples file loads
    both tasks (the compressed one was skipped without a word); a compressed file is
    loaded on its own too, and a truncated one is refused naming it."""
    import gzip

    plain = _run(tmp_path, "m", "u", [_sample(i, float(i % 2)) for i in range(3)])
    text = "".join(json.dumps(_sample(i, 1.0)) + "\n" for i in range(2)).encode()
    gz = tmp_path / "m" / f"samples_t_{TS}.jsonl.gz"
    gz.write_bytes(gzip.compress(text))
    sm = jaxeval.load(tmp_path / "m")
    assert sm.metadata["tasks"] == ["t", "u"]
    assert sm.items.tolist() == ["t/0", "t/1", "u/0", "u/1", "u/2"]
    np.testing.assert_array_equal(sm.scores, [[1, 1, 0, 1, 0]])
    assert sm.metadata["files"] == {"m": [str(gz), str(plain)]}
    one = jaxeval.load(gz)
    assert one.models.tolist() == ["m"] and one.items.tolist() == ["0", "1"]
    gz.write_bytes(gzip.compress(text)[:-9])
    _raises([re.escape(f"{gz}: cannot read the file (EOFError")], jaxeval.load, tmp_path / "m")


def test_lm_eval_a_filter_entry_for_a_task_left_out_by_task_is_ignored(tmp_path):
    """One ``{task: filter}`` mapping may serve several ``task=`` choices: an entry for
    a task the folder has but ``task=`` leaves out is no error; one for a task the
    folder lacks still is, naming the tasks there."""
    _run(tmp_path, "m", "arc", [_sample(i, 1.0) for i in range(2)])
    _run(tmp_path, "m", "gsm", [_sample(0, 1.0, filt="s"), _sample(0, 0.0, filt="f")])
    sm = jaxeval.load(tmp_path / "m", task="arc", filter={"gsm": "s"})
    assert sm.items.tolist() == ["0", "1"]
    _raises([re.escape(f"filter: no task ['mmlu'] in {tmp_path / 'm'}; the tasks there are "
                       "['arc', 'gsm']")], jaxeval.load, tmp_path / "m", task="arc",
            filter={"mmlu": "s"})


def test_lm_eval_documents_without_a_line_for_the_filter_are_recorded(tmp_path):
    """Documents a run logs under other filters only are not read from it, and the
    conversions say how many and which (they vanished without a record)."""
    p = _run(tmp_path, "m", "gsm", [_sample(0, 1.0, filt="s"), _sample(0, 0.0, filt="f"),
                                    _sample(1, 1.0, filt="s"), _sample(2, 1.0, filt="s")])
    sm = jaxeval.load(p, filter="f")
    assert sm.items.tolist() == ["0"]
    assert (f"task 'gsm': 2 doc_id(s) in 1 run(s) have no line with filter 'f' (e.g. [1, 2] "
            f"in {p}): not read from those runs") in sm.metadata["conversions"]
    assert not any("filter" in c for c in jaxeval.load(p, filter="s").metadata["conversions"])


def test_lm_eval_a_gzip_copy_beside_its_plain_file_is_one_run(tmp_path):
    """``gzip -k`` keeps the plain file beside its copy: the two are one run, read once
    and noted (not "2 runs of task"), and refused where their contents differ."""
    import gzip

    for model in ("m1", "m2"):
        p = _run(tmp_path, model, "arc", [_sample(i, float(i % 2)) for i in range(4)])
        p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
    sm = jaxeval.load(tmp_path)
    assert sm.shape == (2, 4) and sm.mask.all()
    note = [c for c in sm.metadata["conversions"] if ".jsonl.gz copies" in c]
    assert len(note) == 1 and note[0].startswith("2 .jsonl.gz copies of plain samples files")
    gz = tmp_path / "m2" / f"samples_arc_{TS}.jsonl.gz"
    gz.write_bytes(gzip.compress(b"{}"))
    _raises([re.escape(f"{gz}: a compressed copy of samples_arc_{TS}.jsonl whose contents "
                       "differ from it")], jaxeval.load, tmp_path)


def test_lm_eval_compares_only_the_gzip_copies_of_the_files_it_reads(tmp_path):
    """A compressed copy is checked against its plain file only where that file is read:
    a damaged copy of a task not asked for, or of an older run that ``runs='latest'``
    drops, does not stop the load (nor is it listed as a copy read once)."""
    import gzip

    p = _run(tmp_path, "m", "arc", [_sample(i, float(i % 2)) for i in range(4)])
    p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
    other = _run(tmp_path, "m", "gsm", [_sample(i, 1.0) for i in range(3)])
    other.with_name(other.name + ".gz").write_bytes(b"not gzip")
    old = _run(tmp_path, "m", "arc", [_sample(i, 0.0) for i in range(4)],
               ts="2024-01-01T00-00-00.000000")
    old.with_name(old.name + ".gz").write_bytes(gzip.compress(b"{}"))
    sm = jaxeval.load(tmp_path / "m", task="arc", runs="latest")
    assert sm.shape == (1, 4) and sm.scores[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    note = [c for c in sm.metadata["conversions"] if ".jsonl.gz copies" in c]
    assert note == [f"1 .jsonl.gz copies of plain samples files, the same contents, read "
                    f"once: {[str(p) + '.gz']}"]
    # the damaged copy of the task read is still refused
    with pytest.raises(ValueError, match="cannot read the file"):
        jaxeval.load(tmp_path / "m", task="gsm", runs="latest")
