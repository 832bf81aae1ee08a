"""Sampling items uniformly without replacement with O(K) state per replicate.

Each (replicate, arm) owns a stream of i.i.d. uniform 31-bit integer keys over the
``n`` items, regenerated on demand from ``fold_in(order_key, arm)``. The arm's draw
order is the ascending order of ``(key, item index)`` pairs (the index breaks the rare
ties, so the pairs are distinct and the order is a total order). Everything the
arm has seen is therefore "pairs at or below its threshold", where the threshold is
the pair of the last item it drew; the next batch is the ``b`` smallest pairs above
the threshold, found by ``b`` arg-max passes over the masked, order-reversed keys:
``O(b n)`` work per pull and no ``[K, n]`` seen-mask in the state.

**Blocks.** For large ``n`` the loop streams the items in blocks of a static size
(``jaxeval._identification.Config.item_block``) instead of holding rows of length
``n``: :func:`keys_at` regenerates the keys of any item indices (the same keys as
:func:`arm_keys`, bit for bit, under JAX's default partitionable threefry), and
:func:`block_top` / :func:`merge_top` / :func:`finish_top` find the next batch by a
running top-``b`` merge across blocks (the same items and the same new state as
:func:`take_batch` on the whole row). :func:`bits_at`, :func:`uniform_at` and
:func:`normal_at` are the counter-based generators behind it: element ``j`` of
``jax.random.bits / uniform / normal(key, shape)`` is a function of ``(key, j)`` only
(``j`` the flat index), so any slice can be regenerated on its own.

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
from jax.extend.random import threefry2x32_p

__all__ = [
    "SYNC_STREAM",
    "OrderTable",
    "SamplerState",
    "arm_keys",
    "arm_order",
    "arm_view",
    "bits_at",
    "block_top",
    "empty_top",
    "finish_top",
    "init",
    "keys_at",
    "merge_top",
    "normal_at",
    "order_table",
    "seen_mask",
    "table_seen",
    "take_batch",
    "take_from_table",
    "TopB",
    "uniform_at",
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


def seen_mask(
    keys: jax.Array, thr_key: jax.Array, thr_idx: jax.Array, idx: jax.Array | None = None
) -> jax.Array:
    """Items at or below the threshold pair ``(thr_key, thr_idx)``: those already drawn.

    ``idx`` are the items' indices (default ``0 .. len(keys) - 1``, the whole row).
    """
    if idx is None:
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


def _advance(state: SamplerState, arm, n_new, last_key, last_idx) -> SamplerState:
    """The arm's state after drawing ``n_new`` items, the last one ``(last_key, last_idx)``."""
    moved = n_new > 0
    return SamplerState(
        count=state.count.at[arm].add(n_new),
        thr_key=state.thr_key.at[arm].set(jnp.where(moved, last_key, state.thr_key[arm])),
        thr_idx=state.thr_idx.at[arm].set(jnp.where(moved, last_idx, state.thr_idx[arm])),
    )


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
    return items.astype(jnp.int32), valid, _advance(state, arm, n_new, keys[last], last)


def arm_order(order_key: jax.Array, arm: jax.Array | int, n: int, synchronized: bool = False):
    """The arm's full draw order (int32 ``[n]`` item indices), for tests and inspection.

    Costs a sort; the loop never calls it.
    """
    keys = arm_keys(order_key, arm, n, synchronized)
    idx = jnp.arange(n, dtype=jnp.int32)
    _, order = jax.lax.sort((keys, idx), num_keys=2)
    return order


# ------------------------------------------------------------- order tables
class OrderTable(NamedTuple):
    """Every stream's draw order, materialised once per replicate (small ``K n``).

    The same orders as the regenerated keys (ascending ``(key, index)`` of
    :func:`arm_keys`), so a loop that reads them makes bit for bit the same draws as
    one that regenerates the keys every step; a step then costs ``O(b)`` to find its
    batch (a slice) and ``O(n)`` integer compares for a seen-mask, instead of ``n``
    threefry hashes and ``b`` arg-max passes.

    Attributes:
      order: int32 ``[S, n]``: item indices in draw order, one row per stream
        (``S = K`` arms, or 1 for the synchronized order).
      keys: int32 ``[S, n]``: the streams' order keys (:func:`arm_keys`), for
        :func:`table_seen`; None when not kept.
    """

    order: jax.Array
    keys: jax.Array | None


def order_table(order_key: jax.Array, num_arms: int, n: int,
                synchronized: bool = False, with_keys: bool = True) -> OrderTable:
    """Materialise the draw orders of every arm (or the one shared stream).

    Costs ``S`` sorts of ``n`` keys once per replicate and ``2 S n`` int32 of memory
    (``S n`` with ``with_keys=False``: enough to draw, not for :func:`table_seen`).

    Example:
      >>> import jax
      >>> from jaxeval import _sampling as smp
      >>> t = smp.order_table(jax.random.key(0), num_arms=2, n=5)
      >>> bool((t.order[1] == smp.arm_order(jax.random.key(0), 1, 5)).all())
      True
    """
    streams = jnp.arange(1 if synchronized else num_arms, dtype=jnp.int32)
    keys = jax.vmap(lambda a: arm_keys(order_key, a, n, synchronized))(streams)
    order = jax.vmap(_sorted_order)(keys)
    return OrderTable(order=order, keys=keys if with_keys else None)


#: Sort the order tables with NumPy (through :func:`jax.pure_callback`) when the program
#: runs on a CPU. XLA:CPU's sort is an order of magnitude slower than NumPy's vectorised
#: one on these rows (a ``[2560, 541]`` int32 sort: 66-72 ms against 4 ms, jaxlib
#: 0.10.2; the known jax-ml/jax#10434), and the sort is most of a UCB-E replicate's cost.
#: Both paths give the same table (a sort of distinct pairs has one answer;
#: ``tests/test_sampling.py`` checks it); other platforms always sort in XLA.
#:
#: ``None`` (the default): the host sort only where the CPU backend has a single device.
#: With several CPU devices (``--xla_force_host_platform_device_count``) a sharded run
#: calls the callback from every device at once, and each call copies its operand onto
#: CPU device 0 through the same thread pool the blocked executables occupy: with as
#: many devices as pool threads that deadlocks (seen in the test suite, eight fake
#: devices: eight callbacks waiting in ``np.asarray`` of their operand, nothing
#: running). ``True`` forces the host sort on any CPU (for measurements), ``False``
#: never uses it.
HOST_SORT_ON_CPU: bool | None = None


def _use_host_sort() -> bool:
    """Whether :func:`_sorted_order` lowers to the host sort on a CPU (trace time)."""
    if HOST_SORT_ON_CPU is not None:
        return bool(HOST_SORT_ON_CPU)
    try:
        return len(jax.local_devices(backend="cpu")) == 1
    except RuntimeError:  # no CPU backend
        return False


def _sorted_order(keys: jax.Array) -> jax.Array:
    """Item indices in ascending ``(key, index)`` order, as :func:`arm_order` (exactly).

    On a CPU (where :func:`_use_host_sort`, see :data:`HOST_SORT_ON_CPU`) the rows are
    sorted by NumPy (:func:`_host_sorted_order`); elsewhere by :func:`_xla_sorted_order`.
    """
    if not _use_host_sort():
        return _xla_sorted_order(keys)
    return jax.lax.platform_dependent(keys, cpu=_host_sort_callback,
                                      default=_xla_sorted_order)


def _host_sort_callback(keys: jax.Array) -> jax.Array:
    out = jax.ShapeDtypeStruct(keys.shape, jnp.int32)
    return jax.pure_callback(_host_sorted_order, out, keys, vmap_method="expand_dims")


def _host_sorted_order(keys) -> np.ndarray:
    """NumPy twin of :func:`_xla_sorted_order` over the last axis (any leading axes).

    The same packed sort, then the rows with a tie in the packed keys' top bits (the
    only rows the packing can misorder) are sorted again on exact 64-bit packed pairs.
    """
    keys = np.asarray(keys, np.int32)
    n = keys.shape[-1]
    s = max(1, (n - 1).bit_length())
    idx = np.arange(n, dtype=np.int32)
    packed = np.sort(((keys >> s) << s) | idx, axis=-1)
    order = packed & np.int32((1 << s) - 1)
    high = packed >> s
    tied = np.any(high[..., 1:] == high[..., :-1], axis=-1)
    if tied.any():
        exact = np.sort((keys[tied].astype(np.int64) << s) | idx, axis=-1)
        order[tied] = (exact & ((1 << s) - 1)).astype(np.int32)
    return order


def _xla_sorted_order(keys: jax.Array) -> jax.Array:
    """Item indices in ascending ``(key, index)`` order, sorted by XLA.

    XLA's CPU sort is several times faster on one plain int32 operand than on a
    ``(key, index)`` pair with a comparator, so the pair is packed: the key's top
    ``31 - s`` bits above the index's ``s`` bits (``2**s >= n``). That sorts by
    ``(key >> s, index)``, which can differ from ``(key, index)`` only inside runs of
    equal ``key >> s`` (a few pairs per arm at most, for random keys); odd-even
    transposition passes on the full pairs, repeated until no swap, sort those runs.
    """
    n = keys.shape[-1]
    s = max(1, (n - 1).bit_length())
    idx = jnp.arange(n, dtype=jnp.int32)
    s32 = jnp.int32(s)  # a Python int would be int64 under x64
    packed = jax.lax.shift_left(jax.lax.shift_right_logical(keys, s32), s32) | idx
    order = jax.lax.sort(packed) & jnp.int32((1 << s) - 1)
    if n < 2:
        return order
    key_o = keys[order]
    # out-of-order adjacent pairs can only sit inside runs of equal ``key >> s``; an
    # isolated one (a run of two, nearly always) is fixed by one swap, and the rare
    # longer runs by odd-even transposition passes until none is left
    ko, io = _swap_pairs(key_o, order, _isolated(_out_of_order(key_o, order)))
    even = jnp.arange(n - 1) % 2 == 0

    def body(c):
        ko, io = c
        ko, io = _swap_pairs(ko, io, even & _out_of_order(ko, io))
        return _swap_pairs(ko, io, ~even & _out_of_order(ko, io))

    _, order = jax.lax.while_loop(lambda c: jnp.any(_out_of_order(*c)), body, (ko, io))
    return order


def _out_of_order(ko, io):
    """bool ``[n - 1]``: pair ``(i, i + 1)`` is out of ``(key, index)`` order."""
    return (ko[:-1] > ko[1:]) | ((ko[:-1] == ko[1:]) & (io[:-1] > io[1:]))


def _isolated(flag):
    """``flag`` where neither neighbouring pair is flagged (disjoint pairs)."""
    f = jnp.zeros((1,), bool)
    return flag & ~jnp.concatenate([f, flag[:-1]]) & ~jnp.concatenate([flag[1:], f])


def _swap_pairs(ko, io, swap):
    """Swap the entries of every pair ``(i, i + 1)`` with ``swap[i]`` (pairs disjoint)."""
    f = jnp.zeros((1,), bool)
    up = jnp.concatenate([swap, f])  # position i takes i + 1
    down = jnp.concatenate([f, swap])  # position i + 1 takes i

    def move(x):
        left = jnp.concatenate([x[1:], x[-1:]])
        right = jnp.concatenate([x[:1], x[:-1]])
        return jnp.where(up, left, jnp.where(down, right, x))

    return move(ko), move(io)


def _stream(table: OrderTable, arm):
    return 0 if table.order.shape[0] == 1 else arm


def table_seen(table: OrderTable, state: SamplerState, arm: jax.Array | int) -> jax.Array:
    """The arm's seen-mask (bool ``[n]``) in ``state``, from the table's stored keys."""
    return seen_mask(table.keys[_stream(table, arm)], state.thr_key[arm], state.thr_idx[arm])


def take_from_table(
    table: OrderTable,
    order_key: jax.Array,
    state: SamplerState,
    arm: jax.Array | int,
    batch_size: int,
    limit: jax.Array | int | None = None,
    synchronized: bool = False,
):
    """:func:`take_batch` read from an :class:`OrderTable`: the same valid items, in the
    same order, and the same new state (the threshold's key is one regenerated hash).

    Returns:
      ``(items int32 [b], valid bool [b], new_state)``; invalid slots hold an arbitrary
      item index and must be masked by the caller.
    """
    n = table.order.shape[1]
    count = state.count[arm]
    j = jnp.arange(batch_size, dtype=jnp.int32)
    pos = count + j
    valid = pos < n
    if limit is not None:
        valid = valid & (j < limit)
    items = table.order[_stream(table, arm)][jnp.minimum(pos, n - 1)]
    n_new = jnp.sum(valid, dtype=jnp.int32)
    last = items[jnp.maximum(n_new - 1, 0)]
    if table.keys is not None:
        last_key = table.keys[_stream(table, arm)][last]
    else:
        last_key = keys_at(order_key, arm, last[None], synchronized)[0]
    return items.astype(jnp.int32), valid, _advance(state, arm, n_new, last_key, last)


# ----------------------------------------------------------- counter-based generators
def _threefry_data(key: jax.Array) -> jax.Array:
    """The two uint32 words of a threefry key (typed or raw)."""
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jax.random.key_impl(key))
        if impl != "threefry2x32":
            raise ValueError(
                f"key: the blockwise generators need a threefry2x32 key, got impl {impl!r}"
            )
        return jax.random.key_data(key)
    if key.dtype != jnp.uint32 or key.shape[-1:] != (2,):
        raise ValueError(
            f"key: expected a typed PRNG key or raw uint32 [2] key data, got dtype "
            f"{key.dtype} and shape {key.shape}"
        )
    return key


def bits_at(key: jax.Array, counters: jax.Array) -> jax.Array:
    """Element ``counters`` of ``jax.random.bits(key, shape, uint32)`` (flat indices).

    Under JAX's default ``jax_threefry_partitionable=True`` the element with flat index
    ``j`` of ``jax.random.bits(key, shape)`` is ``threefry2x32(key, (0, j))`` with its
    two output words xor-ed, whatever the shape; this computes it for any array of
    indices (``< 2**32``), so a block of a long row costs only the block.
    ``tests/test_blocks.py`` pins the equality with :func:`jax.random.bits`.

    Args:
      key: a threefry key (typed, or raw uint32 ``[2]``).
      counters: integer array of flat indices.

    Returns:
      uint32 array shaped like ``counters``.
    """
    kd = _threefry_data(key)
    lo = jnp.asarray(counters).astype(jnp.uint32)
    b1, b2 = threefry2x32_p.bind(kd[..., 0], kd[..., 1], jnp.zeros_like(lo), lo)
    return b1 ^ b2


def uniform_at(key: jax.Array, counters: jax.Array, minval=0.0, maxval=1.0) -> jax.Array:
    """Elements ``counters`` of ``jax.random.uniform(key, shape, float32, minval, maxval)``.

    The same float32 operations as JAX's sampler (23 random mantissa bits, then an
    affine map and a floor at ``minval``), applied to :func:`bits_at`.
    """
    f32 = jnp.float32
    minval = jnp.asarray(minval, f32)
    maxval = jnp.asarray(maxval, f32)
    bits = bits_at(key, counters)
    float_bits = jax.lax.shift_right_logical(bits, jnp.asarray(32 - 23, jnp.uint32))
    float_bits = jax.lax.bitwise_or(
        float_bits, jnp.asarray(np.array(1.0, np.float32).view(np.uint32), jnp.uint32)
    )
    floats = jax.lax.bitcast_convert_type(float_bits, f32) - jnp.asarray(1.0, f32)
    return jax.lax.max(minval, floats * (maxval - minval) + minval)


def normal_at(key: jax.Array, counters: jax.Array) -> jax.Array:
    """Elements ``counters`` of ``jax.random.normal(key, shape, float32)`` (flat indices).

    JAX draws ``sqrt(2) * erfinv(u)`` with ``u`` uniform on ``(-1, 1)``; so does this.
    For ``normal(key, (n, r))`` the element ``[j, k]`` has counter ``j * r + k``.
    """
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0), dtype=np.float32)
    u = uniform_at(key, counters, lo, np.float32(1.0))
    return jax.lax.mul(jnp.asarray(np.sqrt(2), jnp.float32), jax.lax.erf_inv(u))


def keys_at(
    order_key: jax.Array, arm: jax.Array | int, idx: jax.Array, synchronized: bool = False
) -> jax.Array:
    """The arm's order keys of the items ``idx``: ``arm_keys(...)[idx]`` without the row.

    Bit-identical to :func:`arm_keys` under JAX's default (partitionable) threefry.
    """
    stream = jnp.int32(SYNC_STREAM) if synchronized else jnp.asarray(arm, jnp.int32)
    bits = bits_at(jax.random.fold_in(order_key, stream), idx)
    return (bits >> 1).astype(jnp.int32)


# ------------------------------------------------------------- blockwise top-b
class TopB(NamedTuple):
    """A running set of the ``b`` best candidates, best first.

    Attributes:
      score: int32 ``[b]`` ``KEY_MAX - key`` (larger is earlier in the order); ``-1``
        for an empty slot.
      item: int32 ``[b]`` item indices.
      payload: a pytree of ``[b]`` arrays carried with the items (e.g. their scores).
    """

    score: jax.Array
    item: jax.Array
    payload: tuple


def empty_top(batch_size: int, payload) -> TopB:
    """An empty :class:`TopB`; ``payload`` gives the dtypes of the carried values."""
    pl = jax.tree.map(
        lambda x: jnp.zeros((batch_size,) + jnp.shape(x)[1:], jnp.asarray(x).dtype), payload
    )
    return TopB(
        jnp.full((batch_size,), -1, jnp.int32), jnp.zeros((batch_size,), jnp.int32), pl
    )


def _top_passes(score, item, payload, batch_size):
    """``batch_size`` arg-max passes (first position on ties) over candidate arrays."""

    def pick(sc, _):
        j = jnp.argmax(sc).astype(jnp.int32)
        out = (sc[j], item[j], jax.tree.map(lambda x: x[j], payload))
        return sc.at[j].set(-1), out

    _, (top, items, pl) = jax.lax.scan(pick, score, None, length=batch_size)
    return TopB(top, items.astype(jnp.int32), pl)


def block_top(keys: jax.Array, idx: jax.Array, eligible: jax.Array, batch_size: int,
              payload=()) -> TopB:
    """The ``b`` smallest ``(key, index)`` pairs among the eligible items of one block.

    Args:
      keys: int32 ``[B]`` order keys of the block's items.
      idx: int32 ``[B]`` their item indices, increasing.
      eligible: bool ``[B]``: unseen and owned by this block.
      batch_size: static ``b``.
      payload: pytree of ``[B]`` arrays to carry along with the chosen items.

    Returns:
      A :class:`TopB`, best first (ties broken by the lower index).
    """
    score = jnp.where(eligible, _KEY_MAX - keys, jnp.int32(-1))
    return _top_passes(score, idx, payload, batch_size)


def merge_top(a: TopB, b: TopB, batch_size: int) -> TopB:
    """The best ``b`` of two :class:`TopB` sets, where every item of ``a`` has a lower
    index than every item of ``b`` (blocks visited in increasing index order).

    Concatenating ``a`` before ``b`` and taking first-position arg-maxes breaks equal
    keys by the lower index, i.e. exactly the ``(key, index)`` order.
    """
    if batch_size == 1:
        take_b = b.score[0] > a.score[0]
        return jax.tree.map(lambda x, y: jnp.where(take_b, y, x), a, b)
    cat = jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)
    return _top_passes(cat.score, cat.item, cat.payload, batch_size)


def finish_top(top: TopB, state: SamplerState, arm: jax.Array | int, limit=None):
    """Turn the merged :class:`TopB` into a batch and the new sampler state.

    The counterpart of :func:`take_batch` for the blockwise search: the same ``valid``
    slots, the same items in them and the same new state.

    Returns:
      ``(items int32 [b], valid bool [b], new_state, payload)``.
    """
    batch_size = top.score.shape[0]
    valid = top.score >= 0
    if limit is not None:
        valid = valid & (jnp.arange(batch_size) < limit)
    n_new = jnp.sum(valid, dtype=jnp.int32)
    last = jnp.maximum(n_new - 1, 0)
    new_state = _advance(state, arm, n_new, _KEY_MAX - top.score[last], top.item[last])
    return top.item, valid, new_state, top.payload
