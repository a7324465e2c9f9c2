"""DeepSeek-V3's multi-token-prediction (MTP) module as a draft kind (``--draft mtp`` / ``mtp:N``),
worked by hand from hardware_db/models/deepseek-v3.yaml, b200.yaml and runtimes/graphs.yaml.

DeepSeek-V3: d 7,168, V 129,280, 128 heads, MLA q_lora 1,536, kv_lora 512, rope 64, head_dim 192, v 128;
256 routed experts (8 active) + 1 shared, expert width 2,048. One MTP module = one MoE block of the
target's kind + eh_proj (2d -> d); embedding and LM head shared (arXiv 2412.19437 section 2.2).
  attention (MLA): 7,168 x 1,536 + 1,536 x 128 x 192 + 7,168 x 576 + 512 x 128 x 256 + 128 x 128 x 7,168
                   = 187,105,280
  one expert: 3 x 7,168 x 2,048 = 44,040,192; 257 of them 11,318,329,344; router 7,168 x 256 = 1,835,008
  block = 11,507,269,632; eh_proj 2 x 7,168^2 = 102,760,448; module = 11,610,030,080
  LM head V x d = 926,679,040; replicated on every chip: 7,168 x (1,536 + 512 + 64) + 1,835,008 = 16,973,824
B200: 8e12 B/s at 0.83 = 6.64e12 B/s; fp8 4.5e15 FLOP/s x 0.66 x 0.70 (fp8 GEMMs) = 2.079e15; NVLink
1.8e12 B/s at 0.82, 0.44 us a hop. graphs: 6.5 us a kernel; an MLA MoE layer with a shared expert
8 + 2.9 + 5 + 3 = 18.9 kernels; 30 us a draft step (a head inside the iteration)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from dse.api import evaluate_design, hardware_arrays
from dse.cli.commands import main
from dse.model import transformer as tf
from dse.model.drafters import eagle_head, mtp_block, mtp_params, mtp_proj_params
from dse.model.roofline import step_cost
from dse.workload.spec import parse_drafter

BLOCK, EH, HEAD, REP = 11_507_269_632, 102_760_448, 926_679_040, 16_973_824
KW = dict(hw="b200", chips=8, target="deepseek-v3", dtype="fp8")


def test_the_module_is_one_moe_block_and_its_projection(db):
    """DeepSeek-V3's README_WEIGHTS.md: 11.5B unique parameters (embedding and head shared); the
    checkpoint's copies of both (2 x 0.93B) make the HF card's 14B (671B + 14B = 685B)."""
    tgt = db.model("deepseek-v3")
    assert tgt.mtp_layers == 1
    block = mtp_block(tgt)
    assert (block.num_layers, tf.layer_counts(block)) == (1, (0, 1))       # a routed-MoE layer, not a dense one
    assert tf.attention_params(tgt) == 187_105_280
    assert tf.non_embedding_params(block) == BLOCK == 187_105_280 + 257 * 44_040_192 + 1_835_008
    assert mtp_proj_params(tgt) == EH and mtp_params(tgt) == BLOCK + EH == 11_610_030_080
    assert 11.5e9 < mtp_params(tgt) < 11.7e9
    assert (mtp_params(tgt) + 2 * HEAD) / 1e9 == pytest.approx(13.46, abs=0.005)       # the card's "14B"
    # ~97% of it is the routed and shared experts
    assert 257 * 44_040_192 / mtp_params(tgt) == pytest.approx(0.9749, abs=1e-4)


def test_one_mtp_step_by_hand(db):
    """One MTP step at batch 1 (q 1, context S = 128 + 128/2 = 192) on 8 B200s, fp8 (1 B a weight,
    head too), bf16 KV. Weights a chip: the block's touched params at T = 1 token, 187,105,280 +
    1,835,008 + (8 + 1) x 44,040,192 = 585,302,016, split 8 ways but the replicated 16,973,824:
    (585,302,016 - 16,973,824) / 8 + 16,973,824 = 88,014,848 B; the shared head 926,679,040 / 8 =
    115,834,880 B; eh_proj 102,760,448 / 8 = 12,845,056 B: 216,694,784 B a chip (1,614,741,504 B, 1.61
    GB, for the group). The MLA cache of its one layer: 193 tokens x 576 x 2 B = 222,336 B."""
    tgt = db.model("deepseek-v3")
    hw = hardware_arrays(db.device("b200"), db.runtime("graphs"), 8, "fp8")
    c = step_cost(mtp_block(tgt), hw, batch=1.0, q=1.0, context=192.0, step_overhead=False,
                  **tf.step_kwargs("fp8", "bf16"))
    assert float(c.bytes[0]) == 88_014_848 + 115_834_880 + 222_336
    assert 585_302_016 + EH + HEAD == 1_614_741_504
    # time: linear part sqrt(t_c^2 + t_m^2) (roofline p = 2), t_m = 203,849,728 / 6.64e12 = 30.700 us,
    # t_c = ((2 x 1,511,981,056 - 2 x 16,973,824) / 8 + 2 x 16,973,824) / 2.079e15 = 407,699,456 / 2.079e15
    # = 0.196 us (1,511,981,056 = 585,302,016 + the head's 926,679,040 multiplied by the token);
    t_lin = math.hypot(407_699_456 / 2.079e15, 203_849_728 / 6.64e12)
    # attention: 222,336 B / 6.64e12 against 2 x 128 x (2 x 512 + 64) x 193 / 8 FLOP at 2.25e15 x 0.66
    t_att = math.hypot(2 * 128 * 1088 * 193 / 8 / (2.25e15 * 0.66), 222_336 / 6.64e12)
    # two all-reduces of 7,168 x 2 B over 8 chips in the low-latency protocol (the faster at a few KB):
    # 2 x (2 x 7/8 x 14,336 / (0.9e12 x 0.24) + 14 x 0.44 us)
    t_ar = 2 * (2 * 7 / 8 * 14_336 / (0.9e12 * 0.24) + 14 * 0.44e-6)
    kernels = 18.8 * 6.5e-6                                      # 8 + 2.8 + 5 + 3 kernels: 122.2 us
    assert float(c.time_s[0]) == pytest.approx(t_lin + t_att + t_ar + kernels, rel=1e-9)
    # the step in the iteration adds eh_proj, streamed: 12,845,056 B / 6.64e12 = 1.934 us (its 2 x
    # 102,760,448 / 8 FLOP take 0.012 us), and the 30 us draft-step cost: 197.4 us
    step = t_lin + t_att + t_ar + kernels + 12_845_056 / 6.64e12 + 30e-6
    assert step == pytest.approx(197.4e-6, abs=0.05e-6)
    # In the iteration the first pass is the draft extend over the k+1 verified positions (SGLang runs
    # an MTP module through its EAGLE worker): at k = 1 two tokens, which touch 256 (1 - (248/256)^2)
    # = 15.75 routed experts: (187,105,280 + 1,835,008 + 16.75 x 44,040,192 - 16,973,824) / 8 +
    # 16,973,824 = 130,678,784 B, the head's 115,834,880 B, and 194 tokens of cache x 1,152 B = 223,488 B
    assert tf.experts_touched(256, 8, 2.0) == pytest.approx(15.75, abs=1e-12)
    c2, c4 = (step_cost(mtp_block(tgt), hw, batch=1.0, q=q, context=192.0, step_overhead=False,
                        **tf.step_kwargs("fp8", "bf16")) for q in (2.0, 4.0))
    assert float(c2.bytes[0]) == 130_678_784 + 115_834_880 + 223_488
    extend = float(c2.time_s[0]) + 12_845_056 / 6.64e12 + 30e-6      # (eh_proj's FLOPs at 2 tokens: 0.02 us)
    r = evaluate_design(draft="mtp:1", alpha=0.9, **KW)
    assert r["k"] == 1 and r["draft_ms_per_iter"] == pytest.approx(extend * 1e3, rel=1e-4)
    # k = 3: the extend over 4 positions, then two one-token steps
    r3 = evaluate_design(draft="mtp:3", alpha=0.9, **KW)
    extend4 = float(c4.time_s[0]) + 12_845_056 / 6.64e12 + 30e-6
    assert r3["k"] == 3 and r3["draft_ms_per_iter"] == pytest.approx((extend4 + 2 * step) * 1e3, rel=1e-4)


def test_mtp_costs_more_than_a_one_layer_eagle_head_and_grows_with_the_experts_touched(db):
    """The old stand-in, an EAGLE head of DeepSeek-V3's shape, is a dense layer (one of the first
    three) with no routed experts; the MTP block reads the experts its B tokens touch, E(1 - (1 -
    8/256)^B): 8 at batch 1, 222.5 at batch 64, so its step grows with the batch far more."""
    assert tf.experts_touched(256, 8, 64) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 64))
    tgt = db.model("deepseek-v3")
    assert tf.layer_counts(eagle_head(tgt)) == (1, 0)
    per_step = {}
    for draft in ("eagle", "mtp"):
        for b in (1, 64):
            r = evaluate_design(draft=draft, k=3, alpha=0.8, batch=b, **KW)
            per_step[draft, b] = r["draft_ms_per_iter"] / 3
    assert per_step["mtp", 1] > per_step["eagle", 1]
    assert per_step["mtp", 64] - per_step["mtp", 1] > 2 * (per_step["eagle", 64] - per_step["eagle", 1])


def test_capacity_holds_the_module_and_its_cache():
    """8 B200s, fp8: the module's 11,610,030,080 weights split 8 ways but the replicated 16,973,824
    (whole on every chip): 11,610,030,080 + 7 x 16,973,824 = 11,728,846,848 B for the group; its one
    MLA layer of cache for P + G + k = 128 + 128 + 3 tokens, 259 x 576 x 2 B = 298,368 B on each chip."""
    r = evaluate_design(draft="mtp:3", alpha=0.8, **KW)
    want = 11_610_030_080 + 7 * 16_973_824 + 8 * 298_368
    assert r["draft_memory_required_gb"] == pytest.approx(want / 1e9, rel=1e-12)
    base = evaluate_design(**KW)
    assert r["memory_required_gb"] - base["memory_required_gb"] == pytest.approx(want / 1e9, rel=1e-9)
    assert r["fits"]


def test_a_model_without_mtp_refuses_in_one_line(db):
    res = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "mtp:3"])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert lines == ["error: --draft = 'mtp:3': llama-3.1-8b ships no MTP module (mtp_layers = 0 in its model "
                     "entry; num_nextn_predict_layers in a config.json): pick another drafter"]
    for bad in ("mtp:0", "mtp:x", "mtp:33"):
        res = CliRunner().invoke(main, ["eval", "--hw", "b200", "--target", "deepseek-v3", "--draft", bad])
        assert res.exit_code == 2 and "expected mtp:N with N an integer in [1, 32]" in res.output
    # k beyond mtp:N's chained steps is refused; mtp:N without k drafts N
    res = CliRunner().invoke(main, ["eval", "--hw", "b200", "--chips", "8", "--target", "deepseek-v3", "--dtype", "fp8",
                                    "--draft", "mtp:2", "--k", "3", "--alpha", "0.8"])
    assert res.exit_code == 2 and "--k = 3: expected at most 2" in res.output
    assert parse_drafter("mtp:2", db.model("deepseek-v3"), db).k_cap == 2


def test_mtp_k1_at_the_published_acceptance():
    """mtp:1 without an acceptance: the table's DeepSeek-V3/R1 rows at k = 1, tau = 1.875 (the
    technical report's 85-90%, dsv3-01), 1.92 (TensorRT-LLM tech blog 1, mtp-trt-01) and 1.9
    (SGLang PR 3582, mtp-sgl-01): mean 1.898333, so a_1 = 0.898333."""
    r = evaluate_design(draft="mtp:1", **KW)
    assert r["tau"] == pytest.approx((1.875 + 1.92 + 1.9) / 3, rel=1e-12)
    assert r["acceptance_source"] == "table"


def test_chained_mtp_follows_the_published_curve():
    """TensorRT-LLM's DeepSeek-R1 with its one MTP module chained k times: tau 1.92 (with the other
    k = 1 rows: 1.898333), 2.58, 2.82, 2.99, 3.01 at k = 1..5. The rates per position reproduce
    every point (the i.i.d. alpha of k = 1 would give 1 + 0.898 + 0.807 + 0.725 = 3.43 at k = 3);
    past k = 5 the last step's rate 0.02 / 0.17 = 0.1176."""
    for k, tau in ((2, 2.58), (3, 2.82), (5, 3.01)):
        r = evaluate_design(draft=f"mtp:{k}", **KW)
        assert (r["k"], r["tau"]) == (k, pytest.approx(tau, rel=1e-12))
    r = evaluate_design(draft="mtp:6", **KW)
    assert r["tau"] == pytest.approx(3.01 + 0.02 * (0.02 / 0.17), rel=1e-9)
    auto = evaluate_design(draft="mtp", **KW)               # k = auto within the published depth
    assert 1 <= auto["k"] <= 5
    assert auto["spec_ms_per_token"] <= min(evaluate_design(draft=f"mtp:{k}", **KW)["spec_ms_per_token"]
                                            for k in range(1, 6)) * (1 + 1e-12)


def test_mtp_in_a_study_and_a_config_json(tmp_path, db):
    """A study's draft list takes mtp:N; a Hugging Face config.json's num_nextn_predict_layers sets
    mtp_layers (GLM-4.5-Air's: 1)."""
    from dse.evaluation.designs import evaluate_study, metric_table
    from dse.study import parse_study
    s = {"name": "s", "workload": {"target": "deepseek-v3", "draft": ["none", "mtp:3"], "dtype": "fp8", "batch": 1,
                                   "prompt_tokens": 128, "output_tokens": 128, "k": 3},
         "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {"device": "b200", "chips": 8}}}
    st = parse_study(s, "s.yaml", db)
    d, m = evaluate_study(st, {"draft": np.array(["none", "mtp:3"])}, 2, db, st.tech)
    cols = metric_table(d, m)
    one = evaluate_design(draft="mtp:3", **KW)
    assert cols["tau"][1] == pytest.approx(one["tau"], rel=1e-12)
    assert cols["spec_ms_per_token"][1] == pytest.approx(one["spec_ms_per_token"], rel=1e-9)
    import json
    cfg = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096,
           "num_hidden_layers": 46, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
           "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 128, "n_shared_experts": 1,
           "num_experts_per_tok": 8, "first_k_dense_replace": 1, "vocab_size": 151552, "num_nextn_predict_layers": 1}
    (tmp_path / "glm").mkdir()
    (tmp_path / "glm" / "config.json").write_text(json.dumps(cfg))
    glm = db.model(str(tmp_path / "glm" / "config.json"))
    assert glm.mtp_layers == 1 and parse_drafter("mtp", glm, db).kind == "mtp"
