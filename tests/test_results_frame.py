"""dse.results.frame: feasibility at a constraint's boundary and just past it.

tpu-v4 draws 192 W (hardware_db/devices/tpu-v4.yaml, tdp_w: its process node is not in the technology
tables, so the vendor TDP stands in for the energy model): a cap of exactly 192 W is met (constraint
value 0), a cap of 191.5 W is violated by 0.5 (a violation below 1 still counts).
"""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

import dse


def _row(tmp_path, cap_w: float) -> pd.Series:
    study = {"name": "cap", "workload": {"target": "llama-3.1-8b", "prompt_tokens": 128, "output_tokens": 16},
             "space": {"target_chip": {"device": ["tpu-v4", "h200"], "chips": 1}},
             "objectives": [{"metric": "baseline_ms_per_token", "direction": "minimize"}],
             "constraints": [{"metric": "power_w", "max": cap_w}],
             "output": str(tmp_path / "cap.parquet")}
    p = tmp_path / f"cap-{cap_w}.yaml"
    p.write_text(yaml.safe_dump(study))
    res = dse.sweep(str(p), out=tmp_path / f"grid-{cap_w}", progress=False)
    return pd.read_parquet(res.out_dir).set_index("params_target_chip_device").loc["tpu-v4"]


@pytest.mark.parametrize("cap_w, feasible, violation", [(192.0, True, 0.0), (191.5, False, 0.5), (1000.0, True, 0.0)])
def test_feasible_at_the_boundary_and_not_past_it(tmp_path, cap_w, feasible, violation):
    r = _row(tmp_path, cap_w)
    assert r["power_w"] == 192.0 and bool(r["fits"]) and bool(r["buildable"])
    assert bool(r["feasible"]) is feasible
    assert r["constraint_violation"] == pytest.approx(violation, abs=1e-12)
    if not feasible:
        assert pd.isna(r["is_pareto"]) and pd.isna(r["pareto_rank"])
