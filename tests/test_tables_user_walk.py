"""What a data engineer bringing their own tables met (a walk through README): a
``target`` / ``full_score_pct`` column of a table is the models' full-benchmark score,
as in an .npz (a wide table read it as a benchmark item, a long one dropped it, without
a word); a long table's other columns are said to be unread; a predictor whose interval
is the whole [0, 1] says so."""

import numpy as np
import pytest

import jaxeval


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_wide_tables_target_column_is_the_target_not_an_item(tmp_path):
    p = _write(tmp_path, "w.csv", "model,q1,q2,target\nm1,1,0,0.8\nm2,0,1,0.3\n")
    sm = jaxeval.load(p)
    assert sm.items.tolist() == ["q1", "q2"]
    np.testing.assert_allclose(sm.target, [0.8, 0.3])
    np.testing.assert_array_equal(sm.scores, [[1, 0], [0, 1]])
    assert any("column 'target' read as each model's full-benchmark score" in c
               for c in sm.metadata["conversions"])
    # named explicitly: the same matrix, nothing said
    same = jaxeval.load(p, target_col="target")
    np.testing.assert_array_equal(same.target, sm.target)
    assert not any("full-benchmark" in c for c in same.metadata["conversions"])


def test_full_score_pct_is_read_in_percent_as_the_npz_loader_reads_it(tmp_path):
    p = _write(tmp_path, "l.csv", "model,item,score,full_score_pct\n"
               "m1,q1,1,80\nm1,q2,0,80\nm2,q1,0,30\nm2,q2,1,30\n")
    sm = jaxeval.load(p)
    np.testing.assert_allclose(sm.target, [0.8, 0.3])
    assert any("percent / 100" in c for c in sm.metadata["conversions"])
    npz = jaxeval.ScoreMatrix(sm.scores, models=sm.models, items=sm.items).to_npz(
        tmp_path / "x.npz")
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "y.npz", **arrays, full_score_pct=np.array([80.0, 30.0]))
    np.testing.assert_allclose(jaxeval.load(tmp_path / "y.npz").target, sm.target)


def test_both_target_columns_are_refused_by_name(tmp_path):
    p = _write(tmp_path, "b.csv", "model,q1,target,full_score_pct\nm1,1,0.8,80\n")
    with pytest.raises(ValueError, match=r"b\.csv: columns \['target', 'full_score_pct'\] "
                       "are both present.*pass target_col= to choose"):
        jaxeval.load(p)


def test_a_long_tables_other_columns_are_said_to_be_unread(tmp_path):
    p = _write(tmp_path, "o.csv", "Unnamed: 0,model,item,score,accuracy\n"
               "0,m1,q1,1,0.5\n1,m1,q2,0,0.5\n")
    sm = jaxeval.load(p)
    assert sm.target is None
    assert ("columns ['Unnamed: 0', 'accuracy'] not read (a long table's scores are "
            "'score'; pass target_col= for a target column)") in sm.metadata["conversions"]


def test_a_predictor_whose_interval_is_all_of_zero_to_one_says_so():
    from test_anchor_api_mutants import _by_hand

    assert "interval=+-0.1500 at 90%" in repr(_by_hand())
    assert "interval=[0, 1] (too few validation models) at 90%" in repr(
        _by_hand(radius=float("inf")))


def test_a_target_column_that_is_no_score_reads_as_before(tmp_path):
    """Automatic only where it is one number in range per model: a long table's
    gold-answer column named 'target', a per-row value, or the first column naming the
    models of a wide table read as they always did; target_col=None turns it off."""
    gold = _write(tmp_path, "g.csv", "model,item,score,target\na,q1,1,B\na,q2,0,C\n")
    sm = jaxeval.load(gold)
    assert sm.target is None and sm.items.tolist() == ["q1", "q2"]
    rows = _write(tmp_path, "r.csv", "model,item,score,target\na,q1,1,1\na,q2,0,0\n")
    assert jaxeval.load(rows).target is None
    first = _write(tmp_path, "f.csv", "target,q1,q2\na,1,0\nb,0,1\n")
    sm = jaxeval.load(first)
    assert sm.models.tolist() == ["a", "b"] and sm.items.tolist() == ["q1", "q2"]
    wide = _write(tmp_path, "w.csv", "model,q1,target\na,1,0\nb,0,1\n")
    assert jaxeval.load(wide).items.tolist() == ["q1"]
    off = jaxeval.load(wide, target_col=None)
    assert off.items.tolist() == ["q1", "target"] and off.target is None
