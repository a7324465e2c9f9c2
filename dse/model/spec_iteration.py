"""What a serving stack does in a speculative iteration besides the draft passes and the target's
verify pass (MODEL.md section 3, 'The iteration as serving stacks run it'): the verification's
sampling over the verified positions' logits, and the host work the stack does not overlap with
the GPU. The draft extend pass (the EAGLE head re-run over the accepted tokens) is a draft pass,
priced with the others in dse.model.latency; the tree mask is priced in the verify pass
(dse.model.roofline.pass_cost: every position attends to the whole tree, plus the runtime's
tree_kernels_per_layer).

Arrays broadcast as in dse.model.latency: (n, 1) hardware columns against (1, K) k candidates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: bytes of one logit as the samplers read it (fp32: SGLang's LogitsProcessor and vLLM's sampler
#: turn the LM head's output to float32 before softmax, argmax and the tree-greedy / rejection kernels)
LOGIT_BYTES = 4.0


class IterationExtras(NamedTuple):
    """Seconds and energy of an iteration's work outside its draft and verify passes."""

    time_s: np.ndarray       # on the critical path of every iteration
    fixed_s: np.ndarray      # the software's share of it (host work, per-iteration kernels)
    sample_bytes: np.ndarray  # bytes per chip the verification's sampling moves
    energy_j: np.ndarray     # the whole group's memory energy of those bytes


def verify_sampling_bytes(vocab: int, batch, q):
    """Bytes per chip that verification sampling moves: the verify pass's LM head writes B x q x V
    logits and the sampler reads them back (softmax / argmax, then the tree-greedy or rejection
    kernel over the q positions of each sequence): 2 x B x q x V x LOGIT_BYTES. Every tensor-parallel
    rank gathers the whole vocabulary and samples it (SGLang LogitsProcessor, vLLM Sampler), so the
    bytes do not divide by the chips. Plain decoding moves the same for its one position per
    sequence; that is inside the fitted per-step costs and not added here.

    Llama-3.1-8B (V = 128,256), B = 1, q = 64 (SGLang's 64 draft tokens): 2 x 64 x 128,256 x 4 =
    65.7 MB, 23.6 us at 2.78 TB/s (an H100's 3.35 TB/s x 0.83); at B = 64, q = 8: 525 MB, 189 us."""
    return 2.0 * np.asarray(batch, dtype=np.float64) * np.asarray(q, dtype=np.float64) * vocab * LOGIT_BYTES


def iteration_extras(hw, vocab: int, batch, q) -> IterationExtras:
    """The iteration's costs beside its passes on the target group ``hw``:

    T_extra = t_spec + t_sched + bytes_sample / (BW x eta_mem)

    t_spec = hw.spec_overhead_s: the GPU-side kernels of acceptance and bookkeeping (tree build and
    mask, the verify kernel, accepted lengths, KV slot frees), launched once per iteration;
    t_sched = hw.spec_schedule_s: the host work of an iteration the stack does not overlap with
    the GPU. Plain decoding in SGLang, vLLM and TensorRT-LLM overlaps the scheduling of step n+1
    with step n (SGLang v0.4's zero-overhead scheduler, lmsys.org/blog/2024-12-04-sglang-v0-4;
    TensorRT-LLM's overlap scheduler), so the baseline step does not pay it; SGLang turns its
    overlap scheduler off for EAGLE and EAGLE-3 ('Overlap scheduler is disabled because of using
    eagle speculative decoding', python/sglang/srt/server_args.py, through v0.5.x unless
    SGLANG_ENABLE_SPEC_V2), so every speculative iteration waits for it;
    bytes_sample = verify_sampling_bytes(V, B, q) at the group's streaming rate."""
    nbytes = verify_sampling_bytes(vocab, batch, q)
    t_sample = nbytes / (hw.mem_bw_bytes_s * hw.mem_efficiency)
    fixed = hw.spec_overhead_s + hw.spec_schedule_s
    energy = np.asarray(hw.chips, dtype=np.float64) * nbytes * getattr(hw, "mem_j_per_byte", np.nan)
    return IterationExtras(fixed + t_sample, fixed + 0.0 * t_sample, nbytes, energy)
