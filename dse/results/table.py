"""A sweep's rows as an Arrow table, built from numpy without pandas (``dse sweep`` imports no
pandas): the rows and column types of :func:`dse.results.frame.results_frame`, whose DataFrame
path stays the one behind ``dse run``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from ..evaluation import Designs, constraint_values, metric_table
from ..model.evaluate import METRIC_COLUMNS, Metrics
from ..model.roofline import BOUND_NAMES
from ..study.space import is_conditional
from .columns import BOUND_COLUMNS, DERIVED_COLUMNS, HARDWARE_COLUMNS, INT_METRICS, TEXT_METRICS
from .store import META_KEY


def results_table(study, designs: Designs, metrics: Metrics, params: dict[str, np.ndarray],
                  schema: pa.Schema | None, *, trial: np.ndarray, sampler: str, seed: int | None,
                  codes: dict | None = None, now: np.datetime64 | None = None,
                  metadata: dict | None = None) -> tuple[pa.Table, np.ndarray]:
    """The rows of :func:`results_frame` as an Arrow table of ``schema`` (built from numpy, no
    pandas, no Python objects per row), for a sweep whose rows are distinct designs: duplicate_of,
    is_pareto and pareto_rank null (a sweep's flags live in ``_pareto.parquet``, dse.results.store),
    state COMPLETE, one timestamp ``now`` (UTC) for every row. ``codes`` maps a categorical knob to
    (indices, values) so its strings are gathered, not converted one by one. ``schema`` None: the
    schema of these arrays, with the ``pandas`` metadata results_frame's columns would carry
    (:func:`pandas_metadata`) and the ``dse`` ``metadata``. Returns (table, feasible)."""
    n = designs.batch.n
    cols = metric_table(designs, metrics)
    cons = constraint_values(cols, study)
    fits = np.asarray(cols["fits"], dtype=bool)
    feasible = np.all(cons <= 0, axis=1) & fits
    now = np.datetime64(datetime.now(UTC).replace(tzinfo=None), "us") if now is None else now
    data: dict[str, pa.Array] = {
        "study": pa.repeat(pa.scalar(study.name, pa.string()), n),
        "trial": pa.array(np.asarray(trial, dtype=np.int64)),
        "state": pa.repeat(pa.scalar("COMPLETE", pa.string()), n),
        "sampler": pa.repeat(pa.scalar(sampler, pa.string()), n),
        "seed": pa.repeat(pa.scalar(seed, pa.int64()), n),
    }
    codes = codes or {}
    for k in study.searched:
        v = np.asarray(params[k.name])
        act = designs.active.get(k.name) if is_conditional(k) else None
        mask = None if act is None or act.all() else ~act
        if k.kind == "cat":
            if k.name in codes:
                idx, values = codes[k.name]
                arr = pa.array(np.asarray(values).astype(str)).take(pa.array(np.asarray(idx, dtype=np.int64),
                                                                             mask=mask))
            else:
                arr = pa.array(v.astype(str), mask=mask, type=pa.string())
        elif k.kind == "float":
            arr = pa.array(v.astype(np.float64) if mask is None else np.where(act, v, np.nan).astype(np.float64))
        else:
            typ = pa.bool_() if k.kind == "bool" else pa.int64()
            arr = pa.array(v.astype(bool if k.kind == "bool" else np.int64), mask=mask, type=typ)
        data[f"params_{k.name}"] = arr
    for name in HARDWARE_COLUMNS:
        if name in cols:
            kind = bool if name == "buildable" else np.int64 if name in ("chips", "draft_chips") else np.float64
            data[name] = pa.array(np.asarray(cols[name], dtype=kind))
    bounds = pa.array(BOUND_NAMES.tolist(), type=pa.string())
    for name, attr, _scale in METRIC_COLUMNS:
        if name in BOUND_COLUMNS:      # codes into BOUND_NAMES; null where the design does not fit
            data[name] = bounds.take(pa.array(np.asarray(getattr(metrics, attr), dtype=np.int64), mask=~fits))
        elif name in TEXT_METRICS:
            data[name] = pa.array(np.asarray(cols[name]), type=pa.string())
        elif name == "fits":
            data[name] = pa.array(fits)
        elif name in INT_METRICS:
            data[name] = pa.array(np.asarray(cols[name], dtype=np.int64))
        else:
            data[name] = pa.array(np.asarray(cols[name], dtype=np.float64))
    for name in DERIVED_COLUMNS:
        data[name] = pa.array(np.asarray(cols[name], dtype=np.float64))
    data["feasible"] = pa.array(feasible)
    data["constraint_violation"] = pa.array(np.maximum(cons, 0).sum(axis=1))
    data["is_pareto"] = pa.nulls(n, pa.bool_())
    data["pareto_rank"] = pa.nulls(n, pa.int64())
    data["duplicate_of"] = pa.nulls(n, pa.int64())
    stamp = pa.scalar(int(np.datetime64(now, "us").astype(np.int64)), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    data["datetime_start"] = data["datetime_complete"] = pa.repeat(stamp, n)
    if schema is None:
        nullable = {"seed", "is_pareto", "pareto_rank", "duplicate_of"} | {
            f"params_{k.name}" for k in study.searched if is_conditional(k) and k.kind in ("int", "bool")}
        schema = pa.schema([pa.field(name, a.type) for name, a in data.items()])
        schema = schema.with_metadata({b"pandas": json.dumps(pandas_metadata(schema, nullable)).encode(),
                                       META_KEY: json.dumps(metadata or {}, default=str).encode()})
    if list(data) != schema.names:
        raise AssertionError(f"results_table columns differ from the schema: {sorted(set(data) ^ set(schema.names))}")
    return pa.Table.from_arrays(list(data.values()), schema=schema), feasible


def pandas_metadata(schema: pa.Schema, nullable: set[str]) -> dict:
    """The ``pandas`` schema metadata pyarrow writes for results_frame's columns (string dtype for
    text, Int64 / boolean for the ``nullable`` columns, UTC timestamps), without importing pandas:
    pandas, polars and DuckDB users get the same dtypes from a sweep's parts as from a search's file."""
    cols = []
    for f in schema:
        t, meta = f.type, None
        if pa.types.is_string(t):
            pandas_type, numpy_type = "object", "string"
        elif pa.types.is_boolean(t):
            pandas_type, numpy_type = "bool", "boolean" if f.name in nullable else "bool"
        elif pa.types.is_integer(t):
            pandas_type, numpy_type = "int64", "Int64" if f.name in nullable else "int64"
        elif pa.types.is_timestamp(t):
            pandas_type, numpy_type, meta = "datetimetz", f"datetime64[{t.unit}]", {"timezone": t.tz}
        else:
            pandas_type = numpy_type = str(t.to_pandas_dtype().__name__)
        cols.append({"name": f.name, "field_name": f.name, "pandas_type": pandas_type, "numpy_type": numpy_type,
                     "metadata": meta})
    return {"index_columns": [], "column_indexes": [], "columns": cols, "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": _pandas_version()}


def _pandas_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("pandas")
    except PackageNotFoundError:
        return "0"
