"""A method's tree re-chosen for each design (MODEL.md section 3, "Trees"): when the user fixes
neither k nor a tree size, each of the workload's tree sizes (Workload.tree_choices: a chain, the
smaller trees and the method's published tree) is evaluated with k = auto over every row, and each
row keeps the one with the least seconds per token."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workload.spec import Workload
from .arrays import DesignBatch
from .latency import latency_metrics


def chosen_tree_metrics(batch: DesignBatch, w: Workload, k_bound: bool = True) -> dict[str, np.ndarray]:
    """latency_metrics of every row at its fastest tree size among ``w.tree_choices``:
    min over N in the choices of T_iter(N, k*(N)) / tau(N, k*(N)), k*(N) the k = auto of that
    size (speculation off where no size beats plain decoding). One pass per size over every row,
    then a row-wise select of every column: a tie keeps the earlier (smaller) size, a NaN loses
    to any number. The columns k, tree_nodes and tree_shape say what was chosen."""
    best, t_best = None, None
    for nodes in w.tree_choices:
        m = latency_metrics(batch, dataclasses.replace(w, tree_nodes=int(nodes), tree_choices=()), k_bound)
        v = np.asarray(m["spec_s_per_token"])
        if best is None:
            best, t_best = m, v
            continue
        better = (v < t_best) | (np.isnan(t_best) & ~np.isnan(v))
        if better.any():
            best = {key: np.where(better, m[key], old) for key, old in best.items()}
            t_best = np.where(better, v, t_best)
    return best
