"""A front cut to a given number of rows that keeps its spread and its hypervolume, in any
number of objectives (issue 20, item 2).

:func:`thin` removes, a few at a time, the rows that add least hypervolume (reference: the
nadir pushed out by 10% of each objective's range, :func:`dse.results.pareto.default_reference`), as
SMS-EMOA does (Beume, Naujoks and Emmerich 2007). How a row's contribution is computed depends on
the number of objectives m:

- m <= 3: exactly, ``moocore.hv_contributions`` (O(n log n) sweeps: milliseconds at 2,000 rows);
- m >= 4: exact contributions cost n + 1 hypervolumes (1.5 s at 1,000 rows in 4-D, 16 s at 256
  in 6-D), so the front is first cut to ``box_cap`` rows by epsilon boxes (:func:`box_thin`), and
  the contributions are estimated from K directions w on the unit sphere (Deng and Zhang 2019,
  "Approximating hypervolume and hypervolume contributions using polar coordinates", IEEE TEVC
  23(5)): HV(A) = c_m mean_w max_{a in A} s(w, a)^m with s(w, a) = min_j (r_j - a_j) / w_j, so a
  row's contribution is the sum, over the directions where it is the best, of s1^m - s2^m (the
  best and second best). Removing a row only changes the directions it led or seconded.

Rows marked ``fixed`` are never removed (dse.search.breeder keeps the study's trials and picks among new
designs). numpy and moocore only; deterministic (the directions come from a fixed seed).
"""

from __future__ import annotations

from collections.abc import Sequence

import moocore
import numpy as np

from ..results.pareto import maximise_flags

#: objectives up to which contributions are exact (moocore); above, directions (Deng and Zhang 2019)
EXACT_MAX_OBJECTIVES = 3
#: rows kept by the epsilon-box cut before the estimated contributions (4+ objectives)
BOX_CAP = 1024
#: directions per row for the estimate (at least MIN_DIRECTIONS, at most MAX_DIRECTIONS)
DIRECTIONS_PER_ROW, MIN_DIRECTIONS, MAX_DIRECTIONS = 16, 4096, 32768


def normalise(values, directions: Sequence[str]) -> np.ndarray:
    """Objectives as minimised coordinates in [0, 1]: 0 at the best value of each column, 1 at
    the worst (a constant column is 0). The reference of :func:`thin` is then 1.1 everywhere."""
    v = np.asarray(values, dtype=np.float64)
    flags = np.asarray(maximise_flags(directions))
    z = np.where(flags, -v, v)
    lo, hi = z.min(axis=0), z.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (z - lo) / span


def thin(values, keep: int, directions: Sequence[str], fixed=None, box_cap: int = BOX_CAP,
         extremes: bool = False) -> np.ndarray:
    """Sorted indices of the ``keep`` rows of a front (mutually non-dominated, finite) that are
    left after removing the least hypervolume contributors a few at a time (an eighth of the
    excess per step while far from ``keep``; ties: the first row goes). Rows where ``fixed`` is
    True always stay (so more than ``keep`` rows may stay when more are fixed); with ``extremes``
    the best row of each objective is fixed too (:func:`extreme_rows`: an extreme's own
    contribution is a thin slab, but it holds the front's end, which moving costs a whole face).

    >>> thin([[1, 4], [2, 3], [3, 2], [4, 1]], 2, ["min", "min"]).tolist()
    [1, 2]
    >>> thin([[1, 4], [2, 3], [3, 2], [4, 1]], 3, ["min", "min"], extremes=True).tolist()
    [0, 2, 3]
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.shape[0]
    fixed = np.zeros(n, dtype=bool) if fixed is None else np.asarray(fixed, dtype=bool)
    if extremes and n:
        fixed = fixed.copy()
        fixed[extreme_rows(v, directions)] = True
    if n <= keep or fixed.all():
        return np.arange(n)
    m = v.shape[1]
    if m <= EXACT_MAX_OBJECTIVES:
        return _thin_exact(v, keep, directions, fixed)
    z = normalise(v, directions)
    idx = np.arange(n)
    if n > max(box_cap, keep):
        idx = box_thin(z, max(box_cap, keep), fixed)
    if idx.size <= keep:
        return idx
    return idx[_thin_directions(z[idx], keep, fixed[idx])]


def extreme_rows(values, directions: Sequence[str], k: int = 1) -> np.ndarray:
    """Indices of the k best rows of each objective (k x m, objective by objective, best first;
    a row may repeat). k = 1: the front's ends."""
    z = normalise(values, directions)
    k = min(k, z.shape[0])
    return np.concatenate([np.argsort(z[:, j], kind="stable")[:k] for j in range(z.shape[1])])


def _thin_exact(v: np.ndarray, keep: int, directions, fixed: np.ndarray) -> np.ndarray:
    """Exact contributions (moocore), reference 1.1 x the range beyond the nadir. A fixed row that a
    free row dominates is left out of the contributions (moocore's default; counting it is 100
    times slower in 3-D), so such a free row's worth is overstated: it improves on a trial."""
    flags = maximise_flags(directions)
    lo, hi = v.min(axis=0), v.max(axis=0)
    span = np.where(hi > lo, hi - lo, np.abs(hi) + 1.0)
    ref = np.where(flags, lo - 0.1 * span, hi + 0.1 * span)
    idx = np.arange(v.shape[0])
    free = int((~fixed).sum())
    target = max(keep - int(fixed.sum()), 0)           # free rows to keep
    while free > target:
        contrib = moocore.hv_contributions(v[idx], ref=ref, maximise=flags)
        contrib[fixed[idx]] = np.inf
        drop = max(1, (free - target) // 8)       # several at a time while far from the target
        idx = np.delete(idx, np.argsort(contrib, kind="stable")[:drop])
        free -= drop
    return idx


def box_thin(z: np.ndarray, cap: int, fixed=None) -> np.ndarray:
    """Sorted indices of at most ``cap`` rows of normalised minimised objectives ``z``
    (:func:`normalise`): one row per occupied epsilon box (the grid of the epsilon-Pareto
    archives of Laumanns, Thiele, Deb and Zitzler 2002, Evolutionary Computation 10(3)), a fixed
    row if the box holds one, else the row nearest the box's lower corner; plus the best row of
    every objective and every fixed row (which may exceed ``cap``). The box side eps is found by
    a secant search on log(count) against log(eps), bracketed, until 90-100% of ``cap`` rows are
    left (else the largest count at most ``cap`` that was found)."""
    n, m = z.shape
    fixed = np.zeros(n, dtype=bool) if fixed is None else np.asarray(fixed, dtype=bool)
    must = fixed.copy()
    must[np.argmin(z, axis=0)] = True
    if n <= cap:
        return np.arange(n)

    def boxes(eps: float) -> np.ndarray:
        b = np.floor(z / eps).astype(np.int64)
        corner = z - b * eps
        order = np.lexsort((np.einsum("ij,ij->i", corner, corner), ~fixed, *b.T[::-1]))
        sb = b[order]
        first = np.ones(n, dtype=bool)
        first[1:] = np.any(sb[1:] != sb[:-1], axis=1)
        return np.union1d(order[first], np.flatnonzero(must))

    lo, hi = 0.0, 2.0                              # counts: above cap at lo, at most cap at hi
    best = boxes(hi)
    if best.size > cap:
        return best
    goal = np.log(0.95 * cap)
    eps = float(cap) ** (-1.0 / max(m - 1, 1))     # an (m-1)-dimensional front: count ~ eps^-(m-1)
    seen: list[tuple[float, float]] = []
    for _ in range(30):
        eps = max(eps, 1e-12)                      # rows that tie everywhere: no box count reaches cap
        got = boxes(eps)
        if got.size <= cap:
            hi, best = eps, got
            if got.size >= 0.9 * cap:
                break
        else:
            lo = eps
        seen.append((np.log(eps), np.log(max(got.size, 1))))
        if len(seen) >= 2 and seen[-1][1] != seen[-2][1]:
            (x0, y0), (x1, y1) = seen[-2], seen[-1]
            nxt = x1 + (goal - y1) * (x1 - x0) / (y1 - y0)
        else:
            nxt = np.log(eps) + (seen[-1][1] - goal) / max(m - 1, 1)
        inside = np.isfinite(nxt) and (lo == 0 or nxt > np.log(lo)) and nxt < np.log(hi)
        eps = float(np.exp(nxt)) if inside else (float(np.sqrt(lo * hi)) if lo > 0 else hi / 2)
    return best


def _directions(k: int, m: int) -> np.ndarray:
    """k directions uniform on the positive part of the unit sphere in m dimensions, from a fixed
    seed (|N(0, I)| normalised)."""
    w = np.abs(np.random.default_rng(20_190_520).standard_normal((k, m)))
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def _top2(d: np.ndarray, w: np.ndarray, rows: np.ndarray, m: int, chunk: int = 1 << 21
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per direction: the rows (of ``rows``) with the largest and second largest s^m, and those
    values; s(w, a) = min_j d_aj / w_j with d = reference - a (Deng and Zhang 2019)."""
    k = w.shape[0]
    i1, i2 = np.full(k, -1, dtype=np.int64), np.full(k, -1, dtype=np.int64)
    g1, g2 = np.zeros(k), np.zeros(k)
    if rows.size == 0:
        return i1, g1, i2, g2
    inv = (1.0 / w).astype(np.float32)            # single precision: half the memory traffic
    dr = d[rows].astype(np.float32)
    step = max(1, chunk // rows.size)
    for a in range(0, k, step):
        b = min(k, a + step)
        s = np.multiply.outer(inv[a:b, 0], dr[:, 0])                  # (directions, rows)
        for j in range(1, m):
            np.minimum(s, np.multiply.outer(inv[a:b, j], dr[:, j]), out=s)
        at = np.arange(b - a)
        best = np.argmax(s, axis=1)
        i1[a:b], g1[a:b] = rows[best], s[at, best].astype(np.float64) ** m
        if rows.size > 1:
            s[at, best] = -1.0
            second = np.argmax(s, axis=1)
            i2[a:b], g2[a:b] = rows[second], s[at, second].astype(np.float64) ** m
    return i1, g1, i2, g2


def contributions_estimate(z: np.ndarray, k: int | None = None) -> np.ndarray:
    """Estimated hypervolume contribution of each row of normalised minimised objectives ``z``
    against the reference 1.1 (Deng and Zhang 2019, as in :func:`thin`), in units of the
    normalised box: c_m / K x sum of s1^m - s2^m over the directions a row leads, with c_m =
    pi^(m/2) / (2^m Gamma(m/2 + 1)), the volume of the unit ball's positive orthant."""
    from math import gamma, pi
    n, m = z.shape
    k = k or int(np.clip(DIRECTIONS_PER_ROW * n, MIN_DIRECTIONS, MAX_DIRECTIONS))
    w = _directions(k, m)
    i1, g1, _, g2 = _top2(1.1 - z, w, np.arange(n), m)
    c = pi ** (m / 2) / (2 ** m * gamma(m / 2 + 1))
    return c / k * np.bincount(i1, weights=g1 - g2, minlength=n)


def _thin_directions(z: np.ndarray, keep: int, fixed: np.ndarray) -> np.ndarray:
    """Greedy removal by estimated contributions (see :func:`contributions_estimate`), updating
    only the directions whose best or second best row left."""
    n, m = z.shape
    k = int(np.clip(DIRECTIONS_PER_ROW * n, MIN_DIRECTIONS, MAX_DIRECTIONS))
    w = _directions(k, m)
    d = 1.1 - z
    alive = np.ones(n, dtype=bool)
    i1, g1, i2, g2 = _top2(d, w, np.arange(n), m)
    free = int((~fixed).sum())
    target = max(keep - int(fixed.sum()), 0)
    while free > target:
        contrib = np.bincount(i1, weights=g1 - g2, minlength=n)
        contrib[~alive | fixed] = np.inf
        drop = max(1, (free - target) // 8)
        gone = np.argsort(contrib, kind="stable")[:drop]
        alive[gone] = False
        free -= drop
        hit = np.flatnonzero(~alive[i1] | ((i2 >= 0) & ~alive[np.maximum(i2, 0)]))
        if hit.size:
            a1, b1, a2, b2 = _top2(d, w[hit], np.flatnonzero(alive), m)
            i1[hit], g1[hit], i2[hit], g2[hit] = a1, b1, a2, b2
    return np.flatnonzero(alive)


def pick(values, k: int, directions: Sequence[str], fixed) -> np.ndarray:
    """Sorted indices of at most ``k`` rows not ``fixed`` that add most hypervolume to the fixed
    rows (a study's trials) and to each other. Up to 3 objectives: :func:`thin` with the fixed
    rows held. Above: greedy addition, the largest gain first (hypervolume is submodular, so the
    greedy set has at least 1 - 1/e of the best one's gain: Nemhauser, Wolsey and Fisher 1978),
    each gain estimated from directions as in :func:`contributions_estimate`: the sum over
    directions of max(0, s^m - the best s^m so far); rows that add nothing are not picked."""
    v = np.asarray(values, dtype=np.float64)
    fixed = np.asarray(fixed, dtype=bool)
    free = np.flatnonzero(~fixed)
    if free.size <= k:
        return free
    if v.shape[1] <= EXACT_MAX_OBJECTIVES:
        kept = thin(v, int(fixed.sum()) + k, directions, fixed=fixed)
        return kept[~fixed[kept]]
    z = normalise(v, directions)
    m = z.shape[1]
    w = _directions(int(np.clip(DIRECTIONS_PER_ROW * free.size, MIN_DIRECTIONS, MAX_DIRECTIONS)), m)
    d = 1.1 - z
    _, cur, _, _ = _top2(d, w, np.flatnonzero(fixed), m)          # best s^m of the fixed rows
    inv, df = (1.0 / w).astype(np.float32), d[free].astype(np.float32)
    g = np.multiply.outer(df[:, 0], inv[:, 0])                     # (free rows, directions): s
    for j in range(1, m):
        np.minimum(g, np.multiply.outer(df[:, j], inv[:, j]), out=g)
    g = g.astype(np.float64) ** m
    gains = np.maximum(g - cur, 0.0).sum(axis=1)
    chosen: list[int] = []
    for _ in range(k):
        j = int(np.argmax(gains))
        if gains[j] <= 0:
            break
        chosen.append(j)
        lead = np.flatnonzero(g[j] > cur)              # only these directions change: update their share
        old, new = cur[lead], g[j, lead]
        gc = g[:, lead]
        gains -= np.maximum(gc - old, 0.0).sum(axis=1) - np.maximum(gc - new, 0.0).sum(axis=1)
        cur[lead] = new
        gains[chosen] = -1.0
    return np.sort(free[chosen])
