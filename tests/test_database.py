"""Every database file loads and validates; bad files name the file and the field."""

import json

import pytest

from dse.catalog.database import Database, load_database, model_from_hf_config
from dse.errors import SpecError, SpecErrors, UnknownEntryError

DB = load_database()
REQUIRED_DEVICES = ["a100-80gb", "h100-sxm", "h200", "b200", "l4", "l40s", "rtx-4090", "mi300x", "mi325x",
                    "gaudi-3", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"]
REQUIRED_MODELS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
                   "llama-3.2-1b", "llama-3.2-3b", "llama-3.3-70b", "vicuna-7b", "vicuna-13b", "vicuna-33b",
                   "qwen2.5-0.5b", "qwen2.5-72b", "qwen3-0.6b", "qwen3-32b", "qwen3-235b-a22b", "mistral-7b",
                   "mixtral-8x7b", "deepseek-v3", "gemma-2-9b", "chinchilla-70b", "chinchilla-draft-4b",
                   "llama-68m", "llama-160m", "tinyllama-1.1b", "eagle-vicuna-7b", "medusa-vicuna-7b"]


@pytest.mark.parametrize("kind", ["device", "model", "runtime"])
def test_every_entry_loads_with_sources(kind):
    names = DB.names(kind)
    assert names
    for name in names:
        spec = DB.get(kind, name)
        raw = DB.raw(kind, name)
        assert raw["schema_version"] == 1
        assert spec.name == name
        if kind != "runtime":
            assert raw.get("sources"), f"{name} has no sources"


def test_required_entries_present():
    assert len(DB.names("device")) >= 20
    assert set(REQUIRED_DEVICES) <= set(DB.names("device"))
    assert set(REQUIRED_MODELS) <= set(DB.names("model"))
    assert {"eager", "graphs"} <= set(DB.names("runtime"))


def test_unknown_name_suggests_close_names():
    with pytest.raises(UnknownEntryError) as e:
        DB.device("h100")
    assert "h100-sxm" in str(e.value)


@pytest.mark.parametrize("field,value,needle", [
    ("mem_bw_tb_s", -1, "mem_bw_tb_s = -1: expected a number in (0, 100000] tb/s"),
    ("mem_bw_tb_s", "fast", "mem_bw_tb_s = 'fast'"),
    ("mem_efficiency", 1.5, "mem_efficiency = 1.5: expected a number in (0, 1]"),
])
def test_bad_device_file_names_file_and_field(tmp_path, field, value, needle):
    raw = DB.raw("device", "h100-sxm")
    raw[field] = value
    p = tmp_path / "bad.yaml"
    p.write_text(json.dumps(raw))   # JSON is valid YAML
    with pytest.raises(SpecError) as e:
        Database(tmp_path).device(str(p))
    assert str(p) in str(e.value) and needle in str(e.value)


def test_missing_fields_are_all_reported(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("schema_version: 1\nname: m\nnum_layers: 2\nhidden_size: 64\nbogus: 1\n")
    with pytest.raises(SpecErrors) as e:
        Database(tmp_path).model(str(p))
    msg = str(e.value)
    assert "num_attention_heads" in msg and "vocab_size" in msg and "missing required field" in msg
    assert "bogus" in msg and "unknown field" in msg


def test_malformed_yaml_names_line(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(SpecError) as e:
        Database(tmp_path).device(str(p))
    assert "malformed YAML" in str(e.value) and str(p) in str(e.value)


def test_hf_config_json_offline(tmp_path):
    # Llama-3.1-8B's config.json fields (Hugging Face meta-llama/Llama-3.1-8B)
    cfg = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
           "max_position_embeddings": 131072, "hidden_act": "silu"}
    d = tmp_path / "Llama-3.1-8B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    m = model_from_hf_config(d / "config.json")
    ref = DB.model("llama-3.1-8b")
    for f in ("num_layers", "hidden_size", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size"):
        assert getattr(m, f) == getattr(ref, f)
    assert DB.model(str(d / "config.json")).name == "llama-3.1-8b"
