"""README.md's Python quickstart stays in step with the package."""

import ast
import re
from pathlib import Path

import pytest

import jaxeval

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_quickstart_parses_and_names_only_public_attributes():
    """Cheap drift check: every ``jaxeval.<name>`` the quickstart uses exists and is
    exported, and every keyword it passes to one is a parameter of that function."""
    import inspect

    blocks = _python_blocks()
    assert blocks, "README.md has no ```python block"
    for src in blocks:
        tree = ast.parse(src)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "jaxeval":
                assert node.attr in jaxeval.__all__, f"README uses jaxeval.{node.attr}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "jaxeval":
                params = inspect.signature(getattr(jaxeval, node.func.attr)).parameters
                for kw in node.keywords:
                    assert kw.arg in params, f"README passes {kw.arg}= to jaxeval.{node.func.attr}"


@pytest.mark.slow
def test_quickstart_runs(tmp_path, monkeypatch):
    """Each Python block as printed (about 3 min on 2 CPU cores), then its results."""
    import numpy as np

    monkeypatch.chdir(tmp_path)  # the anchors block saves a file
    blocks = _python_blocks()
    assert len(blocks) == 3
    ns: dict = {"__name__": "readme"}
    exec(compile(blocks[0], str(README), "exec"), ns)
    assert 0.0 < ns["rep"].calls_to(0.95, fraction=True) <= 1.0
    assert len(ns["rep2"].instances) == 2
    assert np.bincount(ns["rep3"].instance, minlength=50).tolist() == [4] * 50
    assert 0.5 < ns["lam0"] <= 1.0
    est, lo, hi = ns["est"], ns["lo"], ns["hi"]
    assert est.shape == lo.shape == hi.shape == (ns["split"].test.n_models,)
    assert np.all((lo <= est) & (est <= hi))
    assert ns["p"].shape == (3, ns["sm"].n_items) and (tmp_path / "ifeval_factors.npz").is_file()
    assert ns["lr"].rank == 8
    assert ns["means"].shape == (100_000,) and abs(float(ns["means"].mean()) - 0.3) < 0.005
    assert ns["out"].checkpoints.recommended.shape == (64, 1)
    assert set(np.unique(ns["out"].checkpoints.calls).tolist()) == {ns["kern"].config.budgets[0]}

    ns = {"__name__": "readme"}
    exec(compile(blocks[1], str(README), "exec"), ns)
    assert (tmp_path / "musr_anchors.npz").is_file()
    assert ns["pred"].k == 30 and len(ns["extra"]) == 100
    assert not set(ns["extra"]) & set(ns["pred"].anchor_items)
    assert ns["lo"] <= ns["est"] <= ns["hi"] and ns["lo_u"] <= ns["est_u"] <= ns["hi_u"]

    ns = {"__name__": "readme"}
    exec(compile(blocks[2], str(README), "exec"), ns)
    st, new = ns["camp"].status(), ns["new"]
    assert st.done and st.calls <= 1500 and (tmp_path / "ifeval_campaign.npz").is_file()
    back = jaxeval.IdentificationCampaign.load(tmp_path / "ifeval_campaign.npz")
    np.testing.assert_array_equal(back.status().estimate, st.estimate)
    acc = new.accuracy()
    assert np.all((st.lower <= acc + 1e-6) & (acc <= st.upper + 1e-6))


def test_the_suites_fast_xla_flags_leave_out_what_this_jaxlib_does_not_know():
    """README's test command compiles with extra XLA flags (tests/conftest.py); XLA aborts
    on a flag it does not know, so each is tried first and an unknown one is dropped."""
    import conftest

    known, unknown = "--xla_backend_optimization_level=0", "--xla_jaxeval_no_such_flag=1"
    assert conftest._accepted((known, unknown)) == (known,)
    assert conftest._accepted((unknown,)) == ()
