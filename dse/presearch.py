"""A front found in numpy before Optuna runs: designs to seed a study with (issue 11, item 3).

The model costs about a microsecond per design in numpy and Optuna's samplers milliseconds per
trial, so the seeds of a study come from numpy: a space-filling batch (uniform, log-uniform for
log ranges, every choice equally likely; inactive knobs at their neutral value, dse.study.space),
then rounds of local refinement: children of the feasible front, each knob moved with
probability 2/knobs by a step that shrinks from 20% to 2% of its range (a categorical knob
redrawn), kept when feasible and non-dominated (an elitist archive, constraint-aware: an
infeasible design never enters it). The archive is thinned to the requested number of designs by
removing, one at a time, the design that adds least hypervolume (reference: 1.1 x the archive's
nadir, as ``dse.analysis.hypervolume_reference``), so the seeds spread along the whole front.

numpy and moocore only (no Optuna): ``dse.search`` enqueues the seeds as Optuna trials, so
every seed is a trial of the study and a row of its results.
"""

from __future__ import annotations

from dataclasses import dataclass

import moocore
import numpy as np

from .evaluation import constraint_values, evaluate_study, metric_table, objective_matrix
from .pareto import maximise_flags, pareto_mask
from .study.space import active_masks
from .study.spec import Knob, StudySpec


@dataclass
class Seeds:
    """The thinned front: knob values per design (inactive knobs None), objectives, and the
    number of designs evaluated to find it."""

    params: list[dict]
    values: np.ndarray
    evaluated: int


def sample_knob(k: Knob, n: int, rng: np.random.Generator) -> np.ndarray:
    """n values of one searched knob: uniform (log-uniform for log ranges) or a uniform choice."""
    if k.choices:
        return np.array(k.choices, dtype=object)[rng.integers(0, len(k.choices), n)]
    lo, hi = float(k.low), float(k.high)
    if k.log:
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    else:
        x = rng.uniform(lo, hi, n)
    return _snap(k, x)


def _snap(k: Knob, x: np.ndarray) -> np.ndarray:
    """Clip to the range and round to the knob's step (integers for int knobs)."""
    lo, hi = float(k.low), float(k.high)
    x = np.clip(x, lo, hi)
    if k.step:
        x = np.clip(lo + np.round((x - lo) / k.step) * k.step, lo, hi)
    if k.kind == "int":
        return np.round(x).astype(np.int64)
    return x.astype(np.float64)


def mutate(study: StudySpec, params: dict[str, np.ndarray], scale: float, rng: np.random.Generator
           ) -> dict[str, np.ndarray]:
    """Children: each knob moved with probability 2/knobs (at least one knob per child) by a
    normal step of ``scale`` x its range (in log space for log ranges); categoricals redrawn."""
    knobs = study.searched
    n = len(next(iter(params.values())))
    move = rng.random((n, len(knobs))) < min(1.0, 2.0 / len(knobs))
    move[np.arange(n), rng.integers(0, len(knobs), n)] = True
    out = {}
    for j, k in enumerate(knobs):
        v = params[k.name]
        if k.choices:
            new = sample_knob(k, n, rng)
        else:
            x = np.asarray(v, dtype=np.float64)
            if k.log:
                new = np.exp(np.log(x) + rng.normal(0.0, scale * np.log(k.high / k.low), n))
            else:
                width = float(k.high - k.low)
                step = rng.normal(0.0, scale * width, n)
                if k.kind == "int":             # an integer knob moves by at least one
                    step = np.where(np.abs(step) < 1, np.sign(step + 1e-12), step)
                new = x + step
            new = _snap(k, new)
        out[k.name] = np.where(move[:, j], new, v).astype(new.dtype if not k.choices else object)
    return out


def score(study: StudySpec, params: dict[str, np.ndarray], n: int, db, tech) -> tuple[np.ndarray, np.ndarray]:
    """(objective values (n, m), feasible (n,)) of designs, as the results file would have them."""
    designs, metrics = evaluate_study(study, params, n, db, tech)
    cols = metric_table(designs, metrics)
    cons = constraint_values(cols, study)
    vals = objective_matrix(cols, study)
    feasible = np.all(cons <= 0, axis=1) & cols["fits"] & np.isfinite(vals).all(axis=1)
    return vals, feasible


def thin(values: np.ndarray, keep: int, directions) -> np.ndarray:
    """Indices of ``keep`` rows of a front, removing the least hypervolume contributor one at a
    time (reference 1.1 x the nadir, pushed out by 10% of each range)."""
    n = values.shape[0]
    if n <= keep:
        return np.arange(n)
    flags = maximise_flags(directions)
    lo, hi = values.min(axis=0), values.max(axis=0)
    span = np.where(hi > lo, hi - lo, np.abs(hi) + 1.0)
    ref = np.where(flags, lo - 0.1 * span, hi + 0.1 * span)
    idx = np.arange(n)
    while idx.size > keep:
        contrib = moocore.hv_contributions(values[idx], ref=ref, maximise=flags)
        drop = max(1, (idx.size - keep) // 8)       # several at a time while far from the target
        idx = np.delete(idx, np.argsort(contrib, kind="stable")[:drop])
    return idx


def presearch(study: StudySpec, db, tech, *, seed: int, keep: int, initial: int = 20_000, rounds: int = 20,
              children: int = 4_000, archive_max: int = 2_000) -> Seeds:
    """The seeds: a space-filling batch, ``rounds`` of local refinement, the front thinned to
    ``keep`` designs. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    knobs = study.searched
    dirs = [o.direction for o in study.objectives]
    params = {k.name: sample_knob(k, initial, rng) for k in knobs}
    vals, feas = score(study, params, initial, db, tech)
    evaluated = initial
    arch_p, arch_v = _front(params, vals, feas, dirs)
    for r in range(rounds):
        if not len(arch_v):                      # nothing feasible yet: sample afresh
            params = {k.name: sample_knob(k, children, rng) for k in knobs}
        else:
            pick = rng.integers(0, len(arch_v), children)
            scale = 0.2 * (0.1 ** (r / max(rounds - 1, 1)))     # 20% -> 2% of each range
            params = mutate(study, {k: v[pick] for k, v in arch_p.items()}, scale, rng)
        vals, feas = score(study, params, children, db, tech)
        evaluated += children
        merged = {k: np.concatenate([arch_p[k], params[k]]) if len(arch_v) else params[k] for k in params}
        mv = np.concatenate([arch_v, vals]) if len(arch_v) else vals
        mf = np.concatenate([np.ones(len(arch_v), bool), feas]) if len(arch_v) else feas
        arch_p, arch_v = _front(merged, mv, mf, dirs)
        if len(arch_v) > archive_max:
            idx = thin(arch_v, archive_max, dirs)
            arch_p, arch_v = {k: v[idx] for k, v in arch_p.items()}, arch_v[idx]
    idx = thin(arch_v, keep, dirs) if len(arch_v) else np.arange(0)
    masks = active_masks(study, {k: v[idx] for k, v in arch_p.items()}, idx.size)
    out = []
    for i, row in enumerate(idx):
        out.append({k.name: _plain(arch_p[k.name][row]) for k in knobs
                    if k.name not in masks or masks[k.name][i]})
    return Seeds(params=out, values=arch_v[idx], evaluated=evaluated)


def _front(params: dict, vals: np.ndarray, feas: np.ndarray, dirs) -> tuple[dict, np.ndarray]:
    """The feasible non-dominated designs, one per distinct objective vector."""
    mask = pareto_mask(vals, dirs, feas)
    idx = np.flatnonzero(mask)
    _, first = np.unique(vals[idx], axis=0, return_index=True)
    idx = idx[np.sort(first)]
    return {k: v[idx] for k, v in params.items()}, vals[idx]


def _plain(v):
    """numpy scalar -> Python value (Optuna stores plain ints, floats, bools and strings)."""
    return v.item() if isinstance(v, np.generic) else v
