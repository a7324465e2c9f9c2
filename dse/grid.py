"""The exhaustive grid of a study's space, chunk by chunk, as a Parquet dataset.

Grid: every choice of a categorical knob; ``points`` values of a continuous one (geometric
for log ranges; every integer when there are no more than ``points``). Chunks of flat grid
indices are evaluated with bounded memory and written as one part file each; with
``shard=(I, N)`` (or SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT) only chunks c with
c % N == I are done. Part names are deterministic and ``_manifest.json`` lists every part of
the grid, so a re-run does only the parts not on disk (a dataset interrupted by SIGTERM or
Ctrl-C is completed, never duplicated), and readers name the parts still missing.

Each part is written once: its rows become an Arrow table straight from numpy
(dse.results.table), encoded on a writer thread while the next chunk is evaluated. The parts
hold is_pareto / pareto_rank null; the shard that finds every part of the grid on disk writes the
global flags (front and non-dominated ranks over all rows, dse.pareto.front_flags on their
concatenation in file order) to ``_pareto.parquet``, from the objectives it kept per chunk and
the objective columns of parts other shards wrote, and the full rows of the front to
``_front.parquet`` (each chunk's non-dominated rows are kept as it is evaluated: the global front
is a subset of their union). ``load_results`` joins the flags; ``dse pareto DIR`` reads the front.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .catalog.database import Database
from .errors import SpecError
from .evaluation import evaluate_study
from .interrupt import stop_on_signals
from .pareto import pareto_mask
from .progress import Progress
from .results.arrow import num_array, usable_rows
from .results.store import (
    check_manifest,
    open_dataset,
    read_front_file,
    read_metadata,
    read_pareto_file,
    study_metadata,
    write_front_file,
    write_manifest,
    write_pareto_file,
    write_table,
)
from .results.table import results_table
from .study import Knob, StudySpec, open_study
from .study.space import active_masks

DEFAULT_CHUNK = 131_072


@dataclass
class SweepResult:
    out_dir: Path
    total_points: int
    rows_written: int
    parts: list[Path]
    shard: tuple[int, int]
    #: parts of this shard already on disk (not redone)
    skipped: int = 0
    #: the signal that stopped the sweep (15 SIGTERM, 2 SIGINT), 0 when it finished
    interrupted: int = 0
    #: why this shard wrote nothing (more shards than chunks), else ""
    note: str = ""


def axis_values(k: Knob, points: int) -> np.ndarray:
    """The grid values of one searched knob."""
    if k.choices:
        return np.array(k.choices, dtype=object if k.kind == "cat" else None)
    lo, hi = k.low, k.high
    if k.kind == "int":
        step = int(k.step or 1)
        every = np.arange(int(lo), int(hi) + 1, step)
        if every.size <= points:
            return every
        raw = np.geomspace(lo, hi, points) if k.log else np.linspace(lo, hi, points)
        return np.unique(np.round(raw).astype(np.int64))
    if k.step:
        vals = np.arange(lo, hi + 0.5 * k.step, k.step)
        if vals.size <= points:
            return vals
    return np.geomspace(lo, hi, points) if k.log else np.linspace(lo, hi, points)


def grid_axes(study: StudySpec, points: int) -> list[tuple[Knob, np.ndarray]]:
    return [(k, axis_values(k, points)) for k in study.searched]


def shard_from_env() -> tuple[int, int] | None:
    """(I, N) from SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT (offset by SLURM_ARRAY_TASK_MIN)."""
    tid, cnt = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_ARRAY_TASK_COUNT")
    if tid is None or cnt is None:
        return None
    try:
        i, n = int(tid) - int(os.environ.get("SLURM_ARRAY_TASK_MIN", "0")), int(cnt)
    except ValueError:
        raise SpecError(None, "SLURM_ARRAY_TASK_ID", tid, "expected integers in the SLURM array variables") from None
    return i, n


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' with 0 <= I < N."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise SpecError(None, "--shard", text, "expected I/N with integers 0 <= I < N") from None
    if not 0 <= i < n:
        raise SpecError(None, "--shard", text, "expected I/N with integers 0 <= I < N")
    return i, n


def auto_chunk_size(total: int, shards: int) -> int:
    """Rows per part when ``--chunk-size`` is not given: :data:`DEFAULT_CHUNK` (bounded memory), or
    fewer so that each of ``shards`` shards gets a chunk: min(DEFAULT_CHUNK, ceil(total / shards)).

    >>> auto_chunk_size(93_312, 1), auto_chunk_size(93_312, 64), auto_chunk_size(10_000_000, 8)
    (93312, 1458, 131072)
    """
    return max(1, min(DEFAULT_CHUNK, -(-int(total) // max(1, int(shards)))))


@dataclass(frozen=True)
class GridPlan:
    """How a study's grid is cut: points, chunks of ``chunk_size`` rows, and the shards that get work."""
    total: int
    chunk_size: int
    chunks: int
    shards: int

    @property
    def busy_shards(self) -> int:
        """Shards with at least one chunk (shard I does chunks c with c % N == I)."""
        return min(self.chunks, self.shards)


def grid_plan(study: StudySpec, points: int | None = None, shards: int = 1, chunk_size: int | None = None) -> GridPlan:
    """The :class:`GridPlan` of ``study`` at ``points`` (default the study's) for ``shards`` shards."""
    points = study.grid_points if points is None else points
    if points < 2:
        raise SpecError(None, "--points", points, "expected an integer >= 2")
    total = int(np.prod([v.size for _, v in grid_axes(study, points)], dtype=np.int64))
    size = auto_chunk_size(total, shards) if chunk_size is None else chunk_size
    if not isinstance(size, int) or size < 1:
        raise SpecError(None, "--chunk-size", chunk_size, "expected an integer >= 1")
    return GridPlan(total, size, -(-total // size), shards)


def sweep(study: StudySpec | str | Path, *, points: int | None = None, shard: tuple[int, int] | None = None,
          out: str | Path | None = None, chunk_size: int | None = None, progress: bool = True,
          db: Database | None = None) -> SweepResult:
    """Evaluate this shard's chunks of the grid and write one part file per chunk (of
    :func:`auto_chunk_size` rows unless ``chunk_size`` is given). A shard with no chunk (more
    shards than chunks) writes nothing and says so in ``SweepResult.note``."""
    study, db, tech = open_study(study, db)
    points = study.grid_points if points is None else points
    if points < 2:
        raise SpecError(None, "--points", points, "expected an integer >= 2")
    shard = shard or shard_from_env() or (0, 1)
    si, sn = shard
    if not 0 <= si < sn:
        raise SpecError(None, "shard", f"{si}/{sn}", "expected 0 <= I < N")
    out_dir = Path(out) if out else Path(study.output).with_suffix("").with_name(Path(study.output).stem + "-sweep")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise SpecError(None, "--chunk-size", chunk_size, "expected an integer >= 1")
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape, dtype=np.int64))
    chunk_size = auto_chunk_size(total, sn) if chunk_size is None else chunk_size
    n_chunks = -(-total // chunk_size)
    mine = list(range(si, n_chunks, sn))
    meta = study_metadata(study, db, tech, sampler="grid", seed=None,
                          grid={"points": points, "shape": list(shape), "total": total,
                                "axes": {k.name: np.asarray(v).tolist() for k, v in axes},
                                "shard": [si, sn], "chunk_size": chunk_size})
    _check_existing(out_dir, meta)
    manifest = {"kind": "sweep", "study": study.name, "points": points, "total": total, "chunk_size": chunk_size,
                "shards": sn, "parts": [part_name(c, sn) for c in range(n_chunks)]}
    check_manifest(out_dir, manifest)
    write_manifest(out_dir, manifest)
    todo = [c for c in mine if not (out_dir / part_name(c, sn)).is_file()]
    parts = [out_dir / part_name(c, sn) for c in mine if c not in todo]
    skipped = len(parts)
    bar = Progress(len(mine), skipped, unit="parts", label=f"dse sweep shard {si}/{sn}", enabled=progress and bool(mine))
    objs = [(o.metric, o.direction) for o in study.objectives]
    usable: dict[str, Usable] = {}          # part name -> its usable rows and its front's full rows
    schema, now = None, np.datetime64(datetime.now(UTC).replace(tzinfo=None), "us")
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dse-parquet")   # encoding overlaps evaluation
    pending: list[tuple[Future, Path]] = []
    with stop_on_signals() as stop:
        try:
            for c in todo:
                if stop.requested:
                    break
                start, stop_i = c * chunk_size, min(total, (c + 1) * chunk_size)
                flat, idx, coded, masks = grid_chunk(study, axes, shape, start, stop_i)
                designs, metrics = evaluate_study(study, coded, flat.size, db, tech, masks=masks)
                codes = {k.name: (i, vals) for (k, vals), i in zip(axes, idx) if k.kind == "cat"}
                table = results_table(study, designs, metrics, coded, schema, trial=flat,
                                      sampler="grid", seed=None, codes=codes, now=now, metadata=meta)
                schema = table.schema           # the first chunk's, for every chunk
                path = out_dir / part_name(c, sn)
                usable[path.name] = Usable.of(table, objs)
                while pending and (len(pending) > 1 or pending[0][0].done()):   # at most 2 tables in flight
                    parts.append(_finish(pending.pop(0), bar))
                pending.append((writer.submit(write_table, table, path), path))
                del table, designs, metrics
            while pending:
                parts.append(_finish(pending.pop(0), bar))
        except KeyboardInterrupt:   # a second signal: the parts being written are not on disk
            stop.signum = stop.signum or 2
        finally:
            writer.shutdown(wait=True, cancel_futures=True)
            parts += [p for f, p in pending if f.done() and not f.cancelled() and f.exception() is None]
            bar.close()
        if not stop.signum and objs:
            _write_side_files(out_dir, manifest["parts"], usable, objs)
    rows = sum(usable[p.name].rows for p in parts if p.name in usable)     # the parts this run wrote
    by = "shard 0" if n_chunks == 1 else f"shards 0-{n_chunks - 1}"
    note = "" if mine else (f"shard {si}/{sn} has no work: the grid has {n_chunks} chunk{'s' if n_chunks != 1 else ''} "
                            f"({total:,} points in chunks of {chunk_size:,} rows), done by {by}; "
                            f"an array of {n_chunks} element{'s' if n_chunks != 1 else ''} is enough "
                            f"(dse sweep STUDY --plan {sn} says how a grid is cut)")
    return SweepResult(out_dir=out_dir, total_points=total, rows_written=rows, parts=sorted(parts),
                       shard=(si, sn), skipped=skipped, interrupted=stop.signum, note=note)


def _finish(job: tuple[Future, Path], bar: Progress) -> Path:
    path = job[0].result()          # a writer's exception is raised here
    bar.update(1)
    return path


@dataclass
class Usable:
    """What the side files need of one part: its row count, its usable rows (feasible, finite
    objectives) and their objective values, and the full rows of its own front (``front`` local
    row numbers, ascending; ``front_table`` their rows; None for a part this run did not write)."""
    rows: int
    usable: np.ndarray
    values: np.ndarray
    front: np.ndarray
    front_table: pa.Table | None = None

    @classmethod
    def of(cls, table: pa.Table, objs, keep_rows: bool = True) -> Usable:
        vals, ok = usable_rows(table, objs)
        front = np.flatnonzero(pareto_mask(vals, [d for _, d in objs], feasible=ok))
        rows = table.take(num_array(front, pa.int64())) if keep_rows else None
        return cls(table.num_rows, np.flatnonzero(ok), vals[ok], front, rows)


def _write_side_files(out_dir: Path, names: list[str], usable: dict[str, Usable], objs) -> None:
    """Once every part of the grid is on disk (the last shard to finish does it), write the global
    Pareto flags (dse.results.store.PARETO_FILE) and the front's full rows (FRONT_FILE), from what
    this run kept of its parts and, for the parts other shards wrote, their objective and feasible
    columns (read one part at a time) and their front rows. The parts' own is_pareto and
    pareto_rank stay null."""
    files = [out_dir / n for n in sorted(names)]
    if not all(f.is_file() for f in files):
        return
    if not all(f.name in usable for f in files):
        counts = [pq.read_metadata(f).num_rows for f in files]
        if (read_pareto_file(out_dir, files, counts, objs) is not None
                and read_front_file(out_dir, files, counts, objs, []) is not None):
            return                              # a re-run with nothing new: the side files are written
    parts = [usable.get(f.name) or Usable.of(pq.ParquetFile(f).read(columns=[m for m, _ in objs] + ["feasible"]),
                                             objs, keep_rows=False) for f in files]
    counts = [u.rows for u in parts]
    starts = np.cumsum([0] + counts)
    rows = np.concatenate([s + u.usable for s, u in zip(starts, parts)])
    write_pareto_file(out_dir, files, counts, rows, np.concatenate([u.values for u in parts]), objs)
    # the global front: the non-dominated rows of the union of the parts' fronts
    cand = np.concatenate([s + u.front for s, u in zip(starts, parts)])
    cand_vals = np.concatenate([u.values[np.searchsorted(u.usable, u.front)] for u in parts])
    front = cand[pareto_mask(cand_vals, [d for _, d in objs])]
    tables = []
    for i, u in enumerate(parts):
        local = front[(front >= starts[i]) & (front < starts[i + 1])] - starts[i]
        if not local.size:
            continue
        if u.front_table is not None:
            tables.append(u.front_table.take(num_array(np.searchsorted(u.front, local), pa.int64())))
        else:
            tables += [t for _, t in open_dataset(out_dir, [files[i]]).take(local, None)]
    schema = tables[0].schema if tables else pq.read_schema(files[0])
    table = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
    # a sweep's rows are distinct designs (duplicate_of null), so its designs are its rows
    write_front_file(out_dir, files, counts, front, table, objs, designs=int(starts[-1]))


def part_name(chunk: int, shards: int) -> str:
    """The part file of grid chunk ``chunk`` (done by shard chunk % shards)."""
    return f"part-{chunk % shards:05d}-of-{shards:05d}-{chunk:06d}.parquet"


def distinct_points(study: StudySpec, axes, idx, params: dict, n: int) -> np.ndarray:
    """Grid points that are distinct designs: every inactive knob (dse.study.space) at its
    first axis value, so no design is enumerated twice (row by row; the sweep's grid_chunk gives
    the same rows faster)."""
    masks = active_masks(study, params, n)
    keep = np.ones(n, dtype=bool)
    for (k, _), i in zip(axes, idx):
        if k.name in masks:
            keep &= masks[k.name] | (i == 0)
    return keep


def grid_chunk(study: StudySpec, axes, shape: tuple, start: int, stop: int):
    """The distinct designs (distinct_points) among flat grid indices [start, stop): (flat
    indices, per-knob axis indices, knob values with categorical knobs as codes into their
    choices, the activity masks of dse.study.space). The same rows and masks as unravel_index +
    distinct_points + active_masks: each knob's indices over a run of flat indices are runs of
    its axis (``axis_run``: repeats and tiles, no division per row); the masks are computed once
    per combination of the knobs they read (found by probing active_masks with one row; those
    combinations index a small table, or are sorted when the table is larger than the chunk) and gathered."""
    n = stop - start
    idx = [axis_run(j, shape, start, stop) for j in range(len(shape))]
    probe = _Reads({k.name: i[:1] if k.kind == "cat" else vals[i[:1]] for (k, vals), i in zip(axes, idx)})
    active_masks(study, probe, 1)
    ctl = [j for j, (k, _) in enumerate(axes) if k.name in probe.read]
    if ctl:
        key = np.zeros(n, dtype=np.int64)
        for j in ctl:                                   # ravel_multi_index, C order
            key *= shape[j]
            key += idx[j]
        size = int(np.prod([shape[j] for j in ctl], dtype=np.int64))
        if size > 4 * n:        # a table larger than the chunk: sort instead
            _, reps, inv = np.unique(key, return_index=True, return_inverse=True)
            inv = inv.reshape(-1)
        else:
            row = np.full(size, -1, dtype=np.int64)
            row[key] = np.arange(n)     # one row of each combination present (any: they have the same masks)
            combos = np.flatnonzero(row >= 0)
            lut = np.zeros(size, dtype=np.int64)
            lut[combos] = np.arange(combos.size)
            inv, reps = lut[key], row[combos]
    else:
        inv, reps = np.zeros(n, dtype=np.int64), np.zeros(1, dtype=np.int64)
    small = active_masks(study, {k.name: i[reps] if k.kind == "cat" else vals[i[reps]]
                                 for (k, vals), i in zip(axes, idx)}, reps.size)
    keep = np.ones(n, dtype=bool)
    for j, (k, _) in enumerate(axes):
        if k.name in small:
            keep &= small[k.name][inv] | (idx[j] == 0)
    flat = np.arange(start, stop, dtype=np.int64)
    if not keep.all():      # a knob that does not act is enumerated at its first value only
        flat, inv, idx = flat[keep], inv[keep], [i[keep] for i in idx]
    coded = {k.name: i if k.kind == "cat" else np.take(vals, i) for (k, vals), i in zip(axes, idx)}
    return flat, tuple(idx), coded, {name: m[inv] for name, m in small.items()}


def axis_run(j: int, shape: tuple, start: int, stop: int) -> np.ndarray:
    """np.unravel_index(np.arange(start, stop), shape)[j] without a division per row: axis j
    holds each index for ``stride`` consecutive flat indices (the product of the later axes),
    so its indices are the period ``repeat(arange(size), stride)`` tiled, or, when a period is
    longer than the run, a few blocks repeated."""
    size, stride = int(shape[j]), int(np.prod(shape[j + 1:], dtype=np.int64))
    period, n = size * stride, stop - start
    if period <= n:
        pattern = np.repeat(np.arange(size, dtype=np.int64), stride)
        off = start % period
        return np.tile(pattern, -(-(off + n) // period))[off:off + n]
    b0, b1 = start // stride, (stop - 1) // stride
    counts = np.full(b1 - b0 + 1, stride, dtype=np.int64)
    counts[0] -= start - b0 * stride
    counts[-1] -= (b1 + 1) * stride - stop
    return np.repeat(np.arange(b0, b1 + 1, dtype=np.int64) % size, counts)


class _Reads(dict):
    """A mapping that records which keys were looked up."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read: set = set()

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)


def _check_existing(out_dir: Path, meta: dict) -> None:
    """Refuse a directory that holds parts of another grid, study or shard count: mixing them
    would duplicate or misnumber rows. The same grid and shard count may be re-run."""
    existing = sorted(out_dir.glob("part-*.parquet")) if out_dir.is_dir() else []
    if not existing:
        return
    old = read_metadata(existing[0])
    same = (old.get("study", {}).get("name") == meta["study"]["name"]
            and {k: v for k, v in (old.get("grid") or {}).items() if k != "shard"}
            == {k: v for k, v in meta["grid"].items() if k != "shard"}
            and (old.get("grid") or {}).get("shard", [0, 0])[1] == meta["grid"]["shard"][1])
    if not same:
        raise SpecError(None, "--out", str(out_dir), "holds parts of another study, grid (points, axes, "
                        "chunk size) or shard count; use a new directory or delete it")


__all__ = ["sweep", "grid_axes", "axis_values", "parse_shard", "shard_from_env", "SweepResult", "part_name",
           "auto_chunk_size", "grid_plan", "GridPlan"]
