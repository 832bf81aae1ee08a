"""The ``jaxeval`` command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxeval import _cli as cli_module
from jaxeval._cli import cli, main
from jaxeval._study import study_from_dict

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for cmd in ("run", "resume", "merge", "summary", "plot", "main", "datasets", "campaign",
                "anchors"):
        assert cmd in text
    assert "--range 0:5000" in text and "jaxeval merge" in text and "--coordinator" in text
    assert "compilation-cache" in text


def test_no_command_is_a_usage_error(capsys):
    """As a subcommand without its action: usage on stderr, the commands named, exit 2."""
    assert main([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "a command is required: one of run, resume" in out.err
    assert "usage: jaxeval" in out.err


def test_python_dash_m_help_runs():
    res = subprocess.run(
        [sys.executable, "-m", "jaxeval", "run", "--help"], capture_output=True, text=True
    )
    assert res.returncode == 0 and "--range" in res.stdout and "example:" in res.stdout


def test_every_command_and_action_shows_an_example():
    """Each subcommand's --help, and each campaign/anchors action's, ends with a
    runnable ``example:`` line naming that command."""
    import argparse

    from jaxeval._cli import _parser

    def subparsers(p):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                yield from a.choices.items()

    seen = []
    for name, sp in subparsers(_parser()):
        for label, q in [(name, sp)] + [(f"{name} {n}", s) for n, s in subparsers(sp)]:
            text = q.format_help()
            assert f"example:\n  jaxeval {label}" in text, label
            seen.append(label)
    assert {"campaign tell", "anchors predict", "run", "datasets"} <= set(seen), seen


def test_help_descriptions_wrap_to_the_terminal(monkeypatch):
    """A one-line description (anchors predict's is ~500 characters) wraps to the
    terminal's width; text with its own line breaks (the examples) stays as written."""
    from jaxeval._cli import _parser

    monkeypatch.setenv("COLUMNS", "80")
    p = _parser()
    sub = next(a for a in p._actions if hasattr(a, "choices") and a.choices)
    anchors = sub.choices["anchors"]
    predict = next(a for a in anchors._actions if hasattr(a, "choices") and a.choices)
    text = predict.choices["predict"].format_help()
    assert "choosing them after seeing" in text.replace("\n", " ")
    assert max(len(line) for line in text.splitlines()) <= 80, text
    top = p.format_help()  # the command list and examples keep their own layout
    assert "  jaxeval example identification > s.json   a study definition to edit" in top


@pytest.mark.parametrize("kind", ["identification", "anchors", "replicates"])
def test_example_configs_are_valid(capsys, kind):
    assert main(["example", kind]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == kind
    if kind != "replicates":  # the replicates example names a placeholder function
        assert study_from_dict(d).to_dict() == d


def test_datasets_lists_bundled_data(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "oll2_ifeval" in out and "top-2 gap" in out
    assert main(["datasets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    musr = next(r for r in rows if r["name"] == "oll2_musr")
    assert musr["items"] == 756 and musr["accuracy_max"] > musr["accuracy_median"]
    assert musr["top2_gap"] == pytest.approx(
        musr["top_models"][0][1] - musr["top_models"][1][1], abs=1e-6
    )


def test_bad_config_names_the_key(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification", "num_arm": 5}))
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "num_arm" in err and "unknown key" in err
    assert not (tmp_path / "o").exists()


def test_run_range_merge_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    cfg = {
        "kind": "replicates",
        "name": "cli-toy",
        "target": "test_study:toy",
        "n_replicates": 100,
        "seed": 1,
        "chunk_size": 32,
        "lanes": 8,
    }
    p = tmp_path / "s.json"
    p.write_text(json.dumps(cfg))
    a, b, m = (str(tmp_path / x) for x in ("a", "b", "m"))
    assert main(["run", str(p), "--out", a, "--range", "0:40", "--quiet"]) == 0
    assert "a range job, done): `jaxeval merge` it" in capsys.readouterr().err
    # a range folder is merged, not resumed (resume finishes its own range only)
    assert main(["summary", a]) == 2
    err = capsys.readouterr().err
    assert "range job for units 0:40 of 100" in err and "jaxeval merge" in err
    assert main(["run", str(p), "--out", b, "--range", "40:100", "--quiet"]) == 0
    assert main(["merge", a, b, "--out", m]) == 0
    assert "(complete)" in capsys.readouterr().out
    assert main(["status", m, "--verify"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["complete"] and st["corrupt_chunk_files"] == []
    assert main(["summary", m]) == 0
    assert "cli-toy" in capsys.readouterr().out
    s = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert s["replicates"] == 100 and s["fields"]["mean"]["shape"] == [100]
    assert main(["plot", m]) == 0  # a replicates study: nothing to draw, said so
    assert "nothing to plot for a replicates study" in capsys.readouterr().err
    assert not (tmp_path / "m" / "plots").exists()
    # the same folder with another study is refused (exit code 2, nothing written)
    p.write_text(json.dumps(dict(cfg, seed=2)))
    assert main(["run", str(p), "--out", a, "--range", "0:40", "--quiet"]) == 2
    assert "another study" in capsys.readouterr().err


def test_summary_prints_even_where_summary_json_cannot_be_written(tmp_path, capsys,
                                                                 monkeypatch):
    """A read-only results folder (a colleague's, a shared disk): the table is printed,
    the failed write is a warning (the write used to come first and abort the command)."""
    import jaxeval._report as report

    monkeypatch.syspath_prepend(str(TESTS))
    cfg = {"kind": "replicates", "name": "ro-toy", "target": "test_study:toy",
           "n_replicates": 16, "seed": 1, "chunk_size": 16, "lanes": 8}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(cfg))
    out = str(tmp_path / "o")
    assert main(["run", str(p), "--out", out, "--quiet"]) == 0
    capsys.readouterr()

    def refuse(summary, folder):
        raise PermissionError(13, "Read-only file system", str(folder))

    monkeypatch.setattr(report, "write_summary", refuse)
    assert main(["summary", out]) == 0
    res = capsys.readouterr()
    assert "ro-toy" in res.out
    assert "warning: summary.json not written" in res.err


def test_bad_range_text(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification"}))
    with pytest.raises(SystemExit) as e:
        main(["run", str(p), "--out", str(tmp_path / "o"), "--range", "0-40"])
    assert e.value.code == 2
    assert "jaxeval run: error: --range must be LO:HI" in capsys.readouterr().err


@pytest.mark.parametrize("args, match", [
    (["--num-processes", "4", "--process-id", "3"],
     "--num-processes and --process-id need --coordinator"),
    (["--process-id", "0"], "need --coordinator"),
    (["--coordinator", "localhost:1234"], "--coordinator needs --num-processes and --process-id"),
    # checked here, not by JAX after the restart (a traceback, exit code 1)
    (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "5"],
     "--process-id: expected an integer in [0, 1] (--num-processes 2), got 5"),
    (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "-1"],
     "--process-id: expected an integer in [0, 1]"),
    (["--coordinator", "localhost:1", "--num-processes", "0", "--process-id", "0"],
     "--num-processes: expected an integer >= 1, got 0"),
    (["--coordinator", "nonsense", "--num-processes", "1", "--process-id", "0"],
     "--coordinator: expected HOST:PORT (e.g. host0:1234), got 'nonsense'"),
    (["--coordinator", "host:99999", "--num-processes", "1", "--process-id", "0"],
     "--coordinator: expected HOST:PORT"),
    # one past the end each (mutation review)
    (["--coordinator", "host:65536", "--num-processes", "1", "--process-id", "0"],
     "--coordinator: expected HOST:PORT (e.g. host0:1234), got 'host:65536'"),
    (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "2"],
     "--process-id: expected an integer in [0, 1] (--num-processes 2), got 2"),
])
def test_distributed_flags_refused_unless_complete(tmp_path, capsys, monkeypatch, args, match):
    """Without --coordinator the process flags would be ignored: every process of an
    array job would then run and write the whole study into one folder. (A flag let
    through fails at once here, not after a whole default study or a restart.)"""
    import jaxeval._study

    def ran(*a, **k):
        raise AssertionError("the bad flags were accepted")

    monkeypatch.setattr(jaxeval._study, "run_study", ran)
    monkeypatch.setattr(cli_module.os, "execve", ran)
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification"}))
    with pytest.raises(SystemExit) as e:
        main(["run", str(p), "--out", str(tmp_path / "o"), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "jaxeval run: error: " in err and match in err, err
    assert not (tmp_path / "o").exists()


def test_unusable_compilation_cache_is_a_one_line_error(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(SystemExit) as e:
        main(["--compilation-cache", str(f / "sub"), "datasets"])
    assert e.value.code == 2
    assert "jaxeval: error: --compilation-cache" in capsys.readouterr().err


def test_compilation_cache_only_when_asked(tmp_path):
    """The library never sets the cache; the command line does when given the flag/env."""
    code = (
        "import jax, jaxeval, jaxeval._study, jaxeval._runner;"
        "assert not jax.config.jax_compilation_cache_dir;"
        "from jaxeval._cli import main;"
        f"main(['--compilation-cache', {str(tmp_path / 'cc')!r}, 'datasets', '--json']);"
        f"assert jax.config.jax_compilation_cache_dir == {str(tmp_path / 'cc')!r};"
        "assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0"
    )
    env = {k: v for k, v in os.environ.items() if k not in (
        "JAXEVAL_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "cc").is_dir()


def _small_npz(tmp_path, m=30, n=20):
    import numpy as np

    import jaxeval

    rng = np.random.default_rng(0)
    s = (rng.random((m, n)) < rng.random((m, 1))).astype(np.float32)
    return str(jaxeval.ScoreMatrix(s).to_npz(tmp_path / "small.npz"))


@pytest.mark.parametrize(
    "cfg, key",
    [
        ({"kind": "identification", "policies": ["uniform", "pulse"], "rank": 50,
          "num_arms": 3, "n_replicates": 2, "budgets": [0.1, 0.5, 1.0]}, "rank"),
        ({"kind": "identification", "policies": ["uniform"], "num_arms": 20,
          "n_replicates": 2, "budgets": [0.1, 0.5, 1.0]}, "num_arms"),
        ({"kind": "identification", "policies": ["uniform"], "num_arms": 3,
          "n_replicates": 2}, "budgets"),
        ({"kind": "identification", "num_arms": 3, "n_replicates": 2, "budgets": [0.5, 1.0],
          "policies": [{"policy": "ucbe", "settings": {"batch_size": 50}}]}, "batch_size"),
        ({"kind": "anchors", "methods": ["random_mean"], "k": [5, 25], "n_seeds": 1},
         "k: k=25 must be below the 20 items"),
    ],
)
def test_data_dependent_refusal_before_any_work(tmp_path, capsys, cfg, key):
    """A setting the data cannot satisfy is refused with its name before the folder is
    made or any task computed, so the fixed study can reuse the same --out folder."""
    p = tmp_path / "s.json"
    p.write_text(json.dumps(dict(cfg, data={"npz": _small_npz(tmp_path)})))
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxeval run: error:") and key in err and "Traceback" not in err
    assert not out.exists()


def test_relative_data_path_is_found_from_another_directory(tmp_path, capsys, monkeypatch):
    """``"npz": "small.npz"`` is relative to where the study ran: the folder records where
    it was, so summary / resume / plot work from any directory (they failed: "its data
    'small.npz' cannot be read"); a changed file is still refused by its checksum."""
    import numpy as np

    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    _small_npz(tmp_path / "work")
    monkeypatch.chdir(tmp_path / "work")
    Path("s.json").write_text(json.dumps({
        "kind": "identification", "data": {"npz": "small.npz"}, "policies": ["ucbe"],
        "num_arms": 3, "n_replicates": 8, "chunk_size": 8, "budgets": [0.5, 1.0]}))
    assert main(["run", "s.json", "--out", "o", "--range", "0:4", "--no-report",
                 "--quiet"]) == 0
    out = str(tmp_path / "work" / "o")
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["resume", out, "--quiet"]) == 0  # reads its data from here (range done)
    assert main(["summary", out]) == 2
    assert "range job for units 0:4" in capsys.readouterr().err
    whole = str(tmp_path / "work" / "whole")
    monkeypatch.chdir(tmp_path / "work")
    assert main(["run", "s.json", "--out", whole, "--no-report", "--quiet"]) == 0
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["summary", whole]) == 0
    assert "ucbe" in capsys.readouterr().out
    # a file named like the data here is not taken for it (the recorded one, whose
    # checksum is the study's, is read) ...
    np.savez("small.npz", scores=np.zeros((3, 3), np.float32))
    assert main(["summary", whole]) == 0
    # ... a merged folder keeps every part's location (the first node's copy may be gone)
    for node, rng in (("nodeA", "0:4"), ("nodeB", "4:8")):
        (tmp_path / node).mkdir()
        _small_npz(tmp_path / node)
        monkeypatch.chdir(tmp_path / node)
        Path("s.json").write_text((tmp_path / "work" / "s.json").read_text())
        assert main(["run", "s.json", "--out", "part", "--range", rng, "--no-report",
                     "--quiet"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["merge", "nodeA/part", "nodeB/part", "--out", "merged"]) == 0
    (tmp_path / "nodeA" / "small.npz").unlink()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["summary", str(tmp_path / "merged")]) == 0, capsys.readouterr().err
    # ... and a changed data file is refused, wherever it is read from
    Path("small.npz").unlink()
    f = tmp_path / "work" / "small.npz"
    z = dict(np.load(f))
    z["scores"] = 1.0 - z["scores"]
    np.savez(f, **z)
    assert main(["summary", whole]) == 2
    assert "changed since the study ran" in capsys.readouterr().err


def test_range_outside_the_study_is_a_clean_error(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification", "n_replicates": 4,
                             "data": {"synthetic": {"n_items": 30}}, "policies": ["uniform"]}))
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--range", "0:99"]) == 2
    assert "jaxeval run: error: --range: must satisfy 0 <= lo < hi <= 4" in \
        capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    # --problem-from is for studies that fit a factorization (real data, predictions)
    assert main(["run", str(p), "--out", str(tmp_path / "o"), "--problem-from",
                 str(tmp_path)]) == 2
    assert "error: --problem-from: this study fits no factorization" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_summary_of_an_interrupted_study_names_the_unfinished_task(tmp_path, capsys):
    """The folder lists every task from its creation: a task without chunks (the run
    was killed before it) is reported as unfinished, never silently left out."""
    from jaxeval._study import MANIFEST_FILE, StudyFolderError, load_results

    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification", "n_replicates": 4, "chunk_size": 4,
                             "lanes": 4, "data": {"synthetic": {"n_items": 30}},
                             "policies": ["uniform", "ucbe"]}))
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 0
    man = json.loads((out / MANIFEST_FILE).read_text())
    assert man["task_names"] == ["uniform", "ucbe"]
    # as if killed after the first task: drop the second task's chunks
    man["chunks"] = {k: v for k, v in man["chunks"].items() if v["task"] == "uniform"}
    man["complete"] = False
    (out / MANIFEST_FILE).write_text(json.dumps(man))
    with pytest.raises(StudyFolderError, match="'ucbe' has no finished chunk"):
        load_results(out)
    assert set(load_results(out, allow_partial=True)[1]) == {"uniform"}
    capsys.readouterr()
    assert main(["summary", str(out)]) == 2
    assert "'ucbe' has no finished chunk" in capsys.readouterr().err
    assert main(["resume", str(out), "--quiet", "--no-report"]) == 0
    assert set(load_results(out)[1]) == {"uniform", "ucbe"}


def test_jaxeval_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification", "n_replicates": 4,
                             "data": {"synthetic": {"n_items": 30}}, "policies": ["uniform"]}))
    monkeypatch.setenv("JAXEVAL_DEBUG", "1")
    with pytest.raises(ValueError, match="replicate_range"):
        main(["run", str(p), "--out", str(tmp_path / "o"), "--range", "0:99"])


def test_a_foreign_folder_is_refused_before_any_fit(tmp_path, capsys, monkeypatch):
    """The cheap refusal (a folder holding something else) comes before the data checks,
    which may fit a factorization."""
    import jaxeval._factorization_api as fa

    monkeypatch.setattr(fa, "fit_factorization",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("fitted")))
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification", "policies": ["pulse"], "num_arms": 3,
                             "n_replicates": 2, "budgets": [0.5, 1.0],
                             "data": {"npz": _small_npz(tmp_path)}}))
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_campaign_new_ask_tell_status(tmp_path, capsys, monkeypatch):
    """A campaign driven from the shell: each command loads the file, answers are saved."""
    import numpy as np

    import jaxeval

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    n, items = 40, [f"q{j}" for j in range(40)]
    truth = (rng.random((3, n)) < np.array([0.9, 0.3, 0.2])[:, None]).astype(float)
    Path("items.txt").write_text("\n".join(items))
    Path("cands.txt").write_text("a\nb\n\nc\n")
    assert main(["campaign", "new", "c", "--items-file", "items.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe", "--batch-size", "4", "--budget", "100"]) == 0
    assert "created c.npz" in capsys.readouterr().out
    # never overwrite a campaign's answers
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt",
                 "--candidates", "a", "b", "--policy", "ucbe"]) == 2
    assert "c.npz exists" in capsys.readouterr().err
    assert main(["campaign", "new", "nodir/c.npz", "--items-file", "items.txt",
                 "--candidates", "a", "b", "--policy", "ucbe"]) == 2
    assert "file: the folder nodir does not exist" in capsys.readouterr().err
    rows = {"a": 0, "b": 1, "c": 2}
    for step in range(3):
        assert main(["campaign", "ask", "c.npz"]) == 0
        req = json.loads(capsys.readouterr().out)
        assert req["step"] == step and len(req["items"]) == 4
        if step == 0:  # the error names the CLI's argument
            Path("ans.json").write_text("[1, 0]")
            assert main(["campaign", "tell", "c.npz", "ans.json", "--step", "0"]) == 2
            assert "error: answers: expected 4 scores" in capsys.readouterr().err
        ans = {it: truth[rows[req["model"]], items.index(it)] for it in req["items"]}
        Path("ans.json").write_text(json.dumps(ans if step % 2 else list(ans.values())))
        assert main(["campaign", "tell", "c.npz", "ans.json", "--step", str(step)]) == 0
        assert f"{4 * (step + 1)} of 100 calls" in capsys.readouterr().out
        # a retried tell is refused: it must not answer the next request
        assert main(["campaign", "tell", "c.npz", "ans.json", "--step", str(step)]) == 2
        assert "already answered" in capsys.readouterr().err
        if step == 0:  # a step that was never a request is not "already answered"
            assert main(["campaign", "tell", "c.npz", "ans.json", "--step", "-1"]) == 2
            err = capsys.readouterr().err
            assert "not -1 (steps count from 0)" in err and "already answered" not in err
    # the same state as a campaign answered in one process
    camp = jaxeval.IdentificationCampaign(["a", "b", "c"], items=items, policy="ucbe",
                                          batch_size=4, budget=100)
    for _ in range(3):
        req = camp.ask()
        camp.tell(req, truth[req.arm, req.index])
    assert main(["campaign", "status", "c.npz", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["calls"] == 12 and st["pulls"] == camp.status().pulls.tolist()
    np.testing.assert_allclose(st["estimate"], camp.status().estimate)
    replays = []
    real_load = jaxeval.IdentificationCampaign.load.__func__

    def recording_load(cls, *args, **kwargs):
        replays.append(kwargs.get("replay"))
        return real_load(cls, *args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(jaxeval.IdentificationCampaign, "load", classmethod(recording_load))
        assert main(["campaign", "status", "c.npz", "--json", "--replay"]) == 0
        assert main(["campaign", "status", "c.npz", "--json"]) == 0
    assert replays == [True, False]
    out = capsys.readouterr().out
    assert out.count('"calls": 12') == 2 and out.strip().endswith("}")
    # a wrong answer: one error line, nothing saved
    Path("bad.json").write_text("[1, 0]")
    assert main(["campaign", "tell", "c.npz", "bad.json", "--step", "3"]) == 2
    assert "expected 4 scores" in capsys.readouterr().err
    Path("bad.json").write_text("{not json")
    assert main(["campaign", "tell", "c.npz", "bad.json", "--step", "3"]) == 2
    assert "cannot read bad.json as JSON" in capsys.readouterr().err
    assert jaxeval.IdentificationCampaign.load("c.npz").calls == 12
    assert main(["campaign", "ask", "c.npz", "--items-only"]) == 0
    assert len(capsys.readouterr().out.split()) == 4
    assert main(["campaign", "status", "c.npz", "--plot", "st.png"]) == 0
    assert Path("st.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "confident that a is best" in capsys.readouterr().out
    # no suffix: the PNG matplotlib writes is "st2.png", and that is the path printed
    assert main(["campaign", "status", "c.npz", "--plot", "st2"]) == 0
    assert Path("st2.png").is_file() and "plot: st2.png" in capsys.readouterr().err
    assert main(["campaign", "export", "c.npz"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "model,item,score" and len(lines) == 13
    model, item, score = lines[1].split(",")
    assert float(score) == truth[rows[model], items.index(item)]
    assert main(["campaign", "status", "missing.npz"]) == 2
    assert "no saved campaign" in capsys.readouterr().err


def test_campaign_new_exclude_candidates(tmp_path, capsys, monkeypatch):
    """A history that holds the candidates is refused unless --exclude-candidates drops
    their rows (the way to try a campaign on bundled data)."""
    import jaxeval

    monkeypatch.chdir(tmp_path)
    hist = _small_npz(tmp_path, m=8, n=12)
    names = jaxeval.load(hist).models.tolist()
    args = ["campaign", "new", "c.npz", "--history", hist, "--candidates", names[0],
            names[3], "--policy", "ucbe"]
    assert main(args) == 2
    assert "history" in capsys.readouterr().err
    assert main(args + ["--exclude-candidates"]) == 0
    out = capsys.readouterr()
    assert "created c.npz" in out.out and "fitting" not in out.err  # ucbe fits nothing
    camp = jaxeval.IdentificationCampaign.load("c.npz")
    assert camp.candidates.tolist() == [names[0], names[3]]
    # a policy that predicts says before its (possibly long) fit what it fits
    pulse = ["campaign", "new", "p.npz", "--history", hist, "--candidates", names[0],
             names[3], "--exclude-candidates", "--rank", "2", "--fit-steps", "20"]
    assert main(pulse) == 0
    err = capsys.readouterr().err
    assert "IdentificationCampaign: fitting a rank-2 factorization on the 6 history models " \
        "x 12 items (20 steps)" in err and "fitted in" in err, err
    # nothing is said of a fit that a refusal stops first
    assert main(pulse[:-4] + ["--rank", "20"]) == 2
    assert "fitting" not in capsys.readouterr().err
    assert main(["campaign", "new", "d.npz", "--history", hist, "--candidates", "x", "y",
                 "--policy", "ucbe", "--exclude-candidates"]) == 2
    assert "none of the candidates" in capsys.readouterr().err
    assert main(["campaign", "new", "d.npz", "--items-file", "c.npz", "--candidates", "x",
                 "y", "--policy", "ucbe", "--exclude-candidates"]) == 2
    assert "needs --history" in capsys.readouterr().err
    assert main(["campaign", "new", "d.npz", "--history", hist, "--policy", "ucbe",
                 "--exclude-candidates"]) == 2
    assert "--exclude-candidates: needs the candidates" in capsys.readouterr().err
    assert not Path("d.npz").exists()
    # a candidate the history does not hold (a new model, or a typo) is named, and the
    # campaign is still made: its other candidates' rows are dropped
    assert main(["campaign", "new", "e.npz", "--history", hist, "--candidates", names[1],
                 "no/such-model", "--policy", "ucbe", "--exclude-candidates"]) == 0
    out = capsys.readouterr()
    assert "created e.npz" in out.out
    assert "1 candidate(s) not in" in out.err and "no/such-model" in out.err
    # a candidate's repeated rows, renamed "name#k" on loading (resubmissions on the
    # bundled leaderboards), are its answers too: they go with it, and stderr says so
    rng = np.random.default_rng(1)
    models = ["a", "b", "a", "a", "b#x", "c#2", "c", "d", "e"]
    rep = tmp_path / "rep.npz"
    np.savez(rep, scores=(rng.random((9, 12)) < 0.5).astype(np.float32),
             models=np.array(models))
    assert main(["campaign", "new", "g.npz", "--history", str(rep), "--candidates", "a", "b",
                 "--policy", "ucbe", "--exclude-candidates",
                 "--history-duplicate-names", "rename"]) == 0
    err = capsys.readouterr().err
    assert "also dropped 2 repeated row(s) of the candidates" in err and "['a#2', 'a#3']" in err
    from jaxeval._cli import _exclude_candidates

    hist = jaxeval.load(str(rep), duplicate_names="rename")
    kept = _exclude_candidates(hist, ["a", "b"], "rep.npz").models.tolist()
    assert kept == ["b#x", "c#2", "c", "d", "e"]
    # a table that renamed nothing: a model named "a#2" is another model
    plain = jaxeval.ScoreMatrix(hist.scores, models=hist.models)
    kept = _exclude_candidates(plain, ["a", "b"], "plain").models.tolist()
    assert kept == ["a#2", "a#3", "b#x", "c#2", "c", "d", "e"]
    # the library's "items" is this command's --items-file
    assert main(["campaign", "new", "f.npz", "--candidates", "x", "y", "--policy",
                 "ucbe"]) == 2
    assert "--items-file:" in capsys.readouterr().err


def test_campaign_export_reads_back_exactly(tmp_path, capsys, monkeypatch):
    """``campaign export`` is CSV that reads back to the same names and scores (it wrote
    JSON-escaped names and 6 significant digits), and name files saved with a byte-order
    mark (Excel, Notepad) do not carry it into the first name. # lines of a candidates
    file are comments (said on stderr), not of an items file; a repeated item is named."""
    import csv
    import io

    import numpy as np

    import jaxeval

    monkeypatch.chdir(tmp_path)
    items = ['x"y', "ünï", "a,b", "tab\tin", "plain"]
    Path("items.txt").write_text("\n".join(items), encoding="utf-8-sig")
    Path("cands.txt").write_text('# the two to compare\nmodèle,α\n"quoted"\n',
                                 encoding="utf-8-sig")
    Path("twice.txt").write_text("\n".join([*items, "plain"]))
    assert main(["campaign", "new", "t.npz", "--items-file", "twice.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe"]) == 2
    err = capsys.readouterr().err
    assert "--items-file: repeated item names, e.g. ['plain']" in err
    assert "--candidates-file: left out 1 comment line(s) starting with '#', e.g. '# the two" \
        in err
    # item names are whatever the benchmark calls them: '#2' is an item, not a comment
    Path("hash.txt").write_text("q1\n#2\nq3\n")
    assert main(["campaign", "new", "h.npz", "--items-file", "hash.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe"]) == 0
    assert jaxeval.IdentificationCampaign.load("h.npz").items.tolist() == ["q1", "#2", "q3"]
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe", "--batch-size", "2", "--no-stop"]) == 0
    camp = jaxeval.IdentificationCampaign.load("c.npz")
    assert camp.candidates.tolist() == ["modèle,α", '"quoted"']
    assert "skip_separated" not in camp.settings  # --no-stop: the budget is spent whole
    assert main(["campaign", "new", "d.npz", "--items-file", "items.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe"]) == 0
    assert jaxeval.IdentificationCampaign.load("d.npz").settings["skip_separated"] is True
    assert main(["campaign", "new", "e.npz", "--items-file", "items.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe", "--no-skip-separated"]) == 0
    assert "skip_separated" not in jaxeval.IdentificationCampaign.load("e.npz").settings
    capsys.readouterr()
    given = {}
    for step in range(3):
        assert main(["campaign", "ask", "c.npz"]) == 0
        req = json.loads(capsys.readouterr().out)
        vals = [0.123456789 + 0.1 * step, 0.9999999]
        Path("a.json").write_text(json.dumps(dict(zip(req["items"], vals))))
        assert main(["campaign", "tell", "c.npz", "a.json", "--step", str(step)]) == 0
        capsys.readouterr()
        given.update({(req["model"], it): v for it, v in zip(req["items"], vals)})
    capsys.readouterr()
    assert main(["campaign", "export", "c.npz"]) == 0
    out = capsys.readouterr().out
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["model", "item", "score"] and len(rows) == 1 + len(given) == 7
    assert {(m, i): np.float32(v) for m, i, v in rows[1:]} == {
        k: np.float32(v) for k, v in given.items()}  # the campaign keeps float32 scores
    assert ",0.12345679\n" in out  # the shortest decimal of the saved float32
    Path("answers.csv").write_text(out, encoding="utf-8")
    back = jaxeval.load("answers.csv")
    for (m, i), v in given.items():
        r, c = back.models.tolist().index(m), back.items.tolist().index(i)
        assert back.scores[r, c] == np.float32(v)


def test_anchors_predict_refuses_text_scores_and_names_its_arguments(tmp_path, capsys,
                                                                    monkeypatch):
    """``anchors predict`` with a mapping refuses scores that are text (``"0.5"`` was
    read as a number), and its errors name the command's arguments."""
    import numpy as np

    import jaxeval

    monkeypatch.chdir(tmp_path)
    data = _small_npz(tmp_path, m=80, n=12)
    assert main(["anchors", "fit", data, "--k", "3", "--method",
                 "random_ridge", "--out", "p.npz"]) == 0
    pred = jaxeval.AnchorPredictor.load("p.npz")
    names = pred.anchor_items.tolist()
    Path("s.json").write_text(json.dumps({n: "0.5" for n in names}))
    assert main(["anchors", "predict", "p.npz", "s.json"]) == 2
    assert "scores must be numbers" in capsys.readouterr().err
    Path("s.json").write_text(json.dumps({n: 1.5 for n in names}))
    assert main(["anchors", "predict", "p.npz", "s.json"]) == 2
    assert "scores (s.json):" in capsys.readouterr().err
    Path("s.json").write_text(json.dumps({n: True for n in names}))  # JSON booleans are 1/0
    assert main(["anchors", "predict", "p.npz", "s.json"]) == 0
    assert json.loads(capsys.readouterr().out)["estimate"] == pytest.approx(
        float(pred.predict(np.ones(3))[0]))
    assert main(["anchors", "items", "p.npz", "--extra", "2", "--extra-seed", "-1"]) == 2
    assert "--extra-seed: expected a non-negative" in capsys.readouterr().err


def test_campaign_new_with_a_small_history_takes_rank_and_fit_steps(tmp_path, capsys,
                                                                   monkeypatch):
    """A history of fewer models than the default rank: the refusal names ``--rank``,
    which ``campaign new`` now has (with ``--fit-steps`` and ``--lam0``)."""
    import jaxeval

    monkeypatch.chdir(tmp_path)
    jaxeval.load("oll2_ifeval").take(models=[0, 1, 2, 3, 4], items=list(range(60))).to_npz(
        "h5.npz")
    base = ["campaign", "new", "c.npz", "--history", "h5.npz", "--candidates", "x", "y"]
    assert main(base) == 2
    assert "--rank: rank 8 is larger than the data allows" in capsys.readouterr().err
    assert main(base + ["--lam0", "big"]) == 2
    assert "--lam0: expected a number" in capsys.readouterr().err
    for flag, bad in (("--fit-steps", "0"), ("--rank", "0"), ("--lam0", "2"),
                      ("--budget", "0"), ("--batch-size", "0"), ("--alpha", "0")):
        assert main(base + [flag, bad]) == 2
        assert f"error: {flag}:" in capsys.readouterr().err
    assert main(base + ["--rank", "1", "--fit-steps", "30", "--lam0", "0.5"]) == 0
    camp = jaxeval.IdentificationCampaign.load("c.npz")
    assert camp.settings["lam0"] == 0.5 and camp._factors[0].shape == (60, 1)


def test_campaign_new_history_from_lm_eval_with_filters(tmp_path, capsys, monkeypatch):
    """An lm-evaluation-harness history whose task logs two filters: ``campaign new``
    takes ``--history-filter`` (one for all tasks, or TASK=FILTER) and
    ``--history-metric``; without them it says which flag to pass."""
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "runs"
    for m in range(4):
        d = runs / f"org__m{m}"
        d.mkdir(parents=True)
        lines = []
        for i in range(6):
            for filt, em in (("strict-match", float((i + m) % 2)), ("flexible-extract", 1.0)):
                lines.append(json.dumps({"doc_id": i, "filter": filt, "metrics": ["exact_match"],
                                         "exact_match": em}))
        (d / "samples_gsm8k_2025-01-01T00-00-00.000001.jsonl").write_text("\n".join(lines))
    base = ["campaign", "new", "c.npz", "--history", "runs", "--candidates", "x", "y",
            "--policy", "ucbe"]
    assert main(base) == 2
    assert "pass --history-filter NAME (or TASK=NAME" in capsys.readouterr().err
    assert main(base + ["--history-filter", "a", "--history-filter", "b"]) == 2
    assert "--history-filter: one FILTER for every task" in capsys.readouterr().err
    assert main(base + ["--history-filter", "strict-match", "--sep", ";"]) == 2
    assert "--sep: only for a .csv / .tsv table" in capsys.readouterr().err
    assert main(base + ["--history-filter", "gsm9k=strict-match"]) == 2
    assert ("--history-filter: no task ['gsm9k'] in runs; the tasks there are ['gsm8k']"
            in capsys.readouterr().err)
    assert main(base + ["--history-filter", "strict-match", "--history-metric", "exact_match"]
                ) == 0
    assert main(["campaign", "new", "d.npz", "--history", "runs", "--candidates", "x", "y",
                 "--policy", "ucbe", "--history-filter", "gsm8k=flexible-extract"]) == 0
    assert main(["campaign", "new", "e.npz", "--items-file", "c.npz", "--candidates", "x",
                 "y", "--policy", "ucbe", "--history-filter", "strict-match"]) == 2
    assert "need --history" in capsys.readouterr().err


def test_warnings_print_as_one_line_of_the_command(tmp_path, capsys, monkeypatch):
    """A library warning under the command line reads ``jaxeval: warning: ...``, not
    Python's ``path:line: UserWarning`` and a line of source; Python's own display is
    back after the command."""
    import warnings

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    rows = ["model," + ",".join(f"q{j}" for j in range(12))]
    rows += [f"m{m}," + ",".join(str(int(rng.random() < 0.3 + m / 60)) for _ in range(12))
             for m in range(30)]
    Path("t.csv").write_text("\n".join(rows) + "\n")
    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert cli(["anchors", "fit", "t.csv", "--k", "3", "--method", "random_mean",
                    "--out", "a.npz"]) == 0
    err = capsys.readouterr().err
    assert "jaxeval: warning: fit_anchors" in err and "too few" in err, err
    assert "UserWarning" not in err and "_cli.py" not in err
    assert warnings.showwarning is before
    # main() called from code leaves the caller's warning handling alone
    with pytest.warns(UserWarning, match="too few"):
        assert main(["anchors", "fit", "t.csv", "--k", "3", "--method", "random_mean",
                     "--out", "c.npz", "--quiet"]) == 0
    # the fit's progress (--quiet silences it)
    assert "fit_anchors: fitting 1 method(s) with k = 3 on 24 training models, 6 " in err
    assert "fit_anchors: done: random_mean [" in err
    with pytest.warns(UserWarning, match="too few"):
        assert main(["anchors", "fit", "t.csv", "--k", "3", "--method", "random_mean",
                     "--out", "b.npz", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "fit_anchors: fitting" not in err and "fit_anchors: done" not in err
    # another library's warning says whose it is
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = cli_module._show_warning
        warnings.warn_explicit("deprecated thing", DeprecationWarning,
                               "/site-packages/jax/_src/x.py", 3)
        warnings.warn_explicit("too few", UserWarning, str(
            Path(cli_module.__file__).resolve().parent / "anchors" / "_api.py"), 9)
    err = capsys.readouterr().err
    assert "jaxeval: DeprecationWarning (from x.py): deprecated thing" in err
    assert "jaxeval: warning: too few" in err


@pytest.mark.filterwarnings("ignore:fit_anchors.*too few")
def test_anchors_fit_reads_lm_eval_output_with_its_options(tmp_path, capsys, monkeypatch):
    """``anchors fit`` had none of the options its loader's messages asked for (filter=,
    runs=, duplicate_names=, .take(models=...)): it takes --filter / --metric / --runs,
    --duplicate-names and --drop-incomplete, and every message names those flags."""
    import jaxeval

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for m in range(30):
        d = Path("runs") / f"org__m{m}"
        d.mkdir(parents=True)
        n_docs = 11 if m == 0 else 12  # one model lacks a document
        lines = [json.dumps({"doc_id": i, "filter": f, "metrics": ["exact_match"],
                             "exact_match": float(rng.random() < 0.3 + m / 60)})
                 for i in range(n_docs) for f in ("strict-match", "flexible-extract")]
        name = "samples_gsm8k_2025-01-01T00-00-00.000001.jsonl"
        (d / name).write_text("\n".join(lines))
    base = ["anchors", "fit", "runs", "--k", "3", "--method", "random_mean"]
    assert main(base + ["--out", "a.npz"]) == 2
    assert "pass --filter NAME (or TASK=NAME" in capsys.readouterr().err
    assert main(base + ["--out", "a.npz", "--filter", "strict-match"]) == 2
    assert "1 of 30 models have unscored items" in capsys.readouterr().err
    assert main(base + ["--out", "a.npz", "--filter", "strict-match", "--drop-incomplete"]) == 0
    assert "left out 1 of 30 models" in capsys.readouterr().err
    assert jaxeval.AnchorPredictor.load("a.npz").k == 3
    # a second run of the task: --runs latest
    d = Path("runs") / "org__m3"
    (d / "samples_gsm8k_2025-02-01T00-00-00.000001.jsonl").write_text(
        (d / "samples_gsm8k_2025-01-01T00-00-00.000001.jsonl").read_text())
    args = base + ["--filter", "strict-match", "--drop-incomplete"]
    assert main(args + ["--out", "b.npz"]) == 2
    assert "pass --runs latest to keep the newest" in capsys.readouterr().err
    assert main(args + ["--out", "b.npz", "--runs", "latest"]) == 0
    assert main(args + ["--out", "c.npz", "--duplicate-names", "rename"]) == 2
    assert "--duplicate-names: only for an .npz file" in capsys.readouterr().err
    # repeated model names in an .npz: refused with the flag to pass, renamed with it
    sm = jaxeval.load("oll2_musr").take(models=np.arange(40))
    scores = sm.scores
    np.savez("dup.npz", scores=scores, models=np.array(["m"] * 2 + [f"x{i}" for i in range(38)]),
             items=sm.items)
    assert main(["anchors", "fit", "dup.npz", "--k", "5", "--method", "random_mean", "--out",
                 "d.npz"]) == 2
    assert "pass --duplicate-names rename" in capsys.readouterr().err
    assert main(["anchors", "fit", "dup.npz", "--k", "5", "--method", "random_mean", "--out",
                 "d.npz", "--duplicate-names", "rename"]) == 0
    assert main(["anchors", "fit", "dup.npz", "--k", "5", "--method", "random_mean", "--out",
                 "e.npz", "--duplicate-names", "rename", "--sep", ";"]) == 2
    assert "--sep / --filter / --metric / --task / --runs: not for an .npz file" in \
        capsys.readouterr().err
    # every model lacks a document (another one each): --drop-incomplete has nothing left
    for m in range(12):
        d = Path("gaps") / f"org__m{m}"
        d.mkdir(parents=True)
        lines = [json.dumps({"doc_id": i, "acc": float(rng.random() < 0.5)})
                 for i in range(12) if i != m]
        (d / "samples_arc_2025-01-01T00-00-00.000001.jsonl").write_text("\n".join(lines))
    assert main(["anchors", "fit", "gaps", "--k", "3", "--method", "random_mean", "--out",
                 "f.npz", "--drop-incomplete"]) == 2
    assert "--drop-incomplete: every model of gaps has unscored items" in \
        capsys.readouterr().err
    # campaign new: the same options for --history, refused without it
    cbase = ["campaign", "new", "c.npz", "--candidates", "x1", "x2", "--policy", "ucbe"]
    assert main(cbase + ["--history", "dup.npz"]) == 2
    assert "pass --history-duplicate-names rename" in capsys.readouterr().err
    assert main(cbase + ["--history", "dup.npz", "--history-duplicate-names", "rename"]) == 2
    assert "pass --exclude-candidates to drop them from --history" in capsys.readouterr().err
    cbase[4:6] = ["new1", "new2"]
    assert main(cbase + ["--history", "dup.npz", "--history-duplicate-names", "rename"]) == 0
    cbase[2] = "c2.npz"
    assert main(cbase + ["--items-file", "x", "--history-runs", "latest"]) == 2
    assert "--history-runs: need --history" in capsys.readouterr().err
    assert main(cbase + ["--items-file", "x", "--history-duplicate-names", "rename"]) == 2
    assert "--history-duplicate-names: needs --history" in capsys.readouterr().err


def test_refused_campaign_new_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    """Every argument of ``campaign new`` is checked before the file lock is taken: a
    refused ``new`` writes neither the campaign nor its lock file, and an existing
    campaign is refused without being touched."""
    monkeypatch.chdir(tmp_path)
    Path("items.txt").write_text("\n".join(f"q{j}" for j in range(6)))
    base = ["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates", "a",
            "b", "--policy", "ucbe"]
    assert main(base + ["--budget", "1000"]) == 2  # more than 2 candidates x 6 items
    assert "budget" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.txt"]
    assert main(base) == 0
    before = Path("c.npz").read_bytes()
    assert main(base) == 2
    assert "exists" in capsys.readouterr().err
    assert Path("c.npz").read_bytes() == before


@pytest.mark.skipif(sys.platform == "win32", reason="the lock uses fcntl (POSIX)")
def test_campaign_tell_waits_for_the_file_lock(tmp_path, capsys, monkeypatch):
    """Two harness processes answering the same request: the second waits for the first's
    save, then finds the request answered, so neither answer is silently overwritten."""
    import threading

    import numpy as np

    import jaxeval
    from jaxeval._cli import _file_lock

    monkeypatch.chdir(tmp_path)
    items = [f"q{j}" for j in range(12)]
    Path("items.txt").write_text("\n".join(items))
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates",
                 "a", "b", "--policy", "ucbe", "--batch-size", "2"]) == 0
    assert main(["campaign", "ask", "c.npz"]) == 0
    capsys.readouterr()
    Path("one.json").write_text("[1, 0]")
    Path("two.json").write_text("[0, 0]")
    codes = []
    fcntl = pytest.importorskip("fcntl")
    real_flock, asked = fcntl.flock, threading.Event()

    def watched(fd, op):  # the tell asking for the lock file's exclusive lock
        if op == fcntl.LOCK_EX and threading.current_thread() is t \
                and os.fstat(fd).st_ino == os.stat("c.npz.lock").st_ino:
            asked.set()
        return real_flock(fd, op)

    with _file_lock(Path("c.npz")):  # another process is in the middle of its tell
        t = threading.Thread(target=lambda: codes.append(  # "c" means c.npz: same lock
            main(["campaign", "tell", "c", "one.json", "--step", "0"])))
        monkeypatch.setattr(fcntl, "flock", watched)
        t.start()
        assert asked.wait(timeout=120.0)  # it asks for the same lock (a no-op lock never does)
        t.join(timeout=0.5)
        assert t.is_alive() and codes == []  # and waits; it has not loaded the old file
        assert jaxeval.IdentificationCampaign.load("c.npz").calls == 0
    t.join(timeout=120.0)
    assert codes == [0]
    assert main(["campaign", "tell", "c.npz", "two.json", "--step", "0"]) == 2
    assert "already answered" in capsys.readouterr().err
    told = jaxeval.IdentificationCampaign.saved_scores("c.npz")
    assert told.mask.sum() == 2 and np.nansum(np.where(told.mask, told.scores, 0)) == 1.0
    assert Path("c.npz.lock").exists()  # left in place: removing it would race


def test_campaign_lock_on_windows_uses_msvcrt(tmp_path, monkeypatch):
    """Without ``fcntl`` (Windows) the lock is ``msvcrt.locking`` on byte 0 of the lock
    file, retried while another process holds it, and released even when the command
    fails. A stand-in ``msvcrt`` records the calls (this runs on POSIX too)."""
    import errno
    import types

    from jaxeval._cli import _file_lock

    calls = []
    busy = [2]  # the first two attempts find the byte locked

    def locking(fd, mode, nbytes):
        import os

        calls.append((mode, nbytes, os.lseek(fd, 0, os.SEEK_CUR)))
        if mode == fake.LK_LOCK and busy[0]:
            busy[0] -= 1
            raise OSError(getattr(errno, "EDEADLOCK", errno.EDEADLK), "Resource deadlock avoided")

    fake = types.SimpleNamespace(LK_LOCK=1, LK_UNLCK=0, locking=locking)
    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl -> ImportError
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    with _file_lock(tmp_path / "c.npz"):
        assert calls == [(1, 1, 0)] * 3  # two refusals, then the lock
    assert calls[-1] == (0, 1, 0)  # released at byte 0
    with pytest.raises(RuntimeError, match="boom") as err, _file_lock(tmp_path / "c.npz"):
        raise RuntimeError("boom")
    assert err.value.__context__ is None  # not raised "during handling" of ImportError
    assert calls[-1] == (0, 1, 0) and len(calls) == 6
    assert (tmp_path / "c.npz.lock").exists()
    fake.locking = lambda fd, mode, nbytes: (_ for _ in ()).throw(OSError(errno.EBADF, "bad"))
    with pytest.raises(OSError, match="bad"), _file_lock(tmp_path / "c.npz"):
        pass  # another error is not waited out

    def unlock_fails(fd, mode, nbytes):
        calls.append((mode, nbytes))
        if mode == fake.LK_UNLCK:
            raise OSError(errno.EBADF, "unlock failed")

    fake.locking = unlock_fails
    with pytest.raises(RuntimeError, match="boom"), _file_lock(tmp_path / "c.npz"):
        raise RuntimeError("boom")  # the command's error, not the unlock's
    assert calls[-1] == (0, 1)  # the unlock was still tried
    with pytest.raises(OSError, match="unlock failed"), _file_lock(tmp_path / "c.npz"):
        pass  # alone, an unlock error is reported


def test_campaign_lock_keeps_the_command_error_when_unlock_fails(tmp_path, monkeypatch):
    """POSIX: an error from releasing the flock never replaces the command's own error."""
    fcntl = pytest.importorskip("fcntl")
    from jaxeval import _cli

    real = fcntl.flock

    def flock(fd, op):
        if op == fcntl.LOCK_UN:
            real(fd, op)
            raise OSError("unlock failed")
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(ValueError, match="bad answers"), _cli._file_lock(tmp_path / "c.npz"):
        raise ValueError("bad answers")


def test_anchors_fit_items_predict(tmp_path, capsys, monkeypatch):
    """fit prints the anchors, predict reads a mapping or a list; --extra adds the
    unbiased estimate; the answers equal the Python API's."""

    import jaxeval

    monkeypatch.chdir(tmp_path)
    sm = jaxeval.load("oll2_musr").drop_duplicates()
    train, test = sm.split([sm.n_models - 3], seed=0)
    train.to_npz("train.npz")
    assert main(["anchors", "fit", "train.npz", "--k", "12", "--out", "p",
                 "--method", "kmeans_ridge"]) == 0
    out = capsys.readouterr()
    anchors = out.out.split()
    assert len(anchors) == 12 and "saved p.npz" in out.err
    pred = jaxeval.AnchorPredictor.load("p.npz")
    assert anchors == pred.anchor_items.tolist()
    assert main(["anchors", "fit", "train.npz", "--k", "12", "--out", "p.npz"]) == 2
    assert "p.npz exists" in capsys.readouterr().err
    # repeated models are left out, as before, but no longer without a word
    jaxeval.ScoreMatrix(np.vstack([train.scores, train.scores[:2]]), items=train.items,
                        models=[*train.models.tolist(), "copy-a", "copy-b"]).to_npz("dup.npz")
    assert main(["anchors", "fit", "dup.npz", "--k", "4", "--out", "q", "--method",
                 "random_mean", "--quiet"]) == 0
    assert (f"DATA: left out 2 of {train.n_models + 2} models whose scores repeat another "
            "model's exactly") in capsys.readouterr().err
    assert main(["anchors", "items", "p.npz", "--extra", "30", "--extra-seed", "4"]) == 0
    extra = capsys.readouterr().out.split()
    assert extra == pred.extra_items(30, seed=4).tolist()
    row = test.take(models=[0])
    x = row.take(items=anchors).scores[0]
    names = anchors + extra
    Path("s.json").write_text(json.dumps(
        dict(zip(names, row.take(items=names).scores[0].tolist()))))
    Path("l.json").write_text(json.dumps(x.tolist()))
    assert main(["anchors", "predict", "p.npz", "l.json"]) == 0
    res = json.loads(capsys.readouterr().out)
    est, lo, hi = pred.predict(x)
    assert res["level"] == pytest.approx(0.9)
    assert (res["estimate"], res["lower"], res["upper"]) == pytest.approx((est, lo, hi))
    assert main(["anchors", "predict", "p.npz", "s.json", "--extra", "30",
                 "--extra-seed", "4"]) == 0
    res = json.loads(capsys.readouterr().out)
    u = pred.predict_unbiased(x, extra, row.take(items=extra).scores[0])
    assert (res["unbiased"]["estimate"], res["unbiased"]["lower"],
            res["unbiased"]["upper"]) == pytest.approx(u)
    # another seed's extra items are not the mapping's: named, one line
    assert main(["anchors", "predict", "p.npz", "s.json", "--extra", "30"]) == 2
    assert "not asked for" in capsys.readouterr().err
    Path("anchors_only.json").write_text(json.dumps(dict(zip(anchors, x.tolist()))))
    assert main(["anchors", "predict", "p.npz", "anchors_only.json", "--extra", "30"]) == 2
    assert "no score for 30 item(s)" in capsys.readouterr().err
    # keys beyond the requested items are refused (no picking the extra items)
    Path("more.json").write_text(json.dumps(
        dict(zip(names + ["x"], row.take(items=names).scores[0].tolist() + [1.0]))))
    assert main(["anchors", "predict", "p.npz", "more.json", "--extra", "30",
                 "--extra-seed", "4"]) == 2
    assert "not asked for" in capsys.readouterr().err
    assert main(["anchors", "predict", "p.npz", "s.json"]) == 2  # extras without --extra
    assert "not asked for" in capsys.readouterr().err
    assert main(["anchors", "items", "p.npz", "--extra", "0"]) == 2
    assert "M >= 1" in capsys.readouterr().err
    assert main(["anchors", "items", "p.npz", "--extra-seed", "7"]) == 2  # would be ignored
    assert "--extra-seed: only with --extra" in capsys.readouterr().err
    assert main(["anchors", "items", "p.npz", "--extra", "100000"]) == 2
    assert "--extra: at most 744 items are not anchors" in capsys.readouterr().err
    Path("short.json").write_text("[1, 0]")
    assert main(["anchors", "predict", "p.npz", "short.json"]) == 2
    assert "expected 12" in capsys.readouterr().err


def test_a_reader_that_goes_away_is_not_an_error():
    """`jaxeval ... | head`: a closed stdout ends the command quietly (no error line)."""
    p = subprocess.Popen([sys.executable, "-m", "jaxeval", "datasets", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait() == 1
    assert "error" not in err.lower(), err


def test_anchors_fit_reads_other_separators_and_names_its_data(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("semi.csv").write_text("model;a1;a2;a3\nm1;1;0;1\nm2;0;1;1\nm3;1;1;1\nm4;0;0;1\n")
    assert main(["anchors", "fit", "semi.csv", "--k", "1", "--out", "a"]) == 2
    assert "pass sep=';' (--sep on the command line)" in capsys.readouterr().err
    assert main(["anchors", "fit", "semi.csv", "--k", "1", "--out", "a", "--sep", ";"]) == 2
    err = capsys.readouterr().err  # read; too few models for the method, said about DATA
    assert "DATA semi.csv (4 models after removing duplicates, 3 items), --k 1:" in err
    # --sep '\t' from a shell is backslash-t: read as the tab it means
    Path("tab.csv").write_text("model\ta1\ta2\ta3\nm1\t1\t0\t1\nm2\t0\t1\t1\nm3\t1\t1\n")
    assert main(["anchors", "fit", "tab.csv", "--k", "1", "--out", "a", "--sep", "\\t"]) == 2
    assert "line 4 has 3 fields, the header 4" in capsys.readouterr().err
    assert main(["anchors", "fit", "tab.csv", "--k", "1", "--out", "a", "--sep", "::"]) == 2
    assert "--sep: expected one character" in capsys.readouterr().err
    assert main(["anchors", "fit", "oll2_musr", "--k", "1", "--out", "a", "--sep", ";"]) == 2
    assert "--sep: only for a .csv / .tsv table" in capsys.readouterr().err


def test_names_file_lines_end_at_newline_only(tmp_path):
    """A names file splits at "\\n" (CRLF and a BOM tolerated), not at U+2028 & co."""
    from jaxeval._cli import _lines

    p = tmp_path / "names.txt"
    p.write_bytes("\ufeffmodel\u2028a\r\nmodel-b\n\nmodel\x85c\n".encode())
    assert _lines(str(p), "--candidates-file") == ["model\u2028a", "model-b", "model\x85c"]


def test_anchors_fit_into_a_folder_it_cannot_write_is_refused_before_the_fit(tmp_path,
                                                                              monkeypatch,
                                                                              capsys):
    """``--out`` in a folder that cannot be written (a read-only mount; chmod does not
    stop root, so the write probe is made to fail) used to be found only after the fit,
    losing it; now it is refused first, naming ``--out`` and the folder."""
    import tempfile

    import jaxeval

    monkeypatch.chdir(tmp_path)
    Path("ro").mkdir()
    real = tempfile.NamedTemporaryFile

    def probe(*a, dir=None, **kw):
        if dir is not None and Path(dir).resolve() == (tmp_path / "ro").resolve():
            raise PermissionError(1, "Operation not permitted")
        return real(*a, dir=dir, **kw)

    def no_fit(*a, **k):
        raise AssertionError("the fit started")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", probe)
    monkeypatch.setattr(jaxeval, "fit_anchors", no_fit)
    monkeypatch.setattr(jaxeval.anchors, "fit_anchors", no_fit, raising=False)
    rows = ["model," + ",".join(f"q{j}" for j in range(12))]
    rows += [f"m{m}," + ",".join(str((m + j) % 2) for j in range(12)) for m in range(30)]
    Path("t.csv").write_text("\n".join(rows) + "\n")
    assert main(["anchors", "fit", "t.csv", "--k", "3", "--out", "ro/a.npz"]) == 2
    err = capsys.readouterr().err
    assert "--out: cannot write in the folder ro (Operation not permitted)" in err
    assert list(Path("ro").iterdir()) == []


@pytest.mark.parametrize("external", [True, False])
def test_anchors_items_extra_refused_where_predict_cannot_use_them(tmp_path, capsys, external):
    """``anchors items --extra`` on a predictor with no unbiased estimate (an external
    target, or no item model) used to list items to score, which ``anchors predict
    --extra`` then refused; now the listing is refused, naming ``--extra``."""
    import dataclasses

    from test_anchor_api_mutants import _by_hand

    pred = _by_hand()
    if external:
        pred = dataclasses.replace(pred, external_target=True)
    path = str(pred.save(tmp_path / "p"))
    assert main(["anchors", "items", path, "--extra", "2"]) == 2
    err = capsys.readouterr().err
    assert ("--extra: this predictor was fitted on an external target" if external
            else "--extra: this predictor has no item model") in err
    assert main(["anchors", "items", path]) == 0  # the anchors themselves are listed
    assert capsys.readouterr().out.split() == ["q2", "q5", "q7"]


def test_anchors_predict_says_what_it_reads_for_an_empty_a_table_or_a_many_model_file(
        tmp_path, capsys):
    """An empty scores file is called empty (not a JSON parse error at char 0); a CSV
    table or an object of several models' scores is told that ``anchors predict`` reads
    one model's scores as JSON, and where a table of many models goes instead."""
    from test_anchor_api_mutants import _by_hand

    path = str(_by_hand().save(tmp_path / "p"))
    cases = {
        "empty.json": ("", "scores: {} is empty (anchors predict reads one model's scores "
                           "as JSON"),
        "many.json": (json.dumps({"m1": {"q2": 1, "q5": 0, "q7": 1}, "m2": {"q2": 0}}),
                      "scores: one model per file; {} holds an object of 2 object(s) (keys "
                      "like 'm1')"),
    }
    for name, (text, msg) in cases.items():
        f = tmp_path / name
        f.write_text(text)
        assert main(["anchors", "predict", path, str(f)]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert msg.format(f) in err, err
        assert "many models: a score table, .csv / .tsv / .npz / .parquet" in err
    # one model's scores as a two-column CSV: read as a table whose columns are not items
    f = tmp_path / "t.csv"
    f.write_text("item,score\nq2,1\nq5,0\nq7,1\n")
    assert main(["anchors", "predict", path, str(f)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "scores: " in err and "the table looks transposed" in err
    assert "or one model's scores as JSON {item: score})" in err
    # a table whose columns are none of the anchors
    f.write_text("model,a,b\nm,1,0\n")
    assert main(["anchors", "predict", path, str(f)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no column for 3 of the 3 anchor items" in err
    assert "a table holds one row per model and the items as columns" in err
    good = tmp_path / "one.json"
    good.write_text(json.dumps({"q2": 1, "q5": 0, "q7": 1}))
    assert main(["anchors", "predict", path, str(good)]) == 0
    assert json.loads(capsys.readouterr().out)["estimate"] == pytest.approx(0.8)
