"""Layers in sequence (MODEL.md sections 7 and 8): pipeline parallel over stages of chips and, on a
part whose weights live in its own SRAM, each layer on its own region of the chip.

A pass crosses every stage: its time is the sum of the stages' times plus the hops between them
(at batch 1 a token crosses every stage). With m micro-batches in flight a stage works on each in
turn, so one cycle (every sequence one step on) takes max(traversal, m x slowest stage); the
pipeline is full at m = stages. dse takes the better of one micro-batch and a full pipeline per
design, as a scheduler would."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

#: a region of a layer-regioned chip holds this share of these
_SHARED = ("mem_bw_bytes_s", "peak_flop_s", "peak_attention_flop_s")


def is_pipelined(hw) -> bool:
    """Does any row cross more than one stage (pp > 1, or layers in regions of a chip)?"""
    return bool(np.any(np.asarray(getattr(hw, "pp", 1)) > 1) or np.any(getattr(hw, "layer_regions", False)))


def stage_layers(layers, pp) -> np.ndarray:
    """Layers of the largest of pp stages of consecutive layers: ceil(L / pp) (vLLM and SGLang
    split L unevenly where pp does not divide it)."""
    return np.ceil(np.asarray(layers, dtype=np.float64) / np.asarray(pp, dtype=np.float64))


def regions_per_chip(layers, hw) -> np.ndarray:
    """R: the regions a chip's bandwidth and FLOP/s split into, one per layer it holds
    (ceil(L / pp)) on a layer-regioned part, else 1 (the whole chip streams each layer)."""
    return np.where(hw.layer_regions, stage_layers(layers, hw.pp), 1.0)


def _view(hw, **changes) -> SimpleNamespace:
    fields = ({f.name: getattr(hw, f.name) for f in dataclasses.fields(hw)} if dataclasses.is_dataclass(hw)
              else dict(vars(hw)))
    fields.update(changes)
    return SimpleNamespace(**fields)


def hop_time_s(hw, tokens, hidden: int, act_bytes: float, layers) -> np.ndarray:
    """The hops of one pass over ``tokens`` tokens: between chip stages, pp hops for pp > 1 (pp - 1
    forward and the sampled token back to the first), each latency + T*d*b_act/t bytes per chip of
    the stage at half the link's both-ways rate (eta_link x bw/2), over the scale-up link, or the
    scale-out network for the hops that leave a scale-up domain (one per domain the stages span);
    and on a layer-regioned chip, per chip, R - 1 hops across the mesh from region to region
    (region_hop_s), min(R, dies) - 1 of them also over a die edge (+ die_hop_s)."""
    pp = np.asarray(hw.pp, dtype=np.float64)
    t = np.asarray(hw.chips, dtype=np.float64)
    n_hops = np.where(pp > 1, pp, 0.0)
    dom = np.asarray(hw.scale_up_domain, dtype=np.float64)
    n_out = np.where(t * pp > dom, np.minimum(n_hops, np.ceil(t * pp / dom)), 0.0)
    n_out = np.where(t > dom, n_hops, n_out)
    per_chip = np.asarray(tokens, dtype=np.float64) * hidden * act_bytes / t
    with np.errstate(divide="ignore", invalid="ignore"):
        up = hw.link_latency_s + per_chip / (0.5 * hw.link_bw_bytes_s * hw.link_efficiency)
        out = hw.scale_out_latency_s + per_chip / (0.5 * hw.scale_out_bw_bytes_s * hw.scale_out_efficiency)
    with np.errstate(invalid="ignore"):
        chip_hops = np.where(n_hops > n_out, (n_hops - n_out) * up, 0.0) + np.where(n_out > 0, n_out * out, 0.0)
    R = regions_per_chip(layers, hw)
    crossings = np.minimum(R, hw.dies) - 1.0
    on_chip = np.where(hw.layer_regions, (R - 1.0) * hw.region_hop_s + crossings * hw.die_hop_s, 0.0)
    return chip_hops + np.maximum(pp, 1.0) * on_chip


def pipelined_step(pass_cost, m, hw, *, batch, q, context, layers=None, act_bytes: float = 2.0,
                   prefill_tokens=0.0, **kw):
    """One step (every one of B sequences q tokens on) over the stages of ``hw``: ``pass_cost`` (the
    roofline pass, roofline.pass_cost) over all L layers on one region's share of a chip (bandwidth
    and FLOP/s / R, ``regions_per_chip``), plus L x layer_sync_s and the hops (``hop_time_s``), is one
    micro-batch's traversal t_pass; with m micro-batches (sequences split first, then a prompt's
    positions in chunks) the cycle is max(t_pass(B/m), m x f x t_pass(B/m) / S) for S stages in
    sequence (L on a layer-regioned part, else min(pp, L)) and f = pp ceil(L/pp) / L the slowest
    stage's share; m = 1 or m = min(S, B q), whichever cycle is shorter. Bytes and FLOPs per chip are
    m/pp of a pass's (each chip holds 1/pp of the layers), energy the whole group's over the m."""
    L = m.num_layers if layers is None else layers
    B = np.asarray(batch, dtype=np.float64)
    qq = np.asarray(q, dtype=np.float64)
    pp = np.asarray(hw.pp, dtype=np.float64)
    regioned = np.asarray(hw.layer_regions)
    R = regions_per_chip(L, hw)
    S = np.where(regioned, float(L), np.minimum(pp, float(L)))
    imbalance = np.where(regioned, 1.0, pp * stage_layers(L, pp) / L)
    if regioned.any():
        hw_r = _view(hw, **{f: np.asarray(getattr(hw, f)) / R for f in _SHARED})
    else:
        hw_r = hw
    sync = L * np.asarray(hw.layer_sync_s, dtype=np.float64)
    px = np.asarray(prefill_tokens, dtype=np.float64)

    def cycle(mb):
        m_b = np.minimum(mb, np.maximum(B, 1.0))          # micro-batches of whole sequences
        chunks = mb / m_b                                 # and each sequence's positions in chunks
        c = pass_cost(m, hw_r, batch=B / m_b, q=qq / chunks, context=context + 0.5 * qq * (1.0 - 1.0 / chunks),
                      layers=layers, act_bytes=act_bytes, prefill_tokens=px / chunks if px.any() else 0.0, **kw)
        hops = hop_time_s(hw, B / m_b * (qq + px) / chunks, m.hidden_size, act_bytes, L)
        traverse = c.time_s + sync + hops
        return c, hops, traverse, np.maximum(traverse, mb * imbalance * (c.time_s + sync) / S)

    m_hi = np.maximum(np.minimum(S, B * qq), 1.0)
    one, hops1, trav1, t1 = cycle(np.ones_like(m_hi))
    if not np.any(m_hi > 1):
        return _scaled(one, hops1, trav1, t1, 1.0, pp, sync)
    full, hops2, trav2, t2 = cycle(m_hi)
    a = _scaled(one, hops1, trav1, t1, 1.0, pp, sync)
    b = _scaled(full, hops2, trav2, t2, m_hi, pp, sync)
    better = b.time_s < a.time_s
    return type(one)(*(np.where(better, y, x) for x, y in zip(a, b)))


def _scaled(c, hops, traverse, cycle, mb, pp, sync):
    """A pass's StepCost as one cycle of ``mb`` micro-batches: time = cycle, its parts scaled to it."""
    f = cycle / traverse
    return type(c)(cycle, c.flops * mb / pp, c.bytes * mb / pp, c.t_memory_s * f, c.t_compute_s * f,
                   (c.t_overhead_s + sync + hops) * f, (c.t_fixed_s + sync) * f, c.energy_j * mb,
                   c.group_flops_lin * mb, c.group_flops_att * mb)
