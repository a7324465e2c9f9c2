"""Issue 9: tensor-parallel sharding, the 16-bit KV default, serving costs, request latency,
capacity in GiB, the smooth roofline. Every number is worked out by hand in the comments."""

import numpy as np
import pytest

from dse.api import evaluate_design
from dse.model import transformer as tf
from dse.model.capacity import memory_per_chip
from dse.model.roofline import allreduce_time_s, smooth_roofline, step_cost

GIB = 2 ** 30


# ---- (a) sharding rules -------------------------------------------------------------------

def test_405b_on_16_chips_keeps_one_eighth_of_the_kv(db):
    m = db.model("llama-3.1-405b")
    # KV per token: 126 layers * 2 * 8 kv heads * 128 * 2 B = 516,096 B; 1,000 tokens = 516,096,000 B.
    # 8 KV heads over 16 chips: each head lives on 2 chips, so a chip holds 1/min(16, 8) = 1/8.
    kv = 126 * 2 * 8 * 128 * 2 * 1000
    assert kv == 516_096_000
    per_chip = {t: memory_per_chip(m, t, 1, 1000, "bf16", "bf16") - memory_per_chip(m, t, 1, 0, "bf16", "bf16")
                for t in (4, 8, 16)}
    assert per_chip[16] == pytest.approx(kv / 8)        # 64,512,000 B, not kv/16
    assert per_chip[8] == pytest.approx(kv / 8)
    assert per_chip[4] == pytest.approx(kv / 4)
    assert tf.kv_shards(m, np.array([1, 4, 8, 16, 32])).tolist() == [1, 4, 8, 8, 8]


def test_405b_kv_bytes_read_per_step_follow_the_same_rule(db):
    from types import SimpleNamespace
    m = db.model("llama-3.1-405b")
    hw = SimpleNamespace(chips=np.array([16]), mem_bw_bytes_s=1e12, mem_efficiency=1.0, peak_flop_s=1e15,
                         peak_attention_flop_s=0.0, compute_efficiency=1.0, kernels_per_layer=0.0,
                         kernel_launch_s=0.0, step_overhead_s=0.0, sequence_overhead_s=0.0, link_bw_bytes_s=1e12,
                         link_latency_s=0.0, link_efficiency=1.0, roofline_p=np.inf)
    a = step_cost(m, hw, batch=1.0, q=1.0, context=999.0, weight_bytes=2.0, kv_bytes=2.0)
    b = step_cost(m, hw, batch=1.0, q=1.0, context=1999.0, weight_bytes=2.0, kv_bytes=2.0)
    # 1,000 more cached tokens: 516,096,000 B of KV over min(16, 8) = 8 chips read per step
    assert (b.bytes - a.bytes)[0] == pytest.approx(516_096_000 / 8)


def test_deepseek_v3_latent_cache_is_the_same_on_every_chip(db):
    m = db.model("deepseek-v3")
    # MLA latent: (r_kv 512 + d_rope 64) * 2 B * 61 layers = 70,272 B per token, one copy per chip
    kv = (512 + 64) * 2 * 61 * 1000
    for t in (1, 8, 16):
        got = memory_per_chip(m, t, 1, 1000, "fp8", "bf16") - memory_per_chip(m, t, 1, 0, "fp8", "bf16")
        assert got == pytest.approx(kv)
    # replicated weights: MLA down-projections d*(r_q + r_kv + d_rope) = 7168*(1536+512+64) =
    # 15,138,816 per layer x 61 = 923,467,776; router d*E = 7168*256 on 58 MoE layers = 106,430,464
    assert tf.replicated_params(m) == 923_467_776 + 106_430_464
    # weights per chip: (W - W_rep)/t + W_rep
    w = tf.total_params(m)
    assert memory_per_chip(m, 8, 1, 0, "fp8", "bf16") == pytest.approx((w - 1_029_898_240) / 8 + 1_029_898_240)


def test_dense_gqa_model_replicates_nothing(db):
    assert tf.replicated_params(db.model("llama-3.1-70b")) == 0


def test_deepseek_v3_batch_256_on_8_h200_does_not_fit(db):
    # issue 9: 671B fp8 weights ~84.8 GB per chip beside a 16-bit latent cache of
    # 256 * (8192 + 1024) tokens * 70,272 B = 165.8e9 B on *every* chip; an H200 holds 141 GiB.
    r = evaluate_design(hw="h200", chips=8, target="deepseek-v3", dtype="fp8", draft="none", batch=256,
                        prompt=8192, output=1024)
    assert r["fits"] is False and r["kv_dtype"] == "bf16"
    m = db.model("deepseek-v3")
    w_chip = (tf.total_params(m) - 1_029_898_240) / 8 + 1_029_898_240          # fp8: 1 B per weight
    kv_chip = 256 * 9216 * 70_272
    cap = 141 * GIB
    assert r["memory_required_gb"] == pytest.approx(8 * (w_chip + kv_chip) / 1e9, rel=1e-9)
    assert r["memory_reserve_gb"] == pytest.approx(8 * 0.05 * cap / 1e9, rel=1e-12)
    assert r["memory_capacity_gb"] == pytest.approx(8 * cap / 1e9)
    # even an fp8 cache (82.9e9 B per chip) leaves it short: 84.8 + 82.9 + 7.6 > 151.4 GB per chip
    assert evaluate_design(hw="h200", chips=8, target="deepseek-v3", dtype="fp8", kv_dtype="fp8", batch=256,
                           prompt=8192, output=1024)["fits"] is False


# ---- (b) the KV cache stays 16-bit unless asked -------------------------------------------

def test_int4_llama2_7b_batch16_on_rtx4090_does_not_fit():
    # KV: 16 seqs * 2,560 tokens * 32 layers * 2*32*128 * 2 B = 21,474,836,480 B (16-bit);
    # weights 32*(4*4096^2 + 3*4096*11008) + 2*32000*4096 = 6,738,149,376, int4 g128:
    # * (0.5 + 2/128) = 3,474,358,272 B; reserve 5% of 24 GiB
    # = 1,288,490,189 B; total 24.95e9 + 1.29e9 = 26.24e9 B > 24 GiB = 25.77e9 B.
    r = evaluate_design(hw="rtx-4090", target="llama-2-7b", dtype="int4", batch=16, prompt=2048, output=512)
    assert r["kv_dtype"] == "bf16" and r["fits"] is False
    need = 16 * 2560 * 32 * 2 * 32 * 128 * 2 + 6_738_149_376 * (0.5 + 2 / 128)
    assert r["memory_required_gb"] == pytest.approx(need / 1e9, rel=1e-9)
    assert r["memory_required_gb"] == pytest.approx(24.95, abs=0.01)       # the reserve apart: 1.29 GB
    assert r["memory_reserve_gb"] == pytest.approx(1.288490189, abs=1e-9)
    assert r["memory_shortfall_gb"] == pytest.approx((need + 0.05 * 24 * GIB - 24 * GIB) / 1e9, rel=1e-9)
    # quantising the cache is explicit: an int4 cache (5.54e9 B) fits
    q = evaluate_design(hw="rtx-4090", target="llama-2-7b", dtype="int4", kv_dtype="int4", batch=16,
                        prompt=2048, output=512)
    assert q["kv_dtype"] == "int4" and q["fits"] is True


def test_fp16_weights_keep_an_fp16_cache():
    assert evaluate_design(hw="h100-sxm", target="llama-3.1-8b", dtype="fp16")["kv_dtype"] == "fp16"
    assert evaluate_design(hw="h100-sxm", target="llama-3.1-8b", dtype="fp8")["kv_dtype"] == "bf16"


def test_study_kv_dtype_defaults_to_16_bit(tmp_path):
    from dse.study import load_study
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkload: {target: llama-3.1-8b, dtype: fp8}\n"
                 "space: {target_chip: {device: [h100-sxm, h200]}}\n"
                 "objectives: [{metric: spec_ms_per_token, direction: minimize}]\n")
    assert load_study(str(p)).kv_dtype == "bf16"


# ---- (c) serving costs and request latency ------------------------------------------------

def test_request_latency_is_ttft_plus_g_minus_1_tokens():
    for draft, kw in (("none", {}), ("llama-3.2-1b", {"alpha": 0.8, "k": 4})):
        r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft=draft, prompt=512, output=200, **kw)
        # the prefill emits token 1; 199 more at the per-token latency
        assert r["request_latency_ms"] == pytest.approx(r["ttft_ms"] + 199 * r["spec_ms_per_token"], rel=1e-12)
    one = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=512, output=1)
    assert one["request_latency_ms"] == pytest.approx(one["ttft_ms"], rel=1e-12)


def test_per_request_cost_adds_to_ttft_once(ideal):
    a = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=512, output=64, batch=4,
                        set_fields={**ideal, "request_overhead_us": 0})
    b = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", prompt=512, output=64, batch=4,
                        set_fields={**ideal, "request_overhead_us": 2500})
    assert b["ttft_ms"] - a["ttft_ms"] == pytest.approx(2.5, rel=1e-9)
    assert b["baseline_ms_per_token"] == a["baseline_ms_per_token"]


def test_per_sequence_cost_scales_with_batch_in_every_step(ideal):
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", prompt=512, output=64, batch=32)
    a = evaluate_design(**kw, set_fields={**ideal, "sequence_overhead_us": 0})
    b = evaluate_design(**kw, set_fields={**ideal, "sequence_overhead_us": 10})
    # 32 sequences * 10 us = 0.32 ms per decode step
    assert b["baseline_ms_per_token"] - a["baseline_ms_per_token"] == pytest.approx(0.32, rel=1e-9)
    s = dict(draft="llama-3.2-1b", alpha=0.8, k=3)
    va = evaluate_design(**kw, **s, set_fields={**ideal, "sequence_overhead_us": 0})
    vb = evaluate_design(**kw, **s, set_fields={**ideal, "sequence_overhead_us": 10})
    assert vb["verify_ms_per_iter"] - va["verify_ms_per_iter"] == pytest.approx(0.32, rel=1e-9)
    # 3 draft steps on the same chips pay it too
    assert vb["draft_ms_per_iter"] - va["draft_ms_per_iter"] == pytest.approx(3 * 0.32, rel=1e-9)


def test_allreduce_link_efficiency_by_hand():
    # t = 2, 1 MB, 900 GB/s both ways -> 450 GB/s one way at 80%: 1e6/(360e9) s + 2*1*2 us = 6.7778 us
    got = allreduce_time_s(1e6, np.array([2]), 900e9, 2e-6, 0.8)
    np.testing.assert_allclose(got, [1e6 / 360e9 + 4e-6])


def test_device_link_efficiency_slows_tensor_parallel(ideal):
    kw = dict(hw="h100-sxm", chips=8, target="llama-3.1-70b", batch=256, prompt=512, output=64)
    full = evaluate_design(**kw, set_fields={**ideal, "link_efficiency": 1.0})
    part = evaluate_design(**kw, set_fields={**ideal, "link_efficiency": 0.5})
    # 80 layers * 2 all-reduces of 256*8192*2 = 4,194,304 B over 8 chips, the faster of the nvlink class's two
    # protocols (links.yaml): the bandwidth one, 14 x 3.18 us + 1.75 x 4,194,304 / (450e9 x eta) = 60.830 us at
    # eta 1 and 77.141 us at 0.5; the low-latency one 14 x 0.44 us + 1.75 x 4,194,304 / (0.24 x 450e9) = 74.121 us
    # whatever eta: 60.830 us (bandwidth) at eta 1, 74.121 us (low latency) at 0.5: 13.291 us more, x 160
    n = 256 * 8192 * 2
    bulk = [14 * 3.18e-6 + 1.75 * n / (450e9 * eta) for eta in (1.0, 0.5)]
    low = 14 * 0.44e-6 + 1.75 * n / (0.24 * 450e9)
    assert (bulk[0], min(bulk[1], low)) == (pytest.approx(60.830e-6, rel=1e-4), pytest.approx(74.121e-6, rel=1e-4))
    extra = 160 * (min(bulk[1], low) - min(bulk[0], low))
    assert part["baseline_ms_per_token"] - full["baseline_ms_per_token"] == pytest.approx(extra * 1e3, rel=1e-9)


# ---- (e) capacity in GiB as vendors mean it ----------------------------------------------

def test_dram_capacity_is_binary_sram_decimal(db):
    assert db.device("h100-sxm").memory_bytes == 80 * GIB                   # "80 GB" HBM3 = 85.9e9 B
    assert db.device("rtx-4090").memory_bytes == 24 * GIB                   # GDDR6X
    assert db.device("groq-lpu-v1").memory_bytes == pytest.approx(0.23e9)   # on-die SRAM: decimal
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    assert r["memory_capacity_gb"] == pytest.approx(85.899345920)           # outputs: 1 GB = 1e9 B


# ---- (d) smooth roofline ------------------------------------------------------------------

def test_smooth_roofline_equals_hard_max_when_one_term_is_zero():
    for p in (1.0, 2.0, 3.7, np.inf):
        assert smooth_roofline(0.0, 5e-3, p) == 5e-3
        assert smooth_roofline(7e-3, 0.0, p) == 7e-3
    assert smooth_roofline(0.0, 0.0, 2.0) == 0.0
    # 3 ms and 4 ms at p = 2: sqrt(9 + 16) = 5 ms; p = 1 adds them; p = inf is the max
    assert smooth_roofline(3e-3, 4e-3, 2.0) == pytest.approx(5e-3)
    assert smooth_roofline(3e-3, 4e-3, 1.0) == pytest.approx(7e-3)
    assert smooth_roofline(3e-3, 4e-3, np.inf) == 4e-3
    # huge p does not overflow and tends to the max
    assert smooth_roofline(3e-3, 4e-3, 500.0) == pytest.approx(4e-3, rel=1e-6)


def test_smooth_roofline_p2_shortcut_equals_the_general_form():
    """p = 2 everywhere (the fitted default) takes sqrt(t_c^2 + t_m^2); rows of mixed p take the
    general form hi * (1 + (lo/hi)^p)^(1/p): the two agree to rounding on the same rows."""
    rng = np.random.default_rng(3)
    t_c, t_m = rng.uniform(0, 2e-2, 1000), rng.uniform(0, 2e-2, 1000)
    t_c[:10] = 0.0
    fast = smooth_roofline(t_c, t_m, np.full(1000, 2.0))
    p = np.full(1000, 2.0)
    p[-1] = np.inf                      # one hard-max row sends every row down the general form
    general = smooth_roofline(t_c, t_m, p)
    np.testing.assert_allclose(fast[:-1], general[:-1], rtol=4e-16, atol=0)
    assert general[-1] == max(t_c[-1], t_m[-1]) and (fast[:10] == t_m[:10]).all()
    assert fast[10] == pytest.approx(np.hypot(t_c[10], t_m[10]), rel=1e-15)


# ---- (f) weight formats carry their bytes per weight --------------------------------------

def _unit_hw():
    from types import SimpleNamespace
    return SimpleNamespace(chips=np.array([1]), mem_bw_bytes_s=1e12, mem_efficiency=1.0, peak_flop_s=1e15,
                           peak_attention_flop_s=0.0, compute_efficiency=1.0, kernels_per_layer=0.0,
                           kernel_launch_s=0.0, step_overhead_s=0.0, sequence_overhead_s=0.0, link_bw_bytes_s=0.0,
                           link_latency_s=0.0, link_efficiency=1.0, roofline_p=np.inf, int8_stream_factor=1.0,
                           int4_stream_factor=1.0)


def test_g128_int4_with_16_bit_head_streams_the_bytes_by_hand(db):
    m = db.model("llama-2-7b")
    # layers 32*(4*4096^2 + 3*4096*11008) = 6,476,005,376 weights at 4 bits + (fp16 scale 2 B +
    # packed 4-bit zero 0.5 B) per 128 = 0.5 + 2.5/128 = 0.51953125 B -> 3,364,487,168 B;
    # LM head 32000*4096 = 131,072,000 weights at 2 B -> 262,144,000 B; total 3,626,631,168 B.
    # KV at S = 0, q = 1: one token, 32 layers * 2*32*128 * 2 B = 524,288 B.
    kw = tf.step_kwargs("int4-g128", "bf16")
    assert kw["weight_bytes"] == 0.51953125 and kw["head_bytes"] == 2.0
    cost = step_cost(m, _unit_hw(), batch=1.0, q=1.0, context=0.0, **kw)
    assert cost.bytes[0] == pytest.approx(3_626_631_168 + 524_288, rel=1e-12)
    # the plain int4 dtype quantises the head too (0.515625 B for every weight)
    plain = step_cost(m, _unit_hw(), batch=1.0, q=1.0, context=0.0, **tf.step_kwargs("int4", "bf16"))
    assert plain.bytes[0] == pytest.approx((6_476_005_376 + 131_072_000) * 0.515625 + 524_288, rel=1e-12)
    # stored: embedding and LM head both 16-bit (untied): 3,364,487,168 + 2 * 262,144,000
    from dse.model.capacity import weights_per_chip
    assert weights_per_chip(m, 1, "int4-g128") == pytest.approx(3_888_775_168, rel=1e-12)


def test_format_group_bytes():
    f = tf.WEIGHT_FORMATS
    assert f["int4-g32"].bytes_per_weight == 0.625        # gpt-fast: bf16 scale + bf16 zero per 32
    assert f["q4f16_1"].bytes_per_weight == 0.5625        # MLC: fp16 scale per 32
    assert f["nvfp4"].bytes_per_weight == 0.5625          # E4M3 scale per 16
    assert f["mxfp4"].bytes_per_weight == 0.53125         # E8M0 scale per 32
    assert f["nvfp4"].compute_dtype == "fp4" and f["int4-g128"].compute_dtype == "bf16"


def test_eval_json_carries_kv_dtype_format_and_price():
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", dtype="int4-g128")
    assert r["kv_dtype"] == "bf16" and "g128" in r["weight_format"] and r["price_usd"] == 30000


def test_nvfp4_runs_at_the_fp4_rate_where_the_part_has_it():
    # B200: 9,000 dense FP4 TFLOP/s vs 2,250 BF16; a compute-bound prefill gets faster
    fp4 = evaluate_design(hw="b200", target="llama-3.1-8b", dtype="nvfp4", prompt=8192, output=1)
    bf16 = evaluate_design(hw="b200", target="llama-3.1-8b", dtype="bf16", prompt=8192, output=1)
    assert fp4["ttft_ms"] < bf16["ttft_ms"]


def test_mla_prefill_runs_the_non_absorbed_form(db):
    m = db.model("deepseek-v3")
    # decode (absorbed): 2*128*(2*512 + 64) = 278,528 per (query, key) per layer;
    # prefill (non-absorbed MHA): 2*128*(192 + 128) = 81,920
    assert tf.attention_flops_per_token_per_ctx(m, 1) == 278_528
    assert tf.attention_flops_per_token_per_ctx(m, 1, absorbed=False) == 81_920
    hw = _unit_hw()
    kw = dict(batch=1.0, q=1000.0, context=0.0, weight_bytes=1.0, kv_bytes=2.0)
    pre = step_cost(m, hw, lm_head_last_only=True, **kw)
    ver = step_cost(m, hw, **kw)
    # same 1000 tokens; causal (query, key) pairs 1000*1001/2 = 500,500 per layer x 61 layers;
    # the verify pass also applies the LM head (2*129280*7168 FLOP) at 999 more positions
    pairs = 1000 * 1001 / 2 * 61
    head = 2 * 129_280 * 7168 * 999
    assert ver.flops[0] - pre.flops[0] == pytest.approx(pairs * 2 * 128 * (1088 - 320) + head, rel=1e-12)


# ---- (g) like-for-like cost ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tech(db):
    from dse.catalog.technology import load_technology
    return load_technology(db.root)


def test_known_part_cost_uses_the_synthesised_chip_estimator(tech):
    from dse.model.technology import known_part_cost_usd, synthesize_chip
    c = synthesize_chip(tech, node_idx=tech.node_index("n4"), peak_tflops=np.array([400.0, 2500.0]),
                        memory_idx=tech.memory_index("hbm3e"), memory_stacks=np.array([4, 8]), stack_height=8,
                        sram_mb=50, link_bw_gb_s=900)
    # the same chip described as a known part (its silicon, node, memory, stacks) costs the same;
    # the 2500 TFLOP/s one exceeds the reticle and is split into dies, in both
    assert c.num_dies.tolist()[0] == 1 and c.num_dies.tolist()[1] > 1
    base = c.die_area_mm2 - np.where(c.num_dies > 1, c.num_dies * tech.d2d_area_mm2_per_die, 0.0)
    known = known_part_cost_usd(tech, node_idx=tech.node_index("n4"), memory_idx=tech.memory_index("hbm3e"),
                                units=c.memory_units, capacity_bytes=c.capacity_bytes, die_area_mm2=base)
    np.testing.assert_allclose(known, c.cost_usd, rtol=1e-12)


def test_process_node_names(tech):
    from dse.model.technology import node_code
    names = tech.node_names
    for text, node in (("TSMC 4N", "n4"), ("TSMC 4NP (2 dies)", "n4"), ("TSMC N3P (8 XCD) + N6 (2 IOD)", "n3"),
                       ("TSMC N6", "n7"), ("TSMC 7nm", "n7"), ("TSMC 5nm (2 compute dies)", "n5")):
        assert names[node_code(tech, text)] == node, text
    for text in ("Samsung 8nm", "GlobalFoundries 14nm", "TSMC 12nm", ""):
        assert node_code(tech, text) == -1, text


def test_eval_reports_cost_estimate_and_street_price_apart(db, tech):
    from dse.model.technology import known_part_estimate
    r = evaluate_design(hw="h100-sxm", chips=2, target="llama-3.1-8b")
    est = known_part_estimate(tech, db.device("h100-sxm"))[0]
    assert r["price_usd"] == 60000 and r["cost_usd"] == pytest.approx(2 * est)
    # an H100's manufacturing estimate is a few thousand dollars, far below its ~$30k price
    # (hardware.md 1.3: BOM estimate ~$3,320 incl. ~$1,350 of HBM)
    assert 2000 < est < 5000
    # a part on a node outside the tables has a price but no estimate
    w = evaluate_design(hw="wormhole-n150", target="llama-3.2-1b")
    assert w["cost_usd"] is None and w["price_usd"] == 1099


def test_study_cost_is_the_estimate_and_price_rides_along(db, tech, tmp_path):
    from dse.evaluation.designs import build_designs
    from dse.model.technology import known_part_estimate
    from dse.study import load_study
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkload: {target: llama-3.1-8b}\n"
                 "space: {target_chip: {device: [h100-sxm, rtx-4090], chips: [1, 2]}}\n"
                 "objectives: [{metric: spec_ms_per_token, direction: minimize}]\n")
    study = load_study(str(p))
    params = {"target_chip_device": np.array(["h100-sxm", "rtx-4090"]), "target_chip_chips": np.array([2, 1])}
    hw = build_designs(study, params, 2, db, study.tech).hardware
    est = [known_part_estimate(tech, db.device(n))[0] for n in ("h100-sxm", "rtx-4090")]
    np.testing.assert_allclose(hw["cost_usd"], [2 * est[0], est[1]])
    np.testing.assert_allclose(hw["price_usd"], [2 * 30000, 1599])


def test_int4_streaming_belongs_to_the_runtime(ideal):
    # Llama-2-7B plain int4 streams its layers and LM head (not the embedding): 6,476,005,376 +
    # 131,072,000 = 6,607,077,376 weights x 0.515625 B = 3,406,773,646 B. On an ideal H100
    # (3.35 TB/s) the graphs runtime streams them at the bf16 rate (factor 1.0), gpt-fast's
    # kernels at 0.59: the difference is 3,406,773,646 x (1/0.59 - 1) / 3.35e12 s = 0.7067 ms
    kw = dict(hw="h100-sxm", target="llama-2-7b", dtype="int4", prompt=0, output=1, set_fields=ideal)
    graphs = evaluate_design(runtime="graphs", **kw)["baseline_ms_per_token"]
    gpt_fast = evaluate_design(runtime="gpt-fast", **kw)["baseline_ms_per_token"]
    w = 6_607_077_376 * 0.515625
    assert gpt_fast - graphs == pytest.approx(w * (1 / 0.59 - 1) / 3.35e12 * 1e3, rel=1e-9)
    # 16-bit weights stream the same under both
    kw["dtype"] = "bf16"
    assert (evaluate_design(runtime="graphs", **kw)["baseline_ms_per_token"]
            == evaluate_design(runtime="gpt-fast", **kw)["baseline_ms_per_token"])


# ---- continuous batching ------------------------------------------------------------------

def test_continuous_batching_runs_the_arriving_prompts_in_each_step(db):
    m = db.model("llama-3.1-8b")
    # B = 11 in flight, P = 1000, G = 100: while one request decodes the other 10 are replaced
    # at 10/100 per step, so every step also runs 1000*10/(11*100) = 9.0909 prompt tokens per
    # sequence, X = 100 tokens in all. They add 2*6,979,321,856 FLOP each in the layers (no
    # logits) and 4*32*128*32 = 524,288 FLOP per causal query-key pair, 100*1001/2 pairs each
    # (a prompt attends to itself), and 100 tokens of KV writes (32*2*8*128*2 = 131,072 B each)
    x = 1000 * 10 / (11 * 100)
    kw = dict(batch=11.0, q=1.0, context=1050.0, **tf.step_kwargs("bf16", "bf16"))
    a = step_cost(m, _unit_hw(), **kw)
    b = step_cost(m, _unit_hw(), prefill_tokens=x, prefill_len=1000.0, **kw)
    assert b.flops[0] - a.flops[0] == pytest.approx(100 * 2 * 6_979_321_856 + 524_288 * 100 * 1001 / 2, rel=1e-12)
    assert b.bytes[0] - a.bytes[0] == pytest.approx(100 * 131_072, rel=1e-9)


def test_continuous_batching_at_one_request_is_plain_decoding(ideal):
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", prompt=1000, output=100, set_fields=ideal)
    st = evaluate_design(**kw)
    co = evaluate_design(continuous=True, **kw)
    assert co["batching"] == "continuous" and st["batching"] == "static"
    assert co["baseline_ms_per_token"] == st["baseline_ms_per_token"]
    # one client: no running iteration to wait for, no queue; its prompt is one iteration of 1,000
    # prompt tokens beside its own decode token (one more LM-head row than the static prefill)
    assert co["ttft_ms"] == pytest.approx(st["ttft_ms"], rel=0.01)
    assert co["ttft_ms"] >= st["ttft_ms"]
    # at 32 in flight: its prompt rides in a step beside 31 decodes, not 32 prompts at once; steps get slower
    st32 = evaluate_design(batch=32, **kw)
    co32 = evaluate_design(batch=32, continuous=True, **kw)
    assert co32["ttft_ms"] < st32["ttft_ms"] / 10
    assert co32["baseline_ms_per_token"] > st32["baseline_ms_per_token"]


def test_study_workload_continuous_flag(tmp_path):
    from dse.study import load_study
    p = tmp_path / "s.yaml"
    body = ("name: s\nworkload: {target: llama-3.1-8b, continuous: %s}\n"
            "space: {target_chip: {device: [h100-sxm, h200]}}\n"
            "objectives: [{metric: spec_ms_per_token, direction: minimize}]\n")
    p.write_text(body % "true")
    assert load_study(str(p)).workload.continuous is True
    p.write_text(body % "1")
    from dse.errors import SpecError
    with pytest.raises(SpecError, match="workload.continuous"):
        load_study(str(p))
