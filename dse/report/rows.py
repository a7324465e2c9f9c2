"""A front row's knobs and name: the searched knobs' values (to rebuild its design) and a label
naming it by its key knobs, for the report's figures (:mod:`.context`, :mod:`.serving_figure`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import DseError
from ..study import StudySpec

__all__ = ["design_label", "draft_chip_label", "row_params"]


def design_label(row: pd.Series) -> str:
    """A design by its key knobs: 'h200 x2', or '1122 TFLOP/s, 7x hbm4 (8-high), 1 chip'."""
    def get(name):
        v = row.get(f"params_target_chip_{name}")
        return None if v is None or pd.isna(v) else v       # a knob that does not act: NaN or <NA>
    chips = int(row["chips"]) if "chips" in row and pd.notna(row["chips"]) else get("chips")
    if get("device") is not None:
        text = f"{get('device')} x{chips}"
    else:
        bits = []
        if pd.notna(row.get("peak_tflops", np.nan)):
            bits.append(f"{float(row['peak_tflops']):.4g} TFLOP/s")
        if get("memory") is not None:
            stacks = f"{int(get('memory_stacks'))}x " if get("memory_stacks") is not None else ""
            height = f" ({int(get('stack_height'))}-high)" if get("stack_height") is not None else ""
            bits.append(f"{stacks}{get('memory')}{height}")
        if chips is not None:
            bits.append(f"{int(chips)} chip{'s' if int(chips) != 1 else ''}")
        text = ", ".join(bits) or f"trial {row.get('trial', row.name)}"
    enabled = row.get("params_draft_chip_enabled")
    if enabled is True or (isinstance(enabled, (bool, np.bool_)) and bool(enabled)):
        text += " + " + draft_chip_label(row)
    return text


def draft_chip_label(row: pd.Series) -> str:
    """The draft chip by what it is: 'draft chip l4', or 'draft chip 128 TFLOP/s, 2x lpddr5x, 271 MB SRAM'."""
    def get(name):
        v = row.get(f"params_draft_chip_{name}")
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else v
    if get("device") is not None:
        return f"draft chip {get('device')}" + (f" x{int(get('chips'))}" if get("chips") not in (None, 1) else "")
    bits = []
    tflops = get("peak_tflops") if get("peak_tflops") is not None else row.get("draft_peak_tflops")
    if tflops is not None and pd.notna(tflops):
        bits.append(f"{float(tflops):.3g} TFLOP/s")
    if get("memory") is not None:
        stacks = f"{int(get('memory_stacks'))}x " if get("memory_stacks") is not None else ""
        bits.append(f"{stacks}{get('memory')}")
    if get("sram_mb") is not None and float(get("sram_mb")) > 0:
        bits.append(f"{float(get('sram_mb')):.3g} MB SRAM")
    if get("chips") is not None and int(get("chips")) != 1:
        bits.append(f"{int(get('chips'))} chips")
    return "draft chip " + ", ".join(bits) if bits else "draft chip"


def row_params(study: StudySpec, rows: pd.DataFrame, repeat: int = 1, skip: str = "") -> dict[str, np.ndarray]:
    """The searched knobs of ``rows`` (from params_* columns), each repeated ``repeat`` times."""
    out = {}
    for k in study.searched:
        if k.name == skip:
            continue
        col = f"params_{k.name}"
        if col not in rows.columns:
            raise DseError(f"the front lacks column {col!r}; pass rows of the results")
        vals = rows[col].to_numpy(dtype=object if k.kind == "cat" else None)
        out[k.name] = np.repeat(vals, repeat)
    return out
