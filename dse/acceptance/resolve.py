"""A workload's acceptance from the published table or the acceptance model (:mod:`.fit`): per
task, the table's rows of the exact pair (or checkpoint), task and temperature, else the model's
prediction with its band and the band's level.

**A bare method** (``--draft eagle3``) is the method authors' head for the target where the registry
marks one (``reference: true``: what the method's published numbers measured; fit.pair_key), else the
drafter level the table's unnamed rows of that pair measured, else the method's mean over the
checkpoints the fit has seen, with the band of a checkpoint it has not seen. ``--draft eagle3:<checkpoint>``
is that checkpoint: its own rows where the table has the (checkpoint, task, temperature), else
the model with the checkpoint's fitted level u and the band of a seen checkpoint. An MTP drafter
(catalog.acceptance.TABLE_KINDS) takes the table alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..catalog.acceptance import TABLE_KINDS, load_groups, load_table, table_path
from ..catalog.database import Database, load_database
from ..catalog.specs import ModelSpec
from ..errors import MISSING, SpecError
from ..model.transformer import total_params
from ..workload.spec import AcceptanceSpec, DrafterSpec, TaskMix, Workload, mixture
from .fit import (
    BAND_LEVEL,
    CHAIN_METHODS,
    HEAD_METHODS,
    Fit,
    PairFeatures,
    context_term,
    is_large_vocab,
    level_key,
    pair_key,
    shifted,
    sigmoid,
    stored_fit,
)


@dataclass(frozen=True)
class TaskAcceptance:
    task: str
    weight: float
    alpha: float
    low: float
    high: float
    origin: str                 # 'table' | 'model'
    detail: str                 # row ids, or the model's terms
    #: conditional rates per drafted position (a chained MTP module's published curve); () = alpha
    rates: tuple[float, ...] = ()


@dataclass(frozen=True)
class Resolution:
    """A drafter's acceptance for a workload: per task, the nominal alpha and its band."""

    tasks: tuple[TaskAcceptance, ...]

    @property
    def source(self) -> str:
        kinds = {t.origin for t in self.tasks}
        return kinds.pop() if len(kinds) == 1 else "table+model"

    def spec(self, which: str = "alpha") -> AcceptanceSpec:
        return mixture([AcceptanceSpec(kind="per_position", per_position=t.rates) if t.rates else
                        AcceptanceSpec(kind="alpha", alpha=getattr(t, which)) for t in self.tasks],
                       [t.weight for t in self.tasks], [t.task for t in self.tasks])

    def text(self) -> str:
        """'alpha 0.74 from table rows specbench-03' / 'alpha 0.71 +-0.06 (68% band) modelled: ...', per
        task in a mix."""
        level = f"{100 * BAND_LEVEL:.0f}% band"

        def one(t: TaskAcceptance) -> str:
            if t.rates:
                shown = ", ".join(f"{a:.2f}" for a in t.rates[:8]) + (", ..." if len(t.rates) > 8 else "")
                return f"acceptance per drafted position {shown} from {t.detail}"
            if t.origin == "table":
                return f"alpha {t.alpha:.2f} from {t.detail}"
            half = 0.5 * (t.high - t.low)
            return f"alpha {t.alpha:.2f} +-{half:.2f} ({level}) modelled: {t.detail}"
        if len(self.tasks) == 1:
            return one(self.tasks[0])
        parts = ", ".join(f"{t.task} {t.alpha:.2f}" + (" (table)" if t.origin == "table" else "") for t in self.tasks)
        weights = "equal parts" if len({round(t.weight, 9) for t in self.tasks}) == 1 else \
            ", ".join(f"{t.task} {t.weight:g}" for t in self.tasks)
        mod = [t for t in self.tasks if t.origin == "model"]
        if not mod:
            return f"alpha per task {parts} ({weights}) from the table"
        half = [0.5 * (t.high - t.low) for t in mod]
        band = f"+-{min(half):.2f}" + (f"-{max(half):.2f}" if max(half) - min(half) >= 0.005 else "")
        detail = mod[0].detail.replace(f", task {mod[0].task}", "")
        return f"alpha per task {parts} ({weights}), {band} ({level}) modelled: {detail}"


def features_for(target: ModelSpec, drafter: DrafterSpec, task: str, temperature: float, db: Database,
                 context_tokens: float = 0.0, chain: bool = False) -> PairFeatures:
    meth = drafter.meth
    kw = {}
    if drafter.kind == "model":
        g = load_groups(db.root)
        same = bool(g.family_of(drafter.model.name, drafter.model.family)) and \
            g.family_of(drafter.model.name, drafter.model.family) == g.family_of(target.name, target.family)
        kw = dict(log_ratio=math.log10(total_params(drafter.model) / total_params(target)),
                  other_family=0.0 if same else 1.0)
    elif meth in HEAD_METHODS:
        kw = dict(log_target=math.log10(total_params(target) / 1e9 / 10.0),
                  large_vocab=float(is_large_vocab(target.name, target.family, db.root)),
                  chain=float(chain and meth in CHAIN_METHODS))
    elif meth == "early-exit":
        f = drafter.exit_layer / target.num_layers
        kw = dict(exit_logit=math.log(f / (1.0 - f)))
    return PairFeatures(method=meth, task_weights=((task, 1.0),), temperature=temperature,
                        context_tokens=float(context_tokens or 0.0), **kw)


def _context_text(f: Fit, method: str, context_tokens: float) -> str:
    """'context 32,768 tokens: -3.18 in logit(alpha) (...)', or '' where the term is 0."""
    d = context_term(f.context, method, context_tokens)
    if not d:
        return ""
    c = f.context
    return (f"context {context_tokens:,.0f} tokens: {d:+.2f} in logit(alpha) ({c['slope']:.3f} x the doublings "
            f"past {c['s0']:,.0f} squared, held past {c['s_max']:,.0f}; fitted on table rows {c['rows'][0]}..{c['rows'][-1]})")


def _table_rows(target: ModelSpec, drafter: DrafterSpec, task: str, temperature: float, db: Database, f: Fit,
                shape: tuple | None = None):
    """The table's rows of this pair (a named checkpoint: of that checkpoint, on any method that
    drafts with it the same way), task and temperature; of those measured at ``shape`` (k, tree
    nodes, tree depth) only those when there are any (a row of the design's own chain or tree is
    its measurement: the effective alpha of another shape is an extrapolation). Held-out rows too:
    they are published measurements, only kept out of the fit."""
    key = pair_key(target.name, drafter)
    out = []
    for r in load_table(db.root):
        if (pair_key(r) == key and r.draft_kind == drafter.meth and r.task == task and r.temperature is not None
                and abs(r.temperature - temperature) < 1e-9 and f.rows.get(r.id, {}).get("alpha") is not None):
            if drafter.kind == "early-exit" and r.target_layers != target.num_layers:
                continue
            out.append(r)
    if shape is not None:
        same = [r for r in out if (r.k, r.tree_nodes, r.tree_depth) == tuple(shape)]
        # else rows of the same kind of shape (a chain's: chains; a tree's: trees), else any
        kind = [r for r in out if (r.tree_nodes is None) == (shape[1] is None)]
        out = same or kind or out
    return out


def resolve(target: ModelSpec, drafter: DrafterSpec, task: TaskMix, temperature: float,
            db: Database | None = None, shape: tuple | None = None, context_tokens: float = 0.0,
            chain: bool | None = None) -> Resolution:
    """The drafter's acceptance per task: the table's rows for this exact pair or checkpoint, task and
    temperature where there are any (their mean effective alpha; those of the design's own
    ``shape`` = (k, tree nodes, tree depth) first, when known), else the model (with the drafter
    level's u where the fit has seen it) with its band. ``context_tokens`` (the workload's S = prompt
    + output / 2): an EAGLE-family head past its training context takes the fit's long-context term
    (dse.acceptance.fit.context_slope) on the table's alpha and on the model's alike (the table's
    rows are short-context measurements). ``chain``: the design drafts a chain (None: when ``shape`` is a
    chain's, (k, None, None)): an EAGLE-3 head takes the fit's chain term (head:eagle3_chain) in the model,
    and on the table's alpha where only tree rows of the pair are at hand."""
    db = db or load_database()
    f = stored_fit(db)
    if chain is None:
        chain = shape is not None and shape[0] is not None and shape[1] is None
    if drafter.meth in TABLE_KINDS:
        return _table_only(target, drafter, task, temperature, db, f, shape)
    # the workload's mix is Spec-Bench's: a measured mix row of this pair is the most direct answer
    if task.label == "mix":
        rows = _table_rows(target, drafter, "mix", temperature, db, f, shape)
        if rows:
            return Resolution((_from_table("mix", 1.0, rows, f, drafter.meth, context_tokens, chain),))
    key = pair_key(target.name, drafter)
    seen = level_key(key) in f.anchors
    out = []
    for t, w in zip(task.tasks, task.weights):
        rows = _table_rows(target, drafter, t, temperature, db, f, shape)
        if rows:
            out.append(_from_table(t, w, rows, f, drafter.meth, context_tokens, chain))
            continue
        feats = features_for(target, drafter, t, temperature, db, context_tokens, chain)
        eta, n = f.predict_logit(feats, key)
        s = f.band(drafter.meth, seen)
        a, lo, hi = (float(sigmoid(eta + d)) for d in (0.0, -s, s))
        ref = key[1] if key[0] == "ckpt" and not drafter.checkpoint else ""
        terms = [f"{drafter.meth}" + (f" checkpoint {drafter.checkpoint}" if drafter.checkpoint else "")
                 + (f" = {ref} (the method authors' head for {target.name})" if ref else ""),
                 f"task {t}", f"T={temperature:g}"]
        if drafter.kind == "model":
            terms.insert(1, f"{total_params(drafter.model) / total_params(target):.2%} of the target's parameters, "
                            f"{'same family' if feats.other_family == 0 else 'other family'}")
        if drafter.kind == "early-exit":
            terms.insert(1, f"exit at {drafter.exit_layer}/{target.num_layers} layers of a target trained for early "
                            "exit (LayerSkip)")
        if n:
            terms.append(f"its level fitted on {n} table row{'s' if n > 1 else ''}"
                         + (" of this checkpoint" if drafter.checkpoint or ref else " of this pair"))
        elif drafter.checkpoint or ref:
            terms.append("no table rows of this checkpoint: the method's mean")
        if feats.chain:
            terms.append(f"a chain: {f.coef['head:eagle3_chain']:+.2f} in logit(alpha) (head:eagle3_chain)")
        if _context_text(f, drafter.meth, context_tokens):
            terms.append(_context_text(f, drafter.meth, context_tokens))
        terms.append(f"band: {100 * BAND_LEVEL:.0f}% of held-out residuals of {f.band_name(drafter.meth, seen)}")
        out.append(TaskAcceptance(t, w, a, lo, hi, "model", ", ".join(terms)))
    return Resolution(tuple(out))


def _table_only(target: ModelSpec, drafter: DrafterSpec, task: TaskMix, temperature: float, db: Database, f: Fit,
                shape: tuple | None) -> Resolution:
    """A drafter whose acceptance comes from the table alone (catalog.acceptance.TABLE_KINDS: an MTP
    module is the target's own, so its rows are not regressed across targets), per task. The rows of
    this target and method at the task and temperature, else at any (the detail names what they were
    measured on), as conditional rates per drafted position (``chain_rates``): a chained MTP module's
    acceptance falls with depth far faster than one i.i.d. rate says (TensorRT-LLM's DeepSeek-R1:
    tau 1.92, 2.58, 2.82, 2.99, 3.01 at k = 1..5), so tau(k) is the published curve at every k it
    covers; past its deepest step, the last step's rate. A target with no rows of its own takes the
    method's rows of every target at the design's chain ``shape`` = (k, ...) as one alpha (origin
    'model', the band their lowest and highest)."""
    conv = [r for r in load_table(db.root) if r.draft_kind == drafter.meth and f.rows.get(r.id, {}).get("alpha")
            is not None]
    own = [r for r in conv if r.target_model == target.name]
    deepest = shape[0] if shape is not None and shape[0] else 0
    out = []
    for t, w in zip(task.tasks, task.weights):
        rows = [r for r in own if r.task == t and r.temperature is not None and abs(r.temperature - temperature) < 1e-9]
        note = ""
        if not rows and own:
            rows = own
            seen = sorted({f"{r.task}{'' if r.temperature is None else f' T={r.temperature:g}'}" for r in own})
            note = f"; measured on {', '.join(seen)}, not {t} at T={temperature:g}: no row of that task"
        rates = chain_rates(rows, f) if rows else ()
        if rates:
            rates = rates + rates[-1:] * max(0, deepest - len(rates))
            ids = ", ".join(r.id for r in rows)
            srcs = "; ".join(sorted({r.source for r in rows}))
            out.append(TaskAcceptance(t, w, rates[0], rates[0], rates[0], "table",
                                      f"table row{'s' if len(rows) > 1 else ''} {ids} ({srcs}){note}", rates))
            continue
        same = [r for r in conv if shape is not None and (r.k, r.tree_nodes, r.tree_depth) == tuple(shape)]
        rows = same or conv
        if not rows:
            raise SpecError(None, "--alpha/--tau", MISSING, f"no published {drafter.meth} acceptance in "
                            f"{table_path(db.root)}: give the acceptance")
        alphas = [f.rows[r.id]["alpha"] for r in rows]
        out.append(TaskAcceptance(t, w, float(np.mean(alphas)), float(min(alphas)), float(max(alphas)), "model",
                                  f"{drafter.meth} of other targets: mean of table rows {', '.join(r.id for r in rows)} "
                                  f"(none of {target.name}); band their lowest and highest"))
    return Resolution(tuple(out))


def chain_rates(rows, f: Fit) -> tuple[float, ...]:
    """Conditional acceptance per drafted position a_1..a_K from chain rows of every length k = 1..K
    (K the longest run from 1; () without a k = 1 row): T(k) the mean published tau of the rows at k
    (T(0) = 1), p_i = T(i) - T(i-1) the probability that the first i drafts are accepted, a_i =
    p_i / p_(i-1), at most 1 (Leviathan et al. 2023: tau = 1 + sum_i prod_(j<=i) a_j gives back
    T(k) at every k). DeepSeek-V3's MTP rows: T = 1.898 (k = 1: 1.875, 1.92, 1.9), 2.58, 2.82,
    2.99, 3.01 -> a = 0.898, 0.682/0.898 = 0.759, 0.24/0.682 = 0.352, 0.708, 0.118."""
    by_k: dict[int, list[float]] = {}
    for r in rows:
        tau = f.rows[r.id].get("tau")
        if r.k is not None and r.tree_nodes is None and tau is not None:
            by_k.setdefault(int(r.k), []).append(float(tau))
    K = 0
    while K + 1 in by_k:
        K += 1
    if not K:
        return ()
    T = np.array([1.0] + [float(np.mean(by_k[k])) for k in range(1, K + 1)])
    p = np.maximum(np.diff(T), 0.0)
    prev = np.concatenate([[1.0], p[:-1]])
    a = np.where(prev > 0, np.minimum(p / np.where(prev > 0, prev, 1.0), 1.0), 0.0)
    return tuple(float(x) for x in a)


def _from_table(task: str, weight: float, rows, f: Fit, method: str = "", context_tokens: float = 0.0,
                chain: bool = False) -> TaskAcceptance:
    a = float(np.mean([f.rows[r.id]["alpha"] for r in rows]))
    ids = ", ".join(r.id for r in rows)
    srcs = "; ".join(sorted({r.source for r in rows}))
    ck = {r.checkpoint for r in rows if r.checkpoint}
    what = f"table row{'s' if len(rows) > 1 else ''} {ids}" + (f" of {', '.join(sorted(ck))}" if ck else "")
    c = f.coef.get("head:eagle3_chain", 0.0)
    if chain and method in CHAIN_METHODS and c and all(r.tree_nodes for r in rows):
        # tree rows only, for a chain: the fit's chain term on their alpha (as the model would add it)
        a = shifted(a, c)
        what += f" as a chain ({c:+.2f} in logit(alpha), head:eagle3_chain)"
    d = context_term(f.context, method, context_tokens)
    if d:           # the rows measured short contexts: the long-context term on their alpha
        a = shifted(a, d)
        what += f" at {_context_text(f, method, context_tokens)}"
    return TaskAcceptance(task, weight, a, a, a, "table", f"{what} ({srcs})")


def resolved_workload(w: Workload, db: Database | None = None, context_tokens: float = 0.0
                      ) -> tuple[Workload, Resolution | None]:
    """``w`` with its acceptance from the table or the model (nominal, low, high) and its source;
    unchanged (and no Resolution) for no drafter."""
    if w.drafter.kind == "none":
        return dataclasses.replace(w, acceptance_source="none", acceptance_low=None, acceptance_high=None), None
    shape = (None, w.tree_nodes, w.k_max) if w.tree_nodes else None      # a fixed tree (a method's default)
    chain = not w.tree_nodes and not w.tree_choices and (w.tree is None or not w.tree.nodes)
    if shape is None and w.drafter.kind == "mtp" and w.drafter.heads:     # mtp:N: the rows of its N steps
        shape = (w.drafter.heads, None, None)
    res = resolve(w.target, w.drafter, w.task, w.temperature, db, shape, context_tokens, chain)
    return dataclasses.replace(w, acceptance=res.spec("alpha"), acceptance_low=res.spec("low"),
                               acceptance_high=res.spec("high"), acceptance_source=res.source), res


def chain_resolution(w: Workload, db: Database | None = None, context_tokens: float = 0.0) -> Resolution | None:
    """The acceptance of the chain candidate of a re-chosen tree (``w.tree_choices`` holds 0) where the
    drafter's chains accept differently from its trees (CHAIN_METHODS: the chain term, and a checkpoint's
    chain rows first); None where they do not (the tree's acceptance serves the chain)."""
    if 0 not in w.tree_choices or w.drafter.meth not in CHAIN_METHODS:
        return None
    return resolve(w.target, w.drafter, w.task, w.temperature, db, (None, None, None), context_tokens, chain=True)


def with_chain_acceptance(w: Workload, db: Database | None = None, context_tokens: float = 0.0
                          ) -> tuple[Workload, Resolution | None]:
    """``w`` with Workload.chain_acceptance from :func:`chain_resolution`, and that resolution (``w``
    unchanged and None where there is none)."""
    res = chain_resolution(w, db, context_tokens)
    if res is None:
        return w, None
    return dataclasses.replace(w, chain_acceptance=(res.spec("alpha"), res.spec("low"), res.spec("high"))), res

