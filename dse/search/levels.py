"""The levels of a study's choice knobs, and which of them a set of designs tried.

A *level* is one choice of a searched knob with a list of values: a categorical knob (memory
type, runtime, link class, the draft), a boolean (the draft chip on or off) or a number given as
choices (chips ``[8, 16, 32, 64]``, ``ep: [1, 8]``). Sampler ``auto`` keeps a small front per
level (dse.search.presearch.Pool) and gives the study at least one design per level
(dse.search.presearch.level_rows), so that its results compare every level with the others.
A design tries a level when the knob acts on it (dse.study.space.active_masks) and has that value.
"""

from __future__ import annotations

import numpy as np

from ..results.pareto import maximise_flags
from ..study.space import active_masks
from ..study.spec import Knob, StudySpec


def level_knobs(study: StudySpec) -> list[Knob]:
    """The searched knobs given as a list of choices (two or more)."""
    return [k for k in study.searched if k.choices and len(k.choices) > 1]


def levels(study: StudySpec) -> list[tuple[str, object]]:
    """(knob name, value) of every level of every :func:`level_knobs` knob, in the study's order."""
    return [(k.name, v) for k in level_knobs(study) for v in k.choices]


def level_masks(study: StudySpec, params: dict[str, np.ndarray], n: int) -> dict[tuple[str, object], np.ndarray]:
    """Per level: which of n designs (knob arrays, inactive knobs at any value) try it."""
    masks = active_masks(study, params, n)
    out = {}
    for k in level_knobs(study):
        col = np.asarray(params[k.name])
        act = masks.get(k.name, np.ones(n, dtype=bool))
        for v in k.choices:
            out[(k.name, v)] = act & _equal(col, v)
    return out


def _equal(col: np.ndarray, v) -> np.ndarray:
    """col == v elementwise (a knob's column holds one kind of value: bools, numbers or names)."""
    return np.asarray(col == v, dtype=bool).reshape(col.shape)


def key_of(name: str, value) -> tuple:
    """A level as a set member: (knob name, plain value), a bool kept apart from 0 and 1."""
    v = value.item() if isinstance(value, np.generic) else value
    return (name, ("bool", v) if isinstance(v, bool) else v)


def tried_levels(rows: list[dict]) -> set:
    """The levels (:func:`key_of`) of parameter dicts as Optuna stores them (active knobs only)."""
    return {key_of(name, v) for r in rows for name, v in r.items()}


def tried_in(study: StudySpec, params: dict[str, np.ndarray], n: int) -> set:
    """The levels (:func:`key_of`) that n designs (knob arrays) try."""
    return {key_of(*lvl) for lvl, m in level_masks(study, params, n).items() if m.any()} if n else set()


def untried(study: StudySpec, rows: list[dict]) -> list[tuple[str, object]]:
    """The levels no design of ``rows`` (parameter dicts, active knobs only) tries, in the study's order."""
    seen = tried_levels(rows)
    return [lvl for lvl in levels(study) if key_of(*lvl) not in seen]


def level_picks(study: StudySpec, pool, covered: set) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(knob arrays, objective values) of the designs that try every level not in ``covered``
    (:func:`key_of`), one per level left out, greedily in the study's order (a design added for
    one level may try others too). A level's design is the one of its niche (``pool.niches``,
    dse.search.presearch.Pool) nearest the ideal point in the Chebyshev sense, objectives
    normalised over the archive's front (0 at its best value, 1 at its worst): the level's best
    compromise. A level with no feasible design gets its least violating one (``pool.short``,
    values NaN); one the pool never saw is skipped."""
    dirs = [o.direction for o in study.objectives]
    flags = np.asarray(maximise_flags(dirs))
    covered = set(covered)
    ref = pool.archive.values if len(pool.archive) else None
    if ref is not None:
        zr = np.where(flags, -ref, ref)
        lo, span = zr.min(axis=0), np.maximum(zr.max(axis=0) - zr.min(axis=0), 1e-300)
    rows, vals = [], []
    for lvl in levels(study):
        if key_of(*lvl) in covered:
            continue
        niche = pool.niches.get(lvl)
        if niche is not None and len(niche):
            z = np.where(flags, -niche.values, niche.values)
            z = (z - lo) / span if ref is not None else z
            i = int(np.argmin(z.max(axis=1)))
            row, val = {k: v[i:i + 1] for k, v in niche.params.items()}, niche.values[i:i + 1]
        elif lvl in pool.short:
            row, val = pool.short[lvl][0], np.full((1, len(dirs)), np.nan)
        else:
            continue
        rows.append(row)
        vals.append(val)
        covered |= tried_in(study, row, 1)
    if not rows:
        return {}, np.zeros((0, len(dirs)))
    return {k.name: np.concatenate([r[k.name] for r in rows]) for k in study.searched}, np.concatenate(vals)
