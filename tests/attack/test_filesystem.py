"""Attack suite, class 'what a user points dse at': an output that is a device node, a named pipe or a
symbolic link is refused in one line before any work (exit 2), and nothing is written through it; a
report folder with a planted link never writes into the link's target."""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from attackkit import cli, one_line, write_study


def _device(path: Path) -> Path:
    """A character device like /dev/null (major 1, minor 3) where we may make one (root), else a named
    pipe: both are special files that an atomic rename would replace."""
    if os.geteuid() == 0:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        os.mkfifo(path)
    return path


def _specials(tmp_path: Path) -> dict[str, Path]:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    link = tmp_path / "link.parquet"
    link.symlink_to(victim)
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    return {"device": _device(tmp_path / "null"), "fifo": fifo, "link": link}


def _unchanged(tmp_path: Path, specials: dict[str, Path]) -> None:
    assert (tmp_path / "victim.txt").read_text() == "the user's own file\n"
    assert specials["link"].is_symlink()
    assert stat.S_ISFIFO(os.lstat(specials["fifo"]).st_mode)
    assert not stat.S_ISREG(os.lstat(specials["device"]).st_mode)
    names = tuple(p.name for p in specials.values())
    beside = [p.name for p in tmp_path.iterdir() if p.name.lstrip(".").startswith(names) and p.name not in names]
    assert beside == []                                   # no temporary file, journal or part beside them


@pytest.mark.parametrize("kind,words", [("device", "is a character device" if os.geteuid() == 0 else "is a named pipe"),
                                        ("fifo", "is a named pipe"), ("link", "is a symbolic link")])
def test_dse_run_refuses_a_special_output_before_the_search(tmp_path, kind, words):
    specials = _specials(tmp_path)
    code, out, err, exc = cli("run", write_study(tmp_path), "--out", specials[kind], "--quiet")
    line = one_line(code, out, err, exc, want=2)
    assert line == (f"error: --out = '{specials[kind]}': {words}; dse writes only regular files it creates or "
                    "replaces: give another file path")
    _unchanged(tmp_path, specials)


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_dse_sweep_refuses_a_special_output_folder(tmp_path, kind):
    specials = _specials(tmp_path)
    code, out, err, exc = cli("sweep", write_study(tmp_path), "--points", 2, "--out", specials[kind], "--quiet")
    assert "dse writes only regular folders it creates or replaces" in one_line(code, out, err, exc, want=2)
    _unchanged(tmp_path, specials)


def test_dse_export_refuses_a_device_output(tmp_path):
    specials = _specials(tmp_path)
    journal = tmp_path / "s.journal"
    code, *_ = cli("run", write_study(tmp_path), "--storage", journal, "--quiet")
    assert code == 0
    code, out, err, exc = cli("export", "--storage", journal, "--study", "quickstart", "--out", specials["device"])
    assert "dse writes only regular files it creates or replaces" in one_line(code, out, err, exc, want=2)
    _unchanged(tmp_path, specials)


def test_a_link_planted_in_a_report_folder_is_never_written_through(tmp_path):
    specials = _specials(tmp_path)
    code, *_ = cli("run", write_study(tmp_path), "--quiet")
    assert code == 0
    folder = tmp_path / "rep"
    folder.mkdir()
    (folder / "index.html").symlink_to(tmp_path / "victim.txt")
    code, out, err, exc = cli("report", tmp_path / "results" / "q.parquet", "--out", folder, "--quiet")
    assert one_line(code, out, err, exc, want=2) == (
        f"error: --out = '{folder}': holds index.html, a symbolic link; dse never writes through one into a report "
        "folder: remove it or give another --out")
    _unchanged(tmp_path, specials)


def test_a_folder_output_may_be_a_link_to_a_folder(tmp_path):
    """Scratch space on clusters is often a link: a sweep into a linked folder writes into its target."""
    target = tmp_path / "scratch"
    target.mkdir()
    (tmp_path / "out").symlink_to(target, target_is_directory=True)
    code, *_ = cli("sweep", write_study(tmp_path), "--points", 2, "--out", tmp_path / "out", "--quiet")
    assert code == 0 and list(target.glob("*.parquet"))


def test_a_name_the_locale_spells_unlike_utf8_is_refused_before_the_work(tmp_path, monkeypatch):
    """Under an ISO-8859-1 locale a results file came out empty (Python and pyarrow named two files):
    the name is refused in one line. The locale's encoder is stood in for: CI machines have no such locale."""
    study = write_study(tmp_path)
    monkeypatch.setattr(os, "fsencode", lambda p: os.fspath(p).encode("latin-1", "surrogateescape"))
    code, out, err, exc = cli("run", study, "--out", tmp_path / "résultats.parquet", "--quiet")
    assert "and Parquet's (UTF-8) spell differently: give an ASCII path" in one_line(code, out, err, exc, want=2)
    monkeypatch.undo()
    assert not list(tmp_path.glob("*sultats*")) and not list(tmp_path.glob(".*sultats*"))
    code, *_ = cli("run", study, "--out", tmp_path / "résultats.parquet", "--quiet")     # UTF-8: written
    assert code == 0 and (tmp_path / "résultats.parquet").stat().st_size > 0


def _longest_name(folder: Path, suffix: str = ".parquet") -> str:
    """A file name as long as the file system of ``folder`` allows (255 bytes on Linux's)."""
    return "r" * (os.pathconf(folder, "PC_NAME_MAX") - len(suffix)) + suffix


def test_the_longest_legal_out_name_is_written(tmp_path):
    """A 255-byte --out passed the write check and failed after the whole search: the atomic write's
    temporary name (.NAME.XXXXXXXX.tmp) was longer. The check creates the write's own temporary name now."""
    out = tmp_path / _longest_name(tmp_path)
    code, out_text, err, exc = cli("run", write_study(tmp_path), "--out", out, "--storage", ":memory:", "--quiet")
    assert code == 0 and exc is None, (out_text, err)
    assert pq.read_metadata(out).num_rows == 24
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "s.yaml"])     # no temporary file left


def test_an_out_name_with_no_room_for_the_journal_lock_is_refused_before_the_work(tmp_path, monkeypatch):
    """The journal beside a 255-byte --out fits, but Optuna's lock beside the journal (JOURNAL.lock, renamed
    JOURNAL.lock<uuid>.rename to release it) does not: refused before any work, naming the limit."""
    import dse.search.asktell
    calls = []
    monkeypatch.setattr(dse.search.asktell, "evaluate_study", lambda *a, **k: calls.append(1))
    out = tmp_path / _longest_name(tmp_path)
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    line = one_line(*cli("run", write_study(tmp_path), "--out", out, "--quiet"), want=2)
    assert line.endswith(f"Optuna's lock beside its journal (the name with .journal.lock<36-character id>.rename) "
                         f"would be a {limit + 48}-byte name; this file system allows at most {limit} bytes: give a "
                         f"file name of at most {limit - 48} bytes, or --storage for a journal elsewhere")
    assert line.startswith("error: --out = ") and calls == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]          # no journal, no lock, no file
    monkeypatch.undo()
    short = tmp_path / ("r" * (limit - 48 - len(".parquet")) + ".parquet")   # the longest that fits
    assert cli("run", write_study(tmp_path), "--out", short, "--quiet")[0] == 0 and short.is_file()


def test_an_out_name_longer_than_the_file_system_allows_is_bad_input(tmp_path):
    out = tmp_path / ("r" + _longest_name(tmp_path))
    line = one_line(*cli("run", write_study(tmp_path), "--out", out, "--quiet"), want=2)
    assert line.endswith(f": the file name is {len(out.name)} bytes long; this file system allows names of at most "
                         f"{len(out.name) - 1} bytes: give a shorter name")


def test_the_write_check_and_the_write_name_the_temporary_file_alike(tmp_path, monkeypatch):
    """One function names the temporary file for the check before the work and for the write after it."""
    from dse.results import guard, store
    made = []
    real = store.tempfile.mkstemp
    monkeypatch.setattr(store.tempfile, "mkstemp", lambda **kw: made.append(kw) or real(**kw))
    out = tmp_path / _longest_name(tmp_path)
    guard.check_writable(out)
    store.write_table(pa.table({"x": [1]}), out)
    assert len(made) == 2 and made[0] == made[1]


def test_a_full_disk_leaves_no_partial_report(tmp_path, monkeypatch):
    """`dse report` on a full disk left a truncated index.html and said '(no file): No space left on device'."""
    code, *_ = cli("run", write_study(tmp_path), "--storage", ":memory:", "--quiet")
    assert code == 0
    folder = tmp_path / "rep"
    real_open = io.open

    def full_disk(file, mode="r", *args, **kwargs):       # /dev/full: half the page is written, then ENOSPC
        f = real_open(file, mode, *args, **kwargs)
        if "index.html" not in str(file) or "w" not in mode:
            return f

        class Full:
            def __getattr__(self, name):
                return getattr(f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, data):
                f.write(data[: len(data) // 2])
                f.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
        return Full()
    monkeypatch.setattr(io, "open", full_disk)
    line = one_line(*cli("report", tmp_path / "results" / "q.parquet", "--out", folder, "--quiet"), want=1)
    assert line == f"error: {folder / 'index.html'}: cannot write it (No space left on device); nothing was written there"
    assert not [p.name for p in folder.iterdir() if "index.html" in p.name]         # no page, no temporary file
