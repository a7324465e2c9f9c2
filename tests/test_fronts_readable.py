"""Fronts a person can read (issue 21 items 4 and 5): one vocabulary of counts across tools, an
epsilon front (relative, per objective) that collapses near-ties, tables that fit a terminal."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import dse.results.analysis as da
from dse.cli.commands import main
from dse.cli.text import front_block, front_text
from dse.results import pareto

STUDIES = Path(__file__).resolve().parent.parent / "studies"


def _study(tmp_path, name="quickstart", **search):
    raw = yaml.safe_load((STUDIES / f"{name}.yaml").read_text())
    raw["search"].update(search)
    raw["output"] = str(tmp_path / f"{name}.parquet")
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


# --------------------------------------------------------------------------- epsilon, worked by hand

def test_epsilon_thin_worked_example():
    """Front best first by latency: (10, 100), (10.05, 99.5), (10.2, 80), (12, 79.5), (12.1, 60).
    At 1%: (10.05, 99.5) is within 0.5% and 0.5% of (10, 100): one representative, the first.
    (10.2, 80) is 20% cheaper: kept. (12, 79.5) is 0.6% cheaper than (10.2, 80) but 17.6% slower:
    (10.2, 80) is at most 1% worse in both, so it stands for it. (12.1, 60): kept."""
    v = [[10, 100], [10.05, 99.5], [10.2, 80], [12, 79.5], [12.1, 60]]
    assert pareto.epsilon_thin(v, ["min", "min"], 0.01).tolist() == [0, 2, 4]
    assert pareto.epsilon_thin(v, ["min", "min"], 0.0).tolist() == [0, 1, 2, 3, 4]
    # per objective: 1% on latency and nothing on cost keeps every distinct cost
    assert pareto.epsilon_thin(v, ["min", "min"], [0.01, 0.0]).tolist() == [0, 1, 2, 3, 4]
    # maximised objectives: speedup 3.00 and 2.98 (0.7% apart) at the same cost are one
    assert pareto.epsilon_thin([[3.0, 100], [2.98, 99.9]], ["max", "min"], 0.01).tolist() == [0]
    with pytest.raises(ValueError, match="epsilon"):
        pareto.epsilon_thin(v, ["min", "min"], 1.5)


def test_epsilon_front_properties():
    """Random 3-objective fronts: no two kept rows within epsilon of each other in every objective,
    and every exact-front row has a kept row at most epsilon worse in every objective."""
    rng = np.random.default_rng(7)
    for eps in (0.01, 0.05, 0.2):
        v = rng.lognormal(size=(400, 3))
        dirs = ["min", "max", "min"]
        order = pareto.front_order(v, dirs)
        kept = order[pareto.epsilon_thin(v[order], dirs, eps)]
        front = v[order]
        assert 0 < len(kept) <= len(order)
        a = v[kept]
        close = np.abs(a[:, None, :] - a[None, :, :]) <= eps * np.maximum(np.abs(a[:, None, :]), np.abs(a[None, :, :]))
        np.fill_diagonal(close[..., 0], False)
        assert not close.all(axis=2).any()
        sign = np.array([1.0, -1.0, 1.0])
        slack = eps * np.maximum(np.abs(a[:, None, :]), np.abs(front[None, :, :]))
        covered = (sign * (a[:, None, :] - front[None, :, :]) <= slack + 1e-12).all(axis=2).any(axis=0)
        assert covered.all()


def test_analysis_front_epsilon_keeps_the_exact_front_in_the_data(tmp_path):
    res = CliRunner().invoke(main, ["run", str(_study(tmp_path, n_trials=192, batch_size=64)), "--storage",
                                    ":memory:", "--quiet"])
    assert res.exit_code == 0, res.output
    df = da.load_results(tmp_path / "quickstart.parquet")
    exact, thin = da.front(df), da.front(df, epsilon=0.01)
    assert set(thin["trial"]) <= set(exact["trial"]) and len(thin) < len(exact)
    assert int(df["is_pareto"].fillna(False).sum()) == len(exact)       # the file keeps the exact front
    by_name = da.front(df, epsilon={"spec_ms_per_token": 0.01, "cost_usd": 0.01})
    assert by_name["trial"].tolist() == thin["trial"].tolist()
    with pytest.raises(da.DseError, match="not objectives"):
        da.front(df, epsilon={"power_w": 0.1})


# --------------------------------------------------------------------------- counts

def _numbers(text: str) -> list[int]:
    return [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", text)]


def test_counts_are_equal_across_run_pareto_report_and_analysis(tmp_path):
    """One file (plain NSGA-II, which proposes some designs twice): run, pareto, report and the
    pandas API give the same designs, feasible designs and front, all of distinct designs."""
    p = _study(tmp_path, n_trials=160, batch_size=32, sampler="nsga2")
    run = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"])
    assert run.exit_code == 0, run.output
    path = tmp_path / "quickstart.parquet"
    df = da.load_results(path)
    raw = pd.read_parquet(path)
    want = {"rows": 160, "designs": int(raw["duplicate_of"].isna().sum()),
            "feasible": int((raw["duplicate_of"].isna() & raw["feasible"]).sum()),
            "front": int(raw["is_pareto"].fillna(False).sum())}
    assert want["designs"] < 160                # repeats exist, so rows and designs differ
    assert da.counts(df) == want
    line = f"front: {want['front']} designs of {want['feasible']} feasible ({want['designs']} designs in 160 trials)"
    assert line in " ".join(run.output.split())
    par = CliRunner().invoke(main, ["pareto", str(path)])
    assert par.exit_code == 0 and line in " ".join(par.output.split())
    h = da.hypervolume_history(df)
    assert h[["n_rows", "n_designs", "n_feasible", "front_size"]].iloc[-1].tolist() == [
        160, want["designs"], want["feasible"], want["front"]]
    rep = CliRunner().invoke(main, ["report", str(path), "--quiet", "--out", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    page = (tmp_path / "rep" / "index.html").read_text()
    row = re.search(r"<th>designs</th><td>([^<]*)</td>", page).group(1)
    assert _numbers(row)[:4] == [want["designs"], 160, want["feasible"], want["front"]]
    cap = re.search(r"<figcaption>([^<]*feasible of[^<]*)</figcaption>", page).group(1)
    assert _numbers(cap)[:4] == [want["feasible"], want["designs"], 160, want["front"]]


def test_pareto_where_filters_the_totals(tmp_path):
    p = _study(tmp_path, n_trials=192, batch_size=64)
    assert CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"]).exit_code == 0
    path = tmp_path / "quickstart.parquet"
    df = da.load_results(path)
    want = da.counts(df, where="chips == 1")
    assert want["designs"] < da.counts(df)["designs"]
    r = CliRunner().invoke(main, ["pareto", str(path), "--where", "chips == 1"])
    assert r.exit_code == 0, r.output
    assert (f"front: {want['front']} designs of {want['feasible']} feasible ({want['designs']} designs in "
            f"{want['rows']} trials) where chips == 1") in " ".join(r.output.split())


# --------------------------------------------------------------------------- tables

def _rows(output: str) -> list[list[str]]:
    """The data lines of a printed front (first cell a number)."""
    out = []
    for line in output.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"[\d.e+-]+", cells[0]) and not line.startswith(" " * 40 + "draft"):
            out.append(cells)
    return out


@pytest.mark.parametrize("name, trials, n_obj", [("quickstart", None, 2), ("draft-chip", 1000, 3)])
def test_dse_run_front_fits_120_columns_without_near_ties(tmp_path, name, trials, n_obj):
    """Done-means of issue 21: the quickstart and draft-chip fronts printed by `dse run` fit in 120
    columns and hold no two rows within the display epsilon (1%) of each other."""
    from dse.cli.text import _front_cell
    p = _study(tmp_path, name, **({"n_trials": trials} if trials else {}))
    r = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"])
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 120
    df = da.load_results(tmp_path / f"{name}.parquet")
    objs = [m for m, _ in da.objectives_of(df)]
    thin = da.front(df, epsilon=da.DISPLAY_EPSILON)[objs].to_numpy()
    printed = [tuple(cells[:n_obj]) for cells in _rows(r.output)]
    assert len(printed) >= 10
    assert set(printed) <= {tuple(_front_cell(float(x)) for x in row) for row in thin}
    assert len(thin) < len(da.front(df))          # near-ties were collapsed
    a = thin
    close = (np.abs(a[:, None] - a[None]) <= da.DISPLAY_EPSILON * np.maximum(np.abs(a[:, None]), np.abs(a[None]))
             ).all(axis=2)
    np.fill_diagonal(close, False)
    assert not close.any()


def test_front_block_drops_constant_knobs_and_fits_the_width():
    cols = {"spec_ms_per_token": [3.8, 4.1], "cost_usd": [6649.0, 5457.0], "alpha": [0.8, 0.8], "tau": [3.95, 3.95],
            "k": [6, 6], "speedup": [2.38, 2.5], "trial": [9, 96], "params_target_chip_process_node": ["n5", "n3"],
            "params_target_chip_memory": ["hbm4", "hbm4"], "params_target_chip_link_bw_gb_s": [None, None],
            "params_target_chip_peak_tflops": [1047.0, 1777.0]}
    text = front_block(cols, ["spec_ms_per_token", "cost_usd"], width=120)
    assert text.splitlines() == [
        "spec_ms_per_token  cost_usd  trial  process_node  peak_tflops",
        "              3.8      6649      9            n5         1047",
        "              4.1      5457     96            n3         1777",
        "same in every row: k 6, memory hbm4, link_bw_gb_s -",
    ]
    # 30 columns: headers broken over lines, then the last columns left out and named
    narrow = front_block(cols, ["spec_ms_per_token", "cost_usd"], width=30)
    assert max(len(line) for line in narrow.splitlines()) <= 30
    assert narrow.splitlines()[:2] == ["  spec_ms  cost", "per_token   usd  trial"]
    assert "not shown to fit 30 columns: process_node, peak_tflops (--wide" in " ".join(narrow.split())
    # a speedup objective brings tau, k and c with it (a speedup is never quoted without them)
    sp = front_block(cols, ["speedup", "cost_usd"], width=None)
    assert "same in every row: alpha 0.8, tau 3.95, k 6, memory hbm4" in sp
    wide = front_block(cols, ["spec_ms_per_token", "cost_usd"], width=None, wide=True)
    assert wide.splitlines()[0].split() == ["spec_ms_per_token", "cost_usd", "alpha", "tau", "k", "speedup", "trial",
                                            "process_node", "memory", "link_bw_gb_s", "peak_tflops"]


def test_front_text_breaks_headers_only_when_too_wide():
    cols = {"spec_ms_per_token": [3.799], "params_draft_chip_link_bw_gb_s": [33.2]}
    assert front_text(cols).splitlines()[0] == "spec_ms_per_token  draft.link_bw_gb_s"
    assert front_text(cols, width=20).splitlines() == ["  spec_ms  draft.link", "per_token     bw_gb_s",
                                                       "    3.799        33.2"]


def test_front_text_with_values_wider_than_their_header():
    """A tree shape under `tree_shape` is wider than its name: the header stays one line (the
    draft-codesign study's table raised here once)."""
    cols = {"spec_ms_per_token": [2.3, 2.4], "tree_shape": ["5-10-19-15-6-7-1-1", "4-10"]}
    lines = front_text(cols, width=30).splitlines()
    assert lines[:2] == ["  spec_ms", "per_token          tree_shape"]
    assert max(len(line) for line in lines) <= 30
