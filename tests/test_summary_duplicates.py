"""Study summaries say how many duplicate models the study's data source removed.

A study drops models whose rows exactly repeat another model's before splitting
(``DataSource.load``); the summary's ``problem`` records the count and the table says
it, so a reader can tell 214 candidates from 235 rows.
"""

from __future__ import annotations

import numpy as np

import jaxeval
from jaxeval._report import format_summary, summarize
from jaxeval._study import AnchorStudy, DataSource, IdentificationStudy, study_budgets


def _removed(name: str) -> int:
    raw = jaxeval.load(name)
    return raw.n_models - raw.drop_duplicates().n_models


def test_identification_problem_counts_the_duplicates_removed():
    want = _removed("oll2_ifeval")
    assert want > 0  # (the dataset has duplicate rows: otherwise this checks nothing)
    info, _ = study_budgets(IdentificationStudy(data=DataSource(dataset="oll2_ifeval")))
    assert info["duplicates_removed"] == want
    assert info["models"] == jaxeval.load("oll2_ifeval").n_models - want


def _ident_summary(dup):
    prob = {"items": 5, "median_top2_gap": 0.125, "models": 42, "training_models": 30,
            "pool_models": 12, "instances": 7}
    if dup is not None:
        prob["duplicates_removed"] = dup
    return {"kind": "identification", "name": "t", "dataset": "d", "num_arms": 2,
            "replicates": 10, "alpha": 0.05, "nominal_coverage": 0.95,
            "budget_fractions": [0.5, 1.0], "problem": prob,
            "policies": {"ucbe": {"calls_to_95_fraction": None, "accuracy": [0.5, 1.0],
                                  "coverage": {"eb": {"family_wise_all_checkpoints": 1.0}}}}}


def test_identification_table_says_the_duplicates_removed():
    line = format_summary(_ident_summary(21)).splitlines()[1]
    assert line == ("  30 training models, 12 candidates, 7 instances "
                    "(21 duplicate models removed first); median top-2 gap 0.125")
    one = format_summary(_ident_summary(1)).splitlines()[1]
    assert "(1 duplicate model removed first)" in one
    # none removed, or a summary written before the count existed: the line as before
    for dup in (0, None):
        assert format_summary(_ident_summary(dup)).splitlines()[1] == (
            "  30 training models, 12 candidates, 7 instances; median top-2 gap 0.125")


def _anchor_results(study):
    f = {}
    for m in study.methods:
        for field, v in (("mae_pp", [1.0, 3.0]), ("tau", [0.5, 0.7]),
                         ("coverage", [1.0, 0.0]), ("width", [2.0, 4.0])):
            f[f"{m}.{field}"] = np.array(v)
    f["seconds"] = np.array([0.1, 0.2])
    return {f"k{k}": dict(f) for k in study.k}


def test_anchor_summary_records_the_matrix_and_duplicates_removed():
    want = _removed("oll2_musr")
    assert want > 0
    study = AnchorStudy(data=DataSource(dataset="oll2_musr"), methods=("random_mean",),
                        k=(3,), n_seeds=2)
    s = summarize(study, _anchor_results(study))
    raw = jaxeval.load("oll2_musr")
    assert s["problem"] == {"models": raw.n_models - want, "items": raw.n_items,
                            "duplicates_removed": want}
    assert s["methods"]["random_mean"]["mae_pp"] == [2.0]
    lines = format_summary(s).splitlines()
    assert lines[1] == (f"  {raw.n_models - want} models x {raw.n_items} items "
                        f"({want} duplicate models removed first)")
    assert lines[2].startswith("  method")


def test_anchor_summary_without_its_data_file_still_summarises(tmp_path):
    """Results copied without the data file still summarise (no matrix line)."""
    study = AnchorStudy(data=DataSource(npz=str(tmp_path / "gone.npz")),
                        methods=("random_mean",), k=(3,), n_seeds=2)
    s = summarize(study, _anchor_results(study))
    assert "problem" not in s
    lines = format_summary(s).splitlines()
    assert lines[1].startswith("  method")
