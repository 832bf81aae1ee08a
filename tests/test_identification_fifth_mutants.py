"""Gaps found by a fifth mutation review of the identification loop
(``jaxeval/_identification.py``): behaviours a plausible one-line bug changed without any
other test failing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_identification import N, _data, _run
from test_numpy_reference import K, _problem, ref

from jaxeval import _identification as idn
from jaxeval import _sampling as smp
from jaxeval._factorization import ItemFactors


def test_eb_centre_is_clipped_into_the_terms_range_like_the_numpy_reference():
    """The empirical-Bernstein centre of each DR term is the arm's estimate clipped into
    the term's predictable range [lo, hi] (METHODS.md 2.3). On a shared item order whose
    first two items are predicted 0.9 and score 0 (every other item predicted 0.3), λ
    pinned at 1 puts each arm's difference estimate after its first batch near -0.6,
    below the next terms' range (lower end 0): the bounds must still be the plain NumPy
    PULSE's, which clips the centre."""
    _, (V, _, u_mean), data = _problem()
    n = V.shape[0]
    key = jax.random.key(3)
    ok = jax.random.fold_in(key, idn._PURPOSE_ORDER)
    order = np.asarray(smp.arm_order(ok, 0, n, True))
    V = np.zeros_like(V)  # predictions sigmoid(c) whatever the refit
    p = np.full(n, 0.3)
    p[order[:2]] = 0.9
    c = np.log(p / (1 - p)).astype(np.float32)
    S = (np.random.default_rng(1).random((K, n)) < [[0.2], [0.4], [0.5], [0.6]])
    S = S.astype(np.float32)
    S[:, order[:2]] = 0.0
    data = idn.ProblemData(jnp.asarray(S), data.instances,
                           ItemFactors(jnp.asarray(V), jnp.asarray(c), jnp.asarray(u_mean)))
    budgets = (8, 20, 44, 80)
    kw = dict(alpha=0.1, scale=0.7, rho=1.0, lam0=1.0, shrink=1e9)
    cfg = idn.Config("pulse", num_arms=K, num_items=n, budgets=budgets, batch_size=2,
                     cs_kinds=("eb",), synchronized=True)
    out = jax.tree.map(np.asarray, jax.jit(idn.run_identification, static_argnums=3)(
        key, data, idn.Params.make(**kw), cfg))
    ck = out.checkpoints
    assert ck.estimate[0].max() < -0.5  # every arm's first batch: outside [0, 1]
    res = ref.pulse(S, np.tile(order, (K, 1)), budgets, V, c, u_mean, batch_size=2, **kw)
    np.testing.assert_array_equal(ck.pulls, res.pulls)
    assert ck.pulls[-1, :2].min() >= 6  # arms 0 and 1 pulled again after their first
    np.testing.assert_allclose(ck.lower[:, 0], res.lower, atol=1e-5)
    np.testing.assert_allclose(ck.upper[:, 0], res.upper, atol=1e-5)


def test_confidence_run_with_nan_bounds_and_finite_estimates_is_status_nonfinite():
    """A NaN α makes every interval NaN while the plain means stay finite; the stop never
    fires (NaN compares false), and the record says "non-finite", not "budget" nor
    "policy done"."""
    cfg = idn.Config("uniform", 3, N, budgets=(6,), mode="confidence", cs_kinds=("eb",))
    cp = _run(cfg, _data(), idn.Params.make(alpha=float("nan"))).checkpoints
    assert np.all(np.isnan(cp.lower)) and np.all(np.isfinite(cp.estimate))
    assert cp.calls.tolist() == [6]
    assert cp.status.tolist() == [idn.STATUS_NONFINITE]


@pytest.mark.parametrize("kw", [dict(refit=False), dict(corruption="adversarial")])
def test_streamed_rows_equal_whole_rows_with_predictions(kw):
    """Rows of 8 items streamed in blocks of 3 run the whole-row trajectory and record
    the same estimates, naive estimates, bounds and per-batch λ (to float32 rounding):
    without a refit the observed predictions' sum includes the batch just drawn (else
    the estimate moves by ~1e-1); λ is learned from each batch; the adversary's prior
    estimate at budget 0 is ``mean(1 - S)``."""
    pred = np.linspace(0.15, 0.85, N).astype(np.float32)
    params = idn.Params.make(shrink=1.0, lam0=0.5)
    outs = []
    for block in (3, idn.ITEM_BLOCK):
        cfg = idn.Config("pulse", 3, N, budgets=(0, 5, 11, 17), batch_size=2,
                         cs_kinds=("eb",), item_block=block, **kw)
        assert cfg.blocked == (block == 3)
        outs.append(_run(cfg, _data(pred), params).checkpoints)
    a, w = outs
    for name in ("calls", "pulls", "recommended", "status"):
        np.testing.assert_array_equal(getattr(a, name), getattr(w, name), err_msg=name)
    for name in ("estimate", "naive", "lower", "upper", "lam"):
        np.testing.assert_allclose(getattr(a, name), getattr(w, name), rtol=0, atol=2e-5,
                                   err_msg=name)
    assert np.all(w.lam[-1] != 0.5)  # λ learned from the earlier batches


def test_sysrs_with_two_checkpoints_is_planned_for_each_budget():
    """Without a horizon SySRs is run once per checkpoint budget (METHODS.md 2.5), also
    for two checkpoints: the first checkpoint of budgets (6, 24) is the run planned for
    6 calls (every arm pulled, 6 calls spent), not the 24-call plan read at 6 calls."""
    cfg = idn.Config("sysrs", 3, N, budgets=(6, 24), cs_kinds=("eb",))
    both = _run(cfg, _data()).checkpoints
    for c, b in enumerate(cfg.budgets):
        one = _run(idn.Config("sysrs", 3, N, budgets=(b,), cs_kinds=("eb",)), _data()).checkpoints
        for name in ("pulls", "calls", "recommended", "status", "estimate"):
            np.testing.assert_array_equal(getattr(both, name)[c], getattr(one, name)[0])
    planned = _run(idn.Config("sysrs", 3, N, budgets=(6, 24), horizon=24, cs_kinds=("eb",)),
                   _data()).checkpoints
    assert both.pulls[0].tolist() != planned.pulls[0].tolist()
