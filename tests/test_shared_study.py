"""Issue 12: one shared Optuna study, many worker processes, on PostgreSQL and on a journal file.

PostgreSQL tests need a server: DSE_TEST_PG_URL=postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB,
MySQL/MariaDB ones DSE_TEST_MYSQL_URL=mysql+pymysql://USER:PASSWORD@HOST:PORT/DB (`.ci/run` starts
both from Debian's packages). Without them they skip with that reason, unless
DSE_REQUIRE_SERVERS=1 (set by `.ci/run`), which turns the skip into a failure.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from dse.cli.commands import main
from dse.search.runner import derive_seed

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
DSE = str(Path(sys.executable).with_name("dse"))


def _password(url: str) -> str | None:
    m = re.search(r"://[^:/@]*:([^@/]+)@", url)
    return m.group(1) if m else None


SERVERS = {"postgres": ("DSE_TEST_PG_URL", "PostgreSQL", "postgresql+psycopg"),
           "mysql": ("DSE_TEST_MYSQL_URL", "MySQL/MariaDB", "mysql+pymysql")}


@pytest.fixture(params=["journal", pytest.param("postgres", marks=pytest.mark.servers),
                        pytest.param("mysql", marks=pytest.mark.servers)])
def storage(request, shm):
    """A fresh shared storage URL: a journal file (on tmpfs when there is one), PostgreSQL or MySQL."""
    if request.param == "journal":
        yield f"journal:{shm / 'shared.journal'}"
        return
    var, server, scheme = SERVERS[request.param]
    url = os.environ.get(var)
    if not url:
        msg = f"no {server} server: set {var}={scheme}://USER:PASSWORD@HOST:PORT/DB (.ci/run does)"
        if os.environ.get("DSE_REQUIRE_SERVERS") == "1":
            pytest.fail(msg + "; DSE_REQUIRE_SERVERS=1 makes this a failure")
        pytest.skip(msg)
    yield url


def study_file(tmp_path, n_trials=160, batch_size=20):
    raw = yaml.safe_load(QUICK.read_text())
    raw["name"] = f"shared-{uuid.uuid4().hex[:10]}"            # PostgreSQL outlives the test
    raw["search"].update(n_trials=n_trials, batch_size=batch_size)
    raw["output"] = str(tmp_path / "q.parquet")
    p = tmp_path / "quick.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p, raw["name"]


def workers(p, url, tmp_path, n=4, extra=()):
    """n `dse run` processes on one storage (random sampler: NSGA-II's per-ask history reads
    double the time on a database, and coordination is what these tests check)."""
    return [subprocess.Popen([DSE, "run", str(p), "--storage", url, "--out", str(tmp_path / f"w{i}.parquet"),
                              "--sampler", "random", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "DSE_WORKER": str(i)})
            for i in range(n)]


def trial_states(url, name):
    import optuna

    from dse.storage.backends import resolve_storage
    store, _ = resolve_storage(None, url, Path("unused"))
    trials = optuna.load_study(study_name=name, storage=store).get_trials(deepcopy=False)
    return [(t.number, t.state.name) for t in trials]


def check_no_password(url, *texts):
    pw = _password(url)
    for t in texts:
        assert pw is None or pw not in t


#: the heaviest coordination tests on the journal and PostgreSQL only: MariaDB runs the same Optuna
#: RDB storage code, and keeps its own share of the suite (a wrong study name here, four workers seeding
#: an empty study in tests/attack/test_shared_workers.py, the missing-rights checks)
JOURNAL_AND_POSTGRES = pytest.mark.parametrize(
    "storage", ["journal", pytest.param("postgres", marks=pytest.mark.servers)], indirect=True)


@JOURNAL_AND_POSTGRES
def test_four_workers_reach_exactly_the_total_and_export(tmp_path, storage):
    p, name = study_file(tmp_path)
    procs = workers(p, storage, tmp_path)
    outs = [pr.communicate(timeout=600) for pr in procs]
    assert [pr.returncode for pr in procs] == [0, 0, 0, 0], outs
    states = trial_states(storage, name)
    complete = [n for n, s in states if s == "COMPLETE"]
    assert len(complete) == 160 and len(set(complete)) == 160          # exactly the total, no overshoot
    assert not [n for n, s in states if s in ("RUNNING", "WAITING")]
    out = tmp_path / "export.parquet"
    r = CliRunner().invoke(main, ["export", "--storage", storage, "--study", name, "--out", str(out)])
    assert r.exit_code == 0, r.output
    df = pq.read_table(out).to_pandas()
    assert len(df) == 160 and sorted(df["trial"]) == sorted(complete)
    # worker i > 0 samples with derive_seed(0, i): no two workers propose the same designs (with
    # one seed, 4 random-sampler workers proposed 192 repeats in 400), and each row names the seed
    # of the worker that told it (its own dse_run record), not the last run's
    params = [c for c in df.columns if c.startswith("params_")]
    assert len(df.drop_duplicates(params)) == 160
    seeds = {0} | {derive_seed(0, i) for i in (1, 2, 3)}
    assert set(df["seed"]) <= seeds and len(set(df["seed"])) >= 2
    meta = pq.read_schema(out).metadata[b"dse"].decode()
    assert json.loads(meta)["study"]["name"] == name
    check_no_password(storage, r.output, meta, *(o + e for o, e in outs),
                      *(pq.read_schema(tmp_path / f"w{i}.parquet").metadata[b"dse"].decode() for i in range(4)))


@JOURNAL_AND_POSTGRES
def test_sigkill_of_one_worker_then_rerun_reaches_the_total(tmp_path, storage):
    p, name = study_file(tmp_path, n_trials=120)
    # a batch of 25 takes ~0.5 s on a journal, several seconds on a busy database server
    beat = "5" if storage.startswith("journal:") else "20"
    procs = workers(p, storage, tmp_path, extra=("--heartbeat-timeout", beat))
    t0 = time.monotonic()
    while sum(s == "COMPLETE" for _, s in _states_or_empty(storage, name)) < 40:
        assert time.monotonic() - t0 < 300
        time.sleep(0.2)
    procs[0].send_signal(signal.SIGKILL)
    outs = [pr.communicate(timeout=600) for pr in procs]
    assert procs[0].returncode == -signal.SIGKILL
    assert [pr.returncode for pr in procs[1:]] == [0, 0, 0], [e[-3000:] for _, e in outs]
    r = subprocess.run([DSE, "run", str(p), "--storage", storage, "--heartbeat-timeout", beat, "--quiet",
                        "--sampler", "random",
                        "--out", str(tmp_path / "again.parquet")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    states = trial_states(storage, name)
    complete = sorted(n for n, s in states if s == "COMPLETE")
    assert len(complete) == 120 and not [n for n, s in states if s in ("RUNNING", "WAITING")]
    out = tmp_path / "export.parquet"
    r = CliRunner().invoke(main, ["export", "--storage", storage, "--study", name, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(pq.read_table(out, columns=["trial"])["trial"].to_pylist()) == complete


def _states_or_empty(url, name):
    try:
        return trial_states(url, name)
    except KeyError:            # the study is not created yet
        return []


def test_wrong_study_name_is_one_line_exit_2(tmp_path, storage):
    p, name = study_file(tmp_path, n_trials=4, batch_size=4)     # a study to name: its size is not the case
    r = subprocess.run([DSE, "run", str(p), "--storage", storage, "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = CliRunner().invoke(main, ["export", "--storage", storage, "--study", "no-such", "--out",
                                  str(tmp_path / "e.parquet")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "--study = 'no-such': no such study in" in r.output and name in r.output
    check_no_password(storage, r.output)


@pytest.mark.parametrize("url,needle,code", [
    pytest.param("postgresql+psycopg://dse:s3cret-pw@127.0.0.1:1/dse", "cannot open this database", 1,  # runtime failure
                 marks=pytest.mark.servers),
    pytest.param("mysql+pymysql://dse:s3cret-pw@127.0.0.1:1/dse", "cannot open this database", 1, marks=pytest.mark.servers),
    ("nosuchdb://dse:s3cret-pw@h/x", "not a database URL", 2),                                # bad input
])
def test_bad_or_unreachable_storage_is_one_line(tmp_path, url, needle, code):
    if code == 1:                      # without the driver the URL is refused as bad input first
        pytest.importorskip("psycopg" if url.startswith("postgresql") else "pymysql")
    p, _ = study_file(tmp_path, n_trials=25)
    r = CliRunner().invoke(main, ["run", str(p), "--storage", url, "--quiet"])
    assert r.exit_code == code, r.output
    assert len(r.output.strip().splitlines()) == 1 and needle in r.output
    assert "s3cret-pw" not in r.output and "dse:***@" in r.output
