"""How far PULSE's online refit lags the MAP factor, for the online trial steps (1, 0)
and (1, 0.5, 0), and what one more trial costs a PULSE step.

The nineteenth session's measurements (BUILD_NOTES "The online refit's trial steps"):

    python benchmarks/bench_online_refit.py lag --configs 16,0.3 8,1 8,0.3 16,1 32,1
    python benchmarks/bench_online_refit.py speed --steps 1,0     # then 1,0.5,0 (alternate)

``lag``: MuSR, factors fitted on 200 models (rank, offline rho as given, 400 steps), 15
candidates each observed one item at a time from ``u_mean`` with one refit per item
(online rho 0.5, as PULSE at b = 1), 150 items; every 10 items the objective gap to a
30-step Newton MAP and the largest |p_online - p_MAP|. ``speed``: `pulse_ucb` on IFEval,
K = 10, 256 replicates (lanes 256), budget to 20% of K·n, factors fixed, three timed
calls after a warm-up (the trial steps patched into ``jaxeval._factorization`` before
the first call is traced: ``refit_row``'s defaults and the module's trial steps are read
when a program is traced).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def lag(configs, step_sets):
    import jax
    import jax.numpy as jnp

    import jaxeval
    from jaxeval import _factorization as fz

    sm = jaxeval.load("oll2_musr")
    for rank, rho in configs:
        lr = jaxeval.fit_factorization(sm.take(models=range(200)), rank=rank, rho=rho,
                                       num_steps=400)
        F = lr.item_factors()
        n = lr.n_items
        obj = jax.jit(lambda u, s, m, F=F: fz._row_objective(u, F.V, F.c, s, m, F.u_mean, 0.5))
        mp = jax.jit(lambda s, m, u, F=F: fz._update_model_factors(
            F, s[None], m[None], u[None], jnp.float32(0.5), num_newton=30)[0][0])
        for steps in step_sets:
            on = jax.jit(lambda s, m, u, F=F, steps=steps: fz.refit_row(
                F, s, m, u, 0.5, 1, line_search=steps))
            gaps, dps = [], []
            for i in range(200, 215):
                s = jnp.asarray(sm.scores[i], jnp.float32)
                order = np.random.default_rng(i).permutation(n)
                u = F.u_mean
                m = np.zeros(n, bool)
                for k in range(150):
                    m[order[k]] = True
                    mj = jnp.asarray(m)
                    u = on(s, mj, u)
                    if k % 10 == 9:
                        um = mp(s, mj, u)
                        gaps.append(float(obj(u, s, mj) - obj(um, s, mj)))
                        dps.append(float(jnp.abs(jax.nn.sigmoid(F.V @ u + F.c)
                                                 - jax.nn.sigmoid(F.V @ um + F.c)).max()))
            print(rank, rho, steps, f"gap max {max(gaps):.2f} mean {np.mean(gaps):.3f}; "
                  f"max|dp| {max(dps):.3f} mean {np.mean(dps):.4f}", flush=True)


def speed(steps):
    import jaxeval._factorization as fz

    fz.ONLINE_LINE_SEARCH_STEPS = steps
    fz.refit_row.__defaults__ = (1, steps)
    import jaxeval
    from jaxeval._simulate import fit_default_factors, split_pool

    sm = jaxeval.load("oll2_ifeval")
    train, _, _ = split_pool(sm.drop_duplicates(), None, 10, 0)
    F, _, _ = fit_default_factors(train, 8, 0, 500)
    kw = dict(K=10, n_replicates=256, lanes=256, budget_fractions=(0.05, 0.1, 0.2), seed=0,
              cs_kinds=("eb",), factors=F)
    rep = jaxeval.simulate_identification(sm, "pulse_ucb", **kw)
    ts = []
    for s in (1, 2, 3):
        t = time.time()
        rep = jaxeval.simulate_identification(sm, "pulse_ucb", **dict(kw, seed=s))
        ts.append(time.time() - t)
    print(steps, "times", [round(x, 2) for x in ts], "acc", rep.accuracy.tolist(), flush=True)


def _floats(text):
    return tuple(float(x) for x in text.split(","))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    lg = sub.add_parser("lag")
    lg.add_argument("--configs", nargs="+", default=["16,0.3", "8,1"],
                    help="offline rank,rho pairs")
    lg.add_argument("--steps", nargs="+", default=["1,0", "1,0.5,0"])
    sp = sub.add_parser("speed")
    sp.add_argument("--steps", default="1,0")
    args = ap.parse_args(argv)
    if args.what == "lag":
        configs = []
        for c in args.configs:
            try:
                rank, rho = c.split(",")
                configs.append((int(rank), float(rho)))
            except ValueError:
                lg.error(f"--configs: expected rank,rho pairs such as 16,0.3; got {c!r}")
        lag(configs, [_floats(s) for s in args.steps])
    else:
        speed(_floats(args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
