"""The exhaustive grid of a study's space, chunk by chunk, as a Parquet dataset.

Grid: every choice of a categorical knob; ``points`` values of a continuous one (geometric
for log ranges; every integer when there are no more than ``points``). Chunks of flat grid
indices are evaluated with bounded memory and written as one part file each; with
``shard=(I, N)`` (or SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT) only chunks c with
c % N == I are done. Part names are deterministic and ``_manifest.json`` lists every part of
the grid, so a re-run does only the parts not on disk (a dataset interrupted by SIGTERM or
Ctrl-C is completed, never duplicated), and readers name the parts still missing. Once all of
a shard's parts are on disk, is_pareto / pareto_rank are written into them over the shard's
rows (the whole grid when unsharded); ``load_results`` / ``dse pareto DIR`` recompute them over
the whole dataset, so per-shard flags are never taken for global ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .catalog.database import Database
from .errors import SpecError
from .evaluation import evaluate_study
from .interrupt import stop_on_signals
from .pareto import front_flags
from .progress import Progress
from .results.frame import results_frame
from .results.store import check_manifest, read_metadata, study_metadata, write_manifest, write_parquet
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


def sweep(study: StudySpec | str | Path, *, points: int | None = None, shard: tuple[int, int] | None = None,
          out: str | Path | None = None, chunk_size: int = DEFAULT_CHUNK, progress: bool = True,
          db: Database | None = None) -> SweepResult:
    """Evaluate this shard's chunks of the grid and write one part file per chunk."""
    study, db, tech = open_study(study, db)
    points = study.grid_points if points is None else points
    if points < 2:
        raise SpecError(None, "--points", points, "expected an integer >= 2")
    shard = shard or shard_from_env() or (0, 1)
    si, sn = shard
    if not 0 <= si < sn:
        raise SpecError(None, "shard", f"{si}/{sn}", "expected 0 <= I < N")
    out_dir = Path(out) if out else Path(study.output).with_suffix("").with_name(Path(study.output).stem + "-sweep")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise SpecError(None, "--chunk-size", chunk_size, "expected an integer >= 1")
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape, dtype=np.int64))
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
    parts, rows = [out_dir / part_name(c, sn) for c in mine if c not in todo], 0
    skipped = len(parts)
    bar = Progress(len(mine), skipped, unit="parts", label=f"dse sweep shard {si}/{sn}", enabled=progress)
    with stop_on_signals() as stop:
        try:
            for c in todo:
                if stop.requested:
                    break
                start, stop_i = c * chunk_size, min(total, (c + 1) * chunk_size)
                flat = np.arange(start, stop_i, dtype=np.int64)
                idx = np.unravel_index(flat, shape)
                # categorical knobs evaluate as their axis index (a code into their choices): no strings
                coded = {k.name: i if k.kind == "cat" else vals[i] for (k, vals), i in zip(axes, idx)}
                keep = distinct_points(study, axes, idx, coded, flat.size)
                if not keep.all():      # a knob that does not act is enumerated at its first value only
                    flat, idx = flat[keep], tuple(i[keep] for i in idx)
                    coded = {name: v[keep] for name, v in coded.items()}
                params = {k.name: vals[i] for (k, vals), i in zip(axes, idx)}
                designs, metrics = evaluate_study(study, coded, flat.size, db, tech)
                df = results_frame(study, designs, metrics, params, trial=flat, sampler="grid", seed=None,
                                   pareto=False)
                parts.append(write_parquet(df, out_dir / part_name(c, sn), meta))
                rows += flat.size
                bar.update(1)
        except KeyboardInterrupt:   # a second signal: the part being written is not on disk
            stop.signum = stop.signum or 2
        finally:
            bar.close()
        if not stop.signum and (todo or not _has_flags(parts)):
            _write_pareto_flags(sorted(parts), study)
    return SweepResult(out_dir=out_dir, total_points=total, rows_written=rows, parts=sorted(parts),
                       shard=(si, sn), skipped=skipped, interrupted=stop.signum)


def part_name(chunk: int, shards: int) -> str:
    """The part file of grid chunk ``chunk`` (done by shard chunk % shards)."""
    return f"part-{chunk % shards:05d}-of-{shards:05d}-{chunk:06d}.parquet"


def distinct_points(study: StudySpec, axes, idx, params: dict, n: int) -> np.ndarray:
    """Grid points that are distinct designs: every inactive knob (dse.study.space) at its
    first axis value, so no design is enumerated twice."""
    masks = active_masks(study, params, n)
    keep = np.ones(n, dtype=bool)
    for (k, _), i in zip(axes, idx):
        if k.name in masks:
            keep &= masks[k.name] | (i == 0)
    return keep


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


def _has_flags(parts: list[Path]) -> bool:
    """Whether the shard's parts carry Pareto flags already (written once the shard was complete)."""
    if not parts:
        return True
    col = pq.read_table(parts[0], columns=["pareto_rank", "feasible"])
    return not (col["feasible"].to_numpy().any() and col["pareto_rank"].null_count == col.num_rows)


def _write_pareto_flags(parts: list[Path], study: StudySpec) -> None:
    """Front and ranks over all of this shard's rows, written back into each part atomically."""
    if not parts:
        return
    names = [o.metric for o in study.objectives]
    tables = [pq.read_table(p, columns=names + ["feasible"]) for p in parts]
    values = np.concatenate([np.column_stack([t[m].to_numpy(zero_copy_only=False) for m in names])
                             .astype(np.float64) for t in tables])
    feasible = np.concatenate([t["feasible"].to_numpy(zero_copy_only=False) for t in tables]).astype(bool)
    dirs = [o.direction for o in study.objectives]
    mask, ranks = front_flags(values, dirs, feasible)     # one flagged row per point of the front
    offset = 0
    for path in parts:
        table = pq.read_table(path)
        n = table.num_rows
        r = ranks[offset:offset + n]
        usable = r >= 0
        is_p = pa.array(mask[offset:offset + n], mask=~usable, type=pa.bool_())
        rk = pa.array(r, mask=~usable, type=pa.int64())
        table = table.set_column(table.schema.get_field_index("is_pareto"), "is_pareto", is_p)
        table = table.set_column(table.schema.get_field_index("pareto_rank"), "pareto_rank", rk)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        offset += n


__all__ = ["sweep", "grid_axes", "axis_values", "parse_shard", "shard_from_env", "SweepResult", "write_parquet", "part_name"]
