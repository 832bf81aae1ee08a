"""What a cluster user running studies as array jobs met (a walk through README):
merging a folder a run is still writing, folders that do not exist or are files, a
merge that leaves units missing (which ones), extending a finished folder for range jobs
of the larger study (``jaxeval extend --no-run``), and a study tree moved whole to
another place (its ``.npz`` found above the folder; a missing file named with the places
looked)."""

import fcntl
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_study import TESTS, toy_config

import jaxeval
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


class _Lock:
    """Hold a folder's run lock as a run in another process would (flock conflicts
    between open file descriptions, so this process's own probe sees it)."""

    def __init__(self, folder):
        folder.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(folder, os.O_RDONLY)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def release(self):
        os.close(self.fd)


def _parts(tmp_path, n=48, ranges=((0, 16), (16, 32), (32, 48))):
    study = study_from_dict(toy_config(n_replicates=n, chunk_size=16))
    for lo, hi in ranges:
        run_study(study, tmp_path / f"p{lo}", replicate_range=(lo, hi), progress=False)
    return study, [tmp_path / f"p{lo}" for lo, _ in ranges]


def test_merge_refuses_a_folder_a_run_is_writing(tmp_path):
    _, parts = _parts(tmp_path)
    lock = _Lock(parts[1])
    try:
        with pytest.raises(StudyFolderError, match=rf"{parts[1]} is being written by another "
                           r"process \(it holds the folder's lock\): wait for that run"):
            merge_studies(parts, tmp_path / "m")
        assert not (tmp_path / "m").exists()
    finally:
        lock.release()
    merge_studies(parts, tmp_path / "m")  # the run finished: merged
    assert study_status(tmp_path / "m")["complete"]


def test_folders_without_a_manifest_say_which_case(tmp_path):
    gone = tmp_path / "gone"
    for f in (resume_study, study_status, load_results, lambda d: extend_study(d, 9)):
        with pytest.raises(StudyFolderError, match=rf"^{gone} does not exist: not a study "
                           "folder$"):
            f(gone)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StudyFolderError, match="is a file, not a study folder"):
        study_status(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StudyFolderError, match="holds no manifest.json: not a study folder"):
        study_status(empty)
    starting = tmp_path / "starting"  # a run has taken the lock, not yet written
    lock = _Lock(starting)
    try:
        with pytest.raises(StudyFolderError, match="holds no manifest.json yet: a run is "
                           "starting there"):
            study_status(starting)
        _, parts = _parts(tmp_path, ranges=((0, 16),))
        with pytest.raises(StudyFolderError, match="a run is starting there"):
            merge_studies([parts[0], starting], tmp_path / "m")
    finally:
        lock.release()


def test_merge_into_a_file_is_refused_by_name(tmp_path):
    _, parts = _parts(tmp_path, ranges=((0, 16),))
    f = tmp_path / "out"
    f.write_text("x")
    with pytest.raises(StudyFolderError, match=rf"{f} is a file, not a folder: merge into"):
        merge_studies(parts, f)
    assert f.read_text() == "x"


def test_status_and_merge_name_the_units_missing(tmp_path, capsys):
    _, parts = _parts(tmp_path)
    merge_studies([parts[0], parts[2]], tmp_path / "m")
    st = study_status(tmp_path / "m")
    assert st["todo"] == {"replicates": [[16, 32]]} and not st["complete"]
    assert study_status(parts[1])["todo"] == {"replicates": []}
    m2 = tmp_path / "m2"
    assert main(["merge", str(parts[0]), str(parts[2]), "--out", str(m2)]) == 0
    assert capsys.readouterr().out.rstrip() == (
        f"merged 2 folders into {m2}: 32 of 48 units (incomplete: units 16:32 missing; "
        f"`jaxeval resume {m2}` computes them, or merge their folders too)")


def test_a_finished_folder_extended_without_running_merges_with_range_jobs(tmp_path, capsys):
    small, _ = _parts(tmp_path, n=32, ranges=((0, 32),))
    whole = tmp_path / "p0"
    files = sorted(p.name for p in (whole / "chunks").rglob("*.npz"))
    big = study_from_dict(toy_config(n_replicates=48, chunk_size=16))
    run_study(big, tmp_path / "r", replicate_range=(32, 48), progress=False)
    # without the extension the sizes differ: the refusal says what to do
    with pytest.raises(StudyFolderError, match=r"'n_replicates' is 32 .* but 48 .*; to merge "
                       r"range jobs of a larger study with a finished one, extend .*--no-run"):
        merge_studies([whole, tmp_path / "r"], tmp_path / "m")
    assert main(["extend", str(whole), "--to", "48", "--no-run"]) == 0
    err = capsys.readouterr().err
    assert "nothing computed (--no-run)" in err and str(whole / "study.json") in err
    st = study_status(whole)
    assert st["units"] == 48 and st["done"] == {"replicates": 32}  # nothing computed
    assert sorted(p.name for p in (whole / "chunks").rglob("*.npz")) == files
    assert json.loads((whole / "study.json").read_text()) == big.to_dict()
    merge_studies([whole, tmp_path / "r"], tmp_path / "m")
    assert study_status(tmp_path / "m")["complete"]
    _, res = load_results(tmp_path / "m")
    run_study(big, tmp_path / "direct", progress=False)
    _, want = load_results(tmp_path / "direct")
    for k, v in want["replicates"].items():
        np.testing.assert_array_equal(res["replicates"][k], v)


def _npz_study(root):
    """An identification study reading ``data/s.npz`` relative to ``root`` (run there)."""
    (root / "data").mkdir(parents=True)
    jaxeval.load("oll2_musr").take(models=np.arange(30), items=np.arange(40)).to_npz(
        root / "data" / "s.npz")
    return study_from_dict({"kind": "identification", "name": "moved",
                            "data": {"npz": "data/s.npz"}, "policies": ["uniform"],
                            "num_arms": 3, "n_replicates": 4, "chunk_size": 4, "lanes": 4,
                            "n_instances": 2, "budgets": [0.5, 1.0]})


def test_a_study_tree_moved_whole_finds_its_data_above_the_folder(tmp_path, monkeypatch):
    a = tmp_path / "a"
    monkeypatch.chdir(a.parent)
    a.mkdir()
    monkeypatch.chdir(a)
    run_study(_npz_study(a), "runs/s", progress=False)
    shutil.move(str(a), str(tmp_path / "b"))  # (a's recorded location is gone too)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    folder = tmp_path / "b" / "runs" / "s"
    extend_study(folder, 8)
    resume_study(folder, progress=False)
    assert study_status(folder)["complete"]
    # without the file anywhere: the places looked are named (a resume and an extension)
    (tmp_path / "b" / "data" / "s.npz").unlink()
    for f in (lambda: resume_study(folder, progress=False), lambda: extend_study(folder, 12)):
        with pytest.raises(StudyConfigError, match=r"data\.npz: no such file: data/s\.npz "
                           rf"\(looked from the current directory {elsewhere}, at the "
                           rf"location recorded in {folder}: .*a/data/s\.npz, and from the "
                           rf"3 folders above {folder}\)"):
            f()
    assert study_status(folder)["units"] == 8  # the refused extension changed nothing


def _toy_file(tmp_path, **kw):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(toy_config(**{"n_replicates": 32, "chunk_size": 16, **kw})))
    return p


def test_a_write_failure_without_a_file_name_names_the_study_folder(tmp_path, capsys,
                                                                     monkeypatch):
    """A full disk or file-size limit fails a write with an OSError that names no file
    (``[Errno 27] File too large``): the command names the folder and how to go on."""
    import errno

    import jaxeval._study as st

    real = st._write_chunk

    def too_large(path, arrays):
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(st, "_write_chunk", too_large)
    out = tmp_path / "o"
    assert main(["run", str(_toy_file(tmp_path)), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"jaxeval run: error: File too large (writing in {out}); the "
                           f"finished chunks are kept: `jaxeval resume {out}` continues the "
                           "study")
    assert study_status(out)["done"] == {"replicates": 0}  # the folder, resumable
    # a later command's error does not name the earlier study's folder
    monkeypatch.setattr(st, "_write_chunk", real)
    assert main(["status", str(tmp_path / "none")]) == 2
    assert str(out) not in capsys.readouterr().err


def test_a_finished_study_whose_report_cannot_be_written_still_succeeds(tmp_path, capsys,
                                                                        monkeypatch):
    """The study is complete: a full disk when writing summary.json or the plots is a
    warning (exit 0), not the failure of a finished cluster job."""
    import errno

    import jaxeval._report as rep

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rep, "write_summary", no_space)
    monkeypatch.setattr(rep, "plot_study", no_space)
    out = tmp_path / "o"
    assert main(["run", str(_toy_file(tmp_path)), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert (f"jaxeval: warning: {out / 'summary.json'} not written (No space left on "
            "device); the study is complete") in err
    assert f"jaxeval: warning: plots not written in {out / 'plots'} (No space left" in err
    assert study_status(out)["complete"]


def test_a_merge_that_fails_writing_leaves_no_half_folder(tmp_path, capsys, monkeypatch):
    """A full disk during a merge: the command names the folder, and the half-made
    folder is removed, so the same merge runs again once there is room."""
    import errno

    import jaxeval._study as st

    _, parts = _parts(tmp_path)

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(st.shutil, "copyfile", no_space)
    m = tmp_path / "merged out"  # (a space: the hint is quoted for the shell)
    assert main(["merge", *map(str, parts), "--out", str(m)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"jaxeval merge: error: No space left on device (writing in {m})")
    assert not m.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["merge", *map(str, parts), "--out", str(empty)]) == 2
    assert list(empty.iterdir()) == []  # (an empty folder given: emptied again, kept)
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(TESTS))
    assert main(["merge", str(parts[0]), "--out", str(m)]) == 0
    assert f"`jaxeval resume '{m}'` computes them" in capsys.readouterr().out


def test_predict_option_errors_are_not_told_as_data_errors(tmp_path, capsys):
    from test_anchor_api_mutants import _by_hand

    p = _by_hand().save(tmp_path / "p.npz")
    t = tmp_path / "new.csv"
    t.write_text("model,q2,q5,q7\na,1,0,0\n")
    assert main(["anchors", "predict", str(p), str(t), "--sep", ""]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxeval anchors: error: --sep: expected one character")
    assert "anchors predict reads a table" not in err


def test_review_follow_ups_of_the_cluster_walk(tmp_path, monkeypatch, capsys):
    """A moved study reached as ../s finds its data above it; the data file is read once
    per lookup; a mount without flock neither fails a merge nor a run; a merge whose
    tasks lack different units says which task lacks what."""
    import errno

    import jaxeval._study as st

    a = tmp_path / "a"
    a.mkdir()
    monkeypatch.chdir(a)
    run_study(_npz_study(a), "runs/s", progress=False)
    shutil.move(str(a), str(tmp_path / "b"))
    other = tmp_path / "b" / "runs" / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    real, seen = st._sha256, []

    def counted(p):
        seen.append(p)
        return real(p)

    monkeypatch.setattr(st, "_sha256", counted)
    study, _ = load_results("../s")
    assert study.data.location is not None and seen.count(seen[-1]) == 1
    assert Path(study.data.location).resolve() == tmp_path / "b" / "data" / "s.npz"
    monkeypatch.setattr(st, "_sha256", real)
    # flock unsupported (ENOSYS): no lock, no failure
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    monkeypatch.chdir(tmp_path)
    _, parts = _parts(tmp_path / "nf")
    merge_studies(parts, tmp_path / "nf" / "m")
    assert study_status(tmp_path / "nf" / "m")["complete"]
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(TESTS))
    # an identification study whose tasks lack different units
    ident = study_from_dict({"kind": "identification", "name": "two",
                             "data": {"synthetic": {"n_items": 20}}, "num_arms": 2,
                             "policies": ["uniform", "ucbe"], "n_replicates": 16,
                             "chunk_size": 8, "lanes": 8, "budgets": [0.5, 1.0]})
    run_study(ident, tmp_path / "i0", replicate_range=(0, 8), progress=False)
    folder = tmp_path / "i0"
    man = json.loads((folder / "manifest.json").read_text())
    gone = [k for k, c in man["chunks"].items() if c["task"] == "ucbe"]
    for k in gone:
        (folder / k).unlink()
        del man["chunks"][k]
    (folder / "manifest.json").write_text(json.dumps(man))
    capsys.readouterr()
    assert main(["merge", str(folder), "--out", str(tmp_path / "im")]) == 0
    out = capsys.readouterr().out
    assert "(incomplete: uniform units 8:16; ucbe units 0:16 missing;" in out, out


def test_a_moved_tree_reached_through_a_symbolic_link_finds_its_data(tmp_path,
                                                                     monkeypatch):
    """proj/runs is a link to real/runs; the data is proj/data: found from the folder
    as given (the link's tree), not only from its resolved place."""
    a = tmp_path / "a"
    a.mkdir()
    monkeypatch.chdir(a)
    run_study(_npz_study(a), "runs/s", progress=False)
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.move(str(a / "data"), str(proj / "data"))
    shutil.move(str(a / "runs"), str(tmp_path / "real"))
    (proj / "runs").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    study, _ = load_results(proj / "runs" / "s")
    assert Path(study.data.location) == proj / "data" / "s.npz"


def test_parts_named_differently_merge_with_a_warning(tmp_path):
    """A study's name is a label (not in its numbers): parts named differently merge,
    but the merged study's name is said, not taken silently from the first."""
    a = study_from_dict(toy_config(n_replicates=32, chunk_size=16, name="run-a"))
    b = study_from_dict(toy_config(n_replicates=32, chunk_size=16, name="run-b"))
    run_study(a, tmp_path / "a", replicate_range=(0, 16), progress=False)
    run_study(b, tmp_path / "b", replicate_range=(16, 32), progress=False)
    with pytest.warns(UserWarning, match=r"named differently .*'run-a'.*'run-b'.*the merged "
                                         r"study is named 'run-a'"):
        merge_studies([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    assert study_status(tmp_path / "m")["complete"]
    import warnings

    with warnings.catch_warnings():  # same names: no warning
        warnings.simplefilter("error")
        run_study(a, tmp_path / "c", replicate_range=(16, 32), progress=False)
        merge_studies([tmp_path / "a", tmp_path / "c"], tmp_path / "m2")
