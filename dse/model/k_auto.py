"""Choosing k = auto one k at a time: the least seconds per token per row, the same choice (bit for
bit) as every k at once, stopped early where a lower bound on the smaller k rules them out, and the
join of two sets of k-candidate terms."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .roofline import StepCost

#: relative margin on the k = auto bound, far above the few ulps of rounding in its terms
BOUND_MARGIN = 1e-9


def concat_terms(a: SimpleNamespace, b: SimpleNamespace, n: int, ka: int, kb: int) -> SimpleNamespace:
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


def auto_k(terms, K: int, bound, k_first: int | None = None, larger=None) -> np.ndarray:
    """The k in 1..K with the least seconds per token for every row: the same choice as
    np.argmin over all K at once (the first minimum; a NaN wins, the first NaN).

    Evaluates k = K1, K1-1, ... in turn (K1 = ``k_first``, or K), each new k smaller than those
    before it and so winning ties; with ``bound`` (see auto_k_bound), stop once it rules out
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


def auto_k_bound(tau_tab, win_tab, K: int, fixed, overlapped, floor_s):
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
            lb = (draft + floor_s) / tau_tab[m] * (1.0 - BOUND_MARGIN)
            if (open_rows & ~(lb > best)).any():        # a NaN best is never above: not settled
                return False, best_k
        return True, np.where(inf_row, 1, best_k)
    return bound
