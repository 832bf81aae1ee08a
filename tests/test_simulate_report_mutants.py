"""Gaps found by a mutation review of ``IdentificationReport`` (jaxeval._simulate): the
summary text, the JSON and npz round trips, ``by_gap`` bin edges and per-bin figures,
the bootstrap intervals and ratios of ``calls_to``, and the arrays ``_summarise`` builds.
Every report here is built by hand (no simulation, no JAX compilation), so each expected
value is worked out from the inputs."""

import dataclasses
import json
import math

import numpy as np
import pytest
from test_simulate import _report

from jaxeval import _identification as idn
from jaxeval import _simulate
from jaxeval._simulate import IdentificationReport

BUDGETS = (10, 20, 40, 80)


def _rep(correct=None, theta=None, calls=None, instance=None, instances=None, **over):
    """A report of K = 2 arms, n = 40 items, four checkpoints (``test_simulate``'s hand
    report); the curves follow from ``correct`` / ``calls`` unless given in ``over``."""
    K, C = 2, len(BUDGETS)
    correct = np.zeros((1, C), bool) if correct is None else np.asarray(correct, bool)
    R = correct.shape[0]
    theta = np.zeros((R, K), np.float32) if theta is None else np.asarray(theta, np.float32)
    calls = (np.tile(np.asarray(BUDGETS, np.int64), (R, 1)) if calls is None
             else np.asarray(calls, np.int64))
    acc = correct.mean(axis=0)
    kw = dict(
        budgets=np.asarray(BUDGETS, np.int64),
        accuracy_se=np.sqrt(acc * (1 - acc) / R), calls_used=calls.mean(axis=0),
        correct=correct, recommended=np.zeros((R, C), np.int32), theta=theta,
        instance=(np.full(R, -1, np.int32) if instance is None
                  else np.asarray(instance, np.int32)),
        instances=(np.zeros((0, K), np.int64) if instances is None
                   else np.asarray(instances, np.int64)),
        status_counts=np.zeros((C, 5), np.int64), calls=calls,
    )
    kw.update(over)
    return dataclasses.replace(_report(acc, BUDGETS, K=K, n=40), **kw)


def _curve_rep():
    """Accuracy 0.5 / 0.9 / 0.97 / 1.0 reached with 8 / 16 / 40 / 80 calls spent (not the
    budgets): calls to 95% = 16 + 0.05 / 0.07 * 24, to 90% = 16, K n = 80."""
    return _rep(
        accuracy=np.array([0.5, 0.9, 0.97, 1.0]), calls_used=np.array([8.0, 16.0, 40.0, 80.0]),
        cs_kinds=("eb", "hoeffding"), coverage_family=np.array([0.9, 0.8]),
        coverage_arm=np.array([0.95, 0.99]),
        coverage_family_at=np.array([[1.0, 0.9, 0.9, 0.9], [1.0, 1.0, 0.8, 0.8]]),
        width=np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]]),
        status_counts=np.array([[3, 1, 0, 0, 0], [2, 1, 1, 0, 0],
                                [0, 1, 2, 1, 0], [0, 0, 3, 0, 1]], np.int64),
        settings=dict(K=2, n_items=40, policy="ucbe", data="hand", batch_size=1, alpha=0.05,
                      n_replicates=4, seed=0),
    )


TO95 = 16 + 0.05 / 0.07 * 24


def test_summary_reports_both_targets_calls_spent_widths_and_family_coverage():
    """summary(): calls to 95% and to 90% as shares of K*n, family-wise coverage per
    kind, and per checkpoint the calls spent and every kind's own width."""
    lines = _curve_rep().summary().splitlines()
    assert lines[1] == f"calls to 95%: {100 * TO95 / 80:.2f}% of K*n; to 90%: 20.00%"
    assert lines[2] == ("family-wise coverage (all arms, all checkpoints): "
                        "eb=0.9000, hoeffding=0.8000")
    assert lines[3].split() == ["budget", "frac", "accuracy", "calls", "w_eb", "w_hoeffding"]
    assert lines[4].split() == ["10", "0.125", "0.5000", "8.0", "0.1000", "0.5000"]
    assert lines[7].split() == ["80", "1.000", "1.0000", "80.0", "0.4000", "0.8000"]


def test_to_json_holds_calls_to_in_calls_and_every_summary_array():
    """to_json(): calls_to_95 / _90 in LLM calls (not fractions), each coverage array
    under its own name, the status counts, and non-finite values as strings."""
    doc = json.loads(_curve_rep().to_json())
    assert doc["calls_to_95"] == pytest.approx(TO95) and doc["calls_to_90"] == 16.0
    assert doc["coverage_family"] == [0.9, 0.8] and doc["coverage_arm"] == [0.95, 0.99]
    assert doc["coverage_family_at"][1] == [1.0, 1.0, 0.8, 0.8]
    assert doc["status_counts"][-1] == [0, 0, 3, 0, 1]
    assert doc["naive_coverage_family"] == ["nan"] * 4
    never = json.loads(_rep(correct=np.zeros((2, 4), bool)).to_json())
    assert never["calls_to_95"] == "inf" and never["calls_to_90"] == "inf"


def test_finite_json_writes_each_non_finite_float_by_its_sign():
    """_finite_json: NaN, +inf and -inf (Python or NumPy floats, nested) become "nan",
    "inf" and "-inf"; finite values are kept."""
    got = _simulate._finite_json({"a": [-math.inf, np.float32("nan"), 1.5],
                                  "b": (math.inf, np.float64("-inf")), "c": 3})
    assert got == {"a": ["-inf", "nan", 1.5], "b": ["inf", "-inf"], "c": 3}


def test_from_npz_refuses_unknown_arrays(tmp_path):
    """from_npz names arrays it does not know (a newer version's file) in a ValueError."""
    path = _curve_rep().to_npz(tmp_path / "r")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "newer.npz", extra=np.zeros(2), **arrays)
    with pytest.raises(ValueError, match=r"unexpected arrays \['extra'\]"):
        IdentificationReport.from_npz(tmp_path / "newer.npz")
    back = IdentificationReport.from_npz(path)
    assert back.calls_to(0.95) == pytest.approx(TO95)


# gaps (best minus second best) 0, 0.25, 0.25, 1.0, all exact in float32
GAP_THETA = [[0.5, 0.5], [0.75, 0.5], [0.5, 0.25], [1.0, 0.0]]
GAP_CORRECT = [[0, 0, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]]


def test_by_gap_puts_a_gap_on_an_inner_edge_in_the_upper_bin():
    """by_gap bins are [lo, hi) but the last is [lo, hi]: a gap equal to an inner edge
    belongs to the bin above it."""
    rep = _rep(correct=GAP_CORRECT, theta=GAP_THETA)
    np.testing.assert_array_equal(rep.top_two_gap, [0.0, 0.25, 0.25, 1.0])
    a, b = rep.by_gap(edges=[0.0, 0.25, 1.0])
    assert (a.n_replicates, b.n_replicates) == (1, 3)
    np.testing.assert_allclose(a.accuracy, [0, 0, 0, 1])
    np.testing.assert_allclose(b.accuracy, [1 / 3, 2 / 3, 1, 1])


def test_by_gap_bin_median_and_standard_error_use_the_bins_replicates():
    """A bin's median_gap is the median (not mean) of its gaps, and its accuracy_se the
    binomial standard error over its own replicates."""
    rep = _rep(correct=GAP_CORRECT, theta=GAP_THETA)
    (whole,) = rep.by_gap(edges=[0.0, 1.0])
    assert whole.median_gap == 0.25  # mean 0.375
    _, b = rep.by_gap(edges=[0.0, 0.25, 1.0])
    acc = np.array([1 / 3, 2 / 3, 1.0, 1.0])
    np.testing.assert_allclose(b.accuracy_se, np.sqrt(acc * (1 - acc) / 3))


def test_by_gap_with_every_gap_equal_gives_one_bin_of_all():
    """Quantile edges that all coincide give one closed bin [g, g] with every replicate."""
    rep = _rep(correct=GAP_CORRECT, theta=[[0.75, 0.5]] * 4)
    (only,) = rep.by_gap(3)
    assert (only.lo, only.hi, only.n_replicates, only.median_gap) == (0.25, 0.25, 4, 0.25)
    np.testing.assert_allclose(only.accuracy, rep.accuracy)


def test_by_gap_refuses_repeated_edges():
    """by_gap(edges=...) needs strictly increasing edges: a repeated edge is refused."""
    with pytest.raises(ValueError, match="edges: expected at least two increasing"):
        _rep(correct=GAP_CORRECT, theta=GAP_THETA).by_gap(edges=[0.0, 0.25, 0.25, 1.0])


def test_by_gap_quantiles_count_each_instance_once_on_real_data():
    """On real data the quantile edges come from one gap per instance, however many
    replicates each has: instances of gaps 0 (three replicates), 0.5 and 1 split in two
    bins at 0.5, not at the replicates' median 0."""
    theta = [[0.5, 0.5]] * 3 + [[1.0, 0.5], [1.0, 0.0]]
    rep = _rep(correct=np.ones((5, 4), bool), theta=theta, instance=[0, 0, 0, 1, 2],
               instances=[[0, 1], [2, 3], [4, 5]])
    lo_bin, hi_bin = rep.by_gap(2)
    assert (lo_bin.lo, lo_bin.hi, hi_bin.hi) == (0.0, 0.5, 1.0)
    assert (lo_bin.n_replicates, lo_bin.n_instances) == (3, 1)
    assert (hi_bin.n_replicates, hi_bin.n_instances) == (2, 2)


def _boot_rep(seed=0, R=40):
    rng = np.random.default_rng(seed)
    correct = rng.random((R, 4)) < np.array([0.3, 0.6, 0.85, 0.97])
    calls = np.tile(np.asarray(BUDGETS), (R, 1)) - rng.integers(0, 5, (R, 4))
    return _rep(correct=correct, calls=calls)


def test_calls_to_interval_is_the_outward_percentile_interval_of_its_draws():
    """calls_to_interval(level=0.9) is the (5%, 95%) percentile interval of the bootstrap
    draws, rounded outward (lower draw for the low end, higher for the high end)."""
    rep = _boot_rep()
    (d,) = rep._boot_calls_to(0.8, 1000, 3)
    s = np.sort(d)
    assert np.isfinite(s).all() and len(np.unique(s[40:960])) > 100  # draws spread
    lo, hi = rep.calls_to_interval(0.8, level=0.9, n_boot=1000, seed=3)
    assert (lo, hi) == (s[math.floor(999 * 0.05)], s[math.ceil(999 * 0.95)])
    assert lo <= rep.calls_to(0.8) <= hi
    assert rep.calls_to_interval(0.8, level=0.9, n_boot=1000, seed=3, fraction=True) == (
        lo / 80, hi / 80)


def test_calls_to_ratio_uses_each_reports_own_calls():
    """calls_to_ratio: draws of the other report use that report's calls spent; with the
    same correct curves, half the calls everywhere gives ratio 0.5 in every draw."""
    correct = np.ones((6, 4), bool)
    a = _rep(correct=correct, calls=np.tile([5, 10, 20, 40], (6, 1)))
    b = _rep(correct=correct)
    assert a.calls_to_ratio(b, 0.9, n_boot=200) == (0.5, 0.5, 0.5)
    assert b.calls_to_ratio(a, 0.9, n_boot=200) == (2.0, 2.0, 2.0)


def test_calls_to_ratio_never_reached_by_this_report_is_inf():
    """calls_to_ratio: a report that never reaches the target against one that does has
    ratio inf, and so do both ends; the reverse has ratio 0."""
    never = _rep(correct=np.zeros((6, 4), bool))
    always = _rep(correct=np.ones((6, 4), bool))
    assert never.calls_to_ratio(always, 0.9, n_boot=200) == (math.inf, math.inf, math.inf)
    assert always.calls_to_ratio(never, 0.9, n_boot=200) == (0.0, 0.0, 0.0)


def test_calls_to_ratio_ends_are_nan_when_too_many_draws_have_no_ratio():
    """calls_to_ratio: when more than (1 - level) / 2 of the draws reach the target in
    neither report, the interval ends are NaN (here about 36% of draws, level 0.5)."""
    correct = np.zeros((20, 4), bool)
    correct[0] = True  # 4% reached only in draws holding replicate 0: (19/20)^20 do not
    a, b = _rep(correct=correct), _rep(correct=correct)
    point, lo, hi = a.calls_to_ratio(b, 0.04, level=0.5, n_boot=2000)
    assert point == 1.0 and math.isnan(lo) and math.isnan(hi)
    assert a.calls_to_ratio(b, 0.04, level=0.1, n_boot=2000) == (1.0, 1.0, 1.0)  # 45% allowed


def test_ratio_of_calls_to_figures():
    """_ratio: NaN when neither is reached, 0 when only the numerator is, inf when only
    the denominator is, else the quotient."""
    assert math.isnan(_simulate._ratio(math.inf, math.inf))
    assert _simulate._ratio(10.0, math.inf) == 0.0
    assert _simulate._ratio(math.inf, 10.0) == math.inf
    assert _simulate._ratio(10.0, 40.0) == 0.25


def _output(C, status, lower, upper, naive_shift):
    """A synthetic-truth kernel output of two replicates, three arms and two kinds."""
    theta = np.array([[0.5, 0.625, 0.75], [0.25, 0.25, 0.125]], np.float32)
    R, Q, K = 2, 2, 3
    lo = np.broadcast_to(theta[:, None, None, :], (R, C, Q, K)) + np.asarray(lower)[:, None]
    up = np.broadcast_to(theta[:, None, None, :], (R, C, Q, K)) + np.asarray(upper)[:, None]
    est = np.broadcast_to(theta[:, None, :], (R, C, K)).copy()
    cp = idn.Record(
        estimate=est, lower=lo.astype(np.float32), upper=up.astype(np.float32),
        naive=est + naive_shift, pulls=np.zeros((R, C, K), np.int32),
        lam=np.zeros((R, C, K), np.float32), recommended=np.full((R, C), 2, np.int32),
        calls=np.full((R, C), 30, np.int32), status=np.asarray(status, np.int32),
    )
    return idn.IdentificationOutput(theta=theta, instance=np.full(R, -1, np.int32),
                                    checkpoints=cp)


def test_summarise_naive_coverage_uses_the_stop_kinds_interval():
    """_summarise: the naive baseline's intervals are the stop kind's (here the second
    kind), both ends; budget fractions are budgets over K n; status code 4 is counted."""
    cfg = idn.Config("pulse", 3, 10, budgets=(10, 30), cs_kinds=("eb", "hoeffding"),
                     stop_kind="hoeffding", truth="synthetic")
    # kind "eb" reaches only 0.01 above theta, "hoeffding" 0.2; naive shift -0.05:
    # around the naive estimate "hoeffding" still covers, "eb"'s upper end would not
    out = _output(2, [[0, 4], [1, 4]], lower=[-0.1, -0.1], upper=[0.01, 0.2],
                  naive_shift=-0.05)
    rep = _simulate._summarise(out, cfg, {"K": 3, "n_items": 10}, np.zeros((0, 3)),
                               np.array([]), True)
    np.testing.assert_array_equal(rep.naive_coverage_family, [1.0, 1.0])
    np.testing.assert_allclose(rep.budget_fractions, [10 / 30, 1.0])
    assert rep.status_counts.tolist() == [[1, 1, 0, 0, 0], [0, 0, 0, 0, 2]]
    np.testing.assert_allclose(rep.accuracy, [0.5, 0.5])  # replicate 0's best is arm 2


def test_summarise_confidence_mode_has_one_checkpoint_of_naive_coverage():
    """_summarise in confidence mode without predictions: one checkpoint (the cap), so
    one NaN naive coverage, matching the one budget."""
    cfg = idn.Config("ucbe", 3, 10, budgets=(10, 30), mode="confidence",
                     cs_kinds=("eb", "hoeffding"), truth="synthetic")
    out = _output(1, [[2], [3]], lower=[-0.1, -0.1], upper=[0.1, 0.1], naive_shift=0.0)
    rep = _simulate._summarise(out, cfg, {"K": 3, "n_items": 10}, np.zeros((0, 3)),
                               np.array([]), False)
    assert rep.budgets.tolist() == [30] and rep.naive_coverage_family.shape == (1,)
    assert np.isnan(rep.naive_coverage_family).all()
    assert rep.status_counts.tolist() == [[0, 0, 1, 1, 0]]
