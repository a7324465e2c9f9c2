"""The measured rows as cases: every row of ``hardware_db/measurements/*.csv``, read and mapped to one :class:`Case`.

A Case holds the :func:`dse.api.evaluate_design` arguments that represent the row, the measured number
and its role:

- ``fit``: used to choose a default (which one: :data:`dse.validation.fits.FIT_PARAMETERS`);
- ``held-out``: used for no fitted value, so its error tests the model;
- ``input``: a measurement that sets a default directly (the STREAM-like bandwidth row);
- ``not modelled``: the model cannot represent the row; :attr:`Case.note` says why.

No row is dropped. The tables here say how a row's text becomes dse's names (hardware, model,
precision, drafter, metric); :mod:`.fits` re-derives the fitted defaults from the fit rows and
:mod:`.comparison` predicts every modelled row (docs/calibration.md explains the choices).
"""

from __future__ import annotations

import csv
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.database import Database, load_database
from . import spec_serving

#: short name -> file in hardware_db/measurements/
FILES = {"decode": "decode_measurements_public.csv", "specdec": "specdec_measurements_public.csv",
         "extra": "decode_measurements_extra.csv", "serving": "serving_measurements_public.csv",
         "moe": "decode_measurements_moe.csv",
         "specbench": "specdec_measurements_extra.csv", "energy": "energy_measurements_public.csv",
         "load": "serving_load_measurements_public.csv", "servingspec": "specdec_serving_measurements.csv"}

#: CSV hardware text -> (device, --set overrides, mapping note)
_ONE_GCD = {"mem_bw_tb_s": 1.6, "memory_capacity_gib": 64, "peak_tflops_bf16": 191.5, "peak_tops_int8": 191.5}
HARDWARE = {
    "A100-SXM4-80GB (power-limited 330 W)": ("a100-80gb", {}, ""),
    "MI250X (one GCD)": ("mi250x", _ONE_GCD, "one GCD = half the MI250X package (1.6 TB/s, 64 GB)"),
    "TPU v4": ("tpu-v4", {}, ""),
    "1x TPU-v4": ("tpu-v4", {}, ""),
    "TPU v4 (16 chips [M])": ("tpu-v4", {}, ""),
    "1x A100": ("a100-80gb", {}, "A100 variant not stated: a100-80gb"),
    "A100-80GB-PCIe": ("a100-80gb", {}, "PCIe card modelled as the a100-80gb (SXM) entry"),
    "H100 SXM": ("h100-sxm", {}, ""),
    "L40S": ("l40s", {}, ""),
    "A100": ("a100-80gb", {}, "A100 variant not stated: a100-80gb"),
    "RTX 4090": ("rtx-4090", {}, ""),
    "H100 80G (NIM)": ("h100-sxm", {}, "H100 variant not stated: h100-sxm"),
    "B200 (HGX)": ("b200", {}, ""),
    "H200 SXM": ("h200", {}, ""),
    "A100-80GB (Spec-Bench)": ("a100-80gb", {}, ""),
    "MI300X": ("mi300x", {}, ""),
}
#: CSV model text -> database model
MODELS = {
    "Llama-2-7B": "llama-2-7b", "Llama-2-70B": "llama-2-70b", "LLaMA2-Chat 13B": "llama-2-13b",
    "Chinchilla-70B": "chinchilla-70b", "Chinchilla 70B": "chinchilla-70b",
    "Chinchilla-draft-4B": "chinchilla-draft-4b", "T5-XXL (11B)": "t5-xxl", "Llama-3.3-70B": "llama-3.3-70b",
    "DeepSeek-V3": "deepseek-v3", "DeepSeek-R1": "deepseek-v3", "Mixtral-8x7B": "mixtral-8x7b",
    "Vicuna-7B-v1.3": "vicuna-7b", "Vicuna-13B-v1.3": "vicuna-13b", "Vicuna-33B-v1.3": "vicuna-33b",
    "Llama-3.1-8B": "llama-3.1-8b", "Llama-3.1-70B": "llama-3.1-70b", "Llama-3.1-405B": "llama-3.1-405b",
    "Qwen3-8B": "qwen3-8b", "Qwen3-14B": "qwen3-14b", "Qwen3-32B": "qwen3-32b",
}
#: EAGLE-1's default static tree (mc_sim_7b_63: 4-8-8-3-2 nodes per depth below the root)
EAGLE_DEFAULT_TREE = (25, 5)
#: EAGLE+gpt-fast, the code behind the README's gpt-fast rows (SafeAILab/EAGLE branch eaglefast,
#: commit b2faa21 of 2024-01-18, model/ea_model.py: eagenerate -> chaintopK_genrate(sk=3)):
#: a CHAIN of 3 drafted tokens verified as 4 positions, not the static tree
EAGLE_GPT_FAST_CHAIN = 3
#: Mean accepted length of EAGLE-1 on MT-bench at T=0 (arXiv 2401.15077 Table 1, Hugging Face backend)
EAGLE_TAU = {"LLaMA2-Chat 13B": 3.90}
EAGLE_TAU_SOURCE = ("EAGLE paper (arXiv 2401.15077) Table 1, LLaMA2-Chat 13B, MT-bench, T=0, HF backend "
                    "[UNVERIFIED transcription: not re-read against the paper here]")
#: draft_method text -> dse drafter family for tree and retrieval methods (first match wins)
TREE_METHODS = (("medusa", "medusa"), ("hydra", "hydra"), ("rest", "ngram"), ("retrieval", "ngram"),
                ("prompt lookup", "ngram"), ("pld", "ngram"))
#: Medusa-1's released heads (hardware_db/models/medusa-vicuna-7b.yaml) when the row names none
MEDUSA_HEADS_DEFAULT = 5
DRAFTS = {"T5-small": "t5-small", "T5-base": "t5-base", "T5-large": "t5-large", "draft model 4B": "chinchilla-draft-4b",
          "vicuna-68m": "llama-68m"}
#: draft_method text -> why the row is not modelled (first match wins; checked before the mappings)
NOT_MODELLED_METHODS = (
    ("lookahead", "Lookahead decoding (Jacobi iterations with an n-gram pool) is not a drafter dse models"),
    ("token recycling", "Token Recycling (an adjacency matrix of earlier candidates) is not a drafter dse models"),
    ("samd", "SAMD (suffix-automaton drafts merged into an EAGLE-2 tree) is not a drafter dse models"),
)
#: CSV precision text -> weight dtype ('not stated' is bf16: T5X's default dtype, t5_1_1/base.gin)
PRECISION = {
    "bf16": "bf16", "bf16 (assumed)": "bf16", "fp16": "fp16", "FP16": "fp16",
    "int8": "int8", "int8 weight-only": "int8", "int4 g32": "int4", "int4 g32 weight-only": "int4",
    "INT4 weights (g32)": "int4", "not stated in sources read": "bf16",
    "FP8 (fp8 KV cache)": "fp8-head16", "4-bit (q4f16_1 assumed)": "q4f16_1", "FP8 (NIM fp8 profile)": "fp8-head16",
    "nvfp4 MoE and dense FFN, bf16 attention": "nvfp4",
    "nvfp4 (nvidia/DeepSeek-R1-0528-FP4), fp8 KV cache": "nvfp4", "nvfp4 (nvidia/DeepSeek-R1-FP4), bf16 KV cache": "nvfp4",
    "nvfp4 (nvidia/DeepSeek-R1-FP4)": "nvfp4", "fp8 (DeepSeek block-wise W8A8)": "fp8-block",
    "fp8 (row-wise W8A8, Meta FP8 checkpoint)": "fp8-head16",
    "fp8 (DeepSeek-R1-0528 block-wise W8A8)": "fp8-block", "nvfp4 (DeepSeek-R1-0528-FP4-V2)": "nvfp4",
    "fp8": "fp8-head16", "FP8 (amd/Llama-3.1-70B-Instruct-FP8-KV, fp8 KV cache)": "fp8-head16",
    "bf16 weights, bf16 KV cache": "bf16", "bf16 weights, fp8 KV cache (FlashAttention-3, two-level accumulation)": "bf16",
}
_RUNTIME_BY_FRAMEWORK = (("transformers", "eager"), ("Hugging Face", "eager"), ("HF backend", "eager"),
                         ("gpt-fast", "gpt-fast"), ("vLLM (ROCm", "rocm-vllm"))   # else the device's default
#: decode-file metric text -> kind of comparison
DECODE_METRICS = {"decode tok/s": "decode_ms", "autoregressive sampling": "decode_ms", "draft sampling": "decode_ms",
                  "decode ms/token": "decode_ms", "effective ms/token": "spec_ms",
                  "empirical peak HBM BW": "bandwidth_gb_s"}
#: (framework, hardware) of the serving-file rows whose decode attention dse reads as TensorRT-LLM's masked MHA
#: (runtime trtllm-mmha: a GQA model's KV read once per query head). Inferred, not stated: v0.6.1's H100 Llama-2-70B
#: rows are 1.8x slower than v0.9.0's where the step is mostly KV reads (output 2,048: 1,486 tok/s/GPU at batch
#: 480 vs 2,725 at 512, 547 vs 1,011 at 64) and 1.1-1.2x on the short-output ones, while its A100 short-output rows
#: match v0.9.0's at similar batches (670 vs 686, 79 vs 80): Hopper's XQA is what changed (calibration.md 5g). A MHA model
#: (Llama-2-7B) is the same under either runtime.
MMHA_ROWS = ("TensorRT-LLM v0.6.1", "H100 SXM")
#: serving-file metric text -> kind of comparison
SERVING_METRICS = {"first token latency": "ttft_ms", "output tok/s/GPU": "throughput_tok_s_gpu",
                   "decode tok/s": "decode_ms", "inter-token latency": "decode_ms"}
#: serving-load-file columns -> (case id suffix, kind of comparison); the TPOT is the decode step under load
LOAD_METRICS = (("ttft_ms", "ttft", "ttft_ms"), ("tpot_ms", "tpot", "decode_ms"),
                ("output_tok_s_total", "tput", "throughput_tok_s_gpu"))
#: serving-load framework text -> why the row is not modelled (first match wins; checked before the
#: lengths and concurrency)
LOAD_NOT_MODELLED = (
)
#: serving-load framework text of a static batch (vLLM benchmark_latency.py: B requests prefilled and decoded
#: together): one case, output tok/s per GPU = B x G / (the batch's latency) / GPUs, static batching
LOAD_STATIC = "static batch"


def _rocm_fit_row(case: Case, row: dict[str, str]) -> bool:
    """The MI300X rows the rocm-vllm runtime is fitted on (dse.validation.fits FIT_PARAMETERS "rocm"): the
    newest vLLM's batch-1 static batch (its fixed cost a step) and OCI's batch sweep (the growth with batch,
    as ratios to its own batch-1 row); the other MI300X rows are held out."""
    return ((case.id.startswith("serving:") and "vllm_0.10.2" in row.get("framework", "")
             and case.design.get("batch") == 1)
            or (case.id.startswith("load:") and "blogs.oracle.com" in row.get("source", "")))
#: why the serving-load rows are all held out
LOAD_ROLE = "held out: the serving model (dse.model.scheduler) has no fitted constant; none fitted on these rows"
#: serving-load source text -> short name for the per-source medians (first match wins)
LOAD_SOURCES = (("docs.nvidia.com/nim", "NVIDIA NIM"), ("InferenceX", "InferenceX"), ("blog.vllm.ai", "vLLM blog"),
                ("sgl-project", "SGLang v0.3 blog"), ("TensorRT-LLM", "TensorRT-LLM docs"),
                ("tenstorrent", "Tenstorrent"), ("oracle.com", "OCI blog"))
#: the power limit below which the energy fit takes a row: measured draw per GPU < this x the GPU's TDP
#: (above it the GPU runs at its limit: its clocks drop, which dse does not model)
ENERGY_FIT_MAX_TDP_FRACTION = 0.95
#: why the B200 GPQA rows of the ML.ENERGY v3.0 leaderboard are not modelled (the rows' own numbers)
B200_GPQA = ("the B200 GPQA runs take 1.3-3.4x the H100 runs' median inter-token latency at the same model and "
             "batch (Qwen3-8B at 8 sequences: 32.5 ms against 9.7 ms) where the B200's 2.4x bandwidth should make "
             "them ~2x faster: the GPU waits on something outside it (host or engine) that no dse runtime "
             "represents, and the energy is a waiting GPU's")


class _NotModelled(Exception):
    """A row the model cannot represent; the message is the reason shown in the table."""


def _lookup(table: dict[str, Any], key: str, what: str):
    if key not in table:
        raise _NotModelled(f"no mapping for {what} {key!r} in dse/validation/measurements.py")
    return table[key]


@dataclass(frozen=True)
class Case:
    """One measurement row and how `dse` represents it."""

    id: str                      # '<file short name>:<1-based data row>'
    label: str                   # what was measured, in a few words
    metric: str                  # decode_ms | spec_ms | speedup | bandwidth_gb_s | ttft_ms |
                                 # throughput_tok_s_gpu | energy_j_per_token | idle_w | '' (not modelled)
    measured: float | None
    role: str                    # fit | held-out | input | not modelled
    fit_group: str = ""          # key of fits.FIT_PARAMETERS for fit/input rows
    design: dict[str, Any] = field(default_factory=dict)   # evaluate_design keyword arguments
    note: str = ""               # mapping assumptions, or why the row is not modelled
    source: str = ""


def measurements_dir(db: Database | None = None) -> Path:
    return (db or load_database()).root / "measurements"


def read_rows(db: Database | None = None) -> list[tuple[str, dict[str, str]]]:
    """(row id, CSV row) for every data row of every measurement file, in file order."""
    out = []
    folder = measurements_dir(db)
    for short, name in FILES.items():
        with open(folder / name, newline="") as fh:
            for i, row in enumerate(csv.DictReader(fh), start=1):
                out.append((f"{short}:{i}", row))
    return out


def _num(text: str) -> float | None:
    """The leading number of a CSV cell ('30.1 [D from 33.2 tok/s]' -> 30.1, '~200' -> 200), or None."""
    m = re.match(r"\s*~?\s*([0-9]*\.?[0-9]+)", text or "")
    return float(m.group(1)) if m else None


def _kv(dtype: str) -> str:
    """gpt-fast and EAGLE keep a 16-bit KV cache with quantised weights."""
    return dtype if dtype in ("bf16", "fp16") else "bf16"


def _runtime(framework: str) -> str | None:
    for key, rt in _RUNTIME_BY_FRAMEWORK:
        if key in framework:
            return rt
    return None


def _design(hw_text: str, model: str, dtype: str, chips: int, *, prompt: int, output: int,
            framework: str = "") -> tuple[dict[str, Any], str]:
    hw, set_fields, note = _lookup(HARDWARE, hw_text, "hardware")
    d = dict(hw=hw, target=model, chips=chips, dtype=dtype, kv_dtype=_kv(dtype), prompt=prompt, output=output)
    if set_fields:
        d["set_fields"] = dict(set_fields)
    rt = _runtime(framework)
    if rt:
        d["runtime"] = rt
    return d, note


def _chips(hw_text: str) -> int:
    """Chips named in a specdec hardware cell: '1x TPU-v4' -> 1, 'TPU v4 (16 chips [M])' -> 16."""
    m = re.search(r"(\d+) chips", hw_text) or re.match(r"\s*(\d+)x", hw_text)
    return int(m.group(1)) if m else 1


def _lengths(row: dict[str, str]) -> tuple[int, int, str]:
    """(prompt, output) tokens: the row's when numeric ('~200' -> 200), else 128/128, said so."""
    p, o = _num(row.get("input_len", "")), _num(row.get("output_len", ""))
    if p is not None and o is not None:
        return int(p), int(o), ""
    return 128, 128, "prompt/output lengths not numeric in the row: 128/128"


def _decode_case(rid: str, row: dict[str, str], ar_ms: dict[str, float]) -> Case:
    """A row of decode_measurements_public.csv (or the extra file, same columns)."""
    src, model_text = row["source"], row["model"]
    kind = _lookup(DECODE_METRICS, row["metric"], "metric")
    if kind == "bandwidth_gb_s":
        hw = _lookup(HARDWARE, row["hardware"], "hardware")[0]
        return Case(rid, "", kind, float(row["value"]), "input", "input", dict(hw=hw),
                    f"sets {hw} mem_efficiency = measured / peak; shown: peak BW x mem_efficiency", src)
    if not row["num_chips"].isdigit():
        raise _NotModelled("chip count unspecified and no acceptance rate or tau published for this run")
    chips, dtype = int(row["num_chips"]), _lookup(PRECISION, row["precision"], "precision")
    prompt, output, len_note = _lengths(row)
    if kind == "spec_ms":       # Chen et al. speculative sampling: '<target> + 4B draft'
        k = int(re.search(r"K=(\d+)", row["framework"]).group(1))
        t_ms, d_ms = ar_ms["Chinchilla-70B"], ar_ms["Chinchilla-draft-4B"]
        measured = float(row["ms_per_token"])
        tau = (k * d_ms + t_ms) / measured
        design, hw_note = _design(row["hardware"], "chinchilla-70b", dtype, chips, prompt=prompt, output=output)
        design.update(draft="chinchilla-draft-4b", k=k, tau=round(tau, 4))
        note = (f"tau = (K*{d_ms:g} + {t_ms:g}) / {measured:g} = {tau:.3f} from the paper's own step times "
                "(draft time unverified): tests T_draft + T_verify, not acceptance")
        return Case(rid, "", "spec_ms", measured, "held-out", design=design,
                    note="; ".join(x for x in (note, hw_note, len_note) if x), source=src)
    design, hw_note = _design(row["hardware"], _lookup(MODELS, model_text, "model"), dtype, chips, prompt=prompt,
                              output=output, framework=row["framework"])
    notes = [hw_note, len_note]
    ep = re.search(r"\bEP(\d+)", row["framework"])
    if ep and int(ep.group(1)) > 1:        # expert parallel: the routed experts over E ranks of t/E chips
        design["ep"] = int(ep.group(1))
    if model_text == "DeepSeek-R1":
        notes.append("DeepSeek-R1 has DeepSeek-V3's shapes: deepseek-v3")
    return Case(rid, "", "decode_ms", float(row["ms_per_token"]), "", design=design,
                note="; ".join(x for x in notes if x), source=src)


def _serving_case(rid: str, row: dict[str, str]) -> Case:
    """A row of serving_measurements_public.csv: a first-token latency, a static-batch
    throughput per GPU (B*G / wall time of the batch / GPUs = B*G / request latency / GPUs),
    or a batch-1 decode speed."""
    kind = _lookup(SERVING_METRICS, row["metric"], "metric")
    dtype = _lookup(PRECISION, row["precision"], "precision")
    prompt, output, len_note = _lengths(row)
    design, hw_note = _design(row["hardware"], _lookup(MODELS, row["model"], "model"), dtype,
                              int(row["num_chips"]), prompt=prompt, output=output, framework=row["framework"])
    design["batch"] = int(row["batch_size"])
    if "continuous batching" in row["framework"]:     # batch = requests in flight (concurrency)
        design["continuous"] = True
    if "fp8 KV" in row["precision"]:
        design["kv_dtype"] = "fp8"
    if (row["framework"].startswith(MMHA_ROWS[0]) and row["hardware"] == MMHA_ROWS[1]
            and row["metric"] == "output tok/s/GPU"):
        design["runtime"] = "trtllm-mmha"
    value = float(row["value"])
    measured = 1e3 / value if row["metric"] == "decode tok/s" else value
    return Case(rid, "", kind, measured, "", design=design,
                note="; ".join(x for x in (hw_note, len_note) if x), source=row["source"])


def load_source(source: str) -> str:
    """The short name of a serving-load row's source (LOAD_SOURCES), else its first word."""
    return next((name for key, name in LOAD_SOURCES if key in source), source.split(" ")[0])


def _load_cases(rid: str, row: dict[str, str]) -> list[Case]:
    """A row of serving_load_measurements_public.csv: one held-out case per measured metric (TTFT, TPOT
    as the decode step, output tok/s per GPU) of continuous batching at batch = concurrency (a closed
    loop of that many clients), the row's lengths, chips, stages and token budget."""
    why = next((w for key, w in LOAD_NOT_MODELLED if key in row["framework"]), None)
    if why:
        raise _NotModelled(why)
    if LOAD_STATIC in row["framework"] and row["concurrency"]:
        return [_static_load_case(rid, row)]
    if row["request_rate_per_s"]:
        raise _NotModelled(f"open loop (Poisson arrivals at {row['request_rate_per_s']} req/s) of ShareGPT prompts "
                           "of lengths not stated per row: dse's serving model is a closed loop at fixed lengths")
    if not row["concurrency"]:
        raise _NotModelled("no concurrency: an offline max-load run whose requests in flight the server's own "
                           "batch and KV limits set (not stated)")
    if not (row["tp"] and row["pp"]):
        raise _NotModelled(f"the tensor/expert-parallel split over the {row['num_chips']} GPUs is not stated")
    dtype = _lookup(PRECISION, row["precision"], "precision")
    chips, batch = int(row["num_chips"]), int(row["concurrency"])
    design, hw_note = _design(row["hardware"], _lookup(MODELS, row["model"], "model"), dtype, chips,
                              prompt=int(row["input_len"]), output=int(row["output_len"]), framework=row["framework"])
    design.update(batch=batch, continuous=True, pp=int(row["pp"]))
    notes = [f"continuous batching, a closed loop of {batch} client{'s' if batch > 1 else ''} (batch = concurrency), "
             f"{row['input_len']}/{row['output_len']} tokens, TP{row['tp']} PP{row['pp']}", hw_note]
    if "fp8 KV" in row["precision"]:
        design["kv_dtype"] = "fp8"
    ep = re.search(r"\bEP(\d+)", row["framework"])
    if ep and int(ep.group(1)) > 1:
        design["ep"] = int(ep.group(1))
    if row["model"] == "DeepSeek-R1":
        notes.append("DeepSeek-R1 has DeepSeek-V3's shapes: deepseek-v3")
    mtp = re.search(r"\bMTP (\d+) layers", row["framework"])
    if mtp:         # the model's one MTP module chained N times; its acceptance from the table (no --alpha)
        design["draft"] = f"mtp:{mtp.group(1)}"
        notes.append(f"--draft mtp:{mtp.group(1)}, acceptance from the table's DeepSeek-R1/V3 MTP rows (TensorRT-LLM "
                     "tech blog 1 measured them on the same unnamed 'real dataset', ISL 1K / OSL 2K)")
    dp = int(row["tp"]) if "attention DP" in row["framework"] else 1
    if dp > 1:      # TensorRT-LLM's attention DP: one rank a GPU, each with its own token budget
        design["dp"] = dp
        notes.append(f"attention data parallel, {dp} ranks of one GPU (--dp {dp}); the budget is per rank")
    if row["max_batched_tokens"]:
        design["max_batched_tokens"] = int(row["max_batched_tokens"]) * dp
    else:
        notes.append("token budget not stated: 8192 (vLLM's and TensorRT-LLM's default)")
    if "anomalous" in row["notes"]:
        notes.append("the source flags this point as anomalous")
    notes.append(LOAD_ROLE)
    out = []
    for column, suffix, kind in LOAD_METRICS:
        if not row[column]:
            continue
        value = float(row[column]) / chips if kind == "throughput_tok_s_gpu" else float(row[column])
        stat = row.get(column.replace("_ms", "_stat"), "") if kind != "throughput_tok_s_gpu" else ""
        note = "; ".join(x for x in notes + [f"{stat} as published" if stat else ""] if x)
        out.append(Case(f"{rid}/{suffix}", "", kind, value, "held-out", design=dict(design), note=note,
                        source=row["source"]))
    return out


def _static_load_case(rid: str, row: dict[str, str]) -> Case:
    """A static batch of a serving-load file (vLLM benchmark_latency.py): B = concurrency requests of the
    row's lengths prefilled together then decoded together, its output tokens/s per GPU (B x G / latency
    / GPUs), as the TensorRT-LLM static-batch rows of serving_measurements_public.csv."""
    dtype = _lookup(PRECISION, row["precision"], "precision")
    chips, batch = int(row["num_chips"]), int(row["concurrency"])
    design, hw_note = _design(row["hardware"], _lookup(MODELS, row["model"], "model"), dtype, chips,
                              prompt=int(row["input_len"]), output=int(row["output_len"]), framework=row["framework"])
    design.update(batch=batch, pp=int(row["pp"]))
    note = "; ".join(x for x in (f"static batch of {batch}, {row['input_len']}/{row['output_len']} tokens, TP{row['tp']} "
                                 f"PP{row['pp']}; output tok/s per GPU = B x G / latency / GPUs", hw_note) if x)
    return Case(f"{rid}/tput", "", "throughput_tok_s_gpu", float(row["output_tok_s_total"]) / chips, "",
                design=design, note=note, source=row["source"])


def _acceptance(row: dict[str, str]) -> dict[str, float] | None:
    """The row's own acceptance: tau (mean accepted length) if published, else alpha."""
    tau, alpha = _num(row.get("mean_accepted_length_tau", "")), _num(row.get("acceptance_rate_alpha", ""))
    if tau is not None:
        return {"tau": tau}
    return {"alpha": alpha} if alpha is not None else None


def _spec_prompt(row: dict[str, str]) -> tuple[int, str]:
    """Prompt tokens of a speculative row: its context_or_prompt_len when numeric ('~350 [M ...]'
    -> 350), else 128, said so."""
    p = _num(row.get("context_or_prompt_len", ""))
    return (int(p), "") if p is not None else (128, "prompt length not in the row: 128")


def _eagle_case(rid: str, row: dict[str, str], model: str, dtype: str, db: Database | None = None) -> Case:
    """EAGLE rows: the Hugging Face backend drafts a tree (EAGLE-1's static default tree unless
    the row names 'N nodes, depth D': EAGLE-2's dynamic trees); EAGLE+gpt-fast drafts a chain of
    3 (EAGLE_GPT_FAST_CHAIN). Without a published tau for the chain, its alpha is the top-1 rate
    whose best 25-node, depth-5 tree under EAGLE's measured rank profile
    (hardware_db/acceptance/rank_profiles.yaml) has the paper's tau."""
    target, method = row["target_model"], row["draft_method"]
    prompt, p_note = _spec_prompt(row)
    design, hw_note = _design(row["hardware"], model, dtype, _chips(row["hardware"]), prompt=prompt, output=128,
                              framework=method)
    nodes_m = re.search(r"(\d+)\s*nodes?\b", row.get("k_or_tree", ""))
    depth_m = re.search(r"depth\s*=?\s*(\d+)", row.get("k_or_tree", ""))
    nodes, depth = (int(nodes_m.group(1)), int(depth_m.group(1))) if nodes_m and depth_m else EAGLE_DEFAULT_TREE
    given = _acceptance(row)
    if given is None and target not in EAGLE_TAU:
        raise _NotModelled(f"EAGLE row without tau or alpha, and no published tau for {target!r} in EAGLE_TAU")
    notes = []
    if "gpt-fast" in method:
        k = EAGLE_GPT_FAST_CHAIN
        if given is None:
            from ..catalog.rank_profiles import load_rank_profiles
            from ..model.specdec import implied_tree_alpha
            profile = load_rank_profiles((db or load_database()).root).for_drafter("eagle")
            alpha = implied_tree_alpha(EAGLE_TAU[target], depth, nodes, profile)
            given = {"alpha": round(alpha, 4)}
            notes.append(f"alpha {alpha:.4f}: the top-1 rate whose best {nodes}-node depth-{depth} tree under "
                         f"the {profile.name} rank profile has tau {EAGLE_TAU[target]:g} ({EAGLE_TAU_SOURCE})")
        design.update(draft="eagle", k=k, **given)
        notes.insert(0, f"EAGLE+gpt-fast drafts a chain of {k} (SafeAILab/EAGLE branch eaglefast, b2faa21, "
                        "model/ea_model.py chaintopK_genrate(sk=3)), not the static tree")
    else:
        given = given or {"tau": EAGLE_TAU[target]}
        design.update(draft="eagle", k=depth, tree_nodes=nodes, **given)
        notes.append(f"EAGLE default tree mc_sim_7b_63 ({nodes} nodes, depth {depth}; SafeAILab/EAGLE "
                     "eagle/model/choices.py)" if (nodes, depth) == EAGLE_DEFAULT_TREE else
                     f"the best {nodes}-node tree of depth <= {depth} (EAGLE-2's dynamic tree of {nodes} tokens)")
        if "EAGLE-3" in method:
            notes.append("EAGLE-3's head modelled as an EAGLE head (one layer; its fused 3-layer features and own "
                         "LM head not counted)")
    baseline = _num(row.get("target_ms_per_token", ""))
    if baseline:
        design["baseline_ms"] = baseline
        notes.append(f"baseline anchored at the row's {baseline:g} ms/token")
    notes += ["chat fine-tune has the base model's shapes", hw_note, p_note or f"prompt {prompt}",
              "output length not in the row: 128"]
    return Case(rid, "", "speedup", float(row["measured_speedup"]), "held-out", design=design,
                note="; ".join(x for x in notes if x), source=row["source"])


def _tree_method(text: str) -> str | None:
    """The dse drafter family of a Medusa, Hydra, REST or prompt-lookup row, else None."""
    low = text.lower()
    return next((fam for key, fam in TREE_METHODS if re.search(rf"\b{key}\b", low)), None)


def _tree_method_case(rid: str, row: dict[str, str], model: str, dtype: str, family: str) -> Case:
    """Medusa heads (``medusa:H``), Hydra heads (``hydra:H``: Medusa-sized heads drafted one depth a
    step; the extra input of each sequentially dependent head is not counted) and retrieval drafts
    (REST, prompt lookup: ``ngram``): the tree ('N nodes', 'depth D') or chain ('gamma=K', 'K=4')
    from k_or_tree, the row's tau or alpha, its baseline step if published."""
    method, shape = row["draft_method"], row["k_or_tree"]
    given = _acceptance(row)
    if given is None:
        raise _NotModelled("no acceptance rate or tau published for this run")
    nodes = re.search(r"(\d+)\s*-?\s*nodes?\b", shape, re.I)
    depth = re.search(r"depth\s*=?\s*(\d+)", shape, re.I)
    chain = re.search(r"\b(?:gamma|k)\s*=\s*(\d+)", shape, re.I)
    notes = []
    if family in ("medusa", "hydra"):
        m = re.search(r"(\d+)\s*heads?", method, re.I)
        heads = int(m.group(1)) if m else MEDUSA_HEADS_DEFAULT
        if not m:
            notes.append(f"heads not in the row: {heads} (Medusa-1's released heads)")
        draft = f"{family}:{heads}"
        k = int(depth.group(1)) if depth else (int(chain.group(1)) if chain else heads)
    else:
        draft = "ngram"
        if not (depth or chain):
            raise _NotModelled(f"draft length or tree depth not given in {shape!r}")
        k = int((depth or chain).group(1))
    if "hydra" in method.lower():
        notes.append("Hydra's heads drafted one depth a step, each a Medusa-sized head (its prefix layer and "
                     "wider inputs not counted)")
    prompt, p_note = _spec_prompt(row)
    design, hw_note = _design(row["hardware"], model, dtype, _chips(row["hardware"]), prompt=prompt, output=128,
                              framework=f"{method} {row.get('notes', '')}")
    design.update(draft=draft, k=k, **given)
    if nodes:
        design["tree_nodes"] = int(nodes.group(1))
    elif not chain:
        raise _NotModelled(f"tree size not given in {shape!r} (expected 'N nodes' or 'gamma=K')")
    baseline = _num(row.get("target_ms_per_token", ""))
    if baseline:
        design["baseline_ms"] = baseline
        notes.append(f"baseline anchored at the row's {baseline:g} ms/token")
    notes += [hw_note, p_note or f"prompt {prompt}", "output length not in the row: 128"]
    return Case(rid, "", "speedup", float(row["measured_speedup"]), "held-out", design=design,
                note="; ".join(x for x in notes if x), source=row["source"])


def _specdec_case(rid: str, row: dict[str, str], db: Database | None = None) -> Case:
    """A row of specdec_measurements_public.csv (or the extra file, same columns)."""
    src, target = row["source"], row["target_model"]
    why = next((w for key, w in NOT_MODELLED_METHODS if key in row["draft_method"].lower()), None)
    if why:
        raise _NotModelled(why)
    dtype = _lookup(PRECISION, row["precision"], "precision")
    model = _lookup(MODELS, target, "model")
    if "EAGLE" in row["draft_method"]:
        return _eagle_case(rid, row, model, dtype, db)
    method = _tree_method(row["draft_method"])
    if method is not None:
        return _tree_method_case(rid, row, model, dtype, method)
    k = int(re.search(r"(\d+)", row["k_or_tree"]).group(1))
    draft = next((v for key, v in DRAFTS.items() if key in row["draft_method"]), None)
    if draft is None:
        raise _NotModelled(f"no mapping for draft {row['draft_method']!r} in dse/validation/measurements.py")
    speedup = float(row["measured_speedup"])
    given = _acceptance(row)
    if given is not None and not target.startswith("T5"):      # a draft model with its published tau
        prompt, p_note = _spec_prompt(row)
        design, hw_note = _design(row["hardware"], model, dtype, _chips(row["hardware"]), prompt=prompt, output=128,
                                  framework=f"{row['draft_method']} {row.get('notes', '')}")
        design.update(draft=draft, k=k, **given)
        note = "; ".join(x for x in (f"a chain of k = {k} (the row's k_or_tree)", hw_note, p_note or f"prompt {prompt}",
                                     "output length not in the row: 128") if x)
        return Case(rid, "", "speedup", speedup, "held-out", design=design, note=note, source=src)
    if target.startswith("T5"):
        design, hw_note = _design(row["hardware"], model, dtype, _chips(row["hardware"]), prompt=0, output=128)
        design.update(draft=draft, k=k, alpha=float(row["acceptance_rate_alpha"]))
        note = "; ".join(x for x in (
            "encoder-decoder modelled as its decoder stack (encoder, cross-attention not modelled); "
            "prompt in the encoder: decoder cache starts empty (prompt 0, output 128); "
            "dtype not stated: bf16 (T5X default)", hw_note) if x)
        return Case(rid, "", "speedup", speedup, "held-out", design=design, note=note, source=src)
    # Chen et al.: tau from the paper's step times, as in the decode file's rows
    t_ms, d_ms = float(row["target_ms_per_token"]), _num(row["draft_ms_per_token"])
    tau = speedup * (k * d_ms + t_ms) / t_ms
    design, hw_note = _design(row["hardware"], model, dtype, _chips(row["hardware"]), prompt=128, output=128)
    design.update(draft=draft, k=k, tau=round(tau, 4))
    note = "; ".join(x for x in (
        f"tau = speedup*(K*{d_ms:g} + {t_ms:g})/{t_ms:g} = {tau:.3f} from the paper's step times "
        f"(draft time unverified): tests T_draft + T_verify, not acceptance; {design['chips']} chips [M]",
        hw_note, "lengths not in the row: 128/128") if x)
    return Case(rid, "", "speedup", speedup, "held-out", design=design, note=note, source=src)


def _energy_key(row: dict[str, str]) -> tuple[str, str, str, str]:
    return row["hardware"], row["num_chips"], row["model"], row["batch_size"]


def _energy_case(rid: str, row: dict[str, str], v3: dict[tuple, dict[str, str]]) -> Case:
    """A row of energy_measurements_public.csv. An ML.ENERGY v3.0 row is an energy per output token of
    continuous batching at its average concurrency, prompt and output lengths. A v2.0 row (an older,
    slower engine on the same H100s) is paired with the v3.0 row of the same model, GPUs and batch: the
    same work took longer, and the extra energy over the extra time is the power of a GPU waiting
    between kernels, P = (E2 - E3) / (1/tps2 - 1/tps3) per GPU (``idle_w``, an input of the idle fit)."""
    src, chips = row["source"], int(row["num_chips"])
    dev = _lookup(HARDWARE, row["hardware"], "hardware")[0]
    if row["framework"].startswith("vLLM 0.5.4"):
        other = v3.get(_energy_key(row))
        if other is None:
            raise _NotModelled("no ML.ENERGY v3.0 row of the same model, GPUs and batch to pair it with")
        e2, e3 = float(row["energy_j_per_token"]), float(other["energy_j_per_token"])
        t2, t3 = 1.0 / float(row["output_tok_s"]), 1.0 / float(other["output_tok_s"])
        idle = (e2 - e3) / (t2 - t3) / chips
        note = (f"paired with the v3.0 row ({e3:g} J at {float(other['output_tok_s']):g} tok/s): "
                f"({e2:g} - {e3:g}) J / ({t2 * 1e3:.4f} - {t3 * 1e3:.4f}) ms / {chips} GPU(s); assumes both engines "
                "do the same work per token (v2.0 used ShareGPT prompts, v3.0 LMArena's)")
        return Case(rid, "", "idle_w", idle, "input", "idle", dict(hw=dev), note, src)
    if row["task"] == "gpqa" and dev == "b200":
        raise _NotModelled(B200_GPQA)
    dtype = _lookup(PRECISION, row["precision"], "precision")
    prompt, output = int(_num(row["input_len"])), int(round(float(row["output_len"])))
    batch = int(round(float(row["avg_batch"])))
    design, hw_note = _design(row["hardware"], _lookup(MODELS, row["model"], "model"), dtype, chips, prompt=prompt,
                              output=output, framework=row["framework"])
    design.update(batch=batch, continuous=True)
    draw = float(row["avg_power_w"]) / chips
    note = "; ".join(x for x in (
        f"continuous batching at the measured mean concurrency {batch} (max_num_seqs {row['batch_size']}), prompt "
        f"{prompt} (estimate), output {output}; measured {draw:.0f} W per GPU, median inter-token "
        f"{row['itl_ms']} ms", hw_note) if x)
    return Case(rid, "", "energy_j_per_token", float(row["energy_j_per_token"]), "", design=design, note=note,
                source=src)


def _label(rid: str, row: dict[str, str]) -> str:
    if rid.startswith("specdec:"):
        return (f"{row['hardware']} {row['target_model']} + {row['draft_method']} {row['k_or_tree']} "
                f"({row['dataset_task']})")
    if rid.startswith("specbench:"):          # short: the source and harness are in the notes
        tree = re.sub(r"\s*\[M:[^\]]*\]", "", row["k_or_tree"])
        return f"{row['hardware']} {row['target_model']} + {row['draft_method'].split(' + ')[0]} {tree}"
    if rid.startswith("serving:"):
        return (f"{row['hardware']} x{row['num_chips']} {row['model']} {row['precision']} B={row['batch_size']} "
                f"{row['input_len']}/{row['output_len']} ({row['framework']})")
    if rid.startswith("load:"):
        return (f"{row['hardware']} x{row['num_chips']} {row['model']} {row['precision'].split(' (')[0]} "
                f"c={row['concurrency'] or '-'} {row['input_len'] or '-'}/{row['output_len'] or '-'} "
                f"({row['framework'].split(' (')[0]})")
    if rid.startswith("servingspec:"):
        return spec_serving.label(row)
    if rid.startswith("energy:"):
        return (f"{row['hardware']} x{row['num_chips']} {row['model']} {row['precision'].split(' ')[0]} "
                f"{row['task'].split(' ')[0]} B={row['batch_size']} ({row['framework'].split(' (')[0]})")
    return f"{row['hardware']} x{row['num_chips']} {row['model']} {row['precision']} ({row['framework']})"


def _role(case: Case, row: dict[str, str], db: Database | None = None) -> Case:
    """Fill in fit / held-out for decode rows (the fit subsets of fits.FIT_PARAMETERS), and mark the
    speculative rows the tree costs are fitted on."""
    d = case.design
    if (case.id.startswith("specbench:") and d.get("target") == "vicuna-7b" and d.get("hw") == "a100-80gb"
            and row.get("draft_method", "").startswith(("EAGLE-1 ", "Medusa-1 "))):
        return Case(case.id, case.label, case.metric, case.measured, "fit", "trees", d, case.note, case.source)
    if case.role:
        return case
    gpt_fast_a100 = (row.get("hardware", "").startswith("A100-SXM4") and row.get("framework", "").startswith("gpt-fast"))
    group = ""
    if case.id.startswith("decode:") and gpt_fast_a100 and d["chips"] == 1:
        group = "fixed+dequant"
    elif (case.id.startswith("decode:") and gpt_fast_a100 and d["target"] == "llama-2-7b" and d["dtype"] == "bf16"):
        group = "link"
    elif case.id.startswith("extra:") and d.get("runtime") == "eager":
        group = "eager"
    elif case.id.startswith("moe:") and d["hw"] == "b200" and d.get("ep") == 4:
        group = "mla"
    elif (case.id.startswith("serving:") and d["target"] == "llama-2-7b" and d["hw"] in ("h100-sxm", "a100-80gb")
          and row.get("framework", "").startswith(("TensorRT-LLM v0.5", "TensorRT-LLM v0.6"))):
        group = "serving"
    elif case.id.startswith(("serving:", "load:")) and d["hw"] == "mi300x" and _rocm_fit_row(case, row):
        group = "rocm"
    elif (case.id.startswith("energy:") and d["hw"] == "h100-sxm" and d["target"] == "llama-3.1-8b"
          and float(row["avg_power_w"]) / d["chips"] < ENERGY_FIT_MAX_TDP_FRACTION * (db or load_database()).device(d["hw"]).tdp_w):
        group = "energy"

    return Case(case.id, case.label, case.metric, case.measured, "fit" if group else "held-out", group,
                case.design, case.note, case.source)


def cases(db: Database | None = None) -> list[Case]:
    """Every measurement row as a Case, in file order."""
    db = db or load_database()
    rows = read_rows(db)
    ar_ms = {r["model"]: float(r["ms_per_token"]) for rid, r in rows
             if rid.startswith("decode:") and r["model"] in ("Chinchilla-70B", "Chinchilla-draft-4B")}
    v3 = {_energy_key(r): r for rid, r in rows if rid.startswith("energy:") and r["framework"].startswith("vLLM 0.11")
          and r["task"] == "lm-arena-chat"}
    out = []
    for rid, row in rows:
        label, source = _label(rid, row), row.get("source", "")
        if rid.startswith("load:") and LOAD_STATIC in row["framework"] and row["concurrency"]:
            try:        # a static batch of the serving-load file: one case, its role like the serving rows'
                c = dataclasses.replace(_static_load_case(rid, row), label=label)
            except _NotModelled as why:
                out.append(Case(rid, label, "", None, "not modelled", note=str(why), source=source))
                continue
            out.append(_role(c, row, db))
            continue
        try:
            if rid.startswith(("specdec:", "specbench:")):
                case = _specdec_case(rid, row, db)
            elif rid.startswith("serving:"):
                case = _serving_case(rid, row)
            elif rid.startswith("energy:"):
                case = _energy_case(rid, row, v3)
            elif rid.startswith("servingspec:"):        # role set by the file's own rules (spec_serving.FIT_RULES)
                try:
                    out.append(Case(**spec_serving.case_fields(rid, row)))
                except spec_serving.NotModelled as why:
                    raise _NotModelled(str(why)) from None
                continue
            elif rid.startswith("load:"):
                out += [dataclasses.replace(c, label=label) for c in _load_cases(rid, row)]
                continue
            else:
                case = _decode_case(rid, row, ar_ms)
        except _NotModelled as why:
            measured = _num(row.get("ms_per_token") or row.get("measured_speedup") or row.get("value")
                            or row.get("energy_j_per_token") or "")
            out.append(Case(rid, label, "", measured, "not modelled", note=str(why), source=source))
            continue
        out.append(_role(Case(rid, label, case.metric, case.measured, case.role, case.fit_group, case.design,
                              case.note, case.source), row, db))
    return out
