"""dse pareto: the front from --json equals a brute-force non-dominated filter (2, 3, 4 objectives)."""

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import dse.results.analysis as da
from dse.cli.commands import main

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
OBJECTIVES = [("spec_ms_per_token", "min"), ("cost_usd", "min"), ("power_w", "min"), ("die_area_mm2", "max")]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sw") / "d"
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--points", "3", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    # 3 values on each of 8 knobs, 2 x 3 x 3 x 3 x 3 x 3 x 4 x 3 = 5,832 points; the link of a lone chip
    # does not act, so the 3 x 2 x ... chips=1 rows take it once: 4,860 designs, in one part file
    assert r.output == (f"{out}: 4,860 designs from 5,832 grid points (a knob that does not act on a design is "
                        "taken at one value) written in 1 part file (shard 0/1)\n")
    return out


def brute_front(df, objs):
    feas = df[df["feasible"]]
    v = np.stack([feas[m].to_numpy(float) * (1 if d == "min" else -1) for m, d in objs], axis=1)
    dominated = ((v[None, :, :] <= v[:, None, :]).all(-1) & (v[None, :, :] < v[:, None, :]).any(-1)).any(1)
    order = np.argsort(feas["trial"].to_numpy(), kind="stable")       # ties: the first trial is the one kept
    v, trial, dominated = v[order], feas["trial"].to_numpy()[order], dominated[order]
    earlier_tie = np.array([(v[:i] == v[i]).all(-1).any() for i in range(len(v))])
    return set(trial[~dominated & ~earlier_tie].tolist())


@pytest.mark.parametrize("m", [2, 3, 4])
def test_pareto_json_equals_brute_force(sweep_dir, m):
    objs = OBJECTIVES[:m]
    args = ["pareto", str(sweep_dir), "--json"]
    for metric, d in objs:
        args += ["--objective", f"{metric}:{d}"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    got = {row["trial"] for row in json.loads(r.output)}
    df = da.load_results(sweep_dir)
    assert got == brute_front(df, objs)


def test_pareto_table_csv_where_top(sweep_dir):
    df = da.load_results(sweep_dir)
    n_front = len(da.front(df))
    r = CliRunner().invoke(main, ["pareto", str(sweep_dir), "--wide", "--epsilon", "0"], env={"COLUMNS": "400"})
    assert r.exit_code == 0
    lines = r.output.splitlines()
    # a sweep has no repeats: every row is a design
    feasible = int(df["feasible"].sum())
    assert lines[0] == (f"front: {n_front} designs of {feasible} feasible ({len(df):,} designs in {len(df):,} grid "
                        "points); spec_ms_per_token minimize, cost_usd minimize")
    # --wide: objectives first, then the speculative accounting, then the knobs with short names
    assert lines[1].split()[:8] == ["spec_ms_per_token", "cost_usd", "alpha", "tau", "k", "draft_cost_ratio",
                                    "speedup", "trial"]
    assert "process_node" in lines[1].split() and "params_" not in lines[1]
    small = df.query("chips <= 2")
    expect = da.front(small)
    assert len(expect) > 2                       # so that --top 2 truncates
    r = CliRunner().invoke(main, ["pareto", str(sweep_dir), "--csv", "--top", "2", "--where", "chips <= 2"])
    assert r.exit_code == 0
    table = pd.read_csv(io.StringIO(r.output))
    assert table["trial"].tolist() == expect["trial"].head(2).tolist()
    assert (table["spec_ms_per_token"].to_numpy() == expect["spec_ms_per_token"].head(2).to_numpy()).all()


def test_pareto_bad_objective_exit_2(sweep_dir):
    r = CliRunner().invoke(main, ["pareto", str(sweep_dir), "--objective", "latency:min"])
    assert r.exit_code == 2 and "latency" in r.output


def test_a_shard_counts_its_own_points(tmp_path):
    """A shard said "N designs from 5832 grid points" for its share of the grid: it names both counts."""
    out = tmp_path / "sh"
    r = CliRunner().invoke(main, ["sweep", str(QUICK), "--points", "3", "--shard", "2/3", "--chunk-size", "500",
                                  "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    designs = len(pd.read_parquet(out))
    # chunks 2, 5, 8 and 11 of 12: 3 x 500 + 332 = 1,832 of the grid's 5,832 points
    assert r.output == (f"{out}: {designs:,} designs from 1,832 grid points of the grid's 5,832 (a knob that does not "
                        "act on a design is taken at one value) written in 4 part files (shard 2/3)\n")


@pytest.fixture(scope="module")
def batch_knob(tmp_path_factory):
    """A newcomer's study: batch a knob, latency against throughput: every batch's design is on the one front
    (a larger batch is slower per token and serves more tokens per second)."""
    import yaml
    raw = yaml.safe_load((QUICK.parent / "batch-crossover.yaml").read_text())
    raw["objectives"] = [{"metric": "spec_ms_per_token", "direction": "minimize"},
                         {"metric": "tokens_per_s", "direction": "maximize"}]
    raw["space"]["target_chip"]["device"] = ["b200"]
    raw["space"]["k"] = [2, 4]
    raw["search"] = {"sampler": "random", "n_trials": 96, "batch_size": 96, "seed": 0}
    d = tmp_path_factory.mktemp("bk")
    raw["output"] = str(d / "bk.parquet")
    (d / "bk.yaml").write_text(yaml.safe_dump(raw))
    r = CliRunner().invoke(main, ["run", str(d / "bk.yaml"), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "compare designs at each batch with --per batch" in r.stderr
    return d / "bk.parquet"


def test_a_crowded_front_over_batch_says_to_compare_per_batch(batch_knob):
    r = CliRunner().invoke(main, ["pareto", str(batch_knob)])
    c = da.counts(da.load_results(batch_knob))
    assert r.exit_code == 0 and c["front"] > c["feasible"] / 2
    assert r.stderr == (f"note: {c['front']:,} of {c['feasible']:,} feasible designs are on the front because batch is "
                        "a knob (a larger batch trades latency per token for throughput); compare designs at each batch "
                        "with --per batch\n")


def test_fronts_per_batch_are_the_front_at_each_batch(batch_knob):
    df = da.load_results(batch_knob)
    r = CliRunner().invoke(main, ["pareto", str(batch_knob), "--per", "batch", "--json"])
    assert r.exit_code == 0, r.output
    got = pd.DataFrame(json.loads(r.output))
    assert list(got.columns[:1]) == ["params_batch"]
    for b, rows in got.groupby("params_batch"):
        want = da.front(df[df["params_batch"] == b], [("spec_ms_per_token", "minimize"), ("tokens_per_s", "maximize")])
        assert sorted(rows["trial"]) == sorted(want["trial"]), b
    feasible = df[da.feasible_mask(df)]                  # batch 2048 fits on no chip: no front there
    assert sorted(got["params_batch"].unique()) == sorted(feasible["params_batch"].unique()) != sorted(
        df["params_batch"].unique())
    bad = CliRunner().invoke(main, ["pareto", str(batch_knob), "--per", "nosuch"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --per nosuch: no such knob or column in these results")
