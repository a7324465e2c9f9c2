"""The latency and energy terms of every design (MODEL.md sections 2, 3 and 5): the baseline
decode step, the prefill and TTFT, the draft (draft model, EAGLE head, MTP module, early exit,
Medusa and Hydra heads, n-gram lookup; chains and trees), the verify pass, the draft-chip link, the iteration
and its software share, k = auto over the candidates, the acceptance band, request latency under
static or continuous batching, and the energy per token priced from the iteration's ingredients."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from ..workload.spec import Workload
from . import scheduler, spec_iteration, specdec
from . import transformer as tf
from .arrays import DesignBatch, HardwareArrays
from .drafters import draft_tp, eagle_fc_params, eagle_head, medusa_head_params, mtp_block, mtp_proj_params
from .k_auto import BOUND_MARGIN, auto_k, auto_k_bound, concat_terms
from .roofline import OVERHEAD, StepCost, step_cost, stream_factor
from .tau import acceptance_terms, largest_k, tau_table, tree_terms

TOKEN_ID_BYTES = 4.0     # int32 token ids over the draft-chip link
PROB_BYTES = 2.0         # fp16 draft probabilities (sent only when sampling, T > 0)
MASK_BYTES = 1.0         # one byte per element of a tree's attention mask copied from the host

#: (distinct) rows from which k = auto runs one k at a time with a bound (``k_auto.auto_k``); fewer
#: take every k in one broadcast pass, where the per-k Python overhead would dominate
MIN_ROWS_K_LOOP = 16384
#: k = auto first searches k = 1..K_FIRST; a larger k (up to the workload's k_max, 16 by default)
#: is evaluated only where a lower bound says it can beat that best: where acceptance is high
#: and drafting cheap (at alpha 0.9, a 70B fp8 target with a 1B draft on an H200 takes k = 13)
K_FIRST = 8


def _cols(hw: HardwareArrays) -> SimpleNamespace:
    """The same hardware as (n, 1) columns, to broadcast against (1, K) k candidates."""
    return SimpleNamespace(**{f.name: getattr(hw, f.name)[:, None] for f in dataclasses.fields(hw)})


def _select(mask, a: HardwareArrays, b: HardwareArrays) -> HardwareArrays:
    """Row-wise where(mask, a, b) over every field (``a`` or ``b`` itself when the mask is uniform)."""
    if not mask.any():
        return b
    if mask.all():
        return a
    return HardwareArrays(**{f.name: np.where(mask, getattr(a, f.name), getattr(b, f.name))
                             for f in dataclasses.fields(a)})


def latency_metrics(batch: DesignBatch, w: Workload, k_bound: bool = True) -> dict[str, np.ndarray]:
    """Every latency metric (Metrics attribute -> array), with the energy ingredients energy_metrics
    prices; dse.model.evaluate blanks those of designs that do not fit."""
    tgt, d = w.target, w.drafter
    if w.tree is not None and w.tree.depth and d.kind != "none":    # a framework's tree or chain: its own depth
        batch = dataclasses.replace(batch, k=np.full(batch.n, w.tree.depth))
    zero_n = np.broadcast_to(0.0, (batch.n,))
    wb = tf.WEIGHT_BYTES[w.dtype]
    fmt = tf.WEIGHT_FORMATS[w.dtype]
    n = batch.n
    T = batch.target
    B = batch.batch.astype(np.float64)
    P = batch.prompt_tokens.astype(np.float64)
    G = batch.output_tokens.astype(np.float64)
    S = P + 0.5 * G          # mean context during generation (exact for terms linear in S)
    kw = tf.step_kwargs(w.dtype, w.kv_dtype)
    E = np.where(batch.ep > 0, batch.ep, w.ep)      # expert-parallel ranks per design (the target's steps)
    DP = np.where(batch.dp > 0, batch.dp, w.dp)     # and attention data-parallel ranks
    if (DP > 1).any():
        kw_t, kw_tc = dict(kw, ep=E, dp=DP), dict(kw, ep=E[:, None], dp=DP[:, None])
    else:
        kw_t, kw_tc = dict(kw, ep=E), dict(kw, ep=E[:, None])      # rows, and (n, 1) columns for k sweeps
    cf = tf.COMPUTE_EFFICIENCY_FACTOR[fmt.compute_dtype]
    emulated = tf.EMULATED_DEQUANT.get(fmt.compute_dtype, "")
    nodes = np.where(batch.tree_nodes > 0, batch.tree_nodes, w.tree_nodes) if d.kind != "none" else np.zeros(n, int)
    is_tree = nodes > 0

    # Continuous batching (w.continuous; MODEL.md section 2, serving): B requests in flight in
    # steady state; each finishes after G tokens, so while one request decodes the other B-1
    # are replaced at (B-1)/G per step and every step also runs their prompts, P*(B-1)/(B*G)
    # prefill tokens per sequence (a speculative iteration: tau times that, in the verify pass
    # and in the draft's own prefill). A new prompt is prefilled in chunks inside those same
    # iterations, at the token budget the decode tokens leave, behind the other arriving prompts
    # (dse.model.scheduler, ``_chunked_ttft``). Static (default): B prompts prefilled together,
    # pure decode.
    cont = w.continuous
    share = P * (B - 1.0) / (B * G) if cont else 0.0
    x_base = share
    base = step_cost(tgt, T, batch=B, q=1.0, context=S, prefill_tokens=x_base, prefill_len=P, **kw_t)
    # static batching: the B prompts prefilled together before decoding
    prefill = None if cont else step_cost(tgt, T, batch=B, q=P, context=0.0, lm_head_last_only=True, **kw_t)

    def chunked_ttft(q, tree, s_token, t_iter, t_verify, extra=0.0):
        """Continuous batching's TTFT before the request's host cost (dse.model.scheduler, closed
        loop of B clients): the running iteration with its target pass replaced by one carrying
        min(C, P) prompt tokens (the prompt's own iterations) or a full chunk of C (the prompt
        server's pace while prompts queue), C = budget - B q; ``extra`` (a fraction of C) is the
        drafter's own prefill of a chunk."""
        cap = scheduler.prefill_capacity(w.max_batched_tokens, B, q)
        times = []
        for x in (scheduler.chunk_tokens(cap, P), np.clip(cap, 0.0, None)):
            full = step_cost(tgt, T, batch=B, q=q, context=S, tree_mask=tree, prefill_tokens=x / B, prefill_len=P,
                             energy=False, **kw_t)
            times.append(t_iter - t_verify + full.time_s + extra * x)
        own, busy = scheduler.prompt_times_s(P, cap, *times)
        return scheduler.closed_loop_ttft_s(B, G, s_token, t_iter, own, busy, poisson=w.arrivals == "poisson")

    on_chip = batch.draft_on_chip & d.can_use_draft_chip
    D = _select(on_chip, batch.draft, T)     # the group the drafter runs on
    if d.kind == "model":       # a draft model's steps at the tensor parallel its heads allow there (draft_tp)
        tp = draft_tp(d, D.chips)
        if (tp != D.chips).any():
            D = dataclasses.replace(D, chips=tp)
    K = largest_k(w)
    ttft = (chunked_ttft(1.0, False, base.time_s, base.time_s, base.time_s) if cont else prefill.time_s) \
        + T.request_overhead_s

    # ---- energy (MODEL.md section 5): each step's memory and link energy and its FLOPs, per group
    # (energy_metrics prices the FLOPs and adds busy power per design, after any dedupe gather) ----
    energy_in = dict(_e_base=np.broadcast_to(base.energy_j, (n,)), _fl_base=np.broadcast_to(base.group_flops_lin, (n,)),
                     _fa_base=np.broadcast_to(base.group_flops_att, (n,)))
    if not cont:        # static batching: the B prompts' prefill, charged per output token (energy_metrics)
        energy_in.update(_e_pre=np.broadcast_to(prefill.energy_j, (n,)), _t_pre=np.broadcast_to(prefill.time_s, (n,)),
                         _fl_pre=np.broadcast_to(prefill.group_flops_lin, (n,)),
                         _fa_pre=np.broadcast_to(prefill.group_flops_att, (n,)))

    if d.kind == "none":
        one = np.ones(n)
        zero = np.zeros(n)
        spec = base.time_s
        energy_in.update(_e_iter=energy_in["_e_base"], _fl_t=energy_in["_fl_base"], _fa_t=energy_in["_fa_base"],
                         _fl_d=zero, _fa_d=zero)
        return dict(
            baseline_s_per_token=base.time_s, spec_s_per_token=spec, overhead_s_per_token=base.t_fixed_s + zero,
            speedup=one,
            k=np.zeros(n, dtype=np.int64), alpha=np.full(n, np.nan), tau=one, p_all_accepted=one,
            p_window=one, tree_nodes=np.zeros(n, dtype=np.int64), tree_shape=np.full(n, ""),
            rank_profile=np.full(n, ""),
            draft_s_per_iter=zero, verify_s_per_iter=base.time_s, link_s_per_iter=zero,
            iter_s=base.time_s, draft_cost_ratio=zero, speedup_bound=one, tau_low=one, tau_high=one,
            speedup_low=one, speedup_high=one, spec_s_per_token_low=spec, spec_s_per_token_high=spec,
            acceptance_source=np.full(n, "none"),
            baseline_arithmetic_intensity=base.arithmetic_intensity,
            verify_arithmetic_intensity=base.arithmetic_intensity,
            draft_arithmetic_intensity=zero, baseline_bound=base.bound, verify_bound=base.bound,
            draft_bound=np.full(n, OVERHEAD), tokens_per_s=B / spec,
            baseline_tokens_per_s=B / base.time_s, ttft_s=ttft,
            request_latency_s=request_latency_s(ttft, G, spec), **energy_in)

    # ---- k candidates: 1..K for auto rows, the row's k where fixed. For a tree, k is its depth
    # bound. ----
    fixed = batch.k > 0
    all_fixed = bool(fixed.all())
    K_auto = K                  # the largest k an auto row may take, whatever k other rows fix
    K = max(K, int(batch.k.max()))
    Tc = _cols(T)
    Dc = Tc if D is T else _cols(D)
    Bc, Sc = B[:, None], S[:, None]
    # the format's math and streaming on the target chips (weight-only where they lack its units),
    # for the EAGLE fc and Medusa heads
    if T.weight_math_native.all():
        cf_t, sf_t = cf, stream_factor(Tc, fmt.dequant)
    else:
        cf_t = np.where(Tc.weight_math_native, cf, 1.0)
        sf_t = np.where(Tc.weight_math_native, stream_factor(Tc, fmt.dequant), stream_factor(Tc, emulated))
    overlapping = bool(w.overlap and on_chip.any())
    any_tree = bool(is_tree.any())
    # chain-only batches keep the chain's arrays (no per-row selection): the common, fast path
    tree_c = is_tree[:, None] if any_tree else False
    nodes_c = nodes[:, None]
    on_c = on_chip[:, None]
    any_on = bool(on_chip.any())
    tree_depth = int(batch.k.max()) if all_fixed else K      # deepest tree any row may use
    tau_tab, p_tab, win_tab = tau_table(w, K)

    def tree_or(a, b):
        """np.where(tree rows, a(), b): ``a`` a function, computed only where some row is a tree."""
        return np.where(tree_c, a(), b) if any_tree else b

    # ---- a draft model, EAGLE head, MTP module or early exit: one step per drafted token (k-independent) ----
    model_draft = d.kind in ("model", "eagle", "mtp", "early-exit")
    head_like = d.kind in ("eagle", "mtp")          # a head on the target's features, inside the iteration
    if model_draft:
        model = (d.model if d.kind == "model" else eagle_head(tgt, d.meth) if d.kind == "eagle"
                 else mtp_block(tgt) if d.kind == "mtp" else tgt)
        layers = d.exit_layer if d.kind == "early-exit" else None

        def draft_step(q, x=0.0, tree=False):
            """One autoregressive draft step over q positions per sequence, with x prompt tokens
            per sequence riding along (continuous batching: the draft's share of the arriving
            prompts). A draft model is a step of the engine (its kernels + the runtime's per-step
            cost); an EAGLE head runs inside the speculative iteration, whose host work is
            t_spec_overhead: its step is its kernels, its fc(2d -> d), the per-sequence sampling
            (top-k) cost and the runtime's draft_step_overhead (the loop around a head step, paid
            by an eager runtime). A tree's step (any drafter) also pays draft_step_overhead once:
            the top-k expansion of the depth's nodes into the next level (mask, positions).

            An MTP step (chained: the one module N times) is priced like an EAGLE step on its own
            parts (arXiv 2412.19437 section 2.2): one pass of ``mtp_block`` (a block of the target's
            kind: MLA + the routed experts its B*q tokens touch + the shared expert + router,
            roofline.step_cost) with the shared LM head (V*d read once per step, 2*V*d FLOPs per
            position), plus its eh_proj (2d -> d) in place of EAGLE's fc; no embedding of its own.
            DeepSeek-V3 fp8 at batch 1 on 8 chips: (187.1M + 9 x 44.04M + 1.8M + 926.7M + 102.8M) B
            = 1.615 GB a step, 0.217 GB a chip, 197.4 us with its kernels (tests/model/test_mtp.py)."""
            eagle = head_like
            # the target's own layers (early exit, an MoE EAGLE layer) keep its expert parallel
            c = step_cost(model, Dc, batch=Bc, q=q, context=Sc, layers=layers, step_overhead=not eagle,
                          prefill_tokens=x, prefill_len=P[:, None], **(kw if d.kind == "model" else kw_tc))
            if eagle or tree:       # (a tree's steps are used on tree rows only)
                h = Dc.draft_step_overhead_s
                c = c._replace(time_s=c.time_s + h, t_overhead_s=c.t_overhead_s + h, t_fixed_s=c.t_fixed_s + h)
            if not eagle:
                return c
            # fc(2d -> d) (EAGLE-3: 3d -> d) on the features; MTP's eh_proj (2d -> d)
            fc = float(mtp_proj_params(tgt) if d.kind == "mtp" else eagle_fc_params(tgt, d.meth))
            f_c = 2 * fc * Bc * (q + x) / (Tc.peak_flop_s * Tc.compute_efficiency * cf_t) / Tc.chips
            f_m = fc * wb / (Tc.mem_bw_bytes_s * Tc.mem_efficiency * sf_t) / Tc.chips
            seq = Bc * Dc.sequence_overhead_s
            return c._replace(time_s=c.time_s + np.maximum(f_c, f_m) + seq, t_overhead_s=c.t_overhead_s + seq,
                              t_fixed_s=c.t_fixed_s + seq, energy_j=c.energy_j + fc * wb * Tc.mem_j_per_byte,
                              group_flops_lin=c.group_flops_lin + 2 * fc * Bc * (q + x))

        one_step = draft_step(1.0)
        one_ai, one_bound = one_step.arithmetic_intensity, one_step.bound

    def hydra_step(q):
        """One Hydra head over q positions per sequence: its d*d + d*V weights read once, 2 FLOPs
        per weight and position, a layer's kernels and the runtime's draft-step cost (the heads'
        extra input, the drafted prefix, is not counted; arXiv 2402.05109)."""
        per_head = medusa_head_params(tgt)
        nbytes = per_head * wb / Tc.chips
        flops = 2.0 * Bc * q * per_head / Tc.chips
        t_m = nbytes / (Tc.mem_bw_bytes_s * Tc.mem_efficiency * sf_t)
        t_c = flops / (Tc.peak_flop_s * Tc.compute_efficiency * cf_t)
        mem_bound = t_m >= t_c
        fixed = Tc.kernels_per_layer * Tc.kernel_launch_s + Tc.draft_step_overhead_s + 0.0 * t_m
        return StepCost(np.maximum(t_m, t_c) + fixed, flops, nbytes, np.where(mem_bound, t_m, 0.0),
                        np.where(mem_bound, 0.0, t_c), fixed, fixed, Tc.chips * nbytes * Tc.mem_j_per_byte,
                        Tc.chips * flops, 0.0)

    def terms(kc, energy: bool = True) -> SimpleNamespace:
        """Every k-dependent term at k candidates ``kc``: (1, b) for every row, or (n, 1); without
        ``energy`` (choosing k, auto_k) the energy terms are not computed (e_iter NaN)."""
        kf = kc.astype(np.float64)
        # ---- acceptance: chains by Leviathan / per-position rates; trees by their best shape ----
        tau, p_all, p_win = tau_tab[kc], p_tab[kc], win_tab[kc]
        level = step_rows = None
        if any_tree:
            level = np.broadcast_to((np.arange(K) < kc[..., None]).astype(np.int64), kc.shape + (K,))
            t_tau, t_deep, t_win, t_shape, t_rows = tree_terms(w, nodes_c, kc, K, tree_depth)
            tau, p_all, p_win = (np.where(tree_c, a, b) for a, b in ((t_tau, tau), (t_deep, p_all), (t_win, p_win)))
            # nodes per depth, and the rows each draft step of a framework's tree processes (as it drafts), (.., K)
            step_rows = np.where(tree_c[..., None], t_rows.astype(np.int64), level)
            level = np.where(tree_c[..., None], t_shape.astype(np.int64), level)

        # ---- verify: q = k+1, or tree nodes + 1 under a tree mask (continuous batching: + P*tau/G
        # prefill tokens per sequence, as a request now lasts G/tau iterations) ----
        q_verify = tree_or(lambda: nodes_c + 1.0, kf + 1.0)
        x_verify = share[:, None] * tau if cont else 0.0
        verify = step_cost(tgt, Tc, batch=Bc, q=q_verify, context=Sc, tree_mask=tree_c, prefill_tokens=x_verify,
                           prefill_len=P[:, None], energy=energy, **kw_tc)

        # ---- draft ----
        per_k = None        # one draft step's time where the draft time is k times it
        # continuous batching: a draft model or EAGLE head prefills its share of the prompts that
        # arrive per iteration, tau times a step's, in its first step (early exit shares the
        # target's cache: the verify pass fills it)
        x_draft = x_verify if cont and d.kind in ("model", "eagle", "mtp") else 0.0
        # the drafter's memory and link energy (J) and FLOPs per iteration (host-side n-gram lookups: outside
        # the model), on the group it runs on
        e_draft = fl_draft = fa_draft = 0.0
        # an EAGLE head re-runs over the verified positions to rebuild its features from the target's
        # (SGLang forward_draft_extend_after_decode, num_steps + 1 positions a sequence; vLLM
        # EagleProposer.propose's first pass over the verified tokens): its first draft pass. So does
        # an MTP module, which these stacks run through the same EAGLE worker (SGLang NEXTN)
        extend = d.kind in ("eagle", "mtp")
        if model_draft:
            per_k = one_step.time_s
            t_draft = kf * one_step.time_s
            fixed_draft = kf * one_step.t_fixed_s
            e_draft, fl_draft, fa_draft = (kf * one_step.energy_j, kf * one_step.group_flops_lin,
                                           kf * one_step.group_flops_att)
            draft_ai, draft_bound = np.broadcast_to(one_ai, t_draft.shape), np.broadcast_to(one_bound, t_draft.shape)
            if extend or (cont and d.kind == "model"):
                # an EAGLE head's (and an MTP module's) first pass is its draft extend over the k+1
                # verified positions
                first = draft_step(kf + 1.0 if extend else 1.0, x_draft)
                chain = StepCost(*((kf - 1.0) * a + b for a, b in zip(one_step, first)))
                t_draft, fixed_draft = chain.time_s, chain.t_fixed_s
                draft_ai, draft_bound = chain.arithmetic_intensity, chain.bound
                e_draft, fl_draft, fa_draft = chain.energy_j, chain.group_flops_lin, chain.group_flops_att
            if any_tree:
                # a tree: one step per depth, over as many positions as that depth holds (EAGLE-2);
                # an EAGLE head's first is its extend over the k+1 verified positions, which drafts
                # depth 1, and step i > 0 runs the nodes of depth i to draft depth i+1
                # (SGLang forward_draft_extend_after_decode then draft_forward; the deepest level is
                # never run). A framework's tree (w.tree): each draft step over the rows it processes
                # (dse.model.framework_trees), an EAGLE head's first its extend as above
                if w.tree is not None and w.tree.nodes:
                    rows = [kf + 1.0 if extend and i == 0 else step_rows[..., i] for i in range(K)]
                    used = [step_rows[..., i] > 0 for i in range(K)]
                else:
                    rows = [kf + 1.0] + [level[..., i - 1] for i in range(1, K)] if extend else \
                        [level[..., i] for i in range(K)]
                    used = [level[..., i] > 0 for i in range(K)]
                parts = [draft_step(np.maximum(r, 1).astype(np.float64), x_draft if i == 0 else 0.0, tree=True)
                         for i, r in enumerate(rows)]
                tot = [sum(np.where(u, getattr(c, f), 0.0) for c, u in zip(parts, used)) for f in StepCost._fields]
                tree_cost = StepCost(*tot)
                t_draft = np.where(tree_c, tree_cost.time_s, t_draft)
                fixed_draft = np.where(tree_c, tree_cost.t_fixed_s, fixed_draft)
                e_draft = np.where(tree_c, tree_cost.energy_j, e_draft)
                fl_draft = np.where(tree_c, tree_cost.group_flops_lin, fl_draft)
                fa_draft = np.where(tree_c, tree_cost.group_flops_att, fa_draft)
                draft_ai = np.where(tree_c, tree_cost.arithmetic_intensity, draft_ai)
                draft_bound = np.where(tree_c, tree_cost.bound, draft_bound)
        elif d.kind == "hydra":
            # sequentially dependent heads (Hydra): head i drafts depth i, one step per depth over its
            # nodes (a chain: one position), each step its weights, its kernels and the runtime's
            # draft-step cost
            head = hydra_step(1.0)
            per_k = head.time_s
            t_draft = kf * per_k
            fixed_draft = kf * head.t_fixed_s
            e_draft, fl_draft = kf * head.energy_j, kf * head.group_flops_lin
            draft_ai = np.broadcast_to(head.arithmetic_intensity, t_draft.shape)
            draft_bound = np.broadcast_to(head.bound, t_draft.shape)
            if any_tree:
                parts = [hydra_step(np.maximum(level[..., i], 1).astype(np.float64)) for i in range(K)]
                used = [level[..., i] > 0 for i in range(K)]
                tree_cost = StepCost(*[sum(np.where(u, getattr(c, f), 0.0) for c, u in zip(parts, used))
                                       for f in StepCost._fields])
                t_draft = np.where(tree_c, tree_cost.time_s, t_draft)
                fixed_draft = np.where(tree_c, tree_cost.t_fixed_s, fixed_draft)
                e_draft = np.where(tree_c, tree_cost.energy_j, e_draft)
                fl_draft = np.where(tree_c, tree_cost.group_flops_lin, fl_draft)
                draft_ai = np.where(tree_c, tree_cost.arithmetic_intensity, draft_ai)
                draft_bound = np.where(tree_c, tree_cost.bound, draft_bound)
        elif d.kind == "medusa":
            # all H heads (each d*d + d*V) on every verified position, inside the verify pass:
            # their weights are read once per pass, their FLOPs scale with the positions
            per_head = medusa_head_params(tgt)
            nbytes = d.heads * per_head * wb / Tc.chips
            flops = 2.0 * Bc * q_verify * d.heads * per_head / Tc.chips
            t_m = nbytes / (Tc.mem_bw_bytes_s * Tc.mem_efficiency * sf_t)
            t_c = flops / (Tc.peak_flop_s * Tc.compute_efficiency * cf_t)
            mem_bound = t_m >= t_c
            launches = Tc.kernels_per_layer * Tc.kernel_launch_s
            heads = StepCost(np.maximum(t_m, t_c) + launches, flops, nbytes,
                             np.where(mem_bound, t_m, 0.0), np.where(mem_bound, 0.0, t_c), launches, launches,
                             Tc.chips * nbytes * Tc.mem_j_per_byte, Tc.chips * flops, 0.0)
            t_draft, draft_ai, draft_bound = heads.time_s, heads.arithmetic_intensity, heads.bound
            fixed_draft = heads.t_fixed_s
            e_draft, fl_draft = heads.energy_j, heads.group_flops_lin
        else:  # ngram / retrieval: host lookup, then copy the drafts (a tree: ids + mask) to the device
            copy_bytes = tree_or(lambda: Bc * q_verify * TOKEN_ID_BYTES + Bc * q_verify ** 2 * MASK_BYTES,
                                 Bc * kf * TOKEN_ID_BYTES)
            t_draft = Tc.ngram_draft_s + Tc.host_copy_s + copy_bytes / Tc.host_link_bw_bytes_s
            fixed_draft = Tc.ngram_draft_s + Tc.host_copy_s
            draft_ai = np.zeros_like(t_draft)
            draft_bound = np.full(t_draft.shape, OVERHEAD)

        # ---- link to a draft chip: drafts (and probabilities when sampling) one way, the
        # accepted count and next token back; two latencies per iteration. A tree sends each
        # node's token and parent index. No row with a draft chip: no link. ----
        if any_on:
            sent = tree_or(lambda: 2.0 * nodes_c, kf)
            link_bytes = Bc * sent * TOKEN_ID_BYTES + 2 * Bc * TOKEN_ID_BYTES
            if w.temperature > 0:
                link_bytes = link_bytes + Bc * tree_or(lambda: nodes_c, kf) * tgt.vocab_size * PROB_BYTES
            t_link = 2.0 * batch.draft_link_latency_s[:, None] + link_bytes / (0.5 * batch.draft_link_bw_bytes_s[:, None])
            t_link = np.where(on_c, t_link, 0.0)
        else:
            t_link = np.zeros(np.broadcast_shapes(on_c.shape, kf.shape))

        # ---- accounting: the passes and what the stack does beside them (spec_iteration) ----
        extra = spec_iteration.iteration_extras(Tc, tgt.vocab_size, Bc, q_verify)
        t_iter, exposed = specdec.iteration_time_s(t_draft, verify.time_s, t_link, extra.time_s,
                                                   p_win, on_c & w.overlap)
        # the software's share of the iteration: the draft's fixed costs as far as they are exposed
        # (overlapped drafting hides the same fraction of them as of the draft time), the verify
        # pass's, and the per-iteration cost
        if overlapping:
            shown_draft = np.where(t_draft > 0, fixed_draft * np.where(t_draft > 0, exposed / t_draft, 0.0), 0.0)
        else:                       # serial drafting: all of it
            shown_draft = fixed_draft
        t_fixed = shown_draft + verify.t_fixed_s + extra.fixed_s
        e_iter = fl_t = fa_t = fl_d = fa_d = np.nan
        if energy:
            if w.overlap and any_on:
                # overlapped, the window drafted during verification is drafted again unless usable (1 - p_win)
                again = np.where(on_c, 2.0 - p_win, 1.0)
                e_draft, fl_draft, fa_draft = again * e_draft, again * fl_draft, again * fa_draft
            e_iter = verify.energy_j + e_draft + extra.energy_j
            fl_t, fa_t, fl_d, fa_d = verify.group_flops_lin + fl_draft, verify.group_flops_att + fa_draft, 0.0, 0.0
            if any_on:          # a draft chip: its FLOPs at its own J/FLOP, the link's bytes at the SerDes'
                e_iter = e_iter + np.where(on_c, link_bytes * Tc.link_j_per_byte, 0.0)
                fl_t = verify.group_flops_lin + np.where(on_c, 0.0, fl_draft)
                fa_t = verify.group_flops_att + np.where(on_c, 0.0, fa_draft)
                fl_d, fa_d = np.where(on_c, fl_draft, 0.0), np.where(on_c, fa_draft, 0.0)
        return SimpleNamespace(tau=tau, p_all=p_all, p_win=p_win, level=level, verify=verify, t_draft=t_draft,
                               draft_ai=draft_ai, draft_bound=draft_bound, t_link=t_link, t_iter=t_iter,
                               exposed=exposed, per_k=per_k, t_fixed=t_fixed, e_iter=e_iter, fl_t=fl_t, fa_t=fa_t,
                               fl_d=fl_d, fa_d=fa_d)

    overlapped = on_chip & w.overlap
    floor_s = base.time_s + T.spec_overhead_s + T.spec_schedule_s
    # k = 1..K1 first (and every fixed k); K1 < k <= K_auto where the bound allows
    K1 = min(K, max(K_FIRST, int(batch.k.max()))) if k_bound else K

    def larger_k(best, per_k) -> np.ndarray:
        """The k in K1+1..K_auto at which some auto row may beat its ``best`` s/token over k <= K1:
        its lower bound (draft_lb + T_base + t_spec) / tau(k) (auto_k_bound's, for trees with the
        tree's tau and levels at depth bound k) less the margin is below the best."""
        ks = np.arange(K1 + 1, K_auto + 1)
        kk = ks[None, :]
        tau_k, win_k = tau_tab[kk], win_tab[kk]
        steps = np.broadcast_to(kk, (n, ks.size)).astype(np.float64)
        if any_tree:
            t_tau, _, t_win, _, t_rows = tree_terms(w, nodes_c, kk, K, tree_depth)
            tau_k, win_k = np.where(tree_c, t_tau, tau_k), np.where(tree_c, t_win, win_k)
            steps = np.where(tree_c, (t_rows > 0).sum(axis=-1), steps)     # a tree's draft steps
        draft = 0.0 if per_k is None else np.reshape(per_k, (-1, 1)) * steps
        draft = np.where(overlapped[:, None], (1.0 - win_k) * draft, draft)
        lb = (draft + floor_s[:, None]) / tau_k * (1.0 - BOUND_MARGIN)
        may = ~fixed[:, None] & (lb < best[:, None])          # a NaN best keeps its (smaller) k
        return ks[may.any(axis=0)]

    t = None
    if all_fixed:
        kc = batch.k[:, None]
    elif n < MIN_ROWS_K_LOOP or any_tree:
        kc = np.arange(1, K1 + 1)[None, :]       # every k at once, then the best per row
        t = terms(kc)
        if K1 < K_auto:                         # and the larger k some row may win at, at once
            v = t.t_iter / t.tau
            best = np.take_along_axis(v, np.argmin(v, axis=1)[:, None], axis=1)[:, 0]
            more = larger_k(best, t.per_k)
            if more.size:
                t = concat_terms(t, terms(more[None, :]), n, K1, more.size)
                kc = np.concatenate([kc, more[None, :]], axis=1)
    else:                                       # k by k, stopping where a bound allows
        K1a = min(K1, K_auto)
        bound = auto_k_bound(tau_tab, win_tab, K1a, fixed, overlapped, floor_s)
        kc = np.where(fixed, batch.k, auto_k(lambda k: terms(k, energy=False), K_auto, bound if k_bound else None,
                                              K1a, larger_k))[:, None]
    if t is None:
        t = terms(kc)
    if kc.shape[1] == 1:
        idx = np.zeros(n, dtype=np.int64)
    else:
        v = t.t_iter / t.tau
        if kc.max() > K_auto:       # columns of a fixed row's larger k: not a candidate of the auto rows
            v = np.where(kc <= K_auto, v, np.inf)
        idx = np.where(fixed, batch.k - 1, np.argmin(v, axis=1))

    def pick(a, copy=True):
        if kc.shape[1] == 1:            # one k per row: its column, no gather (a view where ``copy`` is False)
            a = np.asarray(a)
            col = a[:, 0] if a.ndim == 2 else a
            if not copy:
                return np.broadcast_to(col, (n,))
            return col.copy() if col.shape == (n,) else np.broadcast_to(col, (n,)).copy()
        a = np.broadcast_to(a, np.broadcast_shapes(np.shape(a), (n, kc.shape[1])))
        return np.take_along_axis(a, idx[:, None], axis=1)[:, 0]

    k = pick(np.broadcast_to(kc, (n, kc.shape[1])))
    tau, p_all, p_win, t_iter, exposed = pick(t.tau), pick(t.p_all), pick(t.p_win), pick(t.t_iter), pick(t.exposed)
    t_fixed = pick(t.t_fixed)
    t_draft, t_link, t_verify = pick(t.t_draft), pick(t.t_link), pick(t.verify.time_s)
    e_iter, fl_t, fa_t = pick(t.e_iter, copy=False), pick(t.fl_t, copy=False), pick(t.fa_t, copy=False)
    fl_d, fa_d = (pick(t.fl_d, copy=False), pick(t.fa_d, copy=False)) if any_on else (zero_n, zero_n)
    verify_ai, verify_bound = pick(t.verify.arithmetic_intensity), pick(t.verify.bound)
    draft_ai, draft_bound = pick(t.draft_ai), pick(t.draft_bound)
    level = None
    if any_tree:
        level = np.broadcast_to(t.level, (n, kc.shape[1], K))[np.arange(n), idx]   # (n, K)
    # k = auto may also choose k = 0: speculation off where no k beats plain decoding (a
    # server would switch it off there); the row then reports the baseline with tau = 1.
    off = ~fixed & (t_iter / tau >= base.time_s)
    if off.any():
        k, tau, p_all = np.where(off, 0, k), np.where(off, 1.0, tau), np.where(off, 1.0, p_all)
        p_win = np.where(off, 1.0, p_win)
        t_iter, t_verify = np.where(off, base.time_s, t_iter), np.where(off, base.time_s, t_verify)
        t_fixed = np.where(off, base.t_fixed_s, t_fixed)
        exposed, t_draft, t_link = (np.where(off, 0.0, x) for x in (exposed, t_draft, t_link))
        verify_ai = np.where(off, base.arithmetic_intensity, verify_ai)
        verify_bound = np.where(off, base.bound, verify_bound)
        draft_ai, draft_bound = np.where(off, 0.0, draft_ai), np.where(off, OVERHEAD, draft_bound)
        e_iter, fl_d, fa_d = np.where(off, base.energy_j, e_iter), np.where(off, 0.0, fl_d), np.where(off, 0.0, fa_d)
        fl_t, fa_t = np.where(off, base.group_flops_lin, fl_t), np.where(off, base.group_flops_att, fa_t)
    spec = t_iter / tau
    if w.acceptance.kind == "alpha":
        alpha = np.full(n, w.acceptance.alpha)
    else:                   # the i.i.d. alpha that gives the same tau for a chain at this k
        alpha = np.where((k > 0) & ~is_tree, specdec.implied_alpha(tau, k), np.nan)
    shown = is_tree & (k > 0)

    pre_d = np.zeros(n)
    if cont:
        # the drafter's own prefill of a chunk (a draft model or EAGLE head keeps its cache of every
        # prompt) rides in its first step on the target's chips; a draft chip prefills beside them
        extra = 0.0
        if d.kind in ("model", "eagle", "mtp"):     # per prompt token: the draft's step with P of them riding along
            per = np.ravel(draft_step(1.0, (P / B)[:, None]).time_s - one_step.time_s) / np.maximum(P, 1.0)
            extra = np.where(on_chip | off, 0.0, per)
        q_it = np.where(k > 0, np.where(is_tree, nodes + 1.0, k + 1.0), 1.0)
        ttft = chunked_ttft(q_it, is_tree & (k > 0), spec, t_iter, t_verify, extra)
    else:
        if d.kind == "model":
            pre_d = step_cost(d.model, D, batch=B, q=P, context=0.0, lm_head_last_only=True, energy=False,
                              **kw).time_s
        ttft = np.where(on_chip, np.maximum(prefill.time_s, pre_d + batch.draft_link_latency_s),
                        prefill.time_s + pre_d)
        ttft = np.where(off, prefill.time_s, ttft)       # speculation off: no draft prefill either
    ttft = ttft + T.request_overhead_s
    band = _band(w, k, np.where(shown, nodes, 0), tau, t_iter, exposed, t_draft, t_verify, on_chip & w.overlap)
    return dict(
        baseline_s_per_token=base.time_s, spec_s_per_token=spec, overhead_s_per_token=t_fixed / tau,
        speedup=base.time_s / spec, k=k, alpha=alpha, tau=tau, p_all_accepted=p_all, p_window=p_win,
        tau_low=band[0], tau_high=band[1], speedup_low=base.time_s / band[2], speedup_high=base.time_s / band[3],
        spec_s_per_token_low=band[3], spec_s_per_token_high=band[2],
        acceptance_source=np.full(n, w.acceptance_source),
        tree_nodes=np.where(shown, nodes, 0),
        tree_shape=np.where(shown, shape_text(level), "") if any_tree else np.full(n, ""),
        rank_profile=np.where(shown, rank_profile_name(w), "") if any_tree else np.full(n, ""),
        draft_s_per_iter=t_draft, verify_s_per_iter=t_verify, link_s_per_iter=t_link, iter_s=t_iter,
        draft_cost_ratio=np.where(k > 0, t_draft / (np.maximum(k, 1) * base.time_s), 0.0),
        speedup_bound=tau / (1.0 + exposed / base.time_s),
        baseline_arithmetic_intensity=base.arithmetic_intensity,
        verify_arithmetic_intensity=verify_ai,
        draft_arithmetic_intensity=draft_ai, baseline_bound=base.bound,
        verify_bound=verify_bound, draft_bound=draft_bound,
        tokens_per_s=B / spec, baseline_tokens_per_s=B / base.time_s,
        ttft_s=ttft, request_latency_s=request_latency_s(ttft, G, spec),
        _e_iter=e_iter, _fl_t=fl_t, _fa_t=fa_t, _fl_d=fl_d, _fa_d=fa_d, **energy_in)


def tree_verify_s(batch: DesignBatch, w: Workload, nodes: int) -> np.ndarray:
    """The target's pass verifying a tree of ``nodes`` nodes under its mask (q = nodes + 1), with no
    prompt tokens riding along: latency_metrics' verify pass of a tree row under static batching,
    and at most it under continuous batching (which adds prompt tokens). Every iteration drafting
    that tree takes at least this plus t_spec (specdec.iteration_time_s), whatever k."""
    S = batch.prompt_tokens.astype(np.float64) + 0.5 * batch.output_tokens.astype(np.float64)
    return step_cost(w.target, batch.target, batch=batch.batch.astype(np.float64), q=float(nodes) + 1.0, context=S,
                     tree_mask=True, prefill_len=batch.prompt_tokens.astype(np.float64), energy=False,
                     **tf.step_kwargs(w.dtype, w.kv_dtype), ep=np.where(batch.ep > 0, batch.ep, w.ep)).time_s


def energy_metrics(metrics: dict, batch: DesignBatch, w: Workload) -> dict:
    """Energy per generated token (MODEL.md section 5) from latency_metrics' ingredients (popped from
    ``metrics``): an iteration's memory and link energy (J), its FLOPs on the target chips and on a
    draft chip, priced at each group's J/FLOP (linear at the weight format's compute dtype, attention
    at the KV dtype), plus every chip's busy power (idle_w: leakage, clock tree, control) for the
    iteration's time (a draft chip idles, it is not off), over the B x tau tokens it emits; the
    baseline's: one plain step on the target chips, B tokens. No chip draws more than its power limit
    (power_limit_w: the vendor TDP of a known part that has one, else its provisioned power): an
    iteration's energy is at most the chips' limits x its time (a chip at its limit lowers its clocks;
    dse does not lengthen the time, so its tokens/s there is optimistic).

    Static batching adds the prompts' energy, which continuous batching carries in every step's
    prefill share: the B prompts' prefill (one step of B x P tokens on the target chips, at most
    their limit x its time t_pre) amortised over the B x G tokens generated after it,
    E_token += min(E_mem + E_link + F_lin x J/FLOP + F_att x J/FLOP_att + P_busy x t_pre,
    P_limit x t_pre) / (B x G), for the baseline and the speculative figure alike (a draft's own
    prefill is not charged). Applied per design after any dedupe gather, so designs that differ
    only in these constants (silicon area, process node) share their latency row."""
    T, D = batch.target, batch.draft
    on_chip = batch.draft_on_chip & w.drafter.can_use_draft_chip
    B = batch.batch.astype(np.float64)
    n_t = T.chips * T.pp                   # every chip of every stage (busy power, limits)
    idle_t, limit_t = T.idle_w * n_t, T.power_limit_w * n_t
    step = metrics["baseline_s_per_token"]
    base = np.fmin(metrics.pop("_e_base") + metrics.pop("_fl_base") * T.j_per_flop
                   + metrics.pop("_fa_base") * T.attention_j_per_flop + idle_t * step, limit_t * step) / B
    prompts = 0.0
    if "_e_pre" in metrics:         # static batching: the prefill per generated token
        t_pre = metrics.pop("_t_pre")
        prompts = np.fmin(metrics.pop("_e_pre") + metrics.pop("_fl_pre") * T.j_per_flop
                          + metrics.pop("_fa_pre") * T.attention_j_per_flop + idle_t * t_pre, limit_t * t_pre) \
            / (B * batch.output_tokens.astype(np.float64))
        base = base + prompts
    if w.drafter.kind == "none":            # the iteration is the baseline step
        for key in ("_e_iter", "_fl_t", "_fa_t", "_fl_d", "_fa_d"):
            metrics.pop(key)
        metrics.update(energy_j_per_token=base, baseline_energy_j_per_token=base, tokens_per_j=1.0 / base)
        return metrics
    it = metrics["iter_s"]
    e_iter = (metrics.pop("_e_iter") + metrics.pop("_fl_t") * T.j_per_flop + metrics.pop("_fa_t") * T.attention_j_per_flop
              + idle_t * it)
    fl_d, fa_d = metrics.pop("_fl_d"), metrics.pop("_fa_d")
    if on_chip.any():
        e_iter = e_iter + np.where(on_chip, fl_d * D.j_per_flop + fa_d * D.attention_j_per_flop
                                   + D.idle_w * D.chips * D.pp * it, 0.0)
        limit_t = limit_t + np.where(on_chip, D.power_limit_w * D.chips * D.pp, 0.0)
    energy = np.fmin(e_iter, limit_t * it) / (B * metrics["tau"]) + prompts
    metrics.update(energy_j_per_token=energy, baseline_energy_j_per_token=base, tokens_per_j=1.0 / energy)
    return metrics


def _band(w: Workload, k, nodes, tau, t_iter, exposed, t_draft, t_verify, overlapped):
    """(tau_low, tau_high, s/token at tau_low, s/token at tau_high): the design as chosen (its k
    and tree) with the acceptance at the ends of its band (Workload.acceptance_low/high, from
    dse.acceptance.fit); the same as the nominal values without a band (acceptance given). Only the
    acceptance moves: T_iter is the nominal one but for the exposed draft time of overlapped
    drafting, which depends on P(window) (specdec.iteration_time_s)."""
    if w.acceptance_low is None or w.acceptance_high is None:
        s = t_iter / tau
        return tau, tau, s, s
    out = []
    on = k > 0
    for acc in (w.acceptance_low, w.acceptance_high):
        t_b, _, win_b = acceptance_terms(dataclasses.replace(w, acceptance=acc), np.maximum(k, 1), nodes)
        t_b = np.where(on, t_b, 1.0)
        it = t_iter
        if np.any(overlapped):
            _, ex_b = specdec.iteration_time_s(t_draft, t_verify, 0.0, 0.0, win_b, overlapped)
            it = np.where(on, t_iter - exposed + ex_b, t_iter)
        out.append((t_b, it / t_b))
    return out[0][0], out[1][0], out[0][1], out[1][1]


def request_latency_s(ttft_s, output_tokens, s_per_token):
    """TTFT + (G - 1) x per-token latency: the prefill emits the first of the G tokens
    (MODEL.md section 3)."""
    return ttft_s + (np.asarray(output_tokens, dtype=np.float64) - 1.0) * s_per_token


def rank_profile_name(w: Workload) -> str:
    """What a tree's rank probabilities came from: 'given' (--rank-acceptance), else the rank
    profile scaled to the top-1 rate (alpha, per-position rates, or the one tau implies):
    its name, 'geometric' for the limit a(1-a)^(r-1)."""
    if w.acceptance.kind == "rank":
        return "given"
    return w.rank_profile.name if w.rank_profile is not None else "geometric"


def shape_text(level: np.ndarray) -> np.ndarray:
    """Nodes per depth as text, '5-10-19-15-6-7-1-1' (trailing empty depths dropped); formatted
    once per distinct shape, not per design."""
    uniq, inv = np.unique(level.reshape(-1, level.shape[-1]), axis=0, return_inverse=True)
    text = np.array(["-".join(str(int(x)) for x in np.trim_zeros(row, "b")) for row in uniq], dtype=object)
    return text[inv.reshape(level.shape[:-1])].astype(str)
