"""Acceptance from published data: the table's rows as the rate the model uses, the model fitted
on them for pairs the table does not hold, its leave-one-source-out error and band.

**What the model uses.** ``alpha``: the i.i.d. conditional per-token acceptance rate
(Leviathan et al. 2023, arXiv 2211.17192) that reproduces the row's statistic at the row's own
chain or tree: a published alpha as is; a mean accepted length tau (bonus token included) of a
chain of k by inverting tau = (1 - a^(k+1)) / (1 - a); of a tree of N nodes and depth D by inverting
the tau under the drafter's rank profile of the tree its source built (dse.acceptance.row_trees), else
of the best N-node tree (dse.model: the same functions the evaluation uses); accepted/drafted ratios as tau = 1 + k * ratio; per-position
conditional rates a_i as tau = 1 + sum_i prod_(j<=i) a_j. Because published acceptance falls
along a chain, this alpha is an *effective* rate for that shape: the row's tau is reproduced
exactly, other shapes are the model's extrapolation.

**The model** (for pairs the table does not hold), fitted on the rows marked ``fit``:

    logit(alpha) = b_method + t_task (+ c_task for prompt lookup and retrieval) + s_group * T
                   + [draft model] a * log10(draft/target parameters) - f * (not the same family)
                   + [draft heads] h * log10(target parameters / 10B) + l * (a target of >= LARGE_VOCAB tokens)
                   + [EAGLE-3]     c3 * (a chain, not a tree: CHAIN_METHODS)
                   + [early exit]  logit(exit layer / layers)   (slope 1, not fitted: see below)
                   - [EAGLE heads] c * min(max(0, log2(S / S0)), log2(S_max / S0))^2   (long context)
                   + u_checkpoint

a mixed model: the fixed effects by ridge regression (penalty RIDGE on everything but the
method intercepts), and one random effect u per drafter level -- a named checkpoint
(hardware_db/acceptance/checkpoints.yaml; a draft model's checkpoint per target), else the
(target, method, draft) pair -- shrunk toward the method's mean by the penalty LAMBDA on u (the
BLUP of a random intercept of variance sigma^2 / LAMBDA: a level with n rows of mean residual m
gets u = n m / (n + LAMBDA) when it is the only term). RIDGE and LAMBDA are the pair with the
smallest leave-one-source-out median tau error. A row of the Spec-Bench mix (six tasks in equal
parts) enters with each task's effect at 1/6. Early exits in the table all sit at 25-31% of the
depth, so the exit slope is fixed at 1 (the odds of acceptance proportional to the odds of the
exit fraction: 1 at the last layer) rather than fitted. The long-context term (context_slope):
S the workload's context (prompt + output / 2), S0 = CONTEXT_S0 = 2,048 the context EAGLE heads are
trained at, S_max the deepest context the table publishes (held there, not extrapolated); c is fitted
apart, on the table's context series (rows with ``context_tokens``, not in the pair fit, whose rows
are all short-context: the term is 0 on every one of them).

**Error and band.** Leave-one-source-out: every source (paper, leaderboard, repository) is
held out in turn, the model refitted on the others and the source's rows predicted (with the
checkpoint's u where other sources measured the same checkpoint). The band of a modelled alpha
is the BAND_LEVEL quantile of |LOSO residual| in logit(alpha) of its method, for a checkpoint
the fit has seen and for one it has not (pooled over all methods where a method has fewer than
MIN_BAND_ROWS); its coverage is checked on each source with the band computed without it. Rows
marked ``held-out`` (whole sources) are never fitted: the full fit's error on them is reported
apart. A table row has no band.

The fit is stored in hardware_db/acceptance/fit.json (``dse acceptance fit --write``), with a
hash of the table and a probe of the tree machinery; a stale file is refitted in memory with a
warning. docs/acceptance.md shows the fit and its error per method.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..catalog.acceptance import (
    MIX_TASKS,
    MODELLED_KINDS,
    TABLE_KINDS,
    TASKS,
    AcceptanceRow,
    load_groups,
    load_table,
    table_path,
)
from ..catalog.checkpoints import reference_checkpoint
from ..catalog.database import Database, load_database
from ..catalog.specs import ModelSpec
from ..model import specdec
from ..model.tau import acceptance_terms
from ..workload.spec import AcceptanceSpec, DrafterSpec, Workload, make_acceptance
from .row_trees import eagle2_tree, row_tree

#: method -> group for the temperature slope
GROUPS = {"model": "model", "eagle": "head", "eagle2": "head", "eagle3": "head", "medusa": "head", "hydra": "head",
          "ngram": "copy", "retrieval": "copy", "early-exit": "exit"}
COPY_METHODS = ("ngram", "retrieval")
HEAD_METHODS = ("eagle", "eagle2", "eagle3", "medusa", "hydra")
TASK_EFFECTS = tuple(t for t in TASKS if t != "chat")        # chat is the reference
#: the model's coefficients, in order (method intercepts first: not penalised)
PARAMS = (tuple(f"method:{m}" for m in MODELLED_KINDS) + tuple(f"task:{t}" for t in TASK_EFFECTS)
          + tuple(f"copy-task:{t}" for t in TASK_EFFECTS) + tuple(f"temperature:{g}" for g in
                                                                  ("model", "head", "copy", "exit"))
          + ("model:log10_size_ratio", "model:other_family", "head:log10_target_size", "head:large_vocab_target",
             "head:eagle3_chain"))
N_INTERCEPTS = len(MODELLED_KINDS)
#: ridge penalties tried on logit(alpha) effects, and penalties on the drafter levels' u (LAMBDA:
#: the residual variance over the levels' variance); the fit keeps the pair with the smallest median
#: leave-one-source-out tau error (over rows whose method has another source): chosen on the same
#: residuals it is judged by, so that median is slightly optimistic (docs/acceptance.md)
RIDGES = (0.3, 1.0, 3.0, 10.0)
LAMBDAS = (0.1, 0.3, 1.0, 3.0)
#: the early exit's slope on logit(exit fraction): fixed, not fitted (the table's exits are all at 25-31%)
EXIT_SLOPE = 1.0
#: the band's level: the fraction of held-out residuals inside it (a +-1 sigma band of a normal)
BAND_LEVEL = 0.68
#: fewest LOSO residuals for a method's own band (else the band of all methods)
MIN_BAND_ROWS = 8
#: chain length at which an alpha row without k is compared as tau
TAU_CHECK_K = 4
#: alpha is kept inside (ALPHA_EPS, 1 - ALPHA_EPS) before taking its logit
ALPHA_EPS = 1e-3
FIT_FILE = "fit.json"
#: heads whose acceptance falls past the context they were trained at: the EAGLE family drafts
#: through an attention layer over the whole context (its own KV of the target's features), trained on
#: ShareGPT-length conversations (EAGLE's --max-length 2048 caps the head's context:
#: github.com/SafeAILab/EAGLE/issues/311; heads shipped with max_position_embeddings 2048:
#: github.com/sgl-project/sglang/issues/6783); Medusa and Hydra heads read the last hidden state only
CONTEXT_METHODS = ("eagle", "eagle2", "eagle3")
#: heads whose chains accept less than their trees imply (the chain term, head:eagle3_chain): EAGLE-3's authors'
#: Llama-3.1-8B head drafts chains in vLLM at an i.i.d. 0.75 (vllm issue 20780, pull 17504) where its trees in
#: the authors' code (EAGLE-3 paper Table 1, 6.13 on MT-bench) imply 0.84 under the rank profile, a gap no rank
#: profile short of the geometric limit closes; EAGLE-1 heads' chains and trees agree (docs/acceptance.md)
CHAIN_METHODS = ("eagle3",)
#: the context the heads were trained at (tokens): the long-context term is 0 at or below it
CONTEXT_S0 = 2048
#: the chain length at which a context row's tau is read as alpha (its source does not state k; vLLM's
#: EAGLE-3 configs speculate 3-5 tokens: k = 2..7 moves the fitted slope between 1.19 and 0.94)
CONTEXT_K = 3
_TARGET = ModelSpec(name="probe", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                    head_dim=128, intermediate_size=14336, vocab_size=128256, tied_embeddings=False)


# ------------------------------------------------------------------ the tau machinery

def _drafter(method: str) -> DrafterSpec:
    from ..workload.spec import HYDRA_HEADS, METHOD_KINDS
    kind = METHOD_KINDS[method]
    heads = HYDRA_HEADS if kind in ("medusa", "hydra") else 0
    return DrafterSpec(kind=kind, label=method, method="" if method == kind else method, heads=heads,
                       exit_layer=1 if kind == "early-exit" else 0)


def tau_of_alpha(method: str, alpha, k: int | None = None, nodes: int | None = None, depth: int | None = None,
                 tree=None):
    """tau of i.i.d. alpha (array) on a chain of k, or on the best tree of ``nodes`` nodes and
    depth <= ``depth`` (or the framework's ``tree``, dse.workload.trees.TreeSpec) under the method's
    rank profile (the drafter kind's measured one, hardware_db/acceptance/rank_profiles.yaml, as dse
    eval and studies use by default): the evaluation's own terms (dse.model.tau.acceptance_terms)."""
    a = np.asarray(alpha, dtype=np.float64)
    if not nodes:
        return specdec.tau_iid(a, k)
    from ..catalog.database import default_root
    from ..catalog.rank_profiles import load_rank_profiles
    d = _drafter(method)
    profile = load_rank_profiles(default_root()).for_drafter(d.kind)
    w0 = Workload(target=_TARGET, drafter=d, acceptance=make_acceptance(0.5), tree=tree,
                  rank_profile=None if profile.geometric else profile)
    out = [float(acceptance_terms(dataclasses.replace(w0, acceptance=AcceptanceSpec(kind="alpha", alpha=float(x))),
                                  np.array([depth]), np.array([nodes]))[0][0]) for x in a.ravel()]
    return np.asarray(out).reshape(a.shape)


@lru_cache(maxsize=64)
def _tree_grid(method: str, nodes: int, depth: int, tree=None):
    """tau of a tree shape on a grid of alphas (monotone): for inverting by interpolation."""
    grid = np.concatenate([np.linspace(0.0, 0.9, 181), np.linspace(0.9025, 0.999, 40)])
    return grid, tau_of_alpha(method, grid, nodes=nodes, depth=depth, tree=tree)


def alpha_of_tau(method: str, tau: float, k: int | None = None, nodes: int | None = None,
                 depth: int | None = None, tree=None) -> float:
    """The i.i.d. alpha whose chain of k (or tree) has this tau (clipped to the shape's range)."""
    if not nodes:
        return float(specdec.implied_alpha(np.array([tau]), np.array([k]))[0])
    grid, taus = _tree_grid(method, int(nodes), int(depth), tree)
    return float(np.interp(tau, taus, grid))


def tau_at_shape(method: str, alpha, k=None, nodes=None, depth=None, tree=None):
    """tau at a row's shape, by the interpolation grid for trees (fast, for many alphas)."""
    if not nodes:
        return specdec.tau_iid(np.asarray(alpha, dtype=np.float64), k)
    grid, taus = _tree_grid(method, int(nodes), int(depth), tree)
    return np.interp(np.asarray(alpha, dtype=np.float64), grid, taus)


# ------------------------------------------------------------------ rows -> observed alpha and tau

@dataclass(frozen=True)
class Converted:
    """A row's statistic as the model uses it (None where it cannot be converted)."""

    alpha: float | None
    tau: float | None            # at the row's shape (TAU_CHECK_K for alpha rows without one)
    how: str


def convert(r: AcceptanceRow) -> Converted:
    """The row's effective i.i.d. alpha and its tau at the row's own chain or tree, with how."""
    m, v = r.draft_kind, r.stat_value
    if r.stat_kind == "speedup_only" or v is None or m not in MODELLED_KINDS + TABLE_KINDS:
        why = "no acceptance statistic" if r.stat_kind == "speedup_only" else "no dse drafter for this method"
        return Converted(None, None, why)
    shape = dict(k=r.k, nodes=r.tree_nodes, depth=r.tree_depth, tree=row_tree(r))
    if r.stat_kind == "alpha":
        k = r.k or TAU_CHECK_K
        tau = float(tau_at_shape(m, v, **{**shape, "k": k}))
        return Converted(v, tau, f"alpha {v:g} as published; tau {tau:.3f} at {r.shape if r.k else f'k={k}'}")
    if r.stat_kind == "per_position":
        if r.k is None:
            return Converted(None, None, "per-position rates without a chain length")
        rates = np.asarray(r.rates[:r.k])
        tau = float(1.0 + np.sum(np.cumprod(rates)))
        a = alpha_of_tau(m, tau, k=len(rates))
        return Converted(a, tau, f"tau = 1 + sum of cumulative products of {';'.join(f'{x:g}' for x in rates)} = "
                                 f"{tau:.3f} at k={len(rates)} -> alpha {a:.3f}")
    if r.stat_kind == "acceptance_ratio":
        if r.k is None:
            return Converted(None, None, "accepted/drafted ratio without a chain length")
        tau = 1.0 + r.k * v
        a = alpha_of_tau(m, tau, k=r.k)
        return Converted(a, tau, f"tau = 1 + k x ratio = 1 + {r.k} x {v:g} = {tau:.3f} -> alpha {a:.3f} (chain of {r.k})")
    tau = v + 1.0 if r.includes_bonus == "no" else v
    if r.k is None and r.tree_nodes is None:
        return Converted(None, tau, "tau without a chain length or tree")
    a = alpha_of_tau(m, tau, **shape)
    return Converted(a, tau, f"tau {tau:g} on a {r.shape} -> alpha {a:.3f} "
                             + (f"(the tau of {'the tree ' + shape['tree'].label if shape['tree'] else 'the best tree of that size'}"
                                " under the drafter's rank profile)" if r.is_tree else "(inverting (1 - a^(k+1)) / (1 - a))"))



# ------------------------------------------------------------------ features and drafter levels

@dataclass(frozen=True)
class PairFeatures:
    """What the model knows about a (target, draft) pair."""

    method: str
    task_weights: tuple[tuple[str, float], ...]
    temperature: float
    log_ratio: float = 0.0           # draft models: log10(draft / target parameters)
    other_family: float = 0.0        # draft models: 1 when not of the target's family
    log_target: float = 0.0          # heads: log10(target parameters / 10B)
    large_vocab: float = 0.0         # heads: 1 for a target of >= LARGE_VOCAB tokens (Llama-3, Qwen2.5/3)
    chain: float = 0.0               # CHAIN_METHODS: 1 for a chain (no tree)
    exit_logit: float = 0.0          # early exit: logit(exit layer / layers)
    context_tokens: float = 0.0      # the workload's context S (prompt + output / 2); 0: short


def feature_vector(f: PairFeatures) -> tuple[np.ndarray, float]:
    """(x, offset): logit(alpha) = x . beta + offset (+ the drafter level's u)."""
    x = np.zeros(len(PARAMS))
    idx = {p: i for i, p in enumerate(PARAMS)}
    x[idx[f"method:{f.method}"]] = 1.0
    for t, w in f.task_weights:
        if t != "chat":
            x[idx[f"task:{t}"]] += w
            if f.method in COPY_METHODS:
                x[idx[f"copy-task:{t}"]] += w
    x[idx[f"temperature:{GROUPS[f.method]}"]] = f.temperature
    if f.method == "model":
        x[idx["model:log10_size_ratio"]] = f.log_ratio
        x[idx["model:other_family"]] = f.other_family
    if f.method in HEAD_METHODS:
        x[idx["head:log10_target_size"]] = f.log_target
        x[idx["head:large_vocab_target"]] = f.large_vocab
    if f.method in CHAIN_METHODS:
        x[idx["head:eagle3_chain"]] = f.chain
    return x, EXIT_SLOPE * f.exit_logit if f.method == "early-exit" else 0.0


def _tasks_of(task: str) -> tuple[tuple[str, float], ...]:
    return tuple((t, 1 / 6) for t in MIX_TASKS) if task == "mix" else ((task, 1.0),)


#: a vocabulary at least this large marks a "large-vocabulary" target (head:large_vocab_target)
LARGE_VOCAB = 100_000


def is_large_vocab(name: str, family: str = "", root=None) -> bool:
    """A target whose vocabulary has >= LARGE_VOCAB tokens (Llama-3's 128,256, Qwen2.5/3's 151,936,
    DeepSeek-V3's 129,280, Gemma-2's 256,000; LLaMA-1/2 and Vicuna have 32,000), from the model
    database (DeepSeek-R1-Distill-Llama-8B maps to llama-3.1-8b); a name the database lacks counts
    by its tokenizer group (families.yaml: llama3, qwen2, gemma2). Each token of such a tokenizer
    carries more text (Llama 3 encodes text in up to 15% fewer tokens than Llama 2: Meta's Llama 3
    announcement), so a drafter guesses it less often: fitted on the Llama-3 rows only."""
    db = load_database(root)
    if name in db.names("model"):
        return db.model(name).vocab_size >= LARGE_VOCAB
    return load_groups(root).tokenizer_of(name, family) in ("llama3", "qwen2", "gemma2")


@lru_cache(maxsize=4096)
def row_features(r: AcceptanceRow) -> PairFeatures:
    tp = r.target_params_b or 1.0
    kw = {}
    if r.draft_kind == "model":
        kw = dict(log_ratio=math.log10(max(r.draft_params_b, 1e-3) / tp), other_family=0.0 if r.same_family else 1.0)
    elif r.draft_kind in HEAD_METHODS:
        kw = dict(log_target=math.log10(tp / 10.0), large_vocab=float(is_large_vocab(r.target_model or r.target)),
                  chain=float(r.draft_kind in CHAIN_METHODS and r.tree_nodes is None and r.k is not None))
    elif r.draft_kind == "early-exit":
        f = r.exit_layer / r.target_layers
        kw = dict(exit_logit=math.log(f / (1.0 - f)))
    return PairFeatures(method=r.draft_kind, task_weights=_tasks_of(r.task), temperature=r.temperature or 0.0,
                        context_tokens=float(r.context_tokens or 0), **kw)


# ------------------------------------------------------------------ long context

def context_excess(context_tokens, s_max: float) -> float:
    """x = min(max(0, log2(S / S0)), log2(S_max / S0)): doublings of the context past the heads'
    training context S0 = CONTEXT_S0, held at the deepest published context S_max (not extrapolated)."""
    if not context_tokens or context_tokens <= CONTEXT_S0:
        return 0.0
    return float(min(math.log2(context_tokens / CONTEXT_S0), math.log2(max(s_max, CONTEXT_S0) / CONTEXT_S0)))


def context_slope(table) -> dict:
    """The long-context term of EAGLE-family heads, logit(alpha) -= c * x^2 (x: context_excess), fitted
    by least squares through each series' own shortest context (rows with ``context_tokens`` of a
    CONTEXT_METHODS drafter, a series per source and drafter: logit(alpha_i) - logit(alpha_0) =
    -c (x_i^2 - x_0^2)), each row's tau read as alpha at a chain of CONTEXT_K. Quadratic in the
    doublings, and through the anchor: the published fall is slow past S0 and steepens (speculators
    PR 684: -0.33 in logit at 4k, -0.85 at 8k, -2.96 at 16k), which a line with a free intercept
    overshoots near S0 by 2-3x. {} when the table has no series of two contexts."""
    rows = [r for r in table if r.context_tokens and r.draft_kind in CONTEXT_METHODS and r.stat_kind == "tau"
            and r.stat_value is not None]
    series: dict[tuple, list] = {}
    for r in rows:
        series.setdefault((r.source_key, pair_key(r)), []).append(r)
    series = {k: v for k, v in series.items() if len({r.context_tokens for r in v}) > 1}
    if not series:
        return {}
    s_max = float(max(r.context_tokens for v in series.values() for r in v))
    xs, ys, ids = [], [], []
    for v in series.values():
        v = sorted(v, key=lambda r: r.context_tokens)
        x2 = np.array([context_excess(r.context_tokens, s_max) for r in v]) ** 2
        tau = [r.stat_value + (1.0 if r.includes_bonus == "no" else 0.0) for r in v]
        y = _logit([alpha_of_tau(r.draft_kind, t, k=r.k or CONTEXT_K) for r, t in zip(v, tau)])
        xs.append(x2 - x2[0])
        ys.append(y - y[0])
        ids += [r.id for r in v]
    x, y = np.concatenate(xs), np.concatenate(ys)
    c = -float(x @ y / (x @ x))
    rms = float(np.sqrt(np.mean((y + c * x) ** 2)))
    return dict(slope=c, s0=float(CONTEXT_S0), s_max=s_max, k=CONTEXT_K, rows=ids, rms=rms,
                methods=list(CONTEXT_METHODS), form="quadratic")


def context_term(context: dict, method: str, context_tokens: float) -> float:
    """The long-context term added to logit(alpha): -c * context_excess(S)^2 for CONTEXT_METHODS, else 0."""
    if not context or method not in context.get("methods", ()) or not context_tokens:
        return 0.0
    return -context["slope"] * context_excess(context_tokens, context["s_max"]) ** 2


def pair_key(r_or_target, drafter: DrafterSpec | None = None) -> tuple:
    """The drafter level a row (or a target and drafter) belongs to: ('ckpt', checkpoint) for a
    named head (a bare head method: the method authors' head for the target, where the registry
    marks one), ('ckpt', checkpoint, target) for a named draft model (one checkpoint drafts several
    targets), else (target, method, draft model or exit layer)."""
    if drafter is None:
        r = r_or_target
        target = r.target_model or r.target
        if r.checkpoint:
            return ("ckpt", r.checkpoint, target) if r.draft_kind == "model" else ("ckpt", r.checkpoint)
        who = (r.draft_model or r.draft) if r.draft_kind == "model" else \
            (r.exit_layer if r.draft_kind == "early-exit" else "")
        return (target, r.draft_kind, who)
    if drafter.checkpoint:
        return ("ckpt", drafter.checkpoint, r_or_target) if drafter.kind == "model" else ("ckpt", drafter.checkpoint)
    ref = reference_checkpoint(r_or_target, drafter.meth) if drafter.meth in HEAD_METHODS else ""
    if ref:                     # a bare method: the method authors' head for this target
        return ("ckpt", ref)
    who = drafter.model.name if drafter.kind == "model" else (drafter.exit_layer if drafter.kind == "early-exit" else "")
    return (r_or_target, drafter.meth, who)


def level_key(k: tuple) -> str:
    return json.dumps(list(k))


def _logit(a):
    a = np.clip(np.asarray(a, dtype=np.float64), ALPHA_EPS, 1.0 - ALPHA_EPS)
    return np.log(a / (1.0 - a))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def shifted(alpha: float, d: float) -> float:
    """alpha moved by ``d`` in logit(alpha) (a term the model adds, applied to a table row's alpha):
    sigmoid(logit(alpha) + d), alpha clipped to [ALPHA_EPS, 1 - ALPHA_EPS] first."""
    return float(sigmoid(_logit(alpha) + d))


# ------------------------------------------------------------------ the fit

def _solve(X: np.ndarray, Z: np.ndarray, y: np.ndarray, ridge: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Fixed effects beta and the levels' u minimising |y - X beta - Z u|^2 + ridge |beta_effects|^2
    + lam |u|^2 (the intercepts almost free; a method without rows held at 0): Henderson's mixed-model
    equations with a ridge on the fixed effects."""
    p = X.shape[1]
    pen = np.full(p, ridge)
    pen[:N_INTERCEPTS] = 1e-9
    unseen = ~np.any(X[:, :N_INTERCEPTS] != 0, axis=0)
    pen[:N_INTERCEPTS][unseen] = ridge
    A = np.hstack([X, Z])
    P = np.concatenate([pen, np.full(Z.shape[1], lam)])
    sol = np.linalg.solve(A.T @ A + np.diag(P), A.T @ y)
    return sol[:p], sol[p:]


@dataclass(frozen=True)
class Fit:
    """The fitted model, the rows' conversions and the leave-one-source-out results."""

    coef: dict[str, float]
    sigma: dict[str, float]             # band half-width in logit(alpha): 'method|seen', 'method|new', 'method', 'all'
    rows: dict[str, dict]               # id -> {alpha, tau, how}
    anchors: dict[str, list]            # json key of a drafter level -> [u, rows]
    loso: dict[str, dict]               # id -> {alpha_pred, tau_pred, tau_obs, error, residual, seen, covered}
    ridge: float
    table_hash: str
    probe: list[float]
    lam: float = 1.0
    held_out: dict = dataclasses.field(default_factory=dict)   # id -> as loso, from the full fit
    context: dict = dataclasses.field(default_factory=dict)    # the long-context term (context_slope)

    def predict_logit(self, f: PairFeatures, key: tuple | None = None) -> tuple[float, int]:
        """(logit(alpha), rows of the drafter level behind its u)."""
        x, off = feature_vector(f)
        beta = np.array([self.coef[p] for p in PARAMS])
        eta = float(x @ beta + off) + context_term(self.context, f.method, f.context_tokens)
        if key is not None:
            u, n = self.anchors.get(level_key(key), (0.0, 0))
            return eta + u, int(n)
        return eta, 0

    def band(self, method: str, seen: bool = False) -> float:
        """The band's half-width in logit(alpha) for a prediction of ``method`` whose drafter level
        the fit has (``seen``) or has not seen."""
        return band_of(self.sigma, method, seen)

    def band_name(self, method: str, seen: bool = False) -> str:
        for k in (f"{method}|{_seen(seen)}", method, f"all|{_seen(seen)}"):
            if k in self.sigma:
                return (f"{method}" if k.startswith(method) else "all methods") + (
                    f", {'a checkpoint it has' if seen else 'a checkpoint it has not'} seen" if "|" in k else "")
        return "all methods"


def _seen(seen: bool) -> str:
    return "seen" if seen else "new"


def band_of(sigma: dict, method: str, seen: bool) -> float:
    for k in (f"{method}|{_seen(seen)}", method, f"all|{_seen(seen)}", "all"):
        if k in sigma:
            return sigma[k]
    return 0.0


def bands(residuals: list[dict]) -> dict[str, float]:
    """BAND_LEVEL quantiles of |residual| (logit alpha): per method and seen/new level where each has
    MIN_BAND_ROWS, per method, and over all methods (the fallbacks of band_of)."""
    def q(v):
        return float(np.quantile(np.abs(v), BAND_LEVEL))
    out: dict[str, float] = {}
    if not residuals:
        return {"all": 0.0}
    out["all"] = q([v["residual"] for v in residuals])
    for s in (True, False):
        v = [x["residual"] for x in residuals if x["seen"] == s]
        if len(v) >= MIN_BAND_ROWS:
            out[f"all|{_seen(s)}"] = q(v)
    for m in MODELLED_KINDS:
        mine = [x for x in residuals if x["method"] == m]
        if len(mine) < MIN_BAND_ROWS:
            continue
        out[m] = q([x["residual"] for x in mine])
        split = {s: [x["residual"] for x in mine if x["seen"] == s] for s in (True, False)}
        if all(len(v) >= MIN_BAND_ROWS for v in split.values()):
            out.update({f"{m}|{_seen(s)}": q(v) for s, v in split.items()})
    return out


def _design(rows: list[AcceptanceRow], levels: dict[str, int]):
    X, off = zip(*(feature_vector(row_features(r)) for r in rows))
    Z = np.zeros((len(rows), len(levels)))
    for i, r in enumerate(rows):
        Z[i, levels[level_key(pair_key(r))]] = 1.0
    return np.array(X), np.array(off), Z


def _fit_core(rows, y, ridge, lam):
    levels = {k: i for i, k in enumerate(sorted({level_key(pair_key(r)) for r in rows}))}
    X, off, Z = _design(rows, levels)
    beta, u = _solve(X, Z, y - off, ridge, lam)
    n = Z.sum(axis=0)
    return beta, {k: [float(u[i]), int(n[i])] for k, i in levels.items()}


def predict_row_tau(beta, anchors, r: AcceptanceRow) -> tuple[float, float]:
    """(predicted alpha of the row's first task / single alpha, predicted tau at the row's shape)."""
    coef = dict(zip(PARAMS, beta))
    fit = Fit(coef=coef, sigma={"all": 0.0}, rows={}, anchors=anchors, loso={}, ridge=0.0, table_hash="", probe=[])
    shape = dict(k=r.k or (None if r.is_tree else TAU_CHECK_K), nodes=r.tree_nodes, depth=r.tree_depth, tree=row_tree(r))
    if r.task == "mix":                 # the mix as the model predicts it: each task, then the harmonic mean
        taus, alphas = [], []
        for t in MIX_TASKS:
            f = dataclasses.replace(row_features(r), task_weights=((t, 1.0),))
            a = float(sigmoid(fit.predict_logit(f, pair_key(r))[0]))
            alphas.append(a)
            taus.append(float(tau_at_shape(r.draft_kind, a, **shape)))
        return float(np.mean(alphas)), 1.0 / float(np.mean([1.0 / t for t in taus]))
    a = float(sigmoid(fit.predict_logit(row_features(r), pair_key(r))[0]))
    return a, float(tau_at_shape(r.draft_kind, a, **shape))


def _held_out_result(beta, anchors, r: AcceptanceRow, conv: Converted, y: float, source: str) -> dict:
    a_pred, tau_pred = predict_row_tau(beta, anchors, r)
    # the residual in logit(alpha): observed alpha against the model's single-alpha prediction
    # (a mix row: the alpha that gives the predicted mixed tau at its shape)
    a_mix = alpha_of_tau(r.draft_kind, tau_pred, k=r.k or TAU_CHECK_K, nodes=r.tree_nodes,
                         depth=r.tree_depth, tree=row_tree(r)) if r.task == "mix" else a_pred
    return dict(source=source, method=r.draft_kind, alpha_pred=a_pred, tau_pred=tau_pred, tau_obs=conv.tau,
                error=(tau_pred - conv.tau) / conv.tau, residual=float(y - _logit(a_mix)),
                seen=level_key(pair_key(r)) in anchors, temperature=r.temperature)


def table_hash(root=None) -> str:
    h = hashlib.sha256(table_path(root).read_bytes())
    from ..catalog.checkpoints import checkpoints_path
    h.update(checkpoints_path(root).read_bytes())
    return h.hexdigest()[:16]


def machinery_probe() -> list[float]:
    """tau of a few default trees (and EAGLE-2's dynamic tree) at alpha 0.7: changes when the tree machinery does."""
    return [round(float(tau_of_alpha(m, 0.7, nodes=n, depth=d, tree=t)), 6) for m, n, d, t in (
        ("eagle", 25, 5, None), ("medusa", 63, 4, None), ("model", 16, 4, None), ("eagle2", 59, 6, eagle2_tree(59)))]


def loso_median(f: Fit, informative: bool = True) -> float:
    """Median |tau error| of the held-out predictions (of rows whose method has another source)."""
    errs = [abs(v["error"]) for v in f.loso.values() if v.get("informative") or not informative]
    return float(np.median(errs)) if errs else float("nan")


def inside(result: dict, sigma: dict) -> bool:
    """Whether a held-out result lies inside its band: |residual| <= band_of(sigma, method, seen)."""
    return bool(abs(result["residual"]) <= band_of(sigma, result["method"], result["seen"]))


def fit(root=None, ridge: float | None = None, lam: float | None = None, loso: bool = True) -> Fit:
    """Fit the model on the table's fit rows, with every leave-one-source-out refit; ``ridge`` and
    ``lam`` None: the pair of RIDGES x LAMBDAS with the smallest LOSO median."""
    if ridge is None or lam is None:
        fits = [fit(root, r, m) for r in ((ridge,) if ridge is not None else RIDGES)
                for m in ((lam,) if lam is not None else LAMBDAS)]
        return min(fits, key=loso_median)
    table = load_table(root)
    from ..catalog.checkpoints import check_table_links
    from ..errors import raise_collected
    raise_collected(check_table_links(table, root))
    conv = {r.id: convert(r) for r in table}
    rows = [r for r in table if r.fit and conv[r.id].alpha is not None]
    y = _logit([conv[r.id].alpha for r in rows])
    beta, anchors = _fit_core(rows, y, ridge, lam)
    out_loso: dict[str, dict] = {}
    if loso:
        for src in sorted({r.source_key for r in rows}):
            keep = [i for i, r in enumerate(rows) if r.source_key != src]
            b, anc = _fit_core([rows[i] for i in keep], y[keep], ridge, lam)
            for i, r in enumerate(rows):
                if r.source_key == src:
                    out_loso[r.id] = _held_out_result(b, anc, r, conv[r.id], y[i], src)
    sigma: dict[str, float] = {"all": 0.0}
    if out_loso:
        # a held-out row tells how far a new source lands from the others only when its method
        # has rows from another source ('informative'); a method with one source is predicted from
        # nothing of its own when that source is out, which is not the situation of a prediction
        sources = {m: {r.source_key for r in rows if r.draft_kind == m} for m in MODELLED_KINDS}
        for v in out_loso.values():
            v["informative"] = len(sources[v["method"]]) > 1
        inf = [v for v in out_loso.values() if v["informative"]]
        sigma = bands(inf)
        # the band's held-out coverage: each source's rows against the band of the other sources' residuals
        for src in {v["source"] for v in out_loso.values()}:
            others = bands([v for v in inf if v["source"] != src])
            for v in out_loso.values():
                if v["source"] == src:
                    v["covered"] = inside(v, others)
    held = {}
    for r in table:
        if r.held_out and conv[r.id].alpha is not None:
            held[r.id] = _held_out_result(beta, anchors, r, conv[r.id], float(_logit(conv[r.id].alpha)), r.source_key)
            held[r.id]["covered"] = inside(held[r.id], sigma)
    return Fit(coef=dict(zip(PARAMS, map(float, beta))), sigma=sigma,
               rows={r.id: dict(alpha=conv[r.id].alpha, tau=conv[r.id].tau, how=conv[r.id].how) for r in table},
               anchors=anchors, loso=out_loso, ridge=ridge, table_hash=table_hash(root), probe=machinery_probe(),
               lam=lam, held_out=held, context=context_slope(table))


def fit_path(root=None) -> Path:
    return table_path(root).parent / FIT_FILE


def write_fit(f: Fit, root=None) -> Path:
    """Store a fit (atomically) as hardware_db/acceptance/fit.json."""
    p = fit_path(root)
    data = dataclasses.asdict(f)
    tmp = p.with_name("." + p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(p)
    return p


@lru_cache(maxsize=4)
def _stored(root: str) -> Fit:
    p = fit_path(root)
    stale = None
    try:
        data = json.loads(p.read_text())
        f = Fit(**data)
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        f, stale = None, f"{p} is missing or unreadable"
    if f is not None and f.table_hash != table_hash(root):
        stale = f"{table_path(root)} or checkpoints.yaml beside it changed since {p} was written"
    elif f is not None and f.probe != machinery_probe():
        stale = "the model's tree acceptance changed since the acceptance fit was written"
    if stale:
        warnings.warn(f"{stale}: refitting the acceptance model in memory "
                      "(store it with `dse acceptance fit --write`)", stacklevel=3)
        return fit(root)
    return f


def stored_fit(db: Database | None = None) -> Fit:
    """The acceptance model: the stored fit, or a fresh one when the table or machinery changed."""
    return _stored(str((db or load_database()).root))


# the resolution of a workload's acceptance (.resolve) and the fit's report (.report) live beside this
# module; their names stay importable from here (dse.acceptance.fit.resolve, .report, ...)
_ELSEWHERE = {"resolve": ("Resolution", "TaskAcceptance", "features_for", "resolve", "resolved_workload"),
              "report": ("_BEGIN", "_END", "format_report", "plot_fit", "predicted_rows", "report", "update_doc")}


def __getattr__(name: str):
    for mod, names in _ELSEWHERE.items():
        if name in names:
            import importlib
            return getattr(importlib.import_module(f"{__package__}.{mod}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":   # python -m dse.acceptance.fit docs/acceptance.md docs/img/acceptance-fit.png
    import sys
    __getattr__("update_doc")(sys.argv[1], sys.argv[2])
