"""Numpy-side wrapper of the low-rank logistic factorization.

:func:`fit_factorization` takes a :class:`~jaxeval.ScoreMatrix` of training models,
chooses rank and regularisation on held-out cells (or takes them as given), fits
the factors and returns a frozen :class:`LowRankLogistic` of numpy arrays whose
methods run the online Newton update for new models. Bad input is refused here,
with messages naming the argument; the kernels only report status codes.
"""

from __future__ import annotations

import dataclasses
import math
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxeval import _factorization as fz
from jaxeval._data import (
    NPZ_READ_ERRORS,
    FrozenState,
    ScoreMatrix,
    _is_frame,
    as_score_matrix,
    atomic_savez,
    default_labels,
    npz_name,
)
from jaxeval._runner import _concrete_int, as_key, check_int, stage_printer

__all__ = ["LowRankLogistic", "fit_factorization", "learn_lam0"]

DEFAULT_RANKS = (1, 2, 4, 8, 16, 32)

# Entry points of the wrapper: one compilation each per shape.
_predict = jax.jit(fz.predict_scores)
_logit_variance = jax.jit(fz.predictive_logit_variance)
_empirical_prior = jax.jit(fz.empirical_prior)
DEFAULT_RHOS = (0.3, 1.0, 3.0, 10.0, 30.0)


def _json_value(v: Any) -> Any:
    """An ``info`` value as JSON keeps it: numpy scalars as Python numbers, else ``str``."""
    if isinstance(v, np.generic) and np.ndim(v) == 0:
        v = v.item()
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def _named_scores(scores: Any, known: np.ndarray) -> ScoreMatrix | None:
    """A pandas DataFrame (models as rows) or Series (one model) whose labels name the
    items, as a ScoreMatrix to match by name; None for anything else, for pandas'
    default labels ``0, 1, ...`` (they name nothing), and for integer labels that are
    not all fitted item names (positions): those are read by position, as an array."""
    frame = _is_frame(scores)
    labels = scores.columns if frame else getattr(scores, "index", None)
    if labels is None or callable(labels) or default_labels(labels) or (
            not frame and not callable(getattr(scores, "to_numpy", None))):
        return None
    if np.asarray(labels).dtype.kind in "iu" and not set(map(str, labels)) <= set(
            known.tolist()):
        return None
    if frame:
        return ScoreMatrix(scores, source="scores")
    values = np.asarray(scores.to_numpy(dtype=np.float64, na_value=np.nan))[None, :]
    return ScoreMatrix(values, items=[str(x) for x in labels], source="scores")


def _one_row(scores: Any) -> bool:
    """Whether ``scores`` is one model's row (a 1-D array or list, or a pandas Series):
    its results then drop the model axis, as numpy reductions of a 1-D input do."""
    if isinstance(scores, ScoreMatrix) or _is_frame(scores):
        return False
    try:
        return np.ndim(scores) == 1
    except (TypeError, ValueError):  # ragged: _canon names the problem
        return False


#: Newton steps per convergence check of :meth:`LowRankLogistic.update` (``num_newton``
#: None), and the most it takes.
NEWTON_ROUND = 10
NEWTON_MAX = 200


def _real_number(x: Any) -> bool:
    """A real number (a 0-d int / float array too), not a bool or a string."""
    try:
        a = np.asarray(x)
    except Exception:
        return False
    return a.ndim == 0 and a.dtype.kind in "iuf"


def _check_online_rho(rho: Any) -> float:
    """``rho`` as a float: a finite real number ``>= 0`` (not a bool or a string)."""
    if not (_real_number(rho) and np.isfinite(float(rho)) and float(rho) >= 0):
        raise ValueError(f"rho: expected a finite value >= 0, got {rho!r}")
    return float(rho)


@dataclasses.dataclass(frozen=True, eq=False)
class LowRankLogistic(FrozenState):
    """A fitted factorization ``S_ij ~ sigmoid(u_i . v_j + c_j)`` (numpy arrays).

    Build one with :func:`fit_factorization`. The item side (``V``, ``c``,
    ``u_mean``) is frozen; :meth:`update` fits the factor of new models from
    whatever items they have been observed on, :meth:`predict` returns their
    predicted scores on every item.

    Attributes:
      V: float32 ``[n, r]`` item factors (float64 when fitted with jax x64 enabled; the
        arrays of a fit are read-only, like :class:`ScoreMatrix`'s).
      c: float32 ``[n]`` item biases.
      u_mean: float32 ``[r]`` mean training model factor (prior centre online).
      U: float32 ``[m, r]`` training model factors. The factors are stored in the
        basis where the training ``U`` has identity covariance
        (:func:`~jaxeval._factorization.empirical_prior`), so the online prior
        ``online_rho * ||u - u_mean||^2`` with ``online_rho = 0.5`` is the Gaussian
        fitted to the training models.
      rho_u: offline L2 strength on ``U``.
      rho_v: offline L2 strength on ``V``.
      online_rho: prior strength of :meth:`update` (0.5: empirical Bayes).
      items: ``[n]`` item names.
      models: ``[m]`` training model names.
      final_loss: training objective per observed cell.
      loss_history: objective per observed cell during the fit.
      selection: ``None`` when rank and rho were given, else a read-only mapping with
        the grids and the held-out log-loss curve (``ranks``, ``rhos``,
        ``heldout_loss [R, P]``, ``train_loss [R, P]``, ``holdout_fraction``).
      info: read-only provenance (seed, steps, learning rate, source, JAX version).
    """

    V: np.ndarray
    c: np.ndarray
    u_mean: np.ndarray
    U: np.ndarray
    rho_u: float
    rho_v: float
    online_rho: float
    items: np.ndarray
    models: np.ndarray
    final_loss: float
    loss_history: np.ndarray
    selection: Mapping[str, Any] | None
    info: Mapping[str, Any]

    def __post_init__(self) -> None:
        # frozen means frozen: a writable array would let `lr.V[0, 0] = x` change the fit
        for f in ("V", "c", "u_mean", "U", "items", "models", "loss_history"):
            x = getattr(self, f)
            if isinstance(x, np.ndarray) and x.flags.writeable:
                x = x.copy()
                x.flags.writeable = False
                object.__setattr__(self, f, x)

    @property
    def rank(self) -> int:
        """Latent dimension: columns of ``V`` (the bias column excluded)."""
        return int(self.V.shape[1])

    @property
    def n_items(self) -> int:
        """Items the item side was fitted on (rows of ``V``)."""
        return int(self.V.shape[0])

    def item_factors(self) -> fz.ItemFactors:
        """The item side as a JAX :class:`~jaxeval._factorization.ItemFactors`."""
        return fz.ItemFactors(jnp.asarray(self.V), jnp.asarray(self.c), jnp.asarray(self.u_mean))

    def __repr__(self) -> str:
        sel = "selected" if self.selection is not None else "given"
        return (
            f"LowRankLogistic(rank={self.rank} ({sel}), rho_u={self.rho_u:g}, "
            f"rho_v={self.rho_v:g}, online_rho={self.online_rho:g}, "
            f"{self.U.shape[0]} training models x {self.n_items} items, "
            f"train loss {self.final_loss:.4f})"
        )

    # ------------------------------------------------------------------ online
    def _canon(self, scores: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(scores, ScoreMatrix):
            return self._align(scores, mask)
        named = _named_scores(scores, self.items)
        if named is not None:  # a DataFrame or Series with item labels: by name
            if mask is not None:
                raise ValueError(f"mask: not used with a {type(scores).__name__} whose labels "
                                 "name the items (its NaN / NA cells are the unobserved ones)")
            return self._align(named, None, type(scores).__name__)
        s = np.asarray(scores)
        try:  # an object array of floats and None (None = NaN) converts; text does not
            if s.dtype.kind not in "biufO":
                raise TypeError
            s = s.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(
                f"scores: expected real numbers (NaN = unobserved), got dtype {s.dtype}"
            ) from None
        if s.ndim == 1:
            s = s[None, :]
        if s.ndim != 2 or s.shape[1] != self.n_items:
            raise ValueError(
                f"scores: expected shape [K, {self.n_items}] (one column per fitted item), "
                f"got {np.shape(scores)}"
            )
        if s.shape[0] == 0:
            raise ValueError(f"scores: no model (shape {np.shape(scores)}); give at least one "
                             "row")
        if mask is None:
            m = ~np.isnan(s)
        else:
            m = np.asarray(mask)
            if m.ndim == 1:
                m = m[None, :]
            if m.shape != s.shape:
                raise ValueError(f"mask: expected shape {s.shape}, got {np.shape(mask)}")
            if m.dtype != bool:
                try:
                    ok = np.isin(m, (0, 1)).all()
                except TypeError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"mask: expected booleans (True = observed), got {m.dtype} values "
                        f"such as {np.unique(m.ravel())[:3].tolist()}"
                    )
            m = m.astype(bool)
        obs = s[m]
        bad = ~np.isfinite(s) & m
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"scores: {int(bad.sum())} observed scores are not finite (first at row {i}, "
                f"item {j}: {float(s[i, j])}); mark missing scores False in mask, "
                "or NaN without one"
            )
        if obs.size and not (obs.min() >= 0 and obs.max() <= 1):
            raise ValueError(
                "scores: observed scores must be in [0, 1]; got range "
                f"{float(obs.min())}..{float(obs.max())}"
            )
        return np.where(m, s, 0.0).astype(np.float32), m

    def _align(self, sm: ScoreMatrix, mask: Any,
               kind: str = "ScoreMatrix") -> tuple[np.ndarray, np.ndarray]:
        """A ScoreMatrix's rows on the fitted items, matched by name (absent = unobserved)."""
        if mask is not None:
            raise ValueError(
                "mask: not used with a ScoreMatrix (its own mask says what is observed)"
            )
        pos = {name: j for j, name in enumerate(self.items.tolist())}
        extra = [name for name in sm.items.tolist() if name not in pos]
        if extra:
            raise ValueError(
                f"scores: {len(extra)} of the {kind}'s items were not in the fit, e.g. "
                f"{extra[:5]} (the fit knows {self.n_items} items)"
            )
        cols = np.array([pos[name] for name in sm.items.tolist()], dtype=np.int64)
        s = np.zeros((sm.n_models, self.n_items), np.float32)
        m = np.zeros((sm.n_models, self.n_items), bool)
        s[:, cols] = np.where(sm.mask, sm.scores, 0.0)
        m[:, cols] = sm.mask
        return s, m

    def update(
        self,
        scores: Any,
        mask: Any = None,
        *,
        u_init: Any = None,
        rho: float | None = None,
        num_newton: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """MAP factors of new models from their observed items (item side frozen).

        Args:
          scores: ``[K, n]`` (or ``[n]``) scores, columns in the order of ``items``
            (NaN marks unobserved when ``mask`` is None); or a :class:`ScoreMatrix`, a
            pandas DataFrame (models as rows) or Series (one model) whose labels name
            the items: matched to ``items`` by name (fitted items it lacks are
            unobserved; items the fit does not know are refused; pandas' default labels
            ``0, 1, ...``, and integer labels that are not all fitted item names, are
            positions: read as an array).
          mask: optional bool ``[K, n]``, True where observed (not with a ScoreMatrix).
          u_init: optional ``[K, r]`` warm start (``[r]`` or ``[1, r]`` for one model's
            row; default ``u_mean``).
          rho: prior strength (default ``online_rho``; larger pulls harder towards
            ``u_mean``).
          num_newton: Newton steps (1 to 10 000); ``None`` (default): until the rows
            have converged together (the largest change of any factor entry below
            ``1e-5 (1 + max |u|)``, both over all rows given, checked every
            :data:`NEWTON_ROUND` steps, at most :data:`NEWTON_MAX` steps). Each step is
            damped (backtracking), and from ``u_mean`` on a high-rank fit a handful of
            steps can stop far from the optimum: five left predictions 0.7 off on MuSR
            at rank 16.

        Returns:
          ``(u [K, r], hessian [K, r, r])`` as numpy arrays; ``(u [r], hessian [r, r])``
          for one model's row (a 1-D array or a Series).

        Example:
          >>> import jaxeval
          >>> sm = jaxeval.load("oll2_musr")
          >>> lr = jaxeval.fit_factorization(sm.take(models=range(100)), rank=2, rho=3.0,
          ...                                num_steps=200)
          >>> u, H = lr.update(sm.scores[100:103], sm.mask[100:103])
          >>> u.shape
          (3, 2)
        """
        if num_newton is not None:
            # (an unbounded count ran for minutes inside XLA, beyond Ctrl-C's reach)
            num_newton = check_int("num_newton", num_newton, 1, 10_000,
                                   why="or None: until converged")
        one = _one_row(scores)
        s, m = self._canon(scores, mask)
        K = s.shape[0]
        if u_init is None:
            u0 = np.tile(self.u_mean, (K, 1))
        else:
            try:
                u0 = np.asarray(u_init, np.float32)
            except (TypeError, ValueError) as e:
                raise TypeError(f"u_init: expected a [{K}, {self.rank}] array of numbers "
                                f"({e})") from None
            if one and u0.shape == (self.rank,):
                u0 = u0[None, :]
            if u0.shape != (K, self.rank):
                want = f"{(self.rank,)} or {(K, self.rank)}" if one else f"{(K, self.rank)}"
                raise ValueError(f"u_init: expected shape {want}, got {u0.shape}")
            if not np.isfinite(u0).all():
                raise ValueError("u_init: the warm start has non-finite values")
        rho = _check_online_rho(self.online_rho if rho is None else rho)
        f = self.item_factors()
        if num_newton is not None:
            u, H = fz.update_model_factors(f, s, m, u0, np.float32(rho),
                                           num_newton=int(num_newton))
        else:
            u = u0
            for _ in range(NEWTON_MAX // NEWTON_ROUND):
                u_new, H = fz.update_model_factors(f, s, m, u, np.float32(rho),
                                                   num_newton=NEWTON_ROUND)
                u_new = np.asarray(u_new)
                done = np.abs(u_new - u).max() <= 1e-5 * (1.0 + np.abs(u_new).max())
                u = u_new
                if done or not np.isfinite(u).all():
                    break
        u, H = np.asarray(u), np.asarray(H)
        if not (np.isfinite(u).all() and np.isfinite(H).all()):
            raise FloatingPointError("update: the Newton update produced non-finite factors")
        return (u[0], H[0]) if one else (u, H)

    def predict(
        self,
        scores: Any = None,
        mask: Any = None,
        *,
        return_std: bool = False,
        num_newton: int | None = None,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Predicted scores on every item for new models, from their observed items.

        Args:
          scores: ``[K, n]`` (or ``[n]``) observed scores, columns in the order of
            ``items`` (NaN = unobserved when ``mask`` is None), or a
            :class:`ScoreMatrix` or labelled pandas DataFrame / Series matched by item
            name as in :meth:`update`; ``None`` predicts one model with nothing
            observed (the prior).
          mask: optional bool ``[K, n]``.
          return_std: also return the delta-method standard deviation of each
            predicted probability (Laplace approximation on ``u``).
          num_newton: Newton steps of the online update (``None``: until converged,
            as in :meth:`update`).

        Returns:
          ``[K, n]`` probabilities, and their standard deviations if asked, columns in the
          order of ``items`` (the fit's order, also for a ScoreMatrix whose columns are in
          another order: take ``lr.items`` to line them up); ``[n]`` for one model's row
          (a 1-D array or a Series) and for ``None``.

        Example:
          >>> import jaxeval
          >>> sm = jaxeval.load("oll2_musr")
          >>> lr = jaxeval.fit_factorization(sm.take(models=range(100)), rank=2, rho=3.0,
          ...                                num_steps=200)
          >>> lr.predict(sm.scores[100:102], sm.mask[100:102]).shape
          (2, 756)
          >>> lr.predict(sm.scores[100], sm.mask[100]).shape  # one model's row
          (756,)
        """
        if scores is None:
            if mask is not None:
                raise ValueError("mask: given without scores (pass the observed scores too)")
            scores = np.full(self.n_items, np.nan)
        one = _one_row(scores)
        u, H = self.update(scores, mask, num_newton=num_newton)
        if one:
            u, H = u[None], H[None]
        f = self.item_factors()
        p = np.asarray(_predict(jnp.asarray(u), f))
        if not return_std:
            return p[0] if one else p
        var = np.asarray(_logit_variance(jnp.asarray(H), f))
        sd = p * (1.0 - p) * np.sqrt(np.maximum(var, 0.0))
        return (p[0], sd[0]) if one else (p, sd)

    def predict_accuracy(self, scores: Any, mask: Any = None, *,
                         num_newton: int | None = None) -> np.ndarray:
        """Pooled accuracy estimate: observed scores plus predictions on unseen items.

        This is the *naive pooled* estimate of METHODS.md section 2.3 (biased when the
        predictions are); use the doubly robust estimators for valid inference. It
        averages over every fitted item (for a ScoreMatrix: also those it lacks).

        Returns:
          float ``[K]``; a numpy scalar for one model's row (a 1-D array or a Series).
        """
        one = _one_row(scores)
        s, m = self._canon(scores, mask)
        p = self.predict(s, m, num_newton=num_newton)
        acc = np.where(m, s, p).mean(axis=1)
        return acc[0] if one else acc

    def summary(self) -> str:
        """A short human-readable description (with the selection curve if any)."""
        lines = [repr(self)]
        if self.selection is not None:
            sel = self.selection
            rhos = [float(x) for x in sel["rhos"]]  # (plain floats: numpy 2 prints np.float64(..))
            lines.append(f"held-out log-loss (rows: rank, columns: rho {rhos}):")
            for r, row in zip(sel["ranks"], sel["heldout_loss"]):
                lines.append(f"  r={int(r):>3}: " + " ".join(f"{v:.4f}" for v in row))
        return "\n".join(lines)

    def to_npz(self, path: Any) -> Any:
        """Save the whole fit to ``path`` (``.npz``, no pickle); :meth:`from_npz` reads
        it back. Returns the path numpy wrote (``.npz`` appended if missing).

        Example:
          >>> import pathlib, tempfile, numpy as np, jaxeval
          >>> sm = jaxeval.load("oll2_musr").take(models=range(60))
          >>> lr = jaxeval.fit_factorization(sm, rank=2, rho=1.0, num_steps=50)
          >>> p = lr.to_npz(pathlib.Path(tempfile.mkdtemp()) / "fit")
          >>> back = jaxeval.LowRankLogistic.from_npz(p)
          >>> bool(np.array_equal(back.V, lr.V)), back.info["num_steps"], p.suffix
          (True, 50, '.npz')
        """
        import json

        extra = {}
        if self.selection is not None:
            extra = {f"selection_{k}": np.asarray(v) for k, v in self.selection.items()}
        if not hasattr(path, "write"):
            path = npz_name(path)
        meta = {"format": "jaxeval-lowrank/1", "final_loss": self.final_loss,
                "info": {k: _json_value(v) for k, v in self.info.items()}}
        arrays = dict(
            meta=np.asarray(json.dumps(meta)),
            V=self.V,
            c=self.c,
            u_mean=self.u_mean,
            U=self.U,
            rho_u=self.rho_u,
            rho_v=self.rho_v,
            online_rho=self.online_rho,
            items=self.items,
            models=self.models,
            loss_history=self.loss_history,
            **extra,
        )
        if hasattr(path, "write"):
            np.savez(path, **arrays)
        else:  # (np.savez(path) would append .npz to "f.NPZ"; an interrupted write
            atomic_savez(path, arrays)  # leaves any earlier file as it was)
        return path

    @classmethod
    def from_npz(cls, path: Any) -> LowRankLogistic:
        """A fit saved by :meth:`to_npz` (files without its metadata, written before it
        was added, load with ``final_loss`` NaN and an empty ``info``)."""
        import json
        import os

        if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such file")
        try:
            from jaxeval._io import open_npz

            with open_npz(path) as z:
                a = {k: np.asarray(z[k]) for k in z.files}
            meta = json.loads(str(a.pop("meta"))) if "meta" in a else {}
            if not isinstance(meta, dict):
                raise ValueError(f"meta is a {type(meta).__name__}, not a mapping")
            if meta and meta.get("format") != "jaxeval-lowrank/1":
                raise ValueError(f"format {meta.get('format')!r}")
            info = meta.get("info", {})
            if not isinstance(info, dict):
                raise ValueError(f"info is a {type(info).__name__}, not a mapping")
            sel = {k[len("selection_"):]: a.pop(k) for k in list(a) if k.startswith("selection_")}
            if "holdout_fraction" in sel:
                sel["holdout_fraction"] = float(sel["holdout_fraction"])

            def factor(name: str) -> np.ndarray:
                # float64 factors (a fit under jax x64) are kept exactly; others as float32
                x = a[name]
                if x.dtype.kind != "f":
                    raise ValueError(f"{name} has dtype {x.dtype}, not float")
                if not np.isfinite(x).all():
                    raise ValueError(f"{name} has non-finite values")
                return x if x.dtype == np.float64 else x.astype(np.float32)

            def strength(name: str) -> float:
                x = a[name]
                if x.shape != () or x.dtype.kind not in "iuf" or not (
                        np.isfinite(x) and x >= 0):
                    raise ValueError(f"{name} is {x!r}, not a finite value >= 0")
                return float(x)

            out = cls(
                V=factor("V"), c=factor("c"), u_mean=factor("u_mean"), U=factor("U"),
                rho_u=strength("rho_u"), rho_v=strength("rho_v"),
                online_rho=strength("online_rho"), items=a["items"], models=a["models"],
                final_loss=float(meta.get("final_loss", np.nan)),
                loss_history=a["loss_history"],
                selection=types.MappingProxyType(sel) if sel else None,
                info=types.MappingProxyType(dict(info)),
            )
            n, r = out.V.shape if out.V.ndim == 2 else (-1, -1)
            m = out.models.shape[0] if out.models.ndim == 1 else -1
            lh = out.loss_history
            if lh.ndim > 1 or lh.dtype.kind not in "fiu":  # (0-d: one given by hand)
                raise ValueError(f"loss_history must be a 1-D array of numbers, got "
                                 f"{lh.dtype} of shape {lh.shape}")
            if out.c.shape != (n,) or out.u_mean.shape != (r,) or out.items.shape != (n,) \
                    or out.U.shape != (m, r):
                raise ValueError(f"inconsistent shapes: V {out.V.shape}, c {out.c.shape}, "
                                 f"u_mean {out.u_mean.shape}, items {out.items.shape}, "
                                 f"U {out.U.shape}, models {out.models.shape}")
        except (*NPZ_READ_ERRORS, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a factorization saved by to_npz ({e})") from None
        return out



def _check_grid(grid: Any, name: str) -> None:
    """A search grid must be a sequence of numbers (not a string, None or a scalar)."""
    if isinstance(grid, (str, bytes)) or not hasattr(grid, "__len__") or (
        isinstance(grid, np.ndarray) and grid.ndim != 1
    ):
        raise TypeError(f"{name}: expected a sequence of numbers, got {grid!r}")

def fit_factorization(
    data: Any,
    rank: int | str = "auto",
    rho: float | str = "auto",
    *,
    rho_v: float | None = None,
    seed: Any = 0,
    ranks: Sequence[int] = DEFAULT_RANKS,
    rhos: Sequence[float] = DEFAULT_RHOS,
    holdout_fraction: float = 0.1,
    learning_rate: float = 0.1,
    num_steps: int = 1000,
    selection_steps: int = 500,
    progress: bool = False,
) -> LowRankLogistic:
    """Fit the low-rank logistic factorization to training models.

    With ``rank="auto"`` and/or ``rho="auto"`` the missing values are chosen by
    log-loss on random held-out *cells* of these training models over the grids
    ``ranks`` x ``rhos`` (:func:`jaxeval._factorization.select_factors`); the final
    factors are then refitted on all observed cells and re-expressed so that the
    training model factors have identity covariance (the online prior is then
    ``N(u_mean, I)``, ``online_rho = 0.5``; see
    :func:`jaxeval._factorization.empirical_prior`).

    Args:
      data: a :class:`~jaxeval.ScoreMatrix` (or a ``[m, n]`` array, NaN = missing)
        of training models.
      rank: number of factors, or ``"auto"``.
      rho: L2 strength on ``U`` (and on ``V`` unless ``rho_v`` is given), or ``"auto"``.
      rho_v: optional separate L2 strength on ``V``.
      seed: int seed or PRNG key.
      ranks: rank grid for ``rank="auto"``.
      rhos: regularisation grid for ``rho="auto"``.
      holdout_fraction: share of cells held out for the selection.
      learning_rate: Adam peak learning rate.
      num_steps: full-batch steps of the final fit.
      selection_steps: steps of each fit during selection.
      progress: a line on stderr as the selection and the final fit start and end,
        and one per rank of the selection grid (each rank is one compiled program).

    Returns:
      A frozen :class:`LowRankLogistic`.

    Raises:
      TypeError: a count, rank or seed that is not an integer (``2.0``, ``True``).
      ValueError: bad rank / rho, all-missing rows or columns, too few observations.
      FloatingPointError: the fit produced non-finite factors.

    Example:
      >>> import jaxeval
      >>> sm = jaxeval.load("oll2_musr").take(models=range(100))
      >>> lr = jaxeval.fit_factorization(sm, rank=4, rho=3.0, num_steps=200)
      >>> lr.V.shape
      (756, 4)
    """
    sm = as_score_matrix(data, "data")
    m, n = sm.shape
    key = as_key(seed)
    say = stage_printer("fit_factorization", progress)
    empty_rows = np.flatnonzero(~sm.mask.any(axis=1))
    if empty_rows.size:
        raise ValueError(
            f"data: {empty_rows.size} model rows have no observed cell (e.g. "
            f"{sm.models[empty_rows[:3]].tolist()}); drop them before fitting"
        )
    empty_cols = np.flatnonzero(~sm.mask.any(axis=0))
    if empty_cols.size:
        raise ValueError(
            f"data: {empty_cols.size} item columns have no observed cell (e.g. "
            f"{sm.items[empty_cols[:3]].tolist()}); drop them before fitting"
        )
    n_obs = int(sm.mask.sum())

    def check_rank(r: Any, what: str) -> int:
        r = check_int(what, r, 1)
        limit = min(m, n)
        if r > limit:
            raise ValueError(
                f"{what}: rank {r} is larger than the data allows (min(models, items) = "
                f"min({m}, {n}) = {limit})"
            )
        if r * (m + n) + n > n_obs:
            raise ValueError(
                f"{what}: rank {r} has {r * (m + n) + n} parameters but only {n_obs} observed cells"
            )
        return int(r)

    def check_rho(x: Any, what: str) -> float:
        if not _real_number(x):
            auto = " or 'auto'" if what == "rho" else ""  # (rho_v and the grid take numbers)
            raise ValueError(f"{what}: expected a float >= 0{auto}, got {x!r}")
        v = float(x)
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{what}: expected a finite value >= 0, got {x!r}")
        return v

    num_steps = check_int("num_steps", num_steps, 1)
    selection_steps = check_int("selection_steps", selection_steps, 1)
    if not (_real_number(learning_rate) and 0.0 < float(learning_rate) < np.inf):
        raise ValueError(f"learning_rate: expected a finite value > 0, got {learning_rate!r}")
    learning_rate = float(learning_rate)
    rv_given = None if rho_v is None else check_rho(rho_v, "rho_v")
    if not (_real_number(holdout_fraction) and 0.0 < float(holdout_fraction) < 1.0):
        raise ValueError(f"holdout_fraction: expected a value in (0, 1), got {holdout_fraction!r}")
    holdout_fraction = float(holdout_fraction)
    auto_rank = isinstance(rank, str)
    auto_rho = isinstance(rho, str)
    if auto_rank and rank != "auto":
        raise ValueError(f"rank: expected an int or 'auto', got {rank!r}")
    if auto_rho and rho != "auto":
        raise ValueError(f"rho: expected a float or 'auto', got {rho!r}")
    if auto_rank:
        # The default grid goes up to 32; on a small matrix keep only the ranks the
        # data allow (an explicitly given rank is checked strictly).
        def fits(r: Any) -> bool:
            try:
                check_rank(r, "ranks")
            except ValueError:
                return False
            return True

        _check_grid(ranks, "ranks")
        if len(ranks) == 0:
            raise ValueError("ranks: the rank grid is empty")
        ranks = [check_int("ranks", r, 1) for r in ranks]
        grid_ranks = tuple(r for r in ranks if fits(r))
        if not grid_ranks:
            check_rank(min(ranks), "ranks")  # raises with the reason
    else:
        grid_ranks = (check_rank(rank, "rank"),)
    if auto_rho:
        _check_grid(rhos, "rhos")
    if auto_rho and len(rhos) == 0:
        raise ValueError("rhos: the regularisation grid is empty")
    grid_rhos = tuple(check_rho(x, "rhos") for x in rhos) if auto_rho else (check_rho(rho, "rho"),)
    scores = jnp.asarray(sm.scores)
    mask = jnp.asarray(sm.mask)
    selection = None
    if auto_rank or auto_rho:
        say(f"choosing rank x rho on {holdout_fraction:.0%} held-out cells of {m} models x "
            f"{n} items: {len(grid_ranks)} ranks x {len(grid_rhos)} rhos, {selection_steps} "
            "steps each (one compiled program per rank)")
        sel = fz.select_factors(
            jax.random.fold_in(key, 1),
            scores,
            mask,
            ranks=grid_ranks,
            rhos=grid_rhos,
            holdout_fraction=holdout_fraction,
            learning_rate=learning_rate,
            num_steps=selection_steps,
            rho_v=rv_given,
            on_rank=say if progress else None,
        )
        if not np.isfinite(sel.heldout_loss).any():
            raise FloatingPointError(
                "fit_factorization: every fit of the selection grid produced non-finite values"
            )
        chosen_rank, chosen_rho = sel.rank, sel.rho
        say(f"chose rank {chosen_rank}, rho {chosen_rho:g} (held-out log loss "
            f"{float(np.nanmin(sel.heldout_loss)):.4f} per cell)")
        selection = types.MappingProxyType(
            {
                "ranks": sel.ranks,
                "rhos": sel.rhos,
                "heldout_loss": sel.heldout_loss,
                "train_loss": sel.train_loss,
                "holdout_fraction": holdout_fraction,
            }
        )
    else:
        chosen_rank, chosen_rho = grid_ranks[0], grid_rhos[0]
    rv = chosen_rho if rv_given is None else rv_given
    say(f"fitting rank {chosen_rank} on {m} models x {n} items ({n_obs} observed cells, "
        f"{num_steps} steps)")
    res = fz.fit_factors(
        jax.random.fold_in(key, 0),
        scores,
        mask,
        rank=chosen_rank,
        rho_u=jnp.float32(chosen_rho),
        rho_v=jnp.float32(rv),
        learning_rate=jnp.float32(learning_rate),
        num_steps=int(num_steps),
    )
    if int(res.status) != fz.STATUS_OK:
        raise FloatingPointError(
            f"fit_factorization: the fit hit non-finite values (status {int(res.status)}); "
            "try a smaller learning_rate or a larger rho"
        )
    final = float(res.final_loss)
    say(f"done: log loss {final:.4f} per observed cell")
    if final > 1.1 * math.log(2.0):
        # every factor at 0 (each score predicted as 0.5) costs log 2 per cell: a fit
        # that ends well above it diverged or stopped early, and predicts worse than that
        warnings.warn(
            f"fit_factorization: the fit ended at a loss of {final:.4g} per observed cell, "
            f"more than 10% above the {math.log(2.0):.4f} of predicting 0.5 everywhere "
            f"(learning_rate="
            f"{learning_rate:g} too large, or num_steps={num_steps} too few?)", stacklevel=2)
    f, U = _empirical_prior(res.U, res.item_factors)
    V, c, u_mean = (np.asarray(a) for a in f)
    U = np.asarray(U)
    if not all(np.isfinite(a).all() for a in (V, c, u_mean, U)):
        raise FloatingPointError("fit_factorization: the fitted factors are not finite")
    return LowRankLogistic(
        V=V,
        c=c,
        u_mean=u_mean,
        U=U,
        rho_u=float(chosen_rho),
        rho_v=float(rv),
        online_rho=0.5,
        items=sm.items,
        models=sm.models,
        final_loss=float(res.final_loss),
        loss_history=np.asarray(res.loss_history),
        selection=selection,
        info=types.MappingProxyType(
            {
                "source": sm.source,
                "seed": "key" if _concrete_int(seed) is None else _concrete_int(seed),
                "learning_rate": learning_rate,
                "num_steps": int(num_steps),
                "selection_steps": int(selection_steps),
                "jax_version": jax.__version__,
            }
        ),
    )


_TRY = " (try "  # how a fold's error opens its hint (wrapped_lam0_error looks for it)


def _fold_hint(e: ValueError, rank: int, folds: int, sm: Any) -> str:
    """What may let :func:`learn_lam0`'s fold fits go through: a lower rank where the rank
    was refused, more folds (each fit then sees more models) where that is possible."""
    ways = []
    if str(e).startswith("rank:") and rank > 1:
        ways.append("a lower rank")
    if folds < sm.n_models // 2:
        ways.append(f"more folds, up to {sm.n_models // 2}, so that each fit sees more models")
    return f"{_TRY}{' or '.join(ways)})" if ways else ""


def wrapped_lam0_error(e: ValueError) -> str:
    """``lam0='learned'``'s error in a function that calls :func:`learn_lam0` with its own
    rank and folds: where the message suggests other ones, says how to choose them."""
    if _TRY not in str(e):
        return str(e)
    return (f"{e}; jaxeval.learn_lam0 takes rank and folds: call it and pass the number "
            "it returns as lam0")


def learn_lam0(
    data: Any,
    *,
    rank: int = 8,
    rho: float = 1.0,
    n_observed: Sequence[int] = (5, 10, 20),
    folds: int = 2,
    seed: Any = 0,
    num_steps: int = 500,
    progress: bool = False,
) -> float:
    """The λ prior of the doubly robust estimate, learned on training models (METHODS.md 2.3).

    The DR estimate's variance is smallest at ``λ* = Cov(S, Ŝ) / Var(Ŝ)`` over an arm's
    unseen items, and while an arm has few observations its plug-in λ is shrunk toward
    a prior ``λ₀``. This learns ``λ₀`` by cross-fitting over the training models: the
    rows are split into ``folds`` groups; for each group a factorization (``rank``,
    ``rho``, ``num_steps``) is fitted on the other rows, each held-out row is observed on
    ``c`` random items for every ``c`` in ``n_observed``, its factor is fitted on them
    (the online update, run to convergence) and its remaining observed items are
    predicted. ``λ₀`` is the pooled slope ``Σ Cov / Σ Var`` over all held-out rows and
    every ``c``, clipped to ``[0, 1]``. Cross-fitting matters: predictions of rows the
    item factors were fitted on are too good, and their slope too close to 1.

    Args:
      data: a :class:`~jaxeval.ScoreMatrix` (or ``[m, n]`` array, NaN = missing) of
        training models, at least ``2 * folds`` rows, and enough that each fold's fit
        (on the other folds' rows) can be made: ``rank <= min(rows, items)``, at least
        as many observed cells as the ``rank * (rows + items) + items`` parameters of
        its factorization, and every item observed in those rows (so every row must
        have an observed cell and every item two observing rows: the fold that holds
        an item's only row out could not fit it, whatever the folds; both are refused
        before any fit).
      rank, rho: the factorization of each fold (as in :func:`fit_factorization`).
      n_observed: observed items per held-out row (each ``>= 1``).
      folds: number of row groups, ``>= 2``.
      seed: int seed (row groups, observed items and fits).
      num_steps: steps of each fold's fit.
      progress: a line on stderr as each fold's fit starts, and at the end.

    Returns:
      ``λ₀`` in ``[0, 1]`` (a float), to pass as ``lam0`` to
      :func:`~jaxeval.simulate_identification` or :class:`~jaxeval.IdentificationCampaign`.

    Raises:
      TypeError: a count, rank or seed that is not an integer (``2.0``, ``True``).
      ValueError: bad arguments, too few rows, a row without an observed cell or an
        item observed in fewer than two rows, or no held-out row with enough observed
        items to score.

    Example:
      >>> import jaxeval
      >>> sm = jaxeval.load("oll2_musr").take(models=range(120))
      >>> lam0 = jaxeval.learn_lam0(sm, rank=4, num_steps=100)
      >>> 0.0 <= lam0 <= 1.0
      True
    """
    sm = as_score_matrix(data, "data")
    folds = check_int("folds", folds, 2)
    if sm.n_models < 2 * folds:
        raise ValueError(
            f"data: learning lam0 with {folds} folds needs at least {2 * folds} models, "
            f"got {sm.n_models}"
        )
    try:
        cs = list(n_observed)
    except TypeError:
        raise ValueError(f"n_observed: expected a sequence of positive ints, got {n_observed!r}") \
            from None
    if not cs:
        raise ValueError(f"n_observed: expected positive ints, got {n_observed!r}")
    cs = [check_int("n_observed", c, 1) for c in cs]
    seed = check_int("seed", seed, 0)
    if int(seed) + folds - 1 >= 2**63:  # fold f fits with seed + f
        raise ValueError(f"seed: the folds' fits use seed .. seed + {folds - 1}, which must "
                         f"stay below 2**63; got {seed!r}")
    rank = check_int("rank", rank, 1)
    num_steps = check_int("num_steps", num_steps, 1)
    rho = _check_online_rho(rho)
    # checked here, not left to a fold's fit: no number of folds could get past them
    empty = np.flatnonzero(~sm.mask.any(axis=1))
    if empty.size:
        raise ValueError(
            f"data: {empty.size} model row(s) have no observed cell (e.g. "
            f"{sm.models[empty[:3]].tolist()}); drop them before learning lam0"
        )
    thin = np.flatnonzero(sm.mask.sum(axis=0) < 2)
    if thin.size:
        raise ValueError(
            f"data: {thin.size} item(s) observed in fewer than 2 model rows (e.g. "
            f"{sm.items[thin[:3]].tolist()}): some fold's fit would see no score of them, "
            "whatever the folds; drop them before learning lam0"
        )
    say = stage_printer("learn_lam0", progress)
    rng = np.random.default_rng([int(seed), 0x1A40])
    group = rng.permutation(sm.n_models) % folds
    num = den = 0.0
    for f in range(folds):
        rest = sm.take(models=np.flatnonzero(group != f))
        say(f"fold {f + 1} of {folds}: fitting rank {rank} on {rest.n_models} models "
            f"({num_steps} steps)")
        try:
            fit = fit_factorization(rest, rank=rank, rho=rho, seed=int(seed) + f,
                                    num_steps=num_steps)
        except ValueError as e:
            raise ValueError(
                f"data: the factorization of fold {f + 1} of {folds} ({rest.n_models} of the "
                f"{sm.n_models} models) cannot be fitted: {e}{_fold_hint(e, rank, folds, sm)}"
            ) from None
        held = sm.take(models=np.flatnonzero(group == f))
        S, M = np.asarray(held.scores, np.float64), np.asarray(held.mask, bool)
        for c in cs:
            obs = np.zeros_like(M)
            keep = np.zeros(M.shape[0], bool)
            for i in range(M.shape[0]):
                idx = np.flatnonzero(M[i])
                if idx.size >= c + 2:
                    obs[i, rng.choice(idx, size=c, replace=False)] = True
                    keep[i] = True
            if not keep.any():
                continue
            p = fit.predict(np.where(obs, S, 0.0)[keep], obs[keep])
            for s, q, m in zip(S[keep], p, (M & ~obs)[keep]):
                s, q = s[m], q[m].astype(np.float64)
                num += float(np.mean((s - s.mean()) * (q - q.mean())))
                den += float(np.var(q))
    if den <= 0.0:
        raise ValueError(
            "data: no held-out model could be scored: a row needs n_observed + 2 observed "
            f"items (at least {min(cs) + 2}, for the smallest count) and predictions that "
            "vary over its unseen items; lam0 cannot be learned"
        )
    lam0 = float(np.clip(num / den, 0.0, 1.0))
    say(f"done: lam0 = {lam0:.3f}")
    return lam0
