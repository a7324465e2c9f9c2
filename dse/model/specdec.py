"""Speculative-decoding accounting: tokens per target pass and iteration time (MODEL.md section 3)."""

from __future__ import annotations

import numpy as np

from ..workload import AcceptanceSpec


def tau_iid(alpha, k):
    """Leviathan et al. 2023 (arXiv 2211.17192) Eq. 1: tau = (1 - a^(k+1)) / (1 - a); k+1 at a = 1."""
    a = np.asarray(alpha, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = (1.0 - a ** (k + 1.0)) / (1.0 - a)
    return np.where(a >= 1.0, k + 1.0, tau)


def tree_level_rates(rates, widths):
    """A level holding w candidate children of the accepted node is accepted with
    1 - (1 - a)^w (candidates treated as independent: an optimistic model, see README)."""
    return 1.0 - (1.0 - rates) ** widths


def position_rates(acc: AcceptanceSpec, k_max: int) -> np.ndarray:
    """Conditional acceptance rate per draft position 1..k_max, shape (k_max,)."""
    if acc.kind == "per_position":
        return np.asarray(acc.per_position[:k_max], dtype=np.float64)
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
    hidden = (1.0 - p_all) * t_draft + p_all * np.maximum(0.0, t_draft - t_verify)
    exposed = np.where(overlapped, hidden, t_draft)
    return exposed + t_link + t_verify + t_spec_overhead, exposed
