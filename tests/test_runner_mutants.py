"""Gaps a mutation review of the replicate runner and the anchor evaluation protocol
found: each test fails on a plausible bug the rest of the suite let through."""

import collections
import io
import weakref

import jax
import numpy as np
import pytest

from jaxeval import _runner
from jaxeval._runner import ReplicatePlan, as_key, run_replicates


def _uniform(key):
    return jax.random.uniform(key)


def _key_data(seed):
    return np.asarray(jax.random.key_data(as_key(seed))).tolist()


# ------------------------------------------------------------------ seeds and keys
def test_seed_2_pow_32_is_not_seed_0():
    """2**32 is the first seed past 32 bits: ``jax.random.key`` (x64 off) keeps its low
    32 bits, i.e. seed 0, so it must take the 64-bit path like every larger seed."""
    assert _key_data(2**32) == [1, 0] != _key_data(0)
    assert _key_data(2**32 - 1) == [0, 2**32 - 1]


# ------------------------------------------------------------------ index bounds
def test_the_last_replicate_index_below_2_pow_32_runs():
    """Indices are uint32: ``start + n_replicates == 2**32`` (the last index 2**32 - 1)
    is allowed, in ``run_replicates`` and in ``iter_ranges``; one more is refused."""
    f = lambda key, i: i  # noqa: E731
    idx = run_replicates(f, 0, 4, start=2**32 - 4, lanes=4, devices=jax.devices()[:1],
                         progress=False, with_index=True)
    assert idx.tolist() == [2**32 - 4, 2**32 - 3, 2**32 - 2, 2**32 - 1]
    plan = ReplicatePlan(f, 4, lanes=4, devices=jax.devices()[:1], with_index=True)
    ((lo, hi, res),) = plan.iter_ranges(0, [(2**32 - 4, 2**32)])
    assert (lo, hi) == (2**32 - 4, 2**32) and res.tolist() == idx.tolist()
    with pytest.raises(ValueError, match=r"replicate indices must stay below 2\*\*32, got "
                                         r"4294967297"):
        list(plan.iter_ranges(0, [(2**32 - 3, 2**32 + 1)]))
    with pytest.raises(ValueError, match="start=4294967292 and n_replicates=5"):
        run_replicates(f, 0, 5, start=2**32 - 4, progress=False, with_index=True)


# ------------------------------------------------------------------ chunking
def test_an_offset_run_dispatches_each_aligned_window_once(monkeypatch):
    """``run(start=...)`` cuts its ranges at the lane block of ``start`` plus whole
    chunks, so each range is one aligned dispatch; ranges cut at ``start + chunk``
    instead straddle two windows each and compute (almost) every chunk twice."""
    starts = []
    dispatch = ReplicatePlan._dispatch

    def spy(self, key_data, lo):
        starts.append(lo)
        return dispatch(self, key_data, lo)

    monkeypatch.setattr(ReplicatePlan, "_dispatch", spy)
    kw = dict(chunk_size=64, lanes=32, devices=jax.devices()[:1], progress=False)
    out = run_replicates(_uniform, 7, 177, start=123, **kw)
    assert starts == [96, 160, 224, 288]
    whole = run_replicates(_uniform, 7, 300, **kw)
    np.testing.assert_array_equal(out, whole[123:])


# ------------------------------------------------------------------ progress lines
def test_progress_formats_at_their_boundaries():
    """60 s reads as a minute and 0.1/s as a rate (the thresholds are inclusive)."""
    assert _runner._fmt_s(60.0) == "1m00s" and _runner._fmt_s(59.9) == "59.9s"
    assert _runner._fmt_s(3600.0) == "1h00m" and _runner._fmt_s(3599.0) == "59m59s"
    assert _runner._fmt_rate(0.1) == "0.1/s" and _runner._fmt_rate(10.0) == "10/s"
    assert _runner._fmt_rate(0.05) == "20.0s each"
    # a task done in its one chunk has nothing left to estimate: no first-chunk note
    out = io.StringIO()
    _runner.Progress(8, stream=out).update(8)
    assert "8/8 replicates" in out.getvalue() and "compilation included" not in out.getvalue()


# ------------------------------------------------------------------ the protocol
def _protocol_matrix():
    from jaxeval import synthetic_score_matrix

    return synthetic_score_matrix(seed=0, n_models=60, n_items=40)


def _captured_protocol(monkeypatch, sm, k, methods, seeds, **kw):
    """``evaluate_protocol`` and the raw kernel output it was computed from."""
    from jaxeval.anchors import _protocol

    real, seen = _protocol._kernel_jit, []

    def spy(*args):
        out = real(*args)
        seen.append(jax.tree.map(np.asarray, out))
        return out

    monkeypatch.setattr(_protocol, "_kernel_jit", spy)
    return _protocol.evaluate_protocol(sm, k, methods, seeds=seeds, **kw), seen[0]


def test_protocol_results_are_methods_by_seeds_and_recomputable(monkeypatch):
    """Every per-method array is ``[methods, seeds, ...]`` in the order asked for (two
    methods, three seeds: a transposed array has another shape; ``info["val_mse"]`` is
    ``[seeds, methods]``, as documented), and each figure is
    the one its definition gives from the reported test predictions and radius."""
    sm = _protocol_matrix()
    methods, seeds = ("random_mean", "random_ridge"), (5, 3, 8)
    r, _ = _captured_protocol(monkeypatch, sm, 4, methods, seeds)
    M, S = len(methods), len(seeds)
    sm = sm.drop_duplicates()  # (what the protocol splits)
    h = sm.protocol_split(5).test.n_models
    assert r.methods == methods and r.seeds == seeds
    for a in (r.mae_pp, r.tau_b, r.coverage, r.width):
        assert a.shape == (M, S)
    assert r.anchors.shape == (M, S, 4) and r.predictions.shape == (M, S, h)
    assert np.shape(r.info["val_mse"]) == (S, M) and np.shape(r.info["radius"]) == (M, S)
    rad = np.asarray(r.info["radius"])
    for j, s in enumerate(seeds):
        sp = sm.protocol_split(s)
        y = sp.test.true_score().astype(np.float64)
        yv = sp.validation.true_score().astype(np.float64)
        for i, m in enumerate(methods):
            p = r.predictions[i, j].astype(np.float64)
            assert r.mae_pp[i, j] == pytest.approx(100 * np.abs(p - y).mean(), rel=1e-5)
            lo, hi = np.clip(p - rad[i, j], 0, 1), np.clip(p + rad[i, j], 0, 1)
            assert r.width[i, j] == pytest.approx((hi - lo).mean(), rel=1e-6)
            assert r.coverage[i, j] == ((lo <= y) & (y <= hi)).mean()
            assert np.isfinite(rad[i, j]) and rad[i, j] > 0
            if j != 1:
                continue
            # the anchors are this split's and this method's: refitting on the split
            # with the split seed's key gives them (and the validation MSE) again
            from jaxeval.anchors import fit_anchors

            f = fit_anchors(sp.train, 4, method=m, seed=s, validation=sp.validation)
            np.testing.assert_array_equal(r.anchors[i, j], f.anchor_index)
            assert rad[i, j] == pytest.approx(f.radius, rel=1e-5)
            pv = np.clip(f.predict(sp.validation.take(items=f.anchor_items).scores)[0], 0, 1)
            assert r.info["val_mse"][j][i] == pytest.approx(((pv - yv) ** 2).mean(), rel=1e-4)


def test_protocol_unbiased_estimate_figures(monkeypatch):
    """The DR estimate's MAE is in percentage points (like every MAE reported), its
    coverage counts an interval's ends as inside, and ``anchors_of`` names the method
    whose anchors it used."""
    sm = _protocol_matrix()
    methods = ("random_mean", "random_ridge")
    r, raw = _captured_protocol(monkeypatch, sm, 4, methods, (5, 3), dr_items=6)
    y = np.stack([sm.drop_duplicates().protocol_split(s).test.true_score() for s in (5, 3)])
    y = y.astype(np.float64)
    est, lo, hi = raw["dr"][:, 0], raw["dr"][:, 1], raw["dr"][:, 2]
    np.testing.assert_allclose(r.dr["mae_pp"], 100 * np.abs(est - y).mean(-1), rtol=1e-6)
    assert float(np.min(r.dr["mae_pp"])) > 0.5  # (pp: a fraction would be ~100x smaller)
    np.testing.assert_array_equal(r.dr["coverage"], ((lo <= y) & (y <= hi)).mean(-1))
    np.testing.assert_allclose(r.dr["width"], (hi - lo).mean(-1), rtol=1e-6)
    assert r.dr["m"] == 6
    assert r.dr["anchors_of"] == [methods[int(i)] for i in raw["dr_pick"]]
    # every test model gets its own draw of extra items: with an exact estimate of each
    # (all non-anchors drawn) the interval is a point, its ends count as covered
    full, raw_full = _captured_protocol(monkeypatch, sm, 4, ("random_mean",), (5,),
                                        dr_items=36)
    assert float(np.max(full.dr["width"])) < 1e-4
    ends = raw_full["dr"][0]
    assert full.dr["coverage"].tolist() == [((ends[1] <= y[0]) & (y[0] <= ends[2])).mean()]


def test_protocol_summary_lines():
    """``summary()``: MAE mean +- sd in pp, tau-b, coverage and width in pp per method,
    and the DR line when there is one."""
    from jaxeval.anchors import evaluate_protocol

    r = evaluate_protocol(_protocol_matrix(), 4, ("random_mean",), seeds=(5, 3), dr_items=6)
    lines = r.summary().splitlines()
    assert lines[0] == f"{r.info['dataset']} k=4 seeds=2"
    m, t = r.mae_pp[0], r.tau_b[0]
    assert lines[1] == (
        f"  {'random_mean':18s} MAE {m.mean():6.2f} +- {m.std():5.2f}  "
        f"tau {t.mean():5.3f} +- {t.std():5.3f}  cov {r.coverage[0].mean():5.3f}  "
        f"width {100 * r.width[0].mean():5.2f} pp")
    assert lines[2] == (
        f"  {'unbiased (DR)':18s} MAE {r.dr['mae_pp'].mean():6.2f}  "
        f"cov {r.dr['coverage'].mean():5.3f}  width {100 * r.dr['width'].mean():5.2f} pp")
    assert m.std() > 0.005 and r.width[0].mean() > 0.01  # (the checks can tell)


def test_protocol_arguments_and_data_handling():
    """``k`` must leave a non-anchor item; duplicate models are dropped first (and only
    with ``dedup``); an external target scores no DR estimate (it estimates the items'
    mean, not the external score)."""
    from jaxeval import ScoreMatrix
    from jaxeval.anchors import evaluate_protocol

    sm = _protocol_matrix()
    with pytest.raises(ValueError, match=r"k: expected an integer in \[1, 39\]"):
        evaluate_protocol(sm, 40, ("random_mean",), seeds=(1,))
    twice = ScoreMatrix(np.concatenate([sm.scores, sm.scores[:10]]))
    r = evaluate_protocol(twice, 4, ("random_mean",), seeds=(1,))
    assert r.info["n_models"] == 60
    r_all = evaluate_protocol(twice, 4, ("random_mean",), seeds=(1,), dedup=False)
    assert r_all.info["n_models"] == 70
    ext = ScoreMatrix(sm.scores, target=np.linspace(0.2, 0.8, 60))
    r_ext = evaluate_protocol(ext, 4, ("random_mean",), seeds=(1,), dr_items=6)
    assert r_ext.dr is None and r_ext.info["external_target"] is True


def test_auto_chooses_by_cross_validation_below_auto_cv_below_only(monkeypatch):
    """``auto`` cross-validates when there are fewer than ``Settings.auto_cv_below``
    validation models, and chooses on the validation models from that many on (the
    kernels are stubbed: which one runs first tells the choice)."""
    import dataclasses

    from jaxeval.anchors import Settings, _protocol

    class Ran(Exception):
        pass

    def stub(name):
        def fn(*args):
            raise Ran(name)
        return fn

    monkeypatch.setattr(_protocol, "_cv_jit", stub("cv"))
    monkeypatch.setattr(_protocol, "_kernel_jit", stub("kernel"))
    sm = _protocol_matrix()  # 12 validation models
    assert sm.drop_duplicates().protocol_split(1).validation.n_models == 12
    for below, first in ((12, "kernel"), (13, "cv")):
        st = dataclasses.replace(Settings(), auto_cv_below=below)
        with pytest.raises(Ran, match=first):
            _protocol.evaluate_protocol(sm, 4, ("auto",), seeds=(1,), settings=st)


def _logistic_split(seed, m, n_train, n_val=20, n=30):
    """0/1 scores of ``m`` models x ``n`` items from a one-ability logistic model, and
    the ``SplitData`` of its first ``n_train`` models (train) and the ``n_val`` after
    position 50 (validation; the models from 70 on are the usual test models)."""
    import jax.numpy as jnp

    from jaxeval.anchors._methods import SplitData

    rng = np.random.default_rng(seed)
    ability = rng.normal(size=(m, 1))
    s = (rng.random((m, n)) < 1 / (1 + np.exp(-ability - rng.normal(size=(1, n)))))
    s = s.astype(np.float32)
    y = s.mean(1)
    return s, SplitData(*(jnp.asarray(a) for a in (s[:n_train], y[:n_train], s[50:50 + n_val],
                                                   y[50:50 + n_val])))


def test_the_unbiased_estimate_uses_the_candidate_cross_validation_picked_even_the_first():
    """``protocol_kernel``'s ``auto_pick`` (cross-validation's choice among the candidates
    present) sets the anchors of the unbiased estimate, position 0 included; only a
    negative one means "the best on validation". The candidates are ordered so that
    position 0 is the one validation would not choose. Each model's extra items are its
    own draw."""
    import jax.numpy as jnp

    from jaxeval.anchors import Settings
    from jaxeval.anchors._protocol import protocol_kernel

    s, d = _logistic_split(3, 90, 50)
    methods = ("kmeans_ridge", "greedy_ridge")
    st = Settings(kmeans_iters=5, ridge_swaps=2)
    te = np.concatenate([s[70:], s[70:71]])  # the last test model repeats the first

    kernel = jax.jit(protocol_kernel, static_argnums=(3, 4, 5, 6, 9))

    def run(pick, cands=methods):
        return kernel(jax.random.key(0), d, jnp.asarray(te), 4, methods, st, 5, 0.1,
                      jnp.int32(pick), cands)

    out = run(-1)
    best = int(out["dr_pick"])
    val_mse = np.mean((np.clip(np.asarray(out["val"]), 0, 1) - np.asarray(d.y_val)) ** 2, axis=1)
    assert int(np.argmin(val_mse)) == best
    order = (methods[1 - best], methods[best])  # position 0: validation's loser
    first, second = run(0, order), run(1, order)
    assert int(first["dr_pick"]) == 1 - best and int(second["dr_pick"]) == best
    assert not np.array_equal(np.asarray(first["dr"]), np.asarray(second["dr"]))
    # each model draws its own extra items: two equal rows, two different estimates
    np.testing.assert_array_equal(out["test"][:, 0], out["test"][:, -1])
    assert out["dr"][0, 0] != out["dr"][0, -1]


def test_a_plan_rounds_its_chunk_up_to_whole_lane_blocks():
    """``ReplicatePlan``'s chunk is ``chunk_size`` rounded *up* to whole blocks of
    ``lanes`` per device, so a range of ``chunk_size`` replicates fits in one."""
    plan = ReplicatePlan(_uniform, 5, lanes=4, devices=jax.devices()[:1])
    assert plan.chunk_size == 8 and plan.per_device == 8
    ((lo, hi, res),) = plan.iter_ranges(3, [(0, 5)])
    np.testing.assert_array_equal(res, run_replicates(_uniform, 3, 5, lanes=4,
                                                      devices=jax.devices()[:1],
                                                      progress=False))


# ------------------------------------------------------------------ compiled-plan cache
def test_plan_cache_tells_index_calls_and_lane_widths_apart():
    """A function run with and without ``with_index`` (it takes either), or with two
    lane widths of the same per-device chunk, gets a program of its own each time: a
    cache key without them reused the other call's program."""
    def fn(key, *i):  # a fresh function: its own plans
        return jax.random.uniform(key) + (i[0].astype(np.float32) if i else 0.0)

    kw = dict(devices=jax.devices()[:1], progress=False, chunk_size=8)
    plain = run_replicates(fn, 1, 8, lanes=4, **kw)
    indexed = run_replicates(fn, 1, 8, lanes=4, with_index=True, **kw)
    np.testing.assert_allclose(indexed - plain, np.arange(8), rtol=1e-6)
    run_replicates(fn, 1, 8, lanes=8, **kw)  # per-device chunk 8 again, other lanes
    assert sorted((k[1], k[-1]) for k in _runner._PLANS[fn]) == [(4, False), (4, True),
                                                                  (8, False)]


@pytest.fixture
def small_cache(monkeypatch):
    """Empty plan caches of their own, holding at most two programs (the suite's compiled
    programs stay cached in the real ones)."""
    monkeypatch.setattr(_runner, "_PLAN_CACHE_SIZE", 2)
    monkeypatch.setattr(_runner, "_PLANS", weakref.WeakKeyDictionary())
    monkeypatch.setattr(_runner, "_PLAN_CACHE", collections.OrderedDict())
    monkeypatch.setattr(_runner, "_PLAN_ORDER", collections.OrderedDict())


def test_plan_cache_drops_the_least_recently_used(small_cache):
    """At most ``_PLAN_CACHE_SIZE`` programs are held, the least recently used dropped."""

    def make(c):
        return lambda key: jax.random.uniform(key) + c

    fns = [make(c) for c in range(3)]
    kw = dict(devices=jax.devices()[:1], lanes=4, progress=False)
    for f in fns:
        run_replicates(f, 0, 4, **kw)
    assert len(_runner._PLAN_ORDER) <= 2
    assert not _runner._PLANS.get(fns[0]) and _runner._PLANS[fns[2]]


# ------------------------------------------------------------------ argument checks
def test_runner_helpers_name_bad_arguments():
    from jaxeval._runner import default_impl_key, int_seed, stage_printer

    with pytest.raises(TypeError, match="progress: expected True or False, got 'yes'"):
        stage_printer("fit", "yes")
    with pytest.raises(ValueError, match="devices: expected at least one device, got none"):
        ReplicatePlan(_uniform, 4, devices=[])
    rbg = jax.random.key(0, impl="rbg")
    with pytest.raises(ValueError, match="keys of the default PRNG implementation"):
        default_impl_key(rbg)
    with pytest.raises(ValueError, match="keys of the default PRNG implementation"):
        run_replicates(_uniform, rbg, 2, progress=False)
    # a keyed call's int seeds for different purposes are different draws
    key = jax.random.key(0)
    assert len({int_seed(key, key, p) for p in (1, 2, 3)}) == 3


def test_stage_printer_lines(capsys):
    from jaxeval._runner import stage_printer

    stage_printer("fit", True)("step one")
    stage_printer("fit", False)("quiet")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fit: step one [") and err[0].endswith(" s]")


# ------------------------------------------------ evaluate_protocol around a fake kernel
def _fake_protocol(monkeypatch, methods, seeds, settings, *, cv_best=None, dr_pick=None):
    """``evaluate_protocol`` run on kernels replaced by fakes with known outputs.

    The fake kernel's validation predictions are the targets moved towards 0.5 by a
    per-seed, per-method amount (so validation MSE is that amount squared, and no
    prediction is clipped); ``random_ridge`` (not a candidate) is the closest of all,
    and candidate ``best[s]`` the closest of the candidates. Test predictions are a
    constant per seed and method, anchors a shift of ``arange(k)``. The arguments the
    kernels were called with are returned as well.
    """
    from jaxeval.anchors import _protocol

    seen = {}

    def fake_cv(keys, fd, s_ho, y_ho, k, cands, st, vmap):
        seen["cv"] = (jax.tree.map(np.asarray, fd), np.asarray(s_ho), np.asarray(y_ho))
        S, F, h = np.shape(y_ho)
        res = np.full((S, len(cands), F, h), 0.3)
        for s in range(S):  # candidate cv_best[s] has the smallest residuals
            res[s, cv_best[s]] = np.linspace(-0.01, 0.02, F * h).reshape(F, h) * (s + 1)
        return res

    def fake_kernel(keys, d, s_te, k, fit_names, st, dr_m, alpha, picks, cands, halves,
                    vmap, halved, auto_halved):
        seen.update(fit_names=fit_names, picks=np.asarray(picks), cands=cands,
                    halves=None if halves is None else [np.asarray(h) for h in halves])
        y_val = np.asarray(d.y_val)
        S, hv = y_val.shape
        h, M = s_te.shape[1], len(fit_names)
        best = [(3 * s + 1) % len(cands) for s in range(S)]
        seen["val_best"] = [fit_names.index(cands[b]) for b in best]
        val, test = np.zeros((S, M, hv)), np.zeros((S, M, h))
        for s in range(S):
            for j, name in enumerate(fit_names):
                e = 0.05 + 0.01 * j
                e = 0.02 if j == seen["val_best"][s] else e
                e = 0.001 if name == "random_ridge" else e
                val[s, j] = y_val[s] + e * np.sign(0.5 - y_val[s])
                test[s, j] = 0.2 + 0.01 * j + 0.001 * s
        anchors = (np.arange(k)[None, None] + np.arange(M)[None, :, None]
                   + np.arange(S)[:, None, None]) % s_te.shape[2]
        out = {"val": val, "test": test, "anchors": anchors}
        if halves is not None:
            n_half = len(halves[0][0])
            out["half_res"] = np.stack([np.linspace(-0.1, 0.2, 2 * n_half).reshape(2, n_half)
                                        * (s + 1) for s in range(S)])
            out["half_pick"] = np.zeros((S, 2), np.int32)
        if dr_m:
            out["dr"] = np.stack([np.stack([np.full(h, 0.5), np.full(h, 0.4),
                                            np.full(h, 0.6)])] * S)
            out["dr_pick"] = np.full(S, dr_pick, np.int32)
        return out

    monkeypatch.setattr(_protocol, "_cv_jit", fake_cv)
    monkeypatch.setattr(_protocol, "_kernel_jit", fake_kernel)
    r = _protocol.evaluate_protocol(_protocol_matrix(), 4, methods, seeds=seeds,
                                    settings=settings, dr_items=6 if dr_pick is not None else 0)
    return r, seen


def test_auto_chosen_on_validation_reports_its_pick_with_the_halves_radius(monkeypatch):
    """Choosing on validation models, ``auto`` reports the candidate with the lowest
    validation MSE per seed (a better method that is not a candidate does not count);
    its radius comes from the residuals of the validation halves, and the halves are
    each split seed's own; the unbiased estimate's ``anchors_of`` names the method it
    used among all the methods fitted, candidates the user did not list included."""
    from jaxeval.anchors import Settings, conformal_quantile
    from jaxeval.anchors._methods import validation_halves

    st = Settings(auto_cv_below=12, named_halves=False)  # 12 validation models
    seeds = (5, 3)
    r, seen = _fake_protocol(monkeypatch, ("random_ridge", "auto"), seeds, st, dr_pick=2)
    fit_names = seen["fit_names"]
    assert r.info["auto_choice"] == "validation"
    for s, seed in enumerate(seeds):
        j = seen["val_best"][s]
        assert r.info["auto_picks"][s] == fit_names[j]
        assert r.predictions[1, s] == pytest.approx(np.full(r.predictions.shape[2],
                                                            0.2 + 0.01 * j + 0.001 * s))
        np.testing.assert_array_equal(r.anchors[1, s], (np.arange(4) + j + s) % 40)
        half = np.linspace(-0.1, 0.2, 12) * (s + 1)
        want = float(conformal_quantile(np.asarray(half, np.float32), 0.1))
        assert r.info["radius"][1][s] == pytest.approx(want, rel=1e-6)
        a, b = validation_halves(12, seed)
        np.testing.assert_array_equal(seen["halves"][0][s], a)
        np.testing.assert_array_equal(seen["halves"][1][s], b)
    assert not np.array_equal(seen["halves"][0][0], seen["halves"][0][1])
    assert r.dr["anchors_of"] == [fit_names[2]] * 2 and fit_names[2] not in r.methods


def test_auto_chosen_by_cross_validation_reports_that_pick_and_its_residuals(monkeypatch):
    """Choosing by cross-validation, ``auto`` reports the candidate with the lowest
    cross-validated MSE (not the validation favourite), passes its position among the
    candidates to the kernel, takes its radius from that candidate's cross-fitted
    residuals, and the folds are cut with each split seed."""
    from jaxeval.anchors import Settings, conformal_quantile
    from jaxeval.anchors._methods import SplitData, cv_folds

    st = Settings(named_halves=False)  # 12 validation models < 100: cross-validation
    seeds = (5, 3)
    cv_best = (4, 0)
    r, seen = _fake_protocol(monkeypatch, ("random_ridge", "auto"), seeds, st,
                             cv_best=cv_best)
    fit_names, cands = seen["fit_names"], seen["cands"]
    assert r.info["auto_choice"] == "cv"
    present = [m for m in cands if m in fit_names]
    for s, seed in enumerate(seeds):
        j = fit_names.index(cands[cv_best[s]])
        assert j != seen["val_best"][s]
        assert r.info["auto_picks"][s] == cands[cv_best[s]]
        assert seen["picks"][s] == present.index(cands[cv_best[s]])
        assert r.predictions[1, s] == pytest.approx(np.full(r.predictions.shape[2],
                                                            0.2 + 0.01 * j + 0.001 * s))
        res = np.linspace(-0.01, 0.02, seen["cv"][2].shape[1] * seen["cv"][2].shape[2])
        want = float(conformal_quantile(np.asarray(res * (s + 1)), 0.1))
        assert r.info["radius"][1][s] == pytest.approx(want, rel=1e-6)
        sp = _protocol_matrix().drop_duplicates().protocol_split(seed)
        d = SplitData(sp.train.scores, sp.train.true_score(), sp.validation.scores,
                      sp.validation.true_score())
        folds, s_ho, y_ho = cv_folds(d, st.auto_folds, seed)
        np.testing.assert_array_equal(seen["cv"][1][s], s_ho)
        np.testing.assert_array_equal(seen["cv"][0].s_tr[s], folds.s_tr)
        np.testing.assert_array_equal(seen["cv"][2][s], y_ho)


def _kernel_with_fake_maps(monkeypatch, val_pred):
    """``protocol_kernel`` (k = 3, 5 extra items, alpha 0.1) on a fixed 36 x 30 matrix,
    validation targets 0.9, with fake maps: method ``name`` predicts ``val_pred[name]``
    for every model and takes anchors ``0..2`` (the first) or ``3..5``; the DR estimate
    itself runs for real."""
    import types

    import jax.numpy as jnp

    from jaxeval.anchors import Settings, _protocol
    from jaxeval.anchors._methods import SplitData

    rng = np.random.default_rng(0)
    s = (rng.random((36, 30)) < 0.6).astype(np.float32)
    d = SplitData(jnp.asarray(s[:20]), jnp.asarray(s[:20].mean(1)), jnp.asarray(s[20:30]),
                  jnp.full(10, 0.9, jnp.float32))
    first = next(iter(val_pred))

    def fake_fit(key, dd, k, name, st, cache=None):
        return types.SimpleNamespace(anchors=jnp.arange(k) + (0 if name == first else k),
                                     name=name)

    def fake_apply(f, x):
        return jnp.full(x.shape[0], val_pred[f.name], jnp.float32)

    monkeypatch.setattr(_protocol, "fit_method", fake_fit)
    monkeypatch.setattr(_protocol, "apply_map", fake_apply)
    return _protocol.protocol_kernel(jax.random.key(0), d, jnp.asarray(s[30:]), 3,
                                     tuple(val_pred), Settings(), 5, 0.1)


def test_the_unbiased_estimate_picks_by_the_clipped_validation_error(monkeypatch):
    """Without a given pick, the unbiased estimate uses the anchors of the candidate
    whose *clipped* validation predictions err least (the error ``evaluate_protocol``
    reports and ``auto`` chooses by): a candidate predicting 1.5 for models at 0.9 errs
    by 0.1 once clipped (0.6 unclipped) and beats one predicting 0.7 (0.2 either way).
    The maps are fakes; the DR estimate itself runs for real."""
    out = _kernel_with_fake_maps(monkeypatch, {"kmeans_ridge": 1.5, "greedy_ridge": 0.7})
    assert int(out["dr_pick"]) == 0  # kmeans_ridge
    np.testing.assert_array_equal(out["anchors"][0], [0, 1, 2])
    assert out["dr"].shape == (3, 6) and np.isfinite(np.asarray(out["dr"])).all()
