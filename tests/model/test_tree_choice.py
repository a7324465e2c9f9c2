"""A tree method's tree (and k) re-chosen for the batch when the user fixes neither
(dse.model.tree_choice): the published batch-1 tree at every batch made `--draft eagle3` at batch
32 a 3x slowdown where a chain gives 1.8x."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from dse.api import evaluate_design
from dse.errors import SpecError
from dse.workload.spec import DrafterSpec

H200_70B = dict(hw="h200", target="llama-3.1-70b", dtype="fp8", draft="eagle3")
SIZES = (0, 4, 8, 16, 32, 59)


def test_eagle3_choices_are_a_chain_smaller_trees_and_the_published_tree():
    assert DrafterSpec(kind="eagle", label="eagle3", method="eagle3").tree_choices() == SIZES
    assert DrafterSpec(kind="eagle", label="eagle").tree_choices() == (0, 4, 8, 16, 25)     # EAGLE-1's 25 nodes
    assert DrafterSpec(kind="model", label="llama-3.2-1b").tree_choices() == ()             # a chain method


def test_batch_32_matches_k_auto_and_batch_1_keeps_the_published_tree():
    """70B fp8 on an H200, EAGLE-3 (acceptance from the model: EAGLE-3's mean, the registry holding no
    head of llama-3.1-70b; alpha 0.80 for its trees, 0.69 for a chain with head:eagle3_chain): at batch 32
    the published 59-node tree verifies 32 x 60 = 1,920 positions a pass (compute-bound) and gives 0.33x;
    the re-chosen draft is a chain of k = 3 at the chain's alpha, the same as --k auto (a 4-node tree of
    one node per depth is that chain, not a tree at the trees' alpha). At batch 1 the choice is no worse
    than the published tree."""
    chosen = evaluate_design(**H200_70B, batch=32)
    auto = evaluate_design(**H200_70B, batch=32, k="auto")
    published = evaluate_design(**H200_70B, batch=32, tree_nodes="published")
    assert published["speedup"] < 0.4 and (published["k"], published["tree_nodes"]) == (6, 59)
    assert chosen["speedup"] >= 0.95 * auto["speedup"] and auto["speedup"] > 1.7
    assert (chosen["k"], chosen["tree_nodes"], chosen["tree_choices"]) == (3, 0, list(SIZES))
    assert chosen["alpha"] == auto["alpha"] < published["alpha"] - 0.05     # the chain's own acceptance
    # and the record says both: the trees' alpha, then the chain's with its term
    assert chosen["acceptance_origin"].startswith(f"alpha {published['alpha']:.2f} ")
    assert f"; a chain among the sizes: alpha {auto['alpha']:.2f} " in chosen["acceptance_origin"]
    assert "a chain: -0.59 in logit(alpha) (head:eagle3_chain)" in chosen["acceptance_origin"]
    # by hand: a chain of 3 at i.i.d. alpha a emits tau = 1 + a + a^2 + a^3 tokens a pass, and a
    # token costs the iteration over tau: speedup = baseline / (iter / tau)
    a = chosen["alpha"]
    assert chosen["tau"] == pytest.approx(1 + a + a * a + a ** 3, rel=1e-12)
    assert chosen["speedup"] == pytest.approx(chosen["baseline_ms_per_token"] / (chosen["iter_ms"] / chosen["tau"]),
                                              rel=1e-12)
    one = evaluate_design(**H200_70B, batch=1)
    assert one["speedup"] >= evaluate_design(**H200_70B, batch=1, tree_nodes="published")["speedup"]
    assert one["tree_nodes"] == 59


@pytest.mark.parametrize("batch", [1, 4, 32, 128])
def test_the_choice_is_the_fastest_size_evaluated_alone(batch):
    """Each row's seconds per token is the least over the sizes, each at its own k = auto: a chain
    up to k = 16, a tree up to the published depth 6; the published tree as EAGLE-2's code builds it
    (dse.model.framework_trees), at its depth."""
    chosen = evaluate_design(**H200_70B, batch=batch)
    each = [evaluate_design(**H200_70B, batch=batch, tree_nodes=n, k_max=6 if n else 16) for n in SIZES[:-1]]
    each.append(evaluate_design(**H200_70B, batch=batch, tree_nodes="published"))
    # a size whose best tree is one node per depth is the chain (EAGLE-3's chains draft at the chain
    # term's alpha): the chooser does not keep it as a tree
    each = [r for r in each if not (r["tree_nodes"] and set(r["tree_shape"].split("-")) == {"1"})]
    best = min(each, key=lambda r: r["spec_ms_per_token"])
    assert chosen["spec_ms_per_token"] == best["spec_ms_per_token"]
    assert (chosen["k"], chosen["tree_nodes"], chosen["tree_shape"]) == (best["k"], best["tree_nodes"],
                                                                         best["tree_shape"])


def test_one_batch_of_rows_chooses_per_row(tmp_path):
    """A study listing eagle3 without k or tree_nodes: each row its own size (the batch decides),
    the same rows as dse eval one at a time."""
    from dse.catalog.database import load_database
    from dse.evaluation.designs import evaluate_study
    from dse.study import load_study
    raw = yaml.safe_load((Path(__file__).parents[2] / "studies" / "quickstart.yaml").read_text())
    raw["workload"] = dict(target="llama-3.1-70b", dtype="fp8", draft=["none", "eagle3"], batch=[1, 4, 32, 128],
                           prompt_tokens=128, output_tokens=128)
    raw["space"] = {"target_chip": {"device": "h200"}}
    raw["constraints"] = []
    raw["output"] = str(tmp_path / "t.parquet")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(raw))
    s = load_study(tmp_path / "t.yaml")
    batches = np.array([1, 4, 32, 128])
    _, m = evaluate_study(s, {"batch": batches, "draft": np.array(["eagle3"] * 4, dtype=object)}, 4,
                          load_database(), s.tech)
    for i, b in enumerate(batches):
        one = evaluate_design(**H200_70B, batch=int(b), prompt=128, output=128)
        assert (m.k[i], m.tree_nodes[i]) == (one["k"], one["tree_nodes"])
        assert m.spec_s_per_token[i] * 1e3 == pytest.approx(one["spec_ms_per_token"], rel=1e-12)
    assert m.tree_nodes[0] > m.tree_nodes[3]          # the tree shrinks as the batch grows
    assert s.resolved()["workload"]["tree_nodes"] is None


def test_the_published_tree_is_asked_for_by_name():
    with pytest.raises(SpecError, match="--tree-nodes = 'published': the published tree is the method's own depth"):
        evaluate_design(**H200_70B, tree_nodes="published", k=3)
    with pytest.raises(SpecError, match="llama-3.2-1b has no published tree"):
        evaluate_design(hw="h200", target="llama-3.1-70b", draft="llama-3.2-1b", tree_nodes="published")
    with pytest.raises(SpecError, match="--tree-nodes = 'abc': expected an integer in"):
        evaluate_design(**H200_70B, tree_nodes="abc")


def test_a_study_asks_for_the_published_tree_by_name(tmp_path):
    """workload.tree_nodes: published keeps each tree method's published tree (k auto up to its
    depth) and survives the round trip through results metadata; with a k, or without a tree
    method among the drafts, it is refused in one line."""
    from dse.errors import SpecErrors
    from dse.report.context import study_from_mapping, study_mapping
    from dse.study import load_study

    def study(**wl):
        raw = yaml.safe_load((Path(__file__).parents[2] / "studies" / "quickstart.yaml").read_text())
        raw["workload"] = dict(target="llama-3.1-70b", dtype="fp8", draft=["none", "eagle3"], batch=[1, 32], **wl)
        raw["space"], raw["constraints"], raw["output"] = {"target_chip": {"device": "h200"}}, [], str(tmp_path / "o")
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
        return load_study(tmp_path / "s.yaml")
    s = study(tree_nodes="published")
    w = s.drafts.workload("eagle3")
    assert (w.tree_nodes, w.k_max, w.tree_choices) == (59, 6, ())
    assert study_from_mapping(study_mapping(s.resolved())).drafts.workload("eagle3").tree_nodes == 59
    with pytest.raises((SpecError, SpecErrors), match="workload.tree_nodes = 'published': each method's published "
                                                      "tree is drafted at its own depth: give no k"):
        study(tree_nodes="published", k=3)
    with pytest.raises((SpecError, SpecErrors), match="expected an integer in \\[0, 1024\\], a list of them, "
                                                      "\\{low, high\\}, or published"):
        study(tree_nodes="pub")
