"""Issue 12, scale-out: signals, stale locks, log-friendly progress, array tasks, manifests."""

import io
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import dse.results.analysis as da
from dse.campaign.grid import sweep
from dse.cli.commands import main
from dse.process.progress import Progress, eta_text
from dse.search.runner import derive_seed, parse_task, run_study, run_tasks
from dse.search.workers import fail_stale_trials
from dse.storage.backends import redact_url
from dse.study import load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
DSE = [str(Path(sys.executable).with_name("dse"))]


def small_study(tmp_path, n_trials=96, batch_size=32, name=None):
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update(n_trials=n_trials, batch_size=batch_size)
    raw["output"] = str(tmp_path / "q.parquet")
    if name:
        raw["name"] = name
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "quick.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study(p)


def brute_front(df):
    """Feasible rows no other feasible row dominates (both objectives minimised)."""
    feas = df[df["feasible"]]
    v = feas[["spec_ms_per_token", "cost_usd"]].to_numpy()
    dominated = ((v[None, :, :] <= v[:, None, :]).all(-1) & (v[None, :, :] < v[:, None, :]).any(-1)).any(1)
    return set(feas["trial"][~dominated])


def wait_for(pred, timeout=60):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.05)


def spawn(args, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(DSE + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)


# --------------------------------------------------------------------------- progress

def test_progress_off_a_terminal_is_plain_lines_with_rate_and_eta():
    now = [0.0]
    out = io.StringIO()
    bar = Progress(100, 0, unit="trials", label="dse run", stream=out, every_s=5.0, clock=lambda: now[0])
    for _ in range(10):          # 10 updates of 5 trials, one per second
        now[0] += 1.0
        bar.update(5)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # the start, then t = 5 s and t = 10 s (updates at most every 5 s), nothing else
    assert len(lines) == 3
    # at t = 10 s: 50 of 100 done, 50 / 10 s = 5 trials/s, ETA = 50 left / 5 per s = 10 s
    assert lines[-1] == "[dse run] 50/100 trials (50%), 5 trials/s, ETA 10 s"
    assert eta_text(7200) == "2.0 h" and eta_text(600) == "10 min"


# --------------------------------------------------------------------------- signals

@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_to_sweep_keeps_finished_parts_and_rerun_does_only_the_rest(tmp_path, sig, code):
    full = sweep(load_study(QUICK), points=3, out=tmp_path / "full", chunk_size=250, progress=False)
    out = tmp_path / "sw"
    args = ["sweep", str(QUICK), "--points", "3", "--chunk-size", "250", "--out", str(out)]
    p = spawn(args, tmp_path)
    wait_for(lambda: len(list(out.glob("part-*.parquet"))) >= 2)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == code, err
    assert "Aborted" not in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"interrupted by {sig.name}: ")
    parts = sorted(out.glob("part-*.parquet"))
    assert not list(out.glob(".*tmp")), "no temp file left behind"
    n_parts = -(-full.total_points // 250)     # 5832 grid points in 24 parts
    assert 2 <= len(parts) < n_parts                 # stopped part-way (4 of 24 here)
    with pytest.warns(UserWarning, match=f"incomplete dataset: {n_parts - len(parts)} of {n_parts} parts missing"):
        da.load_results(out)
    r = subprocess.run(DSE + args + ["--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{len(parts)} already there" in r.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = da.load_results(out).set_index("trial").sort_index()
    ref = da.load_results(tmp_path / "full").set_index("trial").sort_index()
    pd.testing.assert_frame_equal(got.drop(columns=["datetime_start", "datetime_complete"]),
                                  ref.drop(columns=["datetime_start", "datetime_complete"]))


def test_sigterm_to_run_writes_finished_trials_and_rerun_completes(tmp_path, shm):
    s = small_study(tmp_path, n_trials=300, batch_size=50)
    journal = shm / "q.journal"
    p = spawn(["run", s.path, "--storage", str(journal)], tmp_path)
    wait_for(lambda: journal.exists() and journal.stat().st_size > 200_000)     # ~60 trials told
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "Aborted" not in err and "Traceback" not in err and "\r" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted by SIGTERM: ") and "finished trials written to" in last
    first = pd.read_parquet(tmp_path / "q.parquet")
    assert 0 < len(first) < 300 and len(first) % 50 == 0      # whole batches only
    assert not (tmp_path / "q.journal.lock").exists()
    res = run_study(s, storage=str(journal), progress=False)
    assert len(res.frame) == 300 and res.frame["trial"].is_unique
    assert res.n_new == 300 - len(first)
    before = first.set_index("trial")["spec_ms_per_token"]
    after = res.frame.set_index("trial").loc[before.index, "spec_ms_per_token"]
    pd.testing.assert_series_equal(after, before)          # no finished trial lost or changed


def test_stale_journal_lock_is_cleared_with_one_line(tmp_path, shm, capsys):
    s = small_study(tmp_path, n_trials=32)
    journal = shm / "q.journal"
    run_study(s, storage=str(journal), progress=False)
    lock = Path(str(journal) + ".lock")
    os.symlink(journal, lock)                       # what a process killed mid-append leaves
    t0 = time.monotonic()
    res = run_study(s, n_trials=64, storage=str(journal), progress=False)
    assert time.monotonic() - t0 < 20                # Optuna alone waits its 30 s grace period
    assert len(res.frame) == 64 and not os.path.lexists(lock)
    assert "removed a stale journal lock" in capsys.readouterr().err


# --------------------------------------------------------------------------- heartbeats

def test_running_trial_without_heartbeat_is_failed_and_reasked(tmp_path):
    import optuna
    from optuna.trial import TrialState
    study = optuna.create_study(directions=["minimize"])
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    dead, alive = study.ask(dist), study.ask(dist)
    later = time.time() + 600                   # look 10 minutes ahead: both started long "ago"
    alive.set_user_attr("dse_heartbeat", later - 30)    # beat 30 s "ago": alive
    dead.set_user_attr("dse_heartbeat", later - 90)     # beat 90 s "ago": stale at a 60 s timeout
    assert fail_stale_trials(study, timeout_s=60, now=later) == 1
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING]
    assert study.get_trials()[2].system_attrs["fixed_params"] == dead.params   # its design is asked again
    assert study.ask(dist).params == dead.params


def test_redact_url():
    assert redact_url("postgresql+psycopg://dse:s3cret@db:5432/x") == "postgresql+psycopg://dse:***@db:5432/x"
    assert redact_url("postgresql+psycopg://dse@db/x") == "postgresql+psycopg://dse@db/x"
    assert redact_url("/tmp/a.journal") == "/tmp/a.journal"


# --------------------------------------------------------------------------- array tasks

def test_parse_task_and_slurm(monkeypatch):
    assert parse_task("3/8") == (3, 8) and parse_task("all/4") == ("all", 4)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "8")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    assert parse_task("auto") == (4, 8)
    from dse.errors import SpecError
    for bad in ("8/8", "x/2", "1/0"):
        with pytest.raises(SpecError, match="--task"):
            parse_task(bad)


def test_eight_tasks_give_the_global_front_and_a_rerun_replaces(tmp_path):
    s = small_study(tmp_path, n_trials=250, batch_size=50)
    out = tmp_path / "tasks"
    res = run_tasks(s, 8, out=out, progress=False)
    assert [r.path.name for r in res] == [f"task-{i:05d}-of-00008.parquet" for i in range(8)]
    # each task's own seed: SeedSequence([42, I]) words, all different
    seeds = [int(r.frame["seed"].iloc[0]) for r in res]
    assert seeds == [derive_seed(s.seed, i) for i in range(8)] and len(set(seeds)) == 8
    df = da.load_results(out)
    assert len(df) == 2000 and df["trial"].is_unique                   # 8 x 250, numbers I x 250 + n
    assert sorted(df["trial"]) == list(range(2000))
    front = set(df["trial"][df["is_pareto"].fillna(False).astype(bool)])
    # one row per point of the front, the first found (lowest trial): brute force, then repeats out
    brute = df[df["trial"].isin(brute_front(df))].sort_values("trial")
    first = set(brute.drop_duplicates(subset=["spec_ms_per_token", "cost_usd"])["trial"])
    assert front == first == set(da.front(df)["trial"])
    assert set(da.front(df, distinct=False)["trial"]) == brute_front(df)
    per_task = sum(int(r.frame["is_pareto"].fillna(False).sum()) for r in res)
    assert per_task > len(front)          # per-task flags are not the global ones
    t3 = pd.read_parquet(out / "task-00003-of-00008.parquet")
    again = run_tasks(s, 8, which=[3], out=out, progress=False)[0]
    assert len(da.load_results(out)) == 2000                           # replaced, not duplicated
    pd.testing.assert_series_equal(again.frame["spec_ms_per_token"], t3["spec_ms_per_token"],
                                   check_names=False)                  # same seed, same trials


def test_missing_task_is_named_by_readers_and_all_does_only_it(tmp_path):
    s = small_study(tmp_path, n_trials=40, batch_size=20)
    out = tmp_path / "tasks"
    r = CliRunner().invoke(main, ["run", s.path, "--task", "all/4", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    (out / "task-00002-of-00004.parquet").unlink()
    with pytest.warns(UserWarning, match=r"1 of 4 parts missing \(task-00002-of-00004.parquet\); missing tasks 2"):
        df = da.load_results(out)
    assert len(df) == 120
    r = CliRunner().invoke(main, ["pareto", str(out)])
    assert r.exit_code == 0 and "warning: " in r.output and "missing tasks 2 of 4" in r.output
    r = CliRunner().invoke(main, ["run", s.path, "--task", "all/4", "--out", str(out), "--quiet"])
    assert r.exit_code == 0 and r.output.count(".parquet (40 trials") == 1 and "task-00002" in r.output
    r = CliRunner().invoke(main, ["run", s.path, "--task", "0/5", "--out", str(out), "--quiet"])
    assert r.exit_code == 2 and "holds another dataset (tasks 4 -> 5)" in r.output
