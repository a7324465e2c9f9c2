"""Designs + Metrics -> one pandas DataFrame: the results schema, declared once.

Columns (units in every name): study, trial, state, sampler, seed, params_<knob> per searched
knob, the hardware columns, every `dse eval` metric, derived efficiency metrics, fits,
feasible, constraint_violation, is_pareto, pareto_rank, datetime_start, datetime_complete.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .designs import Designs
from .model.evaluate import METRIC_COLUMNS, Metrics
from .pareto import pareto_mask, pareto_ranks

SCHEMA_VERSION = 2

#: hardware columns (display units); cost and power are whole-system (target chips + draft chip)
HARDWARE_COLUMNS = ("buildable", "chips", "mem_bw_tb_s", "memory_capacity_gb", "peak_tflops", "die_area_mm2", "chip_cost_usd",
                    "chip_power_w", "draft_chips", "draft_mem_bw_tb_s", "draft_memory_capacity_gb",
                    "draft_peak_tflops", "draft_die_area_mm2", "draft_chip_cost_usd", "draft_chip_power_w",
                    "cost_usd", "power_w", "total_die_area_mm2", "chip_price_usd", "price_usd")
#: derived per-resource metrics: what the speculative gain costs in dollars, watts and silicon
DERIVED_COLUMNS = ("tokens_per_s_per_kusd", "tokens_per_s_per_w", "tokens_per_s_per_cm2", "speedup_per_kusd")
_BOUNDS = {"baseline_bound", "verify_bound", "draft_bound"}
NUMERIC_METRICS = tuple(n for n, _, _ in METRIC_COLUMNS if n not in _BOUNDS and n != "fits") \
    + HARDWARE_COLUMNS[1:] + DERIVED_COLUMNS
#: names of the constraint columns set on every Optuna trial, in constraint_values order
BASE_CONSTRAINTS = ("memory_fit_gb", "buildable")


def derived_columns(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """tokens/s per k$, per W and per cm^2 of silicon, and speedup per k$ (NaN where undefined)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tps = cols["tokens_per_s"]
        return {"tokens_per_s_per_kusd": tps / (cols["cost_usd"] / 1e3),
                "tokens_per_s_per_w": tps / cols["power_w"],
                "tokens_per_s_per_cm2": tps / (cols["total_die_area_mm2"] / 100.0),
                "speedup_per_kusd": cols["speedup"] / (cols["cost_usd"] / 1e3)}


def metric_table(designs: Designs, metrics: Metrics) -> dict[str, np.ndarray]:
    """All metric and hardware columns by name (numpy, display units)."""
    cols = dict(designs.hardware)
    cols.update(metrics.columns())
    cols.update(derived_columns(cols))
    return cols


def constraint_values(cols: dict[str, np.ndarray], study) -> np.ndarray:
    """Optuna-style constraint values, (n, 1 + len(constraints)); <= 0 is feasible.

    Column 0 is the memory fit: shortfall in GB when short, else minus the slack in GB.
    Column 1 is buildability (memory stacks fit the die edges, the stack height exists for
    that memory, the group has bandwidth and, across chips, a link; a design that fits must
    have a finite latency): +1 when not, -1 when it is. Then one column per study constraint (value - max, or min - value); a metric that is
    undefined (NaN, e.g. a latency of a design that does not fit) counts as violated (+1).
    """
    fit = np.where(cols["memory_shortfall_gb"] > 0, cols["memory_shortfall_gb"],
                   cols["memory_required_gb"] - cols["memory_capacity_gb"])
    finite = ~cols["fits"] | np.isfinite(cols["spec_ms_per_token"])
    out = [fit, np.where(cols["buildable"] & finite, -1.0, 1.0)]
    for c in study.constraints:
        v = np.asarray(cols[c.metric], dtype=np.float64)
        viol = np.full(v.shape, -np.inf)
        if c.max is not None:
            viol = np.maximum(viol, v - c.max)
        if c.min is not None:
            viol = np.maximum(viol, c.min - v)
        out.append(np.where(np.isnan(v), 1.0, viol))
    return np.stack(out, axis=1)


def objective_matrix(cols: dict[str, np.ndarray], study) -> np.ndarray:
    return np.stack([np.asarray(cols[o.metric], dtype=np.float64) for o in study.objectives], axis=1)


def results_frame(study, designs: Designs, metrics: Metrics, params: dict[str, np.ndarray], *,
                  trial: np.ndarray, sampler: str, seed: int | None, state: str = "COMPLETE",
                  datetime_start=None, datetime_complete=None, pareto: bool = True) -> pd.DataFrame:
    """One row per design with the documented schema; Pareto flags among feasible rows."""
    n = designs.batch.n
    cols = metric_table(designs, metrics)
    cons = constraint_values(cols, study)
    feasible = np.all(cons <= 0, axis=1) & cols["fits"]
    data: dict[str, object] = {
        "study": pd.array([study.name] * n, dtype="string"),
        "trial": np.asarray(trial, dtype=np.int64),
        "state": pd.array([state] * n, dtype="string"),
        "sampler": pd.array([sampler] * n, dtype="string"),
        "seed": pd.array([seed] * n, dtype="Int64"),
    }
    for k in study.searched:
        v = np.asarray(params[k.name])
        if k.kind == "cat":
            data[f"params_{k.name}"] = pd.array(v.astype(str), dtype="string")
        elif k.kind == "bool":
            data[f"params_{k.name}"] = v.astype(bool)
        elif k.kind == "int":
            data[f"params_{k.name}"] = v.astype(np.int64)
        else:
            data[f"params_{k.name}"] = v.astype(np.float64)
    for name in HARDWARE_COLUMNS:
        if name in cols:
            kind = bool if name == "buildable" else np.int64 if name in ("chips", "draft_chips") else np.float64
            data[name] = np.asarray(cols[name], dtype=kind)
    for name, arr in metrics.columns().items():
        if name in _BOUNDS:
            data[name] = pd.array(np.where(cols["fits"], arr, None), dtype="string")
        elif name == "fits":
            data[name] = np.asarray(arr, dtype=bool)
        elif name == "k":
            data[name] = np.asarray(arr, dtype=np.int64)
        else:
            data[name] = np.asarray(arr, dtype=np.float64)
    for name in DERIVED_COLUMNS:
        data[name] = cols[name]
    data["feasible"] = feasible
    data["constraint_violation"] = np.maximum(cons, 0).sum(axis=1)
    df = pd.DataFrame(data)
    if pareto:
        add_pareto_flags(df, study)
    else:
        df["is_pareto"] = pd.array([None] * n, dtype="boolean")
        df["pareto_rank"] = pd.array([None] * n, dtype="Int64")
    df["datetime_start"] = _utc(datetime_start, n)
    df["datetime_complete"] = _utc(datetime_complete, n)
    return df


def add_pareto_flags(df: pd.DataFrame, study) -> pd.DataFrame:
    """is_pareto and pareto_rank (0 = front) among feasible rows; null for infeasible rows."""
    values = df[[o.metric for o in study.objectives]].to_numpy(dtype=np.float64, na_value=np.nan)
    dirs = [o.direction for o in study.objectives]
    feas = df["feasible"].to_numpy(dtype=bool)
    mask = pareto_mask(values, dirs, feas)
    ranks = pareto_ranks(values, dirs, feas)
    usable = ranks >= 0
    df["is_pareto"] = pd.array(np.where(usable, mask, None), dtype="boolean")
    df["pareto_rank"] = pd.array(np.where(usable, ranks, None), dtype="Int64")
    return df


def _utc(values, n: int):
    """Timestamps as datetime64[us, UTC] (now, when not given)."""
    if values is None:   # one timestamp for the whole chunk: build it as an array, not a list
        now = pd.Timestamp.now(tz="UTC").tz_localize(None).as_unit("us").to_datetime64()
        return pd.Series(np.full(n, now)).dt.tz_localize("UTC").array
    return pd.to_datetime(pd.Series(list(values), dtype=object), utc=True).astype("datetime64[us, UTC]").array
