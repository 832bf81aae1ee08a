"""Gaps a fourth mutation review of the study report (``jaxeval._report``) found: which
settings ``reports_summary`` compares, what it takes from which report (replicates,
anytime coverage, calls spent, the policy, the top-2 gaps of every report), the naive
curve's panel, the coverage band and axes, the anchor table's undefined tau-b, one seed
over several k, the anchor figure's tau-b error bars, the replicate summary's NaN counts
and shown sds, and strict JSON of an infinite mean.

Each test fails on a plausible bug the rest of the suite let through. The
``IdentificationReport`` s are built by hand (no simulation): K = 3 arms, n = 10 items,
budgets 15 and 30 calls (50% and 100% of K*n), replicate i's top-2 gap given."""

import json

import numpy as np
import pytest
from test_report_identification_mutants import _dyadic_results
from test_report_mlp_mutants import _line, anchors_summary, figures, ident  # noqa: F401
from test_report_third_mutants import _dyadic_study

from jaxeval._study import study_from_dict

_SETTINGS = {"data": "synthetic(n=10, rank=4)", "K": 3, "n_items": 10, "n_train": None,
             "budgets": [15, 30], "alpha": 0.05, "cs_kinds": ["eb", "hoeffding"],
             "stop_kind": "eb", "mode": "budget", "corruption": "none", "bias": 0.3,
             "synthetic": {"n_items": 10, "rank": 4, "model_scale": 1.0,
                           "difficulty_scale": 1.5, "difficulty_mean": 0.0}}


def _report(policy="ucbe", gaps=(0.1, 0.2, 0.3, 0.4), cs_kinds=("eb", "hoeffding"),
            **settings):
    """A hand-built report: replicate i's arms are 0.5, 0.5 - gaps[i], 0; arm 0 is
    recommended at the second checkpoint, arm 1 at the first (wrong: accuracy 0, 1).
    Anytime coverage (eb 0.5) is below the last checkpoint's (eb 0.75)."""
    from jaxeval._simulate import IdentificationReport

    R, Q = len(gaps), len(cs_kinds)
    theta = np.array([[0.5, 0.5 - g, 0.0] for g in gaps], np.float32)
    rec = np.tile(np.array([1, 0], np.int32), (R, 1))
    correct = rec == 0
    cov_at = np.array([[1.0, 0.75], [1.0, 1.0]])[:Q]
    return IdentificationReport(
        budgets=np.array([15, 30]), budget_fractions=np.array([0.5, 1.0]),
        accuracy=correct.mean(axis=0), accuracy_se=np.zeros(2),
        calls_used=np.array([14.5, 29.0]), cs_kinds=tuple(cs_kinds),
        coverage_family=np.array([0.5, 1.0])[:Q], coverage_family_at=cov_at,
        coverage_arm=np.ones(Q), width=np.array([[0.2, 0.1], [0.3, 0.15]])[:Q],
        naive_coverage_family=np.full(2, np.nan), status_counts=np.zeros((2, 5), np.int64),
        correct=correct, recommended=rec, theta=theta, instance=np.full(R, -1, np.int32),
        instances=np.zeros((0, 3), np.int64), pool_models=np.array([], str),
        settings={**_SETTINGS, "policy": policy, "cs_kinds": list(cs_kinds), **settings},
        calls=np.tile(np.array([14, 29]), (R, 1)))


# ===================================================== reports_summary
@pytest.mark.parametrize("what, value", [("alpha", 0.1), ("stop_kind", "hoeffding"),
                                         ("n_train", 20), ("bias", 0.5)])
def test_reports_of_another_alpha_stopping_kind_training_or_bias_are_refused(what, value):
    """alpha, the stopping kind, the training models and the corruption's bias make the
    problem: a report that differs in one is refused, naming the setting."""
    from jaxeval._report import reports_summary

    with pytest.raises(ValueError, match=rf"reports\['b'\]: {what} is {value!r}, but "):
        reports_summary({"a": _report(), "b": _report("uniform", **{what: value})})


def test_reports_of_other_interval_kinds_are_refused():
    """Reports whose interval kinds differ have no common coverage panels: refused
    naming cs_kinds."""
    from jaxeval._report import reports_summary

    with pytest.raises(ValueError, match=r"reports\['b'\]: cs_kinds is \['eb'\], but "
                       r"\['eb', 'hoeffding'\]"):
        reports_summary({"a": _report(), "b": _report("uniform", cs_kinds=("eb",))})


def test_reports_summary_takes_each_policys_numbers_from_its_own_report():
    """A report of 2 replicates beside one of 4: the summary's replicates are the fewest
    (2); b's entry has its own replicates, Wilson interval over 2, policy and calls
    spent; anytime coverage is the report's coverage_family (0.5, not the last
    checkpoint's 0.75); the median top-2 gap is over every report's replicates
    (0.1, 0.2, 0.3, 0.4, 0.4, 0.4: 0.35, not a's 0.25)."""
    from jaxeval._report import format_summary, reports_summary, wilson_interval

    s = reports_summary({"a": _report(), "b": _report("uniform", gaps=(0.4, 0.4))})
    assert s["replicates"] == 2
    e = s["policies"]["b"]
    assert e["replicates"] == 2 and e["policy"] == "uniform"
    assert s["policies"]["a"]["policy"] == "ucbe"
    lo, hi = wilson_interval(np.array([0, 2]), 2)
    np.testing.assert_allclose(e["accuracy_ci95"], [lo, hi])
    np.testing.assert_allclose(e["calls_mean"], [14.5, 29.0])
    assert e["coverage"]["eb"]["family_wise_all_checkpoints"] == 0.5
    assert e["coverage"]["hoeffding"]["family_wise_all_checkpoints"] == 1.0
    assert s["problem"]["median_top2_gap"] == pytest.approx(0.35)
    row = next(ln for ln in format_summary(s).splitlines() if ln.strip().startswith("b "))
    assert row.split()[-2:] == ["50.0%", "100.0%"]  # cover(eb), cover(hoeffding)


# ======================================================== the figures
def test_naive_curve_goes_on_the_panel_of_the_summarys_naive_kind(ident, tmp_path,  # noqa: F811
                                                                  figures):  # noqa: F811
    """A report's naive curve uses its stopping kind's widths ("naive_kind"): with
    hoeffding it is drawn on the hoeffding panel (the first), not on eb's."""
    from jaxeval._report import plot_study

    s = json.loads(json.dumps(ident))
    s["naive_kind"] = "hoeffding"
    plot_study(s, tmp_path)
    h_ax, eb_ax = figures[1].axes[:2]
    naive = "same widths around the naive pooled estimate"
    np.testing.assert_allclose(_line(h_ax, naive).get_ydata(), [0.75, 0.75, 0.75])
    assert not [ln for ln in eb_ax.get_lines() if naive in str(ln.get_label())]


def test_coverage_band_is_for_the_replicates_summarised(ident, tmp_path, figures):  # noqa: F811
    """Partial results: the band and its label are for the 4 replicates held, not the
    100 planned."""
    from jaxeval._report import binomial_band, plot_study

    s = json.loads(json.dumps(ident))
    s["replicates_planned"] = 100
    plot_study(s, tmp_path)
    eb_ax = figures[1].axes[1]
    band = next(p for p in eb_ax.patches if "binomial" in str(p.get_label()))
    assert band.get_label() == "binomial 95% band (4 reps)"
    assert (band.get_y(), band.get_y() + band.get_height()) == pytest.approx(
        binomial_band(0.9, 4))


def test_coverage_axes_stop_at_zero(ident, tmp_path, figures):  # noqa: F811
    """A coverage of 0 at a budget: the axis starts at 0, not below it."""
    from jaxeval._report import plot_study

    s = json.loads(json.dumps(ident))
    s["policies"]["ucbe"]["coverage"]["hoeffding"]["family_wise"] = [0.0, 0.5, 0.5]
    plot_study(s, tmp_path)
    for ax in figures[1].axes[:2]:
        assert ax.get_ylim()[0] == 0.0


def test_widths_panels_name_their_y_axis(ident, tmp_path, figures):  # noqa: F811
    from jaxeval._report import plot_study

    plot_study(ident, tmp_path)
    for ax in figures[2].axes[:2]:
        assert ax.get_ylabel() == "mean interval width (accuracy)"


def test_axes_leave_room_above_full_accuracy_coverage_and_bars(ident, tmp_path,  # noqa: F811
                                                               figures):  # noqa: F811
    """Accuracy and coverage of 100% (drawn here: UCB-E reaches 1.0) sit inside the
    axes, not on their top edge; the bar axis goes above 100% of K*n so a bar of 100%
    keeps its label inside."""
    from jaxeval._report import plot_study

    plot_study(ident, tmp_path)
    assert figures[0].axes[0].get_ylim()[1] > 1.0
    for ax in figures[1].axes[:2]:
        assert ax.get_ylim()[1] > 1.0
    assert figures[3].axes[0].get_ylim()[1] > 100.0


def test_anchor_mae_axis_starts_at_zero(anchors_summary, tmp_path, figures):  # noqa: F811
    """MAE is an error size: its axis starts at 0 (MAEs of 9 and 14 points here)."""
    from jaxeval._report import plot_study

    plot_study(anchors_summary, tmp_path)
    assert figures[0].axes[0].get_ylim()[0] == 0.0


def test_anchor_figure_tau_bars_are_tau_sd_and_both_panels_ticked_at_k(
        anchors_summary, tmp_path, figures):  # noqa: F811
    """The tau-b panel's error bars are tau-b's sd (0.1: bars 0.2 long, not MAE's 4),
    both panels are ticked at the k of the study, and the title counts the 3 splits
    (seeds), not the 2 values of k."""
    from jaxeval._report import plot_study

    plot_study(anchors_summary, tmp_path)
    fig = figures[0]
    mae_ax, tau_ax = fig.axes[:2]
    (cont,) = tau_ax.containers
    segs = cont.lines[2][0].get_segments()
    np.testing.assert_allclose([s[1][1] - s[0][1] for s in segs], [0.2, 0.2], atol=1e-6)
    for ax in (mae_ax, tau_ax):
        assert list(ax.get_xticks()) == [5, 10]
    assert "mean ± sd over 3 splits" in fig._suptitle.get_text()


# ============================================================= anchors
def _anchor_study(n_seeds, k):
    return study_from_dict({"kind": "anchors", "data": {"dataset": "oll2_musr"},
                            "methods": ["random_mean"], "k": list(k), "n_seeds": n_seeds})


def test_tau_undefined_on_every_split_has_no_mean_and_no_sd():
    """tau-b undefined on both splits: its mean and sd are null (nothing to average,
    not an sd of 0), both splits counted undefined, and the table says so."""
    from jaxeval._report import format_summary, summarize

    res = {"k20": {"seconds": np.ones(2), "random_mean.mae_pp": np.array([2.0, 4.0]),
                   "random_mean.tau": np.array([np.nan, np.nan]),
                   "random_mean.coverage": np.array([1.0, 0.0]),
                   "random_mean.width": np.array([0.1, 0.3])}}
    s = summarize(_anchor_study(2, [20]), res)
    e = s["methods"]["random_mean"]
    assert e["tau"] == [None] and e["tau_sd"] == [None] and e["tau_undefined"] == [2]
    assert "random_mean at k=20: 2)" in format_summary(s)


def test_one_seed_over_two_k_has_an_sd_of_zero_at_each_k():
    """One seed, two values of k: every field's sd has one 0 per k."""
    from jaxeval._report import summarize

    res = {f"k{k}": {"seconds": np.ones(1), "random_mean.mae_pp": np.array([2.0 + k]),
                     "random_mean.tau": np.array([0.2]),
                     "random_mean.coverage": np.array([1.0]),
                     "random_mean.width": np.array([0.1])} for k in (5, 10)}
    e = summarize(_anchor_study(1, [5, 10]), res)["methods"]["random_mean"]
    assert e["mae_pp"] == [7.0, 12.0]
    for f in ("mae_pp", "coverage", "width", "tau"):
        assert e[f + "_sd"] == [0.0, 0.0], f


# ========================================================== replicates
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # (inf - inf)
def test_replicate_nan_count_is_of_replicates_and_sds_are_the_shown_components():
    """A vector field whose replicate 0 holds a NaN and an inf counts 1 replicate (not
    2 values); the sds shown are those of the first 8 components, as the means."""
    from jaxeval._report import format_summary, summarize
    from jaxeval._study import ReplicateStudy

    v = np.zeros((4, 3))
    v[0, 0], v[0, 2] = np.nan, np.inf
    w = np.arange(40.0).reshape(4, 10) * np.arange(1, 11)  # sd grows with the component
    s = summarize(ReplicateStudy(target="test_study:toy", n_replicates=4),
                  {"replicates": {"v": v, "w": w}})
    assert s["fields"]["v"]["non_finite_replicates"] == 1
    assert "1 of 4 replicates hold NaN or inf" in format_summary(s)
    np.testing.assert_allclose(s["fields"]["w"]["sd"], w.std(axis=0)[:8], rtol=1e-6)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # (inf - inf)
def test_an_infinite_replicate_mean_is_null_in_strict_json():
    """A mean of inf is not JSON: it is written as null, like NaN."""
    from jaxeval._report import summarize
    from jaxeval._study import ReplicateStudy

    s = summarize(ReplicateStudy(target="test_study:toy", n_replicates=2),
                  {"replicates": {"x": np.array([1.0, np.inf])}})
    assert s["fields"]["x"]["mean"] == [None]
    json.dumps(s, allow_nan=False)


# ======================================================= partial results
def test_policies_of_unequal_partial_results_summarise_the_fewest_replicates():
    """Partial results where one policy holds 1 replicate and another 2 (of 2 planned):
    the summary's replicates are the fewest, 1, and the table says "1 of 2"."""
    from jaxeval._report import format_summary, summarize

    full = _dyadic_results()["pulse"]
    one = {k: v[:1] for k, v in full.items()}
    s = summarize(_dyadic_study(policies=("pulse", "ucbe")), {"pulse": full, "ucbe": one})
    assert s["policies"]["ucbe"]["replicates"] == 1 and s["replicates"] == 1
    assert s["replicates_planned"] == 2
    assert "1 of 2 replicates" in format_summary(s)


def test_fmt_pct_is_as_its_docstring_says():
    """``' 94.1%'``, and ``'   n/a'`` (six wide, as a percentage) where there is none."""
    from jaxeval._report import _fmt_pct

    assert _fmt_pct(0.941) == " 94.1%"
    assert _fmt_pct(None) == "   n/a" == _fmt_pct(float("nan"))
