"""Speculative accounting (MODEL.md section 3): identities and the properties issue #2 names."""

import numpy as np
import pytest

from dse.api import evaluate_design
from dse.model import specdec


def test_tau_iid_by_hand():
    # alpha 0.8, k 4: (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616
    assert specdec.tau_iid(0.8, 4) == pytest.approx(3.3616)
    assert specdec.tau_iid(1.0, 4) == 5.0          # tau = k+1 at alpha = 1
    assert specdec.tau_iid(0.0, 4) == 1.0


def test_per_position_tau_by_hand():
    # 1 + 0.9 + 0.9*0.5 + 0.9*0.5*0.5 = 2.575; p_all = 0.225
    tau, p = specdec.tokens_per_iteration(np.array([0.9, 0.5, 0.5]), np.int64(3))
    assert tau == pytest.approx(2.575)
    assert p == pytest.approx(0.225)


def test_implied_alpha_inverts_tau():
    a = specdec.implied_alpha(np.array([3.3616]), np.array([4]))
    assert a[0] == pytest.approx(0.8, abs=1e-9)


@pytest.mark.parametrize("alpha,k", [(0.6, 2), (0.8, 4), (0.9, 6), (0.95, 8)])
def test_leviathan_theorem_with_ideal_hardware(ideal, db, alpha, k):
    # Zero overheads, efficiency 1, ample compute (1e6 TFLOP/s), memory-bound steps: speedup equals
    # Leviathan et al. 2023 Theorem 3.8, (1 - a^(k+1)) / ((1 - a)(k*c + 1)), within 0.5%.
    # c is worked out here from bytes, not read from the model: with memory-bound steps on one
    # device, c = bytes of a draft step / bytes of a target step. Prompt 16, output 16 -> mean
    # context S = 24; a decode step reads S and writes 1 token of KV (bf16).
    from dse.model.transformer import kv_elems_per_token_per_layer, lm_head_params, non_embedding_params

    def step_bytes(m):
        weights = (non_embedding_params(m) + lm_head_params(m)) * 2
        return weights + 25 * m.num_layers * kv_elems_per_token_per_layer(m) * 2

    c = step_bytes(db.model("llama-3.2-1b")) / step_bytes(db.model("llama-3.1-8b"))
    assert c == pytest.approx(0.1653, abs=1e-3)        # 2.47 GB / 15.01 GB
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=alpha, k=k,
                        prompt=16, output=16, set_fields={**ideal, "peak_tflops_bf16": 1e6})
    assert r["baseline_bound"] == r["verify_bound"] == r["draft_bound"] == "memory"
    leviathan = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
    assert r["speedup"] == pytest.approx(leviathan, rel=0.005)


def test_verify_costs_about_one_decode_step_70b_fp8_h100():
    # batch 1, k+1 = 5 tokens, Llama-3.1-70B fp8 on one H100 (fits: 70.6 GB of weights)
    base = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8")
    spec = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b",
                           alpha=0.8, k=4)
    assert base["fits"] and spec["fits"]
    assert spec["verify_ms_per_iter"] == pytest.approx(base["baseline_ms_per_token"], rel=0.10)


def test_speedup_never_exceeds_bound_when_verify_at_least_baseline():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        r = evaluate_design(hw=str(rng.choice(["h100-sxm", "a100-80gb", "l40s", "mi300x"])),
                            target="llama-3.1-8b", draft=str(rng.choice(["llama-3.2-1b", "llama-3.2-3b", "eagle",
                                                                          "ngram"])),
                            alpha=float(rng.uniform(0.3, 1.0)), k=int(rng.integers(1, 9)),
                            batch=int(rng.choice([1, 4, 32, 128])), prompt=int(rng.integers(16, 4096)))
        if r["fits"] and r["verify_ms_per_iter"] >= r["baseline_ms_per_token"]:
            checked += 1
            assert r["speedup"] <= r["speedup_bound"] * (1 + 1e-12)
            # and the bound is Leviathan's tau / (1 + k*c) (no overlap here)
            if r["k"]:
                assert r["speedup_bound"] == pytest.approx(r["tau"] / (1 + r["k"] * r["draft_cost_ratio"]))
    assert checked > 30


def test_speedup_falls_with_batch_and_loses_at_1024():
    # Llama-3.1-8B + Llama-3.2-1B on H100, alpha 0.8, k 4, 128-token prompt, 128 output tokens
    s = [evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4,
                         batch=b, prompt=128, output=128)["speedup"] for b in (1, 16, 64, 256, 1024)]
    assert all(a > b for a, b in zip(s, s[1:])), s
    assert s[-1] < 1.0


def test_ngram_adds_no_memory():
    plain = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    ngram = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="ngram", alpha=0.5)
    assert ngram["memory_required_gb"] == plain["memory_required_gb"]
    assert ngram["draft_memory_required_gb"] == 0


@pytest.mark.parametrize("hw,fits", [("h100-sxm", False), ("h200", False), ("b200", True), ("mi300x", True)])
def test_70b_bf16_plus_1b_draft_capacity(hw, fits):
    # hardware_db/reference/hardware.md section 4: 70B + 1B bf16 with 8k-token caches = 146.5 GB; the
    # H200's "141 GB" is 141 GiB = 151.4e9 bytes, 95% of it 143.8e9: no fit; B200 192 GiB fits
    r = evaluate_design(hw=hw, target="llama-3.1-70b", draft="llama-3.2-1b", alpha=0.8, k=4,
                        prompt=8192 - 128, output=128)
    assert r["fits"] is fits
    if not fits:
        assert r["memory_shortfall_gb"] > 0 and r["spec_ms_per_token"] is None
    else:
        assert r["memory_shortfall_gb"] == 0 and r["spec_ms_per_token"] > 0


def test_fewer_layers_draft_faster(tmp_path):
    # Two drafts with the same parameter count (same layers*width^2 budget): 4 layers of d=2048
    # against 16 layers of d=1024 with 4x the FFN... built here as files with equal totals.
    # (family Llama-3.2: files of the target's tokenizer group, hardware_db/acceptance/families.yaml)
    wide = dict(schema_version=1, name="wide", family="Llama-3.2", num_layers=4, hidden_size=2048,
                num_attention_heads=16, num_kv_heads=16, head_dim=128, intermediate_size=8192, vocab_size=32000)
    deep = dict(wide, name="deep", num_layers=16, hidden_size=1024, num_attention_heads=8, num_kv_heads=8,
                intermediate_size=4096, vocab_size=64000)
    import yaml

    from dse.catalog.specs import ModelSpec, build
    from dse.model.transformer import total_params
    for spec in (wide, deep):
        (tmp_path / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec))
    pw = total_params(build(ModelSpec, wide, None))
    pd_ = total_params(build(ModelSpec, deep, None))
    assert pw == pytest.approx(pd_, rel=0.01)
    t = {n: evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft=str(tmp_path / f"{n}.yaml"),
                            alpha=0.8, k=4)["draft_ms_per_iter"] for n in ("wide", "deep")}
    assert t["wide"] < t["deep"]


def test_k_auto_picks_the_best_k():
    auto = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.8)
    each = [evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.8,
                            k=k)["spec_ms_per_token"] for k in range(1, 9)]
    assert auto["spec_ms_per_token"] == pytest.approx(min(each))
    assert auto["k"] == int(np.argmin(each)) + 1


def test_draft_chip_link_and_overlap():
    serial = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.8,
                             k=4, draft_hw="l4")
    over = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.8,
                           k=4, draft_hw="l4", overlap=True)
    hot = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.8,
                          k=4, draft_hw="l4", temperature=1.0)
    assert serial["link_ms_per_iter"] > 0
    assert hot["link_ms_per_iter"] > serial["link_ms_per_iter"]      # draft probabilities cross the link
    assert over["spec_ms_per_token"] < serial["spec_ms_per_token"]
    # the draft's weights moved off the target chip
    assert serial["memory_required_gb"] < evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8",
                                                          draft="llama-3.2-1b", alpha=0.8, k=4)["memory_required_gb"]


def test_given_tau_and_per_position_report_their_alpha():
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", tau=3.3616, k=4)
    assert r["tau"] == pytest.approx(3.3616) and r["alpha"] == pytest.approx(0.8, abs=1e-6)
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", acceptance="0.9,0.5,0.5", k=3)
    assert r["tau"] == pytest.approx(2.575)


def test_tree_verify_counts_nodes():
    chain = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, k=4)
    tree = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, k=4, tree_nodes=16)
    assert tree["tau"] > chain["tau"]
    assert tree["verify_arithmetic_intensity"] > chain["verify_arithmetic_intensity"]


def test_k_auto_switches_speculation_off_when_it_loses():
    # batch 1024: every k loses to plain decoding (test above), so auto picks k = 0
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, batch=1024,
                        prompt=128, output=128)
    assert r["k"] == 0 and r["speedup"] == 1.0 and r["tau"] == 1.0
    assert r["spec_ms_per_token"] == r["baseline_ms_per_token"] and r["draft_ms_per_iter"] == 0
