"""IdentificationCampaign: the simulation's kernel, one real request at a time."""

import dataclasses
import json
import re
import warnings
import zipfile

import jax
import numpy as np
import pytest

import jaxeval
from jaxeval import _campaign
from jaxeval import _identification as idn
from jaxeval._campaign import CampaignRequest, IdentificationCampaign
from jaxeval._factorization import ItemFactors
from jaxeval._policies import PREDICTION_POLICIES

# These tests edit saved files on purpose; the warning that a file changed since it
# was saved is asserted where it is the subject (test_campaign_deep_mutants.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:.*changed since it was saved:UserWarning")


@pytest.fixture(scope="module")
def problem():
    """A real matrix cut to 90 items: history models, 4 candidates, fitted factors."""
    sm = jaxeval.load("oll2_musr").drop_duplicates()
    sm = sm.take(items=np.arange(90))
    hist, pool = sm.split([sm.n_models // 2], seed=0)
    lr = jaxeval.fit_factorization(hist, rank=4, rho=1.0, seed=0, num_steps=100)
    cands = pool.take(models=np.arange(4))
    return hist, cands, lr


def _oracle(camp, cands, stop_after=None):
    steps = 0
    while (req := camp.ask()) is not None:
        camp.tell(req, cands.take(models=[req.model], items=req.items).scores[0])
        steps += 1
        if stop_after is not None and steps == stop_after:
            break
    return steps


def _factors_for(policy, lr):
    """The factorization for the policies that predict (others warn that it is unused)."""
    return lr if policy in PREDICTION_POLICIES else None


@pytest.mark.parametrize("policy, b, table, sync", [
    ("ucbe", 1, True, None), ("pulse_ucb", 4, True, None), ("sysrs", 3, True, None),
    ("pulse_ucb", 3, False, None), ("pulse", 2, False, True), ("sysrs", 2, False, None),
])
def test_oracle_campaign_is_the_simulation_replicate(problem, monkeypatch, policy, b, table,
                                                     sync):
    """Answered from a known matrix, a campaign is replicate 0 of the kernel, exactly
    (item orders from the order table or regenerated keys, own or shared orders)."""
    hist, cands, lr = problem
    if not table:
        monkeypatch.setattr(idn, "ORDER_TABLE_MAX", 0)
    K, n = cands.shape
    budget = int(0.35 * K * n)
    camp = IdentificationCampaign(cands.models, hist, policy=policy, batch_size=b,
                                  budget=budget, seed=7, factors=_factors_for(policy, lr),
                                  stop_when_confident=False, synchronized=sync)
    assert camp._config.tabled == table
    steps = _oracle(camp, cands)
    st = camp.status()
    assert st.done and st.reason == "budget" and st.calls == budget
    assert steps == len(camp._log) and st.pulls.sum() == budget

    cfg = idn.Config(policy, num_arms=K, num_items=n, budgets=(budget,), batch_size=b,
                     synchronized=sync)
    data = idn.ProblemData(
        pool=np.asarray(cands.scores, np.float32),
        instances=np.arange(K, dtype=np.int32)[None],
        item_factors=ItemFactors(lr.V, lr.c, lr.u_mean),
    )
    params = idn.Params.make(rho=lr.online_rho)
    key = jax.random.fold_in(jax.random.key(7), 0)
    out = jax.jit(idn.run_identification, static_argnums=3)(key, data, params, cfg)
    rec = jax.tree.map(lambda x: np.asarray(x)[-1], out.checkpoints)
    np.testing.assert_array_equal(st.pulls, rec.pulls)
    assert st.calls == int(rec.calls)
    assert st.recommended == cands.models[int(rec.recommended)]
    np.testing.assert_allclose(st.estimate, rec.estimate, atol=1e-5)
    np.testing.assert_allclose(st.lower, rec.lower[0], atol=1e-5)
    np.testing.assert_allclose(st.upper, rec.upper[0], atol=1e-5)
    np.testing.assert_allclose(st.bounds["hoeffding"][1], rec.upper[1], atol=1e-5)
    # the answered cells are exactly the scores told
    told = camp.scores()
    assert int(told.mask.sum()) == budget
    np.testing.assert_array_equal(told.scores[told.mask], cands.scores[told.mask])


def test_stops_when_the_leader_is_separated():
    # one clearly better model among four: the campaign stops before its budget
    rng = np.random.default_rng(0)
    n = 200
    acc = np.array([0.85, 0.4, 0.35, 0.3])
    s = (rng.random((4, n)) < acc[:, None]).astype(np.float32)
    camp = IdentificationCampaign(["best", "b", "c", "d"], items=[f"q{j}" for j in range(n)],
                                  policy="ucbe", batch_size=5, seed=1)
    truth = jaxeval.ScoreMatrix(s, models=["best", "b", "c", "d"],
                                items=[f"q{j}" for j in range(n)])
    while not camp.status().done:  # status is current without another ask()
        req = camp.ask()
        # answers may also be a mapping {item: score}
        camp.tell(req, dict(zip(req.items, truth.take(models=[req.model],
                                                     items=req.items).scores[0])))
    assert camp.ask() is None
    st = camp.status()
    assert st.done and st.reason == "confident" and st.confident
    assert st.recommended == "best" and st.calls < 0.7 * 4 * n
    assert st.lower[0] > st.upper[1:].max()
    assert "confident that best is best" in st.table()


def test_save_load_continues_exactly(problem, tmp_path):
    hist, cands, lr = problem
    kw = dict(policy="pulse_ucb", batch_size=2, budget=120, seed=3, factors=lr,
              stop_when_confident=False)
    full = IdentificationCampaign(cands.models, hist, **kw)
    _oracle(full, cands)
    part = IdentificationCampaign(cands.models, hist, **kw)
    _oracle(part, cands, stop_after=17)
    pending = part.ask()  # a request asked but not answered is not saved
    path = part.save(tmp_path / "camp")
    assert path.name == "camp.npz"
    back = IdentificationCampaign.load(tmp_path / "camp")
    assert back.calls == part.calls == 34
    again = back.ask()
    assert again.arm == pending.arm and np.array_equal(again.index, pending.index)
    _oracle(back, cands)
    a, b = full.status(), back.status()
    np.testing.assert_array_equal(a.pulls, b.pulls)
    np.testing.assert_array_equal(a.estimate, b.estimate)
    np.testing.assert_array_equal(a.upper, b.upper)
    # every answer stays readable without a replay
    told = IdentificationCampaign.saved_scores(path)
    assert int(told.mask.sum()) == 34
    np.testing.assert_array_equal(told.scores[told.mask], cands.scores[told.mask])
    # an answer that no longer replays: refused, or (strict=False) replayed up to it
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["index"] = arrays["index"].copy()
    arrays["index"][6:8] = arrays["index"][6:8][::-1]  # the 4th answer's items swapped
    arrays = {k: v for k, v in arrays.items() if not k.startswith("state_")}  # no state
    np.savez(tmp_path / "tampered.npz", **arrays)
    with pytest.raises(ValueError, match="saved answer 3 of 17 does not replay"):
        IdentificationCampaign.load(tmp_path / "tampered.npz")
    with pytest.warns(UserWarning, match="continuing after 3 answers"):
        cut = IdentificationCampaign.load(tmp_path / "tampered.npz", strict=False)
    assert cut.calls == 6
    with pytest.raises(ValueError, match="saving there would delete them"):
        cut.save(tmp_path / "tampered.npz")
    cut.save(tmp_path / "elsewhere.npz")
    # corrupt and foreign files are named
    for name, content in (("bad.npz", b"not a zip"), ("empty.npz", b""),
                          ("cut.npz", path.read_bytes()[:200])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match="not a saved jaxeval campaign"):
            IdentificationCampaign.load(tmp_path / name)
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(FileNotFoundError, match="no saved campaign"):
        IdentificationCampaign.load(tmp_path / "nope.npz")


def test_requests_and_answers_are_checked(problem):
    hist, cands, lr = problem
    camp = IdentificationCampaign(cands.models, hist, policy="pulse_ucb", batch_size=3,
                                  seed=0, factors=lr)
    with pytest.raises(ValueError, match="no pending request"):
        camp.tell(CampaignRequest("x", 0, np.array([]), np.array([], int), 0), [])
    req = camp.ask()
    again = camp.ask()  # asking again returns the same request
    assert again.arm == req.arm and np.array_equal(again.index, req.index)
    assert req.items.shape == (3,) and req.model in cands.models
    with pytest.raises(ValueError, match="expected 3 scores"):
        camp.tell(req, [1, 0])
    with pytest.raises(ValueError, match=re.escape(
            f"1 NaN or infinite value(s), the first at position 1 (item "
            f"{str(req.items[1])!r})")):  # the name as text, not np.str_('...')
        camp.tell(req, [1, np.nan, 0])
    with pytest.raises(ValueError, match=re.escape(
            f"no score (None or NA) at 1 position(s), the first 2 (item "
            f"{str(req.items[2])!r})")):
        camp.tell(req, [1, 0, None])  # JSON null: was reported as NaN
    na = type("NAType", (), {})()  # what pandas' NA is, by type name
    with pytest.raises(ValueError, match=re.escape("no score (None or NA) at 1 position(s), "
                                                   "the first 0")):
        camp.tell(req, [na, 0, 1])  # a float conversion failed with "got list"
    with pytest.raises(ValueError, match=re.escape(
            f"1 masked (missing) value(s), the first at position 1 (item "
            f"{str(req.items[1])!r})")):  # np.asarray kept the hidden value as a score
        camp.tell(req, np.ma.masked_array([1.0, 1.0, 0.0], mask=[False, True, False]))
    with pytest.raises(ValueError, match=re.escape(
            f"must lie in [0, 1]; 1 do not, the first at position 1 (item "
            f"{str(req.items[1])!r}) is 2.0 (percent? divide by 100 first)")):
        camp.tell(req, [1, 2, 0])
    with pytest.raises(ValueError, match=r"at position 1 \(item '[^']+'\) is -1.0$"):
        camp.tell(req, [1, -1, 0])  # no percent hint for a negative score
    with pytest.raises(ValueError, match=r"is 1.0000001 \(rounding\? clip the scores"):
        camp.tell(req, [1, 1.0000001, 0])  # was shown as "got [0, 1] (percent? ...)"
    with pytest.raises(TypeError, match="expected numbers, got text such as '1'"):
        camp.tell(req, ["1", 1, 0])  # was filed as 1.0
    with pytest.raises(TypeError, match="got text such as 'x'"):
        camp.tell(req, dict(zip(req.items.tolist(), [1, "x", 0])))
    other = CampaignRequest(req.model, req.arm, req.items, req.index[::-1], req.step)
    with pytest.raises(ValueError, match="not the pending request"):
        camp.tell(other, [1, 0, 0])
    changed = camp.ask()
    changed.index.sort()  # a user's copy: the campaign keeps its own
    changed.index[0] = (changed.index[0] + 1) % 90
    with pytest.raises(ValueError, match="not the pending request"):
        camp.tell(changed, [1, 0, 0])
    renamed = camp.ask()  # the items are the user's copy too (were read-only)
    renamed.items[0] = renamed.items[1]
    assert camp.ask().items[0] == req.items[0] != renamed.items[0]
    with pytest.raises(ValueError, match="not the pending request"):
        camp.tell(renamed, [1, 0, 0])
    with pytest.raises(ValueError, match="mapping must cover exactly"):
        camp.tell(req, {req.items[0]: 1.0, req.items[1]: 0.0})
    with pytest.raises(ValueError, match="mapping must cover exactly"):
        camp.tell(req, {0: 1.0, 1: 0.0, 2: 1.0})  # not item names: a ValueError, no KeyError
    assert camp.calls == 0  # nothing changed by the refused answers
    camp.tell(req, [1, 0, 1])
    assert camp.calls == 3
    with pytest.raises(ValueError, match="request: step 0 was already answered; ask"):
        camp.tell(req, [1, 0, 1])  # answered once only
    camp.ask()
    with pytest.raises(ValueError, match="step 0 was already answered; the pending "
                                         "request is step 1"):
        camp.tell(req, [1, 0, 1])
    # a request of step 0 that this campaign did not ask (another campaign's): not
    # "already answered"
    alien = CampaignRequest(req.model, req.arm, req.items, (req.index + 1) % 90, 0)
    with pytest.raises(ValueError, match="not the pending request"):
        camp.tell(alien, [1, 0, 1])
    done = IdentificationCampaign(cands.models[:2], hist, policy="ucbe", budget=2, seed=0)
    first = done.ask()
    done.tell(first, [1] * len(first.items))
    done.tell(done.ask(), [1] * len(first.items))
    assert done.ask() is None
    with pytest.raises(ValueError, match=r"request: the campaign is done \(budget\); there "
                                         "is no request to answer"):
        done.tell(first, [1])


def test_bad_settings_are_named(problem):
    hist, cands, lr = problem
    names = cands.models.tolist()
    with pytest.raises(ValueError, match="repeated model"):
        IdentificationCampaign([names[0], names[0], names[1]], hist, factors=lr)
    with pytest.raises(TypeError, match="one string"):
        IdentificationCampaign("gpt", hist, factors=lr)
    with pytest.raises(ValueError, match="at least 2 model names"):
        IdentificationCampaign(names[:1], hist, factors=lr)
    with pytest.raises(ValueError, match="already have scores in history"):
        IdentificationCampaign([hist.models[0], names[0]], hist, factors=lr)
    with pytest.raises(ValueError, match=r"budget: expected an integer in \[1, 360\]"):
        IdentificationCampaign(names, hist, budget=361, factors=lr)
    with pytest.raises(ValueError, match="batch_size"):
        IdentificationCampaign(names, hist, batch_size=0, factors=lr)
    with pytest.raises(ValueError, match="history: policy 'pulse_ucb' predicts"):
        IdentificationCampaign(names, items=hist.items)
    with pytest.raises(ValueError, match="items: give"):
        IdentificationCampaign(names, policy="ucbe")
    with pytest.raises(ValueError, match="items: differ"):
        IdentificationCampaign(names, hist, items=hist.items[::-1], factors=lr)
    # factors fitted on the items in another order, or on other items: each item got
    # another item's factor (only their number was compared)
    with pytest.raises(ValueError, match="factors: fitted on the same items in another order"):
        IdentificationCampaign(names, items=hist.items[::-1], factors=lr)
    with pytest.raises(ValueError, match="factors: fitted on the same items in another order"):
        IdentificationCampaign(names, hist.take(items=np.arange(hist.n_items)[::-1]),
                               factors=lr)
    with pytest.raises(ValueError, match="factors: fitted on other items"):
        IdentificationCampaign(names, items=[f"q{i}" for i in range(hist.n_items)], factors=lr)
    with pytest.raises(ValueError, match="alpha"):
        IdentificationCampaign(names, hist, alpha=1.5, factors=lr)
    with pytest.raises(ValueError, match="policy"):
        IdentificationCampaign(names, hist, policy="thompson")
    with pytest.raises(TypeError, match="history: expected a ScoreMatrix, a pandas DataFrame"):
        IdentificationCampaign(names, {"m": hist.scores})
    # an array history names no model (history_i, never a candidate's name); its columns
    # take the names in items
    arr = IdentificationCampaign(["model_0", "model_1"], hist.scores, items=hist.items,
                                 factors=lr)
    assert arr.items.tolist() == hist.items.tolist()
    with pytest.raises(TypeError, match="synchronized: expected True or False"):
        IdentificationCampaign(names, hist, synchronized="no", factors=lr)
    with pytest.raises(ValueError, match=r"rank: expected an integer in \[1, 1000000\]"):
        IdentificationCampaign(names, hist, rank=0)
    # a 2-D array of names was taken as one name per row ("['a' 'b']")
    with pytest.raises(ValueError, match=r"candidates: expected a flat sequence of names, "
                       r"got nested sequences \(shape \(2, 2\)\)"):
        IdentificationCampaign(np.array([["a", "b"], ["c", "d"]]), hist, factors=lr)
    with pytest.raises(ValueError, match="items: expected a flat sequence of names"):
        IdentificationCampaign(names, items=[hist.items[:2], hist.items[2:4]], policy="ucbe")
    with pytest.raises(ValueError, match="factors: item factors of shape"):
        IdentificationCampaign(names, hist, factors=ItemFactors(lr.V[:5], lr.c[:5], lr.u_mean))
    with pytest.raises(ValueError, match="seed: keys of the default PRNG"):
        IdentificationCampaign(names, hist, factors=lr, seed=jax.random.key(0, impl="rbg"))


def test_history_rows_without_scores_and_a_learned_prior(problem):
    """History rows with no observed score are left out of the fits (the factorization
    refused the whole history, naming ``data``); ``lam0="learned"`` is ``learn_lam0`` on
    the history, learned once and kept as a number; the history's own errors say
    ``history``."""
    hist, cands, _ = problem
    names = cands.models.tolist()
    holes = np.asarray(hist.scores, np.float32).copy()
    holes[[0, 5]] = np.nan  # two history models without any answer
    gappy = jaxeval.ScoreMatrix(holes, models=hist.models, items=hist.items)
    a = IdentificationCampaign(names, gappy, fit_steps=50, budget=40)
    b = IdentificationCampaign(names, gappy.take(models=np.setdiff1d(
        np.arange(hist.n_models), [0, 5])), fit_steps=50, budget=40)
    for x, y in zip(a._factors, b._factors):
        np.testing.assert_array_equal(x, y)
    learned = IdentificationCampaign(names, hist, fit_steps=50, budget=40, lam0="learned")
    want = jaxeval.learn_lam0(hist, rank=8, seed=0, num_steps=50)
    assert learned.settings["lam0"] == pytest.approx(want) and 0 <= want <= 1
    keyed = IdentificationCampaign(names, hist, fit_steps=50, budget=40, lam0="learned",
                                   seed=jax.random.key(3))  # a key seed learns too,
    # with the int seed the campaign draws from that key
    from jaxeval._runner import default_impl_key

    lseed = int(jax.random.randint(jax.random.fold_in(default_impl_key(jax.random.key(3)),
                                                      0x1A30), (), 0, 2**31 - 1))
    want_k = jaxeval.learn_lam0(hist, rank=8, seed=lseed, num_steps=50)
    assert keyed.settings["lam0"] == pytest.approx(want_k) and 0 <= want_k <= 1
    with pytest.raises(ValueError, match="lam0='learned': history: learning"):
        IdentificationCampaign(names, hist.take(models=[0, 1, 2]), rank=1, fit_steps=20,
                               lam0="learned")
    with pytest.raises(ValueError, match="lam0: expected a number in \\[0, 1\\] or 'learned'"):
        IdentificationCampaign(names, hist, lam0="learn")
    with warnings.catch_warnings():  # refused outright, not also warned about
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="lam0='learned': policy 'ucbe' does not use"):
            IdentificationCampaign(names, hist, policy="ucbe", lam0="learned")
    cols = holes.copy()
    cols[:, 3] = np.nan  # an item nobody in the history answered
    with pytest.raises(ValueError, match="^history: 1 item columns have no observed cell"):
        IdentificationCampaign(names, jaxeval.ScoreMatrix(cols, models=hist.models,
                                                          items=hist.items), fit_steps=50)


def test_campaign_files_numeric_item_names_and_other_files(tmp_path):
    """Numeric item names answered by int keys; a saved file keeps the permissions
    a new file gets (not mkstemp's 0600); a missing folder is named before anything is
    written; hand-edited settings are checked on load; a plain .npy is refused as not
    a campaign."""
    import os

    items = [str(j) for j in range(6)]
    camp = IdentificationCampaign(["a", "b"], items=items, policy="ucbe", batch_size=2, seed=0)
    req = camp.ask()
    camp.tell(req, {int(k): 1.0 for k in req.items})  # int keys name the items "0".."5"
    assert camp.calls == 2
    req = camp.ask()
    with pytest.raises(ValueError, match="name the same item"):
        camp.tell(req, {int(req.items[0]): 1.0, req.items[0]: 0.0, req.items[1]: 0.0})
    umask = os.umask(0o022)
    try:
        p = camp.save(tmp_path / "c.npz")
        assert p.stat().st_mode & 0o777 == 0o644
        p.chmod(0o640)  # a replaced file keeps its mode
        camp.save(p)
        assert p.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)
    with pytest.raises(FileNotFoundError, match="path: the folder .*nodir"):
        camp.save(tmp_path / "nodir" / "c.npz")
    assert not (tmp_path / "nodir").exists()
    # a hand-edited file: the constructor's checks run on what load() reads
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    for edit, msg in (({"alpha": 5.0}, "alpha"), ({"budget": 10**6}, "budget")):
        meta = json.loads(str(arrays["meta"]))
        meta["settings"].update(edit)
        np.savez(tmp_path / "edited.npz", **{**arrays, "meta": np.asarray(json.dumps(meta))})
        with pytest.raises(ValueError, match=f"not a usable saved campaign .*{msg}"):
            IdentificationCampaign.load(tmp_path / "edited.npz")
    meta = json.loads(str(arrays["meta"]))
    meta["items"] = meta["items"][:-1]
    np.savez(tmp_path / "edited.npz", **{**arrays, "meta": np.asarray(json.dumps(meta))})
    with pytest.raises(ValueError, match=r"usable saved campaign \(budget: expected an "
                                         r"integer in \[1, 10\]"):
        IdentificationCampaign.load(tmp_path / "edited.npz")
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"not a saved jaxeval campaign \(a single array"):
        IdentificationCampaign.load(tmp_path / "x.npy")


def _leaf_position(state, field):
    """The position of ``LoopState.<field>`` among the state's leaves (as saved)."""
    marker = np.full(np.shape(getattr(state, field)), -12345.0)
    leaves = jax.tree.leaves(state._replace(**{field: marker}))
    return next(i for i, x in enumerate(leaves) if x is marker)


@pytest.mark.parametrize("policy, b, table", [("pulse_ucb", 2, True), ("sysrs", 3, True),
                                              ("ucbe", 2, False)])
def test_load_restores_the_saved_state_or_replays(problem, tmp_path, monkeypatch, policy, b,
                                                  table):
    """The saved kernel state is restored as is (the same state a replay reaches, and
    the same continuation); a state that disagrees with the answers, another JAX
    version or a file without a state are replayed instead."""
    hist, cands, lr = problem
    if not table:  # item orders regenerated from their keys, no order table
        monkeypatch.setattr(idn, "ORDER_TABLE_MAX", 0)
    kw = dict(policy=policy, batch_size=b, budget=150, seed=5, factors=_factors_for(policy, lr),
              stop_when_confident=False)
    part = IdentificationCampaign(cands.models, hist, **kw)
    _oracle(part, cands, stop_after=19)
    path = part.save(tmp_path / "camp.npz")

    replays = []
    real_ask = IdentificationCampaign.ask

    def counting_ask(self):
        replays.append(1)
        return real_ask(self)

    def load(p, **kw):
        replays.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(IdentificationCampaign, "ask", counting_ask)
            out = IdentificationCampaign.load(p, **kw)
        return out, len(replays)

    fast, asked_fast = load(path)
    slow, asked_slow = load(path, replay=True)
    assert asked_fast == 0 and asked_slow == 19  # restored vs replayed
    for x, y in zip(jax.tree.leaves(fast._state), jax.tree.leaves(slow._state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert fast.calls == slow.calls == part.calls
    saved_calls = part.calls
    ref = [np.asarray(x) for x in jax.tree.leaves(slow._state)]
    np.testing.assert_array_equal(fast.scores().mask, part.scores().mask)
    np.testing.assert_array_equal(fast.scores().scores, part.scores().scores)
    assert [a for a, _, _ in fast._log] == [a for a, _, _ in part._log]
    # both continue exactly as the uninterrupted campaign does
    _oracle(part, cands)
    for camp in (fast, slow):
        _oracle(camp, cands)
        a, c = part.status(), camp.status()
        np.testing.assert_array_equal(a.pulls, c.pulls)
        np.testing.assert_array_equal(a.estimate, c.estimate)
        np.testing.assert_array_equal(a.lower, c.lower)
        assert a.recommended == c.recommended and a.calls == c.calls
    # a restored campaign saves a state that restores again
    fast.save(tmp_path / "again.npz")
    again, asked = load(tmp_path / "again.npz")
    assert asked == 0 and again.calls == part.calls

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    n_leaves = len(jax.tree.leaves(part._state))

    def resealed(bad):
        """``bad`` with its content digest recomputed as ``save`` does, as a buggy writer
        would leave it: only the consistency checks against the answers can catch it
        then. (It left out the ``policy_done`` flag, so every resealed file failed the
        digest and the checks were never reached: a mutation review's finding.)"""
        done = np.asarray(meta["policy_done"] is True)
        content = _campaign._digest(*(bad[k] for k in ("arms", "lens", "index", "scores")),
                                    done, *(bad[f"state_{i}"] for i in range(n_leaves)))
        m = dict(meta, state=dict(meta["state"], content=content))
        return dict(bad, meta=np.asarray(json.dumps(m)))

    np.savez(tmp_path / "same.npz", **resealed(dict(arrays)))
    same, asked = load(tmp_path / "same.npz")  # the reseal itself is right: restored
    assert asked == 0 and same.calls == saved_calls

    tampered = []
    for field, change in (("sum_s", lambda x: x + 0.5), ("calls", lambda x: x + 1),
                          ("sampler", None), ("thr_key", None)):
        bad = dict(arrays)
        if field in ("sampler", "thr_key"):  # another model's count; a last item's key
            i = _leaf_position(part._state.sampler, "count" if field == "sampler" else field)
            bad[f"state_{i}"] = np.roll(bad[f"state_{i}"], 1)
        else:
            i = _leaf_position(part._state, field)
            bad[f"state_{i}"] = change(bad[f"state_{i}"])
        tampered.append(bad)  # caught by the digest
        if field != "thr_key" or part._table is None or part._table.keys is not None:
            # and by the checks (a last item's key only where the order table keeps the
            # keys: policies with predictions; elsewhere only the digest covers it)
            tampered.append(resealed(bad))
    est = _leaf_position(part._state, "estimate")  # not checked against the answers
    tampered.append(dict(arrays, **{f"state_{est}": arrays[f"state_{est}"] + 0.1}))
    scores = arrays["scores"].copy()
    scores[-1] = 1.0 - scores[-1]  # the last answer edited after the save (so the
    tampered.append(dict(arrays, scores=scores))  # replay still asks every request)
    other = dict(arrays, meta=np.asarray(json.dumps(dict(meta, jax_version="0.0.1"))))
    layout = dict(arrays, meta=np.asarray(json.dumps(
        dict(meta, state=dict(meta["state"], version=meta["state"]["version"] + 1)))))
    missing = {k: v for k, v in arrays.items() if k != "state_7"}
    for j, bad in enumerate(tampered + [other, layout, missing]):
        np.savez(tmp_path / f"bad{j}.npz", **bad)
        camp, asked = load(tmp_path / f"bad{j}.npz")
        assert asked == 19, j  # replayed, not restored
        assert camp.calls == saved_calls
        if bad["scores"] is arrays["scores"]:  # the replay rebuilds the saved state
            for x, y in zip(jax.tree.leaves(camp._state), ref):
                np.testing.assert_array_equal(np.asarray(x), y)
        else:  # the replay took the edited answer
            cell = int(arrays["arms"][-1]), int(arrays["index"][-1])
            assert camp.scores().scores[cell] == 1.0 - arrays["scores"][-1]
    # edited inputs (settings, seed key, item factors) or float-typed answers: not
    # restored; the replay then reproduces the campaign or refuses where it diverges
    key = arrays["key"].copy()
    key[-1] ^= 1
    inputs = [dict(arrays, meta=np.asarray(json.dumps(
                  dict(meta, settings=dict(meta["settings"], a=3.0))))),
              dict(arrays, key=key), dict(arrays, V=arrays["V"] + 0.5),
              dict(arrays, arms=arrays["arms"].astype(np.float64))]
    for j, bad in enumerate(inputs):
        np.savez(tmp_path / f"inputs{j}.npz", **bad)
        try:
            camp, asked = load(tmp_path / f"inputs{j}.npz")
        except ValueError as e:
            assert "does not replay" in str(e), j
        else:
            assert asked == 19, j
    # a request's items swapped, digest resealed: not the model's draw order, so it is
    # replayed, and the replay refuses it
    swapped = dict(arrays, index=arrays["index"].copy())
    first = int(np.argmax(arrays["lens"] > 1))
    at = int(arrays["lens"][:first].sum())
    swapped["index"][at:at + 2] = swapped["index"][at:at + 2][::-1]
    np.savez(tmp_path / "swapped.npz", **resealed(swapped))
    with pytest.raises(ValueError, match=f"saved answer {first} of 19 does not replay"):
        IdentificationCampaign.load(tmp_path / "swapped.npz")
    # an unreadable state entry (bad CRC) costs the shortcut, not the file
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("state_5.npy")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw[start + info.compress_size - 1] ^= 0xFF
    (tmp_path / "crc.npz").write_bytes(bytes(raw))
    camp, asked = load(tmp_path / "crc.npz")
    assert asked == 19 and camp.calls == saved_calls
    with pytest.raises(TypeError, match="replay: expected True or False"):
        IdentificationCampaign.load(path, replay="yes")


def test_a_finished_policy_stays_finished_after_load(tmp_path, monkeypatch):
    """SySRs can end before its budget (its schedule has nothing left to pull): a saved
    and loaded campaign says so at once, restored (its saved state read, no request
    replayed) or replayed; and a campaign that does not fit factors takes the default
    rank on a benchmark of fewer than 8 items."""
    rng = np.random.default_rng(0)
    K, n = 3, 6
    truth = (rng.random((K, n)) < 0.5).astype(np.float32)
    camp = IdentificationCampaign([f"m{i}" for i in range(K)],
                                  items=[f"i{j}" for j in range(n)], policy="sysrs",
                                  budget=K * n, seed=3, stop_when_confident=False)
    while (req := camp.ask()) is not None:
        camp.tell(req, truth[req.arm, req.index])
    st = camp.status()
    assert st.done and st.reason == "policy" and st.calls < K * n
    path = camp.save(tmp_path / "done.npz")
    assert _load_counting(path, monkeypatch)[1] == 0
    for replay in (False, True):
        back = IdentificationCampaign.load(path, replay=replay)
        got = back.status()
        assert got.done and got.reason == "policy", replay
        assert got.recommended == st.recommended and got.calls == st.calls
        np.testing.assert_array_equal(got.pulls, st.pulls)
        assert back.ask() is None
    # a policy that fits factors on history: the rank is checked, naming the default
    hist = jaxeval.ScoreMatrix(rng.random((3 * K, n)).round(), items=[f"i{j}" for j in range(n)])
    with pytest.raises(ValueError, match=r"rank: the factorization fitted on history needs "
                       r"fewer factors than items \(6 items\), got rank=8 \(the default"):
        IdentificationCampaign(["a", "b"], hist, policy="pulse_ucb")
    # rank = n never fits either (r * (m + n) + n parameters > m * n cells): refused first
    with pytest.raises(ValueError, match=r"fewer factors than items \(6 items\), got rank=6"):
        IdentificationCampaign(["a", "b"], hist, policy="pulse_ucb", rank=6)
    # given factors carry their rank: the unused default was refused on 6 items
    lr = jaxeval.fit_factorization(hist, rank=2, rho=1.0, num_steps=20)
    camp = IdentificationCampaign(["a", "b"], items=hist.items, factors=lr)
    assert camp.ask() is not None


def test_a_series_of_scores_is_matched_by_item_name(problem):
    """A pandas Series indexed by item names (in any order) is matched like a dict; it
    was filed by position, putting paid answers on the wrong items."""
    pd = pytest.importorskip("pandas")
    hist, cands, _ = problem
    camp = IdentificationCampaign(cands.models[:2], hist, policy="ucbe", batch_size=4,
                                  budget=20, seed=0)
    req = camp.ask()
    want = np.array([0.1, 0.2, 0.3, 0.4])
    ser = pd.Series(want, index=req.items)[::-1]  # other order, same names
    other = next(m for m in camp.candidates if m != req.model)
    with pytest.raises(ValueError, match="not the pending request"):
        camp.tell(dataclasses.replace(req, model=other), want)  # edited to another model
    camp.tell(req, ser)
    got = camp.scores().scores[req.arm, req.index]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_one_row_or_one_column_table_of_scores_is_matched_by_item_name(problem):
    """A pandas DataFrame of one row (items as columns) or one column (items as the
    index) is matched by item name; it was refused as shape (4, 1). A table of more
    rows is refused by name, and nothing is changed."""
    pd = pytest.importorskip("pandas")
    hist, cands, _ = problem
    want = np.array([0.1, 0.2, 0.3, 0.4])
    for kind in ("row", "column", "two rows"):
        camp = IdentificationCampaign(cands.models[:2], hist, policy="ucbe", batch_size=4,
                                      budget=20, seed=0)
        req = camp.ask()
        names = list(req.items)
        if kind == "row":
            table = pd.DataFrame([want[::-1]], columns=names[::-1])
        elif kind == "column":
            table = pd.DataFrame({"score": want[::-1]}, index=names[::-1])
        else:
            table = pd.DataFrame([want, want], columns=names)
            with pytest.raises(ValueError, match=r"scores: a table of shape \(2, 4\)"):
                camp.tell(req, table)
            assert camp.calls == 0 and camp.ask() == req  # still pending, unchanged
            continue
        camp.tell(req, table)
        np.testing.assert_allclose(camp.scores().scores[req.arm, req.index], want,
                                   rtol=1e-6)


def test_status_of_naive_ranks_by_its_own_estimate_and_sysrs_ends_with_its_last_answer(
        problem, tmp_path):
    """naive: the recommended model is the top of status().estimate (its pooled
    estimate). SySRs: right after the answer that completes its schedule status() is
    done with reason "policy", and the file saved then says so too."""
    hist, cands, _ = problem
    camp = IdentificationCampaign(cands.models, hist, policy="naive", batch_size=3,
                                  budget=60, seed=1, stop_when_confident=False)
    while (req := camp.ask()) is not None:
        camp.tell(req, cands.take(models=[req.model], items=req.items).scores[0])
        st = camp.status()
        assert st.recommended == st.models[int(np.argmax(st.estimate))]
    # near K n the survivor cannot take the whole rest (at most n items): the schedule
    # ends before the budget
    camp = IdentificationCampaign(cands.models, hist, policy="sysrs", batch_size=4,
                                  budget=330, seed=0, stop_when_confident=False)
    path = tmp_path / "s.npz"
    while (req := camp.ask()) is not None:
        camp.tell(req, cands.take(models=[req.model], items=req.items).scores[0])
        camp.save(path)
        st = camp.status()
        if st.done:
            break
    assert st.done and st.reason == "policy" and camp.ask() is None
    again = IdentificationCampaign.load(path)
    assert again.status().done and again.status().reason == "policy"
    assert again.ask() is None


def test_save_never_deletes_answers_it_does_not_hold(problem, tmp_path):
    """Saving after every answer and saving a loaded campaign back are fine; a new
    campaign saved over a file holding answers, or a stale copy saved over a file told
    more since, is refused naming path (it deleted the paid answers); overwrite=True
    replaces the file on purpose."""
    hist, cands, lr = problem
    names = cands.models.tolist()
    p = tmp_path / "c.npz"
    camp = IdentificationCampaign(names, hist, factors=lr, budget=60, batch_size=4)
    for _ in range(3):
        _oracle(camp, cands, stop_after=1)
        camp.save(p)  # after every answer
    stale = IdentificationCampaign.load(p)
    live = IdentificationCampaign.load(p)
    _oracle(live, cands, stop_after=2)
    live.save(p)
    assert IdentificationCampaign.saved_scores(p).mask.sum() == 5 * 4
    with pytest.raises(ValueError, match=r"path: .*c\.npz holds 5 answers, 2 more than this"):
        stale.save(p)
    _oracle(stale, cands, stop_after=2)  # the same answers again: a prefix, fine
    stale.save(p)
    fresh = IdentificationCampaign(names, hist, factors=lr, budget=60, batch_size=4)
    with pytest.raises(ValueError, match="holds 5 answers, 5 more than this campaign has"):
        fresh.save(p)
    _oracle(fresh, cands, stop_after=5)  # the same five answers: a prefix, but edit one
    fresh._log[0] = (fresh._log[0][0], fresh._log[0][1], 1.0 - fresh._log[0][2])
    with pytest.raises(ValueError, match="other answers than this campaign's"):
        fresh.save(p)
    other = IdentificationCampaign(names[::-1], hist, factors=lr, budget=60, batch_size=4)
    with pytest.raises(ValueError, match=r"another campaign's \(other candidates or items\)"):
        other.save(p)
    np.savez(tmp_path / "x.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="exists and is not a readable saved campaign"):
        other.save(tmp_path / "x.npz")
    with pytest.raises(TypeError, match="overwrite: expected a bool"):
        other.save(p, overwrite="yes")
    other.save(p, overwrite=True)
    assert IdentificationCampaign.saved_scores(p).mask.sum() == 0
    assert IdentificationCampaign.load(p).candidates.tolist() == names[::-1]


def test_damaged_files_and_unordered_or_ignored_arguments(problem, tmp_path):
    """A damaged saved score: load(strict=False) keeps the answers before it (strict
    raised either way), saved_scores keeps every finite answer; answers naming models or
    items outside the campaign and a meta entry that is not a mapping are refused naming
    the file; sets for candidates / items (no order) and a non-bool strict are refused
    by name."""
    hist, cands, lr = problem
    names = cands.models.tolist()
    camp = IdentificationCampaign(names, hist, factors=lr, budget=60, batch_size=4)
    _oracle(camp, cands, stop_after=3)
    good = camp.save(tmp_path / "good.npz")
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}

    def damaged(name, **changes):
        p = tmp_path / name
        np.savez(p, **{**arrays, **changes})
        return p

    nan = arrays["scores"].copy()
    nan[5] = np.nan  # in the second answer
    p = damaged("nan.npz", scores=nan)
    with pytest.raises(ValueError, match=r"saved answer 1 is refused on replay"):
        IdentificationCampaign.load(p, replay=True)
    with pytest.warns(UserWarning, match="continuing after 1 answers"):
        kept = IdentificationCampaign.load(p, strict=False, replay=True)
    assert kept.calls == 4
    with pytest.warns(UserWarning, match="1 saved scores are not finite"):
        told = IdentificationCampaign.saved_scores(p)
    assert told.mask.sum() == 11
    arms = arrays["arms"].copy()
    arms[0] = -1
    with pytest.raises(ValueError, match=r"bad\.npz: a damaged campaign file: answers name"):
        IdentificationCampaign.saved_scores(damaged("bad.npz", arms=arms))
    idx = arrays["index"].copy()
    idx[0] = 999
    with pytest.raises(ValueError, match="outside its 4 candidates and 90 items"):
        IdentificationCampaign.saved_scores(damaged("idx.npz", index=idx))
    with pytest.raises(ValueError, match=r"meta\.npz: not a saved jaxeval campaign \(its meta"):
        IdentificationCampaign.load(damaged("meta.npz", meta=np.asarray("[1, 2]")))
    with pytest.raises(TypeError, match="strict: expected True or False"):
        IdentificationCampaign.load(good, strict="False")
    with pytest.raises(TypeError, match="candidates: expected an ordered sequence"):
        IdentificationCampaign(set(names), hist, factors=lr)
    with pytest.raises(TypeError, match="items: expected an ordered sequence"):
        IdentificationCampaign(names, items={"q1", "q2"}, policy="ucbe")


def test_a_separated_model_is_never_requested(problem):
    """``skip_separated`` (on by default): before every request, the requested model's
    upper bound is not below the leader's lower bound plus eps (the stopping rule's
    test); with it off the same campaign does request separated models, and needs
    more calls to its confident stop."""
    hist, cands, lr = problem
    kw = dict(batch_size=4, seed=0, factors=lr, cs_kinds=("eb",))
    camp = IdentificationCampaign(cands.models, hist, **kw)
    assert camp.settings["skip_separated"] is True
    off = IdentificationCampaign(cands.models, hist, skip_separated=False, **kw)
    assert "skip_separated" not in off.settings  # as a file saved before it existed

    def requests_of_separated(c):
        n = 0
        while True:
            st = c.status()
            req = c.ask()
            if req is None:
                return n, st
            lead = list(st.models).index(st.recommended)
            sep = st.upper < st.lower[lead] + c.settings["eps"]
            sep[lead] = False
            n += bool(sep[req.arm])
            c.tell(req, cands.take(models=[req.model], items=req.items).scores[0])

    n_on, st_on = requests_of_separated(camp)
    n_off, st_off = requests_of_separated(off)
    assert n_on == 0 and n_off > 0
    assert st_on.reason == st_off.reason == "confident"
    assert st_on.calls < st_off.calls
    assert st_on.recommended == st_off.recommended


def test_skip_separated_defaults_saves_and_replays(problem, tmp_path):
    hist, cands, lr = problem
    kw = dict(batch_size=4, seed=0, factors=lr, budget=120)
    sr = dict(kw, factors=None, fit_steps=500)
    assert "skip_separated" not in IdentificationCampaign(cands.models, hist, policy="sysrs",
                                                          **sr).settings  # off for SySRs
    with pytest.raises(ValueError, match="skip_separated: needs"):
        IdentificationCampaign(cands.models, hist, policy="sysrs", skip_separated=True, **sr)
    with pytest.raises(TypeError, match="skip_separated: expected True or False"):
        IdentificationCampaign(cands.models, hist, skip_separated="yes", **kw)
    camp = IdentificationCampaign(cands.models, hist, **kw)
    _oracle(camp, cands, stop_after=12)
    path = camp.save(tmp_path / "c.npz")
    for replay in (False, True):
        back = IdentificationCampaign.load(path, replay=replay)
        assert back.settings["skip_separated"] is True and back._config.skip_separated
        assert back.ask().index.tolist() == camp.ask().index.tolist()
    # a fixed budget (no confident stop) is spent whole: the skip is off by default there
    assert "skip_separated" not in IdentificationCampaign(
        cands.models, hist, stop_when_confident=False, **kw).settings
    # a file without the setting (saved before it existed) loads with it off
    off = IdentificationCampaign(cands.models, hist, skip_separated=False, **kw)
    _oracle(off, cands, stop_after=12)
    back = IdentificationCampaign.load(off.save(tmp_path / "off.npz"))
    assert not back._config.skip_separated
    assert back.ask().index.tolist() == off.ask().index.tolist()


def test_statuses_and_requests_compare_with_eq(problem, tmp_path):
    """``==`` compares the array fields whole (it raised NumPy's ambiguous-truth error)."""
    hist, cands, lr = problem
    camp = IdentificationCampaign(cands.models, hist, batch_size=4, seed=0, factors=lr,
                                  budget=60)
    _oracle(camp, cands, stop_after=5)
    back = IdentificationCampaign.load(camp.save(tmp_path / "c.npz"))
    assert back.status() == camp.status() and not back.status() != camp.status()
    assert back.ask() == camp.ask()
    req = camp.ask()
    camp.tell(req, cands.take(models=[req.model], items=req.items).scores[0])
    assert back.status() != camp.status()
    assert back.ask() != camp.ask()  # the next request is another step
    assert camp.status() != "status"
    with pytest.raises(TypeError, match="unhashable"):
        hash(camp.status())


def test_a_fixed_budget_campaign_spends_its_budget():
    """Without the confident stop the skip is off by default, so the budget is spent
    whole (with it on, the campaign ends once every model left is separated)."""
    rng = np.random.default_rng(0)
    n = 200
    S = np.stack([(rng.random(n) < p).astype(np.float32) for p in (0.85, 0.4, 0.35, 0.3)])
    cands = jaxeval.ScoreMatrix(S, models=list("abcd"), items=[f"q{i}" for i in range(n)])
    out = {}
    for skip in (None, True):
        camp = IdentificationCampaign(cands.models, items=cands.items, policy="ucbe",
                                      batch_size=5, budget=600, stop_when_confident=False,
                                      skip_separated=skip)
        _oracle(camp, cands)
        out[skip] = camp.status()
    assert (out[None].calls, out[None].reason) == (600, "budget")
    assert out[True].calls < 600 and out[True].reason == "policy"


def test_a_state_saved_on_another_platform_is_replayed(tmp_path, monkeypatch):
    """A kernel state saved under another JAX backend is not restored (its floats may
    round otherwise): the answers are replayed to the same campaign."""
    truth = _small_truth()
    camp = IdentificationCampaign(truth.models, items=truth.items, policy="ucbe",
                                  batch_size=2, budget=120, seed=5, stop_when_confident=False)
    _answer(camp, truth, 6)
    path = camp.save(tmp_path / "c.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    np.savez(tmp_path / "other.npz", **dict(arrays, meta=np.asarray(json.dumps(
        dict(meta, platform="not-" + meta["platform"])))))
    back, asked = _load_counting(tmp_path / "other.npz", monkeypatch)
    assert asked == 6 and back.calls == camp.calls
    np.testing.assert_array_equal(back.status().pulls, camp.status().pulls)


def test_status_reports_the_stop_kinds_interval():
    """With ``stop_kind`` other than the first of ``cs_kinds``, ``status()`` shows the
    bounds the stop rule uses, and ``confident`` agrees with them."""
    truth = _small_truth()
    camp = IdentificationCampaign(truth.models, items=truth.items, policy="ucbe",
                                  batch_size=3, budget=150, seed=0,
                                  cs_kinds=("eb", "hoeffding"), stop_kind="hoeffding")
    _answer(camp, truth, 15)
    st = camp.status()
    np.testing.assert_array_equal(st.lower, st.bounds["hoeffding"][0])
    np.testing.assert_array_equal(st.upper, st.bounds["hoeffding"][1])
    assert not np.array_equal(st.lower, st.bounds["eb"][0])
    lead = list(st.models).index(st.recommended)
    assert st.confident == bool(
        st.lower[lead] > np.delete(st.upper, lead).max() - camp.settings["eps"])


def _small_truth(K=4, n=60, seed=0):
    rng = np.random.default_rng(seed)
    acc = np.linspace(0.8, 0.4, K)
    s = (rng.random((K, n)) < acc[:, None]).astype(np.float32)
    return jaxeval.ScoreMatrix(s, models=[f"m{i}" for i in range(K)],
                               items=[f"q{j}" for j in range(n)])


def _answer(camp, truth, steps):
    for _ in range(steps):
        req = camp.ask()
        if req is None:
            break
        camp.tell(req, truth.take(models=[req.model], items=req.items).scores[0])


def _load_counting(path, monkeypatch):
    """``IdentificationCampaign.load(path)`` and how many requests its replay asked."""
    asks = []
    real = IdentificationCampaign.ask
    with monkeypatch.context() as mp:
        mp.setattr(IdentificationCampaign, "ask", lambda self: (asks.append(1), real(self))[1])
        camp = IdentificationCampaign.load(path)
    return camp, len(asks)
