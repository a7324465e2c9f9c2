"""Parameter, byte and FLOP counts against hand-worked numbers (MODEL.md section 1)."""

import numpy as np
import pytest

from dse.model import transformer as tf


def test_llama31_8b_parameter_count_by_hand(db):
    # attention 4096*32*128 + 2*4096*8*128 + 32*128*4096 = 41,943,040 per layer
    # FFN 3*4096*14336 = 176,160,768 per layer; 32 layers = 6,979,321,856
    # embedding + untied LM head 2*128256*4096 = 1,050,673,152 -> 8,029,995,008 (HF: 8.03B)
    m = db.model("llama-3.1-8b")
    assert tf.attention_params(m) == 41_943_040
    assert tf.non_embedding_params(m) == 6_979_321_856
    assert tf.total_params(m) == 8_029_995_008


def test_tied_embeddings_count_once(db):
    m = db.model("llama-3.2-1b")  # tied: 16 layers of (2048*32*64*2 + 2*2048*8*64 + 3*2048*8192) + V*d
    per_layer = 2048 * 32 * 64 * 2 + 2 * 2048 * 8 * 64 + 3 * 2048 * 8192
    assert tf.total_params(m) == 16 * per_layer + 128256 * 2048
    assert tf.total_params(m) == pytest.approx(1.236e9, rel=1e-3)   # models.csv computed_params_B


def test_kv_bytes_per_token_llama70b(db):
    # 2 * 8 kv heads * 128 * 2 bytes * 80 layers = 327,680 B/token (hardware.md section 4: 0.328 MB)
    m = db.model("llama-3.1-70b")
    assert tf.kv_cache_bytes(m, 1, 1, 2.0) == 327_680


def test_mla_cache_is_latent_plus_rope(db):
    m = db.model("deepseek-v3")
    assert tf.kv_elems_per_token_per_layer(m) == 512 + 64   # models.csv: 576 elements
    # the MLA projections give the published 671B total (DeepSeek-V3 config_671B.json)
    assert tf.total_params(m) == pytest.approx(671e9, rel=0.01)
    assert tf.active_params_per_token(m) == pytest.approx(37.4e9, rel=0.03)


def test_experts_touched_uniform_routing():
    # E*(1-(1-e/E)^T): E=8, e=2: T=1 -> 2; T=2 -> 8*(1-0.75^2) = 3.5; T large -> 8
    got = tf.experts_touched(8, 2, np.array([1, 2, 10_000]))
    np.testing.assert_allclose(got, [2.0, 3.5, 8.0])


def test_moe_weights_touched_grow_with_tokens(db):
    m = db.model("mixtral-8x7b")
    w = tf.weight_params_touched(m, np.array([1.0, 4.0, 64.0]))
    assert w[0] < w[1] < w[2] <= tf.non_embedding_params(m) + tf.lm_head_params(m)
    # one token touches exactly the active parameters (models.csv: 12.9B active)
    assert w[0] == pytest.approx(tf.active_params_per_token(m))
    assert tf.active_params_per_token(m) == pytest.approx(12.9e9, rel=0.02)


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b", "gemma-2-9b",
                                  "qwen3-235b-a22b", "mixtral-8x7b", "llama-3.1-405b"])
def test_computed_counts_match_published(db, name):
    m = db.model(name)
    assert tf.total_params(m) == pytest.approx(m.params_b, rel=0.03)
