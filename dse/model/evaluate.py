"""evaluate(batch, workload) -> Metrics: every design row at once (MODEL.md sections 2-4).

Everything MODEL.md section 3 says must be reported together comes out together: per-token
latency, the baseline, speedup, alpha (which one), k, tau, the draft's cost ratio c, each
phase's time, arithmetic intensity and bound, the Leviathan bound, throughput, TTFT and
request latency, and the capacity check for both models and both caches; and how much of a
token is the software stack (overhead_s_per_token: the runtime's fixed costs of an iteration
over its tau tokens, MODEL.md section 5).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..catalog.specs import ModelSpec
from ..units import FACTOR
from ..workload.spec import EAGLE3_DRAFT_VOCAB, AcceptanceSpec, Workload
from . import specdec
from . import transformer as tf
from .arrays import DesignBatch, HardwareArrays
from .roofline import BOUND_NAMES, OVERHEAD, StepCost, step_cost, stream_factor

TOKEN_ID_BYTES = 4.0     # int32 token ids over the draft-chip link
PROB_BYTES = 2.0         # fp16 draft probabilities (sent only when sampling, T > 0)
MASK_BYTES = 1.0         # one byte per element of a tree's attention mask copied from the host


@dataclass(frozen=True, slots=True)
class Metrics:
    """Per-design results in SI units; ``columns()`` gives the external names and units."""

    fits: np.ndarray
    memory_required_bytes: np.ndarray
    memory_reserve_bytes: np.ndarray
    memory_capacity_bytes: np.ndarray
    memory_shortfall_bytes: np.ndarray
    chip_memory_required_bytes: np.ndarray
    chip_memory_shortfall_bytes: np.ndarray
    chip_memory_floor_bytes: np.ndarray
    draft_memory_required_bytes: np.ndarray
    draft_memory_reserve_bytes: np.ndarray
    draft_memory_capacity_bytes: np.ndarray
    draft_memory_shortfall_bytes: np.ndarray
    datastore_bytes: np.ndarray
    baseline_s_per_token: np.ndarray
    spec_s_per_token: np.ndarray
    overhead_s_per_token: np.ndarray
    speedup: np.ndarray
    k: np.ndarray
    alpha: np.ndarray
    tau: np.ndarray
    tau_low: np.ndarray
    tau_high: np.ndarray
    speedup_low: np.ndarray
    speedup_high: np.ndarray
    spec_s_per_token_low: np.ndarray
    spec_s_per_token_high: np.ndarray
    acceptance_source: np.ndarray
    p_all_accepted: np.ndarray
    p_window: np.ndarray
    tree_nodes: np.ndarray
    tree_shape: np.ndarray
    rank_profile: np.ndarray
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
    energy_j_per_token: np.ndarray
    baseline_energy_j_per_token: np.ndarray
    tokens_per_j: np.ndarray
    ttft_s: np.ndarray
    request_latency_s: np.ndarray

    def columns(self, bounds: bool = True) -> dict[str, np.ndarray]:
        """External name -> display-unit array, in the order of METRIC_COLUMNS; ``bounds`` False
        leaves out the *_bound text columns (a writer that takes their codes from the Metrics)."""
        out = {}
        for name, attr, scale in METRIC_COLUMNS:
            v = getattr(self, attr)
            if scale == "bound":
                if not bounds:
                    continue
                v = BOUND_NAMES[v]
            elif scale == "text":
                pass
            elif scale is not None:
                v = v / scale
            out[name] = v
        return out

    def take(self, idx) -> Metrics:
        return Metrics(**{f.name: getattr(self, f.name)[idx] for f in dataclasses.fields(self)})


#: (external name, Metrics attribute, SI per display unit | None | "bound" | "text"). This is the
#: vocabulary of `dse eval --json`, study metrics and result columns.
METRIC_COLUMNS = (
    ("fits", "fits", None),
    ("memory_required_gb", "memory_required_bytes", FACTOR["gb"]),
    ("memory_reserve_gb", "memory_reserve_bytes", FACTOR["gb"]),
    ("memory_capacity_gb", "memory_capacity_bytes", FACTOR["gb"]),
    ("memory_shortfall_gb", "memory_shortfall_bytes", FACTOR["gb"]),
    ("chip_memory_required_gb", "chip_memory_required_bytes", FACTOR["gb"]),
    ("chip_memory_shortfall_gb", "chip_memory_shortfall_bytes", FACTOR["gb"]),
    ("chip_memory_floor_gb", "chip_memory_floor_bytes", FACTOR["gb"]),
    ("draft_memory_required_gb", "draft_memory_required_bytes", FACTOR["gb"]),
    ("draft_memory_reserve_gb", "draft_memory_reserve_bytes", FACTOR["gb"]),
    ("draft_memory_capacity_gb", "draft_memory_capacity_bytes", FACTOR["gb"]),
    ("draft_memory_shortfall_gb", "draft_memory_shortfall_bytes", FACTOR["gb"]),
    ("datastore_gb", "datastore_bytes", FACTOR["gb"]),
    ("baseline_ms_per_token", "baseline_s_per_token", FACTOR["ms"]),
    ("spec_ms_per_token", "spec_s_per_token", FACTOR["ms"]),
    ("overhead_ms_per_token", "overhead_s_per_token", FACTOR["ms"]),
    ("speedup", "speedup", None),
    ("k", "k", None),
    ("alpha", "alpha", None),
    ("tau", "tau", None),
    ("tau_low", "tau_low", None),
    ("tau_high", "tau_high", None),
    ("speedup_low", "speedup_low", None),
    ("speedup_high", "speedup_high", None),
    ("spec_ms_per_token_low", "spec_s_per_token_low", FACTOR["ms"]),
    ("spec_ms_per_token_high", "spec_s_per_token_high", FACTOR["ms"]),
    ("acceptance_source", "acceptance_source", "text"),
    ("p_all_accepted", "p_all_accepted", None),
    ("p_window", "p_window", None),
    ("tree_nodes", "tree_nodes", None),
    ("tree_shape", "tree_shape", "text"),
    ("rank_profile", "rank_profile", "text"),
    ("draft_ms_per_iter", "draft_s_per_iter", FACTOR["ms"]),
    ("verify_ms_per_iter", "verify_s_per_iter", FACTOR["ms"]),
    ("link_ms_per_iter", "link_s_per_iter", FACTOR["ms"]),
    ("iter_ms", "iter_s", FACTOR["ms"]),
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
    ("energy_j_per_token", "energy_j_per_token", None),
    ("baseline_energy_j_per_token", "baseline_energy_j_per_token", None),
    ("tokens_per_j", "tokens_per_j", None),
    ("ttft_ms", "ttft_s", FACTOR["ms"]),
    ("request_latency_ms", "request_latency_s", FACTOR["ms"]),
)
#: metrics that are latencies or depend on them: NaN (null) where the design does not fit
LATENCY_METRICS = frozenset(name for name, _, _ in
                            METRIC_COLUMNS[[c[0] for c in METRIC_COLUMNS].index("baseline_ms_per_token"):])
_LATENCY_ATTRS = frozenset(attr for name, attr, _ in METRIC_COLUMNS if name in LATENCY_METRICS)


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


def eagle_head(target: ModelSpec, method: str = "eagle") -> ModelSpec:
    """EAGLE draft head: one decoder layer of the target's shape (Li et al. 2024, arXiv
    2401.15077); its fc is added by the caller (eagle_fc_params); the LM head is the target's,
    but EAGLE-3's own over its 32K draft vocabulary (arXiv 2503.01840; EAGLE3_DRAFT_VOCAB)."""
    vocab = EAGLE3_DRAFT_VOCAB if method == "eagle3" else target.vocab_size
    return dataclasses.replace(target, name=target.name + "-eagle-head", kind="eagle-head", vocab_size=vocab,
                               num_layers=1, first_dense_layers=min(1, target.first_dense_layers))


def eagle_fc_params(target: ModelSpec, method: str = "eagle") -> int:
    """The head's input fc: 2d -> d on [feature, token embedding] (EAGLE-1/2), 3d -> d on the
    fused low, middle and high features (EAGLE-3)."""
    return (3 if method == "eagle3" else 2) * target.hidden_size ** 2


def draft_weight_bytes(w: Workload) -> float:
    """Bytes of weights the drafter adds: a draft model's own weights; EAGLE one layer +
    fc(2d -> d) (LM head shared); Medusa H heads of d*d + d*V, each head with its own LM head
    as in the Medusa-1 checkpoints (Cai et al. 2024, arXiv 2401.10774; hardware_db
    medusa-vicuna-7b): 5 heads on Llama-3-8B, 5*(4096^2 + 4096*128256)*2 bytes = 5.42 GB bf16 (Hydra's
    heads counted the same);
    early exit and n-gram/retrieval drafts add nothing on the device (a retrieval datastore
    lives in host memory: Workload.datastore_bytes, reported as datastore_gb)."""
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
        head = eagle_head(t, d.meth)
        own_lm = head.hidden_size * head.vocab_size if d.meth == "eagle3" else 0
        return (tf.non_embedding_params(head) + eagle_fc_params(t, d.meth) + own_lm) * wb / c
    if d.kind in ("medusa", "hydra"):
        return d.heads * medusa_head_params(t) * wb / c
    return np.zeros_like(c)


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


def medusa_head_params(target: ModelSpec) -> int:
    """One Medusa head: a residual block Linear(d -> d) and its own LM head d*V (arXiv 2401.10774)."""
    return target.hidden_size ** 2 + target.hidden_size * target.vocab_size


def _k_range(w: Workload) -> int:
    """Largest k (chain length, or tree depth) to consider."""
    d, acc = w.drafter, w.acceptance
    k_max = w.k_max
    if d.kind in ("medusa", "hydra"):
        k_max = min(k_max, d.heads)
    if acc.kind == "per_position":
        k_max = min(k_max, len(acc.per_position))
    if acc.kind == "rank" and len(acc.rank) > 1:      # one row per depth (Medusa head)
        k_max = min(k_max, len(acc.rank))
    if w.tree_nodes:
        k_max = min(k_max, w.tree_nodes)
    return max(1, k_max)


def _tau_table(w: Workload, K: int):
    """Chains: tau, p_all and p_window for k = 0..K (index = k), from the workload's acceptance.

    tau = 1 + sum_{i<=k} prod_{j<=i} a_j, p_all = prod_{j<=k} a_j, p_window = prod_{j<=k+1} a_j
    (MODEL.md section 3: the window drafted during verification is usable only if the draft's
    (k+1)-th token is also the target's bonus token). Given tau is used as is, with p_all and
    p_window from the i.i.d. alpha it implies. Computed once per (acceptance, K) and kept
    (read-only arrays): a pure function of the two.
    """
    key = (repr(w.acceptance), K)           # repr: every bit of every rate (0.0 and -0.0 apart)
    tables = _TAU_TABLES.get(key)
    if tables is None:
        if len(_TAU_TABLES) >= 256:
            _TAU_TABLES.clear()
        tables = _TAU_TABLES[key] = _acceptance_tables(w.acceptance, K)
    return tables


_TAU_TABLES: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _acceptance_tables(acc: AcceptanceSpec, K: int):
    """_tau_table of acceptance ``acc``, computed."""
    kk = np.arange(K + 1)
    if acc.kind == "mixture":
        out = _mix([_acceptance_tables(c, K) for c in acc.components], acc.weights)
    elif acc.kind == "tau":
        alpha = specdec.implied_alpha(np.full(K + 1, acc.tau), kk)
        out = np.full(K + 1, acc.tau), alpha ** kk, alpha ** (kk + 1)
    else:
        rates = specdec.position_rates(acc, K + 1)
        taus, ps = specdec.tokens_per_iteration(rates[None, :], kk)
        out = taus, ps, ps * rates[kk]
    for a in out:
        a.flags.writeable = False
    return out


def _tree_terms(w: Workload, nodes, kc, K: int, depth: int):
    """Trees: tau, p_deepest, p_window and nodes per depth (shape (..., K)) for N = ``nodes``
    (n, 1) and depth <= kc (broadcast), from the best tree (specdec.tree_table): one table per
    workload, gathered per design. Rank probabilities come from the acceptance (alpha and
    per-position rates through the workload's rank profile, specdec.rank_matrix). Given tau is
    used as is; the shape and the window are those of the top-1 rate whose best tree under the
    rank profile has that tau (one per distinct N)."""
    acc = w.acceptance
    n_max = int(nodes.max())
    if acc.kind == "mixture":     # each task its best tree (dynamic trees adapt per context); the shape of the heaviest
        parts = [_tree_terms(dataclasses.replace(w, acceptance=c), nodes, kc, K, depth) for c in acc.components]
        return (*_mix([p[:3] for p in parts], acc.weights), parts[int(np.argmax(acc.weights))][3])
    if acc.kind != "tau":
        p = specdec.rank_matrix(acc, K + 1, n_max, w.rank_profile)
        t = specdec.tree_table(p, K, n_max)
        return t.tau[kc, nodes], t.p_deepest[kc, nodes], t.p_window[kc, nodes], t.shape[kc, nodes]
    out = None
    for n_val in np.unique(nodes[nodes > 0]):
        a = specdec.implied_tree_alpha(acc.tau, depth, int(n_val), w.rank_profile)
        t = specdec.tree_table(specdec.rank_matrix(AcceptanceSpec(kind="alpha", alpha=a), K + 1, int(n_val),
                                                   w.rank_profile), K, int(n_val))
        nn = np.minimum(nodes, n_val)
        got = (np.full(np.broadcast_shapes(kc.shape, nodes.shape), acc.tau), t.p_deepest[kc, nn],
               t.p_window[kc, nn], t.shape[kc, nn])
        out = got if out is None else tuple(np.where(nodes[..., None] == n_val, g, o) if g.ndim == 3
                                            else np.where(nodes == n_val, g, o) for g, o in zip(got, out))
    return out


def _mix(parts, weights):
    """A token-weighted text mix (AcceptanceSpec kind 'mixture'): a token of the mix costs the
    weighted mean of each task's time per token, T_iter/tau_i at the same k, so
    tau = 1 / sum_i(w_i / tau_i); P(all accepted) and P(window) are means over iterations, which
    task i fills in proportion to w_i / tau_i: p = tau * sum_i(w_i p_i / tau_i) (exact for the
    overlap window, which is linear in p per iteration)."""
    inv = sum(wt / p[0] for wt, p in zip(weights, parts))
    tau = 1.0 / inv
    return (tau, tau * sum(wt * p[1] / p[0] for wt, p in zip(weights, parts)),
            tau * sum(wt * p[2] / p[0] for wt, p in zip(weights, parts)))


def acceptance_terms(w: Workload, k, nodes=0):
    """(tau, P(all k accepted) or P(deepest level), P(window usable)) of the workload's acceptance
    at chain length (tree depth) ``k`` and tree size ``nodes`` (0 = a chain), arrays broadcast:
    the same terms evaluate() uses (chains by _tau_table, trees by _tree_terms)."""
    k = np.asarray(k, dtype=np.int64)
    nodes = np.broadcast_to(np.asarray(nodes, dtype=np.int64), k.shape) if k.ndim else np.asarray(nodes, np.int64)
    K = max(1, int(np.max(k)))
    tau_tab, p_tab, win_tab = _tau_table(w, K)
    tau, p_all, p_win = tau_tab[k], p_tab[k], win_tab[k]
    tree = nodes > 0
    if np.any(tree):
        t_tau, t_deep, t_win, _ = _tree_terms(w, np.atleast_1d(nodes)[:, None], np.atleast_1d(k)[:, None], K, K)
        t_tau, t_deep, t_win = (np.reshape(x, k.shape) for x in (t_tau, t_deep, t_win))
        tau, p_all, p_win = (np.where(tree, a, b) for a, b in ((t_tau, tau), (t_deep, p_all), (t_win, p_win)))
    return tau, p_all, p_win


#: batches of at least this many rows evaluate the latency terms once per distinct input row
#: (``_distinct_rows``); smaller ones (one design, a search batch) as they are
MIN_ROWS_DEDUPE = 1024
#: (distinct) rows from which k = auto runs one k at a time with a bound (``_auto_k``); fewer
#: take every k in one broadcast pass, where the per-k Python overhead would dominate
MIN_ROWS_K_LOOP = 16384
#: relative margin on the k = auto bound, far above the few ulps of rounding in its terms
_BOUND_MARGIN = 1e-9
#: k = auto first searches k = 1..K_FIRST; a larger k (up to the workload's k_max, 16 by default)
#: is evaluated only where a lower bound says it can beat that best: where acceptance is high
#: and drafting cheap (at alpha 0.9, a 70B fp8 target with a 1B draft on an H200 takes k = 13)
K_FIRST = 8


#: a batch of more rows is evaluated BLOCK_ROWS at a time (the sweep's chunk): temporaries of a
#: few MB instead of one per column of the whole batch (before this, benchmarks/bench_eval.py (b)
#: ran 1M random designs at 573k/s in one call against 840k/s as 8 calls of 131,072 rows)
BLOCK_ROWS = 131_072


def evaluate(batch: DesignBatch, w: Workload, *, dedupe: bool = True, k_bound: bool = True,
             block_rows: int | None = BLOCK_ROWS) -> Metrics:
    """Evaluate every design of ``batch`` under workload ``w`` (vectorised; no per-design loop).

    A design without bandwidth or link gets infinite times (no warning); the study marks it
    not buildable. Capacity is per design; the latency terms read every DesignBatch field but
    the memory capacities and reserves and the energy constants energy_metrics reads (busy power,
    power limit, J/FLOP), so with ``dedupe`` they are evaluated once per distinct row of those inputs and
    gathered (when that is under half the rows), and with
    ``k_bound`` k = auto stops at the k past which a bound rules out a better k for every
    row. Both give the same bits as without them (tests/model/test_evaluate_fast.py). Every
    row is independent of the others, so a batch of more than 2 x ``block_rows`` rows is
    evaluated in blocks of ``block_rows`` (None: in one pass) with the same bits; ``dedupe``
    then works within a block.
    """
    if block_rows is not None and batch.n > 2 * block_rows:
        rows = [slice(i, i + block_rows) for i in range(0, batch.n, block_rows)]
        return join_metrics((_unfinished(batch.take(r), w, dedupe, k_bound) for r in rows), rows, batch.n)
    return _finish(*_unfinished(batch, w, dedupe, k_bound))


def _unfinished(batch: DesignBatch, w: Workload, dedupe: bool, k_bound: bool):
    """evaluate() of one block, as the arguments of _finish: (metrics, capacity results, whether
    latencies of designs that do not fit are still to be blanked)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        caps = _capacity(batch, w)
        rows = _distinct_rows(batch) if dedupe and batch.n >= MIN_ROWS_DEDUPE else None
        if rows is None:
            return energy_metrics(_latency(batch, w, k_bound), batch, w), caps, True
        first, inverse = rows
        # gather, and blank latencies of designs that do not fit on the way: row m is NaN
        blanked = np.where(caps["fits"], inverse, first.size)
        out = {}
        for attr, v in _latency(batch.take(first), w, k_bound).items():
            v = np.asarray(v)
            out[attr] = np.take(np.append(v, np.nan), blanked) if attr in _LATENCY_ATTRS and v.dtype.kind == "f" \
                else np.take(v, inverse)
        return energy_metrics(out, batch, w), caps, False


def join_metrics(parts, rows, n: int) -> Metrics:
    """One Metrics of n rows from ``parts`` (any iterable, consumed one part at a time: a part's
    arrays are freed before the next is made), part i holding rows ``rows[i]`` (a slice or an index
    array): each column allocated once, at the dtype np.concatenate would give (np.result_type; a
    text column widened when a later part holds longer text), and each part written into its rows.
    A part is a Metrics, or _unfinished's (metrics, caps, blank) triple, whose latencies of designs
    that do not fit are blanked (NaN) on the way, as _finish does: the same bits as joining the
    finished parts."""
    out = {}
    for part, r in zip(parts, rows):
        if isinstance(part, Metrics):
            values, fits = {f: getattr(part, f) for f in _METRICS_FIELDS}, None
        else:
            values, caps, blank = {**part[1], **part[0]}, part[1], part[2]
            fits = caps["fits"] if blank and not caps["fits"].all() else None
            unfit = None if fits is None else ~fits
        del part
        for attr in _METRICS_FIELDS:
            v = np.asarray(values.pop(attr))
            col = out.get(attr)
            if col is None or np.result_type(col, v) != col.dtype:
                wider = np.empty(n, dtype=v.dtype if col is None else np.result_type(col, v))
                if col is not None:
                    wider[...] = col
                col = out[attr] = wider
            nan_unfit = fits is not None and attr in _LATENCY_ATTRS and v.dtype.kind == "f"
            if isinstance(r, slice):
                np.copyto(col[r], v)
                if nan_unfit:
                    np.copyto(col[r], np.nan, where=unfit)
            else:
                col[r] = np.where(fits, v, np.nan) if nan_unfit else v
    return Metrics(**out)


_METRICS_FIELDS = tuple(f.name for f in dataclasses.fields(Metrics))


#: HardwareArrays fields the latency terms do not read: the capacity check's, and the energy constants
#: energy_metrics applies per design after the gather (busy power, power limit, J/FLOP)
NOT_LATENCY_INPUTS = ("capacity_bytes", "memory_reserve_fraction", "idle_w", "power_limit_w", "j_per_flop",
                      "attention_j_per_flop")


def latency_columns(batch: DesignBatch) -> list[np.ndarray]:
    """The per-design inputs of the latency terms: every DesignBatch field but NOT_LATENCY_INPUTS."""
    cols, groups = [], [batch.target] if batch.draft is batch.target else [batch.target, batch.draft]
    for hw in groups:
        cols += [getattr(hw, f.name) for f in dataclasses.fields(hw) if f.name not in NOT_LATENCY_INPUTS]
    cols += [getattr(batch, f.name) for f in dataclasses.fields(batch)
             if not isinstance(getattr(batch, f.name), HardwareArrays)]
    return cols


_MIX = np.uint64(0x9E3779B97F4A7C15)      # odd: multiplying by it is a bijection mod 2^64


def _distinct_rows(batch: DesignBatch) -> tuple[np.ndarray, np.ndarray] | None:
    """distinct_rows of the latency inputs (latency_columns)."""
    return distinct_rows(latency_columns(batch), batch.n)


def distinct_rows(columns: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(one row of each distinct row of ``columns`` (each of length n, or one value broadcast),
    inverse index), or None when the distinct rows are more than half the rows. Rows are keyed
    by a 64-bit hash of their bit patterns, then checked column by column: a hash collision
    means no dedupe, never a wrong row. Before the sort, the hash buckets in use (a lower bound
    on the distinct rows) let a batch of mostly distinct rows out at once."""
    h, used = np.zeros(n, dtype=np.uint64), []
    for c in columns:
        if c.strides == (0,):          # one value broadcast (arrays._as_arrays)
            continue
        c = np.ascontiguousarray(c)
        bits = c.view(np.uint64) if c.dtype.itemsize == 8 else c.astype(np.uint64)
        if bits.min() == bits.max():
            continue
        np.bitwise_xor(h, bits, out=h)
        np.multiply(h, _MIX, out=h)
        h ^= h >> np.uint64(29)
        used.append(bits)
    # exact early out before the sort: distinct rows >= distinct hashes >= hash buckets in use
    seen = np.zeros(1 << max(10, (8 * n - 1).bit_length()), dtype=bool)
    seen[(h & np.uint64(seen.size - 1)).astype(np.intp)] = True
    if 2 * np.count_nonzero(seen) > n:
        return None
    order = np.argsort(h)
    hs = h[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(hs[1:], hs[:-1], out=new[1:])
    m = int(np.count_nonzero(new))
    if 2 * m > n:
        return None
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    first = order[new]
    for bits in used:
        if not np.array_equal(np.take(np.take(bits, first), inverse), bits):
            return None
    return first, inverse


def _capacity(batch: DesignBatch, w: Workload) -> dict[str, np.ndarray]:
    """Capacity (MODEL.md section 4), checked per chip: weights + KV caches (+ the draft's where it
    lives on the target chips) + the runtime's reserve (a fraction of the capacity, for activations
    and workspace) <= capacity. Reported per chip and for the whole group (per-chip figure x chips, so
    state every chip holds whole counts once per chip), the reserve apart from what the model needs;
    the target's and the draft chip's apart. ``chip_memory_floor`` is what a chip holds however many
    chips share the model (transformer.per_chip and kv_shards at t -> inf: replicated weights, one KV
    head's cache, an MLA latent cache): where it and the reserve exceed a chip, more chips cannot help."""
    tgt, d = w.target, w.drafter
    kvb = tf.KV_BYTES[w.kv_dtype]
    n, T = batch.n, batch.target
    B = batch.batch.astype(np.float64)
    P = batch.prompt_tokens.astype(np.float64)
    G = batch.output_tokens.astype(np.float64)
    nodes = np.where(batch.tree_nodes > 0, batch.tree_nodes, w.tree_nodes) if d.kind != "none" else np.zeros(n, int)
    on_chip = batch.draft_on_chip & d.can_use_draft_chip
    any_on = bool(on_chip.any())
    K = _k_range(w)
    t_chips = T.chips.astype(np.float64)
    extra = np.maximum(K, nodes)              # draft-cache slots for the drafted tokens (chain or tree)
    d_chips = np.where(on_chip, batch.draft.chips, T.chips).astype(np.float64) if any_on else t_chips
    # the draft's weights and KV cache on one of the chips it runs on, and however many share it (t -> inf)
    d_kv, d_shards = 0.0, None
    if d.kind == "model":
        d_kv, d_shards = tf.kv_cache_bytes(d.model, B, P + G + extra, kvb), lambda c: tf.kv_shards(d.model, c)
    elif d.kind == "eagle":
        d_kv, d_shards = tf.kv_cache_bytes(eagle_head(tgt), B, P + G + extra, kvb), lambda c: tf.kv_shards(tgt, c)

    def draft_per_chip(chips):
        out = draft_weight_bytes_per_chip(w, chips)
        return out + d_kv / d_shards(chips) if d_shards else out + np.zeros(n)

    draft_chip = draft_per_chip(d_chips)          # on the draft group, or on the target chips
    here = ~on_chip                               # the draft lives on the target chips
    kv = tf.kv_cache_bytes(tgt, B, P + G, kvb)                   # memory_per_chip, at t and at t -> inf
    chip_req = weights_per_chip(tgt, t_chips, w.dtype) + kv / tf.kv_shards(tgt, t_chips)
    chip_floor = weights_per_chip(tgt, np.inf, w.dtype) + kv / tf.kv_shards(tgt, np.inf)
    if d.kind != "none" and not any_on:
        chip_req, chip_floor = chip_req + draft_chip, chip_floor + draft_per_chip(np.inf)
    elif d.kind != "none" and here.any():
        chip_req = chip_req + np.where(here, draft_chip, 0.0)
        chip_floor = chip_floor + np.where(here, draft_per_chip(np.inf), 0.0)
    chip_reserve = T.memory_reserve_fraction * T.capacity_bytes
    chip_short = np.maximum(0.0, chip_req + chip_reserve - T.capacity_bytes)
    cap_t = T.capacity_bytes * t_chips
    if any_on:
        D = batch.draft
        reserve_d = np.where(on_chip, D.memory_reserve_fraction * D.capacity_bytes * d_chips, 0.0)
        req_d = draft_chip * d_chips            # d_chips is the target's where the draft lives there
        cap_d = np.where(on_chip, D.capacity_bytes * d_chips, cap_t)
        short_d = np.where(on_chip, np.maximum(0.0, req_d + reserve_d - cap_d), 0.0)
        fits = (chip_short <= 0.0) & (short_d <= 0.0)
    else:
        reserve_d = short_d = np.broadcast_to(0.0, (n,))
        req_d, cap_d, fits = draft_chip * t_chips, cap_t, chip_short <= 0.0
    return dict(fits=fits, memory_required_bytes=chip_req * t_chips,
                memory_reserve_bytes=chip_reserve * t_chips, memory_capacity_bytes=cap_t,
                memory_shortfall_bytes=chip_short * t_chips, chip_memory_required_bytes=chip_req,
                chip_memory_shortfall_bytes=chip_short, chip_memory_floor_bytes=chip_floor,
                draft_memory_required_bytes=req_d, draft_memory_reserve_bytes=reserve_d,
                draft_memory_capacity_bytes=cap_d, draft_memory_shortfall_bytes=short_d,
                datastore_bytes=np.broadcast_to(w.datastore_bytes if d.kind == "ngram" else 0.0, (n,)))


def _latency(batch: DesignBatch, w: Workload, k_bound: bool = True) -> dict[str, np.ndarray]:
    """Every latency metric (Metrics attribute -> array); _finish blanks those of designs that
    do not fit."""
    tgt, d = w.target, w.drafter
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
    kw_t, kw_tc = dict(kw, ep=E), dict(kw, ep=E[:, None])      # rows, and (n, 1) columns for k sweeps
    cf = tf.COMPUTE_EFFICIENCY_FACTOR[fmt.compute_dtype]
    emulated = tf.EMULATED_DEQUANT.get(fmt.compute_dtype, "")
    nodes = np.where(batch.tree_nodes > 0, batch.tree_nodes, w.tree_nodes) if d.kind != "none" else np.zeros(n, int)
    is_tree = nodes > 0

    # Continuous batching (w.continuous; MODEL.md section 2, serving): B requests in flight in
    # steady state; each finishes after G tokens, so while one request decodes the other B-1
    # are replaced at (B-1)/G per step and every step also runs their prompts, P*(B-1)/(B*G)
    # prefill tokens per sequence (a speculative iteration: tau times that, in the verify pass
    # and in the draft's own prefill). A new request's prefill is its own (batch 1, no chunking)
    # and waits half a running step plus its place behind the other arriving prompts
    # (``prefill_queue_s``). Static (default): B prompts prefilled together, pure decode.
    cont = w.continuous
    share = P * (B - 1.0) / (B * G) if cont else 0.0
    x_base = share
    base = step_cost(tgt, T, batch=B, q=1.0, context=S, prefill_tokens=x_base, prefill_len=P, **kw_t)
    B_pre = np.ones_like(B) if cont else B
    prefill = step_cost(tgt, T, batch=B_pre, q=P, context=0.0, lm_head_last_only=True, energy=False, **kw_t)
    wait = 0.5 * base.time_s + prefill_queue_s(prefill.time_s, B, G, base.time_s) if cont else 0.0

    on_chip = batch.draft_on_chip & d.can_use_draft_chip
    D = _select(on_chip, batch.draft, T)     # the group the drafter runs on
    K = _k_range(w)
    ttft = prefill.time_s + wait + T.request_overhead_s

    # ---- energy (MODEL.md section 5): each step's memory and link energy and its FLOPs, per group
    # (energy_metrics prices the FLOPs and adds busy power per design, after any dedupe gather) ----
    energy_in = dict(_e_base=np.broadcast_to(base.energy_j, (n,)), _fl_base=np.broadcast_to(base.group_flops_lin, (n,)),
                     _fa_base=np.broadcast_to(base.group_flops_att, (n,)))

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
    tau_tab, p_tab, win_tab = _tau_table(w, K)

    def tree_or(a, b):
        """np.where(tree rows, a(), b): ``a`` a function, computed only where some row is a tree."""
        return np.where(tree_c, a(), b) if any_tree else b

    # ---- a draft model, EAGLE head or early exit: one step per drafted token (k-independent) ----
    model_draft = d.kind in ("model", "eagle", "early-exit")
    if model_draft:
        model = d.model if d.kind == "model" else eagle_head(tgt, d.meth) if d.kind == "eagle" else tgt
        layers = d.exit_layer if d.kind == "early-exit" else None

        def draft_step(q, x=0.0, tree=False):
            """One autoregressive draft step over q positions per sequence, with x prompt tokens
            per sequence riding along (continuous batching: the draft's share of the arriving
            prompts). A draft model is a step of the engine (its kernels + the runtime's per-step
            cost); an EAGLE head runs inside the speculative iteration, whose host work is
            t_spec_overhead: its step is its kernels, its fc(2d -> d), the per-sequence sampling
            (top-k) cost and the runtime's draft_step_overhead (the loop around a head step, paid
            by an eager runtime). A tree's step (any drafter) also pays draft_step_overhead once:
            the top-k expansion of the depth's nodes into the next level (mask, positions)."""
            eagle = d.kind == "eagle"
            # the target's own layers (early exit, an MoE EAGLE layer) keep its expert parallel
            c = step_cost(model, Dc, batch=Bc, q=q, context=Sc, layers=layers, step_overhead=not eagle,
                          prefill_tokens=x, prefill_len=P[:, None], **(kw if d.kind == "model" else kw_tc))
            if eagle or tree:       # (a tree's steps are used on tree rows only)
                h = Dc.draft_step_overhead_s
                c = c._replace(time_s=c.time_s + h, t_overhead_s=c.t_overhead_s + h, t_fixed_s=c.t_fixed_s + h)
            if not eagle:
                return c
            fc = float(eagle_fc_params(tgt, d.meth))     # fc(2d -> d) (EAGLE-3: 3d -> d) on the features
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
        ``energy`` (choosing k, _auto_k) the energy terms are not computed (e_iter NaN)."""
        kf = kc.astype(np.float64)
        # ---- acceptance: chains by Leviathan / per-position rates; trees by their best shape ----
        tau, p_all, p_win = tau_tab[kc], p_tab[kc], win_tab[kc]
        level = None
        if any_tree:
            level = np.broadcast_to((np.arange(K) < kc[..., None]).astype(np.int64), kc.shape + (K,))
            t_tau, t_deep, t_win, t_shape = _tree_terms(w, nodes_c, kc, K, tree_depth)
            tau, p_all, p_win = (np.where(tree_c, a, b) for a, b in ((t_tau, tau), (t_deep, p_all), (t_win, p_win)))
            level = np.where(tree_c[..., None], t_shape.astype(np.int64), level)    # nodes per depth, (.., K)

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
        x_draft = x_verify if cont and d.kind in ("model", "eagle") else 0.0
        # the drafter's memory and link energy (J) and FLOPs per iteration (host-side n-gram lookups: outside
        # the model), on the group it runs on
        e_draft = fl_draft = fa_draft = 0.0
        if model_draft:
            per_k = one_step.time_s
            t_draft = kf * one_step.time_s
            fixed_draft = kf * one_step.t_fixed_s
            e_draft, fl_draft, fa_draft = (kf * one_step.energy_j, kf * one_step.group_flops_lin,
                                           kf * one_step.group_flops_att)
            draft_ai, draft_bound = np.broadcast_to(one_ai, t_draft.shape), np.broadcast_to(one_bound, t_draft.shape)
            if cont and d.kind in ("model", "eagle"):
                first = draft_step(1.0, x_draft)
                chain = StepCost(*((kf - 1.0) * a + b for a, b in zip(one_step, first)))
                t_draft, fixed_draft = chain.time_s, chain.t_fixed_s
                draft_ai, draft_bound = chain.arithmetic_intensity, chain.bound
                e_draft, fl_draft, fa_draft = chain.energy_j, chain.group_flops_lin, chain.group_flops_att
            if any_tree:
                # a tree: one step per depth, over as many positions as that depth holds (EAGLE-2)
                parts = [draft_step(np.maximum(level[..., i], 1).astype(np.float64), x_draft if i == 0 else 0.0,
                                    tree=True) for i in range(K)]
                used = [level[..., i] > 0 for i in range(K)]
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

        # ---- accounting ----
        t_iter, exposed = specdec.iteration_time_s(t_draft, verify.time_s, t_link, Tc.spec_overhead_s,
                                                   p_win, on_c & w.overlap)
        # the software's share of the iteration: the draft's fixed costs as far as they are exposed
        # (overlapped drafting hides the same fraction of them as of the draft time), the verify
        # pass's, and the per-iteration cost
        if overlapping:
            shown_draft = np.where(t_draft > 0, fixed_draft * np.where(t_draft > 0, exposed / t_draft, 0.0), 0.0)
        else:                       # serial drafting: all of it
            shown_draft = fixed_draft
        t_fixed = shown_draft + verify.t_fixed_s + Tc.spec_overhead_s
        e_iter = fl_t = fa_t = fl_d = fa_d = np.nan
        if energy:
            if w.overlap and any_on:
                # overlapped, the window drafted during verification is drafted again unless usable (1 - p_win)
                again = np.where(on_c, 2.0 - p_win, 1.0)
                e_draft, fl_draft, fa_draft = again * e_draft, again * fl_draft, again * fa_draft
            e_iter = verify.energy_j + e_draft
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
    floor_s = base.time_s + T.spec_overhead_s
    # k = 1..K1 first (and every fixed k); K1 < k <= K_auto where the bound allows
    K1 = min(K, max(K_FIRST, int(batch.k.max()))) if k_bound else K

    def larger_k(best, per_k) -> np.ndarray:
        """The k in K1+1..K_auto at which some auto row may beat its ``best`` s/token over k <= K1:
        its lower bound (draft_lb + T_base + t_spec) / tau(k) (_auto_k_bound's, for trees with the
        tree's tau and levels at depth bound k) less the margin is below the best."""
        ks = np.arange(K1 + 1, K_auto + 1)
        kk = ks[None, :]
        tau_k, win_k = tau_tab[kk], win_tab[kk]
        steps = np.broadcast_to(kk, (n, ks.size)).astype(np.float64)
        if any_tree:
            t_tau, _, t_win, t_shape = _tree_terms(w, nodes_c, kk, K, tree_depth)
            tau_k, win_k = np.where(tree_c, t_tau, tau_k), np.where(tree_c, t_win, win_k)
            steps = np.where(tree_c, (t_shape > 0).sum(axis=-1), steps)     # a tree drafts one step per level
        draft = 0.0 if per_k is None else np.reshape(per_k, (-1, 1)) * steps
        draft = np.where(overlapped[:, None], (1.0 - win_k) * draft, draft)
        lb = (draft + floor_s[:, None]) / tau_k * (1.0 - _BOUND_MARGIN)
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
                t = _concat_terms(t, terms(more[None, :]), n, K1, more.size)
                kc = np.concatenate([kc, more[None, :]], axis=1)
    else:                                       # k by k, stopping where a bound allows
        K1a = min(K1, K_auto)
        bound = _auto_k_bound(tau_tab, win_tab, K1a, fixed, overlapped, floor_s)
        kc = np.where(fixed, batch.k, _auto_k(lambda k: terms(k, energy=False), K_auto, bound if k_bound else None,
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
    if d.kind == "model":
        pre_d = step_cost(d.model, D, batch=B_pre, q=P, context=0.0, lm_head_last_only=True, energy=False, **kw).time_s
    ttft = np.where(on_chip, np.maximum(prefill.time_s, pre_d + batch.draft_link_latency_s),
                    prefill.time_s + pre_d)
    ttft = np.where(off, prefill.time_s, ttft)       # speculation off: no draft prefill either
    if cont:        # half the running iteration, and the other arriving prompts' prefills ahead
        ttft = ttft + 0.5 * np.where(off, base.time_s, t_iter) + prefill_queue_s(ttft, B, G, spec)
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


def energy_metrics(metrics: dict, batch: DesignBatch, w: Workload) -> dict:
    """Energy per generated token (MODEL.md section 5) from _latency's ingredients (popped from
    ``metrics``): an iteration's memory and link energy (J), its FLOPs on the target chips and on a
    draft chip, priced at each group's J/FLOP (linear at the weight format's compute dtype, attention
    at the KV dtype), plus every chip's busy power (idle_w: leakage, clock tree, control) for the
    iteration's time (a draft chip idles, it is not off), over the B x tau tokens it emits; the
    baseline's: one plain step on the target chips, B tokens. No chip draws more than its provisioned
    power (power_limit_w): an iteration's energy is at most the chips' limits x its time (a chip at its
    limit lowers its clocks; dse does not lengthen the time, so its tokens/s there is optimistic).
    Applied per design after any dedupe gather, so designs that differ only in these constants
    (silicon area, process node) share their latency row."""
    T, D = batch.target, batch.draft
    on_chip = batch.draft_on_chip & w.drafter.can_use_draft_chip
    B = batch.batch.astype(np.float64)
    idle_t, limit_t = T.idle_w * T.chips, T.power_limit_w * T.chips
    step = metrics["baseline_s_per_token"]
    base = np.fmin(metrics.pop("_e_base") + metrics.pop("_fl_base") * T.j_per_flop
                   + metrics.pop("_fa_base") * T.attention_j_per_flop + idle_t * step, limit_t * step) / B
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
                                   + D.idle_w * D.chips * it, 0.0)
        limit_t = limit_t + np.where(on_chip, D.power_limit_w * D.chips, 0.0)
    energy = np.fmin(e_iter, limit_t * it) / (B * metrics["tau"])
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


def _concat_terms(a: SimpleNamespace, b: SimpleNamespace, n: int, ka: int, kb: int) -> SimpleNamespace:
    """The terms of k candidates ``a`` (ka of them) then ``b`` (kb) as one set over ka + kb
    candidates: every per-k array broadcast to (n, k) (a tree's nodes per depth to (n, k, depth))
    and joined along the k axis; per_k (one draft step, the same at every k) is a's."""
    def cat(x, y):
        if x is None:
            return None
        x, y = np.asarray(x), np.asarray(y)
        if x.ndim == 3:                   # level: (.., k, depth)
            return np.concatenate([np.broadcast_to(x, (n, ka, x.shape[-1])),
                                   np.broadcast_to(y, (n, kb, y.shape[-1]))], axis=1)
        return np.concatenate([np.broadcast_to(x, (n, ka)), np.broadcast_to(y, (n, kb))], axis=1)
    out = {k: cat(v, getattr(b, k)) for k, v in vars(a).items() if k not in ("verify", "per_k")}
    out["verify"] = StepCost(*(cat(x, y) for x, y in zip(a.verify, b.verify)))
    out["per_k"] = a.per_k
    return SimpleNamespace(**out)


def _auto_k(terms, K: int, bound, k_first: int | None = None, larger=None) -> np.ndarray:
    """The k in 1..K with the least seconds per token for every row: the same choice as
    np.argmin over all K at once (the first minimum; a NaN wins, the first NaN).

    Evaluates k = K1, K1-1, ... in turn (K1 = ``k_first``, or K), each new k smaller than those
    before it and so winning ties; with ``bound`` (see _auto_k_bound), stop once it rules out
    every smaller k for every row. Then k = K1+1..K upwards, only those ``larger(best, per_k)``
    says some row may win at, each taking a row only when strictly better (or the first NaN)."""
    K1 = K if k_first is None else min(K, k_first)
    best = best_k = None
    for j in range(K1, 0, -1):
        t = terms(np.array([[j]]))
        v = (t.t_iter / t.tau)[:, 0]
        if best is None:
            best, best_k = v, np.full(v.shape, j, dtype=np.int64)
            per_k = None if t.per_k is None else t.per_k[:, 0]
        else:
            better = np.isnan(v) | (~np.isnan(best) & (v <= best))
            best, best_k = np.where(better, v, best), np.where(better, j, best_k)
        if bound is not None and j > 1:
            done, k_done = bound(j, t, best, best_k)
            if done:
                best_k = k_done
                break
    if K1 < K:
        for j in (larger(best, per_k) if larger is not None else range(K1 + 1, K + 1)):
            v = (lambda t: (t.t_iter / t.tau)[:, 0])(terms(np.array([[int(j)]])))
            better = ~np.isnan(best) & (np.isnan(v) | (v < best))
            best, best_k = np.where(better, v, best), np.where(better, int(j), best_k)
    return best_k


def _auto_k_bound(tau_tab, win_tab, K: int, fixed, overlapped, floor_s):
    """bound(j, terms at k = j, best s/token over k = j..K, its k) -> (True when no k < j can
    beat it on any row, the chosen k then); a chain (trees are not bounded).

    For k < j: tau(k) is the table's (the same for every row); the verify pass costs at least a
    plain decode step (q = k + 1 >= 1 tokens, and as many prefill tokens or more); the draft
    takes k x one step for a draft model, EAGLE or early exit (at least 0 for the others), and
    overlapped, at least (1 - p_window(k)) of it is exposed (specdec.iteration_time_s). So
    s/token(k) >= (draft_lb(k) + T_base + t_spec) / tau(k) (``floor_s`` = T_base + t_spec). A row
    is settled when it is fixed, or that bound less a relative margin of 1e-9 for rounding is
    above its finite best (a tie would go to the smaller k). Whether a term is finite does not
    depend on k (zero bandwidth or FLOP/s makes it infinite at every k), so a finite best stays
    finite at smaller k, and an infinite one is infinite at every k, hence k = 1 (the first of
    equal values); unless an exposed infinite draft time meets p_window(k) = 0 or 1 (a NaN).
    """
    win = win_tab[1:K + 1]
    inf_ok = ~overlapped | bool(np.all((win > 0) & (win < 1)))

    def bound(j, t, best, best_k):
        inf_row = (best == np.inf) & inf_ok
        open_rows = ~(fixed | inf_row)
        for m in range(j - 1, 0, -1):        # k = j - 1 first: the likeliest to beat the best
            draft = 0.0
            if t.per_k is not None:
                draft = t.per_k[:, 0] * float(m)
                draft = np.where(overlapped, (1.0 - win_tab[m]) * draft, draft)
            lb = (draft + floor_s) / tau_tab[m] * (1.0 - _BOUND_MARGIN)
            if (open_rows & ~(lb > best)).any():        # a NaN best is never above: not settled
                return False, best_k
        return True, np.where(inf_row, 1, best_k)
    return bound


def prefill_queue_s(prefill_s, batch, output_tokens, s_per_token):
    """Continuous batching: the mean wait of a new prompt behind the other arriving prompts'
    prefills (no chunked prefill: each prompt is one step). The other B-1 requests in flight
    arrive at lambda = (B-1)/(G x s_per_token) (a request's life is its G tokens; its TTFT is
    left out of that), each taking S = ``prefill_s``; a FIFO queue with deterministic service
    (M/D/1, Pollaczek-Khinchine) waits W = rho S / (2(1 - rho)), rho = lambda S, at most the
    B-1 prompts ahead (B-1) S (a closed loop of B clients holds no more)."""
    B = np.asarray(batch, dtype=np.float64)
    rho = (B - 1.0) * prefill_s / (np.asarray(output_tokens, dtype=np.float64) * s_per_token)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(rho < 1.0, rho * prefill_s / (2.0 * (1.0 - rho)), np.inf)
    return np.minimum(w, (B - 1.0) * prefill_s)


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


def _finish(metrics, caps: dict[str, np.ndarray], blank: bool = True) -> Metrics:
    """Attach capacity results (``_capacity``) and blank every latency of a design that does not fit
    (unless done already: ``blank=False``)."""
    out = {}
    fits = caps["fits"]
    blank = blank and not bool(np.all(fits))         # nothing to blank where every design fits
    for name, attr, _ in METRIC_COLUMNS:
        if attr in metrics:
            v = np.asarray(metrics[attr])
            if blank and name in LATENCY_METRICS and v.dtype.kind == "f":
                v = np.where(fits, v, np.nan)
            out[attr] = v
    return Metrics(**caps, **out)
