"""Gaps a fourth mutation review of the command line (``jaxeval/_cli.py``) found: ``extend
--no-run`` (its messages, the same command again), the study folder named by a write
failure or Ctrl-C in ``extend`` / ``resume``, ``merge``'s line (counts per task, the list
of missing units), ``anchors predict`` of tables by file kind, the loading options refused
for the wrong kind of file, the loaders' advice in the command's flags, and the report's
warnings. Each test fails on a plausible bug the rest of the suite let through."""

import errno
import gzip
import json

import numpy as np
import pytest
from test_anchor_api_mutants import _by_hand
from test_anchor_predict_lm_eval import _lines, _lm_eval_run, _numbered
from test_data_mutants import _samples
from test_study import TESTS, toy_config

import jaxeval._report as rep
import jaxeval._study as st
from jaxeval import _cli as cli_module
from jaxeval._cli import cli, main
from jaxeval._study import extend_study, run_study, study_from_dict, study_status


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def _folder(out, n=16):
    """A finished toy study (replicates, chunks of 8) in ``out``."""
    run_study(study_from_dict(toy_config(n_replicates=n, chunk_size=8)), out, progress=False)
    return out


def _too_large(path, arrays):
    raise OSError(errno.EFBIG, "File too large")  # (a write that names no file)


# ------------------------------------------------------------------ extend
def test_extend_no_run_says_nothing_is_computed_and_can_be_given_again(tmp_path, capsys):
    """--no-run does not announce a computation; the same command again (a job script
    run twice) keeps the size and computes nothing, instead of refusing it."""
    out = _folder(tmp_path / "a")
    assert main(["extend", str(out), "--to", "24", "--no-run"]) == 0
    err = capsys.readouterr().err
    assert f"[jaxeval] {out}: the study now has 24 units (it had 16)\n" in err
    assert "computing" not in err
    assert main(["extend", str(out), "--to", "24", "--no-run"]) == 0
    err = capsys.readouterr().err
    assert err == (f"[jaxeval] {out}: the study already has 24 units; nothing to do "
                   "(--no-run)\n")  # (not "continuing it", then "nothing computed")
    s = study_status(out)
    assert s["units"] == 24 and s["done"] == {"replicates": 16}


@pytest.mark.parametrize("command", ["extend", "resume"])
def test_a_write_failure_in_extend_or_resume_names_the_study_folder(tmp_path, capsys,
                                                                   monkeypatch, command):
    out = _folder(tmp_path / "a")
    if command == "resume":
        extend_study(out, 24)
    monkeypatch.setattr(st, "_write_chunk", _too_large)
    argv = (["extend", str(out), "--to", "24"] if command == "extend" else
            ["resume", str(out)])
    assert main([*argv, "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"jaxeval {command}: error: File too large (writing in {out}); the finished chunks "
        f"are kept: `jaxeval resume {out}` continues the study")


def test_ctrl_c_in_extend_names_the_folder_quoted_for_the_shell(tmp_path, capsys,
                                                               monkeypatch):
    import signal

    killed = []
    monkeypatch.setattr(cli_module.os, "kill", lambda pid, sig: killed.append(sig))
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    out = _folder(tmp_path / "my runs" / "a")

    def interrupted(path, arrays):
        raise KeyboardInterrupt

    monkeypatch.setattr(st, "_write_chunk", interrupted)
    assert cli(["extend", str(out), "--to", "24", "--quiet"]) == 130
    assert capsys.readouterr().err == (
        f"jaxeval: interrupted; the finished chunks are kept in {out}: `jaxeval resume "
        f"'{out}'` continues the study\n")
    assert killed == [signal.SIGINT]


# ------------------------------------------------------------------ merge
def test_merge_lists_at_most_five_missing_spans(tmp_path, capsys):
    study = study_from_dict(toy_config(n_replicates=104, chunk_size=8))
    parts = []
    for lo in range(0, 96, 16):  # 0:8, 16:24, ..., 80:88
        parts.append(str(tmp_path / f"p{lo}"))
        run_study(study, parts[-1], replicate_range=(lo, lo + 8), progress=False)
    five, six = str(tmp_path / "m5"), str(tmp_path / "m6")
    assert main(["merge", *parts[:5], "--out", five]) == 0
    assert capsys.readouterr().out.rstrip() == (
        f"merged 5 folders into {five}: 40 of 104 units (incomplete: units 8:16, 24:32, "
        f"40:48, 56:64, 72:104 missing; `jaxeval resume {five}` computes them, or merge "
        "their folders too)")
    assert main(["merge", *parts, "--out", six]) == 0
    assert capsys.readouterr().out.rstrip() == (
        f"merged 6 folders into {six}: 48 of 104 units (incomplete: units 8:16, 24:32, "
        f"40:48, 56:64, 72:80, ... missing; `jaxeval resume {six}` computes them, or merge "
        "their folders too)")


def test_merge_counts_units_per_task(tmp_path, capsys):
    """Tasks with the same count: one number 'per task'; different counts: each task's."""
    from jaxeval._study import MANIFEST_FILE

    study = study_from_dict({"kind": "identification", "n_replicates": 8, "chunk_size": 4,
                             "lanes": 4, "data": {"synthetic": {"n_items": 30}},
                             "policies": ["uniform", "ucbe"]})
    a, b = tmp_path / "a", tmp_path / "b"
    run_study(study, a, replicate_range=(0, 4), progress=False)
    run_study(study, b, replicate_range=(4, 8), progress=False)
    m = tmp_path / "m"
    assert main(["merge", str(a), "--out", str(m)]) == 0
    assert capsys.readouterr().out.startswith(
        f"merged 1 folder into {m}: 4 of 8 units per task (incomplete: units 4:8 missing")
    # as if b's run was killed after its first task: ucbe has no chunk there
    man = json.loads((b / MANIFEST_FILE).read_text())
    man["chunks"] = {k: v for k, v in man["chunks"].items() if v["task"] == "uniform"}
    man["complete"] = False
    (b / MANIFEST_FILE).write_text(json.dumps(man))
    m2 = tmp_path / "m2"
    assert main(["merge", str(a), str(b), "--out", str(m2)]) == 0
    assert capsys.readouterr().out.startswith(
        f"merged 2 folders into {m2}: units done of 8: uniform 8, ucbe 4 (incomplete: units "
        "4:8 missing")


# ------------------------------------------------------------------ anchors predict: tables
def _wide(path, sep=","):
    """Models a (anchor q2) and b (anchors q5, q7) of the hand-made predictor's items."""
    rows = ["model" + sep + sep.join(f"q{j}" for j in range(10))]
    for name, ones in (("a", {2}), ("b", {5, 7})):
        rows.append(name + sep + sep.join("1" if j in ones else "0" for j in range(10)))
    path.write_text("\n".join(rows) + "\n")
    return path


def _estimates(capsys):
    return {d["model"]: round(d["estimate"], 6) for d in _lines(capsys)}


@pytest.mark.parametrize("name", ["new.tsv", "NEW.CSV"])
def test_predict_reads_a_tsv_or_upper_case_csv_table(tmp_path, capsys, name):
    p = _by_hand().save(tmp_path / "p.npz")
    t = _wide(tmp_path / name, "\t" if name.endswith(".tsv") else ",")
    assert main(["anchors", "predict", str(p), str(t)]) == 0
    assert _estimates(capsys) == {"a": 0.6, "b": 0.8}


def test_predict_reads_a_gzipped_samples_file(tmp_path, capsys):
    p = _numbered().save(tmp_path / "p.npz")
    plain = _lm_eval_run(tmp_path / "runs", "gamma", {5, 7})
    gz = plain.with_name(plain.name + ".gz")
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    assert main(["anchors", "predict", str(p), str(gz)]) == 0
    assert _estimates(capsys) == {"gamma": 0.8}


def test_predict_from_stdin_where_a_folder_is_named_dash(tmp_path, capsys, monkeypatch):
    """'-' is stdin (one model's JSON), even in a directory holding a folder named '-'."""
    import io

    p = _by_hand().save(tmp_path / "p.npz")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").mkdir()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"q2": 1, "q5": 0, "q7": 0})))
    assert main(["anchors", "predict", str(p), "-"]) == 0
    assert json.loads(capsys.readouterr().out)["estimate"] == pytest.approx(0.6)


def _dup_npz(path):
    s = np.zeros((2, 10))
    s[0, 2] = s[1, 5] = s[1, 7] = 1
    with open(path, "wb") as fh:  # (np.savez of a name would append .npz to "DUP.NPZ")
        np.savez(fh, scores=s, models=np.array(["m", "m"]),
                 items=np.array([f"q{j}" for j in range(10)]))
    return path


def test_predict_passes_duplicate_names_to_the_table(tmp_path, capsys):
    p = _by_hand().save(tmp_path / "p.npz")
    t = _dup_npz(tmp_path / "dup.npz")
    assert main(["anchors", "predict", str(p), str(t)]) == 2
    # the loader's advice in the command's own flag
    assert "pass --duplicate-names rename" in capsys.readouterr().err
    assert main(["anchors", "predict", str(p), str(t), "--duplicate-names", "rename"]) == 0
    assert _estimates(capsys) == {"m": 0.6, "m#2": 0.8}


def test_predict_of_a_table_missing_some_anchors_names_them_without_the_layout_hint(
        tmp_path, capsys):
    p = _by_hand().save(tmp_path / "p.npz")
    t = tmp_path / "t.csv"
    t.write_text("model,q2,q5\nm,1,0\n")
    assert main(["anchors", "predict", str(p), str(t)]) == 2
    err = capsys.readouterr().err
    assert f"jaxeval anchors: error: scores ({t}): no column for 1 of the 3 anchor items, " \
           "e.g. ['q7']" in err
    assert "a table holds one row per model" not in err


# ------------------------------------------------------------------ loading options
@pytest.mark.parametrize("sep", ["tab", "\\t"])
def test_sep_tab_spelled_out_is_a_tab(tmp_path, capsys, sep):
    p = _by_hand().save(tmp_path / "p.npz")
    t = _wide(tmp_path / "t.csv", "\t")
    assert main(["anchors", "predict", str(p), str(t), "--sep", sep]) == 0
    assert _estimates(capsys) == {"a": 0.6, "b": 0.8}


def test_sep_forms_and_file_kinds(tmp_path, capsys):
    p = _by_hand().save(tmp_path / "p.npz")
    t = _wide(tmp_path / "T.CSV", ";")
    assert main(["anchors", "predict", str(p), str(t), "--sep", ";"]) == 0
    assert _estimates(capsys) == {"a": 0.6, "b": 0.8}
    assert main(["anchors", "predict", str(p), str(t), "--sep", ""]) == 2
    assert "--sep: expected one character (or '\\t' for a tab), got ''" in \
        capsys.readouterr().err


def test_duplicate_names_takes_an_upper_case_npz(tmp_path, capsys):
    p = _by_hand().save(tmp_path / "p.npz")
    t = _dup_npz(tmp_path / "DUP.NPZ")
    assert main(["anchors", "predict", str(p), str(t), "--duplicate-names", "rename"]) == 0
    assert _estimates(capsys) == {"m": 0.6, "m#2": 0.8}


def test_filter_advice_names_the_flag(tmp_path, capsys):
    p = _numbered().save(tmp_path / "p.npz")
    rows = [{"doc_id": j, "filter": f, "acc": float(j == 2)} for j in range(10)
            for f in ("strict", "loose")]
    runs = tmp_path / "runs"
    _samples(runs / "m", "task", rows)
    assert main(["anchors", "predict", str(p), str(runs)]) == 2
    assert "pass --filter NAME (or TASK=NAME for that task alone) to choose one" in \
        capsys.readouterr().err
    assert main(["anchors", "predict", str(p), str(runs), "--filter", "nope"]) == 2
    assert "name the task: --filter TASK=NAME" in capsys.readouterr().err
    assert main(["anchors", "predict", str(p), str(runs), "--filter", "strict"]) == 0
    assert _estimates(capsys) == {"m": 0.6}


# ------------------------------------------------------------------ errors and the report
def test_a_write_failure_before_the_folder_holds_a_study_does_not_offer_resume(
        tmp_path, capsys, monkeypatch):
    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(st, "run_study", no_space)
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps(toy_config()))
    out = tmp_path / "o"
    assert main(["run", str(cfg), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"jaxeval run: error: No space left on device (writing in {out})\n")


def test_a_write_failure_naming_its_file_is_reported_as_it_is(tmp_path, capsys, monkeypatch):
    """Only an error naming no file is attributed to the study folder."""
    bad = tmp_path / "o" / "chunks" / "x.npz"

    def denied(path, arrays):
        raise OSError(errno.EACCES, "Permission denied", str(bad))

    monkeypatch.setattr(st, "_write_chunk", denied)
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps(toy_config()))
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "(writing in" not in err


def test_a_summary_that_cannot_be_written_names_its_file_and_the_plots_are_still_drawn(
        tmp_path, capsys, monkeypatch):
    out = _folder(tmp_path / "a")
    target = out / "summary.json"

    def no_space(summary, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    drawn = []

    def plots(summary, folder):
        drawn.append(folder)
        return [folder / "fig.png"]

    monkeypatch.setattr(rep, "write_summary", no_space)
    monkeypatch.setattr(rep, "plot_study", plots)
    assert cli_module._report(out) is not None
    cap = capsys.readouterr()
    assert (f"jaxeval: warning: {target} not written (No space left on device: {target}); "
            "the study is complete") in cap.err
    assert drawn == [out / "plots"]
    assert f"plots: {out / 'plots' / 'fig.png'}" in cap.out
