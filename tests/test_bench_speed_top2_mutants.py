"""Gaps found by a mutation review of the benchmark scripts whose tables the README and
BUILD_NOTES quote: ``benchmarks/bench_top2.py`` (the top-two oracle), ``bench_lam0.py``
(learned λ prior against λ₀ = 1), ``bench_memory.py`` (XLA's memory accounting),
``bench_prediction_quality.py`` (how well the factorization predicts unseen items) and
the non-timing logic of ``bench_speed.py`` / ``speed_problem.py`` (the same work on
both sides, the medians and ratios, the JSON).

Timings are not asserted. The simulations, fits and timed implementations are replaced
by fakes that record what they are handed and answer fixed numbers (a fake clock for the
loops of ``bench_speed``), so every expected figure follows from the inputs;
``bench_memory`` and ``bench_speed._compile_jax`` compile the real kernel on tiny
problems."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval import _factorization as fz
from jaxeval import _identification as idn
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_lam0 as bl  # noqa: E402
import bench_memory as bm  # noqa: E402
import bench_prediction_quality as bpq  # noqa: E402
import bench_speed as bs  # noqa: E402
import bench_top2 as b2  # noqa: E402
import bench_tuning as bt  # noqa: E402
import speed_problem as sp  # noqa: E402

# ============================================================ bench_top2

# six pool models of n = 20 items with these score means (constant rows)
_MEANS = [0.9, 0.8, 0.5, 0.45, 0.3, 0.1]
_N = 20
# three instances of K = 4 pool rows; instance 1 is never played
_INST = np.array([[2, 0, 4, 1], [5, 3, 2, 4], [3, 5, 4, 1]])
_PLAYED = np.array([0, 0, 2, 2, 0])
# the true top two of each instance, best first, and the top-two gaps of the played ones
_TOP2 = np.array([[0, 1], [2, 3], [1, 3]])
_GAPS_ITEMS = [0.1 * _N, 0.35 * _N]  # instances 0 and 2, smallest first
# calls to 95% (K n = 80): the full runs, and the top-two runs by a (pulse_ucb: never)
_FULL = {"ucbe": 40.0, "pulse_ucb": 20.0}
_TOP = {"ucbe": {0.3: 30.0, 1.0: 10.0, 3.0: math.inf, 10.0: 12.0},
        "pulse_ucb": {0.3: math.inf, 1.0: math.inf, 3.0: math.inf, 10.0: math.inf}}


def _top2_sm():
    return jaxeval.ScoreMatrix(np.repeat(np.asarray(_MEANS, np.float32)[:, None], _N, 1))


@pytest.fixture
def top2_sim(monkeypatch):
    """``simulate_identification`` replaced by a fake recording its calls; ``calls_to``
    answers in calls only for the 95% target (a fraction or 90% is something else)."""
    calls = []
    sm = _top2_sm()

    def fake(data, policy, **kw):
        calls.append(dict(kw, policy=policy, data=data))
        if kw.get("fail"):
            raise RuntimeError
        v = _FULL[policy] if kw["K"] != 2 else _TOP[policy][kw["a"]]

        def calls_to(acc=0.95, *, fraction=False):
            assert acc == 0.95 and not fraction, (acc, fraction)
            return v

        return types.SimpleNamespace(calls_to=calls_to, instances=_INST,
                                     pool_models=np.asarray(sm.models),
                                     instance=_PLAYED)

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(b2, "load", lambda name: sm)
    monkeypatch.setattr(b2, "_factors", lambda sm, seed, rank: f"F{seed}/{rank}")
    return calls


def _top2_main(tmp_path, *extra):
    out = tmp_path / "top2.json"
    b2.main(["--datasets", "arc", "--K", "4", "--reps", "3", "--instances", "7",
             "--out", str(out), *extra])
    return json.loads(out.read_text())


def test_top2_fmt_and_ratio_helpers():
    """A share of K n with one decimal (``>max`` when never reached); the ratio to UCB-E
    (``>max`` when only UCB-E reaches 95%, ``<1`` when only the other does, ``-`` when
    neither: the cells of ``bench_tuning``'s table)."""
    assert b2._fmt(20.0, 80) == "25.0%"
    assert b2._fmt(math.inf, 80) == ">max"
    assert b2._ratio(10.0, 40.0) == "0.25"
    assert b2._ratio(math.inf, 40.0) == ">max"
    assert b2._ratio(10.0, math.inf) == "<1"
    assert b2._ratio(math.inf, math.inf) == "-"
    for x, u in ((10.0, 40.0), (math.inf, 40.0), (10.0, math.inf), (math.inf, math.inf)):
        assert b2._ratio(x, u) == bt._ratio(x, u)


def test_top2_full_runs_use_the_tuned_a_and_factors_for_pulse_only(top2_sim, tmp_path):
    _top2_main(tmp_path, "--seed", "3", "--max-frac", "0.5")
    full = [c for c in top2_sim if c["K"] == 4]
    assert [c["policy"] for c in full] == ["ucbe", "pulse_ucb"]
    by = {c["policy"]: c for c in full}
    assert by["ucbe"]["a"] == b2.TUNED_UCBE_A["arc"]
    assert by["pulse_ucb"]["a"] == b2.TUNED_PULSE_A["arc"]
    assert by["ucbe"]["factors"] is None and by["pulse_ucb"]["factors"] == "F3/8"
    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5)
    assert 0.5 in fracs
    for c in full:
        assert c["budget_fractions"] == fracs
        assert c["n_instances"] == 7 and c["n_replicates"] == 3 and c["seed"] == 3


def test_top2_oracle_runs_play_the_true_top_two_on_the_capped_call_grid(top2_sim, tmp_path):
    """The oracle: K = 2 on each instance's true top two (best first), for every ``a`` of
    the grid, on the full runs' grid in LLM calls capped at 2 n (2 n included)."""
    _top2_main(tmp_path, "--seed", "3", "--max-frac", "0.5")
    oracle = [c for c in top2_sim if c["K"] == 2]
    assert [(c["policy"], c["a"]) for c in oracle] == [
        (p, a) for p in ("ucbe", "pulse_ucb") for a in (0.3, 1.0, 3.0, 10.0)]
    want = sorted({min(round(f * 4 * _N), 2 * _N) for f in DEFAULT_BUDGET_FRACTIONS
                   if f <= 0.5} | {2 * _N})
    assert want[-1] == 2 * _N
    for c in oracle:
        np.testing.assert_array_equal(c["instances"], _TOP2)
        assert list(c["budgets"]) == want
        assert c["seed"] == 3 and c["n_replicates"] == 3
        assert c["factors"] == ("F3/8" if c["policy"] == "pulse_ucb" else None)


def test_top2_json_records_best_a_gaps_of_played_instances_and_full_runs(top2_sim, tmp_path):
    doc = _top2_main(tmp_path)
    r = doc["results"]["arc"]
    assert r["n"] == _N and r["K"] == 4
    assert r["full"] == {"ucbe": [40.0, 3.0], "pulse_ucb": [20.0, 1.0]}
    assert r["top2"]["ucbe"] == [10.0, 1.0]
    # no a of the grid reaches 95%: calls inf, a nan
    c, a = r["top2"]["pulse_ucb"]
    assert math.isinf(c) and math.isnan(a)
    assert r["gaps_items"] == pytest.approx(_GAPS_ITEMS, abs=1e-4)
    assert doc["args"]["datasets"] == ["arc"]


def test_top2_table_row_shares_and_ratios_to_full_ucbe(top2_sim, tmp_path, capsys):
    _top2_main(tmp_path)
    row = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| arc |")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells == ["arc", "20", "2, 7 / 4", "50.0%", "12.5% (a=1)", "0.25", "25.0%",
                     ">max (a=nan)", ">max", "0.50"]


def test_top2_json_is_written_after_every_dataset(top2_sim, tmp_path, monkeypatch):
    """A crash in a later dataset keeps the finished ones in ``--out``."""
    real = jaxeval.simulate_identification

    def crash_on_math5(data, policy, **kw):
        if len([c for c in top2_sim if c["K"] == 4]) >= 2 and kw["K"] == 4:
            kw["fail"] = True
        return real(data, policy, **kw)

    monkeypatch.setattr(jaxeval, "simulate_identification", crash_on_math5)
    out = tmp_path / "top2.json"
    with pytest.raises(RuntimeError):
        b2.main(["--datasets", "arc", "math5", "--K", "4", "--reps", "3", "--out", str(out)])
    assert list(json.loads(out.read_text())["results"]) == ["arc"]


# ============================================================ bench_lam0


@pytest.fixture
def lam0_sim(monkeypatch):
    calls = {"sim": [], "learn": [], "factors": []}
    sm = jaxeval.ScoreMatrix(np.random.default_rng(0).random((10, 12)).astype(np.float32))

    def fake(data, policy, **kw):
        calls["sim"].append(dict(kw, policy=policy))
        to = {0.95: 0.3, 0.90: 0.2} if kw["lam0"] == 1.0 else {0.95: 0.25, 0.90: 0.15}

        def calls_to(acc, *, fraction=False):
            return to[acc] if fraction else 1000.0

        return types.SimpleNamespace(calls_to=calls_to,
                                     accuracy=np.array([0.5, 1.0, 0.9]
                                                       if kw["lam0"] == 1.0 else [0.6, 0.9]))

    def learn(train, **kw):
        calls["learn"].append(dict(kw, train=train))
        return 0.37

    def factors(sm, seed, rank):
        calls["factors"].append((seed, rank))
        return "F"

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(jaxeval, "learn_lam0", learn)
    monkeypatch.setattr(bt, "load", lambda name: sm)
    monkeypatch.setattr(bt, "_factors", factors)
    return calls


def test_lam0_learns_on_the_training_half_and_compares_both_priors(lam0_sim, tmp_path):
    out = tmp_path / "lam0.json"
    bl.main(["--datasets", "arc", "--reps", "2", "--seed", "5", "--out", str(out)])
    (learn,) = lam0_sim["learn"]
    assert learn["train"].n_models == 5 and learn["seed"] == 5
    assert lam0_sim["factors"] == [(5, 8)]
    assert [c["lam0"] for c in lam0_sim["sim"]] == [1.0, 0.37]
    fracs = tuple(f for f in DEFAULT_BUDGET_FRACTIONS if f <= 0.5)
    for c in lam0_sim["sim"]:
        assert c["policy"] == "pulse_ucb" and c["budget_fractions"] == fracs
        assert c["seed"] == 5 and c["n_replicates"] == 2 and c["factors"] == "F"
    row = json.loads(out.read_text())["arc"]
    assert row["lam0_learned"] == 0.37
    # calls to 95% / 90% as shares of K n, then the mean accuracy over the grid
    assert row["lam1"] == pytest.approx([0.3, 0.2, 0.8])
    assert row["learned"] == pytest.approx([0.25, 0.15, 0.75])


def test_lam0_defaults_tuning_seed_and_four_datasets(lam0_sim, tmp_path):
    bl.main(["--out", str(tmp_path / "lam0.json")])
    assert {c["seed"] for c in lam0_sim["sim"]} == {1000}
    assert len(lam0_sim["learn"]) == 4


# ============================================================ bench_memory


def _memory_rows(capsys, *argv):
    bm.main(["--R", argv[0], "--K", "2", "--calls", "8", "--policy", "ucbe", *argv[1:]])
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in out.splitlines()
            if ln.startswith("| ") and ln[2].isdigit()]
    return head, rows


def test_memory_mib_is_two_to_the_twenty_bytes():
    assert bm._mib(2**20) == 1.0 and bm._mib(3 * 2**19) == 1.5


def test_memory_blocks_column_and_item_block_zero_means_whole_rows(capsys):
    head, rows = _memory_rows(capsys, "2", "--ns", "30", "--item-block", "10")
    assert "item_block 10" in head
    assert rows[0][:2] == ["30", "3"]
    head, rows = _memory_rows(capsys, "2", "--ns", "30", "--item-block", "0")
    assert "item_block whole rows" in head
    assert rows[0][:2] == ["30", "whole"]


def test_memory_columns_scale_with_replicates_and_outputs_are_the_kernels(capsys, monkeypatch):
    """In bytes (``_mib`` made the identity), at the default item block: the loop state
    is R times one replicate's, the outputs are the vmapped kernel's outputs (XLA adds a
    table of at most 16 bytes per output), the seen-mask state R K n bytes; the kernel is
    configured as the header says (synthetic truth of rank 4, budgets calls/2 and calls)."""
    monkeypatch.setattr(bm, "_mib", lambda x: x)
    seen = []
    real = idn.Config

    def rec(*a, **kw):
        seen.append((a, kw))
        return real(*a, **kw)

    monkeypatch.setattr(idn, "Config", rec)
    head, (r1,) = _memory_rows(capsys, "1", "--ns", "40")
    _, (r3,) = _memory_rows(capsys, "3", "--ns", "40")
    assert f"item_block {idn.ITEM_BLOCK}" in head and r1[:2] == ["40", "whole"]
    assert float(r3[2]) == 3 * float(r1[2]) > 0
    assert float(r3[5]) == 3 * 2 * 40 and float(r1[5]) == 2 * 40
    for a, kw in seen:
        assert a == ("ucbe", 2, 40) and kw["item_block"] == idn.ITEM_BLOCK
        assert kw["budgets"] == (4, 8) and kw["rank"] == 4 and kw["truth"] == "synthetic"
    cfg = real("ucbe", 2, 40, budgets=(4, 8), truth="synthetic", rank=4)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.arange(3))
    shapes = jax.eval_shape(jax.vmap(lambda k, d, p: idn.run_identification(k, d, p, cfg),
                                     in_axes=(0, None, None)),
                            keys, idn.dummy_data(cfg), idn.Params.make())
    leaves = jax.tree.leaves(shapes)
    out_bytes = sum(x.size * x.dtype.itemsize for x in leaves)
    assert out_bytes <= float(r3[3]) <= out_bytes + 16 * len(leaves)


# ============================================================ bench_prediction_quality

_PQ_N = 400


@pytest.fixture
def pq_fakes(monkeypatch):
    """A 12-model matrix; the fit, the refit and the prediction replaced: the refit
    answers the observed row itself and the prediction is ``0.5 u + 0.25 z`` (``z``
    fixed), so every correlation and variance ratio follows from the masks."""
    g = np.random.default_rng(1)
    S = (g.random((12, _PQ_N)) < np.linspace(0.1, 0.9, 12)[:, None]).astype(np.float32)
    sm = jaxeval.ScoreMatrix(S)
    z = g.normal(size=_PQ_N).astype(np.float32)
    rec = {"fit": [], "refit": []}

    def fit(train, **kw):
        rec["fit"].append(dict(kw, train=train))
        r = kw["rank"]
        return types.SimpleNamespace(V=np.zeros((_PQ_N, r)), c=np.zeros(_PQ_N),
                                     u_mean=np.full(r, 0.1))

    def refit(f, scores, mask, u0, rho, steps):
        rec["refit"].append(dict(scores=np.asarray(scores), mask=np.asarray(mask),
                                 u0=np.asarray(u0), rho=rho, steps=steps))
        return scores

    monkeypatch.setattr(jaxeval, "load", lambda name: sm)
    monkeypatch.setattr(jaxeval, "fit_factorization", fit)
    monkeypatch.setattr(fz, "refit_row", refit)
    monkeypatch.setattr(fz, "predict_scores", lambda u, f: 0.5 * np.asarray(u) + 0.25 * z)
    return sm, z, rec


def test_prediction_quality_refits_the_best_pool_models_and_scores_unseen_items(
        pq_fakes, capsys):
    sm, z, rec = pq_fakes
    bpq.main(["--datasets", "arc", "--fracs", "0.05", "0.2", "--top", "2", "--rank", "3",
              "--seed", "4"])
    train, pool = sm.split([6], seed=4)
    (fit,) = rec["fit"]
    assert fit["train"].n_models == 6 and fit["rank"] == 3 and fit["seed"] == 4
    np.testing.assert_array_equal(np.asarray(fit["train"].scores), np.asarray(train.scores))
    P = np.asarray(pool.scores)
    best = set(np.argsort(P.mean(1))[-2:].tolist())
    assert len(rec["refit"]) == 4
    cells = []
    for k, frac in enumerate((0.05, 0.2)):
        cors, vr = [], []
        for r in rec["refit"][2 * k:2 * k + 2]:
            (i,) = [j for j in range(P.shape[0]) if np.array_equal(P[j], r["scores"])]
            assert i in best
            # a random share frac of the items observed; prior mean, rho 1, 5 steps
            assert abs(r["mask"].mean() - frac) < 0.06
            np.testing.assert_allclose(r["u0"], 0.1)
            assert r["rho"] == 1.0 and r["steps"] == 5
            un = ~r["mask"]
            s, p = P[i, un], 0.5 * P[i, un] + 0.25 * z[un]
            cors.append(np.corrcoef(s, p)[0, 1])
            vr.append(np.var(s - p) / np.var(s))
        cells.append(f"{np.mean(cors):.3f} / {np.mean(vr):.3f}")
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"| arc | {_PQ_N} | " + " | ".join(cells) + " |"


# ============================================================ bench_speed

_K, _NI, _B = 3, 30, (9, 18)
_JAX_SEC = (1.0, 2.0, 4.0)  # seconds per round of a jaxeval impl (before the factors)
_LOOP_SEC = {"pulse": (1.0, 1.0, 4.0), "pulse_ucb": (0.5, 0.5, 0.5), "ucbe": (2.0, 2.0, 2.0),
             "be32": (1.0, 3.0, 1.0), "be1": (4.0, 4.0, 2.0)}


def _jax_sec(policy, b, order_table, cs_kinds, rnd):
    f = (0.5 if b == 32 else 1.0) * (0.5 if cs_kinds == () else 1.0)
    f *= 3.0 if order_table is False else 1.0
    f *= {"pulse": 1.0, "pulse_ucb": 1.5, "ucbe": 0.25}[policy]
    return _JAX_SEC[rnd] * f


@pytest.fixture
def speed_fakes(monkeypatch):
    """A tiny problem, ``_compile_jax`` faked (seconds from ``_jax_sec``), the NumPy
    reference and banditeval faked on a fake clock (``_LOOP_SEC`` per round)."""
    g = np.random.default_rng(0)
    prob = sp.SpeedProblem(
        pool_scores=g.random((12, _NI)).astype(np.float32),
        instances=np.stack([g.choice(12, _K, replace=False) for _ in range(10)]),
        K=_K, n=_NI, budgets=_B, V=np.ones((_NI, 2), np.float32), c=np.ones(_NI, np.float32),
        u_mean=np.ones(2, np.float32), rho=2.0, data="DATA", params="PARAMS")
    rec = {"compile": [], "loop": []}
    clock = [0.0]
    count = {}
    reps = {}

    def tick(key, **kw):
        rec["loop"].append(dict(kw, key=key))
        rnd = count.get(key, 0) // reps[key]
        count[key] = count.get(key, 0) + 1
        clock[0] += _LOOP_SEC[key][rnd] / reps[key]

    def compile_jax(policy, data, params, K, n, budgets, b, reps_, chunk, seed,
                    order_table=None, cs_kinds=("eb",)):
        rec["compile"].append(dict(policy=policy, data=data, params=params, K=K, n=n,
                                   budgets=budgets, b=b, reps=reps_, chunk=chunk, seed=seed,
                                   order_table=order_table, cs_kinds=cs_kinds))
        rnd = [0]

        def run():
            sec = _jax_sec(policy, b, order_table, cs_kinds, rnd[0])
            rnd[0] += 1
            return sec, reps_ * budgets[-1], reps_

        return 1.5, run

    def pulse(S, orders, budgets, V, c, u_mean, rho, a=None):
        tick("pulse" if a is None else "pulse_ucb", S=S, orders=orders, budgets=budgets,
             V=V, c=c, u_mean=u_mean, rho=rho, a=a)

    def ucbe(S, orders, budgets, a):
        tick("ucbe", S=S, orders=orders, budgets=budgets, a=a)

    def be(S, budgets, *, a, batch_size, seed):
        tick(f"be{batch_size}", S=S, budgets=budgets, a=a, seed=seed)

    monkeypatch.setattr(bs, "speed_problem", lambda *a, **kw: prob)
    monkeypatch.setattr(bs, "_compile_jax", compile_jax)
    monkeypatch.setattr(bs.ref, "pulse", pulse)
    monkeypatch.setattr(bs.ref, "ucbe", ucbe)
    monkeypatch.setattr(bs, "have_banditeval", lambda: True)
    monkeypatch.setattr(bs, "banditeval_ucbe", be)
    monkeypatch.setitem(sys.modules, "torch",
                        types.SimpleNamespace(set_num_threads=lambda k: None))
    monkeypatch.setattr(bs, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    return prob, rec, reps


def _speed_main(tmp_path, speed_fakes, *extra, np_reps=2, be=2, be1=3):
    prob, rec, reps = speed_fakes
    reps.update(pulse=np_reps, pulse_ucb=np_reps, ucbe=np_reps, be32=be,
                be1=be if be1 is None else be1)
    out = tmp_path / "speed.json"
    argv = ["--K", str(_K), "--reps", "8", "--chunk", "4", "--np-reps", str(np_reps),
            "--be-reps", str(be), "--out", str(out), "--seed", "2", *extra]
    if be1 is not None:
        argv += ["--be-reps-b1", str(be1)]
    assert bs.main(argv) == 0
    return json.loads(out.read_text())


def _rps(name):
    """Replicates per second per round of every implementation, from the fakes."""
    jax_names = {"jaxeval PULSE (b=1)": ("pulse", 1, None, ("eb",)),
                 "jaxeval PULSE (b=1, regen.)": ("pulse", 1, False, ("eb",)),
                 "jaxeval pulse_ucb (b=1)": ("pulse_ucb", 1, None, ("eb",))}
    for b in (1, 32):
        jax_names[f"jaxeval UCB-E (b={b})"] = ("ucbe", b, None, ("eb",))
        jax_names[f"jaxeval UCB-E (b={b}, no int.)"] = ("ucbe", b, None, ())
        jax_names[f"jaxeval UCB-E (b={b}, regen.)"] = ("ucbe", b, False, ("eb",))
    if name in jax_names:
        return np.array([8 / _jax_sec(*jax_names[name], r) for r in range(3)])
    key, reps = {"NumPy PULSE (b=1)": ("pulse", 2), "NumPy pulse_ucb (b=1)": ("pulse_ucb", 2),
                 "NumPy UCB-E (b=1)": ("ucbe", 2), "banditeval UCB-E (b=32)": ("be32", 2),
                 "banditeval UCB-E (b=1)": ("be1", 3)}[name]
    return reps / np.array(_LOOP_SEC[key])


def test_speed_rows_are_medians_over_rounds_in_reps_and_calls(speed_fakes, tmp_path):
    doc = _speed_main(tmp_path, speed_fakes)
    assert doc["n"] == _NI and doc["budgets"] == list(_B)
    rows = {r["name"]: r for r in doc["rows"]}
    assert set(rows) == {
        "jaxeval PULSE (b=1)", "NumPy PULSE (b=1)", "jaxeval pulse_ucb (b=1)",
        "NumPy pulse_ucb (b=1)", "jaxeval UCB-E (b=1)", "jaxeval UCB-E (b=1, no int.)",
        "jaxeval UCB-E (b=32)", "jaxeval UCB-E (b=32, no int.)", "NumPy UCB-E (b=1)",
        "banditeval UCB-E (b=32)", "banditeval UCB-E (b=1)"}
    for name, r in rows.items():
        want = _rps(name)
        assert r["reps_per_s_rounds"] == pytest.approx(want.tolist())
        assert r["reps_per_s"] == pytest.approx(np.median(want))
        assert r["calls_per_s"] == pytest.approx(np.median(want) * _B[-1])
        assert r["compile_s"] == (1.5 if name.startswith("jaxeval") else None)


def test_speed_ratios_are_medians_of_the_rounds_ratios(speed_fakes, tmp_path):
    doc = _speed_main(tmp_path, speed_fakes, "--regenerated")

    def ratio(a, b):
        return float(np.median(_rps(a) / _rps(b)))

    want = {
        "PULSE jaxeval / NumPy": ratio("jaxeval PULSE (b=1)", "NumPy PULSE (b=1)"),
        "pulse_ucb jaxeval / NumPy": ratio("jaxeval pulse_ucb (b=1)", "NumPy pulse_ucb (b=1)"),
        "UCB-E jaxeval / NumPy (b=1)": ratio("jaxeval UCB-E (b=1)", "NumPy UCB-E (b=1)"),
        "UCB-E no interval jaxeval / NumPy (b=1)": ratio("jaxeval UCB-E (b=1, no int.)",
                                                         "NumPy UCB-E (b=1)"),
        "PULSE order table / regenerated": ratio("jaxeval PULSE (b=1)",
                                                 "jaxeval PULSE (b=1, regen.)"),
    }
    for b in (32, 1):
        want[f"UCB-E jaxeval / banditeval (b={b})"] = ratio(
            f"jaxeval UCB-E (b={b})", f"banditeval UCB-E (b={b})")
        want[f"UCB-E no interval jaxeval / banditeval (b={b})"] = ratio(
            f"jaxeval UCB-E (b={b}, no int.)", f"banditeval UCB-E (b={b})")
        want[f"UCB-E order table / regenerated (b={b})"] = ratio(
            f"jaxeval UCB-E (b={b})", f"jaxeval UCB-E (b={b}, regen.)")
    assert doc["ratios"] == pytest.approx(want)
    # the median of the ratios, not the ratio of the medians, on these rounds
    assert want["PULSE jaxeval / NumPy"] != pytest.approx(
        np.median(_rps("jaxeval PULSE (b=1)")) / np.median(_rps("NumPy PULSE (b=1)")))


def test_speed_both_sides_get_the_same_problem(speed_fakes, tmp_path):
    """Every kernel compiles the shared problem (its data, params, K, n, budgets, seed);
    the no-interval rows drop the interval and nothing else; the NumPy and banditeval
    loops run candidate sets of the problem with the kernel's own settings (a = 1, the
    fitted factors, K item orders of n per replicate)."""
    prob, rec, _ = speed_fakes
    _speed_main(tmp_path, speed_fakes)
    comp = {(c["policy"], c["b"], c["cs_kinds"]) for c in rec["compile"]}
    assert comp == {("pulse", 1, ("eb",)), ("pulse_ucb", 1, ("eb",)), ("ucbe", 1, ("eb",)),
                    ("ucbe", 1, ()), ("ucbe", 32, ("eb",)), ("ucbe", 32, ())}
    for c in rec["compile"]:
        assert (c["data"], c["params"], c["K"], c["n"], c["budgets"], c["seed"]) == (
            "DATA", "PARAMS", _K, _NI, _B, 2)
        assert (c["reps"], c["chunk"], c["order_table"]) == (8, 4, None)
    rows = {tuple(r) for r in prob.pool_scores.tolist()}
    by = {}
    for c in rec["loop"]:
        by.setdefault(c["key"], []).append(c)
        assert c["budgets"] == _B
        assert c["S"].shape == (_K, _NI) and {tuple(r) for r in c["S"].tolist()} <= rows
        if "orders" in c:
            assert c["orders"].shape == (_K, _NI)
            assert all(sorted(o) == list(range(_NI)) for o in c["orders"].tolist())
        if c["key"] != "pulse":
            assert c["a"] == 1.0
        if c["key"].startswith("pulse"):
            assert c["rho"] == 2.0 and c["V"] is prob.V and c["u_mean"] is prob.u_mean
    assert by["pulse"][0]["a"] is None  # PULSE's own index, pulse_ucb's a = 1
    # a round runs --np-reps / --be-reps / --be-reps-b1 replicates, three rounds
    assert {k: len(v) for k, v in by.items()} == {
        "pulse": 6, "pulse_ucb": 6, "ucbe": 6, "be32": 6, "be1": 9}
    # replicate r of the NumPy loops plays candidate set r mod 10
    first = [c["S"] for c in by["ucbe"][:2]]
    for r in range(2):
        np.testing.assert_array_equal(first[r], prob.pool_scores[prob.instances[r]])


def test_speed_be_reps_b1_defaults_to_be_reps(speed_fakes, tmp_path):
    _, rec, _ = speed_fakes
    _speed_main(tmp_path, speed_fakes, be=3, be1=None)
    assert sum(c["key"] == "be1" for c in rec["loop"]) == 9


def test_speed_refuses_a_kernel_run_that_spent_other_calls(speed_fakes, tmp_path,
                                                           monkeypatch):
    """The check that the kernel did the same work: every replicate spends the budget."""
    real = bs._compile_jax

    def short(*a, **kw):
        tc, run = real(*a, **kw)

        def run2():
            sec, calls, reps = run()
            return sec, calls - 1, reps

        return tc, run2

    monkeypatch.setattr(bs, "_compile_jax", short)
    with pytest.raises(AssertionError):
        _speed_main(tmp_path, speed_fakes)


def test_compile_jax_runs_reps_in_whole_chunks_and_counts_the_calls_spent():
    """The real kernel: ``reps`` rounded up to whole chunks, a chunk never larger than
    ``reps``, and every replicate spends the last budget."""
    p = sp.speed_problem("ifeval", K=2, max_frac=0.01, fit=False)
    for chunk, want in ((2, 4), (8, 3)):
        tc, run = bs._compile_jax("ucbe", p.data, p.params, p.K, p.n, p.budgets, 1, 3,
                                  chunk, 0)
        sec, calls, reps = run()
        assert tc > 0 and sec > 0
        assert reps == want and calls == want * p.budgets[-1]


def test_speed_problem_uses_the_fitted_prior_strength(monkeypatch):
    def fit(train, *, rank, **kw):
        n = train.n_items
        return types.SimpleNamespace(V=np.zeros((n, rank)), c=np.zeros(n),
                                     u_mean=np.zeros(rank), rho_u=2.5)

    monkeypatch.setattr(jaxeval, "fit_factorization", fit)
    p = sp.speed_problem("ifeval", K=3, max_frac=0.01, rank=2)
    assert p.rho == 2.5 and float(p.params.rho) == 2.5
    assert float(p.params.a) == 1.0


@pytest.mark.parametrize("script, argv, named", [
    ("speed", ["--reps", "0"], "--reps"),
    ("speed", ["--np-reps", "0"], "--np-reps"),
    ("speed", ["--rounds", "0"], "--rounds"),
    ("speed", ["--be-reps-b1", "0"], "--be-reps-b1"),
    ("speed", ["--max-frac", "0"], "--max-frac"),
    ("speed", ["--max-frac", "0.003"], "--max-frac: 0.003 leaves no"),
    ("memory", ["--item-block", "-5"], "--item-block"),
    ("memory", ["--R", "0"], "--R"),
    ("quality", ["--fracs", "0.2", "1.5"], "--fracs"),
    ("quality", ["--top", "0"], "--top"),
])
def test_benchmark_scripts_refuse_bad_arguments_by_name(script, argv, named, capsys,
                                                       monkeypatch):
    """A count of zero (rates and medians of nothing), a negative block size (read as
    whole rows) or a share outside (0, 1) is an argparse error naming the option, before
    any work (the first step of the work is replaced by one that fails at once)."""

    def work(*a, **k):
        raise RuntimeError("the work started")

    monkeypatch.setattr(bs, "speed_problem", work)
    monkeypatch.setattr(idn, "dummy_data", work)
    monkeypatch.setattr(jaxeval, "load", work)
    main = {"speed": bs.main, "memory": bm.main, "quality": bpq.main}[script]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert f"error: {named}" in capsys.readouterr().err


def test_speed_problem_refuses_a_candidate_set_larger_than_the_pool(monkeypatch):
    """``K`` beyond the report pool names ``K`` and the pool's size (not NumPy's "larger
    sample than population")."""
    monkeypatch.setattr(jaxeval, "load", lambda path: _top2_sm())
    with pytest.raises(ValueError, match=r"^K: a candidate set of 'ifeval' holds 2 to 3 "
                                         r"models \(its report pool\), got 4$"):
        sp.speed_problem("ifeval", K=4, fit=False)
