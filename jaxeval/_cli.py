"""The ``jaxeval`` command line (also ``python -m jaxeval``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import NoReturn

import numpy as np

__all__ = ["main"]

DESCRIPTION = """\
jaxeval: cheap, statistically valid LLM evaluation in JAX.

Run Monte Carlo studies of best-model identification (PULSE, UCB-E, naive
pooling, SySRs, ...) and of accuracy-from-anchor-items (SparseEval and
baselines), chunk by chunk, resumable after any interruption, across every
local device, and across hosts.
"""

EPILOG = """\
examples:
  jaxeval datasets                          list the bundled Open LLM Leaderboard v2 data
  jaxeval main --out jaxeval-out            the default study: report and plots in jaxeval-out/
  jaxeval example identification > s.json   a study definition to edit
  jaxeval run s.json --out runs/s           run it (Ctrl-C or kill -9 at any time ...)
  jaxeval resume runs/s                     ... and continue where it stopped
  jaxeval extend runs/s --to 2000           more replicates: only the new ones are computed
  jaxeval summary runs/s                    print the summary table (and write summary.json)
  jaxeval plot runs/s                       write the figures to runs/s/plots/

a real identification campaign (your harness scores the requested items):
  jaxeval campaign new c.npz --history oll2_ifeval --candidates m1 m2 m3 --budget 1500
  jaxeval campaign ask c.npz               the next model and items (JSON)
  jaxeval campaign tell c.npz answers.json --step 0   the scores of request 0
  jaxeval campaign status c.npz            estimates, intervals, the leader

accuracy from a few anchor items (fit once on models you have, then per new model):
  jaxeval anchors fit oll2_musr --k 30 --out musr.npz > anchors.txt   the items to run
  jaxeval anchors predict musr.npz scores.json     estimate and 90% interval (JSON)

a cluster array job (independent jobs over replicate ranges, then one merge):
  jaxeval run s.json --range 0:5000     --out runs/part0
  jaxeval run s.json --range 5000:10000 --out runs/part1
  jaxeval merge runs/part0 runs/part1 --out runs/s && jaxeval plot runs/s
  (real data with prediction policies: a folder keeps its factorization in problem.npz,
  whose last bits depend on the machine; on unlike nodes run part0 first, then the
  others with --problem-from runs/part0, or merge refuses the mix)

one program over several hosts (jax.distributed; the folder on a shared disk):
  jaxeval run s.json --out /shared/s --coordinator host0:1234 --num-processes 2 --process-id 0
  jaxeval run s.json --out /shared/s --coordinator host0:1234 --num-processes 2 --process-id 1

repeated jobs compile faster with the persistent compilation cache:
  jaxeval --compilation-cache ~/.cache/jaxeval-xla run s.json --out runs/s
  (or set JAXEVAL_COMPILATION_CACHE=~/.cache/jaxeval-xla)

Results depend only on the study definition: replicate i always uses
fold_in(key(seed), i), so chunk size, device count, process count and resume
points never change a number.

Refused settings and data print one line ("jaxeval run: error: ...", exit code 2);
JAXEVAL_DEBUG=1 shows the full traceback instead.
"""


class _Formatter(argparse.HelpFormatter):
    """Wraps one-line descriptions to the terminal; text with line breaks of its own
    (the examples, the command list) is printed as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text.strip("\n"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _parser() -> argparse.ArgumentParser:
    fmt = _Formatter
    p = argparse.ArgumentParser(
        prog="jaxeval", description=DESCRIPTION, epilog=EPILOG, formatter_class=fmt
    )
    p.add_argument(
        "--compilation-cache",
        metavar="DIR",
        default=os.environ.get("JAXEVAL_COMPILATION_CACHE"),
        help="persistent XLA compilation cache folder (default: $JAXEVAL_COMPILATION_CACHE; "
        "off when unset)",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str, example: str, parent=None,
            description: str | None = None) -> argparse.ArgumentParser:
        """A command (or, with ``parent``, one of its actions) whose help ends with an
        example."""
        return (parent or sub).add_parser(
            name, help=help, description=description or help,
            epilog=f"example:\n  {example}", formatter_class=fmt,
        )

    r = add("run", "run a study definition (JSON) into a folder", "jaxeval run s.json --out runs/s")
    r.add_argument("config", help="study definition (JSON); see `jaxeval example`")
    r.add_argument("--out", required=True, help="output folder (new, empty, or this study's)")
    r.add_argument("--range", metavar="LO:HI", help="only replicates LO..HI-1 (an array job)")
    r.add_argument("--problem-from", metavar="DIR",
                   help="use the factorization saved in another folder of this study (range "
                        "jobs on unlike machines: all take the first job's fit)")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.add_argument("--no-report", action="store_true", help="skip summary.json and plots")
    r.add_argument("--coordinator", metavar="HOST:PORT", help="jax.distributed coordinator")
    r.add_argument("--num-processes", type=int, help="jax.distributed process count")
    r.add_argument("--process-id", type=int, help="this process's id (0 writes the files)")

    s = add("resume", "continue an interrupted study", "jaxeval resume runs/s")
    s.add_argument("dir", help="the study folder")
    s.add_argument("--quiet", action="store_true", help="no progress lines")
    s.add_argument("--no-report", action="store_true", help="skip summary.json and plots")

    e = add("extend", "give a study more replicates (or seeds) and compute the new ones",
            "jaxeval extend runs/s --to 2000",
            description="give the study in a folder more units (replicates, or an anchor "
            "study's seeds) and compute only the new ones: the finished chunks are kept, "
            "and the folder ends as the larger study run from the start, bit for bit")
    e.add_argument("dir", help="the study folder (the whole study: merge range jobs first)")
    e.add_argument("--to", type=int, required=True, metavar="N",
                   help="the new number of replicates (n_replicates; an anchor study's "
                   "n_seeds), more than the folder's")
    e.add_argument("--no-run", action="store_true",
                   help="only rewrite the folder's definition, computing nothing (for range "
                   "jobs of the larger study.json, merged with the folder afterwards)")
    e.add_argument("--quiet", action="store_true", help="no progress lines")
    e.add_argument("--no-report", action="store_true", help="skip summary.json and plots")

    m = add(
        "merge",
        "join folders of one study computed over disjoint replicate ranges",
        "jaxeval merge runs/part0 runs/part1 --out runs/s",
    )
    m.add_argument("dirs", nargs="+", help="the study folders")
    m.add_argument("--out", required=True, help="a new folder for the merged study")

    sm = add("summary", "print a finished study's summary", "jaxeval summary runs/s")
    sm.add_argument("dir", help="the study folder")
    sm.add_argument("--json", action="store_true", help="print the JSON summary")

    pl = add("plot", "draw a finished study's figures", "jaxeval plot runs/s")
    pl.add_argument("dir", help="the study folder")
    pl.add_argument("--out", help="folder for the PNGs (default DIR/plots)")

    st = add("status", "how far a study has got", "jaxeval status runs/s")
    st.add_argument("dir", help="the study folder")
    st.add_argument("--verify", action="store_true",
                    help="also read every chunk file and check its checksum (corrupt "
                    "files are listed and not counted)")

    mj = add(
        "main",
        "the default study on the bundled data, with report and plots",
        "jaxeval main --out jaxeval-out",
    )
    mj.add_argument("--out", default="jaxeval-out", help="output folder (default jaxeval-out)")
    mj.add_argument("--quick", action="store_true", help="fewer replicates and seeds")
    mj.add_argument("--quiet", action="store_true", help="no progress lines")

    d = add("datasets", "list the bundled datasets with a summary", "jaxeval datasets")
    d.add_argument("--json", action="store_true", help="print JSON")

    c = add(
        "campaign",
        "a real best-model identification: ask which model to run on which items, tell "
        "the scores (a file holds the campaign; every answer is saved)",
        "jaxeval campaign new c.npz --history oll2_ifeval --candidates m1 m2 m3",
    )
    csub = c.add_subparsers(dest="action", metavar="ACTION", required=True)
    cn = add("new", "start a campaign file",
             "jaxeval campaign new c.npz --history oll2_ifeval --candidates m1 m2 m3", csub,
             "start a campaign file (refuses to overwrite one)")
    cn.add_argument("file", help="the campaign file to create (.npz)")
    cn.add_argument("--candidates", nargs="+", metavar="MODEL", default=[],
                    help="the models to compare")
    cn.add_argument("--candidates-file", metavar="FILE",
                    help="the models to compare, one name per line (# starts a comment "
                    "line); with --candidates too, both lists are compared (those of --candidates "
                    "first)")
    cn.add_argument("--history", metavar="DATA",
                    help="models already scored on the benchmark: a bundled name or a file "
                    "jaxeval.load reads (needed by pulse_ucb, pulse and naive)")
    _add_data_options(cn, "--history", "history-")
    cn.add_argument("--exclude-candidates", action="store_true",
                    help="drop the candidates' rows from --history first (e.g. to try a "
                    "campaign on bundled data, whose history holds every model)")
    cn.add_argument("--items-file", metavar="FILE",
                    help="the benchmark's item names, one per line (without --history; "
                    "every non-blank line is an item)")
    cn.add_argument("--policy", default="pulse_ucb",
                    help="pulse_ucb (default), pulse, ucbe, naive, uniform or sysrs")
    cn.add_argument("--budget", type=int, help="most LLM calls to spend (default K*n)")
    cn.add_argument("--batch-size", type=int, default=1, help="items per request (default 1)")
    cn.add_argument("--alpha", type=float, default=0.05, help="error level (default 0.05)")
    cn.add_argument("--seed", type=int, default=0,
                    help="seed of the item orders (and of the factorization fit on --history)")
    cn.add_argument("--no-stop", action="store_true",
                    help="keep asking after the leader is separated (until the budget)")
    cn.add_argument("--no-skip-separated", action="store_true",
                    help="keep requesting models already separated from the leader (by "
                    "default they are skipped, so the confident stop needs fewer calls; "
                    "sysrs follows its own schedule either way)")
    cn.add_argument("--rank", type=int, default=8,
                    help="rank of the factorization fitted on --history (default 8; at most "
                    "the number of history models and of items)")
    cn.add_argument("--fit-steps", type=int, default=500,
                    help="optimisation steps of that fit (default 500)")
    cn.add_argument("--lam0", default="1.0",
                    help="prior of the estimate's coefficient: a number in [0, 1] (default "
                    "1) or 'learned' (learned on --history)")
    help_ = 'print the next request as JSON ({"done": true, ...} when there is none)'
    ca = add("ask", help_, "jaxeval campaign ask c.npz > request.json", csub)
    ca.add_argument("file", help="the campaign file")
    ca.add_argument("--items-only", action="store_true",
                    help="print only the item names, one per line (nothing when done)")
    help_ = "print estimates, intervals and the leader"
    cs = add("status", help_, "jaxeval campaign status c.npz --plot c.png", csub)
    cs.add_argument("file", help="the campaign file")
    cs.add_argument("--json", action="store_true", help="print JSON")
    cs.add_argument("--plot", metavar="PNG", help="also draw the intervals into this PNG")
    cs.add_argument("--no-strict", action="store_true",
                    help="replay the saved answers only up to the first that no longer "
                    "replays (another JAX version or platform) instead of refusing")
    cs.add_argument("--replay", action="store_true",
                    help="replay every saved answer instead of restoring the saved state "
                    "(checks that this jaxeval asks each saved request again)")
    help_ = "print every saved answer as CSV (model,item,score), without a replay"
    ce = add("export", help_, "jaxeval campaign export c.npz > answers.csv", csub)
    ce.add_argument("file", help="the campaign file")
    ct = add("tell", "answer the pending request and save",
             "jaxeval campaign tell c.npz scores.json --step 3", csub)
    ct.add_argument("file", help="the campaign file")
    ct.add_argument("answers", help="a JSON file ('-' = stdin): a list of scores in the "
                    "request's order or an object {item: score}; scores are numbers in "
                    "[0, 1] (true / false read as 1 / 0; text such as \"1\" is refused)")
    ct.add_argument("--step", type=int, required=True,
                    help="the request's step as `ask` printed it (refused if it is not the "
                    "pending request: a repeated tell never files scores under another)")

    an = add(
        "anchors",
        "accuracy from a few anchor items: fit a predictor on scored models, list its "
        "items, predict a new model's accuracy from its scores on them",
        "jaxeval anchors fit oll2_musr --k 30 --out musr.npz > anchors.txt",
    )
    asub = an.add_subparsers(dest="action", metavar="ACTION", required=True)
    af = add("fit", "choose anchors and fit the predictor; prints the items",
             "jaxeval anchors fit oll2_musr --k 30 --out musr.npz > anchors.txt", asub,
             "choose k anchor items on the models of DATA (as jaxeval.fit_anchors: a seeded "
             "20% of them is held out for the choices made on validation and the interval), "
             "save the predictor, print the anchor items one per line")
    af.add_argument("data", help="scored models: a bundled name or a file jaxeval.load reads")
    _add_data_options(af, "DATA", "")
    af.add_argument("--drop-incomplete", action="store_true",
                    help="leave out the models of DATA with unscored items (the fit needs "
                    "complete rows); their number is printed")
    af.add_argument("--k", type=int, required=True, help="number of anchor items")
    af.add_argument("--out", required=True, help="the predictor file (.npz; not overwritten)")
    af.add_argument("--method", default="auto", help="auto (default) or a method name")
    af.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    af.add_argument("--alpha", type=float, default=0.1, help="interval error level (0.1)")
    af.add_argument("--quiet", action="store_true", help="no progress lines")
    help_ = "print a predictor's anchor items, one per line (the items to evaluate)"
    ai = add("items", help_, "jaxeval anchors items musr.npz --extra 20 --extra-seed 7 > "
             "extra.txt", asub, help_ + "; with --extra M, M random non-anchor items "
             "instead, for the unbiased estimate of `predict --extra M`")
    ai.add_argument("file", help="the predictor file")
    ai.add_argument("--extra", type=int, metavar="M",
                    help="print instead M random non-anchor items for an unbiased estimate")
    ai.add_argument("--extra-seed", type=int, help="seed of those items (default 0; needs --extra)")
    ap = add("predict", "estimate a model's accuracy from its anchor scores",
             "jaxeval anchors predict musr.npz scores.json", asub,
             "estimate a model's accuracy from its anchor scores (JSON {item: score} for "
             "exactly the anchors, or a list in anchor order; or many models' at once from a "
             "score table, .csv / .tsv / .npz / .parquet, of models as rows and items as "
             "columns, every column a score (items other than the anchors are ignored), or "
             "from lm-evaluation-harness output of the anchor items (a folder of samples "
             "files, .jsonl, .jsonl.gz; --metric / --filter / --runs as for fit): "
             "one JSON line per model); with --extra M --extra-seed S "
             "the mapping must hold exactly the anchors and the items `items --extra M "
             "--extra-seed S` printed, and an unbiased estimate with a finite-sample interval "
             "is added. Fix M and S before scoring, once per model (a seed per model for "
             "intervals about several models at once): choosing them after seeing scores "
             "voids the interval.")
    ap.add_argument("file", help="the predictor file")
    ap.add_argument("scores", help="a JSON file ('-' = stdin) of one model's scores, or a "
                    "score table (.csv, .tsv, .npz, .parquet) or lm-evaluation-harness output "
                    "(a folder, .jsonl, .jsonl.gz) of many models: one JSON line per model")
    _add_data_options(ap, "SCORES", "")
    ap.add_argument("--extra", type=int, metavar="M", help="extra random items scored")
    ap.add_argument("--extra-seed", type=int, help="their seed (default 0; needs --extra)")

    e = add(
        "example",
        "print an example study definition to edit",
        "jaxeval example identification > s.json",
    )
    e.add_argument("kind", choices=("identification", "anchors", "replicates"))
    return p


_DIST_ENV = "_JAXEVAL_DISTRIBUTED"
# jax.distributed.initialize must run before anything touches a JAX backend, which
# importing a library may do; so `run --coordinator` restarts the interpreter with
# this launcher, which initialises first and imports jaxeval afterwards.
_DIST_LAUNCHER = """
import json, os, sys
import jax
cfg = json.loads(os.environ["_JAXEVAL_DISTRIBUTED"])
if cfg["gloo"]:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    coordinator_address=cfg["coordinator"],
    num_processes=cfg["num_processes"],
    process_id=cfg["process_id"],
)
from jaxeval._cli import cli
sys.exit(cli(sys.argv[1:]))
"""


def _fail(command: str, message: str) -> NoReturn:
    """Refuse a setting the way every command does: one line on stderr, exit code 2."""
    print(f"jaxeval {command}: error: {message}" if command else f"jaxeval: error: {message}",
          file=sys.stderr)
    raise SystemExit(2)


def _setup_jax(args: argparse.Namespace, argv: list[str]) -> None:
    """Global JAX settings the user asked for on the command line (never on import)."""
    import jax

    if args.compilation_cache:
        path = Path(args.compilation_cache).expanduser()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            _fail("", f"--compilation-cache (default $JAXEVAL_COMPILATION_CACHE): cannot use "
                      f"{str(path)!r} as a folder ({e.strerror or e})")
        jax.config.update("jax_compilation_cache_dir", str(path))
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            # JAX caches only compilations over 1 s by default; a campaign command's
            # are shorter (warm `campaign ask`: 2.4 s -> 2.05 s with every one cached)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    coord = getattr(args, "coordinator", None)
    if coord is None and _DIST_ENV not in os.environ and (
            getattr(args, "num_processes", None) is not None
            or getattr(args, "process_id", None) is not None):
        _fail("run", "--num-processes and --process-id need --coordinator HOST:PORT (one "
                     "multi-process run); to split replicates over independent jobs use --range")
    if coord is not None and _DIST_ENV not in os.environ:
        if args.num_processes is None or args.process_id is None:
            _fail("run", "--coordinator needs --num-processes and --process-id")
        host, _, port = coord.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            _fail("run", f"--coordinator: expected HOST:PORT (e.g. host0:1234), got {coord!r}")
        if args.num_processes < 1:
            _fail("run", f"--num-processes: expected an integer >= 1, got {args.num_processes}")
        if not 0 <= args.process_id < args.num_processes:
            _fail("run", f"--process-id: expected an integer in [0, {args.num_processes - 1}] "
                         f"(--num-processes {args.num_processes}), got {args.process_id}")
        cpu = os.environ.get("JAX_PLATFORMS", "").startswith("cpu") or not _has_accelerator()
        cfg = {
            "coordinator": coord,
            "num_processes": args.num_processes,
            "process_id": args.process_id,
            "gloo": cpu,
        }
        env = dict(os.environ, **{_DIST_ENV: json.dumps(cfg)})
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-c", _DIST_LAUNCHER, *argv], env)


def _has_accelerator() -> bool:
    import importlib.util

    return any(
        importlib.util.find_spec(m) for m in ("jax_cuda12_plugin", "libtpu", "jax_rocm60_plugin")
    )


def _parse_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        lo, hi = (int(v) for v in text.split(":"))
    except ValueError:
        _fail("run", f"--range must be LO:HI (integers), got {text!r}")
    return lo, hi


def _results_for_report(folder):
    """``load_results(folder)``, refused when the study's data file changed or is gone
    (a report recomputes the budgets from it)."""
    from jaxeval._study import data_unchanged, load_results

    study, results = load_results(folder)
    data_unchanged(folder, study)
    return study, results


def _q(path: str | os.PathLike) -> str:
    """A path as the shell reads it back in a command to paste (quoted where needed)."""
    import shlex

    return shlex.quote(str(path))


def _os_reason(e: OSError) -> str:
    """An OSError as its reason and file (``File too large: runs/s/x``), without the
    ``[Errno 27]`` prefix."""
    return (e.strerror or str(e)) + (f": {e.filename}" if e.filename else "")


def _report(folder: Path, *, plots: bool = True, quiet: bool = False) -> dict | None:
    import jax

    from jaxeval._report import format_summary, plot_study, summarize, write_summary
    from jaxeval._study import study_status

    if jax.process_index() != 0:
        return None
    st = study_status(folder)
    if not st["complete"]:
        lo, hi = st["range"]
        if (lo, hi) != (0, st["units"]) and st["range_complete"]:
            what = (f"this folder holds units {lo}:{hi} of {st['units']} (a range job, "
                    f"done): `jaxeval merge` it with the other ranges' folders for a report")
        else:
            what = f"interrupted: `jaxeval resume {_q(folder)}` finishes it"
        print(f"{folder}: study incomplete; {what}", file=sys.stderr)
        return None
    study, results = _results_for_report(folder)
    summary = summarize(study, results)
    # (the study is complete whatever happens to its report: a full disk or quota here
    # is a warning, not the exit status of a finished job)
    later = "the study is complete; `jaxeval summary` / `jaxeval plot` write them later"
    try:
        write_summary(summary, folder)
    except OSError as e:
        print(f"jaxeval: warning: {folder / 'summary.json'} not written ({_os_reason(e)}); "
              f"{later}", file=sys.stderr)
    if not quiet:
        print(format_summary(summary))
    if plots:
        try:
            paths = plot_study(summary, folder / "plots")
        except ImportError as e:
            print(f"(no plots: {e})", file=sys.stderr)
        except OSError as e:
            print(f"jaxeval: warning: plots not written in {folder / 'plots'} "
                  f"({_os_reason(e)}); {later}", file=sys.stderr)
        else:
            if not quiet and paths:
                print(f"plots: {', '.join(str(p) for p in paths)}")
    return summary


def _cmd_datasets(args: argparse.Namespace) -> int:
    from jaxeval import datasets

    rows = []
    for name in datasets.names():
        sm = datasets.load(name)
        dd = sm.drop_duplicates()
        acc = dd.accuracy()
        order = np.argsort(-acc)
        rows.append(
            {
                "name": name,
                "models": sm.n_models,
                "unique_models": dd.n_models,
                "items": sm.n_items,
                "accuracy_min": float(acc.min()),
                "accuracy_median": float(np.median(acc)),
                "accuracy_max": float(acc.max()),
                "top_models": [[str(dd.models[i]), float(acc[i])] for i in order[:3]],
                "top2_gap": float(acc[order[0]] - acc[order[1]]),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("Bundled datasets (Open LLM Leaderboard v2, MIT licence; duplicates removed for stats)")
    print(f"  {'name':<20}{'models':>8}{'items':>7}   accuracy min / median / max   top-2 gap")
    for r in rows:
        print(
            f"  {r['name']:<20}{r['unique_models']:>8}{r['items']:>7}   "
            f"{r['accuracy_min']:.3f} / {r['accuracy_median']:.3f} / {r['accuracy_max']:.3f}"
            f"         {r['top2_gap']:.4f}"
        )
        for m, a in r["top_models"]:
            print(f"      {a:.3f}  {m}")
    return 0


def _example(kind: str) -> dict:
    from jaxeval._study import AnchorStudy, IdentificationStudy

    if kind == "identification":
        return IdentificationStudy(name="ifeval-k10").to_dict()
    if kind == "anchors":
        return AnchorStudy(name="musr-anchors").to_dict()
    return {
        "kind": "replicates",
        "name": "my-monte-carlo",
        "target": "mypackage.mymodule:replicate_fn",
        "n_replicates": 10000,
        "seed": 0,
        "chunk_size": 1024,
        "lanes": 32,
    }


def _cmd_main(args: argparse.Namespace) -> int:
    from jaxeval._report import format_summary, plot_calls_bars
    from jaxeval._study import default_study, run_study

    out = Path(args.out)
    ident, anchors = default_study(quick=args.quick)
    print(f"jaxeval main: writing to {out.resolve()}", flush=True)
    _cmd_datasets(argparse.Namespace(json=False))
    summaries = []
    suffix = "-quick" if args.quick else ""
    for sub, study in (("identification", ident), ("anchors", anchors)):
        folder = out / (sub + suffix)
        print(f"\n== {study.name}: {study.kind} study -> {folder}", flush=True)
        run_study(study, folder, progress=not args.quiet)
        s = _report(folder, quiet=True)
        if s is not None:
            summaries.append(s)
            print(format_summary(s))
    ids = [s for s in summaries if s["kind"] == "identification"]
    if ids:
        try:
            plot_calls_bars(ids, out / f"calls_to_95{suffix}.png")
        except ImportError:
            pass
    mine = [out / f"calls_to_95{suffix}.png"] + [
        p for sub in ("identification", "anchors") for p in (out / (sub + suffix)).rglob("*.png")]
    pngs = sorted(str(p.relative_to(out)) for p in mine if p.exists())
    print(f"\nDone. Report in {out.resolve()}:")
    print(f"  summaries: identification{suffix}/summary.json, anchors{suffix}/summary.json")
    if pngs:
        print("  plots: " + ", ".join(pngs))
    return 0


def _campaign_json(st) -> dict:
    return {
        "models": st.models.tolist(), "estimate": st.estimate.tolist(),
        "lower": st.lower.tolist(), "upper": st.upper.tolist(), "pulls": st.pulls.tolist(),
        "calls": st.calls, "budget": st.budget, "recommended": st.recommended,
        "confident": st.confident, "done": st.done, "reason": st.reason,
    }


def _lines(path: str, what: str, comments: bool = False) -> list[str]:
    """The non-blank lines of a name file; with ``comments``, lines starting with ``#``
    are left out, and how many is said on stderr."""
    try:
        # utf-8-sig: a byte-order mark (Excel, Notepad) is not part of the first name
        # one name per "\n" line (splitlines() would also split at U+2028 and the like)
        text = Path(path).read_text(encoding="utf-8-sig")
        names = [ln.strip() for ln in text.split("\n")]
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{what}: cannot read {path} ({e})") from None
    names = [n for n in names if n]
    if comments:
        skipped = [n for n in names if n.startswith("#")]
        if skipped:
            print(f"jaxeval: {what}: left out {len(skipped)} comment line(s) starting with "
                  f"'#', e.g. {skipped[0]!r}", file=sys.stderr)
        names = [n for n in names if not n.startswith("#")]
    return names


def _new_npz(what: str, value: str, why: str = "") -> Path:
    """The ``.npz`` path a command creates (``value`` with ``.npz`` appended unless it
    ends so); an existing file is refused, never replaced."""
    from jaxeval._data import cannot_write, npz_name

    path = npz_name(value)
    if path.exists():
        raise ValueError(f"{what}: {path} exists{why}; choose another name or delete it yourself")
    if not path.parent.is_dir():
        raise ValueError(f"{what}: the folder {path.parent} does not exist")
    why = cannot_write(path.parent)
    if why:  # refused now, not after the work whose result it would hold
        raise ValueError(f"{what}: cannot write in the folder {path.parent} ({why})")
    return path


@contextlib.contextmanager
def _file_lock(path: Path):
    """Hold an exclusive lock on ``<path>.lock`` while a command reads and rewrites
    ``path``, so two processes answering one campaign queue up instead of one silently
    replacing the other's answer (the loser then finds its request answered and says so).
    The lock file itself is left in place. POSIX: ``fcntl.flock``; Windows: a
    ``msvcrt.locking`` lock on the lock file's first byte (retried until it is free);
    elsewhere the commands run unlocked."""
    lock = Path(str(path) + ".lock")
    fcntl = msvcrt = None
    try:
        import fcntl
    except ImportError:
        try:
            import msvcrt
        except ImportError:  # pragma: no cover - neither POSIX nor Windows
            pass
    # (the lock is taken outside the except clauses, so that an error in the command
    # is not reported as raised "during handling" of the ImportError)
    if fcntl is not None:
        with open(lock, "a") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            with _released(lambda: fcntl.flock(fh.fileno(), fcntl.LOCK_UN)):
                yield
    elif msvcrt is not None:
        with open(lock, "a+b") as fh:
            _msvcrt_lock(msvcrt, fh)

            def unlock():
                fh.seek(0)
                msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)

            with _released(unlock):
                yield
    else:  # pragma: no cover
        yield


@contextlib.contextmanager
def _released(unlock):
    """Call ``unlock`` on the way out. When the body failed, the body's error is the one
    raised: an ``OSError`` from ``unlock`` then is dropped (closing the lock file releases
    the lock anyway) instead of replacing it."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            unlock()
        raise
    unlock()


def _msvcrt_lock(msvcrt, fh) -> None:
    """Lock byte 0 of ``fh``, waiting as long as it takes (``LK_LOCK`` itself gives up
    with ``EDEADLOCK`` after about 10 s of one-second retries); other errors raise."""
    import errno

    busy = {getattr(errno, "EDEADLOCK", errno.EDEADLK), errno.EACCES}
    while True:
        fh.seek(0)
        try:
            msvcrt.locking(fh.fileno(), msvcrt.LK_LOCK, 1)
            return
        except OSError as e:
            if e.errno not in busy:
                raise


def _cmd_campaign(args: argparse.Namespace) -> int:
    if args.action == "new":
        # every argument is checked and the campaign built before the lock is taken, so a
        # refused `new` leaves nothing behind (no campaign file, no lock file)
        path = _new_npz("file", args.file, _NEW_CAMPAIGN_WHY)
        camp = _new_campaign(args)
        with _file_lock(path):  # two `new`s racing for one name: the second is refused
            path = _new_npz("file", args.file, _NEW_CAMPAIGN_WHY)
            camp.save(path)
        print(f"created {path}: {camp!r}; next: jaxeval campaign ask {path}")
        return 0
    if args.action == "tell":
        answers = _read_json(args.answers, "answers")
        from jaxeval._campaign import saved_path

        path = saved_path(args.file)  # the file `load` will read (`c` may mean `c.npz`)
        if not path.is_file():
            return _campaign_action(args, answers)  # nothing to protect; its own error
        with _file_lock(path):
            return _campaign_action(args, answers)
    return _campaign_action(args, None)


_NEW_CAMPAIGN_WHY = " (a campaign's answers live there)"


def _exclude_candidates(history, cands: list[str], source: str):
    """``history`` without the candidates' rows (``--exclude-candidates``), nor their
    repeated rows: a model's repeats are renamed ``name#2``, ``name#3``, ... on loading
    (the bundled leaderboards hold resubmissions), and are its answers too. (Only where
    the loader says it renamed models: a model of another table may be named so.)"""
    if not cands:
        raise ValueError("--exclude-candidates: needs the candidates (--candidates "
                         "or --candidates-file)")
    drop = set(cands)
    models = history.models.tolist()
    renamed = any("'models' names made unique with a '#k' suffix" in str(c)
                  for c in history.metadata.get("conversions", []))
    again = [m for m in models if renamed and m not in drop and re.fullmatch(r".+#\d+", m)
             and m.rsplit("#", 1)[0] in drop]
    keep = [i for i, m in enumerate(models) if m not in drop and m not in again]
    if len(keep) == history.n_models:
        raise ValueError(f"--exclude-candidates: none of the candidates is in {source} "
                         "(misspelled?)")
    if again:
        print(f"--exclude-candidates: also dropped {len(again)} repeated row(s) of the "
              f"candidates (renamed 'name#k' on loading): {again[:5]}", file=sys.stderr)
    held = set(models) | {m.rsplit("#", 1)[0] for m in again}
    absent = [m for m in cands if m not in held]
    if absent:  # a new model, or a typo: say so, the run may go on
        print(f"warning: --exclude-candidates: {len(absent)} candidate(s) not in "
              f"{source}, so nothing was dropped for them (new models, or "
              f"misspelled?): {absent[:5]}", file=sys.stderr)
    return history.take(models=keep)


def _new_campaign(args: argparse.Namespace):
    """The campaign ``campaign new`` describes (not yet saved)."""
    from jaxeval._campaign import IdentificationCampaign

    cands = list(args.candidates)
    if args.candidates_file:
        cands += _lines(args.candidates_file, "--candidates-file", comments=True)
    history = None
    if args.history:
        history = _load_table_arg("--history", args.history, args.sep,
                                  _lm_eval_options(args), args.history_duplicate_names)
        if args.exclude_candidates:
            history = _exclude_candidates(history, cands, args.history)
    elif args.exclude_candidates:
        raise ValueError("--exclude-candidates: needs --history")
    elif (args.history_metric is not None or args.history_filter
          or args.history_runs is not None):
        raise ValueError("--history-metric / --history-filter / --history-runs: need --history")
    elif args.history_duplicate_names is not None:
        raise ValueError("--history-duplicate-names: needs --history")
    elif args.sep is not None:
        raise ValueError("--sep: only with --history (the separator of its table)")
    items = _lines(args.items_file, "--items-file") if args.items_file else None
    lam0 = args.lam0
    if lam0 != "learned":
        try:
            lam0 = float(lam0)
        except ValueError:
            raise ValueError(f"--lam0: expected a number in [0, 1] or 'learned', got "
                             f"{args.lam0!r}") from None
    try:
        camp = IdentificationCampaign(
            cands, history, items=items, policy=args.policy, budget=args.budget,
            batch_size=args.batch_size, alpha=args.alpha, seed=args.seed,
            stop_when_confident=not args.no_stop, rank=args.rank, fit_steps=args.fit_steps,
            skip_separated=False if args.no_skip_separated else None,
            lam0=lam0, progress=True,
        )
    except ValueError as e:  # the library's argument names -> this command's flags
        flags = {a: "--" + a.replace("_", "-") for a in
                 ("rank", "fit_steps", "lam0", "budget", "batch_size", "alpha", "history",
                  "policy", "seed")}
        flags["items"] = "--items-file"
        msg = _renamed(str(e), flags, forms=(":", "=", " must "))
        msg = msg.replace("drop them from history (history.take(models=...)) or from "
                          "candidates", "pass --exclude-candidates to drop them from "
                          "--history, or leave them out of the candidates")
        msg = msg.replace("give history (or factors), or use a policy without predictions",
                          "give --history, or a --policy without predictions")
        if msg != str(e):
            raise ValueError(msg) from None
        raise
    return camp


def _campaign_action(args: argparse.Namespace, answers) -> int:
    from jaxeval._campaign import IdentificationCampaign

    if args.action == "export":
        import csv

        told = IdentificationCampaign.saved_scores(args.file)
        rows, cols = np.nonzero(told.mask)
        # RFC 4180 quoting (names may hold commas, quotes, tabs, any Unicode) and each
        # score's shortest decimal that reads back to the same saved (float32) value:
        # `jaxeval.load` gets back the saved names and scores (names without leading or
        # trailing spaces, which its table reader strips; pandas needs dtype=str,
        # keep_default_na=False to keep names such as "01" or "NA")
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(["model", "item", "score"])
        for i, j in zip(rows, cols):
            out.writerow([str(told.models[i]), str(told.items[j]),
                          np.format_float_positional(told.scores[i, j], unique=True,
                                                     trim="-")])
        return 0
    strict = not getattr(args, "no_strict", False)
    camp = IdentificationCampaign.load(args.file, strict=strict,
                                       replay=bool(getattr(args, "replay", False)))
    if args.action == "status":
        st = camp.status()
        print(json.dumps(_campaign_json(st), indent=1) if args.json else st.table())
        if args.plot:
            try:
                where = st.plot(args.plot)
            except OSError as e:
                raise ValueError(f"--plot: cannot write {args.plot} ({e.strerror or e})") from None
            print(f"plot: {where}", file=sys.stderr)
        return 0
    req = camp.ask()
    if args.action == "ask":
        if req is None:
            st = camp.status()
            if args.items_only:
                return 0
            print(json.dumps({"done": True, "reason": st.reason, "recommended": st.recommended,
                              "calls": st.calls}))
            return 0
        if args.items_only:
            print("\n".join(req.items.tolist()))
            return 0
        print(json.dumps({"step": req.step, "model": req.model, "items": req.items.tolist()}))
        return 0
    # tell
    if req is None:
        raise ValueError(f"answers: the campaign is done ({camp.status().reason}); "
                         "there is no request to answer")
    if args.step != req.step:
        raise ValueError(
            f"step: the pending request is step {req.step} ({req.model}), not {args.step}"
            + (" (already answered)" if 0 <= args.step < req.step else "")
            + (" (steps count from 0)" if args.step < 0 else "") + "; nothing saved"
        )
    try:
        camp.tell(req, answers)
    except (TypeError, ValueError) as e:  # name the CLI's argument, not tell()'s
        raise ValueError(_renamed(str(e), {"scores": "answers"})) from None
    camp.save(camp.path)
    st = camp.status()
    print(f"{st.calls} of {st.budget} calls; leader {st.recommended}"
          + (f"; done ({st.reason})" if st.done else ""))
    return 0


def _add_data_options(p: argparse.ArgumentParser, what: str, prefix: str) -> None:
    """The loading options of a data argument ``what`` (``--sep``, and ``--{prefix}metric``,
    ``filter``, ``runs``, ``duplicate-names``; read back by :func:`_lm_eval_options` and
    :func:`_load_table_arg` with the same prefix)."""
    p.add_argument("--sep", help=f"field separator of a {what} table (default: ',', or tab "
                   "for .tsv)")
    lm = f"lm-evaluation-harness {what}:"
    p.add_argument(f"--{prefix}metric", metavar="NAME",
                   help=f"{lm} the per-sample metric to read")
    p.add_argument(f"--{prefix}filter", metavar="[TASK=]FILTER", action="append",
                   help=f"{lm} the filter to keep where a task logs several (e.g. "
                   "strict-match); TASK=FILTER for one task, repeatable")
    p.add_argument(f"--{prefix}task", metavar="TASK", action="append",
                   help=f"{lm} read only this task's samples files where a folder holds "
                   "several (repeatable; items are then named by doc_id alone for one task, "
                   "TASK/doc_id for several)")
    p.add_argument(f"--{prefix}runs", choices=("error", "latest"),
                   help=f"{lm} with several runs of a task per model, 'latest' keeps the "
                   "newest (default: refuse)")
    p.add_argument(f"--{prefix}duplicate-names", choices=("error", "rename"),
                   help=f".npz or wide-table {what}: repeated model (or .npz item) names "
                   "are refused (default) or renamed with '#2', '#3', ...")


def _lm_eval_options(args: argparse.Namespace, prefix: str = "history_") -> dict:
    """``metric=`` / ``filter=`` / ``runs=`` of ``load_lm_eval`` from the command's
    ``--{prefix}metric``, ``--{prefix}filter`` (one FILTER for every task, or TASK=FILTER
    pairs) and ``--{prefix}runs``."""
    flag = "--" + prefix.replace("_", "-")
    opts: dict = {}
    if getattr(args, prefix + "metric") is not None:
        opts["metric"] = getattr(args, prefix + "metric")
    if getattr(args, prefix + "runs", None) is not None:
        opts["runs"] = getattr(args, prefix + "runs")
    tasks = getattr(args, prefix + "task", None)
    if tasks:
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"{flag}task: a task given twice in {tasks}")
        opts["task"] = tasks[0] if len(tasks) == 1 else list(tasks)
    given = getattr(args, prefix + "filter") or []
    pairs = [f for f in given if "=" in f]
    if pairs and len(pairs) != len(given):
        raise ValueError(f"{flag}filter: either one FILTER for every task or TASK=FILTER "
                         f"pairs, not both (got {given})")
    if pairs:
        per = dict(f.split("=", 1) for f in pairs)
        if len(per) != len(pairs):
            raise ValueError(f"{flag}filter: a task given twice in {given}")
        opts["filter"] = per
    elif len(given) > 1:
        raise ValueError(f"{flag}filter: one FILTER for every task, got {given} (use "
                         "TASK=FILTER for different filters per task)")
    elif given:
        opts["filter"] = given[0]
    return opts


def _command_hints(msg: str, prefix: str) -> str:
    """A loader's advice in a message (``pass filter=<name>``, ...) in the command's own
    flags (``--history-filter NAME``, ...)."""
    flag = "--" + prefix.replace("_", "-")
    for old, new in (
        ("pass metric=<field> to choose one", f"pass {flag}metric FIELD to choose one"),
        ("pass metric= explicitly", f"pass {flag}metric explicitly"),
        ("pick another field with metric=", f"pick another field with {flag}metric"),
        ("pass filter=<name> to choose one",
         f"pass {flag}filter NAME (or TASK=NAME for that task alone) to choose one"),
        ("pass runs='latest' to keep the newest", f"pass {flag}runs latest to keep the newest"),
        ("name the task: filter={task: name}", f"name the task: {flag}filter TASK=NAME"),
        ("pass duplicate_names='rename'", f"pass {flag}duplicate-names rename"),
    ):
        msg = msg.replace(old, new)
    return msg


def _load_table_arg(what: str, value: str, sep: str | None, lm_eval: dict | None = None,
                    duplicate_names: str | None = None, prefix: str = "history_"):
    """``jaxeval.load(value)``, with ``sep`` for a CSV/TSV table, the lm-evaluation-
    harness options and ``duplicate_names`` for an .npz file (each refused for other
    data); the loader's advice is given in the command's flags (``--{prefix}...``)."""
    try:
        sm = _load_table(what, value, sep, lm_eval, duplicate_names, prefix)
    except (ValueError, TypeError) as e:
        msg = _command_hints(str(e), prefix)
        if msg != str(e):
            raise type(e)(msg) from None
        raise
    if Path(value).suffix.lower() == ".npz" and "file" in sm.metadata:
        return sm  # saved by to_npz: its notes are of the load it was made from, not this
    for note in sm.metadata.get("conversions", []):
        # what the loader read differently from the file as it stands (older runs
        # dropped, names renamed, a target column, cells read as unobserved); a dtype
        # widened changes nothing
        if not re.fullmatch(r"\S+ 0/1 scores converted to float32", str(note)):
            print(f"{what}: {note}", file=sys.stderr)
    return sm


def _load_table(what, value, sep, lm_eval, duplicate_names, prefix):
    import jaxeval

    flag = "--" + prefix.replace("_", "-")
    p = Path(value)
    kw: dict[str, str] = {}
    if duplicate_names is not None:
        table = p.suffix.lower() in (".csv", ".tsv", ".parquet", ".pq")
        if p.suffix.lower() != ".npz" and not table:
            raise ValueError(f"{flag}duplicate-names: only for an .npz file or a table "
                             f"(.csv, .tsv, .parquet), not {value!r}")
        if not table and (lm_eval or sep is not None):
            raise ValueError(f"--sep / {flag}filter / {flag}metric / {flag}task / {flag}runs: "
                             f"not for an .npz file ({value!r})")
        if lm_eval:
            raise ValueError(f"{flag}filter / {flag}metric / {flag}task / {flag}runs: "
                             f"not for a table ({value!r})")
        kw["duplicate_names"] = duplicate_names
    if lm_eval:
        if sep is not None:
            raise ValueError(f"--sep: only for a .csv / .tsv table, not with {flag}filter / "
                             f"{flag}metric / {flag}task / {flag}runs (lm-evaluation-harness "
                             "output)")
        if not (p.is_dir() or p.suffix.lower() in (".jsonl", ".json")
                or p.name.lower().endswith(".jsonl.gz")):
            raise ValueError(f"{flag}metric / {flag}filter / {flag}task / {flag}runs: only for "
                             "lm-evaluation-harness output (a folder, .jsonl or .jsonl.gz), not "
                             f"{value!r}")
        try:
            return jaxeval.load(value, **lm_eval)
        except (ValueError, TypeError) as e:
            msg = _renamed(str(e), {"filter": f"{flag}filter", "metric": f"{flag}metric",
                                    "task": f"{flag}task"})
            if msg != str(e):
                raise ValueError(msg) from None
            raise
    if sep is not None:
        kw["sep"] = _one_sep(sep, what, value)
    return jaxeval.load(value, **kw)


def _one_sep(sep: str, what: str, value: str) -> str:
    """``--sep`` as the one character it means, for a .csv / .tsv ``value``."""
    # a shell passes --sep '\t' as backslash-t: the tab it means
    sep = {"\\t": "\t", "tab": "\t"}.get(sep, sep)
    if len(sep) != 1:
        raise ValueError(f"--sep: expected one character (or '\\t' for a tab), got {sep!r}")
    if Path(value).suffix.lower() not in (".csv", ".tsv"):
        raise ValueError(f"--sep: only for a .csv / .tsv table, not {what} {value!r}")
    return sep


def _renamed(msg: str, names: dict[str, str], forms: tuple[str, ...] = (":",)) -> str:
    """``msg`` with the library argument it starts with (``name`` followed by one of
    ``forms``) replaced by the command's name for it (``name: x`` -> ``new: x``,
    ``name must x`` -> ``new: must x``); unchanged when it starts with none."""
    for old, new in names.items():
        for form in forms:
            if msg.startswith(old + form):
                rest = msg[len(old):]
                return new + (":" + rest if rest.startswith(" ") else rest)
    return msg


_ONE_MODEL_JSON = (
    " (anchors predict reads one model's scores as JSON: an object {item: score} or a "
    "list in the order `jaxeval anchors items FILE` prints; many models: a score table, "
    ".csv / .tsv / .npz / .parquet, one row per model)")


def _read_json(path: str, what: str, hint: str = ""):
    """The JSON value in file ``path`` (``-``: stdin); errors name ``what``, an empty
    file is said to be empty, and ``hint`` ends a parse error's message."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        if not text.strip():
            raise ValueError(f"{what}: {'stdin' if path == '-' else path} is empty{hint}")
        return json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: cannot read {path} as JSON ({e}){hint}") from None


def _by_name(scores, names: np.ndarray, what: str, allowed=None, hint: str = ""
             ) -> np.ndarray:
    """Scores of ``names`` from a ``{item: score}`` mapping whose keys must be exactly
    ``allowed`` (default ``names``); ``hint`` ends the message about keys not allowed."""
    missing = [n for n in names.tolist() if n not in scores]
    if missing:
        raise ValueError(f"{what}: no score for {len(missing)} item(s), e.g. {missing[:5]}")
    allowed = set(names.tolist()) if allowed is None else allowed
    extra = sorted(set(scores) - allowed)
    if extra:
        raise ValueError(f"{what}: {len(extra)} item(s) that were not asked for, e.g. "
                         f"{extra[:5]} (give exactly the requested items{hint})")
    vals = [scores[n] for n in names.tolist()]
    bad = [n for n, v in zip(names.tolist(), vals) if not isinstance(v, (int, float))]
    if bad:  # (JSON true / false are 1 / 0, as in numpy)
        raise ValueError(f"{what}: scores must be numbers; not for {len(bad)} item(s), e.g. "
                         f"{bad[0]!r}: {scores[bad[0]]!r}")
    return np.asarray(vals, dtype=np.float64)


def _cmd_anchors(args: argparse.Namespace) -> int:
    import jaxeval

    if args.action == "fit":
        out = _new_npz("--out", args.out)
        raw = _load_table_arg("DATA", args.data, args.sep, _lm_eval_options(args, ""),
                              args.duplicate_names, prefix="")
        sm = raw.drop_duplicates()
        if sm.n_models < raw.n_models:  # (a repeat in both halves makes the interval short)
            print(f"DATA: left out {raw.n_models - sm.n_models} of {raw.n_models} models "
                  "whose scores repeat another model's exactly", file=sys.stderr)
        if args.drop_incomplete:
            keep = np.flatnonzero(sm.mask.all(axis=1))
            print(f"--drop-incomplete: left out {sm.n_models - keep.size} of {sm.n_models} "
                  "models with unscored items", file=sys.stderr)
            if keep.size == 0:
                raise ValueError(f"--drop-incomplete: every model of {args.data} has "
                                 "unscored items")
            if keep.size < sm.n_models:
                sm = sm.take(models=keep)
        if not sm.is_complete:
            rows = int((~sm.mask.all(axis=1)).sum())
            raise ValueError(
                f"DATA {args.data}: {rows} of {sm.n_models} models have unscored items (e.g. "
                f"{sm.models[~sm.mask.all(axis=1)][:3].tolist()}); anchors are fitted on fully "
                "scored models: pass --drop-incomplete to leave those out")
        try:
            pred = jaxeval.fit_anchors(sm, args.k, method=args.method, seed=args.seed,
                                       alpha=args.alpha, progress=not args.quiet)
        except ValueError as e:
            # fit_anchors' messages name its own arguments; say which data they are about
            raise ValueError(f"DATA {args.data} ({sm.n_models} models after removing "
                             f"duplicates, {sm.n_items} items), --k {args.k}: {e}") from None
        pred.save(out)
        print("\n".join(pred.anchor_items.tolist()))
        what = ("each model's full-benchmark score (the data's target)" if pred.external_target
                else f"each model's mean score over the {sm.n_items} items")
        print(f"saved {out}: {pred!r}; it estimates {what}, as a fraction in [0, 1]",
              file=sys.stderr)
        return 0
    if args.extra is not None and args.extra < 1:
        raise ValueError(f"--extra: expected M >= 1 extra items, got {args.extra}")
    if args.extra is None and args.extra_seed is not None:
        raise ValueError("--extra-seed: only with --extra M (the seed of the M extra items)")
    extra_seed = 0 if args.extra_seed is None else args.extra_seed
    if extra_seed < 0:
        raise ValueError(f"--extra-seed: expected a non-negative integer, got {extra_seed}")
    pred = jaxeval.AnchorPredictor.load(args.file)
    if args.extra is not None:  # before any extra item is drawn, let alone scored
        pred._check_unbiased("--extra")
    if args.extra is not None and args.extra > pred.items.size - pred.k:
        raise ValueError(f"--extra: at most {pred.items.size - pred.k} items are not anchors "
                         f"({pred.items.size} items, {pred.k} anchors), got {args.extra}")
    if args.action == "items":
        names = (pred.extra_items(args.extra, seed=extra_seed) if args.extra
                 else pred.anchor_items)
        print("\n".join(np.asarray(names).astype(str).tolist()))
        return 0
    if _is_table(args.scores):
        return _predict_table(pred, args)
    given = [f for f, v in (("--sep", args.sep), ("--metric", args.metric),
                            ("--filter", args.filter), ("--task", args.task),
                            ("--runs", args.runs),
                            ("--duplicate-names", args.duplicate_names)) if v is not None]
    if given:
        raise ValueError(f"{given[0]}: only for a score table or lm-evaluation-harness output "
                         f"of many models, not one model's JSON scores ({args.scores})")
    scores = _read_json(args.scores, "scores", _ONE_MODEL_JSON)
    extra = (np.asarray(pred.extra_items(args.extra, seed=extra_seed)).astype(str)
             if args.extra else np.zeros(0, str))
    if isinstance(scores, dict) and scores and all(isinstance(v, dict)
                                                   for v in scores.values()):
        raise ValueError(f"scores: one model per file; {args.scores} holds an object of "
                         f"{len(scores)} object(s) (keys like {next(iter(scores))!r})"
                         + _ONE_MODEL_JSON)
    if isinstance(scores, dict):
        # keys that are items of the benchmark but not asked for: extra items of another
        # --extra / --extra-seed than the ones given to `anchors items`
        asked = set(pred.anchor_items.tolist()) | set(extra.tolist())
        others = set(scores) - asked
        hint = ""
        if others and others <= set(np.asarray(pred.items).astype(str).tolist()):
            hint = ("; they are items of the benchmark: pass the --extra M and --extra-seed "
                    "given to `jaxeval anchors items`" if args.extra else
                    "; they are items of the benchmark: for extra items pass --extra M "
                    "(and --extra-seed) as given to `jaxeval anchors items`")
        x = _by_name(scores, pred.anchor_items, "scores (anchor items)", asked, hint)
    elif args.extra:
        raise ValueError("scores: with --extra give a mapping {item: score}")
    else:
        x = np.asarray(scores, dtype=object)
        if x.ndim != 1 or not all(isinstance(v, (int, float)) for v in x):
            raise ValueError(f"scores: expected {pred.k} numbers in anchor order or a "
                             "mapping {item: score}")
        x = x.astype(np.float64)
    try:
        est, lo, hi = pred.predict(x)
    except ValueError as e:  # name the command's argument, not predict()'s
        raise ValueError(_renamed(str(e), {"anchor_scores": f"scores ({args.scores})"})
                         ) from None
    res = {"estimate": float(est), "lower": float(lo), "upper": float(hi),
           "level": 1 - float(pred.alpha)}
    if args.extra:
        ys = _by_name(scores, extra, "scores (extra items)", asked)
        try:
            e_u, l_u, h_u = pred.predict_unbiased(x, extra, ys)
        except ValueError as e:  # name the command's argument, not the method's
            raise ValueError(_renamed(str(e), {"extra_scores": f"scores ({args.scores}) "
                                               "(extra items)"})) from None
        res.update(unbiased={"estimate": float(e_u), "lower": float(l_u),
                             "upper": float(h_u), "extra_items": int(args.extra)})
    print(json.dumps(res))
    return 0


_TABLE_SUFFIXES = (".csv", ".tsv", ".npz", ".parquet", ".pq")


def _is_table(value: str) -> bool:
    """Whether ``anchors predict``'s SCORES is many models' scores (a table, or lm-eval
    samples: a folder, a ``samples_*.jsonl`` / ``.jsonl.gz`` file) rather than one
    model's JSON (any other name, ``.jsonl`` included)."""
    from jaxeval._lmeval import is_samples_name

    p = Path(value)
    if (value != "-" and p.is_dir()) or p.suffix.lower() in _TABLE_SUFFIXES:
        return True
    if not is_samples_name(p.name):
        return False
    if p.name.lower().endswith(".gz") or p.name.lower().startswith("samples_"):
        return True
    try:  # a .jsonl of another name: samples where it holds more than one JSON line
        with open(p, "rb") as f:
            return sum(1 for line in f if line.strip()) > 1
    except OSError:
        return False


def _predict_table(pred, args: argparse.Namespace) -> int:
    """``anchors predict FILE TABLE``: one JSON line per model of a score table (models
    as rows, items as columns or a long table; any other items are ignored)."""
    if args.extra is not None:
        raise ValueError("--extra: the unbiased estimate is one model at a time (a JSON "
                         "{item: score} per model, its extra items drawn with its own seed); "
                         "a table gives the anchor estimates only")
    try:
        sm = _load_table_arg("SCORES", args.scores, args.sep, _lm_eval_options(args, ""),
                             args.duplicate_names, prefix="")
    except ValueError as e:
        if str(e).startswith("--"):  # (an option's own refusal: not about the data)
            raise
        raise ValueError(f"scores: {e} (anchors predict reads a table of models as rows, "
                         "lm-evaluation-harness output, or one model's scores as JSON "
                         "{item: score})") from None
    missing = pred._missing_anchors(sm)
    if missing:
        none = len(missing) == pred.k
        found = np.asarray(sm.items).astype(str).tolist()
        raise ValueError(f"scores ({args.scores}): no column for {len(missing)} of the "
                         f"{pred.k} anchor items, e.g. {missing[:5]} (the items `jaxeval "
                         f"anchors items FILE` prints); its {len(found)} items are named like "
                         f"{found[:5]}"
                         + ("; a table holds one row per model and the items as columns "
                            "(or long columns model,item,score); one model's scores can be "
                            "JSON {item: score}; lm-evaluation-harness items are named by "
                            "doc_id (TASK/doc_id where several tasks are read: --task picks "
                            "one)" if none else ""))
    t = sm.take(items=pred.anchor_items)
    scored = t.mask.all(axis=1) if t.mask is not None else np.ones(t.n_models, bool)
    names = np.asarray(sm.models).astype(str).tolist()
    level = 1 - float(pred.alpha)
    if scored.any():
        pred._check_source(sm, f"scores ({args.scores})")  # (named as the command names it)
        try:  # (by item name)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "anchor_scores: lm-evaluation-harness")
                est, lo, hi = pred.predict(sm.take(models=np.flatnonzero(scored)))
        except ValueError as e:  # name the command's argument and the model, not predict()'s
            msg = _renamed(str(e), {"anchor_scores": f"scores ({args.scores})"})
            m = re.search(r"first at \((\d+), \d+\)", msg)
            if m:
                msg += f" (model {names[int(np.flatnonzero(scored)[int(m.group(1))])]!r})"
            raise ValueError(msg) from None
        for name, e, a, b in zip(np.asarray(names)[scored].tolist(), est, lo, hi):
            print(json.dumps({"model": name, "estimate": float(e), "lower": float(a),
                              "upper": float(b), "level": level}))
    if scored.all():
        return 0
    # models with an unscored anchor: named with their missing items, after the others'
    # estimates (one model's gap does not cost the batch); the exit status says it
    anchors = np.asarray(pred.anchor_items).astype(str)
    for r in np.flatnonzero(~scored):
        gap = anchors[~t.mask[r]].tolist()
        print(f"jaxeval anchors: error: scores ({args.scores}): model {names[r]!r} has no "
              f"score for {len(gap)} of the {pred.k} anchor items, e.g. {gap[:5]}: not "
              "estimated", file=sys.stderr)
    return 2


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line of the command's own voice (``jaxeval: warning: ...``),
    not Python's ``path:line: UserWarning`` with a line of the library's source."""
    kind = "warning" if category is UserWarning else category.__name__
    here = Path(__file__).resolve().parent  # the installed package (not any "jaxeval" folder)
    try:
        ours = Path(str(filename)).resolve().is_relative_to(here)
    except (OSError, ValueError):
        ours = False
    if not ours:  # another library's: say whose
        kind += f" (from {Path(str(filename)).name})"
    try:
        print(f"jaxeval: {kind}: {message}", file=sys.stderr if file is None else file)
    except OSError:  # a closed stderr: as warnings.showwarning does, say nothing
        pass


#: The study folder an interrupted ``run`` / ``resume`` leaves (set by those commands).
_STUDY_FOLDER: list[str] = []


def cli(argv: list[str] | None = None) -> int:
    """The ``jaxeval`` command itself (console script, ``python -m jaxeval``):
    :func:`main` with warnings shown as one line of the command (``main`` called from
    code leaves the caller's warning handling alone, e.g. ``pytest.warns``).

    Ctrl-C stops it with one line that says how to continue a study (instead of a
    traceback), then ends the process by the signal itself, as Python does, so that a
    calling shell loop stops too. SIGTERM keeps its default action (an immediate end):
    a handler would run only once the current compiled chunk returns."""
    _STUDY_FOLDER.clear()
    try:
        with warnings.catch_warnings():  # the previous display is back afterwards
            warnings.showwarning = _show_warning
            return main(argv)
    except KeyboardInterrupt:
        import signal

        hint = ""
        if _STUDY_FOLDER and (Path(_STUDY_FOLDER[0]) / "manifest.json").is_file():
            hint = (f"; the finished chunks are kept in {_STUDY_FOLDER[0]}: `jaxeval resume "
                    f"{_q(_STUDY_FOLDER[0])}` continues the study")
        print(f"jaxeval: interrupted{hint}", file=sys.stderr, flush=True)
        if hasattr(signal, "SIGINT") and hasattr(os, "kill"):
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return 130


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jaxeval`` command."""
    _STUDY_FOLDER.clear()  # (set by the study commands for their messages)
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.version:
        import jaxeval

        print(jaxeval.__version__)
        return 0
    if args.command is None:  # a usage error, as a subcommand without its action
        parser.print_help(sys.stderr)
        cmds = next(a.choices for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction))
        print(f"\njaxeval: error: a command is required: one of {', '.join(cmds)}",
              file=sys.stderr)
        return 2
    if args.command == "example":
        print(json.dumps(_example(args.kind), indent=1))
        return 0
    _setup_jax(args, argv)
    from jaxeval._study import (
        StudyFolderError,
        extend_study,
        load_study,
        merge_studies,
        resume_study,
        run_study,
        study_status,
    )

    try:
        if args.command == "datasets":
            return _cmd_datasets(args)
        if args.command == "campaign":
            return _cmd_campaign(args)
        if args.command == "anchors":
            return _cmd_anchors(args)
        if args.command == "main":
            return _cmd_main(args)
        if args.command == "run":
            study = load_study(args.config)
            _STUDY_FOLDER[:] = [str(args.out)]
            try:
                folder = run_study(
                    study, args.out, replicate_range=_parse_range(args.range),
                    progress=not args.quiet, problem_from=args.problem_from,
                )
            except ValueError as e:
                if os.environ.get("JAXEVAL_DEBUG"):
                    raise
                raise ValueError(_renamed(
                    str(e), {"problem_from": "--problem-from", "replicate_range": "--range"},
                    (":", " must"))) from None
            if not args.no_report:
                _report(folder)
            return 0
        if args.command == "resume":
            _STUDY_FOLDER[:] = [str(args.dir)]
            folder = resume_study(args.dir, progress=not args.quiet)
            if not args.no_report:
                _report(folder)
            return 0
        if args.command == "extend":
            _STUDY_FOLDER[:] = [str(args.dir)]
            before = study_status(args.dir)["units"]
            if args.to == before and args.no_run:
                print(f"[jaxeval] {args.dir}: the study already has {before} units; nothing "
                      "to do (--no-run)", file=sys.stderr, flush=True)
                return 0
            if args.to == before:  # (this command again, after it was stopped: continue)
                if not args.quiet:
                    print(f"[jaxeval] {args.dir}: the study already has {before} units; "
                          "continuing it", file=sys.stderr, flush=True)
            else:
                try:
                    extend_study(args.dir, args.to)
                except ValueError as e:
                    if os.environ.get("JAXEVAL_DEBUG"):
                        raise
                    raise ValueError(_renamed(str(e), {"n_units": "--to"})) from None
                if not args.quiet:
                    print(f"[jaxeval] {args.dir}: the study now has {args.to} units (it had "
                          f"{before})" + ("" if args.no_run else "; computing the new ones"),
                          file=sys.stderr, flush=True)
            if args.no_run:
                print(f"[jaxeval] {args.dir}: nothing computed (--no-run); compute the new "
                      f"units with `jaxeval resume {_q(args.dir)}`, or as range jobs of "
                      f"{Path(args.dir) / 'study.json'} merged with it", file=sys.stderr,
                      flush=True)
                return 0
            folder = resume_study(args.dir, progress=not args.quiet)
            if not args.no_report:
                _report(folder)
            return 0
        if args.command == "merge":
            _STUDY_FOLDER[:] = [str(args.out)]  # (a failed write is said to be there)
            folder = merge_studies(args.dirs, args.out)
            st = study_status(folder)
            n = len(args.dirs)
            # the units done of the study's, per task where the tasks differ
            done, units = st["done"], st["units"]
            if len(set(done.values())) == 1:
                counts = (f"{next(iter(done.values()))} of {units} units"
                          + (" per task" if len(done) > 1 else ""))
            else:
                counts = (f"units done of {units}: "
                          + ", ".join(f"{t} {d}" for t, d in done.items()))
            def spans(todo):
                return (", ".join(f"{a}:{b}" for a, b in todo[:5])
                        + (", ..." if len(todo) > 5 else ""))

            todos = {t: [tuple(g) for g in v] for t, v in st["todo"].items() if v}
            if len({tuple(v) for v in todos.values()}) == 1:  # (the same in every task)
                missing = "units " + spans(next(iter(todos.values())))
            else:
                missing = "; ".join(f"{t} units {spans(v)}" for t, v in todos.items())
            print(
                f"merged {n} folder{'s' if n != 1 else ''} into {folder}: {counts}"
                + (" (complete)" if st["complete"] else
                   f" (incomplete: {missing} missing; `jaxeval resume {_q(folder)}` "
                   "computes them, or merge their folders too)")
            )
            return 0
        if args.command == "status":
            print(json.dumps(study_status(args.dir, verify=args.verify), indent=1))
            return 0
        if args.command == "summary":
            from jaxeval._report import format_summary, summarize, write_summary

            study, results = _results_for_report(args.dir)
            s = summarize(study, results)
            try:  # (written before printing: a reader that goes away stops the print)
                write_summary(s, args.dir)
            except OSError as e:  # e.g. a read-only folder: the table is still printed
                print(f"jaxeval summary: warning: summary.json not written: {_os_reason(e)}",
                      file=sys.stderr)
            print(json.dumps(s, indent=1) if args.json else format_summary(s))
            return 0
        if args.command == "plot":
            from jaxeval._report import plot_study, summarize

            study, results = _results_for_report(args.dir)
            paths = plot_study(summarize(study, results), args.out or Path(args.dir) / "plots")
            if not paths:
                print(f"{args.dir}: nothing to plot for a {study.kind} study (its results: "
                      "jaxeval.load_results)", file=sys.stderr)
            print("\n".join(str(p) for p in paths))
            return 0
    except BrokenPipeError:
        # the reader went away (e.g. `jaxeval summary runs/s | head`): not an error of the
        # command, whose files are written before it prints; stop quietly (Python's
        # documented recipe: point stdout at devnull so the exit flush cannot fail again)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (ValueError, TypeError, RuntimeError, ImportError, OSError, StudyFolderError) as e:
        # StudyConfigError is a ValueError; so is every refusal of bad data or settings
        if os.environ.get("JAXEVAL_DEBUG"):
            raise
        msg = str(e)
        if isinstance(e, OSError) and e.filename is None and _STUDY_FOLDER:
            # (a write that failed for want of space or quota names no file: the folder)
            msg = f"{_os_reason(e)} (writing in {_STUDY_FOLDER[0]})"
            if (Path(_STUDY_FOLDER[0]) / "manifest.json").is_file():
                msg += (f"; the finished chunks are kept: `jaxeval resume "
                        f"{_q(_STUDY_FOLDER[0])}` continues the study")
        print(f"jaxeval {args.command}: error: {msg}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover
    return 2
