"""Gaps found by a second, deeper mutation review of the identification loop
(``jaxeval/_identification.py``): each test pins a behaviour that a plausible one-line
bug changed without any other test failing (the record of a plain-mean run before and
between its pulls, the confidence sequences' updates in a batch cut short, the statuses
of a fixed-confidence run that hits its cap, the confident stop at the very start and
its strict inequality, the stop kind's own bounds in the stopping rule and in
``skip_separated``, the ``eps`` of the skip rule, the statuses of fixed-budget
checkpoints never reached, and the items at the boundaries of streamed blocks; the
count the blocked refit is handed is pinned by the refit case of
``test_identification_mutants.py::test_streamed_rows_run_the_whole_row_trajectory``)."""

import jax
import jax.numpy as jnp
import numpy as np
from test_identification import POOL, N, _data, _run

from jaxeval import _identification as idn
from jaxeval import _sampling as smp
from jaxeval._factorization import ItemFactors


def _pool_data(pool, rows):
    """Real-data operands for ``pool`` (no predictions: zero item factors)."""
    n = pool.shape[1]
    f = ItemFactors(jnp.zeros((n, 1)), jnp.zeros(n), jnp.zeros(1))
    return idn.ProblemData(jnp.asarray(pool, jnp.float32), jnp.asarray([rows], jnp.int32), f)


def test_plain_mean_records_before_between_and_after_pulls():
    """Round robin (b = 1) on three arms of 8 items without predictions, recorded at 0, 2,
    10, 19, 22 and 24 calls. Before any pull every arm's ranking estimate is the
    placeholder 0.5 (also an unpulled arm's at 2 calls), its naive pooled estimate is
    0 (the unseen items predict 0: ``sum_O S / n``) and its intervals are [0, 1]. The naive
    estimate stays ``sum_O S / n`` (not the observed mean). An arm one item short of
    full is not given its exact interval. One fully evaluated arm among
    others (22 calls: 8, 7, 7) leaves the status at "budget"; all three (24) make it
    "exhausted"."""
    cfg = idn.Config("uniform", 3, N, budgets=(0, 2, 10, 19, 22, 24),
                     cs_kinds=("eb", "hoeffding"))
    data = _data()
    cp = _run(cfg, data, seed=5).checkpoints
    assert cp.calls.tolist() == [0, 2, 10, 19, 22, 24]
    np.testing.assert_array_equal(
        cp.pulls, [[0, 0, 0], [1, 1, 0], [4, 3, 3], [7, 6, 6], [8, 7, 7], [8, 8, 8]])
    np.testing.assert_array_equal(cp.estimate[0], [0.5, 0.5, 0.5])
    assert float(cp.estimate[1, 2]) == 0.5
    np.testing.assert_array_equal(cp.naive[0], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(cp.lower[0], np.zeros((2, 3)))
    np.testing.assert_array_equal(cp.upper[0], np.ones((2, 3)))
    ok = jax.random.fold_in(jax.random.key(5), idn._PURPOSE_ORDER)
    for c in range(1, 6):
        for arm in range(3):
            k = int(cp.pulls[c, arm])
            seen = np.asarray(smp.arm_order(ok, arm, N, False))[:k]
            np.testing.assert_allclose(cp.naive[c, arm], POOL[arm, seen].sum() / N, atol=1e-7)
    assert cp.status.tolist() == [idn.STATUS_BUDGET] * 5 + [idn.STATUS_EXHAUSTED]
    # one item short of full (22 calls: arms 1 and 2 have 7 of 8) is not exact: the
    # unseen item may score 0 or 1, so the interval still spans (at least) most of 1/n
    assert np.all(cp.upper[4, :, 1:] - cp.lower[4, :, 1:] > 0.5 / N), (cp.lower[4], cp.upper[4])


def test_a_cut_batch_adds_only_its_drawn_items_to_the_intervals():
    """The λ = 0 ("hoeffding") sequence without predictions sees the same terms whatever
    the batching: the plain mean's term of each drawn item, in the arm's order. In
    batches of 3 with a budget of 10 the fourth batch is cut to one item (two empty
    slots); its bounds must equal those of the one-at-a-time run that drew the same
    items (4, 3, 3), so the empty slots update no confidence sequence."""
    data = _data()
    out = {}
    for b in (1, 3):
        cfg = idn.Config("uniform", 3, N, budgets=(10,), batch_size=b,
                         cs_kinds=("eb", "hoeffding"))
        out[b] = _run(cfg, data, seed=5).checkpoints
    np.testing.assert_array_equal(out[3].pulls, [[4, 3, 3]])
    np.testing.assert_array_equal(out[1].pulls, out[3].pulls)
    q = 1  # hoeffding
    assert np.all(out[1].upper[0, q] - out[1].lower[0, q] < 0.99)  # not the trivial [0, 1]
    np.testing.assert_allclose(out[3].lower[0, q], out[1].lower[0, q], atol=1e-6)
    np.testing.assert_allclose(out[3].upper[0, q], out[1].upper[0, q], atol=1e-6)


def test_fixed_confidence_start_and_cap_statuses():
    """Two identical arms (the same pool row) in fixed-confidence mode, batches of 3, one
    compiled run for three values of ``eps``. ``eps = 1.5``: the rule holds before any pull (the
    leader's lower bound 0 clears the other's upper bound 1 minus 1.5), so the run stops
    at 0 calls, confident. ``eps = 1``: ``0 > 1 - 1`` is false, the inequality is strict,
    so pulls are made until it holds (a pulled arm's bounds leave [0, 1]).
    ``eps = 0``: identical arms never separate; the run spends its cap of 15 calls (8 and
    7 items: arm 0's third batch holds the 2 items it has left and costs 2 calls, arm 1's
    third is cut to the 1 call left) with one arm fully evaluated and the other not:
    status "budget", neither "exhausted" (not every arm is) nor "policy done" (the cap was
    reached)."""
    pool = np.stack([POOL[3], POOL[3]])
    data = _pool_data(pool, [0, 1])
    cfg = idn.Config("uniform", 2, N, budgets=(15,), batch_size=3, mode="confidence",
                     cs_kinds=("eb",))
    cp = {e: _run(cfg, data, idn.Params.make(eps=e), seed=5).checkpoints
          for e in (1.5, 1.0, 0.0)}
    assert cp[1.5].calls.tolist() == [0] and cp[1.5].pulls.tolist() == [[0, 0]]
    assert cp[1.5].status.tolist() == [idn.STATUS_CONFIDENT]
    assert 0 < cp[1.0].calls[0] < 15 and cp[1.0].status.tolist() == [idn.STATUS_CONFIDENT]
    assert cp[0.0].calls.tolist() == [15]
    assert cp[0.0].pulls.tolist() == [[8, 7]]
    assert cp[0.0].status.tolist() == [idn.STATUS_BUDGET]


# constant graded rows: the empirical-Bernstein interval shrinks like 1/N (no variance),
# Hoeffding's like 1/sqrt(N), so the two kinds separate the arms at very different times
NG = 200
GRADED = np.stack([np.full(NG, v, np.float32) for v in (0.9, 0.85, 0.1)])


def test_the_confident_stop_reads_the_stop_kinds_bounds():
    """With ``stop_kind="hoeffding"`` listed second, the stop waits for the Hoeffding
    intervals to separate (EB's, the first kind, separate much earlier on these constant
    rows, 0.9 and 0.85: at about 220 calls against about 335): at the stop the
    recommended arm's Hoeffding lower bound clears the other's Hoeffding upper bound."""
    data = _pool_data(GRADED[[0, 1]], [0, 1])
    cfg = idn.Config("ucbe", 2, NG, budgets=(2 * NG,), mode="confidence",
                     cs_kinds=("eb", "hoeffding"), stop_kind="hoeffding")
    cp = _run(cfg, data, seed=1).checkpoints
    assert cp.status.tolist() == [idn.STATUS_CONFIDENT]
    lead = int(cp.recommended[0])
    assert lead == 0
    assert cp.lower[0, 1, 0] > cp.upper[0, 1, 1], (cp.lower[0], cp.upper[0])
    assert cp.calls[0] < 2 * NG


def test_skip_separated_skips_by_the_stop_kind_and_eps():
    """UCB-E with ``skip_separated``, ``stop_kind="eb"`` (the second kind) and
    ``eps = 0.05``, recorded after every call: each pull goes to the arm of largest
    UCB-E index among the arms neither fully evaluated nor separated, where separated is
    the rule of the stop: the arm's EB upper bound below the recommended arm's EB lower
    bound plus eps (all read from the record before the pull; the first kind,
    Hoeffding's, separates much later on these constant rows). The check has teeth: many
    pulls differ from plain UCB-E's choice (arm 1, 0.05 below arm 0, is skipped once its
    upper bound is within eps of arm 0's lower bound)."""
    T, a, eps = 200, 4.0, 0.05
    data = _pool_data(GRADED, [0, 1, 2])
    cfg = idn.Config("ucbe", 3, NG, budgets=tuple(range(1, T + 1)),
                     cs_kinds=("hoeffding", "eb"), stop_kind="eb", skip_separated=True)
    cp = _run(cfg, data, idn.Params.make(a=a, eps=eps), seed=2).checkpoints
    q = 1
    skipped = 0
    for t in range(T - 1):
        step = cp.pulls[t + 1] - cp.pulls[t]
        assert step.sum() == 1, (t, step)
        pulls = cp.pulls[t].astype(np.float64)
        idx = np.where(pulls > 0, cp.estimate[t] + np.sqrt(a / np.maximum(pulls, 1)), np.inf)
        idx = np.where(pulls >= NG, -np.inf, idx)
        lead = int(cp.recommended[t])
        sep = (np.arange(3) != lead) & (cp.upper[t, q] < cp.lower[t, q, lead] + eps)
        chosen = int(np.argmax(step))
        plain = int(np.argmax(idx))
        idx = np.where(sep, -np.inf, idx)
        assert idx[chosen] >= idx.max() - 1e-6, (t, idx, chosen)
        skipped += chosen != plain
    assert skipped >= 20, skipped


def test_budget_mode_statuses_of_a_checkpoint_never_reached():
    """Fixed-budget checkpoints that the run never reaches take the status of how it
    ended. SySRs planned for 30 calls (phases 7 and 8 of 8 items, one run read at 12, 23
    and 30 calls) spends only 23: three arms to 7 items, the two left to 8, and its
    survivor is then fully evaluated, so the schedule is over with the rejected arm at 7
    of 8 items: the 30-call checkpoint is "policy done" (not "exhausted": an arm is not
    fully evaluated), while 23 (reached exactly) is "budget". Round robin on the same arms
    recorded at 20, 24 and 30 calls evaluates every arm by 24: the unreached 30-call
    checkpoint is "exhausted" (not "policy done": the policy stopped because nothing is
    left to evaluate)."""
    data = _data()
    cfg = idn.Config("sysrs", 3, N, budgets=(12, 23, 30), horizon=30, cs_kinds=("eb",))
    cp = _run(cfg, data).checkpoints
    assert cp.calls.tolist() == [12, 23, 23]
    assert sorted(cp.pulls[-1].tolist()) == [7, 8, 8]
    assert cp.status.tolist() == [idn.STATUS_BUDGET, idn.STATUS_BUDGET, idn.STATUS_POLICY_DONE]
    cfg = idn.Config("uniform", 3, N, budgets=(20, 24, 30), cs_kinds=("eb",))
    cp = _run(cfg, data).checkpoints
    assert cp.calls.tolist() == [20, 24, 24]
    assert cp.pulls[-1].tolist() == [N] * 3
    assert cp.status.tolist() == [idn.STATUS_BUDGET, idn.STATUS_EXHAUSTED, idn.STATUS_EXHAUSTED]


def test_streamed_rows_own_every_item_at_the_block_boundaries():
    """Rows of 20 items streamed in blocks of 8 (blocks start at 0, 8 and 12, the last one
    shifted back and owning only 16-19): every item belongs to exactly one block, the
    boundary items 0, 8 and 16 included. So ``theta`` is each row's mean over all 20
    items, round robin with a budget of 60 calls draws every item of every arm (pulls 20
    each, status "exhausted"), and the fully evaluated arms' estimates are the exact row
    means (sums of 0/1 scores, exact in float32). An unowned item would never be drawn and
    would be left out of ``theta``."""
    n = 20
    pool = (np.random.default_rng(3).random((3, n)) < 0.5).astype(np.float32)
    data = _pool_data(pool, [0, 1, 2])
    cfg = idn.Config("uniform", 3, n, budgets=(30, 3 * n), cs_kinds=("eb",), item_block=8)
    assert cfg.blocked
    out = _run(cfg, data)
    cp = out.checkpoints
    np.testing.assert_allclose(out.theta, pool.mean(1), rtol=1e-6)
    assert cp.calls.tolist() == [30, 3 * n]
    np.testing.assert_array_equal(cp.pulls, [[10] * 3, [n] * 3])
    assert cp.status.tolist() == [idn.STATUS_BUDGET, idn.STATUS_EXHAUSTED]
    np.testing.assert_allclose(cp.estimate[-1], pool.mean(1), rtol=1e-6)
