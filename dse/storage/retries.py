"""Storage calls that fail: a lost connection (a database restart, a failover, the gRPC proxy
restarting) is retried with exponential backoff and a note per retry, and is one line (exit 1) when
it stays lost; a database that refuses for good (read-only, no privilege, a value too long) is one
line at once, naming what the server said."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

from ..errors import DseError, RuntimeFailure
from ..process.progress import note
from .credentials import redact_text, redact_url

#: retries of a storage call that lost its database connection: waits RETRY_BASE_S x 2^k, capped
#: at RETRY_CAP_S (0.5, 1, 2, 4, 8 s: ~15 s in all, enough for a PostgreSQL restart or failover)
RETRY_ATTEMPTS, RETRY_BASE_S, RETRY_CAP_S = 6, 0.5, 8.0
#: SQLAlchemy's names for "the connection, not the statement, failed"
TRANSIENT = ("OperationalError", "InterfaceError", "DisconnectionError")
#: what PostgreSQL and MySQL/MariaDB say when every connection slot is taken: transient (slots free
#: as other clients leave), and what to do about it is not to resend the statement
SLOTS_FULL = ("remaining connection slots are reserved", "too many clients already", "too many connections",
              "sorry, too many clients")
SLOTS_HINT = ("the server has no free connection slot: each dse worker holds one connection, so a campaign of N "
              "workers needs N (raise max_connections, or put `dse storage-proxy` in front)")


def slots_full(exc: BaseException | None) -> bool:
    """True when ``exc`` (or the error behind it) says the server's connection slots are all taken."""
    seen = 0
    while exc is not None and seen < 6:
        if any(s in str(exc).lower() for s in SLOTS_FULL):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def driver_message(exc: BaseException) -> str:
    """The first line of the driver's own error behind ``exc`` (SQLAlchemy's "(psycopg.OperationalError) "
    prefix removed, passwords blanked), not Optuna's wrapper ("invalid data in the commit")."""
    cause, seen = exc, 0
    while cause is not None and seen < 6:
        if type(cause).__module__.split(".")[0] in ("sqlalchemy", "psycopg", "psycopg2", "pymysql", "MySQLdb"):
            break
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    cause = cause if cause is not None else exc
    said = str(cause).split("\n[SQL:")[0]           # SQLAlchemy's statement, its parameters and link: not said
    lines = [x.strip() for x in said.splitlines() if x.strip() and not x.startswith(("(Background", "["))]
    text = re.sub(r"^\([\w.]+\) ", "", "; ".join(lines[:2])) if lines else type(cause).__name__
    return redact_text(text)


def transient_cause(exc: BaseException) -> BaseException | None:
    """The connection error behind ``exc`` (Optuna re-raises SQLAlchemy's as StorageInternalError
    ``from`` it), or None when ``exc`` is not a lost connection."""
    seen = 0
    while exc is not None and seen < 5:
        if type(exc).__name__ in TRANSIENT:
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


#: gRPC status codes of a call that may pass when made again: the proxy restarting, unreachable for a
#: while, or saying its database is (dse's proxy answers UNAVAILABLE then, :mod:`.proxy`)
GRPC_TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "ABORTED")
#: what gRPC says when the connection broke under a call in flight (status UNKNOWN or INTERNAL)
GRPC_TRANSPORT = re.compile(r"stream removed|connection reset|socket closed|rst_stream|goaway|broken pipe", re.I)
#: SQLSTATEs (PostgreSQL, MySQL 1792) and MySQL error numbers of a server refusing a statement for
#: good: read-only (a standby after a failover), no privilege, a value that does not fit its column
READ_ONLY, PERMISSION, BAD_VALUE = ("25006", 1290, 1792, 1836), ("42501", 1044, 1142, 1143, 1227), (1264, 1406)


class StorageUnreachable(RuntimeFailure):
    """A storage call still failing after every retry; ``reason`` is the message without the advice."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"{reason}; the finished trials are kept in it: run the same command again to resume")


@dataclass(frozen=True)
class Fault:
    """A call that failed in a way that may pass: what to say while retrying, and on giving up."""

    kind: str           # the error's name: OperationalError, UNAVAILABLE
    text: str           # what the driver or the proxy said, one line, passwords blanked
    what: str           # the retry's note: "lost the database connection"
    gave_up: str        # the last line's reason, before "after N attempts"
    hint: str = ""


def _driver_error(exc: BaseException | None) -> BaseException | None:
    seen = 0
    while exc is not None and seen < 6:
        if type(exc).__module__.split(".")[0] in ("psycopg", "psycopg2", "pymysql", "MySQLdb"):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def database_refusal(exc: BaseException, shown: str) -> DseError | None:
    """The one-line error for a database that refuses a statement for good (read-only, no
    privilege: exit 1; a value too long for its column: exit 2), None for any other error."""
    err = _driver_error(exc)
    if err is None:
        return None
    state = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
    number = err.args[0] if err.args and isinstance(err.args[0], int) else None
    said = driver_message(exc)
    if number is not None and len(err.args) > 1:            # PyMySQL's (errno, text)
        said = redact_text(f"{err.args[1]} (MySQL error {number})")
    if state in READ_ONLY or number in READ_ONLY:
        return RuntimeFailure(f"--storage {shown}: the database is read-only ({said}): a standby after a failover, "
                              "or a server set read-only; point --storage at the writable primary (the finished "
                              "trials are kept in it: run the same command again)")
    if state in PERMISSION or number in PERMISSION:
        return RuntimeFailure(f"--storage {shown}: the database refused ({said}): its user needs SELECT, INSERT, "
                              "UPDATE and DELETE on Optuna's tables (and CREATE on the schema for a new database)")
    if (isinstance(state, str) and state.startswith("22")) or number in BAD_VALUE:
        return DseError(f"--storage {shown}: the database refused a value of this study ({said}): a name longer "
                        "than its column allows? Shorten the study's name, or widen the column")
    return None


def database_fault(exc: BaseException, shown: str) -> Fault | None:
    """A lost database connection or a server with no free slot (retried), a refusal (raised as
    its one line), or None (not a database error of these kinds: raised as it is)."""
    refused = database_refusal(exc, shown)
    if refused is not None:
        raise refused from None
    cause = transient_cause(exc)
    if cause is None:
        return None
    if slots_full(cause):
        return Fault(type(cause).__name__, driver_message(cause), SLOTS_HINT, "the server had no free connection slot",
                     " (each worker holds one connection: raise max_connections, or use dse storage-proxy)")
    return Fault(type(cause).__name__, driver_message(cause), "lost the database connection",
                 "the database stayed unreachable")


def grpc_fault(exc: BaseException, shown: str) -> Fault | None:
    """A gRPC call that failed at the proxy's door (restarting, down, its database unreachable:
    retried); any other status of Optuna's bare RpcError is raised as one line (OUT_OF_RANGE, dse's
    proxy's bad input: exit 2; the rest exit 1). None for anything else."""
    import grpc
    if not isinstance(exc, grpc.RpcError) or not callable(getattr(exc, "code", None)):
        return None
    code = exc.code()
    text = redact_text(" ".join(str(exc.details() or code.name).split()))
    text = text.removeprefix("Exception calling application: ")
    if code.name in GRPC_TRANSIENT or (code.name in ("UNKNOWN", "INTERNAL") and GRPC_TRANSPORT.search(text)):
        return Fault(code.name, text, "the storage proxy did not answer", "the storage proxy stayed unreachable")
    if code.name == "OUT_OF_RANGE":
        raise DseError(f"--storage {shown}: the storage proxy refused: {text}") from None
    raise RuntimeFailure(f"--storage {shown}: the storage proxy failed ({code.name}: {text})") from None


#: per thread, whether a retried call is under way (the proxy serves from many threads at once)
_CALLING = threading.local()


def retrying(name: str, base, classify=database_fault):
    """``base.<name>`` made again with backoff while ``classify`` sees a :class:`Fault` in what it
    raises; ``self.dse_url`` names the storage, ``self.dse_reconnect()`` (if any) runs before a retry.
    A call made inside a retried call (in the same thread) is not retried itself: the outer one is."""
    def call(self, *args, **kwargs):
        method = getattr(base, name)
        if getattr(_CALLING, "busy", False):
            return method(self, *args, **kwargs)
        for attempt in range(RETRY_ATTEMPTS):
            _CALLING.busy = True
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:        # noqa: BLE001 - classified: retried, mapped to one line, or raised
                shown = redact_url(self.dse_url)
                fault = classify(exc, shown)
                if fault is None:
                    raise
                if attempt == RETRY_ATTEMPTS - 1:
                    raise StorageUnreachable(f"--storage {shown}: {fault.gave_up} after {RETRY_ATTEMPTS} attempts "
                                             f"({fault.kind}: {fault.text}){fault.hint}") from None
                wait = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** attempt)
                note(f"note: {shown}: {name.lstrip('_')}: {fault.what} ({fault.kind}: {fault.text}); "
                     f"retry {attempt + 1} of {RETRY_ATTEMPTS - 1} in {wait:g} s (transient: the call is made again)")
                time.sleep(wait)
                if hasattr(self, "dse_reconnect"):
                    self.dse_reconnect()
            finally:
                _CALLING.busy = False
    call.__name__ = name
    return call
