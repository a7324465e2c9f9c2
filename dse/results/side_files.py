"""A sweep's side files beside its parts: :data:`PARETO_FILE` (the global is_pareto / pareto_rank,
which the parts hold null) and :data:`FRONT_FILE` (the front's full rows), written and read back.
A side file is used only when its metadata names exactly the parts read (names, row counts,
footer digests), the objectives and the dataset's fingerprint; else a warning says it is not
used and the reader recomputes from the parts.

A sweep writes the front only (``pareto_rank`` 0 on its rows, null on the other feasible rows;
metadata ``"ranks": "front"``): ranking every row costs more than evaluating it on grids of
millions of rows (moocore's non-dominated sorting peels one front at a time), so the full ranks
are computed from the parts when a reader asks for ``pareto_rank`` (:class:`Flags`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DseError
from .arrow import bool_array, num_array, string_array, to_numpy
from .identity import part_digest
from .store import write_table

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


class Flags(NamedTuple):
    """The global Pareto flags of a dataset's rows."""
    is_pareto: np.ndarray           # (n,) bool: the first row (row order) of each point of the front
    front: np.ndarray               # (n,) bool: every non-dominated usable row (rank 0, ties included)
    usable: np.ndarray              # (n,) bool: feasible with finite objectives
    ranks: np.ndarray | None        # (n,) int64 non-dominated rank, -1 where not usable; None: not computed


def expand_flags(n: int, rows: np.ndarray, values: np.ndarray, directions, ranks: bool = True,
                 front: np.ndarray | None = None) -> Flags:
    """The :class:`Flags` of n rows whose usable rows are ``rows`` (ascending) with objective
    ``values``: the front (``front``, positions in ``rows``, when the caller found it already,
    e.g. from the parts' own fronts; else dse.results.pareto.pareto_mask), its first rows
    (first_of_equal), and with ``ranks`` every usable row's rank (pareto_ranks, the slow part)."""
    from .pareto import first_of_equal, pareto_mask, pareto_ranks
    usable, on_front = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    usable[rows] = True
    local = np.zeros(rows.size, dtype=bool)
    if rows.size:
        if front is None:
            local = pareto_mask(values, directions)
        else:
            local[front] = True
    on_front[rows] = local
    first = np.zeros(n, dtype=bool)
    first[rows] = first_of_equal(values, local)
    full = None
    if ranks:
        full = np.full(n, -1, dtype=np.int64)
        if rows.size:
            full[rows] = pareto_ranks(values, directions)
    return Flags(first, on_front, usable, full)


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


def side_files_current(root: Path, files: list[Path], counts: list[int], objs, fp: str, ranks: bool = False) -> bool:
    """Both side files are on disk and were written for exactly these parts, objectives and
    fingerprint, with every row's rank when ``ranks`` (what a re-run of a finished sweep checks
    before rewriting them)."""
    for name, key in ((PARETO_FILE, _PARETO_KEY), (FRONT_FILE, _FRONT_KEY)):
        path = Path(root) / name
        try:
            meta = _side_file_meta(pq.read_schema(path), key)
        except (pa.ArrowException, OSError, ValueError):
            return False
        if not _side_file_matches(path, meta, files, counts, objs, fp, None, warn=False):
            return False
        if ranks and key == _PARETO_KEY and meta.get("ranks", "all") != "all":
            return False
    return True


def write_pareto_file(root: Path, files: list[Path], counts: list[int], rows: np.ndarray, flags: Flags,
                      objs, fp: str) -> Path:
    """Write :data:`PARETO_FILE` for parts ``files`` (``counts`` rows each) of the dataset of
    fingerprint ``fp``: one row per usable row (``rows``, global row numbers, ascending) with its
    is_pareto and pareto_rank from ``flags``; without ranks (``flags.ranks`` None) pareto_rank is
    0 on the front and null past it, and the metadata says ``"ranks": "front"``."""
    starts = np.cumsum([0] + list(counts))
    part = np.searchsorted(starts, rows, side="right") - 1
    meta = {**_side_meta(files, counts, objs, fp), "rows": int(rows.size),
            "ranks": "front" if flags.ranks is None else "all"}
    names = string_array([f.name for f in files])
    if flags.ranks is None:
        rank = num_array(np.zeros(rows.size, dtype=np.int64), pa.int64(), valid=flags.front[rows])
    else:
        rank = num_array(flags.ranks[rows], pa.int64())
    table = pa.Table.from_arrays([pa.DictionaryArray.from_arrays(num_array(part, pa.int32()), names),
                                  num_array(rows - starts[part], pa.int64()), bool_array(flags.is_pareto[rows]),
                                  rank], names=["part", "row", "is_pareto", "pareto_rank"])
    table = table.replace_schema_metadata({_PARETO_KEY: json.dumps(meta).encode()})
    return write_table(table, Path(root) / PARETO_FILE)


def _side_file_meta(schema: pa.Schema, key: bytes):
    raw = (schema.metadata or {}).get(key)
    return json.loads(raw) if raw is not None else None


def read_pareto_file(root: Path, files: list[Path], counts: list[int], objs, fp: str,
                     digests: list[str]) -> Flags | None:
    """The :class:`Flags` of every row from :data:`PARETO_FILE` (``ranks`` None when it holds the
    front only), or None when it is absent, unreadable, out of range or was written for other
    parts, objectives or another dataset."""
    path = Path(root) / PARETO_FILE
    if not path.is_file() or objs is None:
        return None
    try:
        pf = pq.ParquetFile(path)
        meta = _side_file_meta(pf.schema_arrow, _PARETO_KEY)
        if not _side_file_matches(path, meta, files, counts, objs, fp, digests):
            return None
        t = pf.read()
        if t.num_rows != meta.get("rows"):
            raise ValueError("rows missing or added")
        if meta.get("ranks", "all") not in ("all", "front"):
            raise ValueError(f"ranks {meta.get('ranks')!r}")
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
        mask, usable, front = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        usable[rows] = True
        mask[rows] = to_numpy(t["is_pareto"])
        rank = np.nan_to_num(to_numpy(t["pareto_rank"]), nan=-1).astype(np.int64)
        front[rows] = rank == 0
        ranks = None
        if meta.get("ranks", "all") == "all":
            ranks = np.full(n, -1, dtype=np.int64)
            ranks[rows] = rank
    except (pa.ArrowException, OSError, KeyError, ValueError, TypeError, IndexError) as exc:
        warnings.warn(f"{path}: not used: unreadable ({type(exc).__name__}: {str(exc)[:100]}); the flags are "
                      "recomputed from the parts", stacklevel=5)
        return None
    return Flags(mask, front, usable, ranks)


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
