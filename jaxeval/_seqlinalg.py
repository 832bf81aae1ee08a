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
nested ``vmap`` s every LAPACK call stays unbatched. The per-matrix arithmetic is the
same LAPACK routine as in the batched call, so results are unchanged; only small
matrices should go through here (the loop costs a few microseconds per matrix).

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


def _batched_all(axis_size, in_batched, args):
    """Give every argument the batch axis (broadcast the unbatched ones)."""
    return tuple(a if b else jnp.broadcast_to(a, (axis_size,) + a.shape)
                 for a, b in zip(args, in_batched))


@jax.custom_batching.custom_vmap
def solve(a: jax.Array, b: jax.Array) -> jax.Array:
    """``jnp.linalg.solve(a, b)`` for one ``[r, r]`` matrix; vmapped, one after another."""
    return jnp.linalg.solve(a, b)


@solve.def_vmap
def _solve_vmap(axis_size, in_batched, a, b):
    a, b = _batched_all(axis_size, in_batched, (a, b))
    return jax.lax.map(lambda ab: solve(*ab), (a, b)), True


@jax.custom_batching.custom_vmap
def eigh(a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``jnp.linalg.eigh(a)`` as ``(eigenvalues, eigenvectors)``; vmapped, one after another."""
    w, v = jnp.linalg.eigh(a)
    return w, v


@eigh.def_vmap
def _eigh_vmap(axis_size, in_batched, a):
    (a,) = _batched_all(axis_size, in_batched, (a,))
    return jax.lax.map(eigh, a), (True, True)


@jax.custom_batching.custom_vmap
def svd_thin(a: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jnp.linalg.svd(a, full_matrices=False)`` as ``(u, s, vt)``; vmapped, one after
    another."""
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return u, s, vt


@svd_thin.def_vmap
def _svd_vmap(axis_size, in_batched, a):
    (a,) = _batched_all(axis_size, in_batched, (a,))
    return jax.lax.map(svd_thin, a), (True, True, True)
