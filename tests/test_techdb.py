"""dse/techdb.py: loading, validation (file + field in every error), overrides, fingerprint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dse.catalog.technology import GLOBAL_FIELDS, MEMORY_FIELDS, NODE_FIELDS, load_technology
from dse.errors import SpecError, SpecErrors

HW_DB = Path(__file__).resolve().parents[1] / "hardware_db"


@pytest.fixture(scope="module")
def tech():
    return load_technology(HW_DB)


@pytest.fixture
def db_copy(tmp_path):
    shutil.copytree(HW_DB / "technology", tmp_path / "technology")
    return tmp_path


def edit(root: Path, name: str, fn) -> Path:
    path = root / "technology" / name
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_loads_in_si(tech):
    assert tech.memory_names == ("hbm2", "hbm2e", "hbm3", "hbm3e", "hbm4", "gddr6", "gddr6x",
                                 "gddr7", "lpddr5", "lpddr5x", "sram")
    assert tech.node_names == ("n7", "n5", "n4", "n3", "n2")
    hbm3e = tech.memory_by_name("hbm3e")
    # a 24 Gb (= 3 GiB) HBM3E die: DRAM "GB" are binary, 3 * 2**30 = 3,221,225,472 bytes
    assert hbm3e.bw_bytes_s == 1.0e12 and hbm3e.bytes_per_layer == 3 * 2**30
    assert hbm3e.stack_heights == (8, 12)
    assert hbm3e.usd_per_byte == pytest.approx(12.25 / 2**30)    # $12.25 per (binary) GB
    assert hbm3e.j_per_bit == pytest.approx(5e-12)
    n5 = tech.node_by_name("n5")
    assert n5.flop_s_per_mm2 == pytest.approx(1.49e12)
    assert n5.defects_per_mm2 == pytest.approx(0.0008)
    assert tech.reticle_limit_mm2 == 858 and tech.yield_model == "murphy"
    t = tech.memory_table()
    assert t.bw_bytes_s[tech.memory_index("hbm3")] == 670e9
    assert t.height_allowed[tech.memory_index("hbm3e"), 12]
    assert not t.height_allowed[tech.memory_index("hbm3e"), 4]


def test_every_constant_has_provenance(tech):
    got = {p.field for p in tech.provenance}
    for m in tech.memory:
        for f in MEMORY_FIELDS:
            if m.kind in f.kinds:
                assert f"memory.{m.name}.{f.yaml}" in got
    for n in tech.nodes:
        assert {f"nodes.{n.name}.{f.yaml}" for f in NODE_FIELDS} <= got
    assert {f.yaml for f in GLOBAL_FIELDS} <= got
    assert all(p.text for p in tech.provenance)
    assert "memory.hbm3e.usd_per_gib" in tech.estimates()
    assert not tech.source_of("memory.hbm2e.pj_per_bit").estimate


def test_negative_and_missing_fields_name_file_and_field(db_copy):
    def broken(d):
        d["memory"]["hbm3e"]["usd_per_gib"]["value"] = -3
        del d["memory"]["gddr7"]["pj_per_bit"]
    path = edit(db_copy, "memory.yaml", broken)
    with pytest.raises(SpecErrors) as info:
        load_technology(db_copy)
    text = str(info.value)
    assert f"{path}: memory.hbm3e.usd_per_gib = -3: expected a number in [0, inf) USD/GiB" in text
    assert f"{path}: memory.gddr7.pj_per_bit: missing required field" in text
    assert len(info.value.errors) == 2


def test_non_numeric_and_unknown_keys(db_copy):
    def broken(d):
        d["nodes"]["n3"]["wafer_cost_usd"]["value"] = "lots"
        d["nodes"]["n3"]["wafer_cost"] = {"value": 1, "source": "x"}
        d["reticle_limit_mm2"]["value"] = 0
    path = edit(db_copy, "nodes.yaml", broken)
    with pytest.raises(SpecErrors) as info:
        load_technology(db_copy)
    text = str(info.value)
    assert f"{path}: nodes.n3.wafer_cost_usd = 'lots': expected a number" in text
    assert "nodes.n3.wafer_cost: unknown field; did you mean 'wafer_cost_usd'?" in text
    assert f"{path}: reticle_limit_mm2 = 0: expected a number in (0, inf) mm^2" in text


def test_every_number_needs_a_source(db_copy):
    def broken(d):
        d["nodes"]["n5"]["pj_per_flop"] = 0.55                       # bare number
        d["nodes"]["n7"]["static_w_per_mm2"].pop("reason")            # estimate without reason
        d["nodes"]["n2"]["wafer_cost_usd"] = {"value": 3, "source": "a guess (ESTIMATE)"}
    path = edit(db_copy, "nodes.yaml", broken)
    with pytest.raises(SpecErrors) as info:
        load_technology(db_copy)
    fields = {e.field for e in info.value.errors}
    assert fields == {"nodes.n5.pj_per_flop", "nodes.n7.static_w_per_mm2.reason",
                      "nodes.n2.wafer_cost_usd.estimate"}
    assert all(e.path == str(path) for e in info.value.errors)


def test_kind_specific_fields(db_copy):
    def broken(d):
        d["memory"]["gddr6"]["gib_per_layer"] = {"value": 2, "source": "x"}
        d["memory"]["hbm3"]["stack_heights"]["value"] = [8, 0]
        d["memory"]["sram"]["kind"] = "flash"
    edit(db_copy, "memory.yaml", broken)
    with pytest.raises(SpecErrors) as info:
        load_technology(db_copy)
    text = str(info.value)
    assert "memory.gddr6.gib_per_layer: not used by memory kind 'device'" in text
    assert "memory.hbm3.stack_heights = [8, 0]: expected a non-empty list of integers" in text
    assert "memory.sram.kind = 'flash': expected one of hbm, device, sram" in text


def test_missing_file_and_schema_version(db_copy):
    (db_copy / "technology" / "memory.yaml").unlink()
    edit(db_copy, "nodes.yaml", lambda d: d.update(schema_version=2))
    with pytest.raises(SpecErrors) as info:
        load_technology(db_copy)
    text = str(info.value)
    assert "memory.yaml: memory technology file" in text and "file not found" in text
    assert "nodes.yaml: schema_version = 2: expected 1" in text


def test_overrides(tech):
    t = tech.with_overrides({"memory": {"hbm3e": {"usd_per_gib": 12}},
                             "nodes": {"n3": {"wafer_cost_usd": 20000}},
                             "reticle_limit_mm2": 800, "yield_model": "poisson"})
    assert t.memory_by_name("hbm3e").usd_per_byte == pytest.approx(12 / 2**30)   # $ per GiB
    assert t.node_by_name("n3").wafer_cost_usd == 20000
    assert t.reticle_limit_mm2 == 800 and t.yield_model == "poisson"
    assert tech.reticle_limit_mm2 == 858                        # the original is untouched
    assert t.source_of("reticle_limit_mm2").text.startswith("override")
    assert t.fingerprint() != tech.fingerprint()
    assert tech.with_overrides({}).fingerprint() == tech.fingerprint()
    assert load_technology(HW_DB).fingerprint() == tech.fingerprint()
    assert len(tech.fingerprint()) == 16


def test_old_capacity_names_are_refused_with_the_new_one(tech, db_copy):
    """Capacity and price names carry their unit (issue 21): the old gb_per_layer / gb_per_device / usd_per_gb
    held GiB; a study or file that still says them gets the new name, never a silent unit change."""
    with pytest.raises(SpecError) as info:
        tech.with_overrides({"memory": {"hbm3e": {"usd_per_gb": 15}}}, where="s.yaml: technology")
    assert ("s.yaml: technology: memory.hbm3e.usd_per_gb: not a field of memory.hbm3e; renamed to usd_per_gib "
            "(the same binary GB, 2^30 bytes)") in str(info.value)

    def old(d):
        d["memory"]["hbm3"]["gb_per_layer"] = d["memory"]["hbm3"].pop("gib_per_layer")
    path = edit(db_copy, "memory.yaml", old)
    with pytest.raises((SpecError, SpecErrors)) as info:
        load_technology(db_copy)
    assert (f"{path}: memory.hbm3.gb_per_layer: unknown field; renamed to gib_per_layer (the same binary GB, "
            "2^30 bytes)") in str(info.value)


def test_bad_overrides_are_collected(tech):
    with pytest.raises(SpecErrors) as info:
        tech.with_overrides({"memory": {"hbm3x": {"usd_per_gib": 1},
                                        "gddr7": {"stack_heights": [8], "kind": "hbm"}},
                             "nodes": {"n3": {"wafer_cost_usd": -1}},
                             "reticel_limit_mm2": 800}, where="studies/x.yaml: technology")
    text = str(info.value)
    assert "studies/x.yaml: technology: memory.hbm3x: unknown memory type; did you mean 'hbm3'?" in text
    assert "memory.gddr7.stack_heights: not a field of memory.gddr7" in text
    assert "memory.gddr7.kind: cannot be overridden" in text
    assert "nodes.n3.wafer_cost_usd = -1: expected a number in (0, inf) USD" in text
    assert "reticel_limit_mm2: unknown field; did you mean 'reticle_limit_mm2'?" in text
    with pytest.raises(SpecError, match="d2d_area_mm2_per_die"):
        tech.with_overrides({"reticle_limit_mm2": 10})


def test_unknown_names(tech):
    with pytest.raises(SpecError, match="unknown memory type; did you mean 'hbm3'"):
        tech.memory_index("hbm3f")
    with pytest.raises(SpecError, match="process node"):
        tech.node_index("n1")
