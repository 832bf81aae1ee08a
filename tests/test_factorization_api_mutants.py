"""The factorization's user-facing layer pinned to exact values: argument handling,
input conversion and name matching, printing, saved files, the rank x rho selection's
records and ``learn_lam0``'s arguments and folds."""

import io
import json
import math

import numpy as np
import pytest
from test_factorization_mutants import lam0_by_hand

import jaxeval


@pytest.fixture(scope="module")
def small():
    """A rank-2 fit on 20 models x 16 items of a synthetic matrix, and 4 new models."""
    sm = jaxeval.synthetic_score_matrix(0, 24, 16)
    lr = jaxeval.fit_factorization(sm.take(models=range(20)), 2, 1.0, num_steps=30)
    return lr, np.asarray(sm.scores[20:], np.float64)


@pytest.fixture(scope="module")
def selected():
    """A fit whose rank and rho were chosen on held-out cells (the grid's rank 64 does
    not fit 20 x 16 and is left out)."""
    sm = jaxeval.synthetic_score_matrix(0, 24, 16).take(models=range(20))
    return jaxeval.fit_factorization(sm, "auto", "auto", ranks=(1, 2, 64), rhos=(0.5, 2.0),
                                     holdout_fraction=0.25, num_steps=10,
                                     selection_steps=12, seed=1)


# ------------------------------------------------------------------ online input
def test_boolean_scores_are_read_as_zero_and_one(small):
    """A boolean score array is 0/1 scores, not refused as text."""
    lr, S = small
    np.testing.assert_array_equal(lr.predict(S > 0.5), lr.predict((S > 0.5).astype(float)))


def test_scores_with_more_than_two_axes_are_refused_naming_the_shape(small):
    lr, S = small
    with pytest.raises(ValueError, match=r"scores: expected shape \[K, 16\]"):
        lr.predict(np.full((2, 16, 1), 0.5))


def test_cells_the_mask_leaves_unobserved_may_hold_anything(small):
    """Under an explicit mask the unobserved cells are ignored: NaN, infinity or 7 there
    gives the predictions of a 0 there (not an error, not a NaN)."""
    lr, S = small
    m = np.zeros(S.shape, bool)
    m[:, ::3] = True
    ref = lr.predict(np.where(m, S, 0.0), m, num_newton=5)
    for fill in (np.nan, np.inf, 7.0, -3.0):
        got = lr.predict(np.where(m, S, fill), m, num_newton=5)
        np.testing.assert_array_equal(got, ref, err_msg=str(fill))


def test_a_score_matrix_with_missing_cells_predicts_as_its_masked_array(small):
    """A ScoreMatrix's missing cells (NaN) are unobserved: same predictions as the array
    with a mask."""
    lr, S = small
    m = np.zeros(S.shape, bool)
    m[:, 1::2] = True
    sm = jaxeval.ScoreMatrix(np.where(m, S, np.nan), items=lr.items)
    np.testing.assert_array_equal(lr.predict(sm, num_newton=5),
                                  lr.predict(S, m, num_newton=5))


def test_a_mask_of_other_numbers_than_zero_and_one_is_refused(small):
    lr, S = small
    with pytest.raises(ValueError, match=r"mask: expected booleans .* such as \[0, 2\]"):
        lr.predict(S, np.where(np.arange(16) % 2 == 0, 2, 0) + np.zeros(S.shape, int))


def test_online_rho_must_be_finite_and_may_be_zero(small):
    """``update``'s ``rho`` is refused when infinite, NaN, negative or a bool (``True``
    is not the number 1 here, as in ``fit_factorization``); 0 is allowed."""
    lr, S = small
    for bad in (np.inf, np.nan, -0.5, True, np.True_, np.array(True), "1.5"):
        with pytest.raises(ValueError, match="rho: expected a finite value >= 0"):
            lr.update(S, rho=bad)
    u, _ = lr.update(S[:, :], rho=0.0, num_newton=2)
    assert np.isfinite(u).all() and u.shape == (4, 2)


def test_a_one_dimensional_warm_start_is_only_for_one_models_row(small):
    """``u_init`` of shape ``[r]`` goes with a 1-D row; with a ``[1, n]`` matrix it must be
    ``[1, r]``."""
    lr, S = small
    u, _ = lr.update(S[0], u_init=lr.u_mean, num_newton=2)
    assert u.shape == (2,)
    with pytest.raises(ValueError, match=r"u_init: expected shape \(1, 2\), got \(2,\)"):
        lr.update(S[:1], u_init=lr.u_mean, num_newton=2)


def test_integer_labels_that_are_the_fitted_names_are_matched_by_name():
    """A fit whose items are named "0" .. "15" in another order: a frame with integer
    column labels naming all of them is matched by name; pandas' default labels
    ``0, 1, ...`` are positions."""
    pd = pytest.importorskip("pandas")
    sm = jaxeval.synthetic_score_matrix(0, 24, 16)
    perm = np.random.default_rng(0).permutation(16)
    names = [str(i) for i in perm]
    lr = jaxeval.fit_factorization(jaxeval.ScoreMatrix(sm.scores[:20], items=names), 2, 1.0,
                                   num_steps=30)
    S = np.asarray(sm.scores[20:], float)
    want = lr.predict(S, num_newton=5)
    by_position = pd.DataFrame(S)  # RangeIndex columns: positions
    np.testing.assert_array_equal(lr.predict(by_position, num_newton=5), want)
    by_name = pd.DataFrame(S, columns=[int(x) for x in names])  # column j is item names[j]
    np.testing.assert_array_equal(lr.predict(by_name.sort_index(axis=1), num_newton=5), want)
    # read by position, the sorted frame would give other predictions
    assert not np.array_equal(lr.predict(by_name.sort_index(axis=1).to_numpy(), num_newton=5),
                              want)


# ------------------------------------------------------------------ printing
def test_repr_says_rank_strengths_and_sizes(small, selected):
    lr, _ = small
    assert repr(lr) == (f"LowRankLogistic(rank=2 (given), rho_u=1, rho_v=1, online_rho=0.5, "
                        f"20 training models x 16 items, train loss {lr.final_loss:.4f})")
    two = jaxeval.fit_factorization(jaxeval.synthetic_score_matrix(0, 24, 16).take(
        models=range(20)), 1, 0.25, rho_v=3.0, num_steps=5)
    assert "rank=1 (given), rho_u=0.25, rho_v=3, online_rho=0.5, 20 training models x 16 " \
           "items" in repr(two)
    assert f"rank={selected.rank} (selected)" in repr(selected)


def test_summary_lists_the_heldout_loss_per_rank(selected):
    """The summary: the repr, a header naming the strengths as plain numbers, then one
    line of held-out losses per rank."""
    sel = selected.selection
    lines = selected.summary().splitlines()
    assert lines[0] == repr(selected)
    assert lines[1] == "held-out log-loss (rows: rank, columns: rho [0.5, 2.0]):"
    assert len(lines) == 2 + len(sel["ranks"])
    for r, row, line in zip(sel["ranks"], sel["heldout_loss"], lines[2:]):
        assert line == f"  r={int(r):>3}: " + " ".join(f"{v:.4f}" for v in row)


# ------------------------------------------------------------------ fit arguments
def test_selection_keeps_only_the_ranks_the_data_allow_and_records_its_grid(selected):
    sel = selected.selection
    assert sel["ranks"].tolist() == [1, 2] and sel["rhos"].tolist() == [0.5, 2.0]
    assert sel["holdout_fraction"] == 0.25
    assert sel["heldout_loss"].shape == sel["train_loss"].shape == (2, 2)
    assert not np.array_equal(sel["heldout_loss"], sel["train_loss"])
    assert selected.info["num_steps"] == 10 and selected.info["selection_steps"] == 12
    assert selected.info["source"].startswith("synthetic(seed=0")


def test_fit_rank_and_parameter_limits_at_their_boundaries():
    """rank == min(models, items) is refused for its parameter count, not as too large;
    a parameter count equal to the observed cells is allowed."""
    S = (np.random.default_rng(0).uniform(size=(6, 4)) < 0.5).astype(float)
    S[0, :2], S[1, :2] = 1.0, 0.0
    lr = jaxeval.fit_factorization(S, rank=2, rho=1.0, num_steps=5)  # 2 * 10 + 4 = 24 cells
    assert lr.rank == 2
    with pytest.raises(ValueError, match="rank: rank 4 has 44 parameters but only 24"):
        jaxeval.fit_factorization(S, rank=4, rho=1.0, num_steps=5)


def test_fit_refuses_bad_grid_entries_and_unknown_words():
    S = (np.random.default_rng(0).uniform(size=(30, 12)) < 0.5).astype(float)
    with pytest.raises(ValueError, match=r"^ranks: expected an integer >= 1, got 0"):
        jaxeval.fit_factorization(S, rank="auto", rho=1.0, ranks=(0, 2))
    with pytest.raises(ValueError, match=r"^rank: expected an int or 'auto', got 'best'"):
        jaxeval.fit_factorization(S, rank="best", rho=1.0)
    with pytest.raises(ValueError, match=r"^rho: expected a float or 'auto', got 'AUTO'"):
        jaxeval.fit_factorization(S, rank=1, rho="AUTO")
    for hf in (1.0, 0.0, 1.5):
        with pytest.raises(ValueError, match=r"^holdout_fraction: expected a value in \(0, 1\)"):
            jaxeval.fit_factorization(S, rank="auto", rho=1.0, holdout_fraction=hf)
    for lr in (np.inf, np.nan, -1.0):
        with pytest.raises(ValueError, match=r"^learning_rate: expected a finite value > 0"):
            jaxeval.fit_factorization(S, rank=1, rho=1.0, learning_rate=lr)


def test_fit_accepts_rho_zero_and_uses_the_learning_rate_given():
    S = (np.random.default_rng(0).uniform(size=(30, 12)) < 0.5).astype(float)
    z = jaxeval.fit_factorization(S, rank=1, rho=0.0, num_steps=5)
    assert z.rho_u == z.rho_v == 0.0
    a = jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=5, learning_rate=0.1)
    b = jaxeval.fit_factorization(S, rank=1, rho=1.0, num_steps=5, learning_rate=0.02)
    assert b.info["learning_rate"] == 0.02
    assert not np.array_equal(a.loss_history[:5], b.loss_history[:5])
    assert b.loss_history[0] == a.loss_history[0]  # the same start (same seed)


# ------------------------------------------------------------------ saved files
def test_a_selected_fit_round_trips_its_selection(selected, tmp_path):
    back = jaxeval.LowRankLogistic.from_npz(selected.to_npz(tmp_path / "sel"))
    assert set(back.selection) == set(selected.selection)
    for k, v in selected.selection.items():
        np.testing.assert_array_equal(np.asarray(back.selection[k]), np.asarray(v), err_msg=k)
    assert type(back.selection["holdout_fraction"]) is float
    assert repr(back) == repr(selected) and back.summary() == selected.summary()


def test_a_fit_saved_to_an_open_file_loads_back(small):
    lr, S = small
    buf = io.BytesIO()
    assert lr.to_npz(buf) is buf
    buf.seek(0)
    back = jaxeval.LowRankLogistic.from_npz(buf)
    np.testing.assert_array_equal(back.V, lr.V)
    assert back.final_loss == lr.final_loss and dict(back.info) == dict(lr.info)


def test_a_fit_with_zero_strengths_round_trips(small, tmp_path):
    import dataclasses

    lr, _ = small
    z = dataclasses.replace(lr, rho_u=0.0, rho_v=0.0, online_rho=0.0)
    back = jaxeval.LowRankLogistic.from_npz(z.to_npz(tmp_path / "z"))
    assert (back.rho_u, back.rho_v, back.online_rho) == (0.0, 0.0, 0.0)


def test_a_file_without_metadata_loads_with_nan_loss_and_empty_info(small, tmp_path):
    lr, _ = small
    with np.load(lr.to_npz(tmp_path / "good")) as z:
        good = dict(z)
    del good["meta"]
    np.savez(tmp_path / "old.npz", **good)
    back = jaxeval.LowRankLogistic.from_npz(tmp_path / "old.npz")
    assert math.isnan(back.final_loss) and dict(back.info) == {}
    np.testing.assert_array_equal(back.U, lr.U)


def test_from_npz_refuses_wrong_or_incomplete_files(small, tmp_path):
    """A file of another format, with integer factors, with a bias or item list of the
    wrong length, or without a field, is refused naming the problem."""
    lr, _ = small
    with np.load(lr.to_npz(tmp_path / "good")) as z:
        good = dict(z)
    meta = json.loads(str(good["meta"]))
    cases = {
        "fmt": (dict(meta=np.asarray(json.dumps({**meta, "format": "other/1"}))),
                "format 'other/1'"),
        "intV": (dict(V=np.ones(good["V"].shape, np.int64)), "V has dtype int64, not float"),
        "c": (dict(c=good["c"][:-1]), "inconsistent shapes"),
        "items": (dict(items=good["items"][:-1]), "inconsistent shapes"),
    }
    for name, (change, msg) in cases.items():
        np.savez(tmp_path / f"{name}.npz", **{**good, **change})
        with pytest.raises(ValueError, match=f"{name}.npz: not a factorization.*{msg}"):
            jaxeval.LowRankLogistic.from_npz(tmp_path / f"{name}.npz")
    np.savez(tmp_path / "noU.npz", **{k: v for k, v in good.items() if k != "U"})
    with pytest.raises(ValueError, match="noU.npz: not a factorization saved by to_npz"):
        jaxeval.LowRankLogistic.from_npz(tmp_path / "noU.npz")


# ------------------------------------------------------------------ learn_lam0
def test_learn_lam0_argument_checks():
    S = (np.random.default_rng(0).uniform(size=(6, 12)) < 0.5).astype(float)
    S[:, 0], S[:, 1] = 1.0, 0.0
    lam = jaxeval.learn_lam0(S, rank=1, folds=3, n_observed=(3,), num_steps=5)
    assert 0.0 <= lam <= 1.0  # 2 * folds models are enough
    for bad in (True, np.True_, "1.5"):
        with pytest.raises(ValueError, match=f"^rho: expected a finite value >= 0, got {bad!r}"):
            jaxeval.learn_lam0(S, rank=1, rho=bad, num_steps=5)
    with pytest.raises((TypeError, ValueError), match="^n_observed: expected an integer"):
        jaxeval.learn_lam0(S, rank=1, n_observed=(2.5,), num_steps=5)
    with pytest.raises(ValueError, match=r"^data: the factorization of fold 1 of 2 \(3 of the "
                                         r"6 models\) cannot be fitted: rank: rank 2 .* "
                                         r"\(try a lower rank or more folds, up to 3, so "
                                         r"that each fit sees more models\)$"):
        jaxeval.learn_lam0(S, rank=2, num_steps=5)  # 42 parameters, 36 cells
    lam = jaxeval.learn_lam0(S, rank=2, folds=3, n_observed=(3,), num_steps=5)  # 44 and 48
    assert 0.0 <= lam <= 1.0
    with pytest.raises(ValueError, match=r"fold 1 of 3 \(4 of the 6 models\) cannot be "
                                         r"fitted: rank: rank 5 .* \(try a lower rank\)$"):
        jaxeval.learn_lam0(S, rank=5, folds=3, num_steps=5)  # no more folds to suggest
    with pytest.raises(ValueError, match=r"cannot be fitted: rank: rank 1 has 6 parameters "
                                         r"but only 4 observed cells$"):
        jaxeval.learn_lam0(S[:, :1], rank=1, folds=3, num_steps=5)  # nothing to suggest
    T = S.copy()
    T[1:, 5] = np.nan  # item 5 seen by one model: a fold without it cannot be fitted,
    # whatever the folds: refused before any fit, naming it (no hint of more folds)
    for folds in (2, 3):
        with pytest.raises(ValueError, match=r"^data: 1 item\(s\) observed in fewer than 2 "
                                             r"model rows \(e.g. \['item_5'\]\): some fold's .* "
                                             r"drop them before learning lam0$"):
            jaxeval.learn_lam0(T, rank=1, folds=folds, num_steps=5)
    T[1:, 5] = S[1:, 5]
    T[3] = np.nan  # a model with no observed cell
    with pytest.raises(ValueError, match=r"^data: 1 model row\(s\) have no observed cell \(e.g. "
                                         r"\['model_3'\]\); drop them before learning lam0$"):
        jaxeval.learn_lam0(T, rank=1, num_steps=5)
    with pytest.raises(ValueError, match=r"^rank: expected an integer >= 1, got 0"):
        jaxeval.learn_lam0(T, rank=0, num_steps=5)  # the arguments are checked first


def test_learn_lam0_fits_each_fold_with_the_rank_and_rho_given():
    """λ₀ recomputed step by step with rank 2 and rho 3 (the arguments reach every fold's
    fit)."""
    rng = np.random.default_rng(6)
    P = 1 / (1 + np.exp(-(rng.normal(size=(16, 2)) @ rng.normal(size=(2, 24)) * 2.0)))
    S = (rng.uniform(size=P.shape) < P).astype(float)
    kw = dict(rank=2, rho=3.0, num_steps=40)
    lam = jaxeval.learn_lam0(S, n_observed=(4,), folds=2, seed=2, **kw)
    np.testing.assert_allclose(lam, min(max(lam0_by_hand(S, 4, 2, **kw), 0.0), 1.0),
                               rtol=1e-6)


@pytest.mark.parametrize("sign, want", [(1.0, 1.0), (-1.0, 0.0)])
def test_learn_lam0_clips_the_slope_to_zero_and_one(monkeypatch, sign, want):
    """Predictions that move ten times less than the scores give a slope of +-10: λ₀ is
    clipped to 1 (or 0)."""
    S = np.tile(np.arange(12) % 2, (8, 1)).astype(float)
    q = 0.5 + sign * 0.1 * (np.arange(12) % 2)
    monkeypatch.setattr(jaxeval.LowRankLogistic, "predict",
                        lambda self, s, m: np.tile(q, (len(s), 1)))
    assert jaxeval.learn_lam0(S, rank=1, n_observed=(3,), num_steps=5) == want
