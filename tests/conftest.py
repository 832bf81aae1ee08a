"""Test set-up: 8 fake CPU devices (set before jax is imported) and the --slow tier."""

import os

# The suite is mostly XLA compilation of small programs: LLVM's optimisation level 0
# compiles them ~28% faster overall (8.0 vs 11.1 min on 2 cores, the same tests passing).
# XLA's HLO passes are unchanged; only LLVM's machine-code optimisation is skipped, so
# results may differ from the default build in the last bits of a float at most.
# JAXEVAL_TEST_XLA_OPT=1 keeps XLA's default (what users and the benchmarks run).
_opt = ""
if os.environ.get("JAXEVAL_TEST_XLA_OPT") != "1":
    _opt = " --xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8" + _opt
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def pytest_addoption(parser):
    parser.addoption(
        "--slow", action="store_true", default=False, help="run slow statistical grids"
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: expensive statistical grids (run with --slow)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
