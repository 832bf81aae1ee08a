"""Test set-up: 8 fake CPU devices (set before jax is imported) and the --slow tier."""

import os
import sys
from pathlib import Path

# The benchmark scripts import their sibling helpers (``bench_args``) as a script run
# does (its folder first on the path); a test that loads one from its file needs that
# folder too, whichever test files run with it (test_confseq.py alone did not import).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

# The suite is mostly XLA compilation of small programs, so it compiles them with a
# cheaper code generation than users get: LLVM optimisation level 0 and XLA:CPU's
# older fusion code (`--xla_cpu_use_fusion_emitters=false`). On 2 cores the default
# tier took 8 min 21 s with the first alone and 4 min 51 s with both (BUILD_NOTES.md,
# "Twenty-sixth session"); results may differ from the default build in the last bits
# of a float. Tests that compare two compiled programs bit for bit hold under XLA's
# default code generation only (the older fusion code may round a reduction of two
# equivalent programs differently); they are marked `default_codegen` and skipped
# here. JAXEVAL_TEST_XLA_OPT=1 keeps XLA's default everywhere and runs them (.ci/run
# does, in a second pass). A flag this jaxlib does not know (XLA aborts on one) is
# left out: each is tried once in a subprocess, and the verdict passed on to the
# test workers in JAXEVAL_TEST_FAST_FLAGS.
_FUSION_OFF = "--xla_cpu_use_fusion_emitters=false"
_FAST_FLAGS = ("--xla_backend_optimization_level=0", _FUSION_OFF)


def _accepted(flags):
    """The flags of ``flags`` this jaxlib accepts (one subprocess for all if it can)."""
    import subprocess
    import sys

    def ok(fl):
        env = dict(os.environ, XLA_FLAGS=" ".join(fl), JAX_PLATFORMS="cpu")
        cmd = [sys.executable, "-c", "import jax; jax.jit(lambda x: x + 1)(1.0)"]
        try:
            return subprocess.run(cmd, env=env, capture_output=True, timeout=120).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    if ok(flags):
        return tuple(flags)
    return tuple(f for f in flags if ok((f,)))


DEFAULT_CODEGEN = os.environ.get("JAXEVAL_TEST_XLA_OPT") == "1"
_fast = ()
if not DEFAULT_CODEGEN:
    if "JAXEVAL_TEST_FAST_FLAGS" not in os.environ:
        os.environ["JAXEVAL_TEST_FAST_FLAGS"] = " ".join(_accepted(_FAST_FLAGS))
    _fast = tuple(os.environ["JAXEVAL_TEST_FAST_FLAGS"].split())
_flags = os.environ.get("XLA_FLAGS", "").split()
if "--xla_force_host_platform_device_count=8" not in _flags:
    _flags.append("--xla_force_host_platform_device_count=8")
for _f in _fast:  # a code-generation flag the caller set already is left as they set it
    if _f.split("=")[0] not in {g.split("=")[0] for g in _flags}:
        _flags.append(_f)
os.environ["XLA_FLAGS"] = " ".join(_flags)
# the bit-for-bit comparisons need XLA's default fusion code, whoever turned it off
_OLD_FUSION = _FUSION_OFF in _flags
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
    config.addinivalue_line(
        "markers",
        "default_codegen: compares compiled programs bit for bit (run with "
        "JAXEVAL_TEST_XLA_OPT=1)",
    )


def pytest_collection_modifyitems(config, items):
    slow = not config.getoption("--slow")
    codegen = _OLD_FUSION
    skip_slow = pytest.mark.skip(reason="slow: run with --slow")
    skip_codegen = pytest.mark.skip(
        reason="bit-for-bit under XLA's default code generation: run with "
        f"JAXEVAL_TEST_XLA_OPT=1 (.ci/run does) and without {_FUSION_OFF} in XLA_FLAGS"
    )
    for item in items:
        if slow and "slow" in item.keywords:
            item.add_marker(skip_slow)
        elif codegen and "default_codegen" in item.keywords:
            item.add_marker(skip_codegen)


# XLA:CPU keeps each compiled program's machine code in memory mappings of its own
# (about two dozen per program) for as long as a jit cache holds the program, and Linux
# refuses a process more than vm.max_map_count mappings (65530 by default): past that,
# compilation aborts ("LLVM ERROR: Unable to allocate section memory!") or segfaults.
# A test worker keeps the programs of every test it ran, ~170 mappings per test: a
# worker segfaulted compiling its 389th test holding 64 631 (BUILD_NOTES.md, fiftieth
# session). Past half the limit, JAX's caches are cleared between tests; the programs
# compile again when a later test needs them. (jaxeval clears them itself past 80%, but
# only before compiling a replicate program or running the anchor protocol.)
_MAP_CHECK_EVERY = 8  # tests (reading /proc/self/maps takes ~50 ms at 30 000 mappings)
_tests_run = 0


@pytest.hookimpl(trylast=True)  # (after the test's fixtures, monkeypatches included, end)
def pytest_runtest_teardown(item, nextitem):
    global _tests_run
    _tests_run += 1
    if _tests_run % _MAP_CHECK_EVERY:
        return
    import jax

    from jaxeval._runner import _maps_held, _max_map_count  # (None where /proc is not)

    limit, held = _max_map_count(), _maps_held()
    if limit and held is not None and held > limit // 2:
        jax.clear_caches()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
