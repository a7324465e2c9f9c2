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
global flags to ``_pareto.parquet`` (the front over all rows in file order: is_pareto, pareto_rank
0; every row's rank only when asked, as ranking millions of rows costs more than evaluating them),
from the objectives it kept per chunk and the objective columns of parts other shards wrote, and
the full rows of the front to ``_front.parquet`` (each chunk's non-dominated rows are kept as it is
evaluated: the global front is the front of their union). ``load_results`` joins the flags (and
ranks the rows when ``pareto_rank`` is read); ``dse pareto DIR`` reads the front.
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..catalog.database import Database
from ..errors import SpecError
from ..evaluation.designs import evaluate_study
from ..process.interrupt import stop_on_signals
from ..process.progress import Progress
from ..process.slurm import shard_from_env
from ..results.arrow import num_array, usable_rows
from ..results.dataset import open_dataset
from ..results.guard import check_writable
from ..results.manifest import check_manifest, dataset_conflict, dataset_manifest, write_manifest
from ..results.pareto import pareto_mask
from ..results.side_files import expand_flags, side_files_current, write_front_file, write_pareto_file
from ..results.store import read_metadata, study_metadata, write_table
from ..results.table import results_table
from ..study import Knob, StudySpec, open_study
from ..study.parse import GRID_POINTS
from ..study.space import active_masks

DEFAULT_CHUNK = 131_072
#: the largest grid a sweep enumerates: 10^10 rows at ~1 us a row is about 3 hours of one core;
#: a larger one is a typo in --points or a knob left free
MAX_GRID_POINTS = 10**10
#: rows per part file (a chunk's arrays take about 1 KB a row while it is evaluated)
MAX_CHUNK = 10_000_000
#: part files of one dataset (the manifest names each one)
MAX_PARTS = 1_000_000


@dataclass
class SweepResult:
    out_dir: Path
    #: points of the whole grid (every shard's)
    total_points: int
    #: distinct designs in the parts this run wrote
    rows_written: int
    parts: list[Path]
    shard: tuple[int, int]
    #: parts of this shard already on disk (not redone)
    skipped: int = 0
    #: the signal that stopped the sweep (15 SIGTERM, 2 SIGINT), 0 when it finished
    interrupted: int = 0
    #: why this shard wrote nothing (more shards than chunks), else ""
    note: str = ""
    #: grid points of the parts this run wrote (a shard's share of total_points, less parts already there)
    points_written: int = 0


def _stepped(k: Knob) -> int | None:
    """How many values a knob's step gives (low, low + step, ... up to high), None without a step."""
    if k.kind == "int":
        return (int(k.high) - int(k.low)) // int(k.step or 1) + 1
    return math.ceil((k.high + 0.5 * k.step - k.low) / k.step) if k.step else None


def axis_size(k: Knob, points: int) -> int:
    """The number of grid values of one searched knob (:func:`axis_values`), without building them
    (an integer knob rounded to fewer distinct values counts as ``points``: an upper bound)."""
    if k.choices:
        return len(k.choices)
    n = _stepped(k)
    return n if n is not None and n <= points else points


def axis_values(k: Knob, points: int) -> np.ndarray:
    """The grid values of one searched knob."""
    if k.choices:
        return np.array(k.choices, dtype=object if k.kind == "cat" else None)
    lo, hi = k.low, k.high
    n = _stepped(k)
    if k.kind == "int":
        if n <= points:
            return np.arange(int(lo), int(hi) + 1, int(k.step or 1))
        raw = np.geomspace(lo, hi, points) if k.log else np.linspace(lo, hi, points)
        return np.unique(np.round(raw).astype(np.int64))
    if n is not None and n <= points:
        return np.arange(lo, hi + 0.5 * k.step, k.step)
    return np.geomspace(lo, hi, points) if k.log else np.linspace(lo, hi, points)


def grid_axes(study: StudySpec, points: int) -> list[tuple[Knob, np.ndarray]]:
    return [(k, axis_values(k, points)) for k in study.searched]


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
    from_flag = points is not None
    points = study.grid_points if points is None else points
    check_grid(study, points, chunk_size, shards, from_flag)
    total = math.prod(v.size for _, v in grid_axes(study, points))
    size = auto_chunk_size(total, shards) if chunk_size is None else chunk_size
    return GridPlan(total, size, -(-total // size), shards)


def check_grid(study: StudySpec, points: int, chunk_size: int | None, shards: int = 1,
               from_flag: bool = True) -> tuple[int, int]:
    """Refuse grid points outside GRID_POINTS, a grid of more than MAX_GRID_POINTS rows, a chunk
    size outside [1, MAX_CHUNK] or more than MAX_PARTS parts, before anything is built (the sizes
    are Python integers: no int64 wrap); returns the grid's size and the chunk size (``None``:
    :func:`auto_chunk_size` for ``shards``)."""
    where, field = (None, "--points") if from_flag else (study.path, "grid.points")
    GRID_POINTS.check(points, where, field)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int)
                                   or not 1 <= chunk_size <= MAX_CHUNK):
        raise SpecError(None, "--chunk-size", chunk_size, f"expected an integer in [1, {MAX_CHUNK:,}] (rows per part "
                        "file; dse.campaign.grid.MAX_CHUNK)")
    sizes = [axis_size(k, points) for k in study.searched]
    total = math.prod(sizes)
    if total > MAX_GRID_POINTS:
        raise SpecError(where, field, points, f"the grid would hold {total:.3g} points ({' x '.join(map(str, sizes))} "
                        f"over {len(sizes)} knobs), more than {MAX_GRID_POINTS:.0e} (dse.campaign.grid.MAX_GRID_POINTS): "
                        "lower the points or fix more knobs")
    if chunk_size is None:
        chunk_size = auto_chunk_size(total, shards)
    if -(-total // chunk_size) > MAX_PARTS:
        raise SpecError(None, "--chunk-size", chunk_size, f"the grid's {total:,} points would make "
                        f"{-(-total // chunk_size):,} part files, more than {MAX_PARTS:,} (dse.campaign.grid.MAX_PARTS): give a "
                        "larger --chunk-size")
    return total, chunk_size


@dataclass
class SweepPlan:
    """A sweep's grid, output and manifest, checked (:func:`plan_sweep`)."""
    out_dir: Path
    axes: list
    shape: tuple
    total: int
    n_chunks: int
    chunk_size: int
    meta: dict
    manifest: dict


def plan_sweep(study: StudySpec, db, tech, *, points: int | None, shard: tuple[int, int], out,
               chunk_size: int | None, force: bool = False) -> SweepPlan:
    """Check the grid (:func:`check_grid`), the output directory (writable; another dataset there
    refused, naming what differs, or cleared with ``force``) and write the manifest: all before
    any chunk is evaluated."""
    from_flag = points is not None
    points = study.grid_points if points is None else points
    si, sn = shard
    check_grid(study, points, chunk_size, sn, from_flag)
    if not 0 <= si < sn:
        raise SpecError(None, "shard", f"{si}/{sn}", "expected 0 <= I < N")
    out_dir = Path(out) if out else Path(study.output).with_suffix("").with_name(Path(study.output).stem + "-sweep")
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = math.prod(shape)
    chunk_size = auto_chunk_size(total, sn) if chunk_size is None else chunk_size
    n_chunks = -(-total // chunk_size)
    meta = study_metadata(study, db, tech, sampler="grid", seed=None,
                          grid={"points": points, "shape": list(shape), "total": total,
                                "axes": {k.name: np.asarray(v).tolist() for k, v in axes},
                                "shard": [si, sn], "chunk_size": chunk_size})
    manifest = dataset_manifest("sweep", meta, points=points, total=total, chunk_size=chunk_size, shards=sn,
                                parts=[part_name(c, sn) for c in range(n_chunks)])
    check_writable(out_dir, "--out", directory=True)       # before any work
    check_manifest(out_dir, manifest, force=force, keep=lambda m, _rows: _same_grid(m, meta),
                   why=dataset_conflict(out_dir, manifest) or _grid_conflict(out_dir, meta))
    write_manifest(out_dir, manifest)
    return SweepPlan(out_dir, axes, shape, total, n_chunks, chunk_size, meta, manifest)


def plan_command(study: StudySpec, shards: int, points: int | None, chunk_size: int | None) -> str:
    """The `dse sweep --plan` that shows how this grid is cut for ``shards`` (the flags given, quoted)."""
    import shlex
    flags = (f" --points {points}" if points is not None else "") + \
        (f" --chunk-size {chunk_size}" if chunk_size is not None else "")
    return f"dse sweep {shlex.quote(str(study.path or 'STUDY'))} --plan {shards}{flags}"


def prepare_sweep(study: StudySpec | str | Path, *, points: int | None = None, shards: int = 1, out=None,
                  chunk_size: int | None = None, force: bool = False, db: Database | None = None) -> Path:
    """What every shard of a sweep checks first, done once (dse.campaign.on_dask before it submits the
    shards as Dask tasks); returns the dataset directory."""
    study, db, tech = open_study(study, db)
    return plan_sweep(study, db, tech, points=points, shard=(0, shards), out=out, chunk_size=chunk_size,
                      force=force).out_dir


def sweep(study: StudySpec | str | Path, *, points: int | None = None, shard: tuple[int, int] | None = None,
          out: str | Path | None = None, chunk_size: int | None = None, progress: bool = True,
          db: Database | None = None, force: bool = False, ranks: bool = False) -> SweepResult:
    """Evaluate this shard's chunks of the grid and write one part file per chunk (of
    :func:`auto_chunk_size` rows unless ``chunk_size`` is given; a chunk with no distinct design is
    an empty part). A shard with no chunk (more shards than chunks) writes nothing and says so in
    ``SweepResult.note``. A directory that holds another dataset (another fingerprint,
    grid or shard count) is refused, naming what differs, or with ``force`` cleared of it first.
    The side files hold the front; ``ranks`` also stores every feasible row's non-dominated rank
    (else load_results computes them when asked: on millions of rows they cost more than the sweep)."""
    study, db, tech = open_study(study, db)
    shard = shard or shard_from_env() or (0, 1)
    si, sn = shard
    plan = plan_sweep(study, db, tech, points=points, shard=shard, out=out, chunk_size=chunk_size, force=force)
    out_dir, axes, shape, total, meta, manifest = plan.out_dir, plan.axes, plan.shape, plan.total, plan.meta, \
        plan.manifest
    chunk_given = chunk_size is not None
    chunk_size, n_chunks = plan.chunk_size, plan.n_chunks
    mine = list(range(si, n_chunks, sn))
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
                if flat.size:
                    table = _chunk_table(study, axes, flat, idx, coded, masks, schema, db, tech, now, meta)
                else:               # every point of the chunk repeats a design of another chunk: an empty part
                    if schema is None:
                        schema = _chunk_table(study, axes, *grid_chunk(study, axes, shape, 0, 1), None, db, tech,
                                              now, meta).schema
                    table = schema.empty_table()
                schema = table.schema           # the first chunk's, for every chunk
                path = out_dir / part_name(c, sn)
                usable[path.name] = Usable.of(table, objs)
                while pending and (len(pending) > 1 or pending[0][0].done()):   # at most 2 tables in flight
                    parts.append(_finish(pending.pop(0), bar))
                pending.append((writer.submit(write_table, table, path), path))
                del table
            while pending:
                parts.append(_finish(pending.pop(0), bar))
        except KeyboardInterrupt:   # a second signal: the parts being written are not on disk
            stop.signum = stop.signum or 2
        finally:
            writer.shutdown(wait=True, cancel_futures=True)
            parts += [p for f, p in pending if f.done() and not f.cancelled() and f.exception() is None]
            bar.close()
        if not stop.signum and objs:
            _write_side_files(out_dir, manifest["parts"], usable, objs, meta["fingerprint"], ranks)
    rows = sum(usable[p.name].rows for p in parts if p.name in usable)     # the parts this run wrote
    written = {p.name for p in parts if p.name in usable}
    points_done = sum(min(total, (c + 1) * chunk_size) - c * chunk_size for c in todo if part_name(c, sn) in written)
    by = "shard 0" if n_chunks == 1 else f"shards 0-{n_chunks - 1}"
    note = "" if mine else (f"shard {si}/{sn} has no work: the grid has {n_chunks} chunk{'s' if n_chunks != 1 else ''} "
                            f"({total:,} points in chunks of {chunk_size:,} rows), done by {by}; "
                            f"an array of {n_chunks} element{'s' if n_chunks != 1 else ''} is enough "
                            f"(`{plan_command(study, sn, points, chunk_size if chunk_given else None)}` says how "
                            "the grid is cut)")
    return SweepResult(out_dir=out_dir, total_points=total, rows_written=rows, parts=sorted(parts),
                       shard=(si, sn), skipped=skipped, interrupted=stop.signum, note=note, points_written=points_done)


def _chunk_table(study, axes, flat, idx, coded, masks, schema, db, tech, now, meta) -> pa.Table:
    """The results table of one chunk's distinct designs (grid_chunk's output)."""
    designs, metrics = evaluate_study(study, coded, flat.size, db, tech, masks=masks)
    codes = {k.name: (i, vals) for (k, vals), i in zip(axes, idx) if k.kind == "cat"}
    return results_table(study, designs, metrics, coded, schema, trial=flat, sampler="grid", seed=None, codes=codes,
                         now=now, metadata=meta)


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


def _write_side_files(out_dir: Path, names: list[str], usable: dict[str, Usable], objs, fp: str,
                      ranks: bool = False) -> None:
    """Once every part of the grid is on disk (the last shard to finish does it), write the global
    Pareto flags (dse.results.side_files.PARETO_FILE) and the front's full rows (FRONT_FILE), from what
    this run kept of its parts and, for the parts other shards wrote, their objective and feasible
    columns (read one part at a time) and their front rows. The parts' own is_pareto and
    pareto_rank stay null. The front is the front of the union of the parts' fronts (a row that its
    own part dominates is dominated globally): no pass over every row; every row's rank only with
    ``ranks``."""
    files = [out_dir / n for n in sorted(names)]
    if not all(f.is_file() for f in files):
        return
    if not all(f.name in usable for f in files):
        counts = [pq.read_metadata(f).num_rows for f in files]
        if side_files_current(out_dir, files, counts, objs, fp, ranks):
            return                              # a re-run with nothing new: the side files are written
    if not all(f.name in usable for f in files):
        open_dataset(out_dir, files)        # other shards' parts: one dataset, every column dse writes (DseError)
    parts = [usable.get(f.name) or Usable.of(pq.ParquetFile(f).read(columns=[m for m, _ in objs] + ["feasible"]),
                                             objs, keep_rows=False) for f in files]
    counts = [u.rows for u in parts]
    starts = np.cumsum([0] + counts)
    rows = np.concatenate([s + u.usable for s, u in zip(starts, parts)])
    # the global front: the non-dominated rows of the union of the parts' fronts
    cand = np.concatenate([s + u.front for s, u in zip(starts, parts)])
    cand_vals = np.concatenate([u.values[np.searchsorted(u.usable, u.front)] for u in parts])
    front = cand[pareto_mask(cand_vals, [d for _, d in objs])]
    flags = expand_flags(int(starts[-1]), rows, np.concatenate([u.values for u in parts]), [d for _, d in objs],
                         ranks=ranks, front=np.searchsorted(rows, front))
    write_pareto_file(out_dir, files, counts, rows, flags, objs, fp)
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
    write_front_file(out_dir, files, counts, front, table, objs, designs=int(starts[-1]), fp=fp)


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


def _grid_layout(meta: dict) -> dict:
    grid = meta.get("grid") if isinstance(meta.get("grid"), dict) else {}
    shard = grid.get("shard")
    return {**{k: v for k, v in grid.items() if k != "shard"},
            "shards": shard[1] if isinstance(shard, list) and len(shard) == 2 else None}


def _same_grid(old: dict, new: dict) -> bool:
    return _grid_layout(old) == _grid_layout(new)


def _grid_conflict(out_dir: Path, meta: dict) -> str | None:
    """Why the parts in ``out_dir`` belong to another grid (points, axes, chunk size) or shard
    count, naming what differs; None when they belong to this one (or there are none)."""
    existing = sorted(out_dir.glob("part-*.parquet")) if out_dir.is_dir() else []
    if not existing:
        return None
    try:
        old = read_metadata(existing[0])
    except (pa.ArrowException, OSError, ValueError) as exc:
        return f"{existing[0].name} is not a readable results part ({type(exc).__name__})"
    a, b = _grid_layout(old), _grid_layout(meta)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not diff:
        return None
    shown = "; ".join(f"{k} {a.get(k)} -> {b.get(k)}" if k != "axes" else "the grid's axes" for k in diff)
    return f"{existing[0].name}: {shown}"


__all__ = ["sweep", "prepare_sweep", "grid_axes", "axis_values", "parse_shard", "SweepResult", "part_name",
           "auto_chunk_size", "grid_plan", "GridPlan"]
