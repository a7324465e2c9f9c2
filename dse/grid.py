"""The exhaustive grid of a study's space, chunk by chunk, as a Parquet dataset.

Grid: every choice of a categorical knob; ``points`` values of a continuous one (geometric
for log ranges; every integer when there are no more than ``points``). Chunks of flat grid
indices are evaluated with bounded memory and written as one part file each; with
``shard=(I, N)`` (or SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT) only chunks c with
c % N == I are done. Part names are deterministic, so re-running a shard replaces its parts
and never duplicates them. is_pareto / pareto_rank are computed over the shard's rows (the
whole grid when unsharded); `dse pareto DIR` computes the front of the whole dataset.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .catalog.database import Database
from .errors import SpecError
from .evaluation import evaluate_study, objective_matrix
from .pareto import first_of_equal, pareto_mask, pareto_ranks
from .results.frame import results_frame
from .results.store import read_metadata, study_metadata, write_parquet
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
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"part-{si:05d}-of-{sn:05d}-"
    parts, objs, feas = [], [], []
    for j, c in enumerate(mine):
        start, stop = c * chunk_size, min(total, (c + 1) * chunk_size)
        flat = np.arange(start, stop, dtype=np.int64)
        idx = np.unravel_index(flat, shape)
        params = {k.name: vals[i] for (k, vals), i in zip(axes, idx)}
        keep = distinct_points(study, axes, idx, params, flat.size)
        if not keep.all():      # a knob that does not act is enumerated at its first value only
            flat = flat[keep]
            params = {name: v[keep] for name, v in params.items()}
        if not flat.size:
            continue
        designs, metrics = evaluate_study(study, params, flat.size, db, tech)
        df = results_frame(study, designs, metrics, params, trial=flat, sampler="grid", seed=None, pareto=False)
        objs.append(objective_matrix({o.metric: df[o.metric].to_numpy(np.float64, na_value=np.nan)
                                      for o in study.objectives}, study))
        feas.append(df["feasible"].to_numpy(bool))
        path = out_dir / f"{prefix}{c:06d}.parquet"
        write_parquet(df, path, meta)
        parts.append(path)
        if progress:
            sys.stderr.write(f"\r[sweep] shard {si}/{sn}: chunk {j + 1}/{len(mine)} ({stop - start} points)")
            sys.stderr.flush()
    if progress and mine:
        sys.stderr.write("\n")
    for stale in out_dir.glob(f"{prefix}*.parquet"):
        if parts and stale not in parts:
            stale.unlink()
    if parts:
        _write_pareto_flags(parts, np.concatenate(objs), np.concatenate(feas), study)
    return SweepResult(out_dir=out_dir, total_points=total, rows_written=sum(o.shape[0] for o in objs),
                       parts=parts, shard=(si, sn))


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


def _write_pareto_flags(parts: list[Path], values: np.ndarray, feasible: np.ndarray, study: StudySpec) -> None:
    """Front and ranks over all of this shard's rows, written back into each part atomically."""
    dirs = [o.direction for o in study.objectives]
    mask = first_of_equal(values, pareto_mask(values, dirs, feasible))     # one row per point of the front
    ranks = pareto_ranks(values, dirs, feasible)
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
        tmp = path.with_name("." + path.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        offset += n


__all__ = ["sweep", "grid_axes", "axis_values", "parse_shard", "shard_from_env", "SweepResult", "write_parquet"]
