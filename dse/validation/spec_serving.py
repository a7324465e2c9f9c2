"""The rows of ``specdec_serving_measurements.csv`` as cases (dse.validation.measurements builds them): speculative decoding as serving stacks run
it (SGLang's EAGLE worker, vLLM V1's EAGLE proposer), each row a speedup over the same stack's plain
decoding with its published acceptance length, and the role of each row in the fit of the stack's
speculative costs (:data:`FIT_RULES`; docs/calibration.md section 5e).

A row's draft configuration is the stack's own: ``steps`` drafting steps (the tree's depth), ``topk``
candidates a step and ``num_draft_tokens`` verified positions, the root among them (SGLang's
speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens; vLLM's
num_speculative_tokens is a chain: topk 1, num_draft_tokens = steps + 1; TensorRT-LLM's MTP nextn N
likewise: steps N, topk 1). top-k 1 is a chain of ``steps``; otherwise the best tree of
num_draft_tokens - 1 nodes and depth <= steps. An MTP row drafts with the target's own MTP module
chained ``steps`` times (``--draft mtp:N``). The row's baseline throughput anchors the stack's fixed
costs (``baseline_ms``: B x 1000 / tok/s).
"""

from __future__ import annotations

import re
from typing import Any

#: framework text -> dse runtime (first match wins)
RUNTIMES = (("SGLang", "sglang"), ("vLLM", "vllm"), ("TensorRT-LLM", "graphs"))
#: CSV hardware text -> (device, --set overrides, mapping note); the rows name the GPU without its variant
HARDWARE = {"H100": ("h100-sxm", {}, "H100 variant not stated: h100-sxm"), "B200": ("b200", {}, "")}
#: CSV model text -> database model
MODELS = {"Qwen3-30B-A3B": "qwen3-30b-a3b", "Llama-3.1-8B": "llama-3.1-8b", "Llama-3.3-70B": "llama-3.3-70b",
          "Llama-3-8B": "llama-3.1-8b", "DeepSeek-R1": "deepseek-v3"}
#: CSV precision text -> weight dtype
PRECISION = {"bf16": "bf16", "fp16": "fp16", "nvfp4": "nvfp4"}
#: which rows fit each runtime's speculative costs (fits.FIT_PARAMETERS 'sglang', 'vllm'); the rest are held out
FIT_RULES = {
    "sglang": lambda row: "AngelSlim/issues/163" in row["source"] and row["batch_size"] == "1",
    "vllm": lambda row: "vllm/issues/20780" in row["source"] and row["steps"] in ("2", "4", "6"),
}
#: batch rows whose throughput is not a steady decode step (the batch drains: it finishes with its longest request)
DRAINED_BATCH = 8


class NotModelled(Exception):
    """A row the model cannot represent; the message is the reason shown in the table."""


def _lookup(table: dict[str, Any], key: str, what: str):
    if key not in table:
        raise NotModelled(f"no mapping for {what} {key!r} in dse/validation/spec_serving.py")
    return table[key]


def _lead(text: str) -> float:
    """The leading number of a cell ('~1000 [M: ...]' -> 1000)."""
    m = re.match(r"\s*~?\s*([0-9]*\.?[0-9]+)", text or "")
    if not m:
        raise NotModelled(f"no number in {text!r}")
    return float(m.group(1))


def case_fields(rid: str, row: dict[str, str]) -> dict[str, Any]:
    """A row of specdec_serving_measurements.csv as the fields of a held-out (or fit) speedup
    dse.validation.measurements.Case; NotModelled (with why) for a row the model cannot represent."""
    runtime = next((rt for key, rt in RUNTIMES if key in row["framework"]), None)
    if runtime is None:
        raise NotModelled(f"no runtime for framework {row['framework']!r} in dse/validation/spec_serving.py")
    batch, steps, topk, n = (int(row[c]) for c in ("batch_size", "steps", "topk", "num_draft_tokens"))
    if batch >= DRAINED_BATCH and "AngelSlim" in row["source"]:
        raise NotModelled(
            f"batch {batch}: the benchmark runs a batch of requests of different lengths to completion, so its "
            "throughput is the whole batch's tokens over its longest request (the baseline rows give 11.8, 28.4 and "
            "51.7 ms a step at batch 8, 32 and 64, where batch 4 gives 7.9 ms): not a steady decode step")
    hw, set_fields, hw_note = _lookup(HARDWARE, row["hardware"], "hardware")
    model = _lookup(MODELS, row["target_model"], "model")
    dtype = _lookup(PRECISION, row["precision"], "precision")
    prompt, output = int(_lead(row["prompt_len"])), int(_lead(row["output_len"]))
    method = row["draft_method"]
    mtp = method.startswith("MTP")
    draft = f"mtp:{steps}" if mtp else "eagle3" if "EAGLE-3" in method else "eagle"
    tree = 0 if topk == 1 else n - 1
    base_ms = batch * 1e3 / float(row["baseline_tok_s"])
    kv = dtype if dtype in ("bf16", "fp16") else "bf16"        # a 4-bit weight format keeps a 16-bit KV cache
    design = dict(hw=hw, target=model, chips=int(row["num_chips"]), dtype=dtype, kv_dtype=kv, prompt=prompt, output=output, batch=batch, runtime=runtime, draft=draft, k=steps,
                  tree_nodes=tree, tau=float(row["mean_accepted_length_tau"]), baseline_ms=round(base_ms, 4))
    ep = re.search(r"\bEP(\d+)", row["framework"])
    if ep and int(ep.group(1)) > 1:         # expert parallel: the routed experts over E ranks
        design["ep"] = int(ep.group(1))
    if set_fields:
        design["set_fields"] = dict(set_fields)
    shape = (f"a chain of {steps}" if not tree else
             f"the best {tree}-node tree of depth <= {steps} (top-k {topk}, {n} verified positions with the root)")
    notes = [f"{runtime} runtime; {shape}; tau {row['mean_accepted_length_tau']} as published",
             f"baseline anchored at the row's {base_ms:.3f} ms a step ({batch} x 1000 / {row['baseline_tok_s']} tok/s)",
             hw_note, f"prompt {prompt}, output {output}" + (" (estimates: see the row's notes)" if any(
                 m in row[c] for c in ("prompt_len", "output_len") for m in ("~", "[M")) else "")]
    if row["target_model"] == "Llama-3-8B":
        notes.append("Llama-3-8B has Llama-3.1-8B's shapes: llama-3.1-8b")
    if row["target_model"] == "DeepSeek-R1":
        notes.append("DeepSeek-R1 has DeepSeek-V3's shapes: deepseek-v3")
    if mtp:
        notes.append(f"--draft mtp:{steps}: the target's MTP module (a block, its projection, the shared LM head) run {steps} "
                     f"time{'s' if steps > 1 else ''} a step, inside the iteration")
    if "ep" in design:
        notes.append(f"expert parallel {design['ep']} (the row's framework)")
    if draft == "eagle3" and re.search(r"\bdense\b", method, re.I):
        notes.append("the head is dense; dse's EAGLE head is a layer of the target's shape (an MoE layer here: the "
                     "same weights read at batch 1, 8 experts of 768 against a 6,144-wide FFN)")
    group = next((g for g, rule in FIT_RULES.items() if rule(row)), "")
    return dict(id=rid, label=label(row), metric="speedup", measured=float(row["measured_speedup"]),
                role="fit" if group else "held-out", fit_group=group, design=design,
                note="; ".join(x for x in notes if x), source=row["source"])


def label(row: dict[str, str]) -> str:
    """A short label: stack, GPUs, target, draft and its shape, batch."""
    fw = row["framework"].split(" (")[0]
    return (f"{fw} {row['hardware']} x{row['num_chips']} {row['target_model']} + {row['draft_method'].split(' (')[0]} "
            f"steps {row['steps']} top-k {row['topk']} draft {row['num_draft_tokens']} B={row['batch_size']}")
