"""The registry of public draft checkpoints (``hardware_db/acceptance/checkpoints.yaml``), read and
validated: each checkpoint's target, kind (the head it is), size and training recipe where
published, and its source. Rows of the acceptance table name their checkpoint (column
``checkpoint``); ``--draft eagle3:<id>`` selects one (:func:`checkpoint_for`).

>>> c = load_checkpoints()["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]
>>> (c.target, c.kind)
('llama-3.1-8b', 'eagle3')
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import SpecError, did_you_mean, raise_collected

#: the head a checkpoint is -> the --draft methods that draft with it (EAGLE-2 drafts with EAGLE-1's head)
KIND_METHODS = {"eagle": ("eagle", "eagle2"), "eagle3": ("eagle3",), "medusa": ("medusa",), "hydra": ("hydra",),
                "model": ("model",)}
LIST_HINT = "`dse acceptance list --checkpoints` lists the known ones"


@dataclass(frozen=True)
class Checkpoint:
    id: str
    target: str          # the dse model it drafts for (the published name where dse has none)
    kind: str            # KIND_METHODS key
    params_b: float | None
    recipe: str
    source: str
    target_name: str = ""
    reference: bool = False  # the method authors' head for its target: what a bare --draft METHOD drafts with

    @property
    def public(self) -> bool:
        """On a hub under this id (a ``paper:`` id is a head a paper measured without naming one)."""
        return not self.id.startswith("paper:")


def checkpoints_path(root: str | Path | None = None) -> Path:
    from .database import default_root
    return Path(root or default_root()) / "acceptance" / "checkpoints.yaml"


def load_checkpoints(root: str | Path | None = None) -> dict[str, Checkpoint]:
    """id -> Checkpoint; SpecErrors naming the file and the entry for every bad field."""
    return _load(str(checkpoints_path(root)))


@lru_cache(maxsize=4)
def _load(path: str) -> dict[str, Checkpoint]:
    from .yamlio import load_yaml
    raw = load_yaml(path, kind="checkpoints")
    entries = raw.get("checkpoints")
    if not isinstance(entries, dict):
        raise SpecError(path, "checkpoints", entries, "expected a mapping of checkpoint id -> fields")
    errs, out = [], {}
    for cid, e in entries.items():
        where = f"checkpoints.{cid}"
        if not isinstance(e, dict):
            errs.append(SpecError(path, where, e, "expected {target, kind, recipe, source}"))
            continue
        extra = set(e) - {"target", "target_name", "kind", "params_b", "recipe", "source", "reference"}
        if extra:
            errs.append(SpecError(path, f"{where}.{sorted(extra)[0]}", e[sorted(extra)[0]],
                                  "expected only target, target_name, kind, params_b, recipe, source, reference"))
        if e.get("reference", False) not in (True, False):
            errs.append(SpecError(path, f"{where}.reference", e.get("reference"), "expected true or false"))
        if e.get("kind") not in KIND_METHODS:
            errs.append(SpecError(path, f"{where}.kind", e.get("kind"), f"expected one of {', '.join(KIND_METHODS)}"))
        for f in ("target", "recipe", "source"):
            if not isinstance(e.get(f), str) or not e.get(f):
                errs.append(SpecError(path, f"{where}.{f}", e.get(f), "expected a non-empty text"))
        p = e.get("params_b")
        if p is not None and not (isinstance(p, (int, float)) and p > 0):
            errs.append(SpecError(path, f"{where}.params_b", p, "expected a number > 0 (billions of parameters)"))
        out[str(cid)] = Checkpoint(id=str(cid), target=str(e.get("target", "")), kind=str(e.get("kind", "")),
                                   params_b=None if p is None else float(p), recipe=str(e.get("recipe", "")),
                                   source=str(e.get("source", "")), target_name=str(e.get("target_name", "")),
                                   reference=e.get("reference") is True)
    refs: dict[tuple, str] = {}
    for c in out.values():
        if c.reference and refs.setdefault((c.target, c.kind), c.id) != c.id:
            errs.append(SpecError(path, f"checkpoints.{c.id}.reference", True, f"expected one reference {c.kind} "
                                  f"checkpoint for {c.target}; {refs[(c.target, c.kind)]} is one"))
    raise_collected(errs)
    return out


#: the --draft method -> the kind of head it drafts with
METHOD_KIND = {m: k for k, ms in KIND_METHODS.items() for m in ms}


def reference_checkpoint(target: str, method: str, root=None) -> str:
    """The id of the method authors' head for ``target`` (``reference: true``), '' if none: what a
    bare ``--draft METHOD`` drafts with."""
    kind = METHOD_KIND.get(method)
    for c in load_checkpoints(root).values():
        if c.reference and c.kind == kind and c.target == target:
            return c.id
    return ""


def unknown_checkpoint(ident: str, known, where: str = "--draft", value: str | None = None) -> SpecError:
    """The one-line refusal of a checkpoint the registry does not hold, with the closest ids."""
    close = did_you_mean(ident, list(known), n=2, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return SpecError(None, where, value if value is not None else ident,
                     f"no checkpoint {ident!r} in hardware_db/acceptance/checkpoints.yaml{hint}; {LIST_HINT}")


def checkpoint_for(method: str, ident: str, root=None, where: str = "--draft", value: str | None = None
                   ) -> Checkpoint:
    """The registered checkpoint ``ident`` (case-insensitive) for drafting with ``method``; a
    SpecError (one line: the checkpoint and how to list the known ones) if unknown or of another kind."""
    reg = load_checkpoints(root)
    c = reg.get(ident) or next((v for k, v in reg.items() if k.lower() == ident.lower()), None)
    if c is None:
        raise unknown_checkpoint(ident, reg, where, value)
    if method not in KIND_METHODS[c.kind]:
        raise SpecError(None, where, value if value is not None else ident,
                        f"{c.id} is a checkpoint of kind {c.kind}: draft with it as "
                        f"{' or '.join(m + ':' + c.id for m in KIND_METHODS[c.kind])}")
    return c


def check_table_links(rows, root=None) -> list[SpecError]:
    """Every table row's checkpoint is registered and of the row's kind."""
    reg = load_checkpoints(root)
    out = []
    for r in rows:
        if not r.checkpoint:
            continue
        c = reg.get(r.checkpoint)
        if c is None:
            out.append(SpecError(str(checkpoints_path(root)), f"row {r.id}.checkpoint", r.checkpoint,
                                 "expected a checkpoint of hardware_db/acceptance/checkpoints.yaml"))
        elif r.draft_kind not in KIND_METHODS[c.kind]:
            out.append(SpecError(str(checkpoints_path(root)), f"row {r.id}.checkpoint", r.checkpoint,
                                 f"a {c.kind} checkpoint on a {r.draft_kind} row"))
    return out
