"""Gaps a second deep mutation review of the lm-evaluation-harness reader (``_lmeval``)
found: the metric choice, task names from file names, ``runs='latest'``, the
``missing='error'`` message, the skipped-folder warnings and the notes in ``metadata``.
Each test fails on a plausible bug the rest of the suite let through."""

import gzip
import json
import re
import warnings

import pytest
from test_lmeval_io_deep_mutants import _plain
from test_loaders import TS, _raises, _run, _sample

import jaxeval
from jaxeval._lmeval import load_lm_eval


def _lines(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ------------------------------------------------------------ choosing the metric
def test_lm_eval_an_absent_metric_lists_the_lines_own_metrics_list(tmp_path):
    """With a ``metrics`` list on the line, the message lists it (not every other field)."""
    p = _run(tmp_path, "m", "t", [_plain(0, metrics=["acc"], acc=1.0, note_x=3)])
    _raises([re.escape(str(p)), r"line 1: no field 'f1' \(metric fields: \['acc'\]\)"],
            jaxeval.load, p, metric="f1")


def test_lm_eval_an_absent_metric_names_the_first_line_of_the_filter_chosen(tmp_path):
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0, filter="a"), _plain(0, acc=0.0, filter="b")])
    _raises([re.escape(str(p)), r"line 2: no field 'f1'"], jaxeval.load, p, filter="b",
            metric="f1")


def test_lm_eval_a_metrics_list_naming_an_absent_field_is_no_usable_metric(tmp_path):
    """The fallback to the one name in ``metrics`` needs that field on the line: without
    it the refusal is the usual ValueError (not a KeyError)."""
    p = _run(tmp_path, "m", "t", [_plain(i, metrics=["bleu"], score=0.5) for i in range(2)])
    _raises([re.escape(str(p)), "no usable metric field", "metric="], jaxeval.load, p)


def test_lm_eval_the_one_named_metric_may_hold_integers(tmp_path):
    """0 / 1 written as integers are numbers: the one field in ``metrics`` is read."""
    p = _run(tmp_path, "m", "t", [_plain(i, metrics=["solved"], solved=i % 2) for i in range(3)])
    sm = jaxeval.load(p)
    assert sm.metadata["metric"] == {"t": "solved"} and sm.scores.tolist() == [[0, 1, 0]]


# ------------------------------------------------------------ task names from file names
def test_lm_eval_a_gzip_file_without_a_timestamp_names_its_task(tmp_path):
    """``samples_<task>.jsonl.gz`` (and in upper case) is task ``<task>``."""
    text = "".join(json.dumps(_plain(i, acc=1.0)) + "\n" for i in range(2)).encode()
    for name in ("samples_arc.jsonl.gz", "samples_arc.JSONL.GZ"):
        f = tmp_path / name.replace(".", "_") / name
        f.parent.mkdir()
        f.write_bytes(gzip.compress(text))
        sm = load_lm_eval(f, task="arc")
        assert sm.metadata["tasks"] == ["arc"] and sm.scores.tolist() == [[1.0, 1.0]]


def test_lm_eval_a_jsonl_file_without_the_samples_prefix_is_named_by_its_stem(tmp_path):
    f = _lines(tmp_path / "m" / "arc_easy_dump.jsonl", [_plain(0, acc=1.0)])
    assert load_lm_eval(f, task="arc_easy_dump").metadata["tasks"] == ["arc_easy_dump"]


# ------------------------------------------------------------------- runs='latest'
def test_lm_eval_latest_compares_timestamps_not_file_names(tmp_path):
    """``...T00-00-00.5`` is newer than ``...T00-00-00`` though its file name sorts first
    ('5' < 'j' of '.jsonl'): the newer timestamp is kept."""
    old = _run(tmp_path, "m", "t", [_plain(i, acc=0.0) for i in range(2)],
               ts="2025-01-01T00-00-00")
    _run(tmp_path, "m", "t", [_plain(i, acc=1.0) for i in range(2)], ts="2025-01-01T00-00-00.5")
    sm = jaxeval.load(tmp_path / "m", runs="latest")
    assert sm.scores.tolist() == [[1.0, 1.0]]
    assert any(str(old) in c and "1 older run(s)" in c for c in sm.metadata["conversions"])


def test_lm_eval_latest_with_one_run_per_task_records_no_run_choice(tmp_path):
    sm = jaxeval.load(_run(tmp_path, "m", "t", [_plain(0, acc=1.0)]).parent, runs="latest")
    assert "runs" not in sm.metadata
    assert not any("older run" in c for c in sm.metadata["conversions"])


# ------------------------------------------------------------------- notes
def test_lm_eval_tasks_note_lists_the_tasks_loaded(tmp_path):
    for t in ("arc", "piqa"):
        _run(tmp_path, "m", t, [_plain(0, acc=1.0)])
    sm = jaxeval.load(tmp_path / "m", task="piqa")
    assert sm.metadata["tasks"] == ["piqa"] and sm.metadata["metric"] == {"piqa": "acc"}


def test_lm_eval_lost_documents_are_added_up_over_runs(tmp_path):
    """Two runs lose documents to the filter: the note counts both runs and all their
    documents, with the first run's examples (in model order), int and text doc_ids
    together."""
    a = _run(tmp_path, "a", "gsm", [_sample(0, 1.0, filt="s"), _sample(0, 0.0, filt="f"),
                                    _sample(1, 1.0, filt="s"),
                                    dict(_sample(9, 1.0, filt="s"), doc_id="x")])
    _run(tmp_path, "b", "gsm", [_sample(0, 1.0, filt="s"), _sample(0, 1.0, filt="f"),
                                _sample(1, 1.0, filt="s"), _sample(2, 1.0, filt="s")])
    sm = jaxeval.load(tmp_path, filter="f")
    assert sm.items.tolist() == ["0"] and sm.scores.tolist() == [[0.0], [1.0]]
    assert (f"task 'gsm': 4 doc_id(s) in 2 run(s) have no line with filter 'f' (e.g. [1, 'x'] "
            f"in {a}): not read from those runs") in sm.metadata["conversions"]


def test_lm_eval_absent_cells_note_lists_three_models_without_an_ellipsis(tmp_path):
    _run(tmp_path, "a", "t", [_plain(i, acc=1.0) for i in range(2)])
    for m in ("b", "c", "d"):
        _run(tmp_path, m, "t", [_plain(0, acc=1.0)])
    note = [c for c in jaxeval.load(tmp_path).metadata["conversions"] if "cells absent" in c]
    assert note == ["3 (model, doc_id) cells absent from the runs of ['b', 'c', 'd']: "
                    "unobserved (mask=False)"]


def test_lm_eval_five_gzip_copies_are_listed_without_an_ellipsis(tmp_path):
    gz = []
    for m in "abcde":
        p = _run(tmp_path, m, "t", [_plain(0, acc=1.0)])
        gz.append(p.with_name(p.name + ".gz"))
        gz[-1].write_bytes(gzip.compress(p.read_bytes()))
    note = [c for c in jaxeval.load(tmp_path).metadata["conversions"] if "copies" in c]
    assert note == [f"5 .jsonl.gz copies of plain samples files, the same contents, read "
                    f"once: {[str(g) for g in gz]}"]


# --------------------------------------------------------------- missing='error'
def test_lm_eval_missing_error_names_a_document_the_named_model_lacks(tmp_path):
    """Model a lacks doc 2 and model b doc 1: the message pairs a model with a document
    that model lacks (a has doc 1)."""
    _run(tmp_path, "a", "t", [_plain(i, acc=1.0) for i in (0, 1, 3)])
    _run(tmp_path, "b", "t", [_plain(i, acc=1.0) for i in (0, 2, 3)])
    _raises([r"model 'a' lacks doc_id '2' \(", r"among 2 missing cells", "missing='mask'"],
            jaxeval.load, tmp_path, missing="error")


# ------------------------------------------------------------ folders not read
def _no_warning(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kw)


def test_lm_eval_subfolders_without_samples_are_not_named_as_skipped(tmp_path):
    """A model folder's subfolder without samples files (logs, a cache) is no samples
    folder left unread; nor is an empty folder beside the model folders; nor a model
    folder holding its results_*.json beside its samples (as the harness writes them)."""
    m = _run(tmp_path, "m", "t", [_plain(0, acc=1.0)]).parent
    (m / "logs").mkdir()
    (m / f"results_{TS}.json").write_text("{}")
    one = _no_warning(jaxeval.load, m)
    assert one.models.tolist() == ["m"] and one.metadata["conversions"] == []
    (tmp_path / "cache").mkdir()
    every = _no_warning(jaxeval.load, tmp_path)
    assert every.models.tolist() == ["m"] and every.metadata["conversions"] == []
    (tmp_path / "noslog").mkdir()
    (tmp_path / "noslog" / f"results_{TS}.json").write_text("{}")
    with pytest.warns(UserWarning, match=r"model folders \['noslog'\] of "):
        jaxeval.load(tmp_path)


# ------------------------------------------------------------ item names
def test_lm_eval_number_and_text_doc_ids_of_several_tasks_are_named_as_items(tmp_path):
    """With several tasks the refusal names the item ``"<task>/<doc_id>"``, as the matrix
    would."""
    for m, doc in (("m1", 0), ("m2", "0")):
        _run(tmp_path, m, "t1", [_plain(doc, acc=1.0)])
        _run(tmp_path, m, "t2", [_plain(1, acc=1.0)])
    _raises([r"doc_id 't1/0' both as \('t1', 0\) and as \('t1', '0'\)", r"\['m1', 'm2'\]"],
            jaxeval.load, tmp_path)


def test_lm_eval_the_samples_prefix_is_read_in_any_case_in_a_folder_as_in_a_file(tmp_path):
    """A file named ``SAMPLES_...`` loads from its folder as it does on its own (the
    folder scan saw only lower case), and without a timestamp its task drops the prefix
    whatever its case."""
    import jaxeval

    p = _run(tmp_path, "m", "t", [_sample(i, float(i % 2)) for i in range(3)])
    up = p.with_name(p.name.replace("samples_", "SAMPLES_"))
    p.rename(up)
    assert jaxeval.load(up).metadata["tasks"] == ["t"]
    sm = jaxeval.load(tmp_path / "m")
    assert sm.shape == (1, 3) and sm.metadata["tasks"] == ["t"]
    bare = up.with_name("Samples_u.jsonl")
    up.rename(bare)
    assert jaxeval.load(bare).metadata["tasks"] == ["u"]
    assert jaxeval.load(tmp_path / "m").metadata["tasks"] == ["u"]


def test_lm_eval_an_unreadable_folder_beside_the_model_folders_is_passed_over(tmp_path,
                                                                            monkeypatch):
    """A folder that cannot be listed (another user's, lost+found) holds no samples
    files for the loader: the model folders beside it still load."""
    import pathlib

    import jaxeval

    for m in ("m1", "m2"):
        _run(tmp_path, m, "t", [_sample(i, 1.0) for i in range(3)])
    (tmp_path / "private").mkdir()
    real = pathlib.Path.iterdir

    def iterdir(self):
        if self.name == "private":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    assert jaxeval.load(tmp_path).shape == (2, 3)
