"""Parquet out and in, in one place: explicit schema, `dse` metadata, temp file then os.replace.

The file-level key ``dse`` holds JSON: schema_version, dse_version, the resolved study, the
objectives with directions, the constraints, and a fingerprint of the database constants.

A dataset directory (``dse sweep``, ``dse run --task``) holds part files and ``_manifest.json``,
what it should hold: the part names, the study, the grid or the tasks. Reading a directory warns
with the missing parts named, and gives ``is_pareto`` / ``pareto_rank`` over all parts: a sweep's
parts hold them null and its ``_pareto.parquet`` (:data:`PARETO_FILE`) holds the global flags;
without a side file that covers exactly the parts read, they are recomputed from the objective
and feasible columns (the parts' own flags, if any, are per task).

Encoding (:func:`write_options`): lz4, dictionary encoding for string and integer columns only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..errors import DseError, RuntimeFailure
from .arrow import bool_array, num_array, string_array, to_numpy, usable_rows
from .identity import describe, fingerprint, fingerprint_of, identity_of, part_digest

if TYPE_CHECKING:
    import pandas as pd

#: the Parquet schema-metadata key that holds the study and provenance as JSON
META_KEY = b"dse"

#: version of the Parquet results schema (dse.model.columns names the columns); readers refuse
#: newer files
SCHEMA_VERSION = 4


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
    provenance, and the dataset's ``fingerprint`` (dse.results.identity)."""
    meta = {
        "schema_version": SCHEMA_VERSION,
        "dse_version": __version__,
        "study": study.resolved(),
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in study.objectives],
        "constraints": [{k: v for k, v in vars(c).items() if v is not None} for c in study.constraints],
        "tech_fingerprint": tech.fingerprint(),
        "database_fingerprint": database_fingerprint(db, tech),
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


def write_table(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write an Arrow table atomically: a `.`-prefixed temp file in the destination folder, then
    os.replace (the table's schema carries the ``dse`` metadata)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        pq.write_table(table, tmp, **write_options(table.schema))
        os.chmod(tmp, 0o666 & ~_UMASK)        # mkstemp makes 0600; results are for sharing
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, (OSError, pa.ArrowException)):     # disk full, quota, permissions: name the path
            raise write_failure(path, exc) from None
        raise
    return path


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


# --------------------------------------------------------------------------- manifest

MANIFEST = "_manifest.json"
#: what each manifest key must be (a manifest of another shape is refused, not half-read)
_MANIFEST_TYPES = {"kind": str, "study": str, "parts": list, "fingerprint": str, "identity": dict}
#: the file names a dataset directory's writers own (parts, side files, their temp files)
DATASET_FILES = ("part-*.parquet", "task-*.parquet", "_pareto.parquet", "_front.parquet", MANIFEST,
                 ".part-*.tmp", ".task-*.tmp", "._pareto.parquet.*.tmp", "._front.parquet.*.tmp", f".{MANIFEST}.*.tmp")


def read_manifest(root: str | os.PathLike) -> dict | None:
    """The dataset directory's manifest, or None when it has none; DseError (one line) for a
    manifest that is not JSON or not of the manifest's shape."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SIDE_FILE_BYTES + 1)
        if len(raw) > MAX_SIDE_FILE_BYTES:
            raise ValueError(f"larger than {MAX_SIDE_FILE_BYTES:,} bytes")
        manifest = json.loads(raw)
    except (ValueError, OSError) as e:
        raise DseError(f"{path}: not a dse manifest ({str(e).splitlines()[0][:120]}); delete it and re-run to "
                       "rewrite it") from None
    bad = ("a JSON object" if not isinstance(manifest, dict) else
           next((f"{k!r} of type {t.__name__}" for k, t in _MANIFEST_TYPES.items()
                 if k in manifest and not isinstance(manifest[k], t)), None) or
           ("'parts' of file names" if not all(isinstance(x, str) and "/" not in x and x not in ("", ".", "..")
                                              for x in manifest.get("parts", [])) else None))
    if bad:
        raise DseError(f"{path}: not a dse manifest (expected {bad}); delete it and re-run to rewrite it")
    return manifest


#: a manifest or side file larger than this is not dse's (a 10^10-point sweep has 76,000 parts)
MAX_SIDE_FILE_BYTES = 64 << 20


def write_manifest(root: str | os.PathLike, manifest: dict) -> Path:
    """Write ``_manifest.json`` atomically (every task or shard writes the same content)."""
    root = Path(root)
    path = root / MANIFEST
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=".tmp", dir=root)
        with os.fdopen(fd, "w") as f:
            json.dump(manifest, f, indent=1, default=str)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise write_failure(path, exc) from None
    return path


def dataset_manifest(kind: str, meta: dict, **layout) -> dict:
    """A manifest: ``kind`` (sweep, tasks), the study, the layout (grid or tasks, and ``parts``)
    and the fingerprint of ``meta`` with its components (to name what differs)."""
    ident = identity_of(meta)
    return {"kind": kind, "study": ident["study"], **layout, "fingerprint": meta.get("fingerprint") or
            fingerprint_of(ident), "identity": ident}


def dataset_conflict(root: str | os.PathLike, manifest: dict) -> str | None:
    """Why directory ``root`` holds another dataset than ``manifest`` describes (one clause naming
    what differs: study keys, layout keys, or a part of another fingerprint), or None when it
    holds nothing or the same dataset. Reads the old manifest, and the footers of the parts when
    there is no manifest of this fingerprint (parts are written only after it has been checked:
    a part copied in by hand is found by the readers, which check every part)."""
    root = Path(root)
    if not root.is_dir():
        return None
    old = read_manifest(root)
    if old is not None:
        if "fingerprint" in old and old["fingerprint"] != manifest["fingerprint"]:   # (older manifests: the parts say)
            return describe(old.get("identity") or {}, manifest["identity"])
        layout = sorted(k for k in set(old) | set(manifest) if k not in ("parts", "fingerprint", "identity")
                        and old.get(k) != manifest.get(k))
        if layout:
            return "; ".join(f"{k} {old.get(k)} -> {manifest.get(k)}" for k in layout)
        if old.get("fingerprint") == manifest["fingerprint"]:
            return None
    for f in _dataset_parts(root):
        try:
            meta = _read_footer(f)[1]
        except DseError as e:
            return str(e)
        if fingerprint(meta) != manifest["fingerprint"]:
            return f"{f.name}: " + describe(identity_of(meta), manifest["identity"])
    return None


def _dataset_parts(root: Path) -> list[Path]:
    return sorted(p for pat in ("part-*.parquet", "task-*.parquet") for p in root.glob(pat))


def replace_dataset(root: str | os.PathLike, manifest: dict, out=None, keep=None) -> int:
    """``--force``: remove from ``root`` what belongs to another dataset (parts whose fingerprint
    is not the manifest's or that ``keep(meta, rows)`` refuses, unreadable parts, side files, the
    old manifest and dse's temp files; nothing else), so a new dataset starts there; one line says
    what was removed. Parts of this dataset that another shard already wrote stay. Returns the
    files removed."""
    import fnmatch
    import sys
    root = Path(root)
    if not root.is_dir():
        return 0
    gone = 0
    for f in sorted(root.iterdir()):
        if not f.is_file() or not any(fnmatch.fnmatch(f.name, pat) for pat in DATASET_FILES):
            continue
        if f.name.endswith(".parquet") and not f.name.startswith("_"):
            try:
                _, meta, rows = _read_footer(f)
                if fingerprint(meta) == manifest["fingerprint"] and (keep is None or keep(meta, rows)):
                    continue
            except DseError:
                pass
        try:
            f.unlink()
            gone += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise write_failure(f, exc) from None
    if gone:
        from ..process.progress import note
        note(f"note: --force: removed {gone} file(s) of another dataset from {root} (its parts, side files and "
             "manifest); a new dataset starts there", out or sys.stderr)
    return gone


def check_manifest(root: str | os.PathLike, manifest: dict, force: bool = False, keep=None,
                   why: str | None = None) -> None:
    """Refuse a directory that holds another dataset (study fingerprint, grid, task count, budget:
    its parts would be mixed with these), naming what differs (``why``, else
    :func:`dataset_conflict`); with ``force``, remove that dataset's files first
    (:func:`replace_dataset` with ``keep``)."""
    why = why or dataset_conflict(root, manifest)
    if why is None:
        return
    if force:
        replace_dataset(root, manifest, keep=keep)
        return
    raise DseError(f"{root}: holds another dataset ({why}); give another --out, or --force to start a new dataset "
                   "there (its parts are removed)")


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
    study = _study_file(root, manifest) or "STUDY"
    if manifest.get("kind") == "tasks":
        tasks = [int(p.split("-")[1]) if p.count("-") >= 3 and p.split("-")[1].isdigit() else p for p in missing]
        total = manifest.get("tasks")
        how = (f"missing tasks {_numbers(tasks)} of {total}: run `dse run {study} --task I/{total} --out {root}` "
               f"for each (or --task all/{total} to do every missing one)")
    else:       # part-SSSSS-of-NNNNN-CCCCCC.parquet: shard S of N did chunk C
        shards = sorted({int(p.split("-")[1]) for p in missing})
        n_sh = int(manifest.get("shards") or 1)
        size = manifest.get("chunk_size")
        auto = min(131_072, -(-int(manifest.get("total") or 0) // n_sh))      # dse.campaign.grid.auto_chunk_size
        flags = f" --points {manifest['points']}" if manifest.get("points") else ""
        flags += f" --chunk-size {size}" if size and size != auto else ""
        cmd = f"dse sweep {study} --shard I/{n_sh}{flags} --out {root}"
        how = (f"missing shard{'s' if len(shards) != 1 else ''} {_numbers(shards)} of {n_sh}: run `{cmd}` for "
               f"{'each' if len(shards) != 1 else 'it'} (e.g. `{cmd.replace('I/', f'{shards[0]}/', 1)}`; a re-run "
               f"does only the missing parts)")
    return f"{root}: incomplete dataset: {len(missing)} of {n} parts missing ({shown}); {how}"


def _numbers(values: list[int], limit: int = 12) -> str:
    """'3, 5, 9' (the first ``limit``, then '...')."""
    return ", ".join(map(str, values[:limit])) + (" ..." if len(values) > limit else "")


def _study_file(root: Path, manifest: dict) -> str | None:
    """The study file the dataset's parts were made from (their metadata), if any part is on disk."""
    for name in manifest.get("parts", []):
        path = Path(root) / name
        if path.is_file():
            try:
                return (read_metadata(path).get("study") or {}).get("file")
            except (OSError, DseError, ValueError, pa.ArrowException):
                return None
    return None


# --------------------------------------------------------------------------- loading

def _part_files(root: Path) -> list[Path]:
    """``*.parquet`` files under ``root``, skipping files and folders named ``_*`` or ``.*``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        found += [Path(dirpath, f) for f in sorted(filenames)
                  if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return found


def _read_footer(path: Path) -> tuple[pa.Schema, dict, int]:
    """(Arrow schema, dse metadata, number of rows) from one file's footer."""
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
    _, meta, rows = _read_footer(Path(path))
    return meta, int(rows)


def _study_name(meta: dict):
    study = meta.get("study")
    return study.get("name") if isinstance(study, dict) else None


def restore_nullable(df: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """Without pandas metadata, null bools load as object and null ints as float: fix both."""
    import pandas as pd
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
        columns: read only these columns (default: all), names or fnmatch patterns such as
            ``"params_*"`` (a pattern may match nothing); only they are decoded, so
            ``columns=["spec_ms_per_token", "cost_usd", "feasible"]`` of a 2M-row sweep takes
            tens of MB, not GB.

    In a dataset directory is_pareto / pareto_rank are global, over all parts: from the sweep's
    ``_pareto.parquet`` when it covers exactly these parts, else recomputed from the objective and
    feasible columns (a sweep's part files themselves hold them null).

    Returns:
        The rows of all part files, with ``df.attrs["dse"]`` set to the parsed ``b"dse"``
        metadata of the first file (in sorted path order).

    Raises:
        DseError: the path does not exist, holds no part files, a file is not Parquet or lacks
            the ``b"dse"`` metadata, part files belong to different studies, or a requested
            column does not exist.
    """
    import pandas as pd  # here, not at import: `dse sweep` writes without pandas
    dataset = open_results(path)
    root = dataset.root
    schema, meta = dataset.schema, dataset.meta
    flags = root.is_dir() and {"is_pareto", "pareto_rank"} <= set(schema.names) and dataset.objectives() is not None
    if columns is not None:
        import fnmatch
        pattern = [c for c in columns if any(ch in c for ch in "*?[")]
        columns = list(dict.fromkeys(
            n for c in columns for n in (fnmatch.filter(schema.names, c) if c in pattern else [c])))
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise DseError(f"{root}: no column(s) {', '.join(map(repr, missing))}; "
                           f"available: {', '.join(schema.names)}")
        flags = flags and bool({"is_pareto", "pareto_rank"} & set(columns))
    table = dataset.read(columns)
    df = restore_nullable(table.to_pandas(self_destruct=True, split_blocks=True), schema)  # frees as it goes
    del table
    if flags:
        mask, ranks = dataset.global_flags()
        usable = ranks >= 0
        if "is_pareto" in df.columns:
            df["is_pareto"] = pd.array(np.where(usable, mask, None), dtype="boolean")
        if "pareto_rank" in df.columns:
            df["pareto_rank"] = pd.array(np.where(usable, ranks, None), dtype="Int64")
    df.attrs["dse"] = meta
    return df


# --------------------------------------------------------------------------- datasets and flags

#: a sweep's side file of Pareto flags: one row per feasible row of the dataset (part, row,
#: is_pareto, pareto_rank) over all the parts it names in its metadata; the parts' own
#: is_pareto / pareto_rank are null
PARETO_FILE = "_pareto.parquet"
_PARETO_KEY = b"dse_pareto"
#: a sweep's side file of its front: the full rows of every non-dominated feasible row (ties
#: included; pareto_rank 0 in PARETO_FILE) under the study's objectives, in row order, with their
#: row numbers in the dataset in column ``_row``; what ``dse pareto`` reads instead of the parts
FRONT_FILE = "_front.parquet"
_FRONT_KEY = b"dse_front"


def _warn_old_schema(root: Path, metas) -> None:
    """One warning per dataset (not per part file) when parts were written by an older schema."""
    versions = [int(m["schema_version"]) for m in metas if m.get("schema_version") is not None]
    old = [v for v in versions if v < SCHEMA_VERSION]
    if not old:
        return
    v = min(old)
    where = f"{root} ({len(old)} of {len(metas)} part files)" if len(metas) > 1 else f"{root}"
    if v < 2:
        why = ("written before issue 9 (cost_usd of known parts was their street price, DRAM capacity decimal, "
               "KV cache at the weight dtype); re-run the study to compare with current results")
    elif v < 3:
        why = ("written before power_w of known parts came from the energy model synthesised chips get (it "
               "held the vendor TDP) and before expert parallel (ep); re-run the study to compare power with "
               "current results")
    else:
        why = ("written before issue 17 (no overhead_ms_per_token; synthesised chips' links at class 'other' "
               "with 2 us, tensor parallel free past a scale-up domain, one kernel count for every layer, fp8 on "
               "parts without fp8 units slower than bf16; trees from alpha at the geometric rank profile, no "
               "rank_profile column, no tree costs beyond positions, k = auto capped at 8, no draft prefill "
               "under continuous batching; memory_required_gb then included the runtime reserve, now "
               "memory_reserve_gb; no energy per token, per-chip memory or busiest expert rank; SRAM power at its "
               "full aggregate bandwidth) and issue 19 (no acceptance band and its source: tau_low, tau_high, "
               "speedup_low, speedup_high, spec_ms_per_token_low/_high, acceptance_source); "
               "re-run the study to compare with current results")
    warnings.warn(f"{where}: results schema_version {v}: {why}", stacklevel=5)


class Dataset:
    """The part files of one results file or dataset directory, their footers checked (one study,
    compatible columns), read column by column."""

    def __init__(self, root: Path, files: list[Path]):
        self.root, self.files = root, files
        schemas, metas, counts = zip(*(_read_footer(f) for f in files), strict=True)
        self.counts = [int(c) for c in counts]
        self.meta = metas[0]
        _warn_old_schema(root, metas)
        names = {_study_name(m) for m in metas}
        if len(names) > 1:
            raise DseError(f"{root}: part files belong to different studies "
                           f"({', '.join(sorted(map(str, names)))}); load each study on its own")
        prints = [fingerprint(m) for m in metas]
        other = next((i for i, f in enumerate(prints) if f != prints[0]), None)
        if other is not None:
            raise DseError(f"{root}: part files hold different datasets: {files[other].name} differs from "
                           f"{files[0].name} in {describe(identity_of(metas[0]), identity_of(metas[other]))}; "
                           "load each on its own, or re-run the study with --force to start a new dataset")
        #: the dataset's fingerprint (dse.results.identity), the one every part carries
        self.fingerprint = prints[0]
        self._digests: list[str] | None = None
        try:
            self.schema = pa.unify_schemas(list(schemas), promote_options="permissive")
        except pa.ArrowException as e:
            raise DseError(f"{root}: part files have incompatible columns ({e})") from e

    def digests(self) -> list[str]:
        """The footer digest of each part (dse.results.identity.part_digest), read once."""
        if self._digests is None:
            try:
                self._digests = [part_digest(f) for f in self.files]
            except OSError as exc:
                raise DseError(f"{self.root}: cannot read the results ({exc})") from None
        return self._digests

    def objectives(self) -> list[tuple[str, str]] | None:
        """The study's (metric, direction) pairs, None when the results carry none or lack a column."""
        objs = [(o.get("metric"), o.get("direction", "minimize")) for o in self.meta.get("objectives") or []
                if isinstance(o, dict)]
        if not objs or not all(m in self.schema.names for m, _ in objs) or "feasible" not in self.schema.names:
            return None
        return objs

    def read(self, columns=None, files=None) -> pa.Table:
        """``columns`` (default all) of ``files`` (default all), in file order, as the unified
        schema: part by part (no pyarrow.dataset: its import alone takes 0.2 s, and its threaded
        scan holds more decode buffers), a column a part lacks (an older schema) as nulls."""
        names = self.schema.names if columns is None else list(columns)
        unknown = [c for c in names if c not in self.schema.names]
        if unknown:
            raise DseError(f"{self.root}: no column(s) {', '.join(map(repr, unknown))}")
        tables = []
        try:
            for f in files or self.files:
                pf = pq.ParquetFile(f)
                have = set(pf.schema_arrow.names)
                t = pf.read(columns=[c for c in names if c in have])
                for c in names:
                    if c not in have:
                        field = self.schema.field(c)
                        t = t.append_column(field, pa.nulls(pf.metadata.num_rows, field.type))
                tables.append(self._as_unified(t.select(names)))
        except pa.ArrowException as e:
            raise DseError(f"{self.root}: cannot read the results ({e})") from e
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def parts(self, columns):
        """(file, table of ``columns``) one part at a time: memory bounded by a part."""
        for f in self.files:
            yield f, self.read(columns, [f])

    def usable(self, objs) -> tuple[np.ndarray, np.ndarray]:
        """(global row numbers, objective values) of the feasible rows with finite objectives,
        read part by part, objective and feasible columns only."""
        rows, vals, offset = [], [], 0
        for (_, t), n in zip(self.parts([m for m, _ in objs] + ["feasible"]), self.counts, strict=True):
            v, ok = usable_rows(t, objs)
            rows.append(offset + np.flatnonzero(ok))
            vals.append(v[ok])
            offset += n
        return (np.concatenate(rows) if rows else np.empty(0, np.int64),
                np.concatenate(vals) if vals else np.empty((0, len(objs))))

    def take(self, rows: np.ndarray, columns) -> list[tuple[np.ndarray, pa.Table]]:
        """Global row numbers ``rows`` (ascending), ``columns`` of them as the unified schema: per
        file that holds some, (its rows, their table), decoding only the row groups that hold them."""
        starts = np.cumsum([0] + self.counts)
        out = []
        for i, f in enumerate(self.files):
            mine = rows[(rows >= starts[i]) & (rows < starts[i + 1])]
            if not mine.size:
                continue
            local = mine - starts[i]
            try:
                pf = pq.ParquetFile(f)
                sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
                first = np.cumsum([0] + sizes)
                group = np.searchsorted(first, local, side="right") - 1        # the row group of each row
                groups = np.unique(group)
                t = pf.read_row_groups(groups.tolist(), columns=columns)
            except pa.ArrowException as e:
                raise DseError(f"{self.root}: cannot read the results ({e})") from e
            before = np.cumsum([0] + [sizes[g] for g in groups])       # where each group read starts in t
            at = before[np.searchsorted(groups, group)] + (local - first[group])
            t = t.take(num_array(at, pa.int64()))
            out.append((mine, self._as_unified(t)))
        return out

    def front_rows(self, objs) -> tuple[np.ndarray, int, int]:
        """(global row numbers of the non-dominated feasible rows, rows, distinct designs), read
        part by part (objective columns, ``feasible`` or else ``fits``, ``duplicate_of``; no
        pandas): each part's front kept, then the front of their union (a row dominated within
        its part is dominated globally). Feasibility and designs as dse.results.analysis's
        feasible_mask and count_designs; every row when there is no duplicate_of column."""
        from .pareto import pareto_mask
        names, dirs = self.schema.names, [d for _, d in objs]
        ok_col = next((c for c in ("feasible", "fits") if c in names), None)
        cols = list(dict.fromkeys([m for m, _ in objs] + [c for c in (ok_col, "duplicate_of") if c in names]))
        rows, vals, designs, offset = [], [], 0, 0
        for (_, t), n in zip(self.parts(cols), self.counts, strict=True):
            v, ok = usable_rows(t, objs)
            designs += t["duplicate_of"].null_count if "duplicate_of" in cols else n
            mask = pareto_mask(v, dirs, feasible=ok)
            rows.append(offset + np.flatnonzero(mask))
            vals.append(v[mask])
            offset += n
        if not rows:
            return np.empty(0, np.int64), 0, 0
        rows, vals = np.concatenate(rows), np.concatenate(vals)
        return rows[pareto_mask(vals, dirs)], offset, designs

    def feasible_designs(self) -> int:
        """Distinct feasible designs (``feasible``, else ``fits``, else every row; ``duplicate_of``
        null), as dse.results.analysis.counts: two columns read part by part."""
        names = self.schema.names
        ok_col = next((c for c in ("feasible", "fits") if c in names), None)
        cols = [c for c in (ok_col, "duplicate_of") if c in names]
        total = 0
        for (_, t), n in zip(self.parts(cols), self.counts, strict=True):
            ok = to_numpy(t[ok_col]).astype(bool) if ok_col else np.ones(n, bool)     # null: False
            new = to_numpy(t["duplicate_of"].is_null()) if "duplicate_of" in cols else np.ones(n, bool)
            total += int((ok & new).sum())
        return total

    def front_table(self, objs, columns) -> tuple[np.ndarray, pa.Table, int, int]:
        """(row numbers, table of ``columns``, rows, distinct designs) of every non-dominated
        feasible row (ties included) under ``objs``, in row order: from :data:`FRONT_FILE` when it
        was written for exactly these parts and objectives, else :meth:`front_rows` and
        :meth:`take`. ``columns`` must hold the objectives (and feasible, trial) the caller needs."""
        got = read_front_file(self.root, self.files, self.counts, objs, columns, self.fingerprint, self.digests())
        if got is not None:
            rows, table, designs = got
            return rows, self._as_unified(table), sum(self.counts), designs
        rows, n_rows, designs = self.front_rows(objs)
        tables = [t for _, t in self.take(rows, columns)]
        table = pa.concat_tables(tables) if tables else self._as_unified(self.schema.empty_table().select(columns))
        return rows, table, n_rows, designs

    def _as_unified(self, t: pa.Table) -> pa.Table:
        """``t`` with each column's type (and the metadata) of the unified schema."""
        want = pa.schema([self.schema.field(c) for c in t.schema.names], metadata=self.schema.metadata)
        return t if t.schema.equals(want) else t.cast(want)

    def global_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(is_pareto, pareto_rank) over every row of the dataset (rank -1 where not usable): from
        :data:`PARETO_FILE` when it covers exactly these parts, else computed from the objective
        and feasible columns (dse.results.pareto.front_flags over the concatenation in file order)."""
        objs = self.objectives()
        side = read_pareto_file(self.root, self.files, self.counts, objs, self.fingerprint, self.digests())
        if side is not None:
            return side
        rows, vals = self.usable(objs)
        return expand_flags(sum(self.counts), rows, vals, [d for _, d in objs])


def open_results(path) -> Dataset:
    """The :class:`Dataset` of a results file or directory, warning (with the missing parts named)
    when a dataset directory is incomplete."""
    root = Path(path)
    if not root.exists():
        raise DseError(f"{root}: results path does not exist")
    if root.is_dir():
        manifest = read_manifest(root)
        missing = missing_parts(root, manifest)
        if missing:
            warnings.warn(incomplete_message(root, missing, manifest), stacklevel=3)
    return open_dataset(root)


def open_dataset(root, files: list[Path] | None = None) -> Dataset:
    root = Path(root)
    if files is None:
        files = _part_files(root) if root.is_dir() else [root]
    if not files:
        raise DseError(f"{root}: no *.parquet part files in this directory "
                       f"(files named _* or .* are temporary and skipped)")
    return Dataset(root, files)


def expand_flags(n: int, rows: np.ndarray, values: np.ndarray, directions) -> tuple[np.ndarray, np.ndarray]:
    """front_flags over the usable rows ``rows`` (ascending) of n, spread back to all n rows."""
    from .pareto import front_flags
    mask, ranks = np.zeros(n, dtype=bool), np.full(n, -1, dtype=np.int64)
    if rows.size:
        m, r = front_flags(values, directions, None)
        mask[rows], ranks[rows] = m, r
    return mask, ranks


def parts_identity(files: list[Path], counts: list[int], digests: list[str] | None = None) -> list[list]:
    """[[name, rows, footer digest], ...]: what a side file was computed from (dse.results.identity)."""
    try:
        digests = digests or [part_digest(f) for f in files]
    except OSError as exc:
        raise DseError(f"{exc}") from None
    return [[f.name, int(c), d] for f, c, d in zip(files, counts, digests, strict=True)]


def _side_meta(files, counts, objs, fp: str, digests=None) -> dict:
    return {"parts": parts_identity(files, counts, digests), "objectives": [list(o) for o in objs], "fingerprint": fp}


def _side_file_matches(path: Path, meta, files: list[Path], counts: list[int], objs, fp: str,
                       digests: list[str] | None, warn: bool = True) -> bool:
    """A side file's metadata names exactly these parts (names, row counts and footer digests),
    these objectives and this fingerprint; else it is stale, and a warning says it is not used."""
    if isinstance(meta, dict) and meta.get("objectives") != [list(o) for o in objs]:
        return False            # written for the study's objectives; a front of others is computed
    ok = (isinstance(meta, dict) and meta.get("fingerprint") == fp
          and meta.get("parts") == parts_identity(files, counts, digests))
    if not ok and warn:
        warnings.warn(f"{path}: not used: it was written for other part files or another dataset (the parts were "
                      "rewritten since, or it belongs elsewhere); the front is recomputed from the parts", stacklevel=6)
    return ok


def side_files_current(root: Path, files: list[Path], counts: list[int], objs, fp: str) -> bool:
    """Both side files are on disk and were written for exactly these parts, objectives and
    fingerprint (what a re-run of a finished sweep checks before rewriting them)."""
    for name, key in ((PARETO_FILE, _PARETO_KEY), (FRONT_FILE, _FRONT_KEY)):
        path = Path(root) / name
        try:
            meta = _side_file_meta(pq.read_schema(path), key)
        except (pa.ArrowException, OSError, ValueError):
            return False
        if not _side_file_matches(path, meta, files, counts, objs, fp, None, warn=False):
            return False
    return True


def write_pareto_file(root: Path, files: list[Path], counts: list[int], rows: np.ndarray, values: np.ndarray,
                      objs, fp: str) -> Path:
    """Write :data:`PARETO_FILE` for parts ``files`` (``counts`` rows each) of the dataset of
    fingerprint ``fp`` from the usable rows' global row numbers and objective values."""
    mask, ranks = expand_flags(sum(counts), rows, values, [d for _, d in objs])
    starts = np.cumsum([0] + list(counts))
    part = np.searchsorted(starts, rows, side="right") - 1
    meta = {**_side_meta(files, counts, objs, fp), "rows": int(rows.size)}
    names = string_array([f.name for f in files])
    table = pa.Table.from_arrays([pa.DictionaryArray.from_arrays(num_array(part, pa.int32()), names),
                                  num_array(rows - starts[part], pa.int64()), bool_array(mask[rows]),
                                  num_array(ranks[rows], pa.int64())], names=["part", "row", "is_pareto", "pareto_rank"])
    table = table.replace_schema_metadata({_PARETO_KEY: json.dumps(meta).encode()})
    return write_table(table, Path(root) / PARETO_FILE)


def _side_file_meta(schema: pa.Schema, key: bytes):
    raw = (schema.metadata or {}).get(key)
    return json.loads(raw) if raw is not None else None


def read_pareto_file(root: Path, files: list[Path], counts: list[int], objs, fp: str,
                     digests: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """(is_pareto, pareto_rank) of every row from :data:`PARETO_FILE`, or None when it is absent,
    unreadable, out of range or was written for other parts, objectives or another dataset."""
    path = Path(root) / PARETO_FILE
    if not path.is_file() or objs is None:
        return None
    try:
        pf = pq.ParquetFile(path)
        if not _side_file_matches(path, _side_file_meta(pf.schema_arrow, _PARETO_KEY), files, counts, objs, fp,
                                  digests):
            return None
        t = pf.read()
        if t.num_rows != _side_file_meta(pf.schema_arrow, _PARETO_KEY).get("rows"):
            raise ValueError("rows missing or added")
        starts = np.cumsum([0] + list(counts))
        position = {f.name: i for i, f in enumerate(files)}
        part = []
        for chunk in t["part"].chunks:      # Parquet keeps only the names present, so map each by name
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            lut = np.array([position[name] for name in chunk.dictionary.to_pylist()], dtype=np.int64)
            part.append(lut[chunk.indices.to_numpy(zero_copy_only=False)])
        part = np.concatenate(part) if part else np.empty(0, np.int64)
        local = to_numpy(t["row"])
        if np.isnan(local).any() or ((local < 0) | (local >= np.asarray(counts)[part])).any():
            raise ValueError("a row number outside its part")
        rows = starts[part] + local.astype(np.int64)
        n = sum(counts)
        mask, ranks = np.zeros(n, dtype=bool), np.full(n, -1, dtype=np.int64)
        mask[rows] = to_numpy(t["is_pareto"])
        ranks[rows] = np.nan_to_num(to_numpy(t["pareto_rank"]), nan=-1).astype(np.int64)
    except (pa.ArrowException, OSError, KeyError, ValueError, TypeError, IndexError) as exc:
        warnings.warn(f"{path}: not used: unreadable ({type(exc).__name__}: {str(exc)[:100]}); the flags are "
                      "recomputed from the parts", stacklevel=5)
        return None
    return mask, ranks


def write_front_file(root: Path, files: list[Path], counts: list[int], rows: np.ndarray, table: pa.Table,
                     objs, designs: int, fp: str) -> Path:
    """Write :data:`FRONT_FILE`: ``table``, the full rows of the non-dominated feasible rows of
    parts ``files`` (``counts`` rows each, ``designs`` distinct designs) at row numbers ``rows``
    (ascending), under ``objs``, for the dataset of fingerprint ``fp``."""
    meta = {**_side_meta(files, counts, objs, fp), "designs": int(designs), "rows": int(len(rows))}
    table = table.append_column("_row", num_array(rows, pa.int64()))
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _FRONT_KEY: json.dumps(meta).encode()})
    return write_table(table, Path(root) / FRONT_FILE)


def read_front_file(root: Path, files: list[Path], counts: list[int], objs, columns, fp: str,
                    digests: list[str]) -> tuple[np.ndarray, pa.Table, int] | None:
    """(row numbers, table of ``columns``, distinct designs) from :data:`FRONT_FILE`, or None when
    it is absent, unreadable, out of range, lacks a column or was written for other parts,
    objectives or another dataset."""
    path = Path(root) / FRONT_FILE
    if not path.is_file() or not objs:
        return None
    try:
        pf = pq.ParquetFile(path)
        meta = _side_file_meta(pf.schema_arrow, _FRONT_KEY)
        if not _side_file_matches(path, meta, files, counts, objs, fp, digests):
            return None
        if not set(columns) <= set(pf.schema_arrow.names):
            return None
        t = pf.read(columns=[*columns, "_row"])
        if t.num_rows != meta.get("rows"):
            raise ValueError("rows missing or added")
        rows = to_numpy(t["_row"])
        if np.isnan(rows).any() or ((rows < 0) | (rows >= sum(counts))).any() or (np.diff(rows) <= 0).any():
            raise ValueError("row numbers outside the dataset or out of order")
        designs = int(meta["designs"])
    except (pa.ArrowException, OSError, KeyError, ValueError, TypeError) as exc:
        warnings.warn(f"{path}: not used: unreadable ({type(exc).__name__}: {str(exc)[:100]}); the front is "
                      "recomputed from the parts", stacklevel=5)
        return None
    return rows.astype(np.int64), t.drop_columns(["_row"]), designs
