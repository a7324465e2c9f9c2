"""Attack suite, "Reliability IV": hints that lose work, and workers of one shared study that start together.

Before the fixes: the missing-task warning of array tasks run with --n-trials 200 printed a command
without it, which was refused, and the refusal advised --force (which deletes the finished tasks);
four workers starting together on an empty study each ran the pre-search and enqueued its seeds
(770 WAITING trials for 400, then FAIL and WAITING trials left), and rewrote one ``dse_runs`` list
(a worker's runs lost); SIGTERM during the pre-search killed the run without its line.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from attackkit import cli, one_line, server_url, write_study

from dse.results.load import load_results
from dse.search.runner import derive_seed
from dse.search.seeds import seed_count
from dse.search.workers import worker_process
from dse.study import load_study

DSE = str(Path(sys.executable).with_name("dse"))


def _command(text: str) -> list[str]:
    """The first `dse ...` command quoted in ``text`` (the one given as an example), as argv."""
    m = re.search(r"e\.g\. `(dse [^`]*)`", text) or re.search(r"`(dse [^`]*)`", text)
    assert m, text
    return shlex.split(m.group(1))


# --------------------------------------------------------------------------- hints that complete the job

@pytest.fixture
def tasks_with_flags(tmp_path):
    """Three array tasks run with flags other than the study's (as the SLURM recipe with N_TRIALS=200),
    then task 1's part lost."""
    study = write_study(tmp_path)           # n_trials 24, sampler random, seed 0 in the file
    out = tmp_path / "tasks"
    code, _, err, _ = cli("run", study, "--task", "all/3", "--n-trials", 200, "--sampler", "qmc", "--seed", 7,
                          "--out", out, "--quiet")
    assert code == 0, err
    lost = out / "task-00001-of-00003.parquet"
    before = pq.read_table(lost).to_pandas()
    lost.unlink()
    return study, out, before


def test_the_missing_task_hint_followed_as_printed_completes_the_job(tasks_with_flags):
    study, out, before = tasks_with_flags
    with pytest.warns(UserWarning, match="missing tasks 1 of 3") as caught:
        load_results(out)
    argv = _command(str(caught[0].message))
    assert argv[:2] == ["dse", "run"] and "1/3" in argv
    code, _, err, _ = cli(*argv[1:], "--quiet")
    assert code == 0, err
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = load_results(out)
    assert len(df) == 600
    code, out, _, _ = cli(*[a.replace("1/3", "all/3") for a in argv[1:]], "--quiet")
    assert code == 0 and "this command with --task I/3 instead of --task all/3 re-runs task I" in out, out
    again = df[df["trial"].between(200, 399)].sort_values("trial").reset_index(drop=True)
    cols = ["trial", "seed", "sampler", "spec_ms_per_token"]
    assert again[cols].astype(str).equals(before.sort_values("trial").reset_index(drop=True)[cols].astype(str))


def test_the_refusal_names_the_flags_that_finish_and_never_deletes_silently(tasks_with_flags):
    study, out, _ = tasks_with_flags
    line = one_line(*cli("run", study, "--task", "1/3", "--out", out, "--quiet"), want=2)
    assert "--force" in line and "2 finished parts are deleted" in line, line
    flags = re.search(r"the flags it was started with: ([^;]*);", line).group(1)
    assert flags == "--n-trials 200 --sampler qmc --seed 7", line
    assert len(list(out.glob("task-*.parquet"))) == 2                 # nothing removed by the refusal
    code, _, err, _ = cli("run", study, "--task", "1/3", *flags.split(), "--out", out, "--quiet")
    assert code == 0, err
    assert len(load_results(out)) == 600


def test_the_idle_shard_hint_is_the_plan_of_this_grid(tmp_path):
    study = write_study(tmp_path)
    code, _, err, _ = cli("sweep", study, "--points", 2, "--chunk-size", 100000, "--shard", "5/64",
                          "--out", tmp_path / "s", "--quiet")
    assert code == 0 and "shard 5/64 has no work" in err, err
    argv = _command(err)
    assert argv == ["dse", "sweep", str(study), "--plan", "64", "--points", "2", "--chunk-size", "100000"], err
    code, out, err, _ = cli(*argv[1:])
    assert code == 0 and out.strip() == "1", (out, err)


def test_the_no_parquet_hint_is_the_export_that_writes_the_study(tmp_path, shm):
    study = write_study(tmp_path)
    url_file = tmp_path / "storage.txt"
    url_file.write_text(f"journal:{shm / 'q.journal'}\n")
    for how, env in ((("--storage-file", url_file), None), ((), {"DSE_STORAGE": f"journal:{shm / 'e.journal'}"})):
        code, out, err, _ = cli("run", study, *how, "--no-parquet", "--quiet", env=env)
        assert code == 0, err
        argv = _command(out)
        assert argv[:2] == ["dse", "export"] and "URL" not in argv and "PATH" not in argv, out
        code, out2, err, _ = cli(*argv[1:], env=env)
        assert code == 0, err
        assert len(pq.read_table(tmp_path / "results" / "q.parquet")) == 24
        (tmp_path / "results" / "q.parquet").unlink()


# --------------------------------------------------------------------------- workers that start together

#: the environment variable holding each server's URL (.ci/run sets them)
SERVERS = {"postgres": "DSE_TEST_PG_URL", "mysql": "DSE_TEST_MYSQL_URL"}


@pytest.fixture(params=["journal", pytest.param("postgres", marks=pytest.mark.servers),
                        pytest.param("mysql", marks=pytest.mark.servers)])
def storage(request, shm):
    if request.param == "journal":
        return f"journal:{shm / 'shared.journal'}"
    return server_url(SERVERS[request.param])


def _worker(spec, url, i, barrier, results):
    """Worker i (DSE_WORKER=i) in a forked process, started in the same instant as the others."""
    try:
        os.environ["DSE_WORKER"] = str(i)
        from dse.search.runner import run_study
        barrier.wait(timeout=120)
        res = run_study(spec, storage=url, progress=False, write=False)       # as --no-parquet
        results.put(("ok", i, res.n_new))
    except BaseException as exc:    # noqa: BLE001 - reported to the parent
        results.put(("error", i, f"{type(exc).__name__}: {exc}"))


@pytest.mark.parametrize("storage", ["journal", pytest.param("mysql", marks=pytest.mark.servers)], indirect=True)
def test_four_workers_on_an_empty_study_seed_it_once_and_end_with_exactly_the_total(tmp_path, storage):
    # (on MariaDB and the journal: PostgreSQL's four workers are tests/test_shared_study.py's)
    """Sampler auto: one worker seeds (seed_count designs), the others wait; the study ends with 80
    COMPLETE trials and nothing else, and the export's runs name all four workers."""
    import optuna

    from dse.storage.backends import resolve_storage
    name = f"together-{uuid.uuid4().hex[:8]}"
    study = write_study(tmp_path, **{"name": name, "search.n_trials": 80, "search.batch_size": 10,
                                     "search.sampler": "auto"})
    spec = load_study(study)
    warm = resolve_storage(None, storage, tmp_path / "x")[0]      # drivers imported before the fork
    getattr(getattr(warm, "engine", None), "dispose", lambda: None)()
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(spec, storage, i, barrier, results)) for i in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=900) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [g[0] for g in got] == ["ok"] * 4, got
    store = resolve_storage(None, storage, tmp_path / "x")[0]
    ostudy = optuna.load_study(study_name=name, storage=store)
    states = [t.state.name for t in ostudy.get_trials(deepcopy=False)]
    assert states.count("COMPLETE") == 80 and len(states) == 80, {s: states.count(s) for s in set(states)}
    assert sum(g[2] for g in got) == 80
    assert ostudy.user_attrs["dse_seeds"]["designs"] == seed_count(80, 10)
    out = tmp_path / "export.parquet"
    code, _, err, _ = cli("export", "--storage", storage, "--study", name, "--out", out)
    assert code == 0, err
    import json
    runs = json.loads(pq.read_schema(out).metadata[b"dse"])["runs"]
    seeds = {0} | {derive_seed(0, i) for i in (1, 2, 3)}
    assert {r["seed"] for r in runs} == seeds and len(runs) == 4, runs
    df = pq.read_table(out).to_pandas()
    assert len(df) == 80 and set(df["seed"]) <= seeds


def test_runs_are_one_record_per_worker_merged_on_read_and_the_old_list_still_reads():
    from dse.search.trials import study_runs
    old = [{"sampler": "nsga2", "seed": 0, "first_trial": 0}, {"sampler": "tpe", "seed": 0, "first_trial": 50}]
    attrs = {"dse_runs": old,
             "dse_run:b": {"sampler": "random", "seed": 5, "first_trial": 80, "started": 2.0},
             "dse_run:a": {"sampler": "random", "seed": 4, "first_trial": 80, "started": 1.0},
             "dse_run:c": {"sampler": "random", "seed": 4, "first_trial": 90, "started": 3.0},  # a resume of a
             "dse_run:d": {"sampler": "tpe", "seed": 0, "trials": [[0, 3]]},       # older dse: trials only
             "dse_worker:x": {"pid": 1}, "dse_space": "f00"}
    assert study_runs(attrs) == old + [{"sampler": "random", "seed": 4, "first_trial": 80},
                                       {"sampler": "random", "seed": 5, "first_trial": 80},
                                       {"sampler": "random", "seed": 4, "first_trial": 90}]
    assert study_runs({"dse_runs": old}) == old
    assert study_runs({"dse_run:a": {"sampler": "auto", "seed": 0, "first_trial": 0},
                       "dse_run:b": {"sampler": "auto", "seed": 0, "first_trial": 40}}) == \
        [{"sampler": "auto", "seed": 0, "first_trial": 0}]                    # a resume continues its run


class _Study:
    """The user attributes of a study, as Optuna's Study gives and sets them."""

    def __init__(self, attrs=None):
        self.user_attrs = dict(attrs or {})

    def set_user_attr(self, key, value):
        self.user_attrs[key] = value


class _Stop:
    requested = False

    def check(self):
        pass


def test_a_live_seeding_claim_makes_the_others_wait_and_a_dead_one_does_not():
    from dse.search.claims import SEED_KEY, SEEDS_ATTR, others_asking, seed_once, seeding_claims
    me = worker_process() or {}
    now = time.time()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gone = {**me, "pid": child.pid, "start": 0} if me else {}
    live = {f"{SEED_KEY}a": {**me, "beat": now}}
    assert seeding_claims(live, f"{SEED_KEY}me", now, 60) == [f"{SEED_KEY}a"]
    assert seeding_claims({f"{SEED_KEY}a": {**me, "beat": now - 61}}, None, now, 60) == []      # silent
    assert seeding_claims({f"{SEED_KEY}a": {**me, "beat": None}}, None, now, 60) == []          # withdrawn
    if me:
        assert seeding_claims({f"{SEED_KEY}a": {**gone, "beat": now}}, None, now, 60) == []     # exited
    # a live claim: this worker waits until the seeds are in, and seeds nothing itself
    study = _Study(live)
    calls = []

    def meanwhile():
        calls.append("own pre-search")
        study.user_attrs[SEEDS_ATTR] = {"designs": 12}           # the other worker finished
    assert not seed_once(study, f"{SEED_KEY}me", me, lambda beat: calls.append("seeded"), timeout_s=60,
                         stop=_Stop(), meanwhile=meanwhile)
    assert calls == ["own pre-search"]
    # none live: it seeds, and withdraws its claim after
    study = _Study({f"{SEED_KEY}a": {**me, "beat": now - 600}})
    assert seed_once(study, f"{SEED_KEY}me", me, lambda beat: beat() or True, timeout_s=60, stop=_Stop())
    assert study.user_attrs[f"{SEED_KEY}me"]["beat"] is None
    # what others announced they may ask is taken from the budget while their announcement is live
    attrs = {"dse_worker:a": {**me, "asking": 25, "asked_at": now, "trials": []},
             "dse_worker:b": {**me, "asking": 7, "asked_at": now - 120, "trials": []},
             "dse_worker:c": {**me, "trials": [[0, 3]]}, "dse_worker:me": {**me, "asking": 9, "asked_at": now}}
    assert others_asking(attrs, "dse_worker:me", now, 60) == 25


# --------------------------------------------------------------------------- signals during the pre-search

#: `dse ARGS` with the pre-search slowed to 0.3 s a part and a file written when it starts
_SLOW = """
import sys, time
from pathlib import Path
import dse.search.presearch as ps
real, mark = ps.score_with_violation, Path(sys.argv[1])
def slow(*a, **k):
    mark.touch()
    time.sleep(0.3)
    return real(*a, **k)
ps.score_with_violation = slow
from dse.cli import main
sys.argv = ["dse", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("how,sig", [((), signal.SIGTERM), (("--task", "0/2"), signal.SIGTERM),
                                     (("--no-parquet",), signal.SIGINT)])
def test_a_signal_during_the_presearch_prints_the_line_and_the_same_command_finishes(tmp_path, shm, how, sig):
    study = write_study(tmp_path, **{"search.sampler": "auto"})
    mark = tmp_path / "presearch-started"
    store = () if how and how[0] == "--task" else ("--storage", str(shm / "q.journal"))
    args = ["run", str(study), *store, *how, "--out", str(tmp_path / ("tasks" if how else "q.parquet")), "--quiet"]
    env = {**os.environ, "COLUMNS": "400"}
    proc = subprocess.Popen([sys.executable, "-c", _SLOW, str(mark), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (out, err)
    assert "Traceback" not in err
    name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT"
    lines = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {name}: ") and "run the same command again" in \
        lines[0], err
    r = subprocess.run([DSE, *args], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
