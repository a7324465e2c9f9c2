"""A draft model whose heads do not split the target's chips runs at the largest tensor parallel
its heads allow (as vLLM's draft_tensor_parallel_size and SGLang's draft worker serve it), priced
so: its step time, its weights and cache per chip, and the draft_tp column."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dse.api import evaluate_design
from dse.cli import main
from dse.model.arrays import DesignBatch, HardwareArrays
from dse.model.drafters import draft_tp
from dse.model.evaluate import evaluate
from dse.model.tau import largest_k
from dse.workload.spec import AcceptanceSpec, DrafterSpec, Workload, draft_tensor_parallel


def _draft(db, name):
    return DrafterSpec(kind="model", label=name, model=db.model(name))


def test_the_largest_tensor_parallel_the_heads_allow(db):
    # Qwen2.5-0.5B: 14 heads / 2 KV heads. Of 8's divisors 8 and 4 do not divide 14; 2 does (and 2 KV heads
    # split 2 ways): 2. 14 chips: 14 divides 14, and each of 2 KV heads is replicated on 7 chips: 14.
    # Qwen2.5-1.5B: 12 heads / 2 KV heads. 8 -> 4 (12 % 4 = 0, 4 % 2 = 0); 3 -> 1 (12 % 3 = 0, but 3 chips
    # neither split 2 KV heads nor hold whole copies of them); 6 -> 6.
    # Llama-3.2-1B: 32 heads / 8 KV heads: every power of two up to 32 splits them.
    small, qwen15, llama = db.model("qwen2.5-0.5b"), db.model("qwen2.5-1.5b"), db.model("llama-3.2-1b")
    assert [draft_tensor_parallel(small, c) for c in (1, 4, 7, 8, 14)] == [1, 2, 1, 2, 14]
    assert [draft_tensor_parallel(qwen15, c) for c in (3, 6, 8, 12, 16)] == [1, 6, 4, 12, 4]
    assert [draft_tensor_parallel(llama, c) for c in (8, 16, 64)] == [8, 16, 32]
    # the per-row table gives the same as the rule, for every chip count of a study (1..1024)
    chips = np.arange(1, 1025)
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b", "llama-3.2-1b"):
        m = db.model(name)
        assert draft_tp(_draft(db, name), chips).tolist() == [draft_tensor_parallel(m, c) for c in chips.tolist()]
    # drafters made of the target's own layers run at the group's chips; nothing on the device: 0
    assert draft_tp(DrafterSpec(kind="eagle", label="eagle3", method="eagle3"), np.array([8])).tolist() == [8]
    assert draft_tp(DrafterSpec(kind="ngram", label="ngram"), np.array([8])).tolist() == [0]


def _ideal(chips):
    """8 ideal chips: 1 TB/s at 100%, 1 PFLOP/s, a 1 TB/s link with 1 us per ring step, no fixed
    costs, a hard-max roofline (HardwareArrays' defaults)."""
    return HardwareArrays(chips=chips, capacity_bytes=1e12, mem_bw_bytes_s=1e12, peak_flop_s=1e15,
                          mem_efficiency=1.0, compute_efficiency=1.0, link_bw_bytes_s=1e12, link_latency_s=1e-6,
                          kernel_launch_s=0.0, kernels_per_layer=8, step_overhead_s=0.0, spec_overhead_s=0.0,
                          ngram_draft_s=0.0, memory_reserve_fraction=0.0)


def test_draft_step_at_its_tensor_parallel_worked_by_hand(db):
    """Qwen2.5-72B on 8 ideal chips, drafted by Qwen2.5-1.5B (12 heads: tensor parallel 4, not 8),
    k = 1, batch 1, prompt 1, output 2 (mean context S = 1 + 2/2 = 2), bf16.

    Qwen2.5-1.5B (hardware_db/models/qwen2.5-1.5b.yaml: d 1536, 28 layers, 12 heads, 2 KV heads,
    d_h 128, FFN 8960, vocab 151,936, tied):
      attention per layer 1536*12*128 + 2*1536*2*128 + 12*128*1536 = 5,505,024
      gated FFN per layer 3*1536*8960 = 41,287,680; x 28 layers = 1,310,195,712
      LM head 151,936*1536 = 233,373,696; streamed per step 1,543,569,408 weights x 2 B = 3,087,138,816 B
    At t = 4: 771,784,704 B per chip / 1 TB/s = 771.784704 us (compute: 2 x 1.54e9 / 4 / 1e15 = 0.77 us)
      cache read + write: (S + q) = 3 tokens x 28 x 2*2*128 x 2 B = 86,016 B / min(4, 2 KV heads)
      = 43,008 B -> 0.043008 us
      2 all-reduces per layer of B*q*d*2 = 3,072 B, ring over 4: 2*3/4 * 3072 / (1e12 / 2) + 2*3 x 1 us
      = 0.009216 + 6 = 6.009216 us; x 56 = 336.516096 us
      step = 771.784704 + 0.043008 + 336.516096 = 1,108.343808 us
    At the target's t = 8 it would be 385.892352 + 0.043008 + 56 x (2*7/8 * 3072 / 5e11 + 14 us)
      = 385.892352 + 0.043008 + 784.602112 = 1,170.537472 us (the latency of the longer ring wins here)."""
    w = Workload(target=db.model("qwen2.5-72b"), drafter=_draft(db, "qwen2.5-1.5b"),
                 acceptance=AcceptanceSpec(kind="alpha", alpha=0.8))
    hw = _ideal(8)
    batch = DesignBatch(target=hw, draft=hw, draft_on_chip=False, draft_link_bw_bytes_s=0.0, draft_link_latency_s=0.0,
                        batch=1, prompt_tokens=1, output_tokens=2, k=1)
    m = evaluate(batch, w)
    assert m.draft_tp.tolist() == [4]
    assert m.draft_s_per_iter[0] == pytest.approx(1108.343808e-6, rel=1e-9)
    assert m.draft_s_per_iter[0] != pytest.approx(1170.537472e-6, rel=1e-3)
    # the capacity check: each chip holds the draft's weights / 4 and its cache / min(4, 2 KV heads); the
    # cache holds P + G + the largest k of the workload (16) drafted slots: 1 x 19 x 28,672 B = 544,768 B
    # / 2 = 272,384 B; with the target's 8 chips' share the draft adds 771,784,704 + 272,384 = 772,057,088 B
    none = evaluate(batch, Workload(target=w.target, drafter=DrafterSpec(kind="none", label="none"),
                                    acceptance=w.acceptance))
    assert largest_k(w) == 16
    added = m.chip_memory_required_bytes[0] - none.chip_memory_required_bytes[0]
    assert added == pytest.approx(772_057_088, rel=1e-12)


def test_dse_eval_runs_a_12_head_draft_beside_8_chips():
    runner = CliRunner()
    args = ["eval", "--hw", "h100-sxm", "--chips", "8", "--target", "qwen2.5-72b", "--draft", "qwen2.5-1.5b",
            "--alpha", "0.8", "--k", "4"]
    res = runner.invoke(main, args)
    assert res.exit_code == 0, res.output
    assert ("draft qwen2.5-1.5b on the target chips (tensor parallel 4 of 8 chips, the most its heads allow)"
            in res.output)
    r = json.loads(runner.invoke(main, args + ["--json"]).output)
    assert r["draft_tp"] == 4 and r["fits"] and r["speedup"] > 1
    # on 3 L4 draft chips the 14-head Qwen2.5-0.5B runs at 1 (14 % 3 != 0)
    d = evaluate_design(hw="h100-sxm", chips=8, target="qwen2.5-72b", draft="qwen2.5-0.5b", draft_hw="l4",
                        draft_chips=3, alpha=0.8, k=4)
    one = evaluate_design(hw="h100-sxm", chips=8, target="qwen2.5-72b", draft="qwen2.5-0.5b", draft_hw="l4",
                          draft_chips=1, alpha=0.8, k=4)
    assert d["draft_tp"] == 1 and d["draft_ms_per_iter"] == pytest.approx(one["draft_ms_per_iter"], rel=1e-12)
