"""Gaps found by a mutation review of five benchmark scripts that no test imported:
``benchmarks/anchors_grid.py`` (its records, the resume key, the conformal band, the
markdown tables, ``main``'s loop over cells), ``bench_assignment.py`` (random against
balanced instance assignment), ``bench_online_refit.py`` (its argument parsing and the
``speed`` set-up), ``bench_cores.py`` (the work dispatched per device count) and
``compile_profile.py`` (the pytest plugin's records and their summary).

Timings are not asserted. The protocol, the simulations and the kernels are replaced by
fakes that record what they are handed and answer fixed numbers, so every expected
figure follows from the inputs."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_bench_anchors import _write  # (imports bench_anchors with NPROC undone)

import jaxeval
from jaxeval import _factorization as fz
from jaxeval import _identification as idn
from jaxeval import _sampling as smp
from jaxeval import _simulate as sim
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import anchors_grid as ag  # noqa: E402
import bench_assignment as bas  # noqa: E402
import bench_cores as bc  # noqa: E402
import bench_online_refit as bor  # noqa: E402
import compile_profile as cp  # noqa: E402
import speed_problem as sp  # noqa: E402

# ============================================================ anchors_grid: the band


@pytest.mark.parametrize("args, want", [
    ((20, 20, 2), (19 / 21, 0.0633612)),  # r = ceil(18.9) = 19 of Beta(19, 2)
    ((21, 21, 2), (10 / 11, 0.0606531)),  # r = 20 of Beta(20, 2)
    ((20, 40, 1), (19 / 21, 0.0772852)),  # sqrt(Var + (mu (1 - mu) - Var) / 40)
    ((9, 10, 1), (0.9, 0.1279204)),  # r = 9 = n_val: still a Beta(9, 1) band
    ((5, 10, 1), (1.0, 0.0)),  # r = ceil(5.4) = 6 > 5: the interval is infinite
])
def test_conformal_tolerance_by_hand(args, want):
    assert ag.conformal_tolerance(*args) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("args, name", [((0, 5, 2), "n_val"), ((5, 0, 2), "n_test"),
                                        ((5, 5, 0), "n_seeds")])
def test_conformal_tolerance_refuses_empty_counts_naming_them(args, name):
    with pytest.raises(ValueError, match=f"{name}.* must be >= 1"):
        ag.conformal_tolerance(*args)


# ============================================================ anchors_grid: records


def test_read_cells_absent_file_blank_lines_and_a_bad_line(tmp_path):
    assert ag.read_cells(tmp_path / "absent.jsonl") == []
    f = tmp_path / "r.jsonl"
    f.write_text('{"a": 1}\n\n{"a": 2}\nnot json\n')
    with pytest.raises(ValueError, match=r"r\.jsonl: line 4 is not JSON"):
        ag.read_cells(f)
    f.write_text('{"a": 1}\n\n   \n{"a": 2}\n')
    assert ag.read_cells(f) == [{"a": 1}, {"a": 2}]


def _protocol(calls, n_models=500, n_items=60, external=False):
    """A fake ``evaluate_protocol``: method i, seed j has MAE i + j + 1 (pp)."""

    def protocol(sm, k, methods, seeds, st, alpha, dr_items, vmap_seeds):
        calls.append(dict(sm=sm, k=k, methods=methods, seeds=seeds, alpha=alpha,
                          dr_items=dr_items, vmap_seeds=vmap_seeds))
        m, s = len(methods), len(seeds)
        mae = np.arange(m)[:, None] + np.arange(s)[None, :] + 1.0
        return types.SimpleNamespace(
            methods=tuple(methods), mae_pp=mae, tau_b=mae / 10,
            coverage=np.full((m, s), 0.8) + np.arange(s) / 100,
            width=np.full((m, s), 0.05),
            info={"n_models": n_models, "n_items": n_items, "dataset": f"src:{sm}",
                  "external_target": external,
                  "named_halves": list(ag.halved_methods(methods, st)),
                  "seeds_batched": "vmap" if vmap_seeds else "loop"})

    return protocol


@pytest.fixture
def grid_fakes(monkeypatch):
    calls = []
    monkeypatch.setattr(ag, "evaluate_protocol", _protocol(calls))
    monkeypatch.setattr(ag, "_commit", lambda: "c0ffee0123")
    monkeypatch.setenv("NPROC", "4")
    return calls


def test_run_cell_record_figures_and_key(grid_fakes):
    st = ag.Settings(proxy_steps=7)
    r = ag.run_cell("oll2_musr", "SM", 20, st, (42, 43, 44), ["random_mean", "random_ridge"],
                    True)
    assert grid_fakes == [dict(sm="SM", k=20, methods=("random_mean", "random_ridge"),
                               seeds=(42, 43, 44), alpha=0.1, dr_items=0, vmap_seeds=True)]
    assert (r["dataset"], r["k"], r["source"]) == ("oll2_musr", 20, "src:SM")
    assert (r["n_models"], r["n_items"], r["n_test"], r["n_val"]) == (500, 60, 100, 100)
    assert r["external_target"] is False and r["alpha"] == 0.1
    # random_mean: MAE 1, 2, 3 (sd 1 with ddof 1); random_ridge: 2, 3, 4
    rm, au = r["results"]["random_mean"], r["results"]["random_ridge"]
    assert rm["mae_pp"] == [1.0, 2.0, 3.0] and au["mae_pp"] == [2.0, 3.0, 4.0]
    assert rm["mae_mean"] == 2.0 and rm["mae_sd"] == pytest.approx(1.0)
    assert au["tau_b"] == pytest.approx([0.2, 0.3, 0.4])
    assert au["tau_mean"] == pytest.approx(0.3) and au["tau_sd"] == pytest.approx(0.1)
    assert au["coverage"] == pytest.approx([0.8, 0.81, 0.82])
    assert au["coverage_mean"] == pytest.approx(0.81)
    assert au["width_pp"] == pytest.approx([5.0] * 3) and au["width_mean_pp"] == 5.0
    assert r["settings_fields"]["proxy_steps"] == "7"
    assert r["named_halves"] == ["random_ridge"] and r["seeds_batched"] == "vmap"
    assert r["nproc"] == "4" and r["commit"] == "c0ffee0123"
    # the key: the resume key recomputed from the record is the one stored
    assert r["key"] == ag._settings_key(st, (42, 43, 44), ["random_mean", "random_ridge"])
    assert ag._record_key(r) == r["key"]
    assert ag._record_key(dict(r, seeds=[42, 43])) != r["key"]
    assert ag._record_key(dict(r, methods=["random_ridge"])) != r["key"]
    other = ag._settings_key(dataclasses.replace(st, proxy_steps=8), (42, 43, 44),
                             ["random_mean", "random_ridge"])
    assert other != r["key"]


@pytest.mark.parametrize("n_models, h", [(500, 100), (999, 200), (1000, 200), (1500, 200),
                                         (87, 17)])
def test_run_cell_test_and_validation_counts(monkeypatch, n_models, h):
    """``n_test = n_val`` = 200 from 1000 models on, else round(0.2 n) (SPEC 6.2)."""
    monkeypatch.setattr(ag, "evaluate_protocol", _protocol([], n_models=n_models))
    monkeypatch.setattr(ag, "_commit", lambda: "x")
    r = ag.run_cell("oll2_musr", "SM", 20, ag.Settings(), (42, 43), ["auto"])
    assert (r["n_test"], r["n_val"]) == (h, h)


# ============================================================ anchors_grid: main


class _SM:
    """A stand-in score matrix: ``n_items`` items, ``n_unique`` after dropping duplicates."""

    def __init__(self, name, n_items=50, n_unique=40):
        self.name, self.n_items, self._u = name, n_items, n_unique

    def drop_duplicates(self):
        return types.SimpleNamespace(n_items=self._u)

    def __repr__(self):
        return self.name


def _main(tmp_path, *extra, methods=("random_mean", "auto")):
    out = tmp_path / "grid.jsonl"
    ag.main(["--out", str(out), "--methods", *methods, "--init-steps", "3",
             "--proxy-steps", "4", "--final-steps", "5", *extra])
    return ag.read_cells(out)


@pytest.fixture
def grid_main(grid_fakes, monkeypatch):
    monkeypatch.setattr(ag, "load", lambda name: _SM(name))
    return grid_fakes


def test_main_runs_k_outer_datasets_inner_and_skips_k_at_the_unique_item_count(
        grid_main, tmp_path, capsys):
    recs = _main(tmp_path, "--datasets", "oll2_musr", "oll2_arc", "--k", "20", "40", "39",
                 "--seeds", "2")
    # 40 items after dropping duplicates (50 before): k = 40 is skipped, k = 39 runs
    assert [(c["sm"].name, c["k"]) for c in grid_main] == [
        ("oll2_musr", 20), ("oll2_arc", 20), ("oll2_musr", 39), ("oll2_arc", 39)]
    assert [(r["dataset"], r["k"]) for r in recs] == [(c["sm"].name, c["k"])
                                                       for c in grid_main]
    assert "skip oll2_musr k=40: only 40 items" in capsys.readouterr().out
    c = grid_main[0]
    assert c["seeds"] == (42, 43) and c["methods"] == ("random_mean", "auto")
    assert c["vmap_seeds"] is False
    assert recs[0]["settings_fields"]["init_steps"] == "3"
    assert recs[0]["settings_fields"]["proxy_steps"] == "4"
    assert recs[0]["settings_fields"]["final_steps"] == "5"


def test_main_default_seeds_are_42_to_51_and_vmap_is_passed(grid_main, tmp_path):
    _main(tmp_path, "--datasets", "oll2_musr", "--k", "20", "--vmap-seeds")
    assert grid_main[0]["seeds"] == tuple(range(42, 52))
    assert grid_main[0]["vmap_seeds"] is True


def test_main_max_cells_stops_after_that_many(grid_main, tmp_path):
    recs = _main(tmp_path, "--datasets", "oll2_musr", "--k", "20", "30", "--seeds", "2",
                 "--max-cells", "1")
    assert len(grid_main) == 1 and len(recs) == 1


def test_main_resumes_only_cells_run_the_same_way(grid_main, tmp_path, capsys):
    argv = ("--datasets", "oll2_musr", "--k", "20", "--seeds", "2")
    _main(tmp_path, *argv)
    assert len(grid_main) == 1
    capsys.readouterr()
    _main(tmp_path, *argv)  # same settings, seeds, methods, batching: skipped
    assert len(grid_main) == 1
    assert "1 cells already in" in capsys.readouterr().out
    _main(tmp_path, *argv, "--vmap-seeds")  # the seeds batched otherwise: runs
    assert len(grid_main) == 2
    _main(tmp_path, *argv[:-1], "3")  # other seeds: runs
    assert len(grid_main) == 3
    _main(tmp_path, *argv, methods=("random_mean",))  # other methods: runs
    assert len(grid_main) == 4
    capsys.readouterr()
    out = tmp_path / "grid.jsonl"
    recs = ag.read_cells(out)
    for r in recs:  # other methods calibrated on halves: nothing counts as done
        r["named_halves"] = ["random_mean"]
    _write(out, *recs)
    _main(tmp_path, *argv)
    assert len(grid_main) == 5
    assert "none of the 4 records" in capsys.readouterr().out


@pytest.mark.parametrize("extra, match", [
    (("--datasets", "oll2_nope"), r"--datasets: unknown \['oll2_nope'\]"),
    (("--datasets", "oll2_musr", "--k", "20", "0"), r"--seeds and --k must be >= 1"),
    (("--datasets", "oll2_musr", "--seeds", "0"), r"--seeds and --k must be >= 1"),
])
def test_main_argument_errors(grid_main, tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        _main(tmp_path, *extra)
    assert grid_main == []


# ============================================================ anchors_grid: tables


def _grec(dataset, k, res, *, n_models=100, n_val=20, n_test=20, seeds=(42, 43), **kw):
    """A grid record; ``res``: method -> (mae_mean, mae_sd, tau_mean, coverage_mean)."""
    results = {m: {"mae_mean": a, "mae_sd": b, "tau_mean": t, "tau_sd": 0.01,
                   "coverage_mean": c, "width_mean_pp": 5.0}
               for m, (a, b, t, c) in res.items()}
    rec = dict(dataset=dataset, k=k, results=results, methods=list(res), seeds=list(seeds),
               n_models=n_models, n_val=n_val, n_test=n_test, n_items=60,
               external_target=False, seconds=12.4, cpu_seconds=30.2, load_before=[0.5],
               load_after=[0.7], commit="abcdef0123", alpha=0.1)
    rec.update(kw)
    return rec


def _table_recs():
    old = _grec("oll2_musr", 100, {"random_mean": (9.0, 0.1, 0.1, 0.9)})
    arc = _grec("oll2_arc", 20, {"random_mean": (3.0, 0.3, 0.5, 0.9)},
                external_target=True, commit="1234567890")
    del arc["cpu_seconds"]
    # the band of n_val = 20, n_test = 20, two seeds: 0.905 +- 0.127 (sd 0.063)
    m100 = _grec("oll2_musr", 100, {"random_mean": (3.0, 0.3, 0.3, 0.85),
                                    "sparseeval": (2.0, 0.2, 0.6, 0.80),
                                    "auto": (1.0, 0.1, 0.5, 0.50)})
    # n_val = 21: full band 0.909 +- 0.121 (lower 0.788); random_ridge calibrated on
    # halves of 20: 0.905 +- 0.125 (lower 0.780)
    m20 = _grec("oll2_musr", 20, {"random_mean": (2.5, 0.2, 0.4, 0.785),
                                  "random_ridge": (2.0, 0.2, 0.2, 0.785),
                                  "auto": (2.2, 0.2, 0.3, 0.9)},
                n_val=21, n_test=21, named_halves=["random_ridge"])
    return [arc, old, m100, m20]


def _rows(text, start):
    return [line for line in text.splitlines() if line.startswith(start)]


def test_print_tables_rows_columns_and_bold(capsys):
    ag.print_tables(_table_recs())
    out = capsys.readouterr().out
    head = "| dataset | k | " + " | ".join(ag.METHODS) + " | auto |\n|---|---|"
    assert out.count(head) == 2  # the extra method once, after the issue-5 ones
    mae = out.split("### Kendall")[0]
    # DATASETS order (musr before arc), then k; the later musr 100 record wins
    assert [r.split(" | ")[:2] for r in _rows(mae, "| oll2")] == [
        ["| oll2_musr", "20"], ["| oll2_musr", "100"], ["| oll2_arc", "20"]]
    row = _rows(mae, "| oll2_musr | 100 |")[0].split(" | ")[2:]
    i = {m: j for j, m in enumerate(ag.METHODS)}
    assert row[i["random_mean"]] == "3.00 ± 0.30"
    assert row[i["sparseeval"]] == "2.00 ± 0.20"
    assert row[-1] == "**1.00 ± 0.10** |"
    assert row[i["pirt"]] == "–"
    tau = out.split("### Kendall")[1].split("###")[0]
    row = _rows(tau, "| oll2_musr | 100 |")[0].split(" | ")[2:]
    assert row[i["sparseeval"]] == "**0.600 ± 0.010**" and row[-1] == "0.500 ± 0.010 |"


def test_print_tables_coverage_flags_and_the_halves_band(capsys):
    ag.print_tables(_table_recs())
    out = capsys.readouterr().out.split("### 90%")[1].split("###")[0]
    i = {m: j for j, m in enumerate(ag.METHODS)}
    row = _rows(out, "| oll2_musr | 100 |")[0].split(" | ")
    assert row[2] == "0.905 ± 0.127"
    cells = row[3:]
    assert cells[i["random_mean"]] == "0.850 / 5.0"  # 0.055 off: within 1 sd
    assert cells[i["sparseeval"]] == "0.800 / 5.0"  # 0.105 off: within 2 sd, not 1
    assert cells[-1] == "0.500 ! / 5.0 |"
    row = _rows(out, "| oll2_musr | 20 |")[0].split(" | ")
    assert row[2] == "0.909 ± 0.121"
    cells = row[3:]
    assert cells[i["random_mean"]] == "0.785 ! / 5.0"  # below 0.788
    assert cells[i["random_ridge"]] == "0.785 / 5.0"  # its own band reaches 0.780


def test_print_tables_cells_and_k100_winners(capsys):
    ag.print_tables(_table_recs())
    out = capsys.readouterr().out
    cells = out.split("### Cells")[1].split("###")[0]
    assert _rows(cells, "| oll2_musr | 100 |") == [
        "| oll2_musr | 100 | 100 (60/20/20) | row mean | 12 | 30 | 0.5 → 0.7 | abcdef0 |"]
    assert _rows(cells, "| oll2_arc | 20 |") == [
        "| oll2_arc | 20 | 100 (60/20/20) | full score | 12 | not recorded | 0.5 → 0.7 | "
        "1234567 |"]
    win = out.split("### k = 100")[1]
    assert _rows(win, "| oll2") == [
        "| oll2_musr | auto (1.00) | sparseeval (2.00) | 2.00 (2 of 3) |"]


def test_print_tables_k100_cell_of_one_method_has_no_runner_up(capsys):
    """A k = 100 cell run with one method (``--methods sparseeval``) prints "–" for the
    runner-up instead of stopping the whole table with an IndexError."""
    ag.print_tables([_grec("oll2_musr", 100, {"sparseeval": (2.0, 0.2, 0.6, 0.9)})])
    win = capsys.readouterr().out.split("### k = 100")[1]
    assert _rows(win, "| oll2") == ["| oll2_musr | sparseeval (2.00) | – | 2.00 (1 of 1) |"]


def test_print_tables_without_records_and_plot_without_records(capsys, tmp_path):
    ag.print_tables([])
    assert capsys.readouterr().out == "no finished cells\n"
    with pytest.raises(ValueError, match="--plot: no finished cells"):
        ag.plot_grid([], tmp_path / "p.png")


# ============================================================ bench_assignment

# calls to 95% / 90% (shares of K n) by (assignment, policy)
_ASSIGN = {("random", "ucbe"): (0.4, 0.3), ("random", "pulse_ucb"): (0.1, 0.05),
           ("balanced", "ucbe"): (0.5, 0.45), ("balanced", "pulse_ucb"): (0.3, 0.2)}


def test_bench_assignment_runs_both_policies_under_both_assignments(monkeypatch, tmp_path):
    calls, fits = [], []
    monkeypatch.setattr(bas.bt, "load", lambda ds: f"SM:{ds}")
    monkeypatch.setattr(bas.bt, "_factors",
                        lambda sm, seed, rank: fits.append((sm, seed, rank)) or f"F:{sm}")

    def fake(sm, policy, **kw):
        calls.append(dict(kw, sm=sm, policy=policy))
        v = _ASSIGN[(kw["instance_assignment"], policy)]

        def calls_to(acc, *, fraction=False):
            assert fraction
            return {0.95: v[0], 0.90: v[1]}[acc]

        return types.SimpleNamespace(calls_to=calls_to)

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    out = tmp_path / "a.json"
    bas.main(["--datasets", "math5", "tailored", "--reps", "7", "--out", str(out)])
    got = json.loads(out.read_text())
    assert fits == [("SM:math5", 0, 8), ("SM:tailored", 0, 8)]
    assert [(c["sm"], c["instance_assignment"], c["policy"], c["a"]) for c in calls] == [
        (f"SM:{ds}", asg, pol, a) for ds in ("math5", "tailored")
        for asg in ("random", "balanced")
        for pol, a in zip(("ucbe", "pulse_ucb"), bas.TUNED[ds])]
    assert bas.TUNED["math5"] == (0.3, 1.0)
    for c in calls:
        assert c["factors"] == (f"F:{c['sm']}" if c["policy"] == "pulse_ucb" else None)
        assert (c["K"], c["seed"], c["n_replicates"], c["n_instances"], c["rank"]) == (
            10, 0, 7, 50, 8)
        assert c["budget_fractions"] == DEFAULT_BUDGET_FRACTIONS
        assert c["cs_kinds"] == ("eb",)
    row = got["math5"]
    assert list(got) == ["math5", "tailored"]
    for (asg, pol), (c95, c90) in _ASSIGN.items():
        assert row[f"{asg}/{pol}"][:2] == [c95, c90]
    assert row["random/ratio"] == "0.25"  # bench_tuning's cell
    assert row["balanced/ratio"] == "0.60"


def test_bench_assignment_ratio_cells_where_a_policy_never_reaches_95(monkeypatch, tmp_path):
    """UCB-E never at 95%: ``<1`` (not the 0.0 of x / inf); neither: ``-`` (not NaN, which
    the JSON file would hold as a bare NaN)."""
    inf = float("inf")
    table = {("random", "ucbe"): inf, ("random", "pulse_ucb"): 0.2,
             ("balanced", "ucbe"): inf, ("balanced", "pulse_ucb"): inf}
    monkeypatch.setattr(bas.bt, "load", lambda ds: ds)
    monkeypatch.setattr(bas.bt, "_factors", lambda sm, seed, rank: None)
    monkeypatch.setattr(jaxeval, "simulate_identification", lambda sm, policy, **kw: (
        types.SimpleNamespace(calls_to=lambda acc, fraction=False, v=table[
            (kw["instance_assignment"], policy)]: v)))
    out = tmp_path / "a.json"
    bas.main(["--datasets", "math5", "--reps", "2", "--out", str(out)])
    row = json.loads(out.read_text())["math5"]
    assert (row["random/ratio"], row["balanced/ratio"]) == ("<1", "-")


def test_bench_assignment_refuses_an_untuned_dataset():
    with pytest.raises(SystemExit):
        bas.main(["--datasets", "gsm8k"])


# ============================================================ bench_online_refit


def test_online_refit_main_parses_configs_and_trial_steps(monkeypatch):
    got = []
    monkeypatch.setattr(bor, "lag", lambda configs, steps: got.append(("lag", configs, steps)))
    monkeypatch.setattr(bor, "speed", lambda steps: got.append(("speed", steps)))
    assert bor.main(["lag", "--configs", "16,0.3", "32,1", "--steps", "1,0.25,0"]) == 0
    assert bor.main(["lag"]) == 0
    assert bor.main(["speed"]) == 0
    assert bor.main(["speed", "--steps", "1,0.5,0"]) == 0
    assert got == [("lag", [(16, 0.3), (32, 1.0)], [(1.0, 0.25, 0.0)]),
                   ("lag", [(16, 0.3), (8, 1.0)], [(1.0, 0.0), (1.0, 0.5, 0.0)]),
                   ("speed", (1.0, 0.0)), ("speed", (1.0, 0.5, 0.0))]
    assert isinstance(got[0][1][0][0], int)


@pytest.mark.parametrize("bad", ["16", "16,0.3,1", "x,1"])
def test_online_refit_refuses_a_config_that_is_not_a_rank_rho_pair(bad, monkeypatch, capsys):
    monkeypatch.setattr(bor, "lag", lambda configs, steps: pytest.fail("lag ran"))
    with pytest.raises(SystemExit) as e:
        bor.main(["lag", "--configs", "8,1", bad])
    assert e.value.code == 2
    assert (f"error: --configs: expected rank,rho pairs such as 16,0.3; got {bad!r}"
            in capsys.readouterr().err)


def test_online_refit_lag_refits_the_held_out_models_and_checks_every_ten_items(
        monkeypatch, capsys):
    """``lag``: factors fitted on models 0-199, candidates 200-214 each observed one item
    at a time for 150 items (the online factor restarting from ``u_mean``), the MAP gap
    taken after every 10th item. The fake MAP factor is ``u - seen / 100`` and the
    objective the sum of the factor (rank 2), so the gap is ``seen / 50``: 0.2 .. 3.0."""
    n, r = 160, 2
    scores = np.repeat(np.arange(220, dtype=np.float32)[:, None], n, 1)  # row i holds i
    taken, fits, refits, maps = [], [], [], []
    F = types.SimpleNamespace(V=jnp.zeros((n, r)), c=jnp.zeros(n), u_mean=jnp.zeros(r))
    sm = types.SimpleNamespace(scores=scores,
                               take=lambda models: taken.append(list(models)) or "TRAIN")
    monkeypatch.setattr(jaxeval, "load", lambda name: taken.append(name) or sm)
    monkeypatch.setattr(jaxeval, "fit_factorization", lambda t, **kw: fits.append((t, kw))
                        or types.SimpleNamespace(item_factors=lambda: F, n_items=n))
    monkeypatch.setattr(jax, "jit", lambda f: f)

    def refit(F_, s, m, u, rho, num_newton, line_search):
        refits.append((int(s[0]), int(m.sum()), float(u.sum()), rho, num_newton, line_search))
        return u + 1.0

    def update(F_, s, m, u, rho, num_newton):
        maps.append((int(s[0, 0]), int(m.sum()), float(rho), num_newton))
        return u - m.sum() / 100.0, None

    monkeypatch.setattr(fz, "refit_row", refit)
    monkeypatch.setattr(fz, "_update_model_factors", update)
    monkeypatch.setattr(fz, "_row_objective", lambda u, V, c, s, m, um, rho: u.sum())
    bor.lag([(2, 0.3)], [(1.0, 0.5, 0.0)])
    assert taken == ["oll2_musr", list(range(200))]
    assert fits == [("TRAIN", dict(rank=2, rho=0.3, num_steps=400))]
    assert [x[:2] for x in refits] == [(i, j) for i in range(200, 215) for j in range(1, 151)]
    assert all(x[3:] == (0.5, 1, (1.0, 0.5, 0.0)) for x in refits)
    assert [x[2] for x in refits if x[1] == 1] == [0.0] * 15  # each from u_mean
    assert maps == [(i, j, 0.5, 30) for i in range(200, 215) for j in range(10, 151, 10)]
    assert capsys.readouterr().out == ("2 0.3 (1.0, 0.5, 0.0) gap max 3.00 mean 1.600; "
                                       "max|dp| 0.000 mean 0.0000\n")


def test_online_refit_speed_patches_the_steps_and_times_other_seeds(monkeypatch, capsys):
    monkeypatch.setattr(fz.refit_row, "__defaults__", fz.refit_row.__defaults__)
    monkeypatch.setattr(fz, "ONLINE_LINE_SEARCH_STEPS", fz.ONLINE_LINE_SEARCH_STEPS)
    seen, calls = {}, []
    sm = types.SimpleNamespace(drop_duplicates=lambda: "DD")
    monkeypatch.setattr(jaxeval, "load", lambda name: seen.setdefault("load", name) and sm)
    monkeypatch.setattr(sim, "split_pool", lambda *a: seen.setdefault("split", a) and
                        ("TRAIN", None, None))
    monkeypatch.setattr(sim, "fit_default_factors", lambda *a: seen.setdefault("fit", a) and
                        ("F", None, None))

    def fake(data, policy, **kw):
        calls.append(dict(kw, data=data, policy=policy))
        return types.SimpleNamespace(accuracy=np.array([kw["seed"] / 10, 1.0]))

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    bor.speed((1.0, 0.5, 0.0))
    assert fz.ONLINE_LINE_SEARCH_STEPS == (1.0, 0.5, 0.0)
    assert fz.refit_row.__defaults__ == (1, (1.0, 0.5, 0.0))
    assert seen == {"load": "oll2_ifeval", "split": ("DD", None, 10, 0),
                    "fit": ("TRAIN", 8, 0, 500)}
    assert [c["seed"] for c in calls] == [0, 1, 2, 3]  # a warm-up, then three timed
    for c in calls:
        assert c["data"] is sm and c["policy"] == "pulse_ucb" and c["factors"] == "F"
        assert (c["K"], c["n_replicates"], c["lanes"]) == (10, 256, 256)
        assert c["budget_fractions"] == (0.05, 0.1, 0.2) and c["cs_kinds"] == ("eb",)
    out = capsys.readouterr().out
    assert out.startswith("(1.0, 0.5, 0.0) times [") and out.endswith("acc [0.3, 1.0]\n")


# ============================================================ bench_cores


def test_bench_cores_dispatches_every_chunk_per_device_count(monkeypatch, capsys):
    cfgs, probs = [], []
    dev = jax.devices()[0]
    monkeypatch.setattr(jax, "devices", lambda *a: [dev, dev])  # two "devices"
    monkeypatch.setenv("XLA_FLAGS", "--xla_keep")
    monkeypatch.setattr(smp, "HOST_SORT_ON_CPU", smp.HOST_SORT_ON_CPU)

    def problem(ds, **kw):
        probs.append((ds, kw))
        return types.SimpleNamespace(K=3, n=5, budgets=(2, 4), data=jnp.ones(3),
                                     params=jnp.zeros(2))

    def config(policy, **kw):
        cfgs.append(dict(kw, policy=policy))
        return "CFG"

    monkeypatch.setattr(sp, "speed_problem", problem)
    monkeypatch.setattr(idn, "Config", config)
    monkeypatch.setattr(idn, "run_identification",
                        lambda k, d, p, cfg: jax.random.key_data(k).sum() + d.sum())
    bc.main(["--policy", "ucbe", "--b", "4", "--chunk", "3", "--devices", "2",
             "--rounds", "2", "--xla-sort"])
    assert os.environ["XLA_FLAGS"] == "--xla_keep --xla_force_host_platform_device_count=2"
    assert smp.HOST_SORT_ON_CPU is False
    assert probs == [("ifeval", dict(K=10, max_frac=0.2, seed=0, rank=8))]
    assert cfgs == [dict(policy="ucbe", num_arms=3, num_items=5, budgets=(2, 4),
                         batch_size=4, cs_kinds=("eb",))]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        f"ucbe b=4 chunk=3 devices used={d} of 2 (XLA sort)" for _ in range(2) for d in (1, 2)]
    assert all(", CPU/wall " in line and " reps/s" in line for line in lines)


# ============================================================ compile_profile


@pytest.fixture
def prof(monkeypatch, tmp_path):
    monkeypatch.setattr(cp, "_state", {"test": None, "start": 0.0, "acc": None, "out": None})
    monkeypatch.setenv("PROFILE_DIR", str(tmp_path / "prof"))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    yield tmp_path / "prof"
    cp.pytest_unconfigure(None)


def _item(nodeid):
    return types.SimpleNamespace(nodeid=nodeid)


def test_profile_plugin_adds_up_events_per_test(prof):
    cp._listener("/jax/core/compile/backend_compile_duration", 5.0, fun_name="f")  # no test
    cp.pytest_runtest_protocol(_item("tests/t.py::a"), None)
    cp._listener("/jax/core/compile/jaxpr_trace_duration", 0.25, fun_name="f")
    cp._listener("/jax/core/compile/jaxpr_to_mlir_module_duration", 0.5, fun_name="f")
    cp._listener("/jax/core/compile/backend_compile_duration", 1.0, fun_name="f")
    cp._listener("/jax/core/compile/backend_compile_duration", 2.0, fun_name="f")
    cp._listener("/jax/core/compile/backend_compile_duration", 4.0, fun_name="g")
    cp._listener("/jax/core/compile/backend_compile_duration", 8.0)
    cp._listener("/jax/other_duration", 16.0, fun_name="h")
    cp.pytest_runtest_logfinish("tests/t.py::other", None)  # not the test run here
    cp.pytest_runtest_logfinish("tests/t.py::a", None)
    cp.pytest_runtest_logfinish("tests/t.py::a", None)  # (already written)
    cp.pytest_runtest_protocol(_item("tests/t.py::b"), None)
    cp.pytest_runtest_logfinish("tests/t.py::b", None)
    cp.pytest_unconfigure(None)
    assert [p.name for p in prof.iterdir()] == ["profile_main.jsonl"]
    rows = [json.loads(line) for line in (prof / "profile_main.jsonl").read_text().splitlines()]
    assert [r["test"] for r in rows] == ["tests/t.py::a", "tests/t.py::b"]
    a = rows[0]
    assert (a["trace"], a["lower"], a["compile"]) == (0.25, 0.5, 15.0)
    assert a["programs"] == {"f": [2, 3.0], "g": [1, 4.0], "?": [1, 8.0]}
    assert a["wall"] >= 0
    assert (rows[1]["compile"], rows[1]["programs"]) == (0.0, {})


def test_profile_plugin_worker_file_name(prof, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    cp.pytest_runtest_protocol(_item("t::a"), None)
    cp.pytest_runtest_logfinish("t::a", None)
    cp.pytest_unconfigure(None)
    assert [p.name for p in prof.iterdir()] == ["profile_gw3.jsonl"]


def test_profile_configure_clears_old_profiles_in_the_first_process_only(prof, monkeypatch):
    got = []
    monkeypatch.setattr(jax.monitoring, "register_event_duration_secs_listener", got.append)
    prof.mkdir()
    for name in ("profile_gw0.jsonl", "notes.jsonl"):
        (prof / name).write_text("{}\n")
    cp.pytest_configure(types.SimpleNamespace(workerinput={}))  # a worker: keeps them
    assert sorted(p.name for p in prof.iterdir()) == ["notes.jsonl", "profile_gw0.jsonl"]
    cp.pytest_configure(types.SimpleNamespace())
    assert [p.name for p in prof.iterdir()] == ["notes.jsonl"]
    assert got == [cp._listener, cp._listener]
    monkeypatch.delenv("PROFILE_DIR")
    with pytest.raises(pytest.UsageError, match="set PROFILE_DIR"):
        cp.pytest_configure(types.SimpleNamespace())


def _profiles(folder):
    folder.mkdir()
    rows0 = [dict(test="tests/a.py::x", wall=10.0, trace=1.0, lower=2.0, compile=3.0,
                  programs={"f": [2, 2.5], "g": [1, 0.5]}),
             dict(test="tests/b.py::y[1]", wall=40.0, trace=2.0, lower=1.0, compile=20.0,
                  programs={"h": [1, 20.0]})]
    rows1 = [dict(test="tests/a.py::z", wall=6.0, trace=0.0, lower=0.0, compile=1.0,
                  programs={"f": [1, 1.0]})]
    (folder / "profile_gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows0))
    (folder / "profile_gw1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows1))
    (folder / "other.jsonl").write_text(json.dumps(dict(rows1[0], wall=1000.0)) + "\n")


def test_profile_summary_by_file(tmp_path, capsys):
    _profiles(tmp_path / "p")
    cp.main([str(tmp_path / "p")])
    lines = capsys.readouterr().out.splitlines()
    # wall 56; compile 24, trace 3, lower 3: the rest 26
    assert lines[0] == "3 tests, 56 worker-seconds: compile 24 s, trace 3 s, lower 3 s, " \
                       "the rest 26 s"
    rows = [line.split() for line in lines[2:]]
    assert rows == [["tests/b.py", "1", "40", "20", "2", "1", "1"],
                    ["tests/a.py", "2", "16", "4", "1", "2", "4"]]
    cp.main([str(tmp_path / "p"), "--top", "1"])
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_profile_summary_by_program(tmp_path, capsys):
    _profiles(tmp_path / "p")
    cp.main([str(tmp_path / "p"), "--programs"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == [["h", "1", "20.0"], ["f", "3", "3.5"], ["g", "1", "0.5"]]
    cp.main([str(tmp_path / "p"), "--programs", "--top", "2"])
    assert [r.split()[0] for r in capsys.readouterr().out.splitlines()[2:]] == ["h", "f"]


def test_profile_summary_without_profiles_names_the_folder(tmp_path):
    with pytest.raises(SystemExit, match="no profile_.*jsonl files"):
        cp.main([str(tmp_path)])
