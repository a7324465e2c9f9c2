"""The draft trees serving frameworks build (MODEL.md section 3, "Framework trees"), as pure functions of
the rank probabilities p[d, r] (specdec.rank_matrix: P(the rank-(r+1) candidate of an accepted node at
depth d is the accepted one)). A node's score is its path probability, the product of p along its path:
the probability the target accepts it, the quantity dse's best tree ranks nodes by
(specdec.best_tree_nodes). A framework ranks by the draft's own cumulative probability; taking the
expected acceptance in its place models the tree it builds on average. tau = 1 + the sum of the chosen
nodes' path probabilities (specdec, MODEL.md section 3).

**SGLang** (sgl-project/sglang, commit 00731f0b, python/sglang/srt/speculative/spec_utils.py
``select_top_k_tokens``; eagle_utils.py ``organize_draft_results``; the draft loop ``draft_forward`` of
the EAGLE workers): step 1 takes the root's top-k children (their scores are the candidates of step 1);
each later step expands every frontier node by its top-k children (topk x topk candidates, score =
parent score x child probability) and keeps the top-k of those as the next frontier; after ``steps``
steps the tree is the root plus the top (num_draft_tokens - 1) of all topk + (steps-1) x topk^2
candidates by score. Draft forwards: the draft extend over the accepted tokens (the root's
distribution: one row here; dse.model.latency prices an EAGLE head's over the k+1 verified positions,
as SGLang pads it and as for its chains), then steps - 1 forwards of topk rows per request. EAGLE-2's reference code (SafeAILab/EAGLE commit 148042c5, eagle/model/cnets.py
``topK_genrate``: top_k, depth expansions after the first level, total_token) is the same algorithm with
steps = depth + 1 and tokens = total_token.

**TensorRT-LLM** EAGLE-3 dynamic tree (NVIDIA/TensorRT-LLM commit 057c8a65,
tensorrt_llm/_torch/speculative/eagle3_dynamic_tree.py ``_forward_draft_loop``,
``_select_topk_draft_tokens``, ``_resample_final_tokens``): the same selection with K =
dynamic_tree_max_topK over max_draft_len layers (K + K^2 (max_draft_len - 1) candidates, the top
max_total_draft_tokens kept). Its draft loop processes a "growing context": step 0 the accepted path
padded to max_draft_len + 1 rows, layer l (1..max_draft_len-1) all l x K drafted rows so far.

**vLLM** V1 EAGLE (vllm-project/vllm commit 008603a3, vllm/v1/spec_decode/eagle.py): a chain of
num_speculative_tokens (``propose``: the first forward over the accepted tokens, then one row per
step); with ``speculative_token_tree`` a static tree whose every node at level l-1 gets the top
child_drafts_per_level[l] children (``propose_tree``), each level's forward over all the tree's tokens
drafted so far (query_len = total_num_drafts).

A static tree (a fixed list of rank paths, EAGLE-1's mc_sim_7b_63 of SafeAILab/EAGLE
eagle/model/choices.py) is its paths' products, drafted level by level.
"""

from __future__ import annotations

import functools
import math
from itertools import product
from typing import NamedTuple

import numpy as np

from ..catalog.rank_profiles import GEOMETRIC, RankProfile
from ..workload.spec import AcceptanceSpec, Workload
from ..workload.trees import TreeSpec
from . import specdec
from .work import COUNTS


class BuiltTree(NamedTuple):
    """A framework's tree: its drafted nodes' path probabilities and depths (1 = a child of the root),
    in the order the framework selects them, and the rows per request each draft step processes."""

    values: np.ndarray
    depths: np.ndarray
    rows: tuple[int, ...]


def _ranks(p: np.ndarray, d: int, k: int) -> np.ndarray:
    """p[d, :k], ranks past the given ones 0."""
    out = np.zeros(k)
    m = min(k, p.shape[1])
    out[:m] = p[d, :m]
    return out


def topk_tree(p: np.ndarray, topk: int, steps: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """SGLang's (and EAGLE-2's, TensorRT-LLM's dynamic) tree: (values, depths) of the top tokens - 1 of
    the candidates of ``steps`` top-k expansions (the module docstring). Ties keep the earlier candidate
    (a parent precedes its children, so the chosen nodes always form a tree)."""
    cand = [_ranks(p, 0, topk)]
    frontier = cand[0]
    for s in range(1, steps):
        kids = (frontier[:, None] * _ranks(p, s, topk)[None, :]).ravel()
        cand.append(kids)
        frontier = kids[np.argsort(-kids, kind="stable")[:topk]]
    values = np.concatenate(cand)
    depths = np.concatenate([np.full(c.size, i + 1) for i, c in enumerate(cand)])
    pick = np.argsort(-values, kind="stable")[:tokens - 1]
    return values[pick], depths[pick]


def static_tree(p: np.ndarray, choices) -> tuple[np.ndarray, np.ndarray]:
    """A fixed tree of rank paths (EAGLE-1's choices, vLLM's speculative_token_tree): each node's
    product of p[depth, rank] along its path."""
    values = np.array([math.prod(float(_ranks(p, d, r + 1)[r]) for d, r in enumerate(c)) for c in choices])
    return values, np.array([len(c) for c in choices])


def build(spec: TreeSpec, p: np.ndarray) -> BuiltTree:
    """The tree ``spec``'s framework builds under rank probabilities ``p`` (at least spec.depth rows),
    with the rows per request of each of its draft steps (the first: one for a draft that needs no
    extend; an EAGLE head's extend is priced over the k+1 verified positions by dse.model.latency)."""
    fw, D = spec.framework, spec.depth
    if spec.is_chain:                   # every framework's chain: k steps of one row
        return BuiltTree(np.cumprod(_ranks(p.T, 0, D)) if D else np.zeros(0), np.arange(1, D + 1), (1,) * D)
    if fw in ("sglang", "trtllm"):
        values, depths = topk_tree(p, spec.topk, D, spec.tokens)
        rows = (1,) + (spec.topk,) * (D - 1) if fw == "sglang" else \
            (D + 1,) + tuple(layer * spec.topk for layer in range(1, D))
        return BuiltTree(values, depths, rows)
    if fw == "vllm":
        choices = [c for level in range(1, D + 1) for c in product(*(range(b) for b in spec.branches[:level]))]
        values, depths = static_tree(p, choices)
        per_level = np.cumprod(spec.branches)
        return BuiltTree(values, depths, (1,) + tuple(int(x) for x in np.cumsum(per_level)[:D - 1]))
    if fw == "static":
        values, depths = static_tree(p, spec.choices)
        per_level = np.bincount(depths, minlength=D + 1)[1:]
        return BuiltTree(values, depths, (1,) + tuple(int(x) for x in per_level[:D - 1]))
    raise ValueError(f"framework tree: unknown framework {fw!r}")


def ranks_needed(spec: TreeSpec) -> int:
    """How many ranks the framework's tree reads at each depth."""
    if spec.choices:
        return 1 + max(max(c) for c in spec.choices)
    return max(spec.branches) if spec.branches else max(spec.topk, 1)


class FrameworkTable(NamedTuple):
    """A framework tree's acceptance terms (specdec.TreeTable's, for the one tree): tau; P(the
    accepted path reaches its deepest level); that times the rank-1 rate one level further (the
    overlap window); nodes per depth and rows per draft step, each of length depth."""

    tau: float
    p_deepest: float
    p_window: float
    shape: np.ndarray
    rows: np.ndarray


def framework_table(p: np.ndarray, spec: TreeSpec) -> FrameworkTable:
    """FrameworkTable of ``spec``'s tree under ``p`` (spec.depth + 1 rows: the last is the level after
    the deepest, for the window); computed once per distinct (p, spec), like specdec.tree_table."""
    COUNTS["tables"] += 1
    return _table_cached((p.shape, p.tobytes(), spec))


@functools.lru_cache(maxsize=1024)
def _table_cached(key) -> FrameworkTable:
    shape_p, raw, spec = key
    p = np.frombuffer(raw, dtype=np.float64).reshape(shape_p)
    t = build(spec, p)
    D = spec.depth
    shape = np.bincount(t.depths, minlength=D + 1)[1:D + 1].astype(np.int16)
    deepest = int(t.depths.max()) if t.depths.size else 0
    p_deep = float(t.values[t.depths == deepest].sum()) if deepest else 1.0
    first = float(np.max(p[deepest])) if p.size else 0.0
    rows = np.zeros(D, dtype=np.int64)
    rows[:len(t.rows)] = t.rows
    out = FrameworkTable(1.0 + float(t.values.sum()), p_deep, p_deep * first, shape, rows)
    out.shape.flags.writeable = out.rows.flags.writeable = False
    return out


def implied_alpha(tau: float, spec: TreeSpec, profile: RankProfile | None = None, iters: int = 50) -> float:
    """The top-1 rate whose framework tree under the rank ``profile`` (None: geometric) has this tau,
    by bisection (tau rises with it): the shape of a tree whose tau is given."""
    prof = profile or GEOMETRIC
    return specdec.rate_for_tau(tau, lambda rate: framework_table(
        np.tile(prof.probabilities(np.array([rate]), ranks_needed(spec)), (spec.depth + 1, 1)), spec).tau, iters)


def framework_terms(w: Workload, acc: AcceptanceSpec, shape, K: int):
    """tau, P(deepest), P(window), nodes per depth (..., K) and rows per draft step (..., K) of the
    workload's framework tree (w.tree) for acceptance ``acc`` (not a mixture), broadcast to ``shape``:
    the same tree at every depth bound (a framework's tree has its own depth)."""
    spec = w.tree
    D = spec.depth
    if acc.kind == "tau":
        acc_p = AcceptanceSpec(kind="alpha", alpha=implied_alpha(acc.tau, spec, w.rank_profile))
    else:
        acc_p = acc
    t = framework_table(specdec.rank_matrix(acc_p, D + 1, ranks_needed(spec), w.rank_profile), spec)
    tau = acc.tau if acc.kind == "tau" else t.tau
    shape_k, rows_k = np.zeros(K, dtype=np.int64), np.zeros(K, dtype=np.int64)
    shape_k[:min(D, K)], rows_k[:min(D, K)] = t.shape[:K], t.rows[:K]
    full = lambda v: np.full(shape, v)       # noqa: E731
    return (full(tau), full(t.p_deepest), full(t.p_window), np.broadcast_to(shape_k, tuple(shape) + (K,)),
            np.broadcast_to(rows_k, tuple(shape) + (K,)))
