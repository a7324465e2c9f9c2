"""The seeds of sampler auto: a front found in numpy (dse.search.presearch) within the study's time cap,
enqueued as the study's first trials once, however many workers start together (dse.search.claims)."""

from __future__ import annotations

from ..process.progress import Progress, note
from ..study import StudySpec


def seed_count(n_trials: int, batch_size: int) -> int:
    """Seeds of sampler auto: half the trials (at least one batch, at most 256 designs)."""
    return int(min(256, max(min(batch_size, n_trials), n_trials // 2)))


def find_seeds(study: StudySpec, n_trials: int, seed: int, db, tech, *, progress: bool = False,
               label: str = "dse run", on_part=None):
    """The seeds of sampler auto for a budget: dse.search.presearch with the budget of
    dse.search.presearch.presearch_budget (it grows with the space and the trials, up to 1,000) and the
    study's time cap (search.presearch_s); progress on stderr when ``progress``; ``on_part()`` after
    each part (a heartbeat, a check for SIGTERM)."""
    from .presearch import presearch, presearch_budget
    keep = seed_count(n_trials, study.batch_size)
    budget = presearch_budget(study, n_trials, keep, study.presearch_s)
    bar = Progress(budget.designs, unit="designs", label=f"{label} pre-search", enabled=progress)
    try:
        seeds = presearch(study, db, tech, seed=seed, keep=keep, budget=budget, progress=bar, on_part=on_part)
    finally:
        bar.close()
    if seeds.timed_out and progress:
        note(f"[{label}] pre-search stopped by its time cap (search.presearch_s = {study.presearch_s:g} s) "
             f"after {seeds.evaluated:,} of {budget.designs:,} designs (reference CPU seconds counted from the "
             "model's work: the same designs on any machine; a larger presearch_s searches more)")
    return seeds


def enqueue_seeds(ostudy, study: StudySpec, n_trials: int, seed: int, db, tech, *, sampler=None,
                  progress: bool = False, label: str = "dse run", on_part=None) -> int:
    """Sampler auto: a front found in numpy (dse.search.presearch) enqueued as the study's first trials.
    They are asked, evaluated and told like any trial, so every seed is in the storage and the
    Parquet file; ``sampler`` (dse.search.breeder.BreederSampler) keeps breeding from the archive they
    were thinned from. One worker of a shared study seeds it (dse.search.claims.seed_once); it
    records ``dse_seeds`` last, which tells the others the seeds are in. ``on_part()`` is called after
    each part of the pre-search (not while the seeds are enqueued: they go in whole)."""
    seeds = find_seeds(study, n_trials, seed, db, tech, progress=progress, label=label, on_part=on_part)
    from .breeder import design_ids, rows_to_arrays
    held = [t.params or t.system_attrs.get("fixed_params") or {} for t in ostudy.get_trials(deepcopy=False)]
    held_ids = set(design_ids(study, rows_to_arrays(study, held), len(held)).tolist()) if held else set()
    ids = design_ids(study, rows_to_arrays(study, seeds.params), len(seeds.params)).tolist() if seeds.params else []
    for p, i in zip(seeds.params, ids):
        if i not in held_ids:           # a design the study holds already (a seeder stopped half-way)
            ostudy.enqueue_trial(p, skip_if_exists=False)
    if sampler is not None and hasattr(sampler, "adopt"):
        sampler.adopt(seeds.pool, seeds.breeding_budget())
    ostudy.set_user_attr("dse_seeds", {"designs": len(seeds.params), "evaluated_in_numpy": seeds.evaluated,
                                       "seconds": round(seeds.seconds, 3), "stopped_by_time_cap": seeds.timed_out})
    return len(seeds.params)
