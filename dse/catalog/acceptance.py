"""The published acceptance table and the tokenizer/family groups, read and validated.

``hardware_db/acceptance/published.csv`` holds one row per published acceptance statistic
(hardware_db/acceptance/README.md says how to read it): its source, target and draft, drafter
kind, task, temperature, the chain length k or the tree (nodes, depth), the kind of statistic
and its value. ``families.yaml`` says which models share a tokenizer and a training lineage.
This module only reads and checks them (every bad cell: file, row id, column, allowed values);
turning a statistic into the acceptance rate the model uses is :mod:`dse.acceptance.fit`'s job.

>>> rows = load_table()
>>> r = row_by_id(rows, "lev23-01")
>>> (r.target_model, r.draft_model, r.task, r.temperature, r.k, r.stat_kind, r.stat_value)
('t5-xxl', 't5-small', 'translation', 0.0, 7, 'alpha', 0.75)
"""

from __future__ import annotations

import csv
import fnmatch
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import SpecError, did_you_mean, raise_collected
from .fields import Range

#: the workload's text kinds (dse.workload.spec.TaskMix); a row may also be `mix` (a published mean
#: over tasks: Spec-Bench's six in equal parts) or `other` (a task outside this list)
TASKS = ("chat", "code", "math", "summarization", "translation", "qa", "rag")
ROW_TASKS = TASKS + ("mix", "other")
#: Spec-Bench (Xia et al. 2024, arXiv 2401.07851): 80 prompts from each of six tasks; the
#: workload's `mix`
MIX_TASKS = ("chat", "translation", "summarization", "qa", "math", "rag")
#: drafter kinds dse models (dse.workload.spec: the --draft spellings)
MODELLED_KINDS = ("model", "eagle", "eagle2", "eagle3", "medusa", "hydra", "ngram", "retrieval", "early-exit")
#: drafter kinds dse models whose acceptance comes from the table alone, not the fitted model: an MTP
#: module is the target's own, trained with it, so its acceptance belongs to that target and is not
#: regressed across targets (dse.acceptance.resolve)
TABLE_KINDS = ("mtp",)
#: published methods kept in the table that no dse drafter represents
OTHER_KINDS = ("ngram-lm", "medusa2", "block", "lookahead", "recycling", "samd")
#: `fit`: yes (fitted), no (with why_not), held-out (could be fitted; kept out to report the error on)
FIT_VALUES = ("yes", "no", "held-out")
STAT_KINDS = ("alpha", "tau", "acceptance_ratio", "per_position", "speedup_only")
COLUMNS = ("id", "source_key", "source", "checked", "target", "target_model", "target_params_b", "draft",
           "draft_model", "checkpoint", "draft_params_b", "same_family", "method", "draft_kind", "exit_layer",
           "target_layers", "task", "task_detail", "context_tokens", "temperature", "sampling", "k", "tree_nodes", "tree_depth", "stat_kind",
           "stat_value", "rates", "includes_bonus", "fit", "why_not", "hardware", "speedup", "notes")


@dataclass(frozen=True, slots=True)
class AcceptanceRow:
    """One published statistic, as published plus its normalised fields (None where blank)."""

    id: str
    source_key: str            # one paper, report or repository: the unit of leave-one-source-out
    source: str
    checked: str               # how the value was read (re-read here, or as collected)
    target: str
    target_model: str          # the dse model with the target's shapes ('' if none)
    target_params_b: float | None
    draft: str
    draft_model: str
    checkpoint: str            # the draft checkpoint (hardware_db/acceptance/checkpoints.yaml), '' if not named
    draft_params_b: float | None
    same_family: bool | None
    method: str
    draft_kind: str
    exit_layer: int | None
    target_layers: int | None
    task: str
    task_detail: str
    context_tokens: int | None  # the context the statistic was measured at (prompt tokens); None: short or unstated
    temperature: float | None  # None: not stated
    sampling: str
    k: int | None              # a chain of k drafts
    tree_nodes: int | None     # a tree of this many drafted nodes (root excluded)
    tree_depth: int | None
    stat_kind: str
    stat_value: float | None
    rates: tuple[float, ...]   # per-position conditional rates (stat_kind per_position)
    includes_bonus: str
    fit: bool                  # used to fit the acceptance model
    held_out: bool             # fit = held-out: a source kept out of the fit to report the model's error on
    why_not: str
    hardware: str
    speedup: str
    notes: str

    @property
    def is_tree(self) -> bool:
        return self.tree_nodes is not None

    @property
    def shape(self) -> str:
        """'chain k=5', 'tree 25 nodes, depth 5' or '-'."""
        if self.is_tree:
            return f"tree {self.tree_nodes} nodes, depth {self.tree_depth}"
        return f"chain k={self.k}" if self.k is not None else "-"


def table_path(root: str | Path | None = None) -> Path:
    from .database import default_root
    return Path(root or default_root()) / "acceptance" / "published.csv"


def load_table(root: str | Path | None = None) -> tuple[AcceptanceRow, ...]:
    """Every row of ``<root>/acceptance/published.csv`` (root: the hardware database), checked;
    SpecErrors naming the file, row id and column for every bad cell."""
    return _load(str(table_path(root)))


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[AcceptanceRow, ...]:
    p = Path(path)
    try:
        with open(p, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = tuple(reader.fieldnames or ())
            raw = list(reader)
    except FileNotFoundError:
        raise SpecError(path, "acceptance table", path, "file not found") from None
    if header != COLUMNS:
        missing, extra = set(COLUMNS) - set(header), set(header) - set(COLUMNS)
        raise SpecError(path, "header", ",".join(sorted(missing | extra)) or "(order)",
                        f"expected the columns {', '.join(COLUMNS)} in this order")
    errors: list[SpecError] = []
    rows, seen = [], set()
    for i, cells in enumerate(raw, start=2):
        where = f"row {i} ({cells.get('id') or 'no id'})"
        try:
            row = _row(cells, path, where)
        except SpecError as exc:
            errors.append(exc)
            continue
        if row.id in seen:
            errors.append(SpecError(path, f"{where}.id", row.id, "expected a unique id"))
        seen.add(row.id)
        rows.append(row)
    raise_collected(errors)
    return tuple(rows)


def _row(c: dict[str, str], path: str, where: str) -> AcceptanceRow:
    errs: list[SpecError] = []

    def text(col, choices=None, required=False):
        v = (c.get(col) or "").strip()
        if required and not v:
            errs.append(SpecError(path, f"{where}.{col}", v, "expected a value"))
        if choices is not None and v not in choices:
            errs.append(SpecError(path, f"{where}.{col}", v, f"expected one of {', '.join(choices)}"))
        return v

    def number(col, rng: Range, integer=False):
        v = (c.get(col) or "").strip()
        if not v:
            return None
        try:
            x = float(v)
        except ValueError:
            errs.append(SpecError(path, f"{where}.{col}", v, rng.text()))
            return None
        if not rng.contains(int(x) if integer and x.is_integer() else x):
            errs.append(SpecError(path, f"{where}.{col}", v, rng.text()))
            return None
        return int(x) if integer else x

    def yes_no(col):
        v = text(col, ("yes", "no", ""))
        return None if v == "" else v == "yes"

    kind = text("draft_kind", MODELLED_KINDS + TABLE_KINDS + OTHER_KINDS)
    stat = text("stat_kind", STAT_KINDS)
    rates_text = text("rates")
    rates: tuple[float, ...] = ()
    if rates_text:
        try:
            rates = tuple(float(x) for x in rates_text.split(";"))
        except ValueError:
            errs.append(SpecError(path, f"{where}.rates", rates_text, "expected rates separated by ';'"))
        if any(not 0.0 <= r <= 1.0 for r in rates):
            errs.append(SpecError(path, f"{where}.rates", rates_text, "expected rates in [0, 1]"))
    value_rng = Range(lo=1.0) if stat == "tau" else Range(lo=0.0, hi=1.0)
    row = dict(
        id=text("id", required=True), source_key=text("source_key", required=True),
        source=text("source", required=True), checked=text("checked", required=True),
        target=text("target", required=True), target_model=text("target_model"),
        target_params_b=number("target_params_b", Range(lo=0.0, lo_open=True)),
        draft=text("draft", required=True), draft_model=text("draft_model"), checkpoint=text("checkpoint"),
        draft_params_b=number("draft_params_b", Range(lo=0.0)), same_family=yes_no("same_family"),
        method=text("method", required=True), draft_kind=kind,
        exit_layer=number("exit_layer", Range(True, 1, 10000), True),
        target_layers=number("target_layers", Range(True, 2, 10000), True),
        task=text("task", ROW_TASKS), task_detail=text("task_detail"),
        context_tokens=number("context_tokens", Range(True, 1, 10_000_000), True),
        temperature=number("temperature", Range(lo=0.0, hi=2.0)), sampling=text("sampling"),
        k=number("k", Range(True, 1, 64), True), tree_nodes=number("tree_nodes", Range(True, 1, 1024), True),
        tree_depth=number("tree_depth", Range(True, 1, 64), True), stat_kind=stat,
        stat_value=number("stat_value", value_rng), rates=rates, includes_bonus=text("includes_bonus"),
        fit=text("fit", FIT_VALUES) == "yes", held_out=c.get("fit", "").strip() == "held-out",
        why_not=text("why_not"), hardware=text("hardware"),
        speedup=text("speedup"), notes=text("notes"))
    # cross-column rules: what the conversions in dse.acceptance.fit rely on
    if stat != "speedup_only" and row["stat_value"] is None:
        errs.append(SpecError(path, f"{where}.stat_value", "", "expected a number for this stat_kind"))
    if stat == "per_position" and not rates:
        errs.append(SpecError(path, f"{where}.rates", "", "expected the per-position rates (';'-separated)"))
    if (row["tree_nodes"] is None) != (row["tree_depth"] is None):
        errs.append(SpecError(path, f"{where}.tree_depth", c.get("tree_depth"), "give tree_nodes and tree_depth together"))
    if row["tree_nodes"] is not None and row["k"] is not None:
        errs.append(SpecError(path, f"{where}.k", row["k"], "a tree row has no chain length: leave k blank"))
    if kind == "early-exit" and (row["exit_layer"] is None or row["target_layers"] is None
                                 or row["exit_layer"] >= row["target_layers"]):
        errs.append(SpecError(path, f"{where}.exit_layer", c.get("exit_layer"),
                              "an early exit needs exit_layer < target_layers"))
    if row["fit"] or row["held_out"]:
        if kind not in MODELLED_KINDS or row["task"] == "other" or stat == "speedup_only":
            errs.append(SpecError(path, f"{where}.fit", "yes", "a fitted row needs a modelled draft_kind, one of the "
                                  "workload's tasks (or mix) and an acceptance statistic"))
        if row["temperature"] is None:
            errs.append(SpecError(path, f"{where}.temperature", "", "a fitted row needs its temperature"))
        if stat in ("tau", "acceptance_ratio") and row["k"] is None and row["tree_nodes"] is None:
            errs.append(SpecError(path, f"{where}.k", "", "a fitted tau or ratio needs k or a tree"))
        if kind == "model" and (row["draft_params_b"] is None or row["target_params_b"] is None
                                or row["same_family"] is None):
            errs.append(SpecError(path, f"{where}.draft_params_b", c.get("draft_params_b"),
                                  "a fitted draft-model row needs both parameter counts and same_family"))
    if not row["fit"] and not row["held_out"] and not row["why_not"]:
        errs.append(SpecError(path, f"{where}.why_not", "", "say why a row is not fitted"))
    raise_collected(errs)
    return AcceptanceRow(**row)


def row_by_id(rows, ident: str) -> AcceptanceRow:
    """The row with this id; UnknownEntryError with the closest ids otherwise."""
    for r in rows:
        if r.id == ident:
            return r
    close = did_you_mean(ident, [r.id for r in rows], n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise SpecError(None, "ID", ident, f"not a row of hardware_db/acceptance/published.csv{hint} "
                    "(`dse acceptance list` shows all)")


def filter_rows(rows, *, target: str | None = None, draft: str | None = None, task: str | None = None):
    """Rows whose target (dse name or published name, case-insensitive substring), draft (kind,
    dse name or published name) and task match every filter given."""
    def has(needle, *hay):
        n = needle.lower()
        return any(n in h.lower() for h in hay if h)
    out = []
    for r in rows:
        if target and not (r.target_model == target.lower() or has(target, r.target)):
            continue
        if draft and not (r.draft_kind == draft.lower() or r.draft_model == draft.lower()
                          or has(draft, r.draft, r.method)):
            continue
        if task and r.task != task.lower():
            continue
        out.append(r)
    return out


# ----------------------------------------------------------------------- tokenizers and families

@dataclass(frozen=True)
class Groups:
    """Tokenizer groups and family groups (families.yaml): name -> model name patterns."""

    tokenizers: dict
    families: dict

    def tokenizer_of(self, name: str, family: str = "") -> str:
        """The tokenizer group of a model (by database name, else by its family field), '' if none."""
        return _match(self.tokenizers, name, family)

    def family_of(self, name: str, family: str = "") -> str:
        return _match(self.families, name, family)


def _match(groups: dict, name: str, family: str) -> str:
    for key in (name.lower(), family.lower()):
        if not key:
            continue
        for group, patterns in groups.items():
            if any(fnmatch.fnmatchcase(key, p) for p in patterns):
                return group
    return ""


def load_groups(root: str | Path | None = None) -> Groups:
    from .database import default_root
    return _groups(str(Path(root or default_root()) / "acceptance" / "families.yaml"))


@lru_cache(maxsize=4)
def _groups(path: str) -> Groups:
    from .yamlio import load_yaml
    raw = load_yaml(path, kind="families")
    errs = []
    tok = raw.get("tokenizers") or {}
    fam = raw.get("families") or {}
    for key, entry in tok.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("models"), list) or not entry.get("source"):
            errs.append(SpecError(path, f"tokenizers.{key}", entry, "expected {models: [patterns], source: text}"))
    for key, entry in fam.items():
        if not isinstance(entry, list) or not all(isinstance(p, str) for p in entry):
            errs.append(SpecError(path, f"families.{key}", entry, "expected a list of model name patterns"))
    raise_collected(errs)
    return Groups(tokenizers={k: tuple(v["models"]) for k, v in tok.items()},
                  families={k: tuple(v) for k, v in fam.items()})


def shares_tokenizer(groups: Groups, draft, target) -> tuple[bool, str]:
    """(can the draft model propose the target's tokens?, how that was decided). Both in a
    tokenizer group: the same group. Otherwise: vocabularies of the same size within 1%."""
    td, tt = groups.tokenizer_of(draft.name, draft.family), groups.tokenizer_of(target.name, target.family)
    if td and tt:
        return td == tt, f"tokenizers {td} and {tt}"
    same = math.isclose(draft.vocab_size, target.vocab_size, rel_tol=0.01)
    return same, (f"assumed from vocabularies of {draft.vocab_size} and {target.vocab_size} entries "
                  f"({'within' if same else 'more than'} 1% apart; no tokenizer group in families.yaml)")


def suggest_task(value: str) -> str:
    close = did_you_mean(value, TASKS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
