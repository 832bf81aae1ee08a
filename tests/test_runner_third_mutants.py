"""Gaps a third mutation review of the replicate runner found (progress rates and
bars, argument checks and their messages, the host-memory refusal, the map-pressure
guard): each test fails on a plausible bug the rest of the suite let through."""

import io
import types
import warnings

import jax
import numpy as np
import pytest
from test_runner import _pressure
from test_runner_deep_mutants import ONE, _progress
from test_runner_mutants import _uniform

from jaxeval import _runner
from jaxeval._runner import ReplicatePlan, run_replicates


# ------------------------------------------------------------------ progress lines
def test_progress_rate_runs_from_the_first_compile_report(monkeypatch):
    """A run reports ``compiled()`` after every dispatch; only the first counts, so the
    second line rates 8 replicates over the 4 s since compilation (2/s), not over the
    1 s since the latest report."""
    now = [0.0]
    monkeypatch.setattr(_runner.time, "perf_counter", lambda: now[0])
    out = io.StringIO()
    p = _runner.Progress(16, stream=out)
    for t, step in ((10.0, p.compiled), (12.0, lambda: p.update(4)),
                    (13.0, p.compiled),  # not the end of compilation
                    (14.0, lambda: p.update(4))):
        now[0] = t
        step()
    second = out.getvalue().splitlines()[1]
    assert "8/16 replicates" in second and "  2/s  " in second, second
    assert second.endswith("ETA 4.0s"), second


def test_progress_bar_fills_the_nearest_whole_cell(monkeypatch):
    """7 of 10 done fills 16.8 of the 24 cells: 17 shown, not 16 (truncated)."""
    p, out = _progress(monkeypatch, [0.0, 1.0, 2.0], 10)
    p.compiled()
    p.update(7)
    assert "[" + "#" * 17 + "." * 7 + "] 7/10 replicates ( 70.0%)" in out.getvalue()


# ------------------------------------------------------------------ argument checks
def test_a_plan_checks_its_chunk_size_and_lanes_naming_them():
    """``ReplicatePlan`` itself (not only ``run_replicates``) refuses a chunk of 0 or
    0 lanes, naming the argument (a 0 chunk made a plan that refused every range)."""
    with pytest.raises(ValueError, match=r"^chunk_size: expected an integer >= 1, got 0$"):
        ReplicatePlan(_uniform, 0, **ONE)
    with pytest.raises(ValueError, match=r"^lanes: expected an integer >= 1, got 0$"):
        ReplicatePlan(_uniform, 4, devices=jax.devices()[:1], lanes=0)


def test_numpy_bools_and_list_operands_are_accepted():
    """``with_index`` and ``progress`` take a NumPy bool like a Python one, and
    ``operands`` a list like a tuple (the signature says a sequence)."""
    f = lambda key, i: i  # noqa: E731
    idx = run_replicates(f, 0, 6, start=3, with_index=np.True_, progress=np.False_, **ONE)
    assert idx.tolist() == [3, 4, 5, 6, 7, 8]
    x = np.arange(3, dtype=np.float32)
    g = lambda key, x: x.sum() + jax.random.uniform(key)  # noqa: E731
    listed = run_replicates(g, 1, 4, operands=[x], progress=False, **ONE)
    np.testing.assert_array_equal(listed, run_replicates(_uniform, 1, 4, progress=False,
                                                         **ONE) + np.float32(3.0))


def test_a_platform_name_as_devices_is_named_whole():
    """``devices="cpu"`` is refused as a whole (it used to become the devices 'c', 'p',
    'u', and the error then named 'c')."""
    with pytest.raises(TypeError, match=r"devices: expected a sequence of JAX devices "
                                        r"\(e\.g\. jax\.devices\('cpu'\)\), got 'cpu'$"):
        ReplicatePlan(_uniform, 4, devices="cpu")


def test_plan_run_index_bound_message_names_start_and_count():
    """``ReplicatePlan.run`` past the uint32 indices names ``start`` and ``n_replicates``
    with their own values."""
    plan = ReplicatePlan(_uniform, 4, **ONE)
    with pytest.raises(ValueError, match=r"got start=4294967288 and n_replicates=12$"):
        plan.run(0, 2**32 - 8, 12, progress=False)


def test_results_too_large_for_the_host_state_their_size_in_bytes(monkeypatch):
    """The refusal's size counts each value's bytes: 2**30 replicates of 2**20 float32
    values are 2**52 bytes, 4194304.0 GiB (not 2**50 values read as bytes)."""
    def empty(*a, **k):
        raise MemoryError("Unable to allocate")

    fake = types.SimpleNamespace(**{n: getattr(np, n) for n in dir(np) if not n.startswith("__")})
    fake.empty = empty
    f = lambda key: jax.random.uniform(key, (2**20,))  # noqa: E731
    plan = ReplicatePlan(f, 2**24, **ONE)  # (built, never dispatched)
    monkeypatch.setattr(_runner, "np", fake)
    with pytest.raises(MemoryError, match=r"^n_replicates=1073741824: the results need "
                                          r"4194304\.0 GiB of host memory"):
        plan.run(0, 0, 2**30, progress=False)


# ------------------------------------------------- the memory-mapping limit (Linux)
def test_after_a_clear_the_next_waits_for_5_percent_over_what_it_left(monkeypatch):
    """A clear that freed mappings (900 held, 700 left) clears again once the count
    passes what it left plus 5% of the limit (810 > 750), not what it found (900)."""
    _pressure(monkeypatch, held=0)
    counts = iter([900, 700, 810, 790])
    monkeypatch.setattr(_runner, "_maps_held", lambda: next(counts))
    with pytest.warns(RuntimeWarning, match=r"held 900 .*\(700 mappings left"):
        assert _runner.relieve_map_pressure("here") is True
    assert _runner._MAPS_AFTER_CLEAR == [700]
    with pytest.warns(RuntimeWarning, match="held 810"):
        assert _runner.relieve_map_pressure("here") is True


def test_a_cached_program_is_run_without_clearing_under_pressure(monkeypatch):
    """The guard runs before *compiling*: a plan found in the cache neither warns nor
    clears JAX's caches, however many mappings the process holds."""
    def fresh(key):  # (a new function: its plan is compiled in this test)
        return jax.random.uniform(key)

    first = run_replicates(fresh, 4, 8, progress=False, **ONE)
    _pressure(monkeypatch, held=900)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        again = run_replicates(fresh, 4, 8, progress=False, **ONE)
    np.testing.assert_array_equal(again, first)
    assert _runner._MAPS_AFTER_CLEAR == []


# ------------------------------------------------ run_replicates' own argument checks
def test_run_replicates_names_bad_devices_and_lanes_before_sizing_its_chunk():
    """``devices`` and ``lanes`` size the chunk before the plan checks them: an int, an
    iterator, text or None failed with Python's own errors (``object of type 'int' has no
    len()``, ``invalid literal for int()``), and an iterator of devices was refused
    although the plan takes one."""
    f = lambda key: jax.random.uniform(key)  # noqa: E731
    for kw, err, text in ((dict(devices=5), TypeError, "devices: expected a sequence"),
                          (dict(devices=[]), ValueError, "devices: expected at least one"),
                          (dict(lanes="x"), TypeError, "lanes: expected an integer >= 1"),
                          (dict(lanes=None), TypeError, "lanes: expected an integer >= 1"),
                          (dict(lanes=0), ValueError, "lanes: expected an integer >= 1")):
        with pytest.raises(err, match=text):
            run_replicates(f, 0, 4, progress=False, **kw)
    once = run_replicates(f, 0, 4, progress=False, devices=iter(jax.devices()[:1]))
    np.testing.assert_array_equal(once, run_replicates(f, 0, 4, progress=False))
