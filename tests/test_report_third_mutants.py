"""Gaps a third mutation review of the study report (``jaxeval._report``) found: the
edges of calls-to-95% (never reached, reached, dipped and reached again: the
first crossing counted, zero calls spent), partial results, one seed, the rounding of
the text table, which policy fills which row, and what the figures draw (read
from their artists, not their pixels).

Each test fails on a plausible bug the rest of the suite let through. The summaries
reuse the hand-built studies of ``test_report_mlp_mutants`` (``ident``: R = 4, C = 3,
K = 3, budgets 20/50/90% of K*n = 30) and ``test_report_identification_mutants``
(dyadic, R = C = K = 2, n = 10)."""

import json

import numpy as np
import pytest
from test_report_identification_mutants import _dyadic_results
from test_report_mlp_mutants import _line, figures, ident  # noqa: F401

from jaxeval._study import study_from_dict


def _dyadic_study(n_replicates=2, policies=("pulse",)):
    return study_from_dict({
        "kind": "identification", "name": "dyadic", "data": {"synthetic": {"n_items": 10}},
        "policies": list(policies), "num_arms": 2, "n_replicates": n_replicates,
        "budgets": [0.5, 1.0], "cs_kinds": ["eb"]})


# ====================================================== calls to target
def test_calls_to_target_is_the_first_crossing_and_none_when_never_reached():
    """A curve that reaches 95%, dips and reaches it again is interpolated at its first
    crossing (10 + 0.45 / 0.46 * 10 calls); a curve that never reaches it gives None
    (not inf or the last budget)."""
    from jaxeval._report import calls_to_target

    got = calls_to_target([10, 20, 30, 40], [0.5, 0.96, 0.9, 1.0])
    assert got == pytest.approx(10 + 0.45 / 0.46 * 10)
    assert calls_to_target([10, 20, 30], [0.5, 0.9, 0.94]) is None
    assert calls_to_target([10, 20], [0.5, 0.6], target=0.6) == pytest.approx(20.0)


# ===================================================== the summary
def test_ninety_five_percent_with_no_calls_spent_is_zero_calls_not_never():
    """Every recommendation right at a checkpoint where no call was spent yet (a
    prediction policy recommends from its predictions): 0 calls, 0% of K*n -- not None,
    which means never reached; the table shows 0.0%."""
    from jaxeval._report import format_summary, summarize

    res = _dyadic_results()["pulse"]
    res["checkpoints.recommended"] = np.zeros((2, 2), np.int64)  # arm 0: best in both
    res["checkpoints.calls"] = np.array([[0, 20], [0, 20]])
    s = summarize(_dyadic_study(), {"pulse": res})
    e = s["policies"]["pulse"]
    assert e["calls_to_95"] == 0.0 and e["calls_to_95_fraction"] == 0.0
    row = next(ln for ln in format_summary(s).splitlines() if ln.strip().startswith("pulse "))
    assert row.split()[1] == "0.0%"


def test_partial_results_count_the_replicates_they_hold():
    """Results of 2 replicates of a 4-replicate study (``load_results(allow_partial=
    True)`` of a range job): the policy's accuracy and its ``replicates`` are over the 2
    replicates it holds."""
    from jaxeval._report import summarize

    s = summarize(_dyadic_study(n_replicates=4), {"pulse": _dyadic_results()["pulse"]})
    e = s["policies"]["pulse"]
    assert e["replicates"] == 2
    np.testing.assert_allclose(e["accuracy"], [0.5, 1.0])


def test_anchor_summary_of_one_seed_has_sd_zero():
    """One seed has no spread: sd 0 for every field (not the NaN of a ddof-1 sd,
    written as null)."""
    from jaxeval._report import summarize

    study = study_from_dict({"kind": "anchors", "data": {"dataset": "oll2_musr"},
                             "methods": ["random_mean"], "k": [20], "n_seeds": 1})
    res = {"k20": {"seconds": np.ones(1), "random_mean.mae_pp": np.array([2.0]),
                   "random_mean.tau": np.array([0.2]),
                   "random_mean.coverage": np.array([1.0]),
                   "random_mean.width": np.array([0.1])}}
    e = summarize(study, res)["methods"]["random_mean"]
    for f in ("mae_pp", "tau", "coverage", "width"):
        assert e[f + "_sd"] == [0.0], f


# ========================================================= the table
def test_synthetic_table_second_line_is_the_gap_to_three_decimals(ident):  # noqa: F811
    """A synthetic study has no training models: its second line is the median top-2
    gap, to 3 decimals (0.200)."""
    from jaxeval._report import format_summary

    assert format_summary(ident).splitlines()[1] == "  median top-2 gap 0.200"


def test_each_table_row_shows_its_own_policys_accuracy_and_coverage(ident):  # noqa: F811
    """Each row is filled from its own policy: PULSE's accuracy 12.5/62.5/87.5% and
    anytime coverage 25%/37.5% (changed from UCB-E's here) appear in PULSE's row."""
    from jaxeval._report import format_summary

    s = json.loads(json.dumps(ident))
    e = s["policies"]["pulse"]
    e["accuracy"] = [0.125, 0.625, 0.875]
    e["coverage"]["hoeffding"]["family_wise_all_checkpoints"] = 0.25
    e["coverage"]["eb"]["family_wise_all_checkpoints"] = 0.375
    lines = format_summary(s).splitlines()
    pulse = next(ln for ln in lines if ln.strip().startswith("pulse "))
    ucbe = next(ln for ln in lines if ln.strip().startswith("ucbe "))
    assert pulse.split()[2:] == ["12.5%", "62.5%", "87.5%", "25.0%", "37.5%"]
    assert ucbe.split()[2:] == ["25.0%", "75.0%", "100.0%", "50.0%", "75.0%"]


# ======================================================== the figures
def test_accuracy_axis_spans_every_budget_with_their_ticks(ident, tmp_path, figures):  # noqa: F811
    """x from 20% / 1.15 to 90% * 1.15 (log scale), ticks on the round budgets inside
    the grid (20 and 50, both ends included where round)."""
    from jaxeval._report import plot_study

    plot_study(ident, tmp_path)
    ax = figures[0].axes[0]
    assert ax.get_xscale() == "log"
    assert ax.get_xlim() == pytest.approx((20 / 1.15, 90 * 1.15))
    assert list(ax.get_xticks()) == [20, 50]
    s = json.loads(json.dumps(ident))
    s["budget_fractions"] = [0.2, 0.5, 1.0]
    plot_study(s, tmp_path)
    assert list(figures[4].axes[0].get_xticks()) == [20, 50, 100]


def test_accuracy_figure_marks_the_target_line_at_the_first_budget(ident, tmp_path,  # noqa: F811
                                                                  figures):  # noqa: F811
    """The dashed target line is labelled "95%" just above it at the smallest budget
    (20%), where the curves start low, not over the curves at the largest."""
    from jaxeval._report import plot_study

    plot_study(ident, tmp_path)
    (mark,) = [t for t in figures[0].axes[0].texts if t.get_text() == "95%"]
    assert mark.get_position() == pytest.approx((20.0, 0.96))


def test_accuracy_band_has_its_policys_colour(ident, tmp_path, figures):  # noqa: F811
    """Each Wilson band is drawn in its curve's colour (UCB-E's blue, PULSE's red)."""
    from matplotlib.colors import to_rgb

    from jaxeval._report import plot_study

    plot_study(ident, tmp_path)
    ax = figures[0].axes[0]
    for band, label in zip(ax.collections[:2], ("UCB-E", "PULSE")):
        assert to_rgb(band.get_facecolor()[0]) == pytest.approx(
            to_rgb(_line(ax, label).get_color()))


def test_coverage_panels_draw_the_nominal_level_and_the_naive_legend(  # noqa: F811
        ident, tmp_path, figures):  # noqa: F811
    """Each coverage panel's dashed line is the nominal level (90% here, alpha = 0.1,
    not the 95% accuracy target), and the figure's legend names the naive baseline
    (drawn on the eb panel, the second)."""
    from jaxeval._report import plot_study

    plot_study(ident, tmp_path)
    fig = figures[1]
    for ax in fig.axes[:2]:
        assert list(_line(ax, "nominal 90%").get_ydata()) == [0.9, 0.9]
    (leg,) = fig.legends
    texts = [t.get_text() for t in leg.get_texts()]
    assert "PULSE: same widths around the naive pooled estimate" in texts
    assert "UCB-E" in texts and "nominal 90%" in texts


def test_calls_bars_labels_ticks_and_limits(ident, tmp_path, figures):  # noqa: F811
    """Each bar is labelled with its height to 0.1 (80.7 and 81.3% of K*n), the group
    is named by dataset and K, and the x range is the group's slot."""
    from jaxeval._report import plot_calls_bars

    plot_calls_bars([ident], tmp_path / "bars.png")
    ax = figures[-1].axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["80.7", "81.3"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["synthetic(n=10)\nK=3"]
    assert ax.get_xlim() == pytest.approx((-0.5, 0.5))


def test_not_reached_mark_sits_in_its_policys_slot(ident, tmp_path, figures):  # noqa: F811
    """PULSE (second of two policies) never reaches 95%: its mark stands at its own
    slot, 0.2 right of the group centre, not at the centre."""
    from jaxeval._report import plot_calls_bars

    s = json.loads(json.dumps(ident))
    s["policies"]["pulse"]["calls_to_95_fraction"] = None
    plot_calls_bars([s], tmp_path / "bars.png")
    (mark,) = [t for t in figures[-1].axes[0].texts if "reached" in t.get_text()]
    assert mark.get_position()[0] == pytest.approx(0.2)


def test_calls_bars_of_a_policy_only_in_a_later_summary(ident, tmp_path, figures):  # noqa: F811
    """A policy missing from the first summary still gets its bar in the second
    group (x = 1 + offset) and its legend entry."""
    from jaxeval._report import plot_calls_bars

    a = json.loads(json.dumps(ident))
    del a["policies"]["pulse"]
    b = json.loads(json.dumps(ident))
    b["num_arms"] = 5
    plot_calls_bars([a, b], tmp_path / "bars.png")
    ax = figures[-1].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["UCB-E", "PULSE"]
    centres = sorted(round(p.get_x() + p.get_width() / 2, 6) for p in ax.patches)
    assert centres == pytest.approx([-0.2, 0.8, 1.2])
    assert ax.get_xlim() == pytest.approx((-0.5, 1.5))


def test_calls_bars_keep_a_suffix_other_than_png(ident, tmp_path, figures):  # noqa: F811
    """A path with its own suffix is written as given (an .svg stays .svg)."""
    from jaxeval._report import plot_calls_bars

    p = plot_calls_bars([ident], tmp_path / "bars.svg")
    assert p == tmp_path / "bars.svg" and p.exists()
    assert p.read_text().lstrip().startswith("<?xml")


def test_anchor_plot_path_and_one_colour_per_method(tmp_path, figures):  # noqa: F811
    """plot_study of an anchor study returns ``anchors_mae_tau.png`` in ``out``; each
    method has its own colour."""
    from jaxeval._report import plot_study, summarize

    study = study_from_dict({"kind": "anchors", "data": {"dataset": "oll2_musr"},
                             "methods": ["random_mean", "kmeans_ridge"], "k": [5, 10],
                             "n_seeds": 2})
    one = {f: np.array([1.0, 2.0]) for f in ("mae_pp", "tau", "coverage", "width")}
    res = {f"k{k}": {"seconds": np.ones(2),
                     **{f"{m}.{f}": v for m in study.methods for f, v in one.items()}}
           for k in (5, 10)}
    paths = plot_study(summarize(study, res), tmp_path)
    assert paths == [tmp_path / "anchors_mae_tau.png"] and paths[0].exists()
    mae_ax = figures[0].axes[0]
    colours = [c.lines[0].get_color() for c in mae_ax.containers]  # (one per method)
    assert len(colours) == 2 and colours[0] != colours[1]



def test_true_best_counts_an_arm_exactly_the_tolerance_below_as_metrics_does():
    """An arm exactly TIE_ATOL (1e-6) below the best is a true best in the reports, as
    in :func:`jaxeval.metrics.best_arms` (the same closed tolerance)."""
    from jaxeval._report import true_best
    from jaxeval.metrics import best_arms

    theta = np.array([[0.5, 0.5 - 1e-6, 0.25]])
    assert true_best(theta).tolist() == [[True, True, False]]
    assert np.asarray(best_arms(theta[0])).tolist() == [True, True, False]


def test_a_partial_summary_says_how_many_replicates_it_holds_of_those_planned():
    """The summary's ``replicates`` is the count summarised (2 of a 4-replicate study's,
    as the policies', the table and the coverage band use); the planned count is kept
    beside it and the table says "2 of 4 replicates". A whole study has no planned
    count beside it."""
    from jaxeval._report import format_summary, summarize

    s = summarize(_dyadic_study(n_replicates=4), {"pulse": _dyadic_results()["pulse"]})
    assert (s["replicates"], s["replicates_planned"]) == (2, 4)
    assert "2 of 4 replicates" in format_summary(s)
    whole = summarize(_dyadic_study(n_replicates=2), {"pulse": _dyadic_results()["pulse"]})
    assert whole["replicates"] == 2 and "replicates_planned" not in whole
    assert "2 replicates" in format_summary(whole)


def test_a_budget_grid_without_a_round_number_is_ticked_at_its_budgets(ident, tmp_path,  # noqa: F811
                                                                     figures):  # noqa: F811
    """Budgets of 3% and 4% hold none of the round ticks (0.5, 1, 2, 5, ...): the axis is
    ticked at the budgets themselves instead of being left without a label."""
    from jaxeval._report import plot_study

    s = json.loads(json.dumps(ident))
    n = len(s["budget_fractions"])
    s["budget_fractions"] = [0.03 + 0.01 * i / max(n - 1, 1) for i in range(n)]
    plot_study(s, tmp_path)
    ax = figures[0].axes[0]
    want = sorted({float(f"{100 * f:.3g}") for f in s["budget_fractions"]})
    assert list(ax.get_xticks()) == pytest.approx(want)
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{t:g}" for t in want]
