"""The synthetic truth generator: requested gap and rank honoured, vmap, determinism."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval import _synthetic
from jaxeval._synthetic import GAP_CLIPPED, OK, synthetic_matrix, synthetic_score_matrix

M, N, R = 30, 200, 3


@functools.cache
def _batched(graded=False, concentration=None):
    f = lambda k, g: synthetic_matrix(k, M, N, R, gap=g, graded=graded, concentration=concentration)
    return jax.jit(jax.vmap(f))


def _batch(keys, gaps, **kw):
    return _batched(**kw)(keys, gaps)


_CACHE = {}


def _graded_batch(concentration):
    """32 graded replicates (cached: the Beta sampler is slow to compile)."""
    if concentration not in _CACHE:
        keys = jax.random.split(jax.random.key(2), 32)
        gaps = jnp.linspace(0.0, 0.15, 32)
        _CACHE[concentration] = (gaps, _batch(keys, gaps, graded=True, concentration=concentration))
    return _CACHE[concentration]


def _top_two(x):
    s = np.sort(np.asarray(x), axis=-1)
    return s[..., -1], s[..., -2]


def test_binary_gap_is_exact_for_every_replicate():
    keys = jax.random.split(jax.random.key(0), 64)
    gaps = jnp.linspace(0.0, 0.2, 64)
    t = _batch(keys, gaps)
    counts = np.asarray(t.scores).sum(-1).astype(int)  # [64, M]
    top, second = _top_two(counts)
    g = np.asarray(gaps, np.float32)
    items = np.floor(g * np.float32(N) + np.float32(0.5))  # half up, as the kernel rounds
    np.testing.assert_array_equal(top - second, np.where(g > 0, np.maximum(items, 1), items))
    assert set(np.unique(t.scores).tolist()) <= {0.0, 1.0}
    np.testing.assert_array_equal(t.status, OK)
    np.testing.assert_allclose(t.gap, (top - second) / N, atol=1e-7)
    # `best` points at a top row and accuracy is the row mean.
    np.testing.assert_array_equal(counts[np.arange(64), np.asarray(t.best)], top)
    np.testing.assert_allclose(t.accuracy, counts / N, atol=1e-7)


def test_binary_adjustment_flips_the_minimal_number_of_cells_in_one_row():
    for seed in range(5):
        raw = synthetic_matrix(seed, M, N, R)  # same streams, no adjustment
        adj = synthetic_matrix(seed, M, N, R, gap=0.04)
        changed = np.asarray(raw.scores != adj.scores)
        best = int(adj.best)
        assert not changed[np.arange(M) != best].any()
        counts = np.asarray(raw.scores).sum(1).astype(int)
        second = np.sort(np.delete(counts, best))[-1]
        assert best == int(np.argmax(counts))
        assert changed[best].sum() == abs(second + 8 - counts[best])
        np.testing.assert_array_equal(raw.probabilities, adj.probabilities)


def test_gap_among_candidate_rows_leaves_training_rows_as_drawn():
    k = 6
    raw = synthetic_matrix(3, M, N, R, model_scale=2.0)
    adj = synthetic_matrix(3, M, N, R, gap=0.05, model_scale=2.0, n_candidates=k)
    np.testing.assert_array_equal(raw.scores[: M - k], adj.scores[: M - k])
    counts = np.asarray(adj.scores).sum(1).astype(int)
    top, second = _top_two(counts[M - k :])
    assert top - second == 10 and int(adj.best) >= M - k
    assert counts[int(adj.best)] == top
    # Training rows may beat the candidates: they are not part of the gap.
    assert float(adj.gap) == pytest.approx(0.05, abs=1e-6)
    with pytest.raises(ValueError, match=r"n_candidates: expected an integer in \[2, 30\] "
                                         r"\(at most n_models\)"):
        synthetic_matrix(3, M, N, R, n_candidates=1)


def test_unreachable_gap_is_clipped_with_status():
    t = synthetic_matrix(1, M, N, R, gap=0.9, difficulty_mean=3.0)
    assert int(t.status) == GAP_CLIPPED
    assert float(t.accuracy[int(t.best)]) == 1.0
    top, second = _top_two(t.accuracy)
    assert float(t.gap) == pytest.approx(top - second, abs=1e-6)


@pytest.mark.parametrize("concentration", [None, 4.0])
def test_graded_gap_within_float32_tolerance(concentration):
    gaps, t = _graded_batch(concentration)
    s = np.asarray(t.scores)
    assert s.min() >= 0.0 and s.max() <= 1.0
    assert len(np.unique(s)) > 1000  # really graded
    acc = s.astype(np.float64).mean(-1)
    top, second = _top_two(acc)
    np.testing.assert_allclose(top - second, gaps, atol=2e-6)
    np.testing.assert_allclose(t.accuracy, acc, atol=1e-6)
    np.testing.assert_array_equal(t.status, OK)


def test_rank_is_honoured():
    for r in (1, R):
        t = synthetic_matrix(7, M, N, r)
        logits = np.asarray(t.U, np.float64) @ np.asarray(t.V, np.float64).T
        full = logits + np.asarray(t.c, np.float64)
        assert t.U.shape == (M, r) and t.V.shape == (N, r) and t.c.shape == (N,)
        np.testing.assert_allclose(jax.nn.sigmoid(full), t.probabilities, atol=1e-5)
        sv = np.linalg.svd(logits, compute_uv=False)
        assert sv[r - 1] / sv[0] > 1e-3 and sv[r] / sv[0] < 1e-6
        centred = full - full.mean(0, keepdims=True)
        svc = np.linalg.svd(centred, compute_uv=False)
        assert svc[r - 1] / svc[0] > 1e-3 and svc[r] / svc[0] < 1e-6
        # The float32 logits recovered from the probabilities have the same rank.
        p = np.clip(np.asarray(t.probabilities, np.float64), 1e-6, 1 - 1e-6)
        lg = np.log(p / (1 - p)) - np.asarray(t.c, np.float64)
        mid = (p > 1e-4) & (p < 1 - 1e-4)
        assert np.abs(lg - logits)[mid].max() < 1e-2


def test_scores_follow_their_probabilities():
    # Draws have mean P: z-tests over the cells of the rows the gap rule left alone.
    keys = jax.random.split(jax.random.key(0), 64)
    t = _batch(keys, jnp.linspace(0.0, 0.2, 64))
    keep = np.arange(M)[None, :] != np.asarray(t.best)[:, None]  # [64, M]
    p = np.asarray(t.probabilities, np.float64)[keep]
    s = np.asarray(t.scores, np.float64)[keep]
    z = (s - p).sum() / np.sqrt((p * (1 - p)).sum())
    assert abs(z) < 4
    kappa = 4.0
    _, g = _graded_batch(kappa)
    keep = np.arange(M)[None, :] != np.asarray(g.best)[:, None]
    p = np.asarray(g.probabilities, np.float64)[keep]
    s = np.asarray(g.scores, np.float64)[keep]
    var = p * (1 - p) / (kappa + 1)  # Beta(kappa p, kappa (1 - p)) variance
    assert abs((s - p).sum() / np.sqrt(var.sum())) < 4
    # Mean squared deviation matches the Beta variance (~1e5 cells: +-3%).
    assert 0.97 < ((s - p) ** 2).sum() / var.sum() < 1.03
    _, exact = _graded_batch(None)
    keep = np.arange(M)[None, :] != np.asarray(exact.best)[:, None]
    np.testing.assert_array_equal(
        np.asarray(exact.scores)[keep], np.asarray(exact.probabilities)[keep]
    )


def test_accuracies_spread_with_model_scale():
    narrow = synthetic_matrix(4, M, N, R, model_scale=0.2)
    wide = synthetic_matrix(4, M, N, R, model_scale=2.0)
    assert float(jnp.std(wide.accuracy)) > 3 * float(jnp.std(narrow.accuracy))


def test_vmap_matches_single_calls_and_same_key_same_matrix():
    keys = jax.random.split(jax.random.key(9), 4)
    t = _batch(keys, jnp.full(4, 0.03))
    for i in range(4):
        one = synthetic_matrix(keys[i], M, N, R, gap=0.03)
        np.testing.assert_array_equal(one.scores, t.scores[i])
    again = _batch(keys, jnp.full(4, 0.03))
    np.testing.assert_array_equal(again.scores, t.scores)
    # An int seed is jax.random.key(seed); a raw uint32 key works too.
    a = synthetic_matrix(5, M, N, R)
    b = synthetic_matrix(jax.random.key(5), M, N, R)
    c = synthetic_matrix(jax.random.PRNGKey(5), M, N, R)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.scores, c.scores)
    assert not np.array_equal(a.scores, synthetic_matrix(6, M, N, R).scores)


def test_new_gap_or_scale_does_not_recompile():
    synthetic_matrix(jax.random.key(3), M, N, R, gap=0.05)
    before = _synthetic._synthetic._cache_size()
    for seed, g, ms in [(1, 0.01, 1.0), (2, 0.02, 1.5), (3, 0.1, 0.3)]:
        synthetic_matrix(seed, M, N, R, gap=g, model_scale=ms, difficulty_scale=ms)
    assert _synthetic._synthetic._cache_size() == before


def test_numpy_helper_returns_score_matrix_with_truth():
    sm = jaxeval.synthetic_score_matrix(seed=4, n_models=M, n_items=N, rank=R, gap=0.06)
    assert isinstance(sm, jaxeval.ScoreMatrix) and sm.shape == (M, N)
    assert sm.is_binary and sm.is_complete
    truth = sm.metadata["synthetic"]
    top, second = _top_two(sm.accuracy())
    assert top - second == pytest.approx(0.06, abs=1e-6) and truth["gap"] == pytest.approx(0.06)
    assert truth["probabilities"].shape == (M, N) and truth["params"]["rank"] == R
    assert sm.accuracy()[truth["best"]] == top


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(n_models=1), ValueError, "n_models: expected an integer >= 2, got 1"),
        (dict(n_items=2.5), TypeError, "n_items: expected an integer >= 1, got float 2.5"),
        (dict(rank=0), ValueError, "rank: expected an integer >= 1, got 0"),
        (dict(gap=1.5), ValueError, r"'gap' must lie in \[0, 1\], got 1.5"),
        (dict(graded=True, concentration=-1.0), ValueError, "'concentration' must be > 0"),
        (dict(graded="yes"), TypeError, "'graded' must be a bool"),
        (dict(gap="x"), TypeError, "'gap' must be a real number or array, got 'x'"),
        (dict(graded=True, concentration="x"), TypeError, "'concentration' must be a real"),
        (dict(model_scale=None), TypeError, "'model_scale' must be a real number"),
        (dict(n_candidates=2.5), TypeError, r"n_candidates: expected an integer in \[2, 5\]"),
        (dict(n_candidates=9), ValueError, r"n_candidates: expected an integer in \[2, 5\]"),
        # concrete scales out of range gave a normal-looking all-zero matrix (NaN) or a
        # mirrored one (negative)
        (dict(model_scale=float("nan")), ValueError, "'model_scale' must be finite and >= 0"),
        (dict(model_scale=-1.0), ValueError, "'model_scale' must be finite and >= 0"),
        (dict(item_scale=np.array([1.0, -1.0])), ValueError, "'item_scale' must be finite"),
        (dict(difficulty_scale=np.inf), ValueError, "'difficulty_scale' must be finite"),
        (dict(difficulty_mean=float("nan")), ValueError, "'difficulty_mean' must be finite, "),
    ],
)
def test_bad_arguments_refused(kwargs, error, match):
    """A value of the wrong type is a TypeError (as SyntheticSpec says), a value out of
    range a ValueError."""
    args = dict(n_models=5, n_items=10) | kwargs
    with pytest.raises(error, match=match):
        synthetic_matrix(0, **args)


def test_bad_helper_arguments_refused():
    with pytest.raises(TypeError, match=r"unknown arguments \['modelscale'\]"):
        synthetic_score_matrix(0, 5, 10, modelscale=2.0)
    with pytest.raises(TypeError, match="synthetic_score_matrix: seed: expected an integer >= 0, "
                                        "got float"):
        synthetic_score_matrix(0.5, 5, 10)
    with pytest.raises(TypeError, match="'key_or_seed': expected a non-negative int seed, a "
                       "PRNG key"):
        synthetic_matrix(jnp.zeros(3), 5, 10)
    with pytest.raises(ValueError, match=r"'key_or_seed': expected a non-negative int seed "
                       r"below 2\*\*63, got 9223372036854775808"):
        synthetic_matrix(2**63, 5, 10)
    with pytest.raises(ValueError, match="below 2\\*\\*63, got -1"):
        synthetic_matrix(jnp.int32(-1), 5, 10)
    with pytest.raises(TypeError, match="'key_or_seed': expected a non-negative int seed, a "
                       "PRNG key .*, got str 'x'"):
        synthetic_matrix("x", 5, 10)
    # the dtype given is named (not the int32 JAX would make of it without x64)
    with pytest.raises(TypeError, match=r"got dtype int64 and shape \(2,\)"):
        synthetic_matrix(np.array([0, 0], np.int64), 5, 10)
    with pytest.raises(TypeError, match=r"expected one PRNG key, got an array of keys of "
                       r"shape \(2,\)"):
        synthetic_matrix(jax.random.split(jax.random.key(0)), 5, 10)
    with pytest.raises(ValueError, match="'model_scale' must be finite and >= 0, got nan"):
        synthetic_score_matrix(0, 5, 10, model_scale=float("nan"))
    # a traced scale is the caller's to check: jit and vmap over scales still work
    acc = jax.vmap(lambda s: synthetic_matrix(0, 5, 10, model_scale=s).accuracy)(
        jnp.array([0.5, 1.0, 2.0]))
    assert acc.shape == (3, 5)


@pytest.mark.slow
@pytest.mark.parametrize("m, n, r", [(2, 7, 1), (5, 64, 2), (12, 333, 4), (50, 1000, 8)])
@pytest.mark.parametrize("graded", [False, True])
def test_gap_and_rank_grid(m, n, r, graded):
    keys = jax.random.split(jax.random.key(m * n + r), 16)
    gaps = jnp.linspace(0.0, 0.3, 16)
    f = jax.jit(jax.vmap(lambda k, g: synthetic_matrix(k, m, n, r, gap=g, graded=graded)))
    t = f(keys, gaps)
    s = np.asarray(t.scores, np.float64)
    ok = np.asarray(t.status) == OK
    assert ok.mean() > 0.5
    top, second = _top_two(s.sum(-1) if not graded else s.mean(-1))
    if graded:
        np.testing.assert_allclose((top - second)[ok], np.asarray(gaps)[ok], atol=3e-6)
    else:
        # the module's gap rule: gap * n rounded half up, at least one item when gap > 0
        g = np.asarray(gaps, np.float64)
        want = np.where(g > 0, np.maximum(np.floor(g * n + 0.5), 1), 0).astype(int)
        np.testing.assert_array_equal((top - second)[ok], want[ok])
    # Clipped replicates: the best row is all ones.
    np.testing.assert_allclose(top[~ok], 1.0 if graded else n, rtol=1e-6)
    if r < min(m, n):
        lg = np.einsum("bmr,bnr->bmn", np.asarray(t.U, np.float64), np.asarray(t.V, np.float64))
        sv = np.linalg.svd(lg, compute_uv=False)
        assert np.all(sv[:, r - 1] / sv[:, 0] > 1e-4) and np.all(sv[:, r] / sv[:, 0] < 1e-6)


def test_binary_gap_of_half_an_item_or_less_is_one_item():
    """gap * n = 0.5 rounded half to even made an exact tie for best (status OK); a gap
    > 0 now always leaves a unique best row: half up, at least one item."""
    for n, gap, items in ((100, 0.005, 1), (10, 0.05, 1), (20, 0.025, 1), (10, 0.25, 3),
                          (100, 0.001, 1), (10, 0.0, 0)):
        t = synthetic_matrix(0, 10, n, 2, gap=gap)
        counts = np.sort(np.asarray(t.scores).sum(1))
        assert counts[-1] - counts[-2] == items, (n, gap)
        assert float(t.gap) == pytest.approx(items / n) and int(t.status) == OK


def test_concentration_needs_graded_scores():
    with pytest.raises(ValueError, match="'concentration' shapes graded scores only"):
        synthetic_matrix(0, 5, 10, 2, concentration=5.0)
    with pytest.raises(ValueError, match="'concentration' shapes graded scores only"):
        synthetic_score_matrix(seed=0, n_models=5, n_items=10, concentration=5.0)
