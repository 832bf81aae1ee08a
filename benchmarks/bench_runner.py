"""Throughput of the replicate runner vs chunk size and device count, and memory per chunk.

The replicate is the real identification kernel (UCB-E, synthetic low-rank truth
regenerated per replicate, K arms, n items, the SPEC 6.1 checkpoint grid). For
each layout the chunk program is compiled once (``lower().compile()``), its
memory read from XLA's ``memory_analysis()``, and then timed over several
chunks after a warm-up chunk; the ratio columns compare layouts side by side.

From the per-chunk memory at several chunk sizes the script fits
``bytes = fixed + per_replicate * chunk`` and reports the largest chunk that fits
a memory budget, and the host memory of a whole study's outputs (streamed to
disk chunk by chunk by ``jaxeval run``) for ``--study-replicates`` replicates.

Run (fake CPU devices must be set before jax is imported, which this script does):

    python benchmarks/bench_runner.py                     # K=10, n=200, quick grid
    python benchmarks/bench_runner.py --arms 50 --items 500 --chunks 64 256 1024
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
ap.add_argument("--arms", type=int, default=10)
ap.add_argument("--items", type=int, default=200)
ap.add_argument("--policy", default="ucbe")
ap.add_argument("--chunks", type=int, nargs="+", default=[64, 256, 1024])
ap.add_argument("--devices", type=int, nargs="+", default=[1, 2, 8])
ap.add_argument("--device-chunk", type=int, default=256, help="chunk size of the device sweep")
ap.add_argument("--lanes", type=int, default=32)
ap.add_argument("--reps", type=int, default=3, help="timed chunks per layout")
ap.add_argument("--memory-gib", type=float, default=24.0)
ap.add_argument("--study-replicates", type=int, default=100_000)
ap.add_argument("--json", help="write the figures to this JSON file")
ap.add_argument(
    "--memory-only", action="store_true", help="compile and read memory only (no timing)"
)
args = ap.parse_args()

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={max(args.devices)}"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxeval import _identification as idn  # noqa: E402
from jaxeval._runner import ReplicatePlan  # noqa: E402
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS  # noqa: E402

K, n = args.arms, args.items
budgets = tuple(sorted({max(1, round(f * K * n)) for f in DEFAULT_BUDGET_FRACTIONS}))
config = idn.Config(args.policy, num_arms=K, num_items=n, budgets=budgets, truth="synthetic")
data = jax.tree.map(np.asarray, idn.dummy_data(config))
params = jax.tree.map(np.asarray, idn.Params.make())


def replicate(key, data, params):
    return idn.run_identification(key, data, params, config)


def _plan(chunk: int, n_dev: int) -> ReplicatePlan:
    return ReplicatePlan(
        replicate, chunk, devices=jax.devices()[:n_dev], operands=(data, params), lanes=args.lanes
    )


def measure_chunk(chunk: int, n_dev: int) -> int:
    """The chunk size a plan asked for ``chunk`` runs (rounded to whole lanes)."""
    return _plan(chunk, n_dev).chunk_size


def measure(chunk: int, n_dev: int) -> dict:
    plan = _plan(chunk, n_dev)
    key = plan._global(np.asarray(jax.random.key_data(jax.random.key(0))), plan._rep)
    idx = plan._global(np.arange(plan.chunk_size, dtype=np.uint32), plan._split)
    t0 = time.perf_counter()
    compiled = plan._fn.lower(key, idx, *plan.operands).compile()
    t_compile = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    times = [float("nan")]
    if not args.memory_only:
        jax.block_until_ready(compiled(key, idx, *plan.operands))  # warm-up
        times = []
    for r in range(0 if args.memory_only else args.reps):
        idx = plan._global(
            (np.arange(plan.chunk_size) + (r + 1) * plan.chunk_size).astype(np.uint32), plan._split
        )
        t0 = time.perf_counter()
        out = compiled(key, idx, *plan.operands)
        jax.tree.map(np.asarray, out)  # include the copy to the host
        times.append(time.perf_counter() - t0)
    t = float(np.median(times))
    out_bytes = sum(
        int(np.prod(s.shape)) * s.dtype.itemsize for s in jax.tree.leaves(plan.out_shapes)
    )
    row = {
        "chunk": plan.chunk_size,
        "devices": n_dev,
        "compile_s": round(t_compile, 2),
        "chunk_s": round(t, 4),
        "replicates_per_s": round(plan.chunk_size / t, 1) if t == t else None,
        "llm_calls_per_s": round(plan.chunk_size * budgets[-1] / t, 0) if t == t else None,
        "temp_bytes": int(mem.temp_size_in_bytes),
        "argument_bytes": int(mem.argument_size_in_bytes),
        "output_bytes": int(mem.output_size_in_bytes),
        "output_bytes_per_replicate": out_bytes,
    }
    rate = (
        ""
        if t != t
        else f"{row['replicates_per_s']:>9.1f} rep/s  {row['llm_calls_per_s']:>12,.0f} calls/s  "
    )
    print(
        f"  chunk {row['chunk']:>6}  devices {n_dev}  compile {t_compile:6.1f}s  {rate}"
        f"temp {row['temp_bytes'] / 2**20:8.2f} MiB  out {row['output_bytes'] / 2**20:7.2f} MiB",
        flush=True,
    )
    return row


print(
    f"jax {jax.__version__}, {jax.device_count()} CPU devices, {os.cpu_count()} cores; "
    f"policy {args.policy}, K={K}, n={n}, {len(budgets)} checkpoints up to {budgets[-1]} calls, "
    f"lanes {args.lanes}"
)
print("chunk-size sweep (1 device):")
by_chunk = [measure(c, 1) for c in args.chunks]
by_dev = []
if not args.memory_only:
    print(f"device sweep (chunk {args.device_chunk}):")
    rounded = measure_chunk(args.device_chunk, 1)  # (the chunk a 1-device plan runs)
    for d in args.devices:
        # (the 1-device row of the chunk sweep at the same chunk, as it was rounded)
        hit = next((x for x in by_chunk if d == 1 and x["chunk"] == rounded), None)
        by_dev.append(hit or measure(args.device_chunk, d))
    base = by_dev[0]
    for r in by_dev:
        ratio = r["replicates_per_s"] / base["replicates_per_s"]
        print(f"  {r['devices']} device(s): {ratio:5.2f}x the {base['devices']}-device rate")

# memory: fit bytes = a + b * chunk on the 1-device sweep
ch = np.array([r["chunk"] for r in by_chunk], float)
tot = np.array([r["temp_bytes"] + r["output_bytes"] + r["argument_bytes"] for r in by_chunk], float)
b, a = np.polyfit(ch, tot, 1) if len(ch) > 1 else (tot[0] / ch[0], 0.0)
budget = args.memory_gib * 2**30
largest = int((budget - a) / b) if b > 0 else None  # (None: memory does not grow)
per_rep_out = by_chunk[0]["output_bytes_per_replicate"]
study_out = per_rep_out * args.study_replicates
print("memory of one chunk program (temp + arguments + outputs):")
for r, t in zip(by_chunk, tot):
    print(f"  chunk {r['chunk']:>6}: {t / 2**20:9.2f} MiB")
print(
    f"  fit: {a / 2**20:.2f} MiB fixed + {b / 2**10:.2f} KiB per replicate in the chunk "
    + (f"-> the largest chunk within {args.memory_gib:g} GiB is ~{largest:,} replicates"
       if largest is not None else
       "-> memory does not grow with the chunk here: no largest chunk follows from the fit")
)
print(
    f"  a study of R={args.study_replicates:,} replicates stores {per_rep_out / 2**10:.1f} KiB "
    f"per replicate = {study_out / 2**30:.2f} GiB of outputs (on disk, chunk by chunk); "
    f"device memory stays that of one chunk"
)
if args.json:
    with open(args.json, "w") as f:
        json.dump(
            {
                "argv": sys.argv,
                "by_chunk": by_chunk,
                "by_devices": by_dev,
                "fit_fixed_bytes": a,
                "fit_bytes_per_replicate": b,
                "largest_chunk": largest,
                "study_output_bytes": study_out,
            },
            f,
            indent=1,
        )
