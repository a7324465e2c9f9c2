"""Speculative-decoding accounting: tokens per target pass and iteration time (MODEL.md section 3)."""

from __future__ import annotations

import functools
import heapq
from typing import NamedTuple

import numpy as np

from ..catalog.rank_profiles import GEOMETRIC, RankProfile
from ..workload.spec import AcceptanceSpec
from .work import COUNTS


def tau_iid(alpha, k):
    """Leviathan et al. 2023 (arXiv 2211.17192) Eq. 1: tau = (1 - a^(k+1)) / (1 - a); k+1 at a = 1."""
    a = np.asarray(alpha, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = (1.0 - a ** (k + 1.0)) / (1.0 - a)
    return np.where(a >= 1.0, k + 1.0, tau)


def position_rates(acc: AcceptanceSpec, k_max: int) -> np.ndarray:
    """Conditional acceptance rate per draft position 1..k_max, shape (k_max,).

    Per-position rates past the given ones repeat the last (used only for the overlap window's
    (k+1)-th token); a rank vector's chain uses its rank-1 column (a chain drafts the top token).
    """
    if acc.kind == "per_position":
        a = np.asarray(acc.per_position, dtype=np.float64)
        return a[np.minimum(np.arange(k_max), a.size - 1)]
    if acc.kind == "rank":
        return rank_matrix(acc, k_max, 1)[:, 0]
    return np.full(k_max, acc.alpha, dtype=np.float64)


def tokens_per_iteration(rates: np.ndarray, k):
    """tau = 1 + sum_{i<=k} prod_{j<=i} a_j and p_all = prod_{j<=k} a_j (MODEL.md section 3).

    ``rates`` has shape (..., k_max) (per position, possibly per design); ``k`` is an integer
    array that broadcasts against ``rates[..., 0]`` with 0 <= k <= k_max.
    """
    prods = np.cumprod(rates, axis=-1)
    zero = np.zeros(prods.shape[:-1] + (1,))
    cum = np.concatenate([zero, np.cumsum(prods, axis=-1)], axis=-1)
    p = np.concatenate([np.ones(prods.shape[:-1] + (1,)), prods], axis=-1)
    tau = 1.0 + _gather(cum, k)
    return tau, _gather(p, k)


def _gather(table, k):
    """table[..., k] with k broadcast over leading axes (k indexes the last axis)."""
    k = np.asarray(k, dtype=np.int64)
    if table.ndim == 1:
        return table[k]
    shape = np.broadcast_shapes(table.shape[:-1], k.shape)
    t = np.broadcast_to(table, shape + table.shape[-1:])
    return np.take_along_axis(t, np.broadcast_to(k, shape)[..., None], axis=-1)[..., 0]


def implied_alpha(tau, k, iters: int = 60):
    """The i.i.d. alpha with tau_iid(alpha, k) = tau, by bisection (tau is increasing in alpha)."""
    tau = np.asarray(tau, dtype=np.float64)
    k = np.broadcast_to(np.asarray(k, dtype=np.float64), tau.shape)
    lo, hi = np.zeros_like(tau), np.ones_like(tau)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        low = tau_iid(mid, k) < tau
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return 0.5 * (lo + hi)


def iteration_time_s(t_draft, t_verify, t_link, t_spec_overhead, p_all, overlapped):
    """Seconds per speculative iteration and the draft time left on the critical path.

    Serial: T_iter = T_draft + T_link + T_verify + t_spec.
    Overlapped (draft chip keeps drafting while the target verifies; a model, MODEL.md
    section 3): T_iter = T_verify + T_link + (1 - p_all)*T_draft + p_all*max(0, T_draft - T_verify) + t_spec.
    Returns (T_iter, exposed draft time).
    """
    if np.any(overlapped):
        hidden = (1.0 - p_all) * t_draft + p_all * np.maximum(0.0, t_draft - t_verify)
        exposed = np.where(overlapped, hidden, t_draft)
    else:           # serial everywhere: the whole draft time (the shape np.where would give)
        shape = np.broadcast_shapes(np.shape(overlapped), np.shape(t_draft), np.shape(t_verify), np.shape(p_all))
        exposed = t_draft if np.shape(t_draft) == shape else np.broadcast_to(t_draft, shape)
    return exposed + t_link + t_verify + t_spec_overhead, exposed


# ---- token trees (Sequoia, Chen et al. 2024, arXiv 2402.12374) ----

#: Largest tree evaluated: dse.workload.spec.TREE_NODES_MAX. Published static trees are far smaller
#: (EAGLE 26 nodes, Medusa 64, EAGLE-2 60, SpecInfer <= 128); Sequoia's largest (768 nodes) was
#: built for offloading, where a verify pass costs the same at any size. 1024 covers it, and keeps
#: the per-workload table of best trees (depth x nodes x depth int16) a few MB and quick to build.


def rank_matrix(acc: AcceptanceSpec, depth: int, ranks: int, profile: RankProfile | None = None) -> np.ndarray:
    """p[d, r]: the rank-(r+1) child of an accepted node at depth d is the accepted one.

    alpha (the top-1 rate at every depth) or per-position rates a_d (the top-1 rate at depth d):
    the drafter kind's measured rank ``profile`` scaled to that top-1 rate
    (dse.catalog.rank_profiles: p_1 = a, p_r = p_r(a0) (a/a0)^beta (1-a)/(1-a0), beta 0.5 as shipped,
    the tail cut to 1 - a); None is the geometric limit p_r = a(1 - a)^(r-1) (Sequoia section 3.1:
    every candidate independently as good as the first). A given rank vector (one row) applies
    at every depth; rows per depth (Medusa head i, rank r) are used as given. Depths past the
    given rows repeat the last row; ranks past the given ones have p = 0. Shape (depth, ranks).
    """
    if acc.kind in ("alpha", "per_position"):
        a = np.asarray([acc.alpha] if acc.kind == "alpha" else acc.per_position, dtype=np.float64)
        return (profile or GEOMETRIC).probabilities(a[np.minimum(np.arange(depth), a.size - 1)], ranks)
    if acc.kind == "rank":
        rows = np.zeros((len(acc.rank), ranks))
        for i, row in enumerate(acc.rank):
            m = min(len(row), ranks)
            rows[i, :m] = row[:m]
        return rows[np.minimum(np.arange(depth), len(acc.rank) - 1)]
    raise ValueError(f"rank_matrix: acceptance kind {acc.kind!r} has no rank probabilities")


def best_tree_nodes(p: np.ndarray, depth: int, n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """The n_max most valuable nodes of depth <= ``depth``, best first: (values, depths 1..D).

    A node's value is the product of p along its path (the probability it is accepted); the
    best N-node tree is the first N of this list (Sequoia, arXiv 2402.12374, section 3.2), a
    valid tree because a child never outweighs its parent (p <= 1). Best-first search: a node
    enters the queue only after its parent (first child) or its elder sibling (next rank), so
    ties never put a child before its parent. Ranks are used in order of decreasing p at each
    depth. Cost O(n_max log n_max) per (p, depth): built once per workload, not per design.
    """
    p = -np.sort(-p[:depth], axis=1)
    R = p.shape[1]
    vals, deps = np.zeros(n_max), np.zeros(n_max, dtype=np.int64)
    heap = [(-p[0, 0], 0, 0, 0, 1.0)] if R else []   # (-value, seq, depth index, rank index, parent value)
    seq, i = 1, 0
    while heap and i < n_max:
        nv, _, d, r, parent = heapq.heappop(heap)
        v = -nv
        vals[i], deps[i] = v, d + 1
        i += 1
        if r + 1 < R:
            heapq.heappush(heap, (-parent * p[d, r + 1], seq, d, r + 1, parent))
            seq += 1
        if d + 1 < depth:
            heapq.heappush(heap, (-v * p[d + 1, 0], seq, d + 1, 0, v))
            seq += 1
    deps[i:] = 1            # more nodes asked than candidates: value-0 children of the root
    return vals, deps


class TreeTable(NamedTuple):
    """Best trees for every depth bound D = 0..D_max and size N = 0..N_max (index [D, N]).

    tau = 1 + sum of node values; shape[D, N, d-1] = nodes at depth d; p_deepest = P(the
    accepted path reaches the tree's deepest level); p_window = that times the rank-1 rate one
    level further (MODEL.md section 3, overlap window).
    """

    tau: np.ndarray         # (D_max+1, N_max+1)
    shape: np.ndarray       # (D_max+1, N_max+1, D_max) int16
    p_deepest: np.ndarray   # (D_max+1, N_max+1)
    p_window: np.ndarray    # (D_max+1, N_max+1)


def tree_table(p: np.ndarray, depth_max: int, n_max: int) -> TreeTable:
    """TreeTable for rank probabilities ``p`` (at least depth_max+1 rows: the last one is the
    level after the deepest, for p_window)."""
    key = (p.shape, p.tobytes(), int(depth_max), int(n_max))
    COUNTS["tables"] += 1
    return _tree_table_cached(key)


@functools.lru_cache(maxsize=4096)    # a study of several drafts (an early exit per layer), each a text mix with a band: a table per draft, task and end (draft-codesign: ~700; 512 thrashed)
def _tree_table_cached(key) -> TreeTable:
    shape_p, raw, D, N = key
    p = np.frombuffer(raw, dtype=np.float64).reshape(shape_p)
    tau = np.ones((D + 1, N + 1))
    shape = np.zeros((D + 1, N + 1, max(D, 1)), dtype=np.int16)
    p_deep, p_win = np.ones((D + 1, N + 1)), np.ones((D + 1, N + 1))
    p_win[0, :] = np.max(p[0]) if p.size else 0.0
    first = np.max(p, axis=1)
    for d in range(1, D + 1):
        vals, deps = best_tree_nodes(p, d, N)
        tau[d, 1:] = 1.0 + np.cumsum(vals)
        onehot = deps[:, None] == np.arange(1, d + 1)[None, :]
        shape[d, 1:, :d] = np.cumsum(onehot, axis=0)
        deepest = np.maximum.accumulate(deps)                                # deepest level of the first N
        mass = np.cumsum(onehot * vals[:, None], axis=0)                     # (N, d)
        p_deep[d, 1:] = np.take_along_axis(mass, (deepest - 1)[:, None], axis=1)[:, 0]
        p_win[d, 1:] = p_deep[d, 1:] * first[deepest]
    return TreeTable(tau, shape, p_deep, p_win)


def implied_tree_alpha(tau: float, depth: int, nodes: int, profile: RankProfile | None = None,
                       iters: int = 50) -> float:
    """The top-1 rate whose best tree of ``nodes`` nodes and depth <= ``depth`` under the rank
    ``profile`` (None: geometric) has this tau, by bisection (tau rises with it). Used for a
    tree's shape when tau is given."""
    prof = profile or GEOMETRIC

    def tree_tau(rate):
        vals, _ = best_tree_nodes(np.tile(prof.probabilities(np.array([rate]), nodes), (depth, 1)), depth, nodes)
        return 1.0 + vals.sum()
    return rate_for_tau(tau, tree_tau, iters)


def rate_for_tau(tau: float, tau_of_rate, iters: int = 50) -> float:
    """The top-1 rate in [0, 1] at which the increasing ``tau_of_rate`` reaches ``tau``, by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tau_of_rate(mid) < tau else (lo, mid)
    return 0.5 * (lo + hi)
