"""A new user's walk through ``benchmarks/``: output paths prepared (and existing files
announced) before any work, bad values refused by option name before any work, short
``--replot`` errors, table headers and docstrings that say what they show.

Nothing is simulated, fitted, compiled or timed: the slow functions are recording fakes
(those of ``test_bench_tuning_identification_mutants`` and ``test_bench_anchors_mutants``
where they fit), and a refusal is checked to come before the first of them."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import test_bench_tuning_identification_mutants as tim
from test_bench_anchors import ba
from test_bench_anchors_mutants import _fake_run

import jaxeval

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_memory as bm  # noqa: E402
import bench_speed as bs  # noqa: E402
import bench_validity as bv  # noqa: E402

bi, bt = tim.bi, tim.bt
# the recording fakes of bench_tuning / bench_identification's tests, reused
sim, isim, plots = tim.sim, tim.isim, tim.plots


def _refused(capsys, main, argv, option):
    """``main(argv)`` is an argparse error (exit 2) naming ``option``; its message."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, (e.value.code, err)
    assert f"error: {option}" in err or f"error: argument {option}" in err, err
    return err


def _not_a_folder(tmp_path):
    """An output path whose folder is a regular file (no folder can be made there)."""
    (tmp_path / "afile").write_text("x")
    return str(tmp_path / "afile" / "x.json")


def _unwritable(monkeypatch, name):
    """Folders called ``name`` reported as unwritable (``jaxeval._data.cannot_write``)."""
    import jaxeval._data

    monkeypatch.setattr(jaxeval._data, "cannot_write",
                        lambda folder: "Permission denied" if Path(folder).name == name else None)


@pytest.fixture
def speed(monkeypatch):
    """``bench_speed``'s problem set-up (its first work) replaced by a recorder that stops
    the run."""
    calls = []

    def problem(*a, **kw):
        calls.append(kw)
        raise RuntimeError("work started")

    monkeypatch.setattr(bs, "speed_problem", problem)
    return calls


# --- 1. output paths prepared before any work --------------------------------------------


def test_missing_output_folders_are_created_before_the_work(isim, sim, tmp_path, capsys,
                                                            monkeypatch):
    out = tmp_path / "nodir" / "x.json"
    bi.main(["--datasets", "musr", "--reps", "3", "--policies", "ucbe", "--out", str(out)])
    assert json.loads(out.read_text())["curves"]
    out2 = tmp_path / "nodir2" / "deeper" / "t.json"
    bt.main(["--datasets", "ifeval", "--reps", "4", "--gap-bins", "0", "--out", str(out2)])
    assert json.loads(out2.read_text())["results"]
    # bench_anchors makes the --plot folder before the table, not only when drawing it
    seen = []
    monkeypatch.setattr(ba, "summary_table", lambda *a: seen.append(
        (tmp_path / "plots").is_dir()) or "table")
    monkeypatch.setattr(ba, "plot_table", lambda paths, out, se=None: out)
    ba.main(["--table", "x.jsonl", "--plot", str(tmp_path / "plots" / "p.png")])
    assert seen == [True]


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_identification_unwritable_outputs_refused_before_any_work(isim, tmp_path, capsys,
                                                                   option):
    argv = ["--datasets", "musr", "--reps", "3", "--out", str(tmp_path / "o.json"),
            option, _not_a_folder(tmp_path)]
    _refused(capsys, bi.main, argv, option)
    assert isim.calls == isim.loads == isim.fits == []


@pytest.mark.parametrize("option", ["--out", "--plot", "--gap-plot"])
def test_tuning_unwritable_outputs_refused_before_any_work(sim, tmp_path, capsys, monkeypatch,
                                                           option):
    argv = ["--datasets", "ifeval", "--reps", "4", "--out", str(tmp_path / "o.json"),
            option, str(tmp_path / "ro" / "x.png")]
    _unwritable(monkeypatch, "ro")
    _refused(capsys, bt.main, argv, option)
    assert sim.calls == sim.factors == []


def test_tuning_and_identification_replot_outputs_refused_before_reading(plots, tmp_path,
                                                                        capsys):
    res = tmp_path / "res.json"  # never read: the refusal comes first
    _refused(capsys, bt.main, ["--replot", str(res), "--plot", _not_a_folder(tmp_path)],
             "--plot")
    _refused(capsys, bi.main, ["--replot", str(res), "--plot", _not_a_folder(tmp_path)],
             "--plot")
    assert plots == []


def test_speed_unwritable_out_refused_before_the_timings(speed, tmp_path, capsys):
    _refused(capsys, bs.main, ["--out", _not_a_folder(tmp_path)], "--out")
    assert speed == []


def test_anchors_unwritable_outputs_refused_before_any_work(tmp_path, capsys, monkeypatch):
    calls = _fake_run(monkeypatch)
    monkeypatch.setattr(ba, "summary_table", lambda *a: calls.append("table") or "")
    _refused(capsys, ba.main, ["--table", "x.jsonl", "--plot", _not_a_folder(tmp_path)],
             "--plot")
    _refused(capsys, ba.main, ["--datasets", "oll2_musr", "--k", "20", "--methods", "auto",
                               "--out", _not_a_folder(tmp_path)], "--out")
    assert calls == []


@pytest.mark.parametrize("name", ["bench_top2", "bench_lam0", "bench_assignment",
                                  "bench_skip_separated", "bench_banditeval"])
def test_the_other_scripts_refuse_an_unwritable_out_before_loading(name, tmp_path, capsys,
                                                                   monkeypatch):
    mod = importlib.import_module(name)

    def no_load(*a, **k):
        raise AssertionError("data loaded before --out was checked")

    monkeypatch.setattr(jaxeval, "load", no_load)
    monkeypatch.setattr(bt, "load", no_load)
    monkeypatch.setattr(mod, "load", no_load, raising=False)
    _refused(capsys, mod.main, ["--out", _not_a_folder(tmp_path)], "--out")


def test_anchors_grid_refuses_an_unwritable_out_before_reading_it(tmp_path, capsys,
                                                                  monkeypatch):
    import anchors_grid as ag

    monkeypatch.setattr(ag, "read_cells", lambda *a: pytest.fail("--out read first"))
    _refused(capsys, ag.main, ["--out", _not_a_folder(tmp_path)], "--out")


# --- 2. an existing output is announced before the work ----------------------------------


def test_existing_outputs_are_announced_on_stderr_before_the_work(isim, speed, tmp_path,
                                                                  capsys, monkeypatch):
    out = tmp_path / "old.json"
    out.write_text("{}")
    isim.plan["ucbe"] = RuntimeError("work started")
    with pytest.raises(RuntimeError, match="work started"):
        bi.main(["--datasets", "musr", "--policies", "ucbe", "--out", str(out)])
    assert f"--out: {out} exists and will be replaced" in capsys.readouterr().err

    def stop(name):
        raise RuntimeError("work started")

    monkeypatch.setattr(bt, "load", stop)
    png = tmp_path / "old.png"
    png.write_bytes(b"")
    with pytest.raises(RuntimeError, match="work started"):
        bt.main(["--datasets", "ifeval", "--out", str(out), "--gap-plot", str(png)])
    err = capsys.readouterr().err
    assert f"--out: {out} exists and will be replaced" in err
    assert f"--gap-plot: {png} exists and will be replaced" in err
    with pytest.raises(RuntimeError, match="work started"):
        bs.main(["--out", str(out)])
    assert f"--out: {out} exists and will be replaced" in capsys.readouterr().err
    assert len(speed) == 1
    # a new file: nothing said
    with pytest.raises(RuntimeError, match="work started"):
        bs.main(["--out", str(tmp_path / "new.json")])
    assert "replaced" not in capsys.readouterr().err


def test_anchors_says_it_appends_to_an_existing_out(tmp_path, capsys, monkeypatch):
    out = tmp_path / "old.jsonl"
    out.write_text("")

    def stop(name):
        raise RuntimeError("work started")

    monkeypatch.setattr(ba, "load", stop)
    with pytest.raises(RuntimeError, match="work started"):
        ba.main(["--datasets", "oll2_musr", "--k", "20", "--out", str(out)])
    err = capsys.readouterr().err
    assert f"--out: appending to the existing file {out}" in err
    assert "replaced" not in err


# --- 3. bad values refused by option name before any work --------------------------------


@pytest.mark.parametrize("argv,option", [
    (["--reps", "0"], "--reps"), (["--K", "0"], "--K"), (["--K", "10", "1"], "--K"),
    (["--instances", "-1"], "--instances"), (["--policies", "pulse_ubc"], "--policies"),
])
def test_identification_bad_values_refused_before_any_work(isim, tmp_path, capsys, argv,
                                                           option):
    _refused(capsys, bi.main, ["--datasets", "musr", "--out", str(tmp_path / "o.json"),
                               *argv], option)
    assert isim.calls == isim.loads == isim.fits == []
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("argv,option", [
    (["--reps", "0"], "--reps"), (["--K", "1"], "--K"), (["--gap-bins", "-1"], "--gap-bins"),
    (["--instances", "0"], "--instances"), (["--reps", "0", "--sysrs-only"], "--reps"),
])
def test_tuning_bad_values_refused_before_any_work(sim, tmp_path, capsys, argv, option):
    _refused(capsys, bt.main, ["--datasets", "ifeval", "--out", str(tmp_path / "o.json"),
                               *argv], option)
    assert sim.calls == sim.factors == []


@pytest.fixture
def vwork(monkeypatch):
    """``bench_validity``'s loading, fitting and simulating replaced by recorders."""
    calls = []

    def work(*a, **kw):
        calls.append(a)
        raise AssertionError("work started")

    monkeypatch.setattr(bv, "load_source", work)
    monkeypatch.setattr(jaxeval, "fit_factorization", work)
    monkeypatch.setattr(jaxeval, "simulate_identification", work)
    return calls


@pytest.mark.parametrize("argv,option", [
    (["--reps", "-5"], "--reps"), (["--reps", "0"], "--reps"), (["--K", "1"], "--K"),
    (["--preds", "biasd"], "--preds"), (["--kinds", "eb", "bettin"], "--kinds"),
    (["--fracs", "0"], "--fracs"), (["--fracs", "0.1", "1.5"], "--fracs"),
    (["--alpha", "1.5"], "--alpha"), (["--alpha", "0"], "--alpha"),
    (["--chunk", "0"], "--chunk"), (["--policy", "pulse_ubc"], "--policy"),
])
def test_validity_bad_values_refused_before_any_work(vwork, capsys, argv, option):
    _refused(capsys, bv.main, ["--sources", "musr", "synthetic", *argv], option)
    assert vwork == []


@pytest.mark.parametrize("argv,option", [
    (["--ns", "0"], "--ns"), (["--ns", "1000", "-5"], "--ns"), (["--K", "1"], "--K"),
    (["--ns", "100", "--R", "2", "--calls", "5000"], "--calls"),
])
def test_memory_bad_values_refused_before_compiling(monkeypatch, capsys, argv, option):
    compiled = []
    monkeypatch.setattr(bm.idn, "dummy_data", lambda cfg: compiled.append(cfg) or 1 / 0)
    err = _refused(capsys, bm.main, argv, option)
    assert compiled == []
    if option == "--calls":
        assert "K*n = 1000" in err


def test_memory_budget_of_exactly_k_n_is_accepted(monkeypatch, capsys):
    compiled = []

    def stop(cfg):
        compiled.append(cfg)
        raise RuntimeError("work started")

    monkeypatch.setattr(bm.idn, "dummy_data", stop)
    with pytest.raises(RuntimeError, match="work started"):
        bm.main(["--ns", "100", "--R", "2", "--K", "10", "--calls", "1000"])
    assert len(compiled) == 1


@pytest.mark.parametrize("argv,option,names", [
    (["--k", "0"], "--k", None), (["--seeds", "0"], "--seeds", None),
    (["--methods", "random_maen"], "--methods", "random_mean"),
    (["--datasets", "oll2_msur"], "--datasets", "oll2_musr"),
])
def test_anchors_bad_values_refused_before_any_work(tmp_path, capsys, monkeypatch, argv,
                                                    option, names):
    calls = _fake_run(monkeypatch)
    err = _refused(capsys, ba.main, ["--datasets", "oll2_musr", "--k", "20", "--methods",
                                     "auto", "--out", str(tmp_path / "o.jsonl"), *argv], option)
    assert calls == []
    assert not (tmp_path / "o.jsonl").exists()
    if names:  # the valid names are listed
        assert names in err


# --- 4. and 5. --replot errors in one short line ------------------------------------------


def _png(tmp_path):
    png = tmp_path / "some.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 1900)  # ~480 KB
    return png


def test_replot_of_a_png_says_so_in_one_short_line(plots, tmp_path):
    png = _png(tmp_path)
    for main, argv in ((bi.main, ["--replot", str(png)]),
                       (bt.main, ["--replot", str(png), "--plot", str(tmp_path / "x.png")])):
        with pytest.raises(SystemExit) as e:
            main(argv)
        msg = str(e.value.code)
        assert msg.startswith(f"--replot: {png} is not a results file"), msg[:300]
        assert "UnicodeDecodeError" in msg and "\n" not in msg and len(msg) < 300, msg[:300]
    assert plots == []


def test_tuning_replot_gap_plot_without_bins_is_a_one_line_exit(plots, tmp_path):
    res = tmp_path / "res.json"
    res.write_text(json.dumps({
        "args": {"policies": ["ucbe"], "reps": 4},
        "results": {"ifeval/K10": {"by_gap": []}},
        "curves": {"ifeval/K10/ucbe": {}}}))
    with pytest.raises(SystemExit) as e:
        bt.main(["--replot", str(res), "--plot", str(tmp_path / "a.png"),
                 "--gap-plot", str(tmp_path / "b.png")])
    msg = str(e.value.code)
    assert msg.startswith("--replot: ") and "by_gap" in msg and "--gap-plot" in msg
    assert "--gap-bins > 0" in msg and "\n" not in msg
    assert plots == []  # refused before drawing either figure


# --- 6. table headers say what the bracketed figure is ------------------------------------


def test_identification_table_header_says_calls_to_95_and_90(capsys):
    bi.print_table({"musr/K10/ucbe": dict(calls_to_95=0.2, calls_to_90=0.1,
                                          median_gap=0.01)}, ["ucbe"])
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "| dataset | K | median gap | calls to 95% (90%): ucbe |"


# --- 7. one seed: no "± nan" ---------------------------------------------------------------


def test_anchors_table_of_a_one_seed_run_has_no_nan(tmp_path, capsys, monkeypatch):
    _fake_run(monkeypatch)
    out = tmp_path / "one.jsonl"
    ba.main(["--datasets", "oll2_musr", "--k", "20", "--methods", "random_ridge", "auto",
             "--seeds", "1", "--out", str(out)])
    capsys.readouterr()
    ba.main(["--table", str(out), "--sparseeval-from", str(tmp_path / "none.jsonl")])
    table = capsys.readouterr().out
    row = next(ln for ln in table.splitlines() if ln.startswith("| oll2_musr 20 |"))
    assert "nan" not in row
    assert row.startswith("| oll2_musr 20 | 2.17 / 0.56 | 2.00 | yes | random_ridge 1.00 |")


# --- 8. the docstring says what --rows spec runs ------------------------------------------


def test_anchors_docstring_describes_rows_spec_as_run():
    doc = ba.__doc__
    assert "the issue-8 rows (k in {20, 50, 100} as in SPEC 6.2), 5 seeds, cheap" not in doc
    lines = doc.splitlines()
    i = lines.index("    python benchmarks/bench_anchors.py --rows spec --seeds 5")
    said = " ".join(lines[i - 2:i])
    assert "ten SPEC 6.2 rows" in said and "MLP" in said and "--mlp never" in said
    assert "    python benchmarks/bench_anchors.py --rows spec --seeds 5 --mlp never" in lines

