"""ScoreMatrix validation, helpers and the bundled datasets."""

import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix


def test_bundled_datasets_load():
    for name in jaxeval.datasets.names():
        sm = jaxeval.load(name)
        assert sm.scores.dtype == np.float32 and sm.mask.dtype == bool
        assert sm.is_complete and sm.is_binary
        assert sm.metadata["licence"] == "MIT"
        assert len(set(sm.models.tolist())) == sm.n_models


def test_scores_outside_unit_interval_refused():
    with pytest.raises(ValueError, match=r"'scores' must lie in \[0, 1\].*row 1, column 0"):
        ScoreMatrix(np.array([[0.0, 1.0], [1.5, 0.0]]), source="x.npz")


def test_nan_without_mask_is_unobserved_and_noted():
    sm = ScoreMatrix(np.array([[np.nan, 1.0], [0.0, 1.0]]))
    assert sm.mask.tolist() == [[False, True], [True, True]]
    assert sm.scores[0, 0] == 0.0
    assert "NaN" in sm.metadata["conversions"][0]


def test_nan_marked_observed_refused():
    with pytest.raises(ValueError, match="NaN cells marked observed"):
        ScoreMatrix(np.array([[np.nan, 1.0]]), mask=np.ones((1, 2), bool))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(scores=np.zeros((0, 3))), "empty"),
        (dict(scores=np.zeros(3)), "2-D"),
        (dict(scores=np.zeros((2, 2)), models=["a", "a"]), "duplicate names"),
        (dict(scores=np.zeros((2, 2)), items=["a"]), "'items' must be a 1-D array of 2"),
        (dict(scores=np.zeros((2, 2)), mask=np.ones((2, 3), bool)), "'mask' has shape"),
        (dict(scores=np.zeros((2, 2)), target=np.array([0.5, 50.0])), "fractions, not percent"),
        (dict(scores=np.zeros((2, 2)), target=np.array([np.inf, 0.5])), "'target' holds inf"),
    ],
)
def test_bad_input_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScoreMatrix(**kwargs)


def test_frozen_and_readonly():
    sm = ScoreMatrix(np.eye(3))
    with pytest.raises(ValueError):
        sm.scores[0, 0] = 0.5
    with pytest.raises(AttributeError):
        sm.scores = np.zeros((3, 3))


def test_take_drop_duplicates_and_accuracy():
    s = np.array([[1, 0, 1, 1], [1, 0, 1, 1], [0, 0, 0, 1]], dtype=float)
    sm = ScoreMatrix(s, models=["a", "b", "c"], target=[0.1, 0.2, 0.3])
    d = sm.drop_duplicates()
    assert d.models.tolist() == ["a", "c"]
    assert d.metadata["dropped_duplicates"] == ["b"]
    np.testing.assert_allclose(d.accuracy(), [0.75, 0.25])
    np.testing.assert_allclose(d.true_score(), [0.1, 0.3])
    t = sm.take(models=["c", "a"], items=[3, 0])
    assert t.scores.tolist() == [[1, 0], [1, 1]]
    with pytest.raises(KeyError, match="unknown model names"):
        sm.take(models=["zz"])


def test_take_refuses_ambiguous_selections():
    """A float index is not truncated, a bare name is one name (not its letters), a
    nested list is not flattened, a repeated row is named."""
    sm = ScoreMatrix(np.random.default_rng(0).integers(0, 2, (6, 4)),
                     models=[f"model_{i}" for i in range(6)])
    assert sm.take(models="model_1").models.tolist() == ["model_1"]
    assert sm.take(models=3).models.tolist() == ["model_3"]
    assert sm.take(models=range(2)).models.tolist() == ["model_0", "model_1"]
    with pytest.raises(TypeError, match="models: expected integer indices.*float64"):
        sm.take(models=[1.7])
    with pytest.raises(ValueError, match=r"models: expected a 1-D selection, got shape \(1, 2\)"):
        sm.take(models=[[0, 1]])
    with pytest.raises(ValueError, match=r"models: the selection repeats \['model_2'\]"):
        sm.take(models=[2, 2])
    with pytest.raises(ValueError, match="selection is empty"):
        sm.take(models=[])


def test_splits_are_seeded_and_disjoint():
    sm = ScoreMatrix(np.random.default_rng(0).integers(0, 2, (50, 7)))
    a = sm.split([0.6, 0.2], seed=3)
    b = sm.split([0.6, 0.2], seed=3)
    assert [x.n_models for x in a] == [30, 10, 10]
    assert all((x.models == y.models).all() for x, y in zip(a, b))
    names = np.concatenate([x.models for x in a])
    assert len(set(names.tolist())) == 50
    with pytest.raises(ValueError, match="need 60 models"):
        sm.split([30, 30])
    # fractions are rounded cumulatively: summing to 1 they use every model, no extra group
    for m, fr in ((427, [0.6, 0.2, 0.2]), (5, [0.5, 0.5]), (7, [0.5, 0.5]), (8, [0.6, 0.2, 0.2])):
        groups = ScoreMatrix(np.eye(m)).split(fr)
        assert len(groups) == len(fr) and sum(g.n_models for g in groups) == m, (m, fr)
    assert [g.n_models for g in sm.split([0.8])] == [40, 10]
    assert [g.n_models for g in sm.split(np.array([5, 5]))] == [5, 5, 40]
    with pytest.raises(TypeError, match=r"for one training group: split\(\[0.8\]\)"):
        sm.split(0.8)
    with pytest.raises(ValueError, match="finite numbers"):
        sm.split([float("nan")])
    with pytest.raises(ValueError, match="split: seed: expected an integer >= 0, got -1"):
        sm.split([10], seed=-1)
    with pytest.raises(TypeError, match="protocol_split: seed: expected an integer >= 0, "
                                        "got NoneType None"):
        sm.protocol_split(None)  # would silently draw a random split
    p = sm.protocol_split(42)
    perm = np.random.default_rng(42).permutation(50)
    assert p.test.models.tolist() == sm.models[perm[:10]].tolist()
    assert p.validation.n_models == 10 and p.train.n_models == 30
    train, validation, test = p  # a Split unpacks in its fields' order
    assert (train, validation, test) == (p.train, p.validation, p.test)
    from jaxeval._data import as_score_matrix

    with pytest.raises(TypeError, match=r"data: expected a ScoreMatrix, got a Split \(pass "
                                        r"split.train"):
        as_score_matrix(p, "data")  # (it would read as an array of three matrices)


def test_split_pool_is_seeded_disjoint_and_checked():
    sm = ScoreMatrix(np.random.default_rng(1).integers(0, 2, (40, 5)))
    train, pool = sm.split_pool(0.75, seed=7)
    assert (train.n_models, pool.n_models) == (30, 10)
    assert not set(train.models.tolist()) & set(pool.models.tolist())
    perm = np.random.default_rng(7).permutation(40)
    assert train.models.tolist() == sm.models[perm[:30]].tolist()
    t2, p2 = sm.split_pool(30, seed=7)
    assert t2.models.tolist() == train.models.tolist()
    assert sm.split_pool(30, seed=8)[0].models.tolist() != train.models.tolist()
    with pytest.raises(ValueError, match=r"fractional 'n_train' must lie in \(0, 1\), got 1.5"):
        sm.split_pool(1.5)
    with pytest.raises(ValueError, match="at least one model on each side; got 40 -> 40 of 40"):
        sm.split_pool(40)
    with pytest.raises(TypeError, match="'n_train' must be an int or a float"):
        sm.split_pool("half")


def test_rename_duplicates_never_makes_an_existing_name():
    from jaxeval._data import rename_duplicates

    notes: dict = {}
    out = rename_duplicates(["a", "a", "a#2", "a"], "models", notes).tolist()
    assert len(set(out)) == 4 and out[2] == "a#2" and out[0] == "a"
    assert any("made unique" in c for c in notes["conversions"])


def test_non_numeric_target_names_the_field():
    with pytest.raises(ValueError, match=r"x.csv: field 'target' must hold numbers"):
        ScoreMatrix(np.eye(2), target=["a", "b"], source="x.csv")


def test_derived_matrices_do_not_share_metadata_lists():
    sm = ScoreMatrix(np.array([[np.nan, 1.0], [0.0, 1.0]]))  # a NaN note in conversions
    sub = sm.take(models=[0])
    sub.metadata["conversions"].append("edited")
    assert "edited" not in sm.metadata["conversions"]


def test_complex_scores_and_targets_are_refused():
    with pytest.raises(TypeError, match="'scores' must be real numbers, got dtype complex128"):
        ScoreMatrix(np.array([[0.5 + 0.9j, 1.0]]))
    with pytest.raises(ValueError, match="'target' must hold numbers.*complex"):
        ScoreMatrix(np.eye(2), target=np.array([0.5 + 1j, 0.2]))


def test_drop_duplicates_can_compare_the_external_target():
    sm = ScoreMatrix(np.array([[1, 0], [1, 0], [0, 1], [1, 0]]),
                     target=np.array([0.8, 0.3, 0.5, 0.8]))
    assert sm.drop_duplicates().models.tolist() == ["model_0", "model_2"]
    kept = sm.drop_duplicates(include_target=True)
    assert kept.models.tolist() == ["model_0", "model_1", "model_2"]
    assert kept.metadata["dropped_duplicates"] == ["model_3"]
    # without a target the option changes nothing
    plain = ScoreMatrix(sm.scores)
    assert plain.drop_duplicates(include_target=True).n_models == 2
    with pytest.raises(TypeError, match="include_target"):
        sm.drop_duplicates(include_target="yes")


def _half_a_zip_then_disk_full(fh, **arrays):
    """Stands in for np.savez: writes part of a file, then fails as a full disk does."""
    fh.write(b"PK\x03\x04 half a zip")
    raise OSError(28, "No space left on device")


def test_to_npz_is_atomic_and_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    """A write that fails half-way (a kill, a full disk) leaves the previous file as it
    was and no partial one (the file was opened in place and written through)."""
    sm = ScoreMatrix(np.array([[1.0, 0.0], [0.5, 1.0]], np.float32))
    p = sm.to_npz(tmp_path / "m.npz")
    before = p.read_bytes()

    monkeypatch.setattr(np, "savez_compressed", _half_a_zip_then_disk_full)
    with pytest.raises(OSError, match="No space left"):
        ScoreMatrix(np.zeros((3, 2), np.float32)).to_npz(p)
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.npz"]
    monkeypatch.undo()
    assert jaxeval.load(p).shape == (2, 2)


def test_a_killed_writers_temporary_file_is_removed_by_the_next_save(tmp_path):
    """A ``kill -9`` during a save leaves ``.tmp-<pid>-<name>`` beside the file; the
    next successful save of that file removes it once its writer is gone and it is
    stale, and leaves alone a live writer's, a fresh one, and other files' ones."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(done.stdout)  # a process that has exited
    old = 3 * 3600.0
    files = {
        f".tmp-{dead}-m.npz": old,            # killed writer, stale: removed
        ".tmp-999999999-m.npz": old,          # no such pid: removed
        f".tmp-{os.getppid()}-m.npz": old,    # a live process: kept
        f".tmp-{dead + 10**9}-m.npz": 0.0,    # just written (another host's writer): kept
        f".tmp-{dead}-other.npz": old,        # another file's: kept
        ".tmp-x-m.npz": old,                  # not a pid: kept
    }
    for name, age in files.items():
        (tmp_path / name).write_bytes(b"partial")
        t = os.path.getmtime(tmp_path / name) - age
        os.utime(tmp_path / name, (t, t))
    ScoreMatrix(np.array([[1.0, 0.0], [0.5, 1.0]], np.float32)).to_npz(tmp_path / "m.npz")
    left = sorted(x.name for x in tmp_path.iterdir())
    assert left == sorted(["m.npz"] + [n for n in files if n not in (
        f".tmp-{dead}-m.npz", ".tmp-999999999-m.npz")]), left


def test_anchor_predictor_save_is_atomic(tmp_path, monkeypatch):
    sm = jaxeval.load("oll2_musr").drop_duplicates().take(models=np.arange(60))
    pred = jaxeval.fit_anchors(sm, 5, method="random_mean", seed=0)
    p = pred.save(tmp_path / "p.npz")
    before = p.read_bytes()

    monkeypatch.setattr(np, "savez", _half_a_zip_then_disk_full)
    with pytest.raises(OSError, match="No space left"):
        pred.save(p, overwrite=True)
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.npz"]


def test_numpy_masked_array_cells_are_unobserved():
    """A numpy masked array's mask is honoured (it read as observed), alone or with an
    explicit mask, and noted."""
    ma = np.ma.masked_array([[1.0, 0.5], [0.0, 1.0]], mask=[[0, 1], [0, 0]])
    sm = ScoreMatrix(ma)
    assert sm.mask.tolist() == [[True, False], [True, True]]
    assert sm.accuracy().tolist() == [1.0, 0.5]
    assert any("masked cells of a numpy masked array" in c for c in sm.metadata["conversions"])
    both = ScoreMatrix(ma, mask=np.array([[1, 1], [0, 1]], bool))
    assert both.mask.tolist() == [[True, False], [False, True]]
    # a masked cell may hold anything, even NaN or a value outside [0, 1]
    odd = np.ma.masked_array([[np.nan, 7.0], [0.0, 1.0]], mask=[[1, 1], [0, 0]])
    assert ScoreMatrix(odd).mask.tolist() == [[False, False], [True, True]]


def test_numpy_masked_array_as_mask_reads_its_masked_entries_as_unobserved():
    """A masked entry of a masked array given as ``mask`` says nothing about the cell:
    it is unobserved (whatever value it holds underneath, even one not 0/1), noted."""
    scores = np.array([[1.0, 0.0], [0.5, 1.0]])
    m = np.ma.masked_array([[1, 7], [1, 1]], mask=[[0, 1], [0, 0]])
    sm = ScoreMatrix(scores, mask=m)
    assert sm.mask.tolist() == [[True, False], [True, True]]
    assert sm.accuracy().tolist() == [1.0, 0.75]
    assert any("given as 'mask'" in c for c in sm.metadata["conversions"])
    plain = ScoreMatrix(scores, mask=np.ma.masked_array([[1, 0], [1, 1]]))  # nothing masked
    assert plain.mask.tolist() == [[True, False], [True, True]]
    assert "conversions" not in plain.metadata


def test_take_and_split_carry_per_model_metadata_along():
    """Per-model notes follow the rows taken (is_source) and the synthetic truth's
    arrays the rows and items taken; its whole-matrix best/gap/status are cleared."""
    sm = ScoreMatrix(np.eye(4), metadata={"is_source": [True, False, False, True], "x": 1})
    sub = sm.take(models=[3, 1])
    assert sub.metadata["is_source"] == [True, False] and sub.metadata["x"] == 1
    assert sm.take().metadata["is_source"] == [True, False, False, True]
    syn = jaxeval.synthetic_score_matrix(seed=3, n_models=10, n_items=50, gap=0.1)
    truth = syn.metadata["synthetic"]
    rows, cols = np.array([7, 2, 5]), np.arange(0, 50, 2)
    part = syn.take(models=rows, items=cols).metadata["synthetic"]
    np.testing.assert_array_equal(part["probabilities"], truth["probabilities"][np.ix_(rows, cols)])
    np.testing.assert_array_equal(part["U"], truth["U"][rows])
    np.testing.assert_array_equal(part["V"], truth["V"][cols])
    np.testing.assert_array_equal(part["c"], truth["c"][cols])
    assert part["best"] is None and part["gap"] is None and "cleared" in part["subset_note"]
    assert truth["best"] is not None  # the original is untouched
    for group in syn.split([5]):
        assert group.metadata["synthetic"]["probabilities"].shape == (5, 50)


def test_split_sizes_from_a_generator_and_names_from_an_object_array():
    sm = ScoreMatrix(np.eye(10))
    assert [g.n_models for g in sm.split(x for x in [3, 3])] == [3, 3, 4]
    with pytest.raises(TypeError, match="split: 'sizes' must be a sequence"):
        sm.split(None)
    names = np.array(["model_4", "model_0"], dtype=object)  # as a pandas Series holds them
    assert sm.take(models=names).models.tolist() == ["model_4", "model_0"]


def test_metadata_none_read_only_and_odd_keys():
    """metadata=None is no metadata; a read-only mapping nested inside is copied; keys
    JSON cannot write (numpy ints, tuples) are saved as their str."""
    import types

    assert dict(ScoreMatrix(np.eye(2), metadata=None).metadata) == {}
    with pytest.raises(TypeError, match="field 'metadata' must be a mapping"):
        ScoreMatrix(np.eye(2), metadata=[1])
    inner = ScoreMatrix(np.eye(2), metadata={"a": [1]}).metadata
    assert isinstance(inner, types.MappingProxyType)
    outer = ScoreMatrix(np.eye(2), metadata={"parent": inner})
    assert outer.metadata["parent"]["a"] == [1]


def test_to_npz_writes_odd_metadata_keys_as_text(tmp_path):
    sm = ScoreMatrix(np.eye(2), metadata={"per_model": {np.int64(0): "x"}, "t": {(1, 2): 3}})
    sm.to_npz(tmp_path / "m.npz")
    back = jaxeval.load(tmp_path / "m.npz")
    assert back.metadata["per_model"] == {"0": "x"} and back.metadata["t"] == {"(1, 2)": 3}


def test_saved_synthetic_truth_still_follows_take(tmp_path):
    """After to_npz and load the truth's arrays are lists; take still realigns them."""
    syn = jaxeval.synthetic_score_matrix(seed=1, n_models=4, n_items=6, gap=0.2)
    syn.to_npz(tmp_path / "s.npz")
    back = jaxeval.load(tmp_path / "s.npz")
    part = back.take(models=[2, 0], items=[1, 3, 5]).metadata["synthetic"]
    want = np.asarray(syn.metadata["synthetic"]["probabilities"])[np.ix_([2, 0], [1, 3, 5])]
    np.testing.assert_allclose(np.asarray(part["probabilities"]), want, rtol=1e-6)
    assert np.asarray(part["U"]).shape[0] == 2 and np.asarray(part["V"]).shape[0] == 3
    assert part["best"] is None


def test_package_ships_py_typed_and_only_mit_datasets():
    """PEP 561: the annotations reach type checkers (``py.typed`` is in the package and in
    its package data); the package data holds only the MIT-licensed matrices."""
    import pathlib

    root = pathlib.Path(jaxeval.__file__).parent
    assert (root / "py.typed").is_file()
    # every data file in the package is one of the registered MIT matrices (a stray
    # copy of a non-commercial matrix would be shipped by the "*.npz" pattern)
    shipped = sorted(p.name for p in (root / "datasets").iterdir()
                     if p.is_file() and p.suffix not in (".py", ".pyc"))
    registered = sorted(jaxeval.load(name).metadata["file"] for name in jaxeval.datasets.names())
    assert shipped == sorted([*registered, "LICENSE.md"])
    pyproject = root.parent / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not a source checkout")
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["jaxeval"]


def test_repr_counts_a_few_missing_cells():
    """One unscored cell of a 100 x 100 matrix is not shown as "0.0% missing"."""
    s = np.ones((100, 100))
    assert "0.0% missing" in repr(jaxeval.ScoreMatrix(s))
    s[3, 4] = np.nan
    assert "binary, 1 cell missing" in repr(jaxeval.ScoreMatrix(s))
    s[7, :3] = np.nan
    assert "4 cells missing" in repr(jaxeval.ScoreMatrix(s))
    s[:5] = np.nan
    assert "5.0% missing" in repr(jaxeval.ScoreMatrix(s))


def test_a_dataframe_names_its_models_and_items():
    """A pandas DataFrame's index and columns name the models and items (they were
    dropped for model_0, item_0, ...: anchors were then reported as "item_19"); a
    nullable column's NA is an unobserved cell; text columns are refused by name."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame([[1, 0, 1], [0, 0, 1]], index=["gpt-x", "llama-y"],
                      columns=["q1", "q2", "q3"])
    sm = ScoreMatrix(df)
    assert sm.models.tolist() == ["gpt-x", "llama-y"] and sm.items.tolist() == ["q1", "q2", "q3"]
    np.testing.assert_array_equal(sm.scores, [[1, 0, 1], [0, 0, 1]])
    assert ScoreMatrix(df, models=["a", "b"]).models.tolist() == ["a", "b"]  # given: kept
    plain = ScoreMatrix(pd.DataFrame([[1.0, 0.0], [0.0, 1.0]]))  # pandas' default labels
    assert plain.models.tolist() == ["model_0", "model_1"]
    assert plain.items.tolist() == ["item_0", "item_1"]
    nullable = pd.DataFrame({"q1": pd.array([1, None], dtype="Int64"),
                             "q2": pd.array([True, False], dtype="boolean"),
                             "q3": [0.5, 0.25]}, index=["a", "b"])
    sm = ScoreMatrix(nullable)
    np.testing.assert_array_equal(sm.mask, [[True, True, True], [False, True, True]])
    np.testing.assert_allclose(sm.scores, [[1, 1, 0.5], [0, 0, 0.25]])
    assert "1 NaN cells read as unobserved" in sm.metadata["conversions"][0]
    with pytest.raises(TypeError, match=r"DataFrame column\(s\) \['q1'\] are not"):
        ScoreMatrix(pd.DataFrame({"q1": ["1", "0"], "q2": [1, 0]}))
    with pytest.raises(ValueError, match="field 'items' has duplicate names"):
        ScoreMatrix(pd.DataFrame([[1, 0]], index=["a"], columns=["x", "x"]))
    with pytest.raises(TypeError, match=r"is read by jaxeval.ScoreMatrix\(df\)"):
        jaxeval.load(df)


def test_score_matrices_splits_and_fits_pickle_and_deep_copy():
    """multiprocessing, joblib and copy.deepcopy need pickling: the read-only metadata
    (a MappingProxyType, which pickle refuses) travels as a dict and comes back
    read-only, the arrays come back equal and still read-only."""
    import copy
    import pickle
    import types

    sm = jaxeval.synthetic_score_matrix(0, 12, 30)
    lr = jaxeval.fit_factorization(sm, 2, 1.0, num_steps=20)
    for back in (pickle.loads(pickle.dumps(sm)), copy.deepcopy(sm)):
        assert isinstance(back, ScoreMatrix) and back is not sm
        for f in ("scores", "mask", "models", "items"):
            np.testing.assert_array_equal(getattr(back, f), getattr(sm, f))
            assert not getattr(back, f).flags.writeable
        assert isinstance(back.metadata, types.MappingProxyType)
        np.testing.assert_array_equal(back.metadata["synthetic"]["probabilities"],
                                      sm.metadata["synthetic"]["probabilities"])
        with pytest.raises(TypeError):
            back.metadata["x"] = 1
        assert repr(back) == repr(sm)
    deep = copy.deepcopy(sm)
    assert deep.metadata["synthetic"] is not sm.metadata["synthetic"]  # a deep copy
    split = pickle.loads(pickle.dumps(sm.protocol_split(0)))
    np.testing.assert_array_equal(split.test.scores, sm.protocol_split(0).test.scores)
    for back in (pickle.loads(pickle.dumps(lr)), copy.deepcopy(lr)):
        assert isinstance(back.info, types.MappingProxyType) and dict(back.info) == dict(lr.info)
        assert not back.V.flags.writeable
        np.testing.assert_array_equal(back.predict(sm.scores[:3], sm.mask[:3]),
                                      lr.predict(sm.scores[:3], sm.mask[:3]))
