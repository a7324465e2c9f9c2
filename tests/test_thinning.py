"""A front cut to a number of rows in any number of objectives (dse.search.thinning, issue 20 item 2):
exact hypervolume contributions up to 3 objectives, epsilon boxes and contributions estimated
from directions (Deng and Zhang 2019) above, rows held fixed (a study's trials) never removed."""

import math

import moocore
import numpy as np
import pytest

from dse.search.thinning import box_thin, contributions_estimate, normalise, thin

MIN2 = ["minimize", "minimize"]


def sphere_front(n: int, m: int, seed: int = 0) -> np.ndarray:
    """n mutually non-dominated points on the unit sphere's positive orthant (a concave front)."""
    rng = np.random.default_rng(seed)
    x = np.abs(rng.standard_normal((3 * n, m)))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x[moocore.is_nondominated(x)][:n]


def test_two_objectives_by_hand():
    """Front (1,4) (2,3) (3,2) (4,1), reference (4.3, 4.3): contributions 0.3, 1, 1, 0.3; the
    first of the two smallest goes, then (4,1) (0.3 against 1.3 and 1)."""
    v = np.array([[1, 4], [2, 3], [3, 2], [4, 1]], dtype=float)
    assert thin(v, 3, MIN2).tolist() == [1, 2, 3]
    assert thin(v, 2, MIN2).tolist() == [1, 2]
    assert thin(v, 9, MIN2).tolist() == [0, 1, 2, 3]


def test_fixed_rows_stay_and_count():
    """Trials (1,4) and (4,1) are fixed; of the new designs (2,3) and (2.5,2.5) one is kept.
    Reference (4.3, 4.3); between the trials, (2,3) adds (2.5 - 2) x (4 - 3) = 0.5 next to
    (2.5,2.5), which adds (4 - 2.5) x (3 - 2.5) = 0.75: (2,3) goes. Alone each would add
    (4 - 2) x (4 - 3) = 2 and (4 - 2.5)^2 = 2.25: the same choice."""
    v = np.array([[1, 4], [4, 1], [2, 3], [2.5, 2.5]])
    fixed = np.array([True, True, False, False])
    assert thin(v, 3, MIN2, fixed=fixed).tolist() == [0, 1, 3]
    assert thin(v, 1, MIN2, fixed=fixed).tolist() == [0, 1]          # fixed rows are never removed


def test_maximised_objectives_mirror_minimised_ones():
    v = np.array([[1, 4], [2, 3], [3, 2], [4, 1]], dtype=float)
    assert thin(-v, 2, ["maximize", "maximize"]).tolist() == thin(v, 2, MIN2).tolist()


def test_estimated_contributions_match_exact_ones_in_four_objectives():
    """60 points of a 4-D front: the direction estimate of each contribution against moocore's
    exact value, reference 1.1 in normalised coordinates."""
    z = normalise(sphere_front(60, 4), ["min"] * 4)
    exact = moocore.hv_contributions(z, ref=np.full(4, 1.1))
    est = contributions_estimate(z, k=200_000)
    assert np.corrcoef(est, exact)[0, 1] > 0.98
    assert est.sum() == pytest.approx(exact.sum(), rel=0.05)


def test_estimate_of_one_point_is_its_box():
    """One point: its contribution is its whole dominated box, (1.1 - 0.5)^4 = 0.1296 (the
    constant c_4 = pi^2 / 32 times the mean of s^4 over directions)."""
    est = contributions_estimate(np.full((1, 4), 0.5), k=400_000)
    assert est[0] == pytest.approx(0.6 ** 4, rel=0.02)
    assert math.pi ** 2 / 32 == pytest.approx(math.pi ** 2 / (2 ** 4 * math.gamma(3)))


def test_four_objectives_drop_the_least_of_two_twins():
    """Five spread points and (0.01, 0.99, 1, 1) next to (0, 1, 1, 1); reference 1.1 (the range
    is 0..1). (0, 1, 1, 1) alone holds x < 0.01: 0.01 x 0.1^3 = 1e-5; its twin alone holds
    0.99 <= y < 1 for 0.01 <= x < 0.5 (beyond, (0.5, 0.5, 0.5, 0.5) holds it): 0.49 x 0.01 x
    0.1^2 = 4.9e-5. So (0, 1, 1, 1) goes, though it looks like the original."""
    v = np.array([[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0], [0.5, 0.5, 0.5, 0.5],
                  [0.01, 0.99, 1, 1]], dtype=float)
    exact = moocore.hv_contributions(v, ref=np.full(4, 1.1))
    assert exact[0] == pytest.approx(1e-5) and exact[5] == pytest.approx(4.9e-5)
    assert thin(v, 5, ["min"] * 4).tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("m", [4, 6])
def test_many_objectives_keep_most_of_the_hypervolume(m):
    """300 points cut to 60: the estimate-driven cut keeps more hypervolume than every one of 20
    random subsets of 60, and its kept rows are distinct."""
    v = sphere_front(300, m, seed=m)
    ref = np.full(m, 1.1)
    kept = thin(v, 60, ["min"] * m)
    assert kept.size == 60 and np.unique(kept).size == 60
    hv = moocore.hypervolume(v[kept], ref=ref)
    rng = np.random.default_rng(1)
    best_random = max(moocore.hypervolume(v[rng.choice(300, 60, replace=False)], ref=ref) for _ in range(20))
    assert hv > best_random


def test_box_thin_spreads_and_keeps_the_ends():
    """1,000 points on the line x + y = 1 cut to at most 10: both ends stay and no gap along x
    is wider than 0.25 (ten boxes along a line of length 1 leave gaps of about 0.1-0.2)."""
    x = np.linspace(0, 1, 1000)
    z = np.stack([x, 1 - x], axis=1)
    kept = box_thin(z, 10)
    assert kept.size <= 10 and {0, 999} <= set(kept.tolist())
    assert np.diff(np.sort(x[kept])).max() <= 0.25


def test_box_thin_keeps_fixed_rows():
    x = np.linspace(0, 1, 1000)
    z = np.stack([x, 1 - x], axis=1)
    fixed = np.zeros(1000, dtype=bool)
    fixed[[10, 500, 501]] = True
    kept = box_thin(z, 10, fixed)
    assert {10, 500, 501} <= set(kept.tolist())
