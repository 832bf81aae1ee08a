"""Gaps found by a fourth mutation review of the identification loop
(``jaxeval/_identification.py``): the doubly robust terms within one batch of ``b > 1``
items checked against the plain NumPy PULSE of ``benchmarks/numpy_reference.py`` on
whole and streamed rows (item ``j`` of a batch uses the observed sum including the
batch's earlier items and the unseen predictions excluding them), and further
behaviours a plausible one-line bug changed without any other test failing."""

import jax
import numpy as np
import pytest
from test_identification import N, _data, _run
from test_numpy_reference import K, _orders, _problem, ref

from jaxeval import _identification as idn

_REF_KW = dict(alpha=0.1, scale=0.7, rho=1.0, lam0=0.8, shrink=5.0)


@pytest.mark.parametrize("item_block", [idn.ITEM_BLOCK, 16])
def test_batch_dr_terms_match_the_numpy_reference_item_by_item(item_block):
    """PULSE with batches of 4 items, whole rows and rows streamed in blocks of 16: the
    first checkpoint is one batch of arm 0, later ones several batches of every arm; at
    every checkpoint the pulls are the reference's and the estimates and bounds agree
    to float32 rounding. A batch
    whose later items ignored the earlier ones' scores (observed sum) or predictions
    (unseen sum) moves the bounds by ~1e-2."""
    S, (V, c, u_mean), data = _problem()
    budgets = (4, 8, 20, 44, 80)
    cfg = idn.Config("pulse", num_arms=K, num_items=S.shape[1], budgets=budgets, batch_size=4,
                     cs_kinds=("eb",), item_block=item_block)
    assert cfg.blocked == (item_block == 16)
    key = jax.random.key(11)
    params = idn.Params.make(**_REF_KW)
    out = jax.tree.map(np.asarray, jax.jit(idn.run_identification, static_argnums=3)(
        key, data, params, cfg))
    ck = out.checkpoints
    res = ref.pulse(S, _orders(key), budgets, V, c, u_mean, batch_size=4, **_REF_KW)
    np.testing.assert_array_equal(ck.pulls, res.pulls)
    assert ck.pulls[0].tolist() == [4, 0, 0, 0]
    np.testing.assert_array_equal(ck.calls, res.calls)
    np.testing.assert_allclose(ck.estimate, res.estimate, atol=2e-5)
    np.testing.assert_allclose(ck.lower[:, 0], res.lower, atol=1e-5)
    np.testing.assert_allclose(ck.upper[:, 0], res.upper, atol=1e-5)
    assert (ck.lower[-1, 0] > 0.1).sum() == 3  # informative bounds


def test_prediction_run_records_the_prior_mean_prediction_before_any_pull():
    """With predictions, an arm not yet pulled is estimated by its mean prior prediction
    (``u = u_mean``): a checkpoint at budget 0 records it as both the ranking and the
    naive pooled estimate (no observed score yet), with no pulls and the trivial [0, 1]
    interval."""
    pred = np.linspace(0.2, 0.8, N).astype(np.float32)
    cfg = idn.Config("pulse", 3, N, budgets=(0, 4), cs_kinds=("eb",))
    cp = _run(cfg, _data(pred)).checkpoints
    assert cp.calls.tolist() == [0, 4] and cp.pulls[0].tolist() == [0, 0, 0]
    np.testing.assert_allclose(cp.estimate[0], np.full(3, pred.mean()), atol=1e-6)
    np.testing.assert_allclose(cp.naive[0], np.full(3, pred.mean()), atol=1e-6)
    assert np.all(cp.lower[0] == 0.0) and np.all(cp.upper[0] == 1.0)



def test_a_checkpoint_passed_between_two_batches_is_status_budget():
    """Batches of 3 on two arms of 8 items with checkpoints at 4 and 16 calls: the second
    batch would pass 4 calls, so the first checkpoint keeps the state after the first
    batch (3 calls, arm 0 only). The run went on past it, so its status is "budget"
    (its budget was reached), not "exhausted" (that is the final state's, at 16 calls)
    nor "policy done"."""
    cfg = idn.Config("uniform", 2, N, budgets=(4, 16), batch_size=3, cs_kinds=("eb",))
    cp = _run(cfg, _data()).checkpoints
    assert cp.calls.tolist() == [3, 16]
    assert cp.pulls.tolist() == [[3, 0], [8, 8]]
    assert cp.status.tolist() == [idn.STATUS_BUDGET, idn.STATUS_EXHAUSTED]
