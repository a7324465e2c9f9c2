"""Exit codes and exact messages a new user meets (issue 7, item 3): bad input exits 2 with
one line naming the file or option, the field and what is allowed; a runtime failure exits 1;
nothing is left behind by a command that fails its checks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from dse.cli.commands import main

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"


def run(*args):
    return CliRunner().invoke(main, list(args))


def study(tmp_path, mutate=None, name="s.yaml"):
    raw = yaml.safe_load(QUICK.read_text())
    raw["output"] = str(tmp_path / "out.parquet")
    raw["search"]["n_trials"] = 64
    if mutate:
        mutate(raw)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(raw))
    return p


def one_error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    return lines[0]


@pytest.mark.parametrize("mutate, expected", [
    (lambda r: r["search"].update(n_trials=1e308),
     "search.n_trials = 1e+308: expected an integer in [1, 1e+07]"),
    (lambda r: r["search"].update(seed=2**32),
     "search.seed = 4294967296: expected an integer in [0, 4.29497e+09]"),
    (lambda r: r["constraints"].append({"metric": {"a": 1}, "max": 3}),
     "constraints[1].metric = {'a': 1}: unknown metric"),
    (lambda r: r["objectives"].__setitem__(0, {"metric": ["x"], "direction": "minimize"}),
     "objectives[0].metric = ['x']: unknown metric"),
    (lambda r: r["workload"].update(k=50),
     "workload.k = 50: expected 'auto' or an integer in [1, 32]"),
    (lambda r: r["constraints"].__setitem__(0, {"metric": "power_w", "max": "lots"}),
     "constraints[0].max = 'lots': expected a number in (-inf, inf)"),
    (lambda r: r["grid"].update(points=10**6),
     "grid.points = 1000000: expected an integer in [2, 1000]"),
])
def test_bad_study_field_exits_2_with_one_line(tmp_path, mutate, expected):
    p = study(tmp_path, mutate)
    res = run("run", str(p), "--storage", ":memory:")
    assert res.exit_code == 2
    line = one_error_line(res)
    assert line == f"error: {p}: {expected}" or (expected.endswith("unknown metric")
                                                 and line.startswith(f"error: {p}: {expected} (allowed: alpha, "))
    assert not (tmp_path / "out.parquet").exists()


def test_bad_study_target_names_path_and_key_once(tmp_path):
    p = study(tmp_path, lambda r: r["workload"].update(target="llama-3.1-70"))
    res = run("run", str(p))
    assert res.exit_code == 2
    line = one_error_line(res)
    assert line == (f"error: {p}: workload.target = 'llama-3.1-70': not in hardware_db/models; did you mean "
                    "'llama-3.1-70b', 'llama-3.3-70b', 'llama-3.1-405b'? (`dse models list` shows all)")
    assert line.count(str(p)) == 1 and line.count("workload.target") == 1


def test_unknown_runtime_points_to_a_command_that_exists():
    res = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--runtime", "tensorrt")
    assert res.exit_code == 2
    assert one_error_line(res) == ("error: --runtime: runtime 'tensorrt' is not in hardware_db/runtimes; known: "
                                   "dataflow, eager, gpt-fast, graphs, rocm-vllm, sglang, trtllm-mmha, vllm, xla (`dse runtimes list` shows all)")
    near = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--runtime", "rocm")
    assert near.exit_code == 2 and "did you mean 'rocm-vllm'?" in one_error_line(near)
    listed = run("runtimes", "list")
    assert listed.exit_code == 0
    assert [ln.split()[0] for ln in listed.output.splitlines()[2:]] == ["dataflow", "eager", "gpt-fast", "graphs",
                                                                        "rocm-vllm", "sglang", "trtllm-mmha", "vllm", "xla"]
    shown = run("runtimes", "show", "graphs")
    assert shown.exit_code == 0 and "kernel_launch_us" in shown.output and "fitted" in shown.output


def test_draft_hw_without_draft_blames_the_draft_chip():
    res = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft-hw", "l4", "--alpha", "0.8")
    assert res.exit_code == 2
    assert one_error_line(res) == "error: --draft-hw = True: a draft chip holds a draft model: give --draft too"


def test_k_has_an_upper_bound_with_its_reason():
    res = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.8",
              "--k", "50")
    assert res.exit_code == 2
    assert one_error_line(res) == ("error: --k = '50': expected 'auto' or an integer in [1, 32] "
                                   "(see dse.workload.spec.K_LIMIT for the reason)")
    ok = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.8",
             "--k", "32", "--json")
    assert ok.exit_code == 0 and '"k": 32' in ok.output


def test_parquet_without_dse_metadata(tmp_path):
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), plain)
    res = run("pareto", str(plain))
    assert res.exit_code == 2
    assert one_error_line(res) == (f"error: {plain}: not dse results: the Parquet file carries no dse metadata "
                                   "(results come from `dse run` or `dse sweep`)")


def test_empty_front_says_no_feasible_design(tmp_path):
    p = study(tmp_path, lambda r: r["constraints"].__setitem__(0, {"metric": "power_w", "max": 1}))
    res = run("run", str(p), "--storage", ":memory:", "--quiet")
    assert res.exit_code == 0
    assert "no feasible design" in res.output and "Empty DataFrame" not in res.output
    res = run("pareto", str(tmp_path / "out.parquet"))
    assert res.exit_code == 0
    # 'designs' counts distinct designs: the 64 trials less those that repeat an earlier one
    designs = int(pd.read_parquet(tmp_path / "out.parquet")["duplicate_of"].isna().sum())
    assert 0 < designs <= 64
    assert res.output == (f"no feasible design among {designs} designs (spec_ms_per_token minimize, "
                          "cost_usd minimize)\n")


def test_failed_option_leaves_no_journal(tmp_path):
    p = study(tmp_path)
    for bad in (["--sampler", "cmaes"], ["--seed", str(2**33)], ["--n-trials", "0"]):
        res = run("run", str(p), *bad)
        assert res.exit_code == 2, (bad, res.output)
        assert list(tmp_path.glob("*.journal*")) == [], bad
        assert not (tmp_path / "out.parquet").exists()


def test_unwritable_output_is_a_runtime_failure(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = study(tmp_path)
    res = run("run", str(p), "--storage", ":memory:", "--quiet", "--out", str(blocker / "out.parquet"))
    assert res.exit_code == 1
    assert one_error_line(res).startswith(f"error: {blocker}")


def test_unreachable_database_is_a_runtime_failure(tmp_path):
    """A database that cannot be opened is not the input's fault: one line, exit 1 (a malformed
    URL is bad input, exit 2: tests/test_shared_study.py)."""
    p = study(tmp_path)
    res = run("run", str(p), "--storage", f"sqlite:///{tmp_path}/no/such/dir/x.db")
    assert res.exit_code == 1
    assert one_error_line(res).startswith(f"error: --storage sqlite:///{tmp_path}/no/such/dir/x.db: cannot open")


def test_top_level_help_does_not_truncate_and_options_have_help():
    import click
    res = run("--help")
    assert "..." not in res.output.split("Commands:")[1]
    missing = []

    def walk(cmd, name):
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.help:
                missing.append(f"{name} {p.opts[0]}")
        for sub, c in getattr(cmd, "commands", {}).items():
            walk(c, f"{name} {sub}")
    walk(main, "dse")
    assert missing == []


def test_hw_list_uses_one_number_format_per_column():
    out = run("hw", "list").output.splitlines()
    header = out[0].split()
    col = header.index("mem_bw_tb_s")
    decimals = {len(ln.split()[-len(header) + col].split(".")[-1]) for ln in out[2:]
                if "." in ln.split()[-len(header) + col]}
    assert len(decimals) == 1
