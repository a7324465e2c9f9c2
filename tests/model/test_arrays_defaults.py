"""HardwareArrays built by hand (the Python API) without the fields issue 17 added behave as
before them: every layer counts as a dense GQA one, a tree mask adds no kernels, the format's
math is native, there is no scale-up limit, and past a domain given without a network there is
no network (infinite time, never a made-up one)."""

from __future__ import annotations

import numpy as np
import pytest

from dse.model.arrays import HardwareArrays
from dse.model.roofline import allreduce_time_s, communication_time_s, step_cost
from dse.model.transformer import step_kwargs


def _h100(chips: int, **extra) -> HardwareArrays:
    """An H100-like group with the pre-issue-17 fields only: graphs' fixed costs, NVLink's link."""
    return HardwareArrays(chips=chips, capacity_bytes=80 * 2 ** 30, mem_bw_bytes_s=3.35e12, peak_flop_s=1978.9e12,
                          peak_attention_flop_s=989.4e12, mem_efficiency=0.83, compute_efficiency=0.66,
                          link_bw_bytes_s=900e9, link_latency_s=0.44e-6, link_efficiency=0.82,
                          kernel_launch_s=6.5e-6, kernels_per_layer=8.0, step_overhead_s=38e-6, spec_overhead_s=100e-6,
                          ngram_draft_s=20e-6,
                          memory_reserve_fraction=0.05, **extra)


def test_without_the_new_fields_every_layer_is_a_dense_one(db):
    # DeepSeek-V3 (61 MLA layers, 58 of them MoE with a shared expert) on 8 chips: 61 x 8 x 6.5 us +
    # 38 us = 3,210 us of fixed cost, with or without a tree mask (no tree kernels either)
    m = db.model("deepseek-v3")
    for tree in (False, True):
        s = step_cost(m, _h100(8), batch=1.0, q=4.0, context=1024.0, tree_mask=tree, **step_kwargs("fp8", "bf16"))
        assert float(np.ravel(s.t_fixed_s)[0]) == pytest.approx(61 * 8 * 6.5e-6 + 38e-6, rel=1e-12)


def test_without_the_new_fields_fp8_math_is_native(db):
    # a 2,048-token prefill of Llama-3.1-8B is compute-bound: fp8 at the fp8 rate with the 0.7 GEMM
    # factor unless the arrays say the part has no fp8 units (then the 16-bit efficiency, factor 1)
    m = db.model("llama-3.1-8b")
    kw = dict(batch=1.0, q=2048.0, context=0.0, lm_head_last_only=True, **step_kwargs("fp8", "fp8"))
    native = float(np.ravel(step_cost(m, _h100(1), **kw).t_compute_s)[0])
    told = float(np.ravel(step_cost(m, _h100(1, weight_math_native=True, attention_math_native=True),
                                    **kw).t_compute_s)[0])
    emulated = float(np.ravel(step_cost(m, _h100(1, weight_math_native=False, attention_math_native=False),
                                        **kw).t_compute_s)[0])
    assert native == told and emulated < native


def test_without_the_new_fields_there_is_no_domain_and_no_network(db):
    # 16 chips, no scale_up_domain: one flat ring, 2 all-reduces of T x d x 2 B a layer
    m = db.model("llama-3.1-405b")
    T = 4.0
    flat = 2 * 126 * allreduce_time_s(T * 16384 * 2.0, 16, 900e9, 0.44e-6, 0.82)
    assert float(np.ravel(communication_time_s(m, _h100(16), T, 2.0, 126))[0]) == pytest.approx(float(flat), rel=1e-12)
    # a domain of 8 given without a scale-out network: nothing joins the two domains
    assert np.isinf(np.ravel(communication_time_s(m, _h100(16, scale_up_domain=8.0), T, 2.0, 126))[0])


def test_without_the_new_fields_a_draft_head_step_pays_no_host_cost(db):
    # EAGLE, k = 3 on one H100-like chip: the runtime's draft-step cost is 0 unless the arrays give it;
    # given 30 us it adds 3 x 30 us to the draft
    from dse.model import DesignBatch, evaluate
    from dse.workload.spec import Workload, make_acceptance, parse_drafter
    tgt = db.model("llama-3.1-8b")
    w = Workload(target=tgt, drafter=parse_drafter("eagle", tgt, db), acceptance=make_acceptance(0.8))

    def draft_s(hw):
        b = DesignBatch(target=hw, draft=hw, draft_on_chip=False, draft_link_bw_bytes_s=0.0, draft_link_latency_s=0.0,
                        batch=1, prompt_tokens=128, output_tokens=128, k=3)
        return float(evaluate(b, w).draft_s_per_iter[0])
    plain, zero, thirty = draft_s(_h100(1)), draft_s(_h100(1, draft_step_overhead_s=0.0)), \
        draft_s(_h100(1, draft_step_overhead_s=30e-6))
    assert plain == zero and thirty - plain == pytest.approx(90e-6, rel=1e-9)
