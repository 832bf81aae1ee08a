"""What the README's campaign costs with 10 candidates: calls to its confident stop.

The README's campaign example (IFEval, history = half the deduplicated models, split
seed 0, batches of 8) with the first 10 other models as candidates and a budget of K·n,
answered from the known matrix; once with ``skip_separated`` at its default (on) and
once off. Prints the calls, their share of K·n, the top-two gap and the final status.

    python benchmarks/experiments/campaign_cost.py
"""

from __future__ import annotations

import numpy as np

import jaxeval


def main():
    sm = jaxeval.load("oll2_ifeval").drop_duplicates()
    history, others = sm.split([sm.n_models // 2], seed=0)
    new = others.take(models=range(10))
    acc = np.sort(new.scores.mean(1))
    print(f"top-two gap {acc[-1] - acc[-2]:.4f} ({(acc[-1] - acc[-2]) * new.n_items:.0f} items)")
    for skip in (None, False):
        camp = jaxeval.IdentificationCampaign(new.models, history, batch_size=8,
                                              skip_separated=skip)
        while (req := camp.ask()) is not None:
            camp.tell(req, new.take(models=[req.model], items=req.items).scores[0])
        st = camp.status()
        print(f"skip_separated={skip}: {st.calls} calls, {st.calls / (10 * new.n_items):.1%} "
              f"of K*n, {st.reason}; scored {st.pulls.tolist()}")


if __name__ == "__main__":
    main()
