"""Expert load at the busiest expert-parallel rank (MODEL.md section 2, expert parallel).

Under expert parallel the N routed experts of an MoE layer are split over E ranks of n = N/E
experts each, and every rank waits for the others at the combine: a layer takes as long as its
busiest rank. With T tokens each routed to k distinct experts, rank r reads the D_r distinct
experts its tokens hit and multiplies C_r token copies (sum of the per-token counts). The mean
rank reads (N/E)(1 - (1 - k/N)^T) experts and takes T k / E copies, what tensor parallel reads per
chip; the busiest reads more, most of all at small T: Mixtral-8x7B on 8 ranks at T = 1 hits 2
experts on 2 ranks, so the busiest rank reads a whole expert where the mean rank reads a quarter.

``busiest_rank`` gives E[max_r D_r] and E[max_r C_r] under uniform routing (each token's k experts
a uniform k-subset, independent across tokens and layers: real routers are less balanced, so this
is a lower bound on the imbalance). No closed form is known for the expected maximum of these
dependent counts, so it is a cached Monte Carlo table per (N, k, E): seeded samples of up to
``T_TABLE`` tokens, read at every T in ``grid()`` from the same samples (common random numbers),
exact at T = 1 (``one_token``), interpolated linearly in T. Past T_TABLE the excess over the mean scales as the
standard deviation of one rank's load: sqrt(T) for the copies (the central limit of a sum of T
per-token counts) and sqrt(p(1-p)) for the distinct experts, p = 1 - (1-k/N)^T the chance one
expert is hit (a binomial count), never above n. The table is the same on every run (the seed is a
function of N, k and E). tests/model/test_routing.py checks it against exact values (T = 1, 2),
an independent simulation and the large-T limits.
"""

from __future__ import annotations

import functools

import numpy as np

#: Monte Carlo samples for T <= T_SMALL, and for T_SMALL < T <= T_TABLE (each about 131k tokens)
SAMPLES_SMALL, T_SMALL = 4096, 32
SAMPLES, T_TABLE = 512, 256


def grid() -> np.ndarray:
    """Token counts the table is read at: every T to T_SMALL, then about 10% apart to T_TABLE."""
    tail = np.unique(np.round(np.geomspace(T_SMALL, T_TABLE, 22)).astype(np.int64))
    return np.unique(np.concatenate([np.arange(0, T_SMALL + 1), tail]))


def _k_subsets(rng: np.random.Generator, size: int, n_experts: int, k: int) -> np.ndarray:
    """``size`` uniform k-subsets of range(N), as (size, k) int arrays: Floyd's algorithm (Bentley
    and Floyd 1987, "A sample of brilliance", CACM 30(9)): for j = N-k .. N-1 draw t in [0, j];
    take t unless already taken, else j."""
    out = np.empty((size, k), dtype=np.int64)
    for i, j in enumerate(range(n_experts - k, n_experts)):
        t = rng.integers(0, j + 1, size=size)
        taken = (out[:, :i] == t[:, None]).any(axis=1) if i else np.zeros(size, dtype=bool)
        out[:, i] = np.where(taken, j, t)
    return out


def one_token(n_experts: int, k: int, ranks: int) -> float:
    """E[max_r c_r] for one token, exactly: its k experts fall on the E ranks as a multivariate
    hypergeometric draw (k of N, E colours of n = N/E), so P(max <= m) = [y^k] (sum_{j<=m} C(n, j)
    y^j)^E / C(N, k) and E[max] = sum_{m=0}^{k-1} (1 - P(max <= m)). Integer arithmetic."""
    from math import comb
    n = n_experts // ranks
    total, out = comb(n_experts, k), 0.0
    for m in range(k):
        poly = [1] + [0] * k                    # (sum_{j<=m} C(n, j) y^j)^E, truncated at y^k
        base = [comb(n, j) if j <= m else 0 for j in range(k + 1)]
        for _ in range(ranks):
            poly = [sum(poly[i] * base[d - i] for i in range(d + 1)) for d in range(k + 1)]
        out += 1.0 - poly[k] / total
    return out


def _simulate(rng: np.random.Generator, n_experts: int, k: int, ranks: int, points: np.ndarray, samples: int):
    """Mean over ``samples`` of the busiest rank's distinct experts and copies after each T of
    ``points`` (increasing) tokens, the tokens of each sample routed one after another: per token,
    its k experts add k copies to their ranks and one distinct expert each where not hit before."""
    n = n_experts // ranks
    hit = np.zeros((samples, n_experts), dtype=bool)
    d = np.zeros(samples * ranks, dtype=np.int64)
    c = np.zeros(samples * ranks, dtype=np.int64)
    row = np.arange(samples)[:, None]
    slot = row * ranks
    max_d, max_c = np.zeros(points.size), np.zeros(points.size)
    done = 0
    for i, t in enumerate(points):
        for _ in range(int(t) - done):
            picks = _k_subsets(rng, samples, n_experts, k)          # (samples, k), distinct per row
            where = (slot + picks // n).ravel()
            c += np.bincount(where, minlength=c.size)
            d += np.bincount(where, weights=~hit[row, picks].ravel(), minlength=d.size).astype(np.int64)
            hit[row, picks] = True
        done = int(t)
        max_d[i] = d.reshape(samples, ranks).max(axis=1).mean()
        max_c[i] = c.reshape(samples, ranks).max(axis=1).mean()
    return max_d, max_c


@functools.lru_cache(maxsize=64)
def table(n_experts: int, k: int, ranks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T grid, E[max_r D_r], E[max_r C_r]) for N experts, top-k routing, E ranks: simulated
    (SAMPLES_SMALL samples to T_SMALL, SAMPLES beyond), exact at T = 0 and 1 (``one_token``), made
    non-decreasing in T as the expectations are (more tokens never unload a rank)."""
    N, k, E = int(n_experts), int(k), int(ranks)
    rng = np.random.default_rng([N, k, E, 20260101])
    T = grid()
    small = T <= T_SMALL
    d_small, c_small = _simulate(rng, N, k, E, T[small], SAMPLES_SMALL)
    d_big, c_big = _simulate(rng, N, k, E, T[~small], SAMPLES)
    max_d, max_c = np.concatenate([d_small, d_big]), np.concatenate([c_small, c_big])
    max_d[1] = max_c[1] = one_token(N, k, E)     # one token: D = C, exact
    max_d, max_c = np.maximum.accumulate(max_d), np.maximum.accumulate(max_c)
    for a in (T, max_d, max_c):
        a.setflags(write=False)
    return T, max_d, max_c


def mean_rank(n_experts: int, k: int, ranks, tokens) -> tuple[np.ndarray, np.ndarray]:
    """(distinct experts, copies) at the mean rank: (N/E)(1 - (1-k/N)^T) and T k / E."""
    E = np.asarray(ranks, dtype=np.float64)
    T = np.asarray(tokens, dtype=np.float64)
    return n_experts / E * (1.0 - (1.0 - k / n_experts) ** T), T * k / E


def busiest_rank(n_experts: int, k: int, ranks, tokens) -> tuple[np.ndarray, np.ndarray]:
    """(E[max_r D_r], E[max_r C_r]): distinct experts read and token copies multiplied by the busiest
    of E ranks for T tokens (arrays broadcast; one table per distinct E > 1; E = 1 is the whole
    layer on one rank: its mean). See the module docstring."""
    E = np.asarray(ranks, dtype=np.float64)
    T = np.asarray(tokens, dtype=np.float64)
    shape = np.broadcast_shapes(E.shape, T.shape)
    E, T = np.broadcast_to(E, shape), np.broadcast_to(T, shape)
    d, c = (np.array(a, dtype=np.float64) for a in np.broadcast_arrays(*mean_rank(n_experts, k, E, T)))
    for e in np.unique(E[E > 1]):
        rows = E == e
        t = T[rows]
        grid_t, max_d, max_c = table(n_experts, k, int(e))
        t_max = float(grid_t[-1])
        n = n_experts / e
        q = 1.0 - k / n_experts
        mean_d, mean_c = mean_rank(n_experts, k, e, t)
        md_end, mc_end = mean_rank(n_experts, k, e, t_max)
        # past the table: the excess over the mean scales with one rank's standard deviation
        p, p_end = 1.0 - q ** t, 1.0 - q ** t_max
        sd_ratio = np.sqrt(np.where(p_end * (1.0 - p_end) > 0, p * (1.0 - p) / max(p_end * (1.0 - p_end), 1e-300),
                                    0.0))
        far_d = mean_d + np.minimum((max_d[-1] - md_end) * sd_ratio, n - mean_d)
        far_c = mean_c + (max_c[-1] - mc_end) * np.sqrt(t / t_max)
        near = t <= t_max
        d[rows] = np.where(near, np.interp(t, grid_t, max_d), far_d)
        c[rows] = np.where(near, np.interp(t, grid_t, max_c), far_c)
    return d, c
