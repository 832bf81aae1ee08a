"""The best-model identification loop (METHODS.md 2.1-2.6): one jitted run = one replicate.

Two levels of API:

- :func:`run_identification` ``(rep_key, data, params, config) -> IdentificationOutput``:
  the raw kernel for one replicate, pure and jittable, vmapped over replicates by the
  caller. ``data`` is a :class:`ProblemData` pytree of arrays (the truth source and the
  frozen item factors), ``params`` a :class:`Params` pytree of dynamic numeric settings
  (α, UCB-E's ``a``, PULSE's scale, ...; new values never recompile) and ``config`` a
  hashable, static :class:`Config` (shapes, budgets, policy kind, ...).
- :func:`make_replicate_fn` ``(problem, config) -> fn(rep_key) -> pytree`` for the study
  runner (:func:`jaxeval._runner.run_replicates`).

The loop. Each step a policy (:mod:`jaxeval._policies`) picks one arm; the arm draws its
next ``b`` unseen items from its own uniform without-replacement order
(:mod:`jaxeval._sampling`, O(K) state); for each drawn item the doubly robust term of
METHODS.md 2.3 (:mod:`jaxeval._estimators`) with the predictions and λ frozen before the batch
updates the arm's confidence sequences (:mod:`jaxeval._confseq`, one per requested
kind, at α/K per arm); the arm's factor ``u`` is refitted on its observed items
(:func:`jaxeval._factorization.refit_row`, O(n r) for that row only) and its
ranking estimate (the difference estimate) is recomputed. Policies without predictions
run the same loop with λ = 0 (the plain without-replacement mean). A fully evaluated
arm's interval is its exact mean up to a float32 rounding margin (``1e-5 + n 2^-24``
times the mean on each side: width ~5e-5 at n = 541).

Modes. ``mode="budget"``: a ``lax.scan`` over a static number of steps; each checkpoint
records the state after the last whole batch that fits within its budget (with
``batch_size = 1`` the calls land exactly on it; batches are cut only at the final
budget, so requesting more checkpoints never changes the trajectory). One run gives
the whole accuracy-versus-budget curve.
``mode="confidence"``: a ``lax.while_loop`` that stops when the leader's lower bound
clears every other arm's upper bound minus ``eps`` (ε-good), or the call cap is reached,
or every arm is exhausted; one record.

Truth sources (``Config.truth``):

- ``"real"``: a fixed candidate pool ``[m, n]`` (full rows) and a table of instances
  ``[I, K]`` (row indices into the pool); each replicate plays one instance, drawn
  uniformly from its key (``_setup``).
- ``"synthetic"``: a low-rank logistic truth regenerated per replicate from its key, one
  row (or one block of a row) at a time, never a ``[K, n]`` array:
  ``V ~ N(0, 1/r)``, ``c ~ N(mean_c, scale_c^2)``, ``u_i ~ N(0, scale_u^2)``,
  ``S_ij ~ Bernoulli(sigmoid(u_i . v_j + c_j))``. Predictions use the true ``V, c``.

Memory. The loop state is O(K) per replicate, plus, for small problems (``K n`` up to
:data:`ORDER_TABLE_MAX`, see :attr:`Config.order_table`), each arm's item order
materialised once per replicate (``[K, n]`` int32: the same draws, a batch is then a
slice instead of ``n`` regenerated keys and ``b`` arg-max passes). Rows of up to
``Config.item_block`` items (default :data:`ITEM_BLOCK`) are handled whole: each step
builds the pulled arm's rows of length ``n`` (order keys, seen mask, truth, predictions
before and after the refit), O(n r) temporaries per replicate. Longer rows are streamed:
every pass over the items is a ``lax.scan`` over ``ceil(n / item_block)`` blocks that
regenerates the block's keys and truth (counter-based draws, bit-identical to the
whole-row ones) and carries O(r^2 + b) aggregates: the next batch by a running top-b
merge (:func:`jaxeval._sampling.merge_top`), the unseen predictions' sum / min / max and
the refit's gradient and Hessian at the current factor; a second pass does the refit's
line search (:func:`jaxeval._factorization.update_model_factor_blocked`) and sums the
new predictions at every trial step. So a step reads the blocks twice with a refit and
``num_newton = 1`` (two more passes per further Newton step), once without. Peak
temporaries are then O(item_block r) per replicate whatever ``n``. The item orders and
the truth are bit-identical to the whole-row kernel's; without predictions the whole
trajectory is too; with predictions the sums over items are added in another order, so
estimates differ by float32 rounding (~1e-7) and the trajectory is the same unless such
a difference decides a near-tie of the policy index (``tests/test_blocks.py``). The
blocks trade recomputation (keys and synthetic truth regenerated on every pass) for
memory.

Deliberately bad predictions for validity studies (``Config.corruption``): ``"biased"``
(``clip(S_hat + bias)``), ``"random"`` (i.i.d. uniform, fixed per arm),
``"adversarial"`` (``1 - S``, perfectly anti-correlated with the truth). Validity of the
DR intervals does not depend on the predictions; the naive pooled estimate does.

Keys: ``fold_in(rep_key, purpose)`` with the named constants below; the item orders and
instances depend on the replicate key only, so every policy run with the same seed sees
the same instances and the same item orders.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval import _confseq, _estimators, _policies, _sampling
from jaxeval._factorization import (
    ItemFactors,
    predict_scores,
    refit_row,
    update_model_factor_blocked,
)
from jaxeval._runner import _concrete_int, check_int

__all__ = [
    "CS_KINDS",
    "Config",
    "ITEM_BLOCK",
    "IdentificationOutput",
    "Params",
    "ProblemData",
    "STATUS_BUDGET",
    "STATUS_CONFIDENT",
    "STATUS_EXHAUSTED",
    "STATUS_NONFINITE",
    "STATUS_POLICY_DONE",
    "make_replicate_fn",
    "run_identification",
]

# ----------------------------------------------------------------- constants
#: The run reached its budget (or checkpoint) with arms left to evaluate.
STATUS_BUDGET = 0
#: Fixed-confidence mode: the stopping rule fired.
STATUS_CONFIDENT = 1
#: Every arm is fully evaluated (all intervals exact).
STATUS_EXHAUSTED = 2
#: The policy stopped pulling before the budget was spent (SySRs' schedule ended with its
#: survivor exhausted, or every arm it may still pull is exhausted, or with
#: ``skip_separated`` exhausted or separated from the leader: exactly tied leaders).
STATUS_POLICY_DONE = 3
#: A non-finite estimate or bound appeared.
STATUS_NONFINITE = 4

CS_KINDS = ("eb", "hoeffding", "betting")

_PURPOSE_ORDER = 1
_PURPOSE_INSTANCE = 2
_PURPOSE_TRUTH = 3
_PURPOSE_PRED = 4

#: Default :attr:`Config.item_block`: rows up to this many items are handled whole (as
#: before blocks existed); longer rows are streamed in blocks of this size.
ITEM_BLOCK = 2048

#: With :attr:`Config.order_table` left to ``None``, the item orders are materialised
#: when (streams x items) is at most this (2 int32 tables of it per replicate: 1 MiB).
ORDER_TABLE_MAX = 2**17


#: Kinds of deliberately bad predictions for validity studies (``Config.corruption``).
CORRUPTIONS = ("none", "biased", "random", "adversarial")


def check_flag(name: str, value: Any, *, none_ok: bool = False) -> bool | None:
    """``value`` as a Python bool (``None`` kept where ``none_ok``); anything else, a
    string such as ``"False"`` above all (truthy: it ran with the flag on), is refused
    by ``name``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if value is None and none_ok:
        return None
    raise TypeError(f"{name}: expected True or False" + (" (or None)" if none_ok else "")
                    + f", got {value!r}")


# --------------------------------------------------------------- containers
@dataclasses.dataclass(frozen=True)
class Config:
    """Static settings of a run (hashable: a new value recompiles).

    Attributes:
      policy: one of :data:`jaxeval._policies.POLICIES`.
      num_arms: K.
      num_items: n.
      batch_size: b, items per pull.
      budgets: sorted checkpoint budgets in LLM calls (fixed-budget mode); the largest
        is the run's budget. In confidence mode, ``budgets[-1]`` is the call cap.
      mode: ``"budget"`` or ``"confidence"``.
      cs_kinds: confidence-sequence kinds computed (subset of :data:`CS_KINDS`). Empty:
        no intervals at all (``lower`` / ``upper`` have ``Q = 0`` rows; the work of a
        plain bandit, e.g. for a same-work speed comparison), for fixed-budget runs of
        every policy but ``"pulse"``, whose index is an interval's half-width.
      stop_kind: kind used for the stopping rule and PULSE's exploration radius.
      use_predictions: run the DR estimator with the factorization's predictions; False
        means λ = 0 (the plain mean). Defaults to True for prediction policies.
      refit: refit the pulled arm's factor after each batch.
      num_newton: Newton steps per refit.
      synchronized: one item order shared by all arms (SySRs' order).
      horizon: SySRs' planning horizon in calls. Default (None): SySRs is run once per
        checkpoint budget, each run planned for its own budget (METHODS.md 2.5: successive
        rejects is a fixed-budget method, scored at the budget it was given); a value
        plans one run for that many calls, read at every checkpoint on the way.
      truth: ``"real"`` or ``"synthetic"``.
      rank: factor rank (synthetic truth).
      corruption: ``"none"``, ``"biased"``, ``"random"`` or ``"adversarial"``.
      item_block: items per block (static). With ``num_items <= item_block`` every
        per-step row (order keys, truth, predictions, refit sums) is one array of
        length ``n``; above it the rows are streamed in ``ceil(n / item_block)``
        blocks by ``lax.scan`` so the peak memory per replicate is ``O(item_block)``
        whatever ``n`` (the same trajectory up to float32 summation order).
      order_table: materialise every arm's item order once per replicate
        (:class:`jaxeval._sampling.OrderTable`, ``2 K n`` int32) instead of regenerating
        the order keys on every step: the same draws bit for bit, O(b) per step to find
        a batch. ``None`` (default): on when the rows are whole and ``K n`` (``n`` when
        synchronized) is at most :data:`ORDER_TABLE_MAX`.
      skip_separated: never pull an arm that is already separated from the leader (its
        stop-kind upper bound below the leader's lower bound plus ``eps``, the stopping
        rule's test; the leader is the arm the policy would recommend). Such an arm
        cannot be more than ``eps`` better than the leader (at the intervals' level) nor
        delay the confident stop, so its calls go to the arms that keep the stop open.
        When every arm left is fully evaluated or separated (exactly tied leaders), the
        run ends there (status :data:`STATUS_POLICY_DONE`). A predictable rule (the
        bounds before the pull), so every interval stays valid. Costs the stop kind's
        bounds on every step. Not for ``"sysrs"`` (its own schedule rejects arms).
    """

    policy: str
    num_arms: int
    num_items: int
    budgets: tuple[int, ...]
    batch_size: int = 1
    mode: str = "budget"
    cs_kinds: tuple[str, ...] = ("eb", "hoeffding")
    stop_kind: str = "eb"
    use_predictions: bool | None = None
    refit: bool = True
    num_newton: int = 1
    synchronized: bool | None = None
    horizon: int | None = None
    truth: str = "real"
    rank: int = 4
    corruption: str = "none"
    item_block: int = ITEM_BLOCK
    order_table: bool | None = None
    skip_separated: bool = False

    def __post_init__(self):
        if not jax.config.jax_threefry_partitionable:
            # the counter-based generators (one item's key or bits computed alone, for
            # streamed blocks and order tables alike) equal the whole-array draws only
            # with the partitionable threefry; otherwise results would depend on
            # item_block and on the order-table switch
            raise ValueError(
                "jax_threefry_partitionable is off: jaxeval's item orders and synthetic "
                "truth need it on (JAX's default); jax.config.update("
                "'jax_threefry_partitionable', True)"
            )
        # (Python ints: the config is a static, hashable argument of the kernels)
        object.__setattr__(self, "item_block", check_int("item_block", self.item_block, 1))
        object.__setattr__(self, "num_arms", check_int("num_arms", self.num_arms, 1))
        object.__setattr__(self, "num_items", check_int("num_items", self.num_items, 1))
        object.__setattr__(self, "num_newton", check_int("num_newton", self.num_newton, 0))
        object.__setattr__(self, "rank", check_int("rank", self.rank, 1))
        for name in ("use_predictions", "synchronized", "refit"):
            object.__setattr__(self, name, check_flag(name, getattr(self, name),
                                                      none_ok=name != "refit"))
        if self.horizon is not None:
            if self.policy != "sysrs":
                raise ValueError(f"horizon: only SySRs plans for a horizon, not policy "
                                 f"{self.policy!r}")
            object.__setattr__(self, "horizon", check_int("horizon", self.horizon, 1))
        try:  # a list would pass the checks below and then fail as a static argument
            budgets = tuple(self.budgets)
        except TypeError:
            raise ValueError(f"budgets must be a non-empty sorted tuple, got {self.budgets!r}"
                             ) from None
        if isinstance(self.cs_kinds, str):
            raise TypeError(f"cs_kinds: expected a tuple of kinds of {CS_KINDS}, got the string "
                            f"{self.cs_kinds!r} (write ({self.cs_kinds!r},))")
        object.__setattr__(self, "cs_kinds", tuple(self.cs_kinds))
        ints = [_concrete_int(b) for b in budgets]
        if None in ints:
            raise ValueError(f"budgets: expected integer LLM call counts, got {budgets}")
        object.__setattr__(self, "budgets", tuple(ints))
        if self.truth == "synthetic" and self.num_items * max(self.rank, 1) >= 2**32:
            raise ValueError(
                f"num_items * rank must stay below 2**32 for synthetic truth (counter-based "
                f"generators), got num_items={self.num_items}, rank={self.rank}"
            )
        if self.policy not in _policies.POLICIES:
            raise ValueError(f"policy: expected one of {_policies.POLICIES}, got {self.policy!r}")
        object.__setattr__(self, "batch_size", check_int(
            "batch_size", self.batch_size, 1, self.num_items, why="at most num_items"))
        if self.order_table is not None and not isinstance(self.order_table, bool):
            raise ValueError(f"order_table: expected None, True or False, got {self.order_table!r}")
        if self.order_table and self.blocked:
            raise ValueError(
                f"order_table=True needs whole rows (num_items={self.num_items} > "
                f"item_block={self.item_block}: the rows are streamed in blocks)"
            )
        if not isinstance(self.skip_separated, bool):
            raise ValueError(
                f"skip_separated: expected True or False, got {self.skip_separated!r}")
        if self.skip_separated and (self.policy == "sysrs" or not self.cs_kinds):
            raise ValueError(
                "skip_separated: needs an interval (cs_kinds) and an index policy, not "
                f"{self.policy!r}" + (" (SySRs rejects arms by its own schedule)"
                                      if self.policy == "sysrs" else " with no interval"))
        if self.mode not in ("budget", "confidence"):
            raise ValueError(f"mode: expected 'budget' or 'confidence', got {self.mode!r}")
        bad = [k for k in self.cs_kinds if k not in CS_KINDS]
        if bad or len(set(self.cs_kinds)) != len(self.cs_kinds):
            raise ValueError(
                f"cs_kinds: expected distinct kinds of {CS_KINDS}, got {self.cs_kinds}"
            )
        if self.stop_kind not in CS_KINDS:
            raise ValueError(f"stop_kind: expected one of {CS_KINDS}, got {self.stop_kind!r}")
        if not self.cs_kinds:
            if self.mode == "confidence" or self.policy == "pulse":
                raise ValueError(
                    "cs_kinds: empty (no intervals) is for fixed-budget runs of policies "
                    f"that do not steer by an interval; policy {self.policy!r} in mode "
                    f"{self.mode!r} needs the stop kind's"
                )
        elif self.stop_kind not in self.cs_kinds:
            raise ValueError(
                f"stop_kind {self.stop_kind!r} must be one of cs_kinds {self.cs_kinds}"
            )
        if self.truth not in ("real", "synthetic"):
            raise ValueError(f"truth: expected 'real' or 'synthetic', got {self.truth!r}")
        if self.corruption not in CORRUPTIONS:
            raise ValueError(f"corruption: unknown kind {self.corruption!r}; expected one of "
                             f"{CORRUPTIONS}")
        if tuple(sorted(self.budgets)) != tuple(self.budgets) or not self.budgets:
            raise ValueError(f"budgets must be a non-empty sorted tuple, got {self.budgets}")
        # call counters, budgets and the loop's step counter are int32
        if self.budgets[0] < 0 or self.budgets[-1] >= 2**31:
            raise ValueError(
                f"budgets must lie in [0, 2**31) LLM calls (int32 counters); got "
                f"{self.budgets[0]}..{self.budgets[-1]}"
            )
        if self.num_steps >= 2**31:
            raise ValueError(
                f"budgets: the largest, {self.budgets[-1]} LLM calls, needs {self.num_steps} "
                f"loop steps at batch_size={self.batch_size}, beyond the int32 step counter"
            )

    @property
    def predictions(self) -> bool:
        if self.use_predictions is None:
            return self.policy in _policies.PREDICTION_POLICIES
        return bool(self.use_predictions)

    @property
    def sync(self) -> bool:
        return self.policy == "sysrs" if self.synchronized is None else bool(self.synchronized)

    @property
    def phase_lengths(self) -> tuple[int, ...]:
        if self.policy != "sysrs":
            return ()
        horizon = self.budgets[-1] if self.horizon is None else self.horizon
        return _policies.sr_phase_lengths(self.num_arms, horizon, self.num_items)

    @property
    def blocked(self) -> bool:
        """True when the items are streamed in blocks (``num_items > item_block``)."""
        return self.num_items > self.item_block

    @property
    def tabled(self) -> bool:
        """True when the item orders are materialised (see :attr:`order_table`)."""
        if self.order_table is not None:
            return self.order_table
        streams = 1 if self.sync else self.num_arms
        return not self.blocked and streams * self.num_items <= ORDER_TABLE_MAX

    @property
    def num_blocks(self) -> int:
        return -(-self.num_items // self.item_block)

    @property
    def num_steps(self) -> int:
        """Loop steps: enough to spend the final budget in batches of ``b``.

        SySRs cuts each surviving arm's batch at every phase end, so with ``b > 1`` each
        (arm, phase) pair can cost a partial step and a phase that adds no item a step
        that draws nothing: ``(K - 1)(K + 2)`` more at most (steps past the budget are
        no-ops).
        """
        b, K = self.batch_size, self.num_arms
        extra = (K - 1) * (K + 2) if self.policy == "sysrs" and b > 1 else 0
        return -(-self.budgets[-1] // b) + len(self.budgets) + K + 1 + extra


class Params(NamedTuple):
    """Dynamic numeric settings (arrays; new values never recompile).

    Attributes:
      alpha: family-wise error level; each arm's two-sided interval uses ``alpha / K``.
      a: UCB-E exploration constant.
      scale: PULSE exploration scale (multiplies the interval half-width).
      rho: prior strength of the online factor refit.
      lam0: prior λ.
      shrink: pseudo-count of the λ prior.
      eps: ε of the ε-good stopping rule.
      bias: size of the ``"biased"`` corruption.
      scale_u, scale_c, mean_c: synthetic truth's spreads.
    """

    alpha: jax.Array
    a: jax.Array
    scale: jax.Array
    rho: jax.Array
    lam0: jax.Array
    shrink: jax.Array
    eps: jax.Array
    bias: jax.Array
    scale_u: jax.Array
    scale_c: jax.Array
    mean_c: jax.Array

    @classmethod
    def make(
        cls,
        alpha=0.05,
        a=1.0,
        scale=1.0,
        rho=1.0,
        lam0=1.0,
        shrink=10.0,
        eps=0.0,
        bias=0.3,
        scale_u=1.0,
        scale_c=1.5,
        mean_c=0.0,
    ) -> Params:
        """All settings as float32 scalars."""
        vals = (alpha, a, scale, rho, lam0, shrink, eps, bias, scale_u, scale_c, mean_c)
        return cls(*(jnp.asarray(v, jnp.float32) for v in vals))


class ProblemData(NamedTuple):
    """Arrays of a truth source (a pytree; passed as operands, never baked in).

    Attributes:
      pool: float32 ``[m, n]`` candidate rows (``"real"``; ``[1, 1]`` dummy otherwise).
      instances: int32 ``[I, K]`` row indices into ``pool`` (``"real"``).
      item_factors: frozen :class:`ItemFactors` (``"real"`` with predictions; dummies
        otherwise).
    """

    pool: jax.Array
    instances: jax.Array
    item_factors: ItemFactors


class Record(NamedTuple):
    """The loop's summary at one checkpoint (leading axes: checkpoints, then kinds)."""

    estimate: jax.Array  # [K] ranking estimate
    lower: jax.Array  # [Q, K]
    upper: jax.Array  # [Q, K]
    naive: jax.Array  # [K]
    pulls: jax.Array  # [K] int32 items evaluated
    lam: jax.Array  # [K] λ of the arm's last batch
    recommended: jax.Array  # int32
    calls: jax.Array  # int32
    status: jax.Array  # int32


class IdentificationOutput(NamedTuple):
    """One replicate's output (a leading replicate axis is added by vmap).

    Attributes:
      theta: float32 ``[K]`` true accuracies.
      instance: int32 index of the instance played (``-1`` for synthetic truth).
      checkpoints: a :class:`Record` whose leaves have a leading checkpoint axis ``[C]``
        (``C = len(budgets)``; 1 in confidence mode); bounds are ``[C, Q, K]`` for the
        ``Q = len(cs_kinds)`` kinds in order.
    """

    theta: jax.Array
    instance: jax.Array
    checkpoints: Record


class LoopState(NamedTuple):
    sampler: _sampling.SamplerState
    pstate: _policies.PolicyState
    sum_s: jax.Array  # [K] running sum of each arm's observed scores
    sum_c: jax.Array  # [K] its rounding error so far (compensated summation): add to sum_s
    u: jax.Array  # [K, r]
    lam_stats: _estimators.LambdaStats
    lam: jax.Array  # [K]
    estimate: jax.Array  # [K]
    naive: jax.Array  # [K]
    cs: tuple  # per kind, [K]-shaped states
    calls: jax.Array  # int32
    stopped: jax.Array  # bool
    status: jax.Array  # int32


# ------------------------------------------------------------- truth sources
class _Truth(NamedTuple):
    """Per-replicate handle on the truth: how to get a row and the predictions."""

    rows: jax.Array  # [K] row indices into the pool (real) or unused
    key: jax.Array  # truth key (synthetic)
    pred_key: jax.Array


def _synthetic_items(key, config: Config, params: Params):
    n, r = config.num_items, config.rank
    kv, kc = jax.random.split(jax.random.fold_in(key, 0))
    V = jax.random.normal(kv, (n, r), jnp.float32) / math.sqrt(r)
    c = params.mean_c + params.scale_c * jax.random.normal(kc, (n,), jnp.float32)
    return V, c


def _row(truth: _Truth, data: ProblemData, arm, config: Config, params: Params):
    if config.truth == "real":
        return data.pool[truth.rows[arm]]
    V, c = _synthetic_items(truth.key, config, params)
    ku, ks = jax.random.split(jax.random.fold_in(jax.random.fold_in(truth.key, 1), arm))
    u = params.scale_u * jax.random.normal(ku, (config.rank,), jnp.float32)
    p = jax.nn.sigmoid(V @ u + c)
    return (jax.random.uniform(ks, (config.num_items,), jnp.float32) < p).astype(jnp.float32)


def _item_factors(truth: _Truth, data: ProblemData, config: Config, params: Params):
    if config.truth == "real":
        return data.item_factors
    V, c = _synthetic_items(truth.key, config, params)
    return ItemFactors(V, c, jnp.zeros((config.rank,), jnp.float32))


def _predict(u_arm, s_row, arm, truth, factors, config: Config, params: Params):
    p = predict_scores(u_arm, factors)
    kind = config.corruption
    if kind == "biased":
        p = jnp.clip(p + params.bias, 0.0, 1.0)
    elif kind == "random":
        p = jax.random.uniform(jax.random.fold_in(truth.pred_key, arm), p.shape, jnp.float32)
    elif kind == "adversarial":
        p = 1.0 - s_row
    return p


def _rank(config: Config, data: ProblemData) -> int:
    if config.truth == "synthetic":
        return config.rank
    return data.item_factors.V.shape[1]


# ------------------------------------------------------- blocked truth sources
# With ``num_items > item_block`` nothing of length ``n`` is built: every per-step pass
# over the items is a ``lax.scan`` over blocks of ``item_block`` items that regenerates
# the block's order keys, truth and predictions from the keys (counter-based
# generators of :mod:`jaxeval._sampling`, bit-identical to the whole-row draws) or
# slices them from the operands.
class _ArmTruth(NamedTuple):
    """Per-arm handle on the truth for the blocked passes."""

    row: jax.Array  # int32 pool row (real)
    u: jax.Array  # [r] true factor (synthetic)
    draw_key: jax.Array  # key of the Bernoulli draws (synthetic)
    pred_key: jax.Array  # key of the "random" corruption


def _block(k, config: Config):
    """Block ``k``: its first index, its item indices and the items it owns.

    Blocks are ``[k B, (k + 1) B)``; the last one is shifted back to end at ``n`` (so
    every index is a real item and slices stay in bounds) and owns only the items that
    no earlier block covered.
    """
    B, n = config.item_block, config.num_items
    start = jnp.minimum(k * B, n - B)
    idx = start + jnp.arange(B, dtype=jnp.int32)
    return start, idx, idx >= k * B


def _arm_truth(truth: _Truth, arm, config: Config, params: Params) -> _ArmTruth:
    pred_key = jax.random.fold_in(truth.pred_key, arm)
    if config.truth == "real":
        return _ArmTruth(truth.rows[arm], jnp.zeros((1,), jnp.float32), truth.key, pred_key)
    ku, ks = jax.random.split(jax.random.fold_in(jax.random.fold_in(truth.key, 1), arm))
    u = params.scale_u * jax.random.normal(ku, (config.rank,), jnp.float32)
    return _ArmTruth(jnp.zeros((), jnp.int32), u, ks, pred_key)


def _u_mean(data: ProblemData, config: Config):
    if config.truth == "real":
        return data.item_factors.u_mean
    return jnp.zeros((config.rank,), jnp.float32)


def _factors_block(truth: _Truth, data: ProblemData, start, idx, config: Config, params: Params):
    """The item factors of a block (rows ``idx`` of :func:`_item_factors`)."""
    B = config.item_block
    if config.truth == "real":
        f = data.item_factors
        r = f.V.shape[1]
        return ItemFactors(
            jax.lax.dynamic_slice(f.V, (start, 0), (B, r)),
            jax.lax.dynamic_slice(f.c, (start,), (B,)),
            f.u_mean,
        )
    r = config.rank
    kv, kc = jax.random.split(jax.random.fold_in(truth.key, 0))
    counters = idx[:, None] * r + jnp.arange(r, dtype=jnp.int32)
    V = _sampling.normal_at(kv, counters) / math.sqrt(r)
    c = params.mean_c + params.scale_c * _sampling.normal_at(kc, idx)
    return ItemFactors(V, c, jnp.zeros((r,), jnp.float32))


def _row_block(at: _ArmTruth, data: ProblemData, factors: ItemFactors, start, config: Config):
    """The arm's true scores on a block (elements of :func:`_row`)."""
    B = config.item_block
    if config.truth == "real":
        return jax.lax.dynamic_slice(data.pool, (at.row, start), (1, B))[0]
    p = jax.nn.sigmoid(factors.V @ at.u + factors.c)
    idx = start + jnp.arange(B, dtype=jnp.int32)
    return (_sampling.uniform_at(at.draw_key, idx) < p).astype(jnp.float32)


def _predict_block(u_arm, s, at: _ArmTruth, factors, idx, config: Config, params: Params):
    """The arm's predictions on a block (elements of :func:`_predict`)."""
    return _corrupt(predict_scores(u_arm, factors), s, at, idx, config, params)


def _corrupt(p, s, at: _ArmTruth, idx, config: Config, params: Params):
    """Apply ``Config.corruption`` to the model's probabilities ``p`` of a block."""
    kind = config.corruption
    if kind == "biased":
        p = jnp.clip(p + params.bias, 0.0, 1.0)
    elif kind == "random":
        p = _sampling.uniform_at(at.pred_key, idx)
    elif kind == "adversarial":
        p = 1.0 - s
    return p


def _block_mean(fn, config: Config):
    """``(1/n) sum_j fn(block)_j`` over the owned items of every block."""

    def body(acc, k):
        start, idx, own = _block(k, config)
        return acc + jnp.sum(jnp.where(own, fn(start, idx), 0.0)), None

    total, _ = jax.lax.scan(
        body, jnp.zeros((), jnp.float32), jnp.arange(config.num_blocks, dtype=jnp.int32)
    )
    return total / config.num_items


def _theta_blocked(truth, data, config: Config, params: Params):
    def one(arm):
        at = _arm_truth(truth, arm, config, params)

        def row(start, idx):
            f = _factors_block(truth, data, start, idx, config, params)
            return _row_block(at, data, f, start, config)

        return _block_mean(row, config)

    return jax.lax.map(one, jnp.arange(config.num_arms))


def _prior_mean_blocked(truth, data, config: Config, params: Params):
    """Each arm's mean prior prediction (``u = u_mean``), block by block."""
    u0 = _u_mean(data, config)

    def one(arm):
        at = _arm_truth(truth, arm, config, params)

        def pred(start, idx):
            f = _factors_block(truth, data, start, idx, config, params)
            if config.corruption == "adversarial":
                # the prior prediction of an adversary is 1 - S as well
                return 1.0 - _row_block(at, data, f, start, config)
            return _predict_block(u0, None, at, f, idx, config, params)

        return _block_mean(pred, config)

    return jax.lax.map(one, jnp.arange(config.num_arms))


# --------------------------------------------------------------------- kernel
def _kind_bounds(kind: str, st, sum_s, count, n: int):
    """Lower/upper ``[K]`` of one kind's sequence state, exact (up to rounding) for
    fully evaluated arms."""
    exact = sum_s / n
    # the running sum (compensated: _add_scores) and the true mean (another reduction)
    # differ by a few roundings for graded scores, not at all for 0/1 ones; the margin
    # is still the worst case of a plain sequential sum, n u * mean (u = 2^-24), on top
    # of the margin every bound gets
    margin = _confseq.NUM_TOL + float(n) * 2.0**-24 * jnp.abs(exact)
    mod = _confseq.get(kind)
    return mod.bounds(mod.finalize(st, exact, count >= n, margin))


def _bounds(cs, sum_s, count, config: Config):
    """Lower/upper ``[Q, K]`` of every kind, exact (up to rounding) for fully evaluated arms."""
    if not config.cs_kinds:
        return jnp.zeros((0,) + sum_s.shape, jnp.float32), jnp.zeros((0,) + sum_s.shape,
                                                                     jnp.float32)
    both = [_kind_bounds(kind, st, sum_s, count, config.num_items)
            for kind, st in zip(config.cs_kinds, cs)]
    return jnp.stack([lo for lo, _ in both]), jnp.stack([hi for _, hi in both])


class _Snapshot(NamedTuple):
    """What a checkpoint keeps while the loop runs: its :class:`Record` without the
    bounds (``lower = upper = None``) and the state the bounds are computed from.

    The bounds cost more than the rest of a UCB-E step; keeping their inputs and
    computing them once per checkpoint after the loop (:func:`_finish`) gives the same
    numbers at a fraction of the cost.
    """

    record: Record
    cs: tuple
    sum_s: jax.Array


def _ranking(state: LoopState, config: Config) -> jax.Array:
    """The estimates a policy recommends by (METHODS.md 6.1: the argmax of the method's own
    estimates): the naive pooled estimate for ``naive``, the difference estimate else."""
    return state.naive if config.policy == "naive" else state.estimate


def _snapshot(state: LoopState, config: Config) -> _Snapshot:
    est = state.estimate
    rank = _ranking(state, config)
    rec = jnp.argmax(jnp.where(state.pstate.alive, rank, -jnp.inf)).astype(jnp.int32)
    record = Record(
        estimate=est,
        lower=None,
        upper=None,
        naive=state.naive,
        pulls=state.sampler.count,
        lam=state.lam,
        recommended=rec,
        calls=state.calls,
        status=state.status,
    )
    return _Snapshot(record, state.cs, _sums(state))


def _finish(snap: _Snapshot, config: Config) -> Record:
    """The full :class:`Record` of a snapshot (leading axes, if any, are mapped over)."""
    fn = lambda cs, s, c: _bounds(cs, s, c, config)  # noqa: E731
    for _ in range(snap.sum_s.ndim - 1):
        fn = jax.vmap(fn)
    lower, upper = fn(snap.cs, snap.sum_s, snap.record.pulls)
    return snap.record._replace(lower=lower, upper=upper)


def _record(state: LoopState, config: Config) -> Record:
    return _finish(_snapshot(state, config), config)


def confident_record(state: LoopState, config: Config, params: Params):
    """``(record, separated)``: the state's record, and whether the recommended arm's
    lower bound (the stop kind's) clears every other arm's upper bound minus ``eps``
    (the fixed-confidence stop; the campaign's ``confident``)."""
    rec = _record(state, config)
    q = config.cs_kinds.index(config.stop_kind)
    lead = rec.recommended  # the top of the ranking among the arms the policy keeps
    lo = rec.lower[q, lead]
    others = jnp.where(jnp.arange(config.num_arms) == lead, -jnp.inf, rec.upper[q])
    return rec, lo > jnp.max(others) - params.eps


def _init_state(truth, data, config: Config, params: Params) -> LoopState:
    K, n = config.num_arms, config.num_items
    r = _rank(config, data) if config.predictions else 1
    if config.predictions and config.blocked:
        u = jnp.broadcast_to(_u_mean(data, config), (K, r)).astype(jnp.float32)
        est0 = naive0 = _prior_mean_blocked(truth, data, config, params)
    elif config.predictions:
        factors = _item_factors(truth, data, config, params)
        u = jnp.broadcast_to(factors.u_mean, (K, r)).astype(jnp.float32)
        zero_s = jnp.zeros((n,), jnp.float32)

        def prior_pred(arm):
            return _predict(u[arm], zero_s, arm, truth, factors, config, params)

        if config.corruption == "adversarial":
            # the prior prediction of an adversary is 1 - S as well
            def prior_pred(arm):  # noqa: F811
                s = _row(truth, data, arm, config, params)
                return 1.0 - s

        mean_pred = jax.lax.map(lambda a: jnp.mean(prior_pred(a)), jnp.arange(K))
        est0 = mean_pred
        naive0 = mean_pred
    else:
        u = jnp.zeros((K, 1), jnp.float32)
        est0 = jnp.full((K,), 0.5, jnp.float32)
        naive0 = jnp.zeros((K,), jnp.float32)
    cs = tuple(_confseq.get(k).init((K,)) for k in config.cs_kinds)
    return LoopState(
        sampler=_sampling.init(K),
        pstate=_policies.policy_init(K),
        sum_s=jnp.zeros((K,), jnp.float32),
        sum_c=jnp.zeros((K,), jnp.float32),
        u=u,
        lam_stats=_estimators.lambda_stats_init((K,)),
        lam=jnp.zeros((K,), jnp.float32),
        estimate=est0,
        naive=naive0,
        cs=cs,
        calls=jnp.zeros((), jnp.int32),
        stopped=jnp.zeros((), bool),
        status=jnp.full((), STATUS_BUDGET, jnp.int32),
    )


def _sums(state: LoopState) -> jax.Array:
    """``[K]`` each arm's sum of observed scores, its rounding error added back."""
    return state.sum_s + state.sum_c


def _add_scores(state: LoopState, arm, x):
    """``(sum_s, sum_c)`` of ``arm`` after adding ``x`` to its running sum.

    Compensated (Neumaier) summation: a float32 running sum of graded scores drifts by
    up to ``(k - 1) u`` of itself over ``k`` additions (``u = 2^-24``; a constant 0.7
    row of 40 000 items ended 2e-4 low), which moved every DR term and so the bounds,
    past the true mean at the end of the arm's sampling. The error of each addition is
    exact in float32 and is kept apart, so the sum stays within a rounding or two of
    the true sum. For 0/1 scores every addition is exact and the error stays 0.
    """
    total, comp = state.sum_s[arm], state.sum_c[arm]
    t = total + x
    err = jnp.where(jnp.abs(total) >= jnp.abs(x), (total - t) + x, (x - t) + total)
    return t, comp + err


def _take(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def _put(tree, i, val):
    return jax.tree.map(lambda x, v: x.at[i].set(v), tree, val)


def _half_width(state: LoopState, config: Config):
    if not config.cs_kinds:  # no intervals (never with "pulse", the policy that uses it)
        return jnp.full(state.sampler.count.shape, jnp.inf, jnp.float32)
    q = config.cs_kinds.index(config.stop_kind)
    mod = _confseq.get(config.stop_kind)
    lo, hi = mod.bounds(state.cs[q])
    hw = 0.5 * (hi - lo)
    return jnp.where(state.sampler.count > 0, jnp.minimum(hw, 1.0), jnp.inf)


class _Batch(NamedTuple):
    """The pulled arm's next batch and what the DR terms need, frozen before it."""

    items: jax.Array  # [b] int32
    valid: jax.Array  # [b] bool (already & active)
    sampler: _sampling.SamplerState
    s_b: jax.Array  # [b] scores of the drawn items (0 where invalid)
    p_b: jax.Array  # [b] their predictions (0 where invalid)
    sum_pu: jax.Array  # sum of the predictions over the unseen items
    max_pu: jax.Array
    min_pu: jax.Array
    lam: jax.Array


def _choose(state: LoopState, config: Config, params: Params, cap_calls):
    """The policy's arm, how many items it may draw and whether the step does anything."""
    n, b = config.num_items, config.batch_size
    count = state.sampler.count
    full = count >= n
    if config.skip_separated:
        # an arm whose upper bound is already below the leader's lower bound (the
        # stop kind's, plus eps: the stopping rule's own test) cannot change the stop:
        # it is not pulled again, so the calls go to the arms that keep the stop open
        full = full | _separated(state, config, params)
    view = _policies.ArmView(
        count=count,
        full=full,
        mean_obs=_sums(state) / jnp.maximum(count, 1).astype(jnp.float32),
        estimate=state.estimate,
        naive=state.naive,
        half_width=_half_width(state, config),
    )
    arm, item_cap, ok, pstate = _policies.choose_arm(
        config.policy, view, state.pstate, params.a, params.scale, config.phase_lengths
    )
    limit = jnp.minimum(jnp.minimum(item_cap, cap_calls - state.calls), b)
    active = ok & (limit > 0) & ~state.stopped
    return arm, limit, active, pstate


def _separated(state: LoopState, config: Config, params: Params) -> jax.Array:
    """bool ``[K]``: the arms other than the leader whose stop-kind upper bound lies
    below the leader's lower bound plus ``eps`` (separated as the stopping rule sees
    them; see :func:`confident_record`)."""
    q = config.cs_kinds.index(config.stop_kind)
    lo, hi = _kind_bounds(config.stop_kind, state.cs[q], _sums(state), state.sampler.count,
                          config.num_items)
    lead = jnp.argmax(jnp.where(state.pstate.alive, _ranking(state, config), -jnp.inf))
    return _separated_of(lo, hi, lead, params.eps)


def _separated_of(lo, hi, lead, eps) -> jax.Array:
    """bool ``[K]``: the arms other than ``lead`` whose upper bound ``hi`` lies below
    ``lo[lead] + eps`` (bounds of one kind, ``[K]`` each)."""
    return (jnp.arange(hi.shape[-1]) != lead) & (hi < lo[lead] + eps)


def _batch_lambda(state: LoopState, arm, config: Config, params: Params):
    if config.predictions:
        return _estimators.plugin_lambda(
            _take(state.lam_stats, arm), params.lam0, shrink=params.shrink
        )
    return jnp.zeros((), jnp.float32)


def _batch_blocked(state, arm, limit, active, order_key, truth, data, config, params):
    """The same batch with the items streamed in blocks (one pass, running top-b).

    With predictions the same pass also accumulates what the refit needs at the arm's
    current factor (the data part of the gradient and Hessian over the items seen
    before the batch, and the sums of the current predictions); the drawn items carry
    their item factors so that :func:`_refit_blocked` can add them without a pass.
    """
    n, b = config.num_items, config.batch_size
    at = _arm_truth(truth, arm, config, params)
    thr_key = state.sampler.thr_key[arm]
    thr_idx = state.sampler.thr_idx[arm]
    u_arm = state.u[arm]
    r = u_arm.shape[0]
    f32 = jnp.float32
    zero = jnp.zeros((), f32)

    def body(carry, k):
        sums, top = carry
        start, idx, own = _block(k, config)
        keys = _sampling.keys_at(order_key, arm, idx, config.sync)
        seen = own & _sampling.seen_mask(keys, thr_key, thr_idx, idx)
        unseen = own & ~seen
        f = _factors_block(truth, data, start, idx, config, params)
        s = _row_block(at, data, f, start, config)
        if config.predictions:
            p_raw = predict_scores(u_arm, f)
            p = _corrupt(p_raw, s, at, idx, config, params)
            payload = (s, p, p_raw, f.V, f.c)
            mf = seen.astype(f32)
            w = mf * p_raw * (1.0 - p_raw)
            sums = dict(
                sums,
                g=sums["g"] + f.V.T @ (mf * (p_raw - s)),
                H=sums["H"] + (f.V * w[:, None]).T @ f.V,
                vv=sums["vv"] + jnp.sum(mf * jnp.sum(f.V * f.V, axis=-1)),
                sp_seen=sums["sp_seen"] + jnp.sum(jnp.where(seen, p, 0.0)),
                sp_all=sums["sp_all"] + jnp.sum(jnp.where(own, p, 0.0)),
            )
        else:
            p = jnp.zeros_like(s)
            payload = (s, p)
        sums = dict(
            sums,
            sum_pu=sums["sum_pu"] + jnp.sum(jnp.where(unseen, p, 0.0)),
            max_pu=jnp.maximum(sums["max_pu"], jnp.max(jnp.where(unseen, p, -jnp.inf))),
            min_pu=jnp.minimum(sums["min_pu"], jnp.min(jnp.where(unseen, p, jnp.inf))),
        )
        cand = _sampling.block_top(keys, idx, unseen, b, payload)
        return (sums, _sampling.merge_top(top, cand, b)), None

    sums0 = dict(sum_pu=zero, max_pu=zero - jnp.inf, min_pu=zero + jnp.inf)
    proto = (zero[None], zero[None])
    if config.predictions:
        sums0.update(g=jnp.zeros((r,), f32), H=jnp.zeros((r, r), f32), vv=zero,
                     sp_seen=zero, sp_all=zero)
        proto = proto + (zero[None], jnp.zeros((1, r), f32), zero[None])
    (sums, top), _ = jax.lax.scan(
        body, (sums0, _sampling.empty_top(b, proto)),
        jnp.arange(config.num_blocks, dtype=jnp.int32),
    )
    n_unseen = n - state.sampler.count[arm]
    max_pu = jnp.where(n_unseen > 0, sums["max_pu"], 0.0)
    min_pu = jnp.where(n_unseen > 0, sums["min_pu"], 0.0)
    # an inactive step draws nothing (the caller discards it anyway)
    items, valid, sampler, payload = _sampling.finish_top(
        top, state.sampler, arm, jnp.where(active, limit, 0)
    )
    vf = valid.astype(f32)
    batch = _Batch(
        items=items,
        valid=valid,
        sampler=sampler,
        s_b=payload[0] * vf,
        p_b=payload[1] * vf,
        sum_pu=sums["sum_pu"],
        max_pu=max_pu,
        min_pu=min_pu,
        lam=_batch_lambda(state, arm, config, params),
    )
    return batch, (at, sums, payload)


def _martingale(state: LoopState, arm, batch: _Batch, config: Config, params: Params):
    """One DR term per drawn item (items move from U to O one at a time)."""
    if not config.cs_kinds and not config.predictions:
        # no interval to update and no lambda to learn: a plain bandit's work
        return (), _take(state.lam_stats, arm)
    K, n, b = config.num_arms, config.num_items, config.batch_size
    n_unseen = n - state.sampler.count[arm]
    sum_s_arm = _sums(state)[arm]
    center = jnp.asarray(state.estimate[arm], jnp.float32)
    s_b, p_b, lam = batch.s_b, batch.p_b, batch.lam
    excl_s = jnp.cumsum(s_b) - s_b
    excl_p = jnp.cumsum(p_b) - p_b
    k_b = jnp.arange(b, dtype=jnp.int32)
    nu_k = n_unseen - k_b
    so_k = sum_s_arm + excl_s
    spu_k = batch.sum_pu - excl_p
    y = _estimators.dr_term(so_k, spu_k, jnp.maximum(nu_k, 1), s_b, p_b, lam, n)
    lo, hi = _estimators.dr_range(
        so_k, spu_k, jnp.maximum(nu_k, 0), batch.max_pu, batch.min_pu, lam, n
    )
    center_k = jnp.clip(center, lo, hi)
    # the "hoeffding" kind is METHODS.md 2.4's lam = 0 reference (what a user of the plain mean
    # would report): its own terms (sum_O S + |U| S_j) / n and range [so/n, (so+|U|)/n],
    # whatever lam the policy's DR terms use; without predictions lam is 0 and they are
    # the same terms, so they are only computed (and scanned over) with predictions
    if config.predictions and "hoeffding" in config.cs_kinds:
        # (the predictions enter as zeros: 0 * a NaN prediction would be NaN)
        zero = jnp.zeros_like(spu_k)
        y0 = _estimators.dr_term(so_k, zero, jnp.maximum(nu_k, 1), s_b, zero, 0.0, n)
        lo0, hi0 = _estimators.dr_range(so_k, zero, jnp.maximum(nu_k, 0), 0.0, 0.0, 0.0, n)
        plain = (y0, lo0, hi0)
    else:
        plain = ()
    alpha_arm = params.alpha / K

    cs_arm = tuple(_take(st, arm) for st in state.cs)

    def item_body(carry, xs):
        cs_c, ls = carry
        (y_k, lo_k, hi_k, m_k, s_k, p_k, v_k), plain_k = xs[:7], xs[7:]
        new_cs = []
        for kind, st in zip(config.cs_kinds, cs_c):
            # (the centre m_k is unused by "hoeffding")
            terms = plain_k if kind == "hoeffding" and plain_k else (y_k, lo_k, hi_k)
            upd = _confseq.get(kind).update(st, *terms, m_k, alpha_arm)
            new_cs.append(jax.tree.map(lambda a_, b_: jnp.where(v_k, a_, b_), upd, st))
        ls = _estimators.lambda_stats_update(ls, s_k, p_k, v_k)
        return (tuple(new_cs), ls), None

    (cs_arm, ls_arm), _ = jax.lax.scan(
        item_body,
        (cs_arm, _take(state.lam_stats, arm)),
        (y, lo, hi, center_k, s_b, p_b, batch.valid, *plain),
    )
    return cs_arm, ls_arm


def _estimates(sum_s_new, count_new, sp_obs, sp_all, ls_arm, config: Config, params: Params):
    """Ranking (difference) estimate and naive pooled estimate after the refit."""
    n = config.num_items
    if config.predictions:
        lam_next = _estimators.plugin_lambda(ls_arm, params.lam0, shrink=params.shrink)
        est_arm = _estimators.difference_estimate(
            sum_s_new, sp_obs, count_new, sp_all, lam_next, n
        )
        naive_arm = _estimators.naive_pooled(sum_s_new, sp_all - sp_obs, n)
    else:
        est_arm = sum_s_new / jnp.maximum(count_new, 1).astype(jnp.float32)
        est_arm = jnp.where(count_new > 0, est_arm, 0.5)
        naive_arm = sum_s_new / n
    return jnp.where(count_new >= n, sum_s_new / n, est_arm), naive_arm


def _refit_blocked(state, arm, batch, carried, order_key, truth, data, config, params):
    """The same refit with every sum over items accumulated block by block.

    One pass with ``num_newton = 1`` (the default): the first Newton direction comes
    from the sums of :func:`_batch_blocked` plus the drawn items, and the new
    predictions' sums ride on the line-search pass (at every trial step; the accepted
    one is kept). Each further Newton step adds two passes. Without a refit no pass is
    needed at all (the predictions are those of :func:`_batch_blocked`).
    """
    at, sums, payload = carried
    vf = batch.valid.astype(jnp.float32)
    n_new = jnp.sum(batch.valid, dtype=jnp.int32)
    s_top, p_top, praw_top, V_top, c_top = payload
    u_arm = state.u[arm]
    if not config.refit or config.num_newton < 1:
        return u_arm, sums["sp_seen"] + jnp.sum(p_top * vf), sums["sp_all"]

    # the data part of the derivatives at u_arm over the new seen set = before + batch
    w_b = vf * praw_top * (1.0 - praw_top)
    g = sums["g"] + V_top.T @ (vf * (praw_top - s_top))
    H = sums["H"] + (V_top * w_b[:, None]).T @ V_top
    vv = sums["vv"] + jnp.sum(vf * jnp.sum(V_top * V_top, axis=-1))
    count_new = state.sampler.count[arm] + n_new
    thr_key = batch.sampler.thr_key[arm]
    thr_idx = batch.sampler.thr_idx[arm]

    def block(k):
        start, idx, own = _block(k, config)
        keys = _sampling.keys_at(order_key, arm, idx, config.sync)
        seen_new = own & _sampling.seen_mask(keys, thr_key, thr_idx, idx)
        f = _factors_block(truth, data, start, idx, config, params)
        s = _row_block(at, data, f, start, config)
        return f.V, f.c, s, seen_new, own, idx

    def trial_sums(z, blk):
        _, _, s, seen_new, own, idx = blk
        p = _corrupt(jax.nn.sigmoid(z), s[None, :], at, idx, config, params)
        p = jnp.broadcast_to(p, z.shape)
        return (jnp.sum(jnp.where(seen_new[None, :], p, 0.0), axis=1),
                jnp.sum(jnp.where(own[None, :], p, 0.0), axis=1))

    u_new, (sp_obs, sp_all) = update_model_factor_blocked(
        block,
        config.num_blocks,
        u_arm,
        _u_mean(data, config),
        params.rho,
        config.num_newton,
        return_hessian=False,
        data_grad_hess=(g, H, count_new, vv),
        trial_sums=trial_sums,
        online=True,
    )
    return u_new, sp_obs, sp_all


def _step(state: LoopState, order_key, truth, data, config: Config, params: Params, cap_calls,
          table=None):
    """One pull of one arm (a no-op once stopped or when nothing can be pulled)."""
    if config.blocked:
        return _step_blocked(state, order_key, truth, data, config, params, cap_calls)
    return _step_whole(state, order_key, truth, data, config, params, cap_calls, table)


def _step_whole(
    state: LoopState, order_key, truth, data, config: Config, params: Params, cap_calls,
    table=None,
):
    """One pull of one arm on whole rows of length ``n`` (``num_items <= item_block``).

    Computes the same values as before blocks existed (results bit for bit, pinned by
    ``tests/test_blocks.py``); :func:`_step_blocked` is the streamed counterpart and
    shares the martingale update (:func:`_martingale`) with it.
    """
    n, b = config.num_items, config.batch_size
    count = state.sampler.count
    arm, limit, active, pstate = _choose(state, config, params, cap_calls)

    # --- the arm's view: order, truth row, predictions frozen before the batch. With an
    # order table the batch is a slice of the arm's order and the seen-mask (needed only
    # with predictions) a compare; otherwise both come from the regenerated keys.
    n_seen = count[arm]
    n_unseen = n - n_seen
    if table is not None:
        items, valid, sampler = _sampling.take_from_table(
            table, order_key, state.sampler, arm, b, limit, config.sync
        )
        seen = _sampling.table_seen(table, state.sampler, arm) if config.predictions else None
    else:
        keys, seen = _sampling.arm_view(order_key, state.sampler, arm, n, config.sync)
        items, valid, sampler = _sampling.take_batch(keys, seen, state.sampler, arm, b, limit)
    valid = valid & active
    vf = valid.astype(jnp.float32)
    if config.predictions:
        s_row = _row(truth, data, arm, config, params)
        s_b = s_row[items] * vf
        unseen = ~seen
        factors = _item_factors(truth, data, config, params)
        p_row = _predict(state.u[arm], s_row, arm, truth, factors, config, params)
        lam = _estimators.plugin_lambda(
            _take(state.lam_stats, arm), params.lam0, shrink=params.shrink
        )
        sum_pu = jnp.sum(jnp.where(unseen, p_row, 0.0))
        max_pu = jnp.max(jnp.where(unseen, p_row, -jnp.inf))
        min_pu = jnp.min(jnp.where(unseen, p_row, jnp.inf))
        max_pu = jnp.where(n_unseen > 0, max_pu, 0.0)
        min_pu = jnp.where(n_unseen > 0, min_pu, 0.0)
        p_b = p_row[items] * vf
    else:
        # no predictions: every prediction is 0, so are their sum, max and min over the
        # unseen items; only the batch's own scores are read
        if config.truth == "real":
            s_b = data.pool[truth.rows[arm], items] * vf
        else:
            s_b = _row(truth, data, arm, config, params)[items] * vf
        zero = jnp.zeros((), jnp.float32)
        lam = sum_pu = max_pu = min_pu = zero
        p_b = jnp.zeros_like(s_b)

    # --- the batch, one martingale term per item (items move from U to O one at a time)
    batch = _Batch(items, valid, sampler, s_b, p_b, sum_pu, max_pu, min_pu, lam)
    cs_arm, ls_arm = _martingale(state, arm, batch, config, params)
    n_new = jnp.sum(valid, dtype=jnp.int32)
    sum_hi, sum_c = _add_scores(state, arm, jnp.sum(s_b))
    sum_s_new = sum_hi + sum_c
    count_new = n_seen + n_new

    # --- refit the arm's factor on its observed items; new ranking estimate
    if config.predictions:
        if table is not None:
            seen_new = _sampling.table_seen(table, sampler, arm)
        else:
            seen_new = seen | jnp.zeros((n,), bool).at[items].max(valid)
        u_arm = state.u[arm]
        if config.refit:
            u_new = refit_row(factors, s_row, seen_new, u_arm, params.rho, config.num_newton)
        else:
            u_new = u_arm
        p_new = _predict(u_new, s_row, arm, truth, factors, config, params)
        lam_next = _estimators.plugin_lambda(ls_arm, params.lam0, shrink=params.shrink)
        sp_obs = jnp.sum(jnp.where(seen_new, p_new, 0.0))
        sp_all = jnp.sum(p_new)
        est_arm = _estimators.difference_estimate(
            sum_s_new, sp_obs, count_new, sp_all, lam_next, n
        )
        naive_arm = _estimators.naive_pooled(sum_s_new, sp_all - sp_obs, n)
    else:
        u_new = state.u[arm]
        est_arm = sum_s_new / jnp.maximum(count_new, 1).astype(jnp.float32)
        est_arm = jnp.where(count_new > 0, est_arm, 0.5)
        naive_arm = sum_s_new / n
    est_arm = jnp.where(count_new >= n, sum_s_new / n, est_arm)

    new = LoopState(
        sampler=sampler,
        pstate=pstate,
        sum_s=state.sum_s.at[arm].set(sum_hi),
        sum_c=state.sum_c.at[arm].set(sum_c),
        u=state.u.at[arm].set(u_new),
        lam_stats=_put(state.lam_stats, arm, ls_arm),
        lam=state.lam.at[arm].set(lam),
        estimate=state.estimate.at[arm].set(est_arm),
        naive=state.naive.at[arm].set(naive_arm),
        cs=tuple(_put(st, arm, ca) for st, ca in zip(state.cs, cs_arm)),
        calls=state.calls + n_new,
        stopped=state.stopped,
        status=state.status,
    )
    # the policy state advances even when the pull is empty (SySRs rejections)
    new = jax.tree.map(lambda a_, b_: jnp.where(active, a_, b_), new, state)
    new = new._replace(pstate=jax.tree.map(
        lambda a_, b_: jnp.where(state.stopped, b_, a_), pstate, state.pstate))
    return new


def _step_blocked(
    state: LoopState, order_key, truth, data, config: Config, params: Params, cap_calls
):
    """One pull of one arm with the items streamed in blocks (``num_items > item_block``)."""
    arm, limit, active, pstate = _choose(state, config, params, cap_calls)

    # --- the arm's view: order, truth row, predictions frozen before the batch
    batch, carried = _batch_blocked(
        state, arm, limit, active, order_key, truth, data, config, params
    )

    # --- the batch, one martingale term per item
    cs_arm, ls_arm = _martingale(state, arm, batch, config, params)
    n_new = jnp.sum(batch.valid, dtype=jnp.int32)
    sum_hi, sum_c = _add_scores(state, arm, jnp.sum(batch.s_b))
    sum_s_new = sum_hi + sum_c
    count_new = state.sampler.count[arm] + n_new

    # --- refit the arm's factor on its observed items; new ranking estimate
    if config.predictions:
        u_new, sp_obs, sp_all = _refit_blocked(
            state, arm, batch, carried, order_key, truth, data, config, params
        )
    else:
        u_new, sp_obs, sp_all = state.u[arm], None, None
    est_arm, naive_arm = _estimates(sum_s_new, count_new, sp_obs, sp_all, ls_arm, config, params)

    new = LoopState(
        sampler=batch.sampler,
        pstate=pstate,
        sum_s=state.sum_s.at[arm].set(sum_hi),
        sum_c=state.sum_c.at[arm].set(sum_c),
        u=state.u.at[arm].set(u_new),
        lam_stats=_put(state.lam_stats, arm, ls_arm),
        lam=state.lam.at[arm].set(batch.lam),
        estimate=state.estimate.at[arm].set(est_arm),
        naive=state.naive.at[arm].set(naive_arm),
        cs=tuple(_put(st, arm, ca) for st, ca in zip(state.cs, cs_arm)),
        calls=state.calls + n_new,
        stopped=state.stopped,
        status=state.status,
    )
    # the policy state advances even when the pull is empty (SySRs rejections)
    new = jax.tree.map(lambda a_, b_: jnp.where(active, a_, b_), new, state)
    new = new._replace(pstate=jax.tree.map(
        lambda a_, b_: jnp.where(state.stopped, b_, a_), pstate, state.pstate))
    return new


def _finish_status(state: LoopState, config: Config, rec: Record) -> jax.Array:
    exhausted = jnp.all(state.sampler.count >= config.num_items)
    bad = ~(jnp.all(jnp.isfinite(rec.estimate)) & jnp.all(~jnp.isnan(rec.lower)))
    status = jnp.where(exhausted, STATUS_EXHAUSTED, state.status)
    return jnp.where(bad, STATUS_NONFINITE, status).astype(jnp.int32)


def _setup(rep_key, data: ProblemData, config: Config, params: Params, instance=None):
    order_key = jax.random.fold_in(rep_key, _PURPOSE_ORDER)
    if config.truth == "real":
        n_inst = data.instances.shape[0]
        if instance is None:
            inst = jax.random.randint(
                jax.random.fold_in(rep_key, _PURPOSE_INSTANCE), (), 0, n_inst, jnp.int32
            )
        else:  # a design's assignment (e.g. replicate i plays instance i mod I)
            instance = jnp.asarray(instance)
            if jnp.issubdtype(instance.dtype, jnp.unsignedinteger):  # the runner's uint32 index
                inst = (instance.astype(jnp.uint32) % jnp.uint32(n_inst)).astype(jnp.int32)
            else:  # floor modulo: -1 -> I - 1
                inst = jnp.mod(instance.astype(jnp.int32), n_inst).astype(jnp.int32)
        rows = data.instances[inst]
    else:
        inst = jnp.int32(-1)
        rows = jnp.zeros((config.num_arms,), jnp.int32)
    truth = _Truth(
        rows=rows,
        key=jax.random.fold_in(rep_key, _PURPOSE_TRUTH),
        pred_key=jax.random.fold_in(rep_key, _PURPOSE_PRED),
    )
    if config.blocked:
        theta = _theta_blocked(truth, data, config, params)
    else:
        theta = jax.lax.map(
            lambda a: jnp.mean(_row(truth, data, a, config, params)), jnp.arange(config.num_arms)
        )
    return order_key, truth, inst, theta


def _float32(tree):
    """``tree`` with its floating leaves as float32 (others as they are)."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32) if jnp.issubdtype(
        jnp.result_type(x), jnp.floating) else x, tree)  # (a Python float has no astype)


def run_identification(
    rep_key: jax.Array, data: ProblemData, params: Params, config: Config, instance=None
) -> IdentificationOutput:
    """Run one replicate of the identification loop (pure; jit/vmap it from outside).

    Args:
      rep_key: the replicate's key (replicate ``i`` of a study: ``fold_in(base, i)``).
      data: the truth source's arrays.
      params: dynamic settings.
      config: static settings (a hashable :class:`Config`).
      instance: optional integer scalar: play instance ``instance % I`` of
        ``data.instances`` instead of one drawn from the key (real data; ignored for
        synthetic truth). The item orders still come from the key.

    Returns:
      :class:`IdentificationOutput` with one :class:`Record` per checkpoint.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxeval import _identification as idn
      >>> cfg = idn.Config("ucbe", num_arms=3, num_items=20, budgets=(10, 60), truth="synthetic")
      >>> out = jax.jit(idn.run_identification, static_argnums=3)(
      ...     jax.random.key(0), idn.dummy_data(cfg), idn.Params.make(), cfg)
      >>> out.checkpoints.calls.tolist(), out.checkpoints.pulls.sum(-1).tolist()
      ([10, 60], [10, 60])
    """
    # float32 throughout: float64 operands (x64 on) would mix dtypes in the state
    data, params = _float32(data), _float32(params)
    if (config.policy == "sysrs" and config.horizon is None and config.mode == "budget"
            and len(config.budgets) > 1):
        # one fixed-budget run per checkpoint (same key: same instance and item order)
        outs = [run_identification(rep_key, data, params,
                                   dataclasses.replace(config, budgets=(b,)), instance)
                for b in config.budgets]
        return outs[0]._replace(checkpoints=jax.tree.map(
            lambda *xs: jnp.concatenate(xs, axis=0), *(o.checkpoints for o in outs)))
    order_key, truth, inst, theta = _setup(rep_key, data, config, params, instance)
    state = _init_state(truth, data, config, params)
    budgets = jnp.asarray(config.budgets, jnp.int32)
    table = (
        _sampling.order_table(order_key, config.num_arms, config.num_items, config.sync,
                              with_keys=config.predictions)
        if config.tabled else None
    )

    if config.mode == "budget":
        snap0 = _snapshot(state, config)
        snaps = jax.tree.map(lambda x: jnp.broadcast_to(x, budgets.shape + x.shape), snap0)

        def body(carry, _):
            st, snaps = carry
            # Batches are cut only at the run's final budget: a checkpoint keeps the state
            # after the last whole batch that fits within it, so the trajectory (and every
            # checkpoint's record) is the same whatever other checkpoints are requested.
            st = _step(st, order_key, truth, data, config, params, budgets[-1], table)
            keep = st.calls <= budgets
            snaps = jax.tree.map(
                lambda r_, c_: jnp.where(
                    keep.reshape(keep.shape + (1,) * c_.ndim), c_[None], r_
                ),
                snaps,
                _snapshot(st, config),
            )
            return (st, snaps), None

        (state, snaps), _ = jax.lax.scan(body, (state, snaps), None, length=config.num_steps)
        records = _finish(snaps, config)
        exhausted = jnp.all(state.sampler.count >= config.num_items)
        reached = (records.calls >= budgets) | (state.calls > records.calls)
        status = jnp.where(
            reached, STATUS_BUDGET, jnp.where(exhausted, STATUS_EXHAUSTED, STATUS_POLICY_DONE)
        )
        full_at = jnp.all(records.pulls >= config.num_items, axis=-1)
        status = jnp.where(full_at, STATUS_EXHAUSTED, status)
        finite = jnp.all(jnp.isfinite(records.estimate), -1) & ~jnp.any(
            jnp.isnan(records.lower), (-2, -1)
        )
        status = jnp.where(finite, status, STATUS_NONFINITE).astype(jnp.int32)
        records = records._replace(status=status)
        return IdentificationOutput(theta=theta, instance=inst, checkpoints=records)

    # ------------------------------------------------------- fixed confidence
    cap = budgets[-1]

    q = config.cs_kinds.index(config.stop_kind)

    def confident(st):
        """``(stop, more)``: the stopping rule, and whether a step can still pull an
        arm, both from the one record of the stop's bounds."""
        rec, stop = confident_record(st, config, params)
        done = st.sampler.count >= config.num_items
        if config.skip_separated:  # arms left, but all separated: every step a no-op
            done = done | _separated_of(rec.lower[q], rec.upper[q], rec.recommended,
                                        params.eps)
        return stop, ~jnp.all(done)

    def cond(carry):
        st, i, more = carry
        return ~st.stopped & (st.calls < cap) & more & (i < config.num_steps)

    def wbody(carry):
        st, i, _ = carry
        st = _step(st, order_key, truth, data, config, params, cap, table)
        stop, more = confident(st)
        st = st._replace(
            stopped=stop, status=jnp.where(stop, STATUS_CONFIDENT, st.status).astype(jnp.int32)
        )
        return st, i + 1, more

    stop, more = confident(state)
    state = state._replace(stopped=stop)
    state, steps, _ = jax.lax.while_loop(cond, wbody, (state, jnp.zeros((), jnp.int32), more))
    rec = _record(state, config)
    status = jnp.where(state.stopped, STATUS_CONFIDENT, _finish_status(state, config, rec))
    status = jnp.where(
        ~state.stopped & (state.calls < cap) & (status == STATUS_BUDGET), STATUS_POLICY_DONE, status
    )
    rec = rec._replace(status=status.astype(jnp.int32))
    records = jax.tree.map(lambda x: x[None], rec)
    return IdentificationOutput(theta=theta, instance=inst, checkpoints=records)


def dummy_data(config: Config) -> ProblemData:
    """Placeholder :class:`ProblemData` for synthetic truth (no pool, no fitted factors)."""
    return ProblemData(
        pool=jnp.zeros((1, 1), jnp.float32),
        instances=jnp.zeros((1, config.num_arms), jnp.int32),
        item_factors=ItemFactors(
            jnp.zeros((1, 1), jnp.float32), jnp.zeros((1,), jnp.float32), jnp.zeros((1,))
        ),
    )


def make_replicate_fn(problem: tuple[ProblemData, Params] | ProblemData, config: Config):
    """A per-replicate function for the study runner: ``fn(rep_key) -> IdentificationOutput``.

    The problem's arrays (and the settings) are closed over, so they become constants
    of the compiled program; for many settings of one problem without recompiling,
    call :func:`run_identification` with ``data``/``params`` as operands instead.

    Args:
      problem: ``(data, params)``, or ``data`` alone (default :class:`Params`).
      config: the static :class:`Config`.

    Returns:
      ``fn(rep_key)``; pure and jittable, to be vmapped over replicate keys
      (replicate ``i`` gets ``fold_in(base, i)``).

    Example:
      >>> import jax
      >>> from jaxeval import _identification as idn
      >>> cfg = idn.Config("uniform", num_arms=2, num_items=8, budgets=(4, 16), truth="synthetic")
      >>> fn = idn.make_replicate_fn(idn.dummy_data(cfg), cfg)
      >>> fn(jax.random.key(1)).checkpoints.calls.tolist()
      [4, 16]
    """
    if isinstance(problem, ProblemData):
        data, params = problem, Params.make()
    else:
        data, params = problem

    def fn(rep_key):
        return run_identification(rep_key, data, params, config)

    return fn
