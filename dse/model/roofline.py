"""One forward step on one device group, as a roofline with fixed costs (MODEL.md section 2)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..catalog.specs import ModelSpec
from . import transformer as tf

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

    @property
    def arithmetic_intensity(self):
        """FLOP per byte moved, F / bytes (MODEL.md section 3, 'Arithmetic intensity')."""
        return self.flops / self.bytes

    @property
    def bound(self):
        """0 memory, 1 compute, 2 overhead: whichever share of the step time is largest."""
        return np.argmax(np.stack(np.broadcast_arrays(self.t_memory_s, self.t_compute_s,
                                                      self.t_overhead_s)), axis=0)


def allreduce_time_s(nbytes, chips, link_bw_bytes_s, link_latency_s):
    """Ring all-reduce of ``nbytes`` over t chips: 2(t-1)/t * bytes / (link_bw/2) + 2(t-1)*lat.

    MODEL.md section 2. link_bw is both directions added (vendor convention), and a ring
    sends one way per neighbour, hence link_bw/2. Zero for t = 1.
    """
    t = np.asarray(chips, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ring = 2.0 * (t - 1.0) / t * nbytes / (0.5 * link_bw_bytes_s) + 2.0 * (t - 1.0) * link_latency_s
    return np.where(t > 1, ring, 0.0)


def step_cost(m: ModelSpec, hw, *, batch, q, context, weight_bytes: float, kv_bytes: float,
              act_bytes: float = 2.0, layers: int | None = None, lm_head: bool = True,
              lm_head_last_only: bool = False,
              step_overhead: bool = True, weight_bw_factor: float = 1.0, tree_mask=False) -> StepCost:
    """step(model, device, B, q, S): B sequences, q new tokens each, S tokens cached.

    Linear: F = 2*N_active*B*q (+ LM head at every position, or at the last one only for a
    prefill, ``lm_head_last_only``), bytes = weights touched.
    Attention: bytes = B*L*(S+q)*kv_per_token (read the cache, write the new tokens),
    F = 4*h*d_h*L * B*q*(S + (q+1)/2) (causal: the i-th new token sees S+i tokens); with a
    ``tree_mask`` (verifying a token tree) every position reads the context once plus the
    tree's own q keys under the mask, F = 4*h*d_h*L * B*q*(S + q) (MODEL.md section 3).
    Each part: max(F/(P*eta_c), bytes/(BW*eta_m)); parts add; weight bytes stream at
    BW*eta_m*``weight_bw_factor`` (transformer.WEIGHT_BW_FACTOR: the dequantisation cost of
    weight-only int8/int4; 1.0 for bf16). Fixed: L*kernels*t_launch +
    t_step. Tensor parallel over t chips divides F and bytes and adds 2 all-reduces of
    B*q*d*b_act bytes per layer (MODEL.md section 2). ``hw`` is any object with the
    HardwareArrays attributes (1-D, or 2-D columns for k sweeps).
    """
    L = m.num_layers if layers is None else layers
    B = np.asarray(batch, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    S = np.asarray(context, dtype=np.float64)
    t = hw.chips
    T = B * q
    bytes_lin = tf.weight_params_touched(m, T, L, lm_head) * weight_bytes / t
    flops_lin = tf.linear_flops_per_token(m, L, lm_head and not lm_head_last_only) * T / t
    if lm_head and lm_head_last_only:      # prefill: logits of the last prompt position only
        flops_lin = flops_lin + 2.0 * tf.lm_head_params(m) * B / t
    kv_tok = L * tf.kv_elems_per_token_per_layer(m) * kv_bytes
    bytes_att = B * (S + q) * kv_tok / t
    own = np.where(tree_mask, q, 0.5 * (q + 1.0)) if np.any(tree_mask) else 0.5 * (q + 1.0)
    flops_att = tf.attention_flops_per_token_per_ctx(m, L) * T * (S + own) / t
    flop_s = hw.peak_flop_s * hw.compute_efficiency
    byte_s = hw.mem_bw_bytes_s * hw.mem_efficiency
    lin_c, lin_m = flops_lin / flop_s, bytes_lin / (byte_s * weight_bw_factor)
    att_c, att_m = flops_att / flop_s, bytes_att / byte_s
    fixed = L * hw.kernels_per_layer * hw.kernel_launch_s
    if step_overhead:
        fixed = fixed + hw.step_overhead_s
    comm = 2.0 * L * allreduce_time_s(T * m.hidden_size * act_bytes, t, hw.link_bw_bytes_s,
                                      hw.link_latency_s)
    t_mem = np.where(lin_m >= lin_c, lin_m, 0.0) + np.where(att_m >= att_c, att_m, 0.0)
    t_cmp = np.where(lin_m >= lin_c, 0.0, lin_c) + np.where(att_m >= att_c, 0.0, att_c)
    t_ovh = fixed + comm
    return StepCost(t_mem + t_cmp + t_ovh, flops_lin + flops_att, bytes_lin + bytes_att,
                    t_mem, t_cmp, t_ovh)
