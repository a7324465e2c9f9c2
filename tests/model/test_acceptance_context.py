"""The long-context term of EAGLE-family heads (dse.acceptance.fit.context_slope, issue 29 item 5):
logit(alpha) -= c * min(max(0, log2(S / S0)), log2(S_max / S0))^2, S0 = 2,048, c fitted on the
table's context series (speculators PR 684: an EAGLE-3 head on Qwen3-8B, tau 2.295 at 2k .. 1.084
at 20k, LongBench-v2, T = 0)."""

from __future__ import annotations

import math

import pytest

from dse.acceptance import fit as acc
from dse.acceptance.resolve import resolve
from dse.catalog.acceptance import load_table, row_by_id
from dse.catalog.database import load_database
from dse.workload.spec import parse_drafter, parse_task

TERM = {"slope": 1.0, "s0": 2048.0, "s_max": 20480.0, "methods": ["eagle", "eagle2", "eagle3"]}


def test_the_term_worked_by_hand():
    """c = 1: S = 8,192 is two doublings past 2,048: -2^2 = -4.0; S = 65,536 is held at 20,480:
    -log2(10)^2 = -11.0352; S = 1,024 (below S0) and a Medusa head: 0."""
    assert acc.context_term(TERM, "eagle3", 8192) == pytest.approx(-4.0)
    assert acc.context_term(TERM, "eagle3", 65536) == pytest.approx(-11.035206, abs=1e-6)
    assert acc.context_term(TERM, "eagle3", 1024) == 0.0
    assert acc.context_term(TERM, "medusa", 65536) == 0.0


def test_the_loader_reads_the_context_column():
    rows = load_table()
    assert row_by_id(rows, "spec684-07").context_tokens == 14336         # '14k' as 14 x 1,024
    assert row_by_id(rows, "spec684-01").stat_value == 2.295
    assert row_by_id(rows, "lev23-01").context_tokens is None             # every earlier row: short or unstated
    assert sum(r.context_tokens is not None for r in rows) == 10


def test_the_slope_from_two_published_rows_by_hand():
    """The 2k and 8k rows alone, read at a chain of 3: tau 2.295 = 1 + a + a^2 + a^3 -> a = 0.63521,
    logit 0.55463; tau 1.687 -> a = 0.42692, logit -0.29441; x = 0 and log2(8192 / 2048) = 2, x^2 = 4:
    c = (0.55463 + 0.29441) / 4 = 0.21226."""
    rows = [r for r in load_table() if r.id in ("spec684-01", "spec684-04")]
    c = acc.context_slope(rows)
    assert c["slope"] == pytest.approx(0.21226, abs=1e-4)
    assert c["s_max"] == 8192 and c["rows"] == ["spec684-01", "spec684-04"]


def test_the_stored_fit_has_the_fitted_term_and_the_data_say_it_falls():
    f = acc.stored_fit()
    c = f.context
    assert c["rows"] == [f"spec684-{i:02d}" for i in range(1, 11)] and c["s0"] == 2048 and c["s_max"] == 20480
    # every later context of the series below the 2k row: the data fall, so the fitted slope is positive
    taus = [row_by_id(load_table(), f"spec684-{i:02d}").stat_value for i in range(1, 11)]
    assert all(t < taus[0] for t in taus[1:]) and 0.2 < c["slope"] < 0.4
    assert acc.context_slope(load_table())["slope"] == pytest.approx(c["slope"])


@pytest.mark.parametrize("draft", ["eagle3", "eagle"])
def test_a_head_at_32k_accepts_less_than_at_2k_and_short_contexts_are_unchanged(draft):
    db = load_database()
    tgt = db.model("llama-3.1-8b")
    d = parse_drafter(draft, tgt, db)

    def alpha(S):
        return resolve(tgt, d, parse_task("chat"), 0.0, db, context_tokens=S).tasks[0].alpha
    short = alpha(0.0)
    assert alpha(256.0) == short and alpha(2048.0) == short
    a32 = alpha(32768.0)
    assert a32 < alpha(4096.0) < short
    # the drop is the fitted term on logit(alpha), held at 20,480
    c = acc.stored_fit().context["slope"]
    logit = math.log(short / (1 - short)) - c * math.log2(20480 / 2048) ** 2
    assert a32 == pytest.approx(1 / (1 + math.exp(-logit)), rel=1e-9)


def test_a_medusa_head_and_a_draft_model_ignore_the_context():
    db = load_database()
    tgt = db.model("llama-3.1-8b")
    for draft in ("medusa:4", "llama-3.2-1b"):
        d = parse_drafter(draft, tgt, db)
        a = [resolve(tgt, d, parse_task("chat"), 0.0, db, context_tokens=S).tasks[0].alpha for S in (0.0, 32768.0)]
        assert a[0] == a[1]
