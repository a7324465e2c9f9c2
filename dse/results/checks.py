"""What a results file must hold to be read: the columns every dse writer gives it, of their
types, and each trial on one row. A file edited to lack one is refused naming the file and the
column (DseError, exit 2), never read with a fallback (``fits`` for a missing ``feasible`` dropped
the study's constraints).

A repeated trial is refused, not counted once: a trial number names one evaluation, so two rows
of one trial mean rows were copied or two results joined, and dse cannot tell which copy is right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..errors import DseError

#: the columns every results file has (what the readers count and order rows by)
REQUIRED = {"trial": ("integer", "the trial or grid point of each row"),
            "feasible": ("boolean", "whether each design meets the study's constraints")}
#: the types of other columns the readers use, when present
TYPED = {"fits": "boolean", "duplicate_of": "integer", "is_pareto": "boolean", "pareto_rank": "integer"}
_KINDS = {"integer": (pa.types.is_integer, "an integer"), "boolean": (pa.types.is_boolean, "a boolean"),
          "numeric": (lambda t: pa.types.is_integer(t) or pa.types.is_floating(t), "a numeric")}
_AGAIN = "the file was edited or not written by dse: re-run the study to write it again"


def check_columns(path: Path, schema: pa.Schema, meta: Mapping) -> None:
    """DseError (one line, naming ``path`` and the column) when a column of :data:`REQUIRED` or
    an objective of the study (``meta``) is missing, or a column has another type than dse writes."""
    objectives = [o["metric"] for o in meta.get("objectives") or [] if isinstance(o, Mapping)
                  and isinstance(o.get("metric"), str)]
    need = {**{c: k for c, (k, _) in REQUIRED.items()}, **{m: "numeric" for m in objectives}}
    for name in need:
        if name not in schema.names:
            why = REQUIRED[name][1] if name in REQUIRED else "an objective of the study"
            raise DseError(f"{path}: no column '{name}': dse results always have it ({why}); {_AGAIN}")
    for name, kind in {**TYPED, **need}.items():
        if name in schema.names:
            typ = schema.field(name).type
            ok, what = _KINDS[kind]
            if not ok(typ):
                raise DseError(f"{path}: column '{name}' holds {typ}: expected {what} column, as dse writes it; "
                               f"{_AGAIN}")


def check_trials(root: Path, files: list[Path], trials: Callable[[Path], np.ndarray]) -> None:
    """DseError when a trial number is on two rows: of one file (naming it, the trial and its rows)
    or of two files (naming both). ``trials(file)`` gives a file's trial column (NaN for null);
    files whose trial ranges do not overlap are not compared (sweep parts and array tasks never
    do), so memory stays bounded by a part."""
    spans = []
    for f in files:
        v = trials(f)
        if np.isnan(v).any() if v.dtype.kind == "f" else False:
            raise DseError(f"{f}: column 'trial' has {int(np.isnan(v).sum()):,} empty values: expected a trial "
                           f"number on every row; {_AGAIN}")
        if v.size < 2 or bool((v[1:] > v[:-1]).all()):      # in order, as dse writes them: no sort
            s, same = v, np.empty(0, np.int64)
        else:
            order = np.argsort(v, kind="stable")
            s = v[order]
            same = np.flatnonzero(s[1:] == s[:-1])
        if same.size:
            t = s[same[0]]
            rows = np.sort(order[s == t])
            shown = " and ".join(map(str, rows[:2])) + (", ..." if rows.size > 2 else "")
            raise DseError(f"{f}: trial {int(t)} appears {rows.size} times (rows {shown}); {_REPEATED}")
        if v.size:
            spans.append((float(s[0]), float(s[-1]), f))
    spans.sort(key=lambda x: (x[0], x[1]))
    group, end = [], -np.inf
    for lo, hi, f in spans + [(np.inf, np.inf, None)]:
        if lo > end and len(group) > 1:
            _across(root, group, trials)
        group = [f] if lo > end else group + [f]
        end = hi if lo > end else max(end, hi)


_REPEATED = ("a trial is one evaluation, so rows were copied or two results joined: remove the copies, or re-run the "
             "study to write the file again")


def _across(root: Path, group: list[Path], trials) -> None:
    """The check of :func:`check_trials` across files whose trial ranges overlap."""
    values = [trials(f) for f in group]
    which = np.concatenate([np.full(v.size, i) for i, v in enumerate(values)])
    allv = np.concatenate(values)
    order = np.argsort(allv, kind="stable")
    s = allv[order]
    same = np.flatnonzero(s[1:] == s[:-1])
    if same.size:
        t = s[same[0]]
        a, b = sorted({group[i].relative_to(root).as_posix() if group[i].is_relative_to(root) else str(group[i])
                       for i in which[order][s == t]})[:2]
        raise DseError(f"{root}: trial {int(t)} is in both {a} and {b}; a trial is one evaluation, so one is a copy "
                       "of the other or they are two results: read each on its own, or remove the copy")
