"""Gaps found by a mutation review of the benchmark scripts ``benchmarks/bench_campaign.py``
(what a campaign adds per request; restore against replay), ``bench_runner.py`` (the
replicate runner's throughput and memory per chunk), ``bench_metrics.py`` (the JAX
metrics and generator against NumPy/SciPy loops) and ``bench_skip_separated.py`` (the
confident stop with and without ``skip_separated``).

Timings are not asserted. The campaign, the runner's plan, the simulations and the timed
loops are replaced by fakes that record what they are handed; fake clocks advance by
fixed amounts, so every figure (medians, ratios, rates, the memory fit) follows from the
inputs."""

from __future__ import annotations

import json
import math
import os
import runpy
import sys
import time
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from test_bench_speed_top2_mutants import bt

import jaxeval
from jaxeval import _identification as idn
from jaxeval import _runner
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS

_BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(_BENCH))
import bench_campaign as bc  # noqa: E402
import bench_metrics as bmx  # noqa: E402
import bench_skip_separated as bss  # noqa: E402


class _Clock:
    """A ``perf_counter`` that moves only when the fakes say so."""

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t

    def tick(self, dt):
        self.t += dt


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


# ============================================================ bench_campaign

# 5 candidate-like rows of 6 items with distinct scores, so a row taken from the wrong
# model or items shows
_CAND = np.arange(30, dtype=np.float32).reshape(5, 6) / 30
# the first request takes 2 s (compilation), the later ones 1 ... 5 ms
_LATER_MS = [1.0, 2.0, 3.0, 4.0, 5.0]
# the three loads of each kind; the fastest is reported
_LOADS = {False: [0.3, 0.1, 0.2], True: [0.9, 0.6, 0.8]}


@pytest.fixture
def campaign(monkeypatch):
    """``IdentificationCampaign`` replaced by a fake that records what it is handed and
    advances a fake clock: construction 0.25 s, requests as above, save 0.03 s."""
    clock = _Clock()
    monkeypatch.setattr(bc, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    rec = types.SimpleNamespace(made=[], loads=[], asks=0, told=[], limit=None, lie=False)

    class Fake:
        def __init__(self, models, hist, **kw):
            rec.made.append(dict(kw, models=list(models), hist=hist))
            self._calls = 0
            self._n = 0
            rec.camp = self
            clock.tick(0.25)

        @property
        def calls(self):
            return self._calls

        def ask(self):
            rec.asks += 1
            if rec.limit is not None and self._n >= rec.limit:
                return None
            clock.tick(2.0 if self._n == 0 else _LATER_MS[(self._n - 1) % 5] / 1e3)
            b = rec.made[-1]["batch_size"]
            model = rec.made[-1]["models"][self._n % 5]
            items = [(self._n + j) % 6 for j in range(b)]
            self._n += 1
            return types.SimpleNamespace(model=model, items=items)

        def tell(self, req, scores):
            rec.told.append((req.model, list(req.items), np.asarray(scores)))
            self._calls += len(req.items)

        def status(self):
            return types.SimpleNamespace(calls=self._calls)

        def save(self, path):
            clock.tick(0.03)
            rec.saved = Path(path)
            Path(path).write_bytes(b"x")

        @classmethod
        def load(cls, path, replay=False):
            n = sum(r == replay for _, r in rec.loads)
            rec.loads.append((Path(path), replay))
            clock.tick(_LOADS[replay][n % 3])
            calls = rec.camp.calls + (1 if rec.lie and replay else 0)
            return types.SimpleNamespace(calls=calls)

    monkeypatch.setattr(jaxeval, "IdentificationCampaign", Fake)
    return rec


def _cands():
    return jaxeval.ScoreMatrix(_CAND, models=[f"c{i}" for i in range(5)])


def test_campaign_run_builds_one_campaign_per_row_and_answers_from_the_oracle(campaign):
    """Candidates are the held-out models; factors only for prediction policies; no
    confident stop (every request is timed); each answer is the known matrix's cells."""
    cands = _cands()
    bc._run("H", cands, "LR", "ucbe", 2, 6, 7)
    bc._run("H", cands, "LR", "pulse_ucb", 1, 3, 8)
    a, b = campaign.made
    assert a == dict(models=list(cands.models), hist="H", policy="ucbe", batch_size=2, seed=7,
                     factors=None, stop_when_confident=False)
    assert b["factors"] == "LR" and b["policy"] == "pulse_ucb" and b["batch_size"] == 1
    assert b["seed"] == 8
    assert len(campaign.told) == 6 + 3
    for model, items, scores in campaign.told:
        row = list(cands.models).index(model)
        np.testing.assert_array_equal(scores, _CAND[row, items])


def test_campaign_run_figures_first_request_median_p90_and_the_fastest_loads(campaign):
    cands = _cands()
    r = bc._run("H", cands, "LR", "ucbe", 2, 6, 0)
    assert r["policy"] == "ucbe" and r["batch_size"] == 2
    assert r["requests"] == 6 and r["calls"] == 12
    assert r["construct_s"] == pytest.approx(0.25)
    assert r["first_request_s"] == pytest.approx(2.0)
    # later requests 1 ... 5 ms: median 3, 90th percentile 4.6 (linear interpolation)
    assert r["later_median_ms"] == pytest.approx(3.0)
    assert r["later_p90_ms"] == pytest.approx(4.6)
    assert r["save_s"] == pytest.approx(0.03)
    assert r["load_s"] == pytest.approx(0.1) and r["load_replay_s"] == pytest.approx(0.6)
    assert r["load_replay_ms_per_request"] == pytest.approx(100.0)
    assert r["replay_over_restore"] == pytest.approx(6.0)
    # three loads each way, alternating, from the file just saved
    assert [rp for _, rp in campaign.loads] == [False, True] * 3
    assert {p for p, _ in campaign.loads} == {campaign.saved}


def test_campaign_run_stops_asking_when_the_campaign_is_done(campaign):
    campaign.limit = 4
    r = bc._run("H", _cands(), "LR", "ucbe", 1, 10, 0)
    assert r["requests"] == 4 and r["calls"] == 4 and campaign.asks == 5
    assert r["load_replay_ms_per_request"] == pytest.approx(1e3 * 0.6 / 4)


def test_campaign_run_checks_both_loads_restore_the_calls(campaign):
    campaign.lie = True
    with pytest.raises(RuntimeError, match=r"load\(replay=True\)"):
        bc._run("H", _cands(), "LR", "ucbe", 1, 3, 0)


@pytest.fixture
def campaign_main(monkeypatch):
    """``load`` answers 9 rows of which two repeat earlier ones (7 distinct models); the
    fit and ``_run`` are fakes that record their arguments."""
    g = np.random.default_rng(0)
    S = (g.random((9, 12)) < 0.5).astype(np.float32)
    S[7], S[8] = S[1], S[4]
    sm = jaxeval.ScoreMatrix(S, models=[f"m{i}" for i in range(9)])
    rec = {"load": [], "fit": [], "run": []}

    def load(name):
        rec["load"].append(name)
        return sm

    def fit(hist, **kw):
        rec["fit"].append(dict(kw, hist=hist))
        return "LR"

    def run(hist, cands, lr, policy, b, requests, seed):
        rec["run"].append(dict(hist=hist, cands=cands, lr=lr, policy=policy, b=b,
                               requests=requests, seed=seed))
        return dict(policy=policy, batch_size=b, requests=requests, first_request_s=1.0,
                    later_median_ms=2.0, later_p90_ms=3.0, save_s=0.1, load_s=0.5,
                    load_replay_s=1.0, replay_over_restore=2.0)

    monkeypatch.setattr(jaxeval, "load", load)
    monkeypatch.setattr(jaxeval, "fit_factorization", fit)
    monkeypatch.setattr(bc, "_run", run)
    return rec


def test_campaign_main_holds_out_K_distinct_models_and_runs_every_policy_and_batch(
        campaign_main, tmp_path):
    out = tmp_path / "c.json"
    bc.main(["--dataset", "arc", "--K", "3", "--requests", "5", "--policies", "ucbe",
             "pulse_ucb", "--batch-sizes", "1", "4", "--seed", "2", "--out", str(out)])
    assert campaign_main["load"] == ["arc"]
    (fit,) = campaign_main["fit"]
    assert fit["seed"] == 2 and fit["hist"].n_models == 4
    runs = campaign_main["run"]
    assert [(r["policy"], r["b"]) for r in runs] == [("ucbe", 1), ("ucbe", 4),
                                                    ("pulse_ucb", 1), ("pulse_ucb", 4)]
    for r in runs:
        assert r["hist"] is fit["hist"] and r["lr"] == "LR"
        assert r["cands"].n_models == 3 and r["requests"] == 5 and r["seed"] == 2
        names = set(r["hist"].models) | set(r["cands"].models)
        assert len(names) == 7 and not {"m7", "m8"} & names  # duplicates dropped
        assert not set(r["hist"].models) & set(r["cands"].models)
    doc = json.loads(out.read_text())
    assert doc["dataset"] == "arc" and doc["K"] == 3 and doc["n_items"] == 12
    assert [(r["policy"], r["batch_size"]) for r in doc["rows"]] == [
        (r["policy"], r["b"]) for r in runs]
    assert doc["jax"] == jax.__version__ and "factorization_fit_s" in doc


def test_campaign_main_defaults(campaign_main, tmp_path):
    bc.main(["--K", "2"])
    assert campaign_main["load"] == ["oll2_ifeval"]
    runs = campaign_main["run"]
    assert [(r["policy"], r["b"]) for r in runs] == [("ucbe", 1), ("ucbe", 8),
                                                    ("pulse_ucb", 1), ("pulse_ucb", 8)]
    assert {(r["requests"], r["seed"]) for r in runs} == {(300, 0)}
    assert not list(tmp_path.iterdir())


def test_campaign_main_argument_errors_name_the_argument(campaign_main, capsys):
    with pytest.raises(SystemExit):
        bc.main(["--K", "2", "--requests", "1"])
    assert "--requests" in capsys.readouterr().err
    bc.main(["--K", "2", "--requests", "2", "--policies", "ucbe", "--batch-sizes", "1"])
    assert len(campaign_main["run"]) == 1
    # 7 distinct models: K = 7 leaves no history, K = 6 leaves one
    with pytest.raises(SystemExit):
        bc.main(["--K", "7"])
    err = capsys.readouterr().err
    assert "--K" in err and "7 distinct models" in err
    with pytest.raises(SystemExit):
        bc.main(["--K", "8"])
    err = capsys.readouterr().err
    assert "--K" in err and "7 distinct models" in err
    bc.main(["--K", "6", "--policies", "ucbe", "--batch-sizes", "1"])
    assert campaign_main["run"][-1]["hist"].n_models == 1
    # fewer than 2 candidates: named (was a bare unpacking error or a split message)
    for k in ("1", "0", "-3"):
        with pytest.raises(SystemExit):
            bc.main(["--K", k])
        assert (f"--K: oll2_ifeval has 7 distinct models: K must lie in [2, 6] (at least "
                f"one stays history), got {k}") in capsys.readouterr().err


# ============================================================ bench_runner

_MEM_TEMP, _MEM_ARG, _MEM_OUT = (1000, 100), 50, 10  # temp = 1000 + 100 c, out = 10 c


@pytest.fixture
def runner(monkeypatch):
    """``ReplicatePlan`` replaced by a fake (chunk rounded up to whole lanes per device as
    the real one does); its compiled program's memory is ``temp = 1000 + 100 c``,
    ``arguments = 50``, ``outputs = 10 c`` bytes; one replicate's outputs are 3 float32
    and 1 int32 (16 bytes). A chunk call takes ``c / (1000 d)`` s on ``d`` devices with
    the third timed chunk 4x slower (the median ignores it); the warm-up 100 s."""
    clock = _Clock()
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    monkeypatch.setenv("JAX_PLATFORMS", os.environ.get("JAX_PLATFORMS", "cpu"))
    rec = types.SimpleNamespace(plans=[], configs=[])
    real_config = idn.Config

    def config(*a, **kw):
        rec.configs.append((a, kw))
        return real_config(*a, **kw)

    monkeypatch.setattr(idn, "Config", config)

    class Compiled:
        def __init__(self, plan):
            self.plan = plan

        def memory_analysis(self):
            c = self.plan.chunk_size
            return types.SimpleNamespace(temp_size_in_bytes=_MEM_TEMP[0] + _MEM_TEMP[1] * c,
                                         argument_size_in_bytes=_MEM_ARG,
                                         output_size_in_bytes=_MEM_OUT * c)

        def __call__(self, key, idx, *ops):
            p = self.plan
            p.calls.append((key, np.asarray(idx[0]), ops))
            n = len(p.calls)
            base = p.chunk_size / (1000 * p.n_dev)
            clock.tick(100.0 if n == 1 else base * (4 if n == 4 else 1))
            return {"x": np.zeros(p.chunk_size)}

    class Fn:
        def __init__(self, plan):
            self.plan = plan

        def lower(self, key, idx, *ops):
            self.plan.lowered = (key, np.asarray(idx[0]), idx[1], ops)
            return types.SimpleNamespace(compile=self.compile)

        def compile(self):
            clock.tick(1.5)
            return Compiled(self.plan)

    class Plan:
        def __init__(self, fn, chunk_size, *, devices, operands, lanes):
            self.fn, self.n_dev, self.operands, self.lanes = fn, len(devices), operands, lanes
            step = self.n_dev * lanes
            self.chunk_size = -(-chunk_size // step) * lanes * self.n_dev
            self.asked = chunk_size
            self._rep, self._split = "REP", "SPLIT"
            self._fn = Fn(self)
            self.calls = []
            self.out_shapes = {"a": jax.ShapeDtypeStruct((3,), np.float32),
                               "b": jax.ShapeDtypeStruct((), np.int32)}
            rec.plans.append(self)

        def _global(self, x, sharding):
            return (np.array(x), sharding)

    monkeypatch.setattr(_runner, "ReplicatePlan", Plan)
    return rec


def _run_runner(monkeypatch, tmp_path, *argv):
    out = tmp_path / "runner.json"
    monkeypatch.setattr(sys, "argv", ["bench_runner.py", "--arms", "2", "--items", "10",
                                      "--lanes", "8", *argv, "--json", str(out)])
    g = runpy.run_path(str(_BENCH / "bench_runner.py"), run_name="__main__")
    return json.loads(out.read_text()), g


def test_runner_configures_the_kernel_on_the_checkpoint_grid(runner, monkeypatch, tmp_path):
    """UCB-E on synthetic truth, K arms of n items, budgets the default fractions of K n
    in calls (at least 1, no repeats, sorted); fake devices as many as the sweep's most."""
    _run_runner(monkeypatch, tmp_path, "--chunks", "16", "--devices", "1", "2",
                "--device-chunk", "16", "--memory-only")
    (a, kw), = runner.configs
    want = tuple(sorted({max(1, round(f * 20)) for f in DEFAULT_BUDGET_FRACTIONS}))
    assert want[0] == 1 and want[-1] == 20 and 0 not in want
    assert a == ("ucbe",) and kw == dict(num_arms=2, num_items=10, budgets=want,
                                         truth="synthetic")
    assert "--xla_force_host_platform_device_count=2" in os.environ["XLA_FLAGS"].split()


def test_runner_rows_time_fresh_chunks_after_a_warm_up_and_report_rates(
        runner, monkeypatch, tmp_path, capsys):
    doc, _ = _run_runner(monkeypatch, tmp_path, "--chunks", "12", "32", "--devices", "1", "2",
                         "--device-chunk", "32", "--reps", "3")
    # chunks round up to whole lanes: 12 -> 16; the device sweep reuses the 1-device
    # chunk-32 row and measures 2 devices once
    compiled = [p for p in runner.plans if hasattr(p, "lowered")]
    assert [(p.asked, p.n_dev) for p in compiled] == [(12, 1), (32, 1), (32, 2)]
    c16, c32 = doc["by_chunk"]
    assert (c16["chunk"], c16["devices"], c32["chunk"]) == (16, 1, 32)
    assert doc["by_devices"][0] == c32
    d2 = doc["by_devices"][1]
    assert (d2["chunk"], d2["devices"]) == (32, 2)
    for row, rate in ((c16, 1000.0), (c32, 1000.0), (d2, 2000.0)):
        c = row["chunk"]
        assert row["compile_s"] == 1.5
        assert row["chunk_s"] == pytest.approx(round(c / rate, 4))
        assert row["replicates_per_s"] == pytest.approx(rate)
        assert row["llm_calls_per_s"] == pytest.approx(rate * 20)  # 20 calls a replicate
        assert row["temp_bytes"] == 1000 + 100 * c and row["argument_bytes"] == 50
        assert row["output_bytes"] == 10 * c and row["output_bytes_per_replicate"] == 16
    for p in compiled:
        c = p.chunk_size
        key, key_sharding = p.lowered[0]
        np.testing.assert_array_equal(key, jax.random.key_data(jax.random.key(0)))
        assert key_sharding == "REP" and p.lowered[2] == "SPLIT"
        np.testing.assert_array_equal(p.lowered[1], np.arange(c))
        # warm-up on the compiled chunk, then three chunks of fresh replicate indices
        assert [x[1].tolist() for x in p.calls] == [
            list(range(k * c, (k + 1) * c)) for k in range(4)]
        assert all(len(x[2]) == 2 for x in p.calls)
    out = capsys.readouterr().out
    assert "2 device(s):  2.00x the 1-device rate" in out
    # two chunk sizes: the line through both, 1050 + 110 c bytes
    assert doc["fit_fixed_bytes"] == pytest.approx(1050)
    assert doc["fit_bytes_per_replicate"] == pytest.approx(110)


def test_runner_memory_fit_largest_chunk_and_study_outputs(runner, monkeypatch, tmp_path):
    """bytes = fixed + per replicate * chunk over the 1-device sweep: 1050 + 110 c; the
    largest chunk within the budget; a study's outputs are R replicates' outputs."""
    doc, _ = _run_runner(monkeypatch, tmp_path, "--chunks", "16", "32", "64", "--devices", "1",
                         "--device-chunk", "16", "--memory-gib", "0.001",
                         "--study-replicates", "1000")
    assert doc["fit_fixed_bytes"] == pytest.approx(1050)
    assert doc["fit_bytes_per_replicate"] == pytest.approx(110)
    assert doc["largest_chunk"] == int((0.001 * 2**30 - 1050) / 110)
    assert doc["study_output_bytes"] == 16 * 1000
    assert doc["argv"][-2:] == ["--json", str(tmp_path / "runner.json")]


def test_runner_one_chunk_fits_through_the_origin(runner, monkeypatch, tmp_path):
    doc, _ = _run_runner(monkeypatch, tmp_path, "--chunks", "16", "--devices", "1",
                         "--device-chunk", "16", "--memory-gib", "0.001")
    assert doc["fit_fixed_bytes"] == 0.0
    assert doc["fit_bytes_per_replicate"] == pytest.approx((1050 + 110 * 16) / 16)


def test_runner_memory_only_compiles_without_running(runner, monkeypatch, tmp_path):
    doc, _ = _run_runner(monkeypatch, tmp_path, "--chunks", "16", "32", "--devices", "1", "8",
                         "--memory-only")
    assert [p.n_dev for p in runner.plans if hasattr(p, "lowered")] == [1, 1]
    assert all(p.calls == [] for p in runner.plans)
    assert doc["by_devices"] == []
    for row in doc["by_chunk"]:
        assert row["replicates_per_s"] is None and row["llm_calls_per_s"] is None
        assert math.isnan(row["chunk_s"])
        assert row["temp_bytes"] == 1000 + 100 * row["chunk"]


# ============================================================ bench_metrics


def test_metrics_best_of_is_the_fastest_of_repeat_calls(monkeypatch):
    ticks = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0, 30.0, 30.5])
    monkeypatch.setattr(bmx, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    n = []
    assert bmx._best_of(lambda: n.append(1)) == 1.0
    assert len(n) == 3
    assert bmx._best_of(lambda: n.append(1), repeat=1) == 0.5
    assert len(n) == 4


def test_metrics_both_sides_do_the_same_work_and_ratios_divide_by_jax(monkeypatch, capsys):
    """The JAX and SciPy sides rank the same (pred, true) pairs; the generator and the
    NumPy loop both build R matrices of 50 x items; ratios are loop time / JAX time."""
    done = []
    times = iter([0.002, 0.010, 0.004, 0.1])

    def best_of(fn, repeat=3):
        done.append(fn())
        return next(times)

    seeds = []
    real_rng = np.random.default_rng

    class Rng:
        def __init__(self, seed):
            self.g = real_rng(seed)
            seeds.append(seed)
            self.shapes = []

        def random(self, size):
            seeds.append(("random", size))
            return self.g.random(size)

        def __getattr__(self, name):
            return getattr(self.g, name)

    monkeypatch.setattr(bmx, "_best_of", best_of)
    monkeypatch.setattr(np.random, "default_rng", Rng)
    monkeypatch.setattr(sys, "argv", ["bench_metrics.py", "--replicates", "3", "--n", "8",
                                      "--items", "20"])
    bmx.main()
    tau, scipy_taus, gen, _ = done
    tau = np.asarray(tau)
    assert tau.shape == (3,)
    np.testing.assert_allclose(tau, [t.statistic for t in scipy_taus], atol=1e-5)
    assert np.asarray(gen).shape == (3, 50, 20)
    assert seeds[0] == 0 and seeds[1:] == [x for i in range(3) for x in (i, ("random",
                                                                            (50, 20)))]
    out = capsys.readouterr().out
    assert "ratio scipy/jax = 5.0x" in out and "jax 2.0 ms" in out
    assert "scipy loop 10.0 ms" in out
    assert "ratio numpy/jax = 25.0x" in out and "jax 4.0 ms" in out
    assert "3 replicates x n=8" in out and "3 replicates of 50x20" in out


def test_metrics_the_data_has_ties_and_replicates_rows(monkeypatch):
    """The pairs ranked: R rows of n models, scores on a 1/100 grid (ties), the
    prediction the truth plus noise."""
    done = []

    def best_of(fn, repeat=3):
        done.append(fn())
        return 1.0

    monkeypatch.setattr(bmx, "_best_of", best_of)
    seen = []
    real = bmx.stats.kendalltau

    def tau(a, b):
        seen.append((np.asarray(a), np.asarray(b)))
        return real(a, b)

    monkeypatch.setattr(bmx.stats, "kendalltau", tau)
    monkeypatch.setattr(sys, "argv", ["bench_metrics.py", "--replicates", "2", "--n", "30",
                                      "--items", "10"])
    bmx.main()
    assert len(seen) == 2
    pred, true = np.stack([a for a, _ in seen]), np.stack([b for _, b in seen])
    assert pred.shape == true.shape == (2, 30)
    np.testing.assert_allclose(true * 100, np.round(true * 100), atol=1e-4)
    assert len(np.unique(true[0])) < 30  # ties
    assert 0.005 < np.abs(pred - true).mean() < 0.1


# ============================================================ bench_skip_separated

# K = 4 arms of n = 10 items (K n = 40), R = 4 replicates, 3 checkpoints: calls at the
# last checkpoint (the earlier ones differ, so the wrong column shows)
_SS_CALLS = {False: [10, 20, 40, 30], True: [8, 8, 20, 40]}
_SS_THETA = np.array([[0.9, 0.5, 0.1, 0.2], [0.3, 0.7, 0.7 - 1e-12, 0.1],
                      [0.6, 0.2, 0.1, 0.5], [0.4, 0.4, 0.1, 0.8]])
# last recommendation: right, a tie within 1e-9 (right), right, wrong (0.4 < 0.8); the
# earlier checkpoints recommend arm 3 (wrong except in replicate 3)
_SS_REC = {False: [0, 2, 0, 0], True: [0, 1, 0, 3]}


@pytest.fixture
def skipsim(monkeypatch):
    rec = {"sim": [], "factors": [], "load": []}
    sm = jaxeval.ScoreMatrix(np.zeros((6, 10), np.float32))

    def fake(data, policy, **kw):
        rec["sim"].append(dict(kw, policy=policy, data=data))
        skip = kw["skip_separated"]
        calls = np.zeros((4, 3), np.int64)
        calls[:, -1] = _SS_CALLS[skip]
        calls[:, :-1] = 1
        recd = np.full((4, 3), 3)
        recd[:, -1] = _SS_REC[skip]
        sc = np.zeros((3, 4), np.int64)
        sc[:-1, idn.STATUS_CONFIDENT] = 4
        sc[-1] = [1, 3, 0, 0] if skip else [3, 1, 0, 0]
        return types.SimpleNamespace(calls=calls, settings=dict(n_items=10, K=kw["K"]),
                                     recommended=recd, theta=_SS_THETA, status_counts=sc)

    def load(name):
        rec["load"].append(name)
        return sm

    def factors(s, seed, rank):
        rec["factors"].append((s, seed, rank))
        return "F"

    monkeypatch.setattr(jaxeval, "simulate_identification", fake)
    monkeypatch.setattr(bt, "load", load)
    monkeypatch.setattr(bt, "_factors", factors)
    rec["sm"] = sm
    return rec


def _skip_main(tmp_path, *argv):
    out = tmp_path / "skip.json"
    bss.main(["--datasets", "arc", "--K", "4", "--reps", "4", "--out", str(out), *argv])
    return json.loads(out.read_text())


def test_skip_separated_both_runs_play_the_same_instances(skipsim, tmp_path):
    _skip_main(tmp_path, "--policies", "ucbe", "pulse_ucb", "--batch", "3", "--alpha", "0.1",
               "--seed", "5", "--instances", "7")
    sims = skipsim["sim"]
    assert [(c["policy"], c["skip_separated"]) for c in sims] == [
        ("ucbe", False), ("ucbe", True), ("pulse_ucb", False), ("pulse_ucb", True)]
    # the factors are fitted once per dataset when any policy predicts
    assert skipsim["factors"] == [(skipsim["sm"], 5, 8)]
    for c in sims:
        assert c["data"] is skipsim["sm"] and c["K"] == 4 and c["mode"] == "confidence"
        assert c["n_replicates"] == 4 and c["n_instances"] == 7 and c["seed"] == 5
        assert c["batch_size"] == 3 and c["alpha"] == 0.1 and c["cs_kinds"] == ("eb",)
        assert c["factors"] == ("F" if c["policy"] == "pulse_ucb" else None)
    assert skipsim["load"] == ["arc"]


def test_skip_separated_gives_factors_to_every_prediction_policy(skipsim, tmp_path):
    """``naive`` predicts unseen items too: it gets the fitted factors (the rule of
    bench_campaign, PREDICTION_POLICIES), not a factorization of its own per run."""
    _skip_main(tmp_path, "--policies", "naive", "ucbe")
    assert skipsim["factors"] and all(
        c["factors"] == ("F" if c["policy"] == "naive" else None) for c in skipsim["sim"])


def test_skip_separated_defaults_and_instances_by_K(skipsim, tmp_path):
    doc = _skip_main(tmp_path, "--K", "10", "11", "--policies", "ucbe")
    assert skipsim["factors"] == []  # no prediction policy, no fit
    assert [(c["K"], c["n_instances"]) for c in skipsim["sim"]] == [
        (10, 50), (10, 50), (11, 20), (11, 20)]
    c = skipsim["sim"][0]
    assert c["seed"] == 0 and c["batch_size"] == 8 and c["alpha"] == 0.05
    assert list(doc["results"]) == ["arc/K10/ucbe", "arc/K11/ucbe"]
    assert doc["args"]["K"] == [10, 11]
    skipsim["sim"].clear()
    bss.main(["--datasets", "arc", "--reps", "4", "--out", str(tmp_path / "d.json")])
    assert [(c["policy"], c["K"], c["n_instances"]) for c in skipsim["sim"][::2]] == [
        ("pulse_ucb", 10, 50), ("ucbe", 10, 50), ("pulse_ucb", 50, 20), ("ucbe", 50, 20)]


def test_skip_separated_figures_and_json(skipsim, tmp_path, capsys):
    """Calls to the stop at the last checkpoint as shares of K n; the confident share is
    the STATUS_CONFIDENT column of the last checkpoint; a final recommendation within
    1e-9 of the best arm is right; ratio on / off."""
    doc = _skip_main(tmp_path, "--policies", "ucbe")
    r = doc["results"]["arc/K4/ucbe"]
    off, on = r["off"], r["on"]
    assert off["mean"] == pytest.approx(100 / 160) and off["median"] == pytest.approx(25 / 40)
    assert on["mean"] == pytest.approx(76 / 160) and on["median"] == pytest.approx(14 / 40)
    assert r["ratio"] == pytest.approx(76 / 100)
    assert off["confident"] == 0.25 and on["confident"] == 0.75
    assert off["wrong"] == 0.25 and on["wrong"] == 0.0
    assert off["status"] == [3, 1, 0, 0] and on["status"] == [1, 3, 0, 0]
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| arc |")]
    assert _cells(line[0]) == ["arc", "4", "ucbe", "62.5% (62.5%)", "47.5% (35.0%)", "0.76",
                               "0.250 / 0.750", "0.250 / 0.000"]


def test_skip_separated_rejects_an_unknown_dataset(skipsim, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bss.main(["--datasets", "nope", "--out", str(tmp_path / "x.json")])
    assert "--datasets" in capsys.readouterr().err
    assert skipsim["sim"] == []


def test_runner_device_sweep_reuses_the_rounded_chunk_and_names_its_base(
        runner, monkeypatch, tmp_path, capsys):
    """``--device-chunk 12`` runs chunks of 16 (whole lanes): the 1-device row of the
    chunk sweep at 12 is reused, not compiled and timed again; with ``--devices 2 1``
    the ratios are to the 2-device rate, and say so."""
    _run_runner(monkeypatch, tmp_path, "--chunks", "12", "--devices", "1", "2",
                "--device-chunk", "12", "--reps", "3")
    compiled = [p for p in runner.plans if hasattr(p, "lowered")]
    assert [(p.asked, p.n_dev) for p in compiled] == [(12, 1), (12, 2)]
    runner.plans.clear()
    _run_runner(monkeypatch, tmp_path, "--chunks", "16", "--devices", "2", "1",
                "--device-chunk", "16", "--reps", "3")
    out = capsys.readouterr().out
    assert "2 device(s):  1.00x the 2-device rate" in out
    assert "1 device(s):  0.50x the 2-device rate" in out
    assert "the 1-device rate" not in out.split("device sweep")[-1]


def test_runner_memory_that_does_not_grow_still_writes_the_json(runner, monkeypatch,
                                                               tmp_path, capsys):
    """Memory falling with the chunk (a fit with no positive slope) has no largest chunk:
    said in words, and the JSON holds null (it used to stop on formatting None)."""
    monkeypatch.setattr(sys.modules[__name__], "_MEM_TEMP", (5000, -120))
    doc, _ = _run_runner(monkeypatch, tmp_path, "--chunks", "16", "32", "--memory-only")
    assert doc["largest_chunk"] is None
    assert "memory does not grow with the chunk here" in capsys.readouterr().out
