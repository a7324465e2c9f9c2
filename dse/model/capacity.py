"""Capacity: both models and both caches must be resident (MODEL.md section 4): weight bytes per
chip of a model and of a drafter, weights + KV cache per chip, and the capacity metrics of every
design (required, reserve, capacity, shortfall and floor, per chip and per group, target and draft)."""

from __future__ import annotations

import numpy as np

from ..catalog.specs import ModelSpec
from ..workload.spec import Workload
from . import transformer as tf
from .arrays import DesignBatch
from .drafters import draft_tp, eagle_fc_params, eagle_head, medusa_head_params, mtp_block, mtp_proj_params
from .tau import largest_k


def draft_weight_bytes(w: Workload) -> float:
    """Bytes of weights the drafter adds: a draft model's own weights; EAGLE one layer +
    fc(2d -> d) (LM head shared); Medusa H heads of d*d + d*V, each head with its own LM head
    as in the Medusa-1 checkpoints (Cai et al. 2024, arXiv 2401.10774; hardware_db
    medusa-vicuna-7b): 5 heads on Llama-3-8B, 5*(4096^2 + 4096*128256)*2 bytes = 5.42 GB bf16 (Hydra's
    heads counted the same); an MTP drafter the target's mtp_layers modules, each its block (every
    expert) + eh_proj, embedding and head shared (drafters.mtp_params: DeepSeek-V3 11.61B, 11.61 GB
    fp8); early exit and n-gram/retrieval drafts add nothing on the device (a retrieval datastore
    lives in host memory: Workload.datastore_bytes, reported as datastore_gb)."""
    return float(draft_weight_bytes_per_chip(w, 1))


def draft_weight_bytes_per_chip(w: Workload, chips):
    """draft_weight_bytes on one of t chips: a draft model split t ways like the target
    (transformer.per_chip: replicated MLA down-projections and router stay whole; t is its own
    tensor parallel, drafters.draft_tp); EAGLE and Medusa heads divide by t; an MTP block splits like
    the target's layers (its MLA down-projections and router whole on every chip)."""
    d, wb = w.drafter, tf.WEIGHT_BYTES[w.dtype]
    t, c = w.target, np.asarray(chips, dtype=np.float64)
    if d.kind == "model":
        return weights_per_chip(d.model, c, w.dtype)
    if d.kind == "eagle":
        head = eagle_head(t, d.meth)
        own_lm = head.hidden_size * head.vocab_size if d.meth == "eagle3" else 0
        return (tf.non_embedding_params(head) + eagle_fc_params(t, d.meth) + own_lm) * wb / c
    if d.kind in ("medusa", "hydra"):
        return d.heads * medusa_head_params(t) * wb / c
    if d.kind == "mtp":
        block = mtp_block(t)
        per = tf.per_chip(tf.non_embedding_params(block) + mtp_proj_params(t), tf.replicated_params(block), c)
        return t.mtp_layers * per * wb
    return np.zeros_like(c)


def weights_per_chip(m: ModelSpec, chips, weight_format: str, dp=None):
    """Weight bytes on one of t chips: layers (W - W_rep)/t + W_rep at the format's bytes per
    weight, embedding and LM head /t at its head bytes (MODEL.md sections 1-2). With attention data
    parallel over ``dp`` = D ranks, everything but the routed experts is split over a rank's t/D chips
    (roofline.pass_cost)."""
    f = tf.WEIGHT_FORMATS[weight_format]
    head = tf.lm_head_params(m) * (1 if m.tied_embeddings else 2)
    c = np.asarray(chips, dtype=np.float64)
    if dp is None:
        layers = tf.per_chip(tf.non_embedding_params(m), tf.replicated_params(m), chips)
        return layers * f.bytes_per_weight + head * f.head_bytes / c
    routed = tf.non_embedding_params(m) - float(tf.weight_params_touched(m, 0.0, None, False))
    ca = c / dp
    layers = tf.per_chip(tf.non_embedding_params(m) - routed, tf.replicated_params(m), ca) + routed / c
    return layers * f.bytes_per_weight + head * f.head_bytes / ca


def memory_per_chip(m: ModelSpec, chips, batch, tokens, weight_format: str, kv_dtype: str):
    """Weights and KV cache on one of t tensor-parallel chips (MODEL.md sections 2 and 4):
    weights_per_chip + KV / min(t, h_kv) (MLA: KV whole on every chip)."""
    kv = tf.kv_cache_bytes(m, batch, tokens, tf.KV_BYTES[kv_dtype])
    return weights_per_chip(m, chips, weight_format) + kv / tf.kv_shards(m, chips)


def capacity_metrics(batch: DesignBatch, w: Workload) -> dict[str, np.ndarray]:
    """Capacity (MODEL.md section 4), checked per chip: weights + KV caches (+ the draft's where it
    lives on the target chips) + the runtime's reserve (a fraction of the capacity, for activations
    and workspace) <= capacity. Reported per chip and for the whole group (per-chip figure x chips, so
    state every chip holds whole counts once per chip), the reserve apart from what the model needs;
    the target's and the draft chip's apart. A draft model runs at the tensor parallel its heads
    allow on the chips of its group (``draft_tp``, drafters.draft_tp): a chip holding it holds its
    weights / draft_tp and its whole batch's cache / min(draft_tp, its KV heads).
    ``chip_memory_floor`` is what a chip holds however many chips share the model
    (transformer.per_chip and kv_shards at t -> inf: replicated weights, one KV head's cache, an
    MLA latent cache): where it and the reserve exceed a chip, more chips cannot help.
    With pp pipeline stages each chip holds 1/pp of the layers and of their caches (the embedding and
    head spread the same way: an approximation within a layer's share), so per-chip figures divide by
    pp, the group's count chips x pp, and the floor is the one of L stages."""
    tgt, d = w.target, w.drafter
    kvb = tf.KV_BYTES[w.kv_dtype]
    n, T = batch.n, batch.target
    B = batch.batch.astype(np.float64)
    P = batch.prompt_tokens.astype(np.float64)
    G = batch.output_tokens.astype(np.float64)
    nodes = np.where(batch.tree_nodes > 0, batch.tree_nodes, w.tree_nodes) if d.kind != "none" else np.zeros(n, int)
    on_chip = batch.draft_on_chip & d.can_use_draft_chip
    any_on = bool(on_chip.any())
    K = largest_k(w)
    t_chips = T.chips.astype(np.float64)
    t_pp = np.asarray(T.pp, dtype=np.float64)
    extra = np.maximum(K, nodes)              # draft-cache slots for the drafted tokens (chain or tree)
    d_chips = np.where(on_chip, batch.draft.chips, T.chips).astype(np.float64) if any_on else t_chips
    # the draft's weights and KV cache on one of the chips it runs on, and however many share it (t -> inf);
    # a draft model is split over the tensor parallel its heads allow on its group (draft_tp), each
    # chip of that split holding its share of the whole batch's draft cache
    d_kv, d_shards = 0.0, None
    if d.kind == "model":
        d_kv, d_shards = tf.kv_cache_bytes(d.model, B, P + G + extra, kvb), lambda c: tf.kv_shards(d.model, c)
    elif d.kind == "eagle":
        d_kv, d_shards = tf.kv_cache_bytes(eagle_head(tgt), B, P + G + extra, kvb), lambda c: tf.kv_shards(tgt, c)
    elif d.kind == "mtp":       # each module's one layer of cache (MLA: its latent, whole on every chip)
        d_kv, d_shards = (tf.kv_cache_bytes(mtp_block(tgt), B, P + G + extra, kvb, layers=tgt.mtp_layers),
                          lambda c: tf.kv_shards(tgt, c))

    def draft_per_chip(chips):
        out = draft_weight_bytes_per_chip(w, chips)
        return out + d_kv / d_shards(chips) if d_shards else out + np.zeros(n)

    d_pp = np.where(on_chip, batch.draft.pp, T.pp).astype(np.float64) if any_on else t_pp
    tp = draft_tp(d, d_chips.astype(np.int64))
    # on the draft group, or the target chips (a stage's share of the draft's layers there)
    draft_chip = draft_per_chip(tp if d.kind == "model" else d_chips) / d_pp
    here = ~on_chip                               # the draft lives on the target chips
    kv = tf.kv_cache_bytes(tgt, B, P + G, kvb)                   # memory_per_chip, at t and at t -> inf
    dp = np.where(batch.dp > 0, batch.dp, w.dp).astype(np.float64)     # attention data-parallel ranks
    if (dp > 1).any():          # a rank's t/D chips hold its B/D sequences' cache
        chip_req = (weights_per_chip(tgt, t_chips, w.dtype, dp) + kv / (dp * tf.kv_shards(tgt, t_chips / dp))) / t_pp
    else:
        chip_req = (weights_per_chip(tgt, t_chips, w.dtype) + kv / tf.kv_shards(tgt, t_chips)) / t_pp
    L = tgt.num_layers
    chip_floor = (weights_per_chip(tgt, np.inf, w.dtype) + kv / tf.kv_shards(tgt, np.inf)) / L
    if d.kind != "none" and not any_on:
        chip_req, chip_floor = chip_req + draft_chip, chip_floor + draft_per_chip(np.inf) / L
    elif d.kind != "none" and here.any():
        chip_req = chip_req + np.where(here, draft_chip, 0.0)
        chip_floor = chip_floor + np.where(here, draft_per_chip(np.inf) / L, 0.0)
    chip_reserve = T.memory_reserve_fraction * T.capacity_bytes
    chip_short = np.maximum(0.0, chip_req + chip_reserve - T.capacity_bytes)
    t_chips = t_chips * t_pp                     # the whole group from here on
    cap_t = T.capacity_bytes * t_chips
    if any_on:
        D = batch.draft
        d_chips = d_chips * d_pp
        reserve_d = np.where(on_chip, D.memory_reserve_fraction * D.capacity_bytes * d_chips, 0.0)
        req_d = draft_chip * d_chips            # d_chips is the target's where the draft lives there
        cap_d = np.where(on_chip, D.capacity_bytes * d_chips, cap_t)
        short_d = np.where(on_chip, np.maximum(0.0, req_d + reserve_d - cap_d), 0.0)
        fits = (chip_short <= 0.0) & (short_d <= 0.0)
    else:
        reserve_d = short_d = np.broadcast_to(0.0, (n,))
        req_d, cap_d, fits = draft_chip * t_chips, cap_t, chip_short <= 0.0
    return dict(fits=fits, draft_tp=tp, memory_required_bytes=chip_req * t_chips,
                memory_reserve_bytes=chip_reserve * t_chips, memory_capacity_bytes=cap_t,
                memory_shortfall_bytes=chip_short * t_chips, chip_memory_required_bytes=chip_req,
                chip_memory_shortfall_bytes=chip_short, chip_memory_floor_bytes=chip_floor,
                draft_memory_required_bytes=req_d, draft_memory_reserve_bytes=reserve_d,
                draft_memory_capacity_bytes=cap_d, draft_memory_shortfall_bytes=short_d,
                datastore_bytes=np.broadcast_to(w.datastore_bytes if d.kind == "ngram" else 0.0, (n,)))
