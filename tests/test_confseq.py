"""Confidence sequences: formulas against float64 references, semantics, and Monte Carlo
time-uniform coverage under doubly robust sampling without replacement."""

import importlib.util
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval import _confseq as cs_mod

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "bench_confseq", ROOT / "benchmarks" / "bench_confseq.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


# ------------------------------------------------------------------------------------------
# float64 references written straight from the formulas in the module docstring / SPEC 2.4

TOL = 1e-5  # the float32 rounding margin of the module


def ref_eb(ys, los, his, ms, alpha):
    big_l = np.log(2 / alpha)
    sz2 = 0.0
    a_lo = b_lo = p_lo = a_hi = b_hi = p_hi = 0.0
    lower, upper = 0.0, 1.0
    out = []
    for k, (y, lo, hi, m) in enumerate(zip(ys, los, his, ms), start=1):
        w = max(hi - lo, 1e-6)
        sig2 = w**2 * (0.25 + sz2) / k
        bb = np.sqrt(2 * big_l / (sig2 * k * np.log(1 + k)))
        c, cp = max(m - lo, 1e-6), max(hi - m, 1e-6)
        b, bp = min(bb, 0.5 / c), min(bb, 0.5 / cp)
        psi = lambda g: -np.log(1 - g) - g
        a_lo += b
        b_lo += b * y
        p_lo += psi(b * c) * (y - m) ** 2 / c**2
        a_hi += bp
        b_hi += bp * y
        p_hi += psi(bp * cp) * (y - m) ** 2 / cp**2
        lcb = (b_lo - big_l - p_lo) / a_lo
        ucb = (b_hi + big_l + p_hi) / a_hi
        lower = min(max(lower, max(lcb, lo) - TOL), 1.0)
        upper = max(min(upper, min(ucb, hi) + TOL), 0.0)
        lower = max(lower, 0.0)
        upper = min(upper, 1.0)
        sz2 += (y - m) ** 2 / w**2
        out.append((lower, upper))
    return np.array(out)


def ref_hoeffding(ys, los, his, alpha):
    big_l = np.log(2 / alpha)
    sl = sly = pen = 0.0
    lower, upper = 0.0, 1.0
    out = []
    for k, (y, lo, hi) in enumerate(zip(ys, los, his), start=1):
        w = max(hi - lo, 1e-6)
        lam = np.sqrt(8 * big_l / (k * np.log(1 + k))) / w
        sl += lam
        sly += lam * y
        pen += lam**2 * w**2 / 8
        lower = np.clip(max(lower, max((sly - big_l - pen) / sl, lo) - TOL), 0, 1)
        upper = np.clip(min(upper, min((sly + big_l + pen) / sl, hi) + TOL), 0, 1)
        out.append((lower, upper))
    return np.array(out)


def ref_betting(ys, los, his, ms, alpha, grid, trunc=0.5):
    edges = np.linspace(0, 1, grid + 1)
    left, right = edges[:-1], edges[1:]
    thr = np.log(2 / alpha)
    swy = sw = sz2 = 0.0
    klo = np.zeros(grid)
    khi = np.zeros(grid)
    rej = np.zeros(grid, bool)
    lower, upper = 0.0, 1.0
    out = []
    for k, (y, lo, hi, m) in enumerate(zip(ys, los, his, ms), start=1):
        w = max(hi - lo, 1e-6)
        mu = np.clip((swy + m / w**2) / (sw + 1 / w**2), lo, hi)
        v = w**2 * (0.25 + sz2) / k
        lam = np.clip(
            (mu - right) / (v + (mu - right) ** 2), 0, trunc / np.maximum(right - lo, 1e-6)
        )
        klo += np.log1p(lam * (y - right))
        lam = np.clip((left - mu) / (v + (left - mu) ** 2), 0, trunc / np.maximum(hi - left, 1e-6))
        khi += np.log1p(lam * (left - y))
        rej |= (klo >= thr) | (khi >= thr)
        new_lo = left[~rej].min() if (~rej).any() else 1.0
        new_hi = right[~rej].max() if (~rej).any() else 0.0
        lower = np.clip(max(lower, max(new_lo, lo) - TOL), 0, 1)
        upper = np.clip(min(upper, min(new_hi, hi) + TOL), 0, 1)
        swy += y / w**2
        sw += 1 / w**2
        sz2 += (y - mu) ** 2 / w**2
        out.append((lower, upper))
    return np.array(out)


def _random_terms(seed, t=60):
    """Terms with shrinking, shifting ranges (like DR terms) and a predictable centre."""
    rng = np.random.default_rng(seed)
    theta = 0.6
    scale = np.linspace(1.2, 0.05, t)
    los = theta - scale * rng.uniform(0.2, 0.8, t)
    his = los + scale
    p = (theta - los) / scale  # mean theta: two-point terms at lo and hi
    ys = np.where(rng.uniform(size=t) < p, his, los)
    ms = los + scale * rng.uniform(0.3, 0.7, t)
    return ys, los, his, ms


def _run(cs, ys, los, his, ms, alpha):
    def step(st, x):
        st = cs.update(st, *x, jnp.float32(alpha))
        return st, jnp.stack(cs.bounds(st))

    xs = tuple(jnp.asarray(a, jnp.float32) for a in (ys, los, his, ms))
    _, b = jax.lax.scan(step, cs.init(()), xs)
    return np.asarray(b)


@pytest.mark.parametrize("seed", [0, 1])
def test_eb_matches_float64_reference(seed):
    ys, los, his, ms = _random_terms(seed)
    got = _run(cs_mod.get("eb"), ys, los, his, ms, 0.1)
    want = ref_eb(ys, los, his, ms, 0.1)
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert want[-1, 1] - want[-1, 0] < 0.5  # the comparison is not vacuous


def test_psi_over_g2_is_the_formula_for_every_bet():
    """``psi(g) / g^2`` over the bets the sequence uses (g <= 1/2), both branches. (The
    direct branch once evaluated psi(1/2)/(1/4) for every g >= 0.01, over-charging the
    penalty up to 1.5x; the 60-term reference run below could not see it.)"""
    g = np.concatenate([np.geomspace(1e-6, 0.5, 200), [0.0, 0.0099, 0.01, 0.0101]])
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(g > 0, (-np.log1p(-g) - g) / g**2, 0.5)
    got = np.asarray(cs_mod._psi_over_g2(jnp.asarray(g, jnp.float32)))
    np.testing.assert_allclose(got, want, rtol=2e-5)


def test_eb_matches_float64_reference_on_a_long_bernoulli_run():
    """400 Bernoulli terms on [0, 1]: the bets fall well below their 1/2 cap, so the
    bounds come from the penalty sums rather than from the terms' ranges."""
    rng = np.random.default_rng(3)
    t = 400
    ys = (rng.uniform(size=t) < 0.3).astype(float)
    los, his, ms = np.zeros(t), np.ones(t), np.full(t, 0.5)
    got = _run(cs_mod.get("eb"), ys, los, his, ms, 0.1)
    want = ref_eb(ys, los, his, ms, 0.1)
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert 0.05 < want[-1, 1] - want[-1, 0] < 0.3  # bounds inside (0, 1), not the range


@pytest.mark.parametrize("seed", [0, 1])
def test_hoeffding_matches_float64_reference(seed):
    ys, los, his, ms = _random_terms(seed)
    got = _run(cs_mod.get("hoeffding"), ys, los, his, ms, 0.1)
    np.testing.assert_allclose(got, ref_hoeffding(ys, los, his, 0.1), atol=2e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_betting_matches_float64_reference(seed):
    ys, los, his, ms = _random_terms(seed)
    got = _run(cs_mod.get("betting", grid_size=32), ys, los, his, ms, 0.1)
    want = ref_betting(ys, los, his, ms, 0.1, 32)
    np.testing.assert_allclose(got, want, atol=2e-4)
    assert want[-1, 1] - want[-1, 0] < 0.5


def test_eb_first_step_by_hand():
    # y=0.7 in [0, 1], centre 0.5, alpha=0.05: b = min(sqrt(2 log 40 / (0.25 log 2)), 1) = 1,
    # g = 0.5, psi(0.5) = log 2 - 0.5, LCB = 0.7 - log 40 - psi(0.5) * 0.04 / 0.25 < 0
    cs = cs_mod.get("eb")
    st = cs.update(cs.init(()), 0.7, 0.0, 1.0, 0.5, jnp.float32(0.05))
    assert float(st.sum_b_lo) == pytest.approx(1.0)
    assert float(st.sum_pen_lo) == pytest.approx((np.log(2) - 0.5) * 0.04 / 0.25, rel=1e-5)
    assert float(st.sum_z2) == pytest.approx(0.04, rel=1e-5)
    assert (float(st.lower), float(st.upper)) == (0.0, 1.0)


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_shapes_active_mask_finalize(kind):
    cs = cs_mod.get(kind, grid_size=16)
    st = cs.init((3, 2))
    rng = np.random.default_rng(0)
    active = jnp.array([[True, False], [False, True], [True, True]])
    upd = jax.jit(cs.update)
    for _ in range(40):
        y = jnp.asarray(rng.integers(0, 2, (3, 2)), jnp.float32)
        st = upd(st, y, 0.0, 1.0, 0.5, jnp.float32(0.1), active=active)
    lo, hi = cs.bounds(st)
    assert lo.shape == hi.shape == (3, 2) and lo.dtype == jnp.float32
    assert st.count.dtype == jnp.int32
    np.testing.assert_array_equal(st.count, np.where(active, 40, 0))
    np.testing.assert_array_equal(lo[~active], 0.0)
    np.testing.assert_array_equal(hi[~active], 1.0)
    assert bool(jnp.all(hi[active] - lo[active] < 0.9))
    exact = jnp.full((3, 2), 0.25)
    fin = cs.finalize(st, exact, active)
    flo, fhi = cs.bounds(fin)
    # exact up to the rounding margin (NUM_TOL by default, or the caller's)
    np.testing.assert_allclose(flo[active], 0.25 - cs_mod.NUM_TOL, rtol=0, atol=3e-8)
    np.testing.assert_allclose(fhi[active], 0.25 + cs_mod.NUM_TOL, rtol=0, atol=3e-8)
    np.testing.assert_array_equal(flo[~active], lo[~active])
    np.testing.assert_array_equal(fhi[~active], hi[~active])
    flo0, fhi0 = cs.bounds(cs.finalize(st, exact, active, 0.0))
    np.testing.assert_array_equal(flo0[active], 0.25)
    np.testing.assert_array_equal(fhi0[active], 0.25)


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_finite_when_term_rounds_outside_a_tiny_range(kind):
    """Ranges narrower than the internal floor and a term a rounding error outside them."""
    cs = cs_mod.get(kind, grid_size=16)
    lo = jnp.array([0.3, 0.3, 0.5], jnp.float32)
    hi = lo + jnp.array([0.0, 1e-9, 1e-3], jnp.float32)
    y = lo - 2e-6
    st = cs.init((3,))
    for _ in range(3):
        st = cs.update(st, y, lo, hi, lo, jnp.float32(0.05))
    lower, upper = cs.bounds(st)
    assert bool(jnp.all(jnp.isfinite(lower) & jnp.isfinite(upper)))
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(st))


def test_get_registry_and_errors():
    assert cs_mod.get("eb") is cs_mod.get("eb")
    assert cs_mod.get("betting", grid_size=64) is not cs_mod.get("betting", grid_size=32)
    assert jax.tree.leaves(cs_mod.get("betting")) == []  # leafless: passes through jit
    with pytest.raises(ValueError, match="name must be one of"):
        cs_mod.get("bernstein")
    with pytest.raises(ValueError, match="grid_size"):
        cs_mod.get("betting", grid_size=1)
    with pytest.raises(ValueError, match="truncation"):
        cs_mod.get("betting", truncation=1.0)


def test_no_retrace_for_new_alpha():
    seqs = [cs_mod.get(k) for k in cs_mod.KINDS]

    @jax.jit
    @chex.assert_max_traces(n=1)
    def f(states, y, alpha):
        return tuple(q.bounds(q.update(s, y, 0.0, 1.0, 0.5, alpha)) for q, s in zip(seqs, states))

    chex.clear_trace_counter()
    states = tuple(q.init((4,)) for q in seqs)
    for a in (0.01, 0.05, 0.2):
        f(states, jnp.full(4, 0.3), jnp.full(4, a, jnp.float32))


def test_lower_level_gives_wider_interval():
    ys, los, his, ms = _random_terms(3)
    for kind in cs_mod.KINDS:
        cs = cs_mod.get(kind, grid_size=64)
        tight = _run(cs, ys, los, his, ms, 0.2)[-1]
        wide = _run(cs, ys, los, his, ms, 0.01)[-1]
        assert wide[1] - wide[0] >= tight[1] - tight[0] - 1e-6, kind


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_float32_rounding_at_range_end(kind):
    """All 7 correct answers of 894 seen, every unseen prediction 1, an odd lam: in exact
    arithmetic every term and the range's lower end equal theta; in float32 some land one ulp
    above it. The bounds must still hold theta."""
    from jaxeval._estimators import dr_range, dr_term

    n = 894
    theta = np.float32(jnp.mean(jnp.zeros(n).at[:7].set(1.0)))
    nu = np.arange(n - 7, 0, -1)
    lam = np.float32(0.0125313401)
    ys = np.asarray(dr_term(7.0, nu.astype(np.float32), nu, 0.0, 1.0, lam, n))
    los, his = (np.asarray(a) for a in dr_range(7.0, nu.astype(np.float32), nu, 1.0, 1.0, lam, n))
    assert np.any(los > theta) and np.any(ys > theta)  # the trap is real
    ms = (theta + 0.3 * (his - los)).astype(np.float32)
    b = _run(cs_mod.get(kind, grid_size=32), ys, los, his, ms, 0.05)
    assert np.all(b[:, 0] <= theta) and np.all(b[:, 1] >= theta)
    assert b[-1, 1] - b[-1, 0] <= 1 / n + 3e-5  # the last range, plus the margins


@pytest.mark.parametrize("kind", cs_mod.KINDS)
def test_float32_long_deterministic_run(kind):
    """20,000 terms equal to theta with ranges shrinking to 1/n (weights growing to ~n)."""
    n = 20000
    theta = np.float32(0.3)
    w = ((n - np.arange(n)) / n).astype(np.float32)
    ys = np.full(n, theta, np.float32)
    los = (theta - 0.4 * w).astype(np.float32)
    his = (theta + 0.6 * w).astype(np.float32)
    b = _run(cs_mod.get(kind, grid_size=32), ys, los, his, ys, 0.05)
    assert np.all(b[:, 0] <= theta) and np.all(b[:, 1] >= theta)
    assert b[-1, 1] - b[-1, 0] < 1e-3


# ------------------------------------------------------------------------------------------
# Monte Carlo coverage under DR sampling without replacement

ALPHA = 0.1
R = 2000
N_ITEMS = 200


def _tol(p, r):
    return 3 * np.sqrt(p * (1 - p) / r)


@pytest.fixture(scope="module")
def synthetic_cases():
    train, rows = bench.synthetic_rows(7, N_ITEMS, thetas=(0.3, 0.75))
    return rows, bench.calibrated_predictions(train, rows)


@pytest.fixture(scope="module")
def musr_cases():
    # the bundled MuSR matrix: runs wherever jaxeval is installed, shared data or not
    train, rows = bench.real_rows("oll2_musr", k_rows=2)
    rows = rows[:, :N_ITEMS]  # the first 200 real items of each truth row
    return rows, bench.calibrated_predictions(train[:, :N_ITEMS], rows)


def _coverage(rows, good, lam0, shrink, batch, seed=0):
    """Per quality, the simulation outputs of R // 2 replicates for each of the two rows."""
    assert len(rows) == 2
    out = {}
    for qi, q in enumerate(bench.QUALITIES):
        res = [
            jax.tree.map(
                np.asarray,
                bench.simulate_many(
                    jax.random.fold_in(jax.random.key(seed), r),
                    jnp.asarray(rows[r]),
                    jnp.asarray(good[r]),
                    jnp.float32(ALPHA),
                    jnp.float32(lam0),
                    jnp.float32(shrink),
                    jnp.int32(qi),
                    jnp.arange(R // 2),
                    batch=batch,
                    checkpoints=(N_ITEMS // 4, N_ITEMS // 2),
                    grid_size=64,
                ),
            )
            for r in range(len(rows))
        ]
        out[q] = {k: np.concatenate([o[k] for o in res]) for k in res[0]}
    return out


def _check_coverage(res):
    for q, o in res.items():
        assert o["miss"].shape[0] == R
        for ki, kind in enumerate(cs_mod.KINDS):
            miss = o["miss"][:, ki].mean()
            stop = o["miss_stop"][:, ki].mean()
            assert miss <= ALPHA + _tol(ALPHA, R), (q, kind, miss)
            # the miss at a data-dependent stopping time, held to the level on its own
            # (the anytime guarantee; "stop <= miss" would hold by construction)
            assert stop <= ALPHA + _tol(ALPHA, R), (q, kind, stop)
        # fully observed: width <= 1/n from the last range; after finalize the exact
        # mean up to finalize's default rounding margin NUM_TOL on each side
        assert o["final_width"].max() <= 1.0 / N_ITEMS + 3e-5  # last range + margins
        assert o["final_exact_width"].max() <= 2 * cs_mod.NUM_TOL + 1e-7
        assert o["final_exact_err"].max() <= 1e-6


def test_coverage_synthetic_bad_predictions_lambda_one(synthetic_cases):
    """lam fixed at 1 (the worst case for bad predictions), batches of 4, alpha = 0.1."""
    rows, good = synthetic_cases
    res = _coverage(rows, good, lam0=1.0, shrink=1e30, batch=4)
    _check_coverage(res)
    # the betting sequence is the tight reference: its miss rate is visibly above zero
    assert res["good"]["miss"][:, 2].mean() > 0.0


def test_coverage_real_rows_plugin_lambda_and_widths(musr_cases):
    rows, good = musr_cases
    res = _coverage(rows, good, lam0=1.0, shrink=10.0, batch=4, seed=1)
    _check_coverage(res)
    base = _coverage(rows, good, lam0=0.0, shrink=1e30, batch=4, seed=1)  # lam = 0
    _check_coverage(base)
    eb, hoeff, bet = 0, 1, 2
    w_dr = res["good"]["width"].mean(0)  # [kinds, checkpoints]
    w_0 = base["good"]["width"].mean(0)
    # with good predictions: EB on DR terms is narrower than Hoeffding on plain terms
    # and than EB on plain terms; betting is the tightest
    assert np.all(w_dr[eb] < w_0[hoeff]), (w_dr[eb], w_0[hoeff])
    assert np.all(w_dr[eb] < w_0[eb]), (w_dr[eb], w_0[eb])
    assert np.all(w_dr[bet] <= w_dr[eb])
    # widths shrink over time
    assert np.all(np.diff(w_dr, axis=1) < 0)


def test_coverage_sparse_row_adversarial_plugin():
    """A row with 3 correct answers in 200 and adversarial predictions 1 - S: after the last
    1 is seen, theta equals the range's lower end exactly (a float32 rounding trap)."""
    s = np.zeros(N_ITEMS, np.float32)
    s[[5, 60, 150]] = 1.0
    miss = np.concatenate(
        [
            np.asarray(
                bench.simulate_many(
                    jax.random.fold_in(jax.random.key(3), r),
                    jnp.asarray(s),
                    jnp.full(N_ITEMS, 0.05, jnp.float32),
                    jnp.float32(ALPHA),
                    jnp.float32(1.0),
                    jnp.float32(10.0),
                    jnp.int32(bench.QUALITIES.index("adversarial")),
                    jnp.arange(R // 2),  # same shapes as _coverage: no new compilation
                    batch=4,
                    checkpoints=(N_ITEMS // 4, N_ITEMS // 2),
                    grid_size=64,
                )["miss"]
            )
            for r in range(2)
        ]
    ).mean(0)
    assert np.all(miss <= ALPHA + _tol(ALPHA, R)), miss


@pytest.mark.slow
@pytest.mark.parametrize("name", bench.REAL_DATASETS)
@pytest.mark.parametrize("batch", [1, 8])
def test_coverage_full_rows_slow(shared_data, name, batch):
    train, rows = bench.real_rows(name, k_rows=2)
    good = bench.calibrated_predictions(train, rows)
    for qi, q in enumerate(bench.QUALITIES):
        misses = []
        for r in range(len(rows)):
            o = bench.simulate_many(
                jax.random.fold_in(jax.random.key(11), r),
                jnp.asarray(rows[r]),
                jnp.asarray(good[r]),
                jnp.float32(0.05),
                jnp.float32(1.0),
                jnp.float32(10.0),
                jnp.int32(qi),
                jnp.arange(2000),
                batch=batch,
            )
            misses.append(np.asarray(o["miss"]))
        miss = np.concatenate(misses).mean(0)
        assert np.all(miss <= 0.05 + _tol(0.05, 4000)), (name, q, miss)
