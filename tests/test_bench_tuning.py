"""The figures of ``benchmarks/bench_tuning.py`` (issue 7's one command): drawn from the
results it saves, redrawn from a saved file, and bad files refused by name."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_tuning as bt  # noqa: E402

POLS = ["ucbe", "pulse_ucb", "sysrs"]
PNG = b"\x89PNG\r\n\x1a\n"


def _bin(lo, hi, n_inst, to95):
    return dict(lo=lo, hi=hi, lo_items=lo * 100, hi_items=hi * 100, n_instances=n_inst,
                n_replicates=4 * n_inst, median_gap=(lo + hi) / 2, to95=to95,
                to90={p: v / 2 for p, v in to95.items()})


def _saved(tmp_path, *, by_gap=True):
    bins = [_bin(0.0, 0.02, 5, {"ucbe": 0.4, "pulse_ucb": 0.3, "sysrs": math.inf}),
            _bin(0.02, 0.1, 5, {"ucbe": 0.1, "pulse_ucb": 0.05, "sysrs": 0.12})]
    results = {f"toy/K{K}": dict(report={}, median_gap=0.02, by_gap=bins if by_gap else [])
               for K in (10, 50)}
    curves = {f"toy/K{K}/{p}": dict(budget_fractions=[0.1, 0.5, 1.0],
                                    accuracy=[0.5, 0.9, 1.0], calls_to_95=0.7,
                                    calls_to_90=0.5, median_gap=0.02)
              for K in (10, 50) for p in POLS}
    path = tmp_path / "res.json"
    # json writes math.inf as Infinity, as the script's own json.dump does
    path.write_text(json.dumps(dict(args=dict(policies=POLS[:2], reps=8), results=results,
                                    curves=curves)))
    return path


def test_gap_plot_and_replot_write_pngs(tmp_path):
    """A bin a policy never takes to 95% (inf) is drawn, not dropped or crashing; both
    figures come back from the saved JSON alone."""
    saved = _saved(tmp_path)
    curves_png, gap_png = tmp_path / "curves.png", tmp_path / "gap.png"
    assert bt.main(["--replot", str(saved), "--plot", str(curves_png),
                    "--gap-plot", str(gap_png)]) == 0
    for p in (curves_png, gap_png):
        head = p.read_bytes()[:24]
        assert head[:8] == PNG
        width = int.from_bytes(head[16:20], "big")
        assert width > 600  # two panels side by side, not an empty canvas


def test_replot_refuses_what_it_cannot_draw(tmp_path):
    with pytest.raises(SystemExit, match="--plot PATH and/or --gap-plot"):
        bt.main(["--replot", str(_saved(tmp_path))])
    bad = tmp_path / "bad.json"
    bad.write_text('{"results": {}}')
    with pytest.raises(SystemExit, match="bad.json is not a results file"):
        bt.main(["--replot", str(bad), "--gap-plot", str(tmp_path / "g.png")])
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="bad.json is not a results file"):
        bt.main(["--replot", str(bad), "--gap-plot", str(tmp_path / "g.png")])
    no_bins = _saved(tmp_path, by_gap=False)
    with pytest.raises(SystemExit, match=r"--replot: .*no per-bin figures"):
        bt.main(["--replot", str(no_bins), "--gap-plot", str(tmp_path / "g.png")])
    assert not (tmp_path / "g.png").exists()
