"""The tree each published tree row was measured on, where its source says which code built it
(hardware_db/acceptance/published.csv: the rows' notes): the acceptance model converts such a row's tau
through that tree (dse.model.framework_trees), not through dse's best tree of its size.

- EAGLE-1 (rows eagle-*, specbench EAGLE; 25 nodes, depth 5): the static tree mc_sim_7b_63 of
  SafeAILab/EAGLE eagle/model/choices.py ("EAGLE-1's static tree mc_sim_7b_63: 25 drafted nodes, depth 5").
- EAGLE-2 and EAGLE-3 (rows eagle2-*, specbench EAGLE2/EAGLE3; depth 6): EAGLE-2's dynamic tree of the
  reference code (SafeAILab/EAGLE eagle/model/cnets.py topK_genrate), top_k 10, depth 5 expansions after
  the first level, total_token = the row's nodes + 1 ("top-10 expansion", "top_k 10"): SGLang's
  algorithm with steps = depth + 1 (dse.model.framework_trees).
- Medusa, Hydra (mc_sim_7b_63 of medusa_choices.py, ranks up to 10) and REST keep the best tree: the
  Medusa profile measures ranks 1-5 only (rank_profiles.yaml), so its static tree's ranks 6-10 would be
  credited nothing; REST's tree is whatever the datastore returns.
"""

from __future__ import annotations

from ..catalog.acceptance import AcceptanceRow
from ..workload.trees import EAGLE1_TREE, TreeSpec, eagle2_tree

__all__ = ["eagle2_tree", "row_tree"]


def row_tree(r: AcceptanceRow) -> TreeSpec | None:
    """The framework tree of a table row (None: dse's best tree of the row's size, or a chain)."""
    if r.tree_nodes is None:
        return None
    if r.draft_kind == "eagle" and (r.tree_nodes, r.tree_depth) == (EAGLE1_TREE.nodes, EAGLE1_TREE.depth):
        return EAGLE1_TREE
    if r.draft_kind in ("eagle2", "eagle3") and r.tree_depth == 6:
        return eagle2_tree(r.tree_nodes)
    return None
