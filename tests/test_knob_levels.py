"""Sampler auto tries every level of every choice knob (every categorical value, both states of the
draft chip): the pre-search keeps a niche per level and the seeds hold the best design of each
level the front leaves out (dse.search.levels); benchmarks/bench_knob_levels.py checks every
shipped and benchmark study at 1,000 trials."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from dse.search.levels import key_of, level_picks, levels, tried_levels, untried
from dse.search.presearch import Archive, Budget, Pool, presearch
from dse.search.runner import run_study
from dse.study import load_study, open_study, parse_study

ROOT = Path(__file__).parent.parent
#: the studies whose model is fast (no draft trees, no eight drafts at once: 0.3-2 s each); every
#: shipped and benchmark study at 1,000 trials: benchmarks/bench_knob_levels.py
STUDIES = [ROOT / "studies" / f"{n}.yaml" for n in ("quickstart", "draft-chip", "batch-crossover")] + \
    [ROOT / "benchmarks" / "studies" / f"{n}.yaml" for n in ("four-objectives", "six-objectives", "moe-ep-runtime")]
QUICK = ROOT / "studies" / "quickstart.yaml"

TWO = {
    "name": "two-levels",
    "workload": {"target": "llama-3.1-8b", "draft": "llama-3.2-1b", "dtype": "bf16", "acceptance": {"alpha": 0.8}},
    "space": {"target_chip": {"process_node": "n3", "peak_tflops": {"low": 200, "high": 2000}, "memory": "hbm3e",
                              "memory_stacks": 4, "chips": [1, 2], "link_bw_gb_s": 900}},
    "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                   {"metric": "cost_usd", "direction": "minimize"}],
}


def test_levels_and_what_rows_try():
    """quickstart: process node 2 + memory 3 + stack height 3 + chips 4 = 12 levels; a row tries
    the levels of the knobs it holds (an inactive knob is absent), a bool apart from 0 and 1."""
    s = load_study(QUICK)
    assert len(levels(s)) == 12
    rows = [{"target_chip_process_node": "n3", "target_chip_chips": 1, "target_chip_memory": "hbm3e"}]
    left = untried(s, rows)
    assert len(left) == 9 and ("target_chip_chips", 1) not in left and ("target_chip_chips", 2) in left
    assert key_of("x", True) != key_of("x", 1) and key_of("x", np.int64(8)) == key_of("x", 8)
    assert tried_levels([{"a": True, "b": 2}]) == {key_of("a", True), key_of("b", 2)}


def test_the_best_design_of_a_level_by_hand():
    """Front (archive) [1, 10] and [10, 1], both on one chip; the two-chip niche holds [2, 12],
    [6, 6] and [12, 2]. Normalised over the front (0 at 1, 1 at 10: z = (v - 1) / 9) their
    largest coordinates are 11/9, 5/9 and 11/9: [6, 6] is the two-chip level's best compromise.
    Chips 1 is tried by the chosen designs already, so only chips 2 gets a design."""
    s = parse_study(TWO, "two.yaml")
    dirs = ["minimize", "minimize"]
    one = {"target_chip_peak_tflops": np.array([500.0, 900.0]), "target_chip_chips": np.array([1, 1])}
    two = {"target_chip_peak_tflops": np.array([600.0, 700.0, 800.0]), "target_chip_chips": np.array([2, 2, 2])}
    pool = Pool(s, Archive(one, np.array([[1.0, 10.0], [10.0, 1.0]]), dirs), cap=10,
                niches={("target_chip_chips", 1): Archive(one, np.array([[1.0, 10.0], [10.0, 1.0]]), dirs),
                        ("target_chip_chips", 2): Archive(two, np.array([[2.0, 12.0], [6.0, 6.0], [12.0, 2.0]]), dirs)})
    params, values = level_picks(s, pool, {key_of("target_chip_chips", 1)})
    assert values.tolist() == [[6.0, 6.0]] and params["target_chip_peak_tflops"].tolist() == [700.0]
    params, values = level_picks(s, pool, set())            # neither tried: each level's best, in order
    assert values.tolist() == [[1.0, 10.0], [6.0, 6.0]]     # chips 1: 0 and 1 or 1 and 0, the first


CODESIGN = {
    "name": "draft-knob",
    "workload": {"target": "llama-3.1-8b", "draft": ["none", "llama-3.2-1b", "llama-3.2-3b", "eagle3"],
                 "dtype": "bf16", "task": "mix", "batch": [1, 8]},
    "space": {"target_chip": {"process_node": "n3", "peak_tflops": {"low": 200, "high": 2000, "log": True},
                              "memory": ["gddr7", "hbm3e"], "memory_stacks": {"low": 2, "high": 8}, "chips": 1},
              "draft_chip": {"enabled": [True, False], "peak_tflops": {"low": 10, "high": 200, "log": True},
                             "memory": ["lpddr5x", "sram"], "sram_mb": {"low": 0, "high": 512},
                             "link_bw_gb_s": 128}},
    "objectives": [{"metric": "spec_ms_per_token", "direction": "minimize"},
                   {"metric": "cost_usd", "direction": "minimize"},
                   {"metric": "energy_j_per_token", "direction": "minimize"}],
}


@pytest.mark.parametrize("path", STUDIES + [None], ids=lambda p: p.stem if p else "draft-knob")
def test_the_seeds_try_every_level(path):
    """A small pre-search (1,500 designs to start, 2 rounds of 500) and at most 32 seeds: every
    level is in the seeds (the draft chip on and off, each of its memories, every draft where
    the draft is a knob)."""
    study, db, tech = open_study(path if path else parse_study(CODESIGN, "draft-knob.yaml"))
    b = Budget(initial=1_500, initial_max=1_500, feasible_wanted=0, children=500, rounds=2, archive_max=500,
               keep=32, seconds=1e9)
    res = presearch(study, db, tech, seed=0, keep=32, budget=b)
    assert untried(study, res.params) == []
    assert min(24, len(res.archive)) <= len(res.params) <= 32


def test_auto_after_another_sampler_asks_for_the_levels_left(tmp_path):
    """A study of 4 random trials on a journal resumed with auto to 36: auto seeds nothing (the
    study holds trials), and its breeder asks for the best design of each level the random
    trials left out, so every level of quickstart is tried."""
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update(n_trials=4, batch_size=16, seed=3)
    raw["output"] = str(tmp_path / "r.parquet")
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    journal = str(tmp_path / "j.journal")
    first = run_study(p, sampler="random", storage=journal, progress=False).frame
    study = load_study(p)
    rows = [{k.name: r[f"params_{k.name}"] for k in study.searched} for _, r in first.iterrows()]
    assert untried(study, rows)                  # (seed 3: HBM4, 1 chip and 8 chips left out)
    df = run_study(p, n_trials=36, sampler="auto", storage=journal, progress=False).frame
    rows = [{k.name: r[f"params_{k.name}"] for k in study.searched} for _, r in df.iterrows()]
    assert len(df) == 36 and untried(study, rows) == []
