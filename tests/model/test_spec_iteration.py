"""The speculative iteration as serving stacks run it (issue 28; dse.model.spec_iteration, the draft
extend in dse.model.latency): the verification's sampling, the host work a stack does not overlap
(spec_schedule_us: the sglang and vllm runtimes), the EAGLE head's draft extend over the k+1 verified
positions, and an MoE target's verify pass over the union of experts its B x (k+1) tokens route to.
Numbers worked by hand from the database YAML."""

import numpy as np
import pytest

from dse.api import evaluate_design
from dse.catalog.database import load_database
from dse.model import spec_iteration
from dse.model import transformer as tf
from dse.model.drafters import eagle_head
from dse.model.roofline import step_cost

H100_BW = 3.35e12 * 0.83          # devices/h100-sxm.yaml: 3.35 TB/s at mem_efficiency 0.83 = 2.7805 TB/s
V_LLAMA3 = 128256                 # models/llama-3.1-8b.yaml vocab_size


def _rest_ms(r):
    """What an iteration spends beside its passes and link (serial drafting)."""
    return r["iter_ms"] - r["draft_ms_per_iter"] - r["verify_ms_per_iter"] - r["link_ms_per_iter"]


def test_verification_sampling_by_hand():
    # Llama-3.1-8B, batch 1, a chain of 3: the verify pass's LM head writes 4 x 128,256 fp32 logits and
    # the sampler reads them back: 2 x 1 x 4 x 128,256 x 4 = 4,104,192 B, 1.4761 us at 2.7805 TB/s
    assert spec_iteration.verify_sampling_bytes(V_LLAMA3, 1, 4) == 4_104_192
    # batch 64, 8 positions: 2 x 64 x 8 x 128,256 x 4 = 525,336,576 B, 188.94 us (the module's docstring)
    assert spec_iteration.verify_sampling_bytes(V_LLAMA3, 64, 8) == 525_336_576
    assert 525_336_576 / H100_BW == pytest.approx(188.94e-6, rel=1e-4)
    # under graphs (no unoverlapped host work) an iteration adds 100 us of kernels and the sampling
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", k=3, tree_nodes=0, tau=2.5)
    assert _rest_ms(r) == pytest.approx(0.100 + 4_104_192 / H100_BW * 1e3, rel=1e-9)
    # vectorised over designs: (n, 1) columns against (1, K) k candidates
    b = spec_iteration.verify_sampling_bytes(V_LLAMA3, np.array([[1.0], [4.0]]), np.array([[2.0, 3.0, 4.0]]))
    assert b.shape == (2, 3) and b[1, 2] == 2 * 4 * 4 * V_LLAMA3 * 4


def test_unoverlapped_host_work_of_sglang_by_hand():
    # the sglang runtime (runtimes/sglang.yaml): every cost of graphs, plus 4,988 us of host work an
    # iteration, SGLang's overlap scheduler being off while it speculates: per iteration
    # 100 + 4,988 + 1.4761 us = 5.089476 ms on the same design
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", k=3, tree_nodes=0, tau=2.5)
    graphs, sglang = evaluate_design(**kw), evaluate_design(runtime="sglang", **kw)
    assert _rest_ms(sglang) == pytest.approx(0.100 + 4.988 + 4_104_192 / H100_BW * 1e3, rel=1e-9)
    assert _rest_ms(sglang) == pytest.approx(5.089476, abs=1e-6)
    # nothing else differs: the same passes, the same plain step
    for key in ("draft_ms_per_iter", "verify_ms_per_iter", "baseline_ms_per_token"):
        assert sglang[key] == pytest.approx(graphs[key], rel=1e-12), key
    assert sglang["speedup"] < graphs["speedup"]
    # anchoring at a measured step scales the launch-side fixed costs (100 us spec overhead included),
    # not the host's scheduling nor the sampling's memory traffic
    a = evaluate_design(runtime="sglang", baseline_ms=6.0, **kw)
    s = a["anchor"]["factor"]
    assert _rest_ms(a) == pytest.approx(0.100 * s + 4.988 + 4_104_192 / H100_BW * 1e3, rel=1e-9)
    # the host work is a fixed cost of the iteration (overhead_ms_per_token counts it)
    assert sglang["overhead_ms_per_token"] - graphs["overhead_ms_per_token"] == pytest.approx(4.988 / 2.5, rel=1e-9)


def test_vllm_draft_steps_by_hand():
    # the vllm runtime: 777 us of host work an iteration and 375 us a draft step (the Python loop of
    # EagleProposer.propose); a chain of 3 draws 3 x (375 - 30) us more than graphs' 30 us a step
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", k=3, tree_nodes=0, tau=2.5)
    graphs, vllm = evaluate_design(**kw), evaluate_design(runtime="vllm", **kw)
    assert vllm["draft_ms_per_iter"] - graphs["draft_ms_per_iter"] == pytest.approx(3 * 0.345, rel=1e-9)
    assert _rest_ms(vllm) == pytest.approx(0.100 + 0.777 + 4_104_192 / H100_BW * 1e3, rel=1e-9)


def test_draft_extend_runs_the_verified_positions_by_hand(db, ideal):
    # An EAGLE head's first pass re-runs the k+1 verified positions (SGLang's draft extend, vLLM's first
    # propose pass). On a compute-bound ideal H100 (bandwidth 1e5 TB/s, 1 TFLOP/s, no fixed costs) a
    # chain of 3 drafts 4 + 1 + 1 = 6 positions: its draft time is that of one 4-position step and two
    # 1-position steps of the head (its layer, LM head and fc(3d -> d) on the fused features)
    slow = {**ideal, "mem_bw_tb_s": 1e5, "peak_tflops_bf16": 1.0}
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", k=3, tree_nodes=0, tau=2.5,
                        set_fields=slow, prompt=128, output=128)
    from dse.api import apply_overrides, hardware_arrays
    dev, rt = apply_overrides(db.device("h100-sxm"), db.runtime("graphs"), slow)
    hw = hardware_arrays(dev, rt, 1, "bf16")
    tgt = db.model("llama-3.1-8b")
    fc = 3 * tgt.hidden_size ** 2                          # EAGLE-3's fc(3d -> d): 50,331,648 weights
    assert fc == 50_331_648

    def step(q):          # the head's layer and 32K-vocabulary LM head, plus its fc: 2 x fc x q FLOPs at 1 TFLOP/s
        c = step_cost(eagle_head(tgt, "eagle3"), hw, batch=1.0, q=q, context=192.0, weight_bytes=2.0, kv_bytes=2.0,
                      step_overhead=False)
        return c.time_s[0] + 2 * fc * q / (1e12 * hw.compute_efficiency[0])

    assert r["draft_ms_per_iter"] == pytest.approx((step(4.0) + 2 * step(1.0)) * 1e3, rel=1e-9)
    # compute-bound: the extend costs ~4 one-position steps, so the chain ~6 (at a 192-token context
    # the attention share moves it by < 1%)
    assert r["draft_ms_per_iter"] / (step(1.0) * 1e3) == pytest.approx(6.0, rel=0.01)


def test_moe_verify_reads_the_union_of_experts_by_hand(db):
    # Qwen3-30B-A3B (models/qwen3-30b-a3b.yaml): 48 MoE layers of 128 experts, 8 a token, 3 x 2,048 x 768
    # = 4,718,592 weights an expert; attention 2,048 x 4,096 + 2 x 2,048 x 512 + 4,096 x 2,048 =
    # 18,874,368; router 2,048 x 128 = 262,144; LM head 151,936 x 2,048 = 311,164,928.
    m = db.model("qwen3-30b-a3b")
    assert tf.ffn_params(m, tf.expert_width(m)) == 4_718_592 and tf.attention_params(m) == 18_874_368
    # a plain step (1 token): 8 experts a layer, (18,874,368 + 8 x 4,718,592 + 262,144) x 48 + 311,164,928
    # = 3,041,656,832 weights. Verifying a chain of 3 at batch 1 routes 4 tokens: under uniform routing
    # 128 x (1 - (120/128)^4) = 128 x 14,911/65,536 = 29.123 distinct experts a layer, so
    # (18,874,368 + 29.123047 x 4,718,592 + 262,144) x 48 + 311,164,928 = 7,825,866,752 weights: 2.57x
    assert tf.experts_touched(128, 8, 4) == pytest.approx(128 * 14911 / 65536, rel=1e-12)
    assert tf.weight_params_touched(m, 1.0) == 3_041_656_832
    assert tf.weight_params_touched(m, 4.0) == pytest.approx(7_825_866_752, rel=1e-12)
    # the verify pass streams exactly that many more bytes than the plain step (bf16, one chip), besides
    # the 3 more tokens' KV writes (48 x 2 x 4 x 128 x 2 = 98,304 B a token)
    hw = evaluate_design(hw="h100-sxm", target="qwen3-30b-a3b", build_only=True)[0].target
    kw = dict(batch=1.0, context=512.0, **tf.step_kwargs("bf16", "bf16"))
    one, four = step_cost(m, hw, q=1.0, **kw), step_cost(m, hw, q=4.0, **kw)
    assert float(four.bytes[0] - one.bytes[0]) == pytest.approx((7_825_866_752 - 3_041_656_832) * 2 + 3 * 98_304,
                                                                rel=1e-12)


def test_moe_verify_cost_rises_with_k_times_batch_until_every_expert_is_read():
    # property: the verify pass of B x (k+1) tokens reads more experts as k x B grows, never fewer, and
    # stops growing once all 128 are read: from 4 tokens to 512 the expert weights go 29 -> ~128 a layer
    base = dict(hw="h100-sxm", chips=2, target="qwen3-30b-a3b", draft="eagle3", tree_nodes=0, tau=1.5,
                set_fields={"kernel_launch_us": 0, "step_overhead_us": 0, "peak_tflops_bf16": 1e5})
    tokens, verify = [], []
    for batch in (1, 4, 16, 64):
        for k in (1, 3, 7):
            r = evaluate_design(batch=batch, k=k, **base)
            tokens.append(batch * (k + 1))
            verify.append(r["verify_ms_per_iter"])
    order = np.argsort(tokens, kind="stable")
    t, v = np.asarray(tokens)[order], np.asarray(verify)[order]
    assert np.all(np.diff(v)[np.diff(t) > 0] > 0)                 # more tokens: more experts, more time
    touched = tf.experts_touched(128, 8, t.astype(float))
    assert touched[0] == pytest.approx(128 * (1 - (120 / 128) ** 2)) and touched[-1] > 127.99
    # the weights' share saturates: the last doubling of tokens (256 -> 512) adds < 1% of the experts
    assert tf.experts_touched(128, 8, 512.0) - tf.experts_touched(128, 8, 256.0) < 0.01 * 128


@pytest.mark.parametrize("runtime", ["graphs", "sglang", "vllm", "eager", "dataflow"])
def test_an_iteration_is_never_cheaper_than_its_verify_pass(runtime):
    # property over many designs, chains and trees, serial and overlapped drafting: T_iter >= T_verify +
    # T_link + the runtime's per-iteration costs (spec_overhead + spec_schedule), and speculation
    # never gains more than tau
    db = load_database()
    rt = db.runtime(runtime)
    rng = np.random.default_rng(28)
    for _ in range(12):
        kw = dict(hw=str(rng.choice(["h100-sxm", "h200", "a100-80gb"])), target="llama-3.1-8b",
                  draft=str(rng.choice(["eagle", "eagle3", "llama-3.2-1b"])), batch=int(rng.choice([1, 8, 64])),
                  k=int(rng.integers(1, 7)), alpha=float(rng.uniform(0.3, 0.9)), runtime=runtime)
        if kw["draft"] != "llama-3.2-1b" and rng.random() < 0.5:
            kw["tree_nodes"] = int(rng.integers(4, 40))
        r = evaluate_design(**kw)
        floor = r["verify_ms_per_iter"] + r["link_ms_per_iter"] + (rt.spec_overhead_s + rt.spec_schedule_s) * 1e3
        assert r["iter_ms"] >= floor * (1 - 1e-12), kw
        assert r["speedup"] <= r["tau"] * r["baseline_ms_per_token"] / r["verify_ms_per_iter"] + 1e-9, kw
