"""Safe, bounded YAML loading that names the file in every error.

Input files are bounded before anything is built from them: the file's size
(:data:`MAX_FILE_BYTES`), the nodes of the document with every alias expanded
(:data:`MAX_NODES`: a "billion laughs" file of 2 KB would expand to 10^9 nodes) and the length of
any one list (:data:`MAX_LIST_LENGTH`). A key given twice in one mapping is an error (YAML 1.2
says keys are unique; PyYAML would keep the last silently). Each limit is named in its message.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from ..errors import MISSING as MISSING_VALUE
from ..errors import SpecError

#: libyaml's C loader when PyYAML was built with it (several times faster on the database), else
#: the pure-Python one; both are the safe loader (plain data, no Python objects)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: the largest input file read (a study is ~2 KB, the largest database file ~20 KB, a Hugging
#: Face config.json a few KB)
MAX_FILE_BYTES = 1 << 20
#: nodes of one document with each alias counted every time it is used
MAX_NODES = 100_000
#: elements of one list (choices, per-position rates, ...)
MAX_LIST_LENGTH = 10_000

_MERGE = "tag:yaml.org,2002:merge"


def load_yaml(path: str | os.PathLike, *, kind: str = "file") -> dict:
    """Safe-load (:data:`SAFE_LOADER`) a mapping from ``path``, bounded (:func:`check_node`);
    SpecError if missing, too large, malformed or not a mapping."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise SpecError(str(p), kind, MISSING_VALUE, f"the file is larger than {MAX_FILE_BYTES:,} bytes "
                            "(dse.catalog.yamlio.MAX_FILE_BYTES); this is not a study or database file")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(str(p), kind, str(p), "file not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise SpecError(str(p), kind, str(p), f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return load_yaml_text(text, str(p))


def load_yaml_text(text: str, where: str) -> dict:
    """The mapping in YAML ``text`` (named ``where`` in errors), bounded as :func:`load_yaml`."""
    loader = SAFE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            check_node(node, where)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(where, "<yaml>", MISSING_VALUE, f"malformed YAML{line}: {problem}") from None
    except RecursionError:
        raise SpecError(where, "<yaml>", MISSING_VALUE, "malformed YAML: nested too deeply") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError(where, "<top level>", type(data).__name__, "expected a mapping of field: value")
    return data


def check_node(root: yaml.Node, where: str) -> None:
    """Refuse a document whose expanded size exceeds MAX_NODES, a list longer than
    MAX_LIST_LENGTH, or a mapping with a key given twice. Each distinct node's expanded size is
    computed once (aliases share their node), so a bomb is refused in time proportional to the
    file, not to its expansion."""
    sizes: dict[int, int] = {}
    trail: list[str] = []           # the key path to the node being sized, joined only for a message
    scalar, sequence = yaml.ScalarNode, yaml.SequenceNode

    def field() -> str:
        return "".join(trail).lstrip(".") or "<top level>"

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1                      # a recursive alias counts once
        total = 1
        if node.__class__ is sequence:
            if len(node.value) > MAX_LIST_LENGTH:
                raise SpecError(where, field(), MISSING_VALUE, f"a list of {len(node.value):,} elements; at most "
                                f"{MAX_LIST_LENGTH:,} are read (dse.catalog.yamlio.MAX_LIST_LENGTH)")
            for i, c in enumerate(node.value):
                if c.__class__ is scalar:
                    total += 1
                    continue
                trail.append(f"[{i}]")
                total += size(c)
                trail.pop()
        else:
            seen: dict[str, int] = {}
            for k, v in node.value:
                name = k.value if k.__class__ is scalar else "?"
                if k.__class__ is scalar and k.tag != _MERGE:
                    if name in seen:
                        trail.append("." + name)
                        raise SpecError(where, field(), MISSING_VALUE, f"key given twice (lines {seen[name]} and "
                                        f"{k.start_mark.line + 1}); keep one")
                    seen[name] = k.start_mark.line + 1
                total += 1
                if v.__class__ is scalar:
                    total += 1
                    continue
                trail.append("." + name)
                total += size(v)
                trail.pop()
        if total > MAX_NODES:
            raise SpecError(where, field(), MISSING_VALUE, f"the document expands to more than {MAX_NODES:,} "
                            "values (aliases counted each time they are used; dse.catalog.yamlio.MAX_NODES)")
        sizes[key] = total
        return total

    if root.__class__ is not scalar:
        size(root)
