"""The busiest expert-parallel rank (issue 17 item 5): dse.model.routing against exact values worked
by hand, an independent seeded simulation written here, and the large-T limits.

Routing is uniform: each token picks k distinct experts of N, independently; the N experts sit on E
ranks of n = N/E. D_r = distinct experts rank r's tokens hit (the weights it reads), C_r = token
copies it takes (the FLOPs and the all-to-all bytes). A layer waits for the busiest rank.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse.model import routing


def test_one_token_by_hand():
    # Mixtral (N 8, top-2). 8 ranks of 1 expert: the 2 experts always land on 2 ranks, max = 1.
    assert routing.one_token(8, 2, 8) == 1.0
    # 4 ranks of 2: both on one rank with probability 4 x C(2,2)/C(8,2) = 4/28, so E[max] = 1 + 1/7
    assert routing.one_token(8, 2, 4) == pytest.approx(8 / 7, rel=1e-15)
    # 2 ranks of 4: 2 x C(4,2)/C(8,2) = 12/28 -> 1 + 3/7
    assert routing.one_token(8, 2, 2) == pytest.approx(10 / 7, rel=1e-15)
    # DeepSeek-V3 (N 256, top-8) on 8 ranks of 32: P(max <= m) = [y^8] (sum_{j<=m} C(32,j) y^j)^8 / C(256,8),
    # here with numpy's polynomial product in floats (the code uses integer loops)
    total = math.comb(256, 8)
    expect = 0.0
    for m in range(8):
        base = np.array([math.comb(32, j) if j <= m else 0 for j in range(9)], dtype=float)
        poly = np.array([1.0])
        for _ in range(8):
            poly = np.convolve(poly, base)[:9]
        expect += 1.0 - poly[8] / total
    assert routing.one_token(256, 8, 8) == pytest.approx(expect, rel=1e-12)
    assert routing.one_token(256, 8, 8) == pytest.approx(2.56375, abs=1e-5)
    # one token: distinct experts = copies, and the table uses the exact value
    T, d, c = routing.table(256, 8, 8)
    assert T[1] == 1 and d[1] == c[1] == routing.one_token(256, 8, 8)


def test_two_tokens_by_hand():
    # Mixtral EP 8: rank r holds expert r. Two tokens: a rank takes 2 copies iff the two pairs share an
    # expert: 1 - C(6,2)/C(8,2) = 13/28. D_r <= 1 always (one expert per rank).
    d, c = routing.busiest_rank(8, 2, 8, 2.0)
    assert float(d) == 1.0
    assert float(c) == pytest.approx(1 + 13 / 28, abs=0.01)        # simulated: 4,096 samples, sd 0.5/64
    # and a rank that is hit always reads its one expert: D = 1 at every T >= 1, 0 at T = 0
    assert np.all(routing.busiest_rank(8, 2, 8, np.array([1.0, 3.0, 17.0, 300.0, 1e5]))[0] == 1.0)
    assert float(routing.busiest_rank(8, 2, 8, 0.0)[0]) == 0.0


def _simulate(n_experts: int, k: int, ranks: int, tokens: int, samples: int, seed: int):
    """An independent simulation: every token's experts are the k smallest of N uniform keys (a
    uniform k-subset), counted per expert; returns per sample (max D, max C)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((samples, n_experts))
    for _ in range(tokens):
        chosen = np.argpartition(rng.random((samples, n_experts)), k - 1, axis=1)[:, :k]
        np.put_along_axis(counts, chosen, np.take_along_axis(counts, chosen, axis=1) + 1, axis=1)
    per_rank = counts.reshape(samples, ranks, n_experts // ranks)
    return (per_rank > 0).sum(axis=2).max(axis=1), per_rank.sum(axis=2).max(axis=1)


@pytest.mark.parametrize("n_experts, k, ranks, tokens", [
    (256, 8, 8, 2), (256, 8, 8, 5), (256, 8, 8, 40), (256, 8, 8, 100),    # DeepSeek-V3, EP 8
    (8, 2, 4, 3), (8, 2, 4, 9),                                           # Mixtral, EP 4
    (128, 8, 4, 12), (128, 8, 4, 70),                                    # Qwen3-235B-A22B, EP 4
    (160, 6, 8, 7),                                                       # DeepSeek-V2, EP 8
])
def test_table_agrees_with_an_independent_simulation(n_experts, k, ranks, tokens):
    sims = 3000 if tokens <= 32 else 1000
    d_sim, c_sim = _simulate(n_experts, k, ranks, tokens, sims, seed=tokens * 1000 + n_experts)
    d, c = (float(x) for x in routing.busiest_rank(n_experts, k, ranks, float(tokens)))
    # within 4 standard errors of the two estimates together (table: 4,096 samples to T = 32, 512 beyond;
    # between its grid points it interpolates, which adds under 0.3% here) plus 0.3%
    for got, sim, table_n in ((d, d_sim, 4096 if tokens <= 32 else 512), (c, c_sim, 4096 if tokens <= 32 else 512)):
        se = sim.std() * math.sqrt(1 / sims + 1 / table_n)
        assert abs(got - sim.mean()) <= 4 * se + 0.003 * sim.mean(), (got, sim.mean(), se)
    # the busiest rank is above the mean rank wherever a rank can be idle or uneven
    d_mean, c_mean = routing.mean_rank(n_experts, k, ranks, float(tokens))
    assert c > c_mean and d >= d_mean


def test_large_t_limits():
    # copies: a rank's count is a sum of T per-token hypergeometric counts (N, n, k), variance
    # v = k (n/N)(1 - n/N)(N-k)/(N-1) each; the E counts sum to T k, so (CLT) C_r - T k/E are E
    # exchangeable normals with that fixed sum: E[max] = T k/E + sqrt(T v) e_E / sqrt(1 - 1/E),
    # e_E = E[max of E standard normals] (= 1.42360 for E = 8, by the integral below)
    from math import erf, pi, sqrt
    N, k, E = 256, 8, 8
    n = N // E
    v = k * (n / N) * (1 - n / N) * (N - k) / (N - 1)
    x = np.linspace(-8, 8, 20001)
    pdf = np.exp(-x * x / 2) / sqrt(2 * pi)
    cdf = 0.5 * (1 + np.vectorize(erf)(x / sqrt(2)))
    e8 = float(np.trapezoid(x * E * cdf ** (E - 1) * pdf, x))
    assert e8 == pytest.approx(1.42360, abs=1e-4)
    for T in (2_000.0, 100_000.0):
        d, c = routing.busiest_rank(N, k, E, T)
        limit = T * k / E + sqrt(T * v) * e8 / sqrt(1 - 1 / E)
        assert float(c) == pytest.approx(limit, rel=0.01)
        assert float(d) == n                 # every expert of every rank is hit: q^T = (31/32)^2000 ~ 0
    # distinct experts with top-1 of many experts, far from saturation past the table: N 512, k 1,
    # E 4, T 1,000: p = 1 - (511/512)^1000 = 0.858; the busiest rank's D stays within its 128 experts
    d, _ = routing.busiest_rank(512, 1, 4, 1000.0)
    mean = 128 * (1 - (511 / 512) ** 1000)
    assert mean < float(d) <= 128


def test_table_is_continuous_monotone_and_deterministic():
    T = np.arange(1, 600, dtype=float)
    d, c = routing.busiest_rank(256, 8, 8, T)
    assert np.all(np.diff(d) >= 0) and np.all(np.diff(c) >= 0)
    end = float(routing.T_TABLE)
    lo, hi = (routing.busiest_rank(256, 8, 8, x)[1] for x in (end, end + 1.0))
    assert float(hi - lo) == pytest.approx(1.0, abs=0.2)      # one more token adds about k/E = 1 copy
    first = routing.table(160, 6, 4)
    routing.table.cache_clear()
    again = routing.table(160, 6, 4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


def test_one_rank_and_dense_are_the_mean():
    d, c = routing.busiest_rank(256, 8, 1, np.array([1.0, 64.0]))
    assert np.allclose(d, 256 * (1 - (248 / 256) ** np.array([1.0, 64.0]))) and np.allclose(c, [8.0, 512.0])
