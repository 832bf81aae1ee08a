"""Straightforward NumPy implementations of UCB-E and PULSE, one replicate at a time.

This is what a careful user would write without jaxeval: a Python loop over the
bandit's steps, NumPy arrays for one replicate, no vectorisation over replicates. It
implements the *same* algorithms as jaxeval's kernels (:mod:`jaxeval._identification`
with the ``"ucbe"`` and ``"pulse"`` policies of :mod:`jaxeval._policies`):

- UCB-E: index ``mean_O(S) + sqrt(a / N)``, unpulled arms first, ties to the lowest
  arm index, batch of ``b`` unseen items of the pulled arm, estimate = sample mean
  (0.5 before any pull), recommendation = argmax of the estimates.
- PULSE: predictions ``sigmoid(V u + c)`` from frozen item factors; per batch the
  predictable λ (clipped plug-in slope shrunk toward ``lam0``), one DR term per item
  (SPEC 2.3) with its known range, the empirical-Bernstein confidence sequence of
  SPEC 2.4 at ``alpha / K`` per arm centred on the arm's ranking estimate; then the
  arm's factor is refitted by safeguarded Newton steps (the same Armijo trial steps as
  :func:`jaxeval._factorization.refit_row`) and its difference estimate is
  recomputed. Index = estimate + ``scale`` x half-width of the interval (``pulse``), or
  estimate + ``sqrt(a / N)`` (``pulse_ucb``, with ``a`` given).

Both take explicit per-arm item orders (``orders[i]`` = the order arm ``i`` sees the
items in), so, given the orders jaxeval's sampler generates
(:func:`jaxeval._sampling.arm_order`), the decisions are the same; the budget grid is
handled the same way (batches are never cut at intermediate checkpoints: a checkpoint
records the state after the last whole batch that fits within its budget).

Example:
  >>> import numpy as np
  >>> rng = np.random.default_rng(0)
  >>> S = (rng.random((3, 50)) < [[0.3], [0.5], [0.8]]).astype(float)
  >>> orders = np.stack([rng.permutation(50) for _ in range(3)])
  >>> out = ucbe(S, orders, budgets=(30, 150), a=1.0)
  >>> out.pulls.sum(-1).tolist(), int(out.recommended[-1])
  ([30, 150], 2)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["RefResult", "pulse", "ucbe"]

# the trial steps of the kernel's online refit (jaxeval._factorization.ONLINE_LINE_SEARCH_STEPS)
_LINE_SEARCH_STEPS = np.array([1.0, 0.0])
_EPS = 1e-6  # floor on ranges (as in jaxeval._confseq)
_NUM_TOL = 1e-5  # float32 rounding margin on new bounds (as in jaxeval._confseq)
_PRIOR_VAR = 0.25


class RefResult(NamedTuple):
    """One replicate's records at each checkpoint (``C`` budgets, ``K`` arms).

    Attributes:
      recommended: int ``[C]`` argmax of the estimates.
      estimate: ``[C, K]`` ranking estimates.
      pulls: int ``[C, K]`` items evaluated per arm.
      lower, upper: ``[C, K]`` empirical-Bernstein bounds (PULSE; NaN for UCB-E).
      calls: int ``[C]`` LLM calls spent.
    """

    recommended: np.ndarray
    estimate: np.ndarray
    pulls: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    calls: np.ndarray


def _check(scores, orders, budgets):
    scores = np.asarray(scores)
    orders = np.asarray(orders)
    if scores.ndim != 2:
        raise ValueError(f"scores: expected a [K, n] array, got shape {scores.shape}")
    if orders.shape != scores.shape:
        raise ValueError(f"orders: expected shape {scores.shape}, got {orders.shape}")
    budgets = tuple(int(b) for b in budgets)
    if not budgets or list(budgets) != sorted(budgets) or budgets[0] < 1:
        raise ValueError(f"budgets: expected a sorted tuple of positive ints, got {budgets}")
    return scores, orders, budgets


# ------------------------------------------------------------------------------- UCB-E
def ucbe(scores, orders, budgets, *, a: float = 1.0, batch_size: int = 1) -> RefResult:
    """UCB-E (Zhou et al.) on one instance, a Python loop over steps.

    Args:
      scores: ``[K, n]`` true scores of the candidates.
      orders: ``[K, n]`` int, the item order of each arm.
      budgets: sorted checkpoint budgets in LLM calls.
      a: exploration constant.
      batch_size: items per pull.

    Returns:
      :class:`RefResult` (bounds are NaN).

    Example:
      >>> S = np.array([[0, 1, 0, 0], [1, 1, 1, 0]], float)
      >>> o = np.array([[0, 1, 2, 3], [3, 2, 1, 0]])
      >>> r = ucbe(S, o, budgets=(2, 8))
      >>> r.recommended.tolist(), r.estimate[-1].tolist()
      ([0, 1], [0.25, 0.75])
    """
    scores, orders, budgets = _check(scores, orders, budgets)
    K, n = scores.shape
    count = np.zeros(K, np.int64)
    sum_s = np.zeros(K)
    est = np.full(K, 0.5)
    C = len(budgets)
    rec = np.zeros(C, np.int64)
    est_rec = np.zeros((C, K))
    pulls_rec = np.zeros((C, K), np.int64)
    calls_rec = np.zeros(C, np.int64)
    calls, c = 0, 0
    while c < C:
        full = count >= n
        if full.all():
            break
        nf = np.maximum(count, 1)
        idx = np.where(count > 0, sum_s / nf + np.sqrt(a / nf), np.inf)
        idx[full] = -np.inf
        arm = int(np.argmax(idx))
        take = min(batch_size, budgets[-1] - calls, n - count[arm])
        while c < C and calls + take > budgets[c]:  # the batch would pass this checkpoint
            rec[c], est_rec[c], pulls_rec[c], calls_rec[c] = np.argmax(est), est, count, calls
            c += 1
        items = orders[arm, count[arm] : count[arm] + take]
        sum_s[arm] += scores[arm, items].sum()
        count[arm] += take
        est[arm] = sum_s[arm] / count[arm]
        calls += take
        while c < C and budgets[c] == calls:
            rec[c], est_rec[c], pulls_rec[c], calls_rec[c] = np.argmax(est), est, count, calls
            c += 1
    for j in range(c, C):  # every arm exhausted before the budget
        rec[j], est_rec[j], pulls_rec[j], calls_rec[j] = np.argmax(est), est, count, calls
    nan = np.full((C, K), np.nan)
    return RefResult(rec, est_rec, pulls_rec, nan, nan.copy(), calls_rec)


# ------------------------------------------------------------------------------- PULSE
def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _newton(u, u_mean, V_o, c_o, s_o, rho, num_newton):
    """Safeguarded Newton steps of the row's MAP problem on its observed items."""
    r = u.shape[0]
    eye = np.eye(r)
    for _ in range(num_newton):
        z0 = V_o @ u + c_o
        p = _sigmoid(z0)
        g = V_o.T @ (p - s_o) + 2.0 * rho * (u - u_mean)
        H = (V_o.T * (p * (1.0 - p))) @ V_o + 2.0 * rho * eye
        sc = max(np.trace(H) / r, 1.0)
        try:
            d = -np.linalg.solve(H + 1e-6 * sc * eye, g)
        except np.linalg.LinAlgError:
            d = -g / sc
        if not np.all(np.isfinite(d)):
            d = -g / sc
        z = z0[None, :] + _LINE_SEARCH_STEPS[:, None] * (V_o @ d)[None, :]
        bce = np.sum(np.logaddexp(0.0, z) - s_o[None, :] * z, axis=1)
        diff = (u - u_mean)[None, :] + _LINE_SEARCH_STEPS[:, None] * d[None, :]
        f = bce + rho * np.sum(diff * diff, axis=1)
        f = np.where(np.isfinite(f), f, np.inf)
        slack = 1e-6 * (abs(f[-1]) + 1.0)
        ok = f <= f[-1] + 1e-4 * _LINE_SEARCH_STEPS * (g @ d) + slack
        t = _LINE_SEARCH_STEPS[np.argmax(ok)]
        if t > 0:
            u = u + t * d
        else:  # no trial step passed: the majorization step -g / L, as the kernel
            L = 0.25 * np.sum(V_o * V_o) + 2.0 * rho
            u = u - g / max(L, np.finfo(np.float64).tiny)
    return u


def _psi_over_g2(g):
    if g < 1e-2:
        return 0.5 + g / 3.0 + g**2 / 4.0 + g**3 / 5.0
    return (-math.log1p(-g) - g) / g**2


class _EB:
    """Empirical-Bernstein confidence sequence of one arm (SPEC 2.4)."""

    def __init__(self):
        self.k = 0
        self.sum_z2 = 0.0
        self.b_lo = self.by_lo = self.pen_lo = 0.0
        self.b_hi = self.by_hi = self.pen_hi = 0.0
        self.lower, self.upper = 0.0, 1.0

    def update(self, y, lo, hi, m, alpha):
        log_term = math.log(2.0 / alpha)
        self.k += 1
        k = self.k
        w = max(hi - lo, _EPS)
        sigma2 = w * w * (_PRIOR_VAR + self.sum_z2) / k
        b = math.sqrt(2.0 * log_term / (sigma2 * k * math.log1p(k)))
        c_lo, c_hi = max(m - lo, _EPS), max(hi - m, _EPS)
        b_lo, b_hi = min(b, 0.5 / c_lo), min(b, 0.5 / c_hi)
        d2 = (y - m) ** 2
        self.b_lo += b_lo
        self.by_lo += b_lo * y
        self.pen_lo += _psi_over_g2(b_lo * c_lo) * b_lo**2 * d2
        self.b_hi += b_hi
        self.by_hi += b_hi * y
        self.pen_hi += _psi_over_g2(b_hi * c_hi) * b_hi**2 * d2
        lcb = (self.by_lo - log_term - self.pen_lo) / self.b_lo
        ucb = (self.by_hi + log_term + self.pen_hi) / self.b_hi
        self.lower = min(max(self.lower, max(lcb, lo) - _NUM_TOL, 0.0), 1.0)
        self.upper = max(min(self.upper, min(ucb, hi) + _NUM_TOL, 1.0), 0.0)
        self.sum_z2 += d2 / (w * w)


class _Lam:
    """Running moments of an arm's (score, prediction) pairs and the plug-in λ."""

    def __init__(self):
        self.k = 0
        self.ms = self.mp = self.csp = self.m2p = 0.0

    def add(self, s, p):
        self.k += 1
        dp, ds = p - self.mp, s - self.ms
        self.mp += dp / self.k
        self.ms += ds / self.k
        self.csp += ds * (p - self.mp)
        self.m2p += dp * (p - self.mp)

    def value(self, lam0, shrink, min_var=1e-6):
        if self.k == 0:
            return float(np.clip(lam0, 0.0, 1.0))
        lam_hat = lam0
        if self.m2p > min_var * self.k:
            lam_hat = min(max(self.csp / self.m2p, 0.0), 1.0)
        w = self.k / (self.k + shrink)
        return float(np.clip(w * lam_hat + (1.0 - w) * lam0, 0.0, 1.0))


def pulse(
    scores,
    orders,
    budgets,
    V,
    c,
    u_mean,
    *,
    alpha: float = 0.05,
    scale: float = 1.0,
    rho: float = 1.0,
    lam0: float = 1.0,
    shrink: float = 10.0,
    num_newton: int = 1,
    batch_size: int = 1,
    a: float | None = None,
) -> RefResult:
    """PULSE on one instance: DR terms, EB interval, online Newton refits; a Python loop.

    With ``a`` given the index is ``pulse_ucb``'s, ``estimate + sqrt(a / N)`` (the
    interval is still computed and recorded, as the kernel does), else ``pulse``'s.

    Args:
      scores: ``[K, n]`` true scores of the candidates.
      orders: ``[K, n]`` int, the item order of each arm.
      budgets: sorted checkpoint budgets in LLM calls.
      V, c, u_mean: frozen item factors ``[n, r]``, biases ``[n]`` and the prior centre.
      alpha: family-wise level (``alpha / K`` per arm).
      scale: exploration scale on the interval's half-width.
      rho: prior strength of the refit.
      lam0, shrink: λ prior and its pseudo-count.
      num_newton: Newton steps per refit.
      batch_size: items per pull.
      a: ``pulse_ucb``'s exploration constant (None: the ``pulse`` index).

    Returns:
      :class:`RefResult`.

    Example:
      >>> rng = np.random.default_rng(1)
      >>> V, c = rng.normal(size=(40, 2)), rng.normal(size=40)
      >>> S = (rng.random((3, 40)) < [[0.2], [0.5], [0.9]]).astype(float)
      >>> o = np.stack([rng.permutation(40) for _ in range(3)])
      >>> r = pulse(S, o, (20, 120), V, c, np.zeros(2))
      >>> r.pulls.sum(-1).tolist(), round(float(r.upper[-1, 2] - r.lower[-1, 2]), 4)
      ([20, 120], 0.0)
    """
    scores, orders, budgets = _check(scores, orders, budgets)
    V, c, u_mean = (np.asarray(x, np.float64) for x in (V, c, u_mean))
    K, n = scores.shape
    alpha_arm = alpha / K
    u = np.tile(u_mean, (K, 1))
    prior = _sigmoid(V @ u_mean + c)
    est = np.full(K, prior.mean())
    count = np.zeros(K, np.int64)
    sum_s = np.zeros(K)
    cs = [_EB() for _ in range(K)]
    lams = [_Lam() for _ in range(K)]
    C = len(budgets)
    rec = np.zeros(C, np.int64)
    est_rec, lo_rec, hi_rec = np.zeros((C, K)), np.zeros((C, K)), np.zeros((C, K))
    pulls_rec = np.zeros((C, K), np.int64)
    calls_rec = np.zeros(C, np.int64)

    def record(j):
        rec[j], est_rec[j], pulls_rec[j], calls_rec[j] = np.argmax(est), est, count, calls
        for i in range(K):
            done = count[i] >= n
            # a fully evaluated arm: its mean up to the kernel's rounding margin
            margin = _NUM_TOL + n * 2.0**-24 * abs(sum_s[i] / n)
            lo_rec[j, i] = max(sum_s[i] / n - margin, 0.0) if done else cs[i].lower
            hi_rec[j, i] = min(sum_s[i] / n + margin, 1.0) if done else cs[i].upper

    calls, cp = 0, 0
    while cp < C:
        full = count >= n
        if full.all():
            break
        if a is None:  # pulse: the interval's half-width
            hw = np.array([min(0.5 * (e.upper - e.lower), 1.0) for e in cs])
            idx = np.where(count > 0, est + scale * hw, np.inf)
        else:  # pulse_ucb
            idx = np.where(count > 0, est + np.sqrt(a / np.maximum(count, 1)), np.inf)
        idx[full] = -np.inf
        arm = int(np.argmax(idx))
        take = min(batch_size, budgets[-1] - calls, n - count[arm])
        while cp < C and calls + take > budgets[cp]:  # the batch would pass this checkpoint
            record(cp)
            cp += 1
        k0 = count[arm]
        seen, items = orders[arm, :k0], orders[arm, k0 : k0 + take]
        unseen = orders[arm, k0:]
        s_row = scores[arm]
        p_row = _sigmoid(V @ u[arm] + c)  # predictions frozen for the batch
        lam = lams[arm].value(lam0, shrink)
        p_u = p_row[unseen]
        sum_pu, max_pu, min_pu = p_u.sum(), p_u.max(), p_u.min()
        so = sum_s[arm]
        for t, j in enumerate(items):
            nu = n - k0 - t
            a_ = so + lam * sum_pu
            y = (a_ + nu * (s_row[j] - lam * p_row[j])) / n
            lo = (a_ - nu * lam * max_pu) / n
            hi = (a_ + nu * (1.0 - lam * min_pu)) / n
            cs[arm].update(y, lo, hi, min(max(est[arm], lo), hi), alpha_arm)
            lams[arm].add(s_row[j], p_row[j])
            so += s_row[j]
            sum_pu -= p_row[j]
        sum_s[arm] = so
        count[arm] += take
        calls += take
        obs = np.concatenate([seen, items])
        u[arm] = _newton(u[arm], u_mean, V[obs], c[obs], s_row[obs], rho, num_newton)
        p_new = _sigmoid(V @ u[arm] + c)
        lam_next = lams[arm].value(lam0, shrink)
        if count[arm] >= n:
            est[arm] = so / n
        else:
            est[arm] = lam_next * p_new.mean() + (so - lam_next * p_new[obs].sum()) / count[arm]
        while cp < C and budgets[cp] == calls:
            record(cp)
            cp += 1
    for j in range(cp, C):
        record(j)
    return RefResult(rec, est_rec, pulls_rec, lo_rec, hi_rec, calls_rec)
