"""Draft checkpoints as a level of the acceptance model (issue 29): the registry, a checkpoint's
published rows returned as is, the random effect's shrinkage worked by hand, the band as a
quantile of held-out residuals and its coverage, and the one-line refusal of an unknown checkpoint.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from dse.acceptance import fit as acc
from dse.catalog.acceptance import load_table
from dse.catalog.checkpoints import check_table_links, load_checkpoints
from dse.catalog.database import load_database
from dse.cli.commands import main
from dse.errors import SpecError
from dse.workload.spec import parse_drafter, parse_task

E3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_every_row_links_to_a_registered_checkpoint_of_its_kind():
    rows = load_table()
    assert check_table_links(rows) == []
    reg = load_checkpoints()
    assert reg[E3].kind == "eagle3" and reg[E3].target == "llama-3.1-8b" and reg[E3].public
    assert not reg["paper:hass/LLaMA3.1-Instruct-8B"].public
    # the EAGLE-3 paper's rows of this head: five tasks at T = 0 and at T = 1
    mine = [r for r in rows if r.checkpoint == E3 and r.source_key == "eagle3-2025"]
    assert len(mine) == 10 and {r.temperature for r in mine} == {0.0, 1.0} and all(r.fit for r in mine)


def test_a_checkpoints_published_row_is_returned_as_is():
    """EAGLE-3's Llama-3.1-8B head on HumanEval at T = 1: the table holds one row of that checkpoint,
    task and temperature (eagle3p-57, tau 5.82 on a tree of 59 nodes, depth 8): it is the answer,
    with no band, and its alpha reproduces 5.82 on that tree."""
    db = load_database()
    tgt = db.model("llama-3.1-8b")
    d = parse_drafter(f"eagle3:{E3}", tgt, db)
    assert (d.kind, d.meth, d.checkpoint, d.label) == ("eagle", "eagle3", E3, f"eagle3:{E3}")
    res = acc.resolve(tgt, d, parse_task("code"), 1.0, db)
    t = res.tasks[0]
    f = acc.stored_fit()
    assert res.source == "table" and t.alpha == f.rows["eagle3p-57"]["alpha"] == t.low == t.high
    assert "eagle3p-57" in t.detail and E3 in t.detail
    assert acc.tau_of_alpha("eagle3", t.alpha, nodes=59, depth=8) == pytest.approx(5.82, rel=2e-3)
    # the same head on a task the table does not hold for it: the model, with the checkpoint's level and band
    m = acc.resolve(tgt, d, parse_task("qa"), 0.0, db).tasks[0]
    assert m.origin == "model" and m.low < m.alpha < m.high
    assert "its level fitted on 10 table rows of this checkpoint" in m.detail      # the held-out rows are not fitted
    assert "68% of held-out residuals of eagle3, a checkpoint it has seen" in m.detail


def test_the_checkpoint_level_is_shrunk_toward_the_method_mean_by_hand():
    """One method, two checkpoints: A with rows y = 1, 1 and B with y = -1 (logit alpha), penalty
    lambda = 1 on the levels. The normal equations: 3b + 2u_A + u_B = 1, 2 - 2b = 3u_A,
    -1 - b = 2u_B give b = 1/7, u_A = 4/7, u_B = -4/7: each level is its mean residual about b
    (6/7 and -8/7) moved by n/(n + lambda) (2/3 and 1/2)."""
    X = np.zeros((3, len(acc.PARAMS)))
    X[:, 0] = 1.0
    Z = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    beta, u = acc._solve(X, Z, np.array([1.0, 1.0, -1.0]), ridge=1.0, lam=1.0)
    assert beta[0] == pytest.approx(1 / 7, rel=1e-7) and np.allclose(beta[1:], 0.0)
    assert u == pytest.approx([4 / 7, -4 / 7], rel=1e-7)
    assert u[0] == pytest.approx((1 - beta[0]) * 2 / (2 + 1), rel=1e-7)
    # no penalty: each level takes its whole mean residual; a huge one: no levels, b the mean of y
    b0, u0 = acc._solve(X, Z, np.array([1.0, 1.0, -1.0]), ridge=1.0, lam=1e-9)
    assert b0[0] + u0[0] == pytest.approx(1.0, abs=1e-6) and b0[0] + u0[1] == pytest.approx(-1.0, abs=1e-6)
    b9, u9 = acc._solve(X, Z, np.array([1.0, 1.0, -1.0]), ridge=1.0, lam=1e9)
    assert b9[0] == pytest.approx(1 / 3, rel=1e-6) and np.allclose(u9, 0.0, atol=1e-8)


def test_band_is_the_held_out_quantile_and_its_coverage_by_hand():
    """Ten held-out residuals of eagle3 checkpoints the fit had not seen, |r| = 0.1 ... 1.0: the 68%
    quantile (numpy's linear interpolation) sits at position 9 x 0.68 = 6.12 of the sorted values,
    0.7 + 0.12 x 0.1 = 0.712. Four new residuals 0.5, 0.9, -0.3, 0.71 against it: 3 of 4 inside."""
    res = [dict(method="eagle3", seen=False, residual=(-1) ** i * 0.1 * (i + 1)) for i in range(10)]
    sigma = acc.bands(res)
    assert sigma["eagle3"] == pytest.approx(0.712) and sigma["all"] == pytest.approx(0.712)
    assert "eagle3|new" not in sigma                                  # no seen rows: no split
    assert acc.band_of(sigma, "eagle3", True) == pytest.approx(0.712)  # falls back to the method's
    assert acc.band_of(sigma, "medusa", False) == pytest.approx(0.712)  # a method with no rows: all methods'
    new = [dict(method="eagle3", seen=False, residual=x) for x in (0.5, 0.9, -0.3, 0.71)]
    assert np.mean([acc.inside(x, sigma) for x in new]) == 0.75
    # with 8 seen and 8 new rows of one method, each gets its own band
    two = [dict(method="eagle2", seen=s, residual=(0.1 if s else 1.0) * (i + 1)) for s in (True, False)
           for i in range(8)]
    sig2 = acc.bands(two)
    assert sig2["eagle2|seen"] == pytest.approx(0.1 * (1 + 7 * 0.68)) and sig2["eagle2|new"] == pytest.approx(
        1 + 7 * 0.68)


def test_unknown_checkpoint_is_one_line_exit_2():
    res = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle3:nobody/nothing")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert ("--draft = 'eagle3:nobody/nothing': no checkpoint 'nobody/nothing' in "
            "hardware_db/acceptance/checkpoints.yaml") in res.output
    assert "`dse acceptance list --checkpoints` lists the known ones" in res.output
    res = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", f"eagle2:{E3}")
    assert res.exit_code == 2 and f"{E3} is a checkpoint of kind eagle3: draft with it as eagle3:{E3}" in res.output


def test_eval_with_a_checkpoint_states_the_band_and_its_level():
    res = run("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", f"eagle3:{E3}", "--task", "qa")
    assert res.exit_code == 0, res.output
    second = res.output.splitlines()[1]
    assert f"draft eagle3:{E3}" in second and "(68% band) modelled" in second
    assert any("68% band" in x for x in res.output.splitlines() if x.startswith("speculative"))
    listed = run("acceptance", "list", "--checkpoints", "--draft", "eagle3")
    assert listed.exit_code == 0 and E3 in listed.output and "AngelSlim/Qwen3-8B_eagle3" in listed.output


def test_a_study_drafts_with_a_checkpoint(tmp_path):
    from dse.study import load_study
    raw = {"name": "ck", "workload": {"target": "llama-3.1-8b", "draft": ["eagle3", f"eagle3:{E3}"], "task": "chat"},
           "space": {"target_chip": {"peak_tflops": [400, 1600], "memory": "hbm3e", "memory_stacks": [6, 8]}},
           "objectives": [{"metric": "spec_ms_per_token"}, {"metric": "cost_usd"}],
           "search": {"sampler": "random", "n_trials": 4, "batch_size": 4}, "grid": {"points": 2},
           "output": str(tmp_path / "out.parquet")}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    s = load_study(p)
    w = s.drafts.workload(f"eagle3:{E3}")
    assert w.drafter.checkpoint == E3 and w.acceptance_source == "table"
    raw["workload"]["draft"] = ["eagle3", "eagle3:nobody/nothing"]
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError, match=r"workload.draft\[1\] = 'eagle3:nobody/nothing': no checkpoint"):
        load_study(p)


def test_a_bare_head_on_a_target_without_rows_is_the_methods_mean_by_hand():
    """eagle3 on Llama-3.1-70B: no reference head and no table rows of the pair, so the method's
    mean: b_eagle3 + t_code + h log10(70.55B / 10B) + l (a Llama-3 target), u = 0, with the band of
    a checkpoint the fit has not seen. And the same on Vicuna-33B drops the large-vocabulary term."""
    import json
    import math
    from pathlib import Path

    from dse.model.transformer import total_params
    fitj = json.loads((Path(__file__).resolve().parent.parent / "hardware_db" / "acceptance" / "fit.json").read_text())
    c = fitj["coef"]
    db = load_database()
    for name, large_vocab in (("llama-3.1-70b", 1.0), ("vicuna-33b", 0.0)):
        tgt = db.model(name)
        d = parse_drafter("eagle3", tgt, db)
        t = acc.resolve(tgt, d, parse_task("code"), 0.0, db).tasks[0]
        eta = (c["method:eagle3"] + c["task:code"] + c["head:log10_target_size"] * math.log10(total_params(tgt) / 1e10)
               + c["head:large_vocab_target"] * large_vocab)
        s = acc.band_of(fitj["sigma"], "eagle3", False)
        assert t.origin == "model" and t.alpha == pytest.approx(1 / (1 + math.exp(-eta)), rel=1e-12)
        assert t.low == pytest.approx(1 / (1 + math.exp(-(eta - s))), rel=1e-12)
        assert "a checkpoint it has not seen" in t.detail
    assert c["head:large_vocab_target"] < 0   # Llama-3 targets accept less than Vicuna/LLaMA-2 with these heads


def test_the_large_vocabulary_term_marks_targets_by_their_vocabulary():
    """head:large_vocab_target applies where the target's vocabulary has >= 100,000 tokens (the model
    database's vocab_size): Llama-3.1-8B's 128,256, Qwen3-8B's 151,936 and DeepSeek-V3's 129,280 do,
    Vicuna's and Llama-2's 32,000 do not; a table name outside the database goes by its tokenizer."""
    from dse.acceptance.fit import LARGE_VOCAB, is_large_vocab
    from dse.acceptance.resolve import features_for
    db = load_database()
    for name, vocab, big in (("llama-3.1-8b", 128256, True), ("qwen3-8b", 151936, True),
                             ("deepseek-v3", 129280, True), ("vicuna-13b", 32000, False), ("llama-2-70b", 32000, False)):
        assert db.model(name).vocab_size == vocab and is_large_vocab(name) is big
        assert (vocab >= LARGE_VOCAB) is big
    assert is_large_vocab("Llama-3.1-8B-Instruct") and not is_large_vocab("Vicuna-13B")
    tgt = db.model("qwen3-8b")
    f = features_for(tgt, parse_drafter("eagle3", tgt, db), "chat", 0.0, db)
    assert f.large_vocab == 1.0
