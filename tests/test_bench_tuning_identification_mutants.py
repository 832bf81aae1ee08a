"""Gaps found by a mutation review of ``benchmarks/bench_tuning.py`` and
``benchmarks/bench_identification.py`` beyond their tables (``test_bench_tables_mutants``):
the ``_sync`` rows and the policies that get the factorization, the tie break of the
tuning grid, the argument defaults, the figures (which policies, which replicate count,
what is drawn where), the ``--replot`` round trips, and ``bench_identification``'s own
``main`` (settings passed to every run, the curves it keeps, the save after every policy).

Nothing is simulated or timed: ``simulate_identification`` is replaced by fakes that hand
back the hand-built reports of ``test_bench_tables_mutants`` (K = 4, n = 20, budgets 10 /
20 / 40 / 80 calls, so K n = 80) and record every call; figures are drawn on recording
axes where the values matter."""

from __future__ import annotations

import inspect
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from test_bench_tables_mutants import THETA_MAIN, _run_main
from test_bench_tuning import _bin
from test_simulate_report_mutants import _rep

import jaxeval
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_identification as bi  # noqa: E402
import bench_tuning as bt  # noqa: E402

FRACS_05 = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5)


def _never_hi():
    """Never reaches 90% (0.25 / 0.5 / 0.75 / 0.5), with a larger mean accuracy (0.5) than
    ``never`` (0.375)."""
    rows = [[1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]]
    return _rep(correct=np.asarray(rows, bool), theta=THETA_MAIN, instance=[0, 0, 0, 1],
                settings=dict(K=4, n_items=20))


# --- bench_tuning's main with a recording fake --------------------------------------------


@pytest.fixture
def sim(monkeypatch):
    """``simulate_identification`` answering from ``plan``: ``(seed, policy, value)`` (the
    grid value: ``a`` or ``scale``), else ``policy``, else ``"mid"``; a plan entry is a
    ``_ROWS`` kind or a report. Its defaults are ``a = 1`` and ``scale = 0.5`` (different,
    so that a default taken from the wrong keyword shows). ``load`` and the factorization
    are stubbed; every call recorded."""
    calls, plan, factors = [], {}, []

    def fake(data, policy, *, seed, **kw):
        calls.append(dict(data=data, policy=policy, seed=seed, **kw))
        value = kw.get("a", kw.get("scale"))
        kind = plan.get((seed, policy, value), plan.get(policy, "mid"))
        return _run_main(kind) if isinstance(kind, str) else kind

    kwo = inspect.Parameter.KEYWORD_ONLY
    fake.__signature__ = inspect.Signature([
        inspect.Parameter("data", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("policy", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("a", kwo, default=1.0), inspect.Parameter("scale", kwo, default=0.5)])

    def fake_factors(sm, seed, rank):
        factors.append((sm, seed, rank))
        return f"f:{seed}"

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(bt, "load", lambda name: f"sm:{name}")
    monkeypatch.setattr(bt, "_factors", fake_factors)
    return types.SimpleNamespace(calls=calls, plan=plan, factors=factors)


def _tmain(tmp_path, capsys, *argv):
    out = tmp_path / "res.json"
    bt.main(["--datasets", "ifeval", "--K", "10", "--reps", "4", "--out", str(out), *argv])
    return capsys.readouterr().out, json.loads(out.read_text())


def test_sync_rows_run_their_kernel_on_one_order_and_pulse_tunes_its_scale(
        sim, tmp_path, capsys):
    """``ucbe_sync`` / ``pulse_ucb_sync`` run the kernels ``ucbe`` / ``pulse_ucb`` with
    ``synchronized=True`` (plain names: each arm its own order); every prediction policy,
    the ``_sync`` one included, gets the factorization of the run's own seed; ``pulse`` is
    tuned and reported on its exploration ``scale``."""
    sim.plan[(1000, "pulse", 2.0)] = "fast"
    sim.plan[(1000, "pulse_ucb", 3.0)] = "fast"
    sim.plan[(1000, "ucbe", 0.3)] = "fast"
    text, saved = _tmain(tmp_path, capsys, "--policies", "ucbe", "ucbe_sync",
                         "pulse_ucb_sync", "pulse", "--gap-bins", "0")
    seen = {(c["seed"], c["policy"], bool(c.get("synchronized")), c.get("factors"))
            for c in sim.calls}
    assert seen == {(s, "ucbe", False, None) for s in (0, 1000)} | {
        (s, "ucbe", True, None) for s in (0, 1000)} | {
        (s, "pulse_ucb", True, f"f:{s}") for s in (0, 1000)} | {
        (s, "pulse", False, f"f:{s}") for s in (0, 1000)} | {(0, "sysrs", False, None)}
    res = saved["results"]["ifeval/K10"]
    # (the fake answers by kernel policy and value: each _sync row picks its kernel's best)
    assert res["chosen"] == {"ucbe": 0.3, "ucbe_sync": 0.3, "pulse_ucb_sync": 3.0,
                             "pulse": 2.0}
    assert {k for k in res["tuning_to95"] if k.startswith("pulse/")} == {
        f"pulse/scale={v:g}" for v in bt.GRIDS["pulse"][1]}
    pulse_report = [c for c in sim.calls if c["seed"] == 0 and c["policy"] == "pulse"]
    assert len(pulse_report) == 1
    assert pulse_report[0]["scale"] == 2.0 and "a" not in pulse_report[0]
    assert "pulse scale=2" in text


def test_tuning_ties_go_to_the_largest_mean_accuracy(sim, tmp_path, capsys):
    """Equal calls to 95% (72 calls at a = 0.1 and a = 0.3): the larger mean accuracy
    (a = 0.3) wins; a grid that never reaches 95%: the largest mean accuracy (a = 3),
    not the first value of the grid."""
    sim.plan.update({(1000, "ucbe", 0.1): "slow", (1000, "ucbe", 0.3): "slow_hi",
                     (1000, "ucbe", 3.0): "never"})
    sim.plan.update({(1000, "pulse_ucb", v): "never" for v in bt.GRIDS["pulse_ucb"][1]})
    sim.plan[(1000, "pulse_ucb", 3.0)] = _never_hi()
    sim.plan["ucbe"] = "never"
    _, saved = _tmain(tmp_path, capsys, "--policies", "ucbe", "pulse_ucb", "--gap-bins", "0")
    res = saved["results"]["ifeval/K10"]
    assert res["chosen"] == {"ucbe": 0.3, "pulse_ucb": 3.0}
    assert res["tuning_to95"]["pulse_ucb/a=3"] == math.inf


def test_defaults_run_at_the_default_of_the_grids_own_parameter(sim, tmp_path, capsys):
    """``--defaults pulse``: PULSE runs at ``simulate_identification``'s default ``scale``
    (0.5 in this fake), not at the default of ``a``."""
    _, saved = _tmain(tmp_path, capsys, "--policies", "ucbe", "pulse", "--defaults", "pulse",
                      "--gap-bins", "0")
    assert saved["results"]["ifeval/K10"]["chosen"]["pulse"] == 0.5
    assert not any(c["policy"] == "pulse" and c["seed"] == 1000 for c in sim.calls)


def test_main_argument_defaults(sim, tmp_path, capsys):
    """Without options: the five datasets, K = 10, 40 replicates, 50 instances, budgets
    to 50% of K n, rank 8, tuning seed 1000, report seed 0 and three gap bins."""
    out = tmp_path / "res.json"
    bt.main(["--policies", "ucbe", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert list(saved["results"]) == [f"{d}/K10" for d in bt.DATASETS]
    assert {c["data"] for c in sim.calls} == {f"sm:{d}" for d in bt.DATASETS}
    for c in sim.calls:
        assert (c["K"], c["n_replicates"], c["n_instances"], c["rank"]) == (10, 40, 50, 8)
        assert c["budget_fractions"] == FRACS_05
    assert {c["seed"] for c in sim.calls if c["policy"] == "sysrs"} == {0}
    assert sorted({c["seed"] for c in sim.calls}) == [0, 1000]
    assert len([c for c in sim.calls if c["seed"] == 1000]) == 5 * len(bt.GRIDS["ucbe"][1])
    assert {(seed, rank) for _, seed, rank in sim.factors} == {(0, 8), (1000, 8)}
    for r in saved["results"].values():
        assert r["by_gap"] and len(r["by_gap"]) <= 3
    assert saved["args"]["gap_bins"] == 3


def test_rank_reaches_every_run_and_the_factorizations(sim, tmp_path, capsys):
    _tmain(tmp_path, capsys, "--policies", "ucbe", "pulse_ucb", "--rank", "5",
           "--gap-bins", "0")
    assert {c["rank"] for c in sim.calls} == {5}
    assert {rank for *_, rank in sim.factors} == {5}
    sim.calls.clear()
    out = tmp_path / "s.json"
    bt.main(["--sysrs-only", "--datasets", "musr", "--K", "10", "--rank", "5",
             "--max-frac", "0.3", "--out", str(out)])
    (c,) = sim.calls
    assert c["rank"] == 5 and c["budget_fractions"][-1] == 0.3


def test_gap_table_has_every_policy_and_sysrs(sim, tmp_path, capsys):
    text, _ = _tmain(tmp_path, capsys, "--policies", "ucbe", "pulse_ucb", "--gap-bins", "2")
    assert ("| dataset | K | gap (pp) | gap (items) | instances | calls to 95% (90%): "
            "ucbe | pulse_ucb | sysrs | pulse_ucb / ucbe | sysrs / ucbe |") in text.splitlines()


@pytest.fixture
def plots(monkeypatch):
    """Both figure functions replaced by recorders of (policies, reps, what they got)."""
    drawn = []

    def curves(curves, policies, path, reps=None):
        drawn.append(("curves", list(policies), reps, sorted(curves)))

    def gap(results, policies, path, *, reps=None):
        drawn.append(("gap", list(policies), reps, sorted(results)))

    monkeypatch.setattr(bi, "plot_curves", curves)
    monkeypatch.setattr(bt, "plot_gap_bins", gap)
    return drawn


def test_figures_from_main_and_from_its_saved_json_alike(sim, plots, tmp_path, capsys):
    """``--plot`` / ``--gap-plot`` draw every policy and SySRs with the replicate count;
    ``--replot`` of the ``--out`` file draws the same figures again."""
    png, gpng = str(tmp_path / "c.png"), str(tmp_path / "g.png")
    _tmain(tmp_path, capsys, "--policies", "ucbe", "pulse_ucb", "--gap-bins", "2",
           "--plot", png, "--gap-plot", gpng)
    pols = ["ucbe", "pulse_ucb", "sysrs"]
    keys = [f"ifeval/K10/{p}" for p in pols]
    expected = [("curves", pols, 4, sorted(keys)), ("gap", pols, 4, ["ifeval/K10"])]
    assert plots == expected
    plots.clear()
    assert bt.main(["--replot", str(tmp_path / "res.json"), "--plot", png,
                    "--gap-plot", gpng]) == 0
    assert plots == expected


def test_replot_of_a_sysrs_only_file_refuses_the_curves(sim, tmp_path, capsys):
    out = tmp_path / "s.json"
    bt.main(["--sysrs-only", "--datasets", "musr", "--K", "10", "--out", str(out)])
    with pytest.raises(SystemExit, match="s.json holds no curves"):
        bt.main(["--replot", str(out), "--plot", str(tmp_path / "c.png")])


# --- plot_gap_bins: what is drawn where ----------------------------------------------------


class _Ax:
    """Axes that record every call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *a, **k: self.calls.append((name, a, k))

    def get(self, name):
        return [(a, k) for n, a, k in self.calls if n == name]


@pytest.fixture
def axes(monkeypatch):
    made = {}

    def grid(n, **kw):
        made["n"] = n
        made["axes"] = np.array([[_Ax() for _ in range(n)]], dtype=object)
        return "fig", made["axes"]

    def save(fig, axes, n_panels, path, *, ylabel, title, legend_loc):
        made["saved"] = (n_panels, path, title)

    monkeypatch.setattr(bi, "panel_grid", grid)
    monkeypatch.setattr(bi, "save_panels", save)
    return made


def test_gap_bars_values_labels_hatched_tops_and_titles(axes):
    """One bar per policy and bin at its calls to 95% (in %), labelled with the value; a
    bin never taken to 95% is a hatched bar to the top of the panel (1.15 x the largest
    finite bar; 100 when nothing is finite); results without bins get no panel."""
    pols = ["ucbe", "pulse_ucb", "sysrs"]
    bins = [_bin(0.0, 0.02, 5, {"ucbe": 0.4, "pulse_ucb": 0.3, "sysrs": math.inf}),
            _bin(0.02, 0.1, 5, {"ucbe": 0.1, "pulse_ucb": 0.05, "sysrs": 0.12})]
    never = [_bin(0.0, 0.1, 3, {p: math.inf for p in pols})]
    results = {"toy/K10": dict(by_gap=bins), "toy/K50": dict(by_gap=[]),
               "toy/K20": dict(by_gap=never)}
    bt.plot_gap_bins(results, pols, "g.png", reps=8)
    assert axes["n"] == 2
    n_panels, path, title = axes["saved"]
    assert (n_panels, path) == (2, "g.png") and "8 replicates per (dataset, K)" in title
    ax, ax_never = axes["axes"].flat
    w = 0.8 / 3
    assert ax.get("set_ylim") == [((0, pytest.approx(46.0)), {})]
    assert ax.get("set_title")[0][0] == ("toy, K = 10",)
    bars = {k.get("label"): (a[0], a[1]) for a, k in ax.get("bar") if "label" in k}
    np.testing.assert_allclose(bars["ucbe"][0], [-w, 1 - w])
    np.testing.assert_allclose(bars["ucbe"][1], [40, 10])
    np.testing.assert_allclose(bars["pulse_ucb"][0], [0, 1])
    np.testing.assert_allclose(bars["pulse_ucb"][1], [30, 5])
    np.testing.assert_allclose(bars["sysrs"][0], [w, 1 + w])
    np.testing.assert_allclose(bars["sysrs"][1], [0, 12])
    (hatched,) = [(a, k) for a, k in ax.get("bar") if k.get("hatch")]
    np.testing.assert_allclose(hatched[0][0], [w])
    np.testing.assert_allclose(hatched[0][1], [46.0])
    labels = sorted((round(float(a[0]), 4), round(float(a[1]), 4), a[2])
                    for a, _ in ax.get("text"))
    assert [lab for *_, lab in labels] == ["40", "30", "10", "5", "12"]
    assert [y for _, y, _ in labels] == [40, 30, 10, 5, 12]
    # nothing finite: hatched bars to 100
    assert ax_never.get("set_ylim") == [((0, 100.0), {})]
    tops = [a[1] for a, k in ax_never.get("bar") if k.get("hatch")]
    assert len(tops) == 3 and all(np.allclose(t, [100.0]) for t in tops)
    assert ax_never.get("text") == []


# --- load and the factorization ----------------------------------------------------------


def test_load_of_a_shared_file_and_its_absence_named(monkeypatch, tmp_path):
    monkeypatch.setattr(bt, "SHARED", tmp_path)
    with pytest.raises(SystemExit, match="--datasets tailored: .*tailoredbench_gsm8k.npz "
                                         "not found"):
        bt.load("tailored")
    (tmp_path / "tailoredbench_gsm8k.npz").write_bytes(b"")
    seen = []
    monkeypatch.setattr(jaxeval, "load", lambda *a, **k: seen.append((a, k)) or "sm")
    assert bt.load("tailored") == "sm"
    assert seen == [((str(tmp_path / "tailoredbench_gsm8k.npz"),),
                     dict(duplicate_names="rename"))]


class _SM:
    """A score matrix stand-in: ``drop_duplicates`` / ``split`` recorded."""

    def __init__(self, name="sm", n_models=10):
        self.name, self.n_models, self.splits = name, n_models, []

    def drop_duplicates(self):
        return self

    def split(self, sizes, seed):
        self.splits.append((list(sizes), seed))
        return f"train:{self.name}", "rest"


def test_factors_fit_on_half_the_models_with_the_runs_seed_and_rank(monkeypatch):
    fits = []
    monkeypatch.setattr(jaxeval, "fit_factorization",
                        lambda train, **kw: fits.append((train, kw)) or "F")
    sm = _SM(n_models=11)
    assert bt._factors(sm, 7, 3) == "F"
    assert sm.splits == [([5], 7)]
    assert fits == [("train:sm", dict(rank=3, rho=1.0, seed=7, num_steps=1000))]


# --- bench_identification's main -----------------------------------------------------------


@pytest.fixture
def isim(monkeypatch):
    calls, plan, loads, fits = [], {}, [], []

    def fake(data, policy, **kw):
        calls.append(dict(data=data, policy=policy, **kw))
        kind = plan.get(policy, "mid")
        if isinstance(kind, Exception):
            raise kind
        return _run_main(kind)

    def load(name):
        loads.append(name)
        return _SM(name)

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(jaxeval, "load", load)
    monkeypatch.setattr(jaxeval, "fit_factorization",
                        lambda train, **kw: fits.append((train, kw)) or "F")
    return types.SimpleNamespace(calls=calls, plan=plan, loads=loads, fits=fits)


def _imain(tmp_path, *argv):
    out = tmp_path / "id.json"
    bi.main(["--datasets", "musr", "--reps", "3", "--out", str(out), *argv])
    return json.loads(out.read_text())


def test_identification_passes_every_setting_to_every_run(isim, tmp_path, capsys):
    _imain(tmp_path, "--K", "10", "50", "--policies", "ucbe", "pulse", "--seed", "5",
           "--a", "0.3", "--scale", "2", "--batch", "4", "--rank", "6")
    assert isim.loads == ["oll2_musr"]
    (train, kw), = isim.fits
    assert train == "train:oll2_musr" and kw["rank"] == 6 and kw["seed"] == 5
    assert len(isim.calls) == 4
    for c in isim.calls:
        assert (c["a"], c["scale"], c["batch_size"], c["rank"]) == (0.3, 2.0, 4, 6)
        assert (c["seed"], c["n_replicates"], c["factors"]) == (5, 3, "F")
        assert c["budget_fractions"] == FRACS_05
        assert c["n_instances"] == (10 if c["K"] == 10 else 5)
    assert [(c["K"], c["policy"]) for c in isim.calls] == [
        (10, "ucbe"), (10, "pulse"), (50, "ucbe"), (50, "pulse")]


def test_identification_split_uses_the_seed(isim, tmp_path, monkeypatch, capsys):
    sms = []
    monkeypatch.setattr(jaxeval, "load", lambda name: sms.append(_SM(name)) or sms[-1])
    _imain(tmp_path, "--policies", "ucbe", "--seed", "9")
    assert sms[0].splits == [([5], 9)]
    assert isim.fits == [] and isim.calls[0]["factors"] is None


def test_identification_curves_and_table(isim, tmp_path, capsys):
    """Each curve keeps calls to 95% and 90% as shares of K n, the family coverage and
    the median top-two gap of the instances (0.1 here; best minus worst would be 0.5)."""
    isim.plan["sysrs"] = "fast"
    saved = _imain(tmp_path, "--policies", "ucbe", "sysrs")
    c = saved["curves"]["musr/K10/ucbe"]
    assert c["calls_to_95"] == pytest.approx(38 / 80)
    assert c["calls_to_90"] == pytest.approx(36 / 80)
    assert c["median_gap"] == pytest.approx(0.1)
    assert c["coverage_family"] == [1.0]
    assert c["budget_fractions"] == [0.125, 0.25, 0.5, 1.0]
    assert saved["curves"]["musr/K10/sysrs"]["calls_to_90"] == pytest.approx(18 / 80)
    assert "| musr | 10 | 0.100 | 47.5% (45.0%) | 23.8% (22.5%) |" in capsys.readouterr().out


def test_identification_saves_after_every_policy(isim, tmp_path, capsys):
    """An interrupted run keeps the curves of the policies that finished."""
    isim.plan["sysrs"] = RuntimeError("interrupted")
    out = tmp_path / "id.json"
    with pytest.raises(RuntimeError):
        bi.main(["--datasets", "musr", "--policies", "ucbe", "sysrs", "--out", str(out)])
    assert list(json.loads(out.read_text())["curves"]) == ["musr/K10/ucbe"]


def test_identification_refuses_unknown_datasets_by_name(isim, capsys):
    with pytest.raises(SystemExit):
        bi.main(["--datasets", "musr", "foo"])
    assert "--datasets: unknown ['foo']" in capsys.readouterr().err
    assert isim.loads == [] and isim.calls == []


def test_identification_replot_later_files_win_and_reps_joined(isim, tmp_path, capsys,
                                                               monkeypatch):
    drawn = []
    monkeypatch.setattr(bi, "plot_curves", lambda c, p, path, reps=None: drawn.append(reps))
    curve = dict(calls_to_95=0.2, calls_to_90=0.1, median_gap=0.05)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(dict(args=dict(reps=8), curves={"musr/K10/ucbe": curve})))
    b.write_text(json.dumps(dict(args=dict(reps=4), curves={
        "musr/K10/ucbe": dict(curve, calls_to_95=0.3)})))
    bi.main(["--replot", str(a), str(b), "--policies", "ucbe", "--plot", "p.png"])
    assert "| musr | 10 | 0.050 | 30.0% (10.0%) |" in capsys.readouterr().out
    assert drawn == ["4/8"]
    assert isim.calls == []


def test_panel_grid_four_a_row_and_unused_panels_hidden(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    fig, axes = bi.panel_grid(3)
    assert axes.shape == (1, 3)
    fig, axes = bi.panel_grid(5)
    assert axes.shape == (2, 4)
    axes.flat[0].plot([0, 1], [0, 1], label="x")
    bi.save_panels(fig, axes, 5, tmp_path / "p.png", ylabel="acc", title="t",
                   legend_loc="lower right")
    assert [ax.get_visible() for ax in axes.flat] == [True] * 5 + [False] * 3
    assert [ax.get_ylabel() for ax in axes[:, 0]] == ["acc", "acc"]
    assert (tmp_path / "p.png").exists()


def test_plot_curves_titles_carry_each_panels_own_gap(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    got = {}
    monkeypatch.setattr(bi, "save_panels", lambda fig, axes, n, path, **kw: got.update(
        titles=[ax.get_title() for ax in axes.flat[:n]], n=n))
    c = dict(budget_fractions=[0.1, 0.5], accuracy=[0.5, 1.0])
    curves = {"ifeval/K10/ucbe": dict(c, median_gap=0.1),
              "ifeval/K50/ucbe": dict(c, median_gap=0.3)}
    bi.plot_curves(curves, ["ucbe"], str(tmp_path / "c.png"))
    assert got == dict(n=2, titles=["ifeval, K = 10 (median gap 0.100)",
                                    "ifeval, K = 50 (median gap 0.300)"])


# --- fixes the review found ---------------------------------------------------------------


@pytest.mark.parametrize("script", ["tuning", "tuning_sysrs", "identification"])
def test_max_frac_below_the_grid_refused_by_name_before_any_work(sim, isim, script, tmp_path,
                                                                 capsys):
    """A ``--max-frac`` that leaves no budget is an argparse error naming it, before any
    data is loaded or factorization fitted (it used to fail in the first run)."""
    argv = ["--datasets", "ifeval", "--max-frac", "0.001", "--out", str(tmp_path / "o.json")]
    main = bi.main if script == "identification" else bt.main
    with pytest.raises(SystemExit):
        main(argv + (["--sysrs-only"] if script == "tuning_sysrs" else []))
    err = capsys.readouterr().err
    assert "--max-frac: 0.001 leaves no budget" in err
    assert f"{DEFAULT_BUDGET_FRACTIONS[0]:g}" in err
    assert sim.calls == sim.factors == isim.calls == isim.loads == isim.fits == []


@pytest.mark.parametrize("blob", ["not json", json.dumps({"args": {"reps": 4}}),
                                  json.dumps({"curves": {}}), json.dumps([1, 2])])
def test_identification_replot_of_a_file_not_its_own_names_it(isim, tmp_path, blob):
    bad = tmp_path / "bad.json"
    bad.write_text(blob)
    with pytest.raises(SystemExit, match=r"--replot: .*bad\.json is not a results file"):
        bi.main(["--replot", str(bad)])
    with pytest.raises(SystemExit, match=r"--replot: .*nope\.json is not a results file"):
        bi.main(["--replot", str(tmp_path / "nope.json")])


def test_identification_instances_help_says_what_the_code_does(capsys):
    with pytest.raises(SystemExit):
        bi.main(["--help"])
    assert "default 10 (K <= 10) / 5 (larger K)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", ["bench_top2", "bench_banditeval"])
def test_max_frac_below_the_grid_refused_by_the_other_scripts_too(name, monkeypatch, capsys):
    """The same check in the other scripts with ``--max-frac``, before any data is read
    (``bench_banditeval`` checks it even where banditeval is not installed)."""
    import importlib

    mod = importlib.import_module(name)

    def no_load(*a, **k):
        raise AssertionError("data loaded before --max-frac was checked")

    monkeypatch.setattr(jaxeval, "load", no_load)
    monkeypatch.setattr(mod, "load", no_load, raising=False)
    with pytest.raises(SystemExit):
        mod.main(["--max-frac", "0"])
    assert "--max-frac: 0 leaves no budget" in capsys.readouterr().err
