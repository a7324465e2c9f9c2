"""Studies search tree size (workload.tree_nodes as a knob) with per-rank acceptance, and the
results carry each design's best tree shape (issue 8)."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from dse.api import evaluate_design
from dse.errors import SpecError, SpecErrors
from dse.evaluation.designs import evaluate_study as evaluate_params
from dse.study import load_study

QUICK = Path(__file__).parent / ".." / "studies" / "quickstart.yaml"


def tree_study(tmp_path, **workload):
    raw = yaml.safe_load(QUICK.read_text())
    raw["workload"].update(target="llama-3.1-8b", draft="eagle", dtype="bf16", kv_dtype="bf16", prompt_tokens=128,
                           output_tokens=128, acceptance={"rank": [0.6, 0.2, 0.1]}, tree_nodes=[0, 8, 26, 64])
    raw["workload"].update(workload)
    raw["space"] = {"target_chip": {"device": "h100-sxm"}}
    raw["constraints"] = []
    raw["output"] = str(tmp_path / "t.parquet")
    p = tmp_path / "t.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study(p)


def test_tree_nodes_knob_evaluates_each_size_like_dse_eval(tmp_path):
    s = tree_study(tmp_path)
    assert s.knob("tree_nodes").choices == (0, 8, 26, 64) and s.acceptance.kind == "rank"
    nodes = np.array([0, 8, 26, 64])
    from dse.catalog.database import load_database
    _, m = evaluate_params(s, {"tree_nodes": nodes}, 4, load_database(), s.tech)
    for i, n in enumerate(nodes):
        one = evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="eagle", rank_acceptance="0.6,0.2,0.1",
                              tree_nodes=int(n), prompt=128, output=128)
        assert m.tau[i] == pytest.approx(one["tau"], rel=1e-12)
        assert m.tree_shape[i] == one["tree_shape"]
    assert m.tree_shape[0] == "" and m.tree_nodes[0] == 0          # 0 in the list: a chain
    assert m.tau[3] > m.tau[2] > m.tau[1] > m.tau[0]


def test_run_reports_the_best_shape(tmp_path):
    from dse.results.analysis import front_table
    from dse.search.runner import run_study
    s = tree_study(tmp_path)
    res = run_study(s, n_trials=8, storage=":memory:", progress=False)
    assert "tree_shape" in res.frame.columns and "tree_nodes" in res.frame.columns
    table = front_table(res.frame, ["spec_ms_per_token:min", "cost_usd:min"])
    assert "tree_shape" in table.columns and "params_tree_nodes" in table.columns
    best = table.iloc[0]                    # fastest design first
    assert sum(int(x) for x in best["tree_shape"].split("-")) == best["params_tree_nodes"]


@pytest.mark.parametrize("workload,field", [
    (dict(tree_nodes=[0, 2000]), "workload.tree_nodes[1]"),
    (dict(acceptance={"rank": [0.7, 0.5]}), "workload.acceptance.rank"),
    (dict(acceptance={"tau": 3.0}, k=4), "workload.tree_nodes"),
])
def test_bad_tree_study_inputs(tmp_path, workload, field):
    with pytest.raises((SpecError, SpecErrors), match=field.replace("[", r"\[").replace("]", r"\]")):
        tree_study(tmp_path, **workload)


def test_a_draft_chip_that_does_not_fit_violates_the_memory_constraint():
    # target fits with 16 GB to spare (60 GB + a 4 GB reserve of 80); the draft chip is 31.75 GB short: the
    # Optuna memory constraint is the total shortfall, +31.75, not the target's slack (-16)
    from types import SimpleNamespace

    from dse.evaluation.designs import constraint_values
    cols = {"memory_shortfall_gb": np.array([0.0, 0.0]), "draft_memory_shortfall_gb": np.array([31.75, 0.0]),
            "memory_required_gb": np.array([60.0, 60.0]), "memory_capacity_gb": np.array([80.0, 80.0]),
            "memory_reserve_gb": np.array([4.0, 4.0]),
            "fits": np.array([False, True]), "spec_ms_per_token": np.array([np.nan, 2.0]),
            "buildable": np.array([True, True])}
    c = constraint_values(cols, SimpleNamespace(constraints=()))
    assert c[0, 0] == pytest.approx(31.75) and c[1, 0] == pytest.approx(-16.0)
