"""simulate_identification: input checks, the report, real data (jaxeval._simulate)."""

import dataclasses
import inspect
import json
import re
import warnings

import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix, _simulate
from jaxeval._simulate import IdentificationReport, SyntheticSpec, simulate_identification


def _small_matrix(m=12, n=20, seed=0):
    s = (np.random.default_rng(seed).random((m, n)) < np.linspace(0.2, 0.8, m)[:, None])
    return jaxeval.ScoreMatrix(s.astype(np.float32))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(K=20), "K must be at most the candidate pool size"),
        (dict(K=1), "K: expected an integer >= 2"),
        (dict(budgets=[10, 200]), r"budgets must lie in \[1, K\*n\] = \[1, 60\]"),
        (dict(budgets=[0, 10]), "budgets must lie"),
        (dict(alpha=1.0), "alpha must lie strictly between 0"),
        (dict(alpha=0.0), "alpha must lie strictly between 0"),
        (dict(alpha=None), "alpha must be a number"),
        (dict(alpha="0.05"), "alpha must be a number"),
        (dict(batch_size=21), r"batch_size: expected an integer in \[1, 20\], got 21"),
        (dict(policy="thompson"), "policy must be one of"),
        (dict(n_train=11), r"n_train: expected an integer in \[0, 10\]"),
        (dict(budget_fractions=[0.0, 0.5]), "budget_fractions must lie in"),
        (dict(item_block=0), "item_block: expected an integer >= 1"),
        (dict(lanes=0), r"lanes: expected an integer in \[1, 1048576\], got 0"),
        (dict(lanes=2.5), "lanes: expected an integer in .*, got float 2.5"),
        (dict(a=-1.0), r"a must lie in \[0, 1e\+06\], got -1.0"),
        (dict(a=float("nan")), "a must lie in"),
        (dict(eps=-0.1), "eps must lie in"),
        (dict(lam0=2.0), "lam0 must lie in"),
        (dict(lam0="auto"), r"lam0 must be a number in \[0, 1\] or 'learned'"),
        (dict(corruption="biased"), "corruption='biased': corrupts predictions, which policy"),
        (dict(corruption="bogus"), "corruption: unknown kind 'bogus'; expected one of .*'random'"),
        (dict(horizon=5), "horizon: only SySRs plans for a horizon, not policy 'ucbe'"),
        (dict(lam0="learned"), "lam0='learned' needs real data .* a policy that uses predictions"),
        (dict(num_newton=-1), r"num_newton: expected an integer in \[0, 10000\]"),
        (dict(horizon=0), "horizon: expected an integer >= 1"),
        (dict(chunk_size=1.5), "chunk_size: expected an integer >= 1, got float 1.5"),
        (dict(fit_steps=0), "fit_steps: expected an integer >= 1"),
    ],
)
def test_refusals(kwargs, match):
    kw = dict(K=3, n_replicates=4)
    kw.update(kwargs)
    policy = kw.pop("policy", "ucbe")
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_identification(_small_matrix(), policy, **kw)


def test_degenerate_matrices_are_refused_for_what_they_are():
    """All-equal rows (one distinct model), or two distinct models with the default
    split, were refused as "n_train must be in [0, -1], got 0", blaming an argument the
    user had not set: the message says what the matrix lacks, or that the default is
    at fault."""
    with pytest.raises(ValueError, match=r"data: 1 distinct model\(s\) after removing"):
        simulate_identification(ScoreMatrix(np.zeros((12, 30))), "ucbe", K=2,
                                n_replicates=4)
    with pytest.raises(ValueError, match=r"data: 1 distinct model\(s\)"):
        simulate_identification(ScoreMatrix(np.tile([0.0, 1.0], (5, 3))), "ucbe", K=2,
                                n_replicates=4, n_train=0)
    two = ScoreMatrix(np.repeat([[0.0], [1.0]], 6, axis=0))  # one item: two distinct rows
    with pytest.raises(ValueError, match=r"n_train: the default \(half of the models, 1\) "
                       r"leaves fewer than 2 candidates of the 2 distinct models"):
        simulate_identification(two, "ucbe", K=2, n_replicates=4)
    with pytest.raises(ValueError, match=r"n_train: expected an integer in \[0, 0\], got 1 "
                                         r"\(2 distinct"):
        simulate_identification(two, "ucbe", K=2, n_replicates=4, n_train=1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mode="conf"), "mode"),
        (dict(cs_kinds=("eb", "nope")), "cs_kinds"),
        (dict(corruption="nope"), "corruption"),
        (dict(batch_size=21), "batch_size"),
        (dict(budget_fractions=[]), "budget_fractions must not be empty"),
        (dict(budget_fractions=0.5), "budget_fractions must be a sequence"),
    ],
)
def test_kernel_settings_refused_before_the_factorization_fit(monkeypatch, kwargs, match):
    """PULSE fits a factorization first (seconds to minutes): the kernel's settings are
    checked before it, so a typo costs nothing."""
    import jaxeval._factorization_api as fa

    def no_fit(*a, **k):
        raise AssertionError("the factorization was fitted before the settings were checked")

    monkeypatch.setattr(fa, "fit_factorization", no_fit)
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_identification(_small_matrix(), "pulse", K=3, n_replicates=4, **kwargs)


def test_real_data_settings_refused_with_synthetic_truth():
    spec = SyntheticSpec(n_items=30)
    for kw, word in ((dict(factors="x"), "factors"), (dict(n_train=5), "n_train")):
        with pytest.raises(ValueError, match=f"{word}: only for real data"):
            simulate_identification(spec, "pulse", K=3, n_replicates=4, **kw)


def test_merged_checkpoints_warn():
    spec = SyntheticSpec(n_items=40)
    with pytest.warns(UserWarning, match="budget_fractions: 4 checkpoints requested, 2 distinct"):
        rep = simulate_identification(spec, "ucbe", K=3, n_replicates=4,
                                      budget_fractions=(0.001, 0.002, 0.004, 1.0))
    assert rep.budgets.tolist() == [1, 120]
    with pytest.warns(UserWarning, match="budgets: 3 checkpoints requested, 2 distinct") as rec:
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4, budgets=(10, 10, 60))
    assert sum("checkpoints requested" in str(w.message) for w in rec) == 1  # said once


def test_non_partitionable_threefry_is_refused():
    import jax

    old = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", False)
    try:
        with pytest.raises(ValueError, match="jax_threefry_partitionable is off"):
            simulate_identification(SyntheticSpec(n_items=30), "ucbe", K=3, n_replicates=4)
    finally:
        jax.config.update("jax_threefry_partitionable", old)


def test_learned_lam0_is_learn_lam0_on_the_training_models():
    sm = _small_matrix(m=24, n=30, seed=2)
    rep = simulate_identification(sm, "pulse", K=3, n_replicates=4, rank=2, lam0="learned",
                                  fit_steps=20, seed=1)
    train, _, _ = _simulate.split_pool(sm.drop_duplicates(), None, 3, 1)
    assert rep.settings["lam0"] == jaxeval.learn_lam0(train, rank=2, seed=1, num_steps=20)
    assert "learn_lam0" in rep.settings["lam0_source"]
    with pytest.raises(ValueError, match=r"lam0='learned': data: the factorization of fold"
                                         r".*\(try a lower rank or more folds, up to 3, .*\); "
                                         r"jaxeval.learn_lam0 takes rank and folds: call it "
                                         r"and pass the number it returns as lam0$"):
        simulate_identification(_small_matrix(m=14, n=20), "pulse", K=3, n_replicates=4,
                                rank=2, lam0="learned", fit_steps=20, n_train=6)
    with pytest.raises(ValueError, match="needs at least 4 training models, n_train=3"):
        simulate_identification(sm, "pulse", K=3, n_replicates=4, rank=2, lam0="learned",
                                fit_steps=20, n_train=3)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(n_items=1), "n_items: expected an integer >= 2"),
     (dict(rank=0), r"rank: expected an integer in \[1, 256\]"),
     (dict(difficulty_scale=float("nan")), "difficulty_scale must lie in"),
     (dict(model_scale=-1.0), "model_scale must lie in")],
)
def test_synthetic_spec_refuses_bad_values(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SyntheticSpec(**{"n_items": 50, **kwargs})


def test_refuses_non_finite_factors():
    """A NaN in a given factor table ran to a report of accuracy 0 and NaN widths."""
    from jaxeval._factorization import ItemFactors

    rng = np.random.default_rng(0)
    sm = jaxeval.ScoreMatrix((rng.random((12, 30)) < 0.5).astype(np.float32))
    V = rng.normal(size=(30, 2)).astype(np.float32)
    V[3, 0] = np.nan
    f = ItemFactors(V, np.zeros(30, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"factors: V has 1 non-finite value"):
        simulate_identification(sm, "pulse", K=3, n_train=0, factors=f, n_replicates=4)
    f = ItemFactors(np.ones((30, 2), np.float32), np.full(30, 1e39), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"factors: c has 30 non-finite value"):
        simulate_identification(sm, "pulse", K=3, n_train=0, factors=f, n_replicates=4)



def test_refuses_factors_fitted_on_other_items():
    """A fitted factorization names its items: on the same items in another order, or
    on other items of the same number, each item got another item's factor."""
    rng = np.random.default_rng(0)
    sm = jaxeval.ScoreMatrix((rng.random((30, 20)) < 0.5).astype(np.float32),
                             items=[f"i{j}" for j in range(20)])
    lr = jaxeval.fit_factorization(sm, rank=2, rho=1.0, seed=0, num_steps=10)
    rev = sm.take(items=np.arange(20)[::-1])
    with pytest.raises(ValueError, match="factors: fitted on the same items in another "
                                         "order .position 0: 'i0' in factors, 'i19' here."):
        simulate_identification(rev, "pulse", K=3, n_train=0, factors=lr, n_replicates=4)
    other = jaxeval.ScoreMatrix(sm.scores, items=[f"q{j}" for j in range(20)])
    with pytest.raises(ValueError, match="factors: fitted on other items"):
        simulate_identification(other, "pulse", K=3, n_train=0, factors=lr, n_replicates=4)


def test_refuses_missing_cells_in_candidates():
    sm = _small_matrix()
    mask = np.ones(sm.shape, bool)
    mask[:, 3] = False
    sm = jaxeval.ScoreMatrix(sm.scores, mask=mask)
    with pytest.raises(ValueError, match="needs the full truth of every candidate"):
        simulate_identification(sm, "ucbe", K=3, n_replicates=4)


def test_refuses_bad_data_type_and_reads_arrays():
    for bad in ("oll2_ifeval", {"a": np.zeros((3, 3))}, None):
        with pytest.raises(TypeError, match="data must be a ScoreMatrix, a pandas DataFrame, "
                                            "a 2-D array of scores or a SyntheticSpec"):
            simulate_identification(bad, "ucbe", K=2)
    # a labelled frame is the ScoreMatrix of its labels, and an array (or a tuple of
    # rows) one with default names: the same simulation
    pd = pytest.importorskip("pandas")
    sm = jaxeval.synthetic_score_matrix(0, 40, 50)
    a = simulate_identification(sm, "ucbe", K=3, n_replicates=4)
    for other in (pd.DataFrame(sm.scores, index=sm.models, columns=sm.items),
                  np.asarray(sm.scores), tuple(map(tuple, sm.scores.tolist()))):
        b = simulate_identification(other, "ucbe", K=3, n_replicates=4)
        np.testing.assert_array_equal(a.correct, b.correct)
        np.testing.assert_array_equal(a.calls_used, b.calls_used)
        # a frame or array names no data set: its settings say what it was
        kind = type(other).__name__
        assert b.settings["data"].startswith(f"{kind} [40, 50] sha256:"), b.settings["data"]
    assert b.pool_models[0].startswith("model_")
    # the digest tells other data apart (one changed cell), and repeats for the same data
    arr = np.array(sm.scores)
    again = simulate_identification(arr, "ucbe", K=3, n_replicates=1).settings["data"]
    arr[0, 0] = 1.0 - arr[0, 0]
    other = simulate_identification(arr, "ucbe", K=3, n_replicates=1).settings["data"]
    digest = b.settings["data"].split("sha256:")[1]
    assert again == f"ndarray [40, 50] sha256:{digest}" and other != again
    assert a.settings["data"] == sm.source  # a named source is kept
    inmem = simulate_identification(jaxeval.ScoreMatrix(arr), "ucbe", K=3, n_replicates=1)
    assert inmem.settings["data"] == other.replace("ndarray", "ScoreMatrix")
    import jax.numpy as jnp

    jx = simulate_identification(jnp.asarray(arr), "ucbe", K=3, n_replicates=1)
    assert jx.settings["data"] == other.replace("ndarray", "jax.Array")


def _report(acc, budgets=(10, 20, 40, 80), K=2, n=40):
    acc = np.asarray(acc, float)
    C = len(budgets)
    z = np.zeros
    return IdentificationReport(
        budgets=np.asarray(budgets), budget_fractions=np.asarray(budgets) / (K * n),
        accuracy=acc, accuracy_se=z(C), calls_used=np.asarray(budgets, float),
        cs_kinds=("eb",), coverage_family=np.ones(1), coverage_family_at=np.ones((1, C)),
        coverage_arm=np.ones(1), width=z((1, C)), naive_coverage_family=np.full(C, np.nan),
        status_counts=z((C, 5), np.int64), correct=z((1, C), bool), recommended=z((1, C), int),
        theta=z((1, K)), instance=z(1, int), instances=z((1, K), int),
        pool_models=np.array([]), settings=dict(K=K, n_items=n),
    )


def test_calls_to_linear_interpolation():
    rep = _report([0.5, 0.9, 0.97, 1.0])
    # between 20 (0.90) and 40 (0.97): 20 + (0.95 - 0.90) / 0.07 * 20
    assert rep.calls_to(0.95) == pytest.approx(20 + 0.05 / 0.07 * 20)
    assert rep.calls_to(0.95, fraction=True) == pytest.approx((20 + 0.05 / 0.07 * 20) / 80)
    assert rep.calls_to(0.9) == pytest.approx(20.0)
    assert rep.calls_to(0.4) == 10.0
    assert _report([0.5, 0.6, 0.7, 0.8]).calls_to(0.95) == float("inf")
    # reached exactly at the last budget (19 of 20 replicates right is exactly 0.95)
    assert _report([0.5, 0.6, 0.8, 0.95]).calls_to(0.95) == 80.0
    assert _report([0.5, 0.9, 0.95, 1.0]).calls_to(1.0) == 80.0


def test_synthetic_run_report_and_files(tmp_path):
    rep = simulate_identification(
        SyntheticSpec(n_items=30, rank=2), "ucbe", K=3, n_replicates=16, seed=2,
        budget_fractions=(0.1, 0.5, 1.0), cs_kinds=("eb",),
    )
    assert rep.budgets.tolist() == [9, 45, 90]
    assert rep.accuracy[-1] == 1.0  # every arm fully evaluated
    assert rep.coverage_family[0] == 1.0
    assert rep.width[0, -1] < 5e-5  # exact up to the rounding margin (~2e-5 at n = 30)
    assert rep.status_counts[-1, 2] == 16
    np.testing.assert_allclose(rep.calls_used, [9, 45, 90])
    assert rep.settings["seed"] == 2 and rep.settings["jax_version"]
    assert "calls to 95%" in rep.summary()
    def strict(c):
        raise ValueError(f"not strict JSON: {c}")

    doc = json.loads(rep.to_json(str(tmp_path / "r.json")), parse_constant=strict)
    assert doc["accuracy"][-1] == 1.0
    assert doc["naive_coverage_family"] == ["nan"] * 3  # no predictions: NaN, as a string
    rep.to_npz(str(tmp_path / "r.npz"))
    z = np.load(tmp_path / "r.npz")
    np.testing.assert_array_equal(z["correct"], rep.correct)
    assert json.loads(str(z["settings"]))["policy"] == "ucbe"
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.accuracy = None


def test_calls_to_uses_the_calls_spent_and_ties_survive_float32():
    """With batches of 16, a checkpoint spends only whole batches: ``calls_to``
    interpolates on the calls spent, not the budgets. Two candidates with the same true
    mean of graded scores (one row a permutation of the other: float32 means differ in
    the last bit) are both a true best."""
    rep = simulate_identification(
        SyntheticSpec(n_items=40, rank=2), "ucbe", K=3, n_replicates=16, seed=1,
        budgets=(20, 60, 120), batch_size=16, cs_kinds=("eb",))
    assert rep.calls_used.tolist() == [16.0, 48.0, 120.0]
    fake = dataclasses.replace(rep, accuracy=np.array([0.5, 0.9, 1.0]))
    assert fake.calls_to(0.7) == pytest.approx(16 + 0.2 / 0.4 * 32)  # not 20 + 0.5 * 40
    rng = np.random.default_rng(0)
    row = rng.uniform(0, 0.5, 37).astype(np.float32)
    rows = np.stack([row, rng.permutation(row), np.full(37, 0.05, np.float32)])
    sm = jaxeval.ScoreMatrix(rows, models=["a", "b", "c"])
    full = simulate_identification(sm, "uniform", K=3, n_train=0, n_replicates=8, seed=0,
                                   budget_fractions=(1.0,), cs_kinds=("eb",))
    th = np.stack([full.theta[i][np.argsort(full.instances[full.instance[i]])]
                   for i in range(8)])  # [R, model a, b, c]
    assert (th[:, 0] != th[:, 1]).all()  # the kernel's float32 means do differ
    assert full.accuracy.tolist() == [1.0]


def test_item_block_streams_the_same_study():
    # Rows longer than item_block are streamed in blocks: same orders and truth, so with
    # 0/1 scores and no predictions every output is identical to the whole-row run.
    kw = dict(K=3, n_replicates=8, seed=5, budget_fractions=(0.1, 0.5), cs_kinds=("eb",))
    whole = simulate_identification(SyntheticSpec(n_items=30, rank=2), "ucbe", **kw)
    blocked = simulate_identification(
        SyntheticSpec(n_items=30, rank=2), "ucbe", item_block=7, **kw
    )
    assert blocked.settings["item_block"] == 7
    for field in ("correct", "recommended", "theta", "calls_used", "width"):
        np.testing.assert_array_equal(getattr(blocked, field), getattr(whole, field))


def test_synthetic_truth_and_random_predictions_are_the_same_under_x64():
    """Under jax x64 the synthetic draws were float64: another truth than the float32
    one, another again on the streamed path, and random predictions failed to compile."""
    import jax

    kw = dict(K=3, n_replicates=4, seed=0, budget_fractions=(0.5, 1.0), cs_kinds=("eb",))
    spec = SyntheticSpec(n_items=20, rank=2)
    base = simulate_identification(spec, "ucbe", **kw)
    with jax.enable_x64(True):
        whole = simulate_identification(spec, "ucbe", **kw)
        blocked = simulate_identification(spec, "ucbe", item_block=8, **kw)
        rand = simulate_identification(spec, "pulse", corruption="random", **kw)
    for field in ("theta", "recommended", "calls_used"):
        np.testing.assert_array_equal(getattr(whole, field), getattr(base, field))
        np.testing.assert_array_equal(getattr(blocked, field), getattr(base, field))
    rand32 = simulate_identification(spec, "pulse", corruption="random", **kw)
    np.testing.assert_array_equal(rand.recommended, rand32.recommended)


def test_lanes_change_the_vmapped_width_not_the_study():
    # UCB-E on 0/1 scores has exact float sums, so any vmapped width gives the same
    # replicates; the width is recorded in the settings.
    kw = dict(K=3, n_replicates=12, seed=6, budget_fractions=(0.1, 0.5), cs_kinds=("eb",))
    spec = SyntheticSpec(n_items=30, rank=2)
    base = simulate_identification(spec, "ucbe", **kw)
    wide = simulate_identification(spec, "ucbe", lanes=8, chunk_size=16, **kw)
    assert base.settings["lanes"] == 32 and wide.settings["lanes"] == 8
    for field in ("correct", "recommended", "theta", "calls_used", "width"):
        np.testing.assert_array_equal(getattr(wide, field), getattr(base, field))


def test_same_instances_and_orders_for_every_policy():
    sm = _small_matrix(m=16, n=20)
    kw = dict(K=3, n_replicates=8, seed=4, budget_fractions=(0.2, 1.0), cs_kinds=("eb",))
    a = simulate_identification(sm, "uniform", **kw)
    b = simulate_identification(sm, "ucbe", **kw)
    np.testing.assert_array_equal(a.instances, b.instances)
    np.testing.assert_array_equal(a.instance, b.instance)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert a.accuracy[-1] == b.accuracy[-1] == 1.0


def test_balanced_assignment_plays_every_instance_equally_often():
    """Replicate i plays instance i mod I, with the item orders of its own key: the
    same replicate as a run given that one instance."""
    sm = _small_matrix(m=16, n=20)
    kw = dict(K=3, n_replicates=11, seed=4, budget_fractions=(0.2, 1.0), cs_kinds=("eb",))
    bal = simulate_identification(sm, "ucbe", n_instances=4, instance_assignment="balanced",
                                  chunk_size=8, lanes=4, **kw)
    assert bal.instance.tolist() == [i % 4 for i in range(11)]
    assert bal.settings["instance_assignment"] == "balanced"
    rnd = simulate_identification(sm, "ucbe", n_instances=4, lanes=4, **kw)
    np.testing.assert_array_equal(rnd.instances, bal.instances)
    for j in range(4):
        one = simulate_identification(sm, "ucbe", instances=bal.instances[j:j + 1], lanes=4, **kw)
        mine = bal.instance == j
        np.testing.assert_array_equal(one.theta[mine], bal.theta[mine])
        np.testing.assert_array_equal(one.recommended[mine], bal.recommended[mine])
        np.testing.assert_array_equal(one.correct[mine], bal.correct[mine])
    with pytest.raises(ValueError, match="instance_assignment must be 'random' or 'balanced'"):
        simulate_identification(sm, "ucbe", instance_assignment="cycle", **kw)
    with pytest.raises(ValueError, match="instance_assignment: only for real data"):
        simulate_identification(SyntheticSpec(n_items=20), "ucbe", instance_assignment="balanced",
                                **kw)


def test_real_data_pulse_smoke():
    sm = jaxeval.load("oll2_ifeval")
    rep = simulate_identification(
        sm, "pulse", K=5, n_replicates=8, budget_fractions=(0.02, 0.1), cs_kinds=("eb",),
        rank=2, fit_steps=100, chunk_size=8,
    )
    assert rep.settings["use_predictions"] and "factorization" in rep.settings
    assert rep.coverage_family[0] == 1.0
    assert np.all(np.isfinite(rep.width))
    assert rep.instances.shape == (10, 5)


def test_default_budget_grid_is_spec_grid():
    assert _simulate.DEFAULT_BUDGET_FRACTIONS[0] == 0.005
    assert len(_simulate.DEFAULT_BUDGET_FRACTIONS) == 13


def test_given_instances_reproduce_the_random_draw_by_rows_and_by_names():
    sm = _small_matrix(m=16, n=20)
    kw = dict(K=3, n_replicates=8, seed=4, budget_fractions=(0.2, 1.0), cs_kinds=("eb",))
    drawn = simulate_identification(sm, "ucbe", n_instances=4, **kw)
    by_rows = simulate_identification(sm, "ucbe", instances=drawn.instances, **kw)
    names = drawn.pool_models[drawn.instances]
    by_names = simulate_identification(sm, "ucbe", instances=names, **kw)
    for rep in (by_rows, by_names):
        np.testing.assert_array_equal(rep.instances, drawn.instances)
        np.testing.assert_array_equal(rep.instance, drawn.instance)
        np.testing.assert_array_equal(rep.recommended, drawn.recommended)
        np.testing.assert_array_equal(rep.calls_used, drawn.calls_used)
    # a different instance list is played instead (its truth is the named models' means)
    top = np.argsort(sm.drop_duplicates().scores.mean(axis=1))  # not all are pool models
    pool = list(drawn.pool_models)
    mine = [m for m in np.asarray(sm.drop_duplicates().models)[top] if m in pool][-3:]
    rep = simulate_identification(sm, "ucbe", instances=[mine], **kw)
    assert set(rep.instance.tolist()) == {0}
    full = dict(zip(np.asarray(sm.models).tolist(), sm.scores.mean(axis=1)))
    np.testing.assert_allclose(np.sort(rep.theta[0]), np.sort([full[m] for m in mine]),
                               rtol=1e-6)


@pytest.mark.parametrize(
    "instances, match",
    [
        (np.zeros((2, 4), np.int64), r"expected shape \[I, K\] = \[I, 3\]"),
        (np.zeros((0, 3), np.int64), r"expected shape"),
        ([[0, 1, 1]], "repeat a model"),
        ([[0, 1, 99]], r"pool rows must lie in \[0, "),
        ([[0.0, 1.0, 2.0]], "integer pool rows or model names"),
        ([["a", "b", "nobody"]], "not in the candidate pool"),
    ],
)
def test_refuses_bad_instances(instances, match):
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_identification(_small_matrix(), "ucbe", K=3, n_replicates=4,
                                instances=instances)


def test_instances_as_an_object_array_of_ints_are_pool_rows():
    sm = _small_matrix(m=16, n=20)
    kw = dict(K=3, n_replicates=4, seed=4, budget_fractions=(0.5,), cs_kinds=("eb",))
    rows = np.array([[0, 1, 2], [3, 4, 5]])
    a = simulate_identification(sm, "ucbe", instances=rows, **kw)
    b = simulate_identification(sm, "ucbe", instances=rows.astype(object), **kw)
    np.testing.assert_array_equal(a.instances, b.instances)
    np.testing.assert_array_equal(a.recommended, b.recommended)


def test_names_that_are_not_candidates_say_why():
    """A training model, a model removed as a duplicate and an unknown name are each
    named as such (all three used to read 'not in the candidate pool')."""
    s = (np.random.default_rng(1).random((16, 30)) < 0.5).astype(np.float32)
    s[15] = s[3]  # model 15 repeats model 3: drop_duplicates removes it
    sm = jaxeval.ScoreMatrix(s, models=[f"m{i}" for i in range(16)])
    rep = simulate_identification(sm, "ucbe", K=2, n_replicates=2, n_instances=1,
                                  budget_fractions=(0.5,), cs_kinds=("eb",))
    pool = set(rep.pool_models.tolist())
    trained = sorted(f"m{i}" for i in range(15) if f"m{i}" not in pool)
    cand = sorted(pool)
    for names, what in (([trained[0], cand[0]], "1 training model"),
                        (["m15", cand[0]], "1 removed as exact duplicate"),
                        (["nobody", cand[0]], "1 unknown: ['nobody']")):
        with pytest.raises(ValueError, match=re.escape(what)):
            simulate_identification(sm, "ucbe", K=2, n_replicates=2, instances=[names])


@pytest.mark.parametrize("n_instances, match", [
    (0, "n_instances"), (-7, "n_instances"), (2.5, "n_instances"),
])
def test_n_instances_checked_whether_or_not_it_is_used(n_instances, match):
    sm = _small_matrix()
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_identification(sm, "ucbe", K=3, n_replicates=4, instances=[[0, 1, 2]],
                                n_instances=n_instances)
    with pytest.raises((ValueError, TypeError), match=match):
        simulate_identification(SyntheticSpec(n_items=20), "ucbe", K=2, n_replicates=4,
                                n_instances=n_instances)


def test_n_instances_that_would_be_ignored_is_refused():
    sm = _small_matrix()
    kw = dict(K=3, n_replicates=4, budget_fractions=(0.5,), cs_kinds=("eb",))
    with pytest.raises(ValueError, match=r"n_instances=3: the 2 instances are given"):
        simulate_identification(sm, "ucbe", instances=[[0, 1, 2], [3, 4, 5]], n_instances=3,
                                **kw)
    rep = simulate_identification(sm, "ucbe", instances=[[0, 1, 2], [3, 4, 5]], n_instances=2,
                                  **kw)  # their number: fine
    assert rep.settings["n_instances"] == 2
    with pytest.raises(ValueError, match="n_instances: only for real data"):
        simulate_identification(SyntheticSpec(n_items=20), "ucbe", K=2, n_replicates=4,
                                n_instances=3)
    default = inspect.signature(simulate_identification).parameters["n_instances"].default
    assert default == _simulate._N_INSTANCES_DEFAULT


def test_refuses_instances_with_synthetic_truth():
    with pytest.raises(ValueError, match="instances: only for real data"):
        simulate_identification(SyntheticSpec(n_items=20), "ucbe", K=2, n_replicates=4,
                                instances=[[0, 1]])


def test_fully_evaluated_graded_arms_are_covered():
    """A fully evaluated arm's interval is its float32 running mean; with graded scores
    that differs from the true mean by rounding, so it carries the rounding margin and
    still covers (it reported 0% family-wise coverage without it)."""
    S = np.random.default_rng(0).random((6, 397)).astype(np.float32)
    for b in (1, 7):
        rep = jaxeval.simulate_identification(
            jaxeval.ScoreMatrix(S), "uniform", K=3, n_train=0, n_instances=4,
            budgets=[3 * 397], n_replicates=16, batch_size=b,
            cs_kinds=("eb", "hoeffding", "betting"))
        assert rep.status_counts[-1].tolist()[2] == 16  # every arm fully evaluated
        assert rep.coverage_family.tolist() == [1.0, 1.0, 1.0], b
        assert (rep.width[:, -1] < 1e-4).all()


def test_hoeffding_kind_is_the_plain_mean_interval_under_predictions():
    """SPEC 2.4: "hoeffding" is the lam = 0 interval; with predictions on, same policy and
    item orders, it must not change (only the EB interval on DR terms may)."""
    kw = dict(K=3, n_replicates=16, budgets=[30, 60, 90], cs_kinds=("eb", "hoeffding"),
              lam0=1.0, shrink=1e6)
    spec = jaxeval.SyntheticSpec(n_items=40)
    with pytest.warns(UserWarning, match="shrink=1000000.0 has no effect"):
        off = jaxeval.simulate_identification(spec, "uniform", use_predictions=False, **kw)
    on = jaxeval.simulate_identification(spec, "uniform", use_predictions=True, **kw)
    np.testing.assert_array_equal(on.width[1], off.width[1])
    assert not np.array_equal(on.width[0], off.width[0])


@pytest.mark.parametrize("alpha", [1e-31, 1e-39])
def test_alpha_too_small_for_float32_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha must be at least 1e-30"):
        jaxeval.simulate_identification(jaxeval.SyntheticSpec(n_items=20), "ucbe", K=2,
                                        n_replicates=2, budgets=[4], alpha=alpha)


def test_default_policy_is_the_recommended_one():
    """simulate_identification, a campaign and a study start from the same policy."""
    import inspect

    default = inspect.signature(simulate_identification).parameters["policy"].default
    campaign = inspect.signature(jaxeval.IdentificationCampaign).parameters["policy"].default
    assert default == campaign == "pulse_ucb"
    assert jaxeval.IdentificationStudy().policies[0].policy == default


@pytest.mark.parametrize("kwargs, match", [
    (dict(refit="False"), "refit: expected True or False, got 'False'"),
    (dict(use_predictions="no"), r"use_predictions: expected True or False \(or None\)"),
    (dict(synchronized="yes"), r"synchronized: expected True or False \(or None\)"),
    (dict(cs_kinds=None), r"cs_kinds: expected a tuple of interval kinds"),
    (dict(cs_kinds="eb"), r"cs_kinds: expected a tuple of interval kinds .* got 'eb'"),
    (dict(factors="abc"), "factors: expected a fitted LowRankLogistic .* got str"),
])
def test_flags_and_objects_of_the_wrong_type_are_refused(kwargs, match):
    """A string flag is truthy: refit="False" ran with the refit on (and recorded the
    string); use_predictions="no" fitted a factorization. Refused by name now."""
    with pytest.raises(TypeError, match=match):
        simulate_identification(_small_matrix(), "pulse", K=3, n_replicates=4, **kwargs)


def test_settings_a_policy_does_not_read_are_named_in_a_warning():
    """A setting changed from its default that the configuration never reads (UCB-E's
    lam0, eps outside the confidence mode, bias without the biased corruption, ...)
    used to be accepted without a word and recorded as if it had been used."""
    from jaxeval._simulate import unused_settings

    assert unused_settings("ucbe", False, "budget", "none", False, a=3.0, lam0=0.2, eps=0.3,
                           bias=0.9, rank=2) == ["eps=0.3", "bias=0.9", "lam0=0.2", "rank=2"]
    assert unused_settings("uniform", False, "budget", "none", False, a=3.0) == ["a=3.0"]
    assert unused_settings("pulse", True, "confidence", "biased", False, a=1.0, scale=2.0,
                           eps=0.1, bias=0.5, lam0=0.2, rank=4, fit_steps=10) == []
    assert unused_settings("pulse", True, "budget", "none", True, rank=4) == ["rank=4"]
    assert unused_settings("pulse", True, "budget", "none", False, refit=False, rho=3.0,
                           num_newton=2) == ["rho=3.0", "num_newton=2"]
    assert unused_settings("sysrs", False, "budget", "none", False,
                           factors=object()) == ["factors"]
    # predictions that ignore the refitted factor, a refit of no Newton step, a learned
    # prior whose rank is the given factors' own
    assert unused_settings("pulse", True, "budget", "random", False, rho=50.0,
                           num_newton=3) == ["rho=50.0", "num_newton=3"]
    assert unused_settings("pulse", True, "budget", "none", False, rho=50.0,
                           num_newton=0) == ["rho=50.0"]
    assert unused_settings("pulse", True, "budget", "none", False, rank=3, fit_steps=9,
                           factors=object(), lam0="learned") == ["rank=3"]
    spec = jaxeval.SyntheticSpec(n_items=20)
    with pytest.warns(UserWarning, match=r"lam0=0\.2, rank=2 have no effect for policy 'ucbe'"
                      r".* \(lam0 still recorded in settings as given\)$"):
        rep = jaxeval.simulate_identification(spec, "ucbe", K=2, n_replicates=4, lam0=0.2,
                                              rank=2, budget_fractions=(0.5,))
    assert rep.settings["lam0"] == 0.2  # recorded as given, as the message says
    assert rep.settings["rank"] == spec.rank != 2  # the rank the run used: not said to be given
    with pytest.warns(UserWarning, match=r"rank=2, fit_steps=7 have no effect .*"
                                         r"with their defaults$"):
        rep = jaxeval.simulate_identification(spec, "ucbe", K=2, n_replicates=4, rank=2,
                                              fit_steps=7, budget_fractions=(0.5,))
    assert "fit_steps" not in rep.settings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jaxeval.simulate_identification(spec, "ucbe", K=2, n_replicates=4, a=3.0,
                                        budget_fractions=(0.5,))
    with pytest.warns(UserWarning, match=r"IdentificationCampaign: lam0=0\.3 has no effect"):
        jaxeval.IdentificationCampaign(["a", "b"], items=[f"i{j}" for j in range(6)],
                                       policy="ucbe", lam0=0.3)
    with warnings.catch_warnings():  # eps sets status()'s confident test, stop or not
        warnings.simplefilter("error")
        jaxeval.IdentificationCampaign(["a", "b"], items=[f"i{j}" for j in range(6)],
                                       policy="ucbe", eps=0.5, stop_when_confident=False)


def test_by_gap_bins_a_hand_built_report_exactly():
    """Four replicates on four instances, gaps 0.0 / 0.1 / 0.2 / 0.3; two bins of two
    instances each; per bin, the accuracy curve and calls-to-target of its replicates."""
    base = _report([0.5, 0.5, 0.75, 1.0], K=3)
    theta = np.array([[0.5, 0.5, 0.1], [0.6, 0.5, 0.1], [0.2, 0.7, 0.5], [0.9, 0.6, 0.1]],
                     np.float32)
    correct = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1], [1, 0, 0, 1]], bool)
    rep = dataclasses.replace(base, theta=theta, correct=correct,
                              instance=np.arange(4, dtype=np.int32),
                              calls=np.tile(np.asarray(base.budgets), (4, 1)))
    np.testing.assert_allclose(rep.top_two_gap, [0.0, 0.1, 0.2, 0.3], atol=1e-6)
    hard, easy = rep.by_gap(2)
    assert (hard.n_replicates, easy.n_replicates) == (2, 2)
    assert (hard.n_instances, easy.n_instances) == (2, 2)
    np.testing.assert_allclose(hard.accuracy, [0.5, 0.5, 1.0, 1.0])
    np.testing.assert_allclose(easy.accuracy, [0.5, 0.5, 0.5, 1.0])
    np.testing.assert_allclose(hard.median_gap, 0.05, atol=1e-6)
    assert hard.calls_to(0.95) == pytest.approx(20 + 0.45 / 0.5 * 20)
    assert easy.calls_to(0.95) == pytest.approx(40 + 0.45 / 0.5 * 40)
    assert easy.calls_to(0.95, fraction=True) == pytest.approx(easy.calls_to(0.95) / 120)
    # given edges: the last bin is closed, a replicate outside every bin is dropped
    a, b = rep.by_gap(edges=[0.05, 0.15, 0.3])
    assert (a.n_replicates, b.n_replicates) == (1, 2)
    empty, = rep.by_gap(edges=[0.4, 0.5])
    assert empty.n_replicates == 0 and np.isnan(empty.accuracy).all()
    assert empty.calls_to(0.5) == float("inf")
    # a report without per-replicate calls bins on the mean calls
    old = dataclasses.replace(rep, calls=None)
    np.testing.assert_allclose(old.by_gap(2)[0].calls_used, base.calls_used)


@pytest.mark.parametrize("kwargs, match", [
    (dict(bins=0), "bins: expected an integer >= 1, got 0"),
    (dict(bins=True), "bins: expected an integer >= 1, got bool True"),
    (dict(bins=2.0), "bins: expected an integer >= 1, got float 2.0"),
    (dict(edges=[0.1]), "edges: expected at least two increasing"),
    (dict(edges=[0.2, 0.1]), "edges: expected at least two increasing"),
    (dict(edges=[0.0, np.nan]), "edges: expected at least two increasing"),
    (dict(edges=[[0.0, 0.1]]), "edges: expected at least two increasing"),
])
def test_by_gap_refuses_bad_bins(kwargs, match):
    error = TypeError if "bool" in match or "float" in match else ValueError
    with pytest.raises(error, match=match):
        _report([0.5, 1.0], budgets=(10, 20)).by_gap(**kwargs)


def test_by_gap_on_real_data_partitions_the_replicates_by_instance():
    """Quantile bins hold whole instances (every replicate of an instance has its gap),
    partition the replicates, and reproduce the report's curves when pooled; edges
    taken from one policy bin another policy's run on the same instances alike."""
    sm = _small_matrix(m=16, n=20)
    kw = dict(K=3, n_replicates=24, seed=4, n_instances=6, budget_fractions=(0.2, 0.5, 1.0),
              cs_kinds=("eb",), instance_assignment="balanced")
    u = simulate_identification(sm, "ucbe", **kw)
    v = simulate_identification(sm, "uniform", **kw)
    np.testing.assert_allclose(u.calls.mean(axis=0), u.calls_used)
    bins = u.by_gap(3)
    assert sum(b.n_replicates for b in bins) == 24
    inst_gap = {int(i): float(g) for i, g in zip(u.instance, u.top_two_gap)}
    for b in bins:
        inside = [i for i, g in inst_gap.items()
                  if b.lo <= g and (g < b.hi or (b is bins[-1] and g <= b.hi))]
        assert b.n_instances == len(inside) and b.n_replicates == 4 * len(inside)
    pooled = sum(b.accuracy * b.n_replicates for b in bins) / 24
    np.testing.assert_allclose(pooled, u.accuracy)
    edges = [bins[0].lo] + [b.hi for b in bins]
    for bu, bv in zip(bins, v.by_gap(edges=edges)):
        assert (bu.n_replicates, bu.n_instances, bu.lo, bu.hi) == (
            bv.n_replicates, bv.n_instances, bv.lo, bv.hi)
        assert bv.accuracy[-1] == 1.0  # every arm fully evaluated at 100%


def test_skip_separated_default_follows_the_mode():
    spec = SyntheticSpec(n_items=30)
    kw = dict(K=3, n_replicates=8, cs_kinds=("eb",))
    conf = simulate_identification(spec, "ucbe", mode="confidence", budgets=(90,), **kw)
    assert conf.settings["skip_separated"] is True
    assert simulate_identification(spec, "ucbe", budgets=(90,), **kw).settings[
        "skip_separated"] is False
    off = simulate_identification(spec, "ucbe", mode="confidence", budgets=(90,),
                                  skip_separated=False, **kw)
    assert off.settings["skip_separated"] is False
    assert conf.calls_used[-1] <= off.calls_used[-1]
    sr = simulate_identification(spec, "sysrs", mode="confidence", budgets=(90,), **kw)
    assert sr.settings["skip_separated"] is False  # SySRs: its own schedule
    with pytest.raises(ValueError, match="skip_separated: needs"):
        simulate_identification(spec, "sysrs", skip_separated=True, budgets=(90,), **kw)
    with pytest.raises(TypeError, match="skip_separated: expected True or False"):
        simulate_identification(spec, "ucbe", skip_separated="yes", budgets=(90,), **kw)
    # eps is the skip's test too: no "has no effect" warning for it in budget mode then
    with pytest.warns(UserWarning, match="eps=0.2 has no effect"):
        simulate_identification(spec, "ucbe", budgets=(90,), eps=0.2, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate_identification(spec, "ucbe", budgets=(90,), eps=0.2, skip_separated=True,
                                **kw)


def test_calls_to_interval_covers_at_its_level():
    """The cluster bootstrap's 90% interval for calls_to, over 60 independent small
    studies, covers the calls_to of a 4 096-replicate study as often as it says
    (binomial tolerance), and is not trivially wide."""
    spec = SyntheticSpec(n_items=40)
    kw = dict(K=3, budget_fractions=(0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0), cs_kinds=("eb",))
    truth = simulate_identification(spec, "ucbe", n_replicates=4096, seed=999,
                                    **kw).calls_to(0.8)
    runs, hits, widths = 60, 0, []
    for s in range(runs):
        rep = simulate_identification(spec, "ucbe", n_replicates=128, seed=s, **kw)
        lo, hi = rep.calls_to_interval(0.8, level=0.9, n_boot=400, seed=s)
        assert lo <= rep.calls_to(0.8) <= hi
        hits += lo <= truth <= hi
        widths.append(hi - lo)
    assert hits / runs >= 0.9 - 3 * np.sqrt(0.9 * 0.1 / runs), hits
    assert np.isfinite(widths).all() and np.mean(widths) < 0.3 * rep.total_calls


def _logistic_matrix(m=40, n=30, seed=0):
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.3, 0.8, m)
    logit = np.log(theta / (1 - theta))[:, None] + rng.normal(0, 1, n)[None, :]
    s = rng.random((m, n)) < 1 / (1 + np.exp(-logit))
    return jaxeval.ScoreMatrix(s.astype(np.float32))


def test_calls_to_intervals_cover_over_instances():
    """On real-data reports the bootstrap resamples instances (clusters of replicates).
    Over 60 independent studies of 20 instances, the 90% interval for calls_to and the
    paired one for UCB-E / uniform cover the values of a 4 000-instance study as often
    as they say (binomial tolerance). benchmarks/experiments/calls_to_interval_coverage.py
    measures 200 studies: 0.885 / 0.955 at 20 instances, 0.78 / 0.955 at 10."""
    sm = _logistic_matrix()
    kw = dict(K=3, budget_fractions=(0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0), cs_kinds=("eb",),
              n_train=0)
    big = dict(kw, n_replicates=16384, n_instances=4000, seed=999)
    tu = simulate_identification(sm, "ucbe", **big).calls_to(0.8)
    tv = simulate_identification(sm, "uniform", **big).calls_to(0.8)
    assert 0.8 < tu / tv < 0.95  # a real difference for the ratio to cover
    runs, hit_u, hit_r, w_u, w_r = 60, 0, 0, [], []
    for s in range(runs):
        k2 = dict(kw, n_replicates=160, n_instances=20, instance_assignment="balanced", seed=s)
        u = simulate_identification(sm, "ucbe", **k2)
        v = simulate_identification(sm, "uniform", **k2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # 20 instances: no undercoverage warning
            lo, hi = u.calls_to_interval(0.8, level=0.9, n_boot=400, seed=s)
        hit_u += lo <= tu <= hi
        w_u.append(hi - lo)
        _, lo, hi = u.calls_to_ratio(v, 0.8, level=0.9, n_boot=400, seed=s)
        hit_r += lo <= tu / tv <= hi
        w_r.append(hi - lo)
    tol = 3 * np.sqrt(0.9 * 0.1 / runs)
    assert hit_u / runs >= 0.9 - tol, hit_u
    assert hit_r / runs >= 0.9 - tol, hit_r
    # and not by being trivially wide (measured medians: 23.5 calls of 90, ratio 0.43)
    assert np.isfinite(w_u).all() and np.median(w_u) < 0.4 * u.total_calls, w_u
    assert np.isfinite(w_r).all() and np.median(w_r) < 0.7, w_r


def test_calls_to_ratio_is_paired_and_checked():
    sm = _small_matrix(m=24, n=30)
    kw = dict(K=3, n_replicates=48, n_instances=8, seed=2, budget_fractions=(0.1, 0.3, 0.6, 1.0),
              cs_kinds=("eb",))
    a = simulate_identification(sm, "ucbe", **kw)
    b = simulate_identification(sm, "uniform", **kw)
    assert a.calls_to_ratio(a, 0.9) == (1.0, 1.0, 1.0)  # the same draws, paired
    r, lo, hi = a.calls_to_ratio(b, 0.9, n_boot=300)
    assert r == pytest.approx(a.calls_to(0.9) / b.calls_to(0.9)) and lo <= r <= hi
    with pytest.warns(UserWarning, match="a bootstrap over 8 instances can undercover"):
        lo_a, hi_a = a.calls_to_interval(0.9, fraction=True)
    assert lo_a <= a.calls_to(0.9, fraction=True) <= hi_a <= 1.0
    other = simulate_identification(sm, "uniform", **dict(kw, seed=3))
    with pytest.raises(ValueError, match="other: not played on the same instances"):
        a.calls_to_ratio(other)
    with pytest.raises(TypeError, match="other: expected an IdentificationReport"):
        a.calls_to_ratio("b")
    for bad, match in ((dict(level=1.0), "level: expected a number in"),
                       (dict(n_boot=10), r"n_boot: expected an integer in \[100"),
                       (dict(accuracy=1.5), r"accuracy: expected a number in \(0, 1\]"),
                       (dict(seed=None), "seed: expected an integer >= 0, got NoneType")):
        with pytest.raises(TypeError if "NoneType" in match else ValueError, match=match):
            a.calls_to_interval(**bad)
    with pytest.raises(TypeError, match="fraction: expected True or False"):
        a.calls_to_interval(fraction="yes")
    # calls_to (of the report and of a gap bin) checks its target alike: 95 (a percent)
    # and NaN read as "never reached" (inf), 0 and -1 as the first checkpoint
    for target in (a, a.by_gap()[0]):
        for bad in (95, 0.0, -1, float("nan")):
            with pytest.raises(ValueError, match=r"accuracy: expected a number in \(0, 1\] "
                               r"\(a share, not a percent\), got"):
                target.calls_to(bad)
        with pytest.raises(TypeError, match="accuracy must be a number, got str"):
            target.calls_to("0.9")
    one = simulate_identification(sm, "ucbe", **dict(kw, n_instances=1))
    with pytest.raises(ValueError, match="needs at least 2 of them, the report has 1"):
        one.calls_to_interval()


def test_report_saves_and_loads_back_whole_and_prints_short(tmp_path):
    """to_npz writes atomically and returns the path; from_npz gives back every array,
    the settings and the figures derived from them; repr is one line (the report of
    R replicates printed every array: 7.6 kB at R = 200)."""
    rep = simulate_identification(SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=16,
                                  seed=2)
    path = rep.to_npz(tmp_path / "rep")
    assert path == tmp_path / "rep.npz" and path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep.npz"]  # no temporary left
    for where in (path, tmp_path / "rep", str(path)):
        back = IdentificationReport.from_npz(where)
        for f in dataclasses.fields(rep):
            a, b = getattr(rep, f.name), getattr(back, f.name)
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=f.name)
        assert back.cs_kinds == rep.cs_kinds and back.settings == rep.settings
        assert back.summary() == rep.summary() and back.calls_to(0.9) == rep.calls_to(0.9)
    text = repr(rep)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith("IdentificationReport(policy='ucbe', data='synthetic(") and "K=3" in text
    # a binary file object is written as is; a missing file is a FileNotFoundError
    import io

    buf = io.BytesIO()
    assert rep.to_npz(buf) is None and buf.getvalue()[:2] == b"PK"
    with pytest.raises(FileNotFoundError, match="no such report file"):
        IdentificationReport.from_npz(tmp_path / "missing")
    # settings hold the checked numbers, so a saved report's settings rerun its study
    odd = simulate_identification(SyntheticSpec(n_items=40), "ucbe", K=3, n_replicates=4,
                                  seed=np.int64(2), a=np.float32(2.0))
    back = IdentificationReport.from_npz(odd.to_npz(tmp_path / "odd"))
    assert back.settings["seed"] == 2 and type(back.settings["seed"]) is int
    assert back.settings["a"] == 2.0 and type(back.settings["a"]) is float
    assert repr(dataclasses.replace(rep, settings={})).endswith("calls to 95%: ?)")
    jaxeval.synthetic_score_matrix(0, 4, 5).to_npz(tmp_path / "m.npz")
    with pytest.raises(ValueError, match="not an identification report saved by to_npz"):
        IdentificationReport.from_npz(tmp_path / "m.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.npz: not an identification report"):
        IdentificationReport.from_npz(tmp_path / "bad.npz")


def test_duplicate_rows_removed_are_counted_and_said():
    """Duplicate model rows are dropped before the split (as documented): the report
    counts them and its summary says so, instead of the pool silently shrinking."""
    sm = jaxeval.load("oll2_musr").drop_duplicates().take(models=range(40))
    doubled = ScoreMatrix(np.concatenate([sm.scores, sm.scores[:3]]),
                          models=list(sm.models) + ["copy-a", "copy-b", "copy-c"],
                          items=sm.items)
    rep = simulate_identification(doubled, "ucbe", K=3, n_replicates=4, n_train=0,
                                  progress=False)
    assert rep.settings["duplicates_removed"] == 3
    assert "data: 3 duplicate model rows removed" in rep.summary()
    clean = simulate_identification(sm, "ucbe", K=3, n_replicates=4, n_train=0,
                                    progress=False)
    assert clean.settings["duplicates_removed"] == 0 and "duplicate" not in clean.summary()


def test_integer_arguments_take_numpy_ints_and_0d_arrays():
    """K, n_replicates, seed (and SyntheticSpec's sizes) take a NumPy int or a 0-d
    integer array as that int, as seeds elsewhere do; the spec stores Python numbers (a
    0-d array would be unhashable and not a static shape); bools stay refused."""
    import jax.numpy as jnp

    spec = SyntheticSpec(n_items=np.array(40), rank=np.int64(2), model_scale=np.float32(1.5))
    assert type(spec.n_items) is int and type(spec.rank) is int and spec.n_items == 40
    assert type(spec.model_scale) is float and hash(spec) == hash(SyntheticSpec(40, 2, 1.5))
    a = simulate_identification(spec, "ucbe", K=jnp.int32(3), n_replicates=np.array(6),
                                seed=np.array(5))
    b = simulate_identification(SyntheticSpec(40, 2, 1.5), "ucbe", K=3, n_replicates=6,
                                seed=5)
    np.testing.assert_array_equal(a.recommended, b.recommended)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    assert a.settings["K"] == 3 and type(a.settings["seed"]) is int
    with pytest.raises(TypeError, match="K: expected an integer >= 2, got bool"):
        simulate_identification(spec, "ucbe", K=True)
    with pytest.raises(TypeError, match="n_replicates: expected an integer >= 1, got"):
        simulate_identification(spec, "ucbe", K=3, n_replicates=np.array([4]))


def test_sysrs_with_its_own_order_per_arm_is_warned_about():
    """SySRs with ``synchronized=False`` ran without a word (and reported as SySRs)
    although its shared item order is what defines it; the default is silent."""
    import warnings

    spec = SyntheticSpec(n_items=20)
    with pytest.warns(UserWarning, match=r"synchronized=False gives each arm its own item "
                                         r"order; SySRs is defined by one order shared"):
        simulate_identification(spec, "sysrs", K=3, n_replicates=4, synchronized=False,
                                budget_fractions=(0.5, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate_identification(spec, "sysrs", K=3, n_replicates=4,
                                budget_fractions=(0.5, 1.0))


def test_given_factors_are_recorded_and_their_documented_training_split_is_the_runs():
    """A run with ``factors=`` records them in ``settings["factorization"]`` (it left no
    trace), and the training models the docstring names are the ones the run holds
    out of the pool."""
    from jaxeval._simulate import split_pool

    sm = _small_matrix()
    train = sm.drop_duplicates().split_pool(sm.drop_duplicates().n_models // 2, seed=5)[0]
    held = split_pool(sm.drop_duplicates(), None, 3, 5)[0]
    assert train.models.tolist() == held.models.tolist()
    lr = jaxeval.fit_factorization(train, rank=1, rho=1.0, num_steps=20)
    rep = simulate_identification(sm, "pulse_ucb", K=3, n_replicates=4, seed=5, factors=lr,
                                  budget_fractions=(0.5, 1.0))
    assert rep.settings["factorization"] == f"given (factors=): {lr!r}"
    from jaxeval._factorization import ItemFactors

    bare = ItemFactors(np.asarray(lr.V), np.asarray(lr.c), np.asarray(lr.u_mean))
    rep = simulate_identification(sm, "pulse_ucb", K=3, n_replicates=4, seed=5,
                                  factors=bare, budget_fractions=(0.5, 1.0))
    assert rep.settings["factorization"] == "given (factors=): ItemFactors of rank 1 over 20 items"
