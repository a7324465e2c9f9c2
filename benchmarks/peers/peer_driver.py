"""Runs INSIDE the throwaway virtual environment of run_peers.py (llm-analysis 0.2.2, genz-llm
0.0.16 from PyPI); prints one JSON object with each peer's predictions. Not imported by dse."""

import json
import sys
import time
import warnings

warnings.filterwarnings("ignore")
CASE = json.loads(sys.argv[1])
OUT = {}

# ---- llm-analysis: Llama-3.1-70B from a config file; its MLP has 2 matrices of ffn_embed_dim,
# so Llama's gated 3 x 28672 is given as 2 x 43008 (the same bytes and FLOPs per token)
try:
    from llm_analysis.analysis import infer
    la = {}
    for dtype, name in (("bf16", "w16a16e16"), ("fp8", "w8a8e16")):
        r = infer(model_name=CASE["llm_analysis_model"], gpu_name="h100-sxm-80gb", dtype_name=name, tp_size=2,
                  batch_size_per_gpu=CASE["batch"], seq_len=CASE["prompt"], num_tokens_to_generate=CASE["output"],
                  log_level="ERROR")
        la[dtype] = {"decode_ms": r["decode_latency"] * 1e3, "per_token_ms": r["total_per_token_latency"] * 1e3,
                     "weights_gb_per_chip": r["weight_memory_per_gpu"] / 1e9,
                     "kv_gb_per_chip": r["kv_cache_memory_per_gpu"] / 1e9}
    t = time.perf_counter()
    n = 0
    for i in range(CASE["grid"]):           # achieved bandwidth 1,000 to 3,000 GB/s (H100 peak 3,350)
        bw = 1000 + 2000 * i / max(CASE["grid"] - 1, 1)
        infer(model_name=CASE["llm_analysis_model"], gpu_name="h100-sxm-80gb", dtype_name="w8a8e16", tp_size=2,
              seq_len=CASE["prompt"], num_tokens_to_generate=CASE["output"], achieved_memory_bandwidth_GBs=bw,
              log_level="ERROR")
        n += 1
    la["evals_per_s"] = n / (time.perf_counter() - t)
    # the published anchor: Llama-2-70B bf16 on 2 x A100-SXM4-80GB, gpt-fast, 5-token prompt
    r = infer(model_name=CASE["llm_analysis_anchor_model"], gpu_name="a100-sxm-80gb", dtype_name="w16a16e16",
              tp_size=2, batch_size_per_gpu=1, seq_len=5, num_tokens_to_generate=200, log_level="ERROR")
    la["anchor_decode_ms"] = r["decode_latency"] * 1e3
    la["grid_designs"] = n
    OUT["llm-analysis"] = la
except Exception as exc:  # report, do not hide
    OUT["llm-analysis"] = {"error": f"{type(exc).__name__}: {exc}"}

# ---- GenZ: its own Llama-3.1 configs and H100 system (989 TFLOP/s, 3.4 TB/s, 450 GB/s link)
try:
    import numpy as np
    from GenZ.LLM_inference import decode_moddeling
    from GenZ.LLM_inference.llm_spec_decode import spec_decode_modeling

    def f(x):
        return float(np.ravel(np.asarray(x, dtype=float))[0])
    gz = {}
    for dtype in ("bf16", "fp8"):
        out = decode_moddeling(model="meta-llama/meta-llama-3.1-70b", batch_size=CASE["batch"], Bb=1,
                               input_tokens=CASE["prompt"], output_tokens=0, system_name="H100_GPU", bits=dtype,
                               tensor_parallel=2)
        st = out["summary_table"].iloc[0]
        gz[dtype] = {"decode_ms": f(out["Latency"]), "weights_gb_per_chip": float(st["Total Weights (MB)"]) * 2**20 / 1e9,
                     "kv_gb_per_chip": float(st["KV Cache (MB)"]) * 2**20 / 1e9}
        sp = spec_decode_modeling(model="meta-llama/meta-llama-3.1-70b", draft_model="meta-llama/meta-llama-3.1-8b",
                                  batch_size=CASE["batch"], input_tokens=CASE["prompt"], output_tokens=CASE["output"],
                                  token_acceptance_rate=CASE["alpha"], num_parallel_tokens=CASE["k"],
                                  system_name="H100_GPU", bits=dtype, tensor_parallel=2)
        gz[dtype]["spec_iter_ms"] = f(sp["Latency"])
        gz[dtype]["spec_tokens_per_iter"] = f(sp["tokens_generated"])
        gz[dtype]["spec_ms_per_token"] = f(sp["Latency"]) / f(sp["tokens_generated"])
    n = min(CASE["grid"], CASE["genz_grid"])
    t = time.perf_counter()
    for i in range(n):
        system = {"Flops": 989, "Memory_size": 80, "Memory_BW": 2000 + 5 * i, "ICN": 450, "real_values": True}
        decode_moddeling(model="meta-llama/meta-llama-3.1-70b", batch_size=1, Bb=1, input_tokens=CASE["prompt"],
                         output_tokens=0, system_name=system, bits="fp8", tensor_parallel=2)
    gz["evals_per_s"] = n / (time.perf_counter() - t)
    gz["grid_designs"] = n
    OUT["GenZ"] = gz
except Exception as exc:
    OUT["GenZ"] = {"error": f"{type(exc).__name__}: {exc}"}

print(json.dumps(OUT))
