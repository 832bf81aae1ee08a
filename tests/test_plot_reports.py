"""Figures and summaries of IdentificationReports (``plot_reports``, ``reports_summary``)."""

import numpy as np
import pytest

import jaxeval
from jaxeval._report import format_summary, reports_summary, wilson_interval

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def reps():
    truth = jaxeval.SyntheticSpec(n_items=40)
    kw = dict(K=3, n_replicates=24, budget_fractions=(0.1, 0.5, 1.0), seed=1)
    return {p: jaxeval.simulate_identification(truth, p, **kw) for p in ("ucbe", "uniform")}


def test_the_summary_of_reports_holds_their_numbers(reps):
    s = reports_summary(reps)
    assert s["kind"] == "identification" and s["num_arms"] == 3 and s["replicates"] == 24
    assert s["budget_fractions"] == pytest.approx([0.1, 0.5, 1.0])
    assert s["nominal_coverage"] == pytest.approx(0.95)
    for name, r in reps.items():
        e = s["policies"][name]
        np.testing.assert_array_equal(e["accuracy"], r.accuracy)
        lo, hi = wilson_interval(r.correct.sum(axis=0), 24)
        np.testing.assert_allclose(e["accuracy_ci95"], [lo, hi])
        c95 = r.calls_to(0.95, fraction=True)
        assert e["calls_to_95_fraction"] == (None if np.isinf(c95) else c95)
        for q, kind in enumerate(r.cs_kinds):
            np.testing.assert_array_equal(e["coverage"][kind]["family_wise"],
                                          r.coverage_family_at[q])
            np.testing.assert_array_equal(e["coverage"][kind]["mean_width"], r.width[q])
        assert e["naive_coverage_family"] is None  # (no predictions: NaN in the report)
    # a list is labelled by the policies; the table of a study prints it
    assert list(reports_summary(list(reps.values()))["policies"]) == ["ucbe", "uniform"]
    table = format_summary(s)
    assert table.startswith("Identification study 'simulate_identification' on synthetic(n=40")
    assert "K=3, n=40, 24 replicates" in table and "\n  ucbe " in table
    gaps = np.concatenate([r.top_two_gap for r in reps.values()])
    assert s["problem"]["median_top2_gap"] == pytest.approx(np.median(gaps))


def test_plot_reports_writes_the_study_figures(reps, tmp_path):
    paths = jaxeval.plot_reports(reps, tmp_path / "figs")
    assert [p.name for p in paths] == [
        "identification_accuracy.png", "identification_coverage.png",
        "identification_widths.png", "identification_calls_to_95.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_reports_of_different_problems_or_labels_are_refused(reps):
    truth = jaxeval.SyntheticSpec(n_items=40)
    other = jaxeval.simulate_identification(truth, "ucbe", K=3, n_replicates=8,
                                            budget_fractions=(0.2, 1.0))
    with pytest.raises(ValueError, match=r"reports\['x'\]: budgets is \[24, 120\], but "
                       r"\[12, 60, 120\] in reports\['ucbe'\]"):
        reports_summary({"ucbe": reps["ucbe"], "x": other})
    with pytest.raises(ValueError, match="several reports of one policy"):
        reports_summary([reps["ucbe"], reps["ucbe"]])
    with pytest.raises(ValueError, match="no report"):
        reports_summary({})
    with pytest.raises(TypeError, match=r"reports\['a'\]: expected an IdentificationReport"):
        reports_summary({"a": 1})
    with pytest.raises(TypeError, match="reports: expected"):
        reports_summary(3)


def test_reports_of_another_mode_scale_or_instances_are_refused():
    """The problem is more than the data's name: the mode, a synthetic truth's scales
    (recorded in settings["synthetic"]) and the candidate sets must match too."""
    truth = jaxeval.SyntheticSpec(n_items=40)
    kw = dict(K=3, n_replicates=8, budget_fractions=(1.0,), seed=0)
    a = jaxeval.simulate_identification(truth, "ucbe", **kw)
    assert a.settings["synthetic"] == {"n_items": 40, "rank": 4, "model_scale": 1.0,
                                       "difficulty_scale": 1.5, "difficulty_mean": 0.0}
    b = jaxeval.simulate_identification(jaxeval.SyntheticSpec(n_items=40, model_scale=3.0),
                                        "uniform", **kw)
    with pytest.raises(ValueError, match=r"reports\['uniform'\]: synthetic is .*"
                       r"'model_scale': 3.0"):
        reports_summary([a, b])
    c = jaxeval.simulate_identification(truth, "uniform", K=3, n_replicates=8, seed=0,
                                        mode="confidence")
    with pytest.raises(ValueError, match=r"(budgets|mode) is "):
        reports_summary([a, c])
    sm = jaxeval.load("oll2_musr")
    rk = dict(K=3, n_replicates=8, n_instances=2, budget_fractions=(0.5,))
    r0 = jaxeval.simulate_identification(sm, "ucbe", seed=0, **rk)
    r1 = jaxeval.simulate_identification(sm, "uniform", seed=1, **rk)
    with pytest.raises(ValueError, match="candidate sets"):
        reports_summary([r0, r1])
    same = jaxeval.simulate_identification(sm, "uniform", seed=0, **rk)
    assert list(reports_summary([r0, same])["policies"]) == ["ucbe", "uniform"]


def test_reports_whose_every_budget_is_exact_still_plot(tmp_path):
    """At a budget of all K n every interval is exact: no width to draw on a log axis
    (it raised "Data cannot be log-scaled")."""
    truth = jaxeval.SyntheticSpec(n_items=40)
    reps = [jaxeval.simulate_identification(truth, p, K=3, n_replicates=8,
                                            budget_fractions=(1.0,), seed=0)
            for p in ("ucbe", "uniform")]
    paths = jaxeval.plot_reports(reps, tmp_path)
    assert len(paths) == 4 and all(p.stat().st_size > 5_000 for p in paths)


def test_a_reports_naive_curve_goes_on_its_stopping_kinds_panel():
    truth = jaxeval.SyntheticSpec(n_items=40)
    r = jaxeval.simulate_identification(truth, "pulse", K=3, n_replicates=8, seed=0,
                                        budget_fractions=(0.5, 1.0), stop_kind="hoeffding")
    assert reports_summary([r])["naive_kind"] == "hoeffding"
