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
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .catalog.database import Database
from .catalog.fields import Range
from .errors import DseError, RuntimeFailure, SpecError
from .evaluation import constraint_values, evaluate_study, metric_table
from .results.columns import BASE_CONSTRAINTS
from .results.frame import results_frame
from .results.store import study_metadata, write_parquet
from .study import SAMPLERS, StudySpec, open_study
from .study.space import active_masks, sampling_order

#: objective value given to Optuna where a metric is undefined (the design does not fit);
#: the memory constraint already marks such trials infeasible
PENALTY = 1e18


@dataclass
class RunResult:
    frame: pd.DataFrame
    path: Path
    n_new: int
    storage: str
    interrupted: bool = False


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


def ask_design(ostudy, study: StudySpec, dists: dict):
    """Ask one trial and suggest its active knobs only (a conditional space: a draft-chip knob
    is not sampled when the draft chip is off, dse.study.space); controllers come first."""
    trial = ostudy.ask()
    vals: dict[str, np.ndarray] = {}
    for k in sampling_order(study):
        act = active_masks(study, vals, 1).get(k.name)
        if act is not None and not act[0]:
            continue
        vals[k.name] = np.array([_suggest(trial, k.name, dists[k.name])], dtype=object)
    return trial


def _suggest(trial, name: str, d):
    """One suggest call for a distribution of :func:`distributions`."""
    import optuna.distributions as od
    if isinstance(d, od.CategoricalDistribution):
        return trial.suggest_categorical(name, d.choices)
    if isinstance(d, od.IntDistribution):
        return trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
    return trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)


def make_sampler(name: str, seed: int, population: int, n_objectives: int):
    """The sampler, always with its seed (Optuna 5's default multi-objective sampler is TPE).
    NSGA-III and QMC are marked experimental by Optuna; that warning is silenced here."""
    import optuna
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _sampler(name, seed, population)


def _sampler(name: str, seed: int, population: int):
    import optuna
    if name in ("nsga2", "auto"):       # auto: NSGA-II after the seeds of enqueue_seeds
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    if name == "nsga3":
        return optuna.samplers.NSGAIIISampler(population_size=population, seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed)
    if name == "gp":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise SpecError(None, "sampler", "gp", "needs PyTorch: pip install 'dse[gp]' (or pick nsga2, tpe, ...)") from None
        return optuna.samplers.GPSampler(seed=seed)
    raise SpecError(None, "sampler", name, f"expected one of {', '.join(SAMPLERS)}")


def resolve_storage(study: StudySpec, storage: str | None, out: Path):
    """None/null: a journal file beside the output; ':memory:'; a database URL; or a file path."""
    import optuna
    from optuna.storages.journal import JournalFileBackend
    url = storage if storage is not None else study.storage
    if url is None:
        url = str(out.with_suffix(".journal"))
    if url == ":memory:":
        return None, url
    if "://" in url:
        try:
            return optuna.storages.RDBStorage(url), url
        except ImportError as exc:  # the URL names a driver that is not installed: bad input
            raise SpecError(None, "--storage", url, f"cannot open this database: {str(exc).splitlines()[0]}"
                            " (expected sqlite:///FILE or postgresql+psycopg://USER@HOST/DB with psycopg "
                            "installed)") from None
        except Exception as exc:  # SQLAlchemy: malformed URL (bad input) or unreachable server (runtime)
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if type(exc).__name__ in ("ArgumentError", "NoSuchModuleError"):
                raise SpecError(None, "--storage", url, f"not a database URL: {first} (expected sqlite:///FILE "
                                "or postgresql+psycopg://USER@HOST/DB)") from None
            raise RuntimeFailure(f"--storage {url}: cannot open this database: {first}") from None
    Path(url).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(url)), url


def run_study(study: StudySpec | str | Path, *, n_trials: int | None = None, sampler: str | None = None,
              seed: int | None = None, storage: str | None = None, out: str | Path | None = None,
              progress: bool = True, db: Database | None = None) -> RunResult:
    """Create or resume the Optuna study, run it to ``n_trials`` in total, write Parquet."""
    import optuna
    from optuna.trial import TrialState
    study, db, tech = open_study(study, db)
    n_trials = study.n_trials if n_trials is None else n_trials
    Range(True, 1, 10_000_000).check(n_trials, None, "--n-trials")
    sampler_name = sampler or study.sampler
    seed = study.seed if seed is None else seed
    out = Path(out or study.output)
    if out.is_dir():
        raise SpecError(None, "--out", str(out), "is a directory; expected a Parquet file path")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = [o.direction for o in study.objectives]
    # every option is checked before the storage (a journal file) is created
    if not Range(True, 0, 2**32 - 1).contains(seed):
        raise SpecError(None, "--seed", seed, Range(True, 0, 2**32 - 1).text())
    opt_sampler = make_sampler(sampler_name, seed, study.batch_size, len(directions))
    store, storage_url = resolve_storage(study, storage, out)
    ostudy = optuna.create_study(study_name=study.name, storage=store, directions=directions, sampler=opt_sampler,
                                 load_if_exists=True)
    if [d.name.lower() for d in ostudy.directions] != directions:
        raise DseError(f"{storage_url}: study {study.name!r} exists with directions "
                       f"{[d.name.lower() for d in ostudy.directions]}, the study file asks for {directions}; "
                       "use another name or --storage")
    space_key = space_fingerprint(study)
    stored = ostudy.user_attrs.get("dse_space")
    if stored is None:
        ostudy.set_user_attr("dse_space", space_key)
    elif stored != space_key:
        raise DseError(f"{storage_url}: study {study.name!r} was run with another workload or space "
                       f"(fingerprint {stored}, this file gives {space_key}); resuming would mix designs. "
                       "Rename the study, or give another --storage / --out")
    runs = list(ostudy.user_attrs.get("dse_runs", []))
    fail_stale_trials(ostudy)
    done = ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    first = len(ostudy.get_trials(deepcopy=False))
    if not runs or runs[-1]["sampler"] != sampler_name or runs[-1]["seed"] != seed:
        runs.append({"sampler": sampler_name, "seed": seed, "first_trial": first})
        ostudy.set_user_attr("dse_runs", runs)
    if sampler_name == "auto" and first == 0:
        enqueue_seeds(ostudy, study, n_trials, seed, db, tech)
    dists = distributions(study)
    names = [k.name for k in study.searched]
    told = 0
    interrupted = False
    bar = _Progress(n_trials, len(done), enabled=progress)
    try:
        while True:
            # recount each batch: other workers may share this storage, so together they stop
            # at n_trials complete (overshooting by at most one batch per other worker)
            taken = len(ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
            b = min(study.batch_size, n_trials - taken)
            if b <= 0:
                break
            trials = []
            try:
                for _ in range(b):
                    trials.append(ask_design(ostudy, study, dists))
                params = {nm: _column([t.params.get(nm) for t in trials]) for nm in names}
                designs, metrics = evaluate_study(study, params, b, db, tech)
                cols = metric_table(designs, metrics)
                cons = constraint_values(cols, study)
                values = _finite_objectives(cols, study)
            except KeyboardInterrupt:
                for t in trials:
                    ostudy.tell(t, state=TrialState.FAIL)
                raise
            pending = list(range(b))
            try:
                while pending:
                    i = pending[0]
                    _set_constraints(trials[i], cons[i], study)
                    ostudy.tell(trials[i], values[i].tolist())
                    pending.pop(0)
            except KeyboardInterrupt:       # evaluated already: tell the rest, keep them all
                for i in pending:
                    _set_constraints(trials[i], cons[i], study)
                    ostudy.tell(trials[i], values[i].tolist())
                raise
            told += b
            bar.update(b)
    except KeyboardInterrupt:
        interrupted = True
    bar.close()
    df = study_frame(study, ostudy, db, tech, runs)
    meta = study_metadata(study, db, tech, sampler=sampler_name, seed=seed, storage=storage_url, runs=runs)
    write_parquet(df, out, meta)
    return RunResult(frame=df, path=out, n_new=told, storage=storage_url, interrupted=interrupted)


def seed_count(n_trials: int, batch_size: int) -> int:
    """Seeds of sampler auto: half the trials (at least one batch, at most 256 designs)."""
    return int(min(256, max(min(batch_size, n_trials), n_trials // 2)))


def find_seeds(study: StudySpec, n_trials: int, seed: int, db, tech):
    """The seeds of sampler auto for a budget: dse.presearch with 120 designs per trial up to
    1,000 trials (40,000 to start, 20 rounds of 4,000 children: 120,000 designs in all). A
    start of 20,000 missed the low-latency end of the quickstart front on 2 of 5 seeds
    (docs/search-quality.md)."""
    from .presearch import presearch
    scale = min(1.0, n_trials / 1000)
    return presearch(study, db, tech, seed=seed, keep=seed_count(n_trials, study.batch_size),
                     initial=max(2000, int(40_000 * scale)), children=max(200, int(4_000 * scale)))


def enqueue_seeds(ostudy, study: StudySpec, n_trials: int, seed: int, db, tech) -> int:
    """Sampler auto: a front found in numpy (dse.presearch; its effort scales with n_trials, up
    to 120,000 designs) enqueued as the study's first trials. They are asked, evaluated and told
    like any trial, so every seed is in the storage and the Parquet file; NSGA-II breeds from them."""
    seeds = find_seeds(study, n_trials, seed, db, tech)
    for p in seeds.params:
        ostudy.enqueue_trial(p, skip_if_exists=False)
    ostudy.set_user_attr("dse_seeds", {"designs": len(seeds.params), "evaluated_in_numpy": seeds.evaluated})
    return len(seeds.params)


def space_fingerprint(study: StudySpec) -> str:
    """Hash of what makes trials comparable: workload, knobs, objectives, constraints and
    technology overrides (not the search budget, sampler or output)."""
    import hashlib
    import json
    r = study.resolved()
    key = {k: r[k] for k in ("workload", "knobs", "objectives", "constraints", "technology")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def fail_stale_trials(ostudy, older_than_s: float = 300.0) -> None:
    """FAIL trials left RUNNING by an interrupted worker (ask/tell records no heartbeat; a
    batch here takes milliseconds, so a trial running for minutes has no worker). Fresh
    RUNNING trials belong to live workers on the same storage and are left alone."""
    from optuna.trial import TrialState
    now = datetime.datetime.now()
    # WAITING trials are enqueued designs (sampler auto's seeds) that no worker has asked yet
    for t in ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        start = t.datetime_start
        if start is None or (now - start).total_seconds() > older_than_s:
            ostudy.tell(t.number, state=TrialState.FAIL)


def _set_constraints(trial, values: np.ndarray, study: StudySpec) -> None:
    """Every constraint on every trial before tell (a trial without them counts as feasible)."""
    names = BASE_CONSTRAINTS + tuple(c.metric for c in study.constraints)
    for name, v in zip(names, values, strict=True):
        if name not in trial.constraints:
            trial.set_constraint(name, float(v))


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
    n = len(trials)
    params = {k.name: _column([t.params.get(k.name) for t in trials]) for k in study.searched}
    designs, metrics = evaluate_study(study, params, n, db, tech)
    numbers = np.array([t.number for t in trials], dtype=np.int64)
    starts = [r["first_trial"] for r in runs]
    which = np.searchsorted(np.array(starts), numbers, side="right") - 1
    df = results_frame(study, designs, metrics, params, trial=numbers, sampler="", seed=None,
                       datetime_start=[_as_utc(t.datetime_start) for t in trials],
                       datetime_complete=[_as_utc(t.datetime_complete) for t in trials])
    df["sampler"] = pd.array([runs[max(w, 0)]["sampler"] for w in which], dtype="string")
    df["seed"] = pd.array([runs[max(w, 0)]["seed"] for w in which], dtype="Int64")
    return df


def _column(values: list) -> np.ndarray:
    """Trial parameters as one array; object dtype when an inactive knob left a None."""
    return np.array(values, dtype=object if any(v is None for v in values) else None)


def _as_utc(when: datetime.datetime | None) -> datetime.datetime | None:
    """Optuna's FrozenTrial times are naive local time (optuna.md section 8): make them aware UTC."""
    if when is None:
        return None
    return when.astimezone(datetime.UTC)


class _Progress:
    """A one-line progress bar on stderr (silent with --quiet or when disabled)."""

    def __init__(self, total: int, done: int, enabled: bool):
        self.total, self.done, self.enabled = total, done, enabled
        self._draw()

    def _draw(self):
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} trials")
        sys.stderr.flush()

    def update(self, n: int):
        self.done += n
        self._draw()

    def close(self):
        if self.enabled:
            sys.stderr.write("\n")


logging.getLogger("optuna").setLevel(logging.WARNING)
# the space is conditional on purpose (dse.study.space): QMC and TPE sample the knobs every trial
# shares jointly and a conditional knob on its own; their per-trial warnings say no more
logging.getLogger("optuna.samplers._qmc").addFilter(lambda r: "non-conditional" not in r.getMessage())
logging.getLogger("optuna.samplers._base").addFilter(lambda r: "sampled independently" not in r.getMessage())
