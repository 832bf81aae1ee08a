"""A study's progress line counts a chunk only once it is on disk: after a kill, the
last line printed never claims units that a resume has to compute again."""

import pytest
from test_study import TESTS, toy_config

from jaxeval import _runner
from jaxeval._study import run_study, study_from_dict


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


@pytest.mark.parametrize("cfg", [
    toy_config(n_replicates=200, chunk_size=64),
    {"kind": "anchors", "data": {"dataset": "oll2_musr"}, "methods": ["random_mean"],
     "k": [20], "n_seeds": 2},
])
def test_a_progress_line_follows_its_chunk_on_disk(tmp_path, monkeypatch, cfg):
    seen = []
    real = _runner.Progress.update

    def update(self, n):
        on_disk = sum(1 for _ in (tmp_path / "o" / "chunks").rglob("*.npz"))
        seen.append((self.done + n, on_disk))
        return real(self, n)

    monkeypatch.setattr(_runner.Progress, "update", update)
    study = study_from_dict(cfg)
    run_study(study, tmp_path / "o", progress=True)
    (task,) = study.tasks()
    cs = task.chunk_size() if callable(task.chunk_size) else task.chunk_size
    ends = [min(e, study.n_units) for e in range(cs, study.n_units + cs, cs)]
    assert len(ends) > 1 and [d for d, _ in seen] == ends
    # the chunk counted by each line was written before the line
    assert [f for _, f in seen] == list(range(1, len(ends) + 1))
