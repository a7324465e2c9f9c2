"""Issue 17, the software stack as a design variable: fixed costs belong to a runtime, not to
silicon; kernels per layer follow the layer's architecture; overhead_ms_per_token says how much
of a token is the stack. Every number is worked out by hand in the comments, from the runtime
YAMLs (graphs: 6.5 us per kernel, 8 kernels per dense GQA layer, +2.8 per MLA layer, +5 per
routed-MoE layer, +3 for shared experts, 38 us per step, 100 us per speculative iteration)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dse.api import evaluate_design
from dse.errors import SpecError, SpecErrors
from dse.evaluation.designs import evaluate_study, metric_table
from dse.model.arrays import DesignBatch, HardwareArrays
from dse.model.evaluate import evaluate
from dse.model.roofline import kernels_per_step, step_cost
from dse.model.transformer import step_kwargs
from dse.study import parse_study
from dse.workload.spec import Workload, make_acceptance, parse_drafter

#: the quickstart's workload (studies/quickstart.yaml)
QUICK = {"target": "llama-3.1-70b", "draft": "llama-3.2-1b", "dtype": "fp8", "kv_dtype": "fp8", "batch": 1,
         "prompt_tokens": 2048, "output_tokens": 256, "acceptance": {"alpha": 0.8}, "k": "auto"}
#: the quickstart front's best design as the issue read it (trial 9 of the README's front), with the
#: efficiencies synthesised chips had then (0.8, 0.7)
BEST = dict(process_node="n5", peak_tflops=1047, memory="hbm4", memory_stacks=9, stack_height=8, chips=1,
            mem_efficiency=0.8, compute_efficiency=0.7)


def _synth(db, chip: dict, workload: dict = QUICK, n_sram=(381.1,)) -> dict:
    """Evaluate a synthesised chip through a study (sram_mb searched so the study has a knob)."""
    s = {"name": "s", "workload": workload, "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {**chip, "sram_mb": [*n_sram, 1e5]}}}
    st = parse_study(s, "s.yaml", db)
    d, m = evaluate_study(st, {"target_chip_sram_mb": np.array(n_sram)}, len(n_sram), db, st.tech)
    return {k: v[0] for k, v in metric_table(d, m).items()}


# ---- kernels per layer by architecture ----------------------------------------------------

@pytest.mark.parametrize("model, kernels", [
    ("llama-3.1-70b", 80 * 8),                        # 80 dense GQA layers x 8 = 640
    ("mixtral-8x7b", 32 * (8 + 5)),                   # 32 routed-MoE GQA layers x 13 = 416
    ("qwen3-235b-a22b", 94 * (8 + 5)),                # 94 MoE layers, no shared expert: 1,222
    # DeepSeek-V3: 3 dense MLA layers x (8 + 2.8) = 32.4 and 58 MoE MLA layers with a shared
    # expert x (8 + 2.8 + 5 + 3) = 1,090.4: 1,122.8 kernels
    ("deepseek-v3", 3 * 10.8 + 58 * 18.8),
])
def test_kernels_follow_the_layer_architecture(db, model, kernels):
    from dse.api import hardware_arrays
    hw = hardware_arrays(db.device("h200"), db.runtime("graphs"), 8, "fp8")
    assert float(kernels_per_step(db.model(model), hw)[0]) == pytest.approx(kernels, rel=1e-12)


def test_deepseek_step_pays_its_kernels(db, ideal):
    # the fixed part of a DeepSeek-V3 decode step on 8 x h200: 1,122.8 kernels x 6.5 us + 38 us
    # = 7,336.2 us (it was 61 x 8 x 6.5 + 38 = 3,210 us with one count for every layer)
    r = evaluate_design(hw="h200", chips=8, target="deepseek-v3", dtype="fp8-head16", prompt=128, output=256)
    assert r["overhead_ms_per_token"] == pytest.approx((1122.8 * 6.5 + 38) * 1e-3, rel=1e-9)
    # a runtime that counts every layer as dense GQA (the extras at 0) gives back the old fixed cost
    flat = evaluate_design(hw="h200", chips=8, target="deepseek-v3", dtype="fp8-head16", prompt=128, output=256,
                           set_fields={"mla_extra_kernels": 0, "moe_extra_kernels": 0, "shared_expert_kernels": 0})
    assert flat["overhead_ms_per_token"] == pytest.approx((61 * 8 * 6.5 + 38) * 1e-3, rel=1e-9)
    assert r["baseline_ms_per_token"] - flat["baseline_ms_per_token"] == pytest.approx(
        (1122.8 - 488) * 6.5e-3, rel=1e-9)


# ---- overhead_ms_per_token: the numbers --------------------------------------------

def test_fixed_costs_are_63_percent_of_the_quickstart_best_design(db):
    # alpha 0.8, k = 6 chosen: tau = (1 - 0.8^7)/0.2 = 3.951424. Fixed costs of one iteration:
    # 6 draft steps of Llama-3.2-1B, (16 x 8 x 6.5 + 38) us = 870 us each; the verify pass of
    # Llama-3.1-70B, 80 x 8 x 6.5 + 38 = 4,198 us; 100 us per iteration: 5,220 + 4,198 + 100 =
    # 9,518 us over 3.951424 tokens = 2.40875 ms of the design's 3.7994 ms/token: 63.4%
    r = _synth(db, BEST)
    assert r["k"] == 6 and r["tau"] == pytest.approx(3.951424, rel=1e-12)
    assert r["overhead_ms_per_token"] == pytest.approx(9.518 / 3.951424, rel=1e-12)
    assert r["spec_ms_per_token"] == pytest.approx(3.7995, abs=5e-5)
    assert r["overhead_ms_per_token"] / r["spec_ms_per_token"] == pytest.approx(0.634, abs=5e-4)
    # the dataflow runtime (no launches, no per-step or per-iteration cost): no overhead, 1.326 ms at
    # k = 8; with drafts this cheap k = auto goes on to k = 10 (issue 17: up to 16): 1.313 ms (the verification's
    # sampling, dse.model.spec_iteration, adds 0.1 us a token to both)
    d8 = _synth(db, {**BEST, "runtime": "dataflow"}, workload={**QUICK, "k_max": 8})
    assert d8["overhead_ms_per_token"] == 0.0 and d8["spec_ms_per_token"] == pytest.approx(1.3263, abs=5e-5)
    d = _synth(db, {**BEST, "runtime": "dataflow"})
    assert d["k"] == 10 and d["spec_ms_per_token"] == pytest.approx(1.3131, abs=5e-5)


def _chip(db, bw_tb_s: float, runtime: str) -> HardwareArrays:
    """The quickstart's best chip (1,047 TFLOP/s BF16, FP8 2x, eta 0.8 / 0.7) at a bandwidth, with
    memory to spare: only bandwidth and the stack differ between two of them."""
    r = db.runtime(runtime)
    return HardwareArrays(chips=1, capacity_bytes=1e12, mem_bw_bytes_s=bw_tb_s * 1e12, peak_flop_s=2094e12,
                          peak_attention_flop_s=2094e12, mem_efficiency=0.8, compute_efficiency=0.7,
                          link_bw_bytes_s=0.0, link_latency_s=0.0, memory_reserve_fraction=0.05,
                          **{f: getattr(r, f) for f in ("kernel_launch_s", "kernels_per_layer", "step_overhead_s",
                                                        "spec_overhead_s", "ngram_draft_s", "sequence_overhead_s",
                                                        "request_overhead_s", "roofline_p")})


def test_the_stack_shrinks_a_bandwidth_advantage(db):
    """An 18 TB/s chip against a 2 TB/s one (9x the bandwidth) on the quickstart workload: 3.73x
    faster under the GPU runtime's fixed costs (3.799 against 14.161 ms/token: the fixed costs
    are the same on both), 8.72x with none (1.326 against 11.560), close to the 9x of a
    memory-bound step. The issue quoted 8.3x and 3.7x (with k = auto up to 8, as here; up to 16
    the 2 TB/s chip takes k = 9 under the GPU runtime, 3.71x)."""
    tgt = db.model("llama-3.1-70b")
    w = Workload(target=tgt, drafter=parse_drafter("llama-3.2-1b", tgt, db), acceptance=make_acceptance(alpha=0.8),
                 dtype="fp8", kv_dtype="fp8", k_max=8)
    out = {}
    for rt in ("graphs", "dataflow"):
        t = {}
        for bw in (18.0, 2.0):
            h = _chip(db, bw, rt)
            m = evaluate(DesignBatch(target=h, draft=h, draft_on_chip=False, draft_link_bw_bytes_s=0.0,
                                     draft_link_latency_s=0.0, batch=1, prompt_tokens=2048, output_tokens=256, k=0), w)
            t[bw] = float(m.spec_s_per_token[0])
        out[rt] = t[2.0] / t[18.0]
    assert out["graphs"] == pytest.approx(3.727, abs=1e-3)
    assert out["dataflow"] == pytest.approx(8.717, abs=1e-3)


def test_a_1b_draft_step_is_floored_by_the_stack_not_the_chip(db):
    # Llama-3.2-1B (16 layers) on a chip with unbounded bandwidth and compute: graphs 16 x 8 x 6.5
    # + 38 = 870 us, whatever the silicon; the dataflow runtime: nothing
    m = db.model("llama-3.2-1b")
    for rt, want in (("graphs", 870e-6), ("dataflow", 0.0)):
        h = _chip(db, 1e9, rt)
        h = dataclasses.replace(h, peak_flop_s=np.array([1e30]), peak_attention_flop_s=np.array([1e30]))
        s = step_cost(m, h, batch=1.0, q=1.0, context=2176.0, **step_kwargs("fp8", "fp8"))
        assert float(s.time_s[0]) == pytest.approx(want, abs=1e-9)
        assert float(s.t_fixed_s[0]) == pytest.approx(want, abs=1e-12)


def test_overhead_in_eval_text_and_json(db):
    # Llama-3.1-8B + Llama-3.2-1B on an h100-sxm, k = 3 (auto), tau = 1 + 0.8 + 0.64 + 0.512 = 2.952:
    # 3 x 870 + (32 x 8 x 6.5 + 38 = 1,702) + 100 = 4,412 us / 2.952 = 1.49458 ms
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=3)
    assert r["overhead_ms_per_token"] == pytest.approx(4.412 / 2.952, rel=1e-12)
    # plain decoding: one step's fixed costs
    b = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    assert b["overhead_ms_per_token"] == pytest.approx(1.702, rel=1e-12)
    from click.testing import CliRunner

    from dse.cli.commands import main
    out = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                                    "llama-3.2-1b", "--alpha", "0.8", "--k", "3"]).output
    assert "overhead     1.495 ms/token (35%) fixed costs of the graphs runtime" in out


def test_overlapped_drafting_hides_the_draft_s_fixed_costs_with_its_time(db):
    # with --overlap the exposed share of the draft's time carries the same share of its fixed costs
    kw = dict(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", draft_hw="l4", alpha=0.8,
              k=4)
    serial, over = evaluate_design(**kw), evaluate_design(overlap=True, **kw)
    tau = (1 - 0.8 ** 5) / 0.2
    verify_fixed, draft_fixed = 80 * 8 * 6.5e-3 + 0.038, 4 * (16 * 8 * 6.5e-3 + 0.038)
    assert serial["overhead_ms_per_token"] == pytest.approx((verify_fixed + draft_fixed + 0.1) / tau, rel=1e-9)
    # per iteration: 100 us and the verification's sampling, 2 x 5 x 128,256 x 4 B at 2.7805 TB/s
    t_spec = 0.1 + 2 * 5 * 128256 * 4 / (3.35e12 * 0.83) * 1e3
    exposed = over["iter_ms"] - over["verify_ms_per_iter"] - over["link_ms_per_iter"] - t_spec
    share = exposed / over["draft_ms_per_iter"]
    assert 0 < share < 1
    assert over["overhead_ms_per_token"] == pytest.approx((verify_fixed + share * draft_fixed + 0.1) / tau, rel=1e-9)


# ---- the stack as knobs of a synthesised chip ----------------------------------------------

def test_runtime_and_fixed_cost_knobs_of_a_synthesised_chip(db):
    chip = dict(process_node="n5", peak_tflops=1000, memory="hbm3e", memory_stacks=6, stack_height=8, chips=1)
    wl = {**QUICK, "k": 4}
    graphs = _synth(db, chip, wl)
    # the runtime knob: eager's 23.5 us x 30 kernels per layer, 3 ms per step, 1.5 ms per iteration:
    # verify 80 x 30 x 23.5 + 3,000 = 59,400 us; draft 4 x (16 x 30 x 23.5 + 3,000) = 57,120 us;
    # + 1,500 = 118,020 us over tau = (1 - 0.8^5)/0.2 = 3.3616
    tau = (1 - 0.8 ** 5) / 0.2
    eager = _synth(db, {**chip, "runtime": "eager"}, wl)
    assert eager["overhead_ms_per_token"] == pytest.approx(118.02 / tau, rel=1e-12)
    # fixed costs set as knobs win over the runtime's: 2 us per kernel, 10 us per step, 20 us per
    # iteration: verify 80 x 8 x 2 + 10 = 1,290 us, draft 4 x (16 x 8 x 2 + 10) = 1,064 us, + 20
    knobs = _synth(db, {**chip, "kernel_launch_us": 2.0, "step_overhead_us": 10.0, "spec_overhead_us": 20.0}, wl)
    assert knobs["overhead_ms_per_token"] == pytest.approx(2.374 / tau, rel=1e-12)
    # and the rest of the token is the same silicon: spec - overhead agrees to rounding
    for r in (eager, knobs):
        assert r["spec_ms_per_token"] - r["overhead_ms_per_token"] == pytest.approx(
            graphs["spec_ms_per_token"] - graphs["overhead_ms_per_token"], rel=1e-9)


def test_a_study_searches_the_runtime_per_design(db):
    s = {"name": "s", "workload": {**QUICK, "k": 4}, "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": dict(process_node="n5", peak_tflops=1000, memory="hbm3e", memory_stacks=6,
                                       runtime=["graphs", "dataflow"], kernel_launch_us={"low": 0.0, "high": 10.0})}}
    st = parse_study(s, "s.yaml", db)
    assert {k.name for k in st.searched} == {"target_chip_runtime", "target_chip_kernel_launch_us"}
    params = {"target_chip_runtime": np.array(["graphs", "dataflow", "dataflow"]),
              "target_chip_kernel_launch_us": np.array([0.0, 0.0, 6.5])}
    d, m = evaluate_study(st, params, 3, db, st.tech)
    ovh = metric_table(d, m)["overhead_ms_per_token"]
    tau = (1 - 0.8 ** 5) / 0.2
    # graphs with free launches: 4 x 38 + 38 + 100 = 290 us; dataflow: 0; dataflow paying 6.5 us
    # per kernel (1 per layer): 4 x 16 x 6.5 + 80 x 6.5 = 936 us
    np.testing.assert_allclose(ovh, np.array([0.290, 0.0, 0.936]) / tau, rtol=1e-12)


def test_known_parts_keep_their_runtime(db):
    # a device section takes no runtime knobs: one line naming them
    s = {"name": "s", "workload": {"target": "llama-3.1-8b"}, "objectives": [{"metric": "spec_ms_per_token"}],
         "space": {"target_chip": {"device": ["h100-sxm", "h200"], "kernel_launch_us": 1.0}}}
    with pytest.raises((SpecError, SpecErrors), match="known parts keep their runtime"):
        parse_study(s, "s.yaml", db)
    # without workload.runtime each part takes its own default: the wafer-scale Cerebras part's is
    # the compiled dataflow stack (and Groq's, SambaNova's)
    s["space"]["target_chip"] = {"device": ["h100-sxm", "cerebras-wse-3"]}
    st = parse_study(s, "s.yaml", db)
    assert st.runtime is None
    d, m = evaluate_study(st, {"target_chip_device": np.array(["h100-sxm", "cerebras-wse-3"])}, 2, db, st.tech)
    ovh = metric_table(d, m)["overhead_ms_per_token"]
    # (no launches on the wafer; its layer programs' sync, 32 layers x 15.5 us, is the dataflow runtime's cost)
    assert ovh[0] == pytest.approx(1.702, rel=1e-12) and ovh[1] == pytest.approx(32 * 15.5e-3, rel=1e-12)
    assert {db.device(n).default_runtime for n in ("groq-lpu-v1", "sambanova-sn40l")} == {"dataflow"}
    # workload.runtime given: every part takes it
    s["workload"]["runtime"] = "graphs"
    st = parse_study(s, "s.yaml", db)
    d, m = evaluate_study(st, {"target_chip_device": np.array(["h100-sxm", "cerebras-wse-3"])}, 2, db, st.tech)
    np.testing.assert_allclose(metric_table(d, m)["overhead_ms_per_token"], [1.702, 1.702], rtol=1e-12)
