"""A mutation review of the table-building code of ``benchmarks/bench_anchors.py``: the
coverage band, the per-seed MAE readers, ``auto`` against the faithful SparseEval, the
merge of several results files, the summary and before/after tables, ``same_run`` and
how ``main`` writes and reads its JSON-lines records. Every figure is checked against a
value worked out by hand from small hand-made records."""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
from test_bench_anchors import _rec, _write, ba


def _cell(dataset, k, methods, mae, seeds=(42, 43), **kw):
    """A record as ``main`` writes it, with per-seed ``mae`` rows (other fields: ``kw``)."""
    r = _rec(methods, [0.0] * len(methods), seeds=seeds, k=k)  # tau-b 0.5, coverage 0.9
    r.update(dataset=dataset, mae_pp=[list(v) for v in mae], **kw)
    return r


def _grid(dataset, k, maes: dict, other=None):
    """An ``anchors_grid.py`` record: the faithful SparseEval's per-seed MAEs ``maes``."""
    res = {"sparseeval": {"mae_pp": list(maes.values())}}
    if other is not None:
        res["sparseeval_ridge"] = {"mae_pp": other}
    return {"dataset": dataset, "k": k, "seeds": list(maes), "results": res}


def _row(table, start):
    rows = [line for line in table.splitlines() if line.startswith(start)]
    assert len(rows) == 1, (start, table)
    return rows[0]


# --- the binomial band of a 90% interval's coverage -----------------------------------

# Beta-binomial by hand: r = ceil(0.9 (n_cal + 1)), mean r / (n_cal + 1),
# var = [Var Beta + (mu (1 - mu) - Var Beta) / n_test] / n_seeds
@pytest.mark.parametrize("extra, n_test, n_models, want", [
    ({}, 20, 100, (19 / 21, 0.0633612)),  # n_cal = n_test = 20: r = 19
    ({"auto_choice": "cv"}, 20, 98, (69 / 76, 0.0510529)),  # n_cal = 5 * (78 // 5) = 75
    ({"auto_calibration": "validation halves"}, 21, 100, (19 / 21, 0.0625837)),  # 2 * 10
    ({}, 21, 100, (10 / 11, 0.0606531)),  # n_cal = 21: r = 20
])
def test_coverage_band_by_calibration_count(extra, n_test, n_models, want):
    r = dict(_rec(["auto"], [1.0]), n_test=n_test, n_models=n_models, **extra)
    assert ba._coverage_band(r) == pytest.approx(want, rel=1e-5)
    one = dict(r, seeds=[42])  # the sd of one seed's coverage: sqrt(2) times that of two
    assert ba._coverage_band(one)[1] == pytest.approx(want[1] * np.sqrt(2), rel=1e-5)


# --- per-seed MAE readers -------------------------------------------------------------

def test_sparseeval_seeds_read_grid_and_own_records_later_winning(tmp_path):
    g1 = _write(tmp_path / "g1.jsonl", _grid("mb_toy", 100, {42: 1.0, 43: 2.0}, other=[9, 9]),
                _cell("mb_toy", 20, ["random_ridge", "sparseeval", "auto"],
                      [[5, 5], [3.0, 4.0], [1, 1]]),
                _cell("mb_toy", 50, ["random_ridge", "auto"], [[5, 5], [1, 1]]))
    g2 = _write(tmp_path / "g2.jsonl", _grid("mb_toy", 100, {43: 5.0, 44: 6.0}))
    # one file given as a str; a missing file is skipped
    assert ba._sparseeval_seeds(str(g1)) == {("mb_toy", 100): {42: 1.0, 43: 2.0},
                                             ("mb_toy", 20): {42: 3.0, 43: 4.0}}
    got = ba._sparseeval_seeds([str(g1), str(tmp_path / "absent.jsonl"), str(g2)])
    assert got[("mb_toy", 100)] == {42: 1.0, 43: 5.0, 44: 6.0}  # the later file wins seed 43
    assert ("mb_toy", 50) not in got


def test_auto_seeds_take_autos_column_and_a_missing_file_is_an_error(tmp_path):
    f = _write(tmp_path / "a.jsonl",
               dict(_cell("mb_toy", 100, ["auto", "random_ridge"], [[1.0, 2.0], [3.0, 4.0]]),
                    coverage=[[0.7, 0.8], [0.9, 0.9]]),
               _cell("mb_toy", 20, ["random_ridge"], [[3.0, 4.0]]))
    assert ba._auto_seeds([str(f)]) == {("mb_toy", 100): {42: 1.0, 43: 2.0}}
    with pytest.raises(FileNotFoundError):
        ba._auto_seeds([str(tmp_path / "absent.jsonl")])


# --- auto against the faithful SparseEval, paired by seed -----------------------------

def _versus_files(tmp_path):
    auto = _write(tmp_path / "auto.jsonl", *[
        _cell(d, k, ["auto", "random_ridge"], [v, [9.0] * len(v)], seeds=s) for d, k, s, v in (
            ("mb_toy", 100, (42, 43, 44, 46), (1.0, 2.0, 3.0, 9.0)),
            ("mb_toy", 20, (42, 43, 44), (2.0, 2.5, 3.3)),
            ("mb_toyc", 50, (42, 43), (1.0, 2.0)),
            ("mb_toyd", 100, (42, 43, 44), (1.5, 2.0, 3.0)),
            ("mb_toye", 100, (42,), (1.0,)),
            ("mb_only", 100, (42, 43), (1.0, 2.0)))])
    grid = _write(tmp_path / "grid.jsonl",
                  _grid("mb_toy", 100, {45: 7.0, 42: 1.5, 43: 1.5, 44: 3.0}),
                  _grid("mb_toy", 20, {42: 1.0, 43: 1.0, 44: 1.0}),
                  _grid("mb_toyc", 50, {42: 2.0, 43: 3.0}),
                  _grid("mb_toyd", 100, {42: 1.0, 43: 1.0, 44: 1.0}),
                  _grid("mb_toye", 100, {42: 2.0}),
                  _grid("mb_grid_only", 100, {42: 2.0, 43: 2.0}))
    return auto, grid


def test_versus_sparseeval_pairs_seeds_and_counts_cells(tmp_path):
    auto, grid = _versus_files(tmp_path)
    t = ba.versus_sparseeval([str(auto)], [str(grid)])
    # d = auto - SparseEval on the shared seeds 42-44: (-0.5, 0.5, 0): mean 0, sd 0.5
    assert _row(t, "| mb_toy 100 |") == ("| mb_toy 100 | 42–44 (3) | 2.000 | 2.000 | "
                                          "+0.000 ± 0.289 | 1 of 3 | 0.50 |")
    # d = (1, 1.5, 2.3): sd sqrt(0.43), se 0.3786, t = 4.226 on 2 df: p = 0.0258
    assert _row(t, "| mb_toy 20 |") == ("| mb_toy 20 | 42–44 (3) | 2.600 | 1.000 | "
                                         "+1.600 ± 0.379 | 0 of 3 | 0.03 |")
    # d = (-1, -1): no spread, auto certainly not worse
    assert _row(t, "| mb_toyc 50 |") == ("| mb_toyc 50 | 42–43 (2) | 1.500 | 2.500 | "
                                          "-1.000 ± 0.000 | 2 of 2 | 1.00 |")
    # d = (0.5, 1, 2): t = sqrt(7) on 2 df: p = (1 - sqrt(7) / 3) / 2 = 0.059
    assert _row(t, "| mb_toyd 100 |") == ("| mb_toyd 100 | 42–44 (3) | 2.167 | 1.000 | "
                                           "+1.167 ± 0.441 | 0 of 3 | 0.06 |")
    assert "mb_toye" not in t and "mb_only" not in t and "mb_grid_only" not in t  # < 2 seeds
    assert t.endswith("`auto`'s mean MAE ≤ the faithful SparseEval's on 2 of 4 cells; "
                      "significantly worse (one-sided paired t, p < 0.05) on 1 of 4.")


def test_versus_sparseeval_p_value_matches_the_t_distribution(tmp_path):
    stats = pytest.importorskip("scipy.stats")
    auto, grid = _versus_files(tmp_path)
    t = ba.versus_sparseeval([str(auto)], [str(grid)])
    d = np.array([1.0, 1.5, 2.3])
    p = stats.t.sf(d.mean() / (d.std(ddof=1) / np.sqrt(3)), 2)
    assert p == pytest.approx(0.5 * (1 - 4.22617 / np.sqrt(4.22617 ** 2 + 2)), rel=1e-4)
    assert _row(t, "| mb_toy 20 |").endswith(f"| {p:.2f} |")


# --- merging several results files ----------------------------------------------------

def test_merged_width_stays_aligned_with_the_methods(tmp_path):
    full = dict(_cell("mb_toy", 100, ["random_ridge", "auto"], [[2, 2], [1, 1]]),
                width=[[0.05, 0.05], [0.06, 0.06]])
    again = dict(_cell("mb_toy", 100, ["auto"], [[0.5, 0.5]]), width=[[0.07, 0.08]])
    r = ba.merged_records([_write(tmp_path / "a.jsonl", full), _write(tmp_path / "b.jsonl",
                                                                       again)])
    r = r[("mb_toy", 100)]
    assert r["methods"] == ["random_ridge", "auto"]
    assert r["width"] == [[0.05, 0.05], [0.07, 0.08]]
    assert r["mae_pp"] == [[2, 2], [0.5, 0.5]]


def test_merge_refuses_more_seeds_and_names_both_files(tmp_path):
    a = _write(tmp_path / "a.jsonl", _cell("mb_toy", 100, ["auto"], [[1, 1]]))
    b = _write(tmp_path / "b.jsonl", _cell("mb_toy", 100, ["auto"], [[1, 1, 1]],
                                           seeds=(42, 43, 44)))
    with pytest.raises(ValueError, match=r"b\.jsonl:1 has seeds \[42, 43, 44\].*a\.jsonl:1.*"
                                         r"\[42, 43\]"):
        ba.merged_records([a, b])


# --- the summary table ----------------------------------------------------------------

def _summary_files(tmp_path):
    s1 = _cell("oll2_musr", 20, ["random_mean", "random_ridge", "greedy_ridge", "auto"],
               [[3.0, 3.0], [2.5, 2.7], [1.5, 1.7], [1.75, 2.25]],
               tau_b=[[0.6, 0.6], [0.702, 0.75], [0.9, 0.9], [0.702, 0.75]],
               coverage=[[0.9, 0.9]] * 3 + [[0.80, 0.81]], spec_best=[2.0, 0.73],
               n_test=20, n_models=100,
               dr={"mae_pp": [1.0, 2.0], "coverage": [0.9, 0.8], "width": [0.1, 0.2]})
    s2 = dict(_cell("mb_toy", 100, ["sparseeval", "auto"], [[3.0, 3.0], [1.0, 1.0]]),
              coverage=[[0.9, 0.9], [0.5, 0.5]])
    s3 = _cell("mb_toy", 50, ["auto"], [[1.0, 1.0]])
    res = _write(tmp_path / "r.jsonl", s1, s2, s3)
    grid = _write(tmp_path / "grid.jsonl", _grid("oll2_musr", 20, {42: 2.0, 43: 3.0, 44: 10.0}),
                  _grid("mb_toy", 100, {42: 9.0, 43: 9.0}), _grid("mb_toy", 50, {42: 9.0}))
    return res, grid


def test_summary_table_figures(tmp_path):
    res, grid = _summary_files(tmp_path)
    t = ba.summary_table([res], [str(grid)])
    # auto's mean equals the SPEC best (at or below: met); its tau-b ties the best baseline
    # (random_ridge; greedy_ridge is no baseline) and rounds to the SPEC tau; coverage
    # 0.805 is 0.100 off its band's 0.905 (within 2 sd = 0.127, outside 1 sd)
    assert _row(t, "| oll2_musr 20 |") == (
        "| oll2_musr 20 | 2.00 / 0.73 | 2.00 ± 0.35 | yes | greedy_ridge 1.60 | 2.50 (grid) | "
        "0.726 vs 0.726 (random_ridge) | tie (2 d.p.) | 0.805 (40; 0.905 ± 0.127) | "
        "1.50 / 0.850 / 15.0 |")
    # SparseEval run here wins over the grid; no baseline; coverage 0.5 far off its band
    assert _row(t, "| mb_toy 100 |") == (
        "| mb_toy 100 | – | 1.00 ± 0.00 | – | sparseeval 3.00 | 3.00 | 0.500 vs – | – | "
        "0.500 ! (400; 0.900 ± 0.042) | – (external target) |")
    # the grid lacks seed 43: not the same seeds, so not shown
    assert _row(t, "| mb_toy 50 |") == (
        "| mb_toy 50 | – | 1.00 ± 0.00 | – | – (auto alone) | not run | 0.500 vs – | – | "
        "0.900 (400; 0.900 ± 0.042) | – (external target) |")
    assert [line.split(" |")[0] for line in t.splitlines() if line.startswith("| oll2")
            or line.startswith("| mb")] == ["| oll2_musr 20", "| mb_toy 50", "| mb_toy 100"]
    assert t.endswith("SPEC rows met: 1 of 1; `auto` τ-b ≥ best baseline's on 1 of 3 rows, ≥ "
                      "the SPEC row's best τ-b on 0 of 1 (tied at two decimals on 1); `auto` "
                      "coverage outside its 2-sd band (marked !) on 1 of 3 rows.")


# --- before / after ---------------------------------------------------------------------

def _calibration_files(tmp_path):
    old = _cell("mb_toy", 100, ["auto"], [[9.0, 9.0]], n_test=20, n_models=100, seconds=1.0)
    before = _cell("mb_toy", 100, ["auto", "random_ridge"], [[1.0, 2.0], [5.0, 5.0]],
                   coverage=[[0.9, 0.9], [0.1, 0.1]], width=[[0.05, 0.07], [0.5, 0.5]],
                   n_test=20, n_models=100, seconds=10.0)
    after = _cell("mb_toy", 100, ["random_ridge", "auto"], [[5.0, 5.0], [0.5, 1.5]],
                  coverage=[[0.1, 0.1], [0.80, 0.81]], width=[[0.5, 0.5], [0.04, 0.04]],
                  seeds=(44, 45), n_test=20, n_models=100, seconds=30.0)
    only_after = _cell("mb_toy", 20, ["auto"], [[1.0, 1.0]], seconds=1.0)
    b = _write(tmp_path / "b.jsonl", old, before)
    a = _write(tmp_path / "a.jsonl", after, only_after)
    g = _write(tmp_path / "g.jsonl", _grid("mb_toy", 100, {42: 7.0, 43: 7.0, 44: 2.0, 45: 3.0}))
    return b, a, g


def test_calibration_table_figures(tmp_path):
    b, a, g = _calibration_files(tmp_path)
    t = ba.calibration_table(str(b), str(a), [str(g)])
    assert _row(t, "| mb_toy") == (
        "| mb_toy 100 | 1.50 → 1.00 | 0.900 (0.905 ± 0.127) | 0.805 (0.905 ± 0.127) | "
        "6.0 → 4.0 | 2.50 | 30 |")
    assert t.endswith("Mean over the 1 cells: coverage 0.900 → 0.805, width 6.00 → 4.00 pp.")


def test_main_compare_versus_and_table_pass_their_files(tmp_path, capsys):
    b, a, g = _calibration_files(tmp_path)  # --compare BEFORE AFTER
    ba.main(["--compare", str(b), str(a), "--sparseeval-from", str(g)])
    assert "| mb_toy 100 | 1.50 → 1.00 |" in capsys.readouterr().out
    auto, grid = _versus_files(tmp_path)
    ba.main(["--versus-sparseeval", str(auto), "--sparseeval-from", str(grid)])
    assert "| mb_toy 20 | 42–44 (3) | 2.600 | 1.000 |" in capsys.readouterr().out
    res, grid = _summary_files(tmp_path)
    ba.main(["--table", str(res), "--sparseeval-from", str(grid)])
    assert "| 2.50 (grid) |" in capsys.readouterr().out


# --- same_run ---------------------------------------------------------------------------

def test_same_run(monkeypatch):
    monkeypatch.setenv("NPROC", "32")
    assert ba.same_run({}, True) and not ba.same_run({}, False)  # old records: vmapped
    assert ba.same_run({"seeds_batched": "loop"}, False)  # no nproc: any pool
    assert ba.same_run({"seeds_batched": "loop", "nproc": "32"}, False)
    assert not ba.same_run({"seeds_batched": "loop", "nproc": "8"}, False)
    assert not ba.same_run({"seeds_batched": "loop", "nproc": "32"}, True)
    assert ba.same_run({"seeds_batched": True, "nproc": "32"}, True)


# --- main writes and reads its records --------------------------------------------------

def _fake_run(monkeypatch, n_models=87, n_items=50):
    calls = []
    sm = types.SimpleNamespace(n_items=n_items, n_models=n_models, target=None)
    monkeypatch.setattr(ba, "load", lambda name: sm)
    monkeypatch.setattr(ba, "_git_commit", lambda: "abc")

    def protocol(sm_, k, methods, seeds, st, dr_items, vmap_seeds):
        calls.append(dict(k=k, methods=methods, seeds=seeds, dr_items=dr_items))
        m, s = len(methods), len(seeds)
        v = np.arange(1.0, m * s + 1).reshape(m, s)
        return types.SimpleNamespace(
            methods=tuple(methods), mae_pp=v, tau_b=v / 10, coverage=np.full((m, s), 0.9),
            width=np.full((m, s), 0.05), dr=None,
            info={"n_models": n_models, "settings": repr(dataclasses.replace(st,
                                                                              external=False)),
                  "seeds_batched": "vmap" if vmap_seeds else "loop",
                  "named_halves": list(ba.halved_methods(methods, st))})

    monkeypatch.setattr(ba, "evaluate_protocol", protocol)
    return calls


def test_main_appends_one_record_per_cell_and_resume_skips_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NPROC", "32")
    calls = _fake_run(monkeypatch)
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(_cell("mb_toy", 100, ["auto"], [[1.0, 1.0]])) + "\n")
    argv = ["--datasets", "oll2_musr", "--k", "20", "--methods", "random_ridge", "auto",
            "--seeds", "2", "--out", str(out)]
    ba.main(argv)
    assert calls == [dict(k=20, methods=("random_ridge", "auto"), seeds=(42, 43), dr_items=30)]
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["dataset"] == "mb_toy"  # appended
    r = json.loads(lines[1])
    assert (r["dataset"], r["k"], r["seeds"], r["methods"]) == ("oll2_musr", 20, [42, 43],
                                                                ["random_ridge", "auto"])
    assert r["mae_pp"] == [[1.0, 2.0], [3.0, 4.0]] and r["spec_best"] == [2.17, 0.56]
    assert r["n_test"] == 17 and r["n_models"] == 87  # round(0.2 * 87)
    assert r["named_halves"] == ["random_ridge"] and r["seeds_batched"] == "loop"
    assert r["nproc"] == "32" and r["commit"] == "abc"
    # the record reads back into the summary table
    row = _row(ba.summary_table(str(out)), "| oll2_musr 20 |")
    assert row.startswith("| oll2_musr 20 | 2.17 / 0.56 | 3.50 ± 0.71 | **no** | "
                          "random_ridge 1.50 |")
    with open(out, "a") as f:
        f.write("\n")  # a blank line is ignored
    capsys.readouterr()
    ba.main(argv + ["--resume"])
    assert len(calls) == 1  # skipped
    assert "already in" in capsys.readouterr().out
    ba.main(argv + ["--resume", "--first-seed", "47"])  # other seeds: run
    assert calls[-1]["seeds"] == (47, 48)


# --- four problems the review found, fixed -------------------------------------------

def test_summary_counts_only_the_rows_it_shows(tmp_path):
    """A cell without ``auto`` has no row: the closing line's "of N rows" leaves it out."""
    f = _write(tmp_path / "r.jsonl", _rec(["random_ridge", "auto"], [2.0, 1.0]),
               _rec(["random_ridge"], [1.9], k=20))
    t = ba.summary_table(f)
    assert "| mb_toy 20" not in t
    assert "`auto` τ-b ≥ best baseline's on 0 of 1 rows" in t  # (0.6 < 0.7)
    assert "(marked !) on 0 of 1 rows." in t


def test_a_single_path_object_names_the_sparseeval_grid(tmp_path):
    f = _write(tmp_path / "r.jsonl", _rec(["random_ridge", "auto"], [2.0, 1.0]))
    g = _write(tmp_path / "g.jsonl", _grid("mb_toy", 100, {42: 3.0, 43: 4.0}))
    assert "| 3.50 (grid) |" in _row(ba.summary_table(f, g), "| mb_toy 100")
    assert ba._sparseeval_seeds(g) == ba._sparseeval_seeds([str(g)])


def test_calibration_table_merges_methods_and_names_a_cell_without_auto(tmp_path):
    """A later rerun of other methods alone no longer hides ``auto``'s figures (the cell
    is merged method by method); a cell with no ``auto`` at all is refused naming it."""
    b, a, g = _calibration_files(tmp_path)
    rerun = _cell("mb_toy", 100, ["random_ridge"], [[4.0, 4.0]], seeds=(44, 45),
                  n_test=20, n_models=100, seconds=2.0)
    a2 = _write(tmp_path / "a2.jsonl", *[json.loads(line) for line in
                                        a.read_text().splitlines()], rerun)
    assert _row(ba.calibration_table(str(b), str(a2), [str(g)]), "| mb_toy") == (
        "| mb_toy 100 | 1.50 → 1.00 | 0.900 (0.905 ± 0.127) | 0.805 (0.905 ± 0.127) | "
        "6.0 → 4.0 | 2.50 | 2 |")  # (the seconds: the newest record's)
    none = _write(tmp_path / "n.jsonl", rerun)
    with pytest.raises(ValueError, match=r"n.jsonl: cell \('mb_toy', 100\) has no record "
                       r"of 'auto' \(methods \['random_ridge'\]\)"):
        ba.calibration_table(str(b), str(none))


def test_the_cv_band_reads_the_folds_from_the_settings_text():
    """``auto`` cross-fits with ``Settings.auto_folds`` folds: 4 folds of 78 models pool
    76 residuals (r = ceil(0.9 * 77) = 70), not 5 x 15 = 75."""
    r = dict(_rec(["auto"], [1.0]), n_test=20, n_models=98, auto_choice="cv",
             settings="Settings(proxy_steps=100, auto_folds=4, auto_cv_below=300)")
    assert ba._coverage_band(r)[0] == pytest.approx(70 / 77)
    assert ba._coverage_band(dict(r, settings="Settings(auto_cv_below=300)"))[0] == \
        pytest.approx(69 / 76)  # (no auto_folds in the text: the default 5)
