"""Gaps a third mutation review of ``jaxeval._study`` found (the definitions' checks,
the manifest's fields and how merge and resume compare them, the range arithmetic):
each test fails on a plausible bug the rest of the suite let through."""

import json
import re
import shutil

import numpy as np
import pytest
from test_study import _edit_manifest
from test_study_mutants import folders, importable, tiny_config  # noqa: F401 (fixtures)

from jaxeval import _study
from jaxeval._study import (
    StudyConfigError,
    StudyFolderError,
    data_unchanged,
    load_results,
    load_study,
    merge_studies,
    resume_study,
    run_study,
    study_from_dict,
    study_status,
)


def _refused(d, key, text=""):
    with pytest.raises(StudyConfigError) as e:
        study_from_dict(d)
    assert e.value.key == key and str(e.value).startswith(key + ":")
    assert text in str(e.value)
    return e.value


# ------------------------------------------------------------------ definitions
@pytest.mark.parametrize(
    "patch, key, text",
    [
        ({"data": {"synthetic": {"n_items": 20, "model_scale": 100.5}}},
         "data.synthetic.model_scale", "expected a number in [0.0, 100.0], got 100.5"),
        ({"data": {"synthetic": {"n_items": 20, "difficulty_scale": -0.5}}},
         "data.synthetic.difficulty_scale", "expected a number in [0.0, 100.0], got -0.5"),
        ({"policies": [{"policy": "pulse", "settings": {"synchronized": 1}}]},
         "policies[0].settings.synchronized", "expected true or false, got 1"),
        ({"policies": [{"policy": "pulse", "settings": {"refit": "yes"}}]},
         "policies[0].settings.refit", "expected true or false, got 'yes'"),
    ],
)
def test_identification_settings_out_of_range_or_of_the_wrong_type_are_named(patch, key, text):
    _refused({"kind": "identification", **patch}, key, text)


def test_the_upper_edges_and_every_label_character_are_accepted():
    """The ranges are closed where they say ``[...]``; a label may hold '.', '-', '_'."""
    s = study_from_dict({
        "kind": "identification",
        "data": {"synthetic": {"n_items": 20, "model_scale": 100.0, "rank": 256}},
        "policies": [{"policy": "ucbe", "label": "ucbe-a_0.5",
                      "settings": {"synchronized": True}}]})
    assert dict(s.data.synthetic) == {"n_items": 20, "model_scale": 100.0, "rank": 256}
    assert s.policies[0].name == "ucbe-a_0.5"
    assert dict(s.policies[0].settings) == {"synchronized": True}


def test_load_study_names_the_file_that_is_not_json(tmp_path):
    p = tmp_path / "s.json"
    p.write_text("{not json")
    with pytest.raises(StudyConfigError) as e:
        load_study(p)
    assert e.value.key == str(p)


def test_budgets_that_round_to_one_number_of_calls_are_refused_by_name():
    """K*n = 40 calls: 0.5 and 0.51 both round to 20 calls (two checkpoints of one)."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "budgets": [0.5, 0.51],
                         "data": {"synthetic": {"n_items": 20}}})
    with pytest.raises(StudyConfigError) as e:
        _study.study_budgets(s)
    assert e.value.key == "budgets" and "repeat budgets (20,)" in str(e.value)


def test_flatten_tree_refuses_two_leaves_of_one_name():
    assert set(_study.flatten_tree({"a": {"b": 1.0}, "c": 2.0})) == {"a.b", "c"}
    with pytest.raises(ValueError, match="two leaves of the result are both named 'a.b'"):
        _study.flatten_tree({"a": {"b": 1.0}, "a.b": 2.0})


# ------------------------------------------------------------------ folders
def _copy(src, tmp_path, name):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def test_a_manifest_with_a_target_checksum_of_the_wrong_type_is_refused(folders, tmp_path):  # noqa: F811
    f = _copy(folders["whole"], tmp_path, "f")
    _edit_manifest(f, lambda m: m.update(target_sha256=5))
    with pytest.raises(StudyFolderError, match=r"manifest entry 'target_sha256' is not a str"):
        study_status(f)


def test_a_range_folder_refuses_a_run_over_a_longer_range(folders, tmp_path):  # noqa: F811
    """Folder of units 0:8 asked for 0:16 (same start, other end): refused, unchanged."""
    f = _copy(folders["a"], tmp_path, "f")
    before = (f / "manifest.json").read_text()
    s = study_from_dict(tiny_config())
    with pytest.raises(StudyFolderError, match=r"holds replicates 0:8 of this study, not the "
                                               r"requested 0:16"):
        run_study(s, f, replicate_range=(0, 16), progress=False)
    assert (f / "manifest.json").read_text() == before


def test_a_folder_holding_another_studys_definition_only_is_not_taken(tmp_path):
    """A folder killed while being created may keep its own study.json; one holding
    another study's study.json (and no manifest) is not a place to start this one."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "study.json").write_text(json.dumps(tiny_config(seed=2)))
    with pytest.raises(StudyFolderError, match="is not empty and holds no manifest.json"):
        run_study(study_from_dict(tiny_config()), out, progress=False)
    assert json.loads((out / "study.json").read_text())["seed"] == 2
    assert sorted(p.name for p in out.iterdir()) == ["study.json"]


def test_an_unfinished_range_folder_is_told_to_be_merged_not_resumed(folders):  # noqa: F811
    """The range job 0:8 of 16 starts at unit 0, yet it is a range job: the hint says
    merge, naming its range."""
    with pytest.raises(StudyFolderError, match=r"holds units up to 8 of 16; this folder is "
                                               r"the range job for units 0:8 of 16"):
        load_results(folders["a"])


# ------------------------------------------------------------------ merge_studies
def test_merge_refuses_a_folder_that_is_not_empty_and_leaves_it_alone(folders, tmp_path):  # noqa: F811
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(StudyFolderError, match="is not empty: merge into a new folder"):
        merge_studies([folders["a"], folders["b"]], out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_merge_accepts_parts_whose_name_or_chunk_size_differ(folders, tmp_path):  # noqa: F811
    """Neither the name nor the chunk size decides the numbers (``results_key``):
    range jobs that differ only there merge into the first part's definition."""
    s = study_from_dict(tiny_config(name="other", chunk_size=4))
    b = run_study(s, tmp_path / "b", replicate_range=(8, 16), progress=False)
    with pytest.warns(UserWarning, match="named differently"):  # (said since)
        merged = merge_studies([folders["a"], b], tmp_path / "m")
    study, res = load_results(merged)
    assert study == study_from_dict(tiny_config())
    whole = load_results(folders["whole"])[1]["replicates"]
    for k, v in whole.items():
        assert (res["replicates"][k] == v).all(), k


def test_merge_refuses_parts_of_other_lanes_naming_every_field_that_differs(folders, tmp_path):  # noqa: F811
    """``lanes`` decides the numbers (bit-identical only for a fixed ``lanes``); a part
    differing in it and in the seed is refused with both fields named, each value by
    its folder (it said "there" for the first folder and "here" for the other)."""
    s = study_from_dict(tiny_config(lanes=4, seed=5))
    b = run_study(s, tmp_path / "b", replicate_range=(8, 16), progress=False)
    with pytest.raises(StudyFolderError) as e:
        merge_studies([folders["a"], b], tmp_path / "m")
    msg = str(e.value)
    assert f"{b} holds a different study than {folders['a']}" in msg
    a = folders["a"]
    assert f"'lanes' is 8 in {a} but 4 in {b}" in msg and f"'seed' is 1 in {a} but 5 in {b}" in msg
    assert not (tmp_path / "m").exists()


def test_a_difference_in_a_nested_field_is_named_by_its_full_path():
    """The refusals of another study (folder, merge, study.json) name a nested field by
    its whole path, each value on its side."""
    a = study_from_dict({"kind": "identification", "data": {"synthetic": {"n_items": 20}}})
    b = study_from_dict({"kind": "identification", "data": {"synthetic": {"n_items": 30}},
                         "seed": 4})
    assert _study._describe_diff(a.to_dict(), b.to_dict()) == (
        "'data.synthetic.n_items' is 20 there but 30 here; 'seed' is 0 there but 4 here")


def test_a_partial_merge_of_an_npz_study_keeps_its_data_checksum(tmp_path):
    """The merged manifest records the parts' data checksum: resuming a partial merge
    continues on the same data, and a report refuses the merged folder once the data
    changed."""
    data = tmp_path / "s.npz"
    np.savez(data, scores=(np.random.default_rng(0).random((8, 10)) < 0.5).astype(np.float32))
    s = study_from_dict({"kind": "identification", "data": {"npz": str(data)}, "num_arms": 2,
                         "budgets": [0.5], "n_replicates": 8, "chunk_size": 4, "lanes": 4,
                         "cs_kinds": ["hoeffding"], "policies": ["uniform"]})
    a = run_study(s, tmp_path / "a", replicate_range=(0, 4), progress=False)
    part = merge_studies([a], tmp_path / "m")
    sha = json.loads((a / "manifest.json").read_text())["data_sha256"]
    assert json.loads((part / "manifest.json").read_text())["data_sha256"] == sha
    resume_study(part, progress=False)
    assert study_status(part)["complete"]
    data_unchanged(part, s)
    np.savez(data, scores=np.ones((8, 10), np.float32))
    with pytest.raises(StudyFolderError, match="changed since the study ran"):
        data_unchanged(part, s)


def test_a_merge_one_unit_short_of_the_study_is_not_complete(folders, tmp_path):  # noqa: F811
    merged = merge_studies([folders["short"]], tmp_path / "m")
    man = json.loads((merged / "manifest.json").read_text())
    assert man["complete"] is False and man["range"] == [0, 16]
    assert man["range_complete"] is False  # (as run_study writes it, for pollers)
    assert study_status(merged)["done"] == {"replicates": 15}


def test_merge_takes_a_part_from_before_the_settings_were_recorded(folders, tmp_path):  # noqa: F811
    """A folder without ``numerics`` (written before they were recorded) merges with one
    that has them, and the merged manifest keeps the recorded ones."""
    a = _copy(folders["a"], tmp_path, "a")
    b = _copy(folders["b"], tmp_path, "b")
    _edit_manifest(b, lambda m: m.pop("numerics"))
    merged = merge_studies([a, b], tmp_path / "m")
    man = json.loads((merged / "manifest.json").read_text())
    assert man["complete"] is True and man["range_complete"] is True
    assert man["numerics"] == json.loads((a / "manifest.json").read_text())["numerics"]


@pytest.mark.parametrize("bad", [[0], ["0", 8], [8, 8], [-1, 8], [0, True], "0:8"])
def test_a_manifest_range_that_is_not_two_increasing_integers_is_refused(folders, tmp_path, bad):  # noqa: F811,E501
    """``range: [0]`` failed later with a bare unpacking error, ``["0", 8]`` with a
    comparison of str and int: the manifest is refused as damaged, naming the entry."""
    a = _copy(folders["a"], tmp_path, "a")
    _edit_manifest(a, lambda m: m.update(range=bad))
    with pytest.raises(StudyFolderError, match=r"manifest entry 'range' (must be two integers "
                       r"lo < hi from 0|is missing or not a list)"):
        study_status(a)


def test_a_pool_error_names_the_file_the_study_names(tmp_path):
    """A matrix written by ``to_npz`` from a CSV keeps the CSV's name as its source; an
    error about the study's data names the .npz the study gives, not that CSV."""
    import jaxeval

    mask = np.ones((8, 10), bool)
    mask[:, 0] = False  # every model has a missing cell
    scores = (np.random.default_rng(0).random((8, 10)) < 0.5).astype(np.float32)
    sm = jaxeval.ScoreMatrix(scores, mask=mask, source="mine.csv",
                             models=[f"m{i}" for i in range(8)])
    data = sm.to_npz(tmp_path / "saved.npz")
    assert jaxeval.load(data).source == "mine.csv"
    s = study_from_dict({"kind": "identification", "data": {"npz": str(data)}, "num_arms": 2,
                         "budgets": [0.5], "n_replicates": 4, "chunk_size": 4, "lanes": 4,
                         "cs_kinds": ["hoeffding"], "policies": ["uniform"]})
    with pytest.raises(StudyConfigError, match=re.escape(
            f"data: {data}: the simulation needs the full truth")):
        run_study(s, tmp_path / "out", progress=False)
