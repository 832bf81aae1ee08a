"""Metrics edge cases and the arm-selection policies, called directly on small hand-built
inputs: an arm index just past the last arm, the ``axis`` of identification accuracy, a NaN
in Kendall's second input; each index policy's exact formula (UCB-E's ``mean_O + sqrt(a /
N)`` on the observed mean, the naive pooled estimate's index, PULSE's ``estimate + scale *
half_width``), unpulled arms first, fully evaluated arms never chosen, ties to the lowest
index, the SySRs phase lengths and the SySRs step (which arm is rejected, which arm is
evaluated next and how far)."""

import jax.numpy as jnp
import numpy as np
import pytest
from test_metrics import tau_jit

from jaxeval import _policies as pol
from jaxeval import metrics


def _view(count, mean_obs=None, estimate=None, naive=None, half_width=None, full=None):
    count = np.asarray(count, np.int32)
    K = count.shape[0]

    def f(v, default):
        return jnp.asarray(np.full(K, default, np.float32) if v is None else v, jnp.float32)

    full = np.zeros(K, bool) if full is None else np.asarray(full, bool)
    return pol.ArmView(jnp.asarray(count), jnp.asarray(full), f(mean_obs, 0.5),
                       f(estimate, 0.5), f(naive, 0.5), f(half_width, 0.0))


def _choose(kind, view, a=0.25, scale=0.25):
    arm, cap, ok, _ = pol.choose_arm(kind, view, pol.policy_init(view.count.shape[0]),
                                     jnp.float32(a), jnp.float32(scale))
    return int(arm), int(cap), bool(ok)


def _reference(kind, v, a, scale):
    count = np.asarray(v.count)
    nf = np.maximum(count, 1).astype(np.float64)
    bonus = np.sqrt(a / nf)
    base = {"ucbe": v.mean_obs, "naive": v.naive, "pulse_ucb": v.estimate,
            "pulse": v.estimate}[kind]
    idx = np.asarray(base, np.float64) + (
        scale * np.asarray(v.half_width, np.float64) if kind == "pulse" else bonus)
    idx = np.where(count > 0, idx, np.inf)
    return int(np.argmax(np.where(np.asarray(v.full), -np.inf, idx)))


def test_ucbe_index_is_the_observed_mean_plus_sqrt_a_over_n():
    """UCB-E ranks by the observed mean plus ``sqrt(a / N)``, not by the ranking or the
    naive estimate. With ``a = 0.25`` the bonuses of counts 1, 4 and 16 are 0.5, 0.25 and
    0.125: arm 2 wins (0.6 + 0.125 = 0.725 against 0.7 and 0.65); with ``a = 1`` arm 0
    wins (0.2 + 1 = 1.2). Counts 1 and 4 with means 0.3 and 0.5 give 0.8 against 0.75:
    arm 0 (a bonus of ``a / sqrt(N)`` or ``sqrt(a / (N + 1))`` would pick arm 1)."""
    v = _view([1, 4, 16], mean_obs=[0.2, 0.4, 0.6], estimate=[0.9, 0.1, 0.1],
              naive=[0.1, 0.9, 0.1])
    assert _choose("ucbe", v, a=0.25) == (2, 2**30, True)
    assert _choose("ucbe", v, a=1.0)[0] == 0
    v2 = _view([1, 4], mean_obs=[0.3, 0.5], estimate=[0.0, 0.9], naive=[0.0, 0.9])
    assert _choose("ucbe", v2, a=0.25)[0] == 0


@pytest.mark.parametrize("kind", ["ucbe", "naive", "pulse_ucb", "pulse"])
def test_each_index_policy_matches_its_formula_on_random_views(kind):
    """On 200 seeded random summaries (some arms unpulled, some fully evaluated, counts
    from 0 to 9) every index policy pulls the argmax of its own index: unpulled arms at
    ``+inf``, full arms at ``-inf``, else base estimate plus ``sqrt(a / max(N, 1))`` (or
    ``scale * half_width`` for PULSE); ``ok`` is False only when every arm is full."""
    rng = np.random.default_rng(11)
    for a, scale in [(0.3, 0.4), (2.0, 1.5)]:
        for _ in range(100):
            K = int(rng.integers(2, 6))
            count = rng.integers(0, 10, K)
            v = _view(count, rng.random(K), rng.random(K), rng.random(K), rng.random(K) * 0.5,
                      full=rng.random(K) < 0.25)
            arm, cap, ok = _choose(kind, v, a=a, scale=scale)
            assert cap == 2**30
            if np.asarray(v.full).all():
                assert not ok
                continue
            assert ok
            assert arm == _reference(kind, v, a, scale), (kind, count, arm)


@pytest.mark.parametrize("kind", ["ucbe", "naive", "pulse", "pulse_ucb"])
def test_unpulled_arms_come_first_and_full_arms_never(kind):
    """An unpulled arm is pulled before any pulled arm, however high the latter's index;
    a fully evaluated arm is never pulled, and when every arm is full the step is refused
    (``ok`` False)."""
    v = _view([5, 0, 3], mean_obs=[0.99] * 3, estimate=[0.99, 0.0, 0.0],
              naive=[0.99, 0.0, 0.0], half_width=[0.5, 0.0, 0.0])
    assert _choose(kind, v)[0] == 1
    full = _view([5, 5, 5], mean_obs=[0.9, 0.1, 0.2], estimate=[0.9, 0.1, 0.2],
                 naive=[0.9, 0.1, 0.2], half_width=[0.3, 0.0, 0.1], full=[True, False, False])
    assert _choose(kind, full)[:1] == (2,)
    done = _view([5, 5], full=[True, True])
    assert _choose(kind, done)[2] is False


def test_pulse_index_uses_scale_times_half_width():
    """PULSE ranks by ``estimate + scale * half_width``: with scale 0.25, arm 0 scores
    0.5 + 0.25 * 0.4 = 0.6 and arm 1 0.45 + 0.25 * 0.8 = 0.65; with scale 0.1 arm 0 wins
    (0.54 vs 0.53)."""
    v = _view([3, 3], estimate=[0.5, 0.45], mean_obs=[0.0, 0.0], naive=[0.0, 0.0],
              half_width=[0.4, 0.8])
    assert _choose("pulse", v, scale=0.25)[0] == 1
    assert _choose("pulse", v, scale=0.1)[0] == 0


def test_uniform_pulls_the_least_evaluated_arm_ties_to_the_lowest_index():
    """Round robin: the arm with the fewest items goes next; among equals the lowest
    index; full arms are skipped even when least evaluated."""
    assert _choose("uniform", _view([3, 1, 2]))[0] == 1
    assert _choose("uniform", _view([2, 1, 1]))[0] == 1
    assert _choose("uniform", _view([0, 2, 0, 1], full=[True, False, False, False]))[0] == 2


def test_index_ties_go_to_the_lowest_arm_index():
    """Equal indices (here equal means and counts) are broken towards the lowest index,
    for unpulled arms too."""
    v = _view([2, 4, 2, 4], mean_obs=[0.3, 0.6, 0.3, 0.6])
    # sqrt(0.25 / 2) + 0.3 = 0.654 < 0.6 + 0.25 = 0.85: arms 1 and 3 tie
    assert _choose("ucbe", v)[0] == 1
    assert _choose("ucbe", _view([3, 0, 0]))[0] == 1


def test_sr_phase_lengths_by_hand():
    """``n_k = ceil((T - K) / (logbar(K) (K + 1 - k)))``, ``logbar(4) = 1/2 + 1/2 + 1/3 +
    1/4 = 19/12``: for T = 50, 46 * 12 / 19 = 29.05 over 4, 3, 2 gives 7.26, 9.68, 14.53,
    rounded up to (8, 10, 15); capped at n = 12; at least 1 when ``T <= K``; none for a
    single arm."""
    assert pol.sr_phase_lengths(4, 50, 100) == (8, 10, 15)
    assert pol.sr_phase_lengths(4, 50, 12) == (8, 10, 12)
    assert pol.sr_phase_lengths(3, 3, 10) == (1, 1)
    assert pol.sr_phase_lengths(3, 2, 10) == (1, 1)
    assert pol.sr_phase_lengths(1, 50, 10) == ()
    # exact division is not rounded up: K = 2, logbar = 1, T = 12 -> 10 / 2 = 5
    assert pol.sr_phase_lengths(2, 12, 100) == (5,)


def _sysrs(count, estimate, alive, phase, lengths, full=None):
    v = _view(count, estimate=estimate, full=full)
    ps = pol.PolicyState(jnp.asarray(alive), jnp.int32(phase))
    arm, cap, ok, new = pol.choose_arm("sysrs", v, ps, jnp.float32(0.5), jnp.float32(1.0),
                                       lengths)
    return int(arm), int(cap), bool(ok), np.asarray(new.alive).tolist(), int(new.phase)


def test_sysrs_rejects_the_lowest_estimate_ties_to_the_highest_index():
    """At the end of a phase the surviving arm with the lowest estimate is rejected (ties:
    the highest index), the phase advances, and the survivor furthest behind (ties: the
    lowest index) is evaluated up to the new phase's target."""
    got = _sysrs([2, 2, 2], [0.5, 0.3, 0.3], [True] * 3, 0, (2, 4))
    assert got == (0, 2, True, [True, True, False], 1)
    # mid-phase: nothing rejected; arm 1 is behind by 2 and may draw 2 more
    got = _sysrs([2, 0, 1], [0.1, 0.9, 0.9], [True] * 3, 0, (2, 4))
    assert got == (1, 2, True, [True, True, True], 0)
    # one survivor: it keeps being evaluated with no phase cap
    got = _sysrs([4, 2, 4], [0.5, 0.1, 0.7], [False, False, True], 2, (2, 4))
    assert got == (2, 2**30, True, [False, False, True], 2)
    # ... until it is fully evaluated: then the step is refused
    got = _sysrs([4, 2, 8], [0.5, 0.1, 0.7], [False, False, True], 2, (2, 4),
                 full=[False, False, True])
    assert got == (2, 2**30, False, [False, False, True], 2)


def test_sysrs_step_after_a_rejection_into_an_equal_phase_pulls_nothing():
    """Equal consecutive phase lengths (a capped or tiny schedule): the rejection happens,
    but every survivor is already at the new target, so no arm is pulled (``ok`` False,
    cap 0) and the next step rejects again."""
    got = _sysrs([2, 2, 2], [0.5, 0.3, 0.3], [True] * 3, 0, (2, 2))
    assert got == (0, 0, False, [True, True, False], 1)
    got = _sysrs([2, 2, 2], [0.5, 0.3, 0.3], [True, True, False], 1, (2, 2))
    assert got == (0, 2**30, True, [True, False, False], 2)


def test_an_index_equal_to_the_arm_count_is_wrong():
    """``recommended == K`` is outside ``[0, K)``: wrong even when the last arm is the best
    (it must not be clipped onto the last arm), for NumPy and JAX indices alike."""
    truth = np.array([0.1, 0.9], np.float32)
    assert metrics.identification_correct(np.array([2, 1]), truth).tolist() == [False, True]
    assert metrics.identification_correct(jnp.array([2, 1]), truth).tolist() == [False, True]
    assert float(metrics.identification_accuracy(np.array([2, 1, 0, 1]), truth)) == 0.5


def test_identification_accuracy_averages_over_the_given_axis_only():
    """``axis=-1`` keeps the leading axis (one accuracy per row); ``axis=0`` one per column;
    the default averages everything."""
    rec = np.array([[1, 0, 1, 1], [1, 1, 1, 1]])
    truth = np.array([0.2, 0.8], np.float32)
    np.testing.assert_array_equal(metrics.identification_accuracy(rec, truth, axis=-1),
                                  [0.75, 1.0])
    np.testing.assert_array_equal(metrics.identification_accuracy(rec, truth, axis=0),
                                  [1.0, 0.5, 1.0, 1.0])
    assert float(metrics.identification_accuracy(rec, truth)) == 0.875


def test_kendall_tau_b_is_nan_when_y_holds_a_nan():
    """A NaN in either input gives NaN (as SciPy's default), not a tau computed with the NaN
    read as 0; a NaN masked out by ``where`` does not count."""
    y = np.array([1.0, np.nan, 3.0, 4.0])
    assert np.isnan(float(tau_jit(np.arange(4.0), y)))
    w = np.array([True, False, True, True])
    assert float(metrics.kendall_tau_b(np.arange(4.0), y, where=w)) == 1.0


def test_kendall_where_wider_than_x_is_refused_by_name():
    """A mask that broadcasts with ``x`` but to a larger shape is refused naming both
    shapes (the mask selects elements of ``x``; it cannot add batch axes)."""
    with pytest.raises(ValueError, match=r"kendall_tau_b: where \(2, 3\) must broadcast to "
                       r"the shape of x \(3,\)"):
        metrics.kendall_tau_b(np.ones(3), np.arange(3.0), where=np.ones((2, 3), bool))
