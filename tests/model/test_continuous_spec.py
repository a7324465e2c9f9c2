"""Continuous batching with speculation: the draft prefills its share of the arriving prompts
every iteration, and a new request's TTFT waits behind the running iteration and the other arriving
prompts, in iterations that carry prompt tokens (dse.model.scheduler). Numbers worked by hand from
the database YAML."""

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


def step_ms(model, B, S, P, X):
    """One decode step (q = 1) of ``model`` = (layers, weights a layer, LM head, KV bytes a token,
    attention FLOP per query-key pair) for B sequences at context S with X prompt tokens (of prompts
    of P) riding along: linear and attention parts, each sqrt(t_c^2 + t_m^2) (roofline_p 2), fixed
    costs left out (they cancel in a difference)."""
    layers, layer, head, kv_token, att = model
    lin_c = (2 * (layers * layer + head) * B + 2 * layers * layer * X) / (PEAK * ETA_C)
    lin_m = (layers * layer + head) * 2 / (BW * ETA_M)
    att_c = att * (B * (S + 1) + X * (P + 1) / 2) / (PEAK * ETA_C)
    att_m = (B * (S + 1) + X) * kv_token / (BW * ETA_M)
    return 1e3 * (math.hypot(lin_c, lin_m) + math.hypot(att_c, att_m))


DRAFT_1B = (L, LAYER, HEAD, KV_TOKEN, ATT)


def test_the_draft_prefills_its_share_of_the_arriving_prompts():
    """Issue 17: 8B + 1B draft, H100, batch 64, prompt 2048, output 256, alpha 0.8, k 4: per
    iteration tau = 3.3616 requests' worth of a step's arrivals, P(B-1)/G x tau = 2048*63/256 x
    3.3616 = 1694.3 prompt tokens, all in the draft's first step: +4.51 ms; speedup 1.097x -> 1.027x (with
    the verification's sampling: 2 x 64 x 5 x 128,256 x 4 B = 328.4 MB at 2.7805 TB/s, 0.118 ms an iteration)."""
    tau = (1 - 0.8 ** 5) / 0.2
    X = 2048 * 63 / 256 * tau
    assert X == pytest.approx(1694.25, abs=0.01)
    S = 2048 + 128                      # mean context P + G/2
    extra = step_ms(DRAFT_1B, 64, S, 2048, X) - step_ms(DRAFT_1B, 64, S, 2048, 0.0)
    assert extra == pytest.approx(4.507, abs=0.001)
    r = evaluate_design(**CASE, continuous=True)
    assert r["tau"] == pytest.approx(tau)
    no_draft_prefill = r["iter_ms"] - extra           # what the model charged before
    assert r["baseline_ms_per_token"] * tau / no_draft_prefill == pytest.approx(1.0968, abs=1e-4)
    assert r["speedup"] == pytest.approx(1.0272, abs=1e-4)
    with_sampling = r["baseline_ms_per_token"] * tau / (no_draft_prefill - 2 * 64 * 5 * 128256 * 4 / 2.7805e12 * 1e3)
    assert with_sampling == pytest.approx(1.0987, abs=1e-4)          # the figure before the sampling was priced
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


# Llama-3.1-8B (models/llama-3.1-8b.yaml): L 32, d 4096, h 32, h_kv 8, d_h 128, f 14336, V 128256, untied
L8, D8, H8, HKV8, DH8, F8 = 32, 4096, 32, 8, 128, 14336
LAYER8 = D8 * H8 * DH8 + 2 * D8 * HKV8 * DH8 + H8 * DH8 * D8 + 3 * D8 * F8     # 218,103,808 parameters a layer
HEAD8 = V * D8
KV8 = L8 * 2 * HKV8 * DH8 * 2                                                  # 131,072 bytes a token (bf16)
ATT8 = 4 * H8 * DH8 * L8


TARGET_8B = (L8, LAYER8, HEAD8, KV8, ATT8)


def test_the_closed_loop_queue_by_hand():
    """B 11 clients, G 101 tokens at 10 ms, a 10 ms iteration, the prompt's own iteration 50 ms and
    20 ms of the prompt server while prompts queue: the other 10 arrive at 10/(x + 1.0 s) a second,
    x the TTFT; x = 5 ms (half the running iteration) + 50 ms + W, W = rho 0.02/(2(1 - rho)),
    rho = 0.2/(x + 1.0). Iterated by hand: rho 0.189155, W 2.3328 ms, x 57.3328 ms."""
    import numpy as np

    from dse.model.scheduler import closed_loop_ttft_s
    x = closed_loop_ttft_s(np.array([11.0]), 101.0, 0.01, 0.01, 0.05, 0.02)
    assert float(x[0]) == pytest.approx(0.0573328, rel=1e-5)
    # one client: nothing ahead, no running iteration to wait for: its own iteration only
    assert float(closed_loop_ttft_s(np.array([1.0]), 101.0, 0.01, 0.01, 0.05, 0.02)[0]) == pytest.approx(0.05)


def test_a_prefill_bound_closed_loop_waits_for_nearly_every_other_prompt():
    """B 64, G 11 at 10 ms (0.1 s of decode), prompts of 0.4 s: the others' prompts outweigh the
    decode 250 to 1. x = 0.405 + W, W = rho 0.4/(2(1 - rho)), rho = 25.2/(x + 0.1): near saturation,
    rho = 0.99206 and x = 25.30 s, just under B S - decode = 25.5 s (every other prompt ahead)."""
    import numpy as np

    from dse.model.scheduler import closed_loop_ttft_s, open_loop_ttft_s, prompt_times_s
    x = float(closed_loop_ttft_s(np.array([64.0]), 11.0, 0.01, 0.01, 0.4, 0.4)[0])
    rho = 25.2 / (x + 0.1)
    assert rho < 1 and x == pytest.approx(0.405 + rho * 0.4 / (2 * (1 - rho)), rel=1e-9)
    assert x == pytest.approx(25.30, abs=0.01)
    # open loop: past rho = 1 there is no steady state
    assert np.isinf(open_loop_ttft_s(3.0, 0.01, 0.4, 0.4))
    assert float(open_loop_ttft_s(1.0, 0.01, 0.4, 0.4)) == pytest.approx(0.005 + 0.4 * 0.4 / (2 * 0.6) + 0.4)
    # no budget left for prompts (the decode tokens fill it): no first token
    own, busy = prompt_times_s(100.0, 0.0, 0.01, 0.01)
    assert np.isinf(own) and np.isinf(busy)
    # a prompt of 3 chunks: three iterations of its own; S is its share of full chunks
    own, busy = prompt_times_s(3000.0, 1000.0, 0.05, 0.05)
    assert (float(own), float(busy)) == pytest.approx((0.15, 0.15))
    own, busy = prompt_times_s(250.0, 1000.0, 0.02, 0.08)       # a quarter of a 80 ms full chunk
    assert (float(own), float(busy)) == pytest.approx((0.02, 0.02))


def test_ttft_under_load_is_the_queue_of_prompt_tokens_in_iterations_that_carry_them():
    """8B on an H100, continuous, B 64, P 2,048, G 256: the mean iteration t carries the arriving
    prompts, 2,048 x 63/256 = 504 tokens. The prompt's own iteration carries all of it (C = 8,192 - 64
    = 8,128 >= P): t + delta(2,048); a full chunk is t + delta(8,128), so S = 2,048/8,128 of it. TTFT =
    t/2 + W + own + 2.4 ms (the graphs runtime's request cost), W the M/D/1 wait at
    lam = 63/(TTFT + 255 t). No batch-1 prefill that re-reads the weights."""
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", batch=64, prompt=2048, output=256, continuous=True)
    S = 2048 + 128
    d_own = step_ms(TARGET_8B, 64, S, 2048, 2048) - step_ms(TARGET_8B, 64, S, 2048, 504)
    d_full = step_ms(TARGET_8B, 64, S, 2048, 8128) - step_ms(TARGET_8B, 64, S, 2048, 504)
    assert (d_own, d_full) == pytest.approx((32.478, 165.027), abs=0.001)
    t = r["baseline_ms_per_token"]
    own, busy = t + d_own, (t + d_full) * 2048 / 8128
    x = 0.5 * t + own
    for _ in range(100):          # the fixed point in x (ms)
        rho = 63 * busy / (x + 255 * t)
        W = rho * busy / (2 * (1 - rho))
        x = 0.5 * t + W + own
    assert rho == pytest.approx(0.5271, abs=1e-3)      # the others' prompts: half the prompt server
    assert r["ttft_ms"] == pytest.approx(x + 2.4, rel=1e-6)
    assert r["request_latency_ms"] == pytest.approx(r["ttft_ms"] + 255 * t, rel=1e-12)


def test_ttft_at_384_requests_is_not_a_queue_of_batch_one_prefills():
    """The old queue charged each arriving prompt as its own batch-1 prefill pass re-reading every
    weight: 8B on an H100 at batch 384 gave 2,995 ms (72 ms at 256). In chunked iterations the
    prompts of 128 tokens ride in the decode steps: TTFT stays within two iterations there."""
    for b in (256, 384):
        r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", batch=b, continuous=True)
        assert r["ttft_ms"] < 2.0 * r["iter_ms"] + 2.4 + 1.0


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


def test_random_arrivals_wait_longer_than_a_closed_loop():
    """Poisson arrivals with B in flight on average: lam = B/(x + g) (all B, not the B - 1 others), an
    arrival at a random time finds an iteration running, and nothing bounds the queue by the clients.
    B 64, G 11 at 10 ms, prompts of 0.4 s: the closed loop stops at 25.30 s (63 prompts ahead at most);
    at random times x = 0.405 + W, W = rho 0.4 / (2 (1 - rho)), rho = 25.6/(x + 0.1): 25.7 s."""
    import numpy as np

    from dse.model.scheduler import closed_loop_ttft_s
    closed = float(closed_loop_ttft_s(np.array([64.0]), 11.0, 0.01, 0.01, 0.4, 0.4)[0])
    rand = float(closed_loop_ttft_s(np.array([64.0]), 11.0, 0.01, 0.01, 0.4, 0.4, poisson=True)[0])
    rho = 25.6 / (rand + 0.1)
    assert rand == pytest.approx(0.405 + rho * 0.4 / (2 * (1 - rho)), rel=1e-9) and rand > closed
    assert rand == pytest.approx(25.70, abs=0.01)
    # one request on average: it waits behind half an iteration (a closed loop's lone client does not)
    one = float(closed_loop_ttft_s(np.array([1.0]), 101.0, 0.01, 0.01, 0.05, 0.02, poisson=True)[0])
    assert one > 0.05 + 0.005
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", batch=64, prompt=2048, output=256, continuous=True)
    rand_r, closed_r = evaluate_design(**kw, arrivals="poisson"), evaluate_design(**kw)
    assert rand_r["ttft_ms"] > closed_r["ttft_ms"]
    assert (rand_r["arrivals"], closed_r["arrivals"]) == ("poisson", "closed")      # the record says which load
