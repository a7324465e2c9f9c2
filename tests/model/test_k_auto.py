"""k = auto up to 16 where acceptance is high (issue 17, item 8)."""

import pytest

from dse.api import evaluate_design

CASE = dict(hw="h200", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.9)


def test_high_acceptance_takes_k_past_the_old_cap_of_8():
    """Issue 17: at alpha 0.9, Llama-3.1-70B fp8 + a 1B draft on one H200, k = 12 is 5.6% faster
    than k = 8. tau(8) = (1 - 0.9^9)/0.1 = 6.1258, tau(12) = (1 - 0.9^13)/0.1 = 7.4581 (+21.7%);
    the iteration grows by 4 draft steps (the verify pass stays memory-bound), +15.3%."""
    r8, r12 = evaluate_design(**CASE, k=8), evaluate_design(**CASE, k=12)
    assert r8["tau"] == pytest.approx((1 - 0.9 ** 9) / 0.1) and r12["tau"] == pytest.approx((1 - 0.9 ** 13) / 0.1)
    assert r12["tau"] / r8["tau"] == pytest.approx(1.2175, abs=1e-4)
    assert r12["iter_ms"] / r8["iter_ms"] == pytest.approx(1.1530, abs=1e-3)
    assert r8["spec_ms_per_token"] / r12["spec_ms_per_token"] == pytest.approx(1.056, abs=1e-3)
    auto = evaluate_design(**CASE)
    assert auto["k"] == 13
    assert r8["spec_ms_per_token"] / auto["spec_ms_per_token"] == pytest.approx(1.0567, abs=1e-3)
    # the cap is the workload's k_max (16 by default); k_max 8 gives the old answer
    assert evaluate_design(**CASE, k_max=8)["k"] == 8


def test_low_acceptance_stays_short():
    """At alpha 0.6 the chain's tau barely grows past k = 4 (0.6^5 = 0.078 a token), and k stays small."""
    r = evaluate_design(**{**CASE, "alpha": 0.6})
    assert r["k"] <= 5
