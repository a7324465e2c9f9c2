"""Link classes (issue 9): all-reduce time = 2(t-1) x latency per step + 2(t-1)/t x bytes /
(efficiency x one-way link rate), with the class's numbers from hardware_db/technology/links.yaml,
worked by hand for a decode step's few-KB message and a prefill's tens of MB."""

from __future__ import annotations

import shutil

import pytest
import yaml

from dse.api import hardware_arrays
from dse.catalog.database import Database, load_database
from dse.catalog.links import LINK_CLASSES, load_link_classes
from dse.errors import SpecError, SpecErrors
from dse.model.roofline import allreduce_time_s, communication_time_s

DB = load_database()


def _ar(device: str, chips: int, nbytes: float) -> float:
    hw = hardware_arrays(DB.device(device), DB.runtime("graphs"), chips, "bf16")
    return float(allreduce_time_s(nbytes, hw.chips, hw.link_bw_bytes_s, hw.link_latency_s, hw.link_efficiency)[0])


def test_nvlink_small_and_large_messages_hand_worked():
    # h100-sxm, class nvlink: 0.44 us per step, efficiency 0.82 (nccl-tests issue 212: 370 of 450 GB/s),
    # 900 GB/s both directions -> 450e9 x 0.82 = 369e9 B/s one way. 8 chips: 14 steps, 2*7/8 = 1.75.
    assert DB.device("h100-sxm").link_class == "nvlink"
    # decode, batch 1, Llama-3.1-70B: 8192 x 2 B = 16,384 B -> 1.75 x 16,384 / 369e9 = 0.0777 us
    # + 14 x 0.44 = 6.16 us -> 6.2377 us (latency-bound)
    assert _ar("h100-sxm", 8, 16_384) == pytest.approx(6.16e-6 + 28_672 / 369e9, rel=1e-12)
    assert _ar("h100-sxm", 8, 16_384) == pytest.approx(6.2377e-6, rel=1e-4)
    # prefill of 2,048 tokens: 2048 x 8192 x 2 = 33,554,432 B -> 1.75 x 33,554,432 / 369e9 = 159.134 us
    # + 6.16 us = 165.294 us (bandwidth-bound)
    assert _ar("h100-sxm", 8, 33_554_432) == pytest.approx(165.294e-6, rel=1e-5)


def test_pcie_small_and_large_messages_hand_worked():
    # rtx-4090, class pcie: 3.0 us per step (nccl issue 1530: 8 B in 42.14 us over 14 steps), efficiency
    # 0.5 (nccl issue 1639); 64 GB/s both directions -> 32e9 x 0.5 = 16e9 B/s. 2 chips: 2 steps, 2*1/2 = 1.
    # decode, Llama-2-7B: 4096 x 2 = 8,192 B -> 8,192 / 16e9 = 0.512 us + 6 us = 6.512 us
    assert _ar("rtx-4090", 2, 8_192) == pytest.approx(6.512e-6, rel=1e-9)
    # prefill of 2,048 tokens: 16,777,216 B / 16e9 = 1,048.576 us + 6 us = 1,054.576 us
    assert _ar("rtx-4090", 2, 16_777_216) == pytest.approx(1054.576e-6, rel=1e-9)


def test_a_step_pays_two_all_reduces_per_layer_at_the_class_numbers():
    # Llama-2-7B (32 layers) decode on 2 x rtx-4090: 64 all-reduces of 6.512 us = 416.768 us
    hw = hardware_arrays(DB.device("rtx-4090"), DB.runtime("graphs"), 2, "bf16")
    assert float(communication_time_s(DB.model("llama-2-7b"), hw, 1.0, 2.0, 32)[0]) == pytest.approx(
        416.768e-6, rel=1e-9)


def test_device_values_win_over_the_class():
    # a100-80gb keeps its own fitted latency (0.43 us, docs/calibration.md; the class's is 0.44) and the
    # class's efficiency
    a100 = DB.device("a100-80gb")
    assert a100.link_class == "nvlink" and a100.link_latency_s == pytest.approx(0.43e-6)
    assert DB.link_class("nvlink").latency_s == pytest.approx(0.44e-6)
    assert a100.link_efficiency == 0.82


def test_every_class_has_a_source_or_a_reasoned_estimate():
    raw = yaml.safe_load((DB.root / "technology" / "links.yaml").read_text())["classes"]
    assert set(raw) == set(LINK_CLASSES)
    classes = load_link_classes(DB.root)
    assert classes["pcie"].latency_s == pytest.approx(3e-6) and classes["nvlink"].efficiency == 0.82
    for name, entry in raw.items():
        for key in ("efficiency", "latency_us"):
            assert entry[key].get("source") or (entry[key].get("estimate") is True and entry[key]["reason"]), name


def test_a_bad_link_class_file_names_the_field(tmp_path):
    root = tmp_path / "db"
    shutil.copytree(DB.root, root)
    p = root / "technology" / "links.yaml"
    raw = yaml.safe_load(p.read_text())
    raw["classes"]["pcie"]["efficiency"]["value"] = 1.5
    raw["classes"]["ici"]["latency_us"] = {"value": 2.0}         # neither a source nor a reasoned estimate
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises((SpecError, SpecErrors)) as e:
        Database(root).device("rtx-4090")
    text = str(e.value)
    assert "classes.pcie.efficiency = 1.5: expected a number in (0, 1]" in text
    assert "classes.ici.latency_us" in text and "needs a source" in text
