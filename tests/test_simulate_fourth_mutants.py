"""Gaps found by a fourth mutation review of jaxeval._simulate: the train / pool split's
refusals and hints, the unused-setting names, the item check of given factors, why a
name is not a candidate, and IdentificationReport's summary, repr, npz round trip of an
older report, top-two gap and by_gap bins. Everything here is a direct call or a
hand-built report (no simulation, no JAX compilation)."""

import dataclasses
import math
import re
import types

import numpy as np
import pytest
from test_simulate_report_mutants import GAP_CORRECT, GAP_THETA, TO95, _curve_rep, _rep
from test_simulate_setup_mutants import _distinct

from jaxeval import ScoreMatrix, _simulate
from jaxeval._simulate import IdentificationReport, PoolError, split_pool, unused_settings


def test_split_pool_default_that_leaves_one_candidate_says_so():
    """Two distinct models: the default half (1) would leave one candidate, and the
    refusal says it was the default; an explicit 1 is refused with the bounds."""
    sm = _distinct(2, n=10)
    with pytest.raises(PoolError, match=r"^n_train: the default \(half of the models, 1\) "
                                        r"leaves fewer than 2 candidates of the 2 distinct "
                                        r"models") as e:
        split_pool(sm, None, 2, 0)
    assert e.value.arg == "n_train"
    with pytest.raises(PoolError, match=r"^n_train: expected an integer in \[0, 0\], got 1 "
                                        r"\(2 distinct models") as e:
        split_pool(sm, 1, 2, 0)
    assert e.value.arg == "n_train"


def test_split_pool_hint_when_the_matrix_holds_exactly_k_models():
    """Four models, K = 4, default split of 2: only n_train = 0 leaves K candidates, and
    the refusal says so; without training models there is nothing fewer to suggest."""
    sm = _distinct(4, n=10)
    with pytest.raises(PoolError, match=r"choose K <= 2, or fewer training models "
                                        r"\(n_train; at most 0 leave K candidates\)$") as e:
        split_pool(sm, None, 4, 0)
    assert e.value.arg == "K"
    with pytest.raises(PoolError, match=r"\(4 after removing duplicates, 0 for training\); "
                                        r"choose K <= 4$"):
        split_pool(sm, 0, 5, 0)


def test_split_pool_needs_full_truth_of_the_candidates_only():
    """A missing cell in a training model is fine (only candidates are played); one in a
    candidate is refused as the data's fault (``arg == "data"``)."""
    sm = _distinct(8, n=10)
    train, pool, _ = split_pool(sm, 4, 2, 0)
    rows = {str(m): i for i, m in enumerate(sm.models)}
    mask = np.ones(sm.shape, bool)
    mask[rows[str(train.models[0])], 3] = False
    holed = ScoreMatrix(sm.scores, mask=mask, models=sm.models)
    train2, pool2, n = split_pool(holed, 4, 2, 0)
    assert n == 4 and pool2.models.tolist() == pool.models.tolist() and pool2.mask.all()
    mask = np.ones(sm.shape, bool)
    mask[rows[str(pool.models[0])], 3] = False
    holed = ScoreMatrix(sm.scores, mask=mask, models=sm.models)
    with pytest.raises(PoolError, match=r"^data: the simulation needs the full truth") as e:
        split_pool(holed, 4, 2, 0)
    assert e.value.arg == "data"


def test_unused_settings_name_shrink_without_predictions_and_repr_strings():
    """Without predictions the prior's pseudo-count ``shrink`` is unused too; values are
    written with repr (a string quoted)."""
    assert unused_settings("ucbe", False, "budget", "none", False, shrink=5.0) == [
        "shrink=5.0"]
    assert unused_settings("uniform", False, "budget", "none", False, lam0="learned",
                           shrink=2.0) == ["lam0='learned'", "shrink=2.0"]


def test_item_factors_of_leaves_a_different_item_count_to_the_shape_check():
    """Factors naming another number of items are not compared name by name (the
    caller's shape check refuses them); same count, other names are refused."""
    fitted = types.SimpleNamespace(V=np.ones((5, 2)), c=np.zeros(5), u_mean=np.zeros(2),
                                   items=[f"i{j}" for j in range(5)])
    f, rho = _simulate.item_factors_of(fitted, [f"i{j}" for j in range(6)])
    assert f.V.shape == (5, 2) and rho == 1.0
    with pytest.raises(ValueError, match=r"^factors: fitted on other items \(position 4"):
        _simulate.item_factors_of(fitted, [f"i{j}" for j in range(4)] + ["x"])


def test_a_name_removed_as_a_duplicate_is_not_also_called_unknown():
    """Each missing name is given one reason: a dropped duplicate is not also unknown."""
    pool = ScoreMatrix(np.zeros((3, 4), np.float32), models=["m0", "m1", "m2"])
    train = ScoreMatrix(np.ones((1, 4), np.float32), models=["t0"])
    with pytest.raises(ValueError, match=re.escape(
            "instances: 2 model name(s) are not in the candidate pool of this seed's split: "
            "1 training model(s) of this seed's split: ['t0']; 1 removed as exact "
            "duplicate(s) of another model's row (drop_duplicates): ['m9']") + "$"):
        _simulate._check_instances([["m9", "t0"]], 2, pool, train, ("m9",))


def test_summary_and_repr_say_not_reached_and_shares_of_k_n():
    """A report that never reaches 90% says "not reached" for both targets (not a
    percentage of infinity); repr gives calls to 95% as a share of K*n."""
    never = _rep(correct=np.zeros((2, 4), bool), settings=_curve_rep().settings)
    assert never.summary().splitlines()[1] == "calls to 95%: not reached; to 90%: not reached"
    assert repr(never).endswith("calls to 95%: not reached)")
    assert repr(_curve_rep()).endswith(f"calls to 95%: {TO95 / 80:.1%} of K*n)")


def test_from_npz_reads_back_a_report_without_per_replicate_calls(tmp_path):
    """A report built without ``calls`` (an older report) saves and loads back with
    ``calls`` None and its figures intact."""
    old = dataclasses.replace(_curve_rep(), calls=None)
    back = IdentificationReport.from_npz(old.to_npz(tmp_path / "old"))
    assert back.calls is None
    assert back.calls_to(0.95) == pytest.approx(TO95)


def test_top_two_gap_is_the_best_minus_the_second_best_of_three_arms():
    """With three arms the gap is best minus second best (not best minus worst)."""
    rep = _rep(correct=np.ones((2, 4), bool),
               theta=[[0.875, 0.5, 0.75], [0.25, 0.25, 0.625]])
    np.testing.assert_array_equal(rep.top_two_gap, [0.125, 0.375])


def test_by_gap_two_equal_edges_are_one_bin_of_that_gap():
    """``edges=[g, g]`` is the one bin of the gap ``g`` (as documented)."""
    rep = _rep(correct=GAP_CORRECT, theta=GAP_THETA)
    (only,) = rep.by_gap(edges=[0.25, 0.25])
    assert (only.lo, only.hi, only.n_replicates, only.median_gap) == (0.25, 0.25, 2, 0.25)
    np.testing.assert_allclose(only.accuracy, [0.5, 1.0, 1.0, 1.0])


def test_by_gap_bins_average_their_own_replicates_calls():
    """Each bin's calls_used is the mean of its replicates' own calls (not the report's
    mean), so its calls_to is read on its own curve."""
    calls = [[10, 20, 40, 80], [5, 10, 20, 40], [5, 10, 20, 40], [10, 20, 40, 80]]
    rep = _rep(correct=GAP_CORRECT, theta=GAP_THETA, calls=calls)
    a, b = rep.by_gap(edges=[0.0, 0.25, 1.0])
    np.testing.assert_allclose(a.calls_used, [10, 20, 40, 80])
    np.testing.assert_allclose(b.calls_used, np.array([20, 40, 80, 160]) / 3)
    assert a.calls_to(0.95) == pytest.approx(40 + 0.95 * 40)
    assert math.isfinite(b.calls_to(0.95))
