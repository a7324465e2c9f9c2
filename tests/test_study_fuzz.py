"""Malformed study files: every key of a shipped study, replaced by values of the wrong type or
range, is either refused with one SpecError naming the file and that key (exit 2) or runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dse.errors import SpecError, SpecErrors
from dse.search.runner import run_study
from dse.study import load_study

STUDY = Path(__file__).parent.parent / "studies" / "draft-chip.yaml"
BAD = [None, "x", {"a": 1}, 1e308, True]


def _paths(d, pre=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield pre + (k,)
            yield from _paths(v, pre + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield pre + (i,)
            yield from _paths(v, pre + (i,))


BASE = yaml.safe_load(STUDY.read_text())
CASES = [(p, v) for p in _paths(BASE) for v in BAD]


def test_every_key_of_a_shipped_study_rejects_or_runs(tmp_path):
    ran, refused = 0, 0
    for p, v in CASES:
        raw = copy.deepcopy(BASE)
        node = raw
        for k in p[:-1]:
            node = node[k]
        node[p[-1]] = v
        raw["output"] = str(tmp_path / "out.parquet")
        f = tmp_path / "s.yaml"
        f.write_text(yaml.safe_dump(raw))
        try:
            study = load_study(f)
        except (SpecError, SpecErrors) as exc:
            errors = getattr(exc, "errors", [exc])
            assert all(e.path == str(f) for e in errors), (p, v, str(exc))
            refused += 1
            continue
        # force: each case is another study; the random sampler where the case is not the search's own
        # key (sampler auto's pre-search, a second of numpy a run, is not what a changed key tests)
        run_study(study, n_trials=2, storage=":memory:", progress=False, force=True,
                  sampler=None if p[0] == "search" else "random")
        ran += 1
    assert refused > 3 * ran > 0, (refused, ran)


@pytest.mark.parametrize("section", ["target_chip", "draft_chip"])
def test_null_peak_tflops_is_refused(tmp_path, section):
    raw = copy.deepcopy(BASE)
    raw["space"][section]["peak_tflops"] = None
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as e:
        load_study(f)
    assert str(e.value) == (f"{f}: space.{section}.peak_tflops: expected a value or range (dense BF16 TFLOP/s)")
