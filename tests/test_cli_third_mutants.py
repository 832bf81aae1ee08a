"""Gaps a third mutation review of the command line (``jaxeval/_cli.py``) found: exit
codes, argument renaming, warnings in the command's voice, the JSON of ``campaign
status``, the ``datasets`` table, ``--quiet`` and the refusals' wording. Each test fails
on a plausible bug the rest of the suite let through."""

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_cli_deep_mutants import _campaign, _toy
from test_cli_mutants import predictor_file  # noqa: F401 (a fixture)

import jaxeval
from jaxeval import _cli as cli_module
from jaxeval._cli import main


# ------------------------------------------------------------------ campaign status --json
def test_campaign_status_json_gives_the_budget_and_the_reason(tmp_path, capsys, monkeypatch):
    """`campaign status --json` reports the budget given to `new` (not the calls spent)
    and the status' reason: empty while running, 'budget' once it is spent."""
    _campaign(tmp_path, monkeypatch, "--batch-size", "2", "--budget", "4")
    Path("a.json").write_text("[1, 0]")
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "0"]) == 0
    capsys.readouterr()
    assert main(["campaign", "status", "c.npz", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["calls"], st["budget"], st["done"], st["reason"]) == (2, 4, False, "")
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "1"]) == 0
    capsys.readouterr()
    assert main(["campaign", "status", "c.npz", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["calls"], st["budget"], st["done"], st["reason"]) == (4, 4, True, "budget")


# ------------------------------------------------------------------ argument renaming
def test_campaign_new_lam0_learned_refusal_names_the_flag(tmp_path, capsys, monkeypatch):
    """The library's ``lam0='learned': ...`` reads as ``--lam0='learned': ...``."""
    monkeypatch.chdir(tmp_path)
    Path("items.txt").write_text("q0\nq1\nq2\n")
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates", "a",
                 "b", "--policy", "ucbe", "--lam0", "learned"]) == 2
    err = capsys.readouterr().err
    assert "jaxeval campaign: error: --lam0='learned': policy 'ucbe' does not use " \
        "predictions" in err, err
    assert not Path("c.npz").exists()


def test_unreadable_json_files_name_the_command_argument(predictor_file, tmp_path,  # noqa: F811
                                                         capsys, monkeypatch):
    """A missing answers / scores file is refused under the argument's name, in one line
    (exit code 2), and the campaign is left as it was."""
    _campaign(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main(["campaign", "tell", "c.npz", "nofile.json", "--step", "0"]) == 2
    assert "jaxeval campaign: error: answers: cannot read nofile.json as JSON" in \
        capsys.readouterr().err
    assert jaxeval.IdentificationCampaign.load("c.npz").calls == 0
    assert main(["anchors", "predict", str(predictor_file), "nofile.json"]) == 2
    assert "jaxeval anchors: error: scores: cannot read nofile.json as JSON" in \
        capsys.readouterr().err


def test_data_of_the_wrong_type_is_a_one_line_error(tmp_path, capsys):
    """A loader's TypeError (scores stored as text) is a refusal like a ValueError: one
    line naming the file, exit code 2, no predictor written."""
    bad = tmp_path / "text.npz"
    np.savez(bad, scores=np.array([["a", "b"], ["c", "d"]]))
    assert main(["anchors", "fit", str(bad), "--k", "1", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err == (f"jaxeval anchors: error: {bad}: field 'scores' must be real numbers, "
                   "got dtype <U1\n"), err
    assert not (tmp_path / "p.npz").exists()


# ------------------------------------------------------------------ campaign new race
def test_campaign_new_rechecks_the_name_under_the_lock(tmp_path, capsys, monkeypatch):
    """Two `new`s racing for one name: a campaign file that appears while this one was
    being built is refused under the lock, never replaced."""
    _campaign(tmp_path, monkeypatch)  # the other process's campaign, answers and all
    Path("a.json").write_text("[1]")
    assert main(["campaign", "tell", "c.npz", "a.json", "--step", "0"]) == 0
    before = Path("c.npz").read_bytes()
    Path("c.npz").rename("theirs.npz")
    real = cli_module._new_campaign

    def racing(args):  # the other `new` saves its file while this one builds its own
        camp = real(args)
        Path("theirs.npz").rename("c.npz")
        return camp

    monkeypatch.setattr(cli_module, "_new_campaign", racing)
    capsys.readouterr()
    assert main(["campaign", "new", "c.npz", "--items-file", "items.txt", "--candidates", "a",
                 "b", "--policy", "ucbe"]) == 2
    assert "error: file: c.npz exists (a campaign's answers live there)" in \
        capsys.readouterr().err
    assert Path("c.npz").read_bytes() == before


# ------------------------------------------------------------------ warnings
_OURS = str(Path(cli_module.__file__).resolve().parent / "_study.py")  # a package file


def test_show_warning_names_the_category_and_whose_warning_it_is(capsys):
    """Only a plain UserWarning reads 'warning'; a subclass keeps its name. A warning
    from the installed package is jaxeval's own; one from a file in a folder merely named
    like jaxeval (a checkout holding its virtual environment) is another library's."""
    class FooWarning(UserWarning):
        pass

    cli_module._show_warning("careful", FooWarning, "/x/site-packages/foo/y.py", 1)
    assert capsys.readouterr().err == "jaxeval: FooWarning (from y.py): careful\n"
    cli_module._show_warning("careful", UserWarning,
                             "/home/u/jaxeval-venv/lib/site-packages/jax/_src/y.py", 1)
    assert capsys.readouterr().err == "jaxeval: warning (from y.py): careful\n"
    cli_module._show_warning("careful", UserWarning,
                             "/home/u/jaxeval/.venv/lib/site-packages/jax/_src/y.py", 1)
    assert capsys.readouterr().err == "jaxeval: warning (from y.py): careful\n"
    cli_module._show_warning("careful", UserWarning, _OURS, 1)
    assert capsys.readouterr().err == "jaxeval: warning: careful\n"


def test_show_warning_writes_to_the_file_given_and_survives_a_broken_one(capsys):
    """As ``warnings.showwarning``: a ``file`` argument is written to instead of stderr;
    one that cannot be written to (a closed stderr) is passed over without an error."""
    buf = io.StringIO()
    cli_module._show_warning("careful", UserWarning, _OURS, 1, file=buf)
    assert buf.getvalue() == "jaxeval: warning: careful\n"
    assert capsys.readouterr().err == ""

    class Broken(io.StringIO):
        def write(self, s):
            raise OSError(9, "Bad file descriptor")

    with warnings.catch_warnings():
        cli_module._show_warning("careful", UserWarning, _OURS, 1,
                                 file=Broken())


# ------------------------------------------------------------------ datasets
def test_datasets_table_gives_the_unique_rows_and_min_median_max(capsys):
    """The text table's counts are of the unique models (as its title says) and its
    accuracies read min / median / max, as in the JSON."""
    assert main(["datasets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert main(["datasets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    seen = 0
    for line in lines:
        f = line.split()
        if f and f[0] in rows:
            r = rows[f[0]]
            assert (int(f[1]), int(f[2])) == (r["unique_models"], r["items"]), line
            assert [float(f[3]), float(f[5]), float(f[7])] == pytest.approx(
                [r["accuracy_min"], r["accuracy_median"], r["accuracy_max"]], abs=6e-4), line
            assert float(f[8]) == pytest.approx(r["top2_gap"], abs=6e-5), line
            seen += 1
    assert seen == len(rows)


# ------------------------------------------------------------------ --quiet, reports
def test_run_quiet_prints_no_progress(tmp_path, capsys, monkeypatch):
    p = _toy(tmp_path, monkeypatch)
    assert main(["run", str(p), "--out", str(tmp_path / "a"), "--no-report"]) == 0
    assert capsys.readouterr().err != ""  # the progress lines --quiet leaves out
    assert main(["run", str(p), "--out", str(tmp_path / "b"), "--quiet", "--no-report"]) == 0
    assert capsys.readouterr().err == ""


def test_main_quiet_runs_the_studies_without_progress(tmp_path, capsys, monkeypatch):
    """`jaxeval main --quiet` hands progress=False to both studies' runs."""
    import jaxeval._study as study

    seen = []
    monkeypatch.setattr(study, "run_study",
                        lambda s, folder, progress=True, **k: seen.append(progress))
    monkeypatch.setattr(cli_module, "_report", lambda *a, **k: None)
    monkeypatch.setattr(cli_module, "_cmd_datasets", lambda args: 0)
    assert main(["main", "--out", str(tmp_path / "o"), "--quick", "--quiet"]) == 0
    assert main(["main", "--out", str(tmp_path / "o"), "--quick"]) == 0
    assert seen == [False, False, True, True]


def test_plot_of_a_study_without_figures_says_so_on_stderr(tmp_path, capsys, monkeypatch):
    """A replicates study has nothing to draw: stdout (the list of PNGs) stays empty, the
    explanation goes to stderr, exit code 0."""
    p = _toy(tmp_path, monkeypatch)
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 0
    capsys.readouterr()
    assert main(["plot", str(out)]) == 0
    res = capsys.readouterr()
    assert res.out.strip() == ""
    assert "nothing to plot for a replicates study" in res.err


def test_quiet_report_lists_no_plots(tmp_path, capsys, monkeypatch):
    """`_report(quiet=True)` (what `jaxeval main` uses before its own listing) prints
    neither the summary nor the plots; without quiet both are printed."""
    import jaxeval._report as report

    p = _toy(tmp_path, monkeypatch)
    out = tmp_path / "o"
    assert main(["run", str(p), "--out", str(out), "--quiet", "--no-report"]) == 0
    monkeypatch.setattr(report, "plot_study", lambda summary, folder: [Path(folder) / "f.png"])
    capsys.readouterr()
    assert cli_module._report(out, quiet=True) is not None
    assert capsys.readouterr().out == ""
    assert cli_module._report(out) is not None
    assert "plots: " in capsys.readouterr().out



def test_anchors_predict_a_bad_extra_score_names_the_file_and_the_range(
        predictor_file, tmp_path, capsys, monkeypatch):  # noqa: F811
    """An extra item's score of 2.0: the error names the command's scores file and says
    the scores must lie in [0, 1] (it named predict_unbiased's extra_scores and reported
    the right shape as the fault)."""
    monkeypatch.chdir(tmp_path)
    pred = jaxeval.AnchorPredictor.load(predictor_file)
    extra = np.asarray(pred.extra_items(2, seed=0)).astype(str).tolist()
    scores = {**{n: 1.0 for n in pred.anchor_items.tolist()}, extra[0]: 2.0, extra[1]: 0.0}
    Path("s.json").write_text(json.dumps(scores))
    assert main(["anchors", "predict", str(predictor_file), "s.json", "--extra", "2"]) == 2
    assert ("jaxeval anchors: error: scores (s.json) (extra items): scores must lie in "
            "[0, 1], got 0.0..2.0") in capsys.readouterr().err
