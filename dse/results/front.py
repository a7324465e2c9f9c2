"""The front of a results file or dataset without pandas: objectives resolved against the
columns, the front's rows best first, and the columns its table shows.

``dse pareto`` prints from here (a sweep's front is read from its ``_front.parquet``, so the
command costs the front, not the dataset); dse.results.analysis builds its DataFrames on the same
functions, so both give the same rows in the same order.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import DseError
from . import pareto
from .arrow import num_array, to_numpy, usable_rows
from .dataset import open_results


def epsilon_of(epsilon, objs) -> np.ndarray:
    """One relative epsilon per objective: a number (every objective), a sequence in objective order,
    or ``{metric: epsilon}`` (metrics not named get 0)."""
    if isinstance(epsilon, Mapping):
        unknown = set(epsilon) - {m for m, _ in objs}
        if unknown:
            raise DseError(f"epsilon names {', '.join(sorted(unknown))}, which are not objectives "
                           f"({', '.join(m for m, _ in objs)})")
        epsilon = [epsilon.get(m, 0.0) for m, _ in objs]
    try:
        return pareto.epsilon_vector(epsilon, len(objs))
    except (ValueError, TypeError) as e:
        raise DseError(str(e)) from None


#: the speculative accounting a front table shows after the objectives, when present
SPEC_COLUMNS = ("alpha", "tau", "k", "draft_cost_ratio", "speedup")
#: what a front table may show besides the objectives (names or fnmatch patterns)
FRONT_TABLE_COLUMNS = (*SPEC_COLUMNS, "tree_shape", "trial", "params_*")


def stored_objectives(meta: Mapping | None) -> dict[str, str]:
    """metric -> direction of the study objectives in a results file's ``dse`` metadata."""
    meta = meta or {}
    objs = meta.get("objectives")
    if objs is None and isinstance(meta.get("study"), Mapping):
        objs = meta["study"].get("objectives")
    return {o["metric"]: o.get("direction", "minimize") for o in objs or [] if isinstance(o, Mapping) and "metric" in o}


def numeric_columns(schema: pa.Schema) -> list[str]:
    """The integer and floating-point columns (booleans excluded)."""
    return [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]


def resolve_objectives(objectives, meta: Mapping | None, numeric: Sequence[str],
                       columns: Sequence[str]) -> list[tuple[str, str]]:
    """``[(column, "minimize"|"maximize"), ...]`` from ``objectives``: None (the study's, from
    ``meta``); strings ``"metric:min"`` / ``"metric:max"`` (a bare ``"metric"`` takes the study's
    direction; one string may list several, comma-separated); ``(metric, direction)`` pairs; or
    ``{"metric", "direction"}`` dicts. Each metric must be one of ``numeric``.

    Raises:
        DseError: no objectives given or stored, a bad direction, or a metric that is not numeric
            (the message lists the numeric columns).
    """
    stored = stored_objectives(meta)
    if objectives is None:
        if not stored:
            raise DseError("no objectives given and the results carry none in attrs['dse']; "
                           "pass e.g. ['spec_ms_per_token:min', 'cost_usd:min']")
        objectives = list(stored.items())
    elif isinstance(objectives, str):
        objectives = [s for s in objectives.split(",") if s.strip()]
    out: list[tuple[str, str]] = []
    for o in objectives:
        if isinstance(o, Mapping):
            metric, direction = o.get("metric"), o.get("direction", stored.get(o.get("metric")))
        elif isinstance(o, str):
            metric, _, direction = o.strip().rpartition(":")
            if not metric:
                metric, direction = direction, stored.get(direction)
        else:
            metric, direction = o
        if direction is None:
            raise DseError(f"objective {metric!r}: give a direction, e.g. '{metric}:min' "
                           f"or '{metric}:max'")
        key = str(direction).strip().lower()
        if key not in pareto.DIRECTIONS:
            raise DseError(f"objective {metric!r}: direction {direction!r}: expected one of "
                           f"min, max, minimize, maximize")
        if metric not in numeric:
            what = "is not numeric" if metric in columns else "is not a column"
            raise DseError(f"objective {metric!r} {what} of the results; numeric columns: "
                           f"{', '.join(numeric) or '(none)'}")
        if metric in (m for m, _ in out):
            raise DseError(f"objective {metric!r} is given twice; give each metric once")
        out.append((metric, pareto.DIRECTIONS[key]))
    if not out:
        raise DseError("no objectives given")
    return out


def table_columns(columns: Sequence[str], objs, tree: bool) -> list[str]:
    """What a front table shows, in order: the objectives, the :data:`SPEC_COLUMNS` present,
    ``tree_shape`` when ``tree`` (some shown design has a tree), ``trial``, every ``params_*``."""
    out = [m for m, _ in objs]
    out += [c for c in SPEC_COLUMNS if c in columns and c not in out]
    if tree and "tree_shape" in columns:
        out.append("tree_shape")          # nodes per depth of each design's best tree
    out += [c for c in ("trial",) if c in columns and c not in out]
    out += [c for c in columns if c.startswith("params_") and c not in out]
    return out


@dataclass
class DatasetFront:
    """The first ``top`` points of a dataset's front, best first (:func:`dataset_front`)."""
    table: pa.Table          # the table_columns of those rows
    rows: np.ndarray         # their row numbers in the dataset
    points: int              # points on the whole front (one row each, the lowest trial)
    n_rows: int              # rows in the dataset
    n_designs: int           # distinct designs in the dataset
    objectives: list[tuple[str, str]]
    n_feasible: int = 0      # distinct feasible designs in the dataset
    meta: dict | None = None  # the dataset's dse metadata
    shown: int = 0           # representatives left at ``epsilon`` (before ``top``)
    epsilon: tuple = ()      # the relative epsilon per objective (all 0: the exact front)


def dataset_front(path, objectives=None, top: int | None = None, epsilon=0.0) -> DatasetFront:
    """The front of a results file or dataset as dse.results.analysis.front_table(front_of(path)) gives
    it, without pandas: the front's rows (Dataset.front_table: a sweep's ``_front.parquet``, else
    the parts' objective columns part by part), one per point (the lowest trial), best first
    (dse.results.pareto.front_order), near-ties within ``epsilon`` (relative, one number or one per
    objective) collapsed into the first (dse.results.pareto.epsilon_thin), the first ``top``."""
    ds = open_results(path)
    names = ds.schema.names
    objs = resolve_objectives(objectives, ds.meta, numeric_columns(ds.schema), names)
    key = [m for m, _ in objs] + [c for c in ("feasible", "fits", "trial") if c in names]
    wanted = key + [c for pat in FRONT_TABLE_COLUMNS for c in fnmatch.filter(names, pat)]
    rows, table, n_rows, n_designs = ds.front_table(objs, list(dict.fromkeys(wanted)))
    vals, ok = usable_rows(table, objs)
    trial = to_numpy(table["trial"]) if "trial" in names else None
    order = pareto.front_order(vals, [d for _, d in objs], ok, order=trial)
    eps = epsilon_of(epsilon, objs)
    kept = order[pareto.epsilon_thin(vals[order], [d for _, d in objs], eps)] if eps.any() else order
    shown = kept[:top]
    table = table.take(num_array(shown, pa.int64()))
    tree = "tree_shape" in names and any(table["tree_shape"].to_pylist())
    return DatasetFront(table.select(table_columns(names, objs, tree)), rows[shown], len(order),
                        n_rows, n_designs, objs, n_feasible=ds.feasible_designs(), meta=ds.meta, shown=len(kept),
                        epsilon=tuple(eps.tolist()))
