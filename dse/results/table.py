"""A sweep's rows as an Arrow table, built from numpy without pandas (``dse sweep`` imports no
pandas): the rows and column types of :func:`dse.results.frame.results_frame`, whose DataFrame
path stays the one behind ``dse run``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from ..evaluation.designs import Designs, constraint_values, infeasible_reasons, metric_table
from ..model.columns import BOUND_COLUMNS, DERIVED_COLUMNS, HARDWARE_COLUMNS, INT_METRICS, TEXT_METRICS
from ..model.evaluate import METRIC_COLUMNS, Metrics
from ..model.roofline import BOUND_NAMES
from ..study.space import is_conditional
from .arrow import bool_array, factorize, num_array, repeat_string, string_array
from .store import META_KEY


def results_table(study, designs: Designs, metrics: Metrics, params: dict[str, np.ndarray],
                  schema: pa.Schema | None, *, trial: np.ndarray, sampler: str, seed: int | None,
                  codes: dict | None = None, now: np.datetime64 | None = None,
                  metadata: dict | None = None) -> tuple[pa.Table, np.ndarray, dict]:
    """The rows of :func:`results_frame` as an Arrow table of ``schema`` (built from numpy, no
    pandas, no Python objects per row), for a sweep whose rows are distinct designs: duplicate_of,
    is_pareto and pareto_rank null (a sweep's flags live in ``_pareto.parquet``, dse.results.side_files),
    state COMPLETE, one timestamp ``now`` (UTC) for every row. ``codes`` maps a categorical knob to
    (indices, values) so its strings are gathered, not converted one by one. ``schema`` None: the
    schema of these arrays, with the ``pandas`` metadata results_frame's columns would carry
    (:func:`pandas_metadata`) and the ``dse`` ``metadata``."""
    n = designs.batch.n
    cols = metric_table(designs, metrics, bounds=False)     # the bound columns come from their codes
    cons = constraint_values(cols, study)
    fits = np.asarray(cols["fits"], dtype=bool)
    feasible = np.all(cons <= 0, axis=1) & fits
    now = np.datetime64(datetime.now(UTC).replace(tzinfo=None), "us") if now is None else now
    data: dict[str, pa.Array] = {
        "study": repeat_string(study.name, n),
        "trial": num_array(trial, pa.int64()),
        "state": repeat_string("COMPLETE", n),
        "sampler": repeat_string(sampler, n),
        "seed": pa.nulls(n, pa.int64()) if seed is None else num_array(np.full(n, seed), pa.int64()),
    }
    codes = codes or {}
    for k in study.searched:
        v = np.asarray(params[k.name])
        act = designs.active.get(k.name) if is_conditional(k) else None
        valid = None if act is None or act.all() else np.asarray(act, dtype=bool)
        if k.kind == "cat":
            idx, values = codes[k.name] if k.name in codes else factorize(v)
            arr = string_array(values).take(num_array(idx, pa.int64(), valid))
        elif k.kind == "float":
            arr = num_array(v if valid is None else np.where(valid, v, np.nan), pa.float64())
        elif k.kind == "bool":
            arr = bool_array(v, valid)
        else:
            arr = num_array(v, pa.int64(), valid)
        data[f"params_{k.name}"] = arr
    for name in HARDWARE_COLUMNS:
        if name in cols:
            data[name] = (bool_array(cols[name]) if name == "buildable" else
                          num_array(cols[name], pa.int64() if name in ("chips", "tp", "pp", "draft_chips") else pa.float64()))
    bounds = string_array(BOUND_NAMES)
    for name, attr, _scale in METRIC_COLUMNS:
        if name in BOUND_COLUMNS:      # codes into BOUND_NAMES; null where the design does not fit
            data[name] = bounds.take(num_array(getattr(metrics, attr), pa.int64(), fits))
        elif name in TEXT_METRICS:
            idx, values = factorize(np.asarray(cols[name]))
            data[name] = string_array(values).take(num_array(idx, pa.int64()))
        elif name == "fits":
            data[name] = bool_array(fits)
        elif name in INT_METRICS:
            data[name] = num_array(cols[name], pa.int64())
        else:
            data[name] = num_array(cols[name], pa.float64())
    for name in DERIVED_COLUMNS:
        data[name] = num_array(cols[name], pa.float64())
    data["feasible"] = bool_array(feasible)
    code, texts = infeasible_reasons(cols, study, cons)
    data["infeasible_reason"] = string_array(texts).take(num_array(code, pa.int64(), code > 0))
    data["constraint_violation"] = num_array(np.maximum(cons, 0).sum(axis=1), pa.float64())
    data["is_pareto"] = pa.nulls(n, pa.bool_())
    data["pareto_rank"] = pa.nulls(n, pa.int64())
    data["duplicate_of"] = pa.nulls(n, pa.int64())
    stamp = np.full(n, np.datetime64(now, "us").astype(np.int64))
    data["datetime_start"] = data["datetime_complete"] = num_array(stamp, pa.timestamp("us", tz="UTC"))
    if schema is None:
        nullable = {"seed", "is_pareto", "pareto_rank", "duplicate_of"} | {
            f"params_{k.name}" for k in study.searched if is_conditional(k) and k.kind in ("int", "bool")}
        schema = pa.schema([pa.field(name, a.type) for name, a in data.items()])
        schema = schema.with_metadata({b"pandas": json.dumps(pandas_metadata(schema, nullable)).encode(),
                                       META_KEY: json.dumps(metadata or {}, default=str).encode()})
    if list(data) != schema.names:
        raise AssertionError(f"results_table columns differ from the schema: {sorted(set(data) ^ set(schema.names))}")
    return pa.Table.from_arrays(list(data.values()), schema=schema)


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
