"""Benchmark of the low-rank logistic factorization (SPEC section 1, issue 3).

On the four Open LLM Leaderboard v2 sets and TailoredBench GSM8K (duplicates
removed), models are split 80/20 into training and new models (seeded). It reports

1. held-out log-loss and AUC versus rank on random held-out *cells* of the
   training models (10% of cells: half choose rho, half report), against two
   baselines: item mean only, and item mean plus a per-model offset (1PL / Rasch);
2. for new models, how well the predicted row mean tracks the true accuracy as the
   number of observed items grows (0, 8, 32, 128, all): Pearson correlation and MAE
   in percentage points, for the pooled estimate (observed + predicted), the
   factorization's mean prediction, the 1PL pooled estimate and the sample mean;
3. speed of the offline fit against straightforward NumPy (same Adam algorithm,
   same steps) and SciPy (L-BFGS to convergence) implementations of the same
   objective, with the objective values reached, as ratios in one run;
4. the cost of one online update for K = 1000 models, against a NumPy loop.

Run from the repository root:

    python benchmarks/bench_factorization.py            # all five sets, a few minutes
    python benchmarks/bench_factorization.py --quick    # two sets, fewer ranks
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.stats

import jaxeval
from jaxeval import _factorization as fz

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SETS = {
    "oll2_musr": "oll2_musr",
    "oll2_ifeval": "oll2_ifeval",
    "oll2_arc_challenge": "oll2_arc_challenge",
    "oll2_math_lvl5": "oll2_math_lvl5",
    "tailoredbench_gsm8k": str(DATA / "tailoredbench_gsm8k.npz"),
}


# ----------------------------------------------------------------- metrics
def log_loss(p, s):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(s * np.log(p) + (1 - s) * np.log1p(-p)))


def auc(p, s):
    pos = s > 0.5
    n1, n0 = pos.sum(), (~pos).sum()
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = scipy.stats.rankdata(p)
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


# ----------------------------------------------------------------- baselines
def item_mean_probs(S, M):
    cnt, tot = M.sum(0), np.where(M, S, 0).sum(0)
    return (tot + 1.0) / (cnt + 2.0)


def fit_rasch(S, M, rho=0.01):
    """Item mean + per-model offset: sigmoid(a_i + c_j), L-BFGS (float64)."""
    m, n = S.shape

    def f(x):
        a, c = x[:m], x[m:]
        z = a[:, None] + c[None, :]
        p = 1 / (1 + np.exp(-z))
        G = M * (p - S)
        val = np.sum(M * (np.logaddexp(0, z) - S * z)) + rho * a @ a
        return val, np.concatenate([G.sum(1) + 2 * rho * a, G.sum(0)])

    x = scipy.optimize.minimize(f, np.zeros(m + n), jac=True, method="L-BFGS-B").x
    return x[:m], x[m:]


# ----------------------------------------------------------------- references
def numpy_objective_grad(x, S, M, m, n, r, rho):
    U, V, c = x[: m * r].reshape(m, r), x[m * r : (m + n) * r].reshape(n, r), x[-n:]
    z = U @ V.T + c
    p = 1 / (1 + np.exp(-z))
    val = np.sum(M * (np.logaddexp(0, z) - S * z)) + rho * (np.sum(U**2) + np.sum(V**2))
    G = M * (p - S)
    grad = np.concatenate(
        [(G @ V + 2 * rho * U).ravel(), (G.T @ U + 2 * rho * V).ravel(), G.sum(0)]
    )
    return val, grad


def numpy_adam(x0, S, M, m, n, r, rho, lr, steps):
    """The same algorithm as fit_factors (Adam, cosine-decayed lr) in plain NumPy."""
    x, mu, nu = x0.copy(), np.zeros_like(x0), np.zeros_like(x0)
    b1, b2, eps, nobs = 0.9, 0.999, 1e-8, M.sum()
    for t in range(steps):
        _, g = numpy_objective_grad(x, S, M, m, n, r, rho)
        g = g / nobs
        mu = b1 * mu + (1 - b1) * g
        nu = b2 * nu + (1 - b2) * g * g
        mh, nh = mu / (1 - b1 ** (t + 1)), nu / (1 - b2 ** (t + 1))
        lr_t = lr * (0.02 + 0.98 * 0.5 * (1 + np.cos(np.pi * t / steps)))
        x = x - lr_t * mh / (np.sqrt(nh) + eps)
    return x


def numpy_online(V, c, u_mean, S, M, U0, rho, num_newton):
    """Plain Newton per row in a Python loop (no safeguard), for the cost ratio."""
    out = np.empty_like(U0)
    r = V.shape[1]
    for i in range(S.shape[0]):
        u = U0[i].copy()
        Vi, ci, si = V[M[i]], c[M[i]], S[i, M[i]]
        for _ in range(num_newton):
            p = 1 / (1 + np.exp(-(Vi @ u + ci)))
            g = Vi.T @ (p - si) + 2 * rho * (u - u_mean)
            H = (Vi * (p * (1 - p))[:, None]).T @ Vi + 2 * rho * np.eye(r)
            u = u - np.linalg.solve(H, g)
        out[i] = u
    return out


def timed(fn, *args, repeat=3):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - t0)
    return best, out


# ----------------------------------------------------------------- parts
def rank_curve(name, train, ranks, rhos, steps, lr, seed):
    S, M = jnp.asarray(train.scores), jnp.asarray(train.mask)
    key = jax.random.key(seed)
    held = np.asarray(fz.holdout_mask(jax.random.fold_in(key, 0), M, 0.1))
    half = np.asarray(jax.random.uniform(jax.random.fold_in(key, 1), held.shape)) < 0.5
    val, test = held & half, held & ~half
    fit_mask = jnp.asarray(np.asarray(M) & ~held)
    Snp = np.asarray(S)
    s_test = Snp[test]
    rows = []
    # baselines fitted on the same training cells
    p_item = np.broadcast_to(item_mean_probs(Snp, np.asarray(fit_mask)), Snp.shape)
    a, c = fit_rasch(Snp.astype(np.float64), np.asarray(fit_mask))
    p_rasch = 1 / (1 + np.exp(-(a[:, None] + c[None, :])))
    rows.append(("item mean", None, log_loss(p_item[test], s_test), auc(p_item[test], s_test)))
    rows.append(
        ("item + model offset", None, log_loss(p_rasch[test], s_test), auc(p_rasch[test], s_test))
    )
    rho_arr = jnp.asarray(rhos, jnp.float32)
    t0 = time.perf_counter()
    for r in ranks:
        grid = jax.vmap(
            lambda rho, r=r: fz.fit_factors(
                jax.random.fold_in(key, 2),
                S,
                fit_mask,
                rank=r,
                rho_u=rho,
                rho_v=rho,
                learning_rate=lr,
                num_steps=steps,
            )
        )(rho_arr)
        P = np.asarray(jax.vmap(fz.predict_scores)(grid.U, grid.item_factors))  # [P, m, n]
        vl = [log_loss(P[k][val], Snp[val]) for k in range(len(rhos))]
        k = int(np.argmin(vl))
        ok = int(grid.status[k]) == fz.STATUS_OK
        rows.append(
            (
                f"rank {r}",
                rhos[k],
                log_loss(P[k][test], s_test) if ok else np.inf,
                auc(P[k][test], s_test) if ok else np.nan,  # (a failed fit's frozen iterate)
            )
        )
    return rows, time.perf_counter() - t0


def new_model_curve(train, new, rank, rho, steps, lr, seed, counts=(0, 8, 32, 128)):
    S, M = jnp.asarray(train.scores), jnp.asarray(train.mask)
    res = fz.fit_factors(
        jax.random.key(seed),
        S,
        M,
        rank=rank,
        rho_u=rho,
        rho_v=rho,
        learning_rate=lr,
        num_steps=steps,
    )
    f, _ = fz.empirical_prior(res.U, res.item_factors)  # online prior N(u_mean, I)
    a, c = fit_rasch(np.asarray(S, np.float64), np.asarray(M))
    f1 = fz.ItemFactors(
        jnp.ones((c.size, 1)), jnp.asarray(c, jnp.float32), jnp.asarray([a.mean()], jnp.float32)
    )
    rho1 = float(1.0 / (2 * a.var()))  # Gaussian prior fitted to the training offsets
    Sn = new.scores
    K, n = Sn.shape
    truth = Sn.mean(1)
    order = np.argsort(np.random.default_rng(seed).uniform(size=(K, n)), axis=1)
    out = []
    for k in [c for c in counts if c < n] + [n]:  # (a count of n or more is the "all" row)
        obs = np.zeros((K, n), bool)
        np.put_along_axis(obs, order[:, :k], True, axis=1)
        u, _ = fz.update_model_factors(f, Sn, obs, jnp.tile(f.u_mean, (K, 1)), 0.5, num_newton=5)
        p = np.asarray(fz.predict_scores(u, f))
        u1, _ = fz.update_model_factors(
            f1, Sn, obs, jnp.tile(f1.u_mean, (K, 1)), rho1, num_newton=5
        )
        p1 = np.asarray(fz.predict_scores(u1, f1))
        est = {
            "pooled": np.where(obs, Sn, p).mean(1),
            "model mean": p.mean(1),
            "1PL pooled": np.where(obs, Sn, p1).mean(1),
            "sample mean": (np.where(obs, Sn, 0).sum(1) / k) if k else np.full(K, np.nan),
        }
        row = {}
        for key, e in est.items():
            if np.all(np.isfinite(e)) and np.std(e) > 1e-6:
                corr = float(np.corrcoef(e, truth)[0, 1])
            else:
                corr = float("nan")
            mae = float(100 * np.mean(np.abs(e - truth))) if np.all(np.isfinite(e)) else np.nan
            row[key] = (corr, mae)
        out.append(("all" if k == n else str(k), row))
    return out


def speed(train, rank, rho, lr, steps=1000, numpy_steps=300):
    S, M = jnp.asarray(train.scores), jnp.asarray(train.mask)
    m, n = train.shape
    Snp, Mnp = train.scores.astype(np.float64), train.mask
    out = {}
    for k in (numpy_steps, steps):
        kw = dict(rank=rank, rho_u=rho, rho_v=rho, learning_rate=lr, num_steps=k)
        t0 = time.perf_counter()
        jax.block_until_ready(fz.fit_factors(jax.random.key(0), S, M, **kw))
        out[f"t_compile_{k}"] = time.perf_counter() - t0
        t, res = timed(lambda kw=kw: fz.fit_factors(jax.random.key(1), S, M, **kw), repeat=2)
        out[f"t_jax_{k}"] = t
        out[f"obj_jax_{k}"] = float(res.final_loss) * Mnp.sum()
    # NumPy Adam (same algorithm and step count) from the same kind of initial point
    k1, k2 = np.random.default_rng(1).normal(0, 0.1, (2, (m + n) * rank))
    x0 = np.concatenate([k1[: m * rank], k2[: n * rank], np.zeros(n)])
    cnt = Mnp.sum(0)
    mean = (np.where(Mnp, Snp, 0).sum(0) + 2 * Snp[Mnp].mean()) / (cnt + 2)
    x0[-n:] = np.log(mean / (1 - mean))
    t0 = time.perf_counter()
    x_np = numpy_adam(x0, Snp, Mnp, m, n, rank, rho, lr, numpy_steps)
    out["t_np"] = time.perf_counter() - t0
    out["obj_np"] = numpy_objective_grad(x_np, Snp, Mnp, m, n, rank, rho)[0]
    # SciPy L-BFGS with the analytic gradient, to convergence
    t0 = time.perf_counter()
    sp = scipy.optimize.minimize(
        numpy_objective_grad,
        x0,
        args=(Snp, Mnp, m, n, rank, rho),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 20000, "ftol": 1e-12, "gtol": 1e-7},
    )
    out["t_sp"] = time.perf_counter() - t0
    out["obj_sp"], out["sp_iters"] = sp.fun, sp.nit
    Pj = np.asarray(fz.predict_scores(res.U, res.item_factors))
    U, V, c = (
        sp.x[: m * rank].reshape(m, rank),
        sp.x[m * rank : (m + n) * rank].reshape(n, rank),
        sp.x[-n:],
    )
    Ps = 1 / (1 + np.exp(-(U @ V.T + c)))
    out["mean_dp"], out["max_dp"] = float(np.abs(Pj - Ps).mean()), float(np.abs(Pj - Ps).max())
    out["steps"], out["numpy_steps"] = steps, numpy_steps
    return out


def online_speed(train, rank, rho, steps, lr, K=1000, observed=128, num_newton=3):
    S, M = jnp.asarray(train.scores), jnp.asarray(train.mask)
    res = fz.fit_factors(
        jax.random.key(0), S, M, rank=rank, rho_u=rho, rho_v=rho, learning_rate=lr, num_steps=steps
    )
    f, _ = fz.empirical_prior(res.U, res.item_factors)
    n = train.n_items
    rng = np.random.default_rng(0)
    rows = rng.integers(0, train.n_models, K)
    Sk = train.scores[rows]
    Mk = np.zeros((K, n), bool)
    np.put_along_axis(Mk, np.argsort(rng.uniform(size=(K, n)), 1)[:, :observed], True, 1)
    Sj, Mj, U0 = jnp.asarray(Sk), jnp.asarray(Mk), jnp.tile(f.u_mean, (K, 1))
    upd = lambda: fz.update_model_factors(f, Sj, Mj, U0, 0.5, num_newton=num_newton)
    jax.block_until_ready(upd())
    t_jax, (u, _) = timed(upd, repeat=5)
    V, c, um = (np.asarray(a, np.float64) for a in f)
    t0 = time.perf_counter()
    u_np = numpy_online(
        V, c, um, Sk.astype(np.float64), Mk, np.asarray(U0, np.float64), 0.5, num_newton
    )
    t_np = time.perf_counter() - t0
    return dict(
        K=K,
        n=n,
        rank=rank,
        observed=observed,
        t_jax=t_jax,
        t_np=t_np,
        max_du=float(np.abs(np.asarray(u) - u_np).max()),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two sets, ranks 1/4/16")
    ap.add_argument("--sets", nargs="*", default=None, help=f"subset of {list(SETS)}")
    ap.add_argument("--steps", type=int, default=300, help="Adam steps per fit")
    ap.add_argument("--speed-rank", type=int, default=8, help="rank of the speed section")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speed-set", default="oll2_musr", help="data set of the speed section")
    ap.add_argument("--skip-speed", action="store_true", help="only the quality tables")
    ap.add_argument("--speed-only", action="store_true", help="only the speed section")
    args = ap.parse_args()
    ranks = (1, 4, 16) if args.quick else (1, 2, 4, 8, 16, 32)
    rhos = (1.0, 3.0, 10.0)
    names = args.sets or (["oll2_musr", "tailoredbench_gsm8k"] if args.quick else list(SETS))
    lr = 0.1
    print(f"jax {jax.__version__}, devices {jax.devices()}, steps {args.steps}, lr {lr}")
    t_all = time.perf_counter()
    chosen = {}
    for name in [] if args.speed_only else names:
        sm = jaxeval.load(SETS[name]).drop_duplicates()
        train, new = sm.split([0.8], seed=args.seed)
        print(
            f"\n=== {name}: {sm.n_models} models (dedup) x {sm.n_items} items; "
            f"train {train.n_models}, new {new.n_models}"
        )
        rows, t = rank_curve(name, train, ranks, rhos, args.steps, lr, args.seed)
        print(f"held-out cells of training models (rho chosen on a separate half), {t:.1f} s")
        print(f"  {'model':<22}{'rho':>6}{'log-loss':>10}{'AUC':>8}")
        for label, rho, ll, a in rows:
            print(f"  {label:<22}{'' if rho is None else f'{rho:g}':>6}{ll:>10.4f}{a:>8.4f}")
        best = min(rows[2:], key=lambda x: x[2])
        base = min(rows[0][2], rows[1][2])
        print(
            f"  best: {best[0]} (rho {best[1]:g}), log-loss {best[2]:.4f} vs best baseline "
            f"{base:.4f}: {'beats' if best[2] < base else 'DOES NOT beat'} both baselines"
        )
        rank, rho = int(best[0].split()[1]), best[1]
        chosen[name] = (rank, rho, train)
        print(f"new models: predicted vs true accuracy (rank {rank}, rho {rho:g}); corr / MAE pp")
        curve = new_model_curve(train, new, rank, rho, args.steps, lr, args.seed)
        keys = list(curve[0][1])
        print("  " + f"{'observed':<10}" + "".join(f"{k:>20}" for k in keys))
        for label, row in curve:
            cells = "".join(f"{row[k][0]:>10.3f} /{row[k][1]:>6.2f}  " for k in keys)
            print(f"  {label:<10}{cells}")
    if args.skip_speed:
        print(f"\ntotal {time.perf_counter() - t_all:.0f} s")
        return
    name = args.speed_set
    train, _ = jaxeval.load(SETS[name]).drop_duplicates().split([0.8], seed=args.seed)
    rank, rho = args.speed_rank, 3.0
    print(f"\n=== speed on {name} training models {train.shape}, rank {rank}, rho {rho:g}")
    sp = speed(train, rank, rho, lr)
    k, K = sp["numpy_steps"], sp["steps"]
    gap = (sp[f"obj_jax_{K}"] - sp["obj_sp"]) / sp["obj_sp"]
    print(
        f"  offline fit, {k} Adam steps: JAX {sp[f't_jax_{k}']:.2f} s (first call incl. compile "
        f"{sp[f't_compile_{k}']:.1f} s), NumPy Adam {sp['t_np']:.2f} s -> ratio "
        f"{sp['t_np'] / sp[f't_jax_{k}']:.1f}x; objective JAX {sp[f'obj_jax_{k}']:.2f}, "
        f"NumPy {sp['obj_np']:.2f}"
    )
    print(
        f"  to the optimum: JAX {K} Adam steps {sp[f't_jax_{K}']:.2f} s, SciPy L-BFGS "
        f"{sp['t_sp']:.2f} s ({sp['sp_iters']} iterations) -> ratio "
        f"{sp['t_sp'] / sp[f't_jax_{K}']:.1f}x; objective JAX {sp[f'obj_jax_{K}']:.2f}, SciPy "
        f"{sp['obj_sp']:.2f} (relative gap {gap:+.1e}); "
        f"predicted probabilities JAX vs SciPy: mean |dp| {sp['mean_dp']:.4f}, "
        f"max {sp['max_dp']:.3f}"
    )
    on = online_speed(train, rank, rho, args.steps, lr)
    print(
        f"  online update, K={on['K']} models x n={on['n']} items, rank {on['rank']}, "
        f"{on['observed']} observed each, 3 Newton steps: JAX {1e3 * on['t_jax']:.1f} ms "
        f"({1e6 * on['t_jax'] / on['K']:.1f} us/model); NumPy loop {1e3 * on['t_np']:.0f} ms "
        f"-> ratio {on['t_np'] / on['t_jax']:.1f}x; max |du| vs NumPy {on['max_du']:.1e}"
    )
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
