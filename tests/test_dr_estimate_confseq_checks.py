"""Argument checks of ``anchors.dr_estimate`` (concrete values refused by name, traced ones
unchecked) and of the confidence sequences' ``update`` on ``center``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import confseq
from jaxeval.anchors import dr_estimate

P = jnp.array([0.5, 0.4, 0.6, 0.5, 0.3, 0.7])
A = jnp.array([0])
AS = jnp.array([1.0])
S = jnp.array([1, 2])
SS = jnp.array([1.0, 0.0])


def _args(**kw):
    a = dict(preds=P, anchors=A, anchor_scores=AS, sample=S, sample_scores=SS, alpha=0.1,
             interval="betting")
    a.update(kw)
    return a


@pytest.mark.parametrize("kw, match", [
    (dict(alpha=1.5), r"^dr_estimate: alpha must lie in \(0, 1\), got 1.5"),
    (dict(alpha=0.0), r"^dr_estimate: alpha"),
    (dict(alpha=-0.1), r"^dr_estimate: alpha"),
    (dict(alpha=jnp.float32(jnp.nan)), r"^dr_estimate: alpha"),
    (dict(anchors=jnp.array([9])), r"^dr_estimate: anchors: item indices must lie in "
                                   r"\[-6, 6\) \(the items of preds\), got \[9\]"),
    (dict(anchors=jnp.array([-7])), r"^dr_estimate: anchors: item indices"),
    (dict(anchors=jnp.array([0, 0]), anchor_scores=jnp.array([1.0, 1.0])),
     r"^dr_estimate: anchors: expected distinct items"),
    (dict(sample=jnp.array([0, 2])), r"^dr_estimate: sample: expected non-anchor items, got "
                                     r"the anchor\(s\) \[0\]"),
    (dict(sample=jnp.array([2, 2])), r"^dr_estimate: sample: expected distinct items, got "
                                     r"\[2\] more than once"),
    (dict(sample=jnp.array([2, -4])), r"^dr_estimate: sample: expected distinct items"),
    (dict(sample=jnp.array([-6, 3])), r"^dr_estimate: sample: expected non-anchor items"),
    (dict(sample=jnp.array([2, 6])), r"^dr_estimate: sample: item indices must lie in"),
    (dict(anchor_scores=jnp.array([1.0, 0.0])), r"^dr_estimate: anchor_scores: expected one "
                                                r"score per item of anchors"),
    (dict(sample_scores=jnp.array([1.0])), r"^dr_estimate: sample_scores: expected one"),
    (dict(sample_scores=jnp.array([jnp.nan, 0.0])), r"^dr_estimate: sample_scores must lie "
                                                    r"in \[0, 1\], got nan at index 0"),
    (dict(sample_scores=jnp.array([1.0, -0.5])), r"^dr_estimate: sample_scores must lie"),
    (dict(anchor_scores=jnp.array([2.0])), r"^dr_estimate: anchor_scores must lie"),
    (dict(preds=P.at[3].set(1.2)), r"^dr_estimate: preds must lie in \[0, 1\]"),
    (dict(preds=P.at[3].set(jnp.nan)), r"^dr_estimate: preds must lie"),
    (dict(preds=P[None]), r"^dr_estimate: preds: expected a 1-d array"),
    (dict(interval="hoeffding"), r"^dr_estimate: interval must be 'betting' or 'serfling'"),
])
def test_dr_estimate_refuses_concrete_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        dr_estimate(**_args(**kw))


def test_dr_estimate_alpha_1_5_was_an_interval_missing_its_estimate():
    # (the walk's case: the interval (0.666, 0.81) did not contain the estimate 0.5833)
    p = jnp.full(6, 0.5)
    with pytest.raises(ValueError, match="alpha"):
        dr_estimate(p, A, AS, S, SS, 1.5)


# values of the unchecked arithmetic on valid input (the code before the checks): n = 40,
# anchors 0..4, 18 sampled items, alpha = 0.1
_N = 40
_P40 = jnp.asarray(np.linspace(0.1, 0.9, _N), jnp.float32)
_S40 = (jnp.arange(_N) % 3 == 0).astype(jnp.float32)
_A40, _SAMP40 = jnp.arange(5), jnp.arange(5, 40, 2)
_BEFORE = {
    "betting": (0.34166664, 0.20278868, 0.56704068),
    "serfling": (0.34166664, 0.199999, 0.625001),  # (clipped to the certain bounds)
}


@pytest.mark.parametrize("interval", ["betting", "serfling"])
def test_dr_estimate_jit_and_vmap_give_the_unchecked_numbers(interval):
    args = (_P40, _A40, _S40[_A40], _SAMP40, _S40[_SAMP40])
    eager = dr_estimate(*args, 0.1, interval)
    np.testing.assert_allclose(np.array(eager), _BEFORE[interval], rtol=1e-6)
    jitted = jax.jit(lambda *a: dr_estimate(*a, interval=interval))(*args, 0.1)
    np.testing.assert_allclose(np.array(jitted), np.array(eager), rtol=1e-6)  # (fusion)
    # vmapped over two rows (one traced alpha each): the same numbers row by row
    p2 = jnp.flip(_P40)
    out = jax.vmap(lambda q, a: dr_estimate(q, *args[1:], a, interval))(
        jnp.stack([_P40, p2]), jnp.array([0.1, 0.2]))
    for i, (q, a) in enumerate(((_P40, 0.1), (p2, 0.2))):
        np.testing.assert_allclose(np.array([o[i] for o in out]),
                                   np.array(dr_estimate(q, *args[1:], a, interval)),
                                   rtol=1e-6, atol=1e-7)


def test_dr_estimate_traced_values_are_not_checked():
    # under jit/vmap a bad alpha or index is the caller's: numbers come back, no error
    p = jnp.full(6, 0.5)
    est, lo, hi = jax.vmap(lambda a: dr_estimate(p, A, AS, S, SS, a))(jnp.array([0.1, 1.5]))
    assert np.all(np.isfinite(np.array([est, lo, hi])))
    jax.jit(dr_estimate)(p, jnp.array([9]), AS, S, SS)


# --------------------------------------------------------------------------------------------
# confseq update: center


@pytest.mark.parametrize("kind", ["eb", "betting"])
@pytest.mark.parametrize("center", [jnp.nan, jnp.inf, -jnp.inf])
def test_update_refuses_a_non_finite_center(kind, center):
    cs = confseq.get(kind)
    with pytest.raises(ValueError, match=r"^confseq update: center must be finite"):
        cs.update(cs.init(), 1.0, 0.0, 1.0, center, 0.05)


@pytest.mark.parametrize("kind", ["eb", "betting"])
def test_update_checks_center_only_where_active(kind):
    cs = confseq.get(kind)
    st = cs.init((2,))
    c = jnp.array([0.5, jnp.nan])
    new = cs.update(st, 1.0, 0.0, 1.0, c, 0.05, jnp.array([True, False]))
    assert np.all(np.isfinite(np.array(new.lower)))
    with pytest.raises(ValueError, match=r"center must be finite.*at \(1,\): center=nan"):
        cs.update(st, 1.0, 0.0, 1.0, c, 0.05, jnp.array([False, True]))
    with pytest.raises(ValueError, match="center"):  # checked even when y is traced
        jax.vmap(lambda y: cs.update(st, y, 0.0, 1.0, c, 0.05))(jnp.ones((3, 2)))


def test_update_hoeffding_ignores_center_and_a_finite_centre_outside_the_range_is_taken():
    cs = confseq.get("hoeffding")  # (its centre is unused: nothing to refuse)
    lo, hi = cs.bounds(cs.update(cs.init(), 1.0, 0.0, 1.0, jnp.nan, 0.05))
    assert np.isfinite(float(lo)) and np.isfinite(float(hi))
    for kind in ("eb", "betting"):  # (validity holds for any predictable centre)
        cs = confseq.get(kind)
        lo, hi = cs.bounds(cs.update(cs.init(), 1.0, 0.0, 1.0, 2.0, 0.05))
        assert 0.0 <= float(lo) <= float(hi) <= 1.0


@pytest.mark.parametrize("kind", ["eb", "hoeffding", "betting"])
def test_update_under_jit_and_vmap_gives_the_unchecked_numbers(kind):
    cs = confseq.get(kind)
    ys = jnp.array([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])

    def run(y, c, a):
        st = cs.init()
        for t in range(y.shape[0]):
            st = cs.update(st, y[t], 0.0, 1.0, c, a)
        return cs.bounds(st)

    eager = [run(y, 0.5, 0.3) for y in ys]
    jitted = [jax.jit(run)(y, 0.5, 0.3) for y in ys]
    vm = jax.vmap(run, in_axes=(0, None, None))(ys, 0.5, 0.3)
    for i in range(2):
        np.testing.assert_allclose(np.array(jitted[i]), np.array(eager[i]), rtol=1e-6)
        np.testing.assert_allclose(np.array([v[i] for v in vm]), np.array(eager[i]), rtol=1e-6)
    # a traced NaN centre is not checked (the caller's)
    jax.jit(run)(ys[0], jnp.nan, 0.3)



# ------------------------------------------------ a read of the checks found (fixed)
def test_dr_estimate_float_indices_are_a_type_error():
    with pytest.raises(TypeError, match=r"^dr_estimate: anchors: expected integer item "
                                        r"indices, got dtype float32"):
        dr_estimate(**_args(anchors=jnp.array([0.0])))


def test_dr_estimate_takes_rounding_above_1_negative_indices_and_nan_at_anchors():
    """Predictions a float32 average puts just above 1 were refused eagerly and taken
    under jit; a prediction at an anchor is never read (NaN there is fine); negative
    indices count from the end, as before the checks."""
    base = dr_estimate(**_args())
    near = dr_estimate(**_args(preds=P.at[3].set(jnp.float32(1.0000001))))
    assert np.all(np.isfinite(np.asarray(near)))
    same = dr_estimate(**_args(preds=P.at[0].set(jnp.nan)))  # (anchor 0)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(base))
    neg = dr_estimate(**_args(anchors=A - 6, sample=S - 6))
    np.testing.assert_allclose(np.asarray(neg), np.asarray(base), rtol=1e-6)
    with pytest.raises(ValueError, match="preds must lie in"):
        dr_estimate(**_args(preds=P.at[3].set(1.001)))


def test_a_center_varying_along_the_last_axis_is_checked_under_a_mask():
    """A [K, M] state, an [M] centre and a [K] mask: the centre broadcasts on trailing
    axes as update does (the check aligned it with the mask and skipped it)."""
    for kind in ("eb", "betting"):
        cs = confseq.get(kind)
        st = cs.init((2, 3))
        c = jnp.array([0.5, jnp.nan, 0.5])
        with pytest.raises(ValueError, match=r"center must be finite.*at \(0, 1\)"):
            cs.update(st, jnp.full((2, 3), 0.5), 0.0, 1.0, c, 0.05,
                      active=jnp.array([True, False]))
        with pytest.raises(ValueError, match=r"each term y must lie in its range.*at \(0, 1\)"):
            cs.update(st, jnp.array([0.5, 2.0, 0.5]), 0.0, 1.0, 0.5, 0.05,
                      active=jnp.array([True, False]))
        ok = cs.update(st, jnp.full((2, 3), 0.5), 0.0, 1.0, c, 0.05,
                       active=jnp.array([False, False]))
        assert int(jnp.sum(ok.count)) == 0
