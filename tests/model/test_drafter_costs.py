"""What each drafter kind costs per iteration on a real part (efficiencies, streaming factors,
several chips, fp8 compute factor, weight-only fp8), worked by hand from the database YAML, and
the software's share of it (overhead_ms_per_token) per drafter kind. The ideal-part tests in
test_trees.py pin the shapes; these pin every factor the ideal part sets to 1.

Numbers used below: H100 SXM 3.35e12 B/s at 0.83, 989.4 / 1,978.9 TFLOP/s bf16 / fp8 at 0.66;
A100 80GB 2.039e12 B/s at 0.83, 312 TFLOP/s bf16, no fp8 units; the fp8 GEMM factor 0.70
(transformer.COMPUTE_EFFICIENCY_FACTOR); graphs: 6.5 us a kernel, 8 kernels a dense layer,
38 us a step, 100 us an iteration, 1 tree kernel a layer, 30 us a draft-head or tree step;
gpt-fast: the same fixed costs, weight-only int8 streaming at 0.84 of bf16.
Llama-3.1-8B: L 32, d 4,096, V 128,256, so a Medusa/Hydra head is d^2 + dV = 542,113,792
parameters and EAGLE's fc(2d -> d) 2d^2 = 33,554,432."""

from __future__ import annotations

import numpy as np
import pytest

from dse.api import evaluate_design, hardware_arrays
from dse.evaluation.designs import evaluate_study, metric_table
from dse.model.drafters import eagle_head
from dse.model.roofline import step_cost
from dse.model.transformer import step_kwargs
from dse.study import parse_study

HEAD = 542_113_792          # d^2 + dV
FC = 33_554_432             # 2 d^2
BW_H100, BW_A100, ETA_M = 3.35e12, 2.039e12, 0.83
BF16_H100, FP8_H100, BF16_A100, ETA_C = 989.4e12, 1978.9e12, 312e12, 0.66
LAYER_KERNELS = 8 * 6.5e-6  # one head's (or one layer's) kernels under graphs / gpt-fast
KW = dict(target="llama-3.1-8b", alpha=0.8)


def test_medusa_heads_off_the_ideal_part():
    # medusa:4, k = 3 (q = 4 verified positions), all heads read once per pass, FLOPs per position;
    # int8 under gpt-fast on 2 chips: 4 x 542,113,792 x 1 B / 2 = 1,084,227,584 B a chip at
    # 3.35e12 x 0.83 x 0.84 = 2.335620e12 B/s = 464.214 us, against 2 x 4 x 4 x 542,113,792 / 2
    # = 8.674e9 FLOP at 989.4e12 x 0.66 = 13.283 us: memory-bound, + 52 us of kernels = 516.214 us
    r = evaluate_design(hw="h100-sxm", chips=2, draft="medusa:4", k=3, dtype="int8", runtime="gpt-fast", **KW)
    assert r["draft_ms_per_iter"] == pytest.approx(0.516214, abs=5e-7)
    assert r["draft_bound"] == "memory"
    # fp8 at batch 128 on one chip: 2 x 128 x 4 x 4 x 542,113,792 = 2.2205e12 FLOP at 1,978.9e12 x 0.66
    # x 0.70 (fp8 GEMMs) = 914.25e12 FLOP/s = 2,428.760 us against 4 x 542,113,792 B / 2.7805e12 B/s
    # = 779.880 us: compute-bound, 2,480.760 us with the kernels
    r = evaluate_design(hw="h100-sxm", draft="medusa:4", k=3, dtype="fp8", batch=128, **KW)
    assert r["draft_ms_per_iter"] == pytest.approx(2.480760, abs=5e-7)
    assert r["draft_bound"] == "compute"
    # fp8 on an A100 (no fp8 units) runs the heads weight-only like the layers: 1-byte weights at the
    # int8 class's streaming (gpt-fast 0.84), 16-bit math at the 16-bit efficiency (factor 1, not 0.7).
    # Batch 1: 2,168,455,168 B / (2.039e12 x 0.83 x 0.84) = 1,525.372 us + 52 us = 1,577.372 us;
    # batch 128: 2.2205e12 FLOP / (312e12 x 0.66) = 10,783.305 us + 52 us = 10,835.305 us
    a100 = dict(hw="a100-80gb", draft="medusa:4", k=3, dtype="fp8", runtime="gpt-fast", **KW)
    assert evaluate_design(**a100)["draft_ms_per_iter"] == pytest.approx(1.577372, abs=5e-7)
    assert evaluate_design(batch=128, **a100)["draft_ms_per_iter"] == pytest.approx(10.835305, abs=5e-7)


def test_hydra_steps_off_the_ideal_part():
    # hydra:4, a chain of k = 3: one head a step; int8 under gpt-fast on 2 chips: 271,056,896 B a
    # chip / 2.335620e12 B/s = 116.054 us + 52 us of kernels + 30 us draft-step cost = 198.054 us
    # a step, 594.161 us for 3
    r = evaluate_design(hw="h100-sxm", chips=2, draft="hydra:4", k=3, dtype="int8", runtime="gpt-fast", **KW)
    assert r["draft_ms_per_iter"] == pytest.approx(0.594161, abs=5e-7)
    assert r["draft_bound"] == "memory"
    assert r["draft_arithmetic_intensity"] == pytest.approx(2.0, rel=1e-12)     # 2 FLOP a 1-byte weight, one position
    # fp8 at batch 128 on one chip: a head reads 542,113,792 B / 2.7805e12 = 194.970 us; its FLOPs take
    # 2 x 128 x q x 542,113,792 / 914.25e12 = 151.797 us x q. A chain step (q = 1) is memory-bound:
    # 3 x (194.970 + 82) = 830.910 us
    r = evaluate_design(hw="h100-sxm", draft="hydra:4", k=3, dtype="fp8", batch=128, **KW)
    assert r["draft_ms_per_iter"] == pytest.approx(0.830910, abs=5e-7)
    assert r["draft_bound"] == "memory" and r["draft_arithmetic_intensity"] == pytest.approx(256.0, rel=1e-12)
    # a tree: one step per level over its nodes, every level of 2 or more nodes compute-bound.
    # 16 nodes, depth <= 4 (Medusa's profile): 3-4-4-5, 455.392 + 607.190 + 607.190 + 758.987 +
    # 4 x 82 us = 2,756.760 us; 6 nodes: 2-2-1-1, 2 x 303.595 + 2 x 194.970 + 4 x 82 = 1,325.130 us
    r = evaluate_design(hw="h100-sxm", draft="hydra:4", k=4, dtype="fp8", batch=128, tree_nodes=16, **KW)
    assert r["tree_shape"] == "3-4-4-5" and r["rank_profile"] == "medusa"
    assert r["draft_ms_per_iter"] == pytest.approx(2.756760, abs=5e-7)
    assert r["draft_bound"] == "compute"
    r = evaluate_design(hw="h100-sxm", draft="hydra:4", k=4, dtype="fp8", batch=128, tree_nodes=6, **KW)
    assert r["tree_shape"] == "2-2-1-1"
    assert r["draft_ms_per_iter"] == pytest.approx(1.325130, abs=5e-7)


def test_eagle_fc_off_the_ideal_part(db):
    """An EAGLE step is its decoder layer and LM head (step_cost of eagle_head, tested apart), the
    fc(2d -> d) on the target's chips, the per-sequence cost (0 here) and the draft-step cost."""
    tgt = db.model("llama-3.1-8b")
    # int8 under gpt-fast on 2 chips, batch 1: the fc streams 33,554,432 B / 2 chips at
    # 2.335620e12 B/s = 7.1832 us (its 6.7e7 FLOP / 2 at 653.0e12 FLOP/s: 0.05 us)
    hw = hardware_arrays(db.device("h100-sxm"), db.runtime("gpt-fast"), 2, "int8")
    layer, extend = (float(step_cost(eagle_head(tgt), hw, batch=1.0, q=q, context=192.0, step_overhead=False,
                                     **step_kwargs("int8", "bf16")).time_s[0]) for q in (1.0, 4.0))
    r = evaluate_design(hw="h100-sxm", chips=2, draft="eagle", k=3, dtype="int8", runtime="gpt-fast", **KW)
    # the first of the 3 steps is the draft extend over the k+1 = 4 verified positions (the fc still
    # memory-bound: the same 7.1832 us), the other two run one position
    assert r["draft_ms_per_iter"] == pytest.approx((2 * layer + extend + 3 * (7.1832e-6 + 30e-6)) * 1e3, abs=5e-7)
    # continuous batching, fp8, batch 64, prompt 2,048, output 256: the first step (the draft extend
    # over the k+1 = 4 verified positions) also runs the fc on the x = 2,048 x 63 / (64 x 256) x tau =
    # 7.875 x 2.952 = 23.247 prompt tokens a sequence that arrive per iteration:
    # 2 x 33,554,432 x 64 x (4 + 23.247) / 914.25e12 = 128.001 us (compute-bound); the other two
    # steps stream it: 33,554,432 B / 2.7805e12 = 12.068 us
    hw = hardware_arrays(db.device("h100-sxm"), db.runtime("graphs"), 1, "fp8")
    kw = dict(batch=64.0, context=2048.0 + 128.0, step_overhead=False, **step_kwargs("fp8", "bf16"))
    first = float(step_cost(eagle_head(tgt), hw, q=4.0, prefill_tokens=23.247, prefill_len=2048.0, **kw).time_s[0])
    other = float(step_cost(eagle_head(tgt), hw, q=1.0, **kw).time_s[0])
    r = evaluate_design(hw="h100-sxm", draft="eagle", k=3, batch=64, prompt=2048, output=256, continuous=True,
                        dtype="fp8", **KW)
    want = (first + 128.001e-6 + 30e-6) + 2 * (other + 12.068e-6 + 30e-6)
    assert r["draft_ms_per_iter"] == pytest.approx(want * 1e3, abs=5e-6)
    # under the eager runtime the head's step is overhead-bound: 30 kernels x 23.5 us + 1,717.6 us
    # (fitted draft-step cost) = 2,422 us against ~0.5 ms of weights (the LM head's 1.05 GB)
    assert evaluate_design(hw="h100-sxm", draft="eagle", k=3, runtime="eager", **KW)["draft_bound"] == "overhead"


@pytest.mark.parametrize("draft, k, tau, fixed_us", [
    # each EAGLE step: one dense layer's 8 kernels (52 us) + 30 us draft-step cost, no per-step cost
    ("eagle", 3, 2.952, 3 * 82),
    ("medusa:4", 3, 2.952, 52),          # the heads: one layer's kernels, inside the verify pass
    ("hydra:4", 2, 2.44, 2 * 82),        # a head a step: 52 us + 30 us
    ("ngram", 3, 2.952, 20 + 10),        # the host lookup 20 us + the copy's fixed 10 us (arrays.py)
])
def test_overhead_per_token_by_drafter_kind(draft, k, tau, fixed_us):
    # + the verify pass's 32 x 8 x 6.5 + 38 = 1,702 us + 100 us per iteration, over tau tokens
    r = evaluate_design(hw="h100-sxm", draft=draft, k=k, **KW)
    assert r["tau"] == pytest.approx(tau, rel=1e-12)
    assert r["overhead_ms_per_token"] == pytest.approx((fixed_us + 1702 + 100) * 1e-3 / tau, rel=1e-12)


def test_overhead_per_token_counts_the_per_sequence_cost_of_each_step():
    # a per-sequence cost of 5 us at batch 4: +20 us in each EAGLE step and in the verify pass
    r = evaluate_design(hw="h100-sxm", draft="eagle", k=3, batch=4, set_fields={"sequence_overhead_us": 5}, **KW)
    assert r["overhead_ms_per_token"] == pytest.approx((3 * (82 + 20) + 1722 + 100) * 1e-3 / 2.952, rel=1e-12)


def test_overhead_per_token_of_a_tree():
    # EAGLE, 16 nodes, depth <= 4, geometric ranks at alpha 0.8: 3-4-4-5, four steps of 82 us, and a
    # tree-masked verify pass with 1 more kernel a layer: 1,702 + 32 x 6.5 = 1,910 us; + 100 us
    r = evaluate_design(hw="h100-sxm", draft="eagle", k=4, tree_nodes=16, rank_profile="geometric", **KW)
    assert r["tree_shape"] == "3-4-4-5"
    assert r["overhead_ms_per_token"] == pytest.approx((4 * 82 + 1910 + 100) * 1e-3 / r["tau"], rel=1e-12)


def test_overhead_per_token_of_a_plain_moe_decode():
    # Mixtral-8x7B on 2 H100s: 32 routed-MoE GQA layers of 8 + 5 kernels x 6.5 us + 38 us = 2,742 us
    r = evaluate_design(hw="h100-sxm", chips=2, target="mixtral-8x7b")
    assert r["overhead_ms_per_token"] == pytest.approx(2.742, rel=1e-12)


@pytest.mark.parametrize("draft, kv", [("eagle", "bf16"), ("medusa:4", "bf16"), ("hydra:4", "bf16"),
                                       ("llama-3.2-1b", "fp8")])
def test_parts_with_and_without_fp8_units_in_one_batch(db, draft, kv):
    """One study batch of an A100 (fp8 weight-only, and attention at the bf16 rate on an fp8 KV
    cache) and an H100 (native fp8) gives each row what dse eval gives that part alone: the
    weight-only rule (heads and fc included) is per row."""
    s = {"name": "s", "workload": {"target": "llama-3.1-8b", "draft": draft, "dtype": "fp8", "kv_dtype": kv, "batch": 64,
                                   "prompt_tokens": 128, "output_tokens": 128, "acceptance": {"alpha": 0.8}, "k": 3, "runtime": "gpt-fast"},
         "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {"device": ["a100-80gb", "h100-sxm"]}}}
    st = parse_study(s, "s.yaml", db)
    d, m = evaluate_study(st, {"target_chip_device": np.array(["a100-80gb", "h100-sxm"])}, 2, db, st.tech)
    cols = metric_table(d, m)
    for i, hw in enumerate(("a100-80gb", "h100-sxm")):
        one = evaluate_design(hw=hw, draft=draft, k=3, dtype="fp8", kv_dtype=kv, batch=64, runtime="gpt-fast", **KW)
        for c in ("draft_ms_per_iter", "verify_ms_per_iter", "spec_ms_per_token", "overhead_ms_per_token"):
            assert cols[c][i] == pytest.approx(one[c], rel=1e-12), (hw, c)


@pytest.mark.parametrize("ep", [1, 8])
def test_early_exit_drafts_with_the_targets_expert_parallel(db, ep):
    """Early exit runs the target's own first layers, so its steps keep the target's expert
    parallel: early-exit:8 on Mixtral-8x7B over 8 H100s at ep = 1 and 8 drafts k = 2 steps of the
    target's first 8 layers and LM head at that ep (the two differ: all-reduces vs all-to-alls)."""
    r = evaluate_design(hw="h100-sxm", chips=8, ep=ep, target="mixtral-8x7b", draft="early-exit:8", alpha=0.7, k=2)
    hw = hardware_arrays(db.device("h100-sxm"), db.runtime("graphs"), 8, "bf16")

    def step(e):
        return float(np.ravel(step_cost(db.model("mixtral-8x7b"), hw, batch=1.0, q=1.0, context=192.0, layers=8,
                                        ep=e, **step_kwargs("bf16", "bf16")).time_s)[0])
    assert r["draft_ms_per_iter"] == pytest.approx(2 * step(ep) * 1e3, rel=1e-12)
    assert step(1) != pytest.approx(step(8), rel=1e-6)


def test_overlapped_and_serial_rows_in_one_batch(db):
    """A study that searches whether a draft chip is there, with overlapped drafting: the row with
    the chip (L4, overlapped: part of the draft's fixed costs hidden) and the row without it
    (drafting on the target, serial) each report what dse eval reports for that design alone (the
    link differs: a study's draft-chip link is its link_bw_gb_s knob, 128 GB/s, dse eval's the
    slower end's, the L4's 64 GB/s)."""
    s = {"name": "s", "workload": {"target": "llama-3.1-70b", "draft": "llama-3.2-1b", "dtype": "fp8", "batch": 1,
                                   "prompt_tokens": 128, "output_tokens": 128, "acceptance": {"alpha": 0.8}, "k": 4,
                                   "overlap": True},
         "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {"device": "h100-sxm"}, "draft_chip": {"enabled": [True, False], "device": "l4"}}}
    st = parse_study(s, "s.yaml", db)
    d, m = evaluate_study(st, {"draft_chip_enabled": np.array([True, False])}, 2, db, st.tech)
    cols = metric_table(d, m)
    kw = dict(hw="h100-sxm", target="llama-3.1-70b", draft="llama-3.2-1b", alpha=0.8, k=4, dtype="fp8")
    for i, one in enumerate((evaluate_design(draft_hw="l4", overlap=True, **kw), evaluate_design(**kw))):
        for c in ("overhead_ms_per_token", "draft_ms_per_iter", "verify_ms_per_iter"):
            assert cols[c][i] == pytest.approx(one[c], rel=1e-12), (i, c)
