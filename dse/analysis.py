"""Load dse results and analyse their Pareto fronts with pandas.

Results are what ``dse run`` / ``dse sweep`` write: one Parquet file or a directory of
``part-*.parquet`` files, one row per design, with the study (objectives, constraints,
workload) in the schema metadata key ``b"dse"``. :func:`load_results` puts that metadata in
``df.attrs["dse"]``, so the other functions can default to the study's own objectives.

Feasibility: a row counts when column ``feasible`` is True; without that column, when ``fits``
is True; without either, every row counts. Rows with a NaN objective never count.

Example (a results directory from ``dse run``)::

    import dse.analysis as da
    df = da.load_results("results/h200_eagle")
    best = da.front(df, where="power_w <= 700")              # study objectives, sorted
    cheap = da.front(df, ["spec_ms_per_token:min", "cost_usd:min"])
    da.hypervolume(df)                                       # default reference
    hist = da.hypervolume_history(df)                        # one row per checkpoint
    da.compare_fronts(df[df.params_draft_chip_enabled], df[~df.params_draft_chip_enabled])
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from dse import pareto
from dse.errors import DseError

__all__ = ["load_results", "objectives_of", "feasible_mask", "front", "ranks", "hypervolume",
           "hypervolume_reference", "compare_fronts", "hypervolume_history"]

SCHEMA_VERSION = 2
_META_KEY = b"dse"
_SHORT = {"min": "minimize", "minimize": "minimize", "minimise": "minimize",
          "max": "maximize", "maximize": "maximize", "maximise": "maximize"}


# --------------------------------------------------------------------------- loading

def _part_files(root: Path) -> list[Path]:
    """``*.parquet`` files under ``root``, skipping files and folders named ``_*`` or ``.*``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        found += [Path(dirpath, f) for f in sorted(filenames)
                  if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return found


def _read_meta(path: Path) -> tuple[pa.Schema, dict]:
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise DseError(f"{path}: not a readable Parquet file ({e})") from e
    raw = (schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise DseError(f"{path}: Parquet file without the b'dse' metadata key; not dse results "
                       f"(write them with `dse run` or `dse sweep`)")
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise DseError(f"{path}: the b'dse' metadata is not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise DseError(f"{path}: the b'dse' metadata is not a JSON object")
    version = meta.get("schema_version")
    try:
        newer = version is not None and int(version) > SCHEMA_VERSION
    except (TypeError, ValueError):
        newer = True
    if newer:
        raise DseError(f"{path}: results schema_version = {version!r}: this dse reads "
                       f"schema_version <= {SCHEMA_VERSION}; upgrade dse")
    if version is not None and int(version) < 2:
        warnings.warn(f"{path}: results schema_version {version}: written before issue 9 (cost_usd of known "
                      "parts was their street price, DRAM capacity decimal, KV cache at the weight dtype); "
                      "re-run the study to compare with current results", stacklevel=3)
    return schema, meta


def _study_name(meta: dict):
    study = meta.get("study")
    return study.get("name") if isinstance(study, dict) else None


def _restore_nullable(df: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """Without pandas metadata, null bools load as object and null ints as float: fix both."""
    for field in schema:
        if field.name not in df.columns:
            continue
        col = df[field.name]
        if pa.types.is_boolean(field.type) and col.dtype == object:
            df[field.name] = col.astype("boolean")
        elif pa.types.is_integer(field.type) and pd.api.types.is_float_dtype(col.dtype):
            df[field.name] = col.astype("Int64")
    return df


def load_results(path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read dse results (one Parquet file or a dataset directory) into a DataFrame.

    Args:
        path: a ``.parquet`` file, or a directory searched recursively for ``*.parquet``
            part files; names starting with ``_`` or ``.`` (temp files) are skipped.
        columns: read only these columns (default: all).

    Returns:
        The rows of all part files, with ``df.attrs["dse"]`` set to the parsed ``b"dse"``
        metadata of the first file (in sorted path order).

    Raises:
        DseError: the path does not exist, holds no part files, a file is not Parquet or lacks
            the ``b"dse"`` metadata, part files belong to different studies, or a requested
            column does not exist.
    """
    root = Path(path)
    if not root.exists():
        raise DseError(f"{root}: results path does not exist")
    files = _part_files(root) if root.is_dir() else [root]
    if not files:
        raise DseError(f"{root}: no *.parquet part files in this directory "
                       f"(files named _* or .* are temporary and skipped)")
    schemas, metas = zip(*(_read_meta(f) for f in files), strict=True)
    meta = metas[0]
    names = {_study_name(m) for m in metas}
    if len(names) > 1:
        raise DseError(f"{root}: part files belong to different studies "
                       f"({', '.join(sorted(map(str, names)))}); load each study on its own")
    fingerprints = {json.dumps(m.get("tech_fingerprint"), sort_keys=True) for m in metas}
    if len(fingerprints) > 1:
        warnings.warn(f"{root}: part files were written with different technology constants "
                      f"(tech_fingerprint differs); their costs may not be comparable",
                      stacklevel=2)
    try:
        schema = pa.unify_schemas(list(schemas), promote_options="permissive")
    except pa.ArrowException as e:
        raise DseError(f"{root}: part files have incompatible columns ({e})") from e
    if columns is not None:
        columns = list(columns)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise DseError(f"{root}: no column(s) {', '.join(map(repr, missing))}; "
                           f"available: {', '.join(schema.names)}")
    try:
        table = pads.dataset([str(f) for f in files], schema=schema,
                             format="parquet").to_table(columns=columns)
    except pa.ArrowException as e:
        raise DseError(f"{root}: cannot read the results ({e})") from e
    df = _restore_nullable(table.to_pandas(), schema)
    df.attrs["dse"] = meta
    return df


# --------------------------------------------------------------------------- objectives

def _numeric_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns
            if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]


def _study_objectives(df: pd.DataFrame) -> list:
    meta = df.attrs.get("dse") or {}
    objs = meta.get("objectives")
    if objs is None and isinstance(meta.get("study"), dict):
        objs = meta["study"].get("objectives")
    return list(objs or [])


def objectives_of(df: pd.DataFrame, objectives=None) -> list[tuple[str, str]]:
    """Resolve objectives to ``[(column, "minimize"|"maximize"), ...]``.

    Args:
        df: results; its ``attrs["dse"]["objectives"]`` are the default.
        objectives: None (the study's objectives); strings ``"metric:min"`` /
            ``"metric:max"`` (a bare ``"metric"`` takes the study's direction for it);
            ``(metric, direction)`` pairs; or ``{"metric", "direction"}`` dicts. One string
            may list several, comma-separated.

    Raises:
        DseError: no objectives given or stored, a bad direction, or a column that is not a
            numeric column of ``df`` (the message lists the numeric columns).
    """
    stored = {}
    for o in _study_objectives(df):
        if isinstance(o, Mapping) and "metric" in o:
            stored[o["metric"]] = o.get("direction", "minimize")
    if objectives is None:
        if not stored:
            raise DseError("no objectives given and the results carry none in attrs['dse']; "
                           "pass e.g. ['spec_ms_per_token:min', 'cost_usd:min']")
        objectives = list(stored.items())
    elif isinstance(objectives, str):
        objectives = [s for s in objectives.split(",") if s.strip()]
    out: list[tuple[str, str]] = []
    numeric = _numeric_columns(df)
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
        if key not in _SHORT:
            raise DseError(f"objective {metric!r}: direction {direction!r}: expected one of "
                           f"min, max, minimize, maximize")
        if metric not in numeric:
            what = "is not numeric" if metric in df.columns else "is not a column"
            raise DseError(f"objective {metric!r} {what} of the results; numeric columns: "
                           f"{', '.join(numeric) or '(none)'}")
        out.append((metric, _SHORT[key]))
    if not out:
        raise DseError("no objectives given")
    return out


def feasible_mask(df: pd.DataFrame) -> np.ndarray:
    """Column ``feasible`` if present, else ``fits``, else all True; NA counts as False."""
    for col in ("feasible", "fits"):
        if col in df.columns:
            return df[col].fillna(False).to_numpy(dtype=bool)
    return np.ones(len(df), dtype=bool)


def _values(df: pd.DataFrame, objs) -> np.ndarray:
    return df[[m for m, _ in objs]].to_numpy(dtype=np.float64, na_value=np.nan)


def _dirs(objs) -> list[str]:
    return [d for _, d in objs]


def _usable(df: pd.DataFrame, objs) -> tuple[np.ndarray, np.ndarray]:
    vals = _values(df, objs)
    return vals, feasible_mask(df) & np.isfinite(vals).all(axis=1)


# --------------------------------------------------------------------------- fronts

def front(df: pd.DataFrame, objectives=None, where: str | None = None) -> pd.DataFrame:
    """The feasible non-dominated rows, best first by the first objective.

    Args:
        df: results.
        objectives: see :func:`objectives_of` (default: the study's).
        where: a ``DataFrame.query`` string applied before the front is taken, e.g.
            ``"power_w <= 700 and params_k == 4"``.

    Returns:
        The front's rows (all columns, original index); duplicates in objective space are
        all kept. Sorted best first (ascending when minimised, descending when maximised)
        by the first objective, ties broken by the next objectives.
    """
    objs = objectives_of(df, objectives)
    if where:
        try:
            df = df.query(where)
        except Exception as e:  # query raises many types; report them uniformly
            raise DseError(f"where = {where!r}: {e}") from e
    vals, ok = _usable(df, objs)
    mask = pareto.pareto_mask(vals, _dirs(objs), feasible=ok)
    out = df[mask]
    return out.sort_values([m for m, _ in objs], ascending=[d == "minimize" for _, d in objs],
                           kind="stable")


def ranks(df: pd.DataFrame, objectives=None) -> pd.Series:
    """Non-dominated sorting rank per row (Int64; 0 = front, NA = infeasible or NaN)."""
    objs = objectives_of(df, objectives)
    vals, ok = _usable(df, objs)
    r = pareto.pareto_ranks(vals, _dirs(objs), feasible=ok)
    arr = pd.array(r, dtype="Int64")
    arr[r < 0] = pd.NA
    return pd.Series(arr, index=df.index, name="pareto_rank")


def _ref_array(reference, objs) -> np.ndarray:
    if isinstance(reference, Mapping):
        missing = [m for m, _ in objs if m not in reference]
        if missing:
            raise DseError(f"reference has no value for {', '.join(missing)}")
        reference = [reference[m] for m, _ in objs]
    ref = np.asarray(reference, dtype=np.float64).reshape(-1)
    if ref.shape != (len(objs),) or not np.isfinite(ref).all():
        raise DseError(f"reference {reference!r}: expected {len(objs)} finite values, one per "
                       f"objective ({', '.join(m for m, _ in objs)})")
    return ref


def _default_ref(frames, objs) -> np.ndarray:
    parts = []
    for d in frames:
        vals, ok = _usable(d, objs)
        parts.append(vals[ok])
    pts = np.concatenate(parts) if parts else np.empty((0, len(objs)))
    if pts.shape[0] == 0:
        raise DseError("no feasible designs to derive a hypervolume reference from; pass "
                       "reference= explicitly")
    return pareto.default_reference(pts, _dirs(objs))


def hypervolume_reference(df: pd.DataFrame, objectives=None) -> dict[str, float]:
    """Default reference: the worst feasible value per objective pushed out by 10% of its
    range (:func:`dse.pareto.default_reference`), as ``{metric: value}``."""
    objs = objectives_of(df, objectives)
    return dict(zip([m for m, _ in objs], _default_ref([df], objs).tolist(), strict=True))


def hypervolume(df: pd.DataFrame, objectives=None, reference=None) -> float:
    """Hypervolume of the feasible designs (Zitzler & Thiele 1998), via moocore.

    Args:
        reference: ``{metric: value}`` or a sequence in objective order; default
            :func:`hypervolume_reference`. Designs that do not dominate it add nothing.
    """
    objs = objectives_of(df, objectives)
    ref = _default_ref([df], objs) if reference is None else _ref_array(reference, objs)
    vals, ok = _usable(df, objs)
    return pareto.hypervolume(vals[ok], _dirs(objs), ref)


def compare_fronts(a: pd.DataFrame, b: pd.DataFrame, objectives=None, reference=None) -> dict:
    """Compare two result sets by hypervolume against one shared reference.

    Returns:
        ``{"objectives", "reference", "hv_a", "hv_b", "hv_union", "hv_only_a", "hv_only_b",
        "front_size_a", "front_size_b"}``. ``hv_only_a = hv_union - hv_b`` is the volume only
        ``a`` reaches. The default reference is computed from the feasible rows of both.
    """
    objs = objectives_of(a if objectives is not None or _study_objectives(a) else b, objectives)
    ref = _default_ref([a, b], objs) if reference is None else _ref_array(reference, objs)
    dirs = _dirs(objs)
    va, oka = _usable(a, objs)
    vb, okb = _usable(b, objs)
    hv_a = pareto.hypervolume(va[oka], dirs, ref)
    hv_b = pareto.hypervolume(vb[okb], dirs, ref)
    hv_u = pareto.hypervolume(np.concatenate([va[oka], vb[okb]]), dirs, ref)
    return {"objectives": objs, "reference": dict(zip([m for m, _ in objs], ref.tolist(),
                                                       strict=True)),
            "hv_a": hv_a, "hv_b": hv_b, "hv_union": hv_u,
            "hv_only_a": hv_u - hv_b, "hv_only_b": hv_u - hv_a,
            "front_size_a": int(pareto.pareto_mask(va, dirs, oka).sum()),
            "front_size_b": int(pareto.pareto_mask(vb, dirs, okb).sum())}


def hypervolume_history(df: pd.DataFrame, objectives=None, reference=None, order: str = "trial",
                        max_points: int = 200) -> pd.DataFrame:
    """Hypervolume of the feasible front after each trial (a convergence curve).

    Rows are sorted by ``order``; the hypervolume is evaluated at up to ``max_points``
    evenly spaced checkpoints (every row for short studies, always including the last). The
    front is carried from one checkpoint to the next, so the cost is about one non-dominated
    filter over all rows. The reference is fixed for the whole curve (default: from all
    feasible rows, :func:`hypervolume_reference`).

    Returns:
        Columns ``order`` (its value at the checkpoint), ``n_designs``, ``n_feasible``,
        ``front_size``, ``hypervolume``.
    """
    objs = objectives_of(df, objectives)
    if order not in df.columns:
        raise DseError(f"order = {order!r} is not a column of the results")
    ref = _default_ref([df], objs) if reference is None else _ref_array(reference, objs)
    idx = df[order].argsort(kind="stable").to_numpy()
    vals, ok = _usable(df, objs)
    vals, ok = vals[idx], ok[idx]
    dirs = _dirs(objs)
    n = len(df)
    stops = np.unique(np.linspace(1, n, min(n, max(1, max_points))).round().astype(np.int64))
    n_ok = np.cumsum(ok)
    fronts, hvs = [], []
    current = np.empty((0, len(objs)))
    start = 0
    for stop in stops:  # <= max_points iterations; each filters the carried front + new rows
        new = vals[start:stop][ok[start:stop]]
        if new.shape[0]:
            cand = np.concatenate([current, new])
            current = cand[pareto.pareto_mask(cand, dirs)]
        start = stop
        fronts.append(current.shape[0])
        hvs.append(pareto.hypervolume(current, dirs, ref))
    out = pd.DataFrame({
        order: df[order].iloc[idx[stops - 1]].reset_index(drop=True),
        "n_designs": stops, "n_feasible": n_ok[stops - 1],
        "front_size": np.asarray(fronts, dtype=np.int64),
        "hypervolume": np.asarray(hvs, dtype=np.float64)})
    out.attrs["reference"] = dict(zip([m for m, _ in objs], ref.tolist(), strict=True))
    return out


# --------------------------------------------------------------------------- known parts

def known_parts(df_or_study, devices=("h100-sxm", "h200", "b200", "mi300x"), chips=(1, 2, 4, 8)) -> pd.DataFrame:
    """Known devices on the study's workload, each at the fewest of ``chips`` that fit.

    Args:
        df_or_study: results (:func:`load_results`; the study is rebuilt from their metadata)
            or a :class:`dse.study.StudySpec`.

    Returns:
        One row per device with the results' metric columns plus ``name`` ("h100-sxm x2"),
        ``device`` and ``note``; see :func:`dse.reporting.known_parts`.
    """
    from dse import reporting
    study = reporting.study_from_results(df_or_study) if isinstance(df_or_study, pd.DataFrame) else df_or_study
    return reporting.known_parts(study, devices=devices, chips=chips)


__all__ += ["known_parts"]
