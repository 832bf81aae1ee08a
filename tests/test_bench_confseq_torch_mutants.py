"""Gaps found by a mutation review of ``benchmarks/bench_confseq.py`` (the plug-in lambda's
batches, ``main``'s checkpoints and "exact at end" column), ``benchmarks/bench_anchors_torch.py``
(argument checks, the seeds and settings both sides are handed, the round table's ratios,
the MAE summary and k-means's anchors) and ``benchmarks/speed_problem.py`` (the candidate
set size, the split, the factorization's arguments and the zero factors).

Nothing is timed and no heavy work runs: the simulations, protocols and fits are replaced
by fakes that record what they are handed and answer fixed numbers, so every expected figure
follows from the inputs. Without PyTorch, ``bench_anchors_torch`` is imported against a
stub ``torch`` module (its pure-Python parts only are tested)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import bench_confseq as bc  # noqa: E402
import speed_problem as sp  # noqa: E402
from test_bench_speed_top2_mutants import _top2_sm  # noqa: E402


def _import_anchors_torch():
    """``bench_anchors_torch`` with the real torch when installed, else against a stub
    (under a private module name; the stub is removed from ``sys.modules`` afterwards)."""
    try:
        import bench_anchors_torch
        import torch  # noqa: F401

        return bench_anchors_torch
    except ImportError:
        pass
    stub = types.ModuleType("torch")
    stub.nn = SimpleNamespace(Module=object)
    stub.__version__ = "stub"
    stub.set_num_threads = lambda n: None
    stub.get_num_threads = lambda: 1
    sys.modules["torch"] = stub
    try:
        spec = importlib.util.spec_from_file_location(
            "_bench_anchors_torch_stubbed", BENCH / "bench_anchors_torch.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        del sys.modules["torch"]
    return mod


bat = _import_anchors_torch()

# ============================================================ bench_confseq.simulate


def test_simulate_plugin_lambda_set_at_each_batch_start_and_frozen_within(monkeypatch):
    """Batches of 3: lambda is the plug-in value of the pairs seen before the batch's first
    draw, held for the whole batch. The plug-in is stubbed as 0.05 + 0.1 * (pairs seen)
    and each DR term as the lambda it was formed with, so the mean of the DR terms after
    c draws is the mean of the lambdas used so far."""
    monkeypatch.setattr(bc, "plugin_lambda",
                        lambda st, lam0, shrink=10.0: 0.05 + 0.1 * st.count.astype(jnp.float32))
    monkeypatch.setattr(bc, "dr_term", lambda so, pu, nu, s_j, p_j, lam, n: lam)
    s = jnp.array([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # theta = 0.5
    out = bc.simulate(jax.random.key(0), s, jnp.full(6, 0.5), jnp.float32(0.1),
                      jnp.float32(0.9), jnp.float32(10.0), jnp.int32(0), kinds=("hoeffding",),
                      batch=3, checkpoints=(1, 2, 3, 4, 5, 6))
    lam = np.array([0.05] * 3 + [0.35] * 3)  # 0 pairs before draw 0, 3 before draw 3
    want = np.cumsum(lam) / np.arange(1, 7) - 0.5
    np.testing.assert_allclose(np.asarray(out["est_err"])[1], want, atol=1e-6)


# ============================================================ bench_confseq.main


def _confseq_main(monkeypatch, capsys, n, *argv, fin=0.0):
    """``bench_confseq.main`` on two synthetic truth rows of ``n`` items and a stubbed
    ``simulate_many`` (every output fixed; ``final_exact_width`` = ``fin``)."""
    calls = []
    rows = np.zeros((2, n), np.float32)
    rows[0, : n // 3] = 1
    rows[1, : 2 * n // 3] = 1
    train = (np.random.default_rng(0).uniform(size=(4, n)) < 0.5).astype(np.float32)

    def many(key, s, good, alpha, lam0, shrink, quality, idx, *, kinds, batch, checkpoints,
             grid_size):
        calls.append(checkpoints)
        R, K, C = len(idx), len(kinds), len(checkpoints)
        return {"miss": np.zeros((R, K), bool), "miss_stop": np.zeros((R, K), bool),
                "width": np.full((R, K, C), 0.5, np.float32),
                "est_err": np.zeros((R, 3, C), np.float32),
                "final_width": np.zeros((R, K)), "final_exact_width": np.full((R, K), fin),
                "final_exact_err": np.zeros((R, K))}

    def no_real(name):
        raise ValueError(f"no {name} here")

    monkeypatch.setattr(bc, "simulate_many", many)
    monkeypatch.setattr(bc, "synthetic_rows", lambda seed, n_items: (train, rows))
    monkeypatch.setattr(bc, "real_rows", no_real)
    monkeypatch.setattr(sys, "argv", ["bench_confseq.py", "--replicates", "2", *argv])
    bc.main()
    return capsys.readouterr().out.splitlines(), calls


def test_confseq_main_checkpoints_are_at_least_one_term(monkeypatch, capsys):
    """With n = 9 items, 5% is round(0.45) = 0 terms: the width is taken after one term
    (a checkpoint of 0 terms would never be reached and report the initial width)."""
    lines, calls = _confseq_main(monkeypatch, capsys, 9, "--datasets", "synthetic")
    assert set(calls) == {(1, 1, 2, 4)}


@pytest.mark.parametrize("fin, want", [(bc.EXACT_WIDTH, "yes"),
                                       (np.nextafter(bc.EXACT_WIDTH, 1.0), "NO")])
def test_confseq_main_exact_at_end_accepts_the_exact_width_itself(monkeypatch, capsys, fin,
                                                                  want):
    """"exact at end" is yes when every finalized width is at most EXACT_WIDTH (the band
    of NUM_TOL on either side plus float32 rounding), the bound included."""
    lines, _ = _confseq_main(monkeypatch, capsys, 30, "--datasets", "synthetic", fin=fin)
    rows = [ln for ln in lines if ln.startswith("| synthetic | 30 |")]
    assert rows and all(ln.endswith(f" | {want} |") for ln in rows)


# ============================================================ bench_anchors_torch.main


class _Sm:
    n_models, n_items = 40, 25

    def drop_duplicates(self):
        return self

    def protocol_split(self, seed):
        return ("split", seed)


# scripted runs: jaxeval's first call (with compilation), then per round jaxeval, PyTorch
_JAX = [(10.0, 20.0), (2.0, 4.0), (4.0, 5.0)]
_TORCH = [(6.0, 12.0), (8.0, 30.0)]
_MAE_JAX = np.array([1.0, 3.0, 5.0])
_MAE_TORCH = [np.array([2.0, 2.0, 5.0]), np.array([4.0, 6.0, 8.0])]


@pytest.fixture
def torch_main(monkeypatch, capsys):
    """``bench_anchors_torch.main`` with both sides scripted; returns the output lines and
    a record of every call."""
    rec = SimpleNamespace(jax=[], torch=[], threads=[], loads=[])
    maes = list(_MAE_JAX for _ in _JAX)

    def jax_run(sm, k, seeds, st):
        i = len(rec.jax)
        rec.jax.append((sm, k, seeds, st))
        return (*_JAX[i], maes[i])

    def torch_run(sm, k, seeds, st):
        i = len(rec.torch)
        rec.torch.append((sm, k, seeds, st))
        return (*_TORCH[i], _MAE_TORCH[i])

    def load(name):
        rec.loads.append(name)
        return _Sm()

    monkeypatch.setattr(bat, "_jax_run", jax_run)
    monkeypatch.setattr(bat, "_torch_run", torch_run)
    monkeypatch.setattr(jaxeval, "load", load)
    monkeypatch.setattr(bat, "torch", SimpleNamespace(
        __version__="stub", set_num_threads=rec.threads.append, get_num_threads=lambda: 2))

    def run(*argv):
        bat.main(list(argv))
        return capsys.readouterr().out.splitlines(), rec
    run.maes, run.rec = maes, rec
    return run


_ARGV = ("--dataset", "oll2_musr", "--k", "5", "--seeds", "3", "--rounds", "2",
         "--init-steps", "7", "--proxy-steps", "11", "--final-steps", "13")


def test_anchors_torch_main_round_table_ratios(torch_main):
    """Per round: wall ratio PyTorch / jaxeval, PyTorch over jaxeval's first call (incl.
    compile), and the CPU ratio PyTorch / jaxeval of the same round."""
    lines, _ = torch_main(*_ARGV)
    i = lines.index("|---|---|---|---|---|---|---|---|")
    assert lines[i + 1:i + 3] == [
        "| 1 | 2.0 | 6.0 | 3.00x | 0.60x | 4.0 | 12.0 | 3.00x |",
        "| 2 | 4.0 | 8.0 | 2.00x | 0.80x | 5.0 | 30.0 | 6.00x |"]
    assert lines[i + 3] == ""  # one row per round


def test_anchors_torch_main_hands_both_sides_the_same_work(torch_main):
    """One jaxeval call with compilation, then per round one of each; seeds 42, 43, ...;
    the step counts of the command line in their own fields."""
    _, rec = torch_main(*_ARGV)
    assert rec.loads == ["oll2_musr"]
    assert len(rec.jax) == 3 and len(rec.torch) == 2
    for _sm, k, seeds, st in rec.jax + rec.torch:
        assert (k, seeds) == (5, (42, 43, 44))
        assert (st.init_steps, st.proxy_steps, st.final_steps) == (7, 11, 13)


def test_anchors_torch_main_mae_summary(torch_main):
    lines, _ = torch_main(*_ARGV)
    assert ("test MAE (pp), mean ± sd over seeds: jaxeval 3.00 ± 1.63; PyTorch "
            "round 1 3.00 ± 1.41, round 2 6.00 ± 1.63") in lines
    assert "per-seed MAE jaxeval: [1.0, 3.0, 5.0]" in lines
    assert lines[-2:] == ["per-seed MAE PyTorch round 1: [2.0, 2.0, 5.0]",
                          "per-seed MAE PyTorch round 2: [4.0, 6.0, 8.0]"]


def test_anchors_torch_main_refuses_a_jaxeval_that_changes_between_calls(torch_main):
    torch_main.maes[2] = _MAE_JAX + 0.5  # round 2's jaxeval call differs from the first
    with pytest.raises(AssertionError, match="not deterministic"):
        torch_main(*_ARGV)


@pytest.mark.parametrize("threads, want", [("1", [1]), ("3", [3]), ("0", [])])
def test_anchors_torch_main_sets_torch_threads_unless_zero(torch_main, threads, want):
    _, rec = torch_main(*_ARGV, "--threads", threads)
    assert rec.threads == want


@pytest.mark.parametrize("argv, err", [
    (("--seeds", "0"), "--seeds: must be at least 1, got 0"),
    (("--rounds", "0"), "--rounds: must be at least 1, got 0"),
    (("--k", "0"), "--k: must be at least 1, got 0"),
    (("--threads", "-1"), "--threads: must be at least 0 (0: torch's default), got -1"),
])
def test_anchors_torch_main_refuses_counts_below_one_before_any_work(torch_main, capsys, argv,
                                                                    err):
    """An argparse error naming the option (exit status 2, no traceback), before anything
    is loaded, run or set."""
    with pytest.raises(SystemExit) as e:
        torch_main(*argv)
    assert e.value.code == 2 and err in capsys.readouterr().err
    rec = torch_main.rec  # nothing loaded or run
    assert rec.loads == [] and rec.jax == [] and rec.torch == [] and rec.threads == []


def test_anchors_torch_runs_hand_seeds_and_splits_through(monkeypatch):
    """jaxeval: all seeds in one vmapped ``sparseeval`` protocol; PyTorch: one protocol per
    seed on that seed's protocol split, its MAEs in seed order."""
    got = {}

    def protocol(sm, k, methods, seeds, st, vmap_seeds=False):
        got.update(k=k, methods=methods, seeds=seeds, st=st, vmap=vmap_seeds)
        return SimpleNamespace(mae_pp=np.array([[1.5, 2.5]]))

    monkeypatch.setattr(bat, "evaluate_protocol", protocol)
    st = object()
    _, _, mae = bat._jax_run(_Sm(), 4, (42, 43), st)
    assert got == dict(k=4, methods=("sparseeval",), seeds=(42, 43), st=st, vmap=True)
    np.testing.assert_array_equal(mae, [1.5, 2.5])

    calls = []
    monkeypatch.setattr(bat, "torch_protocol",
                        lambda split, k, seed, s: calls.append((split, k, seed, s)) or seed)
    _, _, maes = bat._torch_run(_Sm(), 4, (42, 43), st)
    assert calls == [(("split", 42), 4, 42, st), (("split", 43), 4, 43, st)]
    np.testing.assert_array_equal(maes, [42, 43])


# ============================================================ bench_anchors_torch.kmeans


def _clustered(groups, per, m, seed):
    """0/1 scores of ``m`` models on ``groups * per`` items: the items of a group are
    identical columns, the groups far apart; item ``j`` is in group ``j // per``."""
    rng = np.random.default_rng(seed)
    proto = (rng.uniform(size=(m, groups)) < 0.5).astype(np.float64)
    return np.repeat(proto, per, axis=1)


def _kmeans_reference(s_tr, k, rng, iters=50):
    """Lloyd from random distinct items, then the nearest not yet taken item per centroid."""
    x = (2 * s_tr - 1).T
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    cent = x[rng.choice(x.shape[0], k, replace=False)].copy()
    for _ in range(iters):
        lab = ((x[:, None, :] - cent[None]) ** 2).sum(-1).argmin(1)
        cent = np.stack([x[lab == c].mean(0) if np.any(lab == c) else cent[c]
                         for c in range(k)])
    d = ((x[:, None, :] - cent[None]) ** 2).sum(-1)
    out = []
    for c in range(k):
        out.append(next(j for j in np.argsort(d[:, c], kind="stable") if j not in out))
    return np.array(out)


@pytest.mark.parametrize("seed", range(4))
def test_kmeans_matches_lloyd_from_distinct_items_then_nearest_untaken(seed):
    """Against a direct reference of the docstring's algorithm (items normalised over the
    training models, random distinct items as initial centroids from ``rng``, Lloyd, the
    nearest untaken item per centroid). Fractional scores: no distance ties, so the
    answer does not hang on rounding or on how ties are broken."""
    s = np.random.default_rng(100 + seed).uniform(size=(30, 40))
    got = bat.kmeans(s, 6, np.random.default_rng(seed))
    np.testing.assert_array_equal(got, _kmeans_reference(s, 6, np.random.default_rng(seed)))


@pytest.mark.parametrize("seed", range(4))
def test_kmeans_anchors_are_distinct_items(seed):
    """k close to the number of items: several centroids share a nearest item, yet the
    anchors are k distinct items."""
    s = _clustered(3, 4, 20, seed)  # 12 items in 3 groups of identical columns
    got = bat.kmeans(s, 10, np.random.default_rng(seed))
    assert len(got) == 10 and len(set(got.tolist())) == 10
    assert got.min() >= 0 and got.max() < 12


# ============================================================ speed_problem


@pytest.fixture
def top2_load(monkeypatch):
    """``jaxeval.load`` gives six distinct constant rows (pool of three after the split)."""
    monkeypatch.setattr(jaxeval, "load", lambda path: _top2_sm())


def test_speed_problem_candidate_sets_of_two_to_the_whole_pool(top2_load):
    p = sp.speed_problem("ifeval", K=3, max_frac=0.05, fit=False)
    assert p.instances.shape == (10, 3)
    assert all(sorted(r) == [0, 1, 2] for r in p.instances.tolist())
    with pytest.raises(ValueError, match=r"^K: .* holds 2 to 3 models .*got 1$"):
        sp.speed_problem("ifeval", K=1, fit=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_speed_problem_pool_is_the_seeded_second_half(top2_load, seed):
    sm = _top2_sm()
    _, pool = sm.split([sm.n_models // 2], seed=seed)
    p = sp.speed_problem("ifeval", K=2, max_frac=0.05, seed=seed, fit=False)
    np.testing.assert_array_equal(p.pool_scores, np.asarray(pool.scores, np.float32))


def test_speed_problem_fits_the_training_half_with_its_seed_rank_and_500_steps(top2_load,
                                                                              monkeypatch):
    seen = []

    def fit(train, **kw):
        seen.append((train.n_models, kw))
        n, r = train.n_items, kw["rank"]
        return SimpleNamespace(V=np.ones((n, r)), c=np.zeros(n), u_mean=np.zeros(r),
                               rho_u=1.0)

    monkeypatch.setattr(jaxeval, "fit_factorization", fit)
    p = sp.speed_problem("ifeval", K=2, max_frac=0.05, seed=3, rank=5)
    assert seen == [(3, dict(rank=5, rho=1.0, seed=3, num_steps=500))]
    assert p.V.shape == (20, 5)


def test_speed_problem_zero_factors_have_the_requested_rank(top2_load):
    p = sp.speed_problem("ifeval", K=2, max_frac=0.05, rank=3, fit=False)
    assert p.V.shape == (20, 3) and p.u_mean.shape == (3,) and p.c.shape == (20,)
    assert not (p.V.any() or p.c.any() or p.u_mean.any())
    assert np.asarray(p.data.item_factors.V).shape == (20, 3)


def test_speed_problem_params_a_one_scale_one(top2_load):
    p = sp.speed_problem("ifeval", K=2, max_frac=0.05, fit=False)
    assert float(p.params.a) == 1.0 and float(p.params.scale) == 1.0
    assert float(p.params.rho) == p.rho == 1.0


@pytest.mark.parametrize("max_frac", [0.003, 0.0, -0.2])
def test_speed_problem_refuses_a_max_frac_that_leaves_no_budget(top2_load, max_frac):
    """No budget point at or below ``max_frac`` is an error naming it (it used to give
    ``budgets == ()`` and an IndexError in the timing script)."""
    with pytest.raises(ValueError, match=rf"^max_frac: {max_frac:g} leaves no budget \(the "
                                         r"smallest budget fraction is 0\.005\)$"):
        sp.speed_problem("ifeval", K=2, max_frac=max_frac, fit=False)


@pytest.mark.parametrize("argv, err", [
    (["--replicates", "0"], "--replicates: must be at least 1, got 0"),
    (["--replicates", "-3"], "--replicates: must be at least 1, got -3"),
    (["--batch", "0"], "--batch: must be at least 1, got 0"),
    (["--grid-size", "0"], "--grid-size: must be at least 1, got 0"),
    (["--alpha", "0"], "--alpha: must lie in (0, 1), got 0.0"),
    (["--alpha", "1.5"], "--alpha: must lie in (0, 1), got 1.5"),
])
def test_confseq_main_refuses_bad_arguments_by_name_before_any_work(monkeypatch, capsys, argv,
                                                                   err):
    """An argparse error naming the option (``--replicates 0`` used to stop with a
    ZeroDivisionError in the tolerance header; ``--batch 0`` ran as batch 1)."""

    def work(*a, **k):
        raise AssertionError("the work started")

    monkeypatch.setattr(bc, "simulate_many", work)
    monkeypatch.setattr(bc, "synthetic_rows", work)
    monkeypatch.setattr(bc, "real_rows", work)
    with pytest.raises(SystemExit) as e:
        bc.main(["--datasets", "synthetic", *argv])
    assert e.value.code == 2 and err in capsys.readouterr().err
