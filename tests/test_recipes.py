"""Cluster recipes that run (issue 21 item 6): the sbatch files make their log folder and submit
themselves (the sweep's array sized to the grid's chunks), a shard with no work says so, the
incomplete-sweep warning names the missing shards' commands, shared-study workers export once."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import dse.results.analysis as da
from dse.campaign.grid import auto_chunk_size, grid_plan, sweep
from dse.cli.commands import main
from dse.study import load_study

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "examples" / "slurm"
QUICK = REPO / "studies" / "quickstart.yaml"
DSE_BIN = shutil.which("dse") or str(Path(sys.executable).parent / "dse")


def _fake_sbatch(tmp_path) -> Path:
    """A stand-in `sbatch` that records its arguments (one call a line) and prints a job id."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/sh\necho "$*" >> "$SBATCH_LOG"\necho 4242\n')
    (bin_dir / "sbatch").chmod(0o755)
    return bin_dir


def _submit(tmp_path, recipe, *args, **env):
    """Run a recipe by hand (no SLURM variables), as a user on a login node would."""
    bin_dir = _fake_sbatch(tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    run_env = {**clean, "PATH": f"{bin_dir}:{Path(DSE_BIN).parent}:{clean['PATH']}",
               "SBATCH_LOG": str(tmp_path / "sbatch.log"), **env}
    r = subprocess.run(["bash", str(RECIPES / recipe), *args], cwd=tmp_path, env=run_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r, (tmp_path / "sbatch.log").read_text().splitlines()


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.sbatch")))
def test_sbatch_default_log_is_in_an_existing_folder(recipe):
    """SLURM opens --output before the script runs: a folder the script makes is too late, so the
    file's own #SBATCH --output has no folder (the submit directory exists)."""
    out = re.search(r"^#SBATCH --output=(\S+)", (RECIPES / recipe).read_text(), re.M).group(1)
    assert "/" not in out


@pytest.mark.parametrize("recipe", ["array-tasks.sbatch", "shared-study-grpc.sbatch"])
def test_recipe_run_by_hand_makes_logs_and_submits_itself(tmp_path, recipe):
    _, calls = _submit(tmp_path, recipe, "--partition=short", "--array=0-3", DSE_STORAGE="sqlite:///x.db")
    assert (tmp_path / "logs").is_dir()
    assert len(calls) == 1 and "--output=logs/%x-" in calls[0] and calls[0].endswith(str(RECIPES / recipe))
    assert "--partition=short --array=0-3" in calls[0]


@pytest.mark.parametrize("points, shards, want", [(2, 64, 64), (6, 64, 64), (2, 10_000, None)])
def test_sweep_recipe_sizes_the_array_to_the_grid(tmp_path, points, shards, want):
    """The array has SHARDS elements, fewer when the grid has fewer points (then one point each)."""
    total = grid_plan(load_study(QUICK), points).total
    want = want or total
    _, calls = _submit(tmp_path, "sweep-array.sbatch", POINTS=str(points), SHARDS=str(shards), STUDY=str(QUICK))
    assert (tmp_path / "logs").is_dir() and len(calls) == 1
    assert f"--array=0-{want - 1}%8 " in calls[0] and "--output=logs/%x-%A_%a.out" in calls[0]


def test_postgres_recipe_submits_workers_then_one_export(tmp_path):
    r, calls = _submit(tmp_path, "shared-study-postgres.sbatch", "--array=0-15",
                       DSE_STORAGE="postgresql+psycopg://u@h/db")
    assert len(calls) == 2 and "--array=0-15" in calls[0] and "--parsable" in calls[0]
    assert "--dependency=afterany:4242" in calls[1] and "dse export" in calls[1]
    assert "job 4242" in r.stdout
    text = (RECIPES / "shared-study-postgres.sbatch").read_text()
    assert "--no-parquet" in text.splitlines()[-1]          # the workers write no Parquet


def test_auto_chunks_give_every_shard_work(tmp_path):
    """93,312 points (quickstart at 6 points) over 64 shards: chunks of 1,458 rows, one a shard,
    where the fixed 131,072-row chunk left 63 of 64 shards idle."""
    study = load_study(QUICK)
    assert auto_chunk_size(93_312, 64) == 1458 and -(-93_312 // 1458) == 64
    plan = grid_plan(study, 6, 64)
    assert (plan.total, plan.chunk_size, plan.chunks, plan.busy_shards) == (93_312, 1458, 64, 64)
    fixed = grid_plan(study, 6, 64, chunk_size=131_072)
    assert (fixed.chunks, fixed.busy_shards) == (1, 1)
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--plan", "64", "--chunk-size", "131072"])
    assert r.exit_code == 0 and r.stdout.strip() == "1"
    assert "1 of 64 shards get work (shards 1-63 would have none)" in r.output


def test_a_shard_without_work_says_so(tmp_path):
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--points", "2", "--shard", "5/64", "--chunk-size", "100000",
                                  "--out", str(tmp_path / "s"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "shard 5/64 has no work: the grid has 1 chunk" in r.output
    assert not list((tmp_path / "s").glob("part-*"))


def test_incomplete_sweep_warning_names_the_missing_shards_commands(tmp_path):
    out = tmp_path / "grid"
    for i in (0, 2):
        sweep(QUICK, points=2, shard=(i, 4), out=out, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        da.load_results(out)
    msg = str(caught[0].message)
    assert "missing shards 1, 3 of 4" in msg
    cmd = re.search(r"e\.g\. `([^`]*)`", msg).group(1)
    assert cmd == f"dse sweep {QUICK} --shard 1/4 --points 2 --out {out}"
    # the named commands complete the dataset
    for i in (1, 3):
        r = CliRunner().invoke(main, cmd.replace("1/4", f"{i}/4").split()[1:] + ["--quiet"])
        assert r.exit_code == 0, r.output
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = da.load_results(out)
    assert not caught and len(df) == sweep(QUICK, points=2, out=tmp_path / "whole", progress=False).rows_written


def test_no_parquet_worker_and_export_by_study_file(tmp_path):
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update(n_trials=32, batch_size=16)
    raw["output"] = str(tmp_path / "q.parquet")
    p = tmp_path / "q.yaml"
    p.write_text(yaml.safe_dump(raw))
    journal = tmp_path / "q.journal"
    r = CliRunner().invoke(main, ["run", str(p), "--storage", str(journal), "--no-parquet", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "32 trials told to study 'quickstart'" in r.output and not list(tmp_path.glob("*.parquet"))
    r = CliRunner().invoke(main, ["export", "--storage", str(journal), "--study", str(p), "--out",
                                  str(tmp_path / "x.parquet")])
    assert r.exit_code == 0 and len(da.load_results(tmp_path / "x.parquet")) == 32
    r = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--no-parquet"])
    assert r.exit_code == 2 and "--no-parquet" in r.output
