"""evaluate(batch, workload) -> Metrics: every design row at once (MODEL.md sections 2-4).

Everything MODEL.md section 3 says must be reported together comes out together: per-token
latency, the baseline, speedup, alpha (which one), k, tau, the draft's cost ratio c, each
phase's time, arithmetic intensity and bound, the Leviathan bound, throughput, TTFT and
request latency, and the capacity check for both models and both caches; and how much of a
token is the software stack (overhead_s_per_token: the runtime's fixed costs of an iteration
over its tau tokens, MODEL.md section 5).

Here: the Metrics and their external columns, the evaluation in blocks and once per distinct
row of latency inputs, and the blanking of latencies where a design does not fit. The terms come
from capacity (section 4), latency (sections 2-3 and the energy per token), tau (acceptance) and
k_auto (choosing k).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..units import FACTOR
from ..workload.spec import Workload
from .arrays import DesignBatch
from .capacity import capacity_metrics
from .dedupe import distinct_latency_rows
from .latency import energy_metrics, latency_metrics
from .roofline import BOUND_NAMES
from .tree_choice import chosen_tree_metrics


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
    draft_tp: np.ndarray
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
    # the best operating point under the workload's SLA (dse.model.serving; NaN and '' without one)
    sla_tokens_per_s_per_chip: np.ndarray
    sla_concurrency: np.ndarray
    sla_tokens_per_s_per_user: np.ndarray
    sla_ttft_s: np.ndarray
    sla_tpot_s: np.ndarray
    sla_energy_j_per_token: np.ndarray
    sla_speculation: np.ndarray
    sla_serving: np.ndarray
    sla_prefill_share: np.ndarray

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
    ("draft_tp", "draft_tp", None),
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
    ("sla_tokens_per_s_per_chip", "sla_tokens_per_s_per_chip", None),
    ("sla_concurrency", "sla_concurrency", None),
    ("sla_tokens_per_s_per_user", "sla_tokens_per_s_per_user", None),
    ("sla_ttft_ms", "sla_ttft_s", FACTOR["ms"]),
    ("sla_tpot_ms", "sla_tpot_s", FACTOR["ms"]),
    ("sla_energy_j_per_token", "sla_energy_j_per_token", None),
    ("sla_speculation", "sla_speculation", "text"),
    ("sla_serving", "sla_serving", "text"),
    ("sla_prefill_share", "sla_prefill_share", None),
)
_NAMES = [c[0] for c in METRIC_COLUMNS]
#: metrics that are latencies or depend on them: NaN (null) where the design does not fit (the sla_*
#: ones are points at their own concurrency, each checked there)
LATENCY_METRICS = frozenset(_NAMES[_NAMES.index("baseline_ms_per_token"):_NAMES.index("request_latency_ms") + 1])
#: the SLA search's metrics (dse.model.serving.sla_metrics), by Metrics attribute
SLA_ATTRS = tuple(attr for name, attr, _ in METRIC_COLUMNS if name.startswith("sla_"))
_LATENCY_ATTRS = frozenset(attr for name, attr, _ in METRIC_COLUMNS if name in LATENCY_METRICS)


#: batches of at least this many rows evaluate the latency terms once per distinct input row
#: (``dedupe.distinct_latency_rows``); smaller ones (one design, a search batch) as they are
MIN_ROWS_DEDUPE = 1024


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
        m = join_metrics((_unfinished(batch.take(r), w, dedupe, k_bound) for r in rows), rows, batch.n)
    else:
        m = _finish(*_unfinished(batch, w, dedupe, k_bound))
    return m if w.sla is None else with_sla(m, batch, w)


def with_sla(m: Metrics, batch: DesignBatch, w: Workload, picks: dict | None = None) -> Metrics:
    """``m`` with the sla_* metrics of the best operating point under w.sla (dse.model.serving;
    ``picks``: its sla_picks, when the caller has them already)."""
    from .serving import sla_metrics  # (serving evaluates the points with evaluate)
    with np.errstate(divide="ignore", invalid="ignore"):
        sla = sla_metrics(batch, w, evaluate, w.sla, w.serving, picks=picks)
        return dataclasses.replace(m, **{k: v for k, v in sla.items() if not k.startswith("_")})


def _unfinished(batch: DesignBatch, w: Workload, dedupe: bool, k_bound: bool):
    """evaluate() of one block, as the arguments of _finish: (metrics, capacity results, whether
    latencies of designs that do not fit are still to be blanked)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        caps = capacity_metrics(batch, w)
        rows = distinct_latency_rows(batch) if dedupe and batch.n >= MIN_ROWS_DEDUPE else None
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


def _latency(batch: DesignBatch, w: Workload, k_bound: bool) -> dict[str, np.ndarray]:
    """The latency terms, at each row's fastest tree size where the workload chooses it
    (Workload.tree_choices: tree_choice.chosen_tree_metrics)."""
    if w.tree_choices and w.drafter.kind != "none":
        return chosen_tree_metrics(batch, w, k_bound)
    return latency_metrics(batch, w, k_bound)


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
        rows_n = _fits_n(values)
        for attr in _METRICS_FIELDS:
            v = np.asarray(values.pop(attr)) if attr in values else _no_sla(attr, rows_n)
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


def _no_sla(attr: str, n: int) -> np.ndarray:
    """An sla_* attribute of rows evaluated without an SLA: '' or NaN."""
    return np.full(n, "") if attr in ("sla_speculation", "sla_serving") else np.full(n, np.nan)


def _fits_n(values: dict) -> int:
    """Rows of a part of join_metrics (its capacity results' 'fits' or any metric)."""
    return int(np.shape(values["fits"])[0])


def _finish(metrics, caps: dict[str, np.ndarray], blank: bool = True) -> Metrics:
    """Attach capacity results (``capacity_metrics``) and blank every latency of a design that does not fit
    (unless done already: ``blank=False``)."""
    out = {}
    fits = caps["fits"]
    blank = blank and not bool(np.all(fits))         # nothing to blank where every design fits
    for attr in SLA_ATTRS:          # no SLA (evaluate replaces them where the workload has one)
        out[attr] = _no_sla(attr, fits.shape[0])
    for name, attr, _ in METRIC_COLUMNS:
        if attr in metrics:
            v = np.asarray(metrics[attr])
            if blank and name in LATENCY_METRICS and v.dtype.kind == "f":
                v = np.where(fits, v, np.nan)
            out[attr] = v
    return Metrics(**caps, **out)
