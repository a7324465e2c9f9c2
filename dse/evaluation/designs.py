"""Designs -> model -> metric columns: the one evaluation behind run, sweep, report and calibration.

Knob values (arrays, one row per design) become a DesignBatch: categorical knobs become
integer codes that index database and technology tables, chips are synthesised from
technology knobs (MODEL.md section 5) or gathered from known parts (section 6), and the
workload sizes and k ride along as arrays. The model evaluates the batch; ``metric_table``
returns every hardware, metric and derived column by name in display units, and
``constraint_values`` the Optuna-style constraints. numpy only: no Optuna, no pandas.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from ..catalog.database import Database
from ..catalog.links import DIE_TO_DIE_CLASS, ON_DIE_CLASS, SCALE_OUT_CLASS, SYNTHESISED_LINK_CLASS
from ..catalog.specs import DeviceSpec, RuntimeSpec
from ..catalog.technology import TechConstants
from ..errors import SpecError
from ..model.arrays import DesignBatch, HardwareArrays
from ..model.dedupe import distinct_rows
from ..model.evaluate import MIN_ROWS_DEDUPE, Metrics, evaluate, join_metrics
from ..model.technology import (
    energy_constants,
    known_part_energy,
    known_part_estimate,
    known_part_power_w,
    link_power_w,
    synthesize_chip,
)
from ..model.transformer import WEIGHT_FORMATS, default_kv_dtype
from ..study.space import category_codes, fill_inactive, knob_names
from ..study.spec import DEFAULT_SCALE_OUT_GB_S, DEFAULT_SCALE_UP_DOMAIN, StudySpec
from ..units import FACTOR
from ..workload.spec import pipeline_split

_NAN = float("nan")
_BITS_PER_BYTE = 8.0


@dataclass(frozen=True)
class Designs:
    """A DesignBatch plus the per-design hardware columns for results (display units)."""

    batch: DesignBatch
    hardware: dict[str, np.ndarray]
    #: per conditional knob, where it acts on the design (dse.study.space); null in results elsewhere
    active: dict[str, np.ndarray] = field(default_factory=dict)
    #: with the draft a knob: (codes into the draft choices, those choices, exit layer per row)
    drafts: tuple | None = None


def knob_arrays_and_masks(study: StudySpec, params: dict[str, np.ndarray], n: int, masks=None
                          ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, tuple]]:
    """Knob arrays with categorical knobs as int64 codes, the activity masks of the conditional
    knobs, and per categorical knob the names its codes index. A categorical knob in ``params``
    may be its names or already codes into its choices (dse.study.space.knob_names), as a grid
    has them; names become codes here, once per batch. ``masks``: the activity masks when the
    caller has them already (dse.campaign.grid.grid_chunk), else computed (fill_inactive)."""
    out, names = {}, {}
    for k in study.knobs:
        if k.kind == "cat":
            v = np.asarray(params[k.name]) if k.searched else np.zeros(n, dtype=np.int64)
            names[k.name], out[k.name] = category_codes(v, knob_names(k))
        elif k.searched:
            out[k.name] = np.asarray(params[k.name])
        else:
            out[k.name] = np.full(n, k.fixed)
    out, masks = fill_inactive(study, out, n, names, masks=masks)
    return out, masks, names


def _codes(codes, names, index_of) -> np.ndarray:
    """Codes into ``names`` -> codes into a table (``index_of`` name), looking up only the names
    that occur (an unused name, e.g. a search's None where a knob is inactive, is never looked up)."""
    seen = np.bincount(codes, minlength=len(names)) > 0
    return np.array([index_of(nm) if s else -1 for nm, s in zip(names, seen)], dtype=np.int64)[codes]


def _device_table(devs: list[DeviceSpec], dtype: str, kv_dtype: str) -> dict[str, np.ndarray]:
    def col(fn):
        return np.array([_NAN if fn(d) is None else fn(d) for d in devs], dtype=np.float64)
    compute = WEIGHT_FORMATS[dtype].compute_dtype
    return {
        "capacity_bytes": col(lambda d: d.memory_bytes), "mem_bw_bytes_s": col(lambda d: d.mem_bw_bytes_s),
        "peak_attention_flop_s": col(lambda d: d.peak_flop_s(kv_dtype)),
        "link_efficiency": col(lambda d: d.link_efficiency),
        "link_ll_efficiency": col(lambda d: d.link_ll_efficiency),
        "link_bulk_latency_s": col(lambda d: d.link_bulk_latency_s),
        "peak_flop_s": col(lambda d: d.peak_flop_s(compute)), "peak_bf16_flop_s": col(lambda d: d.peak_bf16_flop_s),
        "mem_efficiency": col(lambda d: d.mem_efficiency), "compute_efficiency": col(lambda d: d.compute_efficiency),
        "link_bw_bytes_s": col(lambda d: d.link_bw_bytes_s), "link_latency_s": col(lambda d: d.link_latency_s),
        "die_area_mm2": col(lambda d: d.die_area_mm2), "cost_usd": col(lambda d: d.price_usd),
        "tdp_w": col(lambda d: d.tdp_w),
        "kernel_launch_s": col(lambda d: d.kernel_launch_s), "step_overhead_s": col(lambda d: d.step_overhead_s),
        "weight_math_native": col(lambda d: d.native_math(compute)),
        "attention_math_native": col(lambda d: d.native_math(kv_dtype)),
        "scale_up_domain": col(lambda d: np.inf if d.scale_up_domain is None else d.scale_up_domain),
        "scale_out_bw_bytes_s": col(lambda d: d.scale_out_bw_bytes_s),
        "scale_out_latency_s": col(lambda d: d.scale_out_latency_s),
        "scale_out_efficiency": col(lambda d: d.scale_out_efficiency),
        "layer_regions": col(lambda d: float(d.layer_regions)), "dies": col(lambda d: d.dies),
    }


#: HardwareArrays fields that come from the runtime (RuntimeSpec attribute of the same name)
RUNTIME_ARRAY_FIELDS = ("kernel_launch_s", "kernels_per_layer", "mla_extra_kernels", "moe_extra_kernels",
                        "shared_expert_kernels", "step_overhead_s", "spec_overhead_s", "ngram_draft_s",
                        "memory_reserve_fraction", "sequence_overhead_s", "request_overhead_s", "roofline_p",
                        "int8_stream_factor", "int4_stream_factor", "tree_kernels_per_layer",
                        "draft_step_overhead_s", "layer_sync_s", "spec_schedule_s",
                        "decode_kv_per_query_head")
#: a synthesised chip's mem_efficiency when its study does not set one: the rule known parts
#: follow (docs/calibration.md section 4): DRAM 0.83 (the A100's measured streaming fraction),
#: on-die SRAM 0.9; and its compute_efficiency: 0.66 (TensorRT-LLM prefill MFU, every device)
MEM_EFFICIENCY_RULE = {"dram": 0.83, "sram": 0.9}
COMPUTE_EFFICIENCY_RULE = 0.66


def _runtime_columns(runtimes: list[RuntimeSpec], code: np.ndarray | None) -> dict[str, np.ndarray | float]:
    """RUNTIME_ARRAY_FIELDS per row: the runtimes' values gathered by ``code`` (an index into
    ``runtimes`` per row), or the one runtime's scalars when there is only one."""
    if len(runtimes) == 1 or code is None:
        return {f: getattr(runtimes[0], f) for f in RUNTIME_ARRAY_FIELDS}
    return {f: np.array([getattr(r, f) for r in runtimes], dtype=np.float64)[code] for f in RUNTIME_ARRAY_FIELDS}


def chip_group(prefix: str, knobs: dict[str, np.ndarray], n: int, dtype: str, db: Database,
               tech: TechConstants, rt: RuntimeSpec | str | None, kv_dtype: str | None = None,
               names: dict[str, tuple] | None = None, model=None) -> tuple[HardwareArrays, dict[str, np.ndarray]]:
    """One chip group (target_chip_* or draft_chip_* knobs) -> HardwareArrays and SI columns.
    With ``model`` (the target's group) the ``chips`` are split into pp pipeline stages of tensor
    parallel groups (``pipeline_rows``: the ``pp`` knob, or auto); a row with no valid split is not
    buildable.
    Categorical knobs are names, or codes into ``names[knob]`` (knob_arrays_and_masks).

    The software stack: ``rt`` (a RuntimeSpec or a name: the study's workload.runtime) for every
    chip; None lets a known part keep its own default_runtime (and a synthesised chip take
    graphs). A synthesised chip may choose its runtime with the ``runtime`` knob and set or search
    its fixed costs with ``kernel_launch_us``, ``step_overhead_us`` and ``spec_overhead_us``
    (which win over the runtime's); a known part's own kernel_launch_us / step_overhead_us win."""
    kv_dtype = kv_dtype or default_kv_dtype(dtype)
    names = names or {}

    def get(key, default=None):
        return knobs.get(prefix + key, default)

    def coded(key):
        return category_codes(get(key), names.get(prefix + key, ()))

    if isinstance(rt, str):
        rt = db.runtime(rt)
    chips = np.asarray(get("chips", np.ones(n)), dtype=np.int64)
    if prefix + "device" in knobs:
        dev_names, code = coded("device")
        used = np.flatnonzero(np.bincount(code, minlength=len(dev_names)))
        code = np.searchsorted(used, code)          # codes into the devices that occur
        devs = [db.device(str(dev_names[i])) for i in used]
        table = _device_table(devs, dtype, kv_dtype)
        # like for like: a known part's cost is the same manufacturing estimate a synthesised chip
        # gets (technology.known_part_estimate); its street price rides along as price_usd
        table["price_usd"] = table.pop("cost_usd")
        table["cost_usd"] = np.array([known_part_estimate(tech, d)[0] for d in devs], dtype=np.float64)
        # and the same energy model (technology.known_part_power_w; the vendor TDP where it cannot run)
        table["power_w"] = np.array([known_part_power_w(tech, d)[0] for d in devs], dtype=np.float64)
        energy = [known_part_energy(tech, d) for d in devs]
        for key in ("mem_j_per_byte", "j_per_flop", "idle_w", "power_limit_w", "link_j_per_byte"):
            table[key] = np.array([e[key] for e in energy], dtype=np.float64)
        col = {k: v[code] for k, v in table.items()}
        link_bw = np.asarray(get("link_bw_gb_s"), dtype=np.float64) * FACTOR["gb_s"] if prefix + "link_bw_gb_s" in knobs \
            else col["link_bw_bytes_s"]
        # known parts keep their runtime: the study's, or each part's default_runtime
        if rt is None:
            rt_names = sorted({d.default_runtime for d in devs})
            runtimes = [db.runtime(r) for r in rt_names]
            rcode = np.array([rt_names.index(d.default_runtime) for d in devs], dtype=np.int64)[code]
        else:
            runtimes, rcode = [rt], None
        rcols = _runtime_columns(runtimes, rcode)
        rcols["kernel_launch_s"] = np.where(np.isnan(col["kernel_launch_s"]), rcols["kernel_launch_s"],
                                            col["kernel_launch_s"])
        rcols["step_overhead_s"] = np.where(np.isnan(col["step_overhead_s"]), rcols["step_overhead_s"],
                                            col["step_overhead_s"])
        cost_chip, power_chip, price_chip = col["cost_usd"], col["power_w"], col["price_usd"]
        area, peak_bf16 = col["die_area_mm2"], col["peak_bf16_flop_s"]
        cap, bw, peak = col["capacity_bytes"], col["mem_bw_bytes_s"], col["peak_flop_s"]
        eff_m, eff_c, lat = col["mem_efficiency"], col["compute_efficiency"], col["link_latency_s"]
        peak_att, eta_link = col["peak_attention_flop_s"], col["link_efficiency"]
        eta_ll, lat_bulk = col["link_ll_efficiency"], col["link_bulk_latency_s"]
        native_w, native_a = col["weight_math_native"] > 0, col["attention_math_native"] > 0
        domain, out_bw = col["scale_up_domain"], col["scale_out_bw_bytes_s"]
        out_lat, out_eff = col["scale_out_latency_s"], col["scale_out_efficiency"]
        mem_j, j_bf16, idle_w, link_j = col["mem_j_per_byte"], col["j_per_flop"], col["idle_w"], col["link_j_per_byte"]
        limit_w = col["power_limit_w"]
        regions, dies = col["layer_regions"] > 0, col["dies"]
        buildable = np.ones(n, dtype=bool)
    else:
        node_names, node_codes = coded("process_node")
        mem_names, mem_codes = coded("memory")
        node = _codes(node_codes, node_names, tech.node_index)
        mem = _codes(mem_codes, mem_names, tech.memory_index)
        chip = synthesized_chips(tech, n, node_idx=node, peak_tflops=np.asarray(get("peak_tflops"), dtype=np.float64),
                                 memory_idx=mem, memory_stacks=np.asarray(get("memory_stacks"), dtype=np.float64),
                                 stack_height=np.asarray(get("stack_height"), dtype=np.float64),
                                 sram_mb=np.asarray(get("sram_mb"), dtype=np.float64),
                                 link_bw_gb_s=np.asarray(get("link_bw_gb_s"), dtype=np.float64))
        cap, bw = chip.capacity_bytes, chip.mem_bw_bytes_s
        peak_bf16 = chip.peak_bf16_flop_s
        peak = chip.peak_fp8_flop_s if WEIGHT_FORMATS[dtype].compute_dtype in ("fp8", "fp4") else chip.peak_bf16_flop_s
        peak_att = chip.peak_fp8_flop_s if kv_dtype == "fp8" else chip.peak_bf16_flop_s
        native_w = native_a = True          # a synthesised chip has fp8 units (FP8 = fp8_per_bf16 x BF16)
        # the link: its class (knob link_class) gives latency and efficiency; a link_latency_us knob wins
        if prefix + "link_class" in knobs:
            cls_names, cls_code = coded("link_class")
            classes = [db.link_class(str(c)) if c is not None and str(c) != "None"      # null: not acting
                       else db.link_class(SYNTHESISED_LINK_CLASS) for c in cls_names]
            eta_link = np.array([c.efficiency for c in classes])[cls_code]
            lat = np.array([c.latency_s for c in classes])[cls_code]
            eta_ll = np.array([c.ll_efficiency for c in classes])[cls_code]
            lat_bulk = np.array([c.bulk_latency_s for c in classes])[cls_code]
        else:
            cls = db.link_class(SYNTHESISED_LINK_CLASS)
            eta_link, lat = np.full(n, cls.efficiency), np.full(n, cls.latency_s)
            eta_ll, lat_bulk = np.full(n, cls.ll_efficiency), np.full(n, cls.bulk_latency_s)
        if prefix + "link_latency_us" in knobs:
            lat = np.asarray(get("link_latency_us"), dtype=np.float64) * 1e-6 + np.zeros(n)
        link_bw = chip.link_bw_bytes_s
        is_sram = tech.memory_table().is_sram[mem]
        rule_m = np.where(is_sram, MEM_EFFICIENCY_RULE["sram"], MEM_EFFICIENCY_RULE["dram"])
        eff_m = np.asarray(get("mem_efficiency"), dtype=np.float64) if prefix + "mem_efficiency" in knobs else rule_m
        eff_c = np.asarray(get("compute_efficiency"), dtype=np.float64) if prefix + "compute_efficiency" in knobs \
            else np.full(n, COMPUTE_EFFICIENCY_RULE)
        # the software stack: the runtime knob, else the study's (graphs by default)
        if prefix + "runtime" in knobs:
            rt_names, rcode = coded("runtime")
            # a null (the knob does not act: a draft chip that is off; category_codes names it "None")
            runtimes = [db.runtime(str(r)) if r is not None and str(r) != "None" else (rt or db.runtime("graphs"))
                        for r in rt_names]
        else:
            runtimes, rcode = [rt or db.runtime("graphs")], None
        rcols = _runtime_columns(runtimes, rcode)
        for key, field in (("kernel_launch_us", "kernel_launch_s"), ("step_overhead_us", "step_overhead_s"),
                           ("spec_overhead_us", "spec_overhead_s")):
            if prefix + key in knobs:
                rcols[field] = np.asarray(get(key), dtype=np.float64) * 1e-6
        # the scale-up domain and the scale-out network between domains (class scale-out)
        out_cls = db.link_class(SCALE_OUT_CLASS)
        domain = np.asarray(get("scale_up_domain", DEFAULT_SCALE_UP_DOMAIN), dtype=np.float64)
        out_bw = np.asarray(get("scale_out_bw_gb_s", DEFAULT_SCALE_OUT_GB_S), dtype=np.float64) * FACTOR["gb_s"]
        out_lat, out_eff = out_cls.latency_s, out_cls.efficiency
        cost_chip, power_chip, area = chip.cost_usd, chip.power_w, chip.die_area_mm2
        price_chip = np.full(n, _NAN)           # a hypothetical chip has no street price
        buildable = chip.shoreline_ok & chip.stack_height_ok
        # energy from the same tables as its power (technology.power_w, technology.energy_constants)
        mem_j, j_bf16, idle_w = energy_constants(tech, j_per_bit=tech.memory_table().j_per_bit[mem], is_sram=is_sram,
                                                 j_per_flop=tech.node_table().j_per_flop[node],
                                                 static_w=chip.static_power_w, power_w=chip.power_w)
        limit_w = chip.power_w
        link_j = np.full(n, tech.link_j_per_bit * _BITS_PER_BYTE)
        regions, dies = is_sram, chip.num_dies      # an SRAM-only chip holds each layer in a region of it
    hw = HardwareArrays(chips=chips, capacity_bytes=cap, mem_bw_bytes_s=bw, peak_flop_s=peak,
                        mem_efficiency=eff_m, compute_efficiency=eff_c, link_bw_bytes_s=link_bw,
                        link_latency_s=lat, link_efficiency=eta_link, peak_attention_flop_s=peak_att,
                        link_ll_efficiency=eta_ll, link_bulk_latency_s=lat_bulk,
                        weight_math_native=native_w, attention_math_native=native_a, scale_up_domain=domain,
                        scale_out_bw_bytes_s=out_bw, scale_out_latency_s=out_lat, scale_out_efficiency=out_eff,
                        # a FLOP at a dtype costs the BF16 FLOP's energy x peak BF16 / peak at that dtype
                        mem_j_per_byte=mem_j, j_per_flop=j_bf16 * peak_bf16 / peak,
                        attention_j_per_flop=j_bf16 * peak_bf16 / peak_att, link_j_per_byte=link_j, idle_w=idle_w,
                        power_limit_w=limit_w, layer_regions=regions, dies=dies,
                        region_hop_s=db.link_class(ON_DIE_CLASS).latency_s,
                        die_hop_s=db.link_class(DIE_TO_DIE_CLASS).latency_s,
                        **rcols)
    tp, pp, split_ok = chips, np.ones(n, dtype=np.int64), True
    if model is not None:
        tp, pp, split_ok = pipeline_rows(model, chips, get("pp"), np.broadcast_to(regions, (n,)),
                                         np.broadcast_to(link_bw, (n,)) <= 0)
        hw = dataclasses.replace(hw, chips=tp, pp=pp)
    # past its scale-up domain a tensor-parallel group must be whole domains on a scale-out network,
    # and stages that leave a domain need that network too
    dom_b = np.broadcast_to(domain, (n,))
    out_ok = np.broadcast_to(out_bw, (n,)) > 0
    beyond = tp > dom_b
    domains_ok = ~beyond | ((np.fmod(tp, np.where(beyond, dom_b, 1.0)) == 0) & out_ok)
    domains_ok &= (pp == 1) | (tp * pp <= dom_b) | out_ok
    cols = {"capacity_bytes": cap, "mem_bw_bytes_s": bw, "peak_bf16_flop_s": peak_bf16, "die_area_mm2": area,
            "chip_cost_usd": cost_chip, "chip_power_w": power_chip, "chips": chips, "chip_price_usd": price_chip,
            "tp": tp, "pp": pp,
            # a group needs memory bandwidth, and a link when it spans chips (within its domain)
            "buildable": (buildable & (bw > 0) & ((chips == 1) | (link_bw > 0) | ((tp == 1) & (tp * pp > dom_b)))
                          & domains_ok),
            "split_ok": np.broadcast_to(split_ok, (n,)),
            "link_bw_bytes_s": link_bw}
    return hw, cols


def pipeline_rows(model, chips, pp_knob, regions, no_link):
    """Per row (tensor parallel t, stages pp, valid) for ``chips`` chips of a group
    (workload.spec.pipeline_split, once per distinct (chips, pp, layer regions, link) combination):
    the ``pp`` knob where given, else auto (1 where the chips split the heads, else the fewest stages;
    the most on an SRAM part; t = 1 on a part with no scale-up link). A combination with no valid
    split keeps t = chips, pp = 1 and is not valid (the row is not buildable)."""
    n = chips.size
    want = np.zeros(n, dtype=np.int64) if pp_knob is None else np.nan_to_num(
        np.asarray(pp_knob, dtype=np.float64), nan=0.0).astype(np.int64) + np.zeros(n, dtype=np.int64)
    cu, ci = np.unique(chips, return_inverse=True)          # 1-D uniques: fast on a million rows
    wu, wi = np.unique(want, return_inverse=True)
    code = ((ci.reshape(-1) * wu.size + wi.reshape(-1)) * 2 + regions.astype(np.int64)) * 2 + no_link.astype(np.int64)
    codes, inv = np.unique(code, return_inverse=True)
    out = np.empty((codes.size, 3), dtype=np.int64)
    for i, k in enumerate(codes.tolist()):
        nl, r, rest = k % 2, (k // 2) % 2, k // 4
        c, p = int(cu[rest // wu.size]), int(wu[rest % wu.size])
        try:
            out[i, :2] = pipeline_split(model, c, p if p > 0 else None, max_tp=1 if nl else None, most_stages=bool(r))
            out[i, 2] = 1
        except SpecError:
            out[i] = (c, 1, 0)
    inv = inv.reshape(-1)
    return out[inv, 0], out[inv, 1], out[inv, 2] > 0


#: chip fields chip_group reads (synthesized_chips gathers these)
_CHIP_FIELDS = ("capacity_bytes", "mem_bw_bytes_s", "peak_bf16_flop_s", "peak_fp8_flop_s", "cost_usd",
                "die_area_mm2", "shoreline_ok", "stack_height_ok", "static_power_w", "num_dies")


def synthesized_chips(tech: TechConstants, n: int, *, link_bw_gb_s, **knobs):
    """synthesize_chip, evaluated once per distinct combination of the knobs other than the link
    (a grid chunk repeats them) and gathered. The link bandwidth enters a chip only through
    link_bw_bytes_s and the last term of its power (technology.power_w: compute + memory +
    static + link), so that term is added per row to the power of a chip synthesised with no
    link: the same bits as synthesize_chip on every row. Small batches, or batches with few
    repeats, go straight to synthesize_chip."""
    link = np.broadcast_to(np.asarray(link_bw_gb_s, dtype=np.float64), (n,))
    rows = None
    if n >= MIN_ROWS_DEDUPE and bool(np.all(np.isfinite(link) & (link >= 0))):   # else synthesize_chip says why
        cols = [np.broadcast_to(np.asarray(v), (n,)) for v in knobs.values()]
        rows = distinct_rows(cols, n)
    if rows is None:
        return synthesize_chip(tech, link_bw_gb_s=link_bw_gb_s, **knobs)
    first, inv = rows
    chip = synthesize_chip(tech, link_bw_gb_s=np.zeros(first.size),
                           **{k: np.broadcast_to(np.asarray(v), (n,))[first] for k, v in knobs.items()})
    out = {f: np.take(getattr(chip, f), inv) for f in _CHIP_FIELDS}
    out["link_bw_bytes_s"] = link.astype(np.float64) * FACTOR["gb_s"]
    out["power_w"] = np.take(chip.power_w, inv) + link_power_w(tech, out["link_bw_bytes_s"])
    return SimpleNamespace(**out)


def build_designs(study: StudySpec, params: dict[str, np.ndarray], n: int, db: Database,
                  tech: TechConstants, masks=None) -> Designs:
    """Knob arrays -> DesignBatch and hardware result columns (display units); ``masks`` as
    knob_arrays_and_masks."""
    kn, active, names = knob_arrays_and_masks(study, params, n, masks)
    rt = db.runtime(study.runtime) if study.runtime else None
    target, tc = chip_group("target_chip_", kn, n, study.dtype, db, tech, rt, study.kv_dtype, names,
                            model=study.workload.target)
    has_draft = "draft_chip_enabled" in kn
    on = np.asarray(kn["draft_chip_enabled"], dtype=bool) if has_draft else np.zeros(n, dtype=bool)
    if has_draft and (on.any() or study.knob("draft_chip_enabled").searched):
        draft, dc = chip_group("draft_chip_", kn, n, study.dtype, db, tech, rt, study.kv_dtype, names)
    else:
        draft, dc = target, None
    k = np.asarray(kn["k"], dtype=np.int64) if "k" in kn else np.zeros(n, dtype=np.int64)
    batch = DesignBatch(target=target, draft=draft, draft_on_chip=on,
                        draft_link_bw_bytes_s=np.minimum(draft.link_bw_bytes_s, target.link_bw_bytes_s),
                        draft_link_latency_s=draft.link_latency_s,
                        batch=kn["batch"], prompt_tokens=kn["prompt_tokens"], output_tokens=kn["output_tokens"], k=k,
                        tree_nodes=np.asarray(kn["tree_nodes"], dtype=np.int64) if "tree_nodes" in kn else 0,
                        ep=np.asarray(kn["ep"], dtype=np.int64) if "ep" in kn else 0)
    chips = tc["chips"]
    hwcols = {
        "chips": chips, "tp": tc["tp"], "pp": tc["pp"],
        "mem_bw_tb_s": tc["mem_bw_bytes_s"] / FACTOR["tb_s"],
        "chip_memory_capacity_gb": tc["capacity_bytes"] / FACTOR["gb"],
        "peak_tflops": tc["peak_bf16_flop_s"] / FACTOR["tflops"],
        "die_area_mm2": tc["die_area_mm2"],
        "chip_cost_usd": tc["chip_cost_usd"],
        "chip_price_usd": tc["chip_price_usd"],
        "chip_power_w": tc["chip_power_w"],
    }
    if dc is not None:
        hwcols.update({
            "draft_chips": np.where(on, dc["chips"], 0),
            "draft_mem_bw_tb_s": np.where(on, dc["mem_bw_bytes_s"] / FACTOR["tb_s"], _NAN),
            "draft_chip_memory_capacity_gb": np.where(on, dc["capacity_bytes"] / FACTOR["gb"], _NAN),
            "draft_peak_tflops": np.where(on, dc["peak_bf16_flop_s"] / FACTOR["tflops"], _NAN),
            "draft_die_area_mm2": np.where(on, dc["die_area_mm2"], _NAN),
            "draft_chip_cost_usd": np.where(on, dc["chip_cost_usd"], _NAN),
            "draft_chip_power_w": np.where(on, dc["chip_power_w"], _NAN),
        })
        d_cost = np.where(on, dc["chip_cost_usd"] * dc["chips"], 0.0)
        d_price = np.where(on, dc["chip_price_usd"] * dc["chips"], 0.0)
        d_power = np.where(on, dc["chip_power_w"] * dc["chips"], 0.0)
        d_area = np.where(on, dc["die_area_mm2"] * dc["chips"], 0.0)
    else:
        d_cost = d_power = d_area = d_price = 0.0
    if dc is not None:      # a draft chip must also reach the target
        draft_ok = dc["buildable"] & (np.minimum(dc["link_bw_bytes_s"], tc["link_bw_bytes_s"]) > 0)
        hwcols["buildable"] = tc["buildable"] & (~on | draft_ok)
    else:
        hwcols["buildable"] = tc["buildable"]
    hwcols["invalid"] = invalid_combinations(study, kn, tc["tp"], tc["split_ok"])
    hwcols["cost_usd"] = tc["chip_cost_usd"] * chips + d_cost            # manufacturing estimate
    hwcols["price_usd"] = tc["chip_price_usd"] * chips + d_price         # street price (NaN if unknown)
    hwcols["power_w"] = tc["chip_power_w"] * chips + d_power
    hwcols["total_die_area_mm2"] = tc["die_area_mm2"] * chips + d_area
    # usd_per_mtok's inputs (not result columns): the cost a second of life, USD per J at the meter
    hwcols["_cost_usd_per_s"] = hwcols["cost_usd"] / tech.serving_life_s
    hwcols["_usd_per_j"] = np.full(n, tech.usd_per_j * tech.pue)
    hwcols["_all_chips"] = chips + (hwcols["draft_chips"] if "draft_chips" in hwcols else 0)
    drafts = None
    dk = study.knob("draft")
    if dk is not None and dk.searched:
        layers = np.asarray(kn["draft_exit_layer"], dtype=np.int64) if "draft_exit_layer" in kn else np.zeros(n, np.int64)
        drafts = (np.asarray(kn["draft"], dtype=np.int64), names["draft"], layers)
    return Designs(batch=batch, hardware=hwcols, active=active, drafts=drafts)


#: combinations of knob values that cannot exist, as bits of ``invalid_combinations`` (the study is
#: refused only where no row could avoid them: dse.study.parse)
INVALID_REASONS = ("expert-parallel ranks (ep) do not divide the chips",
                   "no split of the chips into at most L pipeline stages leaves a group that splits the heads (pp)")


def invalid_combinations(study: StudySpec, kn: dict[str, np.ndarray], chips: np.ndarray,
                         split_ok=True) -> np.ndarray:
    """Per row, the bits (1 << i: INVALID_REASONS[i]) of what cannot exist in it; 0 where all can.
    Expert parallel over E ranks needs E to divide the t chips of a stage (E ranks of t/E chips:
    MODEL.md section 2); E is the row's ``ep`` knob or the workload's. ``split_ok``: the row's chips
    split into pipeline stages (designs.pipeline_rows)."""
    ep = np.asarray(kn["ep"], dtype=np.int64) if "ep" in kn else np.int64(study.workload.ep)
    bad = np.asarray(chips, dtype=np.int64) % np.maximum(ep, 1) != 0
    bits = bad.astype(np.int64) | (~np.asarray(split_ok, dtype=bool)).astype(np.int64) << 1
    return np.broadcast_to(bits, np.shape(chips))


def evaluate_study(study: StudySpec, params: dict[str, np.ndarray], n: int, db: Database,
                   tech: TechConstants, masks=None) -> tuple[Designs, Metrics]:
    """Knob arrays -> (Designs, Metrics): the one vectorised evaluation per batch (``masks``: the
    activity masks when the caller has them, as knob_arrays_and_masks). With the draft a knob,
    the rows are split by distinct draft (and exit layer), each group evaluated in one call
    under its own Workload (study.drafts), and the rows put back in order."""
    designs = build_designs(study, params, n, db, tech, masks)
    if designs.drafts is None:
        return designs, evaluate(designs.batch, study.workload)
    return designs, evaluate_by_draft(designs.batch, study, *designs.drafts)


def evaluate_by_draft(batch: DesignBatch, study: StudySpec, codes: np.ndarray, labels: tuple,
                      layers: np.ndarray) -> Metrics:
    """evaluate() once per distinct (draft, exit layer) of the rows: a loop over the study's draft
    choices, not over designs. Rows whose draft is not the early-exit range ignore their layer."""
    is_range = np.array([str(lab) == "early-exit" for lab in labels], dtype=bool)[codes]
    key = codes.astype(np.int64) * 100_000 + np.where(is_range, layers, 0)
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    ends = np.r_[starts[1:], key.size]
    rows = [order[a:b] for a, b in zip(starts, ends)]

    def group(idx):
        k0 = int(key[idx[0]])
        w = study.drafts.workload(str(labels[k0 // 100_000]), k0 % 100_000)
        return evaluate(batch.take(idx) if idx.size < batch.n else batch, w)
    if len(rows) == 1:
        return group(rows[0])
    return join_metrics(map(group, rows), rows, key.size)      # each group's rows written back in place


def derived_columns(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """tokens/s per k$, per W and per cm^2 of silicon, speedup per k$, and USD per million output
    tokens at the SLA point (dse.model.economics; NaN where undefined)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tps = cols["tokens_per_s"]
        total = cols["sla_tokens_per_s_per_chip"] * cols["_all_chips"]       # the SLA point's tokens/s
        return {"tokens_per_s_per_kusd": tps / (cols["cost_usd"] / FACTOR["kusd"]),
                "tokens_per_s_per_w": tps / cols["power_w"],
                "tokens_per_s_per_cm2": tps / (cols["total_die_area_mm2"] / FACTOR["cm2"]),
                "speedup_per_kusd": cols["speedup"] / (cols["cost_usd"] / FACTOR["kusd"]),
                "usd_per_mtok": 1e6 * (cols["_cost_usd_per_s"] / total
                                       + cols["sla_energy_j_per_token"] * cols["_usd_per_j"])}


def metric_table(designs: Designs, metrics: Metrics, bounds: bool = True) -> dict[str, np.ndarray]:
    """All metric and hardware columns by name (numpy, display units); ``bounds`` as Metrics.columns."""
    cols = dict(designs.hardware)
    cols.update(metrics.columns(bounds))
    cols.update(derived_columns(cols))
    return cols


def constraint_values(cols: dict[str, np.ndarray], study) -> np.ndarray:
    """Optuna-style constraint values, (n, 1 + len(constraints)); <= 0 is feasible.

    Column 0 is the memory fit: shortfall in GB (target chips plus draft chip) when short, else
    minus the target's slack in GB (capacity - required - the runtime's reserve).
    Column 1 is buildability (memory stacks fit the die edges, the stack height exists for
    that memory, the group has bandwidth and, across chips, a link; a design that fits must
    have a finite latency) and validity (no combination of INVALID_REASONS): +1 when not, -1 when it is. Then one column per study constraint (value - max, or min - value); a metric that is
    undefined (NaN, e.g. a latency of a design that does not fit) counts as violated (+1).
    """
    short = cols["memory_shortfall_gb"] + cols["draft_memory_shortfall_gb"]     # target chips + draft chip
    fit = np.where(short > 0, short, cols["memory_required_gb"] + cols["memory_reserve_gb"] - cols["memory_capacity_gb"])
    finite = ~cols["fits"] | np.isfinite(cols["spec_ms_per_token"])
    valid = cols["invalid"] == 0 if "invalid" in cols else True
    out = [fit, np.where(cols["buildable"] & finite & valid, -1.0, 1.0)]
    for c in study.constraints:
        v = np.asarray(cols[c.metric], dtype=np.float64)
        viol = np.full(v.shape, -np.inf)
        if c.max is not None:
            viol = np.maximum(viol, v - c.max)
        if c.min is not None:
            viol = np.maximum(viol, c.min - v)
        out.append(np.where(np.isnan(v), 1.0, viol))
    return np.stack(out, axis=1)


def infeasible_reasons(cols: dict[str, np.ndarray], study, cons: np.ndarray | None = None
                       ) -> tuple[np.ndarray, tuple[str, ...]]:
    """Why each design is not feasible, as (codes, texts): texts[codes[i]] names every reason of row
    i, '; '-joined (INVALID_REASONS, 'does not fit in memory', 'not buildable', 'latency not
    finite', then each violated study constraint: 'metric > max', 'metric < min' or 'metric outside
    [min, max]'); code 0 (the text '') where none holds, which is where the design is feasible.
    Bits per reason; the text made once per distinct set of them."""
    cons = constraint_values(cols, study) if cons is None else cons
    fits = np.asarray(cols["fits"], dtype=bool)
    inv = np.asarray(cols.get("invalid", 0), dtype=np.int64)
    names = list(INVALID_REASONS)
    finite = ~fits | np.isfinite(cols["spec_ms_per_token"])
    flags = [(cons[:, 0] > 0) | ~fits, ~np.asarray(cols["buildable"], dtype=bool), ~finite]
    names += ["does not fit in memory", "not buildable", "latency not finite"]
    for j, c in enumerate(study.constraints):
        flags.append(cons[:, 2 + j] > 0)
        names.append(f"{c.metric} > {c.max:g}" if c.min is None else f"{c.metric} < {c.min:g}" if c.max is None
                     else f"{c.metric} outside [{c.min:g}, {c.max:g}]")
    code = np.broadcast_to(inv, fits.shape).copy()
    for i, f in enumerate(flags):
        code |= np.asarray(f, dtype=np.int64) << (len(INVALID_REASONS) + i)
    present = np.flatnonzero(np.bincount(code)) if code.size else np.zeros(0, np.int64)
    texts = [""] + ["; ".join(nm for i, nm in enumerate(names) if c >> i & 1) for c in present if c]
    table = np.zeros(int(present.max()) + 1 if present.size else 1, dtype=np.int64)
    table[present[present > 0]] = np.arange(1, len(texts))
    return table[code], tuple(texts)


def objective_matrix(cols: dict[str, np.ndarray], study) -> np.ndarray:
    return np.stack([np.asarray(cols[o.metric], dtype=np.float64) for o in study.objectives], axis=1)
