"""The verdict of benchmarks/bench_versus_pinned.py on hand-made ratios, and its allow-list's
reasons stated in docs/benchmarks.md (the script lets a workload exceed 1.2x only then)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_versus_pinned", REPO / "benchmarks" / "bench_versus_pinned.py")
bvp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bvp)

REASON = "writes 17 more columns"


@pytest.mark.parametrize("ratio, allowed, documented, ok, words", [
    (1.0, None, False, True, "PASS"),
    (1.2, None, False, True, "PASS"),
    (0.8, None, False, True, "PASS (faster)"),
    (1.21, None, False, False, "FAIL (> 1.2x)"),
    (1.3, (1.35, REASON), True, True, "PASS (allowed up to 1.35x"),
    (1.3, (1.35, REASON), False, False, "FAIL (> 1.2x; its reason in ALLOWED is not in docs"),
    (1.4, (1.35, REASON), True, False, "FAIL (> 1.35x, its allowed bound)"),
])
def test_verdict(ratio, allowed, documented, ok, words):
    got_ok, got_words = bvp.verdict(ratio, allowed, documented)
    assert got_ok is ok
    assert got_words.startswith(words)


def test_documented_ignores_line_breaks_but_not_generated_blocks():
    assert bvp.documented("the sweep writes   every\ncolumn", "Why: the sweep\nwrites every column.")
    assert not bvp.documented("the sweep writes every column", "the sweep writes some columns")
    generated = "<!-- gen:measured python x.py -->\n```\nthe sweep writes every column\n```\n<!-- /gen -->"
    assert not bvp.documented("the sweep writes every column", generated)


def test_same_work():
    assert bvp.same_work("sweep", 14, {"points": 10}, {"points": 10}) is None
    assert "grid points differ" in bvp.same_work("sweep", 14, {"points": 10}, {"points": 11})
    assert bvp.same_work("run", 5, {"trials": 5}, {"trials": 5}) is None
    assert "trials differ" in bvp.same_work("run", 5, {"trials": 5}, {"trials": 4})


def test_every_allowed_reason_is_in_the_docs():
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    for name, (bound, reason) in bvp.ALLOWED.items():
        assert bound > bvp.LIMIT, name
        assert bvp.documented(reason, docs), f"docs/benchmarks.md does not state why {name} may exceed {bvp.LIMIT}x"
