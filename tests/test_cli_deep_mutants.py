"""Gaps a second, deeper mutation review of the command line (``jaxeval/_cli.py``)
found: each test fails on a plausible bug the rest of the suite let through."""

import json
from pathlib import Path

import numpy as np
import pytest
from test_cli import TESTS, _small_npz
from test_cli_mutants import predictor_file  # noqa: F401 (a fixture)

import jaxeval
from jaxeval import _cli as cli_module
from jaxeval._cli import cli, main


class _Exec(Exception):
    """Raised by the stand-in ``os.execve``: the relaunch it was asked for."""


# ------------------------------------------------------------------ run --coordinator
@pytest.mark.parametrize("coord", ["host:0", ":1234"])
def test_coordinator_without_a_port_or_host_is_refused(tmp_path, capsys, monkeypatch, coord):
    """Port 0 is no port a coordinator listens on, and HOST may not be empty."""
    monkeypatch.setattr(cli_module.os, "execve", lambda *a: (_ for _ in ()).throw(_Exec()))
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification"}))
    with pytest.raises(SystemExit) as e:
        main(["run", str(p), "--out", str(tmp_path / "o"), "--coordinator", coord,
              "--num-processes", "1", "--process-id", "0"])
    assert e.value.code == 2
    assert (f"jaxeval run: error: --coordinator: expected HOST:PORT (e.g. host0:1234), got "
            f"{coord!r}") in capsys.readouterr().err


def test_coordinator_relaunches_with_the_whole_command_and_its_settings(tmp_path,
                                                                        monkeypatch):
    """`run --coordinator` restarts the interpreter with the launcher, the same command
    line (every argument) and the distributed settings; CPU-only JAX uses gloo."""
    seen = []

    def execve(path, argv, env):
        seen.append((path, argv, env))
        raise _Exec()

    monkeypatch.setattr(cli_module.os, "execve", execve)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv(cli_module._DIST_ENV, raising=False)
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification"}))
    argv = ["run", str(p), "--out", str(tmp_path / "o"), "--coordinator", "host0:1234",
            "--num-processes", "3", "--process-id", "2"]
    with pytest.raises(_Exec):
        main(argv)
    (path, args, env), = seen
    assert args[0] == path and args[1] == "-c" and args[3:] == argv
    assert json.loads(env[cli_module._DIST_ENV]) == {
        "coordinator": "host0:1234", "num_processes": 3, "process_id": 2, "gloo": True}


# ------------------------------------------------------------------ study commands
def _toy(tmp_path, monkeypatch, n=16):
    """A small replicates study definition (``test_study:toy``)."""
    monkeypatch.syspath_prepend(str(TESTS))
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "replicates", "name": "deep-toy",
                             "target": "test_study:toy", "n_replicates": n, "seed": 1,
                             "chunk_size": 8, "lanes": 8}))
    return p


def test_run_and_resume_report_unless_no_report(tmp_path, capsys, monkeypatch):
    """Without --no-report, `run` (and `resume`) write summary.json and print the
    summary table; --no-report does neither."""
    p = _toy(tmp_path, monkeypatch)
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "deep-toy" in printed
    assert json.loads((out / "summary.json").read_text())["replicates"] == 16
    (out / "summary.json").unlink()
    assert main(["resume", str(out), "--quiet", "--no-report"]) == 0
    assert capsys.readouterr().out == "" and not (out / "summary.json").exists()
    assert main(["resume", str(out), "--quiet"]) == 0
    assert "deep-toy" in capsys.readouterr().out
    assert (out / "summary.json").is_file()


def _drop_last_chunk(out):
    from jaxeval._study import MANIFEST_FILE

    man = json.loads((out / MANIFEST_FILE).read_text())
    last = sorted(man["chunks"])[-1]
    del man["chunks"][last]
    man["complete"] = False
    (out / MANIFEST_FILE).write_text(json.dumps(man))


def test_resume_quiet_prints_no_progress_and_an_interrupted_report_says_resume(
        tmp_path, capsys, monkeypatch):
    p = _toy(tmp_path, monkeypatch)
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 0
    _drop_last_chunk(out)
    capsys.readouterr()
    # an interrupted whole study is resumed, not merged
    assert cli_module._report(out) is None
    err = capsys.readouterr().err
    assert f"{out}: study incomplete; interrupted: `jaxeval resume {out}` finishes it" in err
    assert "merge" not in err
    assert main(["resume", str(out), "--quiet", "--no-report"]) == 0
    assert capsys.readouterr().err == ""
    # so is an interrupted range job (merged only once its range is done)
    part = tmp_path / "part"
    (tmp_path / "r").mkdir()
    q = str(_toy(tmp_path / "r", monkeypatch, n=24))
    assert main(["run", q, "--out", str(part), "--range", "0:16", "--quiet",
                 "--no-report"]) == 0
    _drop_last_chunk(part)
    capsys.readouterr()
    assert cli_module._report(part) is None
    err = capsys.readouterr().err
    assert f"{part}: study incomplete; interrupted: `jaxeval resume {part}` finishes it" in err
    _drop_last_chunk(out)
    assert main(["resume", str(out), "--no-report"]) == 0
    assert capsys.readouterr().err != ""  # the progress lines --quiet leaves out


def test_status_verify_lists_a_corrupt_chunk_file(tmp_path, capsys, monkeypatch):
    """`status --verify` reads every chunk file (a corrupt one is listed, not counted);
    plain `status` checks only that the files are there."""
    p = _toy(tmp_path, monkeypatch)
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 0
    man = json.loads((out / "manifest.json").read_text())
    name, rec = sorted(man["chunks"].items())[0]
    chunk = next(f for f in out.rglob("*") if f.is_file() and f.name.startswith(
        Path(rec.get("file", name)).stem))
    chunk.write_bytes(chunk.read_bytes()[:-7] + b"garbage")
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["complete"]
    assert main(["status", str(out), "--verify"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert len(st["corrupt_chunk_files"]) == 1 and not st["complete"], st


# ------------------------------------------------------------------ top level
def test_version_prints_the_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == jaxeval.__version__


def test_ctrl_c_names_the_folder_only_when_it_holds_a_study(tmp_path, capsys, monkeypatch):
    """The resume hint is given for a folder that holds a study's manifest, not for one
    the run never got to create (resume would refuse it)."""
    import signal

    killed = []
    monkeypatch.setattr(cli_module.os, "kill", lambda pid, sig: killed.append(sig))
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    study = tmp_path / "s"

    def interrupted(argv):
        cli_module._STUDY_FOLDER[:] = [str(study)]
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "main", interrupted)
    assert cli(["run"]) == 130
    assert capsys.readouterr().err == "jaxeval: interrupted\n"
    study.mkdir()
    (study / "manifest.json").write_text("{}")
    assert cli(["run"]) == 130
    err = capsys.readouterr().err
    assert f"the finished chunks are kept in {study}: `jaxeval resume {study}`" in err
    assert killed == [signal.SIGINT] * 2


# ------------------------------------------------------------------ datasets
def test_datasets_json_lists_three_top_models_and_the_median(capsys):
    assert main(["datasets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for r in rows:
        acc = jaxeval.datasets.load(r["name"]).drop_duplicates().accuracy()
        assert len(r["top_models"]) == min(3, r["unique_models"])
        assert r["accuracy_median"] == pytest.approx(float(np.median(acc)))


# ------------------------------------------------------------------ campaign
def _campaign(tmp_path, monkeypatch, *extra, n=4):
    monkeypatch.chdir(tmp_path)
    Path("items.txt").write_text("\n".join(f"q{j}" for j in range(n)))
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates", "a",
                 "b", "--policy", "ucbe", *extra]) == 0


def test_campaign_tell_refuses_a_future_step_and_says_done(tmp_path, capsys, monkeypatch):
    """Only the pending step is answered: a later one is refused too (its scores would be
    filed under the pending request's model), with no hint that does not apply. The tell
    that spends the budget says so; a tell after it is refused, naming the reason."""
    _campaign(tmp_path, monkeypatch, "--batch-size", "2", "--budget", "4")
    Path("a.json").write_text("[0, 0]")
    Path("b.json").write_text("[1, 1]")
    capsys.readouterr()
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "1"]) == 2
    err = capsys.readouterr().err
    assert "error: step: the pending request is step 0 (a), not 1; nothing saved" in err, err
    assert jaxeval.IdentificationCampaign.load("c.npz").calls == 0
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "0"]) == 0
    capsys.readouterr()
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "0"]) == 2
    err = capsys.readouterr().err
    assert "not 0 (already answered); nothing saved" in err, err  # not "(steps count ..."
    assert main(["campaign", "tell", "c.npz", "b.json", "--step", "1"]) == 0
    assert capsys.readouterr().out.strip() == "4 of 4 calls; leader b; done (budget)"
    assert main(["campaign", "tell", "c.npz", "b.json", "--step", "2"]) == 2
    assert ("jaxeval campaign: error: answers: the campaign is done (budget); there is no "
            "request to answer") in capsys.readouterr().err
    assert main(["campaign", "ask", "c.npz"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "done": True, "reason": "budget", "recommended": "b", "calls": 4}
    assert main(["campaign", "status", "c.npz", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    # spent, not separated: done without confidence; the leader is b, not the first model
    assert (st["done"], st["confident"], st["recommended"]) == (True, False, "b")


def test_campaign_ask_items_only_prints_one_item_per_line(tmp_path, capsys, monkeypatch):
    _campaign(tmp_path, monkeypatch, "--batch-size", "3")
    capsys.readouterr()
    assert main(["campaign", "ask", "c.npz"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert main(["campaign", "ask", "c.npz", "--items-only"]) == 0
    assert capsys.readouterr().out == "\n".join(items) + "\n"


def test_campaign_new_seed_orders_the_items(tmp_path, capsys, monkeypatch):
    """--seed is the item orders' seed: the first request is the library's with it."""
    _campaign(tmp_path, monkeypatch, "--batch-size", "5", "--seed", "3", n=40)
    camp = jaxeval.IdentificationCampaign(["a", "b"], items=[f"q{j}" for j in range(40)],
                                          policy="ucbe", batch_size=5, seed=3)
    other = jaxeval.IdentificationCampaign(["a", "b"], items=[f"q{j}" for j in range(40)],
                                           policy="ucbe", batch_size=5, seed=0)
    assert camp.ask().items.tolist() != other.ask().items.tolist()  # the seed matters
    capsys.readouterr()
    assert main(["campaign", "ask", "c.npz"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == camp.ask().items.tolist()
    Path("i.txt").write_text("q0\nq1\n")
    assert main(["campaign", "new", "d.npz", "--items-file", "i.txt", "--candidates", "a", "b",
                 "--policy", "ucbe", "--seed", "-1"]) == 2
    assert "jaxeval campaign: error: --seed: expected a non-negative" in capsys.readouterr().err


def test_campaign_candidates_file_comments_are_whole_lines(tmp_path, capsys, monkeypatch):
    """# starts a comment line; a model named with a '#' inside is a candidate."""
    monkeypatch.chdir(tmp_path)
    Path("items.txt").write_text("q0\nq1\n")
    Path("cands.txt").write_text("# mine\nmodel#2\nb\n")
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates-file",
                 "cands.txt", "--policy", "ucbe"]) == 0
    assert "left out 1 comment line(s) starting with '#', e.g. '# mine'" in \
        capsys.readouterr().err
    assert jaxeval.IdentificationCampaign.load("c.npz").candidates.tolist() == ["model#2", "b"]


def test_campaign_tell_of_a_missing_file_leaves_nothing_behind(tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("a.json").write_text("[1]")
    assert main(["campaign", "tell", "nope.npz", "a.json", "--step", "0"]) == 2
    assert "no saved campaign" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_campaign_history_metric_without_history_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("items.txt").write_text("q0\nq1\n")
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates", "a",
                 "b", "--policy", "ucbe", "--history-metric", "acc"]) == 2
    assert "jaxeval campaign: error: --history-metric / --history-filter / --history-runs: " \
        "need --history" in capsys.readouterr().err
    assert not Path("c.npz").exists()


def test_campaign_status_plot_error_names_the_flag_and_no_strict_is_passed(
        tmp_path, capsys, monkeypatch):
    _campaign(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["campaign", "status", "c.npz", "--plot", "nodir/st.png"]) == 2
    assert "jaxeval campaign: error: --plot: cannot write nodir/st.png" in \
        capsys.readouterr().err
    seen = []
    real_load = jaxeval.IdentificationCampaign.load.__func__

    def recording_load(cls, *args, **kwargs):
        seen.append(kwargs.get("strict"))
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(jaxeval.IdentificationCampaign, "load", classmethod(recording_load))
    assert main(["campaign", "status", "c.npz", "--no-strict"]) == 0
    assert main(["campaign", "status", "c.npz"]) == 0
    assert seen == [False, True]


def test_campaign_answers_that_are_not_utf8_name_the_argument(tmp_path, capsys, monkeypatch):
    _campaign(tmp_path, monkeypatch)
    Path("a.json").write_bytes(b"[1, \xff]")
    capsys.readouterr()
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "0"]) == 2
    assert "jaxeval campaign: error: answers: cannot read a.json as JSON" in \
        capsys.readouterr().err


# ------------------------------------------------------------------ data options
def test_history_metric_advice_and_lm_eval_flags_on_a_table(tmp_path, capsys, monkeypatch):
    """The loader's "pass metric= explicitly" reads as --history-metric; --history-metric
    on a CSV table is refused (it is for lm-evaluation-harness output); --sep '\\t' is
    taken for a .tsv table."""
    monkeypatch.chdir(tmp_path)
    for m, field in (("org__a", "acc"), ("org__b", "exact_match")):
        d = Path("runs") / m
        d.mkdir(parents=True)
        (d / "samples_t_2025-01-01T00-00-00.jsonl").write_text(
            "".join(json.dumps({"doc_id": i, field: float(i % 2)}) + "\n" for i in range(4)))
    base = ["campaign", "new", "c.npz", "--candidates", "x", "y", "--policy", "ucbe"]
    assert main(base + ["--history", "runs"]) == 2
    assert "pass --history-metric explicitly" in capsys.readouterr().err
    Path("h.csv").write_text("model,q0,q1\nm0,1,0\nm1,0,1\n")
    assert main(base + ["--history", "h.csv", "--history-metric", "acc"]) == 2
    assert ("error: --history-metric / --history-filter / --history-task / --history-runs: "
            "only for "
            "lm-evaluation-harness output (a folder, .jsonl or .jsonl.gz), not 'h.csv'") in \
        capsys.readouterr().err
    Path("h.tsv").write_text("model\tq0\tq1\nm0\t1\t0\nm1\t0\t1\n")
    assert main(base + ["--history", "h.tsv", "--sep", "\\t"]) == 0
    assert jaxeval.IdentificationCampaign.load("c.npz").items.tolist() == ["q0", "q1"]


# ------------------------------------------------------------------ anchors
def test_anchors_fit_passes_seed_and_alpha(tmp_path, capsys, monkeypatch):
    """--seed and --alpha reach the fit: the anchors are the library's for that seed,
    and predict's interval level is 1 - alpha."""
    monkeypatch.chdir(tmp_path)
    data = _small_npz(tmp_path, m=40, n=12)
    assert main(["anchors", "fit", data, "--k", "3", "--method", "random_mean", "--seed",
                 "5", "--alpha", "0.2", "--out", "p.npz", "--quiet"]) == 0
    sm = jaxeval.load(data).drop_duplicates()
    ref = jaxeval.fit_anchors(sm, 3, method="random_mean", seed=5, alpha=0.2)
    ref0 = jaxeval.fit_anchors(sm, 3, method="random_mean", seed=0, alpha=0.2)
    assert ref.anchor_items.tolist() != ref0.anchor_items.tolist()  # the seed matters
    assert capsys.readouterr().out.split() == ref.anchor_items.tolist()
    Path("s.json").write_text(json.dumps([1, 0, 1]))
    assert main(["anchors", "predict", "p.npz", "s.json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["level"] == pytest.approx(0.8)
    assert (res["estimate"], res["lower"], res["upper"]) == pytest.approx(
        tuple(float(v) for v in ref.predict(np.array([1.0, 0.0, 1.0]))))


def test_anchors_predict_list_refusals_and_extra_count(predictor_file, tmp_path,  # noqa: F811
                                                       capsys):
    p = str(predictor_file)
    pred = jaxeval.AnchorPredictor.load(p)
    f = tmp_path / "s.json"
    f.write_text(json.dumps([1, 0, 1]))
    assert main(["anchors", "predict", p, str(f), "--extra", "2"]) == 2
    assert "jaxeval anchors: error: scores: with --extra give a mapping {item: score}" in \
        capsys.readouterr().err
    f.write_text(json.dumps(["1", "0", "1"]))
    assert main(["anchors", "predict", p, str(f)]) == 2
    assert "jaxeval anchors: error: scores: expected 3 numbers in anchor order or a " \
        "mapping {item: score}" in capsys.readouterr().err
    extra = pred.extra_items(4, seed=2).tolist()
    f.write_text(json.dumps({n: 1.0 for n in pred.anchor_items.tolist() + extra}))
    assert main(["anchors", "predict", p, str(f), "--extra", "4", "--extra-seed", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["unbiased"]["extra_items"] == 4


def test_campaign_ask_when_done_early_reports_the_calls_spent(tmp_path, capsys, monkeypatch):
    """A campaign stopped by confidence has spent fewer calls than its budget: the done
    record of `ask` gives those, and the confident leader."""
    _campaign(tmp_path, monkeypatch, "--batch-size", "10", "--budget", "60", n=30)
    for step in range(6):
        capsys.readouterr()
        assert main(["campaign", "ask", "c.npz"]) == 0
        req = json.loads(capsys.readouterr().out)
        if req.get("done"):
            break
        Path("a.json").write_text(json.dumps([float(req["model"] == "b")] * 10))
        assert main(["campaign", "tell", "c.npz", "a.json", "--step", str(step)]) == 0
    assert req == {"done": True, "reason": "confident", "recommended": "b", "calls": 30}


def test_file_errors_name_the_flag_as_typed(tmp_path, capsys, monkeypatch):
    """An unreadable --items-file / --candidates-file and an existing --out are reported
    under the flag as the user typed it, like the same flags' other errors."""
    monkeypatch.chdir(tmp_path)
    Path("items.txt").write_text("a\nb\nc\n")
    Path("cands.txt").write_text("x\ny\n")
    assert main(["campaign", "new", "c.npz", "--items-file", "nofile.txt",
                 "--candidates-file", "cands.txt", "--policy", "ucbe"]) == 2
    assert "error: --items-file: cannot read nofile.txt" in capsys.readouterr().err
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt",
                 "--candidates-file", "nofile.txt", "--policy", "ucbe"]) == 2
    assert "error: --candidates-file: cannot read nofile.txt" in capsys.readouterr().err
    data = _small_npz(tmp_path, m=80, n=12)
    Path("p.npz").write_bytes(b"taken")
    assert main(["anchors", "fit", data, "--k", "3", "--method", "random_mean",
                 "--out", "p.npz"]) == 2
    assert "error: --out: p.npz exists" in capsys.readouterr().err
    assert Path("p.npz").read_bytes() == b"taken"


def test_campaign_new_without_history_for_a_prediction_policy_says_so_first(tmp_path, capsys,
                                                                           monkeypatch):
    """The default policy predicts from a history: without one, the error names
    --history and the --policy way out (and no --factors option, which the command lacks),
    before asking for item names a history would also give."""
    monkeypatch.chdir(tmp_path)
    assert main(["campaign", "new", "c.npz", "--candidates", "a", "b"]) == 2
    err = capsys.readouterr().err
    assert ("jaxeval campaign: error: --history: policy 'pulse_ucb' predicts unseen items "
            "from models already scored; give --history, or a --policy without "
            "predictions: 'ucbe', 'sysrs' or 'uniform'") in err, err
    assert main(["campaign", "new", "c.npz", "--candidates", "a", "b", "--policy",
                 "ucbe"]) == 2
    assert "error: --items-file: give the benchmark's item names or a history" in \
        capsys.readouterr().err
    assert not (tmp_path / "c.npz").exists()


def test_anchors_predict_says_which_items_are_missing_or_from_another_extra_draw(
        predictor_file, tmp_path, capsys, monkeypatch):  # noqa: F811
    """The scores of `anchors items --extra` alone lack the anchors: the error says the
    missing ones are the anchor items. Scores of extra items given without --extra, or
    under another --extra-seed, are items of the benchmark: the error says which options
    must match the ones given to `anchors items`."""
    monkeypatch.chdir(tmp_path)
    pred = jaxeval.AnchorPredictor.load(predictor_file)
    anchors = pred.anchor_items.tolist()
    extra = np.asarray(pred.extra_items(4, seed=1)).astype(str).tolist()
    Path("extra.json").write_text(json.dumps({n: 1.0 for n in extra}))
    assert main(["anchors", "predict", str(predictor_file), "extra.json", "--extra", "4",
                 "--extra-seed", "1"]) == 2
    assert "scores (anchor items): no score for 3 item(s)" in capsys.readouterr().err
    Path("all.json").write_text(json.dumps({n: 1.0 for n in anchors + extra}))
    assert main(["anchors", "predict", str(predictor_file), "all.json"]) == 2
    assert ("that were not asked for, e.g. " in (err := capsys.readouterr().err)
            and "they are items of the benchmark: for extra items pass --extra M (and "
            "--extra-seed) as given to `jaxeval anchors items`" in err), err
    other = set(np.asarray(pred.extra_items(4, seed=2)).astype(str).tolist())
    assert other != set(extra)
    assert main(["anchors", "predict", str(predictor_file), "all.json", "--extra", "4",
                 "--extra-seed", "2"]) == 2
    assert ("they are items of the benchmark: pass the --extra M and --extra-seed given to "
            "`jaxeval anchors items`") in capsys.readouterr().err
    Path("alien.json").write_text(json.dumps({**{n: 1.0 for n in anchors}, "zz": 1.0}))
    assert main(["anchors", "predict", str(predictor_file), "alien.json"]) == 2
    err = capsys.readouterr().err
    assert "(give exactly the requested items)" in err and "items of the benchmark" not in err
    assert main(["anchors", "predict", str(predictor_file), "all.json", "--extra", "4",
                 "--extra-seed", "1"]) == 0
