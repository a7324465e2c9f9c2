"""Retries of storage calls that lose their connection (a database restart, a failover), with
exponential backoff and a note per retry; a connection that stays lost is one line (exit 1)."""

from __future__ import annotations

import re
import time

from ..errors import RuntimeFailure
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
    lines = [x.strip() for x in str(cause).splitlines() if x.strip() and not x.startswith(("(Background", "["))]
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


def retrying(name: str, base):
    """``base.<name>`` retried while the connection is lost (``self.dse_url`` names the storage)."""
    def call(self, *args, **kwargs):
        method = getattr(base, name)
        if getattr(self, "_dse_depth", 0):          # a call inside a retried call: the outer one retries
            return method(self, *args, **kwargs)
        for attempt in range(RETRY_ATTEMPTS):
            self._dse_depth = 1
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:        # noqa: BLE001 - only a lost connection is retried
                cause = transient_cause(exc)
                if cause is None:
                    raise
                first = driver_message(cause)
                full = slots_full(cause)
                what = SLOTS_HINT if full else "lost the database connection"
                if attempt == RETRY_ATTEMPTS - 1:
                    why = (f"the server had no free connection slot in {RETRY_ATTEMPTS} attempts" if full else
                           f"the database stayed unreachable after {RETRY_ATTEMPTS} attempts")
                    hint = " (each worker holds one connection: raise max_connections, or use dse storage-proxy)" \
                        if full else ""
                    raise RuntimeFailure(f"--storage {redact_url(self.dse_url)}: {why} ({type(cause).__name__}: "
                                         f"{first}){hint}; the finished trials are kept in it: run the same command "
                                         "again to resume") from None
                wait = min(RETRY_CAP_S, RETRY_BASE_S * 2 ** attempt)
                note(f"note: {redact_url(self.dse_url)}: {name.lstrip('_')}: {what} ({type(cause).__name__}: {first}); "
                     f"retry {attempt + 1} of {RETRY_ATTEMPTS - 1} in {wait:g} s (transient: the call is made again)")
                time.sleep(wait)
            finally:
                self._dse_depth = 0
    call.__name__ = name
    return call
