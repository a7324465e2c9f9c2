"""One field vocabulary for every input: one range check, one number parse, one unknown-key hint.

Devices, models, runtimes, technology constants, study knobs and CLI options all validate
through :class:`Range` (numbers), :func:`as_number` (anything that must be a finite number)
and :func:`unknown_key` (a key that is not allowed, with the closest allowed key).

>>> Range(integer=True, lo=1, hi=16).text()
'expected an integer in [1, 16]'
>>> Range(lo=0, lo_open=True, unit="GB").check(80, "dev.yaml", "memory_capacity_gb")
80.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import MISSING, SpecError, did_you_mean


@dataclass(frozen=True, slots=True)
class Range:
    """Allowed numbers: integer or real, in [lo, hi] (or (lo, hi] when ``lo_open``), with a unit."""

    integer: bool = False
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    unit: str = ""

    def text(self) -> str:
        """'expected an integer in [1, 16]' / 'expected a number in (0, inf) GB'."""
        what = "an integer" if self.integer else "a number"
        left = "(" if (self.lo_open or math.isinf(self.lo)) else "["
        lo = "-inf" if math.isinf(self.lo) else f"{self.lo:g}"
        right = "inf)" if math.isinf(self.hi) else f"{self.hi:g}]"
        return f"expected {what} in {left}{lo}, {right}{' ' + self.unit if self.unit else ''}"

    def contains(self, value: Any) -> bool:
        """True for a finite int/float (not bool) inside the range (and whole when integer)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        try:
            v = float(value)
        except OverflowError:           # an integer beyond any float (10**400): outside every range
            return False
        return (math.isfinite(v) and self.lo <= v <= self.hi and not (self.lo_open and v == self.lo)
                and (not self.integer or v.is_integer()))

    def check(self, value: Any, path: str | None, field: str) -> float | int:
        """The value as int (integer ranges) or float; SpecError naming file, field and range."""
        if not self.contains(value):
            raise SpecError(path, field, value, self.text())
        return int(value) if self.integer else float(value)


def as_number(value: Any, field: str, path: str | None = None, rng: Range | None = None) -> float:
    """A finite number from a number or a numeric string (CLI values), checked against ``rng``."""
    try:
        if isinstance(value, bool):
            raise ValueError
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(path, field, value, (rng or Range()).text()) from None
    if not math.isfinite(v):
        raise SpecError(path, field, value, (rng or Range()).text())
    if rng is not None:
        rng.check(int(v) if rng.integer and v.is_integer() else v, path, field)
    return v


def unknown_key(path: str | None, field: str, key: Any, allowed: Iterable[str], *, what: str = "key",
                value: Any = MISSING) -> SpecError:
    """'unknown key; did you mean 'x'? (allowed: a, b, c)'."""
    allowed = sorted(str(a) for a in allowed)
    close = did_you_mean(str(key), allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return SpecError(path, field, value, f"unknown {what}{hint} (allowed: {', '.join(allowed)})")


def one_of(path: str | None, field: str, value: Any, choices: Iterable[str]) -> SpecError:
    """'expected one of a, b, c (did you mean 'b'?)' for a bad categorical value."""
    choices = [str(c) for c in choices]
    close = did_you_mean(str(value), choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SpecError(path, field, value, f"expected one of {', '.join(choices)}{hint}")
