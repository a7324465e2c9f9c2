"""One results Parquet file: explicit schema, `dse` metadata, temp file then os.replace; its
footer read back (the metadata checked, a newer schema refused).

The file-level key ``dse`` holds JSON: schema_version, dse_version, the resolved study, the
objectives with directions, the constraints, and a fingerprint of the database constants.

Encoding (:func:`write_options`): lz4, dictionary encoding for string and integer columns only.

A dataset directory of such files: :mod:`.manifest` (what it should hold), :mod:`.side_files`
(a sweep's global flags and front), :mod:`.dataset` (its parts read as one, no pandas) and
:mod:`.load` (into a DataFrame).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..errors import DseError, RuntimeFailure
from .identity import file_digests, fingerprint_of, identity_of

if TYPE_CHECKING:
    import pandas as pd


#: the Parquet schema-metadata key that holds the study and provenance as JSON
META_KEY = b"dse"

#: version of the Parquet results schema (dse.model.columns names the columns); readers refuse
#: newer files
SCHEMA_VERSION = 6


def database_fingerprint(db, tech) -> str:
    """sha256 over every database file's bytes and the resolved technology constants."""
    h = hashlib.sha256()
    for p in sorted(Path(db.root).rglob("*.yaml")):
        h.update(str(p.relative_to(db.root)).encode())
        h.update(p.read_bytes())
    h.update(tech.fingerprint().encode())
    return h.hexdigest()[:16]


def study_metadata(study, db, tech, **extra) -> dict:
    """The ``dse`` metadata of results: the resolved study (its storage URL without a password),
    provenance, the digest of every file the rows are computed from (``files``:
    dse.study.sources) and the dataset's ``fingerprint`` (dse.results.identity)."""
    from ..study.sources import study_sources  # here: readers (dse pareto) import no study parser
    meta = {
        "schema_version": SCHEMA_VERSION,
        "dse_version": __version__,
        "study": study.resolved(),
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in study.objectives],
        "constraints": [{k: v for k, v in vars(c).items() if v is not None} for c in study.constraints],
        "tech_fingerprint": tech.fingerprint(),
        "database_fingerprint": database_fingerprint(db, tech),
        "files": file_digests(study_sources(study, db)),
        **extra,
    }
    meta["fingerprint"] = fingerprint_of(identity_of(meta))
    return meta


def arrow_table(df: pd.DataFrame, metadata: dict) -> pa.Table:
    """DataFrame -> Arrow with plain `string` (not large_string) and the `dse` metadata key."""
    table = pa.Table.from_pandas(df, preserve_index=False)     # pandas is imported by whoever built df
    fields = [pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type) else f for f in table.schema]
    schema = pa.schema(fields, metadata={**(table.schema.metadata or {}),
                                         META_KEY: json.dumps(metadata, default=str).encode()})
    return table.cast(schema)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: the process umask, read once at import (os.umask cannot be read without setting it, which is not
#: safe while a writer thread creates files)
_UMASK = _umask()

#: Parquet codec of results, chosen by measurement (docs/benchmarks.md): lz4 wrote a 100k-row
#: part about 20% faster than zstd level 1 for files about 25% larger, and reads fastest
CODEC = "lz4"


#: integer columns that are distinct row by row: a dictionary never pays on them
_UNIQUE_INT_COLUMNS = ("trial",)


def write_options(schema: pa.Schema) -> dict:
    """pyarrow.parquet write options of a results table, chosen by measurement (docs/benchmarks.md):
    dictionary encoding only for string and integer columns (on float columns, and on ``trial``,
    distinct on every row, it is tried, fails to pay and costs encoding time); min/max statistics
    only for ``trial`` and the ``params_*`` knobs, the columns a reader selects rows of a sweep by
    (a part holds a block of the outer knobs, so their statistics let DuckDB, polars or a pyarrow
    dataset filter skip parts; on every metric column they cost about a sixth of the encoding
    time, and dse reads none); :data:`CODEC`. One row group per part: 32k-row groups would let
    front_of decode fewer rows of a part but cost about 10% more encoding time, and measured no faster."""
    dictionary = [f.name for f in schema if (pa.types.is_string(f.type) or pa.types.is_integer(f.type))
                  and f.name not in _UNIQUE_INT_COLUMNS]
    stats = [f.name for f in schema if f.name == "trial" or f.name.startswith("params_")]
    return {"compression": CODEC, "use_dictionary": dictionary, "write_statistics": stats}


#: how long a name the file system of a folder allows, where it cannot be asked (Linux's NAME_MAX)
DEFAULT_NAME_LIMIT = 255
#: the end of a temporary file's name: mkstemp's 8 random characters and this suffix
TEMP_SUFFIX = ".tmp"
_TEMP_RANDOM_CHARS = 8


def name_limit(folder: str | os.PathLike) -> int:
    """The longest file name, in bytes, that the file system of ``folder`` (which exists) allows."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return DEFAULT_NAME_LIMIT
    return limit if limit > 0 else DEFAULT_NAME_LIMIT


def temp_file_beside(path: str | os.PathLike) -> str:
    """Create (empty) the temporary file an atomic write of ``path`` goes through and return its path:
    ``.NAME.XXXXXXXX.tmp`` in ``path``'s folder, NAME cut so that the whole fits the file system's name
    limit (a 255-byte final name still works). The write check (dse.results.guard) creates this same name."""
    path = Path(path)
    room = name_limit(path.parent) - len(f"..{'X' * _TEMP_RANDOM_CHARS}{TEMP_SUFFIX}")
    stem = path.name
    while stem and len(os.fsencode(stem)) > room:
        stem = stem[:-1]
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=TEMP_SUFFIX, dir=path.parent)
    os.close(fd)
    return tmp


def write_atomically(path: str | os.PathLike, fill: Callable[[str], object]) -> Path:
    """Write ``path`` atomically: ``fill(tmp)`` writes the temporary file (:func:`temp_file_beside`), which
    is made readable as the umask allows and renamed onto ``path``. On any failure the temporary file is
    removed; a full disk, a quota or a permission is one line naming ``path`` (RuntimeFailure, exit 1)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_file_beside(path)
        fill(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)        # mkstemp makes 0600; results are for sharing
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, (OSError, pa.ArrowException)):     # disk full, quota, permissions: name the path
            raise write_failure(path, exc) from None
        raise
    return path


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`write_atomically`)."""
    return write_atomically(path, lambda tmp: Path(tmp).write_bytes(data))


def write_table(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write an Arrow table atomically (:func:`write_atomically`; the table's schema carries the ``dse``
    metadata)."""
    return write_atomically(path, lambda tmp: pq.write_table(table, tmp, **write_options(table.schema)))


def write_failure(path: str | os.PathLike, exc: BaseException) -> RuntimeFailure:
    """A failed write as one line naming the file and the reason (exit 1); nothing partial is left."""
    text = str(exc).strip()
    why = getattr(exc, "strerror", None) or (text.splitlines()[0] if text else type(exc).__name__)
    return RuntimeFailure(f"{path}: cannot write it ({why}); nothing was written there")


def write_parquet(df: pd.DataFrame, path: str | os.PathLike, metadata: dict) -> Path:
    """Write a results DataFrame atomically (:func:`write_table`)."""
    return write_table(arrow_table(df, metadata), path)


def read_metadata(path: str | os.PathLike) -> dict:
    """The ``dse`` metadata of one Parquet file ({} when absent)."""
    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[META_KEY]) if META_KEY in meta else {}


def read_footer(path: Path) -> tuple[pa.Schema, dict, int]:
    """(Arrow schema, dse metadata, number of rows) from one file's footer; DseError (one line) when
    it is not Parquet, carries no valid dse metadata or was written by a newer schema."""
    try:
        footer = pq.read_metadata(path)
        schema = footer.schema.to_arrow_schema()
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
    return schema, meta, footer.num_rows


def read_results_footer(path: str | os.PathLike) -> tuple[dict, int]:
    """(dse metadata, rows) of one results file, from its footer; DseError when it is not dse results."""
    _, meta, rows = read_footer(Path(path))
    return meta, int(rows)
