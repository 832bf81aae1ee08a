"""Every docstring example in the package runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import jaxeval

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(jaxeval.__path__, "jaxeval.")
    if not m.name.endswith("__main__")  # importing it would run the command line
)


def test_every_module_is_listed():
    assert {"jaxeval._simulate", "jaxeval.anchors._api", "jaxeval._runner"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                          verbose=False, report=True)
    assert res.failed == 0, f"{res.failed} of {res.attempted} examples in {name} failed"
