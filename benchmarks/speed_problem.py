"""The one identification problem every speed benchmark times (shared set-up).

``bench_speed.py``, ``bench_cores.py`` and the two timing experiments
(``experiments/order_keys_proto.py``, ``experiments/pulse_step_profile.py``) all time
the kernels on the same work: one OLL v2 set (IFEval by default), its deduplicated
models split in half (training models for the factorization, candidate pool), ten
candidate sets of ``K`` pool models drawn with ``numpy.random.default_rng(seed)``, and
the SPEC 6.1 budget grid up to ``max_frac`` of ``K n``. :func:`speed_problem` builds it
once, so that a figure of one script and a figure of another describe the same problem.

Example (from the repository root)::

    >>> import sys; sys.path.insert(0, "benchmarks")
    >>> from speed_problem import speed_problem
    >>> p = speed_problem("ifeval", K=10, max_frac=0.2, fit=False)
    >>> p.K, p.n, p.budgets[-1], p.instances.shape
    (10, 541, 1082, (10, 10))
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax.numpy as jnp  # noqa: E402
from bench_banditeval import DATASETS  # noqa: E402

import jaxeval  # noqa: E402
from jaxeval import _identification as idn  # noqa: E402
from jaxeval._factorization import ItemFactors  # noqa: E402
from jaxeval._simulate import DEFAULT_BUDGET_FRACTIONS  # noqa: E402

__all__ = ["SpeedProblem", "speed_problem"]


class SpeedProblem(NamedTuple):
    """What the speed benchmarks share (numpy arrays for the NumPy reference, the
    kernel's ``ProblemData`` / ``Params`` for jaxeval).

    Attributes:
      pool_scores: float32 ``[P, n]`` candidate-pool scores.
      instances: int ``[10, K]`` pool rows of each candidate set.
      K, n: arms per instance, items.
      budgets: the checkpoints in LLM calls (SPEC 6.1 grid up to ``max_frac``).
      V, c, u_mean: float32 item factors, item offsets, prior mean of a model factor
        (zeros when ``fit=False``: UCB-E never reads them).
      rho: the online prior's strength.
      data: ``ProblemData(pool_scores, instances, ItemFactors(V, c, u_mean))``.
      params: ``Params.make(a=1, scale=1, rho=rho)``.
    """

    pool_scores: np.ndarray
    instances: np.ndarray
    K: int
    n: int
    budgets: tuple
    V: np.ndarray
    c: np.ndarray
    u_mean: np.ndarray
    rho: float
    data: idn.ProblemData
    params: idn.Params


def speed_problem(dataset: str = "ifeval", *, K: int = 10, max_frac: float = 0.2,
                  seed: int = 0, rank: int = 8, fit: bool = True) -> SpeedProblem:
    """Build the shared speed-benchmark problem.

    Args:
      dataset: a key of ``bench_banditeval.DATASETS``.
      K: models per candidate set.
      max_frac: the budget grid's last point as a share of ``K n``.
      seed: the split, the candidate sets and the factorization's seed.
      rank: rank of the factorization (also the shape of the zero factors).
      fit: fit the factorization on the training half (500 steps); ``False`` gives zero
        factors of the right shapes, for UCB-E-only timings.
    """
    if dataset not in DATASETS:
        raise ValueError(f"dataset: expected one of {sorted(DATASETS)}, got {dataset!r}")
    sm = jaxeval.load(DATASETS[dataset]).drop_duplicates()
    train, pool = sm.split([sm.n_models // 2], seed=seed)
    pool_s = np.asarray(pool.scores, np.float32)
    n = pool_s.shape[1]
    if not 2 <= K <= pool_s.shape[0]:
        raise ValueError(f"K: a candidate set of {dataset!r} holds 2 to {pool_s.shape[0]} "
                         f"models (its report pool), got {K}")
    rng = np.random.default_rng(seed)
    instances = np.stack([rng.choice(pool_s.shape[0], K, replace=False) for _ in range(10)])
    fracs = [f for f in DEFAULT_BUDGET_FRACTIONS if f <= max_frac + 1e-12]
    if not fracs:
        raise ValueError(f"max_frac: {max_frac:g} leaves no budget (the smallest budget "
                         f"fraction is {DEFAULT_BUDGET_FRACTIONS[0]:g})")
    budgets = tuple(sorted({max(1, round(f * K * n)) for f in fracs}))
    if fit:
        lr = jaxeval.fit_factorization(train, rank=rank, rho=1.0, seed=seed, num_steps=500)
        V, c, u_mean = (np.asarray(x, np.float32) for x in (lr.V, lr.c, lr.u_mean))
        rho = float(getattr(lr, "rho_u", 1.0))
    else:
        V = np.zeros((n, rank), np.float32)
        c = np.zeros(n, np.float32)
        u_mean = np.zeros(rank, np.float32)
        rho = 1.0
    data = idn.ProblemData(jnp.asarray(pool_s), jnp.asarray(instances, jnp.int32),
                           ItemFactors(jnp.asarray(V), jnp.asarray(c), jnp.asarray(u_mean)))
    params = idn.Params.make(a=1.0, scale=1.0, rho=rho)
    return SpeedProblem(pool_s, instances, K, n, budgets, V, c, u_mean, rho, data, params)
