"""Designs + Metrics -> one pandas DataFrame with the results schema (names in :mod:`.columns`).

Columns (units in every name): study, trial, state, sampler, seed, params_<knob> per searched
knob, the hardware columns, every `dse eval` metric, derived efficiency metrics, fits,
feasible, infeasible_reason, constraint_violation, is_pareto, pareto_rank, datetime_start, datetime_complete.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..evaluation.designs import Designs, constraint_values, infeasible_reasons, metric_table
from ..model.columns import BOUND_COLUMNS, DERIVED_COLUMNS, HARDWARE_COLUMNS, INT_METRICS, TEXT_METRICS
from ..model.evaluate import Metrics
from ..study.space import is_conditional
from .pareto import front_flags


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
        data[f"params_{k.name}"] = _param_column(k, np.asarray(params[k.name]), designs.active.get(k.name))
    for name in HARDWARE_COLUMNS:
        if name in cols:
            kind = bool if name == "buildable" else np.int64 if name in ("chips", "tp", "pp", "draft_chips") else np.float64
            data[name] = np.asarray(cols[name], dtype=kind)
    for name, arr in metrics.columns().items():
        if name in BOUND_COLUMNS:
            data[name] = pd.array(np.where(cols["fits"], arr, None), dtype="string")
        elif name in TEXT_METRICS:
            data[name] = pd.array(arr, dtype="string")
        elif name == "fits":
            data[name] = np.asarray(arr, dtype=bool)
        elif name in INT_METRICS:
            data[name] = np.asarray(arr, dtype=np.int64)
        else:
            data[name] = np.asarray(arr, dtype=np.float64)
    for name in DERIVED_COLUMNS:
        data[name] = cols[name]
    data["feasible"] = feasible
    code, texts = infeasible_reasons(cols, study, cons)
    data["infeasible_reason"] = pd.array(np.where(code > 0, np.asarray(texts, dtype=object)[code], None), dtype="string")
    data["constraint_violation"] = np.maximum(cons, 0).sum(axis=1)
    df = pd.DataFrame(data)
    if pareto:
        add_pareto_flags(df, study)
    else:
        df["is_pareto"] = pd.array([None] * n, dtype="boolean")
        df["pareto_rank"] = pd.array([None] * n, dtype="Int64")
    df["duplicate_of"] = duplicate_of(df, study)
    df["datetime_start"] = _utc(datetime_start, n)
    df["datetime_complete"] = _utc(datetime_complete, n)
    return df


def _param_column(k, v: np.ndarray, active: np.ndarray | None):
    """One params_ column; a conditional knob (dse.study.space) is null where it does not act."""
    if not is_conditional(k):
        if k.kind == "cat":
            return pd.array(v.astype(str), dtype="string")
        return v.astype(bool if k.kind == "bool" else np.int64 if k.kind == "int" else np.float64)
    act = np.ones(v.shape, dtype=bool) if active is None else active
    if k.kind == "float":
        return np.where(act, v, np.nan).astype(np.float64)
    dtype = {"cat": "string", "bool": "boolean", "int": "Int64"}[k.kind]
    vals = [x if a else None for x, a in zip(v.tolist(), act.tolist())]
    if k.kind == "cat":
        vals = [None if x is None else str(x) for x in vals]
    return pd.array(vals, dtype=dtype)


def duplicate_of(df: pd.DataFrame, study) -> pd.array:
    """The trial of the first row (lowest trial) with the same active knobs, where a row repeats
    a design; null for each design's first row. Inactive knobs are null (dse.study.space), so
    knobs that do nothing never make two rows different designs."""
    cols = [f"params_{k.name}" for k in study.searched]
    n = len(df)
    if not n or not cols:
        return pd.array([None] * n, dtype="Int64")
    group = df.groupby(cols, dropna=False, sort=False).ngroup().to_numpy()
    trial = df["trial"].to_numpy(np.int64)
    first = pd.Series(trial).groupby(group).transform("min").to_numpy(np.int64)
    out = pd.array(first, dtype="Int64")
    out[first == trial] = pd.NA
    return out


def add_pareto_flags(df: pd.DataFrame, study) -> pd.DataFrame:
    """pareto_rank (0 = front) among feasible rows, null for infeasible rows; is_pareto marks
    the first row (in row order, which is trial order) of each point of the front, so a repeated
    design or an exact tie is on the front once (its pareto_rank is still 0)."""
    values = df[[o.metric for o in study.objectives]].to_numpy(dtype=np.float64, na_value=np.nan)
    dirs = [o.direction for o in study.objectives]
    feas = df["feasible"].to_numpy(dtype=bool)
    mask, ranks = front_flags(values, dirs, feas)
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
