"""The workload: drafter, acceptance and k, parsed and cross-checked once for `dse eval` and studies.

``parse_drafter`` and ``make_acceptance`` turn names and numbers into specs;
``check_workload`` holds every rule that ties the drafter, the acceptance, k, the tree and
the draft chip together (MODEL.md section 3), with the caller's own field names in messages.

>>> make_acceptance(alpha=0.8).describe()
'alpha=0.8 (i.i.d. conditional per token)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..catalog.fields import Range, as_number
from ..catalog.rank_profiles import RankProfile
from ..catalog.specs import ModelSpec
from ..errors import SpecError
from .trees import EAGLE1_TREE, TreeSpec, eagle2_tree

if TYPE_CHECKING:   # the database loader pulls in yaml; the model imports this module
    from ..catalog.database import Database

#: the largest k (drafted tokens per iteration) anywhere: 0.9**33 = 0.03, so for alpha <= 0.9 a
#: longer chain adds under 3% to tau (Leviathan et al. 2023, eq. 1), and published chains and
#: trees stay far below it (EAGLE-2 depth 6-8, Medusa 5 heads, Sequoia depth <= 16)
K_LIMIT = 32
K_RANGE = Range(integer=True, lo=1, hi=K_LIMIT)
#: the largest draft tree: Sequoia's largest published tree has 768 nodes (Chen et al. 2024,
#: arXiv 2402.12374); the best-tree table for 1024 nodes stays small (tests/model/test_trees.py)
TREE_NODES_MAX = 1024
_FROZEN = dict(frozen=True, slots=True, kw_only=True)

#: how a drafter costs (MODEL.md section 3): what dse.model.latency computes per kind
DRAFTER_KINDS = ("none", "model", "ngram", "early-exit", "eagle", "mtp", "medusa", "hydra")
#: the published method behind each --draft spelling (its acceptance in dse.acceptance.fit, its
#: default shape in DEFAULT_SHAPES) -> the kind it costs as. EAGLE-2 drafts with EAGLE-1's head
#: (Li et al. 2024, arXiv 2406.16858); EAGLE-3's head is one decoder layer too, on a fusion of
#: three of the target's layers, with its own LM head over a 32K draft vocabulary (arXiv
#: 2503.01840; hardware_db/models/eagle3-llama3.1-8b.yaml); Hydra's heads are Medusa-style
#: heads run one after another (each takes the previous head's token: Ankner et al. 2024, arXiv
#: 2402.05109); retrieval (REST, He et al. 2023, arXiv 2311.08252) is a host-side lookup like
#: prompt lookup, with a datastore in host memory. MTP drafts with the target's own
#: multi-token-prediction module (DeepSeek-V3, arXiv 2412.19437 section 2.2), chained: the
#: serving frameworks run its one module N times (SGLang's EAGLE worker, TensorRT-LLM's "MTP
#: Eagle", vLLM's deepseek_mtp), each step the module's block, its eh_proj and the shared LM head.
METHOD_KINDS = {"none": "none", "model": "model", "ngram": "ngram", "retrieval": "ngram", "early-exit": "early-exit",
                "eagle": "eagle", "eagle2": "eagle", "eagle3": "eagle", "mtp": "mtp", "medusa": "medusa",
                "hydra": "hydra"}
#: EAGLE-3's draft vocabulary (its own LM head: draft_vocab_size in SafeAILab/EAGLE
#: eagle/traineagle3/config.json)
EAGLE3_DRAFT_VOCAB = 32000
#: Hydra's heads per checkpoint (hydra_num_heads = 4 in the Hydra code, model/hydra/hydra_model.py of
#: Spec-Bench's copy) when `hydra` is given without :H
HYDRA_HEADS = 4


@dataclass(frozen=True)
class DraftShape:
    """A method's published default: a tree of ``nodes`` drafted nodes (root excluded) and
    depth ``depth``, or (nodes 0) a chain with k = auto; ``tree`` the tree its code builds (priced
    and credited as built: dse.model.framework_trees), None = dse's best tree of that size."""

    nodes: int
    depth: int
    source: str
    tree: TreeSpec | None = None


#: the default tree of each tree method, used when neither k nor a tree size is given (--k,
#: --tree-nodes; workload.k, space.k, workload.tree_nodes). Chain methods (a draft model,
#: prompt lookup, early exit) have no single published k: k = auto.
DEFAULT_SHAPES = {
    "eagle": DraftShape(25, 5, "EAGLE-1's static tree mc_sim_7b_63: 4-8-8-3-2 nodes per depth "
                               "(SafeAILab/EAGLE eagle/model/choices.py)", EAGLE1_TREE),
    "eagle2": DraftShape(59, 6, "EAGLE-2's dynamic tree: total_token 60 (the root + 59 drafted), depth 5 "
                                "expansions after the first level (6 levels), top_k 10 (SafeAILab/EAGLE "
                                "eagle/evaluation/gen_ea_answer_*.py defaults; the paper's 60 tokens, depth 6)",
                       eagle2_tree(59)),
    "eagle3": DraftShape(59, 6, "EAGLE-3 evaluated as EAGLE-2: total_token 60, depth 5 (+1 level), top_k 10 "
                                "(SafeAILab/EAGLE eagle/evaluation/gen_ea_answer_llama3chat.py; the library "
                                "default of ea_model.py is depth 7)", eagle2_tree(59)),
    "medusa": DraftShape(63, 4, "Medusa's tree mc_sim_7b_63: 10-28-23-2 nodes per depth (medusa_choices.py "
                                "of the Medusa code, as Spec-Bench runs it)"),
    "hydra": DraftShape(63, 4, "Hydra's tree mc_sim_7b_63: 10-28-23-2 nodes per depth (hydra_choices.py)"),
    "retrieval": DraftShape(64, 10, "REST: up to 64 draft tokens from the retrieved continuations, each at most "
                                    "10 long (num_draft 64; DraftRetriever search 'long' 10)"),
}

#: the smaller trees a tree method may shrink to (0 = a chain), with its published tree as the
#: largest (DrafterSpec.tree_choices): the serving frameworks shrink the tree, or stop
#: speculating, as the batch grows. SGLang's EAGLE default verifies 8 draft tokens (top-k 4, 5
#: steps) where the EAGLE papers verify 60, and bench_speculative.py tunes them per batch; vLLM
#: switches speculation off past a batch size (speculative_disable_by_batch_size, vLLM PR 4592);
#: TensorRT-LLM's runtime controls shorten the draft or switch it off as the batch grows. One
#: candidate per doubling of the verify positions, from 4 to 32 nodes.
TREE_CHOICES = (0, 4, 8, 16, 32)


@dataclass(**_FROZEN)
class DrafterSpec:
    """How drafts are proposed (MODEL.md section 3). ``model`` is set for kind 'model';
    ``method`` is the published method (METHOD_KINDS): eagle2 and eagle3 cost as kind eagle (eagle3
    with its own fc and LM head), retrieval as kind ngram."""

    kind: str
    label: str                        # as the user wrote it: 'llama-3.2-1b', 'eagle', 'medusa:4'
    model: ModelSpec | None = None
    exit_layer: int = 0               # early-exit:L
    heads: int = 0                    # medusa:H, hydra:H; mtp:N the N chained MTP steps (0: k auto)
    method: str = ""                  # '' = the kind itself
    checkpoint: str = ""              # eagle3:<id>: a draft checkpoint of hardware_db/acceptance/checkpoints.yaml

    @property
    def can_use_draft_chip(self) -> bool:
        """Only an independent model can live on a separate chip; the others need the
        target's hidden states or cost nothing."""
        return self.kind == "model"

    @property
    def k_cap(self) -> int:
        """The most tokens one iteration may draft: one per Medusa or Hydra head (H), one per chained
        step of mtp:N (N); 0 = no cap of the drafter's own."""
        return self.heads if self.kind in ("medusa", "hydra", "mtp") else 0

    @property
    def meth(self) -> str:
        """The published method (the kind where none is set)."""
        return self.method or self.kind

    def default_shape(self) -> DraftShape | None:
        """The method's published default tree (DEFAULT_SHAPES), its depth within the heads
        of medusa:H / hydra:H; None for chain methods."""
        s = DEFAULT_SHAPES.get(self.meth)
        if s is None or not self.heads or s.depth <= self.heads:
            return s
        return DraftShape(s.nodes, self.heads, s.source + f"; depth cut to the {self.heads} heads")

    def tree_choices(self) -> tuple[int, ...]:
        """The tree sizes (0 = a chain) a tree method is re-chosen from per design when neither k nor
        a tree size is given: TREE_CHOICES below its published tree, then the published tree (its
        largest); () for chain methods."""
        s = self.default_shape()
        return () if s is None else tuple(c for c in TREE_CHOICES if c < s.nodes) + (s.nodes,)


@dataclass(**_FROZEN)
class AcceptanceSpec:
    """Acceptance, with which alpha is meant (MODEL.md section 3).

    kind 'alpha': i.i.d. conditional per-token acceptance rate (Leviathan et al. 2023);
    kind 'per_position': conditional rates a_1..a_m for positions 1..m;
    kind 'tau': the mean tokens emitted per target pass, as papers publish it, for the given k;
    kind 'rank': positional acceptance for trees (Sequoia, arXiv 2402.12374): rank[d][r] is the
    probability that the rank-(r+1) child of an accepted node is the accepted one; one row for
    every depth, or one row per depth (Medusa: head d+1). A chain uses the rank-1 column.
    """

    kind: str
    alpha: float = 0.0
    per_position: tuple[float, ...] = ()
    tau: float = 0.0
    rank: tuple[tuple[float, ...], ...] = ()
    #: kind 'mixture': a text mix (TaskMix), one acceptance per task, token-weighted
    components: tuple[AcceptanceSpec, ...] = ()
    weights: tuple[float, ...] = ()
    labels: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind == "alpha":
            return f"alpha={self.alpha:g} (i.i.d. conditional per token)"
        if self.kind == "per_position":
            return "alpha per position=" + ",".join(f"{a:g}" for a in self.per_position)
        if self.kind == "rank":
            return "acceptance per rank=" + ";".join(",".join(f"{a:g}" for a in row) for row in self.rank)
        if self.kind == "mixture":
            return "mix of " + ", ".join(f"{lab} {w:g}: {c.describe()}" for lab, w, c in
                                          zip(self.labels, self.weights, self.components))
        return f"tau={self.tau:g} (given)"


def mixture(components, weights, labels=()) -> AcceptanceSpec:
    """A token-weighted mix of acceptances (one per task); a single component is itself.

    The model times a token of the mix as the weighted mean of each task's time per token, so
    tau_mix = 1 / sum_i(w_i / tau_i) at the design's k (dse.model.tau): not the tau at the
    mean alpha."""
    comps, ws = tuple(components), tuple(float(w) for w in weights)
    if len(comps) == 1:
        return comps[0]
    return AcceptanceSpec(kind="mixture", components=comps, weights=ws, labels=tuple(labels))


@dataclass(frozen=True)
class TaskMix:
    """The kinds of text the workload generates, as token fractions summing to 1."""

    tasks: tuple[str, ...]
    weights: tuple[float, ...]

    @property
    def label(self) -> str:
        if len(self.tasks) == 1:
            return self.tasks[0]
        from ..catalog.acceptance import MIX_TASKS
        if self.tasks == MIX_TASKS and all(abs(w - 1 / 6) < 1e-12 for w in self.weights):
            return "mix"
        return ",".join(f"{t}={w:g}" for t, w in zip(self.tasks, self.weights))

    def plain(self):
        """The YAML form: a task name, or a mapping task -> weight."""
        return self.label if len(self.tasks) == 1 or self.label == "mix" else dict(zip(self.tasks, self.weights))


def parse_task(value: Any, where: str = "--task", path: str | None = None) -> TaskMix:
    """'chat' (a task), 'mix' (equal parts of chat, translation, summarization, qa, math and rag:
    Spec-Bench's six), 'chat=0.4,code=0.6' or a mapping {chat: 0.4, code: 0.6} (token fractions
    that sum to 1)."""
    from ..catalog.acceptance import MIX_TASKS, TASKS, suggest_task
    allowed = (f"expected one of {', '.join(TASKS)}, mix, or weights such as chat=0.4,code=0.6 "
               "(a mapping in YAML) that sum to 1")
    if isinstance(value, str) and "=" not in value:
        name = value.strip().lower()
        if name == "mix":
            return TaskMix(MIX_TASKS, (1 / 6,) * 6)
        if name not in TASKS:
            raise SpecError(path, where, value, allowed + suggest_task(name))
        return TaskMix((name,), (1.0,))
    if isinstance(value, str):
        pairs = []
        for part in value.split(","):
            key, sep, w = part.partition("=")
            if not sep:
                raise SpecError(path, where, value, allowed)
            pairs.append((key.strip().lower(), w.strip()))
    elif isinstance(value, dict) and value:
        pairs = [(str(k).strip().lower(), v) for k, v in value.items()]
    else:
        raise SpecError(path, where, value, allowed)
    tasks, weights = [], []
    for key, w in pairs:
        if key not in TASKS:
            raise SpecError(path, f"{where}" if isinstance(value, str) else f"{where}.{key}", key,
                            f"expected one of {', '.join(TASKS)}" + suggest_task(key))
        if key in tasks:
            raise SpecError(path, where, value, f"task {key} is given twice")
        tasks.append(key)
        weights.append(as_number(w, f"{where}.{key}", path, Range(lo=0.0, hi=1.0)))
    total = sum(weights)
    if abs(total - 1.0) > 1e-6:
        raise SpecError(path, where, value, f"the weights sum to {total:g}: expected token fractions that sum to 1")
    keep = [(t, w) for t, w in zip(tasks, weights) if w > 0]
    return TaskMix(tuple(t for t, _ in keep), tuple(w for _, w in keep))


#: default token budget of an iteration under continuous batching with chunked prefill (prompt chunks
#: + decode tokens): vLLM V1's max_num_batched_tokens for its OpenAI server on a GPU of 70 GB or more
#: other than the A100 (vllm/engine/arg_utils.py, "For GPUs like H100 and MI300x": 8192) and
#: TensorRT-LLM's max_num_tokens (8192)
DEFAULT_BUDGET_TOKENS = 8192

#: deployments the SLA search tries (Workload.serving)
SERVING_MODES = ("agg", "disagg", "best")
#: how requests arrive (Workload.arrivals)
ARRIVALS = ("closed", "poisson")


@dataclass(**_FROZEN)
class Sla:
    """Serving latency targets a deployment must meet: TTFT and mean TPOT, seconds."""

    ttft_s: float
    tpot_s: float


#: chat, unless the workload says otherwise
DEFAULT_TASK = TaskMix(("chat",), (1.0,))


@dataclass(**_FROZEN)
class Workload:
    """The fixed part of an evaluation: models, drafter, acceptance, dtypes, modes."""

    target: ModelSpec
    drafter: DrafterSpec
    acceptance: AcceptanceSpec
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    temperature: float = 0.0
    overlap: bool = False
    tree_nodes: int = 0               # 0 = a chain of k drafts (DesignBatch.tree_nodes > 0 overrides per design)
    k_max: int = 16                   # candidates for k = auto (past 8 only where a bound lets a larger k win)
    datastore_bytes: float = 0.0      # retrieval drafts (REST): host-memory datastore, never device memory
    continuous: bool = False          # continuous batching: batch = requests in flight, steady state
    #: continuous batching's token budget per iteration (decode or verify tokens + prompt chunks)
    max_batched_tokens: int = DEFAULT_BUDGET_TOKENS
    #: latency targets: with them every design also gets its best operating point that meets them
    #: (dse.model.serving: the sla_* metrics); None = no serving search
    sla: Sla | None = None
    #: how requests arrive under continuous batching: 'closed' (a closed loop of batch clients, the
    #: common benchmark) or 'poisson' (an open loop at random times, batch in flight on average)
    arrivals: str = "closed"
    #: which deployments the SLA search tries: 'agg' (one pool), 'disagg' (prefill and decode pools)
    #: or 'best' (both, the better kept)
    serving: str = "best"
    ep: int = 1                       # expert-parallel ranks for an MoE target (1 = experts tensor-parallel)
    dp: int = 1                       # attention data-parallel ranks for an MoE target (1 = attention tensor-parallel)
    #: a tree's rank profile from alpha / per-position rates / tau (the drafter kind's measured one,
    #: dse.catalog.rank_profiles; api and studies set it); None = the geometric limit a(1-a)^(r-1)
    rank_profile: RankProfile | None = None
    task: TaskMix = DEFAULT_TASK      # the text generated (acceptance depends on it)
    #: the acceptance at the ends of its band (dse.acceptance.fit: leave-one-source-out residuals);
    #: None = no band (acceptance given by the user: tau_low = tau_high = tau)
    acceptance_low: AcceptanceSpec | None = None
    acceptance_high: AcceptanceSpec | None = None
    #: where the acceptance comes from: 'given', 'table', 'model', 'table+model' (a mix), 'none'
    acceptance_source: str = "given"
    #: the tree sizes (0 = a chain) chosen from per design with k = auto, the fastest kept (the
    #: method's tree re-chosen for the batch: DrafterSpec.tree_choices, dse.model.tree_choice);
    #: tree_nodes is then the largest (the published tree). () = tree_nodes as given
    tree_choices: tuple[int, ...] = ()
    #: the chain candidate's own acceptance among tree_choices, (nominal, low, high), where the drafter's
    #: chains accept differently from its trees (an EAGLE-3 head: dse.acceptance.fit CHAIN_METHODS);
    #: None = the workload's acceptance for every size
    chain_acceptance: tuple[AcceptanceSpec, AcceptanceSpec | None, AcceptanceSpec | None] | None = None
    #: the tree a serving framework builds (dse.workload.trees, dse.model.framework_trees), priced and
    #: credited as built at its own depth (k fixed to it); None = dse's best tree of tree_nodes nodes
    tree: TreeSpec | None = None


#: the --draft spellings besides a model name or file
DRAFT_SPELLINGS = ("none", "ngram", "retrieval", "eagle", "eagle2", "eagle3", "mtp", "mtp:N", "hydra", "hydra:H",
                   "medusa:H", "early-exit:L", "eagle3:<checkpoint>")
#: Medusa-1's public checkpoints carry 5 heads (Cai et al. 2024, arXiv 2401.10774; dse/model/capacity.py)
MEDUSA_CHECKPOINT_HEADS = 5


def parse_drafter(spec: str, target: ModelSpec, db: Database, where: str = "--draft", path: str | None = None
                  ) -> DrafterSpec:
    """'none' | 'ngram' | 'retrieval' | 'eagle' | 'eagle2' | 'eagle3' | 'mtp[:N]' | 'hydra[:H]' |
    'medusa:H' | 'early-exit:L' | 'METHOD:<checkpoint>' (eagle, eagle2, eagle3, medusa, hydra: a checkpoint
    of hardware_db/acceptance/checkpoints.yaml) | a model name or file. A draft model must share the
    target's tokenizer (hardware_db/acceptance/families.yaml); MTP needs a target that ships an MTP module
    (ModelSpec.mtp_layers > 0), and mtp:N drafts N chained steps (k = N unless k is given; at most N)."""
    s = str(spec).strip()
    low = s.lower()
    if low == "mtp" or low.startswith("mtp:"):
        if not target.mtp_layers:
            raise SpecError(path, where, s, f"{target.name} ships no MTP module (mtp_layers = 0 in its model entry; "
                            "num_nextn_predict_layers in a config.json): pick another drafter")
        if low == "mtp":
            return DrafterSpec(kind="mtp", label=low)
        try:
            val = int(low.partition(":")[2])
        except ValueError:
            val = None
        if val is None or not 1 <= val <= K_LIMIT:
            raise SpecError(path, where, s, f"expected mtp:N with N an integer in [1, {K_LIMIT}] (chained MTP steps)")
        return DrafterSpec(kind="mtp", label=low, heads=val)
    if low in ("none", "ngram", "eagle", "retrieval", "eagle2", "eagle3"):
        return DrafterSpec(kind=METHOD_KINDS[low], label=low, method=low if low != METHOD_KINDS[low] else "")
    if low == "hydra":
        return DrafterSpec(kind="hydra", label=low, heads=HYDRA_HEADS)
    head, _, arg = low.partition(":")
    if head in ("eagle", "eagle2", "eagle3", "medusa", "hydra") and arg and not arg.isdigit():
        return _checkpoint_drafter(head, s.partition(":")[2].strip(), db, where, path, s)
    if head in ("medusa", "hydra", "early-exit"):
        hi = 64 if head != "early-exit" else target.num_layers - 1
        try:
            val = int(arg)
        except ValueError:
            val = None
        if val is None or not 1 <= val <= hi:
            raise SpecError(path, where, s, f"expected {head}:N with N an integer in [1, {hi}]"
                            + (f" (target has {target.num_layers} layers)" if head == "early-exit" else ""))
        if head in ("medusa", "hydra"):
            return DrafterSpec(kind=head, label=low, heads=val)
        return DrafterSpec(kind="early-exit", label=low, exit_layer=val)
    model = db.model(s, where=f"{where}: ")
    if model.kind != "decoder":
        raise SpecError(path, where, s, f"{model.name} is a {model.kind}; use --draft "
                        f"{'eagle' if model.kind == 'eagle-head' else 'medusa:H'} to draft with it")
    from ..catalog.acceptance import load_groups, shares_tokenizer
    ok, how = shares_tokenizer(load_groups(db.root), model, target)
    if not ok:
        raise SpecError(path, where, s, f"the draft model {model.name} cannot propose {target.name}'s tokens ({how}): "
                        "a draft model must share the target's tokenizer; pick one of its family, or a drafter "
                        "that uses the target's vocabulary (eagle3, medusa:H, ngram, early-exit:L, ...)")
    return DrafterSpec(kind="model", label=model.name, model=model)


def _checkpoint_drafter(method: str, ident: str, db: Database, where: str, path: str | None, value: str
                        ) -> DrafterSpec:
    """METHOD:<checkpoint>: the registered checkpoint (one line naming it and how to list the known
    ones if it is not registered, exit 2)."""
    from ..catalog.checkpoints import checkpoint_for
    try:
        c = checkpoint_for(method, ident, db.root, where, value)
    except SpecError as exc:
        raise SpecError(path, exc.field, exc.value, exc.allowed) from None
    heads = MEDUSA_CHECKPOINT_HEADS if method == "medusa" else HYDRA_HEADS if method == "hydra" else 0
    return DrafterSpec(kind=METHOD_KINDS[method], label=f"{method}:{c.id}", heads=heads, checkpoint=c.id,
                       method=method if method != METHOD_KINDS[method] else "")


def make_acceptance(alpha=None, per_position=None, tau=None, rank=None, *, where: str = "",
                    rank_name: str = "rank_acceptance") -> AcceptanceSpec:
    """Exactly one of alpha in [0, 1], per-position rates in [0, 1], tau >= 1, or per-rank
    acceptance (Sequoia): 'P1,P2,...' for every depth, or rows per depth 'P1,P2;Q1,Q2'
    (Medusa head i, rank r), each p in [0, 1] and each row summing to <= 1."""
    given = [x is not None for x in (alpha, per_position, tau, rank)]
    if sum(given) != 1:
        raise SpecError(None, f"{where}alpha / {where}acceptance / {where}tau / {where}{rank_name}",
                        None if not any(given) else "several",
                        "give exactly one: alpha (i.i.d. conditional acceptance rate), "
                        "per-position rates, tau (mean tokens per target pass) or per-rank acceptance")
    if rank is not None:
        return _rank_acceptance(rank, f"{where}{rank_name}")
    if alpha is not None:
        return AcceptanceSpec(kind="alpha", alpha=as_number(alpha, f"{where}alpha", rng=Range(lo=0.0, hi=1.0)))
    if per_position is not None:
        if isinstance(per_position, str):
            per_position = [p for p in per_position.split(",") if p.strip()]
        if not isinstance(per_position, (list, tuple)) or not per_position:
            raise SpecError(None, f"{where}acceptance", per_position,
                            "expected a non-empty list of rates, each in [0, 1]")
        rates = tuple(as_number(x, f"{where}acceptance", rng=Range(lo=0.0, hi=1.0)) for x in per_position)
        return AcceptanceSpec(kind="per_position", per_position=rates)
    t = as_number(tau, f"{where}tau")
    if not t >= 1.0:
        raise SpecError(None, f"{where}tau", tau, "expected a number >= 1 (it counts the bonus token)")
    return AcceptanceSpec(kind="tau", tau=t)


def _rank_acceptance(rank, field: str) -> AcceptanceSpec:
    """'0.6,0.2,0.1' or '0.7,0.1;0.5,0.1' (or lists) -> AcceptanceSpec(kind='rank')."""
    rows = rank
    if isinstance(rows, str):
        rows = [[p for p in row.split(",") if p.strip()] for row in rows.split(";") if row.strip()]
    elif isinstance(rows, (list, tuple)) and rows and not isinstance(rows[0], (list, tuple)):
        rows = [rows]
    allowed = ("expected rates per rank 'P1,P2,...' (rows per depth separated by ';'), "
               "each in [0, 1], each row summing to <= 1")
    if not isinstance(rows, (list, tuple)) or not rows or any(not isinstance(r, (list, tuple)) or not r for r in rows):
        raise SpecError(None, field, rank, allowed)
    try:
        out = tuple(tuple(as_number(x, field, rng=Range(lo=0.0, hi=1.0)) for x in row) for row in rows)
    except SpecError:
        raise SpecError(None, field, rank, allowed) from None
    if any(sum(row) > 1.0 + 1e-9 for row in out):
        raise SpecError(None, field, rank, allowed)
    return AcceptanceSpec(kind="rank", rank=out)


def _positive_int(value: Any) -> int | None:
    """An integer >= 1 from a YAML or CLI value (an int, a whole float, its text), else None (a bool,
    .nan, .inf, 2.5, 0, 'x')."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        val = int(value) if isinstance(value, str) else value
    except ValueError:
        return None
    if isinstance(val, float) and (not math.isfinite(val) or val != int(val)):
        return None
    return int(val) if val >= 1 else None


def check_dp(target: ModelSpec, dp: Any, chips: tuple[int, ...], where: str = "--dp",
             chips_name: str = "--chips", path: str | None = None) -> list[SpecError]:
    """Attention data parallel D (roofline.pass_cost): 1 (attention tensor-parallel over the group),
    or for an MoE target an integer > 1 that divides every tensor-parallel group's chips t (D ranks of
    t/D chips, each serving its share of the sequences). A dense model's D ranks would be D replicas:
    fewer chips per replica says that."""
    val = _positive_int(dp)
    if val is None:
        return [SpecError(path, where, dp, "expected a positive integer (1 = attention tensor-parallel)")]
    if val == 1:
        return []
    if not target.is_moe:
        return [SpecError(path, where, val, f"attention data parallel serves an MoE target beside its experts' "
                          f"parallel; {target.name} is dense (D ranks would be D replicas: give fewer chips): use 1")]
    bad = [int(c) for c in chips if int(c) % val]
    if bad:
        return [SpecError(path, where, val, f"the attention data-parallel ranks must divide the tensor-parallel "
                          f"chips ({chips_name} gives {bad[0]} a stage): a divisor of {bad[0]}")]
    return []


def check_ep(target: ModelSpec, ep: Any, chips: tuple[int, ...], where: str = "--ep",
             chips_name: str = "--chips", path: str | None = None, every_chip: bool = True) -> list[SpecError]:
    """Expert parallel E (MODEL.md section 2): 1 (the routed experts tensor-parallel like the
    rest), or for an MoE target an integer > 1 that divides num_experts (each rank holds
    num_experts/E whole experts) and every target chip count t (E ranks of t/E chips each).
    ``every_chip`` False (a study's chip counts): E must divide num_experts; a row whose t it does
    not divide is infeasible (dse.evaluation.designs.invalid_combinations), not refused here."""
    val = _positive_int(ep)
    if val is None:
        return [SpecError(path, where, ep, "expected a positive integer (1 = no expert parallel)")]
    if val == 1:
        return []
    if not target.is_moe:
        return [SpecError(path, where, val, f"expert parallel needs an MoE target; {target.name} is dense: use 1")]
    if not every_chip:
        if target.num_experts % val:
            return [ep_divisor_error(target, val, chips, where, chips_name, path)]
        return []
    g = target.num_experts
    for c in chips:
        g = math.gcd(g, int(c))
    allowed = [e for e in range(1, g + 1) if g % e == 0]
    if target.num_experts % val or any(int(c) % val for c in chips):
        shown = ", ".join(str(int(c)) for c in chips[:8]) + (", ..." if len(chips) > 8 else "")
        return [SpecError(path, where, val, f"expected a divisor of both num_experts = {target.num_experts} and "
                          f"{chips_name} = {shown}: one of {', '.join(map(str, allowed))}")]
    return []


def ep_divisor_error(target: ModelSpec, value: Any, chips: tuple[int, ...], where: str, chips_name: str,
                     path: str | None, no_row: bool = False) -> SpecError:
    """The one line for a study's expert parallel that no row can take: E must divide num_experts
    and some chip count t (E ranks of t/E chips), naming the values that do; ``no_row``: said of
    every row of the study (no value divides any chip count)."""
    allowed = [e for e in range(1, target.num_experts + 1)
               if target.num_experts % e == 0 and any(int(c) % e == 0 for c in chips)]
    shown = ", ".join(str(int(c)) for c in chips[:8]) + (", ..." if len(chips) > 8 else "")
    return SpecError(path, where, value, ("no row can exist (E expert ranks of t/E chips need E to divide the "
                                          "chips t): " if no_row else "") + f"expected a divisor of num_experts = {target.num_experts} that divides "
                     f"some chip count of {chips_name} = {shown}: one of {', '.join(map(str, allowed))}")


def shards_attention(m: ModelSpec, chips: int) -> bool:
    """Can t = ``chips`` chips split m's attention by heads (MODEL.md section 2)? t divides the
    query heads, and the KV heads are split (t divides h_kv) or each replicated on t/h_kv chips
    (h_kv divides t); MLA's latent cache is one shared head, so only the query heads count."""
    t, h, kv = int(chips), m.num_attention_heads, m.num_kv_heads
    if h % t:
        return False
    return bool(m.kv_lora_rank) or kv % t == 0 or t % kv == 0


def pipeline_split(m: ModelSpec, chips: int, pp: int | None = None, where: str = "--pp",
                   path: str | None = None, max_tp: int | None = None,
                   most_stages: bool = False) -> tuple[int, int]:
    """(tensor parallel t, pipeline stages pp) for ``chips`` chips (MODEL.md section 7): pp given, it
    must divide the chips, be at most the layers (every stage holds one) and leave t = chips/pp
    that splits the heads (``shards_attention``); pp None ('auto'): 1 where the chips split the heads,
    else the fewest stages that leave such a t, at most ``max_tp`` (1 for a part with no scale-up
    link: its chips only pass activations on); with ``most_stages`` (a part whose layers sit in
    regions of its SRAM, where a token's batch-1 time is L x W / (chips x BW) whatever the split and
    tensor parallel only adds all-reduces) the most stages, at most L. SpecError naming the flag when
    none exists."""
    chips, L = int(chips), m.num_layers
    if pp is not None:
        pp = int(pp)
        if pp < 1 or pp > L or chips % pp:
            raise SpecError(path, where, pp, f"expected a divisor of the {chips} chips that is at most "
                            f"{m.name}'s {L} layers (each stage holds at least one layer)")
        if not shards_attention(m, chips // pp):
            ok = [p for p in range(1, min(chips, L) + 1) if chips % p == 0 and shards_attention(m, chips // p)]
            raise SpecError(path, where, pp, f"{chips} chips in {pp} stage{'s' if pp > 1 else ''} leave {chips // pp} per stage, which "
                            f"does not split {m.name}'s {m.num_attention_heads} attention heads; use one of "
                            f"{', '.join(map(str, ok)) or 'none (no split works)'}")
        return chips // pp, pp
    order = range(min(chips, L), 0, -1) if most_stages else range(1, min(chips, L) + 1)
    for p in order:
        if chips % p == 0 and shards_attention(m, chips // p) and chips // p <= (max_tp or chips):
            return chips // p, p
    raise SpecError(path, where.replace("--pp", "--chips"), chips, f"no split of {chips} chips into at most {L} "
                    f"stages leaves a tensor-parallel group that splits {m.name}'s attention heads")


def draft_tensor_parallel(m: ModelSpec, chips: int) -> int:
    """The tensor parallel a draft model runs at beside (or on) a group of ``chips`` chips: the
    largest t' that divides the chip count and splits the draft's attention (``shards_attention``),
    1 at worst. Serving frameworks run a draft whose heads do not divide the target's tensor
    parallel at a smaller one: vLLM's ``draft_tensor_parallel_size`` (1, or the target's), SGLang's
    draft worker at 1 or replicated (docs/model.md, "Tensor parallel"). Qwen2.5-1.5B (12 heads, 2
    KV heads) beside 8 chips: 4; Qwen2.5-0.5B (14 heads): 2.

    >>> from types import SimpleNamespace as M
    >>> draft_tensor_parallel(M(num_attention_heads=12, num_kv_heads=2, kv_lora_rank=0), 8)
    4
    """
    c = int(chips)
    return max(t for t in range(1, c + 1) if c % t == 0 and shards_attention(m, t))


def check_some_split(m: ModelSpec, chips, pps, where: str, path: str | None = None) -> list[SpecError]:
    """A study's chip counts (and ``pp`` values, None = auto) are refused only when no combination
    splits into stages whose tensor-parallel group splits the heads (``pipeline_split``); a row whose
    combination does not is infeasible (dse.evaluation.designs.pipeline_rows)."""
    for c in chips:
        for p in pps:
            try:
                pipeline_split(m, int(c), None if p is None else int(p))
                return []
            except SpecError:
                pass
    shown = ", ".join(str(int(c)) for c in list(chips)[:8]) + (", ..." if len(chips) > 8 else "")
    return [SpecError(path, where, list(chips) if len(chips) > 1 else chips[0],
                      f"no chip count ({shown}) splits into at most {m.num_layers} pipeline stages whose "
                      f"tensor-parallel group divides {m.name}'s {m.num_attention_heads} attention heads")]


def parse_k(k: Any, drafter: DrafterSpec, where: str = "--k") -> int:
    """'auto' -> 0 (chosen per design), else an integer in [1, K_LIMIT]; 0 without a drafter."""
    if drafter.kind == "none":
        return 0
    if isinstance(k, str) and k.strip().lower() == "auto":
        return 0
    try:
        val = int(k) if isinstance(k, str) else k
    except ValueError:
        val = k
    if not K_RANGE.contains(val):
        raise SpecError(None, where, k, f"expected 'auto' or an integer in [1, {K_LIMIT}] "
                        f"(see dse.workload.spec.K_LIMIT for the reason)")
    return int(val)


@dataclass(frozen=True)
class WorkloadNames:
    """How the caller names each input in messages (CLI options or study keys)."""

    path: str | None = None
    draft: str = "--draft"
    k: str = "--k"
    tau: str = "--tau"
    acceptance: str = "--alpha/--acceptance/--tau"
    per_position: str = "--acceptance"
    rank: str = "--rank-acceptance"
    tree_nodes: str = "--tree-nodes"
    overlap: str = "--overlap"
    draft_chip: str = "--draft-hw"
    overlap_needs: str = "a draft chip (--draft-hw)"


CLI_NAMES = WorkloadNames()


def check_workload(drafter: DrafterSpec, acc: AcceptanceSpec | None, *, k_lo: int | None, k_hi: int | None,
                   k_fixed: bool, tree_nodes: int, overlap: bool, draft_chip: bool, acceptance_given: bool,
                   tree_lo: int | None = None, names: WorkloadNames = CLI_NAMES) -> list[SpecError]:
    """Every rule between drafter, acceptance, k (bounds; None = auto), tree and draft chip.
    ``tree_nodes`` is a fixed tree size (0 = a chain); ``tree_lo`` the smallest of a searched one."""
    p, out = names.path, []
    if draft_chip and drafter.kind == "none":
        return [SpecError(p, names.draft_chip, True, f"a draft chip holds a draft model: give {names.draft} too")]
    if drafter.kind == "none":
        if acceptance_given:
            out.append(SpecError(p, names.acceptance, "given", f"acceptance needs a drafter ({names.draft})"))
        if k_hi is not None:
            out.append(SpecError(p, names.k, k_hi, f"k needs a drafter ({names.draft})"))
    elif acc is not None:
        if acc.kind == "tau" and not k_fixed:
            out.append(SpecError(p, names.tau, acc.tau, f"tau is measured at one k: give {names.k} as an integer"))
        elif acc.kind == "tau" and acc.tau > k_lo + 1:
            out.append(SpecError(p, names.tau, acc.tau, f"expected a number in [1, k+1 = {k_lo + 1}]"))
        if acc.kind == "per_position" and k_hi is not None and k_hi > len(acc.per_position):
            out.append(SpecError(p, names.k, k_hi, f"expected at most {len(acc.per_position)} (one rate per "
                                 f"drafted position in {names.per_position})"))
        if acc.kind == "rank" and len(acc.rank) > 1 and k_hi is not None and k_hi > len(acc.rank):
            out.append(SpecError(p, names.k, k_hi, f"expected at most {len(acc.rank)} (one row of {names.rank} "
                                 "per depth)"))
        if tree_lo is not None and acc.kind == "tau":
            out.append(SpecError(p, names.tree_nodes, "searched", "tau is measured on one tree: fix tree_nodes "
                                 "with tau"))
    if drafter.kind in ("medusa", "hydra") and k_hi is not None and k_hi > drafter.heads:
        out.append(SpecError(p, names.k, k_hi, f"expected at most {drafter.heads} (one token per "
                             f"{drafter.kind.capitalize()} head)"))
    if drafter.kind == "mtp" and drafter.heads and k_hi is not None and k_hi > drafter.heads:
        out.append(SpecError(p, names.k, k_hi, f"expected at most {drafter.heads} (one token per chained MTP step "
                             f"of {drafter.label})"))
    smallest = tree_nodes or tree_lo or 0
    if tree_nodes or tree_lo is not None:
        if drafter.kind == "none":
            out.append(SpecError(p, names.tree_nodes, tree_nodes or "searched", f"a tree needs a drafter ({names.draft})"))
        elif smallest and k_hi is not None and smallest < k_hi:
            out.append(SpecError(p, names.tree_nodes, smallest, f"expected >= k = {k_hi} (one node per level)"))
    if draft_chip and not drafter.can_use_draft_chip:
        out.append(SpecError(p, names.draft_chip, True, f"the {drafter.kind} drafter needs the target's hidden "
                             "states (or no weights) and runs on the target chips; a draft chip needs a draft model"))
    if overlap and not draft_chip:
        out.append(SpecError(p, names.overlap, True, f"overlapped drafting needs {names.overlap_needs}"))
    return out
