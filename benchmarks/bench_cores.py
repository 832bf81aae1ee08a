"""How many cores the identification kernels use, on one or several CPU devices.

Same set-up as ``bench_speed.py`` (IFEval, K = 10, SPEC 6.1 budget grid to 20% of K*n,
rank-8 factorization): ``jit(vmap(run_identification))`` over 8 chunks of ``--chunk``
replicate keys, chunk ``i`` dispatched to device ``i mod d`` for ``d`` = 1 and (with
``--devices 2``) 2, warm, ``--rounds`` rounds; prints replicates/s and the process's CPU
time over wall time. The device count is an XLA flag, so it is set here before JAX starts.

    python benchmarks/bench_cores.py --policy pulse --b 1 --devices 2
    python benchmarks/bench_cores.py --policy ucbe --b 32 --devices 1
    python benchmarks/bench_cores.py --policy ucbe --b 32 --devices 2 --xla-sort
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--policy", default="pulse")
    ap.add_argument("--b", type=int, default=1, help="batch size")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--devices", type=int, default=2, help="fake CPU devices (1 or more)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--xla-sort", action="store_true",
                    help="sort the order tables with XLA instead of the NumPy host callback")
    a = ap.parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={a.devices}").strip()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jax
    import jax.numpy as jnp
    from speed_problem import speed_problem

    import jaxeval._sampling as smp
    from jaxeval import _identification as idn

    # the host sort is forced (its default is off with several CPU devices, see
    # _sampling.HOST_SORT_ON_CPU), so that the table's host-sort rows measure it
    smp.HOST_SORT_ON_CPU = not a.xla_sort
    prob = speed_problem("ifeval", K=10, max_frac=0.2, seed=0, rank=8)
    K, n, budgets, data, params = prob.K, prob.n, prob.budgets, prob.data, prob.params
    cfg = idn.Config(a.policy, num_arms=K, num_items=n, budgets=budgets, batch_size=a.b,
                     cs_kinds=("eb",))
    fn = jax.jit(jax.vmap(lambda k, d, p: idn.run_identification(k, d, p, cfg),
                          in_axes=(0, None, None)))
    devs = jax.devices()
    nch = 8
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(
        jnp.arange(nch * a.chunk)).reshape(nch, a.chunk)
    placed = {d: (jax.device_put(data, d), jax.device_put(params, d)) for d in devs}
    kd = {(i, d): jax.device_put(keys[i], d) for i in range(nch) for d in devs}
    for d in devs:  # compile and warm up on every device
        jax.block_until_ready(fn(kd[(0, d)], *placed[d]))
    for _ in range(a.rounds):
        for nd in sorted({1, len(devs)}):
            t0, c0 = time.perf_counter(), time.process_time()
            outs = [fn(kd[(i, devs[i % nd])], *placed[devs[i % nd]]) for i in range(nch)]
            jax.block_until_ready(outs)
            w, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"{a.policy} b={a.b} chunk={a.chunk} devices used={nd} of {len(devs)}"
                  f"{' (XLA sort)' if a.xla_sort else ''}: {nch * a.chunk / w:.1f} reps/s, "
                  f"CPU/wall {cpu / w:.2f}", flush=True)


if __name__ == "__main__":
    main()
