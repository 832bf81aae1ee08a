"""Where the test suite's time goes: JAX tracing, lowering and XLA compilation per test.

A pytest plugin and its summary. The plugin listens to JAX's monitoring events
(``/jax/core/compile/jaxpr_trace_duration``, ``.../jaxpr_to_mlir_module_duration``,
``.../backend_compile_duration``) and writes one JSON line per test and worker: the
test's wall time, the seconds of each event and the programs it compiled (by
function name). The summary adds them up by file and by program.

Usage (from the repository root)::

    PROFILE_DIR=/tmp/prof PYTHONPATH=benchmarks python -m pytest tests -n 2 \\
        -p no:benchmark -p compile_profile
    python benchmarks/compile_profile.py /tmp/prof            # by file
    python benchmarks/compile_profile.py /tmp/prof --programs  # by compiled program

``PROFILE_DIR`` is required; the run's first process clears the ``profile_*.jsonl``
files already there. Worker time that is none of the three events is execution and
Python. A test's figure includes compiling whatever it is the first in its worker to
need; what happens outside tests (collection, imports, start-up) is not counted, so the
worker-seconds are the sum of the tests' wall times. Programs are told apart by function
name only (two functions named ``<lambda>`` are one row).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path

import pytest

_EVENTS = {
    "jaxpr_trace_duration": "trace",
    "jaxpr_to_mlir_module_duration": "lower",
    "backend_compile_duration": "compile",
}
_state: dict = {"test": None, "start": 0.0, "acc": None, "out": None}


def _listener(event: str, duration: float, **kw) -> None:
    name = _EVENTS.get(event.rsplit("/", 1)[-1])
    acc = _state["acc"]
    if name is None or acc is None:
        return
    acc[name] += duration
    if name == "compile":
        prog = acc["programs"].setdefault(str(kw.get("fun_name", "?")), [0, 0.0])
        prog[0] += 1
        prog[1] += duration


def _folder() -> Path:
    if not os.environ.get("PROFILE_DIR"):
        raise pytest.UsageError("compile_profile: set PROFILE_DIR to the folder for its files")
    return Path(os.environ["PROFILE_DIR"])


def pytest_configure(config) -> None:
    import jax.monitoring

    folder = _folder()
    if not hasattr(config, "workerinput"):  # the first process: no files of an older run
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("profile_*.jsonl"):
            old.unlink()
    jax.monitoring.register_event_duration_secs_listener(_listener)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem) -> None:
    _state["test"] = item.nodeid
    _state["start"] = time.perf_counter()
    _state["acc"] = collections.defaultdict(float, programs={})


def pytest_runtest_logfinish(nodeid, location) -> None:
    acc = _state["acc"]
    if acc is None or nodeid != _state["test"]:
        return  # (the xdist controller sees every test's report, but runs none)
    if _state["out"] is None:  # opened at the first test run here: none for the controller
        out_dir = _folder()
        out_dir.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _state["out"] = open(out_dir / f"profile_{worker}.jsonl", "w")  # noqa: SIM115
    out = _state["out"]
    row = {"test": nodeid, "wall": time.perf_counter() - _state["start"]}
    row.update({k: round(acc[k], 4) for k in _EVENTS.values()})
    row["programs"] = acc["programs"]
    out.write(json.dumps(row) + "\n")
    out.flush()
    _state["acc"] = None


def pytest_unconfigure(config) -> None:
    if _state["out"] is not None:
        _state["out"].close()
        _state["out"] = None


def _rows(folder: Path) -> list[dict]:
    files = sorted(folder.glob("profile_*.jsonl"))
    if not files:
        raise SystemExit(f"{folder}: no profile_*.jsonl files (run pytest with the plugin)")
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="the PROFILE_DIR of a profiled run")
    ap.add_argument("--programs", action="store_true", help="by compiled program")
    ap.add_argument("--top", type=int, default=40, help="rows to show (default 40)")
    args = ap.parse_args(argv)
    rows = _rows(args.folder)
    total = {k: sum(r[k] for r in rows) for k in ("wall", *_EVENTS.values())}
    rest = total["wall"] - total["compile"] - total["trace"] - total["lower"]
    print(f"{len(rows)} tests, {total['wall']:.0f} worker-seconds: compile "
          f"{total['compile']:.0f} s, trace {total['trace']:.0f} s, lower "
          f"{total['lower']:.0f} s, the rest {rest:.0f} s")
    if args.programs:
        progs: dict = collections.defaultdict(lambda: [0, 0.0])
        for r in rows:
            for name, (n, secs) in r["programs"].items():
                progs[name][0] += n
                progs[name][1] += secs
        print(f"{'program':50s} {'compiles':>8s} {'seconds':>8s}")
        for name, (n, secs) in sorted(progs.items(), key=lambda x: -x[1][1])[:args.top]:
            print(f"{name[:50]:50s} {n:8d} {secs:8.1f}")
        return
    files: dict = collections.defaultdict(lambda: collections.Counter())
    for r in rows:
        c = files[r["test"].split("::")[0]]
        c["tests"] += 1
        for k in ("wall", *_EVENTS.values()):
            c[k] += r[k]
        c["compiles"] += sum(n for n, _ in r["programs"].values())
    print(f"{'file':45s} {'tests':>5s} {'wall':>6s} {'compile':>7s} {'trace':>6s} "
          f"{'lower':>6s} {'compiles':>8s}")
    for name, c in sorted(files.items(), key=lambda x: -x[1]["wall"])[:args.top]:
        print(f"{name[:45]:45s} {c['tests']:5d} {c['wall']:6.0f} {c['compile']:7.0f} "
              f"{c['trace']:6.0f} {c['lower']:6.0f} {c['compiles']:8d}")


if __name__ == "__main__":
    main()
