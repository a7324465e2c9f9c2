"""A method's tree re-chosen for each design (MODEL.md section 3, "Trees"): when the user fixes
neither k nor a tree size, each of the workload's tree sizes (Workload.tree_choices: a chain, the
smaller trees and the method's published tree) is evaluated with k = auto, and each row keeps the
one with the least seconds per token. A tree is evaluated only on the rows where a lower bound
says it may beat the chain."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workload.spec import Workload
from .arrays import DesignBatch
from .k_auto import BOUND_MARGIN
from .latency import latency_metrics, tree_verify_s
from .tau import acceptance_terms, largest_k

#: rows x tree sizes up to which the trees not ruled out by the chain are evaluated in one pass over
#: (row, size) pairs (a search batch of 64 designs: the per-pass cost dominates); above, one pass
#: per size over the rows the best so far does not rule out (a pass over 5 x 131,072 stacked rows
#: would hold 5 times the arrays)
STACK_ROWS = 16384


def chosen_tree_metrics(batch: DesignBatch, w: Workload, k_bound: bool = True) -> dict[str, np.ndarray]:
    """latency_metrics of every row at its fastest tree size among ``w.tree_choices``:
    min over N in the choices of T_iter(N, k*(N)) / tau(N, k*(N)), k*(N) the k = auto of that size
    (speculation off where no size beats plain decoding): a chain up to k_max (as --k auto), a tree
    its best shape up to the published tree's depth. A tie keeps the earlier (smaller) size, a NaN
    loses to any number. The columns k, tree_nodes and tree_shape say what was chosen. Where the chain
    has an acceptance of its own (Workload.chain_acceptance: an EAGLE-3 head's chain term), a size whose
    best tree is one node per depth is that chain and is not kept as a tree.

    A tree of N nodes is skipped on a row where it cannot beat the best s/token c found so far:
    T_iter >= T_verify(N) + t_spec (latency.tree_verify_s; q = N + 1 positions whatever k) and
    tau <= tau(N, deepest k) (a deeper bound only adds shapes), so where
    (T_verify(N) + t_spec) / tau_max(N) x (1 - 1e-9) >= c it is strictly slower than a size already
    evaluated. c is the chain's when every (row, size) pair left goes into one pass (rows x sizes <=
    STACK_ROWS, each pair a row with its DesignBatch.tree_nodes), else the best so far as the sizes
    are evaluated one pass each, the largest (the published tree, the likeliest winner where trees
    win) first. The same bits as one pass per size over every row. A published tree its code builds
    (DraftShape.tree: EAGLE-1's static tree, EAGLE-2's dynamic tree) is that tree at its own depth
    (dse.model.framework_trees), evaluated in a pass of its own."""
    n = batch.n
    shape = w.drafter.default_shape()
    w_tree = dataclasses.replace(w, tree_nodes=0, k_max=w.k_max if shape is None else min(w.k_max, shape.depth),
                                 tree_choices=())
    trees = [int(c) for c in w.tree_choices if c]
    pub = shape.tree if shape is not None and trees and trees[-1] == shape.nodes else None

    def w_size(i):
        """The workload of tree size i: the published tree as built where it has a framework tree."""
        if pub is not None and i == len(trees) - 1:
            return dataclasses.replace(w_tree, tree_nodes=trees[i], tree=pub, k_max=max(w_tree.k_max, pub.depth))
        return dataclasses.replace(w_tree, tree_nodes=trees[i])
    chain = None
    if 0 in w.tree_choices:
        w_chain = dataclasses.replace(w, tree_nodes=0, tree_choices=(), chain_acceptance=None)
        if w.chain_acceptance is not None:      # the chain's own acceptance (an EAGLE-3 head's chain term)
            a, lo, hi = w.chain_acceptance
            w_chain = dataclasses.replace(w_chain, acceptance=a, acceptance_low=lo, acceptance_high=hi)
        chain = latency_metrics(batch, w_chain, k_bound)
    best = np.array(np.broadcast_to(chain["spec_s_per_token"], (n,))) if chain is not None else np.full(n, np.nan)

    def floor(i):
        """(T_verify(N) + t_spec) / tau_max(N) per row, N = trees[i]."""
        w_n = w_size(i)
        return (tree_verify_s(batch, w, trees[i]) + batch.target.spec_overhead_s + batch.target.spec_schedule_s) / float(
            acceptance_terms(w_n, largest_k(w_n), trees[i])[0])

    done: list[tuple[np.ndarray, np.ndarray, dict]] = []        # (rows, size index per row, their metrics)
    if n * len(trees) <= STACK_ROWS:
        rows = [np.flatnonzero(~(floor(i) * (1.0 - BOUND_MARGIN) >= best)) for i in range(len(trees))]   # NaN: evaluate
        if pub is not None:         # the published tree as built: a pass of its own
            if rows[-1].size:
                done.append((rows[-1], np.full(rows[-1].size, len(trees) - 1),
                             latency_metrics(batch.take(rows[-1]), w_size(len(trees) - 1), k_bound)))
            rows = rows[:-1]
        sizes = np.concatenate([np.full(r.size, i) for i, r in enumerate(rows)] + [np.zeros(0, int)])
        rows = np.concatenate(rows + [np.zeros(0, int)])
        if rows.size:
            done.append((rows, sizes, latency_metrics(dataclasses.replace(
                batch.take(rows), tree_nodes=np.asarray(trees)[sizes]), w_tree, k_bound)))
    else:
        for i in reversed(range(len(trees))):
            rows = np.flatnonzero(~(floor(i) * (1.0 - BOUND_MARGIN) >= best))
            if rows.size:
                m = latency_metrics(batch if rows.size == n else batch.take(rows), w_size(i), k_bound)
                if chain is not None:       # (no chain: no bound, every size on every row)
                    best[rows] = np.fmin(best[rows], np.broadcast_to(m["spec_s_per_token"], (rows.size,)))
                done.append((rows, np.full(rows.size, i), m))
    if not done:
        return chain
    rows = np.concatenate([r for r, _, _ in done])
    sizes = np.concatenate([s for _, s, _ in done])
    pairs = {key: np.concatenate([np.broadcast_to(m[key], (r.size,)) for r, _, m in done]) for key in done[0][2]}
    # per row: the least s/token over the chain (size 0) and its evaluated trees, the first of equals
    table = np.full((len(trees) + 1, n), np.inf)
    if chain is not None:
        spec0 = np.broadcast_to(chain["spec_s_per_token"], (n,))
        table[0] = np.where(np.isnan(spec0), np.inf, spec0)
    spec = pairs["spec_s_per_token"]
    lost = np.isnan(spec)
    if w.chain_acceptance is not None and chain is not None:
        # a tree whose best shape is one node per depth is the chain: it drafts at the chain's acceptance,
        # as the chain candidate (k = auto up to k_max) already evaluates it
        shape_txt = np.asarray(pairs["tree_shape"], dtype=str)
        lost = lost | ((shape_txt != "") & (np.char.strip(np.char.replace(shape_txt, "-", ""), "1") == ""))
    table[sizes + 1, rows] = np.where(lost, np.inf, spec)
    pick = np.argmin(table, axis=0)
    where = np.full((len(trees), n), -1)
    where[sizes, rows] = np.arange(rows.size)
    if chain is None:           # no chain: every row takes a tree (each evaluated on every row: best NaN)
        return {key: v[where[np.maximum(pick, 1) - 1, np.arange(n)]] for key, v in pairs.items()}
    won = np.flatnonzero(pick > 0)
    at = where[pick[won] - 1, won]
    out = {}
    for key, v in chain.items():
        col = np.array(np.broadcast_to(v, (n,)), dtype=np.result_type(np.asarray(v), pairs[key]))
        col[won] = pairs[key][at]
        out[key] = col
    return out
