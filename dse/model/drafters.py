"""What a drafter is made of, in parameters: the EAGLE head (one decoder layer of the target's
shape) and its input fc, a multi-token-prediction (MTP) module (one block of the target's own kind
and its projection), a Medusa (or Hydra) head (MODEL.md section 3), and the tensor parallel a
draft model runs at. Both the capacity check and the draft's cost are built from these."""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from ..catalog.specs import ModelSpec
from ..workload.spec import EAGLE3_DRAFT_VOCAB, DrafterSpec, shards_attention
from .transformer import non_embedding_params


def eagle_head(target: ModelSpec, method: str = "eagle") -> ModelSpec:
    """EAGLE draft head: one decoder layer of the target's shape (Li et al. 2024, arXiv
    2401.15077); its fc is added by the caller (eagle_fc_params); the LM head is the target's,
    but EAGLE-3's own over its 32K draft vocabulary (arXiv 2503.01840; EAGLE3_DRAFT_VOCAB)."""
    vocab = EAGLE3_DRAFT_VOCAB if method == "eagle3" else target.vocab_size
    return dataclasses.replace(target, name=target.name + "-eagle-head", kind="eagle-head", vocab_size=vocab,
                               num_layers=1, first_dense_layers=min(1, target.first_dense_layers))


def eagle_fc_params(target: ModelSpec, method: str = "eagle") -> int:
    """The head's input fc: 2d -> d on [feature, token embedding] (EAGLE-1/2), 3d -> d on the
    fused low, middle and high features (EAGLE-3)."""
    return (3 if method == "eagle3" else 2) * target.hidden_size ** 2


def mtp_block(target: ModelSpec) -> ModelSpec:
    """One MTP module's transformer block: a layer of the target's own kind (DeepSeek-V3: MLA and a
    routed MoE FFN with the shared expert, not one of the first dense layers), run on the projected
    [hidden state, next token's embedding]; the embedding and output head are the target's, shared
    (DeepSeek-V3 technical report, arXiv 2412.19437 section 2.2; README_WEIGHTS.md of
    deepseek-ai/DeepSeek-V3: model.layers.61, "structure identical to the Main Model hidden layers").
    Its projection eh_proj is added by the caller (mtp_proj_params)."""
    return dataclasses.replace(target, name=target.name + "-mtp", num_layers=1, first_dense_layers=0, mtp_layers=0)


def mtp_proj_params(target: ModelSpec) -> int:
    """An MTP module's eh_proj: 2d -> d on [RMSNorm(hidden state), RMSNorm(embedding)] (arXiv
    2412.19437 eq. 21): DeepSeek-V3 2 x 7168^2 = 102.8M."""
    return 2 * target.hidden_size ** 2


def mtp_params(target: ModelSpec) -> int:
    """Weights one MTP module holds on the device: its block (every expert) + eh_proj, no embedding or
    head of its own. DeepSeek-V3: 11,507,269,632 + 102,760,448 = 11.61B (README_WEIGHTS.md: 11.5B
    unique parameters; the checkpoint's copies of the embedding and head, 2 x 0.93B, make the card's 14B)."""
    return non_embedding_params(mtp_block(target)) + mtp_proj_params(target)


def medusa_head_params(target: ModelSpec) -> int:
    """One Medusa head: a residual block Linear(d -> d) and its own LM head d*V (arXiv 2401.10774)."""
    return target.hidden_size ** 2 + target.hidden_size * target.vocab_size


#: chip counts the tables of ``draft_tp`` cover at first (the study knob's largest, 1024)
_TP_TABLE_CHIPS = 1024


@lru_cache(maxsize=64)
def _tp_table(heads: int, kv_heads: int, mla: bool, size: int) -> np.ndarray:
    """tp[c] for c = 0..size-1: the largest t dividing c that splits the attention (each t that
    does written onto its multiples, smallest first); tp[0] = 1 (unused)."""
    m = SimpleNamespace(num_attention_heads=heads, num_kv_heads=kv_heads, kv_lora_rank=int(mla))
    tp = np.ones(size, dtype=np.int64)
    for t in range(2, min(heads, size - 1) + 1):
        if shards_attention(m, t):
            tp[t::t] = t
    tp.flags.writeable = False
    return tp


def draft_tp(d: DrafterSpec, chips):
    """Tensor parallel of the draft's steps on a group of ``chips`` chips, per row: a draft model
    at the largest t' that divides the chip count and splits its attention heads
    (workload.spec.draft_tensor_parallel, as vLLM and SGLang serve such a draft: 1 at worst); a
    drafter made of the target's own layers (EAGLE, MTP, early exit, Medusa, Hydra heads) at the
    group's chips; 0 where nothing drafts on the device (none, n-gram, retrieval). Qwen2.5-0.5B
    (14 heads, 2 KV heads) beside 8 chips: 2, beside 14: 14; Qwen2.5-1.5B (12 heads) beside 8: 4."""
    c = np.asarray(chips, dtype=np.int64)
    if d.kind in ("none", "ngram"):
        return np.zeros(c.shape, dtype=np.int64)
    if d.kind != "model":
        return c
    m = d.model
    key = (m.num_attention_heads, m.num_kv_heads, bool(m.kv_lora_rank))
    top = int(c.max()) if c.size else 0
    table = _tp_table(*key, max(_TP_TABLE_CHIPS, top) + 1)
    return table.take(c)
