"""Extending a finished (or unfinished) study folder with more units: ``extend_study``
and ``jaxeval extend``."""

import json

import numpy as np
import pytest
from test_study import TESTS, assert_same, toy_config

from jaxeval._cli import main
from jaxeval._study import (
    StudyConfigError,
    StudyFolderError,
    extend_study,
    load_results,
    merge_studies,
    resume_study,
    run_study,
    study_from_dict,
    study_status,
)


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def _snapshot(folder):
    """Every file of a folder with its bytes (a refusal must leave them as they were)."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_an_extended_replicate_study_is_the_larger_study_bit_for_bit(tmp_path):
    small = study_from_dict(toy_config(n_replicates=40, chunk_size=16))
    run_study(small, tmp_path / "a", progress=False)
    files = sorted((tmp_path / "a" / "chunks").rglob("*.npz"))
    mtimes = [f.stat().st_mtime_ns for f in files]
    assert extend_study(tmp_path / "a", 100) == tmp_path / "a"
    st = study_status(tmp_path / "a")
    assert st["units"] == 100 and st["range"] == [0, 100] and st["done"] == {"replicates": 40}
    assert not st["complete"] and not st["range_complete"]
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["extended"] == [{"from": 40, "to": 100}]
    assert json.loads((tmp_path / "a" / "study.json").read_text()) == manifest["config"]
    resume_study(tmp_path / "a", progress=False)
    assert [f.stat().st_mtime_ns for f in files] == mtimes  # the finished chunks are kept
    again, res = load_results(tmp_path / "a")
    big = study_from_dict(toy_config(n_replicates=100, chunk_size=16))
    assert again == big
    run_study(big, tmp_path / "b", progress=False)
    assert_same(res["replicates"], load_results(tmp_path / "b")[1]["replicates"])
    # extended twice: the history is kept
    extend_study(tmp_path / "a", 120)
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["extended"] == [{"from": 40, "to": 100}, {"from": 100, "to": 120}]


def test_an_extended_identification_study_equals_the_larger_study(tmp_path):
    d = {"kind": "identification", "num_arms": 3, "n_replicates": 12, "chunk_size": 8,
         "lanes": 4, "policies": ["ucbe"], "budgets": [0.2, 1.0],
         "data": {"synthetic": {"n_items": 30}}, "instance_assignment": "random"}
    run_study(study_from_dict(d), tmp_path / "a", progress=False)
    extend_study(tmp_path / "a", 20)
    resume_study(tmp_path / "a", progress=False)
    run_study(study_from_dict(dict(d, n_replicates=20)), tmp_path / "b", progress=False)
    assert_same(load_results(tmp_path / "a")[1]["ucbe"], load_results(tmp_path / "b")[1]["ucbe"])


def test_an_extended_anchor_study_adds_repetitions(tmp_path):
    d = {"kind": "anchors", "data": {"dataset": "oll2_musr"}, "methods": ["random_mean"],
         "k": [20], "n_seeds": 1}
    run_study(study_from_dict(d), tmp_path / "a", progress=False)
    with pytest.raises(ValueError, match=r"n_units: expected more than the 1 units \(n_seeds\)"):
        extend_study(tmp_path / "a", 1)
    extend_study(tmp_path / "a", 2)
    assert study_from_dict(json.loads((tmp_path / "a" / "study.json").read_text())).n_seeds == 2
    resume_study(tmp_path / "a", progress=False)
    run_study(study_from_dict(dict(d, n_seeds=2)), tmp_path / "b", progress=False)
    a, b = (load_results(tmp_path / x)[1]["k20"] for x in "ab")
    a.pop("seconds"), b.pop("seconds")  # (wall time)
    assert_same(a, b)


def test_extension_refusals_name_the_argument_and_leave_the_folder(tmp_path):
    out = tmp_path / "a"
    run_study(study_from_dict(toy_config(n_replicates=16, chunk_size=8)), out, progress=False)
    before = _snapshot(out)
    for bad, err, text in [
        (16, ValueError, r"n_units: expected more than the 16 units \(n_replicates\) .*got "
                         r"16; resume_study \(`jaxeval resume`\) computes the units it still"),
        (8, ValueError, r"got 8; the first 8 rows of load_results"),
        (20.0, TypeError, "n_units: expected an integer"),
        (True, TypeError, "n_units: expected an integer"),
        (2**31 + 1, StudyConfigError, "n_replicates: expected an integer in"),
    ]:
        with pytest.raises(err, match=text):
            extend_study(out, bad)
    with pytest.raises(StudyFolderError, match="not a study folder"):
        extend_study(tmp_path / "none", 20)
    # a hand-edited study.json is refused as a resume refuses it
    text = (out / "study.json").read_text()
    (out / "study.json").write_text(json.dumps(dict(json.loads(text), seed=99)))
    edited = _snapshot(out)
    with pytest.raises(StudyFolderError, match="was edited"):
        extend_study(out, 20)
    assert _snapshot(out) == edited
    (out / "study.json").write_text(text)
    assert _snapshot(out) == before
    # a range job's folder: extend the merged folder instead
    run_study(study_from_dict(toy_config(n_replicates=16, chunk_size=8)), tmp_path / "r",
              replicate_range=(0, 8), progress=False)
    with pytest.raises(StudyFolderError, match="range job for units 0:8 of 16.*merge"):
        extend_study(tmp_path / "r", 20)
    np.testing.assert_equal(study_status(tmp_path / "r")["range"], [0, 8])


def test_a_folder_of_an_earlier_setup_is_not_extended(tmp_path):
    """Its chunks could never be joined by new ones (a resume refuses to mix set-ups), so
    the extension is refused before the folder changes."""
    from jaxeval._study import _atomic_write_json

    d = {"kind": "identification", "num_arms": 3, "n_replicates": 4, "chunk_size": 4,
         "lanes": 4, "policies": ["naive"], "budgets": [0.5],
         "data": {"synthetic": {"n_items": 20}}}
    out = tmp_path / "a"
    run_study(study_from_dict(d), out, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    for c in manifest["chunks"].values():
        c["setup"] = 2  # (set-up 4 moved the naive recommendation)
    _atomic_write_json(out / "manifest.json", manifest)
    before = _snapshot(out)
    with pytest.raises(StudyFolderError, match="earlier jaxeval"):
        extend_study(out, 8)
    assert _snapshot(out) == before


def test_the_new_units_can_run_as_range_jobs_and_merge_with_the_extended_folder(tmp_path):
    run_study(study_from_dict(toy_config(n_replicates=24, chunk_size=8)), tmp_path / "a",
              progress=False)
    extend_study(tmp_path / "a", 40)
    bigger = study_from_dict(json.loads((tmp_path / "a" / "study.json").read_text()))
    run_study(bigger, tmp_path / "p", replicate_range=(24, 40), progress=False)
    merged = merge_studies([tmp_path / "a", tmp_path / "p"], tmp_path / "m")
    assert study_status(merged)["complete"]
    # the merged folder keeps the record of the extension
    manifest = json.loads((merged / "manifest.json").read_text())
    assert manifest["extended"] == [{"from": 24, "to": 40}]
    run_study(bigger, tmp_path / "b", progress=False)
    ref = load_results(tmp_path / "b")[1]["replicates"]
    assert_same(load_results(merged)[1]["replicates"], ref)


def test_jaxeval_extend_computes_the_new_units_and_reports(tmp_path, capsys):
    out = tmp_path / "a"
    run_study(study_from_dict(toy_config(n_replicates=16, chunk_size=8)), out, progress=False)
    assert main(["extend", str(out), "--to", "8"]) == 2
    assert "jaxeval extend: error: --to: expected more than the 16 units" in capsys.readouterr().err
    assert study_status(out)["units"] == 16
    assert main(["extend", str(out), "--to", "24"]) == 0
    err = capsys.readouterr().err
    assert "the study now has 24 units (it had 16); computing the new ones" in err
    assert "8 of 24 units to compute" in err
    st = study_status(out)
    assert st["complete"] and st["done"] == {"replicates": 24}
    assert json.loads((out / "summary.json").read_text())["replicates"] == 24


def test_jaxeval_extend_again_after_a_stop_continues_the_folder(tmp_path, capsys):
    """The same `jaxeval extend` command run again after it was stopped (the definition
    already rewritten, the new units not all computed) continues the folder instead of
    refusing a size it already has."""
    out = tmp_path / "a"
    run_study(study_from_dict(toy_config(n_replicates=16, chunk_size=8)), out, progress=False)
    extend_study(out, 24)  # (as if the command was stopped right after the rewrite)
    assert not study_status(out)["complete"]
    assert main(["extend", str(out), "--to", "24", "--no-report"]) == 0
    assert "the study already has 24 units; continuing it" in capsys.readouterr().err
    assert study_status(out)["complete"]
