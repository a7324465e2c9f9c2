"""Sampler ``auto`` after its seeds: trials bred from the front and screened in numpy (issue 20,
item 3; issue 21, item 5).

An Optuna sampler (``optuna.samplers.BaseSampler``) whose every trial is an ordinary trial of the
study: asked, evaluated, told and stored like any other, on any storage, by any number of
workers. Before each batch it

1. reads the trials finished since the last batch (its own and other workers'), adds the
   feasible ones to its archive (dse.search.presearch.Archive: feasible non-dominated designs) and
   records every design the study holds (finished, running or enqueued) by its identity
   (:func:`design_ids`);
2. breeds one pre-search round of children (dse.search.presearch.Budget.children: the round grows with
   the space, 4,351 designs for studies/quickstart.yaml) from its archive and niches
   (dse.search.presearch.Pool: crossover and mutation, a quarter each at steps of 10%, 3%, 1% and 0.3%
   of each knob's range) and evaluates them with the numpy model, the model every trial is
   evaluated with;
3. proposes the ``batch`` archive designs not yet in the study that add most hypervolume to the
   front of the study's trials (dse.search.thinning.thin with the trials held fixed). A design the study
   already holds is answered from that record and never proposed again: no trial is spent twice
   on one design.

The archive is the pre-search's (dse.search.presearch) when this process seeded the study; otherwise (a
resumed run, another worker of a shared study) the first batch runs a pre-search of its own.
Deterministic for a seed on one process.
"""

from __future__ import annotations

import math

import numpy as np
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import TrialState

from ..process.progress import Progress
from ..results.pareto import pareto_mask
from ..study.space import active_masks, category_codes, knob_names
from ..study.spec import StudySpec
from .levels import key_of, level_picks, levels, tried_in, tried_levels
from .presearch import (
    Archive,
    Budget,
    Pool,
    fill_neutral,
    presearch,
    presearch_budget,
    score_with_violation,
    seed_params,
)
from .thinning import box_thin, normalise, pick
from .variation import sample

#: mutation steps (fraction of a knob's range) of the four parts of each screened batch
SCALES = (0.1, 0.03, 0.01, 0.003)
#: candidates kept per trial to propose before the exact choice (epsilon boxes, dse.search.thinning.box_thin)
PRECUT = 4
#: the value an inactive knob takes in a design's identity
_INACTIVE = np.int64(-(2 ** 62))


def design_ids(study: StudySpec, params: dict[str, np.ndarray], n: int) -> np.ndarray:
    """One 64-bit identity per design: a hash of its active knobs (floats by their bits, integers
    as they are, a choice by its index, an inactive knob (absent or None, or made inactive by
    another knob, dse.study.space) as a fixed marker). Two designs that evaluate alike because
    they differ only in inactive knobs get the same identity."""
    masks = active_masks(study, params, n)
    h = np.full(n, 0x9E3779B97F4A7C15, dtype=np.uint64)
    for j, k in enumerate(study.searched):
        v = params.get(k.name)
        if v is None:
            col = np.full(n, _INACTIVE, dtype=np.int64)
        else:
            v = np.asarray(v)
            none = np.equal(v, None) if v.dtype == object else np.zeros(n, dtype=bool)
            if k.choices:
                _, col = category_codes(np.where(none, k.choices[0], v), knob_names(k))
            elif k.kind == "int":
                col = np.where(none, 0, v).astype(np.int64)
            else:
                col = (np.where(none, 0.0, v).astype(np.float64) + 0.0).view(np.int64)    # -0.0 as 0.0
            col = np.where(none, _INACTIVE, col)
        if k.name in masks:
            col = np.where(masks[k.name], col, _INACTIVE)
        h = _mix(h ^ _mix(col.astype(np.uint64) + np.uint64(j + 1)))
    return h


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (Steele, Lea and Flood 2014): a bijective 64-bit mix."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def rows_to_arrays(study: StudySpec, rows: list[dict]) -> dict[str, np.ndarray]:
    """Optuna parameter dicts as knob arrays, None where a knob is absent (inactive)."""
    return {k.name: np.array([r.get(k.name) for r in rows], dtype=object) for k in study.searched}


class BreederSampler(BaseSampler):
    """Proposes designs bred from the front and screened with the model (module docstring).
    Enqueued trials (the seeds) keep their parameters."""

    def __init__(self, study: StudySpec, db, tech, *, seed: int, batch: int, n_trials: int,
                 pool: Pool | None = None, budget: Budget | None = None,
                 presearch_s: float | None = None, progress: bool = False, label: str = "dse run"):
        self._spec, self._db, self._tech = study, db, tech
        self._seed, self._batch, self._n_trials = seed, max(1, batch), n_trials
        self._rng = np.random.default_rng(seed)
        self._fallback = RandomSampler(seed=seed)
        self._pool, self._budget = pool, budget
        self._presearch_s = presearch_s
        self._progress, self._label = progress, label
        self._dirs = [o.direction for o in study.objectives]
        self._queue: list[dict] = []
        self._pending: dict[int, tuple[dict, int]] = {}   # trial id -> (design, identity)
        self._known: set[int] = set()                 # identities of every design the study holds
        self._tried: set = set()                      # levels (dse.search.levels) its designs try
        self._read_ids: set[int] = set()              # finished trials read (they never change)
        self._pos, self._pos_id = 0, None             # trials before _pos are all finished and read
        self._front = np.zeros((0, len(self._dirs)))  # objective values of the trials' front
        self._stale = True
        self._dry = False                             # the last generation found no new design
        self._stats = {"generations": 0, "screened": 0, "proposed": 0, "answered_from_record": 0}
        #: called after each part of its own pre-search (dse.search.runner: a check for SIGTERM/SIGINT)
        self.on_part = None

    # ---- Optuna's sampler interface
    def infer_relative_search_space(self, study, trial) -> dict:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def prepare(self, study, n: int) -> int:
        """Breed if the study changed since the last batch; how many new designs are queued (at
        most ``batch``; 0 when no design the study does not hold could be found). dse.search.asktell asks
        no more trials than this plus the enqueued ones."""
        if self._stale or (len(self._queue) < n and not self._dry):
            self._refill(study)
        return len(self._queue)

    def before_trial(self, study, trial) -> None:
        """Hand the trial the next queued design (an enqueued seed keeps its own)."""
        if "fixed_params" in trial.system_attrs:
            return
        if self._stale or not self._queue:
            self._refill(study)
        if self._queue:
            design, ident = self._queue.pop(0)
            self._pending[trial._trial_id] = (design, ident)
            self._known.add(ident)
            self._stats["proposed"] += 1

    def sample_independent(self, study, trial, param_name, param_distribution):
        design = self._pending.get(trial._trial_id, ({}, 0))[0]
        value = design.get(param_name)
        if value is not None and param_distribution._contains(param_distribution.to_internal_repr(value)):
            return value
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        _, ident = self._pending.pop(trial._trial_id, (None, None))
        if ident is not None and state != TrialState.COMPLETE:     # not evaluated (failed): it may come again
            self._known.discard(ident)
        self._stale = True

    def reseed_rng(self) -> None:
        self._rng = np.random.default_rng()
        self._fallback.reseed_rng()

    def warm_up(self) -> None:
        """Run its own pre-search now if it has no archive (a worker waiting for another to seed)."""
        if self._pool is None:
            self._start()

    def adopt(self, pool: Pool, budget: Budget) -> None:
        """Breed from the pre-search's pool (the archive the seeds were thinned from, and its niches)."""
        self._pool, self._budget = pool, budget

    @property
    def stats(self) -> dict:
        """Generations bred, designs screened in numpy, designs proposed as trials, and archive
        designs skipped because the study holds them already."""
        return dict(self._stats)

    # ---- the breeding
    def _ids(self, rows: list[dict]) -> np.ndarray:
        return design_ids(self._spec, rows_to_arrays(self._spec, rows), len(rows))

    def _read(self, study) -> None:
        """Record every design of the study; add finished feasible ones to the front and archive."""
        seen, new_rows, new_values = [], [], []
        trials = study._get_trials(deepcopy=False, use_cache=True)
        if self._pos > len(trials) or (self._pos and trials[self._pos - 1]._trial_id != self._pos_id):
            self._pos, self._pos_id = 0, None            # not the list read before: read it all again
        leading = True
        for i in range(self._pos, len(trials)):
            t = trials[i]
            leading = leading and t.state.is_finished()
            if leading:                                  # every trial up to here is finished and read
                self._pos, self._pos_id = i + 1, t._trial_id
            if t._trial_id in self._read_ids:
                continue
            params = t.params or t.system_attrs.get("fixed_params") or {}
            if params and t.state != TrialState.FAIL:          # a failed trial was not evaluated
                seen.append(params)
            if not t.state.is_finished():
                continue
            self._read_ids.add(t._trial_id)
            if (t.state == TrialState.COMPLETE and t.values is not None and t.params
                    and all(c <= 0 for c in t.constraints.values()) and all(math.isfinite(v) for v in t.values)):
                new_rows.append(t.params)
                new_values.append(t.values)
        if seen:
            self._known.update(self._ids(seen).tolist())
            self._tried.update(tried_levels(seen))
        if not new_values:
            return
        vals = np.asarray(new_values, dtype=np.float64)
        allv = np.concatenate([self._front, vals])
        self._front = allv[pareto_mask(allv, self._dirs)]
        self._pool.merge(fill_neutral(self._spec, new_rows), vals, np.ones(len(vals), dtype=bool))

    def _start(self) -> None:
        """No archive handed over (a resumed run, another worker): a pre-search of its own."""
        kw = {"seconds": self._presearch_s} if self._presearch_s else {}
        self._budget = presearch_budget(self._spec, self._n_trials, keep=1, **kw)
        bar = Progress(self._budget.designs, unit="designs", label=f"{self._label} pre-search (breeding pool)",
                       enabled=self._progress)
        try:
            seeds = presearch(self._spec, self._db, self._tech, seed=self._seed, keep=1, budget=self._budget,
                              progress=bar, on_part=self.on_part)
        finally:
            bar.close()
        self._pool, self._budget = seeds.pool, seeds.breeding_budget()

    def _refill(self, study) -> None:
        """One generation: read the study, breed and screen, queue the best new designs."""
        if self._pool is None:
            self._start()
        self._read(study)
        self._stale = False
        self._stats["generations"] += 1
        n = max(self._budget.children, len(SCALES))                 # one pre-search round per batch
        scale = np.resize(np.asarray(SCALES), n)                        # the four steps, interleaved
        kids = self._pool.children(n, scale, self._rng)
        if kids is not None:
            vals, feas, cons = score_with_violation(self._spec, kids, n, self._db, self._tech)
            self._stats["screened"] += n
            self._pool.merge(kids, vals, feas, cons)
        rows = self._pick(self._pool)
        self._queue = list(zip(rows, self._ids(rows).tolist())) if rows else []
        self._dry = not rows

    def _pick(self, pool: Pool) -> list[dict]:
        """Up to ``batch`` designs the study does not hold: the best design of each level no trial
        tries yet (:meth:`_untried`), the archive designs that add most hypervolume to the front of
        its trials (dse.search.thinning.pick), then other new archive and niche designs, then uniform
        new designs (an archive the study holds entirely)."""
        taken = np.fromiter(self._known, dtype=np.uint64, count=len(self._known))
        out, taken = self._untried(pool, taken)
        want = self._batch - len(out)
        arch = pool.archive
        if len(arch) and want > 0:
            ids = design_ids(self._spec, arch.params, len(arch))
            new = np.flatnonzero(~np.isin(ids, taken))
            self._stats["answered_from_record"] += len(arch) - new.size
            if new.size:
                nf = self._front.shape[0]
                values = np.concatenate([self._front, arch.values[new]])
                fixed = np.arange(values.shape[0]) < nf
                ok = np.flatnonzero(pareto_mask(values, self._dirs) | fixed)   # dominated by a trial: adds nothing
                if (~fixed[ok]).sum() > PRECUT * want:    # one candidate per epsilon box first (no twins)
                    ok = ok[box_thin(normalise(values[ok], self._dirs), nf + PRECUT * want, fixed[ok])]
                chosen = new[ok[pick(values[ok], want, self._dirs, fixed[ok])] - nf]
                rest = np.setdiff1d(new, chosen)[: want - chosen.size]
                rows = np.concatenate([chosen, rest])
                out += seed_params(self._spec, arch, rows)
                taken = np.concatenate([taken, ids[rows]])
        for niche in pool.niches.values():
            if len(out) >= self._batch:
                break
            if len(niche):
                ids = design_ids(self._spec, niche.params, len(niche))
                _, first = np.unique(ids, return_index=True)
                fresh = np.sort(first[~np.isin(ids[first], taken)])[: self._batch - len(out)]
                out += seed_params(self._spec, niche, fresh)
                taken = np.concatenate([taken, ids[fresh]])
        if len(out) < self._batch:
            out += self._random_new(self._batch - len(out), taken)
        return out

    def _untried(self, pool: Pool, taken: np.ndarray) -> tuple[list[dict], np.ndarray]:
        """The best design of each level no design of the study tries yet (dse.search.levels.level_picks;
        the seeds hold one per level, so this acts on a study seeded by another sampler or process),
        at most ``batch``, those the study does not hold."""
        missing = [lvl for lvl in levels(self._spec) if key_of(*lvl) not in self._tried]
        if not missing:
            return [], taken
        params, values = level_picks(self._spec, pool, self._tried)
        n = len(values)
        if not n:
            return [], taken
        ids = design_ids(self._spec, params, n)
        fresh = np.flatnonzero(~np.isin(ids, taken))[: self._batch]
        self._tried |= tried_in(self._spec, {k: v[fresh] for k, v in params.items()}, fresh.size)   # asked once
        rows = seed_params(self._spec, Archive(params, values, self._dirs), fresh)
        return rows, np.concatenate([taken, ids[fresh]])

    def _random_new(self, want: int, taken: np.ndarray, tries: int = 8) -> list[dict]:
        """Up to ``want`` uniform designs whose identity is not in ``taken``."""
        n = 4 * self._batch
        out: list[dict] = []
        for _ in range(tries):
            params = sample(self._spec, n, self._rng)
            ids = design_ids(self._spec, params, n)
            _, first = np.unique(ids, return_index=True)
            fresh = np.sort(first[~np.isin(ids[first], taken)])[: want - len(out)]
            taken = np.concatenate([taken, ids[fresh]])
            out += seed_params(self._spec, Archive(params, np.zeros((n, len(self._dirs))), self._dirs), fresh)
            if len(out) >= want:
                break
        return out
