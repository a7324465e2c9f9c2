"""Issue 12: a 64-shard sweep as 64 processes (8 at a time) and on Dask equals the unsharded sweep;
array tasks on Dask equal the same tasks run in one process. Dask tests use a real LocalCluster
and skip without dask.distributed (pip install '.[dask]') unless DSE_REQUIRE_SERVERS=1."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import dse
import dse.results.analysis as da
from dse.campaign.grid import sweep
from dse.cli.commands import main
from dse.search.runner import run_tasks
from dse.study import load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
DSE = str(Path(sys.executable).with_name("dse"))
TIMES = ["datetime_start", "datetime_complete"]


def need_dask():
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        msg = "no dask.distributed: pip install '.[dask]'"
        if os.environ.get("DSE_REQUIRE_SERVERS") == "1":
            pytest.fail(msg + "; DSE_REQUIRE_SERVERS=1 makes this a failure")
        pytest.skip(msg)


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    sweep(load_study(QUICK), points=2, out=out, chunk_size=20, progress=False)
    return da.load_results(out).set_index("trial").sort_index().drop(columns=TIMES)


def same_rows(path, ref):
    got = da.load_results(path).set_index("trial").sort_index().drop(columns=TIMES)
    pd.testing.assert_frame_equal(got, ref)


@pytest.mark.skipif(os.environ.get("DSE_REQUIRE_SERVERS") != "1" and os.environ.get("DSE_SLOW_TESTS") != "1",
                    reason="16 processes take ~half a minute on 2 cores: set DSE_SLOW_TESTS=1 (.ci/run does)")
@pytest.mark.servers
def test_16_shards_as_16_processes_equal_the_unsharded_sweep(tmp_path, unsharded):
    out = tmp_path / "sw"
    running, codes = [], []
    for i in range(16):                          # 4 at a time, as a job array with %4 would
        if len(running) == 4:
            codes.append(running.pop(0).wait(timeout=300))
        running.append(subprocess.Popen([DSE, "sweep", str(QUICK), "--points", "2", "--chunk-size", "20",
                                         "--shard", f"{i}/16", "--out", str(out), "--quiet"]))
    codes += [p.wait(timeout=300) for p in running]
    assert codes == [0] * 16
    assert len(list(out.glob("part-*.parquet"))) == -(-1152 // 20)       # 58 parts, none twice
    same_rows(out, unsharded)


@pytest.mark.servers
def test_16_shards_on_dask_local_cluster_equal_the_unsharded_sweep(tmp_path, unsharded):
    need_dask()
    out = tmp_path / "sw"
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--points", "2", "--chunk-size", "20", "--shard", "all/16",
                                  "--out", str(out), "--dask", "local:2"])
    assert r.exit_code == 0, r.output
    # 1,152 grid points, of which 1,008 distinct designs (a knob that does not act is taken once)
    assert f"{len(unsharded)} designs written in 58 part files" in r.output and len(unsharded) == 1008
    same_rows(out, unsharded)


@pytest.mark.servers
def test_array_tasks_on_dask_equal_the_same_tasks_in_one_process(tmp_path):
    need_dask()
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update(n_trials=16, batch_size=8)
    raw["output"] = str(tmp_path / "q.parquet")
    p = tmp_path / "quick.yaml"
    p.write_text(yaml.safe_dump(raw))
    run_tasks(load_study(p), 4, out=tmp_path / "here", progress=False)
    r = CliRunner().invoke(main, ["run", str(p), "--task", "all/4", "--dask", "local:2", "--out",
                                  str(tmp_path / "dask")])
    assert r.exit_code == 0, r.output
    assert "4 tasks, 64 trials" in r.output
    ref = da.load_results(tmp_path / "here").set_index("trial").sort_index().drop(columns=TIMES)
    same_rows(tmp_path / "dask", ref)


def test_dask_needs_all_tasks_and_a_good_address(tmp_path):
    r = CliRunner().invoke(main, ["run", str(QUICK), "--task", "1/4", "--dask", "local:2"])
    assert r.exit_code == 2 and "give --task all/N too" in r.output
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--shard", "1/4", "--dask", "local:2"])
    assert r.exit_code == 2 and "with --dask, give all/N" in r.output


RECIPES = Path(__file__).parent.parent / "examples" / "slurm"


def test_slurm_recipes_with_the_array_variables_set(tmp_path):
    """No SLURM in CI: the recipes' commands run with the array variables sbatch would set."""
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update(n_trials=30, batch_size=10)
    raw["output"] = str(tmp_path / "q.parquet")
    p = tmp_path / "quick.yaml"
    p.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PATH": f"{Path(DSE).parent}:{os.environ['PATH']}", "STUDY": str(p),
           "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0"}
    for i in range(3):
        for recipe, out in (("array-tasks.sbatch", "tasks"), ("sweep-array.sbatch", "sweep")):
            r = subprocess.run(["bash", str(RECIPES / recipe)], capture_output=True, text=True, timeout=300,
                               env={**env, "SLURM_ARRAY_TASK_ID": str(i), "OUT": str(tmp_path / out),
                                    "POINTS": "2"})
            assert r.returncode == 0, (recipe, r.stderr)
    tasks = da.load_results(tmp_path / "tasks")
    assert len(tasks) == 90 and sorted(tasks["trial"]) == list(range(90))      # 3 tasks x 30 trials
    grid = da.load_results(tmp_path / "sweep")
    # every distinct design of the grid once (a knob that does not act is taken at one value):
    # the same rows as one unsharded sweep
    whole = dse.sweep(str(p), points=2, out=tmp_path / "whole", progress=False)
    assert grid["trial"].is_unique and len(grid) == whole.rows_written < grid.attrs["dse"]["grid"]["total"]
    assert sorted(grid["trial"]) == sorted(da.load_results(tmp_path / "whole")["trial"])
