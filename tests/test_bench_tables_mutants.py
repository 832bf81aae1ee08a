"""Gaps found by a mutation review of the table-building code of the benchmark scripts
whose tables the README and BUILD_NOTES quote: ``benchmarks/bench_tuning.py`` (the
calls-to-95% comparison, the ratios to tuned UCB-E, the per-gap-bin table, the value of
``a`` chosen on the tuning seed) and ``benchmarks/bench_identification.py`` (its table).

No simulation runs here: reports are built by hand (``test_simulate_report_mutants``'s
``_rep``: K = 2, n = 40, budgets 10 / 20 / 40 / 80 calls, so K n = 80), and ``main`` runs
with ``simulate_identification`` replaced by a fake that hands back such reports, so
every expected number is worked out from the inputs."""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from test_simulate_report_mutants import _rep

import jaxeval
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_identification as bi  # noqa: E402
import bench_tuning as bt  # noqa: E402

# replicate rows of ``correct`` with these accuracies at the four checkpoints (R = 4)
_ROWS = {
    # accuracy 0.25 / 0.5 / 1 / 1: to 95% = 20 + 0.45 / 0.5 * 20 = 38 calls, to 90% = 36
    "mid": [[0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]],
    # accuracy 0.5 / 1 / 1 / 1: to 95% = 10 + 0.9 * 10 = 19 calls, to 90% = 18
    "fast": [[0, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]],
    # accuracy 0.25 / 0.5 / 0.75 / 1: to 95% = 40 + 0.8 * 40 = 72 calls, to 90% = 64
    "slow": [[0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]],
    # accuracy 0 / 0.25 / 0.5 / 0.75: never reaches 90%
    "never": [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1]],
    # accuracy 0.5 / 0.5 / 0.75 / 1 (mean 0.6875): to 95% = 72 calls, like "slow"
    "slow_hi": [[1, 0, 0, 1], [0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]],
}
TO = {"mid": (38 / 80, 36 / 80), "fast": (19 / 80, 18 / 80), "slow": (72 / 80, 64 / 80),
      "never": (math.inf, math.inf), "slow_hi": (72 / 80, 64 / 80)}
# two instances of two replicates each; top-two gaps 0.1 and 0.3 (median 0.2)
THETA = [[0.5, 0.6], [0.6, 0.5], [0.2, 0.5], [0.5, 0.2]]
INSTANCE = [0, 0, 1, 1]


def _run(kind, theta=THETA, instance=INSTANCE, **over):
    return _rep(correct=np.asarray(_ROWS[kind], bool), theta=theta, instance=instance, **over)


# main's reports: K = 4 arms of n = 20 items (K n = 80 still); instance 0 (replicates
# 0-2, arms permuted) with top-two gap 0.1, instance 1 (replicate 3) with gap 0.3: the
# median gap over replicates is 0.1 (mean 0.15, best minus worst 0.5)
THETA_MAIN = [[0.6, 0.5, 0.2, 0.1], [0.1, 0.2, 0.5, 0.6], [0.5, 0.6, 0.1, 0.2],
              [0.8, 0.5, 0.45, 0.0]]


def _run_main(kind):
    return _run(kind, theta=THETA_MAIN, instance=[0, 0, 0, 1],
                settings=dict(K=4, n_items=20))


# --- the formatting helpers --------------------------------------------------------------


@pytest.mark.parametrize("mod", [bt, bi])
def test_fmt_prints_a_percent_with_one_decimal_and_max_for_unreached(mod):
    assert mod._fmt(0.2143) == "21.4%"
    assert mod._fmt(0.12351) == "12.4%"
    assert mod._fmt(1.0) == "100.0%"
    assert mod._fmt(math.inf) == ">max"
    assert mod._fmt(math.nan) == ">max"


def test_ratio_to_ucbe_and_the_unreached_cases():
    """``x / u`` to two decimals; ``>max`` when only UCB-E reaches 95%, ``<1`` when only
    the other policy does, ``-`` when neither."""
    assert bt._ratio(0.2, 0.4) == "0.50"
    assert bt._ratio(0.3, 0.2) == "1.50"
    assert bt._ratio(0.2, 0.3) == "0.67"
    assert bt._ratio(math.inf, 0.4) == ">max"
    assert bt._ratio(0.2, math.inf) == "<1"
    assert bt._ratio(math.inf, math.inf) == "-"


def test_score_fewest_calls_then_largest_mean_accuracy():
    """The tuning winner: fewest calls to 95%; ties and never-reached grids go to the
    largest mean accuracy over the budget grid."""
    assert bt._score(_run("mid")) == (pytest.approx(38 / 80), pytest.approx(-0.6875))
    never = bt._score(_run("never"))
    assert never[0] == math.inf and never[1] == pytest.approx(-0.375)
    runs = ["slow", "never", "mid", "fast"]
    assert min(runs, key=lambda k: bt._score(_run(k))) == "fast"
    # equal calls to 95% (72 calls): the larger mean accuracy wins
    assert min(["slow", "slow_hi"], key=lambda k: bt._score(_run(k))) == "slow_hi"
    assert min(["never", "slow"], key=lambda k: bt._score(_run(k))) == "slow"


def test_package_default_reads_simulate_identifications_defaults():
    """``a = 1`` and ``scale = 1``: the package's defaults (module docstring)."""
    assert bt.package_default("a") == 1.0
    assert bt.package_default("scale") == 1.0
    assert isinstance(bt.package_default("a"), float)


def test_curve_keeps_the_grid_accuracy_both_targets_and_the_gap():
    c = bt._curve(_run("mid"), 0.2)
    assert c["budget_fractions"] == [0.125, 0.25, 0.5, 1.0]
    assert c["accuracy"] == [0.25, 0.5, 1.0, 1.0]
    assert c["calls_to_95"] == pytest.approx(38 / 80)
    assert c["calls_to_90"] == pytest.approx(36 / 80)
    assert c["median_gap"] == 0.2
    json.dumps(c)  # plain lists and floats, for the --out JSON


def test_sysrs_per_budget_runs_sysrs_planned_per_budget(monkeypatch):
    """One SySRs run with the budget grid and no horizon (each checkpoint its own
    plan), answering (calls to 95%, calls to 90%) as shares of K n."""
    seen = []

    def fake(data, policy, **kw):
        seen.append((data, policy, kw))
        return _run("mid")

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    out = bt.sysrs_per_budget("sm", 7, 3, (0.1, 0.5), n_replicates=5)
    assert out == (pytest.approx(38 / 80), pytest.approx(36 / 80))
    assert seen == [("sm", "sysrs", dict(K=7, seed=3, budget_fractions=(0.1, 0.5),
                                          n_replicates=5))]
    out, rep = bt.sysrs_per_budget("sm", 7, 3, (0.1,), with_report=True)
    assert out == (pytest.approx(38 / 80), pytest.approx(36 / 80))
    assert rep.accuracy.tolist() == [0.25, 0.5, 1.0, 1.0]


# --- the per-bin table -------------------------------------------------------------------

# six instances, one replicate each, top-two gaps 0.05 ... 0.30: three quantile bins of
# two instances, edges 0.05 / 0.1333 / 0.2167 / 0.30
GAPS6 = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
THETA6 = [[0.5, 0.5 + g] for g in GAPS6]


def _six(rows):
    return _rep(correct=np.asarray(rows, bool), theta=THETA6, instance=list(range(6)))


def _bin_reports():
    # ucbe: the hard bin at 0 / 0.5 / 1 / 1 (38, 36 calls), the middle bin at
    # 0.5 / 1 / 1 / 1 (19, 18), the easy bin at 1 throughout (10, 10)
    ucbe = _six([[0, 0, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1],
                 [1, 1, 1, 1], [1, 1, 1, 1]])
    # pulse_ucb: the hard bin never reaches 95% (0 / 0 / 0.5 / 0.5), the middle bin
    # at 0 / 0.5 / 1 / 1 (38, 36), the easy bin at 0.5 / 1 / 1 / 1 (19, 18)
    pulse = _six([[0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1],
                  [0, 1, 1, 1], [1, 1, 1, 1]])
    return {"sysrs": pulse, "ucbe": ucbe, "pulse_ucb": pulse}


def test_gap_bins_edges_counts_and_calls_per_policy():
    bins = bt.gap_bins(_bin_reports(), 3, n=40)
    assert len(bins) == 3
    edges = [0.05, 0.05 + 0.25 / 3, 0.05 + 0.5 / 3, 0.3]
    for j, b in enumerate(bins):
        assert b["lo"] == pytest.approx(edges[j]) and b["hi"] == pytest.approx(edges[j + 1])
        assert b["lo_items"] == pytest.approx(40 * edges[j])
        assert b["hi_items"] == pytest.approx(40 * edges[j + 1])
        assert b["n_instances"] == 2 and b["n_replicates"] == 2
        assert b["median_gap"] == pytest.approx(np.mean(GAPS6[2 * j: 2 * j + 2]))
    hard, middle, easy = bins
    assert hard["to95"] == {"sysrs": math.inf, "ucbe": pytest.approx(38 / 80),
                            "pulse_ucb": math.inf}
    assert hard["to90"]["ucbe"] == pytest.approx(36 / 80)
    assert middle["to95"]["ucbe"] == pytest.approx(19 / 80)
    assert middle["to90"]["ucbe"] == pytest.approx(18 / 80)
    assert middle["to95"]["pulse_ucb"] == pytest.approx(38 / 80)
    assert middle["to90"]["pulse_ucb"] == pytest.approx(36 / 80)
    assert easy["to95"]["ucbe"] == pytest.approx(10 / 80)
    assert easy["to95"]["pulse_ucb"] == pytest.approx(19 / 80)
    assert easy["to90"]["pulse_ucb"] == pytest.approx(18 / 80)
    assert bt.gap_bins(_bin_reports(), 0, n=40) == []


def test_gap_bins_one_bin_holds_every_instance():
    (b,) = bt.gap_bins(_bin_reports(), 1, n=40)
    assert (b["lo"], b["hi"]) == (pytest.approx(0.05), pytest.approx(0.3))
    assert b["n_instances"] == 6 and b["n_replicates"] == 6


def test_print_gap_table_rows_ratios_and_header(capsys):
    bins = bt.gap_bins(_bin_reports(), 3, n=40)
    pols = ["ucbe", "pulse_ucb", "sysrs"]
    bt.print_gap_table([("toy", 10, bins), ("none", 50, [])], pols)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == ("| dataset | K | gap (pp) | gap (items) | instances | calls to 95% (90%): "
                        "ucbe | pulse_ucb | sysrs | pulse_ucb / ucbe | sysrs / ucbe |")
    assert lines[2] == "|---" * 10 + "|"
    assert lines[2].count("|---") == lines[1].count("|") - 1
    assert lines[3:] == [
        "| toy | 10 | 5.0-13.3 | 2-5 | 2 | 47.5% (45.0%) | >max (>max) | >max (>max) "
        "| >max | >max |",
        "| toy | 10 | 13.3-21.7 | 5-9 | 2 | 23.8% (22.5%) | 47.5% (45.0%) | 47.5% (45.0%) "
        "| 2.00 | 2.00 |",
        "| toy | 10 | 21.7-30.0 | 9-12 | 2 | 12.5% (12.5%) | 23.8% (22.5%) | 23.8% (22.5%) "
        "| 1.90 | 1.90 |",
    ]


def test_print_gap_table_prints_nothing_without_bins(capsys):
    bt.print_gap_table([("toy", 10, []), ("toy", 50, [])], ["ucbe", "sysrs"])
    bt.print_gap_table([], ["ucbe", "sysrs"])
    assert capsys.readouterr().out == ""


# --- main: tuning on the tuning seed, the comparison table, the JSON ---------------------

# calls-to-95% curve of each (policy, seed, a): the tuning seed (1000) favours a = 3 for
# UCB-E and a = 0.3 for pulse_ucb; the report seed (0) would favour other values
TUNE = {("ucbe", 3.0): "fast", ("ucbe", 0.3): "mid", ("pulse_ucb", 0.3): "fast",
        ("pulse_ucb", 10.0): "slow_hi"}
REPORT = {("ucbe", 3.0): "mid", ("ucbe", 10.0): "fast", ("pulse_ucb", 0.3): "slow",
          ("pulse_ucb", 1.0): "fast", ("pulse_ucb", 10.0): "fast", "sysrs": "never"}


@pytest.fixture
def fake_sim(monkeypatch):
    """``main`` without data or simulation: ``load`` and the factorization stubbed, and
    ``simulate_identification`` (its signature kept, for ``package_default``) answering
    from ``TUNE`` / ``REPORT``; every call recorded."""
    calls = []
    real = jaxeval.simulate_identification

    @functools.wraps(real)
    def fake(data, policy, *, seed, a=1.0, **kw):
        calls.append(dict(policy=policy, seed=seed, a=a, **kw))
        if policy == "sysrs":
            return _run_main(REPORT["sysrs"])
        table = TUNE if seed == 1000 else REPORT
        return _run_main(table.get((policy, a), "slow" if seed == 1000 else "never"))

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(bt, "load", lambda name: f"sm:{name}")
    monkeypatch.setattr(bt, "_factors", lambda sm, seed, rank: f"f:{seed}")
    return calls


def _main(tmp_path, capsys, *extra):
    out = tmp_path / "res.json"
    bt.main(["--datasets", "ifeval", "--K", "10", "--reps", "4", "--policies", "ucbe",
             "pulse_ucb", "--gap-bins", "2", "--out", str(out), *extra])
    text = capsys.readouterr().out
    return text, json.loads(out.read_text())


def test_main_tunes_on_the_tuning_seed_and_reports_on_the_report_seed(
        fake_sim, tmp_path, capsys):
    text, saved = _main(tmp_path, capsys)
    res = saved["results"]["ifeval/K10"]
    assert res["chosen"] == {"ucbe": 3.0, "pulse_ucb": 0.3}
    assert res["tuning_to95"]["ucbe/a=3"] == pytest.approx(19 / 80)
    assert res["tuning_to95"]["ucbe/a=0.1"] == pytest.approx(72 / 80)
    assert set(res["tuning_to95"]) == {f"{p}/a={v:g}" for p in ("ucbe", "pulse_ucb")
                                       for v in bt.GRIDS["ucbe"][1]}
    tune = [c for c in fake_sim if c["seed"] == 1000]
    assert len(tune) == 10 and {c["policy"] for c in tune} == {"ucbe", "pulse_ucb"}
    report = [c for c in fake_sim if c["seed"] == 0]
    assert [(c["policy"], c["a"]) for c in report] == [
        ("sysrs", 1.0), ("ucbe", 3.0), ("pulse_ucb", 0.3)]
    # the settings of every run: the budget grid up to --max-frac, 50 instances at K 10
    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5)
    assert fracs[-1] == 0.5
    for c in fake_sim:
        assert c["budget_fractions"] == fracs and c["n_instances"] == 50
        assert c["n_replicates"] == 4 and c["K"] == 10 and c["cs_kinds"] == ("eb",)
    # the factorization of the run's own seed, for the policies that predict
    assert {c["factors"] for c in tune if c["policy"] == "pulse_ucb"} == {"f:1000"}
    assert {c["factors"] for c in report if c["policy"] == "pulse_ucb"} == {"f:0"}
    assert {c.get("factors") for c in fake_sim if c["policy"] == "ucbe"} == {None}
    # the reported figures are the report seed's, at the chosen values
    assert res["report"]["ucbe"] == [pytest.approx(38 / 80), pytest.approx(36 / 80)]
    assert res["report"]["pulse_ucb"] == [pytest.approx(72 / 80), pytest.approx(64 / 80)]
    assert res["report"]["sysrs"] == [math.inf, math.inf]
    assert res["median_gap"] == pytest.approx(0.1)
    assert res["defaults"] == []


def test_main_comparison_table_and_curves(fake_sim, tmp_path, capsys):
    text, saved = _main(tmp_path, capsys)
    lines = text.splitlines()
    head = lines.index("| dataset | K | median gap | tuned | calls to 95% (90%): ucbe | "
                       "pulse_ucb | sysrs | pulse_ucb / ucbe | sysrs / ucbe |")
    assert lines[head + 1] == "|---" * 9 + "|"
    assert lines[head + 2] == ("| ifeval | 10 | 0.100 | ucbe a=3, pulse_ucb a=0.3 | "
                               "47.5% (45.0%) | 90.0% (80.0%) | >max (>max) | 1.89 | >max |")
    curves = saved["curves"]
    assert set(curves) == {f"ifeval/K10/{p}" for p in ("ucbe", "pulse_ucb", "sysrs")}
    assert curves["ifeval/K10/pulse_ucb"]["calls_to_95"] == pytest.approx(72 / 80)
    assert curves["ifeval/K10/sysrs"]["accuracy"] == [0.0, 0.25, 0.5, 0.75]
    assert [c["median_gap"] for c in curves.values()] == [pytest.approx(0.1)] * 3


def test_main_gap_table_from_the_report_runs(fake_sim, tmp_path, capsys):
    text, saved = _main(tmp_path, capsys)
    bins = saved["results"]["ifeval/K10"]["by_gap"]
    # two instances (gaps 0.1 and 0.3), two bins of one instance each
    assert [(b["lo"], b["hi"]) for b in bins] == [(pytest.approx(0.1), pytest.approx(0.2)),
                                                  (pytest.approx(0.2), pytest.approx(0.3))]
    assert [b["n_instances"] for b in bins] == [1, 1]
    assert [b["n_replicates"] for b in bins] == [3, 1]
    # in items of n = 20
    assert bins[0]["lo_items"] == pytest.approx(2.0) and bins[1]["hi_items"] == pytest.approx(6)
    # ucbe ("mid", report seed): replicates 0-2 (gap 0.1) at 0 / 1/3 / 1 / 1:
    # 20 + (0.95 - 1/3) / (2/3) * 20 = 38.5 calls to 95%, 37 to 90%
    assert bins[0]["to95"]["ucbe"] == pytest.approx(38.5 / 80)
    assert bins[0]["to90"]["ucbe"] == pytest.approx(37 / 80)
    # replicate 3 (gap 0.3) right from the first checkpoint
    assert bins[1]["to95"]["ucbe"] == pytest.approx(10 / 80)
    # pulse_ucb ("slow" at a = 0.3): replicates 0-2 at 0 / 1/3 / 2/3 / 1: 40 + 0.85 * 40
    assert bins[0]["to95"]["pulse_ucb"] == pytest.approx(74 / 80)
    assert bins[0]["to95"]["sysrs"] == math.inf
    assert set(bins[0]["to95"]) == {"ucbe", "pulse_ucb", "sysrs"}
    assert "per bin of the true top-two gap" in text
    assert "| ifeval | 10 | 10.0-20.0 | 2-4 | 1 | 48.1% (" in text


def test_main_defaults_run_at_the_package_default(fake_sim, tmp_path, capsys):
    """``--defaults pulse_ucb``: not tuned, run at a = 1 and marked in the table; UCB-E
    still tuned."""
    text, saved = _main(tmp_path, capsys, "--defaults", "pulse_ucb")
    res = saved["results"]["ifeval/K10"]
    assert res["chosen"] == {"ucbe": 3.0, "pulse_ucb": 1.0}
    assert res["defaults"] == ["pulse_ucb"]
    assert not any(c["policy"] == "pulse_ucb" and c["seed"] == 1000 for c in fake_sim)
    assert res["report"]["pulse_ucb"] == [pytest.approx(19 / 80), pytest.approx(18 / 80)]
    assert "| ucbe a=3, pulse_ucb a=1 (default) | 47.5% (45.0%) | 23.8% (22.5%) | " in text
    assert text.count("(default)") == 1
    assert "| 0.50 | >max |" in text


def test_main_refuses_policies_without_ucbe_or_defaults_of_ucbe(fake_sim, capsys):
    with pytest.raises(SystemExit):
        bt.main(["--policies", "pulse_ucb"])
    assert "--policies must include ucbe" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bt.main(["--policies", "ucbe", "pulse_ucb", "--defaults", "ucbe"])
    assert "--defaults: policies of --policies other than ucbe" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bt.main(["--policies", "ucbe", "--defaults", "pulse_ucb"])
    assert "--defaults: policies of --policies other than ucbe" in capsys.readouterr().err
    assert fake_sim == []


def test_main_instances_default_by_k_and_max_frac(fake_sim, tmp_path, capsys):
    _main(tmp_path, capsys, "--K", "11", "--max-frac", "0.3", "--gap-bins", "0")
    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.3)
    assert fracs[-1] == 0.3
    assert {c["n_instances"] for c in fake_sim} == {20}
    assert {c["budget_fractions"] for c in fake_sim} == {fracs}


def test_sysrs_only_table_and_json(fake_sim, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(REPORT, "sysrs", "mid")
    out = tmp_path / "s.json"
    assert bt.main(["--sysrs-only", "--datasets", "musr", "--K", "10", "--reps", "4",
                    "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| musr | 10 | SySRs per budget: 47.5% (45.0%) |" in text
    (c,) = fake_sim
    assert (c["policy"], c["seed"], c["n_instances"], c["n_replicates"]) == ("sysrs", 0, 50, 4)
    saved = json.loads(out.read_text())
    assert saved["results"]["musr/K10"]["report"] == {
        "sysrs": [pytest.approx(38 / 80), pytest.approx(36 / 80)]}


# --- bench_identification's table --------------------------------------------------------


def _c(to95, to90, gap):
    return dict(calls_to_95=to95, calls_to_90=to90, median_gap=gap)


def test_panels_by_k_then_dataset_order_unknown_last():
    curves = {"musr/K50/ucbe": 0, "ifeval/K50/ucbe": 0, "arc/K10/ucbe": 0,
              "other/K10/ucbe": 0, "musr/K10/ucbe": 0, "musr/K10/sysrs": 0,
              "math5/K9/ucbe": 0}
    assert bi._panels(curves) == [("math5", "K9"), ("musr", "K10"), ("arc", "K10"),
                                  ("other", "K10"), ("ifeval", "K50"), ("musr", "K50")]


def test_print_table_cells_gap_and_not_run(capsys):
    curves = {"musr/K10/ucbe": _c(0.2143, 0.1, 0.0125),
              "musr/K10/sysrs": _c(math.inf, 0.5, 0.0125),
              "ifeval/K10/ucbe": _c(0.05, 0.04, 0.3),
              "ifeval/K50/sysrs": _c(0.5, 0.25, 0.0456)}
    bi.print_table(curves, ["ucbe", "sysrs"])
    assert capsys.readouterr().out.splitlines() == [
        "| dataset | K | median gap | calls to 95% (90%): ucbe | sysrs |",
        "|---|---|---|---|---|",
        "| ifeval | 10 | 0.300 | 5.0% (4.0%) | not run |",
        "| musr | 10 | 0.013 | 21.4% (10.0%) | >max (50.0%) |",
        "| ifeval | 50 | 0.046 | not run | 50.0% (25.0%) |",
    ]
    # a panel of none of the policies asked for has no row (it showed "not run" in every
    # cell and a NaN gap)
    bi.print_table(curves, ["ucbe"])
    assert capsys.readouterr().out.splitlines()[2:] == [
        "| ifeval | 10 | 0.300 | 5.0% (4.0%) |",
        "| musr | 10 | 0.013 | 21.4% (10.0%) |",
    ]


def test_gap_bins_when_every_instance_has_the_same_gap():
    """All report instances tie in their top-two gap (``--instances 1``, say): by_gap
    returns one bin with equal edges, and those edges given back are that bin (they were
    refused, so bench_tuning's main crashed before writing its results)."""
    correct = np.array([[0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]], bool)
    r = _rep(correct=correct, theta=[[0.5, 0.6]] * 4, instance=[0, 0, 0, 0])
    (one,) = r.by_gap(3)
    assert one.lo == one.hi == pytest.approx(0.1) and one.n_replicates == 4
    (again,) = r.by_gap(edges=[one.lo, one.hi])
    np.testing.assert_array_equal(again.accuracy, one.accuracy)
    assert again.n_replicates == 4 and again.n_instances == 1
    with pytest.raises(ValueError, match="edges: expected at least two increasing"):
        r.by_gap(edges=[0.1, 0.1, 0.1])
    (row,) = bt.gap_bins({"ucbe": r, "sysrs": r}, 3, n=40)
    assert row["n_replicates"] == 4 and row["lo_items"] == pytest.approx(4.0)
    assert row["to95"]["ucbe"] == row["to95"]["sysrs"] == one.calls_to(0.95, fraction=True)
