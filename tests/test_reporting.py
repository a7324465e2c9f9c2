"""dse.reporting: the study rebuilt from results, known parts, speedup vs batch, importances,
and `dse report` end to end on a small quickstart run."""

import dataclasses
import math
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import dse.results.analysis as da
from dse.api import evaluate_design
from dse.cli.commands import main
from dse.report import context as reporting
from dse.search.runner import run_study
from dse.study import Knob

QUICK = Path(__file__).resolve().parents[1] / "studies" / "quickstart.yaml"
PNG = b"\x89PNG\r\n\x1a\n"
DEVICES = ("h100-sxm", "h200", "b200", "mi300x")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 128-trial quickstart run: (results frame, results path, study file copy)."""
    tmp = tmp_path_factory.mktemp("quick")
    study_file = tmp / "quickstart.yaml"
    shutil.copy(QUICK, study_file)
    res = run_study(study_file, n_trials=128, storage=":memory:", out=tmp / "q.parquet", progress=False)
    return da.load_results(res.path), res.path, study_file


@pytest.fixture(scope="module")
def study(run):
    return reporting.study_from_results(run[0])


def _norm(resolved: dict) -> dict:
    return {k: v for k, v in resolved.items() if k != "file"}


# --------------------------------------------------------------------------- the study

def test_study_from_results_reloads_the_unchanged_file(run, study):
    df, _, study_file = run
    assert study.path == str(study_file)
    assert _norm(study.resolved()) == _norm(df.attrs["dse"]["study"])


def test_study_rebuilt_from_metadata_when_the_file_is_gone(run):
    df = run[0].copy()
    meta = dict(df.attrs["dse"])
    meta["study"] = {**meta["study"], "file": "/nonexistent/quickstart.yaml"}
    df.attrs["dse"] = meta
    rebuilt = reporting.study_from_results(df)
    assert rebuilt.path != "/nonexistent/quickstart.yaml"
    assert reporting._same(rebuilt.resolved(), meta["study"])


def test_study_rebuilt_from_metadata_when_the_file_changed(run, tmp_path):
    df = run[0].copy()
    changed = tmp_path / "quickstart.yaml"
    changed.write_text(QUICK.read_text().replace("chips: [1, 2, 4, 8]", "chips: [1, 2]"))
    df.attrs["dse"] = {**df.attrs["dse"], "study": {**df.attrs["dse"]["study"], "file": str(changed)}}
    rebuilt = reporting.study_from_results(df)
    assert rebuilt.path != str(changed)
    assert rebuilt.knob("target_chip_chips").choices == (1, 2, 4, 8)


def test_study_mapping_puts_knobs_back_in_their_sections(run):
    m = reporting.study_mapping(run[0].attrs["dse"]["study"])
    assert m["workload"]["batch"] == 1 and m["workload"]["target"] == "llama-3.1-70b"
    assert m["space"]["target_chip"]["chips"] == [1, 2, 4, 8]
    assert m["space"]["target_chip"]["peak_tflops"] == {"low": 100.0, "high": 2500.0, "log": True}
    assert "k" not in m["workload"] and "k" not in m["space"]            # k: auto


def test_results_without_a_study_are_an_error():
    with pytest.raises(Exception, match="no study"):
        reporting.study_from_results(pd.DataFrame({"a": [1]}))


# --------------------------------------------------------------------------- known parts

def _expected_chips(dev: str, study) -> tuple[int, dict]:
    """The fewest chips that fit, by dse.api.evaluate_design on the quickstart workload."""
    rec = {}
    for chips in (1, 2, 4, 8):
        rec = evaluate_design(hw=dev, target="llama-3.1-70b", draft="llama-3.2-1b", chips=chips, alpha=0.8,
                              batch=1, prompt=2048, output=256, dtype="fp8", kv_dtype="fp8",
                              runtime=study.runtime)
        if rec["fits"]:
            return chips, rec
    return 8, rec


def test_known_parts_rows_columns_and_fewest_fitting_chips(run, study):
    df = run[0]
    kp = reporting.known_parts(study)
    assert list(kp["device"]) == list(DEVICES)
    shared = [c for c in df.columns if not c.startswith("params_")]
    assert set(shared) <= set(kp.columns)
    for c in ("spec_ms_per_token", "cost_usd", "memory_required_gb", "speedup", "fits", "feasible"):
        assert kp[c].dtype == df[c].dtype, c
    for _, row in kp.iterrows():
        chips, rec = _expected_chips(row["device"], study)
        assert row["chips"] == chips and row["name"] == f"{row['device']} x{chips}"
        assert bool(row["fits"]) == bool(rec["fits"])
        assert row["memory_required_gb"] == pytest.approx(rec["memory_required_gb"], rel=1e-9)
        assert row["spec_ms_per_token"] == pytest.approx(rec["spec_ms_per_token"], rel=1e-9)
        assert row["k"] == rec["k"]
    assert (kp["note"] == "").all()                      # no searched workload knob


def test_known_parts_h100_by_hand(study):
    """70.6 GB of fp8 weights + the 1B draft + KV + a 5% reserve of 80 GB: one H100 or more."""
    kp = reporting.known_parts(study, devices=("h100-sxm",), chips=(1, 2))
    one = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", draft="llama-3.2-1b", alpha=0.8, batch=1,
                          prompt=2048, output=256, dtype="fp8", kv_dtype="fp8", runtime=study.runtime)
    assert one["memory_required_gb"] > 70.6                  # the weights at least
    assert one["memory_reserve_gb"] == pytest.approx(0.05 * 80 * 2 ** 30 / 1e9, rel=1e-12)     # 5% of 80 GiB
    assert one["fits"] == (one["memory_required_gb"] + one["memory_reserve_gb"] <= one["memory_capacity_gb"])
    assert kp["chips"].iloc[0] == (1 if one["fits"] else 2)


def test_known_parts_keeps_the_most_chips_when_none_fits(study):
    kp = reporting.known_parts(study, devices=("l4",), chips=(2, 1))     # 2 x 24 GB < 70 GB of weights
    assert kp["name"].tolist() == ["l4 x2"]
    assert not kp["fits"].iloc[0] and math.isnan(kp["spec_ms_per_token"].iloc[0])


def test_known_parts_fixes_searched_workload_knobs_and_says_so(study):
    """A searched prompt length is fixed at its first value (said in ``note``); a searched batch is
    a serving choice: each part runs the batch with the least latency (batch 4 of 4 and 16), said
    in ``runs``, at the figures dse eval gives for it."""
    knobs = tuple(Knob("batch", "workload", "batch", "int", choices=(16, 4)) if k.name == "batch" else
                  Knob("prompt_tokens", "workload", "prompt_tokens", "int", choices=(512, 2048))
                  if k.name == "prompt_tokens" else k for k in study.knobs) + (Knob("k", "k", "k", "int", low=1, high=6),)
    kp = reporting.known_parts(dataclasses.replace(study, knobs=knobs), devices=("h200",))
    assert "prompt_tokens = 512" in kp["note"].iloc[0] and "k auto" in kp["note"].iloc[0]
    one = {b: evaluate_design(hw="h200", target="llama-3.1-70b", draft="llama-3.2-1b", alpha=0.8, batch=b,
                              prompt=512, output=256, dtype="fp8", kv_dtype="fp8", runtime=study.runtime)
           for b in (4, 16)}
    assert one[4]["spec_ms_per_token"] < one[16]["spec_ms_per_token"]
    assert kp["runs"].iloc[0] == f"llama-3.2-1b (a chain of {one[4]['k']}), batch 4"
    assert kp["spec_ms_per_token"].iloc[0] == pytest.approx(one[4]["spec_ms_per_token"], rel=1e-9)


def test_known_parts_run_the_studys_best_draft_and_batch(tmp_path):
    """The draft and the batch knobs: each part evaluated at every (draft, batch) and kept at the
    least spec_ms_per_token, worked out here from dse eval: on an H200, 70B fp8 with EAGLE-3 at
    batch 1 (3.57x, its tree chosen for the batch) beats the 1B draft model and plain decoding at
    batch 1 and 32."""
    import yaml

    from dse.study import load_study
    raw = {"name": "kp", "workload": {"target": "llama-3.1-70b", "dtype": "fp8", "draft": ["none", "llama-3.2-1b",
                                                                                           "eagle3"],
                                      "batch": [32, 1], "prompt_tokens": 128, "output_tokens": 128},
           "space": {"target_chip": {"peak_tflops": [400, 1600], "memory": "hbm3e", "memory_stacks": 6}},
           "objectives": [{"metric": "spec_ms_per_token"}, {"metric": "cost_usd"}],
           "output": str(tmp_path / "kp.parquet")}
    (tmp_path / "kp.yaml").write_text(yaml.safe_dump(raw))
    study = load_study(tmp_path / "kp.yaml")
    kp = reporting.known_parts(study, devices=("h200",), chips=(1, 2))
    ms = {(d, b): evaluate_design(hw="h200", target="llama-3.1-70b", dtype="fp8", draft=d, batch=b,
                                  runtime=study.runtime)["spec_ms_per_token"]
          for d in ("none", "llama-3.2-1b", "eagle3") for b in (32, 1)}
    assert min(ms, key=ms.get) == ("eagle3", 1)
    best = evaluate_design(hw="h200", target="llama-3.1-70b", dtype="fp8", draft="eagle3", batch=1,
                           runtime=study.runtime)
    assert kp["name"].tolist() == ["h200 x1"] and kp["spec_ms_per_token"].iloc[0] == pytest.approx(ms["eagle3", 1],
                                                                                                    rel=1e-9)
    assert kp["runs"].iloc[0] == f"eagle3 (k {best['k']}, a tree of {best['tree_nodes']} nodes), batch 1"


def test_analysis_known_parts_accepts_results(run, study):
    stamps = ["datetime_start", "datetime_complete"]
    pd.testing.assert_frame_equal(reporting.known_parts(reporting.study_from_results(run[0]), devices=("b200",)).drop(columns=stamps),
                                  reporting.known_parts(study, devices=("b200",)).drop(columns=stamps))


# --------------------------------------------------------------------------- speedup vs batch

def test_speedup_falls_with_batch(run, study):
    df = run[0]
    front = da.front(df)
    svb = reporting.speedup_vs_batch(study, front)
    assert list(svb.columns)[:3] == ["design", "trial", "batch"]
    designs = svb["design"].unique()
    assert 1 <= len(designs) <= 4
    best = front.loc[front["spec_ms_per_token"].idxmin()]
    assert designs[0] == (f"{best['peak_tflops']:.4g} TFLOP/s, {best['params_target_chip_memory_stacks']}x "
                          f"{best['params_target_chip_memory']} ({best['params_target_chip_stack_height']}-high), "
                          f"{best['chips']} chip{'s' if best['chips'] > 1 else ''} (best latency)")
    for _, g in svb.groupby("design", sort=False):
        fit = g[g["fits"]].sort_values("batch")
        s = fit["speedup"].to_numpy()
        # the cheapest front design may hold the model at batch 1-2 only (capacity in GiB)
        assert len(s) >= 2 and np.isfinite(s).all()
        assert (np.diff(s) <= 0.01 * s[:-1]).all(), s          # non-increasing (1% slack)
        assert s[-1] < s[0]
        # batch 1 is the study's own workload: the same speedup as in the results
        trial = g["trial"].iloc[0]
        assert s[0] == pytest.approx(float(df.loc[df["trial"] == trial, "speedup"].iloc[0]), rel=1e-9)
        fits = g.sort_values("batch")["fits"].to_numpy()          # once the KV cache overflows, it stays so
        assert fits[:len(fit)].all() and not fits[len(fit):].any()


def test_speedup_vs_batch_on_an_empty_front(study):
    out = reporting.speedup_vs_batch(study, pd.DataFrame(columns=["spec_ms_per_token", "cost_usd"]))
    assert out.empty and "speedup" in out.columns


# --------------------------------------------------------------------------- importances

def test_importances_per_objective(run, study):
    df = run[0]
    assert int(df["feasible"].sum()) >= 10
    imp = reporting.importances(df, study, min_rows=10)          # 128 trials: ~12 feasible
    assert set(imp) == {"spec_ms_per_token", "cost_usd"}
    names = {k.name for k in study.searched}
    for values in imp.values():
        assert set(values) == names
        assert sum(values.values()) == pytest.approx(1.0)
        assert all(v >= 0 for v in values.values())


def test_importances_empty_when_too_few_rows_or_one_knob(run, study):
    df = run[0]
    assert reporting.importances(df[df["feasible"]].head(10), study) == {}
    one = tuple(k if k.name == "target_chip_chips" or not k.searched
                else dataclasses.replace(k, fixed=k.choices[0] if k.choices else k.low)
                for k in study.knobs)
    assert reporting.importances(df, dataclasses.replace(study, knobs=one)) == {}


# --------------------------------------------------------------------------- the report

class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.srcs.append(dict(attrs).get("src") or "")


def test_dse_report_cli(run, tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "MIN_IMPORTANCE_ROWS", 10)    # 128 trials: ~12 feasible
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", str(run[1]), "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    page = (out / "index.html").read_text(encoding="utf-8")
    parser = _Images()
    parser.feed(page)
    parser.close()
    figures = sorted(p.name for p in out.glob("*.png"))
    assert figures == ["front.png", "hypervolume.png", "importance.png", "speedup_vs_batch.png"]
    assert len(parser.srcs) == len(figures)
    assert all(s.startswith("data:image/png;base64,") for s in parser.srcs)
    for name in figures:
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 1000, name
    assert "known parts" in page


def test_build_report_default_out_and_progress(run, capsys):
    res = reporting.build_report(run[1])
    assert Path(res["html"]).parent == run[1].with_name("q-report")
    assert "[report]" in capsys.readouterr().err
    reporting.build_report(run[1], progress=False)
    assert capsys.readouterr().err == ""


def test_default_out_of_a_directory(tmp_path):
    """Issue 21: array tasks write results/q/ beside results/q.parquet, and their reports wrote one folder."""
    (tmp_path / "q").mkdir()
    assert reporting.default_out(tmp_path / "q") == tmp_path / "q-dataset-report"
    assert reporting.default_out(tmp_path / "q.parquet") == tmp_path / "q-report"


def test_report_of_a_sweep_skips_importances(run, tmp_path):
    from dse.campaign.grid import sweep
    res = sweep(run[2], points=2, out=tmp_path / "grid", progress=False)
    rep = reporting.build_report(res.out_dir, out=tmp_path / "grid-rep", progress=False)
    names = {Path(f).name for f in rep["figures"]}
    assert "front.png" in names and "importance.png" not in names and "hypervolume.png" not in names


def test_report_of_a_sweep_reads_the_front_rows_only_and_draws_the_same(tmp_path, monkeypatch):
    """A sweep's report reads 6 columns and the objectives of every row and the table's columns of
    the front only; figures and page are byte for byte those drawn from every report column of
    every row (draft-chip study: 3 objectives, both draft-chip groups)."""
    from dse.campaign.grid import sweep
    from dse.report.page import write_report
    res = sweep(QUICK.parent / "draft-chip.yaml", points=2, out=tmp_path / "grid", progress=False)
    read = []
    load = da.load_results
    monkeypatch.setattr(da, "load_results", lambda path, columns=None: read.append(columns) or load(path, columns))
    rep = reporting.build_report(res.out_dir, out=tmp_path / "slim", progress=False)
    objs = ["spec_ms_per_token", "cost_usd", "power_w"]
    assert sorted(read[0]) == sorted(objs + ["feasible", "fits", "alpha", "tau", "k", "params_draft_chip_enabled"])
    monkeypatch.setattr(da, "load_results", load)
    full = da.load_results(res.out_dir, columns=reporting._report_columns(da.open_results(res.out_dir)))
    assert full.shape == (912, 34)           # 2,048 grid points, 912 distinct designs; 34 report columns
    study = reporting.study_from_results(full)
    o = [(x.metric, x.direction) for x in study.objectives]
    assert [m for m, _ in o] == objs
    ref = write_report(full, tmp_path / "full", known_parts=reporting.known_parts(study),
                       speedup_vs_batch=reporting.speedup_vs_batch(study, da.front(full, o)), importances={},
                       objectives=o, skipped=[s for s in rep["skipped"] if s[0] == "Parameter importance"])
    assert [name for name, _ in rep["skipped"]] == ["Parameter importance", "Hypervolume against trial"]
    names = sorted(Path(f).name for f in rep["figures"])
    assert names == sorted(Path(f).name for f in ref["figures"]) and "draft_chip.png" in names
    for name in names + ["index.html"]:
        assert (tmp_path / "slim" / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name


@pytest.mark.parametrize("col, unit", [
    ("tokens_per_s_per_kusd", "tokens/s/kUSD"), ("tokens_per_s_per_w", "tokens/s/W"),
    ("tokens_per_s_per_cm2", "tokens/s/cm²"), ("baseline_tokens_per_s", "tokens/s"),
    ("verify_arithmetic_intensity", "FLOP/B")])
def test_units_of_derived_metrics(col, unit):
    from dse.report.labels import unit_of
    assert unit_of(col) == unit
