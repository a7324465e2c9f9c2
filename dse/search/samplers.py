"""Optuna's NSGA-II/III with the per-ask bookkeeping memoised (issue 10, item 4).

Optuna 5's genetic samplers (``optuna.samplers._ga.BaseGASampler``) recompute on every ask what
changes only when a trial finishes:

- ``get_trial_generation`` scans every COMPLETE trial for the newest generation and its size:
  O(n) per ask, O(n^2) per run (61% of a 10,000-trial in-memory run);
- ``get_parent_population`` re-reads the study's system attributes and filters every trial by
  the cached parent ids;
- ``get_population`` filters every COMPLETE trial by generation;
- ``infer_relative_search_space`` re-reads every trial and deep-copies the intersection of
  the COMPLETE trials' distributions.

The samplers here keep those answers up to date incrementally: each ask looks only at the trials
that finished since the previous one (a finished trial never changes), so an ask costs O(trials
still running), not O(n); and they read the study again only after this process told a trial (or
after ``reread_s``, for other workers' trials): between its own tells a single process's study
gains no finished trial. They read the same snapshot as Optuna (``Study._get_trials(...,
use_cache=True)``, refreshed by Optuna at every ask and tell), store the same system attributes
under the same keys (``NSGAIISampler:generation``, ``NSGAIISampler:parent:G``: studies resume
across both) and return the same trials in the same order, so they draw the same random numbers
and choose exactly the same parameters as the stock samplers for the same seed
(tests/test_samplers.py compares them trial by trial).
"""

from __future__ import annotations

import time

from optuna.samplers import NSGAIIISampler, NSGAIISampler
from optuna.trial import FrozenTrial, TrialState

__all__ = ["MemoNSGAIISampler", "MemoNSGAIIISampler"]


class _Ledger:
    """What the finished trials of one study say about generations, kept up to date.

    ``pos`` is the number of leading trials (in storage order) all finished and read; trials
    after it that finished out of order are remembered in ``seen``. A finished trial never
    changes, so each is read once."""

    def __init__(self, key: tuple):
        self.key = key
        self.last: list | None = None           # the snapshot read last (Optuna keeps it for one ask)
        self.pos = 0
        self.pos_id: int | None = None          # trial id at pos - 1: detects a reordered list
        self.seen: set[int] = set()
        self.count: dict[int, int] = {}         # generation -> COMPLETE trials in it
        self.members: dict[int, list[tuple[int, FrozenTrial]]] = {}   # generation -> (position, trial)
        self.by_id: dict[int, tuple[int, FrozenTrial]] = {}           # COMPLETE trials: id -> (position, trial)
        self.parents: dict[int, list[FrozenTrial]] = {}               # generation -> parents, storage order
        self.space: dict | None = None          # distributions every COMPLETE trial shares
        self.stale, self.read_at = True, 0.0    # a trial was told since the last read; when read

    def update(self, trials: list[FrozenTrial], gen_key: str) -> None:
        """Read the trials that finished since the last call."""
        if trials is self.last:
            return
        if self.pos > len(trials) or (self.pos and trials[self.pos - 1]._trial_id != self.pos_id):
            self.__init__(self.key)               # not the list we read before: start again
        self.last = trials
        advancing = True
        for i in range(self.pos, len(trials)):
            t = trials[i]
            if not t.state.is_finished():
                advancing = False
                continue
            if advancing:
                self.pos, self.pos_id = i + 1, t._trial_id
            if t._trial_id in self.seen:          # read earlier, when it finished out of order
                if advancing:
                    self.seen.discard(t._trial_id)
                continue
            if not advancing:
                self.seen.add(t._trial_id)
            if t.state == TrialState.COMPLETE:
                self._add(i, t, t.system_attrs.get(gen_key, -1))

    def _add(self, i: int, t: FrozenTrial, g: int) -> None:
        self.count[g] = self.count.get(g, 0) + 1
        self.members.setdefault(g, []).append((i, t))
        self.by_id[t._trial_id] = (i, t)
        dists = t.distributions
        if self.space is None:
            self.space = dict(dists)
        elif any(dists.get(n) is not d and dists.get(n) != d for n, d in self.space.items()):
            self.space = {n: d for n, d in self.space.items() if dists.get(n) == d}


class _GenerationMemo:
    """Mixin over a BaseGASampler: generation, population and parents without an O(n) scan."""

    _ledger: _Ledger | None = None
    #: seconds after which the study is read again although this process told no trial since
    #: (other workers' trials on a shared storage)
    reread_s: float = 1.0

    def _ledger_for(self, study) -> _Ledger:
        """The ledger, brought up to date when this process told a trial since the last read
        (after_trial) or ``reread_s`` has passed: between tells a single process's study cannot
        gain a finished trial, so a read per ask (a query on a database) tells nothing new."""
        key = (id(study._storage), study._study_id)
        if self._ledger is None or self._ledger.key != key:
            self._ledger = _Ledger(key)
        led, now = self._ledger, time.monotonic()
        if led.stale or now - led.read_at > self.reread_s:
            led.update(study._get_trials(deepcopy=False, use_cache=True), self._get_generation_key())
            led.stale, led.read_at = False, now
        return led

    def after_trial(self, study, trial: FrozenTrial, state, values) -> None:
        super().after_trial(study, trial, state, values)
        if self._ledger is not None:
            self._ledger.stale = True

    def infer_relative_search_space(self, study, trial: FrozenTrial) -> dict:
        """As NSGAIISampler: the intersection search space of the COMPLETE trials
        (optuna.search_space.IntersectionSearchSpace) by name, less single-valued distributions;
        the distributions are shared, not deep-copied (nothing writes to them)."""
        space = self._ledger_for(study).space or {}
        return {n: d for n, d in sorted(space.items()) if not d.single()}

    def get_trial_generation(self, study, trial: FrozenTrial) -> int:
        """As BaseGASampler: the newest generation among COMPLETE trials (0 if none), or the
        next one once it holds population_size trials; stored on the trial."""
        generation = trial.system_attrs.get(self._get_generation_key(), None)
        if generation is not None:
            return generation
        led = self._ledger_for(study)
        newest = max([0, *led.count])
        assert self._population_size is not None, "Population size must be set."
        generation = newest if led.count.get(newest, 0) < self._population_size else newest + 1
        study._storage.set_trial_system_attr(trial._trial_id, self._get_generation_key(), generation)
        return generation

    def get_population(self, study, generation: int) -> list[FrozenTrial]:
        """The COMPLETE trials of a generation, in storage order."""
        led = self._ledger_for(study)
        return [t for _, t in sorted(led.members.get(generation, ()), key=lambda m: m[0])]

    def get_parent_population(self, study, generation: int) -> list[FrozenTrial]:
        """As BaseGASampler: parents chosen once per generation and stored in the study's system
        attributes. Optuna returns them in selection order when it has just chosen them and in
        storage order when it reads them back; so does this (the read-back is memoised: parents
        are COMPLETE trials, which never change)."""
        if generation == 0:
            return []
        led = self._ledger_for(study)
        memo = led.parents.get(generation)
        if memo is not None:
            return list(memo)
        key = self._get_parent_cache_key_prefix() + str(generation)
        ids = study._storage.get_study_system_attrs(study._study_id).get(key, None)
        if ids is None:
            parents = self.select_parent(study, generation)
            ids = [t._trial_id for t in parents]
            study._storage.set_study_system_attr(study._study_id, key, ids)
        else:
            parents = None
        if all(i in led.by_id for i in ids):       # parents are COMPLETE trials: read already
            led.parents[generation] = [t for _, t in sorted((led.by_id[i] for i in set(ids)), key=lambda m: m[0])]
        else:                                       # chosen by another worker from trials not read yet
            wanted = set(ids)
            led.parents[generation] = [t for t in study._get_trials(deepcopy=False) if t._trial_id in wanted]
        return parents if parents is not None else list(led.parents[generation])


class MemoNSGAIISampler(_GenerationMemo, NSGAIISampler):
    """``optuna.samplers.NSGAIISampler`` (same arguments, same choices), memoised per generation."""


class MemoNSGAIIISampler(_GenerationMemo, NSGAIIISampler):
    """``optuna.samplers.NSGAIIISampler`` (same arguments, same choices), memoised per generation."""


# BaseGASampler.__init_subclass__ names the attribute keys after the class; keep the stock names so
# that a study written by either sampler resumes with the other
for _cls, _base in ((MemoNSGAIISampler, NSGAIISampler), (MemoNSGAIIISampler, NSGAIIISampler)):
    _cls._GENERATION_KEY = _base._GENERATION_KEY
    _cls._PARENT_CACHE_KEY_PREFIX = _base._PARENT_CACHE_KEY_PREFIX
