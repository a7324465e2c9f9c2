"""dse.report: figures are real PNGs and index.html is self-contained."""

import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dse.results.analysis as da
from dse.report import figures, labels, page

PNG = b"\x89PNG\r\n\x1a\n"


def results(n=400, objectives=2, seed=0):
    rng = np.random.default_rng(seed)
    lat = rng.uniform(2, 30, n)
    draft = rng.random(n) > 0.5
    df = pd.DataFrame({
        "study": "toy", "trial": np.arange(n), "state": "COMPLETE",
        "sampler": np.where(np.arange(n) % 2, "NSGAIISampler", "RandomSampler"),
        "params_mem_bw_tb_s": rng.uniform(1, 8, n), "params_num_chips": rng.integers(1, 9, n),
        "params_draft_chip_enabled": draft,
        "spec_ms_per_token": np.where(rng.random(n) < 0.1, np.nan, lat * (1 - 0.2 * draft)),
        "cost_usd": 2e5 / lat + rng.uniform(0, 5e3, n) + 4e3 * draft,
        "power_w": rng.uniform(200, 900, n),
        "alpha": 0.8, "tau": 3.36, "k": 4, "draft_cost_ratio": 0.05,
        "speedup": rng.uniform(1, 3, n),
    })
    df["fits"] = df["spec_ms_per_token"].notna()
    df["feasible"] = df["fits"] & (df["power_w"] <= 800)
    objs = [{"metric": "spec_ms_per_token", "direction": "minimize"},
            {"metric": "cost_usd", "direction": "minimize"},
            {"metric": "power_w", "direction": "minimize"}][:objectives]
    df.attrs["dse"] = {"schema_version": 1, "dse_version": "0.0.test", "objectives": objs,
                       "constraints": [{"metric": "power_w", "max": 800}],
                       "tech_fingerprint": "abc",
                       "study": {"name": "toy <study>", "objectives": objs,
                                 "workload": {"target": "llama-3.1-70b", "draft": "llama-1b",
                                              "batch": 8, "alpha": 0.8}}}
    return df


class Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.external, self.tables = [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "table":
            self.tables += 1
        if tag in ("script", "link", "iframe"):   # no JS at all; CSS only inline
            self.external.append((tag, a))
        for key in ("src", "href"):
            if (a.get(key) or "").startswith(("http:", "https:", "//")):
                self.external.append((tag, a[key]))


def test_front_caption_says_what_known_parts_run():
    """Known parts that run the study's best draft and batch (dse.report.context.known_parts
    ``runs``) are named with them in the front's caption, and what was fixed for them; without
    ``runs`` the caption says they run the study's draft and batch."""
    known = pd.DataFrame({"name": ["h200 x1", "b200 x1"], "spec_ms_per_token": [6.0, 4.0], "cost_usd": [3.0e4, 4e4],
                          "runs": ["eagle3 (k 6, a tree of 59 nodes), batch 1", "eagle3 (a chain of 3), batch 1"],
                          "note": ["prompt_tokens = 512 (searched in the study: its first value)"] * 2})
    objs = [("spec_ms_per_token", "minimize"), ("cost_usd", "minimize")]
    text = page.known_caption(known, objs)
    assert ("with the study's draft and batch (those it searches) that give it the least spec_ms_per_token: "
            "h200 x1 eagle3 (k 6, a tree of 59 nodes), batch 1; b200 x1 eagle3 (a chain of 3), batch 1.") in text
    assert "Fixed for them: prompt_tokens = 512 (searched in the study: its first value)." in text
    plain = page.known_caption(known.drop(columns=["runs", "note"]), objs)
    assert "each at the fewest chips that hold it (the draft on the target chips), with the study's draft and batch." \
        in plain and "same workload" not in text + plain
    assert "greatest tokens_per_s" in page.known_caption(known, [("tokens_per_s", "maximize")] + objs)


@pytest.mark.parametrize("objectives", [2, 3])
def test_write_report(tmp_path, objectives):
    df = results(objectives=objectives)
    known = pd.DataFrame({"name": ["H100", "H200"], "spec_ms_per_token": [12.0, 9.0],
                          "cost_usd": [3.0e4, 3.5e4], "power_w": [700, 700]})
    svb = pd.DataFrame({"design": np.repeat(["trial 3", "trial 7"], 5),
                        "batch": np.tile([1, 4, 16, 64, 256], 2),
                        "speedup": [2.8, 2.5, 1.9, 1.2, 0.9, 2.4, 2.3, 2.0, 1.5, 1.1]})
    imp = {"spec_ms_per_token": {"params_mem_bw_tb_s": 0.7, "params_num_chips": 0.3},
           "cost_usd": {"params_mem_bw_tb_s": 0.4, "params_num_chips": 0.6}}
    messages = []
    out = page.write_report(df, tmp_path / "rep", known_parts=known, speedup_vs_batch=svb,
                              importances=imp, progress=messages.append)
    names = sorted(Path(p).name for p in out["figures"])
    assert names == ["draft_chip.png", "front.png", "hypervolume.png", "importance.png",
                     "speedup_vs_batch.png"]
    for p in out["figures"]:
        data = Path(p).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    assert len(messages) >= 5
    text = Path(out["html"]).read_text(encoding="utf-8")
    parser = Collector()
    parser.feed(text)
    assert len(parser.imgs) == 5
    assert all(src.startswith("data:image/png;base64,") for src in parser.imgs)
    assert parser.external == []
    assert parser.tables == 2                    # study summary + front table
    assert "toy &lt;study&gt;" in text           # escaped
    assert "spec_ms_per_token (ms/token)" in text
    assert "matplotlib.pyplot" not in sys.modules


def test_write_report_minimal(tmp_path):
    """No optional inputs, no draft column, no trial column: front figure and table only."""
    df = results().drop(columns=["params_draft_chip_enabled", "trial"])
    out = page.write_report(df, tmp_path)
    assert [Path(p).name for p in out["figures"]] == ["front.png"]
    assert Path(out["html"]).exists()


def test_front_table(tmp_path):
    df = results()
    full = da.front(df)
    assert len(full) > 3                      # so that top=3 truncates
    t = da.front_table(df, None, top=3)
    assert len(t) == 3
    assert list(t.columns) == ["spec_ms_per_token", "cost_usd", "alpha", "tau", "k", "draft_cost_ratio",
                               "speedup", "trial", "params_mem_bw_tb_s", "params_num_chips",
                               "params_draft_chip_enabled"]
    assert t["trial"].tolist() == full["trial"].head(3).tolist()
    assert t["spec_ms_per_token"].is_monotonic_increasing


@pytest.mark.parametrize("col, unit", [
    ("spec_ms_per_token", "ms/token"), ("cost_usd", "USD"), ("power_w", "W"),
    ("die_area_mm2", "mm²"), ("mem_bw_tb_s", "TB/s"), ("memory_capacity_gb", "GB"),
    ("params_mem_bw_tb_s", "TB/s"), ("tokens_per_s", "tokens/s"), ("ttft_ms", "ms"),
    ("draft_ms_per_iter", "ms/iter"), ("peak_tflops", "TFLOP/s"), ("speedup", "×"),
    ("alpha", ""), ("k", ""), ("draft_cost_ratio", "")])
def test_units(col, unit):
    assert labels.unit_of(col) == unit


def test_workload_title():
    t = page.workload_title(results())
    assert "llama-3.1-70b" in t and "α = 0.8" in t and "τ = 3.36" in t and "k = 4" in t
    assert page.workload_title(pd.DataFrame({"x": [1]})) == "dse results"


@pytest.mark.parametrize("v, top, text", [
    (2000, 60000, "2k"), (60000, 60000, "60k"), (500, 60000, "0.5k"), (2000, 9000, "2000"),
    (3e7, 5e7, "30M"), (0.05, 1.0, "0.05"),
])
def test_one_tick_unit_per_axis(v, top, text):
    assert labels.tick_text(v, top) == text


def test_design_labels_name_key_knobs():
    from dse.report.rows import design_label
    row = pd.Series({"params_target_chip_device": "h200", "chips": 2})
    assert design_label(row) == "h200 x2"
    row = pd.Series({"peak_tflops": 1122.4, "params_target_chip_memory": "hbm4", "params_target_chip_memory_stacks": 7,
                     "params_target_chip_stack_height": 8, "chips": 1, "params_draft_chip_enabled": True})
    assert design_label(row) == "1122 TFLOP/s, 7x hbm4 (8-high), 1 chip + draft chip"
    assert labels.short_knob("params_draft_chip_memory") == "draft.memory"
    assert labels.short_knob("target_chip_peak_tflops") == "peak_tflops"


def test_front_panel_draws_and_counts_each_point_once():
    # rows 0 and 1 are the same design point (a repeat): the front is (1, 3), (2, 2), (3, 1),
    # three points, and the legend's count is 3, not the 4 non-dominated rows
    df = pd.DataFrame({"spec_ms_per_token": [1.0, 1.0, 2.0, 3.0, 3.0], "cost_usd": [3.0, 3.0, 2.0, 1.0, 5.0],
                       "feasible": [True] * 5})
    objs = [("spec_ms_per_token", "minimize"), ("cost_usd", "minimize")]
    (pair,) = figures.pairs_data(df, objs)
    assert pair.front.tolist() == [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]


def test_the_page_shows_a_knob_without_value_as_the_terminal_does(tmp_path):
    """A knob that does not act on a design (a nullable column: Int64, string) is '-' on the page as in
    the terminal; pandas' to_html printed '<NA>' for those dtypes whatever its na_rep."""
    df = results()
    df["params_draft_chip_stacks"] = pd.array(np.where(df["params_draft_chip_enabled"], 4, None), dtype="Int64")
    df["params_draft_chip_memory"] = pd.array(np.where(df["params_draft_chip_enabled"], "hbm3e", None), dtype="string")
    html = Path(page.write_report(df, tmp_path)["html"]).read_text()
    front_rows = html[html.index('class="dataframe front"'):]
    assert "&lt;NA&gt;" not in html and "<td>-</td>" in front_rows and "<td>hbm3e</td>" in front_rows
    assert "<td>4</td>" in front_rows and "<td>4.0</td>" not in front_rows
