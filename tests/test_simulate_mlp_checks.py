"""Argument checks: budget strings, bools and NaN, draw_instances, level_text near 100%,
the MLP's dropout rate and step counts (each refused naming the argument)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval import _simulate
from jaxeval._simulate import draw_instances
from jaxeval.anchors._intervals import level_text
from jaxeval.anchors._mlp import dropout_keep, train_mlp

cb = _simulate._canonical_budgets


@pytest.mark.parametrize("fractions", ["1", "05", "0.5", b"1", [True], [0.5, True],
                                       [np.True_], ["0.5"], np.array([True, True])])
def test_budget_fractions_refuse_strings_and_bools(fractions):
    with pytest.raises(TypeError, match="^budget_fractions must be a sequence of numbers"):
        cb(None, fractions, 60)


@pytest.mark.parametrize("budgets", ["12", [True, 10], [10, "20"], np.array([True]),
                                     np.array(["10"])])
def test_budgets_refuse_strings_and_bools(budgets):
    with pytest.raises(TypeError, match="^budgets must be a sequence of integers"):
        cb(budgets, None, 60)


def test_simulate_identification_refuses_a_string_of_fractions():
    s = np.random.default_rng(0).random((6, 10)) < 0.5
    sm = jaxeval.ScoreMatrix(s.astype(np.float32))
    for kw in (dict(budget_fractions="1"), dict(budgets="12")):
        with pytest.raises(TypeError, match="not a string"):
            _simulate.simulate_identification(sm, "ucbe", K=3, n_replicates=4, **kw)


def test_budget_sequences_still_accepted():
    assert cb(None, (0.5, 1.0), 60) == (30, 60)
    assert cb(None, np.array([0.5, 1.0]), 60) == (30, 60)
    assert cb(None, (f for f in (0.5, 1.0)), 60) == (30, 60)
    assert cb([10, 20], None, 60) == (10, 20)
    assert cb(np.array([20, 10]), None, 60) == (10, 20)


@pytest.mark.parametrize("budgets", [[math.nan], [10.0, math.inf], [-math.inf]])
def test_nonfinite_budgets_refused_without_the_fractions_hint(budgets):
    with pytest.raises(ValueError, match="^budgets must be finite") as e:
        cb(budgets, None, 60)
    assert "budget_fractions" not in str(e.value)
    # (a finite share still gets the hint)
    with pytest.raises(ValueError, match="go in budget_fractions=$"):
        cb([0.5, 2.0], None, 60)


@pytest.mark.parametrize("args, exc, match", [
    ((2, 3, 4, 0), ValueError, r"^K: expected an integer in \[1, 2\]"),
    ((5, 0, 4, 0), ValueError, r"^K: expected an integer in \[1, 5\]"),
    ((5, 2.0, 4, 0), TypeError, "^K: expected an integer"),
    ((5, 2, 0, 0), ValueError, "^n_instances: expected an integer >= 1"),
    ((0, 1, 4, 0), ValueError, "^n_pool: expected an integer >= 1"),
    ((5, 2, 4, -1), ValueError, "^seed: expected an integer >= 0"),
])
def test_draw_instances_names_the_bad_argument(args, exc, match):
    with pytest.raises(exc, match=match):
        draw_instances(*args)


def test_draw_instances_unchanged_for_good_arguments():
    rng = np.random.default_rng([7, 3])
    want = np.stack([rng.choice(16, 3, replace=False) for _ in range(4)])
    np.testing.assert_array_equal(draw_instances(16, np.int64(3), 4, np.int64(7)), want)


@pytest.mark.parametrize("alpha", [1e-12, 1e-13, 5e-14, 1e-14, 1e-15, 1e-16, 1e-17, 1e-300,
                                   5e-324])
def test_level_text_never_says_100_for_positive_alpha(alpha):
    text = level_text(alpha)
    assert text != "100%" and text.endswith("%")
    if text.startswith("("):
        assert text.startswith("(100 - ")
    else:
        assert float(text[:-1]) < 100.0


def test_level_text_tiny_alpha_values():
    assert level_text(1e-13) == "99.99999999999%"
    assert level_text(1e-15) == "99.9999999999999%"
    assert level_text(1e-17) == "(100 - 1e-15)%"
    assert level_text(0.0) == "100%"
    assert level_text(1e-9) == "99.9999999%"


@pytest.mark.parametrize("rate, exc", [(1.5, ValueError), (1.0, ValueError),
                                       (-0.1, ValueError), (math.nan, ValueError),
                                       (np.float32(1.0), ValueError), (True, TypeError)])
def test_dropout_keep_refuses_a_rate_outside_0_1(rate, exc):
    with pytest.raises(exc, match=r"^rate: expected a rate in \[0, 1\)"):
        dropout_keep(jax.random.key(0), (3,), rate)


def test_dropout_keep_good_rates():
    assert bool(dropout_keep(jax.random.key(0), (3,), 0.0).all())
    assert dropout_keep(jax.random.key(0), (3,), np.float64(0.5)).shape == (3,)


def _xy():
    x = jnp.asarray(np.random.default_rng(0).random((6, 2)), jnp.float32)
    return x, x.mean(axis=1)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(dropout=1.0), ValueError, r"^dropout: expected a rate in \[0, 1\), got 1.0"),
    (dict(dropout=-0.5), ValueError, r"^dropout: expected a rate in \[0, 1\)"),
    (dict(dropout=math.nan), ValueError, r"^dropout: expected a rate in \[0, 1\)"),
    (dict(eval_every=0), ValueError, "^eval_every: expected an integer >= 1, got 0"),
    (dict(eval_every=-2), ValueError, "^eval_every: expected an integer >= 1"),
    (dict(num_steps=0), ValueError, "^num_steps: expected an integer >= 1, got 0"),
    (dict(num_steps=4.0), TypeError, "^num_steps: expected an integer >= 1"),
    (dict(hidden=(4, 0)), ValueError, r"^hidden\[1\]: expected an integer >= 1, got 0"),
])
def test_train_mlp_refuses_bad_settings_by_name(kwargs, exc, match):
    x, y = _xy()
    kw = dict(num_steps=4, eval_every=2, hidden=(4,)) | kwargs
    with pytest.raises(exc, match=match):
        train_mlp(jax.random.key(0), x, y, x, y, **kw)


def test_train_mlp_small_run_still_trains():
    x, y = _xy()
    fit, _ = train_mlp(jax.random.key(0), x, y, x, y, num_steps=4, eval_every=2,
                       hidden=(4,), dropout=0.0)
    assert np.isfinite(float(fit.final_train))
