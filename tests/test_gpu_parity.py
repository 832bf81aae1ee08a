"""``benchmarks/experiments/gpu_parity.py compare``: the CPU/GPU parity check can fail.

The check itself needs a GPU; here two saved runs are crafted so that ``compare`` must
accept identical runs, accept PULSE recommendations that differ (reported as a share),
reject a differing recommendation or call count of an exact policy and PULSE runs on other
instances, and refuse files that do not match."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "experiments"))
import gpu_parity as gp  # noqa: E402


def _run(seed):
    """A saved run in ``gpu_parity.run``'s layout, every array drawn from ``seed``."""
    g = np.random.default_rng(seed)
    out = {"platform": np.array("cpu")}
    for policy in gp.POLICIES:
        for b in (1, 8):
            pre = f"{policy}/b{b}/"
            out[pre + "recommended"] = g.integers(0, 6, (16, 4)).astype(np.int32)
            out[pre + "correct"] = g.random((16, 4)) < 0.8
            out[pre + "calls"] = np.tile(np.array([6, 16, 32, 65]), (16, 1))
            out[pre + "theta"] = g.random((16, 6)).astype(np.float32)
            out[pre + "instance"] = g.integers(0, 10, 16).astype(np.int32)
            for name in gp.SUMMARY:
                out[pre + name] = g.random(4)
    return out


def _save(tmp_path, name, arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


def test_identical_runs_pass(tmp_path, capsys):
    a = _save(tmp_path, "a.npz", _run(0))
    assert gp.compare(a, a) == 0
    out = capsys.readouterr().out
    assert "DIFFERS" not in out and out.count("same recommendations 1.000") == 12


def _compare_changed(tmp_path, capsys, key, change):
    """``compare`` of a run against a copy whose array ``key`` went through ``change``;
    returns the exit value and the printed line of that policy and batch size."""
    base = _run(0)
    other = dict(base)
    other[key] = change(base[key].copy())
    rc = gp.compare(_save(tmp_path, "a.npz", base), _save(tmp_path, "b.npz", other))
    policy, b = key.split("/")[:2]
    lines = [x for x in capsys.readouterr().out.splitlines()
             if x.split(":")[0].split() == [policy, f"b={b[1:]}"]]
    return rc, lines[0]


def _bump(index, modulo=None):
    def change(x):
        x[index] = x[index] + 1 if modulo is None else (x[index] + 1) % modulo
        return x
    return change


def test_a_pulse_difference_is_reported_not_failed(tmp_path, capsys):
    rc, line = _compare_changed(tmp_path, capsys, "pulse/b1/recommended", _bump((3, 2), 6))
    assert rc == 0
    assert "but recommended" in line and "same recommendations 0.938" in line  # 15 of 16


def test_an_exact_policy_recommendation_difference_fails(tmp_path, capsys):
    rc, line = _compare_changed(tmp_path, capsys, "ucbe/b1/recommended", _bump((5, 0), 6))
    assert rc == 1
    assert "but recommended" in line and "DIFFERS" in line


def test_pulse_on_other_instances_fails(tmp_path, capsys):
    rc, line = _compare_changed(tmp_path, capsys, "pulse_ucb/b8/theta",
                                lambda x: x + np.float32(0.01))
    assert rc == 1
    assert "but theta" in line and "DIFFERS" in line


def test_mismatched_files_are_refused(tmp_path):
    base = _run(0)
    fewer = {k: (v[:8] if v.ndim and v.shape[0] == 16 else v) for k, v in base.items()}
    with pytest.raises(ValueError, match="different shapes"):
        gp.compare(_save(tmp_path, "a.npz", base), _save(tmp_path, "b.npz", fewer))
    missing = {k: v for k, v in base.items() if not k.startswith("sysrs/")}
    with pytest.raises(ValueError, match="different arrays"):
        gp.compare(_save(tmp_path, "a.npz", base), _save(tmp_path, "c.npz", missing))


def test_an_exact_policy_difference_fails(tmp_path, capsys):
    rc, line = _compare_changed(tmp_path, capsys, "ucbe/b8/calls", _bump((0, 1)))
    assert rc == 1
    assert "but calls" in line and "DIFFERS" in line
