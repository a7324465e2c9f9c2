"""Validated, SI-unit specs of database entries: devices, models and runtimes.

Each field declares its YAML name, display unit, allowed range and meaning once, in
``field(metadata=...)``; the loader, its error messages, ``dse hw show`` and ``--set`` all read
that one table. Values are converted to SI on load (MODEL.md section 0).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..errors import MISSING, SpecError, raise_collected
from ..units import FACTOR
from .fields import Range, unknown_key
from .links import SCALE_UP_CLASSES

REQUIRED = object()
#: keys every database file may carry besides its fields
META_KEYS = {"schema_version", "sources", "estimates", "notes"}


class FieldInfo(NamedTuple):
    yaml: str
    unit: str
    kind: str           # "float", "int", "str", "bool"
    lo: float
    hi: float
    desc: str
    lo_open: bool       # lo itself not allowed

    @property
    def range(self) -> Range:
        return Range(self.kind == "int", self.lo, self.hi, self.lo_open, self.unit.replace("_", "/"))


def num(yaml: str, unit: str = "", lo: float = 0.0, hi: float = math.inf, *, desc: str = "",
        default: Any = REQUIRED, integer: bool = False, lo_open: bool = False):
    """A numeric field; ``default=None`` makes it optional."""
    info = FieldInfo(yaml, unit, "int" if integer else "float", lo, hi, desc, lo_open)
    if default is REQUIRED:
        return field(metadata={"spec": info})
    return field(default=default, metadata={"spec": info})


def text(yaml: str, *, desc: str = "", default: Any = REQUIRED, choices: tuple[str, ...] = ()):
    info = FieldInfo(yaml, "", "str", 0, 0, desc + (f" (one of {', '.join(choices)})" if choices else ""),
                     False)
    meta = {"spec": info, "choices": choices}
    if default is REQUIRED:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def flag(yaml: str, *, desc: str = "", default: Any = False):
    return field(default=default, metadata={"spec": FieldInfo(yaml, "", "bool", 0, 1, desc, False)})


def allowed_text(info: FieldInfo) -> str:
    """'expected a number in (0, 1]' style text for one field."""
    if info.kind == "bool":
        return "expected true or false"
    if info.kind == "str":
        return f"expected a string{': ' + info.desc if info.desc else ''}"
    return info.range.text()


def spec_fields(cls) -> dict[str, tuple[dataclasses.Field, FieldInfo]]:
    """YAML name -> (dataclass field, FieldInfo) for a spec class."""
    return {f.metadata["spec"].yaml: (f, f.metadata["spec"]) for f in dataclasses.fields(cls)
            if "spec" in f.metadata}


def check_value(info: FieldInfo, f: dataclasses.Field, value: Any, path: str | None,
                prefix: str = "") -> Any:
    """Validate one display value and return it in SI; SpecError names file, field and range."""
    name = prefix + info.yaml
    if info.kind == "str":
        if not isinstance(value, str) or not value:
            raise SpecError(path, name, value, allowed_text(info))
        choices = f.metadata.get("choices") or ()
        if choices and value not in choices:
            raise SpecError(path, name, value, f"expected one of {', '.join(choices)}")
        return value
    if info.kind == "bool":
        if not isinstance(value, bool):
            raise SpecError(path, name, value, allowed_text(info))
        return value
    v = info.range.check(value, path, name)
    return v if info.kind == "int" else v * FACTOR[info.unit]


def build(cls, raw: dict, path: str | None, *, extra_keys: set[str] = frozenset()):
    """Validate a YAML mapping into a frozen spec; every bad field is reported at once."""
    table = spec_fields(cls)
    errors: list[SpecError] = []
    kwargs: dict[str, Any] = {}
    allowed = set(table) | META_KEYS | set(extra_keys)
    for key in raw:
        if key not in allowed:
            errors.append(unknown_key(path, str(key), key, table, what="field"))
    for yaml_name, (f, info) in table.items():
        if yaml_name not in raw or raw[yaml_name] is None:
            required = f.default is dataclasses.MISSING
            if required:
                errors.append(SpecError(path, yaml_name, MISSING,
                                        f"missing required field: {allowed_text(info)}"))
            continue
        try:
            kwargs[f.name] = check_value(info, f, raw[yaml_name], path)
        except SpecError as exc:
            errors.append(exc)
    raise_collected(errors)
    obj = cls(**kwargs)
    check = getattr(obj, "cross_check", None)
    if check:
        raise_collected(check(path))
    return obj


def to_display(spec) -> dict[str, Any]:
    """Spec -> {yaml name: display value} (inverse of build)."""
    out = {}
    for yaml_name, (f, info) in spec_fields(type(spec)).items():
        v = getattr(spec, f.name)
        if v is not None and info.kind == "float":
            v = v / FACTOR[info.unit]
        out[yaml_name] = v
    return out


def override(spec, assignments: dict[str, Any], path: str = "--set"):
    """Return ``spec`` with display-unit fields replaced (``dataclasses.replace``)."""
    table = spec_fields(type(spec))
    changes = {}
    for key, value in assignments.items():
        f, info = table[key]
        changes[f.name] = check_value(info, f, value, path)
    return dataclasses.replace(spec, **changes)


_FROZEN = dict(frozen=True, slots=True, kw_only=True)


def is_dram(memory_type: str) -> bool:
    """HBM, GDDR, LPDDR or DDR: capacities in binary units."""
    return str(memory_type).lower().startswith(("hbm", "gddr", "lpddr", "ddr"))


@dataclass(**_FROZEN)
class DeviceSpec:
    """One accelerator (real or synthesised). SI inside; YAML keys carry display units."""

    name: str = text("name", desc="lowercase-hyphen database key")
    display_name: str = text("display_name", default="")
    vendor: str = text("vendor", default="")
    year: int | None = num("year", "", 1990, 2100, integer=True, default=None)
    memory_type: str = text("memory_type", default="")
    process_node: str = text("process_node", default="")
    capacity_gib_bytes: float | None = num("memory_capacity_gib", "gib", 0, 1e6, lo_open=True, default=None,
                                           desc="memory capacity per chip in GiB (2^30 bytes): how DRAM (HBM, GDDR, "
                                                "LPDDR) is sized; an H100's '80 GB' is 80 GiB")
    capacity_gb_bytes: float | None = num("memory_capacity_gb", "gb", 0, 1e6, lo_open=True, default=None,
                                          desc="memory capacity per chip in GB (1e9 bytes): on-die SRAM and other "
                                               "decimal figures; give this or memory_capacity_gib")
    mem_bw_bytes_s: float = num("mem_bw_tb_s", "tb_s", 0, 1e5, lo_open=True,
                                desc="peak memory bandwidth per chip")
    peak_bf16_flop_s: float = num("peak_tflops_bf16", "tflops", 0, 1e6, lo_open=True,
                                  desc="dense BF16 tensor FLOP/s per chip")
    peak_fp16_flop_s: float | None = num("peak_tflops_fp16", "tflops", 0, 1e6, lo_open=True, default=None,
                                         desc="dense FP16; absent = BF16 rate")
    peak_fp8_flop_s: float | None = num("peak_tflops_fp8", "tflops", 0, 1e6, lo_open=True, default=None,
                                        desc="dense FP8; absent = no native FP8 (runs at the BF16 rate)")
    peak_int8_op_s: float | None = num("peak_tops_int8", "tops", 0, 1e6, lo_open=True, default=None,
                                       desc="dense INT8 (informational: int8 weights are weight-only)")
    peak_fp4_flop_s: float | None = num("peak_tflops_fp4", "tflops", 0, 1e7, lo_open=True, default=None,
                                        desc="dense FP4 (nvfp4 weights run at it; int4 weights compute in BF16)")
    sram_bytes: float = num("sram_mb", "mb", 0, 1e8, default=0.0, desc="on-chip SRAM (L2/cache/scratch)")
    link_bw_bytes_s: float = num("link_bw_gb_s", "gb_s", 0, 1e6, default=0.0,
                                 desc="scale-up link bandwidth per chip, both directions added")
    link_class: str = text("link_class", default="other", choices=SCALE_UP_CLASSES,
                           desc="kind of scale-up link: its latency and efficiency (hardware_db/technology/links.yaml)")
    link_latency_s: float | None = num("link_latency_us", "us", 0, 1e4, default=None,
                                       desc="per-step latency of a collective; absent = the link class's")
    link_efficiency: float | None = num("link_efficiency", "", 0, 1, lo_open=True, default=None,
                                        desc="all-reduce bus bandwidth / one-way link rate (eta_link); "
                                             "absent = the link class's")
    link_ll_efficiency: float | None = num("link_ll_efficiency", "", 0, 1, lo_open=True, default=None,
                                           desc="bus bandwidth / one-way link rate of the low-latency protocol a "
                                                "small or medium all-reduce runs (NCCL's LL, a one-shot kernel); "
                                                "absent = the link class's")
    link_bulk_latency_s: float | None = num("link_bulk_latency_us", "us", 0, 1e4, default=None,
                                            desc="per-step latency of the bandwidth protocol a large all-reduce runs "
                                                 "(NCCL's Simple, a two-shot kernel); absent = the link class's")
    scale_up_domain: int | None = num("scale_up_domain", "", 1, 1e6, integer=True, default=None,
                                      desc="chips the scale-up link joins (an HGX board 8, an NVL72 rack 72, a "
                                           "TPU pod); tensor parallel beyond it crosses the scale-out network; "
                                           "absent = no limit")
    scale_out_bw_bytes_s: float = num("scale_out_bw_gb_s", "gb_s", 0, 1e6, default=0.0,
                                      desc="network bandwidth per chip between scale-up domains (its NICs), "
                                           "both directions added; 0 = none")
    scale_out_latency_s: float | None = num("scale_out_latency_us", "us", 0, 1e4, default=None,
                                            desc="per-step latency of a collective over the scale-out network; "
                                                 "absent = the scale-out link class's")
    scale_out_efficiency: float | None = num("scale_out_efficiency", "", 0, 1, lo_open=True, default=None,
                                             desc="all-reduce bus bandwidth / one-way NIC rate over the scale-out "
                                                  "network; absent = the scale-out link class's")
    dies: int = num("dies", "", 1, 1e4, integer=True, default=1,
                    desc="dies of one chip (a wafer-scale part: its reticle fields); on an SRAM-only part each "
                         "layer's hop to the next region crosses a die edge where the layers change dies")
    tdp_w: float | None = num("tdp_w", "w", 0, 1e6, lo_open=True, default=None)
    die_area_mm2: float | None = num("die_area_mm2", "mm2", 0, 1e6, lo_open=True, default=None)
    price_usd: float | None = num("price_usd", "usd", 0, 1e8, lo_open=True, default=None)
    mem_efficiency: float = num("mem_efficiency", "", 0, 1, lo_open=True,
                                desc="achievable fraction of peak bandwidth (eta_m)")
    compute_efficiency: float = num("compute_efficiency", "", 0, 1, lo_open=True,
                                    desc="achievable fraction of peak FLOP/s (eta_c)")
    kernel_launch_s: float | None = num("kernel_launch_us", "us", 0, 1e5, default=None,
                                        desc="per-kernel fixed cost; absent = the runtime's")
    step_overhead_s: float | None = num("step_overhead_us", "us", 0, 1e6, default=None,
                                        desc="per-forward-step fixed cost; absent = the runtime's")
    default_runtime: str = text("default_runtime", default="graphs")

    @property
    def layer_regions(self) -> bool:
        """Weights in the chip's own SRAM (memory_type sram): each layer runs on the region of cores
        that holds it (MODEL.md section 8), not on the whole chip."""
        return str(self.memory_type).lower() == "sram"

    @property
    def memory_bytes(self) -> float:
        """Capacity in bytes: memory_capacity_gib x 2^30 or memory_capacity_gb x 1e9, whichever the entry
        gives (MODEL.md section 0: DRAM parts are sized in binary units, "80 GB" = 80 GiB = 85.9e9 bytes)."""
        return self.capacity_gib_bytes if self.capacity_gib_bytes is not None else self.capacity_gb_bytes

    def with_capacity(self, name: str, value) -> DeviceSpec:
        """A copy with its capacity set through ``name`` (memory_capacity_gib or memory_capacity_gb, in
        that unit), the other one cleared: `--set memory_capacity_gb=100` means 100e9 bytes on any part."""
        table = spec_fields(DeviceSpec)
        f, info = table[name]
        v = check_value(info, f, value, "--set")
        gib = v if name == "memory_capacity_gib" else None
        return dataclasses.replace(self, capacity_gib_bytes=gib, capacity_gb_bytes=None if gib is not None else v)

    def cross_check(self, path):
        """One capacity, in its unit: a DRAM part's capacity is binary (memory_capacity_gib); a DRAM part
        that says memory_capacity_gb (which device files used to mean as GiB) is refused, not misread."""
        gib, gb = self.capacity_gib_bytes, self.capacity_gb_bytes
        if gib is None and gb is None:
            return [SpecError(path, "memory_capacity_gib", MISSING, "missing required field: the capacity per "
                              "chip, memory_capacity_gib (binary: DRAM) or memory_capacity_gb (decimal: SRAM)")]
        if gib is not None and gb is not None:
            return [SpecError(path, "memory_capacity_gb", gb / FACTOR["gb"], "give one capacity: memory_capacity_gib "
                              "(binary) or memory_capacity_gb (decimal), not both")]
        if gb is not None and is_dram(self.memory_type):
            v = gb / FACTOR["gb"]
            v = int(v) if float(v).is_integer() else v
            return [SpecError(path, "memory_capacity_gb", v, f"{self.memory_type} is sized in binary units: write "
                              f"memory_capacity_gib: {v:g} ({v:g} GiB = {v * FACTOR['gib'] / FACTOR['gb']:.2f} GB)")]
        return []

    def peak_flop_s(self, dtype: str) -> float:
        """Dense FLOP/s the matmuls run at for a weight dtype: fp8 is W8A8 (FP8 rate); int8 and
        int4 are weight-only (W8A16, W4A16: dequantised to BF16, so the BF16 rate)."""
        bf16 = self.peak_bf16_flop_s
        if dtype == "fp16":
            return self.peak_fp16_flop_s or bf16
        if dtype == "fp8":
            return self.peak_fp8_flop_s or bf16
        if dtype == "fp4":      # NVFP4 W4A4 where the part has FP4 tensor cores, else dequantised
            return self.peak_fp4_flop_s or bf16
        return bf16

    def native_math(self, dtype: str) -> bool:
        """Has the part units for this compute dtype? fp8 and fp4 need their own peak rate;
        without it the format runs weight-only at the 16-bit rate (roofline.step_cost)."""
        if dtype == "fp8":
            return self.peak_fp8_flop_s is not None
        if dtype == "fp4":
            return self.peak_fp4_flop_s is not None
        return True


@dataclass(**_FROZEN)
class ModelSpec:
    """A decoder-only transformer (or a draft head), by its shapes (MODEL.md section 1)."""

    name: str = text("name")
    display_name: str = text("display_name", default="")
    family: str = text("family", default="")
    kind: str = text("kind", default="decoder", choices=("decoder", "eagle-head", "medusa-heads"))
    num_layers: int = num("num_layers", "", 1, 10000, integer=True)
    hidden_size: int = num("hidden_size", "", 1, 1e6, integer=True)
    num_attention_heads: int = num("num_attention_heads", "", 1, 1e4, integer=True)
    num_kv_heads: int = num("num_kv_heads", "", 1, 1e4, integer=True)
    head_dim: int = num("head_dim", "", 1, 1e4, integer=True)
    intermediate_size: int = num("intermediate_size", "", 1, 1e7, integer=True,
                                 desc="dense FFN width (dense layers of an MoE)")
    vocab_size: int = num("vocab_size", "", 1, 1e7, integer=True)
    tied_embeddings: bool = flag("tied_embeddings")
    gated_ffn: bool = flag("gated_ffn", default=True, desc="SwiGLU/GeGLU: 3 FFN matrices, else 2")
    num_experts: int = num("num_experts", "", 0, 1e5, integer=True, default=0)
    experts_per_token: int = num("experts_per_token", "", 0, 1e4, integer=True, default=0)
    shared_experts: int = num("shared_experts", "", 0, 1e3, integer=True, default=0)
    moe_intermediate_size: int = num("moe_intermediate_size", "", 0, 1e7, integer=True, default=0,
                                     desc="per-expert FFN width; 0 = intermediate_size")
    first_dense_layers: int = num("first_dense_layers", "", 0, 1e4, integer=True, default=0)
    q_lora_rank: int = num("q_lora_rank", "", 0, 1e5, integer=True, default=0)
    kv_lora_rank: int = num("kv_lora_rank", "", 0, 1e5, integer=True, default=0,
                            desc="MLA latent width; > 0 means an MLA cache")
    qk_rope_head_dim: int = num("qk_rope_head_dim", "", 0, 1e4, integer=True, default=0)
    v_head_dim: int = num("v_head_dim", "", 0, 1e4, integer=True, default=0)
    medusa_heads: int = num("medusa_heads", "", 0, 64, integer=True, default=0)
    mtp_layers: int = num("mtp_layers", "", 0, 64, integer=True, default=0,
                          desc="multi-token-prediction modules shipped with the model (num_nextn_predict_layers "
                               "in its config.json): each one block of the model's kind plus its projection")
    max_context: int = num("max_context", "", 1, 1e8, integer=True, default=131072)
    params_b: float | None = num("params_b", "b", 0, 1e5, lo_open=True, default=None,
                                 desc="published total parameter count")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def cross_check(self, path):
        errs = []
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            errs.append(SpecError(path, "experts_per_token", self.experts_per_token,
                                  f"expected an integer in [1, num_experts = {self.num_experts}]"))
        if self.num_attention_heads % self.num_kv_heads and not self.kv_lora_rank:
            errs.append(SpecError(path, "num_kv_heads", self.num_kv_heads,
                                  f"must divide num_attention_heads = {self.num_attention_heads}"))
        if self.first_dense_layers > self.num_layers:
            errs.append(SpecError(path, "first_dense_layers", self.first_dense_layers,
                                  f"expected an integer in [0, num_layers = {self.num_layers}]"))
        return errs


@dataclass(**_FROZEN)
class RuntimeSpec:
    """A software stack's fixed costs (MODEL.md section 2: t_launch, t_step)."""

    name: str = text("name")
    display_name: str = text("display_name", default="")
    kernel_launch_s: float = num("kernel_launch_us", "us", 0, 1e5,
                                 desc="fixed cost per kernel (launch, tail, sync)")
    kernels_per_layer: float = num("kernels_per_layer", "", 0, 1e4,
                                   desc="kernels per dense GQA/MHA transformer layer per forward step")
    mla_extra_kernels: float = num("mla_extra_kernels", "", 0, 1e4, default=0.0,
                                   desc="kernels an MLA attention block adds to a GQA one (down/up projections, "
                                        "their norms, the absorbed batched GEMMs)")
    moe_extra_kernels: float = num("moe_extra_kernels", "", 0, 1e4, default=0.0,
                                   desc="kernels a routed-expert FFN adds to a dense one (router, top-k, "
                                        "dispatch, grouped GEMMs, combine)")
    shared_expert_kernels: float = num("shared_expert_kernels", "", 0, 1e4, default=0.0,
                                       desc="kernels of the shared experts of an MoE layer")
    step_overhead_s: float = num("step_overhead_us", "us", 0, 1e6,
                                 desc="fixed cost per forward step (sampling, host sync)")
    spec_overhead_s: float = num("spec_overhead_us", "us", 0, 1e6,
                                 desc="fixed cost per speculative iteration (accept/reject, cache fix-up)")
    ngram_draft_s: float = num("ngram_draft_us", "us", 0, 1e6, default=20e-6,
                               desc="cost of one n-gram / prompt-lookup proposal")
    memory_reserve_fraction: float = num("memory_reserve_fraction", "", 0, 1,
                                         desc="capacity kept for activations and workspace")
    sequence_overhead_s: float = num("sequence_overhead_us", "us", 0, 1e5, default=0.0,
                                     desc="cost per sequence per step (sampling over V, logits, scheduling)")
    request_overhead_s: float = num("request_overhead_us", "us", 0, 1e7, default=0.0,
                                    desc="cost per request, once, in TTFT (scheduling, tokenising, first launch)")
    roofline_p: float = num("roofline_p", "", 1, math.inf, default=math.inf,
                            desc="smooth roofline exponent: (t_c^p + t_m^p)^(1/p); inf = hard max")
    int8_stream_factor: float = num("int8_stream_factor", "", 0, 2, lo_open=True, default=1.0,
                                    desc="weight streaming of its weight-only int8 kernels, vs bf16")
    int4_stream_factor: float = num("int4_stream_factor", "", 0, 2, lo_open=True, default=1.0,
                                    desc="weight streaming of its weight-only 4-bit kernels, vs bf16")
    tree_kernels_per_layer: float = num("tree_kernels_per_layer", "", 0, 1e4, default=0.0,
                                        desc="extra kernels per target layer of a verify pass under a tree mask "
                                             "(no fused tree-attention kernel: mask, masked softmax, path gathers)")
    layer_sync_s: float = num("layer_sync_us", "us", 0, 1e6, default=0.0,
                              desc="cost per decoder layer per pass of a statically scheduled layer program "
                                   "(its synchronisation and hand-off to the next layer's cores); GPU runtimes pay "
                                   "their layer boundaries in kernel launches instead")
    draft_step_overhead_s: float = num("draft_step_overhead_us", "us", 0, 1e6, default=0.0,
                                       desc="host cost of each draft-head step (EAGLE, Hydra) and of each tree draft "
                                            "step's top-k expansion, where the runtime pays it (an eager loop)")
    decode_kv_per_query_head: float = num("decode_kv_per_query_head", "", 0, 1, default=0.0,
                                          desc="1: its decode attention kernel reads each KV head once per query "
                                               "head of its group (no GQA-aware kernel: TensorRT-LLM's masked MHA "
                                               "where XQA does not cover the model), g = h/h_kv times the bytes; "
                                               "0: once per KV head (XQA, FlashInfer, FlashAttention)")
    spec_schedule_s: float = num("spec_schedule_us", "us", 0, 1e6, default=0.0,
                                 desc="host work per speculative iteration that the serving stack does not overlap "
                                      "with the GPU (scheduling, batch and tree metadata, result processing: SGLang "
                                      "and vLLM serve speculation without their overlap schedulers); 0 = overlapped")


DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
