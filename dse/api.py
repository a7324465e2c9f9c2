"""One design from names and numbers: the code behind `dse eval` (and the Python one-liner).

Specs in, the vector model on length-1 arrays, a dict of display-unit values out.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from .catalog.database import Database, load_database
from .catalog.fields import Range, as_number, one_of, unknown_key
from .catalog.links import DIE_TO_DIE_CLASS, ON_DIE_CLASS
from .catalog.rank_profiles import load_rank_profiles
from .catalog.specs import DTYPES, DeviceSpec, RuntimeSpec, override, spec_fields
from .errors import MISSING, SpecError, raise_collected
from .model.arrays import DesignBatch, HardwareArrays
from .model.columns import BOUND_COLUMNS
from .model.evaluate import METRIC_COLUMNS, Metrics, evaluate, with_sla
from .model.roofline import BOUND_NAMES
from .model.serving import chips_in_design, sla_metrics, sla_picks
from .model.transformer import WEIGHT_FORMATS, default_kv_dtype
from .units import FACTOR
from .workload.spec import (
    ARRIVALS,
    DEFAULT_BUDGET_TOKENS,
    SERVING_MODES,
    TREE_NODES_MAX,
    AcceptanceSpec,
    Sla,
    TaskMix,
    Workload,
    check_dp,
    check_ep,
    check_workload,
    make_acceptance,
    parse_drafter,
    parse_k,
    parse_task,
    pipeline_split,
)
from .workload.trees import check_tree, parse_tree

#: `--set` fields that belong to the runtime rather than the device
RUNTIME_FIELDS = ("kernels_per_layer", "layer_sync_us", "mla_extra_kernels", "moe_extra_kernels", "shared_expert_kernels",
                  "spec_overhead_us", "ngram_draft_us", "memory_reserve_fraction",
                  "sequence_overhead_us", "request_overhead_us", "roofline_p", "int8_stream_factor",
                  "int4_stream_factor", "tree_kernels_per_layer", "draft_step_overhead_us",
                  "spec_schedule_us", "decode_kv_per_query_head")


def hardware_arrays(dev: DeviceSpec, rt: RuntimeSpec, chips, dtype: str,
                    kv_dtype: str | None = None, tech=None, pp: int = 1,
                    hops: tuple[float, float] = (0.0, 0.0)) -> HardwareArrays:
    """A device and runtime as length-1 (or broadcast) arrays; a device's own fixed costs
    (kernel_launch_us, step_overhead_us) override the runtime's. Attention runs at the
    KV dtype's rate (16-bit unless given); a format whose math the part lacks (fp8 on an
    A100) runs weight-only (DeviceSpec.native_math). With ``tech`` (technology constants), the
    energy constants of the part (technology.known_part_energy): a FLOP at a dtype costs the BF16
    FLOP's energy x peak BF16 / peak at that dtype (a chip draws the same power at either peak).
    ``chips`` is one stage's tensor-parallel group and ``pp`` the stages; ``hops`` the (region, die)
    hop latencies of an SRAM part's layer regions (links.yaml on-die and die-to-die classes)."""
    kv_dtype = kv_dtype or default_kv_dtype(dtype)
    compute = WEIGHT_FORMATS[dtype].compute_dtype
    energy = {}
    if tech is not None:
        e = _part_energy(tech, dev)
        bf16 = dev.peak_bf16_flop_s
        energy = dict(mem_j_per_byte=e["mem_j_per_byte"], link_j_per_byte=e["link_j_per_byte"], idle_w=e["idle_w"],
                      power_limit_w=e["power_limit_w"],
                      j_per_flop=e["j_per_flop"] * bf16 / dev.peak_flop_s(compute),
                      attention_j_per_flop=e["j_per_flop"] * bf16 / dev.peak_flop_s(kv_dtype))
    return HardwareArrays(
        chips=np.atleast_1d(chips), capacity_bytes=dev.memory_bytes, mem_bw_bytes_s=dev.mem_bw_bytes_s,
        peak_flop_s=dev.peak_flop_s(WEIGHT_FORMATS[dtype].compute_dtype), mem_efficiency=dev.mem_efficiency,
        compute_efficiency=dev.compute_efficiency, link_bw_bytes_s=dev.link_bw_bytes_s,
        link_latency_s=dev.link_latency_s,
        kernel_launch_s=rt.kernel_launch_s if dev.kernel_launch_s is None else dev.kernel_launch_s,
        kernels_per_layer=rt.kernels_per_layer,
        step_overhead_s=rt.step_overhead_s if dev.step_overhead_s is None else dev.step_overhead_s,
        spec_overhead_s=rt.spec_overhead_s, ngram_draft_s=rt.ngram_draft_s,
        memory_reserve_fraction=rt.memory_reserve_fraction, link_efficiency=dev.link_efficiency,
        link_ll_efficiency=np.nan if dev.link_ll_efficiency is None else dev.link_ll_efficiency,
        link_bulk_latency_s=np.nan if dev.link_bulk_latency_s is None else dev.link_bulk_latency_s,
        sequence_overhead_s=rt.sequence_overhead_s, request_overhead_s=rt.request_overhead_s,
        roofline_p=rt.roofline_p, peak_attention_flop_s=dev.peak_flop_s(kv_dtype),
        int8_stream_factor=rt.int8_stream_factor, int4_stream_factor=rt.int4_stream_factor,
        mla_extra_kernels=rt.mla_extra_kernels, moe_extra_kernels=rt.moe_extra_kernels,
        shared_expert_kernels=rt.shared_expert_kernels, weight_math_native=dev.native_math(compute),
        attention_math_native=dev.native_math(kv_dtype),
        scale_up_domain=np.inf if dev.scale_up_domain is None else dev.scale_up_domain,
        scale_out_bw_bytes_s=dev.scale_out_bw_bytes_s,
        scale_out_latency_s=0.0 if dev.scale_out_latency_s is None else dev.scale_out_latency_s,
        scale_out_efficiency=1.0 if dev.scale_out_efficiency is None else dev.scale_out_efficiency,
        tree_kernels_per_layer=rt.tree_kernels_per_layer, draft_step_overhead_s=rt.draft_step_overhead_s,
        spec_schedule_s=rt.spec_schedule_s, decode_kv_per_query_head=rt.decode_kv_per_query_head,
        pp=pp, layer_regions=dev.layer_regions, dies=dev.dies, region_hop_s=hops[0], die_hop_s=hops[1],
        layer_sync_s=rt.layer_sync_s, **energy)


@functools.lru_cache(maxsize=64)
def _group_arrays(dev: DeviceSpec, rt: RuntimeSpec, chips: int, dtype: str, kv_dtype: str, tech, pp: int = 1,
                  hops: tuple[float, float] = (0.0, 0.0)) -> HardwareArrays:
    """hardware_arrays of one group, built once per (device, runtime, chips, stages, dtypes, technology
    constants) and shared by the evaluate_design calls that ask for it: its arrays read-only."""
    hw = hardware_arrays(dev, rt, chips, dtype, kv_dtype, tech, pp, hops)
    for f in dataclasses.fields(hw):
        getattr(hw, f.name).flags.writeable = False
    return hw


@functools.lru_cache(maxsize=64)
def _part_energy(tech, dev: DeviceSpec) -> dict:
    """technology.known_part_energy, once per (technology constants, device spec) pair."""
    from .model.technology import known_part_energy
    return known_part_energy(tech, dev)


def check_group(dev: DeviceSpec, chips: int, where: str = "--chips") -> None:
    """A group of ``chips`` chips of ``dev`` must be joined by a link, and past the part's
    scale-up domain (MODEL.md section 2) be whole domains on a scale-out network; else one
    SpecError naming the flag and what is allowed."""
    if chips > 1 and dev.link_bw_bytes_s <= 0:
        raise SpecError(None, where, chips, f"{dev.name} has no scale-up link (link_bw_gb_s = 0); use 1")
    dom = dev.scale_up_domain
    if dom is None or chips <= dom:
        return
    if chips % dom:
        raise SpecError(None, where, chips, f"{dev.name}'s scale-up domain is {dom} chips: a group beyond it "
                        f"is whole domains on the scale-out network, so use at most {dom} or a multiple of {dom}")
    if dev.scale_out_bw_bytes_s <= 0:
        raise SpecError(None, where, chips, f"{dev.name}'s scale-up domain is {dom} chips and it has no scale-out "
                        f"network (scale_out_bw_gb_s = 0): use at most {dom}, or --set scale_out_bw_gb_s=...")


def check_stages(dev: DeviceSpec, chips: int, pp: int, where: str = "--pp", value=None) -> None:
    """pp > 1 stages of ``chips`` chips hand their activations on over the scale-up link within a
    scale-up domain and over the scale-out network beyond it; a part without the link it needs
    cannot be staged (one SpecError naming the flag)."""
    if pp <= 1:
        return
    dom = dev.scale_up_domain or math.inf
    value = pp if value is None else value
    if dev.link_bw_bytes_s <= 0 and dev.scale_out_bw_bytes_s <= 0:
        raise SpecError(None, where, value, f"{dev.name} has no scale-up link (link_bw_gb_s = 0); use 1")
    if chips * pp <= dom and dev.link_bw_bytes_s <= 0:
        raise SpecError(None, where, value, f"{dev.name} has no scale-up link (link_bw_gb_s = 0); use 1")
    if chips * pp > dom and dev.scale_out_bw_bytes_s <= 0:
        raise SpecError(None, where, value, f"{pp} stages of {chips} chips leave {dev.name}'s scale-up domain of {dom} "
                        f"chips and it has no scale-out network (scale_out_bw_gb_s = 0)")


def apply_overrides(dev: DeviceSpec, rt: RuntimeSpec, assignments: dict[str, Any]):
    """`--set FIELD=VALUE`: device fields, then runtime fields; unknown names list the allowed."""
    if not assignments:
        return dev, rt
    dev_fields, rt_fields = spec_fields(DeviceSpec), spec_fields(RuntimeSpec)
    numeric = sorted(k for k, (_, i) in dev_fields.items() if i.kind in ("float", "int"))
    numeric += [k for k in RUNTIME_FIELDS]
    d_set, r_set = {}, {}
    for key, value in assignments.items():
        if key in ("memory_capacity_gib", "memory_capacity_gb"):      # one capacity, in the unit of its name
            dev = dev.with_capacity(key, as_number(value, f"--set {key}"))
        elif key in dev_fields and dev_fields[key][1].kind in ("float", "int"):
            d_set[key] = as_number(value, f"--set {key}")
        elif key in rt_fields and rt_fields[key][1].kind in ("float", "int"):
            r_set[key] = as_number(value, f"--set {key}")
        else:
            raise unknown_key(None, f"--set {key}", key, numeric, what="field", value=value)
    return override(dev, d_set, "--set") if d_set else dev, override(rt, r_set, "--set") if r_set else rt


def evaluate_design(*, hw: str, target: str, draft: str = "none", chips: int = 1,
                    draft_hw: str | None = None, draft_chips: int = 1, k: int | str | None = None,
                    alpha: float | None = None, acceptance=None, tau: float | None = None,
                    rank_acceptance=None, rank_profile: str | None = None, tree_nodes: int | str | None = None,
                    tree: str | None = None,
                    datastore_gb: float = 0.0, batch: int = 1, prompt: int = 128, output: int = 128,
                    dtype: str = "bf16", kv_dtype: str | None = None, temperature: float = 0.0, task: Any = "chat",
                    overlap: bool = False, runtime: str | None = None, baseline_ms: float | None = None,
                    continuous: bool = False, max_batched_tokens: int = DEFAULT_BUDGET_TOKENS, ep: int = 1,
                    pp: int | str | None = None, dp: int = 1,
                    set_fields: dict[str, Any] | None = None, k_max: int = 16,
                    sla_ttft_ms: float | None = None, sla_tpot_ms: float | None = None, serving: str = "best",
                    rate_rps: float | None = None, arrivals: str = "closed",
                    db: Database | None = None, tech=None, build_only: bool = False) -> dict[str, Any]:
    """Evaluate one design; returns the `dse eval --json` object (display units, None for null).
    ``tech``: technology constants (TechConstants, e.g. ``with_overrides`` of the database's) for the
    energy terms; None = the database's (the calibration's energy fit varies them).

    Without alpha, acceptance, tau or rank_acceptance the drafter's acceptance comes from the
    published table or the acceptance model (dse.acceptance.fit) for ``task`` and ``temperature``,
    with a band (tau_low/tau_high, speedup_low/speedup_high); ``acceptance_origin`` says which.
    Without k and tree_nodes a tree method (eagle, eagle2, eagle3, medusa:H, hydra, retrieval)
    drafts the fastest of a chain, smaller trees and its published tree (DrafterSpec.tree_choices)
    with k = auto, chosen for the design and batch (dse.model.tree_choice); ``tree_nodes``
    'published' is the published tree at its depth (dse.workload.spec.DEFAULT_SHAPES); k = None is
    'auto' otherwise. ``tree``: the tree a serving framework builds ('sglang:topk=4,steps=5,tokens=8',
    'vllm:k=3', 'trtllm:topk=10,draft_len=4,draft_tokens=63'; dse.workload.trees), priced and credited
    as built at its own depth; 'best' (or None) is dse's best tree as above. ``chips`` is the whole group: ``pp`` stages of chips/pp chips in tensor parallel
    (None or 'auto': dse.workload.spec.pipeline_split). ``max_batched_tokens``: continuous batching's
    token budget per iteration (decode tokens + prompt chunks; vLLM's max_num_batched_tokens, default
    8192, dse.model.scheduler). With ``sla_ttft_ms`` and ``sla_tpot_ms`` the
    record also holds the best operating point that meets them (sla_*; dse.model.serving), and
    ``sla_points`` the best aggregated and disaggregated ones (``serving``: agg, disagg or best).
    ``rate_rps``: also size a fleet that serves that many requests a second within the SLA, per
    deployment kind (the fewest chips: whole deployments at the best point; ``sizing``).
    ``build_only``: return the design's (DesignBatch, Workload) instead (``design_and_workload``).

    Example:
        >>> r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
        >>> r["fits"], r["k"], round(r["tau"], 3)
        (True, 4, 3.362)
    """
    db = db or load_database()
    # the bounds of the study knobs (dse.study.spec): an int64 overflow or a nonsense size is bad input
    if isinstance(tree_nodes, str) and tree_nodes.strip().lower() != "published":
        try:
            tree_nodes = int(tree_nodes)
        except ValueError:
            raise SpecError(None, "--tree-nodes", tree_nodes, f"expected an integer in [0, {TREE_NODES_MAX}] or "
                            "'published' (the method's published tree at its depth)") from None
    for name, value, lo, hi in (("--chips", chips, 1, 1024), ("--draft-chips", draft_chips, 1, 1024),
                                ("--batch", batch, 1, 1e6), ("--prompt", prompt, 0, 1e7), ("--output", output, 1, 1e7),
                                ("--max-batched-tokens", max_batched_tokens, 1, 1e7),
                                ("--tree-nodes", 0 if isinstance(tree_nodes, str) else tree_nodes or 0, 0,
                                 TREE_NODES_MAX)):
        if isinstance(value, np.integer):
            value = int(value)
        Range(integer=True, lo=lo, hi=hi).check(value, None, name)
    if dtype not in WEIGHT_FORMATS:
        raise one_of(None, "--dtype", dtype, WEIGHT_FORMATS)
    kv_dtype = kv_dtype or default_kv_dtype(dtype)
    if kv_dtype not in DTYPES:
        raise one_of(None, "--kv-dtype", kv_dtype, DTYPES)
    as_number(temperature, "--temperature", rng=Range(lo=0.0, hi=2.0))
    task_mix = task if isinstance(task, TaskMix) else parse_task(task)
    as_number(datastore_gb, "--datastore-gb", rng=Range(lo=0.0, unit="GB of host memory"))
    dev = db.device(hw, where="--hw: ")
    tgt = db.model(target, where="--target: ")
    raise_collected(check_ep(tgt, ep, (chips,)))
    ep = int(ep)
    rt = db.runtime(runtime or dev.default_runtime, where="--runtime: ")
    dev, rt = apply_overrides(dev, rt, set_fields or {})
    if tgt.kind != "decoder":
        raise SpecError(None, "--target", target, f"{tgt.name} is a {tgt.kind}, not a model to serve")
    drafter = parse_drafter(draft, tgt, db)
    fw = None if tree is None else parse_tree(tree, "--tree")
    if fw is not None and fw.framework == "best":
        fw = None
    if fw is not None:      # the framework's tree (or chain) fixes the tree size and, where it has one, k
        raise_collected(check_tree(fw, drafter, k_given=k, tree_nodes_given=tree_nodes is not None))
        tree_nodes, k = fw.nodes, fw.depth or k
    on_chip = draft_hw is not None
    given = any(x is not None for x in (alpha, acceptance, tau, rank_acceptance))
    published = isinstance(tree_nodes, str) and tree_nodes.strip().lower() == "published"
    if published and (k is not None or drafter.default_shape() is None):
        raise SpecError(None, "--tree-nodes", tree_nodes, "the published tree is the method's own depth: give no --k"
                        if k is not None else f"{drafter.label} has no published tree (a chain method): give an "
                        "integer number of nodes")
    shape = drafter.default_shape() if ((k is None and tree_nodes is None) or published) \
        and drafter.kind != "none" else None
    # without k or a tree size, the tree (and k) is re-chosen per design among the method's sizes
    choices = drafter.tree_choices() if shape and not published else ()
    if published and shape.tree is not None:       # the published tree as its code builds it
        fw = shape.tree
    tree_nodes = shape.nodes if shape else (tree_nodes or 0)
    # mtp:N drafts its N chained steps unless k is given (SGLang's --speculative-num-steps N,
    # TensorRT-LLM's num_nextn_predict_layers N)
    if k is None and drafter.kind == "mtp" and drafter.heads:
        k = drafter.heads
    k = shape.depth if published else ("auto" if k is None else k)
    resolution = None
    if drafter.kind == "none" and not on_chip:
        k_val, acc = parse_k(k, drafter), AcceptanceSpec(kind="alpha", alpha=0.0)
    elif drafter.kind == "none":
        k_val, acc = 0, None
    elif given:
        k_val = parse_k(k, drafter)
        acc = make_acceptance(alpha, acceptance, tau, rank_acceptance, where="--", rank_name="rank-acceptance")
    else:       # from the published table or the acceptance model (dse.acceptance.fit)
        from .acceptance.resolve import resolve
        k_val = parse_k(k, drafter)
        k_fixed = k_val if k_val else None
        # the table's rows of the method's published tree where it is the default (re-chosen or not)
        row_shape = (None, tree_nodes, shape.depth) if shape else (None, tree_nodes, k_fixed) if tree_nodes else \
            ((k_fixed, None, None) if k_fixed else None)
        # the workload's context S = prompt + output / 2 (as the step costs use it): EAGLE heads past
        # their training context lose acceptance (dse.acceptance.fit.context_slope)
        resolution = resolve(tgt, drafter, task_mix, float(temperature), db, row_shape,
                             context_tokens=prompt + 0.5 * output, chain=not tree_nodes)
        acc = resolution.spec("alpha")
    k_given = k_val if k_val else None
    raise_collected(check_workload(drafter, acc, k_lo=k_given, k_hi=k_given, k_fixed=k_val > 0,
                                   tree_nodes=tree_nodes, overlap=overlap, draft_chip=on_chip,
                                   acceptance_given=given))
    if datastore_gb and drafter.kind != "ngram":
        raise SpecError(None, "--datastore-gb", datastore_gb, "a datastore belongs to a retrieval draft "
                        "(--draft retrieval or ngram)")
    total, pp_asked = chips, pp
    chips, pp = pipeline_split(tgt, total, None if pp is None or str(pp).strip().lower() == "auto"
                               else as_number(pp, "--pp", rng=Range(integer=True, lo=1, hi=1024)),
                               max_tp=1 if dev.link_bw_bytes_s <= 0 else None, most_stages=dev.layer_regions)
    check_group(dev, chips)
    raise_collected(check_dp(tgt, dp, (chips,), chips_name="--chips/--pp"))
    dp = int(dp)
    auto = pp_asked is None or str(pp_asked).strip().lower() == "auto"
    check_stages(dev, chips, pp, "--chips" if auto else "--pp", total if auto else None)
    # a draft model runs at the tensor parallel its heads allow on its chips (draft_tp: dse.model.drafters)
    from .catalog.technology import load_technology
    db_tech = load_technology(db.root)
    tech = tech or db_tech
    hops = (db.link_class(ON_DIE_CLASS).latency_s, db.link_class(DIE_TO_DIE_CLASS).latency_s)
    target_hw = _group_arrays(dev, rt, chips, dtype, kv_dtype, tech, pp, hops)
    if on_chip:
        ddev = db.device(draft_hw, where="--draft-hw: ")
        check_group(ddev, draft_chips, "--draft-chips")
        for end in (ddev, dev):      # both ends need a link, as in studies (evaluation.build_designs)
            if end.link_bw_bytes_s <= 0:
                raise SpecError(None, "--draft-hw", draft_hw, f"{end.name} has no link (link_bw_gb_s = 0) between "
                                "the target and the draft chip")
        draft_arrays = _group_arrays(ddev, db.runtime(runtime or ddev.default_runtime), draft_chips, dtype,
                                     kv_dtype, tech, 1, hops)
        link_bw, link_lat = min(ddev.link_bw_bytes_s, dev.link_bw_bytes_s), ddev.link_latency_s
    else:
        ddev, draft_arrays, link_bw, link_lat = None, target_hw, 0.0, 0.0
    profiles = load_rank_profiles(db.root)
    profile = (profiles.get(str(rank_profile), "--rank-profile") if rank_profile is not None
               else profiles.for_drafter(drafter.kind))
    band = dict(acceptance_low=resolution.spec("low"), acceptance_high=resolution.spec("high"),
                acceptance_source=resolution.source) if resolution else \
        dict(acceptance_source="given" if drafter.kind != "none" else "none")
    sla = _sla(sla_ttft_ms, sla_tpot_ms, serving)
    if str(arrivals).strip().lower() not in ARRIVALS:
        raise one_of(None, "--arrivals", arrivals, ARRIVALS)
    if rate_rps is not None:
        if sla is None:
            raise SpecError(None, "--rate-rps", rate_rps, "sizing a fleet needs the SLA it must meet: give "
                            "--sla-ttft-ms and --sla-tpot-ms too")
        rate_rps = as_number(rate_rps, "--rate-rps", rng=Range(lo=0.0, lo_open=True, hi=1e9, unit="requests/s"))
    w = Workload(target=tgt, drafter=drafter, acceptance=acc, dtype=dtype, kv_dtype=kv_dtype, sla=sla,
                 serving=str(serving).strip().lower(), arrivals=str(arrivals).strip().lower(),
                 temperature=float(temperature), overlap=overlap, tree_nodes=tree_nodes,
                 datastore_bytes=float(datastore_gb) * FACTOR["gb"], continuous=bool(continuous),
                 max_batched_tokens=int(max_batched_tokens), ep=ep, dp=dp,
                 k_max=(drafter.k_cap or k_max) if fw is None else max(drafter.k_cap or k_max, fw.depth), tree=fw,
                 rank_profile=None if profile.geometric else profile, task=task_mix, tree_choices=choices, **band)
    chain_res = None
    if resolution is not None and choices:      # the chain candidate's own acceptance (EAGLE-3's chain term)
        from .acceptance.resolve import with_chain_acceptance
        w, chain_res = with_chain_acceptance(w, db, context_tokens=prompt + 0.5 * output)
    design = DesignBatch(target=target_hw, draft=draft_arrays, draft_on_chip=on_chip,
                         draft_link_bw_bytes_s=link_bw, draft_link_latency_s=link_lat,
                         batch=batch, prompt_tokens=prompt, output_tokens=output, k=k_val)
    if build_only:
        return design, w
    anchor = None
    if baseline_ms is not None:
        design, anchor = anchor_to_baseline(design, w, as_number(baseline_ms, "--baseline-ms", rng=Range(lo=0.0, lo_open=True)) * 1e-3)
    if sla is None:
        m, picks = evaluate(design, w), None
    else:                       # the SLA search once: the record's sla_* and the points per mode from it
        picks = sla_picks(design, w, evaluate, sla, w.serving)
        m = with_sla(evaluate(design, dataclasses.replace(w, sla=None)), design, w, picks)
    out = to_record(m, 0)
    out.update(max_batched_tokens=w.max_batched_tokens, arrivals=w.arrivals)
    if sla is not None:
        out.update(sla_ttft_target_ms=sla.ttft_s * 1e3, sla_tpot_target_ms=sla.tpot_s * 1e3, serving=w.serving)
        out["sla_points"] = _sla_points(design, w, picks, db_tech, dev, total, ddev, draft_chips)
        out["usd_per_mtok"] = out["sla_points"].get(out["sla_serving"] or "", {}).get("usd_per_mtok")
        if rate_rps is not None:
            out["rate_rps"] = rate_rps
            out["sizing"] = {mode: _size(p, rate_rps, output) for mode, p in out["sla_points"].items()}
    out.update(hw=dev.name, chips=total, tp=chips, pp=pp, ep=ep, dp=dp, target=tgt.name, draft=drafter.label,
               draft_hw=ddev.name if ddev else None, draft_chips=draft_chips if ddev else None,
               runtime=rt.name, dtype=dtype, kv_dtype=kv_dtype, weight_format=WEIGHT_FORMATS[dtype].desc,
               weight_math=_weight_math(dev, dtype), scale_up_domain=dev.scale_up_domain,
               **_cost_and_price(dev, total, db_tech, ddev, draft_chips), batch=batch,
               prompt_tokens=prompt, output_tokens=output, temperature=float(temperature), overlap=overlap,
               batching="continuous" if continuous else "static",
               acceptance=acc.describe() if drafter.kind != "none" else None,
               alpha_meaning=("i.i.d. conditional per-token acceptance rate (Leviathan et al. 2023)"
                              if acc.kind == "alpha" else
                              "none: a tree's tau maps to no single chain alpha" if out["tree_nodes"] else
                              "i.i.d. rate that gives the same tau at this k (input was "
                              + {"per_position": "per-position rates", "tau": "tau", "rank": "per-rank rates",
                                 "mixture": "a text mix, one rate per task"}[acc.kind]
                              + ")")
               if drafter.kind != "none" else None,
               task=task_mix.label, acceptance_origin=(resolution.text() + (
                   f"; a chain among the sizes: {chain_res.text()}" if chain_res is not None else "")) if resolution
               else ("given" if drafter.kind != "none" else None),
               acceptance_per_task=[dict(task=t.task, weight=t.weight, alpha=t.alpha, alpha_low=t.low,
                                         alpha_high=t.high, origin=t.origin, detail=t.detail)
                                    for t in resolution.tasks] if resolution else None,
               default_tree=shape.source if shape else None,
               tree_choices=list(choices) or None,
               framework_tree=fw.label if fw is not None else None,
               k_mode=(f"tree and k chosen for batch {batch} among {_sizes(choices)}; the published tree: "
                       f"--tree-nodes published" if choices else
                       "the method's published tree" if shape else
                       f"the framework's {'chain' if fw.is_chain else 'tree'} {fw.label}" if fw is not None else "auto" if k_val == 0 else "fixed"), anchor=anchor,
               rank_profile_source=(None if not out["rank_profile"] else "given per rank (--rank-acceptance)"
                                    if out["rank_profile"] == "given" else
                                    ("ESTIMATE: " if profile.estimate else "") + profile.source))
    return out


def design_and_workload(**kwargs) -> tuple[DesignBatch, Workload]:
    """The length-1 DesignBatch and the Workload evaluate_design evaluates for these arguments (its
    own), for the model's functions (dse.model.serving) on one design."""
    return evaluate_design(build_only=True, **kwargs)


def _sla(ttft_ms, tpot_ms, serving) -> Sla | None:
    """The SLA of --sla-ttft-ms and --sla-tpot-ms (both or neither), checked."""
    mode = str(serving).strip().lower()
    if mode not in SERVING_MODES:
        raise one_of(None, "--serving", serving, SERVING_MODES)
    if ttft_ms is None and tpot_ms is None:
        return None
    if ttft_ms is None or tpot_ms is None:
        missing = "--sla-ttft-ms" if ttft_ms is None else "--sla-tpot-ms"
        raise SpecError(None, missing, MISSING, "an SLA needs both --sla-ttft-ms and --sla-tpot-ms (milliseconds)")
    ttft = as_number(ttft_ms, "--sla-ttft-ms", rng=Range(lo=0.0, lo_open=True, hi=3.6e6, unit="ms"))
    tpot = as_number(tpot_ms, "--sla-tpot-ms", rng=Range(lo=0.0, lo_open=True, hi=3.6e6, unit="ms"))
    return Sla(ttft_s=ttft * 1e-3, tpot_s=tpot * 1e-3)


def _sla_points(design: DesignBatch, w: Workload, picks: dict, tech, dev, chips, ddev, draft_chips) -> dict[str, dict]:
    """The best aggregated and disaggregated operating points under w.sla (``picks``, as w.serving
    allows), each in display units with its cost per million output tokens (economics.usd_per_mtok)."""
    from .model.economics import usd_per_mtok
    # the manufacturing cost estimate (the same estimator a synthesised chip gets; dse.model.columns)
    price = _cost_and_price(dev, chips, tech, ddev, draft_chips)["cost_usd"]
    out = {}
    for mode in picks:
        one = sla_metrics(design, w, evaluate, w.sla, mode, picks={mode: picks[mode]})
        r = {k: np.asarray(v)[0] for k, v in one.items()}
        if not r["sla_serving"]:
            out[mode] = dict(met=False)
            continue
        cost = usd_per_mtok(tech, np.nan if price is None else price / float(chips_in_design(design)[0]),
                            r["sla_tokens_per_s_per_chip"], r["sla_energy_j_per_token"])
        out[mode] = dict(met=True, tokens_per_s_per_chip=float(r["sla_tokens_per_s_per_chip"]),
                         deployment_chips=int(r["_deployment_chips"]),
                         concurrency=int(r["sla_concurrency"]),
                         tokens_per_s_per_user=float(r["sla_tokens_per_s_per_user"]),
                         ttft_ms=float(r["sla_ttft_s"]) * 1e3, tpot_ms=float(r["sla_tpot_s"]) * 1e3,
                         speculation=str(r["sla_speculation"]), energy_j_per_token=float(r["sla_energy_j_per_token"]),
                         prefill_share=None if mode == "agg" else float(r["sla_prefill_share"]),
                         usd_per_mtok=None if not np.isfinite(cost) else float(cost))
    return out


def _size(point: dict, rate_rps: float, output_tokens: int) -> dict | None:
    """The fewest whole deployments at ``point`` that serve ``rate_rps`` requests a second of G output
    tokens each: a deployment serves tokens/s per chip x its chips / G requests a second."""
    if not point["met"]:
        return None
    per = point["tokens_per_s_per_chip"] * point["deployment_chips"] / output_tokens
    n = math.ceil(rate_rps / per - 1e-9)
    return dict(deployments=n, chips=n * point["deployment_chips"], requests_per_s_per_deployment=per)


def _sizes(choices) -> str:
    """(0, 4, 8, 59) -> 'a chain and trees of 4, 8 and 59 nodes'."""
    trees = [str(c) for c in choices if c]
    text = ", ".join(trees[:-1]) + f" and {trees[-1]}" if len(trees) > 1 else "".join(trees)
    return ("a chain and " if 0 in choices else "") + f"tree{'s' if len(trees) > 1 else ''} of {text} nodes"


def _weight_math(dev: DeviceSpec, dtype: str) -> str:
    """How the weight format's math runs on the part: 'native', or 'weight-only' with the reason
    (fp8 on a part without fp8 units: 1-byte weights widened to 16 bits, 16-bit math)."""
    compute = WEIGHT_FORMATS[dtype].compute_dtype
    if dev.native_math(compute):
        return "native"
    return f"weight-only: {dev.name} has no {compute} units, so 16-bit math on {compute} weights"


def _cost_and_price(dev: DeviceSpec, chips: int, tech, ddev: DeviceSpec | None = None,
                    draft_chips: int = 0) -> dict[str, Any]:
    """The design's manufacturing-cost estimate (the synthesised-chip estimator applied to the known
    part, technology.known_part_estimate) and street price; its provisioned power from the same
    energy model synthesised chips get, bounded by the vendor TDP (technology.known_part_power_w: the
    TDP where the model cannot run or reads above it, ``power_basis`` says which), the vendor TDP,
    and the power limit, the most it draws (technology.known_part_power_limit_w: the TDP where
    known). Each is summed over the target chips and, with a draft chip (``ddev``), its
    ``draft_chips`` chips, as a study's columns are (None when unknown; ``power_basis`` the
    target's). ``tech``: the database's technology constants."""
    groups = [(dev, chips)] + ([(ddev, draft_chips)] if ddev is not None else [])
    sums = {"cost_usd": 0.0, "price_usd": 0.0, "power_w": 0.0, "tdp_w": 0.0, "power_limit_w": 0.0}
    for d, n in groups:
        cost, power, _, limit = _part_cost_power(tech, d)
        for key, v in (("cost_usd", cost), ("price_usd", d.price_usd or math.nan), ("power_w", power),
                       ("tdp_w", d.tdp_w or math.nan), ("power_limit_w", limit)):
            sums[key] += v * n
    basis = _part_cost_power(tech, dev)[2]
    out = {k: v if math.isfinite(v) else None for k, v in sums.items()}
    out["power_basis"] = basis or None
    return out


@functools.lru_cache(maxsize=64)
def _part_cost_power(tech, dev: DeviceSpec) -> tuple[float, float, str, float]:
    """(cost, power, power basis, power limit) of one chip of a known part: a pure function of the
    (frozen) technology constants and device spec, so computed once per pair."""
    from .model.technology import known_part_estimate, known_part_power_limit_w, known_part_power_w
    power, basis = known_part_power_w(tech, dev)
    return float(known_part_estimate(tech, dev)[0]), float(power), basis, known_part_power_limit_w(tech, dev)


_BOUND_TEXT = tuple(BOUND_NAMES.tolist())


def to_record(m: Metrics, i: int) -> dict[str, Any]:
    """Row i of Metrics as JSON-ready display values: NaN -> None, and the phases' bounds
    None where the design does not fit (as in result files: no latency, so no bound)."""
    out = {}
    fits = bool(m.fits[i])
    for name, attr, scale in METRIC_COLUMNS:      # Metrics.columns(), row i only
        v = getattr(m, attr).item(i)              # a Python scalar (float64 -> float: the same bits)
        if scale == "bound":
            v = _BOUND_TEXT[v]
        elif scale is not None and scale != "text":
            v = v / scale                         # IEEE division, as numpy's on the column
        if (isinstance(v, float) and not math.isfinite(v)) or (name in BOUND_COLUMNS and not fits):
            v = None
        out[name] = v
    return out


def anchor_to_baseline(design: DesignBatch, w: Workload, baseline_s: float):
    """Scale the target runtime's fixed costs (kernel launch, step, spec overhead) so the
    autoregressive step equals a measured ``baseline_s``: T = T_var + s*T_fixed, s = (X - T_var)/T_fixed."""
    from .model.roofline import step_cost
    from .model.transformer import step_kwargs
    hw = design.target
    S = design.prompt_tokens + 0.5 * design.output_tokens
    kw = dict(batch=design.batch, q=1.0, context=S, ep=w.ep, **step_kwargs(w.dtype, w.kv_dtype))
    full = step_cost(w.target, hw, **kw)
    no_fixed = dataclasses.replace(hw, kernel_launch_s=np.zeros_like(hw.kernel_launch_s),
                                   step_overhead_s=np.zeros_like(hw.step_overhead_s),
                                   sequence_overhead_s=np.zeros_like(hw.sequence_overhead_s))
    var = step_cost(w.target, no_fixed, **kw).time_s      # roofline + all-reduces
    fixed = full.time_s - var
    if float(var[0]) >= baseline_s or float(fixed[0]) <= 0:
        raise SpecError(None, "--baseline-ms", baseline_s * 1e3,
                        f"expected more than {float(var[0]) * 1e3:.3f} ms, the model's time without fixed costs "
                        "at these efficiencies (lower mem_efficiency with --set instead)")
    s = float((baseline_s - var[0]) / fixed[0])
    scaled = dataclasses.replace(hw, kernel_launch_s=hw.kernel_launch_s * s, step_overhead_s=hw.step_overhead_s * s,
                                 sequence_overhead_s=hw.sequence_overhead_s * s, spec_overhead_s=hw.spec_overhead_s * s,
                                 draft_step_overhead_s=hw.draft_step_overhead_s * s)
    draft = design.draft if bool(design.draft_on_chip[0]) else scaled
    new = dataclasses.replace(design, target=scaled, draft=draft)
    return new, {"scaled": ["kernel_launch_us", "step_overhead_us", "sequence_overhead_us", "spec_overhead_us",
                            "draft_step_overhead_us"],
                 "factor": s,
                 "baseline_ms": baseline_s * 1e3}
