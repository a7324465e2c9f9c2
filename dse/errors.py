"""Exceptions. Bad input raises SpecError (file, field, value, allowed); the CLI exits 2."""

from __future__ import annotations

import difflib
import re
import reprlib
from collections.abc import Iterable

#: the distribution's name on the package index (the import package and the command stay `dse`; the
#: name `dse` on the index is an unrelated project)
DIST_NAME = "specdec-dse"


def install_hint(extra: str) -> str:
    """``pip install 'specdec-dse[EXTRA]'``: installs the extra's packages next to an installed
    specdec-dse, whether that came from the index or from a checkout (``pip install '.[EXTRA]'``
    in the checkout does the same)."""
    return f"pip install '{DIST_NAME}[{extra}]'"


#: how a value is shown in a message: short, whatever its size (a YAML alias bomb or a list of
#: 200,000 elements is never expanded into a message)
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxset = 3, 6, 6, 6, 6
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 120, 120, 60
#: errors one message lists before it says how many more there are
MAX_ERRORS_SHOWN = 20
#: errors of the elements of one list shown one by one; more are collapsed into one line
MAX_ELEMENT_ERRORS = 3


def short_repr(value: object, limit: int = 160) -> str:
    """repr(value) bounded in depth and breadth (reprlib) and cut at ``limit`` characters, for messages."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class DseError(Exception):
    """Root of every error dse raises on purpose."""

    exit_code = 2


class RuntimeFailure(DseError):
    """Not the input's fault: a database server that cannot be reached, a storage that fails."""

    exit_code = 1


class SpecError(DseError, ValueError):
    """One bad field: prints as ``path: field = value: expected allowed``."""

    def __init__(self, path: str | None, field: str, value: object, allowed: str):
        self.path, self.field, self.value, self.allowed = path, field, value, allowed
        where = f"{path}: " if path else ""
        shown = "" if value is _MISSING else f" = {short_repr(value)}"
        super().__init__(f"{where}{field}{shown}: {allowed}")


class SpecErrors(DseError, ValueError):
    """Every SpecError found in one file, reported together."""

    def __init__(self, errors: list[SpecError]):
        self.errors = list(errors)
        super().__init__("\n".join(collapse(self.errors)))


def collapse(errors: list[SpecError]) -> list[str]:
    """Message lines for ``errors``: the errors of more than MAX_ELEMENT_ERRORS elements of one
    list as one line ("200,000 elements of workload.batch are invalid; first: ..."), and at most
    MAX_ERRORS_SHOWN lines, the last saying how many more there are."""
    groups: dict[tuple, list[SpecError]] = {}
    for e in errors:
        groups.setdefault((e.path, re.sub(r"\[\d+\]", "[]", str(e.field))), []).append(e)
    lines = []
    for (path, field), members in groups.items():
        if len(members) <= MAX_ELEMENT_ERRORS or "[]" not in field:
            lines += [str(e) for e in members]
            continue
        where = f"{path}: " if path else ""
        lst = field.split("[]")[0]
        lines.append(f"{where}{len(members):,} elements of {lst} are invalid; first: {members[0].field}"
                     f"{'' if members[0].value is _MISSING else ' = ' + short_repr(members[0].value)}: "
                     f"{members[0].allowed}")
    if len(lines) > MAX_ERRORS_SHOWN:
        lines = lines[:MAX_ERRORS_SHOWN - 1] + [f"... and {len(lines) - MAX_ERRORS_SHOWN + 1:,} more errors"]
    return lines


class UnknownEntryError(DseError, KeyError):
    """A name that is not in the database, with the closest known names."""

    def __init__(self, kind: str, name: str, known: Iterable[str], where: str = ""):
        known = sorted(known)
        close = did_you_mean(name.lower(), known, n=3, cutoff=0.5)
        hint = (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else
                f"; known: {', '.join(known)}" if len(known) <= 60 else "")
        self.kind, self.name, self.close = kind, name, close
        lister = "hw" if kind == "device" else kind + "s"
        #: the message without the name, for callers that name the field themselves
        self.detail = f"not in hardware_db/{kind}s{hint} (`dse {lister} list` shows all)"
        self.message = f"{where}{kind} {name!r} is {self.detail}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def did_you_mean(name: str, known: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The closest known names, the one hint every message uses: first the names that start with
    ``name`` once case and separators are ignored (``llama3`` -> llama-3.1-405b, llama-3.1-70b, ...;
    ``h100`` -> h100-pcie, h100-sxm), then those that contain it, then those that contain each of its
    parts (``llama-70b`` -> llama-2-70b, llama-3.1-70b, ...), then difflib's ratio >= ``cutoff``.

    >>> did_you_mean("llama3", ["llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b"], n=2)
    ['llama-3.1-70b', 'llama-3.1-8b']
    >>> did_you_mean("Llama-70B", ["eagle-llama2-chat-70b", "llama-2-70b", "llama-2-7b", "qwen2.5-72b"], n=2)
    ['llama-2-70b', 'eagle-llama2-chat-70b']
    """
    known = sorted(known)
    q = _norm(str(name))
    parts = [_norm(t) for t in re.split(r"[^A-Za-z0-9.]+", str(name)) if _norm(t)]
    out: list[str] = []
    if q:
        out += [k for k in known if _norm(k).startswith(q)]
        out += [k for k in known if q in _norm(k)]
        if len(parts) > 1:          # those that start with its first part first
            both = [k for k in known if all(t in _norm(k) for t in parts)]
            out += sorted(both, key=lambda k: not _norm(k).startswith(parts[0]))
    out += difflib.get_close_matches(str(name), known, n=n, cutoff=cutoff)
    return list(dict.fromkeys(out))[:n]


def _norm(text: str) -> str:
    """Lower case without separators: 'Llama-3.1_8B' -> 'llama318b'."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
MISSING = _MISSING


def raise_collected(errors: list[SpecError]) -> None:
    """Raise one SpecError, or a SpecErrors holding several; do nothing if empty."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise SpecErrors(errors)
