"""dse.workload.spec: acceptance parsing and its descriptions, and one design evaluated two ways."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import yaml

from dse.errors import SpecError
from dse.workload.spec import AcceptanceSpec, DrafterSpec, make_acceptance, parse_k


@pytest.mark.parametrize("given, rows", [
    ("0.6,0.2,0.1", ((0.6, 0.2, 0.1),)),
    ("0.7,0.1;0.5,0.2", ((0.7, 0.1), (0.5, 0.2))),
    ([0.6, 0.2], ((0.6, 0.2),)),
    ([[0.7, 0.1], [0.5]], ((0.7, 0.1), (0.5,))),
])
def test_rank_acceptance_forms(given, rows):
    acc = make_acceptance(rank=given)
    assert acc.kind == "rank" and acc.rank == rows


@pytest.mark.parametrize("bad", ["0.7,0.4", "0.5,x", [], [[]], "1.2", [[0.5], "x"], 5])
def test_rank_acceptance_refusals(bad):
    with pytest.raises(SpecError) as e:
        make_acceptance(rank=bad, where="--", rank_name="rank-acceptance")
    assert str(e.value) == (f"--rank-acceptance = {bad!r}: expected rates per rank 'P1,P2,...' (rows per depth "
                            "separated by ';'), each in [0, 1], each row summing to <= 1")


def test_descriptions_say_which_alpha():
    assert make_acceptance(alpha=0.8).describe() == "alpha=0.8 (i.i.d. conditional per token)"
    assert make_acceptance(per_position="0.9,0.8").describe() == "alpha per position=0.9,0.8"
    assert make_acceptance(tau=3.5).describe() == "tau=3.5 (given)"
    assert make_acceptance(rank="0.7,0.1;0.5").describe() == "acceptance per rank=0.7,0.1;0.5"
    with pytest.raises(SpecError) as e:
        make_acceptance(alpha=0.8, tau=3.0, where="--")
    assert str(e.value) == ("--alpha / --acceptance / --tau / --rank_acceptance = 'several': give exactly one: alpha "
                            "(i.i.d. conditional acceptance rate), per-position rates, tau (mean tokens per target "
                            "pass) or per-rank acceptance")


@pytest.mark.parametrize("k, value", [("auto", 0), (" AUTO ", 0), (4, 4), ("4", 4), (32, 32)])
def test_parse_k(k, value):
    assert parse_k(k, DrafterSpec(kind="eagle", label="eagle")) == value
    assert parse_k(k, DrafterSpec(kind="none", label="none")) == 0      # no drafter: no k


@pytest.mark.parametrize("k", [0, 33, 2.5, "x", True, None])
def test_parse_k_refusals(k):
    with pytest.raises(SpecError, match=r"expected 'auto' or an integer in \[1, 32\]"):
        parse_k(k, DrafterSpec(kind="eagle", label="eagle"))


def test_a_study_row_equals_dse_eval_of_the_same_design(tmp_path):
    """A known part with its own fixed costs, fp8 weights and a compute-bound 2,048-token prefill:
    the study path (evaluation.build_designs) and the dse eval path (api.hardware_arrays) must
    give the same numbers in every shared column."""
    import dse
    from dse.catalog.database import Database, load_database
    root = tmp_path / "db"
    shutil.copytree(load_database().root, root)
    dev = root / "devices" / "h100-sxm.yaml"
    dev.write_text(dev.read_text() + "kernel_launch_us: 20\nstep_overhead_us: 100\n")
    db = Database(root)
    study = {"name": "x", "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "fp8",
                                       "batch": 4, "prompt_tokens": 2048, "output_tokens": 64,
                                       "acceptance": {"alpha": 0.7}, "k": 3},
             "space": {"target_chip": {"device": ["h100-sxm", "h200"], "chips": 1}},
             "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"}],
             "output": str(tmp_path / "x.parquet")}
    p = tmp_path / "x.yaml"
    p.write_text(yaml.safe_dump(study))
    res = dse.sweep(dse.load_study(p, db=db), out=tmp_path / "grid", progress=False, db=db)
    import pandas as pd
    row = pd.read_parquet(res.out_dir).set_index("params_target_chip_device").loc["h100-sxm"]
    one = dse.evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", dtype="fp8", batch=4,
                              prompt=2048, output=64, alpha=0.7, k=3, db=db)
    plain = dse.evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", dtype="fp8", batch=4,
                                prompt=2048, output=64, alpha=0.7, k=3)
    assert one["baseline_ms_per_token"] > plain["baseline_ms_per_token"]     # the device's own fixed costs count
    assert one["ttft_ms"] == pytest.approx(plain["ttft_ms"], rel=0.05)       # prefill: compute, at the fp8 rate
    for col, v in one.items():
        if col in row.index and isinstance(v, (int, float)) and not isinstance(v, bool):
            assert (math.isnan(row[col]) if v is None else row[col] == pytest.approx(v, rel=1e-12)), col
    bf16 = dse.evaluate_design(hw="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", dtype="bf16", batch=4,
                               prompt=2048, output=64, alpha=0.7, k=3, db=db)
    assert not np.isclose(bf16["ttft_ms"], row["ttft_ms"], rtol=0.05)         # the dtype reaches the device table
    assert AcceptanceSpec(kind="alpha", alpha=0.7).describe() == "alpha=0.7 (i.i.d. conditional per token)"
