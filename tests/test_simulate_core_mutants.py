"""Gaps found by a mutation review of simulate_identification's core (jaxeval._simulate):
the train / pool split, unused-setting rules, the factors' online rho, the small number
checks, the content digest, what settings record and the arrays ``_summarise`` builds.
Simulations are tiny (a few items, a few replicates) so each compiles fast."""

import re
import types
import warnings

import numpy as np
import pytest
from test_simulate import _report, _small_matrix
from test_simulate_report_mutants import _boot_rep
from test_simulate_setup_mutants import SPEC, _distinct

import jaxeval
from jaxeval import _identification as idn
from jaxeval import _simulate
from jaxeval._factorization import ItemFactors
from jaxeval._simulate import (
    item_factors_of,
    simulate_identification,
    split_pool,
    unused_settings,
)


def test_split_pool_trains_on_a_single_model_when_asked():
    """``n_train=1`` splits off one training model (only ``0`` means none)."""
    sm = _distinct(8, n=10)
    train, pool, n = split_pool(sm, 1, 2, 3)
    assert n == 1 and train is not None and train.n_models == 1 and pool.n_models == 7
    t2, p2 = sm.split([1], seed=3)
    assert train.models.tolist() == t2.models.tolist()
    assert pool.models.tolist() == p2.models.tolist()


def test_unused_settings_bias_outside_biased_and_rho_with_a_refit():
    """``bias`` is read only by the ``"biased"`` corruption (not by ``"random"``); ``rho``
    is read by a refit of one or more Newton steps."""
    assert unused_settings("pulse", True, "budget", "random", False, bias=0.5) == ["bias=0.5"]
    assert unused_settings("pulse", True, "budget", "biased", False, bias=0.5) == []
    assert unused_settings("pulse", True, "budget", "none", False, rho=5.0) == []
    assert unused_settings("pulse", True, "budget", "none", False, rho=5.0,
                           num_newton=2) == []
    assert unused_settings("pulse", True, "budget", "none", False, rho=5.0,
                           num_newton=0) == ["rho=5.0"]


def test_item_factors_of_rho_by_what_is_given():
    """ItemFactors carry no rho of their own (None); a fitted model gives its
    ``online_rho``, or 1.0 where it has none."""
    V, c, u = np.ones((5, 2)), np.zeros(5), np.zeros(2)
    f, rho = item_factors_of(ItemFactors(V, c, u))
    assert rho is None and f.V.dtype == np.float32 and f.V.shape == (5, 2)
    _, rho = item_factors_of(types.SimpleNamespace(V=V, c=c, u_mean=u))
    assert rho == 1.0
    _, rho = item_factors_of(types.SimpleNamespace(V=V, c=c, u_mean=u, online_rho=0.25))
    assert rho == 0.25


def test_calls_to_refuses_a_numpy_bool_as_accuracy():
    """A NumPy bool is not a number (as a Python bool is not): ``np.True_`` is not read
    as accuracy 1.0."""
    rep = _report([0.5, 0.9, 0.95, 1.0])
    assert rep.calls_to(1.0) == 80.0
    for flag in (True, np.True_):
        with pytest.raises(TypeError, match="accuracy must be a number"):
            rep.calls_to(flag)
    with pytest.raises(TypeError, match="alpha must be a number"):
        simulate_identification(SPEC, "ucbe", K=2, n_replicates=2, alpha=np.True_)


def test_eps_takes_the_whole_unit_interval():
    """``eps`` lies in [0, 1]: 0.75 is accepted (the call reaches the refusal of instances
    for synthetic truth), 1.5 refused naming the range."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="^instances: only for real data"):
            simulate_identification(SPEC, "ucbe", K=2, n_replicates=2, mode="confidence",
                                    eps=0.75, instances=[[0, 1]])
    with pytest.raises(ValueError, match=re.escape("eps must lie in [0, 1], got 1.5")):
        simulate_identification(SPEC, "ucbe", K=2, n_replicates=2, eps=1.5)


_KW = dict(K=2, n_replicates=2, n_train=0, budget_fractions=(1.0,), cs_kinds=("eb",),
           lanes=2)


def test_content_digest_is_twelve_hex_digits_over_scores_and_names():
    """An unnamed matrix is recorded with the first 12 hex digits of a digest over its
    scores, mask and names: the same scores under other model names are other data."""
    s = _small_matrix(m=6, n=8).scores
    rep = simulate_identification(jaxeval.ScoreMatrix(s), "uniform", **_KW)
    assert rep.settings["synchronized"] is False  # resolved: off but for SySRs
    a = rep.settings["data"]
    assert re.fullmatch(r"ScoreMatrix \[6, 8\] sha256:[0-9a-f]{12}", a), a
    renamed = jaxeval.ScoreMatrix(s, models=[f"x{i}" for i in range(6)])
    b = simulate_identification(renamed, "uniform", **_KW).settings["data"]
    assert b != a


def test_given_factors_set_the_rank_and_the_online_rho():
    """Given factors set the rank recorded (the factors' own, not ``rank``'s default)
    and, with ``rho`` left at None, the refit's prior strength (their ``online_rho``)."""
    import dataclasses

    sm = _small_matrix(m=8, n=10)
    lr = jaxeval.fit_factorization(sm, rank=2, rho=1.0, seed=0, num_steps=5)
    lr = dataclasses.replace(lr, online_rho=0.25)
    rep = simulate_identification(sm, "pulse", factors=lr, **_KW)
    assert rep.settings["rank"] == 2 and rep.settings["rho"] == 0.25
    rep = simulate_identification(sm, "pulse", factors=lr, rho=3.0, **_KW)
    assert rep.settings["rho"] == 3.0


def test_settings_record_the_resolved_synchronized_flag():
    """``synchronized=None`` resolves to on for SySRs (off for the others, see the digest
    test above); settings hold the value run, not the None given."""
    rep = simulate_identification(jaxeval.SyntheticSpec(n_items=6), "sysrs", K=2,
                                  n_replicates=2, budget_fractions=(1.0,), cs_kinds=("eb",),
                                  lanes=2)
    assert rep.settings["synchronized"] is True


def test_summarise_coverage_se_and_widths_from_per_replicate_records():
    """Two replicates, two checkpoints, one kind, three arms: replicate 0 misses arm 0 at
    the first checkpoint, replicate 1 arm 1 at the second. The family holds at every
    checkpoint in no replicate (0), at each checkpoint in one of two (0.5); 4 of the 6
    (replicate, arm) pairs hold throughout; the standard error is sqrt(p (1 - p) / R)."""
    theta = np.array([[0.5, 0.625, 0.75], [0.25, 0.25, 0.125]], np.float32)
    R, C, Q, K = 2, 2, 1, 3
    lo = np.broadcast_to(theta[:, None, None, :] - 0.125, (R, C, Q, K)).copy()
    up = np.broadcast_to(theta[:, None, None, :] + 0.125, (R, C, Q, K)).copy()
    up[0, 0, 0, 0] = theta[0, 0] - 0.0625
    lo[1, 1, 0, 1] = theta[1, 1] + 0.0625
    est = np.broadcast_to(theta[:, None, :], (R, C, K)).copy()
    cp = idn.Record(
        estimate=est, lower=lo.astype(np.float32), upper=up.astype(np.float32), naive=est,
        pulls=np.zeros((R, C, K), np.int32), lam=np.zeros((R, C, K), np.float32),
        recommended=np.array([[2, 2], [0, 2]], np.int32),
        calls=np.array([[10, 30], [10, 20]], np.int32), status=np.zeros((R, C), np.int32),
    )
    out = idn.IdentificationOutput(theta=theta, instance=np.full(R, -1, np.int32),
                                   checkpoints=cp)
    cfg = idn.Config("ucbe", 3, 10, budgets=(10, 30), cs_kinds=("eb",), truth="synthetic")
    rep = _simulate._summarise(out, cfg, {"K": 3, "n_items": 10}, np.zeros((0, 3)),
                               np.array([]), False)
    np.testing.assert_array_equal(rep.coverage_family, [0.0])
    np.testing.assert_array_equal(rep.coverage_family_at, [[0.5, 0.5]])
    np.testing.assert_allclose(rep.coverage_arm, [4 / 6])
    np.testing.assert_allclose(rep.accuracy, [1.0, 0.5])  # replicate 1 then picks a worst arm
    np.testing.assert_allclose(rep.accuracy_se, [0.0, np.sqrt(0.25 / 2)])
    np.testing.assert_allclose(rep.calls_used, [10.0, 25.0])


def test_fit_default_factors_is_fit_factorization_with_the_given_steps():
    """The default fit is ``fit_factorization(train, rank, rho=1.0, seed, fit_steps)``:
    its float32 item factors and its ``online_rho`` come with it."""
    train = _small_matrix(m=8, n=10)
    lr, f, rho = _simulate.fit_default_factors(train, 2, 3, 7)
    want = jaxeval.fit_factorization(train, rank=2, rho=1.0, seed=3, num_steps=7)
    assert lr.rho_u == want.rho_u == 1.0 and lr.final_loss == want.final_loss
    np.testing.assert_array_equal(f.V, np.asarray(want.V, np.float32))
    assert f.V.dtype == np.float32 and rho == want.online_rho


def test_alpha_of_exactly_the_minimum_is_accepted():
    """``alpha`` must be at least MIN_ALPHA (1e-30): that value itself is accepted (the
    call reaches the refusal of instances for synthetic truth), just below is not."""
    with pytest.raises(ValueError, match="^instances: only for real data"):
        simulate_identification(SPEC, "ucbe", K=2, n_replicates=2, alpha=_simulate.MIN_ALPHA,
                                instances=[[0, 1]])
    with pytest.raises(ValueError, match="alpha must be at least 1e-30"):
        simulate_identification(SPEC, "ucbe", K=2, n_replicates=2, alpha=0.9e-30)


def test_interval_level_is_open_at_both_ends():
    """``level`` lies strictly inside (0, 1): 0 is refused like 1."""
    rep = _boot_rep()
    for level in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"level: expected a number in \(0, 1\)"):
            rep.calls_to_interval(0.8, level=level, n_boot=10)


def test_instances_are_drawn_from_the_candidate_pool_only():
    """The instances index the candidate pool (the models left after the default split
    of half for training), seeded by ``(seed, K)``: never a row past the pool."""
    sm = _distinct(12, n=8)
    kw = {**_KW, "n_train": None, "n_instances": 6}
    rep = simulate_identification(sm, "uniform", **kw)
    assert rep.settings["n_train"] == 6 and rep.pool_models.shape == (6,)
    np.testing.assert_array_equal(rep.instances, _simulate.draw_instances(6, 2, 6, 0))


# ------------------------------------------- two library problems the review found
def test_synthetic_truth_records_no_instance_count_and_reruns_from_it():
    """Synthetic truth has no instances: ``settings["n_instances"]`` is None (it read 0,
    which ``n_instances=`` refused when the settings were passed back); None is the
    default there, and refused values stay refused naming the argument."""
    rep = simulate_identification(SPEC, "uniform", K=2, n_replicates=2, lanes=2)
    assert rep.settings["n_instances"] is None and rep.settings["n_train"] is None
    again = simulate_identification(SPEC, "uniform", K=2, n_replicates=2, lanes=2,
                                    n_instances=rep.settings["n_instances"])
    np.testing.assert_array_equal(again.correct, rep.correct)
    with pytest.raises(ValueError, match="n_instances: expected an integer >= 1, got 0"):
        simulate_identification(SPEC, "uniform", K=2, n_replicates=2, n_instances=0)
    sm = _small_matrix(m=6, n=8)
    real = simulate_identification(sm, "uniform", n_instances=None, **_KW)
    assert real.settings["n_instances"] == _simulate._N_INSTANCES_DEFAULT


def test_instances_given_as_byte_string_names_are_decoded():
    """Model names as byte strings (dtype ``S``, e.g. read from HDF5) name the same pool
    models as text; bytes that are not UTF-8 are refused naming ``instances``."""
    s = _small_matrix(m=6, n=8).scores
    sm = jaxeval.ScoreMatrix(s, models=[f"m{i}" for i in range(6)])
    as_text = simulate_identification(sm, "uniform", instances=[["m3", "m1"]], **_KW)
    for names in (np.array([[b"m3", b"m1"]]), np.array([[b"m3", "m1"]], dtype=object)):
        rep = simulate_identification(sm, "uniform", instances=names, **_KW)
        np.testing.assert_array_equal(rep.instances, as_text.instances)
    with pytest.raises(ValueError, match="^instances: model names given as byte strings "
                       "must be UTF-8$"):
        simulate_identification(sm, "uniform", instances=np.array([[b"m3", b"\xff"]]), **_KW)
