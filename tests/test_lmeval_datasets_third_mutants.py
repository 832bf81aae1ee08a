"""Gaps a third mutation review of the lm-evaluation-harness reader (``_lmeval``) and the
bundled datasets (``jaxeval.datasets``) found: ``runs=`` and its messages, the
``missing='error'`` count, the notes in ``metadata`` and the datasets' names and errors.
Each test fails on a plausible bug the rest of the suite let through."""

import re

import pytest
from test_lmeval_io_deep_mutants import _plain
from test_loaders import _raises, _run

import jaxeval
from jaxeval import datasets
from jaxeval._lmeval import load_lm_eval


# ------------------------------------------------------------------- runs=
def test_lm_eval_runs_takes_error_or_latest_only(tmp_path):
    p = _run(tmp_path, "m", "t", [_plain(0, acc=1.0)])
    for bad in ("all", None):
        _raises([r"runs must be 'error' or 'latest', got " + re.escape(repr(bad))],
                load_lm_eval, p, runs=bad)


def test_lm_eval_several_runs_are_named_in_file_name_order(tmp_path):
    """The refusal of several runs names every file of the task (sorted); with
    ``runs='latest'`` every older run is listed in the note, not only the first."""
    stamps = [f"2025-01-0{d}T00-00-00.000000" for d in range(1, 6)]
    files = [_run(tmp_path, "m", "t", [_plain(0, acc=d / 10)], ts=ts)
             for d, ts in enumerate(stamps, start=1)]
    names = [f.name for f in files]
    _raises([re.escape(f"{tmp_path / 'm'}: 5 runs of task 't' ({names}); pass runs='latest'")],
            jaxeval.load, tmp_path / "m")
    sm = jaxeval.load(tmp_path / "m", runs="latest")
    assert sm.scores.tolist() == [[0.5]]
    assert (f"4 older run(s) of the same task ignored (runs='latest'): "
            f"{[str(f) for f in files[:4]]}") in sm.metadata["conversions"]
    assert sm.metadata["runs"] == "latest timestamp kept per (model, task)"


# ------------------------------------------------------------------- records
def test_lm_eval_a_filter_name_is_recorded(tmp_path):
    """``metadata['filter']`` records the filter chosen, a name as well as a mapping, and
    is absent when none was passed."""
    p = _run(tmp_path, "m", "gsm", [_plain(0, exact_match=1.0, filter="strict"),
                                    _plain(0, exact_match=0.0, filter="flex")])
    assert jaxeval.load(p, filter="strict").metadata["filter"] == "strict"
    assert jaxeval.load(p, filter={"gsm": "flex"}).metadata["filter"] == {"gsm": "flex"}
    q = _run(tmp_path, "n", "t", [_plain(0, acc=1.0)])
    assert "filter" not in jaxeval.load(q).metadata


def test_lm_eval_missing_error_counts_cells_not_models(tmp_path):
    """One model lacking two documents: the refusal counts the 2 missing cells."""
    _run(tmp_path, "a", "t", [_plain(i, acc=1.0) for i in range(3)])
    _run(tmp_path, "b", "t", [_plain(0, acc=1.0)])
    _raises([r"model 'b' lacks doc_id '1' \(", "among 2 missing cells"], jaxeval.load,
            tmp_path, missing="error")


# ------------------------------------------------------------------- datasets
def test_datasets_unknown_name_is_a_key_error_listing_the_bundled_ones():
    with pytest.raises(KeyError, match=r"datasets\.load: unknown dataset 'nope'; bundled: "
                       "oll2_arc_challenge, oll2_ifeval, oll2_math_lvl5, oll2_musr"):
        datasets.load("nope")


def test_datasets_are_named_by_their_dataset_name():
    """A bundled matrix records its dataset name as ``source`` (not the temporary path
    of the package file); ``load()`` with no name loads ``DEFAULT``."""
    sm = datasets.load("oll2_musr")
    assert sm.source == "oll2_musr"
    assert sm.metadata["file"] == "benchpred_oll2_musr.npz"
    assert datasets.load().source == datasets.DEFAULT
