"""The public interval modules (jaxeval.confseq, jaxeval.estimators) and the checks of a
confidence sequence's concrete arguments."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval import _confseq, _estimators, confseq, estimators


def test_the_public_modules_are_the_kernels_the_identification_loop_uses():
    assert set(confseq.__all__) == set(_confseq.__all__)
    assert set(estimators.__all__) == set(_estimators.__all__)
    for mod, priv in ((confseq, _confseq), (estimators, _estimators)):
        for name in mod.__all__:
            assert getattr(mod, name) is getattr(priv, name)
    assert jaxeval.confseq is confseq and jaxeval.estimators is estimators


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_concrete_arguments_no_sequence_can_take_are_refused(kind):
    """alpha 0, 1.5, -0.1 or NaN gave NaN bounds (or lower > upper) without a word; a
    term outside its range or a reversed range broke the validity silently."""
    cs = confseq.get(kind)
    st = cs.init((2,))
    for alpha in (0.0, 1.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="alpha must lie in \\(0, 1\\)"):
            cs.update(st, 0.5, 0.0, 1.0, 0.5, alpha)
    with pytest.raises(ValueError, match=r"at \(1,\): y=1.5, range \[0.0, 1.0\]"):
        cs.update(st, jnp.array([0.5, 1.5]), 0.0, 1.0, 0.5, 0.1)
    with pytest.raises(ValueError, match=r"y=nan"):
        cs.update(st, jnp.array([0.5, jnp.nan]), 0.0, 1.0, 0.5, 0.1)
    with pytest.raises(ValueError, match="every range needs lo <= hi"):
        cs.update(st, 0.5, 1.0, 0.0, 0.5, 0.1)
    # an inactive element is not looked at (a loop updating one arm of a [K] state)
    new = cs.update(st, jnp.array([0.5, 7.0]), 0.0, 1.0, 0.5, 0.1,
                    active=jnp.array([True, False]))
    np.testing.assert_array_equal(np.asarray(cs.bounds(new)[0])[1], 0.0)
    # a rounding residue past a range end is a term in range; traced values are not checked
    cs.update(st, 1.0 + 1e-6, 0.0, 1.0, 0.5, 0.1)
    jax.jit(cs.update)(st, 0.5, 0.0, 1.0, 0.5, 0.1)


def test_checked_updates_give_the_unchecked_kernels_numbers():
    """The check only looks: every kind's bounds are the raw update's, bit for bit."""
    rng = np.random.default_rng(0)
    y = rng.random((30, 3)).astype(np.float32)
    for kind in confseq.KINDS:
        cs = confseq.get(kind)
        raw = cs.update.__wrapped__  # (functools.wraps keeps it)
        a = b = cs.init((3,))
        for t in range(30):
            a = cs.update(a, y[t], 0.0, 1.0, 0.5, 0.05)
            b = raw(b, y[t], 0.0, 1.0, 0.5, 0.05)
        for x, z in zip(cs.bounds(a), cs.bounds(b)):
            np.testing.assert_array_equal(x, z)


def test_a_dr_confidence_sequence_covers_a_finite_population_mean():
    """Exact over every draw order of a small population (all equally likely without
    replacement): the EB sequence over the DR terms with poor predictions holds the
    population mean at every time in at least 1 - alpha of the orders."""
    s = jnp.array([1, 0, 1, 1, 0, 1], jnp.float32)
    pred = jnp.full(6, 0.3, jnp.float32)
    n, theta, alpha = 6, float(s.mean()), 0.2
    cs = confseq.get("eb")
    orders = np.array(list(itertools.permutations(range(n))))

    def run(order):
        st = cs.init()
        seen = jnp.zeros(n, bool)
        ever_out = jnp.array(False)
        for t in range(n - 1):
            j = order[t]
            sum_obs = jnp.sum(jnp.where(seen, s, 0.0))
            sum_pred = jnp.sum(jnp.where(seen, 0.0, pred))
            y = estimators.dr_term(sum_obs, sum_pred, n - t, s[j], pred[j], 1.0, n)
            lo, hi = estimators.dr_range(sum_obs, sum_pred, n - t, 0.3, 0.3, 1.0, n)
            st = cs.update(st, y, lo, hi, 0.5, alpha)
            lower, upper = cs.bounds(st)
            ever_out = ever_out | (lower > theta) | (upper < theta)
            seen = seen.at[j].set(True)
        return ever_out

    out = np.asarray(jax.jit(jax.vmap(run))(jnp.asarray(orders)))
    assert out.mean() <= alpha, out.mean()


def test_states_keep_their_dtypes_under_x64_in_a_scan():
    """float64 terms under x64 widened a confidence sequence's sums and the lambda
    statistics to float64, so a ``lax.scan`` over updates refused its carry."""
    y = np.linspace(0.1, 0.9, 12)  # float64
    with jax.enable_x64(True):
        for kind in confseq.KINDS:
            cs = confseq.get(kind)
            init = cs.init((2,))

            def step(st, v, cs=cs):
                return cs.update(st, jnp.full(2, v), 0.0, 1.0, 0.5, 0.05), None

            out, _ = jax.lax.scan(step, init, jnp.asarray(y))
            assert jax.tree.map(lambda a: a.dtype, out) == jax.tree.map(lambda a: a.dtype, init)

        def lam_step(st, v):
            return estimators.lambda_stats_update(st, v, 1.0 - v), None

        init = estimators.lambda_stats_init()
        out, _ = jax.lax.scan(lam_step, init, jnp.asarray(y))
        assert jax.tree.map(lambda a: a.dtype, out) == jax.tree.map(lambda a: a.dtype, init)
        assert int(out.count) == 12


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_an_arm_mask_applies_to_the_leading_axis_as_update_applies_it(kind):
    """A [K] mask of [K, M] terms masks arms (rows), as the update does; the check read it
    against the trailing axis (columns), refusing a valid call or checking nothing."""
    cs = confseq.get(kind)
    st = cs.init((2, 3))
    y = jnp.array([[0.5, 0.5, 0.5], [5.0, 5.0, 5.0]])  # row 1 inactive: not looked at
    new = cs.update(st, y, 0.0, 1.0, 0.5, 0.05, jnp.array([True, False]))
    np.testing.assert_array_equal(np.asarray(cs.bounds(new)[0])[1], 0.0)
    with pytest.raises(ValueError, match=r"at \(1, 0\): y=5.0"):
        cs.update(st, y, 0.0, 1.0, 0.5, 0.05, jnp.array([False, True]))
