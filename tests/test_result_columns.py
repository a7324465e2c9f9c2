"""Every column of the Parquet results row, pinned with numbers worked out by hand (issue 7, item 2).

Three studies are written to tmp_path and run through the public API only (``dse.sweep``,
``dse.run_study``, ``dse.evaluate_design``); the Parquet files are read back with pandas/pyarrow.
The expected values are recomputed here, independently of dse's code, from the raw database
YAML (read with PyYAML) and the equations of MODEL.md:

- KNOWN: Llama-3.1-70B bf16 + Llama-3.2-1B draft, k = 4, alpha = 0.8, batch 1, on
  h100-sxm or h200, 1 or 2 chips. One chip of either does not fit (141 GB of weights);
  two chips fit. Two constraints (a latency cap, which a design that does not fit violates by
  +1, and a power cap) and the objectives (max tokens/s, min silicon area) make h100 x 2 dominated by
  h200 x 2 (the same 814 mm^2 die).
- SYNTH: Llama-3.1-8B bf16 + Llama-3.2-1B on a chip synthesised from technology knobs (N4,
  1,000 TFLOP/s, 6 or 8 x 8-high HBM3E, 50 MB SRAM), with and without a colocated group of 2
  draft chips (N5, 100 TFLOP/s, 1 x 8-high HBM3E, 32 MB SRAM, 128 GB/s link). 8 stacks do not
  fit the die's edges (not buildable); a power cap and a speedup floor make the draft-chip rows
  infeasible by a known amount.
- the rows of KNOWN on one chip are the designs that do not fit.

The model terms (decode, verify, draft and prefill steps) are re-derived from the roofline of
MODEL.md section 2 (revised 2026-11-30: per component the smooth roofline
(t_c^p + t_m^p)^(1/p), p = 2 from graphs.yaml, of FLOPs / (P x eta_c) and bytes / (BW x eta_m),
plus fixed costs and all-reduces at the link class's efficiency and latency, technology/links.yaml),
in plain Python scalars. Capacity
is checked per chip (weights / t, KV / min(t, h_kv), a 16-bit KV cache, DRAM "GB" = GiB) and
reported as per-chip need x chips in 1e9-byte GB; TTFT carries the runtime's 2.4 ms per
request; request latency = TTFT + (G-1) x per-token latency; a known part's cost_usd is the
manufacturing estimate of its die, node and HBM (MODEL.md sections 5-6) and its street price is
price_usd. The glue (units, system totals, ratios, nulls, constraint sums) is checked to 1e-9
relative, the physics to 1e-6.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import dse
from dse.results.analysis import load_results

DB = Path(__file__).resolve().parent.parent / "hardware_db"
#: bytes per "GB" of DRAM capacity in the database YAML (MODEL.md section 0, revised 2026-11-30:
#: HBM/GDDR/LPDDR parts are sized in binary units, an H100's "80 GB" is 80 GiB; the technology
#: table's gib_per_layer and usd_per_gib are per GiB too). Output `_gb` columns are 1e9 bytes.
GB = 2.0 ** 30
OUT_GB = 1e9
GLUE = 1e-9         # relative tolerance: unit conversions, sums, ratios
PHYS = 1e-6         # relative tolerance: re-derived roofline terms


def _y(rel: str) -> dict:
    return yaml.safe_load((DB / rel).read_text())


def _public(name: str):
    """dse.<name>, the public function."""
    obj = getattr(dse, name)
    assert callable(obj), name
    return obj


# ---------------------------------------------------------------------------------------------
# Hand physics (MODEL.md sections 1-4), scalars only
# ---------------------------------------------------------------------------------------------

RT = _y("runtimes/graphs.yaml")      # the study default runtime
LAUNCH_S = RT["kernel_launch_us"] * 1e-6          # 6.5 us
KPL = RT["kernels_per_layer"]                     # 8
STEP_S = RT["step_overhead_us"] * 1e-6            # 38 us
SPEC_S = RT["spec_overhead_us"] * 1e-6            # 100 us per speculative iteration
SEQ_S = RT["sequence_overhead_us"] * 1e-6         # 0 us per sequence per step (B x t_seq)
REQ_S = RT["request_overhead_us"] * 1e-6          # 2.4 ms per request, once, in TTFT
ROOF_P = RT["roofline_p"]                         # 2.0: (t_c^p + t_m^p)^(1/p) per part
LINKS = _y("technology/links.yaml")["classes"]    # per link class: all-reduce efficiency, latency per ring step
LINK_EFF = LINKS["nvlink"]["efficiency"]["value"]  # 0.82: a synthesised chip's link (class nvlink, the default)
#: the nvlink class's second protocol (its low-latency protocol's efficiency, its bandwidth protocol's latency a
#: step): 0.24 and 3.18 us; a class without them has one protocol (efficiency, latency_us)
LINK_LL_EFF = LINKS["nvlink"]["ll_efficiency"]["value"]
LINK_BULK_S = LINKS["nvlink"]["bulk_latency_us"]["value"] * 1e-6
RESERVE = RT["memory_reserve_fraction"]           # 0.05 of capacity
K_MAX = 16                                        # study default workload.k_max


def model(name: str) -> dict:
    """Parameter counts (MODEL.md section 1): attention d*h*dh + 2*d*hkv*dh + h*dh*d, gated FFN
    3*d*f, LM head V*d; stored = layers + V*d (+ V*d again when untied); a decode step streams
    the layers + LM head. KV bytes per token = L * 2*hkv*dh * 2: the KV cache is 16-bit by default
    whatever the weight dtype (MODEL.md section 1)."""
    m = _y(f"models/{name}.yaml")
    d, h, hkv, dh = m["hidden_size"], m["num_attention_heads"], m["num_kv_heads"], m["head_dim"]
    L, f, V = m["num_layers"], m["intermediate_size"], m["vocab_size"]
    layer = d * h * dh + 2 * d * hkv * dh + h * dh * d + 3 * d * f
    lm = V * d
    return dict(L=L, d=d, h=h, hkv=hkv, dh=dh, layer=layer, lm=lm, V=V,
                stored=L * layer + lm * (1 if m["tied_embeddings"] else 2),
                kv_per_token_bytes=L * 2 * hkv * dh * 2.0)


# Llama-3.1-70B: layer = 8192*64*128*2 + 2*8192*8*128 + 3*8192*28672 = 855,638,016;
# 80 layers + 2 x 128256*8192 = 70,552,387,584 parameters (params_b 70.55 in its YAML)
M70, M8, M1 = model("llama-3.1-70b"), model("llama-3.1-8b"), model("llama-3.2-1b")
assert M70["stored"] == 70_552_387_584
assert M1["stored"] == 1_235_746_816          # tied: 16 layers + one 128256*2048 matrix


def step(m: dict, hw: dict, *, B: float, q: float, S: float, prefill: bool = False) -> dict:
    """One forward step on a group of t chips (MODEL.md section 2, roofline.py's conventions):
    linear part: F = 2*(L*layer + lm)*B*q (prefill: LM head on the last position only),
    bytes = (L*layer + lm)*2; attention: bytes = B*(S+q)*kv_per_token, F = 4*h*dh*L*B*q*(S+(q+1)/2);
    weights and FLOPs divided by t, the KV cache by min(t, h_kv) (MODEL.md section 2). Each part
    takes the smooth roofline (t_c^p + t_m^p)^(1/p), p = roofline_p of the runtime (2.0), with
    t_c = F/(P*eta_c) (attention at the 16-bit KV dtype's rate: the bf16 peak here) and
    t_m = bytes/(BW*eta_m); its whole time goes to the side that bounds it. Fixed cost
    L*kernels*t_launch + t_step + B*t_seq; t > 1 adds 2 ring all-reduces of B*q*d*2 bytes per
    layer by the faster of the link class's two protocols: 2(t-1)/t * bytes/(eta * link/2) + 2(t-1)*lat
    at (lat, eta_LL) and at (lat_bulk, eta_link) (technology/links.yaml)."""
    t = hw["chips"]
    L = m["L"]
    w_bytes = (L * m["layer"] + m["lm"]) * 2.0 / t
    f_lin = (2.0 * L * m["layer"] * B * q + 2.0 * m["lm"] * B * (1.0 if prefill else q)) / t
    kv_bytes = B * (S + q) * m["kv_per_token_bytes"] / min(t, m["hkv"])
    f_att = 4.0 * m["h"] * m["dh"] * L * B * q * (S + 0.5 * (q + 1.0)) / t
    flop_s, byte_s = hw["peak"] * hw["eta_c"], hw["bw"] * hw["eta_m"]
    parts = [(f_lin / flop_s, w_bytes / byte_s), (f_att / flop_s, kv_bytes / byte_s)]
    smooth = [(tc ** ROOF_P + tm ** ROOF_P) ** (1.0 / ROOF_P) for tc, tm in parts]
    t_mem = sum(x for x, (tc, tm) in zip(smooth, parts) if tm >= tc)
    t_cmp = sum(x for x, (tc, tm) in zip(smooth, parts) if tm < tc)
    ring = 0.0
    if t > 1:
        n = B * q * m["d"] * 2.0
        ring = 2.0 * L * min(2.0 * (t - 1) / t * n / (eta * 0.5 * hw["link"]) + 2.0 * (t - 1) * lat
                             for lat, eta in ((hw["lat"], hw["ll_eff"]), (hw["bulk_lat"], hw["link_eff"])))
    fixed = L * KPL * LAUNCH_S + STEP_S + B * SEQ_S       # the software's share (dense GQA layers: KPL each)
    t_ovh = fixed + ring
    bound = ("memory", "compute", "overhead")[int(np.argmax([t_mem, t_cmp, t_ovh]))]
    # energy (MODEL.md section 5): every chip's bytes from memory x J/byte and FLOPs x J/FLOP (bf16 weights
    # and KV: one rate), and the bytes the ring all-reduces send, 2(t-1) x the message, x the link's J/byte
    ring_bytes = 2.0 * L * 2.0 * (t - 1) * (B * q * m["d"] * 2.0)
    energy = t * ((w_bytes + kv_bytes) * hw["mem_j"] + (f_lin + f_att) * hw["j_flop"]) + ring_bytes * hw["link_j"]
    return dict(time=t_mem + t_cmp + t_ovh, ai=(f_lin + f_att) / (w_bytes + kv_bytes), bound=bound,
                memory_bound=all(tm >= tc for tc, tm in parts), fixed=fixed, energy=energy)


#: HBM stacks of the known parts (hardware_db/reference/accelerators.csv, column hbm_stacks: H100 SXM
#: five 16 GiB HBM3 stacks, H200 six HBM3E stacks); their node 'TSMC 4N' is the table's n4
KNOWN_STACKS = {"h100-sxm": 5, "h200": 6}


def _tech() -> tuple[dict, dict]:
    tech = _y("technology/nodes.yaml")
    return tech, {k: v["value"] for k, v in tech.items() if isinstance(v, dict) and "value" in v}


def chip_cost(node: str, mem: str, area: float, stacks: int, cap_bytes: float) -> float:
    """Manufacturing cost of one single-die HBM chip (MODEL.md sections 5-6): wafer cost /
    (dies per wafer x Murphy yield) + $/GiB x GiB + packaging (base + interposer + per stack)
    + test per mm^2. The same estimate prices a synthesised chip and a known part."""
    tech, g = _tech()
    n = {k: v["value"] for k, v in tech["nodes"][node].items()}
    m = {k: v["value"] for k, v in _y("technology/memory.yaml")["memory"][mem].items() if isinstance(v, dict)}
    assert area <= g["reticle_limit_mm2"]                       # one die
    d = g["wafer_diameter_mm"]
    dpw = math.floor(math.pi * (d / 2) ** 2 / area - math.pi * d / math.sqrt(2 * area))
    x = n["defects_per_cm2"] / 100.0 * area
    assert g["yield_model"] == "murphy"
    y = ((1 - math.exp(-x)) / x) ** 2
    return (n["wafer_cost_usd"] / (dpw * y) + m["usd_per_gib"] * cap_bytes / GB
            + g["packaging_base_usd"] + g["interposer_base_usd"] + g["packaging_usd_per_hbm_stack"] * stacks
            + g["test_usd_per_mm2"] * area)


def device(name: str, chips: int) -> dict:
    """A known part from its YAML, in SI: capacity memory_capacity_gib x 2^30, link latency and efficiency of its
    link class (nvlink: 0.44 us per ring step and 0.24 for its low-latency protocol, 3.18 us and 0.82 for its
    bandwidth protocol) unless the YAML sets its own; cost = the manufacturing estimate of its die, node and memory (chip_cost);
    price = its street price."""
    d = _y(f"devices/{name}.yaml")
    assert d["process_node"] == "TSMC 4N" and d["memory_type"].startswith("hbm")
    cap = d["memory_capacity_gib"] * GB
    return dict(chips=chips, bw=d["mem_bw_tb_s"] * 1e12, cap=cap,
                peak=d["peak_tflops_bf16"] * 1e12, eta_m=d["mem_efficiency"], eta_c=d["compute_efficiency"],
                link=d["link_bw_gb_s"] * 1e9,
                lat=d.get("link_latency_us", LINKS[d["link_class"]]["latency_us"]["value"]) * 1e-6,
                link_eff=d.get("link_efficiency", LINKS[d["link_class"]]["efficiency"]["value"]),
                ll_eff=d.get("link_ll_efficiency", LINKS[d["link_class"]]["ll_efficiency"]["value"]),
                bulk_lat=d.get("link_bulk_latency_us", LINKS[d["link_class"]]["bulk_latency_us"]["value"]) * 1e-6,
                cost=chip_cost("n4", d["memory_type"], d["die_area_mm2"], KNOWN_STACKS[name], cap),
                price=d["price_usd"], power=min(known_power("n4", d), d["tdp_w"]), area=d["die_area_mm2"],
                **energy_constants("n4", d["memory_type"], d["die_area_mm2"], min(known_power("n4", d), d["tdp_w"]),
                                   limit=d["tdp_w"]))


def energy_constants(node: str, mem: str, area: float, power: float, limit: float | None = None) -> dict:
    """Per chip (technology/nodes.yaml and memory.yaml): J per byte of its memory ((pJ/bit + the on-chip
    pJ per DRAM bit) x 8), J per BF16 FLOP of an inference step (the node's pJ/FLOP x (1 + the operand
    delivery factor)), busy W (leakage W/mm^2 x its silicon + the active-idle fraction x (its power -
    leakage)), its power limit (a known part's vendor TDP, ``limit``; else its provisioned power), J per
    link byte (the SerDes pJ/bit x 8)."""
    tech, g = _tech()
    n = {k: v["value"] for k, v in tech["nodes"][node].items()}
    pj_bit = _y("technology/memory.yaml")["memory"][mem]["pj_per_bit"]["value"]
    static = n["static_w_per_mm2"] * area
    return dict(mem_j=(pj_bit + g["onchip_pj_per_dram_bit"]) * 8e-12,
                j_flop=n["pj_per_flop"] * (1 + g["operand_delivery_factor"]) * 1e-12,
                idle=static + g["active_idle_fraction"] * (power - static), limit=power if limit is None else limit,
                link_j=g["link_pj_per_bit"] * 8e-12)


def known_power(node: str, d: dict) -> float:
    """A known part's power estimate: the energy model a synthesised chip gets (synth below), from its own
    BF16 rate, bandwidth, die area and link: u x FLOP/s x J/FLOP + BW x 8 x J/bit + static W/mm^2 x area
    + link x 8 x link J/bit (not the vendor TDP: like for like, issue 9); its power_w is this bounded by
    its vendor TDP (device() above)."""
    tech, g = _tech()
    n = {k: v["value"] for k, v in tech["nodes"][node].items()}
    pj_bit = _y("technology/memory.yaml")["memory"][d["memory_type"]]["pj_per_bit"]["value"]
    return (g["tdp_compute_utilization"] * d["peak_tflops_bf16"] * 1e12 * n["pj_per_flop"] * 1e-12
            + d["mem_bw_tb_s"] * 1e12 * 8 * pj_bit * 1e-12 + n["static_w_per_mm2"] * d["die_area_mm2"]
            + d["link_bw_gb_s"] * 1e9 * 8 * g["link_pj_per_bit"] * 1e-12)


def synth(node: str, tflops: float, mem: str, stacks: int, height: int, sram_mb: float, link_gb_s: float,
          *, eta_m: float, eta_c: float, lat_us: float, chips: int = 1) -> dict:
    """A chip synthesised by hand (MODEL.md section 5) from hardware_db/technology (HBM, one die):
    BW = stacks x bw_gb_s; capacity = stacks x height x gib_per_layer GiB; area = TFLOP/s / density
    + SRAM MB / density + stacks x PHY + fixed; cost = chip_cost (wafer / (dies per wafer x Murphy yield)
    + $/GiB x GiB + packaging (base + interposer + per stack + test per mm^2)); power = u x FLOP/s x J/FLOP
    + BW x 8 x J/bit + static W/mm^2 x area + link x 8 x link J/bit."""
    tech, g = _tech()
    mt = _y("technology/memory.yaml")
    n = {k: v["value"] for k, v in tech["nodes"][node].items()}
    m = {k: v["value"] for k, v in mt["memory"][mem].items() if isinstance(v, dict)}
    assert mt["memory"][mem]["kind"] == "hbm" and height in m["stack_heights"]
    bw = stacks * m["bw_gb_s"] * 1e9
    cap = stacks * height * m["gib_per_layer"] * GB
    area = tflops / n["tflops_per_mm2"] + sram_mb / n["sram_mb_per_mm2"] + stacks * m["phy_area_mm2"] \
        + g["fixed_die_area_mm2"]
    assert area <= g["reticle_limit_mm2"]                       # one die
    shoreline_ok = stacks * m["shoreline_mm"] <= g["memory_edges_per_die"] * math.sqrt(area * g["die_aspect_ratio"])
    cost = chip_cost(node, mem, area, stacks, cap)
    power = (g["tdp_compute_utilization"] * tflops * 1e12 * n["pj_per_flop"] * 1e-12
             + bw * 8 * m["pj_per_bit"] * 1e-12 + n["static_w_per_mm2"] * area
             + link_gb_s * 1e9 * 8 * g["link_pj_per_bit"] * 1e-12)
    return dict(chips=chips, bw=bw, cap=cap, peak=tflops * 1e12, eta_m=eta_m, eta_c=eta_c, link=link_gb_s * 1e9,
                lat=lat_us * 1e-6, link_eff=LINK_EFF, ll_eff=LINK_LL_EFF, bulk_lat=LINK_BULK_S, cost=cost,
                price=math.nan, power=power, area=area,
                buildable=shoreline_ok, **energy_constants(node, mem, area, power))


def metrics(tm: dict, dm: dict, T: dict, D: dict | None, *, B: int, P: int, G: int, k: int, alpha: float) -> dict:
    """Every metric column (display units) of one design: target model tm on group T, draft model
    dm on group D (a draft chip) or on T (D None). MODEL.md sections 3 and 4."""
    S = P + 0.5 * G                                    # mean context during generation
    on = D is not None
    Dg = D if on else T
    # ---- capacity (section 4), per chip: weights / t + KV / min(t, h_kv) (+ the draft's, sharded
    # the same way over the chips it runs on, if it lives there) + reserve = fraction of one
    # chip's capacity; reported for the group as per-chip need x chips ----
    t, td = T["chips"], Dg["chips"]
    need_t = tm["stored"] * 2.0 / t + B * (P + G) * tm["kv_per_token_bytes"] / min(t, tm["hkv"])
    # the draft's cache is sized for P + G + k_max drafted tokens (k_max = 16, the study default)
    draft_chip = dm["stored"] * 2.0 / td + B * (P + G + K_MAX) * dm["kv_per_token_bytes"] / min(td, dm["hkv"])
    chip_req = need_t + (0.0 if on else draft_chip)          # weights + KV per chip: the model's need
    reserve = RESERVE * T["cap"]                              # the runtime's, per chip (not the model's need)
    chip_short = max(0.0, chip_req + reserve - T["cap"])     # per chip: what one chip lacks
    # what a chip holds however many chips share the model: dense weights all shard (t -> inf: 0), the KV
    # cache stops shrinking at h_kv chips (one KV head's cache each) -- the target's and, on these chips, the
    # draft's -- and in L pipeline stages (the target's layers) each chip holds 1/L of that
    floor = (B * (P + G) * tm["kv_per_token_bytes"] / tm["hkv"]
             + (0.0 if on else B * (P + G + K_MAX) * dm["kv_per_token_bytes"] / dm["hkv"])) / tm["L"]
    cap_t = T["cap"] * t
    cap_d = D["cap"] * td if on else cap_t
    req_d = draft_chip * td if on else draft_chip * t
    reserve_d = RESERVE * D["cap"] * td if on else 0.0
    short = chip_short * t                                    # the target chips' shortfall, over the group
    short_d = max(0.0, req_d + reserve_d - cap_d) if on else 0.0     # the draft chip's, carried on its own
    fits = short + short_d <= 0
    out = dict(fits=fits, memory_required_gb=chip_req * t / OUT_GB, memory_reserve_gb=reserve * t / OUT_GB,
               memory_capacity_gb=cap_t / OUT_GB, memory_shortfall_gb=short / OUT_GB,
               chip_memory_required_gb=chip_req / OUT_GB, chip_memory_shortfall_gb=chip_short / OUT_GB,
               chip_memory_floor_gb=floor / OUT_GB, draft_memory_required_gb=req_d / OUT_GB,
               draft_memory_reserve_gb=reserve_d / OUT_GB,
               draft_memory_capacity_gb=cap_d / OUT_GB, draft_memory_shortfall_gb=short_d / OUT_GB,
               datastore_gb=0.0, k=k, tree_nodes=0, tree_shape="",    # a chain, no retrieval datastore
               # Llama-3.2-1B's 32 heads / 8 KV heads split over the 1 or 2 chips it runs on: all of them
               draft_tp=td,
               rank_profile="",                        # no tree: no rank profile (tests/model/test_rank_profiles.py)
               acceptance_source="given")     # alpha given in the study: no band (low = high = nominal)
    # ---- steps ----
    base = step(tm, T, B=B, q=1, S=S)
    verify = step(tm, T, B=B, q=k + 1, S=S)
    one_draft = step(dm, Dg, B=B, q=1, S=S)
    for s in (base, verify, one_draft):
        assert s["memory_bound"]          # batch 1: every decode-side part streams bytes
    t_draft = k * one_draft["time"]
    # link: 2 latencies + (B*k + 2*B) int32 token ids over half the (bidirectional) link bandwidth
    t_link = (2 * D["lat"] + (B * k * 4 + 2 * B * 4) / (0.5 * min(D["link"], T["link"]))) if on else 0.0
    # the verification's sampling (dse.model.spec_iteration): the verify pass's B x (k+1) x V fp32
    # logits written and read back, 2 x B x (k+1) x V x 4 bytes on each target chip at BW x eta_m
    sample_bytes = 2 * B * (k + 1) * tm["V"] * 4.0
    t_iter = t_draft + verify["time"] + t_link + SPEC_S + sample_bytes / (T["bw"] * T["eta_m"])   # serial drafting
    tau = (1 - alpha ** (k + 1)) / (1 - alpha)                   # Leviathan Eq. 1
    spec = t_iter / tau
    # energy per generated token (MODEL.md section 5): the iteration's verify, k draft steps and link bytes
    # (int32 ids at the SerDes J/byte), plus every chip's busy power (target + draft chips) for the
    # whole iteration, at most every chip's power limit x its time, over the B x tau tokens it emits;
    # the baseline: one plain step on the target chips. Static batching: both add the B prompts'
    # prefill on the target chips (its bytes, FLOPs and busy power, at most their limit x its time)
    # over the B x G tokens generated after it
    idle = T["idle"] * t + (D["idle"] * td if on else 0.0)
    limit = T["limit"] * t + (D["limit"] * td if on else 0.0)
    e_link = (B * k * 4 + 2 * B * 4) * T["link_j"] if on else 0.0
    pre = step(tm, T, B=B, q=P, S=0, prefill=True)
    prompts = min(pre["energy"] + T["idle"] * t * pre["time"], T["limit"] * t * pre["time"]) / (B * G)
    e_iter = min(verify["energy"] + k * one_draft["energy"] + e_link + t * sample_bytes * T["mem_j"] + idle * t_iter,
                 limit * t_iter) + prompts * B * tau
    e_base = min(base["energy"] + T["idle"] * t * base["time"], T["limit"] * t * base["time"]) / B + prompts
    pre_t = pre["time"]
    pre_d = step(dm, Dg, B=B, q=P, S=0, prefill=True)["time"]
    # TTFT: both prefills (in parallel on a draft chip, after its link latency) + the runtime's
    # per-request cost, once (graphs.yaml request_overhead_us = 2,400)
    ttft = (max(pre_t, pre_d + D["lat"]) if on else pre_t + pre_d) + REQ_S
    # the software's fixed costs of an iteration over its tau tokens: k draft steps', the verify
    # pass's, the per-iteration cost (issue 17: overhead_ms_per_token)
    overhead = (k * one_draft["fixed"] + verify["fixed"] + SPEC_S) / tau
    lat = dict(
        baseline_ms_per_token=base["time"] * 1e3, spec_ms_per_token=spec * 1e3, overhead_ms_per_token=overhead * 1e3,
        speedup=base["time"] / spec,
        alpha=alpha, tau=tau, p_all_accepted=alpha ** k,
        tau_low=tau, tau_high=tau, speedup_low=base["time"] / spec, speedup_high=base["time"] / spec,
        spec_ms_per_token_low=spec * 1e3, spec_ms_per_token_high=spec * 1e3,
        p_window=alpha ** (k + 1),          # the overlap window: all k drafts and the bonus token match
        draft_ms_per_iter=t_draft * 1e3, verify_ms_per_iter=verify["time"] * 1e3, link_ms_per_iter=t_link * 1e3,
        iter_ms=t_iter * 1e3, draft_cost_ratio=t_draft / (k * base["time"]),
        speedup_bound=tau / (1 + t_draft / base["time"]),      # Leviathan tau/(1 + k*c)
        baseline_arithmetic_intensity=base["ai"], verify_arithmetic_intensity=verify["ai"],
        draft_arithmetic_intensity=one_draft["ai"],
        tokens_per_s=B / spec, baseline_tokens_per_s=B / base["time"],
        energy_j_per_token=e_iter / (B * tau), baseline_energy_j_per_token=e_base, tokens_per_j=B * tau / e_iter,
        ttft_ms=ttft * 1e3, request_latency_ms=(ttft + (G - 1) * spec) * 1e3)   # first token with TTFT
    bounds = dict(baseline_bound=base["bound"], verify_bound=verify["bound"], draft_bound=one_draft["bound"])
    if fits:
        out.update(lat)
        out.update(bounds)
    else:                      # a design that does not fit never gets a latency (section 4)
        out.update(dict.fromkeys(lat, math.nan))
        out.update(dict.fromkeys(bounds))
    return out


def derived(row: dict) -> dict:
    """tokens/s per k$, per W, per cm^2 (= 100 mm^2) of silicon, and speedup per k$; and, with no
    workload.sla in these studies, no serving point: sla_* null or '' and usd_per_mtok null."""
    return dict(tokens_per_s_per_kusd=row["tokens_per_s"] / (row["cost_usd"] / 1e3),
                tokens_per_s_per_w=row["tokens_per_s"] / row["power_w"],
                tokens_per_s_per_cm2=row["tokens_per_s"] / (row["total_die_area_mm2"] / 100.0),
                speedup_per_kusd=row["speedup"] / (row["cost_usd"] / 1e3),
                **dict.fromkeys(("sla_tokens_per_s_per_chip", "sla_concurrency", "sla_tokens_per_s_per_user",
                                 "sla_ttft_ms", "sla_tpot_ms", "sla_energy_j_per_token", "sla_prefill_share",
                                 "usd_per_mtok"), math.nan),
                sla_speculation="", sla_serving="")


def violation(row: dict, constraints: list[dict]) -> float:
    """Sum of positive parts of the constraint values: memory fit (shortfall, or required + reserve minus
    capacity), buildable (+1 / -1), then value - max or min - value; an undefined metric is +1."""
    short = row["memory_shortfall_gb"] + row["draft_memory_shortfall_gb"]     # target chips + draft chip
    fit = short if short > 0 else row["memory_required_gb"] + row["memory_reserve_gb"] - row["memory_capacity_gb"]
    total = max(fit, 0.0) + (0.0 if row["buildable"] else 1.0)
    for c in constraints:
        v = row[c["metric"]]
        if math.isnan(v):
            total += 1.0
        else:
            total += max(v - c.get("max", math.inf), c.get("min", -math.inf) - v, 0.0)
    return total


def reason(row: dict, constraints: list[dict]) -> str | None:
    """infeasible_reason: null where feasible, else every reason '; '-joined in the order fit,
    buildable, each study constraint ('metric > max' / 'metric < min'; a null metric violates it)."""
    why = ([] if row["fits"] else ["does not fit in memory"]) + ([] if row["buildable"] else ["not buildable"])
    for c in constraints:
        v = row[c["metric"]]
        if "max" in c and (math.isnan(v) or v > c["max"]):
            why.append(f"{c['metric']} > {c['max']:g}")
        if "min" in c and (math.isnan(v) or v < c["min"]):
            why.append(f"{c['metric']} < {c['min']:g}")
    return "; ".join(why) or None


def dominated(a: dict, b: dict, objectives: list[dict]) -> bool:
    """b dominates a: no worse in every objective and better in one."""
    sign = [1 if o["direction"] == "minimize" else -1 for o in objectives]
    va = [s * a[o["metric"]] for s, o in zip(sign, objectives)]
    vb = [s * b[o["metric"]] for s, o in zip(sign, objectives)]
    return all(y <= x for x, y in zip(va, vb)) and any(y < x for x, y in zip(va, vb))


def pareto(rows: list[dict], objectives: list[dict]) -> None:
    """is_pareto / pareto_rank among feasible rows by peeling fronts; null for infeasible rows."""
    left = [r for r in rows if r["feasible"]]
    for r in rows:
        r["is_pareto"] = r["pareto_rank"] = None
    rank = 0
    while left:
        front = [r for r in left if not any(dominated(r, o, objectives) for o in left if o is not r)]
        for r in front:
            r["is_pareto"], r["pareto_rank"] = rank == 0, rank
        left = [r for r in left if all(r is not f for f in front)]
        rank += 1
    # issue 11: is_pareto marks the first row (in row order) of each point of the front; a later
    # row with the same objective values (a repeat, a tie) keeps rank 0 but is not flagged
    seen = []
    for r in rows:
        if r["is_pareto"]:
            point = [r[o["metric"]] for o in objectives]
            r["is_pareto"] = point not in seen
            seen.append(point)


# ---------------------------------------------------------------------------------------------
# The studies and their expected rows
# ---------------------------------------------------------------------------------------------

WL = dict(batch=1, prompt_tokens=512, output_tokens=256, acceptance={"alpha": 0.8}, k=4)
B, P, G, K, ALPHA = 1, 512, 256, 4, 0.8

KNOWN_OBJ = [{"metric": "tokens_per_s", "direction": "maximize"},
             {"metric": "total_die_area_mm2", "direction": "minimize"}]
KNOWN_CON = [{"metric": "spec_ms_per_token", "max": 100.0}, {"metric": "power_w", "max": 1500.0}]
KNOWN = {
    "name": "cols-known",
    "workload": {"target": "llama-3.1-70b", "draft": "llama-3.2-1b", "dtype": "bf16", **WL},
    "space": {"target_chip": {"device": ["h100-sxm", "h200"], "chips": [1, 2]}},
    "objectives": KNOWN_OBJ, "constraints": KNOWN_CON,
    "search": {"sampler": "random", "n_trials": 8, "batch_size": 8, "seed": 11},
}

SYNTH_OBJ = [{"metric": "spec_ms_per_token", "direction": "minimize"}, {"metric": "cost_usd", "direction": "minimize"}]
SYNTH_CON = [{"metric": "power_w", "max": 700.0}, {"metric": "speedup", "min": 1.2}]
TARGET_KNOBS = dict(process_node="n4", peak_tflops=1000, memory="hbm3e", memory_stacks=[6, 8], stack_height=8, sram_mb=50,
                    chips=1, link_bw_gb_s=900, link_latency_us=2.0, mem_efficiency=0.8, compute_efficiency=0.7)
DRAFT_KNOBS = dict(process_node="n5", peak_tflops=100, memory="hbm3e", memory_stacks=1, stack_height=8, sram_mb=32,
                   chips=2, link_bw_gb_s=128, link_latency_us=3.0, mem_efficiency=0.75, compute_efficiency=0.6)
SYNTH = {
    "name": "cols-synth",
    "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "bf16", **WL},
    "space": {"target_chip": TARGET_KNOBS, "draft_chip": {"enabled": [True, False], **DRAFT_KNOBS}},
    "objectives": SYNTH_OBJ, "constraints": SYNTH_CON,
    "search": {"sampler": "random", "n_trials": 8, "batch_size": 8, "seed": 5},
}


def _synth_group(kn: dict, stacks: int, link: bool = True) -> dict:
    """link=False: a lone target chip without a draft chip has no peer, so no link (issue 11:
    link bandwidth and latency are inactive there, evaluated at 0 GB/s and 0 us, no link power)."""
    return synth(kn["process_node"], kn["peak_tflops"], kn["memory"], stacks, kn["stack_height"],
                 kn["sram_mb"], kn["link_bw_gb_s"] if link else 0.0, eta_m=kn["mem_efficiency"],
                 eta_c=kn["compute_efficiency"], lat_us=kn["link_latency_us"] if link else 0.0, chips=kn["chips"])


def expected_known() -> dict[tuple, dict]:
    """Rows of KNOWN by (device, chips)."""
    rows = {}
    for dev in ("h100-sxm", "h200"):
        for chips in (1, 2):
            T = device(dev, chips)
            r = dict(params_target_chip_device=dev, params_target_chip_chips=chips)
            # hardware: per-chip figures in display units; system totals x chips
            # e.g. h100-sxm x 2: 3.35 TB/s, 989.4 TFLOP/s, street price $30,000 x 2 = $60,000,
            # 700 W x 2 = 1,400 W, 814 mm^2 x 2 = 1,628 mm^2; cost = the manufacturing estimate x 2
            # chip_memory_capacity_gb is per chip (80 GiB = 85.899 GB); memory_capacity_gb below is the group's
            r.update(buildable=True, chips=chips, tp=chips, pp=1, mem_bw_tb_s=T["bw"] / 1e12, peak_tflops=T["peak"] / 1e12,
                     chip_memory_capacity_gb=T["cap"] / OUT_GB,
                     die_area_mm2=T["area"], chip_cost_usd=T["cost"], chip_power_w=T["power"],
                     chip_price_usd=T["price"], price_usd=T["price"] * chips,
                     cost_usd=T["cost"] * chips, power_w=T["power"] * chips, total_die_area_mm2=T["area"] * chips)
            # memory_capacity_gb is the group's total (80 GiB x 2 = 171.8 GB), the denominator of the fit
            r.update(metrics(M70, M1, T, None, B=B, P=P, G=G, k=K, alpha=ALPHA))
            r.update(derived(r))
            r["constraint_violation"] = violation(r, KNOWN_CON)
            r["feasible"] = r["fits"] and r["constraint_violation"] == 0
            r["infeasible_reason"] = reason(r, KNOWN_CON)
            r["duplicate_of"] = None            # grid points are distinct designs
            rows[(dev, chips)] = r
    pareto(list(rows.values()), KNOWN_OBJ)
    return rows


def expected_synth() -> dict[tuple, dict]:
    """Rows of SYNTH by (target memory stacks, draft_chip_enabled). 8 stacks need 8 x 10 mm of
    die edge but an 827.9 mm^2 die has 2 x sqrt(827.9 x 1.269) = 64.8 mm: not buildable."""
    D = _synth_group(DRAFT_KNOBS, DRAFT_KNOBS["memory_stacks"])
    dn = DRAFT_KNOBS["chips"]                          # 2 draft chips in tensor parallel
    rows = {}
    for stacks in TARGET_KNOBS["memory_stacks"]:
        for on in (True, False):
            # one target chip: its 900 GB/s link serves only the draft chip (36 W = 900e9 x 8 x 5 pJ/bit)
            T = _synth_group(TARGET_KNOBS, stacks, link=on)
            r = dict(params_target_chip_memory_stacks=stacks, params_draft_chip_enabled=on)
            nan = math.nan          # a synthesised chip has no street price: chip_price_usd, price_usd null
            r.update(chips=1, tp=1, pp=1, mem_bw_tb_s=T["bw"] / 1e12, peak_tflops=T["peak"] / 1e12, die_area_mm2=T["area"],
                     chip_memory_capacity_gb=T["cap"] / OUT_GB,
                     chip_cost_usd=T["cost"], chip_power_w=T["power"], chip_price_usd=nan)
            # draft chip: per-chip figures where it exists, NaN (and 0 chips) where it does not
            r.update(draft_chips=dn if on else 0, draft_mem_bw_tb_s=D["bw"] / 1e12 if on else nan,
                     draft_chip_memory_capacity_gb=D["cap"] / OUT_GB if on else nan,
                     draft_peak_tflops=D["peak"] / 1e12 if on else nan, draft_die_area_mm2=D["area"] if on else nan,
                     draft_chip_cost_usd=D["cost"] if on else nan, draft_chip_power_w=D["power"] if on else nan)
            # system = 1 target chip + 2 draft chips
            r.update(cost_usd=T["cost"] + (dn * D["cost"] if on else 0.0), price_usd=nan,
                     power_w=T["power"] + (dn * D["power"] if on else 0.0),
                     total_die_area_mm2=T["area"] + (dn * D["area"] if on else 0.0),
                     buildable=T["buildable"] and (D["buildable"] or not on))
            # draft_memory_capacity_gb: the draft group's (2 x 24 GB), or the target's it shares
            r.update(metrics(M8, M1, T, D if on else None, B=B, P=P, G=G, k=K, alpha=ALPHA))
            r.update(derived(r))
            r["constraint_violation"] = violation(r, SYNTH_CON)
            r["feasible"] = r["fits"] and r["constraint_violation"] == 0
            r["infeasible_reason"] = reason(r, SYNTH_CON)
            r["duplicate_of"] = None            # grid points are distinct designs
            rows[(stacks, on)] = r
    pareto(list(rows.values()), SYNTH_OBJ)
    return rows


#: bookkeeping columns every row has
BOOK = ("study", "trial", "state", "sampler", "seed", "datetime_start", "datetime_complete")


def _write(tmp_path, spec: dict) -> Path:
    p = tmp_path / f"{spec['name']}.yaml"
    p.write_text(yaml.safe_dump({**spec, "output": str(tmp_path / f"{spec['name']}.parquet")}, sort_keys=False))
    return p


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("known")
    t0 = pd.Timestamp.now(tz="UTC").floor("us")
    res = _public("sweep")(str(_write(tmp, KNOWN)), out=tmp / "grid", progress=False)
    t1 = pd.Timestamp.now(tz="UTC")
    return res, load_results(res.out_dir), (t0, t1)


@pytest.fixture(scope="module")
def synth_grid(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synth")
    t0 = pd.Timestamp.now(tz="UTC").floor("us")
    res = _public("sweep")(str(_write(tmp, SYNTH)), out=tmp / "grid", progress=False)
    t1 = pd.Timestamp.now(tz="UTC")
    return res, load_results(res.out_dir), (t0, t1)


#: columns that are database numbers, unit conversions, sums and capacity arithmetic only (no
#: efficiency, no roofline): held to GLUE; every other float column to PHYS
GLUE_ONLY = {"mem_bw_tb_s", "peak_tflops", "chip_memory_capacity_gb", "draft_chip_memory_capacity_gb",
             "die_area_mm2", "chip_cost_usd", "chip_power_w", "chip_price_usd", "draft_mem_bw_tb_s",
             "draft_peak_tflops", "draft_die_area_mm2", "draft_chip_cost_usd", "draft_chip_power_w", "cost_usd",
             "price_usd", "power_w", "total_die_area_mm2", "memory_required_gb", "memory_capacity_gb",
             "memory_shortfall_gb", "memory_reserve_gb", "chip_memory_required_gb", "chip_memory_shortfall_gb",
             "chip_memory_floor_gb", "draft_memory_reserve_gb", "draft_memory_required_gb", "draft_memory_capacity_gb",
             "draft_memory_shortfall_gb", "datastore_gb", "alpha", "tau", "p_all_accepted", "p_window",
             "tau_low", "tau_high",
             "link_ms_per_iter"}


def _check(actual: pd.Series, expected: dict, where: str) -> None:
    """Every expected column: None -> null, NaN -> NaN, floats to GLUE/PHYS, the rest exactly."""
    for col, want in expected.items():
        if col.startswith("_"):
            continue
        got = actual[col]
        msg = f"{where}: {col} = {got!r}, expected {want!r}"
        if want is None:
            assert pd.isna(got), msg
        elif isinstance(want, bool):
            assert not pd.isna(got) and bool(got) is want and isinstance(got, (bool, np.bool_)), msg
        elif isinstance(want, str):
            assert got == want, msg
        elif isinstance(want, int):
            assert not pd.isna(got) and int(got) == want and float(got).is_integer(), msg
        elif math.isnan(want):
            assert isinstance(got, float) and math.isnan(got), msg
        else:
            rel = GLUE if col in GLUE_ONLY else PHYS
            assert got == pytest.approx(want, rel=rel, abs=1e-12), msg


def _grid_trial(meta: dict, row: pd.Series) -> int:
    """The flat grid index of a row from the axes recorded in the file's `dse` metadata."""
    axes = meta["grid"]["axes"]
    idx = [list(vals).index(row[f"params_{name}"]) for name, vals in axes.items()]
    return int(np.ravel_multi_index(idx, [len(v) for v in axes.values()]))


def _check_book(df: pd.DataFrame, res, study: str, when, sampler="grid", seed=None) -> None:
    import json
    meta = json.loads(pq.read_schema(res.parts[0]).metadata[b"dse"]) if sampler == "grid" else None
    t0, t1 = when
    for _, row in df.iterrows():
        assert row["study"] == study and row["state"] == "COMPLETE" and row["sampler"] == sampler
        assert (pd.isna(row["seed"]) if seed is None else row["seed"] == seed)
        assert t0 <= row["datetime_start"] <= row["datetime_complete"] <= t1
        if meta is not None:
            assert row["trial"] == _grid_trial(meta, row)
    assert sorted(df["trial"]) == list(range(len(df)))


# ---------------------------------------------------------------------------------------------
# The pins
# ---------------------------------------------------------------------------------------------

def test_known_part_on_two_chips_every_column(known):
    """h100-sxm and h200 on 2 chips (fit) and on 1 chip (do not fit): every column."""
    res, df, when = known
    exp = expected_known()
    assert len(df) == 4
    _check_book(df, res, "cols-known", when)
    for (dev, chips), want in exp.items():
        row = df[(df.params_target_chip_device == dev) & (df.params_target_chip_chips == chips)]
        assert len(row) == 1
        _check(row.iloc[0], want, f"{dev} x {chips}")
    # worked numbers for h200 x 2 (hardware_db/devices/h200.yaml): street price $35,000 x 2 = $70,000;
    # 814 mm^2 x 2 = 1,628 mm^2; 141 GiB x 2 = 302.795 GB
    h = df[(df.params_target_chip_device == "h200") & (df.params_target_chip_chips == 2)].iloc[0]
    assert (h.price_usd, h.chip_price_usd, h.total_die_area_mm2) == (70_000, 35_000, 1_628)
    # power, the synthesised chips' energy model on the known part (technology/nodes.yaml n4 0.5 pJ/FLOP,
    # 0.07 W/mm^2, u = 0.7, link 5 pJ/bit; memory.yaml hbm3e 5.0 pJ/bit, hbm3 5.5): h200 = 0.7 x 989.4e12 x
    # 0.5e-12 = 346.29 W + 4.8e12 x 8 x 5.0e-12 = 192 W + 0.07 x 814 = 56.98 W + 900e9 x 8 x 5e-12 = 36 W
    # = 631.27 W a chip (the vendor TDP is 700 W); h100-sxm: 346.29 + 3.35e12 x 8 x 5.5e-12 = 147.4 W
    # + 56.98 + 36 = 586.67 W (TDP 700 W)
    assert h.chip_power_w == pytest.approx(631.27, rel=GLUE) and h.power_w == pytest.approx(1262.54, rel=GLUE)
    assert h.memory_capacity_gb == pytest.approx(282 * 2 ** 30 / 1e9, rel=GLUE)
    assert (h.mem_bw_tb_s, h.peak_tflops) == (4.8, 989.4)
    # cost: the manufacturing estimate of one 814 mm^2 N4 die (nodes.yaml: 300 mm wafer,
    # floor(pi 150^2/814 - pi 300/sqrt(1628)) = 63 dies, Murphy yield at 0.08/cm^2 x 8.14 cm^2 =
    # 0.5401, $18,000 / (63 x 0.5401) = $528.99) + 141 GiB x $12.25 (hbm3e) = $1,727.25 + packaging
    # $50 + $200 + 6 stacks x $100 + test 814 x $1.13 = $919.82 -> $4,026.06 a chip; h100-sxm:
    # 80 GiB x $10.50 (hbm3) = $840, 5 stacks -> $3,038.81
    assert h.chip_cost_usd == pytest.approx(528.9944306973156 + 1727.25 + 50 + 200 + 600 + 919.82, rel=GLUE)
    assert h.cost_usd == pytest.approx(2 * h.chip_cost_usd, rel=GLUE)
    h1 = df[(df.params_target_chip_device == "h100-sxm") & (df.params_target_chip_chips == 2)].iloc[0]
    assert h1.chip_cost_usd == pytest.approx(528.9944306973156 + 840 + 50 + 200 + 500 + 919.82, rel=GLUE)
    assert (h1.price_usd, h1.chip_price_usd) == (60_000, 30_000)
    # required, per chip x 2: 70,552,387,584 x 2 B = 141.105 GB weights + 768 tokens x 327,680 B =
    # 0.252 GB KV (8 KV heads over 2 chips: halved per chip, so the same total) + 1,235,814,400 x 2 B
    # = 2.472 GB draft + (768 + 16) x 32,768 B = 0.026 GB draft KV (16: k_max) = 143.854 GB (71.927 GB a
    # chip); the runtime's reserve apart: 5% of 141 GiB per chip x 2 = 15.140 GB
    assert h.memory_required_gb == pytest.approx(141.104775168 + 0.25165824 + 2.471493632 + 0.025690112, rel=GLUE)
    assert h.memory_required_gb == pytest.approx(143.853617152, rel=GLUE)
    assert h.chip_memory_required_gb == pytest.approx(143.853617152 / 2, rel=GLUE)
    assert h.memory_reserve_gb == pytest.approx(0.05 * 282 * 2 ** 30 / 1e9, rel=GLUE)
    assert h.memory_reserve_gb == pytest.approx(15.1397597184, rel=GLUE)
    assert h.memory_shortfall_gb == 0.0 and h.chip_memory_shortfall_gb == 0.0
    # however many chips: dense weights all shard, the caches stop at 8 KV heads: 768 x 327,680 / 8
    # + 784 x 32,768 / 8 = 31,457,280 + 3,211,264 = 34,668,544 B, and in 80 stages (70B's layers) a chip
    # holds 1/80 of it: 433,356.8 B
    assert h.chip_memory_floor_gb == pytest.approx(0.034668544 / 80, rel=GLUE)
    # h100-sxm x 1: 143.854 GB needed + 4.295 GB reserve (5% of 80 GiB), 85.899 GB there: short by 62.249
    s = df[(df.params_target_chip_device == "h100-sxm") & (df.params_target_chip_chips == 1)].iloc[0]
    assert s.memory_shortfall_gb == pytest.approx(143.853617152 + 0.05 * 80 * 2 ** 30 / 1e9 - 80 * 2 ** 30 / 1e9,
                                                  rel=GLUE)
    assert s.chip_memory_shortfall_gb == s.memory_shortfall_gb and s.memory_reserve_gb == pytest.approx(4.294967296)
    # energy, h200 x 2, baseline step (technology: hbm3e 5 pJ/bit + 12.1 pJ on-chip per DRAM bit = 1.368e-10
    # J/B, n4 0.5 pJ/FLOP x (1 + 1.42) = 1.21 pJ, SerDes 5 pJ/bit; busy power 56.98 W leakage (0.07 W/mm^2 x
    # 814 mm^2) + 0.162 x (631.27 - 56.98) W = 150.015 W a chip): each chip reads 69,501,714,432 weights (80
    # layers + LM head) x 2 B / 2 + 641 tokens x 327,680 B / 2 = 69,606,735,872 B, x 2 chips x 1.368e-10 =
    # 19.044403 J; FLOPs 2 x 69,501,714,432 + 4 x 64 x 128 x 80 x 641 = 140,683,771,904 x 1.21e-12 = 0.170227 J;
    # two ring all-reduces a layer of 16,384 B, 2 x (2-1) x 16,384 B sent each: 80 x 2 x 32,768 B x 4e-11 =
    # 0.000210 J; 19.214840 J + 300.03 W x the step's time, for B = 1 token: 1,181 W, under the two chips'
    # provisioned 1,262.54 W (their limit, the 2 x 700 W TDP, higher still). Static batching adds the prompt's
    # prefill over the 256 tokens: each chip reads the weights and writes 512 x 327,680 / 2 B of KV,
    # 69,585,600,512 B x 2 x 1.368e-10 = 19.038620 J; FLOPs 2 x 68,451,041,280 x 512 + 2 x 1,050,673,152 (the LM
    # head at the last position) + 4 x 64 x 128 x 80 x 512 x 256.5 = 70,440,217,001,984 x 1.21e-12 = 85.232663 J;
    # 2,684,354,560 B of all-reduces x 4e-11 = 0.107374 J: 104.378657 J in the 65.553 ms prefill (the roofline
    # above; its 160 all-reduces of 8 MB take the bandwidth protocol, 2 x 3.18 us + 8,388,608 / 369e9 = 29.09 us
    # each), 1,592 W + the busy 300 W, over the 1,400 W limit: 1,400 W x 65.553 ms / 256 = 0.358495 J a token
    pre = step(M70, device("h200", 2), B=1, q=512, S=0, prefill=True)
    assert pre["energy"] == pytest.approx(19.038620 + 85.232663 + 0.107374, rel=1e-6)
    assert pre["energy"] / pre["time"] + 2 * 150.01498 > 1400.0
    assert h.baseline_energy_j_per_token - 2 * 150.01498 * h.baseline_ms_per_token * 1e-3 == pytest.approx(
        19.214840 + 1400.0 * pre["time"] / 256, rel=1e-6)
    assert 1400.0 * pre["time"] / 256 == pytest.approx(0.358495, rel=1e-5)
    assert h.baseline_energy_j_per_token / (h.baseline_ms_per_token * 1e-3) < h.power_w
    assert h.tokens_per_j == pytest.approx(1.0 / h.energy_j_per_token, rel=GLUE)
    # speculation: tau 3.3616 tokens for one verify (5 tokens), 4 steps of the 1B and 100 us of overhead
    assert h.energy_j_per_token < 0.4 * h.baseline_energy_j_per_token
    assert s.chip_power_w == pytest.approx(586.67, rel=GLUE)
    # violation = shortfall + 1 (latency cap on an undefined latency) + 0 (586.67 W <= 1,500 W)
    assert s.constraint_violation == pytest.approx(s.memory_shortfall_gb + 1.0, rel=GLUE)
    assert not s.fits and not s.feasible and pd.isna(s.is_pareto) and pd.isna(s.pareto_rank)
    # the same 1,628 mm^2 of silicon, fewer tokens/s: h100-sxm x 2 is dominated by h200 x 2 (rank 1)
    g = df[(df.params_target_chip_device == "h100-sxm") & (df.params_target_chip_chips == 2)].iloc[0]
    assert g.tokens_per_s < h.tokens_per_s and g.total_die_area_mm2 == h.total_die_area_mm2
    assert g.power_w == pytest.approx(1173.34, rel=GLUE) and g.power_w < h.power_w
    assert (g.is_pareto, g.pareto_rank, h.is_pareto, h.pareto_rank) == (False, 1, True, 0)


def test_synthesised_chip_with_draft_chip_every_column(synth_grid):
    """A synthesised target with and without a colocated draft chip: every column."""
    res, df, when = synth_grid
    exp = expected_synth()
    assert len(df) == 4
    _check_book(df, res, "cols-synth", when)
    for (stacks, on), want in exp.items():
        row = df[(df.params_target_chip_memory_stacks == stacks) & (df.params_draft_chip_enabled == on)]
        assert len(row) == 1
        _check(row.iloc[0], want, f"{stacks} stacks, draft chip {on}")
    six = df[df.params_target_chip_memory_stacks == 6]
    on, off = (six[six.params_draft_chip_enabled == v].iloc[0] for v in (True, False))
    # target: 6 stacks x 1,000 GB/s = 6.0 TB/s; 6 x 8 layers x 3 GiB = 144 GiB = 154.619 GB; area
    # 1000/1.58 + 50/2.5 + 6 x 12.5 + 75 = 802.911 mm^2; each draft chip 1.0 TB/s, 24 GiB (48 GiB
    # = 51.540 GB over the two), 100/1.49 + 32/2.5 + 12.5 + 75 = 167.414 mm^2
    assert (on.mem_bw_tb_s, on.memory_capacity_gb, on.draft_mem_bw_tb_s, on.draft_memory_capacity_gb) == \
        pytest.approx((6.0, 144 * 2 ** 30 / 1e9, 1.0, 48 * 2 ** 30 / 1e9), rel=GLUE)
    # no street price for a synthesised chip: chip_price_usd and price_usd null
    assert six.chip_price_usd.isna().all() and six.price_usd.isna().all()
    assert (on.draft_chips, off.draft_chips) == (2, 0)
    assert on.die_area_mm2 == pytest.approx(1000 / 1.58 + 20 + 75 + 75, rel=GLUE)
    assert on.draft_die_area_mm2 == pytest.approx(100 / 1.49 + 12.8 + 12.5 + 75, rel=GLUE)
    assert on.total_die_area_mm2 == pytest.approx(on.die_area_mm2 + 2 * on.draft_die_area_mm2, rel=GLUE)
    assert on.cost_usd == pytest.approx(on.chip_cost_usd + 2 * on.draft_chip_cost_usd, rel=GLUE)
    assert on.power_w == pytest.approx(on.chip_power_w + 2 * on.draft_chip_power_w, rel=GLUE)
    assert (off.cost_usd, off.power_w, off.total_die_area_mm2) == (off.chip_cost_usd, off.chip_power_w,
                                                                    off.die_area_mm2)
    # link: 2 x 3 us + (4 + 2) int32 ids = 24 B over 128/2 GB/s = 0.375 ns -> 0.006000375 ms
    assert on.link_ms_per_iter == pytest.approx(0.006000375, rel=GLUE) and off.link_ms_per_iter == 0.0
    # on the draft chips the draft's KV and weights leave the target: required differs by the draft
    # bytes (2.471493632 + 0.025690112 GB: (768 + 16) x 32,768 B of KV), and the draft chips hold them
    # (half each), their runtime reserve apart: 5% of 24 GiB each
    assert off.memory_required_gb - on.memory_required_gb == pytest.approx(2.497183744, rel=1e-6)
    assert on.draft_memory_required_gb == pytest.approx(2.497183744, rel=GLUE)
    assert on.draft_memory_reserve_gb == pytest.approx(0.05 * 48 * 2 ** 30 / 1e9, rel=GLUE)
    assert off.draft_memory_reserve_gb == 0.0           # the draft lives on the target chips: their reserve
    # energy per token with the draft chips: their busy power (2 x (0.07 W/mm^2 x 167.414 mm^2 at n5 + 0.162 x
    # their power above it)) runs for the whole iteration, and the link carries 24 B of int32 ids at 4e-11 J/B
    assert on.energy_j_per_token > off.energy_j_per_token
    # the draft chips' row breaks both constraints: power - 700 W and 1.2 - speedup
    assert on.speedup < 1.2 and not on.feasible and on.constraint_violation == pytest.approx(
        (on.power_w - 700.0) + (1.2 - on.speedup), rel=GLUE)
    assert off.feasible and off.constraint_violation == 0.0 and off.is_pareto and off.pareto_rank == 0
    assert pd.isna(on.is_pareto) and pd.isna(on.pareto_rank)
    # 8 stacks do not fit the die's edges: buildable False costs +1 and the row is infeasible
    eight = df[df.params_target_chip_memory_stacks == 8]
    assert not eight.buildable.any() and not eight.feasible.any() and eight.fits.all()
    e_off = eight[~eight.params_draft_chip_enabled].iloc[0]
    assert e_off.constraint_violation == pytest.approx(1.0 + max(0.0, e_off.power_w - 700.0), rel=GLUE)


@pytest.mark.parametrize("which", ["known", "synth_grid"])
def test_iteration_time_is_the_sum_of_its_parts(which, request):
    """iter_ms = draft + verify + link + the runtime's spec overhead (0.1 ms, graphs.yaml) + the
    verification's sampling (2 x B x (K+1) x V x 4 B at the target's BW x eta_m; V = 128,256 for
    both targets); and the columns derived from it: spec = iter/tau, speedup = baseline/spec,
    tokens/s = 1000*B/spec."""
    _, df, _ = request.getfixturevalue(which)
    fit = df[df.fits]
    assert len(fit) == {"known": 2, "synth_grid": 4}[which]
    for _, r in fit.iterrows():
        eta = (TARGET_KNOBS["mem_efficiency"] if which == "synth_grid"
               else _y(f"devices/{r.params_target_chip_device}.yaml")["mem_efficiency"])
        sample_ms = 2 * B * (K + 1) * 128256 * 4 / (r.mem_bw_tb_s * 1e12 * eta) * 1e3
        assert r.iter_ms == pytest.approx(r.draft_ms_per_iter + r.verify_ms_per_iter + r.link_ms_per_iter
                                          + SPEC_S * 1e3 + sample_ms, rel=GLUE)
        assert r.spec_ms_per_token == pytest.approx(r.iter_ms / r.tau, rel=GLUE)
        assert r.speedup == pytest.approx(r.baseline_ms_per_token / r.spec_ms_per_token, rel=GLUE)
        assert r.tokens_per_s == pytest.approx(1e3 * B / r.spec_ms_per_token, rel=GLUE)
        assert r.baseline_tokens_per_s == pytest.approx(1e3 * B / r.baseline_ms_per_token, rel=GLUE)
        assert r.tokens_per_s_per_kusd == pytest.approx(r.tokens_per_s / r.cost_usd * 1e3, rel=GLUE)
        assert r.draft_cost_ratio == pytest.approx(r.draft_ms_per_iter / (K * r.baseline_ms_per_token), rel=GLUE)


def test_designs_that_do_not_fit_have_no_latency(known):
    """One chip of either part: fits False, shortfall > 0, every latency and ratio NaN, bounds null,
    infeasible, no Pareto flag; the hardware columns are still there."""
    _, df, _ = known
    bad = df[df.params_target_chip_chips == 1]
    assert len(bad) == 2 and not bad.fits.any() and (bad.memory_shortfall_gb > 0).all()
    latency = ["baseline_ms_per_token", "spec_ms_per_token", "speedup", "alpha", "tau", "p_all_accepted",
               "draft_ms_per_iter", "verify_ms_per_iter", "link_ms_per_iter", "iter_ms", "draft_cost_ratio",
               "speedup_bound", "baseline_arithmetic_intensity", "verify_arithmetic_intensity",
               "draft_arithmetic_intensity", "tokens_per_s", "baseline_tokens_per_s", "ttft_ms",
               "request_latency_ms", "energy_j_per_token", "baseline_energy_j_per_token", "tokens_per_j",
               "tokens_per_s_per_kusd", "tokens_per_s_per_w", "tokens_per_s_per_cm2",
               "speedup_per_kusd"]
    assert bad[latency].isna().all().all()
    assert bad[["baseline_bound", "verify_bound", "draft_bound", "is_pareto", "pareto_rank"]].isna().all().all()
    assert not bad.feasible.any() and (bad.constraint_violation > 1.0).all()
    assert bad[["cost_usd", "power_w", "mem_bw_tb_s"]].notna().all().all()


def _known_key(r):
    return r.params_target_chip_device, int(r.params_target_chip_chips)


def _synth_key(r):
    return int(r.params_target_chip_memory_stacks), bool(r.params_draft_chip_enabled)


@pytest.mark.parametrize("spec,grid_fixture,expected,key,obj", [
    (KNOWN, "known", expected_known, _known_key, KNOWN_OBJ),
    (SYNTH, "synth_grid", expected_synth, _synth_key, SYNTH_OBJ)], ids=["known", "synth"])
def test_run_study_rows_match_the_grid(tmp_path, request, spec, grid_fixture, expected, key, obj):
    """dse.run_study writes the same columns and values as the sweep, with its sampler, seed,
    trial numbers and trial timestamps, and Pareto flags among its own rows."""
    t0 = pd.Timestamp.now(tz="UTC").floor("us")
    res = _public("run_study")(str(_write(tmp_path, spec)), storage=":memory:", progress=False)
    t1 = pd.Timestamp.now(tz="UTC")
    df = pd.read_parquet(res.path)
    _, grid, _ = request.getfixturevalue(grid_fixture)
    n, seed = spec["search"]["n_trials"], spec["search"]["seed"]
    assert list(df.columns) == list(grid.columns) and len(df) == n
    assert (df.trial.to_list() == list(range(n)) and (df.sampler == "random").all() and (df.seed == seed).all()
            and (df.study == spec["name"]).all() and (df.state == "COMPLETE").all())
    assert ((t0 <= df.datetime_start) & (df.datetime_start < df.datetime_complete)
            & (df.datetime_complete <= t1)).all()
    exp = expected()
    # Pareto flags among this file's rows (ties do not dominate: identical rows share the front)
    rows = [dict(exp[key(r)]) for _, r in df.iterrows()]
    pareto(rows, obj)
    # 8 random trials over 4 designs repeat some: duplicate_of is the first trial of the same design
    first = {}
    for (_, r), want in zip(df.iterrows(), rows):
        want["duplicate_of"] = first.get(key(r))
        first.setdefault(key(r), int(r.trial))
    assert any(w["duplicate_of"] is not None for w in rows)
    for (_, r), want in zip(df.iterrows(), rows):
        _check(r, want, f"run_study trial {r.trial}")


def test_cli_sweep_writes_the_same_rows(tmp_path, known):
    """`dse sweep` (click's CliRunner) writes the rows the Python call writes."""
    from click.testing import CliRunner

    from dse.cli.commands import main
    r = CliRunner().invoke(main, ["sweep", str(_write(tmp_path, KNOWN)), "--out", str(tmp_path / "cli"), "--quiet"])
    assert r.exit_code == 0, r.output
    df = load_results(tmp_path / "cli")
    _, grid, _ = known
    assert list(df.columns) == list(grid.columns) and len(df) == 4
    for _, row in df.iterrows():
        _check(row, expected_known()[_known_key(row)], f"dse sweep {_known_key(row)}")


def test_evaluate_design_agrees_with_the_row(known):
    """dse.evaluate_design (`dse eval`) gives the metric columns of the same design (NaN -> None)."""
    exp = expected_known()
    for dev, chips in (("h200", 2), ("h100-sxm", 1)):
        out = _public("evaluate_design")(hw=dev, chips=chips, target="llama-3.1-70b", draft="llama-3.2-1b",
                                         alpha=ALPHA, k=K, prompt=P, output=G, runtime="graphs")
        want = exp[(dev, chips)]
        for col in [c for c in out if c in want]:
            w = want[col]
            if w is None:       # `dse eval` still names the bound of a design that does not fit
                continue
            if isinstance(w, float) and math.isnan(w):
                assert out[col] is None, col
            elif isinstance(w, float):
                assert out[col] == pytest.approx(w, rel=PHYS), col
            else:
                assert out[col] == w, col


# ---------------------------------------------------------------------------------------------
# The schema: no column without a pinned value, and each column's type
# ---------------------------------------------------------------------------------------------

INT = ("trial", "seed", "chips", "tp", "pp", "draft_chips", "k", "tree_nodes", "draft_tp", "pareto_rank", "duplicate_of", "params_target_chip_chips",
       "params_target_chip_memory_stacks")
BOOL = ("buildable", "fits", "feasible", "is_pareto", "params_draft_chip_enabled")
STR = ("study", "state", "sampler", "params_target_chip_device", "baseline_bound", "verify_bound", "draft_bound",
       "tree_shape", "rank_profile", "acceptance_source", "infeasible_reason", "sla_speculation", "sla_serving")
TIME = ("datetime_start", "datetime_complete")


@pytest.mark.parametrize("which,expected", [("known", expected_known), ("synth_grid", expected_synth)])
def test_every_column_is_pinned_and_typed(which, expected, request):
    """The file's columns are exactly those the tests above assert; ints, bools, strings,
    UTC timestamps and float64 for everything else."""
    res, df, _ = request.getfixturevalue(which)
    pinned = set(BOOK) | {c for row in expected().values() for c in row if not c.startswith("_")}
    assert set(df.columns) == pinned, (set(df.columns) - pinned, pinned - set(df.columns))
    schema = pq.read_schema(res.parts[0])
    for f in schema:
        if f.name in INT:
            want = pa.int64()
        elif f.name in BOOL:
            want = pa.bool_()
        elif f.name in STR:
            want = pa.string()
        elif f.name in TIME:
            want = pa.timestamp("us", tz="UTC")
        else:
            want = pa.float64()
        assert f.type == want, (f.name, f.type, want)
    assert str(df["is_pareto"].dtype) == "boolean" and str(df["pareto_rank"].dtype) == "Int64"
    assert str(df["seed"].dtype) == "Int64"


@pytest.mark.parametrize("which", ["known", "synth_grid"])
def test_raw_parts_hold_null_flags_and_the_side_file_the_rest(which, request):
    """A sweep's part files read by plain pandas: every column as load_results gives it, except
    is_pareto / pareto_rank, which the parts hold null (the flags live in _pareto.parquet)."""
    res, df, _ = request.getfixturevalue(which)
    raw = pd.read_parquet(res.out_dir)
    assert raw["is_pareto"].isna().all() and raw["pareto_rank"].isna().all()
    assert df["pareto_rank"].notna().any()          # the flags came from the side file
    rest = [c for c in df.columns if c not in ("is_pareto", "pareto_rank")]
    pd.testing.assert_frame_equal(raw[rest], df[rest], check_dtype=True)


# ---------------------------------------------------------------------------------------------
# Formerly known defects, now fixed (kept as plain tests)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["known", "synth_grid"])
def test_request_latency_counts_the_first_token_once(which, request):
    """MODEL.md section 3 (revised 2026-11-30): request latency = TTFT + (G-1) x T_iter/tau (the
    first of the G tokens comes with TTFT, which carries the runtime's 2.4 ms per request once)."""
    _, df, _ = request.getfixturevalue(which)
    fit = df[df.fits]
    assert len(fit) == {"known": 2, "synth_grid": 4}[which]
    for _, r in fit.iterrows():
        assert r.request_latency_ms == pytest.approx(r.ttft_ms + (G - 1) * r.spec_ms_per_token, rel=GLUE)
        assert r.ttft_ms > REQ_S * 1e3


def test_public_sweep_stays_a_function():
    """The grid module is dse.campaign.grid: importing it cannot shadow the public dse.sweep function."""
    import importlib
    importlib.import_module("dse.campaign.grid")
    assert callable(dse.sweep) and callable(dse.sweep)


def test_run_study_timestamps_are_utc_in_any_timezone(tmp_path, monkeypatch):
    import time
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        t0 = pd.Timestamp.now(tz="UTC").floor("us")
        res = _public("run_study")(str(_write(tmp_path, SYNTH)), storage=":memory:", progress=False)
        t1 = pd.Timestamp.now(tz="UTC")
    finally:
        monkeypatch.undo()
        time.tzset()
    df = pd.read_parquet(res.path)
    assert ((t0 <= df.datetime_start) & (df.datetime_complete <= t1)).all(), (t0, df.datetime_start.iloc[0])
