"""A dataset directory's manifest, ``_manifest.json``: what the directory should hold (the part
names, the study, the grid or the tasks; ``dse sweep``, ``dse run --task``), whether a directory
holds another dataset (refused, or its files removed with ``--force``), and which parts are
missing (one message naming them and how to finish).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa

from ..errors import DseError
from .identity import describe, fingerprint, fingerprint_of, identity_of
from .store import read_footer, read_metadata, write_failure

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
            meta = read_footer(f)[1]
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
                _, meta, rows = read_footer(f)
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
    :func:`dataset_conflict`) and, when only flags differ, the flags that finish it; with ``force``,
    remove that dataset's files first (:func:`replace_dataset` with ``keep``)."""
    why = why or dataset_conflict(root, manifest)
    if why is None:
        return
    if force:
        replace_dataset(root, manifest, keep=keep)
        return
    flags = resume_flags(root, manifest)
    if flags is None:
        raise DseError(f"{root}: holds another dataset ({why}); give another --out, or --force to start a new dataset "
                       "there (its parts are removed)")
    n = len(_dataset_parts(Path(root)))
    raise DseError(f"{root}: holds another dataset ({why}); to finish it, give the flags it was started with: "
                   f"{flags}; or give another --out, or --force to start a new dataset there (its {n} finished "
                   f"part{'' if n == 1 else 's'} are deleted)")


#: the flag that sets each layout key of a manifest, per kind (a dataset is finished with the flags it
#: was started with); a sweep's total follows from its points
LAYOUT_FLAGS = {"tasks": {"tasks": "--task I/{}", "trials_per_task": "--n-trials {}", "sampler": "--sampler {}",
                          "seed": "--seed {}"},
                "sweep": {"shards": "--shard I/{}", "points": "--points {}", "chunk_size": "--chunk-size {}"}}


def resume_flags(root: str | os.PathLike, manifest: dict) -> str | None:
    """The flags that continue the dataset in ``root`` when it differs from ``manifest`` only in
    what flags set ('--n-trials 200 --seed 3'), else None (another study, or no manifest)."""
    try:
        old = read_manifest(root)
    except DseError:
        return None
    kind = manifest.get("kind")
    if not old or old.get("kind") != kind or old.get("fingerprint") != manifest.get("fingerprint"):
        return None
    table = LAYOUT_FLAGS.get(kind, {})
    differ = [k for k in set(old) | set(manifest) if k not in ("parts", "fingerprint", "identity", "total")
              and old.get(k) != manifest.get(k)]
    if not differ or any(k not in table or old.get(k) is None for k in differ):
        return None
    return " ".join(table[k].format(old[k]) for k in table if k in differ)


def missing_parts(root: str | os.PathLike, manifest: dict | None = None) -> list[str]:
    """Names of the parts the manifest lists that are not on disk."""
    root = Path(root)
    manifest = read_manifest(root) if manifest is None else manifest
    if not manifest:
        return []
    return [p for p in manifest.get("parts", []) if not (root / p).is_file()]


def incomplete_message(root: str | os.PathLike, missing: list[str], manifest: dict) -> str:
    """'DIR: incomplete: 6 of 12 parts missing (a, b, ...); <how to finish>': the command named is
    the one that completes the dataset, with the flags it was made with."""
    import shlex
    shown = ", ".join(missing[:6]) + (f", ... ({len(missing) - 6} more)" if len(missing) > 6 else "")
    n = len(manifest.get("parts", []))
    study, out = shlex.quote(_study_file(root, manifest) or "STUDY"), shlex.quote(str(root))
    if manifest.get("kind") == "tasks":
        tasks = [int(p.split("-")[1]) if p.count("-") >= 3 and p.split("-")[1].isdigit() else p for p in missing]
        total = manifest.get("tasks")
        flags = "".join(f" {LAYOUT_FLAGS['tasks'][k].format(manifest[k])}" for k in ("trials_per_task", "sampler", "seed")
                        if manifest.get(k) is not None)        # as they were run: another budget is refused

        def cmd(i):
            return f"dse run {study} --task {i}/{total}{flags} --out {out}"
        how = (f"missing tasks {_numbers(tasks)} of {total}: run `{cmd('I')}` for each (e.g. `{cmd(tasks[0])}`; "
               f"--task all/{total} does every missing one)")
    else:       # part-SSSSS-of-NNNNN-CCCCCC.parquet: shard S of N did chunk C
        shards = sorted({int(p.split("-")[1]) for p in missing})
        n_sh = int(manifest.get("shards") or 1)
        size = manifest.get("chunk_size")
        auto = min(131_072, -(-int(manifest.get("total") or 0) // n_sh))      # dse.campaign.grid.auto_chunk_size
        flags = f" --points {manifest['points']}" if manifest.get("points") else ""
        flags += f" --chunk-size {size}" if size and size != auto else ""

        def cmd(i):
            return f"dse sweep {study} --shard {i}/{n_sh}{flags} --out {out}"
        how = (f"missing shard{'s' if len(shards) != 1 else ''} {_numbers(shards)} of {n_sh}: run `{cmd('I')}` for "
               f"{'each' if len(shards) != 1 else 'it'} (e.g. `{cmd(shards[0])}`; a re-run does only the missing "
               "parts)")
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
