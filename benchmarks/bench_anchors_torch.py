"""The SparseEval protocol in jaxeval (seeds vmapped) against a plain PyTorch loop.

Both run the same protocol on the same splits of the same dataset on this CPU:
k-means and random initial anchors (choice on validation models by an MLP), R
AIS/CIS swaps with a proxy MLP retrained at each step, and the final MLP with its
checkpoint chosen on validation models; MLP ``k -> 128 -> 64 -> 32 -> 1``, GELU,
dropout 0.1, sigmoid, MSE, Adam 5e-4, full batch. PyTorch loops over the seeds (the
straightforward port of the reference code); jaxeval runs all seeds in one jitted,
vmapped kernel. Reported: wall time of each, the ratio, with and without jaxeval's
compilation, and the test MAE of both (sanity: similar accuracy).

    pip install -e .[bench]          # torch==2.13.0 (CPU)
    python benchmarks/bench_anchors_torch.py --dataset oll2_musr --k 100 --seeds 10 \\
        --proxy-steps 200 --final-steps 1000 --init-steps 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import jaxeval
from jaxeval.anchors import Settings
from jaxeval.anchors._protocol import evaluate_protocol


class MLP(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(k, 128), torch.nn.GELU(), torch.nn.Dropout(0.1),
            torch.nn.Linear(128, 64), torch.nn.GELU(), torch.nn.Dropout(0.1),
            torch.nn.Linear(64, 32), torch.nn.GELU(), torch.nn.Dropout(0.1),
            torch.nn.Linear(32, 1), torch.nn.Sigmoid(),
        )

    def forward(self, x):
        return self.net(x)[:, 0]


def train(x, y, xv, yv, steps, eval_every, use_val=True):
    net = MLP(x.shape[1])
    opt = torch.optim.Adam(net.parameters(), lr=5e-4)
    best, best_state = float("inf"), None
    for t in range(steps):
        net.train()
        opt.zero_grad()
        loss = torch.mean((net(x) - y) ** 2)
        loss.backward()
        opt.step()
        if use_val and (t + 1) % eval_every == 0:
            net.eval()
            with torch.no_grad():
                v = float(torch.mean((net(xv) - yv) ** 2))
            if v < best:
                best = v
                best_state = {kk: vv.clone() for kk, vv in net.state_dict().items()}
    if use_val and best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    return net, best


def kmeans(s_tr, k, rng, iters=50):
    x = (2 * s_tr - 1).T
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    cent = x[rng.choice(x.shape[0], k, replace=False)]
    for _ in range(iters):
        lab = ((x[:, None, :] - cent[None]) ** 2).sum(-1).argmin(1)
        for c in range(k):
            if np.any(lab == c):
                cent[c] = x[lab == c].mean(0)
    d = ((x[:, None, :] - cent[None]) ** 2).sum(-1)
    taken, out = set(), []
    for c in range(k):
        for j in np.argsort(d[:, c]):
            if j not in taken:
                taken.add(j)
                out.append(j)
                break
    return np.array(out)


def torch_protocol(sp, k, seed, st: Settings):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    T = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)
    s_tr, y_tr = T(sp.train.scores), T(sp.train.true_score())
    s_va, y_va = T(sp.validation.scores), T(sp.validation.true_score())
    n = s_tr.shape[1]
    a_km = kmeans(sp.train.scores, k, rng)
    a_rd = rng.choice(n, k, replace=False)
    vals = [train(s_tr[:, a], y_tr, s_va[:, a], y_va, st.init_steps, st.eval_every)[1]
            for a in (a_km, a_rd)]
    anchors = (a_km if vals[0] <= vals[1] else a_rd).copy()
    for _ in range(st.num_swaps):
        net, _ = train(s_tr[:, anchors], y_tr, None, None, st.proxy_steps, st.eval_every,
                       use_val=False)
        x = s_tr[:, anchors].clone().requires_grad_(True)
        pred = net(x)
        loss = ((pred - y_tr) ** 2).sum()
        (g,) = torch.autograd.grad(loss, x)
        ais = g.abs().mean(0).numpy()
        e = (pred - y_tr).detach()
        cis = ((s_tr - 0.5).T @ e).abs().numpy()
        cis[anchors] = -np.inf
        anchors[int(np.argmin(ais))] = int(np.argmax(cis))
    net, _ = train(s_tr[:, anchors], y_tr, s_va[:, anchors], y_va, st.final_steps, st.eval_every)
    with torch.no_grad():
        pred = net(T(sp.test.scores)[:, anchors]).numpy()
    return 100 * np.mean(np.abs(pred - sp.test.true_score()))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="oll2_musr")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--proxy-steps", type=int, default=200)
    ap.add_argument("--final-steps", type=int, default=1000)
    ap.add_argument("--init-steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    st = Settings(proxy_steps=a.proxy_steps, final_steps=a.final_steps, init_steps=a.init_steps)
    sm = jaxeval.load(a.dataset).drop_duplicates()
    seeds = tuple(42 + r for r in range(a.seeds))

    t0 = time.perf_counter()
    r1 = evaluate_protocol(sm, a.k, ("sparseeval",), seeds, st)
    t_jax_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    r2 = evaluate_protocol(sm, a.k, ("sparseeval",), seeds, st)
    t_jax = time.perf_counter() - t0
    assert np.allclose(r1.mae_pp, r2.mae_pp)

    t0 = time.perf_counter()
    maes = [torch_protocol(sm.protocol_split(s), a.k, s, st) for s in seeds]
    t_torch = time.perf_counter() - t0

    print(f"SparseEval protocol, {a.dataset} k={a.k}, {a.seeds} seeds, steps "
          f"init/proxy/final = {a.init_steps}/{a.proxy_steps}/{a.final_steps}, "
          f"R = {st.num_swaps}, torch threads {torch.get_num_threads()}")
    print(f"  PyTorch loop over seeds : {t_torch:8.1f} s   test MAE {np.mean(maes):.2f} pp")
    print(f"  jaxeval (vmapped seeds) : {t_jax:8.1f} s   test MAE {r2.mae_pp.mean():.2f} pp "
          f"(first call incl. compile {t_jax_first:.1f} s)")
    print(f"  ratio torch / jaxeval   : {t_torch / t_jax:.2f}x  "
          f"(incl. compile {t_torch / t_jax_first:.2f}x)")


if __name__ == "__main__":
    main()
