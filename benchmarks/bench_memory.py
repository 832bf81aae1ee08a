"""Memory of the identification kernel as the number of items n grows (SPEC 2.2).

Compiles the vmapped kernel for ``R`` replicates and ``K`` arms on synthetic truth
(rows regenerated on demand, never a ``[K, n]`` array) for n = 1k, 10k, 100k and reads
XLA's own accounting (``compiled.memory_analysis()``): the bytes of the loop state
(the scan carry, which is what a seen-mask design would make ``R K n``), of the
outputs, and the peak temporaries. The kernel's state is O(R K). Rows of up to
``item_block`` items (``Config.item_block``, default ``jaxeval._identification.ITEM_BLOCK``)
are handled whole, one row (keys, truth, predictions) per replicate at a time, so the
temporaries are O(R n r) there; longer rows are streamed in blocks of ``item_block``
items, so the temporaries are O(R item_block r) whatever n. A seen-mask design would
add ``R K n`` bytes of state (shown for comparison).

``--item-block`` overrides the block size (``--item-block 0`` = whole rows for every n,
the kernel before blocks existed); ``--time`` also runs each compiled program once
(after a warm-up run) and reports the wall time of the run, for the speed cost of the
blocks (compile time is reported separately).

Usage (from the repository root):

    python benchmarks/bench_memory.py --R 64 --K 10 --ns 1000 10000 100000
    python benchmarks/bench_memory.py --R 64 --K 10 --ns 10000 --item-block 0 --time
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
from bench_args import at_least_one, at_least_two_arms

from jaxeval import _identification as idn


def _mib(x):
    return x / 2**20


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--R", type=int, default=64)
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--ns", nargs="+", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--policy", default="pulse")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--item-block", type=int, default=idn.ITEM_BLOCK,
                    help="Config.item_block (0: whole rows, no blocks)")
    ap.add_argument("--time", action="store_true", help="also time one run of each program")
    args = ap.parse_args(argv)
    if args.item_block < 0:
        ap.error(f"--item-block: must be 0 (whole rows) or a positive block size, got "
                 f"{args.item_block}")
    at_least_one(ap, args, ("R", "K", "calls", "ns"))
    at_least_two_arms(ap, args.K)
    over = [n for n in args.ns if args.calls > args.K * n]
    if over:
        ap.error(f"--calls: a budget of {args.calls} calls exceeds K*n = {args.K * min(over)} "
                 f"(--K {args.K}, --ns {min(over)}); at most K*n for every n")

    print(f"R = {args.R} replicates, K = {args.K}, policy {args.policy}, synthetic truth "
          f"(rank 4), budget {args.calls} calls, kinds eb+hoeffding, item_block "
          f"{args.item_block or 'whole rows'}")
    print()
    extra = " compile s | run s |" if args.time else ""
    print("| n | blocks | loop state (carry) MiB | outputs MiB | peak temporaries MiB | "
          "seen-mask state would be MiB |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|" if args.time else ""))
    for n in args.ns:
        block = args.item_block if args.item_block > 0 else n
        cfg = idn.Config(args.policy, args.K, n, budgets=(args.calls // 2, args.calls),
                         truth="synthetic", rank=4, item_block=block)
        data = idn.dummy_data(cfg)
        params = idn.Params.make()
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(args.R))
        fn = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                     static_argnums=3)
        t0 = time.perf_counter()
        compiled = fn.lower(keys, data, params, cfg).compile()
        t_compile = time.perf_counter() - t0
        mem = compiled.memory_analysis()
        # the carry: one replicate's initial loop state, times R
        def init_state(k, data=data, cfg=cfg, params=params):
            truth = idn._setup(k, data, cfg, params)[1]
            return idn._init_state(truth, data, cfg, params)

        leaves = jax.tree.leaves(jax.eval_shape(init_state, keys[0]))
        state_bytes = args.R * sum(x.size * x.dtype.itemsize for x in leaves)
        mask_bytes = args.R * args.K * n  # one bool per (replicate, arm, item)
        timing = ""
        if args.time:
            jax.block_until_ready(compiled(keys, data, params))  # warm-up
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(keys, data, params))
            timing = f" {t_compile:.1f} | {time.perf_counter() - t0:.2f} |"
        print(f"| {n} | {cfg.num_blocks if cfg.blocked else 'whole'} | "
              f"{_mib(state_bytes):.3f} | {_mib(mem.output_size_in_bytes):.3f} | "
              f"{_mib(mem.temp_size_in_bytes):.1f} | {_mib(mask_bytes):.1f} |{timing}",
              flush=True)


if __name__ == "__main__":
    main()
