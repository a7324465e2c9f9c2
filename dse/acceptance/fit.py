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
                   + [draft heads] h * log10(target parameters / 10B)
                   + [early exit]  logit(exit layer / layers)   (slope 1, not fitted: see below)

by ridge regression (penalty RIDGE on everything but the method intercepts) on logit(alpha);
a row of the Spec-Bench mix (six tasks in equal parts) enters with each task's effect at 1/6.
Early exits in the table all sit at 25-31% of the depth, so the exit slope is fixed at 1 (the
odds of acceptance proportional to the odds of the exit fraction: 1 at the last layer) rather
than fitted. A prediction for a (target, draft) pair that has table rows at another task or
temperature is shifted by the mean residual of those rows (n/(n+1) of it): ``anchored``.

**Error and band.** Leave-one-source-out: every source (paper, leaderboard, repository) is
held out in turn, the model refitted on the others and the source's rows predicted. The band
of a modelled alpha is +-1 RMS of the LOSO residuals in logit(alpha) of its method (of all
methods where a method has fewer than MIN_BAND_ROWS rows); a table row has no band.

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
    load_table,
    table_path,
)
from ..catalog.database import Database, load_database
from ..catalog.specs import ModelSpec
from ..model import specdec
from ..model.tau import acceptance_terms
from ..process.matplotlib_env import import_matplotlib
from ..workload.spec import (
    AcceptanceSpec,
    DrafterSpec,
    Workload,
    make_acceptance,
)
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
          + ("model:log10_size_ratio", "model:other_family", "head:log10_target_size"))
N_INTERCEPTS = len(MODELLED_KINDS)
#: ridge penalties tried on logit(alpha) effects; the fit keeps the one with the smallest median
#: leave-one-source-out tau error (over rows whose method has another source): chosen on the same
#: residuals it is judged by, so that median is slightly optimistic (docs/acceptance.md)
RIDGES = (0.3, 1.0, 3.0, 10.0)
#: the early exit's slope on logit(exit fraction): fixed, not fitted (the table's exits are all at 25-31%)
EXIT_SLOPE = 1.0
#: fewest LOSO residuals for a method's own band (else the band of all methods)
MIN_BAND_ROWS = 5
#: chain length at which an alpha row without k is compared as tau
TAU_CHECK_K = 4
#: alpha is kept inside (ALPHA_EPS, 1 - ALPHA_EPS) before taking its logit
ALPHA_EPS = 1e-3
FIT_FILE = "fit.json"
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


# ------------------------------------------------------------------ features

@dataclass(frozen=True)
class PairFeatures:
    """What the model knows about a (target, draft) pair."""

    method: str
    task_weights: tuple[tuple[str, float], ...]
    temperature: float
    log_ratio: float = 0.0           # draft models: log10(draft / target parameters)
    other_family: float = 0.0        # draft models: 1 when not of the target's family
    log_target: float = 0.0          # heads: log10(target parameters / 10B)
    exit_logit: float = 0.0          # early exit: logit(exit layer / layers)


def feature_vector(f: PairFeatures) -> tuple[np.ndarray, float]:
    """(x, offset): logit(alpha) = x . beta + offset."""
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
    return x, EXIT_SLOPE * f.exit_logit if f.method == "early-exit" else 0.0


def _tasks_of(task: str) -> tuple[tuple[str, float], ...]:
    return tuple((t, 1 / 6) for t in MIX_TASKS) if task == "mix" else ((task, 1.0),)


def row_features(r: AcceptanceRow) -> PairFeatures:
    tp = r.target_params_b or 1.0
    kw = {}
    if r.draft_kind == "model":
        kw = dict(log_ratio=math.log10(max(r.draft_params_b, 1e-3) / tp), other_family=0.0 if r.same_family else 1.0)
    elif r.draft_kind in HEAD_METHODS:
        kw = dict(log_target=math.log10(tp / 10.0))
    elif r.draft_kind == "early-exit":
        f = r.exit_layer / r.target_layers
        kw = dict(exit_logit=math.log(f / (1.0 - f)))
    return PairFeatures(method=r.draft_kind, task_weights=_tasks_of(r.task), temperature=r.temperature or 0.0, **kw)


def pair_key(r_or_target, drafter: DrafterSpec | None = None) -> tuple:
    """(target, method, draft model or exit layer): rows of one pair anchor its predictions."""
    if drafter is None:
        r = r_or_target
        who = r.draft_model if r.draft_kind == "model" else (r.exit_layer if r.draft_kind == "early-exit" else "")
        return (r.target_model, r.draft_kind, who)
    meth = drafter.meth
    who = drafter.model.name if drafter.kind == "model" else (drafter.exit_layer if drafter.kind == "early-exit" else "")
    return (r_or_target, meth, who)


def _logit(a):
    a = np.clip(np.asarray(a, dtype=np.float64), ALPHA_EPS, 1.0 - ALPHA_EPS)
    return np.log(a / (1.0 - a))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


# ------------------------------------------------------------------ the fit

def _solve(X: np.ndarray, y: np.ndarray, ridge: float) -> np.ndarray:
    pen = np.full(X.shape[1], ridge)
    pen[:N_INTERCEPTS] = 1e-9           # intercepts: (almost) free; keeps a method without rows at 0
    unseen = ~np.any(X[:, :N_INTERCEPTS] != 0, axis=0)
    pen[:N_INTERCEPTS][unseen] = ridge
    return np.linalg.solve(X.T @ X + np.diag(pen), X.T @ y)


@dataclass(frozen=True)
class Fit:
    """The fitted model, the rows' conversions and the leave-one-source-out results."""

    coef: dict[str, float]
    sigma: dict[str, float]             # method -> band half-width in logit(alpha); 'all' for the pooled
    rows: dict[str, dict]               # id -> {alpha, tau, how}
    anchors: dict[str, list]            # json key of a pair -> [mean residual, n]
    loso: dict[str, dict]               # id -> {alpha_pred, tau_pred, tau_obs, error, residual}
    ridge: float
    table_hash: str
    probe: list[float]

    def predict_logit(self, f: PairFeatures, key: tuple | None = None) -> tuple[float, int]:
        """(logit(alpha), rows anchoring it)."""
        x, off = feature_vector(f)
        beta = np.array([self.coef[p] for p in PARAMS])
        eta = float(x @ beta + off)
        if key is not None:
            res, n = self.anchors.get(json.dumps(list(key)), (0.0, 0))
            return eta + n / (n + 1.0) * res, int(n)
        return eta, 0

    def band(self, method: str) -> float:
        return self.sigma.get(method, self.sigma["all"])


def _design(rows: list[AcceptanceRow]):
    X, off = zip(*(feature_vector(row_features(r)) for r in rows))
    return np.array(X), np.array(off)


def _anchor_table(rows, resid) -> dict[str, list]:
    acc: dict[tuple, list] = {}
    for r, e in zip(rows, resid):
        acc.setdefault(pair_key(r), []).append(float(e))
    return {json.dumps(list(k)): [float(np.mean(v)), len(v)] for k, v in acc.items()}


def _fit_core(rows, y, ridge):
    X, off = _design(rows)
    beta = _solve(X, y - off, ridge)
    resid = y - (X @ beta + off)
    return beta, _anchor_table(rows, resid)


def _predict_row_tau(beta, anchors, r: AcceptanceRow) -> tuple[float, float]:
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


def table_hash(root=None) -> str:
    return hashlib.sha256(table_path(root).read_bytes()).hexdigest()[:16]


def machinery_probe() -> list[float]:
    """tau of a few default trees (and EAGLE-2's dynamic tree) at alpha 0.7: changes when the tree machinery does."""
    return [round(float(tau_of_alpha(m, 0.7, nodes=n, depth=d, tree=t)), 6) for m, n, d, t in (
        ("eagle", 25, 5, None), ("medusa", 63, 4, None), ("model", 16, 4, None), ("eagle2", 59, 6, eagle2_tree(59)))]


def loso_median(f: Fit, informative: bool = True) -> float:
    """Median |tau error| of the held-out predictions (of rows whose method has another source)."""
    errs = [abs(v["error"]) for v in f.loso.values() if v.get("informative") or not informative]
    return float(np.median(errs)) if errs else float("nan")


def fit(root=None, ridge: float | None = None, loso: bool = True) -> Fit:
    """Fit the model on the table's fit rows, with every leave-one-source-out refit; ``ridge``
    None: the penalty of RIDGES with the smallest LOSO median."""
    if ridge is None:
        fits = [fit(root, r) for r in RIDGES]
        return min(fits, key=loso_median)
    table = load_table(root)
    conv = {r.id: convert(r) for r in table}
    rows = [r for r in table if r.fit and conv[r.id].alpha is not None]
    y = _logit([conv[r.id].alpha for r in rows])
    beta, anchors = _fit_core(rows, y, ridge)
    out_loso: dict[str, dict] = {}
    if loso:
        for src in sorted({r.source_key for r in rows}):
            keep = [i for i, r in enumerate(rows) if r.source_key != src]
            b, anc = _fit_core([rows[i] for i in keep], y[keep], ridge)
            for i, r in enumerate(rows):
                if r.source_key != src:
                    continue
                a_pred, tau_pred = _predict_row_tau(b, anc, r)
                tau_obs = conv[r.id].tau
                # the residual in logit(alpha): observed alpha against the model's single-alpha
                # prediction (a mix row: the alpha that gives the predicted mixed tau at its shape)
                a_mix = alpha_of_tau(r.draft_kind, tau_pred, k=r.k or TAU_CHECK_K, nodes=r.tree_nodes,
                                     depth=r.tree_depth, tree=row_tree(r)) if r.task == "mix" else a_pred
                out_loso[r.id] = dict(source=src, method=r.draft_kind, alpha_pred=a_pred, tau_pred=tau_pred,
                                      tau_obs=tau_obs, error=(tau_pred - tau_obs) / tau_obs,
                                      residual=float(y[i] - _logit(a_mix)))
    sigma: dict[str, float] = {"all": 0.0}
    if out_loso:
        # a held-out row tells how far a new source lands from the others only when its method
        # has rows from another source ('informative'); a method with one source is predicted from
        # nothing of its own when that source is out, which is not the situation of a prediction
        sources = {m: {r.source_key for r in rows if r.draft_kind == m} for m in MODELLED_KINDS}
        for v in out_loso.values():
            v["informative"] = len(sources[v["method"]]) > 1
        inf = [v for v in out_loso.values() if v["informative"]]
        sigma["all"] = float(np.sqrt(np.mean(np.square([v["residual"] for v in inf])))) if inf else 0.0
        for m in MODELLED_KINDS:
            res = [v["residual"] for v in inf if v["method"] == m]
            if len(res) >= MIN_BAND_ROWS:
                sigma[m] = float(np.sqrt(np.mean(np.square(res))))
    return Fit(coef=dict(zip(PARAMS, map(float, beta))), sigma=sigma,
               rows={r.id: dict(alpha=conv[r.id].alpha, tau=conv[r.id].tau, how=conv[r.id].how) for r in table},
               anchors=anchors, loso=out_loso, ridge=ridge, table_hash=table_hash(root), probe=machinery_probe())


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
        stale = f"{table_path(root)} changed since {p} was written"
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


# ------------------------------------------------------------------ the fit's report (dse acceptance fit, docs)

def report(f: Fit) -> dict:
    """Coefficients, bands, and the leave-one-source-out error per method and overall."""
    per = {}
    for m in MODELLED_KINDS:
        v = [x for x in f.loso.values() if x["method"] == m]
        if not v:
            continue
        errs = [abs(x["error"]) for x in v]
        per[m] = dict(rows=len(v), sources=len({x["source"] for x in v}), informative=bool(v[0].get("informative")),
                      median_abs_error=float(np.median(errs)), max_abs_error=float(np.max(errs)),
                      band_logit=f.band(m))
    return dict(ridge=f.ridge, coefficients={p: f.coef[p] for p in PARAMS}, band_logit=f.sigma, per_method=per,
                loso_median=loso_median(f), loso_median_all_rows=loso_median(f, informative=False),
                rows_fitted=len(f.loso), rows_in_table=len(f.rows))


def format_report(rep: dict) -> str:
    lines = [f"ridge penalty {rep['ridge']:g} (the smallest held-out median of {', '.join(map(str, RIDGES))})",
             "", "coefficients of logit(alpha):"]
    lines += [f"  {k:<28}{v:+.3f}" for k, v in rep["coefficients"].items()]
    lines += ["", "leave-one-source-out, tau predicted for each held-out row at its own chain or tree:",
              f"  {'method':<12}{'rows':>5}{'sources':>8}{'median |err|':>14}{'max |err|':>11}{'band (logit)':>14}"]
    for m, v in rep["per_method"].items():
        note = "" if v["informative"] else "  (one source: held out, the method has no data)"
        lines.append(f"  {m:<12}{v['rows']:>5}{v['sources']:>8}{100 * v['median_abs_error']:>13.1f}%"
                     f"{100 * v['max_abs_error']:>10.1f}%{v['band_logit']:>14.3f}{note}")
    lines += ["", f"median |tau error| held out: {100 * rep['loso_median']:.1f}% over the rows of methods with "
                  f"another source; {100 * rep['loso_median_all_rows']:.1f}% over all {rep['rows_fitted']} fitted rows"]
    return "\n".join(lines)


def predicted_rows(f: Fit, root=None) -> dict[str, float]:
    """The full fit's tau for every row it can place (a modelled method, one of the workload's
    tasks or the mix, a temperature, and a chain length or tree): id -> tau at the row's shape."""
    beta = np.array([f.coef[p] for p in PARAMS])
    out = {}
    for r in load_table(root):
        conv = f.rows.get(r.id) or {}
        if (r.draft_kind not in MODELLED_KINDS or r.task not in TASKS + ("mix",) or r.temperature is None
                or conv.get("tau") is None or (r.k is None and not r.is_tree and r.stat_kind != "alpha")):
            continue
        out[r.id] = _predict_row_tau(beta, f.anchors, r)[1]
    return out


# ------------------------------------------------------------------ docs/acceptance.md and its figure

_BEGIN, _END = "<!-- BEGIN dse acceptance fit -->", "<!-- END dse acceptance fit -->"


def plot_fit(f: Fit, path, root=None) -> None:
    """The held-out figure: each fitted row's tau predicted with its source left out, against the
    published tau, one marker per method; and the error per method."""
    Figure = import_matplotlib("matplotlib.figure").Figure
    rows = {r.id: r for r in load_table(root)}
    colours = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#9a9a9a"]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "<"]
    fig = Figure(figsize=(11.0, 4.8), layout="constrained")
    ax, bx = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    hi = max(max(v["tau_obs"], v["tau_pred"]) for v in f.loso.values()) * 1.05
    ax.plot([1, hi], [1, hi], color="#666666", lw=0.8)
    for frac in (0.88, 1.12):
        ax.plot([1, hi], [1 * frac, hi * frac], color="#999999", lw=0.6, ls=":")
    names, meds = [], []
    for i, m in enumerate(MODELLED_KINDS):
        v = [x for x in f.loso.values() if x["method"] == m]
        if not v:
            continue
        inf = v[0].get("informative")
        ax.scatter([x["tau_obs"] for x in v], [x["tau_pred"] for x in v], s=18 if inf else 10,
                   marker=markers[i], color=colours[i], alpha=0.85 if inf else 0.35, linewidths=0,
                   label=f"{m} ({len(v)} rows, {len({x['source'] for x in v})} source{'s' if len({x['source'] for x in v}) > 1 else ''})")
        names.append(m + ("" if inf else " *"))
        meds.append(100 * float(np.median([abs(x["error"]) for x in v])))
    from matplotlib.ticker import FuncFormatter, NullFormatter
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(NullFormatter())
        axis.set_ticks([1, 1.5, 2, 3, 4, 6, 8])
    bx.xaxis.set_major_formatter(plain)
    ax.set_xlabel("published tau (tokens per target pass, at the row's own chain or tree)")
    ax.set_ylabel("predicted with the row's source left out")
    ax.set_title("Leave-one-source-out: predicted vs published tau (dotted: +-12%)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, lw=0.4, alpha=0.5)
    bx.barh(range(len(names))[::-1], meds, color="#0072B2")
    bx.set_yticks(range(len(names))[::-1], names, fontsize=8)
    bx.axvline(12, color="#D55E00", lw=0.8, ls="--")
    bx.set_xscale("log")
    bx.set_xlabel("median |tau error| held out (%), log scale; dashed: 12%")
    bx.set_title("Per method (* one source: held out, the method has no data left)", fontsize=9)
    for y, v in zip(range(len(names))[::-1], meds):
        bx.text(v * 1.05, y, f"{v:.1f}%", va="center", fontsize=7)
    fig.suptitle(f"The acceptance model, fitted on {len(f.loso)} published rows of "
                 f"{len({r.source_key for r in rows.values() if r.id in f.loso})} sources: median held-out "
                 f"error {100 * loso_median(f):.1f}% (methods with another source), "
                 f"{100 * loso_median(f, False):.1f}% (all)", fontsize=10)
    fig.savefig(path, format="png", dpi=150)


def update_doc(path, img) -> None:
    """Refresh docs/acceptance.md between its markers (the fit's report) and its figure."""
    f = stored_fit()
    plot_fit(f, img)
    p = Path(path)
    doc = p.read_text()
    i, j = doc.index(_BEGIN) + len(_BEGIN), doc.index(_END)
    p.write_text(doc[:i] + "\n```text\n" + format_report(report(f)) + "\n```\n" + doc[j:])


if __name__ == "__main__":   # python -m dse.acceptance.fit docs/acceptance.md docs/img/acceptance-fit.png
    import sys
    update_doc(sys.argv[1], sys.argv[2])
