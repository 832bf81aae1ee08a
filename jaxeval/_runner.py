"""Chunked, sharded execution of Monte Carlo replicates.

One concept: run ``replicate_fn(key, *operands) -> pytree`` for replicates
``start, start + 1, ..., start + n_replicates - 1``, where replicate ``i`` always
gets ``jax.random.fold_in(base_key, i)``. Replicates are vmapped in chunks of a
fixed (padded) shape, so memory is bounded by the chunk size and the program is
compiled once; each chunk is spread over a one-dimensional ``"rep"`` device mesh
with :func:`jax.shard_map` (explicit axis type), so the same code runs on one CPU,
eight fake CPU devices, a GPU node, or -- after ``jax.distributed.initialize`` --
every device of every process.

Because a replicate's key depends only on its index, results do not depend on
the chunk size, the device count, the process count or the start offset; the
tests check this bit for bit.

The host side (this module's only host work) moves each finished chunk to numpy,
overlapping the transfer of chunk ``c`` with the computation of chunk ``c + 1``,
and prints one progress line per chunk to stderr.
"""

from __future__ import annotations

import collections
import inspect
import math
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = [
    "run_replicates",
    "ReplicatePlan",
    "as_key",
    "Progress",
]

AXIS = "rep"
# Replicates vmapped together on one device. Results are bit-identical for a fixed
# lane count (XLA may vectorise a reduction differently for another batch width).
DEFAULT_LANES = 32
# Compiled chunk programs, keyed by (per-device chunk, lanes, devices, operand avals, ...)
# under their replicate function, at most _PLAN_CACHE_SIZE in all (least recently used
# dropped first). A program refers to its function weakly and is held in a weak-keyed
# map, so a function and what it captures (a closure over a large array, say) are
# freed with the caller's last reference, program included. Functions that cannot be
# weakly referenced, and bound methods (a new object at every attribute access), go to
# _PLAN_CACHE, which holds them strongly (bounded by the same total).
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PLAN_CACHE: collections.OrderedDict = collections.OrderedDict()
_PLAN_ORDER: collections.OrderedDict = collections.OrderedDict()  # LRU over both
_PLAN_CACHE_SIZE = 32


def _weakly_held(fn: Any) -> bool:
    if inspect.ismethod(fn):
        return False
    try:
        weakref.ref(fn)
        hash(fn)
    except TypeError:
        return False
    return True


def _order_key(fn: Any, key: tuple) -> tuple:
    return ("weak", id(fn), key) if _weakly_held(fn) else ("strong", fn) + key


def _plan_get(fn: Any, key: tuple) -> tuple[Callable, dict] | None:
    if _weakly_held(fn):
        hit = _PLANS.get(fn, {}).get(key)
    else:
        hit = _PLAN_CACHE.get((fn,) + key)
    if hit is not None and _order_key(fn, key) in _PLAN_ORDER:
        _PLAN_ORDER.move_to_end(_order_key(fn, key))
    return hit


def _plan_put(fn: Any, key: tuple, plan: tuple[Callable, dict]) -> None:
    okey = _order_key(fn, key)
    if _weakly_held(fn):
        _PLANS.setdefault(fn, {})[key] = plan
        _PLAN_ORDER[okey] = (weakref.ref(fn), key)
    else:
        _PLAN_CACHE[(fn,) + key] = plan
        _PLAN_ORDER[okey] = None
    _PLAN_ORDER.move_to_end(okey)
    while len(_PLAN_ORDER) > _PLAN_CACHE_SIZE:
        old, where = _PLAN_ORDER.popitem(last=False)
        if where is None:  # a strongly held plan
            _PLAN_CACHE.pop(old[1:], None)
        else:
            f = where[0]()
            if f is not None and f in _PLANS:
                _PLANS[f].pop(where[1], None)


def _cached_plans() -> list[Callable]:
    """Every compiled chunk program still held (for tests and diagnostics)."""
    out = [fn for fn, _ in _PLAN_CACHE.values()]
    for plans in list(_PLANS.values()):
        out += [fn for fn, _ in plans.values()]
    return out


def _devices_key(devices) -> tuple:
    """The devices' part of a plan-cache key: ``(platform, id)`` per device.

    Device ids are unique within one platform only (a CPU and a GPU both have a
    device 0), and a compiled plan is bound to its mesh's devices.
    """
    return tuple((d.platform, d.id) for d in devices)


# XLA:CPU keeps each compiled program's machine code in memory mappings of its own
# (about two dozen per program) for as long as a jit cache holds the program, and Linux
# refuses a process more than vm.max_map_count mappings (65530 by default): past that,
# XLA aborts mid-compilation ("LLVM ERROR: Unable to allocate section memory!") and the
# process is lost. A long session that compiles thousands of configurations (a sweep
# over datasets, k and methods) can get there, so before compiling, jaxeval clears
# JAX's caches when the process holds more than this share of the limit, and warns.
MAP_PRESSURE = 0.8


def _max_map_count() -> int | None:
    """``vm.max_map_count`` (Linux), or None where it cannot be read."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _maps_held() -> int | None:
    """How many memory mappings this process holds (Linux), or None."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


_MAPS_AFTER_CLEAR: list[int] = []  # what a clear left: clear again only past it + 5%


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised here that points at the first caller
    outside jaxeval (the paths into this module differ in depth)."""
    import os

    pkg = os.path.dirname(os.path.abspath(__file__))
    f, level = sys._getframe(1), 1
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(pkg + os.sep):
        f, level = f.f_back, level + 1
    return level


def relieve_map_pressure(where: str) -> bool:
    """Clear JAX's compilation caches when this process nears Linux's mapping limit.

    Returns whether it cleared them (with a ``RuntimeWarning`` naming ``where``); a
    no-op where ``/proc`` cannot be read. The programs compile again when next used.
    Where a clear freed little (the mappings are someone else's: memory-mapped files,
    other libraries), it clears again only once the count has grown by another 5% of
    the limit, not at every compilation.
    """
    limit = _max_map_count()
    held = _maps_held() if limit else None
    if held is None or held <= MAP_PRESSURE * limit:
        return False
    if _MAPS_AFTER_CLEAR and held <= _MAPS_AFTER_CLEAR[-1] + 0.05 * limit:
        return False
    jax.clear_caches()
    after = _maps_held()
    _MAPS_AFTER_CLEAR[:] = [held if after is None else after]
    warnings.warn(
        f"{where}: this process held {held} memory mappings of the {limit} Linux allows "
        "(vm.max_map_count), about two dozen per compiled XLA program JAX keeps, and XLA "
        f"aborts the process past the limit; JAX's compilation caches were cleared "
        f"({after} mappings left; programs compile again when used). Raising "
        "vm.max_map_count keeps them.",
        RuntimeWarning,
        stacklevel=_user_stacklevel(),
    )
    return True


def _int_key(seed: int) -> jax.Array:
    """``jax.random.key(seed)`` for every seed in ``[0, 2**63)``, x64 mode on or off.

    With 64-bit mode off, ``jax.random.key`` keeps only the low 32 bits of an int
    seed, so ``1`` and ``2**32 + 1`` would silently give the same stream. For the
    default threefry keys the key data of a 64-bit seed is ``[seed >> 32, seed &
    0xFFFFFFFF]`` (what x64 mode gives), built here directly; another key
    implementation gets seeds below ``2**32`` only.
    """
    if seed < 2**32 or jax.config.jax_enable_x64:
        return jax.random.key(seed)
    if str(jax.random.key_impl(jax.random.key(0))) == "threefry2x32":
        data = np.array([seed >> 32, seed & 0xFFFFFFFF], dtype=np.uint32)
        return jax.random.wrap_key_data(jnp.asarray(data), impl="threefry2x32")
    raise ValueError(
        f"seed {seed} >= 2**32: with 64-bit mode off and the "
        f"{jax.random.key_impl(jax.random.key(0))} PRNG, JAX keeps only a seed's low 32 "
        "bits; use a seed below 2**32 or enable jax_enable_x64"
    )


_KEY_EXPECTED = ("a non-negative int seed, a PRNG key (jax.random.key) or raw uint32[2] "
                 "key data")


def _concrete_int(seed: Any) -> int | None:
    """``seed`` as an int when it is one (a Python or NumPy int, or a concrete 0-d
    integer array), else None; bools are not ints here."""
    if isinstance(seed, (bool, np.bool_)):
        return None
    if isinstance(seed, (int, np.integer)):
        return int(seed)
    if isinstance(seed, (np.ndarray, jax.Array)) and seed.shape == () \
            and jnp.issubdtype(seed.dtype, jnp.integer):
        try:
            return int(seed)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError):
            return None
    return None


def concrete_array(value: Any) -> np.ndarray | None:
    """``value`` as a float64 NumPy array, or None for a traced (abstract) value: the
    argument checks that can only look at concrete values use it."""
    try:
        return np.asarray(value, np.float64)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def check_int(name: str, value: Any, lo: int = 0, hi: int | None = None, *,
              why: str = "") -> int:
    """``value`` as a Python int, checked against ``[lo, hi]``: the parser of every
    integer argument (counts, sizes, ranks, int-only seeds), so a Python int, a NumPy
    int and a concrete 0-d integer array (NumPy or JAX) mean the same everywhere; a
    bool, a float (even ``2.0``) or a traced value is not an int here.

    Args:
      name: how errors name the argument: ``"k: expected an integer in [1, 540] (fewer
        than the 541 items), got 600"``.
      value: the argument.
      lo, hi: the inclusive range (``hi=None``: no upper bound).
      why: what the range means, said after it in the error (``"the 541 items less
        the 20 anchors"``).

    Raises:
      TypeError: ``value`` is not an integer.
      ValueError: it is outside ``[lo, hi]``.

    Example:
      >>> import numpy as np
      >>> check_int("k", np.array(20), 1, 100)
      20
    """
    v = _concrete_int(value)
    if v is not None and lo <= v and (hi is None or v <= hi):
        return v
    rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
    expected = f"{name}: expected an integer {rng}{f' ({why})' if why else ''}"
    if v is None:
        shown = value.item() if isinstance(value, np.generic) else value  # (np.False_)
        raise TypeError(f"{expected}, got {type(value).__name__} {shown!r}")
    raise ValueError(f"{expected}, got {v}")


def as_key(seed: Any, name: str = "seed", where: str = "") -> jax.Array:
    """A typed PRNG key from an int seed, a typed key, or raw ``uint32[2]`` key data.

    The parser of the seeds that take a key (``run_replicates``, ``synthetic_matrix``'s
    ``key_or_seed``, ``fit_factorization``, ``fit_anchors`` and its predictor,
    campaigns), so the same seed means the same stream in each. Seeds that must be ints
    (``simulate_identification``'s, which also seeds NumPy draws; ``split``,
    ``protocol_split``, ``learn_lam0``) go through :func:`check_int`, which reads the
    same ints (a 0-d integer array included) but not keys. An int seed here is
    any Python or NumPy int, or a 0-d integer array, in ``[0, 2**63)`` (all 64 bits
    count, x64 mode on or off); a traced 0-d integer (inside ``jit``/``vmap``) is
    ``jax.random.key`` of it.

    Args:
      seed: the seed or key.
      name, where: how errors name the argument (``f"{where}{name}: ..."``).

    Raises:
      TypeError: anything else (a float, a bool, None, a key array, ...).
      ValueError: a negative int, or one of ``2**63`` or more.

    Example:
      >>> import jax
      >>> k = as_key(0)
      >>> bool((jax.random.key_data(k) == jax.random.key_data(jax.random.key(0))).all())
      True
    """
    what = f"{where}{name}"
    value = _concrete_int(seed)
    if value is not None:
        if not 0 <= value < 2**63:
            raise ValueError(f"{what}: expected a non-negative int seed below 2**63, got {value}")
        return _int_key(value)
    if seed is None or isinstance(seed, (str, bytes, bool, np.bool_, float, np.floating,
                                         complex)):
        raise TypeError(f"{what}: expected {_KEY_EXPECTED}, got {type(seed).__name__} "
                        f"{seed!r}")
    given = seed if isinstance(seed, jax.Array) else np.asarray(seed)
    if jnp.issubdtype(given.dtype, jax.dtypes.prng_key):
        if given.shape != ():
            raise TypeError(f"{what}: expected one PRNG key, got an array of keys of shape "
                            f"{given.shape} (vmap over keys instead)")
        return given
    if given.shape == () and given.dtype.kind in "iu":  # traced: jit/vmap over seeds
        return jax.random.key(given)
    if given.dtype == np.uint32 and given.shape == (2,):
        return jax.random.wrap_key_data(jnp.asarray(given))
    raise TypeError(f"{what}: expected {_KEY_EXPECTED}, got dtype {given.dtype} and shape "
                    f"{given.shape}")


def int_seed(seed: Any, key: jax.Array, purpose: int) -> int:
    """``seed`` itself when it is an int (or a concrete 0-d integer array), else an
    int in ``[0, 2**31 - 1)`` drawn from ``fold_in(key, purpose)`` (for the NumPy and
    int-seeded steps of a keyed call); int32 draws, so x64 mode draws the same.

    Example:
      >>> import jax
      >>> int_seed(7, jax.random.key(0), 1), 0 <= int_seed(jax.random.key(0), jax.random.key(0), 1)
      (7, True)
    """
    value = _concrete_int(seed)
    if value is not None:
        return value
    return int(jax.random.randint(jax.random.fold_in(key, purpose), (), 0, 2**31 - 1,
                                  jnp.int32))


def default_impl_key(seed: Any) -> jax.Array:
    """:func:`as_key`, refusing keys of another PRNG implementation than the default
    (their key data would be re-wrapped as the default's and fail, or mean another
    stream)."""
    key = as_key(seed)
    if str(jax.random.key_impl(key)) != str(jax.random.key_impl(jax.random.key(0))):
        raise ValueError(
            f"seed: keys of the default PRNG implementation "
            f"({jax.random.key_impl(jax.random.key(0))}) are expected, got "
            f"{jax.random.key_impl(key)}"
        )
    return key


def stage_printer(where: str, progress: Any) -> Callable[[str], None]:
    """``say(msg)`` for a long call's stages: a line ``"{where}: {msg} [12 s]"`` on
    stderr (seconds since this call) when ``progress`` is true, nothing otherwise;
    ``progress`` must be a bool.

    Example:
      >>> say = stage_printer("fit", False)
      >>> say("quiet")
    """
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress: expected True or False, got {progress!r}")
    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if progress:
            print(f"{where}: {msg} [{time.perf_counter() - t0:.0f} s]", file=sys.stderr,
                  flush=True)

    return say


class Progress:
    """One line per chunk on stderr: done / total, replicates per second, ETA.

    The rate is measured from :meth:`compiled` (the end of the first chunk's
    tracing and compilation) when the caller reports it, so neither the first
    line's ETA nor the later rates carry the compile time, and chunks that ran
    concurrently do not show as a burst. Without that report, the rate excludes
    the first chunk once a later chunk has finished. A task done in one chunk
    prints its whole run's rate, compilation included (its work may have run before
    the dispatch returned).

    Example:
      >>> import io
      >>> out = io.StringIO()
      >>> p = Progress(8, stream=out)
      >>> p.compiled()
      >>> p.update(4)
      >>> "4/8 replicates" in out.getvalue()
      True
    """

    def __init__(
        self, total: int, *, label: str = "replicates", enabled: bool = True, stream: Any = None
    ) -> None:
        self.total = int(total)
        self.label = label
        self.enabled = enabled
        self.stream = stream
        self.done = 0
        self.t0 = time.perf_counter()
        self.t_first: float | None = None
        self.n_first = 0
        self.n_chunks = 0
        self.t_compiled: float | None = None

    def compiled(self) -> None:
        """Mark the end of compilation (the first call only counts)."""
        if self.t_compiled is None:
            self.t_compiled = time.perf_counter()

    def rate(self, now: float) -> float:
        """Units per second so far (see the class docstring for the clock used)."""
        if self.n_chunks <= 1 and self.done >= self.total:
            # a task of one chunk: its work may have run before the dispatch returned
            # (a synchronous backend), i.e. before compiled(); its one line gives the
            # whole run's rate, compilation included
            return self.done / max(now - self.t0, 1e-9)
        if self.t_compiled is not None:
            return self.done / max(now - self.t_compiled, 1e-9)
        if self.t_first is not None and self.done > self.n_first:
            return (self.done - self.n_first) / max(now - self.t_first, 1e-9)
        return self.done / max(now - self.t0, 1e-9)

    def update(self, n: int) -> None:
        now = time.perf_counter()
        self.done += int(n)
        self.n_chunks += 1
        if self.t_first is None:
            self.t_first, self.n_first = now, self.done
        rate = self.rate(now)
        if not self.enabled:
            return
        left = self.total - self.done
        eta = left / rate if rate > 0 else float("inf")
        width = 24
        filled = int(round(width * self.done / max(self.total, 1)))
        bar = "#" * filled + "." * (width - filled)
        line = (
            f"[jaxeval] [{bar}] {self.done}/{self.total} {self.label} "
            f"({100.0 * self.done / max(self.total, 1):5.1f}%)  {_fmt_rate(rate)}  "
            f"elapsed {_fmt_s(now - self.t0)}  ETA {_fmt_s(eta)}"
        )
        if self.t_compiled is None and self.n_chunks == 1 and left > 0:
            # (no compile report: the first rate counts compiling as work)
            line += " (first chunk, compilation included)"
        stream = self.stream if self.stream is not None else sys.stderr
        print(line, file=stream, flush=True)


def _fmt_rate(r: float) -> str:
    """Whole numbers from 10/s up, two significant digits below (0.5/s, not 0/s), and
    the time per unit below 0.1/s (52.0s each, not 0.019/s)."""
    if r >= 10:
        return f"{r:,.0f}/s"
    if r >= 0.1 or r <= 0:
        return f"{r:.2g}/s"
    return f"{_fmt_s(1.0 / r)} each"


def _fmt_s(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int((s % 3600) // 60):02d}m"


def _check_devices(devices: Any) -> tuple:
    """``devices`` (``None``: ``jax.devices()``) as a tuple of JAX devices, refused by
    name when it is not one."""
    if isinstance(devices, (str, bytes)) or (
        devices is not None and not isinstance(devices, Iterable)
    ):
        raise TypeError(f"devices: expected a sequence of JAX devices (e.g. "
                        f"jax.devices('cpu')), got {devices!r}")
    devs = tuple(jax.devices() if devices is None else devices)
    bad = [d for d in devs if not isinstance(d, jax.Device)]
    if bad:
        raise TypeError(f"devices: expected JAX devices (e.g. jax.devices('cpu')), "
                        f"got {bad[0]!r}")
    if not devs:
        raise ValueError("devices: expected at least one device, got none")
    return devs


class ReplicatePlan:
    """A compiled chunk program: ``chunk_size`` replicates spread over ``devices``.

    ``chunk_size`` is rounded up to a multiple of ``lanes`` times the device
    count; every call runs the same padded shape, so the program is traced and
    compiled once. On each device the chunk is a loop over blocks of ``lanes``
    vmapped replicates.
    Use :meth:`run` for a range of replicates (padding dropped) or
    :meth:`iter_ranges` to stream chunks to the host.

    Args:
      replicate_fn: ``replicate_fn(key, *operands) -> pytree of arrays``; pure and
        jittable. Shapes must not depend on the key.
      chunk_size: replicates per chunk (memory is proportional to it).
      devices: the devices of the replicate mesh (default: ``jax.devices()``, i.e.
        every device of every process).
      operands: pytrees of arrays passed to every replicate (replicated on every device);
        passing data here instead of closing over it keeps it out of the program.
      lanes: replicates vmapped together per device step. Results are
        bit-identical for a fixed ``lanes`` whatever the chunk size, device count
        or start; larger values vectorise more (use hundreds on a GPU).
      with_index: call ``replicate_fn(key, i, *operands)`` with the replicate's
        index ``i`` (a uint32 scalar), e.g. to assign replicates to cells of a design.
    """

    def __init__(
        self,
        replicate_fn: Callable[..., Any],
        chunk_size: int,
        *,
        devices: Sequence[Any] | None = None,
        operands: Sequence[Any] = (),
        lanes: int = DEFAULT_LANES,
        with_index: bool = False,
    ) -> None:
        devs = _check_devices(devices)
        chunk_size = check_int("chunk_size", chunk_size, 1)
        lanes = check_int("lanes", lanes, 1)
        if not callable(replicate_fn):
            raise TypeError(f"replicate_fn: expected a function (key, *operands) -> pytree, "
                            f"got {type(replicate_fn).__name__} {replicate_fn!r}")
        if not isinstance(operands, (tuple, list)):
            # (an array would be unpacked into one operand per row)
            raise TypeError(f"operands: expected a tuple of operands, got "
                            f"{type(operands).__name__}; pass (x,) for one operand")
        if not isinstance(with_index, (bool, np.bool_)):
            raise TypeError(f"with_index: expected True or False, got {with_index!r}")
        self.replicate_fn = replicate_fn
        self.with_index = bool(with_index)
        self.devices = devs
        self.n_devices = len(devs)
        self.lanes = int(lanes)
        step = self.n_devices * self.lanes
        self.per_device = -(-int(chunk_size) // step) * self.lanes
        self.chunk_size = self.per_device * self.n_devices
        self.mesh = jax.make_mesh(
            (self.n_devices,), (AXIS,), axis_types=(AxisType.Explicit,), devices=devs
        )
        self._rep = NamedSharding(self.mesh, P())
        self._split = NamedSharding(self.mesh, P(AXIS))
        leaves, treedef = jax.tree.flatten(tuple(operands))
        for x in leaves:
            if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
                raise TypeError(
                    "operands: a typed PRNG key cannot be an operand (it is copied to "
                    "every device as an array); pass jax.random.key_data(key) and "
                    "rebuild it with jax.random.wrap_key_data inside replicate_fn")
        leaves = [x if isinstance(x, jax.Array) else np.asarray(x) for x in leaves]
        avals = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        self._operand_avals = jax.tree.unflatten(treedef, avals)
        self._operand_sig = (treedef, tuple((a.shape, str(a.dtype)) for a in avals))
        self.operands = jax.tree.unflatten(treedef, [self._global(x, self._rep) for x in leaves])
        self.multiprocess = any(d.process_index != jax.process_index() for d in devs)
        self._fn, shapes = self._compiled()
        # one replicate's output shapes, kept with the program: tracing the function
        # again for them cost more than a small study's whole run (0.19 of 0.21 s for
        # 160 replicates of K = 3); they depend on the dtype settings too
        # (run() checks them against the first chunk's results all the same: a function
        # reading a Python global, or a flag outside this key, can change them)
        mode = (bool(jax.config.jax_enable_x64), str(jax.random.key(0).dtype),
                str(getattr(jax.config, "jax_explicit_x64_dtypes", "")))
        self._shapes = shapes
        self._mode = mode
        if mode not in shapes:
            key_aval = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
            if self.with_index:
                shapes[mode] = jax.eval_shape(
                    lambda k, *o: replicate_fn(k, jnp.uint32(0), *o), key_aval,
                    *self._operand_avals)
            else:
                shapes[mode] = jax.eval_shape(
                    lambda k, *o: replicate_fn(k, *o), key_aval, *self._operand_avals)
        self.out_shapes = shapes[mode]

    # ------------------------------------------------------------------ compile
    def _compiled(self) -> tuple[Callable, dict]:
        """The chunk program and its output shapes by dtype mode, from the plan cache."""
        cache_key = (self.per_device, self.lanes, _devices_key(self.devices),
                     self._operand_sig, self.with_index)
        try:
            hit = _plan_get(self.replicate_fn, cache_key)
        except TypeError:  # unhashable replicate_fn
            hit, cache_key = None, None
        if hit is not None:
            return hit
        relieve_map_pressure("jaxeval: compiling a replicate program")
        if cache_key is not None and _weakly_held(self.replicate_fn):
            # (held weakly: the cached program must not keep its function alive; it is
            # dropped from the cache with the function, so the reference never dies
            # while the program can still be traced)
            ref = weakref.ref(self.replicate_fn)
        else:
            fn_strong = self.replicate_fn

            def ref():
                return fn_strong

        lanes = self.lanes
        with_index = self.with_index

        def local(key_data, idx, *ops):
            base = jax.random.wrap_key_data(key_data)

            replicate_fn = ref()

            def block(ib):
                keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(ib)
                if with_index:
                    return jax.vmap(lambda k, i: replicate_fn(k, i, *ops))(keys, ib)
                return jax.vmap(lambda k: replicate_fn(k, *ops))(keys)

            # Always a loop over blocks of `lanes` replicates: the vmapped program
            # (and so every floating-point reduction in it) has the same shape
            # whatever the chunk size and device count.
            out = jax.lax.map(block, idx.reshape(-1, lanes))
            return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:]), out)

        n_ops = len(self._operand_avals)
        sharded = jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(P(), P(AXIS)) + (P(),) * n_ops,
            out_specs=P(AXIS),
            # Replicate functions are written for one replicate and know nothing of
            # the mesh (e.g. scans with constant initial carries), so skip the
            # varying-manual-axes type check.
            check_vma=False,
        )
        plan = (jax.jit(sharded), {})
        if cache_key is not None:
            _plan_put(self.replicate_fn, cache_key, plan)
        return plan

    def _global(self, x: Any, sharding: NamedSharding) -> jax.Array:
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    # -------------------------------------------------------------------- run
    def _dispatch(self, key_data: np.ndarray, lo: int) -> Any:
        idx = (lo + np.arange(self.chunk_size, dtype=np.int64)).astype(np.uint32)
        idx_g = self._global(idx, self._split)
        key_g = self._global(key_data, self._rep)
        return self._fn(key_g, idx_g, *self.operands)

    def _to_host(self, out: Any, count: int) -> Any:
        if self.multiprocess:
            from jax.experimental import multihost_utils

            out = multihost_utils.process_allgather(out, tiled=True)
        return jax.tree.map(lambda a: np.asarray(a)[:count], out)

    def iter_ranges(
        self, seed: Any, ranges: Iterable[tuple[int, int]], *, progress: Progress | None = None
    ) -> Iterator[tuple[int, int, Any]]:
        """Yield ``(lo, hi, pytree of numpy arrays [hi - lo, ...])`` for each range.

        Each range must hold at most ``chunk_size`` replicates. The next chunk is
        dispatched before the previous one is copied to the host.

        Every dispatch starts at a multiple of ``lanes``, so replicate ``i`` always runs
        in lane ``i % lanes`` of its vmapped block: a program can round differently in
        different lanes (PULSE did, in the last bit), and a range starting elsewhere
        (``--range 40:64``, ``run(start=40)``) gave other bits than the whole run. A
        range that the aligned window does not cover takes a second dispatch.
        """
        key = default_impl_key(seed)
        key_data = np.asarray(jax.random.key_data(key))
        # every range is checked before any is computed (a bad one late in the list used
        # to throw away the chunks before it)
        ranges = [(check_int(f"ranges[{i}] start", lo, 0), check_int(f"ranges[{i}] end", hi, 0))
                  for i, (lo, hi) in enumerate(ranges)]
        for lo, hi in ranges:
            if not 0 <= lo < hi or hi - lo > self.chunk_size:
                raise ValueError(
                    f"range [{lo}, {hi}) must be non-empty, non-negative and hold at most "
                    f"chunk_size={self.chunk_size} replicates"
                )
            if hi > 2**32:
                raise ValueError(f"replicate indices must stay below 2**32, got {hi}")
        def collect(lo: int, hi: int, outs: list) -> tuple[int, int, Any]:
            parts = []
            for a, out in outs:
                s, e = max(lo, a) - a, min(hi, a + self.chunk_size) - a
                parts.append(jax.tree.map(lambda x, s=s, e=e: x[s:e], self._to_host(out, e)))
            res = parts[0] if len(parts) == 1 else jax.tree.map(
                lambda *xs: np.concatenate(xs), *parts)
            return lo, hi, res

        def done(lo: int, hi: int, outs: list):
            # counted once the caller has taken the range (a study has written its chunk
            # by then: a progress line never counts a chunk that a kill would lose)
            yield collect(lo, hi, outs)
            if progress is not None:
                progress.update(hi - lo)

        pending: tuple[int, int, list] | None = None
        for lo, hi in ranges:
            starts = range(lo - lo % self.lanes, hi, self.chunk_size)
            outs = [(a, self._dispatch(key_data, a)) for a in starts]
            if progress is not None:
                progress.compiled()  # dispatch returns once the program is compiled
            if pending is not None:
                yield from done(*pending)
            pending = (lo, hi, outs)
        if pending is not None:
            yield from done(*pending)

    def run(self, seed: Any, start: int, n_replicates: int, *, progress: bool = True) -> Any:
        """Replicates ``start .. start + n_replicates - 1`` as numpy arrays."""
        if not isinstance(progress, (bool, np.bool_)):
            raise TypeError(f"progress: expected True or False, got {progress!r}")
        start = check_int("start", start, 0)
        n_replicates = check_int("n_replicates", n_replicates, 1)
        if start + n_replicates > 2**32:
            raise ValueError(f"start + n_replicates must stay at most 2**32 (replicate indices "
                             f"are uint32), got start={start} and n_replicates={n_replicates}")
        try:
            out = jax.tree.map(
                lambda s: np.empty((n_replicates,) + tuple(s.shape), s.dtype), self.out_shapes
            )
        except MemoryError:
            need = sum(n_replicates * np.prod(s.shape) * np.dtype(s.dtype).itemsize
                       for s in jax.tree.leaves(self.out_shapes))
            raise MemoryError(
                f"n_replicates={n_replicates}: the results need {need / 2**30:.1f} GiB of host "
                "memory, more than this process can have; run fewer replicates per call "
                "(run_replicates' start= continues where a call stopped; another seed adds "
                "replicates to a simulate_identification) or a study (jaxeval.run_study), "
                "which saves each chunk to disk") from None
        # chunk ends at start's lane block plus whole chunks: one dispatch per range
        # (listed after the buffers: a run too large for the host is refused first)
        stop, first = int(start) + int(n_replicates), int(start) - int(start) % self.lanes
        ends = list(range(first + self.chunk_size, stop, self.chunk_size))
        ranges = list(zip([int(start), *ends], [*ends, stop]))
        prog = Progress(n_replicates, enabled=progress and jax.process_index() == 0)
        checked = False
        for lo, hi, res in self.iter_ranges(seed, ranges, progress=prog):
            if not checked:
                out = self._fit_buffers(out, res, n_replicates)
                checked = True
            sl = slice(lo - start, hi - start)
            for dst, src in zip(jax.tree.leaves(out), jax.tree.leaves(res)):
                dst[sl] = src
        return out

    def _fit_buffers(self, out: Any, res: Any, n_replicates: int) -> Any:
        """``out``, or new buffers shaped as the first chunk's results ``res`` where
        the expected output shapes were stale (the program was traced again since, e.g.
        after ``jax.clear_caches()`` with a global the function reads changed): writing
        into stale buffers would cast or broadcast the results without a word."""
        got = [(tuple(a.shape[1:]), np.dtype(a.dtype)) for a in jax.tree.leaves(res)]
        want = [(tuple(a.shape[1:]), a.dtype) for a in jax.tree.leaves(out)]
        if jax.tree.structure(res) == jax.tree.structure(out) and got == want:
            return out
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), res)
        self.out_shapes = self._shapes[self._mode] = shapes
        return jax.tree.map(lambda a: np.empty((n_replicates,) + a.shape[1:], a.dtype), res)


def capped_chunk(chunk_size: int, n: int, lanes: int, n_devices: int) -> int:
    """The replicates one dispatched chunk computes for a run of ``n``: ``chunk_size``
    rounded up to whole blocks of ``lanes`` on every device, and no larger than a
    power-of-two number of such steps holding ``n`` (a chunk beyond the run would
    compute padding only; powers of two keep runs of many sizes to a few compiled
    programs). Results do not depend on it.

    Example:
      >>> capped_chunk(1000, 1, 4, 1), capped_chunk(1000, 100, 4, 1), capped_chunk(64, 300, 8, 8)
      (4, 128, 64)
    """
    step = max(int(lanes), 1) * max(int(n_devices), 1)
    blocks = -(-int(n) // step)
    cap = step * (1 << max(blocks - 1, 0).bit_length())
    return min(-(-int(chunk_size) // step) * step, cap)


def chunk_ranges(lo: int, hi: int, chunk_size: int) -> list[tuple[int, int]]:
    """Split ``[lo, hi)`` into consecutive ranges of at most ``chunk_size``.

    Example:
      >>> chunk_ranges(0, 10, 4)
      [(0, 4), (4, 8), (8, 10)]
    """
    return [(a, min(a + chunk_size, hi)) for a in range(lo, hi, chunk_size)]


def run_replicates(
    replicate_fn: Callable[..., Any],
    seed: Any,
    n_replicates: int,
    *,
    chunk_size: int | None = None,
    start: int = 0,
    devices: Sequence[Any] | None = None,
    operands: Sequence[Any] = (),
    lanes: int = DEFAULT_LANES,
    progress: bool = True,
    with_index: bool = False,
) -> Any:
    """Run ``n_replicates`` Monte Carlo replicates in chunks over all devices.

    Replicate ``i`` (for ``i`` in ``start .. start + n_replicates - 1``) calls
    ``replicate_fn(jax.random.fold_in(base_key, i), *operands)``. Chunks of
    ``chunk_size`` replicates are split over a ``"rep"`` mesh of ``devices`` with
    :func:`jax.shard_map`, and each device loops over blocks of ``lanes``
    vmapped replicates; the last chunk is padded to the same shape (so nothing
    recompiles) and the padding dropped. For a given ``lanes`` the answer is
    bit-identical whatever ``chunk_size``, ``devices`` or ``start`` split.

    Args:
      replicate_fn: pure function ``(key, *operands) -> pytree of arrays`` whose
        output shapes do not depend on the key.
      seed: int seed, typed key, or raw ``uint32[2]`` key data (the base key).
      n_replicates: number of replicates (>= 1).
      chunk_size: replicates per chunk (bounds device memory; one progress line
        each); default: an eighth of the run. Rounded up to a multiple of ``lanes``
        times the device count.
      start: index of the first replicate (for resumed or split studies).
      devices: devices of the replicate mesh; default ``jax.devices()``.
      operands: pytrees of arrays handed to every replicate, replicated on each device.
      lanes: replicates vmapped together per device step (see above).
      progress: print one line per chunk to stderr (replicates/s and ETA).
      with_index: call ``replicate_fn(key, i, *operands)`` with the replicate's
        index ``i`` too (a uint32 scalar; e.g. replicate ``i`` plays cell ``i % I``
        of a design, so every cell is played equally often).

    Returns:
      The pytree of ``replicate_fn`` with numpy leaves and a leading axis of
      length ``n_replicates``.

    Example:
      >>> import jax
      >>> from jaxeval import run_replicates
      >>> f = lambda key: jax.random.uniform(key, (3,))
      >>> out = run_replicates(f, 0, 10, chunk_size=4, progress=False)
      >>> out.shape
      (10, 3)
      >>> bool((run_replicates(f, 0, 6, start=4, progress=False) == out[4:]).all())
      True
    """
    n_replicates = check_int("n_replicates", n_replicates, 1)
    start = check_int("start", start, 0)
    if chunk_size is None:  # about eight chunks: a progress line each, bounded memory
        chunk_size = -(-int(n_replicates) // 8)
    else:
        chunk_size = check_int("chunk_size", chunk_size, 1)
    if int(start) + int(n_replicates) > 2**32:
        raise ValueError(f"start + n_replicates must stay at most 2**32 (replicate indices are "
                         f"uint32), got start={start} and n_replicates={n_replicates}")
    # (checked here, before they size the chunk; an iterable of devices is read once)
    devices, lanes = _check_devices(devices), check_int("lanes", lanes, 1)
    chunk_size = capped_chunk(int(chunk_size), int(n_replicates), lanes, len(devices))
    plan = ReplicatePlan(
        replicate_fn, int(chunk_size), devices=devices, operands=operands, lanes=lanes,
        with_index=with_index,
    )
    return plan.run(seed, int(start), int(n_replicates), progress=progress)
