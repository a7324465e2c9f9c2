"""The ``workload:`` section of a study: target, drafts (one or a list, early-exit ranges), task,
dtypes, modes, tree size, runtime, acceptance and the workload knobs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..catalog.database import Database
from ..catalog.fields import Range, one_of
from ..catalog.rank_profiles import load_rank_profiles
from ..catalog.specs import DTYPES
from ..errors import MISSING, SpecError, UnknownEntryError
from ..model.transformer import WEIGHT_FORMATS, default_kv_dtype
from ..workload.spec import (
    ARRIVALS,
    DEFAULT_BUDGET_TOKENS,
    DEFAULT_TASK,
    DRAFT_SPELLINGS,
    K_LIMIT,
    SERVING_MODES,
    TREE_NODES_MAX,
    AcceptanceSpec,
    DrafterSpec,
    Sla,
    make_acceptance,
    parse_drafter,
    parse_task,
)
from ..workload.trees import parse_tree
from .knob_values import StudyErrors, knob_bounds, parse_knob
from .spec import TREE_NODES_KNOB, WORKLOAD_KEYS, WORKLOAD_KNOBS, Knob, KnobDef


def model_ref(ref: Any, base_dir: Path) -> str:
    """A model name, or a model file relative to the study file."""
    cand = base_dir / str(ref)
    if ("/" in str(ref) or str(ref).endswith((".yaml", ".yml", ".json"))) and cand.exists():
        return str(cand)
    return str(ref)


def parse_workload(wl: Any, db: Database, err: StudyErrors) -> tuple[dict, list[Knob]]:
    """workload: target, draft, dtypes, acceptance, modes, runtime and the workload knobs."""
    out: dict[str, Any] = {"target": None, "drafter": None, "acc": None, "dtype": "bf16", "kv_dtype": "bf16",
                           "temperature": 0.0, "overlap": False, "continuous": False, "tree_nodes": 0, "k_max": 16,
                           "runtime": None, "acc_given": False, "rank_profile": None, "choices": [],
                           "exit_range": None, "task": DEFAULT_TASK, "tree_given": False, "tree_published": False,
                           "tree": None}
    if not isinstance(wl, dict):
        err.add("workload", wl if wl is not None else MISSING, "expected a mapping with at least target")
        return out, []
    for key in wl:
        if key not in WORKLOAD_KEYS:
            err.unknown("workload.", key, WORKLOAD_KEYS)
    base_dir = Path(err.path).parent
    if "target" not in wl:
        err.add("workload.target", MISSING, "expected a model name, model file, or HF config.json path")
    else:
        try:
            target = db.model(model_ref(wl["target"], base_dir))
            if target.kind != "decoder":
                err.add("workload.target", wl["target"], "expected a decoder model, not a draft head")
            else:
                out["target"] = target
        except UnknownEntryError as exc:
            err.add("workload.target", wl["target"], exc.detail)
        except SpecError as exc:
            err.keep(exc)
    knobs: list[Knob] = []
    if out["target"] is not None:
        out["choices"], out["exit_range"], knobs = _drafts(wl.get("draft", "none"), out["target"], db, base_dir, err)
        out["drafter"] = out["choices"][0][1] if out["choices"] else None
    try:
        out["task"] = parse_task(wl.get("task", "chat"), "workload.task", err.path)
    except SpecError as exc:
        err.keep(exc)
    dtype = wl.get("dtype", "bf16")
    if not isinstance(dtype, str) or dtype not in WEIGHT_FORMATS:
        err.items.append(one_of(err.path, "workload.dtype", dtype, WEIGHT_FORMATS))
    else:
        out["dtype"] = dtype
    kv = wl.get("kv_dtype", default_kv_dtype(out["dtype"]))
    if kv not in DTYPES:
        err.items.append(one_of(err.path, "workload.kv_dtype", kv, DTYPES))
    else:
        out["kv_dtype"] = kv
    out["temperature"] = err.check(Range(lo=0.0, hi=2.0), wl.get("temperature", 0.0), "workload.temperature", 0.0)
    for flag in ("overlap", "continuous"):
        value = wl.get(flag, False)
        if not isinstance(value, bool):
            err.add(f"workload.{flag}", value, "expected true or false")
            value = False
        out[flag] = value
    out["max_batched_tokens"] = err.check(Range(True, 1, 10_000_000), wl.get("max_batched_tokens", DEFAULT_BUDGET_TOKENS),
                                          "workload.max_batched_tokens", DEFAULT_BUDGET_TOKENS)
    out["sla"], out["serving"] = _sla(wl, err)
    out["arrivals"] = wl.get("arrivals", "closed")
    if out["arrivals"] not in ARRIVALS:
        err.items.append(one_of(err.path, "workload.arrivals", out["arrivals"], ARRIVALS))
        out["arrivals"] = "closed"
    tree = wl.get("tree_nodes", 0)
    out["tree_given"] = "tree_nodes" in wl
    if isinstance(tree, str) and tree.strip().lower() == "published":     # each tree method's published tree
        out["tree_published"] = True
    elif isinstance(tree, (list, dict)):       # searched per design (the best shape is reported)
        kn = parse_knob(err, "workload.tree_nodes", tree, TREE_NODES_KNOB, None, "tree_nodes", "workload",
                        "tree_nodes")
        knobs += [kn] if kn else []
        out["tree_nodes"] = 0
    elif Range(True, 0, TREE_NODES_MAX).contains(tree):
        out["tree_nodes"] = int(tree)
    else:
        err.add("workload.tree_nodes", tree, f"expected an integer in [0, {TREE_NODES_MAX}], a list of them, "
                "{low, high}, or published (each tree method's published tree at its depth)")
    if "tree" in wl:            # a serving framework's tree (dse.workload.trees); best = dse's best tree
        try:
            spec = parse_tree(wl["tree"], "workload.tree", err.path)
            out["tree"] = None if spec.framework == "best" else spec
        except SpecError as exc:
            err.keep(exc)
    out["k_max"] = err.check(Range(True, 1, K_LIMIT), wl.get("k_max", 16), "workload.k_max", 16)
    out["rank_profile"] = None          # None: each draft's kind's measured profile (DraftChoices)
    if "rank_profile" in wl:
        try:
            out["rank_profile"] = load_rank_profiles(db.root).get(str(wl["rank_profile"]), "workload.rank_profile",
                                                                  err.path)
        except SpecError as exc:
            err.keep(exc)
    runtime = wl.get("runtime")          # None: known parts keep their default_runtime, synthesised chips graphs
    if runtime is not None and runtime not in db.names("runtime"):
        err.items.append(one_of(err.path, "workload.runtime", runtime, db.names("runtime")))
        runtime = None
    out["runtime"] = runtime
    knobs += [kn for key, d in WORKLOAD_KNOBS.items()
              if (kn := parse_knob(err, f"workload.{key}", wl.get(key, d.default), d, None, key, "workload", key))]
    acc_raw = wl.get("acceptance")
    out["acc_given"] = acc_raw is not None
    drafting = any(d is None or d.kind != "none" for _, d in out["choices"])
    if drafting and acc_raw is None:
        out["acc"] = None       # from the published table or the acceptance model, per draft (dse.acceptance.fit)
    elif drafting:
        if not isinstance(acc_raw, dict) or len(acc_raw) != 1 or next(iter(acc_raw)) not in ("alpha", "per_position",
                                                                                            "tau", "rank"):
            err.add("workload.acceptance", acc_raw if acc_raw is not None else MISSING,
                    "expected exactly one of {alpha: A} (i.i.d. conditional rate in [0, 1]), "
                    "{per_position: [A1, ...]}, {tau: T} (mean tokens per target pass, >= 1) or "
                    "{rank: [P1, P2, ...]} (tree acceptance per rank, or one list per depth)")
        else:
            try:
                out["acc"] = make_acceptance(acc_raw.get("alpha"), acc_raw.get("per_position"), acc_raw.get("tau"),
                                             acc_raw.get("rank"), where="workload.acceptance.", rank_name="rank")
            except SpecError as exc:
                err.keep(SpecError(None, exc.field.split(" / ")[0], exc.value, exc.allowed))
    else:
        out["acc"] = AcceptanceSpec(kind="alpha", alpha=0.0)
    return out, knobs


def _drafts(raw: Any, target, db: Database, base_dir: Path, err: StudyErrors):
    """workload.draft: one drafter, or a list of them (a categorical knob `draft`, params_draft),
    in which {early-exit: {low, high}} is a range of exit layers (a knob `draft_exit_layer`,
    active on the early-exit rows only). -> ([(label, DrafterSpec | None for the range)], exit
    range or None, knobs)."""
    items = raw if isinstance(raw, list) else [raw]
    if isinstance(raw, list) and not raw:
        err.add("workload.draft", raw, "expected a drafter or a non-empty list of drafters")
        return [], None, []
    choices, exit_range, knobs = [], None, []
    hi = target.num_layers - 1
    for i, item in enumerate(items):
        where = f"workload.draft[{i}]" if isinstance(raw, list) else "workload.draft"
        if isinstance(item, dict):
            if set(item) != {"early-exit"} or not isinstance(item["early-exit"], (dict, list)):
                err.add(where, item, "expected a drafter name, or {early-exit: {low: L1, high: L2}} (a range of "
                        "exit layers) or {early-exit: [L1, L2, ...]}")
                continue
            spec = item["early-exit"]
            if isinstance(spec, list):      # a list of layers: one choice each
                for j, layer in enumerate(spec):
                    if not Range(True, 1, hi).contains(layer):
                        err.add(f"{where}.early-exit[{j}]", layer, f"expected an exit layer in [1, {hi}] "
                                f"({target.name} has {target.num_layers} layers)")
                        continue
                    choices.append((f"early-exit:{int(layer)}", DrafterSpec(kind="early-exit",
                                                                           label=f"early-exit:{int(layer)}",
                                                                           exit_layer=int(layer))))
                continue
            kn = parse_knob(err, f"{where}.early-exit", spec, KnobDef("int", 1, hi), None, "draft_exit_layer",
                            "workload", "draft_exit_layer")
            if kn is None:
                continue
            if exit_range is not None:
                err.add(where, item, "expected one early-exit range")
                continue
            lo_, hi_ = knob_bounds(kn)
            exit_range = (int(lo_), int(hi_))
            if kn.searched:
                knobs.append(dataclasses.replace(kn, conditional=True))
                choices.append(("early-exit", None))
            else:
                choices.append((f"early-exit:{kn.fixed}", DrafterSpec(kind="early-exit", label=f"early-exit:{kn.fixed}",
                                                                     exit_layer=int(kn.fixed))))
            continue
        if not isinstance(item, str):
            err.add(where, item, "expected a drafter: a model name or file, " + ", ".join(DRAFT_SPELLINGS))
            continue
        try:
            d = parse_drafter(model_ref(item, base_dir), target, db, where=where, path=err.path)
            choices.append((d.label, d))
        except UnknownEntryError as exc:
            err.add(where, item, exc.detail)
        except SpecError as exc:
            err.keep(exc)
    labels = [label for label, _ in choices]
    if len(set(labels)) != len(labels):
        err.add("workload.draft", raw, "expected distinct drafters")
        return [], None, []
    if len(choices) > 1:
        knobs.insert(0, Knob("draft", "workload", "draft", "cat", choices=tuple(labels)))
    return choices, exit_range, knobs


def _sla(wl: dict, err: StudyErrors) -> tuple[Sla | None, str]:
    """workload.sla: {ttft_ms, tpot_ms} (both, > 0) and workload.serving: agg | disagg | best."""
    serving = wl.get("serving", "best")
    if serving not in SERVING_MODES:
        err.items.append(one_of(err.path, "workload.serving", serving, SERVING_MODES))
        serving = "best"
    raw = wl.get("sla")
    if raw is None:
        return None, serving
    if not isinstance(raw, dict) or set(raw) != {"ttft_ms", "tpot_ms"}:
        err.add("workload.sla", raw, "expected {ttft_ms: T, tpot_ms: T}: the time to first token and the mean time "
                "per output token a served request must meet, milliseconds")
        return None, serving
    ttft = err.check(Range(lo=0.0, lo_open=True, hi=3.6e6, unit="ms"), raw["ttft_ms"], "workload.sla.ttft_ms", None)
    tpot = err.check(Range(lo=0.0, lo_open=True, hi=3.6e6, unit="ms"), raw["tpot_ms"], "workload.sla.tpot_ms", None)
    if ttft is None or tpot is None:
        return None, serving
    return Sla(ttft_s=float(ttft) * 1e-3, tpot_s=float(tpot) * 1e-3), serving
