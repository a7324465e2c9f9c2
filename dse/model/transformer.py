"""A transformer as parameter counts, bytes and FLOPs (MODEL.md section 1).

Pure functions of a ModelSpec (scalars) and numpy arrays of tokens (one row per design).
Norms, biases and rotary tables are ignored (< 0.1% of bytes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..catalog.specs import ModelSpec
from .gemm import RECIPES

#: bytes per KV-cache element
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5 + 2.0 / 128}
#: Achieved fraction of a dtype's peak matmul rate, relative to the device's compute_efficiency
#: (which is a 16-bit MFU). fp8 GEMMs reach a lower fraction of their (2x) peak than bf16:
#: fitted 0.70 (grid 0.50-1.00, with the runtime's request cost and roofline p) on the
#: TensorRT-LLM H100 fp8 / A100 fp16 Llama-2-7B first-token and large-batch rows
#: (hardware_db/measurements/serving_measurements_public.csv, docs/calibration.md); i.e. an
#: H100 fp8 GEMM runs at ~0.66 x 0.70 = 46% of its fp8 peak (hardware.md section 3 quotes
#: ~39% for TensorRT-LLM v0.5 prefill). int8/int4 are weight-only and compute in 16 bits
#: (1.0); fp4 (NVFP4 W4A4) is taken like fp8, an estimate. Used for the linear layers at the
#: format's compute dtype (times its fp8 recipe's factor, gemm.RECIPES) and for attention at the
#: KV dtype. Checked, not fitted, on measured kernels: per-tensor fp8 GEMMs reach 0.63-0.80 of the
#: bf16 GEMM's compute efficiency on the same part (median 0.70; NVIDIA AIConfigurator's
#: TensorRT-LLM and vLLM tables on H100 and H200, dse/model/gemm.py).
COMPUTE_EFFICIENCY_FACTOR = {"bf16": 1.0, "fp16": 1.0, "fp8": 0.70, "int8": 1.0, "int4": 1.0, "fp4": 0.70}


@dataclass(frozen=True)
class WeightFormat:
    """How a checkpoint stores its weights (MODEL.md section 1).

    bytes_per_weight: transformer-layer weights, group scales and zeros included;
    head_bytes: the LM head and embeddings (16-bit in AWQ/GPTQ/fp8/fp4 checkpoints);
    compute_dtype: the matmul rate it runs at (weight-only formats compute in bf16);
    dequant: "int8" or "int4" for weight-only formats, whose kernels dequantise every weight and
    stream at the runtime's ``int8_stream_factor`` / ``int4_stream_factor`` of the bf16 rate
    (how fast a kernel streams a format belongs to the engine, hardware_db/runtimes/); "" for
    formats the matmul consumes natively (bf16, fp8, nvfp4);
    recipe: an fp8 W8A8 checkpoint's scaling recipe (gemm.RECIPES): "tensor" (one scale per tensor
    or per channel: NVIDIA ModelOpt, vLLM --quantization fp8, Meta's row-wise FP8) or "block"
    (128 x 128 weight blocks and 1 x 128 activation groups: DeepSeek-V3/R1, Qwen3 FP8); "" otherwise.
    """

    name: str
    bytes_per_weight: float
    head_bytes: float
    compute_dtype: str
    dequant: str
    desc: str
    recipe: str = ""


#: Weight formats. The five plain dtypes keep their meaning (every weight, head included, at
#: that width; "int4" = 4 bits + one fp16 scale per 128, the form the gpt-fast rows are fitted
#: with); the named formats carry their own group bytes and a 16-bit head. Group arithmetic:
#: g128 GPTQ/AWQ: 4 bits + fp16 scale + packed 4-bit zero per 128 = 0.5 + 2.5/128 = 0.51953;
#: gpt-fast int4 g32: bf16 scale + bf16 zero per 32 = 0.5 + 4/32 = 0.625 (gpt-fast quantize.py);
#: MLC q4f16_1: fp16 scale per 32, symmetric = 0.5 + 2/32 = 0.5625 (mlc-llm quantization docs);
#: NVFP4: E4M3 scale per 16 = 0.5 + 1/16 = 0.5625 (NVIDIA NVFP4 blog, 2025); MXFP4: E8M0 scale
#: per 32 = 0.5 + 1/32 = 0.53125 (OCP Microscaling spec v1.0); fp8 block scales: an fp32 scale per
#: 128 x 128 block = 1 + 4/16384 = 1.000244 (DeepSeek-V3 arXiv 2412.19437 section 3.3.1).
WEIGHT_FORMATS = {
    "bf16": WeightFormat("bf16", 2.0, 2.0, "bf16", "", "bfloat16"),
    "fp16": WeightFormat("fp16", 2.0, 2.0, "fp16", "", "float16"),
    "fp8": WeightFormat("fp8", 1.0, 1.0, "fp8", "", "fp8 W8A8 per-tensor scales, head fp8 too", "tensor"),
    "int8": WeightFormat("int8", 1.0, 1.0, "bf16", "int8", "int8 weight-only"),
    "int4": WeightFormat("int4", 0.5 + 2.0 / 128, 0.5 + 2.0 / 128, "bf16", "int4",
                         "int4 weight-only, fp16 scale per 128, head quantised too"),
    "fp8-head16": WeightFormat("fp8-head16", 1.0, 2.0, "fp8", "",
                               "fp8 W8A8 per-tensor (or per-channel) scales, bf16 LM head and embeddings "
                               "(Meta Llama-3.1 FP8, NVIDIA ModelOpt)", "tensor"),
    "fp8-block": WeightFormat("fp8-block", 1.0 + 4.0 / (128 * 128), 2.0, "fp8", "",
                              "fp8 W8A8 with an fp32 scale per 128 x 128 weight block, bf16 LM head and "
                              "embeddings (DeepSeek-V3/R1, Qwen3 FP8)", "block"),
    "int4-g128": WeightFormat("int4-g128", 0.5 + 2.5 / 128, 2.0, "bf16", "int4",
                              "GPTQ/AWQ int4 g128, fp16 scales, 4-bit zeros, 16-bit head"),
    "int4-g32": WeightFormat("int4-g32", 0.5 + 4.0 / 32, 2.0, "bf16", "int4",
                             "int4 g32 with bf16 scale and zero, 16-bit head"),
    "q4f16_1": WeightFormat("q4f16_1", 0.5 + 2.0 / 32, 2.0, "bf16", "int4",
                            "MLC q4f16_1: 4-bit, fp16 scale per 32, 16-bit head"),
    "nvfp4": WeightFormat("nvfp4", 0.5 + 1.0 / 16, 2.0, "fp4", "", "NVFP4 W4A4, E4M3 scale per 16, 16-bit head"),
    "mxfp4": WeightFormat("mxfp4", 0.5 + 1.0 / 32, 2.0, "bf16", "int4",
                          "MXFP4 weight-only, E8M0 scale per 32, 16-bit head"),
}
#: bytes per stored layer weight of each format (the plain dtypes: every weight)
WEIGHT_BYTES = {name: f.bytes_per_weight for name, f in WEIGHT_FORMATS.items()}
#: the dequantisation class a format's weights stream at where the part has no units for its
#: math (its peak_flop_s for that dtype is absent: fp8 on an A100, fp4 on a Hopper): the
#: weights are read at their bytes and widened to 16 bits in the kernel (vLLM's FP8 / FP4 Marlin
#: kernels for Ampere, Ada and Hopper), so they stream like the 8-bit or 4-bit weight-only
#: formats and compute at the 16-bit rate and efficiency
EMULATED_DEQUANT = {"fp8": "int8", "fp4": "int4"}


def step_kwargs(weight_format: str, kv_dtype: str, weight_bw_factor: float | None = None) -> dict:
    """The per-format arguments of roofline.step_cost: weight and head bytes, KV bytes, the
    dequantisation class (the runtime's streaming factor for it, unless ``weight_bw_factor``
    is given) and the one it takes as weight-only on a part without its math (EMULATED_DEQUANT),
    and the compute-efficiency factors of the linear layers (at the format's compute
    dtype) and of attention (at the KV dtype)."""
    f = WEIGHT_FORMATS[weight_format]
    return dict(weight_bytes=f.bytes_per_weight, head_bytes=f.head_bytes, kv_bytes=KV_BYTES[kv_dtype],
                weight_dequant=f.dequant, weight_bw_factor=weight_bw_factor,
                weight_emulated_dequant=EMULATED_DEQUANT.get(f.compute_dtype, ""),
                weight_recipe=f.recipe,
                linear_compute_factor=COMPUTE_EFFICIENCY_FACTOR[f.compute_dtype] * RECIPES[f.recipe].compute,
                attention_compute_factor=COMPUTE_EFFICIENCY_FACTOR[kv_dtype])


def default_kv_dtype(dtype: str) -> str:
    """The KV cache stays 16-bit unless the user quantises it (--kv-dtype, workload.kv_dtype):
    fp16 with fp16 weights, else bf16. MLC q4f16, AWQ, GPTQ, gpt-fast and vLLM keep a 16-bit
    cache with quantised weights unless told otherwise (MODEL.md section 1)."""
    return "fp16" if dtype == "fp16" else "bf16"


@functools.lru_cache(maxsize=1024)     # a pure function of a frozen spec: once per model
def attention_params(m: ModelSpec) -> int:
    """Attention weights per layer.

    GQA/MHA: d*h*d_h (Q) + 2*d*h_kv*d_h (K, V) + h*d_h*d (O)  (MODEL.md section 1).
    MLA (DeepSeek-V2/V3, arXiv 2405.04434 section 2.1): Q down/up projections
    d*r_q + r_q*h*d_h, KV down projection d*(r_kv + d_rope), KV up projection
    r_kv*h*(d_h - d_rope + d_v), output h*d_v*d.
    """
    d, h, dh = m.hidden_size, m.num_attention_heads, m.head_dim
    if m.kv_lora_rank:
        dv = m.v_head_dim or dh
        q = d * m.q_lora_rank + m.q_lora_rank * h * dh if m.q_lora_rank else d * h * dh
        kv = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * h * (dh - m.qk_rope_head_dim + dv)
        return q + kv + h * dv * d
    return d * h * dh + 2 * d * m.num_kv_heads * dh + h * dh * d


def ffn_params(m: ModelSpec, width: int) -> int:
    """One FFN of the given width: 3*d*f gated (SwiGLU/GeGLU), else 2*d*f."""
    return (3 if m.gated_ffn else 2) * m.hidden_size * width


def expert_width(m: ModelSpec) -> int:
    return m.moe_intermediate_size or m.intermediate_size


def layer_counts(m: ModelSpec) -> tuple[int, int]:
    """(dense layers, MoE layers)."""
    if not m.is_moe:
        return m.num_layers, 0
    return m.first_dense_layers, m.num_layers - m.first_dense_layers


@functools.lru_cache(maxsize=1024)     # a pure function of a frozen spec: once per model
def non_embedding_params(m: ModelSpec) -> int:
    """All transformer-layer weights (every expert counted)."""
    dense, moe = layer_counts(m)
    attn = attention_params(m) * m.num_layers
    per_moe = ((m.num_experts + m.shared_experts) * ffn_params(m, expert_width(m))
               + m.hidden_size * m.num_experts)
    return attn + dense * ffn_params(m, m.intermediate_size) + moe * per_moe


def lm_head_params(m: ModelSpec) -> int:
    """LM head V*d (read at every decode step, tied or not)."""
    return m.vocab_size * m.hidden_size


def total_params(m: ModelSpec) -> int:
    """Stored parameters: layers + embedding V*d + LM head V*d unless tied."""
    return non_embedding_params(m) + lm_head_params(m) * (1 if m.tied_embeddings else 2)


@functools.lru_cache(maxsize=1024)     # a pure function of a frozen spec: once per model
def active_params_per_token(m: ModelSpec) -> int:
    """Weights one token multiplies by (layers with e of E experts, plus the LM head)."""
    dense, moe = layer_counts(m)
    per_moe = ((m.experts_per_token + m.shared_experts) * ffn_params(m, expert_width(m))
               + m.hidden_size * m.num_experts)
    return (attention_params(m) * m.num_layers + dense * ffn_params(m, m.intermediate_size)
            + moe * per_moe + lm_head_params(m))


def experts_touched(num_experts: int, active: int, tokens):
    """Expected distinct experts hit by T tokens under uniform routing: E*(1-(1-e/E)^T)."""
    tokens = np.asarray(tokens, dtype=np.float64)
    return num_experts * (1.0 - (1.0 - active / num_experts) ** tokens)


def weight_params_touched(m: ModelSpec, tokens, layers: int | None = None,
                          lm_head: bool = True):
    """Parameters streamed from memory by one step over ``tokens`` = B*q tokens (array).

    Dense: every layer weight. MoE: attention + router + shared experts + experts touched
    (MODEL.md section 1). ``layers`` truncates the stack (early exit); the LM head is added
    when ``lm_head``.
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    L = m.num_layers if layers is None else layers
    dense = min(layer_counts(m)[0], L)
    moe = L - dense
    out = attention_params(m) * L + dense * ffn_params(m, m.intermediate_size) + np.zeros_like(tokens)
    if moe:
        f = ffn_params(m, expert_width(m))
        touched = experts_touched(m.num_experts, m.experts_per_token, tokens)
        out = out + moe * ((touched + m.shared_experts) * f + m.hidden_size * m.num_experts)
    if lm_head:
        out = out + lm_head_params(m)
    return out


@functools.lru_cache(maxsize=1024)     # a pure function of a frozen spec: once per model
def linear_flops_per_token(m: ModelSpec, layers: int | None = None, lm_head: bool = True) -> float:
    """2 * active weights per token (+ 2*V*d for the LM head at every position)."""
    L = m.num_layers if layers is None else layers
    per_layer_active = (active_params_per_token(m) - lm_head_params(m)) / m.num_layers
    return 2.0 * (per_layer_active * L + (lm_head_params(m) if lm_head else 0))


@functools.lru_cache(maxsize=1024)     # a pure function of a frozen spec: once per model
def replicated_params(m: ModelSpec, layers: int | None = None) -> int:
    """Weights every tensor-parallel chip holds whole (MODEL.md section 2, sharding rules).

    MLA's down-projections, d*r_q (Q) and d*(r_kv + d_rope) (the latent KV), produce the
    replicated latent and are replicated with it (vLLM/SGLang DeepseekV2Attention:
    q_a_proj and kv_a_proj_with_mqa are ReplicatedLinear); an MoE router d*E is replicated
    on every MoE layer (the gate is ReplicatedLinear). 0 for a dense GQA/MHA model.
    """
    L = m.num_layers if layers is None else layers
    moe = L - min(layer_counts(m)[0], L)
    mla = m.hidden_size * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) if m.kv_lora_rank else 0
    return mla * L + m.hidden_size * m.num_experts * moe


def per_chip(total, replicated, chips):
    """Share of one chip of t: (total - replicated)/t + replicated (MODEL.md section 2)."""
    t = np.asarray(chips, dtype=np.float64)
    return (total - replicated) / t + replicated


def kv_shards(m: ModelSpec, chips):
    """Chips the KV cache is divided over under tensor parallel t: min(t, h_kv) for MHA/GQA
    (with fewer KV heads than chips, heads are replicated); 1 for MLA (its latent is one
    shared head, replicated on every chip). MODEL.md section 2."""
    t = np.asarray(chips, dtype=np.float64)
    if m.kv_lora_rank:
        return np.ones_like(t)
    return np.minimum(t, m.num_kv_heads)


def decode_kv_reads(m: ModelSpec, chips, per_query_head) -> np.ndarray:
    """Times a decode or verify pass reads each cached KV head on a chip: 1 for a GQA-aware kernel
    (``per_query_head`` = 0: XQA, FlashInfer, FlashAttention load a KV head once for its group), and
    the chip's query heads per KV head, h min(t, h_kv) / (t h_kv), for a kernel that runs one thread
    block per query head (``per_query_head`` = 1: TensorRT-LLM's masked multi-head attention, which
    its XQA kernel replaced for GQA, "reducing data loading": TensorRT-LLM's XQA-kernel blog). MHA
    and MLA (one latent head per token): 1. Llama-2-70B (h 64, h_kv 8) at t = 2: 64 x 2 / (2 x 8) = 8."""
    f = np.asarray(per_query_head, dtype=np.float64)
    if m.kv_lora_rank or m.num_kv_heads == m.num_attention_heads:
        return np.ones_like(f)
    t = np.asarray(chips, dtype=np.float64)
    g = m.num_attention_heads * np.minimum(t, m.num_kv_heads) / (t * m.num_kv_heads)
    return 1.0 + f * (g - 1.0)


def kv_elems_per_token_per_layer(m: ModelSpec) -> int:
    """KV-cache elements per token per layer: 2*h_kv*d_h, or MLA r_kv + d_rope."""
    if m.kv_lora_rank:
        return m.kv_lora_rank + m.qk_rope_head_dim
    return 2 * m.num_kv_heads * m.head_dim


def kv_cache_bytes(m: ModelSpec, batch, tokens, kv_bytes: float, layers: int | None = None):
    """KV cache of B sequences of ``tokens`` tokens: B*L*S*kv_per_token_per_layer*b_kv."""
    L = m.num_layers if layers is None else layers
    return (np.asarray(batch, dtype=np.float64) * np.asarray(tokens, dtype=np.float64)
            * L * kv_elems_per_token_per_layer(m) * kv_bytes)


def attention_flops_per_token_per_ctx(m: ModelSpec, layers: int | None = None, absorbed: bool = True) -> float:
    """Attention FLOPs per (query token x cached token): 4*h*d_h*L (QK^T and PV).

    MLA (DeepSeek-V2/V3) decode kernels attend in the latent space with absorbed projections:
    QK^T over r_kv + d_rope and PV over r_kv per head, 2*h*(2*r_kv + d_rope)*L (arXiv 2405.04434
    section 2.1.3). Prefill runs the non-absorbed form (``absorbed=False``): keys and values are
    up-projected per token (those FLOPs are in the linear layers) and attention is ordinary
    multi-head attention with QK^T over d_nope + d_rope (head_dim) and PV over d_v:
    2*h*(head_dim + d_v)*L, 3.4x fewer for DeepSeek-V3.
    """
    L = m.num_layers if layers is None else layers
    if m.kv_lora_rank and absorbed:
        return 2.0 * m.num_attention_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * L
    if m.kv_lora_rank:
        return 2.0 * m.num_attention_heads * (m.head_dim + (m.v_head_dim or m.head_dim)) * L
    return 4.0 * m.num_attention_heads * m.head_dim * L
