"""Shared-study storages: the URL a user gives (``--storage``) to an Optuna storage object.

Journal files (``journal:PATH`` or a path), ``sqlite:///FILE`` (one process only),
``postgresql+psycopg://`` and ``mysql+pymysql://`` through SQLAlchemy with small pools, and
``grpc://HOST:PORT`` through Optuna's gRPC storage proxy (served by :mod:`.proxy`); calls that lose
their connection are retried (:mod:`.retries`). Passwords never leave this module unredacted: every
message and every URL shown goes through :func:`redact_url`.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from pathlib import Path

from ..errors import RuntimeFailure, SpecError, install_hint
from ..process.progress import note
from .credentials import redact_text, redact_url
from .retries import (
    RETRY_ATTEMPTS,
    RETRY_BASE_S,
    RETRY_CAP_S,
    SLOTS_HINT,
    database_refusal,
    driver_message,
    grpc_fault,
    retrying,
    slots_full,
)

__all__ = ["redact_url", "resolve_storage", "journal_file", "cut_torn_tail", "clear_stale_lock", "SLOTS_HINT",
           "driver_message", "slots_full", "default_journal", "journal_path", "JOURNAL_LOCK_NAME_EXTRA"]


def clear_stale_lock(journal: str | Path, wait_s: float = 2.0, out=None) -> bool:
    """Remove ``JOURNAL.lock`` when nobody releases it within ``wait_s`` seconds.

    Optuna holds the journal's lock only while appending (milliseconds); a lock that stays
    is left by a killed process, and Optuna would wait out its 30 s grace period silently.
    Returns True when a stale lock was removed (one line on stderr says so)."""
    lock = Path(str(journal) + ".lock")
    if not os.path.lexists(lock):
        return False
    try:
        first = os.lstat(lock)
    except FileNotFoundError:
        return False
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            now = os.lstat(lock)
        except FileNotFoundError:
            return False            # released: a live worker held it
        if (now.st_ino, now.st_mtime_ns) != (first.st_ino, first.st_mtime_ns):
            return False            # re-taken: live workers are appending
    age = time.time() - first.st_mtime
    try:
        os.unlink(lock)
    except FileNotFoundError:
        return False
    note(f"note: removed a stale journal lock {lock} ({age:.0f} s old, not released within {wait_s:g} s: left by "
         "a killed process)", out)
    return True



@functools.cache
def _retrying_rdb_class():
    """RDBStorage whose every storage call is retried with exponential backoff when the database
    connection drops (a server restart, a failover, a network blip). A retried write that had
    committed is harmless: a second tell raises UpdateFinishedTrialError, which dse ignores, and
    a trial created twice stays RUNNING until dse's heartbeat timeout fails it."""
    import optuna
    base = optuna.storages.RDBStorage
    # the public storage API, and the private methods Optuna's _CachedStorage calls on it
    private = ("_create_new_trial", "_get_best_trial_id", "_get_stale_trial_ids", "_get_trials", "_set_trial_param")
    names = [n for n, v in vars(base).items() if callable(v) and (not n.startswith("_") or n in private)
             and n not in ("upgrade", "remove_session")]
    return type("RetryingRDBStorage", (base,), {n: retrying(n, base) for n in names})


def _quiet_fallback(record) -> bool:
    """Logging filter: drop Optuna's "Falling back to a slower alternative" warning."""
    return "Falling back to a slower alternative" not in record.getMessage()


#: database connections a `dse run` worker holds: one (a single thread; Optuna's scoped session
#: reuses the thread's connection for nested calls), so N workers need N connections. Optuna's own
#: schema check would read the version over a second connection while a session holds the first;
#: dse skips it and makes the same check with the one connection (:func:`_check_schema`)
WORKER_CONNECTIONS = 1
#: connections a pool may open beyond its size, closed again as soon as they are returned
#: (SQLAlchemy's QueuePool): one, for the only nested session left, Optuna's first set-up of its
#: version table on a database that has none (``_VersionManager._init_alembic`` holds a connection
#: while it asks a session for the version), once in the database's life; with none, the first
#: worker on an empty database waited 30 s for a connection and failed
POOL_OVERFLOW = 1


def _rdb_storage(url: str, connections: int = WORKER_CONNECTIONS):
    """RDBStorage with a pool of ``connections`` (a campaign of N workers needs N connections;
    PostgreSQL's default max_connections = 100 keeps 3 for superusers; :data:`POOL_OVERFLOW`),
    connections checked before use (pool_pre_ping: a server restart costs no failed statement)
    and calls retried when the connection drops or every slot is taken; creation is retried the
    same way, and while many workers starting at once race to create the tables."""
    kwargs = {}
    if not url.startswith("sqlite"):
        kwargs = {"pool_size": connections, "max_overflow": POOL_OVERFLOW, "pool_recycle": 300, "pool_pre_ping": True}
    cls = _retrying_rdb_class()
    # Optuna reads a dropped connection in _get_trials as "too many IN variables" and logs a
    # warning before its fallback query fails too; dse's retry says what happened, in one line
    import logging
    log = logging.getLogger("optuna.storages._rdb.storage")
    if _quiet_fallback not in log.filters:
        log.addFilter(_quiet_fallback)
    for attempt in range(RETRY_ATTEMPTS):
        try:
            store = cls.__new__(cls)
            store.dse_url = url
            store.__init__(url, engine_kwargs=kwargs, skip_compatibility_check=True)
            _check_schema(store, url)
            return store
        except Exception as exc:   # noqa: BLE001 - classified below
            kind = type(exc).__name__
            racing = kind in ("IntegrityError", "ProgrammingError") or "already exists" in str(exc)   # MySQL: 1050
            racing = racing and database_refusal(exc, "") is None       # not "permission denied for schema"
            if racing and attempt < RETRY_ATTEMPTS - 1:
                time.sleep(0.2 * 2 ** attempt)   # another worker is creating the tables
                continue
            if slots_full(exc) and attempt < RETRY_ATTEMPTS - 1:
                wait = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** attempt)
                note(f"note: {redact_url(url)}: {SLOTS_HINT} ({driver_message(exc)}); retry {attempt + 1} of "
                     f"{RETRY_ATTEMPTS - 1} in {wait:g} s (transient: the call is made again)")
                time.sleep(wait)
                continue
            raise


def _check_schema(store, url: str) -> None:
    """Optuna's table-schema check (RDBStorage's check_table_schema_compatibility) over the pool's
    one connection: a database set up by another Optuna version is a runtime failure naming the
    upgrade command."""
    current, head = store.get_current_version(), store.get_head_version()
    if current != head:
        how = ("run `optuna storage upgrade --storage URL`" if current in store.get_all_versions()
               else "upgrade optuna (pip install -U optuna)")
        raise RuntimeFailure(f"--storage {redact_url(url)}: the database's Optuna schema is {current}, this Optuna "
                             f"needs {head}: {how}")


#: the longest study name a database storage holds (Optuna's ``studies.study_name``, VARCHAR(512));
#: dse refuses a longer one in the study file, for every storage (a study may move between them)
MAX_NAME_CHARS = 512
#: the storage URLs dse takes, for messages
EXPECTED = (f"expected sqlite:///FILE, postgresql+psycopg://USER@HOST/DB with {install_hint('postgres')}, "
            f"mysql+pymysql://USER@HOST/DB with {install_hint('mysql')}, grpc://HOST:PORT or a journal file")


def _host_port(url: str, field: str = "--storage") -> tuple[str, int]:
    """``grpc://HOST:PORT`` -> (HOST, PORT); anything else is bad input (exit 2)."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or port is None or parts.path not in ("", "/") or parts.query or parts.username:
        raise SpecError(None, field, redact_url(url), "expected grpc://HOST:PORT (the address of a running "
                        "`dse storage-proxy`)")
    return host, port


def require_grpc(field: str, value: str) -> None:
    try:
        import grpc  # noqa: F401
    except ImportError:
        raise SpecError(None, field, redact_url(value), f"the gRPC storage proxy needs grpcio: "
                        f"{install_hint('grpc')}") from None


@functools.cache
def _retrying_grpc_class():
    """Optuna's GrpcStorageProxy whose every call is retried with backoff, on a new channel, while
    the proxy does not answer (restarting, down, or its database unreachable: UNAVAILABLE), and
    whose other failures are one line (:func:`dse.storage.retries.grpc_fault`)."""
    import optuna
    base = optuna.storages.GrpcStorageProxy
    names = [n for n in dir(base) if not n.startswith("_") and callable(getattr(base, n))
             and n not in ("close", "wait_server_ready", "remove_session")]

    def dse_reconnect(self) -> None:
        """A new channel (and an empty trial cache): gRPC's own reconnection backs off up to 2 min."""
        self.close()
        self.__setstate__(self.__getstate__())
    calls = {n: retrying(n, base, grpc_fault) for n in names}
    return type("RetryingGrpcStorageProxy", (base,), {**calls, "dse_reconnect": dse_reconnect})


def grpc_client(url: str, wait_s: float = 10.0):
    """Optuna's GrpcStorageProxy for ``grpc://HOST:PORT``, its calls retried while the proxy is
    away (:func:`_retrying_grpc_class`), once the proxy answers (up to ``wait_s`` seconds; a proxy
    that does not is a runtime failure, exit 1)."""
    import optuna
    host, port = _host_port(url)
    require_grpc("--storage", url)
    with warnings.catch_warnings():             # experimental since Optuna 4.2
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        store = _retrying_grpc_class()(host=host, port=port)
    store.dse_url = url
    try:
        store.wait_server_ready(timeout=wait_s)
    except ConnectionError:
        store.close()
        raise RuntimeFailure(f"--storage {url}: no storage proxy answers there within {wait_s:g} s (start one "
                             f"with: DSE_STORAGE=DATABASE_URL dse storage-proxy --host {host} --port {port})") from None
    return store



def default_journal(out: Path) -> Path:
    """The journal of a study whose storage is not given: beside its output, ``.journal`` for the suffix."""
    return out.with_suffix(".journal")


def journal_path(url: str | None, out: Path) -> Path | None:
    """The journal file a storage URL names (None: :func:`default_journal`); None for ':memory:', a
    database or grpc:// (as :func:`resolve_storage` reads the URL)."""
    if url is None:
        return default_journal(out)
    if url == ":memory:" or url.startswith("grpc://") or ("://" in url and not url.startswith("journal:")):
        return None
    return Path(url.removeprefix("journal:"))


def resolve_storage(study, storage: str | None, out: Path, *, must_exist: bool = False,
                    connections: int = WORKER_CONNECTIONS):
    """None/null: a journal file beside the output; ':memory:'; a database URL; or a file path
    (``journal:PATH`` too). Returns (storage, the URL as shown: password redacted). ``must_exist``
    (dse export): a journal or SQLite file that does not exist is bad input, not created empty.
    A file that is not an Optuna journal (a Parquet file, a line of garbage) is bad input (exit 2)."""
    import optuna
    url = storage if storage is not None else study.storage
    if url is None:
        url = str(default_journal(out))
    if url == ":memory:":
        return None, url
    if url.startswith("journal:"):
        url = url[len("journal:"):]
    if url.startswith("grpc://"):
        return grpc_client(url), url
    if "://" in url:
        shown = redact_url(url)
        if url.startswith("sqlite:") and must_exist:
            db_file = url.split("://", 1)[1].lstrip("/") if url.startswith("sqlite:////") else url.split(":///", 1)[-1]
            if url.startswith("sqlite:////"):
                db_file = "/" + db_file
            if not Path(db_file.split("?")[0]).is_file():
                raise SpecError(None, "--storage", shown, "no such SQLite file (dse export reads a study; it "
                                "creates no database)")
        try:
            return _rdb_storage(url, connections), shown
        except ImportError as exc:  # the URL names a driver that is not installed: bad input
            raise SpecError(None, "--storage", shown, f"cannot open this database: "
                            f"{redact_text(str(exc).splitlines()[0])} ({EXPECTED})") from None
        except Exception as exc:  # SQLAlchemy: a malformed URL is bad input (exit 2), a server that
            # cannot be reached or a file that cannot be opened is a runtime failure (exit 1)
            refused = database_refusal(exc, shown)
            if refused is not None:
                raise refused from None
            first = driver_message(exc)
            if type(exc).__name__ in ("ArgumentError", "NoSuchModuleError"):
                raise SpecError(None, "--storage", shown, f"not a database URL: {first} ({EXPECTED})") from None
            hint = f" ({SLOTS_HINT})" if slots_full(exc) else ""
            raise RuntimeFailure(f"--storage {shown}: cannot open this database: {first}{hint}") from None
    path = Path(url)
    if not url.strip():
        raise SpecError(None, "--storage", url, "empty; expected a journal file, a database URL or :memory:")
    if path.is_dir():
        raise SpecError(None, "--storage", url, "is a directory; expected a journal file, a database URL or :memory:")
    if must_exist and not path.is_file():
        raise SpecError(None, "--storage", url, "no such journal file (or give a database URL)")
    if path.is_file():
        with open(path, "rb") as f:
            if f.read(4) == _PARQUET_MAGIC:
                raise SpecError(None, "--storage", url, "is a Parquet file (results), not an Optuna journal; give "
                                "the journal file (the study's output with .journal), a database URL or :memory:")
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_lock(url)
    try:
        store = optuna.storages.JournalStorage(journal_file(url))
        store.get_all_studies()         # replays the journal now: a record Optuna cannot read is found here
        return store, url
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:   # a record Optuna cannot replay
        raise SpecError(None, "--storage", url, f"{journal_problem(path) or 'not a readable Optuna journal'} "
                        f"({type(exc).__name__}); a journal is written only by dse run (or Optuna): give another "
                        "file, a database URL or :memory:") from None


#: bytes a Parquet file starts with: a results file given as --storage
_PARQUET_MAGIC = b"PAR1"


def journal_problem(path: Path) -> str | None:
    """What makes ``path`` unreadable as an Optuna journal: its first line that is not one JSON
    record with an ``op_code`` ('line 7 is not a journal record: ...'), or None. A torn last line
    (no newline) is not a problem: the next append cuts it (:func:`cut_torn_tail`)."""
    import json
    try:
        with open(path, "rb") as f:
            for i, line in enumerate(f, 1):
                if not line.endswith(b"\n"):
                    return None
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = None
                if not isinstance(rec, dict) or "op_code" not in rec:
                    shown = line[:60].decode("utf-8", "replace").strip()
                    return f"not an Optuna journal: line {i} is not a journal record ({shown!r})"
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    return None


def cut_torn_tail(path: str | Path, out=None) -> int:
    """Truncate the journal file ``path`` after its last newline; returns the bytes cut.

    A process killed inside ``write`` (SIGKILL, the OOM killer, a pre-empted job) can leave a
    record cut short: Linux stops a write to a regular file between pages when a fatal signal
    is pending. Optuna's reader skips an unterminated last line, but the next append would glue
    its first record to it, and a broken line in the middle makes every reader of the journal
    fail with a JSON error. The cut record was never acknowledged to anyone (its writer died),
    so it is dropped. Call with the journal's lock held."""
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return 0
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return 0
        cut, pos = 0, end
        while pos > 0:
            start = max(0, pos - 65536)
            f.seek(start)
            i = f.read(pos - start).rfind(b"\n")
            if i >= 0:
                cut = start + i + 1
                break
            pos = start
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    note(f"note: cut {end - cut} bytes of a journal record left unfinished in {path} (a worker killed while "
         "writing it)", out)
    return end - cut


#: bytes that the lock of journal_file (Optuna's JournalFileSymlinkLock) adds to the journal's file name:
#: JOURNAL.lock while it is held, renamed to JOURNAL.lock<uuid4, 36 characters>.rename to release it
JOURNAL_LOCK_NAME_EXTRA = len(".lock") + 36 + len(".rename")

#: a journal file is fsynced at most this often (and at exit): each append still reaches the file
#: (and other processes) at once; only an operating-system crash or power loss can lose the
#: appends of the last second, whose torn tail the next append cuts (:func:`cut_torn_tail`)
JOURNAL_SYNC_S = 1.0


def journal_file(path: str):
    """Optuna's JournalFileBackend on ``path`` with two changes: each append first
    :func:`cut_torn_tail` (under the journal's symlink lock, with the same lock and record format
    as Optuna's own append), and the file is fsynced at most every :data:`JOURNAL_SYNC_S` seconds
    and when the backend is collected or the process exits, instead of after every append (about
    13 a trial: the fsyncs made a 2,000-trial `dse run` about three times slower than the search)."""
    import json
    import time
    import weakref

    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    class TornTailSafeJournal(JournalFileBackend):
        def __init__(self, file_path: str):
            self.lock = JournalFileSymlinkLock(file_path)
            super().__init__(file_path, lock_obj=self.lock)
            self.path = file_path
            self.state = {"synced": time.monotonic(), "dirty": False}
            weakref.finalize(self, _fsync_if_dirty, file_path, self.state)     # at collection or exit

        def append_logs(self, logs) -> None:
            data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
            self.lock.acquire()
            try:
                cut_torn_tail(self.path)
                with open(self.path, "ab") as f:
                    f.write(data)
                    f.flush()
                    if time.monotonic() - self.state["synced"] >= JOURNAL_SYNC_S:
                        os.fsync(f.fileno())
                        self.state.update(synced=time.monotonic(), dirty=False)
                    else:
                        self.state["dirty"] = True
            finally:
                self.lock.release()

        def sync(self) -> None:
            """fsync the journal if an append since the last fsync has not been."""
            _fsync_if_dirty(self.path, self.state)

    return TornTailSafeJournal(path)


def _fsync_if_dirty(path: str, state: dict) -> None:
    if not state["dirty"]:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:             # the file is gone: nothing left to make durable
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    state["dirty"] = False
