"""Pareto fronts, non-dominated ranks and hypervolume over numpy arrays (no pandas).

``values`` is an ``(n, m)`` array, one row per design and one column per objective;
``directions`` gives ``"minimize"`` or ``"maximize"`` (``"min"``/``"max"`` also accepted) per
column. Maximised objectives are passed to moocore as ``maximise`` flags, never sign-flipped.

A row takes part only if it is feasible (``feasible`` is True, or not given) and all its
objectives are finite: a NaN or +-inf objective counts as infeasible, so such a row is never on
a front and gets rank -1.

Dominance (minimisation): ``a`` dominates ``b`` when ``a <= b`` in every objective and
``a < b`` in at least one. Algorithms are moocore's (Lopez-Ibanez et al., moocore 0.3):
Kung, Luccio and Preparata (1975) for the non-dominated filter, Jensen (2003) / repeated
filtering for ranks, HV3D+/HV4D+ (Guerreiro and Fonseca 2017) for the hypervolume.
"""

from __future__ import annotations

from collections.abc import Sequence

import moocore
import numpy as np

__all__ = ["pareto_mask", "pareto_ranks", "first_of_equal", "front_order", "epsilon_thin", "epsilon_vector",
           "hypervolume", "default_reference", "maximise_flags"]

#: every accepted spelling of an objective direction -> "minimize" | "maximize" (the one table)
DIRECTIONS = {"min": "minimize", "minimize": "minimize", "minimise": "minimize",
              "max": "maximize", "maximize": "maximize", "maximise": "maximize"}


def maximise_flags(directions: Sequence[str]) -> list[bool]:
    """``["minimize", "maximize"] -> [False, True]``; raises ValueError on anything else."""
    flags = []
    for d in directions:
        key = str(d).strip().lower()
        if key not in DIRECTIONS:
            raise ValueError(f"objective direction {d!r}: expected 'minimize' or 'maximize'")
        flags.append(DIRECTIONS[key] == "maximize")
    return flags


def _prepare(values, directions, feasible=None):
    """Return (float (n, m) array, maximise flags, usable-row mask)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1 and len(directions) == 1:
        v = v[:, None]
    if v.ndim != 2:
        raise ValueError(f"values must be a 2-D (n, m) array, but got shape {v.shape}")
    flags = maximise_flags(directions)
    if v.shape[1] != len(flags):
        raise ValueError(f"values has {v.shape[1]} objective columns but {len(flags)} "
                         f"directions were given")
    ok = finite_rows(v)
    if feasible is not None:
        f = np.asarray(feasible, dtype=bool)
        if f.shape != (v.shape[0],):
            raise ValueError(f"feasible must have shape ({v.shape[0]},), but got {f.shape}")
        ok &= f
    return v, flags, ok


def finite_rows(v: np.ndarray) -> np.ndarray:
    """``np.isfinite(v).all(axis=1)`` of a 2-D array, column by column (a reduction along short rows
    is several times slower than a few passes over columns).

    >>> finite_rows(np.array([[1.0, 2.0], [np.nan, 1.0], [3.0, np.inf]])).tolist()
    [True, False, False]
    """
    ok = np.ones(v.shape[0], dtype=bool)
    for j in range(v.shape[1]):
        ok &= np.isfinite(v[:, j])
    return ok


def first_of_equal(values, mask) -> np.ndarray:
    """``mask`` keeping only the first row (in row order) of each distinct objective vector
    among the masked rows: one row per point of a front, the first found.

    >>> first_of_equal([[1, 3], [2, 2], [1, 3], [2, 2]], [True, True, True, False]).tolist()
    [True, True, False, False]
    """
    v = np.asarray(values, dtype=np.float64)
    m = np.asarray(mask, dtype=bool)
    rows = np.flatnonzero(m)
    out = np.zeros(m.shape, dtype=bool)
    if rows.size:
        _, first = np.unique(v[rows].reshape(rows.size, -1), axis=0, return_index=True)
        out[rows[first]] = True
    return out


def pareto_mask(values, directions: Sequence[str], feasible=None) -> np.ndarray:
    """Boolean mask of the non-dominated rows among the feasible rows.

    Definition: a usable row is on the front when no other usable row dominates it.
    Duplicates of a non-dominated point are all kept on the front (moocore
    ``is_nondominated(..., keep_weakly=True)``): two designs with equal objectives are both
    reported. Infeasible and NaN/inf rows are never on the front.

    Args:
        values: ``(n, m)`` objective values.
        directions: ``m`` strings, ``"minimize"`` or ``"maximize"``.
        feasible: optional ``(n,)`` bool; False rows are excluded.

    Returns:
        ``(n,)`` bool array.

    Examples:
        >>> pareto_mask([[1, 3], [2, 2], [3, 3], [2, 2]], ["minimize", "minimize"]).tolist()
        [True, True, False, True]
        >>> pareto_mask([[1, 3], [2, 2]], ["minimize", "maximize"]).tolist()
        [True, False]
    """
    v, flags, ok = _prepare(values, directions, feasible)
    mask = np.zeros(v.shape[0], dtype=bool)
    if ok.any():
        mask[ok] = moocore.is_nondominated(v[ok], maximise=flags, keep_weakly=True)
    return mask


def front_order(values, directions: Sequence[str], feasible=None, order=None, distinct: bool = True) -> np.ndarray:
    """Row positions of the front, best first: the non-dominated usable rows (:func:`pareto_mask`),
    with ``distinct`` only the first of each point in ``order`` (e.g. trial numbers; default row
    order, :func:`first_of_equal`), sorted by the objectives in turn (ascending when minimised,
    descending when maximised; a stable sort, so ties keep ``order``).

    >>> front_order([[3, 1], [1, 3], [2, 2], [1, 3]], ["min", "min"], order=[0, 9, 5, 2]).tolist()
    [3, 2, 0]
    """
    v, flags, ok = _prepare(values, directions, feasible)
    seq = np.arange(v.shape[0]) if order is None else np.argsort(np.asarray(order, dtype=np.float64), kind="stable")
    mask = pareto_mask(v[seq], directions, ok[seq])
    if distinct:
        mask = first_of_equal(v[seq], mask)
    rows = seq[mask]
    keys = [-v[rows, j] if flags[j] else v[rows, j] for j in reversed(range(v.shape[1]))]
    return rows[np.lexsort(keys)] if keys else rows


#: the relative epsilon (per objective) that tables shown to a person use by default: a design within
#: 1% of a row shown in every objective is left out (far below the model's own error)
DISPLAY_EPSILON = 0.01


def epsilon_vector(epsilon, m: int) -> np.ndarray:
    """One relative epsilon per objective from a number (every objective) or ``m`` numbers, each
    in [0, 1); raises ValueError otherwise.

    >>> epsilon_vector(0.01, 2).tolist(), epsilon_vector([0.02, 0], 2).tolist()
    ([0.01, 0.01], [0.02, 0.0])
    """
    eps = np.asarray(epsilon if np.ndim(epsilon) else [epsilon] * m, dtype=np.float64).reshape(-1)
    if eps.shape != (m,) or not (np.isfinite(eps).all() and (eps >= 0).all() and (eps < 1).all()):
        raise ValueError(f"epsilon {epsilon!r}: expected one relative value in [0, 1), or {m} of them "
                         f"(one per objective)")
    return eps


def epsilon_thin(values, directions: Sequence[str], epsilon) -> np.ndarray:
    """Positions of the rows of ``values`` (a front, best first) kept as representatives: a row is
    dropped when an earlier kept row is at most ``epsilon`` (relative, per objective) worse in
    every objective, i.e. for each objective j, worse_j(a, b) <= eps_j * max(|a_j|, |b_j|), where
    worse_j is a_j - b_j when minimised and b_j - a_j when maximised (the multiplicative
    epsilon-dominance of Laumanns et al., Evolutionary Computation 10(3), 2002, made symmetric in
    scale). So every dropped row has a kept representative within epsilon of it in every objective
    (an epsilon-approximate front), and no two kept rows are within epsilon of each other in every
    objective. Greedy in the given order (the representative is the first, e.g. the best by the
    first objective); ``epsilon`` 0 keeps every distinct point.

    >>> epsilon_thin([[1.0, 9.0], [1.005, 8.98], [2.0, 5.0], [2.01, 4.0]], ["min", "min"], 0.01).tolist()
    [0, 2, 3]
    """
    flags = np.asarray(maximise_flags(directions))
    eps = epsilon_vector(epsilon, len(flags))
    v = np.asarray(values, dtype=np.float64).reshape(-1, len(flags))
    kept: list[int] = []
    if not v.shape[0]:
        return np.empty(0, np.int64)
    sign = np.where(flags, -1.0, 1.0)
    for i in range(v.shape[0]):      # sequential by nature; the front's rows, vectorised over those kept
        if kept:
            a = v[kept]
            slack = eps * np.maximum(np.abs(a), np.abs(v[i]))
            if ((sign * (a - v[i]) <= slack).all(axis=1)).any():
                continue
        kept.append(i)
    return np.asarray(kept, dtype=np.int64)


def pareto_ranks(values, directions: Sequence[str], feasible=None) -> np.ndarray:
    """Non-dominated sorting rank per row: 0 = first front, -1 = infeasible or NaN/inf.

    Definition (Deb et al. 2002, NSGA-II): rank 0 is the non-dominated set; rank r is the
    non-dominated set once ranks 0..r-1 are removed. Duplicates share a rank, so
    ``pareto_ranks(...) == 0`` equals :func:`pareto_mask`. Computed by ``moocore.pareto_rank``.

    Examples:
        >>> pareto_ranks([[1, 3], [2, 2], [3, 3], [9, 9]], ["min", "min"],
        ...              feasible=[True, True, True, False]).tolist()
        [0, 0, 1, -1]
    """
    v, flags, ok = _prepare(values, directions, feasible)
    ranks = np.full(v.shape[0], -1, dtype=np.int64)
    if ok.any():
        ranks[ok] = moocore.pareto_rank(v[ok], maximise=flags)
    return ranks


def hypervolume(values, directions: Sequence[str], reference) -> float:
    """Hypervolume dominated by the rows and bounded by ``reference`` (Zitzler & Thiele 1998).

    The Lebesgue measure of the region of objective space that at least one point dominates
    and that dominates the reference point. Points that do not strictly dominate the
    reference in every objective (and NaN/inf rows) add nothing and are dropped first; with no
    such point the result is 0.0. Dominated points need no filtering. Computed by
    ``moocore.hypervolume`` with per-objective ``maximise`` flags.

    Args:
        values: ``(n, m)`` objective values (pass only feasible rows).
        directions: ``m`` strings, ``"minimize"`` or ``"maximize"``.
        reference: ``m`` values, worse than the points in each objective.

    Examples:
        >>> hypervolume([[1, 3], [2, 2], [3, 1]], ["minimize", "minimize"], [4, 4])
        6.0
    """
    v, flags, ok = _prepare(values, directions)
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    if ref.shape != (v.shape[1],) or not np.isfinite(ref).all():
        raise ValueError(f"reference must be {v.shape[1]} finite values, but got {reference!r}")
    fl = np.asarray(flags)
    better = np.where(fl, v > ref, v < ref).all(axis=1)
    pts = v[ok & better]
    if pts.shape[0] == 0:
        return 0.0
    return float(moocore.hypervolume(pts, ref=ref, maximise=flags))


def default_reference(values, directions: Sequence[str]) -> np.ndarray:
    """Default hypervolume reference: the nadir of ``values`` pushed out by 10% of the range.

    Per objective: the worst finite value among the given rows (max when minimising, min
    when maximising), moved further in the worse direction by 10% of that objective's range
    (max - min). A zero range uses 10% of ``|worst|``, or 1.0 when that is 0 as well. Rows with
    a NaN/inf objective are ignored; pass the feasible rows only.

    Examples:
        >>> default_reference([[1, 30], [3, 10]], ["minimize", "maximize"]).tolist()
        [3.2, 8.0]
    """
    v, flags, ok = _prepare(values, directions)
    v = v[ok]
    if v.shape[0] == 0:
        raise ValueError("no finite rows to derive a hypervolume reference from")
    lo, hi = v.min(axis=0), v.max(axis=0)
    fl = np.asarray(flags)
    worst = np.where(fl, lo, hi)
    span = hi - lo
    span = np.where(span > 0, span, np.where(worst != 0, np.abs(worst), 10.0))
    return np.where(fl, worst - 0.1 * span, worst + 0.1 * span)


def front_flags(values, directions, feasible) -> tuple[np.ndarray, np.ndarray]:
    """(is_pareto, pareto_rank) as results store them: the rank of every feasible row (-1 where
    infeasible or NaN), and the front flag on the first row (in row order) of each point of the
    front, so a repeated design or an exact tie is on the front once."""
    return first_of_equal(values, pareto_mask(values, directions, feasible)), pareto_ranks(values, directions, feasible)
