"""Knob values as a study file writes them, and the collector of one file's errors.

A knob is a fixed value, a list of choices, or ``{low, high, log, step}`` (a range), checked
against its :class:`.spec.KnobDef` (:func:`parse_knob`); :func:`knob_bounds` and
:func:`knob_values` say what a parsed knob can take. :class:`StudyErrors` collects the
SpecErrors of one study file, so that every section parser reports into it and the file's
errors are raised together.
"""

from __future__ import annotations

import math
from typing import Any

from ..catalog.fields import Range, one_of, unknown_key
from ..errors import SpecError
from .spec import Knob, KnobDef


class StudyErrors:
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


def parse_knob(err: StudyErrors, where: str, raw: Any, d: KnobDef, choices_ok: tuple | None, name: str,
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


def knob_bounds(k: Knob | None) -> tuple:
    """(smallest, largest) value a knob can take; (None, None) for a knob that is absent."""
    if k is None:
        return None, None
    if not k.searched:
        return k.fixed, k.fixed
    return (min(k.choices), max(k.choices)) if k.choices else (k.low, k.high)


def knob_values(k: Knob | None, default) -> tuple:
    """Every value an integer knob can take (its choices, or low..high by step); (default,) when absent."""
    if k is None:
        return (default,)
    if not k.searched:
        return (k.fixed,)
    if k.choices:
        return tuple(k.choices)
    return tuple(range(int(k.low), int(k.high) + 1, int(k.step or 1)))
