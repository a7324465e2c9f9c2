"""Parquet out and in: explicit schema, `dse` metadata, temp file then os.replace.

The file-level key ``dse`` holds JSON: schema_version, dse_version, the resolved study, the
objectives with directions, the constraints, and a fingerprint of the database constants.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from .frame import SCHEMA_VERSION


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
                                         b"dse": json.dumps(metadata, default=str).encode()})
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
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[b"dse"]) if b"dse" in meta else {}
