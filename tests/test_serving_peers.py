"""benchmarks/peers/serving_peers.py reads AIConfigurator's best_config_topn.csv: on a stored sample of
AIConfigurator 0.12.0's own output (benchmarks/peers/fixtures/, a parsing fixture only, never used to
calibrate dse). Nothing here installs or runs AIConfigurator."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("serving_peers", REPO / "benchmarks" / "peers" / "serving_peers.py")
sp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sp)
FIXTURES = REPO / "benchmarks" / "peers" / "fixtures"


def sample(mode: str) -> str:
    return (FIXTURES / f"aiconfigurator-0.12.0-llama70b-h200x8-{mode}.csv").read_text()


def test_aggregated_best_row():
    # first data row of the sample: tokens/s/gpu 367.756 (of 367.756, 308.661, 282.282), concurrency 32 on
    # one tp4 replica of 4 GPUs, TTFT 906.018 ms, TPOT 19.777 ms, 50.563 tokens/s/user (~1000 / 19.777)
    got = sp.parse_best_config(sample("agg"), "agg")
    assert got == {"tokens_per_s_per_gpu": 367.756, "tokens_per_s_per_user": 50.563, "concurrency": 32,
                   "ttft_ms": 906.018, "tpot_ms": 19.777, "gpus_per_replica": 4, "backend": "trtllm",
                   "version": "1.3.0rc20", "layout": "tp4"}


def test_disaggregated_best_row():
    # 2 prefill workers at tp1 + 1 decode worker at tp2 = 4 GPUs; 465.975 tokens/s/gpu = 1863.9 / 4
    got = sp.parse_best_config(sample("disagg"), "disagg")
    assert got["tokens_per_s_per_gpu"] == pytest.approx(1863.9 / 4, abs=1e-3)
    assert (got["concurrency"], got["ttft_ms"], got["tpot_ms"], got["gpus_per_replica"]) == (44, 869.328, 18.988, 4)
    assert got["layout"] == "2 x tp1 prefill + 1 x tp2 decode"
    assert got["version"] == "1.3.0rc20"


def test_best_is_the_highest_throughput_not_the_first_row():
    lines = sample("agg").splitlines(True)
    head = [ln for ln in lines if ln.startswith("#") or ln.startswith("model,")]
    rows = [ln for ln in lines if ln not in head]
    got = sp.parse_best_config("".join(head + rows[::-1]), "agg")   # 282.282, 308.661, 367.756
    assert (got["tokens_per_s_per_gpu"], got["layout"]) == (367.756, "tp4")


def test_layout_names_and_an_empty_file():
    assert [sp.short_layout(p) for p in ("tp4pp1dp1etp1ep1", "tp1pp1dp8etp1ep8", "tp1pp1dp1etp1ep1")] == \
        ["tp4", "dp8 ep8", "tp1"]
    with pytest.raises(ValueError, match="no agg rows"):
        sp.parse_best_config("# only a comment\n", "agg")
