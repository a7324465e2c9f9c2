"""The ``objectives:`` and ``constraints:`` sections of a study: the metrics it optimises and bounds,
refused where a metric is null for every design the study can hold.
"""

from __future__ import annotations

from typing import Any

from ..catalog.database import Database
from ..catalog.fields import Range, unknown_key
from ..errors import MISSING, SpecError
from ..model.columns import HARDWARE_COLUMNS, NUMERIC_METRICS
from .knob_values import StudyErrors
from .spec import Constraint, Knob, Objective

#: objectives a study may have (the search thins its archive in seconds up to here, dse.search.thinning;
#: beyond, nearly every design is non-dominated and a front says little)
MAX_OBJECTIVES = 6


def parse_objectives(raw: Any, err: StudyErrors) -> list[Objective]:
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


def refuse_null_metrics(objectives: list[Objective], constraints: list[Constraint], knobs: list[Knob], db: Database,
                  err: StudyErrors) -> None:
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


def parse_constraints(raw: Any, err: StudyErrors) -> list[Constraint]:
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
