"""Gaps a second mutation review of the replicate runner found (chunk boundaries, seed
types, progress lines, buffer fitting, the plan cache): each test fails on a plausible
bug the rest of the suite let through."""

import io
import re

import jax
import numpy as np
import pytest
from test_runner_mutants import _key_data, _uniform, small_cache  # noqa: F401 (fixture)

from jaxeval import _runner
from jaxeval._runner import ReplicatePlan, capped_chunk, check_int, run_replicates

ONE = dict(devices=jax.devices()[:1], lanes=4)


# ------------------------------------------------------------------ integers and seeds
def test_check_int_bounds_are_inclusive_at_both_ends():
    """``[lo, hi]`` is inclusive: both ends are accepted, one past either is refused
    with the range as stated."""
    assert check_int("k", 1, 1, 10) == 1 and check_int("k", np.int64(10), 1, 10) == 10
    assert check_int("n", 0) == 0
    with pytest.raises(ValueError, match=r"^k: expected an integer in \[1, 10\], got 11$"):
        check_int("k", 11, 1, 10)
    with pytest.raises(ValueError, match=r"^k: expected an integer in \[1, 10\], got 0$"):
        check_int("k", 0, 1, 10)


def test_a_traced_unsigned_seed_is_the_key_of_its_value():
    """A traced 0-d integer seed (vmap over seeds) is ``jax.random.key`` of it, whether
    its dtype is signed or unsigned."""
    per = jax.vmap(lambda s: jax.random.key_data(_runner.as_key(s)))(
        np.arange(3, dtype=np.uint32))
    assert np.asarray(per).tolist() == [_key_data(i) for i in range(3)]


def test_stage_printer_takes_a_numpy_bool(capsys):
    """``progress`` is a bool, a NumPy one included (as in ``run_replicates``)."""
    _runner.stage_printer("fit", np.bool_(True))("step")
    _runner.stage_printer("fit", np.bool_(False))("quiet")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("fit: step [")


# ------------------------------------------------------------------ progress lines
def _progress(monkeypatch, times, total):
    clock = iter(times)
    monkeypatch.setattr(_runner.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    return _runner.Progress(total, stream=out), out


def test_progress_rate_without_a_compile_report_leaves_out_the_first_chunk(monkeypatch):
    """Without ``compiled()``, later lines rate the replicates done since the first
    chunk over the time since it finished: 4 more in 2 s is 2/s, ETA 4 s for 8 left."""
    p, out = _progress(monkeypatch, [0.0, 8.0, 10.0], 16)
    p.update(4)  # 8 s, compilation included
    p.update(4)  # 10 s
    second = out.getvalue().splitlines()[1]
    assert "8/16 replicates" in second and "  2/s  " in second, second
    assert second.endswith("ETA 4.0s"), second


def test_progress_line_shows_the_share_done(monkeypatch):
    """Each line shows the share of the total done, as a percentage and a bar."""
    p, out = _progress(monkeypatch, [0.0, 1.0, 2.0, 3.0], 16)
    p.compiled()
    p.update(4)
    p.update(12)
    first, last = out.getvalue().splitlines()
    assert "[" + "#" * 6 + "." * 18 + "] 4/16 replicates ( 25.0%)" in first, first
    assert "[" + "#" * 24 + "] 16/16 replicates (100.0%)" in last, last


def test_a_run_reports_compilation_so_no_line_carries_the_first_chunk_note(capsys):
    """``run`` tells its progress when the program is compiled, so a run of several
    chunks rates from there and no line says compilation was counted."""
    run_replicates(_uniform, 0, 12, chunk_size=4, progress=True, **ONE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "12/12 replicates" in err[-1], err
    assert not any("compilation included" in ln for ln in err), err


def test_progress_counts_this_calls_replicates_whatever_the_start(capsys):
    """A run from ``start=8`` of 8 replicates reports 4/8 then 8/8 (not out of 16)."""
    run_replicates(_uniform, 0, 8, start=8, chunk_size=4, progress=True, **ONE)
    err = capsys.readouterr().err.strip().splitlines()
    assert ["4/8 replicates" in err[0], "8/8 replicates" in err[1]] == [True, True], err


# ------------------------------------------------------------------ chunks and ranges
def test_a_range_larger_than_the_chunk_is_refused():
    """``iter_ranges`` takes ranges of at most ``chunk_size`` replicates: one of exactly
    that many runs, a longer one is refused naming the range and the chunk size."""
    plan = ReplicatePlan(_uniform, 4, **ONE)
    ((lo, hi, res),) = plan.iter_ranges(3, [(4, 8)])
    np.testing.assert_array_equal(res, run_replicates(_uniform, 3, 4, start=4, progress=False,
                                                      **ONE))
    with pytest.raises(ValueError, match=r"range \[0, 8\) must be .*at most chunk_size=4"):
        list(plan.iter_ranges(3, [(0, 8)]))


def test_capped_chunk_holds_the_run_in_whole_lane_blocks_per_device():
    """The chunk is whole blocks of ``lanes`` on every device, at most the smallest
    power-of-two number of such steps that holds the run."""
    assert capped_chunk(1000, 5, 4, 1) == 8  # 2 blocks of 4 hold 5
    assert capped_chunk(1000, 8, 4, 1) == 8 and capped_chunk(1000, 9, 4, 1) == 16
    assert capped_chunk(1000, 5, 4, 8) == 32  # one step of 4 lanes on 8 devices
    assert capped_chunk(1000, 33, 4, 8) == 64
    assert capped_chunk(6, 100, 4, 1) == 8  # rounded up, not down
    assert capped_chunk(6, 100, 4, 2) == 8


_DEPTH = 2


def test_refitted_buffers_hold_every_replicate_of_a_run_with_a_partial_last_chunk():
    """Stale cached output shapes are replaced by buffers for the whole run, not for
    the first chunk: 6 replicates in chunks of 4 come back as [6, 1], each the
    replicate computed on its own."""
    global _DEPTH

    def fn(key):  # a fresh function: its own plans
        return {"v": jax.random.uniform(key, (_DEPTH,))}

    _DEPTH = 2
    try:
        ReplicatePlan(fn, 4, **ONE)  # output shapes traced with 2
        _DEPTH = 1
        out = ReplicatePlan(fn, 4, **ONE).run(5, 2, 6, progress=False)
        assert out["v"].shape == (6, 1)
        want = [jax.random.uniform(jax.random.fold_in(jax.random.key(5), i), (1,))
                for i in range(2, 8)]
        np.testing.assert_array_equal(out["v"], np.stack(want))
    finally:
        _DEPTH = 2


# ------------------------------------------------------------------ the plan cache
def _adder(c):
    return lambda key: jax.random.uniform(key) + c


class _Shift:
    def __init__(self, c):
        self.c = c

    def draw(self, key):
        return jax.random.uniform(key) + self.c


@pytest.mark.usefixtures("small_cache")
def test_plan_cache_keeps_the_recently_used_and_fills_up():
    """A program used again is the most recent: the one left unused is dropped when a
    third comes, and the cache holds its full two."""
    f0, f1, f2 = (_adder(c) for c in range(3))
    for f in (f0, f1, f0, f2):
        run_replicates(f, 0, 4, progress=False, **ONE)
    assert len(_runner._PLAN_ORDER) == 2
    assert _runner._PLANS.get(f0) and _runner._PLANS.get(f2) and not _runner._PLANS.get(f1)


@pytest.mark.usefixtures("small_cache")
def test_strongly_held_plans_are_bounded_and_listed():
    """Bound methods' programs are held strongly, under the same bound: the oldest is
    dropped, and ``_cached_plans`` lists those held."""
    objs = [_Shift(float(c)) for c in range(3)]
    for o in objs:
        run_replicates(o.draw, 0, 4, progress=False, **ONE)
    assert len(_runner._PLAN_CACHE) == 2 and len(_runner._cached_plans()) == 2


@pytest.mark.usefixtures("small_cache")
def test_a_bound_method_compiles_once():
    """A bound method is a new object at every attribute access: its program is found
    again all the same (it used to be held by the dead first object)."""
    obj = _Shift(1.0)
    first = ReplicatePlan(obj.draw, 4, **ONE)._fn
    plan = ReplicatePlan(obj.draw, 4, **ONE)
    assert plan._fn is first
    np.testing.assert_array_equal(plan.run(0, 0, 4, progress=False),
                                  run_replicates(_uniform, 0, 4, progress=False, **ONE) + 1.0)


# ------------------------------------------------- a library problem the review found
def test_plan_run_and_iter_ranges_check_their_integers_naming_them():
    """``ReplicatePlan.run`` read ``start=True`` as 1 and failed inside NumPy on a float or
    negative count; ``iter_ranges`` cut ``(0.5, 3.9)`` to replicates 0-2. Each is refused
    naming the argument, and numpy integers still work."""
    plan = ReplicatePlan(lambda k: jax.random.uniform(k), 4, lanes=4,
                         devices=jax.devices()[:1])
    for args, err, msg in [
        ((0, True, 3), TypeError, "start: expected an integer >= 0, got bool True"),
        ((0, 2.5, 4), TypeError, "start: expected an integer >= 0, got float 2.5"),
        ((0, -3, 5), ValueError, "start: expected an integer >= 0, got -3"),
        ((0, 0, 2.5), TypeError, "n_replicates: expected an integer >= 1, got float 2.5"),
        ((0, 0, 0), ValueError, "n_replicates: expected an integer >= 1, got 0"),
    ]:
        with pytest.raises(err, match=re.escape(msg)):
            plan.run(*args, progress=False)
    for ranges, msg in [([(0.5, 3.9)], "ranges[0] start: expected an integer >= 0, got "
                         "float 0.5"),
                        ([(0, 2), (1, True)], "ranges[1] end: expected an integer >= 0, got "
                         "bool True")]:
        with pytest.raises(TypeError, match=re.escape(msg)):
            next(plan.iter_ranges(0, ranges))
    whole = plan.run(0, 0, 4, progress=False)
    np.testing.assert_array_equal(plan.run(0, np.int64(1), np.int32(3), progress=False),
                                  whole[1:])
    (lo, hi, part), = plan.iter_ranges(0, [(np.uint8(2), np.int64(4))])
    assert (lo, hi) == (2, 4) and type(lo) is int
    np.testing.assert_array_equal(part, whole[2:])
