"""The fit behind the defaults: :data:`FIT_PARAMETERS` says what each fitted default is fitted on,
:func:`fit` re-derives them from the fit rows of :mod:`.measurements` (relative least squares, values
>= 0; the link, eager, mla, serving, trees and energy stages), so anyone can check that the database
holds what the data give; :func:`stored_values` reads the database's current values, keyed alike
(docs/calibration.md explains the choices).
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import numpy as np

from ..catalog.database import Database, load_database
from ..model.transformer import WEIGHT_FORMATS
from .measurements import Case, cases

#: what each fitted default is fitted on (the row predicates are in :mod:`.measurements`, which gives each row its role)
FIT_PARAMETERS = {
    "fixed+dequant": ("runtimes/gpt-fast.yaml kernel_launch_us, step_overhead_us, int8_stream_factor, "
                      "int4_stream_factor",
                      "the 5 single-GPU gpt-fast A100 rows (Llama-2-7B bf16/int8/int4, Llama-2-70B int8/int4)"),
    "link": ("devices/a100-80gb.yaml link_latency_us",
             "the 3 gpt-fast A100 Llama-2-7B bf16 tensor-parallel rows (TP 2, 4, 8)"),
    "eager": ("runtimes/eager.yaml kernel_launch_us",
              "the Hugging Face transformers eager row (decode_measurements_extra.csv)"),
    "input": ("devices/a100-80gb.yaml mem_efficiency",
              "the STREAM-like row: 1700 GB/s of 2039 GB/s on the same A100s"),
    "mla": ("runtimes/graphs.yaml mla_extra_kernels (gpt-fast, xla: the same by rule), given moe_extra_kernels and "
            "shared_expert_kernels (estimates from the documented kernel sequences)",
            "TensorRT-LLM's DeepSeek-R1 batch-1 row without MTP on 8x B200 (moe:1, decode_measurements_moe.csv)"),
    "serving": ("runtimes/graphs.yaml request_overhead_us, sequence_overhead_us, roofline_p; "
                "dse/model/transformer.py COMPUTE_EFFICIENCY_FACTOR fp8",
                "the TensorRT-LLM Llama-2-7B rows on H100 (fp8) and A100 (fp16): 4 first-token latencies "
                "at batch 1 and 8 large-batch throughputs (serving_measurements_public.csv)"),
    "rocm": ("runtimes/rocm-vllm.yaml kernel_launch_us, sequence_overhead_us",
             "AMD's vLLM 0.10.2 Llama-3.1-70B fp8 batch-1 static batch on 8 MI300X (its level: the fixed cost a "
             "step; serving_measurements_public.csv) and OCI's Llama-3.1-405B fp8 batch sweep 1-256 on 8 MI300X "
             "(its growth with batch, as ratios to its own batch-1 row; serving_load_measurements_public.csv)"),
    "trees": ("runtimes/eager.yaml tree_kernels_per_layer, draft_step_overhead_us",
              "the Spec-Bench A100 Vicuna-7B EAGLE-1 and Medusa-1 tree rows (specdec_measurements_extra.csv)"),
    "sglang": ("runtimes/sglang.yaml spec_schedule_us (every other field the graphs runtime's by rule)",
               "the 4 batch-1 rows of SGLang's EAGLE-3 on Qwen3-30B-A3B over 4 H100s (Tencent/AngelSlim issue 163: a 3-node "
               "tree to a 63-node one; specdec_serving_measurements.csv); held out: the same target on 2 H100s "
               "(sgl-project/SpecForge issue 339), batch 4, and Llama-3.3-70B on 8 H100s (sglang pull 4716)"),
    "vllm": ("runtimes/vllm.yaml spec_schedule_us, draft_step_overhead_us",
             "the 6 rows of vLLM V1's EAGLE-1 and EAGLE-3 chains of K = 2, 4, 6 on Llama-3.1-8B (vllm-project/vllm issue 20780; "
             "specdec_serving_measurements.csv); held out: K = 3, 5, 7 and vllm pull 16035's Llama-3-8B rows"),
    "idle": ("technology/nodes.yaml active_idle_fraction",
             "the 8 ML.ENERGY v2.0 H100 rows paired with v3.0 rows of the same model, GPUs and batch "
             "(Llama-3.1-8B x1, 70B x4; batch 64-512; energy_measurements_public.csv)"),
    "energy": ("technology/nodes.yaml onchip_pj_per_dram_bit, operand_delivery_factor",
               "the ML.ENERGY v3.0 Llama-3.1-8B rows on one H100 below its power limit (measured draw under "
               "95% of its 700 W TDP: batch 8-64; energy_measurements_public.csv)"),
}


def _decode_step_s(design: dict[str, Any], db: Database, overrides: dict[str, float],
                   weight_bw_factor: float) -> float:
    """The autoregressive step of `evaluate` (MODEL.md section 2) with fields overridden and the
    weight-streaming factor given: the same functions `dse eval` uses, one row."""
    from ..api import apply_overrides, hardware_arrays
    from ..model import transformer as tf
    from ..model.roofline import step_cost
    dev = db.device(design["hw"])
    rt = db.runtime(design.get("runtime") or dev.default_runtime)
    dev, rt = apply_overrides(dev, rt, {**design.get("set_fields", {}), **overrides})
    hw = hardware_arrays(dev, rt, design.get("chips", 1), design["dtype"])
    S = design["prompt"] + 0.5 * design["output"]
    cost = step_cost(db.model(design["target"]), hw, batch=1.0, q=1.0, context=S, ep=design.get("ep", 1),
                     **tf.step_kwargs(design["dtype"], design["kv_dtype"], weight_bw_factor))
    return float(cost.time_s[0])


def _nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||A x - b|| with x >= 0, by trying every support (fine for a handful of unknowns)."""
    n = A.shape[1]
    best, best_x = np.inf, np.zeros(n)
    for support in itertools.product((False, True), repeat=n):
        idx = np.flatnonzero(support)
        if idx.size == 0:
            continue
        sol = np.linalg.lstsq(A[:, idx], b, rcond=None)[0]
        if (sol < 0).any():
            continue
        x = np.zeros(n)
        x[idx] = sol
        r = float(np.sum((A @ x - b) ** 2))
        if r < best:
            best, best_x = r, x
    return best_x


def fit(db: Database | None = None) -> dict[str, float]:
    """The fitted defaults, re-derived from their rows (relative least squares, values >= 0).

    Returns display-unit values keyed as ``'<entry>.<field>'`` (e.g. ``'gpt-fast.kernel_launch_us'``,
    ``'COMPUTE_EFFICIENCY_FACTOR.fp8'``). Stage 1 fits the per-kernel and per-step fixed costs of
    the gpt-fast runtime and its int8/int4 weight-streaming factors on the single-GPU rows, with
    mem_efficiency from the database; stage 2 fits the A100 link latency on the Llama-2-7B
    tensor-parallel rows, given stage 1; the eager stage fits eager's per-kernel cost on its row;
    the mla stage the kernels an MLA block adds (graphs runtime) on the DeepSeek row;
    the serving stage (``_fit_serving``) fits the graphs runtime's request and sequence costs,
    roofline p and the fp8 GEMM factor on the TensorRT-LLM 7B rows; the ROCm stage (``_fit_rocm``) the
    rocm-vllm runtime's per-kernel and per-sequence costs on the MI300X rows; the trees stage (``_fit_trees``)
    the eager runtime's tree-verify kernels and draft-step cost on two Spec-Bench rows; the energy
    stages (``_fit_energy``) a busy chip's floor on the ML.ENERGY v2.0/v3.0 pairs and the on-chip
    DRAM path and operand delivery on four H100 rows.
    The time is linear in every unknown (in 1/factor for the weight term), so each row's
    coefficients come from evaluating the step at unit values of the unknowns.
    """
    db = db or load_database()
    cs = [c for c in cases(db) if c.role in ("fit", "input")]
    out: dict[str, float] = {}
    stream = next(c for c in cs if c.fit_group == "input")
    out["a100-80gb.mem_efficiency"] = stream.measured * 1e9 / db.device(stream.design["hw"]).mem_bw_bytes_s

    # stage 1: t = t0 + tl*a + ts*b + W*g_dtype (g = 1/factor; bf16 rows have g = 1)
    zero = {"kernel_launch_us": 0.0, "step_overhead_us": 0.0}
    rows, rhs = [], []
    for c in (c for c in cs if c.fit_group == "fixed+dequant"):
        d = c.design
        base = _decode_step_s(d, db, zero, 1.0)
        a = _decode_step_s(d, db, {**zero, "kernel_launch_us": 1.0}, 1.0) - base
        b = _decode_step_s(d, db, {**zero, "step_overhead_us": 1.0}, 1.0) - base
        W = 2.0 * (base - _decode_step_s(d, db, zero, 2.0))
        q = WEIGHT_FORMATS[d["dtype"]].dequant
        g = [W if q == "int8" else 0.0, W if q == "int4" else 0.0]
        t0 = base - (W if q else 0.0)
        m = c.measured * 1e-3
        rows.append(np.array([a, b, *g]) / m)
        rhs.append(1.0 - t0 / m)
    tl, ts, g8, g4 = _nnls(np.array(rows), np.array(rhs))
    out.update({"gpt-fast.kernel_launch_us": tl, "gpt-fast.step_overhead_us": ts,
                "gpt-fast.int8_stream_factor": 1.0 / g8, "gpt-fast.int4_stream_factor": 1.0 / g4})

    # stage 2: the link latency, given stage 1 (as stored: rounded)
    fixed = {"kernel_launch_us": round(tl, 1), "step_overhead_us": round(ts, 0)}
    rows, rhs = [], []
    for c in (c for c in cs if c.fit_group == "link"):
        base = _decode_step_s(c.design, db, {**fixed, "link_latency_us": 0.0}, 1.0)
        dl = _decode_step_s(c.design, db, {**fixed, "link_latency_us": 1.0}, 1.0) - base
        m = c.measured * 1e-3
        rows.append([dl / m])
        rhs.append(1.0 - base / m)
    out["a100-80gb.link_latency_us"] = float(_nnls(np.array(rows), np.array(rhs))[0])

    # eager: per-kernel cost on its row(s), kernels_per_layer and step_overhead_us as stored
    rows, rhs = [], []
    for c in (c for c in cs if c.fit_group == "eager"):
        f = _factor(c.design, db)
        base = _decode_step_s(c.design, db, {"kernel_launch_us": 0.0}, f)
        a = _decode_step_s(c.design, db, {"kernel_launch_us": 1.0}, f) - base
        m = c.measured * 1e-3
        rows.append([a / m])
        rhs.append(1.0 - base / m)
    out["eager.kernel_launch_us"] = float(_nnls(np.array(rows), np.array(rhs))[0])

    # mla: the kernels an MLA block adds, on the DeepSeek row(s), everything else as stored
    rows, rhs = [], []
    for c in (c for c in cs if c.fit_group == "mla"):
        f = _factor(c.design, db)
        base = _decode_step_s(c.design, db, {"mla_extra_kernels": 0.0}, f)
        a = _decode_step_s(c.design, db, {"mla_extra_kernels": 1.0}, f) - base
        m = c.measured * 1e-3
        rows.append([a / m])
        rhs.append(1.0 - base / m)
    out["graphs.mla_extra_kernels"] = float(_nnls(np.array(rows), np.array(rhs))[0])
    out.update(_fit_serving([c for c in cs if c.fit_group == "serving"], db))
    out.update(_fit_trees([c for c in cs if c.fit_group == "trees"], db))
    out.update(_fit_spec_runtime([c for c in cs if c.fit_group == "sglang"], db, "sglang", ("spec_schedule_us",)))
    out.update(_fit_spec_runtime([c for c in cs if c.fit_group == "vllm"], db, "vllm",
                                 ("spec_schedule_us", "draft_step_overhead_us")))
    out.update(_fit_rocm([c for c in cs if c.fit_group == "rocm"], db))
    out.update(_fit_energy(cs, db))
    return out


def _fit_energy(cs: list[Case], db: Database) -> dict[str, float]:
    """Energy stages (docs/calibration.md section 5d). Idle: the mean busy-but-waiting power of the
    paired rows (``idle_w`` inputs, all on H100s) as the fraction of the H100's provisioned power
    above its leakage, f = (P_idle - leakage) / (power_w - leakage). Energy: given f as stored, the
    on-chip pJ per DRAM bit X and the operand-delivery factor F by relative least squares (values >= 0):
    energy per token is linear in both, E = E0 + a X + b F (E0, a, b from evaluate_design with the
    technology constants at X = F = 0 and at unit values; no row is at its power limit there)."""
    from ..api import evaluate_design
    from ..catalog.technology import load_technology
    from ..model.technology import known_part_energy
    tech = load_technology(db.root)
    out: dict[str, float] = {}
    idle = [c for c in cs if c.fit_group == "idle"]
    devs = {c.design["hw"] for c in idle}
    assert len(devs) == 1, devs          # the pairs are all H100s
    e = known_part_energy(tech, db.device(devs.pop()))
    p_idle = statistics.fmean(c.measured for c in idle)
    out["nodes.active_idle_fraction"] = (p_idle - e["static_w"]) / (e["power_w"] - e["static_w"])

    def energy(c, x, f):
        t = tech.with_overrides({"onchip_pj_per_dram_bit": x, "operand_delivery_factor": f})
        r = evaluate_design(db=db, tech=t, **c.design)
        assert r["energy_j_per_token"] * r["tokens_per_s"] < r["power_limit_w"], c.id     # below its power limit
        return r["energy_j_per_token"]

    rows, rhs = [], []
    for c in (c for c in cs if c.fit_group == "energy"):
        e0 = energy(c, 0.0, 0.0)
        rows.append([(energy(c, 1.0, 0.0) - e0) / c.measured, (energy(c, 0.0, 1.0) - e0) / c.measured])
        rhs.append(1.0 - e0 / c.measured)
    x, f = _nnls(np.array(rows), np.array(rhs))
    out["nodes.onchip_pj_per_dram_bit"], out["nodes.operand_delivery_factor"] = float(x), float(f)
    return out


def _fit_trees(cs: list[Case], db: Database) -> dict[str, float]:
    """Trees stage: the eager runtime's extra kernels per layer of a tree-masked verify pass and
    its host cost per draft-head step, from speedups with a published tau. A row's measured
    iteration is tau x T_base / speedup (T_base the model's, as the speedup is over the same
    stack's plain decoding); the model's iteration is linear in both unknowns, so relative least
    squares (values >= 0) on (iter(0, 0), its slopes) solves them."""
    from ..api import evaluate_design

    def iteration(c, **fields):
        r = evaluate_design(db=db, **{**c.design, "set_fields": {**c.design.get("set_fields", {}), **fields}})
        return r["iter_ms"], r["tau"] * r["baseline_ms_per_token"] / c.measured

    rows, rhs = [], []
    for c in cs:
        zero = dict(tree_kernels_per_layer=0.0, draft_step_overhead_us=0.0)
        i0, measured = iteration(c, **zero)
        dx = iteration(c, **{**zero, "tree_kernels_per_layer": 1.0})[0] - i0
        dh = iteration(c, **{**zero, "draft_step_overhead_us": 1.0})[0] - i0
        rows.append([dx / measured, dh / measured])
        rhs.append(1.0 - i0 / measured)
    x, h = _nnls(np.array(rows), np.array(rhs))
    return {"eager.tree_kernels_per_layer": float(x), "eager.draft_step_overhead_us": float(h)}


def _fit_spec_runtime(cs: list[Case], db: Database, runtime: str, fields: tuple[str, ...]) -> dict[str, float]:
    """A serving stack's speculative costs (the sglang and vllm stages): its host work per iteration
    (spec_schedule_us) and, where fitted, per draft step (draft_step_overhead_us), from speedups over the
    same stack's plain decoding with the published tau. Each row anchors the runtime's fixed costs at
    its measured baseline step T_base (--baseline-ms), so the measured iteration is tau x T_base /
    speedup; the model's iteration is linear in the unknowns (the anchor scales draft_step_overhead_us
    by the row's factor, not spec_schedule_us), hence relative least squares, values >= 0."""
    from ..api import evaluate_design

    def iteration(c, **values):
        r = evaluate_design(db=db, **{**c.design, "set_fields": {**c.design.get("set_fields", {}), **values}})
        return r["iter_ms"], r["tau"] * r["baseline_ms_per_token"] / c.measured

    rows, rhs = [], []
    zero = dict.fromkeys(fields, 0.0)
    for c in cs:
        i0, measured = iteration(c, **zero)
        rows.append([(iteration(c, **{**zero, f: 1.0})[0] - i0) / measured for f in fields])
        rhs.append(1.0 - i0 / measured)
    x = _nnls(np.array(rows), np.array(rhs))
    return {f"{runtime}.{f}": float(v) for f, v in zip(fields, x)}


def _fit_rocm(cs: list[Case], db: Database) -> dict[str, float]:
    """ROCm stage: the rocm-vllm runtime's per-kernel cost from the level of its batch-1 row(s) (the
    request latency is linear in it: L = L0 + a x kernel_launch_us, solved by relative least squares)
    and its per-sequence cost per step from a batch sweep's growth, min sum (L_B/L_1 / (m_B/m_1) - 1)^2
    over the sweep's rows (ratios to the sweep's own batch-1 row, so that an older stack's level does
    not enter; golden-section search on 0-1000 us); each given the other, twice."""
    from ..api import evaluate_design
    level = [c for c in cs if c.id.startswith("serving:")]
    sweep = sorted((c for c in cs if c.id.startswith("load:")), key=lambda c: c.design["batch"])

    def latency(c, kl, so):
        fields = {**c.design.get("set_fields", {}), "kernel_launch_us": kl, "sequence_overhead_us": so}
        return evaluate_design(db=db, **{**c.design, "set_fields": fields})["request_latency_ms"]

    def measured_ms(c):         # throughput per GPU -> the batch's latency
        d = c.design
        return d["batch"] * d["output"] / (c.measured * d["chips"]) * 1e3

    kl, so = 0.0, 0.0
    for _ in range(2):
        base = [latency(c, 0.0, so) for c in level]
        slope = [latency(c, 1.0, so) - b for c, b in zip(level, base)]
        a = np.array(slope) / np.array([measured_ms(c) for c in level])
        r = 1.0 - np.array(base) / np.array([measured_ms(c) for c in level])
        kl = max(0.0, float(a @ r / (a @ a)))

        def loss(x, kl=kl):
            lat = [latency(c, kl, x) for c in sweep]
            meas = [measured_ms(c) for c in sweep]
            return sum((lb / lat[0] / (mb / meas[0]) - 1.0) ** 2 for lb, mb in zip(lat, meas))
        lo, hi = 0.0, 1000.0
        g = (5 ** 0.5 - 1) / 2
        for _ in range(40):
            x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
            if loss(x1) < loss(x2):
                hi = x2
            else:
                lo = x1
        so = 0.5 * (lo + hi)
    return {"rocm-vllm.kernel_launch_us": kl, "rocm-vllm.sequence_overhead_us": so}


#: grids of the serving fit (the other two unknowns are linear and solved in closed form)
ROOFLINE_P_GRID = (1.5, 2.0, 2.5, 3.0, 4.0, 6.0)
FP8_FACTOR_GRID = tuple(round(0.5 + 0.05 * i, 2) for i in range(11))


def _fit_serving(cs: list[Case], db: Database) -> dict[str, float]:
    """Serving stage: for every (roofline p, fp8 compute factor) on a grid, the per-request cost
    (TTFT = t0 + c_req) and the per-sequence cost (request latency = RL0 + c_seq*k, k its
    coefficient) by 1-D non-negative relative least squares; keep the grid point with the
    smallest sum of squared relative errors over the rows (TTFT and request latency)."""
    from ..api import evaluate_design
    from ..model import transformer as tf
    ttft = [c for c in cs if c.metric == "ttft_ms"]
    tput = [c for c in cs if c.metric == "throughput_tok_s_gpu"]

    def run(c, **fields):
        r = evaluate_design(db=db, **{**c.design, "set_fields": {**c.design.get("set_fields", {}), **fields}})
        return r if r["fits"] else None

    def ls(base, coef, meas):        # min sum((base + x*coef)/meas - 1)^2, x >= 0
        a, b = np.asarray(coef) / np.asarray(meas), 1.0 - np.asarray(base) / np.asarray(meas)
        return max(0.0, float(a @ b / (a @ a))) if a @ a > 0 else 0.0

    best = None
    saved = tf.COMPUTE_EFFICIENCY_FACTOR["fp8"]
    try:
        for p, f8 in itertools.product(ROOFLINE_P_GRID, FP8_FACTOR_GRID):
            tf.COMPUTE_EFFICIENCY_FACTOR["fp8"] = tf.COMPUTE_EFFICIENCY_FACTOR["fp4"] = f8
            zero = dict(roofline_p=p, request_overhead_us=0.0, sequence_overhead_us=0.0)
            t0 = [run(c, **zero)["ttft_ms"] for c in ttft]
            req = ls(t0, np.ones(len(t0)), [c.measured for c in ttft]) * 1e3            # ms -> us
            pairs = [(c, run(c, **{**zero, "request_overhead_us": req}),
                      run(c, **{**zero, "request_overhead_us": req, "sequence_overhead_us": 1.0})) for c in tput]
            pairs = [(c, a, b) for c, a, b in pairs if a is not None and b is not None]
            meas_rl = [c.design["batch"] * c.design["output"] / c.measured / c.design["chips"] * 1e3 for c, _, _ in pairs]
            rl0 = [a["request_latency_ms"] for _, a, _ in pairs]
            seq = ls(rl0, [b["request_latency_ms"] - a["request_latency_ms"] for _, a, b in pairs], meas_rl)
            err = [(t + req * 1e-3) / c.measured - 1.0 for t, c in zip(t0, ttft)]
            err += [(r + seq * (b["request_latency_ms"] - a["request_latency_ms"])) / m - 1.0
                    for r, m, (_, a, b) in zip(rl0, meas_rl, pairs)]
            loss = float(np.sum(np.square(err)))
            if best is None or loss < best[0]:
                best = (loss, p, f8, req, seq)
    finally:
        tf.COMPUTE_EFFICIENCY_FACTOR["fp8"] = tf.COMPUTE_EFFICIENCY_FACTOR["fp4"] = saved
    _, p, f8, req, seq = best
    return {"graphs.roofline_p": p, "COMPUTE_EFFICIENCY_FACTOR.fp8": f8, "graphs.request_overhead_us": req,
            "graphs.sequence_overhead_us": seq}


def _factor(design: dict[str, Any], db: Database) -> float:
    """The weight-streaming factor a design's runtime gives its weight format (1 for 16-bit)."""
    q = WEIGHT_FORMATS[design["dtype"]].dequant
    if not q:
        return 1.0
    rt = db.runtime(design.get("runtime") or db.device(design["hw"]).default_runtime)
    return getattr(rt, f"{q}_stream_factor")


def stored_values(db: Database | None = None) -> dict[str, float]:
    """The database's current values of the fitted defaults, keyed like :func:`fit`."""
    from ..catalog.technology import load_technology
    from ..model.transformer import COMPUTE_EFFICIENCY_FACTOR
    db = db or load_database()
    tech = load_technology(db.root)
    a100, graphs, eager = db.device("a100-80gb"), db.runtime("graphs"), db.runtime("eager")
    gf, sg, vl, rocm = db.runtime("gpt-fast"), db.runtime("sglang"), db.runtime("vllm"), db.runtime("rocm-vllm")
    return {"a100-80gb.mem_efficiency": a100.mem_efficiency,
            "gpt-fast.kernel_launch_us": gf.kernel_launch_s * 1e6,
            "gpt-fast.step_overhead_us": gf.step_overhead_s * 1e6,
            "gpt-fast.int8_stream_factor": gf.int8_stream_factor, "gpt-fast.int4_stream_factor": gf.int4_stream_factor,
            "a100-80gb.link_latency_us": a100.link_latency_s * 1e6,
            "eager.kernel_launch_us": eager.kernel_launch_s * 1e6,
            "graphs.mla_extra_kernels": graphs.mla_extra_kernels,
            "graphs.roofline_p": graphs.roofline_p,
            "COMPUTE_EFFICIENCY_FACTOR.fp8": COMPUTE_EFFICIENCY_FACTOR["fp8"],
            "graphs.request_overhead_us": graphs.request_overhead_s * 1e6,
            "graphs.sequence_overhead_us": graphs.sequence_overhead_s * 1e6,
            "rocm-vllm.kernel_launch_us": rocm.kernel_launch_s * 1e6,
            "rocm-vllm.sequence_overhead_us": rocm.sequence_overhead_s * 1e6,
            "eager.tree_kernels_per_layer": eager.tree_kernels_per_layer,
            "eager.draft_step_overhead_us": eager.draft_step_overhead_s * 1e6,
            "sglang.spec_schedule_us": sg.spec_schedule_s * 1e6,
            "vllm.spec_schedule_us": vl.spec_schedule_s * 1e6,
            "vllm.draft_step_overhead_us": vl.draft_step_overhead_s * 1e6,
            "nodes.active_idle_fraction": tech.active_idle_fraction,
            "nodes.onchip_pj_per_dram_bit": tech.onchip_j_per_dram_bit * 1e12,
            "nodes.operand_delivery_factor": tech.operand_delivery_factor}
