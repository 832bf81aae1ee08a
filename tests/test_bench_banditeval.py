"""``benchmarks/bench_banditeval.py --same-orders``: banditeval's own UCB-E step, driven
with jaxeval's item orders, makes jaxeval's decisions (issue 7: "jaxeval's UCB-E must be
statistically indistinguishable from banditeval's"; with the same orders it is identical).

Needs the optional peers (``pip install torch==2.13.0 banditeval==0.1.1``, or the
``bench`` extra); skipped without them, as in CI, which installs only the test extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("banditeval")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_banditeval as bb  # noqa: E402

import jaxeval  # noqa: E402


@pytest.fixture(scope="module")
def pool_s():
    dd = jaxeval.load("oll2_ifeval").drop_duplicates()
    _, pool = dd.split([dd.n_models // 2], seed=0)
    return np.asarray(pool.scores, np.float32)


def _rep(batch_size, a):
    return jaxeval.simulate_identification(
        jaxeval.load("oll2_ifeval"), "ucbe", K=4, budget_fractions=(0.01, 0.03, 0.1, 0.2),
        n_replicates=6, n_instances=3, seed=0, a=a, batch_size=batch_size, cs_kinds=("eb",))


def test_ordered_torch_draws_the_arms_next_items():
    import torch

    orders = np.array([[3, 0, 2, 1], [1, 2, 3, 0]])
    ot = bb._OrderedTorch(torch, orders)
    ot.argmax(torch.tensor([0.1, 0.7]))  # the step chooses arm 1
    unobserved = torch.tensor([0, 3])  # arm 1 has seen items 1 and 2 (its order's prefix)
    assert unobserved[ot.randperm(2)].tolist() == [3, 0]
    with pytest.raises(RuntimeError, match="before the step chose an arm"):
        ot.randperm(2)  # one draw per choice
    assert ot.float32 is torch.float32  # everything else is torch


@pytest.mark.parametrize("batch_size, a", [(1, 1.0), (3, 0.1), (32, 10.0)])
def test_banditeval_on_jaxevals_orders_makes_jaxevals_decisions(pool_s, batch_size, a):
    rep = _rep(batch_size, a)
    same = bb.same_orders_check(rep, pool_s, a=a, batch_size=batch_size, seed=0)
    assert same["replicates"] == 6 and same["checkpoints"] == 24
    assert same["identical"] == 6 and same["checkpoints_differing"] == 0, same


def test_the_check_fails_on_other_orders_or_another_a(pool_s):
    rep = _rep(1, 1.0)
    other_orders = bb.same_orders_check(rep, pool_s, a=1.0, batch_size=1, seed=1)
    assert other_orders["checkpoints_differing"] > 0
    assert other_orders["first_difference"] is not None
    # a near-greedy a changes which arm leads at some checkpoint of these replicates
    other_a = bb.same_orders_check(rep, pool_s, a=0.01, batch_size=1, seed=0)
    assert other_a["checkpoints_differing"] > 0


def test_orders_refused_for_lrf_or_a_wrong_shape():
    S = np.zeros((3, 5), np.float32)
    with pytest.raises(ValueError, match="orders: only"):
        bb.banditeval_ucbe(S, [4], lrf=True, orders=np.zeros((3, 5), int))
    with pytest.raises(ValueError, match=r"orders: expected shape \(3, 5\)"):
        bb.banditeval_ucbe(S, [4], orders=np.zeros((3, 4), int))
