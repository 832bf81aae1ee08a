"""The SparseEval protocol in jaxeval (seeds vmapped) against a plain PyTorch loop.

Both run the same protocol on the same splits of the same dataset on this CPU:
k-means and random initial anchors (choice on validation models by an MLP), R
AIS/CIS swaps with a proxy MLP retrained at each step, and the final MLP with its
checkpoint chosen on validation models; MLP ``k -> 128 -> 64 -> 32 -> 1``, GELU,
dropout 0.1, sigmoid, MSE, Adam 5e-4, full batch. PyTorch loops over the seeds (the
straightforward port of the reference code); jaxeval runs all seeds in one jitted,
vmapped kernel (``evaluate_protocol(..., vmap_seeds=True)``; its default loops over the
seeds, ~1.3x slower here, so that a seed's numbers do not depend on the others).
Reported: wall time and process CPU time (all threads) of each, the
ratios, with and without jaxeval's compilation, and the test MAE of both (sanity:
similar accuracy). On a shared machine the CPU-time ratio is the steadier figure:
a process with more runnable threads gets a larger share of a loaded CPU.

Runs alternate (jaxeval, then PyTorch) ``--rounds`` times after one jaxeval call
that includes compilation, so a change of machine load shows up as two different
ratios. The machine's load average is printed before, between and after.

    pip install -e .[bench]          # torch==2.13.0 (CPU)
    python benchmarks/bench_anchors_torch.py --dataset oll2_musr --k 100 --seeds 10 \\
        --init-steps 500 --proxy-steps 500 --final-steps 3000 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from bench_args import at_least_one

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
    """k-means on +-1 item vectors (L2-normalised over training models), nearest item each.

    Random distinct items as initial centroids, then Lloyd; distances by the expansion
    ``|x|^2 - 2 x.c + |c|^2`` (one matrix product per iteration).
    """
    x = (2 * s_tr - 1).T
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    cent = x[rng.choice(x.shape[0], k, replace=False)].copy()
    sq = (x**2).sum(1)

    def dist(c):
        return sq[:, None] - 2 * x @ c.T + (c**2).sum(1)[None, :]

    for _ in range(iters):
        lab = dist(cent).argmin(1)
        for c in range(k):
            if np.any(lab == c):
                cent[c] = x[lab == c].mean(0)
    d = dist(cent)
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


def _load():
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min) / {five:.2f} (5 min)"


def _jax_run(sm, k, seeds, st):
    """(wall s, process CPU s, per-seed test MAE) of jaxeval's vmapped protocol."""
    t0, c0 = time.perf_counter(), time.process_time()
    r = evaluate_protocol(sm, k, ("sparseeval",), seeds, st, vmap_seeds=True)
    return time.perf_counter() - t0, time.process_time() - c0, r.mae_pp[0]


def _torch_run(sm, k, seeds, st):
    """(wall s, process CPU s, per-seed test MAE) of the PyTorch loop over seeds."""
    t0, c0 = time.perf_counter(), time.process_time()
    maes = np.array([torch_protocol(sm.protocol_split(s), k, s, st) for s in seeds])
    return time.perf_counter() - t0, time.process_time() - c0, maes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="oll2_musr")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--proxy-steps", type=int, default=500)
    ap.add_argument("--final-steps", type=int, default=3000)
    ap.add_argument("--init-steps", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2,
                    help="alternate (jaxeval, PyTorch) this many times; one ratio per round")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    a = ap.parse_args(argv)
    at_least_one(ap, a, ("seeds", "rounds", "k"))
    if a.threads < 0:
        ap.error(f"--threads: must be at least 0 (0: torch's default), got {a.threads}")
    if a.threads:
        torch.set_num_threads(a.threads)
    st = Settings(proxy_steps=a.proxy_steps, final_steps=a.final_steps, init_steps=a.init_steps)
    sm = jaxeval.load(a.dataset).drop_duplicates()
    seeds = tuple(42 + r for r in range(a.seeds))
    print(f"jaxeval from {jaxeval.__file__}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {os.cpu_count()} CPUs")
    print(f"SparseEval protocol, {a.dataset} k={a.k} ({sm.n_models} models, {sm.n_items} "
          f"items), {a.seeds} seeds, steps init/proxy/final = {a.init_steps}/"
          f"{a.proxy_steps}/{a.final_steps}, R = {st.num_swaps}, eval every {st.eval_every}")
    print(f"load average before: {_load()}", flush=True)

    t_first, c_first, mae_first = _jax_run(sm, a.k, seeds, st)
    print(f"jaxeval first call (incl. compile): {t_first:.1f} s (CPU {c_first:.1f} s), test MAE "
          f"{mae_first.mean():.2f} pp; load {_load()}", flush=True)
    rows = []
    for rnd in range(a.rounds):
        t_jax, c_jax, mae_jax = _jax_run(sm, a.k, seeds, st)
        assert np.allclose(mae_jax, mae_first), "jaxeval is not deterministic across calls"
        print(f"round {rnd + 1}: jaxeval {t_jax:.1f} s (CPU {c_jax:.1f} s); load {_load()}",
              flush=True)
        t_torch, c_torch, mae_torch = _torch_run(sm, a.k, seeds, st)
        print(f"round {rnd + 1}: PyTorch {t_torch:.1f} s (CPU {c_torch:.1f} s), test MAE "
              f"{mae_torch.mean():.2f} pp; load {_load()}", flush=True)
        rows.append((t_jax, t_torch, mae_torch, c_jax, c_torch))

    print(f"\nload average after: {_load()}")
    print("\n| round | jaxeval wall (s) | PyTorch wall (s) | wall ratio | wall ratio incl. "
          "compile | jaxeval CPU (s) | PyTorch CPU (s) | CPU ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for rnd, (t_jax, t_torch, _, c_jax, c_torch) in enumerate(rows):
        print(f"| {rnd + 1} | {t_jax:.1f} | {t_torch:.1f} | {t_torch / t_jax:.2f}x | "
              f"{t_torch / t_first:.2f}x | {c_jax:.1f} | {c_torch:.1f} | "
              f"{c_torch / c_jax:.2f}x |")
    print(f"\njaxeval first call incl. compile: {t_first:.1f} s wall, {c_first:.1f} s CPU")
    print(f"test MAE (pp), mean ± sd over seeds: jaxeval {mae_first.mean():.2f} ± "
          f"{mae_first.std():.2f}; PyTorch " + ", ".join(
              f"round {i + 1} {r[2].mean():.2f} ± {r[2].std():.2f}" for i, r in enumerate(rows)))
    print("per-seed MAE jaxeval:", np.round(mae_first.astype(float), 2).tolist())
    for i, r in enumerate(rows):
        print(f"per-seed MAE PyTorch round {i + 1}:", np.round(r[2].astype(float), 2).tolist())


if __name__ == "__main__":
    main()
