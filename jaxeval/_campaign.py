"""A live best-model identification: ask which model to evaluate on which items, tell
the scores, read anytime-valid intervals.

:func:`~jaxeval.simulate_identification` replays the loop on matrices whose every cell
is known; :class:`IdentificationCampaign` runs the very same kernel step by step for a
real evaluation, where a score exists only once somebody has paid for the LLM call.
Each :meth:`~IdentificationCampaign.ask` returns the model the policy pulls next and
the ``b`` items of that model's own uniform without-replacement order;
:meth:`~IdentificationCampaign.tell` takes their scores and advances the state (the
doubly robust terms, the confidence sequences, the online refit of the model's factor).
Because the state is the simulation's state and the step is the simulation's step, an
oracle that answers from a known matrix reproduces ``simulate_identification``'s
replicate 0 exactly (``tests/test_campaign.py``), so every validity and accuracy figure
measured there carries over to the campaign.

The intervals hold at every step simultaneously (confidence sequences, each model at
level ``alpha / K``), so a campaign may be stopped whenever its user likes: after a
budget, when the leader's interval separates from every other model's (the ε-good rule
of the fixed-confidence mode, :attr:`CampaignStatus.confident`), or by hand.

A campaign saves itself (:meth:`~IdentificationCampaign.save`: its settings, the fitted
item factors, every answered request and the kernel's state) and
:meth:`~IdentificationCampaign.load` continues from it, so an evaluation interrupted
after hours of LLM calls loses none. Loading restores the saved state when the same
jaxeval, JAX and platform wrote it and it agrees with the saved answers (its checks
cost ~40 µs per answer, a replay ~2 ms); otherwise, or with ``replay=True``, it
replays every answer through the kernel, which checks that each request comes out
again as it was asked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval import _identification as idn
from jaxeval import _policies, _sampling
from jaxeval._data import (
    NPZ_READ_ERRORS,
    ScoreMatrix,
    as_score_matrix,
    is_missing,
    npz_name,
    out_of_unit_hint,
)
from jaxeval._data import array_digest as _digest
from jaxeval._factorization import ItemFactors
from jaxeval._io import open_npz
from jaxeval._runner import check_int, default_impl_key, int_seed
from jaxeval._simulate import (
    _check_alpha,
    _check_real,
    _config,
    item_factors_of,
    no_effect,
    unused_settings,
)

__all__ = ["CampaignRequest", "CampaignStatus", "IdentificationCampaign"]

_FORMAT = "jaxeval.campaign/1"
#: Version of the kernel state saved with a campaign (``LoopState``'s leaves). Bump it
#: when a field keeps its shape but changes meaning: a saved state of another version
#: is not restored (the answers are replayed instead).
_STATE_VERSION = 1


def _state_stamp(layout, answers: int, inputs: str, content: str) -> dict:
    """What a saved kernel state must match to be restored instead of replayed:
    ``inputs`` is :meth:`IdentificationCampaign._inputs_digest` (settings, seed key,
    item factors, names), ``content`` the :func:`_digest` of the answers' arrays and
    the state's leaves as saved (a damaged or edited file is replayed instead)."""
    from jaxeval import __version__

    return dict(version=_STATE_VERSION, jaxeval=__version__, layout=layout,
                answers=int(answers), inputs=inputs, content=content)


def _layout(state) -> list[str]:
    """The state's leaves by path (``.sampler.count``, ...) with dtype and shape: a
    field renamed, moved or retyped is a different layout."""
    return [f"{jax.tree_util.keystr(path)}:{np.dtype(x.dtype).str}{tuple(x.shape)}"
            for path, x in jax.tree_util.tree_flatten_with_path(state)[0]]


def _arm_order_and_keys(order_key, arm, n: int, synchronized: bool):
    """One stream's draw order and its order keys (``[n]`` each)."""
    return (_sampling.arm_order(order_key, arm, n, synchronized),
            _sampling.arm_keys(order_key, arm, n, synchronized))


_arm_order_and_keys_jit = jax.jit(_arm_order_and_keys, static_argnums=(2, 3))


def _whole(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` as int64 when it holds whole numbers (of an integer or float dtype)."""
    if np.issubdtype(x.dtype, np.integer):
        return x.astype(np.int64)
    if np.issubdtype(x.dtype, np.floating) and np.all(np.isfinite(x)) and np.all(x == np.round(x)):
        return x.astype(np.int64)
    raise ValueError(f"its {name!r} entry holds other values than whole numbers")


def saved_path(path: str | os.PathLike) -> Path:
    """The file a campaign saved as ``path`` lives in: ``path`` itself, or ``path``
    with ``.npz`` appended when only that exists (as :meth:`IdentificationCampaign.save`
    names it). Used by ``load`` and by the CLI's file lock, so both mean one file."""
    path = Path(path)
    if not path.exists() and path.with_suffix(path.suffix + ".npz").exists():
        return path.with_suffix(path.suffix + ".npz")
    return path


def _chmod_like_a_new_file(tmp: Path, path: Path) -> None:
    """Give ``tmp`` the permissions of the file it replaces, or of a file created
    under the current umask (``tempfile.mkstemp`` makes it owner-only)."""
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    try:
        os.chmod(tmp, mode)
    except OSError:  # pragma: no cover - a file system without permissions
        pass


def _same_value(a: Any, b: Any) -> bool:
    """Equality that compares arrays whole (and dicts / tuples of them) instead of
    raising NumPy's "truth value of an array is ambiguous"."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind
                              in "fc" and np.asarray(b).dtype.kind in "fc")
    return bool(a == b)


class _ArrayFieldsEq:
    """``==`` of a dataclass with array fields: same type, every field equal (arrays
    compared whole, NaN equal to NaN); not hashable."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(_same_value(getattr(self, f.name), getattr(other, f.name))
                   for f in dataclasses.fields(self))


@dataclasses.dataclass(frozen=True, eq=False)
class CampaignRequest(_ArrayFieldsEq):
    """What to evaluate next: one model on a batch of items, in order.

    Attributes:
      model: the candidate's name.
      arm: its index in :attr:`IdentificationCampaign.candidates`.
      items: ``[b']`` item names (``b' <= batch_size``: fewer near the budget or when
        the model has fewer unseen items left).
      index: ``[b']`` their item indices.
      step: the number of requests answered before this one.

    The arrays are the caller's own copies: each :meth:`~IdentificationCampaign.ask`
    returns a fresh request, and changing one changes nothing in the campaign (a
    request whose items were changed is refused by :meth:`~IdentificationCampaign.tell`).
    """

    model: str
    arm: int
    items: np.ndarray
    index: np.ndarray
    step: int


@dataclasses.dataclass(frozen=True, eq=False)
class CampaignStatus(_ArrayFieldsEq):
    """The campaign's estimates and anytime-valid intervals now (numpy).

    Attributes:
      models: ``[K]`` candidate names.
      estimate: ``[K]`` accuracy estimates (the policy's ranking estimate: the doubly
        robust difference estimate for ``pulse`` / ``pulse_ucb``, the naive pooled
        estimate (observed scores plus predictions; biased when the predictions are)
        for ``naive``, the mean of the scored items otherwise; exact once a model is
        fully evaluated). The difference estimate is unbiased, not bounded: after few
        scores that miss confident predictions it can leave [0, 1] (the bounds are
        clipped to it). The intervals are valid whatever the policy.
      lower, upper: ``[K]`` bounds of the ``stop_kind`` interval, jointly valid for all
        ``K`` models at level ``1 - alpha`` at every step.
      bounds: ``{kind: (lower [K], upper [K])}`` for every computed interval kind.
      pulls: ``[K]`` items scored per model.
      calls: LLM calls spent.
      budget: the campaign's call budget.
      recommended: the model with the highest estimate (among those the policy keeps).
      confident: the leader's lower bound clears every other model's upper bound
        minus ``eps``: the leader is ε-best with probability at least ``1 - alpha``.
      done: :meth:`IdentificationCampaign.ask` has nothing more to request.
      reason: why it is done (``"budget"``, ``"confident"``, ``"exhausted"``,
        ``"policy"``) or ``""``.
    """

    models: np.ndarray
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    bounds: dict
    pulls: np.ndarray
    calls: int
    budget: int
    recommended: str
    confident: bool
    done: bool
    reason: str

    def table(self) -> str:
        """A plain-text table, best estimate first."""
        order = np.argsort(-self.estimate, kind="stable")
        w = max(5, *(len(str(m)) for m in self.models))
        lines = [
            f"{'model':<{w}}  estimate  interval            scored",
        ]
        for i in order:
            mark = " *" if self.models[i] == self.recommended else ""
            lines.append(
                f"{str(self.models[i]):<{w}}  {self.estimate[i]:8.4f}  "
                f"[{self.lower[i]:.4f}, {self.upper[i]:.4f}]  {int(self.pulls[i]):6d}{mark}"
            )
        state = f"done ({self.reason})" if self.done else "running"
        lines.append(
            f"{self.calls} of {self.budget} calls; {state}; "
            f"{'confident' if self.confident else 'not yet confident'} that "
            f"{self.recommended} is best"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def plot(self, path: str | os.PathLike) -> Path:
        """A forest plot of the intervals (best estimate on top) as a PNG; needs
        matplotlib (``pip install 'jaxeval[plots]'``)."""
        from jaxeval._report import _plt

        plt = _plt()
        order = np.argsort(self.estimate, kind="stable")  # best at the top
        y = np.arange(order.size)
        fig, ax = plt.subplots(figsize=(6.5, 1.2 + 0.35 * order.size))
        best = self.models[order] == self.recommended
        for yi, i, b in zip(y, order, best):
            color = "C3" if b else "C0"
            ax.plot([self.lower[i], self.upper[i]], [yi, yi], color=color, lw=2.5,
                    solid_capstyle="butt")
            ax.plot(self.estimate[i], yi, "o", color=color, ms=5)
            ax.text(1.01, yi, f"{int(self.pulls[i])}", transform=ax.get_yaxis_transform(),
                    va="center", fontsize=8, color="0.35")
        ax.set_yticks(y, [str(m) for m in self.models[order]], fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("accuracy: estimate and anytime-valid interval (joint over models)",
                      fontsize=9)
        state = f"done ({self.reason})" if self.done else "running"
        ax.set_title(f"{self.calls} of {self.budget} calls, {state}; leader "
                     f"{'separated' if self.confident else 'not yet separated'}",
                     fontsize=9, loc="left")  # (clear of the "scored" header)
        ax.text(1.01, 1.0, "scored", transform=ax.transAxes, fontsize=8, color="0.35",
                va="bottom")
        fig.tight_layout()
        path = Path(path)
        if not path.suffix:  # (matplotlib would add ".png" to the file it writes)
            path = path.with_suffix(".png")
        fig.savefig(path, bbox_inches="tight")  # (long model names, the right column)
        plt.close(fig)
        return path


# The kernel's step and the batch it would draw, jitted once per configuration. The
# configuration is static (hashable); everything else is an operand.
_step = jax.jit(idn._step, static_argnums=4)


def _peek_impl(state, order_key, table, config: idn.Config, params, cap):
    """The arm, items and validity of the batch :func:`idn._step_whole` would draw."""
    arm, limit, active, _ = idn._choose(state, config, params, cap)
    b, n = config.batch_size, config.num_items
    if table is not None:
        items, valid, _ = _sampling.take_from_table(
            table, order_key, state.sampler, arm, b, limit, config.sync
        )
    else:
        keys, seen = _sampling.arm_view(order_key, state.sampler, arm, n, config.sync)
        items, valid, _ = _sampling.take_batch(keys, seen, state.sampler, arm, b, limit)
    return arm, items, valid & active, active


_peek = jax.jit(_peek_impl, static_argnums=3)


_confident_jit = jax.jit(idn.confident_record, static_argnums=1)


def _fit_history(history: ScoreMatrix) -> ScoreMatrix:
    """The history rows that hold at least one score (a row without any carries no
    information about the items, and the factorization refuses it)."""
    keep = np.flatnonzero(np.asarray(history.mask).any(axis=1))
    if keep.size == 0:
        raise ValueError("history: no model in it has any observed score")
    return history if keep.size == history.n_models else history.take(models=keep)


def _history_msg(e: Exception | str) -> str:
    """A fit's error (or its text), naming the campaign's ``history`` where the fit says
    ``data``."""
    msg = str(e)
    return "history:" + msg[len("data:"):] if msg.startswith("data:") else msg


class IdentificationCampaign:
    """Find the best of ``K`` models with real LLM calls: ask, evaluate, tell.

    The loop of :func:`~jaxeval.simulate_identification`, one step at a time, for an
    evaluation whose scores do not exist yet. ``history`` holds models already scored
    on the benchmark (complete or not); PULSE fits its low-rank factorization on them
    and uses it to predict the candidates' unseen items, while the doubly robust
    estimator keeps every estimate unbiased and every interval valid whatever the
    quality of those predictions.

    Args:
      candidates: the ``K >= 2`` model names to compare (distinct; none of them in
        ``history``).
      history: a :class:`~jaxeval.ScoreMatrix` of other models on the benchmark's
        items, or a pandas DataFrame (models as rows) or 2-D array of their scores
        (rows named ``history_i``, columns by ``items`` when given) (required by the
        prediction policies unless ``factors`` is given).
      items: the benchmark's item names when there is no ``history`` (default: the
        history's items; when both are given they must be equal).
      policy: ``"pulse_ucb"`` (the default: PULSE's estimate + ``sqrt(a / N)``),
        ``"pulse"``, ``"ucbe"``, ``"naive"``, ``"uniform"`` or ``"sysrs"``.
      budget: the most LLM calls to spend (default ``K * n``; SySRs plans its phases
        for it).
      batch_size: items per request (a request's items can be evaluated in parallel).
      alpha: family-wise error level of the intervals (each model gets ``alpha / K``).
      seed: the item orders' seed (an int or a PRNG key), also the seed of the
        factorization fit on ``history``. The same seed, candidates and answers give
        the same requests.
      stop_when_confident: stop requesting once the leader is ε-best with confidence
        ``1 - alpha`` (:attr:`CampaignStatus.confident`).
      eps: ε of that rule (0: the leader's lower bound must clear every other upper).
      skip_separated: never request an already separated model (its upper bound below
        the leader's lower bound plus ``eps``): it cannot be more than ``eps`` better than
        the leader (at the intervals' level), nor is it what keeps the stop open.
        Default ``None``: on when ``stop_when_confident`` (every policy but SySRs), off
        for a fixed budget, which is then spent whole. On the five
        development sets it cut the calls to the confident stop by 25-80%
        (BUILD_NOTES.md, "Thirty-seventh session"). Campaigns saved before it existed
        load with it off, so their answers replay as they were asked.
      a, scale, rank, rho, lam0, shrink, num_newton, refit, cs_kinds, stop_kind,
        synchronized, fit_steps: as in :func:`~jaxeval.simulate_identification` (same
        defaults). ``lam0="learned"`` runs :func:`~jaxeval.learn_lam0` on ``history``
        once, here; the campaign keeps (and saves) the learned number. History rows
        without any observed score are left out of the fits.
      factors: a fitted :class:`~jaxeval.LowRankLogistic` to use instead of fitting
        one on ``history``.
      progress: print a line to stderr before the fits on ``history`` (the one slow
        part: minutes on large histories) and one with their time after them.

    Example:
      >>> import jaxeval
      >>> sm = jaxeval.load("oll2_musr").drop_duplicates()
      >>> history, pool = sm.split([len(sm.models) // 2], seed=0)
      >>> cands = pool.models[:3].tolist()
      >>> camp = jaxeval.IdentificationCampaign(cands, history, batch_size=8,
      ...                                       budget=300, fit_steps=100)
      >>> while (req := camp.ask()) is not None:
      ...     scores = pool.take(models=[req.model], items=req.items).scores[0]
      ...     camp.tell(req, scores)   # in a real campaign: your LLM's scores
      >>> st = camp.status()
      >>> st.calls <= 300, bool(st.lower[0] <= st.estimate[0] <= st.upper[0])
      (True, True)
    """

    def __init__(
        self,
        candidates: Sequence[str],
        history: ScoreMatrix | Any | None = None,
        *,
        items: Sequence[str] | None = None,
        policy: str = "pulse_ucb",
        budget: int | None = None,
        batch_size: int = 1,
        alpha: float = 0.05,
        seed: Any = 0,
        stop_when_confident: bool = True,
        eps: float = 0.0,
        skip_separated: bool | None = None,
        a: float = 1.0,
        scale: float = 1.0,
        rank: int = 8,
        rho: float | None = None,
        lam0: float | str = 1.0,
        shrink: float = 10.0,
        num_newton: int = 1,
        refit: bool = True,
        cs_kinds: Sequence[str] = ("eb", "hoeffding"),
        stop_kind: str = "eb",
        synchronized: bool | None = None,
        factors: Any = None,
        fit_steps: int = 500,
        progress: bool = False,
    ) -> None:
        if policy not in _policies.POLICIES:
            raise ValueError(f"policy: expected one of {_policies.POLICIES}, got {policy!r}")
        if isinstance(candidates, (str, bytes)):
            raise TypeError("candidates: expected a sequence of model names, got one string")
        if not isinstance(candidates, Iterable):  # (a count: K is the number of names)
            raise TypeError(f"candidates: expected a sequence of model names, got "
                            f"{type(candidates).__name__} {candidates!r} (the candidates "
                            "are named: their number is K)")
        for name, v in (("candidates", candidates), ("items", items)):
            if isinstance(v, (set, frozenset)):  # no order: the same seed, other requests
                raise TypeError(f"{name}: expected an ordered sequence of names, got a "
                                f"{type(v).__name__} (its order changes between runs)")
        for name, v in (("candidates", candidates), ("items", items)):
            # (only containers: a generator would be used up here)
            nested = isinstance(v, (list, tuple, np.ndarray)) and any(
                not isinstance(x, (str, bytes)) and np.ndim(x) != 0 for x in v)
            if nested:  # (str() would make each row one name)
                raise ValueError(f"{name}: expected a flat sequence of names, got nested "
                                 f"sequences (shape {np.shape(v)})")
        cands = np.asarray([str(c) for c in candidates])
        if cands.ndim != 1 or cands.size < 2:
            raise ValueError(f"candidates: expected at least 2 model names, got {cands.size}")
        dup = sorted({c for c in cands.tolist() if (cands == c).sum() > 1})
        if dup:
            raise ValueError(f"candidates: repeated model name(s) {dup[:5]}")
        if isinstance(items, (str, bytes)):
            raise TypeError("items: expected a sequence of item names, got one string")
        if history is not None:
            # an array's (or a default-labelled frame's) rows name no model: history_i,
            # never a candidate's name; its columns take the names in `items`
            history = as_score_matrix(history, "history", row_prefix="history_", items=items)
            known = sorted(set(cands.tolist()) & {str(m) for m in history.models})
            if known:
                raise ValueError(
                    f"candidates: {known[:5]} already have scores in history; drop them "
                    "from history (history.take(models=...)) or from candidates"
                )
        if history is None and factors is None and policy in _policies.PREDICTION_POLICIES:
            # (before the item names: a history would give those too)
            raise ValueError(
                f"history: policy {policy!r} predicts unseen items from models "
                "already scored; give history (or factors), or use a policy without "
                "predictions: 'ucbe', 'sysrs' or 'uniform'"
            )
        if items is None:
            if history is None:
                raise ValueError("items: give the benchmark's item names or a history")
            item_names = np.asarray(history.items).astype(str)
        else:
            item_names = np.asarray([str(x) for x in items])
            if history is not None and not np.array_equal(
                item_names, np.asarray(history.items).astype(str)
            ):
                raise ValueError("items: differ from history.items (names or order)")
            uniq, counts = np.unique(item_names, return_counts=True)
            if uniq.size != item_names.size:
                raise ValueError(f"items: repeated item names, e.g. "
                                 f"{[str(u) for u in uniq[counts > 1][:5]]}")
        K, n = int(cands.size), int(item_names.size)
        if n < 2:
            raise ValueError(f"items: expected at least 2 items, got {n}")
        alpha = _check_alpha(alpha)
        budget = K * n if budget is None else check_int("budget", budget, 1, K * n)
        learn_prior = isinstance(lam0, str)
        if learn_prior and lam0 != "learned":
            raise ValueError(f"lam0: expected a number in [0, 1] or 'learned', got {lam0!r}")
        for name, v, lo, hi in (("a", a, 0.0, 1e6), ("scale", scale, 0.0, 1e6),
                                ("shrink", shrink, 0.0, 1e6), ("lam0", lam0, 0.0, 1.0),
                                ("eps", eps, 0.0, 1.0)):
            if not (name == "lam0" and learn_prior):
                _check_real(name, v, lo, hi)
        if rho is not None:
            _check_real("rho", rho, 0.0, 1e6)
        num_newton = check_int("num_newton", num_newton, 0, 10_000)
        fit_steps = check_int("fit_steps", fit_steps, 1)
        needs_pred = policy in _policies.PREDICTION_POLICIES
        # the rank matters only to a policy that fits factors on history (a short
        # benchmark must not make UCB-E, SySRs or given factors refuse the default rank)
        fits = needs_pred and factors is None
        rank = check_int("rank", rank, 1, 10**6)
        if fits and rank >= n:
            # r * (m + n) + n parameters never fit in m * n cells when r >= n
            raise ValueError(f"rank: the factorization fitted on history needs fewer "
                             f"factors than items ({n} items), got rank={rank} (the "
                             "default is 8): pass a smaller rank")
        for name, v in (("synchronized", synchronized), ("refit", refit),
                        ("stop_when_confident", stop_when_confident),
                        ("skip_separated", skip_separated)):
            if not (isinstance(v, (bool, np.bool_))
                    or (v is None and name in ("synchronized", "skip_separated"))):
                raise TypeError(f"{name}: expected True or False, got {v!r}")
        if skip_separated is None:  # for the confident stop; a fixed budget is spent whole
            skip_separated = bool(stop_when_confident) and policy != "sysrs"
        skip_separated = bool(skip_separated)
        synchronized = None if synchronized is None else bool(synchronized)
        key = default_impl_key(seed)
        # every kernel setting checked before the (slow) factorization fit
        item_block = max(n, idn.ITEM_BLOCK)  # whole rows: one campaign, no streaming
        cs_kinds = tuple(cs_kinds)
        if not cs_kinds:  # a campaign reports intervals
            raise ValueError("cs_kinds: expected at least one interval kind, got none")
        _config(policy, K, n, batch_size, (budget,), None, "budget", cs_kinds, stop_kind,
                None, refit, num_newton, synchronized, None, "real", 1, "none", item_block,
                skip_separated=skip_separated)
        if learn_prior and not needs_pred:  # refused before the unused-settings warning
            raise ValueError(f"lam0='learned': policy {policy!r} does not use predictions")
        # (eps always counts: status() reports the confident separation, stop or not)
        unused = unused_settings(
            policy, needs_pred, "confidence", "none", False, a=a, scale=scale, eps=eps,
            lam0=lam0, shrink=shrink, rank=rank, rho=rho, num_newton=num_newton, refit=refit,
            factors=factors, fit_steps=fit_steps,
        )
        if unused:
            warnings.warn(
                f"IdentificationCampaign: {no_effect(unused, policy)}: the campaign runs "
                "as with their defaults", stacklevel=2,
            )

        fit_rho = 1.0
        if not isinstance(progress, (bool, np.bool_)):
            raise TypeError(f"progress: expected True or False, got {progress!r}")
        t0 = time.perf_counter()

        def say(msg: str) -> None:
            print(f"IdentificationCampaign: {msg}", file=sys.stderr, flush=True)

        if needs_pred:
            # the rows the fits use (computed once for the factorization and the prior)
            hist = (_fit_history(history) if history is not None
                    and (factors is None or learn_prior) else None)
            if factors is None:  # (so history is given: checked above)
                from jaxeval._factorization_api import fit_factorization

                if progress:
                    say(f"fitting a rank-{rank} factorization on the {hist.n_models} "
                        f"history models x {hist.n_items} items ({fit_steps} steps)")
                try:
                    factors = fit_factorization(hist, rank=rank, rho=1.0, seed=seed,
                                                num_steps=fit_steps)
                except ValueError as e:
                    raise ValueError(_history_msg(e)) from None
            (V, c, u_mean), own_rho = item_factors_of(factors, item_names)
            fit_rho = fit_rho if own_rho is None else own_rho
            if learn_prior:
                if history is None:
                    raise ValueError("lam0='learned' is learned on history; give history "
                                     "(or a number)")
                from jaxeval._factorization_api import learn_lam0, wrapped_lam0_error

                # learn_lam0 takes an int seed: a key gives one drawn from it
                lseed = int_seed(seed, key, 0x1A30)
                if progress:
                    say(f"learning lam0 on the {hist.n_models} history models")
                try:
                    lam0 = learn_lam0(hist, rank=int(np.shape(V)[1]), seed=lseed,
                                      num_steps=fit_steps, progress=progress)
                except ValueError as e:
                    raise ValueError(
                        f"lam0='learned': {_history_msg(wrapped_lam0_error(e))}"
                    ) from None
            if progress and hist is not None:
                say(f"fitted in {time.perf_counter() - t0:.1f} s")
        else:
            V = np.zeros((n, 1), np.float32)
            c = np.zeros((n,), np.float32)
            u_mean = np.zeros((1,), np.float32)
        rho = fit_rho if rho is None else float(rho)

        self.candidates = cands
        self.items = item_names
        self.settings = dict(
            policy=policy, budget=int(budget), batch_size=int(batch_size), alpha=alpha,
            stop_when_confident=bool(stop_when_confident), eps=float(eps), a=float(a),
            scale=float(scale), rho=rho, lam0=float(lam0), shrink=float(shrink),
            num_newton=num_newton, refit=bool(refit), cs_kinds=list(cs_kinds),
            stop_kind=stop_kind, synchronized=synchronized,
            # written only when on: files saved before the setting existed (off) keep
            # their settings, digests and replays
            **({"skip_separated": True} if skip_separated else {}),
        )
        self._key_data = np.asarray(jax.random.key_data(key))
        self._factors = (V, c, u_mean)
        self._build()

    # ------------------------------------------------------------------ internals
    def _build(self) -> None:
        s = self.settings
        K, n = self.candidates.size, self.items.size
        # the constructor's checks again, for what load() reads from a file
        for what, names in (("candidates", self.candidates), ("items", self.items)):
            if names.size < 2 or np.unique(names).size != names.size:
                raise ValueError(f"{what}: expected at least 2 distinct names")
        _check_alpha(s["alpha"])
        check_int("budget", s["budget"], 1, K * n)
        for name, lo, hi in (("a", 0.0, 1e6), ("scale", 0.0, 1e6), ("shrink", 0.0, 1e6),
                             ("lam0", 0.0, 1.0), ("eps", 0.0, 1.0), ("rho", 0.0, 1e6)):
            _check_real(name, s[name], lo, hi)
        V, c, u_mean = self._factors
        if V.ndim != 2 or V.shape[0] != n or c.shape != (n,) or u_mean.shape != V.shape[1:]:
            raise ValueError(f"factors: item factors of shape {V.shape} do not match the {n} items")
        r = int(V.shape[1])
        self._config = _config(
            s["policy"], K, n, s["batch_size"], (s["budget"],), None, "budget",
            tuple(s["cs_kinds"]), s["stop_kind"], None, s["refit"], s["num_newton"],
            s["synchronized"], None, "real", r, "none", max(n, idn.ITEM_BLOCK),
            skip_separated=s.get("skip_separated", False),
        )
        self._params = idn.Params.make(
            alpha=s["alpha"], a=s["a"], scale=s["scale"], rho=s["rho"], lam0=s["lam0"],
            shrink=s["shrink"], eps=s["eps"],
        )
        rep_key = jax.random.fold_in(jax.random.wrap_key_data(jnp.asarray(self._key_data)), 0)
        self._order_key = jax.random.fold_in(rep_key, idn._PURPOSE_ORDER)
        self._truth = idn._Truth(
            rows=jnp.arange(K, dtype=jnp.int32),
            key=jax.random.fold_in(rep_key, idn._PURPOSE_TRUTH),
            pred_key=jax.random.fold_in(rep_key, idn._PURPOSE_PRED),
        )
        self._scores = np.zeros((K, n), np.float32)  # answered cells; 0 elsewhere
        self._answered = np.zeros((K, n), bool)
        factors = ItemFactors(jnp.asarray(V), jnp.asarray(c), jnp.asarray(u_mean))
        self._data = idn.ProblemData(
            pool=jnp.zeros((K, n), jnp.float32),
            instances=jnp.arange(K, dtype=jnp.int32)[None],
            item_factors=factors,
        )
        cfg = self._config
        self._table = (
            jax.jit(_sampling.order_table, static_argnums=(1, 2, 3, 4))(
                self._order_key, K, n, cfg.sync, cfg.predictions)
            if cfg.tabled else None
        )
        self._state = jax.jit(idn._init_state, static_argnums=2)(
            self._truth, self._data, cfg, self._params
        )
        self._cap = jnp.int32(s["budget"])
        self._log: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._pending: tuple[int, np.ndarray, int] | None = None
        self._policy_done = False
        self._dropped: tuple[Path, int] | None = None  # (file, answers not replayed)
        self.path: Path | None = None  # the file it was loaded from

    def _stepped(self, data: idn.ProblemData):
        """The state after one kernel step on ``data`` (nothing is committed)."""
        return _step(self._state, self._order_key, self._truth, data, self._config,
                     self._params, self._cap, self._table)

    def _finished_at(self, state) -> str:
        """Why nothing more can be asked at kernel state ``state`` (``""``: something
        can), the policy's own end left out (:meth:`_walk` adds it)."""
        if bool(np.all(np.asarray(state.sampler.count) >= self._config.num_items)):
            return "exhausted"
        if int(state.calls) >= self.settings["budget"]:
            return "budget"
        if self.settings["stop_when_confident"] and bool(
            _confident_jit(state, self._config, self._params)[1]
        ):
            return "confident"
        return ""

    def _walk(self, st):
        """From kernel state ``st``, the steps :meth:`ask` takes before it can request
        something: ``(state, (arm, index) or None, reason)``. An empty pull still
        advances the policy (SySRs' last rejections draw nothing), so those steps are
        taken; ``reason`` says why nothing can be requested (``"policy"``: the schedule
        is over). Nothing is committed here."""
        cfg = self._config
        for _ in range(cfg.num_steps + 1):
            reason = self._finished_at(st) or ("policy" if self._policy_done else "")
            if reason:
                return st, None, reason
            arm, index, valid, active = _peek(st, self._order_key, self._table, cfg,
                                              self._params, self._cap)
            if bool(active) and bool(np.any(valid)):
                index = np.asarray(index)[np.asarray(valid)].astype(np.int64)
                return st, (int(arm), index), ""
            before = jax.tree.map(np.asarray, st.pstate)
            st = _step(st, self._order_key, self._truth, self._data, cfg, self._params,
                       self._cap, self._table)
            after = jax.tree.map(np.asarray, st.pstate)
            if all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(before),
                                                         jax.tree.leaves(after))):
                break
        return st, None, "policy"

    def _end_reason(self) -> str:
        """Why the next :meth:`ask` will return ``None`` (``""``: it will request
        something), worked out on the current state without committing the empty steps
        :meth:`ask` would take, so :meth:`status` and :meth:`save` know the campaign is
        over right after its last answer."""
        if self._pending is not None:
            return ""
        return self._walk(self._state)[2]

    # ------------------------------------------------------------------- public
    @property
    def calls(self) -> int:
        """LLM calls answered so far."""
        return int(self._state.calls)

    def ask(self) -> CampaignRequest | None:
        """The next request, or ``None`` when the campaign is done.

        Asking again before :meth:`tell` returns the same request. Done means: the
        budget is spent, every model is fully evaluated, the policy has nothing left to
        pull (SySRs' schedule), or (with ``stop_when_confident``) the leader is
        separated; :meth:`status` says which.
        """
        if self._pending is not None:
            return self._request(self._pending)
        self._state, nxt, reason = self._walk(self._state)
        if nxt is None:
            self._policy_done = self._policy_done or reason == "policy"
            return None
        arm, index = nxt
        index.flags.writeable = False
        self._pending = (arm, index, len(self._log))
        return self._request(self._pending)

    def _request(self, pending) -> CampaignRequest:
        """A fresh request object for the pending (arm, index, step): the user may
        change theirs without changing what the campaign expects."""
        arm, index, step = pending
        return CampaignRequest(model=str(self.candidates[arm]), arm=arm,
                               items=self.items[index], index=index.copy(), step=step)

    def tell(self, request: CampaignRequest, scores: Any) -> None:
        """Answer the pending request: its items' scores (floats in [0, 1]).

        Args:
          request: the request the last :meth:`ask` returned.
          scores: one score per requested item, in the request's order, or a mapping
            ``{item name: score}`` covering exactly the request's items (a pandas
            Series indexed by item name, or a one-row / one-column DataFrame, is matched
            by name the same way). Every item
            needs its score (the estimator's terms are defined on the drawn items):
            retry a failed LLM call, or score it as your benchmark scores a failure.

        Raises:
          ValueError / TypeError: ``request`` is not the pending request (ask first;
            answer each request once), or ``scores`` has the wrong length or items,
            NaN or values outside ``[0, 1]``. Nothing is changed then.
        """
        def answered() -> bool:
            """A request this campaign asked and was answered (same step, arm, items);
            asked only on the way to an error."""
            return (isinstance(request, CampaignRequest)
                    and isinstance(request.step, (int, np.integer))
                    and not isinstance(request.step, bool)
                    and 0 <= request.step < len(self._log)
                    and self._log[request.step][0] == request.arm
                    and np.array_equal(self._log[request.step][1], np.asarray(request.index)))

        if self._pending is None:
            reason = self._end_reason()
            if reason:
                raise ValueError(f"request: the campaign is done ({reason}); there is no "
                                 "request to answer")
            if answered():
                raise ValueError(f"request: step {request.step} was already answered; "
                                 "ask() for the next request")
            raise ValueError("request: no pending request; call ask() first")
        arm, index, step = self._pending
        if not isinstance(request, CampaignRequest) or request.step != step or (
            request.arm != arm or not np.array_equal(np.asarray(request.index), index)
            or request.model != str(self.candidates[arm])
            or not np.array_equal(np.asarray(request.items), self.items[index])
        ):
            raise ValueError(
                f"request: step {request.step} was already answered; the pending request "
                f"is step {step} (ask() returns it)" if answered() else
                "request: not the pending request (answer the request the last ask() "
                "returned, once)"
            )
        if not isinstance(scores, Mapping) and callable(getattr(scores, "items", None)) \
                and callable(getattr(scores, "keys", None)):
            # a keyed container that is not a Mapping (a pandas Series indexed by item
            # name): matched by name like a dict, never filed by position
            shape = getattr(scores, "shape", None)
            if isinstance(shape, tuple) and len(shape) == 2:
                # a table (a pandas DataFrame): one row with the items as columns, or
                # one column with the items as its index
                if shape[0] == 1:
                    scores = {k: np.asarray(v).ravel()[0] for k, v in scores.items()}
                elif shape[1] == 1 and callable(getattr(scores, "squeeze", None)):
                    scores = dict(scores.squeeze(axis=1).items())
                else:
                    raise ValueError(
                        f"scores: a table of shape {shape}; give the request's scores as "
                        "one row (items as columns) or one column (items as the index)")
            else:
                scores = dict(scores.items())
        if isinstance(scores, Mapping):
            names = self.items[index].tolist()
            by_name = {str(k): v for k, v in scores.items()}  # item names are strings
            if len(by_name) != len(scores):
                raise ValueError(
                    "scores: two keys of the mapping name the same item once written as "
                    f"strings ({sorted(map(repr, scores))[:6]})"
                )
            if set(by_name) != set(names):
                missing = sorted(set(names) - set(by_name))
                extra = sorted(set(by_name) - set(names))
                raise ValueError(
                    f"scores: the mapping must cover exactly the request's {len(names)} "
                    f"items; missing {missing[:5]}, not requested {extra[:5]}"
                )
            scores = [by_name[k] for k in names]
        masked = np.ma.getmaskarray(scores).ravel() if np.ma.isMaskedArray(scores) else None
        if masked is not None and masked.any():  # (np.asarray would keep the hidden value)
            i = int(np.flatnonzero(masked)[0])
            where = f" (item {str(self.items[index[i]])!r})" if i < index.size else ""
            raise ValueError(
                f"scores: {int(masked.sum())} masked (missing) value(s), the first at "
                f"position {i}{where}; every requested item needs a score: retry the call, "
                "or score a failure as your benchmark does")
        try:
            raw = np.asarray(scores)
        except (TypeError, ValueError):
            raw = np.asarray(scores, dtype=object)
        vals = list(scores) if isinstance(scores, (list, tuple)) else raw.ravel().tolist()
        if raw.dtype.kind == "O" and raw.shape == index.shape:
            none = [i for i, v in enumerate(vals) if is_missing(v)]
            if none:  # (np.asarray(..., float) would make it a NaN, or fail)
                raise ValueError(
                    f"scores: no score (None or NA) at {len(none)} position(s), the first "
                    f"{none[0]} (item {str(self.items[index[none[0]]])!r}); every requested "
                    "item needs one: retry the call, or score a failure as your benchmark "
                    "does")
        text = [v for v in vals if isinstance(v, (str, bytes, np.str_, np.bytes_))] \
            if raw.dtype.kind in "USO" else []
        if text:
            # ("1" would be read as 1.0: a score stored as text is a mistake upstream)
            raise TypeError(f"scores: expected numbers, got text such as {text[0]!r}")
        try:
            x = np.asarray(scores, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"scores: expected {index.size} numbers, got {type(scores).__name__}"
            ) from None
        if x.shape != (index.size,):
            raise ValueError(
                f"scores: expected {index.size} scores (one per requested item), "
                f"got shape {x.shape}"
            )
        if not np.all(np.isfinite(x)):
            bad = np.flatnonzero(~np.isfinite(x))
            raise ValueError(
                f"scores: {bad.size} NaN or infinite value(s), the first at position "
                f"{int(bad[0])} (item {str(self.items[index[bad[0]]])!r})")
        out = np.flatnonzero((x < 0) | (x > 1))
        if out.size:
            i = int(out[0])
            raise ValueError(
                f"scores: must lie in [0, 1]; {out.size} do not, the first at position {i} "
                f"(item {str(self.items[index[i]])!r}) is {float(x[i])!r}"
                f"{out_of_unit_hint(x.min(), x.max())}")
        x = x.astype(np.float32)
        data = self._data._replace(pool=self._data.pool.at[arm, index].set(x))
        new = self._stepped(data)
        # commit only if the step drew exactly the requested items: the same arm, as
        # many items, the last one the request's last (each arm's order is fixed)
        count0 = np.asarray(self._state.sampler.count)
        expected = count0.copy()
        expected[arm] += index.size
        if not (np.array_equal(np.asarray(new.sampler.count), expected)
                and int(new.sampler.thr_idx[arm]) == int(index[-1])):
            raise RuntimeError(  # pragma: no cover - the peek and the step agree in tests
                "campaign: the kernel step chose other items than the request (a near-tie "
                "of the policy index decided differently); nothing was changed"
            )
        self._data, self._state = data, new
        self._scores[arm, index] = x
        self._answered[arm, index] = True
        self._log.append((arm, index.copy(), x))
        self._pending = None

    def status(self) -> CampaignStatus:
        """Estimates, anytime-valid intervals, the leader and whether it is separated.

        ``done`` and ``reason`` are current: after the last answer that spends the
        budget or separates the leader, ``status().done`` is already True.
        """
        rec, conf = _confident_jit(self._state, self._config, self._params)
        cfg = self._config
        q = cfg.cs_kinds.index(cfg.stop_kind)
        lower, upper = np.asarray(rec.lower), np.asarray(rec.upper)
        reason = "" if self._pending is not None else self._end_reason()
        return CampaignStatus(
            models=self.candidates.copy(),
            # the estimate the policy ranks by (naive pooling: its own pooled estimate)
            estimate=np.asarray(idn._ranking(rec, cfg), np.float64),
            lower=lower[q].astype(np.float64),
            upper=upper[q].astype(np.float64),
            bounds={k: (lower[i].astype(np.float64), upper[i].astype(np.float64))
                    for i, k in enumerate(cfg.cs_kinds)},
            pulls=np.asarray(rec.pulls, np.int64),
            calls=int(rec.calls),
            budget=int(self.settings["budget"]),
            recommended=str(self.candidates[int(rec.recommended)]),
            confident=bool(conf),
            done=bool(reason),
            reason=reason,
        )

    def scores(self) -> ScoreMatrix:
        """The answered cells as a ``[K, n]`` :class:`~jaxeval.ScoreMatrix` (mask = answered)."""
        return ScoreMatrix(self._scores.copy(), mask=self._answered.copy(),
                           models=self.candidates, items=self.items, source="campaign")

    # --------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write the campaign (settings, item factors, every answer, the kernel's state)
        to ``path`` (.npz).

        Written to a temporary file, flushed to disk and renamed over ``path``, so an
        interrupted save never leaves a broken file in place of the previous one. A
        request asked but not answered is not saved (:meth:`ask` gives it again).

        An existing file is replaced only when its answers are the first answers of this
        campaign (the same candidates and items): saving after every answer, or saving a
        campaign loaded from that file, is fine; saving a *new* campaign over one that
        holds answers, or a stale copy over a file that was told more since it was
        loaded, is refused naming ``path`` (it would delete answers paid for). Pass
        ``overwrite=True`` to replace the file whatever it holds, except the file a
        ``load(..., strict=False)`` stopped early on: its answers that did not replay
        are never deleted by a save (save to another path).
        """
        if not isinstance(overwrite, (bool, np.bool_)):
            raise TypeError(f"overwrite: expected a bool, got {overwrite!r}")
        path = Path(path)
        if not path.exists():
            path = npz_name(path)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"path: the folder {path.parent} of {path} does not exist")
        if self._dropped and self._dropped[0] == path.resolve():
            raise ValueError(
                f"path: {path} holds {self._dropped[1]} more answers that did not replay "
                "(loaded with strict=False); saving there would delete them: save to "
                "another path"
            )
        if path.exists() and not overwrite:
            self._check_extends(path)
        arms = np.asarray([a for a, _, _ in self._log], np.int64)
        lens = np.asarray([len(i) for _, i, _ in self._log], np.int64)
        idx = np.concatenate([i for _, i, _ in self._log]) if self._log else np.zeros(0, np.int64)
        val = (np.concatenate([s for _, _, s in self._log]) if self._log
               else np.zeros(0, np.float32))
        idx, val = idx.astype(np.int64), val.astype(np.float32)
        leaves = [np.asarray(x) for x in jax.tree.leaves(self._state)]
        layout = _layout(self._state)
        # the policy has nothing left to ask (also right after the answer that ended it)
        done = np.asarray(bool(self._policy_done) or self._end_reason() == "policy")
        meta = dict(format=_FORMAT, settings=self.settings,
                    candidates=self.candidates.tolist(), items=self.items.tolist(),
                    jax_version=jax.__version__, platform=jax.default_backend(),
                    policy_done=bool(done),
                    answers_sha256=_digest(arms, lens, idx, val),
                    state=_state_stamp(layout, len(self._log), self._inputs_digest(),
                                       _digest(arms, lens, idx, val, done, *leaves)))
        state = {f"state_{i}": x for i, x in enumerate(leaves)}
        V, c, u_mean = self._factors
        fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        tmp = Path(tmp_name)
        try:
            _chmod_like_a_new_file(tmp, path)  # mkstemp's file is private (0600)
            with os.fdopen(fd, "wb") as f:
                np.savez(f, meta=np.asarray(json.dumps(meta)), key=self._key_data, V=V, c=c,
                         u_mean=u_mean, arms=arms, lens=lens, index=idx, scores=val,
                         **state)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:  # make the rename itself durable where the platform allows it
            fd = os.open(path.parent, os.O_RDONLY)
        except OSError:  # pragma: no cover - e.g. Windows
            return path
        try:
            os.fsync(fd)
        except OSError:  # pragma: no cover
            pass
        finally:
            os.close(fd)
        return path

    def _check_extends(self, path: Path) -> None:
        """Refuse to replace ``path`` unless its answers are this campaign's first ones."""
        try:
            _, meta, a = self._read(path)
        except ValueError:
            raise ValueError(
                f"path: {path} exists and is not a readable saved campaign; saving would "
                "replace it: save to another path, or pass overwrite=True"
            ) from None
        n_saved = int(a["arms"].size)
        why = ""
        if meta["candidates"] != self.candidates.tolist() or meta["items"] != self.items.tolist():
            why = "another campaign's (other candidates or items)"
        elif n_saved > len(self._log):
            why = f"{n_saved - len(self._log)} more than this campaign has"
        else:
            log = self._log[:n_saved]
            lens = np.asarray([len(i) for _, i, _ in log], np.int64)
            same = (np.array_equal(a["arms"], np.asarray([x for x, _, _ in log], np.int64))
                    and np.array_equal(a["lens"], lens))
            if same and n_saved:
                same = (np.array_equal(a["index"], np.concatenate([i for _, i, _ in log]))
                        and np.array_equal(a["scores"],
                                           np.concatenate([v for _, _, v in log])
                                           .astype(np.float32)))
            if not same:
                why = "other answers than this campaign's"
        if why:
            raise ValueError(
                f"path: {path} holds {n_saved} answers, {why}; saving would delete them "
                "(a new campaign over an old file, or a copy loaded before answers were "
                "told elsewhere?): load that file, save to another path, or pass "
                "overwrite=True"
            )

    @staticmethod
    def _read(path: str | os.PathLike, state: bool = False) -> tuple[Path, dict, dict]:
        """``(path, meta, arrays)``; with ``state``, ``arrays["state"]`` holds the saved
        kernel state's leaves in order (an empty list when the file has none)."""
        path = saved_path(path)
        if not path.exists():
            raise FileNotFoundError(f"no saved campaign at {path}")
        try:
            with open_npz(path) as z:
                meta = json.loads(str(z["meta"]))
                arrays = {k: np.asarray(z[k]) for k in
                          ("key", "V", "c", "u_mean", "arms", "lens", "index", "scores")}
                if state:  # state_0, state_1, ... up to the first missing one
                    arrays["state"] = []
                    try:  # only a shortcut: if it cannot be read, the answers replay
                        while (name := f"state_{len(arrays['state'])}") in z.files:
                            arrays["state"].append(np.asarray(z[name]))
                    except (*NPZ_READ_ERRORS, KeyError):
                        arrays["state"] = []
            if not isinstance(meta, dict):
                raise ValueError(f"its meta entry is a {type(meta).__name__}, not a mapping")
            if meta.get("format") != _FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {_FORMAT!r}")
            for k in ("settings", "candidates", "items"):
                if k not in meta:
                    raise ValueError(f"no {k!r} entry")
            lens = arrays["lens"]
            if lens.shape != arrays["arms"].shape or int(lens.sum()) != arrays["index"].size \
                    or arrays["index"].size != arrays["scores"].size:
                raise ValueError("the answers' arrays disagree in length")
            if lens.size and (not np.issubdtype(lens.dtype, np.number) or lens.min() < 1):
                raise ValueError("its 'lens' entry holds an answer of fewer than one item")
        except (*NPZ_READ_ERRORS, KeyError) as e:
            raise ValueError(f"{path}: not a saved jaxeval campaign ({e})") from None
        return path, meta, arrays

    @classmethod
    def saved_scores(cls, path: str | os.PathLike) -> ScoreMatrix:
        """The answers stored in a saved campaign, as a ``[K, n]`` ScoreMatrix (mask =
        answered), without replaying anything: they stay readable whatever happens
        to the campaign's state."""
        path, meta, a = cls._read(path)
        cands, items = np.asarray(meta["candidates"]), np.asarray(meta["items"])
        K, n = cands.size, items.size
        try:  # (integer arrays, or whole numbers stored as floats by a hand-made file)
            arms, lens, idx = (_whole(a[k], k) for k in ("arms", "lens", "index"))
        except ValueError as e:
            raise ValueError(f"{path}: a damaged campaign file: {e}") from None
        rows = np.repeat(arms, lens)
        if rows.size and (rows.min() < 0 or rows.max() >= K or idx.min() < 0
                          or idx.max() >= n):
            raise ValueError(f"{path}: a damaged campaign file: answers name models or items "
                             f"outside its {K} candidates and {n} items")
        try:
            val = a["scores"].astype(np.float32)
        except (TypeError, ValueError):
            raise ValueError(f"{path}: a damaged campaign file: its scores are not "
                             "numbers") from None
        bad = ~np.isfinite(val)
        if bad.any():  # keep every readable answer; the damaged cells stay unobserved
            warnings.warn(f"{path}: {int(bad.sum())} saved scores are not finite (a "
                          "damaged file): left unobserved", stacklevel=2)
        scores = np.zeros((K, n), np.float32)
        mask = np.zeros_like(scores, bool)
        scores[rows[~bad], idx[~bad]] = val[~bad]
        mask[rows[~bad], idx[~bad]] = True
        return ScoreMatrix(scores, mask=mask, models=cands, items=items, source=str(path))

    @classmethod
    def load(cls, path: str | os.PathLike, strict: bool = True,
             replay: bool = False) -> IdentificationCampaign:
        """A saved campaign: it continues where it stopped.

        The kernel state saved with the answers is restored when the same jaxeval, JAX
        version and platform wrote it, nothing was edited since (checksums) and it
        agrees with the answers (each model's draw order, count, last item and score
        sum, the total calls); otherwise every answer is replayed through the kernel, as
        ``replay=True`` asks. A file whose answers, settings, seed, item factors or names
        changed since it was saved (its checksums) is replayed with a warning saying so.

        Args:
          path: the file :meth:`save` wrote (``.npz`` may be left out).
          strict: a replayed request that differs from the saved one (another jaxeval
            or JAX version, another platform deciding a near-tie of the policy index
            differently, or a damaged file) raises; with ``strict=False`` the replay
            stops there with a warning and the campaign continues from that point
            (the later answers are then not used; :meth:`saved_scores` still reads
            them all).
          replay: ignore the saved state and replay every answer (it checks that this
            jaxeval asks exactly the saved requests again; about 1.5 ms per answer on a CPU).

        Example:
          >>> import numpy as np, pathlib, tempfile, jaxeval
          >>> sm = jaxeval.load("oll2_musr").take(items=np.arange(60))
          >>> cands = sm.take(models=np.arange(3))
          >>> camp = jaxeval.IdentificationCampaign(cands.models, items=cands.items,
          ...                                       policy="ucbe", batch_size=4)
          >>> for _ in range(5):
          ...     req = camp.ask()
          ...     camp.tell(req, cands.take(models=[req.model], items=req.items).scores[0])
          >>> path = camp.save(pathlib.Path(tempfile.mkdtemp()) / "camp.npz")
          >>> fast = jaxeval.IdentificationCampaign.load(path)  # the saved state
          >>> slow = jaxeval.IdentificationCampaign.load(path, replay=True)
          >>> fast.calls, slow.calls, fast.ask().index.tolist() == slow.ask().index.tolist()
          (20, 20, True)
        """
        for name, v in (("strict", strict), ("replay", replay)):
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{name}: expected True or False, got {v!r}")
        path, meta, arrays = cls._read(path, state=not replay)
        self = cls.__new__(cls)
        try:
            self.candidates = np.asarray(meta["candidates"]).astype(str)
            self.items = np.asarray(meta["items"]).astype(str)
            self.settings = dict(meta["settings"])
            self._key_data = arrays["key"].astype(np.uint32)
            self._factors = tuple(arrays[k].astype(np.float32) for k in ("V", "c", "u_mean"))
            self._build()
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: not a usable saved campaign ({e})") from None
        try:  # (whole numbers stored as floats read as saved_scores reads them)
            lens = _whole(np.asarray(arrays["lens"]), "lens")
        except ValueError as e:
            raise ValueError(f"{path}: not a usable saved campaign ({e})") from None
        starts = np.concatenate([[0], np.cumsum(lens)])
        edited = self._edited(meta, arrays)
        if edited:
            warnings.warn(f"{path}: {edited} (checksums differ: edited by hand, or damaged); "
                          "its answers are replayed", stacklevel=2)
        elif not replay and self._restore(meta, arrays, starts):
            self.path = path
            return self
        from jaxeval import __version__

        stamp = meta.get("state") if isinstance(meta.get("state"), dict) else {}
        then = (f"jaxeval {stamp.get('jaxeval', '?')}, jax {meta.get('jax_version', '?')} on "
                f"{meta.get('platform', '?')}")
        now = f"jaxeval {__version__}, jax {jax.__version__} on {jax.default_backend()}"
        for j, arm in enumerate(arrays["arms"]):
            req = self.ask()
            sl = slice(starts[j], starts[j + 1])
            if req is None or req.arm != int(arm) or not np.array_equal(
                req.index, arrays["index"][sl]
            ):
                why = (edited if edited else
                       f"saved with {then}, the same as now: another build of this "
                       "jaxeval version, or a damaged file?" if then == now else
                       f"saved with {then}, now {now}; or a damaged file")
                msg = (
                    f"{path}: saved answer {j} of {arrays['arms'].size} does not replay "
                    f"({why}). IdentificationCampaign.saved_scores(path) reads every answer"
                )
                if strict:
                    raise ValueError(msg + "; load(path, strict=False) continues from it")
                warnings.warn(msg + f"; continuing after {j} answers", stacklevel=2)
                self._dropped = (path.resolve(), int(arrays["arms"].size - j))
                break
            try:
                self.tell(req, arrays["scores"][sl])
            except (TypeError, ValueError, RuntimeError) as e:
                msg = f"{path}: saved answer {j} is refused on replay ({e})"
                if strict:
                    raise ValueError(msg + "; load(path, strict=False) continues from "
                                     "the answers before it") from None
                # a damaged file: keep what replays, as for an answer that does not
                warnings.warn(msg + f"; continuing after {j} answers", stacklevel=2)
                self._dropped = (path.resolve(), int(arrays["arms"].size - j))
                break
        if self._dropped is None and meta.get("policy_done") is True:
            self.ask()  # the policy's last steps, which drew nothing (SySRs' last rejections)
        self.path = path
        return self

    def _edited(self, meta: dict, arrays: dict) -> str:
        """What of a saved campaign changed since :meth:`save` wrote it ("" when nothing
        did, or the file is too old to tell): its answers (their checksum), or its
        settings, seed, item factors or names (the checksum of the state's inputs, when
        the same jaxeval wrote it)."""
        from jaxeval import __version__

        what = []
        stamp = meta.get("state")
        if (isinstance(stamp, dict) and stamp.get("jaxeval") == __version__
                and isinstance(stamp.get("inputs"), str)
                and stamp["inputs"] != self._inputs_digest()):
            what.append("settings, seed, item factors or names")
        saved = meta.get("answers_sha256")
        if isinstance(saved, str) and saved != _digest(
                *(arrays[k] for k in ("arms", "lens", "index", "scores"))):
            what.append("answers")
        return f"the file's {' and '.join(what)} changed since it was saved" if what else ""

    def _inputs_digest(self) -> str:
        """A hash of what the kernel state derives from besides the answers: settings,
        seed key, item factors, candidate and item names."""
        h = hashlib.sha256(json.dumps(
            [self.settings, self.candidates.tolist(), self.items.tolist()], sort_keys=True
        ).encode())
        h.update(_digest(self._key_data, *self._factors).encode())
        return h.hexdigest()

    def _restore(self, meta: dict, arrays: dict, starts: np.ndarray) -> bool:
        """Install the saved state and answers if they can be trusted; False (nothing
        changed) when the file has no usable state and the answers must be replayed.

        Trusted means: written by the same jaxeval (state version, pytree layout), JAX
        version and platform from the same settings, seed and item factors; answers and
        state bytes unchanged since the save (a SHA-256 over both); every answer a
        well-formed request (each model's items, in the order asked, are the first items
        of its own draw order); and the state agrees with the answers (total calls, each
        model's count, last item and, where the order keys are at hand, its key; score
        sum)."""
        treedef = jax.tree.structure(self._state)
        layout = _layout(self._state)
        fresh = jax.tree.leaves(self._state)
        saved = arrays.get("state", [])
        if not (len(saved) == len(fresh) and all(x.dtype != object for x in saved)):
            return False
        done = np.asarray(meta.get("policy_done") is True)
        content = _digest(*(arrays[k] for k in ("arms", "lens", "index", "scores")), done,
                          *saved)
        if meta.get("state") != _state_stamp(layout, arrays["arms"].size,
                                             self._inputs_digest(), content) or (
            meta.get("jax_version") != jax.__version__
            or meta.get("platform") != jax.default_backend()
            or any(x.shape != y.shape or x.dtype != y.dtype for x, y in zip(saved, fresh))
            or not all(np.issubdtype(arrays[k].dtype, np.integer) for k in ("arms", "index"))
        ):
            return False
        K, n = self.candidates.size, self.items.size
        scores = np.zeros((K, n), np.float32)
        answered = np.zeros((K, n), bool)
        last = np.full(K, -1, np.int64)
        log, asked = [], [[] for _ in range(K)]  # asked: each model's answers, in order
        for j, arm in enumerate(arrays["arms"].tolist()):
            index = arrays["index"][starts[j]:starts[j + 1]].astype(np.int64)
            x = arrays["scores"][starts[j]:starts[j + 1]].astype(np.float32)
            if not (0 <= arm < K and index.size and np.all((index >= 0) & (index < n))
                    and not answered[arm, index].any()
                    and np.unique(index).size == index.size
                    and np.all(np.isfinite(x) & (x >= 0) & (x <= 1))):
                return False
            scores[arm, index], answered[arm, index] = x, True
            last[arm] = index[-1]
            index.flags.writeable = False
            log.append((arm, index, x))
            asked[arm].append(index)
        state = jax.tree.unflatten(treedef, [jnp.asarray(x) for x in saved])
        count = np.asarray(state.sampler.count)
        if not (int(state.calls) == int(answered.sum())
                and np.array_equal(count, answered.sum(1))
                and np.array_equal(np.asarray(state.sampler.thr_idx), last)
                and np.allclose(np.asarray(state.sum_s + state.sum_c), scores.sum(1), rtol=1e-5,
                                atol=1e-4)):
            return False
        # each model's answers are the first items of its draw order, in order (from the
        # order table when the campaign has one, else one stream at a time)
        cfg = self._config
        table = self._table
        thr_key = np.asarray(state.sampler.thr_key)
        streams = {}
        for a in range(K):
            if not asked[a]:
                continue
            row = 0 if cfg.sync else a
            if row not in streams:
                if table is not None:
                    streams[row] = (np.asarray(table.order[row]), None if table.keys is None
                                    else np.asarray(table.keys[row]))
                else:
                    streams[row] = tuple(np.asarray(x) for x in _arm_order_and_keys_jit(
                        self._order_key, jnp.int32(row), n, cfg.sync))
            order, keys = streams[row]
            got = np.concatenate(asked[a])
            if not np.array_equal(got, order[:got.size]) or (
                keys is not None and thr_key[a] != keys[last[a]]  # (else: digest-covered)
            ):
                return False
        self._state = state
        self._data = self._data._replace(pool=jnp.asarray(scores))
        self._scores, self._answered, self._log = scores, answered, log
        self._policy_done = bool(done)
        return True

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"IdentificationCampaign(K={self.candidates.size}, n={self.items.size}, "
            f"policy={s['policy']!r}, calls={self.calls}/{s['budget']}, "
            f"batch_size={s['batch_size']})"
        )
