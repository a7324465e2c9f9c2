"""A study's COMPLETE trials as the results DataFrame: re-evaluated in one batch (the model is
deterministic), each row with the sampler and seed of the run or worker that told it."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd

from ..errors import DseError
from ..evaluation.designs import evaluate_study
from ..results.frame import results_frame
from ..study import StudySpec
from ..study.space import is_conditional


def study_frame(study: StudySpec, ostudy, db, tech, runs) -> pd.DataFrame:
    """Every COMPLETE trial, re-evaluated in one batch, as the results DataFrame."""
    from optuna.trial import TrialState
    trials = sorted(ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number)
    required = [k.name for k in study.searched if not is_conditional(k)]
    bad = next(((t.number, k) for t in trials for k in required if k not in t.params), None)
    if bad is not None:
        raise DseError(f"study {study.name!r}: COMPLETE trial {bad[0]} has no value of {bad[1]}, a knob every design "
                       "has: the storage does not hold the trials dse wrote (a damaged journal or database?)")
    n = len(trials)
    if not n:       # none finished yet (stopped during the pre-search): the results' columns, no row
        from .presearch import fill_neutral
        params = fill_neutral(study, [{}])
        designs, metrics = evaluate_study(study, params, 1, db, tech)
        return results_frame(study, designs, metrics, params, trial=np.zeros(1), sampler="", seed=None,
                             datetime_start=[None], datetime_complete=[None]).iloc[:0].reset_index(drop=True)
    params = {k.name: param_column([t.params.get(k.name) for t in trials]) for k in study.searched}
    designs, metrics = evaluate_study(study, params, n, db, tech)
    numbers = np.array([t.number for t in trials], dtype=np.int64)
    starts = [r["first_trial"] for r in runs]
    which = np.searchsorted(np.array(starts), numbers, side="right") - 1
    df = results_frame(study, designs, metrics, params, trial=numbers, sampler="", seed=None,
                       datetime_start=[_as_utc(t.datetime_start) for t in trials],
                       datetime_complete=[_as_utc(t.datetime_complete) for t in trials])
    sampler = [runs[max(w, 0)]["sampler"] for w in which]
    seed = [runs[max(w, 0)]["seed"] for w in which]
    # shared studies: each worker recorded the trials it told (dse_run:<id>); those win over the
    # runs' first-trial ranges, which interleaving workers make ambiguous
    where = {int(x): i for i, x in enumerate(numbers)}
    for key, rec in ostudy.user_attrs.items():
        if key.startswith(RUN_KEY) and isinstance(rec, dict) and "sampler" in rec and "seed" in rec:
            for lo, hi in rec.get("trials", []):
                for x in range(int(lo), int(hi) + 1):
                    if x in where:
                        sampler[where[x]], seed[where[x]] = rec["sampler"], rec["seed"]
    df["sampler"] = pd.array(sampler, dtype="string")
    df["seed"] = pd.array(seed, dtype="Int64")
    return df


#: the study user attribute of one run (one worker's, + a random id): its sampler, seed, first trial and
#: start, and at its end the trials it told. One key per run: no worker rewrites another's record
#: (older dse kept one list, ``dse_runs``, which workers starting together read and rewrote, losing runs)
RUN_KEY = "dse_run:"


def study_runs(attrs: dict) -> list[dict]:
    """A study's runs in order, each {"sampler", "seed", "first_trial"}: the ``dse_runs`` list of
    older dse and the ``dse_run:<id>`` records, sorted by first trial (then start); a run with
    the sampler and seed of the one before it continues that one (a resume), as ``dse_runs`` had it."""
    rows = []
    for i, rec in enumerate(attrs.get("dse_runs") or []):
        rows.append((rec, (0, i, "")))
    for key, rec in attrs.items():
        if key.startswith(RUN_KEY):
            rows.append((rec, (1, rec.get("started", 0) if isinstance(rec, dict) else 0, key)))
    runs = []
    for rec, order in rows:
        try:
            runs.append(({"sampler": rec["sampler"], "seed": rec["seed"], "first_trial": int(rec["first_trial"])},
                         (int(rec["first_trial"]), order[0], float(order[1]), order[2])))
        except (KeyError, TypeError, ValueError):   # a record of older dse (trials only), or not dse's
            continue
    out: list[dict] = []
    for run, _ in sorted(runs, key=lambda r: r[1]):
        if not out or (out[-1]["sampler"], out[-1]["seed"]) != (run["sampler"], run["seed"]):
            out.append(run)
    return out


def param_column(values: list) -> np.ndarray:
    """Trial parameters as one array; object dtype when an inactive knob left a None."""
    return np.array(values, dtype=object if any(v is None for v in values) else None)


def _as_utc(when: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna's FrozenTrial times are naive local time (optuna.md section 8): make them aware UTC."""
    if when is None:
        return None
    return when.astimezone(datetime.UTC)
