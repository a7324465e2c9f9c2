"""Serving under a latency SLA: each design's operating points over concurrency, aggregated or
disaggregated, and the best one that meets TTFT <= ttft and TPOT <= tpot.

Aggregated (one pool): continuous batching with chunked prefill at concurrency c (a closed loop of
c clients, dse.model.scheduler): TPOT = the mean iteration over tau, TTFT under load, and c G /
(TTFT + (G - 1) TPOT) output tokens/s over the design's chips (each client's cycle, Little's law). k (or the tree) is chosen at each c as for any batch; where no k
beats plain decoding speculation is off and the point says so.

Disaggregated (prefill and decode pools of the same design, DistServe / Splitwise / NVIDIA Dynamo):
d decode instances decode only (static steps at concurrency c, their own speculation), p prefill
instances prefill only, at the token budget per pass; a request's KV cache (P tokens) moves from
its prefill instance to its decode instance over the scale-up link within a domain, else the
scale-out network. Each decode instance finishes r = c / ((G - 1) TPOT) requests a second; a prefill
instance takes lam = r d / p of them, each occupying it S = t(b P) / b (b = budget / P prompts a
pass), so TTFT = t(P) + M/D/1 wait at lam + the KV transfer + the request's host cost. The pools
(p, d) are chosen among 1..POOL_MAX each: output tokens/s per chip = d r G / ((p + d) chips).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workload.spec import Sla, Workload
from . import scheduler
from . import transformer as tf
from .arrays import DesignBatch
from .roofline import step_cost

#: concurrencies tried per design (requests in flight per instance)
CONCURRENCY = np.array([1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024])
#: prefill and decode instances per disaggregated deployment: 1..POOL_MAX each (AIConfigurator's
#: search, and a deployment of a few nodes)
POOL_MAX = 8


def chips_in_design(batch: DesignBatch) -> np.ndarray:
    """Every chip of a design: the target's tensor-parallel group x its pipeline stages, plus a
    draft chip group where it has one."""
    t = batch.target
    own = np.asarray(t.chips, dtype=np.float64) * np.asarray(t.pp, dtype=np.float64)
    return own + np.where(batch.draft_on_chip, np.asarray(batch.draft.chips, dtype=np.float64), 0.0)


def _at_concurrency(batch: DesignBatch, levels: np.ndarray) -> DesignBatch:
    """Every design at every concurrency, design-major: row i * C + j is design i at levels[j]."""
    n, C = batch.n, levels.size
    rep = batch.take(np.repeat(np.arange(n), C))
    return dataclasses.replace(rep, batch=np.tile(levels, n))


def speculation_text(k, tree_nodes, drafter_label: str) -> np.ndarray:
    """What speculation a point uses: 'none' (no drafter), 'off' (k = auto chose plain decoding),
    '<drafter> k=<k>' or '<drafter> tree=<nodes>'."""
    k = np.asarray(k)
    nodes = np.asarray(tree_nodes)
    if drafter_label in ("", "none"):
        return np.full(k.shape, "none", dtype=object)
    on = np.where(nodes > 0, np.char.add(f"{drafter_label} tree=", nodes.astype(str)),
                  np.char.add(f"{drafter_label} k=", k.astype(str)))
    return np.where(k > 0, on, "off").astype(object)


def aggregated_points(batch: DesignBatch, w: Workload, evaluate, levels=CONCURRENCY) -> dict[str, np.ndarray]:
    """The aggregated pool's operating points, (n, C) arrays: ttft_s, tpot_s, tokens/s per chip and
    per user, energy per token, speculation, and whether the point fits in memory."""
    levels = np.asarray(levels, dtype=np.int64)
    m = evaluate(_at_concurrency(batch, levels), dataclasses.replace(w, continuous=True, sla=None))
    shape = (batch.n, levels.size)
    tpot = m.spec_s_per_token.reshape(shape)
    ttft = m.ttft_s.reshape(shape)
    chips = chips_in_design(batch)[:, None]
    G = batch.output_tokens.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        # a client's cycle is TTFT + (G - 1) TPOT for G tokens (Little's law over c clients)
        per_chip = levels[None, :] * G / (ttft + (G - 1.0) * tpot) / chips
    return dict(ttft_s=ttft, tpot_s=tpot, tokens_per_s_per_chip=per_chip,
                tokens_per_s_per_user=1.0 / tpot, energy_j_per_token=m.energy_j_per_token.reshape(shape),
                speculation=speculation_text(m.k, m.tree_nodes, w.drafter.label).reshape(shape),
                fits=m.fits.reshape(shape), concurrency=np.broadcast_to(levels, shape))


def _prefill_pass_s(batch: DesignBatch, w: Workload, prompts) -> np.ndarray:
    """One prefill-only pass of ``prompts`` whole prompts of P tokens (static prefill, the last
    position's logits each) on the design's target chips."""
    kw = dict(tf.step_kwargs(w.dtype, w.kv_dtype), ep=np.where(batch.ep > 0, batch.ep, w.ep),
              dp=np.where(batch.dp > 0, batch.dp, w.dp))
    return step_cost(w.target, batch.target, batch=np.asarray(prompts, dtype=np.float64),
                     q=batch.prompt_tokens.astype(np.float64), context=0.0, lm_head_last_only=True, energy=False,
                     **kw).time_s


def kv_transfer_s(batch: DesignBatch, w: Workload, instances) -> np.ndarray:
    """A request's KV cache (P tokens, every layer) from a prefill instance to a decode instance,
    each chip sending its share one way (the link and network rates are both directions added),
    (n, len(instances)): over the scale-up link where ``instances`` x
    the design's chips fit in one scale-up domain, else the scale-out network; inf where the design
    has neither."""
    t = batch.target
    col = lambda x: np.broadcast_to(np.asarray(x, dtype=np.float64), (batch.n,))[:, None]     # noqa: E731
    kv = col(tf.kv_cache_bytes(w.target, 1.0, batch.prompt_tokens, tf.KV_BYTES[w.kv_dtype]))
    chips = col(t.chips) * col(t.pp)
    inside = np.asarray(instances, dtype=np.float64)[None, :] * chips <= col(t.scale_up_domain)
    bw = 0.5 * np.where(inside, col(t.link_bw_bytes_s) * col(t.link_efficiency),       # one way of both
                        col(t.scale_out_bw_bytes_s) * col(t.scale_out_efficiency)) * chips
    lat = np.where(inside, col(t.link_latency_s), col(t.scale_out_latency_s))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bw > 0, lat + kv / bw, np.inf)          # (n, len(instances))


def disaggregated_points(batch: DesignBatch, w: Workload, evaluate, levels=CONCURRENCY) -> dict[str, np.ndarray]:
    """The disaggregated deployment's points, (n, C, POOL_MAX^2) over (concurrency of a decode
    instance, prefill instances p, decode instances d): module docstring."""
    levels = np.asarray(levels, dtype=np.int64)
    m = evaluate(_at_concurrency(batch, levels), dataclasses.replace(w, continuous=False, sla=None))
    n, C = batch.n, levels.size
    tpot = m.spec_s_per_token.reshape(n, C)
    P = batch.prompt_tokens.astype(np.float64)
    G = batch.output_tokens.astype(np.float64)
    per_pass = np.maximum(np.floor(w.max_batched_tokens / np.maximum(P, 1.0)), 1.0)     # prompts a full pass
    one = _prefill_pass_s(batch, w, 1.0)
    busy = _prefill_pass_s(batch, w, per_pass) / per_pass
    p, d = np.meshgrid(np.arange(1, POOL_MAX + 1), np.arange(1, POOL_MAX + 1), indexing="ij")
    p, d = p.ravel().astype(np.float64), d.ravel().astype(np.float64)          # (K,)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = levels[None, :, None] / ((G[:, None, None] - 1.0) * tpot[..., None])        # per decode instance
        rate = np.where(G[:, None, None] > 1.0, rate, levels[None, :, None] / tpot[..., None])
        lam = rate * d / p
        kv = kv_transfer_s(batch, w, p + d)[:, None, :]                                 # (n, 1, K)
        ttft = (one[:, None, None] + scheduler.md1_wait_s(lam, busy[:, None, None]) + kv
                + np.asarray(batch.target.request_overhead_s)[:, None, None])
        chips = chips_in_design(batch)[:, None, None]
        per_chip = d * rate * G[:, None, None] / ((p + d) * chips)         # G tokens a request
    shape = (n, C, p.size)
    spec = speculation_text(m.k, m.tree_nodes, w.drafter.label).reshape(n, C)
    return dict(ttft_s=ttft, tpot_s=np.broadcast_to(tpot[..., None], shape), tokens_per_s_per_chip=per_chip,
                tokens_per_s_per_user=np.broadcast_to(1.0 / tpot[..., None], shape),
                energy_j_per_token=np.broadcast_to(m.energy_j_per_token.reshape(n, C)[..., None], shape),
                speculation=np.broadcast_to(spec[..., None], shape),
                fits=np.broadcast_to(m.fits.reshape(n, C)[..., None], shape),
                concurrency=np.broadcast_to(levels[None, :, None], shape),
                prefill_instances=np.broadcast_to(p, shape), decode_instances=np.broadcast_to(d, shape))


def best_point(points: dict[str, np.ndarray], sla: Sla) -> dict[str, np.ndarray]:
    """Per design, the point of most output tokens/s per chip with TTFT <= sla.ttft_s and TPOT <=
    sla.tpot_s (ties: the first, the lowest concurrency); NaN (and 'met' False) where none meets it."""
    n = points["tpot_s"].shape[0]
    flat = {k: np.reshape(v, (n, -1)) for k, v in points.items()}
    ok = (flat["fits"] & np.isfinite(flat["tokens_per_s_per_chip"]) & (flat["ttft_s"] <= sla.ttft_s)
          & (flat["tpot_s"] <= sla.tpot_s))
    score = np.where(ok, flat["tokens_per_s_per_chip"], -np.inf)
    i = np.argmax(score, axis=1)
    met = ok[np.arange(n), i]
    out = {}
    for k, v in flat.items():
        col = v[np.arange(n), i]
        if v.dtype.kind == "f":
            col = np.where(met, col, np.nan)
        elif v.dtype.kind == "O":
            col = np.where(met, col, "")
        out[k] = col
    out["met"] = met
    return out


def sla_picks(batch: DesignBatch, w: Workload, evaluate, sla: Sla, mode: str = "best",
              levels=CONCURRENCY) -> dict[str, dict[str, np.ndarray]]:
    """The best aggregated and/or disaggregated operating point per design under ``sla`` (``mode``
    agg, disagg or best: both), by mode (best_point's fields)."""
    picks = {}
    if mode in ("agg", "best"):
        picks["agg"] = best_point(aggregated_points(batch, w, evaluate, levels), sla)
    if mode in ("disagg", "best"):
        picks["disagg"] = best_point(disaggregated_points(batch, w, evaluate, levels), sla)
    return picks


def sla_metrics(batch: DesignBatch, w: Workload, evaluate, sla: Sla, mode: str = "best",
                levels=CONCURRENCY, picks: dict | None = None) -> dict[str, np.ndarray]:
    """The best operating point per design under ``sla``, aggregated, disaggregated or the better of
    the two (``mode``; or of ``picks``, sla_picks' result, when given): Metrics' sla_* attributes (SI),
    with 'sla_serving' naming the winner, and _deployment_chips: the chips of one deployment at that
    point (one instance, or p + d of them)."""
    picks = picks if picks is not None else sla_picks(batch, w, evaluate, sla, mode, levels)
    names = list(picks)
    score = np.stack([np.where(picks[k]["met"], picks[k]["tokens_per_s_per_chip"], -np.inf) for k in names])
    win = np.argmax(score, axis=0)          # ties: aggregated (listed first)
    n = batch.n

    def take(key, fill):
        vals = [np.broadcast_to(picks[k].get(key, np.full(n, fill)), (n,)) for k in names]
        return np.choose(win, vals) if len(vals) > 1 else vals[0]

    met = take("met", False)
    serving = np.where(met, np.asarray(names, dtype=object)[win], "")
    prefill = take("prefill_instances", np.nan)
    decode = take("decode_instances", np.nan)
    instances = np.where(serving == "disagg", prefill + decode, np.where(met, 1.0, np.nan))
    return dict(sla_tokens_per_s_per_chip=take("tokens_per_s_per_chip", np.nan),
                _deployment_chips=instances * chips_in_design(batch),
                sla_concurrency=take("concurrency", 0).astype(np.float64) * np.where(met, 1.0, np.nan),
                sla_tokens_per_s_per_user=take("tokens_per_s_per_user", np.nan),
                sla_ttft_s=take("ttft_s", np.nan), sla_tpot_s=take("tpot_s", np.nan),
                sla_energy_j_per_token=take("energy_j_per_token", np.nan),
                sla_speculation=np.where(met, take("speculation", ""), "").astype(str),
                sla_serving=serving.astype(str),
                sla_prefill_share=np.where(serving == "disagg", prefill / (prefill + decode), np.nan))
