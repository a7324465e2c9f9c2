"""`dse export`: a shared study's finished trials to the results schema, while workers still run.

The study is rebuilt from what `dse run` stored in it (user attribute ``dse_study``, the
resolved study), every COMPLETE trial is re-evaluated (the model is deterministic) and the
Parquet file is written atomically. The storage URL in the metadata has its password blanked.
Export reads: a journal or SQLite file that does not exist is refused, not created empty; a file
at ``out`` holding another study or more trials is not replaced without ``force``.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DseError, SpecError
from ..report.context import study_from_mapping, study_mapping
from ..results.guard import check_replace, check_writable
from ..results.store import study_metadata, write_parquet
from ..search.runner import RunResult
from ..search.trials import study_frame, study_runs
from ..storage.backends import redact_url, resolve_storage
from ..study import open_study


def export_study(storage: str, study_name: str, out: str | Path, force: bool = False) -> RunResult:
    """Write the COMPLETE trials of study ``study_name`` in ``storage`` to ``out`` (Parquet)."""
    import optuna
    from optuna.trial import TrialState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage in (None, "", ":memory:"):
        raise SpecError(None, "--storage", storage, "give the shared study's storage URL or journal file "
                        "(--storage, --storage-file or DSE_STORAGE)")
    out = Path(out)
    check_writable(out, "--out")
    store, shown = resolve_storage(None, storage, out, must_exist=True)
    names = [s.study_name for s in optuna.get_all_study_summaries(store, include_best_trial=False)]
    if study_name not in names:
        known = ", ".join(sorted(names)) or "none"
        raise SpecError(None, "--study", study_name, f"no such study in {shown} (studies there: {known})")
    ostudy = optuna.load_study(study_name=study_name, storage=store)
    resolved = ostudy.user_attrs.get("dse_study")
    if not isinstance(resolved, dict):
        raise DseError(f"{shown}: study {study_name!r} was not created by dse run (no dse_study attribute)")
    study = study_from_mapping(study_mapping(resolved), source=f"{shown} study {study_name}")
    study, db, tech = open_study(study)
    runs = study_runs(ostudy.user_attrs) or [{"sampler": "", "seed": None, "first_trial": 0}]
    complete = len(ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    check_replace(out, study_metadata(study, db, tech), complete, force=force)
    df = study_frame(study, ostudy, db, tech, runs)
    last = runs[-1]
    meta = study_metadata(study, db, tech, sampler=last["sampler"], seed=last["seed"], storage=redact_url(shown),
                          runs=runs, exported=True)
    write_parquet(df, out, meta)
    return RunResult(frame=df, path=out, n_new=0, storage=redact_url(shown))
