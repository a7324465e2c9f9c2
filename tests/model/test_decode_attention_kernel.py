"""Decode attention without a GQA-aware kernel (runtime trtllm-mmha, transformer.decode_kv_reads): a
GQA model's KV heads are read once per query head of their group in decode and verify passes, never in
a prefill; a MHA model is unaffected. Sources: TensorRT-LLM's XQA blog (docs/source/blogs/XQA-kernel.md)
and the v0.6.1 / v0.9.0 performance tables (docs/calibration.md section 5g)."""

from __future__ import annotations

import numpy as np
import pytest

from dse.api import evaluate_design, hardware_arrays
from dse.catalog.database import load_database
from dse.model.roofline import pass_cost
from dse.model.transformer import decode_kv_reads, kv_cache_bytes, step_kwargs

DB = load_database()


def test_reads_per_kv_head_by_hand():
    m70, m7 = DB.model("llama-2-70b"), DB.model("llama-2-7b")      # h 64 / h_kv 8; h 32 / h_kv 32
    # t = 2: each chip holds 32 query heads and 4 KV heads, 8 query heads a KV head
    assert decode_kv_reads(m70, 2, 1.0) == pytest.approx(8.0)
    # t = 16 > h_kv: a chip holds 4 query heads and one (replicated) KV head: 64 x 8 / (16 x 8) = 4
    assert decode_kv_reads(m70, 16, 1.0) == pytest.approx(4.0)
    assert decode_kv_reads(m70, 2, 0.0) == pytest.approx(1.0)       # a GQA-aware kernel: once
    assert decode_kv_reads(m7, 1, 1.0) == pytest.approx(1.0)        # MHA: one query head a KV head


def _pass(runtime: str, *, q: int, prefill: bool):
    m = DB.model("llama-2-70b")
    hw = hardware_arrays(DB.device("h100-sxm"), DB.runtime(runtime), 2, "fp8", kv_dtype="fp8")
    kw = step_kwargs("fp8", "fp8")
    return pass_cost(m, hw, batch=64, q=q, context=3072, lm_head_last_only=prefill, **kw)


def test_decode_bytes_grow_by_seven_kv_reads_and_prefill_does_not():
    m = DB.model("llama-2-70b")
    # one decode step of 64 sequences at 3,072 cached tokens, fp8 KV (1 B), on 2 chips: the KV a chip
    # holds is 64 x 3,073 x 80 layers x 2 x 8 x 128 x 1 B / 2 = 16.11 GB; masked MHA reads it 8 times
    kv_chip = float(kv_cache_bytes(m, 64, 3073, 1.0)) / 2
    assert kv_chip == pytest.approx(16.11e9, rel=1e-3)
    extra = _pass("trtllm-mmha", q=1, prefill=False).bytes - _pass("graphs", q=1, prefill=False).bytes
    assert float(np.ravel(extra)[0]) == pytest.approx(7 * kv_chip, rel=1e-9)
    same = _pass("trtllm-mmha", q=1, prefill=True).bytes - _pass("graphs", q=1, prefill=True).bytes
    assert float(np.ravel(same)[0]) == 0.0


def test_mha_model_is_the_same_under_either_kernel_and_gqa_is_slower():
    kw = dict(hw="h100-sxm", chips=1, dtype="fp8-head16", kv_dtype="fp8", prompt=2048, output=2048, batch=48)
    a = evaluate_design(db=DB, target="llama-2-7b", runtime="graphs", **kw)
    b = evaluate_design(db=DB, target="llama-2-7b", runtime="trtllm-mmha", **kw)
    assert a["request_latency_ms"] == b["request_latency_ms"]
    kw.update(chips=2, batch=64)
    g = evaluate_design(db=DB, target="llama-2-70b", runtime="graphs", **kw)["baseline_ms_per_token"]
    mm = evaluate_design(db=DB, target="llama-2-70b", runtime="trtllm-mmha", **kw)["baseline_ms_per_token"]
    assert mm > 1.5 * g


def test_the_runtime_field_is_bounded_in_one_line():
    from click.testing import CliRunner

    from dse.cli import main
    r = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-2-70b", "--chips", "2",
                                  "--set", "decode_kv_per_query_head=2"])
    assert r.exit_code == 2
    assert "decode_kv_per_query_head = 2.0: expected a number in [0, 1]" in r.output
    assert DB.runtime("graphs").decode_kv_per_query_head == 0.0
    assert DB.runtime("trtllm-mmha").decode_kv_per_query_head == 1.0
