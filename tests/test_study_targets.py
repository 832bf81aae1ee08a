"""A replicates study's target: what cannot be a target is refused by the key ``target``
before a folder is made; NaN results and unreached targets are said in summaries."""

import sys

import numpy as np
import pytest
from test_study import TESTS, toy_config

import jaxeval
from jaxeval._report import format_summary, summarize
from jaxeval._study import (
    ReplicateStudy,
    StudyConfigError,
    StudyFolderError,
    load_results,
    run_study,
    study_from_dict,
)

MODULE = '''
import jax
import jax.numpy as jnp


def text(key):
    return "hello"


def nothing(key):
    return None


def varshape(key):
    return {"v": jnp.nonzero(jax.random.uniform(key, (8,)) > 0.5)[0]}


def halfnan(key):
    x = jax.random.uniform(key)
    return {"v": jnp.where(x < 0.5, jnp.nan, x), "ok": x}
'''


@pytest.fixture()
def mods(tmp_path, monkeypatch):
    (tmp_path / "tgt_bad.py").write_text(MODULE)
    (tmp_path / "tgt_syntax.py").write_text("def broken(:\n")
    (tmp_path / "tgt_raises.py").write_text("raise RuntimeError('config file missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(TESTS))
    for m in ("tgt_bad", "tgt_syntax", "tgt_raises"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    return tmp_path


def _refused(study_or_cfg, out, text):
    with pytest.raises(StudyConfigError, match=text) as e:
        study = (study_from_dict(study_or_cfg) if isinstance(study_or_cfg, dict)
                 else study_or_cfg)
        run_study(study, out, progress=False)
    assert e.value.key == "target"
    assert not out.exists()  # refused before the folder is made


def test_a_target_in_the_running_script_or_a_function_object_is_refused(mods):
    out = mods / "o"
    _refused(toy_config(target="__main__:f"), out, "names the running script.*module file")
    with pytest.raises(StudyConfigError, match="names the running script"):
        ReplicateStudy(target="__main__:f")
    from test_study import toy

    with pytest.raises(StudyConfigError, match="got the function itself: 'test_study:toy'"):
        ReplicateStudy(target=toy)


def test_a_module_that_fails_to_import_is_named_with_its_error(mods):
    out = mods / "o"
    _refused(toy_config(target="tgt_syntax:broken"), out,
             "importing the module of 'tgt_syntax:broken' failed: SyntaxError")
    _refused(toy_config(target="tgt_raises:x"), out,
             "importing the module of 'tgt_raises:x' failed: RuntimeError: config file missing")


@pytest.mark.parametrize("fn, text", [
    ("text", r"'tgt_bad:text' cannot be traced by JAX on one replicate's key \(TypeError: "),
    ("varshape", r"cannot be traced .*ConcretizationTypeError.*shapes do not depend"),
    ("nothing", r"'tgt_bad:nothing' returned no array \(None\)"),
])
def test_a_target_jax_cannot_run_is_refused_by_name_before_the_folder(mods, fn, text):
    _refused(toy_config(target=f"tgt_bad:{fn}", n_replicates=8, chunk_size=8),
             mods / "o", text)


def test_nan_results_are_counted_in_the_summary(mods):
    out = mods / "o"
    run_study(study_from_dict(toy_config(target="tgt_bad:halfnan", n_replicates=16,
                                         chunk_size=16)), out, progress=False)
    study, res = load_results(out)
    bad = int(np.isnan(res["replicates"]["v"]).sum())
    assert 0 < bad < 16
    s = summarize(study, res)
    assert s["fields"]["v"]["non_finite_replicates"] == bad
    assert "non_finite_replicates" not in s["fields"]["ok"]
    text = format_summary(s)
    assert f"v: shape [16], mean [nan]; {bad} of 16 replicates hold NaN or inf" in text


def test_a_folder_of_another_kind_of_study_says_so(mods):
    out = mods / "o"
    run_study(study_from_dict(toy_config(n_replicates=8, chunk_size=8)), out, progress=False)
    other = study_from_dict({"kind": "identification", "num_arms": 2, "n_replicates": 8,
                             "policies": ["uniform"], "budgets": [1.0],
                             "data": {"synthetic": {"n_items": 20}}})
    with pytest.raises(StudyFolderError,
                       match="it is a replicates study, not an identification one"):
        run_study(other, out, progress=False)


def test_report_summary_says_not_reached():
    rep = jaxeval.simulate_identification(jaxeval.SyntheticSpec(n_items=40), "uniform", K=3,
                                          n_replicates=8, budget_fractions=(0.05,), seed=0)
    assert np.isinf(rep.calls_to(0.95))
    assert rep.summary().splitlines()[1] == "calls to 95%: not reached; to 90%: not reached"
