"""The smaller usability items of issue 21 (item 7): device files in studies, --help that names
every choice and default, did-you-mean that finds the obvious names."""

from __future__ import annotations

import click
import pytest
import yaml
from click.testing import CliRunner

import dse.results.analysis as da
from dse.cli.commands import main
from dse.errors import did_you_mean
from dse.study import load_study


def _commands(cmd=main, path=("dse",)):
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


# --------------------------------------------------------------------------- device files

def _device_file(tmp_path, name="my-h100", bw="4.0"):
    from pathlib import Path
    src = Path(__file__).resolve().parent.parent / "hardware_db" / "devices" / "h100-sxm.yaml"
    raw = yaml.safe_load(src.read_text())
    raw.update(name=name, mem_bw_tb_s=float(bw))
    p = tmp_path / "parts" / f"{name}.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(raw))
    return p


def _study(tmp_path, devices):
    raw = {"name": "dev-files", "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "batch": 1,
                                             "prompt_tokens": 512, "output_tokens": 128,
                                             "acceptance": {"alpha": 0.8}, "k": 4},
           "space": {"target_chip": {"device": devices, "chips": 1}},
           "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                          {"metric": "cost_usd", "direction": "minimize"}],
           "search": {"sampler": "random", "n_trials": 8, "batch_size": 8, "seed": 0},
           "output": str(tmp_path / "out.parquet")}
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_study_device_takes_a_yaml_file_like_dse_eval_hw(tmp_path):
    """`device:` in a study takes a YAML file (relative to the study's folder) as `dse eval --hw`
    does; the design it evaluates is the one `dse eval --hw FILE` evaluates."""
    f = _device_file(tmp_path)
    p = _study(tmp_path, ["h100-sxm", "parts/my-h100.yaml"])
    study = load_study(p)
    assert study.knob("target_chip_device").choices == ("h100-sxm", str(f.resolve()))
    r = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"])
    assert r.exit_code == 0, r.output
    table = r.output.split("\n", 1)[1]
    assert "my-h100.yaml" in table and str(tmp_path) not in table     # tables show the file's name
    df = da.load_results(tmp_path / "out.parquet")
    mine = df[df["params_target_chip_device"] == str(f.resolve())].iloc[0]
    ev = CliRunner().invoke(main, ["eval", "--hw", str(f), "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                                   "--alpha", "0.8", "--k", "4", "--prompt", "512", "--output", "128", "--json"])
    import json
    want = json.loads(ev.output)
    assert mine["spec_ms_per_token"] == pytest.approx(want["spec_ms_per_token"], rel=1e-9)
    assert mine["mem_bw_tb_s"] == pytest.approx(4.0)          # the file's bandwidth, not the H100's 3.35


def test_study_device_file_errors_name_the_field(tmp_path):
    _device_file(tmp_path)
    r = CliRunner().invoke(main, ["run", str(_study(tmp_path, ["parts/nope.yaml"])), "--storage", ":memory:"])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "space.target_chip.device[0] = 'parts/nope.yaml': no such device file" in r.output
    (tmp_path / "parts" / "bad.yaml").write_text("name: bad\nmem_bw_tb_s: -1\n")
    r = CliRunner().invoke(main, ["run", str(_study(tmp_path, ["parts/bad.yaml"])), "--storage", ":memory:"])
    assert r.exit_code == 2 and "bad.yaml: mem_bw_tb_s = -1" in r.output


# --------------------------------------------------------------------------- --help

def test_every_option_states_its_default():
    """--help complete: an option that may be left out says what happens then."""
    missing = []
    for name, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag and not p.required and not p.hidden:
                if not p.show_default and "default" not in (p.help or "").lower():
                    missing.append(f"{name} {p.opts[0]}")
    assert not missing, missing


def test_help_names_every_choice():
    from dse.catalog.database import load_database
    from dse.model.transformer import WEIGHT_FORMATS
    from dse.study.spec import SAMPLERS
    text = " ".join(CliRunner().invoke(main, ["eval", "--help"], terminal_width=200).output.split())
    for fmt in WEIGHT_FORMATS:                 # the extra dtypes too (int4-g128, nvfp4, ...)
        assert fmt in text, fmt
    for rt in load_database().names("runtime"):
        assert rt in text, rt
    run = " ".join(CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output.split())
    assert "|".join(SAMPLERS) in run and "auto if unset" in run


# --------------------------------------------------------------------------- did you mean

@pytest.mark.parametrize("typed, known, want", [
    ("llama3", ["llama-2-7b", "llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b", "llama-3.2-1b", "qwen3-8b"],
     ["llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b"]),
    ("h100", ["h100-pcie", "h100-sxm", "h200", "mi300x"], ["h100-pcie", "h100-sxm", "h200"]),
    ("LLAMA-70B", ["eagle-llama2-chat-70b", "llama-2-70b", "llama-3.1-70b", "llama-3.1-8b"],
     ["llama-2-70b", "llama-3.1-70b", "eagle-llama2-chat-70b"]),
    ("peak_tflop", ["peak_tflops", "memory"], ["peak_tflops"]),
])
def test_did_you_mean_finds_the_obvious_names(typed, known, want):
    assert did_you_mean(typed, known, n=3) == want


def test_unknown_names_on_the_command_line():
    r = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama3"])
    assert r.exit_code == 2 and "did you mean 'llama-3.1-405b', 'llama-3.1-70b', 'llama-3.1-8b'?" in r.output
    r = CliRunner().invoke(main, ["hw", "show", "nonexistent"])      # nothing close: the names there are
    assert r.exit_code == 2 and "known: a100-80gb, b200," in r.output and "h100-sxm" in r.output


def test_draft_chip_categorical_knobs_with_the_draft_chip_off(tmp_path):
    """A draft chip's runtime and link_class knobs are null where the draft chip is off (they do
    not act): such designs run (a null was read as a runtime named 'None')."""
    raw = {"name": "draft-knobs", "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "batch": 1,
                                               "prompt_tokens": 256, "output_tokens": 64,
                                               "acceptance": {"alpha": 0.8}, "k": 4},
           "space": {"target_chip": {"peak_tflops": 500, "memory": "hbm3e", "memory_stacks": 4, "chips": 1},
                     "draft_chip": {"enabled": [True, False], "peak_tflops": 50, "memory": "lpddr5x",
                                    "runtime": ["graphs", "dataflow"], "link_class": ["nvlink", "pcie"]}},
           "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                          {"metric": "cost_usd", "direction": "minimize"}],
           "search": {"sampler": "random", "n_trials": 24, "batch_size": 24, "seed": 0},
           "output": str(tmp_path / "out.parquet")}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    r = CliRunner().invoke(main, ["run", str(p), "--storage", ":memory:", "--quiet"])
    assert r.exit_code == 0, r.output
    df = da.load_results(tmp_path / "out.parquet")
    off = df[~df["params_draft_chip_enabled"].astype(bool)]
    assert len(off) and off["params_draft_chip_runtime"].isna().all() and off["spec_ms_per_token"].notna().all()
