"""Structs of arrays the physics reads: one row per design point, SI units (MODEL.md section 0)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


def _as_arrays(obj, int_fields=(), bool_fields=(), n: int = 1) -> int:
    """Broadcast every array field of a frozen dataclass to one length n; return n."""
    values = {}
    for name in _field_names(type(obj)):
        v = getattr(obj, name)
        if not isinstance(v, HardwareArrays):
            values[name] = np.asarray(v)
    n = max([n] + [v.size for v in values.values() if v.ndim])
    for name, v in values.items():
        dtype = np.bool_ if name in bool_fields else np.int64 if name in int_fields else np.float64
        if v.ndim == 0:         # n > 1: a read-only view of one value, no n-long copy of a constant
            v = np.array((v,), dtype=dtype) if n == 1 else np.broadcast_to(v.astype(dtype), (n,))
        elif v.ndim != 1 or v.size != n:
            raise ValueError(f"{type(obj).__name__}.{name}: expected shape ({n},), got {v.shape}")
        elif v.dtype != dtype:
            v = v.astype(dtype)
        object.__setattr__(obj, name, v)
    return n


def _take(v: np.ndarray, idx) -> np.ndarray:
    """v[idx]; a column that is one value broadcast (stride 0, as _as_arrays makes constants) stays a
    read-only broadcast of that value rather than becoming a copy of it per selected row."""
    if v.ndim != 1 or v.strides != (0,) or not v.size or isinstance(idx, slice):
        return v[idx]           # (a slice of a broadcast is a broadcast already)
    idx = np.asarray(idx)
    shape = (int(np.count_nonzero(idx)),) if idx.dtype == bool else idx.shape
    return np.broadcast_to(v[:1].reshape(()), shape)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


@dataclass(frozen=True, slots=True)
class HardwareArrays:
    """A device group (``chips`` chips in tensor parallel) with its runtime, per design.

    Per-chip quantities: capacity_bytes (bytes as vendors mean them: binary for DRAM),
    mem_bw_bytes_s, peak_flop_s (at the weight dtype), peak_attention_flop_s (at the
    attention dtype), link_bw_bytes_s (both directions added), link_latency_s; the scale-up link
    joins scale_up_domain chips, beyond which collectives cross the scale-out network
    (scale_out_bw_bytes_s per chip, both directions; its latency per step and efficiency).
    weight_math_native / attention_math_native are False where the part has no units for the
    format's compute dtype (fp8 on an A100): it then runs weight-only, 16-bit math at the 16-bit
    efficiency. Fixed costs come from the runtime: kernel_launch_s per kernel, kernels_per_layer
    per dense GQA layer plus mla_extra_kernels per MLA layer, moe_extra_kernels per routed-MoE
    layer and shared_expert_kernels where it has shared experts, step_overhead_s per step,
    spec_overhead_s per speculative iteration, ngram_draft_s per n-gram / retrieval lookup on
    the host. A retrieval draft (REST, prompt lookup) copies its tree to the device each
    iteration: host_copy_s + bytes / host_link_bw_bytes_s. Defaults are ESTIMATES: 10 us for a
    small pinned host-to-device copy (launch + completion), 25 GB/s for PCIe 4.0 x16 one way.
    Energy constants per chip (J per byte, per FLOP, W while busy, the power limit) feed the energy
    per token.
    """

    chips: np.ndarray
    capacity_bytes: np.ndarray
    mem_bw_bytes_s: np.ndarray
    peak_flop_s: np.ndarray
    mem_efficiency: np.ndarray
    compute_efficiency: np.ndarray
    link_bw_bytes_s: np.ndarray
    link_latency_s: np.ndarray
    kernel_launch_s: np.ndarray
    kernels_per_layer: np.ndarray
    step_overhead_s: np.ndarray
    spec_overhead_s: np.ndarray
    ngram_draft_s: np.ndarray
    memory_reserve_fraction: np.ndarray
    host_copy_s: np.ndarray = 10e-6
    host_link_bw_bytes_s: np.ndarray = 25e9
    # Serving costs and kernel shape (MODEL.md section 2). The defaults are the idealised
    # values (hard-max roofline, links at full rate, no per-sequence or per-request cost);
    # the database's runtimes and devices set the real ones.
    link_efficiency: np.ndarray = 1.0          # eta_link: all-reduce bus bandwidth / one-way link rate
    link_ll_efficiency: np.ndarray = np.nan    # the low-latency protocol's eta (NaN: link_efficiency, one protocol)
    link_bulk_latency_s: np.ndarray = np.nan   # the bandwidth protocol's seconds a step (NaN: link_latency_s)
    sequence_overhead_s: np.ndarray = 0.0      # per sequence per step (sampling over V, logits, scheduling)
    request_overhead_s: np.ndarray = 0.0       # per request, once, in TTFT
    roofline_p: np.ndarray = np.inf            # smooth roofline exponent; inf = hard max
    peak_attention_flop_s: np.ndarray = 0.0    # attention matmuls at the attention dtype; 0 = peak_flop_s
    int8_stream_factor: np.ndarray = 1.0       # the runtime's weight-only int8 kernels, vs bf16 streaming
    int4_stream_factor: np.ndarray = 1.0       # the runtime's weight-only 4-bit kernels, vs bf16 streaming
    mla_extra_kernels: np.ndarray = 0.0        # kernels by layer architecture (roofline.kernels_per_step)
    moe_extra_kernels: np.ndarray = 0.0
    shared_expert_kernels: np.ndarray = 0.0
    weight_math_native: np.ndarray = True      # False: no units for the format's math (weight-only, 16-bit)
    attention_math_native: np.ndarray = True   # the same for attention at the KV dtype
    scale_up_domain: np.ndarray = np.inf       # chips one scale-up link joins; inf = no limit
    scale_out_bw_bytes_s: np.ndarray = 0.0     # per chip between domains, both directions added
    scale_out_latency_s: np.ndarray = 0.0
    scale_out_efficiency: np.ndarray = 1.0
    tree_kernels_per_layer: np.ndarray = 0.0   # extra kernels per layer of a tree-masked verify pass
    draft_step_overhead_s: np.ndarray = 0.0    # host cost per draft-head step / tree draft step (eager loops)
    decode_kv_per_query_head: np.ndarray = 0.0  # 1: decode attention reads the KV once per query head (h/h_kv x)
    spec_schedule_s: np.ndarray = 0.0          # host work per speculative iteration not overlapped with the GPU
    # Energy (MODEL.md section 5; technology.known_part_energy, evaluation.chip_group): NaN = unknown,
    # and then every energy metric is NaN
    mem_j_per_byte: np.ndarray = np.nan        # a byte moved from the chip's memory (DRAM, or SRAM for SRAM-only chips)
    j_per_flop: np.ndarray = np.nan            # a linear-layer FLOP at the weight format's compute dtype
    attention_j_per_flop: np.ndarray = np.nan  # an attention FLOP at the KV dtype
    link_j_per_byte: np.ndarray = np.nan       # a byte sent over the scale-up (or draft-chip) link
    idle_w: np.ndarray = np.nan                # what a chip burns while busy, whatever it computes, W
    power_limit_w: np.ndarray = np.inf         # provisioned power per chip: the most it draws (energy is capped at it)
    # Pipelines (MODEL.md sections 7-8; dse.model.pipeline): ``chips`` is the tensor-parallel group of
    # one stage and ``pp`` stages of consecutive layers run one after the other (chips x pp in all);
    # on a part whose weights live in its own SRAM (``layer_regions``) each layer runs on the region
    # of the chip that holds it, a share of its bandwidth and FLOP/s, with a fabric hop to the next
    # region (region_hop_s) and a die-to-die hop where it crosses one of its ``dies``
    pp: np.ndarray = 1
    layer_regions: np.ndarray = False
    dies: np.ndarray = 1.0
    region_hop_s: np.ndarray = 0.0
    die_hop_s: np.ndarray = 0.0
    layer_sync_s: np.ndarray = 0.0             # the runtime's cost per layer per pass (a static layer program's sync)

    def __post_init__(self):
        _as_arrays(self, int_fields=("chips", "pp"),
                   bool_fields=("weight_math_native", "attention_math_native", "layer_regions"))

    @property
    def n(self) -> int:
        return self.chips.size

    def take(self, idx) -> HardwareArrays:
        return HardwareArrays(**{name: _take(getattr(self, name), idx) for name in _field_names(HardwareArrays)})


@dataclass(frozen=True, slots=True)
class DesignBatch:
    """Everything that may vary per design: the target group, the optional draft chip group,
    the link between them, and the workload sizes. ``k == 0`` means choose k per design;
    ``tree_nodes > 0`` verifies a token tree of that many nodes (depth <= k) instead of the
    workload's (Workload.tree_nodes, used where this is 0)."""

    target: HardwareArrays
    draft: HardwareArrays            # used where draft_on_chip; ignored elsewhere
    draft_on_chip: np.ndarray        # bool
    draft_link_bw_bytes_s: np.ndarray
    draft_link_latency_s: np.ndarray
    batch: np.ndarray                # sequences decoded together, B
    prompt_tokens: np.ndarray        # P
    output_tokens: np.ndarray        # G
    k: np.ndarray                    # drafted tokens per iteration (tree depth); 0 = auto
    tree_nodes: np.ndarray = 0       # nodes of the draft tree; 0 = the workload's
    ep: np.ndarray = 0               # expert-parallel ranks of an MoE target; 0 = the workload's
    dp: np.ndarray = 0               # attention data-parallel ranks of an MoE target; 0 = the workload's

    def __post_init__(self):
        n = _as_arrays(self, int_fields=("batch", "prompt_tokens", "output_tokens", "k", "tree_nodes", "ep", "dp"),
                       bool_fields=("draft_on_chip",), n=max(self.target.n, self.draft.n))
        for name in ("target", "draft"):
            hw = getattr(self, name)
            if hw.n == 1 and n > 1:
                object.__setattr__(self, name, hw.take(np.zeros(n, dtype=np.int64)))
            elif hw.n != n:
                raise ValueError(f"DesignBatch.{name}: {hw.n} rows, expected {n}")

    @property
    def n(self) -> int:
        return self.batch.size

    def take(self, idx) -> DesignBatch:
        """Rows ``idx`` as a new DesignBatch (a shared target/draft group stays shared)."""
        target = self.target.take(idx)
        draft = target if self.draft is self.target else self.draft.take(idx)
        return DesignBatch(target=target, draft=draft, **{
            name: _take(getattr(self, name), idx) for name in _field_names(DesignBatch) if name not in ("target", "draft")})
