"""A results file or dataset directory read as one :class:`Dataset`, with pyarrow alone (no
pandas): the part files' footers checked (one study, one fingerprint, compatible columns),
columns read part by part, rows taken by number, the front, and is_pareto / pareto_rank over all
parts (a sweep's parts hold them null: from its side files when they cover exactly the parts
read, else recomputed from the objective and feasible columns; the parts' own flags, if any, are
per task). Opening an incomplete directory warns with the missing parts named.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DseError
from .arrow import num_array, to_numpy, usable_rows
from .checks import check_columns, check_trials
from .identity import describe, fingerprint, identity_of, part_digest
from .manifest import MANIFEST, incomplete_message, missing_parts, read_manifest
from .side_files import Flags, expand_flags, read_front_file, read_pareto_file
from .store import SCHEMA_VERSION, read_footer


def _part_files(root: Path) -> list[Path]:
    """``*.parquet`` files under ``root``, skipping files and folders named ``_*`` or ``.*``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        found += [Path(dirpath, f) for f in sorted(filenames)
                  if f.endswith(".parquet") and not f.startswith(("_", "."))]
    return found


def _study_name(meta: dict):
    study = meta.get("study")
    return study.get("name") if isinstance(study, dict) else None


def _warn_old_schema(root: Path, metas) -> None:
    """One warning per dataset (not per part file) when parts were written by an older schema."""
    versions = [int(m["schema_version"]) for m in metas if m.get("schema_version") is not None]
    old = [v for v in versions if v < SCHEMA_VERSION]
    if not old:
        return
    v = min(old)
    where = f"{root} ({len(old)} of {len(metas)} part files)" if len(metas) > 1 else f"{root}"
    if v < 2:
        why = ("written by a dse whose cost_usd of known parts was their street price, DRAM capacity decimal and "
               "KV cache at the weight dtype; re-run the study to compare with current results")
    elif v < 3:
        why = ("written before power_w of known parts came from the energy model synthesised chips get (it "
               "held the vendor TDP) and before expert parallel (ep); re-run the study to compare power with "
               "current results")
    elif v < 4:
        why = ("written by an older model (no overhead_ms_per_token; synthesised chips' links at class 'other' "
               "with 2 us, tensor parallel free past a scale-up domain, one kernel count for every layer, fp8 on "
               "parts without fp8 units slower than bf16; trees from alpha at the geometric rank profile, no "
               "rank_profile column, no tree costs beyond positions, k = auto capped at 8, no draft prefill "
               "under continuous batching; memory_required_gb then included the runtime reserve, now "
               "memory_reserve_gb; no energy per token, per-chip memory or busiest expert rank; SRAM power at its "
               "full aggregate bandwidth; no acceptance band and its source: tau_low, tau_high, "
               "speedup_low, speedup_high, spec_ms_per_token_low/_high, acceptance_source); "
               "re-run the study to compare with current results")
    elif v < 5:
        why = ("written before pipeline stages and SRAM layer regions (no tp, pp, draft_tp or infeasible_reason "
               "columns; SRAM parts one roofline over their whole bandwidth; all-reduces across domains by ring "
               "only; power above some parts' TDP, no prompt energy under static batching); re-run the study "
               "to compare with current results")
    else:
        why = ("written before the serving model (no sla_* or usd_per_mtok columns; continuous batching's TTFT "
               "then charged each arriving prompt a batch-1 prefill of its own); re-run the study to compare "
               "with current results")
    warnings.warn(f"{where}: results schema_version {v}: {why}", stacklevel=5)


class Dataset:
    """The part files of one results file or dataset directory, their footers checked (one study,
    compatible columns), read column by column."""

    def __init__(self, root: Path, files: list[Path]):
        self.root, self.files = root, files
        schemas, metas, counts = zip(*(read_footer(f) for f in files), strict=True)
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
                           "load each on its own, or re-run the study with --force to start a new dataset there (that deletes "
                           "these parts)")
        #: the dataset's fingerprint (dse.results.identity), the one every part carries
        self.fingerprint = prints[0]
        self._digests: list[str] | None = None
        for f, schema, meta in zip(files, schemas, metas, strict=True):
            check_columns(f, schema, meta)
        self._trials_checked = False
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

    def check_trials(self) -> None:
        """DseError when a trial is on two rows (dse.results.checks.check_trials), checked once."""
        if not self._trials_checked:
            check_trials(self.root, self.files, lambda f: to_numpy(self.read(["trial"], [f])["trial"]))
            self._trials_checked = True

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
        part by part (objective columns, ``feasible``, ``duplicate_of``; no pandas): each part's
        front kept, then the front of their union (a row dominated within its part is dominated
        globally). Feasibility and designs as dse.results.analysis's feasible_mask and
        count_designs; every row when there is no duplicate_of column."""
        from .pareto import pareto_mask
        self.check_trials()
        names, dirs = self.schema.names, [d for _, d in objs]
        cols = list(dict.fromkeys([m for m, _ in objs] + [c for c in ("feasible", "duplicate_of") if c in names]))
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
        """Distinct feasible designs (``feasible``; ``duplicate_of`` null), as
        dse.results.analysis.counts: two columns read part by part."""
        self.check_trials()
        cols = [c for c in ("feasible", "duplicate_of") if c in self.schema.names]
        total = 0
        for (_, t), n in zip(self.parts(cols), self.counts, strict=True):
            ok = to_numpy(t["feasible"]).astype(bool)     # null: False
            new = to_numpy(t["duplicate_of"].is_null()) if "duplicate_of" in cols else np.ones(n, bool)
            total += int((ok & new).sum())
        return total

    def front_table(self, objs, columns) -> tuple[np.ndarray, pa.Table, int, int]:
        """(row numbers, table of ``columns``, rows, distinct designs) of every non-dominated
        feasible row (ties included) under ``objs``, in row order: from :data:`FRONT_FILE` when it
        was written for exactly these parts and objectives, else :meth:`front_rows` and
        :meth:`take`. ``columns`` must hold the objectives (and feasible, trial) the caller needs."""
        got = read_front_file(self.root, self.files, self.counts, objs, columns, self.fingerprint, self.digests())
        if got is not None:         # the parts are the sweep's own (their footer digests): one row per trial
            self._trials_checked = True
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

    def global_flags(self, ranks: bool = True) -> Flags:
        """The Pareto :class:`~.side_files.Flags` of every row of the dataset: from
        :data:`PARETO_FILE` when it covers exactly these parts, else computed from the objective
        and feasible columns (over the concatenation in file order). Every row's rank only with
        ``ranks`` (a sweep's side file holds the front only: the ranks are then computed here)."""
        objs = self.objectives()
        side = read_pareto_file(self.root, self.files, self.counts, objs, self.fingerprint, self.digests())
        if side is not None and (side.ranks is not None or not ranks):
            return side
        self.check_trials()
        rows, vals = self.usable(objs)
        if side is None:
            return expand_flags(sum(self.counts), rows, vals, [d for _, d in objs], ranks=ranks)
        from .pareto import pareto_ranks
        full = np.full(sum(self.counts), -1, dtype=np.int64)
        full[rows] = pareto_ranks(vals, [d for _, d in objs])
        return side._replace(ranks=full)


def open_results(path) -> Dataset:
    """The :class:`Dataset` of a results file or directory: a directory with a manifest is the
    parts it lists (a warning names the missing ones, and the files it does not list, which are
    not read); a directory without one is its ``*.parquet`` files, refused when a folder in it
    holds a dataset of its own (two datasets are never read as one)."""
    root = Path(path)
    if not root.exists():
        raise DseError(f"{root}: results path does not exist")
    if not root.is_dir():
        return open_dataset(root)
    manifest = read_manifest(root)
    if manifest is None or not isinstance(manifest.get("parts"), list):
        return open_dataset(root, _loose_files(root))
    missing = missing_parts(root, manifest)
    if missing:
        warnings.warn(incomplete_message(root, missing, manifest), stacklevel=3)
    listed = {root / p for p in manifest["parts"]}
    extra = [f for f in _part_files(root) if f not in listed]
    if extra:
        shown = _names([f.relative_to(root).as_posix() for f in extra], 3)
        warnings.warn(f"{root}: {len(extra)} file{'s' if len(extra) != 1 else ''} its {MANIFEST} does not list "
                      f"{'are' if len(extra) != 1 else 'is'} not read ({shown}): copies or another dataset's "
                      "files; move them out of the folder", stacklevel=3)
    files = sorted(f for f in listed if f.is_file())
    if not files:
        raise DseError(f"{root}: none of the {len(listed)} parts its {MANIFEST} lists is on disk")
    return open_dataset(root, files)


def _loose_files(root: Path) -> list[Path]:
    """The ``*.parquet`` files under ``root`` (no manifest there); DseError when a folder in it is a
    dataset of its own (has a manifest): each dataset is read on its own."""
    datasets, files = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
        if Path(dirpath) != root and MANIFEST in filenames:
            datasets.append(Path(dirpath).relative_to(root).as_posix())
            dirnames[:] = []
            continue
        files += [Path(dirpath, f) for f in sorted(filenames) if f.endswith(".parquet") and not f.startswith(("_", "."))]
    if datasets:
        loose = [f.relative_to(root).as_posix() for f in files]
        also = (f" and {len(loose)} results file{'s' if len(loose) != 1 else ''} ({_names(loose)})" if loose else "")
        raise DseError(f"{root}: holds {len(datasets)} dataset{'s' if len(datasets) != 1 else ''} "
                       f"({_names(datasets)}){also}, each read on its own: give one of them")
    return files


def _names(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def open_dataset(root, files: list[Path] | None = None) -> Dataset:
    root = Path(root)
    if files is None:
        files = _part_files(root) if root.is_dir() else [root]
    if not files:
        raise DseError(f"{root}: no *.parquet part files in this directory "
                       f"(files named _* or .* are temporary and skipped)")
    return Dataset(root, files)
