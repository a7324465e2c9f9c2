"""The `dse` command line: a thin shell over the public functions (flags in, one call, output).

Bad input exits 2 with a one-line error; `--debug` shows the traceback instead. Heavy
imports (optuna, pandas, matplotlib) happen inside the commands that need them, so
`dse eval` starts fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import click

from ..errors import DIST_NAME, MISSING, DseError, SpecError


class _Group(click.Group):
    """Turn DseError into `error: ...` and its exit code (2 for bad input, 1 for a runtime
    failure), an unreadable or unwritable path into `error: ...` and exit 1, and click's own
    usage errors (a bad flag value, a missing option) into one `error: ...` line, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            how = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            _say(f"error: {exc.format_message()}{how}")
            sys.exit(exc.exit_code)
        except click.Abort:
            _say("interrupted")
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DseError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            for line in str(exc).splitlines() or [type(exc).__name__]:   # several errors of one file: a line each
                _say(f"error: {line}")
            sys.exit(getattr(exc, "exit_code", 2))
        except KeyboardInterrupt:   # a second Ctrl-C/SIGTERM, or one outside dse run/sweep: no "Aborted!"
            _say("interrupted")
            sys.exit(130)
        except BrokenPipeError:     # the output's reader has gone (`dse pareto ... | head`): what it read is all
            _silence_dead_streams()
            sys.exit(0)
        except MemoryError:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _say("error: out of memory (a smaller --chunk-size, --points or batch_size needs less)")
            sys.exit(1)
        except OSError as exc:      # a path that cannot be read or written: a runtime failure
            if ctx.obj and ctx.obj.get("debug"):
                raise
            _say(f"error: {exc.filename or '(no file)'}: {exc.strerror or exc}")
            sys.exit(1)


def _say(text: str) -> None:
    """One line on stderr; a closed stderr drops it (the exit code still tells)."""
    from ..process.progress import note
    note(text)


def _silence_dead_streams() -> None:
    """Point stdout and stderr at /dev/null, so Python's flush at exit does not complain about the
    pipe whose reader has gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass
    os.close(devnull)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(package_name=DIST_NAME, message="%(prog)s (distribution %(package)s) %(version)s")
@click.pass_context
def main(ctx, debug):
    """dse: design-space explorer for LLM-inference accelerators and speculative decoding."""
    import warnings
    ctx.obj = {"debug": debug}
    warnings.formatwarning = lambda message, category, *a, **k: f"warning: {message}\n"


def _kv(ctx, param, values):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected FIELD=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@main.command("eval", short_help="One design: fit, latency, speculative accounting.")
@click.option("--hw", required=True, help="Target accelerator: database name or YAML file.")
@click.option("--chips", default=1, show_default=True, type=int, help="Target chips (tensor parallel).")
@click.option("--target", required=True, help="Target model: name, YAML file or HF config.json.")
@click.option("--ep", default="1", show_default=True,
              help="Expert-parallel ranks for an MoE target (divides the experts and --chips; 1 = tensor parallel).")
@click.option("--draft", default="none", show_default=True,
              help="Model name/file, eagle, eagle2, eagle3, medusa:H, hydra[:H], ngram, retrieval, early-exit:L, or none.")
@click.option("--draft-hw", default=None,
              help="Put the draft model on this colocated draft chip (name or YAML file) [default: none: the draft "
                   "runs on the target chips].")
@click.option("--draft-chips", default=1, show_default=True, type=int, help="Draft chips (with --draft-hw).")
@click.option("--k", "k", default=None,
              help="Drafted tokens per iteration (1-32), or auto (the best k up to 16, or 0 = no speculation) "
                   "[default: a tree method's published tree at its depth, else auto].")
@click.option("--alpha", type=float, default=None,
              help="i.i.d. conditional per-token acceptance rate in [0, 1] [default: from the published table or the "
                   "acceptance model, with a band].")
@click.option("--acceptance", default=None, help="Per-position conditional rates A1,A2,... [default: none].")
@click.option("--tau", type=float, default=None, help="Mean tokens per target pass (at the given --k) [default: none].")
@click.option("--rank-acceptance", default=None,
              help="Tree acceptance per rank P1,P2,... (Sequoia), or rows per depth P1,P2;Q1,Q2 (Medusa heads) "
                   "[default: from --alpha and the rank profile].")
@click.option("--rank-profile", default=None,
              help="Tree rank profile scaled to --alpha (default: the drafter kind's measured one; geometric = the "
                   "optimistic limit alpha(1-alpha)^(r-1)); see hardware_db/acceptance/rank_profiles.yaml.")
@click.option("--tree-nodes", default=None, type=int,
              help="Verify the best draft tree of N nodes, N <= 1024 (depth <= k); 0 = a chain of k drafts "
                   "[default: the method's published tree].")
@click.option("--datastore-gb", default=0.0, show_default=True, type=float,
              help="Retrieval datastore in host memory (--draft ngram), never device memory.")
@click.option("--batch", default=1, show_default=True, type=int, help="Concurrent sequences per step.")
@click.option("--prompt", default=128, show_default=True, type=int, help="Prompt tokens.")
@click.option("--output", default=128, show_default=True, type=int, help="Generated tokens.")
@click.option("--dtype", default="bf16", show_default=True,
              help="Weight format: bf16|fp16|fp8|int8|int4 (every weight at that width; int8/int4 weight-only), "
                   "or a checkpoint format with a 16-bit head: fp8-head16|int4-g128|int4-g32|q4f16_1|nvfp4|mxfp4.")
@click.option("--kv-dtype", default=None,
              help="KV-cache dtype: bf16|fp16|fp8|int8|int4 [default: 16-bit (fp16 with fp16 weights, else bf16), "
                   "whatever --dtype].")
@click.option("--temperature", default=0.0, show_default=True, type=float,
              help="Sampling temperature (moves acceptance; > 0 sends draft probabilities over a draft-chip link).")
@click.option("--task", default="chat", show_default=True,
              help="Text generated: chat, code, math, summarization, translation, qa, rag, mix (equal parts of "
                   "chat, translation, summarization, qa, math, rag) or weights chat=0.4,code=0.6.")
@click.option("--overlap", is_flag=True, help="Draft chip drafts ahead while the target verifies.")
@click.option("--continuous", is_flag=True,
              help="Continuous batching: --batch = requests in flight (steady state); steps also run arriving prompts.")
@click.option("--runtime", default=None,
              help="Fixed-cost stack from hardware_db/runtimes: graphs|gpt-fast|eager|xla|dataflow (`dse runtimes list`) "
                   "[default: the device's default_runtime, graphs for GPUs].")
@click.option("--baseline-ms", type=float, default=None,
              help="Anchor: a measured autoregressive ms/token; the fixed costs are scaled to match it [default: none].")
@click.option("--set", "set_fields", multiple=True, callback=_kv, metavar="FIELD=VALUE",
              help="Override a target-hardware or runtime field (e.g. mem_bw_tb_s=4); repeat for several "
                   "[default: none].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def eval_cmd(as_json, **kwargs):
    """Evaluate one design: fit, latency and the full speculative accounting."""
    from ..api import evaluate_design
    from .text import eval_table
    result = evaluate_design(**kwargs)
    click.echo(json.dumps(result, indent=2) if as_json else eval_table(result))


#: what --storage-file and DSE_STORAGE say in every command's help
_STORAGE_FILE_HELP = ("File whose first line is the storage URL (keeps a password out of `ps`); "
                      "or set DSE_STORAGE [default: none].")


def _heartbeat(ctx, param, value):
    """--heartbeat-timeout: a finite number of seconds in (0, 10^6]."""
    from ..catalog.fields import Range, as_number
    return as_number(value, "--heartbeat-timeout", rng=Range(lo=0.0, hi=1e6, lo_open=True, unit="s"))


@main.command("run", short_help="Search a study with Optuna; Parquet + front.")
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
        _say("note: SLURM_ARRAY_TASK_ID is set: give --task auto to run this array element as an "
             "independent task, or --storage URL to join a shared study")
    study = load_study(study_file)
    parsed = parse_task(task)
    if parsed is not None and storage is not None:
        if source == ENV_VAR:
            _say(f"note: {ENV_VAR} is not used: array tasks (--task) each run an in-memory study")
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
            click.echo("every task's part is on disk already (re-run one with --task I/N to replace it)")
        return
    if no_parquet and (parsed is not None or (storage if storage is not None else study.storage) == ":memory:"):
        raise SpecError(None, "--no-parquet", True, "is for workers of a shared study (a journal file, a database or "
                        "grpc://): an in-memory study or an array task would keep nothing")
    res = run_study(study, n_trials=n_trials, sampler=sampler, seed=seed, storage=storage, out=out,
                    progress=not quiet, heartbeat_timeout_s=heartbeat_timeout, write=not no_parquet, force=force)
    if no_parquet:
        click.echo(f"{res.n_new} trials told to study {study.name!r} (storage {redact_url(res.storage)}); no Parquet "
                   f"written: `dse export --storage URL --study {study.name} --out PATH` writes the study once")
        if res.interrupted:
            _stopped(res.interrupted, "the finished trials are in the storage; run the same command again to resume")
        return
    if res.interrupted:
        _stopped(res.interrupted, f"{len(res.frame)} finished trials written to {res.path} (storage "
                 f"{redact_url(res.storage)}); run the same command again to resume")
    _print_front(res.frame, study, f"{res.path} ({len(res.frame)} trials, {res.n_new} new; storage "
                 f"{redact_url(res.storage)})", epsilon=epsilon, wide=wide)


def _stopped(signum: int, what: str):
    """One line on stderr, exit 128 + the signal's number (143 SIGTERM, 130 SIGINT)."""
    import signal
    name = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}.get(signum, f"signal {signum}")
    _say(f"interrupted by {name}: {what}")
    sys.exit(128 + int(signum))


@main.command("sweep", short_help="Exhaustive grid of a study into a Parquet dataset.")
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
        click.echo(f"{plan.total:,} grid points in {_count(plan.chunks, 'chunk')} of up to {plan.chunk_size:,} rows: "
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
        click.echo(f"{rows} designs written in {_count(parts, 'part file')} on disk ({tail} shards on Dask {dask_address})")
        return
    res = sweep(study, points=points, shard=parse_shard(shard) if shard else None, out=out,
                chunk_size=chunk_size, progress=not quiet, force=force)
    done = f"{_count(len(res.parts), 'part file')} of shard {res.shard[0]}/{res.shard[1]} on disk in {res.out_dir}"
    if res.interrupted:
        _stopped(res.interrupted, f"{done}; run the same command again to do only the missing parts")
    if res.note:
        _say(f"note: {res.note}")
        return
    kept = f", {res.skipped} already there" if res.skipped else ""
    click.echo(f"{res.out_dir}: {res.rows_written} designs from {res.total_points} grid points (a knob that does "
               f"not act on a design is taken at one value) written in {_count(len(res.parts) - res.skipped, 'part file')}"
               f"{kept} (shard {res.shard[0]}/{res.shard[1]})")


@main.command("export", short_help="A shared study's finished trials to Parquet.")
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


@main.command("storage-proxy", short_help="Serve a database to many `dse run` workers over gRPC.")
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
    from ..storage.backends import serve_proxy
    from ..storage.credentials import storage_source
    storage, _ = storage_source(storage, storage_file)
    if storage is None:
        raise SpecError(None, "--storage", MISSING, "give the database: --storage URL, --storage-file FILE or DSE_STORAGE")
    serve_proxy(storage, host=host, port=port, allow_remote=allow_remote)


@main.command("pareto", short_help="The front of a results file or dataset.")
@click.argument("path", type=click.Path(exists=True))
@click.option("--objective", "objectives", multiple=True, metavar="METRIC:min|max",
              help="Objectives (default: the study's). Repeat for each.")
@click.option("--where", default=None,
              help="pandas query applied first (to the counts too), e.g. 'chips <= 2' [default: none].")
@click.option("--top", type=click.IntRange(min=1), default=None, help="Show the first N front rows [default: all].")
@click.option("--epsilon", default=None, metavar="E|METRIC=E,...",
              help="Leave out designs within E (relative) of a row shown in every objective, one E or one per "
                   "objective [default: 0.01 for the table, 0 (the exact front) for --json and --csv].")
@click.option("--wide", is_flag=True, help="Every column (default: objectives and the knobs that vary).")
@click.option("--json", "as_json", is_flag=True, help="Print the front as JSON records.")
@click.option("--csv", "as_csv", is_flag=True, help="Print the front as CSV.")
def pareto_cmd(path, objectives, where, top, epsilon, wide, as_json, as_csv):
    """The non-dominated front of a results file or sweep directory."""
    from .text import front_block
    objectives = list(objectives) or None
    script = as_json or as_csv
    eps = _parse_epsilon(epsilon, 0.0 if script else None)
    if not (where or script):    # no pandas: a sweep's front is read from its side file
        from ..results.front import dataset_front
        with _warnings_to_stderr():
            fr = dataset_front(path, objectives, top, epsilon=eps)
        _print_front_header(fr.points, fr.n_feasible, fr.n_designs, fr.n_rows, fr.objectives, fr.shown, fr.epsilon,
                            len(fr.rows), _rows_noun(fr.meta))
        if fr.points:
            click.echo(front_block({c: fr.table[c].to_pylist() for c in fr.table.column_names},
                                   [m for m, _ in fr.objectives], _width(), wide))
        return
    from ..results.analysis import epsilon_of, front_of, front_table, objectives_of
    from ..results.front import FRONT_TABLE_COLUMNS
    with _warnings_to_stderr():       # part by part: memory bounded by a part and the front
        fr = front_of(path, objectives, where=where, columns=FRONT_TABLE_COLUMNS)
    objs = objectives_of(fr, objectives)
    vec = epsilon_of(eps, objs)
    table = front_table(fr, objs, top=top, epsilon=vec)
    if as_json:
        click.echo(table.to_json(orient="records", indent=2))
    elif as_csv:
        click.echo(table.to_csv(index=False), nl=False)
    else:
        c = fr.attrs["counts"]
        shown = len(front_table(fr, objs, epsilon=vec)) if top is not None else len(table)
        _print_front_header(c["front"], c["feasible"], c["designs"], c["rows"], objs, shown, vec, len(table),
                            _rows_noun(fr.attrs["dse"]), where)
        if len(fr):
            click.echo(front_block(_frame_columns(table), [m for m, _ in objs], _width(), wide))


def _parse_epsilon(text: str | None, default):
    """--epsilon: None -> ``default`` (None: the display default); 'E' -> E; 'METRIC=E,...' -> a dict."""
    from ..results.pareto import DISPLAY_EPSILON
    if text is None:
        return DISPLAY_EPSILON if default is None else default
    try:
        if "=" in text:
            return {k.strip(): float(v) for k, _, v in (item.partition("=") for item in text.split(",") if item.strip())}
        return float(text)
    except ValueError:
        raise SpecError(None, "--epsilon", text, "expected a relative epsilon E in [0, 1), or METRIC=E,... "
                        "per objective") from None


def _frame_columns(df) -> dict[str, list]:
    """A DataFrame's columns as lists of Python values, None for NA (for cli_text.front_block)."""
    import pandas as pd
    return {c: [None if pd.isna(v) else v for v in df[c].tolist()] for c in df.columns}


def _rows_noun(meta: dict | None) -> str:
    """'grid points' for a sweep's results, else 'trials'."""
    return "grid points" if (meta or {}).get("sampler") == "grid" else "trials"


def _width() -> int:
    from .text import terminal_width
    return terminal_width()


def _print_front_header(points: int, feasible: int, designs: int, rows: int, objs, shown: int, epsilon,
                        listed: int, rows_noun: str = "trials", where: str | None = None) -> None:
    """The header of a printed front: the counts (dse.results.analysis.counts: of the rows ``where`` keeps),
    the objectives, and how many rows the epsilon and --top leave, wrapped to the table's width."""
    from .text import counts_line, epsilon_note, wrap
    what = ", ".join(f"{m} {d}" for m, d in objs)
    filt = f" where {where}" if where else ""
    if not points:
        click.echo(wrap(f"no feasible design among {designs:,} designs{filt} ({what})", _width()))
        return
    more = f"; showing the first {listed}" if listed < shown else ""
    click.echo(wrap(f"{counts_line(points, feasible, designs, rows, rows_noun)}{filt}; {what}"
                    f"{epsilon_note(shown, points, epsilon)}{more}", _width()))


@main.command("report", short_help="PNG figures and an HTML page for results.")
@click.argument("path", type=click.Path(exists=True))
@click.option("--out", default=None,
              help="Output directory (default: <file>-report/ for a file, <dir>-dataset-report/ for a directory).")
@click.option("--force", is_flag=True, help="Write into --out even if it holds the report of another input.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
def report_cmd(path, out, force, quiet):
    """PNG figures and a self-contained HTML page for a results file or dataset."""
    from ..report import build_report
    with _warnings_to_stderr():
        res = build_report(path, out=out, progress=not quiet, force=force)
    click.echo(f"{res['html']} ({_count(len(res['figures']), 'figure')})")
    for name, why in res.get("skipped", []):
        click.echo(f"  not drawn: {name}: {why}")


def _count(n: int, noun: str) -> str:
    """'1 part file', '3 part files'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


@contextlib.contextmanager
def _warnings_to_stderr():
    """Warnings raised in the block, each as one `warning: ...` line on stderr."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                _say(f"warning: {w.message}")


def _print_front(df, study, header: str, rows: int = 25, epsilon: str | None = None, wide: bool = False):
    """The front, one line per design (the first trial found), sorted by the first objective, with
    near-ties within the display epsilon collapsed; a front longer than ``rows`` is shown at
    ``rows`` designs spread evenly along it. Counts as dse.results.analysis.counts (distinct designs)."""
    import numpy as np

    from ..results.analysis import counts, epsilon_of, front, front_table
    from .text import counts_line, epsilon_note, front_block, wrap
    objs = [(o.metric, o.direction) for o in study.objectives]
    eps = epsilon_of(_parse_epsilon(epsilon, None), objs)
    c = counts(df, objs)
    width = _width()
    click.echo(wrap(header, width))
    if not c["front"]:
        click.echo(wrap(f"no feasible design among {c['designs']} designs ({', '.join(f'{m} {d}' for m, d in objs)})",
                        width))
        return
    fr = front(df, objs, epsilon=eps)
    pick = np.unique(np.linspace(0, len(fr) - 1, min(rows, len(fr))).round().astype(int))
    table = front_table(fr.iloc[pick], objs)
    dk = study.knob("draft")
    if dk is not None and dk.searched:
        given = study.drafts is not None and study.drafts.acceptance_given
        how = study.acceptance.describe() if given else "acceptance from the table or the model"
        acc = f"drafts {', '.join(dk.choices)} ({how}, task {study.workload.task.label})"
    else:
        src = study.workload.acceptance_source
        acc = (f"draft {study.drafter.label}, " + (study.acceptance.describe() if study.drafter.kind != "none"
                                                   else "no drafter")
               + (f" (from the {src.replace('+', ' and the ')})" if src in ("table", "model", "table+model") else ""))
    shown = f"showing {len(table)}, spread along it" if len(table) < len(fr) else "all shown"
    click.echo(wrap(f"{counts_line(c['front'], c['feasible'], c['designs'], c['rows'])}"
                    f"{epsilon_note(len(fr), c['front'], eps)}; {acc}; sorted by {objs[0][0]}, {shown}", width))
    click.echo(front_block(_frame_columns(table), [m for m, _ in objs], width, wide))


def _entries(kind: str):
    from ..catalog.database import load_database
    from ..catalog.specs import to_display
    db = load_database()
    rows = []
    for name in db.names(kind):
        spec = db.device(name) if kind == "device" else db.get(kind, name)   # links filled from their class
        row = to_display(spec)
        if kind == "device":        # the capacity in both units, whichever the file gives (dse.units)
            row["memory_capacity_gib"], row["memory_capacity_gb"] = _capacities(spec)
        rows.append(row)
    return rows


def _capacities(dev) -> tuple[float, float]:
    """(GiB, GB) of a device's capacity, to 4 significant digits."""
    from ..units import FACTOR
    return (float(f"{dev.memory_bytes / FACTOR['gib']:.4g}"), float(f"{dev.memory_bytes / FACTOR['gb']:.4g}"))


def _print_entries(rows: list[dict], as_json: bool, cols: list[str]) -> None:
    """A database listing: every field as JSON, or the chosen columns as a table."""
    from .text import table
    click.echo(json.dumps(rows, indent=2) if as_json else table(rows, cols))


@main.group("hw")
def hw_group():
    """Accelerators in the database."""


@hw_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field of every accelerator as JSON.")
def hw_list(as_json):
    """List accelerators (name, memory in GiB and GB, bandwidth, BF16 TFLOP/s)."""
    _print_entries(_entries("device"), as_json, ["name", "display_name", "memory_capacity_gib", "memory_capacity_gb",
                                                 "mem_bw_tb_s", "peak_tflops_bf16", "peak_tflops_fp8", "link_bw_gb_s",
                                                 "tdp_w"])


@hw_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Fields, sources and estimates as JSON.")
def hw_show(name, as_json):
    """Every field of one accelerator, with its source."""
    _show("device", name, as_json)


@main.group("models")
def models_group():
    """Models in the database."""


@models_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field of every model as JSON.")
def models_list(as_json):
    """List models (name, layers, hidden, heads, parameters)."""
    from ..catalog.database import load_database
    from ..model.transformer import total_params
    db = load_database()
    rows = []
    for r in _entries("model"):
        r["params_computed_b"] = round(total_params(db.model(r["name"])) / 1e9, 3)
        rows.append(r)
    _print_entries(rows, as_json, ["name", "kind", "num_layers", "hidden_size", "num_attention_heads",
                                   "num_kv_heads", "num_experts", "params_b", "params_computed_b"])


@models_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Fields, sources and estimates as JSON.")
def models_show(name, as_json):
    """Every field of one model, with its source."""
    _show("model", name, as_json)


@main.group("runtimes", short_help="Software stacks and their fixed costs.")
def runtimes_group():
    """Software stacks (fixed costs per kernel, step and speculative iteration)."""


@runtimes_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Every field of every runtime as JSON.")
def runtimes_list(as_json):
    """List runtimes (fixed costs in microseconds, memory reserve)."""
    _print_entries(_entries("runtime"), as_json, ["name", "display_name", "kernel_launch_us", "kernels_per_layer",
                                                  "step_overhead_us", "spec_overhead_us", "memory_reserve_fraction"])


@runtimes_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Fields, sources and estimates as JSON.")
def runtimes_show(name, as_json):
    """Every field of one runtime, with its source."""
    _show("runtime", name, as_json)


def _show(kind: str, name: str, as_json: bool):
    from ..catalog.database import load_database
    from ..catalog.specs import to_display
    db = load_database()
    spec = db.device(name) if kind == "device" else db.get(kind, name)
    fields = to_display(spec)
    try:
        raw = db.raw(kind, spec.name)
    except DseError:
        raw = {}
    sources, estimates = raw.get("sources") or {}, set(raw.get("estimates") or [])
    if kind == "device":      # the capacity in the other unit, and link numbers from the class (links.yaml)
        gib, gb = _capacities(spec)
        given = "memory_capacity_gib" if spec.capacity_gib_bytes is not None else "memory_capacity_gb"
        other = "memory_capacity_gb" if given == "memory_capacity_gib" else "memory_capacity_gib"
        fields[other] = gb if other == "memory_capacity_gb" else gib
        sources[other] = f"= {given} in {'GB (1e9 bytes)' if other.endswith('_gb') else 'GiB (2^30 bytes)'}"
        from ..catalog.yamlio import load_yaml
        classes = load_yaml(db.root / "technology" / "links.yaml")["classes"]
        for prefix, name in (("link", spec.link_class), ("scale_out", "scale-out")):
            cls = classes[name]
            for key, entry in ((f"{prefix}_latency_us", cls["latency_us"]), (f"{prefix}_efficiency", cls["efficiency"])):
                if key not in raw:
                    sources[key] = (f"link class {name}, hardware_db/technology/links.yaml: "
                                    f"{entry.get('source') or entry.get('reason')}")
                    if entry.get("estimate"):
                        estimates.add(key)
    if kind == "model":
        from ..model.transformer import total_params
        fields["params_computed_b"] = round(total_params(spec) / 1e9, 3)
    if as_json:
        click.echo(json.dumps({"fields": fields, "sources": sources, "estimates": sorted(estimates),
                               "notes": raw.get("notes")}, indent=2))
        return
    width = max(len(k) for k in fields)
    for key, value in fields.items():
        if value is None:
            continue
        mark = "  [estimate]" if key in estimates else ""
        src = f"  ({sources[key]})" if key in sources else ""
        click.echo(f"{key:<{width}}  {value}{mark}{src}")
    if raw.get("notes"):
        click.echo(f"\nnotes: {raw['notes']}")


@main.group("acceptance", short_help="Published acceptance statistics and the acceptance model.")
def acceptance_group():
    """The published acceptance table (hardware_db/acceptance/published.csv) and the model fitted on it."""


_ACC_COLS = ["id", "target", "draft", "kind", "task", "T", "shape", "statistic", "alpha", "tau", "fit"]


def _acc_rows(target, draft, task):
    from ..acceptance.fit import stored_fit
    from ..catalog.acceptance import filter_rows, load_table
    f = stored_fit()
    out = []
    for r in filter_rows(load_table(), target=target, draft=draft, task=task):
        conv = f.rows.get(r.id, {})
        out.append(dict(id=r.id, target=r.target_model or r.target, draft=r.draft_model or r.draft,
                        kind=r.draft_kind, task=r.task, T=r.temperature, shape=r.shape,
                        statistic=f"{r.stat_kind} {r.stat_value:g}" if r.stat_value is not None else r.stat_kind,
                        alpha=conv.get("alpha"), tau=conv.get("tau"), fit="yes" if r.fit else "no", row=r, conv=conv))
    return out


@acceptance_group.command("list")
@click.option("--target", default=None,
              help="Target: a dse model name or part of the published name [default: every target].")
@click.option("--draft", default=None,
              help="Draft: a kind (eagle3, model, ngram, ...), a dse model or part of a name [default: every draft].")
@click.option("--task", "text_task", default=None,
              help="chat, code, math, summarization, translation, qa, rag, mix [default: every task].")
@click.option("--json", "as_json", is_flag=True, help="Every field of the rows as JSON.")
def acceptance_list(target, draft, text_task, as_json):
    """List published acceptance rows (alpha and tau as the model uses them)."""
    import dataclasses

    from .text import table
    rows = _acc_rows(target, draft, text_task)
    if as_json:
        click.echo(json.dumps([{**dataclasses.asdict(r["row"]), **{"alpha_model": r["conv"].get("alpha"),
                                 "tau_model": r["conv"].get("tau"), "conversion": r["conv"].get("how")}}
                               for r in rows], indent=2))
        return
    click.echo(table([{k: v for k, v in r.items() if k in _ACC_COLS} for r in rows], _ACC_COLS))
    click.echo(f"{len(rows)} rows (`dse acceptance show ID` for the source and the conversion)")


@acceptance_group.command("show")
@click.argument("ident", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The row, its conversion and its held-out prediction as JSON.")
def acceptance_show(ident, as_json):
    """One row with its source, how it converts to the model's alpha, and its leave-one-source-out prediction."""
    import dataclasses

    from ..acceptance.fit import stored_fit
    from ..catalog.acceptance import load_table, row_by_id
    r = row_by_id(load_table(), ident)
    f = stored_fit()
    conv, loso = f.rows.get(r.id, {}), f.loso.get(r.id)
    if as_json:
        click.echo(json.dumps({"row": dataclasses.asdict(r), "conversion": conv, "held_out": loso}, indent=2))
        return
    for key, value in dataclasses.asdict(r).items():
        if value not in (None, "", ()):
            shown = ("yes" if value else "no") if isinstance(value, bool) else \
                ";".join(f"{x:g}" for x in value) if isinstance(value, tuple) else value
            click.echo(f"{key:<16}{shown}")
    click.echo(f"{'conversion':<16}{conv.get('how', '-')}")
    if loso:
        click.echo(f"{'held out':<16}with {loso['source']} left out of the fit, the model predicts tau "
                   f"{loso['tau_pred']:.3f} against {loso['tau_obs']:.3f} ({100 * loso['error']:+.1f}%)")


@acceptance_group.command("fit")
@click.option("--write", is_flag=True, help="Store the fit in hardware_db/acceptance/fit.json.")
@click.option("--json", "as_json", is_flag=True, help="Coefficients, bands and held-out errors as JSON.")
def acceptance_fit(write, as_json):
    """Fit the acceptance model on the table and print its coefficients and leave-one-source-out error per method."""
    from ..acceptance import fit as acceptance
    f = acceptance.fit()
    if write:
        click.echo(f"wrote {acceptance.write_fit(f)}", err=True)
    rep = acceptance.report(f)
    click.echo(json.dumps(rep, indent=2) if as_json else acceptance.format_report(rep))


@main.command("validate", short_help="Model vs public measurements (calibration).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (rows, summary, fitted values).")
def validate_cmd(as_json):
    """Predicted vs measured for every row of hardware_db/measurements (docs/calibration.md)."""
    from ..validation import comparison
    rep = comparison.report()
    click.echo(json.dumps(rep, indent=2) if as_json else comparison.format_report(rep))
