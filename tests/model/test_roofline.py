"""One forward step (MODEL.md section 2): hand-worked times and properties."""

import numpy as np
import pytest

from dse.api import evaluate_design
from dse.model.roofline import allreduce_time_s


def test_allreduce_by_hand():
    # t=2, 1 MB, 900 GB/s both ways (450 one way), 2 us: 2*1/2*1e6/450e9 + 2*1*2e-6 = 6.222 us
    got = allreduce_time_s(1e6, np.array([2, 1]), 900e9, 2e-6)
    np.testing.assert_allclose(got, [1e6 / 450e9 + 4e-6, 0.0])


def test_decode_step_by_hand_llama8b_h100(ideal):
    # bf16 weights streamed: (6,979,321,856 + LM head 525,336,576) * 2 B = 15.00932 GB;
    # KV: 32 layers * 2*8*128 * 2 B = 131,072 B per token; mean context S = P + G/2 = 0.5, so
    # S + q = 1.5 tokens are read or written. Ideal H100 (3.35 TB/s, efficiency 1, no fixed
    # cost): (15.00932e9 + 196,608) / 3.35e12 = 4.48045 ms
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=0, output=1, set_fields=ideal)
    expect = ((6_979_321_856 + 525_336_576) * 2 + 1.5 * 131_072) / 3.35e12
    assert r["baseline_ms_per_token"] == pytest.approx(expect * 1e3, rel=1e-6)
    assert r["baseline_bound"] == "memory"
    # arithmetic intensity of a batch-1 decode step ~ 1 FLOP/byte (2 FLOP per 2-byte weight)
    assert r["baseline_arithmetic_intensity"] == pytest.approx(1.0, rel=0.01)


def test_fixed_costs_add_per_layer_and_step(ideal):
    base = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", set_fields=ideal)
    fixed = evaluate_design(hw="h100-sxm", target="llama-3.1-8b",
                            set_fields={**ideal, "kernel_launch_us": 5, "kernels_per_layer": 8, "step_overhead_us": 100})
    # 32 layers * 8 kernels * 5 us + 100 us = 1.38 ms
    assert fixed["baseline_ms_per_token"] - base["baseline_ms_per_token"] == pytest.approx(1.38, rel=1e-9)


def test_prefill_is_compute_bound_ttft_by_hand(ideal):
    # 2048-token prefill of Llama-3.1-8B at ideal H100 bf16 (989.4 TFLOP/s):
    # layers 2*6,979,321,856*2048 FLOP; LM head at the last position only 2*525,336,576;
    # attention 4*32*128*32 * 2048*(2049/2) (causal)
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=2048, output=1, set_fields=ideal)
    flops = 2 * 6_979_321_856 * 2048 + 2 * 525_336_576 + 4 * 32 * 128 * 32 * 2048 * 2049 / 2
    assert r["ttft_ms"] == pytest.approx(flops / 989.4e12 * 1e3, rel=1e-6)


def test_int8_is_weight_only_and_computes_at_bf16_rate():
    # W8A16: half the bytes of bf16 but the same matmul rate, so a compute-bound prefill costs the same
    bf16 = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=4096, output=1)
    int8 = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=4096, output=1, dtype="int8")
    assert int8["ttft_ms"] == pytest.approx(bf16["ttft_ms"], rel=0.01)


def test_mla_attention_flops_by_hand(db):
    from dse.model.transformer import attention_flops_per_token_per_ctx
    # DeepSeek-V3 absorbed MLA: 2*h*(2*r_kv + d_rope) per layer = 2*128*(1024+64) = 278,528
    assert attention_flops_per_token_per_ctx(db.model("deepseek-v3"), layers=1) == 278_528


def test_more_bandwidth_never_slower():
    times = [evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4,
                             set_fields={"mem_bw_tb_s": bw})["spec_ms_per_token"] for bw in (1, 2, 3.35, 5, 8)]
    assert all(a >= b for a, b in zip(times, times[1:]))


def test_tensor_parallel_adds_allreduce_but_splits_weights():
    one = evaluate_design(hw="a100-80gb", target="llama-2-7b")
    two = evaluate_design(hw="a100-80gb", target="llama-2-7b", chips=2)
    assert two["baseline_ms_per_token"] < one["baseline_ms_per_token"]
    assert two["baseline_ms_per_token"] > one["baseline_ms_per_token"] / 2   # all-reduce and fixed costs
