"""Continuous batching with speculation (issue 17, item 6): the draft prefills its share of the
arriving prompts every iteration, and a new request's TTFT waits behind the running iteration
and the other arriving prompts. Numbers worked by hand from the database YAML."""

import math

import pytest

from dse.api import evaluate_design

# H100 SXM (devices/h100-sxm.yaml) under the graphs runtime
BW, ETA_M = 3.35e12, 0.83
PEAK, ETA_C = 989.4e12, 0.66
# Llama-3.2-1B (models/llama-3.2-1b.yaml): L 16, d 2048, h 32, h_kv 8, d_h 64, f 8192, V 128256, tied
L, D, H, HKV, DH, F, V = 16, 2048, 32, 8, 64, 8192, 128256
LAYER = D * H * DH + 2 * D * HKV * DH + H * DH * D + 3 * D * F       # 60,817,408 parameters a layer
HEAD = V * D                                                        # 262,668,288
KV_TOKEN = L * 2 * HKV * DH * 2                                     # 32,768 bytes a token (bf16)
ATT = 4 * H * DH * L                                                # FLOP per (query, cached key)

CASE = dict(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", batch=64, prompt=2048, output=256,
            alpha=0.8, k=4)


def draft_step_ms(B, S, P, X):
    """One 1B draft step (q = 1) for B sequences at context S with X prompt tokens riding along:
    linear and attention parts, each sqrt(t_c^2 + t_m^2) (roofline_p 2), fixed costs left out."""
    lin_c = (2 * (L * LAYER + HEAD) * B + 2 * L * LAYER * X) / (PEAK * ETA_C)
    lin_m = (L * LAYER + HEAD) * 2 / (BW * ETA_M)
    att_c = ATT * (B * (S + 1) + X * (P + 1) / 2) / (PEAK * ETA_C)
    att_m = (B * (S + 1) + X) * KV_TOKEN / (BW * ETA_M)
    return 1e3 * (math.hypot(lin_c, lin_m) + math.hypot(att_c, att_m))


def test_the_draft_prefills_its_share_of_the_arriving_prompts():
    """Issue 17: 8B + 1B draft, H100, batch 64, prompt 2048, output 256, alpha 0.8, k 4: per
    iteration tau = 3.3616 requests' worth of a step's arrivals, P(B-1)/G x tau = 2048*63/256 x
    3.3616 = 1694.3 prompt tokens, all in the draft's first step: +4.51 ms; speedup 1.099x -> 1.029x."""
    tau = (1 - 0.8 ** 5) / 0.2
    X = 2048 * 63 / 256 * tau
    assert X == pytest.approx(1694.25, abs=0.01)
    S = 2048 + 128                      # mean context P + G/2
    extra = draft_step_ms(64, S, 2048, X) - draft_step_ms(64, S, 2048, 0.0)
    assert extra == pytest.approx(4.507, abs=0.001)
    r = evaluate_design(**CASE, continuous=True)
    assert r["tau"] == pytest.approx(tau)
    no_draft_prefill = r["iter_ms"] - extra           # what the model charged before
    assert r["baseline_ms_per_token"] * tau / no_draft_prefill == pytest.approx(1.0987, abs=1e-4)
    assert r["speedup"] == pytest.approx(1.0289, abs=1e-4)
    assert r["speedup"] == pytest.approx(r["baseline_ms_per_token"] * tau / r["iter_ms"], rel=1e-12)
    # a static batch has no arriving prompts: k draft steps of the same cost
    s = evaluate_design(**CASE)
    one = evaluate_design(**{**CASE, "k": 1})
    assert s["draft_ms_per_iter"] == pytest.approx(4 * one["draft_ms_per_iter"], rel=1e-12)


@pytest.mark.parametrize("draft,prefills", [("llama-3.2-1b", True), ("eagle", True), ("early-exit:8", False),
                                            ("medusa:4", False), ("ngram", False)])
def test_which_drafters_prefill(draft, prefills):
    """A draft model and an EAGLE head keep their own cache of every prompt; early exit shares the
    target's (filled by the verify pass), Medusa heads and retrieval keep none."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft=draft, batch=16, prompt=1024, output=256, alpha=0.7, k=3)
    cont = evaluate_design(**kw, continuous=True)
    b1 = evaluate_design(**{**kw, "batch": 1}, continuous=True)     # B = 1: no other request arrives
    b1_static = evaluate_design(**{**kw, "batch": 1})
    assert b1["draft_ms_per_iter"] == pytest.approx(b1_static["draft_ms_per_iter"], rel=1e-12)
    # at B = 16 (15 x 1024 / 256 x tau prompt tokens per iteration) only a prefilling kind's draft costs more
    static = evaluate_design(**kw)
    if prefills:
        assert cont["draft_ms_per_iter"] > static["draft_ms_per_iter"] * (1 + 1e-3)
    else:
        assert cont["draft_ms_per_iter"] == pytest.approx(static["draft_ms_per_iter"], rel=1e-12)


def test_ttft_waits_behind_the_running_iteration_and_the_queue_of_prompts(db):
    """TTFT = own prefill (target, then the draft's) + half the running iteration + the M/D/1 wait
    behind the other arriving prompts + the request cost. rho = (B-1) S / (G x per-token latency)."""
    r = evaluate_design(**CASE, continuous=True)
    alone = evaluate_design(**{**CASE, "batch": 1}, continuous=True)
    own = alone["ttft_ms"] - 2.4 - 0.5 * alone["iter_ms"]          # B = 1: no queue (no other requests)
    # own prefill does not depend on B under continuous batching (batch 1)
    rho = 63 * own / (256 * r["spec_ms_per_token"])
    wait = rho * own / (2 * (1 - rho))
    assert 0 < rho < 1
    assert r["ttft_ms"] == pytest.approx(own + 0.5 * r["iter_ms"] + wait + 2.4, rel=1e-9)
    assert r["request_latency_ms"] == pytest.approx(r["ttft_ms"] + 255 * r["spec_ms_per_token"], rel=1e-12)
    # a plain decode (no draft) waits the same way behind half a step and the queue
    p = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", batch=64, prompt=2048, output=256, continuous=True)
    p1 = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", batch=1, prompt=2048, output=256, continuous=True)
    own = p1["ttft_ms"] - 2.4 - 0.5 * p1["baseline_ms_per_token"]
    rho = 63 * own / (256 * p["baseline_ms_per_token"])
    assert p["ttft_ms"] == pytest.approx(own + 0.5 * p["baseline_ms_per_token"] + rho * own / (2 * (1 - rho)) + 2.4,
                                         rel=1e-9)


def test_an_overloaded_prefill_queue_is_bounded_by_the_clients():
    """rho >= 1 (prompts arrive faster than they can be prefilled): a closed loop of B clients has
    at most B-1 prompts ahead, so the wait is (B-1) x one prefill, not infinite."""
    import numpy as np

    from dse.model.latency import prefill_queue_s
    w = prefill_queue_s(np.array([0.1, 0.1, 0.1]), np.array([1, 11, 11]), np.array([100, 100, 10]),
                        np.array([0.01, 0.01, 0.01]))
    # B 1: 0; rho = 10 x 0.1 / (100 x 0.01) = 1.0 -> bounded by 10 x 0.1 = 1.0; rho 10 -> 1.0
    assert w == pytest.approx([0.0, 1.0, 1.0])
    w = prefill_queue_s(0.1, 6, 100, 0.01)          # rho 0.5: 0.5 x 0.1 / (2 x 0.5) = 0.05
    assert float(w) == pytest.approx(0.05)
    # rho 1.5 (15 x 0.1 / (100 x 0.01)): P-K has no steady state (its formula would give -0.15);
    # bounded: 15 x 0.1 = 1.5
    assert float(prefill_queue_s(0.1, 16, 100, 0.01)) == pytest.approx(1.5)


def test_a_tree_drafts_the_arriving_prompts_in_its_first_level(db):
    """A draft model's tree (16 nodes, depth <= 4, geometric ranks: 3-4-4-5) under continuous
    batching: the x = 2,048 x 63 / (64 x 256) x tau = 7.875 x 4.47008 = 35.2019 prompt tokens a
    sequence ride along in the first level's step (3 positions), not in the others: the draft
    costs what that one step gains over its static self more."""
    import numpy as np

    from dse.api import hardware_arrays
    from dse.model.roofline import step_cost
    from dse.model.transformer import step_kwargs
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4, tree_nodes=16,
              rank_profile="geometric", batch=64, prompt=2048, output=256)
    cont, static = evaluate_design(continuous=True, **kw), evaluate_design(**kw)
    assert cont["tree_shape"] == static["tree_shape"] == "3-4-4-5"
    assert cont["tau"] == pytest.approx(4.47008, rel=1e-12)
    hw = hardware_arrays(db.device("h100-sxm"), db.runtime("graphs"), 1, "bf16")
    step = dict(batch=64.0, q=3.0, context=2048.0 + 128.0, **step_kwargs("bf16", "bf16"))
    draft = db.model("llama-3.2-1b")
    gain = (step_cost(draft, hw, prefill_tokens=7.875 * 4.47008, prefill_len=2048.0, **step).time_s
            - step_cost(draft, hw, **step).time_s)
    assert cont["draft_ms_per_iter"] - static["draft_ms_per_iter"] == pytest.approx(float(np.ravel(gain)[0]) * 1e3,
                                                                                    rel=1e-9)
