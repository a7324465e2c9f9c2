"""Attention data parallel beside expert parallel (DeepSeek-class serving: SGLang --enable-dp-attention,
TensorRT-LLM attention DP): D ranks of t/D chips each run attention, the dense layers, the shared
experts and the LM head for their B/D sequences; the routed experts stay expert-parallel over all t.
Numbers from DeepSeek-V3's YAML (models/deepseek-v3.yaml) worked by hand."""

import numpy as np
import pytest
from click.testing import CliRunner

from dse.api import evaluate_design, hardware_arrays
from dse.cli import main
from dse.model import transformer as tf
from dse.model.roofline import collectives, pass_cost

# DeepSeek-V3: weights outside the routed experts (MLA attention, the 3 dense FFN layers, the shared
# experts, the routers) 15,263,268,864, of which replicated under tensor parallel (MLA down-projections,
# routers) 1,029,898,240; LM head 926,679,040 (untied: the embedding as much again); MLA cache 35,136
# elements a token (61 layers x (512 + 64))
OWN, REP, HEAD, KV_TOKEN = 15_263_268_864, 1_029_898_240, 926_679_040, 35_136


@pytest.fixture(scope="module")
def dsv3(db):
    return db.model("deepseek-v3")


def test_the_model_numbers(dsv3):
    assert float(tf.weight_params_touched(dsv3, 0.0, None, False)) == OWN
    assert tf.replicated_params(dsv3) == REP and tf.lm_head_params(dsv3) == HEAD
    assert dsv3.num_layers * tf.kv_elems_per_token_per_layer(dsv3) == KV_TOKEN


def test_a_step_reads_the_ranks_whole_attention_and_an_eighth_of_the_cache(db, dsv3):
    """8 H200s, fp8 weights (1 byte, the head too), bf16 MLA cache, EP 8, batch 64 at context 2,000.
    D = 8 (one chip a rank): each chip reads the weights outside the routed experts whole, (OWN - REP)
    x 7/8 + HEAD x 7/8 = 13,265,043,456 bytes more than at tensor parallel 8, and the latent cache of
    its 8 sequences, 64 x 2,001 x 35,136 x 2 = 8,999,313,408 bytes / 8, where tensor parallel keeps
    every sequence's latents on every chip: 5,390,644,224 bytes more in all. FLOPs per chip: the
    same, but for the replicated weights' (each chip now runs them for its 8 sequences only)."""
    hw = hardware_arrays(db.device("h200"), db.runtime("graphs"), 8, "fp8")
    kw = dict(batch=64.0, q=1.0, context=2000.0, **tf.step_kwargs("fp8", "bf16"), ep=8)
    tp8, dp8 = pass_cost(dsv3, hw, **kw), pass_cost(dsv3, hw, dp=8, **kw)
    assert float(dp8.bytes[0] - tp8.bytes[0]) == pytest.approx(13_265_043_456 - 8_999_313_408 * 7 / 8, rel=1e-12)
    rep_flops = 2 * REP * 64
    assert float(tp8.flops[0] - dp8.flops[0]) == pytest.approx(rep_flops * (1 - 1 / 8), rel=1e-9)
    assert float(pass_cost(dsv3, hw, dp=1, **kw).time_s[0]) == float(tp8.time_s[0])      # D = 1: the same bits


def test_one_chip_a_rank_has_no_attention_all_reduce(db, dsv3):
    """With D = t every rank is one chip: the all-reduces after attention, the dense layers' FFN and
    the shared experts vanish; the routed experts' all-to-alls stay. Tensor parallel pays
    (61 + 3) + 58 of them (the shared experts' in every MoE layer)."""
    from dse.model.roofline import group_allreduce_time_s
    hw = hardware_arrays(db.device("h200"), db.runtime("graphs"), 8, "fp8")
    T = np.array([64.0])
    full, _ = collectives(dsv3, hw, T, 2.0, 61, 8)
    ranked, _ = collectives(dsv3, hw, T, 2.0, 61, 8, np.array([8.0]))
    ar = group_allreduce_time_s(T * 7168 * 2.0, hw)
    assert float(full[0] - ranked[0]) == pytest.approx(float((61 + 3 + 58) * ar[0]), rel=1e-9)


def test_capacity_and_a_served_deepseek(dsv3):
    """Per chip, DP 8 holds (OWN - REP) x 7/8 + 2 HEAD x 7/8 = 14,075,887,616 bytes more weights and
    7/8 less of the latent cache; at 256 sequences of 2,000 tokens the cache outweighs it and the step
    is faster (every chip read every sequence's latents)."""
    kw = dict(hw="h200", chips=8, target="deepseek-v3", dtype="fp8", ep=8, batch=256, prompt=1000, output=1000)
    tp8, dp8 = evaluate_design(**kw), evaluate_design(**kw, dp=8)
    kv = 256 * 2000 * KV_TOKEN * 2
    assert (dp8["chip_memory_required_gb"] - tp8["chip_memory_required_gb"]) * 1e9 == pytest.approx(
        14_075_887_616 - kv * 7 / 8, rel=1e-9)
    assert dp8["baseline_ms_per_token"] < tp8["baseline_ms_per_token"] and dp8["dp"] == 8


@pytest.mark.parametrize("args,needle", [
    (["--target", "llama-3.1-8b", "--chips", "8", "--dp", "2"], "is dense"),
    (["--target", "deepseek-v3", "--chips", "8", "--ep", "8", "--dp", "3"], "divide"),
    (["--target", "deepseek-v3", "--chips", "8", "--ep", "8", "--dp", "0"], "positive integer")])
def test_bad_dp_is_one_line_exit_2(args, needle):
    r = CliRunner().invoke(main, ["eval", "--hw", "h200", "--dtype", "fp8"] + args)
    assert r.exit_code == 2 and needle in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_study_takes_workload_dp(tmp_path):
    from dse.errors import SpecError, SpecErrors
    from dse.study import load_study
    body = ("name: s\nworkload: {target: deepseek-v3, dtype: fp8, ep: 8, dp: %s}\n"
            "objectives: [{metric: spec_ms_per_token}]\nspace: {target_chip: {device: h200, chips: [8, 16]}}\n")
    p = tmp_path / "s.yaml"
    p.write_text(body % 8)
    assert load_study(p).workload.dp == 8
    p.write_text(body % 16)
    with pytest.raises((SpecError, SpecErrors), match="workload.dp"):
        load_study(p)
