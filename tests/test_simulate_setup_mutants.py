"""simulate_identification's set-up: argument checks, unused-setting warnings, the
train / pool split, the instance draw, budgets and what settings record
(jaxeval._simulate)."""

import re
import warnings

import numpy as np
import pytest
from test_simulate import _small_matrix

from jaxeval import ScoreMatrix, _simulate
from jaxeval._simulate import (
    PoolError,
    SyntheticSpec,
    draw_instances,
    simulate_identification,
    split_pool,
    unused_settings,
)

SPEC = SyntheticSpec(n_items=20)


def _distinct(m=13, n=30, seed=0):
    """A fully observed matrix of ``m`` distinct models."""
    sm = _small_matrix(m=m, n=n, seed=seed).drop_duplicates()
    assert sm.n_models == m
    return sm


def test_draw_instances_is_seeded_by_seed_and_k_and_rows_are_distinct():
    """The instances are ``n_instances`` draws without replacement from a generator
    seeded by ``[seed, K]`` (shared with studies, so both play the same instances)."""
    got = draw_instances(16, 3, 4, seed=7)
    rng = np.random.default_rng([7, 3])
    want = np.stack([rng.choice(16, 3, replace=False) for _ in range(4)])
    np.testing.assert_array_equal(got, want)
    assert got.shape == (4, 3)
    assert not np.array_equal(got, draw_instances(16, 3, 4, seed=3))  # another seed, [3, 3]
    # a pool of exactly K models: every row is a permutation of the pool
    full = draw_instances(5, 5, 30, seed=0)
    assert all(sorted(r) == [0, 1, 2, 3, 4] for r in full.tolist())


def test_split_pool_default_half_zero_and_bounds():
    """``None`` trains on half the models rounded down, with ``ScoreMatrix.split`` of the
    same seed; ``0`` keeps every model a candidate; ``n_train`` may leave exactly 2
    candidates and ``K`` may equal the pool size; beyond, the refusal names its argument."""
    sm = _distinct(13)
    train, pool, n = split_pool(sm, None, 3, 7)
    assert n == 6 and train.n_models == 6 and pool.n_models == 7
    t2, p2 = sm.split([6], seed=7)
    assert train.models.tolist() == t2.models.tolist()
    assert pool.models.tolist() == p2.models.tolist()
    train, pool, n = split_pool(sm, 0, 3, 7)
    assert train is None and n == 0 and pool.models.tolist() == sm.models.tolist()
    train, pool, n = split_pool(sm, 11, 2, 7)
    assert (train.n_models, pool.n_models, n) == (11, 2, 11)
    assert split_pool(sm, None, 7, 7)[1].n_models == 7  # K = pool size
    with pytest.raises(PoolError, match=r"n_train: expected an integer in \[0, 11\], got 12 "
                                        r"\(13 distinct") as e:
        split_pool(sm, 12, 2, 7)
    assert e.value.arg == "n_train"
    with pytest.raises(PoolError, match=r"K must be at most the candidate pool size: K=8, but "
                                        r"the pool has 7 models \(13 after removing "
                                        r"duplicates, 6 for training\); choose K <= 7, "
                                        r"or fewer training models \(n_train; at most 5 "
                                        r"leave K candidates\)$") as e:
        split_pool(sm, None, 8, 7)
    assert e.value.arg == "K"
    with pytest.raises(PoolError, match=r"data: 1 distinct model") as e:
        split_pool(sm.take(models=[0]), None, 2, 0)
    assert e.value.arg == "data"


def test_split_pool_counts_the_pool_models_with_missing_cells():
    """The refusal counts the candidate models with a missing cell, and the cells."""
    sm = _distinct(8, n=10)
    mask = np.ones(sm.shape, bool)
    mask[2, [0, 4, 7]] = False  # one model, three cells
    sm = ScoreMatrix(sm.scores, mask=mask)
    with pytest.raises(PoolError, match=r"but 1 pool models have missing cells \(3 cells\)"):
        split_pool(sm, 0, 2, 0)


def test_budgets_and_fractions_together_are_refused():
    with pytest.raises(ValueError, match="give either budgets or budget_fractions, not both"):
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4, budgets=[10],
                                budget_fractions=[0.5])


def test_budgets_from_fractions_round_to_nearest_and_come_sorted():
    """Fractions of ``K*n`` round to the nearest call (12.6 -> 13, not 12), at least 1;
    budgets come back sorted and deduplicated; non-integer budgets are refused."""
    cb = _simulate._canonical_budgets
    assert cb(None, (0.21, 0.5, 1.0), 60) == (13, 30, 60)
    assert cb(None, (0.001,), 60) == (1,)
    assert cb((60, 10, 30), None, 60) == (10, 30, 60)
    with pytest.warns(UserWarning, match="budgets: 3 checkpoints requested, 2 distinct"):
        assert cb((60, 10, 60), None, 60) == (10, 60)
    with pytest.raises(ValueError, match="budgets must be a non-empty 1-D sequence of integers"):
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4,
                                budgets=[10.0, 20.0])
    # shares of K*n given as budgets: pointed at budget_fractions
    with pytest.raises(ValueError, match=r"got \[0\.5, 2\.0\]; budgets are counts of LLM "
                                         r"calls: shares of K\*n \(as a study's budgets\) "
                                         r"go in budget_fractions=$"):
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4,
                                budgets=[0.5, 2.0])
    with pytest.raises(ValueError, match=r"got \[10\.0, 20\.0\]$"):  # no hint: whole calls
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4,
                                budgets=[10.0, 20.0])
    with pytest.raises(ValueError, match=r"budgets must lie in \[1, K\*n\] = \[1, 60\] LLM "
                                         "calls, got min 0 and max 10"):
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4, budgets=[0, 10])


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale=-1.0), r"^scale must lie in \[0, 1e\+06\], got -1.0"),
    (dict(shrink=-1.0), r"^shrink must lie in \[0, 1e\+06\], got -1.0"),
    (dict(rho=-1.0), r"^rho must lie in \[0, 1e\+06\], got -1.0"),
    (dict(bias=-1.5), r"^bias must lie in \[-1, 1\], got -1.5"),
    (dict(chunk_size=0), r"^chunk_size: expected an integer >= 1, got 0"),
    (dict(seed=-1), r"^seed: expected an integer >= 0, got -1"),
    (dict(n_replicates=0), r"^n_replicates: expected an integer >= 1, got 0"),
    (dict(cs_kinds=()), r"^cs_kinds: expected at least one interval kind, got none"),
    (dict(instances=[[0, 1, 6]]), r"^instances: pool rows must lie in \[0, 6\), got \[0, 6\]"),
    (dict(instances=[[-1, 0, 1]]), r"^instances: pool rows must lie in \[0, 6\), got \[-1, "),
])
def test_refusals_name_the_argument(kwargs, match):
    """Each bad argument is refused with a message that starts with its own name."""
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_identification(_small_matrix(), "ucbe", **{"K": 3, "n_replicates": 4, **kwargs})


def test_a_negative_bias_is_accepted():
    """``bias`` lies in [-1, 1]: a negative bias (predictions too low) is a valid setting
    (the call gets past the checks to the refusal of instances for synthetic truth)."""
    with pytest.raises(ValueError, match="^instances: only for real data"):
        simulate_identification(SPEC, "pulse", K=2, n_replicates=4, corruption="biased",
                                bias=-0.5, instances=[[0, 1]])


@pytest.mark.parametrize("policy, kwargs", [
    ("naive", dict(a=3.0)),  # naive's index has the sqrt(a / N) term
    ("ucbe", dict(eps=0.2, skip_separated=True)),  # eps is the skip's test too
    ("pulse", dict(scale=2.0)),
])
def test_settings_that_are_read_raise_no_warning(policy, kwargs):
    """A setting the configuration reads is not named in the unused-setting warning
    (warnings are errors here: the call reaches the refusal of instances for synthetic
    truth, which comes after the warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="^instances: only for real data"):
            simulate_identification(SPEC, policy, K=2, n_replicates=4, instances=[[0, 1]],
                                    **kwargs)


def test_unused_settings_for_pulse_ucb_and_corruptions():
    """pulse_ucb reads ``a`` but not PULSE's ``scale``; adversarial predictions, like
    random ones, ignore the refitted factor (rho and num_newton unused); eps is read in
    budget mode when separated arms are skipped. The warning says the configuration."""
    assert unused_settings("pulse_ucb", True, "budget", "none", False, a=2.0,
                           scale=2.0) == ["scale=2.0"]
    assert unused_settings("pulse", True, "budget", "adversarial", False, rho=5.0,
                           num_newton=3) == ["rho=5.0", "num_newton=3"]
    assert unused_settings("ucbe", False, "budget", "none", False, skip_separated=True,
                           eps=0.2) == []
    assert unused_settings("ucbe", False, "budget", "none", False, eps=0.2) == ["eps=0.2"]
    with pytest.warns(UserWarning, match=re.escape(
            "simulate_identification: scale=2.0 has no effect for policy 'pulse_ucb' "
            "(mode 'budget', corruption 'none', with predictions)")):
        with pytest.raises(ValueError, match="^instances: only for real data"):
            simulate_identification(SPEC, "pulse_ucb", K=2, n_replicates=4, scale=2.0,
                                    instances=[[0, 1]])


def test_factors_with_synthetic_truth_are_named():
    with pytest.raises(ValueError, match="^factors: only for real data"):
        simulate_identification(SPEC, "pulse", K=2, n_replicates=4, factors=object())


def test_learned_lam0_refusal_names_the_training_count():
    """The count in the too-few-training-models refusal is the resolved one (the
    default split of 7 distinct models trains on 3)."""
    with pytest.raises(ValueError, match=r"needs at least 4 training models, n_train=3$"):
        simulate_identification(_distinct(7), "pulse", K=2, n_replicates=4, rank=2,
                                lam0="learned", fit_steps=5)


def test_settings_record_the_resolved_split_instances_and_duplicates():
    """settings hold the training count the default resolved to, the number of
    instances given (n_instances left at its default) and the count of duplicate rows
    removed."""
    sm = _distinct(12, n=20)
    doubled = ScoreMatrix(np.concatenate([sm.scores, sm.scores[:2]]))
    rep = simulate_identification(doubled, "uniform", K=3, n_replicates=2,
                                  instances=[[0, 1, 2], [3, 4, 5]], budget_fractions=(0.5,),
                                  cs_kinds=("eb",), lanes=2)
    s = rep.settings
    assert s["n_train"] == 6 and s["n_instances"] == 2 and s["duplicates_removed"] == 2
    assert s["budgets"] == [30] and s["K"] == 3 and s["n_items"] == 20
    assert rep.pool_models.shape == (6,)
    rep = simulate_identification(sm, "uniform", K=3, n_replicates=2, n_train=0,
                                  budget_fractions=(0.5,), cs_kinds=("eb",), lanes=2)
    assert rep.settings["duplicates_removed"] == 0 and rep.settings["n_train"] == 0
    np.testing.assert_array_equal(rep.instances, draw_instances(12, 3, 10, 0))


def test_use_predictions_overrides_the_policy_default():
    """``use_predictions=False`` turns a prediction policy's predictions off (its
    prediction settings are then unused), and ``True`` lets a policy without predictions
    take a corruption (the calls reach the refusal of instances for synthetic truth)."""
    with pytest.warns(UserWarning, match=re.escape(
            "lam0=0.2 has no effect for policy 'pulse' (mode 'budget', corruption 'none', "
            "without predictions)")):
        with pytest.raises(ValueError, match="^instances: only for real data"):
            simulate_identification(SPEC, "pulse", K=2, n_replicates=4, use_predictions=False,
                                    lam0=0.2, instances=[[0, 1]])
    with pytest.raises(ValueError, match="^instances: only for real data"):
        simulate_identification(SPEC, "ucbe", K=2, n_replicates=4, use_predictions=True,
                                corruption="biased", instances=[[0, 1]])
