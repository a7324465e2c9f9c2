"""Memory per chip beside the group, the runtime reserve apart, and one unit per capacity name (issue 17
item 8, issue 21 item 4): worked by hand from hardware_db.

GiB = 2^30 bytes (how DRAM is sized: memory_capacity_gib), GB = 1e9 bytes (every output `_gb`).
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from dse.api import evaluate_design
from dse.catalog.database import load_database
from dse.cli.commands import main

GIB = 2.0 ** 30
DB = load_database()


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_the_reserve_is_not_part_of_what_the_model_needs():
    # Llama-3.1-8B bf16, batch 1, 256 tokens on one H100: weights 32 layers x 218,103,808 + embedding and LM head
    # 2 x 128,256 x 4,096 = 8,029,995,008 x 2 B = 16,059,990,016 B + KV 256 x 32 x 2 x 8 x 128 x 2 B = 33,554,432 B
    # = 16.093544448 GB; the graphs runtime keeps 5% of the capacity: of 80 GiB 4.294967296 GB, of 100 GB 5 GB.
    # What the model needs does not grow with the capacity; the reserve does.
    a = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    b = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", set_fields={"memory_capacity_gb": 100})
    c = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", set_fields={"memory_capacity_gib": 100})
    assert a["memory_required_gb"] == b["memory_required_gb"] == c["memory_required_gb"]
    assert a["memory_required_gb"] == pytest.approx(16.093544448, rel=1e-12)
    assert a["memory_capacity_gb"] == pytest.approx(80 * GIB / 1e9) and a["memory_reserve_gb"] == pytest.approx(
        0.05 * 80 * GIB / 1e9, rel=1e-12)
    assert b["memory_capacity_gb"] == 100.0 and b["memory_reserve_gb"] == pytest.approx(5.0, rel=1e-12)
    assert c["memory_capacity_gb"] == pytest.approx(107.3741824) and c["memory_reserve_gb"] == pytest.approx(5.36870912)


def test_group_shortfall_and_per_chip_shortfall():
    # DeepSeek-V3 fp8 on 8 x H100 (80 GiB), batch 1, 256 tokens: each chip holds 84,779,335,680 B of weights
    # (tests/model/test_expert_parallel.py) + the MLA latent cache whole, 256 x 70,272 B = 17,989,632 B
    # = 84.797325312 GB, + the reserve 4.294967296 GB, of 85.89934592 GB: short by 3.192946688 GB a chip. The group
    # figures count that 8 times (25.54 GB): what is short is every chip's 3.19 GB, not one 25.5 GB memory.
    r = evaluate_design(hw="h100-sxm", chips=8, target="deepseek-v3", dtype="fp8")
    chip = (84_779_335_680 + 256 * 70_272) / 1e9
    assert r["chip_memory_required_gb"] == pytest.approx(chip, rel=1e-12)
    assert r["chip_memory_shortfall_gb"] == pytest.approx(chip + 0.05 * 80 * GIB / 1e9 - 80 * GIB / 1e9, rel=1e-9)
    assert r["chip_memory_shortfall_gb"] == pytest.approx(3.192946688, rel=1e-9)
    assert r["memory_shortfall_gb"] == pytest.approx(8 * 3.192946688, rel=1e-9)
    assert r["memory_required_gb"] == pytest.approx(8 * chip, rel=1e-12)
    # however many chips share a stage, a chip keeps the replicated MLA down-projections and routers (1,029,898,240 B
    # at fp8) and the whole latent cache of its layers: 1.047887872 GB over 61 stages of one layer each, 17.18 MB;
    # here more chips would help
    assert r["chip_memory_floor_gb"] == pytest.approx((1_029_898_240 + 256 * 70_272) / 61 / 1e9, rel=1e-12)
    from dse.cli.text import eval_table
    text = eval_table(r)
    assert "short by 3.19 GB a chip (25.54 GB over 8 chips)" in text
    assert "more chips cannot help" not in text


def test_more_chips_cannot_help_when_the_replicated_state_exceeds_a_chip():
    # batch 256 of 8,192 + 1,024 tokens: the latent cache 256 x 9,216 x 70,272 B = 165,792,448,512 B is whole on
    # every chip of a stage; with the replicated weights 1,029,898,240 B a chip holds 166.822346752 GB over all
    # 61 layers, beyond an H200's 151.40 GB less its 7.57 GB reserve -- but in 61 pipeline stages of one layer a
    # chip holds 1/61 of it, 2.73 GB: more chips (in stages) do help
    r = evaluate_design(hw="h200", chips=8, target="deepseek-v3", dtype="fp8", batch=256, prompt=8192, output=1024)
    assert r["chip_memory_floor_gb"] == pytest.approx((1_029_898_240 + 256 * 9216 * 70_272) / 61 / 1e9, rel=1e-12)
    assert r["chip_memory_floor_gb"] == pytest.approx(166.822346752 / 61, rel=1e-12)
    from dse.cli.text import eval_table
    assert "more chips cannot help" not in eval_table(r)
    # at batch 8,192 even one layer's latent cache is too much for an L4 (24 GiB, 5% reserve): 8,192 x 9,216
    # x 70,272 B / 61 + 1,029,898,240 B / 61 = 86.99 GB a chip at any chip count
    r = evaluate_design(hw="l4", chips=8, target="deepseek-v3", dtype="fp8", batch=8192, prompt=8192, output=1024)
    floor = (1_029_898_240 + 8192 * 9216 * 70_272) / 61 / 1e9
    assert r["chip_memory_floor_gb"] == pytest.approx(floor, rel=1e-12) and floor > 86.9
    assert f"more chips cannot help: a chip holds at least {floor:.2f} GB at any chip count" in eval_table(r)
    # a GQA model's floor is one KV head's cache in 80 stages: Llama-3.1-70B, 8 KV heads, 256 tokens x 327,680 B / 8 / 80
    g = evaluate_design(hw="h100-sxm", chips=2, target="llama-3.1-70b")
    assert g["chip_memory_floor_gb"] == pytest.approx(256 * 327_680 / 8 / 80 / 1e9, rel=1e-12)


def test_hw_list_and_show_give_both_units():
    rows = {d["name"]: d for d in json.loads(run("hw", "list", "--json").output)}
    h100, groq = rows["h100-sxm"], rows["groq-lpu-v1"]
    assert (h100["memory_capacity_gib"], h100["memory_capacity_gb"]) == (80.0, 85.9)
    assert (groq["memory_capacity_gib"], groq["memory_capacity_gb"]) == (0.2142, 0.23)       # 230 MB of SRAM
    text = run("hw", "list").output.splitlines()
    assert text[0].split()[2:4] == ["memory_capacity_gib", "memory_capacity_gb"]
    h = next(ln for ln in text if ln.startswith("h100-sxm")).split()
    assert "80.000" in h and "85.900" in h
    show = run("hw", "show", "h100-sxm").output
    lines = {ln.split()[0]: ln.split(None, 1)[1] for ln in show.splitlines() if ln.strip()}
    assert lines["memory_capacity_gib"].startswith("80.0  (")
    assert lines["memory_capacity_gb"].startswith("85.9  (= memory_capacity_gib in GB (1e9 bytes))")
    # and dse eval reads the same 80 GiB as 85.90 GB, with its GiB beside it
    out = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b").output
    assert "of 85.90 GB (80 GiB)" in out
    assert "of 100.00 GB (93.13 GiB)" in run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--set",
                                            "memory_capacity_gb=100").output


def _device(tmp_path, name, **fields):
    """A device file of its own name (the database caches entries by path)."""
    raw = {"schema_version": 1, "name": name, "memory_type": "hbm3", "mem_bw_tb_s": 3.0,
           "peak_tflops_bf16": 500, "mem_efficiency": 0.8, "compute_efficiency": 0.6, **fields}
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_a_device_file_says_its_capacity_unit(tmp_path):
    ok = run("eval", "--hw", str(_device(tmp_path, "gib", memory_capacity_gib=96)), "--target", "llama-3.1-8b", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["memory_capacity_gb"] == pytest.approx(96 * GIB / 1e9)
    # an HBM part in decimal GB is refused, not read as GiB (what device files meant by _gb before) nor as GB
    p = _device(tmp_path, "gb", memory_capacity_gb=96)
    bad = run("eval", "--hw", str(p), "--target", "llama-3.1-8b")
    assert bad.exit_code == 2
    assert [ln for ln in bad.output.splitlines() if ln.strip()] == [
        f"error: {p}: memory_capacity_gb = 96: hbm3 is sized in binary units: write memory_capacity_gib: 96 "
        "(96 GiB = 103.08 GB)"]
    # an SRAM part gives decimal GB; both at once, or neither, is refused
    sram = run("eval", "--hw", str(_device(tmp_path, "sram", memory_type="sram", memory_capacity_gb=44)), "--target",
               "llama-3.1-8b", "--json")
    assert json.loads(sram.output)["memory_capacity_gb"] == 44.0
    both = run("eval", "--hw", str(_device(tmp_path, "both", memory_type="sram", memory_capacity_gb=44,
                                           memory_capacity_gib=40)), "--target", "llama-3.1-8b")
    assert both.exit_code == 2 and "give one capacity" in both.output
    neither = run("eval", "--hw", str(_device(tmp_path, "neither")), "--target", "llama-3.1-8b")
    assert neither.exit_code == 2 and "memory_capacity_gib: missing required field" in neither.output
