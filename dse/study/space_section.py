"""The ``space:`` section of a study: the target_chip and draft_chip knobs (technology knobs, or
``device:`` names and device files) and ``k``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..catalog.database import Database
from ..catalog.fields import Range
from ..catalog.links import SCALE_UP_CLASSES
from ..errors import MISSING, SpecError
from ..workload.spec import K_LIMIT
from .knob_values import StudyErrors, parse_knob
from .spec import CHIP_KNOBS, DEVICE_OWNED_KNOBS, DRAFT_CHIP_KNOBS, K_KNOB, Knob, KnobDef

TECH_KEYS = ("process_node", "peak_tflops", "memory", "memory_stacks", "stack_height", "sram_mb")
#: the software stack of a synthesised chip (MODEL.md section 5: fixed costs belong to a runtime)
RUNTIME_KNOBS = ("runtime", "kernel_launch_us", "step_overhead_us", "spec_overhead_us")


def parse_space(space: Any, wl: dict, db: Database, tech, err: StudyErrors) -> list[Knob]:
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


def _device_files(raw: Any, where: str, db: Database, err: StudyErrors) -> tuple[Any, tuple[str, ...]]:
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


def _chip_section(section: str, table: dict[str, KnobDef], sec: Any, choices: dict, err: StudyErrors) -> list[Knob]:
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
