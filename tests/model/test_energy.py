"""Energy per token and provisioned power (issue 17 item 7), worked by hand from hardware_db/technology.

Constants (technology/nodes.yaml, memory.yaml): n4 0.5 pJ/FLOP and 0.07 W/mm^2 leakage, n5 0.55 pJ/FLOP and
0.07 W/mm^2; HBM3 5.5 pJ/bit, HBM3E 5.0, GDDR6 7.5, SRAM 0.1; the SerDes 5 pJ/bit; a TDP is sized for 70% of the
BF16 peak. Fitted on ML.ENERGY rows (docs/calibration.md section 5d): a bit read from off-chip DRAM costs the
logic die 12.1 pJ more, an inference FLOP the node's pJ/FLOP x (1 + 1.42), a busy chip burns its leakage + 0.162 x
(its provisioned power - leakage). Energy of a step = bytes from memory x J/byte + FLOPs x J/FLOP + link bytes x
5 pJ/bit x 8, plus every chip's busy power for its time, at most every chip's provisioned power x its time, per
generated token.
"""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

import dse
from dse.api import evaluate_design
from dse.catalog.database import load_database
from dse.catalog.technology import load_technology
from dse.model.technology import (
    energy_constants,
    known_part_energy,
    known_part_model_power_w,
    known_part_power_w,
    synthesize_chip,
)

DB = load_database()
TECH = load_technology(DB.root)


def test_provisioned_power_against_vendor_tdps():
    """power_w is the provisioned (TDP-like) figure: u x peak x J/FLOP + usable bandwidth x J/bit + static +
    link. Cerebras WSE-3 (TSMC 5 nm = n5, 46,225 mm^2, SRAM 21 PB/s, 15,625 TF dense BF16): compute 0.7 x
    15.625e15 x 0.55e-12 = 6,015.6 W; the SRAM at the bandwidth the compute can take in, min(21e15, 15.625e15 x
    1 B/FLOP) x 8 x 0.1e-12 = 12,500 W (at its full 21 PB/s and 0.5 pJ/bit it was 84 kW); static 0.07 x 46,225
    = 3,235.75 W; no link: 21,751.4 W against the CS-3's ~23 kW (-5.4%; it was 111 kW, +384%)."""
    wse, basis = known_part_power_w(TECH, DB.device("cerebras-wse-3"))
    assert basis == "estimate"
    assert wse == pytest.approx(6015.625 + 12_500 + 3235.75, rel=1e-12)
    assert abs(wse / 23_000 - 1) < 0.30
    # the HBM parts: memory never binds at the compute's intake (3.35 TB/s << 989 TB/s), unchanged:
    # H100 SXM 346.29 + 147.4 + 56.98 + 36 = 586.67 W (TDP 700, -16%); H200 631.27 W (-10%);
    # MI300X (n5, 8 x HBM3 = 5.3 TB/s, 1,307.4 TF, derived 1,155 mm^2, 896 GB/s) 853.2 W (TDP 750, +14%);
    # B200 (n4, 8 TB/s HBM3E, 2,250 TF, derived 1,599 mm^2, 1.8 TB/s) 1,291.4 W (TDP 1,000, +29%)
    # A part's power_w is that estimate bounded by its vendor TDP: the MI300X's 750 W and the B200's 1,000 W bind.
    want = {"h100-sxm": (586.67, 700), "h200": (631.27, 700), "mi300x": (853.23, 750), "b200": (1291.43, 1000)}
    for name, (watts, tdp) in want.items():
        got = known_part_model_power_w(TECH, DB.device(name))
        assert got == pytest.approx(watts, abs=0.01), name
        assert DB.device(name).tdp_w == tdp and abs(got / tdp - 1) < 0.30
        power, basis = known_part_power_w(TECH, DB.device(name))
        assert (power, basis) == ((got, "estimate") if got < tdp else (tdp, "tdp")), name


def test_sram_chip_is_charged_at_the_bandwidth_it_can_use():
    # n5, 100 TFLOP/s, 500 MB of SRAM as its memory: 500 x 350 GB/s per MB = 175 TB/s of banks, but a 16-bit
    # matrix-vector product takes in one byte per FLOP: 100 TB/s usable. Power 0.7 x 100e12 x 0.55e-12 = 38.5 W
    # + 100e12 x 8 x 0.1e-12 = 80 W + static 0.07 x (100/1.49 + 500/2.5 + 75 = 342.114 mm^2) = 23.948 W
    # = 142.45 W (the 766 W charged 175 TB/s at 0.5 pJ/bit: 700 W of SRAM)
    n5, sram = TECH.node_index("n5"), TECH.memory_index("sram")
    chip = synthesize_chip(TECH, node_idx=n5, peak_tflops=100.0, memory_idx=sram, memory_stacks=0, stack_height=0,
                           sram_mb=500.0, link_bw_gb_s=0.0)
    assert float(chip.mem_bw_bytes_s[0]) == pytest.approx(175e12)
    assert float(chip.memory_power_w[0]) == pytest.approx(80.0, rel=1e-12)
    area = 100 / 1.49 + 500 / 2.5 + 75
    assert float(chip.power_w[0]) == pytest.approx(38.5 + 80.0 + 0.07 * area, rel=1e-12)
    assert float(chip.power_w[0]) == pytest.approx(142.45, abs=0.01)


def test_energy_constants_by_hand():
    """technology.energy_constants on the H100 SXM (n4, HBM3, 814 mm^2, provisioned 586.67 W): a byte from HBM3
    (5.5 + 12.1 pJ/bit) x 8 = 140.8 pJ; a BF16 FLOP 0.5 x (1 + 1.42) = 1.21 pJ; busy 0.07 x 814 = 56.98 W of leakage
    + 0.162 x (586.67 - 56.98) = 142.790 W; its limit, its vendor TDP, 700 W (hardware_db/devices/h100-sxm.yaml). The
    B200's busy power is from its 1,000 W TDP, which bounds its 1,291.43 W estimate: 0.07 x 1,598.5 mm^2 (derived) +
    0.162 x (1,000 - that). An SRAM-only chip's SRAM sits beside its compute: no on-chip DRAM path, 0.1 x 8 = 0.8 pJ
    a byte."""
    e = known_part_energy(TECH, DB.device("h100-sxm"))
    assert e["mem_j_per_byte"] == pytest.approx(140.8e-12, rel=1e-12)
    assert e["j_per_flop"] == pytest.approx(1.21e-12, rel=1e-12)
    assert e["static_w"] == pytest.approx(56.98, rel=1e-12)
    assert e["idle_w"] == pytest.approx(56.98 + 0.162 * (586.67 - 56.98), rel=1e-12)
    assert e["idle_w"] == pytest.approx(142.78978, rel=1e-9)
    assert e["power_w"] == pytest.approx(586.67, abs=0.01) and e["power_limit_w"] == 700.0
    b200 = known_part_energy(TECH, DB.device("b200"))
    assert b200["power_w"] == b200["power_limit_w"] == 1000.0
    assert b200["idle_w"] == pytest.approx(b200["static_w"] + 0.162 * (1000.0 - b200["static_w"]), rel=1e-12)
    sram = TECH.memory_index("sram")
    j_byte, j_flop, idle = energy_constants(TECH, j_per_bit=TECH.memory_table().j_per_bit[sram], is_sram=True,
                                            j_per_flop=0.55e-12, static_w=10.0, power_w=110.0)
    assert (float(j_byte), float(j_flop), float(idle)) == pytest.approx((0.8e-12, 0.55e-12 * 2.42, 10.0 + 0.162 * 100))


def test_baseline_energy_per_token_by_hand():
    """Llama-3.1-8B bf16 on one H100, batch 1, prompt 128, output 128 (mean context 192), static batching.
    A decode step reads 32 x 218,103,808 + the LM head 525,336,576 = 7,504,658,432 weights x 2 B
    = 15,009,316,864 B and the KV cache of 193 tokens x 131,072 B = 25,296,896 B: 15,034,613,760 B x 140.8e-12 =
    2.116874 J; FLOPs 2 x 7,504,658,432 + 4 x 32 x 128 x 32 x 193 = 15,110,504,448 x 1.21e-12 = 0.018284 J;
    142.790 W busy for the step's time. One token per step; 443 W on average, under the 700 W limit (TDP).
    Static batching also charges the prompt, whose prefill the 128 tokens share (latency.energy_metrics): the
    same weights + 128 tokens x 131,072 B of KV written = 15,026,094,080 B x 140.8e-12 = 2.115674 J; FLOPs
    2 x 6,979,321,856 layer weights x 128 + the LM head at the last position 2 x 525,336,576 + attention
    524,288 x 128 x (0 + 129/2) = 1,792,085,590,016 x 1.21e-12 = 2.168424 J; busy 142.790 W for the prefill's
    time (TTFT less the runtime's 2.4 ms per request): 695 W, under the limit; / 128 tokens."""
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    dyn = 15_034_613_760 * 140.8e-12 + 15_110_504_448 * 1.21e-12
    assert dyn == pytest.approx(2.135157, abs=1e-6)
    dyn_pre = 15_026_094_080 * 140.8e-12 + 1_792_085_590_016 * 1.21e-12
    assert dyn_pre == pytest.approx(4.284098, abs=1e-6)
    t, t_pre = r["baseline_ms_per_token"] * 1e-3, (r["ttft_ms"] - 2.4) * 1e-3
    assert 600 < dyn_pre / t_pre + 142.78978 < 700                       # the prefill is under the cap too
    prompt = (dyn_pre + 142.78978 * t_pre) / 128
    assert r["baseline_energy_j_per_token"] == pytest.approx(dyn + 142.78978 * t + prompt, rel=1e-9)
    assert (dyn + 142.78978 * t) / t < r["power_limit_w"] == 700.0
    assert r["energy_j_per_token"] == r["baseline_energy_j_per_token"]          # no draft: the same
    assert r["tokens_per_j"] == pytest.approx(1 / r["energy_j_per_token"], rel=1e-12)


def test_static_batching_charges_the_prompts():
    """Batch 64, prompt 4,096, output 128 on one H100 (Llama-3.1-8B): static batching left the 64 prompts'
    prefill out (0.175 J/token against continuous batching's 0.653, which prefills the arriving prompts in every
    step). The prefill, one step of 262,144 tokens, is compute-bound and draws the 700 W TDP (its FLOPs at the
    fitted 1.21 pJ and busy power would be more): 700 W x t_pre / (64 x 128) per token, t_pre = TTFT - 2.4 ms;
    static and continuous now agree within 10%; the prompt is most of a token's energy at this prompt length."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", batch=64, prompt=4096)
    static, cont = evaluate_design(**kw), evaluate_design(continuous=True, **kw)
    t_pre = (static["ttft_ms"] - 2.4) * 1e-3
    decode = static["energy_j_per_token"] - 700.0 * t_pre / (64 * 128)
    assert decode == pytest.approx(0.175, abs=0.001)           # what static batching charged before
    assert static["energy_j_per_token"] == pytest.approx(cont["energy_j_per_token"], rel=0.10)
    assert static["energy_j_per_token"] > 3 * decode
    # dse eval's mean draw over a request (its prefill included) stays within the TDP
    from dse.cli.text import energy_line
    draw = static["energy_j_per_token"] * 64 * 128 / ((static["request_latency_ms"] + static["spec_ms_per_token"]) * 1e-3)
    assert 600 < draw < 700 and f"draws {draw:,.1f} W of its 700.0 W TDP" in energy_line(static)


def test_a_chip_draws_at_most_its_power_limit():
    """Llama-3.1-8B on one H100 at 64 sequences (continuous batching, prompt 640, output 395: the ML.ENERGY v3.0
    row's): the step's bytes, FLOPs and busy power would draw more than the H100's 700 W TDP, so the chip runs at
    that limit: energy per token = 700 W x the step's time / 64 exactly (the GPU measured 610 W; the energy model's
    provisioned 586.67 W was the limit before: ML.ENERGY measured up to 690 W on one H100, -17% to -24% at batch
    64-256). At 32 sequences it draws 612 W, above the provisioned figure, under the TDP (measured 560 W); at 8,
    less (the measured GPU: 486 W; dse 490 W)."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", prompt=640, output=395, continuous=True)
    busy = evaluate_design(batch=64, **kw)
    step = busy["baseline_ms_per_token"] * 1e-3
    assert busy["power_limit_w"] == busy["tdp_w"] == 700.0 and busy["power_w"] == pytest.approx(586.67, abs=0.01)
    assert busy["energy_j_per_token"] == pytest.approx(700.0 * step / 64, rel=1e-6)
    mid = evaluate_design(batch=32, **kw)
    assert 586.67 < mid["energy_j_per_token"] * mid["tokens_per_s"] < 700.0
    light = evaluate_design(batch=8, **kw)
    draw = light["energy_j_per_token"] * light["tokens_per_s"]
    assert 480 < draw < light["power_w"]
    # dse eval says which: "draws 700.0 W of its 700.0 W TDP (at its power limit: ...)"
    from dse.cli.text import energy_line
    assert "draws 700.0 W of its 700.0 W TDP (at its power limit" in energy_line(busy)
    assert "power limit" not in energy_line(light)


def test_b200_draws_at_most_its_tdp():
    """Llama-3.1-8B on one B200 at batch 64 (continuous batching): the energy model's provisioned power for the
    B200 reads 1,291.43 W against its 1,000 W TDP (hardware_db/devices/b200.yaml); the chip drew 1,291 W. Now its
    power_w and its limit are the TDP and it draws 1,000 W at most (ML.ENERGY measured 450-690 W on one B200
    for this model)."""
    r = evaluate_design(hw="b200", target="llama-3.1-8b", batch=64, continuous=True)
    draw = r["energy_j_per_token"] * r["tokens_per_s"]
    assert r["power_w"] == r["power_limit_w"] == r["tdp_w"] == 1000.0 and r["power_basis"] == "tdp"
    assert draw == pytest.approx(1000.0, rel=1e-9)


def test_eval_counts_the_draft_chip():
    """An L40S target with an H100 draft chip (Llama-3.1-8B, Llama-3.2-1B draft): power_w, tdp_w, power_limit_w,
    cost and price are the target's plus the draft chip's, as a study's columns are. The L40S: the energy model's
    223.69 W (under its 350 W TDP); the H100 586.67 W (700 W): 810.36 W provisioned, a 1,050 W limit. It reported
    the L40S's 224 W alone."""
    kw = dict(hw="l40s", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, k=4)
    alone = evaluate_design(**kw)
    both = evaluate_design(draft_hw="h100-sxm", **kw)
    h100 = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    assert alone["power_w"] == pytest.approx(223.69, abs=0.01) and alone["tdp_w"] == 350.0
    assert both["power_w"] == pytest.approx(223.69 + 586.67, abs=0.01)
    assert both["tdp_w"] == both["power_limit_w"] == 350.0 + 700.0
    assert both["cost_usd"] == pytest.approx(alone["cost_usd"] + h100["cost_usd"], rel=1e-12)
    from dse.cli.text import energy_line
    assert "of its 1,050 W TDP" in energy_line(both)


def test_speculation_and_batching_lower_energy_per_token():
    """At batch 64 the weights a step reads feed 64 tokens: less energy per token than at batch 1; and a 1B draft
    at alpha 0.8 with k 4 reads the 8B's weights once per 3.36 tokens (a verify of 5 tokens costs about a decode
    step) for 4 steps of a 1B model: less energy per token than plain decoding too."""
    one = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", batch=1)
    many = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", batch=64)
    assert many["energy_j_per_token"] < one["energy_j_per_token"] / 10
    spec = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
    assert spec["baseline_energy_j_per_token"] == one["energy_j_per_token"]
    assert spec["energy_j_per_token"] < 0.6 * spec["baseline_energy_j_per_token"]


def test_overlapped_drafting_pays_for_discarded_windows():
    """Overlapped on a draft chip, the window drafted during verification is thrown away unless usable (1 - p_win):
    its energy is paid again; the draft chip's busy power runs the whole iteration."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", draft_hw="l4", alpha=0.8, k=4)
    serial = evaluate_design(**kw)
    over = evaluate_design(overlap=True, **kw)
    assert over["spec_ms_per_token"] < serial["spec_ms_per_token"]
    # energy per iteration = dynamic + busy power x time (both under the two chips' provisioned 586.67 + 72 W);
    # the overlapped one re-drafts with probability 1 - p_window and runs for less time: check both by the
    # identity energy x B x tau = dyn_verify + m x dyn_draft + link + busy x iter, with m = 1 (serial) and
    # 2 - p_window (overlapped); busy: the H100's 142.790 W and the L4's (its leakage + 0.162 x the rest)
    busy = 142.78978 + known_part_energy(TECH, DB.device("l4"))["idle_w"]
    for r in (serial, over):
        assert r["energy_j_per_token"] * r["tokens_per_s"] < 586.67 + 72.0
    e_s = serial["energy_j_per_token"] * serial["tau"] - busy * serial["iter_ms"] * 1e-3
    e_o = over["energy_j_per_token"] * over["tau"] - busy * over["iter_ms"] * 1e-3
    # the difference is (1 - p_window) drafts' dynamic energy, the same verify and link. By hand, one window: 4
    # steps of Llama-3.2-1B (bf16) on the L4 (n4, GDDR6 7.5 + 12.1 pJ/bit): 16 x 60,817,408 + tied head
    # 262,668,288 = 1,235,746,816 weights x 2 B + 193 tokens x 32,768 B of KV = 2,477,817,856 B x 8 x 19.6e-12 =
    # 0.388522 J; 2 x 1,235,746,816 + 4 x 32 x 64 x 16 x 193 = 2,496,790,528 FLOPs x 1.21e-12 = 0.003021 J: 4 x
    # 0.391543 J
    window = 4 * (2_477_817_856 * 8 * 19.6e-12 + 2_496_790_528 * 1.21e-12)
    assert window == pytest.approx(1.566171, abs=1e-6)
    assert (e_o - e_s) / (1 - over["p_window"]) == pytest.approx(window, rel=1e-6)


def test_expert_parallel_energy_is_the_mean_rank_s():
    """The busiest rank sets the time, but all ranks together move the mean rank's bytes E times: a DeepSeek-V3
    step under EP 8 moves as many bytes as under tensor parallel; only the links and the time differ (8 H200s
    busy at 150.015 W each: 56.98 W leakage + 0.162 x (631.27 - 56.98) W; both under their 5,050 W provisioned)."""
    kw = dict(hw="h200", chips=8, target="deepseek-v3", dtype="fp8", batch=8)
    ep, tp = evaluate_design(ep=8, **kw), evaluate_design(ep=1, **kw)
    busy = 8 * (56.98 + 0.162 * (631.27 - 56.98))
    for r in (ep, tp):
        assert r["baseline_energy_j_per_token"] * r["baseline_tokens_per_s"] < r["power_w"]
    dyn_ep = ep["baseline_energy_j_per_token"] * 8 - busy * ep["baseline_ms_per_token"] * 1e-3
    dyn_tp = tp["baseline_energy_j_per_token"] * 8 - busy * tp["baseline_ms_per_token"] * 1e-3
    assert dyn_ep == pytest.approx(dyn_tp, rel=0.01)
    assert ep["baseline_ms_per_token"] > tp["baseline_ms_per_token"]


def test_energy_against_published_measurements():
    """ML.ENERGY Leaderboard v3.0 (github.com/ml-energy/leaderboard public/data/models, vLLM 0.11.1, steady-state GPU
    energy per output token; hardware_db/measurements/energy_measurements_public.csv): Llama-3.1-8B on one H100,
    LMArena prompts (640 tokens, an estimate), 388.7 output tokens at 8 sequences: 0.4548 J/token (486.4 W), and
    Qwen3-8B, held out, 646.6 tokens at 8: 0.4440 J (427.0 W). dse within 5%; it said 0.15 J (3x low) before the
    busy power, the on-chip DRAM path and operand delivery were charged."""
    kw = dict(hw="h100-sxm", prompt=640, continuous=True, batch=8)
    llama = evaluate_design(target="llama-3.1-8b", output=389, **kw)
    qwen = evaluate_design(target="qwen3-8b", output=647, **kw)
    assert llama["energy_j_per_token"] == pytest.approx(0.4548, rel=0.05)
    assert qwen["energy_j_per_token"] == pytest.approx(0.4440, rel=0.05)


STUDY = {
    "name": "energy-bound",
    "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "bf16", "batch": [1, 64],
                 "prompt_tokens": 512, "output_tokens": 256, "acceptance": {"alpha": 0.8}, "k": "auto",
                 "overlap": True, "continuous": True},
    "space": {"target_chip": {"process_node": ["n5", "n3"], "peak_tflops": [50, 400, 2000],
                              "memory": ["hbm3e", "gddr7", "sram"], "memory_stacks": [2, 6], "stack_height": 8,
                              "sram_mb": [0, 20000], "chips": [1, 2], "link_bw_gb_s": 900},
              "draft_chip": {"enabled": [True, False], "peak_tflops": 200, "memory": ["sram", "lpddr5x"],
                             "memory_stacks": 4, "sram_mb": 4000, "process_node": "n3", "link_bw_gb_s": 200}},
    "objectives": [{"metric": "energy_j_per_token", "direction": "minimize"},
                   {"metric": "spec_ms_per_token", "direction": "minimize"}],
}


def test_energy_never_exceeds_provisioned_power_and_falls_with_batch(tmp_path):
    """Over a grid of synthesised chips (HBM3E, GDDR7 and 20 GB SRAM-only, 50-2,000 TFLOP/s, 1-2 chips, with and
    without an overlapped draft chip of SRAM or LPDDR5X, batch 1 and 64, continuous batching: every step carries
    its share of the prompts): the mean power a design draws while serving, energy per token x tokens/s, never
    exceeds its provisioned power_w (a synthesised chip's limit), and batch 64 costs less energy per token than
    batch 1. Energy is also a study objective."""
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({**STUDY, "output": str(tmp_path / "o.parquet")}))
    res = dse.sweep(str(p), out=tmp_path / "grid", progress=False)
    df = pd.read_parquet(res.out_dir)
    ok = df[df.fits & df.energy_j_per_token.notna()]
    assert len(ok) > 100 and (ok.params_target_chip_memory == "sram").any() and ok.params_draft_chip_enabled.any()
    draw = ok.energy_j_per_token * ok.tokens_per_s
    limit = ok.power_w * (1 + 1e-12)
    assert (draw <= limit).all(), ok.loc[draw > limit, ["power_w"]].assign(draw=draw)
    assert (ok.baseline_energy_j_per_token * ok.baseline_tokens_per_s <= limit).all()
    # the cap is a physical limit, not the rule: the median design draws ~80% of its provisioned power; it binds
    # for HBM3E chips of 50-400 TFLOP/s (TB/s streamed through a die provisioned for little compute: the on-chip
    # path of a DRAM bit, 12.1 pJ, is in the energy, not in power_w) and never for GDDR7 or SRAM-only chips here
    at = draw >= ok.power_w * (1 - 1e-9)
    assert 0 < at.mean() < 0.3, at.mean()
    assert not at[ok.params_target_chip_memory != "hbm3e"].any()
    assert 0.6 < (draw / ok.power_w).median() < 0.95
    knobs = [c for c in ok.columns if c.startswith("params_") and c != "params_batch"]
    pair = ok.pivot_table(index=knobs, columns="params_batch", values="energy_j_per_token", dropna=False)
    pair = pair.dropna()
    assert len(pair) > 50 and (pair[64] < pair[1]).all()
