"""Storage URLs and their secrets: where a URL comes from, and its password kept out of everything
dse shows or writes.

A URL is taken from, first to last: ``--storage``, ``--storage-file FILE`` (its first line that is
not blank or a ``#`` comment), the environment variable ``DSE_STORAGE``, the study's ``storage:``.
A URL without a password lets the driver find it in its own files: libpq's ``~/.pgpass`` (or
``PGPASSFILE``) and ``?service=NAME`` entries of ``~/.pg_service.conf``; PyMySQL's
``?read_default_file=~/.my.cnf``. The flag and ``--storage-file`` keep the password out of the
process list (``ps`` shows every argument to every user of the machine).

Redaction follows SQLAlchemy's URL grammar (``scheme://user:password@host``: the user stops at the
first ``:`` or ``/``, the password runs to the first ``@``, so it may hold ``/``, ``:`` and
percent escapes) and blanks the password field only: the user name, host and every other
character of a message stay as they are, so a short password (``p``) or one equal to the user
name does not garble the text around it. ``password=``/``passwd=``/``pwd=`` key-value pairs (URL
queries, libpq connection strings in driver errors) are blanked too.

>>> redact_url("postgresql+psycopg://dse:p/a:ss@db:5432/dse")
'postgresql+psycopg://dse:***@db:5432/dse'
>>> redact_url("postgresql://dse@db/dse?sslmode=require&password=p%40ss")
'postgresql://dse@db/dse?sslmode=require&password=***'
>>> redact_text("import of postgresql://p:p@h/d specified: user p")
'import of postgresql://p:***@h/d specified: user p'
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from ..errors import SpecError

#: the environment variable that may hold the storage URL (no password on the command line)
ENV_VAR = "DSE_STORAGE"
#: a storage file longer than this is not a storage URL
MAX_STORAGE_FILE_BYTES = 64 * 1024

#: ``scheme://user:password@``: user as SQLAlchemy reads it (up to the first ':' or '/'), the
#: password up to the first '@' (SQLAlchemy's ``[^@]*``); no whitespace inside a URL in free text
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@?#\s'\"]*:)(?P<pw>[^@\s'\"]*)@")
#: password-like keys of a query string or a libpq connection string, with their values
_KEYVALUE = re.compile(r"(?i)(?P<head>(?<![A-Za-z0-9_])(?:password|passwd|pwd|sslpassword)\s*=\s*)"
                       r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;#'\"]*)")
MASK = "***"


def redact_text(text: object) -> str:
    """``text`` with every URL password field and every ``password=VALUE`` pair blanked as ``***``;
    nothing else changes."""
    out = _USERINFO.sub(lambda m: m.group("head") + (MASK if m.group("pw") else "") + "@", str(text))
    return _KEYVALUE.sub(lambda m: m.group("head") + (MASK if m.group("value") else ""), out)


def redact_url(url: object) -> str:
    """A storage URL with its password (user:PASSWORD@ or ?password=) shown as ``***``."""
    return redact_text(url)


def has_password(url: object) -> bool:
    """True when ``url`` carries a password (``user:PASSWORD@`` or a ``password=`` pair)."""
    return redact_text(url) != str(url)


def read_storage_file(path: str | os.PathLike, field: str = "--storage-file") -> str:
    """The storage URL in ``path``: its first line that is neither blank nor a ``#`` comment.
    A missing, unreadable, oversized or empty file is bad input (exit 2); a file that group or
    others may read gets a one-line note (a password in it is not private)."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(None, field, str(p), "expected a file holding the storage URL on its first line")
        if st.st_size > MAX_STORAGE_FILE_BYTES:
            raise SpecError(None, field, str(p), f"is {st.st_size:,} bytes; a storage file holds one URL "
                            f"(at most {MAX_STORAGE_FILE_BYTES:,} bytes)")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(None, field, str(p), "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(None, field, str(p), f"cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    url = next((line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")),
               "")
    if not url:
        raise SpecError(None, field, str(p), "holds no storage URL (its first line that is not blank or # ...)")
    if has_password(url) and st.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        sys.stderr.write(f"note: {p} holds a password and other users may read it: chmod 600 {p}\n")
    return url


def storage_source(flag: str | None, file: str | None, env=None) -> tuple[str | None, str]:
    """(the storage URL, where it came from) from ``--storage``, ``--storage-file``, then
    ``DSE_STORAGE``; (None, "") when none is given (the study's ``storage:`` or its default
    applies). ``--storage`` and ``--storage-file`` together are bad input."""
    env = os.environ if env is None else env
    if flag is not None and file is not None:
        raise SpecError(None, "--storage-file", str(file), "give either --storage or --storage-file, not both")
    if flag is not None:
        return flag, "--storage"
    if file is not None:
        return read_storage_file(file), f"--storage-file {file}"
    value = env.get(ENV_VAR, "").strip()
    if value:
        return value, ENV_VAR
    return None, ""
