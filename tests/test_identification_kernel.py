"""identification_kernel: simulate_identification's loop as a pure JAX function that a
researcher composes with jit / vmap / shard_map; its replicates are simulate's, bit for
bit; float64 operands under x64 are cast; new params never recompile."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxeval


@pytest.fixture(scope="module")
def musr():
    return jaxeval.load("oll2_musr").take(models=np.arange(120), items=np.arange(150))


_KW = dict(K=5, budget_fractions=(0.02, 0.06), seed=3, n_train=40, n_instances=4,
           fit_steps=60, rank=3)


def _keys(seed, n):
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


@pytest.mark.parametrize("assignment", ["random", "balanced"])
def test_the_kernels_replicates_are_simulates_bit_for_bit(musr, assignment):
    rep = jaxeval.simulate_identification(musr, "pulse_ucb", n_replicates=6,
                                          instance_assignment=assignment, **_KW)
    kern = jaxeval.identification_kernel(musr, "pulse_ucb", **_KW)
    assert isinstance(kern, jaxeval.IdentificationKernel)
    if assignment == "balanced":
        out = jax.jit(jax.vmap(kern))(_keys(3, 6), jnp.arange(6))
    else:
        out = jax.jit(jax.vmap(kern))(_keys(3, 6))
    cp = out.checkpoints
    np.testing.assert_array_equal(np.asarray(cp.recommended), rep.recommended)
    np.testing.assert_array_equal(np.asarray(cp.calls), rep.calls)
    np.testing.assert_array_equal(np.asarray(out.theta), rep.theta)
    np.testing.assert_array_equal(np.asarray(out.instance), rep.instance)
    # the same training split, instances and factorization as the run
    assert kern.data.pool.shape == (len(rep.pool_models), 150)
    np.testing.assert_array_equal(np.asarray(kern.data.instances), rep.instances)
    assert kern.config.num_arms == 5 and kern.config.budgets == tuple(rep.budgets.tolist())


def test_new_params_and_keys_never_recompile():
    kern = jaxeval.identification_kernel(jaxeval.SyntheticSpec(n_items=30), "ucbe", K=3,
                                         budgets=(9, 30))
    traces = []

    def fn(key, data, params):
        traces.append(1)
        return kern.fn(key, data, params)

    run = jax.jit(jax.vmap(fn, (0, None, None)))
    widths = []
    for i, alpha in enumerate((0.05, 0.2, 0.5)):
        out = run(_keys(i, 16), kern.data, kern.params._replace(alpha=jnp.float32(alpha)))
        widths.append(float(jnp.mean(out.checkpoints.upper - out.checkpoints.lower)))
    assert len(traces) == 1
    assert widths[0] > widths[1] > widths[2]  # the operand reached the loop


def test_runner_arguments_are_refused_by_name():
    spec = jaxeval.SyntheticSpec(n_items=30)
    with pytest.raises(TypeError, match=r"n_replicates, progress belong\(s\) to the runner"):
        jaxeval.identification_kernel(spec, "ucbe", K=3, n_replicates=5, progress=True)
    with pytest.raises(ValueError, match="K"):  # simulate's own checks
        jaxeval.identification_kernel(spec, "ucbe", K=1)


_SCRIPT = textwrap.dedent("""
    import json, os, warnings
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, PartitionSpec as P
    import jaxeval

    res = {"devices": jax.device_count()}
    kern = jaxeval.identification_kernel(jaxeval.SyntheticSpec(n_items=30), "pulse_ucb",
                                         K=3, budgets=(9, 30), seed=1)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(1), i))(jnp.arange(8))
    one = jax.jit(jax.vmap(kern))(keys)
    mesh = Mesh(np.array(jax.devices()), ("rep",))
    sharded = jax.jit(jax.shard_map(jax.vmap(kern), mesh=mesh, in_specs=P("rep"),
                                    out_specs=P("rep"), check_vma=False))(keys)
    def same(a, b):  # integers exactly; floats to rounding (other batch shapes)
        if jnp.issubdtype(a.dtype, jnp.integer):
            return bool(jnp.array_equal(a, b))
        return bool(jnp.allclose(a, b, rtol=0, atol=1e-5))

    res["shard_equal"] = all(same(a, b) for a, b in
                             zip(jax.tree.leaves(one), jax.tree.leaves(sharded)))
    jax.config.update("jax_enable_x64", True)
    p64 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), kern.params)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out64 = jax.jit(jax.vmap(kern.fn, (0, None, None)))(keys, kern.data, p64)
        jax.block_until_ready(out64)
    res["warnings"] = [str(x.message)[:120] for x in w]
    res["float_dtypes"] = sorted({str(x.dtype) for x in jax.tree.leaves(out64)
                                  if jnp.issubdtype(x.dtype, jnp.floating)})
    res["x64_equal"] = all(same(a, b) for a, b in
                           zip(jax.tree.leaves(one), jax.tree.leaves(out64)))
    print(json.dumps(res))
""")


def test_shard_map_and_x64_in_a_fresh_process():
    """Four CPU devices under the user's own shard_map give one device's results (integers
    exactly, floats to rounding: the lanes per device differ); float64 params under x64
    are cast (no scatter FutureWarning, float32 output, the same results)."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["devices"] == 4
    assert res["shard_equal"]
    assert res["warnings"] == []
    assert res["float_dtypes"] == ["float32"]
    assert res["x64_equal"]


def test_python_float_params_and_the_kernels_own_warnings():
    """A Python float in params ran into ``.astype`` (AttributeError) outside jit; the
    set-up's warnings name identification_kernel and point at its caller."""
    with pytest.warns(UserWarning, match=r"^identification_kernel: a=2\.0 has no effect") as w:
        kern = jaxeval.identification_kernel(jaxeval.SyntheticSpec(n_items=30), "uniform",
                                             K=3, budgets=(9,), a=2.0)
    assert w[0].filename == __file__
    p = kern.params._replace(alpha=0.1)
    eager = kern.fn(jax.random.key(0), kern.data, p)
    jitted = jax.jit(kern.fn)(jax.random.key(0), kern.data,
                              kern.params._replace(alpha=jnp.float32(0.1)))
    np.testing.assert_array_equal(np.asarray(eager.checkpoints.calls),
                                  np.asarray(jitted.checkpoints.calls))
    np.testing.assert_allclose(np.asarray(eager.checkpoints.lower),
                               np.asarray(jitted.checkpoints.lower), atol=1e-6)


def test_the_kernels_warnings_survive_a_failed_set_up_and_follow_the_callers_filters():
    spec = jaxeval.SyntheticSpec(n_items=30)
    kw = dict(K=3, synchronized=False, budgets=(10**9,))
    with pytest.warns(UserWarning, match="^identification_kernel: synchronized=False"):
        with pytest.raises(ValueError, match="budgets"):
            jaxeval.identification_kernel(spec, "sysrs", **kw)
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("ignore")
        jaxeval.identification_kernel(spec, "uniform", K=3, budgets=(9,), a=2.0)
    assert seen == []
