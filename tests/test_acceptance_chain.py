"""EAGLE-3's chains against its trees (issue 29, Acceptance II): the vLLM chain rows of the EAGLE-3
authors' Llama-3.1-8B head, read and converted by hand; why the rank profile's tail cannot close the
gap between that head's tree (EAGLE-3 paper) and its chains (vLLM); the chain term (head:eagle3_chain)
in the model and on a table's tree alpha; and the held-out error of the rows it was not fitted on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse.acceptance import fit as acc
from dse.catalog.acceptance import load_table
from dse.catalog.database import load_database
from dse.catalog.rank_profiles import GEOMETRIC, RankProfile, load_rank_profiles
from dse.model import specdec
from dse.workload.spec import parse_drafter, parse_task


def rows():
    return {r.id: r for r in load_table()}


def test_vllm_chain_rows_convert_by_hand():
    t = rows()
    # vllm issue 20780, EAGLE-3 at K = 7: AL 3.54. alpha = 0.744: 0.744^8 = 0.0939, (1 - 0.0939) / 0.256 = 3.539
    r = t["vllm20780-12"]
    assert (r.k, r.tree_nodes, r.stat_value, r.checkpoint) == (7, None, 3.54, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert acc.convert(r).alpha == pytest.approx(0.744, abs=5e-4)
    # vllm pull 17504: marginal 0.75, 0.55, 0.42, ... -> conditional 0.75, 0.55/0.75 = 0.733, 0.42/0.55 = 0.764, ...
    r = t["vllm17504-01"]
    assert r.rates[:3] == pytest.approx((0.75, 0.733, 0.764), abs=1e-3)
    # tau = 1 + the sum of the marginals = 1 + 0.75 + 0.55 + 0.42 + 0.31 + 0.24 + 0.18 + 0.13 = 3.58
    assert acc.convert(r).tau == pytest.approx(3.58, abs=2e-3)
    # the vLLM sources are held out (never fitted): the chain term is fitted on SpecDecode-Bench's chains
    assert all(t[i].held_out and not t[i].fit for i in t if i.startswith("vllm"))


def test_a_rank_tail_cannot_reconcile_the_eagle3_tree_with_its_chain():
    """The EAGLE-3 head's MT-bench tree (tau 6.13, 59 nodes, 8 levels) against its vLLM chain (alpha
    0.744): the eagle profile continued to rank 10 with the same share s of the misses (p_r = p_(r-1) (1 - s),
    s = 0.2934) implies the same alpha as the 4-rank profile (the best 59-node tree hardly uses ranks past
    4 at alpha 0.84); only the geometric limit (75% of the misses at rank 2) brings it to the chain's 0.744."""
    eagle = load_rank_profiles(acc.fit_path().parent.parent).profiles["eagle"]
    s = 0.2934
    tail = [eagle.p[-1] * (1 - s) ** i for i in range(1, 7)]          # 0.0308 x 0.7066 = 0.0217, ...
    assert tail[0] == pytest.approx(0.0217, abs=1e-4)
    ext = RankProfile(name="eagle-10", p=(*eagle.p, *tail))
    a4 = specdec.implied_tree_alpha(6.13, 8, 59, eagle)
    a10 = specdec.implied_tree_alpha(6.13, 8, 59, ext)
    ag = specdec.implied_tree_alpha(6.13, 8, 59, GEOMETRIC)
    assert a4 == pytest.approx(0.840, abs=2e-3) and abs(a10 - a4) < 2e-3
    assert ag == pytest.approx(0.744, abs=3e-3)
    chain = float(specdec.implied_alpha(np.array([3.54]), np.array([7]))[0])
    assert a10 - chain > 0.09                  # the gap the chain term carries


def test_chain_term_in_the_model_and_on_tree_rows():
    f = acc.stored_fit()
    c = f.coef["head:eagle3_chain"]
    assert c < 0                                # EAGLE-3 chains accept less than its trees imply
    db = load_database()
    tgt = db.model("llama-3.1-8b")
    d = parse_drafter("eagle3:RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3", tgt, db)
    tree = acc.resolve(tgt, d, parse_task("chat"), 0.0, db, chain=False).tasks[0]
    ch = acc.resolve(tgt, d, parse_task("chat"), 0.0, db, chain=True).tasks[0]
    lg = math.log(tree.alpha / (1 - tree.alpha))
    assert ch.alpha == pytest.approx(1 / (1 + math.exp(-(lg + c))), rel=1e-12)
    assert "head:eagle3_chain" in ch.detail and "head:eagle3_chain" not in tree.detail
    # a checkpoint with tree rows only (EAGLE-3's Vicuna-13B head), drafting a chain: the term on their mean alpha
    v = db.model("vicuna-13b")
    d = parse_drafter("eagle3", v, db)
    tr = acc.resolve(v, d, parse_task("chat"), 0.0, db).tasks[0]
    cr = acc.resolve(v, d, parse_task("chat"), 0.0, db, shape=(5, None, None)).tasks[0]
    assert tr.origin == cr.origin == "table"
    lg = math.log(tr.alpha / (1 - tr.alpha))
    assert cr.alpha == pytest.approx(1 / (1 + math.exp(-(lg + c))), rel=1e-12)
    # EAGLE-1 heads take no chain term
    x, _ = acc.feature_vector(acc.PairFeatures(method="eagle", task_weights=(("chat", 1.0),), temperature=0.0, chain=1.0))
    assert x[acc.PARAMS.index("head:eagle3_chain")] == 0.0


def test_authors_head_chain_comes_from_its_chain_rows():
    """`--k 7 --tree-nodes 0` of the authors' EAGLE-3 head: its vLLM chain rows at k = 7 (0.744 and 0.748),
    not its trees' 0.86; its default tree keeps the tree rows."""
    db = load_database()
    tgt = db.model("llama-3.1-8b")
    d = parse_drafter("eagle3:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", tgt, db)
    t = acc.resolve(tgt, d, parse_task("chat"), 0.0, db, shape=(7, None, None)).tasks[0]
    assert t.origin == "table" and t.alpha == pytest.approx((0.744 + 0.748) / 2, abs=2e-3)
    t = acc.resolve(tgt, d, parse_task("chat"), 0.0, db, shape=(None, 59, 6)).tasks[0]
    assert t.alpha > 0.85 and "vllm" not in t.detail


def test_held_out_vllm_chains_within_target():
    """The held-out vLLM chains of the authors' EAGLE-3 head (vllm issue 20780), predicted by the full fit
    with the chain term fitted on other sources: median |tau error| within 12%."""
    f = acc.stored_fit()
    e3 = [v for i, v in f.held_out.items() if i.startswith("vllm20780-") and v["method"] == "eagle3"]
    assert len(e3) == 6
    assert float(np.median([abs(v["error"]) for v in e3])) <= 0.12
