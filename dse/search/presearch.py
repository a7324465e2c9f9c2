"""A front found in numpy before Optuna runs: designs to seed a study with (issues 11 and 20).

The model costs microseconds per design in numpy and Optuna's samplers milliseconds per trial,
so the seeds of a study come from numpy, in three steps:

1. a space-filling batch: uniform draws (log-uniform for log ranges, every choice equally likely;
   inactive knobs at their neutral value, dse.study.space), drawn in parts until it holds
   enough feasible designs or reaches its cap (a study where 4% of the space is feasible gets up
   to 8 times the batch of one where all of it is);
2. rounds of refinement: children of the archive (the feasible non-dominated designs found so
   far) and, for 30% of them, of its niches (:class:`Pool`: a small front per value of each knob
   that switches others on or off, so a draft chip keeps improving while it is still dominated);
   half of them a uniform crossover of two parents; each knob moved with probability 2/knobs (at
   least one per child) by a normal step that shrinks from 20% to 2% of its range (log range for
   log knobs) as the rounds pass, a categorical knob redrawn; kept when feasible and
   non-dominated (elitist, constraint-aware: an infeasible design never enters; while none is
   feasible the parents are the least violating designs);
3. the archive, capped at ``archive_max`` designs (dse.search.thinning: exact hypervolume contributions
   up to 3 objectives, epsilon boxes above), is thinned to the seeds (exact contributions up to 3
   objectives, epsilon boxes then estimated contributions above).

How much it evaluates (:func:`presearch_budget`) scales with the space: the effective number
of knobs (a continuous range or 16+ levels counts 1, a knob of L levels log2(L)/4), the number
of objectives, the trial budget and how much of the space is feasible; and it stops after
``seconds`` (``search.presearch_s``) in any case, between two parts: reference CPU seconds counted
from the model's work (:class:`WorkClock`), not read from the machine's clock, so a seed gives
the same seeds on any machine and under any load, cap or no cap (dse.search.seeds says when it binds).

numpy and moocore only (no Optuna): ``dse.search.seeds`` enqueues the seeds as Optuna trials, so
every seed is a trial of the study and a row of its results; ``dse.search.breeder`` keeps breeding
from the archive after them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..evaluation.designs import constraint_values, evaluate_study, metric_table, objective_matrix
from ..model.work import COUNTS
from ..process.progress import Progress
from ..results.pareto import pareto_mask
from ..study.space import active_masks, neutral_value
from ..study.spec import SEARCH_DEFAULTS, Knob, StudySpec
from .levels import level_knobs, level_masks, level_picks, tried_in
from .thinning import EXACT_MAX_OBJECTIVES, box_thin, extreme_rows, normalise, thin
from .variation import breed, probes, sample, step_scale

#: designs per effective knob at 1,000 trials (fitted: see docs/search-quality.md)
DESIGNS_PER_KNOB = 24_000
#: share of the budget spent on the space-filling batch; the batch may grow up to GROWTH times
#: its share while fewer than FEASIBLE_PER_KNOB x knobs of its designs are feasible
INITIAL_SHARE, GROWTH, FEASIBLE_PER_KNOB = 1 / 3, 8, 400
#: archive cap (parents) per objective count; children per round
ARCHIVE_MAX = {2: 2_000, 3: 2_000}
ARCHIVE_MAX_MANY = 3_000
CHILDREN_MIN = 2_000
#: the archive is thinned back to its cap once it holds SLACK x the cap
SLACK = 1.25
#: default time cap of the pre-search, CPU seconds (search.presearch_s); on the benchmark studies
#: the pre-search takes 0.9-6.1 s (docs/search-quality.md), so it binds on larger spaces only
PRESEARCH_S = SEARCH_DEFAULTS["presearch_s"]


@dataclass(frozen=True)
class Budget:
    """How much the pre-search evaluates: ``initial`` designs to start (grown up to
    ``initial_max`` while too few are feasible), then ``rounds`` of ``children``, unless
    ``seconds`` pass first; the archive holds ``archive_max`` designs, ``keep`` become seeds."""

    initial: int
    initial_max: int
    feasible_wanted: int
    children: int
    rounds: int
    archive_max: int
    keep: int
    seconds: float
    niche_max: int = 200

    @property
    def designs(self) -> int:
        """Designs evaluated when the batch does not grow and the clock does not stop it."""
        return self.initial + self.children * self.rounds


def knob_weight(k: Knob) -> float:
    """A searched knob's share of the space's size: 1 for a continuous range or one of 16 or
    more levels, log2(levels) / 4 below (a choice of 2: 0.25, of 4: 0.5)."""
    if k.choices:
        levels = len(k.choices)
    elif k.kind == "int":
        levels = int(k.high) - int(k.low) + 1 if not k.step else int((k.high - k.low) // k.step) + 1
    elif k.step:
        levels = int(round((k.high - k.low) / k.step)) + 1
    else:
        return 1.0
    return min(1.0, math.log2(max(levels, 1)) / 4) if levels < 16 else 1.0


def effective_knobs(study: StudySpec) -> float:
    """Sum of :func:`knob_weight` over the searched knobs (quickstart: 5.4)."""
    return sum(knob_weight(k) for k in study.searched)


def presearch_budget(study: StudySpec, n_trials: int, keep: int, seconds: float = PRESEARCH_S) -> Budget:
    """The budget for a study and a trial budget. Designs = DESIGNS_PER_KNOB x effective knobs
    x sqrt(objectives - 1) x min(1, n_trials / 1,000) (at least 20,000): a third to start, the
    rest in 20 rounds. quickstart at 1,000 trials: 5.4 knobs -> 130,000 designs."""
    knobs = max(effective_knobs(study), 1.0)
    m = len(study.objectives)
    scale = min(1.0, n_trials / 1000)
    total = max(20_000, int(DESIGNS_PER_KNOB * knobs * math.sqrt(max(m - 1, 1)) * scale))
    initial = int(total * INITIAL_SHARE)
    rounds = 20
    children = max(CHILDREN_MIN // 4, (total - initial) // rounds)
    return Budget(initial=initial, initial_max=GROWTH * initial, feasible_wanted=int(FEASIBLE_PER_KNOB * knobs),
                  children=children, rounds=rounds, archive_max=ARCHIVE_MAX.get(m, ARCHIVE_MAX_MANY), keep=keep,
                  seconds=float(seconds))


@dataclass
class Archive:
    """Feasible non-dominated designs: knob arrays (every searched knob, inactive ones at any
    value) and objective values, one design per distinct objective vector."""

    params: dict[str, np.ndarray]
    values: np.ndarray
    directions: list[str]

    def __len__(self) -> int:
        return self.values.shape[0]

    def merge(self, params: dict[str, np.ndarray], values: np.ndarray, feasible: np.ndarray, cap: int,
              spread_only: bool = False) -> None:
        """Add the feasible designs, keep the non-dominated (one per objective vector), cap
        (:func:`cap_rows`; ``spread_only``: by epsilon boxes whatever the objectives). Only the
        designs that nothing in the archive or the batch dominates are copied."""
        cand = np.flatnonzero(feasible)
        if cand.size:
            cand = cand[pareto_mask(np.concatenate([self.values, values[cand]]), self.directions)[len(self):]]
        if not cand.size:
            return
        params, values, feasible = {k: v[cand] for k, v in params.items()}, values[cand], np.ones(cand.size, bool)
        if len(self):
            params = {k: np.concatenate([self.params[k], v]) for k, v in params.items()}
            feasible = np.concatenate([np.ones(len(self), dtype=bool), feasible])
            values = np.concatenate([self.values, values])
        self.params, self.values = front_of(params, values, feasible, self.directions)
        if len(self) > SLACK * cap:          # thinned in bursts: a few hundred designs over the cap wait
            idx = box_thin(normalise(self.values, self.directions), cap) if spread_only else \
                cap_rows(self.values, cap, self.directions)
            self.take(idx)

    def take(self, idx: np.ndarray) -> None:
        self.params, self.values = {k: v[idx] for k, v in self.params.items()}, self.values[idx]


def cap_rows(values: np.ndarray, cap: int, directions) -> np.ndarray:
    """Rows of a front kept under the archive cap: exact hypervolume thinning up to 3
    objectives (as the seeds), epsilon boxes above (fast: the parents need spread, not the best
    hypervolume subset)."""
    if values.shape[1] <= EXACT_MAX_OBJECTIVES:
        return thin(values, cap, directions, extremes=True)
    return box_thin(normalise(values, directions), cap)


#: share of each round's children bred from the niches, and from the best EXTREME_PARENTS
#: designs of each objective (the front's ends); at most PROBE_SHARE of them are probes around the
#: best design of each objective not probed yet (dse.search.variation.probes)
NICHE_SHARE, EXTREME_SHARE, EXTREME_PARENTS, PROBE_SHARE = 0.3, 0.1, 16, 0.2


def niche_knobs(study: StudySpec) -> list[Knob]:
    """Searched knobs given as a list of choices (dse.search.levels.level_knobs): the draft, the
    draft chip on or off, the memory type, the chip count, the runtime, the link class, expert
    parallel...: one niche per level."""
    return level_knobs(study)


@dataclass
class Pool:
    """The archive and one small front per level of each choice knob (:func:`niche_knobs`): the
    best designs with the draft chip on, with HBM4, on 64 chips, with the eager runtime. A level
    whose designs are all dominated at first (a draft chip needs a dozen knobs right before it
    pays; a chip count that wins only at the extreme of one objective) keeps improving in its
    niche until it reaches the front, and its best design is at hand for the study's results
    (dse.search.levels.level_picks). While nothing is feasible, ``lost`` holds the least violating
    designs (:func:`violation`) as parents; ``short`` the least violating design of each level no
    feasible design has reached (params of one row, its constraint values)."""

    study: StudySpec
    archive: Archive
    cap: int
    niche_cap: int = 200
    niches: dict = field(default_factory=dict)
    lost: tuple | None = None
    short: dict = field(default_factory=dict)
    probed: set = field(default_factory=set)

    @classmethod
    def empty(cls, study: StudySpec, cap: int, niche_cap: int = 200) -> Pool:
        dirs = [o.direction for o in study.objectives]
        m = len(dirs)
        niches = {(k.name, v): Archive({}, np.zeros((0, m)), dirs) for k in niche_knobs(study) for v in k.choices}
        return cls(study, Archive({}, np.zeros((0, m)), dirs), cap, niche_cap, niches)

    def merge(self, params: dict[str, np.ndarray], values: np.ndarray, feasible: np.ndarray,
              cons: np.ndarray | None = None) -> None:
        """Add evaluated designs to the archive and to the niche of each level they try."""
        self.archive.merge(params, values, feasible, self.cap)
        n = values.shape[0]
        if self.niches and n:
            tries = level_masks(self.study, params, n)
            for lvl, arch in self.niches.items():
                arch.merge(params, values, feasible & tries[lvl], self.niche_cap, spread_only=True)
            if cons is not None:
                self._track_short(params, cons, tries)
        if not len(self.archive) and cons is not None:
            self.lost = _least_violating(self.lost, params, cons, self.cap)

    def _track_short(self, params: dict[str, np.ndarray], cons: np.ndarray, tries: dict) -> None:
        """Keep the least violating design of each level whose niche is still empty."""
        empty = [lvl for lvl, arch in self.niches.items() if not len(arch) and tries[lvl].any()]
        for lvl in [lvl for lvl in self.short if len(self.niches[lvl])]:
            del self.short[lvl]
        if not empty:
            return
        held = [lvl for lvl in empty if lvl in self.short]
        v = violation(np.concatenate([self.short[lvl][1] for lvl in held] + [cons]))
        was, now = dict(zip(held, v[:len(held)])), v[len(held):]
        for lvl in empty:
            rows = np.flatnonzero(tries[lvl])
            best = rows[np.argmin(now[rows])]
            if lvl not in was or now[best] < was[lvl]:
                self.short[lvl] = ({k: x[best:best + 1] for k, x in params.items()}, cons[best:best + 1])

    def children(self, n: int, scale, rng: np.random.Generator) -> dict[str, np.ndarray] | None:
        """n children (:func:`breed`, ``scale`` a number or one per child, in order): the archive's
        first, then NICHE_SHARE of them from the niches, an equal part each, EXTREME_SHARE from the
        best designs of each objective, and last up to PROBE_SHARE probes (:meth:`probes`); from the
        least violating designs while nothing is feasible; None when there is nothing to breed from."""
        if not len(self.archive):
            return breed(self.study, self.lost[0], n, scale, rng) if self.lost is not None else None
        near = self.probes(int(n * PROBE_SHARE), rng)
        m = len(next(iter(near.values()))) if near else 0
        kids = self._bred(n - m, scale[: n - m] if np.ndim(scale) else scale, rng)
        return {k: np.concatenate([v, near[k]]) for k, v in kids.items()} if m else kids

    def _bred(self, n: int, scale, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """n children of the archive, the niches and the objectives' best designs (:meth:`children`)."""
        full = [a.params for a in self.niches.values() if len(a)]
        per = int(n * NICHE_SHARE) // len(full) if full else 0
        arch = self.archive
        ends = [{k: v[idx] for k, v in arch.params.items()} for idx in
                np.split(extreme_rows(arch.values, arch.directions, EXTREME_PARENTS), arch.values.shape[1])]
        per_end = int(n * EXTREME_SHARE) // len(ends)
        pools = [arch.params] + (full if per else []) + (ends if per_end else [])
        counts = [per] * (len(full) if per else 0) + [per_end] * (len(ends) if per_end else 0)
        return breed(self.study, pools, [n - sum(counts)] + counts, scale, rng)


    def probes(self, most: int, rng: np.random.Generator) -> dict[str, np.ndarray] | None:
        """Designs one knob away (dse.search.variation.probes) from the best archive design of each
        objective not probed yet (the next best when the best was: it did not move since), at most
        ``most`` (a random subset beyond); None when there is none."""
        arch = self.archive
        if most <= 0 or not len(arch):
            return None
        m = arch.values.shape[1]
        parts = []
        for order in np.split(extreme_rows(arch.values, arch.directions, EXTREME_PARENTS), m):
            for i in order:
                key = tuple(arch.values[i].tolist())
                if key not in self.probed:
                    self.probed.add(key)
                    row = {k: v[i:i + 1] for k, v in arch.params.items()}
                    active = {k: bool(a[0]) for k, a in active_masks(self.study, row, 1).items()}
                    parts.append(probes(self.study, row, active))
                    break
        parts = [p for p in parts if len(next(iter(p.values())))]
        if not parts:
            return None
        out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        total = len(next(iter(out.values())))
        if total > most:
            keep = np.sort(rng.choice(total, most, replace=False))
            out = {k: v[keep] for k, v in out.items()}
        return out


@dataclass
class Seeds:
    """The thinned front: knob values per design (inactive knobs left out), objectives, the
    number of designs evaluated to find it, the archive it was thinned from, and whether the
    time cap stopped the search."""

    params: list[dict]
    values: np.ndarray
    evaluated: int
    archive: Archive | None = None
    budget: Budget | None = None
    timed_out: bool = False
    seconds: float = 0.0
    rounds: int = 0
    pool: Pool | None = None
    #: designs in the space-filling batch and how many of them were feasible
    initial: int = 0
    initial_feasible: int = 0
    #: the last ``levels`` seeds are the best designs of levels the thinned front leaves out
    levels: int = 0

    def breeding_budget(self) -> Budget | None:
        """The budget dse.search.breeder screens each generation with: this one, but where the time cap
        stopped the pre-search after a fraction f of its designs, sqrt(f) x its children (at least
        CHILDREN_MIN / 4): a model too slow for the pre-search's budget is too slow to screen a
        full round per batch of trials. Measured at 1,000 trials, seed 0 (docs/search-quality.md):
        draft-codesign 50 -> 31 CPU s at f (not its root), HV 0.9999 -> 0.9998 of the union of
        both; moe-many-chips 25 -> 19 CPU s (load 5, then 2), HV 0.9977 -> 0.9971 with the root."""
        if self.budget is None or not self.timed_out:
            return self.budget
        f = math.sqrt(min(1.0, self.evaluated / max(self.budget.designs, 1)))
        return replace(self.budget, children=max(CHILDREN_MIN // 4, int(self.budget.children * f)))


def score(study: StudySpec, params: dict[str, np.ndarray], n: int, db, tech) -> tuple[np.ndarray, np.ndarray]:
    """(objective values (n, m), feasible (n,)) of designs, as the results file would have them."""
    vals, feasible, _ = score_with_violation(study, params, n, db, tech)
    return vals, feasible


def score_with_violation(study: StudySpec, params: dict[str, np.ndarray], n: int, db, tech
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`score` and the constraint values (n, c) (<= 0 where met, dse.evaluation.designs)."""
    designs, metrics = evaluate_study(study, params, n, db, tech)
    cols = metric_table(designs, metrics)
    cons = constraint_values(cols, study)
    vals = objective_matrix(cols, study)
    feasible = np.all(cons <= 0, axis=1) & cols["fits"] & np.isfinite(vals).all(axis=1)
    return vals, feasible, cons


def violation(cons: np.ndarray) -> np.ndarray:
    """One number per design for how far it is from feasible: the sum over constraints of the
    positive part, each divided by that constraint's median positive part in the batch."""
    pos = np.maximum(np.nan_to_num(cons, nan=1.0, posinf=1e300), 0.0)
    scale = np.array([np.median(c[c > 0]) if (c > 0).any() else 1.0 for c in pos.T])
    return (pos / np.where(scale > 0, scale, 1.0)).sum(axis=1)


#: reference CPU seconds per unit of the model's work (dse.model.work.COUNTS): per design, per
#: design row x k column priced, per step_cost call, per tree table asked for. Fitted (non-negative
#: least squares on relative error) on 28 pre-search parts of 2,000-30,000 designs of seven studies
#: (studies/quickstart, draft-chip, tree-size, draft-codesign; benchmarks/studies/moe-many-chips,
#: wide-27-knobs, four-objectives) on the 2-core machine docs/search-quality.md was measured on:
#: predicted / measured CPU time 0.24-1.8 per part (a study's whole pre-search: within 2x). Only the
#: cap's scale rests on them; what binds it is counted, so it binds at the same design on any machine.
WORK_S = {"designs": 1.29e-6, "rows": 3.1e-7, "steps": 3.3e-4, "tables": 9.3e-4}


class WorkClock:
    """The pre-search's clock: reference CPU seconds of the model's work since it was made,
    ``sum(WORK_S[k] x count k)``, the same for a seed on any machine and under any load (the time
    cap ``search.presearch_s`` is read on it, not on the machine's clock)."""

    def __init__(self):
        self._start = dict(COUNTS)

    def seconds(self, designs: int) -> float:
        done = {k: COUNTS[k] - self._start[k] for k in COUNTS}
        return WORK_S["designs"] * designs + sum(WORK_S[k] * done[k] for k in done)


def presearch(study: StudySpec, db, tech, *, seed: int, keep: int, budget: Budget | None = None,
              n_trials: int = 1000, progress: Progress | None = None, clock=time.process_time,
              work=None, on_part=None) -> Seeds:
    """The seeds: a space-filling batch, rounds of refinement, the archive thinned to ``keep``
    designs (see the module docstring). Deterministic for a seed (``budget.seconds`` is read on
    a :class:`WorkClock`, or on ``work``(designs evaluated) when given); ``clock`` only times it for
    the report; ``progress`` (a dse.process.progress.Progress in designs) is updated and ``on_part()``
    called after every part (it may raise to stop: SIGTERM, dse.process.interrupt.StopFlag.check)."""
    budget = budget or presearch_budget(study, n_trials, keep)
    rng = np.random.default_rng(seed)
    start = clock()
    work = work or WorkClock().seconds
    pool = Pool.empty(study, budget.archive_max, budget.niche_max)
    evaluated, part = 0, max(1, -(-budget.initial // 4))
    feasible_seen = 0
    timed_out = False

    def tick(n, left):
        if progress is not None:
            progress.total = max(progress.total, progress.done + n + left)     # the batch grew
            progress.update(n)
        if on_part is not None:
            on_part()

    # 1. the space-filling batch, in parts, grown while too few designs are feasible
    while evaluated < budget.initial or (feasible_seen < budget.feasible_wanted and evaluated < budget.initial_max):
        params = sample(study, part, rng)
        vals, feas, cons = score_with_violation(study, params, part, db, tech)
        evaluated += part
        feasible_seen += int(feas.sum())
        pool.merge(params, vals, feas, cons)
        tick(part, budget.children * budget.rounds)
        if work(evaluated) > budget.seconds:
            timed_out = True
            break
    initial, initial_feasible = evaluated, feasible_seen
    # 2. refinement
    done = 0
    for r in range(budget.rounds):
        if timed_out:
            break
        params = pool.children(budget.children, step_scale(r / max(budget.rounds - 1, 1)), rng)
        if params is None:
            params = sample(study, budget.children, rng)
        vals, feas, cons = score_with_violation(study, params, budget.children, db, tech)
        evaluated += budget.children
        pool.merge(params, vals, feas, cons)
        done = r + 1
        tick(budget.children, budget.children * (budget.rounds - done))
        if work(evaluated) > budget.seconds and r + 1 < budget.rounds:
            timed_out = True
    arch = pool.archive
    idx, extra = seed_rows(study, pool, keep)
    return Seeds(params=seed_params(study, arch, idx) + seed_params(study, extra, np.arange(len(extra))),
                 values=np.concatenate([arch.values[idx], extra.values]), evaluated=evaluated, archive=arch,
                 budget=budget, timed_out=timed_out, seconds=clock() - start, rounds=done, pool=pool, initial=initial,
                 initial_feasible=initial_feasible, levels=len(extra))


def seed_rows(study: StudySpec, pool: Pool, keep: int) -> tuple[np.ndarray, Archive]:
    """The seeds: rows of the archive thinned (dse.search.thinning.thin), and the best design of
    each level they leave out (dse.search.levels.level_picks), ``keep`` in all where the levels
    leave room: the thinned rows give way, the least contributing first, to the levels' designs."""
    arch = pool.archive
    idx = thin(arch.values, keep, arch.directions, extremes=True) if len(arch) else np.arange(0)
    while True:
        params, values = level_picks(study, pool, tried_in(study, {k: v[idx] for k, v in arch.params.items()},
                                                           idx.size) if len(arch) else set())
        over = idx.size + len(values) - keep
        if over <= 0 or not idx.size:
            break
        want = idx.size - over
        if want <= 0:
            idx = idx[:0]
            continue
        kept = thin(arch.values[idx], want, arch.directions, extremes=True)
        idx = idx[kept if kept.size <= want else thin(arch.values[idx], want, arch.directions)]   # ends > want
    extra = Archive(params, values, arch.directions)
    if len(extra) > keep:
        extra.take(np.arange(keep))
    return idx, extra


def seed_params(study: StudySpec, arch: Archive, idx: np.ndarray) -> list[dict]:
    """Rows ``idx`` of the archive as Optuna parameters: active knobs only, plain Python values."""
    knobs = study.searched
    rows = {k: v[idx] for k, v in arch.params.items()}
    masks = active_masks(study, rows, idx.size)
    return [{k.name: _plain(rows[k.name][i]) for k in knobs if k.name not in masks or masks[k.name][i]}
            for i in range(idx.size)]


def _least_violating(prev, params: dict, cons: np.ndarray, cap: int):
    """The ``cap`` least violating designs of the previous pool and this batch (:func:`violation`)."""
    v = violation(cons)
    if prev is not None:
        params = {k: np.concatenate([prev[0][k], params[k]]) for k in params}
        v = np.concatenate([prev[1], v])
    order = np.argsort(v, kind="stable")[:cap]
    return {k: x[order] for k, x in params.items()}, v[order]


def front_of(params: dict, vals: np.ndarray, feas: np.ndarray, dirs) -> tuple[dict, np.ndarray]:
    """The feasible non-dominated designs, one per distinct objective vector (the first)."""
    idx = np.flatnonzero(pareto_mask(vals, dirs, feas))
    idx = idx[first_distinct(vals[idx])]
    return {k: v[idx] for k, v in params.items()}, vals[idx]


def first_distinct(vals: np.ndarray) -> np.ndarray:
    """Sorted positions of the first row of each distinct row (a lexsort, not np.unique on rows)."""
    n = vals.shape[0]
    if n < 2:
        return np.arange(n)
    order = np.lexsort((np.arange(n), *vals.T[::-1]))
    sv = vals[order]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(sv[1:] != sv[:-1], axis=1)
    return np.sort(order[new])


def fill_neutral(study: StudySpec, rows: list[dict]) -> dict[str, np.ndarray]:
    """Optuna parameter dicts (inactive knobs absent) as knob arrays, an absent knob at its
    neutral value (dse.study.space.neutral_value) brought into its range (a link of 0 GB/s is
    neutral but below a log range: mutation works in the range)."""
    out = {}
    for k in study.searched:
        fill = neutral_value(k)
        if not k.choices:
            fill = min(max(fill, k.low), k.high)
        col = [r.get(k.name, fill) for r in rows]
        out[k.name] = np.array(col, dtype=object) if k.choices else \
            np.array(col, dtype=np.int64 if k.kind == "int" else np.float64)
    return out


def _plain(v):
    """numpy scalar -> Python value (Optuna stores plain ints, floats, bools and strings)."""
    return v.item() if isinstance(v, np.generic) else v
