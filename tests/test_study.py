"""Study definitions and the disk-backed, resumable study runner."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval._runner import run_replicates
from jaxeval._study import (
    AnchorStudy,
    IdentificationStudy,
    PolicySpec,
    ReplicateStudy,
    StudyConfigError,
    StudyFolderError,
    load_results,
    load_study,
    merge_studies,
    resume_study,
    run_study,
    study_from_dict,
    study_status,
)

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def toy(key):
    """The replicate function of the toy studies (imported as ``test_study:toy``)."""
    x = jax.random.uniform(key, (64,))
    return {"mean": jnp.mean(x), "arg": jnp.argmax(x), "head": x[:3], "n": jnp.sum(x > 0.5)}


def slow_toy(key):
    """A heavier replicate (a sort), so a study takes long enough to be killed mid-way."""
    x = jnp.sort(jax.random.uniform(key, (2048,)))
    return {"q": x[jnp.array([10, 1024, 2000])], "s": jnp.sum(x)}


def sleepy_toy(key):
    """A replicate that takes 50 ms of wall time (a host callback that sleeps), so a
    study can be interrupted mid-way whatever the machine's speed."""
    x = jax.random.uniform(key, (2,))

    def slow(v):
        time.sleep(0.05)
        return v

    y = jax.pure_callback(slow, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                          vmap_method="sequential")
    return {"s": jnp.sum(y)}


def odd_names(key):
    """A replicate whose fields carry np.savez's own argument names."""
    x = jax.random.uniform(key, (2,))
    return {"file": x, "allow_pickle": x[0], "other": x[1]}


def toy_config(**kw):
    d = {
        "kind": "replicates",
        "name": "toy",
        "target": "test_study:toy",
        "n_replicates": 300,
        "seed": 3,
        "chunk_size": 64,
        "lanes": 8,
    }
    d.update(kw)
    return d


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def assert_same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ------------------------------------------------------------ definitions
def test_identification_round_trip_and_defaults():
    s = study_from_dict(
        {
            "kind": "identification",
            "data": {"dataset": "oll2_musr"},
            "policies": ["pulse", {"policy": "ucbe", "label": "ucbe-a10", "settings": {"a": 10}}],
            "num_arms": 50,
            "budgets": [0.01, 0.1, 1.0],
            "alpha": 0.1,
        }
    )
    assert isinstance(s, IdentificationStudy)
    assert [p.name for p in s.policies] == ["pulse", "ucbe-a10"]
    assert dict(s.policies[1].settings) == {"a": 10.0}
    again = study_from_dict(json.loads(json.dumps(s.to_dict())))
    assert again == s and hash(again) == hash(s)
    a = study_from_dict({"kind": "anchors", "k": [20, 100], "methods": ["kmeans_ridge"]})
    assert isinstance(a, AnchorStudy) and study_from_dict(a.to_dict()) == a


@pytest.mark.parametrize(
    "patch, key",
    [
        ({"kind": "identifcation"}, "kind"),
        ({"nmu_arms": 5}, "nmu_arms"),
        ({"num_arms": 1}, "num_arms"),
        ({"num_arms": 2.5}, "num_arms"),
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": 0}, "alpha"),
        ({"n_replicates": 0}, "n_replicates"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"budgets": [0.5, 0.1]}, "budgets"),
        ({"budgets": [0.1, 1.5]}, "budgets[1]"),
        ({"policies": []}, "policies"),
        ({"policies": ["pulse", "pulse"]}, "policies"),
        ({"policies": ["greedy"]}, "policies[0].policy"),
        (
            {"policies": ["pulse", {"policy": "ucbe", "settings": {"aa": 1}}]},
            "policies[1].settings.aa",
        ),
        ({"policies": [{"policy": "ucbe", "settings": {"a": -1}}]}, "policies[0].settings.a"),
        ({"data": {"dataset": "nope"}}, "data.dataset"),
        ({"data": {"dataset": "oll2_musr", "npz": "x.npz"}}, "data"),
        ({"data": {"synthetic": {"n_items": 10, "rnak": 2}}}, "data.synthetic.rnak"),
        ({"data": {"npz": "/no/such/file.npz"}}, "data.npz"),
        ({"cs_kinds": ["eb", "magic"]}, "cs_kinds[1]"),
        ({"corruption": "evil"}, "corruption"),
    ],
)
def test_identification_refusals_name_the_key(patch, key):
    d = {"kind": "identification"}
    d.update(patch)
    with pytest.raises(StudyConfigError) as e:
        study_from_dict(d)
    assert e.value.key == key
    assert str(e.value).startswith(key + ":")


def test_budgets_in_calls_are_refused_as_fractions():
    """A study's budgets are fractions of K*n (simulate_identification's ``budgets`` are
    calls): budgets in calls get a message that says so."""
    with pytest.raises(StudyConfigError, match=r"budgets\[0\]: expected a fraction of K\*n"):
        study_from_dict({"kind": "identification", "budgets": [100, 99999]})


@pytest.mark.parametrize(
    "patch, key",
    [
        ({"methods": ["sparseval"]}, "methods[0]"),
        ({"k": [100, 20]}, "k"),
        ({"n_seeds": 0}, "n_seeds"),
        ({"seeds": 3}, "seeds"),
        ({"data": {"synthetic": {"n_items": 10}}}, "data.synthetic"),
    ],
)
def test_anchor_refusals_name_the_key(patch, key):
    d = {"kind": "anchors"}
    d.update(patch)
    with pytest.raises(StudyConfigError) as e:
        study_from_dict(d)
    assert e.value.key == key


def test_load_study_file_errors(tmp_path):
    p = tmp_path / "s.json"
    p.write_text("{not json")
    with pytest.raises(StudyConfigError, match="not valid JSON"):
        load_study(p)
    with pytest.raises(FileNotFoundError):
        load_study(tmp_path / "missing.json")
    with pytest.raises(StudyConfigError) as e:
        study_from_dict(toy_config(target="no_colon"))
    assert e.value.key == "target"


# ----------------------------------------------------------- disk runner
@pytest.fixture(scope="module")
def toy_reference():
    return run_replicates(toy, 3, 300, lanes=8, progress=False)


@pytest.mark.default_codegen
def test_study_equals_in_memory_runner(tmp_path, toy_reference):
    study = study_from_dict(toy_config())
    run_study(study, tmp_path / "a", progress=False)
    st = study_status(tmp_path / "a")
    assert st["complete"] and st["done"] == {"replicates": 300}
    again, res = load_results(tmp_path / "a")
    assert again == study
    assert_same(res["replicates"], toy_reference)
    files = sorted((tmp_path / "a" / "chunks" / "replicates").iterdir())
    assert len(files) == 5 and not any(f.name.startswith(".tmp") for f in files)
    # a finished study is not recomputed (the chunk files are left untouched)
    mtimes = [f.stat().st_mtime_ns for f in files]
    run_study(study, tmp_path / "a", progress=False)
    assert [f.stat().st_mtime_ns for f in files] == mtimes


def test_chunks_fill_every_device_block(tmp_path, toy_reference):
    """A study chunk of 16 replicates at 8 lanes on 8 devices ran a padded chunk of 64:
    4x the work. Chunks now hold whole blocks of lanes on every device (the results do
    not depend on it)."""
    import jax

    study = study_from_dict(toy_config(chunk_size=16))
    (task,) = study.tasks()
    assert task.chunk_size() == 8 * len(jax.devices())
    run_study(study, tmp_path / "a", progress=False)
    _, res = load_results(tmp_path / "a")
    assert_same(res["replicates"], toy_reference)
    files = list((tmp_path / "a" / "chunks" / "replicates").iterdir())
    assert len(files) == -(-300 // task.chunk_size())


def test_other_study_in_folder_is_refused_and_untouched(tmp_path):
    out = tmp_path / "a"
    run_study(study_from_dict(toy_config()), out, progress=False)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(StudyFolderError, match="'seed' is 3 there but 4 here"):
        run_study(study_from_dict(toy_config(seed=4)), out, progress=False)
    with pytest.raises(StudyFolderError, match="chunk_size"):
        run_study(study_from_dict(toy_config(chunk_size=32)), out, progress=False)
    with pytest.raises(StudyFolderError, match="replicates 0:300"):
        run_study(study_from_dict(toy_config()), out, replicate_range=(0, 100), progress=False)
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(StudyFolderError, match="not empty"):
        run_study(study_from_dict(toy_config()), foreign, progress=False)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    with pytest.raises(StudyFolderError, match="is a file, not a folder"):
        run_study(study_from_dict(toy_config()), a_file, progress=False)
    assert a_file.read_text() == "mine"


def test_corrupt_chunk_detected_and_recomputed(tmp_path, toy_reference):
    out = tmp_path / "a"
    run_study(study_from_dict(toy_config()), out, progress=False)
    victim = sorted((out / "chunks" / "replicates").iterdir())[2]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(StudyFolderError, match="missing or failing their checksum.*jaxeval "
                                               "resume"):
        load_results(out)  # an error, not also a warning that something "will be recomputed"
    with pytest.warns(UserWarning, match="recomputed"):
        resume_study(out, progress=False)
    _, res = load_results(out)
    assert_same(res["replicates"], toy_reference)
    # a truncated (half-written) file is caught the same way
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.warns(UserWarning, match="recomputed"):
        resume_study(out, progress=False)
    assert_same(load_results(out)[1]["replicates"], toy_reference)


def test_merge_of_independent_ranges_equals_one_run(tmp_path, toy_reference):
    s64 = study_from_dict(toy_config())
    s40 = study_from_dict(toy_config(chunk_size=40))  # chunk size does not change numbers
    run_study(s64, tmp_path / "p0", replicate_range=(0, 130), progress=False)
    run_study(s40, tmp_path / "p1", replicate_range=(130, 300), progress=False)
    assert not study_status(tmp_path / "p0")["complete"]
    with pytest.raises(StudyFolderError, match="incomplete|holds units up to"):
        load_results(tmp_path / "p0")
    merged = merge_studies([tmp_path / "p1", tmp_path / "p0"], tmp_path / "all")
    assert study_status(merged)["complete"]
    assert_same(load_results(merged)[1]["replicates"], toy_reference)
    # overlapping ranges, a different study, and a non-empty target are refused
    run_study(s64, tmp_path / "p2", replicate_range=(100, 200), progress=False)
    with pytest.raises(StudyFolderError, match="in both"):
        merge_studies([tmp_path / "p0", tmp_path / "p2"], tmp_path / "bad")
    run_study(
        study_from_dict(toy_config(seed=9)),
        tmp_path / "q",
        replicate_range=(130, 300),
        progress=False,
    )
    with pytest.raises(StudyFolderError, match=f"'seed' is 3 in {tmp_path / 'p0'} but 9 in "
                       f"{tmp_path / 'q'}"):
        merge_studies([tmp_path / "p0", tmp_path / "q"], tmp_path / "bad2")
    with pytest.raises(StudyFolderError, match="not empty"):
        merge_studies([tmp_path / "p0", tmp_path / "p1"], tmp_path / "all")
    # a partial merge can be completed with `resume`: its range is the whole study
    part = merge_studies([tmp_path / "p0"], tmp_path / "part")
    st = study_status(part)
    assert not st["complete"] and st["range"] == [0, 300] and st["done"] == {"replicates": 130}
    resume_study(part, progress=False)
    assert study_status(part)["complete"]
    assert_same(load_results(part)[1]["replicates"], toy_reference)



def test_an_edited_target_is_not_mixed_into_a_folder(tmp_path, monkeypatch):
    """A replicates study's function is its numbers: after its module is edited, resuming
    a folder or merging folders computed before and after the edit is refused (both
    mixed the two functions' replicates and called the result complete)."""
    import sys

    mod = tmp_path / "mc_edited.py"
    src = ("import jax\n\n\ndef rep(key):\n"
           "    return {'b': jax.random.bernoulli(key, 0.3, (3,)).astype('float32')}\n")
    mod.write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mc_edited", raising=False)
    # (no cached bytecode: an edit within the second of it, keeping the size, would
    # run the old code; that case is refused as a stale module, checked below)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    study = study_from_dict(toy_config(target="mc_edited:rep", n_replicates=32,
                                       chunk_size=8))
    run_study(study, tmp_path / "a", replicate_range=(0, 16), progress=False)
    part = tmp_path / "part"  # a folder with a chunk to recompute
    run_study(study, part, progress=False)
    lost = sorted(part.rglob("*.npz"))[0]
    lost.unlink()
    mod.write_text(src.replace("0.3", "0.9"))
    # the module this Python imported is not the file any more: refused, whatever folder
    with pytest.raises(StudyConfigError, match="the file was edited after the module was "
                                               "imported"):
        run_study(study, tmp_path / "b", replicate_range=(16, 32), progress=False)
    sys.modules.pop("mc_edited", None)
    run_study(study, tmp_path / "b", replicate_range=(16, 32), progress=False)
    with pytest.raises(StudyFolderError, match="target function came from different "
                                               "versions of its module"):
        merge_studies([tmp_path / "a", tmp_path / "b"], tmp_path / "ab")
    with pytest.raises(StudyFolderError, match="the target's module 'mc_edited' changed"):
        resume_study(part, progress=False)
    assert not lost.exists()  # nothing was computed
    mod.write_text(src)  # restored: the folder continues
    sys.modules.pop("mc_edited", None)
    with pytest.warns(UserWarning, match="recomputed"):
        resume_study(part, progress=False)
    assert lost.exists() and study_status(part)["complete"]
    whole = load_results(part)[1]["replicates"]
    first = load_results(tmp_path / "a", allow_partial=True)[1]["replicates"]
    assert_same({k: v[:16] for k, v in whole.items()}, first)  # the same function's



def test_an_edited_study_json_is_not_ignored(tmp_path):
    """study.json is the folder's study written out for people; an edit there used to be
    ignored by resume (which continues the manifest's study), leaving a folder whose
    study.json says seed 5 and whose results are seed 3's."""
    study = study_from_dict(toy_config(n_replicates=32, chunk_size=8))
    out = tmp_path / "s"
    run_study(study, out, replicate_range=(0, 16), progress=False)
    copy = out / "study.json"
    copy.write_text(json.dumps(toy_config(n_replicates=32, chunk_size=8, seed=5)))
    with pytest.raises(StudyFolderError, match=r"study.json, the copy of the folder's study "
                                               r"for people, was edited \('seed' is 3 in "
                                               r"manifest.json but 5 in it\)"):
        resume_study(out, progress=False)
    copy.write_text("{not json")
    with pytest.raises(StudyFolderError, match="is not the JSON the folder wrote"):
        resume_study(out, progress=False)
    assert study_status(out)["done"] == {"replicates": 16}
    copy.unlink()  # deleting it is enough: written again from the manifest
    resume_study(out, progress=False)
    assert json.loads(copy.read_text()) == study.to_dict()


def test_reading_a_folder_needs_neither_the_data_nor_the_target(tmp_path, monkeypatch):
    """Status, results and merges of finished folders are read from the manifests alone:
    a replicate study's target need not import, an identification study's relative
    data path need not resolve from where it is read."""
    run_study(study_from_dict(toy_config(n_replicates=16, chunk_size=8)), tmp_path / "t",
              progress=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(TESTS)])
    sys.modules.pop("test_study", None)
    with pytest.raises(StudyConfigError, match="cannot import"):
        study_from_dict(toy_config()).check()
    assert study_status(tmp_path / "t")["complete"]
    assert load_results(tmp_path / "t")[1]["replicates"]["mean"].shape == (16,)
    merge_studies([tmp_path / "t"], tmp_path / "m")
    assert study_status(tmp_path / "m")["complete"]
    # an identification study over a relative .npz path, read from another folder
    data = tmp_path / "d"
    data.mkdir()
    np.savez(data / "s.npz", scores=np.zeros((4, 3), np.float32))
    monkeypatch.chdir(data)
    cfg = {"kind": "identification", "data": {"npz": "s.npz"}, "n_replicates": 8}
    ident = study_from_dict(cfg)
    out = tmp_path / "ident"
    out.mkdir()
    from jaxeval._study import FORMAT, MANIFEST_FILE, _hash_json, results_key

    (out / MANIFEST_FILE).write_text(json.dumps({
        "format": FORMAT, "study_hash": _hash_json(ident.to_dict()),
        "results_hash": _hash_json(results_key(ident)), "config": ident.to_dict(),
        "range": [0, 8], "chunks": {}, "complete": False, "task_names": ["pulse"],
    }))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudyConfigError, match="no such file"):
        study_from_dict(cfg)
    assert study_status(out)["done"] == {"pulse": 0}


def test_a_run_killed_while_creating_its_folder_starts_again(tmp_path):
    """A kill between the folder's first two files (or during the first) leaves leftovers
    that the next run accepts: this study's study.json, half-written .tmp-* files."""
    study = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    out = tmp_path / "k"
    out.mkdir()
    (out / "study.json").write_text(json.dumps(study.to_dict()))
    (out / ".tmp-123-manifest.json").write_text("{")
    run_study(study, out, progress=False)
    assert study_status(out)["complete"]
    # a study.json of another study is not a leftover: refused, nothing touched
    other = tmp_path / "o"
    other.mkdir()
    (other / "study.json").write_text(json.dumps(toy_config(seed=9)))
    with pytest.raises(StudyFolderError, match="not empty"):
        run_study(study, other, progress=False)
    assert sorted(p.name for p in other.iterdir()) == ["study.json"]
    # a manifest without its study.json copy (killed between the writes) gets it back
    (out / "study.json").unlink()
    resume_study(out, progress=False)
    assert json.loads((out / "study.json").read_text()) == study.to_dict()


def test_a_second_writer_of_one_folder_is_refused(tmp_path):
    """While one process writes a study folder (it holds the folder's lock) another run
    on the same folder is refused and deletes nothing."""
    pytest.importorskip("fcntl")  # POSIX: the lock is an flock
    study = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    out = tmp_path / "w"
    run_study(study, out, replicate_range=(0, 8), progress=False)
    tmp = out / "chunks" / "replicates" / ".tmp-999-0000000008-0000000016.npz"
    tmp.write_bytes(b"half")
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(out)!r}, os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StudyFolderError, match="being written by another process"):
            resume_study(out, progress=False)
        assert tmp.exists()
    finally:
        holder.kill()
        holder.wait()


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _chunks_done(out):
    try:
        return len(json.loads((out / "manifest.json").read_text())["chunks"])
    except (OSError, json.JSONDecodeError, KeyError):
        return 0


def test_ctrl_c_stops_with_a_line_that_says_how_to_resume(tmp_path):
    """Ctrl-C ended the command with a KeyboardInterrupt traceback: it now prints one
    line naming the folder and how to continue, keeps the chunks written so far, and
    still ends by the signal (a shell loop around it stops too)."""
    cfg = toy_config(target="test_study:sleepy_toy", n_replicates=96, chunk_size=8)
    cfg_path = tmp_path / "s.json"
    cfg_path.write_text(json.dumps(cfg))
    out = tmp_path / "my runs"  # (a space: the hint quotes the path for a shell)
    # (the child sets Python's own SIGINT handler first: a test run started in the
    # background by a non-interactive shell inherits SIGINT ignored, and Python keeps
    # it so; a preexec_fn would fork a multithreaded process)
    child = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "from jaxeval._cli import cli; sys.exit(cli(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", child, "run", str(cfg_path), "--out",
                             str(out), "--quiet", "--no-report"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    try:  # each chunk sleeps 8 x 50 ms: 12 chunks, ~5 s after the first
        while time.time() < deadline and proc.poll() is None and _chunks_done(out) < 1:
            time.sleep(0.005)
        assert proc.poll() is None, "the study finished before it could be stopped"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGINT, err
    assert f"jaxeval: interrupted; the finished chunks are kept in {out}: `jaxeval resume " \
           f"'{out}'` continues the study" in err, err
    assert "Traceback" not in err, err
    st = study_status(out)
    assert not st["complete"] and 0 < st["done"]["replicates"] < 96
    resume_study(out, progress=False)
    assert study_status(out)["complete"]


@pytest.mark.default_codegen
def test_kill_9_mid_way_then_resume_gives_identical_arrays(tmp_path):
    """A real subprocess is SIGKILLed while writing chunks; `resume` finishes the job."""
    cfg = toy_config(target="test_study:slow_toy", n_replicates=768, chunk_size=16, seed=11)
    cfg_path = tmp_path / "s.json"
    cfg_path.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "jaxeval",
        "run",
        str(cfg_path),
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    ]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    manifest = out / "manifest.json"
    deadline = time.time() + 240
    done = 0
    try:
        while time.time() < deadline and proc.poll() is None:
            if manifest.exists():
                try:
                    done = len(json.loads(manifest.read_text())["chunks"])
                except (json.JSONDecodeError, KeyError):
                    done = 0
                if done >= 3:
                    break
            time.sleep(0.005)
        assert proc.poll() is None, "the study finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    st = study_status(out)
    assert not st["complete"] and 0 < st["done"]["replicates"] < 768
    # resume in another process, as a user would
    res = subprocess.run(
        [sys.executable, "-m", "jaxeval", "resume", str(out), "--quiet", "--no-report"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert study_status(out)["complete"]
    _, got = load_results(out)
    expect = run_replicates(slow_toy, 11, 768, chunk_size=256, lanes=8, progress=False)
    assert_same(got["replicates"], expect)
    assert not list(out.rglob(".tmp-*"))  # a half-written file of the killed run is removed


def test_resume_of_a_non_study_folder(tmp_path):
    with pytest.raises(StudyFolderError, match="not a study folder"):
        resume_study(tmp_path)


@pytest.mark.default_codegen
@pytest.mark.slow
def test_two_process_study_with_jax_distributed(tmp_path, toy_reference):
    """`jaxeval run --coordinator ...` on 2 processes (2 devices each) = one process."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg_path = tmp_path / "s.json"
    cfg_path.write_text(json.dumps(toy_config()))
    out = tmp_path / "dist"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jaxeval",
                "run",
                str(cfg_path),
                "--out",
                str(out),
                "--quiet",
                "--no-report",
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    assert study_status(out)["complete"]
    assert_same(load_results(out)[1]["replicates"], toy_reference)


@pytest.mark.slow
def test_identification_study_equals_simulate_identification(tmp_path):
    """The study runner and the numpy wrapper play the same protocol, bit for bit."""
    import jaxeval

    study = study_from_dict(
        {
            "kind": "identification",
            "data": {"synthetic": {"n_items": 30, "rank": 2}},
            "policies": ["ucbe", "uniform"],
            "num_arms": 3,
            "budgets": [0.1, 0.5, 1.0],
            "n_replicates": 48,
            "seed": 5,
            "chunk_size": 32,
        }
    )
    run_study(study, tmp_path / "s", progress=False)
    _, res = load_results(tmp_path / "s")
    for policy in ("ucbe", "uniform"):
        rep = jaxeval.simulate_identification(
            jaxeval.SyntheticSpec(n_items=30, rank=2),
            policy,
            K=3,
            n_replicates=48,
            seed=5,
            budget_fractions=(0.1, 0.5, 1.0),
        )
        np.testing.assert_array_equal(res[policy]["theta"], rep.theta)
        np.testing.assert_array_equal(res[policy]["checkpoints.recommended"], rep.recommended)
    # both policies saw the same instances (here: the same synthetic truths)
    np.testing.assert_array_equal(res["ucbe"]["theta"], res["uniform"]["theta"])
    from jaxeval._report import format_summary, plot_study, summarize

    s = summarize(study, res)
    assert s["policies"]["ucbe"]["accuracy"][-1] == 1.0  # everything seen at 100% of K*n
    assert "ucbe" in format_summary(s)
    # every coverage figure ends under its column's 'cover(<kind>)' header
    text = format_summary(s).splitlines()
    head = next(ln for ln in text if "cover(" in ln)
    ends = [m.end() - 1 for m in re.finditer(r"cover\(\w+\)", head)]
    assert len(ends) == len(study.cs_kinds) and "hoeffding" in study.cs_kinds
    rows = [ln for ln in text if ln.strip().startswith(("ucbe ", "uniform "))]
    assert len(rows) == 2 and all(r[e] == "%" for r in rows for e in ends), (head, rows)
    pngs = plot_study(s, tmp_path / "plots")
    assert len(pngs) == 4 and all(p.stat().st_size > 10_000 for p in pngs)


@pytest.mark.slow
def test_anchor_study_matches_protocol(tmp_path):
    from jaxeval.anchors._protocol import evaluate_protocol

    study = study_from_dict(
        {
            "kind": "anchors",
            "data": {"dataset": "oll2_musr"},
            "methods": ["random_mean", "kmeans_ridge"],
            "k": [20],
            "n_seeds": 2,
        }
    )
    run_study(study, tmp_path / "a", progress=False)
    _, res = load_results(tmp_path / "a")
    import jaxeval

    ref = evaluate_protocol(jaxeval.load("oll2_musr"), 20, study.methods, seeds=(42,))
    for i, m in enumerate(ref.methods):
        assert res["k20"][f"{m}.mae_pp"][0] == pytest.approx(ref.mae_pp[i, 0], rel=1e-6)
        assert res["k20"][f"{m}.tau"][0] == pytest.approx(ref.tau_b[i, 0], rel=1e-6)
    from jaxeval._report import plot_study, summarize

    s = summarize(study, res)
    assert s["methods"]["kmeans_ridge"]["mae_pp"][0] < s["methods"]["random_mean"]["mae_pp"][0]
    assert plot_study(s, tmp_path / "plots")[0].stat().st_size > 10_000


def test_anchor_summary_averages_tau_where_it_is_defined(tmp_path):
    """tau-b is NaN on a split whose predictions are all equal (random anchors that are
    all 0 on a hard benchmark): one NaN hid the other splits' values, and its null in
    summary.json broke the table and the plot of a finished study."""
    import json

    from jaxeval._report import _round, format_summary, plot_study, summarize

    study = study_from_dict({"kind": "anchors", "name": "nan-tau",
                             "data": {"dataset": "oll2_musr"},
                             "methods": ["random_mean", "kmeans_ridge"], "k": [20],
                             "n_seeds": 2})
    one = {"mae_pp": np.array([3.0, 5.0]), "coverage": np.array([0.9, 0.8]),
           "width": np.array([0.1, 0.2])}
    res = {"k20": {"seconds": np.array([1.0, 1.0]),
                   "random_mean.tau": np.array([np.nan, 0.5]),
                   "kmeans_ridge.tau": np.array([np.nan, np.nan]),
                   **{f"{m}.{f}": v for m in study.methods for f, v in one.items()}}}
    s = summarize(study, res)
    assert s["methods"]["random_mean"]["tau"][0] == 0.5
    assert s["methods"]["random_mean"]["tau_sd"][0] == 0.0
    assert list(s["methods"]["random_mean"]["tau_undefined"]) == [1]
    assert s["methods"]["random_mean"]["mae_pp"][0] == 4.0
    on_disk = json.loads(json.dumps(_round(s), allow_nan=False))
    assert on_disk["methods"]["kmeans_ridge"]["tau"] == [None]
    text = format_summary(on_disk)
    assert "n/a" in text and "random_mean at k=20: 1; kmeans_ridge at k=20: 2" in text
    assert plot_study(on_disk, tmp_path / "plots")[0].stat().st_size > 10_000


def test_calls_label_names_the_grid_it_was_not_reached_in():
    from jaxeval._report import _calls_label

    assert _calls_label(0.125, np.array([5.0, 10.0, 20.0])) == "(12.5%)"
    assert _calls_label(None, np.array([5.0, 10.0, 20.0])) == "(>20%)"  # was "(>100%)"
    assert _calls_label(None, np.array([0.5, 100.0])) == "(>100%)"


def test_study_problem_uses_simulate_identifications_refit_defaults():
    """A prediction policy's online refit in a study uses what
    ``simulate_identification`` uses: the factorization's ``online_rho`` and its default
    number of Newton steps (they had drifted to ``rho_u`` and two steps); explicit
    settings still win."""
    import inspect

    import jaxeval
    from jaxeval._study import identification_problem

    study = study_from_dict({
        "kind": "identification", "data": "oll2_ifeval", "num_arms": 3, "n_replicates": 4,
        "fit_steps": 20, "rank": 2, "budgets": [0.1],
        "policies": ["pulse_ucb", {"policy": "pulse", "settings": {"rho": 3.0, "num_newton": 2}}],
    })
    sim_newton = inspect.signature(jaxeval.simulate_identification).parameters["num_newton"]
    config, data, params, _ = identification_problem(study, study.policies[0])
    assert config.num_newton == sim_newton.default == 1
    sm = jaxeval.load("oll2_ifeval").drop_duplicates()
    train, _ = sm.split([sm.n_models // 2], seed=study.seed)
    lr = jaxeval.fit_factorization(train, rank=2, rho=1.0, seed=study.seed, num_steps=20)
    assert float(params.rho) == lr.online_rho != lr.rho_u
    config, _, params, _ = identification_problem(study, study.policies[1])
    assert (config.num_newton, float(params.rho)) == (2, 3.0)


@pytest.mark.parametrize(
    "patch, key, text",
    [
        ({"num_arms": 300}, "num_arms", "K must be at most the candidate pool size"),
        ({"n_train": 426}, "n_train", r"n_train: .*expected an integer in \[0, 425\]"),
    ],
)
def test_study_split_refusals_name_the_key(patch, key, text):
    """The study splits training models and candidate pool with the wrapper's
    ``split_pool`` (no second copy of the split or its checks); its refusals name the
    study's key."""
    from jaxeval._study import identification_problem

    d = {"kind": "identification", "data": "oll2_ifeval", "n_replicates": 4,
         "policies": ["ucbe"], "budgets": [0.1], **patch}
    study = study_from_dict(d)
    with pytest.raises(StudyConfigError, match=text) as e:
        identification_problem(study, study.policies[0])
    assert e.value.key == key and str(e.value).startswith(key + ":")



def test_budgets_rounded_far_from_their_fraction_are_said(tmp_path):
    """A fraction of K*n that is a fraction of one call is rounded up to a whole call:
    the tables label the checkpoint with the requested fraction, so it is said (0.001
    of 80 calls ran as 1 call, 1.25%, labelled acc@0.1%)."""
    d = {"kind": "identification", "data": {"synthetic": {"n_items": 20, "rank": 2}},
         "num_arms": 4, "n_replicates": 4, "policies": ["ucbe"], "chunk_size": 4}
    with pytest.warns(UserWarning, match=r"budgets: 1 fraction\(s\) of K\*n = 80 calls .* "
                                         r"e.g. 0.001 to 1 call\(s\), 1.25% of K\*n"):
        run_study(study_from_dict({**d, "budgets": [0.001, 0.5]}), tmp_path / "a",
                  progress=False)
    with warnings.catch_warnings():  # near a whole number of calls: nothing to say
        warnings.simplefilter("error")
        run_study(study_from_dict({**d, "budgets": [0.1, 0.5]}), tmp_path / "b",
                  progress=False)


def test_missing_cells_in_a_study_pool_are_named_once(tmp_path):
    """A pool with a missing cell: the message names the data file once, under its key
    (it read "data: FILE: data: the simulation needs ...")."""
    from jaxeval import ScoreMatrix
    from jaxeval._study import identification_problem

    rng = np.random.default_rng(0)
    mask = np.ones((20, 12), bool)
    mask[::2, 4] = False  # half the models: the pool holds some
    path = ScoreMatrix((rng.random((20, 12)) < 0.5).astype(np.float32),
                       mask=mask).to_npz(tmp_path / "holes.npz")
    study = study_from_dict({"kind": "identification", "data": {"npz": str(path)},
                             "n_replicates": 4, "policies": ["ucbe"], "budgets": [0.5],
                             "num_arms": 3})
    with pytest.raises(StudyConfigError) as e:
        identification_problem(study, study.policies[0])
    assert e.value.key == "data"
    assert str(e.value).startswith(f"data: {path}: the simulation needs the full truth"), \
        str(e.value)


def test_folder_of_an_older_setup_is_not_extended_or_merged(tmp_path):
    """Chunks of an earlier set-up (no ``setup`` in their manifest entry: 1, before the
    refit defaults were aligned; 2, before the empirical-Bernstein penalty was fixed)
    are not extended by resume, nor merged with new ones, for a task whose numbers the
    change moved; the folder is not touched (not even its corrupt chunks). Unaffected
    tasks, tasks without chunks and explicit settings are allowed."""
    import hashlib

    from jaxeval._study import SETUP, DataSource, _check_setup, _open_folder, _setup_changes

    d = {"kind": "identification", "data": {"synthetic": {"n_items": 30, "rank": 2}},
         "num_arms": 3, "n_replicates": 8, "budgets": [0.5], "cs_kinds": ["hoeffding"],
         "policies": ["ucbe", "pulse_ucb",
                      {"policy": "naive", "label": "naive2", "settings": {"num_newton": 1}},
                      {"policy": "pulse", "label": "norefit", "settings": {"refit": False}}]}
    study = study_from_dict(d)  # no EB sequence: only the refit change (set-up 2) matters
    sens = _setup_changes(study, 1, 3)
    assert list(sens) == ["pulse_ucb"] and "rho" not in sens["pulse_ucb"]  # synthetic
    assert _setup_changes(study, 4) == {} == _setup_changes(study, SETUP)
    # set-up 4 moved the naive recommendation and SySRs (one run per budget)
    assert list(_setup_changes(study, 2)) == ["naive2"] == list(_setup_changes(study, 3))
    assert "pooled" in _setup_changes(study, 3)["naive2"]
    sr = study_from_dict(dict(d, policies=["sysrs", "ucbe"]))
    assert list(_setup_changes(sr, 3)) == ["sysrs"] and _setup_changes(sr, 2, 3) == {}
    # set-up 5 moved the intervals of the named anchor methods calibrated on halves
    an = AnchorStudy(methods=("kmeans_ridge", "random_mean", "auto"), k=(20, 100))
    assert sorted(_setup_changes(an, 4)) == ["k100", "k20"]
    assert "kmeans_ridge" in _setup_changes(an, 4)["k20"]
    assert _setup_changes(AnchorStudy(methods=("random_mean", "auto")), 4) == {}
    assert _setup_changes(an, SETUP) == {}
    assert _setup_changes(an, 5) == {}  # set-up 6 moved the MLP-trained methods only
    # set-up 6 moved the MLP-trained methods' intervals (halves too now)
    mlp = AnchorStudy(methods=("sparseeval", "random_mean", "auto"), k=(20,))
    assert list(_setup_changes(mlp, 5)) == ["k20"] and "sparseeval" in _setup_changes(mlp, 5)["k20"]
    assert list(_setup_changes(mlp, 4)) == ["k20"] and _setup_changes(mlp, 4, 5) == {}
    # set-up 7 moved auto's interval (validation halves) where it chooses on validation
    # models: >= Settings.auto_cv_below of them, i.e. >= ~500 distinct models here
    assert _setup_changes(mlp, 6) == {}  # MuSR: 85 validation models, auto cross-validates
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "big.npz", scores=(rng.random((520, 40)) < 0.5).astype(np.float32))
    big = AnchorStudy(data=DataSource(npz=str(tmp_path / "big.npz")), methods=("auto",),
                      k=(5,))
    assert list(_setup_changes(big, 6)) == ["k5"] and "auto" in _setup_changes(big, 6)["k5"]
    assert _setup_changes(big, 6, 6) == {} and _setup_changes(big, SETUP) == {}
    # set-up 8 swapped auto's validation-regime MLP for the ensemble: there only
    assert "halves" in _setup_changes(big, 6, 7)["k5"]
    assert "greedy_mlp_ens" not in _setup_changes(big, 6, 7)["k5"]
    assert "greedy_mlp_ens" in _setup_changes(big, 7)["k5"]
    assert "halves" not in _setup_changes(big, 7)["k5"]
    assert "halves" in _setup_changes(big, 6)["k5"] and "greedy_mlp_ens" in _setup_changes(
        big, 6)["k5"]
    assert _setup_changes(AnchorStudy(data=big.data, methods=("random_mean",), k=(5,)), 6) == {}
    small = tmp_path / "small.npz"
    np.savez(small, scores=(rng.random((480, 40)) < 0.5).astype(np.float32))
    assert _setup_changes(AnchorStudy(data=DataSource(npz=str(small)), methods=("auto",),
                                      k=(5,)), 6) == {}  # 96 validation models: CV
    # the boundary: exactly Settings.auto_cv_below validation models choose on them
    for n, moved in ((498, True), (495, False)):
        np.savez(small, scores=(rng.random((n, 40)) < 0.5).astype(np.float32))
        edge = AnchorStudy(data=DataSource(npz=str(small)), methods=("auto",), k=(5,))
        assert edge.data.load().protocol_split(42).validation.n_models == 100 - (not moved)
        assert bool(_setup_changes(edge, 6)) == moved, n
    small.unlink()  # data that cannot be read: counted as moved (never mixed)
    assert list(_setup_changes(AnchorStudy(data=DataSource(npz=str(small)),
                                           methods=("auto",), k=(5,)), 6)) == ["k5"]
    assert list(_setup_changes(AnchorStudy(data=DataSource(npz=str(small)),
                                           methods=("auto",), k=(5,)), 7)) == ["k5"]
    real = study_from_dict(dict(d, data="oll2_ifeval", policies=["pulse"]))
    assert "online_rho" in _setup_changes(real, 1)["pulse"]
    eb = study_from_dict(dict(d, cs_kinds=["eb", "hoeffding"]))  # the EB fix moves all
    assert set(_setup_changes(eb, 2)) == {"ucbe", "pulse_ucb", "naive2", "norefit"}
    assert "Newton" in _setup_changes(eb, 1)["pulse_ucb"]
    assert "Newton" not in _setup_changes(eb, 2)["pulse_ucb"]
    assert _setup_changes(eb, 1, 2) == sens

    def folder(name, entries, st=study):
        out = tmp_path / name
        manifest = _open_folder(st, out, (0, 8))  # the folder as `run` creates it
        for task, lo, hi, setup, intact in entries:
            f = out / "chunks" / task / f"{lo:06d}-{hi:06d}.npz"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"chunk %d" % lo)
            sha = hashlib.sha256(f.read_bytes()).hexdigest() if intact else "0" * 64
            e = {"task": task, "lo": lo, "hi": hi, "sha256": sha}
            if setup is not None:  # entries of an earlier jaxeval have no "setup"
                e["setup"] = setup
            manifest["chunks"][str(f.relative_to(out))] = e
        (out / "manifest.json").write_text(json.dumps(manifest))
        return out, manifest

    old, man = folder("old", [("pulse_ucb", 0, 2, None, True), ("pulse_ucb", 2, 4, None, False),
                              ("ucbe", 0, 4, None, True)])
    before = {p: p.read_bytes() for p in old.rglob("*") if p.is_file()}
    with pytest.raises(StudyFolderError,
                       match=r"'pulse_ucb' has chunks computed by an earlier.*Newton.*new folder"):
        run_study(study, old, progress=False)
    with pytest.raises(StudyFolderError, match=r"earlier jaxeval"):
        resume_study(old, progress=False)
    assert {p: p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    with pytest.raises(StudyFolderError, match=r"checksum.*\['pulse_ucb'\].*new folder"):
        load_results(old)  # not "run jaxeval resume", which would refuse
    # what may go on: unaffected or chunk-less pending tasks, this set-up's chunks,
    # set-up 2 chunks where only the EB change lies between
    _check_setup(study, man, old, ["ucbe", "naive2", "norefit"])
    _, man2 = folder("new", [("pulse_ucb", 4, 8, SETUP, True)])
    _check_setup(study, man2, old, ["pulse_ucb", "ucbe"])
    _, man2b = folder("two", [("pulse_ucb", 4, 8, 2, True)])
    _check_setup(study, man2b, old, ["pulse_ucb"])
    _, man3 = folder("newer", [("pulse_ucb", 4, 8, SETUP + 1, True)])
    with pytest.raises(StudyFolderError, match="newer jaxeval"):
        _check_setup(study, man3, old, ["pulse_ucb"])
    intact, _ = folder("intact", [("pulse_ucb", 0, 4, None, True)])
    with pytest.raises(StudyFolderError, match=r"'pulse_ucb'.*different study set-ups"):
        merge_studies([intact, tmp_path / "new"], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
    # with the EB sequence, set-up 2 chunks of any policy are not extended or merged
    eb2, man_eb = folder("eb2", [("ucbe", 0, 4, 2, True)], st=eb)
    with pytest.raises(StudyFolderError,
                       match=rf"'ucbe'.*set-up 2, now {SETUP}: empirical-Bernstein"):
        _check_setup(eb, man_eb, eb2, ["ucbe"])
    with pytest.raises(StudyFolderError, match=rf"'ucbe'.*set-up 2, now {SETUP}"):
        run_study(eb, eb2, progress=False)
    folder("eb3", [("ucbe", 4, 8, SETUP, True)], st=eb)
    with pytest.raises(StudyFolderError, match=r"'ucbe'.*different study set-ups"):
        merge_studies([eb2, tmp_path / "eb3"], tmp_path / "merged_eb")


@pytest.mark.slow
def test_real_data_prediction_study_equals_simulate_identification(tmp_path):
    """On real data with a factorization (PULSE's online refit), the study runner and
    the numpy wrapper give the same numbers bit for bit."""
    import jaxeval

    study = study_from_dict({
        "kind": "identification", "data": "oll2_ifeval", "policies": ["pulse_ucb"],
        "num_arms": 3, "budgets": [0.05, 0.2], "n_replicates": 16, "seed": 2,
        "chunk_size": 16, "rank": 2, "fit_steps": 50,
    })
    run_study(study, tmp_path / "s", progress=False)
    _, res = load_results(tmp_path / "s")
    rep = jaxeval.simulate_identification(
        jaxeval.load("oll2_ifeval"), "pulse_ucb", K=3, n_replicates=16, seed=2,
        budget_fractions=(0.05, 0.2), rank=2, fit_steps=50, n_instances=study.n_instances,
    )
    np.testing.assert_array_equal(res["pulse_ucb"]["theta"], rep.theta)
    np.testing.assert_array_equal(res["pulse_ucb"]["checkpoints.recommended"], rep.recommended)
    r = res["pulse_ucb"]
    np.testing.assert_array_equal(r["checkpoints.calls"].mean(axis=0), rep.calls_used)
    # the intervals are built from the refitted predictions' residuals: any other
    # online prior or Newton count moves them
    width = (r["checkpoints.upper"] - r["checkpoints.lower"]).mean(axis=(0, 3)).T
    np.testing.assert_allclose(width, rep.width, rtol=1e-6)


def test_balanced_study_equals_simulate_identification(tmp_path):
    """instance_assignment='balanced' in a study definition plays replicate i on
    instance i mod I across chunks, as simulate_identification does, bit for bit; the
    key is written back only when set, so older definitions keep their identity."""
    import jaxeval

    d = {"kind": "identification", "data": "oll2_ifeval", "policies": ["ucbe"],
         "num_arms": 3, "budgets": [0.05, 0.2], "n_replicates": 13, "seed": 2,
         "chunk_size": 8, "lanes": 4, "n_instances": 5, "instance_assignment": "balanced"}
    study = study_from_dict(d)
    assert study.to_dict()["instance_assignment"] == "balanced"
    assert "instance_assignment" not in study_from_dict(
        {k: v for k, v in d.items() if k != "instance_assignment"}).to_dict()
    run_study(study, tmp_path / "s", progress=False)
    _, res = load_results(tmp_path / "s")
    rep = jaxeval.simulate_identification(
        jaxeval.load("oll2_ifeval"), "ucbe", K=3, n_replicates=13, seed=2, lanes=4,
        budget_fractions=(0.05, 0.2), n_instances=5, instance_assignment="balanced")
    assert rep.instance.tolist() == [i % 5 for i in range(13)]
    np.testing.assert_array_equal(res["ucbe"]["theta"], rep.theta)
    np.testing.assert_array_equal(res["ucbe"]["checkpoints.recommended"], rep.recommended)
    with pytest.raises(StudyConfigError, match="instance_assignment"):
        study_from_dict(dict(d, instance_assignment="cycle"))
    with pytest.raises(StudyConfigError, match="instance_assignment"):
        study_from_dict(dict(d, data={"synthetic": {"n_items": 30}}))
    # built in code, too (it would otherwise run the random design and leave a
    # definition that cannot be read back)
    from jaxeval._study import IdentificationStudy

    with pytest.raises(StudyConfigError, match="instance_assignment"):
        IdentificationStudy(instance_assignment="Balanced")


def test_result_fields_named_like_savez_arguments_are_kept(tmp_path):
    """Fields named 'file' / 'allow_pickle' reach the disk and come back; two leaves
    that flatten to one name are refused instead of one overwriting the other."""
    from jaxeval._study import flatten_tree

    study = study_from_dict(toy_config(target="test_study:odd_names", n_replicates=8,
                                       chunk_size=4))
    run_study(study, tmp_path / "o", progress=False)
    res = load_results(tmp_path / "o")[1]["replicates"]
    assert set(res) == {"file", "allow_pickle", "other"}
    direct = run_replicates(odd_names, 3, 8, chunk_size=4, lanes=8, progress=False)
    np.testing.assert_array_equal(res["file"], np.asarray(direct["file"]))
    np.testing.assert_array_equal(res["allow_pickle"], np.asarray(direct["allow_pickle"]))
    with pytest.raises(ValueError, match="both named 'a.b'"):
        flatten_tree({"a": {"b": np.zeros(1)}, "a.b": np.ones(1)})


def test_run_replicates_refuses_a_fractional_chunk_size():
    f = lambda key: jax.random.uniform(key, (2,))  # noqa: E731
    for bad in (2.7, 0.5, True):
        with pytest.raises(TypeError, match=f"chunk_size: expected an integer >= 1, got "
                                            f"{type(bad).__name__} {bad!r}"):
            run_replicates(f, 0, 5, chunk_size=bad, progress=False)


def _edit_manifest(folder, fn):
    p = Path(folder) / "manifest.json"
    m = json.loads(p.read_text())
    fn(m)
    p.write_text(json.dumps(m))


def test_an_edited_or_damaged_manifest_is_refused(tmp_path):
    """A manifest whose config was edited (a seed changed by hand would let ``resume``
    mix two studies' replicates in one folder), whose chunk rows disagree with its
    files, or that lacks the entries every reader uses is refused with the file named,
    instead of read (or failing with a KeyError)."""
    # (lanes 1: chunks of 8 on 8 devices, five of them)
    s = study_from_dict(toy_config(n_replicates=40, chunk_size=8, lanes=1))
    run_study(s, tmp_path / "a", progress=False)
    import shutil

    for name, edit, match in [
        ("seed", lambda m: m["config"].update(seed=1), "edited by hand"),
        ("chunks", lambda m: m.pop("chunks"), "'chunks' is missing"),
        ("sha", lambda m: next(iter(m["chunks"].values())).pop("sha256"), "malformed"),
    ]:
        shutil.copytree(tmp_path / "a", tmp_path / name)
        _edit_manifest(tmp_path / name, edit)
        for fn in (study_status, load_results, lambda d: resume_study(d, progress=False)):
            with pytest.raises(StudyFolderError, match=match) as err:
                fn(tmp_path / name)
            assert str(tmp_path / name) in str(err.value)
    # one chunk entry dropped and its neighbour stretched over the gap: 32 rows for 40
    shutil.copytree(tmp_path / "a", tmp_path / "rows")

    def stretch(m):
        first, second = sorted(m["chunks"], key=lambda k: m["chunks"][k]["lo"])[:2]
        m["chunks"][first]["hi"] = m["chunks"].pop(second)["hi"]

    _edit_manifest(tmp_path / "rows", stretch)
    with pytest.raises(StudyFolderError, match=r"holds \(8,\) rows of '\w+' for units 0:16"):
        load_results(tmp_path / "rows")
    assert load_results(tmp_path / "a")[1]["replicates"]["mean"].shape == (40,)


def test_merge_compares_configs_and_data_checksums_not_paths(tmp_path):
    """Range jobs over byte-identical data at two paths (node-local copies) merge; a
    different study is refused from the configs themselves, whatever hash was stored;
    different versions merge with a warning and are recorded."""
    cfg = {"kind": "identification", "num_arms": 3, "n_replicates": 8, "budgets": [0.5, 1.0],
           "cs_kinds": ["hoeffding"], "policies": ["ucbe"], "chunk_size": 4}
    rng = np.random.default_rng(0)
    scores = (rng.random((12, 20)) < 0.5).astype(np.float32)
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        np.savez(tmp_path / sub / "s.npz", scores=scores)
    sx = study_from_dict({**cfg, "data": {"npz": str(tmp_path / "x" / "s.npz")}})
    sy = study_from_dict({**cfg, "data": {"npz": str(tmp_path / "y" / "s.npz")}})
    run_study(sx, tmp_path / "rx", replicate_range=(0, 4), progress=False)
    run_study(sy, tmp_path / "ry", replicate_range=(4, 8), progress=False)
    one = run_study(sx, tmp_path / "one", progress=False)
    merged = merge_studies([tmp_path / "rx", tmp_path / "ry"], tmp_path / "m")
    a, b = load_results(merged)[1]["ucbe"], load_results(one)[1]["ucbe"]
    assert_same(a, b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # another seed with the stored results_hash copied over: still refused
    sz = study_from_dict({**cfg, "seed": 5, "data": {"npz": str(tmp_path / "y" / "s.npz")}})
    run_study(sz, tmp_path / "rz", replicate_range=(4, 8), progress=False)
    stored = json.loads((tmp_path / "rx" / "manifest.json").read_text())["results_hash"]
    _edit_manifest(tmp_path / "rz", lambda m: m.update(results_hash=stored))
    with pytest.raises(StudyFolderError, match="different study"):
        merge_studies([tmp_path / "rx", tmp_path / "rz"], tmp_path / "bad")
    _edit_manifest(tmp_path / "ry", lambda m: m["versions"].update(jax="0.0.1-other"))
    with pytest.warns(UserWarning, match="different versions"):
        m2 = merge_studies([tmp_path / "rx", tmp_path / "ry"], tmp_path / "m2")
    vers = json.loads((m2 / "manifest.json").read_text())["merged_versions"]
    assert vers[str(tmp_path / "ry")]["jax"] == "0.0.1-other"


def test_summary_refuses_changed_or_missing_data(tmp_path, capsys):
    """``summary`` / ``plot`` recompute the budgets from the data: with the data file
    changed since the run they refused nothing and reported the new file's budgets next
    to the old results; now they refuse, naming the file, while ``load_results`` and
    ``status`` still read the folder."""
    from jaxeval._cli import main

    rng = np.random.default_rng(0)
    path = tmp_path / "s.npz"
    np.savez(path, scores=(rng.random((12, 30)) < 0.5).astype(np.float32))
    s = study_from_dict({"kind": "identification", "data": {"npz": str(path)}, "num_arms": 3,
                         "n_replicates": 8, "budgets": [0.1, 0.5, 1.0],
                         "cs_kinds": ["hoeffding"], "policies": ["ucbe"]})
    out = run_study(s, tmp_path / "r", progress=False)
    assert main(["summary", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problem"]["items"] == 30
    np.savez(path, scores=(rng.random((12, 60)) < 0.5).astype(np.float32))
    for cmd in (["summary", str(out)], ["plot", str(out)]):
        assert main(cmd) == 2
        assert "changed since the study ran" in capsys.readouterr().err
    path.unlink()
    assert main(["summary", str(out)]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert load_results(out)[1]["ucbe"]["theta"].shape[0] == 8
    assert study_status(out)["complete"]


def test_study_refuses_call_counts_past_int32_and_fractional_ranges(tmp_path):
    """K*n past the kernels' int32 counters is refused before the folder is made (it
    failed with an OverflowError after creating it); replicate ranges, replicate
    counts and lanes must be integers (2.9 was truncated, True read as 1)."""
    big = study_from_dict({"kind": "identification", "num_arms": 3, "n_replicates": 4,
                           "data": {"synthetic": {"n_items": 800_000_000}}})
    with pytest.raises(StudyConfigError, match="data.synthetic.n_items.*int32"):
        run_study(big, tmp_path / "big", progress=False)
    assert not (tmp_path / "big").exists()
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    with pytest.raises(ValueError, match="replicate_range: expected two integers"):
        run_study(s, tmp_path / "r", replicate_range=(2.9, 7.99), progress=False)
    with pytest.raises(TypeError, match="n_replicates: expected an integer >= 1, got bool"):
        run_replicates(lambda k: {"x": jax.random.uniform(k)}, 0, True)
    with pytest.raises(TypeError, match="lanes: expected an integer >= 1, got bool"):
        run_replicates(lambda k: {"x": jax.random.uniform(k)}, 0, 4, lanes=True)


def test_a_range_jobs_manifest_says_its_range_is_done_not_the_study(tmp_path):
    """``manifest.json`` of a range job: ``range_complete`` true, ``complete`` false
    (it said ``complete: true``, which a poller of array jobs read as the study done),
    the same two answers as ``study_status``; a merge of all ranges is complete."""
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8))
    a = run_study(s, tmp_path / "a", replicate_range=(0, 8), progress=False)
    b = run_study(s, tmp_path / "b", replicate_range=(8, 16), progress=False)
    man = json.loads((a / "manifest.json").read_text())
    assert man["range_complete"] is True and man["complete"] is False
    st = study_status(a)
    assert (st["range_complete"], st["complete"]) == (True, False)
    merged = merge_studies([a, b], tmp_path / "m")
    assert json.loads((merged / "manifest.json").read_text())["complete"] is True
    whole = run_study(s, tmp_path / "w", progress=False)
    man = json.loads((whole / "manifest.json").read_text())
    assert man["range_complete"] is True and man["complete"] is True


def test_alpha_too_small_for_float32_is_refused_in_a_definition():
    d = {"kind": "identification", "data": {"synthetic": {"n_items": 30, "rank": 2}},
         "num_arms": 3, "n_replicates": 8, "budgets": [0.5], "policies": ["ucbe"]}
    study = study_from_dict(dict(d, alpha=1e-25))
    assert study.alpha == 1e-25
    with pytest.raises(StudyConfigError, match="alpha: must be at least 1e-30"):
        study_from_dict(dict(d, alpha=1e-39))
    with pytest.raises(StudyConfigError, match="alpha: must be at least 1e-30"):
        dataclasses.replace(study, alpha=1e-35)  # built in code, not from a dict
    # an anchors study's alpha is a conformal level: no float32 floor there
    a = study_from_dict({"kind": "anchors", "k": [20], "methods": ["kmeans_ridge"],
                         "alpha": 1e-25})
    assert a.alpha == 1e-25


def test_a_folder_pins_its_factorization_for_resume_and_merge(tmp_path):
    """The fit behind the prediction policies differs in its last bits between machines
    (CPU threads, devices), so a folder saves the one its chunks used: resume reuses it,
    merge refuses parts that used different fits, and `problem_from` lets range jobs
    share the first job's fit (bit-identical to one run)."""
    from jaxeval._study import _PROBLEM_CACHE, PROBLEM_FILE

    study = study_from_dict({
        "kind": "identification", "data": "oll2_ifeval", "policies": ["pulse_ucb"],
        "num_arms": 3, "budgets": [0.02, 0.05], "n_replicates": 16, "seed": 2,
        "chunk_size": 8, "rank": 2, "fit_steps": 50,
    })
    run_study(study, tmp_path / "all", progress=False)
    man = json.loads((tmp_path / "all" / "manifest.json").read_text())
    assert len(man["problem_sha256"]) == 64 and (tmp_path / "all" / PROBLEM_FILE).is_file()
    assert man["numerics"] == {"prng_impl": "threefry2x32", "threefry_partitionable": True,
                               "x64": False}
    _, ref = load_results(tmp_path / "all")
    # another machine's fit: the same factors one float32 ulp away
    z = dict(np.load(tmp_path / "all" / PROBLEM_FILE))
    z["V"] = np.nextafter(z["V"], np.float32(np.inf))
    np.savez(tmp_path / "other.npz", **z)
    _PROBLEM_CACHE.clear()
    run_study(study, tmp_path / "p0", replicate_range=(0, 8), progress=False)
    run_study(study, tmp_path / "p1", replicate_range=(8, 16), progress=False,
              problem_from=tmp_path / "other.npz")
    with pytest.raises(StudyFolderError, match="different factorizations.*--problem-from"):
        merge_studies([tmp_path / "p0", tmp_path / "p1"], tmp_path / "m")
    assert not (tmp_path / "m").exists()
    run_study(study, tmp_path / "p1b", replicate_range=(8, 16), progress=False,
              problem_from=tmp_path / "p0")
    merged = merge_studies([tmp_path / "p0", tmp_path / "p1b"], tmp_path / "m2")
    _, res = load_results(merged)
    assert_same(res["pulse_ucb"], ref["pulse_ucb"])
    assert json.loads((merged / "manifest.json").read_text())["problem_sha256"] == \
        man["problem_sha256"]
    with pytest.raises(StudyFolderError, match="another factorization than the one in"):
        run_study(study, tmp_path / "p1", replicate_range=(8, 16), progress=False,
                  problem_from=tmp_path / "p0")
    # resume recomputes a lost chunk with the folder's own fit, whatever this process holds
    _, p1 = load_results(tmp_path / "p1", allow_partial=True)
    assert not np.array_equal(p1["pulse_ucb"]["checkpoints.upper"],
                              ref["pulse_ucb"]["checkpoints.upper"][8:])
    chunk = next((tmp_path / "p1" / "chunks" / "pulse_ucb").iterdir())
    chunk.unlink()
    with pytest.warns(UserWarning, match="will be recomputed"):
        resume_study(tmp_path / "p1", progress=False)
    _, again = load_results(tmp_path / "p1", allow_partial=True)
    assert_same(again["pulse_ucb"], p1["pulse_ucb"])
    # without its saved fit, a folder whose refit differs is refused, untouched
    _PROBLEM_CACHE.clear()
    (tmp_path / "p1" / PROBLEM_FILE).unlink()
    chunk.unlink()
    with pytest.raises(StudyFolderError, match="missing or corrupt, and the fit here differs"):
        resume_study(tmp_path / "p1", progress=False)
    assert not chunk.exists() and not (tmp_path / "p1" / PROBLEM_FILE).exists()
    # a fit of another split or rank is refused; so is one for a study that fits none
    with pytest.raises(StudyFolderError, match="another split or fit.*'rank' is 2 there"):
        run_study(dataclasses.replace(study, rank=3), tmp_path / "r3", progress=False,
                  problem_from=tmp_path / "p0")
    with pytest.raises(ValueError, match="problem_from: this study fits no factorization"):
        run_study(dataclasses.replace(study, policies=(PolicySpec("ucbe"),)), tmp_path / "u",
                  problem_from=tmp_path / "p0")
    # a folder whose study saved no fit is said to be one (not a raw missing-file error)
    (tmp_path / "nofit").mkdir()
    with pytest.raises(StudyFolderError, match=r"problem_from: .*nofit holds no saved "
                                               r"factorization \(problem\.npz\): its study "
                                               r"fits none"):
        run_study(study, tmp_path / "p2", progress=False, problem_from=tmp_path / "nofit")
    assert not (tmp_path / "p2").exists()


def test_resume_and_merge_refuse_other_prng_settings(tmp_path):
    """The PRNG implementation and its partitionable flag decide every replicate's
    stream: a folder computed under others is neither extended nor merged."""
    study = study_from_dict(toy_config(n_replicates=128))
    run_study(study, tmp_path / "a", replicate_range=(0, 64), progress=False)
    run_study(study, tmp_path / "b", replicate_range=(64, 128), progress=False)
    p = tmp_path / "b" / "manifest.json"
    man = json.loads(p.read_text())
    man["numerics"]["prng_impl"] = "rbg"
    p.write_text(json.dumps(man))
    with pytest.raises(StudyFolderError, match=r"prng_impl='threefry2x32' in .*a, 'rbg' in "
                                               r".*b \(set by JAX_DEFAULT_PRNG_IMPL"):
        merge_studies([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    with pytest.raises(StudyFolderError, match="other JAX settings.*prng_impl='rbg' there, "
                                               "'threefry2x32' here"):
        run_study(study, tmp_path / "b", replicate_range=(64, 128), progress=False)


def test_a_study_built_in_code_is_checked_before_its_folder_is_made(tmp_path):
    """The dataclasses are public: a definition that from_dict would refuse is refused
    when it is built in code (it used to run, then leave a folder nothing could read
    back), and so are fields of the wrong type, by name."""
    with pytest.raises(StudyConfigError, match="name: expected a non-empty string"):
        dataclasses.replace(study_from_dict(toy_config()), name="")
    with pytest.raises(StudyConfigError, match="budgets: expected strictly increasing"):
        IdentificationStudy(budgets=(0.5, 0.1), n_replicates=4, num_arms=2)
    with pytest.raises(TypeError, match="study: expected one of"):
        run_study({"kind": "identification"}, tmp_path / "z")
    assert not (tmp_path / "z").exists()
    # a string where a list belongs used to run its letters as methods / policies
    with pytest.raises(StudyConfigError, match="methods: expected a list or tuple"):
        AnchorStudy(methods="auto")
    with pytest.raises(StudyConfigError, match=r"policies\[0\]: expected a PolicySpec"):
        IdentificationStudy(policies=("ucbe",))
    with pytest.raises(StudyConfigError, match="data: expected a DataSource"):
        AnchorStudy(data="oll2_musr")
    with pytest.raises(StudyConfigError, match="n_seeds: expected an integer"):
        AnchorStudy(n_seeds="3")
    with pytest.raises(StudyConfigError, match=r"policies\[0\]\.settings\.a: expected a number"):
        IdentificationStudy(policies=(PolicySpec("ucbe", settings=(("a", "x"),)),))
    with pytest.raises(StudyConfigError, match="target: expected a non-empty string"):
        ReplicateStudy(target=5)
    # a range is a list of numbers; NumPy scalars become the Python numbers study.json
    # is written from (they failed there with a raw JSON TypeError)
    assert AnchorStudy(k=range(5, 11, 5)).k == (5, 10)
    npy = IdentificationStudy(num_arms=np.int64(3), n_replicates=np.int32(8))
    assert type(npy.num_arms) is int and type(npy.n_replicates) is int
    json.dumps(npy.to_dict())
    # lists are taken as the tuples a JSON definition gives, so the study stays hashable
    listed = IdentificationStudy(budgets=[0.1, 0.2], cs_kinds=["eb"])
    assert listed == IdentificationStudy(budgets=(0.1, 0.2), cs_kinds=("eb",))
    assert hash(listed) == hash(IdentificationStudy(budgets=(0.1, 0.2), cs_kinds=("eb",)))


def test_status_counts_only_chunks_whose_files_exist(tmp_path):
    study = study_from_dict(toy_config())
    run_study(study, tmp_path / "a", progress=False)
    assert study_status(tmp_path / "a")["missing_chunk_files"] == []
    lost = sorted((tmp_path / "a" / "chunks" / "replicates").iterdir())[1]
    lost.unlink()
    st = study_status(tmp_path / "a")
    assert not st["complete"] and not st["range_complete"]
    assert st["done"] == {"replicates": 236}
    assert st["missing_chunk_files"] == [f"chunks/replicates/{lost.name}"]


def test_status_verify_reads_every_chunk_and_leaves_out_corrupt_ones(tmp_path):
    """``verify=True`` (``jaxeval status --verify``) checks each chunk file's checksum:
    a damaged file is listed and not counted; without it only presence is checked."""
    study = study_from_dict(toy_config())
    run_study(study, tmp_path / "a", progress=False)
    good = study_status(tmp_path / "a", verify=True)
    assert good["corrupt_chunk_files"] == [] and good["complete"]
    assert "corrupt_chunk_files" not in study_status(tmp_path / "a")
    hit = sorted((tmp_path / "a" / "chunks" / "replicates").iterdir())[1]
    raw = bytearray(hit.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte, same size
    hit.write_bytes(bytes(raw))
    fast = study_status(tmp_path / "a")
    assert fast["complete"]  # presence only: the damage is not seen
    st = study_status(tmp_path / "a", verify=True)
    assert st["corrupt_chunk_files"] == [f"chunks/replicates/{hit.name}"]
    assert not st["complete"] and st["done"] == {"replicates": 236}
    assert hit.read_bytes() == bytes(raw)  # the file is left alone
    with pytest.raises(TypeError, match="verify: expected True or False"):
        study_status(tmp_path / "a", verify="yes")


def test_identification_under_another_default_prng_is_refused_before_the_folder(tmp_path):
    study = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 4,
                             "data": {"synthetic": {"n_items": 20}}})
    old = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        with pytest.raises(StudyConfigError, match="seed: identification studies draw .* "
                                                   "default PRNG is 'rbg'"):
            run_study(study, tmp_path / "s", progress=False)
    finally:
        jax.config.update("jax_default_prng_impl", old)
    assert not (tmp_path / "s").exists()


def test_merge_refuses_one_path_for_the_list(tmp_path):
    """merge_studies("folder", out) iterated the string's characters ("/ holds no
    manifest.json")."""
    with pytest.raises(TypeError, match=r"dirs: expected a list of study folders, got one path"):
        merge_studies(str(tmp_path / "a"), tmp_path / "out")
    with pytest.raises(TypeError, match="dirs: expected a list"):
        merge_studies(tmp_path / "a", tmp_path / "out")


def test_replicates_summary_keeps_boolean_fields_and_says_what_it_cut():
    """A true/false outcome's mean is its rate (it was dropped without a word); a vector
    field longer than the shown components says so; a field that cannot be averaged is
    named as skipped."""
    from jaxeval._report import format_summary, summarize

    study = ReplicateStudy(target="test_study:toy", n_replicates=4)
    res = {"replicates": {
        "covered": np.array([True, False, True, True]),
        "vec": np.arange(40, dtype=np.float32).reshape(4, 10),
        "label": np.array(["a", "b", "c", "d"]),
    }}
    s = summarize(study, res)
    assert s["fields"]["covered"]["mean"] == [0.75]
    assert s["fields"]["vec"]["components_shown"] == 8 and len(s["fields"]["vec"]["mean"]) == 8
    assert "components_shown" not in s["fields"]["covered"]
    assert s["skipped_fields"] == {"label": "dtype <U1"}
    text = format_summary(s)
    assert "covered: shape [4], mean [0.75]" in text
    assert "(first 8 components)" in text and "label: not summarised (dtype <U1)" in text
    json.dumps(s, allow_nan=False)  # strict JSON, as summary.json is written


def test_policy_settings_the_policy_does_not_read_are_named_before_the_run(tmp_path):
    """{"policy": "ucbe", "settings": {"lam0": 0.3}} ran as plain UCB-E without a word."""
    cfg = {"kind": "identification", "num_arms": 2, "n_replicates": 8, "chunk_size": 8,
           "lanes": 8, "budgets": [0.5], "data": {"synthetic": {"n_items": 20}},
           "policies": [{"policy": "ucbe", "settings": {"lam0": 0.3, "a": 2.0}},
                        {"policy": "uniform"}]}
    with pytest.warns(UserWarning, match=r"policies\[0\]\.settings: lam0=0\.3 has no effect "
                                         r"for policy 'ucbe'"):
        run_study(study_from_dict(cfg), tmp_path / "s", progress=False)


def test_merge_refuses_range_jobs_on_different_data(tmp_path):
    """Range jobs of the same configuration run on different data (two npz files) do
    not merge: the data checksum is the only guard, since the paths are not compared."""
    cfg = {"kind": "identification", "num_arms": 3, "n_replicates": 8, "budgets": [0.5],
           "cs_kinds": ["hoeffding"], "policies": ["ucbe"], "chunk_size": 4}
    rng = np.random.default_rng(0)
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        np.savez(tmp_path / sub / "s.npz",
                 scores=(rng.random((12, 20)) < 0.5).astype(np.float32))  # not the same
    sx = study_from_dict({**cfg, "data": {"npz": str(tmp_path / "x" / "s.npz")}})
    sy = study_from_dict({**cfg, "data": {"npz": str(tmp_path / "y" / "s.npz")}})
    run_study(sx, tmp_path / "rx", replicate_range=(0, 4), progress=False)
    run_study(sy, tmp_path / "ry", replicate_range=(4, 8), progress=False)
    with pytest.raises(StudyFolderError, match="different data"):
        merge_studies([tmp_path / "rx", tmp_path / "ry"], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_every_task_of_a_multi_policy_study_is_computed_and_counted(tmp_path):
    """A two-policy study computes and counts both tasks (each task's chunks cover only
    that task), and a merge missing one task's range is not complete."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 16,
                         "chunk_size": 8, "lanes": 8, "policies": ["uniform", "ucbe"],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5],
                         "cs_kinds": ["hoeffding"]})
    full = run_study(s, tmp_path / "full", progress=False)
    st = study_status(full)
    assert st["complete"] and st["done"] == {"uniform": 16, "ucbe": 16}
    _, res = load_results(full)
    assert set(res) == {"uniform", "ucbe"}
    a = run_study(s, tmp_path / "a", replicate_range=(0, 8), progress=False)
    b = run_study(s, tmp_path / "b", replicate_range=(8, 16), progress=False)
    # b as a job killed after its first task: the second task's chunk never recorded
    _edit_manifest(b, lambda m: m.update(chunks={k: c for k, c in m["chunks"].items()
                                                 if c["task"] == "uniform"}))
    merged = merge_studies([a, b], tmp_path / "m")
    assert json.loads((merged / "manifest.json").read_text())["complete"] is False
    assert study_status(merged)["complete"] is False


def test_load_results_refuses_overlapping_chunks(tmp_path):
    """A chunk listed twice (units counted twice) is refused by load_results, the last
    line of defence after merge's own check."""
    import shutil

    s = study_from_dict(toy_config(n_replicates=32, chunk_size=8, lanes=8))
    out = run_study(s, tmp_path / "a", progress=False)
    man = json.loads((out / "manifest.json").read_text())
    (name, c), = [(k, v) for k, v in man["chunks"].items() if v["lo"] == 0]
    dup = "chunks/replicates/dup.npz"
    shutil.copyfile(out / name, out / dup)
    _edit_manifest(out, lambda m: m["chunks"].update({dup: dict(c)}))  # units 0.. twice
    with pytest.raises(StudyFolderError, match="gap or overlap"):
        load_results(out)


def test_a_one_unit_gap_is_not_complete(tmp_path):
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8, lanes=1))
    a = run_study(s, tmp_path / "a", replicate_range=(0, 7), progress=False)
    b = run_study(s, tmp_path / "b", replicate_range=(8, 16), progress=False)
    merged = merge_studies([a, b], tmp_path / "m")
    assert json.loads((merged / "manifest.json").read_text())["complete"] is False
    st = study_status(merged)
    assert not st["complete"] and st["done"] == {"replicates": 15}


def test_a_folder_refuses_a_range_with_another_start(tmp_path):
    s = study_from_dict(toy_config(n_replicates=16, chunk_size=8, lanes=1))
    out = run_study(s, tmp_path / "a", replicate_range=(8, 16), progress=False)
    with pytest.raises(StudyFolderError, match="replicates 8:16"):
        run_study(s, out, replicate_range=(0, 16), progress=False)
    assert study_status(out)["done"] == {"replicates": 8}


# ------------------------------------------------------- an output folder it cannot write
def _refuse_writes_in(monkeypatch, folder: Path):
    """Make the write probe fail in ``folder`` only (as on a read-only mount: chmod does
    not stop root, which CI may be)."""
    import tempfile

    real = tempfile.NamedTemporaryFile

    def probe(*a, dir=None, **kw):
        if dir is not None and Path(dir) == folder:
            raise PermissionError(1, "Operation not permitted")
        return real(*a, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", probe)


@pytest.mark.parametrize("where", ["out", "chunks"])
def test_a_folder_it_cannot_write_is_refused_before_any_chunk_is_computed(tmp_path, monkeypatch,
                                                                           where):
    """A resume into a folder (or its chunk folder) that cannot be written used to compute
    a whole chunk and then fail writing it; now it is refused first, naming the folder,
    and the folder is left as it was."""
    out = tmp_path / "s"
    run_study(study_from_dict(toy_config(n_replicates=128)), out,
              replicate_range=None, progress=False)
    m = json.loads((out / "manifest.json").read_text())
    # drop the second chunk, as if the run had been interrupted there
    last = sorted(m["chunks"])[-1]
    task = m["chunks"].pop(last)["task"]
    (out / last).unlink()
    m["complete"] = m["range_complete"] = False
    (out / "manifest.json").write_text(json.dumps(m))
    before = sorted(p.name for p in out.rglob("*"))
    folder = out if where == "out" else out / "chunks" / task
    _refuse_writes_in(monkeypatch, folder)
    computed = []
    orig = toy
    monkeypatch.setattr("test_study.toy", lambda key: computed.append(1) or orig(key))
    with pytest.raises(StudyFolderError, match=rf"^{re.escape(str(folder))}: cannot write "
                       r"there \(Operation not permitted\); nothing was computed or changed: "
                       r"make it writable, or run the study in a writable folder"):
        resume_study(out, progress=False)
    assert computed == [] and sorted(p.name for p in out.rglob("*")) == before
    assert study_status(out)["done"] == {task: 64}


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_read_only_new_folder_is_refused_by_name(tmp_path):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(StudyFolderError, match="cannot write there"):
            run_study(study_from_dict(toy_config()), out, progress=False)
    finally:
        out.chmod(0o755)


def test_another_chunk_size_on_a_folder_is_called_a_layout_not_another_study(tmp_path):
    """Only ``chunk_size`` / ``lanes`` changed: the refusal says the folder holds this
    study in another chunk layout (which changes no result) and how to continue it, not
    that it holds "another study" of the same name; any other change still is one."""
    out = tmp_path / "s"
    run_study(study_from_dict(toy_config(n_replicates=64)), out, progress=False)
    with pytest.raises(StudyFolderError, match=(
            rf"^{re.escape(str(out))} holds this study run with another chunk layout: "
            r"'chunk_size' is 64 there but 32 here\. chunk_size changes no result.*"
            rf"`jaxeval resume {re.escape(str(out))}`")):
        run_study(study_from_dict(toy_config(n_replicates=64, chunk_size=32)), out,
                  progress=False)
    with pytest.raises(StudyFolderError, match=r"holds the results of another study \('toy'\)"
                                               r": 'chunk_size' is 64 there but 32 here; "
                                               r"'seed' is 3 there but 4 here"):
        run_study(study_from_dict(toy_config(n_replicates=64, chunk_size=32, seed=4)), out,
                  progress=False)
    # lanes may change the results' last bits (bit-identical only for fixed lanes)
    with pytest.raises(StudyFolderError, match=r"holds the results of another study \('toy'\)"
                                               r": 'lanes' is 8 there but 4 here"):
        run_study(study_from_dict(toy_config(n_replicates=64, lanes=4)), out, progress=False)


def test_running_a_finished_study_again_says_there_is_nothing_to_do(tmp_path, capsys):
    out = tmp_path / "s"
    run_study(study_from_dict(toy_config(n_replicates=64)), out, progress=False)
    capsys.readouterr()
    run_study(study_from_dict(toy_config(n_replicates=64)), out, progress=True)
    assert ("[jaxeval] toy: every unit of " + str(out) + "'s range 0:64 is already computed; "
            "nothing to do") in capsys.readouterr().err
    resume_study(out, progress=False)  # silent when asked to be
    assert capsys.readouterr().err == ""


def test_study_wide_settings_a_policy_cannot_use_are_warned_about():
    """A study's corruption, rank or fit_steps that a policy without predictions cannot
    use was recorded without a word (simulate_identification refuses or warns); now a
    warning per such policy, and none for the prediction policy beside them."""
    from jaxeval._study import _preflight

    s = study_from_dict({"kind": "identification", "data": {"dataset": "oll2_musr"},
                         "num_arms": 4, "policies": ["ucbe", "pulse_ucb"], "rank": 16,
                         "fit_steps": 50, "corruption": "biased", "n_replicates": 8})
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _preflight(s)
    msgs = [str(w.message) for w in got if "makes no predictions" in str(w.message)]
    assert msgs == ["rank=16, fit_steps=50, corruption='biased' have no effect for policy "
                    "'ucbe' (policies[0] makes no predictions); the study records them as "
                    "given"]
    sync = study_from_dict({"kind": "identification", "data": {"dataset": "oll2_musr"},
                            "num_arms": 4, "n_replicates": 8, "policies": [
                                {"policy": "sysrs", "settings": {"synchronized": False}}]})
    with pytest.warns(UserWarning, match=r"policies\[0\]\.settings: synchronized=False gives "
                                         r"each arm its own item order"):
        _preflight(sync)
    quiet = study_from_dict({"kind": "identification", "data": {"dataset": "oll2_musr"},
                             "num_arms": 4, "policies": ["ucbe"], "n_replicates": 8})
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _preflight(quiet)
    assert not [w for w in got if "no effect" in str(w.message)]
