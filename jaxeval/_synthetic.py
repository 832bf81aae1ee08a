"""Synthetic truth: score matrices drawn from a low-rank logistic model, in pure JAX.

The model (METHODS.md section 1, with item bias) is ``P_ij = sigmoid(u_i . v_j + c_j)``:

- model factors ``U [m, r]``: ``u_i ~ N(0, model_scale^2 I_r)``;
- item loadings ``V [n, r]``: ``v_j = (1 + item_scale * z_j) / sqrt(r)`` with
  ``z_j ~ N(0, I_r)``. The positive mean loading makes ``sum(u_i) / sqrt(r)`` a
  general ability (so model accuracies spread out by about ``model_scale``
  logits), while ``item_scale`` sets how much models disagree item by item;
- item biases (easiness) ``c_j ~ N(difficulty_mean, difficulty_scale^2)``.

The interaction ``U V^T`` has rank exactly ``rank`` (almost surely, when
``rank <= min(m, n)``); with the item bias the logit matrix has rank at most
``rank + 1``, and once each column is centred over models it has rank ``rank``.

Scores: binary ``S_ij ~ Bernoulli(P_ij)``; graded ``S_ij ~ Beta(kappa P_ij,
kappa (1 - P_ij))`` with ``kappa = concentration`` (mean ``P_ij``), or
``S_ij = P_ij`` exactly when ``concentration`` is None.

**The gap rule.** A model's true accuracy is its realised row mean (the
benchmark is a finite population). When ``gap`` is given, the row with the
highest realised accuracy (the first one on ties) is adjusted so that its
accuracy is exactly ``second + gap`` where ``second`` is the best accuracy among
the other rows:

- binary: the target count is ``second_count + g`` with ``g = round(gap * n)``
  rounded half up, and at least 1 when ``gap > 0`` (so that the best row is unique:
  half an item, or less, would otherwise make a tie); the best row
  flips the minimal number of cells ``|target - count|``, chosen at random
  without replacement, favouring cells the model finds surprising (to lower the
  count it turns 1s to 0s with weights ``1 - P_ij``; to raise it, 0s to 1s with
  weights ``P_ij``; Gumbel top-k). The realised gap is ``g / n``.
- graded: every cell of the best row moves by the same fraction of its room,
  ``s + lam (1 - s)`` to raise or ``s (1 - lam)`` to lower, with ``lam`` solving
  for the exact mean; the realised gap equals ``gap`` up to float32 rounding.

If ``second + gap`` exceeds 1 the target is clipped to 1 and ``status`` is
``GAP_CLIPPED``. ``probabilities``, ``U``, ``V`` and ``c`` are those of the model
before the adjustment.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval._data import ScoreMatrix
from jaxeval._runner import as_key, check_int, concrete_array

__all__ = [
    "GAP_CLIPPED",
    "OK",
    "SyntheticTruth",
    "synthetic_matrix",
    "synthetic_score_matrix",
]

OK = 0
GAP_CLIPPED = 1

# fold_in constants naming the purpose of each random stream.
_U, _V, _C, _DRAW, _ADJUST = 1, 2, 3, 4, 5


class SyntheticTruth(NamedTuple):
    """One synthetic benchmark and its known truth (all JAX arrays).

    Attributes:
      scores: float32 ``[m, n]`` realised scores in [0, 1] (0/1 when binary).
      accuracy: float32 ``[m]`` true accuracies = row means of ``scores``.
      probabilities: float32 ``[m, n]`` model probabilities ``sigmoid(U V^T + c)``.
      U: float32 ``[m, r]`` model factors.
      V: float32 ``[n, r]`` item loadings.
      c: float32 ``[n]`` item biases.
      best: int32 index of the best row (the adjusted one when a gap was asked for).
      gap: float32 realised gap between the best two accuracies (among the
        candidate rows, see ``n_candidates``).
      status: int32 ``OK`` (0) or ``GAP_CLIPPED`` (1: the requested gap was not
        reachable, the best row was set to accuracy 1).
    """

    scores: jax.Array
    accuracy: jax.Array
    probabilities: jax.Array
    U: jax.Array
    V: jax.Array
    c: jax.Array
    best: jax.Array
    gap: jax.Array
    status: jax.Array


def _top_two(acc: jax.Array, first: int) -> tuple[jax.Array, jax.Array]:
    """Best row and second-best value among rows ``first ..`` (the candidates)."""
    rows = jnp.arange(acc.shape[0])
    acc = jnp.where(rows >= first, acc.astype(jnp.float32), -jnp.inf)
    best = jnp.argmax(acc).astype(jnp.int32)
    return best, jnp.max(jnp.where(rows == best, -jnp.inf, acc))


def _adjust_binary(key, scores, probs, gap, first):
    m, n = scores.shape
    counts = jnp.sum(scores, axis=1).astype(jnp.int32)
    best, second = _top_two(counts, first)
    second = second.astype(jnp.int32)
    # gap * n rounded half up (not half to even: 0.5 item must not become a tie), and
    # at least one item when a gap > 0 is asked for, so the best row is unique
    items = jnp.floor(gap * n + 0.5)
    items = jnp.where(gap > 0, jnp.maximum(items, 1.0), items)
    want = second + items.astype(jnp.int32)
    target = jnp.minimum(want, n)
    status = jnp.where(want > n, GAP_CLIPPED, OK).astype(jnp.int32)
    s, p = scores[best], probs[best]
    d = target - counts[best]
    raise_ = d > 0
    cand = jnp.where(raise_, s == 0, s == 1)
    weight = jnp.clip(jnp.where(raise_, p, 1.0 - p), 1e-6, 1.0)
    g = jnp.log(weight) + jax.random.gumbel(key, (n,), jnp.float32)
    g = jnp.where(cand, g, -jnp.inf)
    rank = jnp.argsort(jnp.argsort(-g))
    flip = cand & (rank < jnp.abs(d))
    new_row = jnp.where(flip, 1.0 - s, s)
    scores = scores.at[best].set(new_row)
    gap_real = (target - second).astype(jnp.float32) / n
    return scores, best, gap_real, status


def _adjust_graded(scores, gap, first):
    m, n = scores.shape
    acc = jnp.mean(scores, axis=1)
    best, second = _top_two(acc, first)
    want = second + gap
    target = jnp.minimum(want, 1.0)
    status = jnp.where(want > 1.0, GAP_CLIPPED, OK).astype(jnp.int32)
    s = scores[best]
    total = n * (target - jnp.mean(s))
    room_up, room_down = jnp.sum(1.0 - s), jnp.sum(s)
    lam_up = jnp.clip(total / jnp.where(room_up > 0, room_up, 1.0), 0.0, 1.0)
    lam_down = jnp.clip(-total / jnp.where(room_down > 0, room_down, 1.0), 0.0, 1.0)
    new_row = jnp.where(total > 0, s + lam_up * (1.0 - s), s * (1.0 - lam_down))
    new_row = jnp.where(target >= 1.0, 1.0, new_row)
    scores = scores.at[best].set(jnp.clip(new_row, 0.0, 1.0))
    acc = jnp.mean(scores, axis=1)
    _, second_new = _top_two(acc, first)
    return scores, best, acc[best] - second_new, status


@partial(
    jax.jit, static_argnames=("n_models", "n_items", "rank", "graded", "beta", "n_candidates")
)
def _synthetic(key, gap, model_scale, item_scale, difficulty_mean, difficulty_scale,
               concentration, *, n_models, n_items, rank, graded, beta, n_candidates):
    first = n_models - n_candidates
    f32 = jnp.float32
    U = model_scale * jax.random.normal(jax.random.fold_in(key, _U), (n_models, rank), f32)
    z = jax.random.normal(jax.random.fold_in(key, _V), (n_items, rank), f32)
    V = (1.0 + item_scale * z) / jnp.sqrt(jnp.asarray(rank, f32))
    c = difficulty_mean + difficulty_scale * jax.random.normal(
        jax.random.fold_in(key, _C), (n_items,), f32
    )
    probs = jax.nn.sigmoid(U @ V.T + c)
    k_draw = jax.random.fold_in(key, _DRAW)
    if not graded:
        scores = jax.random.bernoulli(k_draw, probs).astype(f32)
    elif beta:
        a = jnp.clip(probs * concentration, 1e-6)
        b = jnp.clip((1.0 - probs) * concentration, 1e-6)
        scores = jnp.clip(jax.random.beta(k_draw, a, b, dtype=f32), 0.0, 1.0)
    else:
        scores = probs
    if gap is None:
        acc = jnp.mean(scores, axis=1)
        best, second = _top_two(acc, first)
        gap_real, status = acc[best] - second, jnp.asarray(OK, jnp.int32)
    elif graded:
        scores, best, gap_real, status = _adjust_graded(scores, gap, first)
    else:
        scores, best, gap_real, status = _adjust_binary(
            jax.random.fold_in(key, _ADJUST), scores, probs, gap, first
        )
    if graded:
        acc = jnp.mean(scores, axis=1)
    else:
        acc = jnp.sum(scores, axis=1).astype(jnp.int32).astype(f32) / n_items
    return SyntheticTruth(scores, acc, probs, U, V, c, best, gap_real, status)


def _check_real(name: str, value: Any, none_ok: bool = False) -> None:
    """A real number or a real array (a traced one included), else a TypeError naming
    the argument (``'x'`` failed deep in the conversion to float32)."""
    if value is None and none_ok:
        return
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"synthetic_matrix: '{name}' must be a real number, got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        return
    dtype = getattr(value, "dtype", None)
    if dtype is not None and (jnp.issubdtype(dtype, jnp.floating)
                              or jnp.issubdtype(dtype, jnp.integer)):
        return
    raise TypeError(f"synthetic_matrix: '{name}' must be a real number or array, got "
                    f"{value!r}")


def _check_int(value: Any, name: str, lo: int, hi: int | None = None, why: str = "") -> int:
    return check_int(f"synthetic_matrix: {name}", value, lo, hi, why=why)


def synthetic_matrix(
    key_or_seed: Any,
    n_models: int,
    n_items: int,
    rank: int = 2,
    gap: float | jax.Array | None = None,
    graded: bool = False,
    *,
    model_scale: float | jax.Array = 1.0,
    item_scale: float | jax.Array = 1.0,
    difficulty_mean: float | jax.Array = 0.0,
    difficulty_scale: float | jax.Array = 1.5,
    concentration: float | jax.Array | None = None,
    n_candidates: int | None = None,
) -> SyntheticTruth:
    """Draw a score matrix and its truth from a low-rank logistic model (pure JAX).

    Shapes, ``rank`` and ``graded`` are static; ``gap`` and the scales are dynamic
    (new values do not recompile), so the function can be vmapped over keys and
    gaps inside a jitted study. See the module docstring for the model and the
    exact gap rule.

    Args:
      key_or_seed: a PRNG key (typed or raw ``uint32[2]``) or an int seed in
        ``[0, 2**63)`` (a 0-d integer array too, traced or not), as everywhere in
        the package.
      n_models: number of rows ``m`` (>= 2).
      n_items: number of items ``n`` (>= 1).
      rank: rank ``r`` of the interaction ``U V^T`` (>= 1).
      gap: exact gap between the best two true accuracies, in [0, 1]; binary
        matrices realise ``g / n``, ``g`` = ``gap * n`` rounded half up and at least 1
        when ``gap > 0``. None leaves the draw as is.
      graded: False for 0/1 scores (Bernoulli); True for graded scores.
      model_scale: spread of model abilities (logits).
      item_scale: spread of item loadings around the general ability direction.
      difficulty_mean: mean item bias (0 puts mean accuracy near 50%).
      difficulty_scale: spread of item biases.
      concentration: graded only: Beta concentration ``kappa > 0`` (finite) of each
        score around its probability; None returns the probabilities themselves.
      n_candidates: the gap rule (and ``best``, ``gap``) applies among the last
        ``n_candidates`` rows only, the first ``n_models - n_candidates`` being
        training models left as drawn (default: all rows are candidates).

    Returns:
      A :class:`SyntheticTruth` of JAX arrays.

    Example:
      >>> import jax
      >>> from jaxeval import synthetic_matrix
      >>> t = synthetic_matrix(0, n_models=20, n_items=100, rank=3, gap=0.05)
      >>> t.scores.shape, round(float(t.gap), 4), int(t.status)
      ((20, 100), 0.05, 0)
      >>> keys = jax.random.split(jax.random.key(1), 8)
      >>> batch = jax.vmap(lambda k: synthetic_matrix(k, 20, 100, 3, gap=0.05))(keys)
      >>> batch.accuracy.shape
      (8, 20)
    """
    n_models = _check_int(n_models, "n_models", 2)
    n_items = _check_int(n_items, "n_items", 1)
    rank = _check_int(rank, "rank", 1)
    if not isinstance(graded, (bool, np.bool_)):
        raise TypeError(f"synthetic_matrix: 'graded' must be a bool, got {graded!r}")
    for name, v in (("gap", gap), ("model_scale", model_scale), ("item_scale", item_scale),
                    ("difficulty_mean", difficulty_mean),
                    ("difficulty_scale", difficulty_scale), ("concentration", concentration)):
        _check_real(name, v, none_ok=name in ("gap", "concentration"))
    for name, v, lo in (("model_scale", model_scale, 0.0), ("item_scale", item_scale, 0.0),
                        ("difficulty_mean", difficulty_mean, -np.inf),
                        ("difficulty_scale", difficulty_scale, 0.0)):
        x = concrete_array(v)  # (a traced value is the caller's to check)
        if x is not None and not (np.isfinite(x).all() and (x >= lo).all()):
            raise ValueError(
                f"synthetic_matrix: '{name}' must be finite" + (" and >= 0" if lo == 0 else "")
                + f", got {v!r}")
    g = None if gap is None else concrete_array(gap)  # (concrete arrays too, as the scales)
    if g is not None and not (np.isfinite(g).all() and ((0.0 <= g) & (g <= 1.0)).all()):
        raise ValueError(f"synthetic_matrix: 'gap' must lie in [0, 1], got {gap!r}")
    c = None if concentration is None else concrete_array(concentration)
    if c is not None and not (np.isfinite(c).all() and (c > 0).all()):
        raise ValueError(
            f"synthetic_matrix: 'concentration' must be > 0 and finite, got {concentration!r}"
        )
    if concentration is not None and not graded:
        raise ValueError(
            "synthetic_matrix: 'concentration' shapes graded scores only (binary ones are "
            "Bernoulli draws); pass graded=True, or leave concentration=None"
        )
    for name, v, into, what in (
            ("gap", gap, (), "one gap"),
            ("model_scale", model_scale, (n_models, rank), "[n_models, rank]"),
            ("item_scale", item_scale, (n_items, rank), "[n_items, rank]"),
            ("difficulty_mean", difficulty_mean, (n_items,), "[n_items]"),
            ("difficulty_scale", difficulty_scale, (n_items,), "[n_items]"),
            ("concentration", concentration, (n_models, n_items), "[n_models, n_items]")):
        shape = tuple(getattr(v, "shape", ()))  # (a traced value has its shape too)
        try:
            fits = v is None or np.broadcast_shapes(shape, into) == into
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"synthetic_matrix: '{name}' of shape {shape} does not broadcast "
                             f"to {what} = {into}")
    n_candidates = n_models if n_candidates is None else n_candidates
    n_candidates = _check_int(n_candidates, "n_candidates", 2, n_models, "at most n_models")
    beta = bool(graded) and concentration is not None
    f = lambda x: jnp.asarray(x, jnp.float32)
    return _synthetic(
        as_key(key_or_seed, "'key_or_seed'", "synthetic_matrix: "),
        None if gap is None else f(gap),
        f(model_scale),
        f(item_scale),
        f(difficulty_mean),
        f(difficulty_scale),
        f(1.0 if concentration is None else concentration),
        n_models=n_models,
        n_items=n_items,
        rank=rank,
        graded=bool(graded),
        beta=beta,
        n_candidates=int(n_candidates),
    )


def synthetic_score_matrix(
    seed: int = 0,
    n_models: int = 100,
    n_items: int = 500,
    rank: int = 2,
    gap: float | None = None,
    graded: bool = False,
    **scales: Any,
) -> ScoreMatrix:
    """Numpy-side helper: a synthetic :class:`~jaxeval.ScoreMatrix` with its truth.

    Calls :func:`synthetic_matrix` and wraps the result. The truth travels in
    ``metadata['synthetic']``: the parameters, the realised ``gap``, ``best``,
    ``status`` and numpy copies of ``probabilities``, ``U``, ``V``, ``c``.

    Args:
      seed: int seed.
      n_models, n_items, rank, gap, graded: as in :func:`synthetic_matrix`.
      **scales: keyword arguments of :func:`synthetic_matrix` (``model_scale``,
        ``item_scale``, ``difficulty_mean``, ``difficulty_scale``, ``concentration``,
        ``n_candidates``).

    Returns:
      A complete ScoreMatrix whose ``accuracy()`` is the true accuracy.

    Example:
      >>> from jaxeval import synthetic_score_matrix
      >>> sm = synthetic_score_matrix(seed=3, n_models=10, n_items=200, gap=0.1)
      >>> acc = sorted(sm.accuracy())
      >>> round(float(acc[-1] - acc[-2]), 4)
      0.1
    """
    seed = check_int("synthetic_score_matrix: seed", seed, 0)
    allowed = {"model_scale", "item_scale", "difficulty_mean", "difficulty_scale", "concentration",
               "n_candidates"}
    unknown = sorted(set(scales) - allowed)
    if unknown:
        raise TypeError(
            f"synthetic_score_matrix: unknown arguments {unknown}; expected some of "
            f"{sorted(allowed)}"
        )
    t = jax.device_get(synthetic_matrix(seed, n_models, n_items, rank, gap, graded, **scales))
    params = dict(seed=int(seed), n_models=n_models, n_items=n_items, rank=rank, gap=gap,
                  graded=graded)
    # (a per-model or per-item scale is recorded whole, as a list)
    params.update({k: (v if v is None or k == "n_candidates" else
                       float(v) if np.ndim(v) == 0 else np.asarray(v, np.float64).tolist())
                   for k, v in scales.items()})
    truth = dict(
        params=params,
        gap=float(t.gap),
        best=int(t.best),
        status=int(t.status),
        probabilities=np.asarray(t.probabilities),
        U=np.asarray(t.U),
        V=np.asarray(t.V),
        c=np.asarray(t.c),
    )
    return ScoreMatrix(
        np.asarray(t.scores),
        source=f"synthetic(seed={seed}, {n_models}x{n_items}, rank={rank}, gap={gap})",
        metadata={"synthetic": truth},
    )
