"""What a drafter is made of, in parameters: the EAGLE head (one decoder layer of the target's
shape) and its input fc, and a Medusa (or Hydra) head (MODEL.md section 3). Both the capacity
check and the draft's cost are built from these."""

from __future__ import annotations

import dataclasses

from ..catalog.specs import ModelSpec
from ..workload.spec import EAGLE3_DRAFT_VOCAB


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


def medusa_head_params(target: ModelSpec) -> int:
    """One Medusa head: a residual block Linear(d -> d) and its own LM head d*V (arXiv 2401.10774)."""
    return target.hidden_size ** 2 + target.hidden_size * target.vocab_size
