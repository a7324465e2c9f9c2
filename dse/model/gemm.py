"""One matrix multiply on one chip: its time and efficiency at M rows, by weight format and fp8 scaling
recipe (MODEL.md section 2; docs/model.md, "One GEMM at M rows").

A linear layer's GEMM on a chip multiplies M rows (the tokens of the step on that chip) by an N x K
weight shard. Its time is a fixed part plus the smooth roofline of its FLOPs and bytes:

    t = t0 + ((F / (P eta_c c_r))^p + (bytes / (BW eta_m s_r))^p)^(1/p),  F = 2 M N K,

with t0 the kernel's fixed time (its launch and tail: the runtime's kernel_launch_us a kernel), eta_c /
eta_m the part's compute and memory efficiency, c_r / s_r the recipe's compute and streaming factors and
p the runtime's roofline exponent. Its
efficiency F / (P t) rises with M and never reaches 1: at small M the GEMM streams its weights (bytes ~
N K b, F ~ 2 M N K, so F/(P t) grows like M) behind a fixed t0; at large M it is compute-bound at
eta_c c_r. ``pass_cost`` (roofline.py) prices a step's linear layers with the same terms summed over
the step's GEMMs (they share M, so the smooth roofline of the sums is the sum of theirs).

The recipe constants come from NVIDIA AIConfigurator's measured GEMM tables (pypi.org/project/
aiconfigurator 0.4.0, systems/data/<gpu>/<framework>/<version>/gemm_perf.txt: latency of one GEMM per
(dtype, M, N, K), M = 1-8192, N and K = 32-65536). Fitting t = t0 + sqrt(t_c^2 + t_m^2) per table and
dtype (relative least squares over the shapes with N, K >= 256) leaves a median error of 6-8% (TensorRT-
LLM 1.0.0rc3 on H100 and H200); an extra M-dependent compute efficiency (tile padding M / 64 ceil(M/64),
or M / (M + M_half)) does not lower it (M_half fits to 0): the small-M loss is the fixed time and the
memory-bound stream, not a slower tensor core. By table (t0 in us; eta_m, eta_c of the peak; the fit
caps them at 1; SGLang's bf16 tables come out above the line rate and are left out):

    TensorRT-LLM H100   bf16 3.2, 0.88, 0.87   fp8 16.1, 0.91, 0.55   fp8-block 5.7, 0.79, 0.49
    TensorRT-LLM H200   bf16 3.4, 0.83, 0.85   fp8 15.9, 0.89, 0.54   fp8-block 5.9, 0.73, 0.48
    vLLM 0.11 H100 NVL  bf16 3.2, 1.00, 0.91   fp8 6.1, 0.93, 0.73
    vLLM 0.11 H200      bf16 3.1, 0.97, 0.90   fp8 5.6, 0.88, 0.67
    SGLang 0.5.1 H100                          fp8 4.3, 0.96, 0.72    fp8-block 3.4, 0.81, 0.72
    SGLang 0.5.1 H200                          fp8 5.3, 0.72, 0.68    fp8-block 4.2, 0.60, 0.65

Per-tensor fp8 against bf16 on the same table: compute 0.63-0.80 (median 0.70, the fitted
COMPUTE_EFFICIENCY_FACTOR["fp8"]), streaming 0.90-1.07 (median 0.98: 1), fixed time +2.5-2.9 us in
vLLM (the fused dynamic per-tensor quantisation of the activations) and +12.5-12.9 us in TensorRT-LLM's
PyTorch-flow op as collected (no calibrated input scale: an amax pass first). Block-scaled fp8 (DeepSeek-
V3's 128 x 128 weight blocks, 1 x 128 activation groups) against per-tensor on the same table: compute
0.89-0.99 (median 0.91), streaming 0.82-0.87 (median 0.845: the scales are fetched and applied in the
main loop), fixed time +2.5 us over bf16 in TensorRT-LLM (its per-group quantisation is one fused kernel,
as vLLM's per-tensor one). That extra fixed time is the activations' quantisation, a kernel of its own
in these single-op measurements; serving engines fuse it into the kernel before the GEMM (TensorRT-LLM's
RMSNorm+quantise and SwiGLU+quantise plugins; SGLang's block-scaled op measures a fixed time of 3.4-4.2 us,
no more than its per-tensor one's 4.3-5.3), so it is not charged: a step's kernels are the runtime's count. A
block-scaled GEMM is then never faster than a per-tensor one of the same shape (lower compute and
streaming factors, the same fixed time).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class GemmRecipe(NamedTuple):
    """How a weight format's GEMMs run against a 16-bit GEMM on the same part: ``compute`` multiplies
    the format's compute efficiency, ``stream`` its weight-streaming rate."""

    compute: float
    stream: float
    desc: str


#: fp8 scaling recipes (module docstring for the tables): "" = a format that is not fp8 W8A8
#: (16-bit, weight-only, nvfp4: its own factors)
RECIPES = {
    "": GemmRecipe(1.0, 1.0, "no activation quantisation"),
    "tensor": GemmRecipe(1.0, 1.0, "per-tensor (or per-channel) fp8 scales"),
    "block": GemmRecipe(0.91, 0.845, "128 x 128 weight blocks, 1 x 128 activation groups (DeepSeek-V3)"),
}


def smooth_roofline(t_compute, t_memory, p):
    """(t_c^p + t_m^p)^(1/p): the hard max max(t_c, t_m) at p = inf, and exactly the other
    term when one is zero, for any p (MODEL.md section 2). Written as
    hi * (1 + (lo/hi)^p)^(1/p) so that no power overflows."""
    t_c, t_m = np.asarray(t_compute, dtype=np.float64), np.asarray(t_memory, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    if p.size and not np.count_nonzero(p != 2.0):
        # the fitted default: sqrt(t_c^2 + t_m^2) in three passes, no power (times in seconds do not
        # overflow when squared, and sqrt(x*x) == x exactly in binary floating point)
        return np.sqrt(t_c * t_c + t_m * t_m)
    hi, lo = np.maximum(t_c, t_m), np.minimum(t_c, t_m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(hi > 0, lo / hi, 0.0)
        finite = np.isfinite(p)
        blend = np.where(finite, (1.0 + r ** np.where(finite, p, 1.0)) ** (1.0 / np.where(finite, p, 1.0)), 1.0)
    return np.where(hi > 0, hi * blend, 0.0)


def gemm_time_s(rows, n, k, *, peak_flop_s, mem_bw_bytes_s, compute_efficiency, mem_efficiency,
                weight_bytes=2.0, act_bytes=2.0, recipe: str = "", kernel_s=0.0, p=2.0):
    """Seconds of one GEMM of ``rows`` x ``k`` activations by a ``k`` x ``n`` weight shard (arrays
    broadcast): t = t0 + ((F/(P eta_c c_r))^p + (bytes/(BW eta_m s_r))^p)^(1/p), F = 2 rows n k,
    bytes = n k b_w + rows (k + n) b_a, t0 = kernel_s (module docstring)."""
    r = RECIPES[recipe]
    M, N, K = (np.asarray(x, dtype=np.float64) for x in (rows, n, k))
    flops = 2.0 * M * N * K
    nbytes = N * K * weight_bytes + M * (K + N) * act_bytes
    t_c = flops / (np.asarray(peak_flop_s) * compute_efficiency * r.compute)
    t_m = nbytes / (np.asarray(mem_bw_bytes_s) * mem_efficiency * r.stream)
    return kernel_s + smooth_roofline(t_c, t_m, p)


def gemm_efficiency(rows, n, k, **kw):
    """Fraction of peak FLOP/s a GEMM of ``rows`` rows reaches, 2 rows n k / (P t) with t =
    ``gemm_time_s`` (same arguments): rises with rows and stays below compute_efficiency x the
    recipe's compute factor (<= 1)."""
    flops = 2.0 * np.asarray(rows, dtype=np.float64) * np.asarray(n, dtype=np.float64) * np.asarray(k)
    return flops / (np.asarray(kw["peak_flop_s"]) * gemm_time_s(rows, n, k, **kw))
