"""Token trees (issue 8): positional acceptance (Sequoia, Chen et al. 2024, arXiv 2402.12374),
the best N-node tree, what a tree costs to verify and draft, Medusa and retrieval trees,
the overlap window and the draft chip's shortfall. Numbers are worked by hand here."""

import itertools
from math import comb

import numpy as np
import pytest

from dse.api import evaluate_design
from dse.errors import SpecError
from dse.model import specdec
from dse.workload.spec import TREE_NODES_MAX, AcceptanceSpec


def tree(acc: AcceptanceSpec, nodes: int, depth: int):
    t = specdec.tree_table(specdec.rank_matrix(acc, depth + 1, nodes), depth, nodes)
    return t.tau[depth, nodes], tuple(int(x) for x in t.shape[depth, nodes] if x), t


def alpha(a):
    return AcceptanceSpec(kind="alpha", alpha=a)


def closed_form_tau(a: float, nodes: int, depth: int) -> float:
    """An independent count: with p_r = a(1-a)^(r-1) a node of depth d whose ranks exceed 1 by
    e in total has value a^d (1-a)^e, and C(e+d-1, d-1) nodes share (d, e) (compositions of e
    into d parts). Take the largest values, with their multiplicities, until N nodes."""
    cells = sorted(((a ** d * (1 - a) ** e, comb(e + d - 1, d - 1))
                    for d in range(1, depth + 1) for e in range(nodes)), reverse=True)
    tau, left = 1.0, nodes
    for v, count in cells:
        take = min(count, left)
        tau, left = tau + take * v, left - take
        if not left:
            break
    return tau


@pytest.mark.parametrize("a,nodes,depth,published", [(0.6, 64, 8, 4.69), (0.7, 26, 5, 4.55), (0.8, 16, 4, 4.47)])
def test_best_tree_tau_matches_the_issue_and_a_closed_form(a, nodes, depth, published):
    tau, shape, _ = tree(alpha(a), nodes, depth)
    assert tau == pytest.approx(published, rel=0.01)
    assert tau == pytest.approx(closed_form_tau(a, nodes, depth), rel=1e-12)
    assert sum(shape) == nodes and len(shape) <= depth


def test_small_alpha_tree_by_hand():
    # alpha 0.5: p_1 = 0.5, p_2 = 0.25. Depth <= 2, 3 nodes. Candidates: depth 1: 0.5 (rank 1),
    # 0.25 (rank 2); depth 2: 0.25 (1,1), 0.125 (1,2), 0.125 (2,1). Best 3: 0.5 + 0.25 + 0.25
    # -> tau = 2.0, one of the two 0.25s at each depth: shape 2-1 (the elder sibling first).
    tau, shape, _ = tree(alpha(0.5), 3, 2)
    assert tau == pytest.approx(2.0)
    assert shape == (2, 1)


def test_user_rank_vector_tree_by_hand():
    # p = (0.6, 0.2, 0.1) at every depth, depth <= 2.
    # depth 1: 0.6, 0.2, 0.1
    # depth 2: under 0.6: 0.36, 0.12, 0.06; under 0.2: 0.12, 0.04, 0.02; under 0.1: 0.06, 0.02, 0.01
    # 5 nodes: 0.6, 0.36, 0.2, 0.12, 0.12 -> tau = 1 + 1.40 = 2.40; 2 at depth 1, 3 at depth 2
    # 6 nodes: + 0.1 (depth 1) -> 2.50, shape 3-3
    # depth <= 1, 3 nodes: 1 + 0.6 + 0.2 + 0.1 = 1.9
    rank = AcceptanceSpec(kind="rank", rank=((0.6, 0.2, 0.1),))
    assert tree(rank, 5, 2)[:2] == (pytest.approx(2.40), (2, 3))
    assert tree(rank, 6, 2)[:2] == (pytest.approx(2.50), (3, 3))
    assert tree(rank, 3, 1)[0] == pytest.approx(1.9)
    # brute force over every tree path (ranks 1..3, depth <= 2) agrees
    p = (0.6, 0.2, 0.1)
    vals = sorted((np.prod([p[r] for r in path]) for d in (1, 2) for path in itertools.product(range(3), repeat=d)),
                  reverse=True)
    assert tree(rank, 5, 2)[0] == pytest.approx(1 + sum(vals[:5]))


def test_rank_rows_per_depth_medusa_heads():
    # head 1 ranks (0.7, 0.1), head 2 ranks (0.4, 0.2): depth <= 2, 3 nodes.
    # depth 1: 0.7, 0.1; depth 2 under 0.7: 0.28, 0.14; under 0.1: 0.04, 0.02.
    # best 3: 0.7, 0.28, 0.14 -> tau 2.12, shape 1-2
    rank = AcceptanceSpec(kind="rank", rank=((0.7, 0.1), (0.4, 0.2)))
    assert tree(rank, 3, 2)[:2] == (pytest.approx(2.12), (1, 2))


@pytest.mark.parametrize("a", [0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_rank_vector_alpha_then_zeros_is_leviathans_chain(a, k):
    rank = AcceptanceSpec(kind="rank", rank=((a, 0.0, 0.0, 0.0),))
    tau, _, _ = tree(rank, k, k)
    assert tau == pytest.approx(float(specdec.tau_iid(a, k)), rel=1e-14)


def test_tau_never_exceeds_depth_plus_one_and_grows_with_nodes():
    rng = np.random.default_rng(1)
    for _ in range(30):
        if rng.random() < 0.5:
            acc = alpha(float(rng.uniform(0.05, 1.0)))
        else:
            row = rng.dirichlet(np.ones(4)) * rng.uniform(0.3, 1.0)
            acc = AcceptanceSpec(kind="rank", rank=(tuple(float(x) for x in row),))
        depth, n_max = int(rng.integers(1, 9)), int(rng.integers(1, 80))
        t = specdec.tree_table(specdec.rank_matrix(acc, depth + 1, n_max), depth, n_max)
        assert np.all(t.tau <= np.arange(depth + 1)[:, None] + 1 + 1e-12)       # tau <= D + 1
        assert np.all(np.diff(t.tau, axis=1) >= -1e-15)                          # more nodes: no lower tau
        assert np.all(np.diff(t.tau, axis=0) >= -1e-15)                          # deeper bound: no lower tau
        assert np.array_equal(t.shape.sum(axis=2), np.broadcast_to(np.arange(n_max + 1), t.tau.shape)
                              * (np.arange(depth + 1) > 0)[:, None])


def test_tree_is_valid_every_node_has_its_parent():
    # nodes per depth can only shrink by branching: each depth-d node needs a depth-(d-1) parent,
    # and a node never outweighs its parent, so the best-first list is a tree at every prefix
    p = specdec.rank_matrix(alpha(0.7), 6, 40)
    vals, deps = specdec.best_tree_nodes(p, 5, 40)
    assert np.all(np.diff(vals) <= 1e-15)
    for n in range(1, 41):
        counts = np.bincount(deps[:n], minlength=6)[1:]
        assert counts[0] >= 1 and all(counts[d] == 0 or counts[d - 1] > 0 for d in range(1, 5))


def test_eval_tree_reports_shape_and_best_tau():
    # the geometric profile p_r = alpha(1-alpha)^(r-1), the limit the best-tree figure was worked in
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.6, tree_nodes=64, k=8,
                        rank_profile="geometric")
    assert r["tau"] == pytest.approx(4.69, rel=0.01)          # was 8.98 with N/k children per level
    assert r["rank_profile"] == "geometric"
    assert r["tree_nodes"] == 64
    shape = [int(x) for x in r["tree_shape"].split("-")]
    assert sum(shape) == 64 and len(shape) == 8
    assert r["alpha"] == 0.6                                   # alpha stays the i.i.d. conditional rate
    assert r["speedup"] < 3.0                                  # it reported 5.15x


def test_given_tau_with_a_tree_is_used_as_published():
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", tau=3.8, k=5, tree_nodes=26)
    assert r["tau"] == pytest.approx(3.8)
    assert sum(int(x) for x in r["tree_shape"].split("-")) == 26


def test_tree_verify_attention_reads_context_plus_the_tree(db):
    # A tree mask: every one of the q = 65 positions attends to the S cached tokens and to the
    # tree's own 65 keys (masked), F_att = 4*h*d_h*L * q * (S + q); a causal chain of 65
    # positions does 4*h*d_h*L * q * (S + 33). Llama-3.1-8B: h 32, d_h 128, L 32 ->
    # 4*32*128*32 = 524,288 FLOP per (query, key); difference 524,288 * 65 * 32 = 1.0905e9.
    from dse.api import hardware_arrays
    from dse.model.roofline import step_cost
    m = db.model("llama-3.1-8b")
    hw = hardware_arrays(db.device("h100-sxm"), db.runtime("graphs"), 1, "bf16")
    kw = dict(batch=1.0, q=65.0, context=192.0, weight_bytes=2.0, kv_bytes=2.0)
    diff = step_cost(m, hw, tree_mask=True, **kw).flops - step_cost(m, hw, **kw).flops
    assert diff[0] == pytest.approx(524_288 * 65 * 32)


def test_tree_draft_runs_one_step_per_depth(ideal):
    # Fixed costs only (bandwidth and FLOP/s made huge): an EAGLE draft step costs one layer's
    # kernels, 8 x 10 us, plus the per-sequence cost 7 us = 87 us, whatever its positions; the
    # runtime's per-step cost (30 us) is not charged: the head runs inside the speculative
    # iteration, whose host work is spec_overhead_us. A tree of depth 5 costs 5 steps (435 us),
    # not one per node (26) and not a different number of steps.
    fast = {**ideal, "mem_bw_tb_s": 1e5, "peak_tflops_bf16": 1e6, "kernel_launch_us": 10,
            "step_overhead_us": 30, "kernels_per_layer": 8, "sequence_overhead_us": 7}
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, tree_nodes=26, k=5,
                        set_fields=fast, rank_profile="geometric")
    assert r["tree_shape"] == "3-6-6-5-6"
    assert r["draft_ms_per_iter"] == pytest.approx(5 * 0.087, rel=1e-3)
    # a draft model's step is an engine step: its layers' kernels plus 30 + 7 us
    m = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.7, k=5, set_fields=fast)
    assert m["draft_ms_per_iter"] == pytest.approx(5 * (16 * 8 * 0.010 + 0.030 + 0.007), rel=1e-3)


def test_tree_draft_flops_follow_the_nodes_per_depth(db, ideal):
    # Compute-bound draft (bandwidth huge, no fixed costs): draft time = FLOPs / P. An EAGLE head's
    # first step is its draft extend over the k+1 = 6 verified positions (it drafts depth 1); step
    # i > 0 runs the nodes of depth i. The 26-node tree of depth 5 (4-7-9-5-1 under EAGLE's rank
    # profile) runs 6 + 4 + 7 + 9 + 5 = 31 positions over its 5 steps, the 5-step chain 6 + 1 + 1 +
    # 1 + 1 = 10, so the ratio is 3.1 (the attention share differs by < 1% at a 192-token context).
    slow = {**ideal, "mem_bw_tb_s": 1e5, "peak_tflops_bf16": 1.0}
    tree_r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, tree_nodes=26, k=5,
                             set_fields=slow)
    assert tree_r["tree_shape"] == "4-7-9-5-1"
    chain = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, k=5, set_fields=slow)
    assert tree_r["draft_ms_per_iter"] / chain["draft_ms_per_iter"] == pytest.approx(31 / 10, rel=0.01)


def test_medusa_tree_memory_and_head_time_by_hand(ideal):
    # medusa:4 on Llama-3.1-8B (d 4096, V 128,256), heads with their own LM heads:
    # per head 4096^2 + 4096*128256 = 16,777,216 + 525,336,576 = 542,113,792 parameters;
    # 4 heads bf16: 4 * 542,113,792 * 2 = 4,336,910,336 bytes = 4.3369 GB of draft memory.
    # Ideal H100 (3.35 TB/s, 989.4 TFLOP/s, no fixed costs): heads read once per verify pass,
    # 4.3369e9 / 3.35e12 = 1.29460 ms; their FLOPs on 33 positions, 2*33*2.1685e9 = 1.431e11,
    # take 0.145 ms at 989.4 TFLOP/s: memory-bound, draft time 1.2946 ms. All 4 heads run even
    # when the tree is only 3 deep (k = 3).
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="medusa:4", alpha=0.6, tree_nodes=32, k=3,
                        set_fields=ideal)
    assert r["draft_memory_required_gb"] == pytest.approx(4.336910336, rel=1e-9)
    plain = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", set_fields=ideal)
    assert r["memory_required_gb"] - plain["memory_required_gb"] == pytest.approx(4.336910336, rel=1e-9)
    assert r["draft_ms_per_iter"] == pytest.approx(1.29460, rel=1e-4)
    assert r["k"] == 3 and r["tree_nodes"] == 32
    assert r["draft_bound"] == "memory"


def test_five_medusa_heads_on_llama3_8b_are_5_4_gb():
    # the issue's figure: 5 * 542,113,792 * 2 bytes = 5.421 GB
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="medusa:5", alpha=0.6, k=2)
    assert r["draft_memory_required_gb"] == pytest.approx(5.42113792, rel=1e-9)


def test_retrieval_tree_draft_time_and_datastore_by_hand():
    # --draft ngram, 32-node tree, batch 1, graphs runtime: host lookup ngram_draft_us = 20 us,
    # then copy 33 token ids (4 B) and a 33 x 33 byte mask: 132 + 1089 = 1221 bytes, at
    # 10 us + 1221 B / 25 GB/s = 10 + 0.04884 us; draft time 30.04884 us. No device weights; the
    # 12 GB datastore is host memory.
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="ngram", alpha=0.6, tree_nodes=32, k=4,
                        datastore_gb=12)
    plain = evaluate_design(hw="h100-sxm", target="llama-3.1-8b")
    assert r["draft_ms_per_iter"] == pytest.approx(0.03004884, rel=1e-9)
    assert r["memory_required_gb"] == plain["memory_required_gb"]
    assert r["draft_memory_required_gb"] == 0
    assert r["datastore_gb"] == 12.0


def test_overlap_window_needs_k_plus_one_tokens():
    # alpha 0.8, k 4: P(all 4 accepted) = 0.8^4 = 0.4096; the window is usable only if the
    # draft's 5th token is the target's bonus token too: 0.8^5 = 0.32768.
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-70b", dtype="fp8", draft="llama-3.2-1b", alpha=0.8,
                        k=4, draft_hw="l4", overlap=True)
    assert r["p_all_accepted"] == pytest.approx(0.4096)
    assert r["p_window"] == pytest.approx(0.32768)
    # T_iter = T_verify + T_link + (1 - p)*T_draft + p*max(0, T_draft - T_verify) + t_spec (100 us) + the
    # verification's sampling: 2 x 5 positions x 128,256 logits x 4 B = 5,130,240 B at 3.35 TB/s x 0.83 = 1.845 us
    p, td, tv, tl = r["p_window"], r["draft_ms_per_iter"], r["verify_ms_per_iter"], r["link_ms_per_iter"]
    sample = 2 * 5 * 128256 * 4 / (3.35e12 * 0.83) * 1e3
    assert sample == pytest.approx(1.845e-3, rel=1e-3)
    assert r["iter_ms"] == pytest.approx(tv + tl + (1 - p) * td + p * max(0.0, td - tv) + 0.100 + sample, rel=1e-9)


def test_draft_chip_shortfall_is_its_own():
    # qwen2.5-32b (~65 GB bf16) cannot sit on a 24 GB L4; the 7B target fits its H100
    r = evaluate_design(hw="h100-sxm", target="qwen2.5-7b", draft="qwen2.5-32b", draft_hw="l4", alpha=0.8, k=4)
    assert not r["fits"]
    assert r["memory_shortfall_gb"] == 0
    assert r["draft_memory_shortfall_gb"] == pytest.approx(
        r["draft_memory_required_gb"] + r["draft_memory_reserve_gb"] - r["draft_memory_capacity_gb"], rel=1e-9)
    assert r["draft_memory_reserve_gb"] == pytest.approx(0.05 * 24 * 2 ** 30 / 1e9, rel=1e-12)    # 5% of 24 GiB
    from dse.cli.text import eval_table
    lines = eval_table(r).splitlines()
    assert "DRAFT CHIP DOES NOT FIT" in next(x for x in lines if x.startswith("  draft "))
    assert "fits" in next(x for x in lines if x.startswith("memory"))


@pytest.mark.parametrize("kw,field", [
    (dict(rank_acceptance="0.6,0.5"), "--rank-acceptance"),            # sums to 1.1
    (dict(rank_acceptance="0.6,-0.1"), "--rank-acceptance"),
    (dict(rank_acceptance="0.6,0.2", alpha=0.5), "--rank-acceptance"),  # two acceptances
    (dict(alpha=0.6, tree_nodes=5000), "--tree-nodes"),
    (dict(alpha=0.6, datastore_gb=3.0), "--datastore-gb"),             # eagle has no datastore
])
def test_bad_tree_inputs_are_one_line_errors(kw, field):
    with pytest.raises(SpecError, match=field):
        evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", **kw)


def test_vectorised_trees_match_single_evaluations(db):
    # per-design tree sizes in one batch give the same rows as one evaluation each
    from dse.api import hardware_arrays
    from dse.model import DesignBatch, evaluate
    from dse.workload.spec import DrafterSpec, Workload
    hw = hardware_arrays(db.device("h100-sxm"), db.runtime("graphs"), 1, "bf16")
    w = Workload(target=db.model("llama-3.1-8b"), drafter=DrafterSpec(kind="eagle", label="eagle"),
                 acceptance=alpha(0.7))
    nodes = np.array([0, 8, 26, 64, 26])
    m = evaluate(DesignBatch(target=hw, draft=hw, draft_on_chip=False, draft_link_bw_bytes_s=0.0,
                             draft_link_latency_s=0.0, batch=np.array([1, 1, 1, 4, 16]), prompt_tokens=128,
                             output_tokens=128, k=0, tree_nodes=nodes), w)
    for i, n_i in enumerate(nodes):
        one = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.7, tree_nodes=int(n_i),
                              batch=int([1, 1, 1, 4, 16][i]), rank_profile="geometric")
        assert m.spec_s_per_token[i] * 1e3 == pytest.approx(one["spec_ms_per_token"], rel=1e-12)
        assert m.tree_shape[i] == one["tree_shape"]


def test_tree_size_bound_keeps_the_table_small():
    # TREE_NODES_MAX = 1024 covers Sequoia's largest tree (768 nodes); at the bound, with the
    # deepest k a study allows (64), the per-workload table stays a few MB and builds quickly
    import time
    t0 = time.perf_counter()
    t = specdec.tree_table(specdec.rank_matrix(alpha(0.9), 65, TREE_NODES_MAX), 64, TREE_NODES_MAX)
    assert time.perf_counter() - t0 < 5.0
    assert t.shape.nbytes < 16e6
    assert TREE_NODES_MAX >= 768
    assert t.tau[64, 1024] <= 65


def test_chain_only_batches_report_no_tree():
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
    assert r["tree_shape"] == "" and r["tree_nodes"] == 0          # 0 = a chain, as in result files


def test_cli_prints_the_tree_and_refuses_bad_rank_vectors():
    from click.testing import CliRunner

    from dse.cli.commands import main
    r = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle",
                                  "--alpha", "0.6", "--tree-nodes", "64", "--k", "8", "--rank-profile", "geometric"])
    assert r.exit_code == 0
    assert "tree of 64 nodes (per depth 5-10-19-15-6-7-1-1; rank profile geometric)" in r.output
    assert "tau 4.691" in r.output
    bad = CliRunner().invoke(main, ["eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "ngram",
                                    "--rank-acceptance", "0.7,0.4", "--tree-nodes", "8"])
    assert bad.exit_code == 2 and "--rank-acceptance" in bad.output and "Traceback" not in bad.output


def test_tree_draft_steps_take_each_depths_own_width(db, ideal):
    # alpha 0.3, 26 nodes, depth <= 3: the best tree is 8-15-3 (wide and shallow). The EAGLE head's
    # first step is its draft extend over the k+1 = 4 verified positions (it drafts depth 1), then
    # one step over each depth's nodes but the last: 8 and 15 positions. On an ideal H100 with
    # 21 TFLOP/s the EAGLE step is memory-bound at 4 positions and compute-bound at 8 and 15, so
    # sum_i max(compute(n_i), memory) is not 3 x max(compute(27/3), memory): the uniform-width
    # model is >= 5% off, and the model must equal the per-step sum.
    from dse.api import apply_overrides, hardware_arrays
    from dse.model.drafters import eagle_head
    from dse.model.roofline import step_cost
    fields = {**ideal, "peak_tflops_bf16": 21.0}
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", alpha=0.3, tree_nodes=26, k=3,
                        set_fields=fields, rank_profile="geometric")
    assert r["tree_shape"] == "8-15-3"
    dev, rt = apply_overrides(db.device("h100-sxm"), db.runtime("graphs"), fields)
    hw = hardware_arrays(dev, rt, 1, "bf16")
    tgt = db.model("llama-3.1-8b")
    fc = 2 * tgt.hidden_size ** 2                      # EAGLE's fc(2d -> d), bf16

    def step(q):
        c = step_cost(eagle_head(tgt), hw, batch=1.0, q=q, context=192.0, weight_bytes=2.0, kv_bytes=2.0)
        return c.time_s[0] + max(2 * fc * q / 21e12, fc * 2 / 3.35e12)

    per_depth = step(4.0) + step(8.0) + step(15.0)
    uniform = 3 * step(27 / 3)
    assert abs(per_depth - uniform) / per_depth > 0.05
    assert r["draft_ms_per_iter"] == pytest.approx(per_depth * 1e3, rel=1e-9)


def test_hydra_heads_draft_one_depth_a_step_by_hand(ideal):
    # hydra:4 on Llama-3.1-8B: Medusa-sized heads, 542,113,792 parameters each (d^2 + dV), 4 x 1.0842 GB
    # of weights held like medusa:4's; but each depth is its own step (the heads are sequentially
    # dependent): on an ideal H100 a step streams one head, 1.08422758e9 B / 3.35e12 B/s = 0.323650 ms.
    # A chain of 3: 3 steps, 0.970951 ms (medusa:4 reads all 4 heads once: 1.294601 ms); the runtime's
    # draft_step_overhead_us (100 us set here) is paid per step.
    per_step = 542_113_792 * 2 / 3.35e12
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="hydra:4", alpha=0.6, k=3, set_fields=ideal)
    assert r["draft_ms_per_iter"] == pytest.approx(3 * per_step * 1e3, rel=1e-9)
    assert r["draft_memory_required_gb"] == pytest.approx(4.336910336, rel=1e-9)
    m = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="medusa:4", alpha=0.6, k=3, set_fields=ideal)
    assert m["draft_ms_per_iter"] == pytest.approx(4 * per_step * 1e3, rel=1e-9)
    h = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="hydra:4", alpha=0.6, k=3,
                        set_fields={**ideal, "draft_step_overhead_us": 100})
    assert h["draft_ms_per_iter"] - r["draft_ms_per_iter"] == pytest.approx(0.3, rel=1e-9)
    # a tree of 16 nodes, depth <= 3: one step per level it uses, whatever the level's width (memory-bound)
    t = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="hydra:4", alpha=0.6, k=3, tree_nodes=16,
                        set_fields=ideal)
    levels = len(t["tree_shape"].split("-"))
    assert t["rank_profile"] == "medusa" and levels == 3
    assert t["draft_ms_per_iter"] == pytest.approx(levels * per_step * 1e3, rel=1e-6)
    with pytest.raises(SpecError, match="one token per Hydra head"):
        evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="hydra:4", alpha=0.6, k=5)


def test_tree_verify_and_draft_steps_pay_the_runtimes_tree_costs():
    # graphs: 1 kernel a layer more in a tree-masked verify (32 layers x 6.5 us = 0.208 ms) and 30 us a
    # tree draft step; a chain pays neither (an EAGLE head step pays the 30 us in a chain too)
    kw = dict(hw="h100-sxm", target="llama-3.1-8b", alpha=0.7, k=4)
    for draft, steps in (("llama-3.2-1b", 4), ("eagle", 4)):
        t = evaluate_design(**kw, draft=draft, tree_nodes=16, rank_profile="geometric")
        t0 = evaluate_design(**kw, draft=draft, tree_nodes=16, rank_profile="geometric",
                             set_fields={"tree_kernels_per_layer": 0, "draft_step_overhead_us": 0})
        assert t["verify_ms_per_iter"] - t0["verify_ms_per_iter"] == pytest.approx(32 * 6.5e-3, rel=1e-9)
        levels = len(t["tree_shape"].split("-"))
        assert t["draft_ms_per_iter"] - t0["draft_ms_per_iter"] == pytest.approx(levels * 0.030, rel=1e-9)
        c = evaluate_design(**kw, draft=draft)
        c0 = evaluate_design(**kw, draft=draft, set_fields={"tree_kernels_per_layer": 0, "draft_step_overhead_us": 0})
        assert c["verify_ms_per_iter"] == c0["verify_ms_per_iter"]
        assert c["draft_ms_per_iter"] - c0["draft_ms_per_iter"] == pytest.approx(
            steps * 0.030 if draft == "eagle" else 0.0, abs=1e-12)


def test_a_tree_from_per_position_rates_takes_each_depths_rate():
    # rates 0.8 then 0.5 (geometric ranks), 3 nodes, depth <= 2: the candidates are 0.8 (depth 1,
    # rank 1), 0.8 x 0.5 = 0.4 and 0.8 x 0.5 x 0.5 = 0.2 (depth 2, ranks 1-2 under it) and 0.8 x 0.2 =
    # 0.16 (depth 1, rank 2): the best three give tau 1 + 0.8 + 0.4 + 0.2 = 2.4, shape 1-2
    r = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", acceptance="0.8,0.5", tree_nodes=3,
                        k=2, rank_profile="geometric")
    assert r["tau"] == pytest.approx(2.4, rel=1e-12) and r["tree_shape"] == "1-2"
