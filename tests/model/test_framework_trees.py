"""The trees serving frameworks build (dse.model.framework_trees, dse.workload.trees): one small tree per
framework enumerated by hand, the properties that tie them to dse's best tree and to chains, and
their pricing (the verify pass over the tree's tokens, the draft steps over the rows each one
processes)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dse.api import design_and_workload, evaluate_design
from dse.errors import SpecError
from dse.model import framework_trees as ft
from dse.model import specdec
from dse.model.latency import latency_metrics, tree_verify_s
from dse.workload.spec import AcceptanceSpec
from dse.workload.trees import EAGLE1_MC_SIM_7B_63, parse_tree

#: a 3-rank profile, the same at every depth: P(the rank-1 / rank-2 / rank-3 child is the accepted one)
P3 = (0.4, 0.35, 0.2)


def rank_p(rows=4, p=P3):
    return specdec.rank_matrix(AcceptanceSpec(kind="rank", rank=(p,)), rows, len(p))


def test_sglang_tree_by_hand():
    """sglang:topk=2,steps=2,tokens=5 under p = (0.4, 0.35, 0.2):
    step 1, the root's top-2: 0.4 (rank 1), 0.35 (rank 2);
    step 2, each expanded by its top-2: 0.4*0.4 = 0.16, 0.4*0.35 = 0.14, 0.35*0.4 = 0.14, 0.35*0.35 = 0.1225;
    the top tokens - 1 = 4 of the six candidates: 0.4, 0.35, 0.16, 0.14 -> tau = 1 + 1.05 = 2.05,
    two nodes at depth 1 and two at depth 2. The draft steps: the root's distribution (one row), then
    the two frontier nodes (two rows)."""
    spec = parse_tree("sglang:topk=2,steps=2,tokens=5")
    t = ft.build(spec, rank_p())
    assert np.allclose(t.values, [0.4, 0.35, 0.16, 0.14])
    assert list(t.depths) == [1, 1, 2, 2]
    assert t.rows == (1, 2)
    table = ft.framework_table(rank_p(3), spec)
    assert table.tau == pytest.approx(2.05)
    assert list(table.shape) == [2, 2]
    # P(the accepted path reaches depth 2) = 0.16 + 0.14 (one node per level is accepted at most)
    assert table.p_deepest == pytest.approx(0.30)
    # dse's best 4-node tree takes the root's rank-3 child (0.2) that a top-2 tree never drafts:
    # 0.4 + 0.35 + 0.2 + 0.16 -> tau 2.11
    vals, _ = specdec.best_tree_nodes(rank_p(), 2, 4)
    assert 1 + vals.sum() == pytest.approx(2.11)


def test_sglang_frontier_keeps_topk_of_the_children():
    """sglang:topk=2,steps=3,tokens=8, same p: step 2's candidates 0.16, 0.14, 0.14, 0.1225; the
    frontier is their top 2: 0.16 and the first 0.14 (the rank-2 child of 0.4); step 3 expands only
    those: 0.064, 0.056, 0.056, 0.049. Top 7 of the ten candidates: 0.4, 0.35, 0.16, 0.14, 0.14,
    0.1225, 0.064 -> tau = 1 + 1.3765."""
    spec = parse_tree("sglang:topk=2,steps=3,tokens=8")
    t = ft.build(spec, rank_p())
    assert np.allclose(t.values, [0.4, 0.35, 0.16, 0.14, 0.14, 0.1225, 0.064])
    assert list(t.depths) == [1, 1, 2, 2, 2, 2, 3]
    assert t.rows == (1, 2, 2)
    assert ft.framework_table(rank_p(), spec).tau == pytest.approx(2.3765)


def test_vllm_static_tree_and_chain_by_hand():
    """vllm:tree=2x1: the root's top-2 children, each with its top-1 child: paths (0,), (1,), (0,0),
    (1,0) -> 0.4, 0.35, 0.4*0.4 = 0.16, 0.35*0.4 = 0.14; tau 2.05. Its draft forwards: one row, then
    every token drafted so far (2). vllm:k=3: 0.4, 0.16, 0.064 -> tau 1.624, one row per step."""
    t = ft.build(parse_tree("vllm:tree=2x1"), rank_p())
    assert np.allclose(sorted(t.values, reverse=True), [0.4, 0.35, 0.16, 0.14])
    assert t.rows == (1, 2)
    chain = parse_tree("vllm:k=3")
    assert chain.is_chain and chain.nodes == 0 and chain.depth == 3
    c = ft.build(chain, rank_p())
    assert np.allclose(c.values, [0.4, 0.16, 0.064]) and c.rows == (1, 1, 1)


def test_trtllm_dynamic_tree_by_hand():
    """trtllm:topk=2,draft_len=2,draft_tokens=4 builds SGLang's tree above (the same selection):
    tau 2.05. Its draft loop: step 0 over the accepted path padded to max_draft_len + 1 = 3 rows,
    layer 1 over the 1 x K = 2 rows drafted so far."""
    t = ft.build(parse_tree("trtllm:topk=2,draft_len=2,draft_tokens=4"), rank_p())
    assert np.allclose(t.values, [0.4, 0.35, 0.16, 0.14])
    assert t.rows == (3, 2)


def test_eagle1_static_tree_is_the_yaml_one():
    """The constant and rank_profiles.yaml's fit.tree (which the eagle profile was fitted on) agree."""
    import yaml

    from dse.catalog.database import default_root
    raw = yaml.safe_load((default_root() / "acceptance" / "rank_profiles.yaml").read_text())
    assert [tuple(c) for c in raw["profiles"]["eagle"]["fit"]["tree"]] == list(EAGLE1_MC_SIM_7B_63)


profiles = st.lists(st.floats(0.01, 0.6), min_size=2, max_size=5).map(
    lambda xs: tuple(x / max(1.0, sum(xs) / 0.95) for x in sorted(xs, reverse=True)))


@settings(max_examples=60, deadline=None)
@given(p=profiles, topk=st.integers(1, 4), steps=st.integers(1, 4), extra=st.integers(0, 12))
def test_framework_tau_never_exceeds_the_best_tree(p, topk, steps, extra):
    """The best tree of N nodes and depth <= steps takes the N most valuable nodes of all: no
    framework's tree of N nodes at that depth credits more."""
    cands = topk + (steps - 1) * topk * topk
    tokens = 2 + min(extra, cands - 1)
    if topk == 1:
        tokens = steps + 1
    spec = parse_tree(f"sglang:topk={topk},steps={steps},tokens={tokens}")
    pm = rank_p(steps + 1, p)
    n = tokens - 1
    vals, _ = specdec.best_tree_nodes(pm, steps, n)
    assert ft.framework_table(pm, spec).tau <= 1 + vals.sum() + 1e-12
    if topk >= n:       # a top-k as wide as the tree drops nothing: SGLang's tree is the best tree
        assert ft.framework_table(pm, spec).tau == pytest.approx(1 + vals.sum())


@pytest.mark.parametrize("steps", [1, 3, 6])
def test_sglang_topk_1_is_a_chain_of_steps(steps):
    spec = parse_tree(f"sglang:topk=1,steps={steps}")
    assert spec.is_chain and spec.nodes == 0 and spec.depth == steps and spec.tokens == steps + 1
    t = ft.build(spec, rank_p(steps + 1))
    assert list(t.depths) == list(range(1, steps + 1))
    assert np.allclose(t.values, 0.4 ** np.arange(1, steps + 1))
    # priced and credited as dse's chain of k = steps
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", alpha=0.7,
                        tree=f"sglang:topk=1,steps={steps}")
    c = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", alpha=0.7, k=steps, tree_nodes=0)
    assert r["k"] == steps and r["tree_nodes"] == 0
    assert r["tau"] == c["tau"] and r["spec_ms_per_token"] == c["spec_ms_per_token"]


def test_pricing_follows_the_framework_tree():
    """sglang:topk=4,steps=3,tokens=8: 7 nodes at depth 3; the target verifies 8 tokens per request
    (tree_verify_s of 7 nodes); k is the framework's depth. TensorRT-LLM's tree of the same
    parameters is the same tree (same tau, same verify pass) but its draft steps process 4, 4 and 8
    rows against SGLang's 4 (its extend over the k+1 verified positions), 4 and 4: more draft time."""
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", alpha=0.7, batch=16)
    sg = evaluate_design(**kw, tree="sglang:topk=4,steps=3,tokens=8")
    tr = evaluate_design(**kw, tree="trtllm:topk=4,draft_len=3,draft_tokens=7")
    assert sg["tree_nodes"] == tr["tree_nodes"] == 7 and sg["k"] == tr["k"] == 3
    # the record names the tree (the label parse_tree gives it)
    assert (sg["framework_tree"], tr["framework_tree"]) == ("sglang:topk=4,steps=3,tokens=8",
                                                            "trtllm:topk=4,draft_len=3,draft_tokens=7")
    assert evaluate_design(**kw)["framework_tree"] is None
    assert sg["tau"] == tr["tau"]
    assert sg["verify_ms_per_iter"] == tr["verify_ms_per_iter"]
    assert tr["draft_ms_per_iter"] > sg["draft_ms_per_iter"]
    batch, w = design_and_workload(**kw, tree="sglang:topk=4,steps=3,tokens=8")
    m = latency_metrics(batch, w)
    assert m["verify_s_per_iter"][0] == pytest.approx(tree_verify_s(batch, w, 7)[0])
    # tau: the framework table's, from the workload's alpha and rank profile
    t = ft.framework_table(specdec.rank_matrix(w.acceptance, 4, 4, w.rank_profile), w.tree)
    assert sg["tau"] == pytest.approx(t.tau)


def test_framework_tree_in_a_band_and_a_mix():
    """The band's ends and a text mix use the framework's tree too (tau_low <= tau <= tau_high)."""
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle3", task="mix",
                        tree="sglang:topk=4,steps=5,tokens=8")
    assert r["tree_nodes"] == 7 and r["k"] == 5
    assert r["tau_low"] <= r["tau"] <= r["tau_high"]


@pytest.mark.parametrize("text, field", [
    ("sglang:topk=0", "--tree sglang:topk"),
    ("sglang:topk=2,steps=2,tokens=9", "--tree sglang:tokens"),
    ("sglang:topk=1,steps=3,tokens=5", "--tree sglang:tokens"),
    ("vllm:k=40", "--tree vllm:k"),
    ("vllm:k=3,tree=2", "--tree vllm"),
    ("trtllm:topk=4", "--tree trtllm:draft_len"),
    ("trtllm:topk=2,draft_len=2,draft_tokens=9", "--tree trtllm:draft_tokens"),
    ("sglang:width=3", "--tree sglang"),
    ("lightllm", "--tree"),
])
def test_bad_trees_name_the_field(text, field):
    with pytest.raises(SpecError) as exc:
        parse_tree(text)
    assert exc.value.field == field and "\n" not in str(exc.value)


def test_tree_rules_against_k_tree_nodes_and_drafter():
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", alpha=0.7)
    with pytest.raises(SpecError, match="give no k"):
        evaluate_design(**kw, draft="eagle3", tree="sglang", k=3)
    with pytest.raises(SpecError, match="give one of the two"):
        evaluate_design(**kw, draft="eagle3", tree="sglang", tree_nodes=7)
    with pytest.raises(SpecError, match="medusa drafter"):
        evaluate_design(**kw, draft="medusa:4", tree="sglang")
    # a chain framework takes k auto without one, and any drafter
    r = evaluate_design(**kw, draft="llama-3.2-1b", tree="vllm")
    assert r["tree_nodes"] == 0 and r["k"] >= 1
    # best is the default, spelled out
    assert evaluate_design(**kw, draft="eagle3", tree="best")["tau"] == evaluate_design(**kw, draft="eagle3")["tau"]


@pytest.mark.parametrize("a", [0.6, 0.7, 0.8, 0.9])
def test_eagle1_static_tree_credits_2_to_3_percent_less_than_the_best(a):
    """EAGLE-1's mc_sim_7b_63 under EAGLE's profile against dse's best 25-node tree of depth <= 5:
    never more, and 2-3% less tau (docs/model.md, "Framework trees")."""
    from dse.catalog.database import default_root
    from dse.catalog.rank_profiles import load_rank_profiles
    from dse.workload.trees import EAGLE1_TREE
    prof = load_rank_profiles(default_root()).profiles["eagle"]
    p = np.tile(prof.probabilities(np.array([a]), 25), (6, 1))
    static = ft.framework_table(p, EAGLE1_TREE).tau
    best = 1 + specdec.best_tree_nodes(p, 5, 25)[0].sum()
    assert 0.97 * best <= static < 0.985 * best


def test_a_study_drafts_the_framework_tree(tmp_path):
    """workload.tree: each row whose draft the framework takes drafts its tree at its depth (the
    draft 'none' row none); it survives the round trip through results metadata; with a k or a
    tree size, or for a draft the framework builds no tree for, it is refused in one line."""
    from pathlib import Path

    import yaml

    from dse.errors import SpecErrors
    from dse.report.context import study_from_mapping, study_mapping
    from dse.study import load_study

    def study(**wl):
        raw = yaml.safe_load((Path(__file__).parents[2] / "studies" / "quickstart.yaml").read_text())
        raw["workload"] = dict(target="llama-3.1-8b", draft=["none", "eagle3"], batch=[1, 32], **wl)
        raw["space"], raw["constraints"], raw["output"] = {"target_chip": {"device": "h100-sxm"}}, [], str(tmp_path / "o")
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
        return load_study(tmp_path / "s.yaml")
    s = study(tree="sglang:topk=4,steps=3,tokens=8")
    w = s.drafts.workload("eagle3")
    assert (w.tree.label, w.tree_nodes, w.tree_choices) == ("sglang:topk=4,steps=3,tokens=8", 7, ())
    assert s.drafts.workload("none").tree is None
    again = study_from_mapping(study_mapping(s.resolved())).drafts.workload("eagle3")
    assert again.tree == w.tree
    with pytest.raises((SpecError, SpecErrors), match="space.k = 3: workload.tree sglang:topk=4,steps=3,tokens=8 "
                                                      "drafts 3 steps"):
        study(tree="sglang:topk=4,steps=3,tokens=8", k=3)
    with pytest.raises((SpecError, SpecErrors), match="workload.tree_nodes"):
        study(tree="sglang", tree_nodes=7)
    with pytest.raises((SpecError, SpecErrors), match="workload.tree vllm:k"):
        study(tree="vllm:k=99")
