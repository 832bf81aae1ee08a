"""The public anchor API pinned where a second mutation review found it unpinned: the
order of ``anchor_items``, the seed of ``extra_items``, ``predict_unbiased`` as the
documented composition of the item model and ``dr_estimate``, the item model's prior
strength, load's integrity checks and messages, the too-few-validation warning at
a level between counts, and what ``info`` records."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_anchor_api_mutants import _by_hand
from test_anchors import FAST, _planted, edited_npz

import jaxeval
from jaxeval.anchors import AnchorPredictor, dr_estimate, fit_anchors
from jaxeval.anchors._irt import irt_item_predictions


@pytest.fixture(scope="module")
def sm():
    s, _, _ = _planted(m=120, n=40)
    return jaxeval.ScoreMatrix(s, items=[f"q{j}" for j in range(40)])


def test_anchor_items_follow_the_anchor_index_order():
    """anchor_items is items[anchor_index] in that order (the order predict reads a
    plain array in), not sorted: named scores go to the anchor of that name."""
    pred = dataclasses.replace(_by_hand(), anchor_index=np.array([7, 2, 5], np.int32))
    assert pred.anchor_items.tolist() == ["q7", "q2", "q5"]
    # weights 0.6, 0.6, 0.2 on q7, q2, q5
    np.testing.assert_allclose(pred.predict({"q5": 1, "q2": 0, "q7": 0})[0], 0.2, atol=1e-6)
    np.testing.assert_allclose(pred.predict({"q7": 1, "q5": 0, "q2": 0})[0], 0.6, atol=1e-6)
    np.testing.assert_allclose(pred.predict(np.array([0.0, 0.0, 1.0]))[0], 0.2, atol=1e-6)


def test_extra_items_draw_depends_on_the_seed_and_only_on_it():
    """The same (m, seed) draws the same items; other seeds draw other ones; every draw
    is m distinct non-anchors."""
    from jaxeval._factorization import ItemFactors

    # (with an item model: extra items are refused where predict_unbiased cannot use them)
    pred = dataclasses.replace(_by_hand(), item_model={
        "F": ItemFactors(np.zeros((10, 1), np.float32), np.zeros(10, np.float32),
                         np.zeros(1, np.float32)), "rho": 1.0})
    draws = [tuple(pred.extra_items(3, seed=s).tolist()) for s in range(8)]
    assert draws == [tuple(pred.extra_items(3, seed=s).tolist()) for s in range(8)]
    assert len(set(draws)) > 1
    for d in draws:
        assert len(set(d)) == 3 and not set(d) & set(pred.anchor_items.tolist())


def test_predict_unbiased_is_dr_estimate_on_the_item_model_predictions(sm):
    """predict_unbiased is dr_estimate of the item model's per-item predictions (the new
    model's factor fitted on its anchors with the item model's prior strength rho), the
    anchors and the extra items paired with their own scores, in draw order."""
    pred = fit_anchors(sm, 5, method="random_mean", seed=0, settings=FAST)
    x = sm.take(items=pred.anchor_items).scores[2].astype(np.float32)
    extra = pred.extra_items(12, seed=3)
    ys = sm.take(items=extra).scores[2].astype(np.float32)
    idx = np.array([pred.items.tolist().index(e) for e in extra], np.int32)
    F, rho = pred.item_model["F"], pred.item_model["rho"]
    anchors = jnp.asarray(pred.anchor_index)

    def want(rho, alpha):
        preds = irt_item_predictions(jax.tree.map(jnp.asarray, F), anchors,
                                     jnp.asarray(x)[None], jnp.asarray(rho))[0]
        return np.array(dr_estimate(preds, anchors, jnp.asarray(x), jnp.asarray(idx),
                                    jnp.asarray(ys), alpha), np.float64)

    got = np.array(pred.predict_unbiased(x, extra, ys, alpha=0.2))
    np.testing.assert_allclose(got, want(rho, 0.2), atol=2e-6)
    # the item model's rho is the one used: another rho gives the other estimate
    strong = dataclasses.replace(pred, item_model={"F": F, "rho": np.float32(40.0)})
    far = want(40.0, 0.2)
    assert abs(far[0] - got[0]) > 1e-4
    np.testing.assert_allclose(strong.predict_unbiased(x, extra, ys, alpha=0.2), far, atol=2e-6)


def test_item_model_prior_strength_is_settings_irt_rho_online_and_zero_loads(sm, tmp_path):
    """The item model keeps settings.irt.rho_online (not another of the IRT priors); a
    prior strength of 0, which the settings allow, saves and loads."""
    for rho in (4.0, 0.0):
        st = dataclasses.replace(FAST, irt=FAST.irt._replace(rho_online=rho))
        pred = fit_anchors(sm, 5, method="random_mean", seed=0, settings=st)
        assert float(pred.item_model["rho"]) == rho
        back = AnchorPredictor.load(pred.save(tmp_path / f"rho{rho}"))
        assert float(back.item_model["rho"]) == rho


def test_load_message_names_items_not_fitted_on(tmp_path):
    """Items given to load that hold every saved item plus another are refused naming the
    other item, with both counts in their places."""
    p = _by_hand().save(tmp_path / "p")
    more = [f"q{j}" for j in range(10)] + ["zz"]
    with pytest.raises(ValueError, match=r"items: the predictor in .* was fitted on 10 items "
                                         r"that differ from the 11 given \(e\.g\. not fitted on "
                                         r"\['zz'\]\)"):
        AnchorPredictor.load(p, items=more)


def test_load_checks_the_anchor_index_range_the_radius_and_the_format(tmp_path):
    """An anchor index equal to the number of items is out of range (refused); the last
    item is an anchor like any other; a zero radius (a perfect fit on validation) is a
    radius; a file of another format version is refused naming the format."""
    p = _by_hand().save(tmp_path / "p")
    with pytest.raises(ValueError, match=r"anchor_index: expected distinct indices in 0\.\.9"):
        AnchorPredictor.load(edited_npz(p, tmp_path / "n.npz",
                                        anchor_index=np.array([2, 5, 10], np.int32)))
    last = AnchorPredictor.load(edited_npz(p, tmp_path / "last.npz",
                                           anchor_index=np.array([2, 5, 9], np.int32)))
    assert last.anchor_items.tolist() == ["q2", "q5", "q9"]
    zero = AnchorPredictor.load(_by_hand(radius=0.0).save(tmp_path / "zero"))
    assert zero.radius == 0.0
    np.testing.assert_allclose(zero.predict(np.array([1, 0, 0])), (0.6, 0.6, 0.6), atol=1e-6)
    with pytest.raises(ValueError, match=r"format 'jaxeval\.anchors/2', expected "
                                         r"'jaxeval\.anchors/1'"):
        AnchorPredictor.load(edited_npz(p, tmp_path / "f.npz", format="jaxeval.anchors/2"))


def test_load_names_a_non_finite_parameter(tmp_path):
    """One NaN weight among finite ones is refused naming the parameter."""
    pred = _by_hand()
    p = pred.save(tmp_path / "p")
    with pytest.raises(ValueError, match=r"params: \['w'\] holds non-finite values"):
        AnchorPredictor.load(edited_npz(p, tmp_path / "nan.npz",
                                        leaf_0=np.array([0.6, np.nan, 0.2], np.float32)))


@pytest.mark.parametrize("method, n_val, need", [
    ("random_mean", 8, "(at least 10 are needed)"),
    ("random_ridge", 9, "(at least 10 are needed when the interval is calibrated on two "
                        "equal halves"),
])
def test_too_few_validation_models_at_a_level_between_counts(sm, method, n_val, need):
    """At alpha 0.095 a finite conformal quantile needs (1 - alpha) / alpha = 9.53, so 10,
    residuals (rounded up, not down); on two equal halves of the validation models that
    is 10 models too (even: nothing to round up)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p = fit_anchors(sm.take(models=np.arange(40)), 3, method=method, alpha=0.095,
                        validation=sm.take(models=np.arange(40, 40 + n_val)), settings=FAST)
    assert p.radius == np.inf
    msgs = [str(r.message) for r in w if "too few for a" in str(r.message)]
    assert len(msgs) == 1 and need in msgs[0], msgs


def test_info_records_the_seed_given_and_the_settings_used(sm):
    """info['seed'] is the int seed given (None for a PRNG key: no int was given), and
    info['settings'] the checked settings the fit ran with (external set for an
    external target)."""
    a = fit_anchors(sm, 4, method="random_mean", seed=np.int64(5), settings=FAST)
    assert a.info["seed"] == 5
    b = fit_anchors(sm, 4, method="random_mean", seed=jax.random.key(5), settings=FAST)
    assert b.info["seed"] is None
    ext = jaxeval.ScoreMatrix(sm.scores, items=sm.items,
                              target=np.clip(sm.true_score() + 0.01, 0, 1))
    c = fit_anchors(ext, 4, method="random_mean", seed=0, settings=FAST)
    assert "external=True" in c.info["settings"] and "proxy_steps=60" in c.info["settings"]
    assert "external=False" in a.info["settings"]


def test_a_validation_target_without_a_training_one_is_refused(sm):
    """An external target on the validation models only is refused as one on the
    training models only is, naming which side has it."""
    val, tr = sm.split([30], seed=0)
    with_target = jaxeval.ScoreMatrix(val.scores, models=val.models, items=val.items,
                                      target=val.true_score())
    with pytest.raises(ValueError, match="validation: validation has an external target and "
                                         "train has none"):
        fit_anchors(tr, 4, method="random_mean", validation=with_target)


def test_load_refuses_a_cut_item_model_and_labels_that_disagree(sm, tmp_path):
    """A file with only some of the item model's arrays, one labelled external that holds
    an item model, a method that is no name or a negative validation MAE is refused at
    load (each loaded before; predict_unbiased then blamed an external target)."""
    pred = fit_anchors(sm, 5, method="random_mean", seed=0, settings=FAST)
    path = pred.save(tmp_path / "p.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "cut.npz", **{k: v for k, v in arrays.items() if k != "item_V"})
    with pytest.raises(ValueError, match=r"cut.npz: not a readable saved AnchorPredictor "
                                         r"\(ValueError: the item model is cut: only "
                                         r"\['item_c', 'item_u_mean', 'item_rho'\]"):
        AnchorPredictor.load(tmp_path / "cut.npz")
    for change, msg in (({"external_target": True}, "external_target is True but the file "
                                                     "holds an item model"),
                        ({"method": 5}, "method: expected a name, got 5"),
                        ({"validation_mae_pp": -1.0}, r"validation_mae_pp: expected a finite "
                                                      r"value >= 0 \(or NaN\), got -1.0")):
        bad = edited_npz(path, tmp_path / "bad.npz", **change)
        with pytest.raises(ValueError, match=msg):
            AnchorPredictor.load(bad)
    # a label of one's own and no validation MAE (NaN) are what a hand-built predictor
    # may have: saved, they load
    own = dataclasses.replace(_by_hand(), method="my_weights", validation_mae_pp=np.nan)
    back = AnchorPredictor.load(own.save(tmp_path / "own.npz"))
    assert back.method == "my_weights" and np.isnan(back.validation_mae_pp)


def test_predict_unbiased_without_an_item_model_says_so():
    """A row-mean predictor built without an item model cannot give the unbiased
    estimate; the error says that, not that it was fitted on an external target."""
    with pytest.raises(ValueError, match=r"^predict_unbiased: this predictor has no item "
                                         r"model \(item_model=None\)"):
        _by_hand().predict_unbiased(np.ones(3), ["q0"], [1.0])
    ext = dataclasses.replace(_by_hand(), external_target=True)
    with pytest.raises(ValueError, match="fitted on an external target"):
        ext.predict_unbiased(np.ones(3), ["q0"], [1.0])
