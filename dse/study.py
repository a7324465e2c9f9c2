"""studies/*.yaml -> StudySpec: validated workload, knobs, objectives, constraints, search.

Every error names the study file, the key path and what is allowed; all errors in a file
are reported together. Knob values: a fixed value, a list (choices), or
``{low, high, log, step}`` (a range).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .database import Database, load_database
from .errors import MISSING, SpecError, raise_collected
from .model.transformer import WEIGHT_FORMATS, default_kv_dtype
from .specs import DTYPES, AcceptanceSpec, DrafterSpec, ModelSpec
from .yamlio import load_yaml

SAMPLERS = ("nsga2", "nsga3", "tpe", "gp", "random", "qmc")


@dataclass(frozen=True)
class KnobDef:
    """What a knob may be: kind 'int' | 'float' | 'cat' | 'bool', range or choices, default."""

    kind: str
    lo: float = 0.0
    hi: float = math.inf
    default: Any = None
    choices: tuple = ()
    desc: str = ""


#: knobs of a synthesised chip (MODEL.md section 5); `device` instead picks known parts.
#: Efficiency defaults for synthesised chips are those fitted for HBM GPUs (docs/calibration.md).
CHIP_KNOBS = {
    "device": KnobDef("cat", desc="known parts from hardware_db/devices (instead of technology knobs)"),
    "process_node": KnobDef("cat", default="n5", desc="process node from hardware_db/technology/nodes.yaml"),
    "peak_tflops": KnobDef("float", 0.0, 1e5, None, desc="dense BF16 TFLOP/s per chip (FP8 = 2x)"),
    "memory": KnobDef("cat", default="hbm3e", desc="memory type from hardware_db/technology/memory.yaml"),
    "memory_stacks": KnobDef("int", 1, 64, 4, desc="HBM stacks, or GDDR/LPDDR devices"),
    "stack_height": KnobDef("int", 1, 16, 8, desc="HBM dies per stack"),
    "sram_mb": KnobDef("float", 0.0, 1e6, 0.0, desc="on-die SRAM"),
    "chips": KnobDef("int", 1, 1024, 1, desc="chips in the group (tensor parallel)"),
    "link_bw_gb_s": KnobDef("float", 0.0, 1e5, 900.0, desc="scale-up link, both directions added"),
    "link_latency_us": KnobDef("float", 0.0, 1e3, 2.0, desc="per-hop collective latency"),
    "mem_efficiency": KnobDef("float", 0.01, 1.0, 0.8, desc="achievable fraction of peak bandwidth"),
    "compute_efficiency": KnobDef("float", 0.01, 1.0, 0.7, desc="achievable fraction of peak FLOP/s"),
}
DRAFT_CHIP_KNOBS = {"enabled": KnobDef("bool", default=False, desc="a colocated draft chip holds the draft"),
                    **CHIP_KNOBS,
                    "memory": KnobDef("cat", default="lpddr5x", desc="memory type of the draft chip"),
                    "memory_stacks": KnobDef("int", 1, 64, 2, desc="stacks or devices"),
                    "link_bw_gb_s": KnobDef("float", 0.0, 1e5, 128.0, desc="link between target and draft chip")}
WORKLOAD_KNOBS = {
    "batch": KnobDef("int", 1, 1e6, 1),
    "prompt_tokens": KnobDef("int", 0, 1e7, 2048),
    "output_tokens": KnobDef("int", 1, 1e7, 256),
}
K_KNOB = KnobDef("int", 1, 64, None)

WORKLOAD_KEYS = {"target", "draft", "dtype", "kv_dtype", "batch", "prompt_tokens", "output_tokens", "temperature",
                 "acceptance", "k", "runtime", "overlap", "tree_nodes", "k_max", "continuous"}
TOP_KEYS = {"name", "description", "workload", "space", "objectives", "constraints", "search", "grid", "output",
            "storage", "technology", "schema_version"}
SEARCH_DEFAULTS = {"sampler": "nsga2", "n_trials": 2000, "batch_size": 64, "seed": 0}


@dataclass(frozen=True)
class Knob:
    """One searched or fixed knob. ``name`` is its column stem (params_<name>)."""

    name: str
    section: str            # target_chip | draft_chip | workload | k
    key: str                # the key inside the section
    kind: str               # int | float | cat | bool
    fixed: Any = None       # set when not searched
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None

    @property
    def searched(self) -> bool:
        return self.fixed is None


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str          # minimize | maximize


@dataclass(frozen=True)
class Constraint:
    metric: str
    max: float | None = None
    min: float | None = None


@dataclass(frozen=True)
class StudySpec:
    """A validated study file."""

    name: str
    description: str
    path: str
    target: ModelSpec
    drafter: DrafterSpec
    acceptance: AcceptanceSpec
    dtype: str
    kv_dtype: str
    temperature: float
    overlap: bool
    tree_nodes: int
    k_max: int
    runtime: str
    knobs: tuple[Knob, ...]
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...]
    sampler: str
    n_trials: int
    batch_size: int
    seed: int
    grid_points: int
    output: str
    storage: str | None
    technology: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    tech: Any = None        # the resolved TechConstants (database constants + overrides)
    continuous: bool = False  # continuous batching: batch = requests in flight (issue 9)

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    @property
    def searched(self) -> tuple[Knob, ...]:
        return tuple(k for k in self.knobs if k.searched)

    @property
    def has_draft_chip(self) -> bool:
        en = self.knob("draft_chip_enabled")
        return en is not None and (en.searched or en.fixed is True)

    def resolved(self) -> dict:
        """The study as plain data, with defaults filled in (stored in result metadata)."""
        def knob(k: Knob):
            if k.fixed is not None:
                return k.fixed
            if k.choices:
                return list(k.choices)
            out = {"low": k.low, "high": k.high}
            if k.log:
                out["log"] = True
            if k.step is not None:
                out["step"] = k.step
            return out
        acc = self.acceptance
        acc_d = ({"alpha": acc.alpha} if acc.kind == "alpha" else
                 {"per_position": list(acc.per_position)} if acc.kind == "per_position" else {"tau": acc.tau})
        return {
            "name": self.name, "description": self.description, "file": self.path,
            "workload": {"target": self.target.name, "draft": self.drafter.label, "dtype": self.dtype,
                         "kv_dtype": self.kv_dtype, "temperature": self.temperature, "acceptance": acc_d,
                         "overlap": self.overlap, "tree_nodes": self.tree_nodes, "runtime": self.runtime,
                         "k_max": self.k_max, "continuous": self.continuous},
            "knobs": {k.name: knob(k) for k in self.knobs},
            "objectives": [{"metric": o.metric, "direction": o.direction} for o in self.objectives],
            "constraints": [{k: v for k, v in vars(c).items() if v is not None} for c in self.constraints],
            "search": {"sampler": self.sampler, "n_trials": self.n_trials, "batch_size": self.batch_size,
                       "seed": self.seed},
            "grid": {"points": self.grid_points}, "output": self.output, "storage": self.storage,
            "technology": self.technology,
        }


class _Errors:
    def __init__(self, path: str):
        self.path, self.items = path, []

    def add(self, key: str, value: Any, allowed: str):
        self.items.append(SpecError(self.path, key, value, allowed))

    def unknown(self, key_path: str, key: str, allowed: set[str] | list[str]):
        close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        self.add(f"{key_path}{key}", MISSING, f"unknown key{hint} (allowed: {', '.join(sorted(allowed))})")


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _parse_knob(err: _Errors, section: str, key: str, raw: Any, d: KnobDef, choices_ok: tuple | None,
                name: str) -> Knob | None:
    """A fixed value, a list of choices, or {low, high, log, step}, checked against KnobDef."""
    where = f"space.{section}.{key}" if section not in ("workload",) else f"workload.{key}"
    if section == "k":
        where = "space.k"

    def check_value(v, path):
        if d.kind == "bool":
            if not isinstance(v, bool):
                err.add(path, v, "expected true or false")
                return False
        elif d.kind == "cat":
            if not isinstance(v, str) or (choices_ok is not None and v not in choices_ok):
                close = difflib.get_close_matches(str(v), choices_ok or (), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                err.add(path, v, f"expected one of {', '.join(choices_ok or ())}{hint}")
                return False
        else:
            if not _is_num(v) or (d.kind == "int" and not float(v).is_integer()) or not d.lo <= v <= d.hi:
                what = "an integer" if d.kind == "int" else "a number"
                err.add(path, v, f"expected {what} in [{d.lo:g}, {d.hi:g}]")
                return False
        return True

    if isinstance(raw, list):
        if not raw:
            err.add(where, raw, "expected a non-empty list of choices")
            return None
        if all(check_value(v, f"{where}[{i}]") for i, v in enumerate(raw)):
            vals = tuple(int(v) if d.kind == "int" else v for v in raw)
            if len(set(vals)) != len(vals):
                err.add(where, raw, "expected distinct choices")
                return None
            if len(vals) == 1:
                return Knob(name, section, key, d.kind, fixed=vals[0])
            return Knob(name, section, key, d.kind, choices=vals)
        return None
    if isinstance(raw, dict):
        if d.kind in ("cat", "bool"):
            err.add(where, raw, "expected a value or a list of choices (this knob is categorical)")
            return None
        bad = set(raw) - {"low", "high", "log", "step"}
        for b in sorted(bad):
            err.unknown(where + ".", b, {"low", "high", "log", "step"})
        lo, hi = raw.get("low"), raw.get("high")
        ok = check_value(lo, where + ".low") & check_value(hi, where + ".high")
        log, step = raw.get("log", False), raw.get("step")
        if not isinstance(log, bool):
            err.add(where + ".log", log, "expected true or false")
            ok = False
        if step is not None and (not _is_num(step) or step <= 0 or (d.kind == "int" and not float(step).is_integer())):
            err.add(where + ".step", step, "expected a positive number (an integer for integer knobs)")
            ok = False
        if not ok or bad:
            return None
        if lo >= hi:
            err.add(where, raw, f"empty range: low < high must hold, but got low={lo}, high={hi}")
            return None
        if log and (lo <= 0 or step is not None):
            err.add(where, raw, "log ranges need low > 0 and no step")
            return None
        cast = int if d.kind == "int" else float
        return Knob(name, section, key, d.kind, low=cast(lo), high=cast(hi), log=log,
                    step=None if step is None else cast(step))
    if raw is None:
        err.add(where, raw, "expected a value, a list of choices, or {low, high}")
        return None
    if check_value(raw, where):
        return Knob(name, section, key, d.kind, fixed=int(raw) if d.kind == "int" else raw)
    return None


def _knob_bounds(k: Knob | None) -> tuple:
    """(smallest, largest) value a knob can take; (None, None) for a knob that is absent."""
    if k is None:
        return None, None
    if not k.searched:
        return k.fixed, k.fixed
    return (min(k.choices), max(k.choices)) if k.choices else (k.low, k.high)


def _cross_checks(p: str, knobs: list[Knob], drafter, acc, tree_nodes: int, overlap: bool) -> list[SpecError]:
    """k against the acceptance vector, tau, Medusa heads and tree size; overlap and the
    draft-chip link need a draft chip."""
    out = []
    by = {k.name: k for k in knobs}
    k_lo, k_hi = _knob_bounds(by.get("k"))
    where = "space.k" if by.get("k") is not None and by["k"].searched else "workload.k"
    if drafter is None or acc is None:
        return out
    if k_hi is not None and acc.kind == "per_position" and k_hi > len(acc.per_position):
        out.append(SpecError(p, where, k_hi, f"expected at most {len(acc.per_position)} (one rate per drafted "
                             "position in workload.acceptance.per_position)"))
    if k_lo is not None and acc.kind == "tau" and acc.tau > k_lo + 1:
        out.append(SpecError(p, "workload.acceptance.tau", acc.tau, f"expected a number in [1, k+1 = {k_lo + 1}]"))
    if drafter.kind == "medusa" and k_hi is not None and k_hi > drafter.heads:
        out.append(SpecError(p, where, k_hi, f"expected at most {drafter.heads} (one token per Medusa head)"))
    if tree_nodes:
        if drafter.kind not in ("model", "early-exit", "eagle"):
            out.append(SpecError(p, "workload.tree_nodes", tree_nodes, "trees need a model, early-exit or eagle drafter"))
        elif k_hi is not None and tree_nodes < k_hi:
            out.append(SpecError(p, "workload.tree_nodes", tree_nodes, f"expected >= k = {k_hi} (one node per level)"))
    enabled = by.get("draft_chip_enabled")
    can_have_chip = enabled is not None and (enabled.searched or enabled.fixed is True)
    if overlap and not can_have_chip:
        out.append(SpecError(p, "workload.overlap", True, "overlapped drafting needs a draft chip "
                             "(space.draft_chip.enabled)"))
    link = by.get("draft_chip_link_bw_gb_s")
    link_lo = _knob_bounds(link)[0]
    if can_have_chip and link_lo is not None and link_lo <= 0:
        out.append(SpecError(p, "space.draft_chip.link_bw_gb_s", link_lo,
                             "expected > 0 (the draft chip reaches the target over this link)"))
    return out


def known_metrics() -> list[str]:
    """Metric names a study may optimise or constrain: dse eval's keys plus derived columns."""
    from .frame import NUMERIC_METRICS
    return list(NUMERIC_METRICS)


def load_study(path: str | Path, db: Database | None = None) -> StudySpec:
    """Read and validate a study file; raise SpecError/SpecErrors naming file and key path."""
    from .api import make_acceptance, parse_drafter
    from .techdb import load_technology
    p = str(path)
    raw = load_yaml(path, kind="study")
    db = db or load_database()
    err = _Errors(p)
    for key in raw:
        if key not in TOP_KEYS:
            err.unknown("", key, TOP_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name or ""):
        err.add("name", name if name is not None else MISSING,
                "expected a name of letters, digits, '-', '_' or '.' (it keys the storage and file names)")
        name = "study"
    desc = raw.get("description", "")
    if not isinstance(desc, str):
        err.add("description", desc, "expected a string")
        desc = ""

    # ---- technology overrides (validated by techdb) ----
    tech_raw = raw.get("technology") or {}
    try:
        tech = load_technology(db.root)
        if tech_raw:
            if not isinstance(tech_raw, dict):
                raise SpecError(p, "technology", tech_raw, "expected a mapping of constant overrides")
            tech = tech.with_overrides(tech_raw, where=p)
    except SpecError as exc:
        err.items.append(exc)
        tech = None
    except Exception as exc:  # SpecErrors
        err.items.extend(getattr(exc, "errors", [SpecError(p, "technology", tech_raw, str(exc))]))
        tech = None

    # ---- workload ----
    wl = raw.get("workload")
    knobs: list[Knob] = []
    target = drafter = acc = None
    dtype = kv_dtype = "bf16"
    temperature, overlap, tree_nodes, k_max, runtime = 0.0, False, 0, 8, "graphs"
    if not isinstance(wl, dict):
        err.add("workload", wl if wl is not None else MISSING, "expected a mapping with at least target")
        wl = {}
    for key in wl:
        if key not in WORKLOAD_KEYS:
            err.unknown("workload.", key, WORKLOAD_KEYS)
    base_dir = Path(p).parent

    def model_ref(ref):
        cand = base_dir / str(ref)
        return str(cand) if ("/" in str(ref) or str(ref).endswith((".yaml", ".yml", ".json"))) and cand.exists() else ref

    try:
        if "target" not in wl:
            raise SpecError(p, "workload.target", MISSING, "expected a model name, model file, or HF config.json path")
        target = db.model(model_ref(wl["target"]), where=f"{p}: workload.target: ")
        if target.kind != "decoder":
            raise SpecError(p, "workload.target", wl["target"], "expected a decoder model, not a draft head")
    except SpecError as exc:
        err.items.append(exc)
    except Exception as exc:  # UnknownEntryError
        err.items.append(SpecError(p, "workload.target", wl.get("target"), str(exc)))
    if target is not None:
        try:
            drafter = parse_drafter(model_ref(str(wl.get("draft", "none"))), target, db, where="workload.draft")
        except SpecError as exc:
            err.items.append(SpecError(p, exc.field, exc.value, exc.allowed))
        except Exception as exc:  # UnknownEntryError: the message lists close names
            err.items.append(SpecError(p, "workload.draft", wl.get("draft"), str(exc)))
    for key in ("dtype", "kv_dtype"):
        v = wl.get(key, default_kv_dtype(dtype) if key == "kv_dtype" else "bf16")
        allowed = tuple(WEIGHT_FORMATS) if key == "dtype" else DTYPES
        if v not in allowed:
            err.add(f"workload.{key}", v, f"expected one of {', '.join(allowed)}")
        elif key == "dtype":
            dtype = v
        else:
            kv_dtype = v
    temperature = wl.get("temperature", 0)
    if not _is_num(temperature) or temperature < 0:
        err.add("workload.temperature", temperature, "expected a number >= 0")
        temperature = 0.0
    overlap = wl.get("overlap", False)
    if not isinstance(overlap, bool):
        err.add("workload.overlap", overlap, "expected true or false")
        overlap = False
    continuous = wl.get("continuous", False)
    if not isinstance(continuous, bool):
        err.add("workload.continuous", continuous, "expected true or false")
        continuous = False
    tree_nodes = wl.get("tree_nodes", 0)
    if not _is_num(tree_nodes) or tree_nodes < 0 or not float(tree_nodes).is_integer():
        err.add("workload.tree_nodes", tree_nodes, "expected an integer >= 0")
        tree_nodes = 0
    k_max = wl.get("k_max", 8)
    if not _is_num(k_max) or not 1 <= k_max <= 64 or not float(k_max).is_integer():
        err.add("workload.k_max", k_max, "expected an integer in [1, 64]")
        k_max = 8
    runtime = wl.get("runtime", "graphs")
    if runtime not in db.names("runtime"):
        err.add("workload.runtime", runtime, f"expected one of {', '.join(db.names('runtime'))}")
        runtime = "graphs"
    for key, d in WORKLOAD_KNOBS.items():
        kn = _parse_knob(err, "workload", key, wl.get(key, d.default), d, None, key)
        if kn:
            knobs.append(kn)
    acc_raw = wl.get("acceptance")
    if drafter is not None and drafter.kind != "none":
        if not isinstance(acc_raw, dict) or len(acc_raw) != 1 or next(iter(acc_raw)) not in ("alpha", "per_position", "tau"):
            err.add("workload.acceptance", acc_raw if acc_raw is not None else MISSING,
                    "expected exactly one of {alpha: A} (i.i.d. conditional rate in [0, 1]), "
                    "{per_position: [A1, ...]} or {tau: T} (mean tokens per target pass, >= 1)")
        else:
            try:
                acc = make_acceptance(acc_raw.get("alpha"), acc_raw.get("per_position"), acc_raw.get("tau"),
                                      where="workload.acceptance.")
            except SpecError as exc:
                err.items.append(SpecError(p, exc.field.split(" / ")[0], exc.value, exc.allowed))
    else:
        acc = AcceptanceSpec(kind="alpha", alpha=0.0)

    # ---- space ----
    space = raw.get("space") or {}
    if not isinstance(space, dict):
        err.add("space", space, "expected a mapping with target_chip, draft_chip and/or k")
        space = {}
    for key in space:
        if key not in ("target_chip", "draft_chip", "k"):
            err.unknown("space.", key, {"target_chip", "draft_chip", "k"})
    devices = tuple(db.names("device"))
    mem_names = tech.memory_names if tech else None
    node_names = tech.node_names if tech else None
    for section, table in (("target_chip", CHIP_KNOBS), ("draft_chip", DRAFT_CHIP_KNOBS)):
        sec = space.get(section)
        if sec is None:
            if section == "target_chip":
                err.add("space.target_chip", MISSING, "expected a mapping of chip knobs (or device: NAME)")
            continue
        if not isinstance(sec, dict):
            err.add(f"space.{section}", sec, "expected a mapping of knobs")
            continue
        for key in sec:
            if key not in table:
                err.unknown(f"space.{section}.", key, set(table))
        uses_device = "device" in sec
        tech_keys = [k for k in sec if k in ("process_node", "peak_tflops", "memory", "memory_stacks",
                                             "stack_height", "sram_mb")]
        if uses_device and tech_keys:
            err.add(f"space.{section}", sorted(tech_keys), "give either device (known parts) or technology knobs, "
                    "not both")
        if not uses_device and "peak_tflops" not in sec and section == "target_chip":
            err.add("space.target_chip.peak_tflops", MISSING, "expected a value or range (dense BF16 TFLOP/s)")
        if section == "draft_chip" and not uses_device and "peak_tflops" not in sec:
            err.add("space.draft_chip.peak_tflops", MISSING, "expected a value or range (dense BF16 TFLOP/s)")
        prefix = "target_chip_" if section == "target_chip" else "draft_chip_"
        for key, d in table.items():
            if key == "device" and not uses_device:
                continue
            if uses_device and key in ("process_node", "peak_tflops", "memory", "memory_stacks", "stack_height",
                                       "sram_mb", "mem_efficiency", "compute_efficiency", "link_latency_us") \
                    and key not in sec:
                continue
            if uses_device and key == "link_bw_gb_s" and key not in sec and section == "target_chip":
                continue
            value = sec.get(key, d.default)
            if value is None and key == "peak_tflops":
                continue
            choices = (devices if key == "device" else mem_names if key == "memory" else
                       node_names if key == "process_node" else None)
            kn = _parse_knob(err, section, key, value, d, choices, prefix + key)
            if kn:
                knobs.append(kn)
    if "k" in space:
        if isinstance(wl.get("k"), int):
            err.add("space.k", space["k"], "workload.k fixes k; remove one of them")
        kn = _parse_knob(err, "k", "k", space["k"], K_KNOB, None, "k")
        if kn:
            knobs.append(kn)
    else:
        kv = wl.get("k", "auto")
        if kv != "auto" and not (_is_num(kv) and float(kv).is_integer() and 1 <= kv <= 64):
            err.add("workload.k", kv, "expected 'auto' or an integer in [1, 64]")
        elif kv != "auto":
            knobs.append(Knob("k", "k", "k", "int", fixed=int(kv)))
    if drafter is not None and drafter.kind != "model":
        en = next((k for k in knobs if k.name == "draft_chip_enabled"), None)
        if en is not None and (en.searched or en.fixed):
            err.add("space.draft_chip.enabled", en.choices or en.fixed,
                    f"the {drafter.kind} drafter runs on the target chips; a draft chip needs a draft model")
    if acc is not None and acc.kind == "tau" and not any(k.name == "k" and not k.searched for k in knobs):
        err.add("workload.acceptance.tau", acc.tau, "tau is measured at one k: set workload.k to an integer")
    if drafter is not None and drafter.kind == "none" and any(k.name == "k" for k in knobs):
        err.add("workload.k", wl.get("k", space.get("k")), "k needs a drafter (workload.draft)")

    # ---- cross-checks between the workload and k (the same rules as dse eval) ----
    err.items.extend(_cross_checks(p, knobs, drafter, acc, int(tree_nodes), overlap))

    # ---- objectives and constraints ----
    metrics = set(known_metrics())
    objectives: list[Objective] = []
    obj_raw = raw.get("objectives")
    if not isinstance(obj_raw, list) or not 1 <= len(obj_raw) <= 4:
        err.add("objectives", obj_raw if obj_raw is not None else MISSING, "expected a list of 1 to 4 objectives")
        obj_raw = []
    for i, o in enumerate(obj_raw):
        path = f"objectives[{i}]"
        if not isinstance(o, dict) or set(o) - {"metric", "direction"}:
            err.add(path, o, "expected {metric: NAME, direction: minimize|maximize}")
            continue
        m, dirn = o.get("metric"), o.get("direction", "minimize")
        if m not in metrics:
            close = difflib.get_close_matches(str(m), sorted(metrics), n=2)
            err.add(path + ".metric", m, "unknown metric" + (f"; did you mean {', '.join(close)}?" if close else "")
                    + f" (allowed: {', '.join(sorted(metrics))})")
        if dirn not in ("minimize", "maximize"):
            err.add(path + ".direction", dirn, "expected minimize or maximize")
        objectives.append(Objective(str(m), str(dirn)))
    if len({o.metric for o in objectives}) != len(objectives):
        err.add("objectives", [o.metric for o in objectives], "expected distinct metrics")
    constraints: list[Constraint] = []
    con_raw = raw.get("constraints") or []
    if not isinstance(con_raw, list):
        err.add("constraints", con_raw, "expected a list of {metric, max} / {metric, min}")
        con_raw = []
    for i, c in enumerate(con_raw):
        path = f"constraints[{i}]"
        if not isinstance(c, dict) or "metric" not in c or not ({"max", "min"} & set(c)) or set(c) - {"metric", "max", "min"}:
            err.add(path, c, "expected {metric: NAME, max: X} and/or min: Y")
            continue
        if c["metric"] not in metrics:
            close = difflib.get_close_matches(str(c["metric"]), sorted(metrics), n=2)
            err.add(path + ".metric", c["metric"], "unknown metric" + (f"; did you mean {', '.join(close)}?" if close else ""))
        for b in ("max", "min"):
            if b in c and not _is_num(c[b]):
                err.add(f"{path}.{b}", c[b], "expected a number")
        constraints.append(Constraint(str(c["metric"]), c.get("max"), c.get("min")))

    # ---- search, grid, output, storage ----
    search = {**SEARCH_DEFAULTS, **(raw.get("search") or {})}
    for key in (raw.get("search") or {}):
        if key not in SEARCH_DEFAULTS:
            err.unknown("search.", key, set(SEARCH_DEFAULTS))
    if search["sampler"] not in SAMPLERS:
        err.add("search.sampler", search["sampler"], f"expected one of {', '.join(SAMPLERS)}")
    for key, lo in (("n_trials", 1), ("batch_size", 2), ("seed", 0)):
        v = search[key]
        if not _is_num(v) or not float(v).is_integer() or v < lo:
            err.add(f"search.{key}", v, f"expected an integer >= {lo}")
            search[key] = SEARCH_DEFAULTS[key]
    grid = raw.get("grid") or {}
    points = grid.get("points", 8) if isinstance(grid, dict) else None
    if not isinstance(grid, dict) or set(grid) - {"points"} or not _is_num(points) or not float(points).is_integer() \
            or points < 2:
        err.add("grid", grid, "expected {points: N} with N an integer >= 2")
        points = 8
    output = raw.get("output", f"results/{name}.parquet")
    if not isinstance(output, str) or not output:
        err.add("output", output, "expected a file path")
        output = f"results/{name}.parquet"
    storage = raw.get("storage")
    if storage is not None and not isinstance(storage, str):
        err.add("storage", storage, "expected null (journal file beside the output), a file path or a database URL")
        storage = None
    if not any(k.searched for k in knobs) and not err.items:
        err.add("space", MISSING, "nothing to search: give at least one knob as a list or a range")
    raise_collected(err.items)
    return StudySpec(name=name, description=desc, path=p, target=target, drafter=drafter, acceptance=acc,
                     dtype=dtype, kv_dtype=kv_dtype, temperature=float(temperature), overlap=overlap,
                     tree_nodes=int(tree_nodes), k_max=int(k_max), runtime=runtime, knobs=tuple(knobs),
                     objectives=tuple(objectives), constraints=tuple(constraints), sampler=search["sampler"],
                     n_trials=int(search["n_trials"]), batch_size=int(search["batch_size"]), seed=int(search["seed"]),
                     grid_points=int(points), output=output, storage=storage, technology=tech_raw, raw=raw,
                     tech=tech, continuous=continuous)


def open_study(study: StudySpec | str | Path, db: Database | None = None):
    """(StudySpec, Database, TechConstants) from a spec or a study file path."""
    if not isinstance(study, StudySpec):
        study = load_study(study, db=db)
    return study, db or load_database(), study.tech
