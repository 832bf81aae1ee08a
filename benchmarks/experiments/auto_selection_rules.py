"""``auto``'s cross-validated choice against other selection rules, scored offline.

The issue-8 records keep, per seed, every ``auto`` candidate's cross-validated MSE
(``cv_mse [seeds, candidates]``) beside every method's test MAE (``mae_pp [methods,
seeds]``), so a selection rule can be scored without refitting: pick a candidate per
seed from ``cv_mse``, read that candidate's test MAE. Cells: those where ``auto``
cross-validates, the newest record of each (``anchors_issue8_s24.jsonl`` over
``anchors_issue8.jsonl``); ``anchors_issue8_tailored10.jsonl`` (10 seeds) is printed
apart. BUILD_NOTES.md, "Twenty-ninth session", has the figures.

    python benchmarks/experiments/auto_selection_rules.py
"""

import json
from pathlib import Path

import numpy as np

from jaxeval.anchors import AUTO_CANDIDATES

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _cv_records(name):
    for line in open(RESULTS / name):
        rec = json.loads(line)
        if rec.get("cv_mse") is not None:
            assert len(rec["cv_mse"][0]) == len(AUTO_CANDIDATES), name
            yield rec


def _score(rec, pick):
    """Mean test MAE (pp) of the candidate ``pick(cv_mse_row)`` chose on each seed."""
    names, mae = rec["methods"], rec["mae_pp"]
    cols = [names.index(c) for c in AUTO_CANDIDATES]
    return float(np.mean([mae[cols[pick(np.asarray(row))]][s]
                          for s, row in enumerate(rec["cv_mse"])]))


def _prefer(name, margin):
    """``name`` unless another candidate's CV MSE is lower by more than ``margin``."""
    p = AUTO_CANDIDATES.index(name)
    return lambda v: int(np.argmin(v)) if v.min() < v[p] * (1 - margin) else p


RULES = {
    "cv argmin (library)": lambda v: int(np.argmin(v)),
    **{f"greedy_shrunk unless {m:.0%}": _prefer("greedy_shrunk", m) for m in (0.01, 0.02, 0.05)},
    "always greedy_shrunk": lambda v: AUTO_CANDIDATES.index("greedy_shrunk"),
    "always greedy_mix": lambda v: AUTO_CANDIDATES.index("greedy_mix"),
}


def main():
    cells = {}
    for name in ("anchors_issue8.jsonl", "anchors_issue8_s24.jsonl"):  # newest last
        for rec in _cv_records(name):
            cells[(rec["dataset"], rec["k"])] = rec
    table = {rule: [] for rule in RULES}
    hindsight = []
    for key in sorted(cells):
        rec = cells[key]
        auto = float(np.mean(rec["mae_pp"][rec["methods"].index("auto")]))
        for rule, pick in RULES.items():
            table[rule].append(_score(rec, pick))
        assert abs(table["cv argmin (library)"][-1] - auto) < 1e-9, key  # reproduces auto
        hindsight.append(min(float(np.mean(rec["mae_pp"][rec["methods"].index(c)]))
                             for c in AUTO_CANDIDATES))
    base = np.array(table["cv argmin (library)"])
    print(f"{len(cells)} cells where auto cross-validates; mean test MAE (pp)")
    for rule, vals in [*table.items(), ("best candidate in hindsight", hindsight)]:
        v = np.array(vals)
        print(f"  {rule:30s} {v.mean():.3f}  better in {(v < base - 1e-9).sum():2d}, "
              f"worse in {(v > base + 1e-9).sum():2d}")
    for rec in _cv_records("anchors_issue8_tailored10.jsonl"):
        best = min(float(np.mean(rec["mae_pp"][rec["methods"].index(c)]))
                   for c in AUTO_CANDIDATES)
        print(f"{rec['dataset']} k={rec['k']}, {len(rec['seeds'])} seeds: cv argmin "
              f"{_score(rec, RULES['cv argmin (library)']):.3f}, best candidate {best:.3f}")


if __name__ == "__main__":
    main()
