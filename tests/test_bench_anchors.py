"""``benchmarks/bench_anchors.py --table`` over several results files: a cell's methods
are merged one by one, the newest record of each method winning, and records of other
seeds are refused by name."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
_nproc = os.environ.get("NPROC")
import bench_anchors as ba  # noqa: E402  (sets NPROC for its own runs: undone here)

if _nproc is None:
    os.environ.pop("NPROC", None)
else:
    os.environ["NPROC"] = _nproc


def _rec(methods, mae, seeds=(42, 43), k=100, **kw):
    n = len(seeds)
    return dict(dataset="mb_toy", k=k, seeds=list(seeds), methods=list(methods),
                mae_pp=[[v] * n for v in mae], tau_b=[[0.5 + v / 10] * n for v in mae],
                coverage=[[0.9] * n for _ in mae], width=[[0.05] * n for _ in mae],
                dr=None, spec_best=None, n_test=200, n_models=1000, **kw)


def _write(path, *recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_a_later_run_of_auto_alone_replaces_only_autos_figures(tmp_path):
    full = _write(tmp_path / "full.jsonl",
                  _rec(["random_ridge", "greedy_mlp", "auto"], [2.0, 1.2, 1.3], commit="a"),
                  _rec(["random_ridge"], [1.9], k=20))
    again = _write(tmp_path / "auto.jsonl", _rec(["auto"], [1.1], commit="b"))
    recs = ba.merged_records([full, again])
    r = recs[("mb_toy", 100)]
    assert r["methods"] == ["random_ridge", "greedy_mlp", "auto"]
    assert [v[0] for v in r["mae_pp"]] == [2.0, 1.2, 1.1]
    assert r["tau_b"][2][0] == pytest.approx(0.61)
    assert r["commit"] == "b"  # the other fields: the newest record's
    assert r["sources"] == {"random_ridge": "full.jsonl:1", "greedy_mlp": "full.jsonl:1",
                            "auto": "auto.jsonl:1"}
    assert recs[("mb_toy", 20)]["mae_pp"] == [[1.9, 1.9]]
    # one file alone: as before, the newest record of the cell
    assert ba.merged_records(full)[("mb_toy", 100)]["mae_pp"][2] == [1.3, 1.3]
    table = ba.summary_table([full, again])
    row = next(line for line in table.splitlines() if line.startswith("| mb_toy 100"))
    assert "| 1.10 ± 0.00 |" in row and "greedy_mlp 1.20" in row
    assert "| 1.30 ± 0.00 |" in ba.summary_table(full)


def test_a_field_some_merged_method_lacks_is_dropped_not_misaligned(tmp_path):
    old = _rec(["random_ridge", "auto"], [2.0, 1.3])
    del old["width"]
    f = _write(tmp_path / "r.jsonl", old, _rec(["auto"], [1.1]))
    r = ba.merged_records(f)[("mb_toy", 100)]
    assert "width" not in r and r["mae_pp"] == [[2.0, 2.0], [1.1, 1.1]]


def test_records_of_other_seeds_are_not_merged(tmp_path):
    a = _write(tmp_path / "a.jsonl", _rec(["auto"], [1.3]))
    b = _write(tmp_path / "b.jsonl", _rec(["auto"], [1.1], seeds=(47, 48)))
    with pytest.raises(ValueError, match=r"cell \('mb_toy', 100\).*b.jsonl:1.*seeds"):
        ba.merged_records([a, b])


def test_the_table_is_drawn_and_a_file_without_auto_is_refused(tmp_path):
    pytest.importorskip("matplotlib")
    f = _write(tmp_path / "r.jsonl",
               _rec(["random_ridge", "greedy_mlp", "auto"], [2.0, 1.2, 1.3], k=20),
               _rec(["random_ridge", "greedy_mlp", "auto"], [1.5, 1.0, 1.1]))
    png = ba.plot_table([f], tmp_path / "plots" / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    g = _write(tmp_path / "g.jsonl", _rec(["random_ridge"], [2.0]))
    with pytest.raises(ValueError, match="no cell with auto"):
        ba.plot_table([g], tmp_path / "u.png")
    assert not (tmp_path / "u.png").exists()
