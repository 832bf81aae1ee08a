"""Gaps a fourth mutation review of ``jaxeval._study`` found (extending a folder, the
checks of a replicates study's target, ``study_status``, the span arithmetic, merging and
reading partial folders): each test fails on a plausible bug the rest of the suite let
through."""

import json
import shutil
import sys

import numpy as np
import pytest
from test_study import _edit_manifest
from test_study_mutants import folders, importable, tiny_config  # noqa: F401 (fixtures)

from jaxeval import _study
from jaxeval._study import (
    StudyConfigError,
    StudyFolderError,
    extend_study,
    load_results,
    merge_studies,
    run_study,
    study_from_dict,
    study_status,
)


def _copy(src, tmp_path, name="f"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


# ------------------------------------------------------------------ extend_study
def test_a_range_folder_that_does_not_start_at_0_is_not_extended(folders, tmp_path):  # noqa: F811
    """Only a folder holding the whole study is extended: a range job of the last units
    (its range ends at the study's size) is refused too, and left as it was."""
    b = _copy(folders["b"], tmp_path, "b")
    before = (b / "manifest.json").read_bytes()
    with pytest.raises(StudyFolderError, match="range job for units 8:16 of 16"):
        extend_study(b, 24)
    assert (b / "manifest.json").read_bytes() == before


def test_an_extended_folder_is_no_longer_complete_in_its_manifest(folders, tmp_path):  # noqa: F811
    """The manifest's ``complete`` / ``range_complete`` of a finished folder become
    false: the new units are not computed yet. A NumPy integer is a valid size."""
    whole = _copy(folders["whole"], tmp_path, "w")
    assert _manifest(whole)["complete"] is True
    assert extend_study(whole, np.int64(24)) == whole
    m = _manifest(whole)
    assert m["complete"] is False and m["range_complete"] is False
    assert m["range"] == [0, 24] and m["extended"] == [{"from": 16, "to": 24}]
    assert m["config"]["n_replicates"] == 24
    st = study_status(whole)
    assert st["units"] == 24 and st["done"] == {"replicates": 16} and not st["complete"]


# ---------------------------------------------------------- a replicates study's target
TARGETS = '''
import jax.numpy as jnp


def empty(key):
    return {}


def loud(key):
    raise ValueError("\\nthe replicate function needs its settings file " + "x" * 200
                     + "\\nsecond line")
'''


@pytest.fixture()
def targets(tmp_path, monkeypatch):
    (tmp_path / "tgt_fourth.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tgt_fourth", raising=False)
    return tmp_path


def test_a_target_returning_an_empty_pytree_is_refused_by_name(targets):
    out = targets / "o"
    with pytest.raises(StudyConfigError, match=r"'tgt_fourth:empty' returned no array \(\{\}\)") \
            as e:
        run_study(study_from_dict(tiny_config(target="tgt_fourth:empty")), out, progress=False)
    assert e.value.key == "target" and not out.exists()


def test_a_targets_error_keeps_its_first_non_blank_line_whole(targets):
    out = targets / "o"
    with pytest.raises(StudyConfigError) as e:
        run_study(study_from_dict(tiny_config(target="tgt_fourth:loud")), out, progress=False)
    msg = str(e.value)
    assert e.value.key == "target" and not out.exists()
    assert "(ValueError: the replicate function needs its settings file " + "x" * 200 + ")" \
        in msg
    assert "second line" not in msg


# ------------------------------------------------------------------ study_status
def test_status_refuses_a_verify_that_is_not_a_bool(folders):  # noqa: F811
    """``verify="no"`` would be truthy and read every chunk: it is refused by name."""
    for bad in ("no", 1, None):
        with pytest.raises(TypeError, match="verify: expected True or False"):
            study_status(folders["whole"], verify=bad)


def test_gaps_of_nested_spans_are_the_units_none_covers():
    """A span inside an earlier, longer one does not move the position back."""
    assert _study._gaps([(0, 16), (8, 12)], 0, 20) == [(16, 20)]
    assert _study._gaps([(0, 16), (8, 12)], 0, 16) == []
    assert _study._gaps([(2, 4), (6, 8)], 0, 10) == [(0, 2), (4, 6), (8, 10)]


# ------------------------------------------------------------------ merge_studies
def test_a_partial_merge_is_neither_complete_nor_range_complete(folders, tmp_path):  # noqa: F811
    """The merged folder's range is the whole study, so a merge missing units has not
    finished its range either; an existing empty folder may receive it."""
    (tmp_path / "m").mkdir()
    merged = merge_studies([folders["a"]], tmp_path / "m")
    m = _manifest(merged)
    assert m["range"] == [0, 16]
    assert m["complete"] is False and m["range_complete"] is False
    st = study_status(merged)
    assert not st["complete"] and not st["range_complete"]


def test_a_merge_keeps_the_extension_record_of_any_part(tmp_path):
    """The part that was extended may come second in the list."""
    run_study(study_from_dict(tiny_config(n_replicates=8)), tmp_path / "a", progress=False)
    extend_study(tmp_path / "a", 16)
    bigger = study_from_dict(json.loads((tmp_path / "a" / "study.json").read_text()))
    run_study(bigger, tmp_path / "p", replicate_range=(8, 16), progress=False)
    merged = merge_studies([tmp_path / "p", tmp_path / "a"], tmp_path / "m")
    assert _manifest(merged)["extended"] == [{"from": 8, "to": 16}]
    assert study_status(merged)["complete"]


def test_a_merge_where_one_task_lacks_units_is_not_complete(tmp_path):
    """Every task must cover the study, not any one of them."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 8,
                         "chunk_size": 8, "lanes": 8, "policies": ["uniform", "ucbe"],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5],
                         "cs_kinds": ["hoeffding"], "seed": 0})
    out = run_study(s, tmp_path / "r", progress=False)
    _edit_manifest(out, lambda m: m.update(chunks={k: c for k, c in m["chunks"].items()
                                                   if c["task"] == "uniform"}))
    merged = merge_studies([out], tmp_path / "m")
    assert _manifest(merged)["complete"] is False
    assert study_status(merged)["done"] == {"uniform": 8, "ucbe": 0}


# ------------------------------------------------------------------ load_results
def test_partial_results_of_a_range_folder_start_at_its_first_unit(folders):  # noqa: F811
    """With ``allow_partial``, a range job's folder (units 8..15) reads as its 8 rows,
    row ``i`` being unit ``8 + i`` (the whole study's rows 8..15)."""
    _, part = load_results(folders["b"], allow_partial=True)
    _, whole = load_results(folders["whole"])
    for k, v in whole["replicates"].items():
        np.testing.assert_array_equal(part["replicates"][k], v[8:16], err_msg=k)
    with pytest.raises(StudyFolderError, match="incomplete \\(starts at 8\\)"):
        load_results(folders["b"])


# ------------------------------------------------------------------ definitions
@pytest.mark.parametrize("syn, key", [
    ({"n_items": 20, "rank": 0}, "data.synthetic.rank"),
    ({"n_items": 20, "rank": 257}, "data.synthetic.rank"),
])
def test_a_synthetic_rank_out_of_range_is_named_by_its_full_path(syn, key):
    """The data's ``rank``, not the study's top-level ``rank`` (a key of its own)."""
    with pytest.raises(StudyConfigError, match=r"expected an integer in \[1, 256\]") as e:
        study_from_dict({"kind": "identification", "data": {"synthetic": syn}})
    assert e.value.key == key and str(e.value).startswith(key + ":")


def test_the_lower_edges_of_anchor_seeds_and_newton_steps_are_accepted():
    """``first_seed`` 0 and ``num_newton`` 0 (no Newton step) are in their ranges."""
    a = study_from_dict({"kind": "anchors", "first_seed": 0, "n_seeds": 1})
    assert (a.first_seed, a.n_seeds) == (0, 1)
    s = study_from_dict({"kind": "identification",
                         "policies": [{"policy": "pulse", "settings": {"num_newton": 0}}]})
    assert dict(s.policies[0].settings) == {"num_newton": 0}
