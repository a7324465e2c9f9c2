"""dse sweep: grid axes, shards that partition the grid, idempotent re-runs, bounded chunks."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import dse.results.analysis as da
from dse.campaign.grid import axis_values, sweep
from dse.cli.commands import main
from dse.study import Knob, load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"


def test_axis_values_by_hand():
    assert axis_values(Knob("a", "s", "a", "int", low=1, high=12), 16).tolist() == list(range(1, 13))
    assert axis_values(Knob("a", "s", "a", "int", low=1, high=12), 4).tolist() == [1, 5, 8, 12]
    np.testing.assert_allclose(axis_values(Knob("a", "s", "a", "float", low=100, high=10000, log=True), 3),
                               [100, 1000, 10000])
    assert axis_values(Knob("a", "s", "a", "cat", choices=("x", "y")), 9).tolist() == ["x", "y"]


@pytest.fixture
def study(tmp_path):
    return load_study(QUICK)


def test_shards_partition_the_grid_and_rerun_replaces(tmp_path, study):
    out = tmp_path / "sw"
    full = sweep(study, points=3, out=tmp_path / "full", chunk_size=500, progress=False)
    shards = [sweep(study, points=3, shard=(i, 3), out=out, chunk_size=500, progress=False) for i in range(3)]
    # 12 chunks of 500 (the last 332): shard i takes chunks i, i+3, i+6, i+9; its counts are its own
    assert [s.points_written for s in shards] == [2000, 2000, 1832] and {s.total_points for s in shards} == {5832}
    assert sum(s.rows_written for s in shards) == 4860
    again = sweep(study, points=3, shard=(1, 3), out=out, chunk_size=500, progress=False)    # re-run one shard
    assert (again.points_written, again.rows_written, again.skipped) == (0, 0, 4)
    df = da.load_results(out)
    # 3 points: 2 nodes x 3^5 (TFLOP/s, memory, stacks, height, SRAM) = 486 chips, x 4 chip counts x 3
    # links = 5,832 grid points; at one chip the link does nothing, so only its first value is a
    # design there: 486 x (1 + 3 x 3) = 4,860 distinct designs (issue 11)
    assert full.total_points == 5832 and full.rows_written == 4860
    assert len(df) == full.rows_written and df["trial"].is_unique
    one = df[df["params_target_chip_chips"] == 1]
    assert one["params_target_chip_link_bw_gb_s"].isna().all() and len(one) == 486
    assert df.loc[df["params_target_chip_chips"] > 1, "params_target_chip_link_bw_gb_s"].notna().all()
    ref = da.load_results(tmp_path / "full").set_index("trial").sort_index()
    got = df.set_index("trial").sort_index()
    pd.testing.assert_series_equal(got["spec_ms_per_token"], ref["spec_ms_per_token"])
    # the unsharded front equals a brute-force filter of its feasible rows
    feas = ref[ref["feasible"]]
    v = feas[["spec_ms_per_token", "cost_usd"]].to_numpy()
    dominated = ((v[None, :, :] <= v[:, None, :]).all(-1) & (v[None, :, :] < v[:, None, :]).any(-1)).any(1)
    # is_pareto: the first row (trial order) of each point of the front
    earlier_tie = np.array([(v[:i] == v[i]).all(-1).any() for i in range(len(v))])
    np.testing.assert_array_equal(feas["is_pareto"].to_numpy(bool), ~dominated & ~earlier_tie)
    np.testing.assert_array_equal(feas["pareto_rank"].to_numpy() == 0, ~dominated)
    assert ref.loc[~ref["feasible"], "is_pareto"].isna().all()


def test_slurm_environment_picks_the_shard(tmp_path, study, monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    res = sweep(study, points=3, out=tmp_path / "s", chunk_size=500, progress=False)
    assert res.shard == (2, 4)
    assert all(p.name.startswith("part-00002-of-00004-") for p in res.parts)


def test_cli_sweep_and_bad_shard(tmp_path):
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--points", "2", "--out", str(tmp_path / "d"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "d").glob("part-*.parquet"))) >= 1
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--shard", "3/3"])
    assert r.exit_code == 2 and "0 <= I < N" in r.output


def test_every_shipped_study_runs_a_tiny_budget(tmp_path):
    for path in sorted((QUICK.parent).glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        # the pre-search's first part only (presearch_s 0.1): a study with an SLA evaluates each design at
        # 18 concurrencies in two pools, and its 20,000-design pre-search would take most of a minute
        raw["search"].update(n_trials=20, batch_size=10, presearch_s=0.1)
        raw["output"] = str(tmp_path / f"{path.stem}.parquet")
        p = tmp_path / path.name
        p.write_text(yaml.safe_dump(raw))
        r = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"])
        assert r.exit_code == 0, (path, r.output)
        assert len(pd.read_parquet(raw["output"])) == 20


def test_sweep_refuses_a_directory_with_another_grid(tmp_path, study):
    from dse.errors import DseError, SpecError
    out = tmp_path / "sw"
    sweep(study, points=3, shard=(0, 3), out=out, chunk_size=500, progress=False)
    with pytest.raises(DseError, match=r"holds another dataset \(shards 3 -> 1\)"):
        sweep(study, points=3, out=out, chunk_size=500, progress=False)           # other shard count
    with pytest.raises(DseError, match=r"holds another dataset \(points 3 -> 2; total \d+ -> \d+\)"):
        sweep(study, points=2, shard=(1, 3), out=out, chunk_size=500, progress=False)
    with pytest.raises(SpecError, match="chunk-size"):
        sweep(study, points=3, shard=(1, 3), out=out, chunk_size=-5, progress=False)
    assert len(list(out.glob("part-*.parquet"))) > 0
