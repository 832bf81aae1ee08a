"""The identification loop (jaxeval._identification, jaxeval._policies)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _identification as idn
from jaxeval import _policies, _runner, _simulate
from jaxeval import _sampling as smp
from jaxeval._factorization import ItemFactors

N = 8
POOL = (np.random.default_rng(7).random((6, N)) < 0.5).astype(np.float32)
POOL[0, :3] = 1.0  # distinct row means for row 0..2
POOL[1, :] = 0.0
POOL[1, :5] = 1.0


def _data(pred=None):
    if pred is None:
        f = ItemFactors(jnp.zeros((N, 1)), jnp.zeros(N), jnp.zeros(1))
    else:
        logit = np.log(pred / (1 - pred)).astype(np.float32)
        f = ItemFactors(jnp.zeros((N, 1)), jnp.asarray(logit), jnp.zeros(1))
    return idn.ProblemData(jnp.asarray(POOL), jnp.asarray([[0, 1, 2]], jnp.int32), f)


def _run(cfg, data, params=None, seed=5):
    params = idn.Params.make() if params is None else params
    f = jax.jit(idn.run_identification, static_argnums=3)
    out = f(jax.random.key(seed), data, params, cfg)
    return jax.tree.map(np.asarray, out)


def _orders(seed, K=3, synchronized=False):
    ok = jax.random.fold_in(jax.random.key(seed), idn._PURPOSE_ORDER)
    return [np.asarray(smp.arm_order(ok, a, N, synchronized)) for a in range(K)]


def test_uniform_hand_values_and_exactness():
    cfg = idn.Config("uniform", 3, N, budgets=(3, 6, 12, 24), cs_kinds=("eb", "hoeffding"))
    out = _run(cfg, _data())
    cp = out.checkpoints
    theta = POOL[:3].mean(1)
    np.testing.assert_allclose(out.theta, theta, rtol=1e-6)
    assert int(out.instance) == 0
    assert cp.calls.tolist() == [3, 6, 12, 24]
    np.testing.assert_array_equal(cp.pulls, [[1] * 3, [2] * 3, [4] * 3, [8] * 3])
    orders = _orders(5)
    for c in range(3):
        for arm in range(3):
            k = cp.pulls[c, arm]
            want = POOL[arm, orders[arm][:k]].mean()
            np.testing.assert_allclose(cp.estimate[c, arm], want, rtol=1e-6)
    # fully evaluated arms are exact, for every kind: the true mean up to the rounding
    # margin NUM_TOL + n u * mean on each side (u = 2^-24)
    t32 = np.broadcast_to(theta, (2, 3)).astype(np.float32)
    margin = (idn._confseq.NUM_TOL + N * 2.0**-24 * t32).astype(np.float32)
    np.testing.assert_allclose(cp.lower[-1], t32 - margin, rtol=0, atol=2e-7)
    np.testing.assert_allclose(cp.upper[-1], t32 + margin, rtol=0, atol=2e-7)
    assert cp.status.tolist() == [0, 0, 0, idn.STATUS_EXHAUSTED]
    assert int(cp.recommended[-1]) == int(np.argmax(theta))
    # intervals are nested over time and hold here
    assert np.all(np.diff(cp.upper - cp.lower, axis=0) <= 1e-7)
    assert np.all((cp.lower <= theta + 1e-7) & (theta - 1e-7 <= cp.upper))


def test_pulse_difference_and_naive_estimates_hand_checked():
    pred = np.linspace(0.2, 0.8, N).astype(np.float32)
    cfg = idn.Config("pulse", 3, N, budgets=(2, 7, 13), refit=False, cs_kinds=("eb",))
    params = idn.Params.make(shrink=1e9, lam0=1.0)
    out = _run(cfg, _data(pred), params)
    cp = out.checkpoints
    orders = _orders(5)
    assert cp.calls.tolist() == [2, 7, 13]
    assert np.all(cp.pulls.sum(-1) == cp.calls)
    for c in range(3):
        for arm in range(3):
            k = int(cp.pulls[c, arm])
            seen = np.zeros(N, bool)
            seen[orders[arm][:k]] = True
            s = POOL[arm]
            if k == 0:
                want = pred.mean()
            else:
                want = pred.mean() + (s[seen] - pred[seen]).mean()  # λ = 1
            naive = (s[seen].sum() + pred[~seen].sum()) / N
            np.testing.assert_allclose(cp.estimate[c, arm], want, rtol=1e-5, atol=1e-6)
            if k > 0:
                np.testing.assert_allclose(cp.naive[c, arm], naive, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(cp.lam[c, arm], 1.0, atol=1e-6)


def test_sysrs_schedule_synchronized_and_budget_respecting():
    K, T = 3, 20
    cfg = idn.Config("sysrs", K, N, budgets=(5, T), cs_kinds=("eb",))
    out = _run(cfg, _data())
    cp = out.checkpoints
    sched = _policies.sr_phase_lengths(K, T, N)
    final = cp.pulls[-1]
    rejected = np.sort(final)[: K - 1]
    np.testing.assert_array_equal(rejected, sched)
    assert cp.calls[-1] <= T
    survivor = int(np.argmax(final))
    assert int(cp.recommended[-1]) == survivor
    # synchronized: every arm's seen set is a prefix of one shared order, so the
    # estimates are means over the same first items
    order = _orders(5, synchronized=True)[0]
    for arm in range(K):
        k = int(final[arm])
        np.testing.assert_allclose(cp.estimate[-1, arm], POOL[arm, order[:k]].mean(), rtol=1e-6)


def _tiny_pulse_config():
    return idn.Config(
        "pulse", 3, 10, budgets=(3, 6, 15, 30), cs_kinds=("eb", "hoeffding"),
        truth="synthetic", rank=2, corruption="biased",
    )


def _operands(cfg, **kw):
    data = jax.tree.map(np.asarray, idn.dummy_data(cfg))
    params = jax.tree.map(np.asarray, idn.Params.make(**kw))
    leaves, treedef = jax.tree.flatten((data, params))
    return _simulate._replicate_fn(cfg, treedef), leaves


@pytest.mark.default_codegen
def test_vmapped_equals_chunked_equals_sharded_bit_for_bit():
    cfg = _tiny_pulse_config()
    fn, ops = _operands(cfg)
    sharded = _runner.run_replicates(fn, 3, 16, chunk_size=8, operands=ops, progress=False)
    one = _runner.run_replicates(
        fn, 3, 16, chunk_size=16, devices=jax.devices()[:1], operands=ops, progress=False
    )
    tail = _runner.run_replicates(fn, 3, 8, start=8, chunk_size=8, operands=ops, progress=False)
    for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(one)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(tail)):
        np.testing.assert_array_equal(a[8:], b)
    # and the per-replicate semantics hold in every lane
    cp = sharded.checkpoints
    assert np.all(cp.pulls.sum(-1) == cp.calls)
    assert np.all(cp.calls == np.array(cfg.budgets))
    assert np.all(cp.pulls <= cfg.num_items)


def test_no_retrace_for_new_seed_alpha_scale():
    cfg = _tiny_pulse_config()
    spec = _simulate.SyntheticSpec(n_items=10, rank=2)
    kw = dict(K=3, budgets=cfg.budgets, n_replicates=8, chunk_size=8, corruption="biased",
              cs_kinds=cfg.cs_kinds)
    _simulate.simulate_identification(spec, "pulse", seed=0, **kw)
    before = len(_runner._cached_plans())
    fns = _runner._cached_plans()
    sizes = [f._cache_size() for f in fns]
    with pytest.warns(UserWarning, match="a=0.3 has no effect for policy 'pulse'"):
        r2 = _simulate.simulate_identification(
            spec, "pulse", seed=9, alpha=0.2, scale=3.0, a=0.3, lam0=0.5, rho=2.0, **kw
        )
    assert len(_runner._cached_plans()) == before
    assert [f._cache_size() for f in fns] == sizes
    assert r2.settings["alpha"] == 0.2


@pytest.mark.parametrize("policy, synchronized, skip", [
    ("pulse", None, False), ("pulse_ucb", True, False), ("pulse_ucb", None, True)])
def test_coverage_smoke_biased_predictions(policy, synchronized, skip):
    # DR intervals stay valid with biased predictions (fixed seed, binomial tolerance),
    # also when every arm draws its items in one shared order (an arm's own sequence
    # is still a uniform draw without replacement; its predictions use its own past),
    # and when separated arms are skipped (a rule on the bounds before each pull)
    cfg = dataclasses.replace(_tiny_pulse_config(), policy=policy, synchronized=synchronized,
                              skip_separated=skip)
    assert cfg.sync == bool(synchronized)
    fn, ops = _operands(cfg, alpha=0.2, bias=0.4)
    out = _runner.run_replicates(fn, 11, 400, chunk_size=8, operands=ops, progress=False)
    th = out.theta[:, None, None, :]
    cov = ((out.checkpoints.lower <= th) & (th <= out.checkpoints.upper)).all(axis=(1, 3))
    fam = cov.mean(0)
    tol = 3 * np.sqrt(0.2 * 0.8 / 400)
    assert np.all(fam >= 0.8 - tol), fam


def test_fixed_confidence_stops_and_is_right():
    spec = _simulate.SyntheticSpec(n_items=200, rank=2, model_scale=3.0)
    rep = _simulate.simulate_identification(
        spec, "ucbe", K=3, budgets=(600,), mode="confidence", n_replicates=64, alpha=0.1,
        cs_kinds=("eb",), seed=1,
    )
    confident = rep.status_counts[0, idn.STATUS_CONFIDENT]
    assert confident >= 40  # well-separated arms: most runs stop early
    assert rep.calls_used[0] < 600
    # a confident stop is a claim at level alpha: errors are rare
    assert rep.accuracy[0] >= 0.9 - 3 * np.sqrt(0.09 / 64)



@pytest.mark.parametrize("blocked", [False, True])
def test_graded_running_sums_do_not_drift(blocked):
    """Constant graded rows at an MMLU-sized n: the running sum of the observed scores
    stays exact enough that the bounds hold to the last item. A plain float32 running
    sum drifted (a 0.7 row ended 1.2e-5 past its lower bound at 14 041 of 14 042 items;
    2e-4 at 40 000), deterministically, whatever alpha."""
    n = 14_042
    pool = np.stack([np.full(n, 0.7), np.full(n, 1 / 3)]).astype(np.float32)
    theta = pool.astype(np.float64).mean(1)
    data = idn.ProblemData(jnp.asarray(pool), jnp.asarray([[0, 1]], jnp.int32),
                           ItemFactors(jnp.zeros((n, 1)), jnp.zeros(n), jnp.zeros(1)))
    budgets = tuple(2 * (n - j) for j in (1000, 100, 10, 3, 1))
    # (streamed in blocks, batches of 8: fewer, slower steps; the sum still drifted)
    cfg = idn.Config("uniform", 2, n, batch_size=8 if blocked else 1, budgets=budgets,
                     cs_kinds=("eb", "hoeffding"), item_block=8192 if blocked else n)
    cp = _run(cfg, data, idn.Params.make(alpha=0.05), seed=1).checkpoints
    if blocked:  # the calls of the last batches split between the arms
        assert cp.pulls[-1].min() > n - 16, cp.pulls
    else:
        assert cp.pulls[:, 0].tolist() == [n - j for j in (1000, 100, 10, 3, 1)]
    np.testing.assert_allclose(cp.estimate, np.broadcast_to(theta, (5, 2)), rtol=0,
                               atol=1e-6)
    assert np.all(cp.lower <= theta[None, None, :]), (cp.lower - theta).max()
    assert np.all(theta[None, None, :] <= cp.upper), (theta - cp.upper).max()


def test_an_eps_good_stop_needs_only_eps_of_separation():
    """With ``eps`` the stop asks the leader's lower bound to clear the others' upper
    bounds minus eps: two arms of equal means (never separated) stop once their
    intervals are narrower than about eps, and each stop satisfies the rule."""
    n, alpha, eps = 200, 0.1, 0.3
    pool = np.zeros((2, n), np.float32)
    pool[:, :120] = 1.0  # both means 0.6
    data = idn.ProblemData(jnp.asarray(pool), jnp.asarray([[0, 1]], jnp.int32),
                           ItemFactors(jnp.zeros((n, 1)), jnp.zeros(n), jnp.zeros(1)))
    cfg = idn.Config("ucbe", 2, n, budgets=(400,), mode="confidence", cs_kinds=("eb",))
    reps = 64
    out = {}
    for e in (0.0, eps):
        params = idn.Params.make(alpha=alpha, eps=e)
        run = jax.jit(jax.vmap(lambda k, p=params: idn.run_identification(k, data, p, cfg)))
        out[e] = jax.tree.map(np.asarray, run(jax.random.split(jax.random.key(4), reps)))
    cp = out[eps].checkpoints
    conf = cp.status[:, 0] == idn.STATUS_CONFIDENT
    assert conf.mean() >= 0.9, conf.mean()
    assert np.all(cp.calls[conf, 0] < 400)
    for i in np.flatnonzero(conf):
        lead = cp.recommended[i, 0]
        lo, hi = cp.lower[i, 0, 0], cp.upper[i, 0, 0]
        assert lo[lead] > hi[1 - lead] - eps, (lo, hi, lead)
    # without eps, equal arms separate only when an interval misses its mean: at most
    # alpha of the runs (within a binomial tolerance)
    strict = (out[0.0].checkpoints.status[:, 0] == idn.STATUS_CONFIDENT).mean()
    assert strict <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps), strict


@pytest.mark.parametrize("skip", [False, True])
def test_a_confident_stop_has_separated_intervals_and_errs_at_most_alpha(skip):
    """Every replicate that stops as confident has the recommended arm's lower bound
    above every other arm's upper bound at the stop (the rule itself, not only its
    outcome), and with two close arms wrong confident stops stay within alpha; also
    when separated arms are no longer pulled (``skip_separated``)."""
    n, alpha = 200, 0.1
    rng = np.random.default_rng(3)
    pool = np.zeros((3, n), np.float32)
    for row, hits in enumerate((120, 110, 80)):  # true means 0.60, 0.55, 0.40
        pool[row, rng.choice(n, hits, replace=False)] = 1.0
    data = idn.ProblemData(jnp.asarray(pool), jnp.asarray([[0, 1, 2]], jnp.int32),
                           ItemFactors(jnp.zeros((n, 1)), jnp.zeros(n), jnp.zeros(1)))
    budget = 480  # the stops fall between ~310 and ~590 calls: about half stop by 480
    cfg = idn.Config("ucbe", 3, n, budgets=(budget,), mode="confidence", cs_kinds=("eb",),
                     skip_separated=skip)
    params = idn.Params.make(alpha=alpha)
    run = jax.jit(jax.vmap(lambda k: idn.run_identification(k, data, params, cfg)))
    reps = 400
    cp = jax.tree.map(np.asarray, run(jax.random.split(jax.random.key(2), reps))).checkpoints
    status, rec = cp.status[:, 0], cp.recommended[:, 0]
    lower, upper = cp.lower[:, 0, 0], cp.upper[:, 0, 0]  # [reps, K], the one kind
    conf = status == idn.STATUS_CONFIDENT
    assert 50 <= conf.sum() < reps  # some stop early, some do not
    for i in np.flatnonzero(conf):
        others = np.delete(upper[i], rec[i])
        assert lower[i, rec[i]] > others.max(), (i, lower[i], upper[i], rec[i])
    wrong = conf & (rec != 0)
    assert wrong.mean() <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)
    # the runs that did not stop confident spent the whole budget
    assert np.all(cp.calls[~conf, 0] == budget) and np.all(cp.calls[conf, 0] <= budget)
    if skip:  # the calls an already separated arm would get go where the stop is open:
        # more runs stop confident within the budget, after fewer calls (the same orders)
        base = dataclasses.replace(cfg, skip_separated=False)
        run0 = jax.jit(jax.vmap(lambda k: idn.run_identification(k, data, params, base)))
        cp0 = jax.tree.map(np.asarray, run0(jax.random.split(jax.random.key(2), reps)))
        cp0 = cp0.checkpoints
        assert conf.sum() > 1.1 * (cp0.status[:, 0] == idn.STATUS_CONFIDENT).sum()
        assert cp.calls[:, 0].mean() < cp0.calls[:, 0].mean()


def test_skip_separated_refused_where_it_cannot_act():
    with pytest.raises(ValueError, match="skip_separated: needs .* not 'sysrs'"):
        idn.Config("sysrs", 3, N, budgets=(9,), skip_separated=True)
    with pytest.raises(ValueError, match="skip_separated: needs an interval"):
        idn.Config("ucbe", 3, N, budgets=(9,), cs_kinds=(), skip_separated=True)
    with pytest.raises(ValueError, match="skip_separated: expected True or False"):
        idn.Config("ucbe", 3, N, budgets=(9,), skip_separated=1)


@pytest.mark.slow
@pytest.mark.parametrize("policy", _policies.POLICIES)
def test_every_policy_semantics(policy):
    cfg = idn.Config(policy, 3, N, budgets=(4, 9, 24), cs_kinds=("eb",), use_predictions=True)
    pred = np.full(N, 0.5, np.float32)
    out = _run(cfg, _data(pred))
    cp = out.checkpoints
    assert np.all(cp.pulls.sum(-1) == cp.calls)
    assert np.all(cp.pulls <= N)
    theta = POOL[:3].mean(1)
    assert np.all((cp.lower <= theta + 1e-6) & (theta - 1e-6 <= cp.upper))
    if policy != "sysrs":
        # every arm fully evaluated: the exact mean, within finalize's rounding band
        assert cp.calls[-1] == 24 and np.all(cp.upper[-1] - cp.lower[-1] <= 1e-4)


def test_config_batch_size_is_checked_by_name():
    assert idn.Config("ucbe", 3, 20, budgets=(4,), batch_size=np.int64(2)).batch_size == 2
    assert idn.Config("ucbe", 3, 20, budgets=(4,), batch_size=np.array(3)).batch_size == 3
    for b, error in ((0, ValueError), (21, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match=r"batch_size: expected an integer in \[1, 20\] "
                                        r"\(at most num_items\)"):
            idn.Config("ucbe", 3, 20, budgets=(4,), batch_size=b)


def test_hoeffding_reference_does_not_read_the_predictions():
    """The lam = 0 reference interval is the plain mean's: a NaN prediction (which makes
    the DR interval NaN) must leave it as it is with finite predictions."""
    cfg = idn.Config("uniform", 3, N, budgets=(3, 12, 24), cs_kinds=("eb", "hoeffding"),
                     use_predictions=True)
    pred = np.full(N, 0.5)
    good = _run(cfg, _data(pred)).checkpoints
    pred[3] = np.nan
    bad = _run(cfg, _data(pred)).checkpoints
    q = cfg.cs_kinds.index("hoeffding")
    assert np.all(np.isfinite(good.lower[:, q])) and np.all(np.isfinite(good.upper[:, q]))
    np.testing.assert_array_equal(bad.lower[:, q], good.lower[:, q])
    np.testing.assert_array_equal(bad.upper[:, q], good.upper[:, q])


def test_config_refuses_budgets_beyond_int32_counters():
    """K*n above 2**31 (32 arms of 2**27 items) used to pass, then overflow in the trace."""
    idn.Config("uniform", 32, 2**27, budgets=(2**31 - 64,), truth="synthetic", rank=1)
    for budgets in [(1000, 2**31 + 10), (-1, 10)]:
        with pytest.raises(ValueError, match=r"budgets must lie in \[0, 2\*\*31\)"):
            idn.Config("uniform", 32, 2**27, budgets=budgets, truth="synthetic", rank=1)
    with pytest.raises(ValueError, match=r"budgets: the largest, 2147483647 LLM calls, needs"):
        idn.Config("uniform", 32, 2**27, budgets=(2**31 - 1,), truth="synthetic", rank=1)


@pytest.mark.parametrize("b", [1, 4])
def test_sysrs_is_successive_rejects_on_the_shared_order_at_any_batch_size(b):
    """SySRs against a NumPy successive-rejects reference on the shared item order: every
    phase brings each survivor to its target, the arm with the lowest mean on the same
    items (ties: the highest index) is rejected, the survivor takes what is left. With
    b > 1 each phase end cuts a batch, which used to run the loop out of steps (the run
    stopped short of its budget and final rejection)."""
    K, N = 8, 30
    rng = np.random.default_rng(3)
    pool = (rng.random((K, N)) < rng.uniform(0.3, 0.7, (K, 1))).astype(np.float32)
    f = ItemFactors(jnp.zeros((N, 1)), jnp.zeros(N), jnp.zeros(1))
    data = idn.ProblemData(jnp.asarray(pool), jnp.asarray([list(range(K))], jnp.int32), f)
    run = jax.jit(idn.run_identification, static_argnums=3)
    for T in (10, 40, 200):
        cfg = idn.Config("sysrs", K, N, budgets=(T,), batch_size=b, cs_kinds=("eb",))
        for seed in range(3):
            out = jax.tree.map(np.asarray, run(jax.random.key(seed), data, idn.Params.make(), cfg))
            cp = out.checkpoints
            order = np.asarray(smp.arm_order(
                jax.random.fold_in(jax.random.key(seed), idn._PURPOSE_ORDER), 0, N, True))
            alive, pulls = list(range(K)), np.zeros(K, int)
            for nk in _policies.sr_phase_lengths(K, T, N):
                for a in alive:
                    pulls[a] = nk
                means = {a: pool[a, order[:nk]].mean() for a in alive}
                low = min(means.values())
                alive.remove(max(a for a in alive if means[a] == low))
            pulls[alive[0]] = min(N, pulls[alive[0]] + (T - pulls.sum()))
            assert cp.pulls[0].tolist() == pulls.tolist(), (T, seed)
            assert int(cp.recommended[0]) == alive[0], (T, seed)
            assert int(cp.calls[0]) == pulls.sum(), (T, seed)


def test_naive_recommends_by_its_own_pooled_estimate():
    """SPEC 6.1 scores the argmax of the method's own estimates: the naive baseline's
    recommendation is the argmax of its naive pooled estimate, not of PULSE's difference
    estimate (with biased predictions the two disagree), and the other policies still
    recommend by the difference estimate."""
    K, n, R = 5, 100, 32
    f = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                static_argnums=3)
    keys = jax.random.split(jax.random.key(0), R)
    for policy, field in (("naive", "naive"), ("pulse_ucb", "estimate")):
        cfg = idn.Config(policy, K, n, budgets=(25, 50, 100), truth="synthetic",
                         corruption="biased", cs_kinds=("eb",))
        cp = jax.tree.map(np.asarray, f(keys, idn.dummy_data(cfg), idn.Params.make(), cfg)
                          ).checkpoints
        np.testing.assert_array_equal(cp.recommended, getattr(cp, field).argmax(-1))
        if policy == "naive":  # the check has teeth: the two estimates disagree here
            assert (cp.naive.argmax(-1) != cp.estimate.argmax(-1)).mean() > 0.05


def test_sysrs_is_planned_for_each_budget_unless_given_a_horizon():
    """SPEC 6.1 scores a fixed-budget method at the budget it was given: without a
    horizon each checkpoint of a SySRs run is its own run planned for that budget (same
    instance and item order); with one, a single run is read at every checkpoint."""
    K, budgets = 4, (6, 12, 24)
    run = jax.jit(idn.run_identification, static_argnums=3)
    data = _data()
    key = jax.random.key(3)
    many = run(key, data, idn.Params.make(),
               idn.Config("sysrs", K, N, budgets=budgets, cs_kinds=("eb",)))
    for c, b in enumerate(budgets):
        one = run(key, data, idn.Params.make(),
                  idn.Config("sysrs", K, N, budgets=(b,), cs_kinds=("eb",)))
        for a, o in zip(jax.tree.leaves(many.checkpoints), jax.tree.leaves(one.checkpoints)):
            np.testing.assert_array_equal(np.asarray(a)[c], np.asarray(o)[0])
        np.testing.assert_array_equal(many.theta, one.theta)
    # planned for the smallest budget, every arm is seen at 6 calls; planned for 24, not
    assert int(np.asarray(many.checkpoints.pulls)[0].min()) >= 1
    anytime = run(key, data, idn.Params.make(),
                  idn.Config("sysrs", K, N, budgets=budgets, horizon=24, cs_kinds=("eb",)))
    np.testing.assert_array_equal(np.asarray(anytime.checkpoints.pulls)[-1],
                                  np.asarray(many.checkpoints.pulls)[-1])
    assert not np.array_equal(np.asarray(anytime.checkpoints.pulls)[0],
                              np.asarray(many.checkpoints.pulls)[0])


def test_given_instance_is_taken_modulo_the_instance_count():
    """run_identification(instance=...) plays instance ``instance mod I``: the runner's
    uint32 replicate index and signed integers (floor modulo) alike."""
    data = idn.ProblemData(
        pool=np.random.default_rng(0).uniform(size=(4, 5)).astype(np.float32),
        instances=np.array([[0, 1], [1, 2], [2, 3]], np.int32),
        item_factors=ItemFactors(np.zeros((5, 1), np.float32), np.zeros(5, np.float32),
                                 np.zeros(1, np.float32)),
    )
    cfg = idn.Config("ucbe", num_arms=2, num_items=5, budgets=(5,), truth="real")
    run = jax.jit(idn.run_identification, static_argnums=3)
    for given, want in ((jnp.uint32(7), 1), (jnp.uint32(2**32 - 1), 0), (-1, 2),
                        (jnp.int32(-4), 2), (5, 2)):
        out = run(jax.random.key(0), data, idn.Params.make(), cfg, given)
        assert int(out.instance) == want, (given, int(out.instance))


@pytest.mark.parametrize("policy, b", [("ucbe", 1), ("ucbe", 3), ("sysrs", 2), ("pulse_ucb", 1)])
def test_no_intervals_is_the_same_run_without_bounds(policy, b):
    """cs_kinds=() computes no interval (the work of a plain bandit, for same-work speed
    comparisons): every decision and estimate is the one of the run with intervals."""
    pred = np.clip(POOL.mean(0) * 0.8 + 0.1, 0.05, 0.95)
    data = _data(pred if policy == "pulse_ucb" else None)
    kw = dict(budgets=(4, 9, 17), batch_size=b)
    with_cs = _run(idn.Config(policy, 3, N, cs_kinds=("eb", "hoeffding"), **kw), data)
    bare = _run(idn.Config(policy, 3, N, cs_kinds=(), **kw), data)
    assert bare.checkpoints.lower.shape == (3, 0, 3) == bare.checkpoints.upper.shape
    for f in ("recommended", "pulls", "calls", "estimate", "naive", "lam", "status"):
        np.testing.assert_array_equal(getattr(bare.checkpoints, f),
                                      getattr(with_cs.checkpoints, f), err_msg=f)


def test_no_intervals_refused_where_an_interval_steers_or_stops():
    with pytest.raises(ValueError, match="cs_kinds: empty .* policy 'pulse'"):
        idn.Config("pulse", 3, N, budgets=(4,), cs_kinds=())
    with pytest.raises(ValueError, match="cs_kinds: empty .* mode 'confidence'"):
        idn.Config("ucbe", 3, N, budgets=(4,), cs_kinds=(), mode="confidence")
    with pytest.raises(ValueError, match="cs_kinds: expected distinct kinds"):
        idn.Config("ucbe", 3, N, budgets=(4,), cs_kinds=("eb", "eb"))
    import jaxeval

    sm = jaxeval.ScoreMatrix(POOL)
    with pytest.raises(ValueError, match="cs_kinds: expected at least one interval kind"):
        jaxeval.simulate_identification(sm, "ucbe", K=3, n_replicates=2, cs_kinds=(),
                                        n_train=0)
