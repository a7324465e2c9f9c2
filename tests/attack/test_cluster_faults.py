"""Attack suite, fault class "cluster faults kill workers" (Reliability IV).

Before the fix: restarting `dse storage-proxy`, or its database down 20 s, killed every worker with a
gRPC traceback; trial start times crossed the proxy as naive local time, so with the proxy 14 h
ahead a dead worker's trials never went stale (and 12 h behind, live workers' trials were failed as
stale); PostgreSQL refusing a write (a read-only server, a role without rights, a value too long)
ended in Optuna's "invalid data in the commit, e.g. exceeding max length" traceback.

The proxy cases need grpcio; the PostgreSQL cases run their own throw-away server (root and PG_BIN,
as .ci/run exports them), so stopping it or making it read-only disturbs no other test.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest
from attackkit import cli, one_line, server_url, write_study

DSE = str(Path(sys.executable).with_name("dse"))
#: POSIX time zones (no tz database needed): 14 h ahead of UTC, 12 h behind it
AHEAD, BEHIND = "<+14>-14", "<-12>12"


def _require(reason: str):
    if os.environ.get("DSE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{reason}; DSE_REQUIRE_SERVERS=1 makes this a failure")
    pytest.skip(reason)


def _need_grpc():
    try:
        import grpc  # noqa: F401
    except ImportError:
        _require("grpcio is not installed: pip install '.[grpc]' (.ci/run does)")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tz: str = "UTC", **extra) -> dict:
    return {**os.environ, "TZ": tz, "COLUMNS": "400", **extra}


def _start_proxy(db: str, port: int, tz: str = "UTC", fast_retries: bool = False) -> subprocess.Popen:
    """`dse storage-proxy` on ``db`` (passed in DSE_STORAGE: no password in the process list), once it
    serves. ``fast_retries``: its database retries wait 0.01 s x 2^k, not 0.5 s x 2^k."""
    cmd = [DSE, "storage-proxy", "--port", str(port)]
    if fast_retries:
        cmd = [sys.executable, "-c", "import sys, dse.storage.retries as r; r.RETRY_BASE_S = 0.01; "
               "from dse.cli import main; sys.argv[0] = 'dse'; main()", *cmd[1:]]
    proxy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=_env(tz, DSE_STORAGE=db))
    first = proxy.stderr.readline()
    assert first.startswith("dse storage-proxy: serving"), first + proxy.stderr.read()
    threading.Thread(target=proxy.stderr.read, daemon=True).start()     # its notes: never a full pipe
    return proxy


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def _states_sqlite(path: Path, name: str) -> dict[str, int]:
    """Trial states of study ``name`` in the SQLite file ``path`` (read directly: the proxy may be down)."""
    try:
        with sqlite3.connect(path, timeout=10) as c:
            rows = c.execute("SELECT t.state, count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                             "WHERE s.study_name = ? GROUP BY t.state", (name,)).fetchall()
    except sqlite3.OperationalError:        # no tables yet
        return {}
    return {k: n for k, n in rows}


def _trials(url: str, name: str) -> list:
    import optuna
    return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)


def _reasked(trials) -> list[int]:
    """Trials enqueued again because their first ask was failed as stale."""
    return [t.number for t in trials if "dse_reasked" in t.user_attrs]


def _wait_for(what, deadline_s: float, *procs) -> None:
    t0 = time.monotonic()
    while not what():
        assert time.monotonic() - t0 < deadline_s, "timed out"
        assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
        time.sleep(0.05)


# --------------------------------------------------------------------------- the proxy restarted or gone

@pytest.mark.servers
def test_a_proxy_restarted_mid_run_costs_no_worker(tmp_path, shm):
    """SIGTERM to the proxy, 3 s without one, a new proxy on the same port: both workers retry,
    finish, and the study holds exactly its total; nothing was failed as stale and asked again."""
    _need_grpc()
    path, port = shm / "p.db", _free_port()
    db, url = f"sqlite:///{path}", f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "restart", "search.n_trials": 80, "search.batch_size": 10})
    proxy = _start_proxy(db, port)
    workers = []
    try:
        workers = [subprocess.Popen([DSE, "run", study, "--storage", url, "--quiet", "--no-parquet"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=_env(DSE_WORKER=str(i))) for i in range(2)]
        _wait_for(lambda: _states_sqlite(path, "restart").get("COMPLETE", 0) >= 20, 300, *workers)
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=60)
        assert _states_sqlite(path, "restart").get("COMPLETE", 0) < 80, "the run ended before the restart"
        time.sleep(3)
        proxy = _start_proxy(db, port)
        outs = [w.communicate(timeout=600) for w in workers]
    finally:
        for w in workers:
            _stop(w)
        _stop(proxy)
    errs = [e for _, e in outs]
    assert [w.returncode for w in workers] == [0, 0], [e[-2000:] for e in errs]
    assert not any("Traceback" in e for e in errs)
    assert any("the storage proxy did not answer" in e for e in errs), errs      # retried, and said so
    trials = _trials(db, "restart")
    states = [t.state.name for t in trials]
    assert states.count("COMPLETE") == 80 and "RUNNING" not in states and "WAITING" not in states
    assert _reasked(trials) == []
    # no FAIL but the last batches' trials asked beyond the total (two workers racing for the last slots)
    assert all(t.number >= 80 for t in trials if t.state.name == "FAIL")


@pytest.mark.servers
def test_a_proxy_that_stays_away_is_one_line_and_the_same_command_resumes(tmp_path, shm, monkeypatch):
    """The proxy killed after the first batch and not restarted: retried, then one line, exit 1;
    run again with a proxy back, the study reaches its total."""
    import dse.search.asktell
    _need_grpc()
    path, port = shm / "p.db", _free_port()
    db, url = f"sqlite:///{path}", f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "gone", "search.n_trials": 64, "search.batch_size": 16})
    monkeypatch.setattr("dse.storage.retries.RETRY_BASE_S", 0.01, raising=False)
    proxy = _start_proxy(db, port)
    real, calls = dse.search.asktell.evaluate_study, [0]

    def evaluate(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:               # the second batch is asked: the proxy dies before its tells
            proxy.kill()
            proxy.wait()
        return real(*args, **kwargs)
    monkeypatch.setattr(dse.search.asktell, "evaluate_study", evaluate)
    try:
        line = one_line(*cli("run", study, "--storage", url, "--quiet", "--no-parquet"), 1)
        assert line.startswith(f"error: --storage {url}: the storage proxy stayed unreachable after 6 attempts "
                               "(UNAVAILABLE: "), line
        assert line.endswith("the finished trials are kept in it: run the same command again to resume"), line
        assert _states_sqlite(path, "gone") == {"COMPLETE": 16, "RUNNING": 16}
        monkeypatch.undo()
        proxy = _start_proxy(db, port)
        code, out, err, exc = cli("run", study, "--storage", url, "--quiet", "--no-parquet", "--heartbeat-timeout", "1")
        assert code == 0 and exc is None, (out, err)
    finally:
        _stop(proxy)
    assert _states_sqlite(path, "gone")["COMPLETE"] == 64


# --------------------------------------------------------------------------- trial times across time zones

def _held_running(path: Path, name: str, n: int, proc: subprocess.Popen) -> None:
    _wait_for(lambda: _states_sqlite(path, name).get("RUNNING", 0) >= n, 300, proc)


def test_the_stale_check_reads_beats_in_epoch_seconds_not_naive_start_times():
    """Trials whose start is naive local time of a proxy 14 h ahead or 12 h behind: a dead worker's
    trial goes stale by its record's beat, a live worker's stays, and a trial no record or heartbeat
    dates goes stale a timeout after this worker first saw it."""
    import datetime

    from optuna.trial import TrialState

    from dse.search.workers import fail_stale_trials
    ahead = datetime.datetime.now() + datetime.timedelta(hours=14)
    behind = datetime.datetime.now() - datetime.timedelta(hours=12)
    now = time.time()

    class Trial:
        def __init__(self, number, start, attrs):
            self.number, self.datetime_start, self.user_attrs = number, start, attrs
            self.state, self.params = TrialState.RUNNING, {"x": number}

    class Study:
        user_attrs = {"dse_worker:dead": {"trials": [[0, 1]], "beat": now - 120},      # killed 2 min ago
                      "dse_worker:live": {"trials": [], "asking_from": 2, "beat": now - 5}}
        failed: list = []

        def tell(self, number, state):
            self.failed.append(number)

        def enqueue_trial(self, params, user_attrs):
            pass
    trials = [Trial(0, ahead, {}), Trial(1, behind, {"dse_heartbeat": now - 90}), Trial(2, behind, {}),
              Trial(3, ahead, {}), Trial(100, ahead, {"dse_other": 1})]
    assert fail_stale_trials(Study(), 60, trials, now=now) == 2
    assert Study.failed == [0, 1]                  # the dead worker's; 2 and 3 are the live one's
    del Study.user_attrs["dse_worker:live"]        # (the live worker finished: it holds nothing now)
    trials, seen = trials[2:], {}
    assert fail_stale_trials(Study(), 60, trials, now=now + 30, seen=seen) == 0      # first seen at now + 30
    assert fail_stale_trials(Study(), 60, trials, now=now + 91, seen=seen) == 3
    assert Study.failed == [0, 1, 2, 3, 100]


@pytest.mark.servers
def test_a_dead_workers_trials_go_stale_with_the_proxy_14_h_ahead(tmp_path, shm):
    """A worker on another machine (its record says so) killed while it asks its batch; the proxy
    runs 14 h ahead of the workers. The resumed run fails the dead worker's trials after the 10 s
    heartbeat timeout and finishes (before: their start looked 14 h in the future, so it waited
    14 h)."""
    import optuna
    _need_grpc()
    path, port = shm / "p.db", _free_port()
    db, url = f"sqlite:///{path}", f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "ahead", "search.n_trials": 60, "search.batch_size": 60})
    cmd = [DSE, "run", str(study), "--storage", url, "--quiet", "--no-parquet", "--heartbeat-timeout", "10"]
    proxy = _start_proxy(db, port, tz=AHEAD)
    dead = None
    try:
        dead = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
        _held_running(path, "ahead", 20, dead)
        dead.kill()
        dead.wait()
        with warnings.catch_warnings():                     # experimental since Optuna 4.2
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            store = optuna.storages.GrpcStorageProxy(host="localhost", port=port)
        ostudy = optuna.load_study(study_name="ahead", storage=store)
        for key, rec in ostudy.user_attrs.items():          # the dead worker ran on another machine
            if key.startswith("dse_worker:"):
                ostudy.set_user_attr(key, {**rec, "machine": "elsewhere/boot/1"})
        store.close()
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
        took = time.monotonic() - t0
    finally:
        _stop(dead)
        _stop(proxy)
    assert r.returncode == 0, r.stderr[-2000:]
    assert took < 240
    trials = _trials(db, "ahead")
    assert sum(t.state.name == "COMPLETE" for t in trials) == 60
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(failed) >= 20                            # every trial the dead worker held, failed as stale
    # and its design asked again: each one the worker had given parameters (a trial killed before its
    # first parameter has no design to ask again)
    assert sorted(t.user_attrs["dse_reasked"] for t in trials if "dse_reasked" in t.user_attrs) == sorted(
        t.number for t in failed if t.params)


@pytest.mark.servers
def test_a_live_workers_trials_are_not_failed_with_the_proxy_12_h_behind(tmp_path, shm):
    """The proxy runs 12 h behind the workers. A worker paused (SIGSTOP: alive, silent for seconds)
    while it asks its batch; another worker starts, does the rest and waits for the paused one's
    trials instead of failing them as 12 h old; resumed, the paused one finishes them."""
    _need_grpc()
    path, port = shm / "p.db", _free_port()
    db, url = f"sqlite:///{path}", f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "behind", "search.n_trials": 60, "search.batch_size": 60})
    # a heartbeat timeout far beyond this test's minutes, far below 12 h
    cmd = [DSE, "run", str(study), "--storage", url, "--quiet", "--no-parquet", "--heartbeat-timeout", "1800"]
    proxy = _start_proxy(db, port, tz=BEHIND)
    paused = other = None
    lines: list[str] = []
    try:
        paused = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=_env(DSE_WORKER="0"))
        _held_running(path, "behind", 20, paused)
        paused.send_signal(signal.SIGSTOP)
        other = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env=_env(DSE_WORKER="1"))
        reader = threading.Thread(target=lambda: lines.extend(other.stderr), daemon=True)
        reader.start()
        t0 = time.monotonic()
        while not any("waiting for" in x for x in lines) and other.poll() is None:
            assert time.monotonic() - t0 < 120
            time.sleep(0.1)
        waited = any("waiting for" in x for x in lines)
        paused.send_signal(signal.SIGCONT)
        other.wait(timeout=300)
        paused.wait(timeout=300)
        reader.join(timeout=10)
    finally:
        _stop(paused)
        _stop(other)
        _stop(proxy)
    assert waited, lines
    assert (paused.returncode, other.returncode) == (0, 0), lines
    trials = _trials(db, "behind")
    assert sum(t.state.name == "COMPLETE" for t in trials) == 60
    assert _reasked(trials) == []


# --------------------------------------------------------------------------- a PostgreSQL of our own

class OwnPostgres:
    """A throw-away PostgreSQL cluster on loopback, started and stopped by the tests (the way
    .ci/postgres.sh starts CI's), with a superuser ``postgres`` and a user ``dse``."""

    def __init__(self, pg_bin: str):
        self.bin, self.port, self.password = pg_bin, _free_port(), secrets.token_hex(12)
        self.dir = Path(tempfile.mkdtemp(prefix="dse-own-pg-"))
        shutil.chown(self.dir, "postgres")
        pw = self.dir / "pw"
        pw.write_text(self.password + "\n")
        shutil.chown(pw, "postgres")
        pw.chmod(0o600)
        self._su(f"{self.bin}/initdb -D {self.dir}/data -A scram-sha-256 -U postgres --pwfile={pw}")
        pw.unlink()
        self.start()
        with self.admin() as c:
            c.execute(f"CREATE USER dse PASSWORD '{self.password}'")

    def _su(self, cmd: str) -> None:
        subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", cmd], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)

    def start(self) -> None:
        self._su(f"{self.bin}/pg_ctl -D {self.dir}/data -l {self.dir}/log -w -o \"-c listen_addresses=127.0.0.1 "
                 f"-p {self.port} -k {self.dir} -c fsync=off\" start")

    def stop(self, mode: str = "fast") -> None:
        self._su(f"{self.bin}/pg_ctl -D {self.dir}/data -m {mode} -w stop")

    def restart(self) -> None:
        """pg_ctl restart -m fast: every session killed, the server back with its options."""
        self._su(f"{self.bin}/pg_ctl -D {self.dir}/data -l {self.dir}/log -m fast -w restart")

    def admin(self, db: str = "postgres"):
        import psycopg
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", password=self.password,
                               dbname=db, autocommit=True)

    def database(self, name: str, user: str = "dse") -> str:
        """A new database owned by ``dse``; its URL for ``user`` (whose password is the same)."""
        with self.admin() as c:
            c.execute(f"CREATE DATABASE {name} OWNER dse")
        return f"postgresql+psycopg://{user}:{self.password}@127.0.0.1:{self.port}/{name}"

    def states(self, db: str, name: str) -> dict[str, int]:
        with self.admin(db) as c:
            rows = c.execute("SELECT t.state, count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                             "WHERE s.study_name = %s GROUP BY t.state", (name,)).fetchall()
        return {k: n for k, n in rows}

    def remove(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def own_pg():
    pg_bin = os.environ.get("PG_BIN")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pg_bin = None
    if not pg_bin or os.geteuid() != 0 or shutil.which("su") is None:
        _require("no PostgreSQL of our own: needs root, psycopg and PG_BIN (.ci/run exports it: "
                 "source .ci/postgres.sh && pg_start)")
    pg = OwnPostgres(pg_bin)
    yield pg
    pg.remove()


@pytest.mark.servers
def test_postgresql_restart_mid_run_and_the_run_finishes(own_pg, tmp_path):
    """A real drop: `pg_ctl restart -m fast` (every session killed) while `dse run` works, on a server of
    the test's own (CI's shared one serves the tests running beside this one). A statement in flight
    fails and is retried with a one-line note; a drop between statements is absorbed by the pool's
    pre-ping without one, so a note is allowed, not required (CI saw both)."""
    import pandas as pd
    url = own_pg.database("restartpg")
    study = write_study(tmp_path, **{"name": "restartpg", "search.n_trials": 60, "search.batch_size": 10})
    p = subprocess.Popen([DSE, "run", study, "--storage", url, "--quiet", "--out", str(tmp_path / "q.parquet")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())

    def complete():
        try:
            return own_pg.states("restartpg", "restartpg").get("COMPLETE", 0)
        except Exception:       # noqa: BLE001 - the tables are not created yet
            return 0
    try:
        _wait_for(lambda: complete() >= 20, 300, p)
        own_pg.restart()
        assert p.poll() is None, "the run ended before the restart: the drop did not happen mid-run"
        out, err = p.communicate(timeout=600)
    finally:
        _stop(p)
    assert p.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    notes = [x for x in err.splitlines() if x.strip()]
    assert all("lost the database connection" in x and "***@" in x for x in notes), notes   # retried, said so
    assert complete() == 60 and len(pd.read_parquet(tmp_path / "q.parquet")) == 60


@pytest.mark.servers
def test_the_database_stopped_20_s_behind_the_proxy_is_waited_for(own_pg, tmp_path):
    """PostgreSQL stopped for 20 s behind the proxy (longer than the proxy's own ~15 s of retries):
    the proxy says UNAVAILABLE, the workers retry, and both finish with exactly the total."""
    _need_grpc()
    db = own_pg.database("down20")
    port = _free_port()
    url = f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "down20", "search.n_trials": 40, "search.batch_size": 10})
    proxy = _start_proxy(db, port)
    workers = []
    try:
        workers = [subprocess.Popen([DSE, "run", study, "--storage", url, "--quiet", "--no-parquet"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=_env(DSE_WORKER=str(i))) for i in range(2)]
        _wait_for(lambda: own_pg.states("down20", "down20").get("COMPLETE", 0) >= 10, 300, *workers)
        own_pg.stop()
        assert all(w.poll() is None for w in workers), "the run ended before the database stopped"
        time.sleep(20)
        own_pg.start()
        outs = [w.communicate(timeout=600) for w in workers]
    finally:
        for w in workers:
            _stop(w)
        _stop(proxy)
        try:
            own_pg.start()
        except subprocess.CalledProcessError:
            pass                    # running already
    errs = [e for _, e in outs]
    assert [w.returncode for w in workers] == [0, 0], [e[-2000:] for e in errs]
    assert not any("Traceback" in e for e in errs) and not any(own_pg.password in e for e in errs)
    states = own_pg.states("down20", "down20")
    assert states.get("COMPLETE") == 40 and not states.get("RUNNING") and not states.get("WAITING")


@pytest.mark.servers
def test_the_database_down_for_good_behind_the_proxy_is_one_line(own_pg, tmp_path, monkeypatch):
    """The database stays down: the proxy's retries end in UNAVAILABLE naming the database, the
    worker's in one line, exit 1, the password blanked."""
    _need_grpc()
    db = own_pg.database("downforgood")
    port = _free_port()
    url = f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "downforgood", "search.n_trials": 32, "search.batch_size": 16})
    proxy = _start_proxy(db, port, fast_retries=True)
    monkeypatch.setattr("dse.storage.retries.RETRY_BASE_S", 0.01, raising=False)
    try:
        own_pg.stop()
        code, out, err, exc = cli("run", study, "--storage", url, "--quiet", "--no-parquet")
    finally:
        _stop(proxy)
        own_pg.start()
    line = one_line(code, out, err, exc, 1)
    assert line.startswith(f"error: --storage {url}: the storage proxy stayed unreachable after 6 attempts "
                           "(UNAVAILABLE: its database: --storage postgresql+psycopg://dse:***@"), line
    assert "the database stayed unreachable" in line and own_pg.password not in err


@pytest.mark.servers
def test_a_read_only_database_is_one_line_exit_1_with_the_servers_words(own_pg, tmp_path):
    """A failover left the database read-only (ALTER DATABASE ... default_transaction_read_only)."""
    db = own_pg.database("readonly")
    study = write_study(tmp_path, **{"name": "ro", "search.n_trials": 16, "search.batch_size": 16})
    code, out, err, exc = cli("run", study, "--storage", db, "--quiet", "--no-parquet")
    assert code == 0, err
    with own_pg.admin() as c:
        c.execute("ALTER DATABASE readonly SET default_transaction_read_only = on")
    code, out, err, exc = cli("run", study, "--storage", db, "--quiet", "--no-parquet", "--n-trials", "32")
    line = one_line(code, out, err, exc, 1)
    assert "cannot execute" in line and "in a read-only transaction" in line, line
    assert line.startswith("error: --storage postgresql+psycopg://dse:***@"), line
    assert "exceeding max length" not in line and own_pg.password not in err
    assert own_pg.states("readonly", "ro") == {"COMPLETE": 16}


@pytest.mark.servers
def test_a_read_only_database_behind_the_proxy_is_one_line_exit_1_at_the_worker(own_pg, tmp_path):
    """The proxy answers the refusal as a status with dse's line (not UNKNOWN with a traceback's
    text), and the worker says it, exit 1; the proxy keeps serving."""
    _need_grpc()
    db = own_pg.database("readonlyproxied")
    port = _free_port()
    url = f"grpc://localhost:{port}"
    study = write_study(tmp_path, **{"name": "rop", "search.n_trials": 16, "search.batch_size": 16})
    proxy = _start_proxy(db, port)          # it makes Optuna's tables; then a failover leaves it read-only
    try:
        with own_pg.admin() as c:
            c.execute("ALTER DATABASE readonlyproxied SET default_transaction_read_only = on")
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'readonlyproxied'")
        line = one_line(*cli("run", study, "--storage", url, "--quiet", "--no-parquet"), 1)
        assert proxy.poll() is None
    finally:
        _stop(proxy)
    assert line.startswith(f"error: --storage {url}: the storage proxy failed (INTERNAL: --storage "
                           "postgresql+psycopg://dse:***@"), line
    assert "the database is read-only (cannot execute" in line and own_pg.password not in line


@pytest.mark.servers
def test_a_role_without_rights_on_the_tables_is_one_line_exit_1(own_pg, tmp_path):
    """A role that may read Optuna's tables but not write them."""
    db = own_pg.database("norights")
    study = write_study(tmp_path, **{"name": "nr", "search.n_trials": 16, "search.batch_size": 16})
    assert cli("run", study, "--storage", db, "--quiet", "--no-parquet")[0] == 0      # the tables, made by dse
    with own_pg.admin("norights") as c:
        c.execute(f"CREATE ROLE reader LOGIN PASSWORD '{own_pg.password}'")
        c.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    reader = db.replace("//dse:", "//reader:")
    code, out, err, exc = cli("run", study, "--storage", reader, "--quiet", "--no-parquet", "--n-trials", "32")
    line = one_line(code, out, err, exc, 1)
    assert line.startswith("error: --storage postgresql+psycopg://reader:***@"), line
    assert "permission denied for table" in line and "exceeding max length" not in line, line
    assert own_pg.password not in err


@pytest.mark.servers
def test_a_mariadb_user_without_rights_is_one_line_at_once(tmp_path):
    """MariaDB reports "INSERT command denied" as an OperationalError, SQLAlchemy's class of a lost
    connection: it was retried for 15 s and then called unreachable. Now one line at once, exit 1."""
    url, my_dir = server_url("DSE_TEST_MYSQL_URL"), os.environ.get("MY_DIR")
    if not my_dir or shutil.which("mariadb") is None:
        _require("no MariaDB of .ci/mysql.sh (its MY_DIR and the mariadb client) to create a user in")
    name = f"rd{secrets.token_hex(4)}"
    password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    study = write_study(tmp_path, **{"name": name, "search.n_trials": 8, "search.batch_size": 8})
    assert cli("run", study, "--storage", url, "--quiet", "--no-parquet")[0] == 0       # the tables
    database = url.rsplit("/", 1)[1].split("?")[0]
    subprocess.run(["mariadb", "--no-defaults", "-S", f"{my_dir}/sock", "-u", "root", "-e",
                    f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY '{password}'; "
                    f"GRANT SELECT ON {database}.* TO '{name}'@'127.0.0.1';"], check=True)
    reader = url.replace(url.split("://", 1)[1].split(":", 1)[0] + ":", name + ":", 1)
    t0 = time.monotonic()
    code, out, err, exc = cli("run", study, "--storage", reader, "--quiet", "--no-parquet", "--n-trials", "16")
    assert time.monotonic() - t0 < 10                  # not retried as a lost connection
    line = one_line(code, out, err, exc, 1)
    assert "command denied to user" in line and "(MySQL error 1142)" in line and password not in err, line


@pytest.mark.servers
def test_a_value_too_long_for_its_column_is_bad_input_exit_2(own_pg, tmp_path):
    """A column narrower than Optuna's (a DBA's schema): the server's "value too long" is bad input,
    one line naming what the server said."""
    db = own_pg.database("narrow")
    study = write_study(tmp_path, **{"name": "n", "search.n_trials": 8, "search.batch_size": 8})
    assert cli("run", study, "--storage", db, "--quiet", "--no-parquet")[0] == 0
    with own_pg.admin("narrow") as c:
        c.execute("ALTER TABLE studies ALTER COLUMN study_name TYPE varchar(20)")
    longer = write_study(tmp_path, file="l.yaml", **{"name": "a-name-of-thirty-characters-x", "search.n_trials": 8})
    line = one_line(*cli("run", longer, "--storage", db, "--quiet", "--no-parquet"), 2)
    assert "value too long for type character varying(20)" in line and "exceeding max length" not in line, line
    assert own_pg.password not in line


def test_a_study_name_too_long_for_a_database_is_refused_before_it_is_opened(tmp_path):
    """600 characters: Optuna's study_name column holds 512. Refused from the study file, exit 2,
    before any connection (the URL's server does not exist)."""
    study = write_study(tmp_path, **{"name": "n" * 600})
    url = f"postgresql+psycopg://dse:pw@127.0.0.1:{_free_port()}/dse"
    line = one_line(*cli("run", study, "--storage", url, "--quiet"), 2)
    assert "name" in line and "512" in line and "600" in line, line
    assert line.startswith(f"error: {study}: name = "), line
