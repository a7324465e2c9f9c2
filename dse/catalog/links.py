"""Link classes (hardware_db/technology/links.yaml): the bus-bandwidth efficiency and the
per-step small-message latency of a ring all-reduce on each kind of link (MODEL.md section 2).

A device names its scale-up class (``link_class``); its own ``link_latency_us`` /
``link_efficiency`` win when given. A synthesised chip takes the class of its ``link_class``
knob (default SYNTHESISED_LINK_CLASS, a scale-up fabric like NVLink). The ``scale-out`` class is
the network between scale-up domains (a device's ``scale_out_class``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import MISSING, SpecError, raise_collected
from .fields import Range

#: scale-up classes (a device's link_class, a synthesised chip's link_class knob)
SCALE_UP_CLASSES = ("nvlink", "pcie", "ethernet", "ici", "infinity-fabric", "other")
#: the network between scale-up domains
SCALE_OUT_CLASS = "scale-out"
#: hops inside a chip whose layers sit in regions of its SRAM (dse.model.pipeline): region to region on
#: one die, and across a die edge
ON_DIE_CLASS, DIE_TO_DIE_CLASS = "on-die", "die-to-die"
LINK_CLASSES = SCALE_UP_CLASSES + (SCALE_OUT_CLASS, ON_DIE_CLASS, DIE_TO_DIE_CLASS)
#: the default class of a synthesised chip's link: a scale-up fabric like NVLink/NVSwitch (the
#: scale-up class with measured numbers; a study may choose another with the link_class knob)
SYNTHESISED_LINK_CLASS = "nvlink"
_FIELDS = {"efficiency": (Range(lo=0.0, hi=1.0, lo_open=True), 1.0),
           "latency_us": (Range(lo=0.0, hi=1e4, unit="us"), 1e-6)}
#: optional: the second protocol of a class whose all-reduce switches protocol by message size
#: (roofline.protocol_allreduce_time_s); absent = one protocol (the ll_efficiency is the efficiency,
#: the bulk_latency_us the latency_us)
_OPTIONAL = {"ll_efficiency": (Range(lo=0.0, hi=1.0, lo_open=True), 1.0),
             "bulk_latency_us": (Range(lo=0.0, hi=1e4, unit="us"), 1e-6)}


@dataclass(frozen=True, slots=True)
class LinkClass:
    """eta_link (all-reduce bus bandwidth / one-way line rate) and seconds per ring step; where the
    class's collectives switch protocol by message size, the low-latency protocol's bus efficiency
    (``ll_efficiency``, at ``latency_s`` a step) and the bandwidth protocol's latency a step
    (``bulk_latency_s``, at ``efficiency``); one protocol: ll_efficiency = efficiency and
    bulk_latency_s = latency_s."""

    name: str
    efficiency: float
    latency_s: float
    description: str = ""
    ll_efficiency: float | None = None
    bulk_latency_s: float | None = None

    def __post_init__(self):
        if self.ll_efficiency is None:
            object.__setattr__(self, "ll_efficiency", self.efficiency)
        if self.bulk_latency_s is None:
            object.__setattr__(self, "bulk_latency_s", self.latency_s)


def load_link_classes(root: str | Path) -> dict[str, LinkClass]:
    """``root/technology/links.yaml`` -> {class name: LinkClass}; every class of LINK_CLASSES
    must be there, each number with a source or marked as an estimate with a reason."""
    return dict(_load(str(Path(root) / "technology" / "links.yaml")))


@lru_cache(maxsize=8)
def _load(path: str) -> tuple:
    from .yamlio import load_yaml  # yaml only when a database is read (dse.model imports specs)
    raw = load_yaml(Path(path), kind="link classes")
    errors: list[SpecError] = []
    block = raw.get("classes") if isinstance(raw, dict) else None
    if not isinstance(block, dict):
        raise SpecError(path, "classes", block if block is not None else MISSING,
                        f"expected a mapping of link classes: {', '.join(LINK_CLASSES)}")
    out = []
    for name in LINK_CLASSES:
        entry = block.get(name)
        if not isinstance(entry, dict):
            errors.append(SpecError(path, f"classes.{name}", entry if entry is not None else MISSING,
                                    "expected a mapping with efficiency and latency_us"))
            continue
        vals = {}
        for key, (rng, factor) in (_FIELDS | {k: v for k, v in _OPTIONAL.items() if k in entry}).items():
            item, where = entry.get(key), f"classes.{name}.{key}"
            if not isinstance(item, dict) or "value" not in item:
                errors.append(SpecError(path, where, item if item is not None else MISSING,
                                        "expected {value, source} or {value, estimate: true, reason}"))
                continue
            if not (item.get("source") or (item.get("estimate") is True and item.get("reason"))):
                errors.append(SpecError(path, where, item.get("value"), "needs a source, or estimate: true and a reason"))
                continue
            try:
                vals[key] = rng.check(item["value"], path, where) * factor
            except SpecError as exc:
                errors.append(exc)
        if all(k in vals for k in _FIELDS):
            out.append((name, LinkClass(name, vals["efficiency"], vals["latency_us"], str(entry.get("description", "")),
                                        vals.get("ll_efficiency"), vals.get("bulk_latency_us"))))
    for name in block:
        if name not in LINK_CLASSES:
            errors.append(SpecError(path, f"classes.{name}", name, f"expected one of {', '.join(LINK_CLASSES)}"))
    raise_collected(errors)
    return tuple(out)
