"""Fourth mutation review of the factorization's public layer: what the first three
(test_factorization_api_mutants.py, ..._deep_mutants.py, ..._third_mutants.py) and
test_factorization*.py left open: an infinite score without a mask (observed, not
missing), every field of a saved fit checked on load (a single non-finite entry, the
prior centre's length, an infinite or boolean strength), the selection grid run with
the held-out share, learning rate and step count given for it (and not the final fit's),
the 10% margin of the poor-fit warning, the seed boundary of ``learn_lam0``'s folds, and
errors that list their first three offenders."""

import math
import re
import warnings

import numpy as np
import pytest
from test_factorization_api_deep_mutants import _coins, _low_rank
from test_factorization_api_mutants import small  # noqa: F401  (fixture)

import jaxeval


# ------------------------------------------------------------------ online input
def test_an_infinite_score_without_a_mask_is_observed_and_refused(small):  # noqa: F811
    """Without a mask only NaN marks an unobserved cell: an infinite score is an observed
    score that is not finite, refused naming where it is (not silently dropped)."""
    lr, S = small
    x = S[:2].copy()
    x[1, 4] = np.inf
    with pytest.raises(ValueError, match=re.escape(
            "scores: 1 observed scores are not finite (first at row 1, item 4: inf)")):
        lr.predict(x, num_newton=1)
    with pytest.raises(ValueError, match="scores: 1 observed scores are not finite"):
        lr.update(x[1], num_newton=1)


# ------------------------------------------------------------------ saved files
@pytest.fixture
def saved(small, tmp_path):  # noqa: F811
    """The arrays of a saved fit, and a helper that saves them changed and loads them."""
    lr, _ = small
    with np.load(lr.to_npz(tmp_path / "good")) as z:
        good = dict(z)

    def load(name, **change):
        p = tmp_path / f"{name}.npz"
        np.savez(p, **{**good, **change})
        return jaxeval.LowRankLogistic.from_npz(p)

    return good, load


def test_a_single_non_finite_factor_entry_is_refused_on_load(saved):
    """One NaN (or infinity) anywhere in ``V``, ``c``, ``u_mean`` or ``U`` makes the file
    unusable: refused naming the field, not only when every entry is bad."""
    good, load = saved
    for name, bad in (("V", np.nan), ("c", np.nan), ("u_mean", np.inf), ("U", -np.inf)):
        x = good[name].copy()
        x.flat[-1] = bad
        with pytest.raises(ValueError, match=f"not a factorization.*{name} has non-finite"):
            load(f"bad_{name}", **{name: x})


def test_a_prior_centre_of_the_wrong_length_is_refused_on_load(saved):
    good, load = saved
    with pytest.raises(ValueError, match=r"inconsistent shapes: .*u_mean \(3,\)"):
        load("u_mean", u_mean=np.zeros(3, good["u_mean"].dtype))


def test_strengths_must_be_finite_non_negative_numbers_on_load(saved):
    """An infinite strength, or a boolean one, is no prior strength: refused naming it."""
    _, load = saved
    for name, bad in (("rho_v", np.float64(np.inf)), ("rho_u", np.float64(np.nan)),
                      ("online_rho", np.bool_(True))):
        with pytest.raises(ValueError, match=f"not a factorization.*{name} is .*, not a "
                                             "finite value >= 0"):
            load(f"bad_{name}", **{name: bad})


# ------------------------------------------------------------------ selection
def test_the_selection_grid_runs_with_its_own_share_rate_and_steps():
    """The held-out curve depends on ``holdout_fraction``, ``learning_rate`` and
    ``selection_steps`` (the grid's fits), not on ``num_steps`` (the final fit's)."""
    S = _low_rank(16, 12)
    kw = dict(rank="auto", rho=1.0, ranks=(1,), num_steps=3, selection_steps=6,
              holdout_fraction=0.2, learning_rate=0.1, seed=0)

    def curve(**change):
        return jaxeval.fit_factorization(S, **{**kw, **change}).selection["heldout_loss"]

    base = curve()
    np.testing.assert_array_equal(curve(num_steps=9), base)
    for change in (dict(holdout_fraction=0.4), dict(learning_rate=0.03),
                   dict(selection_steps=12)):
        assert not np.array_equal(curve(**change), base), change


@pytest.mark.parametrize("ratio, warns", [(1.05, False), (1.15, True)])
def test_a_fit_warns_only_beyond_ten_percent_above_log_two(monkeypatch, ratio, warns):
    """The warning says "more than 10% above" the log 2 of predicting 0.5 everywhere: a
    final loss 5% above is no warning, 15% above is (the kernel's result is kept as is,
    only its final loss set)."""
    from jaxeval import _factorization as fz

    real = fz.fit_factors

    def fit(*a, **k):
        return real(*a, **k)._replace(final_loss=np.float32(ratio * math.log(2.0)))

    monkeypatch.setattr(fz, "fit_factors", fit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lr = jaxeval.fit_factorization(_coins(12, 8), rank=1, rho=1.0, num_steps=2)
    assert lr.final_loss == pytest.approx(ratio * math.log(2.0), rel=1e-6)
    said = [str(w.message) for w in caught if "more than 10% above" in str(w.message)]
    assert len(said) == int(warns), said


# ------------------------------------------------------------------ messages
def test_errors_list_their_first_three_offenders():
    """Rows without an observed cell (``fit_factorization``) and items seen by fewer than
    two rows (``learn_lam0``) are counted, and the first three named."""
    S = _coins(10, 8)
    sm = jaxeval.ScoreMatrix(S, models=[f"m{i}" for i in range(10)],
                             items=[f"i{j}" for j in range(8)])
    rows = S.copy()
    rows[[1, 4, 6, 9]] = np.nan
    with pytest.raises(ValueError, match=re.escape(
            "data: 4 model rows have no observed cell (e.g. ['m1', 'm4', 'm6'])")):
        jaxeval.fit_factorization(jaxeval.ScoreMatrix(rows, models=sm.models, items=sm.items),
                                  rank=1, rho=1.0, num_steps=2)
    thin = S.copy()
    thin[1:, [0, 2, 5, 7]] = np.nan
    with pytest.raises(ValueError, match=re.escape(
            "data: 4 item(s) observed in fewer than 2 model rows (e.g. ['i0', 'i2', 'i5'])")):
        jaxeval.learn_lam0(jaxeval.ScoreMatrix(thin, models=sm.models, items=sm.items),
                           rank=1, num_steps=2)


# ------------------------------------------------------------------ learn_lam0
def test_learn_lam0_takes_the_largest_seed_its_folds_allow():
    """Fold ``f`` fits with ``seed + f``: with two folds ``2**63 - 2`` is the largest seed
    allowed (its second fold uses ``2**63 - 1``)."""
    S = _low_rank(8, 12)
    kw = dict(rank=1, n_observed=(3,), num_steps=2)
    lam = jaxeval.learn_lam0(S, seed=2**63 - 2, **kw)
    assert 0.0 <= lam <= 1.0
    with pytest.raises(ValueError, match=r"^seed: the folds' fits use seed \.\. seed \+ 1"):
        jaxeval.learn_lam0(S, seed=2**63 - 1, **kw)


# ------------------------------------------------ problems the review found (fixed)
def test_a_loss_history_that_is_no_1d_array_of_numbers_is_refused_on_load(saved):
    good, load = saved
    for bad in (np.zeros((2, 3)), np.array(["a", "b"])):
        with pytest.raises(ValueError, match="not a factorization.*loss_history must be a "
                                             "1-D array of numbers"):
            load("lh", loss_history=bad)
    # (a 0-d history, as a LowRankLogistic built by hand saves it, still loads)
    assert float(load("lh0", loss_history=np.array(0.5)).loss_history) == 0.5


def test_rho_v_and_the_grid_are_not_offered_auto():
    S = _coins(12, 10, 0)
    for kw, what in ((dict(rho=1.0, rho_v="auto"), "rho_v"), (dict(rhos=("auto",)), "rhos")):
        with pytest.raises(ValueError, match=rf"^{what}: expected a float >= 0, got 'auto'$"):
            jaxeval.fit_factorization(S, rank=1, **kw)
    with pytest.raises(ValueError, match=r"^rho: expected a float or 'auto', got 'x'$"):
        jaxeval.fit_factorization(S, rank=1, rho="x")
