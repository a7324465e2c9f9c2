"""Validation against public measurements, and the fit behind the defaults (`dse validate`).

Every row of ``hardware_db/measurements/*.csv`` becomes one :class:`Case`: the
:func:`dse.api.evaluate_design` arguments that represent it, the measured number and its role:

- ``fit``: used to choose a default (which one: :data:`FIT_PARAMETERS`);
- ``held-out``: used for no fitted value, so its error tests the model;
- ``input``: a measurement that sets a default directly (the STREAM-like bandwidth row);
- ``not modelled``: the model cannot represent the row; :attr:`Case.note` says why.

No row is dropped. :func:`compare` predicts every modelled row through ``evaluate_design`` with
the database as it is; :func:`fit` re-derives the fitted defaults from the fit rows, so anyone can
check that the database holds what the data give (docs/calibration.md explains the choices).

Example:
    >>> from dse.validation import calibration
    >>> rows = calibration.compare()
    >>> s = calibration.summary(rows)
    >>> s["decode"]["all"]["median_abs_error"] <= 0.15
    True
"""

from __future__ import annotations

import csv
import itertools
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..catalog.database import Database, load_database
from ..model.transformer import WEIGHT_FORMATS

#: short name -> file in hardware_db/measurements/
FILES = {"decode": "decode_measurements_public.csv", "specdec": "specdec_measurements_public.csv",
         "extra": "decode_measurements_extra.csv", "serving": "serving_measurements_public.csv",
         "moe": "decode_measurements_moe.csv",
         "specbench": "specdec_measurements_extra.csv", "energy": "energy_measurements_public.csv"}

#: what each fitted default is fitted on (the row predicates are in :func:`_role`)
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
    "trees": ("runtimes/eager.yaml tree_kernels_per_layer, draft_step_overhead_us",
              "the Spec-Bench A100 Vicuna-7B EAGLE-1 and Medusa-1 tree rows (specdec_measurements_extra.csv)"),
    "idle": ("technology/nodes.yaml active_idle_fraction",
             "the 8 ML.ENERGY v2.0 H100 rows paired with v3.0 rows of the same model, GPUs and batch "
             "(Llama-3.1-8B x1, 70B x4; batch 64-512; energy_measurements_public.csv)"),
    "energy": ("technology/nodes.yaml onchip_pj_per_dram_bit, operand_delivery_factor",
               "the ML.ENERGY v3.0 Llama-3.1-8B rows on one H100 below its power limit (measured draw under "
               "95% of its 700 W TDP: batch 8-64; energy_measurements_public.csv)"),
}

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
    "nvfp4 MoE and dense FFN, bf16 attention": "nvfp4", "fp8 (DeepSeek block-wise W8A8)": "fp8-head16",
    "fp8 (row-wise W8A8, Meta FP8 checkpoint)": "fp8-head16",
}
_RUNTIME_BY_FRAMEWORK = (("transformers", "eager"), ("Hugging Face", "eager"), ("HF backend", "eager"),
                         ("gpt-fast", "gpt-fast"))   # else the device's default
#: decode-file metric text -> kind of comparison
DECODE_METRICS = {"decode tok/s": "decode_ms", "autoregressive sampling": "decode_ms", "draft sampling": "decode_ms",
                  "decode ms/token": "decode_ms", "effective ms/token": "spec_ms",
                  "empirical peak HBM BW": "bandwidth_gb_s"}
#: serving-file metric text -> kind of comparison
SERVING_METRICS = {"first token latency": "ttft_ms", "output tok/s/GPU": "throughput_tok_s_gpu",
                   "decode tok/s": "decode_ms", "inter-token latency": "decode_ms"}
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
        raise _NotModelled(f"no mapping for {what} {key!r} in dse/validation/calibration.py")
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
    fit_group: str = ""          # key of FIT_PARAMETERS for fit/input rows
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
    value = float(row["value"])
    measured = 1e3 / value if row["metric"] == "decode tok/s" else value
    return Case(rid, "", kind, measured, "", design=design,
                note="; ".join(x for x in (hw_note, len_note) if x), source=row["source"])


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
        raise _NotModelled(f"no mapping for draft {row['draft_method']!r} in dse/validation/calibration.py")
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
    if rid.startswith("energy:"):
        return (f"{row['hardware']} x{row['num_chips']} {row['model']} {row['precision'].split(' ')[0]} "
                f"{row['task'].split(' ')[0]} B={row['batch_size']} ({row['framework'].split(' (')[0]})")
    return f"{row['hardware']} x{row['num_chips']} {row['model']} {row['precision']} ({row['framework']})"


def _role(case: Case, row: dict[str, str], db: Database | None = None) -> Case:
    """Fill in fit / held-out for decode rows (the fit subsets of FIT_PARAMETERS), and mark the
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
          and row.get("framework", "").startswith("TensorRT-LLM")):
        group = "serving"
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
        try:
            if rid.startswith(("specdec:", "specbench:")):
                case = _specdec_case(rid, row, db)
            elif rid.startswith("serving:"):
                case = _serving_case(rid, row)
            elif rid.startswith("energy:"):
                case = _energy_case(rid, row, v3)
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


def predict(case: Case, db: Database | None = None) -> float | None:
    """The model's value for a case's metric (display units: ms, x, GB/s); None if not modelled."""
    from ..api import evaluate_design
    db = db or load_database()
    if not case.metric:
        return None
    if case.metric == "bandwidth_gb_s":
        dev = db.device(case.design["hw"])
        return dev.mem_bw_bytes_s * dev.mem_efficiency / 1e9
    if case.metric == "idle_w":
        from ..catalog.technology import load_technology
        from ..model.technology import known_part_energy
        return known_part_energy(load_technology(db.root), db.device(case.design["hw"]))["idle_w"]
    r = evaluate_design(db=db, **case.design)
    if not r["fits"]:
        return None
    return _metric(case, r)


def _metric(case: Case, r: dict[str, Any]) -> float:
    """The value of ``case.metric`` in an evaluate_design result."""
    if case.metric == "throughput_tok_s_gpu":
        d = case.design
        return d["batch"] * d["output"] / (r["request_latency_ms"] * 1e-3) / d["chips"]
    key = {"decode_ms": "baseline_ms_per_token", "spec_ms": "spec_ms_per_token", "speedup": "speedup",
           "ttft_ms": "ttft_ms", "energy_j_per_token": "energy_j_per_token"}[case.metric]
    return r[key]


def compare(rows: list[Case] | None = None, db: Database | None = None) -> list[dict[str, Any]]:
    """Predicted vs measured for every case: one dict per row, errors relative ((p - m) / m)."""
    db = db or load_database()
    out = []
    for c in (rows if rows is not None else cases(db)):
        p = predict(c, db)
        err = None if p is None or not c.measured else (p - c.measured) / c.measured
        note = c.note if p is not None or not c.metric else "; ".join(x for x in (c.note, "does not fit in memory") if x)
        out.append(dict(id=c.id, role=c.role if c.metric else "not modelled", fit_group=c.fit_group,
                        metric=c.metric or None, label=c.label, measured=c.measured, predicted=p, rel_error=err,
                        note=note, source=c.source, design=c.design))
    return out


def acceptance_rows(db: Database | None = None) -> list[dict[str, Any]]:
    """The acceptance table's rows as validation rows (dse.acceptance.fit): tau as published (converted
    to the row's own chain or tree) against the model's tau at that shape; role 'fit' for the rows
    the model is fitted on, 'held-out' for rows it can place but was not fitted on, 'not
    modelled' (with why) for the rest. The leave-one-source-out error is in the summary."""
    from ..acceptance.fit import predicted_rows, stored_fit
    from ..catalog.acceptance import load_table
    db = db or load_database()
    f = stored_fit(db)
    pred = predicted_rows(f, db.root)
    out = []
    for r in load_table(db.root):
        obs = (f.rows.get(r.id) or {}).get("tau")
        p = pred.get(r.id)
        role = ("fit" if r.fit else "held-out") if p is not None else "not modelled"
        label = f"{r.target_model or r.target} + {r.draft_kind} {r.shape} ({r.task}, T={r.temperature})"
        note = r.why_not if not r.fit else ""
        if p is None and not note:
            note = "no tau at a known chain or tree"
        out.append(dict(id=f"acceptance:{r.id}", role=role, fit_group="acceptance" if r.fit else "",
                        metric="tau" if p is not None else None, label=label, measured=obs if p is not None else None,
                        predicted=p, rel_error=None if p is None else (p - obs) / obs, note=note, source=r.source,
                        design={}))
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median absolute relative error per metric family and role (fit, held-out, all)."""
    def stats(sel):
        errs = [abs(r["rel_error"]) for r in sel if r["rel_error"] is not None]
        return dict(n=len(errs), median_abs_error=statistics.median(errs) if errs else None,
                    max_abs_error=max(errs) if errs else None)

    fam = {"decode": ("decode_ms",), "speculative": ("spec_ms", "speedup"), "ttft": ("ttft_ms",),
           "throughput": ("throughput_tok_s_gpu",), "acceptance": ("tau",), "energy": ("energy_j_per_token",)}
    out: dict[str, Any] = {}
    for name, metrics in fam.items():
        sel = [r for r in rows if r["metric"] in metrics]
        out[name] = {"fit": stats([r for r in sel if r["role"] == "fit"]),
                     "held-out": stats([r for r in sel if r["role"] == "held-out"]),
                     "all": stats(sel)}
    out["energy_by_batch"] = energy_by_batch(rows)
    out["not_modelled"] = [r["id"] for r in rows if r["role"] == "not modelled" and not r["id"].startswith("acceptance:")]
    out["acceptance_not_placed"] = sum(1 for r in rows if r["role"] == "not modelled" and r["id"].startswith("acceptance:"))
    return out


#: batch bands of the energy rows' signed-error medians (summary["energy_by_batch"])
ENERGY_BATCH_BANDS = ((1, 16), (17, 128), (129, 100_000))


def energy_by_batch(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median signed error of the held-out energy rows per batch band (and GPU): a model right for the
    right reason has no sign that follows the batch."""
    out = []
    for hw in ("h100-sxm", "b200"):
        for lo, hi in ENERGY_BATCH_BANDS:
            errs = [r["rel_error"] for r in rows if r["metric"] == "energy_j_per_token" and r["role"] == "held-out"
                    and r["rel_error"] is not None and r["design"]["hw"] == hw and lo <= r["design"]["batch"] <= hi]
            out.append(dict(hw=hw, batch=(lo, hi), n=len(errs), median_error=statistics.median(errs) if errs else None))
    return out


# ---------------------------------------------------------------------------------------------
# The fit: re-derive the fitted defaults from their rows (FIT_PARAMETERS)
# ---------------------------------------------------------------------------------------------

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
    roofline p and the fp8 GEMM factor on the TensorRT-LLM 7B rows; the trees stage (``_fit_trees``)
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
    out["nodes.active_idle_fraction"] = (p_idle - e["static_w"]) / (e["power_limit_w"] - e["static_w"])

    def energy(c, x, f):
        t = tech.with_overrides({"onchip_pj_per_dram_bit": x, "operand_delivery_factor": f})
        r = evaluate_design(db=db, tech=t, **c.design)
        assert r["energy_j_per_token"] * r["tokens_per_s"] < r["power_w"], c.id     # below its power limit
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
    gf = db.runtime("gpt-fast")
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
            "eager.tree_kernels_per_layer": eager.tree_kernels_per_layer,
            "eager.draft_step_overhead_us": eager.draft_step_overhead_s * 1e6,
            "nodes.active_idle_fraction": tech.active_idle_fraction,
            "nodes.onchip_pj_per_dram_bit": tech.onchip_j_per_dram_bit * 1e12,
            "nodes.operand_delivery_factor": tech.operand_delivery_factor}


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------

_UNITS = {"decode_ms": "ms/token", "spec_ms": "ms/token", "speedup": "x", "bandwidth_gb_s": "GB/s",
          "ttft_ms": "ms", "throughput_tok_s_gpu": "tok/s/GPU", "tau": "tokens/pass", "energy_j_per_token": "J/token",
          "idle_w": "W/GPU"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _val(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def report(rows: list[dict[str, Any]] | None = None, db: Database | None = None) -> dict[str, Any]:
    """Everything `dse validate --json` prints: rows, summary, fit parameters (refit and stored)."""
    from ..acceptance.fit import loso_median, stored_fit
    db = db or load_database()
    rows = compare(db=db) + acceptance_rows(db) if rows is None else rows
    acc = stored_fit(db)
    return {"rows": rows, "summary": summary(rows),
            "fit_parameters": {k: {"sets": v[0], "fitted_on": v[1]} for k, v in FIT_PARAMETERS.items()},
            "refit": fit(db), "stored": stored_values(db),
            "acceptance_loso": {"median_abs_error": loso_median(acc), "median_abs_error_all_rows":
                                loso_median(acc, informative=False), "rows": len(acc.loso)}}


def format_report(rep: dict[str, Any]) -> str:
    """The text of `dse validate`: the table, the medians, the fit, and the notes per row."""
    rows = rep["rows"]
    head = ["id", "role", "metric", "measured", "predicted", "error", "row"]
    cells = [[r["id"], r["role"] + (f" ({r['fit_group']})" if r["role"] == "fit" else ""),
              f"{r['metric']} [{_UNITS[r['metric']]}]" if r["metric"] else "-",
              _val(r["measured"]), _val(r["predicted"]), _pct(r["rel_error"]), r["label"]] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    right = {3, 4, 5}

    def line(vals):
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    out = [line(head), line(["-" * w for w in widths])] + [line(c) for c in cells]
    s = rep["summary"]
    out.append("")
    out.append("median |error| (n rows):")
    for fam, title in (("decode", "decode latency"), ("speculative", "speculative (spec ms/token, speedup)"),
                       ("ttft", "time to first token"), ("throughput", "large-batch throughput (request latency)"),
                       ("acceptance", "acceptance (tau of published rows, hardware_db/acceptance)"),
                       ("energy", "energy per token")):
        parts = [f"{role} {_pct(s[fam][role]['median_abs_error']).lstrip('+')} (n={s[fam][role]['n']})"
                 for role in ("fit", "held-out", "all")]
        out.append(f"  {title}: " + ", ".join(parts))
    bands = [f"{b['hw']} B {b['batch'][0]}-{b['batch'][1]} " if b["batch"][1] < 100_000 else f"{b['hw']} B >={b['batch'][0]} "
             for b in s["energy_by_batch"]]
    bands = [f"{x}{_pct(b['median_error'])} (n={b['n']})" for x, b in zip(bands, s["energy_by_batch"])]
    out.append("  energy per token, held-out median signed error by batch: " + ", ".join(bands))
    out.append(f"  not modelled: {len(s['not_modelled'])} rows ({', '.join(s['not_modelled'])})")
    if rep.get("acceptance_loso"):
        a = rep["acceptance_loso"]
        out.append(f"  acceptance, each source held out in turn (dse acceptance fit): {100 * a['median_abs_error']:.1f}% "
                   f"over the rows of methods with another source, {100 * a['median_abs_error_all_rows']:.1f}% over all "
                   f"{a['rows']} fitted rows; {s.get('acceptance_not_placed', 0)} acceptance rows not placed (no "
                   "acceptance statistic, method or task the model has)")
    out.append("")
    out.append("fitted defaults (refit from the fit rows / stored in the database):")
    for key in rep["refit"]:
        out.append(f"  {key} = {rep['refit'][key]:.4g} / {rep['stored'][key]:.4g}")
    for k, (sets, on) in FIT_PARAMETERS.items():
        out.append(f"  [{k}] {sets} <- {on}")
    out.append("")
    out.append("notes:")
    for r in rows:
        if r["note"]:
            out.append(f"  {r['id']}: {r['note']}")
    return "\n".join(out)


_BEGIN, _END = "<!-- BEGIN dse validate -->", "<!-- END dse validate -->"


def update_doc(path: str | Path, text: str) -> None:
    """Replace the block between the dse-validate markers of a Markdown file with ``text``."""
    p = Path(path)
    doc = p.read_text()
    i, j = doc.index(_BEGIN) + len(_BEGIN), doc.index(_END)
    p.write_text(doc[:i] + "\n```text\n" + text + "\n```\n" + doc[j:])


def doc_block(path: str | Path) -> str:
    """The text between the dse-validate markers of a Markdown file (without the code fence)."""
    doc = Path(path).read_text()
    block = doc[doc.index(_BEGIN) + len(_BEGIN):doc.index(_END)].strip()
    return block.removeprefix("```text").removesuffix("```").strip("\n")


if __name__ == "__main__":   # python -m dse.validation.calibration docs/calibration.md: refresh the doc's table
    update_doc(sys.argv[1], format_report(report()))
