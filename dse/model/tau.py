"""The acceptance side of an iteration for a workload (MODEL.md section 3): tokens per iteration tau,
P(all k accepted) and P(window usable) at each k, for chains (one table per acceptance and k range,
kept) and for trees (the best tree of each size, specdec.tree_table), token-weighted text mixes of
them, and the largest k the drafter and the acceptance allow."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workload.spec import AcceptanceSpec, Workload
from . import specdec
from .framework_trees import framework_terms


def largest_k(w: Workload) -> int:
    """Largest k (chain length, or tree depth) to consider."""
    d, acc = w.drafter, w.acceptance
    k_max = w.k_max
    if d.k_cap:
        k_max = min(k_max, d.k_cap)
    if acc.kind == "per_position":
        k_max = min(k_max, len(acc.per_position))
    if acc.kind == "rank" and len(acc.rank) > 1:      # one row per depth (Medusa head)
        k_max = min(k_max, len(acc.rank))
    if w.tree_nodes:
        k_max = min(k_max, w.tree_nodes)
    return max(1, k_max)


def tau_table(w: Workload, K: int):
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
    """tau_table of acceptance ``acc``, computed."""
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


def tree_terms(w: Workload, nodes, kc, K: int, depth: int):
    """Trees: tau, p_deepest, p_window, nodes per depth and rows per draft step (each (..., K)) for N =
    ``nodes`` (n, 1) and depth <= kc (broadcast), from the best tree (specdec.tree_table): one table per
    workload, gathered per design; a best tree's draft step d processes its nodes at depth d. Rank
    probabilities come from the acceptance (alpha and per-position rates through the workload's rank
    profile, specdec.rank_matrix). Given tau is used as is; the shape and the window are those of the
    top-1 rate whose best tree under the rank profile has that tau (one per distinct N). A framework's
    tree (w.tree: dse.model.framework_trees) is the tree it builds, at its own depth, whatever kc."""
    acc = w.acceptance
    n_max = int(nodes.max())
    if acc.kind == "mixture":     # each task its best tree (dynamic trees adapt per context); the shape of the heaviest
        parts = [tree_terms(dataclasses.replace(w, acceptance=c), nodes, kc, K, depth) for c in acc.components]
        heavy = parts[int(np.argmax(acc.weights))]
        return (*_mix([p[:3] for p in parts], acc.weights), heavy[3], heavy[4])
    if w.tree is not None and w.tree.nodes:
        return framework_terms(w, acc, np.broadcast_shapes(np.shape(kc), np.shape(nodes)), K)
    if acc.kind != "tau":
        p = specdec.rank_matrix(acc, K + 1, n_max, w.rank_profile)
        t = specdec.tree_table(p, K, n_max)
        shape = t.shape[kc, nodes]
        return t.tau[kc, nodes], t.p_deepest[kc, nodes], t.p_window[kc, nodes], shape, shape
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
    return (*out, out[3])


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
    the same terms evaluate() uses (chains by tau_table, trees by tree_terms)."""
    k = np.asarray(k, dtype=np.int64)
    nodes = np.broadcast_to(np.asarray(nodes, dtype=np.int64), k.shape) if k.ndim else np.asarray(nodes, np.int64)
    K = max(1, int(np.max(k)))
    tau_tab, p_tab, win_tab = tau_table(w, K)
    tau, p_all, p_win = tau_tab[k], p_tab[k], win_tab[k]
    tree = nodes > 0
    if np.any(tree):
        t_tau, t_deep, t_win = tree_terms(w, np.atleast_1d(nodes)[:, None], np.atleast_1d(k)[:, None], K, K)[:3]
        t_tau, t_deep, t_win = (np.reshape(x, k.shape) for x in (t_tau, t_deep, t_win))
        tau, p_all, p_win = (np.where(tree, a, b) for a, b in ((t_tau, tau), (t_deep, p_all), (t_win, p_win)))
    return tau, p_all, p_win

