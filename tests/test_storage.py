"""Issue 12, shared-study storages: 64 workers creating one study at once, resume = uninterrupted,
transient database drops, the gRPC storage proxy and MySQL URLs.

Server-backed cases follow tests/test_shared_study.py: PostgreSQL needs DSE_TEST_PG_URL, the gRPC
proxy needs grpcio (``pip install '.[grpc]'``); without them they skip with the reason, unless
DSE_REQUIRE_SERVERS=1 (set by `.ci/run`), which turns the skip into a failure.
"""

import multiprocessing
import os
import signal
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

import dse.search.asktell
from dse.search.runner import run_study
from dse.study import load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"


def small_study(tmp_path, n_trials=96, batch_size=32, sampler=None, name=None):
    raw = yaml.safe_load(QUICK.read_text())
    raw["name"] = name or f"st-{uuid.uuid4().hex[:10]}"        # PostgreSQL outlives the test
    raw["search"].update(n_trials=n_trials, batch_size=batch_size)
    if sampler:
        raw["search"]["sampler"] = sampler
    raw["output"] = str(tmp_path / "q.parquet")
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "quick.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study(p)


def require(what: str, reason: str):
    if os.environ.get("DSE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{reason}; DSE_REQUIRE_SERVERS=1 makes this a failure")
    pytest.skip(reason)


# --------------------------------------------------------------------------- 64 workers at once

def _one_worker(study_path, url, barrier, results):
    """What `dse run` does first, in a forked process: open the storage, create or load the
    study (dse's own path, with its retries), then ask and tell one trial."""
    try:
        from dse.search.asktell import ask_design
        from dse.search.runner import _create_study
        from dse.search.sampler_setup import distributions, make_sampler
        from dse.storage.backends import resolve_storage
        study = load_study(study_path)
        directions = [o.direction for o in study.objectives]
        barrier.wait(timeout=60)                     # all 64 start in the same instant
        store, shown = resolve_storage(study, url, Path(study.output))
        ostudy = _create_study(study, store, shown, directions, make_sampler("random", 0, 1, len(directions)))
        trial = ask_design(ostudy, study, distributions(study))
        ostudy.tell(trial, [1.0] * len(directions))
        results.put(("ok", ostudy._study_id))
    except BaseException as exc:                     # noqa: BLE001 - reported to the parent
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_64_workers_starting_together_create_one_study(tmp_path, shm):
    """On a journal; PostgreSQL's 64 workers starting together are
    tests/attack/test_workers.py::test_64_workers_on_a_server_with_100_connections (one study, the total)."""
    import optuna

    from dse.storage.backends import resolve_storage
    shared_url = f"journal:{shm / 'shared.journal'}"
    s = small_study(tmp_path)
    resolve_storage(None, f"sqlite:///{tmp_path / 'warm.db'}", tmp_path / "x")   # SQLAlchemy imported before the fork
    ctx = multiprocessing.get_context("fork")        # children inherit the imports: 64 starts in ~1 s
    barrier, results = ctx.Barrier(64), ctx.Queue()
    procs = [ctx.Process(target=_one_worker, args=(str(s.path), shared_url, barrier, results)) for _ in range(64)]
    for p in procs:
        p.start()
    got = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [g[1] for g in got if g[0] != "ok"]
    assert errors == [] and [p.exitcode for p in procs] == [0] * 64
    assert len({g[1] for g in got}) == 1                          # every worker joined the same study id
    store, _ = resolve_storage(None, shared_url, tmp_path / "x")
    names = [x.study_name for x in optuna.get_all_study_summaries(store, include_best_trial=False)]
    assert names.count(s.name) == 1
    trials = optuna.load_study(study_name=s.name, storage=store).get_trials(deepcopy=False)
    assert len(trials) == 64 and sorted(t.number for t in trials) == list(range(64))
    assert {t.state.name for t in trials} == {"COMPLETE"}


# --------------------------------------------------------------------------- resume == uninterrupted

def _interrupt_after(monkeypatch, batches: int):
    """SIGTERM this process during the ``batches``-th evaluation: dse's handler sets its stop flag,
    the batch in flight is finished and told, and run_study returns interrupted (as under SLURM)."""
    real, calls = dse.search.asktell.evaluate_study, [0]

    def evaluate(*args, **kwargs):
        calls[0] += 1
        if calls[0] == batches:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)
    monkeypatch.setattr(dse.search.asktell, "evaluate_study", evaluate)


def _rows(df):
    return df.drop(columns=["datetime_start", "datetime_complete"]).sort_values("trial").reset_index(drop=True)


def _uninterrupted_cut_resumed(tmp_path, shm, monkeypatch, sampler: str, batches: int):
    """A 160-trial study (batches of 32) run whole; the same study stopped by SIGTERM after
    ``batches`` batches; and that run resumed: (uninterrupted, cut, resumed) RunResults."""
    s = small_study(tmp_path / "a", n_trials=160, batch_size=32, sampler=sampler, name="resume")
    ref = run_study(s, storage=str(shm / "ref.journal"), progress=False)
    s2 = small_study(tmp_path / "b", n_trials=160, batch_size=32, sampler=sampler, name="resume")
    with monkeypatch.context() as m:
        _interrupt_after(m, batches)
        cut = run_study(s2, storage=str(shm / "cut.journal"), progress=False)
    return ref, cut, run_study(s2, storage=str(shm / "cut.journal"), progress=False)


def test_resumed_qmc_run_gives_the_rows_of_an_uninterrupted_run(tmp_path, shm, monkeypatch):
    """QMC draws point i of the scrambled Sobol sequence for the study's i-th sample, and the
    counter lives in the storage (a study system attribute), so a resumed run proposes exactly
    what the uninterrupted process would have: every row (params and metrics) is equal."""
    ref, cut, res = _uninterrupted_cut_resumed(tmp_path, shm, monkeypatch, "qmc", batches=2)
    assert cut.interrupted == signal.SIGTERM and len(cut.frame) == 64     # 2 whole batches of 32
    assert res.n_new == 96 and len(res.frame) == 160
    pd.testing.assert_frame_equal(_rows(res.frame), _rows(ref.frame))


def test_resumed_nsga2_run_loses_and_duplicates_no_trial(tmp_path, shm, monkeypatch):
    """NSGA-II (and TPE, random) draw from a generator seeded when the sampler is built: the
    uninterrupted process has consumed the draws of its first trials when it reaches trial k, a
    resumed process starts the stream afresh, so the proposals after the cut differ (by design of
    Optuna's samplers, not a loss). What holds: trials 0..k-1 are unchanged, the study has exactly
    n_trials distinct trials, none lost or repeated."""
    ref, cut, res = _uninterrupted_cut_resumed(tmp_path, shm, monkeypatch, "nsga2", batches=3)
    assert cut.interrupted == signal.SIGTERM and len(cut.frame) == 96
    got = _rows(res.frame)
    assert res.n_new == 64 and len(got) == 160 and list(got["trial"]) == list(range(160))          # none lost, none twice
    # the first 96 rows: what the interrupted run wrote, and what the uninterrupted run has (params and
    # metrics; the Pareto flags and ranks belong to the whole set, which differs after the cut)
    per_row = [c for c in got.columns if c not in ("is_pareto", "pareto_rank")]
    pd.testing.assert_frame_equal(got.iloc[:96][per_row], _rows(cut.frame)[per_row])
    pd.testing.assert_frame_equal(got.iloc[:96][per_row], _rows(ref.frame).iloc[:96][per_row])
    assert not got.iloc[96:][per_row].equals(_rows(ref.frame).iloc[96:][per_row])   # the stated reason holds


# --------------------------------------------------------------------------- a database that drops

def _dropping(monkeypatch, method: str, fail_calls):
    """Make RDBStorage.<method> lose its connection on the call numbers in ``fail_calls`` (1-based;
    a callable for "from then on"), raising what Optuna raises: StorageInternalError from
    SQLAlchemy's OperationalError."""
    import optuna
    import sqlalchemy.exc
    real, calls = getattr(optuna.storages.RDBStorage, method), [0]

    def flaky(self, *args, **kwargs):
        calls[0] += 1
        if fail_calls(calls[0]):
            cause = sqlalchemy.exc.OperationalError("UPDATE trials SET state=%(state)s", {},
                                                    Exception("server closed the connection unexpectedly"))
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
        return real(self, *args, **kwargs)
    monkeypatch.setattr(optuna.storages.RDBStorage, method, flaky)
    monkeypatch.setattr("dse.storage.retries.RETRY_BASE_S", 0.01)
    return calls


def test_a_record_torn_by_a_killed_writer_is_cut_before_the_next_append(tmp_path, shm, capsys):
    """A worker SIGKILLed inside write() can leave a journal record without its newline (Linux
    stops a regular-file write between pages on a fatal signal). The next append would glue its
    record to it and every reader would fail on the broken line; dse's journal cuts it first."""
    s = small_study(tmp_path, n_trials=32, batch_size=16)
    journal = shm / "torn.journal"
    run_study(s, storage=str(journal), progress=False)
    whole = journal.read_bytes()
    torn = b'{"op_code":5,"worker_id":"killed","trial_id":31,"param_name":"target_chip.memo'
    journal.write_bytes(whole + torn)
    capsys.readouterr()
    res = run_study(s, n_trials=64, storage=str(journal), progress=False)
    assert len(res.frame) == 64 and res.n_new == 32
    assert journal.read_bytes().startswith(whole) and torn not in journal.read_bytes()
    assert f"cut {len(torn)} bytes of a journal record" in capsys.readouterr().err
    # Optuna's own append would have glued the next record to the torn one: unreadable
    import optuna
    from optuna.storages.journal import JournalFileBackend
    bad = shm / "bad.journal"
    bad.write_bytes(whole + torn)
    for _ in range(2):      # the glued line is no longer the last: readers raise on it
        JournalFileBackend(str(bad)).append_logs([{"op_code": 0, "worker_id": "w", "study_name": "x",
                                                   "directions": [1]}])
    with pytest.raises(ValueError):
        optuna.load_study(study_name=s.name, storage=optuna.storages.JournalStorage(JournalFileBackend(str(bad))))


def test_the_journal_is_fsynced_at_most_once_a_second_and_at_exit(shm, monkeypatch):
    """Appends reach the file at once (another reader sees them) but fsync only when
    JOURNAL_SYNC_S has passed since the last one; sync() (registered for exit) fsyncs what is
    left, once."""
    import dse.storage.backends as st
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real(fd))
    log = {"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}
    monkeypatch.setattr(st, "JOURNAL_SYNC_S", 3600.0)
    b = st.journal_file(str(shm / "sync.journal"))
    for _ in range(50):
        b.append_logs([log])
    assert calls == [] and len(list(st.journal_file(str(shm / "sync.journal")).read_logs(0))) == 50
    b.sync()
    b.sync()                        # nothing new: no second fsync
    assert len(calls) == 1
    monkeypatch.setattr(st, "JOURNAL_SYNC_S", 0.0)
    for _ in range(3):
        b.append_logs([log])
    assert len(calls) == 4          # every append once the interval is 0
    b.sync()
    assert len(calls) == 4


def test_transient_drops_in_tell_are_retried_and_no_trial_is_lost(tmp_path, capsys, monkeypatch):
    s = small_study(tmp_path, n_trials=32, batch_size=16, sampler="random")
    calls = _dropping(monkeypatch, "set_trial_state_values", lambda n: n in (1, 2))   # the first 2 tells
    res = run_study(s, storage=f"sqlite:///{tmp_path / 'q.db'}", progress=False)
    err = capsys.readouterr().err
    assert calls[0] == 32 + 2                                      # 32 tells, the first one tried 3 times
    retries = [x for x in err.splitlines() if "lost the database connection" in x]
    assert len(retries) == 2 and "retry 1 of 5 in 0.01 s" in retries[0] and "retry 2 of 5 in 0.02 s" in retries[1]
    assert len(res.frame) == 32 and sorted(res.frame["trial"]) == list(range(32))
    assert len(pd.read_parquet(tmp_path / "q.parquet")) == 32


def test_database_that_stays_down_is_one_line_exit_1_and_keeps_finished_trials(tmp_path, monkeypatch):
    import optuna
    from click.testing import CliRunner

    from dse.cli.commands import main
    s = small_study(tmp_path, n_trials=48, batch_size=16, sampler="random")
    _dropping(monkeypatch, "set_trial_state_values", lambda n: n > 20)    # down from the 21st tell on
    url = f"sqlite:///{tmp_path / 'q.db'}"
    r = CliRunner().invoke(main, ["run", str(s.path), "--storage", url, "--quiet"])
    assert r.exit_code == 1, r.output
    lines = [x for x in r.output.strip().splitlines() if "lost the database connection" not in x]
    assert len(lines) == 1 and "Traceback" not in r.output
    assert lines[0].startswith(f"error: --storage {url}: the database stayed unreachable after 6 attempts")
    assert "run the same command again to resume" in lines[0]
    monkeypatch.undo()
    trials = optuna.load_study(study_name=s.name, storage=url).get_trials(deepcopy=False)
    states = [t.state.name for t in trials]
    # tells 1..20 went through: batch 1 (16) and 4 of batch 2; the 5th of batch 2 failed for good, so
    # 12 stay RUNNING (failed and re-asked by the next run's heartbeat check) and batch 3 was never asked
    assert states.count("COMPLETE") == 20 and states.count("RUNNING") == 12 and len(states) == 32


# --------------------------------------------------------------------------- gRPC storage proxy

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _need_grpc():
    try:
        import grpc  # noqa: F401
    except ImportError:
        require("grpc", "grpcio is not installed: pip install '.[grpc]' (.ci/run does)")


@pytest.mark.servers
def test_two_workers_through_the_grpc_proxy_reach_exactly_the_total(tmp_path):
    import subprocess
    import sys

    import optuna
    _need_grpc()
    dse_bin = str(Path(sys.executable).with_name("dse"))
    db, port = f"sqlite:///{tmp_path / 'proxied.db'}", _free_port()
    proxy = subprocess.Popen([dse_bin, "storage-proxy", "--storage", db, "--port", str(port)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proxy.stderr.readline()
        assert first.startswith(f"dse storage-proxy: serving {db} at grpc://localhost:{port}"), first
        assert proxy.stderr.readline() == ("dse storage-proxy: no authentication: anyone who can reach this port "
                                           "can read, change and delete every study in the database\n")
        s = small_study(tmp_path, n_trials=60, batch_size=15, sampler="random")
        url = f"grpc://localhost:{port}"
        workers = [subprocess.Popen([dse_bin, "run", str(s.path), "--storage", url, "--quiet",
                                     "--out", str(tmp_path / f"w{i}.parquet")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
        outs = [w.communicate(timeout=600) for w in workers]
        assert [w.returncode for w in workers] == [0, 0], [e[-2000:] for _, e in outs]
        from click.testing import CliRunner

        from dse.cli.commands import main
        r = CliRunner().invoke(main, ["storage-proxy", "--storage", db, "--port", str(port)])   # gRPC alone would
        assert r.exit_code == 1 and "the port is in use" in r.output                            # share the port
    finally:
        proxy.send_signal(signal.SIGTERM)
        _, err = proxy.communicate(timeout=60)
    assert proxy.returncode == 0 and err.strip() == "dse storage-proxy: stopped by SIGTERM; every call in flight was finished"
    trials = optuna.load_study(study_name=s.name, storage=db).get_trials(deepcopy=False)    # the database itself
    complete = [t.number for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 60 and len(set(complete)) == 60
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    assert len(pd.read_parquet(tmp_path / "w0.parquet")) == 60       # each worker writes the whole study


@pytest.mark.parametrize("args,needle,code", [
    (["run", "STUDY", "--storage", "grpc://localhost"], "expected grpc://HOST:PORT", 2),
    (["run", "STUDY", "--storage", "grpc://localhost:PORT"], "no storage proxy answers there within", 1),
    (["storage-proxy", "--storage", "journal:/tmp/x.journal"], "Optuna cannot proxy a journal file", 2),
])
@pytest.mark.servers
def test_grpc_url_and_proxy_mistakes_are_one_line(tmp_path, args, needle, code, monkeypatch):
    from click.testing import CliRunner

    from dse.cli.commands import main
    _need_grpc()
    monkeypatch.setattr("dse.storage.backends.grpc_client.__defaults__", (0.5,))     # wait 0.5 s, not 10 s
    s = small_study(tmp_path, n_trials=25)
    args = [str(s.path) if a == "STUDY" else a.replace("PORT", str(_free_port())) for a in args]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == code, r.output
    assert len(r.output.strip().splitlines()) == 1 and needle in r.output


# --------------------------------------------------------------------------- MySQL URLs

def test_mysql_url_without_its_driver_names_the_extra(tmp_path, monkeypatch):
    import sys

    from click.testing import CliRunner

    from dse.cli.commands import main
    monkeypatch.setitem(sys.modules, "pymysql", None)            # as if PyMySQL were not installed
    s = small_study(tmp_path, n_trials=25)
    r = CliRunner().invoke(main, ["run", str(s.path), "--storage", "mysql+pymysql://dse:s3cret@db.example/dse"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "pip install 'specdec-dse[mysql]'" in r.output and "s3cret" not in r.output and "dse:***@" in r.output


def test_mysql_gets_the_small_pool_of_postgresql(monkeypatch):
    """One connection a worker, no overflow (issue 21: N workers need N connections; Optuna's
    schema check, which takes a second one, is made by dse over the first): the same engine
    options for MySQL as for PostgreSQL, whatever the server (no connection is made)."""
    import optuna

    import dse.storage.backends
    seen = {}

    def init(self, url, engine_kwargs=None, **kw):
        seen[url] = engine_kwargs
        assert kw == {"skip_compatibility_check": True}
    monkeypatch.setattr(optuna.storages.RDBStorage, "__init__", init)
    monkeypatch.setattr(dse.storage.backends, "_check_schema", lambda store, url: None)
    from dse.storage.backends import resolve_storage
    for url in ("mysql+pymysql://u:p@h/db", "postgresql+psycopg://u:p@h/db"):
        resolve_storage(None, url, Path("unused"))
    assert seen["mysql+pymysql://u:p@h/db"] == seen["postgresql+psycopg://u:p@h/db"] == {
        "pool_size": 1, "max_overflow": 1, "pool_recycle": 300, "pool_pre_ping": True}


@pytest.mark.servers
def test_grpc_recipe_runs_a_proxy_and_its_workers(tmp_path):
    """No SLURM in CI: examples/slurm/shared-study-grpc.sbatch runs with a stand-in `srun` that
    starts its command as tasks 0 and 1 (SLURM_PROCID), against a SQLite database."""
    import subprocess
    import sys

    import optuna
    _need_grpc()
    recipe = Path(__file__).parent.parent / "examples" / "slurm" / "shared-study-grpc.sbatch"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/sh\nfor i in 0 1; do SLURM_PROCID=$i "$@" & done; wait\n')
    (bin_dir / "srun").chmod(0o755)
    s = small_study(tmp_path, n_trials=40, batch_size=10, sampler="random")
    db = f"sqlite:///{tmp_path / 'recipe.db'}"
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "STUDY": str(s.path), "PORT": str(_free_port()), "DSE_STORAGE": db, "SLURM_JOB_ID": "1",
           "OUT": "results/shared.parquet"}
    r = subprocess.run(["bash", str(recipe)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stopped by SIGTERM" in r.stderr                         # the EXIT trap stopped the proxy
    trials = optuna.load_study(study_name=s.name, storage=db).get_trials(deepcopy=False)
    assert sorted(t.number for t in trials if t.state.name == "COMPLETE") == list(range(40))
    # the workers wrote no Parquet; the job exported the study once, through the proxy
    assert sorted(p.name for p in tmp_path.rglob("*.parquet")) == ["shared.parquet"]
    assert r.stdout.count("no Parquet written") == 2
    df = pd.read_parquet(tmp_path / "results" / "shared.parquet")
    assert len(df) == 40 and not df["duplicate_of"].notna().any()   # own seeds: no design proposed twice
