"""What a dataset is: the fingerprint every part and side file carries, what differs between two
fingerprints (named key by key), and the digest that ties a side file to the parts it describes.

The fingerprint hashes what makes rows comparable (:func:`identity_of`): the study's name, its
workload, its space (the knobs), its objectives and constraints, its technology (overrides and
the resolved constants), the content of every file its rows are computed from (``files``: device
and model files, the database entries and tables it reads; dse.study.sources) and the model (the
results schema_version, dse's version and the database's fingerprint). It leaves out what only says how rows are found: the search budget,
sampler and seed, grid points and chunking (the manifest checks those), the output path, the
storage URL and the description. Everything it covers is in a results file's ``dse`` metadata
already, so a file written before the fingerprint existed gets one computed from its metadata.

A part's digest (:func:`part_digest`) is the sha256 of its Parquet footer: the row count, every
column chunk's offsets, sizes and statistics, and the ``dse`` metadata. Rewriting a part (same
name, same row count, other values) changes it, so a side file records the digest of each part
it was computed from and is used only while they all match.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Mapping

from ..errors import RuntimeFailure

#: the components of a fingerprint, in the order differences are named
COMPONENTS = ("study", "workload", "space", "objectives", "constraints", "technology", "files", "model")
#: differences a message names before it says how many more there are
SHOWN = 4


def _plain(value):
    """JSON's view of ``value`` (tuples as lists, numpy scalars and paths as text)."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def _split_knobs(knobs) -> tuple[dict, dict]:
    """Resolved knobs (``target_chip_chips``, ``batch``, ``k``) as the study file writes them:
    (workload knobs, space: {target_chip: {chips: ...}, draft_chip: {...}, k: ...})."""
    workload, space = {}, {}
    for name, value in (knobs or {}).items() if isinstance(knobs, Mapping) else ():
        section = next((s for s in ("target_chip", "draft_chip") if str(name).startswith(s + "_")), None)
        if section is not None:
            space.setdefault(section, {})[str(name)[len(section) + 1:]] = value
        elif name == "k":
            space["k"] = value
        else:
            workload[str(name)] = value
    return workload, space


def identity_of(meta: Mapping) -> dict:
    """The fingerprint's components from a results file's ``dse`` metadata (or the metadata a
    writer is about to write), keyed as a study file is (``workload.batch``,
    ``space.target_chip.chips``): see the module docstring."""
    study = meta.get("study") if isinstance(meta.get("study"), Mapping) else {}
    knob_workload, space = _split_knobs(study.get("knobs"))
    workload = study.get("workload")
    files = {"files": meta["files"]} if "files" in meta else {}     # (results written before it: none)
    return _plain({
        "study": study.get("name"),
        "workload": {**workload, **knob_workload} if isinstance(workload, Mapping) else workload,
        "space": space,
        "objectives": study.get("objectives"),
        "constraints": study.get("constraints") or [],
        "technology": {"overrides": study.get("technology") or {}, "constants": meta.get("tech_fingerprint")},
        **files,
        "model": {"schema_version": meta.get("schema_version"), "dse_version": meta.get("dse_version"),
                  "database": meta.get("database_fingerprint")},
    })


def file_digests(sources: Mapping[str, str | os.PathLike]) -> dict[str, str]:
    """label -> sha256 (16 hex digits) of each file's content; RuntimeFailure naming a file that
    cannot be read."""
    out = {}
    for label, path in sources.items():
        try:
            with open(path, "rb") as f:
                out[str(label)] = hashlib.file_digest(f, "sha256").hexdigest()[:16]
        except OSError as exc:
            raise RuntimeFailure(f"{path}: cannot read it ({exc.strerror or exc}); the results record the "
                                 "content of every file they are computed from") from None
    return out


def fingerprint_of(identity: Mapping) -> str:
    """sha256 of the components, 16 hex digits."""
    text = json.dumps(_plain(identity), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(meta: Mapping) -> str:
    """The fingerprint a results file carries (``fingerprint`` in its metadata), or the one its
    metadata gives when it was written before fingerprints."""
    fp = meta.get("fingerprint")
    return fp if isinstance(fp, str) and fp else fingerprint_of(identity_of(meta))


def _leaves(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, Mapping) and value:
        out = {}
        for k in sorted(value, key=str):
            out.update(_leaves(value[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _shown(value) -> str:
    text = "(none)" if value is None else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def differences(old: Mapping, new: Mapping) -> list[str]:
    """'workload.acceptance.alpha 0.8 -> 0.95' for every leaf key of the identities that differs,
    in :data:`COMPONENTS` order; a file as 'file F changed (sha256 A -> B)'."""
    old, new = _plain(old), _plain(new)
    if ("files" in old) != ("files" in new):      # one side written before files were recorded
        older = "(not recorded: an older dse)"
        said = [f"files {older} -> (recorded)" if "files" in new else f"files (recorded) -> {older}"]
        old, new = {k: v for k, v in old.items() if k != "files"}, {k: v for k, v in new.items() if k != "files"}
    else:
        said = []
    a, b = _leaves(old), _leaves(new)
    order = {c: i for i, c in enumerate(COMPONENTS)}
    keys = sorted({k for k in set(a) | set(b) if a.get(k) != b.get(k)},
                  key=lambda k: (order.get(k.split(".")[0], len(order)), k))
    out = [_file_change(k[len("files."):], a.get(k), b.get(k)) if k.startswith("files.") else
           f"{k} {_shown(a.get(k))} -> {_shown(b.get(k))}" for k in keys]
    return said + out if said else out


def _file_change(label: str, old, new) -> str:
    """'file F changed (sha256 A -> B)', or that F is new, or no longer read."""
    if old is None:
        return f"file {label} not read before (sha256 {new})"
    if new is None:
        return f"file {label} no longer read (was sha256 {old})"
    return f"file {label} changed (sha256 {old} -> {new})"


def describe(old: Mapping, new: Mapping) -> str:
    """The first :data:`SHOWN` differences, '; '-separated, and how many more there are."""
    diff = differences(old, new) or ["(the fingerprints differ)"]
    more = f"; and {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
    return "; ".join(diff[:SHOWN]) + more


def part_digest(path: str | os.PathLike) -> str:
    """sha256 (16 hex digits) of a Parquet file's footer (the thrift FileMetaData before the
    trailing length and ``PAR1``). OSError for a file that is not Parquet."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        if end < 12:
            raise OSError(f"{path}: too short for a Parquet file")
        f.seek(end - 8)
        tail = f.read(8)
        size = struct.unpack("<I", tail[:4])[0]
        if tail[4:] != b"PAR1" or size > end - 12:
            raise OSError(f"{path}: no Parquet footer")
        f.seek(end - 8 - size)
        return hashlib.sha256(f.read(size)).hexdigest()[:16]
