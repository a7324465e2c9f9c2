"""One GEMM at M rows (dse/model/gemm.py) and the fp8 scaling recipes, worked by hand and checked against
NVIDIA AIConfigurator's measured kernels (pypi.org/project/aiconfigurator 0.4.0,
systems/data/h100_sxm/trtllm/1.0.0rc3/gemm_perf.txt, latency in ms per (dtype, m, n, k)); and the two-protocol
all-reduce of the nvlink class against the same package's custom_allreduce_perf.txt."""

from __future__ import annotations

import numpy as np
import pytest

from dse.api import hardware_arrays
from dse.catalog.database import load_database
from dse.model.gemm import RECIPES, gemm_efficiency, gemm_time_s
from dse.model.roofline import allreduce_time_s, protocol_allreduce_time_s
from dse.model.transformer import COMPUTE_EFFICIENCY_FACTOR, WEIGHT_FORMATS, step_kwargs

DB = load_database()
#: an H100 SXM with the constants fitted on the TensorRT-LLM bf16 table (dse/model/gemm.py docstring):
#: 3.2 us fixed, 0.88 of 3.35 TB/s, 0.87 of 989.4 TFLOP/s, p = 2
H100_BF16 = dict(peak_flop_s=989.4e12, mem_bw_bytes_s=3.35e12, compute_efficiency=0.87, mem_efficiency=0.88,
                 kernel_s=3.2e-6, p=2.0)


def test_one_gemm_by_hand():
    """M = 32 rows by Llama-3.1-70B's O projection shard at TP8 (K = 1,024, N = 8,192), bf16:
    F = 2 x 32 x 8,192 x 1,024 = 536,870,912 FLOP: t_c = F / (989.4e12 x 0.87) = 0.623706 us;
    bytes = 8,192 x 1,024 x 2 + 32 x (1,024 + 8,192) x 2 = 16,777,216 + 589,824 = 17,367,040 B:
    t_m = 17,367,040 / (3.35e12 x 0.88) = 5.891126 us; sqrt(t_c^2 + t_m^2) = 5.924050 us, + 3.2 us =
    9.124050 us (the kernel measured 8.500 us: +7.3%). Efficiency F / (P t) = 536,870,912 / (989.4e12 x
    9.124050e-6) = 5.947% of the bf16 peak: a GEMM of a few dozen rows is a memory-bound stream."""
    t = float(gemm_time_s(32, 8192, 1024, **H100_BF16))
    t_c, t_m = 536_870_912 / (989.4e12 * 0.87), 17_367_040 / (3.35e12 * 0.88)
    assert (t_c, t_m) == (pytest.approx(0.623706e-6, rel=1e-5), pytest.approx(5.891126e-6, rel=1e-6))
    assert t == pytest.approx(3.2e-6 + np.hypot(t_c, t_m), rel=1e-12)
    assert t == pytest.approx(9.124050e-6, rel=1e-6)
    assert t / 8.500e-6 - 1 == pytest.approx(0.0734, abs=1e-3)
    assert float(gemm_efficiency(32, 8192, 1024, **H100_BF16)) == pytest.approx(0.05947, abs=1e-5)


@pytest.mark.parametrize("m, measured_us", [(1, 45.7387), (32, 47.0165), (128, 48.5131), (512, 88.6677),
                                            (2048, 340.737)])
def test_the_curve_follows_the_measured_kernel_from_1_to_2048_rows(m, measured_us):
    """An 8,192 x 8,192 bf16 GEMM on an H100 (AIConfigurator's TensorRT-LLM table, the rows quoted):
    flat while it streams its 134 MB of weights (M = 1-128: 45.7-48.5 us), then compute-bound (M = 2,048:
    341 us, 0.81 of the peak). The curve is within 12% at every M (+11.8% at M = 128)."""
    t = float(gemm_time_s(m, 8192, 8192, **H100_BF16))
    assert abs(t / (measured_us * 1e-6) - 1) < 0.12


def test_efficiency_rises_with_rows_and_stays_below_its_ceiling():
    """F / (P t) rises with M and never passes eta_c x the recipe's compute factor (< 1), for a 16-bit and
    both fp8 recipes, over shapes from a TP8 shard to a whole layer."""
    rows = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 65536], dtype=float)
    for n, k in ((1024, 8192), (8192, 1024), (7168, 8192), (28672, 8192)):
        for recipe, peak, wb in (("", 989.4e12, 2.0), ("tensor", 1978.9e12, 1.0), ("block", 1978.9e12, 1.0)):
            kw = dict(H100_BF16, peak_flop_s=peak, weight_bytes=wb, act_bytes=wb, recipe=recipe)
            eta = gemm_efficiency(rows, n, k, **kw)
            assert (np.diff(eta) > 0).all()
            assert (eta < 0.87 * RECIPES[recipe].compute).all() and eta[-1] > 0.8 * 0.87 * RECIPES[recipe].compute


def test_block_scaled_fp8_is_never_faster_than_per_tensor():
    """Same shape, same part: the block recipe's compute (0.91) and streaming (0.845) factors are below the
    per-tensor recipe's, its fixed time the same, so its GEMM takes at least as long at every M."""
    assert RECIPES["block"].compute < RECIPES["tensor"].compute and RECIPES["block"].stream < RECIPES["tensor"].stream
    rows = np.logspace(0, 14, 29, base=2.0)
    for n, k in ((1024, 8192), (8192, 1024), (7168, 8192), (256, 256), (65536, 16384)):
        kw = dict(H100_BF16, peak_flop_s=1978.9e12, weight_bytes=1.0, act_bytes=1.0)
        assert (gemm_time_s(rows, n, k, recipe="block", **kw) >= gemm_time_s(rows, n, k, recipe="tensor", **kw)).all()


def test_the_block_format_and_its_recipe():
    """fp8-block: an fp32 scale per 128 x 128 weights, 1 + 4/16,384 = 1.000244 B a weight (DeepSeek-V3, arXiv
    2412.19437 section 3.3.1), a 16-bit head, compute 0.70 x 0.91 = 0.637 of the 16-bit efficiency, and its
    layers' weights stream at 0.845 of the rate (the 16-bit head at the full one). Llama-3.1-8B, one token,
    on an H100 with unbounded FLOP/s: its layers hold 6,979,321,856 weights and its head 525,336,576 (x 2 B):
    per-tensor (6,979,321,856 + 1,050,673,152) B / (3.35e12 x 0.83) = 2.887968 ms; block-scaled
    (6,979,321,856 x 1.000244 / 0.845 + 1,050,673,152) / 2.7805e12 = 3.349125 ms."""
    import dataclasses

    from dse.model.roofline import step_cost
    f = WEIGHT_FORMATS["fp8-block"]
    assert (f.bytes_per_weight, f.head_bytes, f.compute_dtype, f.recipe) == (1.0 + 4.0 / 16384, 2.0, "fp8", "block")
    assert WEIGHT_FORMATS["fp8"].recipe == WEIGHT_FORMATS["fp8-head16"].recipe == "tensor"
    assert step_kwargs("fp8-block", "bf16")["linear_compute_factor"] == pytest.approx(
        COMPUTE_EFFICIENCY_FACTOR["fp8"] * 0.91, rel=1e-12)
    hw = dataclasses.replace(hardware_arrays(DB.device("h100-sxm"), DB.runtime("graphs"), 1, "fp8"),
                             peak_flop_s=np.array([1e30]), peak_attention_flop_s=np.array([1e30]))
    m = DB.model("llama-3.1-8b")
    lin = {}
    for dt in ("fp8-head16", "fp8-block"):
        c = step_cost(m, hw, batch=1.0, q=1.0, context=0.0, **step_kwargs(dt, "bf16"))
        lin[dt] = float(c.t_memory_s[0]) - 1 * 32 * 2 * 8 * 128 * 2 / (3.35e12 * 0.83)     # less the KV write
    assert lin["fp8-head16"] == pytest.approx((6_979_321_856 + 1_050_673_152) / (3.35e12 * 0.83), rel=1e-9)
    assert lin["fp8-head16"] == pytest.approx(2.887968e-3, rel=1e-6)
    assert lin["fp8-block"] == pytest.approx((6_979_321_856 * (1 + 4 / 16384) / 0.845 + 1_050_673_152)
                                             / (3.35e12 * 0.83), rel=1e-9)
    assert lin["fp8-block"] == pytest.approx(3.349125e-3, rel=1e-6)


# ---- the all-reduce's two protocols -------------------------------------------------------

def _h100(chips=8):
    return hardware_arrays(DB.device("h100-sxm"), DB.runtime("graphs"), chips, "bf16")


@pytest.mark.parametrize("nbytes, want_us, measured_us", [
    (16_384, 6.425481, 4.48416),        # 8,192 fp16 elements: the low-latency protocol
    (2_097_152, 40.141630, 39.50624),   # 1 Mi elements: still the low-latency protocol (the "~39 us")
    (4_194_304, 64.411686, 55.61824),   # 2 Mi elements: the bandwidth protocol
])
def test_h100_tp8_all_reduce_by_hand(nbytes, want_us, measured_us):
    """TP8 on H100s, the nvlink class (links.yaml): the faster of the low-latency protocol, 14 x 0.44 us +
    1.75 x bytes / (0.24 x 450e9), and the bandwidth one, 14 x 3.18 us + 1.75 x bytes / (0.82 x 450e9).
    2 MiB: 6.16 + 33.982 = 40.142 us against 44.52 + 9.946 = 54.466 us; 4 MiB: 6.16 + 67.963 = 74.123 against
    44.52 + 19.892 = 64.412 us. Measured (AIConfigurator, TensorRT-LLM 1.0.0rc3 custom_allreduce_perf.txt,
    AUTO): 39.5 and 55.6 us; one ring at 0.44 us and 0.82 gave 16.1 and 26.0 us."""
    hw = _h100()
    got = float(protocol_allreduce_time_s(nbytes, hw.chips, hw.link_bw_bytes_s, hw.link_latency_s,
                                          hw.link_efficiency, hw.link_ll_efficiency, hw.link_bulk_latency_s)[0])
    ll = 14 * 0.44e-6 + 1.75 * nbytes / (0.24 * 450e9)
    bulk = 14 * 3.18e-6 + 1.75 * nbytes / (0.82 * 450e9)
    assert got == pytest.approx(min(ll, bulk), rel=1e-12) and got == pytest.approx(want_us * 1e-6, rel=1e-6)
    one = float(allreduce_time_s(nbytes, hw.chips, hw.link_bw_bytes_s, hw.link_latency_s, hw.link_efficiency)[0])
    if nbytes > 1e6:            # serving sizes: within 16% of the kernel, where one ring was 2-2.5x fast
        assert abs(got / (measured_us * 1e-6) - 1) < 0.16 and one < 0.5 * measured_us * 1e-6


def test_two_protocols_are_never_slower_than_either_and_one_protocol_is_the_ring():
    """The protocol all-reduce is the lower envelope of its two rings, grows with the message, and is the
    plain ring where a class has one protocol (NaN: ll_efficiency = efficiency, bulk latency = latency)."""
    n = np.logspace(3, 9, 25)
    args = (8.0, 900e9, 0.44e-6, 0.82)
    both = protocol_allreduce_time_s(n, *args, 0.24, 3.18e-6)
    assert (both <= allreduce_time_s(n, 8.0, 900e9, 0.44e-6, 0.24) + 1e-15).all()
    assert (both <= allreduce_time_s(n, 8.0, 900e9, 3.18e-6, 0.82) + 1e-15).all()
    assert (np.diff(both) > 0).all()
    np.testing.assert_array_equal(protocol_allreduce_time_s(n, *args), allreduce_time_s(n, *args))
