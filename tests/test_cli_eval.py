"""`dse eval`, `dse hw`, `dse models` through click's CliRunner: the contract scripts rely on."""

import json

import pytest
from click.testing import CliRunner

from dse.cli.commands import main

KEYS = ["fits", "memory_required_gb", "memory_capacity_gb", "memory_shortfall_gb", "draft_memory_required_gb",
        "draft_memory_capacity_gb", "baseline_ms_per_token", "spec_ms_per_token", "speedup", "k", "alpha", "tau",
        "draft_ms_per_iter", "verify_ms_per_iter", "link_ms_per_iter", "iter_ms", "draft_cost_ratio",
        "speedup_bound", "baseline_arithmetic_intensity", "verify_arithmetic_intensity",
        "draft_arithmetic_intensity", "baseline_bound", "verify_bound", "draft_bound", "tokens_per_s", "ttft_ms",
        "request_latency_ms", "memory_reserve_gb", "chip_memory_required_gb", "chip_memory_shortfall_gb",
        "chip_memory_floor_gb", "draft_memory_reserve_gb", "energy_j_per_token", "baseline_energy_j_per_token",
        "tokens_per_j"]


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_eval_json_has_every_key():
    r = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.8",
            "--k", "4", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(KEYS) <= set(out)
    assert out["k"] == 4 and out["alpha"] == 0.8 and out["tau"] == pytest.approx(3.3616)
    assert out["baseline_bound"] in ("memory", "compute", "overhead")


def test_eval_not_fitting_is_exit_0_with_nulls():
    r = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--alpha", "0.8",
            "--json")
    assert r.exit_code == 0
    out = json.loads(r.output)
    assert out["fits"] is False and out["memory_shortfall_gb"] > 60
    assert out["spec_ms_per_token"] is None and out["baseline_ms_per_token"] is None


def test_eval_table_is_readable():
    r = run("eval", "--hw", "h200", "--target", "llama-3.1-70b", "--dtype", "fp8", "--draft", "llama-3.2-1b",
            "--alpha", "0.8")
    assert r.exit_code == 0
    assert "speedup" in r.output and "tau" in r.output and "alpha" in r.output and "k " in r.output


@pytest.mark.parametrize("args,needle", [
    (["--hw", "h1000", "--target", "llama-3.1-8b"], "did you mean"),
    (["--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle", "--alpha", "1.2"], "[0, 1]"),
    (["--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle", "--alpha", "0.8", "--k", "0"], "--k"),
    (["--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle", "--alpha", "0.5", "--tau", "3"],
     "give exactly one"),
    (["--hw", "h100-sxm", "--target", "llama-3.1-8b", "--set", "mem_bw=3"], "allowed"),
    (["--hw", "h100-sxm", "--target", "llama-3.1-8b", "--set", "mem_bw_tb_s=-3"], "mem_bw_tb_s"),
    (["--hw", "/nonexistent/x.yaml", "--target", "llama-3.1-8b"], "file not found"),
    (["--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "early-exit:99", "--alpha", "0.5"], "[1, 31]"),
])
def test_bad_input_exit_2_one_line(args, needle):
    r = run("eval", *args)
    assert r.exit_code == 2, r.output
    assert needle in r.output
    assert "Traceback" not in r.output


def test_set_and_runtime_and_baseline_anchor():
    fast = json.loads(run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--set", "mem_bw_tb_s=6.7",
                          "--json").output)
    slow = json.loads(run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--json").output)
    eager = json.loads(run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--runtime", "eager",
                           "--json").output)
    assert fast["baseline_ms_per_token"] < slow["baseline_ms_per_token"] < eager["baseline_ms_per_token"]
    anchored = json.loads(run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                              "--alpha", "0.8", "--baseline-ms", "12", "--json").output)
    assert anchored["baseline_ms_per_token"] == pytest.approx(12.0)
    assert anchored["anchor"]["factor"] > 1


def test_hw_and_models_listing():
    r = run("hw", "list", "--json")
    names = [d["name"] for d in json.loads(r.output)]
    assert {"h100-sxm", "h200", "b200", "mi300x", "a100-80gb"} <= set(names)
    r = run("models", "list", "--json")
    names = [d["name"] for d in json.loads(r.output)]
    assert {"llama-3.1-70b", "llama-3.2-1b", "vicuna-7b"} <= set(names)
    r = run("hw", "show", "h100-sxm")
    assert r.exit_code == 0 and "mem_bw_tb_s" in r.output and "3.35" in r.output
    r = run("models", "show", "deepseek-v3", "--json")
    assert json.loads(r.output)["fields"]["kv_lora_rank"] == 512


