"""Running a study with Optuna: one study created or resumed in its storage and checked to be this
study (:func:`run_study`), or independent array tasks (:func:`run_tasks`, :func:`prepare_tasks`), and the
Parquet files they write.

The sampler and its seed are always explicit and recorded. Re-running resumes: n_trials is
the study's total. The Parquet file is rebuilt from every COMPLETE trial by re-evaluating
their parameters (the model is deterministic, dse.search.trials), so it always matches the
storage. The batches are asked and told by dse.search.asktell.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..catalog.database import Database
from ..catalog.fields import Range
from ..errors import DseError, SpecError
from ..process.interrupt import stop_on_signals
from ..process.progress import note
from ..results.guard import check_journal_name, check_name_fits, check_replace, check_writable
from ..results.identity import describe, identity_of
from ..results.manifest import check_manifest, dataset_manifest, write_manifest
from ..results.store import study_metadata, write_parquet
from ..storage.backends import journal_path, redact_url, resolve_storage
from ..study import StudySpec, open_study
from .asktell import ask_tell_loop
from .claims import SEED_KEY, SEEDS_ATTR, seed_once, seeding_claims
from .sampler_setup import make_sampler
from .seeds import enqueue_seeds
from .trials import RUN_KEY, study_frame, study_runs
from .workers import WORKER_KEY, number_ranges, worker_index, worker_process


@dataclass
class RunResult:
    frame: pd.DataFrame
    path: Path
    n_new: int
    storage: str
    #: the signal that stopped the run (signal.SIGTERM, signal.SIGINT), 0 when it finished
    interrupted: int = 0


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
    gave no sign of life (a heartbeat in epoch seconds, dse.search.workers) for
    ``heartbeat_timeout_s``, or whose worker on this machine has exited, is failed and its
    parameters enqueued again.
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
    seeds_seed = seed              # a shared study's seeds are worker 0's, whichever worker finds them
    if task is None:
        worker = worker_index()
        if worker and (storage if storage is not None else study.storage) != ":memory:":
            seed = derive_seed(seed, worker)       # workers of one shared study must not propose alike
    out = Path(out or study.output)
    check_name_fits(out, "--out")
    if out.is_dir():
        raise SpecError(None, "--out", str(out), "is a directory; expected a Parquet file path (or give --task)")
    if write:
        check_writable(out, "--out")                # before the search: an unwritable path costs no work
    url = storage if storage is not None else study.storage
    if (journal := journal_path(url, out)) is not None:     # and Optuna's lock beside it
        check_journal_name(journal, "--out" if url is None else "--storage" if storage is not None else "storage",
                           out if url is None else None)
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
    first = len(ostudy.get_trials(deepcopy=False))
    if task is None and write:  # the file will hold every COMPLETE trial: at least n_trials, or what the storage has
        from optuna.trial import TrialState
        done = sum(t.state == TrialState.COMPLETE for t in ostudy.get_trials(deepcopy=False))
        check_replace(out, base_meta, max(n_trials, done), force=force)
    run_id = uuid.uuid4().hex[:16]
    run_key = f"{RUN_KEY}{run_id}"      # this run's own record: no read-modify-write race (dse.search.trials)
    record = {"sampler": sampler_name, "seed": seed, "first_trial": first, "started": time.time()}
    ostudy.set_user_attr(run_key, record)
    shared = storage_url != ":memory:"
    tally, signum = {"told": 0}, 0
    with stop_on_signals() as stop:
        if hasattr(opt_sampler, "on_part"):
            opt_sampler.on_part = stop.check        # its own pre-search stops on SIGTERM/SIGINT as the trials do
        try:
            if sampler_name == "auto":
                _seed(ostudy, study, n_trials, seeds_seed, db, tech, opt_sampler, first=first, shared=shared,
                      key=f"{SEED_KEY}{run_id}", stop=stop, progress=progress, label=label, timeout_s=heartbeat_timeout_s)
            ask_tell_loop(study, ostudy, n_trials, db, tech, stop, progress, label, heartbeat_timeout_s, tally,
                          shared=shared, worker_key=f"{WORKER_KEY}{run_id}")
        except KeyboardInterrupt:
            signum = stop.signum or signal.SIGINT
        signum = signum or stop.signum
    told = tally["told"]
    if storage_url != ":memory:" and tally.get("numbers"):
        ostudy.set_user_attr(run_key, {**record, "trials": number_ranges(tally["numbers"])})
    if (task is not None and signum) or not write:
        # a task's part holds all of its trials or is not written (a re-run replaces it)
        return RunResult(frame=pd.DataFrame(), path=out, n_new=told, storage=storage_url, interrupted=signum)
    runs = study_runs(ostudy.user_attrs)
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


def _seed(ostudy, study: StudySpec, n_trials: int, seed: int, db, tech, sampler, *, first: int, shared: bool, key: str,
          stop, progress: bool, label: str, timeout_s: float) -> None:
    """Sampler auto: enqueue the seeds (dse.search.seeds) of a study that holds no trial yet; the workers of
    a shared study claim the seeding (dse.search.claims.seed_once), so it is seeded once, and one that
    joins while another seeds waits for the seeds. Stops between parts on SIGTERM/SIGINT."""
    def seed_now(on_part) -> bool:
        enqueue_seeds(ostudy, study, n_trials, seed, db, tech, sampler=sampler, progress=progress, label=label,
                      on_part=on_part)
        return True
    attrs = ostudy.user_attrs
    if SEEDS_ATTR in attrs:
        return
    if not shared:
        if first == 0:
            seed_now(stop.check)
        return
    if first and not seeding_claims(attrs, key, time.time(), timeout_s):
        return                      # trials without seeds: a study run with another sampler first
    seed_once(ostudy, key, worker_process() or {}, seed_now, timeout_s=timeout_s, stop=stop, label=label,
              progress=progress, meanwhile=getattr(sampler, "warm_up", None))


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


def space_fingerprint(study: StudySpec) -> str:
    """Hash of what makes trials comparable: workload, knobs, objectives, constraints and
    technology overrides (not the search budget, sampler or output)."""
    import hashlib
    import json
    r = study.resolved()
    key = {k: r[k] for k in ("workload", "knobs", "objectives", "constraints", "technology")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
