"""Second mutation review of the sampler (_sampling) and the synthetic truth (_synthetic):
each test pins a documented behaviour that a plausible one-line slip changes and that the
other tests (test_sampling, test_synthetic, test_sampling_synthetic_mutants) let pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_sampling import _drain  # (draw batches until the arm is exhausted)

from jaxeval import _sampling as smp
from jaxeval._synthetic import GAP_CLIPPED, OK, synthetic_matrix, synthetic_score_matrix

KEY_MAX = 2**31 - 1


# ------------------------------------------------------------------ sampler
def test_init_state_is_all_minus_one_thresholds():
    """A fresh state: count 0 and the threshold pair ``(-1, -1)`` for every arm (the
    documented "nothing drawn yet"), int32 ``[K]``."""
    state = smp.init(4)
    for name, want in (("count", 0), ("thr_key", -1), ("thr_idx", -1)):
        x = np.asarray(getattr(state, name))
        assert x.dtype == np.int32 and x.shape == (4,), name
        np.testing.assert_array_equal(x, np.full(4, want), err_msg=name)


def test_interleaved_arms_each_draw_their_own_permutation():
    """Arms drawn in turn, with different batch sizes, each get every item exactly once
    and in their own ``arm_order`` (a function of (key, arm) only): another arm's draws
    and the batch size change nothing. After every batch the arm's seen-mask is exactly
    the set of its drawn items and its count their number."""
    n, key = 11, jax.random.key(21)
    sizes = {0: 3, 1: 4, 2: 1}
    state = smp.init(3)
    drawn = {a: [] for a in sizes}
    step = jax.jit(lambda s, a, b: smp.take_batch(*smp.arm_view(key, s, a, n), s, a, b),
                   static_argnums=2)
    for _ in range(n + 1):
        for a, b in sizes.items():
            items, valid, state = step(state, a, b)
            valid = np.asarray(valid)
            assert valid.tolist() == sorted(valid.tolist(), reverse=True)  # a prefix
            drawn[a].extend(np.asarray(items)[valid].tolist())
            _, seen = smp.arm_view(key, state, a, n)
            assert sorted(np.flatnonzero(np.asarray(seen)).tolist()) == sorted(drawn[a])
            assert int(state.count[a]) == len(drawn[a])
    for a in sizes:
        assert drawn[a] == np.asarray(smp.arm_order(key, a, n)).tolist()
        assert sorted(drawn[a]) == list(range(n))


def test_last_partial_batch_and_threshold():
    """n = 10 in batches of 4: the third batch holds the last two items of the order in
    its first two slots (valid) and two invalid slots; the state is then count 10 and the
    threshold the last item's (key, index)."""
    n, b, key = 10, 4, jax.random.key(2)
    order = np.asarray(smp.arm_order(key, 0, n)).tolist()
    keys = np.asarray(smp.arm_keys(key, 0, n))
    state = smp.init(1)
    for _ in range(3):
        k, seen = smp.arm_view(key, state, 0, n)
        items, valid, state = smp.take_batch(k, seen, state, 0, b)
    assert np.asarray(valid).tolist() == [True, True, False, False]
    assert np.asarray(items)[:2].tolist() == order[8:]
    assert (int(state.count[0]), int(state.thr_key[0]), int(state.thr_idx[0])) == (
        n, int(keys[order[-1]]), order[-1])


def test_synchronized_arms_draw_one_shared_order():
    """Synchronized: every arm, drawn in turn with its own batch size, draws the same
    order (each with its own count)."""
    n, key = 9, jax.random.key(13)
    sizes = {0: 2, 1: 5, 2: 9}
    state = smp.init(3)
    drawn = {a: [] for a in sizes}
    for _ in range(5):
        for a, b in sizes.items():
            k, seen = smp.arm_view(key, state, a, n, synchronized=True)
            items, valid, state = smp.take_batch(k, seen, state, a, b)
            drawn[a].extend(np.asarray(items)[np.asarray(valid)].tolist())
    want = np.asarray(smp.arm_order(key, 0, n, synchronized=True)).tolist()
    assert sorted(want) == list(range(n))
    for a in sizes:
        assert drawn[a] == want, a
    np.testing.assert_array_equal(np.asarray(state.count), [n, n, n])


def test_largest_key_is_still_drawn():
    """Keys lie in ``[0, 2**31)``: an item whose key is ``2**31 - 1`` (its score
    ``KEY_MAX - key`` is 0) is a valid last draw, in the whole-row search and in the
    blockwise one; only seen items (score -1) are invalid."""
    keys = jnp.asarray([KEY_MAX, 3, KEY_MAX, 0], jnp.int32)
    idx = jnp.arange(4, dtype=jnp.int32)
    state = smp.init(1)
    seen = smp.seen_mask(keys, state.thr_key[0], state.thr_idx[0])
    items, valid, s_row = smp.take_batch(keys, seen, state, 0, 4)
    assert np.asarray(items).tolist() == [3, 1, 0, 2]
    assert np.asarray(valid).all() and int(s_row.count[0]) == 4
    assert (int(s_row.thr_key[0]), int(s_row.thr_idx[0])) == (KEY_MAX, 2)
    top = smp.block_top(keys, idx, ~seen, 4)
    items_b, valid_b, s_blk, _ = smp.finish_top(top, state, 0)
    assert np.asarray(items_b).tolist() == [3, 1, 0, 2] and np.asarray(valid_b).all()
    for x, y in zip(s_blk, s_row):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_table_without_keys_regenerates_the_arms_own_threshold():
    """An independent-arms :class:`OrderTable` kept without its keys regenerates the
    threshold's key from the arm's own stream: after a batch of arm 2 the state is the
    whole-row search's, and the arm's seen-mask is exactly its drawn items."""
    n, b, arm = 12, 5, 2
    key = jax.random.key(6)
    table = smp.order_table(key, 3, n, with_keys=False)
    state = smp.init(3)
    keys, seen = smp.arm_view(key, state, arm, n)
    items, _, s_row = smp.take_batch(keys, seen, state, arm, b)
    items_t, _, s_tab = smp.take_from_table(table, key, state, arm, b)
    np.testing.assert_array_equal(np.asarray(items_t), np.asarray(items))
    for x, y in zip(s_tab, s_row):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    _, seen_after = smp.arm_view(key, s_tab, arm, n)
    assert sorted(np.flatnonzero(np.asarray(seen_after)).tolist()) == sorted(
        np.asarray(items).tolist())


def test_drain_is_independent_of_the_batch_size():
    """The draw order depends on (key, arm) only: draining with batches of 1, 4 or n
    gives the same sequence."""
    n, key = 13, jax.random.key(31)
    runs = [_drain(key, n, b, arm=1)[0] for b in (1, 4, n)]
    assert runs[0] == runs[1] == runs[2]
    assert sorted(runs[0]) == list(range(n))


# --------------------------------------------------------------- synthetic
def test_defaults_rank_and_parameter_distributions():
    """Defaults: ``rank = 2``, ``model_scale = 1``, ``item_scale = 1``,
    ``difficulty_mean = 0``, ``difficulty_scale = 1.5``. The realised factors follow them:
    ``U ~ N(0, 1)``, ``V = (1 + z) / sqrt(2)``, ``c ~ N(0, 1.5^2)`` (means and spreads
    within 5 standard errors over 4000 models and 4000 items, fixed seed)."""
    m = n = 4000
    t = synthetic_matrix(17, m, n)
    assert t.U.shape == (m, 2) and t.V.shape == (n, 2) and t.c.shape == (n,)
    u = np.asarray(t.U, np.float64)
    v = np.asarray(t.V, np.float64)
    c = np.asarray(t.c, np.float64)
    assert abs(u.mean()) < 5 / np.sqrt(u.size)
    assert abs(u.std() - 1.0) < 5 / np.sqrt(2 * u.size)
    assert abs(v.mean() - 1 / np.sqrt(2)) < 5 / np.sqrt(2) / np.sqrt(v.size)
    assert abs(v.std() * np.sqrt(2) - 1.0) < 5 / np.sqrt(2 * v.size)
    assert abs(c.mean()) < 5 * 1.5 / np.sqrt(n)
    assert abs(c.std() / 1.5 - 1.0) < 5 / np.sqrt(2 * n)


def test_model_factors_scale_with_model_scale():
    """``u_i ~ N(0, model_scale^2 I)``: with ``model_scale = 2.5`` the realised spread of
    3000 x 3 factors is 2.5 within 5 standard errors (not 2.5^2, not 1)."""
    t = synthetic_matrix(5, 3000, 4, 3, model_scale=2.5)
    u = np.asarray(t.U, np.float64)
    assert abs(u.std() / 2.5 - 1.0) < 5 / np.sqrt(2 * u.size)
    assert abs(u.mean()) < 5 * 2.5 / np.sqrt(u.size)


def test_default_difficulty_puts_mean_accuracy_near_half():
    """``difficulty_mean = 0`` puts the mean accuracy near 50% (the logits are symmetric
    about 0): the mean probability over 300 models x 600 items lies within 0.05 of 0.5
    (about 3 standard errors for this fixed seed's model and item effects)."""
    t = synthetic_matrix(8, 300, 600)
    assert abs(float(np.asarray(t.probabilities, np.float64).mean()) - 0.5) < 0.05
    assert abs(float(np.asarray(t.accuracy, np.float64).mean()) - 0.5) < 0.05


def test_graded_gap_reaching_exactly_one_is_not_clipped():
    """Graded: ``second + gap == 1`` exactly is reachable (the best row becomes all ones),
    so the status is OK; only a larger gap is GAP_CLIPPED."""
    kw = dict(graded=True, difficulty_mean=3.0)
    raw = synthetic_matrix(1, 6, 40, 2, **kw)
    acc = np.asarray(raw.accuracy, np.float32)
    second = np.sort(acc)[-2]
    assert second > 0.5  # (premise: 1 - second is exact in float32)
    gap = np.float32(1.0) - second
    assert np.float32(second + gap) == np.float32(1.0)
    t = synthetic_matrix(1, 6, 40, 2, gap=gap, **kw)
    assert int(t.status) == OK
    assert float(t.accuracy[int(t.best)]) == 1.0
    t = synthetic_matrix(1, 6, 40, 2, gap=min(1.0, float(gap) + 0.01), **kw)
    assert int(t.status) == GAP_CLIPPED


def test_graded_clipped_best_row_is_exactly_one():
    """Graded, unreachable gap: "the best row was set to accuracy 1", every cell exactly 1
    (not ``s + lam (1 - s)`` with a ``lam`` a float32 rounding short of 1, which leaves
    0.9999999 on some draws of 7 items)."""
    keys = jax.random.split(jax.random.key(0), 64)
    t = jax.vmap(lambda k: synthetic_matrix(k, 4, 7, 2, gap=1.0, graded=True))(keys)
    clipped = np.asarray(t.status) == GAP_CLIPPED
    assert clipped.sum() >= 60
    rows = np.asarray(t.scores)[np.arange(64), np.asarray(t.best)]
    np.testing.assert_array_equal(rows[clipped], 1.0)
    np.testing.assert_array_equal(np.asarray(t.accuracy)[np.arange(64), np.asarray(t.best)][
        clipped], 1.0)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(gap=True), TypeError, "'gap' must be a real number, got True"),
        (dict(model_scale=np.bool_(True)), TypeError, "'model_scale' must be a real number"),
        (dict(gap=-0.1), ValueError, r"'gap' must lie in \[0, 1\], got -0.1"),
        (dict(graded=True, concentration=0.0), ValueError,
         "'concentration' must be > 0 and finite, got 0.0"),
        (dict(n_items=0), ValueError, "n_items: expected an integer >= 1, got 0"),
    ],
)
def test_more_bad_arguments_refused(kwargs, error, match):
    """Booleans are not reals, a negative gap is outside [0, 1], a zero concentration is
    not > 0 and a matrix needs at least one item; each error names the argument."""
    args = dict(n_models=5, n_items=10) | kwargs
    with pytest.raises(error, match=match):
        synthetic_matrix(0, **args)


def test_numpy_helper_passes_n_candidates_and_records_status():
    """``synthetic_score_matrix`` accepts ``n_candidates`` (recorded as the int given) and
    its metadata carry the generator's ``status`` and ``best`` (a clipped gap here)."""
    sm = synthetic_score_matrix(seed=1, n_models=8, n_items=30, rank=2, gap=0.9,
                                difficulty_mean=3.0, n_candidates=3)
    t = synthetic_matrix(1, 8, 30, 2, gap=0.9, difficulty_mean=3.0, n_candidates=3)
    truth = sm.metadata["synthetic"]
    assert truth["status"] == int(t.status) == GAP_CLIPPED
    assert truth["best"] == int(t.best) >= 5
    assert truth["params"]["n_candidates"] == 3
    assert type(truth["params"]["n_candidates"]) is int
    assert truth["params"]["gap"] == 0.9 and truth["params"]["difficulty_mean"] == 3.0


# ------------------------------------------------- a library problem the review found
def test_gap_and_concentration_given_as_concrete_arrays_are_checked():
    """``gap`` and ``concentration`` as 0-d NumPy or concrete JAX arrays went past the
    range checks (``gap=np.array(-0.3)`` came back "OK" with a best row that was not
    best); they are refused as the Python numbers are, and traced values stay the
    caller's to check."""
    for kw, msg in [
        (dict(gap=np.array(-0.3)), r"'gap' must lie in \[0, 1\], got array\(-0.3\)"),
        (dict(gap=jnp.asarray(1.5)), r"'gap' must lie in \[0, 1\], got Array\(1.5"),
        (dict(gap=np.array(np.nan)), r"'gap' must lie in \[0, 1\]"),
        (dict(graded=True, concentration=np.array(0.0)),
         r"'concentration' must be > 0 and finite, got array\(0.\)"),
        (dict(graded=True, concentration=np.inf), r"'concentration' must be > 0 and finite"),
    ]:
        with pytest.raises(ValueError, match="synthetic_matrix: " + msg):
            synthetic_matrix(0, 5, 20, **kw)
    assert float(synthetic_matrix(0, 5, 20, gap=np.array(0.1)).gap) == pytest.approx(0.1)
    assert float(jax.jit(lambda g: synthetic_matrix(0, 5, 20, gap=g).gap)(0.2)) == \
        pytest.approx(0.2)
