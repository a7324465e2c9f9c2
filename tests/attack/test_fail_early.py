"""Attack suite, fault class "work lost late, or a failure that says nothing" (issue 18 items 4
and 5).

Before the fix: with `--storage :memory:` or `--task` an unwritable output was found after the
whole search; a worker whose trial another worker had failed as stale died with "Cannot tell a
FAIL trial" and wrote no Parquet; with stderr piped into `head`, `dse run` stopped early, exited
0 and wrote nothing; a journal with garbage in the middle, a `--storage` that is a Parquet file,
`--heartbeat-timeout nan`, an unreachable Dask scheduler (exit 2), `dse export` of a missing
SQLite file (created empty) and a full disk (no path named) each ended badly.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from attackkit import QUICK, cli, error_lines, one_line, write_study
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dse.search.asktell
from dse.results import store

DSE = str(Path(sys.executable).with_name("dse"))


@pytest.mark.parametrize("extra", [("--storage", ":memory:"), ("--task", "0/2")])
def test_an_unwritable_output_is_found_before_the_search(tmp_path, no_evaluation, extra):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    study = write_study(tmp_path)
    out = blocker / ("q.parquet" if extra[0] == "--storage" else "tasks")
    line = one_line(*cli("run", study, "--out", out, "--quiet", *extra), want=1)
    assert line == f"error: {out}: cannot write there ({blocker} is a file, not a folder); nothing was run"
    assert no_evaluation == []


def test_an_unwritable_sweep_directory_is_found_before_any_chunk(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = one_line(*cli("sweep", QUICK, "--points", 2, "--out", blocker / "sw", "--quiet"), want=1)
    assert "cannot write there" in line and "nothing was run" in line


def test_a_trial_failed_elsewhere_is_done_and_the_parquet_is_written(tmp_path, shm, monkeypatch):
    """Issue 18: a worker whose trial another worker had already failed as stale died with
    `Cannot tell a FAIL trial` and wrote no Parquet. Here another worker claims trials while this
    one asks its batch (so this one's last trials fall beyond the budget and are to be failed) and
    fails one of them as stale first."""
    import optuna
    from optuna.trial import TrialState

    from dse.storage.backends import resolve_storage
    study = write_study(tmp_path, **{"search.n_trials": 8, "search.batch_size": 8})
    journal = shm / "q.journal"
    store = resolve_storage(None, str(journal), Path("x"))[0]
    other = optuna.create_study(study_name="quickstart", storage=store, directions=["minimize", "minimize"])
    other.ask(), other.ask()                                      # another worker's trials 0 and 1, RUNNING
    real, asked, failed = dse.search.asktell.ask_design, [], []

    def ask(*args, **kwargs):
        trial = real(*args, **kwargs)
        asked.append(trial.number)
        if len(asked) == 1:
            for _ in range(3):
                other.ask()                                       # claimed meanwhile: 3, 4, 5
        if len(asked) == 6:                                       # this worker's last three are beyond the budget
            other.tell(asked[-2], state=TrialState.FAIL)          # and one of them is failed as stale elsewhere
            failed.append(asked[-2])
        return trial
    monkeypatch.setattr(dse.search.asktell, "ask_design", ask)
    code, out, err, exc = cli("run", study, "--storage", journal, "--heartbeat-timeout", 1, "--quiet")
    assert code == 0, (err, exc)
    df = pq.read_table(tmp_path / "results" / "q.parquet").to_pandas()
    assert len(df) == 8 and failed[0] not in set(df["trial"])
    states = [t.state for t in optuna.load_study(study_name="quickstart", storage=store).get_trials(deepcopy=False)]
    assert states.count(TrialState.COMPLETE) == 8


def test_a_closed_stderr_pipe_stops_no_work(tmp_path):
    """Issue 18: `dse run ... 2>&1 | head` stopped early, exited 0 and wrote no results."""
    study = write_study(tmp_path, **{"search.n_trials": 200, "search.batch_size": 10})
    proc = subprocess.Popen([DSE, "run", str(study), "--storage", ":memory:"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stderr.readline()              # the first progress line, then the reader goes away
    proc.stderr.close()
    proc.stdout.close()
    assert proc.wait(timeout=600) == 0
    assert pq.read_metadata(tmp_path / "results" / "q.parquet").num_rows == 200


def test_a_closed_stdout_pipe_after_the_results_are_written_is_exit_0(tmp_path):
    study = write_study(tmp_path)
    r = subprocess.run(f"'{DSE}' run '{study}' --storage :memory: --quiet | head -c 10", shell=True,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stderr == "" and len(r.stdout) == 10
    assert pq.read_metadata(tmp_path / "results" / "q.parquet").num_rows == 24


def test_a_full_disk_names_the_file_exit_1(tmp_path, monkeypatch):
    def full(table, where, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(store.pq, "write_table", full)
    study = write_study(tmp_path)
    out = tmp_path / "results" / "q.parquet"
    line = one_line(*cli("run", study, "--storage", ":memory:", "--quiet"), want=1)
    assert line == f"error: {out}: cannot write it (No space left on device); nothing was written there"
    line = one_line(*cli("sweep", study, "--points", 2, "--out", tmp_path / "sw", "--quiet"), want=1)
    assert line == (f"error: {tmp_path / 'sw' / 'part-00000-of-00001-000000.parquet'}: cannot write it (No space "
                    "left on device); nothing was written there")
    assert not [p for p in (tmp_path / "sw").iterdir() if p.suffix == ".tmp"]


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "x"])
def test_heartbeat_timeout_must_be_a_positive_finite_number(tmp_path, value):
    line = one_line(*cli("run", write_study(tmp_path), "--heartbeat-timeout", value), want=2)
    assert line.startswith("error: --heartbeat-timeout = ") and line.endswith(": expected a number in (0, 1e+06] s")


def test_storage_that_is_not_a_journal_is_bad_input(tmp_path, shm):
    study = write_study(tmp_path)
    assert cli("run", study, "--storage", ":memory:", "--quiet")[0] == 0
    parquet = tmp_path / "results" / "q.parquet"
    line = one_line(*cli("run", study, "--storage", parquet, "--out", tmp_path / "o.parquet"), want=2)
    assert line == (f"error: --storage = '{parquet}': is a Parquet file (results), not an Optuna journal; give the "
                    "journal file (the study's output with .journal), a database URL or :memory:")
    line = one_line(*cli("run", study, "--storage", tmp_path, "--out", tmp_path / "o.parquet"), want=2)
    assert "is a directory" in line
    line = one_line(*cli("run", study, "--storage", "", "--out", tmp_path / "o.parquet"), want=2)
    assert line == "error: --storage = '': empty; expected a journal file, a database URL or :memory:"
    journal = shm / "q.journal"
    assert cli("run", study, "--storage", journal, "--out", tmp_path / "o.parquet", "--quiet")[0] == 0
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:40] + [b"{not json\n"] + lines[40:]))
    line = one_line(*cli("run", study, "--storage", journal, "--out", tmp_path / "o.parquet"), want=2)
    assert line == (f"error: --storage = '{journal}': not an Optuna journal: line 41 is not a journal record "
                    "('{not json') (JSONDecodeError); a journal is written only by dse run (or Optuna): give another "
                    "file, a database URL or :memory:")


def test_export_creates_no_database(tmp_path):
    db = tmp_path / "nothere.db"
    line = one_line(*cli("export", "--storage", f"sqlite:///{db}", "--study", "q", "--out", tmp_path / "e.parquet"),
                    want=2)
    assert "no such SQLite file" in line and not db.exists()
    line = one_line(*cli("export", "--storage", tmp_path / "nothere.journal", "--study", "q", "--out",
                         tmp_path / "e.parquet"), want=2)
    assert "no such journal file" in line and not (tmp_path / "nothere.journal").exists()
    line = one_line(*cli("export", "--study", "q", "--out", tmp_path / "e.parquet"), want=2)
    assert "give the shared study's storage URL or journal file (--storage, --storage-file or DSE_STORAGE)" in line


@pytest.mark.servers
def test_an_unreachable_dask_scheduler_is_a_runtime_failure(tmp_path, monkeypatch):
    """Issue 18: it exited 2, as if the address were bad input; and nothing is written before it answers."""
    distributed = pytest.importorskip("dask.distributed")

    def refuse(address, timeout=None):
        raise OSError(f"Timed out trying to connect to {address} after 10 s")
    monkeypatch.setattr(distributed, "Client", refuse)
    out = tmp_path / "sw"
    line = one_line(*cli("sweep", QUICK, "--points", 2, "--shard", "all/2", "--dask", "tcp://127.0.0.1:1", "--out", out),
                    want=1)
    assert line == ("error: --dask tcp://127.0.0.1:1: cannot reach the Dask scheduler (Timed out trying to connect "
                    "to tcp://127.0.0.1:1 after 10 s)")
    assert not out.exists()
    line = one_line(*cli("sweep", QUICK, "--shard", "all/2", "--dask", "nonsense", "--out", out), want=2)
    assert "expected a scheduler address" in line


def test_click_usage_errors_are_one_line():
    for args in (("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--batch", "abc"),
                 ("run",), ("sweep", "--nope"), ("pareto", "/no/such/path")):
        line = one_line(*cli(*args), want=2)
        assert line.startswith("error: ") and "--help" in line


# --------------------------------------------------------------------------- generated journals

@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journal")
    study = write_study(tmp, **{"search.n_trials": 8, "search.batch_size": 4})
    assert cli("run", study, "--storage", tmp / "j.journal", "--quiet")[0] == 0
    return study, tmp / "j.journal"


DAMAGE = st.one_of(
    st.tuples(st.just("insert"), st.binary(min_size=1, max_size=30)),
    st.tuples(st.just("flip"), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.just(b"")),
    st.tuples(st.just("duplicate"), st.just(b"")),
    st.tuples(st.just("delete"), st.just(b"")))


@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(damage=DAMAGE, at=st.integers(0, 10**6))
def test_generated_journal_damage_resumes_or_is_one_line(journal, tmp_path_factory, damage, at):
    """A journal damaged anywhere (garbage inserted, a byte changed, cut short, a record doubled or
    lost): resuming runs to the study's total (exit 0) or refuses with one line (exit 2); no
    traceback, no other exit."""
    study, source = journal
    d = tmp_path_factory.mktemp("jd")
    path = d / "j.journal"
    shutil.copy(source, path)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    kind, blob = damage
    i = at % len(lines)
    if kind == "insert":
        lines.insert(i, blob if blob.endswith(b"\n") else blob + b"\n")
    elif kind == "flip":
        pos = at % len(data)
        data = data[:pos] + bytes([blob]) + data[pos + 1:]
        lines = [data]
    elif kind == "truncate":
        lines = [data[: at % len(data)]]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    else:
        del lines[i]
    path.write_bytes(b"".join(lines))
    code, out, err, exc = cli("run", study, "--storage", path, "--out", d / "o.parquet", "--heartbeat-timeout", 1,
                              "--quiet", "--n-trials", 10)
    if code == 0:
        assert exc is None and pq.read_metadata(d / "o.parquet").num_rows >= 10
    else:
        error_lines(code, out, err, exc, want=2)


def test_dse_run_prints_no_progress_under_quiet_and_notes_only_on_stderr(tmp_path):
    code, out, err, _ = cli("run", write_study(tmp_path), "--storage", ":memory:", "--quiet")
    header = " ".join(out.split("front:")[0].split())      # the header wraps where the tmp path is long
    assert code == 0 and err == "" and header.endswith("storage :memory:)")
