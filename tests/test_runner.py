"""The generic replicate runner: keys, chunking, sharding, compilation, progress."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _runner
from jaxeval._runner import ReplicatePlan, as_key, chunk_ranges, run_replicates

REPO = Path(__file__).resolve().parents[1]


def toy(key, V):
    """A small replicate with the ingredients of a real one: matmul, scan, reductions."""
    draws = jax.random.uniform(key, (17, V.shape[0]))
    u = draws[0, : V.shape[1]] * 2.0 - 1.0
    p = jax.nn.sigmoid(V @ u)

    def body(c, d):
        c = c + (d < p).astype(jnp.int32)
        return c, jnp.max(c)

    counts, _ = jax.lax.scan(body, jnp.zeros(V.shape[0], jnp.int32), draws[1:])
    est = counts.astype(jnp.float32) / 16.0
    return {
        "best": jnp.argmax(est),
        "est": est,
        "loss": jnp.sum(jnp.log1p(est * p)),
        "total": jnp.sum(counts),
    }


V = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)


def assert_tree_equal(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.fixture(scope="module")
def reference():
    return run_replicates(toy, 7, 300, operands=(V,), devices=jax.devices()[:1], progress=False)


def test_shapes_dtypes_and_keys(reference):
    assert reference["est"].shape == (300, 40) and reference["est"].dtype == np.float32
    assert reference["best"].shape == (300,) and reference["best"].dtype == np.int32
    assert reference["total"].dtype == np.int32
    # replicate i is exactly toy(fold_in(key(7), i)), computed on its own
    base = jax.random.key(7)
    for i in (0, 1, 150, 299):
        one = jax.jit(toy)(jax.random.fold_in(base, i), V)
        np.testing.assert_array_equal(reference["best"][i], one["best"])
        np.testing.assert_array_equal(reference["total"][i], one["total"])
    # distinct replicates really differ
    assert len(np.unique(reference["total"])) > 20


@pytest.mark.default_codegen
@pytest.mark.parametrize(
    "chunk_size, n_dev",
    [(None, 8), (1, 1), (45, 3), (64, 8)],
)
def test_chunked_and_sharded_bit_identical(reference, chunk_size, n_dev):
    assert len(jax.devices()) == 8
    out = run_replicates(
        toy,
        7,
        300,
        operands=(V,),
        chunk_size=chunk_size,
        devices=jax.devices()[:n_dev],
        progress=False,
    )
    assert_tree_equal(out, reference)


@pytest.mark.default_codegen
def test_start_offset_and_split_ranges(reference):
    a = run_replicates(toy, 7, 123, operands=(V,), chunk_size=50, progress=False)
    b = run_replicates(toy, 7, 177, start=123, operands=(V,), chunk_size=200, progress=False)
    merged = {k: np.concatenate([a[k], b[k]]) for k in a}
    assert_tree_equal(merged, reference)



def test_dispatches_start_on_lane_blocks(monkeypatch):
    """Replicate i always runs in lane i % lanes of its vmapped block, whatever the
    range asked for: a range or ``start`` off the lane grid shifted every replicate to
    another lane, and PULSE rounds differently in some lanes (the last bit of its
    estimates changed for a ``--range 40:64`` job against the whole run)."""
    starts = []
    dispatch = ReplicatePlan._dispatch

    def spy(self, key_data, lo):
        starts.append((lo, self.lanes))
        return dispatch(self, key_data, lo)

    monkeypatch.setattr(ReplicatePlan, "_dispatch", spy)
    kw = dict(operands=(V,), chunk_size=64, devices=jax.devices()[:1], progress=False)
    whole = run_replicates(toy, 7, 300, **kw)  # (same chunk: same compiled program)
    starts.clear()
    out = run_replicates(toy, 7, 177, start=123, **kw)
    assert_tree_equal(out, {k: v[123:] for k, v in whole.items()})
    assert starts and all(a % lanes == 0 for a, lanes in starts), starts
    # a range the aligned window does not cover takes a second dispatch
    plan = ReplicatePlan(toy, 64, operands=(V,), lanes=32, devices=jax.devices()[:1])
    starts.clear()
    ((lo, hi, res),) = plan.iter_ranges(7, [(40, 100)])
    assert (lo, hi) == (40, 100) and [a for a, _ in starts] == [32, 96]
    assert_tree_equal(res, {k: v[40:100] for k, v in whole.items()})


def test_seed_as_key_or_key_data(reference):
    for seed in (jax.random.key(7), np.asarray(jax.random.key_data(jax.random.key(7)))):
        out = run_replicates(toy, seed, 300, operands=(V,), progress=False)
        assert_tree_equal(out, reference)
    other = run_replicates(toy, 8, 300, operands=(V,), progress=False)
    assert not np.array_equal(other["est"], reference["est"])


def test_closure_instead_of_operands(reference):
    out = run_replicates(lambda k: toy(k, V), 7, 300, chunk_size=96, progress=False)
    assert_tree_equal(out, reference)


def test_compiled_once_across_chunks_and_seeds():
    def fn(key, V):  # a fresh function, so the plan cache starts empty for it
        return toy(key, V)

    plan = ReplicatePlan(fn, 32, devices=jax.devices()[:4], operands=(V,))
    assert plan.chunk_size == 128  # rounded up to lanes * devices
    plan.run(0, 0, 1000, progress=False)  # 8 chunks, the last one padded
    plan.run(123, 40, 77, progress=False)  # another seed, another start
    assert plan._fn._cache_size() == 1
    # A second plan with the same function and layout reuses the compiled program.
    plan2 = ReplicatePlan(fn, 100, devices=jax.devices()[:4], operands=(V,))
    assert plan2._fn is plan._fn


def test_plan_cache_key_tells_platforms_apart():
    """A CPU and a GPU both have a device 0: a plan compiled for one is not the other's."""
    from types import SimpleNamespace

    from jaxeval._runner import _devices_key

    cpu0 = SimpleNamespace(platform="cpu", id=0)
    gpu0 = SimpleNamespace(platform="gpu", id=0)
    assert _devices_key([cpu0]) != _devices_key([gpu0])
    assert _devices_key([cpu0, gpu0]) != _devices_key([gpu0, cpu0])
    real = jax.devices()[:2]
    assert _devices_key(real) == tuple((d.platform, d.id) for d in real)


def test_devices_must_be_jax_devices():
    """A platform name or a bare value where devices belong is named (``"cpu"`` used to
    become the devices 'c', 'p', 'u' and fail deep inside the mesh)."""
    for bad in ("cpu", 5, ["cpu"]):
        with pytest.raises(TypeError, match="devices: expected"):
            ReplicatePlan(toy, 4, devices=bad)
    with pytest.raises(ValueError, match="devices: expected at least one device"):
        ReplicatePlan(toy, 4, devices=[])
    assert ReplicatePlan(toy, 4, devices=jax.devices()[:1], operands=(V,)).n_devices == 1


def test_memory_bounded_by_chunk_size():
    """The compiled chunk program's memory grows with the chunk, not with the study."""

    def fn(key):
        return jnp.sort(jax.random.uniform(key, (2048,)))[:4]

    temp, outs = {}, {}
    for chunk in (256, 1024):
        plan = ReplicatePlan(fn, chunk, devices=jax.devices()[:1])
        key = plan._global(np.zeros(2, np.uint32), plan._rep)
        idx = plan._global(np.zeros(plan.chunk_size, np.uint32), plan._split)
        mem = plan._fn.lower(key, idx).compile().memory_analysis()
        temp[chunk], outs[chunk] = mem.temp_size_in_bytes, mem.output_size_in_bytes
    # Per device step only `lanes` replicates are live, so the temporaries stay flat
    # (a whole chunk live at once: 8 times the 256-chunk's at 1024); the output is the
    # chunk's own, 4 times.
    assert temp[1024] <= 1.1 * temp[256]
    assert outs[1024] == 4 * outs[256]
    # and the output of a 1000-replicate study streams through a fixed-size chunk
    out = run_replicates(fn, 0, 1000, chunk_size=256, devices=jax.devices()[:1], progress=False)
    assert out.shape == (1000, 4)


def test_progress_lines(capsys):
    run_replicates(toy, 0, 100, operands=(V,), chunk_size=32, devices=jax.devices()[:1])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4  # one per chunk
    assert err[-1].startswith("[jaxeval]") and "100/100 replicates" in err[-1]
    assert "/s" in err[0] and "ETA" in err[0]
    run_replicates(toy, 0, 100, operands=(V,), chunk_size=32, progress=False)
    assert capsys.readouterr().err == ""


def test_default_chunks_report_progress_along_the_way(capsys):
    """Without ``chunk_size`` a run is cut into about eight chunks, one progress line
    each (it used to be one chunk: a single line at the very end), same numbers."""
    dev = jax.devices()[:1]
    out = run_replicates(toy, 0, 256, operands=(V,), devices=dev, lanes=8)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 8 and "256/256 replicates" in err[-1], err
    whole = run_replicates(toy, 0, 256, operands=(V,), devices=dev, lanes=8, chunk_size=256,
                           progress=False)
    assert_tree_equal(out, whole)


def test_results_too_large_for_the_host_are_refused_with_the_size(monkeypatch):
    """numpy's own MemoryError named only an array shape; the refusal names the
    setting to change and the size."""
    import types

    import jaxeval._runner as runner

    def empty(*a, **k):
        raise MemoryError("Unable to allocate")

    fake = types.SimpleNamespace(**{n: getattr(np, n) for n in dir(np) if not n.startswith("__")})
    fake.empty = empty
    monkeypatch.setattr(runner, "np", fake)
    with pytest.raises(MemoryError, match=r"n_replicates=100: the results need 0\.0 GiB of host "
                       "memory.*start= continues.*run_study"):
        run_replicates(toy, 0, 100, operands=(V,), devices=jax.devices()[:1], progress=False)


def test_replicate_index_passed_on_request():
    """``with_index=True``: replicate i gets its global index (across chunks and
    ``start``) beside its key, which stays ``fold_in(base, i)``."""
    f = lambda key, i: (i, jax.random.uniform(key))  # noqa: E731
    idx, u = run_replicates(f, 3, 10, chunk_size=4, start=5, lanes=2, progress=False,
                            with_index=True)
    assert idx.tolist() == list(range(5, 15))
    ref = run_replicates(lambda key: jax.random.uniform(key), 3, 10, chunk_size=4, start=5,
                         lanes=2, progress=False)
    np.testing.assert_array_equal(u, ref)


def test_chunk_ranges():
    assert chunk_ranges(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_ranges(5, 6, 4) == [(5, 6)]


def test_bad_arguments_named():
    f = lambda k: jax.random.uniform(k)
    with pytest.raises(ValueError, match="n_replicates"):
        run_replicates(f, 0, 0)
    with pytest.raises(ValueError, match="start"):
        run_replicates(f, 0, 3, start=-1)
    with pytest.raises(ValueError, match="chunk_size"):
        run_replicates(f, 0, 3, chunk_size=0)
    with pytest.raises(ValueError, match="lanes"):
        run_replicates(f, 0, 3, lanes=0)
    with pytest.raises(TypeError, match="seed"):
        run_replicates(f, "zero", 3)
    with pytest.raises(ValueError, match="seed"):
        as_key(-1)
    # a typed key among the operands failed in np.asarray with JAX's own message
    with pytest.raises(TypeError, match="operands: a typed PRNG key cannot be an operand"):
        run_replicates(lambda k, kk: jax.random.uniform(k), 0, 2,
                       operands=(jax.random.key(1),), progress=False)
    # an array as operands was unpacked into one operand per row ("takes 2 positional
    # arguments but 4 were given"); a string flag counted as true; a number as the
    # function failed as "'int' object is not callable"
    with pytest.raises(TypeError, match=r"operands: expected a tuple of operands, got "
                       r"ndarray; pass \(x,\) for one operand"):
        run_replicates(lambda k, x: x.sum(), 0, 2, operands=np.ones(3), progress=False)
    with pytest.raises(TypeError, match="with_index: expected True or False, got 'no'"):
        run_replicates(f, 0, 2, with_index="no", progress=False)
    with pytest.raises(TypeError, match="progress: expected True or False, got 'x'"):
        run_replicates(f, 0, 2, progress="x")
    with pytest.raises(TypeError, match="replicate_fn: expected a function"):
        run_replicates(3, 0, 2)


def test_one_seed_parser_for_the_whole_package():
    """An int seed means the same stream whatever its type (Python, NumPy, a 0-d NumPy or
    JAX array), in the runner, the synthetic draws, the factorization and the anchor
    fit; errors name the argument the same way everywhere."""
    import jaxeval
    from jaxeval._runner import int_seed

    data = lambda s: np.asarray(jax.random.key_data(as_key(s))).tolist()
    for s in (np.int64(7), np.array(7), jnp.int32(7), jnp.uint32(7), np.uint64(7)):
        assert data(s) == data(7)
        assert int_seed(s, jax.random.key(0), 1) == 7
    big = np.array(2**40 + 3, np.int64)
    assert data(big) == data(2**40 + 3) != data(3)
    f = lambda k: jax.random.uniform(k)
    np.testing.assert_array_equal(run_replicates(f, jnp.int32(7), 3, progress=False),
                                  run_replicates(f, 7, 3, progress=False))
    np.testing.assert_array_equal(jaxeval.synthetic_matrix(np.array(3), 4, 6).scores,
                                  jaxeval.synthetic_matrix(3, 4, 6).scores)
    sm = jaxeval.synthetic_score_matrix(0, 12, 30)
    a = jaxeval.fit_factorization(sm, 2, 0.1, seed=jnp.int32(4), num_steps=20)
    b = jaxeval.fit_factorization(sm, 2, 0.1, seed=4, num_steps=20)
    np.testing.assert_array_equal(a.U, b.U)
    assert a.info["seed"] == b.info["seed"] == 4
    # a traced seed (vmap over seeds) is jax.random.key of it
    per = jax.vmap(lambda s: jax.random.key_data(as_key(s)))(jnp.arange(3))
    assert per.tolist() == [data(i) for i in range(3)]
    for bad, error, match in (
            (-1, ValueError, "seed: expected a non-negative int seed below 2\\*\\*63, got -1"),
            (jnp.int32(-2), ValueError, "below 2\\*\\*63, got -2"),
            (True, TypeError, "seed: expected a non-negative int seed, a PRNG key .* got bool"),
            (np.bool_(True), TypeError, "got bool"),
            (2.0, TypeError, "got float 2.0"),
            (None, TypeError, "got NoneType None"),
            (np.zeros(2, np.int32), TypeError, r"got dtype int32 and shape \(2,\)"),
            (jax.random.split(jax.random.key(0)), TypeError, "array of keys of shape")):
        with pytest.raises(error, match=match):
            as_key(bad)
        with pytest.raises(error, match="seed: "):
            run_replicates(f, bad, 2, progress=False)
        with pytest.raises(error, match="'key_or_seed': "):
            jaxeval.synthetic_matrix(bad, 4, 6)


def test_one_integer_parser_for_the_whole_package():
    """Every integer argument reads a Python int, a NumPy int and a concrete 0-d integer
    array (NumPy or JAX) alike, and refuses a bool or a float with a TypeError and a
    value out of range with a ValueError, in one wording that names the argument and
    its range."""
    import jaxeval
    from jaxeval._runner import check_int

    for v in (5, np.int64(5), np.uint8(5), np.array(5), jnp.int32(5), jnp.array(5, jnp.int16)):
        assert check_int("k", v, 1, 10) == 5 and type(check_int("k", v, 1, 10)) is int
    for bad, error, match in (
            (True, TypeError, r"k: expected an integer in \[1, 10\] \(why\), got bool True"),
            (np.bool_(False), TypeError, "got bool False"),
            (5.0, TypeError, "got float 5.0"),
            (np.float32(5), TypeError, "got float32 5.0"),
            ("5", TypeError, "got str '5'"),
            (None, TypeError, "got NoneType None"),
            (np.array([5]), TypeError, "got ndarray"),
            (np.array(5.0), TypeError, "got ndarray"),
            (0, ValueError, r"k: expected an integer in \[1, 10\] \(why\), got 0$"),
            (np.int64(11), ValueError, "got 11$")):
        with pytest.raises(error, match=match):
            check_int("k", bad, 1, 10, why="why")
    with pytest.raises(ValueError, match="n: expected an integer >= 2, got 1"):
        check_int("n", 1, 2)
    # traced: not an int (the caller decides whether a traced count can mean anything)
    with pytest.raises(TypeError, match="got"):
        jax.jit(lambda x: check_int("k", x, 1))(jnp.int32(3))

    # the public sites: a 0-d array is the int it holds
    sm = jaxeval.synthetic_score_matrix(np.array(0), np.array(100), jnp.array(60))
    assert sm.shape == (100, 60)
    a, b = sm.split([10], seed=np.array(3)), sm.split([10], seed=3)
    assert [p.models.tolist() for p in a] == [p.models.tolist() for p in b]
    assert sm.protocol_split(jnp.array(3)).seed == 3
    lr = jaxeval.fit_factorization(sm, np.array(2), 0.1, num_steps=jnp.array(20), seed=1)
    assert lr.rank == 2
    pred = jaxeval.fit_anchors(sm, jnp.array(5), method="random_mean", seed=0)
    assert pred.k == 5 and pred.extra_items(np.array(3), seed=1).shape == (3,)
    for call, match in ((lambda: sm.split([10], seed=1.0), "split: seed: expected an integer"),
                        (lambda: jaxeval.fit_anchors(sm, 5.0, method="random_mean"),
                         r"k: expected an integer in \[1, 59\]"),
                        (lambda: jaxeval.fit_factorization(sm, 2.0, 0.1),
                         "rank: expected an integer >= 1"),
                        (lambda: jaxeval.learn_lam0(sm, folds=2.0), "folds: expected an integer")):
        with pytest.raises(TypeError, match=match):
            call()


def test_seeds_above_2_pow_32_get_their_own_stream():
    # jax.random.key keeps only the low 32 bits of an int seed when x64 is off:
    # seeds 1 and 2**32 + 1 must not share a stream (a study accepts seeds < 2**63).
    data = lambda s: np.asarray(jax.random.key_data(as_key(s))).tolist()
    assert data(1) == np.asarray(jax.random.key_data(jax.random.key(1))).tolist()
    assert data(2**32 - 1) == [0, 2**32 - 1]
    assert data(2**32 + 1) == [1, 1] != data(1)
    assert data(2**63 - 1) == [2**31 - 1, 2**32 - 1]
    assert len({tuple(data(s)) for s in (5, 2**32 + 5, 2**33 + 5, 2**62 + 5)}) == 4
    with pytest.raises(ValueError, match="seed"):
        as_key(2**63)
    # ... and the replicates of those seeds differ
    f = lambda k: jax.random.uniform(k)
    a = run_replicates(f, 7, 4, progress=False)
    b = run_replicates(f, 2**32 + 7, 4, progress=False)
    assert not np.allclose(a, b)


DIST_SCRIPT = textwrap.dedent(
    """
    import os, sys
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid
    )
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(out)))
    from test_runner import toy, V
    from jaxeval._runner import run_replicates
    assert len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    res = run_replicates(toy, 7, 300, operands=(V,), chunk_size=96, progress=False)
    np.savez(out + f".{pid}.npz", **res)
    jax.distributed.shutdown()
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.default_codegen
def test_two_processes_jax_distributed_bit_identical(reference, tmp_path):
    """One program over 2 processes x 2 devices on loopback = 1 device, bit for bit."""
    script = tmp_path / "dist.py"
    script.write_text(DIST_SCRIPT)
    # the worker imports `toy` from this file
    (tmp_path / "test_runner.py").write_text(Path(__file__).read_text())
    out = str(tmp_path / "res")
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS",)}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), port, out],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    for i in range(2):
        with np.load(f"{out}.{i}.npz") as z:
            assert_tree_equal(dict(z), reference)


def test_progress_rate_excludes_compilation_and_smooths_concurrent_chunks(monkeypatch):
    """With ``compiled()`` reported, the rate runs from the end of compilation: a
    10 s compile does not inflate the first ETA, and a chunk that finished while the
    previous one was fetched does not show as a burst of thousands per second."""
    import io

    from jaxeval import _runner

    clock = iter([0.0, 10.0, 12.0, 12.001, 14.0])
    monkeypatch.setattr(_runner.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    p = _runner.Progress(16, stream=out)  # t0 = 0
    p.compiled()  # 10
    p.update(4)  # 12: 4 in 2 s
    p.update(4)  # 12.001: 8 in 2.001 s
    p.update(4)  # 14: 12 in 4 s
    lines = out.getvalue().splitlines()
    assert [ln.split("/s")[0].split()[-1] for ln in lines] == ["2", "4", "3"]
    assert lines[0].endswith("ETA 6.0s") and "elapsed 12.0s" in lines[0]
    # without the report (a caller that cannot tell) the first line counts from t0;
    # a rate below 1/s is printed as such, not rounded to 0/s
    clock2 = iter([0.0, 8.0])
    monkeypatch.setattr(_runner.time, "perf_counter", lambda: next(clock2))
    out2 = io.StringIO()
    q = _runner.Progress(16, stream=out2)
    q.update(4)
    assert "  0.5/s  " in out2.getvalue() and "ETA 24.0s" in out2.getvalue()
    assert out2.getvalue().rstrip().endswith("(first chunk, compilation included)")
    assert "compilation included" not in out.getvalue()  # (reported: excluded)
    assert _runner._fmt_rate(1 / 52) == "52.0s each" and _runner._fmt_rate(0.0) == "0/s"
    # a task of one chunk whose work ran before the dispatch returned (compiled() just
    # before the update): its one line gives the whole run's rate, not a burst
    clock3 = iter([0.0, 12.0, 12.0001])
    monkeypatch.setattr(_runner.time, "perf_counter", lambda: next(clock3))
    out3 = io.StringIO()
    r = _runner.Progress(128, stream=out3)
    r.compiled()
    r.update(128)
    assert "  11/s  " in out3.getvalue(), out3.getvalue()


def test_importing_jaxeval_starts_no_backend():
    """``import jaxeval`` (and its subpackages) must not initialise a JAX backend, so that
    a cluster script can call ``jax.distributed.initialize()`` after importing it."""
    code = ("import jaxeval, jaxeval.anchors, jaxeval.metrics, jaxeval._cli, jaxeval._report\n"
            "import jaxeval._tables, jaxeval._lmeval\n"
            "from jax._src import xla_bridge\n"
            "assert not xla_bridge.backends_are_initialized(), 'a backend was started'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]


def test_chunk_larger_than_the_run_computes_no_padding():
    """chunk_size beyond n_replicates compiled and ran the whole padded chunk (1 024
    evaluations for one replicate at chunk_size=1000)."""
    def fn(key):  # a fresh function: its own plans
        return jax.random.uniform(key)

    one = run_replicates(fn, 3, 1, chunk_size=1000, devices=jax.devices()[:1], lanes=4,
                         progress=False)
    (key,) = _runner._PLANS[fn]  # (per-device chunk, lanes, devices, operands, index)
    assert one.shape == (1,)
    assert key[0] == 4  # one block of 4 lanes, not 1 000 replicates
    # runs of other sizes below the chunk share a few programs (powers of two of blocks)
    for n in (3, 5, 6, 7, 8, 9):
        run_replicates(fn, 3, n, chunk_size=1000, devices=jax.devices()[:1], lanes=4,
                       progress=False)
    assert sorted(k[0] for k in _runner._PLANS[fn]) == [4, 8, 16]


def test_index_bound_refused_before_any_work():
    calls = []

    def fn(key):
        return jax.random.uniform(key)

    plan = ReplicatePlan(fn, 4, devices=jax.devices()[:1], lanes=4)
    orig = plan._dispatch
    plan._dispatch = lambda *a: calls.append(a) or orig(*a)
    with pytest.raises(ValueError, match=r"start \+ n_replicates must stay at most 2\*\*32"):
        plan.run(0, 2**32 - 8, 12, progress=False)
    with pytest.raises(ValueError, match=r"start=4294967288 and n_replicates=12"):
        run_replicates(fn, 0, 12, start=2**32 - 8, progress=False)
    with pytest.raises(ValueError, match=r"range \[8, 8\) must be non-empty"):
        list(plan.iter_ranges(0, [(0, 4), (4, 8), (8, 8)]))
    assert calls == []  # every range is checked before the first is computed


def test_compiled_plans_die_with_their_function():
    """Plans were kept in a module cache keyed by the function: a fresh closure per call
    (over a large array, say) stayed alive with its program, up to 32 of them."""
    import gc
    import weakref

    big = np.ones((1000,), np.float32)

    def make():
        data = big.copy()
        return lambda key: jax.random.uniform(key) + data[0]

    f = make()
    run_replicates(f, 0, 4, devices=jax.devices()[:1], lanes=4, progress=False)
    ref = weakref.ref(f)
    assert len(_runner._PLANS[f]) == 1
    del f
    gc.collect()
    assert ref() is None
    # ... while a live function keeps its program (compiled once), nothing is added to
    # the function object (it still pickles), and the cache holds at most 32 programs
    import functools
    import pickle

    g = functools.partial(_scaled, 2.0)
    run_replicates(g, 0, 4, devices=jax.devices()[:1], lanes=4, progress=False)
    ((plan, _),) = _runner._PLANS[g].values()
    run_replicates(g, 5, 4, devices=jax.devices()[:1], lanes=4, progress=False)
    assert plan._cache_size() == 1 and pickle.loads(pickle.dumps(g)).args == (2.0,)
    keep = [functools.partial(_scaled, float(i)) for i in range(40)]
    for h in keep:
        run_replicates(h, 0, 4, devices=jax.devices()[:1], lanes=4, progress=False)
    assert len(_runner._cached_plans()) <= _runner._PLAN_CACHE_SIZE


def _scaled(c, key):
    return c * jax.random.uniform(key)


def test_a_cached_plan_keeps_its_output_shapes_per_dtype_mode():
    """A second plan for the same function and operands traces nothing: its output shapes
    come with the cached program (tracing for them again cost most of a small study's
    run); under x64 they are traced anew, with the dtypes x64 gives."""
    traced = []

    def fn(key, x):
        traced.append(1)
        return {"u": jax.random.uniform(key, x.shape) + x, "n": jnp.sum(x > 0)}

    x = np.ones(3, np.float32)
    first = ReplicatePlan(fn, 8, devices=jax.devices()[:1], lanes=4, operands=(x,))
    n0 = len(traced)
    assert n0 >= 1 and first.out_shapes["u"].shape == (3,)
    again = ReplicatePlan(fn, 8, devices=jax.devices()[:1], lanes=4, operands=(x,))
    assert len(traced) == n0 and again.out_shapes == first.out_shapes
    out = again.run(0, 0, 6, progress=False)
    assert out["u"].shape == (6, 3) and out["u"].dtype == np.float32
    with jax.enable_x64(True):
        wide = ReplicatePlan(fn, 8, devices=jax.devices()[:1], lanes=4, operands=(x,))
        assert wide.out_shapes["n"].dtype == np.int64  # (int32 with x64 off)
        assert wide.run(0, 0, 6, progress=False)["n"].dtype == np.int64
    assert first.out_shapes["n"].dtype == np.int32


_WIDTH = 2


def test_results_take_the_shapes_the_program_returns_not_stale_cached_ones():
    """The cached output shapes can be stale: a plan built (shapes traced) while a global
    the function reads held 2, run after it changed to 1 (the program is traced when
    first called). The results follow the program: [4, 1], not four values broadcast
    into a [4, 2] buffer (a review's probe found that with the cache alone)."""
    global _WIDTH

    def fn(key):
        return {"v": jax.random.uniform(key, (_WIDTH,))}

    _WIDTH = 2
    try:
        first = ReplicatePlan(fn, 4, devices=jax.devices()[:1], lanes=4)
        assert first.out_shapes["v"].shape == (2,)
        _WIDTH = 1
        plan = ReplicatePlan(fn, 4, devices=jax.devices()[:1], lanes=4)
        out = plan.run(0, 0, 4, progress=False)
        assert out["v"].shape == (4, 1)
        want = [jax.random.uniform(jax.random.fold_in(jax.random.key(0), i), (1,))
                for i in range(4)]
        np.testing.assert_array_equal(out["v"], np.stack(want))
        assert plan.out_shapes["v"].shape == (1,)  # and the cache now says so
        assert ReplicatePlan(fn, 4, devices=jax.devices()[:1], lanes=4).out_shapes[
            "v"].shape == (1,)
    finally:
        _WIDTH = 2


# ------------------------------------------------- the memory-mapping limit (Linux)
def _pressure(monkeypatch, held, limit=1000, cleared=None):
    monkeypatch.setattr(_runner, "_max_map_count", lambda: limit)
    monkeypatch.setattr(_runner, "_maps_held", lambda: held)
    monkeypatch.setattr(_runner, "_MAPS_AFTER_CLEAR", [] if cleared is None else [cleared])


def test_relieve_map_pressure_clears_jax_caches_only_past_the_share_and_warns(monkeypatch):
    f = jax.jit(lambda x: x + 1.0)
    f(1.0)
    assert f._cache_size() == 1
    _pressure(monkeypatch, held=800)  # at 0.8 of the limit: kept
    assert _runner.relieve_map_pressure("here") is False and f._cache_size() == 1
    _pressure(monkeypatch, held=801)
    with pytest.warns(RuntimeWarning, match=r"^here: this process held 801 memory mappings "
                      r"of the 1000 Linux allows \(vm.max_map_count\)") as rec:
        assert _runner.relieve_map_pressure("here") is True
    assert len(rec) == 1 and "caches were cleared (801 mappings left" in str(rec[0].message)
    assert rec[0].filename == __file__  # (pointed at the caller outside jaxeval)
    assert f._cache_size() == 0  # (and it still computes, compiled again)
    assert float(f(2.0)) == 3.0 and f._cache_size() == 1
    # a clear that freed nothing (the mappings are not JAX's) is not repeated at every
    # compilation: only once the count grew by another 5% of the limit
    f(1.0)
    _pressure(monkeypatch, held=850, cleared=801)
    assert _runner.relieve_map_pressure("here") is False and f._cache_size() == 1
    _pressure(monkeypatch, held=852, cleared=801)
    with pytest.warns(RuntimeWarning, match="held 852"):
        assert _runner.relieve_map_pressure("here") is True
    assert f._cache_size() == 0 and _runner._MAPS_AFTER_CLEAR == [852]
    f(1.0)
    # where /proc cannot be read (not Linux): nothing happens
    _pressure(monkeypatch, held=10**6, limit=None)
    assert _runner.relieve_map_pressure("here") is False and f._cache_size() == 1
    monkeypatch.setattr(_runner, "_max_map_count", lambda: 1000)
    monkeypatch.setattr(_runner, "_maps_held", lambda: None)
    assert _runner.relieve_map_pressure("here") is False and f._cache_size() == 1


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc")
def test_the_mapping_counts_are_read_from_proc():
    assert _runner._max_map_count() == int(Path("/proc/sys/vm/max_map_count").read_text())
    held = _runner._maps_held()
    jax.jit(lambda x: jnp.sin(x) * 3.0)(np.ones(5, np.float32)).block_until_ready()
    assert 0 < held <= _runner._maps_held()  # (a compiled program maps its code)


def test_a_run_under_mapping_pressure_warns_and_gives_the_same_replicates(monkeypatch):
    def fresh(key, V):  # (a new function: its plan is compiled in this test)
        return toy(key, V)

    ref = run_replicates(toy, 7, 40, operands=(V,), devices=jax.devices()[:1], progress=False)
    _pressure(monkeypatch, held=900)
    with pytest.warns(RuntimeWarning, match="compiling a replicate program: this process "
                      "held 900 memory mappings") as rec:
        out = run_replicates(fresh, 7, 40, operands=(V,), devices=jax.devices()[:1],
                             progress=False)
    assert_tree_equal(out, ref)
    assert [w.filename for w in rec] == [__file__]  # (the call above, not jaxeval's code)
