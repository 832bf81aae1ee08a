"""Arm-selection policies of the identification loop (METHODS.md 2.5).

Every policy is an arm index computed from the same per-arm summary
(:class:`ArmView`) of the loop state; the loop pulls the arm with the largest index
(ties go to the lowest arm index). The policy kind is static (it changes the
program); every numeric setting (UCB-E's ``a``, PULSE's exploration scale) is a
dynamic array, so new values never recompile.

- ``"uniform"``: round robin (the least-evaluated arm).
- ``"ucbe"``: UCB-E (Zhou et al.): ``mean_O(S) + sqrt(a / N)``, unpulled arms first.
- ``"naive"``: the UCB-E index on the naive pooled estimate ``(sum_O S + sum_U S_hat)/n``.
- ``"pulse"``: the ranking estimate (difference estimate of :mod:`jaxeval._estimators`)
  plus ``scale`` times the half-width of the arm's anytime-valid DR interval.
- ``"pulse_ucb"``: the ranking estimate plus ``sqrt(a / N)`` (the METHODS.md 6.3 prototype).
- ``"sysrs"``: synchronized successive rejects (Lyu et al.): phases; within phase ``k``
  every surviving arm is evaluated on the same first ``n_k`` items of a shared item
  order; at the end of a phase the surviving arm with the lowest estimate is
  rejected. Phase lengths follow Audibert & Bubeck's successive rejects for a horizon
  of ``T`` LLM calls: ``n_k = ceil((T - K) / (logbar(K) (K + 1 - k)))`` items per arm,
  ``logbar(K) = 1/2 + sum_{i=2}^K 1/i``, capped at ``n``; the calls spent are
  ``sum_k n_k + n_{K-1} <= T``.

Fully evaluated arms are never pulled again (their index is ``-inf``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "POLICIES",
    "PREDICTION_POLICIES",
    "ArmView",
    "PolicyState",
    "choose_arm",
    "policy_init",
    "sr_phase_lengths",
]

POLICIES = ("uniform", "ucbe", "naive", "pulse", "pulse_ucb", "sysrs")
#: Policies whose index needs the factorization's predictions.
PREDICTION_POLICIES = ("naive", "pulse", "pulse_ucb")


class ArmView(NamedTuple):
    """What a policy sees of the loop state (all ``[K]``).

    Attributes:
      count: int32 items evaluated per arm.
      full: bool, arm fully evaluated.
      mean_obs: ``sum_O S / max(count, 1)``.
      estimate: the ranking estimate (difference estimate; the sample mean for λ = 0).
      naive: the naive pooled estimate.
      half_width: half-width of the arm's anytime-valid interval (``inf`` before any draw).
    """

    count: jax.Array
    full: jax.Array
    mean_obs: jax.Array
    estimate: jax.Array
    naive: jax.Array
    half_width: jax.Array


class PolicyState(NamedTuple):
    """Policy-owned state: survivors and the phase (used by ``"sysrs"`` only).

    Attributes:
      alive: bool ``[K]`` arms not yet rejected.
      phase: int32 current phase (0-based).
    """

    alive: jax.Array
    phase: jax.Array


def policy_init(num_arms: int) -> PolicyState:
    """All arms alive, phase 0."""
    return PolicyState(jnp.ones((num_arms,), bool), jnp.zeros((), jnp.int32))


def sr_phase_lengths(num_arms: int, horizon: int, n: int) -> tuple[int, ...]:
    """Per-arm item counts at the end of each successive-rejects phase (static).

    Args:
      num_arms: ``K >= 2``.
      horizon: the LLM-call budget ``T`` the schedule is planned for.
      n: number of items (each ``n_k`` is capped at ``n``).

    Returns:
      ``K - 1`` non-decreasing integers ``n_1 <= ... <= n_{K-1}``, each at least 1.

    Example:
      >>> sr_phase_lengths(3, 30, 100)  # logbar(3) = 1/2 + 1/2 + 1/3
      (7, 11)
    """
    K = int(num_arms)
    if K < 2:
        return ()
    logbar = 0.5 + sum(1.0 / i for i in range(2, K + 1))
    out = []
    for k in range(1, K):
        nk = math.ceil((horizon - K) / (logbar * (K + 1 - k)))
        out.append(int(min(max(nk, 1), n)))
    return tuple(out)


def _argmax_first(x: jax.Array) -> jax.Array:
    return jnp.argmax(x).astype(jnp.int32)


def choose_arm(
    kind: str,
    view: ArmView,
    pstate: PolicyState,
    a: jax.Array,
    scale: jax.Array,
    phase_lengths: tuple[int, ...] = (),
):
    """Pick the next arm.

    Args:
      kind: static policy name (one of :data:`POLICIES`).
      view: the per-arm summary.
      pstate: the policy state.
      a: UCB-E exploration constant (dynamic).
      scale: PULSE exploration scale (dynamic).
      phase_lengths: static SySRs schedule from :func:`sr_phase_lengths`.

    Returns:
      ``(arm int32, item_cap int32, ok bool, new_pstate)``: ``item_cap`` is the most
      items the arm may draw in this step (the phase end for SySRs, else a large
      number); ``ok`` is False when no arm can be pulled (the step is then a no-op).
    """
    count = view.count
    nf = jnp.maximum(count, 1).astype(jnp.float32)
    pulled = count > 0
    big = jnp.int32(2**30)
    if kind == "uniform":
        idx = -count.astype(jnp.float32)
    elif kind == "ucbe":
        idx = jnp.where(pulled, view.mean_obs + jnp.sqrt(a / nf), jnp.inf)
    elif kind == "naive":
        idx = jnp.where(pulled, view.naive + jnp.sqrt(a / nf), jnp.inf)
    elif kind == "pulse":
        idx = jnp.where(pulled, view.estimate + scale * view.half_width, jnp.inf)
    elif kind == "pulse_ucb":
        idx = jnp.where(pulled, view.estimate + jnp.sqrt(a / nf), jnp.inf)
    elif kind == "sysrs":
        return _sysrs_choose(view, pstate, phase_lengths)
    else:
        raise ValueError(f"policy: expected one of {POLICIES}, got {kind!r}")
    idx = jnp.where(view.full, -jnp.inf, idx)
    arm = _argmax_first(idx)
    return arm, big, ~view.full[arm], pstate


def _sysrs_choose(view: ArmView, pstate: PolicyState, phase_lengths: tuple[int, ...]):
    K = view.count.shape[0]
    lengths = jnp.asarray(phase_lengths + (phase_lengths[-1] if phase_lengths else 1,), jnp.int32)
    alive = pstate.alive
    phase = pstate.phase
    target = lengths[jnp.minimum(phase, K - 1)]
    n_alive = jnp.sum(alive)
    # a surviving arm that is exhausted cannot go further; it counts as at target
    at_target = (view.count >= target) | view.full
    complete = jnp.all(at_target | ~alive) & (n_alive > 1)
    # reject the surviving arm with the lowest estimate (ties: the highest index)
    worst = K - 1 - _argmax_first(jnp.where(alive, -view.estimate, -jnp.inf)[::-1])
    alive = jnp.where(complete, alive.at[worst].set(False), alive)
    phase = jnp.where(complete, phase + 1, phase)
    target = lengths[jnp.minimum(phase, K - 1)]
    # the survivor furthest behind (ties: lowest index) is evaluated next
    behind = alive & (view.count < target) & ~view.full
    idx = jnp.where(behind, -view.count.astype(jnp.float32), -jnp.inf)
    arm = _argmax_first(idx)
    single = jnp.sum(alive) == 1
    # once one arm survives, it keeps being evaluated until the budget ends
    last = _argmax_first(alive)
    arm = jnp.where(single, last, arm)
    cap = jnp.where(single, jnp.int32(2**30), target - view.count[arm])
    ok = jnp.where(single, ~view.full[last], behind[arm])
    return arm, cap, ok, PolicyState(alive, phase)
