"""Fifth mutation-review pass over the confidence sequences (_confseq) and their argument
checks: per-arm levels, masks that are traced or that hide a bad range, and what the
checks' messages say. Each test pins a documented behaviour that a plausible one-line slip
would change and that every other test lets pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_confseq import _random_terms, ref_betting, ref_eb, ref_hoeffding

from jaxeval import confseq


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_every_element_of_a_per_arm_alpha_is_checked(kind):
    """``alpha`` may be an array (one level per arm); a concrete one is refused when *any*
    element lies outside (0, 1), not only when all do, and the message shows the value
    given."""
    cs = confseq.get(kind, grid_size=8)
    st = cs.init((2,))
    for bad in ([0.05, 1.5], [0.0, 0.1], [0.2, float("nan")]):
        with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\), got \["):
            cs.update(st, 0.5, 0.0, 1.0, 0.5, bad)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\), got 1\.5$"):
        cs.update(st, 0.5, 0.0, 1.0, 0.5, 1.5)
    cs.update(st, 0.5, 0.0, 1.0, 0.5, [0.05, 0.999])  # every element inside: fine


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_a_per_arm_alpha_gives_each_arm_its_own_level(kind):
    """A ``[K]`` alpha broadcasts over a ``[K]`` state: each arm's bounds are those of a
    scalar run at its own level (the float64 references), so arms with a smaller alpha
    get wider intervals."""
    t = 60  # a fixed range [0, 1]: the bounds come from the sequence, not from the range
    ys = (np.random.default_rng(4).uniform(size=t) < 0.6).astype(np.float64)
    los, his, ms = np.zeros(t), np.ones(t), np.full(t, 0.5)
    alphas = np.array([0.01, 0.3], np.float32)
    cs = confseq.get(kind, grid_size=16)
    st = cs.init((2,))
    got = []
    for y, lo, hi, m in zip(ys, los, his, ms):
        st = cs.update(st, jnp.full(2, y, jnp.float32), jnp.float32(lo), jnp.float32(hi),
                       jnp.float32(m), jnp.asarray(alphas))
        got.append(np.stack([np.asarray(b) for b in cs.bounds(st)], axis=-1))
    got = np.stack(got, axis=1)  # [arm, time, (lower, upper)]
    for i, a in enumerate(alphas.astype(np.float64)):
        if kind == "eb":
            want = ref_eb(ys, los, his, ms, a)
        elif kind == "hoeffding":
            want = ref_hoeffding(ys, los, his, a)
        else:
            want = ref_betting(ys, los, his, ms, a, 16)
        np.testing.assert_allclose(got[i], want, atol=2e-4, err_msg=str(a))
    width = (got[..., 1] - got[..., 0]).sum(axis=1)
    assert width[0] > width[1] + 0.1, width


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_a_reversed_range_on_an_inactive_element_is_not_looked_at(kind):
    """Inactive elements are left unchanged and not checked: a reversed range there (e.g.
    the stale range of an arm the loop does not pull) is no error, while the same range
    on an active element is refused, and the message gives ``lo`` and ``hi`` as passed."""
    cs = confseq.get(kind, grid_size=8)
    st = cs.init((2,))
    lo, hi = jnp.array([0.0, 0.9]), jnp.array([1.0, 0.1])
    new = cs.update(st, 0.5, lo, hi, 0.5, 0.1, active=jnp.array([True, False]))
    assert int(new.count[1]) == 0 and int(new.count[0]) == 1
    with pytest.raises(ValueError, match=r"lo <= hi .*got lo=Array\(\[0\. , 0\.9\]"):
        cs.update(st, 0.5, lo, hi, 0.5, 0.1, active=jnp.array([False, True]))
    with pytest.raises(ValueError, match=r"every range needs lo <= hi .*got lo=1\.0, hi=0\.0$"):
        cs.update(st, 0.5, 1.0, 0.0, 0.5, 0.1)


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_a_traced_mask_leaves_concrete_terms_unchecked(kind):
    """A traced ``active`` (the loop's mask under ``jit``) cannot say which elements are
    looked at, so concrete terms are then not checked: an out-of-range term on the element
    the mask turns off is no error, and that element stays unchanged."""
    cs = confseq.get(kind, grid_size=8)
    y = jnp.array([0.5, 7.0])  # closed over: concrete inside the jit

    @jax.jit
    def step(st, act):
        return cs.update(st, y, 0.0, 1.0, 0.5, 0.1, act)

    new = step(cs.init((2,)), jnp.array([True, False]))
    np.testing.assert_array_equal(np.asarray(new.count), [1, 0])
    np.testing.assert_array_equal(np.asarray(cs.bounds(new)[0])[1], 0.0)


def test_betting_kinds_differ_for_nearby_truncations():
    """``get`` returns the same object for the same arguments only: truncations 0.11 and
    0.14 are different kinds, each following the float64 reference at its own cap."""
    ys, los, his, ms = _random_terms(0, t=40)
    a = confseq.get("betting", grid_size=16, truncation=0.11)
    b = confseq.get("betting", grid_size=16, truncation=0.14)
    assert a is not b
    for cs, tr in ((a, 0.11), (b, 0.14)):
        st = cs.init(())
        for y, lo, hi, m in zip(ys, los, his, ms):
            st = cs.update(st, jnp.float32(y), jnp.float32(lo), jnp.float32(hi),
                           jnp.float32(m), jnp.float32(0.1))
        want = ref_betting(ys, los, his, ms, 0.1, 16, trunc=tr)[-1]
        np.testing.assert_allclose([float(x) for x in cs.bounds(st)], want, atol=2e-4)


def test_finalize_refuses_a_per_arm_margin_with_one_negative_element():
    """The margin may be per arm; a concrete one is refused when any element is negative
    (that arm's interval would have its lower end above its upper end)."""
    st = confseq.get("eb").init((2,))
    with pytest.raises(ValueError, match=r"^confseq.finalize: margin must be >= 0"):
        confseq.finalize(st, [0.5, 0.5], [True, True], np.array([0.01, -0.01]))
    out = confseq.finalize(st, [0.5, 0.5], [True, True], np.array([0.01, 0.0]))
    np.testing.assert_allclose(np.asarray(out.upper) - np.asarray(out.lower), [0.02, 0.0],
                               atol=1e-7)


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_finalize_keeps_the_state_dtypes_under_x64(kind):
    """float64 exact values under x64 (a mean computed in float64) do not widen the
    state's bounds: a ``lax.scan`` carry refuses a state whose dtype changed."""
    with jax.enable_x64(True):
        cs = confseq.get(kind, grid_size=8)
        st = cs.init((2,))
        fin = cs.finalize(st, np.array([0.3, 0.6]), np.array([True, False]), np.float64(1e-3))
        assert jax.tree.map(lambda a: a.dtype, fin) == jax.tree.map(lambda a: a.dtype, st)
        np.testing.assert_allclose(np.asarray(fin.upper), [0.301, 1.0], atol=1e-7)


def test_betting_capital_stays_finite_on_a_rounding_residue_at_a_grid_edge():
    """A term a rounding residue (within ``NUM_TOL``, so accepted) outside a tiny range
    whose end is a grid edge, with the centre at the other end: the capped bet on the
    cell that ends there is huge, and ``1 + l (y - e)`` would be negative (log NaN). The
    clamp keeps every capital finite, on both sides, and the bounds hold the range."""
    cs = confseq.get("betting", grid_size=8)
    w = np.float32(2.0**-20)
    lo = jnp.array([0.5, 0.5 - w], jnp.float32)  # lower end / upper end on the edge 0.5
    hi = lo + w
    y = jnp.array([0.5 - 5e-6, 0.5 + 5e-6], jnp.float32)
    m = jnp.array([float(hi[0]), float(lo[1])], jnp.float32)
    st = cs.init((2,))
    for _ in range(3):
        st = cs.update(st, y, lo, hi, m, jnp.float32(0.1))
    for name, leaf in st._asdict().items():
        assert bool(jnp.all(jnp.isfinite(leaf))), name
    lower, upper = (np.asarray(b) for b in cs.bounds(st))
    assert np.all(lower <= np.asarray(lo)) and np.all(upper >= np.asarray(hi))


@pytest.mark.parametrize("kind", confseq.KINDS)
def test_a_nan_range_end_is_refused_as_a_range(kind):
    """A NaN ``lo`` or ``hi`` is refused by the range check, whose message says so (a NaN
    or a reversed range), rather than reported as a term outside its range."""
    cs = confseq.get(kind, grid_size=8)
    st = cs.init((2,))
    for lo, hi in ((float("nan"), 1.0), (0.0, float("nan"))):
        with pytest.raises(ValueError, match=r"every range needs lo <= hi \(a NaN"):
            cs.update(st, 0.5, lo, hi, 0.5, 0.1)


def test_a_mask_over_scalar_terms_still_checks_them():
    """Scalar y, lo, hi over a [K] state with a [K] mask: the active elements are
    checked as without the mask (the mask's broadcast failed and nothing was checked)."""
    cs = confseq.get("eb")
    st = cs.init((2,))
    on = jnp.array([True, False])
    with pytest.raises(ValueError, match="each term y must lie in its range"):
        cs.update(st, 7.0, 0.0, 1.0, 0.5, 0.1, active=on)
    with pytest.raises(ValueError, match="every range needs lo <= hi"):
        cs.update(st, 0.5, 1.0, 0.0, 0.5, 0.1, active=on)
    cs.update(st, 7.0, 0.0, 1.0, 0.5, 0.1, active=jnp.array([False, False]))  # (inactive)
