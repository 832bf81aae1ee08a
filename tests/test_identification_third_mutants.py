"""Gaps found by a third mutation review of the identification loop
(``jaxeval/_identification.py``): each test pins a behaviour that a plausible one-line
bug changed without any other test failing (the refusals of :class:`Config` and the
argument and values their messages name, its boundaries: ``num_items * rank`` at
``2**32``, budgets and loop steps at ``2**31``, whole rows at exactly ``item_block``
items, the order table at exactly :data:`ORDER_TABLE_MAX`; :meth:`Params.make`'s fields
and defaults; the instance drawn per replicate and synthetic truth's ``-1``; the one
record of a fixed-confidence SySRs run; each arm's ``alpha / K``; the non-finite status;
``make_replicate_fn``'s default settings)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_identification import POOL, N, _data, _run
from test_identification_deep_mutants import _pool_data

from jaxeval import _identification as idn


# ------------------------------------------------------------ Config refusals
def test_synthetic_num_items_times_rank_of_exactly_2_32_is_refused_naming_both():
    """Counter-based generators need ``num_items * rank < 2**32`` ("must stay below"):
    2**30 items of rank 4 is exactly 2**32 and is refused, the message giving each value
    under its own name; one item fewer is accepted."""
    with pytest.raises(ValueError, match=r"num_items \* rank must stay below 2\*\*32 .*got "
                                         r"num_items=1073741824, rank=4"):
        idn.Config("uniform", 2, 2**30, budgets=(4,), truth="synthetic", rank=4)
    idn.Config("uniform", 2, 2**30 - 1, budgets=(4,), truth="synthetic", rank=4)


def test_order_table_false_is_allowed_on_streamed_rows_and_true_names_the_sizes():
    """Only ``order_table=True`` needs whole rows: ``False`` on streamed rows is the
    default's own choice and is accepted. The refusal of ``True`` says which number of
    items exceeds which block size."""
    cfg = idn.Config("ucbe", 2, 5000, budgets=(8,), order_table=False)
    assert cfg.blocked and not cfg.tabled
    with pytest.raises(ValueError, match=r"order_table=True needs whole rows \(num_items=5000 "
                                         r"> item_block=2048"):
        idn.Config("ucbe", 2, 5000, budgets=(8,), order_table=True)


@pytest.mark.parametrize("kw, match", [
    (dict(mode="fixed"), r"mode: expected 'budget' or 'confidence', got 'fixed'"),
    (dict(truth="Synthetic"), r"truth: expected 'real' or 'synthetic', got 'Synthetic'"),
    (dict(corruption="flipped"), r"corruption: unknown kind 'flipped'; expected one of "
                                 r"\('none', 'biased', 'random', 'adversarial'\)"),
    (dict(budgets=(10, 4)), r"budgets must be a non-empty sorted tuple, got \(10, 4\)"),
    (dict(budgets=()), r"budgets must be a non-empty sorted tuple, got \(\)"),
    (dict(budgets=(4, 2**31)), r"budgets must lie in \[0, 2\*\*31\) LLM calls .*got 4\.\."
                               r"2147483648"),
])
def test_config_refuses_unknown_settings_naming_the_argument(kw, match):
    """An unknown mode, truth source or corruption, unsorted or empty budgets and a budget
    of exactly 2**31 calls (beyond the int32 counters) are refused by :class:`Config`
    itself, naming the argument and the value given (a misspelt mode or truth would
    otherwise silently run as another one)."""
    args = dict(budgets=(4,))
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        idn.Config("ucbe", 2, 2**27, **args)


def test_loop_steps_of_exactly_2_31_are_refused():
    """The step counter is int32: a final budget of 2**31 - 4 calls on two arms needs
    (2**31 - 4) + 1 checkpoint + 2 arms + 1 = 2**31 steps, one too many."""
    with pytest.raises(ValueError, match=r"budgets: the largest, 2147483644 LLM calls, needs "
                                         r"2147483648 loop steps"):
        idn.Config("uniform", 2, 2**27, budgets=(2**31 - 4,), truth="synthetic", rank=1)
    assert idn.Config("uniform", 2, 2**27, budgets=(2**31 - 5,), truth="synthetic",
                      rank=1).num_steps == 2**31 - 1


def test_whole_rows_and_order_tables_at_their_exact_limits():
    """Rows of exactly ``item_block`` items are whole (streamed only above it), and the
    item orders are materialised when ``K n`` is at most :data:`ORDER_TABLE_MAX`, the
    limit included."""
    at = idn.Config("ucbe", 3, idn.ITEM_BLOCK, budgets=(8,))
    assert not at.blocked and at.num_blocks == 1
    assert idn.Config("ucbe", 3, idn.ITEM_BLOCK + 1, budgets=(8,)).blocked
    K = idn.ORDER_TABLE_MAX // idn.ITEM_BLOCK
    assert idn.Config("ucbe", K, idn.ITEM_BLOCK, budgets=(8,)).tabled
    assert not idn.Config("ucbe", K + 1, idn.ITEM_BLOCK, budgets=(8,)).tabled


# ------------------------------------------------------------ Params
def test_params_make_fills_each_field_from_its_own_argument():
    """Every keyword of :meth:`Params.make` lands in the field of its name, as a float32
    scalar, and the defaults are the signature's."""
    names = idn.Params._fields
    given = {k: 0.5 + i for i, k in enumerate(names)}
    p = idn.Params.make(**given)
    for k in names:
        assert float(getattr(p, k)) == given[k], k
        assert getattr(p, k).dtype == jnp.float32 and getattr(p, k).shape == ()
    want = dict(alpha=0.05, a=1.0, scale=1.0, rho=1.0, lam0=1.0, shrink=10.0, eps=0.0,
                bias=0.3, scale_u=1.0, scale_c=1.5, mean_c=0.0)
    got = {k: float(v) for k, v in idn.Params.make()._asdict().items()}
    assert got == pytest.approx(want)


# ------------------------------------------------------------ instances
def test_every_instance_is_drawn_and_synthetic_truth_reports_minus_one():
    """Real data: each replicate plays an instance drawn uniformly from its key, the
    last one included (64 keys over 3 instances: each drawn, the counts within a wide
    binomial band), and ``theta`` is the played instance's row means. Synthetic truth
    plays no instance: ``instance`` is ``-1``."""
    data = idn.ProblemData(jnp.asarray(POOL), jnp.asarray([[0, 1], [2, 3], [4, 5]], jnp.int32),
                           _data().item_factors)
    cfg = idn.Config("uniform", 2, N, budgets=(0,), cs_kinds=("eb",))
    run = jax.jit(jax.vmap(idn.run_identification, in_axes=(0, None, None, None)),
                  static_argnums=3)
    keys = jax.random.split(jax.random.key(0), 64)
    out = jax.tree.map(np.asarray, run(keys, data, idn.Params.make(), cfg))
    counts = np.bincount(out.instance, minlength=3)
    assert counts.size == 3 and np.all(counts >= 8), counts
    rows = np.asarray(data.instances)[out.instance]
    np.testing.assert_allclose(out.theta, POOL[rows].mean(-1), rtol=1e-6)
    syn = idn.Config("uniform", 2, N, budgets=(0,), cs_kinds=("eb",), truth="synthetic")
    out = run(keys[:2], idn.dummy_data(syn), idn.Params.make(), syn)
    assert np.asarray(out.instance).tolist() == [-1, -1]


# ------------------------------------------------------------ fixed confidence
def test_fixed_confidence_sysrs_is_one_run_planned_for_the_cap():
    """In confidence mode ``budgets[-1]`` is the call cap and there is one record
    (``C = 1``): SySRs with budgets (6, 20) is the run with budgets (20,), planned for
    20 calls (not one run per budget, nor a plan for the first)."""
    data = _data()
    kw = dict(mode="confidence", cs_kinds=("eb",))
    two = _run(idn.Config("sysrs", 3, N, budgets=(6, 20), **kw), data)
    one = _run(idn.Config("sysrs", 3, N, budgets=(20,), **kw), data)
    assert two.checkpoints.calls.shape == (1,)
    assert int(one.checkpoints.calls[0]) > 6  # the check has teeth: more than the first
    for a, b in zip(jax.tree.leaves(two), jax.tree.leaves(one)):
        np.testing.assert_array_equal(a, b)


# 0/1 rows long enough that after 100 items the level, not the unseen items' range,
# sets the interval width
NL = 1000
LONG = (np.random.default_rng(1).random((4, NL))
        < np.array([[0.7], [0.6], [0.5], [0.4]])).astype(np.float32)


def test_each_arms_interval_is_at_level_alpha_over_k():
    """Each arm's two-sided interval uses ``alpha / K``: round robin on 2 arms at alpha =
    0.1 and on 4 arms at alpha = 0.2 (both 0.05 per arm) give arm 0 the same 100 items
    (its own order) and so the same bounds, for every kind; at alpha = 0.1 on 4 arms
    (0.025 per arm) they are wider."""
    out = {}
    for K, alpha in ((2, 0.1), (4, 0.2), (4, 0.1)):
        cfg = idn.Config("uniform", K, NL, budgets=(100 * K,), cs_kinds=("eb", "hoeffding"))
        cp = _run(cfg, _pool_data(LONG[:K], list(range(K))),
                  idn.Params.make(alpha=alpha)).checkpoints
        assert cp.pulls[0, 0] == 100
        out[K, alpha] = (cp.lower[0, :, 0], cp.upper[0, :, 0])
    for a, b in zip(out[2, 0.1], out[4, 0.2]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    w = {k: v[1] - v[0] for k, v in out.items()}
    assert np.all(w[4, 0.1] > w[2, 0.1] + 1e-3), w


@pytest.mark.parametrize("mode", ["budget", "confidence"])
def test_a_nan_estimate_with_finite_intervals_is_status_nonfinite(mode):
    """A NaN prediction makes the difference estimate NaN while the λ = 0 ("hoeffding")
    interval never reads the predictions and stays finite: the record's status is
    "non-finite" in either mode (the cap of 6 calls is too small to stop)."""
    pred = np.full(N, 0.5)
    pred[3] = np.nan
    cfg = idn.Config("uniform", 3, N, budgets=(6,), mode=mode, cs_kinds=("hoeffding",),
                     stop_kind="hoeffding", use_predictions=True)
    cp = _run(cfg, _data(pred)).checkpoints
    assert np.all(np.isfinite(cp.lower)) and not np.all(np.isfinite(cp.estimate))
    assert cp.status.tolist() == [idn.STATUS_NONFINITE]


# ------------------------------------------------------------ make_replicate_fn
def test_make_replicate_fn_of_data_alone_uses_the_default_params():
    """``make_replicate_fn(data, config)`` runs with ``Params.make()`` (the same output as
    :func:`run_identification` with it); given ``(data, params)`` it runs with those
    (here a larger alpha: narrower intervals)."""
    cfg = idn.Config("uniform", 2, NL, budgets=(200,), cs_kinds=("eb",))
    data, key = _pool_data(LONG[:2], [0, 1]), jax.random.key(2)
    want = _run(cfg, data, seed=2)
    got = jax.tree.map(np.asarray, jax.jit(idn.make_replicate_fn(data, cfg))(key))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(a, b)
    p = idn.Params.make(alpha=0.5)
    other = jax.tree.map(np.asarray, jax.jit(idn.make_replicate_fn((data, p), cfg))(key))
    for a, b in zip(jax.tree.leaves(other), jax.tree.leaves(_run(cfg, data, p, seed=2))):
        np.testing.assert_array_equal(a, b)
    w = lambda cp: cp.upper - cp.lower  # noqa: E731
    assert np.all(w(other.checkpoints) < w(got.checkpoints) - 1e-3)


# ------------------------------------------------------- fixes the review found
def test_config_given_a_list_of_budgets_is_hashable_and_jits():
    """``budgets`` (and ``cs_kinds``) given as lists are kept as tuples of Python ints: a
    list used to pass the checks and then fail as the kernel's static argument."""
    cfg = idn.Config("uniform", 2, 8, budgets=[np.int64(4), 16], cs_kinds=["eb"],
                     truth="synthetic")
    assert cfg.budgets == (4, 16) and type(cfg.budgets[0]) is int
    assert cfg.cs_kinds == ("eb",)
    assert hash(cfg) == hash(idn.Config("uniform", 2, 8, budgets=(4, 16), cs_kinds=("eb",),
                                        truth="synthetic"))
    run = jax.jit(idn.run_identification, static_argnums=3)
    out = run(jax.random.key(0), idn.dummy_data(cfg), idn.Params.make(), cfg)
    assert out.checkpoints.calls.tolist() == [4, 16]


@pytest.mark.parametrize("kw, exc, match", [
    (dict(num_arms=0), ValueError, r"num_arms: expected an integer >= 1, got 0"),
    (dict(num_arms=2.5), TypeError, r"num_arms: expected an integer"),
    (dict(num_items=0), ValueError, r"num_items: expected an integer >= 1, got 0"),
    (dict(num_items=8.0), TypeError, r"num_items: expected an integer"),
    (dict(num_newton=-1), ValueError, r"num_newton: expected an integer >= 0, got -1"),
    (dict(rank=0, truth="synthetic"), ValueError, r"rank: expected an integer >= 1, got 0"),
    (dict(use_predictions="no"), TypeError,
     r"use_predictions: expected True or False \(or None\), got 'no'"),
    (dict(synchronized=1), TypeError, r"synchronized: expected True or False \(or None\)"),
    (dict(refit=None), TypeError, r"refit: expected True or False, got None"),
    (dict(horizon=5), ValueError, r"horizon: only SySRs plans for a horizon, not policy 'ucbe'"),
    (dict(policy="sysrs", horizon=0), ValueError, r"horizon: expected an integer >= 1, got 0"),
    (dict(cs_kinds=(), stop_kind="bogus"), ValueError,
     r"stop_kind: expected one of \('eb', 'hoeffding', 'betting'\), got 'bogus'"),
    (dict(cs_kinds="eb"), TypeError, r"cs_kinds: expected a tuple of kinds .* \('eb',\)"),
    (dict(budgets=(4.5, 8)), ValueError, r"budgets: expected integer LLM call counts"),
    (dict(budgets=8), ValueError, r"budgets must be a non-empty sorted tuple, got 8"),
])
def test_config_refuses_counts_flags_and_settings_that_cannot_apply(kw, exc, match):
    """Every setting of :class:`Config` is checked by name where it is made (a zero
    ``num_arms`` used to fail deep in the trace, ``num_items=0`` blamed ``batch_size``, a
    string flag was read as True, and a horizon or stop kind that can do nothing passed)."""
    args = dict(policy="ucbe", num_arms=3, num_items=8, budgets=(4, 8))
    args.update(kw)
    with pytest.raises(exc, match=match):
        idn.Config(**args)


def test_config_flags_from_numpy_are_python_bools():
    cfg = idn.Config("ucbe", 3, 8, budgets=(4, 8), use_predictions=np.bool_(False),
                     refit=np.bool_(True), synchronized=None)
    assert cfg.use_predictions is False and cfg.refit is True and cfg.synchronized is None
