"""Second mutation review of the factorization's public layer: what the first one
(test_factorization_api_mutants.py) left open. Errors that must name the model, item,
rank or argument at fault, the parameter count's item biases, grids that are only read
when asked for, defaults and what a fit records, ``predict_accuracy``'s Newton steps,
and ``learn_lam0``'s folds, the rows it scores and the hints of a fold that fails."""

import re

import jax
import numpy as np
import pytest
from test_factorization_api_mutants import small  # noqa: F401  (fixture)
from test_factorization_mutants import _np_sigmoid, fitted, lam0_by_hand  # noqa: F401

import jaxeval
from jaxeval import _factorization as fz


def _coins(m, n, seed=0):
    return (np.random.default_rng(seed).uniform(size=(m, n)) < 0.5).astype(float)


def _low_rank(m, n, seed=6):
    """0/1 scores of a planted rank-1 matrix with item offsets (varying predictions)."""
    rng = np.random.default_rng(seed)
    P = _np_sigmoid(rng.normal(size=(m, 1)) @ rng.normal(size=(1, n)) * 3.0
                    + rng.normal(size=n))
    return (rng.uniform(size=P.shape) < P).astype(float)


# ------------------------------------------------------------------ fit arguments
def test_empty_rows_and_columns_are_refused_naming_the_models_and_items():
    S = _coins(8, 6)
    sm = jaxeval.ScoreMatrix(S, models=[f"m{i}" for i in range(8)],
                             items=[f"i{j}" for j in range(6)])
    rows = S.copy()
    rows[[2, 5]] = np.nan
    with pytest.raises(ValueError, match=re.escape(
            "data: 2 model rows have no observed cell (e.g. ['m2', 'm5'])")):
        jaxeval.fit_factorization(jaxeval.ScoreMatrix(rows, models=sm.models, items=sm.items),
                                  rank=1, rho=1.0, num_steps=2)
    cols = S.copy()
    cols[:, 3] = np.nan
    with pytest.raises(ValueError, match=re.escape(
            "data: 1 item columns have no observed cell (e.g. ['i3'])")):
        jaxeval.fit_factorization(jaxeval.ScoreMatrix(cols, models=sm.models, items=sm.items),
                                  rank=1, rho=1.0, num_steps=2)


def test_the_parameter_count_includes_one_bias_per_item():
    """rank 2 on 6 models x 4 items has 2 * (6 + 4) + 4 = 24 parameters: refused on 23
    observed cells (the 20 factor entries alone would fit)."""
    S = _coins(6, 4)
    S[0, :2], S[1, :2] = 1.0, 0.0
    S[5, 3] = np.nan
    with pytest.raises(ValueError, match=r"^rank: rank 2 has 24 parameters but only 23 "
                                         r"observed cells$"):
        jaxeval.fit_factorization(S, rank=2, rho=1.0, num_steps=2)
    assert jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=2).rank == 1


def test_a_rank_grid_the_data_refuse_is_reported_at_its_smallest_rank():
    """When no rank of the grid fits, the error gives the reason for the smallest one
    (the closest to fitting)."""
    with pytest.raises(ValueError, match=r"^ranks: rank 25 is larger than the data allows "
                                         r"\(min\(models, items\) = min\(30, 20\) = 20\)"):
        jaxeval.fit_factorization(_coins(30, 20), rank="auto", rho=1.0, ranks=(40, 25))


def test_grid_arguments_are_read_only_when_that_value_is_chosen():
    """``rhos`` is not used when ``rho`` is given (an empty grid is no error there), nor
    ``ranks`` when ``rank`` is."""
    S = _coins(12, 8)
    lr = jaxeval.fit_factorization(S, rank=1, rho=1.0, rhos=(), ranks=(), num_steps=2)
    assert lr.selection is None and lr.rho_u == 1.0 and lr.rank == 1


def test_a_two_dimensional_grid_array_is_refused_as_no_sequence():
    with pytest.raises(TypeError, match=r"^ranks: expected a sequence of numbers"):
        jaxeval.fit_factorization(_coins(12, 8), rank="auto", rho=1.0,
                                  ranks=np.array([[1, 2]]))
    with pytest.raises(TypeError, match=r"^rhos: expected a sequence of numbers"):
        jaxeval.fit_factorization(_coins(12, 8), rank=1, rho="auto",
                                  rhos=np.array([[0.5, 1.0]]))


def test_fit_num_steps_must_be_at_least_one():
    with pytest.raises(ValueError, match=r"^num_steps: expected an integer >= 1, got 0"):
        jaxeval.fit_factorization(_coins(12, 8), rank=1, rho=1.0, num_steps=0)


def test_fit_defaults_select_rank_and_rho_on_the_documented_grids():
    """``fit_factorization(data)``: rank and rho both chosen, over ``DEFAULT_RANKS``
    (those the data allow: 1, 2, 4 of a 12 x 10 matrix) x ``DEFAULT_RHOS``, on 10% of
    the cells, with 500 selection steps and 1000 final steps at learning rate 0.1."""
    lr = jaxeval.fit_factorization(_low_rank(12, 10))
    sel = lr.selection
    assert sel["ranks"].tolist() == [1, 2, 4]
    assert sel["rhos"].tolist() == [0.3, 1.0, 3.0, 10.0, 30.0]
    assert sel["heldout_loss"].shape == (3, 5)
    assert sel["holdout_fraction"] == 0.1
    assert lr.info["num_steps"] == 1000 and lr.info["selection_steps"] == 500
    assert lr.info["learning_rate"] == 0.1 and lr.info["seed"] == 0
    assert lr.online_rho == 0.5 and lr.rho_v == lr.rho_u  # rho_v defaults to rho


def test_a_selected_fit_is_refitted_at_the_grid_cell_of_least_heldout_loss():
    """The rank and the rho of the final fit are those of the held-out minimum (here the
    grid's first rho, 30, over-smooths a planted matrix: it must not be the one used)."""
    lr = jaxeval.fit_factorization(_low_rank(30, 24), rank="auto", rho="auto", ranks=(1, 2),
                                   rhos=(30.0, 0.3), num_steps=20, selection_steps=60)
    sel = lr.selection
    a, b = np.unravel_index(np.argmin(sel["heldout_loss"]), sel["heldout_loss"].shape)
    assert b == 1  # (the point of the test: the minimum is not at the first rho)
    assert lr.rank == sel["ranks"][a] and lr.rho_u == lr.rho_v == 0.3


# ------------------------------------------------------------------ the fitted object
def test_the_loss_history_of_a_loaded_fit_is_read_only_too(small, tmp_path):  # noqa: F811
    """Every array of a fit is read-only, ``loss_history`` included, also when loaded
    from a file (numpy's arrays from a file are writable)."""
    lr, _ = small
    back = jaxeval.LowRankLogistic.from_npz(lr.to_npz(tmp_path / "f"))
    for fit in (lr, back):
        with pytest.raises(ValueError, match="read-only"):
            fit.loss_history[0] = 0.0


def test_final_loss_is_the_kernels_objective_at_the_returned_factors(fitted):  # noqa: F811
    """``final_loss`` is the objective per observed cell at the factors returned (the
    kernel's ``final_loss``), not a value read off the loss history."""
    lr, train, _, _ = fitted
    ref = fz.fit_factors(jax.random.fold_in(jax.random.key(3), 0), np.nan_to_num(train),
                         ~np.isnan(train), rank=2, rho_u=0.5, rho_v=4.0, learning_rate=0.1,
                         num_steps=40)
    assert lr.final_loss == pytest.approx(float(ref.final_loss), rel=1e-6)
    np.testing.assert_allclose(lr.loss_history, np.asarray(ref.loss_history), rtol=1e-6)


# ------------------------------------------------------------------ online
def test_predict_accuracy_runs_the_newton_steps_it_is_given(small):  # noqa: F811
    lr, S = small
    m = np.zeros(S.shape, bool)
    m[:, ::4] = True
    one = lr.predict(S, m, num_newton=1)
    assert np.abs(one - lr.predict(S, m)).max() > 1e-4  # one step is not converged
    np.testing.assert_allclose(lr.predict_accuracy(S, m, num_newton=1),
                               np.where(m, S, one).mean(axis=1), rtol=1e-6)


def test_a_bad_warm_start_for_one_row_names_both_shapes_it_takes(small):  # noqa: F811
    lr, S = small
    with pytest.raises(ValueError, match=re.escape("u_init: expected shape (2,) or (1, 2), "
                                                   "got (3,)")):
        lr.update(S[0], u_init=np.zeros(3), num_newton=1)
    with pytest.raises(ValueError, match=re.escape("u_init: expected shape (4, 2), got (3,)")):
        lr.update(S, u_init=np.zeros(3), num_newton=1)


# ------------------------------------------------------------------ learn_lam0
def test_learn_lam0_defaults_are_the_documented_ones():
    """``rank=8, rho=1.0, n_observed=(5, 10, 20), folds=2, seed=0``."""
    S = _low_rank(40, 40)
    want = jaxeval.learn_lam0(S, rank=8, rho=1.0, n_observed=(5, 10, 20), folds=2, seed=0,
                              num_steps=5)
    assert jaxeval.learn_lam0(S, num_steps=5) == want


def test_learn_lam0_splits_the_rows_into_folds_groups(capsys):
    """Nine models in three folds: each fold's factorization is fitted on the six
    models of the other two groups."""
    jaxeval.learn_lam0(_low_rank(9, 20), rank=1, folds=3, n_observed=(3,), num_steps=3,
                       progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" [")[0] for ln in lines[:3]] == [
        f"learn_lam0: fold {f} of 3: fitting rank 1 on 6 models (3 steps)" for f in (1, 2, 3)]


def test_learn_lam0_refuses_rank_zero_naming_the_argument():
    with pytest.raises(ValueError, match=r"^rank: expected an integer >= 1, got 0"):
        jaxeval.learn_lam0(_coins(8, 12), rank=0, num_steps=2)


def test_learn_lam0_scores_rows_with_two_items_beyond_those_observed():
    """A held-out row with exactly ``c + 2`` observed items is scored (two unseen items
    have a variance): λ₀ recomputed by hand with every row scored."""
    S = _low_rank(16, 24)
    rng = np.random.default_rng(1)
    for i in range(4):  # rows with 4 + 2 observed items
        S[i, rng.permutation(24)[6:]] = np.nan
    kw = dict(rank=1, rho=1.0, num_steps=30)
    lam = jaxeval.learn_lam0(S, n_observed=(4,), folds=2, seed=5, **kw)
    slope = lam0_by_hand(S, 4, 5, **kw)
    assert 0.0 < slope < 1.0
    np.testing.assert_allclose(lam, slope, rtol=1e-6)


def test_a_count_no_row_can_take_skips_only_that_count():
    """``n_observed`` with a count no row of 20 items can take (25): that count adds
    nothing, the others are scored as if it were not there."""
    S = _low_rank(12, 20)
    kw = dict(rank=1, num_steps=5, seed=2)
    assert jaxeval.learn_lam0(S, n_observed=(25, 4), **kw) == \
        jaxeval.learn_lam0(S, n_observed=(4,), **kw)


def test_a_fold_whose_rank_is_refused_suggests_up_to_half_the_models_as_folds():
    """Rank 3 on 8 models x 12 items: a fit on 4 or 5 models has more parameters than
    cells (60 > 48, 63 > 60). The hint offers a lower rank or more folds, up to
    8 // 2 = 4 (the most that leave two models per fold), whatever the folds now."""
    S = _coins(8, 12)
    S[:, 0], S[:, 1] = 1.0, 0.0
    for folds in (2, 3):
        with pytest.raises(ValueError, match=r"rank: rank 3 has .* \(try a lower rank or "
                                             r"more folds, up to 4, so that each fit sees "
                                             r"more models\)$"):
            jaxeval.learn_lam0(S, rank=3, folds=folds, num_steps=2)


def test_learn_lam0_with_rows_too_short_for_every_count_names_what_a_count_needs():
    """Rows of 5 observed items cannot take ``c = 4`` (a row needs ``c + 2``) nor
    ``c = 10``: the error names 6, what the smallest count needs."""
    S = _low_rank(40, 20)
    keep = np.zeros_like(S, bool)
    for i in range(40):
        keep[i, (5 * i + np.arange(5)) % 20] = True
    S[~keep] = np.nan
    with pytest.raises(ValueError, match=r"^data: no held-out model could be scored: a row "
                                         r"needs n_observed \+ 2 observed items \(at least 6, "
                                         r"for the smallest count\)"):
        jaxeval.learn_lam0(S, rank=1, n_observed=(10, 4), num_steps=3)
