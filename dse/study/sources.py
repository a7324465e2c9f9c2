"""The files a study's rows are computed from: its device files and model files (a model YAML or
a Hugging Face ``config.json``), the database entries it names, and the database files every
evaluation reads (runtimes, technology, acceptance table, fit and profiles). A dataset records a
digest of each (dse.results.identity), so a part computed from other content is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..catalog.database import Database
from .spec import StudySpec
from .workload_section import model_ref

#: database folders every evaluation may read, whole (few, small files)
SHARED_FOLDERS = ("runtimes", "technology", "acceptance")
#: what a database label starts with (the database is $DSE_HARDWARE_DB or hardware_db/)
DB_LABEL = "hardware_db"


def study_sources(study: StudySpec, db: Database) -> dict[str, Path]:
    """label -> file of everything ``study`` reads: a file inside the database as
    ``hardware_db/<path in it>`` (wherever the database is), any other by its absolute path."""
    root = Path(db.root).resolve()
    found: list[Path] = []
    for name in ("target_chip_device", "draft_chip_device"):
        knob = study.knob(name)
        values = () if knob is None else knob.choices or (knob.fixed,)
        for v in values:
            if isinstance(v, str) and v:
                found.append(Path(v) if ("/" in v or os.sep in v or v.endswith((".yaml", ".yml")))
                             else db.path("device", v.lower()))
    wl = study.raw.get("workload") if isinstance(study.raw, dict) else None
    if isinstance(wl, dict):
        base = Path(study.path).parent
        drafts = wl.get("draft") if isinstance(wl.get("draft"), list) else [wl.get("draft")]
        for ref in [wl.get("target"), *drafts]:
            if isinstance(ref, str) and ref:
                p = Path(model_ref(ref, base))
                found.append(p if p.is_file() else db.path("model", ref.lower()))
    for folder in SHARED_FOLDERS:
        d = root / folder
        found += sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith((".", "README"))) \
            if d.is_dir() else []
    out: dict[str, Path] = {}
    for p in found:
        if not p.is_file():
            continue            # a drafter spelling (eagle, medusa:4), not a file
        p = p.resolve()
        label = f"{DB_LABEL}/{p.relative_to(root).as_posix()}" if p.is_relative_to(root) else str(p)
        out[label] = p
    return dict(sorted(out.items()))
