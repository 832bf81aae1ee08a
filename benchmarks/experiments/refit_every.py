"""How often should PULSE refresh its predictions? An experiment on a patched kernel.

Issue 7 asks for "how often predictions are refreshed" to be chosen by experiment. The
package refits the pulled arm's factor (one Newton step) after every batch, and that
refit is about three quarters of a PULSE step (``pulse_step_profile.py``). This script
measures what refitting only every ``m``-th step would give, in LLM calls and in speed.

The kernel has no such setting; ``refit_every.patch`` (next to this file) adds one for
the experiment: ``Config.refit_every = m`` refits only at the budget loop's steps that are
multiples of ``m`` (a step index shared by every vmapped replicate, so under ``vmap`` the
skipped refits are really skipped: a per-replicate condition would become a select that
computes both branches). The index counts the run's steps, not an arm's own pulls: the
arm refitted is whichever one is pulled at such a step (with all the items it has seen),
so an arm may go more or fewer than ``m`` of its own batches between refits. The
predictions stay predictable, so validity is untouched. Only the budget mode on whole
rows honours it. The patch gives the NumPy reference (``numpy_reference.pulse``) the same
``refit_every`` (its loop counts steps the same way). Apply it in a scratch clone, never
on main, from the repository root with its environment made (``.ci/run`` or
``scripts/main.sh`` makes ``.venv``)::

    git clone -q . /tmp/refit && cd /tmp/refit && ln -sfn "$OLDPWD/../shared" ../shared
    . "$OLDPWD/.venv/bin/activate"
    git apply benchmarks/experiments/refit_every.patch
    PYTHONPATH=$PWD python benchmarks/experiments/refit_every.py accuracy
    PYTHONPATH=$PWD python benchmarks/experiments/refit_every.py speed

``accuracy``: ``pulse_ucb`` (a = 1) on the *tuning* seed of ``bench_tuning.py`` (seed
1000: its split, instances and item orders), K = 10, 100 replicates over 50 instances,
the SPEC 6.1 budget grid to 50% of K n, EB interval; calls to 95% and 90% (share of
K n) and the mean identification accuracy over the grid, for m = 1, 2, 4, 8 and for no
refit at all (``refit=False``). Every m plays the same instances and item orders.

``speed``: ``bench_speed.py``'s set-up (IFEval, K = 10, budget grid to 20% of K n,
b = 1, 4 chunks of 256 vmapped replicates against 10 NumPy replicates), the kernel and
the NumPy reference at m = 1, 4, 8, timed in interleaved rounds; replicates per second
and the ratio of each pair (the median of the rounds' own ratios, so not the quotient of
the two medians). BUILD_NOTES.md, "Forty-seventh session", has the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxeval  # noqa: E402
from jaxeval import _identification as idn  # noqa: E402
from jaxeval import _simulate  # noqa: E402


def _patched() -> bool:
    return "refit_every" in {f.name for f in dataclasses.fields(idn.Config)}


def accuracy(datasets, ms, reps: int, instances: int, seed: int) -> None:
    from bench_tuning import _factors, load

    from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5 + 1e-12)
    make_config = _simulate._config
    for ds in datasets:
        sm = load(ds)
        factors = _factors(sm, seed, 8)
        for m in (*ms, None):  # None: no refit at all
            _simulate._config = (
                (lambda *a, m=m, **k: dataclasses.replace(make_config(*a, **k), refit_every=m))
                if m is not None else make_config
            )
            t0 = time.time()
            try:
                rep = jaxeval.simulate_identification(
                    sm, "pulse_ucb", K=10, seed=seed, budget_fractions=fracs,
                    n_replicates=reps, n_instances=instances, rank=8, cs_kinds=("eb",),
                    factors=factors, refit=m is not None,
                )
            finally:
                _simulate._config = make_config
            label = f"refit every {m}" if m is not None else "no refit"
            print(f"{ds:8s} {label:16s} to95 {rep.calls_to(0.95, fraction=True):.3f} "
                  f"to90 {rep.calls_to(0.90, fraction=True):.3f} "
                  f"mean accuracy {float(np.mean(rep.accuracy)):.4f} "
                  f"({time.time() - t0:.0f} s)", flush=True)


def speed(ms, rounds: int, reps: int = 1024, chunk: int = 256, np_reps: int = 10) -> None:
    import numpy_reference as ref
    from pulse_step_profile import timed_kernel
    from speed_problem import speed_problem

    prob = speed_problem("ifeval", K=10, max_frac=0.2, seed=0, rank=8)
    K, n, budgets, data, params = prob.K, prob.n, prob.budgets, prob.data, prob.params
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(
        jnp.arange(reps)).reshape(-1, chunk)

    def orders_for(r):
        g = np.random.default_rng([0, r])
        return np.stack([g.permutation(n) for _ in range(K)])

    impls = {}
    for m in ms:
        cfg = idn.Config("pulse_ucb", num_arms=K, num_items=n, budgets=budgets, batch_size=1,
                         cs_kinds=("eb",), refit_every=m)
        per_replicate = timed_kernel(cfg, keys, data, params)

        def jax_run(per_replicate=per_replicate):
            return 1.0 / per_replicate()

        def np_run(m=m):
            t0 = time.perf_counter()
            for r in range(np_reps):
                ref.pulse(prob.pool_scores[prob.instances[r % len(prob.instances)]],
                          orders_for(r), budgets, prob.V, prob.c, prob.u_mean, rho=prob.rho,
                          a=1.0, refit_every=m)
            return np_reps / (time.perf_counter() - t0)

        impls[f"jaxeval m={m}"], impls[f"NumPy m={m}"] = jax_run, np_run
    per = {name: [] for name in impls}
    for _ in range(rounds):
        for name, run in impls.items():
            per[name].append(run())
    for name, v in per.items():
        print(f"{name:14s} {np.median(v):10.2f} replicates/s")
    for m in ms:
        r = np.median(np.asarray(per[f"jaxeval m={m}"]) / np.asarray(per[f"NumPy m={m}"]))
        print(f"jaxeval / NumPy at m={m}: {r:.1f}x")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("accuracy", "speed"))
    ap.add_argument("--datasets", nargs="+", default=["arc", "ifeval", "math5"])
    ap.add_argument("--every", type=int, nargs="+", default=None,
                    help="values of m (default 1 2 4 8 for accuracy, 1 4 8 for speed)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1000, help="the tuning seed")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if not _patched():
        ap.error("the kernel has no refit_every: apply benchmarks/experiments/"
                 "refit_every.patch in a scratch clone first (see the docstring)")
    if args.what == "accuracy":
        accuracy(args.datasets, tuple(args.every or (1, 2, 4, 8)), args.reps,
                 args.instances, args.seed)
    else:
        speed(tuple(args.every or (1, 4, 8)), args.rounds)


if __name__ == "__main__":
    main()
