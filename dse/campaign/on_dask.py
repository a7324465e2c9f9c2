"""Dask: the shards of a sweep or the array tasks of a study as Dask tasks on a cluster.

``--dask ADDRESS`` connects to a running scheduler (``tcp://host:8786``; dask-jobqueue starts
one on SLURM/PBS); ``--dask local:N`` starts a LocalCluster of N single-threaded worker
processes for the call. Each Dask task is one `dse sweep --shard I/N` or `dse run --task I/N`,
writing the same dataset (part names, manifest) as the command-line array would.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..errors import RuntimeFailure, SpecError, install_hint


@contextlib.contextmanager
def dask_client(address: str):
    """A dask.distributed Client for ``address`` ('local:N' starts and later stops a LocalCluster)."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise SpecError(None, "--dask", address, f"needs dask.distributed: {install_hint('dask')}") from None
    if address.startswith("local:"):
        try:
            n = int(address.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise SpecError(None, "--dask", address, "expected local:N with N >= 1 workers, or a scheduler address")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
        try:
            yield client
        finally:
            client.close()
            cluster.close()
        return
    if "://" not in address and ":" not in address:
        raise SpecError(None, "--dask", address, "expected a scheduler address (tcp://HOST:PORT) or local:N")
    try:
        client = Client(address, timeout="10s")
    except ValueError as exc:           # a malformed address: bad input
        raise SpecError(None, "--dask", address, f"not a scheduler address ({exc})") from None
    except (OSError, TimeoutError) as exc:      # nobody answers there: a runtime failure, exit 1
        raise RuntimeFailure(f"--dask {address}: cannot reach the Dask scheduler ({exc})") from None
    try:
        yield client
    finally:
        client.close()


def _sweep_one(study_file: str, points, shard, out, chunk_size):
    from .grid import sweep
    res = sweep(study_file, points=points, shard=shard, out=out, chunk_size=chunk_size, progress=False)
    return res.rows_written, len(res.parts)


def _task_one(study_file: str, i: int, n: int, out, n_trials, sampler, seed):
    from ..search.runner import run_tasks
    res = run_tasks(study_file, n, which=[i], out=out, n_trials=n_trials, sampler=sampler, seed=seed,
                    progress=False)
    return len(res[0].frame) if res else 0


def sweep_on_dask(address: str, study_file: str | Path, shards: int, *, points=None, out=None,
                  chunk_size: int | None = None, force: bool = False) -> tuple[int, int]:
    """Every shard I of N as one Dask task; returns (rows written, part files on disk). The grid,
    the output and (with ``force``) another dataset there are dealt with here, once, before any
    task is submitted."""
    from .grid import prepare_sweep
    with dask_client(address) as client:
        prepare_sweep(study_file, points=points, shards=shards, out=out, chunk_size=chunk_size, force=force)
        futures = [client.submit(_sweep_one, str(study_file), points, (i, shards), out, chunk_size,
                                 pure=False) for i in range(shards)]
        done = client.gather(futures)
    return sum(r for r, _ in done), sum(p for _, p in done)


def tasks_on_dask(address: str, study_file: str | Path, tasks: int, *, which=None, out=None, n_trials=None,
                  sampler=None, seed=None, force: bool = False) -> int:
    """Array tasks (all, or ``which``) as Dask tasks; returns the rows written. The output and
    (with ``force``) another dataset there are dealt with here, once, before any task is submitted."""
    from ..search.runner import prepare_tasks
    which = list(range(tasks)) if which is None else which
    with dask_client(address) as client:
        prepare_tasks(study_file, tasks, out=out, n_trials=n_trials, sampler=sampler, seed=seed, force=force)
        futures = [client.submit(_task_one, str(study_file), i, tasks, out, n_trials, sampler, seed, pure=False)
                   for i in which]
        return sum(client.gather(futures))
