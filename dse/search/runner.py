"""Optuna multi-objective search over a study's knobs, with batched ask/tell.

One vectorised evaluation serves a whole batch (for NSGA-II/III, one population). Every
trial gets its constraint values (memory fit first, then the study's) before it is told, and
finite objective values even when the design does not fit (Optuna 5 turns NaN into FAIL).
The sampler and its seed are always explicit and recorded. Re-running resumes: n_trials is
the study's total. The Parquet file is rebuilt from every COMPLETE trial by re-evaluating
their parameters (the model is deterministic), so it always matches the storage.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..catalog.database import Database
from ..catalog.fields import Range
from ..errors import DseError, RuntimeFailure, SpecError, install_hint
from ..evaluation.designs import constraint_values, evaluate_study, metric_table
from ..model.columns import BASE_CONSTRAINTS
from ..process.interrupt import stop_on_signals
from ..process.progress import Progress, note
from ..results.frame import results_frame
from ..results.guard import check_replace, check_writable
from ..results.identity import describe, identity_of
from ..results.manifest import check_manifest, dataset_manifest, write_manifest
from ..results.store import study_metadata, write_parquet
from ..storage.backends import redact_url, resolve_storage
from ..study import SAMPLERS, StudySpec, open_study
from ..study.space import CONTROL_KEYS, active_masks, is_conditional, sampling_order

#: objective value given to Optuna where a metric is undefined (the design does not fit);
#: the memory constraint already marks such trials infeasible
PENALTY = 1e18


@dataclass
class RunResult:
    frame: pd.DataFrame
    path: Path
    n_new: int
    storage: str
    #: the signal that stopped the run (signal.SIGTERM, signal.SIGINT), 0 when it finished
    interrupted: int = 0


def distributions(study: StudySpec) -> dict:
    import optuna.distributions as od
    out = {}
    for k in study.searched:
        if k.choices:
            out[k.name] = od.CategoricalDistribution(list(k.choices))
        elif k.kind == "int":
            out[k.name] = od.IntDistribution(int(k.low), int(k.high), log=k.log, step=int(k.step or 1))
        else:
            out[k.name] = od.FloatDistribution(k.low, k.high, log=k.log, step=k.step)
    return out


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
    """One suggest call for a distribution of :func:`distributions`."""
    import optuna.distributions as od
    if isinstance(d, od.CategoricalDistribution):
        return trial.suggest_categorical(name, d.choices)
    if isinstance(d, od.IntDistribution):
        return trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
    return trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)


def make_sampler(name: str, seed: int, population: int, n_objectives: int, *, study: StudySpec | None = None,
                 db=None, tech=None, n_trials: int | None = None, progress: bool = False, label: str = "dse run"):
    """The sampler, always with its seed (Optuna 5's default multi-objective sampler is TPE).
    NSGA-III and QMC are marked experimental by Optuna; that warning is silenced here. ``auto``
    (dse.search.breeder.BreederSampler) needs the study, database, technology and trial budget."""
    import optuna
    if name == "auto":
        if study is None:
            raise RuntimeFailure("sampler auto needs the study (make_sampler(..., study=, db=, tech=, n_trials=))")
        from .breeder import BreederSampler
        return BreederSampler(study, db, tech, seed=seed, batch=population, n_trials=n_trials or study.n_trials,
                              presearch_s=study.presearch_s, progress=progress, label=label)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = _sampler(name, seed, population)
    quiet_conditional_space(sampler)
    return sampler


class _ConditionalSpaceFilter(logging.Filter):
    """Drops the warnings an Optuna sampler logs because the search space is conditional (it is on
    purpose, dse.study.space: QMC and GP sample a conditional knob on its own), told apart by the
    function that logs them, not by their text (Optuna 5 changed the text and a text filter let
    475 lines through for 300 QMC trials). Every other record passes."""

    FUNCS = frozenset({"infer_relative_search_space", "_log_independent_sampling"})

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and record.funcName in self.FUNCS)


def quiet_conditional_space(sampler) -> None:
    """Attach _ConditionalSpaceFilter to the logger of the sampler's module (and of its bases'),
    once. Samplers that take ``warn_independent_sampling=False`` get it too (see _sampler)."""
    for cls in type(sampler).__mro__:
        if cls.__module__.startswith("optuna."):
            log = logging.getLogger(cls.__module__)
            if not any(isinstance(f, _ConditionalSpaceFilter) for f in log.filters):
                log.addFilter(_ConditionalSpaceFilter())


def _sampler(name: str, seed: int, population: int):
    """NSGA-II/III are Optuna's, memoised per generation (dse.search.samplers: the same choices for
    the same seed, without the O(n) scans per ask)."""
    import optuna

    from .samplers import MemoNSGAIIISampler, MemoNSGAIISampler
    if name == "nsga2":
        return MemoNSGAIISampler(population_size=population, seed=seed)
    if name == "nsga3":
        return MemoNSGAIIISampler(population_size=population, seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":       # the space is conditional on purpose: no warning per conditional knob and trial
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed, warn_independent_sampling=False)
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise SpecError(None, "sampler", "gp", f"needs PyTorch: {install_hint('gp')} (or pick nsga2, tpe, ...)") from None
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    raise SpecError(None, "sampler", name, f"expected one of {', '.join(SAMPLERS)}")


def worker_index() -> int:
    """This process's index among the workers of a shared study: DSE_WORKER if set, else the
    SLURM task's place, SLURM_ARRAY_TASK_ID x SLURM_NTASKS + SLURM_PROCID (0 outside SLURM).
    Worker i > 0 samples with derive_seed(seed, i)."""
    def num(name: str, default: int) -> int:
        text = os.environ.get(name, "").strip()
        return int(text) if text.isdigit() else default
    if os.environ.get("DSE_WORKER", "").strip().isdigit():
        return num("DSE_WORKER", 0)
    return num("SLURM_ARRAY_TASK_ID", 0) * num("SLURM_NTASKS", 1) + num("SLURM_PROCID", 0)


def number_ranges(numbers) -> list[list[int]]:
    """Trial numbers as sorted inclusive [first, last] runs: [0, 1, 2, 5] -> [[0, 2], [5, 5]]."""
    out: list[list[int]] = []
    for x in sorted(set(int(v) for v in numbers)):
        if out and x == out[-1][1] + 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return out


def derive_seed(seed: int, task: int) -> int:
    """The sampler seed of array task ``task``: numpy's SeedSequence([seed, task]), first
    32-bit word (independent streams per task, the same on every machine)."""
    return int(np.random.SeedSequence([int(seed), int(task)]).generate_state(1)[0])


def parse_task(text: str | None) -> tuple[int, int] | str | None:
    """'I/N', 'all/N' -> (I, N) or ('all', N); 'auto' -> SLURM_ARRAY_TASK_ID/COUNT; None."""
    if text is None:
        return None
    text = str(text).strip()
    if text == "auto":
        from ..process.slurm import shard_from_env
        env = shard_from_env()
        if env is None:
            raise SpecError(None, "--task", text, "auto needs SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT "
                            "(run inside a job array, or give I/N)")
        text = f"{env[0]}/{env[1]}"
    head, _, tail = text.partition("/")
    try:
        n = int(tail)
        i = head if head == "all" else int(head)
    except ValueError:
        raise SpecError(None, "--task", text, "expected I/N with integers 0 <= I < N, all/N or auto") from None
    if n < 1 or (i != "all" and not 0 <= i < n):
        raise SpecError(None, "--task", text, "expected I/N with integers 0 <= I < N, all/N or auto")
    return i, n


def task_part_name(i: int, n: int) -> str:
    return f"task-{i:05d}-of-{n:05d}.parquet"


def run_tasks(study: StudySpec | str | Path, tasks: int, *, which: list[int] | None = None,
              out: str | Path | None = None, n_trials: int | None = None, sampler: str | None = None,
              seed: int | None = None, progress: bool = True, db: Database | None = None,
              only_missing: bool = False, force: bool = False) -> list[RunResult]:
    """Independent array tasks: task I runs its own in-memory study of ``n_trials`` trials with
    seed derive_seed(seed, I) and writes DIR/task-I-of-N.parquet atomically (a re-run replaces
    it). Trial numbers are I x n_trials + the task's own trial number, unique in the dataset.
    ``only_missing`` skips tasks whose part is on disk. Stops after the task in flight on
    SIGTERM/SIGINT (the result of that task says so and its part is not written)."""
    study, db, tech = open_study(study, db)
    which = list(range(tasks)) if which is None else which
    results = []
    for i in which:
        out_dir = dataset_dir(study, out)
        if only_missing and (out_dir / task_part_name(i, tasks)).exists():
            continue
        res = run_study(study, n_trials=n_trials, sampler=sampler, seed=seed, out=out, progress=progress,
                        db=db, task=(i, tasks), force=force)
        force = False           # the first task has cleared what belonged to another dataset
        results.append(res)
        if res.interrupted:
            break
    return results


def _task_dataset(study: StudySpec, base_meta: dict, tasks: int, out, n_trials: int, sampler: str, seed: int,
                  force: bool) -> tuple[Path, dict]:
    """The array tasks' dataset directory and manifest, checked before any search: writable, and
    holding no other dataset (refused naming what differs, or cleared with ``force``)."""
    out_dir = dataset_dir(study, out)
    check_writable(out_dir, "--out", directory=True)
    manifest = dataset_manifest("tasks", base_meta, tasks=tasks, trials_per_task=n_trials, sampler=sampler,
                                seed=seed, parts=[task_part_name(i, tasks) for i in range(tasks)])
    check_manifest(out_dir, manifest, force=force,
                   keep=lambda m, rows: (m.get("task") or [0, 0])[1] == tasks and rows == n_trials)
    return out_dir, manifest


def prepare_tasks(study: StudySpec | str | Path, tasks: int, *, out=None, n_trials: int | None = None,
                  sampler: str | None = None, seed: int | None = None, force: bool = False,
                  db: Database | None = None) -> Path:
    """What every array task checks first, done once (dse.campaign.on_dask before it submits the tasks
    as Dask tasks); returns the dataset directory."""
    study, db, tech = open_study(study, db)
    n_trials = study.n_trials if n_trials is None else n_trials
    Range(True, 1, 10_000_000).check(n_trials, None, "--n-trials")
    seed = study.seed if seed is None else seed
    return _task_dataset(study, study_metadata(study, db, tech), tasks, out, n_trials, sampler or study.sampler,
                         seed, force)[0]


def dataset_dir(study: StudySpec, out: str | Path | None) -> Path:
    """--out, or the study's output path without its suffix."""
    return Path(out) if out else Path(study.output).with_suffix("")


def run_study(study: StudySpec | str | Path, *, n_trials: int | None = None, sampler: str | None = None,
              seed: int | None = None, storage: str | None = None, out: str | Path | None = None,
              progress: bool = True, db: Database | None = None, task: tuple[int, int] | None = None,
              heartbeat_timeout_s: float = 60.0, write: bool = True, force: bool = False) -> RunResult:
    """Create or resume the Optuna study, run it to ``n_trials`` in total, write Parquet.

    Shared storages: workers claim trials so that the study ends with exactly ``n_trials``
    COMPLETE (a trial asked beyond the total is failed at once); a RUNNING trial whose worker
    gave no sign of life (start or ``dse_heartbeat`` user attribute) for ``heartbeat_timeout_s``,
    or whose worker on this machine has exited, is failed and its parameters enqueued again.
    ``task=(I, N)``: one independent array task (see :func:`run_tasks`). ``write=False`` (a worker
    of a shared study) writes no Parquet: the study is read back once, by ``dse export``, instead
    of by every worker.

    Before any work the output is checked: it must be writable, and a results file there that
    holds another study or more finished trials than this run will write is refused unless
    ``force`` (dse.results.guard); a stored study run with another workload or space is refused
    naming the changed keys, or with ``force`` deleted and started again."""
    import optuna
    study, db, tech = open_study(study, db)
    n_trials = study.n_trials if n_trials is None else n_trials
    Range(True, 1, 10_000_000).check(n_trials, None, "--n-trials")
    sampler_name = sampler or study.sampler
    seed = study.seed if seed is None else seed
    if not Range(True, 0, 2**32 - 1).contains(seed):
        raise SpecError(None, "--seed", seed, Range(True, 0, 2**32 - 1).text())
    offset = 0
    manifest = None
    base_meta = study_metadata(study, db, tech)         # what the results will be (their fingerprint)
    if task is not None:
        ti, tn = task
        if storage not in (None, ":memory:"):
            raise SpecError(None, "--storage", redact_url(storage), "array tasks (--task) each run an in-memory "
                            "study; give --storage for one shared study instead of --task")
        out_dir, manifest = _task_dataset(study, base_meta, tn, out, n_trials, sampler_name, seed, force)
        seed = derive_seed(seed, ti)
        storage, out, offset = ":memory:", out_dir / task_part_name(ti, tn), ti * n_trials
    else:
        worker = worker_index()
        if worker and (storage if storage is not None else study.storage) != ":memory:":
            seed = derive_seed(seed, worker)       # workers of one shared study must not propose alike
    out = Path(out or study.output)
    if out.is_dir():
        raise SpecError(None, "--out", str(out), "is a directory; expected a Parquet file path (or give --task)")
    if write:
        check_writable(out, "--out")                # before the search: an unwritable path costs no work
    if task is None and write:
        check_replace(out, base_meta, None, force=force)           # another study's results: refused now
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = [o.direction for o in study.objectives]
    # every option is checked before the storage (a journal file) is created
    label = f"dse run task {task[0]}/{task[1]}" if task else "dse run"
    opt_sampler = make_sampler(sampler_name, seed, study.batch_size, len(directions), study=study, db=db, tech=tech,
                               n_trials=n_trials, progress=progress, label=label)
    store, storage_url = resolve_storage(study, storage, out)
    ostudy = _create_study(study, store, storage_url, directions, opt_sampler, force=force)
    runs = list(ostudy.user_attrs.get("dse_runs", []))
    first = len(ostudy.get_trials(deepcopy=False))
    if task is None and write:  # the file will hold every COMPLETE trial: at least n_trials, or what the storage has
        from optuna.trial import TrialState
        done = sum(t.state == TrialState.COMPLETE for t in ostudy.get_trials(deepcopy=False))
        check_replace(out, base_meta, max(n_trials, done), force=force)
    if not runs or runs[-1]["sampler"] != sampler_name or runs[-1]["seed"] != seed:
        runs.append({"sampler": sampler_name, "seed": seed, "first_trial": first})
        ostudy.set_user_attr("dse_runs", runs)
    run_id = uuid.uuid4().hex[:16]
    run_key = f"dse_run:{run_id}"      # this worker's own record: no read-modify-write race
    if sampler_name == "auto" and first == 0:
        enqueue_seeds(ostudy, study, n_trials, seed, db, tech, sampler=opt_sampler, progress=progress, label=label)
    tally, signum = {"told": 0}, 0
    with stop_on_signals() as stop:
        try:
            _search_loop(study, ostudy, n_trials, db, tech, stop, progress, label, heartbeat_timeout_s, tally,
                         shared=storage_url != ":memory:", worker_key=f"{WORKER_KEY}{run_id}")
        except KeyboardInterrupt:
            signum = stop.signum or signal.SIGINT
        signum = signum or stop.signum
    told = tally["told"]
    if storage_url != ":memory:" and tally.get("numbers"):
        ostudy.set_user_attr(run_key, {"sampler": sampler_name, "seed": seed,
                                       "trials": number_ranges(tally["numbers"])})
    if (task is not None and signum) or not write:
        # a task's part holds all of its trials or is not written (a re-run replaces it)
        return RunResult(frame=pd.DataFrame(), path=out, n_new=told, storage=storage_url, interrupted=signum)
    df = study_frame(study, ostudy, db, tech, runs)
    if offset:
        df["trial"] = df["trial"] + offset
    extra = {"task": list(task)} if task else {}
    meta = study_metadata(study, db, tech, sampler=sampler_name, seed=seed, storage=redact_url(storage_url), runs=runs,
                          **extra)
    if manifest is not None:
        write_manifest(out.parent, manifest)
    write_parquet(df, out, meta)
    return RunResult(frame=df, path=out, n_new=told, storage=storage_url, interrupted=signum)


def _create_study(study: StudySpec, store, storage_url: str, directions: list[str], opt_sampler,
                  force: bool = False):
    """Create (once, even when many workers start together) or load the Optuna study and check
    it is this study: same directions and space fingerprint (a difference is refused naming the
    changed keys; with ``force`` the stored study is deleted and created again); record the
    resolved study."""
    import optuna
    ostudy = _open_study(study, store, directions, opt_sampler)
    why = _stored_difference(study, ostudy, directions)
    if why is not None and force:
        n = len(ostudy.get_trials(deepcopy=False))
        optuna.delete_study(study_name=study.name, storage=store)
        note(f"note: --force: deleted study {study.name!r} ({n} trials) from {redact_url(storage_url)}: it was run "
             f"with {why}; a new study starts")
        ostudy = _open_study(study, store, directions, opt_sampler)
        why = _stored_difference(study, ostudy, directions)
    if why is not None:
        raise DseError(f"{redact_url(storage_url)}: study {study.name!r} was run with {why}; resuming would mix "
                       "designs. Rename the study, give another --storage / --out, or --force to delete the stored "
                       "study and start again")
    attrs = ostudy.user_attrs
    if "dse_space" not in attrs:
        ostudy.set_user_attr("dse_space", space_fingerprint(study))
    if "dse_study" not in attrs:
        ostudy.set_user_attr("dse_study", json.loads(json.dumps(study.resolved(), default=str)))
    return ostudy


def _stored_identity(resolved) -> dict:
    """The part of a study's identity a stored Optuna study must share with the study file: its
    workload, space, objectives, constraints and technology overrides (the model may differ:
    the Parquet file re-evaluates every trial)."""
    ident = identity_of({"study": resolved if isinstance(resolved, dict) else {}})
    return {k: ident[k] for k in ("workload", "space", "objectives", "constraints")} | {
        "technology": ident["technology"]["overrides"]}


def _stored_difference(study: StudySpec, ostudy, directions: list[str]) -> str | None:
    """What differs between the stored study and this one ('directions [...] -> [...]' or the
    changed keys), None when it is this study."""
    stored_dirs = [d.name.lower() for d in ostudy.directions]
    if stored_dirs != directions:
        return f"other directions ({stored_dirs} -> {directions})"
    attrs = ostudy.user_attrs
    stored = attrs.get("dse_space")
    if stored is None or stored == space_fingerprint(study):
        return None
    was = attrs.get("dse_study")
    if not isinstance(was, dict):
        return f"another workload or space (fingerprint {stored}, this file gives {space_fingerprint(study)})"
    return "another workload or space: " + describe(_stored_identity(was), _stored_identity(study.resolved()))


def _open_study(study: StudySpec, store, directions: list[str], opt_sampler):
    """optuna.create_study(load_if_exists=True), retried while other workers create it."""
    import optuna
    for attempt in range(5):
        try:
            ostudy = optuna.create_study(study_name=study.name, storage=store, directions=directions,
                                         sampler=opt_sampler, load_if_exists=True)
            break
        except optuna.exceptions.DuplicatedStudyError:
            time.sleep(0.1 * 2 ** attempt)
        except Exception as exc:
            if type(exc).__name__ not in ("IntegrityError", "OperationalError") or attempt == 4:
                raise
            time.sleep(0.1 * 2 ** attempt)
    return ostudy


#: the longest pause between two looks at a study whose remaining trials other workers hold (each
#: look reads every trial: 64 workers looking 5 times a second kept 2 cores busy with nothing)
WAIT_POLL_MAX_S = 2.0


def _search_loop(study, ostudy, n_trials, db, tech, stop, progress, label, heartbeat_timeout_s, tally,
                 shared: bool = True, worker_key: str | None = None) -> None:
    """Claim, ask, evaluate and tell batches until the study holds n_trials COMPLETE trials;
    ``tally["told"]`` counts the trials told COMPLETE (kept when interrupted). ``shared``: other
    processes may work on the study (not in memory), so stale trials are failed, trials are
    claimed within the budget and heartbeats written, and the trials this worker holds are
    recorded under ``worker_key`` with its process (:func:`worker_process`); an in-memory study
    has none of that."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState
    dists = distributions(study)
    names = [k.name for k in study.searched]
    memo: dict = {}
    done0 = sum(t.state == TrialState.COMPLETE for t in ostudy.get_trials(deepcopy=False))
    bar = Progress(n_trials, done0, unit="trials", label=label, enabled=progress)
    said_waiting, idle = False, 0
    me = worker_process() if shared and worker_key else None
    try:
        while not stop.requested:
            every = ostudy.get_trials(deepcopy=False)
            if shared and fail_stale_trials(ostudy, heartbeat_timeout_s, every, label=label, own_key=worker_key):
                every = ostudy.get_trials(deepcopy=False)
            states = Counter(t.state for t in every)
            complete = states[TrialState.COMPLETE]
            if complete >= n_trials:
                break
            live = states[TrialState.RUNNING] + states[TrialState.WAITING]
            waiting = states[TrialState.WAITING]
            b = min(study.batch_size, max(n_trials - complete - live, 0) + waiting)
            prepare = getattr(ostudy.sampler, "prepare", None)       # dse.search.breeder: new designs only
            if b > waiting and prepare is not None:
                b = min(b, waiting + prepare(ostudy, b - waiting))
                if b <= 0 and not live:
                    if progress:
                        note(f"[{label}] no design the study does not hold is left to propose: stopping "
                             f"at {complete} trials")
                    break
            if b <= 0:             # the rest is in other workers' hands: wait for them (or their timeout)
                if not said_waiting:        # said under --quiet too: a wait of a minute is not progress
                    note(f"[{label}] waiting for {live} trials RUNNING in other workers (failed as stale after "
                         f"{heartbeat_timeout_s:g} s without a heartbeat, or at once when their worker on this "
                         "machine has exited)")
                    said_waiting = True
                time.sleep(min(WAIT_POLL_MAX_S, 0.2 * 1.5 ** idle))  # each look reads every trial: back off
                idle += 1
                continue
            idle = 0
            trials = []
            beat_every = min(10.0, heartbeat_timeout_s / 3) if shared else float("inf")
            if me is not None:              # about to ask: trials numbered from here on may be this worker's
                ostudy.set_user_attr(worker_key, {**me, "trials": [],
                                                  "asking_from": max((t.number for t in every), default=-1) + 1})
            try:
                last_beat = time.monotonic()
                for _ in range(b):
                    try:
                        trials.append(ask_design(ostudy, study, dists, memo))
                    except UpdateFinishedTrialError:    # failed as stale elsewhere while being asked: done
                        continue
                    if time.monotonic() - last_beat > beat_every:    # a slow database: keep them alive
                        _beat(trials)
                        last_beat = time.monotonic()
                if shared:
                    trials = _within_budget(ostudy, trials, n_trials)
                if me is not None and trials:       # which process holds them: stale at once if it dies
                    ostudy.set_user_attr(worker_key, {**me, "trials": number_ranges(t.number for t in trials)})
                if not trials:
                    continue
                b = len(trials)
                rows = [t.params for t in trials]          # Trial.params deep-copies: once per trial
                params = {nm: _column([r.get(nm) for r in rows]) for nm in names}
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
        if me is not None and tally.get("numbers"):
            try:
                ostudy.set_user_attr(worker_key, {**me, "trials": []})
            except Exception:   # noqa: BLE001 - a record of nothing held; the storage may be gone
                pass


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


def _beat(trials) -> None:
    """Set ``dse_heartbeat`` (epoch seconds) on trials this worker still holds."""
    from optuna.exceptions import UpdateFinishedTrialError
    now = time.time()
    for t in trials:
        try:
            t.set_user_attr("dse_heartbeat", now)
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
                _beat([trials[j] for j in pending])
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


def seed_count(n_trials: int, batch_size: int) -> int:
    """Seeds of sampler auto: half the trials (at least one batch, at most 256 designs)."""
    return int(min(256, max(min(batch_size, n_trials), n_trials // 2)))


def find_seeds(study: StudySpec, n_trials: int, seed: int, db, tech, *, progress: bool = False,
               label: str = "dse run"):
    """The seeds of sampler auto for a budget: dse.search.presearch with the budget of
    dse.search.presearch.presearch_budget (it grows with the space and the trials, up to 1,000) and the
    study's time cap (search.presearch_s); progress on stderr when ``progress``."""
    from .presearch import presearch, presearch_budget
    keep = seed_count(n_trials, study.batch_size)
    budget = presearch_budget(study, n_trials, keep, study.presearch_s)
    bar = Progress(budget.designs, unit="designs", label=f"{label} pre-search", enabled=progress)
    try:
        seeds = presearch(study, db, tech, seed=seed, keep=keep, budget=budget, progress=bar)
    finally:
        bar.close()
    if seeds.timed_out and progress:
        note(f"[{label}] pre-search stopped by its time cap (search.presearch_s = {study.presearch_s:g} s) "
             f"after {seeds.evaluated:,} of {budget.designs:,} designs (reference CPU seconds counted from the "
             "model's work: the same designs on any machine; a larger presearch_s searches more)")
    return seeds


def enqueue_seeds(ostudy, study: StudySpec, n_trials: int, seed: int, db, tech, *, sampler=None,
                  progress: bool = False, label: str = "dse run") -> int:
    """Sampler auto: a front found in numpy (dse.search.presearch) enqueued as the study's first trials.
    They are asked, evaluated and told like any trial, so every seed is in the storage and the
    Parquet file; ``sampler`` (dse.search.breeder.BreederSampler) keeps breeding from the archive they
    were thinned from."""
    seeds = find_seeds(study, n_trials, seed, db, tech, progress=progress, label=label)
    from .breeder import design_ids, rows_to_arrays
    held = [t.params or t.system_attrs.get("fixed_params") or {} for t in ostudy.get_trials(deepcopy=False)]
    held_ids = set(design_ids(study, rows_to_arrays(study, held), len(held)).tolist()) if held else set()
    ids = design_ids(study, rows_to_arrays(study, seeds.params), len(seeds.params)).tolist() if seeds.params else []
    for p, i in zip(seeds.params, ids):     # two workers that start together enqueue the seeds once
        if i not in held_ids:
            ostudy.enqueue_trial(p, skip_if_exists=False)
    if sampler is not None and hasattr(sampler, "adopt"):
        sampler.adopt(seeds.pool, seeds.breeding_budget())
    ostudy.set_user_attr("dse_seeds", {"designs": len(seeds.params), "evaluated_in_numpy": seeds.evaluated,
                                       "seconds": round(seeds.seconds, 3), "stopped_by_time_cap": seeds.timed_out})
    return len(seeds.params)


def space_fingerprint(study: StudySpec) -> str:
    """Hash of what makes trials comparable: workload, knobs, objectives, constraints and
    technology overrides (not the search budget, sampler or output)."""
    import hashlib
    import json
    r = study.resolved()
    key = {k: r[k] for k in ("workload", "knobs", "objectives", "constraints", "technology")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def last_sign_of_life(trial) -> float:
    """Epoch seconds of a trial's last heartbeat: its ``dse_heartbeat`` user attribute, else
    its start (Optuna stores naive local times)."""
    beat = trial.user_attrs.get("dse_heartbeat")
    start = trial.datetime_start.timestamp() if trial.datetime_start is not None else 0.0
    return max(float(beat), start) if beat is not None else start


#: the study user attribute (one per worker run, + its id) naming the worker process and the trials it holds
WORKER_KEY = "dse_worker:"


def _start_ticks(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process ``pid`` from /proc, None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _machine() -> str | None:
    """This machine and process namespace: hostname, kernel boot id and PID-namespace inode (two
    containers with one hostname are not one machine); None where they cannot be read."""
    import socket
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{socket.gethostname()}/{boot}/{ns}"


def worker_process() -> dict | None:
    """This worker's machine, PID and process start time, recorded with the trials it holds so
    that a worker on the same machine can tell when it has exited; None off Linux."""
    machine, me = _machine(), _start_ticks(os.getpid())
    return None if machine is None or me is None else {"machine": machine, "pid": os.getpid(), "start": me[1]}


def process_exited(record: dict) -> bool:
    """True when ``record`` (:func:`worker_process`) names a process on this machine that has
    exited: no such PID, a zombie, or the PID reused by a process started later."""
    if not isinstance(record, dict) or record.get("machine") != _machine():
        return False
    try:
        pid = int(record["pid"])
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass                          # another user's process: it exists
    except (KeyError, TypeError, ValueError, OSError):
        return False
    now = _start_ticks(pid)
    return now is not None and (now[0] in ("Z", "X") or now[1] != record.get("start"))


def dead_workers_trials(ostudy, running: list, own_key: str | None = None) -> set[int]:
    """Numbers of the ``running`` trials held by worker processes on this machine that have
    exited: those in their records, and, for one killed while it asked a batch (before it could
    record the batch), every RUNNING trial from the number it started asking at, but only when no
    other worker (here or elsewhere, other than ``own_key``, this one) may be holding or asking
    trials: the resume after a SIGKILL of the only local worker. With other workers active, a
    trial of theirs could not be told from the dead one's; those wait for the heartbeat timeout."""
    held: dict[int, bool] = {}
    asking: list[int] = []
    others_active = False
    for key, rec in ostudy.user_attrs.items():
        if not key.startswith(WORKER_KEY) or key == own_key or not isinstance(rec, dict):
            continue
        dead = process_exited(rec)
        try:
            for lo, hi in rec.get("trials") or []:
                held.update((x, dead) for x in range(int(lo), int(hi) + 1))
            if rec.get("asking_from") is not None and dead:
                asking.append(int(rec["asking_from"]))
        except (TypeError, ValueError):
            continue
        others_active |= not dead and bool(rec.get("trials") or rec.get("asking_from") is not None)
    out = {n for n, dead in held.items() if dead}
    if asking and not others_active:
        out |= {t.number for t in running if t.number >= min(asking) and t.number not in held}
    return out & {t.number for t in running}


def fail_stale_trials(ostudy, timeout_s: float = 60.0, trials=None, now: float | None = None,
                      label: str = "dse run", own_key: str | None = None) -> int:
    """FAIL the RUNNING trials whose worker gave no sign of life for ``timeout_s`` seconds
    (killed: ask/tell runs no heartbeat thread; a batch here takes milliseconds to seconds and
    refreshes ``dse_heartbeat`` while it is told), and at once those whose worker process on this
    machine has exited (:func:`dead_workers_trials`); enqueue their parameters again, so their
    designs are re-asked. Returns how many were failed."""
    from optuna.trial import TrialState
    now = time.time() if now is None else now
    trials = ostudy.get_trials(deepcopy=False) if trials is None else trials
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if not running:
        return 0
    dead = dead_workers_trials(ostudy, running, own_key)
    failed = exited = 0
    for t in running:
        gone = t.number in dead
        if not gone and now - last_sign_of_life(t) <= timeout_s:
            continue
        try:
            ostudy.tell(t.number, state=TrialState.FAIL)
        except Exception:   # noqa: BLE001 - another worker failed or finished it first
            continue
        failed += 1
        exited += gone
        if t.params:
            ostudy.enqueue_trial(t.params, user_attrs={"dse_reasked": t.number})
    if exited:
        note(f"[{label}] {exited} RUNNING trials of a worker on this machine that has exited were failed at once "
             "and their designs asked again")
    return failed


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
    params = {k.name: _column([t.params.get(k.name) for t in trials]) for k in study.searched}
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
        if key.startswith("dse_run:") and isinstance(rec, dict):
            for lo, hi in rec.get("trials", []):
                for x in range(int(lo), int(hi) + 1):
                    if x in where:
                        sampler[where[x]], seed[where[x]] = rec["sampler"], rec["seed"]
    df["sampler"] = pd.array(sampler, dtype="string")
    df["seed"] = pd.array(seed, dtype="Int64")
    return df


def _column(values: list) -> np.ndarray:
    """Trial parameters as one array; object dtype when an inactive knob left a None."""
    return np.array(values, dtype=object if any(v is None for v in values) else None)


def _as_utc(when: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna's FrozenTrial times are naive local time (optuna.md section 8): make them aware UTC."""
    if when is None:
        return None
    return when.astimezone(datetime.UTC)


logging.getLogger("optuna").setLevel(logging.WARNING)
