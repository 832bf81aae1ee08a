"""``fit_anchors`` and ``AnchorPredictor`` pinned to exact values: the interval's
arithmetic, argument and score checks, every field a save keeps, extra items and
``predict_unbiased``'s refusals, the default hold-out and the warnings."""

import re
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from test_anchors import FAST, _planted, edited_npz

import jaxeval
from jaxeval.anchors import AnchorPredictor, apply_map, conformal_quantile, fit_anchors


@pytest.fixture(scope="module")
def sm():
    s, _, _ = _planted(m=160, n=40)
    return jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(40)])


def _by_hand(radius=0.15, alpha=0.1):
    """A weighted-mean predictor over ten items, anchors q2, q5, q7 weighted 0.6, 0.6, 0.2
    (the weights sum past 1, so the map can overshoot)."""
    return AnchorPredictor(
        items=np.array([f"q{j}" for j in range(10)]),
        anchor_index=np.array([2, 5, 7], np.int32),
        method="random_mean", kind="weighted_mean",
        params={"w": np.array([0.6, 0.6, 0.2], np.float32)},
        radius=radius, alpha=alpha, external_target=False, validation_mae_pp=1.234,
        info={"seed": 0}, item_model=None)


def test_interval_is_the_clipped_estimate_plus_or_minus_the_radius():
    """predict clips the map's estimate to [0, 1] first, then gives est -+ radius, each
    end clipped to [0, 1]; one row gives scalars, a batch gives arrays."""
    pred = _by_hand()
    assert pred.anchor_items.tolist() == ["q2", "q5", "q7"] and pred.k == 3
    want = {(1, 0, 0): (0.6, 0.45, 0.75), (1, 1, 0): (1.0, 0.85, 1.0),
            (0, 0, 0.5): (0.1, 0.0, 0.25), (0, 0, 0): (0.0, 0.0, 0.15)}
    for x, w in want.items():
        got = pred.predict(np.array(x))
        assert all(np.ndim(v) == 0 for v in got)
        np.testing.assert_allclose(got, w, atol=1e-6)
    est, lo, hi = pred.predict(np.array(list(want)))
    assert est.shape == lo.shape == hi.shape == (4,)
    np.testing.assert_allclose(np.stack([est, lo, hi], 1), list(want.values()), atol=1e-6)
    one = pred.predict(np.array([[1, 0, 0]]))  # a batch of one model stays a batch
    assert [v.shape for v in one] == [(1,)] * 3
    # an infinite radius (too few validation models) is the interval [0, 1]
    np.testing.assert_allclose(_by_hand(radius=np.inf).predict(np.array([1, 0, 0])),
                               (0.6, 0.0, 1.0), atol=1e-6)


def test_scores_below_zero_or_just_above_one_are_refused():
    """Anchor scores outside [0, 1] are refused naming anchor_scores, a little below 0
    or a little above 1 as well as percentages; 0 and 1 themselves are scores."""
    pred = _by_hand()
    for bad in ([-0.1, 0.5, 0.5], [0.5, 1.5, 0.5], [[0, 0, 0], [0, 1.01, 0]], [50, 80, 90]):
        with pytest.raises(ValueError, match=r"anchor_scores: scores must lie in \[0, 1\]"):
            pred.predict(np.array(bad))
    pred.predict(np.array([0.0, 1.0, 1.0]))


def test_repr_names_k_method_kind_interval_and_level():
    """The repr gives k, method, kind, the radius to 4 places, the interval's level
    1 - alpha in percent (four significant figures, more where that would print 100%)
    and the
    validation MAE to 2 places."""
    assert repr(_by_hand(alpha=0.2)) == (
        "AnchorPredictor(k=3, method='random_mean', kind='weighted_mean', "
        "interval=+-0.1500 at 80%, validation MAE 1.23 pp)")
    for alpha, level in ((0.025, "97.5%"), (0.005, "99.5%"), (1e-5, "99.999%")):
        assert f"interval=+-0.1500 at {level}, " in repr(_by_hand(alpha=alpha))


def _same_predictor(a, b):
    for field in ("method", "kind", "radius", "alpha", "external_target",
                  "validation_mae_pp", "info"):
        assert getattr(a, field) == getattr(b, field), field
        assert type(getattr(a, field)) is type(getattr(b, field)), field
    np.testing.assert_array_equal(a.items, b.items)
    np.testing.assert_array_equal(a.anchor_index, b.anchor_index)
    assert b.anchor_index.dtype == np.int32
    la, lb = (jnp.asarray(x) for x in (a.params["lin"].w, b.params["lin"].w)) \
        if a.kind == "linear" else (a.params["w"], b.params["w"])
    np.testing.assert_array_equal(la, lb)
    assert (a.item_model is None) == (b.item_model is None)
    if a.item_model is not None:
        for part in ("V", "c", "u_mean"):
            np.testing.assert_array_equal(getattr(a.item_model["F"], part),
                                          getattr(b.item_model["F"], part))
        np.testing.assert_array_equal(a.item_model["rho"], b.item_model["rho"])


def test_save_load_restores_every_field(sm, tmp_path):
    """A fitted predictor (alpha 0.2) saved and loaded has every field as it was: method,
    kind, the exact radius and alpha, external_target, validation MAE, info, items,
    anchors, parameters and item model; so does one fitted on an external target, and a
    predictor built by hand."""
    pred = fit_anchors(sm, 5, method="random_ridge", seed=1, alpha=0.2, settings=FAST)
    assert pred.alpha == 0.2 and 0 < pred.radius < 1 and pred.external_target is False
    back = AnchorPredictor.load(pred.save(tmp_path / "a"))
    _same_predictor(pred, back)
    ext = jaxeval.ScoreMatrix(sm.scores, items=sm.items,
                              target=np.clip(sm.true_score() + 0.01, 0, 1))
    pred = fit_anchors(ext, 5, method="random_mean", seed=1, settings=FAST)
    assert pred.external_target is True and pred.item_model is None
    back = AnchorPredictor.load(pred.save(tmp_path / "b"))
    _same_predictor(pred, back)
    with pytest.raises(ValueError, match="predict_unbiased: this predictor was fitted on an "
                                         "external target"):
        back.predict_unbiased(np.zeros(5), ["q0", "q1"], [0, 1])
    # refused already when the extra items are drawn, before anyone pays to score them
    with pytest.raises(ValueError, match="extra_items: this predictor was fitted on an "
                                         "external target .* extra items cannot be used"):
        back.extra_items(2)
    hand = _by_hand(radius=0.123456789, alpha=0.3)
    _same_predictor(hand, AnchorPredictor.load(hand.save(tmp_path / "c")))


def test_load_refuses_a_negative_anchor_index_and_a_zero_alpha(tmp_path):
    """A saved file whose anchor index holds -1 (JAX would read the last item) or whose
    alpha is 0 is refused at load."""
    p = _by_hand().save(tmp_path / "p")
    for name, change in (("neg", {"anchor_index": np.array([2, 5, -1], np.int32)}),
                         ("alpha0", {"alpha": 0.0}), ("alpha1", {"alpha": 1.0})):
        with pytest.raises(ValueError, match="not a readable saved AnchorPredictor"):
            AnchorPredictor.load(edited_npz(p, tmp_path / f"{name}.npz", **change))
    AnchorPredictor.load(edited_npz(p, tmp_path / "same.npz"))


def test_extra_items_can_take_every_non_anchor_and_no_more(sm):
    """extra_items(n - k) draws every non-anchor once; one more is refused naming m and
    its range."""
    pred = fit_anchors(sm, 5, method="random_mean", seed=0, settings=FAST)
    every = pred.extra_items(35, seed=4)
    assert sorted(every.tolist()) == sorted(set(sm.items.tolist()) - set(pred.anchor_items))
    with pytest.raises(ValueError, match=r"m: expected an integer in \[1, 35\] \(the 40 items "
                                         r"less the 5 anchors\), got 36"):
        pred.extra_items(36)


def test_predict_unbiased_refuses_what_it_cannot_use(sm):
    """predict_unbiased takes one model's anchor scores only; its extra items must be
    distinct non-anchors, with one score in [0, 1] each; each problem names its
    argument."""
    pred = fit_anchors(sm, 5, method="random_mean", seed=0, settings=FAST)
    x = sm.take(items=pred.anchor_items).scores
    extra = pred.extra_items(3, seed=0)
    ys = sm.take(items=extra).scores[0]
    with pytest.raises(ValueError, match="predict_unbiased: one model at a time"):
        pred.predict_unbiased(x[:2], extra, ys)
    for bad in ([extra[0], extra[1], pred.anchor_items[0]], [extra[0], extra[1], extra[0]]):
        with pytest.raises(ValueError, match="extra_items: must be distinct non-anchor items"):
            pred.predict_unbiased(x[0], np.array(bad), ys)
    for bad, msg in (([1, 0, -0.5], r"scores must lie in \[0, 1\], got -0\.5\.\.1\.0"),
                     ([1, 0, 1.5], r"scores must lie in \[0, 1\], got 0\.0\.\.1\.5"),
                     ([1, 0], r"expected 3 scores \(one per extra item\), got shape \(2,\)"),
                     ([1, 0, 1, 1], r"expected 3 scores \(one per extra item\), got shape"),
                     ([1, 0, np.nan], rf"holds NaN/inf \(first at 2, item '{extra[2]}'\)")):
        with pytest.raises(ValueError, match=r"^extra_scores: " + msg):
            pred.predict_unbiased(x[0], extra, bad)
    # integer item names given as keys that collide once read as text: refused
    numbered = jaxeval.ScoreMatrix(sm.scores, items=[str(i) for i in range(40)])
    npred = fit_anchors(numbered, 5, method="random_mean", seed=0, settings=FAST)
    one = npred.extra_items(1, seed=0)
    nx = numbered.take(items=npred.anchor_items).scores[0]
    with pytest.raises(ValueError, match="extra_scores: named scores must cover exactly"):
        npred.predict_unbiased(nx, one, {int(one[0]): 1.0, str(one[0]): 0.0})


def test_predict_unbiased_defaults_to_the_predictors_alpha(sm):
    """Without alpha, predict_unbiased's interval is at the predictor's own level (0.4
    here), not at 0.1."""
    pred = fit_anchors(sm, 5, method="random_mean", seed=0, alpha=0.4, settings=FAST)
    x = sm.take(items=pred.anchor_items).scores[3]
    extra = pred.extra_items(12, seed=2)
    ys = sm.take(items=extra).scores[3]
    default = pred.predict_unbiased(x, extra, ys)
    assert default == pred.predict_unbiased(x, extra, ys, alpha=0.4)
    wide = pred.predict_unbiased(x, extra, ys, alpha=0.1)
    assert wide[2] - wide[1] > default[2] - default[1]


def test_fit_anchors_argument_errors_name_the_argument(sm):
    """k = 0, an unknown method, alpha outside (0, 1), validation items in another
    order and two models (one left after the hold-out) are refused with messages naming
    the argument."""
    with pytest.raises(ValueError, match=r"k: expected an integer in \[1, 39\]"):
        fit_anchors(sm, 0, method="random_mean")
    with pytest.raises(ValueError, match=r"method: expected 'auto' or one of \("):
        fit_anchors(sm, 5, method="nope")
    for bad in (0, 1, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match=r"alpha: expected a level in \(0, 1\)"):
            fit_anchors(sm, 5, method="random_mean", alpha=bad)
    val, tr = sm.split([40], seed=0)
    order = np.arange(40)[::-1]
    swapped = jaxeval.ScoreMatrix(val.scores[:, order], models=val.models,
                                  items=val.items[order])
    with pytest.raises(ValueError, match="validation: item names must equal those of train"):
        fit_anchors(tr, 5, method="random_mean", validation=swapped)
    with pytest.raises(ValueError, match=r"train: method 'random_mean' needs at least 4 models, "
                                         r"got 1 \(validation=None held out 1 of train's 2"):
        fit_anchors(sm.take(models=[0, 1]), 5, method="random_mean")


def test_default_holdout_is_a_seeded_rounded_fifth_and_sets_the_figures(sm):
    """Without validation, round(20%) of the models (13 of 63 here, rounded up from
    12.6) are held out by ScoreMatrix.split with the seed; the validation MAE, the radius
    (a conformal quantile of the clipped validation residuals at alpha) and the info
    counts come from those models."""
    data = sm.take(models=np.arange(63))
    pred = fit_anchors(data, 5, method="random_linear", seed=3, alpha=0.2, settings=FAST)
    assert pred.info["n_validation"] == 13 and pred.info["n_train"] == 50
    assert pred.info["requested_method"] == "random_linear" and pred.info["auto_choice"] is None
    assert pred.info["interval_calibration"] == "validation models"
    val, _ = data.split([13], seed=3)
    est = pred.predict(val.scores[:, pred.anchor_index])[0]
    res = est - val.true_score()
    np.testing.assert_allclose(pred.validation_mae_pp, 100 * np.mean(np.abs(res)), rtol=1e-5)
    np.testing.assert_allclose(pred.info["validation_mse"]["random_linear"],
                               np.mean(res**2), rtol=1e-5)
    assert pred.radius == pytest.approx(float(conformal_quantile(jnp.asarray(res), 0.2)),
                                        rel=1e-5)


def test_warnings_point_at_the_caller_and_say_how_many_models_are_needed(sm):
    """The duplicate-row warning and the too-few-validation-models warning are reported
    at the line calling fit_anchors; the latter says how many validation models the
    level needs (9 for 90%, 10 when calibrated on two equal halves)."""
    val, tr = sm.split([40], seed=0)
    dup = jaxeval.ScoreMatrix(np.concatenate([val.scores[:-1], tr.scores[5:6]]),
                              models=[*val.models[:-1], "twin"], items=val.items)
    with pytest.warns(UserWarning, match="score exactly like a training model") as w:
        fit_anchors(tr, 5, method="random_mean", validation=dup)
    assert [r.filename for r in w] == [__file__]
    cases = (("random_mean", r"8 validation models are too few for a 90% conformal interval "
                             r"\(at least 9 are needed\)"),
             ("random_ridge", r"at least 10 are needed when the interval is calibrated on "
                              r"two equal halves"))
    for method, match in cases:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            p = fit_anchors(sm.take(models=np.arange(40)), 3, method=method, settings=FAST)
        assert p.radius == np.inf
        hits = [r for r in w if "too few for a" in str(r.message)]
        assert len(hits) == 1 and hits[0].filename == __file__
        assert re.search(match, str(hits[0].message)), str(hits[0].message)


def test_incomplete_or_out_of_range_scores_are_refused_naming_the_matrix():
    """A missing (NaN) cell or a score outside [0, 1] in train or in validation is
    refused before any fit, naming that matrix and, for an array's rows, the model."""
    rng = np.random.default_rng(0)
    s = (rng.random((30, 10)) < 0.5).astype(float)
    cases = []
    for where, value, match in ((0, np.nan, r"train: fit_anchors needs a fully observed "
                                             r"matrix.*\['model_3'\]"),
                                (0, 2.0, r"train: field 'scores' must lie in \[0, 1\]"),
                                (1, np.nan, r"validation: fit_anchors \(validation\) needs a "
                                            r"fully observed matrix.*\['validation_3'\]"),
                                (1, -1.0, r"validation: field 'scores' must lie in \[0, 1\]")):
        t, v = s.copy(), s[:8].copy()
        (t, v)[where][3, 4] = value
        cases.append((t, v if where else None, match))
    for t, v, match in cases:
        with pytest.raises(ValueError, match=match):
            fit_anchors(t, 3, method="random_mean", validation=v)


def test_validation_figures_use_the_clipped_estimates():
    """The validation MAE, MSE and radius score the map's estimates clipped to [0, 1], as
    predict gives them: a linear map that overshoots 1 on validation models whose target
    is 1 has (nearly) no validation error."""
    rng = np.random.default_rng(0)
    x_tr, x_val = rng.uniform(0, 0.5, 24), rng.uniform(0.7, 1.0, 10)

    def matrix(x, target, prefix):
        return jaxeval.ScoreMatrix(np.repeat(x[:, None], 6, axis=1),
                                   models=[f"{prefix}{i}" for i in range(x.size)],
                                   items=[f"q{j}" for j in range(6)], target=target)

    train, val = matrix(x_tr, 2 * x_tr, "t"), matrix(x_val, np.ones(10), "v")
    pred = fit_anchors(train, 2, method="random_linear", validation=val, settings=FAST)
    raw = apply_map(pred._fitted(), jnp.asarray(val.scores[:, pred.anchor_index], jnp.float32))
    assert float(jnp.min(raw)) > 1.1  # the map overshoots on every validation model
    est = pred.predict(val.scores[:, pred.anchor_index])[0]
    np.testing.assert_allclose(est, 1.0)
    assert pred.validation_mae_pp < 1e-3 and pred.radius < 1e-3
    assert pred.info["validation_mse"]["random_linear"] < 1e-8


def test_save_refuses_an_existing_file_unless_told_to_overwrite(tmp_path):
    """A predictor saved over an existing file used to replace it without a word (another
    fit's anchors, perhaps already scored); now refused, naming the path and the way out,
    and the file is left as it was."""
    first, second = _by_hand(radius=0.1), _by_hand(radius=0.2)
    p = first.save(tmp_path / "p")
    before = p.read_bytes()
    for target in (tmp_path / "p", tmp_path / "p.npz"):
        with pytest.raises(FileExistsError, match=r"path: .*p\.npz exists .*overwrite=True"):
            second.save(target)
    assert p.read_bytes() == before
    with pytest.raises(TypeError, match="overwrite: expected True or False, got 'yes'"):
        second.save(tmp_path / "p", overwrite="yes")
    assert second.save(tmp_path / "p", overwrite=True) == p
    assert AnchorPredictor.load(p).radius == 0.2
