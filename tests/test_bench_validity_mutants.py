"""Gaps found by a mutation review of the validity benchmarks whose coverage figures
BUILD_NOTES quotes: ``benchmarks/bench_confseq.py`` (the prediction-quality knobs, the
simulation kernel's miss / stopping / checkpoint bookkeeping, the truth rows and ``main``'s
pooled table) and ``benchmarks/bench_validity.py`` (``load_source`` and ``main``'s
family-wise coverage, target and table).

No real simulation runs here: the kernel is driven by scripted confidence sequences whose
bounds are fixed in advance, and both ``main`` functions run on stubbed simulations that
hand back fixed results, so every expected number is worked out from the inputs."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval import _confseq as cs_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_confseq as bc  # noqa: E402
import bench_validity as bv  # noqa: E402

# --- bench_confseq: the prediction-quality knobs -------------------------------------------


def _logit(p):
    return np.log(p) - np.log1p(-p)


def test_calibrated_predictions_difficulty_plus_a_matched_ability_shift():
    """Item difficulty = logit((column sum + 0.5) / (rows + 1)) of the training rows; each
    truth row gets one shift so that the mean prediction equals the row's mean."""
    train = np.array([[1, 0, 0, 1], [1, 0, 1, 0], [1, 1, 0, 0]], np.float32)
    rows = np.array([[1, 1, 1, 0], [0, 0, 1, 0]], np.float32)
    out = bc.calibrated_predictions(train, rows)
    assert out.shape == (2, 4) and out.dtype == np.float32
    b = _logit((train.sum(0) + 0.5) / 4.0)  # (3.5, 1.5, 1.5, 1.5) / 4
    for r in range(2):
        assert out[r].mean() == pytest.approx(rows[r].mean(), abs=1e-5)
        shift = _logit(out[r].astype(np.float64)) - b
        np.testing.assert_allclose(shift, shift[0], atol=1e-4)


def test_predictions_by_quality_code():
    """0 good, 1 good + 0.3 clipped to [0, 1], 2 uniform noise (from the key), 3 = 1 - S."""
    key = jax.random.key(5)
    s = jnp.array([1.0, 0.0, 1.0, 0.0])
    good = jnp.array([0.9, 0.1, 0.6, 0.75])
    got = [np.asarray(bc.predictions(key, s, good, jnp.int32(q))) for q in range(4)]
    np.testing.assert_allclose(got[0], good)
    np.testing.assert_allclose(got[1], [1.0, 0.4, 0.9, 1.0], atol=1e-6)
    np.testing.assert_allclose(got[2], jax.random.uniform(key, (4,)))
    np.testing.assert_allclose(got[3], [0.0, 1.0, 0.0, 1.0])
    assert bc.QUALITIES == ("good", "biased", "random", "adversarial")


# --- bench_confseq: the simulation kernel on scripted confidence sequences ------------------


class _St(NamedTuple):
    count: jax.Array
    lower: jax.Array
    upper: jax.Array


def _scripted(name, bounds):
    """A confidence sequence whose interval after ``t`` terms is ``bounds[t - 1]``."""
    tab = jnp.asarray(bounds, jnp.float32)

    def init(shape=()):
        return _St(jnp.zeros(shape, jnp.int32), jnp.zeros(shape), jnp.ones(shape))

    def update(st, y, lo, hi, center, alpha, active=None):
        lw, up = tab[st.count]
        return _St(st.count + 1, lw, up)

    return cs_mod.ConfSeq(name, init, update, lambda st: (st.lower, st.upper),
                          cs_mod.finalize)


# theta = 0.5 (s alternates 1, 0); both scripts are running intersections, as the real
# sequences are. Kind "a" (the first kind: the one that stops) has width <= 0.25 first after
# 3 terms (exactly 0.25 after 3 and 4) and excludes theta from 5 terms on. Kind "b" always
# covers theta, with theta on its lower end from 2 terms on; its width is <= 0.25 only from
# 5 terms on.
A = [[0, 1], [0.125, 0.875], [0.375, 0.625], [0.375, 0.625], [0.5625, 0.625],
     [0.5625, 0.625]]
B = [[0, 1], [0.5, 1], [0.5, 1], [0.5, 0.875], [0.5, 0.5], [0.5, 0.5]]
S6 = jnp.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])


@pytest.fixture
def scripted(monkeypatch):
    seqs = {"a": _scripted("a", A), "b": _scripted("b", B)}
    monkeypatch.setattr(cs_mod, "get", lambda name, grid_size=128: seqs[name])


def _sim(s, good, stop_width, checkpoints, quality=0, lam0=0.5, shrink=1e30):
    out = bc.simulate(jax.random.key(0), s, good, jnp.float32(0.1), jnp.float32(lam0),
                      jnp.float32(shrink), jnp.int32(quality), kinds=("a", "b"),
                      stop_width=stop_width, checkpoints=checkpoints)
    return {k: np.asarray(v) for k, v in out.items()}


def test_simulate_miss_is_ever_excluded_with_closed_interval_ends(scripted):
    o = _sim(S6, jnp.full(6, 0.5), 0.25, (2, 5))
    # "a" excluded theta after 5 terms: missed; "b" had theta on an end of the interval
    # only: a closed interval covers it
    assert o["miss"].tolist() == [True, False]


def test_simulate_stops_when_the_first_kinds_width_reaches_stop_width(scripted):
    # stop at the first time the first kind's width is <= 0.25 (after 3 terms), where "a"
    # still covers theta (it misses only later); not at the first time it is < 0.25, nor at
    # "b"'s first narrow interval (both after 5 terms, where "a" misses)
    o = _sim(S6, jnp.full(6, 0.5), 0.25, (2, 5))
    assert o["miss_stop"].tolist() == [False, False]


def test_simulate_never_stopped_means_miss_at_the_end(scripted):
    # never narrower than 0.01: tau = n, so miss@tau is the time-uniform miss
    o = _sim(S6, jnp.full(6, 0.5), 0.01, (2, 5))
    assert o["miss_stop"].tolist() == [True, False]


def test_simulate_widths_at_checkpoints_counted_in_terms_and_the_end(scripted):
    o = _sim(S6, jnp.full(6, 0.5), 0.25, (2, 5))
    np.testing.assert_allclose(o["width"], [[0.75, 0.0625], [0.5, 0.0]])
    np.testing.assert_allclose(o["final_width"], [0.0625, 0.0])
    # after finalize: [theta - NUM_TOL, theta + NUM_TOL], centred on theta
    np.testing.assert_allclose(o["final_exact_width"], 2 * cs_mod.NUM_TOL, atol=1e-7)
    assert np.all(o["final_exact_width"] <= bc.EXACT_WIDTH)
    assert np.all(o["final_exact_err"] <= 1e-6)


def test_simulate_point_estimate_errors_after_each_checkpoint(scripted):
    """All-correct row, constant predictions 0.5, lam = lam0 = 0.5: after c items the naive
    estimate is (c + 0.5 (n - c)) / n, while every DR term and the difference estimate
    equal theta = 1 exactly."""
    n = 8
    o = _sim(jnp.ones(n), jnp.full(n, 0.5), 0.25, (2, 4, 8))
    assert o["est_err"].shape == (3, 3)
    np.testing.assert_allclose(o["est_err"][0], [-0.375, -0.25, 0.0], atol=1e-6)
    np.testing.assert_allclose(o["est_err"][1:], 0.0, atol=1e-6)


def test_simulate_many_replicate_i_is_simulate_with_key_fold_in_i():
    """Replicate ``i`` runs :func:`simulate` with key ``fold_in(key, i)`` and the same
    static settings (here batches of 3 and random predictions, which the key draws)."""
    key, n = jax.random.key(4), 12
    s = jnp.asarray(np.tile([1.0, 0.0, 0.0], 4))
    good = jnp.full(n, 0.4)
    args = (s, good, jnp.float32(0.1), jnp.float32(1.0), jnp.float32(1.0), jnp.int32(2))
    kw = dict(kinds=("hoeffding",), batch=3, checkpoints=(3, 6))
    many = bc.simulate_many(key, *args, jnp.arange(3), **kw)
    for i in range(3):
        one = bc.simulate(jax.random.fold_in(key, i), *args, **kw)
        for k in ("width", "est_err", "final_width"):
            np.testing.assert_allclose(many[k][i], one[k], rtol=1e-6, atol=1e-7)
    assert not np.allclose(many["est_err"][0], many["est_err"][1])


# --- bench_confseq: truth rows ---------------------------------------------------------------


def test_synthetic_rows_shapes_values_seed_and_theta_order():
    train, rows = bc.synthetic_rows(3, 400, thetas=(0.2, 0.5, 0.8))
    assert train.shape == (200, 400) and rows.shape == (3, 400)
    assert set(np.unique(train)) <= {0.0, 1.0} and set(np.unique(rows)) <= {0.0, 1.0}
    train2, rows2 = bc.synthetic_rows(3, 400, thetas=(0.2, 0.5, 0.8))
    np.testing.assert_array_equal(rows, rows2)
    np.testing.assert_array_equal(train, train2)
    m = rows.mean(1)
    assert m[0] < m[1] < m[2], m


def test_real_rows_the_20th_and_80th_percentile_rows_and_the_rest_as_training():
    m = jaxeval.load("oll2_musr").drop_duplicates()
    order = np.argsort(m.scores.mean(1))
    for k, fr in ((2, (0.2, 0.8)), (3, (0.2, 0.5, 0.8))):
        train, rows = bc.real_rows("oll2_musr", k_rows=k)
        pick = order[[round(f * (m.n_models - 1)) for f in fr]]
        np.testing.assert_array_equal(rows, m.scores[pick])
        assert train.shape == (m.n_models - k, m.n_items)
        np.testing.assert_array_equal(train, np.delete(m.scores, pick, axis=0))
        assert train.dtype == rows.dtype == np.float32
        assert np.all(np.diff(rows.mean(1)) >= 0)


def test_real_rows_refuses_an_incomplete_matrix_naming_the_dataset(monkeypatch):
    sm = jaxeval.ScoreMatrix(np.ones((3, 2)), mask=np.array([[1, 1], [1, 0], [1, 1]], bool))
    monkeypatch.setattr(jaxeval, "load", lambda name: sm)
    with pytest.raises(ValueError, match="holey: needs a complete matrix"):
        bc.real_rows("holey")


# --- bench_confseq: main's pooled table on a stubbed simulation ------------------------------

N = 30  # checkpoints at 5/10/25/50%: round(1.5) = 2, 3, round(7.5) = 8, 15 terms
ROW_ONES = (10, 20)  # truth row r has ROW_ONES[r] correct answers
# per row (2), replicate (4) and kind (3): the interval ever missed / missed at tau
MISS = [[[1, 0, 1], [0, 0, 1], [0, 0, 0], [0, 0, 0]],
        [[0, 1, 1], [0, 0, 1], [0, 0, 1], [0, 0, 0]]]
MISS_STOP = [[[0, 0, 0]] * 4, [[0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 0, 0]]]


def _fake_many(calls):
    def fake(key, s, good, alpha, lam0, shrink, quality, idx, *, kinds, batch, checkpoints,
             grid_size):
        r = ROW_ONES.index(int(np.asarray(s).sum()))
        R = len(idx)
        calls.append(dict(r=r, key=np.asarray(jax.random.key_data(key)), lam0=float(lam0),
                          shrink=float(shrink), quality=int(quality), R=R, batch=batch,
                          checkpoints=checkpoints, grid_size=grid_size, kinds=kinds,
                          alpha=float(alpha), good=np.asarray(good)))
        reps = np.arange(R) % 4
        ki = np.arange(3)[:, None]
        c = np.arange(4)[None, :]
        width = np.broadcast_to(0.1 * (ki + 1) + 0.01 * c + 0.004 * r, (R, 3, 4))
        fin = np.zeros((R, 3))
        fin[0, 1] = 2 * bc.EXACT_WIDTH if r == 1 else 0.0  # one inexact end, hoeffding
        e = np.arange(3)[:, None]
        err = 0.01 * (e + 1) * (c + 1) + 0.02 * (-1.0) ** np.arange(R)[:, None, None]
        return {"miss": np.asarray(MISS[r], bool)[reps],
                "miss_stop": np.asarray(MISS_STOP[r], bool)[reps],
                "width": width.astype(np.float32), "est_err": err.astype(np.float32),
                "final_width": np.zeros((R, 3)), "final_exact_width": fin,
                "final_exact_err": np.zeros((R, 3))}
    return fake


@pytest.fixture
def confseq_main(monkeypatch, capsys):
    calls, seeds = [], []
    rng = np.random.default_rng(0)
    train = (rng.uniform(size=(5, N)) < 0.5).astype(np.float32)
    rows = np.zeros((2, N), np.float32)
    rows[0, :ROW_ONES[0]] = 1
    rows[1, :ROW_ONES[1]] = 1

    def synth(seed, n):
        seeds.append((seed, n))
        return train, rows

    def real(name):
        raise ValueError(f"no {name} here")

    monkeypatch.setattr(bc, "simulate_many", _fake_many(calls))
    monkeypatch.setattr(bc, "synthetic_rows", synth)
    monkeypatch.setattr(bc, "real_rows", real)

    def run(*argv):
        calls.clear()
        seeds.clear()
        monkeypatch.setattr(sys, "argv", ["bench_confseq.py", *argv])
        bc.main()
        return capsys.readouterr().out.splitlines(), calls, seeds, (train, rows)
    return run


def test_confseq_main_table_pools_rows_per_kind(confseq_main):
    lines, calls, _, _ = confseq_main("--replicates", "4", "--datasets", "synthetic,bogus")
    tol = 3 * np.sqrt(0.05 * 0.95 / 8)  # two rows of 4 replicates pooled
    assert lines[0].endswith(f"binomial 3-se tolerance {tol:.4f}")
    assert lines[1].split("|")[1:-1] == [
        " dataset ", " n ", " lambda ", " quality ", " CS ", " miss ", " miss@tau ",
        " width 5% ", " width 10% ", " width 25% ", " width 50% ", " exact at end "]
    rows = [ln for ln in lines if ln.startswith("| synthetic | 30 |")]
    assert rows[:3] == [
        "| synthetic | 30 | plug-in | good | eb | 0.1250 | 0.0000 | "
        "0.102 | 0.112 | 0.122 | 0.132 | yes |",
        "| synthetic | 30 | plug-in | good | hoeffding | 0.1250 | 0.0000 | "
        "0.202 | 0.212 | 0.222 | 0.232 | NO |",
        "| synthetic | 30 | plug-in | good | betting | 0.6250 | 0.1250 | "
        "0.302 | 0.312 | 0.322 | 0.332 | yes |"]
    # lambda = 0 only for good and adversarial predictions; every kind of cs_mod.KINDS
    assert [tuple(ln.split(" | ")[2:5]) for ln in rows] == [
        (lam, q, k) for lam, qs in (("plug-in", bc.QUALITIES), ("0", ("good", "adversarial")))
        for q in qs for k in cs_mod.KINDS]
    assert "| bogus | skipped: no bogus here |" in lines


def test_confseq_main_point_estimates_at_ten_percent_bias_and_rmse(confseq_main):
    lines, _, _, _ = confseq_main("--replicates", "4", "--datasets", "synthetic")
    i = lines.index("| dataset | quality | naive pooled | mean of DR terms | difference estimate |")
    assert lines[i + 2:i + 6] == [
        f"| synthetic | {q} | +2.00 / 2.83 | +4.00 / 4.47 | +6.00 / 6.32 |"
        for q in bc.QUALITIES]


def test_confseq_main_runs_each_quality_and_lambda_mode_per_row(confseq_main):
    _, calls, seeds, (train, rows) = confseq_main(
        "--replicates", "4", "--datasets", "synthetic", "--seed", "3", "--batch", "2",
        "--grid-size", "16", "--alpha", "0.1")
    assert seeds == [(3, 1000)]
    got = [(c["lam0"], c["shrink"], c["quality"], c["r"]) for c in calls]
    want = [(lam0, float(np.float32(shrink)), q, r) for lam0, shrink, qs in ((1.0, 10.0, range(4)),
                                                        (0.0, 1e30, (0, 3)))
            for q in qs for r in range(2)]
    assert got == want
    good = bc.calibrated_predictions(train, rows)
    for c in calls:
        assert c["key"].tolist() == np.asarray(jax.random.key_data(
            jax.random.fold_in(jax.random.key(3), c["r"]))).tolist()
        assert (c["R"], c["batch"], c["grid_size"], c["kinds"]) == (4, 2, 16, cs_mod.KINDS)
        assert c["checkpoints"] == (2, 3, 8, 15)
        assert c["alpha"] == pytest.approx(0.1)
        np.testing.assert_allclose(c["good"], good[c["r"]])


def test_confseq_main_defaults(confseq_main):
    lines, calls, seeds, _ = confseq_main()
    assert lines[0].startswith("alpha=0.05 replicates=2000 batch=1 grid=128 seed=0;")
    assert seeds == [(0, 1000)]
    assert {(c["R"], c["batch"], c["grid_size"]) for c in calls} == {(2000, 1, 128)}
    assert [ln.split(" | ")[0][2:] for ln in lines if "skipped" in ln] == [
        *bc.REAL_DATASETS, *bc.EXTRA_DATASETS]


# --- bench_validity: load_source --------------------------------------------------------------


def _holey():
    mask = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], bool)
    return jaxeval.ScoreMatrix(np.full((4, 3), 0.5), mask=mask,
                               models=["m0", "m1", "m2", "m3"])


@pytest.fixture
def seen(monkeypatch):
    """``jaxeval.load`` replaced by one that records its calls and returns ``_holey()``."""
    calls = []

    def load(path, **kw):
        calls.append((path, kw))
        return _holey()
    monkeypatch.setattr(jaxeval, "load", load)
    return calls


def test_load_source_npz_renames_duplicates_and_drops_incomplete_models(seen, capsys):
    sm = bv.load_source("mb_arc")
    assert seen == [(bv.SOURCES["mb_arc"], {"duplicate_names": "rename"})]
    assert list(sm.models) == ["m0", "m2"] and sm.is_complete
    assert capsys.readouterr().out == "mb_arc: dropping 2 of 4 models with missing cells\n"


def test_load_source_named_dataset_loaded_as_is(seen, capsys):
    assert bv.load_source("musr").n_models == 4
    assert seen == [("oll2_musr", {})] and capsys.readouterr().out == ""


# --- bench_validity: main on a stubbed simulate_identification --------------------------------

R_, ALPHA_ = 100, 0.1
TARGET = 1 - ALPHA_ - 3 * np.sqrt(ALPHA_ * (1 - ALPHA_) / R_)  # 0.81
COV = {"none": [TARGET, 0.82, 0.95], "biased": [0.70, 0.99, 0.99]}
WIDTH = [[0.1, 0.2, 0.3, 0.4], [0.15, 0.25, 0.35, 0.45], [0.05, 0.06, 0.07, 0.08]]


@pytest.fixture
def validity(monkeypatch, capsys):
    calls, fits = [], []

    def fake(data, policy, **kw):
        calls.append(dict(kw, data=data, policy=policy))
        k = len(kw["cs_kinds"])
        at = [("eb", "hoeffding", "betting").index(name) for name in kw["cs_kinds"]]
        cov = np.asarray(COV.get(kw["corruption"], [0.9] * 3))[at]
        return SimpleNamespace(
            cs_kinds=kw["cs_kinds"], coverage_family=cov,
            coverage_arm=np.full(k, 0.99), coverage_family_at=np.full((k, 4), 0.999),
            naive_coverage_family=np.array([0.9, 0.5, 0.7, 0.6]),
            naive_coverage_arm=np.full(4, 0.3), width=np.asarray(WIDTH)[at],
            budgets=np.array([5, 10, 15, 30]))

    def fit(train, *, rank, rho, seed, num_steps):
        fits.append(dict(n_models=train.n_models, rank=rank, rho=rho, seed=seed,
                         num_steps=num_steps))
        return f"factors{len(fits)}"

    scores = np.array([[1, 0, 1, 0, 1, 1], [0, 0, 1, 0, 1, 1], [1, 0, 1, 0, 1, 1],
                       [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1], [1, 1, 0, 0, 0, 0]],
                      np.float32)  # row 2 repeats row 0
    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(jaxeval, "fit_factorization", fit)
    monkeypatch.setattr(bv, "load_source", lambda src: jaxeval.ScoreMatrix(scores))

    def run(*argv):
        calls.clear()
        fits.clear()
        rc = bv.main(list(argv))
        return rc, capsys.readouterr().out.splitlines(), calls, fits
    return run


def _table(lines):
    i = next(i for i, ln in enumerate(lines) if ln.startswith("| truth |"))
    return lines[i:]


def test_validity_main_table_family_coverage_worst_naive_and_last_widths(validity):
    rc, lines, _, _ = validity("--sources", "synthetic", "--preds", "none", "--reps", "100")
    assert rc == 0
    assert _table(lines) == [
        "| truth | predictions | eb | hoeffding | betting "
        "| naive pooling (worst checkpoint) | width at last checkpoint |",
        "|---|---|---|---|---|---|---|",
        "| synthetic | none | 0.8100 | 0.8200 | 0.9500 | 0.5000 | 0.400 / 0.450 / 0.080 |"]
    assert lines[0].startswith("synthetic        none: eb=0.8100 hoeffding=0.8200 "
                               "betting=0.9500 naive(min over budgets)=0.5000 ok "
                               "(budgets [5, 10, 15, 30] calls;")
    assert ("R = 100, K = 5, alpha = 0.1, policy = pulse, synchronized = None, bias = 0.3, "
            "checkpoints at [0.01, 0.03, 0.05, 0.1] of K*n; target >= 0.8100 "
            "(1 - alpha - 3 se)") in lines


def test_validity_main_fails_when_any_kind_misses_the_target(validity):
    rc, lines, _, _ = validity("--sources", "synthetic", "--preds", "biased", "none",
                               "--reps", "100")
    assert rc == 1
    assert " FAIL (" in lines[0] and " ok (" in lines[1]
    rc, _, _, _ = validity("--sources", "synthetic", "--preds", "biased", "--reps", "100",
                           "--kinds", "hoeffding", "betting")
    assert rc == 0  # eb (0.70) not asked for: hoeffding and betting hold
    rc, lines, _, _ = validity("--sources", "synthetic", "--preds", "none", "--reps", "400")
    assert rc == 1  # a tighter tolerance at R = 400: eb's 0.81 < 0.855
    assert any("target >= 0.8550" in ln for ln in lines)


def test_validity_main_table_follows_the_kinds_asked_for(validity):
    _, lines, calls, _ = validity("--sources", "synthetic", "--preds", "none", "--reps",
                                  "100", "--kinds", "eb", "betting")
    assert calls[0]["cs_kinds"] == ("eb", "betting")
    assert _table(lines) == [
        "| truth | predictions | eb | betting "
        "| naive pooling (worst checkpoint) | width at last checkpoint |",
        "|---|---|---|---|---|---|",
        "| synthetic | none | 0.8100 | 0.9500 | 0.5000 | 0.400 / 0.080 |"]


def test_validity_main_passes_its_settings_to_the_simulation(validity):
    _, lines, calls, fits = validity(
        "--sources", "musr", "synthetic", "--preds", "random", "--reps", "50", "--K", "3",
        "--alpha", "0.2", "--fracs", "0.1", "0.5", "--bias", "0.2", "--policy", "ucbe",
        "--no-synchronized", "--chunk", "7", "--seed", "4", "--rank", "8",
        "--n-synthetic", "33")
    # musr: 6 models (5 distinct), 6 items: rank capped at 3, the first part of the split
    # (5 // 2 = 2 of the distinct models) trains
    assert fits == [dict(n_models=2, rank=3, rho=1.0, seed=4, num_steps=1000)]
    assert "musr: rank 3 (only 6 items)" in lines
    assert calls[0]["factors"] == "factors1" and calls[0]["data"].n_models == 6
    assert calls[1]["factors"] is None
    assert calls[1]["data"].n_items == 33 and calls[1]["data"].rank == 4
    for c in calls:
        assert c["policy"] == "ucbe"
        assert {k: c[k] for k in ("K", "budget_fractions", "alpha", "n_replicates", "seed",
                                  "cs_kinds", "corruption", "bias", "chunk_size",
                                  "synchronized")} == dict(
            K=3, budget_fractions=[0.1, 0.5], alpha=0.2, n_replicates=50, seed=4,
            cs_kinds=("eb", "hoeffding", "betting"), corruption="random", bias=0.2,
            chunk_size=7, synchronized=False)


def test_validity_main_defaults(validity):
    rc, lines, calls, _ = validity("--sources", "synthetic")
    assert [c["corruption"] for c in calls] == ["none", "biased", "random", "adversarial"]
    c = calls[0]
    assert (c["policy"], c["K"], c["budget_fractions"], c["alpha"], c["n_replicates"],
            c["seed"], c["cs_kinds"], c["bias"], c["chunk_size"], c["synchronized"]) == (
        "pulse", 5, [0.01, 0.03, 0.05, 0.1], 0.1, 2000, 0, ("eb", "hoeffding", "betting"),
        0.3, 500, None)
    assert c["data"].n_items == 200
    assert any(f"target >= {1 - 0.1 - 3 * np.sqrt(0.09 / 2000):.4f}" in ln for ln in lines)


def test_validity_main_groups_missing_files_and_unknown_sources(validity, monkeypatch,
                                                                 tmp_path, capsys):
    for s in bv.GROUPS["metabench"]:
        monkeypatch.setitem(bv.SOURCES, s, str(tmp_path / f"{s}.npz"))
    rc, lines, calls, _ = validity("--sources", "metabench", "--reps", "100")
    assert calls == [] and rc == 0
    assert [ln.split(":")[0] for ln in lines if ln.startswith("skip ")] == [
        f"skip {s}" for s in bv.SOURCES if s.startswith("mb_")]
    assert len(bv.GROUPS["metabench"]) == 8
    with pytest.raises(SystemExit) as exc:
        bv.main(["--sources", "musr", "nope"])
    assert exc.value.code == 2
    assert "--sources: unknown ['nope']" in capsys.readouterr().err


def test_confseq_main_skips_only_a_dataset_it_cannot_load(confseq_main, monkeypatch):
    """A missing file or an incomplete matrix is a "skipped" row; any other error (a bug)
    stops the run instead of vanishing into the table."""
    def missing(name):
        raise FileNotFoundError(f"no file for {name}")

    monkeypatch.setattr(bc, "real_rows", missing)
    lines, _, _, _ = confseq_main("--replicates", "4", "--datasets", "gone")
    assert "| gone | skipped: no file for gone |" in lines

    def buggy(name):
        raise TypeError("a bug")

    monkeypatch.setattr(bc, "real_rows", buggy)
    with pytest.raises(TypeError, match="a bug"):
        confseq_main("--replicates", "4", "--datasets", "gone")
