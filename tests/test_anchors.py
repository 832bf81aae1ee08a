"""Tests of jaxeval.anchors: selectors, AIS/CIS, maps, intervals, the numpy surface."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval.anchors import (
    METHODS,
    AnchorPredictor,
    Settings,
    SplitData,
    ais_scores,
    apply_map,
    cis_scores,
    conformal_quantile,
    dr_estimate,
    evaluate_protocol,
    fit_anchors,
    fit_method,
    fit_ridge,
    greedy_ridge_anchors,
    kmeans_anchors,
    refine_anchors,
    sample_non_anchors,
    train_mlp,
)
from jaxeval.anchors._irt import IRTConfig
from jaxeval.anchors._mlp import init_mlp, mlp_apply
from jaxeval.anchors._select import swap_step

#: fit_method compiled (eager execution of its scans is far slower than one compile)
_fit = jax.jit(fit_method, static_argnums=(2, 3, 4))

FAST = Settings(proxy_steps=60, final_steps=200, init_steps=60, eval_every=20, num_swaps=3,
                kmeans_iters=10, ridge_swaps=5, irt=IRTConfig(num_steps=50))


def _planted(seed=0, m=300, n=60, informative=(3, 11, 19, 27, 35)):
    """Low-rank-ish binary matrix whose target is a known function of a few items."""
    rng = np.random.default_rng(seed)
    ability = rng.normal(size=(m, 1))
    s = (rng.random((m, n)) < 1 / (1 + np.exp(-(ability + rng.normal(size=(1, n)))))).astype(
        np.float32
    )
    w = np.linspace(0.4, 0.2, len(informative)) * (0.8 / 1.5)
    y = (s[:, list(informative)] @ w + 0.1).astype(np.float32)
    return s, y, informative


# ------------------------------------------------------------------- AIS / CIS
def test_ais_cis_by_hand():
    # f(v) = 2 v0 - v1 + 0.5 ; x rows (1,0),(0,1),(1,1); y = 0 -> residuals 2.5, -0.5, 1.5
    f = lambda v: v @ jnp.array([2.0, -1.0]) + 0.5
    x = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    y = jnp.zeros(3)
    # dl/dx = 2 e w -> |.| per row: (10, 5), (2, 1), (6, 3); mean (6, 3)
    np.testing.assert_allclose(ais_scores(f, x, y), [6.0, 3.0], rtol=1e-6)
    s = jnp.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    e = jnp.array([2.5, -0.5, 1.5])
    # (s - 0.5)^T e: col0 = 1.25 + .25 + .75 ; col1 = -1.25 - .25 + .75 ; col2 = 1.25 - .25 - .75
    np.testing.assert_allclose(cis_scores(s, e), [2.25, 0.75, 0.25], rtol=1e-6)
    new, pos, j = swap_step(jnp.array([0, 1]), jnp.array([6.0, 3.0]),
                            jnp.array([2.25, 0.75, 0.25]), jnp.zeros(3, bool))
    assert int(pos) == 1 and int(j) == 2 and new.tolist() == [0, 2]


def test_ais_matches_finite_differences_of_mlp():
    k = 4
    params, static = init_mlp(jax.random.key(0), k)
    x = jax.random.uniform(jax.random.key(1), (6, k))
    y = jax.random.uniform(jax.random.key(2), (6,))
    f = jax.jit(lambda v: mlp_apply(params, static, v[None, :])[0])
    ais = np.asarray(jax.jit(lambda x, y: ais_scores(f, x, y))(x, y))
    eps = 1e-2
    fd = np.zeros((6, k))
    for i in range(6):
        for a in range(k):
            xp = x.at[i, a].add(eps)
            xm = x.at[i, a].add(-eps)
            fd[i, a] = ((f(xp[i]) - y[i]) ** 2 - (f(xm[i]) - y[i]) ** 2) / (2 * eps)
    np.testing.assert_allclose(ais, np.abs(fd).mean(0), rtol=2e-2, atol=1e-6)


# ------------------------------------------------------------------ selectors
def test_kmeans_anchors_distinct_and_weights():
    s, _, _ = _planted()
    km = jax.jit(kmeans_anchors, static_argnums=(2, 3))
    a, w = km(jax.random.key(0), jnp.asarray(s), 12, 10)
    assert np.unique(np.asarray(a)).size == 12
    np.testing.assert_allclose(float(w.sum()), 1.0, rtol=1e-6)
    # duplicated columns land in one cluster: the anchor set never holds both copies
    s2 = np.concatenate([s, s[:, :5]], axis=1)
    a2, _ = km(jax.random.key(0), jnp.asarray(s2), 12, 10)
    a2 = np.asarray(a2)
    assert not any((j in a2) and (60 + j in a2) for j in range(5))


def test_greedy_recovers_planted_items():
    s, y, informative = _planted()
    got = np.asarray(greedy_ridge_anchors(jnp.asarray(s), jnp.asarray(y), 5, 1e-4))
    assert sorted(got.tolist()) == sorted(informative)


def test_ridge_refinement_moves_toward_planted_items():
    s, y, informative = _planted()
    s, y = jnp.asarray(s), jnp.asarray(y)
    start = jnp.array([0, 1, 2, 3, 4], jnp.int32)  # holds one informative item
    proxy = lambda key, x, t: (lambda lin: (lambda v: v @ lin.w + lin.b))(fit_ridge(x, t, 1e-3))
    anchors, trace = refine_anchors(jax.random.key(0), start, s[:200], y[:200], s[200:], y[200:],
                                    proxy, num_swaps=8, guard=True)
    hits = len(set(np.asarray(anchors).tolist()) & set(informative))
    assert hits == 5
    assert np.asarray(trace.val_mse)[-1] < np.asarray(trace.val_mse)[0]


# ------------------------------------------------------------------------ MLP
@pytest.mark.slow
def test_train_mlp_learns_and_keeps_best_checkpoint():
    s, y, inf = _planted()
    x = jnp.asarray(s[:, list(inf)])
    y = jnp.asarray(y)
    fit, static = train_mlp(jax.random.key(0), x[:200], y[:200], x[200:], y[200:],
                            num_steps=300, eval_every=50, learning_rate=1e-2)
    pred = mlp_apply(fit.params, static, x[200:])
    val = float(jnp.mean((pred - y[200:]) ** 2))
    np.testing.assert_allclose(val, float(fit.best_val), rtol=1e-4)
    assert val < 0.25 * float(jnp.var(y[200:]))
    assert int(fit.best_step) % 50 == 0 and int(fit.best_step) > 0


@pytest.mark.parametrize(
    "methods",
    [("random_ridge", "kmeans_ridge", "anchor_points"),
     ("random_shrunk", "greedy_shrunk"),
     ("random_lowrank", "greedy_lowrank", "greedy_mix"),
     pytest.param(("random_mlp",), marks=pytest.mark.slow)],
)
def test_vmapped_seeds_equal_looped_seeds(methods):
    s, y, _ = _planted()
    d = SplitData(*(jnp.asarray(a) for a in (s[:200], y[:200], s[200:], y[200:])))
    keys = jax.random.split(jax.random.key(3), 3)

    def run(key):
        out = []
        for m in methods:
            f = fit_method(key, d, 6, m, FAST)
            out.append(apply_map(f, d.s_val[:, f.anchors]))
        return jnp.stack(out)

    vm = np.asarray(jax.jit(jax.vmap(run))(keys))
    lp = np.stack([np.asarray(jax.jit(run)(k)) for k in keys])
    np.testing.assert_allclose(vm, lp, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ intervals
def test_conformal_coverage_binomial():
    rng = np.random.default_rng(0)
    reps, n_cal, alpha = 400, 50, 0.1
    res = rng.standard_t(3, size=(reps, n_cal + 1))
    q = np.array([float(conformal_quantile(jnp.asarray(r[:-1]), alpha)) for r in res])
    cov = np.mean(np.abs(res[:, -1]) <= q)
    # exact marginal coverage is ceil(51 * 0.9) / 51 = 0.9216; binomial 3 sd
    assert cov >= 0.9216 - 3 * np.sqrt(0.92 * 0.08 / reps)


def test_sample_non_anchors_breaks_ties_at_random(monkeypatch):
    """Equal uniforms (about six pairs among 10^4 float32 draws) are ordered by a second
    draw, not by index: with every uniform tied, each non-anchor comes first as often."""
    from jaxeval.anchors._intervals import _draw_order

    n, reps = 5, 4000
    keys = jax.random.split(jax.random.key(3), reps)
    # every uniform of the draw tied (float32 gives a tie among 10^4 items ~6 times)
    monkeypatch.setattr(jax.random, "uniform", lambda key, shape, dtype: jnp.zeros(shape, dtype))
    first = np.asarray(jax.vmap(lambda k: sample_non_anchors(k, jnp.array([0]), n, 2)[0])(keys))
    monkeypatch.undo()
    counts = np.bincount(first, minlength=n)
    assert counts[0] == 0
    # each of 4 items first with p = 1/4: within 4 binomial sd (a stable sort: all item 1)
    assert np.all(np.abs(counts[1:] - reps / 4) < 4 * np.sqrt(reps * 0.25 * 0.75)), counts
    # where nothing ties, the order is the plain argsort's (draws made before are kept)
    w = jax.random.uniform(jax.random.key(5), (1000,))
    assert len(np.unique(np.asarray(w))) == 1000
    np.testing.assert_array_equal(_draw_order(w, jax.random.key(6)), jnp.argsort(w))


def test_serfling_radius_spends_alpha_over_two_on_each_bound():
    """The radius is the smaller of two bounds, each at level alpha / 2: the
    Hoeffding-Serfling tail ``2 exp(-2 m t^2 / ((1 - (m - 1) / N) w^2))`` equals alpha / 2
    at its radius (where that bound is the smaller one), and the radius does not grow
    when the empirical-Bernstein one is smaller."""
    from jaxeval.anchors._intervals import serfling_radius

    for m, pop, alpha in ((10, 100, 0.1), (30, 60, 0.05), (5, 1000, 0.2)):
        res = jnp.linspace(-0.5, 0.5, m)
        t = float(serfling_radius(res, -1.0, 1.0, pop, alpha))
        rho = 1.0 - (m - 1) / pop
        tail = 2 * np.exp(-2 * m * t**2 / (rho * 2.0**2))
        np.testing.assert_allclose(tail, alpha / 2, rtol=1e-4)
    # many nearly equal values: the variance-adaptive bound wins, and stays below
    res = jnp.asarray(0.5 + 0.001 * np.sin(np.arange(4000)), jnp.float32)
    t = float(serfling_radius(res, 0.0, 1.0, 100_000, 0.1))
    t_h = np.sqrt((1 - 3999 / 100_000) * np.log(2 / 0.05) / (2 * 4000))
    assert t < 0.5 * t_h
    assert float(serfling_radius(res, 0.0, 1.0, 4000, 0.1)) == 0.0  # the whole population


def test_betting_wor_interval_covers_over_every_draw_order():
    """Exact, not Monte Carlo: over every ordered sample of m distinct items of small
    populations (all equally likely without replacement) the 90% interval holds the
    population mean in at least 90% of the orders."""
    import itertools

    from jaxeval.anchors._intervals import betting_wor_interval

    alpha = 0.1
    for pop in ([0, 1, 1, 0, 1, 1], [0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0]):
        x = np.asarray(pop, np.float32)
        N, mu = len(x), x.mean()
        run = jax.jit(jax.vmap(lambda s, N=N: betting_wor_interval(s, N, alpha, 200)))
        for m in range(2, N + 1):
            orders = np.array(list(itertools.permutations(range(N), m)))
            lo, hi = (np.asarray(b) for b in run(jnp.asarray(x[orders])))
            covered = ((lo <= mu) & (mu <= hi)).mean()
            assert covered >= 1 - alpha, (pop, m, covered)


def test_betting_wor_interval_refuses_a_grid_without_a_step():
    """One candidate (or none) made the grid step 1/0: the interval was [nan, nan] or
    the whole of [0, 1] without a word."""
    from jaxeval.anchors._intervals import betting_wor_interval

    x = jnp.asarray([0.0, 1.0, 1.0, 0.5])
    for bad, err in ((1, ValueError), (0, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="grid_size: expected an integer >= 2"):
            betting_wor_interval(x, 10, 0.1, bad)
    lo, hi = betting_wor_interval(x, 10, 0.1, 2)  # the smallest grid: its two ends
    assert (float(lo), float(hi)) == (0.0, 1.0)


@pytest.mark.parametrize("interval", ["betting", "serfling"])
def test_dr_estimate_unbiased_and_covers(interval):
    rng = np.random.default_rng(1)
    n, k, m = 400, 20, 60
    s = (rng.random(n) < 0.6).astype(np.float32)
    preds = jnp.asarray(np.clip(s * 0.5 + 0.4 + rng.normal(0, 0.1, n), 0, 1), jnp.float32)
    preds = preds.at[:].add(0.1)  # biased predictions: the estimate must stay unbiased
    preds = jnp.clip(preds, 0, 1)
    anchors = jnp.arange(k)
    truth = s.mean()

    def one(key):
        samp = sample_non_anchors(key, anchors, n, m)
        return dr_estimate(preds, anchors, jnp.asarray(s)[anchors], samp, jnp.asarray(s)[samp],
                           0.1, interval)

    est, lo, hi = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(0), 2000))
    est, lo, hi = map(np.asarray, (est, lo, hi))
    assert abs(est.mean() - truth) < 4 * est.std() / np.sqrt(2000)
    # 90% intervals over 2 000 replicates: 3 binomial sd below the level
    assert np.mean((lo <= truth) & (truth <= hi)) >= 0.9 - 3 * np.sqrt(0.09 / 2000)
    assert np.mean(hi - lo) < (0.25 if interval == "betting" else 0.7)
    naive = (np.asarray(preds)[k:].sum() + s[:k].sum()) / n
    assert abs(naive - truth) > 0.05  # the predictions alone are biased


# --------------------------------------------------------------- numpy surface
@pytest.fixture(scope="module")
def small_sm():
    s, y, _ = _planted(m=160, n=40)
    return jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(40)])


def test_fit_predict_save_load_roundtrip(small_sm, tmp_path):
    pred = fit_anchors(small_sm, 6, method="kmeans_blend", seed=0, settings=FAST)
    assert pred.anchor_items.shape == (6,)
    x = small_sm.take(items=pred.anchor_items).scores
    est, lo, hi = pred.predict(x)
    assert np.all(lo <= est) and np.all(est <= hi)
    pred.save(tmp_path / "p.npz")
    back = AnchorPredictor.load(tmp_path / "p.npz", items=small_sm)
    np.testing.assert_array_equal(back.anchor_items, pred.anchor_items)
    np.testing.assert_allclose(back.predict(x)[0], est, rtol=1e-6)
    names = pred.extra_items(10, seed=2)
    a = pred.predict_unbiased(x[0], names, small_sm.take(items=names).scores[0])
    b = back.predict_unbiased(x[0], names, small_sm.take(items=names).scores[0])
    assert a == b
    other = jaxeval.ScoreMatrix(small_sm.scores, items=[f"z{j}" for j in range(40)])
    with pytest.raises(ValueError, match="items"):
        AnchorPredictor.load(tmp_path / "p.npz", items=other)


def test_named_anchor_scores_are_read_by_name(small_sm):
    """A mapping, a pandas Series or a DataFrame of anchor scores is matched to the
    anchors by item name, in any order (a reversed Series once gave another estimate);
    names that do not cover the anchors exactly are refused."""
    pd = pytest.importorskip("pandas")
    pred = fit_anchors(small_sm, 6, method="random_ridge", seed=0, settings=FAST)
    names = pred.anchor_items.tolist()
    x = small_sm.take(items=pred.anchor_items).scores
    want = pred.predict(x[0])
    assert not np.allclose(pred.predict(x[0][::-1])[0], want[0])  # order matters
    for named in (dict(zip(names[::-1], x[0][::-1])), pd.Series(x[0], index=names)[::-1]):
        got = pred.predict(named)
        assert np.ndim(got[0]) == 0 and np.allclose(got, want)
    many = pred.predict(pd.DataFrame(x[:4], columns=names)[names[::-1]])
    np.testing.assert_allclose(many, pred.predict(x[:4]))
    # {item: [score per model]} (DataFrame.to_dict("list")), 6 models for 6 anchors: not
    # read transposed
    by_item = {n: x[:6, i].tolist() for i, n in enumerate(names)}
    np.testing.assert_allclose(pred.predict(by_item), pred.predict(x[:6]))
    # pandas' default labels 0, 1, ...: by position, as an array
    np.testing.assert_allclose(pred.predict(pd.Series(x[0])), want)
    np.testing.assert_allclose(pred.predict(pd.DataFrame(x[:2])), pred.predict(x[:2]))
    extra = pred.extra_items(5, seed=1)
    ys = small_sm.take(items=extra).scores[0]
    u = pred.predict_unbiased(pd.Series(x[0], index=names)[::-1], extra, ys)
    assert u == pred.predict_unbiased(x[0], extra, ys)
    assert all(isinstance(v, np.float64) for v in u)
    # the extra items' scores by name too (a dict was refused with a TypeError), read in
    # the order of extra_items (the interval depends on the draw order)
    ex = extra.tolist()
    assert pred.predict_unbiased(x[0], extra, dict(zip(ex[::-1], ys[::-1]))) == u
    assert pred.predict_unbiased(x[0], extra, pd.Series(ys, index=ex)[::-1]) == u
    assert pred.predict_unbiased(x[0], extra, pd.Series(ys)) == u  # default labels
    with pytest.raises(ValueError, match=rf"extra_scores: named scores must cover exactly "
                                         rf"the 5 extra_items .each once.; missing \['{ex[4]}'\]"):
        pred.predict_unbiased(x[0], extra, dict(zip(ex[:4], ys)))
    for bad, match in (
            (dict(zip(names[:-1], x[0])), rf"missing \['{names[-1]}'\], not anchors \[\]"),
            ({**dict(zip(names, x[0])), "zzz": 1.0}, r"missing \[\], not anchors \['zzz'\]"),
            (pd.DataFrame(x[:2], columns=range(1, 7)),
             "named scores must cover exactly the 6 anchor items"),
            ({n: [1.0, 0.0] if i else [1.0] for i, n in enumerate(names)},
             "equally long lists of scores per item")):
        with pytest.raises(ValueError, match=match):
            pred.predict(bad)



def test_missing_anchor_scores_are_refused_by_item(small_sm):
    """Masked entries of a masked array, None and pandas' NA are missing scores: refused
    with the item named (a masked array was read with its hidden values as scores,
    giving the unmasked estimate; NA failed with a message about types); so are NaN and
    an item named twice (whose message once listed other names)."""
    pred = fit_anchors(small_sm, 6, method="random_ridge", seed=0, settings=FAST)
    names = pred.anchor_items.tolist()
    x = small_sm.take(items=pred.anchor_items).scores.astype(np.float64)
    na = type("NAType", (), {})()  # what pandas' NA is, by type name
    mask = np.zeros(6, bool)
    mask[2] = True
    for bad, match in (
            (np.ma.masked_array(x[0], mask=mask),
             rf"1 masked \(missing\) score\(s\), the first at \(2,\) \(item '{names[2]}'\)"),
            (np.ma.masked_array(x[:2], mask=np.stack([~mask, mask])),
             rf"6 masked .* the first at \(0, 0\) \(item '{names[0]}'\)"),
            ([*x[0][:3], None, *x[0][4:]],
             rf"1 missing score\(s\) \(None or NA\), the first at \(3,\) \(item '{names[3]}'\)"),
            (dict(zip(names, [na, *x[0][1:]])), rf"the first at \(0,\) \(item '{names[0]}'\)"),
            (np.where(mask, np.nan, x[0]), rf"NaN/inf \(first at \(2,\), item '{names[2]}'\)"),
            (np.where(mask, np.nan, x[:2]), rf"NaN/inf \(first at \(0, 2\), item '{names[2]}'\)")):
        with pytest.raises(ValueError, match=match):
            pred.predict(bad)
    # a full mask of False is no missing score
    np.testing.assert_allclose(pred.predict(np.ma.masked_array(x[0], mask=False)),
                               pred.predict(x[0]))
    extra = pred.extra_items(3, seed=1)
    ys = small_sm.take(items=extra).scores[0].astype(np.float64)
    with pytest.raises(ValueError, match=rf"extra_scores: 1 masked .* \(item '{extra[1]}'\)"):
        pred.predict_unbiased(x[0], extra, np.ma.masked_array(ys, mask=[0, 1, 0]))
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(x[:1], columns=names)
    twice = rf"1 item\(s\) named more than once \(\['{names[0]}'\]\)"
    with pytest.raises(ValueError, match=twice):
        pred.predict(pd.concat([df, df.iloc[:, :1]], axis=1))
    s = pd.Series(x[0], index=names).astype(object)
    s[names[4]] = pd.NA
    with pytest.raises(ValueError, match=rf"NA\), the first at \(4,\) \(item '{names[4]}'\)"):
        pred.predict(s)


def test_bad_input_errors(small_sm):
    with pytest.raises(TypeError, match="progress: expected True or False, got 'yes'"):
        fit_anchors(small_sm, 5, method="random_ridge", progress="yes")
    with pytest.raises(ValueError, match="k: expected"):
        fit_anchors(small_sm, 40, method="random_ridge")
    with pytest.raises(ValueError, match="alpha: expected a level"):
        fit_anchors(small_sm, 5, method="random_ridge", alpha="0.1")
    with pytest.raises(TypeError, match=r"settings: expected jaxeval.anchors.Settings\(...\)"):
        fit_anchors(small_sm, 5, method="random_ridge", settings={"auto_folds": 5})
    with pytest.raises(ValueError, match=r"^settings.auto_folds: expected an integer >= 3, "
                                         r"got 2$"):
        fit_anchors(small_sm, 5, settings=dataclasses.replace(FAST, auto_folds=2))
    for name, bad in (("auto_folds", 3.5), ("auto_cv_below", None)):  # failed in the fit
        with pytest.raises(TypeError, match=f"^settings.{name}: expected an integer"):
            fit_anchors(small_sm, 5, settings=dataclasses.replace(FAST, **{name: bad}))
    # too many folds: named as the setting (was "folds:"), before any candidate is fitted
    with pytest.raises(ValueError, match=r"^settings.auto_folds: 1000 folds of 160 models "
                                         r"leave fewer than 2 per fold$"):
        fit_anchors(small_sm, 5, settings=dataclasses.replace(FAST, auto_folds=1000))
    with pytest.raises(ValueError, match=r"validation=None held out 2 of train's 12 models"):
        fit_anchors(small_sm.take(models=np.arange(12)), 3, method="random_ridge")
    with pytest.raises(ValueError, match=r"got 5 \(validation=None held out 1 of train's 6 "
                                         r"models, 20%, leaving 5\)"):
        fit_anchors(small_sm.take(models=np.arange(6)), 3, method="random_ridge")
    # auto_folds matters to "auto" only; a 0-d array alpha is a number
    fit_anchors(small_sm, 5, method="random_mean", alpha=np.array(0.2),
                settings=dataclasses.replace(FAST, auto_folds=2))
    with pytest.raises(ValueError, match="needs at least"):
        fit_anchors(small_sm.take(models=np.arange(6)), 3, method="random_ridge")
    pred = fit_anchors(small_sm, 6, method="kmeans_blend", seed=0, settings=FAST)
    with pytest.raises(ValueError, match="expected 6 scores"):
        pred.predict(np.zeros(4))
    with pytest.raises(ValueError, match="seed: expected a non-negative int"):
        pred.extra_items(5, seed=-1)
    np.testing.assert_array_equal(pred.extra_items(5, seed=3),
                                  pred.extra_items(5, seed=jax.random.key(3)))
    with pytest.raises(ValueError, match="NaN"):
        pred.predict(np.array([0, 1, np.nan, 1, 0, 1]))
    with pytest.raises(ValueError, match="method"):
        fit_anchors(small_sm, 5, method="nope")
    with pytest.raises(TypeError, match="seed: expected a non-negative int seed, a PRNG key"):
        fit_anchors(small_sm, 5, method="random_mean", seed=None)
    with pytest.raises(ValueError, match="seed: expected a non-negative int"):
        fit_anchors(small_sm, 5, method="random_mean", seed=-1)
    # raw uint32[2] key data is a key, as everywhere else in the package
    a = fit_anchors(small_sm, 5, method="random_mean", seed=jax.random.PRNGKey(3))
    b = fit_anchors(small_sm, 5, method="random_mean", seed=jax.random.key(3))
    np.testing.assert_array_equal(a.anchor_items, b.anchor_items)
    # an int seed of any integer type (a 0-d array too) is that int: same split, same draws
    c = fit_anchors(small_sm, 5, method="random_mean", seed=3)
    d = fit_anchors(small_sm, 5, method="random_mean", seed=jnp.int32(3))
    np.testing.assert_array_equal(c.anchor_items, d.anchor_items)
    assert c.info["seed"] == d.info["seed"] == 3


def test_validation_must_be_held_out_and_match_the_target(small_sm):
    """Validation models that are training models, a target on one side only, and a
    duplicate row under another name (a warning) are caught; so are ``k=True``, a bad
    ``alpha`` and an empty extra sample of ``predict_unbiased``."""
    import warnings

    val, tr = small_sm.split([40], seed=0)
    with pytest.raises(ValueError, match="validation: 40 of its models are also training"):
        fit_anchors(tr, 5, method="random_mean", validation=small_sm.take(models=np.arange(40))
                    .__class__(val.scores, models=tr.models[:40], items=val.items))
    with_target = jaxeval.ScoreMatrix(tr.scores, models=tr.models, items=tr.items,
                                      target=tr.true_score())
    with pytest.raises(ValueError, match="validation: train has an external target"):
        fit_anchors(with_target, 5, method="random_mean", validation=val)
    dup = jaxeval.ScoreMatrix(np.concatenate([val.scores[:-1], tr.scores[:1]]),
                              models=[*val.models[:-1], "twin"], items=val.items)
    with pytest.warns(UserWarning, match=r"validation: 1 validation model.*\['twin'\]"):
        fit_anchors(tr, 5, method="random_mean", validation=dup)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # held-out distinct models: no warning
        pred = fit_anchors(tr, 5, method="random_ridge", validation=val, settings=FAST)
    with pytest.raises(TypeError, match=r"k: expected an integer in \[1, 39\] \(fewer than the "
                                        r"40 items\), got bool True"):
        fit_anchors(tr, True, method="random_mean")
    with pytest.raises(ValueError, match=r"train: 1 model\(s\) are too few.*at least 2"):
        fit_anchors(tr.take(models=[0]), 5, method="random_mean")
    x = small_sm.take(models=[0], items=pred.anchor_items).scores[0]
    extra = pred.extra_items(3, seed=0)
    with pytest.raises(ValueError, match=r"alpha: expected a level in \(0, 1\), got 2.0"):
        pred.predict_unbiased(x, extra, [1, 0, 1], alpha=2.0)
    with pytest.raises(ValueError, match="alpha: expected a level"):
        pred.predict_unbiased(x, extra, [1, 0, 1], alpha=True)
    # a 0-d array level is a level, as fit_anchors takes it
    np.testing.assert_array_equal(
        pred.predict_unbiased(x, extra, [1, 0, 1], alpha=np.array(0.2)),
        pred.predict_unbiased(x, extra, [1, 0, 1], alpha=0.2))
    with pytest.raises(ValueError, match="extra_items: at least one"):
        pred.predict_unbiased(x, [], [])
    with pytest.raises(TypeError, match=r"extra_scores: expected numbers in \[0, 1\]"):
        pred.predict_unbiased(x, extra, ["yes", "no", "yes"])
    # anchor scores as text ("1" would be read as 1.0) and in percent
    with pytest.raises(TypeError, match="anchor_scores: expected numbers, got text"):
        pred.predict([str(v) for v in x])
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\].*\(percent\? divide by 100"):
        pred.predict(np.full_like(x, 50.0))


def test_dr_interval_shrinks_to_the_truth_as_the_sample_covers_every_item():
    """Once (nearly) every non-anchor is sampled the interval is (nearly) exact: the
    bounds are clamped to what the observed scores make certain, where the betting
    grid alone fell back to [0, 1]."""
    from jaxeval.anchors import dr_estimate

    rng = np.random.default_rng(0)
    n, k = 3010, 10
    s = (rng.uniform(size=n) < 0.3).astype(np.float32)
    p = np.clip(0.6 * s + 0.2 + rng.normal(0, 0.1, n), 0, 1).astype(np.float32)
    anchors, order = np.arange(k), rng.permutation(np.arange(k, n))
    truth = float(s.astype(np.float64).mean())
    for m in (n - k - 1, n - k):
        for kind in ("betting", "serfling"):
            est, lo, hi = (float(v) for v in dr_estimate(
                jnp.asarray(p), jnp.asarray(anchors), jnp.asarray(s[anchors]),
                jnp.asarray(order[:m]), jnp.asarray(s[order[:m]]), 0.1, kind))
            assert lo <= truth <= hi, (m, kind, lo, truth, hi)
            assert hi - lo <= (n - k - m) / n + 3e-6, (m, kind, hi - lo)



@pytest.mark.parametrize("kind", ["betting", "serfling"])
def test_dr_interval_at_full_sampling_always_holds_the_truth(kind):
    """Every non-anchor sampled, over 2 000 draw orders: the interval holds the true
    mean every time. (The betting interval can miss it there; clamping both of its ends
    to the certain bounds then collapsed it onto a point 1e-6 outside the mean, in 43
    of 4 000 draws of this row.)"""
    from jaxeval.anchors import dr_estimate, sample_non_anchors

    n, k, reps = 52, 2, 2000
    rng = np.random.default_rng(1)
    s = jnp.asarray((rng.random(n) < 0.5).astype(np.float32))
    p = jnp.asarray(rng.random(n).astype(np.float32))
    anchors = jnp.arange(k)
    truth = float(np.asarray(s, np.float64).mean())

    def one(key):
        samp = sample_non_anchors(key, anchors, n, n - k)
        return dr_estimate(p, anchors, s[anchors], samp, s[samp], 0.05, kind)

    keys = jax.random.split(jax.random.key(0), reps)
    est, lo, hi = (np.asarray(v, np.float64) for v in jax.jit(jax.vmap(one))(keys))
    assert np.all((lo <= truth) & (truth <= hi)), ((lo > truth) | (hi < truth)).sum()
    assert np.all(hi - lo <= 3e-6), (hi - lo).max()
    np.testing.assert_allclose(est, truth, atol=1e-6)


def test_predictor_input_and_file_errors_name_the_problem(small_sm, tmp_path):
    """An empty batch passed as anchor scores, a Split passed as the
    validation set, too few validation models for the level, and saved files that are
    missing, truncated, foreign or not .npz at all: each gets a message naming it."""
    import warnings

    pred = fit_anchors(small_sm, 6, method="random_ridge", seed=0, settings=FAST)
    x = small_sm.take(items=pred.anchor_items)
    # (a ScoreMatrix is read by its anchor columns: tests/test_anchor_predict_tables.py)
    np.testing.assert_array_equal(pred.predict(x)[0], pred.predict(x.scores)[0])
    with pytest.raises(ValueError, match="anchor_scores: no model"):
        pred.predict(np.zeros((0, 6)))
    with pytest.raises(TypeError, match="anchor_scores: expected numbers, got text"):
        pred.predict([["a"] * 6])
    with pytest.raises(TypeError, match="anchor_scores: expected an array of numbers"):
        pred.predict([[{}] * 6])  # not numbers, not text
    sp = small_sm.protocol_split(0)
    with pytest.raises(TypeError, match="validation: .*Split.*split.validation"):
        fit_anchors(sp.train, 5, method="random_mean", validation=sp)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tiny = fit_anchors(small_sm.take(models=np.arange(40)), 3, method="random_mean")
    assert tiny.radius == np.inf
    assert any("8 validation models are too few" in str(m.message) for m in w)
    # save() appends .npz as numpy does; load() takes the path either way
    written = pred.save(tmp_path / "p")
    assert written == tmp_path / "p.npz" and written.is_file()
    for q in (tmp_path / "p", written):
        back = AnchorPredictor.load(q, items=small_sm)
        np.testing.assert_allclose(back.predict(x.scores)[0], pred.predict(x.scores)[0])
    import io

    buf = io.BytesIO()
    assert pred.save(buf) is None  # file objects work both ways
    buf.seek(0)
    np.testing.assert_allclose(AnchorPredictor.load(buf).predict(x.scores)[0],
                               pred.predict(x.scores)[0])
    (tmp_path / "trunc.npz").write_bytes(written.read_bytes()[:300])
    small_sm.to_npz(tmp_path / "sm.npz")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    for bad, why in (("trunc.npz", "BadZipFile"), ("sm.npz", "another kind of .npz"),
                     ("x.csv", "not an .npz file")):
        with pytest.raises(ValueError, match=f"{bad}: not a.*{why}"):
            AnchorPredictor.load(tmp_path / bad)
    with pytest.raises(FileNotFoundError, match="nope"):
        AnchorPredictor.load(tmp_path / "nope")


def test_evaluate_protocol_seed_errors(small_sm):
    from jaxeval.anchors import evaluate_protocol

    with pytest.raises(ValueError, match="seeds: expected at least one"):
        evaluate_protocol(small_sm, 5, ["random_mean"], seeds=())
    with pytest.raises(TypeError, match="seed: expected an integer >= 0, got float 1.5"):
        evaluate_protocol(small_sm, 5, ["random_mean"], seeds=[1.5])
    with pytest.raises(ValueError, match="protocol_split: seed: expected an integer >= 0, got -1"):
        evaluate_protocol(small_sm, 5, ["random_mean"], seeds=[-1])


def test_evaluate_protocol_argument_errors(small_sm):
    """Arguments ``fit_anchors`` refuses are refused here too, before any fitting; in
    particular more extra items than non-anchors (the draw used to run into the anchors
    and report a zero-width interval that covered nothing)."""
    from jaxeval.anchors import evaluate_protocol
    from jaxeval.anchors._intervals import sample_non_anchors

    ev = lambda **kw: evaluate_protocol(small_sm, **{"k": 5, "methods": ["random_mean"],
                                                     "seeds": (1,), **kw})
    with pytest.raises(ValueError, match=r"dr_items: expected an integer in \[0, 35\]"):
        ev(dr_items=36)
    with pytest.raises(ValueError, match="dr_items"):
        ev(dr_items=-3)
    for a in (0.0, 1.5, "0.1"):
        with pytest.raises(ValueError, match="alpha: expected a level"):
            ev(alpha=a)
    with pytest.raises(TypeError, match="k: expected an integer"):
        ev(k=4.7)
    with pytest.raises(ValueError, match="methods: expected at least one"):
        ev(methods=())
    with pytest.raises(TypeError, match="methods: expected a sequence"):
        ev(methods="random_mean")
    with pytest.raises(ValueError, match="at most once"):
        ev(methods=["random_mean", "random_mean"])
    # too few models for a split: refused as fit_anchors refuses them (it ran, scoring
    # one test model with tau-b NaN)
    few = small_sm.take(models=range(6))
    with pytest.raises(ValueError, match=r"sm: the protocol split of its 6 models leaves "
                                         r"4 train models; 8 are needed \(by random_ridge\)"):
        evaluate_protocol(few, 5, ["random_mean", "random_ridge"], seeds=(1,))
    with pytest.raises(ValueError, match="leaves 2 validation models; 4 are needed"):
        evaluate_protocol(small_sm.take(models=range(10)), 5, ["random_mean"], seeds=(1,))
    with pytest.raises(ValueError, match=r"m: expected an integer in \[0, 3\] \(the 6 items "
                                         r"less the 3 anchors\)"):
        sample_non_anchors(jax.random.key(0), jnp.array([0, 1, 2]), 6, 4)
    # NumPy / JAX scalars are numbers like any other
    r0 = ev(k=np.int64(5), alpha=np.array(0.1), dr_items=np.int32(3), settings=FAST)
    r1 = ev(k=5, alpha=jnp.float32(0.1), dr_items=3, settings=FAST)
    np.testing.assert_array_equal(r0.mae_pp, r1.mae_pp)
    r = ev(dr_items=35, settings=FAST)  # every non-anchor: the exact mean, width 0
    assert float(np.max(r.dr["width"])) < 1e-4 and float(r.dr["coverage"][0]) == 1.0


def test_protocol_auto_interval_uses_the_candidate_auto_picked(small_sm, monkeypatch):
    """A candidate whose cross-validation failed (NaN) is never ``auto``'s pick, and the
    interval is calibrated on the residuals of the candidate actually picked (it took
    ``argmin`` with the NaN first: coverage 0, width NaN)."""
    from jaxeval.anchors import _protocol, evaluate_protocol
    from jaxeval.anchors._intervals import conformal_quantile

    real = _protocol._cv_jit
    seen = []

    def first_candidate_fails(*args):
        out = np.asarray(real(*args)).copy()
        out[:, 0] = np.nan
        seen.append(out)
        return out

    monkeypatch.setattr(_protocol, "_cv_jit", first_candidate_fails)
    r = evaluate_protocol(small_sm, 5, ["auto"], seeds=(1,), settings=FAST)
    assert r.info["auto_choice"] == "cv"
    cands = _protocol.auto_candidates(32, FAST)
    pick = r.info["auto_picks"][0]
    assert pick != cands[0]
    assert np.isfinite(r.width).all() and float(r.coverage[0, 0]) > 0.5
    # the radius is the conformal quantile of exactly the picked candidate's residuals
    res = seen[0][0, cands.index(pick)].astype(np.float64).ravel()
    want = float(conformal_quantile(jnp.asarray(res), r.info["alpha"]))
    assert r.info["radius"][0][0] == pytest.approx(want, rel=1e-6)
    others = [float(conformal_quantile(jnp.asarray(seen[0][0, c].astype(np.float64).ravel()),
                                       r.info["alpha"])) for c in range(1, len(cands))
              if cands[c] != pick]
    assert all(abs(o - want) > 1e-9 for o in others)  # the check can tell them apart


def test_load_refuses_an_item_model_map_cut_short(small_sm, tmp_path):
    """An IRT-kind map whose own item factors lost rows loaded and predicted from the
    rows left (the anchors past them dropped by JAX's scatter), without an error."""
    import json

    pred = fit_anchors(small_sm, 5, method="gpirt", seed=0, settings=FAST)
    assert pred.kind == "irt"
    pred.save(tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as z:
        good = {k: z[k] for k in z.files}
    keys = json.loads(str(good["meta"]))["param_keys"]
    cut = dict(good)
    for name in ("['F'].V", "['F'].c"):
        i = keys.index(name)
        cut[f"leaf_{i}"] = good[f"leaf_{i}"][:20]
    np.savez(tmp_path / "cut.npz", **cut)
    with pytest.raises(ValueError, match=r"params\['F'\]: expected V \[40, r\]"):
        AnchorPredictor.load(tmp_path / "cut.npz")
    AnchorPredictor.load(tmp_path / "p.npz")  # the file as saved loads


def test_save_and_extra_items_name_their_argument(small_sm, tmp_path):
    pred = fit_anchors(small_sm, 5, method="random_ridge", seed=0, settings=FAST)
    with pytest.raises(TypeError, match="path: expected a file path or a binary file"):
        pred.save(None)
    with pytest.raises(FileNotFoundError, match="no such folder") as e:
        pred.save(tmp_path / "missing" / "p.npz")
    assert ".tmp-" not in str(e.value)
    x = small_sm.take(models=[0], items=pred.anchor_items).scores[0]
    extra = pred.extra_items(3, seed=0)
    with pytest.raises(TypeError, match="extra_items: expected a sequence of item names"):
        pred.predict_unbiased(x, [list(extra[:2]), [extra[2]]], [1, 0, 1])
    # positions are not names (they were read as the names "12", ... and called unknown)
    pos = [list(pred.items).index(e) for e in extra]
    with pytest.raises(TypeError, match="got int64 values; for positions in items, pass "
                       r"pred.items\[positions\]"):
        pred.predict_unbiased(x, np.asarray(pos, np.int64), [1, 0, 1])
    np.testing.assert_array_equal(  # ... which works
        pred.predict_unbiased(x, pred.items[pos], [1, 0, 1]),
        pred.predict_unbiased(x, extra, [1, 0, 1]))
    # items named by numbers ("0", "1", ...): integers that are item names are names
    numbered = jaxeval.ScoreMatrix(small_sm.scores, models=small_sm.models,
                                   items=[str(i) for i in range(small_sm.n_items)])
    npred = fit_anchors(numbered, 5, method="random_ridge", seed=0, settings=FAST)
    extra = npred.extra_items(3, seed=0)
    nx = numbered.take(models=[0], items=npred.anchor_items).scores[0]
    np.testing.assert_array_equal(npred.predict_unbiased(nx, extra.astype(int), [1, 0, 1]),
                                  npred.predict_unbiased(nx, extra, [1, 0, 1]))


def edited_npz(src, dst, **change):
    """A copy of the saved predictor ``src`` at ``dst`` with ``change`` applied: keys of
    its JSON metadata are set there, any other key replaces (or adds) that array."""
    import json

    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    for k, v in change.items():
        if k in meta:
            meta[k] = v
        else:
            arrays[k] = v
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(dst, **arrays)
    return dst


def test_load_refuses_inconsistent_contents(small_sm, tmp_path):
    """A saved predictor whose parts do not fit together (hand-edited or corrupt) is
    refused at ``load`` with the file named, instead of predicting nonsense (an
    out-of-range anchor index was clamped by JAX; a negative radius gave lower > upper;
    an unknown map kind recursed forever)."""
    import json

    pred = fit_anchors(small_sm, 5, method="random_ridge", seed=0, settings=FAST)
    pred.save(tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz") as z:
        good = {k: z[k] for k in z.files}

    def edited(name, **change):
        return edited_npz(tmp_path / "p.npz", tmp_path / name, **change)

    cases = {
        "kind": dict(kind="nope"),
        "anchor_index": dict(anchor_index=np.array([0, 1, 2, 3, 9999], np.int32)),
        "distinct": dict(anchor_index=np.array([0, 1, 2, 3, 3], np.int32)),
        "radius": dict(radius=-0.3),
        "alpha": dict(alpha=1.5),
    }
    keys = json.loads(str(good["meta"]))["param_keys"]
    w = keys.index("['lin'].w")  # the linear map's weights: for 9 anchors, k = 5
    cases["anchors"] = {f"leaf_{w}": np.zeros(9, np.float32)}
    nan_w = good[f"leaf_{w}"].copy()
    nan_w[0] = np.nan  # loaded, then every prediction NaN
    cases["nan"] = {f"leaf_{w}": nan_w}
    assert "item_rho" in good  # the factorization kept for predict_unbiased
    cases["rho"] = {"item_rho": np.asarray(-5.0, np.float32)}
    V = good["item_V"].copy()
    V[0, 0] = np.nan
    cases["item_V"] = {"item_V": V}
    # parts that failed only later, deep inside JAX (predict_unbiased), or were truncated
    cases["u_mean"] = {"item_u_mean": good["item_u_mean"][:2]}
    cases["rho3"] = {"item_rho": np.array([1.0, 2.0, 3.0], np.float32)}
    cases["float_index"] = {"anchor_index": good["anchor_index"].astype(np.float64) + 0.7}
    for what, change in cases.items():
        with pytest.raises(ValueError, match="not a readable saved AnchorPredictor"):
            AnchorPredictor.load(edited(f"bad-{what}.npz", **change))
    meta = json.loads(str(good["meta"]))
    del meta["radius"]
    np.savez(tmp_path / "noradius.npz", **{**good, "meta": np.array(json.dumps(meta))})
    with pytest.raises(ValueError, match="radius"):
        AnchorPredictor.load(tmp_path / "noradius.npz")
    back = AnchorPredictor.load(edited("same.npz"))  # unedited: loads
    x = small_sm.take(items=pred.anchor_items).scores[:3]
    np.testing.assert_array_equal(back.predict(x)[0], pred.predict(x)[0])
    # the same items in another order are the same benchmark (read by name): loaded;
    # other items, or one given twice, are refused
    back = AnchorPredictor.load(tmp_path / "p.npz", items=small_sm.items[::-1])
    np.testing.assert_array_equal(back.predict(x)[0], pred.predict(x)[0])
    with pytest.raises(ValueError, match="missing"):
        AnchorPredictor.load(tmp_path / "p.npz", items=small_sm.items[1:])
    twice = np.append(small_sm.items, small_sm.items[0])
    with pytest.raises(ValueError, match="an item given twice"):
        AnchorPredictor.load(tmp_path / "p.npz", items=twice)


def test_evaluate_protocol_unbiased_estimate_without_auto(small_sm):
    """``dr_items`` with methods that include neither ``auto`` nor its candidates (it
    crashed on an empty index): the estimate is built on the best method's anchors."""
    from jaxeval.anchors import evaluate_protocol

    methods = ["random_mean", "anchor_points"]
    r = evaluate_protocol(small_sm, 5, methods, seeds=(1, 2), settings=FAST, dr_items=10)
    assert r.dr is not None and np.isfinite(np.asarray(r.dr["mae_pp"])).all()
    # the method best on validation, per seed, and exactly its estimate
    best = [methods[int(np.argmin(v))] for v in r.info["val_mse"]]
    assert r.dr["anchors_of"] == best
    for s, m in enumerate(best):
        alone = evaluate_protocol(small_sm, 5, [m], seeds=(s + 1,), settings=FAST, dr_items=10)
        assert alone.dr["anchors_of"] == [m]
        for key in ("mae_pp", "coverage", "width"):
            np.testing.assert_allclose(r.dr[key][s], alone.dr[key][0], rtol=1e-6)


# the seeds' bit-for-bit invariance of the whole protocol on real data (~45 s); the per-method
# kernels' vmap invariance stays in the default tier
@pytest.mark.slow
@pytest.mark.default_codegen
def test_a_seed_gets_the_same_result_alone_or_with_other_seeds(shared_data):
    """The protocol loops over seeds (``lax.map``), so one seed's anchors and predictions
    do not depend on which other seeds run with it. Vmapped seeds (the kernel before,
    ``vmap_seeds=True`` now) gave TailoredBench seed 44 other k-means anchors alone
    than beside seed 43 (XLA rounds a batch of one differently): up to 0.04 pp of MAE
    with the default thread pool on 2 cores, 0.34 pp with NPROC=32."""
    from jaxeval.anchors._protocol import evaluate_protocol

    sm = jaxeval.load(str(shared_data / "tailoredbench_gsm8k.npz"), duplicate_names="rename")
    methods = ("kmeans_ridge", "aiscis_ridge")
    one = evaluate_protocol(sm, 100, methods, seeds=(44,))
    two = evaluate_protocol(sm, 100, methods, seeds=(43, 44))
    np.testing.assert_array_equal(one.anchors[:, 0], two.anchors[:, 1])
    np.testing.assert_array_equal(one.mae_pp[:, 0], two.mae_pp[:, 1])
    assert one.info["seeds_batched"] == "loop"


@pytest.mark.slow
def test_auto_by_cross_validation_on_musr_k100_finishes():
    """With the folds vmapped, this run hung at 0% CPU on a 2-core machine (2 of 2 tries:
    jaxlib 0.10.2's concurrent batched LAPACK calls deadlock XLA's CPU thread pool);
    the folds now run one after another and it finishes in ~30 s. In a subprocess with
    its own time limit, so a regression fails instead of hanging the suite."""
    import os
    import subprocess
    import sys

    code = (
        "import jaxeval\n"
        "from jaxeval.anchors import Settings\n"
        "from jaxeval.anchors._protocol import evaluate_protocol\n"
        "r = evaluate_protocol(jaxeval.load('oll2_musr'), 100, ('auto',), seeds=(42,),\n"
        "                      settings=Settings(auto_cv_below=100))\n"
        "assert r.info['auto_choice'] == 'cv'\n"
        "print('ok', float(r.mae_pp[0, 0]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "XLA_FLAGS")}
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.fail("auto's cross-validation on MuSR, k = 100, did not finish in 600 s")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")


def test_leakage_guard_test_rows_do_not_matter():
    """Perturbing some test models changes neither the anchors nor the predictor: the
    other test models' predictions, the intervals' radius and the validation errors
    stay bit for bit the same."""
    from jaxeval.anchors._protocol import evaluate_protocol

    s, y, _ = _planted(m=150, n=40)
    sm = jaxeval.ScoreMatrix(s)
    sp = sm.protocol_split(42)
    test_names = sp.test.models
    flipped = test_names[::2]  # every other test model (in the split's order)
    s2 = s.copy()
    s2[np.isin(sm.models, flipped)] = 1.0 - s2[np.isin(sm.models, flipped)]
    sm2 = jaxeval.ScoreMatrix(s2)
    methods = ("greedy_ridge", "aiscis_ridge")
    r1 = evaluate_protocol(sm, 5, methods, seeds=(42,), settings=FAST, dedup=False)
    r2 = evaluate_protocol(sm2, 5, methods, seeds=(42,), settings=FAST, dedup=False)
    np.testing.assert_array_equal(r1.anchors, r2.anchors)
    assert r1.info["radius"] == r2.info["radius"] and r1.info["val_mse"] == r2.info["val_mse"]
    kept = ~np.isin(test_names, flipped)
    assert r1.predictions.shape == (2, 1, test_names.size) and kept.sum() > 0
    np.testing.assert_array_equal(r1.predictions[..., kept], r2.predictions[..., kept])
    assert not np.allclose(r1.predictions[..., ~kept], r2.predictions[..., ~kept])
    assert not np.allclose(r1.mae_pp, r2.mae_pp)  # the test rows did change


def test_shrunk_ridge_never_worse_on_validation_than_ridge_or_mean():
    """The shrunk map's grid holds the ridge grid and (nearly) the plain mean."""
    s, y, _ = _planted(seed=4, m=120, n=60)
    y = s.mean(1)  # row-mean target: the plain anchor mean is unbiased
    d = SplitData(*(jnp.asarray(a) for a in (s[:60], y[:60], s[60:], y[60:])))
    key = jax.random.key(0)
    val = lambda f: float(jnp.mean((apply_map(f, d.s_val[:, f.anchors]) - d.y_val) ** 2))
    sh = _fit(key, d, 20, "random_shrunk", FAST)
    rr = _fit(key, d, 20, "random_ridge", FAST)
    mean = _fit(key, d, 20, "random_mean", FAST)
    np.testing.assert_array_equal(sh.anchors, rr.anchors)
    assert sh.kind == "linear"
    assert val(sh) <= val(rr) + 1e-7
    # a constant shift of the mean is in the family (lam -> inf); allow the finite grid
    shifted = mean.params["w"], float(jnp.mean(d.y_tr - d.s_tr[:, mean.anchors] @ mean.params["w"]))
    x_val = d.s_val[:, mean.anchors]
    mse_shift = float(jnp.mean((x_val @ shifted[0] + shifted[1] - d.y_val) ** 2))
    assert val(sh) <= mse_shift * 1.01


def test_cv_folds_partition_pooled_rows():
    from jaxeval.anchors._methods import cv_folds

    m_tr, m_val, n = 37, 12, 5
    s = np.arange((m_tr + m_val) * n, dtype=np.float32).reshape(-1, n)
    y = s[:, 0].copy()  # row id * n: identifies the model
    d = SplitData(s[:m_tr], y[:m_tr], s[m_tr:], y[m_tr:])
    folds, s_ho, y_ho = cv_folds(d, 5, seed=1)
    h = (m_tr + m_val) // 5
    assert s_ho.shape == (5, h, n) and folds.s_val.shape == (5, h, n)
    assert folds.s_tr.shape == (5, m_tr + m_val - 2 * h, n)
    held = set()
    for f in range(5):
        tr, va, ho = (set(folds.y_tr[f].tolist()), set(folds.y_val[f].tolist()),
                      set(y_ho[f].tolist()))
        assert not (tr & va) and not (tr & ho) and not (va & ho)
        assert tr | va | ho == set(y.tolist())
        np.testing.assert_array_equal(s_ho[f][:, 0], y_ho[f])
        held |= ho
    assert len(held) == 5 * h
    with pytest.raises(ValueError, match="folds"):
        cv_folds(d, 2, seed=1)


def test_auto_by_cross_validation_ignores_test_rows():
    """Small validation -> auto picks by CV on train + validation; test rows never matter."""
    from jaxeval.anchors._protocol import evaluate_protocol

    s, y, _ = _planted(m=150, n=40)
    sm = jaxeval.ScoreMatrix(s)
    sp = sm.protocol_split(43)
    test_rows = np.isin(sm.models, sp.test.models)
    s2 = s.copy()
    s2[test_rows] = 1.0 - s2[test_rows]
    sm2 = jaxeval.ScoreMatrix(s2)
    methods = ("random_ridge", "auto")
    r1 = evaluate_protocol(sm, 5, methods, seeds=(43,), settings=FAST, dedup=False)
    r2 = evaluate_protocol(sm2, 5, methods, seeds=(43,), settings=FAST, dedup=False)
    assert r1.info["auto_choice"] == "cv"  # 30 validation models < 50
    assert r1.info["auto_picks"] == r2.info["auto_picks"]
    np.testing.assert_array_equal(r1.info["cv_mse"], r2.info["cv_mse"])
    np.testing.assert_array_equal(r1.anchors, r2.anchors)
    assert not np.allclose(r1.mae_pp, r2.mae_pp)
    pick = r1.info["auto_picks"][0]
    from jaxeval.anchors import AUTO_CANDIDATES

    assert pick == AUTO_CANDIDATES[int(np.argmin(r1.info["cv_mse"][0]))]


# --------------------------------------------------------- low-rank estimator
def test_lowrank_linear_form_equals_difference_estimator():
    """The folded linear map = the estimator written out (posterior z, then the mean)."""
    from jaxeval.anchors._lowrank import _linear_for, lowrank_basis

    s, _, _ = _planted(seed=5, m=80, n=40)
    basis = lowrank_basis(jnp.asarray(s[:60]), 6)
    a = jnp.array([2, 7, 8, 15, 21, 29])
    lin = _linear_for(basis, a, jnp.asarray(3), jnp.asarray(0.2, jnp.float32))
    mu, V = np.asarray(basis.mu, np.float64), np.asarray(basis.V, np.float64)[:, :3]
    x = s[60:][:, np.asarray(a)].astype(np.float64)
    Va = V[np.asarray(a)]
    z = np.linalg.solve(Va.T @ Va + 0.2 * np.eye(3), Va.T @ (x - mu[np.asarray(a)]).T).T
    rest = np.setdiff1d(np.arange(40), np.asarray(a))
    want = (x.sum(1) + (mu[rest] + z @ V[rest].T).sum(1)) / 40
    np.testing.assert_allclose(np.asarray(x @ lin.w + lin.b), want, rtol=1e-4, atol=1e-5)
    # the same basis by hand: the centred training scores' top right singular vectors
    _, sv, vt = np.linalg.svd(s[:60] - s[:60].mean(0), full_matrices=False)
    np.testing.assert_allclose(np.abs(V[:, 0]), np.abs(vt[0] * sv[0] / np.sqrt(60)), rtol=1e-3,
                               atol=1e-5)


def test_lowrank_recovers_mean_of_low_rank_scores():
    """On rank-2 graded scores a few anchors pin the benchmark mean almost exactly."""
    from jaxeval.anchors._lowrank import fit_lowrank_validated, lowrank_basis

    rng = np.random.default_rng(6)
    m, n, k = 200, 80, 8
    s = 1 / (1 + np.exp(-(rng.normal(size=(m, 2)) @ rng.normal(size=(2, n)))))
    s = (0.5 + 0.9 * (s - 0.5)).astype(np.float32)  # smooth, rank-2-ish, inside [0, 1]
    y = s.mean(1)
    a = jnp.asarray(np.sort(rng.choice(n, k, replace=False)))
    x = s[:, np.asarray(a)]
    lin, mse = fit_lowrank_validated(lowrank_basis(jnp.asarray(s[:120])), a, x[:120], y[:120],
                                     x[120:160], y[120:160])
    err = np.abs(np.asarray(x[160:] @ lin.w + lin.b) - y[160:]).mean()
    naive = np.abs(x[160:].mean(1) - y[160:]).mean()
    assert err < 0.15 * naive and err < 0.01


def test_cv_residuals_give_mse():
    from jaxeval.anchors._methods import candidate_cv_mse, candidate_cv_residuals, cv_folds

    s, y, _ = _planted(m=120, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:90], y[:90], s[90:], y[90:])))
    folds, s_ho, y_ho = cv_folds(d, 5, seed=0)
    args = (jax.random.key(0), jax.tree.map(jnp.asarray, folds), jnp.asarray(s_ho),
            jnp.asarray(y_ho), 5, ("random_ridge", "greedy_mix"), FAST)
    res = np.asarray(jax.jit(candidate_cv_residuals, static_argnums=(4, 5, 6))(*args))
    assert res.shape == (2, 5, 24)
    mse = jax.jit(candidate_cv_mse, static_argnums=(4, 5, 6))(*args)
    np.testing.assert_allclose(np.asarray(mse), (res**2).mean((1, 2)), rtol=1e-5)


# ~65 s; test_auto_by_cross_validation_ignores_test_rows keeps auto's CV path in the default tier
@pytest.mark.slow
def test_fit_anchors_auto_cv_choice_and_cross_fitted_interval(small_sm):
    """Few validation models: auto picks by CV, and its radius is a conformal quantile
    of the chosen candidate's cross-fitted residuals (not of validation residuals)."""
    from jaxeval.anchors import AUTO_CANDIDATES
    from jaxeval.anchors._api import _cv_jit
    from jaxeval.anchors._methods import cv_folds

    pred = fit_anchors(small_sm, 6, seed=0, settings=FAST)  # 32 validation models
    info = pred.info
    assert info["auto_choice"] == "cv"
    assert set(info["cv_mse"]) == set(AUTO_CANDIDATES)
    assert pred.method == min(info["cv_mse"], key=info["cv_mse"].get)
    val, tr = small_sm.split([32], seed=0)  # fit_anchors' own hold-out
    d2 = SplitData(*(jnp.asarray(a) for a in (tr.scores, tr.true_score(), val.scores,
                                               val.true_score())))
    f2, h2, y2 = cv_folds(d2, 5, seed=0)
    # the same compiled kernel fit_anchors used, on the folds rebuilt by hand
    r2 = np.asarray(_cv_jit(jax.random.key(0), jax.tree.map(jnp.asarray, f2), jnp.asarray(h2),
                            jnp.asarray(y2), 6, AUTO_CANDIDATES, FAST))
    c = AUTO_CANDIDATES.index(pred.method)
    np.testing.assert_allclose((r2**2).mean((1, 2)), [info["cv_mse"][m] for m in AUTO_CANDIDATES],
                               rtol=1e-5)
    np.testing.assert_allclose(pred.radius, float(conformal_quantile(jnp.asarray(r2[c].ravel()),
                                                                     0.1)), rtol=1e-5)


# ~2 min of MLP trainings; the validation choice without halves runs in the protocol tests
@pytest.mark.slow
def test_fit_anchors_auto_validation_choice_and_halves_interval(small_sm):
    """With many validation models auto picks on validation (residual MLP and reference
    MLP included); by default (``auto_halves``) its radius is the conformal quantile of
    the half-cross-fitted residuals, not of the residuals on the models it chose on;
    ``auto_halves=False`` gives the latter."""
    from jaxeval.anchors import AUTO_CANDIDATES, AUTO_VALIDATION_EXTRA

    val, tr = small_sm.split([32], seed=0)  # fit_anchors' own hold-out
    d2 = SplitData(*(jnp.asarray(a) for a in (tr.scores, tr.true_score(), val.scores,
                                               val.true_score())))
    big = dataclasses.replace(FAST, auto_cv_below=10, resmlp_steps=40)  # auto_halves: default
    pred2 = fit_anchors(small_sm, 6, seed=0, settings=big)
    assert pred2.info["auto_choice"] == "validation"
    assert pred2.info["interval_calibration"] == "validation halves"
    vm = pred2.info["validation_mse"]
    assert set(vm) == set(AUTO_CANDIDATES + AUTO_VALIDATION_EXTRA)
    assert pred2.method == min(vm, key=vm.get)
    # its radius: the conformal quantile of the half-cross-fitted residuals
    from jaxeval.anchors._methods import crossfit_selected_residuals, validation_halves

    ia, ib = (jnp.asarray(i) for i in validation_halves(32, 0))
    cands = AUTO_CANDIDATES + AUTO_VALIDATION_EXTRA
    hr, _ = jax.jit(crossfit_selected_residuals, static_argnums=(2, 3, 4))(
        jax.random.key(0), d2, 6, cands, big, ia, ib)
    np.testing.assert_allclose(pred2.radius, float(conformal_quantile(hr.ravel(), 0.1)),
                               rtol=1e-5)
    vres = pred2.predict(val.take(items=pred2.anchor_items).scores)[0]
    plain = float(conformal_quantile(jnp.asarray(vres - val.true_score()), 0.1))
    assert pred2.radius != pytest.approx(plain)
    old = fit_anchors(small_sm, 6, seed=0, settings=dataclasses.replace(big, auto_halves=False))
    assert old.info["interval_calibration"] == "validation models" and old.method == pred2.method
    assert old.radius == pytest.approx(plain, rel=1e-5)


@pytest.mark.slow  # ~40 s of refits
def test_crossfit_selected_residuals_never_score_their_own_half():
    """Row 0 = the candidate chosen on half A, refitted with A as its validation set,
    scored on half B (and the reverse); B's targets move its residuals one for one and
    nothing else; reusing the full fit's training-only cache changes nothing."""
    from jaxeval.anchors._methods import crossfit_selected_residuals, validation_halves

    s, y, _ = _planted(m=200, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:140], y[:140], s[140:], y[140:])))
    ia, ib = (jnp.asarray(i) for i in validation_halves(60, 3))
    assert ia.shape == ib.shape == (30,) and not set(np.asarray(ia)) & set(np.asarray(ib))
    meths = ("random_ridge", "greedy_shrunk", "aiscis_ridge")
    key = jax.random.key(4)

    @jax.jit
    def both(d):
        cache: dict = {}
        for m in meths:
            fit_method(key, d, 5, m, FAST, cache)
        return (crossfit_selected_residuals(key, d, 5, meths, FAST, ia, ib, cache),
                crossfit_selected_residuals(key, d, 5, meths, FAST, ia, ib))

    (res, pick), (res0, pick0) = both(d)
    np.testing.assert_array_equal(np.asarray(res), np.asarray(res0))
    np.testing.assert_array_equal(np.asarray(pick), np.asarray(pick0))
    for row, (fi, hi) in enumerate(((ia, ib), (ib, ia))):
        dh = SplitData(d.s_tr, d.y_tr, d.s_val[fi], d.y_val[fi])
        fits = [_fit(key, dh, 5, m, FAST) for m in meths]
        mse = [float(jnp.mean((jnp.clip(apply_map(f, dh.s_val[:, f.anchors]), 0, 1)
                               - dh.y_val) ** 2)) for f in fits]
        assert int(pick[row]) == int(np.argmin(mse))
        f = fits[int(pick[row])]
        want = jnp.clip(apply_map(f, d.s_val[hi][:, f.anchors]), 0, 1) - d.y_val[hi]
        np.testing.assert_allclose(np.asarray(res[row]), np.asarray(want), atol=1e-6)
    # shift the targets of half B: row 0 (scored on B) moves by exactly -0.05
    y2 = np.asarray(d.y_val).copy()
    y2[np.asarray(ib)] += 0.05
    (res2, pick2), _ = both(d._replace(y_val=jnp.asarray(y2)))
    assert int(pick2[0]) == int(pick[0])
    np.testing.assert_allclose(np.asarray(res2[0]), np.asarray(res[0]) - 0.05, atol=1e-6)


# ------------------------------------------------------ residual (regularised) MLP
def test_resmlp_starts_at_shrunk_ridge_and_never_loses_on_validation():
    """Step 0 of the residual MLP is the shrunk ridge map; the checkpoint rule keeps it
    unless a later checkpoint has a lower validation error."""
    s, y, _ = _planted(seed=5, m=160, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:], y[100:])))
    key = jax.random.key(0)
    st = dataclasses.replace(FAST, resmlp_steps=100)
    val = lambda f: float(jnp.mean((apply_map(f, d.s_val[:, f.anchors]) - d.y_val) ** 2))
    sh = _fit(key, d, 8, "greedy_shrunk", st)
    rm = _fit(key, d, 8, "greedy_resmlp", st)
    np.testing.assert_array_equal(rm.anchors, sh.anchors)
    assert rm.kind == "resmlp"
    clip_sh = float(jnp.mean((jnp.clip(apply_map(sh, d.s_val[:, sh.anchors]), 0, 1)
                              - d.y_val) ** 2))
    assert val(rm) <= clip_sh + 1e-7
    assert int(rm.params["best_step"]) % st.eval_every == 0
    # at initialisation (zero last layer) the network is exactly the clipped base map
    from jaxeval.anchors._mlp import RES_HIDDEN

    params, static = init_mlp(key, 8, hidden=RES_HIDDEN, zero_last=True)
    x = d.s_val[:, sh.anchors]
    base = apply_map(sh, x)
    np.testing.assert_allclose(mlp_apply(params, static, x, base=base),
                               jnp.clip(base, 1e-4, 1 - 1e-4), rtol=1e-5, atol=1e-6)


# ~30 s of training; test_resmlp_starts_at_shrunk_ridge_and_never_loses_on_validation stays
@pytest.mark.slow
def test_resmlp_learns_an_interaction_ridge_cannot():
    """Target = an AND of two items (plus noise-free mean): the MLP correction must
    beat the linear map clearly on held-out rows, on the same anchors."""
    rng = np.random.default_rng(7)
    m, n = 600, 12
    s = (rng.random((m, n)) < 0.5).astype(np.float32)
    y = (0.2 + 0.1 * s[:, :4].mean(1) + 0.5 * s[:, 0] * s[:, 1]).astype(np.float32)
    d = SplitData(*(jnp.asarray(a) for a in (s[:300], y[:300], s[300:450], y[300:450])))
    st = dataclasses.replace(FAST, resmlp_steps=600, eval_every=50, resmlp_lr=1e-2)
    key = jax.random.key(1)
    sh = _fit(key, d, 4, "greedy_shrunk", st)
    rm = _fit(key, d, 4, "greedy_resmlp", st)
    x_te, y_te = jnp.asarray(s[450:]), jnp.asarray(y[450:])
    mse = lambda f: float(jnp.mean((apply_map(f, x_te[:, f.anchors]) - y_te) ** 2))
    assert {0, 1} <= set(np.asarray(rm.anchors).tolist())
    assert mse(rm) < 0.25 * mse(sh), (mse(rm), mse(sh))


@pytest.mark.slow  # ~50 s of MLP training
def test_greedy_mlp_is_the_reference_mlp_on_the_greedy_anchors(small_sm, tmp_path):
    """``greedy_mlp`` = the SparseEval MLP (same trainer, same key) on greedy_ridge's anchors."""
    s, y, _ = _planted(seed=5, m=160, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:], y[100:])))
    key = jax.random.key(2)
    st = dataclasses.replace(FAST, final_steps=60)
    gm = _fit(key, d, 6, "greedy_mlp", st)
    gr = _fit(key, d, 6, "greedy_ridge", st)
    np.testing.assert_array_equal(gm.anchors, gr.anchors)
    assert gm.kind == "mlp"
    from jaxeval.anchors._methods import _K_FINAL

    fit, static = train_mlp(jax.random.fold_in(key, _K_FINAL), d.s_tr[:, gr.anchors], d.y_tr,
                            d.s_val[:, gr.anchors], d.y_val, num_steps=60,
                            eval_every=st.eval_every)
    x = d.s_val[:, gr.anchors]
    np.testing.assert_allclose(apply_map(gm, x), mlp_apply(fit.params, static, x),
                               rtol=1e-5, atol=1e-6)
    pred = fit_anchors(small_sm, 5, method="greedy_mlp", seed=0, settings=st)
    x = small_sm.take(items=pred.anchor_items).scores
    pred.save(tmp_path / "g.npz")
    back = AnchorPredictor.load(tmp_path / "g.npz", items=small_sm)
    np.testing.assert_allclose(back.predict(x)[0], pred.predict(x)[0], rtol=1e-6)


def test_greedy_mlp_ens_averages_its_members(small_sm, tmp_path):
    """``greedy_mlp_ens`` = the mean of ``mlp_members`` reference MLPs on greedy_ridge's
    anchors, member 0 trained with greedy_mlp's key and member e from
    ``fold_in(that key, 1000 + e)``, each with its own validation checkpoint; it saves
    and loads whole."""
    from jaxeval.anchors._methods import _K_FINAL, _K_MEMBER

    s, y, _ = _planted(seed=5, m=160, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:], y[100:])))
    key = jax.random.key(2)
    st = dataclasses.replace(FAST, final_steps=60, mlp_members=3)
    ens = _fit(key, d, 6, "greedy_mlp_ens", st)
    one = _fit(key, d, 6, "greedy_mlp", st)
    np.testing.assert_array_equal(ens.anchors, one.anchors)
    assert ens.kind == "mlp_mean" and ens.params["best_step"].shape == (3,)
    x = d.s_val[:, ens.anchors]
    kf = jax.random.fold_in(key, _K_FINAL)
    preds = []
    for e in range(3):
        fit, static = train_mlp(kf if e == 0 else jax.random.fold_in(kf, _K_MEMBER + e),
                                d.s_tr[:, ens.anchors], d.y_tr, x, d.y_val, num_steps=60,
                                eval_every=st.eval_every)
        preds.append(np.asarray(mlp_apply(fit.params, static, x)))
    np.testing.assert_allclose(preds[0], apply_map(one, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(apply_map(ens, x), np.mean(preds, axis=0), rtol=1e-5, atol=1e-6)
    assert np.ptp(np.stack(preds), axis=0).max() > 1e-4  # the members really differ

    pred = fit_anchors(small_sm, 5, method="greedy_mlp_ens", seed=0,
                       settings=dataclasses.replace(FAST, final_steps=40, mlp_members=2))
    assert pred.kind == "mlp_mean"
    xs = small_sm.take(items=pred.anchor_items).scores
    pred.save(tmp_path / "e.npz")
    back = AnchorPredictor.load(tmp_path / "e.npz", items=small_sm)
    assert back.kind == "mlp_mean"
    np.testing.assert_allclose(back.predict(xs)[0], pred.predict(xs)[0], rtol=1e-6)


def test_one_member_ensemble_is_greedy_mlp():
    """``Settings(mlp_members=1)``: ``auto``'s ensemble candidate is ``greedy_mlp``'s
    single network (its documented cheap setting), up to float rounding."""
    s, y, _ = _planted(seed=6, m=160, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:], y[100:])))
    key = jax.random.key(3)
    st = dataclasses.replace(FAST, final_steps=60, mlp_members=1)
    ens, one = (_fit(key, d, 6, m, st) for m in ("greedy_mlp_ens", "greedy_mlp"))
    np.testing.assert_array_equal(ens.anchors, one.anchors)
    assert int(ens.params["best_step"][0]) == int(one.params["best_step"])
    x = d.s_val[:, ens.anchors]
    np.testing.assert_allclose(apply_map(ens, x), apply_map(one, x), rtol=1e-5, atol=1e-6)


def test_greedy_mlp_ens_crossfit_reuse_equals_refits():
    """The halves' checkpoints of an ensemble chosen from its members' saved
    validation paths (each member its own) give the residuals of refitting the
    ensemble with each half as its validation set."""
    from jaxeval.anchors._methods import crossfit_residuals, validation_halves

    s, y, _ = _planted(m=140, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:131], y[100:131])))
    ia, ib = (jnp.asarray(i) for i in validation_halves(31, 3))
    st = dataclasses.replace(FAST, final_steps=300, eval_every=10, mlp_members=3)

    def reuse(key):
        c = {}
        fit_method(key, d, 5, "greedy_mlp_ens", st, c)
        return crossfit_residuals(key, d, 5, ("greedy_mlp_ens",), st, ia, ib, c)

    key = jax.random.key(0)
    got = jax.jit(reuse)(key)
    fresh = jax.jit(lambda k: crossfit_residuals(k, d, 5, ("greedy_mlp_ens",), st, ia, ib,
                                                 None))(key)
    np.testing.assert_allclose(got[0], fresh[0], atol=1e-6)
    np.testing.assert_allclose(got[1], fresh[1], rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("bad", [0, -1, 1001, 2.0, True])
def test_mlp_members_is_checked(small_sm, bad):
    st = dataclasses.replace(FAST, mlp_members=bad)
    error = TypeError if isinstance(bad, (bool, float)) else ValueError  # (not an integer)
    with pytest.raises(error, match="settings.mlp_members"):
        fit_anchors(small_sm, 5, method="greedy_mlp_ens", settings=st)


def test_resmlp_save_load_roundtrip(small_sm, tmp_path):
    st = dataclasses.replace(FAST, resmlp_steps=40)
    pred = fit_anchors(small_sm, 5, method="greedy_resmlp", seed=0, settings=st)
    assert pred.kind == "resmlp"
    x = small_sm.take(items=pred.anchor_items).scores
    pred.save(tmp_path / "r.npz")
    back = AnchorPredictor.load(tmp_path / "r.npz", items=small_sm)
    np.testing.assert_allclose(back.predict(x)[0], pred.predict(x)[0], rtol=1e-6)


def test_sparseeval_mlp_save_load_roundtrip(small_sm, tmp_path):
    st = dataclasses.replace(FAST, final_steps=40)
    pred = fit_anchors(small_sm, 5, method="random_mlp", seed=0, settings=st)
    x = small_sm.take(items=pred.anchor_items).scores
    pred.save(tmp_path / "m.npz")
    back = AnchorPredictor.load(tmp_path / "m.npz", items=small_sm)
    np.testing.assert_allclose(back.predict(x)[0], pred.predict(x)[0], rtol=1e-6)


def test_dropout_masks_frequency_and_independence():
    """The hashed dropout masks keep 1 - rate of the units (binomial tolerance) and show
    no correlation between neighbouring units, layers or steps (4 sd bounds)."""
    from jaxeval.anchors._mlp import dropout_keep

    shape, rate = (500, 128), 0.1
    n = shape[0] * shape[1]
    key = jax.random.key(11)
    steps = [np.asarray(dropout_keep(jax.random.fold_in(key, t), shape, rate), np.float64)
             for t in range(20)]
    m = np.stack(steps)
    sd = np.sqrt(0.9 * 0.1 / m.size)
    assert abs(m.mean() - 0.9) < 4 * sd, m.mean()
    for t in range(20):  # each mask on its own
        assert abs(m[t].mean() - 0.9) < 4 * np.sqrt(0.09 / n)

    def corr(a, b):
        a, b = a.ravel() - a.mean(), b.ravel() - b.mean()
        return float(a @ b / np.sqrt((a @ a) * (b @ b)))

    bound = 4 / np.sqrt(n)
    for t in range(19):
        assert abs(corr(m[t], m[t + 1])) < bound  # consecutive steps
        flat = m[t].ravel()
        assert abs(corr(flat[:-1], flat[1:])) < bound  # neighbouring units
        assert abs(corr(m[t][:, :-1], m[t][:, 1:])) < bound  # neighbouring columns
        assert abs(corr(m[t][:-1], m[t][1:])) < bound  # neighbouring models
    # a key made again from the same seed gives the same mask, another key another;
    # rate 0 keeps everything
    again = dropout_keep(jax.random.key(11), shape, rate)
    np.testing.assert_array_equal(again, dropout_keep(key, shape, rate))
    assert (np.asarray(again) != np.asarray(dropout_keep(jax.random.key(12), shape, rate))).any()
    assert bool(dropout_keep(key, shape, 0.0).all())


def test_swap_with_every_non_anchor_blocked_keeps_the_anchors():
    """When the guard has blocked every non-anchor, no swap is proposed (argmax of an
    all -inf row is item 0, which may already be an anchor: a duplicate)."""
    anchors = jnp.array([0, 1, 2, 3, 4], jnp.int32)
    blocked = jnp.zeros(6, bool).at[5].set(True)
    new, _, j = swap_step(anchors, jnp.arange(5.0), jnp.ones(6), blocked)
    assert new.tolist() == anchors.tolist() and int(j) == -1


def test_aiscis_anchors_stay_distinct_with_few_items_beyond_k():
    """With n - k below the number of swaps the guard blocks every non-anchor; the
    refined anchors must stay k distinct items (7 of 30 such runs had duplicates)."""
    from jaxeval.anchors._methods import fit_method

    st = Settings(ridge_swaps=30)
    f = jax.jit(lambda key, d: fit_method(key, d, 7, "aiscis_ridge", st).anchors)
    for seed in range(30):
        rng = np.random.default_rng(seed)
        theta, b = rng.normal(size=16), rng.normal(size=8)
        s = (rng.random((16, 8)) < 1 / (1 + np.exp(-(theta[:, None] - b)))).astype(np.float32)
        y = s.mean(1)
        d = SplitData(*(jnp.asarray(a) for a in (s[:6], y[:6], s[6:], y[6:])))
        a = np.asarray(f(jax.random.key(seed), d))
        assert len(set(a.tolist())) == 7, (seed, a.tolist())


@pytest.mark.parametrize("k", [0, 7, 2.0])
def test_selectors_refuse_k_beyond_the_items(k):
    """The exported selection kernels (and fit_method) refuse a k that cannot give k
    distinct items instead of padding with item 0 or returning fewer."""
    from jaxeval.anchors._methods import fit_method
    from jaxeval.anchors._ridge import greedy_ridge_anchors
    from jaxeval.anchors._select import kmeans_anchors, random_anchors

    s = jax.random.bernoulli(jax.random.key(0), 0.5, (20, 6)).astype(jnp.float32)
    y = s.mean(1)
    msg = r"k: expected an integer in \[1, 6\]"
    error = TypeError if isinstance(k, float) else ValueError  # (not an integer)
    with pytest.raises(error, match=msg):
        random_anchors(jax.random.key(1), 6, k)
    with pytest.raises(error, match=msg):
        kmeans_anchors(jax.random.key(1), s, k)
    with pytest.raises(error, match=msg):
        greedy_ridge_anchors(s, y, k, jnp.asarray(1.0))
    with pytest.raises(error, match=msg):
        fit_method(jax.random.key(1), SplitData(s[:14], y[:14], s[14:], y[14:]), k,
                   "random_ridge", Settings())


def test_a_failed_candidate_is_never_chosen():
    """A candidate whose error is NaN (a failed fit) ranks last in auto's choices instead
    of winning np.argmin / min as NaN does."""
    from jaxeval.anchors._api import _nan_last
    from jaxeval.anchors._protocol import nan_last_argmin

    assert nan_last_argmin(np.array([[np.nan, 2.0, 1.0], [3.0, np.nan, 4.0]])).tolist() == [2, 0]
    errs = {"a": float("nan"), "b": 0.3, "c": 0.1}
    assert min(errs, key=lambda m: _nan_last(errs[m])) == "c"
    assert min({"a": float("nan"), "b": 0.3}, key=lambda m: _nan_last(errs[m])) == "b"


def test_a_key_seed_draws_its_own_validation_split(small_sm, monkeypatch):
    """fit_anchors(seed=<key>) splits off its validation models by a seed drawn from the
    key (it always used split seed 0 for any key)."""
    from jaxeval._data import ScoreMatrix

    seen = []
    real_split = ScoreMatrix.split

    def spy(self, sizes, seed=0):
        seen.append(seed)
        return real_split(self, sizes, seed=seed)

    monkeypatch.setattr(ScoreMatrix, "split", spy)
    for key in (jax.random.key(1), jax.random.key(2)):
        fit_anchors(small_sm, 4, method="random_ridge", seed=key, settings=FAST)
    fit_anchors(small_sm, 4, method="random_ridge", seed=7, settings=FAST)
    assert len(seen) == 3 and seen[0] != seen[1] and seen[2] == 7
    p = fit_anchors(small_sm, 4, method="random_ridge", seed=0, settings=FAST)
    for bad, error in ((True, TypeError), (2.5, TypeError), (0, ValueError)):
        with pytest.raises(error, match=r"m: expected an integer in \[1, "):
            p.extra_items(bad)


def test_lowrank_estimator_refuses_repeated_anchors():
    """A repeated anchor is counted twice by the difference estimator: refused."""
    from jaxeval.anchors._lowrank import fit_lowrank_validated, lowrank_basis

    s = (np.random.default_rng(0).uniform(size=(40, 12)) < 0.5).astype(np.float32)
    a = np.array([1, 5, 5, 9])
    with pytest.raises(ValueError, match=r"anchors: expected distinct items, got \[1, 5, 5, 9\]"):
        fit_lowrank_validated(lowrank_basis(jnp.asarray(s[:30])), a, s[:30][:, a],
                              s[:30].mean(1), s[30:][:, a], s[30:].mean(1))


def test_greedy_ridge_never_repeats_an_anchor_at_zero_strength():
    """At lam = 0 constant columns give 0/0 leave-one-out errors: they must rank last
    among the unchosen items, never send the argmin back to a chosen one."""
    rng = np.random.default_rng(0)
    s = np.concatenate([np.ones((40, 6)), (rng.uniform(size=(40, 10)) < 0.5)], 1)
    s = jnp.asarray(s, jnp.float32)
    y = s[:, 6:].mean(1)
    a = np.asarray(greedy_ridge_anchors(s, y, 14, 0.0))
    assert np.unique(a).size == 14 and set(range(6, 16)) <= set(a.tolist())


@pytest.mark.parametrize("field, value", [
    ("eval_every", -5), ("final_steps", 0), ("num_swaps", -3), ("ridge_swaps", -1),
    ("kmeans_iters", -1), ("greedy_lams", (0.0, 1.0)), ("greedy_lams", ()),
    ("resmlp_lr", -1e-3), ("proxy_steps", 2.5)])
def test_settings_out_of_range_are_refused_naming_the_field(field, value):
    from jaxeval.anchors._methods import checked_settings

    error = TypeError if isinstance(value, float) and field.endswith("steps") else ValueError
    with pytest.raises(error, match=f"settings.{field}: expected"):
        checked_settings(Settings(**{field: value}), external=False)
    with pytest.raises(ValueError, match="settings.irt.num_steps: expected"):
        checked_settings(Settings(irt=IRTConfig(num_steps=-1)), external=False)


def test_guarded_refinement_scores_its_last_proposal():
    """With the guard, R swaps are R scored proposals: one swap that helps is kept
    (the last proposal used to be dropped unscored, so R = 1 did nothing)."""
    rng = np.random.default_rng(1)
    s = jnp.asarray(rng.uniform(size=(120, 30)) < 0.5, jnp.float32)
    y = s[:, :4].mean(1)

    def fit_proxy(key, x, t):
        xc = jnp.concatenate([x, jnp.ones((x.shape[0], 1))], 1)
        w = jnp.linalg.solve(xc.T @ xc + 1e-3 * jnp.eye(xc.shape[1]), xc.T @ t)
        return lambda row: jnp.concatenate([row, jnp.ones(1)]) @ w

    a0 = jnp.asarray([1, 2, 3, 20], jnp.int32)  # item 0 missing: the swap brings it in
    tr, va = slice(0, 80), slice(80, 120)
    out, trace = refine_anchors(jax.random.key(0), a0, s[tr], y[tr], s[va], y[va], fit_proxy,
                                num_swaps=1, guard=True)
    assert trace.incoming.tolist() == [0] and sorted(np.asarray(out).tolist()) == [0, 1, 2, 3]


def test_conformal_radius_counts_ties_and_takes_the_exact_rank():
    """A test residual equal to the radius is covered despite float32 rounding (ties are
    common with discrete residuals); the rank is ceil((n+1)(1-alpha)) exactly (float32
    arithmetic gave rank 16 at n = 24, alpha = 0.4)."""
    q = float(conformal_quantile(jnp.asarray([0.43 - 0.3] * 9, jnp.float32), 0.1))
    assert 0.3 - q <= 0.43 <= 0.3 + q  # float64 truth, float32 calibration residuals
    assert q == pytest.approx(0.13, abs=2e-6)
    assert float(conformal_quantile(jnp.arange(1.0, 25.0), 0.4)) == pytest.approx(15.0, rel=2e-6)
    for n in (1, 2, 8, 9, 10, 19, 24, 49, 99, 199):
        for alpha in (0.05, 0.1, 0.2, 0.4, 0.9):
            r = jnp.arange(1.0, n + 1.0)
            k = -(-(n + 1) * round((1 - alpha) * 100) // 100)  # exact: alpha has 2 decimals
            want = np.inf if k > n else float(k)
            assert float(conformal_quantile(r, alpha)) == pytest.approx(want, rel=2e-6), (n, alpha)
    with pytest.raises(ValueError, match="alpha: expected a level in"):
        conformal_quantile(jnp.arange(1.0, 5.0), 1.0)


def test_protocol_warns_when_validation_models_are_too_few_for_the_level():
    """40 models: 8 validation models, 9 are needed at alpha = 0.1: every interval is
    [0, 1] and the protocol says so instead of reporting coverage 1 silently."""
    from jaxeval.anchors import evaluate_protocol

    rng = np.random.default_rng(0)
    sm = jaxeval.ScoreMatrix((rng.uniform(size=(40, 30)) < 0.5).astype(float))
    with pytest.warns(UserWarning, match="evaluate_protocol: too few models .* 90% conformal"):
        res = evaluate_protocol(sm, 5, ("random_mean",), seeds=(42,))
    assert res.coverage[0].tolist() == [1.0]


def test_evaluate_protocol_names_bad_seeds_methods_and_data(small_sm):
    """seeds=5 / None and methods=None raised "'int' object is not iterable"; a repeated
    seed was averaged twice; an array for sm raised an AttributeError."""
    from jaxeval.anchors import evaluate_protocol

    for seeds in (5, None, "42"):
        with pytest.raises(TypeError, match="seeds: expected a sequence of split seeds"):
            evaluate_protocol(small_sm, 5, ["random_mean"], seeds=seeds)
    for twice in ([1, 1], jnp.array([1, 1]), [np.int64(1), jnp.array(1)]):
        with pytest.raises(ValueError, match=r"seeds: each split seed at most once .* \[1, 1\]"):
            evaluate_protocol(small_sm, 5, ["random_mean"], seeds=twice)
    with pytest.raises(TypeError, match="methods: expected a sequence of method names"):
        evaluate_protocol(small_sm, 5, None, seeds=(1,))
    with pytest.raises(TypeError, match=r"sm: expected a ScoreMatrix, a pandas DataFrame or a "
                                        r"2-D array of scores, got str \(jaxeval.load"):
        evaluate_protocol("oll2_musr", 5, ["random_mean"], seeds=(1,))
    # a plain array is a matrix with default names: the same protocol, the same figures
    a = evaluate_protocol(np.asarray(small_sm.scores), 5, ["random_mean"], seeds=(1,))
    b = evaluate_protocol(small_sm, 5, ["random_mean"], seeds=(1,))
    np.testing.assert_array_equal(a.mae_pp, b.mae_pp)
    np.testing.assert_array_equal(a.anchors, b.anchors)


def test_fit_anchors_reads_frames_and_arrays(small_sm, tmp_path):
    """``train`` and ``validation`` may be pandas DataFrames (read with their labels) or
    arrays (an array's validation rows are named ``validation_i``, so two arrays do not
    look like the same models); the fit is the ScoreMatrix one."""
    pd = pytest.importorskip("pandas")
    val, tr = small_sm.split([40], seed=0)
    want = fit_anchors(tr, 5, method="random_ridge", validation=val, settings=FAST)
    frame = lambda sm: pd.DataFrame(sm.scores, index=sm.models, columns=sm.items)  # noqa: E731
    for t, v in ((frame(tr), frame(val)), (tr.scores, val.scores),
                 (pd.DataFrame(tr.scores), pd.DataFrame(val.scores))):
        got = fit_anchors(t, 5, method="random_ridge", validation=v, settings=FAST)
        np.testing.assert_array_equal(got.anchor_index, want.anchor_index)
        x = val.scores[:, want.anchor_index]
        np.testing.assert_array_equal(got.predict(x), want.predict(x))
        assert got.radius == want.radius
    with pytest.raises(TypeError, match=r"validation: expected a ScoreMatrix or None, got Split"):
        fit_anchors(tr, 5, method="random_ridge", validation=small_sm.protocol_split(1))
    want.save(tmp_path / "p.npz")  # a frame's columns name the items it will be used with
    assert AnchorPredictor.load(tmp_path / "p.npz", items=frame(val)).k == 5
    with pytest.raises(ValueError, match="items: the predictor"):
        AnchorPredictor.load(tmp_path / "p.npz", items=pd.DataFrame(val.scores))
    # a default-labelled frame's columns are item_j, as the ScoreMatrix fitted on it says
    got.save(tmp_path / "q.npz")
    assert AnchorPredictor.load(tmp_path / "q.npz", items=pd.DataFrame(val.scores)).k == 5
    # counts in the settings may be 0-d arrays too (kept as ints: the settings are hashed)
    st = dataclasses.replace(FAST, ridge_swaps=np.array(5), final_steps=jnp.array(200))
    same = fit_anchors(tr, 5, method="random_ridge", validation=val, settings=st)
    np.testing.assert_array_equal(same.predict(x), want.predict(x))


@pytest.mark.parametrize("method, seed", [("greedy_ridge", 0), ("sparseeval", 2)])
def test_named_method_interval_calibrated_on_validation_halves(small_sm, method, seed):
    """A named method that tunes on the validation models (the greedy anchor pick and
    the ridge strength; SparseEval's start and MLP checkpoint) has its radius from
    residuals its choices never saw: the conformal quantile of its half-cross-fitted
    residuals (``Settings.named_halves``); ``named_halves=False`` gives the old
    calibration on all validation models; ``evaluate_protocol`` computes the same
    radius for the same split. (``seed`` is one where the halves' choices and the
    full fit's differ: where they agree the two radii are equal.)"""
    from jaxeval.anchors import evaluate_protocol
    from jaxeval.anchors._methods import crossfit_selected_residuals, validation_halves

    val, tr = small_sm.split([32], seed=0)  # fit_anchors' own hold-out
    pred = fit_anchors(tr, 6, method=method, seed=seed, validation=val, settings=FAST)
    assert pred.info["interval_calibration"] == "validation halves"
    d2 = SplitData(*(jnp.asarray(a) for a in (tr.scores, tr.true_score(), val.scores,
                                               val.true_score())))
    ia, ib = (jnp.asarray(i) for i in validation_halves(32, seed))
    hr, picks = jax.jit(crossfit_selected_residuals, static_argnums=(2, 3, 4))(
        jax.random.key(seed), d2, 6, (method,), FAST, ia, ib)
    assert np.asarray(picks).tolist() == [0, 0]
    np.testing.assert_allclose(pred.radius, float(conformal_quantile(hr.ravel(), 0.1)),
                               rtol=1e-5)
    old = fit_anchors(tr, 6, method=method, seed=seed, validation=val,
                      settings=dataclasses.replace(FAST, named_halves=False))
    assert old.info["interval_calibration"] == "validation models"
    vres = old.predict(val.take(items=old.anchor_items).scores)[0] - val.true_score()
    assert old.radius == pytest.approx(float(conformal_quantile(jnp.asarray(vres), 0.1)),
                                       rel=1e-5)
    assert old.radius != pytest.approx(pred.radius)  # the check tells them apart
    np.testing.assert_array_equal(old.anchor_index, pred.anchor_index)  # same predictor
    np.testing.assert_allclose(old.predict(val.take(items=old.anchor_items).scores)[0],
                               pred.predict(val.take(items=pred.anchor_items).scores)[0],
                               rtol=1e-5)  # (another program: the last bit may differ)
    if method != "greedy_ridge":  # (the wiring below is the same for every method)
        return
    # the protocol's radius for a split is fit_anchors' on that split
    r = evaluate_protocol(small_sm, 6, [method, "random_mean"], seeds=(3,), settings=FAST)
    assert r.info["named_halves"] == [method]
    sp = small_sm.drop_duplicates().protocol_split(3)
    p3 = fit_anchors(sp.train, 6, method=method, seed=3, validation=sp.validation,
                     settings=FAST)
    assert r.info["radius"][0][0] == pytest.approx(p3.radius, rel=1e-6)
    # 9 validation models are enough for 90% on all of them, not on two halves of 4
    v9, t9 = small_sm.split([9], seed=1)
    with pytest.warns(UserWarning, match=r"9 validation models are too few .*at least 10 "
                                         r"are needed when the interval is calibrated on two"):
        p9 = fit_anchors(t9, 6, method="greedy_ridge", seed=0, validation=v9, settings=FAST)
    assert p9.radius == np.inf
    with pytest.raises(ValueError, match="settings.named_halves: expected True or False"):
        fit_anchors(tr, 6, method="greedy_ridge", validation=val,
                    settings=dataclasses.replace(FAST, named_halves="no"))


@pytest.mark.slow  # ~1-2 min: 100 splits, both calibrations
def test_named_halves_restore_coverage_of_a_greedy_method():
    """90% intervals of greedy_mix over 100 synthetic splits (40 validation and 40 test
    models each; exact split-conformal: 37/41 = 0.902): calibrated on halves they cover
    within 3 standard errors (between matrices) of nominal."""
    from jaxeval.anchors import evaluate_protocol

    st = Settings(proxy_steps=200, final_steps=500, init_steps=200, ridge_swaps=10)
    covs = []
    for ms in range(100, 110):
        sm = jaxeval.synthetic_score_matrix(seed=ms, n_models=200, n_items=150)
        r = evaluate_protocol(sm, 10, ["greedy_mix"], seeds=range(42, 52), settings=st)
        covs.append(float(r.coverage.mean()))
    se = np.std(covs, ddof=1) / np.sqrt(len(covs))
    assert np.mean(covs) >= 37 / 41 - 3 * max(se, 0.004), (np.mean(covs), se)


def test_crossfit_reuses_the_full_fit_only_where_a_refit_would_be_the_same():
    """``crossfit_residuals`` with the full fit's cache (an MLP's validation path,
    SparseEval's start and anchors: ``REUSED``) gives the residuals of refitting every
    method on each half from scratch (no cache); when the cached anchors or start are
    not what the half picks (corrupted here on purpose) it retrains instead of reusing
    them, with the same residuals again; and the fit on half A never sees half B's
    targets (shifting them shifts A's residuals on B by exactly that much)."""
    from jaxeval.anchors._methods import REUSED, crossfit_residuals, validation_halves

    s, y, _ = _planted(m=160, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:132], y[100:132])))
    ia, ib = (jnp.asarray(i) for i in validation_halves(32, 2))
    methods = ("random_mlp", "sparseeval_ridge")

    def run(key, d, corrupt):
        c = {}
        for m in methods:
            fit_method(key, d, 6, m, FAST, c)
        assert {"se_start", "path:random_mlp"} <= set(c) & set(REUSED)
        if corrupt:
            a, p = c["path:random_mlp"]
            c["path:random_mlp"] = (a[::-1], p + 0.3)
            km, a, *paths = c["se_start"]
            c["se_start"] = (~km, a[::-1], *paths)
        return crossfit_residuals(key, d, 6, methods, FAST, ia, ib, c)

    key = jax.random.key(2)
    fresh = jax.jit(lambda k: crossfit_residuals(k, d, 6, methods, FAST, ia, ib, None))(key)
    jrun = jax.jit(run, static_argnums=2)
    for corrupt in (False, True):
        got = jrun(key, d, corrupt)
        np.testing.assert_allclose(got[0], fresh[0], atol=1e-6)
        np.testing.assert_allclose(got[1], fresh[1], rtol=1e-5, atol=1e-8)
    shifted = d._replace(y_val=d.y_val.at[ib].add(0.05))
    got2 = jrun(key, shifted, False)  # row 0: chosen on A, scored on B
    np.testing.assert_allclose(got2[0][0], fresh[0][0] - 0.05, atol=1e-6)
    np.testing.assert_allclose(got2[1][0], fresh[1][0], rtol=1e-5, atol=1e-8)  # A's MSEs unchanged


@pytest.mark.slow  # ~1-2 min: six MLP methods, with and without the guard
@pytest.mark.parametrize("guard", [False, True])
def test_crossfit_reuse_equals_refits_for_every_mlp_method(guard):
    """The reuse of :func:`crossfit_residuals` for all six MLP-trained methods
    fitted together (one shared cache), an odd validation count (one model in
    neither half), with and without SparseEval's validation guard: the residuals of
    refitting each method on each half from scratch."""
    from jaxeval.anchors._methods import crossfit_residuals, validation_halves

    s, y, _ = _planted(m=160, n=40)
    d = SplitData(*(jnp.asarray(a) for a in (s[:100], y[:100], s[100:133], y[100:133])))
    ia, ib = (jnp.asarray(i) for i in validation_halves(33, 5))
    st = dataclasses.replace(FAST, guard=guard)
    methods = ("random_mlp", "sparseeval", "greedy_mlp", "sparseeval_ridge", "greedy_resmlp",
               "greedy_mlp_ens")

    def reuse(key):
        c = {}
        for m in methods:
            fit_method(key, d, 6, m, st, c)
        return crossfit_residuals(key, d, 6, methods, st, ia, ib, c)

    for seed in (0, 1):
        key = jax.random.key(seed)
        got = jax.jit(reuse)(key)
        fresh = jax.jit(lambda k: crossfit_residuals(k, d, 6, methods, st, ia, ib, None))(key)
        np.testing.assert_allclose(got[0], fresh[0], atol=1e-6)
        np.testing.assert_allclose(got[1], fresh[1], rtol=1e-5, atol=1e-8)


def _batched_lapack_calls(text: str) -> list[str]:
    """The LAPACK custom calls of a CPU program that take a batch of matrices.

    ``text`` is a compiled program's HLO (``.lower(...).compile().as_text()``: a call
    whose first result has more than two dimensions) or a lowered one's StableHLO
    (``.lower(...).as_text()``: a call with ``num_batch_dims`` other than 0 or a first
    operand of more than two dimensions). JAX writes the LAPACK calls when it lowers a
    program, and XLA batches none of its own, so the lowered text answers without the
    compilation (most of these tests' time: 58 of 66 s for the protocol's kernel);
    ``test_seqlinalg_makes_no_batched_lapack_call`` checks that both texts agree on the
    helpers and on a batched solve, eigh and Cholesky. The compiled branch reads the
    first result's rank only, so it misses a batched call whose first result is a
    batch of vectors (``geev``, ``gtsv``); the lowered branch flags those too."""
    import re

    out = []
    for line in text.splitlines():
        call = re.search(r"stablehlo\.custom_call @(\w*lapack\w*)\(", line)
        if call:
            nb = re.search(r'num_batch_dims = "(\d+)"', line)
            first = re.search(r"[)}] : \(tensor<((?:\d+x)*)[a-z]", line)
            rank = first.group(1).count("x") if first else 0
            if (nb and nb.group(1) != "0") or rank > 2 or not (nb and first):
                out.append(f"{call.group(1)} {line.strip()[:80]}")  # (or unreadable)
            continue
        target = re.search(r'custom_call_target="([^"]*lapack[^"]*)"', line)
        if target and " custom-call(" in line:
            lhs = line.split(" custom-call(")[0].split(" = ", 1)[-1]
            dims = re.search(r"\w+\[([\d,]*)\]", lhs).group(1)
            if len(dims.split(",")) > 2:
                out.append(f"{target.group(1)} {lhs[:80]}")
    return out


def _seqlinalg_cases():
    a = jax.random.normal(jax.random.key(0), (2, 3, 6, 6))
    a = a @ jnp.swapaxes(a, -1, -2) + jnp.eye(6)
    b = jax.random.normal(jax.random.key(1), (2, 3, 6, 2))
    return a, b


@pytest.mark.default_codegen
def test_seqlinalg_is_the_batched_linalg_one_matrix_at_a_time():
    """The helpers give the jnp.linalg results bit for bit, under nested vmaps too."""
    from jaxeval import _seqlinalg as sl

    a, b = _seqlinalg_cases()
    vv = lambda f: jax.jit(jax.vmap(jax.vmap(f)))  # noqa: E731
    np.testing.assert_array_equal(vv(sl.solve)(a, b), vv(jnp.linalg.solve)(a, b))
    for p, q in zip(vv(sl.eigh)(a), vv(jnp.linalg.eigh)(a)):
        np.testing.assert_array_equal(p, q)
    thin = lambda x: jnp.linalg.svd(x, full_matrices=False)  # noqa: E731
    for p, q in zip(vv(sl.svd_thin)(a), vv(thin)(a)):
        np.testing.assert_array_equal(p, q)
    # an unbatched argument is broadcast (jnp.linalg.solve would factor it once and
    # solve all right sides together, which rounds differently)
    np.testing.assert_array_equal(
        jax.vmap(sl.solve, (None, 0))(a[0, 0], b[0]),
        jax.vmap(jnp.linalg.solve)(jnp.broadcast_to(a[0, 0], (3, 6, 6)), b[0]))


def test_seqlinalg_makes_no_batched_lapack_call():
    """Under nested vmaps the helpers compile to unbatched LAPACK calls (a batched call
    beside another one can hang XLA's CPU thread pool on 2-core machines)."""
    from jaxeval import _seqlinalg as sl

    a, b = _seqlinalg_cases()
    vv = lambda f: jax.jit(jax.vmap(jax.vmap(f)))  # noqa: E731
    for f, args in ((sl.solve, (a, b)), (sl.eigh, (a,)), (sl.svd_thin, (a,))):
        low = vv(f).lower(*args)
        for text in (low.as_text(), low.compile().as_text()):  # lowered and compiled
            assert "lapack" in text and _batched_lapack_calls(text) == []
    text = jax.jit(jax.vmap(sl.solve, (None, 0))).lower(a[0, 0], b[0]).compile().as_text()
    assert "lapack" in text and _batched_lapack_calls(text) == []
    # the check sees a batched call where there is one, in either text
    for f, args in ((jnp.linalg.solve, (a, b)), (jnp.linalg.eigh, (a,)),
                    (jnp.linalg.cholesky, (a,))):
        low = vv(f).lower(*args)
        assert _batched_lapack_calls(low.as_text()), f
        assert _batched_lapack_calls(low.compile().as_text()), f


def _sign_free(f):
    """A scalar of ``f``'s results that does not depend on the eigen/singular vectors'
    signs (so two correct implementations agree on it and on its derivatives)."""

    def g(*args):
        out = f(*args)
        out = out if isinstance(out, tuple) else (out,)
        return sum(jnp.sum(jnp.cos(jnp.arange(o.size, dtype=o.dtype).reshape(o.shape)) * o * o)
                   for o in out)

    return g


def test_seqlinalg_derivatives_are_jnp_linalg_ones():
    """``jax.grad``, ``jax.jvp`` and ``jax.hessian`` through the helpers (which a bare
    ``custom_vmap`` would not transpose) give ``jnp.linalg``'s derivatives, under
    ``vmap`` too; a vmapped gradient still makes no batched LAPACK call."""
    from jaxeval import _seqlinalg as sl

    key = jax.random.key(3)
    a = jax.random.normal(key, (3, 5, 5))
    spd = a @ jnp.swapaxes(a, -1, -2) + jnp.eye(5)
    b = jax.random.normal(jax.random.key(4), (3, 5, 2))
    tall = jax.random.normal(jax.random.key(5), (3, 7, 4))
    thin = lambda x: tuple(jnp.linalg.svd(x, full_matrices=False))  # noqa: E731
    cases = [  # (ours, reference, args): square, 1-d right side, tall, wide, square SVD
        (sl.solve, jnp.linalg.solve, (a + 3 * jnp.eye(5), b)),
        (sl.solve, jnp.linalg.solve, (a + 3 * jnp.eye(5), b[..., 0])),
        (sl.eigh, lambda x: tuple(jnp.linalg.eigh(x)), (spd,)),
        (sl.svd_thin, thin, (tall,)),
        (sl.svd_thin, thin, (jnp.swapaxes(tall, -1, -2),)),
        (sl.svd_thin, thin, (a,)),
    ]
    for ours, ref, args in cases:
        f, g = _sign_free(ours), _sign_free(ref)
        argnums = tuple(range(len(args)))
        scale = lambda t: max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(t))  # noqa: E731
        want = jax.vmap(jax.grad(g, argnums))(*args)
        got = jax.jit(jax.vmap(jax.grad(f, argnums)))(*args)
        for p, q in zip(got, want):
            np.testing.assert_allclose(p, q, atol=1e-4 * scale(want))
        tangents = tuple(jnp.sin(jnp.arange(x.size, dtype=x.dtype)).reshape(x.shape)
                         for x in args)
        n = len(args)

        def jvp(h, n=n):
            return jax.vmap(lambda *z: jax.jvp(h, z[:n], z[n:])[1])

        t_want = jvp(g)(*args, *tangents)
        np.testing.assert_allclose(jvp(f)(*args, *tangents), t_want, rtol=1e-4,
                                   atol=1e-4 * float(jnp.max(jnp.abs(t_want))))
        h_want = jax.hessian(g)(*(x[0] for x in args))
        np.testing.assert_allclose(jax.hessian(f)(*(x[0] for x in args)), h_want,
                                   atol=1e-3 * float(jnp.max(jnp.abs(h_want))))
        text = jax.jit(jax.vmap(jax.grad(f, argnums))).lower(*args).as_text()
        assert "lapack" in text and _batched_lapack_calls(text) == []


def test_seqlinalg_refuses_what_it_cannot_take():
    """One real matrix per call (vmap for a batch): a batch, a shape mismatch or a
    complex input is refused with the argument named; integers are promoted (and
    differentiating with respect to the other argument works)."""
    from jaxeval import _seqlinalg as sl

    with pytest.raises(ValueError, match="a must be one"):
        sl.eigh(jnp.ones((2, 3, 3)))
    with pytest.raises(ValueError, match="square"):
        sl.eigh(jnp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"got \(3, 3\) and \(4,\)"):
        sl.solve(jnp.eye(3), jnp.ones(4))
    with pytest.raises(TypeError, match="a must be real"):
        sl.svd_thin(jnp.ones((3, 2), jnp.complex64))
    g = jax.grad(lambda b: sl.solve(2 * jnp.eye(3, dtype=jnp.int32), b).sum())(jnp.ones(3))
    np.testing.assert_allclose(g, 0.5)


def test_public_fits_differentiate_through_the_looped_linalg(monkeypatch):
    """The ridge, low-rank and factor-update fits that solve through ``_seqlinalg``
    have reverse-mode derivatives, equal to those with ``jnp.linalg`` in its place."""
    from jaxeval import _seqlinalg as sl
    from jaxeval._factorization import ItemFactors, _update_model_factors
    from jaxeval.anchors._lowrank import lowrank_basis
    from jaxeval.anchors._ridge import fit_ridge, fit_ridge_path, loo_ridge_residuals

    s = jax.random.bernoulli(jax.random.key(0), 0.6, (40, 12)).astype(jnp.float32)
    x, y = s[:, :6], s.mean(axis=1)
    r = 20  # above the unrolled Cholesky's ranks: the factor update's solve is LAPACK
    f = ItemFactors(0.3 * jax.random.normal(jax.random.key(1), (12, r)), jnp.zeros(12),
                    jnp.zeros(r))
    mask = jax.random.bernoulli(jax.random.key(2), 0.7, s.shape)
    upd = _update_model_factors.__wrapped__  # unjitted: traced anew under each patch
    losses = {
        "fit_ridge": (lambda x: jnp.sum(fit_ridge(x, y, 0.1).w ** 2), x),
        "fit_ridge_path": (lambda x: jnp.sum(fit_ridge_path(x, y, jnp.array([0.01, 1.0])).b),
                           x),
        "loo_ridge_residuals": (lambda x: jnp.sum(loo_ridge_residuals(x, y, 0.1) ** 2), x),
        # weighted, so that the directions' derivatives count, not only the values'
        "lowrank_basis": (lambda s: jnp.sum(jnp.cos(jnp.arange(36.0)).reshape(12, 3)
                                            * lowrank_basis(s, 3).V ** 2), s),
        "update_model_factors": (
            lambda s: jnp.sum(upd(f, s, mask, jnp.zeros((40, r)), jnp.float32(1.0), 3)[0] ** 2),
            s),
    }
    got = {n: jax.grad(fn)(arg) for n, (fn, arg) in losses.items()}
    monkeypatch.setattr(sl, "solve", jnp.linalg.solve)
    monkeypatch.setattr(sl, "eigh", lambda a: tuple(jnp.linalg.eigh(a)))
    monkeypatch.setattr(sl, "svd_thin",
                        lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)))
    for n, (fn, arg) in losses.items():
        want = jax.grad(fn)(arg)
        assert np.all(np.isfinite(got[n])), n
        np.testing.assert_allclose(got[n], want, atol=1e-4 * float(jnp.max(jnp.abs(want))),
                                   err_msg=n)


def test_anchor_fit_programs_make_no_batched_lapack_call(small_sm):
    """``fit_anchors``' program for ``auto`` choosing on validation models (every
    candidate, the residual and reference MLPs, the halves' refits) and its
    cross-validation program hold no batched LAPACK call: two in flight at once
    deadlocked jaxlib 0.10's CPU thread pool on 2-core machines (metabench MMLU,
    k = 100, default settings: hung at 0% CPU)."""
    from jaxeval.anchors import AUTO_CANDIDATES, AUTO_VALIDATION_EXTRA
    from jaxeval.anchors._api import _cv_jit, _fit_jit
    from jaxeval.anchors._methods import cv_folds, validation_halves

    val, tr = small_sm.split([32], seed=0)
    d = SplitData(*(jnp.asarray(a) for a in (tr.scores, tr.true_score(), val.scores,
                                              val.true_score())))
    st = dataclasses.replace(FAST, auto_cv_below=10, resmlp_steps=40)
    cands = AUTO_CANDIDATES + AUTO_VALIDATION_EXTRA + ("gpirt", "pirt")
    halves = tuple(jnp.asarray(h) for h in validation_halves(32, 0))
    key = jax.random.key(0)
    fit = _fit_jit.lower(key, d, 6, cands, st, True, halves).as_text()
    assert "lapack" in fit and _batched_lapack_calls(fit) == []
    folds, s_ho, y_ho = cv_folds(d, 5, 0)
    cv = _cv_jit.lower(key, jax.tree.map(jnp.asarray, folds), jnp.asarray(s_ho),
                       jnp.asarray(y_ho), 6, AUTO_CANDIDATES, st).as_text()
    assert "lapack" in cv and _batched_lapack_calls(cv) == []


class _Stop(Exception):
    pass


@pytest.mark.parametrize("cv_below", [1000, 10], ids=["cv", "halves"])
def test_protocol_vmapped_seed_programs_make_no_batched_lapack_call(small_sm, monkeypatch,
                                                                     cv_below):
    """``evaluate_protocol(vmap_seeds=True)`` vmaps every method's fit over the seeds:
    its kernel (all methods and ``auto``, in both of ``auto``'s regimes) and its
    cross-validation program still hold no batched LAPACK call."""
    from jaxeval.anchors import _protocol

    seen = {}
    cv_jit, kernel_jit = _protocol._cv_jit, _protocol._kernel_jit

    def cv(*args):
        seen["cv"] = args
        return cv_jit(*args)

    def kernel(*args):
        seen["kernel"] = args
        raise _Stop

    monkeypatch.setattr(_protocol, "_cv_jit", cv)
    monkeypatch.setattr(_protocol, "_kernel_jit", kernel)
    st = dataclasses.replace(FAST, auto_cv_below=cv_below, resmlp_steps=40)
    with pytest.raises(_Stop):
        evaluate_protocol(small_sm, 6, METHODS + ("auto",), seeds=(0, 1), settings=st,
                          vmap_seeds=True)
    assert ("cv" in seen) == (cv_below == 1000)
    text = kernel_jit.lower(*seen["kernel"]).as_text()
    assert "lapack" in text and _batched_lapack_calls(text) == []
    if "cv" in seen:
        text = cv_jit.lower(*seen["cv"]).as_text()
        assert "lapack" in text and _batched_lapack_calls(text) == []


def test_vmapped_factor_update_makes_no_batched_lapack_call():
    """``update_model_factors`` above the unrolled Cholesky's ranks solves with LAPACK,
    one row after another, vmapped over replicates too."""
    from jaxeval._factorization import ItemFactors, update_model_factors

    r = 20
    f = ItemFactors(jnp.ones((12, r)) / r, jnp.zeros(12), jnp.zeros(r))
    s = jnp.full((3, 5, 12), 0.5)
    mask = jnp.ones((3, 5, 12), bool)
    prog = jax.jit(jax.vmap(lambda s, m: update_model_factors(f, s, m, jnp.zeros((5, r)), 1.0)))
    text = prog.lower(s, mask).as_text()
    assert "lapack" in text and _batched_lapack_calls(text) == []


def test_mlp_training_and_greedy_ridge_work_under_x64():
    """Under jax x64 the MLP's early-stopping step came out int64 against its int32
    carry, and a float64 ridge strength promoted the greedy selection's float32 carry:
    both failed inside ``lax.scan``. They now run, with the numbers x64 off gives."""
    x = jax.random.bernoulli(jax.random.key(0), 0.5, (50, 8)).astype(jnp.float32)
    y = x.mean(1) + 0.3 * x[:, 2]

    def both():
        fit, _ = train_mlp(jax.random.key(0), x[:40], y[:40], x[40:], y[40:], num_steps=100,
                           eval_every=20)
        greedy = jax.vmap(greedy_ridge_anchors, in_axes=(None, None, None, 0))(
            x, y, 3, jnp.array([1e-3, 1.0]))
        # k-means++ drew its first centre with an int64 randint under x64: other anchors
        km = [kmeans_anchors(jax.random.key(s), x.T, 3)[0].tolist() for s in range(4)]
        return int(fit.best_step), float(fit.best_val), np.asarray(greedy), km

    with jax.enable_x64(True):
        step64, val64, greedy64, km64 = both()
        assert greedy_ridge_anchors(x, y, 3, jnp.float64(1e-3)).tolist() == greedy64[0].tolist()
    step32, val32, greedy32, km32 = both()
    assert step64 == step32 and 0 < step32 <= 100
    np.testing.assert_allclose(val64, val32, rtol=1e-4)
    np.testing.assert_array_equal(greedy64, greedy32)
    assert km64 == km32
