"""dse.api: one design from names and numbers, the glue between the catalog and the model.

Numbers are the database's (hardware_db/devices/h100-sxm.yaml: NVIDIA H100 SXM datasheet,
"80 GB" of HBM3 = 80 GiB (vendors size DRAM in binary units), 3.35 TB/s, 989.4 dense BF16
TFLOP/s, 1978.9 FP8; runtimes/graphs.yaml: 6.5 us per kernel, 8 kernels per layer, 38 us per
step, 100 us per speculative iteration, 2.4 ms per request, roofline p = 2, 5% reserve).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse.api import apply_overrides, evaluate_design, hardware_arrays
from dse.catalog.database import load_database
from dse.errors import SpecError

DB = load_database()


def one(a) -> float:
    """The value of a length-1 (or 0-d) array."""
    arr = np.asarray(a, dtype=np.float64).reshape(-1)
    assert arr.shape == (1,)
    return float(arr[0])


def test_hardware_arrays_are_the_device_in_si_with_the_runtimes_fixed_costs():
    dev, rt = DB.device("h100-sxm"), DB.runtime("graphs")
    hw = hardware_arrays(dev, rt, 2, "fp8")
    assert hw.chips.tolist() == [2]
    assert one(hw.capacity_bytes) == 80 * 2**30
    assert one(hw.peak_attention_flop_s) == pytest.approx(989.4e12, rel=1e-12)   # a 16-bit KV cache by default
    assert one(hw.mem_bw_bytes_s) == pytest.approx(3.35e12, rel=1e-12)
    assert one(hw.peak_flop_s) == pytest.approx(1978.9e12, rel=1e-12)        # fp8 is W8A8
    assert one(hardware_arrays(dev, rt, 1, "int8").peak_flop_s) == pytest.approx(989.4e12, rel=1e-12)  # W8A16
    assert one(hw.link_bw_bytes_s) == 900e9 and one(hw.link_latency_s) == pytest.approx(0.44e-6)
    assert one(hw.kernel_launch_s) == pytest.approx(6.5e-6) and one(hw.kernels_per_layer) == 8
    assert one(hw.step_overhead_s) == pytest.approx(38e-6) and one(hw.spec_overhead_s) == pytest.approx(100e-6)
    assert one(hw.request_overhead_s) == pytest.approx(2.4e-3) and one(hw.roofline_p) == 2.0
    assert one(hw.link_efficiency) == 0.82        # the nvlink class (hardware_db/technology/links.yaml)
    assert one(hw.memory_reserve_fraction) == 0.05
    assert one(hw.mem_efficiency) == 0.83 and one(hw.compute_efficiency) == 0.66


def test_set_routes_device_and_runtime_fields_and_device_costs_override_the_runtimes():
    dev, rt = apply_overrides(DB.device("h100-sxm"), DB.runtime("graphs"),
                              {"mem_bw_tb_s": "4", "kernel_launch_us": "10", "spec_overhead_us": "50"})
    assert dev.mem_bw_bytes_s == 4e12
    assert dev.kernel_launch_s == pytest.approx(10e-6) and rt.kernel_launch_s == pytest.approx(6.5e-6)
    assert rt.spec_overhead_s == pytest.approx(50e-6)
    hw = hardware_arrays(dev, rt, 1, "bf16")
    assert one(hw.kernel_launch_s) == pytest.approx(10e-6)        # the device's own, not the runtime's


def test_set_unknown_or_out_of_range_field():
    with pytest.raises(SpecError) as e:
        apply_overrides(DB.device("h100-sxm"), DB.runtime("graphs"), {"mem_bw_tbs": "4"})
    assert str(e.value).startswith("--set mem_bw_tbs = '4': unknown field; did you mean 'mem_bw_tb_s'? (allowed: ")
    with pytest.raises(SpecError) as e:
        apply_overrides(DB.device("h100-sxm"), DB.runtime("graphs"), {"mem_efficiency": "1.5"})
    assert str(e.value) == "--set: mem_efficiency = 1.5: expected a number in (0, 1]"


def test_memory_bandwidth_override_scales_the_memory_bound_baseline():
    """Batch-1 decode of an 8B model is memory-bound: the variable part scales as 1/bandwidth."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", runtime="graphs")
    a = evaluate_design(**kw)
    b = evaluate_design(**kw, set_fields={"mem_bw_tb_s": 6.7})      # 2x the 3.35 TB/s
    fixed = evaluate_design(**kw, set_fields={"mem_bw_tb_s": 1e5})["baseline_ms_per_token"]
    assert a["baseline_bound"] == "memory"
    assert (b["baseline_ms_per_token"] - fixed) == pytest.approx((a["baseline_ms_per_token"] - fixed) / 2, rel=0.02)


def test_cost_and_power_follow_overrides_though_computed_once_per_part():
    """A known part's cost and power are cached per (technology, device spec): an override is
    another spec, so it gets its own numbers, and the plain part gets its own back."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", runtime="graphs")
    a = evaluate_design(**kw)
    b = evaluate_design(**kw, set_fields={"mem_bw_tb_s": 6.7})
    c = evaluate_design(**kw, chips=2)
    assert b["power_w"] > a["power_w"] and b["cost_usd"] == a["cost_usd"]      # memory energy per bit
    assert (c["cost_usd"], c["power_w"]) == pytest.approx((2 * a["cost_usd"], 2 * a["power_w"]), rel=1e-12)
    assert evaluate_design(**kw)["power_w"] == a["power_w"] == pytest.approx(586.67, abs=0.01)


def test_record_describes_the_run_and_nulls_what_is_undefined():
    r = evaluate_design(hw="l4", target="llama-3.1-70b", draft="llama-3.2-1b", alpha=0.8, k=4, batch=2,
                        prompt=100, output=50, temperature=0.5)
    assert r["fits"] is False
    assert r["spec_ms_per_token"] is None and r["speedup"] is None and r["baseline_bound"] is None
    assert r["memory_capacity_gb"] == 24 * 2**30 / 1e9              # the L4's "24 GB" of GDDR6 is 24 GiB
    assert math.isfinite(r["memory_shortfall_gb"]) and r["memory_shortfall_gb"] > 0
    assert (r["hw"], r["chips"], r["target"], r["draft"], r["draft_hw"], r["draft_chips"]) == \
        ("l4", 1, "llama-3.1-70b", "llama-3.2-1b", None, None)
    assert (r["batch"], r["prompt_tokens"], r["output_tokens"], r["temperature"], r["k"], r["k_mode"]) == \
        (2, 100, 50, 0.5, 4, "fixed")
    assert r["alpha_meaning"] == "i.i.d. conditional per-token acceptance rate (Leviathan et al. 2023)"
    assert r["acceptance"] == "alpha=0.8 (i.i.d. conditional per token)"


def test_draft_chip_link_is_the_slower_end():
    """h100 (900 GB/s) + l4 (64 GB/s): token ids cross at 64 GB/s plus l4's 3 us latency (its pcie class,
    hardware_db/technology/links.yaml)."""
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", draft_hw="l4", alpha=0.8, k=4)
    assert r["draft_hw"] == "l4" and r["draft_chips"] == 1
    # greedy (T = 0): k draft token ids (4 B) go to the target and 1 bonus id comes back, each a message
    assert r["link_ms_per_iter"] == pytest.approx(
        (2 * 3e-6 + (4 * 4 + 1 * 4) / 64e9) * 1e3, rel=0.05)


@pytest.mark.parametrize("bad, field", [
    (dict(chips=0), "--chips"), (dict(batch=1.5), "--batch"), (dict(prompt=-1), "--prompt"),
    (dict(dtype="fp6"), "--dtype"), (dict(temperature=-1.0), "--temperature"), (dict(tree_nodes=True), "--tree-nodes"),
])
def test_bad_numbers_name_their_option(bad, field):
    with pytest.raises(SpecError) as e:
        evaluate_design(hw="h100-sxm", target="llama-3.1-8b", **bad)
    assert str(e.value).startswith(f"{field} = ")


def test_one_design_is_the_vector_model_on_length_one_arrays():
    """The same numbers as a study row of the same design (evaluation is one code path)."""
    r = evaluate_design(hw="h200", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
    assert np.isclose(r["spec_ms_per_token"] * r["speedup"], r["baseline_ms_per_token"], rtol=1e-12)
    assert np.isclose(r["tokens_per_s"], 1e3 / r["spec_ms_per_token"], rtol=1e-12)


def test_draft_chip_needs_a_link_at_both_ends_as_in_studies():
    """jetson-agx-orin has no scale-up link (link_bw_gb_s = 0): the l4 draft chip cannot reach it."""
    with pytest.raises(SpecError) as e:
        evaluate_design(hw="jetson-agx-orin", target="llama-3.2-1b", draft="llama-3.2-1b", draft_hw="l4", alpha=0.8)
    assert str(e.value) == ("--draft-hw = 'l4': jetson-agx-orin has no link (link_bw_gb_s = 0) between the target "
                            "and the draft chip")


def test_baseline_anchor_scales_every_fixed_cost_by_one_factor():
    """T = T_var + s * T_fixed; s = (X - T_var) / T_fixed (api.anchor_to_baseline), with T_var the
    step without fixed costs and T_fixed the rest; the spec overhead (graphs: 100 us) scales too."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4, runtime="graphs")
    plain = evaluate_design(**kw)
    var = evaluate_design(**kw, set_fields={"kernel_launch_us": 0, "step_overhead_us": 0})["baseline_ms_per_token"]
    fixed = plain["baseline_ms_per_token"] - var
    s = (12.0 - var) / fixed
    a = evaluate_design(**kw, baseline_ms=12.0)
    assert a["baseline_ms_per_token"] == pytest.approx(12.0, rel=1e-9)
    assert a["anchor"] == {"scaled": ["kernel_launch_us", "step_overhead_us", "sequence_overhead_us",
                                      "spec_overhead_us", "draft_step_overhead_us"],
                           "factor": pytest.approx(s, rel=1e-9), "baseline_ms": 12.0}
    overhead = a["iter_ms"] - a["draft_ms_per_iter"] - a["verify_ms_per_iter"] - a["link_ms_per_iter"]
    # the verification's sampling (2 x 5 positions x 128,256 logits x 4 B at 3.35 TB/s x 0.83) is
    # memory traffic, not a fixed cost: it does not scale; nor would the unoverlapped host work
    # (spec_schedule_us, 0 under graphs)
    assert overhead == pytest.approx(0.100 * s + 2 * 5 * 128256 * 4 / (3.35e12 * 0.83) * 1e3, rel=1e-9)
    assert plain["anchor"] is None
    with pytest.raises(SpecError) as e:
        evaluate_design(**kw, baseline_ms=var * 0.9)
    assert str(e.value) == (f"--baseline-ms = {var * 0.9 * 1e-3 * 1e3!r}: expected more than {var:.3f} ms, the "
                            "model's time without fixed costs at these efficiencies (lower mem_efficiency with "
                            "--set instead)")
    with pytest.raises(SpecError, match=r"^--baseline-ms = 0.0: expected a number in \(0, inf\)$"):
        evaluate_design(**kw, baseline_ms=0.0)


def test_record_echoes_what_was_evaluated():
    r = evaluate_design(hw="h200", target="llama-3.1-8b", draft="llama-3.2-1b", tau=3.0, k=4, dtype="fp8",
                        overlap=False)
    assert (r["runtime"], r["dtype"], r["kv_dtype"], r["overlap"], r["k_mode"]) == ("graphs", "fp8", "bf16", False,
                                                                                    "fixed")    # KV 16-bit by default
    assert r["acceptance"] == "tau=3 (given)"
    assert r["alpha_meaning"] == "i.i.d. rate that gives the same tau at this k (input was tau)"
    r = evaluate_design(hw="h200", target="llama-3.1-8b", draft="llama-3.2-1b", acceptance="0.9,0.8", dtype="fp8",
                        kv_dtype="fp8")
    assert (r["kv_dtype"], r["k_mode"]) == ("fp8", "auto")
    assert r["k"] in (0, 1, 2)                                         # auto, at most one rate per position
    assert r["alpha_meaning"] == "i.i.d. rate that gives the same tau at this k (input was per-position rates)"
    r = evaluate_design(hw="h200", target="llama-3.1-8b")
    assert (r["draft"], r["acceptance"], r["alpha_meaning"], r["k"], r["k_mode"]) == ("none", None, None, 0, "auto")
    assert r["speedup"] == 1.0 and r["tau"] == 1.0
    r = evaluate_design(hw="h200", target="llama-3.1-8b", draft="medusa:3", alpha=0.7)
    assert 1 <= r["k"] <= 3                                            # k auto never beyond the heads
    r = evaluate_design(hw="h200", target="llama-3.1-8b", draft="eagle", rank_acceptance="0.6,0.2", tree_nodes=8,
                        k=4)
    assert r["alpha_meaning"] == "none: a tree's tau maps to no single chain alpha"
    assert r["acceptance"] == "acceptance per rank=0.6,0.2"


@pytest.mark.parametrize("kw, message", [
    (dict(hw="jetson-agx-orin", target="llama-3.2-1b", chips=2),
     "--chips = 2: jetson-agx-orin has no scale-up link (link_bw_gb_s = 0); use 1"),
    (dict(target="eagle-llama3-8b"),
     "--target = 'eagle-llama3-8b': eagle-llama3-8b is a eagle-head, not a model to serve"),
    (dict(draft="llama-3.2-1b", alpha=0.8, datastore_gb=5.0),
     "--datastore-gb = 5.0: a datastore belongs to a retrieval draft (--draft retrieval or ngram)"),
])
def test_refusals_name_the_option(kw, message):
    args = {"hw": "h200", "target": "llama-3.1-8b", **kw}
    with pytest.raises(SpecError) as e:
        evaluate_design(**args)
    assert str(e.value) == message


@pytest.mark.parametrize("hw, power, basis, tdp", [
    # H100 SXM: the energy model's 586.67 W a chip (worked in tests/model/test_technology.py), x 2;
    # its vendor TDP 700 W x 2 rides along
    ("h100-sxm", 2 * 586.67, "estimate", 2 * 700.0),
    # TPU v4: its node is outside the technology tables, so the vendor TDP 192 W x 2 stands in
    ("tpu-v4", 2 * 192.0, "tdp", 2 * 192.0),
])
def test_eval_power_of_known_parts_and_its_basis(hw, power, basis, tdp):
    r = evaluate_design(hw=hw, chips=2, target="llama-3.1-8b", draft="none")
    assert r["power_w"] == pytest.approx(power, rel=1e-6)
    assert (r["power_basis"], r["tdp_w"]) == (basis, tdp)
