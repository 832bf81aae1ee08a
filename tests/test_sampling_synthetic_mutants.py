"""Mutation-review tests for the without-replacement sampler (_sampling) and the synthetic
truth (_synthetic): each pins a behaviour that a plausible one-line slip would change and
that the other tests let pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_sampling import _drain  # (draw batches until the arm is exhausted)

from jaxeval import _sampling as smp
from jaxeval import _synthetic
from jaxeval._synthetic import GAP_CLIPPED, OK, synthetic_matrix, synthetic_score_matrix


# ------------------------------------------------------------------ sampler
def _state_tuple(state, arm):
    return tuple(int(x[arm]) for x in state)


def test_an_empty_batch_leaves_the_threshold_where_it_was():
    """A batch that draws nothing (``limit = 0``, as when a budget is spent exactly) must
    leave the whole state unchanged, in the whole-row, the table and the blockwise search.
    Moving the threshold to the (undrawn) first candidate would skip that item forever:
    the arm would then never draw it, and the drained arm would miss one item."""
    n, b = 9, 3
    key = jax.random.key(4)
    order = np.asarray(smp.arm_order(key, 0, n)).tolist()
    table = smp.order_table(key, 1, n)
    state = smp.init(1)
    keys, seen = smp.arm_view(key, state, 0, n)
    _, _, state = smp.take_batch(keys, seen, state, 0, b)  # three drawn: a real threshold
    before = _state_tuple(state, 0)
    keys, seen = smp.arm_view(key, state, 0, n)
    _, valid, s_row = smp.take_batch(keys, seen, state, 0, b, limit=0)
    _, valid_t, s_tab = smp.take_from_table(table, key, state, 0, b, limit=0)
    top = smp.block_top(keys, jnp.arange(n, dtype=jnp.int32), ~seen, b)
    _, valid_b, s_blk, _ = smp.finish_top(top, state, 0, limit=0)
    for v, s in ((valid, s_row), (valid_t, s_tab), (valid_b, s_blk)):
        assert not np.asarray(v).any()
        assert _state_tuple(s, 0) == before
    # and the arm goes on with the item it had not drawn
    drawn = []
    state = s_row
    for _ in range(3):
        keys, seen = smp.arm_view(key, state, 0, n)
        items, valid, state = smp.take_batch(keys, seen, state, 0, b)
        drawn.extend(np.asarray(items)[np.asarray(valid)].tolist())
    assert drawn == order[b:]


@pytest.mark.parametrize("with_keys", [True, False])
def test_synchronized_table_without_keys_keeps_the_shared_threshold(with_keys):
    """A synchronized :class:`OrderTable` stored without its keys regenerates the
    threshold's key with :func:`keys_at` on the *shared* stream: the new state is the
    whole-row search's (arm 2, so a per-arm key would differ), and the seen-mask it implies
    marks exactly the items drawn."""
    n, b, arm = 12, 5, 2
    key = jax.random.key(8)
    table = smp.order_table(key, 3, n, synchronized=True, with_keys=with_keys)
    state = smp.init(3)
    keys, seen = smp.arm_view(key, state, arm, n, synchronized=True)
    items, valid, s_row = smp.take_batch(keys, seen, state, arm, b)
    items_t, valid_t, s_tab = smp.take_from_table(table, key, state, arm, b, synchronized=True)
    np.testing.assert_array_equal(np.asarray(items_t), np.asarray(items))
    assert _state_tuple(s_tab, arm) == _state_tuple(s_row, arm)
    _, seen_after = smp.arm_view(key, s_tab, arm, n, synchronized=True)
    assert sorted(np.flatnonzero(np.asarray(seen_after)).tolist()) == sorted(
        np.asarray(items).tolist())


def test_synchronized_stream_is_not_an_arms_stream():
    """The shared stream of the synchronized variant is its own (``SYNC_STREAM`` above any
    arm index): its keys differ from every arm's, so a synchronized run does not replay
    the order arm 0 (or any arm) sees in the independent variant."""
    key = jax.random.key(1)
    n = 64
    sync = np.asarray(smp.arm_keys(key, 0, n, synchronized=True))
    for arm in range(8):
        assert not np.array_equal(sync, np.asarray(smp.arm_keys(key, arm, n)))
    assert smp.SYNC_STREAM >= 2**30


def test_drained_arm_stays_drained_with_its_threshold():
    """After an arm has drawn every item, a further batch draws nothing and changes
    nothing (count ``n``, threshold the last item of the order)."""
    n, b = 7, 3
    key = jax.random.key(9)
    drawn, counts, state = _drain(key, n, b)
    order = np.asarray(smp.arm_order(key, 0, n)).tolist()
    keys = np.asarray(smp.arm_keys(key, 0, n))
    assert drawn == order and counts[-1] == n
    assert _state_tuple(state, 0) == (n, int(keys[order[-1]]), order[-1])


# --------------------------------------------------------------- synthetic
def test_random_streams_have_distinct_purposes():
    """Model factors, item loadings, item biases, the draw and the gap adjustment each
    have their own ``fold_in`` constant: a shared one makes e.g. the first item loadings
    equal to the first model factors (U and V correlated), or the adjustment's Gumbel
    noise equal to the draw's uniforms. The realised streams are checked too."""
    consts = (_synthetic._U, _synthetic._V, _synthetic._C, _synthetic._DRAW,
              _synthetic._ADJUST)
    assert len(set(consts)) == 5
    m, n, r = 40, 40, 2
    ms, its, dm, ds = 1.3, 0.7, -0.4, 0.9
    t = synthetic_matrix(2, m, n, r, model_scale=ms, item_scale=its, difficulty_mean=dm,
                         difficulty_scale=ds)
    u = np.asarray(t.U, np.float64).ravel() / ms
    z = (np.asarray(t.V, np.float64) * np.sqrt(r) - 1.0).ravel() / its
    c = (np.asarray(t.c, np.float64) - dm) / ds
    for a, b in ((u, z), (u[:n], c), (z[:n], c)):
        assert abs(np.corrcoef(a, b)[0, 1]) < 0.5


def test_item_loadings_and_biases_follow_their_parameters():
    """``v_j = (1 + item_scale z_j) / sqrt(r)`` and ``c_j ~ N(difficulty_mean,
    difficulty_scale^2)``: the realised means and spreads over 3000 items (4 loadings
    each) lie within 5 standard errors of the model's (non-default values, so a dropped
    parameter or a missing ``1 / sqrt(r)`` shows)."""
    n, r = 3000, 4
    its, dm, ds = 0.5, -0.7, 0.3
    t = synthetic_matrix(11, 3, n, r, item_scale=its, difficulty_mean=dm, difficulty_scale=ds)
    v = np.asarray(t.V, np.float64)
    c = np.asarray(t.c, np.float64)
    se_v = its / np.sqrt(r) / np.sqrt(v.size)
    assert abs(v.mean() - 1 / np.sqrt(r)) < 5 * se_v
    assert abs(v.std() / (its / np.sqrt(r)) - 1) < 5 / np.sqrt(2 * v.size)
    assert abs(c.mean() - dm) < 5 * ds / np.sqrt(n)
    assert abs(c.std() / ds - 1) < 5 / np.sqrt(2 * n)


@pytest.mark.parametrize("gap", [0.0, 0.03, 0.12])
def test_binary_flips_are_the_gumbel_top_k_of_the_surprising_cells(gap):
    """The binary gap rule flips the ``|d|`` candidate cells of the best row with the
    largest ``log(w) + G`` (Gumbel top-k: weights ``P`` to raise a count, ``1 - P`` to
    lower it, floored at 1e-6; ``G`` drawn from the adjustment's own stream): recomputed
    here cell for cell. A weight on the wrong side, another row's probabilities, or the
    draw's key would pick other cells with the same count."""
    m, n, r = 8, 60, 2
    for seed in range(4):
        key = jax.random.key(seed)
        raw = synthetic_matrix(key, m, n, r)
        adj = synthetic_matrix(key, m, n, r, gap=gap)
        best = int(adj.best)
        s = np.asarray(raw.scores)[best]
        p = np.asarray(raw.probabilities)[best]
        counts = np.asarray(raw.scores).sum(1).astype(int)
        assert best == int(np.argmax(counts))
        second = np.sort(np.delete(counts, best))[-1]
        d = second + int(np.floor(gap * n + 0.5)) - counts[best]
        w = np.clip(np.where(d > 0, p, 1 - p), 1e-6, 1.0).astype(np.float32)
        g = np.asarray(jnp.log(w) + jax.random.gumbel(
            jax.random.fold_in(key, _synthetic._ADJUST), (n,), jnp.float32))
        cand = np.flatnonzero(s == (0 if d > 0 else 1))
        want = np.sort(cand[np.argsort(-g[cand], kind="stable")[:abs(d)]])
        flipped = np.flatnonzero(np.asarray(adj.scores)[best] != s)
        np.testing.assert_array_equal(flipped, want)


def test_binary_gap_that_reaches_exactly_all_items_is_not_clipped():
    """Binary twin of the graded case: ``second + g == n`` is reachable (the best row gets
    every item right), so the status is OK and the gap the one asked for; one more item
    would be GAP_CLIPPED."""
    kw = dict(difficulty_mean=4.0)
    counts = np.sort(np.asarray(synthetic_matrix(1, 4, 10, 2, **kw).scores).sum(1))
    assert counts[-2] == 9  # (the premise)
    t = synthetic_matrix(1, 4, 10, 2, gap=0.1, **kw)
    assert int(t.status) == OK and float(t.gap) == pytest.approx(0.1)
    assert float(np.max(t.accuracy)) == 1.0
    t = synthetic_matrix(1, 4, 10, 2, gap=0.2, **kw)
    assert int(t.status) == GAP_CLIPPED and float(t.gap) == pytest.approx(0.1)


def test_graded_clipped_gap_reports_the_realised_gap():
    """Graded, unreachable gap: the best row is set to 1 and ``gap`` is the realised
    ``1 - second`` (what coverage studies read as the truth), not the gap asked for."""
    t = synthetic_matrix(1, 30, 200, 3, gap=0.9, graded=True, difficulty_mean=3.0)
    assert int(t.status) == GAP_CLIPPED
    acc = np.sort(np.asarray(t.scores, np.float64).mean(1))
    assert acc[-1] == 1.0
    assert float(t.gap) == pytest.approx(acc[-1] - acc[-2], abs=1e-6)
    assert float(t.gap) < 0.5


def test_gap_of_exactly_one_is_accepted():
    """``gap`` lies in the closed [0, 1]: 1 is a valid request (clipped unless every other
    row scores 0), not an argument error."""
    t = synthetic_matrix(0, 5, 10, gap=1.0)
    assert int(t.status) in (OK, GAP_CLIPPED)
    assert float(np.max(t.accuracy)) == 1.0


def test_numpy_helper_truth_is_the_generators():
    """``metadata['synthetic']`` carries the generator's own ``probabilities``, ``U``,
    ``V``, ``c``, ``best`` and realised ``gap`` (the truth a study is judged against)."""
    sm = synthetic_score_matrix(seed=3, n_models=6, n_items=30, rank=2, gap=0.1)
    t = synthetic_matrix(3, 6, 30, 2, gap=0.1)
    truth = sm.metadata["synthetic"]
    for name in ("probabilities", "U", "V", "c"):
        np.testing.assert_array_equal(truth[name], np.asarray(getattr(t, name)), err_msg=name)
    assert truth["best"] == int(t.best) and truth["gap"] == float(t.gap)


def test_binary_gap_exact_when_probabilities_saturate():
    """Item biases so spread out that ``P`` is exactly 0 or 1 in float32 (all rows alike,
    ``model_scale = 0``): raising the best row must flip cells of weight ``P = 0``. The
    weights' floor at 1e-6 keeps them candidates; without it their ``log`` is ``-inf``,
    tied with the non-candidates, and the row gets fewer flips than the gap needs."""
    for seed in range(3):
        t = synthetic_matrix(seed, 3, 40, 1, gap=0.1, model_scale=0.0, difficulty_scale=1000.0)
        counts = np.sort(np.asarray(t.scores).sum(1))
        assert counts[-1] - counts[-2] == 4 and int(t.status) == OK


def test_without_a_gap_best_and_gap_are_among_the_candidates():
    """No gap asked for: ``best`` and ``gap`` still describe the candidate rows (the last
    ``n_candidates``), not all rows; here a training row is the most accurate overall."""
    m, n, k = 30, 200, 6
    t = synthetic_matrix(3, m, n, 3, model_scale=2.0, n_candidates=k)
    acc = np.asarray(t.scores, np.float64).mean(1)
    assert int(np.argmax(acc)) < m - k  # (the premise: a training row leads)
    cand = np.sort(acc[m - k:])
    assert int(t.best) == m - k + int(np.argmax(acc[m - k:]))
    assert float(t.gap) == pytest.approx(cand[-1] - cand[-2], abs=1e-6)
