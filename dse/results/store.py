"""Parquet out and in, in one place: explicit schema, `dse` metadata, temp file then os.replace.

The file-level key ``dse`` holds JSON: schema_version, dse_version, the resolved study, the
objectives with directions, the constraints, and a fingerprint of the database constants.

A dataset directory (``dse sweep``, ``dse run --task``) holds part files and ``_manifest.json``,
what it should hold: the part names, the study, the grid or the tasks. Reading a directory warns
with the missing parts named, and recomputes ``is_pareto`` / ``pareto_rank`` over all parts
(the parts' own flags, if any, are per shard or per task).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from .. import __version__
from ..errors import DseError
from .columns import SCHEMA_VERSION

#: the Parquet schema-metadata key that holds the study and provenance as JSON
META_KEY = b"dse"


def database_fingerprint(db, tech) -> str:
    """sha256 over every database file's bytes and the resolved technology constants."""
    h = hashlib.sha256()
    for p in sorted(Path(db.root).rglob("*.yaml")):
        h.update(str(p.relative_to(db.root)).encode())
        h.update(p.read_bytes())
    h.update(tech.fingerprint().encode())
    return h.hexdigest()[:16]


def study_metadata(study, db, tech, **extra) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "dse_version": __version__,
        "study": study.resolved(),
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in study.objectives],
        "constraints": [{k: v for k, v in vars(c).items() if v is not None} for c in study.constraints],
        "tech_fingerprint": tech.fingerprint(),
        "database_fingerprint": database_fingerprint(db, tech),
        **extra,
    }


def arrow_table(df: pd.DataFrame, metadata: dict) -> pa.Table:
    """DataFrame -> Arrow with plain `string` (not large_string) and the `dse` metadata key."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    fields = [pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type) else f for f in table.schema]
    schema = pa.schema(fields, metadata={**(table.schema.metadata or {}),
                                         META_KEY: json.dumps(metadata, default=str).encode()})
    return table.cast(schema)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike, metadata: dict) -> Path:
    """Write atomically: a `.`-prefixed temp file in the destination folder, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = arrow_table(df, metadata)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp, compression="zstd")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)        # mkstemp makes 0600; results are for sharing
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_metadata(path: str | os.PathLike) -> dict:
    """The ``dse`` metadata of one Parquet file ({} when absent)."""
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[META_KEY]) if META_KEY in meta else {}


# --------------------------------------------------------------------------- manifest

MANIFEST = "_manifest.json"


def read_manifest(root: str | os.PathLike) -> dict | None:
    """The dataset directory's manifest, or None when it has none."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise DseError(f"{path}: not valid JSON ({e}); delete it and re-run to rewrite it") from e


def write_manifest(root: str | os.PathLike, manifest: dict) -> Path:
    """Write ``_manifest.json`` atomically (every task or shard writes the same content)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    path = root / MANIFEST
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=".tmp", dir=root)
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, indent=1, default=str)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def check_manifest(root: str | os.PathLike, manifest: dict) -> None:
    """Refuse a directory whose manifest describes another dataset (study, grid, task count,
    budget): its parts would be mixed with these."""
    old = read_manifest(root)
    if old is None or old == manifest:
        return
    diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k) and k != "parts")
    raise DseError(f"{root}: holds another dataset ({', '.join(diff) or 'parts'} differ from this run, "
                   f"see {MANIFEST}); use another --out or delete the directory")


def missing_parts(root: str | os.PathLike, manifest: dict | None = None) -> list[str]:
    """Names of the parts the manifest lists that are not on disk."""
    root = Path(root)
    manifest = read_manifest(root) if manifest is None else manifest
    if not manifest:
        return []
    return [p for p in manifest.get("parts", []) if not (root / p).is_file()]


def incomplete_message(root: str | os.PathLike, missing: list[str], manifest: dict) -> str:
    """'DIR: incomplete: 6 of 12 parts missing (a, b, ...); <how to finish>'."""
    shown = ", ".join(missing[:6]) + (f", ... ({len(missing) - 6} more)" if len(missing) > 6 else "")
    n = len(manifest.get("parts", []))
    if manifest.get("kind") == "tasks":
        tasks = [int(p.split("-")[1]) for p in missing]
        total = manifest.get("tasks")
        how = (f"missing tasks {', '.join(map(str, tasks[:12]))}{' ...' if len(tasks) > 12 else ''} of {total}: "
               f"run `dse run STUDY --task I/{total} --out {root}` for each (or --task all/{total})")
    else:
        how = "run the same `dse sweep` command(s) again: they do only the missing parts"
    return f"{root}: incomplete dataset: {len(missing)} of {n} parts missing ({shown}); {how}"


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
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise DseError(f"{path}: not dse results: the Parquet file carries no dse metadata "
                       f"(results come from `dse run` or `dse sweep`)")
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise DseError(f"{path}: the dse metadata is not valid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise DseError(f"{path}: the dse metadata is not a JSON object")
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
    if root.is_dir():
        manifest = read_manifest(root)
        missing = missing_parts(root, manifest)
        if missing:
            warnings.warn(incomplete_message(root, missing, manifest), stacklevel=2)
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
    extra: list[str] = []
    flags = root.is_dir() and {"is_pareto", "pareto_rank"} <= set(schema.names)
    need = [o.get("metric") for o in meta.get("objectives") or [] if isinstance(o, dict)] + ["feasible"]
    flags = flags and bool(meta.get("objectives")) and all(c in schema.names for c in need)
    if columns is not None:
        columns = list(columns)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise DseError(f"{root}: no column(s) {', '.join(map(repr, missing))}; "
                           f"available: {', '.join(schema.names)}")
        flags = flags and bool({"is_pareto", "pareto_rank"} & set(columns))
        if flags:
            extra = [c for c in need if c not in columns]
    try:
        table = pads.dataset([str(f) for f in files], schema=schema,
                             format="parquet").to_table(columns=None if columns is None else columns + extra)
    except pa.ArrowException as e:
        raise DseError(f"{root}: cannot read the results ({e})") from e
    df = _restore_nullable(table.to_pandas(), schema)
    if flags:
        _global_pareto_flags(df, meta)
        df = df.drop(columns=extra)
    df.attrs["dse"] = meta
    return df


def _global_pareto_flags(df: pd.DataFrame, meta: dict) -> None:
    """is_pareto / pareto_rank over every row of a dataset (null where infeasible), replacing
    the per-part flags."""
    import numpy as np

    from ..pareto import front_flags
    objs = [(o["metric"], o.get("direction", "minimize")) for o in meta["objectives"]]
    values = df[[m for m, _ in objs]].to_numpy(dtype=np.float64, na_value=np.nan)
    feas = df["feasible"].fillna(False).to_numpy(dtype=bool)
    mask, ranks = front_flags(values, [d for _, d in objs], feas)
    usable = ranks >= 0
    df["is_pareto"] = pd.array(np.where(usable, mask, None), dtype="boolean")
    df["pareto_rank"] = pd.array(np.where(usable, ranks, None), dtype="Int64")
