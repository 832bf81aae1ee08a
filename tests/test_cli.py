"""The ``jaxeval`` command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxeval._cli import main
from jaxeval._study import study_from_dict

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for cmd in ("run", "resume", "merge", "summary", "plot", "main", "datasets"):
        assert cmd in text
    assert "--range 0:5000" in text and "jaxeval merge" in text and "--coordinator" in text
    assert "compilation-cache" in text


def test_python_dash_m_help_runs():
    res = subprocess.run(
        [sys.executable, "-m", "jaxeval", "run", "--help"], capture_output=True, text=True
    )
    assert res.returncode == 0 and "--range" in res.stdout and "example:" in res.stdout


@pytest.mark.parametrize("kind", ["identification", "anchors", "replicates"])
def test_example_configs_are_valid(capsys, kind):
    assert main(["example", kind]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == kind
    if kind != "replicates":  # the replicates example names a placeholder function
        assert study_from_dict(d).to_dict() == d


def test_datasets_lists_bundled_data(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "oll2_ifeval" in out and "top-2 gap" in out
    assert main(["datasets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    musr = next(r for r in rows if r["name"] == "oll2_musr")
    assert musr["items"] == 756 and musr["accuracy_max"] > musr["accuracy_median"]
    assert musr["top2_gap"] == pytest.approx(
        musr["top_models"][0][1] - musr["top_models"][1][1], abs=1e-6
    )


def test_bad_config_names_the_key(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification", "num_arm": 5}))
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "num_arm" in err and "unknown key" in err
    assert not (tmp_path / "o").exists()


def test_run_range_merge_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    cfg = {
        "kind": "replicates",
        "name": "cli-toy",
        "target": "test_study:toy",
        "n_replicates": 100,
        "seed": 1,
        "chunk_size": 32,
        "lanes": 8,
    }
    p = tmp_path / "s.json"
    p.write_text(json.dumps(cfg))
    a, b, m = (str(tmp_path / x) for x in ("a", "b", "m"))
    assert main(["run", str(p), "--out", a, "--range", "0:40", "--quiet"]) == 0
    assert main(["run", str(p), "--out", b, "--range", "40:100", "--quiet"]) == 0
    assert main(["merge", a, b, "--out", m]) == 0
    assert "(complete)" in capsys.readouterr().out
    assert main(["summary", m]) == 0
    assert "cli-toy" in capsys.readouterr().out
    s = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert s["replicates"] == 100 and s["fields"]["mean"]["shape"] == [100]
    # the same folder with another study is refused (exit code 2, nothing written)
    p.write_text(json.dumps(dict(cfg, seed=2)))
    assert main(["run", str(p), "--out", a, "--range", "0:40", "--quiet"]) == 2
    assert "another study" in capsys.readouterr().err


def test_bad_range_text(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kind": "identification"}))
    with pytest.raises(SystemExit, match="LO:HI"):
        main(["run", str(p), "--out", str(tmp_path / "o"), "--range", "0-40"])


def test_compilation_cache_only_when_asked(tmp_path):
    """The library never sets the cache; the command line does when given the flag/env."""
    code = (
        "import jax, jaxeval, jaxeval._study, jaxeval._runner;"
        "assert not jax.config.jax_compilation_cache_dir;"
        "from jaxeval._cli import main;"
        f"main(['--compilation-cache', {str(tmp_path / 'cc')!r}, 'datasets', '--json']);"
        f"assert jax.config.jax_compilation_cache_dir == {str(tmp_path / 'cc')!r}"
    )
    env = {k: v for k, v in os.environ.items() if k != "JAXEVAL_COMPILATION_CACHE"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "cc").is_dir()
