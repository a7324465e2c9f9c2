"""evaluate(batch, workload) -> Metrics: every design row at once (MODEL.md sections 2-4).

Everything MODEL.md section 3 says must be reported together comes out together: per-token
latency, the baseline, speedup, alpha (which one), k, tau, the draft's cost ratio c, each
phase's time, arithmetic intensity and bound, the Leviathan bound, throughput, TTFT and
request latency, and the capacity check for both models and both caches.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..specs import ModelSpec, Workload
from . import specdec
from . import transformer as tf
from .arrays import DesignBatch, HardwareArrays
from .roofline import BOUND_NAMES, OVERHEAD, StepCost, step_cost, stream_factor

TOKEN_ID_BYTES = 4.0     # int32 token ids over the draft-chip link
PROB_BYTES = 2.0         # fp16 draft probabilities (sent only when sampling, T > 0)


@dataclass(frozen=True, slots=True)
class Metrics:
    """Per-design results in SI units; ``columns()`` gives the external names and units."""

    fits: np.ndarray
    memory_required_bytes: np.ndarray
    memory_capacity_bytes: np.ndarray
    memory_shortfall_bytes: np.ndarray
    draft_memory_required_bytes: np.ndarray
    draft_memory_capacity_bytes: np.ndarray
    baseline_s_per_token: np.ndarray
    spec_s_per_token: np.ndarray
    speedup: np.ndarray
    k: np.ndarray
    alpha: np.ndarray
    tau: np.ndarray
    p_all_accepted: np.ndarray
    draft_s_per_iter: np.ndarray
    verify_s_per_iter: np.ndarray
    link_s_per_iter: np.ndarray
    iter_s: np.ndarray
    draft_cost_ratio: np.ndarray
    speedup_bound: np.ndarray
    baseline_arithmetic_intensity: np.ndarray
    verify_arithmetic_intensity: np.ndarray
    draft_arithmetic_intensity: np.ndarray
    baseline_bound: np.ndarray
    verify_bound: np.ndarray
    draft_bound: np.ndarray
    tokens_per_s: np.ndarray
    baseline_tokens_per_s: np.ndarray
    ttft_s: np.ndarray
    request_latency_s: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        """External name -> display-unit array, in the order of METRIC_COLUMNS."""
        out = {}
        for name, attr, scale in METRIC_COLUMNS:
            v = getattr(self, attr)
            if scale == "bound":
                v = BOUND_NAMES[v]
            elif scale is not None:
                v = v / scale
            out[name] = v
        return out

    def take(self, idx) -> Metrics:
        return Metrics(**{f.name: getattr(self, f.name)[idx] for f in dataclasses.fields(self)})


#: (external name, Metrics attribute, SI per display unit | None | "bound"). This is the
#: vocabulary of `dse eval --json`, study metrics and result columns.
METRIC_COLUMNS = (
    ("fits", "fits", None),
    ("memory_required_gb", "memory_required_bytes", 1e9),
    ("memory_capacity_gb", "memory_capacity_bytes", 1e9),
    ("memory_shortfall_gb", "memory_shortfall_bytes", 1e9),
    ("draft_memory_required_gb", "draft_memory_required_bytes", 1e9),
    ("draft_memory_capacity_gb", "draft_memory_capacity_bytes", 1e9),
    ("baseline_ms_per_token", "baseline_s_per_token", 1e-3),
    ("spec_ms_per_token", "spec_s_per_token", 1e-3),
    ("speedup", "speedup", None),
    ("k", "k", None),
    ("alpha", "alpha", None),
    ("tau", "tau", None),
    ("p_all_accepted", "p_all_accepted", None),
    ("draft_ms_per_iter", "draft_s_per_iter", 1e-3),
    ("verify_ms_per_iter", "verify_s_per_iter", 1e-3),
    ("link_ms_per_iter", "link_s_per_iter", 1e-3),
    ("iter_ms", "iter_s", 1e-3),
    ("draft_cost_ratio", "draft_cost_ratio", None),
    ("speedup_bound", "speedup_bound", None),
    ("baseline_arithmetic_intensity", "baseline_arithmetic_intensity", None),
    ("verify_arithmetic_intensity", "verify_arithmetic_intensity", None),
    ("draft_arithmetic_intensity", "draft_arithmetic_intensity", None),
    ("baseline_bound", "baseline_bound", "bound"),
    ("verify_bound", "verify_bound", "bound"),
    ("draft_bound", "draft_bound", "bound"),
    ("tokens_per_s", "tokens_per_s", None),
    ("baseline_tokens_per_s", "baseline_tokens_per_s", None),
    ("ttft_ms", "ttft_s", 1e-3),
    ("request_latency_ms", "request_latency_s", 1e-3),
)
#: metrics that are latencies or depend on them: NaN (null) where the design does not fit
LATENCY_METRICS = frozenset(name for name, _, _ in METRIC_COLUMNS[6:])


def _cols(hw: HardwareArrays) -> SimpleNamespace:
    """The same hardware as (n, 1) columns, to broadcast against (1, K) k candidates."""
    return SimpleNamespace(**{f.name: getattr(hw, f.name)[:, None] for f in dataclasses.fields(hw)})


def _select(mask, a: HardwareArrays, b: HardwareArrays) -> HardwareArrays:
    """Row-wise where(mask, a, b) over every field."""
    return HardwareArrays(**{f.name: np.where(mask, getattr(a, f.name), getattr(b, f.name))
                             for f in dataclasses.fields(a)})


def eagle_head(target: ModelSpec) -> ModelSpec:
    """EAGLE draft head: one decoder layer of the target's shape (Li et al. 2024, arXiv
    2401.15077); its fc(2d -> d) is added by the caller; the LM head is the target's."""
    return dataclasses.replace(target, name=target.name + "-eagle-head", kind="eagle-head",
                               num_layers=1, first_dense_layers=min(1, target.first_dense_layers))


def draft_weight_bytes(w: Workload) -> float:
    """Bytes of weights the drafter adds: a draft model's own weights; EAGLE one layer +
    fc(2d -> d) (LM head shared); Medusa H heads of d*d + d*V (Cai et al. 2024, arXiv
    2401.10774); early exit, n-gram and none add nothing."""
    return float(draft_weight_bytes_per_chip(w, 1))


def draft_weight_bytes_per_chip(w: Workload, chips):
    """draft_weight_bytes on one of t chips: a draft model shards like the target
    (transformer.per_chip: replicated MLA down-projections and router stay whole); EAGLE
    and Medusa heads divide by t."""
    d, wb = w.drafter, tf.WEIGHT_BYTES[w.dtype]
    t, c = w.target, np.asarray(chips, dtype=np.float64)
    if d.kind == "model":
        return weights_per_chip(d.model, c, w.dtype)
    if d.kind == "eagle":
        head = eagle_head(t)
        return (tf.non_embedding_params(head) + 2 * t.hidden_size ** 2) * wb / c
    if d.kind == "medusa":
        return d.heads * (t.hidden_size ** 2 + t.hidden_size * t.vocab_size) * wb / c
    return 0.0 * c


def weights_per_chip(m: ModelSpec, chips, weight_format: str):
    """Weight bytes on one of t chips: layers (W - W_rep)/t + W_rep at the format's bytes per
    weight, embedding and LM head /t at its head bytes (MODEL.md sections 1-2)."""
    f = tf.WEIGHT_FORMATS[weight_format]
    head = tf.lm_head_params(m) * (1 if m.tied_embeddings else 2)
    layers = tf.per_chip(tf.non_embedding_params(m), tf.replicated_params(m), chips)
    return layers * f.bytes_per_weight + head * f.head_bytes / np.asarray(chips, dtype=np.float64)


def memory_per_chip(m: ModelSpec, chips, batch, tokens, weight_format: str, kv_dtype: str):
    """Weights and KV cache on one of t tensor-parallel chips (MODEL.md sections 2 and 4):
    weights_per_chip + KV / min(t, h_kv) (MLA: KV whole on every chip)."""
    kv = tf.kv_cache_bytes(m, batch, tokens, tf.KV_BYTES[kv_dtype])
    return weights_per_chip(m, chips, weight_format) + kv / tf.kv_shards(m, chips)


def _k_range(w: Workload) -> int:
    d, acc = w.drafter, w.acceptance
    k_max = w.k_max
    if d.kind == "medusa":
        k_max = min(k_max, d.heads)
    if acc.kind == "per_position":
        k_max = min(k_max, len(acc.per_position))
    if w.tree_nodes:
        k_max = min(k_max, w.tree_nodes)
    return max(1, k_max)


def _tau_table(w: Workload, K: int):
    """tau and p_all for k = 0..K (index = k), from the workload's acceptance.

    Chains use the per-position rates; a tree of N nodes and depth k puts N//k (+1 for the
    first N%k levels) candidates on each level (specdec.tree_level_rates). Given tau is used
    as is, with p_all from the i.i.d. alpha it implies.
    """
    acc = w.acceptance
    taus, ps = np.ones(K + 1), np.ones(K + 1)
    if acc.kind == "tau":
        alpha = specdec.implied_alpha(np.full(K + 1, acc.tau), np.arange(K + 1))
        taus[:] = acc.tau
        ps[:] = alpha ** np.arange(K + 1)
        return taus, ps
    rates = specdec.position_rates(acc, K)
    for k in range(1, K + 1):
        r = rates[:k]
        if w.tree_nodes:
            widths = w.tree_nodes // k + (np.arange(k) < w.tree_nodes % k)
            r = specdec.tree_level_rates(r, widths)
        tau, p = specdec.tokens_per_iteration(r, np.int64(k))
        taus[k], ps[k] = tau, p
    return taus, ps


def evaluate(batch: DesignBatch, w: Workload) -> Metrics:
    """Evaluate every design of ``batch`` under workload ``w`` (vectorised; no per-design loop).

    A design without bandwidth or link gets infinite times (no warning); the study marks it
    not buildable.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return _evaluate(batch, w)


def _evaluate(batch: DesignBatch, w: Workload) -> Metrics:
    tgt, d = w.target, w.drafter
    wb, kvb = tf.WEIGHT_BYTES[w.dtype], tf.KV_BYTES[w.kv_dtype]
    fmt = tf.WEIGHT_FORMATS[w.dtype]
    n = batch.n
    T = batch.target
    B = batch.batch.astype(np.float64)
    P = batch.prompt_tokens.astype(np.float64)
    G = batch.output_tokens.astype(np.float64)
    S = P + 0.5 * G          # mean context during generation (exact for terms linear in S)
    kw = tf.step_kwargs(w.dtype, w.kv_dtype)
    cf = tf.COMPUTE_EFFICIENCY_FACTOR[fmt.compute_dtype]

    # Continuous batching (w.continuous; MODEL.md section 2, serving): B requests in flight in
    # steady state; each finishes after G tokens, so while one request decodes the other B-1
    # are replaced at (B-1)/G per step and every step also runs their prompts, P*(B-1)/(B*G)
    # prefill tokens per sequence; a new request's prefill is its own (batch 1) and waits on
    # average half a running step. Static (default): B prompts prefilled together, pure decode.
    cont = w.continuous
    share = P * (B - 1.0) / (B * G) if cont else 0.0
    x_base = share
    base = step_cost(tgt, T, batch=B, q=1.0, context=S, prefill_tokens=x_base, prefill_len=P, **kw)
    B_pre = np.ones_like(B) if cont else B
    prefill = step_cost(tgt, T, batch=B_pre, q=P, context=0.0, lm_head_last_only=True, **kw)
    wait = 0.5 * base.time_s if cont else 0.0

    on_chip = batch.draft_on_chip & d.can_use_draft_chip
    D = _select(on_chip, batch.draft, T)     # the group the drafter runs on

    # ---- capacity (MODEL.md section 4), checked per chip; reported for the whole group
    # (per-chip need x chips, so replicated weights and KV count once per chip) ----
    K = _k_range(w)
    t_chips = T.chips.astype(np.float64)
    need_t = memory_per_chip(tgt, t_chips, B, P + G, w.dtype, w.kv_dtype)

    def draft_per_chip(chips):
        out = draft_weight_bytes_per_chip(w, chips) + np.zeros(n)
        if d.kind == "model":
            out = out + tf.kv_cache_bytes(d.model, B, P + G + K, kvb) / tf.kv_shards(d.model, chips)
        elif d.kind == "eagle":
            out = out + tf.kv_cache_bytes(eagle_head(tgt), B, P + G + K, kvb) / tf.kv_shards(tgt, chips)
        return out

    d_chips = np.where(on_chip, D.chips, T.chips).astype(np.float64)
    draft_chip = draft_per_chip(d_chips)          # on the draft group, or on the target chips
    req_t = (need_t + np.where(on_chip, 0.0, draft_chip) + T.memory_reserve_fraction * T.capacity_bytes) * t_chips
    cap_t = T.capacity_bytes * t_chips
    cap_d = np.where(on_chip, D.capacity_bytes * d_chips, cap_t)
    req_d = np.where(on_chip, (draft_chip + D.memory_reserve_fraction * D.capacity_bytes) * d_chips,
                     draft_chip * t_chips)
    short = np.maximum(0.0, req_t - cap_t) + np.where(on_chip, np.maximum(0.0, req_d - cap_d), 0.0)
    fits = short <= 0.0
    ttft = prefill.time_s + wait + T.request_overhead_s

    if d.kind == "none":
        one = np.ones(n)
        zero = np.zeros(n)
        spec = base.time_s
        metrics = dict(
            baseline_s_per_token=base.time_s, spec_s_per_token=spec, speedup=one,
            k=np.zeros(n, dtype=np.int64), alpha=np.full(n, np.nan), tau=one, p_all_accepted=one,
            draft_s_per_iter=zero, verify_s_per_iter=base.time_s, link_s_per_iter=zero,
            iter_s=base.time_s, draft_cost_ratio=zero, speedup_bound=one,
            baseline_arithmetic_intensity=base.arithmetic_intensity,
            verify_arithmetic_intensity=base.arithmetic_intensity,
            draft_arithmetic_intensity=zero, baseline_bound=base.bound, verify_bound=base.bound,
            draft_bound=np.full(n, OVERHEAD), tokens_per_s=B / spec,
            baseline_tokens_per_s=B / base.time_s, ttft_s=ttft,
            request_latency_s=request_latency_s(ttft, G, spec))
        return _finish(metrics, fits, req_t, cap_t, short, req_d, cap_d)

    # ---- k candidates: (1, K) for auto rows, (n, 1) when every row fixes k ----
    fixed = batch.k > 0
    if fixed.all():
        kc = batch.k[:, None]
        K = max(K, int(batch.k.max()))
    else:
        K = max(K, int(batch.k.max()))
        kc = np.arange(1, K + 1)[None, :]
    Tc, Dc = _cols(T), _cols(D)
    Bc, Sc = B[:, None], S[:, None]
    kf = kc.astype(np.float64)

    # ---- verify: q = k+1, or tree nodes + 1 (continuous batching: + P*tau/G prefill tokens per
    # sequence, as a request now lasts G/tau iterations) ----
    tau_tab, p_tab = _tau_table(w, K)
    q_verify = (w.tree_nodes + 1.0) if w.tree_nodes else kf + 1.0
    x_verify = share[:, None] * tau_tab[kc] if cont else 0.0
    verify = step_cost(tgt, Tc, batch=Bc, q=q_verify, context=Sc, prefill_tokens=x_verify,
                       prefill_len=P[:, None], **kw)

    # ---- draft ----
    q_draft = (w.tree_nodes / kf) if w.tree_nodes else 1.0
    if d.kind in ("model", "eagle", "early-exit"):
        model = {"model": d.model, "eagle": eagle_head(tgt), "early-exit": tgt}[d.kind]
        layers = d.exit_layer if d.kind == "early-exit" else None
        one_step = step_cost(model, Dc, batch=Bc, q=q_draft, context=Sc, layers=layers, **kw)
        t_step = one_step.time_s
        if d.kind == "eagle":    # fc(2d -> d) on the concatenated feature and token embedding
            fc = 2.0 * tgt.hidden_size ** 2
            t_step = t_step + np.maximum(2 * fc * Bc * q_draft / (Tc.peak_flop_s * Tc.compute_efficiency * cf),
                                         fc * wb / (Tc.mem_bw_bytes_s * Tc.mem_efficiency
                                                              * stream_factor(Tc, fmt.dequant))) / Tc.chips
        t_draft = kf * t_step
        draft_ai, draft_bound = one_step.arithmetic_intensity, one_step.bound
    elif d.kind == "medusa":
        # one pass of k heads (each d*d + d*V) on the last hidden state, inside the verify step
        per_head = tgt.hidden_size ** 2 + tgt.hidden_size * tgt.vocab_size
        nbytes, flops = kf * per_head * wb / Tc.chips, 2.0 * Bc * kf * per_head / Tc.chips
        t_m = nbytes / (Tc.mem_bw_bytes_s * Tc.mem_efficiency * stream_factor(Tc, fmt.dequant))
        t_c = flops / (Tc.peak_flop_s * Tc.compute_efficiency * cf)
        mem_bound = t_m >= t_c
        heads = StepCost(np.maximum(t_m, t_c) + Tc.kernels_per_layer * Tc.kernel_launch_s, flops, nbytes,
                         np.where(mem_bound, t_m, 0.0), np.where(mem_bound, 0.0, t_c),
                         Tc.kernels_per_layer * Tc.kernel_launch_s)
        t_draft, draft_ai, draft_bound = heads.time_s, heads.arithmetic_intensity, heads.bound
    else:  # ngram: no weights, no HBM traffic; a fixed cost per iteration
        t_draft = np.broadcast_to(Tc.ngram_draft_s, np.broadcast_shapes(Tc.ngram_draft_s.shape, kc.shape))
        draft_ai = np.zeros_like(t_draft)
        draft_bound = np.full(t_draft.shape, OVERHEAD)

    # ---- link to a draft chip: drafts (and probabilities when sampling) one way, the
    # accepted count and next token back; two latencies per iteration ----
    on_c = on_chip[:, None]
    link_bytes = Bc * kf * TOKEN_ID_BYTES + 2 * Bc * TOKEN_ID_BYTES
    if w.temperature > 0:
        link_bytes = link_bytes + Bc * kf * tgt.vocab_size * PROB_BYTES
    with np.errstate(divide="ignore", invalid="ignore"):
        t_link = 2.0 * batch.draft_link_latency_s[:, None] + link_bytes / (0.5 * batch.draft_link_bw_bytes_s[:, None])
    t_link = np.where(on_c, t_link, 0.0)

    # ---- accounting ----
    tau, p_all = tau_tab[kc], p_tab[kc]
    t_iter, exposed = specdec.iteration_time_s(t_draft, verify.time_s, t_link, Tc.spec_overhead_s,
                                               p_all, on_c & w.overlap)
    per_token = t_iter / tau
    if fixed.all():
        idx = np.zeros(n, dtype=np.int64)
    else:
        idx = np.where(fixed, batch.k - 1, np.argmin(per_token, axis=1))

    def pick(a):
        a = np.broadcast_to(a, np.broadcast_shapes(np.shape(a), (n, kc.shape[1])))
        return np.take_along_axis(a, idx[:, None], axis=1)[:, 0]

    k = pick(np.broadcast_to(kc, (n, kc.shape[1])))
    tau, p_all, t_iter, exposed = pick(tau), pick(p_all), pick(t_iter), pick(exposed)
    t_draft, t_link, t_verify = pick(t_draft), pick(t_link), pick(verify.time_s)
    verify_ai, verify_bound = pick(verify.arithmetic_intensity), pick(verify.bound)
    draft_ai, draft_bound = pick(draft_ai), pick(draft_bound)
    # k = auto may also choose k = 0: speculation off where no k beats plain decoding (a
    # server would switch it off there); the row then reports the baseline with tau = 1.
    off = ~fixed & (t_iter / tau >= base.time_s)
    if off.any():
        k, tau, p_all = np.where(off, 0, k), np.where(off, 1.0, tau), np.where(off, 1.0, p_all)
        t_iter, t_verify = np.where(off, base.time_s, t_iter), np.where(off, base.time_s, t_verify)
        exposed, t_draft, t_link = (np.where(off, 0.0, x) for x in (exposed, t_draft, t_link))
        verify_ai = np.where(off, base.arithmetic_intensity, verify_ai)
        verify_bound = np.where(off, base.bound, verify_bound)
        draft_ai, draft_bound = np.where(off, 0.0, draft_ai), np.where(off, OVERHEAD, draft_bound)
    spec = t_iter / tau
    if w.acceptance.kind == "alpha":
        alpha = np.full(n, w.acceptance.alpha)
    elif w.tree_nodes:      # a tree's tau maps to no single chain alpha
        alpha = np.full(n, np.nan)
    else:                   # the i.i.d. alpha that gives the same tau at this k
        alpha = np.where(k > 0, specdec.implied_alpha(tau, k), np.nan)

    pre_d = np.zeros(n)
    if d.kind == "model":
        pre_d = step_cost(d.model, D, batch=B_pre, q=P, context=0.0, lm_head_last_only=True, **kw).time_s
    ttft = np.where(on_chip, np.maximum(prefill.time_s, pre_d + batch.draft_link_latency_s),
                    prefill.time_s + pre_d)
    ttft = np.where(off, prefill.time_s, ttft)       # speculation off: no draft prefill either
    ttft = ttft + T.request_overhead_s + (0.5 * np.where(off, base.time_s, t_iter) if cont else 0.0)
    metrics = dict(
        baseline_s_per_token=base.time_s, spec_s_per_token=spec,
        speedup=base.time_s / spec, k=k, alpha=alpha, tau=tau, p_all_accepted=p_all,
        draft_s_per_iter=t_draft, verify_s_per_iter=t_verify, link_s_per_iter=t_link, iter_s=t_iter,
        draft_cost_ratio=np.where(k > 0, t_draft / (np.maximum(k, 1) * base.time_s), 0.0),
        speedup_bound=tau / (1.0 + exposed / base.time_s),
        baseline_arithmetic_intensity=base.arithmetic_intensity,
        verify_arithmetic_intensity=verify_ai,
        draft_arithmetic_intensity=draft_ai, baseline_bound=base.bound,
        verify_bound=verify_bound, draft_bound=draft_bound,
        tokens_per_s=B / spec, baseline_tokens_per_s=B / base.time_s,
        ttft_s=ttft, request_latency_s=request_latency_s(ttft, G, spec))
    return _finish(metrics, fits, req_t, cap_t, short, req_d, cap_d)


def request_latency_s(ttft_s, output_tokens, s_per_token):
    """TTFT + (G - 1) x per-token latency: the prefill emits the first of the G tokens
    (MODEL.md section 3)."""
    return ttft_s + (np.asarray(output_tokens, dtype=np.float64) - 1.0) * s_per_token


def _finish(metrics, fits, req_t, cap_t, short, req_d, cap_d) -> Metrics:
    """Attach capacity results and blank every latency of a design that does not fit."""
    out = {}
    for name, attr, _ in METRIC_COLUMNS:
        if attr in metrics:
            v = np.asarray(metrics[attr])
            if name in LATENCY_METRICS and v.dtype.kind == "f":
                v = np.where(fits, v, np.nan)
            out[attr] = v
    return Metrics(fits=fits, memory_required_bytes=req_t, memory_capacity_bytes=cap_t,
                   memory_shortfall_bytes=short, draft_memory_required_bytes=req_d,
                   draft_memory_capacity_bytes=cap_d, **out)
