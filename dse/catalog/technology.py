"""Technology constants for synthesised chips (MODEL.md section 5).

``hardware_db/technology/memory.yaml`` (memory types) and ``nodes.yaml`` (process nodes plus
global constants) load into a frozen :class:`TechConstants`, SI inside (bytes, bytes/s,
FLOP/s, J/bit, J/FLOP, USD, mm^2, W). ``dse/model/technology.py`` turns knobs into chips with it.

In the files every number is a mapping ``{value, source}`` or ``{value, estimate: true,
reason}`` (an estimate may cite a source too; an optional ``note`` is kept for readers). A
source text that says ESTIMATE or UNVERIFIED must carry ``estimate: true``, so a number the
reference marks as a guess stays marked. A study may override any constant with
:meth:`TechConstants.with_overrides`; plain numbers are accepted there.

Each field's YAML name, SI factor, unit and allowed range is declared once (``MEMORY_FIELDS``,
``NODE_FIELDS``, ``GLOBAL_FIELDS``); the loader, the override path and the error texts read them.
Categorical knobs are integer codes: ``memory_names`` and ``node_names`` are ordered tuples (file
order) and ``memory_table()`` / ``node_table()`` are structs of numpy arrays indexed by code.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import MISSING, SpecError, raise_collected
from ..units import FACTOR
from .fields import Range, unknown_key
from .yamlio import load_yaml

SCHEMA_VERSION = 1
MEMORY_KINDS = ("hbm", "device", "sram")
YIELD_MODELS = ("murphy", "poisson")
#: highest HBM stack height a memory type may list (JEDEC HBM4 allows 16)
MAX_STACK_HEIGHT = 24
_ALL_KINDS = MEMORY_KINDS
_ENTRY_KEYS = ("value", "source", "estimate", "reason", "note")
_FROZEN = dict(frozen=True, slots=True, kw_only=True)


class Field(NamedTuple):
    """One constant: YAML name, attribute name, display->SI factor, display unit and range."""

    yaml: str
    attr: str
    factor: float
    unit: str
    lo: float = 0.0
    hi: float = math.inf
    lo_open: bool = False
    kinds: tuple[str, ...] = _ALL_KINDS   # memory kinds that use the field
    kind: str = "float"                   # "float", "int", "heights" or "choice"
    choices: tuple[str, ...] = ()

    def allowed(self) -> str:
        if self.kind == "choice":
            return f"expected one of {', '.join(self.choices)}"
        if self.kind == "heights":
            return f"expected a non-empty list of integers in [1, {self.hi:g}]"
        return self.range.text()

    @property
    def range(self) -> Range:
        return Range(self.kind == "int", self.lo, self.hi, self.lo_open, self.unit)


_INF = math.inf
_HBM_DEV = ("hbm", "device")

MEMORY_FIELDS: tuple[Field, ...] = (
    Field("bw_gb_s", "bw_bytes_s", FACTOR["gb_s"], "GB/s per stack or device", lo_open=True,
          kinds=_HBM_DEV),
    Field("bw_gb_s_per_mb", "sram_bw_bytes_s_per_byte", FACTOR["gb_s"] / FACTOR["mb"],
          "GB/s per MB", lo_open=True, kinds=("sram",)),
    Field("gib_per_layer", "bytes_per_layer", FACTOR["gib"], "GiB", lo_open=True, kinds=("hbm",)),
    Field("stack_heights", "stack_heights", 1.0, "", 1, MAX_STACK_HEIGHT, kinds=("hbm",),
          kind="heights"),
    Field("gib_per_device", "bytes_per_device", FACTOR["gib"], "GiB", lo_open=True,
          kinds=("device",)),
    Field("usd_per_gib", "usd_per_byte", 1.0 / FACTOR["gib"], "USD/GiB", kinds=_HBM_DEV),
    Field("pj_per_bit", "j_per_bit", FACTOR["pj"], "pJ/bit"),
    Field("phy_area_mm2", "phy_area_mm2", 1.0, "mm^2 per stack or device", kinds=_HBM_DEV),
    Field("shoreline_mm", "shoreline_mm", 1.0, "mm per stack or device", kinds=_HBM_DEV),
)

NODE_FIELDS: tuple[Field, ...] = (
    Field("tflops_per_mm2", "flop_s_per_mm2", FACTOR["tflops"], "dense BF16 TFLOP/s per mm^2",
          lo_open=True),
    Field("sram_mb_per_mm2", "sram_bytes_per_mm2", FACTOR["mb"], "MB/mm^2", lo_open=True),
    Field("wafer_cost_usd", "wafer_cost_usd", 1.0, "USD per 300 mm wafer", lo_open=True),
    Field("defects_per_cm2", "defects_per_mm2", 0.01, "defects/cm^2"),
    Field("pj_per_flop", "j_per_flop", FACTOR["pj"], "pJ per BF16 FLOP"),
    Field("static_w_per_mm2", "static_w_per_mm2", 1.0, "W/mm^2"),
)

GLOBAL_FIELDS: tuple[Field, ...] = (
    Field("reticle_limit_mm2", "reticle_limit_mm2", 1.0, "mm^2", lo_open=True),
    Field("die_aspect_ratio", "die_aspect_ratio", 1.0, "long/short edge", 1.0, 10.0),
    Field("memory_edges_per_die", "memory_edges_per_die", 1.0, "", 1, 4, kind="int"),
    Field("fixed_die_area_mm2", "fixed_die_area_mm2", 1.0, "mm^2"),
    Field("d2d_area_mm2_per_die", "d2d_area_mm2_per_die", 1.0, "mm^2"),
    Field("wafer_diameter_mm", "wafer_diameter_mm", 1.0, "mm", 0, 1000, lo_open=True),
    Field("yield_model", "yield_model", 1.0, "", kind="choice", choices=YIELD_MODELS),
    Field("fp8_per_bf16", "fp8_per_bf16", 1.0, "", 0, 16, lo_open=True),
    Field("packaging_base_usd", "packaging_base_usd", 1.0, "USD"),
    Field("interposer_base_usd", "interposer_base_usd", 1.0, "USD"),
    Field("packaging_usd_per_hbm_stack", "packaging_usd_per_hbm_stack", 1.0, "USD"),
    Field("packaging_usd_per_extra_die", "packaging_usd_per_extra_die", 1.0, "USD"),
    Field("test_usd_per_mm2", "test_usd_per_mm2", 1.0, "USD/mm^2"),
    Field("tdp_compute_utilization", "tdp_compute_utilization", 1.0, "", 0, 1, lo_open=True),
    Field("link_pj_per_bit", "link_j_per_bit", FACTOR["pj"], "pJ/bit"),
    Field("active_idle_fraction", "active_idle_fraction", 1.0, "of the provisioned power above leakage", 0, 1),
    Field("onchip_pj_per_dram_bit", "onchip_j_per_dram_bit", FACTOR["pj"], "pJ per bit from off-chip DRAM"),
    Field("operand_delivery_factor", "operand_delivery_factor", 1.0, "x the node's pJ/FLOP", 0, 20),
    Field("serving_life_years", "serving_life_s", 365.25 * 86400.0, "years", 0, 30, lo_open=True),
    Field("usd_per_kwh", "usd_per_j", 1.0 / 3.6e6, "USD/kWh", 0, 10),
    Field("pue", "pue", 1.0, "facility W per IT W", 1, 5),
)


#: memory fields renamed when every capacity name took the unit it holds (`_gib` binary, `_gb` decimal):
#: an old name is refused with the new one, never read as another unit
RENAMED = {"gb_per_layer": "gib_per_layer", "gb_per_device": "gib_per_device", "usd_per_gb": "usd_per_gib"}


def renamed(key: str) -> str:
    """' (renamed to NEW: the same binary GB, 2^30 bytes)' for an old memory field name, else ''."""
    return f"; renamed to {RENAMED[key]} (the same binary GB, 2^30 bytes)" if key in RENAMED else ""


class Provenance(NamedTuple):
    """Where one constant comes from: dotted field path, estimate flag, citation or reason."""

    field: str
    estimate: bool
    text: str


@dataclass(**_FROZEN)
class MemoryTech:
    """One memory type. Units are stacks (hbm), devices/packages (device) or none (sram).

    Fields a kind does not use are 0 (or ``()``): a ``device`` has no ``bytes_per_layer``, an
    ``sram`` has no per-unit bandwidth, price, PHY or shoreline (its cost is silicon area).
    """

    name: str
    kind: str
    bw_bytes_s: float = 0.0                 # per stack / device, product rate
    sram_bw_bytes_s_per_byte: float = 0.0   # sram: bandwidth per byte of SRAM (1/s)
    bytes_per_layer: float = 0.0            # hbm: capacity per DRAM die layer
    stack_heights: tuple[int, ...] = ()     # hbm: allowed stack heights
    bytes_per_device: float = 0.0           # device: capacity per device / package
    usd_per_byte: float = 0.0
    j_per_bit: float = 0.0                  # access + interface energy
    phy_area_mm2: float = 0.0               # per stack / device, on the logic die
    shoreline_mm: float = 0.0               # die edge per stack / device


@dataclass(**_FROZEN)
class NodeTech:
    """One process node."""

    name: str
    flop_s_per_mm2: float       # dense BF16 FLOP/s per mm^2 of compute area
    sram_bytes_per_mm2: float   # usable SRAM macro density
    wafer_cost_usd: float       # per 300 mm wafer
    defects_per_mm2: float      # defect density D0
    j_per_flop: float           # dense BF16, incl. on-die operand delivery
    static_w_per_mm2: float     # leakage + always-on power per mm^2 of silicon


@dataclass(**_FROZEN)
class MemoryTable:
    """Memory types as numpy arrays indexed by memory code (``TechConstants.memory_names``)."""

    names: tuple[str, ...]
    is_hbm: np.ndarray
    is_sram: np.ndarray
    bw_bytes_s: np.ndarray
    sram_bw_bytes_s_per_byte: np.ndarray
    bytes_per_layer: np.ndarray
    bytes_per_device: np.ndarray
    usd_per_byte: np.ndarray
    j_per_bit: np.ndarray
    phy_area_mm2: np.ndarray
    shoreline_mm: np.ndarray
    height_allowed: np.ndarray   # (n_memory, MAX_STACK_HEIGHT + 1) bool; all True for non-HBM


@dataclass(**_FROZEN)
class NodeTable:
    """Process nodes as numpy arrays indexed by node code (``TechConstants.node_names``)."""

    names: tuple[str, ...]
    flop_s_per_mm2: np.ndarray
    sram_bytes_per_mm2: np.ndarray
    wafer_cost_usd: np.ndarray
    defects_per_mm2: np.ndarray
    j_per_flop: np.ndarray
    static_w_per_mm2: np.ndarray


@dataclass(**_FROZEN)
class TechConstants:
    """Every technology constant of MODEL.md section 5, SI inside, with its provenance."""

    memory: tuple[MemoryTech, ...]
    nodes: tuple[NodeTech, ...]
    reticle_limit_mm2: float
    die_aspect_ratio: float
    memory_edges_per_die: int
    fixed_die_area_mm2: float
    d2d_area_mm2_per_die: float
    wafer_diameter_mm: float
    yield_model: str
    fp8_per_bf16: float
    packaging_base_usd: float
    interposer_base_usd: float
    packaging_usd_per_hbm_stack: float
    packaging_usd_per_extra_die: float
    test_usd_per_mm2: float
    tdp_compute_utilization: float
    link_j_per_bit: float
    active_idle_fraction: float        # a busy chip's floor: leakage + this x (provisioned power - leakage)
    onchip_j_per_dram_bit: float       # logic-die path of a bit read from off-chip DRAM (PHY, NoC, L2, SMEM)
    operand_delivery_factor: float     # inference-step FLOP energy = node J/FLOP x (1 + this)
    serving_life_s: float              # a deployment's price is spread over this life (usd_per_mtok)
    usd_per_j: float                   # electricity at the facility's meter
    pue: float                         # power usage effectiveness: facility energy / IT energy
    provenance: tuple[Provenance, ...] = ()
    files: tuple[str, ...] = ()

    # -- names and codes -------------------------------------------------------------------
    @property
    def memory_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.memory)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def memory_index(self, name: str) -> int:
        """Integer code of a memory type; SpecError naming the close names if absent."""
        if name in self.memory_names:
            return self.memory_names.index(name)
        raise _unknown(self.files[0] if self.files else None, "memory_type", list(self.memory_names),
                       name, what="memory type", value=name)

    def node_index(self, name: str) -> int:
        """Integer code of a process node; SpecError naming the close names if absent."""
        if name in self.node_names:
            return self.node_names.index(name)
        raise _unknown(self.files[1] if self.files else None, "process_node", list(self.node_names),
                       name, what="process node", value=name)

    def memory_by_name(self, name: str) -> MemoryTech:
        return self.memory[self.memory_index(name)]

    def node_by_name(self, name: str) -> NodeTech:
        return self.nodes[self.node_index(name)]

    # -- lookup tables ---------------------------------------------------------------------
    def memory_table(self) -> MemoryTable:
        """Struct of float64 / bool arrays, one element per memory code (built once per object:
        the arrays are read-only)."""
        return _tables(self)[1]

    def node_table(self) -> NodeTable:
        """Struct of float64 arrays, one element per node code (built once per object)."""
        return _tables(self)[2]

    def _build_memory_table(self) -> MemoryTable:
        def col(attr):
            return _frozen_array([getattr(m, attr) for m in self.memory], np.float64)

        allowed = np.ones((len(self.memory), MAX_STACK_HEIGHT + 1), dtype=bool)
        for i, m in enumerate(self.memory):
            if m.kind == "hbm":
                allowed[i, :] = False
                allowed[i, list(m.stack_heights)] = True
        allowed.setflags(write=False)
        return MemoryTable(
            names=self.memory_names,
            is_hbm=_frozen_array([m.kind == "hbm" for m in self.memory], bool),
            is_sram=_frozen_array([m.kind == "sram" for m in self.memory], bool),
            bw_bytes_s=col("bw_bytes_s"),
            sram_bw_bytes_s_per_byte=col("sram_bw_bytes_s_per_byte"),
            bytes_per_layer=col("bytes_per_layer"),
            bytes_per_device=col("bytes_per_device"),
            usd_per_byte=col("usd_per_byte"),
            j_per_bit=col("j_per_bit"),
            phy_area_mm2=col("phy_area_mm2"),
            shoreline_mm=col("shoreline_mm"),
            height_allowed=allowed,
        )

    def _build_node_table(self) -> NodeTable:
        def col(attr):
            return _frozen_array([getattr(n, attr) for n in self.nodes], np.float64)

        return NodeTable(names=self.node_names,
                         **{f.attr: col(f.attr) for f in NODE_FIELDS})

    # -- provenance, overrides, fingerprint ------------------------------------------------
    def source_of(self, field: str) -> Provenance:
        """Provenance of a dotted field path, e.g. ``memory.hbm3e.usd_per_gib``."""
        for p in self.provenance:
            if p.field == field:
                return p
        raise KeyError(field)

    def estimates(self) -> tuple[str, ...]:
        """Dotted paths of every constant that is an estimate."""
        return tuple(p.field for p in self.provenance if p.estimate)

    def with_overrides(self, mapping: Mapping[str, Any], *, where: str = "technology overrides"
                       ) -> TechConstants:
        """A copy with some constants replaced, validated like the files.

        ``mapping`` mirrors the files, in display units: ``{"memory": {"hbm3e": {"usd_per_gib":
        12}}, "nodes": {"n3": {"wafer_cost_usd": 20000}}, "reticle_limit_mm2": 800}``. A value is
        a plain number (recorded as an override) or a ``{value, source | estimate+reason}``
        mapping. New memory types or nodes cannot be added here. Every bad entry is reported at
        once (SpecError / SpecErrors naming ``where`` and the dotted field).
        """
        errors: list[SpecError] = []
        prov: dict[str, Provenance] = {p.field: p for p in self.provenance}
        if not isinstance(mapping, Mapping):
            raise SpecError(where, "<top level>", mapping, "expected a mapping of constant: value")
        memory = list(self.memory)
        nodes = list(self.nodes)
        changes: dict[str, Any] = {}
        glob = {f.yaml: f for f in GLOBAL_FIELDS}
        for key, value in mapping.items():
            if key == "memory":
                _override_entries(memory, value, MEMORY_FIELDS, "memory", where, errors, prov)
            elif key == "nodes":
                _override_entries(nodes, value, NODE_FIELDS, "nodes", where, errors, prov)
            elif key in glob:
                v = _parse_value(value, glob[key], where, key, errors, prov, require_source=False)
                if v is not MISSING:
                    changes[glob[key].attr] = v
            else:
                errors.append(_unknown(where, str(key), ["memory", "nodes", *glob]))
        raise_collected(errors)
        out = dataclasses.replace(self, memory=tuple(memory), nodes=tuple(nodes),
                                  provenance=tuple(prov.values()), **changes)
        raise_collected(_cross_check(out, where))
        return out

    def values(self) -> dict[str, Any]:
        """Every constant in SI, as plain JSON-able data (what ``fingerprint`` hashes)."""
        out: dict[str, Any] = {
            "memory": {m.name: _plain(m) for m in self.memory},
            "nodes": {n.name: _plain(n) for n in self.nodes},
        }
        out.update({f.attr: getattr(self, f.attr) for f in GLOBAL_FIELDS})
        return out

    def fingerprint(self) -> str:
        """Short sha256 (16 hex digits) of the resolved constants (values only, not citations)."""
        text = json.dumps(self.values(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- loading ------------------------------------------------------------------------------

def load_technology(root: str | Path) -> TechConstants:
    """The technology constants of ``root`` (see :func:`read_technology`), cached per directory
    and the files' modification times: a single `dse eval` would otherwise parse both YAML
    files on every call."""
    parent, files = _technology_files(str(root))
    return _cached_technology(parent, tuple(_mtime(f) for f in files))


@functools.lru_cache(maxsize=8)
def _technology_files(root: str) -> tuple[str, tuple[str, str]]:
    """(the resolved root, its technology files' paths), once per root."""
    tdir = Path(root).resolve() / "technology"
    return str(tdir.parent), (str(tdir / "memory.yaml"), str(tdir / "nodes.yaml"))


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _cached_technology(root: str, stamp: tuple) -> TechConstants:
    return read_technology(root)


def read_technology(root: str | Path) -> TechConstants:
    """Load ``root/technology/memory.yaml`` and ``nodes.yaml`` (root = the hardware_db dir).

    Raises:
        SpecError / SpecErrors: a file is missing or malformed, or a field is missing,
            non-numeric, out of range, unknown, or lacks its source / estimate flag. Errors of
            both files are collected and raised together.
    """
    tdir = Path(root) / "technology"
    mem_path, node_path = tdir / "memory.yaml", tdir / "nodes.yaml"
    errors: list[SpecError] = []
    prov: dict[str, Provenance] = {}

    memory: list[MemoryTech] = []
    try:
        raw = load_yaml(mem_path, kind="memory technology file")
    except SpecError as exc:
        errors.append(exc)
    else:
        memory = _load_memory(raw, str(mem_path), errors, prov)

    nodes: list[NodeTech] = []
    glob: dict[str, Any] = {}
    try:
        raw = load_yaml(node_path, kind="process node file")
    except SpecError as exc:
        errors.append(exc)
    else:
        nodes, glob = _load_nodes(raw, str(node_path), errors, prov)

    raise_collected(errors)
    tech = TechConstants(memory=tuple(memory), nodes=tuple(nodes), provenance=tuple(prov.values()),
                         files=(str(mem_path), str(node_path)), **glob)
    raise_collected(_cross_check(tech, str(node_path)))
    return tech


def _load_memory(raw: dict, path: str, errors: list[SpecError],
                 prov: dict[str, Provenance]) -> list[MemoryTech]:
    _check_top(raw, path, {"memory"}, errors)
    block = raw.get("memory", MISSING)
    if not isinstance(block, dict) or not block:
        errors.append(SpecError(path, "memory", block,
                                "expected a non-empty mapping of memory type: fields"))
        return []
    out = []
    for name, entry in block.items():
        prefix = f"memory.{name}"
        if not isinstance(entry, dict):
            errors.append(SpecError(path, prefix, entry, "expected a mapping of field: value"))
            continue
        kind = entry.get("kind", MISSING)
        if kind not in MEMORY_KINDS:
            errors.append(SpecError(path, f"{prefix}.kind", kind,
                                    f"expected one of {', '.join(MEMORY_KINDS)}"))
            continue
        fields = {f.yaml: f for f in MEMORY_FIELDS}
        used = {k: f for k, f in fields.items() if kind in f.kinds}
        kwargs: dict[str, Any] = {}
        for key, value in entry.items():
            if key == "kind":
                continue
            fpath = f"{prefix}.{key}"
            if key in RENAMED:
                errors.append(SpecError(path, fpath, MISSING, f"unknown field{renamed(key)}"))
            elif key not in fields:
                errors.append(_unknown(path, fpath, list(used), key))
            elif key not in used:
                errors.append(SpecError(path, fpath, MISSING,
                                        f"not used by memory kind {kind!r} (fields: "
                                        f"{', '.join(used)})"))
            else:
                v = _parse_value(value, used[key], path, fpath, errors, prov, require_source=True)
                if v is not MISSING:
                    kwargs[used[key].attr] = v
        for key, f in used.items():
            if key not in entry:
                errors.append(SpecError(path, f"{prefix}.{key}", MISSING,
                                        f"missing required field: {f.allowed()}"))
        if len(kwargs) == len(used):
            out.append(MemoryTech(name=str(name), kind=kind, **kwargs))
    return out


def _load_nodes(raw: dict, path: str, errors: list[SpecError], prov: dict[str, Provenance]
                ) -> tuple[list[NodeTech], dict[str, Any]]:
    glob_fields = {f.yaml: f for f in GLOBAL_FIELDS}
    _check_top(raw, path, {"nodes", *glob_fields}, errors)
    nodes: list[NodeTech] = []
    block = raw.get("nodes", MISSING)
    if not isinstance(block, dict) or not block:
        errors.append(SpecError(path, "nodes", block,
                                "expected a non-empty mapping of node name: fields"))
    else:
        for name, entry in block.items():
            prefix = f"nodes.{name}"
            if not isinstance(entry, dict):
                errors.append(SpecError(path, prefix, entry, "expected a mapping of field: value"))
                continue
            kwargs = _parse_block(entry, NODE_FIELDS, path, prefix, errors, prov)
            if len(kwargs) == len(NODE_FIELDS):
                nodes.append(NodeTech(name=str(name), **kwargs))
    glob = _parse_block({k: v for k, v in raw.items() if k in glob_fields}, GLOBAL_FIELDS, path,
                        "", errors, prov)
    return nodes, glob


def _parse_block(entry: dict, fields: tuple[Field, ...], path: str, prefix: str,
                 errors: list[SpecError], prov: dict[str, Provenance]) -> dict[str, Any]:
    """Every field of ``fields`` is required; unknown keys are errors (except at top level)."""
    table = {f.yaml: f for f in fields}
    dot = f"{prefix}." if prefix else ""
    if prefix:
        for key in entry:
            if key not in table:
                errors.append(_unknown(path, f"{dot}{key}", list(table), key))
    kwargs: dict[str, Any] = {}
    for key, f in table.items():
        if key not in entry:
            errors.append(SpecError(path, f"{dot}{key}", MISSING,
                                    f"missing required field: {f.allowed()}"))
            continue
        v = _parse_value(entry[key], f, path, f"{dot}{key}", errors, prov, require_source=True)
        if v is not MISSING:
            kwargs[f.attr] = v
    return kwargs


def _check_top(raw: dict, path: str, allowed: set[str], errors: list[SpecError]) -> None:
    version = raw.get("schema_version", MISSING)
    if version != SCHEMA_VERSION or isinstance(version, bool):
        errors.append(SpecError(path, "schema_version", version,
                                f"expected {SCHEMA_VERSION} (the version this dse reads)"))
    known = allowed | {"schema_version", "notes"}
    for key in raw:
        if key not in known:
            errors.append(_unknown(path, str(key), sorted(known)))


def _parse_value(raw: Any, f: Field, path: str, fpath: str, errors: list[SpecError],
                 prov: dict[str, Provenance], *, require_source: bool) -> Any:
    """One constant (a provenance mapping, or a plain value when overriding) -> SI value."""
    if isinstance(raw, dict):
        bad = [k for k in raw if k not in _ENTRY_KEYS]
        for k in bad:
            errors.append(_unknown(path, f"{fpath}.{k}", list(_ENTRY_KEYS), str(k)))
        value = raw.get("value", MISSING)
        if value is MISSING or value is None:
            errors.append(SpecError(path, f"{fpath}.value", MISSING,
                                    f"missing required field: {f.allowed()}"))
            return MISSING
        record = _provenance(raw, path, fpath, errors)
        if bad or record is None:
            return MISSING
    elif require_source:
        errors.append(SpecError(path, fpath, raw,
                                "expected a mapping {value, source} or "
                                "{value, estimate: true, reason} (every number needs a source)"))
        return MISSING
    else:
        value, record = raw, Provenance(fpath, False, f"override ({path})")
    try:
        si = _convert(f, value, path, fpath)
    except SpecError as exc:
        errors.append(exc)
        return MISSING
    prov[fpath] = record
    return si


def _provenance(raw: dict, path: str, fpath: str, errors: list[SpecError]) -> Provenance | None:
    source, reason = raw.get("source"), raw.get("reason")
    estimate = raw.get("estimate", False)
    n = len(errors)
    if not isinstance(estimate, bool):
        errors.append(SpecError(path, f"{fpath}.estimate", estimate, "expected true or false"))
    for key, text in (("source", source), ("reason", reason)):
        if text is not None and (not isinstance(text, str) or not text.strip()):
            errors.append(SpecError(path, f"{fpath}.{key}", text, "expected a non-empty string"))
    if estimate is True and not isinstance(reason, str):
        errors.append(SpecError(path, f"{fpath}.reason", MISSING,
                                "an estimate needs a one-line reason"))
    if estimate is not True and not isinstance(source, str):
        errors.append(SpecError(path, f"{fpath}.source", MISSING,
                                "every number needs a source, or estimate: true and a reason"))
    if (isinstance(source, str) and estimate is not True
            and ("ESTIMATE" in source or "UNVERIFIED" in source)):
        errors.append(SpecError(path, f"{fpath}.estimate", estimate,
                                "the source marks this number ESTIMATE/UNVERIFIED: "
                                "set estimate: true and give a reason"))
    if len(errors) > n:
        return None
    if estimate:
        text = f"ESTIMATE: {reason}" + (f" (source: {source})" if source else "")
    else:
        text = str(source)
    return Provenance(fpath, bool(estimate), text)


def _convert(f: Field, value: Any, path: str, fpath: str) -> Any:
    if f.kind == "choice":
        if value not in f.choices:
            raise SpecError(path, fpath, value, f.allowed())
        return value
    if f.kind == "heights":
        ok = (isinstance(value, list) and value
              and all(isinstance(h, int) and not isinstance(h, bool) and f.lo <= h <= f.hi
                      for h in value))
        if not ok:
            raise SpecError(path, fpath, value, f.allowed())
        return tuple(sorted(set(value)))
    v = f.range.check(value, path, fpath)
    return v if f.kind == "int" else v * f.factor


def _override_entries(items: list, block: Any, fields: tuple[Field, ...], section: str,
                      where: str, errors: list[SpecError], prov: dict[str, Provenance]) -> None:
    """Apply ``{name: {field: value}}`` to the list of MemoryTech / NodeTech in place."""
    if not isinstance(block, Mapping):
        errors.append(SpecError(where, section, block, "expected a mapping of name: {field: value}"))
        return
    names = [it.name for it in items]
    for name, entry in block.items():
        prefix = f"{section}.{name}"
        if name not in names:
            what = "memory type" if section == "memory" else "process node"
            errors.append(_unknown(where, prefix, names, str(name), what=what))
            continue
        if not isinstance(entry, Mapping):
            errors.append(SpecError(where, prefix, entry, "expected a mapping of field: value"))
            continue
        i = names.index(name)
        kind = getattr(items[i], "kind", None)
        used = {f.yaml: f for f in fields if kind is None or kind in f.kinds}
        changes = {}
        for key, value in entry.items():
            fpath = f"{prefix}.{key}"
            if key not in used:
                allowed = ", ".join(used)
                why = (f"cannot be overridden (fields: {allowed})" if key == "kind" else
                       f"not a field of {prefix}{renamed(key)} (fields: {allowed})")
                errors.append(SpecError(where, fpath, MISSING, why))
                continue
            v = _parse_value(value, used[key], where, fpath, errors, prov, require_source=False)
            if v is not MISSING:
                changes[used[key].attr] = v
        items[i] = dataclasses.replace(items[i], **changes)


def _cross_check(tech: TechConstants, path: str) -> list[SpecError]:
    errs = []
    if tech.d2d_area_mm2_per_die >= tech.reticle_limit_mm2:
        errs.append(SpecError(path, "d2d_area_mm2_per_die", tech.d2d_area_mm2_per_die,
                              f"must be below reticle_limit_mm2 = {tech.reticle_limit_mm2:g}"))
    return errs


def _unknown(path: str | None, fpath: str, allowed: list[str], key: str | None = None, *,
             what: str = "field", value: Any = MISSING) -> SpecError:
    return unknown_key(path, fpath, fpath if key is None else key, allowed, what=what, value=value)


def _plain(obj) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v)
            for k, v in ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))}


#: id(TechConstants) -> (that object, its MemoryTable, its NodeTable); the object is held, so its
#: id is not reused while the entry lives; a few objects exist per process (one per override set)
_TABLES: dict[int, tuple[TechConstants, MemoryTable, NodeTable]] = {}


def _tables(tech: TechConstants) -> tuple[TechConstants, MemoryTable, NodeTable]:
    hit = _TABLES.get(id(tech))
    if hit is None or hit[0] is not tech:
        if len(_TABLES) >= 64:
            _TABLES.clear()
        hit = _TABLES[id(tech)] = (tech, tech._build_memory_table(), tech._build_node_table())
    return hit


def _frozen_array(values, dtype) -> np.ndarray:
    a = np.asarray(values, dtype=dtype)
    a.setflags(write=False)
    return a
