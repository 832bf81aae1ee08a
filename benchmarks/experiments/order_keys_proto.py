"""Would a cheaper item-order generator bring UCB-E to 100x banditeval? A measurement,
not a change to the package.

The UCB-E kernel (``run_identification``, IFEval, K = 10, b = 32, budget grid to 20% of
K n, no interval: the peers' work) is compiled three times, each with the per-replicate
order keys drawn another way, and timed against banditeval's own UCB-E (b = 32) in
interleaved rounds:

- ``threefry``: the package (``jaxeval._sampling.arm_keys``): one threefry2x32 block per
  item, its two output words xor-ed (``jax.random.bits`` under JAX's partitionable
  threefry), i.e. ``K n`` blocks per replicate;
- ``threefry-pairs``: the same generator, both output words used (two items per block,
  as JAX's non-partitionable ``jax.random.bits`` does): half the blocks;
- ``hash``: two threefry words per arm, then a keyed 32-bit integer hash per item
  (``lowbias32``'s multiply-xorshift rounds, applied twice around a key xor):
  no threefry block per item at all.

The second and third would change every seed's item orders (so every stored
identification result); they are monkeypatched here for the measurement only. The sort
of the keys (NumPy, through a callback) is the same for all three. Microseconds per
replicate (median over rounds) and the ratio to banditeval. BUILD_NOTES.md, "Thirtieth
session", has the figures.

    python benchmarks/experiments/order_keys_proto.py --rounds 9

``--parts`` instead times the pieces of the package's order table alone (the threefry
keys, the whole ``order_table``, ``np.sort`` of the same-sized rows, and
``_host_sorted_order``), microseconds per replicate over ``--chunk`` replicates:

    python benchmarks/experiments/order_keys_proto.py --parts
"""

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_banditeval import banditeval_ucbe, have_banditeval  # noqa: E402
from speed_problem import speed_problem  # noqa: E402

from jaxeval import _identification as idn  # noqa: E402
from jaxeval import _sampling as smp  # noqa: E402


def _stream_key(order_key, arm, synchronized):
    stream = jnp.int32(smp.SYNC_STREAM) if synchronized else jnp.asarray(arm, jnp.int32)
    return jax.random.fold_in(order_key, stream)


def _lowbias32(x):
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _pairs_keys_at(order_key, arm, idx, synchronized=False):
    kd = smp._threefry_data(_stream_key(order_key, arm, synchronized))
    i = jnp.asarray(idx).astype(jnp.uint32)
    b1, b2 = threefry2x32_p.bind(kd[..., 0], kd[..., 1], jnp.zeros_like(i), i >> 1)
    return (jnp.where((i & 1) == 0, b1, b2) >> 1).astype(jnp.int32)


def _pairs_arm_keys(order_key, arm, n, synchronized=False):
    kd = smp._threefry_data(_stream_key(order_key, arm, synchronized))
    j = jnp.arange((n + 1) // 2, dtype=jnp.uint32)
    b1, b2 = threefry2x32_p.bind(kd[..., 0], kd[..., 1], jnp.zeros_like(j), j)
    return (jnp.stack([b1, b2], -1).reshape(-1)[:n] >> 1).astype(jnp.int32)


def _hash_keys_at(order_key, arm, idx, synchronized=False):
    s = jax.random.bits(_stream_key(order_key, arm, synchronized), (2,), jnp.uint32)
    i = jnp.asarray(idx).astype(jnp.uint32)
    return (_lowbias32(_lowbias32(i + s[0]) ^ s[1]) >> 1).astype(jnp.int32)


def _hash_arm_keys(order_key, arm, n, synchronized=False):
    return _hash_keys_at(order_key, arm, jnp.arange(n), synchronized)


GENERATORS = {
    "threefry": (smp.arm_keys, smp.keys_at),
    "threefry-pairs": (_pairs_arm_keys, _pairs_keys_at),
    "hash": (_hash_arm_keys, _hash_keys_at),
}


def _parts(lanes: int, K: int = 10, n: int = 541, calls: int = 50) -> None:
    """Microseconds per replicate of the order table's pieces, ``lanes`` replicates."""
    keys = jax.random.split(jax.random.key(0), lanes)
    draw = jax.jit(jax.vmap(lambda k: jax.vmap(lambda a: smp.arm_keys(k, a, n))(
        jnp.arange(K))))
    table = jax.jit(jax.vmap(lambda k: smp.order_table(k, K, n).order))
    rows = np.asarray(draw(keys))

    def timed(f, *a):
        jax.block_until_ready(f(*a))
        t0 = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(f(*a))
        return 1e6 * (time.perf_counter() - t0) / calls / lanes

    print(f"threefry keys [{K}, {n}]      {timed(draw, keys):7.1f} us/replicate")
    print(f"order_table                 {timed(table, keys):7.1f} us/replicate")
    print(f"np.sort of the key rows     {timed(lambda r: np.sort(r, axis=-1), rows):7.1f}"
          " us/replicate")
    print(f"_host_sorted_order          {timed(smp._host_sorted_order, rows):7.1f}"
          " us/replicate")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--reps", type=int, default=1024)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--be-reps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--parts", action="store_true",
                    help="time the order table's pieces instead (see above)")
    args = ap.parse_args(argv)
    if args.parts:
        return _parts(args.chunk)

    # UCB-E never reads the item factors: zeros of the right shapes (fit=False)
    prob = speed_problem("ifeval", K=10, max_frac=0.2, seed=0, rank=8, fit=False)
    K, n, budgets, data, params = prob.K, prob.n, prob.budgets, prob.data, prob.params
    cfg = idn.Config("ucbe", num_arms=K, num_items=n, budgets=budgets, batch_size=32,
                     cs_kinds=())
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(
        jnp.arange(args.reps)).reshape(-1, args.chunk)

    runs = {}
    saved = (smp.arm_keys, smp.keys_at)
    for name, (arm_keys, keys_at) in GENERATORS.items():
        smp.arm_keys, smp.keys_at = arm_keys, keys_at
        try:
            fn = jax.jit(jax.vmap(lambda k, d, p: idn.run_identification(k, d, p, cfg),
                                  in_axes=(0, None, None)))
            compiled = fn.lower(keys[0], data, params).compile()
        finally:
            smp.arm_keys, smp.keys_at = saved
        jax.block_until_ready(compiled(keys[0], data, params))

        def run(compiled=compiled):
            t0 = time.perf_counter()
            for ks in keys:
                jax.block_until_ready(compiled(ks, data, params))
            return (time.perf_counter() - t0) / args.reps

        runs[name] = run
    if have_banditeval():
        import torch

        torch.set_num_threads(1)

        def be():
            t0 = time.perf_counter()
            for r in range(args.be_reps):
                rows = prob.instances[r % len(prob.instances)]
                banditeval_ucbe(prob.pool_scores[rows], budgets, a=1.0, batch_size=32, seed=r)
            return (time.perf_counter() - t0) / args.be_reps

        runs["banditeval (b=32)"] = be
    per = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            per[name].append(run())
    for name, sec in per.items():
        line = f"{name:<20} {1e6 * np.median(sec):9.1f} us/replicate"
        if "banditeval (b=32)" in per and not name.startswith("banditeval"):
            r = np.median(np.asarray(per["banditeval (b=32)"]) / np.asarray(sec))
            line += f"   {r:6.1f}x banditeval"
        print(line)


if __name__ == "__main__":
    main()
