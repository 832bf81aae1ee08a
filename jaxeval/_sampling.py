"""Sampling items uniformly without replacement with O(K) state per replicate.

Each (replicate, arm) owns a stream of i.i.d. uniform 31-bit integer keys over the
``n`` items, regenerated on demand from ``fold_in(order_key, arm)``. The arm's draw
order is the ascending order of ``(key, item index)`` pairs (the index breaks the rare
ties, so the pairs are distinct and the order is a total order). Everything the
arm has seen is therefore "pairs at or below its threshold", where the threshold is
the pair of the last item it drew; the next batch is the ``b`` smallest pairs above
the threshold, found by ``b`` arg-max passes over the masked, order-reversed keys:
``O(b n)`` work per pull and no ``[K, n]`` seen-mask in the state.

The *synchronized* variant regenerates one stream per replicate shared by all arms
(``fold_in(order_key, SYNC_STREAM)``), so every arm sees the items in the same order
(what SySRs needs); each arm still keeps its own count and threshold.

State per arm (a :class:`SamplerState` with a leading ``[K]`` axis): the number of
items drawn (int32) and the threshold pair ``(thr_key, thr_idx)``; ``thr_key = -1``
means nothing drawn yet.

Example:
  >>> import jax
  >>> from jaxeval import _sampling as smp
  >>> state = smp.init(num_arms=3)
  >>> keys, seen = smp.arm_view(jax.random.key(0), state, arm=1, n=10)
  >>> items, valid, state = smp.take_batch(keys, seen, state, arm=1, batch_size=4)
  >>> int(state.count[1]), bool(valid.all())
  (4, True)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "SYNC_STREAM",
    "SamplerState",
    "arm_keys",
    "arm_order",
    "arm_view",
    "init",
    "seen_mask",
    "take_batch",
]

#: ``fold_in`` constant for the stream shared by all arms in the synchronized variant
#: (arms are folded in with their index, which is always smaller).
SYNC_STREAM = 0x7FFF_FFF0

_KEY_MAX = np.int32(2**31 - 1)  # numpy: importing jaxeval must not start a JAX backend


class SamplerState(NamedTuple):
    """Per-arm sampler state (leading axis: arms).

    Attributes:
      count: int32 ``[K]`` items drawn so far.
      thr_key: int32 ``[K]`` key of the last item drawn (-1 before the first draw).
      thr_idx: int32 ``[K]`` index of the last item drawn (-1 before the first draw).
    """

    count: jax.Array
    thr_key: jax.Array
    thr_idx: jax.Array


def init(num_arms: int) -> SamplerState:
    """A fresh sampler state: no arm has drawn anything."""
    z = jnp.zeros((num_arms,), jnp.int32)
    return SamplerState(count=z, thr_key=z - 1, thr_idx=z - 1)


def arm_keys(order_key: jax.Array, arm: jax.Array | int, n: int, synchronized: bool = False):
    """The arm's i.i.d. uniform 31-bit keys over the ``n`` items (int32 ``[n]``).

    Args:
      order_key: the replicate's item-order key.
      arm: arm index (ignored when ``synchronized``).
      n: number of items (static).
      synchronized: one shared stream for all arms.

    Returns:
      int32 ``[n]`` in ``[0, 2**31)``; the arm's order is ascending ``(key, index)``.
    """
    stream = jnp.int32(SYNC_STREAM) if synchronized else jnp.asarray(arm, jnp.int32)
    bits = jax.random.bits(jax.random.fold_in(order_key, stream), (n,), jnp.uint32)
    return (bits >> 1).astype(jnp.int32)


def seen_mask(keys: jax.Array, thr_key: jax.Array, thr_idx: jax.Array) -> jax.Array:
    """Items at or below the threshold pair ``(thr_key, thr_idx)``: those already drawn."""
    idx = jnp.arange(keys.shape[-1], dtype=jnp.int32)
    return (keys < thr_key) | ((keys == thr_key) & (idx <= thr_idx))


def arm_view(
    order_key: jax.Array,
    state: SamplerState,
    arm: jax.Array | int,
    n: int,
    synchronized: bool = False,
):
    """The arm's keys and its seen-mask, regenerated from the key and the O(1) state.

    Returns:
      ``(keys int32 [n], seen bool [n])``.
    """
    keys = arm_keys(order_key, arm, n, synchronized)
    return keys, seen_mask(keys, state.thr_key[arm], state.thr_idx[arm])


def take_batch(
    keys: jax.Array,
    seen: jax.Array,
    state: SamplerState,
    arm: jax.Array | int,
    batch_size: int,
    limit: jax.Array | int | None = None,
):
    """Draw the arm's next ``batch_size`` unseen items (the smallest keys above threshold).

    Args:
      keys, seen: from :func:`arm_view`.
      state: the sampler state.
      arm: arm index.
      batch_size: static ``b``.
      limit: optional dynamic cap on how many items to draw (``<= batch_size``), e.g.
        to stop exactly at a budget; entries beyond it are returned invalid.

    Returns:
      ``(items int32 [b], valid bool [b], new_state)``; ``valid`` is False for slots
      beyond the unseen items left (or beyond ``limit``); invalid slots hold an
      arbitrary index and must be masked by the caller.
    """
    score = jnp.where(seen, jnp.int32(-1), _KEY_MAX - keys)
    # b passes of argmax (first index on ties, i.e. the (key, index) order): O(b n) and
    # far faster than lax.top_k on CPU.
    def pick(sc, _):
        j = jnp.argmax(sc).astype(jnp.int32)
        return sc.at[j].set(-1), (sc[j], j)

    _, (top, items) = jax.lax.scan(pick, score, None, length=batch_size)
    valid = top >= 0
    if limit is not None:
        valid = valid & (jnp.arange(batch_size) < limit)
    n_new = jnp.sum(valid, dtype=jnp.int32)
    last = items[jnp.maximum(n_new - 1, 0)]
    moved = n_new > 0
    new_state = SamplerState(
        count=state.count.at[arm].add(n_new),
        thr_key=state.thr_key.at[arm].set(jnp.where(moved, keys[last], state.thr_key[arm])),
        thr_idx=state.thr_idx.at[arm].set(jnp.where(moved, last, state.thr_idx[arm])),
    )
    return items.astype(jnp.int32), valid, new_state


def arm_order(order_key: jax.Array, arm: jax.Array | int, n: int, synchronized: bool = False):
    """The arm's full draw order (int32 ``[n]`` item indices), for tests and inspection.

    Costs a sort; the loop never calls it.
    """
    keys = arm_keys(order_key, arm, n, synchronized)
    idx = jnp.arange(n, dtype=jnp.int32)
    _, order = jax.lax.sort((keys, idx), num_keys=2)
    return order
