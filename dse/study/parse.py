"""Study mapping -> StudySpec, one parser per section; every error of a file reported together.

``load_study(path)`` reads YAML and calls ``parse_study(mapping, path)``, which results
metadata also use to rebuild a study without any file. Each error names the study file, the
key path and what is allowed. Knob values: a fixed value, a list (choices), or
``{low, high, log, step}`` (a range).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any

from ..catalog.database import Database, load_database
from ..catalog.fields import Range, one_of, unknown_key
from ..catalog.links import SCALE_UP_CLASSES
from ..catalog.rank_profiles import load_rank_profiles
from ..catalog.specs import DTYPES
from ..catalog.technology import load_technology
from ..catalog.yamlio import load_yaml
from ..errors import MISSING, DseError, SpecError, UnknownEntryError, raise_collected
from ..model.columns import HARDWARE_COLUMNS, NUMERIC_METRICS
from ..model.transformer import WEIGHT_FORMATS, default_kv_dtype
from ..storage.credentials import has_password
from ..workload.spec import (
    DEFAULT_TASK,
    DRAFT_SPELLINGS,
    K_LIMIT,
    TREE_NODES_MAX,
    AcceptanceSpec,
    DrafterSpec,
    Workload,
    WorkloadNames,
    check_ep,
    check_tensor_parallel,
    check_workload,
    make_acceptance,
    parse_drafter,
    parse_task,
)
from .spec import (
    CHIP_KNOBS,
    DEVICE_OWNED_KNOBS,
    DRAFT_CHIP_KNOBS,
    EP_KNOB,
    K_KNOB,
    SAMPLERS,
    SEARCH_DEFAULTS,
    TOP_KEYS,
    TREE_NODES_KNOB,
    WORKLOAD_KEYS,
    WORKLOAD_KNOBS,
    Constraint,
    DraftChoices,
    Knob,
    KnobDef,
    Objective,
    StudySpec,
)

#: search budgets: a study beyond these is a typo, not a plan (10^7 trials of Optuna's
#: ~1 ms ask/tell is 3 hours; a seed must fit numpy's 32-bit seeding, which Optuna uses)
SEARCH_RANGES = {"n_trials": Range(True, 1, 10_000_000), "batch_size": Range(True, 2, 100_000),
                 "seed": Range(True, 0, 2**32 - 1), "presearch_s": Range(False, 0, 86_400, lo_open=True, unit="s")}
#: objectives a study may have (the search thins its archive in seconds up to here, dse.search.thinning;
#: beyond, nearly every design is non-dominated and a front says little)
MAX_OBJECTIVES = 6
#: grid points per continuous knob (points^knobs designs: 1000 points on 2 knobs is 10^6)
GRID_POINTS = Range(True, 2, 1000)
TECH_KEYS = ("process_node", "peak_tflops", "memory", "memory_stacks", "stack_height", "sram_mb")
#: the software stack of a synthesised chip (MODEL.md section 5: fixed costs belong to a runtime)
RUNTIME_KNOBS = ("runtime", "kernel_launch_us", "step_overhead_us", "spec_overhead_us")
STUDY_NAMES = WorkloadNames(path=None, draft="workload.draft", k="workload.k", tau="workload.acceptance.tau",
                            acceptance="workload.acceptance", per_position="workload.acceptance.per_position",
                            rank="workload.acceptance.rank",
                            tree_nodes="workload.tree_nodes", overlap="workload.overlap",
                            draft_chip="space.draft_chip.enabled",
                            overlap_needs="a draft chip (space.draft_chip.enabled)")


class _Errors:
    """Collects SpecErrors of one file."""

    def __init__(self, path: str):
        self.path, self.items = path, []

    def add(self, key: str, value: Any, allowed: str):
        self.items.append(SpecError(self.path, key, value, allowed))

    def unknown(self, key_path: str, key: str, allowed):
        self.items.append(unknown_key(self.path, f"{key_path}{key}", key, allowed))

    def keep(self, exc: SpecError):
        """A SpecError raised without a path (shared parsers) gets this file's path."""
        self.items.append(SpecError(self.path, exc.field, exc.value, exc.allowed) if exc.path is None else exc)

    def check(self, rng: Range, value: Any, key: str, default: Any) -> Any:
        if rng.contains(value):
            return int(value) if rng.integer else float(value)
        self.add(key, value, rng.text())
        return default


def parse_knob(err: _Errors, where: str, raw: Any, d: KnobDef, choices_ok: tuple | None, name: str,
               section: str, key: str) -> Knob | None:
    """A fixed value, a list of choices, or {low, high, log, step}, checked against KnobDef."""
    rng = Range(d.kind == "int", d.lo, d.hi)

    def ok(v, path):
        if d.kind == "bool":
            if not isinstance(v, bool):
                err.add(path, v, "expected true or false")
                return False
        elif d.kind == "cat":
            if not isinstance(v, str) or (choices_ok is not None and v not in choices_ok):
                err.items.append(one_of(err.path, path, v, choices_ok or ()))
                return False
        elif not rng.contains(v):
            err.add(path, v, rng.text())
            return False
        return True

    if isinstance(raw, list):
        if not raw:
            err.add(where, raw, "expected a non-empty list of choices")
            return None
        if not all([ok(v, f"{where}[{i}]") for i, v in enumerate(raw)]):
            return None
        vals = tuple(int(v) if d.kind == "int" else v for v in raw)
        if len(set(vals)) != len(vals):
            err.add(where, raw, "expected distinct choices")
            return None
        if len(vals) == 1:
            return Knob(name, section, key, d.kind, fixed=vals[0])
        return Knob(name, section, key, d.kind, choices=vals)
    if isinstance(raw, dict):
        if d.kind in ("cat", "bool"):
            err.add(where, raw, "expected a value or a list of choices (this knob is categorical)")
            return None
        bad = set(raw) - {"low", "high", "log", "step"}
        for b in sorted(map(str, bad)):
            err.unknown(where + ".", b, {"low", "high", "log", "step"})
        lo, hi = raw.get("low"), raw.get("high")
        good = ok(lo, where + ".low") & ok(hi, where + ".high")
        log, step = raw.get("log", False), raw.get("step")
        if not isinstance(log, bool):
            err.add(where + ".log", log, "expected true or false")
            good = False
        if step is not None and not Range(d.kind == "int", 0, d.hi, lo_open=True).contains(step):
            err.add(where + ".step", step, "expected a positive number (an integer for integer knobs)")
            good = False
        if not good or bad:
            return None
        if lo >= hi:
            err.add(where, raw, f"empty range: low < high must hold, but got low={lo}, high={hi}")
            return None
        if log and (lo <= 0 or step is not None):
            err.add(where, raw, "log ranges need low > 0 and no step")
            return None
        if step is not None:
            spans = (hi - lo) / step
            if spans < 1:
                err.add(where + ".step", step, f"larger than the range (high - low = {hi - lo:g}): the knob would "
                        "take one value; give a fixed value or a smaller step")
                return None
            if abs(spans - round(spans)) > 1e-9 * max(1.0, spans):
                err.add(where + ".step", step, f"does not divide high - low = {hi - lo:g}: the range would end at "
                        f"{lo + math.floor(spans) * step:g}, not at high; give high = {lo + math.floor(spans) * step:g} "
                        f"or {lo + math.ceil(spans) * step:g}")
                return None
        cast = int if d.kind == "int" else float
        return Knob(name, section, key, d.kind, low=cast(lo), high=cast(hi), log=log,
                    step=None if step is None else cast(step))
    if raw is None:
        err.add(where, raw, "expected a value, a list of choices, or {low, high}")
        return None
    if ok(raw, where):
        return Knob(name, section, key, d.kind, fixed=int(raw) if d.kind == "int" else raw)
    return None


def _knob_bounds(k: Knob | None) -> tuple:
    """(smallest, largest) value a knob can take; (None, None) for a knob that is absent."""
    if k is None:
        return None, None
    if not k.searched:
        return k.fixed, k.fixed
    return (min(k.choices), max(k.choices)) if k.choices else (k.low, k.high)


def _knob_values(k: Knob | None, default) -> tuple:
    """Every value an integer knob can take (its choices, or low..high by step); (default,) when absent."""
    if k is None:
        return (default,)
    if not k.searched:
        return (k.fixed,)
    if k.choices:
        return tuple(k.choices)
    return tuple(range(int(k.low), int(k.high) + 1, int(k.step or 1)))


# --------------------------------------------------------------------------- sections

def _header(raw: dict, err: _Errors) -> tuple[str, str]:
    for key in raw:
        if key not in TOP_KEYS:
            err.unknown("", key, TOP_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        err.add("name", name if name is not None else MISSING,
                "expected a name of letters, digits, '-', '_' or '.' (it keys the storage and file names)")
        name = "study"
    desc = raw.get("description", "")
    if not isinstance(desc, str):
        err.add("description", desc, "expected a string")
        desc = ""
    return name, desc


def _technology(raw: dict, db: Database, err: _Errors):
    """The database's technology constants with the study's overrides (validated there)."""
    tech_raw = raw.get("technology") or {}
    try:
        tech = load_technology(db.root)
        if not isinstance(tech_raw, dict):
            raise SpecError(err.path, "technology", tech_raw, "expected a mapping of constant overrides")
        return (tech.with_overrides(tech_raw, where=err.path) if tech_raw else tech), tech_raw
    except SpecError as exc:
        err.keep(exc)
    except DseError as exc:  # SpecErrors
        err.items.extend(getattr(exc, "errors", [SpecError(err.path, "technology", tech_raw, str(exc))]))
    return None, {}


def _model_ref(ref: Any, base_dir: Path) -> str:
    """A model name, or a model file relative to the study file."""
    cand = base_dir / str(ref)
    if ("/" in str(ref) or str(ref).endswith((".yaml", ".yml", ".json"))) and cand.exists():
        return str(cand)
    return str(ref)


def _workload(wl: Any, db: Database, err: _Errors) -> tuple[dict, list[Knob]]:
    """workload: target, draft, dtypes, acceptance, modes, runtime and the workload knobs."""
    out: dict[str, Any] = {"target": None, "drafter": None, "acc": None, "dtype": "bf16", "kv_dtype": "bf16",
                           "temperature": 0.0, "overlap": False, "continuous": False, "tree_nodes": 0, "k_max": 16,
                           "runtime": None, "acc_given": False, "rank_profile": None, "choices": [],
                           "exit_range": None, "task": DEFAULT_TASK, "tree_given": False}
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
            target = db.model(_model_ref(wl["target"], base_dir))
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
    tree = wl.get("tree_nodes", 0)
    out["tree_given"] = "tree_nodes" in wl
    if isinstance(tree, (list, dict)):       # searched per design (the best shape is reported)
        kn = parse_knob(err, "workload.tree_nodes", tree, TREE_NODES_KNOB, None, "tree_nodes", "workload",
                        "tree_nodes")
        knobs += [kn] if kn else []
        out["tree_nodes"] = 0
    elif Range(True, 0, TREE_NODES_MAX).contains(tree):
        out["tree_nodes"] = int(tree)
    else:
        err.add("workload.tree_nodes", tree, f"expected an integer in [0, {TREE_NODES_MAX}], a list of them, "
                "or {low, high}")
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


def _drafts(raw: Any, target, db: Database, base_dir: Path, err: _Errors):
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
            lo_, hi_ = _knob_bounds(kn)
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
            d = parse_drafter(_model_ref(item, base_dir), target, db, where=where, path=err.path)
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


def _space(space: Any, wl: dict, db: Database, tech, err: _Errors) -> list[Knob]:
    """space: target_chip and draft_chip knobs (technology knobs or device: NAME), and k."""
    knobs: list[Knob] = []
    if space is None:
        space = {}
    if not isinstance(space, dict):
        err.add("space", space, "expected a mapping with target_chip, draft_chip and/or k")
        space = {}
    for key in space:
        if key not in ("target_chip", "draft_chip", "k"):
            err.unknown("space.", key, {"target_chip", "draft_chip", "k"})
    for section, table in (("target_chip", CHIP_KNOBS), ("draft_chip", DRAFT_CHIP_KNOBS)):
        sec = space.get(section)
        files: tuple = ()
        if isinstance(sec, dict) and "device" in sec:
            sec = dict(sec)
            sec["device"], files = _device_files(sec["device"], f"space.{section}.device", db, err)
        choices = {"device": tuple(db.names("device")) + files,
                   "memory": tech.memory_names if tech else None,
                   "process_node": tech.node_names if tech else None,
                   "runtime": tuple(db.names("runtime")),
                   "link_class": SCALE_UP_CLASSES}
        knobs += _chip_section(section, table, sec, choices, err)
    if "k" in space:
        if "k" in wl and wl["k"] != "auto":
            err.add("space.k", space["k"], "workload.k fixes k; remove one of them")
        kn = parse_knob(err, "space.k", space["k"], K_KNOB, None, "k", "k", "k")
        if kn:
            knobs.append(kn)
    else:
        kv = wl.get("k", "auto") if isinstance(wl, dict) else "auto"
        if kv != "auto" and not Range(True, 1, K_LIMIT).contains(kv):
            err.add("workload.k", kv, f"expected 'auto' or an integer in [1, {K_LIMIT}]")
        elif kv != "auto":
            knobs.append(Knob("k", "k", "k", "int", fixed=int(kv)))
    return knobs


def _device_files(raw: Any, where: str, db: Database, err: _Errors) -> tuple[Any, tuple[str, ...]]:
    """``device:`` values that name YAML files (as ``dse eval --hw FILE``: the fields of a
    hardware_db/devices entry), resolved against the study file's folder to absolute paths and
    loaded once to check them; returns (the values with those paths, the paths)."""
    values = raw if isinstance(raw, list) else [raw]
    base = Path(err.path).parent if err.path and Path(err.path).is_file() else Path.cwd()
    out, files = [], []
    for i, v in enumerate(values):
        if isinstance(v, str) and (v.lower().endswith((".yaml", ".yml")) or "/" in v or os.sep in v):
            path = Path(v).expanduser()
            path = path if path.is_absolute() else base / path
            field = f"{where}[{i}]" if isinstance(raw, list) else where
            if not path.is_file():
                err.add(field, v, f"no such device file (a relative path is read from the study's folder, "
                        f"{base.resolve()}); or one of the database names (`dse hw list`)")
                files.append(v)         # said once, here, not again as an unknown name
            else:
                try:
                    db.device(str(path.resolve()))
                except SpecError as exc:
                    err.keep(exc)
                v = str(path.resolve())
                files.append(v)
        out.append(v)
    return (out if isinstance(raw, list) else out[0]), tuple(files)


def _chip_section(section: str, table: dict[str, KnobDef], sec: Any, choices: dict, err: _Errors) -> list[Knob]:
    """One chip group's knobs: either device: NAME(s) or the technology knobs."""
    if sec is None:
        if section == "target_chip":
            err.add("space.target_chip", MISSING, "expected a mapping of chip knobs (or device: NAME)")
        return []
    if not isinstance(sec, dict):
        err.add(f"space.{section}", sec, "expected a mapping of knobs")
        return []
    for key in sec:
        if key not in table:
            err.unknown(f"space.{section}.", key, set(table))
    uses_device = "device" in sec
    tech_keys = [k for k in sec if k in TECH_KEYS]
    if uses_device and tech_keys:
        err.add(f"space.{section}", sorted(tech_keys), "give either device (known parts) or technology knobs, "
                "not both")
    stack_keys = [k for k in sec if k in RUNTIME_KNOBS]
    if uses_device and stack_keys:
        err.add(f"space.{section}", sorted(stack_keys), "known parts keep their runtime (workload.runtime, else "
                "each part's default_runtime): set workload.runtime, or synthesise the chip from technology knobs")
    link_keys = [k for k in sec if k in ("link_class", "scale_up_domain", "scale_out_bw_gb_s")]
    if uses_device and link_keys:
        err.add(f"space.{section}", sorted(link_keys), "known parts bring their own link class, scale-up domain "
                "and scale-out network (hardware_db/devices): these knobs are for synthesised chips")
    if not uses_device and sec.get("peak_tflops") is None:
        err.add(f"space.{section}.peak_tflops", MISSING, "expected a value or range (dense BF16 TFLOP/s)")
    prefix = section + "_"
    knobs = []
    for key, d in table.items():
        if key == "device" and not uses_device:
            continue
        # known parts bring their own memory, compute, efficiencies, link and runtime
        if uses_device and key not in sec and (key in DEVICE_OWNED_KNOBS or
                                               (key == "link_bw_gb_s" and section == "target_chip")):
            continue
        value = sec.get(key, d.default)
        if value is None and key in sec and key != "peak_tflops":
            err.add(f"space.{section}.{key}", value, "expected a value, a list of choices, or {low, high} "
                    "(leave the key out for the default)")
            continue
        if value is None:           # a knob without a default is absent unless given (peak_tflops: said above)
            continue
        kn = parse_knob(err, f"space.{section}.{key}", value, d, choices.get(key, d.choices or None), prefix + key,
                        section, key)
        if kn:
            knobs.append(kn)
    return knobs


def _objectives(raw: Any, err: _Errors) -> list[Objective]:
    metrics = sorted(NUMERIC_METRICS)
    out: list[Objective] = []
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_OBJECTIVES:
        err.add("objectives", raw if raw is not None else MISSING, f"expected a list of 1 to {MAX_OBJECTIVES} objectives")
        return out
    for i, o in enumerate(raw):
        path = f"objectives[{i}]"
        if not isinstance(o, dict) or set(o) - {"metric", "direction"}:
            err.add(path, o, "expected {metric: NAME, direction: minimize|maximize}")
            continue
        m, dirn = o.get("metric"), o.get("direction", "minimize")
        if not isinstance(m, str) or m not in metrics:
            err.items.append(unknown_key(err.path, path + ".metric", m, metrics, what="metric", value=m))
        if dirn not in ("minimize", "maximize"):
            err.add(path + ".direction", dirn, "expected minimize or maximize")
        out.append(Objective(str(m), str(dirn)))
    if len({o.metric for o in out}) != len(out):
        err.add("objectives", [o.metric for o in out], "expected distinct metrics")
    return out


#: hardware columns of the draft chip: absent where the study has no draft chip
DRAFT_CHIP_COLUMNS = tuple(c for c in HARDWARE_COLUMNS if c.startswith("draft_"))
#: street prices: of known parts only, null for a synthesised chip
PRICE_COLUMNS = ("chip_price_usd", "price_usd")


def _null_metrics(objectives: list[Objective], constraints: list[Constraint], knobs: list[Knob], db: Database,
                  err: _Errors) -> None:
    """Refuse an objective or constraint that is null for every design the study can hold: a draft
    chip's columns without a draft chip, a street price without known parts that have one."""
    by = {k.name: k for k in knobs}
    enabled = by.get("draft_chip_enabled")
    has_draft_chip = enabled is not None and (enabled.searched or enabled.fixed is True)
    device = by.get("target_chip_device")
    names = () if device is None else (device.choices or (device.fixed,))

    def has_price(n) -> bool:
        try:
            return bool(db.device(str(n)).price_usd)
        except SpecError:       # a device file that cannot be read is reported where it is named
            return True

    used = [(f"objectives[{i}].metric", o.metric) for i, o in enumerate(objectives)] + \
        [(f"constraints[{i}].metric", c.metric) for i, c in enumerate(constraints)]
    priced = any(m in PRICE_COLUMNS for _, m in used) and any(has_price(n) for n in names)
    for path, metric in used:
        if metric in DRAFT_CHIP_COLUMNS and not has_draft_chip:
            err.add(path, metric, "null for every design: the study has no draft chip (space.draft_chip.enabled)")
        elif metric in PRICE_COLUMNS and not priced:
            err.add(path, metric, "null for every design: a street price is known for database parts only, and "
                    + ("the target chip is synthesised (no space.target_chip.device)" if device is None else
                       "none of space.target_chip.device has one in hardware_db") + "; cost_usd is the estimate "
                    "for every chip")


def _constraints(raw: Any, err: _Errors) -> list[Constraint]:
    metrics = sorted(NUMERIC_METRICS)
    out: list[Constraint] = []
    if raw is None:
        return out
    if not isinstance(raw, list):
        err.add("constraints", raw, "expected a list of {metric, max} / {metric, min}")
        return out
    for i, c in enumerate(raw):
        path = f"constraints[{i}]"
        if not isinstance(c, dict) or "metric" not in c or not ({"max", "min"} & set(c)) \
                or set(c) - {"metric", "max", "min"}:
            err.add(path, c, "expected {metric: NAME, max: X} and/or min: Y")
            continue
        m = c["metric"]
        if not isinstance(m, str) or m not in metrics:
            err.items.append(unknown_key(err.path, path + ".metric", m, metrics, what="metric", value=m))
            continue
        bounds = {b: err.check(Range(), c[b], f"{path}.{b}", None) for b in ("max", "min") if b in c}
        if None in bounds.values():
            continue
        out.append(Constraint(m, bounds.get("max"), bounds.get("min")))
    return out


def _search(raw: dict, err: _Errors, name: str) -> dict:
    """search, grid, output and storage."""
    block = raw.get("search") or {}
    if not isinstance(block, dict):
        err.add("search", block, "expected a mapping of sampler, n_trials, batch_size, seed, presearch_s")
        block = {}
    for key in block:
        if key not in SEARCH_DEFAULTS:
            err.unknown("search.", key, set(SEARCH_DEFAULTS))
    search = {**SEARCH_DEFAULTS, **block}
    if search["sampler"] not in SAMPLERS:
        err.items.append(one_of(err.path, "search.sampler", search["sampler"], SAMPLERS))
    for key, rng in SEARCH_RANGES.items():
        search[key] = err.check(rng, search[key], f"search.{key}", SEARCH_DEFAULTS[key])
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or set(grid) - {"points"}:
        err.add("grid", grid, "expected {points: N}")
        grid = {}
    search["grid_points"] = err.check(GRID_POINTS, grid.get("points", 8), "grid.points", 8)
    output = raw.get("output", f"results/{name}.parquet")
    if not isinstance(output, str) or not output:
        err.add("output", output, "expected a file path")
        output = f"results/{name}.parquet"
    search["output"] = output
    storage = raw.get("storage")
    if storage is not None and not isinstance(storage, str):
        err.add("storage", storage, "expected null (journal file beside the output), a file path or a database URL")
        storage = None
    elif storage is not None and has_password(storage):
        import warnings
        warnings.warn(f"{err.path}: storage holds a password, readable by anyone who reads the study file (dse "
                      "writes it nowhere); put the URL in DSE_STORAGE or --storage-file, or the password in "
                      "~/.pgpass", stacklevel=2)
    search["storage"] = storage
    return search


# --------------------------------------------------------------------------- the study

def parse_study(raw: Any, path: str | Path, db: Database | None = None) -> StudySpec:
    """Validate a study mapping (as read from ``path``); raise SpecError/SpecErrors naming file and key."""
    p = str(path)
    err = _Errors(p)
    if not isinstance(raw, dict):
        raise SpecError(p, "(top level)", raw, "expected a mapping of study sections")
    db = db or load_database()
    name, desc = _header(raw, err)
    tech, tech_raw = _technology(raw, db, err)
    wl_raw = raw.get("workload")
    wl, knobs = _workload(wl_raw, db, err)
    wl_map = wl_raw if isinstance(wl_raw, dict) else {}
    knobs += _space(raw.get("space"), wl_map, db, tech, err)
    drafter, acc = wl["drafter"], wl["acc"]
    ep, ep_raw = 1, wl_map.get("ep", 1)
    if wl["target"] is not None:
        chips = _knob_values(next((k for k in knobs if k.name == "target_chip_chips"), None), 1)
        values = ep_raw if isinstance(ep_raw, list) and ep_raw else [ep_raw]
        ep_errs = [e for v in values for e in check_ep(wl["target"], v, chips, where="workload.ep",
                                                      chips_name="space.target_chip.chips", path=p)]
        err.items.extend(ep_errs)
        if isinstance(ep_raw, list) and not ep_errs:     # searched per design
            kn = parse_knob(err, "workload.ep", ep_raw, EP_KNOB, None, "ep", "workload", "ep")
            if kn is not None and kn.searched:
                knobs.append(kn)
            elif kn is not None:
                ep = int(kn.fixed)
        elif not ep_errs:
            ep = int(ep_raw)
    if wl["target"] is not None:
        by = {k.name: k for k in knobs}
        t_chips = _knob_values(by.get("target_chip_chips"), 1)
        err.items.extend(check_tensor_parallel(wl["target"], t_chips, "space.target_chip.chips", p))
        en = by.get("draft_chip_enabled")
        always_on = en is not None and not en.searched and en.fixed is True
        for _, d in wl["choices"]:        # every draft model of the study
            if d is None or d.kind != "model":
                continue
            if not always_on:       # on the target chips (some designs): sharded like the target
                err.items.extend(check_tensor_parallel(d.model, t_chips, "space.target_chip.chips", p,
                                                       role="the draft "))
            if en is not None and (en.searched or en.fixed is True):
                err.items.extend(check_tensor_parallel(d.model, _knob_values(by.get("draft_chip_chips"), 1),
                                                       "space.draft_chip.chips", p, role="the draft "))
    choices = wl["choices"]
    if drafter is not None or choices:
        by = {k.name: k for k in knobs}
        k_knob = by.get("k")
        k_lo, k_hi = _knob_bounds(k_knob)
        enabled = by.get("draft_chip_enabled")
        names = STUDY_NAMES if k_knob is None or not k_knob.searched else \
            WorkloadNames(**{**vars(STUDY_NAMES), "k": "space.k"})
        names = WorkloadNames(**{**vars(names), "path": p})
        chip = enabled is not None and (enabled.searched or enabled.fixed is True)
        several = len(choices) > 1
        lo_exit = wl["exit_range"][0] if wl["exit_range"] else 1
        specs = [d or DrafterSpec(kind="early-exit", label="early-exit", exit_layer=lo_exit) for _, d in choices]
        for i, d in enumerate(specs):
            # with several drafts, a draft chip serves the draft models among them (elsewhere it is off)
            errs = check_workload(
                d, acc, k_lo=k_lo, k_hi=k_hi, k_fixed=k_knob is not None and not k_knob.searched,
                tree_nodes=wl["tree_nodes"], tree_lo=_knob_bounds(by.get("tree_nodes"))[0], overlap=wl["overlap"],
                draft_chip=chip and (not several or d.can_use_draft_chip), acceptance_given=wl["acc_given"],
                names=WorkloadNames(**{**vars(names), "draft": f"workload.draft[{i}]"}) if several else names)
            err.items.extend(e for e in errs if not (several and d.kind == "none" and e.field in (names.k,
                                                                                                  names.tree_nodes)))
        if several and chip and not any(d.can_use_draft_chip for d in specs):
            err.add("space.draft_chip.enabled", True, "a draft chip holds a draft model: list one in workload.draft")
        link_lo = _knob_bounds(by.get("draft_chip_link_bw_gb_s"))[0]
        if enabled is not None and (enabled.searched or enabled.fixed) and link_lo is not None and link_lo <= 0:
            err.add("space.draft_chip.link_bw_gb_s", link_lo,
                    "expected > 0 (the draft chip reaches the target over this link)")
        if several:     # the knobs a row's draft decides act on some rows only (dse.study.space)
            knobs = [dataclasses.replace(k, conditional=True) if k.name in ("k", "tree_nodes", "draft_chip_enabled")
                     else k for k in knobs]
    objectives = _objectives(raw.get("objectives"), err)
    constraints = _constraints(raw.get("constraints"), err)
    _null_metrics(objectives, constraints, knobs, db, err)
    search = _search(raw, err, name)
    if not any(k.searched for k in knobs) and not err.items:
        err.add("space", MISSING, "nothing to search: give at least one knob as a list or a range")
    raise_collected(err.items)
    k_given = any(k.name == "k" for k in knobs)
    base = Workload(target=wl["target"], drafter=drafter, acceptance=acc or AcceptanceSpec(kind="alpha", alpha=0.0),
                    dtype=wl["dtype"], kv_dtype=wl["kv_dtype"], temperature=float(wl["temperature"]),
                    overlap=wl["overlap"], tree_nodes=int(wl["tree_nodes"]), k_max=int(wl["k_max"]),
                    continuous=wl["continuous"], ep=ep, task=wl["task"])
    drafts = DraftChoices(base=base, choices=tuple(choices), acceptance_given=acc is not None,
                          default_trees=not (wl["tree_given"] or k_given), exit_range=wl["exit_range"], db=db,
                          rank_profile=wl["rank_profile"])
    first = choices[0][1] or DrafterSpec(kind="early-exit", label="early-exit", exit_layer=wl["exit_range"][0])
    workload = drafts.workload(first.label, first.exit_layer)
    return StudySpec(name=name, description=desc, path=p, workload=workload, runtime=wl["runtime"],
                     knobs=tuple(knobs), objectives=tuple(objectives), constraints=tuple(constraints),
                     sampler=search["sampler"], n_trials=int(search["n_trials"]),
                     batch_size=int(search["batch_size"]), seed=int(search["seed"]),
                     grid_points=int(search["grid_points"]), output=search["output"], storage=search["storage"],
                     technology=tech_raw, raw=raw, tech=tech, drafts=drafts,
                     presearch_s=float(search["presearch_s"]))


def load_study(path: str | Path, db: Database | None = None) -> StudySpec:
    """Read and validate a study file (see :func:`parse_study`)."""
    return parse_study(load_yaml(path, kind="study"), path, db)


def open_study(study: StudySpec | str | Path, db: Database | None = None):
    """(StudySpec, Database, TechConstants) from a spec or a study file path."""
    if not isinstance(study, StudySpec):
        study = load_study(study, db=db)
    return study, db or load_database(), study.tech
