"""Safe YAML loading that names the file in every error."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from ..errors import MISSING as MISSING_VALUE
from ..errors import SpecError

#: libyaml's C loader when PyYAML was built with it (several times faster on the database), else
#: the pure-Python one; both are the safe loader (plain data, no Python objects)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | os.PathLike, *, kind: str = "file") -> dict:
    """Safe-load (:data:`SAFE_LOADER`) a mapping from ``path``; SpecError if missing, malformed or not a mapping."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(p), kind, str(p), "file not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError(str(p), kind, str(p), f"cannot read: {exc}") from None
    try:
        data = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(str(p), "<yaml>", MISSING_VALUE, f"malformed YAML{line}: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(str(p), "<top level>", type(data).__name__, "expected a mapping of field: value")
    return data

