"""Gaps a mutation review of the study report (``jaxeval._report``: the summary
statistics, the text table, the figures, ``calls_to_target``) and of the anchor MLP
(``jaxeval.anchors._mlp``: the network, its dropout and its trainer) found: each test
fails on a plausible bug the rest of the suite let through.

The report tests use a hand-built study whose every statistic is worked out in the
comments (no simulation); the MLP tests use a width-8 network on 12 models, so each
compiles in a second or two."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval._study import study_from_dict

# ====================================================================== report
# R = 4 replicates, C = 3 checkpoints, Q = 2 kinds (hoeffding, eb), K = 3 arms, n = 10
# items: K*n = 30 calls; budgets 20%, 50%, 90% of K*n = 6, 15, 27 calls.
_THETA = np.array([[0.5, 0.3, 0.1],
                   [0.2, 0.6, 0.4],
                   [0.7, 0.7, 0.2],  # arms 0 and 1 tied best
                   [0.1, 0.2, 0.9]], np.float32)
# correct: c0 F F F T (1/4), c1 T F T T (3/4), c2 all (4/4)
_REC = np.array([[1, 0, 0], [0, 2, 1], [2, 1, 0], [2, 2, 2]])
# mean calls spent 5.5, 14, 26.75 (not the budgets 6, 15, 27)
_CALLS = np.array([[5, 14, 27], [6, 15, 27], [6, 13, 26], [5, 14, 27]])


def _ident_results():
    t = _THETA.astype(np.float64)
    R, C, K = 4, 3, 3
    lower = np.empty((R, C, 2, K))
    upper = np.empty((R, C, 2, K))
    lower[:, :, 0], upper[:, :, 0] = t[:, None] - 0.02, t[:, None] + 0.02  # hoeffding
    lower[:, :, 1], upper[:, :, 1] = t[:, None] - 0.1, t[:, None] + 0.1  # eb
    lower[0, 1, 0, 2] = t[0, 2] + 0.01  # hoeffding misses: replicate 0, arm 2 at c1 ...
    lower[3, 2, 0, 1] = t[3, 1] + 0.01  # ... and replicate 3, arm 1 at c2
    lower[1, 0, 1, 0] = t[1, 0] + 0.01  # eb misses: replicate 1, arm 0 at c0 ...
    lower[1, 2, 1, 1] = t[1, 1] + 0.01  # ... and arm 1 at c2
    lower[2, 1, 1, 2] = t[2, 2]  # an end exactly at the truth: the interval holds
    est = t[:, None, :] + 0.02 + np.zeros((R, C, K))
    naive = t[:, None, :] + 0.05 + np.zeros((R, C, K))
    naive[0, 0, 0] = t[0, 0] - 0.07
    status = np.zeros((R, C), np.int32)
    status[:, -1] = [2, 2, 1, 2]
    one = {"theta": _THETA, "checkpoints.recommended": _REC, "checkpoints.calls": _CALLS,
           "checkpoints.lower": lower, "checkpoints.upper": upper,
           "checkpoints.estimate": est, "checkpoints.naive": naive,
           "checkpoints.status": status}
    # pulse spends every call by the last checkpoint: mean calls 5.5, 14, 27
    return {"ucbe": dict(one), "pulse": {**one, "checkpoints.calls": np.where(
        np.arange(3) == 2, 27, _CALLS)}}


@pytest.fixture(scope="module")
def ident():
    from jaxeval._report import summarize

    study = study_from_dict({
        "kind": "identification", "name": "hand", "data": {"synthetic": {"n_items": 10}},
        "policies": ["ucbe", "pulse"], "num_arms": 3, "n_replicates": 4,
        "budgets": [0.2, 0.5, 0.9], "alpha": 0.1, "cs_kinds": ["hoeffding", "eb"]})
    return summarize(study, _ident_results())


def test_identification_accuracy_and_calls_to_95_use_the_calls_spent(ident):
    """calls to 95%: interpolated on the mean calls spent, as a share of K*n."""
    e = ident["policies"]["ucbe"]
    np.testing.assert_allclose(e["accuracy"], [0.25, 0.75, 1.0])
    np.testing.assert_allclose(e["calls_mean"], [5.5, 14.0, 26.75])
    # 14 + (0.95 - 0.75) / 0.25 * (26.75 - 14) = 24.2 calls, of K*n = 30
    assert e["calls_to_95"] == pytest.approx(24.2, abs=1e-4)
    assert e["calls_to_95_fraction"] == pytest.approx(24.2 / 30, abs=1e-4)
    assert ident["problem"]["calls_full"] == 30 and ident["problem"]["budgets"] == [6, 15, 27]


def test_identification_coverage_over_all_checkpoints_and_closed_ends(ident):
    """Anytime coverage is over checkpoints and arms at once; an end equal to the truth
    holds."""
    cov = ident["policies"]["ucbe"]["coverage"]
    h, eb = cov["hoeffding"], cov["eb"]
    np.testing.assert_allclose(h["family_wise"], [1.0, 0.75, 0.75])
    np.testing.assert_allclose(eb["family_wise"], [0.75, 1.0, 0.75])  # c1: closed end
    assert h["family_wise_all_checkpoints"] == pytest.approx(0.5)  # replicates 0, 3 fail
    assert eb["family_wise_all_checkpoints"] == pytest.approx(0.75)  # replicate 1 fails
    assert h["per_arm_all_checkpoints"] == pytest.approx(10 / 12, abs=1e-5)
    assert eb["per_arm_all_checkpoints"] == pytest.approx(10 / 12, abs=1e-5)


def test_identification_estimate_errors_and_naive_bias_by_hand(ident):
    """estimate MAE is the estimate's; the naive bias is naive minus truth (signed)."""
    e = ident["policies"]["ucbe"]
    np.testing.assert_allclose(e["estimate_mae"], [0.02, 0.02, 0.02], atol=1e-5)
    np.testing.assert_allclose(e["naive_bias"], [(11 * 0.05 - 0.07) / 12, 0.05, 0.05],
                               atol=1e-5)
    np.testing.assert_allclose(e["naive_mae"], [(11 * 0.05 + 0.07) / 12, 0.05, 0.05],
                               atol=1e-5)


def test_naive_coverage_uses_eb_widths_and_only_prediction_policies(ident):
    """The naive baseline's family coverage: eb widths (not the first kind's) shifted
    to the naive estimate, all arms at once, and None for a policy without predictions."""
    assert ident["policies"]["ucbe"]["naive_coverage_family"] is None
    # the shift naive - estimate = +0.03 leaves only eb's own misses (and its closed
    # end, now 0.03 above the truth) uncovered; with hoeffding's +-0.02 nothing holds
    np.testing.assert_allclose(ident["policies"]["pulse"]["naive_coverage_family"],
                               [0.75, 0.75, 0.75])


def test_identification_status_gap_and_nominal_level(ident):
    """Status counts are of the last checkpoint; the gap is best minus second best."""
    e = ident["policies"]["ucbe"]
    assert e["final_status_counts"] == {"1": 1, "2": 3}
    # top-2 gaps 0.2, 0.2, 0 (tie), 0.7
    assert ident["problem"]["median_top2_gap"] == pytest.approx(0.2, abs=1e-5)
    assert ident["nominal_coverage"] == pytest.approx(0.9)
    assert ident["alpha"] == 0.1


def test_identification_table_shows_items_percentages_and_anytime_coverage(ident):
    """The text table: n = items, calls to 95% in percent, coverage at every checkpoint,
    the nominal level."""
    from jaxeval._report import format_summary

    text = format_summary(ident)
    lines = text.splitlines()
    assert lines[0] == ("Identification study 'hand' on synthetic(n=10): K=3, n=10, "
                        "4 replicates, alpha=0.1")
    row = next(ln for ln in lines if ln.strip().startswith("ucbe "))
    assert row.split()[1] == "80.7%"  # 24.2 / 30
    assert row.split()[-2:] == ["50.0%", "75.0%"]  # cover(hoeffding), cover(eb)
    pulse = next(ln for ln in lines if ln.strip().startswith("pulse "))
    assert pulse.split()[1] == "81.3%"  # 14 + 0.8 * (27 - 14) = 24.4 calls of 30
    assert "nominal 90%" in text


def test_identification_table_columns_are_the_quartile_budgets():
    """The table's acc@ columns: first, quartiles, median and last budget of the grid."""
    from jaxeval._report import format_summary

    fr = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0]
    acc = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    s = {"kind": "identification", "name": "t", "dataset": "d", "num_arms": 2,
         "replicates": 10, "alpha": 0.05, "nominal_coverage": 0.95, "budget_fractions": fr,
         "problem": {"items": 5, "median_top2_gap": 0.1},
         "policies": {"ucbe": {"calls_to_95_fraction": None, "accuracy": acc,
                               "coverage": {"eb": {"family_wise_all_checkpoints": 1.0}}}}}
    lines = format_summary(s).splitlines()
    head = next(ln for ln in lines if "acc@" in ln)
    assert head.split()[4:9] == ["acc@1%", "acc@5%", "acc@20%", "acc@50%", "acc@100%"]
    row = next(ln for ln in lines if ln.strip().startswith("ucbe "))
    assert row.split()[2:7] == ["10.0%", "30.0%", "50.0%", "70.0%", "80.0%"]


def test_binomial_band_is_clipped_to_zero_one_and_uses_n():
    """The band of the coverage plot: p +- z sqrt(p(1-p)/n), inside [0, 1]."""
    from jaxeval._report import binomial_band

    lo, hi = binomial_band(0.9, 100)
    assert (lo, hi) == pytest.approx((0.9 - 1.959964 * 0.03, 0.9 + 1.959964 * 0.03))
    assert binomial_band(0.99, 4) == pytest.approx((0.99 - 1.959964 * math.sqrt(0.0099 / 4),
                                                    1.0))
    assert binomial_band(0.05, 4)[0] == 0.0


def test_calls_to_target_refuses_nan_calls_and_two_d_curves():
    """NaN in the calls and 2-D curves are refused, naming the problem."""
    from jaxeval._report import calls_to_target

    with pytest.raises(ValueError, match="calls holds NaN at index 1"):
        calls_to_target([10, np.nan, 30], [0.5, 0.9, 1.0])
    with pytest.raises(ValueError, match="1-D curves"):
        calls_to_target([[10, 20]], [[0.5, 1.0]])
    assert calls_to_target([10, 20], [0.95, 1.0]) == 10.0


# ---------------------------------------------------------------------- figures
@pytest.fixture
def figures(monkeypatch):
    """The figures the plotting draws, kept open (``plt.close`` is intercepted)."""
    import matplotlib

    matplotlib.use("Agg", force=True)  # (as jaxeval._report does before it plots)
    import matplotlib.pyplot as plt

    real_close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for f in kept:
        real_close(f)


def _line(ax, label_part):
    return next(ln for ln in ax.get_lines() if label_part in str(ln.get_label()))


def test_accuracy_figure_plots_accuracy_against_budget_percent(ident, tmp_path, figures):
    """x = budget in % of K*n, y = accuracy; the 95% line; the legend's calls to 95%."""
    from jaxeval._report import plot_study

    paths = plot_study(ident, tmp_path)
    assert [p.name for p in paths] == ["identification_accuracy.png",
                                       "identification_coverage.png",
                                       "identification_widths.png",
                                       "identification_calls_to_95.png"]
    ax = figures[0].axes[0]
    ln = _line(ax, "UCB-E")
    assert ln.get_label() == "UCB-E  (80.7%)"
    np.testing.assert_allclose(ln.get_xdata(), [20, 50, 90])
    np.testing.assert_allclose(ln.get_ydata(), [0.25, 0.75, 1.0])
    flat = [ln.get_ydata()[0] for ln in ax.get_lines() if len(set(ln.get_ydata())) == 1]
    assert 0.95 in flat


def test_coverage_figure_plots_family_wise_and_naive_on_the_eb_panel(ident, tmp_path,
                                                                    figures):
    """Each panel plots its kind's family-wise coverage; the naive curve sits on the eb
    panel; the grey band is the binomial band for the replicates."""
    from jaxeval._report import binomial_band, plot_study

    plot_study(ident, tmp_path)
    fig = figures[1]
    h_ax, eb_ax = fig.axes[:2]
    assert "hoeffding" in h_ax.get_title() and "eb" in eb_ax.get_title()
    np.testing.assert_allclose(_line(h_ax, "UCB-E").get_ydata(), [1.0, 0.75, 0.75])
    np.testing.assert_allclose(_line(eb_ax, "UCB-E").get_ydata(), [0.75, 1.0, 0.75])
    naive = "same widths around the naive pooled estimate"
    assert not [ln for ln in h_ax.get_lines() if naive in str(ln.get_label())]
    np.testing.assert_allclose(_line(eb_ax, naive).get_ydata(), [0.75, 0.75, 0.75])
    band = next(p for p in eb_ax.patches if "binomial" in str(p.get_label()))
    lo, hi = binomial_band(0.9, 4)
    assert (band.get_y(), band.get_y() + band.get_height()) == pytest.approx((lo, hi))


def test_widths_figure_hides_only_widths_below_the_rounding_margin(ident, tmp_path, figures):
    """A (near) zero mean width is left out of the log plot; the others are drawn."""
    from jaxeval._report import plot_study

    s = json.loads(json.dumps(ident))
    s["policies"]["ucbe"]["coverage"]["eb"]["mean_width"] = [0.2, 0.1, 1e-5]
    plot_study(s, tmp_path)
    eb_ax = figures[2].axes[1]
    np.testing.assert_allclose(_line(eb_ax, "UCB-E").get_ydata(), [0.2, 0.1, np.nan])


def test_calls_bars_heights_positions_and_png_suffix(ident, tmp_path, figures):
    """Bars are calls to 95% in % of K*n, side by side around their group; a path
    without a suffix comes back as the .png written."""
    from jaxeval._report import plot_calls_bars

    p = plot_calls_bars([ident], tmp_path / "bars")
    assert p == tmp_path / "bars.png" and p.exists()
    ax = figures[-1].axes[0]
    bars = sorted(ax.patches, key=lambda b: b.get_x())
    assert len(bars) == 2
    centres = [b.get_x() + b.get_width() / 2 for b in bars]
    np.testing.assert_allclose(centres, [-0.2, 0.2])
    # UCB-E then PULSE: 24.2 and 24.4 calls to 95% of K*n = 30
    np.testing.assert_allclose([b.get_height() for b in bars],
                               [100 * 24.2 / 30, 100 * 24.4 / 30], atol=1e-2)


# ---------------------------------------------------------------------- anchors
@pytest.fixture(scope="module")
def anchors_summary():
    from jaxeval._report import summarize

    study = study_from_dict({"kind": "anchors", "name": "hand-a",
                             "data": {"dataset": "oll2_musr"}, "methods": ["random_mean"],
                             "k": [5, 10], "n_seeds": 3, "first_seed": 7})
    res = {f"k{k}": {"seconds": np.array([1.0, 2.0, 3.0]) * k,
                     "random_mean.mae_pp": np.array([2.0, 4.0, 6.0]) + k,
                     "random_mean.tau": np.array([0.5, 0.6, 0.7]),
                     "random_mean.coverage": np.array([1.0, 1.0, 0.0]),
                     "random_mean.width": np.array([0.1, 0.2, 0.3])} for k in (5, 10)}
    return summarize(study, res)


def test_anchor_summary_seconds_first_seed_and_table(anchors_summary):
    """Seconds are the total over seeds; the table shows MAE / tau (not tau's sd)."""
    from jaxeval._report import format_summary

    s = anchors_summary
    assert s["seconds"] == {"k5": 30.0, "k10": 60.0}
    assert s["first_seed"] == 7 and s["seeds"] == 3
    lines = format_summary(s).splitlines()
    assert lines[0] == ("Anchor study 'hand-a' on oll2_musr: 3 seeds (first 7), "
                        "test MAE (pp) / tau-b")
    rows = [ln for ln in lines if ln.strip().startswith("random_mean")]
    assert rows[0].split() == ["random_mean", "9.00", "/", "0.60", "14.00", "/", "0.60"]
    # the intervals beside them: coverage and mean width in points, at the nominal level
    assert lines[lines.index(rows[0]) + 1] == ("  interval coverage / mean width (pp), "
                                                "nominal 90%")
    assert rows[1].split() == ["random_mean", "66.7%", "/", "20.00", "66.7%", "/", "20.00"]


def test_anchor_figure_mae_panel_with_sd_error_bars(anchors_summary, tmp_path, figures):
    """Left panel: MAE vs k with +-sd bars; right panel: tau-b."""
    from jaxeval._report import plot_study

    plot_study(anchors_summary, tmp_path)
    mae_ax, tau_ax = figures[0].axes[:2]
    assert "MAE" in mae_ax.get_ylabel() and "τ" in tau_ax.get_ylabel()
    np.testing.assert_allclose(mae_ax.get_lines()[0].get_ydata(), [9.0, 14.0])
    np.testing.assert_allclose(tau_ax.get_lines()[0].get_ydata(), [0.6, 0.6])
    (cont,) = mae_ax.containers
    assert cont.has_yerr
    segs = cont.lines[2][0].get_segments()
    np.testing.assert_allclose([s[1][1] - s[0][1] for s in segs], [4.0, 4.0])  # 2 sd


# ------------------------------------------------------------------- replicates
def test_replicates_summary_sd_shown_components_and_empty_fields():
    """sd is the population sd; exactly 8 components are all shown (no cut said); an
    empty field is skipped as empty."""
    from jaxeval._report import summarize
    from jaxeval._study import ReplicateStudy

    study = ReplicateStudy(target="test_study:toy", n_replicates=4)
    res = {"replicates": {"x": np.array([1.0, 2.0, 3.0, 6.0]),
                          "v8": np.ones((4, 8), np.float32),
                          "none": np.zeros((4, 0))}}
    s = summarize(study, res)
    assert s["fields"]["x"]["sd"] == [pytest.approx(np.std([1, 2, 3, 6]), abs=1e-5)]
    assert "components_shown" not in s["fields"]["v8"]
    assert len(s["fields"]["v8"]["mean"]) == 8 == len(s["fields"]["v8"]["sd"])
    assert s["skipped_fields"] == {"none": "empty"}


# ==================================================================== anchor MLP
def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _numpy_forward(net, x, masks=None, rate=0.0):
    """The documented network in float64: exact-erf GELU hidden layers (inverted dropout
    with ``masks``), a linear last layer with its bias, a sigmoid."""
    h = np.asarray(x, np.float64)
    for i, layer in enumerate(net.layers[:-1]):
        w, b = np.asarray(layer.weight, np.float64), np.asarray(layer.bias, np.float64)
        h = _gelu(h @ w.T + b)
        if masks is not None:
            h = np.where(masks[i].reshape(h.shape), h / (1 - rate), 0.0)
    last = net.layers[-1]
    out = h @ np.asarray(last.weight, np.float64)[0] + float(last.bias[0])
    return 1.0 / (1.0 + np.exp(-out))


def _mlp_data(seed=0, m_tr=12, m_val=6, k=3):
    rng = np.random.default_rng(seed)
    x = rng.random((m_tr + m_val, k)).astype(np.float32)
    y = (0.2 + 0.6 * x.mean(axis=1) ** 2).astype(np.float32)
    return (jnp.asarray(x[:m_tr]), jnp.asarray(y[:m_tr]), jnp.asarray(x[m_tr:]),
            jnp.asarray(y[m_tr:]))


def test_anchor_mlp_is_the_documented_architecture():
    """k -> 128 -> 64 -> 32 -> 1, dropout 0.1 by default; init_mlp keeps its dropout."""
    import equinox as eqx

    from jaxeval.anchors import AnchorMLP
    from jaxeval.anchors._mlp import init_mlp

    net = AnchorMLP(jax.random.key(0), 5)
    assert [tuple(ly.weight.shape) for ly in net.layers] == [(128, 5), (64, 128), (32, 64),
                                                             (1, 32)]
    assert net.dropout == 0.1
    params, static = init_mlp(jax.random.key(0), 5, dropout=0.3)
    assert eqx.combine(params, static).dropout == 0.3


def test_mlp_prediction_is_exact_gelu_then_sigmoid_with_the_last_bias():
    """mlp_apply and AnchorMLP.__call__ compute the documented network (no dropout)."""
    import equinox as eqx

    from jaxeval.anchors._mlp import init_mlp, mlp_apply

    params, static = init_mlp(jax.random.key(1), 3, hidden=(8, 4))
    net = eqx.combine(params, static)
    x = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32) * 3
    want = _numpy_forward(net, x)
    assert float(np.abs(np.asarray(net.layers[-1].bias))[0]) > 1e-3  # the bias matters
    np.testing.assert_allclose(mlp_apply(params, static, jnp.asarray(x)), want, atol=2e-6)
    for i in range(5):
        np.testing.assert_allclose(float(net(jnp.asarray(x[i]))), want[i], atol=2e-6)


def test_dropout_draws_each_layers_mask_from_its_own_key_and_rescales(monkeypatch):
    """Hidden layer i's mask comes from fold_in(key, i); kept units are scaled by
    1 / (1 - rate), in mlp_apply and in AnchorMLP.__call__ alike."""
    import equinox as eqx

    from jaxeval.anchors import _mlp

    params, static = _mlp.init_mlp(jax.random.key(2), 3, dropout=0.4, hidden=(8, 8))
    net = eqx.combine(params, static)
    seen, real = [], _mlp.dropout_keep

    def spy(key, shape, rate):
        m = real(key, shape, rate)
        seen.append((np.asarray(jax.random.key_data(key)), np.asarray(m)))
        return m

    monkeypatch.setattr(_mlp, "dropout_keep", spy)
    key = jax.random.key(5)
    x = np.random.default_rng(2).random((1, 3)).astype(np.float32)
    got = float(_mlp.mlp_apply(params, static, jnp.asarray(x), key)[0])
    one = float(net(jnp.asarray(x[0]), key))
    assert len(seen) == 4
    for i in range(2):
        want_key = np.asarray(jax.random.key_data(jax.random.fold_in(key, i)))
        np.testing.assert_array_equal(seen[i][0], want_key)  # mlp_apply, layer i
        np.testing.assert_array_equal(seen[2 + i][0], want_key)  # __call__, layer i
    masks = [seen[0][1], seen[1][1]]
    assert not all(m.all() for m in masks)
    want = _numpy_forward(net, x, masks, 0.4)[0]
    assert got == pytest.approx(want, abs=2e-6) and one == pytest.approx(want, abs=2e-6)


def test_residual_mlp_starts_at_its_base_even_near_zero_and_one():
    """With base predictions the network starts as the zero correction: checkpoint 0
    predicts the base itself (logit space, clipped at 1e-4); half a base is refused."""
    from jaxeval.anchors import train_mlp

    x_tr, y_tr, x_val, y_val = _mlp_data(3)
    base_tr = jnp.full(12, 0.5, jnp.float32)
    base_val = jnp.asarray([1e-3, 0.2, 0.5, 0.8, 0.999, 1e-6], jnp.float32)
    fit, static = train_mlp(jax.random.key(0), x_tr, y_tr, x_val, y_val, num_steps=2,
                            eval_every=2, hidden=(8,), base_tr=base_tr, base_val=base_val,
                            return_path=True)
    # (1e-6 is clipped to 1e-4)
    np.testing.assert_allclose(fit.val_path[0], [1e-3, 0.2, 0.5, 0.8, 0.999, 1e-4], rtol=1e-5)
    with pytest.raises(ValueError, match="give both or neither"):
        train_mlp(jax.random.key(0), x_tr, y_tr, x_val, y_val, num_steps=2, eval_every=2,
                  hidden=(8,), base_tr=base_tr)


def test_train_mlp_is_adamw_on_the_dropout_mse_with_a_fresh_mask_each_step():
    """The last iterate (use_validation=False) equals a hand-written AdamW loop whose
    step t uses dropout key fold_in(kdrop, t), t = 0, 1, 2, 3 over two checkpoints, with
    the weight decay and the residual base passed through."""
    import optax

    from jaxeval.anchors._mlp import init_mlp, mlp_apply, train_mlp

    x_tr, y_tr, x_val, y_val = _mlp_data(4)
    base_tr = jnp.linspace(0.1, 0.9, 12, dtype=jnp.float32)
    base_val = jnp.full(6, 0.4, jnp.float32)
    key, lr, wd = jax.random.key(7), 0.05, 0.3
    fit, static = train_mlp(key, x_tr, y_tr, x_val, y_val, num_steps=4, eval_every=2,
                            learning_rate=lr, weight_decay=wd, dropout=0.25, hidden=(8,),
                            use_validation=False, base_tr=base_tr, base_val=base_val)
    kinit, kdrop = jax.random.split(key)
    p, st = init_mlp(kinit, 3, 0.25, hidden=(8,), zero_last=True)
    opt = optax.adamw(lr, weight_decay=wd)
    s = opt.init(p)

    def loss(p, k):
        return jnp.mean((mlp_apply(p, st, x_tr, k, base_tr) - y_tr) ** 2)

    for t in range(4):
        g = jax.grad(loss)(p, jax.random.fold_in(kdrop, t))
        upd, s = opt.update(g, s, p)
        p = optax.apply_updates(p, upd)
    for a, b in zip(jax.tree.leaves(fit.params), jax.tree.leaves(p)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert int(fit.best_step) == 4  # the last iterate
    train_mse = jnp.mean((mlp_apply(p, st, x_tr, None, base_tr) - y_tr) ** 2)
    assert float(fit.final_train) == pytest.approx(float(train_mse), rel=1e-4)


def test_train_mlp_keeps_the_earliest_best_checkpoint_of_its_path():
    """Steps round down to whole checkpoints; best_val is the smallest validation MSE
    on the path, best_step the earliest checkpoint reaching it, params its weights;
    final_train is the last iterate's."""
    from jaxeval.anchors import mlp_apply, train_mlp

    x_tr, y_tr, x_val, y_val = _mlp_data(5)
    kw = dict(num_steps=230, eval_every=50, learning_rate=0.02, hidden=(8,),
              return_path=True)
    fit, static = train_mlp(jax.random.key(1), x_tr, y_tr, x_val, y_val, **kw)
    path = np.asarray(fit.val_path)
    assert path.shape == (5, 6)  # init + 4 checkpoints (230 -> 200 steps)
    mse = ((path - np.asarray(y_val)) ** 2).mean(axis=1)
    assert int(np.argmin(mse)) == 4 and int(fit.best_step) == 200
    assert float(fit.best_val) == pytest.approx(mse[4], rel=1e-5)
    # the training never reads the validation targets: aimed at checkpoint 2's
    # predictions, the same path keeps checkpoint 2 (step 100)
    aim = jnp.asarray(path[2])
    fit2, _ = train_mlp(jax.random.key(1), x_tr, y_tr, x_val, aim, **kw)
    np.testing.assert_allclose(fit2.val_path, path, atol=1e-6)
    assert int(fit2.best_step) == 100 and float(fit2.best_val) < 1e-10
    np.testing.assert_allclose(mlp_apply(fit2.params, static, x_val), path[2], atol=1e-6)
    assert float(fit2.final_train) == pytest.approx(float(fit.final_train), rel=1e-5)
    kept = float(jnp.mean((mlp_apply(fit2.params, static, x_tr) - y_tr) ** 2))
    assert kept > 2 * float(fit2.final_train)  # (the kept checkpoint is not the last)
    # a learning rate of 0: every checkpoint ties; the earliest (step 0) is kept
    still, _ = train_mlp(jax.random.key(1), x_tr, y_tr, x_val, y_val, num_steps=200,
                         eval_every=50, learning_rate=0.0, hidden=(8,))
    assert int(still.best_step) == 0


def test_dropout_keep_at_rate_zero_keeps_even_the_largest_hash(monkeypatch):
    """At rate 0 every entry is kept, the one whose hash is ``2**32 - 1`` too (a
    threshold clamped to ``2**32 - 1`` dropped it). The seed is chosen by inverting the
    hash so that entry 0 hashes to ``2**32 - 1``."""
    from jaxeval.anchors._mlp import dropout_keep

    M = 2**32
    x = M - 1
    for shift, mul in ((16, 0x846CA68B), (15, 0x7FEB352D), (16, None)):
        y = x
        for _ in range(3):  # x ^= x >> s, inverted (s >= 11: three rounds suffice)
            y = x ^ (y >> shift)
        x = y
        if mul is not None:
            x = x * pow(mul, -1, M) % M
    seed = np.uint32(x)  # entry 0 of the iota: x0 = 0 * c + seed
    monkeypatch.setattr(jax.random, "bits", lambda key, shape, dtype: jnp.asarray(seed))
    assert not bool(dropout_keep(jax.random.key(0), (4,), 1e-9)[0])  # the hash is the max
    assert bool(dropout_keep(jax.random.key(0), (4,), 0.0).all())


def test_anchor_table_coverage_without_a_value_reads_n_a(anchors_summary):
    """A coverage or width read back as null (NaN in summary.json) shows as n/a, never
    as "n/a%" or a crash."""
    import copy

    from jaxeval._report import format_summary

    s = copy.deepcopy(anchors_summary)
    e = s["methods"]["random_mean"]
    e["coverage"], e["width"] = [0.9, None], [None, float("nan")]
    row = [ln for ln in format_summary(s).splitlines()
           if ln.strip().startswith("random_mean")][1]
    assert row.split() == ["random_mean", "90.0%", "/", "n/a", "n/a", "/", "n/a"]
