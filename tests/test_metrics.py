"""Metrics against scipy/numpy references, jitted and vmapped."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxeval import metrics

tau_jit = jax.jit(metrics.kendall_tau_b)


def test_mae_pp_matches_numpy():
    rng = np.random.default_rng(0)
    p, t = rng.random((7, 30)), rng.random((7, 30))
    got = jax.jit(metrics.mae_pp)(p, t)
    assert got.dtype == jnp.float32 and got.shape == ()
    np.testing.assert_allclose(got, 100 * np.abs(p - t).mean(), rtol=1e-5)
    per_row = jax.jit(metrics.mae_pp, static_argnames="axis")(p, t, axis=-1)
    np.testing.assert_allclose(per_row, 100 * np.abs(p - t).mean(-1), rtol=1e-5)


@pytest.mark.parametrize("n, levels", [(2, 2), (5, 2), (40, 3), (200, 5), (300, 1000), (1500, 7)])
def test_kendall_tau_b_equals_scipy_with_ties(n, levels):
    rng = np.random.default_rng(n * 31 + levels)
    for _ in range(3):
        x = rng.integers(0, levels, n).astype(np.float32)
        y = (x + rng.integers(0, levels, n)).astype(np.float32) * rng.choice([-1, 1])
        want = stats.kendalltau(x, y).statistic
        got = float(tau_jit(x, y))
        if np.isnan(want):
            assert np.isnan(got)
        else:
            assert got == pytest.approx(want, abs=2e-6)


def test_kendall_tau_b_graded_accuracies_with_ties():
    # Accuracies on a 50-item benchmark: many exact ties, like real evaluation output.
    rng = np.random.default_rng(3)
    true = rng.binomial(50, 0.6, 250) / 50
    pred = np.round(true + rng.normal(0, 0.05, 250), 2)
    assert float(tau_jit(pred, true)) == pytest.approx(
        stats.kendalltau(pred, true).statistic, abs=2e-6
    )


def test_kendall_tau_b_degenerate_cases_are_nan_like_scipy():
    assert np.isnan(float(tau_jit(np.ones(5), np.arange(5.0))))  # constant x
    assert np.isnan(float(tau_jit(np.arange(1.0), np.arange(1.0))))  # n = 1
    x = np.array([1.0, np.nan, 3.0])
    assert np.isnan(float(tau_jit(x, np.arange(3.0))))
    assert float(tau_jit(np.arange(6.0), np.arange(6.0)[::-1])) == -1.0


def test_kendall_tau_b_vmaps_over_replicates():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, (16, 60)).astype(np.float32)
    y = rng.integers(0, 4, (16, 60)).astype(np.float32)
    got = jax.jit(jax.vmap(metrics.kendall_tau_b))(x, y)
    want = [stats.kendalltau(a, b).statistic for a, b in zip(x, y)]
    np.testing.assert_allclose(got, want, atol=2e-6)
    # Leading axes also broadcast directly.
    np.testing.assert_allclose(tau_jit(x, y), want, atol=2e-6)


def test_best_arms_and_identification_with_ties():
    true = jnp.array([[0.5, 0.7, 0.7, 0.1], [0.9, 0.2, 0.3, 0.89]])
    assert metrics.best_arms(true).tolist() == [
        [False, True, True, False],
        [True, False, False, False],
    ]
    assert metrics.best_arms(true, atol=0.02)[1].tolist() == [True, False, False, True]
    rec = jnp.array([[1, 2, 0, -1, 4], [0, 3, 3, 0, 0]]).T  # [5 replicates, 2 problems]
    truth = jnp.broadcast_to(true, (5, 2, 4))
    ok = jax.jit(metrics.identification_correct)(rec, truth)
    assert ok.tolist() == [[True, True], [True, False], [False, False], [False, True],
                           [False, True]]
    acc = jax.jit(metrics.identification_accuracy)(rec, truth)
    assert float(acc) == pytest.approx(5 / 10)
    # Shared truth broadcasts against many replicates.
    ok_b = metrics.identification_correct(jnp.array([0, 1, 2, 3]), true[0])
    assert ok_b.tolist() == [False, True, True, False]


def test_equal_means_rounded_apart_in_float32_are_ties():
    """Two permutations of one graded row have the same accuracy, but their float32
    means can differ in the last bit: both are a true best (as in the reports)."""
    import jaxeval
    from jaxeval._report import true_best

    rng = np.random.default_rng(3)
    for _ in range(200):
        row = rng.uniform(size=541).astype(np.float32)
        theta = jnp.stack([jnp.mean(jnp.asarray(row)), jnp.mean(jnp.asarray(rng.permutation(row)))])
        if theta[0] != theta[1]:
            break
    else:
        pytest.skip("no pair rounded apart")
    assert metrics.best_arms(theta).tolist() == [True, True]
    assert float(metrics.identification_accuracy(jnp.array([0, 1]), theta[None, :])) == 1.0
    assert true_best(np.asarray(theta)[None, :]).tolist() == [[True, True]]
    assert metrics.best_arms(theta, atol=0.0).sum() == 1  # exact ties only, on request
    assert jaxeval.metrics.TIE_ATOL == 1e-6


def test_identification_accuracy_matches_numpy_reference():
    rng = np.random.default_rng(11)
    true = rng.binomial(20, 0.5, (400, 6)) / 20  # frequent ties
    rec = rng.integers(0, 6, 400)
    want = np.mean(true[np.arange(400), rec] == true.max(1))
    assert float(metrics.identification_accuracy(rec, true)) == pytest.approx(want)


def test_coverage_per_arm_and_family_wise():
    rng = np.random.default_rng(2)
    lo = rng.random((100, 5)) * 0.5
    hi = lo + rng.random((100, 5)) * 0.5
    truth = rng.random((100, 5))
    per_arm, fw = jax.jit(metrics.coverage)(lo, hi, truth)
    want = (lo <= truth) & (truth <= hi)
    assert per_arm.dtype == jnp.bool_ and fw.shape == (100,)
    np.testing.assert_array_equal(per_arm, want)
    np.testing.assert_array_equal(fw, want.all(1))
    # Closed interval at the ends; NaN never covers.
    p, f = metrics.coverage(jnp.array([0.2, jnp.nan]), jnp.array([0.2, 1.0]), jnp.array([0.2, 0.5]))
    assert p.tolist() == [True, False] and not bool(f)


def test_where_masks_equal_the_subset():
    rng = np.random.default_rng(8)
    x = rng.integers(0, 5, (6, 40)).astype(np.float32)
    y = (x + rng.integers(0, 3, (6, 40))).astype(np.float32)
    w = rng.random((6, 40)) < 0.6
    x_pad = np.where(w, x, np.nan)  # NaN in masked-out slots must not leak
    got = jax.jit(metrics.kendall_tau_b)(x_pad, y, w)
    want = [stats.kendalltau(a[m], b[m]).statistic for a, b, m in zip(x, y, w)]
    np.testing.assert_allclose(got, want, atol=2e-6)
    mae = jax.jit(metrics.mae_pp, static_argnames="axis")(x / 5, y / 8, axis=-1, where=w)
    want = [100 * np.abs(a[m] / 5 - b[m] / 8).mean() for a, b, m in zip(x, y, w)]
    np.testing.assert_allclose(mae, want, rtol=1e-5)


def test_new_atol_or_data_does_not_recompile():
    f = jax.jit(metrics.identification_accuracy)
    true = jnp.array([[0.5, 0.7, 0.69]])
    assert float(f(jnp.array([2]), true, 0.0)) == 0.0
    size = f._cache_size()  # jit caches are shared per function: compare, not count
    assert float(f(jnp.array([2]), true, 0.02)) == 1.0
    assert float(f(jnp.array([0]), true * 0.5, 0.3)) == 1.0
    assert f._cache_size() == size


def test_kendall_tau_b_compares_in_float32_unless_x64():
    """Documented: values closer than float32 resolves are ties by default; with x64 the
    float64 inputs are compared exactly (scipy's answer)."""
    x = np.array([0.1, 0.1 + 1e-9, 0.3, 0.7])
    y = np.array([1.0, 2.0, 3.0, 4.0])
    exact = stats.kendalltau(x, y).statistic
    assert exact == 1.0
    assert float(metrics.kendall_tau_b(x, y)) == pytest.approx(
        stats.kendalltau(x.astype(np.float32), y).statistic, abs=1e-6)
    # integers are compared exactly, never through a float cast (2**24 + 1 is not a float32)
    ints = np.array([2**24, 2**24 + 1, 2**25], np.int32)
    assert float(metrics.kendall_tau_b(ints, np.arange(3.0))) == pytest.approx(1.0)
    assert float(metrics.kendall_tau_b(np.array([True, False, True]), np.arange(3))) == \
        pytest.approx(stats.kendalltau([1, 0, 1], [0, 1, 2]).statistic, abs=1e-6)
    with jax.enable_x64(True):
        assert float(metrics.kendall_tau_b(x, y)) == pytest.approx(exact, abs=1e-12)
        big = np.array([10**17, 10**17 + 1, 2 * 10**17], np.int64)
        assert float(metrics.kendall_tau_b(big, np.arange(3.0, dtype=np.float32))) == \
            pytest.approx(1.0)


def test_identification_correct_refuses_float_recommendations():
    """A float recommendation was truncated (NaN became arm 0 and counted as right);
    an integer past int32 wrapped onto an arm. Now: floats refused, such an integer
    out of range (wrong), as the docstring says."""
    truth = jnp.array([0.9, 0.1])
    for rec in (jnp.array([np.nan]), jnp.array([0.9]), np.array([0.0])):
        with pytest.raises(TypeError, match="recommended: expected integer arm indices"):
            metrics.identification_correct(rec, truth)
    assert metrics.identification_correct(np.array([2**32, 0, -1]), truth).tolist() == [
        False, True, False]
    assert metrics.identification_correct([0], truth).tolist() == [True]


def test_identification_correct_review_follow_ups():
    """An empty selection is an empty result; bools and huge Python ints are refused by
    name; under x64 a JAX index past int32 is wrong (not wrapped onto an arm)."""
    truth = jnp.array([0.9, 0.1])
    assert metrics.identification_correct([], truth).shape == (0,)
    with pytest.raises(TypeError, match=r"got dtype bool \(a bool is not an arm\)"):
        metrics.identification_correct([True], truth)
    with pytest.raises(TypeError, match=r"got dtype object \(Python ints beyond 64 bits"):
        metrics.identification_correct([2**70], truth)
    # narrow and unsigned dtypes, plain and jitted (the int32 bound wrapped in int8)
    for dt in (jnp.int8, jnp.int16, jnp.uint8, jnp.uint32, jnp.int32):
        rec = jnp.array([1, 0], dt)
        t3 = jnp.array([0.1, 0.9, 0.2])
        assert metrics.identification_correct(rec, t3).tolist() == [True, False], dt
        assert jax.jit(metrics.identification_correct)(rec, t3).tolist() == [True, False]
    assert metrics.identification_correct(jnp.array([2**32 - 1], jnp.uint32), truth).tolist() \
        == [False]
    with jax.enable_x64(True):
        rec = jnp.array([2**32, 0], jnp.int64)
        assert metrics.identification_correct(rec, truth).tolist() == [False, True]


def test_best_arms_of_integer_scores():
    """Unsigned scores: top - atol wrapped around and no arm was best."""
    assert metrics.best_arms(np.array([0, 1], np.uint8), atol=2).tolist() == [True, True]
    assert metrics.best_arms(np.array([0, 3], np.uint8), atol=1).tolist() == [False, True]
    assert metrics.best_arms(jnp.array([2, 5, 5], jnp.int32)).tolist() == [False, True, True]


def test_mismatched_shapes_are_named():
    """Shapes that do not agree failed deep inside JAX ("Incompatible shapes for
    broadcasting"), naming no argument."""
    from jaxeval.metrics import coverage, kendall_tau_b, mae_pp

    with pytest.raises(ValueError, match=r"mae_pp: shapes do not broadcast together: "
                       r"pred \(3,\), true \(4,\)"):
        mae_pp(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match=r"kendall_tau_b: x and y must have the same shape"):
        kendall_tau_b(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match=r"kendall_tau_b: shapes .* where \(5,\)"):
        kendall_tau_b(np.ones(3), np.ones(3), where=np.ones(5, bool))
    with pytest.raises(ValueError, match=r"coverage: shapes .* truth \(2,\)"):
        coverage(np.zeros(3), np.ones(3), np.ones(2))
    # broadcasting that agrees still works, jitted too
    assert float(jax.jit(mae_pp)(jnp.ones((2, 3)), jnp.zeros(3))) == pytest.approx(100.0)
