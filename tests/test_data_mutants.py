"""Gaps a mutation review of the data layer, loaders, synthetic truth, metrics and
reports found: each test fails on a plausible bug the rest of the suite let through."""

import json
import re

import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval
from jaxeval import ScoreMatrix
from jaxeval._io import load_npz
from jaxeval._lmeval import load_lm_eval


# ------------------------------------------------------------------ ScoreMatrix
def test_scores_a_rounding_error_above_one_are_refused():
    """[0, 1] is closed and exact: no tolerance above 1 (a float32 1 + eps as well)."""
    for hi in (1.0 + 1e-7, float(np.nextafter(np.float32(1.0), np.float32(2.0)))):
        with pytest.raises(ValueError, match=r"'scores' must lie in \[0, 1\].*row 0, column 1"):
            ScoreMatrix(np.array([[0.5, hi]]))
    assert ScoreMatrix(np.array([[0.0, 1.0]])).scores.tolist() == [[0.0, 1.0]]
    for bad in (np.inf, -np.inf):  # named as such, not as a value outside [0, 1]
        with pytest.raises(ValueError, match="infinite values in observed cells"):
            ScoreMatrix(np.array([[0.5, bad]]))


def test_take_and_split_keep_each_target_with_its_model():
    target = np.linspace(0.05, 0.95, 10)
    sm = ScoreMatrix(np.eye(10), target=target)
    sub = sm.take(models=[7, 2, 5])
    np.testing.assert_array_equal(sub.target, target[[7, 2, 5]].astype(np.float32))
    for group in sm.split([4, 3], seed=1):
        rows = [int(m.split("_")[1]) for m in group.models]
        np.testing.assert_array_equal(group.target, target[rows].astype(np.float32))
        np.testing.assert_array_equal(group.scores, np.eye(10, dtype=np.float32)[rows])


def test_drop_duplicates_tells_an_unobserved_cell_from_a_zero():
    sm = ScoreMatrix(np.array([[1.0, 0.0], [1.0, np.nan], [1.0, 0.0]]), models=["a", "b", "c"])
    out = sm.drop_duplicates()
    assert out.models.tolist() == ["a", "b"]
    assert out.metadata["dropped_duplicates"] == ["c"]


def test_split_fractions_round_to_the_nearest_model():
    sm = ScoreMatrix(np.eye(10))
    assert [g.n_models for g in sm.split([0.37])] == [4, 6]  # 3.7 -> 4, not 3
    assert [g.n_models for g in sm.split([0.26, 0.5])] == [3, 5, 2]  # cumulative 2.6, 7.6
    assert [g.n_models for g in sm.split_pool(0.29)] == [3, 7]  # 2.9 -> 3


def test_a_dataframe_slice_keeps_its_integer_labels_as_names():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(np.eye(40)[:, :5])
    sm = ScoreMatrix(df.iloc[30:])  # RangeIndex(30, 40): names, not pandas' defaults
    assert sm.models.tolist() == [str(i) for i in range(30, 40)]
    assert sm.items.tolist() == [f"item_{j}" for j in range(5)]


def test_as_score_matrix_keeps_a_frames_own_item_names():
    pd = pytest.importorskip("pandas")
    from jaxeval._data import as_score_matrix

    named = pd.DataFrame([[1.0, 0.0]], columns=["q1", "q2"])
    assert as_score_matrix(named, "d", items=["x", "y"]).items.tolist() == ["q1", "q2"]
    plain = as_score_matrix(np.array([[1.0, 0.0]]), "d", row_prefix="new_", items=["x", "y"])
    assert plain.items.tolist() == ["x", "y"] and plain.models.tolist() == ["new_0"]


def test_to_npz_round_trips_graded_scores_bit_for_bit(tmp_path):
    rng = np.random.default_rng(0)
    sm = ScoreMatrix(rng.uniform(0, 1, (6, 9)).astype(np.float32))
    back = jaxeval.load(sm.to_npz(tmp_path / "g.npz"))
    assert back.scores.dtype == np.float32
    np.testing.assert_array_equal(back.scores, sm.scores)


# -------------------------------------------------------------------- npz files
def test_load_npz_records_file_and_name_and_converts_any_percent(tmp_path):
    sm = ScoreMatrix(np.eye(2), source="saved-name")
    p = sm.to_npz(tmp_path / "m.npz")
    assert load_npz(p).metadata["file"] == str(p)
    assert load_npz(p).source == "saved-name"
    assert load_npz(p, name="mine").source == "mine"  # name= wins over the saved source
    q = tmp_path / "pct.npz"
    np.savez(q, scores=np.eye(2, dtype=np.uint8), full_score_pct=np.array([0.5, 0.9]))
    np.testing.assert_allclose(load_npz(q).target, [0.005, 0.009], rtol=1e-6)  # percent, always
    both = tmp_path / "both.npz"
    np.savez(both, scores=np.eye(2), target=np.array([0.5, 0.9]),
             full_score_pct=np.array([50.0, 90.0]))
    with pytest.raises(ValueError, match="'target' and 'full_score_pct' are both present"):
        load_npz(both)


# ---------------------------------------------------------- lm-evaluation-harness
def _samples(folder, task, rows):
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / f"samples_{task}_2025-01-01T00-00-00.000000.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return f


def test_lm_eval_items_sort_by_doc_id_as_numbers(tmp_path):
    rows = [{"doc_id": i, "acc": float(i % 2)} for i in (10, 2, 1, 0, 11)]
    sm = load_lm_eval(_samples(tmp_path / "m", "t", rows))
    assert sm.items.tolist() == ["0", "1", "2", "10", "11"]
    assert sm.scores.tolist() == [[0.0, 1.0, 0.0, 0.0, 1.0]]


def test_lm_eval_doc_hashes_are_compared_within_a_task(tmp_path):
    """doc_id 0 of two tasks names two documents: different hashes are no conflict."""
    for model in ("a", "b"):
        _samples(tmp_path / model, "t1", [{"doc_id": 0, "doc_hash": "h1", "acc": 1.0}])
        _samples(tmp_path / model, "t2", [{"doc_id": 0, "doc_hash": "h2", "acc": 0.0}])
    sm = load_lm_eval(tmp_path)
    assert sm.items.tolist() == ["t1/0", "t2/0"] and sm.scores.tolist() == [[1, 0], [1, 0]]


# -------------------------------------------------------------- synthetic truth
def test_synthetic_score_matrix_follows_its_seed():
    a = jaxeval.synthetic_score_matrix(seed=5, n_models=6, n_items=30)
    b = jaxeval.synthetic_score_matrix(seed=6, n_models=6, n_items=30)
    t = jaxeval.synthetic_matrix(5, 6, 30)
    np.testing.assert_array_equal(a.scores, np.asarray(t.scores))
    assert not np.array_equal(a.scores, b.scores)


def test_graded_gap_that_reaches_exactly_one_is_not_clipped():
    """A gap with second + gap == 1 exactly is reachable: status OK, not GAP_CLIPPED (one
    item, so every row mean is exact in float32 whatever the program)."""
    from jaxeval._synthetic import OK

    kw = dict(graded=True, difficulty_mean=3.0)
    acc = np.sort(np.asarray(jaxeval.synthetic_matrix(0, 3, 1, **kw).accuracy))
    gap = np.float32(1.0) - acc[-2]
    assert acc[-2] + gap == np.float32(1.0)  # (the premise, in float32)
    t = jaxeval.synthetic_matrix(0, 3, 1, gap=gap, **kw)
    assert int(t.status) == OK and float(np.max(t.accuracy)) == 1.0


# ---------------------------------------------------------------------- metrics
def test_identification_correct_index_k_is_out_of_range():
    from jaxeval.metrics import identification_correct

    theta = jnp.array([0.1, 0.2, 0.9])  # the last arm is the best
    assert identification_correct(jnp.array([3, 2, -1]), theta).tolist() == [False, True, False]
    assert identification_correct(np.array([3]), theta).tolist() == [False]


# ---------------------------------------------------------------------- reports
def _identification_fixture():
    from jaxeval._study import study_from_dict

    study = study_from_dict({
        "kind": "identification", "data": {"synthetic": {"n_items": 10}}, "policies": ["ucbe"],
        "num_arms": 4, "n_replicates": 5, "budgets": [0.1, 0.2, 0.3, 0.5, 0.7, 0.9]})
    R, C, Q, K = 5, 6, len(study.cs_kinds), 4
    rng = np.random.default_rng(3)
    theta = rng.choice([0.2, 0.4, 0.6, 0.8], size=(R, K))
    rec = rng.integers(0, K, (R, C))
    rec[:, -1] = theta.argmax(axis=1)  # everyone right at the end
    calls = np.tile(np.array([4, 8, 12, 20, 28, 36]), (R, 1))
    calls[0, 2] = 11
    lower = theta[:, None, None, :] - rng.uniform(-0.05, 0.2, (R, C, Q, K))
    upper = theta[:, None, None, :] + rng.uniform(-0.05, 0.2, (R, C, Q, K))
    est = theta[:, None, :] + rng.normal(0, 0.05, (R, C, K))
    naive = theta[:, None, :] + rng.normal(0.1, 0.05, (R, C, K))
    res = {"ucbe": {"theta": theta.astype(np.float32), "checkpoints.recommended": rec,
                    "checkpoints.calls": calls, "checkpoints.lower": lower,
                    "checkpoints.upper": upper, "checkpoints.estimate": est,
                    "checkpoints.naive": naive, "checkpoints.status": np.full((R, C), 2)}}
    return study, res


def test_identification_summary_statistics_by_hand():
    """Every statistic of the identification summary against loops written out here:
    the axes (replicates, checkpoints, kinds, arms) are easy to mix up."""
    from jaxeval._report import calls_to_target, format_summary, summarize, wilson_interval

    study, res = _identification_fixture()
    r = res["ucbe"]
    theta, rec = r["theta"].astype(np.float64), r["checkpoints.recommended"]
    R, C = rec.shape
    K = theta.shape[1]
    s = summarize(study, res)
    e = s["policies"]["ucbe"]
    ok = [[theta[i, rec[i, c]] >= theta[i].max() - 1e-6 for i in range(R)] for c in range(C)]
    acc = [sum(x) / R for x in ok]
    assert 0 < min(acc) < 1 and acc[-1] == 1
    np.testing.assert_allclose(e["accuracy"], acc, atol=1e-5)
    lo, hi = wilson_interval(np.array([sum(x) for x in ok]), R)
    np.testing.assert_allclose(e["accuracy_ci95"], [lo, hi], atol=1e-5)
    calls_mean = r["checkpoints.calls"].mean(axis=0)
    c95 = calls_to_target(calls_mean, acc)
    assert e["calls_to_95_fraction"] == pytest.approx(c95 / (K * 10), abs=1e-5)
    for q, kind in enumerate(study.cs_kinds):
        lw, up = r["checkpoints.lower"][:, :, q, :], r["checkpoints.upper"][:, :, q, :]
        hold = [[[lw[i, c, k] <= theta[i, k] <= up[i, c, k] for k in range(K)]
                 for c in range(C)] for i in range(R)]
        fam = [np.mean([all(hold[i][c]) for i in range(R)]) for c in range(C)]
        per_arm = [np.mean([hold[i][c][k] for i in range(R) for k in range(K)])
                   for c in range(C)]
        cov = e["coverage"][kind]
        np.testing.assert_allclose(cov["family_wise"], fam, atol=1e-5)
        np.testing.assert_allclose(cov["per_arm"], per_arm, atol=1e-5)
        assert len(set(fam)) > 1 and len(set(np.round(per_arm, 6))) > 1
        np.testing.assert_allclose(cov["mean_width"], (up - lw).mean(axis=(0, 2)), atol=1e-5)
    naive = r["checkpoints.naive"]
    np.testing.assert_allclose(
        e["naive_mae"], [np.abs(naive[:, c] - theta).mean() for c in range(C)], atol=1e-5)
    # the table's acc@<budget> columns each show that budget's accuracy
    lines = format_summary(s).splitlines()
    head = next(ln for ln in lines if "acc@" in ln)
    row = next(ln for ln in lines if ln.strip().startswith("ucbe "))
    labels = re.findall(r"acc@([\d.]+)%", head)
    values = [float(v) for v in re.findall(r"([\d.]+)%", row)[1:1 + len(labels)]]
    fr = list(study.budgets)
    assert len(labels) == 5  # of the 6 budgets: not simply the first five
    for lab, v in zip(labels, values):
        assert v == pytest.approx(100 * acc[fr.index(float(lab) / 100)], abs=0.05), (lab, v)


def test_anchor_summary_sd_is_the_sample_sd():
    from jaxeval._report import summarize
    from jaxeval._study import study_from_dict

    study = study_from_dict({"kind": "anchors", "data": {"dataset": "oll2_musr"},
                             "methods": ["random_mean"], "k": [20], "n_seeds": 3})
    res = {"k20": {"seconds": np.ones(3), "random_mean.mae_pp": np.array([2.0, 4.0, 9.0]),
                   "random_mean.tau": np.array([0.2, np.nan, 0.6]),
                   "random_mean.coverage": np.array([1.0, 0.5, 0.0]),
                   "random_mean.width": np.array([0.1, 0.2, 0.3])}}
    e = summarize(study, res)["methods"]["random_mean"]
    assert e["mae_pp"][0] == pytest.approx(5.0)
    assert e["mae_pp_sd"][0] == pytest.approx(np.std([2.0, 4.0, 9.0], ddof=1), abs=1e-5)
    assert e["tau"][0] == pytest.approx(0.4)
    assert e["tau_sd"][0] == pytest.approx(np.std([0.2, 0.6], ddof=1), abs=1e-5)


def test_to_npz_keeps_an_upper_case_suffix_and_calls_to_target_refuses_nan(tmp_path):
    """Two small defects the review found: ``to_npz("m.NPZ")`` wrote ``m.NPZ.npz``
    (``load`` reads the suffix in any case), and a NaN in a curve made
    ``calls_to_target`` return NaN instead of saying so."""
    from jaxeval._report import calls_to_target

    p = ScoreMatrix(np.eye(2)).to_npz(tmp_path / "m.NPZ")
    assert p.name == "m.NPZ" and jaxeval.load(p).shape == (2, 2)
    assert ScoreMatrix(np.eye(2)).to_npz(tmp_path / "m").name == "m.npz"
    with pytest.raises(ValueError, match="accuracy holds NaN at index 1"):
        calls_to_target([10, 20, 30], [0.5, np.nan, 1.0])
    with pytest.raises(ValueError, match=r"calls \(2,\) and accuracy \(3,\)"):
        calls_to_target([10, 20], [0.5, 0.9, 1.0])
    assert calls_to_target([10, 20, 30], [0.5, 0.9, 1.0]) == pytest.approx(25.0)


def test_every_saver_keeps_an_upper_case_npz_suffix(tmp_path):
    """``load`` reads ``.NPZ`` as ``.npz``; every ``.npz`` writer keeps such a name (they
    wrote ``x.NPZ.npz``) and its reader finds the file."""
    from jaxeval import IdentificationCampaign, SyntheticSpec, simulate_identification
    from jaxeval._simulate import IdentificationReport

    sm = jaxeval.synthetic_score_matrix(0, 80, 20)  # (enough validation models for 90%)
    rep = simulate_identification(SyntheticSpec(n_items=20), "ucbe", K=2, n_replicates=2)
    rep.to_npz(tmp_path / "r.NPZ")
    assert IdentificationReport.from_npz(tmp_path / "r.NPZ").settings == rep.settings
    lr = jaxeval.fit_factorization(sm, 1, 1.0, num_steps=5)
    lr.to_npz(tmp_path / "f.NPZ")
    assert jaxeval.LowRankLogistic.from_npz(tmp_path / "f.NPZ").rank == 1
    pred = jaxeval.fit_anchors(sm, 3, method="random_mean", seed=0)
    pred.save(tmp_path / "a.NPZ")
    assert jaxeval.AnchorPredictor.load(tmp_path / "a.NPZ").k == 3
    camp = IdentificationCampaign(["a", "b"], items=sm.items, policy="ucbe")
    camp.save(tmp_path / "c.NPZ")
    assert IdentificationCampaign.load(tmp_path / "c.NPZ").candidates.tolist() == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.NPZ", "c.NPZ", "f.NPZ",
                                                           "r.NPZ"]


def test_a_recommendation_outside_the_arms_is_wrong_in_the_reports():
    """The reports' correctness agrees with ``identification_correct``: -1 and K are
    wrong (``take_along_axis`` alone read -1 as the last arm, the true best here)."""
    from jaxeval._report import recommended_correct, true_best
    from jaxeval.metrics import identification_correct

    theta = np.array([[0.1, 0.2, 0.9], [0.5, 0.5, 0.1]])
    rec = np.array([[-1, 2, 3], [0, 1, -1]])
    got = recommended_correct(true_best(theta), rec)
    assert got.tolist() == [[False, True, False], [True, True, False]]
    for r in range(2):
        want = identification_correct(jnp.asarray(rec[r]), jnp.asarray(theta[r]))
        assert got[r].tolist() == np.asarray(want).tolist()


def test_a_garbled_npy_header_is_a_clean_error_in_every_npz_reader(tmp_path):
    """numpy reads an .npy header as a Python literal, so a garbled one (a flipped byte
    of a compressed file gets past the zip CRC) raised tokenize.TokenError out of the
    readers that caught only OSError / ValueError / zip errors."""
    import zipfile

    from jaxeval import IdentificationCampaign, IdentificationReport
    from jaxeval._study import StudyFolderError, _read_fit

    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, \n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 8
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as z:
        for k in ("scores", "meta", "id", "key", "V", "c", "u_mean", "arms", "lens", "index",
                  "items", "calls", "U", "b"):
            z.writestr(f"{k}.npy", npy)
    with pytest.raises(ValueError, match=r"bad\.npz: not a readable \.npz file \("
                       r"(TokenError|SyntaxError|IndentationError|ValueError: .*[Hh]eader)"):
        jaxeval.load(bad)  # the header parser's error, named
    readers = {
        "not an identification report": lambda: IdentificationReport.from_npz(bad),
        "not a factorization saved by to_npz": lambda: jaxeval.LowRankLogistic.from_npz(bad),
        "not a readable saved AnchorPredictor": lambda: jaxeval.AnchorPredictor.load(bad),
        "not a saved jaxeval campaign": lambda: IdentificationCampaign.load(bad),
    }
    for said, read in readers.items():
        with pytest.raises(ValueError, match=rf"bad\.npz: {said}"):
            read()
    with pytest.raises(StudyFolderError, match=r"bad\.npz: not a study's saved factorization"):
        _read_fit(bad)
