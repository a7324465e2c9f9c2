"""How a column or a value reads in the report's figures and page: display units from a column's
suffix, axis labels, short knob names, tick text in one unit per axis, and the column that names
a known part. Pure text: no matplotlib, no HTML.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["unit_of", "axis_label", "value_text", "short_knob", "tick_scale", "tick_text",
           "known_part_name_column"]

_UNITS = {"ms": "ms", "us": "µs", "s": "s", "usd": "USD", "kusd": "kUSD", "w": "W", "mm2": "mm²", "cm2": "cm²",
          "tb_s": "TB/s", "gb_s": "GB/s", "gb": "GB", "mb": "MB", "tflops": "TFLOP/s",
          "tops": "TOP/s", "pj": "pJ", "j": "J"}


def _suffix_unit(name: str) -> str | None:
    parts = name.lower().split("_")
    for n in (2, 1):  # two-token suffixes (tb_s, gb_s) before one-token ones
        if len(parts) > n and "_".join(parts[-n:]) in _UNITS:
            return _UNITS["_".join(parts[-n:])]
    return None


def unit_of(column: str) -> str:
    """Display unit from a column's suffix: ``spec_ms_per_token`` -> ``"ms/token"``,
    ``cost_usd`` -> ``"USD"``, ``power_w`` -> ``"W"``, ``die_area_mm2`` -> ``"mm²"``,
    ``mem_bw_tb_s`` -> ``"TB/s"``, ``memory_capacity_gb`` -> ``"GB"``,
    ``tokens_per_s`` -> ``"tokens/s"``, ``speedup`` -> ``"×"``; ``""`` when unitless.

    Examples:
        >>> unit_of("spec_ms_per_token"), unit_of("params_die_area_mm2"), unit_of("alpha")
        ('ms/token', 'mm²', '')
    """
    name = column.removeprefix("params_")
    if name == "speedup" or name.endswith("_speedup"):
        return "×"
    if name.endswith("arithmetic_intensity"):
        return "FLOP/B"
    if "_per_" in name:
        left, right = name.rsplit("_per_", 1)
        num = unit_of(left) or left.rsplit("_", 1)[-1]      # tokens_per_s_per_kusd: tokens/s/kUSD
        return f"{num}/{_UNITS.get(right, right)}"
    return _suffix_unit(name) or ""


def axis_label(column: str) -> str:
    """``"spec_ms_per_token (ms/token)"``; the bare name when unitless."""
    unit = unit_of(column)
    return f"{column} ({unit})" if unit else column


def value_text(v) -> str:
    """A value as shown in titles and cells: floats to three significant digits."""
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def tick_scale(top: float) -> tuple[float, str]:
    """One unit for every tick of an axis, from its largest value: (1e3, 'k') when it reaches 10^4."""
    for above, unit, suffix in ((1e10, 1e9, "G"), (1e7, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(top) >= above:
            return unit, suffix
    return 1.0, ""


def tick_text(v: float, top: float) -> str:
    """Tick text in the axis's one unit: on an axis reaching 60k, 2000 -> '2k' and 60000 -> '60k'."""
    unit, suffix = tick_scale(top)
    return f"{v / unit:g}{suffix}"


def short_knob(name: str) -> str:
    """target_chip_peak_tflops -> peak_tflops, draft_chip_memory -> draft.memory."""
    return name.removeprefix("params_").replace("target_chip_", "").replace("draft_chip_", "draft.")


def known_part_name_column(known: pd.DataFrame) -> str | None:
    """The column of a known-parts table that names each part; None: its index does."""
    for c in ("name", "label", "part", "design", "device"):
        if c in known.columns:
            return c
    return None
