"""Batched ask/tell: claim, ask, evaluate and tell batches of trials until the study holds its total.

One vectorised evaluation serves a whole batch (for NSGA-II/III, one population). Every
trial gets its constraint values (memory fit first, then the study's) before it is told, and
finite objective values even when the design does not fit (Optuna 5 turns NaN into FAIL).
"""

from __future__ import annotations

import random
import time
from collections import Counter

import numpy as np

from ..errors import RuntimeFailure
from ..evaluation.designs import constraint_values, evaluate_study, metric_table
from ..model.columns import BASE_CONSTRAINTS
from ..process.progress import Progress, note
from ..study import StudySpec
from ..study.space import CONTROL_KEYS, active_masks, is_conditional, sampling_order
from .claims import others_asking
from .sampler_setup import distributions
from .trials import param_column
from .workers import fail_stale_trials, number_ranges, worker_process, write_heartbeat

#: objective value given to Optuna where a metric is undefined (the design does not fit);
#: the memory constraint already marks such trials infeasible
PENALTY = 1e18


def ask_design(ostudy, study: StudySpec, dists: dict, memo: dict | None = None):
    """Ask one trial and suggest its active knobs only (a conditional space: a draft-chip knob
    is not sampled when the draft chip is off, dse.study.space); controllers come first.
    Activity depends on the controllers' values only (CONTROL_KEYS): it is computed once per
    combination of them and kept in ``memo`` (one dict per search)."""
    trial = ostudy.ask()
    vals: dict[str, np.ndarray] = {}
    control: tuple = ()
    masks = None
    memo = {} if memo is None else memo
    for k in sampling_order(study):
        if is_conditional(k):
            if masks is None:
                masks = memo.get(control)
                if masks is None:
                    masks = memo[control] = active_masks(study, vals, 1)
            act = masks.get(k.name)
            if act is not None and not act[0]:
                continue
        v = _suggest(trial, k.name, dists[k.name])
        vals[k.name] = np.array([v], dtype=object)
        if k.key in CONTROL_KEYS:
            control, masks = (*control, (k.name, v)), None
    return trial


def _suggest(trial, name: str, d):
    """One suggest call for a distribution of :func:`dse.search.sampler_setup.distributions`."""
    import optuna.distributions as od
    if isinstance(d, od.CategoricalDistribution):
        return trial.suggest_categorical(name, d.choices)
    if isinstance(d, od.IntDistribution):
        return trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
    return trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)


#: the longest pause between two looks at a study whose remaining trials other workers hold (each
#: look reads every trial: 64 workers looking 5 times a second kept 2 cores busy with nothing)
WAIT_POLL_MAX_S = 2.0


def ask_tell_loop(study, ostudy, n_trials, db, tech, stop, progress, label, heartbeat_timeout_s, tally,
                  shared: bool = True, worker_key: str | None = None) -> None:
    """Claim, ask, evaluate and tell batches until the study holds n_trials COMPLETE trials;
    ``tally["told"]`` counts the trials told COMPLETE (kept when interrupted). ``shared``: other
    processes may work on the study (not in memory), so stale trials are failed, trials are
    claimed within the budget and heartbeats written, and the trials this worker holds are
    recorded under ``worker_key`` with its process (dse.search.workers.worker_process); an
    in-memory study has none of that."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState
    dists = distributions(study)
    names = [k.name for k in study.searched]
    memo: dict = {}
    done0 = sum(t.state == TrialState.COMPLETE for t in ostudy.get_trials(deepcopy=False))
    bar = Progress(n_trials, done0, unit="trials", label=label, enabled=progress)
    said_waiting, idle = False, 0
    # this worker's record: its process (where /proc tells) and the trials it holds or may create, with a
    # beat in epoch seconds (dse.search.workers.last_sign_of_life: no reader can place Optuna's naive times)
    me = (worker_process() or {}) if shared and worker_key else None
    holding = False                 # this worker's record names trials it holds or may create
    jitter = random.Random()        # only the timing of the retries: no result depends on it
    seen: dict = {}
    try:
        while not stop.requested:
            every = ostudy.get_trials(deepcopy=False)
            if shared and fail_stale_trials(ostudy, heartbeat_timeout_s, every, label=label, own_key=worker_key,
                                            seen=seen):
                every = ostudy.get_trials(deepcopy=False)
            complete, live, waiting, b = _slots(every, study.batch_size, n_trials)
            if complete >= n_trials:
                break
            prepare = getattr(ostudy.sampler, "prepare", None)       # dse.search.breeder: new designs only
            if b > waiting and prepare is not None:
                b = min(b, waiting + prepare(ostudy, b - waiting))
                if b <= 0 and not live:
                    if progress:
                        note(f"[{label}] no design the study does not hold is left to propose: stopping "
                             f"at {complete} trials")
                    break
            if b > 0 and me is not None:    # about to ask: trials numbered from here on may be this worker's
                asking = {"trials": [], "asking": b, "asked_at": time.time(),
                          "asking_from": max((t.number for t in every), default=-1) + 1}
                ostudy.set_user_attr(worker_key, {**me, **asking, "beat": time.time()})
                holding = True
                # what the others announced counts as taken: workers racing for the last trials never
                # create more than the total (dse.search.claims)
                taken = others_asking(ostudy.user_attrs, worker_key, time.time(), heartbeat_timeout_s)
                every = ostudy.get_trials(deepcopy=False)
                complete, live, _, fresh = _slots(every, study.batch_size, n_trials, taken)
                b = min(b, fresh) if complete < n_trials else 0
                if b <= 0:
                    ostudy.set_user_attr(worker_key, {**me, "trials": []})
                    holding = False
            if b <= 0:             # the rest is in other workers' hands: wait for them (or their timeout)
                if not said_waiting and live:   # said under --quiet too: a wait of a minute is not progress
                    note(f"[{label}] waiting for {live} trials RUNNING in other workers (failed as stale after "
                         f"{heartbeat_timeout_s:g} s without a heartbeat, or at once when their worker on this "
                         "machine has exited)")
                    said_waiting = True
                # each look reads every trial: back off (jittered: workers that stepped back together part)
                time.sleep(min(WAIT_POLL_MAX_S, 0.2 * 1.5 ** idle) * jitter.uniform(0.75, 1.25))
                idle += 1
                continue
            idle = 0
            trials = []
            beat_every = min(10.0, heartbeat_timeout_s / 3) if shared else float("inf")
            try:
                last_beat = time.monotonic()
                for _ in range(b):
                    try:
                        trials.append(ask_design(ostudy, study, dists, memo))
                    except UpdateFinishedTrialError:    # failed as stale elsewhere while being asked: done
                        continue
                    if time.monotonic() - last_beat > beat_every:    # a slow database: keep them alive
                        write_heartbeat(trials)
                        if me is not None:
                            ostudy.set_user_attr(worker_key, {**me, **asking, "beat": time.time()})
                        last_beat = time.monotonic()
                if shared:
                    trials = _within_budget(ostudy, trials, n_trials)
                if me is not None:       # which process holds them: stale at once if it dies
                    ostudy.set_user_attr(worker_key, {**me, "trials": number_ranges(t.number for t in trials),
                                                      "beat": time.time()})
                    holding = bool(trials)
                if not trials:
                    continue
                b = len(trials)
                rows = [t.params for t in trials]          # Trial.params deep-copies: once per trial
                params = {nm: param_column([r.get(nm) for r in rows]) for nm in names}
                designs, metrics = evaluate_study(study, params, b, db, tech)
                cols = metric_table(designs, metrics)
                cons = constraint_values(cols, study)
                values = _finite_objectives(cols, study)
            except KeyboardInterrupt:
                for t in trials:
                    _fail(ostudy, t)
                raise
            told = _tell_all(ostudy, trials, cons, values, study, beat_every_s=beat_every)
            tally["told"] += len(told)
            tally.setdefault("numbers", []).extend(told)
            bar.update(b)
    finally:
        bar.close()
        if me is not None and (tally.get("numbers") or holding):
            try:
                ostudy.set_user_attr(worker_key, {**me, "trials": []})
            except Exception:   # noqa: BLE001 - a record of nothing held; the storage may be gone
                pass


def _slots(trials, batch: int, n_trials: int, taken: int = 0) -> tuple[int, int, int, int]:
    """(COMPLETE, RUNNING + WAITING, WAITING, trials to ask now): at most ``batch``, and no more than
    the total leaves once the COMPLETE and RUNNING trials and ``taken`` (announced by other workers)
    are counted; the WAITING ones all, when they exceed that (enqueued before: asked, not created)."""
    from optuna.trial import TrialState
    states = Counter(t.state for t in trials)
    complete, running, waiting = states[TrialState.COMPLETE], states[TrialState.RUNNING], states[TrialState.WAITING]
    return complete, running + waiting, waiting, min(batch, max(max(n_trials - complete - running, waiting) - taken, 0))


def _within_budget(ostudy, trials: list, n_trials: int) -> list:
    """Keep the asked trials among the first n_trials live ones (COMPLETE, RUNNING, WAITING, by
    trial number); fail the others at once. Trial numbers come from the storage, so workers
    racing for the last slots agree, and the study ends with exactly n_trials COMPLETE."""
    from optuna.trial import TrialState
    counted = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
    live = sorted(t.number for t in ostudy.get_trials(deepcopy=False, states=counted))
    allowed = set(live[:n_trials])
    keep = [t for t in trials if t.number in allowed]
    for t in trials:
        if t.number not in allowed:
            _fail(ostudy, t)
    return keep


def _fail(ostudy, trial) -> None:
    """Tell FAIL, unless another worker already finished the trial (failed it as stale): that is
    done, not an error."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState
    try:
        ostudy.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    except UpdateFinishedTrialError:
        pass


def _tell_all(ostudy, trials, cons, values, study, beat_every_s: float = 10.0) -> list[int]:
    """Tell every evaluated trial even if interrupted half-way (a second Ctrl-C); on a slow
    database, refresh the heartbeat of the trials still to tell every ``beat_every_s``. A trial
    another worker already failed as stale (its design was enqueued again) is skipped: done
    elsewhere, not an error. Returns the numbers of the trials told COMPLETE.

    Storage calls per trial: one write per constraint (Optuna 5 has no call that sets several)
    and one for the state and values; no read before them (``set_so_far`` resumes a trial whose
    constraints were being set when Ctrl-C came, so none is set twice)."""
    from optuna.exceptions import UpdateFinishedTrialError
    names = constraint_names(study)
    cons, values = np.asarray(cons, dtype=np.float64).tolist(), np.asarray(values, dtype=np.float64).tolist()
    if cons and len(cons[0]) != len(names):
        raise RuntimeFailure(f"{len(cons[0])} constraint values per trial for {len(names)} constraints {names}")
    set_so_far = [0] * len(trials)
    pending = list(range(len(trials)))
    last = time.monotonic()
    told: list[int] = []

    def tell(i):
        try:
            for j in range(set_so_far[i], len(names)):
                _set_constraint(trials[i], names[j], cons[i][j])
                set_so_far[i] = j + 1
            if _tell_values(ostudy, trials[i], values[i]):
                told.append(trials[i].number)
        except UpdateFinishedTrialError:
            pass
    try:
        while pending:
            if time.monotonic() - last > beat_every_s:
                write_heartbeat([trials[j] for j in pending])
                last = time.monotonic()
            tell(pending[0])
            pending.pop(0)
    except KeyboardInterrupt:       # evaluated already: tell the rest, keep them all
        for i in pending:
            tell(i)
        raise
    return told


def _set_constraint(trial, name: str, value: float) -> None:
    """``trial.set_constraint(name, value)`` without its read: Optuna reads the trial's system
    attributes before each write to warn about a key set twice (a query per constraint on a
    database); dse sets each key once, so only the write is made, under Optuna's key
    (``constraints:NAME``, read back as FrozenTrial.constraints). A NaN goes to Optuna, which
    rejects it."""
    try:
        from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
    except ImportError:             # another Optuna: the public call
        _CONSTRAINTS_KEY = None
    if _CONSTRAINTS_KEY is None or value != value:
        trial.set_constraint(name, value)
        return
    trial.storage.set_trial_system_attr(trial._trial_id, f"{_CONSTRAINTS_KEY}:{name}", float(value))


def _tell_values(ostudy, trial, values: list[float]) -> bool:
    """``ostudy.tell(trial, values, skip_if_finished=True)`` without its return value: Study.tell
    deep-copies the finished trial to return it (a tenth of an in-memory run's Optuna time); this
    calls the function Study.tell calls, with the same arguments, when Optuna has it. A trial
    another worker has failed meanwhile is skipped. True when the trial was told COMPLETE."""
    from optuna.trial import TrialState
    try:
        from optuna.study._tell import _tell_with_warning
    except ImportError:             # another Optuna: the public call
        return ostudy.tell(trial, values, skip_if_finished=True).state == TrialState.COMPLETE
    state = _tell_with_warning(study=ostudy, trial=trial, value_or_values=values, state=None, skip_if_finished=True)[0]
    return state == TrialState.COMPLETE


def constraint_names(study: StudySpec) -> tuple[str, ...]:
    """The constraints told with every trial (a trial without them counts as feasible): memory
    fit and buildability first, then the study's, in the order of constraint_values' columns."""
    return BASE_CONSTRAINTS + tuple(c.metric for c in study.constraints)


def _finite_objectives(cols, study) -> np.ndarray:
    vals = []
    for o in study.objectives:
        v = np.asarray(cols[o.metric], dtype=np.float64)
        bad = PENALTY if o.direction == "minimize" else -PENALTY
        vals.append(np.where(np.isfinite(v), v, bad))
    return np.stack(vals, axis=1)
