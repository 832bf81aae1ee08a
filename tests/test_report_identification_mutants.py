"""Gaps a second mutation review of the identification and replicate parts of the
study report (``jaxeval._report``) and of the table loader (``jaxeval._tables``)
found: each test fails on a plausible bug the rest of the suite let through.

The summaries are built from small hand-made ``results`` dicts whose numbers are
dyadic (0.125, 0.25, ...), so every interval end below is exact in float32 and
float64 and each statistic is worked out in the comments."""

import json
import re

import numpy as np
import pytest
from test_loaders import _raises, _write
from test_report_mlp_mutants import _ident_results, _line, figures, ident  # noqa: F401

from jaxeval._study import study_from_dict

# ============================================================ a dyadic study
# R = 2 replicates, C = 2 checkpoints, one kind (eb), K = 2 arms, n = 10 items.
_T = np.array([[0.5, 0.25], [0.75, 0.5]], np.float32)


def _dyadic_results():
    """eb intervals theta -+ 0.25 except: replicate 0's arm 0 at c0 has its upper end
    exactly at the truth (holds); replicate 1 misses both arms at c0 (lower end above
    the truth); replicate 0's arm 1 at c1 has upper = truth - 0.125 (a miss whose
    naive shift of +0.125 puts the naive interval's upper end exactly at the truth).
    The estimate is 0.125 above the truth on arm 0 and below it on arm 1."""
    t = _T.astype(np.float64)
    R, C, K = 2, 2, 2
    lower = np.broadcast_to(t[:, None, None, :] - 0.25, (R, C, 1, K)).copy()
    upper = np.broadcast_to(t[:, None, None, :] + 0.25, (R, C, 1, K)).copy()
    upper[0, 0, 0, 0] = t[0, 0]
    lower[1, 0, 0, :] = t[1] + 0.125
    upper[0, 1, 0, 1] = t[0, 1] - 0.125
    # estimate errors of either sign
    est = np.broadcast_to(t[:, None, :] + np.array([0.125, -0.125]), (R, C, K)).copy()
    naive = est + 0.125  # naive - estimate = +0.125 everywhere: naive - theta = 0.25, 0
    one = {"theta": _T, "checkpoints.recommended": np.array([[0, 0], [1, 0]]),
           "checkpoints.calls": np.array([[10, 20], [10, 20]]),
           "checkpoints.lower": lower, "checkpoints.upper": upper,
           "checkpoints.estimate": est, "checkpoints.naive": naive,
           "checkpoints.status": np.array([[0, 2], [0, 1]], np.int32)}
    return {"pulse": dict(one), "pulse_plain": dict(one), "ucbe_pred": dict(one)}


@pytest.fixture(scope="module")
def dyadic():
    from jaxeval._report import summarize

    study = study_from_dict({
        "kind": "identification", "name": "dyadic", "data": {"synthetic": {"n_items": 10}},
        "policies": ["pulse",
                     {"policy": "pulse", "label": "pulse_plain",
                      "settings": {"use_predictions": False}},
                     {"policy": "ucbe", "label": "ucbe_pred",
                      "settings": {"use_predictions": True}}],
        "num_arms": 2, "n_replicates": 2, "budgets": [0.5, 1.0], "cs_kinds": ["eb"]})
    return summarize(study, _dyadic_results())


def test_an_upper_end_at_the_truth_holds(dyadic):
    """Intervals are closed at both ends: replicate 0's c0 upper end equals the truth
    and holds (only replicate 1 misses at c0; replicate 0 misses arm 1 at c1)."""
    cov = dyadic["policies"]["pulse"]["coverage"]["eb"]
    np.testing.assert_allclose(cov["family_wise"], [0.5, 0.5])
    np.testing.assert_allclose(cov["per_arm"], [0.5, 0.75])
    assert cov["family_wise_all_checkpoints"] == 0.0


def test_per_arm_all_checkpoints_is_per_arm_over_every_checkpoint(dyadic):
    """per-arm anytime coverage: the share of (replicate, arm) pairs whose interval
    holds at every checkpoint -- (0, arm 0) only: 1/4. (The share of (replicate,
    checkpoint) pairs with all arms held would be 2/4.)"""
    cov = dyadic["policies"]["pulse"]["coverage"]["eb"]
    assert cov["per_arm_all_checkpoints"] == pytest.approx(0.25)


def test_naive_coverage_closed_ends_and_the_use_predictions_setting(dyadic):
    """The naive baseline's intervals (eb shifted by naive - estimate = +0.125) are
    closed too: replicate 0's c1 arm 1 naive upper end is exactly the truth and holds;
    replicate 1 misses at c0. A policy's use_predictions setting decides whether it has
    a naive baseline, over the policy's default."""
    pol = dyadic["policies"]
    np.testing.assert_allclose(pol["pulse"]["naive_coverage_family"], [0.5, 1.0])
    assert pol["pulse_plain"]["naive_coverage_family"] is None
    np.testing.assert_allclose(pol["ucbe_pred"]["naive_coverage_family"], [0.5, 1.0])


def test_estimate_error_is_absolute_and_naive_bias_signed(dyadic):
    """estimate MAE averages |estimate - truth| (0.125 on both arms, of either sign);
    the naive pooled estimate is 0.25 and 0 above the truth: MAE and bias 0.125."""
    e = dyadic["policies"]["pulse"]
    np.testing.assert_allclose(e["estimate_mae"], [0.125, 0.125])
    np.testing.assert_allclose(e["naive_mae"], [0.125, 0.125])
    np.testing.assert_allclose(e["naive_bias"], [0.125, 0.125])


def test_final_status_counts_and_accuracy_of_the_dyadic_study(dyadic):
    e = dyadic["policies"]["pulse"]
    assert e["final_status_counts"] == {"1": 1, "2": 1}
    np.testing.assert_allclose(e["accuracy"], [0.5, 1.0])  # c0: rep 0 only; c1: both


@pytest.mark.parametrize("field, shape", [("checkpoints.estimate", (2, 1, 2)),
                                          ("checkpoints.lower", (2, 2, 2)),
                                          ("theta", (2, 3))])
def test_a_result_field_of_the_wrong_shape_is_refused_naming_it(field, shape):
    """``[R, 1, K]`` where ``[R, C, K]`` is due would broadcast into one MAE instead of
    C; a missing interval-kind axis or a theta of other arms would mislead the same way."""
    from jaxeval._report import summarize

    study = study_from_dict({
        "kind": "identification", "name": "dyadic", "data": {"synthetic": {"n_items": 10}},
        "policies": ["pulse"], "num_arms": 2, "n_replicates": 2, "budgets": [0.5, 1.0],
        "cs_kinds": ["eb"]})
    res = {"pulse": _dyadic_results()["pulse"]}
    res["pulse"][field] = np.zeros(shape)
    want = {"checkpoints.estimate": "(2, 2, 2) (replicates, checkpoints, arms)",
            "checkpoints.lower": "(2, 2, 1, 2) (replicates, checkpoints, interval kinds, arms)",
            "theta": "(2, 2) (replicates, arms)"}[field]
    with pytest.raises(ValueError, match=re.escape(
            f"results['pulse'][{field!r}]: expected shape {want}, got {shape}")):
        summarize(study, res)


def test_a_complex_replicate_field_is_skipped_not_cast_to_its_real_part():
    from jaxeval._report import summarize
    from jaxeval._study import ReplicateStudy

    study = ReplicateStudy(target="test_study:toy", n_replicates=2)
    s = summarize(study, {"replicates": {"z": np.array([1 + 5j, 3 - 1j]),
                                         "x": np.array([1.0, 3.0])}})
    assert s["skipped_fields"] == {"z": "dtype complex128"}
    assert list(s["fields"]) == ["x"]


@pytest.mark.parametrize("budgets", [[0.25, 0.5, 1.0], [1.0]])
def test_checkpoints_other_than_the_studys_budgets_are_refused(budgets):
    """Results with two checkpoints summarised under a study of three budgets (or one)
    are refused naming the field; the table and figures would index budgets they lack."""
    from jaxeval._report import summarize

    study = study_from_dict({
        "kind": "identification", "name": "dyadic", "data": {"synthetic": {"n_items": 10}},
        "policies": ["pulse"], "num_arms": 2, "n_replicates": 2, "budgets": budgets,
        "cs_kinds": ["eb"]})
    with pytest.raises(ValueError, match=re.escape(
            f"results['pulse']['checkpoints.recommended']: expected shape "
            f"(2, {len(budgets)}) (replicates, checkpoints), got (2, 2)")):
        summarize(study, {"pulse": _dyadic_results()["pulse"]})
    res = {"pulse": dict(_dyadic_results()["pulse"], **{"checkpoints.recommended":
                                                        np.zeros(2, np.int32)})}
    with pytest.raises(ValueError, match=r"'checkpoints.recommended'\]: expected shape"):
        summarize(study, res)


def test_arms_within_the_tie_tolerance_are_true_best():
    """Float32 means of two equal graded rows can differ in the last bit: an arm within
    1e-6 of the best is a true best, and recommending it is correct; 1e-5 below is
    not."""
    from jaxeval._report import recommended_correct, true_best

    theta = np.array([[0.5, np.nextafter(np.float32(0.5), np.float32(0)), 0.5 - 1e-5]],
                     np.float32)
    assert true_best(theta).tolist() == [[True, True, False]]
    assert recommended_correct(true_best(theta), np.array([[1, 2]])).tolist() == [[True, False]]


# ====================================================== calls to target
def test_calls_to_target_reached_exactly_on_the_last_point():
    """A curve that reaches the target exactly (19 of 20 right) has reached it."""
    from jaxeval._report import calls_to_target

    assert calls_to_target([10, 20, 30], [0.5, 0.9, 0.95]) == pytest.approx(30.0)
    assert calls_to_target([10, 20], [0.5, 0.95]) == pytest.approx(20.0)


def test_calls_to_target_names_the_first_nan():
    from jaxeval._report import calls_to_target

    with pytest.raises(ValueError, match="accuracy holds NaN at index 1$"):
        calls_to_target([10, 20, 30], [0.5, np.nan, np.nan])


# ================================================================ the table
def test_table_of_a_real_data_study_names_training_models_and_candidates():
    """The second line of a real-data study: training models, candidates (the pool),
    instances and the median top-2 gap."""
    from jaxeval._report import format_summary

    s = {"kind": "identification", "name": "t", "dataset": "d", "num_arms": 2,
         "replicates": 10, "alpha": 0.05, "nominal_coverage": 0.95,
         "budget_fractions": [0.5, 1.0],
         "problem": {"items": 5, "median_top2_gap": 0.125, "models": 42,
                     "training_models": 30, "pool_models": 12, "instances": 7},
         "policies": {"ucbe": {"calls_to_95_fraction": None, "accuracy": [0.5, 1.0],
                               "coverage": {"eb": {"family_wise_all_checkpoints": 1.0}}}}}
    lines = format_summary(s).splitlines()
    assert lines[1] == ("  30 training models, 12 candidates, 7 instances; "
                        "median top-2 gap 0.125")


# ============================================================== the figures
def test_accuracy_figure_band_is_the_wilson_interval(ident, tmp_path, figures):  # noqa: F811
    """The shaded band around each accuracy curve runs from the Wilson lower to the
    Wilson upper end at each budget."""
    from jaxeval._report import plot_study, wilson_interval

    plot_study(ident, tmp_path)
    ax = figures[0].axes[0]
    ucbe = ax.collections[0]  # (policies in order: ucbe first)
    xy = np.concatenate([p.vertices for p in ucbe.get_paths()])
    lo, hi = wilson_interval(np.array([1, 3, 4]), 4)
    for j, x in enumerate([20.0, 50.0, 90.0]):
        ys = xy[np.isclose(xy[:, 0], x), 1]
        assert ys.min() == pytest.approx(lo[j], abs=1e-4)
        assert ys.max() == pytest.approx(hi[j], abs=1e-4)


def _inside_ylim(ax):
    lo, hi = ax.get_ylim()
    for ln in ax.get_lines():
        y = np.asarray(ln.get_ydata(), float)
        y = y[np.isfinite(y)]
        assert (y >= lo).all() and (y <= hi).all(), (ln.get_label(), y, (lo, hi))


def test_every_curve_is_inside_the_axes(ident, tmp_path, figures):  # noqa: F811
    """No accuracy or coverage point is cut off: the accuracy axis goes below the
    lowest accuracy (0.25 here), and the coverage axes below the naive baseline's
    lowest coverage (0.3 here, under the band and every family-wise value)."""
    from jaxeval._report import plot_study

    s = json.loads(json.dumps(ident))
    s["policies"]["pulse"]["naive_coverage_family"] = [0.3, 0.5, 0.6]
    plot_study(s, tmp_path)
    _inside_ylim(figures[0].axes[0])
    assert figures[0].axes[0].get_ylim()[0] < 0.25
    for ax in figures[1].axes[:2]:
        _inside_ylim(ax)
        assert ax.get_ylim()[0] < 0.3


def test_widths_figure_draws_small_real_widths(ident, tmp_path, figures):  # noqa: F811
    """Only widths within the rounding margin (< 1e-3) are left out: 0.005 is drawn."""
    from jaxeval._report import plot_study

    s = json.loads(json.dumps(ident))
    s["policies"]["ucbe"]["coverage"]["eb"]["mean_width"] = [0.2, 0.005, 1e-5]
    plot_study(s, tmp_path)
    np.testing.assert_allclose(_line(figures[2].axes[1], "UCB-E").get_ydata(),
                               [0.2, 0.005, np.nan])


def test_calls_bars_mark_a_policy_that_never_reached_95(ident, tmp_path, figures):  # noqa: F811
    """A policy that never reaches 95% has no bar, a 'not reached' mark, and still its
    legend entry."""
    from jaxeval._report import plot_calls_bars

    s = json.loads(json.dumps(ident))
    s["policies"]["pulse"]["calls_to_95_fraction"] = None
    plot_calls_bars([s], tmp_path / "bars.png")
    ax = figures[-1].axes[0]
    assert len(ax.patches) == 1
    marks = [t for t in ax.texts if "reached" in t.get_text()]
    assert len(marks) == 1
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["UCB-E", "PULSE"]


def test_plot_study_makes_a_nested_output_folder(ident, tmp_path, figures):  # noqa: F811
    """``out`` and any missing folders above it are made."""
    from jaxeval._report import plot_study

    paths = plot_study(ident, tmp_path / "a" / "b")
    assert paths and all(p.parent == tmp_path / "a" / "b" and p.exists() for p in paths)


# ============================================================ the table loader
def test_pq_and_upper_case_tsv_suffixes_are_read_as_their_formats(tmp_path):
    """``.pq`` is Parquet and ``.TSV`` is tab-separated, as ``.parquet`` and ``.tsv``."""
    import pandas as pd

    from jaxeval._tables import load_table

    df = pd.DataFrame({"model": ["a", "b"], "q1": [1.0, 0.0], "q2": [0.5, 1.0]})
    df.to_parquet(tmp_path / "w.pq")
    sm = load_table(tmp_path / "w.pq")
    assert sm.models.tolist() == ["a", "b"] and sm.scores.tolist() == [[1, 0.5], [0, 1]]
    _write(tmp_path / "w.TSV", "model\tq1\tq2\na\t1\t0.5\nb\t0\t1\n")
    sm = load_table(tmp_path / "w.TSV")
    assert sm.items.tolist() == ["q1", "q2"] and sm.scores.tolist() == [[1, 0.5], [0, 1]]


def test_upper_case_true_false_cells_are_one_and_zero(tmp_path):
    from jaxeval._tables import load_table

    sm = load_table(_write(tmp_path / "w.csv", "model,q1,q2\na,TRUE,FALSE\n"))
    assert sm.scores.tolist() == [[1.0, 0.0]]
    assert "true/false cells read as 1/0" in sm.metadata["conversions"]


def test_a_changing_target_names_the_models_first_row(tmp_path):
    """The message names the row that set the model's target (line 2), not the last row
    that agreed with it (line 3)."""
    from jaxeval._tables import load_table

    p = _write(tmp_path / "l.csv",
               "model,item,score,t\nm1,q1,1,0.5\nm1,q2,1,0.5\nm1,q3,0,0.75\n")
    _raises([r"field 't' differs between line 2 and line 4 of model 'm1'"],
            load_table, p, target_col="t")


def test_empty_names_are_refused_naming_their_column(tmp_path):
    """An empty item in a long table names 'item'; an empty model name in a wide table
    names the model column, wherever it stands."""
    from jaxeval._tables import load_table

    _raises([r"line 3: empty 'item'"], load_table,
            _write(tmp_path / "l.csv", "model,item,score\nm1,q1,1\nm1, ,0\n"))
    _raises([r"line 3: empty model name in column 'model'"], load_table,
            _write(tmp_path / "w.csv", "q0,model,q1\n1,a,1\n0, ,0\n"))


def test_a_pipe_separated_table_with_a_comma_gets_the_sep_hint(tmp_path):
    """Read with ',' a '|' table whose cells hold a comma has rows of different
    lengths: the refusal says to pass sep='|'."""
    from jaxeval._tables import load_table

    p = _write(tmp_path / "p.csv", "m|q1|q2\na|1|0\nb|0,5|1\n")
    _raises([r"malformed table", r"pass sep='\|'"], load_table, p)


def test_a_blank_first_parquet_column_beside_the_model_column_is_an_index(tmp_path):
    """A first column named only by spaces beside a 'model' column is a written index,
    not an item (as an empty name is)."""
    import pandas as pd

    from jaxeval._tables import load_table

    df = pd.DataFrame({" ": [0, 1], "model": ["a", "b"], "q1": [1.0, 0.0]})
    df.to_parquet(tmp_path / "w.parquet")
    sm = load_table(tmp_path / "w.parquet")
    assert sm.items.tolist() == ["q1"] and sm.models.tolist() == ["a", "b"]
