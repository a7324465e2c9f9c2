"""dse.results.pareto against brute force and hand-computed hypervolumes."""

import numpy as np
import pytest

from dse.results import pareto


def brute_mask(values, directions, feasible=None):
    """O(n^2) reference: row i is on the front unless some usable row dominates it."""
    v = np.asarray(values, dtype=float)
    sign = np.array([1.0 if d.startswith("min") else -1.0 for d in directions])
    w = v * sign  # minimise everything
    ok = np.isfinite(w).all(axis=1)
    if feasible is not None:
        ok &= np.asarray(feasible, dtype=bool)
    u = w[ok]
    le = (u[:, None, :] <= u[None, :, :]).all(axis=2)   # le[j, i]: u_j <= u_i everywhere
    lt = (u[:, None, :] < u[None, :, :]).any(axis=2)
    dominated = (le & lt).any(axis=0)
    mask = np.zeros(len(v), dtype=bool)
    mask[np.flatnonzero(ok)[~dominated]] = True
    return mask


DIRS = {2: ["minimize", "maximize"], 3: ["maximize", "minimize", "minimize"],
        4: ["minimize", "maximize", "minimize", "maximize"]}


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mask_equals_brute_force_with_ties_and_duplicates(m, seed):
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 6, size=(300, m)).astype(float)   # coarse grid: many ties
    v = np.concatenate([v, v[:40]])                       # exact duplicates
    feasible = rng.random(len(v)) > 0.2
    v[rng.random(len(v)) < 0.05, rng.integers(0, m)] = np.nan
    got = pareto.pareto_mask(v, DIRS[m], feasible)
    np.testing.assert_array_equal(got, brute_mask(v, DIRS[m], feasible))
    assert not got[~feasible].any()
    assert not got[np.isnan(v).any(axis=1)].any()


@pytest.mark.parametrize("m", [2, 3, 4])
def test_mask_continuous_random(m):
    v = np.random.default_rng(7).normal(size=(500, m))
    np.testing.assert_array_equal(pareto.pareto_mask(v, DIRS[m]), brute_mask(v, DIRS[m]))


def brute_order(values, directions, feasible, order, distinct):
    """Reference for front_order in plain Python: the front's rows, with distinct the lowest
    ``order`` of each point, sorted by the objectives in turn (better first), ties by ``order``."""
    mask = brute_mask(values, directions, feasible)
    rows = sorted(np.flatnonzero(mask), key=lambda i: order[i])
    if distinct:
        seen, kept = set(), []
        for i in rows:
            if tuple(values[i]) not in seen:
                seen.add(tuple(values[i]))
                kept.append(i)
        rows = kept
    sign = [1.0 if d.startswith("min") else -1.0 for d in directions]
    return sorted(rows, key=lambda i: (tuple(s * x for s, x in zip(sign, values[i])), order[i]))


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("distinct", [True, False])
def test_front_order_equals_brute_force(m, distinct):
    """Rows of the front best first; a repeated point is kept once, at its lowest trial."""
    rng = np.random.default_rng(m)
    base = rng.integers(0, 8, size=(250, 1))
    flip = np.array([d == DIRS[m][0] for d in DIRS[m]]) & (np.arange(m) > 0)
    v = (np.where(flip, 7 - base, base) + rng.integers(0, 2, size=(250, m))).astype(float)   # a trade-off, with ties
    v = np.concatenate([v, v[:60]])                       # repeats, found later or earlier
    feasible = rng.random(len(v)) > 0.2
    trial = rng.permutation(len(v)).astype(float)         # trials not in row order
    got = pareto.front_order(v, DIRS[m], feasible, order=trial if distinct else None, distinct=distinct)
    want = brute_order(v, DIRS[m], feasible, trial if distinct else np.arange(len(v)), distinct)
    assert got.tolist() == want and len(want) >= 3
    if not distinct:
        assert len(got) == brute_mask(v, DIRS[m], feasible).sum()


def test_duplicates_all_kept():
    v = [[1, 1], [1, 1], [2, 2]]
    assert pareto.pareto_mask(v, ["min", "min"]).tolist() == [True, True, False]


def test_all_infeasible_and_empty():
    v = np.array([[1.0, 2.0], [2.0, 1.0]])
    assert not pareto.pareto_mask(v, ["min", "min"], [False, False]).any()
    assert pareto.pareto_mask(np.empty((0, 2)), ["min", "min"]).shape == (0,)
    assert pareto.pareto_ranks(v, ["min", "min"], [False, False]).tolist() == [-1, -1]


def test_bad_direction_and_shape():
    with pytest.raises(ValueError, match="direction"):
        pareto.pareto_mask([[1, 2]], ["min", "up"])
    with pytest.raises(ValueError, match="2 objective columns"):
        pareto.pareto_mask([[1, 2]], ["min"])


@pytest.mark.parametrize("m", [2, 3, 4])
def test_rank_zero_equals_mask(m):
    rng = np.random.default_rng(m)
    v = rng.integers(0, 5, size=(400, m)).astype(float)
    feasible = rng.random(len(v)) > 0.3
    r = pareto.pareto_ranks(v, DIRS[m], feasible)
    np.testing.assert_array_equal(r == 0, pareto.pareto_mask(v, DIRS[m], feasible))
    assert (r[~feasible] == -1).all() and (r[feasible] >= 0).all()
    # rank 1 = the front once rank 0 is removed
    np.testing.assert_array_equal(r == 1, brute_mask(v, DIRS[m], feasible & (r != 0)))


def test_hypervolume_2d_hand():
    # staircase under (1,3), (2,2), (3,1) up to (4,4): columns of width 1 and heights 1, 2, 3
    assert pareto.hypervolume([[1, 3], [2, 2], [3, 1]], ["min", "min"], [4, 4]) == 6.0
    # a dominated point and one beyond the reference change nothing
    pts = [[1, 3], [2, 2], [3, 1], [3, 3], [5, 0]]
    assert pareto.hypervolume(pts, ["min", "min"], [4, 4]) == 6.0
    # maximise the second objective: y -> -y mirrors the same picture
    assert pareto.hypervolume([[1, -3], [2, -2], [3, -1]], ["min", "max"], [4, -4]) == 6.0
    assert pareto.hypervolume([[5, 5]], ["min", "min"], [4, 4]) == 0.0
    assert pareto.hypervolume(np.empty((0, 2)), ["min", "min"], [4, 4]) == 0.0


def test_hypervolume_3d_hand():
    # Reference (3,3,3). Points a=(1,1,2), b=(2,2,1), c=(1,2,1).
    # Boxes [p, ref]: a: 2*2*1 = 4; b: 1*1*2 = 2; c: 2*1*2 = 4.
    # Pairwise intersections take the componentwise max of the points:
    #   a^b = (2,2,2): 1*1*1 = 1; a^c = (1,2,2): 2*1*1 = 2; b^c = (2,2,1): 1*1*2 = 2.
    # a^b^c = (2,2,2): 1.  Inclusion-exclusion: 4+2+4 - (1+2+2) + 1 = 6.
    pts = [[1, 1, 2], [2, 2, 1], [1, 2, 1]]
    assert pareto.hypervolume(pts, ["min"] * 3, [3, 3, 3]) == pytest.approx(6.0)
    # same set with the third objective maximised (z -> 4 - z, reference z = 1)
    mirrored = [[1, 1, 2], [2, 2, 3], [1, 2, 3]]
    assert pareto.hypervolume(mirrored, ["min", "min", "max"], [3, 3, 1]) == pytest.approx(6.0)


def test_hypervolume_ignores_nan_rows_and_checks_reference():
    assert pareto.hypervolume([[1, 3], [np.nan, 0]], ["min", "min"], [4, 4]) == 3.0
    with pytest.raises(ValueError, match="reference"):
        pareto.hypervolume([[1, 3]], ["min", "min"], [4])


def test_default_reference():
    ref = pareto.default_reference([[1, 30], [3, 10], [2, np.nan]], ["minimize", "maximize"])
    np.testing.assert_allclose(ref, [3.2, 8.0])
    # zero range: 10% of |worst|, or 1.0 at zero
    np.testing.assert_allclose(pareto.default_reference([[5, 0], [5, 0]], ["min", "max"]),
                               [5.5, -1.0])
    with pytest.raises(ValueError):
        pareto.default_reference(np.full((2, 2), np.nan), ["min", "min"])
