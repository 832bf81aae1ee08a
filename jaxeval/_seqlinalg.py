"""Dense linear algebra whose ``vmap`` runs one matrix at a time.

On CPU, jaxlib (0.10) runs a *batched* LAPACK call (``getrf``, ``syevd``, ``gesdd``
... over a leading batch axis, which is what ``vmap`` of ``jnp.linalg.solve`` /
``eigh`` / ``svd`` lowers to) by splitting the batch over XLA's intra-op thread pool
and blocking the calling pool thread until every piece is done. When two such calls
are in flight at once on a pool with as many threads as there are cores, both
threads block waiting for pieces that no free thread will run: the program hangs at
0% CPU (seen on 2-core machines with ``fit_anchors`` on metabench MMLU, k = 100:
gdb shows both pool threads in ``ParallelBatchMap`` under ``lapack_sgetrf_ffi``;
BUILD_NOTES.md, "Hang on 2-core machines"). An unbatched call runs on the thread
that issues it and waits for nobody.

The functions here are the ``jnp.linalg`` ones with a :func:`jax.custom_batching.custom_vmap`
rule that maps over the batch with :func:`jax.lax.map` instead: under any number of
nested ``vmap`` s every LAPACK call stays unbatched. Each matrix goes through the same
LAPACK routine as in the batched call (its results are the batched call's, bit for
bit); the operations around a call may still be fused differently by XLA once the
batch is looped, which can move a neighbouring float32 rounding by an ulp. Only small
matrices should go through here (the loop costs a few microseconds per matrix).

A ``custom_vmap`` function has no transpose rule, so on its own it supports forward-
but not reverse-mode autodiff. Each function here is therefore wrapped in a
:func:`jax.custom_jvp` whose tangent is linear algebra on the primal results only
(``dx = a^-1 (db - da x)`` for the solve, the standard first-order perturbation
formulas for ``eigh`` and the thin SVD): ``jax.grad``, ``jax.jvp`` and their
compositions work, under ``vmap`` as well, and still make no batched LAPACK call. As
with ``jnp.linalg``, the derivatives of ``eigh`` and ``svd_thin`` are undefined
(infinite) where eigenvalues or singular values coincide. The solve's derivative costs
a second LU factorisation (for ``a^-1``).

Each function takes one real matrix (``vmap`` it for a batch: a batched argument would
be one batched LAPACK call again) and refuses a batch, mismatched shapes or a complex
dtype with the argument named; integer input is promoted to float, as ``jnp.linalg``
does.

Example:
  >>> import jax, jax.numpy as jnp
  >>> a = jnp.eye(3)[None] * jnp.arange(1.0, 4.0)[:, None, None]
  >>> jax.vmap(solve)(a, jnp.ones((3, 3))).tolist()[2]
  [0.3333333432674408, 0.3333333432674408, 0.3333333432674408]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["eigh", "solve", "svd_thin"]


def _looped(fn):
    """``fn`` (one matrix's LAPACK call) as a ``custom_vmap`` function whose batching
    rule maps over the batch with ``lax.map`` (unbatched arguments broadcast)."""
    f = jax.custom_batching.custom_vmap(fn)

    @f.def_vmap
    def _rule(axis_size, in_batched, *args):
        args = tuple(x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)
                     for x, batched in zip(args, in_batched))
        out = jax.lax.map(lambda xs: f(*xs), args)
        return out, jax.tree.map(lambda _: True, out)

    return f


# -- the LAPACK calls, looped under vmap ---------------------------------------------

_solve = _looped(jnp.linalg.solve)
_eigh = _looped(lambda a: tuple(jnp.linalg.eigh(a)))
_svd = _looped(lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)))


# -- the public functions: the calls above with tangents written out ------------------


def _offdiag_reciprocal(d):
    """``1 / d`` off the diagonal of a square matrix, ``0`` on it."""
    eye = jnp.eye(d.shape[-1], dtype=bool)
    return jnp.where(eye, 0.0, 1.0 / jnp.where(eye, 1.0, d))


def _real_float(x, name: str, ndims: tuple[int, ...], what: str) -> jax.Array:
    """``x`` as a real floating array (integers promoted as ``jnp.linalg`` does), with
    its dimension checked (these helpers take one matrix; ``vmap`` them for a batch)."""
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{name} must be real, got dtype {x.dtype}")
    if x.ndim not in ndims:
        raise ValueError(f"{name} must be {what} (vmap for a batch), got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def solve(a: jax.Array, b: jax.Array) -> jax.Array:
    """``jnp.linalg.solve(a, b)`` for one real ``[r, r]`` matrix ``a`` and ``b`` of shape
    ``[r]`` or ``[r, m]``; vmapped, one after another."""
    a = _real_float(a, "a", (2,), "one [r, r] matrix")
    b = _real_float(b, "b", (1, 2), "[r] or [r, m]")
    if a.shape[0] != a.shape[1] or b.shape[0] != a.shape[0]:
        raise ValueError(f"solve needs a [r, r] and b [r] or [r, m], got {a.shape} and "
                         f"{b.shape}")
    dtype = jnp.promote_types(a.dtype, b.dtype)
    return _solve_ad(a.astype(dtype), b.astype(dtype))


def eigh(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``jnp.linalg.eigh(a)`` as ``(eigenvalues, eigenvectors)`` for one real ``[r, r]``
    matrix (ascending; ``a`` is symmetrised first, as ``jnp.linalg.eigh`` does);
    vmapped, one after another."""
    a = _real_float(a, "a", (2,), "one [r, r] matrix")
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"eigh needs a square matrix, got shape {a.shape}")
    return _eigh_ad(a)


def svd_thin(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jnp.linalg.svd(a, full_matrices=False)`` as ``(u, s, vt)`` for one real
    ``[m, n]`` matrix; vmapped, one after another."""
    return _svd_ad(_real_float(a, "a", (2,), "one [m, n] matrix"))


@jax.custom_jvp
def _solve_ad(a, b):
    return _solve(a, b)


@_solve_ad.defjvp
def _solve_jvp(primals, tangents):
    a, b = primals
    da, db = tangents
    x = _solve_ad(a, b)
    # d(a x) = d b  =>  dx = a^-1 (db - da x); a^-1 from the primal alone keeps the
    # tangent a plain (transposable) matrix product. (A second LU; solving for [b, I]
    # at once would save it but could round x differently from the undifferentiated
    # call.) The primal results come from the differentiable functions, so a higher
    # derivative reenters this rule.
    a_inv = _solve_ad(a, jnp.eye(a.shape[-1], dtype=a.dtype))
    return x, a_inv @ (db - da @ x)


@jax.custom_jvp
def _eigh_ad(a):
    return _eigh(a)


@_eigh_ad.defjvp
def _eigh_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = _eigh_ad(a)
    p = v.T @ (0.5 * (da + da.T)) @ v  # the perturbation in the eigenbasis
    dw = jnp.diagonal(p)
    # eigenvector j moves by sum_{i != j} v_i p_ij / (w_j - w_i)
    dv = v @ (_offdiag_reciprocal(w[None, :] - w[:, None]) * p)
    return (w, v), (dw, dv)


@jax.custom_jvp
def _svd_ad(a):
    return _svd(a)


@_svd_ad.defjvp
def _svd_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    u, s, vt = _svd_ad(a)
    v = vt.T
    p = u.T @ da @ v  # [q, q], q = min(m, n)
    ds = jnp.diagonal(p)
    f = _offdiag_reciprocal(s[None, :] ** 2 - s[:, None] ** 2)  # 1 / (s_j^2 - s_i^2)
    ps = p * s[None, :]  # p S
    sp = s[:, None] * p  # S p
    du = u @ (f * (ps + ps.T))
    dv = v @ (f * (sp + sp.T))
    s_inv = jnp.where(s > 0, 1.0 / jnp.where(s > 0, s, 1.0), 0.0)
    m, n = a.shape
    if m > n:  # the part of da outside u's span moves u
        dav = da @ v
        du = du + (dav - u @ (u.T @ dav)) * s_inv[None, :]
    elif n > m:  # ... and outside v's span moves v
        dau = da.T @ u
        dv = dv + (dau - v @ (v.T @ dau)) * s_inv[None, :]
    return (u, s, vt), (du, ds, dv.T)
