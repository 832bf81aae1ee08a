"""jaxeval's UCB-E against the reference ``banditeval`` package (Zhou et al.), same instances.

``banditeval`` (PyPI 0.1.1, optional: ``pip install banditeval`` or the ``bench`` extra) is
the reference UCB-E / UCB-E-LRF code of "On Speeding Up Language Model Evaluation". Its
UCB-E step (``banditeval.bandits.upper_confidence_bound_exploration``) recomputes
``nanmean`` over the whole ``[K, n]`` observation matrix (NaN = unseen), takes
``argmax(mu + sqrt(a / N))`` with unpulled arms at ``+inf`` (ties: first arm), and draws a
batch of ``batch_size`` (default 32) uniform unseen items of that arm with
``torch.randperm``; its ``BanditEval.__call__`` loops that step. We drive the very same
step function (its own code) and fill the observations from the true matrix. Checkpoints
follow jaxeval's rule, so both sides are scored after the same calls: a checkpoint
records the state after the last whole batch within its budget, and only the final
budget cuts a batch (its prefix is observed). Calls to 95% / 90% are read on the calls
actually spent (their mean over replicates), as jaxeval's ``calls_to`` does.
Recommendation at a checkpoint: argmax of its ``mus`` with unpulled arms at 0.5
(jaxeval's convention for an arm with no data; it only matters below ``K * b`` calls).

Matched configurations: banditeval's default ``batch_size = 32`` (its first ``K * 32``
calls are a round robin, since unpulled arms come first) against jaxeval's UCB-E with
``batch_size = 32``, and ``batch_size = 1`` for both. Both play the instances that
:func:`jaxeval.simulate_identification` draws (same seed => same split and instances;
replicate ``r`` of banditeval plays the instance of jaxeval's replicate ``r``); item orders
are drawn independently (jaxeval from its keys, banditeval from ``torch.manual_seed(r)``),
so the comparison per budget is a two-proportion z-test of identification accuracy
(and the calls to 95% / 90% accuracy side by side).

``--same-orders`` is the exact check: banditeval's own UCB-E step is driven with the item
orders of jaxeval's replicates (its ``torch.randperm`` draw is replaced by the arm's next
items in jaxeval's order; the index, the arm choice and everything else are banditeval's
code), and every replicate's recommendation and calls at every checkpoint must equal
jaxeval's. Same algorithm, same orders => same decisions; a statistical difference in the
main comparison can then only come from the independent item orders.

Speed: microseconds per simulated LLM call of banditeval (one replicate at a time, as the
package runs) against jaxeval's vmapped kernel (compiled once, timed warm), as a ratio.

Usage (from the repository root):

    python benchmarks/bench_banditeval.py --datasets ifeval musr --K 10 --reps 40
    python benchmarks/bench_banditeval.py --K 50 --reps 20 --batch 32 --a 1
    python benchmarks/bench_banditeval.py --K 10 50 --batch 1 32 --a 0.1 1 10 --same-orders
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
from bench_args import at_least_one, at_least_two_arms, budget_fractions_upto, prepare_outputs

DATASETS = {
    "ifeval": "oll2_ifeval",
    "musr": "oll2_musr",
    "arc": "oll2_arc_challenge",
    "math5": "oll2_math_lvl5",
}


def have_banditeval() -> bool:
    try:
        import banditeval  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


class _OrderedTorch:
    """``torch`` as banditeval's UCB-E step sees it, with its item draw made to follow given
    per-arm orders: ``argmax`` (the step's arm choice) is torch's, and remembered;
    ``randperm(m)`` then returns the permutation that puts the chosen arm's next items in
    ``orders`` first among its ``m`` unobserved items (which the step lists in ascending
    order). Everything else is torch itself."""

    def __init__(self, torch, orders):
        self._torch = torch
        self._orders = np.asarray(orders)
        self._arm = None

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def argmax(self, *args, **kwargs):
        out = self._torch.argmax(*args, **kwargs)
        self._arm = int(out)
        return out

    def randperm(self, m, *args, **kwargs):
        if self._arm is None:
            raise RuntimeError("randperm before the step chose an arm")
        order = self._orders[self._arm]
        rest = order[len(order) - int(m):]  # the arm's unobserved items, in its order
        perm = np.searchsorted(np.sort(rest), rest)
        self._arm = None
        return self._torch.as_tensor(perm, dtype=self._torch.int64)


def banditeval_ucbe(S, budgets, *, a=1.0, batch_size=32, seed=0, lrf=False, orders=None):
    """Run banditeval's own UCB-E step (or, with ``lrf=True``, its UCB-E-LRF step with the
    package defaults: rank 1, an ensemble of 64 ALS factorizations, 5% uniform warm-up,
    ``eta = 5``) on the true matrix ``S`` and record each budget.

    The recommendation at a checkpoint is the argmax of the step's own ``mus``: the
    observed means for UCB-E; for UCB-E-LRF the row means of the factorization's
    completed matrix (observed entries kept), from one more fit at the checkpoint, or
    the observed means during the warm-up, when the package computes none.

    ``orders`` (int ``[K, n]``, UCB-E only): each arm's items are drawn in this order
    instead of by ``torch.randperm`` (see :class:`_OrderedTorch`); the step is otherwise
    banditeval's own.

    Returns:
      ``(recommended int [C], mus [C, K], calls int [C])``.
    """
    import banditeval.bandits as be_bandits
    import torch
    from banditeval.bandits import upper_confidence_bound_exploration as step_ucbe
    from banditeval.bandits import (
        upper_confidence_bound_exploration_low_rank_factorization as step_lrf,
    )

    if orders is not None:
        if lrf:
            raise ValueError("orders: only banditeval's UCB-E step can be driven by orders")
        orders = np.asarray(orders)
        if orders.shape != np.shape(S):
            raise ValueError(f"orders: expected shape {np.shape(S)}, got {orders.shape}")
        be_bandits.torch = _OrderedTorch(torch, orders)
        try:
            return banditeval_ucbe(S, budgets, a=a, batch_size=batch_size, seed=seed)
        finally:
            be_bandits.torch = torch

    torch.manual_seed(int(seed))
    K, n = S.shape
    truth = torch.as_tensor(np.asarray(S, np.float32))
    obs = torch.full((K, n), torch.nan)
    C = len(budgets)
    rec = np.zeros(C, np.int64)
    mus_rec = np.zeros((C, K))
    calls_rec = np.zeros(C, np.int64)
    calls, c = 0, 0

    def step(o):
        if lrf:
            return step_lrf(o, batch_size=batch_size)
        return step_ucbe(o, a=a, batch_size=batch_size)

    def record(j):
        mus = obs.nanmean(dim=1).numpy()
        if lrf:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, lrf_mus = step_lrf(obs.clone(), batch_size=batch_size, return_mus=True)
            if lrf_mus is not None:
                mus = lrf_mus.numpy()
        mus = np.where(np.isnan(mus), 0.5, mus)
        rec[j], mus_rec[j], calls_rec[j] = int(np.argmax(mus)), mus, calls

    while c < C:
        batch = step(obs)
        if batch is None:
            break
        rows, cols = batch
        # jaxeval's checkpoint rule: a checkpoint the whole batch would cross records the
        # state before the batch; only the final budget cuts a batch
        while c < C - 1 and calls + cols.shape[0] > budgets[c]:
            record(c)
            c += 1
        if c == C - 1:
            take = min(cols.shape[0], budgets[c] - calls)
            rows, cols = rows[:take], cols[:take]
        obs[rows, cols] = truth[rows, cols]
        calls += cols.shape[0]
        while c < C and calls >= budgets[c]:
            record(c)
            c += 1
    for j in range(c, C):
        record(j)
    return rec, mus_rec, calls_rec


def _peers(sm, pool_s, rep, kw, fracs, args, b):
    """banditeval's UCB-E-LRF (its defaults, batch ``b``) and jaxeval's prediction
    policies on the instances of ``rep`` (jaxeval's UCB-E run): accuracy per budget and
    calls to 95% / 90%. UCB-E-LRF plays replicate ``r``'s instance for the first
    ``--lrf-reps`` replicates."""
    import jaxeval

    budgets = rep.budgets.tolist()
    out = {}
    n_lrf = args.reps if args.lrf_reps is None else args.lrf_reps
    correct = np.zeros((n_lrf, len(budgets)), bool)
    spent = np.zeros((n_lrf, len(budgets)))
    t0 = time.perf_counter()
    for r in range(n_lrf):
        S = pool_s[rep.instances[rep.instance[r]]]
        rec, _, spent[r] = banditeval_ucbe(S, budgets, batch_size=b, seed=r, lrf=True)
        theta = S.mean(1)
        correct[r] = theta[rec] >= theta.max() - 1e-9
    acc = correct.mean(0)
    xs = spent.mean(0) / (S.shape[0] * S.shape[1])  # calls spent, as a share of K * n
    out["banditeval_lrf"] = dict(acc=acc.tolist(), reps=n_lrf, seconds=time.perf_counter() - t0,
                                 to95=calls_to(acc, xs, 0.95), to90=calls_to(acc, xs, 0.90))
    pkw = {k: v for k, v in kw.items() if k != "a"}
    for pol in ("pulse_ucb", "pulse"):
        r_ = jaxeval.simulate_identification(sm, pol, **pkw)
        out[pol] = dict(acc=r_.correct.mean(0).tolist(), reps=args.reps,
                        to95=r_.calls_to(0.95, fraction=True),
                        to90=r_.calls_to(0.90, fraction=True))
        assert np.array_equal(r_.instance, rep.instance)  # same instances as UCB-E
    return out


def jaxeval_orders(seed: int, reps: int, K: int, n: int) -> np.ndarray:
    """Every arm's item order in each of the first ``reps`` replicates of
    :func:`jaxeval.simulate_identification` with this ``seed`` (int ``[reps, K, n]``):
    replicate ``r`` has key ``fold_in(key(seed), r)``, its orders come from
    ``fold_in(that, purpose "order")``, arm ``i``'s from :func:`jaxeval._sampling.arm_order`
    (each arm its own order: not ``synchronized``)."""
    import jax
    import jax.numpy as jnp

    from jaxeval import _identification as idn
    from jaxeval import _sampling
    from jaxeval._runner import _int_key

    base = _int_key(int(seed))

    def one(i):
        order_key = jax.random.fold_in(jax.random.fold_in(base, i), idn._PURPOSE_ORDER)
        return jax.vmap(lambda arm: _sampling.arm_order(order_key, arm, n))(jnp.arange(K))

    return np.asarray(jax.jit(jax.vmap(one))(jnp.arange(reps)))


def same_orders_check(rep, pool_s, *, a, batch_size, seed):
    """Drive banditeval's UCB-E step with the item orders of ``rep``'s replicates and
    compare every checkpoint's recommendation and calls with jaxeval's.

    Returns:
      dict: ``replicates``, ``identical`` (replicates equal at every checkpoint),
      ``checkpoints_differing`` (recommendation or calls) and the first differing
      replicate (or None: else its checkpoints, both sides' recommendations and calls).
    """
    R = rep.recommended.shape[0]
    budgets = rep.budgets.tolist()
    K, n = rep.instances.shape[1], pool_s.shape[1]
    orders = jaxeval_orders(seed, R, K, n)
    identical, differing, first = 0, 0, None
    for r in range(R):
        S = pool_s[rep.instances[rep.instance[r]]]
        rec, _, calls = banditeval_ucbe(S, budgets, a=a, batch_size=batch_size,
                                        orders=orders[r])
        bad = (rec != rep.recommended[r]) | (calls != rep.calls[r])
        identical += int(not bad.any())
        differing += int(bad.sum())
        if bad.any() and first is None:
            first = dict(replicate=r, checkpoints=np.nonzero(bad)[0].tolist(),
                         banditeval=rec.tolist(), jaxeval=rep.recommended[r].tolist(),
                         banditeval_calls=np.asarray(calls).tolist(),
                         jaxeval_calls=np.asarray(rep.calls[r]).tolist())
    return dict(replicates=R, identical=identical, checkpoints_differing=differing,
                checkpoints=R * len(budgets), first_difference=first)


def two_proportion_p(k1, n1, k2, n2) -> float:
    """Two-sided p-value of the pooled two-proportion z-test (1.0 when degenerate: an
    empty sample, or no successes or no failures in the two pooled)."""
    if n1 <= 0 or n2 <= 0:
        return 1.0
    p = (k1 + k2) / (n1 + n2)
    if p <= 0.0 or p >= 1.0:
        return 1.0
    z = (k1 / n1 - k2 / n2) / math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return math.erfc(abs(z) / math.sqrt(2))


def calls_to(acc, fracs, target):
    """First budget fraction where the accuracy reaches ``target``, linear interpolation
    (``fracs``: the calls spent at each checkpoint as a share of ``K * n``). A NaN
    accuracy is refused (it would read as "never reached")."""
    acc = np.asarray(acc, float)
    if np.isnan(acc).any():
        raise ValueError(f"calls_to: acc holds NaN at checkpoint(s) "
                         f"{np.nonzero(np.isnan(acc))[0].tolist()}")
    hit = np.nonzero(acc >= target - 1e-12)[0]
    if hit.size == 0:
        return math.inf
    i = int(hit[0])
    if i == 0:
        return float(fracs[0])
    a0, a1 = acc[i - 1], acc[i]
    return float(fracs[i - 1] + (target - a0) * (fracs[i] - fracs[i - 1]) / (a1 - a0))


def _fmt(x):
    return ">max" if not np.isfinite(x) else f"{100 * x:.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--K", nargs="+", type=int, default=[10, 50])
    ap.add_argument("--batch", nargs="+", type=int, default=[32, 1])
    ap.add_argument("--a", nargs="+", type=float, default=[1.0])
    ap.add_argument("--reps", type=int, default=40, help="replicates (instances x orders)")
    ap.add_argument("--instances", type=int, default=None, help="default 10 (K=10) / 5 (K=50)")
    ap.add_argument("--max-frac", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/bench_banditeval.json")
    ap.add_argument("--lrf", action="store_true",
                    help="also run banditeval's UCB-E-LRF and jaxeval's PULSE policies "
                         "(pulse_ucb, pulse) on the same instances: the peers table")
    ap.add_argument("--lrf-reps", type=int, default=None,
                    help="UCB-E-LRF replicates (default --reps; ~0.1 s per step)")
    ap.add_argument("--same-orders", action="store_true",
                    help="also drive banditeval's UCB-E step with jaxeval's item orders and "
                         "check that every recommendation and call count is the same; exit "
                         "status 1 if any differs")
    args = ap.parse_args(argv)
    at_least_one(ap, args, ("reps", "lrf_reps", "instances"),
                 {"lrf_reps": " (leave --lrf off to skip UCB-E-LRF)"})
    at_least_two_arms(ap, args.K)
    fracs = budget_fractions_upto(ap, args.max_frac)
    prepare_outputs(ap, args, ("out",))

    if not have_banditeval():
        print("banditeval (and torch) not installed: pip install banditeval==0.1.1 "
              "(or the 'bench' extra); nothing to compare, exiting.")
        return 0
    import torch

    import jaxeval

    torch.set_num_threads(1)
    rows, results, peer_rows = [], {}, []
    for ds in args.datasets:
        sm = jaxeval.load(DATASETS[ds])
        dd = sm.drop_duplicates()
        _, pool = dd.split([dd.n_models // 2], seed=args.seed)
        pool_s = np.asarray(pool.scores, np.float32)
        for K in args.K:
            n_inst = args.instances or (10 if K <= 10 else 5)
            for b in args.batch:
                for a in args.a:
                    kw = dict(K=K, budget_fractions=fracs, n_replicates=args.reps,
                              seed=args.seed, n_instances=n_inst, a=a, batch_size=b,
                              cs_kinds=("eb",))
                    jaxeval.simulate_identification(sm, "ucbe", **kw)  # compile
                    t0 = time.perf_counter()
                    rep = jaxeval.simulate_identification(sm, "ucbe", **kw)
                    t_jax = time.perf_counter() - t0
                    budgets = rep.budgets.tolist()
                    correct_b = np.zeros((args.reps, len(budgets)), bool)
                    spent_b = np.zeros((args.reps, len(budgets)))
                    t0 = time.perf_counter()
                    for r in range(args.reps):
                        S = pool_s[rep.instances[rep.instance[r]]]
                        rec, _, spent_b[r] = banditeval_ucbe(S, budgets, a=a, batch_size=b,
                                                             seed=r)
                        theta = S.mean(1)
                        correct_b[r] = theta[rec] >= theta.max() - 1e-9
                    t_be = time.perf_counter() - t0
                    xs_b = spent_b.mean(0) / (K * S.shape[1])  # calls spent / (K * n)
                    acc_j = rep.correct.mean(0)
                    acc_b = correct_b.mean(0)
                    kj, kb = rep.correct.sum(0), correct_b.sum(0)
                    pvals = [two_proportion_p(int(x), args.reps, int(y), args.reps)
                             for x, y in zip(kj, kb)]
                    calls_total = float(rep.calls_used[-1]) * args.reps
                    us_j = 1e6 * t_jax / calls_total
                    us_b = 1e6 * t_be / calls_total
                    gaps = np.sort(rep.theta, axis=1)
                    gap = float(np.median(gaps[:, -1] - gaps[:, -2]))
                    res = dict(
                        budget_fractions=list(fracs), acc_jaxeval=acc_j.tolist(),
                        acc_banditeval=acc_b.tolist(), p_values=pvals,
                        to95=(rep.calls_to(0.95, fraction=True), calls_to(acc_b, xs_b, 0.95)),
                        to90=(rep.calls_to(0.90, fraction=True), calls_to(acc_b, xs_b, 0.90)),
                        us_per_call=(us_j, us_b), speed_ratio=us_b / us_j, median_gap=gap,
                        min_p=min(pvals), n_reject_05=int(sum(p < 0.05 for p in pvals)),
                    )
                    if args.same_orders:
                        same = same_orders_check(rep, pool_s, a=a, batch_size=b,
                                                 seed=args.seed)
                        res["same_orders"] = same
                        print(f"{ds} K={K} b={b} a={a:g} same orders: "
                              f"{same['identical']}/{same['replicates']} replicates identical "
                              f"({same['checkpoints_differing']} of {same['checkpoints']} "
                              "checkpoints differ)", flush=True)
                    if args.lrf:
                        res["peers"] = _peers(sm, pool_s, rep, kw, fracs, args, b)
                        peer_rows.append((ds, K, b, gap, res["to95"], res["to90"],
                                          res["peers"]))
                        print(f"{ds} K={K} b={b} peers, calls to 95%: " + ", ".join(
                            f"{k} {_fmt(v['to95'])}" for k, v in res["peers"].items()),
                            flush=True)
                    results[f"{ds}/K{K}/b{b}/a{a:g}"] = res
                    rows.append((ds, K, b, a, gap, res))
                    print(f"{ds} K={K} b={b} a={a:g}: to95 jax {_fmt(res['to95'][0])} "
                          f"be {_fmt(res['to95'][1])}; min p {res['min_p']:.3f} "
                          f"({res['n_reject_05']}/{len(pvals)} budgets p<0.05); "
                          f"us/call jax {us_j:.3f} be {us_b:.2f} ratio {res['speed_ratio']:.0f}x",
                          flush=True)
    print()
    print("| dataset | K | b | a | median gap | calls to 95% jaxeval / banditeval | "
          "to 90% | budgets with p < 0.05 (min p) | us per call jaxeval / banditeval | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ds, K, b, a, gap, r in rows:
        print(f"| {ds} | {K} | {b} | {a:g} | {gap:.3f} | {_fmt(r['to95'][0])} / "
              f"{_fmt(r['to95'][1])} | {_fmt(r['to90'][0])} / {_fmt(r['to90'][1])} | "
              f"{r['n_reject_05']}/{len(r['p_values'])} ({r['min_p']:.2f}) | "
              f"{r['us_per_call'][0]:.3f} / {r['us_per_call'][1]:.1f} | "
              f"{r['speed_ratio']:.0f}x |")
    if args.same_orders:
        print()
        print("| dataset | K | b | a | same orders: replicates identical | checkpoints "
              "differing |")
        print("|---|---|---|---|---|---|")
        for ds, K, b, a, _, r in rows:
            so = r["same_orders"]
            print(f"| {ds} | {K} | {b} | {a:g} | {so['identical']} of {so['replicates']} | "
                  f"{so['checkpoints_differing']} of {so['checkpoints']} |")
    if peer_rows:
        print()
        print("| dataset | K | b | median gap | calls to 95% (90%): jaxeval UCB-E | "
              "banditeval UCB-E | banditeval UCB-E-LRF | jaxeval pulse_ucb | jaxeval pulse |")
        print("|---|---|---|---|---|---|---|---|---|")
        for ds, K, b, gap, t95, t90, pr in peer_rows:
            cells = [f"{_fmt(t95[0])} ({_fmt(t90[0])})", f"{_fmt(t95[1])} ({_fmt(t90[1])})"]
            cells += [f"{_fmt(pr[k]['to95'])} ({_fmt(pr[k]['to90'])})"
                      for k in ("banditeval_lrf", "pulse_ucb", "pulse")]
            print(f"| {ds} | {K} | {b} | {gap:.3f} | " + " | ".join(cells) + " |")
    with open(args.out, "w") as fh:
        json.dump(dict(args=vars(args), results=results), fh, indent=1)
    print(f"\nresults written to {args.out}")
    if args.same_orders and any(r["same_orders"]["checkpoints_differing"] for *_, r in rows):
        print("same orders: some decisions differ (see the table)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
