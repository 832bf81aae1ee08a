"""``bench_anchors.py`` with ``greedy_mlp_ens`` in place of ``greedy_mlp`` among ``auto``'s
validation-regime candidates: what adopting the ensemble would do to ``auto`` on a cell,
before the issue-8 table is rerun with it (BUILD_NOTES.md, thirty-second session).
Since the ensemble became that candidate by default, the patch below changes nothing;
the script is kept because the thirty-second to thirty-fourth sessions' records of
``benchmarks/results/anchors_auto_ens_mmlu.jsonl`` and ``anchors_issue8_ens.jsonl``
were made with it.

Takes ``bench_anchors.py``'s arguments, e.g.::

    python benchmarks/experiments/auto_with_mlp_ens.py --rows custom --datasets mb_mmlu \\
        --k 100 --methods auto --seeds 5 --mlp never \\
        --out benchmarks/results/anchors_auto_ens_mmlu.jsonl
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("NPROC", "32")  # as bench_anchors.py, before JAX starts
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxeval.anchors._methods as M  # noqa: E402

M.AUTO_VALIDATION_EXTRA = ("greedy_resmlp", "greedy_mlp_ens")

import bench_anchors  # noqa: E402

if __name__ == "__main__":
    bench_anchors.main(sys.argv[1:])
