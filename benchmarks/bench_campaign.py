"""What an :class:`jaxeval.IdentificationCampaign` costs per request, next to an LLM call.

A real campaign pays seconds (or dollars) per scored item; this measures what jaxeval
adds on top: the first request (compilation), the median and 90th percentile of the
later ``ask`` + ``tell`` pairs, ``save`` at the end, and ``load`` two ways side by side:
restoring the saved kernel state (the default) and ``replay=True`` (every answer run
through the kernel again; the only way before the state was saved), each the fastest
of three warm loads. Answers come from the known matrix (an oracle), so the work is a real
campaign's work. Candidates are ``K`` models held out of the history; the history fits
the item factors (their time is reported separately).

Usage (from the repository root):

    python benchmarks/bench_campaign.py --dataset oll2_ifeval --K 10 --requests 300 \\
        --out benchmarks/results/campaign_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from bench_args import prepare_outputs

import jaxeval
from jaxeval._policies import PREDICTION_POLICIES


def _run(hist, cands, lr, policy, b, requests, seed):
    t0 = time.perf_counter()
    camp = jaxeval.IdentificationCampaign(
        cands.models, hist, policy=policy, batch_size=b, seed=seed,
        factors=lr if policy in PREDICTION_POLICIES else None,
        stop_when_confident=False,
    )
    t_new = time.perf_counter() - t0
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        req = camp.ask()
        if req is None:
            break
        camp.tell(req, cands.take(models=[req.model], items=req.items).scores[0])
        times.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.npz"
        t0 = time.perf_counter()
        camp.save(path)
        t_save = time.perf_counter() - t0
        t_load, t_replay = [], []
        for _ in range(3):
            for replay, acc in ((False, t_load), (True, t_replay)):
                t0 = time.perf_counter()
                back = jaxeval.IdentificationCampaign.load(path, replay=replay)
                acc.append(time.perf_counter() - t0)
                if back.calls != camp.calls:
                    raise RuntimeError(f"load(replay={replay}) did not restore the campaign")
    t_load, t_replay = min(t_load), min(t_replay)
    later = np.asarray(times[1:]) * 1e3
    return {
        "policy": policy, "batch_size": b, "requests": len(times),
        "calls": int(camp.status().calls),
        "construct_s": t_new, "first_request_s": times[0],
        "later_median_ms": float(np.median(later)),
        "later_p90_ms": float(np.percentile(later, 90)),
        "save_s": t_save, "load_s": t_load, "load_replay_s": t_replay,
        "load_replay_ms_per_request": 1e3 * t_replay / len(times),
        "replay_over_restore": t_replay / t_load,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dataset", default="oll2_ifeval")
    ap.add_argument("--K", type=int, default=10, help="candidates (default 10)")
    ap.add_argument("--requests", type=int, default=300, help="requests per run")
    ap.add_argument("--policies", nargs="+", default=["ucbe", "pulse_ucb"])
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.requests < 2:
        ap.error("--requests: need at least 2 (the first one compiles)")

    sm = jaxeval.load(args.dataset).drop_duplicates()
    if not 2 <= args.K < sm.n_models:
        ap.error(f"--K: {args.dataset} has {sm.n_models} distinct models: K must lie in "
                 f"[2, {sm.n_models - 1}] (at least one stays history), got {args.K}")
    prepare_outputs(ap, args, ("out",))
    hist, cands = sm.split([sm.n_models - args.K], seed=args.seed)
    t0 = time.perf_counter()
    lr = jaxeval.fit_factorization(hist, seed=args.seed)
    t_fit = time.perf_counter() - t0
    print(f"{args.dataset}: {hist.n_models} history models, {cands.n_models} candidates, "
          f"{sm.n_items} items; factorization fit {t_fit:.1f} s", flush=True)
    rows = []
    for policy in args.policies:
        for b in args.batch_sizes:
            r = _run(hist, cands, lr, policy, b, args.requests, args.seed)
            rows.append(r)
            print(f"{policy:>10} b={b:<2}: first {r['first_request_s']:.2f} s, then "
                  f"{r['later_median_ms']:.2f} ms median / {r['later_p90_ms']:.2f} ms p90 "
                  f"per request; save {1e3 * r['save_s']:.0f} ms; load {r['load_s']:.3f} s "
                  f"(restored), {r['load_replay_s']:.3f} s (replay of {r['requests']} "
                  f"requests): {r['replay_over_restore']:.1f}x", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({
            "dataset": args.dataset, "K": args.K, "n_items": sm.n_items,
            "factorization_fit_s": t_fit, "rows": rows,
            "jax": jax.__version__, "jaxeval": getattr(jaxeval, "__version__", None),
            "machine": platform.platform(), "cpus": len(os.sched_getaffinity(0)),
            "note": "measured beside other work" if os.getloadavg()[0] > 1.5 else "idle",
        }, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
