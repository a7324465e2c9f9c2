"""Which draft tree a serving framework builds (``tree:`` in a study, ``--tree`` of `dse eval`), parsed
and checked once. dse.model.framework_trees builds the tree from these parameters; dse prices and
credits that tree (MODEL.md section 3, "Framework trees").

    best                                  the best tree of each size (dse's default; specdec.best_tree_nodes)
    sglang[:topk=K,steps=S,tokens=N]      SGLang's EAGLE tree: --speculative-eagle-topk K,
                                          --speculative-num-steps S, --speculative-num-draft-tokens N
                                          (N verified tokens, the root included); defaults 4, 5, 8
    vllm[:k=N]                            vLLM's chain of N drafts (num_speculative_tokens; k auto without N)
    vllm:tree=AxBxC                       vLLM V1 EAGLE's static speculative_token_tree: A children of the
                                          root, B of each of those, ... (its tree is uniform per level)
    trtllm:draft_len=D                    TensorRT-LLM's linear draft of D tokens (max_draft_len)
    trtllm:topk=K,draft_len=D,draft_tokens=N
                                          its EAGLE-3 dynamic tree: dynamic_tree_max_topK K, max_draft_len D
                                          layers, max_total_draft_tokens N (the root excluded; default
                                          K x D, as TensorRT-LLM's)

>>> parse_tree("sglang:topk=2,steps=3,tokens=5").label
'sglang:topk=2,steps=3,tokens=5'
>>> parse_tree("vllm:k=3").depth, parse_tree("vllm:k=3").nodes
(3, 0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError

#: the widest top-k a framework tree takes (SGLang and TensorRT-LLM's examples use 4-10; Sequoia's
#: widest level is 32 wide at most) and the deepest (dse.workload.spec.K_LIMIT)
TOPK_MAX = 64
DEPTH_MAX = 32
#: the largest tree (dse.workload.spec.TREE_NODES_MAX)
NODES_MAX = 1024
#: SGLang's defaults when a parameter is not given: speculative_num_steps 5, speculative_eagle_topk 4,
#: speculative_num_draft_tokens 8 (docs/advanced_features/speculative_decoding of sgl-project/sglang:
#: "Default is 5 / 4 / 8"; server_args.auto_choose_speculative_params returns (5, 4, 8) for Llama and
#: for any other architecture)
SGLANG_DEFAULTS = {"steps": 5, "topk": 4, "tokens": 8}
FRAMEWORKS = ("best", "sglang", "vllm", "trtllm")
_KEYS = {"sglang": ("topk", "steps", "tokens"), "vllm": ("k", "tree"), "trtllm": ("topk", "draft_len", "draft_tokens")}
_ALLOWED = ("expected best, sglang[:topk=K,steps=S,tokens=N], vllm[:k=N], vllm:tree=AxBxC, trtllm:draft_len=D "
            "or trtllm:topk=K,draft_len=D,draft_tokens=N")


@dataclass(frozen=True, slots=True)
class TreeSpec:
    """A framework's draft tree (dse.model.framework_trees builds it): ``framework`` 'sglang', 'vllm',
    'trtllm' or 'static' (a fixed list of rank paths, ``choices``: the table's EAGLE-1 rows).
    ``depth`` is the draft steps (the tree's depth; a chain's k; 0 = k auto), ``tokens`` the tokens
    verified per request, the root included; ``topk`` the top-k of a dynamic tree, ``branches`` the
    children per node at each level of vLLM's static tree. A chain (``nodes`` 0) is priced and
    credited as dse's chain of ``depth`` drafts."""

    framework: str
    depth: int = 0
    tokens: int = 0
    topk: int = 0
    branches: tuple[int, ...] = ()
    choices: tuple[tuple[int, ...], ...] = ()
    label: str = ""

    @property
    def is_chain(self) -> bool:
        return self.topk <= 1 and not self.branches and not self.choices

    @property
    def nodes(self) -> int:
        """Drafted nodes (the root excluded); 0 for a chain."""
        return 0 if self.is_chain else self.tokens - 1


BEST = TreeSpec(framework="best", label="best")
#: EAGLE-1's default static tree mc_sim_7b_63 (SafeAILab/EAGLE eagle/model/choices.py): 25 nodes, 4-8-8-3-2
#: per depth, ranks 1-4 (hardware_db/acceptance/rank_profiles.yaml profiles.eagle.fit.tree holds the same list)
EAGLE1_MC_SIM_7B_63 = ((0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
                       (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
                       (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1))
#: EAGLE-1's published tree as a framework tree (a static one)
EAGLE1_TREE = TreeSpec(framework="static", depth=5, tokens=26, choices=EAGLE1_MC_SIM_7B_63, label="eagle1:mc_sim_7b_63")
#: the top_k of EAGLE-2's reference code (SafeAILab/EAGLE eagle/evaluation/gen_ea_answer_*.py; the paper's setting)
EAGLE2_TOP_K = 10


def eagle2_tree(nodes: int, depth: int = 6) -> TreeSpec:
    """EAGLE-2's dynamic tree of ``nodes`` drafted nodes over ``depth`` levels (its code's depth is the
    expansions after the first level: depth - 1), top_k 10: SGLang's algorithm with steps = depth,
    tokens = nodes + 1 (SafeAILab/EAGLE eagle/model/cnets.py topK_genrate; dse.model.framework_trees)."""
    return TreeSpec(framework="sglang", depth=depth, tokens=nodes + 1, topk=EAGLE2_TOP_K,
                    label=f"eagle2:top_k={EAGLE2_TOP_K},depth={depth - 1},total_token={nodes + 1}")


def _int(where: str, key: str, raw: str, lo: int, hi: int, path: str | None) -> int:
    try:
        val = int(raw)
    except ValueError:
        val = None
    if val is None or not lo <= val <= hi:
        raise SpecError(path, f"{where} {key}", raw, f"expected an integer in [{lo}, {hi}]")
    return val


def parse_tree(value: Any, where: str = "--tree", path: str | None = None) -> TreeSpec:
    """'best', 'sglang:topk=4,steps=3,tokens=8', 'vllm:k=3', 'vllm:tree=2x2x1', 'trtllm:draft_len=3',
    'trtllm:topk=10,draft_len=4,draft_tokens=63' -> TreeSpec; SpecError naming the field and its range."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(path, where, value, _ALLOWED)
    text = value.strip().lower()
    fw, _, rest = text.partition(":")
    fw = fw.strip()
    if fw not in FRAMEWORKS or (fw == "best" and rest):
        raise SpecError(path, where, value, _ALLOWED)
    if fw == "best":
        return BEST
    given: dict[str, str] = {}
    for part in (p for p in rest.split(",") if p.strip()):
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or key not in _KEYS[fw]:
            raise SpecError(path, f"{where} {fw}", part.strip(), f"expected key=value with key one of "
                            f"{', '.join(_KEYS[fw])}")
        if key in given:
            raise SpecError(path, f"{where} {fw}:{key}", val.strip(), "given twice")
        given[key] = val.strip()
    name = lambda key: f"{fw}:{key}"      # noqa: E731 - the field as the user wrote it
    if fw == "sglang":
        vals = {k: _int(where, name(k), given[k], lo, hi, path) if k in given else SGLANG_DEFAULTS[k]
                for k, lo, hi in (("topk", 1, TOPK_MAX), ("steps", 1, DEPTH_MAX), ("tokens", 2, NODES_MAX + 1))}
        topk, steps, tokens = vals["topk"], vals["steps"], vals["tokens"]
        if topk == 1:       # SGLang: "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1"
            if "tokens" in given and tokens != steps + 1:
                raise SpecError(path, f"{where} {name('tokens')}", tokens, f"with topk=1 SGLang drafts a chain of "
                                f"steps = {steps} tokens: expected {steps + 1} (steps + 1), or no tokens")
            tokens = steps + 1
        cands = topk + (steps - 1) * topk * topk     # the root's top-k, then top-k x top-k per later step
        if tokens - 1 > cands:
            raise SpecError(path, f"{where} {name('tokens')}", tokens, f"expected an integer in [2, {cands + 1}]: "
                            f"topk={topk} over steps={steps} drafts {cands} candidates (topk + (steps-1) x topk^2)")
        label = f"sglang:topk={topk},steps={steps},tokens={tokens}"
        return TreeSpec(framework="sglang", depth=steps, tokens=tokens, topk=topk, label=label)
    if fw == "vllm":
        if "k" in given and "tree" in given:
            raise SpecError(path, f"{where} vllm", value, "give k (a chain) or tree (a static tree), not both")
        if "tree" in given:
            parts = given["tree"].split("x")
            branches = tuple(_int(where, name("tree"), b, 1, TOPK_MAX, path) for b in parts)
            if len(branches) > DEPTH_MAX:
                raise SpecError(path, f"{where} {name('tree')}", given["tree"], f"expected at most {DEPTH_MAX} levels")
            nodes = sum(math.prod(branches[:i + 1]) for i in range(len(branches)))
            if nodes > NODES_MAX:
                raise SpecError(path, f"{where} {name('tree')}", given["tree"], f"expected a tree of at most "
                                f"{NODES_MAX} nodes (this one has {nodes})")
            if all(b == 1 for b in branches):       # a chain written as a tree
                return TreeSpec(framework="vllm", depth=len(branches), tokens=len(branches) + 1,
                                label=f"vllm:k={len(branches)}")
            return TreeSpec(framework="vllm", depth=len(branches), tokens=nodes + 1, branches=branches,
                            label=f"vllm:tree={'x'.join(map(str, branches))}")
        k = _int(where, name("k"), given["k"], 1, DEPTH_MAX, path) if "k" in given else 0
        return TreeSpec(framework="vllm", depth=k, tokens=k + 1 if k else 0, label=f"vllm:k={k}" if k else "vllm")
    # trtllm
    topk = _int(where, name("topk"), given["topk"], 1, TOPK_MAX, path) if "topk" in given else 0
    if "draft_len" not in given:
        raise SpecError(path, f"{where} {name('draft_len')}", "missing", f"expected max_draft_len, an integer in "
                        f"[1, {DEPTH_MAX}] (TensorRT-LLM has no default)")
    d = _int(where, name("draft_len"), given["draft_len"], 1, DEPTH_MAX, path)
    if topk <= 1:
        if "draft_tokens" in given and _int(where, name("draft_tokens"), given["draft_tokens"], 1, NODES_MAX, path) != d:
            raise SpecError(path, f"{where} {name('draft_tokens')}", given["draft_tokens"], f"a linear draft "
                            f"(no topk) verifies draft_len = {d} tokens: expected {d}, or no draft_tokens")
        return TreeSpec(framework="trtllm", depth=d, tokens=d + 1, label=f"trtllm:draft_len={d}")
    cands = topk + (d - 1) * topk * topk        # TensorRT-LLM's history buffer: K + K^2 (max_draft_len - 1)
    # max_total_draft_tokens: at least max_draft_len; TensorRT-LLM's default dynamic_tree_max_topK x max_draft_len
    n = _int(where, name("draft_tokens"), given["draft_tokens"], d, min(cands, NODES_MAX), path) \
        if "draft_tokens" in given else min(topk * d, NODES_MAX)
    return TreeSpec(framework="trtllm", depth=d, tokens=n + 1, topk=topk,
                    label=f"trtllm:topk={topk},draft_len={d},draft_tokens={n}")


#: the drafters each framework builds a tree for: SGLang's EAGLE workers and its STANDALONE draft
#: model share the top-k tree; TensorRT-LLM's dynamic tree and vLLM's static tree are EAGLE's
TREE_DRAFTERS = {"sglang": ("eagle", "model"), "trtllm": ("eagle",), "vllm": ("eagle",)}


def check_tree(spec: TreeSpec, drafter, *, k_given, tree_nodes_given: bool, where: str = "--tree",
               k_name: str = "--k", nodes_name: str = "--tree-nodes", draft_name: str = "--draft",
               path: str | None = None) -> list[SpecError]:
    """The rules between a framework's tree and the drafter, k and a tree size: the tree fixes both
    (its depth and nodes), it needs a drafter, and a framework builds trees for its own drafters only.
    ``k_given``: the k given (None or False: none)."""
    if spec.framework == "best":
        return []
    if drafter.kind == "none":
        return [SpecError(path, where, spec.label, f"a framework's tree or chain needs a drafter ({draft_name})")]
    out = []
    if tree_nodes_given:
        out.append(SpecError(path, nodes_name, "given", f"{where} {spec.label} fixes the tree: give one of the two"))
    if k_given not in (None, False) and spec.depth:
        out.append(SpecError(path, k_name, k_given, f"{where} {spec.label} drafts {spec.depth} steps (its depth): "
                             "give no k"))
    if not spec.is_chain and drafter.kind not in TREE_DRAFTERS[spec.framework]:
        kinds = " and ".join(TREE_DRAFTERS[spec.framework])
        out.append(SpecError(path, where, spec.label, f"{spec.framework} builds this tree for {kinds} drafters; "
                             f"{drafter.label} is a {drafter.kind} drafter: use a chain (sglang:topk=1, vllm:k=N, "
                             "trtllm:draft_len=D) or best"))
    return out
