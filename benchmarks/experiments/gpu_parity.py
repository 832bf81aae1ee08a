"""Do the identification kernels give the same answers on a GPU as on the CPU?

Runs :func:`jaxeval.simulate_identification` on the bundled IFEval matrix (K = 6,
64 replicates, budgets to 20% of K·n) for every policy at b = 1 and b = 8, and saves the
per-replicate arrays (recommended arm, correctness, calls, true accuracies, instance)
and the summary arrays (accuracy, coverage, width) to one ``.npz``. Run it once on each
platform, then compare the two files:

    python benchmarks/experiments/gpu_parity.py run /tmp/cpu.npz          # here
    python benchmarks/experiments/gpu_parity.py run gpu.npz               # on the GPU
    python benchmarks/experiments/gpu_parity.py compare /tmp/cpu.npz gpu.npz

The item orders are drawn from the same keys and sorted by different code on the two
platforms (NumPy through a callback on a one-device CPU, XLA's sort elsewhere), both
exact, so UCB-E, naive pooling, SySRs and uniform sampling agree pull for pull unless
two arms' indices come within the last bit of each other (the platforms may round a
float32 square root or quotient differently); ``compare`` fails if any of these
differs here. PULSE's policies also use a factorization fitted with optax and an online
refit in float32, where the platforms' arithmetic differs in the last bits (and JAX
computes float32 matrix products in TF32 on recent NVIDIA GPUs unless told otherwise);
a near tie can then break the other way more often, so for them ``compare`` reports the
share of replicates whose recommendation is the same at every checkpoint.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

POLICIES = ("ucbe", "naive", "sysrs", "uniform", "pulse", "pulse_ucb")
PER_REPLICATE = ("recommended", "correct", "calls", "theta", "instance")
SUMMARY = ("accuracy", "calls_used", "coverage_family", "coverage_arm", "width")


def run(path: str, reps: int = 64) -> None:
    """Simulate every policy at b = 1 and 8 and save the arrays to ``path``."""
    import jax

    import jaxeval
    from jaxeval import datasets

    data = datasets.load("oll2_ifeval")
    out = {"platform": np.array(jax.devices()[0].platform)}
    for policy in POLICIES:
        for b in (1, 8):
            rep = jaxeval.simulate_identification(
                data, policy, K=6, budget_fractions=(0.02, 0.05, 0.1, 0.2),
                n_replicates=reps, seed=3, batch_size=b)
            for name in PER_REPLICATE + SUMMARY:
                out[f"{policy}/b{b}/{name}"] = np.asarray(getattr(rep, name))
            print(f"{policy:>9} b={b}: accuracy {np.round(rep.accuracy, 3)}", flush=True)
    np.savez(path, **out)
    print(f"written to {path} ({out['platform']})")


def compare(path_a: str, path_b: str) -> int:
    """Print, per policy and batch size, whether the two runs agree; 1 if an exact policy
    differs anywhere, or a PULSE policy played other instances (``theta``, ``instance``).

    Raises:
      ValueError: the two files do not hold the same arrays with the same shapes (runs
        with different ``--reps``, or not made by :func:`run`).
    """
    a, b = np.load(path_a), np.load(path_b)
    if sorted(a.files) != sorted(b.files):
        raise ValueError(f"compare: {path_a} and {path_b} hold different arrays "
                         f"({sorted(set(a.files) ^ set(b.files))[:4]} ...)")
    shapes = [k for k in a.files if a[k].shape != b[k].shape]
    if shapes:
        raise ValueError(f"compare: arrays of different shapes in {path_a} and {path_b}: "
                         f"{shapes[:4]} (runs with different --reps?)")
    print(f"{path_a} ({a['platform']}) against {path_b} ({b['platform']})")
    bad = 0
    for policy in POLICIES:
        for bs in (1, 8):
            pre = f"{policy}/b{bs}/"
            same = {k: bool(np.array_equal(a[pre + k], b[pre + k])) for k in PER_REPLICATE}
            rec_a, rec_b = a[pre + "recommended"], b[pre + "recommended"]
            share = float(np.mean(np.all(rec_a == rec_b, axis=1)))
            wd = float(np.max(np.abs(a[pre + "width"] - b[pre + "width"])))
            acc = float(np.max(np.abs(a[pre + "accuracy"] - b[pre + "accuracy"])))
            exact = policy not in ("pulse", "pulse_ucb")
            ok = all(same.values()) if exact else same["theta"] and same["instance"]
            bad += not ok
            diff = [k for k, v in same.items() if not v]
            ident = "all" if not diff else "but " + ",".join(diff)
            print(f"  {policy:>9} b={bs}: identical arrays {ident};"
                  f" same recommendations {share:.3f}; max |d accuracy| {acc:.4f};"
                  f" max |d width| {wd:.2e}{'' if ok else '  <-- DIFFERS'}")
    return int(bad > 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--reps", type=int, default=64)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args.out, args.reps)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
