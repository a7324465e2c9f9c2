"""The commands that run a study: `dse run` (Optuna search, array tasks, Dask), `dse sweep`
(the exhaustive grid), `dse export` (a shared study to Parquet) and `dse storage-proxy` (one
database served to many workers over gRPC).
"""

from __future__ import annotations

import os
import sys

import click

from ..errors import MISSING, SpecError
from .commands import count_phrase, say
from .results import epsilon_option, print_front

#: what --storage-file and DSE_STORAGE say in every command's help
_STORAGE_FILE_HELP = ("File whose first line is the storage URL (keeps a password out of `ps`); "
                      "or set DSE_STORAGE [default: none].")


def _heartbeat(ctx, param, value):
    """--heartbeat-timeout: a finite number of seconds in (0, 10^6]."""
    from ..catalog.fields import Range, as_number
    return as_number(value, "--heartbeat-timeout", rng=Range(lo=0.0, hi=1e6, lo_open=True, unit="s"))


@click.command("run", short_help="Search a study with Optuna; Parquet + front.")
@click.argument("study_file", type=click.Path(dir_okay=False))
@click.option("--n-trials", type=int, default=None,
              help="Total trials of the study (per task with --task) [default: the study's search.n_trials, 2000 "
                   "if unset].")
@click.option("--sampler", default=None,
              help="auto|nsga2|nsga3|tpe|gp|random|qmc; auto = a front found in numpy, then trials bred from it "
                   "[default: the study's search.sampler, auto if unset].")
@click.option("--seed", type=int, default=None, help="Sampler seed [default: the study's search.seed, 0 if unset].")
@click.option("--storage", default=None,
              help="Shared storage: journal file or journal:PATH, postgresql+psycopg://..., mysql+pymysql://..., "
                   "grpc://HOST:PORT, sqlite:///...; ':memory:' keeps nothing [default: DSE_STORAGE, else the "
                   "study's storage, else a journal file beside the output].")
@click.option("--storage-file", default=None, type=click.Path(dir_okay=False), help=_STORAGE_FILE_HELP)
@click.option("--task", default=None,
              help="I/N: independent array task I of N (in-memory study, own seed); auto (SLURM array); all/N "
                   "[default: none: one study].")
@click.option("--out", default=None, help="Parquet file [default: the study's output]; a directory with --task.")
@click.option("--dask", "dask_address", default=None,
              help="With --task all/N: run the tasks on this Dask scheduler, or local:N worker processes "
                   "[default: none].")
@click.option("--heartbeat-timeout", default="60", show_default=True, callback=_heartbeat,
              help="Seconds without a heartbeat after which another worker's RUNNING trial is failed and re-asked.")
@click.option("--epsilon", default=None, metavar="E|METRIC=E,...",
              help="The printed front: designs within E (relative) of a row shown in every objective are left out "
                   "[default: 0.01; 0: the exact front]. The results file always holds the exact front.")
@click.option("--wide", is_flag=True, help="Print every column of the front (default: objectives and the knobs that vary).")
@click.option("--no-parquet", "no_parquet", is_flag=True,
              help="A worker of a shared study: write no Parquet file and print no front (one `dse export` "
                   "writes the study once, instead of every worker reading all of it).")
@click.option("--force", is_flag=True,
              help="Replace results of another study (or with more trials) at --out, and a stored study run "
                   "with another workload or space.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run_cmd(study_file, n_trials, sampler, seed, storage, storage_file, task, out, dask_address, heartbeat_timeout,
            epsilon, wide, no_parquet, force, quiet):
    """Search a study with Optuna; write Parquet and print the front."""
    from ..search.runner import parse_task, run_study, run_tasks
    from ..storage.backends import redact_url
    from ..storage.credentials import ENV_VAR, storage_source
    from ..study import load_study
    storage, source = storage_source(storage, storage_file)
    if task is None and os.environ.get("SLURM_ARRAY_TASK_ID") is not None and storage is None:
        say("note: SLURM_ARRAY_TASK_ID is set: give --task auto to run this array element as an "
             "independent task, or --storage URL to join a shared study")
    study = load_study(study_file)
    eps = epsilon_option(epsilon, None, [(o.metric, o.direction) for o in study.objectives])   # before the search
    parsed = parse_task(task)
    if parsed is not None and storage is not None:
        if source == ENV_VAR:
            say(f"note: {ENV_VAR} is not used: array tasks (--task) each run an in-memory study")
            storage = None
        else:
            raise SpecError(None, source.split()[0], redact_url(storage), "array tasks (--task) each run an in-memory "
                            "study; give --storage for one shared study instead of --task")
    if dask_address is not None:
        from ..campaign.on_dask import tasks_on_dask
        from ..search.runner import dataset_dir
        if parsed is None or parsed[0] != "all":
            raise SpecError(None, "--dask", dask_address, "runs array tasks: give --task all/N too")
        rows = tasks_on_dask(dask_address, study_file, parsed[1], out=out, n_trials=n_trials, sampler=sampler,
                             seed=seed, force=force)
        click.echo(f"{dataset_dir(study, out)}: {parsed[1]} tasks, {rows} trials (Dask {dask_address})")
        return
    if parsed is not None:
        i, n = parsed
        res = run_tasks(study, n, which=None if i == "all" else [i], out=out, n_trials=n_trials, sampler=sampler,
                        seed=seed, progress=not quiet, only_missing=i == "all", force=force)
        for r in res:
            if not r.interrupted:
                click.echo(f"{r.path} ({len(r.frame)} trials, seed {r.frame['seed'].iloc[0] if len(r.frame) else '-'})")
        if res and res[-1].interrupted:
            r = res[-1]
            _stopped(r.interrupted, f"task {r.path.name} was not finished and is not written; run the same "
                     "command again to do it")
        if not res:
            click.echo(f"every task's part is on disk already (this command with --task I/{n} instead of "
                       f"--task all/{n} re-runs task I and replaces its part)")
        return
    if no_parquet and (parsed is not None or (storage if storage is not None else study.storage) == ":memory:"):
        raise SpecError(None, "--no-parquet", True, "is for workers of a shared study (a journal file, a database or "
                        "grpc://): an in-memory study or an array task would keep nothing")
    res = run_study(study, n_trials=n_trials, sampler=sampler, seed=seed, storage=storage, out=out,
                    progress=not quiet, heartbeat_timeout_s=heartbeat_timeout, write=not no_parquet, force=force)
    if no_parquet:
        click.echo(f"{res.n_new} trials told to study {study.name!r} (storage {redact_url(res.storage)}); no Parquet "
                   f"written: `{export_command(study.name, res.storage, source, res.path)}` writes the study once")
        if res.interrupted:
            _stopped(res.interrupted, "the finished trials are in the storage; run the same command again to resume")
        return
    if res.interrupted:
        _stopped(res.interrupted, f"{len(res.frame)} finished trials written to {res.path} (storage "
                 f"{redact_url(res.storage)}); run the same command again to resume")
    print_front(res.frame, study, f"{res.path} ({len(res.frame)} trials, {res.n_new} new; storage "
                 f"{redact_url(res.storage)})", epsilon=eps, wide=wide)


def export_command(name: str, storage: str, source: str, out) -> str:
    """The `dse export` that writes a shared study to ``out``, its storage named as the user gave it:
    --storage-file FILE, nothing for DSE_STORAGE (export reads it too), else the URL, redacted."""
    import shlex

    from ..storage.backends import redact_url
    from ..storage.credentials import ENV_VAR
    where = ("" if source == ENV_VAR else f" --storage-file {shlex.quote(source.split(' ', 1)[1])}"
             if source.startswith("--storage-file ") else f" --storage {shlex.quote(redact_url(storage))}")
    return f"dse export{where} --study {shlex.quote(name)} --out {shlex.quote(str(out))}"


def _stopped(signum: int, what: str):
    """One line on stderr, exit 128 + the signal's number (143 SIGTERM, 130 SIGINT)."""
    import signal
    name = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}.get(signum, f"signal {signum}")
    say(f"interrupted by {name}: {what}")
    sys.exit(128 + int(signum))


@click.command("sweep", short_help="Exhaustive grid of a study into a Parquet dataset.")
@click.argument("study_file", type=click.Path(dir_okay=False))
@click.option("--points", type=int, default=None, help="Grid points per continuous knob [default: the study's grid.points].")
@click.option("--shard", default=None,
              help="I/N: evaluate chunks c with c % N == I only (default: SLURM_ARRAY_TASK_ID/COUNT, else 0/1).")
@click.option("--out", default=None, help="Dataset directory [default: <output>-sweep/].")
@click.option("--chunk-size", type=int, default=None,
              help="Rows per part file (bounds memory) [default: 131072, or fewer so that each of N shards gets one].")
@click.option("--plan", "plan_shards", type=click.IntRange(min=1), default=None, metavar="N",
              help="Evaluate nothing: print how the grid is cut for N shards (stdout: the shards that get work, "
                   "for sizing a job array) [default: none: evaluate].")
@click.option("--dask", "dask_address", default=None,
              help="Run shards 0..N-1 of --shard all/N (default all/16) as Dask tasks: a scheduler address or local:N.")
@click.option("--force", is_flag=True, help="Start a new dataset in --out when it holds another study's or grid's parts.")
@click.option("--quiet", is_flag=True, help="No progress line.")
def sweep_cmd(study_file, points, shard, out, chunk_size, plan_shards, dask_address, force, quiet):
    """Evaluate the exhaustive grid of a study's space into a Parquet dataset (only the missing parts)."""
    from ..campaign.grid import grid_plan, parse_shard, sweep
    from ..study import load_study
    study = load_study(study_file)
    if plan_shards is not None:
        plan = grid_plan(study, points, plan_shards, chunk_size)
        click.echo(f"{plan.total:,} grid points in {count_phrase(plan.chunks, 'chunk')} of up to {plan.chunk_size:,} rows: "
                   f"{plan.busy_shards} of {plan_shards} shards get work"
                   + (f" (shards {plan.busy_shards}-{plan_shards - 1} would have none)"
                      if plan.busy_shards < plan_shards else ""), err=True)
        click.echo(plan.busy_shards)
        return
    if dask_address is not None:
        from ..campaign.on_dask import sweep_on_dask
        head, _, tail = (shard or "all/16").partition("/")
        if head != "all" or not tail.isdigit() or int(tail) < 1:
            raise SpecError(None, "--shard", shard, "with --dask, give all/N (N shards as N Dask tasks)")
        rows, parts = sweep_on_dask(dask_address, study_file, int(tail), points=points, out=out,
                                    chunk_size=chunk_size, force=force)
        click.echo(f"{rows} designs written in {count_phrase(parts, 'part file')} on disk ({tail} shards on Dask {dask_address})")
        return
    res = sweep(study, points=points, shard=parse_shard(shard) if shard else None, out=out,
                chunk_size=chunk_size, progress=not quiet, force=force)
    done = f"{count_phrase(len(res.parts), 'part file')} of shard {res.shard[0]}/{res.shard[1]} on disk in {res.out_dir}"
    if res.interrupted:
        _stopped(res.interrupted, f"{done}; run the same command again to do only the missing parts")
    if res.note:
        say(f"note: {res.note}")
        return
    kept = f", {res.skipped} already there" if res.skipped else ""
    whole = res.points_written == res.total_points
    of = "" if whole else f" of the grid's {res.total_points:,}"
    click.echo(f"{res.out_dir}: {res.rows_written:,} designs from {res.points_written:,} grid points{of} (a knob that "
               f"does not act on a design is taken at one value) written in "
               f"{count_phrase(len(res.parts) - res.skipped, 'part file')}{kept} (shard {res.shard[0]}/{res.shard[1]})")


@click.command("export", short_help="A shared study's finished trials to Parquet.")
@click.option("--storage", default=None,
              help="The study's storage URL or journal file [default: --storage-file, else DSE_STORAGE].")
@click.option("--storage-file", default=None, type=click.Path(dir_okay=False), help=_STORAGE_FILE_HELP)
@click.option("--study", "study_name", required=True, help="The study's name (its `name:`), or its study file.")
@click.option("--out", required=True, help="Parquet file to write.")
@click.option("--force", is_flag=True, help="Replace a file at --out that holds another study or more trials.")
def export_cmd(storage, storage_file, study_name, out, force):
    """Every COMPLETE trial of a shared study in the results schema (workers may still run)."""
    from pathlib import Path

    from ..campaign.export import export_study
    from ..storage.backends import redact_url
    from ..storage.credentials import storage_source
    if Path(study_name).suffix in (".yaml", ".yml") and Path(study_name).is_file():
        from ..study import load_study
        study_name = load_study(study_name).name
    storage, _ = storage_source(storage, storage_file)
    res = export_study(storage, study_name, out, force=force)
    click.echo(f"{res.path} ({len(res.frame)} trials; storage {redact_url(res.storage)})")


@click.command("storage-proxy", short_help="Serve a database to many `dse run` workers over gRPC.")
@click.option("--storage", default=None,
              help="The database: postgresql+psycopg://, mysql+pymysql:// or sqlite:/// [default: --storage-file, "
                   "else DSE_STORAGE].")
@click.option("--storage-file", default=None, type=click.Path(dir_okay=False), help=_STORAGE_FILE_HELP)
@click.option("--host", default="localhost", show_default=True,
              help="Address to listen on: loopback unless --allow-remote (the channel has no authentication).")
@click.option("--port", type=int, default=13000, show_default=True, help="Port to listen on.")
@click.option("--allow-remote", is_flag=True,
              help="Listen on a non-loopback --host (anyone who reaches the port can change or delete studies).")
def storage_proxy_cmd(storage, storage_file, host, port, allow_remote):
    """Run Optuna's gRPC storage proxy until SIGTERM or Ctrl-C; workers join with
    `dse run STUDY --storage grpc://HOST:PORT` (pip install 'specdec-dse[grpc]'). It has no
    authentication: it listens on loopback unless --allow-remote."""
    from ..storage.credentials import storage_source
    from ..storage.proxy import serve_proxy
    storage, _ = storage_source(storage, storage_file)
    if storage is None:
        raise SpecError(None, "--storage", MISSING, "give the database: --storage URL, --storage-file FILE or DSE_STORAGE")
    serve_proxy(storage, host=host, port=port, allow_remote=allow_remote)
