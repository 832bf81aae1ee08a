"""Second mutation review of the metric, policy and looped linear-algebra kernels: errors
that name exactly the arguments given (and with the right shapes), negative arm indices
past int32 that must not wrap onto an arm, the documented float32 result of ``mae_pp``
under x64, Kendall's tau-b on hand-worked tied inputs, a rejected SySRs arm that is never
evaluated again, the looped ``solve``/``eigh``/``svd_thin`` checks naming the argument,
promoting like ``jnp.linalg`` and differentiating at exact zero singular values and
degenerate eigenvalues like ``jnp.linalg``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_metrics_policies_mutants import _sysrs, _view

from jaxeval import _policies as pol
from jaxeval import _seqlinalg as sl
from jaxeval import metrics


def test_mae_pp_names_a_where_that_does_not_broadcast():
    """A mask whose shape does not broadcast against ``pred``/``true`` is refused naming
    all three arguments and their shapes (JAX's own error named none)."""
    with pytest.raises(ValueError, match=r"mae_pp: shapes do not broadcast together: "
                       r"pred \(3,\), true \(3,\), where \(4,\)"):
        metrics.mae_pp(np.ones(3), np.ones(3), where=np.ones(4, bool))


def test_shape_errors_name_only_the_arguments_given():
    """An argument left out (``where=None``) is not listed as if it had shape ``()``."""
    with pytest.raises(ValueError, match=r"mae_pp: shapes do not broadcast together: "
                       r"pred \(3,\), true \(4,\)$"):
        metrics.mae_pp(np.ones(3), np.ones(4))


def test_kendall_shape_error_gives_each_argument_its_own_shape():
    """``x`` and ``y`` of different shapes: the message pairs each name with its shape."""
    with pytest.raises(ValueError, match=r"got x \(3,\) and y \(4,\)"):
        metrics.kendall_tau_b(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match=r"got x \(2, 5\) and y \(5,\)"):
        metrics.kendall_tau_b(np.ones((2, 5)), np.ones(5))


def test_kendall_tau_b_hand_worked_ties_on_both_sides():
    """Six pairs each. ``x = [1, 1, 2, 3]``, ``y = [1, 2, 2, 3]``: one pair tied in x, one
    in y, four concordant: ``4 / sqrt(5 * 5) = 0.8``; reversing y makes them discordant:
    ``-0.8``. ``x = [1, 1, 1, 2]``: three pairs tied in x (one of them tied in y too), one
    in y, three concordant: ``3 / sqrt(3 * 5)``. Batched rows give the same values."""
    x = np.array([[1, 1, 2, 3], [1, 1, 2, 3], [1, 1, 1, 2]], np.float32)
    y = np.array([[1, 2, 2, 3], [3, 2, 2, 1], [1, 2, 2, 3]], np.float32)
    want = [0.8, -0.8, 3 / np.sqrt(15)]
    np.testing.assert_allclose(metrics.kendall_tau_b(x, y), want, atol=1e-6)
    np.testing.assert_allclose([float(metrics.kendall_tau_b(a, b)) for a, b in zip(x, y)],
                               want, atol=1e-6)


def test_negative_indices_past_int32_are_wrong_not_wrapped():
    """``-2**32`` is outside ``[0, K)``: wrong, not cast to int32 (where it is 0, the best
    arm). For NumPy indices, and for JAX int64 indices under x64."""
    truth = jnp.array([0.9, 0.1])
    assert metrics.identification_correct(np.array([-2**32, 0]), truth).tolist() == [
        False, True]
    with jax.enable_x64(True):
        rec = jnp.array([-2**32, 0], jnp.int64)
        assert metrics.identification_correct(rec, truth).tolist() == [False, True]
        assert float(metrics.identification_accuracy(rec, truth)) == 0.5


def test_mae_pp_is_float32_under_x64():
    """Documented: the MAE is float32, also for float64 inputs with x64 enabled."""
    with jax.enable_x64(True):
        got = metrics.mae_pp(np.array([0.5, 0.7]), np.array([0.6, 0.7]))
        assert got.dtype == jnp.float32
        assert float(got) == pytest.approx(5.0, rel=1e-6)


def test_policy_init_is_every_arm_alive_in_phase_zero():
    ps = pol.policy_init(4)
    assert np.asarray(ps.alive).tolist() == [True] * 4
    assert ps.phase.dtype == jnp.int32 and int(ps.phase) == 0


def test_unknown_policy_is_refused_listing_every_policy():
    """The error for an unknown policy lists all of :data:`POLICIES` (not only the ones
    that need predictions) and repeats the name given."""
    with pytest.raises(ValueError, match=r"policy: expected one of \('uniform', 'ucbe', "
                       r"'naive', 'pulse', 'pulse_ucb', 'sysrs'\), got 'ucb'"):
        pol.choose_arm("ucb", _view([1, 2]), pol.policy_init(2), jnp.float32(0.5),
                       jnp.float32(1.0))


def test_sysrs_never_evaluates_a_rejected_arm():
    """A rejected arm (here arm 2, stopped at the first phase's 1 item) is behind the
    second phase's target but is not evaluated again: the survivor furthest behind is."""
    got = _sysrs([3, 2, 1], [0.5, 0.4, 0.1], [True, True, False], 1, (1, 4))
    assert got == (1, 2, True, [True, True, False], 1)


def test_solve_names_the_argument_that_is_complex_or_not_square():
    with pytest.raises(TypeError, match=r"^b must be real, got dtype complex64"):
        sl.solve(jnp.eye(2), jnp.ones(2, jnp.complex64))
    with pytest.raises(TypeError, match=r"^a must be real"):
        sl.solve(jnp.eye(2, dtype=jnp.complex64), jnp.ones(2))
    with pytest.raises(ValueError, match=r"b must be \[r\] or \[r, m\] \(vmap for a batch\), "
                       r"got shape \(2, 2, 1\)"):
        sl.solve(jnp.eye(2), jnp.ones((2, 2, 1)))
    with pytest.raises(ValueError, match=r"solve needs a \[r, r\] .* got \(2, 3\) and \(2,\)"):
        sl.solve(jnp.ones((2, 3)), jnp.ones(2))


def test_solve_promotes_like_jnp_linalg_under_x64():
    """A float32 matrix and a float64 right side solve in float64, as ``jnp.linalg.solve``
    does (the right side is not rounded to float32)."""
    with jax.enable_x64(True):
        a = jnp.array([[3.0, 1.0], [1.0, 2.0]], jnp.float32)
        b = jnp.array([1.0 + 1e-12, 2.0], jnp.float64)
        got, want = sl.solve(a, b), jnp.linalg.solve(a, b)
        assert got.dtype == want.dtype == jnp.float64
        np.testing.assert_allclose(got, want, rtol=1e-14)


def test_integer_matrices_are_promoted_to_float():
    """Integer input is promoted as ``jnp.linalg`` does, for every helper, and the
    results equal ``jnp.linalg``'s on the float matrix."""
    a = jnp.array([[2, 1], [1, 2], [0, 1]])
    w, v = sl.eigh(a[:2])
    assert w.dtype == jnp.float32 and w.tolist() == pytest.approx([1.0, 3.0], abs=1e-6)
    u, s, vt = sl.svd_thin(a)
    assert s.dtype == jnp.float32
    np.testing.assert_allclose(s, jnp.linalg.svd(a.astype(jnp.float32), compute_uv=False),
                               rtol=1e-6)
    np.testing.assert_allclose((u * s) @ vt, a, atol=1e-5)


def test_svd_gradient_at_an_exact_zero_singular_value_is_finite():
    """A tall rank-1 matrix (an exact zero singular value, a distinct nonzero one): the
    gradient of a function of the first singular triplet (``u[:, 0]`` and ``s[0]``) is
    well defined; it is finite and equals float64 central differences (the zero singular
    value's ``1 / s`` is taken as 0; ``jnp.linalg.svd`` gives NaN here). ``sum(s)`` of a
    tall and a wide rank-1 matrix has ``jnp.linalg``'s gradient ``u v^T``."""
    a = np.array([[3.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    c = np.array([1.0, 2.0, 3.0])

    def first(x):
        u, s, _ = sl.svd_thin(x)
        return jnp.sum(c * u[:, 0] ** 2) + s[0]

    def first_np(x):
        u, s, _ = np.linalg.svd(x, full_matrices=False)
        return np.sum(c * u[:, 0] ** 2) + s[0]

    h, want = 1e-6, np.zeros_like(a)
    for i, j in np.ndindex(*a.shape):
        e = np.zeros_like(a)
        e[i, j] = h
        want[i, j] = (first_np(a + e) - first_np(a - e)) / (2 * h)
    got = jax.grad(first)(jnp.asarray(a, jnp.float32))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=1e-5)
    thin = lambda x: jnp.linalg.svd(x, full_matrices=False)[1].sum()  # noqa: E731
    for m in (jnp.array([[3.0, 0.0], [0.0, 0.0], [0.0, 0.0]]),
              jnp.array([[3.0, 0.0, 0.0], [0.0, 0.0, 0.0]])):
        np.testing.assert_allclose(jax.grad(lambda x: sl.svd_thin(x)[1].sum())(m),
                                   jax.grad(thin)(m), atol=1e-6)


def test_eigenvalue_gradient_at_degenerate_eigenvalues_is_jnp_linalg_one():
    """With a repeated eigenvalue the eigenvalues' own derivatives are still defined
    (the eigenvectors' are not): they are finite and ``jnp.linalg.eigh``'s, forward and
    reverse, vmapped too."""
    a = jnp.stack([jnp.diag(jnp.array([1.0, 1.0, 2.0])), jnp.eye(3)])
    c = jnp.array([1.0, 2.0, 3.0])
    ours = lambda x: sl.eigh(x)[0] @ c  # noqa: E731
    ref = lambda x: jnp.linalg.eigh(x)[0] @ c  # noqa: E731
    got, want = jax.vmap(jax.grad(ours))(a), jax.vmap(jax.grad(ref))(a)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, atol=1e-6)
    t = jnp.broadcast_to(jnp.diag(jnp.array([0.0, 0.0, 1.0])), a.shape)
    jvp = lambda f: jax.vmap(lambda x, dx: jax.jvp(f, (x,), (dx,))[1])  # noqa: E731
    np.testing.assert_allclose(jvp(ours)(a, t), jvp(ref)(a, t), atol=1e-6)


def test_identification_correct_default_tolerance_is_tie_atol():
    """Called directly, ``identification_correct`` also counts an arm one float32 ulp
    below the best as a true best (its default ``atol`` is :data:`TIE_ATOL`), not only
    through ``identification_accuracy``; ``atol=0`` asks for exact ties."""
    top = np.float32(0.5)
    theta = jnp.array([top, np.nextafter(top, np.float32(0))])
    assert theta[0] != theta[1]
    assert metrics.identification_correct(jnp.array([0, 1]), theta).tolist() == [True, True]
    assert metrics.identification_correct(np.array([1]), theta, 0.0).tolist() == [False]


def test_reverse_over_reverse_derivatives_are_jnp_linalg_ones():
    """Documented: compositions of ``jax.grad`` work. The gradient of a gradient (reverse
    over reverse) of a sign-free function of the eigenvectors/singular vectors is finite
    and equal to ``jnp.linalg``'s (the ``1 / (w_j - w_i)`` factors' zero diagonal must
    not leak a NaN into the second derivative)."""
    a = jax.random.normal(jax.random.key(3), (4, 4))
    spd = a @ a.T + jnp.eye(4)
    c = jnp.cos(jnp.arange(16.0)).reshape(4, 4)
    d = jnp.sin(jnp.arange(16.0)).reshape(4, 4)
    thin = lambda x: tuple(jnp.linalg.svd(x, full_matrices=False))  # noqa: E731
    for ours, ref in ((sl.eigh, lambda x: tuple(jnp.linalg.eigh(x))), (sl.svd_thin, thin)):
        def gg(dec):
            def f(x):
                out = dec(x)
                return jnp.sum(c * out[0] ** 2) + jnp.sum(out[1] ** 2 * jnp.arange(4.0))
            return jax.grad(lambda x: jnp.sum(d * jax.grad(f)(x)))
        got, want = gg(ours)(spd), gg(ref)(spd)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, atol=1e-4 * float(jnp.max(jnp.abs(want))))


def test_where_must_be_a_bool_mask_naming_the_function():
    """An integer mask was combined with ``&`` (``2 & 1 == 0`` dropped a pair without a
    word) and a float one failed inside JAX naming nothing: both are refused, under jit
    too; bool masks, as arrays or Python lists, keep their meaning."""
    x, y = np.array([0.0, 5.0, 1.0]), np.array([0.0, -5.0, 1.0])
    for fn in (metrics.kendall_tau_b, metrics.mae_pp):
        for bad, dtype in ((np.array([2, 0, 1]), "int64"), (np.array([1.0, 0.0, 1.0]),
                                                            "float64")):
            with pytest.raises(TypeError, match=rf"^{fn.__name__}: where must be a bool "
                               rf"mask, got dtype {dtype} \(write where=mask != 0"):
                fn(x, y, where=bad)
        with pytest.raises(TypeError, match=rf"{fn.__name__}: where must be a bool mask, "
                           "got dtype int32"):
            jax.jit(lambda w, fn=fn: fn(x, y, where=w))(jnp.array([1, 0, 1]))
        keep = [True, False, True]
        for w in (keep, np.array(keep), jnp.array(keep)):
            np.testing.assert_allclose(fn(x, y, where=w), fn(x[[0, 2]], y[[0, 2]]))
    assert float(metrics.kendall_tau_b(x, y, where=[True, False, True])) == 1.0
