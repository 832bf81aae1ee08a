"""Gaps found by a mutation review of the identification loop and its report: each test
pins a behaviour that a plausible one-line bug changed without any other test failing
(the report's summaries, the pulls of every index policy, the DR estimate's plug-in
coefficient after a batch cut short, the status of a checkpoint between batches)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _estimators, _simulate
from jaxeval import _identification as idn
from jaxeval import _sampling as smp
from jaxeval._factorization import ItemFactors


def _hand_output():
    """A two-replicate, two-checkpoint output of three arms and two kinds whose every
    summary is known by hand: replicate 0's "eb" interval misses arm 2 at the second
    checkpoint only, its naive interval (shifted by naive - estimate) misses arm 0 at the
    first, and replicate 1 has two true best arms (0 and 1) and recommends arm 1."""
    theta = np.array([[0.5, 0.6, 0.7], [0.4, 0.4, 0.2]], np.float32)
    R, C, Q, K = 2, 2, 2, 3
    lower = np.broadcast_to(theta[:, None, None, :] - 0.1, (R, C, Q, K)).copy()
    upper = np.broadcast_to(theta[:, None, None, :] + 0.2, (R, C, Q, K)).copy()
    upper[0, 1, 0, 2] = theta[0, 2] - 0.01  # "eb" misses replicate 0's arm 2 at c = 1
    estimate = np.broadcast_to(theta[:, None, :], (R, C, K)).copy()
    naive = estimate.copy()
    naive[0, 0, 0] += 0.15  # naive interval [theta + 0.05, theta + 0.35]: misses
    cp = idn.Record(
        estimate=estimate, lower=lower, upper=upper, naive=naive,
        pulls=np.zeros((R, C, K), np.int32), lam=np.zeros((R, C, K), np.float32),
        recommended=np.array([[2, 0], [1, 1]], np.int32),
        calls=np.array([[10, 30], [12, 30]], np.int32),
        status=np.array([[0, 2], [1, 2]], np.int32),
    )
    return idn.IdentificationOutput(theta=theta, instance=np.array([-1, -1], np.int32),
                                    checkpoints=cp)


def test_report_summaries_of_a_hand_built_output():
    cfg = idn.Config("pulse", 3, 10, budgets=(10, 30), cs_kinds=("eb", "hoeffding"),
                     truth="synthetic")
    rep = _simulate._summarise(_hand_output(), cfg, {"K": 3, "n_items": 10},
                               np.zeros((0, 3)), np.array([]), True)
    # replicate 1 recommends arm 1, tied best with arm 0: correct
    np.testing.assert_array_equal(rep.correct, [[True, False], [True, True]])
    np.testing.assert_allclose(rep.accuracy, [1.0, 0.5])
    np.testing.assert_allclose(rep.accuracy_se, [0.0, np.sqrt(0.25 / 2)])
    # the calls spent (not the budgets)
    np.testing.assert_allclose(rep.calls_used, [11.0, 30.0])
    # family-wise over arms AND checkpoints (anytime): replicate 0 fails "eb" once
    np.testing.assert_allclose(rep.coverage_family, [0.5, 1.0])
    np.testing.assert_allclose(rep.coverage_family_at, [[1.0, 0.5], [1.0, 1.0]])
    # (replicate, arm) pairs covered at every checkpoint: 5 of 6 for "eb"
    np.testing.assert_allclose(rep.coverage_arm, [5 / 6, 1.0])
    want_w = np.full((2, 2), 0.3)
    want_w[0, 1] = 0.3 - (0.21 / 6)  # one interval of six is 0.21 shorter
    np.testing.assert_allclose(rep.width, want_w, rtol=1e-5)
    # naive intervals: the stop kind's widths around the naive estimate
    np.testing.assert_allclose(rep.naive_coverage_family, [0.5, 0.5])
    assert rep.status_counts.tolist() == [[1, 1, 0, 0, 0], [0, 0, 2, 0, 0]]


def _every_step(policy, T, **kw):
    """One synthetic replicate with a checkpoint after every call (b = 1): the record at
    budget t is the state the (t + 1)-th pull was chosen from."""
    cfg = idn.Config(policy, 4, 20, budgets=tuple(range(1, T + 1)), truth="synthetic",
                     corruption="biased", **kw)
    run = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                  static_argnums=3)
    keys = jax.random.split(jax.random.key(3), 4)
    params = idn.Params.make(a=0.5, scale=0.7, bias=0.25)
    cp = jax.tree.map(np.asarray, run(keys, idn.dummy_data(cfg), params, cfg)).checkpoints
    return cfg, cp


@pytest.mark.parametrize("policy, kw", [
    ("naive", {}),
    ("pulse_ucb", {}),
    ("pulse", {"cs_kinds": ("eb", "hoeffding"), "stop_kind": "hoeffding"}),
])
def test_each_pull_is_the_argmax_of_the_policys_own_index(policy, kw):
    """Every pull goes to the arm of largest index computed from the recorded state
    before it (METHODS.md 2.5): ``naive`` steers by the naive pooled estimate,
    ``pulse_ucb`` by the difference estimate plus ``sqrt(a / N)``, ``pulse`` by the
    difference estimate plus ``scale`` times the stop kind's half-width (here the second
    kind); unpulled arms first, full arms never."""
    T = 60
    cfg, cp = _every_step(policy, T, **kw)
    a, scale, n = 0.5, 0.7, cfg.num_items
    q = cfg.cs_kinds.index(cfg.stop_kind)
    checked = 0
    for r in range(cp.pulls.shape[0]):
        for t in range(T - 1):
            step = cp.pulls[r, t + 1] - cp.pulls[r, t]
            assert step.sum() == 1, (r, t, step)
            pulls = cp.pulls[r, t].astype(np.float64)
            nf = np.maximum(pulls, 1)
            if policy == "naive":
                idx = cp.naive[r, t] + np.sqrt(a / nf)
            elif policy == "pulse_ucb":
                idx = cp.estimate[r, t] + np.sqrt(a / nf)
            else:
                hw = np.minimum(0.5 * (cp.upper[r, t, q] - cp.lower[r, t, q]), 1.0)
                idx = cp.estimate[r, t] + scale * hw
            idx = np.where(pulls > 0, idx, np.inf)
            idx = np.where(pulls >= n, -np.inf, idx)
            chosen = int(np.argmax(step))
            assert idx[chosen] >= idx.max() - 1e-5, (r, t, idx, chosen)
            checked += 1
    assert checked == 4 * (T - 1)


N = 8
POOL = (np.random.default_rng(7).random((3, N)) < 0.5).astype(np.float32)
PRED = np.linspace(0.15, 0.85, N).astype(np.float32)


def _real_data():
    f = ItemFactors(jnp.zeros((N, 1)), jnp.asarray(np.log(PRED / (1 - PRED))), jnp.zeros(1))
    return idn.ProblemData(jnp.asarray(POOL), jnp.asarray([[0, 1, 2]], jnp.int32), f)


def test_a_batch_cut_by_the_budget_feeds_only_its_drawn_items_to_lambda():
    """Round robin in batches of 3 with a final budget of 10: the fourth batch is cut to
    one item (two empty slots). The plug-in lambda after it, hence the difference
    estimate, comes from the 4 drawn (score, prediction) pairs only; the record's
    ``lam`` is the coefficient the arm's last batch used (frozen before it); a
    checkpoint between two batches keeps the state after the last whole one and still
    reports that the budget was reached."""
    lam0, shrink = 0.3, 1.0
    cfg = idn.Config("uniform", 3, N, budgets=(4, 9, 10), batch_size=3, cs_kinds=("eb",),
                     use_predictions=True, refit=False)
    params = idn.Params.make(lam0=lam0, shrink=shrink)
    out = jax.jit(idn.run_identification, static_argnums=3)(
        jax.random.key(5), _real_data(), params, cfg)
    cp = jax.tree.map(np.asarray, out.checkpoints)
    assert cp.calls.tolist() == [3, 9, 10]
    np.testing.assert_array_equal(cp.pulls, [[3, 0, 0], [3, 3, 3], [4, 3, 3]])
    assert cp.status.tolist() == [idn.STATUS_BUDGET] * 3
    ok = jax.random.fold_in(jax.random.key(5), idn._PURPOSE_ORDER)
    for c in range(3):
        for arm in range(3):
            k = int(cp.pulls[c, arm])
            if k == 0:
                continue
            seen = np.asarray(smp.arm_order(ok, arm, N, False))[:k]
            st = _estimators.lambda_stats_init()
            lams = []
            for j, item in enumerate(seen):
                if j % 3 == 0:  # a batch starts: its coefficient is frozen here
                    lams.append(_estimators.plugin_lambda(st, lam0, shrink=shrink))
                st = _estimators.lambda_stats_update(st, POOL[arm, item], PRED[item])
            lam_next = _estimators.plugin_lambda(st, lam0, shrink=shrink)
            want = _estimators.difference_estimate(
                POOL[arm, seen].sum(), PRED[seen].sum(), k, PRED.sum(), lam_next, N)
            np.testing.assert_allclose(cp.estimate[c, arm], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(cp.lam[c, arm], lams[-1], rtol=1e-5, atol=1e-6)
    # the check has teeth: after 3 pairs the slope moves lambda away from its prior
    assert abs(float(cp.lam[-1, 0]) - lam0) > 1e-3, cp.lam


def test_regenerated_orders_run_the_tabled_trajectory_with_predictions(b=3):
    """Small problems materialise the item orders (``order_table``); larger ones
    regenerate each arm's keys and seen mask on every step. With predictions and a refit
    the regenerated path must observe the same items (the seen set after a batch
    includes the batch) and so reach the same estimates and bounds (within float32
    rounding: ``tests/test_blocks.py`` pins them bit for bit under XLA's default code
    generation only)."""
    base = idn.Config("pulse", 3, 20, budgets=(6, 21, 45), batch_size=b, truth="synthetic",
                      corruption="biased", cs_kinds=("eb", "hoeffding"), order_table=True)
    run = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                  static_argnums=3)
    keys = jax.random.split(jax.random.key(11), 4)
    outs = [jax.tree.map(np.asarray, run(keys, idn.dummy_data(c), idn.Params.make(), c))
            for c in (base, dataclasses.replace(base, order_table=False))]
    a, r = outs[0].checkpoints, outs[1].checkpoints
    np.testing.assert_array_equal(r.pulls, a.pulls)
    np.testing.assert_array_equal(r.recommended, a.recommended)
    for f in ("estimate", "naive", "lam", "lower", "upper"):
        np.testing.assert_allclose(getattr(r, f), getattr(a, f), atol=2e-5, err_msg=f)


@pytest.mark.parametrize("refit", [False, True])
def test_streamed_rows_run_the_whole_row_trajectory(refit):
    """Rows streamed in blocks (``num_items > item_block``) with predictions give the
    whole-row run's pulls, recommendations, estimates, λ and bounds, up to float32
    summation order (measured differences ~2e-7). Without a refit the sums over the seen
    items come from the scan itself (no refit pass). With one after every batch the
    blocked refit is handed the derivatives' data part over the seen items plus the
    batch, and their count: a count without the batch (0 on an arm's first pull) would
    discard the first refit (back to the prior mean), an error of ~3e-3."""
    whole = idn.Config("pulse", 3, 20, budgets=(6, 21, 45), batch_size=3, truth="synthetic",
                       corruption="biased", cs_kinds=("eb",), refit=refit)
    run = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                  static_argnums=3)
    keys = jax.random.split(jax.random.key(12), 4)
    outs = [jax.tree.map(np.asarray, run(keys, idn.dummy_data(c), idn.Params.make(), c))
            for c in (whole, dataclasses.replace(whole, item_block=8))]
    a, s = outs[0].checkpoints, outs[1].checkpoints
    np.testing.assert_array_equal(s.pulls, a.pulls)
    np.testing.assert_array_equal(s.recommended, a.recommended)
    for f in ("estimate", "naive", "lam", "lower", "upper"):
        np.testing.assert_allclose(getattr(s, f), getattr(a, f), rtol=0, atol=2e-5, err_msg=f)
