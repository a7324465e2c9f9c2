"""Study mapping -> StudySpec: the header, technology and search sections, the cross-section checks,
and the file loader; every error of a file reported together.

``load_study(path)`` reads YAML and calls ``parse_study(mapping, path)``, which results
metadata also use to rebuild a study without any file. Each error names the study file, the
key path and what is allowed. The sections have a parser each: ``workload:``
(:mod:`.workload_section`), ``space:`` (:mod:`.space_section`), ``objectives:`` and
``constraints:`` (:mod:`.objectives`), on knob values parsed by :mod:`.knob_values`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from ..catalog.database import Database, load_database
from ..catalog.fields import Range, one_of
from ..catalog.technology import load_technology
from ..catalog.yamlio import load_yaml
from ..errors import MISSING, DseError, SpecError, raise_collected
from ..storage.backends import MAX_NAME_CHARS
from ..storage.credentials import has_password
from ..workload.spec import (
    AcceptanceSpec,
    DrafterSpec,
    Workload,
    WorkloadNames,
    check_dp,
    check_ep,
    check_some_split,
    check_workload,
    ep_divisor_error,
)
from ..workload.trees import check_tree
from .knob_values import StudyErrors, knob_bounds, knob_values, parse_knob
from .objectives import parse_constraints, parse_objectives, refuse_null_metrics
from .space_section import parse_space
from .spec import EP_KNOB, SAMPLERS, SEARCH_DEFAULTS, TOP_KEYS, DraftChoices, StudySpec
from .workload_section import parse_workload

#: search budgets: a study beyond these is a typo, not a plan (10^7 trials of Optuna's
#: ~1 ms ask/tell is 3 hours; a seed must fit numpy's 32-bit seeding, which Optuna uses)
SEARCH_RANGES = {"n_trials": Range(True, 1, 10_000_000), "batch_size": Range(True, 2, 100_000),
                 "seed": Range(True, 0, 2**32 - 1), "presearch_s": Range(False, 0, 86_400, lo_open=True, unit="s")}
#: grid points per continuous knob (points^knobs designs: 1000 points on 2 knobs is 10^6)
GRID_POINTS = Range(True, 2, 1000)
STUDY_NAMES = WorkloadNames(path=None, draft="workload.draft", k="workload.k", tau="workload.acceptance.tau",
                            acceptance="workload.acceptance", per_position="workload.acceptance.per_position",
                            rank="workload.acceptance.rank",
                            tree_nodes="workload.tree_nodes", overlap="workload.overlap",
                            draft_chip="space.draft_chip.enabled",
                            overlap_needs="a draft chip (space.draft_chip.enabled)")


# --------------------------------------------------------------------------- the top-level sections

def _header(raw: dict, err: StudyErrors) -> tuple[str, str]:
    for key in raw:
        if key not in TOP_KEYS:
            err.unknown("", key, TOP_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        err.add("name", name if name is not None else MISSING,
                "expected a name of letters, digits, '-', '_' or '.' (it keys the storage and file names)")
        name = "study"
    elif len(name) > MAX_NAME_CHARS:          # checked before a database is touched (it would refuse the name)
        err.add("name", name, f"expected at most {MAX_NAME_CHARS} characters, the length of Optuna's study-name column "
                f"in a database storage (this one has {len(name)})")
        name = name[:MAX_NAME_CHARS]
    desc = raw.get("description", "")
    if not isinstance(desc, str):
        err.add("description", desc, "expected a string")
        desc = ""
    return name, desc


def _technology(raw: dict, db: Database, err: StudyErrors):
    """The database's technology constants with the study's overrides (validated there)."""
    tech_raw = raw.get("technology") or {}
    try:
        tech = load_technology(db.root)
        if not isinstance(tech_raw, dict):
            raise SpecError(err.path, "technology", tech_raw, "expected a mapping of constant overrides")
        return (tech.with_overrides(tech_raw, where=err.path) if tech_raw else tech), tech_raw
    except SpecError as exc:
        err.keep(exc)
    except DseError as exc:  # SpecErrors
        err.items.extend(getattr(exc, "errors", [SpecError(err.path, "technology", tech_raw, str(exc))]))
    return None, {}


def _search(raw: dict, err: StudyErrors, name: str) -> dict:
    """search, grid, output and storage."""
    block = raw.get("search") or {}
    if not isinstance(block, dict):
        err.add("search", block, "expected a mapping of sampler, n_trials, batch_size, seed, presearch_s")
        block = {}
    for key in block:
        if key not in SEARCH_DEFAULTS:
            err.unknown("search.", key, set(SEARCH_DEFAULTS))
    search = {**SEARCH_DEFAULTS, **block}
    if search["sampler"] not in SAMPLERS:
        err.items.append(one_of(err.path, "search.sampler", search["sampler"], SAMPLERS))
    for key, rng in SEARCH_RANGES.items():
        search[key] = err.check(rng, search[key], f"search.{key}", SEARCH_DEFAULTS[key])
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or set(grid) - {"points"}:
        err.add("grid", grid, "expected {points: N}")
        grid = {}
    search["grid_points"] = err.check(GRID_POINTS, grid.get("points", 8), "grid.points", 8)
    output = raw.get("output", f"results/{name}.parquet")
    if not isinstance(output, str) or not output:
        err.add("output", output, "expected a file path")
        output = f"results/{name}.parquet"
    search["output"] = output
    storage = raw.get("storage")
    if storage is not None and not isinstance(storage, str):
        err.add("storage", storage, "expected null (journal file beside the output), a file path or a database URL")
        storage = None
    elif storage is not None and has_password(storage):
        import warnings
        warnings.warn(f"{err.path}: storage holds a password, readable by anyone who reads the study file (dse "
                      "writes it nowhere); put the URL in DSE_STORAGE or --storage-file, or the password in "
                      "~/.pgpass", stacklevel=2)
    search["storage"] = storage
    return search


# --------------------------------------------------------------------------- the study

def parse_study(raw: Any, path: str | Path, db: Database | None = None) -> StudySpec:
    """Validate a study mapping (as read from ``path``); raise SpecError/SpecErrors naming file and key."""
    p = str(path)
    err = StudyErrors(p)
    if not isinstance(raw, dict):
        raise SpecError(p, "(top level)", raw, "expected a mapping of study sections")
    db = db or load_database()
    name, desc = _header(raw, err)
    tech, tech_raw = _technology(raw, db, err)
    wl_raw = raw.get("workload")
    wl, knobs = parse_workload(wl_raw, db, err)
    wl_map = wl_raw if isinstance(wl_raw, dict) else {}
    knobs += parse_space(raw.get("space"), wl_map, db, tech, err)
    drafter, acc = wl["drafter"], wl["acc"]
    ep, ep_raw = 1, wl_map.get("ep", 1)
    if wl["target"] is not None:
        chips = knob_values(next((k for k in knobs if k.name == "target_chip_chips"), None), 1)
        values = ep_raw if isinstance(ep_raw, list) and ep_raw else [ep_raw]
        ep_errs = [e for v in values for e in check_ep(wl["target"], v, chips, where="workload.ep",
                                                      chips_name="space.target_chip.chips", path=p,
                                                      every_chip=False)]
        # a row whose chips its E does not divide is infeasible (invalid_combinations); refused only
        # when no row can be valid
        if not ep_errs and not any(int(c) % int(v) == 0 for v in values for c in chips):
            ep_errs = [ep_divisor_error(wl["target"], ep_raw, chips, "workload.ep", "space.target_chip.chips", p,
                                        no_row=True)]
        err.items.extend(ep_errs)
        if isinstance(ep_raw, list) and not ep_errs:     # searched per design
            kn = parse_knob(err, "workload.ep", ep_raw, EP_KNOB, None, "ep", "workload", "ep")
            if kn is not None and kn.searched:
                knobs.append(kn)
            elif kn is not None:
                ep = int(kn.fixed)
        elif not ep_errs:
            ep = int(ep_raw)
    dp = 1
    if wl["target"] is not None and "dp" in wl_map:     # attention data parallel: every chip count a multiple
        chips = knob_values(next((k for k in knobs if k.name == "target_chip_chips"), None), 1)
        dp_errs = check_dp(wl["target"], wl_map["dp"], chips, where="workload.dp",
                           chips_name="space.target_chip.chips", path=p)
        err.items.extend(dp_errs)
        dp = 1 if dp_errs else int(wl_map["dp"])
    if wl["target"] is not None:
        by = {k.name: k for k in knobs}
        t_chips = knob_values(by.get("target_chip_chips"), 1)
        pp_knob = by.get("target_chip_pp")
        err.items.extend(check_some_split(wl["target"], t_chips, knob_values(pp_knob, None) if pp_knob else (None,),
                                          "space.target_chip.chips", p))
        # a draft model runs at the tensor parallel its heads allow on its chips (dse.model.drafters.draft_tp)
    choices = wl["choices"]
    if drafter is not None or choices:
        by = {k.name: k for k in knobs}
        k_knob = by.get("k")
        k_lo, k_hi = knob_bounds(k_knob)
        enabled = by.get("draft_chip_enabled")
        names = STUDY_NAMES if k_knob is None or not k_knob.searched else \
            WorkloadNames(**{**vars(STUDY_NAMES), "k": "space.k"})
        names = WorkloadNames(**{**vars(names), "path": p})
        chip = enabled is not None and (enabled.searched or enabled.fixed is True)
        several = len(choices) > 1
        lo_exit = wl["exit_range"][0] if wl["exit_range"] else 1
        specs = [d or DrafterSpec(kind="early-exit", label="early-exit", exit_layer=lo_exit) for _, d in choices]
        for i, d in enumerate(specs):
            # with several drafts, a draft chip serves the draft models among them (elsewhere it is off)
            errs = check_workload(
                d, acc, k_lo=k_lo, k_hi=k_hi, k_fixed=k_knob is not None and not k_knob.searched,
                tree_nodes=wl["tree_nodes"], tree_lo=knob_bounds(by.get("tree_nodes"))[0], overlap=False,
                draft_chip=chip and (not several or d.can_use_draft_chip), acceptance_given=wl["acc_given"],
                names=WorkloadNames(**{**vars(names), "draft": f"workload.draft[{i}]"}) if several else names)
            # the choice 'none' among several drafts takes no k, tree or acceptance: they are the others'
            err.items.extend(e for e in errs if not (several and d.kind == "none" and e.field in (
                names.k, names.tree_nodes, names.acceptance)))
            if wl["tree"] is not None and not (several and d.kind == "none"):
                err.items.extend(check_tree(wl["tree"], d, k_given=None if k_knob is None else
                                            k_knob.fixed if k_knob.fixed is not None else "searched",
                                            tree_nodes_given=wl["tree_given"], where="workload.tree",
                                            k_name="space.k", nodes_name="workload.tree_nodes",
                                            draft_name=f"workload.draft[{i}]" if several else "workload.draft",
                                            path=p))
        if several and chip and not any(d.can_use_draft_chip for d in specs):
            err.add("space.draft_chip.enabled", True, "a draft chip holds a draft model: list one in workload.draft")
        # overlapped drafting where a row has a draft chip holding its draft model, serial drafting
        # elsewhere (dse.model.latency); refused only when no row can have one
        if wl["overlap"] and not (chip and any(d.can_use_draft_chip for d in specs)):
            err.add("workload.overlap", True, "overlapped drafting needs a draft model on a draft chip "
                    "(space.draft_chip.enabled: true, or [true, false] to overlap where it is on); no row has one")
        link_lo = knob_bounds(by.get("draft_chip_link_bw_gb_s"))[0]
        if enabled is not None and (enabled.searched or enabled.fixed) and link_lo is not None and link_lo <= 0:
            err.add("space.draft_chip.link_bw_gb_s", link_lo,
                    "expected > 0 (the draft chip reaches the target over this link)")
        if several:     # the knobs a row's draft decides act on some rows only (dse.study.space)
            knobs = [dataclasses.replace(k, conditional=True) if k.name in ("k", "tree_nodes", "draft_chip_enabled")
                     else k for k in knobs]
    objectives = parse_objectives(raw.get("objectives"), err)
    constraints = parse_constraints(raw.get("constraints"), err)
    refuse_null_metrics(objectives, constraints, knobs, db, err)
    search = _search(raw, err, name)
    if not any(k.searched for k in knobs) and not err.items:
        err.add("space", MISSING, "nothing to search: give at least one knob as a list or a range")
    if wl["tree_published"] and any(k.name == "k" for k in knobs):
        err.add("workload.tree_nodes", "published", "each method's published tree is drafted at its own depth: "
                "give no k")
    elif wl["tree_published"] and not any(d is not None and d.default_shape() for _, d in wl["choices"]):
        err.add("workload.tree_nodes", "published", "no draft of workload.draft has a published tree (eagle, eagle2, "
                "eagle3, medusa:H, hydra, retrieval): give an integer number of nodes")
    raise_collected(err.items)
    k_given = any(k.name == "k" for k in knobs)
    base = Workload(target=wl["target"], drafter=drafter, acceptance=acc or AcceptanceSpec(kind="alpha", alpha=0.0),
                    dtype=wl["dtype"], kv_dtype=wl["kv_dtype"], temperature=float(wl["temperature"]),
                    overlap=wl["overlap"], tree_nodes=int(wl["tree_nodes"]), k_max=int(wl["k_max"]),
                    continuous=wl["continuous"], ep=ep, dp=dp, task=wl["task"], sla=wl["sla"], serving=wl["serving"], arrivals=wl["arrivals"],
                    max_batched_tokens=int(wl["max_batched_tokens"]), tree=wl["tree"])
    drafts = DraftChoices(base=base, choices=tuple(choices), acceptance_given=acc is not None,
                          default_trees="published" if wl["tree_published"] else
                          not (wl["tree_given"] or k_given or wl["tree"] is not None),
                          exit_range=wl["exit_range"], db=db,
                          rank_profile=wl["rank_profile"])
    first = choices[0][1] or DrafterSpec(kind="early-exit", label="early-exit", exit_layer=wl["exit_range"][0])
    workload = drafts.workload(first.label, first.exit_layer)
    return StudySpec(name=name, description=desc, path=p, workload=workload, runtime=wl["runtime"],
                     knobs=tuple(knobs), objectives=tuple(objectives), constraints=tuple(constraints),
                     sampler=search["sampler"], n_trials=int(search["n_trials"]),
                     batch_size=int(search["batch_size"]), seed=int(search["seed"]),
                     grid_points=int(search["grid_points"]), output=search["output"], storage=search["storage"],
                     technology=tech_raw, raw=raw, tech=tech, drafts=drafts,
                     presearch_s=float(search["presearch_s"]))


def load_study(path: str | Path, db: Database | None = None) -> StudySpec:
    """Read and validate a study file (see :func:`parse_study`)."""
    return parse_study(load_yaml(path, kind="study"), path, db)


def open_study(study: StudySpec | str | Path, db: Database | None = None):
    """(StudySpec, Database, TechConstants) from a spec or a study file path."""
    if not isinstance(study, StudySpec):
        study = load_study(study, db=db)
    return study, db or load_database(), study.tech
