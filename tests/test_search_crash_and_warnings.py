"""Issue 20, item 4: the draft chip's `chips` is searchable in `dse run` (it crashed with a
TypeError in dse/study/space.py for every sampler), and Optuna's conditional-space warnings are
filtered by where they come from, not by their text (475 lines for 300 QMC trials)."""

import logging

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from dse.cli.commands import main
from dse.search.runner import run_study
from dse.search.sampler_setup import _ConditionalSpaceFilter
from dse.study import parse_study
from dse.study.space import active_masks

RAW = {
    "name": "draft-chips",
    "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "bf16", "acceptance": {"alpha": 0.8}},
    "space": {
        "target_chip": {"process_node": "n5", "peak_tflops": {"low": 100, "high": 1000}, "memory": ["hbm3e"],
                        "memory_stacks": {"low": 2, "high": 6}},
        "draft_chip": {"enabled": [True, False], "chips": [1, 2], "peak_tflops": {"low": 10, "high": 200},
                       "memory": ["lpddr5x", "sram"], "sram_mb": {"low": 0, "high": 1024},
                       "link_bw_gb_s": {"low": 16, "high": 256}, "link_latency_us": {"low": 1, "high": 4}},
    },
    "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                   {"metric": "cost_usd", "direction": "minimize"}],
    "search": {"n_trials": 40, "batch_size": 20, "seed": 0},
}


def test_an_inactive_controller_acts_at_its_neutral_value():
    """The draft chip's `chips` is None where the draft chip is off (it is inactive there) and
    decides the draft link latency's activity where it is on: (chips > 1) or on."""
    s = parse_study(RAW, "draft-chips.yaml")
    v = {"draft_chip_enabled": np.array([True, False, True]),
         "draft_chip_chips": np.array([2, None, 1], dtype=object),
         "draft_chip_memory": np.array(["sram", None, "lpddr5x"], dtype=object)}
    m = active_masks(s, v, 3)
    assert m["draft_chip_link_latency_us"].tolist() == [True, False, True]
    assert m["draft_chip_chips"].tolist() == [True, False, True]
    assert m["draft_chip_sram_mb"].tolist() == [True, False, True]


@pytest.mark.parametrize("sampler", ["auto", "nsga2", "nsga3", "tpe", "random", "qmc"])
def test_draft_chip_chips_is_searchable_with_every_sampler(tmp_path, sampler):
    raw = {**RAW, "output": str(tmp_path / "r.parquet"), "storage": ":memory:"}
    raw["search"] = {**RAW["search"], "sampler": sampler}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(main, ["run", str(path), "--quiet"])
    assert res.exit_code == 0, res.output
    df = run_study(path, storage=":memory:", out=tmp_path / "again.parquet", progress=False).frame
    on = df["params_draft_chip_enabled"].astype(bool)
    assert len(df) == 40
    assert set(df.loc[on, "params_draft_chip_chips"].astype(int)) <= {1, 2}
    assert df.loc[~on, "params_draft_chip_chips"].isna().all()
    # a design's draft chips are the knob's value where the draft chip is on, and none where it is off
    assert (df.loc[on, "draft_chips"] == df.loc[on, "params_draft_chip_chips"].astype(int)).all()
    assert (df.loc[~on, "draft_chips"] == 0).all()


class _Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_qmc_on_a_conditional_space_logs_no_warning(tmp_path):
    """300 QMC trials of a study with a draft chip: Optuna logs no warning (it logged one per
    conditional knob and trial, and one per batch about the conditional space). Optuna's logger
    does not propagate, so the handler sits on it."""
    raw = {**RAW, "output": str(tmp_path / "r.parquet"), "storage": ":memory:"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    keep = _Keep()
    logging.getLogger("optuna").addHandler(keep)
    try:
        df = run_study(path, n_trials=300, sampler="qmc", storage=":memory:", progress=False).frame
    finally:
        logging.getLogger("optuna").removeHandler(keep)
    assert len(df) == 300 and df["params_draft_chip_enabled"].nunique() == 2
    assert [r.getMessage()[:80] for r in keep.records] == []


def test_the_filter_goes_by_the_function_not_the_text():
    f = _ConditionalSpaceFilter()

    def record(func, level=logging.WARNING, text="any text at all, in any Optuna version"):
        r = logging.LogRecord("optuna.samplers._qmc", level, "x.py", 1, text, None, None, func=func)
        return f.filter(r)
    assert not record("_log_independent_sampling")
    assert not record("infer_relative_search_space")
    assert record("sample_relative")                         # any other warning passes
    assert record("_log_independent_sampling", level=logging.ERROR)
