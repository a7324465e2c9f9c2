"""Sampler auto after its seeds (dse.search.breeder, issue 20 item 3 and issue 21 item 5): trials bred
from the front and screened in numpy add to the front, and no trial is spent on a design the
study already holds."""

from pathlib import Path

import numpy as np
import yaml

from dse.campaign.grid import distinct_points, grid_axes
from dse.results.pareto import hypervolume
from dse.search.breeder import design_ids
from dse.search.runner import run_study
from dse.search.seeds import seed_count
from dse.study import load_study, parse_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
DRAFT = Path(__file__).parent.parent / "studies" / "draft-chip.yaml"


def study_file(tmp_path, source=QUICK, **search):
    raw = yaml.safe_load(source.read_text())
    raw["search"].update(search)
    raw["output"] = str(tmp_path / "r.parquet")
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_design_ids_see_only_active_knobs():
    """Two designs with the draft chip off are the same design whatever their draft-chip knobs
    say; on, a draft-chip knob tells them apart; a trial's parameters (inactive knobs absent)
    and the full arrays give the same identity; -0.0 and 0.0 are one value."""
    s = load_study(DRAFT)
    base = {k.name: np.array([k.choices[0] if k.choices else k.low] * 4, dtype=object) for k in s.searched}
    base["draft_chip_enabled"] = np.array([False, False, True, True], dtype=object)
    base["draft_chip_peak_tflops"] = np.array([20.0, 300.0, 20.0, 300.0], dtype=object)
    ids = design_ids(s, base, 4)
    assert ids[0] == ids[1] and ids[2] != ids[3] and ids[0] != ids[2]
    row = {k: v[0] for k, v in base.items() if not k.startswith("draft_chip_") or k == "draft_chip_enabled"}
    sparse = {k.name: np.array([row.get(k.name)], dtype=object) for k in s.searched}
    assert design_ids(s, sparse, 1)[0] == ids[0]
    zero = {**{k: v[:1] for k, v in base.items()}, "draft_chip_sram_mb": np.array([-0.0], dtype=object)}
    pos = {**{k: v[:1] for k, v in base.items()}, "draft_chip_sram_mb": np.array([0.0], dtype=object)}
    zero["draft_chip_enabled"] = pos["draft_chip_enabled"] = np.array([True], dtype=object)
    assert design_ids(s, zero, 1)[0] == design_ids(s, pos, 1)[0]


SMALL = {
    "name": "small-space",
    "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "bf16", "acceptance": {"alpha": 0.8}},
    "space": {"target_chip": {"process_node": ["n5", "n3"], "peak_tflops": [500, 1000], "memory": ["hbm3e", "hbm4"],
                              "memory_stacks": {"low": 4, "high": 6}, "chips": [1, 2], "link_bw_gb_s": 900}},
    "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                   {"metric": "cost_usd", "direction": "minimize"}],
    "search": {"sampler": "auto", "n_trials": 100, "batch_size": 16, "seed": 0},
}


def test_no_design_is_asked_twice_and_an_exhausted_space_stops(tmp_path, capsys):
    """2 x 2 x 2 x 3 x 2 = 48 distinct designs and 100 trials asked: every trial is a new design,
    and the run stops, saying why, when none is left (NSGA-II repeats designs here)."""
    raw = {**SMALL, "output": str(tmp_path / "r.parquet"), "storage": ":memory:"}
    study = parse_study(raw, str(tmp_path / "s.yaml"))
    df = run_study(study, progress=True).frame
    assert df["duplicate_of"].isna().all()
    assert len(df) == 48                                # every design of the space, once
    assert "no design the study does not hold is left to propose" in capsys.readouterr().err
    nsga = run_study(study, sampler="nsga2", out=tmp_path / "n.parquet", progress=False).frame
    assert len(nsga) == 100 and nsga["duplicate_of"].notna().sum() >= 100 - 48


def test_trials_after_the_seeds_add_to_the_front(tmp_path):
    """quickstart, 320 trials in batches of 32: 160 seeds, then 5 bred batches. The front of all
    trials holds more hypervolume than the seeds' (same reference) and some of its designs were
    bred after the seeds; every trial is a distinct design."""
    p = study_file(tmp_path, n_trials=320, batch_size=32, seed=1)
    df = run_study(p, storage=":memory:", progress=False).frame
    seeds = seed_count(320, 32)
    assert seeds == 160 and len(df) == 320 and df["duplicate_of"].isna().all()
    objs = ["spec_ms_per_token", "cost_usd"]
    feas = df[df["feasible"]]
    ref = 1.1 * feas[objs].to_numpy().max(axis=0)
    hv_all = hypervolume(feas[objs].to_numpy(), ["minimize"] * 2, ref)
    first = feas[feas["trial"] < seeds]
    hv_seeds = hypervolume(first[objs].to_numpy(), ["minimize"] * 2, ref)
    assert hv_all > hv_seeds
    assert (df.loc[df["is_pareto"].fillna(False).astype(bool), "trial"] >= seeds).sum() >= 10


def test_a_resumed_run_breeds_without_repeating(tmp_path):
    """96 trials on a journal, then the same study resumed to 192 in a new sampler (its own
    pre-search, the study's trials read back): still no design twice."""
    p = study_file(tmp_path, n_trials=96, batch_size=32, seed=0)
    journal = tmp_path / "j.journal"
    run_study(p, storage=str(journal), progress=False)
    df = run_study(p, n_trials=192, storage=str(journal), progress=False).frame
    assert len(df) == 192 and df["duplicate_of"].isna().all() and df["trial"].is_unique


def test_the_no_draft_design_is_proposed_once(tmp_path):
    """Issue 21's case: the draft a categorical knob with 'none' (k and the draft chip then act
    on nothing). With the target chip 2 x 2 designs, 'none' is 4 designs however many trials are
    asked; the 1B draft 4 chips x k 1..4 x (draft chip off, or on at 2 peaks) = 48; EAGLE-3 (a
    head on the target's chips: the draft chip acts on nothing) 4 x 4 = 16. 150 trials are asked:
    the 68 designs (the grid's distinct points) are all there, each once."""
    raw = {"name": "draft-none", "storage": ":memory:", "output": str(tmp_path / "r.parquet"),
           "workload": {"target": "llama-3.1-8b", "draft": ["none", "llama-3.2-1b", "eagle3"], "dtype": "bf16",
                        "task": "mix"},
           "space": {"k": {"low": 1, "high": 4},
                     "target_chip": {"process_node": "n3", "peak_tflops": [500, 1000], "memory": "hbm3e",
                                     "memory_stacks": [4, 6], "chips": 1},
                     "draft_chip": {"enabled": [True, False], "peak_tflops": [50, 100], "memory": "lpddr5x",
                                    "link_bw_gb_s": 128}},
           "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                          {"metric": "cost_usd", "direction": "minimize"},
                          {"metric": "energy_j_per_token", "direction": "minimize"}],
           "search": {"sampler": "auto", "n_trials": 150, "batch_size": 16, "seed": 0}}
    study = parse_study(raw, str(tmp_path / "s.yaml"))
    df = run_study(study, progress=False).frame
    assert df["duplicate_of"].isna().all()
    assert (df["params_draft"] == "none").sum() == 4
    assert (df["params_draft"] == "eagle3").sum() == 16 and len(df) == 68
    axes = grid_axes(study, 4)                          # k at 1, 2, 3, 4
    shape = tuple(v.size for _, v in axes)
    flat = np.arange(int(np.prod(shape)))
    idx = np.unravel_index(flat, shape)
    assert distinct_points(study, axes, idx, {k.name: v[i] for (k, v), i in zip(axes, idx)}, flat.size).sum() == 68
