"""Gaps a mutation review of the study runner (chunk planning, resume, folder checks,
anchor tasks, budgets) found: each test fails on a plausible bug the rest of the suite
let through."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from test_study import _edit_manifest, importable, toy_config  # noqa: F401 (autouse fixture)

from jaxeval import _study
from jaxeval._study import (
    AnchorStudy,
    DataSource,
    StudyConfigError,
    StudyFolderError,
    Task,
    resume_study,
    run_study,
    study_from_dict,
    study_status,
)


def _npz_study(tmp_path, seed, policy):
    """A small identification study of ``policy`` on an 8 x 10 binary matrix written to
    ``tmp_path / "s.npz"``; returns the study and the file."""
    rng = np.random.default_rng(seed)
    data = tmp_path / "s.npz"
    np.savez(data, scores=(rng.random((8, 10)) < 0.5).astype(np.float32))
    return study_from_dict({"kind": "identification", "data": {"npz": str(data)},
                            "num_arms": 2, "budgets": [0.5], "n_replicates": 8,
                            "policies": [policy]}), data


def _task(n=20, chunk_size=8):
    return Task("t", n, chunk_size, compute=None)


# ------------------------------------------------------------ chunk planning
def test_todo_ranges_cover_the_range_to_its_last_unit_in_aligned_chunks():
    """The units left are cut at multiples of the chunk size (so a range job starting
    mid-chunk fills up to the next boundary, and later chunks line up with every other
    job's), and run to the range's last unit, the task's size capping it."""
    assert _study._todo_ranges(_task(), [], (0, 20)) == [(0, 8), (8, 16), (16, 20)]
    assert _study._todo_ranges(_task(), [], (5, 20)) == [(5, 8), (8, 16), (16, 20)]
    assert _study._todo_ranges(_task(), [], (0, 99)) == [(0, 8), (8, 16), (16, 20)]
    assert _study._todo_ranges(_task(chunk_size=lambda: 6), [], (3, 13)) == [
        (3, 6), (6, 12), (12, 13)]


def test_todo_ranges_skip_what_is_covered_even_when_chunks_overlap():
    """A covered span inside an earlier, longer one (sorted after it) must not move the
    position back: the units 12..16 are done and not computed again."""
    covered = sorted([(0, 16), (8, 12)])
    assert _study._todo_ranges(_task(), covered, (0, 20)) == [(16, 20)]
    assert _study._todo_ranges(_task(), [(0, 8), (16, 20)], (0, 20)) == [(8, 16)]
    assert _study._todo_ranges(_task(), [(0, 8)], (0, 8)) == []


def test_chunk_names_are_zero_padded_to_ten_digits():
    """Chunk files sort by their first unit as text (and a folder written by an earlier
    run names them so: a resume that named them otherwise would orphan them)."""
    assert _study._chunk_name("k20", 3, 5) == "chunks/k20/0000000003-0000000005.npz"


def test_progress_counts_the_units_of_every_range():
    """The progress bar's total is the units of all ranges, not of all but one."""
    got = _study._progress(lambda total, label, enabled: (total, label, enabled),
                           [(0, 3), (5, 9)], 1, "x")
    assert got == (7, "x", True)


def test_the_run_line_says_units_of_the_folders_range(tmp_path, capsys):
    """The line a run starts a task with counts units (not chunks) left, out of the
    folder's range (not the whole study's)."""
    s = study_from_dict(toy_config(n_replicates=24, chunk_size=8, lanes=1))
    run_study(s, tmp_path / "r", replicate_range=(8, 24), progress=True)
    err = capsys.readouterr().err
    assert "task 'replicates': 16 of 16 units to compute in 2 chunk(s)" in err, err


# --------------------------------------------------------------- writing
def test_each_chunk_is_recorded_as_soon_as_it_is_written(tmp_path, monkeypatch):
    """A run that dies after its first chunk keeps that chunk in the manifest (the
    manifest is written after every chunk, not only at the end), so a resume does not
    compute it again; the entry records its units and the set-up that computed it."""
    real, calls = _study._write_chunk, []

    def dies_second(path, arrays):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(path, arrays)

    monkeypatch.setattr(_study, "_write_chunk", dies_second)
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8, lanes=1))
    with pytest.raises(KeyboardInterrupt):
        run_study(s, tmp_path / "d", progress=False)
    st = study_status(tmp_path / "d")
    assert st["done"] == {"replicates": 8} and not st["range_complete"]
    (entry,) = json.loads((tmp_path / "d" / "manifest.json").read_text())["chunks"].values()
    # (with its set-up: an entry without one reads as set-up 1, which a resume of an
    # identification study refuses to extend)
    assert {k: v for k, v in entry.items() if k != "sha256"} == {
        "task": "replicates", "lo": 0, "hi": 8, "setup": _study.SETUP}


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path,
                                                                       monkeypatch):
    """A manifest or chunk write that fails (a full disk, a kill) must not leave half a
    file under the name: the old content stays, and no temporary file is left."""
    p = tmp_path / "manifest.json"
    p.write_bytes(b"old")

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        _study._atomic_write_bytes(p, b"new content")
    assert p.read_bytes() == b"old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["manifest.json"]


def test_a_resume_removes_half_written_files_and_replaced_corrupt_chunks(tmp_path):
    """A resume deletes the ``.tmp-*`` files a killed run left in the chunk folders, and
    a corrupt chunk file that the recomputed chunks do not overwrite (recorded as one
    span, recomputed in two chunks), so the folder holds only its manifest's chunks."""
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8, lanes=1))
    out = run_study(s, tmp_path / "c", progress=False)
    chunks = out / "chunks" / "replicates"
    (chunks / ".tmp-999-0000000000-0000000008.npz").write_bytes(b"half")
    (chunks / "0000000000-0000000016.npz").write_bytes(b"junk")
    _edit_manifest(out, lambda m: m.update(chunks={"chunks/replicates/0000000000-0000000016.npz":
                                                   {"task": "replicates", "lo": 0, "hi": 16,
                                                    "sha256": "0" * 64, "setup": _study.SETUP}}))
    with pytest.warns(UserWarning, match="1 chunk file"):
        resume_study(out, progress=False)
    assert sorted(p.name for p in chunks.iterdir()) == [
        "0000000000-0000000008.npz", "0000000008-0000000016.npz"]
    assert study_status(out, verify=True)["done"] == {"replicates": 16}


# ------------------------------------------------------- opening a folder
def test_an_empty_or_outside_replicate_range_is_refused_before_the_folder_exists(tmp_path):
    """A range job covers ``lo <= unit < hi`` with ``0 <= lo < hi <= n``: an empty range
    (``lo == hi``: a folder holding nothing whose status says its range is complete), a
    reversed one and one past the study's units are refused, and no folder is made."""
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    for bad in ((8, 8), (9, 8), (0, 17), (-1, 4)):
        with pytest.raises(ValueError, match=re.escape(
                f"replicate_range must satisfy 0 <= lo < hi <= 16 (the study's units), got "
                f"{bad}")):
            run_study(s, tmp_path / "r", replicate_range=bad, progress=False)
        assert not (tmp_path / "r").exists()


def test_a_file_is_not_a_study_folder(tmp_path):
    """``--out`` naming a file is refused as a file (not with an OSError from listing
    it, nor as a non-empty folder), and the file is left alone."""
    f = tmp_path / "f"
    f.write_text("x")
    assert _study._can_start_in(f, {}) is False
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    with pytest.raises(StudyFolderError, match="is a file, not a folder"):
        run_study(s, f, progress=False)
    assert f.read_text() == "x"


def test_a_folder_with_no_chunks_takes_this_processes_settings_and_target(tmp_path):
    """A folder whose run died before its first chunk records the JAX settings and the
    target's checksum of the run that computes its chunks, so the next resume does not
    refuse the folder's own chunks as computed under other settings / another target."""
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    out = run_study(s, tmp_path / "n", replicate_range=(0, 8), progress=False)
    now = json.loads((out / "manifest.json").read_text())

    def as_if_elsewhere(m):
        m["chunks"] = {}
        m["numerics"] = dict(m["numerics"], x64=not m["numerics"]["x64"])
        m["target_sha256"] = "0" * 64

    _edit_manifest(out, as_if_elsewhere)
    resume_study(out, progress=False)
    m = json.loads((out / "manifest.json").read_text())
    assert m["numerics"] == now["numerics"]
    assert m["target_sha256"] == now["target_sha256"]
    assert study_status(out)["done"] == {"replicates": 8}
    resume_study(out, progress=False)  # (and the folder goes on being resumable)


def test_a_folder_refuses_to_continue_on_changed_data(tmp_path):
    """A folder records its data file's checksum; opening it again after the file's
    contents changed (same path) is refused, and the manifest is left as it was."""
    s, data = _npz_study(tmp_path, 1, "uniform")
    out = tmp_path / "o"
    _study._open_folder(s, out, (0, 8))
    before = (out / "manifest.json").read_bytes()
    assert _study._open_folder(s, out, (0, 8))["data_sha256"] == _study._sha256(data)
    np.savez(data, scores=(np.random.default_rng(9).random((8, 10)) < 0.5).astype(np.float32))
    with pytest.raises(StudyFolderError, match="the data file changed since the study started"):
        _study._open_folder(s, out, (0, 8))
    assert (out / "manifest.json").read_bytes() == before


def test_the_folder_lock_is_exclusive(tmp_path):
    """While a run holds its folder, no other lock on it can be taken, a shared one
    included (two runs that each took a shared lock would write one folder together)."""
    fcntl = pytest.importorskip("fcntl")
    with _study._folder_lock(tmp_path):
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        with pytest.raises(StudyFolderError, match="being written by another process"):
            with _study._folder_lock(tmp_path):
                pass


def test_numerics_diff_names_every_setting_that_differs():
    """Each of the three recorded JAX settings counts (x64 and the partitionable
    threefry change the numbers as much as the PRNG does); a folder from before they
    were recorded (``None``) is not refused."""
    old = {"prng_impl": "threefry2x32", "threefry_partitionable": True, "x64": False}
    assert _study._numerics_diff(old, dict(old)) == ""
    assert _study._numerics_diff(None, old) == ""
    assert _study._numerics_diff(old, dict(old, x64=True)) == (
        "x64=False there, True here (set by JAX_ENABLE_X64 / jax_enable_x64)")
    assert _study._numerics_diff(old, dict(old, threefry_partitionable=False),
                                 ("a", "b")) == (
        "threefry_partitionable=True a, False b (set by JAX_THREEFRY_PARTITIONABLE / "
        "jax_threefry_partitionable)")


def test_recompute_hint_ignores_the_corrupt_chunks_own_set_up():
    """The advice for corrupt chunks looks at the set-ups of the chunks that stay: when
    the only chunk of an older set-up is the corrupt one, a resume recomputes it at this
    set-up, so the hint says to resume, not to start again."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 16,
                         "chunk_size": 8, "lanes": 8, "policies": ["uniform"],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5],
                         "cs_kinds": ["eb"], "seed": 0})
    chunks = {"a": {"task": "uniform", "lo": 0, "hi": 8, "setup": 2},
              "b": {"task": "uniform", "lo": 8, "hi": 16, "setup": _study.SETUP}}
    assert _study._recompute_hint(Path("/f"), s, chunks, ["a"]) == \
        "run `jaxeval resume /f` to recompute them"
    assert "keep chunks of another study set-up" in _study._recompute_hint(
        Path("/f"), s, chunks, ["b"])


def test_check_setup_names_a_newer_set_up_first(tmp_path):
    """A task holding chunks of an older and of a newer set-up is refused as one from a
    newer jaxeval (the one that can tell what to do with it), not as an older one."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 16,
                         "chunk_size": 8, "lanes": 8, "policies": ["uniform"],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5],
                         "cs_kinds": ["eb"], "seed": 0})
    m = {"chunks": {"a": {"task": "uniform", "setup": 2},
                    "b": {"task": "uniform", "setup": _study.SETUP + 1}}}
    with pytest.raises(StudyFolderError, match=f"set-up {_study.SETUP + 1} from a newer"):
        _study._check_setup(s, m, tmp_path, ["uniform"])
    _study._check_setup(s, m, tmp_path, [])  # (nothing left to add: no refusal)


def test_only_tasks_with_units_left_are_checked_against_older_set_ups(tmp_path):
    """A folder whose UCB-E chunks were computed under set-up 2 (before the EB sequence
    changed) cannot be extended, but once complete it is left alone: resuming it does
    nothing (the set-up check applies to the tasks with units left, not to every task),
    and its chunks stay as they were."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 16,
                         "chunk_size": 8, "lanes": 1, "policies": ["ucbe"],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5],
                         "cs_kinds": ["eb"], "seed": 0})
    assert "ucbe" in _study._setup_changes(s, 2)

    def as_set_up_2(m, drop_last=False):
        for e in m["chunks"].values():
            e["setup"] = 2
        if drop_last:  # (its units are left to compute)
            del m["chunks"][max(m["chunks"])]

    part = run_study(s, tmp_path / "part", progress=False)
    _edit_manifest(part, lambda m: as_set_up_2(m, drop_last=True))
    with pytest.raises(StudyFolderError, match="'ucbe' has chunks computed by an earlier"):
        resume_study(part, progress=False)
    whole = run_study(s, tmp_path / "whole", progress=False)
    _edit_manifest(whole, as_set_up_2)
    def kept():  # the chunk files and their records (the manifest is rewritten as JSON)
        return ({p: p.read_bytes() for p in (whole / "chunks").rglob("*") if p.is_file()},
                json.loads((whole / "manifest.json").read_text())["chunks"])

    before = kept()
    resume_study(whole, progress=False)
    assert kept() == before and len(before[0]) == 2


def test_pin_fit_refits_when_the_saved_fit_is_not_the_recorded_one(tmp_path, monkeypatch):
    """A ``problem.npz`` that reads well but whose values are not the ones the manifest
    recorded is not used: the fit is redone, installed when it matches the record, and
    written over the wrong file."""
    monkeypatch.setattr(_study, "_PROBLEM_CACHE", {})  # (its fake fit stays here)
    s, _ = _npz_study(tmp_path, 2, "pulse")

    def fit(v):
        return {"V": np.full((10, 2), v, np.float32), "c": np.full(10, v, np.float32),
                "u_mean": np.full(2, v, np.float32), "rho": np.asarray(0.5)}

    out = tmp_path / "o"
    out.mkdir()
    _study._write_fit(out / "problem.npz", s, fit(1.0))
    monkeypatch.setattr(_study, "_fit_arrays", lambda study: fit(2.0))
    m = {"problem_sha256": _study._fit_sha(fit(2.0))}
    _study._pin_fit(s, out, m)
    got = _study._PROBLEM_CACHE[_study._problem_key(s, True)][0].item_factors
    np.testing.assert_array_equal(got.V, fit(2.0)["V"])
    assert _study._fit_sha(_study._read_fit(out / "problem.npz", s)) == m["problem_sha256"]


# ------------------------------------------------------------- budgets
def test_study_budgets_take_half_the_models_for_training_by_default(tmp_path):
    """``n_train`` 0 means ``m // 2`` training models (as the split does), the rest
    the pool: with 7 models, 3 and 4."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "s.npz", scores=(rng.random((7, 10)) < 0.5).astype(np.float32))
    s = study_from_dict({"kind": "identification", "data": {"npz": str(tmp_path / "s.npz")},
                         "num_arms": 2, "budgets": [0.5], "n_replicates": 8})
    info, budgets = _study.study_budgets(s)
    assert (info["training_models"], info["pool_models"], info["models"]) == (3, 4, 7)
    assert budgets == (10,) and info["calls_full"] == 20


def test_study_budgets_allow_exactly_the_most_calls():
    """K*n equal to the kernels' limit is allowed; one call more is refused by name."""
    most = _study._MAX_CALLS
    assert most % 3 == 0

    def study(n):
        return study_from_dict({"kind": "identification", "num_arms": 3, "budgets": [0.5],
                                "n_replicates": 8, "data": {"synthetic": {"n_items": n}}},
                               check=False)

    info, _ = _study.study_budgets(study(most // 3))
    assert info["calls_full"] == most
    with pytest.raises(StudyConfigError, match="data.synthetic.n_items"):
        _study.study_budgets(study(most // 3 + 1))


# ------------------------------------------------------------ task lists
def test_identification_tasks_are_named_by_the_policies_labels():
    """Two runs of one policy with other labels are two tasks named by their labels
    (named by the policy they would share one name, and one chunk folder)."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 16,
                         "chunk_size": 8, "lanes": 8,
                         "policies": [{"policy": "ucbe", "label": "ucbe_a"},
                                      {"policy": "ucbe", "label": "ucbe_b",
                                       "settings": {"a": 2.0}}],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5]})
    assert [t.name for t in s.tasks()] == ["ucbe_a", "ucbe_b"]
    assert [t.n for t in s.tasks()] == [16, 16]


class _FakeMatrix:
    n_items = 30


@pytest.fixture
def anchors(monkeypatch):
    """An anchor study over a stand-in score matrix of 30 items, its protocol replaced
    by one that records the seeds it is asked for."""
    monkeypatch.setattr(DataSource, "load", lambda self: _FakeMatrix())
    seen = []

    def unit(study, sm, k, seed):
        seen.append((k, seed))
        return {"seed": np.float64(seed), "k": np.float64(k)}

    monkeypatch.setattr(_study, "_anchor_unit", unit)
    s = AnchorStudy(data=DataSource(npz="/x.npz"), methods=("random_mean",), k=(5, 7),
                    n_seeds=6, first_seed=40, chunk_size=4)
    return s, seen


def test_anchor_tasks_run_seed_first_seed_plus_unit(anchors):
    """Unit ``r`` of task ``k{k}`` is the split with seed ``first_seed + r``; the tasks
    are one per ``k``, of ``n_seeds`` units in chunks of ``chunk_size``."""
    s, seen = anchors
    tasks = _study._anchor_tasks(s)
    assert [(t.name, t.n, t.chunk_size) for t in tasks] == [("k5", 6, 4), ("k7", 6, 4)]
    got = list(tasks[1].compute([(2, 4), (4, 5)], False))
    assert [(lo, hi) for lo, hi, _ in got] == [(2, 4), (4, 5)]
    np.testing.assert_array_equal(got[0][2]["seed"], [42.0, 43.0])
    np.testing.assert_array_equal(got[1][2]["seed"], [44.0])
    assert seen == [(7, 42), (7, 43), (7, 44)]


def test_anchor_preflight_refuses_k_equal_to_the_items(anchors, monkeypatch):
    """``k`` must be below the number of items: ``k == n_items`` leaves nothing to
    predict and is refused by name before the folder is made."""
    s, _ = anchors
    with pytest.raises(StudyConfigError, match="k=30 must be below the 30 items"):
        _study._preflight(AnchorStudy(data=s.data, methods=s.methods, k=(5, 30)))


def test_anchor_unit_stores_each_metric_under_its_own_name(monkeypatch):
    """Each method's MAE, tau, coverage and width land in their own fields."""
    import jaxeval.anchors._protocol as protocol

    class Res:
        methods = ("a", "b")
        mae_pp = np.array([[1.0], [2.0]])
        tau_b = np.array([[3.0], [4.0]])
        coverage = np.array([[5.0], [6.0]])
        width = np.array([[7.0], [8.0]])

    calls = []

    def fake(sm, k, methods, seeds, alpha):
        calls.append((k, methods, seeds, alpha))
        return Res()

    monkeypatch.setattr(protocol, "evaluate_protocol", fake)
    s = AnchorStudy(data=DataSource(npz="/x.npz"), methods=("random_mean", "auto"), k=(5,),
                    alpha=0.2)
    out = _study._anchor_unit(s, None, 5, 44)
    assert calls == [(5, ("random_mean", "auto"), (44,), 0.2)]
    out.pop("seconds")
    assert out == {"a.mae_pp": 1.0, "a.tau": 3.0, "a.coverage": 5.0, "a.width": 7.0,
                   "b.mae_pp": 2.0, "b.tau": 4.0, "b.coverage": 6.0, "b.width": 8.0}


def test_fit_checksum_covers_every_field_and_its_dtype():
    """The saved fit's checksum changes with each of its fields, ``rho`` (the online
    prior the prediction policies start from) included, and with a field's dtype."""
    a = {"V": np.ones((3, 2), np.float32), "c": np.zeros(3, np.float32),
         "u_mean": np.zeros(2, np.float32), "rho": np.asarray(0.5)}
    base = _study._fit_sha(a)
    for k, v in [("V", np.full((3, 2), 2, np.float32)), ("c", np.ones(3, np.float32)),
                 ("u_mean", np.ones(2, np.float32)), ("rho", np.asarray(1.0)),
                 ("c", np.zeros(3, np.float64))]:
        assert _study._fit_sha(dict(a, **{k: v})) != base, k
