"""Gaps found by a mutation review of ``benchmarks/bench_factorization.py`` (its metrics,
baselines, the NumPy / SciPy reference objective, gradient, Adam and online Newton that the
speed ratios compare against, and the rank / new-model curves) and of the helpers of
``benchmarks/bench_banditeval.py`` that need no ``banditeval`` (item orders, the
two-proportion test, calls to a target accuracy, the formatting, and the bookkeeping of
``same_orders_check`` / ``_peers`` with ``banditeval_ucbe`` replaced by a fake).

Inputs are tiny planted matrices (``test_factorization._planted``); every expected value
is worked out from a textbook definition or from jaxeval's own objective."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from test_factorization import _planted

import jaxeval
from jaxeval import _factorization as fz

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_banditeval as bb  # noqa: E402
import bench_factorization as bf  # noqa: E402

M_, N_, R_ = 12, 15, 2


def _problem(seed=0, m=M_, n=N_, r=R_, missing=0.2):
    _, _, _, _, S = _planted(jax.random.key(seed), m, n, r, scale=1.5)
    Mk = np.array(jax.random.uniform(jax.random.key(seed + 100), (m, n)) > missing)
    Mk[:, 0] = True
    Mk[0, :] = True
    return np.asarray(S, np.float64), Mk


def _x(seed, m=M_, n=N_, r=R_):
    return np.random.default_rng(seed).normal(0, 0.5, (m + n) * r + n)


# --- metrics --------------------------------------------------------------------------


def test_log_loss_is_the_mean_bce_with_clipped_probabilities():
    p, s = np.array([0.8, 0.3, 0.6]), np.array([1.0, 0.0, 0.25])
    want = -np.mean(s * np.log(p) + (1 - s) * np.log(1 - p))
    assert bf.log_loss(p, s) == pytest.approx(want, rel=1e-12)
    # a certain, wrong prediction costs -log(1e-7), not infinity; a certain right one ~0
    assert bf.log_loss(np.array([1.0]), np.array([0.0])) == pytest.approx(-math.log(1e-7))
    assert bf.log_loss(np.array([0.0]), np.array([1.0])) == pytest.approx(-math.log(1e-7))
    assert bf.log_loss(np.array([0.0, 1.0]), np.array([0.0, 1.0])) == pytest.approx(0, abs=1e-6)


def _pairwise_auc(p, s):
    pos, neg = p[s > 0.5], p[s <= 0.5]
    d = pos[:, None] - neg[None, :]
    return float(((d > 0) + 0.5 * (d == 0)).mean())


def test_auc_matches_the_pairwise_definition_with_ties_as_halves():
    rng = np.random.default_rng(0)
    for n in (5, 9, 30):
        p = np.round(rng.uniform(size=n), 1)  # ties between and within the classes
        s = (rng.uniform(size=n) < 0.4).astype(float)
        s[0], s[1] = 0.0, 1.0
        assert bf.auc(p, s) == pytest.approx(_pairwise_auc(p, s), rel=1e-12)
    assert bf.auc(np.array([0.1, 0.9, 0.5]), np.array([0.0, 1.0, 1.0])) == 1.0
    assert bf.auc(np.array([0.9, 0.1]), np.array([0.0, 1.0])) == 0.0
    # one class only: undefined
    assert math.isnan(bf.auc(np.array([0.2, 0.3]), np.array([1.0, 1.0])))
    assert math.isnan(bf.auc(np.array([0.2, 0.3]), np.array([0.0, 0.0])))


# --- baselines ------------------------------------------------------------------------


def test_item_mean_is_the_smoothed_mean_of_observed_cells():
    S = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    M = np.array([[True, True], [True, False], [False, True]])
    # item 0: 2 of 2 observed correct -> 3 / 4; item 1: 1 of 2 -> 2 / 4 (row 1 unobserved)
    np.testing.assert_allclose(bf.item_mean_probs(S, M), [0.75, 0.5])


def test_fit_rasch_is_stationary_and_ignores_unobserved_cells():
    S, M = _problem(1)
    rho = 0.05
    a, c = bf.fit_rasch(S, M, rho=rho)
    assert a.shape == (M_,) and c.shape == (N_,)
    G = M * (1 / (1 + np.exp(-(a[:, None] + c[None, :]))) - S)
    np.testing.assert_allclose(G.sum(1) + 2 * rho * a, 0, atol=1e-3)  # model offsets
    np.testing.assert_allclose(G.sum(0), 0, atol=1e-3)  # item biases: not penalised
    a2, c2 = bf.fit_rasch(np.where(M, S, 1 - S), M, rho=rho)
    np.testing.assert_allclose(a2, a, atol=1e-5)
    np.testing.assert_allclose(c2, c, atol=1e-5)


# --- the NumPy / SciPy reference objective -------------------------------------------


def _jax_objective(x, S, M, m, n, r, rho):
    U, V, c = x[: m * r].reshape(m, r), x[m * r : (m + n) * r].reshape(n, r), x[-n:]
    p = tuple(jnp.asarray(a, jnp.float32) for a in (U, V, c))
    return float(
        fz._objective(p, jnp.asarray(S, jnp.float32), jnp.asarray(M), rho, rho, jnp.ones(r))
    )


def test_numpy_objective_equals_jaxevals_objective():
    S, M = _problem(2)
    for seed, rho in ((0, 0.5), (1, 3.0)):
        x = _x(seed)
        val, _ = bf.numpy_objective_grad(x, S, M, M_, N_, R_, rho)
        assert val == pytest.approx(_jax_objective(x, S, M, M_, N_, R_, rho), rel=1e-5)
    # the unobserved cells do not count
    val2, _ = bf.numpy_objective_grad(x, np.where(M, S, 1 - S), M, M_, N_, R_, rho)
    assert val2 == pytest.approx(val, rel=1e-12)


def test_numpy_gradient_matches_finite_differences_and_jax():
    S, M = _problem(3)
    rho = 0.7
    x = _x(4)
    val, g = bf.numpy_objective_grad(x, S, M, M_, N_, R_, rho)
    assert g.shape == x.shape
    h = 1e-6
    fd = np.array([
        (bf.numpy_objective_grad(x + h * e, S, M, M_, N_, R_, rho)[0]
         - bf.numpy_objective_grad(x - h * e, S, M, M_, N_, R_, rho)[0]) / (2 * h)
        for e in np.eye(x.size)
    ])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-5)
    U, V, c = x[: M_ * R_].reshape(M_, R_), x[M_ * R_ : (M_ + N_) * R_].reshape(N_, R_), x[-N_:]
    gj = jax.grad(fz._objective)(
        tuple(jnp.asarray(a, jnp.float32) for a in (U, V, c)),
        jnp.asarray(S, jnp.float32), jnp.asarray(M), rho, rho, jnp.ones(R_),
    )
    np.testing.assert_allclose(g, np.concatenate([np.ravel(a) for a in gj]), atol=2e-4)


def test_numpy_adam_follows_fit_factors_from_the_same_start():
    """Same algorithm, same steps: from ``fit_factors``'s own initial point the NumPy
    Adam reaches the same factors (float32 vs float64: loose tolerance)."""
    S, M = _problem(5)
    S32, Mj = jnp.asarray(np.where(M, S, 0), jnp.float32), jnp.asarray(M)
    key, rho, lr, steps = jax.random.key(7), 0.4, 0.05, 40
    U0, V0, c0 = fz._initial_params(key, S32, Mj, R_, jnp.float32(0.1), jnp.ones(R_))
    x0 = np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in (U0, V0, c0)])
    x = bf.numpy_adam(x0, S, M, M_, N_, R_, rho, lr, steps)
    res = fz.fit_factors(key, S32, Mj, rank=R_, rho_u=rho, rho_v=rho, learning_rate=lr,
                         num_steps=steps)
    want = np.concatenate([np.ravel(res.U), np.ravel(res.item_factors.V),
                           np.ravel(res.item_factors.c)])
    assert np.abs(x - x0).max() > 0.1  # it moved
    np.testing.assert_allclose(x, want, atol=2e-3)
    obj = bf.numpy_objective_grad(x, S, M, M_, N_, R_, rho)[0] / M.sum()
    assert obj == pytest.approx(float(res.final_loss), rel=1e-4)


def test_numpy_online_reaches_the_row_optimum_quadratically():
    """Plain Newton on each row's objective: 4 steps from the prior mean reach the
    stationary point of ``BCE + rho ||u - u_mean||^2`` over the row's observed items."""
    U, V, c, _, S = _planted(jax.random.key(8), 6, 20, 2)
    V, c, S = (np.asarray(a, np.float64) for a in (V, c, S))
    Mk = np.random.default_rng(9).uniform(size=S.shape) < 0.6
    Mk[:, :3] = True
    um, rho = np.array([0.3, -0.2]), 0.5
    U0 = np.tile(um, (6, 1))
    u = bf.numpy_online(V, c, um, S, Mk, U0, rho, 4)
    assert u.shape == (6, 2)
    for i in range(6):
        p = 1 / (1 + np.exp(-(V @ u[i] + c)))
        g = V.T @ (Mk[i] * (p - S[i])) + 2 * rho * (u[i] - um)
        assert np.abs(g).max() < 1e-8, (i, g)
    # jaxeval's safeguarded update reaches the same optimum
    f = fz.ItemFactors(jnp.asarray(V, jnp.float32), jnp.asarray(c, jnp.float32),
                       jnp.asarray(um, jnp.float32))
    uj, _ = fz.update_model_factors(f, jnp.asarray(S, jnp.float32), jnp.asarray(Mk),
                                    jnp.asarray(U0, jnp.float32), rho, num_newton=6)
    np.testing.assert_allclose(u, np.asarray(uj), atol=1e-4)
    # U0 is not modified in place and no step stays at the start
    np.testing.assert_array_equal(U0, np.tile(um, (6, 1)))
    one = bf.numpy_online(V, c, um, S, Mk, U0, rho, 1)
    assert np.abs(one - U0).min() > 0


# --- the curves -----------------------------------------------------------------------


def _planted_split(seed, m, n_new, n, r=2):
    U, V, c, _, S = _planted(jax.random.key(seed), m + n_new, n, r, scale=1.5)
    S = np.asarray(S, np.float32)
    train = SimpleNamespace(scores=S[:m], mask=np.ones((m, n), bool))
    new = SimpleNamespace(scores=S[m:], mask=np.ones((n_new, n), bool))
    return train, new


def test_rank_curve_rows_and_the_rho_chosen_on_validation():
    train, _ = _planted_split(10, 40, 0, 30)
    rows, t = bf.rank_curve("x", train, (2,), (300.0, 1.0), 150, 0.1, 0)
    assert t > 0 and len(rows) == 3
    assert [r[0] for r in rows] == ["item mean", "item + model offset", "rank 2"]
    assert rows[0][1] is None and rows[1][1] is None
    assert rows[2][1] == 1.0  # rho = 300 flattens the factors: never chosen on validation
    for _, _, ll, a in rows:
        assert np.isfinite(ll) and 0.0 < a <= 1.0
    # planted rank-2 data: the factorization beats the item mean on the held-out cells
    assert rows[2][2] < rows[0][2] and rows[2][3] > rows[0][3]


def test_new_model_curve_rows_and_the_exact_ends():
    train, new = _planted_split(11, 30, 8, 24)
    # new models that answer all items alike: any sample of their items is exact
    new.scores = np.repeat(np.array([1, 0, 0, 1, 1, 0, 1, 1], np.float32)[:, None], 24, 1)
    rank, rho, steps, lr, seed = 2, 1.0, 80, 0.1, 3
    out = bf.new_model_curve(train, new, rank, rho, steps, lr, seed, counts=(0, 6))
    assert [label for label, _ in out] == ["0", "6", "all"]
    keys = ["pooled", "model mean", "1PL pooled", "sample mean"]
    for _, row in out:
        assert list(row) == keys
    truth = new.scores.mean(1)
    # nothing observed: no sample mean; every model gets the prior mean's prediction
    r0 = out[0][1]
    assert all(math.isnan(v) for v in r0["sample mean"])
    res = fz.fit_factors(jax.random.key(seed), train.scores, train.mask, rank=rank,
                         rho_u=rho, rho_v=rho, learning_rate=lr, num_steps=steps)
    f, _ = fz.empirical_prior(res.U, res.item_factors)
    pbar = float(np.asarray(fz.predict_scores(f.u_mean[None], f)).mean())
    assert math.isnan(r0["model mean"][0]) and math.isnan(r0["pooled"][0])  # constant
    assert r0["model mean"][1] == pytest.approx(100 * np.mean(np.abs(pbar - truth)), rel=1e-4)
    assert r0["pooled"][1] == pytest.approx(r0["model mean"][1], rel=1e-6)
    # ... and the 1PL model its Rasch prediction at the mean training offset
    a, c = bf.fit_rasch(np.asarray(train.scores, np.float64), train.mask)
    p1 = float(np.mean(1 / (1 + np.exp(-(a.mean() + c)))))
    assert r0["1PL pooled"][1] == pytest.approx(100 * np.mean(np.abs(p1 - truth)), rel=1e-4)
    assert abs(p1 - pbar) > 1e-3  # (the two models differ here)
    # some observed: the sample mean of 6 of a model's (alike) items is its accuracy
    assert out[1][1]["sample mean"] == pytest.approx((1.0, 0.0))
    # all observed: the pooled estimates and the sample mean are the truth
    ra = out[2][1]
    for k in ("pooled", "1PL pooled", "sample mean"):
        assert ra[k][0] == pytest.approx(1.0) and ra[k][1] == pytest.approx(0.0, abs=1e-9), k
    assert 0 < ra["model mean"][1] < 100


# --- bench_banditeval helpers (no banditeval needed) -----------------------------------


def _textbook_p(k1, n1, k2, n2):
    p1, p2, p = k1 / n1, k2 / n2, (k1 + k2) / (n1 + n2)
    z = (p1 - p2) / math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return 2 * scipy.stats.norm.sf(abs(z))


@pytest.mark.parametrize("k1, n1, k2, n2", [(30, 40, 20, 40), (5, 40, 12, 40),
                                            (18, 20, 30, 50), (3, 10, 40, 60), (7, 7, 6, 9)])
def test_two_proportion_p_is_the_pooled_z_test(k1, n1, k2, n2):
    assert bb.two_proportion_p(k1, n1, k2, n2) == pytest.approx(_textbook_p(k1, n1, k2, n2),
                                                                rel=1e-9)
    assert bb.two_proportion_p(k2, n2, k1, n1) == pytest.approx(_textbook_p(k1, n1, k2, n2),
                                                                rel=1e-9)


def test_two_proportion_p_degenerate_and_equal():
    assert bb.two_proportion_p(0, 40, 0, 40) == 1.0
    assert bb.two_proportion_p(40, 40, 40, 40) == 1.0
    assert bb.two_proportion_p(10, 40, 10, 40) == pytest.approx(1.0)
    assert bb.two_proportion_p(1, 40, 0, 40) < 1.0
    # an empty sample is degenerate too (was a ZeroDivisionError)
    assert bb.two_proportion_p(0, 0, 3, 10) == 1.0 and bb.two_proportion_p(3, 10, 0, 0) == 1.0


def test_calls_to_interpolates_between_checkpoints():
    fr = [0.1, 0.2, 0.4, 0.8]
    assert bb.calls_to([0.5, 0.9, 1.0, 1.0], fr, 0.95) == pytest.approx(0.3)
    assert bb.calls_to([0.5, 0.9, 1.0, 1.0], fr, 0.90) == pytest.approx(0.2)  # hit exactly
    assert bb.calls_to([0.96, 1.0, 1.0, 1.0], fr, 0.95) == pytest.approx(0.1)  # first one
    assert bb.calls_to([0.5, 0.6, 0.7, 0.8], fr, 0.9) == math.inf
    assert bb.calls_to([0.2, 0.5, 0.5, 1.0], fr, 0.9) == pytest.approx(0.4 + 0.8 * 0.4)
    # reached exactly (or up to rounding) only at the last checkpoint
    assert bb.calls_to([0.2, 0.5, 0.7, 0.9], fr, 0.9) == pytest.approx(0.8)
    assert bb.calls_to([0.2, 0.5, 0.7, 3 * 0.3], fr, 0.9) == pytest.approx(0.8)  # 0.8999...


def test_fmt():
    assert bb._fmt(0.2143) == "21.4%"
    assert bb._fmt(1.0) == "100.0%"
    assert bb._fmt(math.inf) == ">max"
    assert bb._fmt(math.nan) == ">max"


def test_jaxeval_orders_follow_the_documented_keys():
    from jaxeval import _identification as idn
    from jaxeval import _sampling
    from jaxeval._runner import _int_key

    seed, reps, K, n = 3, 3, 4, 7
    o = bb.jaxeval_orders(seed, reps, K, n)
    assert o.shape == (reps, K, n)
    for r in range(reps):
        ok = jax.random.fold_in(jax.random.fold_in(_int_key(seed), r), idn._PURPOSE_ORDER)
        for i in range(K):
            np.testing.assert_array_equal(o[r, i], np.asarray(_sampling.arm_order(ok, i, n)))
            assert sorted(o[r, i].tolist()) == list(range(n))
    assert not np.array_equal(o[0, 0], o[0, 1])  # not synchronized
    np.testing.assert_array_equal(bb.jaxeval_orders(seed, 5, K, n)[:reps], o)


def _fake_rep(R=3, K=2, C=3):
    rng = np.random.default_rng(0)
    return SimpleNamespace(
        recommended=rng.integers(0, K, (R, C)), calls=rng.integers(1, 50, (R, C)),
        budgets=np.array([10, 20, 40][:C]), instances=np.array([[0, 2], [1, 3], [3, 0]]),
        instance=np.array([1, 0, 1][:R]), correct=np.zeros((R, C), bool))


def test_same_orders_check_bookkeeping(monkeypatch):
    rep = _fake_rep()
    pool_s = np.arange(4 * 5, dtype=np.float32).reshape(4, 5) / 20
    orders = bb.jaxeval_orders(5, 3, 2, 5)
    seen = []

    def fake(S, budgets, *, a, batch_size, orders):
        r = len(seen)
        seen.append((S, budgets, a, batch_size, orders))
        rec, calls = rep.recommended[r].copy(), rep.calls[r].copy()
        if r == 1:
            rec[2] = 1 - rec[2]
            calls[0] += 1
        if r == 2:
            calls[1] += 1
        return rec, None, calls

    monkeypatch.setattr(bb, "banditeval_ucbe", fake)
    out = bb.same_orders_check(rep, pool_s, a=0.3, batch_size=4, seed=5)
    assert out["replicates"] == 3 and out["checkpoints"] == 9
    assert out["identical"] == 1 and out["checkpoints_differing"] == 3
    fd = out["first_difference"]
    assert fd["replicate"] == 1 and fd["checkpoints"] == [0, 2]
    assert fd["jaxeval"] == rep.recommended[1].tolist()
    assert fd["banditeval"][2] == 1 - rep.recommended[1][2]
    # both sides' calls are shown (a difference in calls alone is otherwise invisible)
    assert fd["jaxeval_calls"] == rep.calls[1].tolist()
    assert fd["banditeval_calls"] == (rep.calls[1] + np.array([1, 0, 0])).tolist()
    for r, (S, budgets, a, b, o) in enumerate(seen):
        np.testing.assert_array_equal(S, pool_s[rep.instances[rep.instance[r]]])
        assert budgets == [10, 20, 40] and a == 0.3 and b == 4
        np.testing.assert_array_equal(o, orders[r])
    rep1 = _fake_rep(R=1)
    monkeypatch.setattr(bb, "banditeval_ucbe",
                        lambda S, budgets, *, a, batch_size, orders: (
                            rep1.recommended[0], None, rep1.calls[0]))
    one = bb.same_orders_check(rep1, pool_s, a=1.0, batch_size=1, seed=0)
    assert one["identical"] == 1 and one["first_difference"] is None


def test_peers_bookkeeping(monkeypatch):
    """UCB-E-LRF's accuracy over ``--lrf-reps`` replicates, calls to a target on the calls
    spent as a share of K n; the PULSE policies get UCB-E's settings without ``a``."""
    rep = _fake_rep(R=3, K=2, C=3)
    pool_s = np.array([[0.2] * 5, [0.8] * 5, [0.4] * 5, [0.8] * 5], np.float32)
    # instance 0 = models (0, 2): best arm 1; instance 1 = models (1, 3): both arms best
    recs = {0: [1, 0, 1], 1: [0, 1, 1], 2: [1, 0, 0]}  # replicate 0 plays instance 1, ...
    spent = {0: [2, 5, 10], 1: [4, 5, 10], 2: [6, 8, 10]}
    calls = []

    def fake(S, budgets, *, batch_size, seed, lrf):
        assert lrf and batch_size == 3 and budgets == [10, 20, 40]
        calls.append(S)
        return np.array(recs[seed]), None, np.array(spent[seed])

    pol_calls = []

    def fake_sim(sm, pol, **kw):
        pol_calls.append((pol, kw))
        return SimpleNamespace(correct=np.array([[0, 1, 1], [1, 1, 1], [0, 0, 1]], bool),
                               instance=rep.instance,
                               calls_to=lambda t, fraction: (t, fraction))

    monkeypatch.setattr(bb, "banditeval_ucbe", fake)
    monkeypatch.setattr(jaxeval, "simulate_identification", fake_sim)
    kw = dict(K=2, a=0.5, batch_size=3, seed=0)
    args = SimpleNamespace(lrf_reps=2, reps=3)
    out = bb._peers("sm", pool_s, rep, kw, None, args, 3)
    lrf = out["banditeval_lrf"]
    assert len(calls) == 2 and lrf["reps"] == 2
    np.testing.assert_array_equal(calls[0], pool_s[[1, 3]])
    assert lrf["acc"] == [0.5, 1.0, 1.0]
    # mean calls spent 3 / 5 / 10 of K n = 10: 0.3 + (0.95 - 0.5) / 0.5 * 0.2
    assert lrf["to95"] == pytest.approx(0.48) and lrf["to90"] == pytest.approx(0.46)
    assert [p for p, _ in pol_calls] == ["pulse_ucb", "pulse"]
    assert all(k == dict(K=2, batch_size=3, seed=0) for _, k in pol_calls)
    assert out["pulse"]["acc"] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert out["pulse"]["reps"] == 3
    assert out["pulse_ucb"]["to95"] == (0.95, True) and out["pulse_ucb"]["to90"] == (0.9, True)
    args.lrf_reps = None
    assert bb._peers("sm", pool_s, rep, kw, None, args, 3)["banditeval_lrf"]["reps"] == 3


def test_calls_to_refuses_a_nan_accuracy():
    """A NaN in the curve would read as "never reached" (``>max``) although later
    checkpoints reach the target: refused, naming the checkpoint."""
    with pytest.raises(ValueError, match=r"calls_to: acc holds NaN at checkpoint\(s\) \[1\]"):
        bb.calls_to([0.5, float("nan"), 1.0], [0.1, 0.2, 0.3], 0.95)


@pytest.mark.parametrize("argv, named", [(["--lrf-reps", "0"], "--lrf-reps"),
                                         (["--reps", "0"], "--reps"),
                                         (["--instances", "0"], "--instances")])
def test_banditeval_main_refuses_counts_below_one(argv, named, capsys):
    """``--lrf-reps 0`` ran every replicate (``0 or reps``); zero replicates or instances
    are refused by name before anything runs (banditeval installed or not)."""
    with pytest.raises(SystemExit) as e:
        bb.main(argv)
    assert e.value.code == 2 and f"error: {named}: must be at least 1, got 0" in \
        capsys.readouterr().err


def test_rank_curve_reports_nothing_from_a_failed_fit(monkeypatch):
    """A fit whose status says it failed gets an infinite log-loss and no AUC (NaN), not
    the AUC of its frozen last iterate."""
    real = fz.fit_factors
    monkeypatch.setattr(fz, "fit_factors", lambda *a, **k: real(*a, **k)._replace(
        status=jnp.asarray(fz.STATUS_NONFINITE, jnp.int32)))
    train, _ = _planted_split(10, 40, 0, 30)
    rows, _ = bf.rank_curve("x", train, (2,), (1.0,), 20, 0.1, 0)
    assert rows[2][0] == "rank 2" and math.isinf(rows[2][2]) and math.isnan(rows[2][3])
    assert all(np.isfinite(r[2]) and np.isfinite(r[3]) for r in rows[:2])


def test_new_model_curve_a_count_of_all_items_is_the_all_row_once():
    train, new = _planted_split(11, 30, 4, 24)
    out = bf.new_model_curve(train, new, 2, 1.0, 40, 0.1, 3, counts=(0, 24, 30))
    assert [label for label, _ in out] == ["0", "all"]
