"""Gaps a mutation review of the study folder's readers (status, results, merge), the
study definitions' checks and the ``.npz`` loader found: each test fails on a plausible
bug the rest of the suite let through."""

import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_study import _edit_manifest

from jaxeval._io import load_npz
from jaxeval._study import (
    StudyConfigError,
    StudyFolderError,
    load_results,
    load_study,
    merge_studies,
    run_study,
    study_from_dict,
    study_status,
)

TESTS = Path(__file__).resolve().parent


def tiny(key):
    """The replicate function of the tiny studies (``test_study_mutants:tiny``)."""
    x = jax.random.uniform(key, (4,))
    return {"s": jnp.sum(x), "hi": jnp.max(x)}


def tiny_config(**kw):
    d = {"kind": "replicates", "name": "tiny", "target": "test_study_mutants:tiny",
         "n_replicates": 16, "seed": 1, "chunk_size": 8, "lanes": 8}
    d.update(kw)
    return d


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One tiny study run whole, as two range jobs (0:8, 8:16) and as a job one unit short
    of the end (0:15) and one starting a unit early (7:16), computed once."""
    root = tmp_path_factory.mktemp("studies")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(TESTS))
        s = study_from_dict(tiny_config())
        whole = run_study(s, root / "whole", progress=False)
        a = run_study(s, root / "a", replicate_range=(0, 8), progress=False)
        b = run_study(s, root / "b", replicate_range=(8, 16), progress=False)
        short = run_study(s, root / "short", replicate_range=(0, 15), progress=False)
        late = run_study(s, root / "late", replicate_range=(7, 16), progress=False)
    return {"whole": whole, "a": a, "b": b, "short": short, "late": late}


def _copy(src, tmp_path, name="f"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------ study_status
def test_status_of_a_range_job_names_the_study_its_range_and_its_size(folders):
    """Every field of ``study_status``: the name and kind are the study's (not swapped),
    ``units`` is the whole study's size and ``range`` the folder's own units."""
    st = study_status(folders["b"])
    assert st == {
        "name": "tiny",
        "kind": "replicates",
        "range": [8, 16],
        "units": 16,
        "done": {"replicates": 8},
        "range_complete": True,
        "complete": False,
        "todo": {"replicates": []},
        "missing_chunk_files": [],
    }


def test_status_of_a_range_job_killed_after_its_first_task_is_not_range_complete(tmp_path):
    """``range_complete`` needs every task's range done, not any one's."""
    s = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 16,
                         "chunk_size": 8, "lanes": 8, "policies": ["uniform", "ucbe"],
                         "data": {"synthetic": {"n_items": 20}}, "budgets": [0.5],
                         "cs_kinds": ["hoeffding"], "seed": 0})
    out = run_study(s, tmp_path / "r", replicate_range=(0, 8), progress=False)
    assert study_status(out)["range_complete"] is True
    # as if killed after the first task: the second task's chunk never recorded
    _edit_manifest(out, lambda m: m.update(chunks={k: c for k, c in m["chunks"].items()
                                                   if c["task"] == "uniform"}))
    st = study_status(out)
    assert st["done"] == {"uniform": 8, "ucbe": 0}
    assert st["range_complete"] is False and st["complete"] is False


def test_a_manifest_of_another_format_or_with_damaged_entries_is_refused(folders, tmp_path):
    """A manifest of another format, a chunk entry with ``lo >= hi`` and an optional
    entry of the wrong type are refused with the manifest named (``status`` reads none
    of them, so without the checks it answered as if the folder were fine)."""
    for name, edit, match in [
        ("fmt", lambda m: m.update(format="jaxeval-study/0"),
         r"not a jaxeval-study/1 manifest \(format='jaxeval-study/0'\)"),
        ("empty", lambda m: next(iter(m["chunks"].values())).update(hi=0),
         r"chunk entry 'chunks/replicates/\d+-\d+\.npz' is malformed"),
        ("numerics", lambda m: m.update(numerics="threefry"),
         r"manifest entry 'numerics' is not a dict"),
        ("range", lambda m: m.pop("range"), r"manifest entry 'range' is missing or not a list"),
    ]:
        f = _copy(folders["whole"], tmp_path, name)
        _edit_manifest(f, edit)
        with pytest.raises(StudyFolderError, match=match) as e:
            study_status(f)
        assert str(f / "manifest.json") in str(e.value)


def test_a_manifest_that_is_not_json_is_refused_by_name(folders, tmp_path):
    f = _copy(folders["whole"], tmp_path)
    (f / "manifest.json").write_text('{"format": "jaxeval-study/1",')
    with pytest.raises(StudyFolderError, match=r"manifest\.json: manifest is not valid JSON"):
        study_status(f)


# ------------------------------------------------------------------ load_results
def test_load_results_refuses_a_folder_that_does_not_start_at_unit_0(folders):
    """The range job 8:16 ends at the study's last unit: read as a whole study, its 8
    rows would pass for units 0..7."""
    with pytest.raises(StudyFolderError, match=r"task 'replicates' is incomplete "
                                               r"\(starts at 8\)"):
        load_results(folders["b"])
    _, res = load_results(folders["b"], allow_partial=True)
    whole = load_results(folders["whole"])[1]["replicates"]
    np.testing.assert_array_equal(res["replicates"]["s"], whole["s"][8:])


def test_a_deleted_chunk_file_is_named_not_a_raw_file_error(folders, tmp_path):
    """A chunk file gone from disk is reported like a corrupt one (resume recomputes it),
    by ``load_results`` and ``merge_studies`` alike."""
    f = _copy(folders["whole"], tmp_path)
    gone = next((f / "chunks" / "replicates").iterdir())
    gone.unlink()
    with pytest.raises(StudyFolderError, match=r"1 chunk file\(s\) missing or failing their "
                                               r"checksum.*jaxeval resume"):
        load_results(f)
    with pytest.raises(StudyFolderError, match="missing or failing their checksum"):
        merge_studies([f], tmp_path / "m")
    st = study_status(f, verify=True)
    assert st["missing_chunk_files"] == [f"chunks/replicates/{gone.name}"]
    assert st["corrupt_chunk_files"] == [] and not st["complete"]


def test_load_results_refuses_a_folder_one_unit_short(folders):
    with pytest.raises(StudyFolderError, match=r"holds units up to 15 of 16"):
        load_results(folders["short"])
    assert load_results(folders["short"], allow_partial=True)[1]["replicates"]["s"].shape \
        == (15,)


# ------------------------------------------------------------------ merge_studies
def test_merge_of_no_folders_is_refused(tmp_path):
    with pytest.raises(ValueError, match="merge_studies: 'dirs' is empty"):
        merge_studies([], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_merge_refuses_a_folder_with_a_corrupt_chunk(folders, tmp_path):
    """A damaged chunk is refused by name, not merged (nor silently left out of an
    incomplete merge)."""
    a, b = _copy(folders["a"], tmp_path, "a"), _copy(folders["b"], tmp_path, "b")
    hit = next((b / "chunks" / "replicates").iterdir())
    raw = bytearray(hit.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    hit.write_bytes(bytes(raw))
    with pytest.raises(StudyFolderError, match=r"1 chunk file\(s\) missing or failing their "
                                               r"checksum.*jaxeval resume"):
        merge_studies([a, b], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_merge_refuses_ranges_that_share_a_single_unit(folders, tmp_path):
    with pytest.raises(StudyFolderError, match=r"task 'replicates': units 7:8 are in both"):
        merge_studies([folders["a"], folders["late"]], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_merged_folder_records_its_parts_settings_and_definition(folders, tmp_path):
    """The merged manifest keeps the JAX settings the parts were computed under (not
    those of the process that merged them), and the folder gets its ``study.json``."""
    a, b = _copy(folders["a"], tmp_path, "a"), _copy(folders["b"], tmp_path, "b")
    theirs = None
    for f in (a, b):
        def flip(m):
            nonlocal theirs
            m["numerics"]["threefry_partitionable"] = not m["numerics"]["threefry_partitionable"]
            theirs = m["numerics"]
        _edit_manifest(f, flip)
    merged = merge_studies([a, b], tmp_path / "m")
    man = json.loads((merged / "manifest.json").read_text())
    assert man["numerics"] == theirs
    assert man["merged_from"] == [str(a), str(b)]
    assert json.loads((merged / "study.json").read_text()) == tiny_config()
    assert load_study(merged) == study_from_dict(tiny_config())


# ------------------------------------------------------------------ definitions
@pytest.mark.parametrize(
    "patch, key, text",
    [
        ({"n_replicates": True}, "n_replicates", "expected an integer, got True"),
        ({"alpha": 1}, "alpha", "expected a number in (0.0, 1.0), got 1.0"),
        ({"rank": 0}, "rank", "expected an integer in [1, 256], got 0"),
        ({"rank": 257}, "rank", "expected an integer in [1, 256], got 257"),
        ({"budgets": [True]}, "budgets[0]", "got True"),
        ({"budgets": [0.5, float("nan")]}, "budgets[1]", "got nan"),
        ({"policies": [{"policy": "ucbe", "settings": {"a": float("nan")}}]},
         "policies[0].settings.a", "got nan"),
        ({"data": {}}, "data", "give exactly one of 'dataset', 'npz', 'synthetic'; got []"),
        ({"data": {"synthetic": {"n_items": 1}}}, "data.synthetic.n_items",
         "expected an integer >= 2, got 1"),
        ({"policies": [{"policy": "ucbe", "label": "ucbe a=2"}]}, "policies[0].label",
         "use letters, digits"),
        ({"policies": [{"policy": "ucbe", "settings": {"batch_size": 0}}]},
         "policies[0].settings.batch_size", "expected an integer in [1, 10000], got 0"),
        ({"policies": [{"policy": "pulse", "settings": {"use_predictions": 1}}]},
         "policies[0].settings.use_predictions", "expected true or false, got 1"),
        ({"policies": [{"policy": "pulse", "settings": {"lam0": 1.5}}]},
         "policies[0].settings.lam0", "expected a number in [0.0, 1.0], got 1.5"),
        ({"instance_assignment": "balanced", "data": {"synthetic": {"n_items": 20}}},
         "instance_assignment", "'balanced' is for real data"),
        ({"budgets": [0.5, 0.5]}, "budgets", "expected strictly increasing fractions"),
        ({"cs_kinds": ["eb", "eb"]}, "cs_kinds", "repeated kinds in ('eb', 'eb')"),
    ],
)
def test_identification_values_of_the_wrong_kind_are_refused_by_name(patch, key, text):
    """A boolean is not a number, NaN is in no range, and upper bounds hold."""
    with pytest.raises(StudyConfigError) as e:
        study_from_dict({"kind": "identification", **patch})
    assert e.value.key == key
    assert str(e.value).startswith(key + ":") and text in str(e.value)


@pytest.mark.parametrize(
    "patch, key, text",
    [
        ({"methods": ["auto", "auto"]}, "methods", "repeated methods"),
        ({"k": [20, 20]}, "k", "expected strictly increasing anchor counts"),
        ({"chunk_size": 0}, "chunk_size", "expected an integer in [1, 2147483648], got 0"),
    ],
)
def test_anchor_repeats_are_refused_by_name(patch, key, text):
    with pytest.raises(StudyConfigError) as e:
        study_from_dict({"kind": "anchors", **patch})
    assert e.value.key == key and text in str(e.value)


@pytest.mark.parametrize(
    "d, key, text",
    [
        (tiny_config(target="a:b:c"), "target", "expected 'module:function', got 'a:b:c'"),
        ({k: v for k, v in tiny_config().items() if k != "target"}, "target",
         "required key is missing"),
        ([tiny_config()], "<study>", "expected a JSON object, got list"),
    ],
)
def test_replicate_definitions_and_non_objects_are_refused_by_name(d, key, text):
    with pytest.raises(StudyConfigError) as e:
        study_from_dict(d)
    assert e.value.key == key and text in str(e.value)


def test_the_edges_of_the_ranges_are_accepted():
    """The lower edges are inclusive: a negative difficulty mean, no Newton step."""
    s = study_from_dict({
        "kind": "identification", "budgets": [1.0],
        "data": {"synthetic": {"n_items": 2, "difficulty_mean": -1.5}},
        "policies": [{"policy": "pulse", "settings": {"num_newton": 0, "lam0": 1.0}}]})
    assert dict(s.data.synthetic) == {"n_items": 2, "difficulty_mean": -1.5}
    assert dict(s.policies[0].settings) == {"num_newton": 0, "lam0": 1.0}


# ---------------------------------------------------------------------- load_npz
def test_load_npz_notes_its_conversions_under_saved_metadata_without_any(tmp_path):
    """A file with ``metadata_json`` but no ``conversions`` list still records the
    uint8 -> float32 conversion."""
    p = tmp_path / "m.npz"
    np.savez(p, scores=np.array([[0, 1], [1, 0]], np.uint8),
             metadata_json=np.array(json.dumps({"origin": "test"})))
    sm = load_npz(p)
    assert sm.metadata["origin"] == "test"
    assert sm.metadata["conversions"] == ["uint8 0/1 scores converted to float32"]
    assert sm.scores.dtype == np.float32


def test_load_npz_notes_boolean_scores_converted(tmp_path):
    p = tmp_path / "b.npz"
    np.savez(p, scores=np.array([[True, False], [False, True]]))
    sm = load_npz(p)
    assert sm.metadata["conversions"] == ["bool 0/1 scores converted to float32"]
    np.testing.assert_array_equal(sm.scores, np.eye(2, dtype=np.float32))


def test_a_data_string_ending_in_npz_in_any_case_is_a_file():
    s = study_from_dict({"kind": "identification", "data": "Scores.NPZ"}, check=False)
    assert s.data.npz == "Scores.NPZ" and s.data.dataset is None
    assert study_from_dict({"kind": "anchors", "data": "oll2_musr"}).data.dataset == "oll2_musr"


def test_load_npz_refuses_an_unknown_duplicate_names_option(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, scores=np.zeros((2, 3), np.float32), models=np.array(["a", "a"]))
    with pytest.raises(ValueError, match="duplicate_names must be 'error' or 'rename', "
                                         "got 'keep'"):
        load_npz(p, duplicate_names="keep")


def test_load_npz_names_a_compressed_file_whose_data_does_not_inflate(tmp_path):
    """A deflated member whose bytes are not a deflate stream raises ``zlib.error``
    inside numpy: it is a ValueError naming the file, like any other damage."""
    buf = io.BytesIO()
    np.save(buf, np.zeros((4, 5), np.float32))
    p = tmp_path / "z.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("scores.npy", buf.getvalue())
    with zipfile.ZipFile(p) as z:
        info = z.infolist()[0]
    raw = bytearray(p.read_bytes())
    n_name, n_extra = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + n_name + n_extra
    raw[start:start + info.compress_size] = b"\xff" * info.compress_size  # reserved blocks
    p.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"z\.npz: not a readable \.npz file \(error: "):
        load_npz(p)


def test_load_npz_refuses_metadata_json_that_is_not_an_object(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, scores=np.zeros((2, 3), np.float32), metadata_json=np.array("[1, 2]"))
    with pytest.raises(ValueError, match="m.npz: field 'metadata_json' must hold a JSON "
                                         "object"):
        load_npz(p)


def test_load_npz_keeps_an_is_source_array_as_a_list(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, scores=np.zeros((3, 2), np.float32), is_source=np.array([True, False, True]),
             theta_note=np.array("irt 2pl"))
    meta = load_npz(p).metadata
    assert meta["is_source"] == [True, False, True]
    assert meta["theta_note"] == "irt 2pl"


def test_load_npz_renames_repeated_item_names_too(tmp_path):
    p = tmp_path / "m.npz"
    np.savez(p, scores=np.zeros((2, 3), np.float32), models=np.array(["a", "a"]),
             items=np.array(["q", "r", "q"]))
    sm = load_npz(p, duplicate_names="rename")
    assert list(sm.models) == ["a", "a#2"]
    assert list(sm.items) == ["q", "r", "q#2"]
