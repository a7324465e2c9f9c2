"""Pipelines (dse.model.pipeline; MODEL.md sections 7 and 8): pipeline parallel over stages of chips,
and the layers of an SRAM part each on their own region of the chip. Numbers worked by hand in the
comments; the calibration rows are the published launch figures named in each test."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner

from dse.api import evaluate_design
from dse.cli import main
from dse.model.arrays import HardwareArrays
from dse.model.pipeline import hop_time_s, regions_per_chip, stage_layers
from dse.model.roofline import pass_cost, step_cost
from dse.model.transformer import step_kwargs

KW = step_kwargs("bf16", "bf16")


def _chip(**extra) -> HardwareArrays:
    """An idealised chip: hard-max roofline, no fixed costs, a 900 GB/s link at full rate, 1 us a hop."""
    base = dict(chips=1, capacity_bytes=1e15, mem_bw_bytes_s=1e12, peak_flop_s=1e15, mem_efficiency=1.0,
                compute_efficiency=1.0, link_bw_bytes_s=900e9, link_latency_s=1e-6, kernel_launch_s=0.0,
                kernels_per_layer=0.0, step_overhead_s=0.0, spec_overhead_s=0.0, ngram_draft_s=0.0,
                memory_reserve_fraction=0.0)
    base.update(extra)
    return HardwareArrays(**base)


def _t(c) -> float:
    return float(np.ravel(c.time_s)[0])


def test_stage_layers_and_regions():
    # 80 layers in 72 stages: the largest stage holds ceil(80/72) = 2; 32 layers in 4: 8
    assert stage_layers(80, 72) == 2 and stage_layers(32, 4) == 8
    # a layer-regioned chip in 4 stages of a 32-layer model holds 8 layers: 8 regions; a DRAM chip 1
    assert regions_per_chip(32, _chip(pp=4, layer_regions=True))[0] == 8
    assert regions_per_chip(32, _chip(pp=4))[0] == 1


def test_two_stages_at_batch_1_cross_every_stage_and_two_hops(db):
    # Llama-3.1-8B (d = 4096), batch 1: the pass over all 32 layers is the same work split in two,
    # plus pp = 2 hops (stage 1 -> 2, and the sampled token back to stage 1), each 1 us + the token's
    # 4096 x 2 B = 8,192 B over half the link's 900 GB/s: 8192 / 450e9 = 18.2 ns. 2 x 1.0182 us.
    m = db.model("llama-3.1-8b")
    one = _t(pass_cost(m, _chip(), batch=1.0, q=1.0, context=512.0, **KW))
    two = _t(step_cost(m, _chip(pp=2), batch=1.0, q=1.0, context=512.0, **KW))
    assert two == pytest.approx(one + 2 * (1e-6 + 8192 / 450e9), rel=1e-12)
    assert float(hop_time_s(_chip(pp=2), 1.0, 4096, 2.0, 32)[0]) == pytest.approx(2 * (1e-6 + 8192 / 450e9))


def test_eight_stages_fill_with_micro_batches(db):
    # compute-bound (memory at 1e18 B/s): a pass's time is linear in its tokens, t(b) = b t(1). Batch 8
    # in one micro-batch crosses 8 stages with all 8 sequences: t(8) + 8 hops. In 8 micro-batches of 1
    # each stage works on each in turn (8 x t(1)/8 = t(1) busy), and one micro-batch's traversal is
    # t(1) + 8 hops: the cycle is t(1) + 8 hops, the pipeline full, 8 sequences per t(1).
    m = db.model("llama-3.1-8b")
    hw1, hw8 = _chip(mem_bw_bytes_s=1e18), _chip(mem_bw_bytes_s=1e18, pp=8)
    t1 = _t(pass_cost(m, hw1, batch=1.0, q=1.0, context=0.0, **KW))
    t8 = _t(pass_cost(m, hw1, batch=8.0, q=1.0, context=0.0, **KW))
    assert t8 == pytest.approx(8 * t1, rel=1e-3)            # linear: compute-bound
    hops = 8 * (1e-6 + 8192 / 450e9)                        # one micro-batch's token per hop
    got = step_cost(m, hw8, batch=8.0, q=1.0, context=0.0, **KW)
    assert _t(got) == pytest.approx(t1 + hops, rel=1e-9)
    # at batch 1 there is one micro-batch: the whole pass and 8 hops
    assert _t(step_cost(m, hw8, batch=1.0, q=1.0, context=0.0, **KW)) == pytest.approx(t1 + hops, rel=1e-9)
    # the same step's work per chip per cycle: the pass's FLOPs over the 8 micro-batches, each chip 1/8 of it
    assert float(np.ravel(got.flops)[0]) == pytest.approx(
        8 * float(np.ravel(pass_cost(m, hw1, batch=1.0, q=1.0, context=0.0, **KW).flops)[0]) / 8, rel=1e-12)


def test_memory_bound_stages_cost_the_same_split_or_not(db):
    # memory-bound (the weights), batch 2 on 2 stages: one micro-batch of 2 crosses both stages,
    # t(2) + 2 hops of 2 tokens (16,384 B); two micro-batches of 1 keep both stages busy, each stage
    # reading its half of the weights once per micro-batch, 2 x t(1)/2 = t(1) a cycle, and one
    # micro-batch's traversal is t(1) + 2 hops of 1 token (8,192 B). t(1) < t(2) by one sequence's KV
    # cache read, so the two micro-batches win, by that much and no more.
    m = db.model("llama-3.1-8b")
    t1 = _t(pass_cost(m, _chip(), batch=1.0, q=1.0, context=0.0, **KW))
    t2 = _t(pass_cost(m, _chip(), batch=2.0, q=1.0, context=0.0, **KW))
    got = _t(step_cost(m, _chip(pp=2), batch=2.0, q=1.0, context=0.0, **KW))
    assert got == pytest.approx(t1 + 2 * (1e-6 + 8192 / 450e9), rel=1e-9)
    assert got < t2 + 2 * (1e-6 + 16384 / 450e9) and t2 - t1 < 1e-3 * t1


def test_a_wafer_splits_its_bandwidth_into_one_region_per_layer(db):
    # an SRAM part holding Llama-3.1-8B's 32 layers: each layer runs on 1/32 of the chip's bandwidth
    # and FLOP/s, so at batch 1 the pass takes 32 x the whole-chip pass (hard max, no fixed costs:
    # both the memory and the compute time scale by 32), plus 31 region hops of 0.15 us and, over
    # 4 dies, 3 die edges of 0.02 us more
    m = db.model("llama-3.1-8b")
    whole = _t(pass_cost(m, _chip(), batch=1.0, q=1.0, context=512.0, **KW))
    wafer = _chip(layer_regions=True, dies=4.0, region_hop_s=0.15e-6, die_hop_s=0.02e-6)
    got = _t(step_cost(m, wafer, batch=1.0, q=1.0, context=512.0, **KW))
    assert got == pytest.approx(32 * whole + 31 * 0.15e-6 + 3 * 0.02e-6, rel=1e-9)
    # with 32 sequences in flight (one per region) the pipeline fills: the cycle is one sequence's
    # traversal, t_region(1) x 32 + hops, for 32 tokens
    full = _t(step_cost(m, dataclasses.replace(wafer, mem_bw_bytes_s=1e18), batch=32.0, q=1.0, context=0.0, **KW))
    one = _t(step_cost(m, dataclasses.replace(wafer, mem_bw_bytes_s=1e18), batch=1.0, q=1.0, context=0.0, **KW))
    assert full == pytest.approx(one, rel=1e-6)


def test_a_hop_latency_bound_pipeline(db):
    # a tiny model over many slow hops: Qwen2.5-0.5B (24 layers) in 24 stages of 1 chip, 50 us a hop:
    # 24 hops = 1.2 ms, against a pass of ~1 ms of weights at 1 TB/s: the hops set the step
    m = db.model("qwen2.5-0.5b")
    hw = _chip(pp=24, link_latency_s=50e-6)
    got = _t(step_cost(m, hw, batch=1.0, q=1.0, context=0.0, **KW))
    pass_s = _t(pass_cost(m, _chip(), batch=1.0, q=1.0, context=0.0, **KW))
    d = m.hidden_size
    assert got == pytest.approx(pass_s + 24 * (50e-6 + d * 2 / 450e9), rel=1e-9)
    assert 24 * 50e-6 > pass_s


def test_more_stages_than_layers_or_a_split_that_leaves_heads_unsplit_is_refused():
    r = CliRunner()
    res = r.invoke(main, ["eval", "--hw", "h100-sxm", "--chips", "64", "--pp", "64", "--target", "llama-3.1-8b"])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "--pp = 64" in res.output and "at most llama-3.1-8b's 32 layers" in res.output
    res = r.invoke(main, ["eval", "--hw", "h100-sxm", "--chips", "6", "--pp", "2", "--target", "llama-3.1-8b"])
    assert res.exit_code == 2 and "leave 3 per stage" in res.output and "use one of 3, 6" in res.output


def test_chip_counts_that_do_not_split_the_heads_run_in_stages():
    # 3 A100s do not split Llama-3.1-8B's 32 heads: 3 stages of 1 (the fewest that do), 11 layers
    # on the largest
    r = evaluate_design(hw="a100-80gb", chips=3, target="llama-3.1-8b")
    assert (r["tp"], r["pp"]) == (1, 3) and r["fits"]
    # 8 chips split them: tensor parallel as before
    r = evaluate_design(hw="a100-80gb", chips=8, target="llama-3.1-8b")
    assert (r["tp"], r["pp"]) == (8, 1)


# ---- published figures of SRAM systems (docs/calibration.md, spatial and SRAM parts) ----------------

def test_wse3_llama_8b_is_the_fitted_launch_figure():
    # FITTED: the dataflow runtime's layer_sync_us (15.5 us) from Cerebras' launch figure, Llama-3.1-8B
    # bf16 at 1,800 tokens/s on one CS-3 (Cerebras press release, 2024-08-27): 555.6 us/token.
    # Without the sync cost the layer-sequential model alone gives 58.6 us (32 layers, each on 1/32
    # of the wafer: ~1.55 us of compute-bound work each, the bare lower bound).
    r = evaluate_design(hw="cerebras-wse-3", target="llama-3.1-8b")
    assert 1000 / r["baseline_ms_per_token"] == pytest.approx(1800, rel=0.01)
    bare = evaluate_design(hw="cerebras-wse-3", target="llama-3.1-8b", set_fields={"layer_sync_us": 0})
    assert 0.050 < bare["baseline_ms_per_token"] < 0.065          # 32 x ~1.6 us + hops


@pytest.mark.parametrize("kw,published", [
    # HELD OUT: Llama-3.1-70B bf16 on four CS-3 systems, 450 tokens/s (Cerebras press release 2024-08-27)
    (dict(hw="cerebras-wse-3", chips=4, target="llama-3.1-70b"), 450.0),
    # HELD OUT: Llama-2-70B on Groq's 576-LPU system, 300 tokens/s (techpowerup, February 2024; 576
    # chips: Groq's own description); 8-bit weights: 16-bit ones (140 GB) do not fit 576 x 230 MB
    (dict(hw="groq-lpu-v1", chips=576, target="llama-2-70b", dtype="int8"), 300.0),
])
def test_held_out_sram_systems_within_2x(kw, published):
    r = evaluate_design(**kw)
    ratio = 1000 / r["baseline_ms_per_token"] / published
    assert 0.5 <= ratio <= 2.0, ratio
    # the model stays on the optimistic side of these, as a model without queueing should
    assert ratio >= 1.0


def test_no_sram_design_beats_its_layer_sequential_bound(db):
    # random synthesised SRAM-only chips (the study path): at batch 1 a token takes at least
    # L x (its weight bytes / (chips x BW)) : each layer on its region's share of the bandwidth
    from dse.evaluation.designs import evaluate_study
    from dse.study.parse import parse_study
    s = {"name": "s", "workload": {"target": "llama-3.1-8b", "batch": 1, "prompt_tokens": 128, "output_tokens": 64},
         "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {"memory": ["sram"], "sram_mb": {"low": 2000, "high": 40000},
                                   "peak_tflops": {"low": 100, "high": 5000}, "chips": [1, 2, 4, 8]}}}
    st = parse_study(s, "s.yaml", db)
    rng = np.random.default_rng(0)
    n = 200
    params = {"target_chip_memory": np.array(["sram"] * n), "target_chip_sram_mb": rng.uniform(2000, 40000, n),
              "target_chip_peak_tflops": rng.uniform(100, 5000, n),
              "target_chip_chips": rng.choice([1, 2, 4, 8], n)}
    d, m = evaluate_study(st, params, n, db, st.tech)
    ok = np.asarray(m.fits)
    assert ok.sum() > 20
    bw = d.batch.target.mem_bw_bytes_s * d.batch.target.chips * d.batch.target.pp
    weights = 16.06e9                    # Llama-3.1-8B bf16: 8.03 B parameters x 2 B
    bound = 32 * weights / bw
    assert np.all(np.asarray(m.baseline_s_per_token)[ok] >= bound[ok])


def test_a_row_whose_chips_cannot_be_staged_is_infeasible_with_its_reason(db):
    # Llama-3.1-70B has 80 layers and 64 heads: 576 WSE-3 systems (no scale-up link: one a stage) would
    # need 576 stages; 4 run as 4 stages. The study runs; the 576-chip row says why it cannot exist.
    from dse.evaluation.designs import evaluate_study, infeasible_reasons, metric_table
    from dse.study.parse import parse_study
    s = {"name": "s", "workload": {"target": "llama-3.1-70b"}, "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {"device": ["cerebras-wse-3"], "chips": [4, 576]}}}
    st = parse_study(s, "s.yaml", db)
    d, m = evaluate_study(st, {"target_chip_device": np.array(["cerebras-wse-3"] * 2),
                               "target_chip_chips": np.array([4, 576])}, 2, db, st.tech)
    cols = metric_table(d, m)
    assert cols["pp"].tolist() == [4, 1] and cols["tp"].tolist() == [1, 576]
    code, texts = infeasible_reasons(cols, st)
    assert texts[code[0]] == "" and "pipeline stages" in texts[code[1]]
