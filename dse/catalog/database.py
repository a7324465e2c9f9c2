"""hardware_db/ -> validated specs. Read-only; unknown names suggest the closest known ones.

An entry is found by database name (``h100-sxm``), by a YAML file path with the same fields,
or (models only) by a Hugging Face ``config.json`` path, read offline.
"""

from __future__ import annotations

import dataclasses
import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import MISSING as MISSING_VALUE
from ..errors import SpecError, UnknownEntryError
from .links import SCALE_OUT_CLASS, LinkClass, load_link_classes
from .specs import DeviceSpec, ModelSpec, RuntimeSpec, build
from .yamlio import MAX_FILE_BYTES, load_yaml

KINDS = {"device": ("devices", DeviceSpec), "model": ("models", ModelSpec),
         "runtime": ("runtimes", RuntimeSpec)}


def default_root() -> Path:
    """The database folder: $DSE_HARDWARE_DB, the source checkout's hardware_db/, or the
    copy installed with the package (dse/hardware_db)."""
    env = os.environ.get("DSE_HARDWARE_DB")
    if env:
        root = Path(env)
        if not root.is_dir():
            raise SpecError(None, "DSE_HARDWARE_DB", env, f"{'is not a folder' if root.exists() else 'no such folder'}; "
                            "expected a hardware database folder (devices/, models/, runtimes/), or unset it for the "
                            "one shipped with dse")
        if not (root / "devices").is_dir():
            raise SpecError(None, "DSE_HARDWARE_DB", env, "holds no devices/ folder, so it is not a hardware database "
                            "(devices/, models/, runtimes/); unset it for the one shipped with dse")
        return root
    pkg = Path(__file__).resolve().parent.parent          # dse/
    for cand in (pkg.parent / "hardware_db", pkg / "hardware_db"):
        if (cand / "devices").is_dir():
            return cand
    return Path(str(resources.files("dse") / "hardware_db"))


class Database:
    """Lazy, cached access to the entries under one hardware_db folder."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else default_root()
        self._cache: dict[tuple, object] = {}

    def names(self, kind: str) -> list[str]:
        folder = self.root / KINDS[kind][0]
        return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []

    def path(self, kind: str, name: str) -> Path:
        return self.root / KINDS[kind][0] / f"{name}.yaml"

    def _stamp(self, kind: str, ref: str) -> tuple | None:
        """The file an entry is read from, as (mtime_ns, size): a file edited since is read again."""
        try:
            p = Path(ref)
            st = (p if p.is_file() else self.path(kind, ref.lower())).stat()
        except (OSError, ValueError):
            return None
        return st.st_mtime_ns, st.st_size

    def get(self, kind: str, ref: str, *, where: str = ""):
        """An entry by name or file path (read again once its file changed); UnknownEntryError
        with close names otherwise."""
        key = (kind, ref, self._stamp(kind, ref))
        if key not in self._cache:
            self._cache[key] = self._load(kind, ref, where)
        return self._cache[key]

    def _load(self, kind: str, ref: str, where: str):
        folder, cls = KINDS[kind]
        p = Path(ref)
        if p.suffix.lower() == ".json" or p.name == "config.json":
            if kind != "model":
                raise SpecError(str(p), kind, ref, "a JSON file is accepted only as a Hugging Face model config")
            return model_from_hf_config(p)
        if p.suffix.lower() in (".yaml", ".yml") or os.sep in ref or p.exists():
            if not p.is_file():
                raise SpecError(str(p), kind, ref, "file not found")
            raw = load_yaml(p, kind=kind)
            return build(cls, raw, str(p))
        name = ref.lower()
        path = self.path(kind, name)
        if not path.is_file():
            raise UnknownEntryError(kind, ref, self.names(kind), where)
        spec = build(cls, load_yaml(path, kind=kind), str(path))
        if spec.name != name:
            raise SpecError(str(path), "name", spec.name, f"expected {name!r} (the file name)")
        return spec

    def device(self, ref: str, where: str = "") -> DeviceSpec:
        """A device with its link latencies and efficiencies filled from its link class, and its
        scale-out network's from the scale-out class, where it gives none
        (hardware_db/technology/links.yaml)."""
        key = ("device+link", ref, self._stamp("device", ref))
        if key not in self._cache:
            dev = self.get("device", ref, where=where)
            cls, out = self.link_class(dev.link_class), self.link_class(SCALE_OUT_CLASS)
            self._cache[key] = dataclasses.replace(
                dev, link_latency_s=cls.latency_s if dev.link_latency_s is None else dev.link_latency_s,
                link_efficiency=cls.efficiency if dev.link_efficiency is None else dev.link_efficiency,
                link_ll_efficiency=cls.ll_efficiency if dev.link_ll_efficiency is None else dev.link_ll_efficiency,
                link_bulk_latency_s=cls.bulk_latency_s if dev.link_bulk_latency_s is None else dev.link_bulk_latency_s,
                scale_out_latency_s=out.latency_s if dev.scale_out_latency_s is None else dev.scale_out_latency_s,
                scale_out_efficiency=out.efficiency if dev.scale_out_efficiency is None else dev.scale_out_efficiency)
        return self._cache[key]

    def link_class(self, name: str) -> LinkClass:
        """One scale-up link class: all-reduce efficiency and latency per ring step."""
        return load_link_classes(self.root)[name]

    def model(self, ref: str, where: str = "") -> ModelSpec:
        return self.get("model", ref, where=where)

    def runtime(self, ref: str, where: str = "") -> RuntimeSpec:
        return self.get("runtime", ref, where=where)

    def raw(self, kind: str, name: str) -> dict:
        """The YAML mapping of a database entry, with its sources and estimates."""
        self.get(kind, name)
        return load_yaml(self.path(kind, name.lower()))


def load_database(root: str | None = None) -> Database:
    """The shared read-only database of ``root`` (default: :func:`default_root`, read on every
    call), cached per root."""
    return _shared_database(str(Path(root) if root else default_root()))


@lru_cache(maxsize=4)
def _shared_database(root: str) -> Database:
    return Database(root)


#: Hugging Face config.json key -> ModelSpec YAML key (first match wins)
_HF_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "intermediate_size": ("intermediate_size", "ffn_dim", "n_inner"),
    "vocab_size": ("vocab_size",),
    "tied_embeddings": ("tie_word_embeddings",),
    "num_experts": ("num_local_experts", "n_routed_experts", "num_experts"),
    "experts_per_token": ("num_experts_per_tok",),
    "shared_experts": ("n_shared_experts",),
    "moe_intermediate_size": ("moe_intermediate_size",),
    "first_dense_layers": ("first_k_dense_replace",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "max_context": ("max_position_embeddings", "n_positions"),
    "mtp_layers": ("num_nextn_predict_layers", "mtp_num_hidden_layers"),
}


def model_from_hf_config(path: str | os.PathLike) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (offline). head_dim defaults to d/h,
    num_kv_heads to h; MLA models (kv_lora_rank) use qk_nope + qk_rope as head_dim."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise SpecError(str(p), "model", str(p), f"the file is larger than {MAX_FILE_BYTES:,} bytes "
                            "(dse.catalog.yamlio.MAX_FILE_BYTES); a config.json is a few KB")
        cfg = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise SpecError(str(p), "model", str(p), "file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise SpecError(str(p), "<json>", str(p), f"malformed JSON: {str(exc)[:200]}") from None
    except OSError as exc:
        raise SpecError(str(p), "model", str(p), f"cannot read: {exc.strerror or exc}") from None
    if not isinstance(cfg, dict):
        raise SpecError(str(p), "<top level>", type(cfg).__name__, "expected a JSON object")
    if isinstance(cfg.get("text_config"), dict):   # multimodal wrappers
        cfg = {**cfg, **cfg["text_config"]}
    raw: dict = {}
    for key, names in _HF_KEYS.items():
        for hf in names:
            if cfg.get(hf) is not None:
                raw[key] = cfg[hf]
                break
    d, h = raw.get("hidden_size"), raw.get("num_attention_heads")
    if "num_kv_heads" not in raw and h is not None:
        raw["num_kv_heads"] = h
    if raw.get("kv_lora_rank") and cfg.get("qk_nope_head_dim") is not None:
        raw["head_dim"] = cfg["qk_nope_head_dim"] + cfg.get("qk_rope_head_dim", 0)
        if cfg.get("first_k_dense_replace") is None:
            raw["first_dense_layers"] = 0
    if "head_dim" not in raw and isinstance(d, int) and isinstance(h, int) and h:
        raw["head_dim"] = d // h
    if raw.get("num_experts") and not raw.get("moe_intermediate_size"):
        raw["moe_intermediate_size"] = raw.get("intermediate_size")
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu")))
    raw["gated_ffn"] = cfg.get("model_type") not in ("opt", "gpt2", "gpt_neox", "falcon") or "glu" in act
    raw["name"] = (p.parent.name if p.name == "config.json" else p.stem).lower() or "hf-model"
    raw["display_name"] = str(cfg.get("_name_or_path") or raw["name"])
    raw["family"] = str(cfg.get("model_type", ""))
    missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                           "vocab_size") if k not in raw]
    if missing:
        hf = [_HF_KEYS[k][0] for k in missing]
        raise SpecError(str(p), ", ".join(hf), MISSING_VALUE, "missing in config.json (needed to size the model)")
    return build(ModelSpec, raw, str(p))

