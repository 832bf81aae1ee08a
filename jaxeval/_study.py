"""Monte Carlo studies on disk: definitions, a resumable runner, merging.

A *study* is a small, frozen, JSON-serialisable definition
(:class:`IdentificationStudy` or :class:`AnchorStudy`). Running it splits the work
into *tasks* (one per policy, or one per anchor method) of numbered *units*
(replicates, or seeds), computes them chunk by chunk and writes each finished
chunk to disk atomically, so that a study killed at any moment (even
``kill -9``) resumes where it stopped and ends with exactly the numbers of an
uninterrupted run.

The output folder::

    OUT/study.json           the definition (canonical JSON)
    OUT/manifest.json        format, hashes, replicate range, and every chunk
                             file with its SHA-256 (rewritten atomically)
    OUT/chunks/TASK/LO-HI.npz  one file per finished chunk (units LO..HI-1)
    OUT/summary.json, OUT/plots/*.png   reports (:mod:`jaxeval._report`)

Safety rules: a folder holding another study's results is never overwritten; a
chunk whose checksum does not match is recomputed, never merged; independent
jobs over replicate ranges (``replicate_range=(lo, hi)``) write separate folders
that :func:`merge_studies` joins after checking that they are the same study and
that their ranges do not overlap. Under ``jax.distributed`` every process
computes and process 0 writes (the folder must be on a shared file system).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import io
import json
import math
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "AnchorStudy",
    "DataSource",
    "IdentificationStudy",
    "PolicySpec",
    "ReplicateStudy",
    "StudyConfigError",
    "StudyFolderError",
    "default_study",
    "load_results",
    "load_study",
    "merge_studies",
    "resume_study",
    "extend_study",
    "run_study",
    "study_from_dict",
    "study_status",
]

FORMAT = "jaxeval-study/1"
#: The identification set-up a chunk was computed with (``"setup"`` of its manifest
#: entry). 2: a prediction policy's online refit uses the factorization's ``online_rho``
#: and one Newton step unless its settings say otherwise, as
#: :func:`jaxeval.simulate_identification` does (entries without the field, set-up 1,
#: used the fit's ``rho_u`` and two Newton steps). 3: the empirical-Bernstein sequence
#: charges its exact penalty ``psi(g)/g^2`` (set-ups 1 and 2 charged ``psi(1/2)/(1/4)``
#: for every bet ``g >= 0.01``: valid, but 8-11% wider). Older chunks still load, but
#: a task whose numbers a change moved is not extended or merged across set-ups
#: (:func:`_setup_changes`). 5: the named anchor methods of
#: ``jaxeval.anchors.HALVES_METHODS`` calibrate their intervals on validation halves.
#: 6: so do the MLP-trained ones (:data:`_HALVED_AT_6`). 7: so does ``auto`` where it
#: chooses on validation models (``Settings.auto_halves`` on by default). 8: there,
#: ``auto`` weighs the MLP ensemble ``greedy_mlp_ens`` instead of one ``greedy_mlp``
#: (``jaxeval.anchors.AUTO_VALIDATION_EXTRA``), so its choice, MAE and interval moved.
SETUP = 8
#: The named anchor methods whose intervals set-up 6 moved to validation halves.
_HALVED_AT_6 = ("random_mlp", "sparseeval", "sparseeval_ridge", "greedy_resmlp", "greedy_mlp")
STUDY_FILE = "study.json"
MANIFEST_FILE = "manifest.json"
#: The factorization a real-data study's prediction policies use, saved by its first run.
PROBLEM_FILE = "problem.npz"


class StudyConfigError(ValueError):
    """A study definition with an unknown key or an impossible value (``.key`` names it)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class StudyFolderError(RuntimeError):
    """An output folder that cannot be used (another study's results, a foreign folder)."""


# ============================================================ definitions
def _check_keys(d: Any, allowed: Sequence[str], where: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise StudyConfigError(where, f"expected a JSON object, got {type(d).__name__}")
    for k in d:
        if k not in allowed:
            raise StudyConfigError(
                f"{where}.{k}" if where else k,
                f"unknown key {k!r}; allowed keys are {', '.join(allowed)}",
            )
    return d


def _int(v: Any, key: str, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise StudyConfigError(key, f"expected an integer, got {v!r}")
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise StudyConfigError(key, f"expected an integer {rng}, got {v}")
    return int(v)


def _float(v: Any, key: str, lo: float, hi: float, *, open_lo=False, open_hi=False,
           what: str = "a number") -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise StudyConfigError(key, f"expected {what}, got {v!r}")
    v = float(v)
    bad = (
        not math.isfinite(v) or (v <= lo if open_lo else v < lo) or (v >= hi if open_hi else v > hi)
    )
    if bad:
        lb, rb = "(" if open_lo else "[", ")" if open_hi else "]"
        raise StudyConfigError(key, f"expected {what} in {lb}{lo}, {hi}{rb}, got {v}")
    return v


def _str(v: Any, key: str, choices: Sequence[str] | None = None) -> str:
    if not isinstance(v, str) or not v:
        raise StudyConfigError(key, f"expected a non-empty string, got {v!r}")
    if choices is not None and v not in choices:
        raise StudyConfigError(key, f"expected one of {', '.join(choices)}; got {v!r}")
    return v


def _list(v: Any, key: str) -> list:
    if not isinstance(v, (list, tuple)) or not v:
        raise StudyConfigError(key, f"expected a non-empty list, got {v!r}")
    return list(v)


@dataclasses.dataclass(frozen=True)
class DataSource:
    """Where the score matrix comes from: exactly one of the three.

    Attributes:
      dataset: a bundled dataset name (``jaxeval.datasets.names()``).
      npz: a path to a ``.npz`` score matrix.
      synthetic: a synthetic low-rank logistic truth regenerated per replicate,
        as a mapping with ``n_items`` (required), ``rank``, ``model_scale``,
        ``difficulty_scale`` and ``difficulty_mean`` (as
        :class:`jaxeval.SyntheticSpec`).
    """

    dataset: str | None = None
    npz: str | None = None
    synthetic: tuple[tuple[str, Any], ...] | None = None
    # where a relative ``npz`` was found when the study folder was made: read from there
    # when the path does not resolve from the current directory (not part of the study:
    # two studies with the same ``npz`` are the same study)
    location: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def _file(self) -> Path:
        return Path(self.location or self.npz)

    SYNTHETIC_KEYS = ("n_items", "rank", "model_scale", "difficulty_scale", "difficulty_mean")

    @classmethod
    def from_dict(cls, d: Any, where: str = "data") -> DataSource:
        if isinstance(d, str):
            d = {"npz": d} if d.lower().endswith(".npz") else {"dataset": d}
        d = _check_keys(d, ("dataset", "npz", "synthetic"), where)
        if len(d) != 1:
            raise StudyConfigError(
                where, f"give exactly one of 'dataset', 'npz', 'synthetic'; got {sorted(d)}"
            )
        if "dataset" in d:
            from jaxeval import datasets

            return cls(dataset=_str(d["dataset"], f"{where}.dataset", datasets.names()))
        if "npz" in d:
            return cls(npz=_str(d["npz"], f"{where}.npz"))
        s = _check_keys(d["synthetic"], cls.SYNTHETIC_KEYS, f"{where}.synthetic")
        if "n_items" not in s:
            raise StudyConfigError(f"{where}.synthetic.n_items", "required key is missing")
        out = {"n_items": _int(s["n_items"], f"{where}.synthetic.n_items", 2)}
        if "rank" in s:
            out["rank"] = _int(s["rank"], f"{where}.synthetic.rank", 1, 256)
        for k in ("model_scale", "difficulty_scale"):
            if k in s:
                out[k] = _float(s[k], f"{where}.synthetic.{k}", 0.0, 100.0)
        if "difficulty_mean" in s:
            out["difficulty_mean"] = _float(
                s["difficulty_mean"], f"{where}.synthetic.difficulty_mean", -100.0, 100.0
            )
        return cls(synthetic=tuple(sorted(out.items())))

    def to_dict(self) -> dict:
        if self.dataset is not None:
            return {"dataset": self.dataset}
        if self.npz is not None:
            return {"npz": self.npz}
        return {"synthetic": dict(self.synthetic or ())}

    def describe(self) -> str:
        if self.dataset is not None:
            return self.dataset
        if self.npz is not None:
            return Path(self.npz).stem
        return f"synthetic(n={dict(self.synthetic or ())['n_items']})"

    def load(self):
        """The :class:`~jaxeval.ScoreMatrix` (real data only), duplicates removed."""
        from jaxeval._io import load, load_npz

        if self.dataset is not None:
            sm = load(self.dataset)
        elif self.npz is not None:
            sm = load_npz(self._file(), duplicate_names="rename")
        else:
            raise ValueError("a synthetic data source has no score matrix")
        return sm.drop_duplicates()

    def fingerprint(self) -> str | None:
        """SHA-256 of the data file (so a resumed study knows its data did not change)."""
        if self.npz is not None:
            return _sha256(self._file())
        if self.dataset is not None:
            from importlib import resources

            from jaxeval import datasets

            ref = resources.files("jaxeval.datasets").joinpath(datasets._FILES[self.dataset])
            with resources.as_file(ref) as p:
                return _sha256(Path(p))
        return None


# Static (compile-time) and dynamic (array) settings of a policy.
_STATIC_SETTINGS = ("batch_size", "use_predictions", "refit", "num_newton", "synchronized")
_DYNAMIC_SETTINGS = ("a", "scale", "rho", "lam0", "shrink")


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """One policy of an identification study.

    Attributes:
      policy: ``uniform``, ``ucbe``, ``naive``, ``pulse``, ``pulse_ucb`` or ``sysrs``.
      label: the name in reports and file names (default: the policy name).
      settings: overrides, static (``batch_size``, ``use_predictions``, ``refit``,
        ``num_newton``, ``synchronized``) or numeric (``a``, ``scale``, ``rho``,
        ``lam0``, ``shrink``).
    """

    policy: str
    label: str | None = None
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return self.label or self.policy

    @classmethod
    def from_dict(cls, d: Any, where: str) -> PolicySpec:
        from jaxeval._policies import POLICIES

        if isinstance(d, str):
            d = {"policy": d}
        d = _check_keys(d, ("policy", "label", "settings"), where)
        if "policy" not in d:
            raise StudyConfigError(f"{where}.policy", "required key is missing")
        policy = _str(d["policy"], f"{where}.policy", POLICIES)
        label = None
        if "label" in d:
            label = _str(d["label"], f"{where}.label")
            if not all(ch.isalnum() or ch in "-_." for ch in label):
                raise StudyConfigError(
                    f"{where}.label", f"use letters, digits, '-', '_' or '.', got {label!r}"
                )
        s = _check_keys(
            d.get("settings", {}), _STATIC_SETTINGS + _DYNAMIC_SETTINGS, f"{where}.settings"
        )
        out: dict[str, Any] = {}
        for k, v in s.items():
            key = f"{where}.settings.{k}"
            if k in ("batch_size", "num_newton"):
                out[k] = _int(v, key, 1 if k == "batch_size" else 0, 10_000)
            elif k in ("use_predictions", "refit", "synchronized"):
                if not isinstance(v, bool):
                    raise StudyConfigError(key, f"expected true or false, got {v!r}")
                out[k] = v
            elif k in ("lam0",):
                out[k] = _float(v, key, 0.0, 1.0)
            else:
                out[k] = _float(v, key, 0.0, 1e6)
        return cls(policy=policy, label=label, settings=tuple(sorted(out.items())))

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"policy": self.policy}
        if self.label:
            d["label"] = self.label
        if self.settings:
            d["settings"] = dict(self.settings)
        return d


# A study built in code passes the checks of one read from JSON: set while
# :func:`_checked_in_code` rebuilds it through ``from_dict`` (whose own construction
# must not recurse).
_ROUND_TRIP = contextvars.ContextVar("jaxeval_study_round_trip", default=False)


def _checked_in_code(study: Any) -> None:
    """Refuse a study object whose fields a JSON definition could not hold, naming the
    field (``AnchorStudy(methods="auto")`` used to run the letters as methods, a wrong
    type to fail later with a raw ``TypeError``); lists become the tuples ``from_dict``
    makes. The value checks are ``from_dict``'s own: the study is written with
    ``to_dict`` and read back."""
    if _ROUND_TRIP.get():
        return
    for f in dataclasses.fields(study):
        v = getattr(study, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        if isinstance(default, tuple) and (
            isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list, range))
        ):
            raise StudyConfigError(f.name, f"expected a list or tuple, got {v!r}")
        if isinstance(default, DataSource) and not isinstance(v, DataSource):
            raise StudyConfigError(
                f.name, f"expected a DataSource, got {type(v).__name__}"
            )
    for i, p in enumerate(getattr(study, "policies", ())):
        if not isinstance(p, PolicySpec):
            raise StudyConfigError(f"policies[{i}]", f"expected a PolicySpec, got {p!r}")
    try:
        d = study.to_dict()
    except (TypeError, AttributeError, ValueError) as e:
        raise StudyConfigError("<study>", f"a field has the wrong type ({e})") from None
    token = _ROUND_TRIP.set(True)
    try:
        back = type(study).from_dict(d, check=False)
    finally:
        _ROUND_TRIP.reset(token)
    # the values as a JSON definition holds them: tuples for lists and ranges, Python
    # numbers for NumPy scalars (study.json is written from them); the data source
    # keeps its own object (where a relative file was found is not part of the JSON)
    for f in dataclasses.fields(study):
        if not isinstance(getattr(study, f.name), DataSource):
            object.__setattr__(study, f.name, getattr(back, f.name))


def _default_budgets() -> tuple[float, ...]:
    return (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0)


@dataclasses.dataclass(frozen=True)
class IdentificationStudy:
    """A best-model identification study (METHODS.md sections 2 and 5).

    Every policy plays the same instances and item orders (the replicate key
    decides both). The protocol is that of :func:`jaxeval.simulate_identification`
    (and gives its numbers bit for bit): with real data the models (duplicates
    removed) are split with ``seed`` into ``n_train`` training models (the
    factorization is fitted on them) and a candidate pool; ``n_instances``
    K-subsets of the pool are drawn, and replicate ``i`` plays one of them
    (chosen from its key) with its own item orders.

    Attributes:
      name: a label for reports.
      data: the :class:`DataSource`.
      policies: the :class:`PolicySpec` list (labels must be unique). The default
        compares PULSE with the recommended index (``pulse_ucb``: the difference
        estimate plus ``sqrt(a / N)``; BUILD_NOTES "Tuning" for the evidence) and with
        the interval-radius index (``pulse``) against UCB-E, naive pooling and SySRs.
      num_arms: K, candidates per instance.
      budgets: checkpoint budgets as fractions of ``K * n`` LLM calls (sorted,
        in (0, 1]).
      alpha: family-wise error level of the intervals.
      n_replicates: Monte Carlo replicates per policy.
      seed: the study's seed (model split, instances, replicate keys).
      chunk_size: replicates per chunk (bounds memory; one file per chunk), rounded
        up to whole blocks of ``lanes`` on every device (a device computes whole
        blocks, so a smaller chunk would only add padding) and capped near the study's
        size.
      lanes: replicates vmapped together per device step (results are
        bit-identical for a fixed ``lanes``).
      n_instances: distinct K-subsets drawn from the pool (real data).
      n_train: training models for the factorization (real data; ``0`` = half
        of the deduplicated models. Note: in :func:`jaxeval.simulate_identification`
        half is ``None`` and ``0`` means no training models).
      rank: factorization rank (real data).
      fit_steps: Adam steps of the offline factorization fit (``num_steps`` of
        :func:`~jaxeval.fit_factorization`).
      cs_kinds: confidence sequences computed (``eb``, ``hoeffding``, ``betting``).
      corruption: deliberately bad predictions for validity studies (``none``,
        ``biased``, ``random``, ``adversarial``).
      instance_assignment: ``random`` (replicate ``i``'s instance drawn from its key)
        or ``balanced`` (replicate ``i`` plays instance ``i mod n_instances``, every
        instance equally often; real data), as in
        :func:`jaxeval.simulate_identification`.
    """

    name: str = "identification"
    data: DataSource = dataclasses.field(default_factory=lambda: DataSource(dataset="oll2_ifeval"))
    policies: tuple[PolicySpec, ...] = (
        PolicySpec("pulse_ucb"),
        PolicySpec("pulse"),
        PolicySpec("ucbe"),
        PolicySpec("naive"),
        PolicySpec("sysrs"),
    )
    num_arms: int = 10
    budgets: tuple[float, ...] = dataclasses.field(default_factory=_default_budgets)
    alpha: float = 0.05
    n_replicates: int = 200
    seed: int = 0
    chunk_size: int = 64
    lanes: int = 32
    n_instances: int = 10
    n_train: int = 0
    rank: int = 8
    fit_steps: int = 500
    cs_kinds: tuple[str, ...] = ("eb", "hoeffding")
    corruption: str = "none"
    instance_assignment: str = "random"

    kind = "identification"
    KEYS = (
        "kind",
        "name",
        "data",
        "policies",
        "num_arms",
        "budgets",
        "alpha",
        "n_replicates",
        "seed",
        "chunk_size",
        "lanes",
        "n_instances",
        "n_train",
        "rank",
        "fit_steps",
        "cs_kinds",
        "corruption",
        "instance_assignment",
    )

    def __post_init__(self) -> None:
        _checked_in_code(self)
        # built from a dict or in code alike: a value that would silently run the
        # random design (and make the saved definition unreadable) is refused here
        _str(self.instance_assignment, "instance_assignment", ("random", "balanced"))
        from jaxeval._simulate import MIN_ALPHA

        if isinstance(self.alpha, (int, float)) and not self.alpha >= MIN_ALPHA:
            raise StudyConfigError(
                "alpha", f"must be at least {MIN_ALPHA:g} (alpha / K is held in float32), "
                f"got {self.alpha!r}"
            )
        if self.instance_assignment == "balanced" and self.data.synthetic is not None:
            raise StudyConfigError(
                "instance_assignment", "'balanced' is for real data (synthetic truth draws "
                "a new matrix per replicate)"
            )

    @classmethod
    def from_dict(cls, d: Any, *, check: bool = True) -> IdentificationStudy:
        """Build from a parsed ``study.json``; every bad key or value is refused by
        name (:class:`StudyConfigError`). ``check=False`` skips :meth:`check`."""
        d = _check_keys(d, cls.KEYS, "")
        kw: dict[str, Any] = {}
        if "name" in d:
            kw["name"] = _str(d["name"], "name")
        if "data" in d:
            kw["data"] = DataSource.from_dict(d["data"])
        if "policies" in d:
            pols = tuple(
                PolicySpec.from_dict(p, f"policies[{i}]")
                for i, p in enumerate(_list(d["policies"], "policies"))
            )
            names = [p.name for p in pols]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise StudyConfigError(
                    "policies", f"labels must be unique, {dup} repeats (give each a 'label')"
                )
            kw["policies"] = pols
        for k, lo, hi in (
            ("num_arms", 2, 100_000),
            ("n_replicates", 1, 2**31),
            ("seed", 0, 2**63 - 1),
            ("chunk_size", 1, 2**31),
            ("lanes", 1, 2**20),
            ("n_instances", 1, 10**7),
            ("n_train", 0, 10**9),
            ("rank", 1, 256),
            ("fit_steps", 1, 10**7),
        ):
            if k in d:
                kw[k] = _int(d[k], k, lo, hi)
        if "alpha" in d:
            kw["alpha"] = _float(d["alpha"], "alpha", 0.0, 1.0, open_lo=True, open_hi=True)
        if "budgets" in d:
            b = tuple(
                _float(v, f"budgets[{i}]", 0.0, 1.0, open_lo=True,
                       what="a fraction of K*n LLM calls (a study's budgets are fractions)")
                for i, v in enumerate(_list(d["budgets"], "budgets"))
            )
            if list(b) != sorted(set(b)):
                raise StudyConfigError(
                    "budgets", f"expected strictly increasing fractions, got {b}"
                )
            kw["budgets"] = b
        if "cs_kinds" in d:
            kinds = tuple(
                _str(v, f"cs_kinds[{i}]", ("eb", "hoeffding", "betting"))
                for i, v in enumerate(_list(d["cs_kinds"], "cs_kinds"))
            )
            if len(set(kinds)) != len(kinds):
                raise StudyConfigError("cs_kinds", f"repeated kinds in {kinds}")
            if not kinds:
                raise StudyConfigError("cs_kinds", "expected at least one interval kind")
            kw["cs_kinds"] = kinds
        if "corruption" in d:
            kw["corruption"] = _str(
                d["corruption"], "corruption", ("none", "biased", "random", "adversarial")
            )
        if "instance_assignment" in d:
            kw["instance_assignment"] = d["instance_assignment"]  # checked by __post_init__
        study = cls(**kw)
        if check:
            study.check()
        return study

    def check(self) -> None:
        """Cross-field checks that need the data (refused with the key named)."""
        if self.data.synthetic is None and self.data.npz is not None:
            if not self.data._file().is_file():
                raise StudyConfigError("data.npz", f"no such file: {self.data.npz}")

    def to_dict(self) -> dict:
        """The definition as JSON-ready data; ``from_dict(to_dict())`` is equal."""
        return {
            "kind": self.kind,
            "name": self.name,
            "data": self.data.to_dict(),
            "policies": [p.to_dict() for p in self.policies],
            "num_arms": self.num_arms,
            "budgets": list(self.budgets),
            "alpha": self.alpha,
            "n_replicates": self.n_replicates,
            "seed": self.seed,
            "chunk_size": self.chunk_size,
            "lanes": self.lanes,
            "n_instances": self.n_instances,
            "n_train": self.n_train,
            "rank": self.rank,
            "fit_steps": self.fit_steps,
            "cs_kinds": list(self.cs_kinds),
            "corruption": self.corruption,
            # written only when set, so definitions saved before it existed stay equal
            **({} if self.instance_assignment == "random"
               else {"instance_assignment": self.instance_assignment}),
        }

    @property
    def n_units(self) -> int:
        """Independent units of work (replicates or repetitions) the study runs."""
        return self.n_replicates

    def tasks(self) -> list[Task]:
        """The study's work as resumable tasks, one result file each."""
        return _identification_tasks(self)


@dataclasses.dataclass(frozen=True)
class AnchorStudy:
    """An anchor-item study (METHODS.md sections 3 and 6.2).

    Unit ``r`` is repetition ``r``: models (duplicates removed) are split with
    ``Split`` seed ``first_seed + r`` (test / validation / train, METHODS.md 6.2) and
    every method is fitted for every ``k`` on the training models; MAE (pp),
    Kendall τ-b and interval coverage are measured on the test models.

    Attributes:
      name: a label for reports.
      data: the :class:`DataSource` (real data).
      methods: anchor methods (``jaxeval.anchors.METHODS`` or ``auto``).
      k: anchor counts.
      n_seeds: repetitions.
      first_seed: seed of repetition 0 (the protocol uses 42).
      alpha: error level of the predictors' intervals.
      chunk_size: repetitions per chunk file.
    """

    name: str = "anchors"
    data: DataSource = dataclasses.field(default_factory=lambda: DataSource(dataset="oll2_musr"))
    methods: tuple[str, ...] = ("sparseeval", "kmeans_ridge", "random_mean", "auto")
    k: tuple[int, ...] = (20, 40, 60, 80, 100)
    n_seeds: int = 5
    first_seed: int = 42
    alpha: float = 0.1
    chunk_size: int = 1

    kind = "anchors"
    KEYS = ("kind", "name", "data", "methods", "k", "n_seeds", "first_seed", "alpha", "chunk_size")

    def __post_init__(self) -> None:
        _checked_in_code(self)

    @classmethod
    def from_dict(cls, d: Any, *, check: bool = True) -> AnchorStudy:
        """Build from a parsed ``study.json``; every bad key or value is refused by
        name (:class:`StudyConfigError`). ``check=False`` skips :meth:`check`."""
        d = _check_keys(d, cls.KEYS, "")
        kw: dict[str, Any] = {}
        if "name" in d:
            kw["name"] = _str(d["name"], "name")
        if "data" in d:
            kw["data"] = DataSource.from_dict(d["data"])
            if kw["data"].synthetic is not None:
                raise StudyConfigError("data.synthetic", "anchor studies need real data")
        if "methods" in d:
            from jaxeval.anchors import METHODS

            allowed = tuple(METHODS) + ("auto",)
            ms = tuple(
                _str(m, f"methods[{i}]", allowed)
                for i, m in enumerate(_list(d["methods"], "methods"))
            )
            if len(set(ms)) != len(ms):
                raise StudyConfigError("methods", f"repeated methods in {ms}")
            kw["methods"] = ms
        if "k" in d:
            ks = tuple(_int(v, f"k[{i}]", 1, 10**6) for i, v in enumerate(_list(d["k"], "k")))
            if list(ks) != sorted(set(ks)):
                raise StudyConfigError("k", f"expected strictly increasing anchor counts, got {ks}")
            kw["k"] = ks
        for k, lo in (("n_seeds", 1), ("first_seed", 0), ("chunk_size", 1)):
            if k in d:
                kw[k] = _int(d[k], k, lo, 2**31)
        if "alpha" in d:
            kw["alpha"] = _float(d["alpha"], "alpha", 0.0, 1.0, open_lo=True, open_hi=True)
        study = cls(**kw)
        if check:
            study.check()
        return study

    def check(self) -> None:
        """Cross-field checks that need the data (refused with the key named)."""
        if self.data.npz is not None and not self.data._file().is_file():
            raise StudyConfigError("data.npz", f"no such file: {self.data.npz}")

    def to_dict(self) -> dict:
        """The definition as JSON-ready data; ``from_dict(to_dict())`` is equal."""
        return {
            "kind": self.kind,
            "name": self.name,
            "data": self.data.to_dict(),
            "methods": list(self.methods),
            "k": list(self.k),
            "n_seeds": self.n_seeds,
            "first_seed": self.first_seed,
            "alpha": self.alpha,
            "chunk_size": self.chunk_size,
        }

    @property
    def n_units(self) -> int:
        """Independent units of work (replicates or repetitions) the study runs."""
        return self.n_seeds

    def tasks(self) -> list[Task]:
        """The study's work as resumable tasks, one result file each."""
        return _anchor_tasks(self)


@dataclasses.dataclass(frozen=True)
class ReplicateStudy:
    """Any Monte Carlo replicate function run as a resumable study.

    ``target`` names an importable function ``fn(key) -> pytree of arrays``
    (``"package.module:function"``); replicate ``i`` gets
    ``fold_in(key(seed), i)``, exactly as in :func:`jaxeval._runner.run_replicates`.

    Attributes:
      name: a label for reports.
      target: ``"module:function"``.
      n_replicates: replicates.
      seed: base seed.
      chunk_size: replicates per chunk file (rounded up to whole blocks of ``lanes``
        on every device, capped near ``n_replicates``).
      lanes: replicates vmapped together per device step.
    """

    target: str
    name: str = "replicates"
    n_replicates: int = 1000
    seed: int = 0
    chunk_size: int = 256
    lanes: int = 32

    kind = "replicates"
    KEYS = ("kind", "name", "target", "n_replicates", "seed", "chunk_size", "lanes")
    data = None

    def __post_init__(self) -> None:
        _checked_in_code(self)

    @classmethod
    def from_dict(cls, d: Any, *, check: bool = True) -> ReplicateStudy:
        """Build from a parsed ``study.json``; every bad key or value is refused by
        name (:class:`StudyConfigError`). The target is not imported here, whatever
        ``check`` says (a folder's definition is read where its module may be missing):
        :meth:`check` imports it, and running the study does."""
        d = _check_keys(d, cls.KEYS, "")
        if "target" not in d:
            raise StudyConfigError("target", "required key is missing")
        if callable(d["target"]):
            f = d["target"]
            mod = getattr(f, "__module__", None) or "__main__"
            name = f"{mod}:{getattr(f, '__qualname__', 'function')}"
            raise StudyConfigError(
                "target", "expected the text 'module:function' that imports the function "
                "(a study is resumed and merged from its JSON), got the function itself: "
                + (f"{name!r}" if mod != "__main__" else
                   "move it from the running script to a module file, e.g. 'mymodule:"
                   f"{name.partition(':')[2]}'"))
        target = _str(d["target"], "target")
        if target.count(":") != 1:
            raise StudyConfigError("target", f"expected 'module:function', got {target!r}")
        if target.partition(":")[0] == "__main__":
            raise StudyConfigError(
                "target", f"{target!r} names the running script, which a resume, a merge or "
                "another process cannot import, and whose edits between runs could not be "
                "checked: move the function to a module file and name it 'module:function' "
                "(a script importing itself runs its top level again: guard that with "
                "`if __name__ == \"__main__\":`)")
        kw: dict[str, Any] = {"target": target}
        if "name" in d:
            kw["name"] = _str(d["name"], "name")
        for k, lo, hi in (
            ("n_replicates", 1, 2**31),
            ("seed", 0, 2**63 - 1),
            ("chunk_size", 1, 2**31),
            ("lanes", 1, 2**20),
        ):
            if k in d:
                kw[k] = _int(d[k], k, lo, hi)
        return cls(**kw)

    def check(self) -> None:
        """Import the target now, so a bad ``target`` is refused before any work."""
        self.function()

    def function(self) -> Callable:
        """The target, imported. A module in the current folder is found even where
        that folder is not on the import path (the ``jaxeval`` console script; ``python
        -m jaxeval`` puts it first), after everything that is."""
        import importlib
        import sys

        mod, _, fn = self.target.partition(":")
        try:
            try:
                module = importlib.import_module(mod)
            except ModuleNotFoundError as e:
                cwd = os.getcwd()
                if e.name != mod.partition(".")[0] or cwd in sys.path or "" in sys.path:
                    raise
                sys.path.append(cwd)
                try:
                    module = importlib.import_module(mod)
                finally:
                    sys.path.remove(cwd)
            f = getattr(module, fn)
        except (ImportError, AttributeError) as e:
            raise StudyConfigError("target", f"cannot import {self.target!r} ({e}; its module "
                                   "must be importable: installed, in the current folder, "
                                   "or on PYTHONPATH)") from None
        except Exception as e:  # the module's own code failed (a syntax error, a raise)
            raise StudyConfigError(
                "target", f"importing the module of {self.target!r} failed: "
                f"{type(e).__name__}: {e}") from e
        if not callable(f):
            raise StudyConfigError("target", f"{self.target!r} is not callable")
        if _stale(module, fn, f):
            raise StudyConfigError(
                "target", f"{self.target!r}: the function this Python runs is not the one in "
                f"{module.__file__} (the file was edited after the module was imported); "
                "restart Python, or reload the module")
        return f

    def to_dict(self) -> dict:
        """The definition as JSON-ready data; ``from_dict(to_dict())`` is equal."""
        return {
            "kind": self.kind,
            "name": self.name,
            "target": self.target,
            "n_replicates": self.n_replicates,
            "seed": self.seed,
            "chunk_size": self.chunk_size,
            "lanes": self.lanes,
        }

    @property
    def n_units(self) -> int:
        """Independent units of work (replicates or repetitions) the study runs."""
        return self.n_replicates

    def tasks(self) -> list[Task]:
        """The study's work as resumable tasks, one result file each."""
        fn = self.function()
        chunk = _dispatch_chunk(self.chunk_size, self.lanes, self.n_replicates)

        def compute(ranges, progress):
            from jaxeval._runner import Progress, ReplicatePlan

            plan = ReplicatePlan(fn, chunk(), lanes=self.lanes)
            prog = _progress(Progress, ranges, progress, "replicates")
            for lo, hi, res in plan.iter_ranges(self.seed, ranges, progress=prog):
                yield lo, hi, flatten_tree(res)

        return [Task("replicates", self.n_replicates, chunk, compute)]


Study = IdentificationStudy | AnchorStudy | ReplicateStudy
_KINDS = {
    "identification": IdentificationStudy,
    "anchors": AnchorStudy,
    "replicates": ReplicateStudy,
}


def study_from_dict(d: Any, *, check: bool = True) -> Study:
    """Build a study from a JSON-like mapping; unknown keys and bad values are refused.

    With ``check=False`` the checks that need the outside world (the data file exists,
    a replicate study's target imports) are skipped: what reading a finished folder's
    results needs, wherever it is read from.

    Example:
      >>> from jaxeval import study_from_dict
      >>> s = study_from_dict({"kind": "identification", "num_arms": 5, "n_replicates": 100})
      >>> s.num_arms, study_from_dict(s.to_dict()) == s
      (5, True)
      >>> study_from_dict({"kind": "identification", "nmu_arms": 5})
      Traceback (most recent call last):
      ...
      jaxeval._study.StudyConfigError: nmu_arms: unknown key 'nmu_arms'; allowed keys are ...
    """
    if not isinstance(d, Mapping):
        raise StudyConfigError("<study>", f"expected a JSON object, got {type(d).__name__}")
    kind = d.get("kind")
    if kind not in _KINDS:
        raise StudyConfigError("kind", f"expected one of {', '.join(_KINDS)}; got {kind!r}")
    return _KINDS[kind].from_dict(d, check=check)


def load_study(path: str | os.PathLike) -> Study:
    """Read a study definition from a JSON file (or a study folder's ``study.json``)."""
    p = Path(path)
    if p.is_dir():
        p = p / STUDY_FILE
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"study definition not found: {p}") from None
    except json.JSONDecodeError as e:
        raise StudyConfigError(str(p), f"not valid JSON ({e})") from None
    return study_from_dict(d)


def default_study(quick: bool = False) -> tuple[IdentificationStudy, AnchorStudy]:
    """The main job's two studies (see ``jaxeval main``).

    PULSE (the recommended ``pulse_ucb`` index and the interval-radius ``pulse``
    index) vs UCB-E vs naive pooling vs SySRs on Open LLM Leaderboard v2 IFEval
    (K = 10, the METHODS.md 6.1 budget grid), and the recommended anchor estimator
    (``auto``) against k-means + ridge and the plain anchor mean on MuSR.
    """
    ident = IdentificationStudy(
        name="main-identification",
        data=DataSource(dataset="oll2_ifeval"),
        num_arms=10,
        n_replicates=128 if quick else 256,
        chunk_size=128,
        n_instances=16,
    )
    anchors = AnchorStudy(
        name="main-anchors",
        data=DataSource(dataset="oll2_musr"),
        methods=("random_mean", "kmeans_ridge", "auto"),
        k=(20, 100),
        n_seeds=2 if quick else 3,
    )
    return ident, anchors


# ============================================================== tasks
@dataclasses.dataclass
class Task:
    """A named series of ``n`` units computed in chunks.

    ``compute(ranges, progress)`` yields ``(lo, hi, {field: array [hi-lo, ...]})``
    for the requested ranges in order; it is only called when work is left, so
    expensive set-up (data, factorization, compilation) can live inside it.
    """

    name: str
    n: int
    chunk_size: int | Callable[[], int]  # (a function: the size needs the device count)
    compute: Callable[[list[tuple[int, int]], Any], Iterator[tuple[int, int, dict]]]


def results_key(study: Study) -> dict:
    """The parts of a definition that decide its numbers (not its file layout)."""
    d = study.to_dict()
    d.pop("chunk_size", None)
    d.pop("name", None)
    return d


def _merge_key(cfg: dict) -> dict:
    """:func:`results_key` of a stored config, with a data file's path left out (its
    checksum is compared instead)."""
    key = results_key(study_from_dict(cfg, check=False))
    if isinstance(key.get("data"), dict) and "npz" in key["data"]:
        key["data"] = {"npz": "<compared by checksum>"}
    return key


def _hash_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


# =========================================================== disk layer
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    from jaxeval._data import atomic_open

    # (no sweep per file: a resumed study removes every .tmp-* of its folder itself)
    with atomic_open(path, sweep=False) as f:
        f.write(data)


def _atomic_write_json(path: Path, obj: Any) -> None:
    _atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def _write_chunk(path: Path, arrays: Mapping[str, np.ndarray]) -> str:
    import io
    import zipfile

    # np.savez(buf, **arrays) would take a field named "file" or "allow_pickle" as its
    # own argument; the archive is written the same way by hand instead
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    data = buf.getvalue()
    _atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def _chunk_name(task: str, lo: int, hi: int) -> str:
    return f"chunks/{task}/{lo:010d}-{hi:010d}.npz"


def _versions() -> dict:
    import jax

    import jaxeval

    return {"jax": jax.__version__, "jaxeval": jaxeval.__version__, "numpy": np.__version__}


def _stale(module: Any, name: str, f: Any) -> bool:
    """Whether the function ``name`` of an imported module differs from the one its
    source file defines now: the file was edited after the import (a notebook that
    imported it earlier), or an edit kept the file's size within the second of its
    cached bytecode, which Python then still runs. The checksum of a folder's target
    (:func:`_target_sha`) reads the file, so the two must agree. ``False`` when it
    cannot tell (no source file, a wrapped or nested function)."""
    import inspect

    code = getattr(inspect.unwrap(f), "__code__", None)
    path = getattr(module, "__file__", None)
    if code is None or not path or not str(path).endswith(".py") or not os.path.isfile(path):
        return False
    try:
        top = compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return True  # the file no longer even compiles: not what runs
    now = [c for c in top.co_consts if inspect.iscode(c) and c.co_name == code.co_name]
    return len(now) == 1 and now[0] != code  # (code objects compare their contents)


def _target_sha(study: Study) -> str | None:
    """SHA-256 of the source of a replicates study's target module (``None`` for other
    kinds, or a module without readable source): the function is the study's
    numbers-defining setting, and its name alone does not say when it was edited."""
    if not isinstance(study, ReplicateStudy):
        return None
    import importlib.util

    try:  # (the file itself: an imported module's source may be an older cached copy)
        spec = importlib.util.find_spec(study.target.partition(":")[0])
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()


def _target_changed(where: Path, study: Study, held: str, now: str) -> str:
    return (f"{where}: the target's module {study.target.partition(':')[0]!r} changed since "
            f"the folder's chunks were computed (its source's SHA-256: {held[:12]}... there, "
            f"{now[:12]}... now): new chunks would mix two versions of the replicate "
            "function. Nothing was changed; restore the module, or run the study in a new "
            "--out folder")


def _numerics() -> dict:
    """The global JAX settings that decide a replicate's random stream and arithmetic:
    a folder's chunks must all come from one (recorded in the manifest)."""
    import jax

    return {
        "prng_impl": str(jax.config.jax_default_prng_impl),
        "threefry_partitionable": bool(jax.config.jax_threefry_partitionable),
        "x64": bool(jax.config.jax_enable_x64),
    }


_NUMERICS_HOW = {
    "prng_impl": "JAX_DEFAULT_PRNG_IMPL / jax.config.update('jax_default_prng_impl', ...)",
    "threefry_partitionable": "JAX_THREEFRY_PARTITIONABLE / jax_threefry_partitionable",
    "x64": "JAX_ENABLE_X64 / jax_enable_x64",
}


def _numerics_diff(old: Mapping[str, Any] | None, new: Mapping[str, Any],
                   where: tuple[str, str] = ("there", "here")) -> str:
    """'' when ``old`` (None: a folder from before they were recorded) matches ``new``,
    else the settings that differ, each with how it is set."""
    if not old or not new:
        return ""
    diff = [f"{k}={old[k]!r} {where[0]}, {new[k]!r} {where[1]} (set by {_NUMERICS_HOW[k]})"
            for k in _NUMERICS_HOW if k in old and k in new and old[k] != new[k]]
    return "; ".join(diff)


def _read_manifest(out: Path) -> dict | None:
    p = out / MANIFEST_FILE
    if not p.exists():
        return None
    try:
        m = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise StudyFolderError(f"{p}: manifest is not valid JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        got = m.get("format") if isinstance(m, dict) else type(m).__name__
        raise StudyFolderError(f"{p}: not a {FORMAT} manifest (format={got!r})")
    _check_manifest(p, m)
    return m


def _check_manifest(p: Path, m: dict) -> None:
    """Refuse a manifest that was edited or truncated by hand: the keys every reader
    uses, each chunk entry's fields, and the config against the hash it was created
    with (an edited seed would otherwise mix two studies' replicates in one folder)."""
    for key, typ in (("config", dict), ("chunks", dict), ("study_hash", str),
                     ("range", list)):
        if not isinstance(m.get(key), typ):
            raise StudyFolderError(f"{p}: manifest entry {key!r} is missing or not a "
                                   f"{typ.__name__}; the folder's manifest was damaged")
    for key, typ in (("numerics", dict), ("problem_sha256", str),  # optional (newer)
                     ("target_sha256", str)):
        if key in m and not isinstance(m[key], typ):
            raise StudyFolderError(f"{p}: manifest entry {key!r} is not a {typ.__name__}; "
                                   "the folder's manifest was damaged")
    rng = m["range"]
    if not (len(rng) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in rng)
            and 0 <= rng[0] < rng[1]):
        raise StudyFolderError(f"{p}: manifest entry 'range' must be two integers lo < hi "
                               f"from 0, got {rng!r}; the folder's manifest was damaged")
    if _hash_json(m["config"]) != m["study_hash"]:
        raise StudyFolderError(
            f"{p}: the manifest's config does not match the study it was created for "
            "(study_hash); it was edited by hand. Run the intended study in a new folder")
    for name, c in m["chunks"].items():
        ok = (isinstance(c, dict) and isinstance(c.get("task"), str)
              and isinstance(c.get("sha256"), str)
              and all(isinstance(c.get(k), int) and not isinstance(c.get(k), bool)
                      for k in ("lo", "hi"))
              and 0 <= c["lo"] < c["hi"])
        if not ok:
            raise StudyFolderError(f"{p}: chunk entry {name!r} is malformed ({c!r}); the "
                                   "folder's manifest was damaged")


def data_unchanged(out: str | os.PathLike, study: Study) -> None:
    """Refuse to report on a study folder whose data file is gone or changed since the
    study ran (a summary recomputes the budgets and item counts from the data).

    Raises:
      StudyFolderError: naming the data file and what happened to it.
    """
    out = Path(out)
    m = _read_manifest(out)
    if m is None or study.data is None or study.data.synthetic is not None:
        return
    where = study.data.npz or study.data.dataset
    try:
        fp = _fingerprint(study)
    except OSError as e:
        raise StudyFolderError(
            f"{out}: its data {where!r} cannot be read ({e.strerror or e}); the report needs "
            "it for the budgets (load_results reads the folder without it)") from None
    if m.get("data_sha256") is not None and fp != m["data_sha256"]:
        raise StudyFolderError(
            f"{out}: its data {where!r} changed since the study ran (checksum "
            f"{str(m['data_sha256'])[:12]}... then, {str(fp)[:12]}... now); a report would "
            "mix the old results with the new data's budgets")


def _not_a_start(out: Path) -> str:
    """Why ``out`` cannot become a new study's folder (``_can_start_in`` said no)."""
    if out.exists() and not out.is_dir():
        return (f"{out} is a file, not a folder: refusing to write a study there; choose a "
                "new or empty folder with --out")
    return (f"{out} is not empty and holds no {MANIFEST_FILE}: refusing to write a study "
            "there; choose a new or empty folder with --out")


def _can_start_in(out: Path, cfg: dict) -> bool:
    """Whether ``out`` (holding no manifest) may become this study's folder: it does not
    exist, is empty, or holds only what a run killed while creating it leaves behind
    (half-written ``.tmp-*`` files, this very study's ``study.json``)."""
    if not out.exists():
        return True
    if not out.is_dir():
        return False
    for entry in out.iterdir():
        if entry.name.startswith(".tmp-"):
            continue
        if entry.name == STUDY_FILE and entry.is_file():
            try:
                if json.loads(entry.read_text()) == cfg:
                    continue
            except (OSError, ValueError):
                pass
        return False
    return True


@contextlib.contextmanager
def _folder_lock(out: Path):
    """Hold an exclusive ``flock`` on the folder ``out`` itself (writer process, POSIX)
    while a run writes it; a folder held by another live process is refused with its
    name. Locking the directory leaves no file behind, so a refused run changes
    nothing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: runs unlocked
        fcntl = None
    if fcntl is None or not _is_writer():
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        for wait in (0.02, 0.05, 0.1, 0.2, None):
            # (a reader's probe of the lock, _being_written, holds it for microseconds:
            # a few short waits before calling the folder taken)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if wait is None:
                    raise StudyFolderError(
                        f"{out} is being written by another process (it holds the folder's "
                        "lock); wait for that run to finish, then resume, or use another "
                        "--out folder") from None
                time.sleep(wait)
            except OSError:  # a mount without flock (Lustre without -o flock): unlocked
                break
        yield
    finally:
        os.close(fd)  # releases the lock


def _being_written(folder: Path) -> bool:
    """Whether another process holds ``folder``'s run lock (:func:`_folder_lock`): a run
    is writing it now. Probed with a shared lock taken and dropped at once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: runs are unlocked
        return False
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a mount without flock (Lustre without -o flock): runs go unlocked
        return False
    finally:
        os.close(fd)  # (releases the probe's lock, if taken)
    return False


def _not_a_study(out: Path) -> StudyFolderError:
    """The error for a folder without a manifest, saying which case it is."""
    if not out.exists():
        return StudyFolderError(f"{out} does not exist: not a study folder")
    if not out.is_dir():
        return StudyFolderError(f"{out} is a file, not a study folder")
    if _being_written(out):
        return StudyFolderError(
            f"{out} holds no {MANIFEST_FILE} yet: a run is starting there (it holds the "
            "folder's lock); not a study folder until it has written its manifest")
    return StudyFolderError(f"{out} holds no {MANIFEST_FILE}: not a study folder")


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff_keys(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else k)
        return out
    return [] if a == b else [prefix or "<root>"]


def _describe_diff(old: dict, new: dict, where: tuple[str, str] = ("there", "here")) -> str:
    keys = _diff_keys(old, new)
    parts = []
    for k in keys[:5]:
        ov, nv = old, new
        for part in k.split("."):
            ov = ov.get(part) if isinstance(ov, dict) else None
            nv = nv.get(part) if isinstance(nv, dict) else None
        parts.append(f"{k!r} is {json.dumps(ov)} {where[0]} but {json.dumps(nv)} {where[1]}")
    return "; ".join(parts)


def _fingerprint(study: Study) -> str | None:
    return None if study.data is None else study.data.fingerprint()


def _data_location(study: Study) -> str | None:
    """The absolute path of the study's ``.npz`` data (recorded in a new folder)."""
    data = getattr(study, "data", None)
    if data is None or data.npz is None:
        return None
    return str(data._file().resolve())


def _recorded_locations(manifest: Mapping[str, Any]) -> list[str]:
    """Where the folder's data file was, as recorded (a merged folder: every part's)."""
    out = list(manifest.get("data_locations") or [])
    if manifest.get("data_location") and manifest["data_location"] not in out:
        out.insert(0, manifest["data_location"])
    return out


#: How many folders above a study folder a relative ``.npz`` is looked for (a tree moved
#: whole: ``runs/s`` and ``data/x.npz`` copied together to a node's scratch).
_UP = 3


def _located(study: Study, manifest: Mapping[str, Any], folder: Path | None = None) -> Study:
    """``study`` reading a relative ``.npz`` from the first of (the path from the current
    directory, the folder's recorded locations, the path from each of the ``_UP``
    folders above ``folder``) whose checksum is the one recorded; when none matches,
    the first that exists (the checksum check then refuses it by name). So a report or
    resume works from any directory and after the tree was moved, and a same-named
    file elsewhere is not taken for the data."""
    data = getattr(study, "data", None)
    if data is None or data.npz is None or Path(data.npz).is_absolute():
        return study
    here = Path(data.npz)
    found = [p for p in [here] + [Path(w) for w in _recorded_locations(manifest)] if p.is_file()]
    want = manifest.get("data_sha256")
    sums: dict[Path, str] = {}  # (each file read once: data files can be large)

    def matches(p: Path) -> bool:
        if p not in sums:
            sums[p] = _sha256(p)
        return sums[p] == want

    if folder is not None and want and not any(matches(p) for p in found):
        # (as written and resolved: a folder given as ../s has the parents of where it
        # is; one reached through a symbolic link, those of the link's tree too)
        f = Path(folder)
        ups = list(f.absolute().parents)[:_UP] if ".." not in f.parts else []
        ups += [u for u in list(f.resolve().parents)[:_UP] if u not in ups]
        for up in ups:
            if (up / here).is_file() and matches(up / here):
                found.append(up / here)
                break
    if not found:
        return study
    pick = next((p for p in found if want and matches(p)), found[0])
    if pick == here:
        return study
    return dataclasses.replace(study, data=dataclasses.replace(data, location=str(pick)))


def _data_found(study: Study, manifest: Mapping[str, Any], folder: Path) -> None:
    """Refuse a study whose ``.npz`` data is nowhere :func:`_located` looks, naming the
    places it looked (a moved folder used to get only the path it names)."""
    data = getattr(study, "data", None)
    if data is None or data.npz is None or data._file().is_file():
        return
    where = ""
    if not Path(data.npz).is_absolute():  # (an absolute path is looked for there only)
        rec = _recorded_locations(manifest)
        where = (f" (looked from the current directory {os.getcwd()}"
                 + (f", at the location recorded in {folder}: {', '.join(rec)}" if rec else "")
                 + f", and from the {_UP} folders above {folder}); run from the directory "
                 "the path is relative to, or")
    raise StudyConfigError(
        "data.npz", f"no such file: {data.npz}{where}"
        + ("; " if not where else " ") + "put the data file (the same bytes) where the "
        "path finds it")


def _setup_changes(study: Study, since: int, until: int = SETUP) -> dict[str, str]:
    """The policies of ``study`` whose numbers moved between set-up ``since`` and
    ``until`` (default :data:`SETUP`), each with what moved. Set-up 2: prediction
    policies that refit and leave ``num_newton``, or on real data ``rho``, unset.
    Set-up 3: every policy whose study computes the empirical-Bernstein sequence (its
    bounds, and ``pulse``'s index and the stop that use them). Set-up 4: ``naive``
    (recommends by its own pooled estimate) and ``sysrs`` (one run per budget, each
    planned for its budget; enough loop steps at batch sizes above 1). Set-up 5: an
    anchor study's every ``k`` task when it runs a named method of
    ``jaxeval.anchors.HALVES_METHODS`` (their intervals: calibrated on validation
    halves now). Set-up 6: the same for a task that runs an MLP-trained method
    (:data:`_HALVED_AT_6`). Set-up 7: the same for a task that runs ``auto`` on data
    where it chooses on validation models (:func:`_auto_on_validation`). Set-up 8: such a
    task again (``auto``'s candidates there: ``greedy_mlp_ens`` instead of
    ``greedy_mlp``)."""
    if since >= until:
        return {}
    if isinstance(study, AnchorStudy):
        from jaxeval.anchors import HALVES_METHODS

        named = []
        if since < 5 <= until:
            named = [m for m in study.methods
                     if m in HALVES_METHODS and m not in _HALVED_AT_6]
        if since < 6 <= until:
            named += [m for m in study.methods if m in _HALVED_AT_6 and m not in named]
        auto_val = None  # loaded at most once, and only when a change could concern auto
        if since < 7 <= until and "auto" in study.methods:
            auto_val = _auto_on_validation(study)
            if auto_val:
                named.append("auto")
        whys = []
        if named:
            whys.append(f"intervals of {', '.join(named)}: calibrated on all validation "
                        "models then, on validation halves now")
        if since < 8 <= until and "auto" in study.methods:
            if auto_val is None:
                auto_val = _auto_on_validation(study)
            if auto_val:
                whys.append("auto's candidates on validation models: one greedy_mlp then, "
                            "the ensemble greedy_mlp_ens now (its choice, MAE and interval)")
        if whys:
            why = "; ".join(whys)
            return {f"k{k}": why for k in study.k}
        return {}
    if not isinstance(study, IdentificationStudy):
        return {}
    from jaxeval import _policies

    out = {}
    for spec in study.policies:
        st = dict(spec.settings)
        moved = []
        up = st.get("use_predictions")
        refits = (spec.policy in _policies.PREDICTION_POLICIES if up is None else up) and st.get(
            "refit", True)  # rho and num_newton act only in the refit
        if since < 2 <= until and refits:
            if study.data.synthetic is None and "rho" not in st:
                moved.append("online prior rho: the fit's rho_u (1.0) then, online_rho (0.5) now")
            if "num_newton" not in st:
                moved.append("Newton steps per refit: 2 then, 1 now")
        if since < 3 <= until and "eb" in study.cs_kinds:
            moved.append("empirical-Bernstein bounds: a penalty over-charged then (wider), "
                         "exact now")
        if since < 4 <= until and spec.policy == "naive":
            moved.append("recommendation: argmax of the difference estimate then, of the "
                         "naive pooled estimate now")
        if since < 4 <= until and spec.policy == "sysrs":
            moved.append("one run planned for the largest budget, read at every checkpoint, "
                         "then; one run per budget, planned for it, now")
        if moved:
            out[spec.name] = "; ".join(moved)
    return out


def _auto_on_validation(study: AnchorStudy) -> bool:
    """Whether ``auto`` chooses on validation models in ``study`` (its protocol splits
    hold at least ``Settings.auto_cv_below`` of them), where set-up 7 moved its
    interval to validation halves and set-up 8 its candidates. Data that cannot be
    loaded counts as yes: a task is then not extended or merged across the change
    rather than perhaps mixed."""
    from jaxeval.anchors import Settings

    try:
        sm = study.data.load()  # duplicates removed
        n_val = sm.protocol_split(study.first_seed).validation.n_models
    except (OSError, ValueError):
        return True
    return n_val >= Settings().auto_cv_below


def _chunk_setup(info: Mapping[str, Any]) -> int:
    """The set-up a chunk was computed with (entries written before :data:`SETUP`: 1)."""
    return int(info.get("setup", 1))


def _other_setups(study: Study, chunks: Mapping[str, Any], tasks) -> dict[str, list[int]]:
    """The tasks among ``tasks`` that hold chunks (in ``chunks``, a manifest's entries)
    of another set-up than :data:`SETUP` whose change moved their numbers (a newer
    set-up always counts)."""
    out = {}
    for task in tasks:
        have = {_chunk_setup(c) for c in chunks.values() if c["task"] == task}
        moved = sorted(v for v in have - {SETUP} if v > SETUP or task in _setup_changes(study, v))
        if moved:
            out[task] = moved
    return out


def _check_setup(study: Study, manifest: dict, where: Path, pending: Sequence[str]) -> None:
    """Refuse to add chunks to a task whose finished chunks were computed with another
    set-up where that changes its numbers (``pending``: tasks with units left)."""
    for task, other in _other_setups(study, manifest["chunks"], pending).items():
        if max(other) > SETUP:
            raise StudyFolderError(
                f"{where}: task {task!r} has chunks of study set-up {max(other)} from a newer "
                f"jaxeval (this one writes set-up {SETUP}); continue it with that jaxeval"
            )
        raise StudyFolderError(
            f"{where}: task {task!r} has chunks computed by an earlier jaxeval (study "
            f"set-up {other[0]}, now {SETUP}: {_setup_changes(study, other[0])[task]}); "
            "adding chunks would mix the two. The folder is left as it is (load_results "
            "reads it while its chunks are intact); run the study again in a new folder"
        )


def _recompute_hint(out: Path, study: Study, chunks: dict, bad: list[str]) -> str:
    """What to do about corrupt chunks: resume, unless :func:`_check_setup` would refuse
    it (their task keeps intact chunks of another set-up)."""
    intact = {n: c for n, c in chunks.items() if n not in bad}
    stuck = sorted(_other_setups(study, intact, {chunks[b]["task"] for b in bad}))
    if stuck:
        return (f"task(s) {stuck} keep chunks of another study set-up, which this jaxeval "
                "cannot extend consistently: run the study again in a new folder")
    return f"run `jaxeval resume {out}` to recompute them"


def _is_writer() -> bool:
    import jax

    return jax.process_index() == 0


def _open_folder(study: Study, out: Path, rng: tuple[int, int]) -> dict:
    """Create the folder, or check that it holds this very study; returns the manifest."""
    cfg = study.to_dict()
    manifest = _read_manifest(out) if out.exists() else None
    if manifest is None:
        if not _can_start_in(out, cfg):
            raise StudyFolderError(_not_a_start(out))
        manifest = {
            "format": FORMAT,
            "study_hash": _hash_json(cfg),
            "results_hash": _hash_json(results_key(study)),
            "config": cfg,
            "range": list(rng),
            "data_sha256": _fingerprint(study),
            "data_location": _data_location(study),
            "versions": _versions(),
            "numerics": _numerics(),
            "chunks": {},
            "complete": False,
            "task_names": [t.name for t in study.tasks()],
        }
        if (target := _target_sha(study)) is not None:
            manifest["target_sha256"] = target
        if _is_writer():
            # the manifest first: a folder holding it is a study folder that `resume`
            # continues, whatever moment a kill comes at (study.json is a copy for people)
            out.mkdir(parents=True, exist_ok=True)
            _atomic_write_json(out / MANIFEST_FILE, manifest)
            _atomic_write_json(out / STUDY_FILE, cfg)
        return manifest
    if _is_writer() and not (out / STUDY_FILE).exists():  # killed between the two writes
        _atomic_write_json(out / STUDY_FILE, manifest["config"])
    elif (out / STUDY_FILE).exists():
        try:
            copy = json.loads((out / STUDY_FILE).read_text())
        except (OSError, ValueError):  # (unreadable, not UTF-8, not JSON)
            copy = None
        if copy != manifest["config"]:  # an edit would be ignored without a word
            what = ("is not the JSON the folder wrote" if not isinstance(copy, dict) else
                    _describe_diff(manifest["config"], copy).replace(
                        " there but ", f" in {MANIFEST_FILE} but ").replace(" here", " in it"))
            raise StudyFolderError(
                f"{out / STUDY_FILE}, the copy of the folder's study for people, was edited "
                f"({what}); the folder continues only the study in its {MANIFEST_FILE}. "
                f"Nothing was changed: restore {STUDY_FILE} (deleting it is enough: it is "
                "written again), or run the edited study in a new --out folder")
    if _diff_keys(manifest["config"], cfg) == ["chunk_size"]:
        raise StudyFolderError(
            f"{out} holds this study run with another chunk layout: "
            f"{_describe_diff(manifest['config'], cfg)}. chunk_size changes no result, "
            "but the folder's chunks are laid out by it; nothing was overwritten: "
            f"continue it as it is (`jaxeval resume {out}`), or use another --out folder"
        )
    if manifest["config"] != cfg:
        held = manifest["config"].get("kind")
        what = (_describe_diff(manifest["config"], cfg) if held == cfg["kind"] else
                f"it is {_a(held)} study, not {_a(cfg['kind'])} one")
        raise StudyFolderError(
            f"{out} holds the results of another study ({manifest['config'].get('name')!r}): "
            f"{what}. Nothing was overwritten; use another "
            "--out folder, or `jaxeval resume` to continue the study that is there"
        )
    if list(manifest["range"]) != list(rng):
        raise StudyFolderError(
            f"{out} holds replicates {manifest['range'][0]}:{manifest['range'][1]} of this study, "
            f"not the requested {rng[0]}:{rng[1]}; use another --out folder per range"
        )
    diff = _numerics_diff(manifest.get("numerics"), _numerics())
    if diff and manifest["chunks"]:
        raise StudyFolderError(
            f"{out}: its finished chunks were computed under other JAX settings ({diff}), "
            "which draw other random streams: continuing would mix them. Nothing was "
            "changed; run with the folder's settings, or use a new --out folder"
        )
    if diff:  # nothing computed yet: the folder takes this process's settings
        manifest["numerics"] = _numerics()
    target, held = _target_sha(study), manifest.get("target_sha256")
    if target is not None and held is not None and target != held and manifest["chunks"]:
        raise StudyFolderError(_target_changed(out, study, held, target))
    if target is not None and not manifest["chunks"]:  # (unknown for older chunks)
        manifest["target_sha256"] = target
    fp = _fingerprint(study)
    if manifest.get("data_sha256") != fp:
        raise StudyFolderError(
            f"{out}: the data file changed since the study started (checksum "
            f"{str(manifest.get('data_sha256'))[:12]}... there, {str(fp)[:12]}... now)"
        )
    return manifest


def _a(kind: Any) -> str:
    """``"an identification"``, ``"a replicates"``: a study kind with its article."""
    return f"{'an' if str(kind)[:1] in 'aeiou' else 'a'} {kind}"


def _verify_chunks(out: Path, manifest: dict) -> list[str]:
    """Drop the chunks whose files are missing or corrupt from ``manifest`` (in memory;
    the files are left alone) and return their names."""
    bad = []
    for name, info in list(manifest["chunks"].items()):
        p = out / name
        if not p.is_file() or _sha256(p) != info["sha256"]:
            bad.append(name)
            del manifest["chunks"][name]
    return bad


def _covered(manifest: dict, task: str) -> list[tuple[int, int]]:
    spans = sorted(
        (int(c["lo"]), int(c["hi"])) for c in manifest["chunks"].values() if c["task"] == task
    )
    return spans


def _todo_ranges(
    task: Task, covered: list[tuple[int, int]], rng: tuple[int, int]
) -> list[tuple[int, int]]:
    """Chunk-aligned ranges of ``rng`` not yet covered."""
    lo, hi = max(rng[0], 0), min(rng[1], task.n)
    free = []
    pos = lo
    for a, b in covered:
        if b <= pos or a >= hi:
            continue
        if a > pos:
            free.append((pos, min(a, hi)))
        pos = max(pos, b)
    if pos < hi:
        free.append((pos, hi))
    cs = task.chunk_size() if callable(task.chunk_size) else task.chunk_size
    todo = []
    for a, b in free:
        x = a
        while x < b:
            y = min((x // cs + 1) * cs, b)
            todo.append((x, y))
            x = y
    return todo


def _broadcast_todo(todo: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Under jax.distributed, every process follows process 0's list of chunks."""
    import jax

    if jax.process_count() == 1:
        return todo
    from jax.experimental import multihost_utils

    n = np.asarray(multihost_utils.broadcast_one_to_all(np.int64(len(todo))))
    arr = np.zeros((int(n), 2), np.int64)
    if jax.process_index() == 0 and todo:
        arr[:] = np.asarray(todo, np.int64)
    arr = np.asarray(multihost_utils.broadcast_one_to_all(arr))
    return [(int(a), int(b)) for a, b in arr]


def run_study(
    study: Study,
    out: str | os.PathLike,
    *,
    replicate_range: tuple[int, int] | None = None,
    progress: bool = True,
    problem_from: str | os.PathLike | None = None,
) -> Path:
    """Run (or continue) a study into folder ``out``; returns the folder.

    Finished chunks already in ``out`` are kept (after checking their checksums),
    so calling this again after an interruption continues the study. A folder
    holding a different study, or a different replicate range, is refused.

    Args:
      study: an :class:`IdentificationStudy`, :class:`AnchorStudy` or
        :class:`ReplicateStudy`.
      out: the output folder (created if absent).
      replicate_range: ``(lo, hi)`` to compute only units ``lo..hi-1`` (one job
        of a cluster array; join the folders with :func:`merge_studies`).
      progress: one line per chunk on stderr.
      problem_from: a study folder (or its ``problem.npz``) whose saved factorization
        this run uses instead of fitting its own. A real-data study with prediction
        policies saves its fit in its folder, and resumes reuse it; the fit's last bits
        depend on the CPU threads and devices, so range jobs on unlike machines should
        all take the first job's fit (:func:`merge_studies` refuses folders whose fits
        differ).

    Example:
      Two jobs of a cluster array, each computing half of the replicates, then joined:

      >>> import pathlib, tempfile
      >>> from jaxeval import (load_results, merge_studies, resume_study, run_study,
      ...                      study_from_dict, study_status)
      >>> study = study_from_dict({"kind": "identification", "n_replicates": 64,
      ...     "num_arms": 4, "chunk_size": 32, "policies": ["uniform"],
      ...     "data": {"synthetic": {"n_items": 100}}})
      >>> tmp = pathlib.Path(tempfile.mkdtemp())
      >>> a = run_study(study, tmp / "a", replicate_range=(0, 32), progress=False)
      >>> b = run_study(study, tmp / "b", replicate_range=(32, 64), progress=False)
      >>> study_status(a)["range_complete"], study_status(a)["complete"]
      (True, False)
      >>> both = merge_studies([a, b], tmp / "all")
      >>> same, results = load_results(both)
      >>> same == study, results["uniform"]["checkpoints.recommended"].shape
      (True, (64, 13))
      >>> resume_study(both, progress=False) == both  # complete: nothing left to run
      True
    """
    out = Path(out)
    if not isinstance(study, tuple(_KINDS.values())):
        raise TypeError(f"study: expected one of {[c.__name__ for c in _KINDS.values()]}, got "
                        f"{type(study).__name__}")
    # (a study built in code had the checks of one read from JSON when it was made:
    # _checked_in_code)
    study.check()  # (on the study itself: its data may be read from its folder's record)
    n = study.n_units
    if replicate_range is not None and (
            isinstance(replicate_range, (str, bytes)) or len(replicate_range) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                       for v in replicate_range)):
        raise ValueError(f"replicate_range: expected two integers (lo, hi), got "
                         f"{replicate_range!r}")
    rng = (0, n) if replicate_range is None else tuple(int(v) for v in replicate_range)
    if not (0 <= rng[0] < rng[1] <= n):
        raise ValueError(
            f"replicate_range must satisfy 0 <= lo < hi <= {n} (the study's units), got {rng}"
        )
    if problem_from is not None:
        if not _needs_fit(study):
            raise ValueError("problem_from: this study fits no factorization (it is not a "
                             "real-data identification study with a prediction policy)")
        src = Path(problem_from)
        if src.is_dir() and not (src / PROBLEM_FILE).exists():
            raise StudyFolderError(
                f"problem_from: {src} holds no saved factorization ({PROBLEM_FILE}): its "
                "study fits none (no prediction policy on real data) or has not started; "
                "give the folder of a study that fitted one")
        given = _read_fit(src / PROBLEM_FILE if src.is_dir() else src, study)
        held = (_read_manifest(out) or {}).get("problem_sha256")
        if held and held != _fit_sha(given):
            raise StudyFolderError(
                f"{out} already holds chunks of another factorization than the one in "
                f"{problem_from} (problem_from); nothing was changed")
        _install_fit(study, given)
    if _read_manifest(out) is None:
        # a new folder: everything the data can refuse is checked before it is made
        # and before any task computes (a resumed folder was checked when created);
        # the cheap refusal of a folder holding something else comes first
        if not _can_start_in(out, study.to_dict()):
            raise StudyFolderError(_not_a_start(out))
        _preflight(study)
    with _folder_lock(out):
        _run_locked(study, out, rng, progress)  # type: ignore[arg-type]
    return out


def _check_writable(folder: Path) -> None:
    """Refuse, before anything is computed, a folder this process cannot write (a
    read-only mount, an immutable folder, another user's): the first chunk would be
    computed and then lost."""
    from jaxeval._data import cannot_write

    try:
        folder.mkdir(parents=True, exist_ok=True)
        why = cannot_write(folder)
    except OSError as e:
        why = e.strerror or str(e)
    if why:
        raise StudyFolderError(
            f"{folder}: cannot write there ({why}); nothing was computed or changed: make "
            "it writable, or run the study in a writable folder")


def _run_locked(study: Study, out: Path, rng: tuple[int, int], progress: bool) -> None:
    """:func:`run_study`'s work, with ``out`` held by this process."""
    if _is_writer():
        _check_writable(out)
    manifest = _open_folder(study, out, rng)
    # corrupt chunks are dropped from the manifest in memory, deleted only once the
    # set-up check has passed (a refusal leaves the folder as it was)
    bad = _verify_chunks(out, manifest)
    tasks = study.tasks()
    todos = [_broadcast_todo(_todo_ranges(t, _covered(manifest, t.name), rng)) for t in tasks]
    _check_setup(study, manifest, out, [t.name for t, todo in zip(tasks, todos) if todo])
    if _is_writer():  # before the factorization is fitted and pinned, or a chunk computed
        for task, todo in zip(tasks, todos):
            if todo:
                _check_writable(out / "chunks" / task.name)
    if any(todos):  # the factorization the chunks use (may refuse: nothing changed yet)
        _pin_fit(study, out, manifest)
    if bad:
        warnings.warn(
            f"{out}: {len(bad)} chunk file(s) missing or failing their checksum will be "
            f"recomputed: {bad[:3]}",
            stacklevel=2,
        )
    if _is_writer():
        if progress and not any(todos):
            print(f"[jaxeval] {study.name}: every unit of {out}'s range {rng[0]}:{rng[1]} is "
                  "already computed; nothing to do", file=sys.stderr, flush=True)
    if _is_writer():  # corrupt chunks (recomputed below) and half-written files of a killed run
        for name in bad:
            (out / name).unlink(missing_ok=True)
        for tmp in out.rglob(".tmp-*"):
            tmp.unlink(missing_ok=True)
    for task, todo in zip(tasks, todos):
        if not todo:
            continue
        if progress and _is_writer():
            print(
                f"[jaxeval] {study.name}: task {task.name!r}: {sum(b - a for a, b in todo)} "
                f"of {rng[1] - rng[0]} units to compute in {len(todo)} chunk(s)",
                file=sys.stderr,
                flush=True,
            )
        if _is_writer():
            (out / "chunks" / task.name).mkdir(parents=True, exist_ok=True)
        for lo, hi, arrays in task.compute(todo, progress):
            if not _is_writer():
                continue
            name = _chunk_name(task.name, lo, hi)
            sha = _write_chunk(out / name, arrays)
            manifest["chunks"][name] = {"task": task.name, "lo": lo, "hi": hi, "sha256": sha,
                                        "setup": SETUP}
            _atomic_write_json(out / MANIFEST_FILE, manifest)
    if _is_writer():
        # as study_status: "range_complete" = this folder's range is done, "complete" =
        # every unit of the study is here (a range job's folder is complete only after a
        # merge; "complete" once meant the range, which misled pollers of array jobs)
        manifest["range_complete"] = all(
            not _todo_ranges(t, _covered(manifest, t.name), rng) for t in tasks
        )
        manifest["complete"] = all(
            not _gaps(_covered(manifest, t.name), 0, study.n_units) for t in tasks
        )
        manifest["task_names"] = [t.name for t in tasks]
        _atomic_write_json(out / MANIFEST_FILE, manifest)


def _preflight(study: Study) -> None:
    """Data-dependent checks of a study, run before its folder is created.

    Identification: the data load, the training / candidate split, ``num_arms``, the
    budgets, every policy's kernel configuration and (for policies with predictions) the
    factorization, whose fit is cached for the tasks. Anchors: the data load, every
    ``k`` against the number of items, and the first split. So a setting the data cannot
    satisfy is refused with its name before any chunk is computed, and the folder is not
    left holding a study that can never finish.
    """
    if isinstance(study, IdentificationStudy):
        import jax

        impl = str(jax.random.key_impl(jax.random.key(0)))
        if impl != "threefry2x32":
            raise StudyConfigError(
                "seed", f"identification studies draw their item orders from threefry2x32 "
                f"keys; this process's default PRNG is {impl!r} (set by "
                f"{_NUMERICS_HOW['prng_impl']})")
        study_budgets(study)
        from jaxeval._simulate import no_effect, unused_settings

        synthetic = study.data.synthetic is not None
        later = []  # said once every policy's problem passed (a refusal comes first)
        for i, spec in enumerate(study.policies):
            st, preds = dict(spec.settings), _uses_predictions(spec)
            unused = unused_settings(
                spec.policy, preds, "budget", study.corruption, synthetic,
                **{k: st[k] for k in ("a", "scale", "lam0", "shrink", "rho", "num_newton",
                                      "refit") if k in st},
            )
            if unused:
                warnings.warn(
                    f"policies[{i}].settings: {no_effect(unused, spec.policy)} "
                    f"(corruption {study.corruption!r}); the study runs as with the "
                    "defaults", stacklevel=3,
                )
            identification_problem(study, spec)
            # the study-wide settings this policy cannot use (as simulate_identification
            # warns or refuses; a study mixing policies may use them for others)
            top = [] if synthetic else [
                u for u in unused_settings(spec.policy, preds, "budget", study.corruption,
                                           False, rank=study.rank, fit_steps=study.fit_steps)
                if u.split("=")[0] in ("rank", "fit_steps")]
            if study.corruption != "none" and not preds:
                top.append(f"corruption={study.corruption!r}")
            if top:
                later.append(f"{no_effect(top, spec.policy)} (policies[{i}] makes no "
                             "predictions); the study records them as given")
            if spec.policy == "sysrs" and st.get("synchronized") is False:
                later.append(
                    f"policies[{i}].settings: synchronized=False gives each arm its own item "
                    "order; SySRs is defined by one order shared by all arms, so these are "
                    "not SySRs' results")
        for msg in later:
            warnings.warn(msg, stacklevel=3)
    elif isinstance(study, ReplicateStudy):
        _check_target_output(study)
    elif isinstance(study, AnchorStudy):
        sm = study.data.load()
        for k in study.k:
            if k >= sm.n_items:
                raise StudyConfigError("k", f"k={k} must be below the {sm.n_items} items")
        try:
            sm.drop_duplicates().protocol_split(study.first_seed)
        except ValueError as e:
            raise StudyConfigError("data", str(e)) from None


def _check_target_output(study: ReplicateStudy) -> None:
    """Trace a replicates study's target on one replicate's key (shapes only, nothing
    computed), so that a function JAX cannot trace, or one that returns no array, is
    refused by the study's key ``target`` instead of failing inside the runner."""
    import jax

    from jaxeval._runner import as_key

    fn = study.function()
    try:
        out = jax.eval_shape(fn, jax.random.fold_in(as_key(study.seed), 0))
    except Exception as e:  # (the target's own error: its type and first line kept)
        first = next((ln for ln in str(e).splitlines() if ln.strip()), "")
        raise StudyConfigError(
            "target", f"{study.target!r} cannot be traced by JAX on one replicate's key "
            f"({type(e).__name__}: {first[:300]}); a replicate function maps a PRNG key to "
            "a pytree of arrays whose shapes do not depend on the values drawn") from e
    if not jax.tree.leaves(out):
        raise StudyConfigError(
            "target", f"{study.target!r} returned no array ({out!r}): return the replicate's "
            "results, e.g. {'estimate': x, 'covered': lo <= theta}")


def resume_study(out: str | os.PathLike, *, progress: bool = True) -> Path:
    """Continue the study held in folder ``out`` (its own ``study.json`` and range).

    Chunks already finished are checked and kept; see :func:`run_study` for an example.
    """
    out = Path(out)
    manifest = _read_manifest(out)
    if manifest is None:
        raise _not_a_study(out)
    study = _located(study_from_dict(manifest["config"], check=False), manifest, out)
    _data_found(study, manifest, out)
    return run_study(study, out, replicate_range=tuple(manifest["range"]), progress=progress)


def extend_study(out: str | os.PathLike, n_units: int) -> Path:
    """Give the study in folder ``out`` more units (replicates, or an anchor study's
    repetitions); :func:`resume_study` then computes only the new ones.

    A unit's numbers do not depend on how many units the study has (replicate ``i``
    draws from ``fold_in(key(seed), i)`` in the same vmapped lane; anchor repetition
    ``r`` splits with seed ``first_seed + r``), so the finished chunks are kept as they
    are and the folder becomes the study run with ``n_units`` from the start: its rows
    are bit for bit that study's. The folder's definition (``n_replicates``, or
    ``n_seeds``) is rewritten and the change recorded in the manifest's ``"extended"``;
    nothing is computed here. The folder is checked first as a resume checks it (its
    ``study.json``, data checksum, JAX settings, a ``replicates`` target's source, chunks
    of an earlier jaxeval's set-up), and a folder that would be refused is left as it
    was.

    The folder must hold the whole study (a run without a range, or a merge). To extend
    a study computed by array jobs, extend its merged folder, then resume it, or run the
    new units as range jobs of the larger study (its definition: the folder's
    ``study.json``) and merge them with it.

    Args:
      out: the study folder.
      n_units: the new number of units, more than the folder's.

    Returns:
      ``out``.

    Example:
      >>> import pathlib, tempfile
      >>> from jaxeval import (extend_study, load_results, resume_study, run_study,
      ...                      study_from_dict, study_status)
      >>> study = study_from_dict({"kind": "identification", "n_replicates": 32,
      ...     "num_arms": 4, "chunk_size": 32, "policies": ["uniform"],
      ...     "data": {"synthetic": {"n_items": 100}}})
      >>> folder = run_study(study, pathlib.Path(tempfile.mkdtemp()) / "s", progress=False)
      >>> first = load_results(folder)[1]["uniform"]["checkpoints.recommended"]
      >>> _ = extend_study(folder, 64)
      >>> study_status(folder)["done"], study_status(folder)["complete"]
      ({'uniform': 32}, False)
      >>> _ = resume_study(folder, progress=False)  # computes replicates 32..63 only
      >>> rows = load_results(folder)[1]["uniform"]["checkpoints.recommended"]
      >>> rows.shape, bool((rows[:32] == first).all())
      ((64, 13), True)
    """
    out = Path(out)
    manifest = _read_manifest(out)
    if manifest is None:
        raise _not_a_study(out)
    old = _located(study_from_dict(manifest["config"], check=False), manifest, out)
    field = "n_seeds" if isinstance(old, AnchorStudy) else "n_replicates"
    if isinstance(n_units, bool) or not isinstance(n_units, (int, np.integer)):
        raise TypeError(f"n_units: expected an integer (the new {field}), got {n_units!r}")
    n_units = int(n_units)
    have = old.n_units
    if n_units <= have:
        raise ValueError(
            f"n_units: expected more than the {have} units ({field}) the study in {out} has, "
            f"got {n_units}" + ("; resume_study (`jaxeval resume`) computes the units it "
                                "still lacks" if n_units == have else
                                f"; the first {n_units} rows of load_results({str(out)!r}) "
                                "are the smaller study's numbers"))
    lo, hi = manifest["range"]
    if (lo, hi) != (0, have):
        raise StudyFolderError(
            f"{out} holds the range job for units {lo}:{hi} of {have}; extend the folder "
            "that holds the whole study (`jaxeval merge` the ranges' folders first)")
    cfg = dict(manifest["config"], **{field: n_units})
    new = study_from_dict(cfg, check=False)  # (a too-large n refused)
    if getattr(old, "data", None) is not None:  # (the same data, already located)
        new = dataclasses.replace(new, data=old.data)
    with _folder_lock(out):
        if _is_writer():
            _check_writable(out)
        # every refusal a resume would make comes before the folder is changed (its
        # data first: a missing file is named, as a resume names it)
        _data_found(old, manifest, out)
        old.check()
        _open_folder(old, out, (0, have))
        new.check()
        # (chunks of an earlier set-up cannot be extended: the folder would never finish)
        _check_setup(new, manifest, out, [t.name for t in new.tasks()])
        manifest = _read_manifest(out)  # (as written: _open_folder may restore study.json)
        cfg = new.to_dict()
        manifest.update(
            config=cfg, study_hash=_hash_json(cfg), results_hash=_hash_json(results_key(new)),
            range=[0, n_units], complete=False, range_complete=False,
            extended=list(manifest.get("extended") or []) + [{"from": have, "to": n_units}],
        )
        if _is_writer():
            # study.json goes first: a kill before the manifest is written leaves the
            # folder as it was (the copy is written again), after it the larger study
            (out / STUDY_FILE).unlink(missing_ok=True)
            _atomic_write_json(out / MANIFEST_FILE, manifest)
            _atomic_write_json(out / STUDY_FILE, cfg)
    return out


def study_status(out: str | os.PathLike, *, verify: bool = False) -> dict:
    """Progress of the study in ``out``.

    Returns a dict with ``done`` (units finished per task), ``range`` (the units
    this folder is responsible for), ``todo`` (the ``[lo, hi]`` spans of that range
    no chunk holds, per task), ``range_complete`` (that range is done) and
    ``complete`` (every unit of the whole study is there: ready for reports), counting
    only chunks whose files exist (``missing_chunk_files`` lists the manifest's others).
    Checksums are verified when the results are read (:func:`load_results`), and here
    with ``verify=True``: every chunk file is read and a file whose checksum is not the
    recorded one is listed in ``corrupt_chunk_files`` and not counted (a resume
    recomputes it). Without ``verify`` only the files' presence is checked (fast on a
    folder of many large chunks).

    Example:
      >>> import tempfile, os
      >>> from jaxeval import run_study, study_from_dict, study_status
      >>> d = tempfile.mkdtemp()
      >>> s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 8,
      ...                      "chunk_size": 8, "lanes": 8, "policies": ["uniform"],
      ...                      "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5]})
      >>> folder = run_study(s, os.path.join(d, "s"), progress=False)
      >>> st = study_status(folder, verify=True)
      >>> st["complete"], st["corrupt_chunk_files"]
      (True, [])
    """
    if not isinstance(verify, bool):
        raise TypeError(f"verify: expected True or False, got {verify!r}")
    out = Path(out)
    manifest = _read_manifest(out)
    if manifest is None:
        raise _not_a_study(out)
    study = study_from_dict(manifest["config"], check=False)
    missing = sorted(name for name in manifest["chunks"] if not (out / name).is_file())
    manifest = dict(manifest, chunks={k: v for k, v in manifest["chunks"].items()
                                      if k not in missing})
    corrupt = sorted(_verify_chunks(out, manifest)) if verify else None
    lo, hi = manifest["range"]
    names = manifest.get("task_names") or [t.name for t in study.tasks()]
    done = {t: sum(b - a for a, b in _covered(manifest, t)) for t in names}
    return {
        "name": manifest["config"].get("name"),
        "kind": manifest["config"].get("kind"),
        "range": [lo, hi],
        "units": study.n_units,
        "done": done,
        "range_complete": all(not _gaps(_covered(manifest, t), lo, hi) for t in names),
        "complete": all(not _gaps(_covered(manifest, t), 0, study.n_units) for t in names),
        # the units of the folder's range no chunk holds, per task ([lo, hi] spans)
        "todo": {t: [list(g) for g in _gaps(_covered(manifest, t), lo, hi)] for t in names},
        "missing_chunk_files": missing,
        **({} if corrupt is None else {"corrupt_chunk_files": corrupt}),
    }


def _unfinished_hint(out: Path, manifest: Mapping[str, Any], study: Study) -> str:
    """What to do with a folder whose study is not complete: resume its own range, or
    merge it with the other ranges' folders when it is one range of a split study."""
    lo, hi = manifest["range"]
    if (lo, hi) != (0, study.n_units):
        return (f"this folder is the range job for units {lo}:{hi} of {study.n_units} "
                f"(`jaxeval resume` finishes that range only): `jaxeval merge` it with the "
                f"folders of the other ranges, e.g. `jaxeval merge {out} OTHER... --out "
                f"MERGED`, then report on MERGED")
    return f"run `jaxeval resume {out}` first"


def load_results(
    out: str | os.PathLike, *, allow_partial: bool = False
) -> tuple[Study, dict[str, dict[str, np.ndarray]]]:
    """Read a study folder: ``(study, {task: {field: array [units, ...]}})``.

    Every chunk is checked against its checksum. The units must be contiguous
    and, unless ``allow_partial``, cover the whole study. Each field holds one row per
    unit (replicate), e.g. ``results["pulse"]["checkpoints.recommended"]`` of shape
    ``[replicates, budgets]``; see :func:`run_study` for an example.

    With ``allow_partial``, a task's rows are its finished units from the first one
    on (tasks with none are left out): row ``i`` is unit ``study_status(out)["range"][0]
    + i`` for the folder of a ``replicate_range`` job.
    """
    out = Path(out)
    manifest = _read_manifest(out)
    if manifest is None:
        raise _not_a_study(out)
    study = _located(study_from_dict(manifest["config"], check=False), manifest, out)
    chunks = dict(manifest["chunks"])
    bad = _verify_chunks(out, manifest)  # refused below
    if bad:
        raise StudyFolderError(
            f"{out}: {len(bad)} chunk file(s) missing or failing their checksum ({bad[:3]}); "
            + _recompute_hint(out, study, chunks, bad)
        )
    by_task: dict[str, list] = {}
    for name, c in manifest["chunks"].items():
        by_task.setdefault(c["task"], []).append((int(c["lo"]), int(c["hi"]), name))
    # every task of the study, finished or not (folders written before task_names was
    # recorded at creation list it only once a run ended)
    order = manifest.get("task_names") or [t.name for t in study.tasks()]
    results: dict[str, dict[str, np.ndarray]] = {}
    for task in order:
        spans = sorted(by_task.get(task, []))
        if not spans:
            if allow_partial:
                continue
            raise StudyFolderError(
                f"{out}: task {task!r} has no finished chunk yet; "
                + _unfinished_hint(out, manifest, study)
            )
        pos = spans[0][0]
        if not allow_partial and pos != 0:
            raise StudyFolderError(f"{out}: task {task!r} is incomplete (starts at {pos})")
        parts: dict[str, list] = {}
        for lo, hi, name in spans:
            if lo != pos:
                raise StudyFolderError(
                    f"{out}: task {task!r} has a gap or overlap at unit {pos} (next chunk "
                    f"starts at {lo}); run `jaxeval resume` or merge the missing range"
                )
            with np.load(out / name, allow_pickle=False) as z:
                for k in z.files:
                    if z[k].shape[:1] != (hi - lo,):
                        raise StudyFolderError(
                            f"{out}: chunk {name} holds {z[k].shape[:1]} rows of {k!r} for "
                            f"units {lo}:{hi}; the manifest does not describe this file")
                    parts.setdefault(k, []).append(z[k])
            pos = hi
        if not allow_partial and pos != study.n_units:
            raise StudyFolderError(
                f"{out}: task {task!r} holds units up to {pos} of {study.n_units}; "
                + _unfinished_hint(out, manifest, study)
            )
        results[task] = {k: np.concatenate(v) for k, v in parts.items()}
    return study, results


def merge_studies(dirs: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Join folders of the same study computed over disjoint replicate ranges.

    Each chunk is verified against its checksum and copied to ``out``; folders
    of different studies (different numbers-defining settings), overlapping
    ranges and corrupt chunks are refused. Chunk sizes may differ (the numbers
    do not depend on them).

    Args:
      dirs: the study folders (e.g. one per array-job range).
      out: a new (or empty) folder for the merged study.

    Returns:
      ``out``; ``manifest.json`` says whether the merged study is complete. The merged
      folder's range is the whole study, so :func:`resume_study` on a partial merge
      computes exactly the units that none of ``dirs`` held.

    See :func:`run_study` for an example.
    """
    if isinstance(dirs, (str, bytes, os.PathLike)):
        raise TypeError(f"dirs: expected a list of study folders, got one path {dirs!r} "
                        "(merge_studies([a, b], out))")
    dirs = [Path(d) for d in dirs]
    out = Path(out)
    if not dirs:
        raise ValueError("merge_studies: 'dirs' is empty")
    if out.exists() and not out.is_dir():
        raise StudyFolderError(f"{out} is a file, not a folder: merge into a new folder")
    if out.exists() and any(out.iterdir()):
        raise StudyFolderError(f"{out} is not empty: merge into a new folder")
    mans = []
    for d in dirs:
        m = _read_manifest(d)
        if m is None:
            raise _not_a_study(d)
        if _being_written(d):  # (its manifest and chunks are still changing)
            raise StudyFolderError(
                f"{d} is being written by another process (it holds the folder's lock): "
                "wait for that run to finish, then merge")
        chunks = dict(m["chunks"])
        bad = _verify_chunks(d, m)  # refused below
        if bad:
            raise StudyFolderError(
                f"{d}: {len(bad)} chunk file(s) missing or failing their checksum "
                f"({bad[:3]}); "
                + _recompute_hint(d, study_from_dict(m["config"], check=False), chunks, bad)
            )
        mans.append(m)
    ref = mans[0]
    ka = _merge_key(ref["config"])
    for d, m in zip(dirs[1:], mans[1:]):
        # recomputed from each config (a stored hash could be stale); the data file is
        # compared by checksum, not path (array jobs copy it to node-local scratch)
        kb = _merge_key(m["config"])
        if ka != kb:
            units = set(_diff_keys(ka, kb)) <= {"n_replicates", "n_seeds"}
            raise StudyFolderError(
                f"{d} holds a different study than {dirs[0]}: "
                f"{_describe_diff(ka, kb, (f'in {dirs[0]}', f'in {d}'))}"
                + ("; to merge range jobs of a larger study with a finished one, extend "
                   "the finished folder to the larger size first (`jaxeval extend DIR --to "
                   "N --no-run`, extend_study)" if units else "")
            )
        if m.get("data_sha256") != ref.get("data_sha256"):
            raise StudyFolderError(f"{d} was computed on different data than {dirs[0]}")
    for d, m in zip(dirs[1:], mans[1:]):
        diff = _numerics_diff(ref.get("numerics"), m.get("numerics"),
                              (f"in {dirs[0]}", f"in {d}"))
        if diff:
            raise StudyFolderError(
                f"{d} was computed under other JAX settings than {dirs[0]} ({diff}): their "
                "random streams differ, so the merged numbers would not be one study's"
            )
    codes = {str(d): m["target_sha256"] for d, m in zip(dirs, mans) if m.get("target_sha256")}
    if len(set(codes.values())) > 1:
        short = {d: h[:12] for d, h in codes.items()}
        raise StudyFolderError(
            f"the folders' target function came from different versions of its module "
            f"(source SHA-256 {short}): the merged numbers would mix two functions")
    fits = {str(d): m["problem_sha256"] for d, m in zip(dirs, mans) if m.get("problem_sha256")}
    if len(set(fits.values())) > 1:
        short = {d: h[:12] for d, h in fits.items()}
        raise StudyFolderError(
            f"the folders' prediction policies used different factorizations ({short}): "
            "the fit's last bits depend on the CPU threads and "
            "devices of each job. Rerun the ranges with `--problem-from` one folder "
            "(run_study(problem_from=...)) so that they share its fit"
        )
    fit_src = next((d for d, m in zip(dirs, mans) if m.get("problem_sha256")), None)
    if fit_src is not None and _fit_sha(_read_fit(fit_src / PROBLEM_FILE)) != fits[str(fit_src)]:
        raise StudyFolderError(f"{fit_src / PROBLEM_FILE}: the saved factorization does not "
                               "match the checksum in its manifest (damaged)")
    vers = {str(d): m.get("versions") for d, m in zip(dirs, mans)}
    if len({json.dumps(v, sort_keys=True) for v in vers.values()}) > 1:
        warnings.warn(f"merge_studies: the folders were computed with different versions "
                      f"{vers}; their numbers may differ in the last bits (recorded in the "
                      "merged manifest's 'merged_versions')", stacklevel=2)
    names = {str(d): m["config"].get("name") for d, m in zip(dirs, mans)}
    if len({json.dumps(v) for v in names.values()}) > 1:  # (a label: not in the numbers)
        warnings.warn(f"merge_studies: the folders' studies are named differently {names}; "
                      f"the merged study is named {ref['config'].get('name')!r}, as the "
                      f"first folder's", stacklevel=2)
    ref_study = study_from_dict(ref["config"], check=False)
    for task in {c["task"] for m in mans for c in m["chunks"].values()}:
        setups = {_chunk_setup(c) for m in mans for c in m["chunks"].values()
                  if c["task"] == task}
        if len(setups) > 1 and (max(setups) > SETUP or task in _setup_changes(
                ref_study, min(setups), max(setups))):
            raise StudyFolderError(
                f"task {task!r}: its chunks in {[str(d) for d in dirs]} were computed with "
                f"different study set-ups ({sorted(setups)}; see jaxeval._study.SETUP), so "
                "their numbers do not mix"
            )
    # every (task, unit) must come from one folder only
    spans: dict[str, list] = {}
    for d, m in zip(dirs, mans):
        for name, c in m["chunks"].items():
            spans.setdefault(c["task"], []).append((int(c["lo"]), int(c["hi"]), d, name, c))
    merged: dict[str, dict] = {}
    for task, lst in spans.items():
        lst.sort(key=lambda t: t[:2])
        for (_a0, a1, da, _, _), (b0, b1, db, _, _) in zip(lst, lst[1:]):
            if b0 < a1:
                raise StudyFolderError(
                    f"task {task!r}: units {b0}:{min(a1, b1)} are in both {da} and {db}; "
                    "merge folders of disjoint replicate ranges"
                )
        for _lo, _hi, d, name, c in lst:
            merged[name] = (d, c)
    if _is_writer():
        made = not out.exists()  # (else: an empty folder, checked above)
        try:
            _write_merged(out, merged, fit_src, ref, mans, dirs, vers, fits, codes)
        except BaseException:
            # a failed merge (a full disk, a kill) leaves no half folder in the way of the
            # same merge again: the manifest is written last, so nothing here is a study
            if not (out / MANIFEST_FILE).is_file():
                if made:
                    shutil.rmtree(out, ignore_errors=True)
                else:
                    for p in list(out.iterdir()):
                        if p.is_dir():
                            shutil.rmtree(p, ignore_errors=True)
                        else:
                            p.unlink(missing_ok=True)
            raise
    return out


def _write_merged(out: Path, merged: dict, fit_src: Path | None, ref: dict, mans: list,
                  dirs: list, vers: dict, fits: dict, codes: dict) -> None:
    """The files of a merged folder: chunks, the pinned fit, ``study.json``, then the
    manifest (last: a folder without it is no study)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (d, _) in merged.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        tmp = (out / name).with_name(f".tmp-{os.getpid()}-{Path(name).name}")
        shutil.copyfile(d / name, tmp)
        os.replace(tmp, out / name)
    if fit_src is not None:
        _atomic_write_bytes(out / PROBLEM_FILE, (fit_src / PROBLEM_FILE).read_bytes())
    study = study_from_dict(ref["config"], check=False)
    cfg = study.to_dict()
    manifest = {
        "format": FORMAT,
        "study_hash": _hash_json(cfg),
        "results_hash": ref["results_hash"],
        "config": cfg,
        # a merged folder stands for the whole study (whatever ranges went in), so
        # `resume` on a partial merge computes exactly the units still missing
        "range": [0, study.n_units],
        "data_sha256": ref.get("data_sha256"),
        # (every part's: a node's scratch copy may be gone by the time of a report)
        "data_locations": list(dict.fromkeys(w for m in mans
                                             for w in _recorded_locations(m))),
        "versions": _versions(),
        "numerics": next((m["numerics"] for m in mans if m.get("numerics")), _numerics()),
        "chunks": {name: c for name, (_, c) in merged.items()},
        "merged_from": [str(d) for d in dirs],
        # (a part that was extended keeps the record of it)
        **({"extended": ext} if (ext := [e for m in mans
                                         for e in (m.get("extended") or [])]) else {}),
        **({"problem_sha256": fits[str(fit_src)]} if fit_src is not None else {}),
        **({"target_sha256": next(iter(codes.values()))} if codes else {}),
        "merged_versions": vers,
        "task_names": ref.get("task_names") or [t.name for t in study.tasks()],
    }
    names = manifest["task_names"]
    cov = {t: _covered(manifest, t) for t in names}
    manifest["complete"] = all(not _gaps(cov[t], 0, study.n_units) for t in names)
    manifest["range_complete"] = manifest["complete"]  # (its range: the whole study)
    _atomic_write_json(out / STUDY_FILE, cfg)
    _atomic_write_json(out / MANIFEST_FILE, manifest)


def _gaps(spans: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    gaps, pos = [], lo
    for a, b in sorted(spans):
        if a > pos:
            gaps.append((pos, a))
        pos = max(pos, b)
    if pos < hi:
        gaps.append((pos, hi))
    return gaps


# ======================================================== task builders
def flatten_tree(tree: Any) -> dict[str, np.ndarray]:
    """A pytree of arrays as ``{"a.b": array}`` (NamedTuple fields and dict keys joined)."""
    import jax

    out = {}
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in leaves:
        parts = []
        for k in path:
            for attr in ("name", "key", "idx"):
                if hasattr(k, attr):
                    parts.append(str(getattr(k, attr)))
                    break
        name = ".".join(parts) or "value"
        if name in out:
            raise ValueError(
                f"flatten_tree: two leaves of the result are both named {name!r} (e.g. "
                "a nested key 'a' -> 'b' and a key 'a.b'); rename one"
            )
        out[name] = np.asarray(leaf)
    return out


def _progress(cls, ranges, enabled, label):
    import jax

    total = sum(b - a for a, b in ranges)
    return cls(total, label=label, enabled=bool(enabled) and jax.process_index() == 0)


_PROBLEM_CACHE: dict = {}


def _problem_key(study: IdentificationStudy, needs_pred: bool) -> tuple:
    return (
        study.data,
        study.data.fingerprint(),
        study.seed,
        study.num_arms,
        study.n_instances,
        study.n_train,
        study.rank,
        study.fit_steps,
        needs_pred,
    )


def _duplicates_removed(sm: Any) -> int:
    """How many models :meth:`DataSource.load` (or an earlier ``drop_duplicates`` whose
    matrix was saved) removed as exact duplicates of another model's row."""
    return len(sm.metadata.get("dropped_duplicates", ()))


def _real_problem(study: IdentificationStudy, needs_pred: bool):
    """Split, instances and (when needed) factorization of a real-data study (cached).

    Mirrors :func:`jaxeval.simulate_identification` step for step, so a study and
    the wrapper give the same numbers for the same settings. A study folder pins the
    factorization its chunks used (:func:`_pin_fit`), installed here by
    :func:`_install_fit`.
    """
    key = _problem_key(study, needs_pred)
    if key in _PROBLEM_CACHE:
        return _PROBLEM_CACHE[key]
    from jaxeval._identification import ProblemData
    from jaxeval._simulate import PoolError, draw_instances, fit_default_factors, split_pool

    sm = study.data.load()
    m, n = sm.shape
    try:  # the wrapper's split and checks (a study's n_train 0 means half)
        train, pool, n_train = split_pool(sm, study.n_train or None, study.num_arms, study.seed)
    except PoolError as e:
        key = {"K": "num_arms"}.get(e.arg, e.arg)
        msg = str(e).removeprefix(f"{e.arg}: ")  # (the key heads the message once)
        # (the file the study names: a matrix saved from a CSV keeps the CSV's name)
        where = study.data.npz if study.data.npz is not None else sm.source
        raise StudyConfigError(key, f"{where}: {msg}") from None

    inst = draw_instances(pool.n_models, study.num_arms, study.n_instances, study.seed)
    acc = pool.accuracy()
    top2 = -np.sort(-acc[inst], axis=1)[:, :2]
    info: dict[str, Any] = {
        "source": str(sm.source),
        "models": m,
        "items": n,
        "training_models": n_train,
        "pool_models": pool.n_models,
        "duplicates_removed": _duplicates_removed(sm),
        "instances": len(inst),
        "median_top2_gap": float(np.median(top2[:, 0] - top2[:, 1])),
    }
    from jaxeval._factorization import ItemFactors

    factors = ItemFactors(
        np.zeros((n, 1), np.float32), np.zeros((n,), np.float32), np.zeros((1,), np.float32)
    )
    rho = 1.0
    if needs_pred:  # the same fit, factors and online prior as simulate_identification
        lr, factors, rho = fit_default_factors(train, study.rank, study.seed, study.fit_steps)
        info["rank"] = int(lr.V.shape[1])
    data = ProblemData(
        pool=np.asarray(pool.scores, np.float32),
        instances=inst.astype(np.int32),
        item_factors=factors,
    )
    if len(_PROBLEM_CACHE) > 8:
        _PROBLEM_CACHE.clear()
    _PROBLEM_CACHE[key] = (data, rho, info)
    return data, rho, info


def _uses_predictions(spec: PolicySpec) -> bool:
    """Whether a policy runs with the factorization's predictions (its setting, else its
    kind's default)."""
    from jaxeval import _policies

    up = dict(spec.settings).get("use_predictions")
    return bool(spec.policy in _policies.PREDICTION_POLICIES if up is None else up)


def _needs_fit(study: Study) -> bool:
    """A real-data identification study with a policy that uses predictions."""
    if not isinstance(study, IdentificationStudy) or study.data.synthetic is not None:
        return False
    return any(_uses_predictions(spec) for spec in study.policies)


_FIT_FIELDS = ("V", "c", "u_mean", "rho")


def _fit_id(study: IdentificationStudy) -> dict:
    """What the factorization of a study depends on (the split and the fit settings)."""
    return {"data_sha256": study.data.fingerprint(), "seed": study.seed,
            "num_arms": study.num_arms, "n_train": study.n_train, "rank": study.rank,
            "fit_steps": study.fit_steps}


def _fit_arrays(study: IdentificationStudy) -> dict[str, np.ndarray]:
    """The factorization the prediction policies of ``study`` use (fitted, or installed)."""
    data, rho, _ = _real_problem(study, True)
    f = data.item_factors
    return {"V": np.asarray(f.V, np.float32), "c": np.asarray(f.c, np.float32),
            "u_mean": np.asarray(f.u_mean, np.float32), "rho": np.asarray(rho, np.float64)}


def _fit_sha(arrays: Mapping[str, np.ndarray]) -> str:
    """A checksum of the factorization's values (not of a file's bytes)."""
    h = hashlib.sha256()
    for k in _FIT_FIELDS:
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _install_fit(study: IdentificationStudy, arrays: Mapping[str, np.ndarray]) -> None:
    """Make ``arrays`` the factorization every task of ``study`` in this process uses."""
    from jaxeval._factorization import ItemFactors

    data, _, info = _real_problem(study, False)  # split and instances: no fitting
    f = ItemFactors(np.asarray(arrays["V"], np.float32), np.asarray(arrays["c"], np.float32),
                    np.asarray(arrays["u_mean"], np.float32))
    if f.V.ndim != 2 or f.c.shape != (f.V.shape[0],) or f.u_mean.shape != (f.V.shape[1],) \
            or f.V.shape[0] != data.pool.shape[1]:
        raise StudyFolderError(
            f"a saved factorization of {f.V.shape[0]} items (V {f.V.shape}, c {f.c.shape}, "
            f"u_mean {f.u_mean.shape}) does not fit this study's {data.pool.shape[1]} items")
    _PROBLEM_CACHE[_problem_key(study, True)] = (
        data._replace(item_factors=f), float(arrays["rho"]), dict(info, rank=int(f.V.shape[1])))


def _write_fit(path: Path, study: IdentificationStudy, arrays: Mapping[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, id=np.asarray(json.dumps(_fit_id(study), sort_keys=True)),
             **{k: arrays[k] for k in _FIT_FIELDS})
    _atomic_write_bytes(path, buf.getvalue())


def _read_fit(path: Path, study: IdentificationStudy | None = None) -> dict[str, np.ndarray]:
    """A factorization written by :func:`_write_fit` (``study``: refuse one of another
    split or fit settings). Raises :class:`StudyFolderError` naming the file."""
    from jaxeval._data import NPZ_READ_ERRORS

    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in _FIT_FIELDS}
            fid = json.loads(str(z["id"]))
    except (*NPZ_READ_ERRORS, KeyError) as e:
        raise StudyFolderError(f"{path}: not a study's saved factorization ({e})") from None
    if not all(np.isfinite(a).all() for a in arrays.values()):
        raise StudyFolderError(f"{path}: the saved factorization has non-finite values")
    if study is not None and fid != _fit_id(study):
        raise StudyFolderError(
            f"{path}: a factorization of another split or fit "
            f"({_describe_diff(fid, _fit_id(study))})")
    return arrays


def _broadcast_fit(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Under jax.distributed every process takes process 0's fit (bits may differ between
    hosts)."""
    import jax

    if jax.process_count() == 1:
        return arrays
    from jax.experimental import multihost_utils

    return {k: np.asarray(v) for k, v in multihost_utils.broadcast_one_to_all(arrays).items()}


def _pin_fit(study: Study, out: Path, manifest: dict) -> None:
    """Pin the factorization of a study folder, so that every chunk of it uses one.

    The fit's last bits depend on the CPU thread count and the number of devices, so a
    resume on another machine would refit slightly other factors and move the numbers of
    the prediction policies. The first run saves the fit (:data:`PROBLEM_FILE`, its
    checksum in the manifest); later runs, resumes and merges use that file.
    """
    if not _needs_fit(study):
        return
    want = manifest.get("problem_sha256")
    path = out / PROBLEM_FILE
    arrays = None
    if want and path.is_file():
        try:
            arrays = _read_fit(path, study)
        except StudyFolderError:
            arrays = None
        if arrays is not None and _fit_sha(arrays) != want:
            arrays = None
    if arrays is None:
        arrays = _broadcast_fit(_fit_arrays(study))
        sha = _fit_sha(arrays)
        if want and sha != want:
            raise StudyFolderError(
                f"{out}: {PROBLEM_FILE}, the factorization its finished chunks used, is "
                "missing or corrupt, and the fit here differs from it in its last bits (they "
                "depend on the CPU threads and devices). Nothing was changed; restore the "
                "file, or run the study again in a new folder"
            )
        if _is_writer():
            _write_fit(path, study, arrays)
            if want != sha:
                manifest["problem_sha256"] = sha
                _atomic_write_json(out / MANIFEST_FILE, manifest)
    _install_fit(study, arrays)


#: The most LLM calls (K * n) an identification study may have: the kernels count calls
#: in int32, with room for a batch past the budget.
_MAX_CALLS = 2**31 - 1 - 2**20


def study_budgets(study: IdentificationStudy) -> tuple[dict, tuple[int, ...]]:
    """``(info, budgets in LLM calls)`` of an identification study, without any fitting."""
    if study.data.synthetic is not None:
        n = dict(study.data.synthetic)["n_items"]
        info: dict[str, Any] = {"source": study.data.describe(), "items": n}
    else:
        sm = study.data.load()
        m, n = sm.shape
        n_train = study.n_train or m // 2
        info = {
            "source": str(sm.source),
            "models": m,
            "items": n,
            "training_models": n_train,
            "pool_models": m - n_train,
            "duplicates_removed": _duplicates_removed(sm),
            "instances": study.n_instances,
        }
    kn = study.num_arms * n
    if kn > _MAX_CALLS:
        where = "data.synthetic.n_items" if study.data.synthetic is not None else "num_arms"
        raise StudyConfigError(where, f"K*n = {study.num_arms}*{n} = {kn} LLM calls do not "
                               f"fit the kernels' int32 call counters (at most {_MAX_CALLS})")
    budgets = tuple(sorted({max(1, int(round(f * kn))) for f in study.budgets}))
    if len(budgets) != len(study.budgets):
        raise StudyConfigError(
            "budgets", f"fractions {study.budgets} of K*n={kn} calls repeat budgets {budgets}"
        )
    far = [(f, max(1, int(round(f * kn)))) for f in study.budgets]
    far = [(f, b) for f, b in far if abs(b - f * kn) > 0.1 * f * kn]
    if far and tuple(study.budgets) != _default_budgets():
        # (the tables and plots label checkpoints with the requested fractions; the
        # default grid on a small problem is expected to round)
        f, b = far[0]
        warnings.warn(
            f"budgets: {len(far)} fraction(s) of K*n = {kn} calls are not near a whole "
            f"number of calls and were rounded, e.g. {f:g} to {b} call(s), "
            f"{100 * b / kn:.3g}% of K*n; the summary labels them with the requested "
            "fractions", UserWarning, stacklevel=2)
    info.update(budgets=list(budgets), calls_full=kn)
    return info, budgets


def identification_problem(study: IdentificationStudy, spec: PolicySpec):
    """``(config, data, params, info)`` of one policy of an identification study."""
    import jax

    from jaxeval import _identification as idn

    st = dict(spec.settings)
    use_pred = st.get("use_predictions")
    needs_pred = _uses_predictions(spec)
    syn: dict[str, Any] = {}
    if study.data.synthetic is not None:
        sd = dict(study.data.synthetic)
        n, r, truth = sd["n_items"], sd.get("rank", 4), "synthetic"
        syn = {
            "scale_u": sd.get("model_scale", 1.0),
            "scale_c": sd.get("difficulty_scale", 1.5),
            "mean_c": sd.get("difficulty_mean", 0.0),
        }
        data, fit_rho = None, 1.0
        info: dict[str, Any] = {"source": study.data.describe(), "items": n}
    else:
        data, fit_rho, info = _real_problem(study, bool(needs_pred))
        n, truth = int(data.pool.shape[1]), "real"
        r = int(data.item_factors.V.shape[1])
    _, budgets = study_budgets(study)
    kn = study.num_arms * n
    config = idn.Config(
        policy=spec.policy,
        num_arms=study.num_arms,
        num_items=n,
        budgets=budgets,
        batch_size=int(st.get("batch_size", 1)),
        cs_kinds=study.cs_kinds,
        stop_kind="eb" if "eb" in study.cs_kinds else study.cs_kinds[0],
        use_predictions=use_pred,
        refit=bool(st.get("refit", True)),
        num_newton=int(st.get("num_newton", 1)),  # simulate_identification's default
        synchronized=st.get("synchronized"),
        truth=truth,
        rank=r,
        corruption=study.corruption,
    )
    if data is None:
        data = jax.tree.map(np.asarray, idn.dummy_data(config))
    params = idn.Params.make(
        alpha=study.alpha,
        a=st.get("a", 1.0),
        scale=st.get("scale", 1.0),
        rho=st.get("rho", fit_rho),
        lam0=st.get("lam0", 1.0),
        shrink=st.get("shrink", 10.0),
        eps=0.0,
        bias=0.3,
        **syn,
    )
    params = jax.tree.map(np.asarray, params)
    return config, data, params, dict(info, budgets=list(budgets), calls_full=kn)


def _dispatch_chunk(chunk_size: int, lanes: int, n_units: int) -> Callable[[], int]:
    """The replicates one chunk of a study runs (:func:`jaxeval._runner.capped_chunk`:
    ``chunk_size`` rounded up to whole blocks of ``lanes`` on every device, capped near
    the study's size). A compiled chunk computes that many whatever range it is given,
    so smaller ranges would compute padding (4x the work for 64 replicates at 32 lanes
    on 8 devices); results do not depend on the chunking. Returned as a function:
    counting devices starts a backend, which reading a folder's status must not."""

    def size() -> int:
        import jax

        from jaxeval._runner import capped_chunk

        return capped_chunk(chunk_size, n_units, lanes, len(jax.devices()))

    return size


def _identification_tasks(study: IdentificationStudy) -> list[Task]:
    tasks = []
    chunk = _dispatch_chunk(study.chunk_size, study.lanes, study.n_replicates)
    for spec in study.policies:

        def compute(ranges, progress, spec=spec):
            from jaxeval import _identification as idn
            from jaxeval._runner import Progress, ReplicatePlan

            config, data, params, _ = identification_problem(study, spec)
            balanced = study.instance_assignment == "balanced"
            fn = _cached_kernel(idn.run_identification, config, balanced)
            plan = ReplicatePlan(fn, chunk(), operands=(data, params), lanes=study.lanes,
                                 with_index=balanced)
            prog = _progress(Progress, ranges, progress, f"replicates [{spec.name}]")
            for lo, hi, res in plan.iter_ranges(study.seed, ranges, progress=prog):
                yield lo, hi, flatten_tree(res)

        tasks.append(Task(spec.name, study.n_replicates, chunk, compute))
    return tasks


_KERNELS: dict = {}


def _cached_kernel(kernel: Callable, config: Any, with_index: bool = False) -> Callable:
    """One function object per (kernel, static config), so compiled programs are reused;
    ``with_index``: ``fn(rep_key, index, data, params)``, the replicate index passed on
    as the kernel's ``instance`` (a balanced design)."""
    key = (kernel, config, with_index)
    if key not in _KERNELS:
        if with_index:

            def fn(rep_key, index, data, params):
                return kernel(rep_key, data, params, config, instance=index)

        else:

            def fn(rep_key, data, params):
                return kernel(rep_key, data, params, config)

        _KERNELS[key] = fn
    return _KERNELS[key]


def _anchor_tasks(study: AnchorStudy) -> list[Task]:
    """One task per anchor count ``k``; unit ``r`` is the split with seed ``first_seed + r``."""
    tasks = []
    for k in study.k:

        def compute(ranges, progress, k=k):
            from jaxeval._runner import Progress

            prog = _progress(Progress, ranges, progress, f"seeds [k={k}]")
            sm = study.data.load()
            if k >= sm.n_items:
                raise StudyConfigError("k", f"k={k} must be below the {sm.n_items} items")
            for lo, hi in ranges:
                rows = [_anchor_unit(study, sm, k, study.first_seed + r) for r in range(lo, hi)]
                arrays = {f: np.stack([r[f] for r in rows]) for f in rows[0]}
                yield lo, hi, arrays
                prog.update(hi - lo)  # (once the chunk is written, as the runner's lines)

        tasks.append(Task(f"k{k}", study.n_seeds, study.chunk_size, compute))
    return tasks


def _anchor_unit(study: AnchorStudy, sm: Any, k: int, seed: int) -> dict[str, np.ndarray]:
    """One repetition of the METHODS.md 6.2 protocol (one split seed), every method, one ``k``.

    Seeds are evaluated one at a time so a repetition's numbers never depend on
    which other seeds share its chunk.
    """
    from jaxeval.anchors._protocol import evaluate_protocol

    t0 = time.perf_counter()
    res = evaluate_protocol(sm, k, study.methods, seeds=(seed,), alpha=study.alpha)
    out = {"seconds": np.float64(time.perf_counter() - t0)}
    for i, m in enumerate(res.methods):
        out[f"{m}.mae_pp"] = np.float64(res.mae_pp[i, 0])
        out[f"{m}.tau"] = np.float64(res.tau_b[i, 0])
        out[f"{m}.coverage"] = np.float64(res.coverage[i, 0])
        out[f"{m}.width"] = np.float64(res.width[i, 0])
    return out
