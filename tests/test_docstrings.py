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


# modules whose examples carry the user-facing API: a docstring edit that drops them
# (or a doctest collection that finds none) fails here
MIN_EXAMPLES = {"jaxeval._simulate": 20, "jaxeval._data": 20, "jaxeval._metrics": 10,
                "jaxeval._campaign": 10, "jaxeval._study": 10, "jaxeval.anchors._api": 10,
                "jaxeval._factorization_api": 10, "jaxeval._lmeval": 5, "jaxeval._tables": 3}


def test_every_module_is_listed():
    assert {"jaxeval._simulate", "jaxeval.anchors._api", "jaxeval._runner"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                          verbose=False, report=True)
    assert res.failed == 0, f"{res.failed} of {res.attempted} examples in {name} failed"
    assert res.attempted >= MIN_EXAMPLES.get(name, 0), (name, res.attempted)


# result containers and settings records: described by their attributes, built by the
# functions whose examples show them
_NO_EXAMPLE = {"SyntheticTruth", "LowRankLogistic", "GapBin", "IdentificationStudy",
               "AnchorStudy", "ReplicateStudy", "Fitted", "ProtocolResult", "Settings",
               "SplitData"}


def test_every_public_function_has_an_example():
    """Each public function and class of ``jaxeval``, ``jaxeval.anchors`` and
    ``jaxeval.metrics`` shows an example in its docstring, or names the one whose
    example covers it."""
    import inspect
    import re

    import jaxeval.anchors
    import jaxeval.metrics

    missing = []
    for mod in (jaxeval, jaxeval.anchors, jaxeval.metrics):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not callable(obj) or name in _NO_EXAMPLE:
                continue
            doc = inspect.getdoc(obj) or ""
            if ">>>" not in doc and not re.search(
                    r"Example: see :\w+:`|[Ss]ee :\w+:`[\w.]+` for an example", doc):
                missing.append(f"{mod.__name__}.{name}")
    assert not missing, missing


def test_every_public_method_and_property_is_documented():
    """The public methods and properties of the public classes of ``jaxeval``,
    ``jaxeval.anchors`` and ``jaxeval.metrics`` each say what they are."""
    import inspect

    import jaxeval.anchors
    import jaxeval.metrics

    missing, seen = [], 0
    for mod in (jaxeval, jaxeval.anchors, jaxeval.metrics):
        for name in mod.__all__:
            cls = getattr(mod, name)
            if not inspect.isclass(cls) or issubclass(cls, BaseException):
                continue
            for attr, v in vars(cls).items():
                if attr.startswith("_"):
                    continue
                f = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
                if not (isinstance(v, property) or inspect.isfunction(f)):
                    continue
                seen += 1
                if not (f.__doc__ or "").strip():
                    missing.append(f"{mod.__name__}.{name}.{attr}")
    assert seen >= 40, seen  # the walk found the classes' members
    assert not missing, missing


def test_every_methods_citation_names_a_section_of_the_methods_page():
    """Docstrings cite the method descriptions as "METHODS.md 2.3" (or "METHODS.md
    section 1"); each cited section is a heading of docs/METHODS.md, the page that
    ships with the repository."""
    import re
    from pathlib import Path

    root = Path(jaxeval.__file__).resolve().parent
    page = (Path(__file__).resolve().parents[1] / "docs" / "METHODS.md").read_text(
        encoding="utf-8")
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", page, flags=re.M))
    assert {"0", "1", "2.3", "2.4", "3", "6.1", "6.2"} <= headings, headings
    cited = {}
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "SPEC" not in text, f"{path.name} cites the internal specification"
        for sec in re.findall(r"METHODS\.md (?:sections? )?(\d+(?:\.\d+)?)", text):
            cited.setdefault(sec, path.name)
    assert len(cited) >= 8, cited
    missing = {sec: where for sec, where in cited.items() if sec not in headings}
    assert not missing, f"cited sections with no heading in docs/METHODS.md: {missing}"
