"""k = auto up to 16 where acceptance is high (issue 17, item 8)."""

import sys

import numpy as np
import pytest

from dse.api import evaluate_design, hardware_arrays
from dse.model import DesignBatch, evaluate
from dse.workload.spec import Workload, make_acceptance, parse_drafter

CASE = dict(hw="h200", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.9)


def test_high_acceptance_takes_k_past_the_old_cap_of_8():
    """Issue 17: at alpha 0.9, Llama-3.1-70B fp8 + a 1B draft on one H200, k = 12 is 5.6% faster
    than k = 8. tau(8) = (1 - 0.9^9)/0.1 = 6.1258, tau(12) = (1 - 0.9^13)/0.1 = 7.4581 (+21.7%);
    the iteration grows by 4 draft steps (the verify pass stays memory-bound), +15.3%."""
    r8, r12 = evaluate_design(**CASE, k=8), evaluate_design(**CASE, k=12)
    assert r8["tau"] == pytest.approx((1 - 0.9 ** 9) / 0.1) and r12["tau"] == pytest.approx((1 - 0.9 ** 13) / 0.1)
    assert r12["tau"] / r8["tau"] == pytest.approx(1.2175, abs=1e-4)
    assert r12["iter_ms"] / r8["iter_ms"] == pytest.approx(1.1530, abs=1e-3)
    assert r8["spec_ms_per_token"] / r12["spec_ms_per_token"] == pytest.approx(1.056, abs=1e-3)
    auto = evaluate_design(**CASE)
    assert auto["k"] == 13
    assert r8["spec_ms_per_token"] / auto["spec_ms_per_token"] == pytest.approx(1.0567, abs=1e-3)
    # the cap is the workload's k_max (16 by default); k_max 8 gives the old answer
    assert evaluate_design(**CASE, k_max=8)["k"] == 8


def test_low_acceptance_stays_short():
    """At alpha 0.6 the chain's tau barely grows past k = 4 (0.6^5 = 0.078 a token), and k stays small."""
    r = evaluate_design(**{**CASE, "alpha": 0.6})
    assert r["k"] <= 5


@pytest.mark.parametrize("loop", [False, True])
def test_fixed_k_past_8_beside_auto_rows(db, monkeypatch, loop):
    """A batch whose rows fix k = 12 and k = 3 beside a k = auto row at batch 256 (which takes a
    small k: no k past 8 can win there): the first pass covers k = 1..12, the largest fixed k, and
    each row gets what it gets alone, in the broadcast pass and in the k-by-k loop."""
    if loop:
        monkeypatch.setattr(sys.modules["dse.model.latency"], "MIN_ROWS_K_LOOP", 1)
    tgt = db.model("llama-3.1-70b")
    w = Workload(target=tgt, drafter=parse_drafter("llama-3.2-1b", tgt, db), acceptance=make_acceptance(0.9),
                 dtype="fp8", kv_dtype="bf16")
    h = hardware_arrays(db.device("h200"), db.runtime("graphs"), np.ones(3, dtype=np.int64), "fp8")
    batch = DesignBatch(target=h, draft=h, draft_on_chip=False, draft_link_bw_bytes_s=0.0, draft_link_latency_s=0.0,
                        batch=np.array([256, 1, 1]), prompt_tokens=128, output_tokens=128, k=np.array([0, 12, 3]))
    m = evaluate(batch, w, dedupe=False)
    assert m.k.tolist() == [1, 12, 3]
    for i, (k, b) in enumerate((("auto", 256), (12, 1), (3, 1))):
        alone = evaluate_design(**CASE, k=k, batch=b)
        assert m.spec_s_per_token[i] * 1e3 == pytest.approx(alone["spec_ms_per_token"], rel=1e-12)
        assert m.tau[i] == pytest.approx(alone["tau"], rel=1e-12)


@pytest.mark.parametrize("loop", [False, True])
def test_an_auto_row_keeps_its_k_max_whatever_k_another_row_fixes(db, monkeypatch, loop):
    """k_max caps k = auto row by row: with k_max 8 the auto row takes k = 8 (alone, at alpha 0.9
    it would go on to 13), also when another row of the batch fixes k = 12 or 20 (the batch's
    candidates then reach that k; they are not the auto row's). Rows are independent."""
    if loop:
        monkeypatch.setattr(sys.modules["dse.model.latency"], "MIN_ROWS_K_LOOP", 1)
    tgt = db.model("llama-3.1-70b")
    w = Workload(target=tgt, drafter=parse_drafter("llama-3.2-1b", tgt, db), acceptance=make_acceptance(0.9),
                 dtype="fp8", kv_dtype="bf16", k_max=8)
    alone = evaluate_design(**CASE, k_max=8)
    assert alone["k"] == 8
    for other in (12, 20):
        h = hardware_arrays(db.device("h200"), db.runtime("graphs"), np.ones(2, dtype=np.int64), "fp8")
        batch = DesignBatch(target=h, draft=h, draft_on_chip=False, draft_link_bw_bytes_s=0.0,
                            draft_link_latency_s=0.0, batch=1, prompt_tokens=128, output_tokens=128,
                            k=np.array([0, other]))
        for k_bound in (True, False):
            m = evaluate(batch, w, dedupe=False, k_bound=k_bound)
            assert m.k.tolist() == [8, other]
            assert m.spec_s_per_token[0] * 1e3 == pytest.approx(alone["spec_ms_per_token"], rel=1e-12)


@pytest.mark.parametrize("draft_hw, alpha, k", [("h100-sxm", 0.95, 16), ("rtx-4090", 0.95, 12), ("a100-80gb", 0.9, 11)])
def test_auto_k_is_the_best_fixed_k_when_drafting_overlaps(draft_hw, alpha, k):
    """Llama-3.1-70B fp8 on an H100 with the 1B draft on a draft chip, overlapped: most of each draft
    step hides behind the verify pass, so k = auto goes far past 8, and the bound that lets it
    (the exposed (1 - p_window) share of the draft) must not cut off the best k: auto is the best
    of the 16 fixed k."""
    kw = dict(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", draft_hw=draft_hw,
              overlap=True, alpha=alpha)
    per_k = [evaluate_design(**kw, k=j)["spec_ms_per_token"] for j in range(1, 17)]
    auto = evaluate_design(**kw)
    assert auto["k"] == k == 1 + int(np.argmin(per_k))
    assert auto["spec_ms_per_token"] == pytest.approx(min(per_k), rel=1e-12)


@pytest.mark.parametrize("draft, alpha, depth", [("eagle", 0.9, 9), ("eagle", 0.95, 15), ("llama-3.2-1b", 0.95, 9)])
def test_auto_depth_of_a_tree_is_the_best_fixed_depth(draft, alpha, depth):
    """A 64-node tree on Llama-3.1-8B (H100): k = auto is the tree's depth bound, and past 8 the
    bound that admits a deeper tree counts one draft step per level the tree uses; auto must be
    the best of the 16 fixed depth bounds."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft=draft, alpha=alpha, tree_nodes=64)
    per_k = [evaluate_design(**kw, k=j)["spec_ms_per_token"] for j in range(1, 17)]
    auto = evaluate_design(**kw)
    assert auto["k"] == depth == 1 + int(np.argmin(per_k))
    assert auto["spec_ms_per_token"] == pytest.approx(min(per_k), rel=1e-12)
