"""What a write may replace, checked before the work starts.

Every output path is tried for writing before a search or sweep (the write's own temp file created
and removed where the results will go, the names of the files beside it checked against the file
system's limit), so an unwritable path costs seconds, not the whole run. A results
file is replaced only when it holds the same study (its fingerprint, dse.results.identity) and no
more finished trials than the run will write; otherwise the run refuses, naming what differs,
unless ``--force`` (or another ``--out``). A report folder records the input it was made from and
is not reused for another input without ``--force``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from ..errors import DseError, RuntimeFailure, SpecError
from ..storage.backends import JOURNAL_LOCK_NAME_EXTRA
from .identity import describe, fingerprint, identity_of
from .store import name_limit, read_results_footer, temp_file_beside, write_bytes


def check_writable(path: str | os.PathLike, what: str = "--out", directory: bool = False) -> Path:
    """Create ``path``'s folder (``path`` itself when ``directory``) and write and remove a temp
    file in it, before any work: a file where a folder is wanted (or the reverse) is bad input
    (exit 2), a folder that cannot be created or written is a runtime failure (exit 1)."""
    path = Path(path)
    if not directory:
        check_name_fits(path, what)
    refuse_special(path, what, directory)
    refuse_misspelt_name(path, what)
    if path.is_dir() and not directory:
        raise SpecError(None, what, str(path), "is a directory; expected a file path")
    if path.exists() and not path.is_dir() and directory:
        raise SpecError(None, what, str(path), "is a file; expected a directory")
    folder = path if directory else path.parent
    blocker = next((a for a in [folder, *folder.parents] if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise RuntimeFailure(f"{path}: cannot write there ({blocker} is a file, not a folder); nothing was run")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.unlink(temp_file_beside(folder / ".dse-write-check" if directory else path))   # the write's own temp name
    except OSError as exc:
        raise RuntimeFailure(f"{path}: cannot write there ({exc.strerror or exc}"
                             f"{': ' + str(exc.filename) if exc.filename else ''}); nothing was run") from None
    return path


def check_name_fits(path: Path, what: str = "--out") -> None:
    """Refuse (exit 2) a file name longer than the file system of its folder (or the nearest folder above
    that exists) allows."""
    size, limit = len(os.fsencode(path.name)), name_limit(nearest_folder(path.parent))
    if size > limit:
        raise SpecError(None, what, str(path), f"the file name is {size} bytes long; this file system allows names "
                        f"of at most {limit} bytes: give a shorter name")


def nearest_folder(folder: Path) -> Path:
    """``folder``, or the nearest folder above it that exists (a new output's folder is made later)."""
    for above in [folder, *folder.parents]:
        try:
            if above.is_dir():
                return above
        except OSError:         # a component longer than the file system allows
            continue
    return Path(".")


def check_journal_name(journal: Path, what: str = "--storage", out: Path | None = None) -> None:
    """Refuse (exit 2), before the work, a journal whose name leaves no room for Optuna's lock beside it
    (JOURNAL.lock<36-character id>.rename, dse.storage.backends.JOURNAL_LOCK_NAME_EXTRA bytes longer), which
    the first append would fail on. ``out``: the journal is the default one beside this output (--out)."""
    size, limit = len(os.fsencode(journal.name)), name_limit(nearest_folder(journal.parent))
    over = size + JOURNAL_LOCK_NAME_EXTRA - limit
    if over <= 0:
        return
    longer = f"would be a {size + JOURNAL_LOCK_NAME_EXTRA}-byte name; this file system allows at most {limit} bytes"
    if out is not None:         # the default journal, beside --out
        raise SpecError(None, what, str(out), f"Optuna's lock beside its journal (the name with {journal.suffix}.lock"
                        f"<36-character id>.rename) {longer}: give a file name of at most "
                        f"{len(os.fsencode(out.name)) - over} bytes, or --storage for a journal elsewhere")
    raise SpecError(None, what, str(journal), f"Optuna's lock beside this journal (its name + .lock<36-character id>"
                    f".rename) {longer}: give a journal name of at most {size - over} bytes")


#: what a path that is not a regular file or a folder is, by its stat mode
_SPECIAL = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
            (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: Path) -> str | None:
    """'a symbolic link', 'a character device', ... for a path that exists and is neither a regular file
    nor a folder; None otherwise (a new path too)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return next((name for test, name in _SPECIAL if test(mode)), None)


def refuse_special(path: Path, what: str = "--out", directory: bool = False) -> None:
    """Refuse (SpecError, exit 2) an output that is a device node (/dev/null: the atomic rename would
    replace it, as root for the whole machine), a named pipe, a socket or, for a file output, a
    symbolic link (the rename would replace the link, a plain write would follow it into another
    file). A folder output may be a link to a folder (scratch space on clusters)."""
    kind = special_kind(path)
    if kind is None or (kind == "a symbolic link" and directory and path.is_dir()):
        return
    raise SpecError(None, what, str(path), f"is {kind}; dse writes only regular {'folders' if directory else 'files'} "
                    f"it creates or replaces: give another {'folder' if directory else 'file'} path")


def refuse_misspelt_name(path: Path, what: str = "--out") -> None:
    """Refuse (exit 2) a path that the file system's encoding and UTF-8 spell as different bytes: under a
    non-UTF-8 locale (ISO-8859-1) Python names a file one way and pyarrow, which always encodes UTF-8,
    another, so a results file came out empty with the data in a misnamed hidden file."""
    text = str(path)
    if os.fsencode(text) != text.encode("utf-8", "surrogateescape"):
        raise SpecError(None, what, text, f"has characters that this locale's file-name encoding "
                        f"({sys.getfilesystemencoding()}) and Parquet's (UTF-8) spell differently: give an ASCII "
                        "path, or run under a UTF-8 locale (LC_ALL=C.UTF-8)")


def check_replace(path: str | os.PathLike, meta: dict, rows: int | None, *, force: bool = False,
                  what: str = "--out") -> None:
    """Refuse (DseError, exit 2) to replace an existing results file ``path`` that holds another
    study (name or fingerprint differs from ``meta``'s, named key by key), that is not dse
    results, or that holds more rows than the ``rows`` this run will write; nothing is refused
    with ``force``. ``rows`` None: the count is not known yet (checked again before writing)."""
    path = Path(path)
    if force or not path.is_file():
        return
    how = f"give another {what}, or --force to replace it"
    try:
        old_meta, old_rows = read_results_footer(path)
    except DseError:
        raise DseError(f"{path}: exists and is not dse results; {how}") from None
    was, now = _study_part(identity_of(old_meta)), _study_part(identity_of(meta))
    if was != now:
        raise DseError(f"{path}: holds results of another study ({describe(was, now)}); {how}")
    if rows is not None and old_rows > rows:
        raise DseError(f"{path}: holds {old_rows:,} finished trials of this study and this run writes {rows:,}; "
                       f"{how} (a smaller --n-trials or --storage :memory: starts a new study)")


def _study_part(identity: dict) -> dict:
    """The study's own part of an identity: a file rewritten whole from the storage by a newer
    model (another database or dse version, other file contents) is the same study; its rows are
    all recomputed."""
    return {k: v for k, v in identity.items() if k not in ("model", "files")} | {
        "technology": {"overrides": (identity.get("technology") or {}).get("overrides")}}


#: the file in a report folder that names the input the report was made from
REPORT_MARK = ".dse-report.json"


def report_mark(source: str | os.PathLike, meta: dict) -> dict:
    """What a report folder records of its input: the input's absolute path and fingerprint."""
    return {"source": str(Path(source).resolve()), "fingerprint": fingerprint(meta)}


def check_report_folder(out: str | os.PathLike, mark: dict, force: bool = False) -> Path:
    """Refuse to write a report into folder ``out`` when it holds the report of another input (its
    :data:`REPORT_MARK` names another path or dataset) or files that are not a report; then check
    it is writable. Reports of different inputs never share a folder."""
    out = Path(out)
    refuse_special(out, "--out", directory=True)
    if out.is_dir():
        for entry in out.iterdir():          # a planted index.html -> ~/victim is never written through
            if kind := special_kind(entry):
                raise SpecError(None, "--out", str(out), f"holds {entry.name}, {kind}; dse never writes through one "
                                "into a report folder: remove it or give another --out")
    if out.is_dir() and not force:
        old = out / REPORT_MARK
        if old.is_file():
            try:
                was = json.loads(old.read_text())
            except (OSError, ValueError):
                was = {}
            if not isinstance(was, dict) or was.get("source") != mark["source"]:
                src = was.get("source") if isinstance(was, dict) else None
                raise DseError(f"{out}: holds the report of {src or 'another input'}; give --out DIR for this one, "
                               "or --force to replace it")
        elif any(p.name != "index.html" and p.suffix != ".png" and not p.name.startswith(".")
                 for p in out.iterdir()):
            raise DseError(f"{out}: exists and holds files that are not a dse report; give another --out, or --force "
                           "to write the report there")
    check_writable(out, "--out", directory=True)
    return out


def write_report_mark(out: str | os.PathLike, mark: dict) -> None:
    """Record in folder ``out`` which input its report was made from."""
    write_bytes(Path(out) / REPORT_MARK, (json.dumps(mark, indent=1) + "\n").encode("utf-8"))   # one line on failure
