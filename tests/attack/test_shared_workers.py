"""Attack suite, "Reliability IV": hints that lose work, and workers of one shared study that start together.

Before the fixes: the missing-task warning of array tasks run with --n-trials 200 printed a command
without it, which was refused, and the refusal advised --force (which deletes the finished tasks);
four workers starting together on an empty study each ran the pre-search and enqueued its seeds
(770 WAITING trials for 400, then FAIL and WAITING trials left), and rewrote one ``dse_runs`` list
(a worker's runs lost); SIGTERM during the pre-search killed the run without its line.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from attackkit import cli, one_line, write_study

from dse.results.load import load_results

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


# --------------------------------------------------------------------------- runs of a shared study

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
