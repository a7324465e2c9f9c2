"""One forward step on one device group, as a roofline with fixed costs (MODEL.md section 2)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..catalog.specs import ModelSpec
from . import pipeline, routing
from . import transformer as tf
from .gemm import RECIPES, smooth_roofline
from .work import COUNTS

#: bound codes (the edges turn them into "memory", "compute", "overhead")
MEMORY, COMPUTE, OVERHEAD = 0, 1, 2
BOUND_NAMES = np.array(["memory", "compute", "overhead"])


class StepCost(NamedTuple):
    """Seconds, FLOPs and bytes of one step, per chip of the group; arrays broadcast together."""

    time_s: np.ndarray
    flops: np.ndarray        # per chip
    bytes: np.ndarray        # per chip (weights + KV)
    t_memory_s: np.ndarray   # parts bound by bandwidth
    t_compute_s: np.ndarray  # parts bound by FLOP/s
    t_overhead_s: np.ndarray  # launches, step cost, all-reduces
    t_fixed_s: np.ndarray = 0.0  # the software's share of t_overhead_s: launches, per-step, per-sequence
    energy_j: np.ndarray = 0.0  # the whole group's energy of memory bytes and link bytes, J
    group_flops_lin: np.ndarray = 0.0  # the whole group's linear FLOPs (x J/FLOP: energy_per_token's)
    group_flops_att: np.ndarray = 0.0  # the whole group's attention FLOPs

    @property
    def arithmetic_intensity(self):
        """FLOP per byte moved, F / bytes (MODEL.md section 3, 'Arithmetic intensity')."""
        return self.flops / self.bytes

    @property
    def bound(self):
        """0 memory, 1 compute, 2 overhead: whichever share of the step time is largest (np.argmax
        over the three: the first largest, or the first NaN), without stacking them."""
        m, c, o = self.t_memory_s, self.t_compute_s, self.t_overhead_s
        code = np.where(o > np.maximum(m, c), OVERHEAD, np.where(c > m, COMPUTE, MEMORY))
        m_nan, c_nan, o_nan = np.isnan(m), np.isnan(c), np.isnan(o)
        if (m_nan | c_nan | o_nan).any():
            code = np.where(m_nan, MEMORY, np.where(c_nan, COMPUTE, np.where(o_nan, OVERHEAD, code)))
        return code


def allreduce_time_s(nbytes, chips, link_bw_bytes_s, link_latency_s, link_efficiency=1.0):
    """Ring all-reduce of ``nbytes`` over t chips:
    2(t-1)/t * bytes / (eta_link * link_bw/2) + 2(t-1)*lat.

    MODEL.md section 2. link_bw is both directions added (vendor convention), and a ring
    sends one way per neighbour, hence link_bw/2; eta_link is the bus bandwidth a large
    all-reduce reaches of that one-way rate (the naive sum of all links at 100% is
    eta_link = 1). Small messages are latency-bound through the 2(t-1) steps. Zero for t = 1.
    """
    t = np.asarray(chips, dtype=np.float64)
    if not (t > 1).any():               # lone chips (a draft chip, most single-device designs)
        return np.zeros(np.broadcast(t, nbytes, link_bw_bytes_s, link_latency_s).shape)
    bw = 0.5 * link_bw_bytes_s * link_efficiency
    with np.errstate(divide="ignore", invalid="ignore"):
        ring = 2.0 * (t - 1.0) / t * nbytes / bw + 2.0 * (t - 1.0) * link_latency_s
    return np.where(t > 1, ring, 0.0)


def protocol_allreduce_time_s(nbytes, chips, link_bw_bytes_s, link_latency_s, link_efficiency=1.0,
                              ll_efficiency=np.nan, bulk_latency_s=np.nan):
    """A ring all-reduce (``allreduce_time_s``) by whichever of two protocols is faster at the message
    size: min(ring(lat, eta_LL), ring(lat_bulk, eta)). NCCL times every (algorithm, protocol) pair by its
    own model and runs the fastest (src/graph/tuning.cc, enqueue.cc): its LL protocol sends 8-byte words
    each carrying its own flag (no fence, a few hops' latency, a fraction of the line rate), Simple
    fences whole chunks (the full rate, a larger latency a step); TensorRT-LLM's and vLLM's custom
    all-reduces switch from a one-shot to a two-shot kernel the same way. A small message (a decode
    step of a few rows) pays lat a step, a medium one (tens to hundreds of rows: 0.5-4 MB) the LL
    protocol's low rate, a large one (a prefill) lat_bulk and the full rate. NaN (the default, a class
    with one protocol): eta_LL = eta, lat_bulk = lat, the plain ring."""
    ll = np.where(np.isnan(ll_efficiency), link_efficiency, ll_efficiency)
    bulk = np.where(np.isnan(bulk_latency_s), link_latency_s, bulk_latency_s)
    return np.minimum(allreduce_time_s(nbytes, chips, link_bw_bytes_s, link_latency_s, ll),
                      allreduce_time_s(nbytes, chips, link_bw_bytes_s, bulk, link_efficiency))


def tree_allreduce_time_s(nbytes, chips, link_bw_bytes_s, link_latency_s, link_efficiency=1.0):
    """Double-binary-tree all-reduce of ``nbytes`` over n ranks (NCCL's tree between nodes):
    2 x bytes / (eta_link * link_bw/2) + 2 floor(log2 n) * lat.

    A reduce up a binary tree and a broadcast down it, each floor(log2 n) hops deep, pipelined;
    the two complementary trees each carry half the data, so every rank sends and receives
    2 x bytes one way (a ring: 2(n-1)/n x bytes), at the latency of 2 log2 n hops instead of the
    ring's 2(n-1) (Sanders, Speck and Traeff 2009, "Two-tree algorithms for full bandwidth
    broadcast, reduction and scan", Parallel Computing 35(12); NCCL src/graph/tuning.cc: tree
    latency 2 x log2i(nNodes) x the network hop, algorithm bandwidth half the bus bandwidth).
    Zero for n = 1."""
    n = np.asarray(chips, dtype=np.float64)
    bw = 0.5 * link_bw_bytes_s * link_efficiency
    with np.errstate(divide="ignore", invalid="ignore"):
        depth = np.floor(np.log2(np.maximum(n, 1.0)))
        tree = 2.0 * nbytes / bw + 2.0 * depth * link_latency_s
    return np.where(n > 1, tree, 0.0)


def group_allreduce_time_s(nbytes, hw, chips=None):
    """All-reduce of ``nbytes`` over ``chips`` (default hw.chips) chips of the group ``hw``:
    a ring over the scale-up link (protocol_allreduce_time_s: the faster of its two protocols) within
    one scale-up domain of D =
    hw.scale_up_domain chips; beyond it, hierarchical, as NCCL runs it across nodes:
    reduce-scatter and all-gather among the d = D chips of each domain over the scale-up link
    (together one ring all-reduce of the d chips) and, between them, an all-reduce of each
    chip's 1/d shard over the n = t/d domains on the scale-out network, each chip over its own
    NIC, by whichever of a ring and a double binary tree is faster at that size (NCCL picks the
    algorithm its model says is fastest, src/graph/tuning.cc and enqueue.cc; a tree's 2 log2 n
    network hops win for the small messages of a decode step, a ring's lesser traffic for large
    ones): ring(bytes, d, scale-up) + min(ring, tree)(bytes/d, n, scale-out). Within a domain
    NCCL's tree is a chain with the ring's 2(d-1) hops and twice its traffic, so a ring stays.
    A group with no scale-out network (bandwidth 0) takes infinite time there (studies mark it
    not buildable, dse eval refuses it)."""
    t = hw.chips if chips is None else chips
    up = (hw.link_bw_bytes_s, hw.link_latency_s, hw.link_efficiency,
          getattr(hw, "link_ll_efficiency", np.nan), getattr(hw, "link_bulk_latency_s", np.nan))
    flat = protocol_allreduce_time_s(nbytes, t, *up)
    dom = getattr(hw, "scale_up_domain", None)
    if dom is None:
        return flat
    t = np.asarray(t, dtype=np.float64)
    beyond = t > dom
    if not beyond.any():
        return flat
    d = np.minimum(t, dom)
    out = (hw.scale_out_bw_bytes_s, hw.scale_out_latency_s, hw.scale_out_efficiency)
    with np.errstate(divide="ignore", invalid="ignore"):
        shard, n = np.asarray(nbytes, dtype=np.float64) / d, t / d
        inter = np.fmin(allreduce_time_s(shard, n, *out), tree_allreduce_time_s(shard, n, *out))
    return np.where(beyond, protocol_allreduce_time_s(nbytes, d, *up) + inter, flat)


def alltoall_time_s(nbytes, ranks, link_bw_bytes_s, link_latency_s, link_efficiency=1.0):
    """Pairwise-exchange all-to-all of ``nbytes`` per rank (the whole of what one rank sends,
    1/E of it to each rank, itself included) over E ranks: (E-1)/E * bytes / (eta_link *
    link_bw/2) + (E-1)*lat (Thakur, Rabenseifner and Gropp 2005, "Optimization of collective
    communication operations in MPICH", IJHPCA 19(1), section 4.4: p-1 steps, each sending
    n/p). One direction; a dispatch and a combine are two of them. Zero for E = 1."""
    e = np.asarray(ranks, dtype=np.float64)
    bw = 0.5 * link_bw_bytes_s * link_efficiency
    with np.errstate(divide="ignore", invalid="ignore"):
        a2a = (e - 1.0) / e * nbytes / bw + (e - 1.0) * link_latency_s
    return np.where(e > 1, a2a, 0.0)


def group_alltoall_time_s(nbytes, ranks, hw):
    """alltoall_time_s over E = ``ranks`` ranks of the t chips of ``hw`` (t/E chips each): within
    one scale-up domain, over the scale-up link; when the ranks span n = t/D domains, each
    domain holds r = E/n of them and the pairwise exchange's E-1 steps (each sending bytes/E)
    are r-1 over the scale-up link and E-r over the scale-out network:
    (r-1)/E * bytes/(eta*bw/2) + (r-1)*lat + (E-r)/E * bytes/(eta_out*bw_out/2) + (E-r)*lat_out."""
    e = np.asarray(ranks, dtype=np.float64)
    t = np.asarray(hw.chips, dtype=np.float64)
    up = (hw.link_bw_bytes_s, hw.link_latency_s, hw.link_efficiency)
    dom = np.asarray(getattr(hw, "scale_up_domain", np.inf), dtype=np.float64)
    flat = alltoall_time_s(nbytes, e, *up)
    beyond = t > dom
    if not beyond.any():
        return flat
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.clip(e * np.minimum(t, dom) / t, 1.0, e)          # ranks per domain
        n = np.asarray(nbytes, dtype=np.float64) / e             # what one step sends
        within = (r - 1.0) * (n / (0.5 * hw.link_bw_bytes_s * hw.link_efficiency) + hw.link_latency_s)
        across = (e - r) * (n / (0.5 * hw.scale_out_bw_bytes_s * hw.scale_out_efficiency) + hw.scale_out_latency_s)
        split = np.where(r > 1.0, within, 0.0) + np.where(e > r, across, 0.0)
    return np.where(beyond & (e > 1), split, flat)


def expert_ranks(m: ModelSpec, ep, chips) -> np.ndarray:
    """Expert-parallel ranks E of a step: 1 for a dense model or ep <= 1; inputs are checked
    (workload.check_ep), and a group whose t the workload's E does not divide (the report's known
    parts at other chip counts) takes E = gcd(E, t)."""
    E = np.asarray(ep, dtype=np.float64)
    if not m.is_moe or np.all(E <= 1):
        return np.float64(1.0)
    return np.gcd(np.maximum(E, 1.0).astype(np.int64), np.asarray(chips).astype(np.int64)).astype(np.float64)


def communication_time_s(m: ModelSpec, hw, tokens, act_bytes: float, layers: int, ep=1):
    """Collectives of one step over ``tokens`` = B*q tokens (MODEL.md section 2): the time of
    ``collectives``."""
    return collectives(m, hw, tokens, act_bytes, layers, ep)[0]


def collectives(m: ModelSpec, hw, tokens, act_bytes: float, layers: int, ep=1, dp=None):
    """(seconds, bytes the group sends over its links) of one step's collectives over ``tokens``
    = B*q tokens (MODEL.md section 2).

    Tensor parallel (ep = 1): 2 all-reduces of T*d*b_act per layer (after attention and after
    the FFN), rings within a scale-up domain, hierarchical beyond it (group_allreduce_time_s: a ring or a
    tree between domains, whichever is faster). Expert parallel over E ranks (ep = E > 1, MoE only; E divides t):
    attention, the dense FFN layers and the shared experts stay tensor-parallel over the t chips
    (one all-reduce after attention in every layer, one after the FFN of each dense layer and,
    where the model has shared experts, one for their partial sums in each MoE layer); the routed
    experts replace the FFN all-reduce by an all-to-all dispatch and combine (DeepSeek-V3, arXiv
    2412.19437 section 3.4; vLLM --enable-expert-parallel). The all-to-all waits for the busiest
    rank, which receives the E[max_r C_r] token copies of the T tokens' k (routing.busiest_rank;
    the mean rank's share is T*k/E), so C_max*d*b_act bytes each way (``group_alltoall_time_s``).
    With E < t each expert is further split over the t/E chips of its rank (Megatron-Core's expert
    tensor parallel), whose partial sums of those copies are all-reduced among the t/E chips.
    Bytes (for energy) are what all chips send: an all-reduce of n bytes over t chips 2(t-1)*n
    (a ring, or the hierarchical one: the same traffic; a tree between domains sends each shard
    2 x instead of 2(n-1)/n x, not counted: a decode step's few KB), an all-to-all of n bytes per rank
    (E-1)/E*n per rank, at the mean rank's share.

    Attention data parallel over ``dp`` = D ranks (None: 1): attention, the dense FFN layers and the
    shared experts run tensor-parallel within each rank's t/D chips on its T/D tokens, so their
    all-reduces are of T*d*b_act/D over t/D chips; the routed experts' collectives are the same (all
    T tokens). Without expert parallel the experts stay tensor-parallel over all t chips: their
    all-reduce (an all-gather of the ranks' tokens and a reduce-scatter) is over t chips as before.
    """
    t = np.asarray(hw.chips, dtype=np.float64)
    T = np.asarray(tokens, dtype=np.float64)
    if not (t > 1).any():                   # lone chips: no collective at all (and no expert ranks)
        return np.zeros(np.broadcast(t, T, hw.link_bw_bytes_s, hw.link_latency_s).shape), np.float64(0.0)
    d = m.hidden_size
    n_ar = T * d * act_bytes
    ar = group_allreduce_time_s(n_ar, hw)
    ar_bytes = 2.0 * np.maximum(t - 1.0, 0.0) * n_ar
    if dp is None:          # attention's all-reduce: over the group, or within a data-parallel rank
        ar_a, ar_a_bytes = ar, ar_bytes
    else:
        ta = t / dp
        ar_a = group_allreduce_time_s(n_ar / dp, hw, ta)
        ar_a_bytes = 2.0 * np.maximum(ta - 1.0, 0.0) * n_ar      # D ranks of t/D chips, T/D tokens each
    tp = layers * (ar_a + ar), layers * (ar_a_bytes + ar_bytes)
    E = expert_ranks(m, ep, t)
    if not (E > 1).any():
        return tp
    dense = min(tf.layer_counts(m)[0], layers)
    moe = layers - dense
    c_max = routing.busiest_rank(m.num_experts, m.experts_per_token, E, T)[1]
    busiest = c_max * d * act_bytes                            # bytes the busiest rank receives
    mean = T * m.experts_per_token * d * act_bytes / E         # bytes one rank dispatches on average
    inner = t / E
    per_moe = (2.0 * group_alltoall_time_s(busiest, E, hw) + group_allreduce_time_s(busiest, hw, inner)
               + (ar_a if m.shared_experts else 0.0))
    per_moe_bytes = (2.0 * (E - 1.0) * mean + E * 2.0 * np.maximum(inner - 1.0, 0.0) * mean
                     + (ar_a_bytes if m.shared_experts else 0.0))
    return (np.where(E > 1, (layers + dense) * ar_a + moe * per_moe, tp[0]),
            np.where(E > 1, (layers + dense) * ar_a_bytes + moe * per_moe_bytes, tp[1]))


def kernels_per_step(m: ModelSpec, hw, layers: int | None = None):
    """Kernels one forward step launches over ``layers`` layers, by the layers' architecture:
    L * kernels_per_layer (a dense GQA/MHA layer) + L * mla_extra_kernels (MLA attention) +
    L_moe * (moe_extra_kernels + shared_expert_kernels where the model has shared experts).
    The counts belong to the runtime (hardware_db/runtimes/); a group without the extra fields
    counts every layer as a dense one."""
    L = m.num_layers if layers is None else layers
    moe = L - min(tf.layer_counts(m)[0], L)
    k = L * hw.kernels_per_layer
    if m.kv_lora_rank:
        k = k + L * getattr(hw, "mla_extra_kernels", 0.0)
    if moe:
        extra = getattr(hw, "moe_extra_kernels", 0.0)
        if m.shared_experts:
            extra = extra + getattr(hw, "shared_expert_kernels", 0.0)
        k = k + moe * extra
    return k


def stream_factor(hw, dequant: str):
    """Fraction of the bf16 weight-streaming rate a runtime's weight-only kernels reach:
    hw.int8_stream_factor / hw.int4_stream_factor for "int8" / "int4", 1 otherwise."""
    if dequant == "int8":
        return hw.int8_stream_factor
    if dequant == "int4":
        return hw.int4_stream_factor
    return 1.0


def step_cost(m: ModelSpec, hw, **kw) -> StepCost:
    """One step of B sequences, q tokens each, on the group ``hw`` (``pass_cost``'s arguments): one
    roofline pass, or across pipeline stages and a chip's layer regions (pipeline.pipelined_step)."""
    if pipeline.is_pipelined(hw):
        return pipeline.pipelined_step(pass_cost, m, hw, **kw)
    return pass_cost(m, hw, **kw)


def pass_cost(m: ModelSpec, hw, *, batch, q, context, weight_bytes: float, kv_bytes: float,
              act_bytes: float = 2.0, layers: int | None = None, lm_head: bool = True,
              lm_head_last_only: bool = False,
              step_overhead: bool = True, weight_bw_factor=None, weight_dequant: str = "",
              linear_compute_factor: float = 1.0, attention_compute_factor: float = 1.0,
              head_bytes: float | None = None, prefill_tokens=0.0, prefill_len=0.0,
              tree_mask=False, ep=1, dp=1, weight_emulated_dequant: str = "", weight_recipe: str = "",
              energy: bool = True) -> StepCost:
    """step(model, device, B, q, S): B sequences, q new tokens each, S tokens cached.

    Linear: F = 2*N_active*B*q (+ LM head at every position, or at the last one only for a
    prefill, ``lm_head_last_only``), bytes = weights touched, the LM head at ``head_bytes``
    per weight (16-bit in AWQ/GPTQ/fp8 checkpoints; None = ``weight_bytes``).
    Attention: bytes = B*L*(S+q)*kv_per_token (read the cache, write the new tokens), times
    ``transformer.decode_kv_reads`` outside a prefill (a runtime without a GQA-aware decode kernel),
    F = 4*h*d_h*L * B*q*(S + (q+1)/2) (causal: the i-th new token sees S+i tokens); with a
    ``tree_mask`` (verifying a token tree) every position reads the context once plus the
    tree's own q keys under the mask, F = 4*h*d_h*L * B*q*(S + q) (MODEL.md section 3).
    Each part: (t_c^p + t_m^p)^(1/p) with t_c = F/(P*eta_c*factor), t_m = bytes/(BW*eta_m)
    (``smooth_roofline``; p = inf is the hard max); parts add. Linear FLOPs run at
    peak_flop_s (the weight dtype) times ``linear_compute_factor``, attention FLOPs at
    peak_attention_flop_s (the attention dtype) times ``attention_compute_factor``; weight
    bytes stream at BW*eta_m*f, f = ``weight_bw_factor`` or, when None, the runtime's streaming
    factor for the format's dequantisation class ``weight_dequant`` (``stream_factor``). On a
    part without units for the format's math (hw.weight_math_native False: fp8 on an A100) the
    format runs weight-only: its bytes, 16-bit math (the 16-bit efficiency, factor 1) and the
    streaming factor of ``weight_emulated_dequant`` (fp8: the int8 class); attention at a KV
    dtype the part cannot compute in (hw.attention_math_native False) runs at factor 1 too.
    An fp8 W8A8 format's scaling recipe ``weight_recipe`` (gemm.RECIPES: "tensor", "block") streams
    its layers' weights (not the 16-bit head) at its ``stream`` factor where the part runs the format
    natively (its compute factor is in ``linear_compute_factor``: transformer.step_kwargs).
    Fixed: kernels_per_step*t_launch + t_step + B*t_seq (per-sequence sampling, logits,
    scheduling), reported apart as t_fixed_s; a tree-masked pass adds
    L*tree_kernels_per_layer*t_launch (the runtime's unfused tree attention).
    Tensor parallel over t chips (MODEL.md section 2): weights and FLOPs divide by t except
    the replicated ones (MLA down-projections, MoE router: transformer.replicated_params);
    the KV cache divides by min(t, h_kv) (MLA: replicated); 2 all-reduces of B*q*d*b_act
    bytes per layer, or with expert parallel ``ep`` = E > 1 on an MoE model, all-to-alls for the
    routed experts (``collectives``). Each of the E expert ranks holds N/E experts, split over
    its t/E chips; the step waits for the busiest rank, which reads the E[max_r D_r] distinct
    experts its tokens hit and multiplies E[max_r C_r] token copies (routing.busiest_rank, uniform
    routing), where the mean rank reads (N/E)*(1-(1-k/N)^T) experts (MODEL.md section 1) and
    takes T*k/E copies, what tensor parallel reads per chip. Bytes and FLOPs are the busiest
    chip's (they set the time). ``hw`` is any object with the HardwareArrays attributes (1-D, or
    2-D columns for k sweeps).

    Attention data parallel over ``dp`` = D ranks (an MoE target, DeepSeek-class serving: SGLang
    --enable-dp-attention, TensorRT-LLM attention DP): each rank runs attention, the dense FFN layers,
    the shared experts and the LM head tensor-parallel over its t/D chips for its B/D sequences, so
    those weights are whole on every rank (t/D, not t, shares of them) and a chip holds its rank's
    cache, B/D sequences over min(t/D, h_kv) (MLA: its rank's latents only, not every sequence's);
    the routed experts keep their expert (or tensor) parallel over all t chips and all tokens.

    Energy (MODEL.md section 5), the whole group's at the mean expert rank (what all ranks move
    together): ``energy_j`` = every chip's bytes from memory x hw.mem_j_per_byte + the bytes its
    collectives send x hw.link_j_per_byte; its FLOPs apart, ``group_flops_lin`` and
    ``group_flops_att`` (latency.energy_metrics prices them per design, at the design's J/FLOP,
    and adds busy power for the iteration's time, capped at the power limit). NaN where ``hw`` has
    no energy constants; not computed without ``energy``.

    Continuous batching (MODEL.md section 2, serving): ``prefill_tokens`` x per sequence ride
    along in the same weight pass: the prompts (``prefill_len`` P tokens each) of the B*x/P
    requests that arrive per step. They add B*x tokens to the linear layers (no logits),
    B*x*(P+1)/2 causal query-key pairs to attention and B*x tokens of KV writes.
    """
    L = m.num_layers if layers is None else layers
    B = np.asarray(batch, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    COUNTS["steps"] += 1
    COUNTS["rows"] += max(B.size, q.size)
    S = np.asarray(context, dtype=np.float64)
    t = np.asarray(hw.chips, dtype=np.float64)     # once (per_chip, kv_shards and divisions by t take it as is)
    T = B * q
    px = np.asarray(prefill_tokens, dtype=np.float64)
    ride = bool(px.any())                 # prefill tokens riding along (continuous batching); else no X terms
    X = B * px if ride else 0.0
    TX = T + X if ride else T
    rep = tf.replicated_params(m, L)
    hb = weight_bytes if head_bytes is None else head_bytes
    head = tf.lm_head_params(m) if lm_head else 0
    if m.is_moe:
        touched = tf.weight_params_touched(m, TX, L, lm_head) - head
    else:               # a dense step streams every weight whatever its tokens: one number (exact: an integer)
        touched = float(tf.weight_params_touched(m, 0.0, L, lm_head) - head)
    dpa = np.asarray(dp, dtype=np.float64)
    dpa = dpa if (dpa > 1).any() else None          # attention data parallel (else the plain path, bit for bit)
    lin = tf.linear_flops_per_token(m, L, lm_head and not lm_head_last_only) * T
    lin_all = lin + tf.linear_flops_per_token(m, L, False) * X if ride else lin
    if dpa is None:
        bytes_lin = tf.per_chip(touched, rep, t) * weight_bytes + head * hb / t
        flops_lin = tf.per_chip(lin_all, 2.0 * rep * TX, t)
    else:       # the weights outside the routed experts whole on each rank's t/D chips, its T/D tokens
        ta = t / dpa
        own = float(tf.weight_params_touched(m, 0.0, L, False))
        bytes_lin = (tf.per_chip(own, rep, ta) + (touched - own) / t) * weight_bytes + head * hb / ta
        flops_lin = (lin_all - 2.0 * rep * TX) / t + 2.0 * rep * TX / dpa
    if lm_head and lm_head_last_only:      # prefill: logits of the last prompt position only
        flops_lin = flops_lin + 2.0 * tf.lm_head_params(m) * B / t
    busy = _busiest_expert_rank(m, L, TX, ep, t)                    # None without expert parallel
    kv_tok = L * tf.kv_elems_per_token_per_layer(m) * kv_bytes
    reads = 1.0 if lm_head_last_only else tf.decode_kv_reads(m, t if dpa is None else t / dpa,
                                                             getattr(hw, "decode_kv_per_query_head", 0.0))
    bytes_att = ((B * (S + q) * reads + X) if ride else B * (S + q) * reads) * kv_tok / (
        tf.kv_shards(m, t) if dpa is None else dpa * tf.kv_shards(m, t / dpa))   # a rank: its B/D sequences
    tree = tree_mask is not False and bool(np.any(tree_mask))
    own = np.where(tree_mask, q, 0.5 * (q + 1.0)) if tree else 0.5 * (q + 1.0)
    # a prefill (logits of the last position only) runs MLA in its non-absorbed form
    att = tf.attention_flops_per_token_per_ctx(m, L, absorbed=not lm_head_last_only) * T * (S + own)
    if ride:
        att = att + tf.attention_flops_per_token_per_ctx(m, L, absorbed=False) * X * 0.5 * (prefill_len + 1.0)
    flops_att = att / t
    eff_c = hw.compute_efficiency
    peak_att = np.where(hw.peak_attention_flop_s > 0, hw.peak_attention_flop_s, hw.peak_flop_s)
    byte_s = hw.mem_bw_bytes_s * hw.mem_efficiency
    # weight-only on parts without the format's units (only a format with its own math can lack them)
    native_w = getattr(hw, "weight_math_native", None) if weight_emulated_dequant else None
    all_w = native_w is None or bool(native_w.all())
    if not all_w:
        linear_compute_factor = np.where(native_w, linear_compute_factor, 1.0)
    if not (isinstance(attention_compute_factor, float) and attention_compute_factor == 1.0):
        native_a = getattr(hw, "attention_math_native", None)
        if native_a is not None and not native_a.all():
            attention_compute_factor = np.where(native_a, attention_compute_factor, 1.0)
    # the busiest expert rank's weights and FLOPs set the time; the mean rank's, the energy
    flops_busy, bytes_busy = (flops_lin, bytes_lin) if busy is None else (flops_lin + busy[1],
                                                                           bytes_lin + busy[0] * weight_bytes)
    lin_c = flops_busy / _times(hw.peak_flop_s * eff_c, linear_compute_factor)
    if weight_bw_factor is not None:
        wf = weight_bw_factor
    elif all_w:
        wf = stream_factor(hw, weight_dequant)
    else:
        wf = np.where(native_w, stream_factor(hw, weight_dequant), stream_factor(hw, weight_emulated_dequant))
    lin_m = bytes_busy / _times(byte_s, wf)
    recipe = RECIPES[weight_recipe]
    if recipe.stream != 1.0:    # the fp8 layers stream at the recipe's rate; the 16-bit head does not
        head_part = head * hb / (t if dpa is None else t / dpa)
        s_r = recipe.stream if all_w else np.where(native_w, recipe.stream, 1.0)
        lin_m = lin_m + (bytes_busy - head_part) / _times(byte_s, wf) * (1.0 / s_r - 1.0)
    att_c = flops_att / _times(peak_att * eff_c, attention_compute_factor)
    att_m = bytes_att / byte_s
    p = hw.roofline_p
    lin, att = smooth_roofline(lin_c, lin_m, p), smooth_roofline(att_c, att_m, p)
    kernels = L * hw.kernels_per_layer if not (m.kv_lora_rank or m.num_experts) else kernels_per_step(m, hw, L)
    fixed = kernels * hw.kernel_launch_s
    if tree:                    # a runtime without a fused tree-attention kernel runs more per layer
        fixed = fixed + np.where(tree_mask, L * hw.tree_kernels_per_layer * hw.kernel_launch_s, 0.0)
    if step_overhead:
        fixed = fixed + hw.step_overhead_s + B * hw.sequence_overhead_s
    comm, link_bytes = collectives(m, hw, T, act_bytes, L, ep, dpa)
    # split each part's time to the side that bounds it (for ``bound`` and the report)
    lin_mem, att_mem = lin_m >= lin_c, att_m >= att_c
    t_mem = np.where(lin_mem, lin, 0.0) + np.where(att_mem, att, 0.0)
    t_cmp = np.where(lin_mem, 0.0, lin) + np.where(att_mem, 0.0, att)
    t_ovh = fixed + comm
    bytes_all = bytes_lin + bytes_att
    e_j = f_lin = f_att = np.nan
    if energy:
        e_j = t * bytes_all * getattr(hw, "mem_j_per_byte", np.nan)
        if link_bytes.ndim or link_bytes:
            e_j = e_j + link_bytes * getattr(hw, "link_j_per_byte", np.nan)
        f_lin, f_att = t * flops_lin, t * flops_att
    return StepCost(t_mem + t_cmp + t_ovh, flops_busy + flops_att,
                    bytes_all if busy is None else bytes_all + busy[0] * weight_bytes, t_mem, t_cmp, t_ovh, fixed, e_j,
                    f_lin, f_att)


def _times(x, factor):
    """x * factor, or x itself for the float factor 1.0 (x * 1.0 is x, bit for bit): a pass saved."""
    return x if isinstance(factor, float) and factor == 1.0 else x * factor


def _busiest_expert_rank(m: ModelSpec, layers: int, tokens, ep, chips):
    """(weights, FLOPs) per chip that the busiest expert-parallel rank adds over the mean rank in
    ``layers`` layers for ``tokens`` tokens: per MoE layer (E[max D] - mean D) experts of f weights
    and 2*f*(E[max C] - T*k/E) FLOPs, over the t/E chips of a rank (routing.busiest_rank). None for a
    dense model or without expert parallel."""
    if not m.is_moe:
        return None
    E = expert_ranks(m, ep, chips)
    if not (E > 1).any():
        return None
    moe = layers - min(tf.layer_counts(m)[0], layers)
    f = tf.ffn_params(m, tf.expert_width(m))
    n, k = m.num_experts, m.experts_per_token
    d_max, c_max = routing.busiest_rank(n, k, E, tokens)
    d_mean, c_mean = routing.mean_rank(n, k, E, tokens)
    per_chip = moe * f / (np.asarray(chips, dtype=np.float64) / E)
    return per_chip * (d_max - d_mean), 2.0 * per_chip * (c_max - c_mean)
