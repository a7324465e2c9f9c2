"""Sampler auto: a front found in numpy (dse.search.presearch) seeds the Optuna study (issue 11, item 3)."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dse.results.pareto import hypervolume, pareto_mask
from dse.search.levels import untried
from dse.search.presearch import (
    Budget,
    effective_knobs,
    knob_weight,
    presearch,
    presearch_budget,
)
from dse.search.runner import run_study
from dse.search.seeds import find_seeds, seed_count
from dse.search.variation import mutate, sample_knob
from dse.study import Knob, load_study, open_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"


def small(tmp_path, n_trials, sampler, seed=0):
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update(n_trials=n_trials, batch_size=32, sampler=sampler, seed=seed)
    raw["output"] = str(tmp_path / f"{sampler}.parquet")
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / f"{sampler}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study(p)


def test_knob_weights_by_hand():
    """A range counts 1; L levels log2(L)/4 below 16, 1 from 16."""
    assert knob_weight(Knob("a", "target_chip", "peak_tflops", "float", low=1.0, high=2.0)) == 1.0
    assert knob_weight(Knob("b", "target_chip", "memory", "cat", choices=("x", "y"))) == 0.25
    assert knob_weight(Knob("c", "target_chip", "chips", "int", choices=(1, 2, 4, 8))) == 0.5
    assert knob_weight(Knob("d", "target_chip", "memory_stacks", "int", low=1, high=12)) == pytest.approx(
        np.log2(12) / 4)
    assert knob_weight(Knob("e", "target_chip", "memory_stacks", "int", low=1, high=16)) == 1.0
    assert knob_weight(Knob("f", "target_chip", "sram_mb", "float", low=0.0, high=512.0, step=128.0)) == \
        pytest.approx(np.log2(5) / 4)


def test_budget_scales_with_the_space_by_hand(tmp_path):
    """quickstart: process node (2 choices) 0.25 + peak (range) 1 + memory (3) 0.3962 + stacks
    (1..12) 0.8962 + stack height (3) 0.3962 + SRAM (range) 1 + chips (4) 0.5 + link (range) 1
    = 5.4387 knobs; 24,000 designs a knob at 1,000 trials: 130,529 = 43,509 to start (a third)
    + 20 rounds of 4,351. Three objectives: x sqrt(2); 250 trials: a quarter; a floor of 20,000."""
    s = load_study(QUICK)
    assert effective_knobs(s) == pytest.approx(5.43872, abs=1e-5)
    b = presearch_budget(s, 1000, 256)
    assert (b.initial, b.children, b.rounds, b.designs) == (43_509, 4_351, 20, 130_529)
    assert b.initial_max == 8 * 43_509 and b.feasible_wanted == 2_175 and b.archive_max == 2_000
    assert presearch_budget(s, 250, 128).designs == pytest.approx(130_529 / 4, abs=20)
    tiny = presearch_budget(s, 10, 10)                     # the floor, 20,000: 6,666 + 20 x 666
    assert (tiny.initial, tiny.children, tiny.designs) == (6_666, 666, 19_986)
    raw = yaml.safe_load(QUICK.read_text())
    raw["objectives"].append({"metric": "power_w", "direction": "minimize"})
    p = tmp_path / "three.yaml"
    p.write_text(yaml.safe_dump(raw))
    assert presearch_budget(load_study(p), 1000, 256).designs == pytest.approx(130_529 * 2 ** 0.5, abs=30)
    # k searched in 1..8 (0.75), a draft chip on or off (0.25) and its peak (1): 7.4387 knobs
    raw = yaml.safe_load(QUICK.read_text())
    raw["space"]["k"] = {"low": 1, "high": 8}
    raw["space"]["draft_chip"] = {"enabled": [True, False], "peak_tflops": {"low": 10, "high": 200, "log": True},
                                  "link_bw_gb_s": 128}
    p = tmp_path / "more.yaml"
    p.write_text(yaml.safe_dump(raw))
    more = load_study(p)
    assert effective_knobs(more) == pytest.approx(7.43872, abs=1e-5)
    assert presearch_budget(more, 1000, 256).designs == pytest.approx(24_000 * 7.43872, abs=20)


def test_a_rarely_feasible_space_gets_a_bigger_first_batch(tmp_path):
    """With a 220 W cap few quickstart designs are feasible: the first batch grows past its
    share until 400 x knobs of its designs are feasible or it is 8 times its share."""
    raw = yaml.safe_load(QUICK.read_text())
    raw["constraints"] = [{"metric": "power_w", "max": 220}]
    p = tmp_path / "tight.yaml"
    p.write_text(yaml.safe_dump(raw))
    study, db, tech = open_study(p)
    b = Budget(initial=4_000, initial_max=32_000, feasible_wanted=300, children=1_000, rounds=2,
               archive_max=500, keep=32, seconds=1e9)
    res = presearch(study, db, tech, seed=0, keep=32, budget=b)
    assert 4_000 < res.initial <= 32_000 and res.initial % 1_000 == 0        # whole parts of 1,000
    assert res.initial_feasible >= 300 or res.initial == 32_000
    assert res.evaluated == res.initial + 2 * 1_000 and len(res.params) == 32
    loose = presearch(*open_study(QUICK), seed=0, keep=32, budget=b)
    assert loose.initial == 4_000 and loose.initial_feasible >= 300          # about 12% feasible


def test_the_time_cap_stops_between_parts():
    """A work clock that reads 1, 2, 3, ... s after each part and a 2.5 s cap: the batch stops
    after its third part, no refinement round runs, and the seeds say so."""
    study, db, tech = open_study(QUICK)
    ticks = iter(range(1, 1000))
    b = Budget(initial=4_000, initial_max=4_000, feasible_wanted=0, children=1_000, rounds=5, archive_max=500,
               keep=16, seconds=2.5)
    res = presearch(study, db, tech, seed=0, keep=16, budget=b, work=lambda n: float(next(ticks)))
    assert res.timed_out and res.rounds == 0 and res.evaluated == 3_000 and len(res.params) == 16
    # the breeder then screens sqrt(3,000 / 9,000) of a round per batch: 1,000 x 0.577 -> 577
    # (floored at CHILDREN_MIN / 4 = 500); a pre-search the cap did not stop keeps its round
    assert res.breeding_budget().children == 577
    big = Budget(initial=4_000, initial_max=4_000, feasible_wanted=0, children=12_000, rounds=5, archive_max=500,
                 keep=16, seconds=2.5)
    ticks = iter(range(1, 1000))
    res = presearch(study, db, tech, seed=0, keep=16, budget=big, work=lambda n: float(next(ticks)))
    assert res.evaluated == 3_000 and res.breeding_budget().children == 2_598     # 12,000 x sqrt(3/64)
    ticks = iter([0.0] * 3 + [10.0] * 1000)       # stopped after its fourth part: 4,000 / 64,000
    res = presearch(study, db, tech, seed=0, keep=16, budget=big, work=lambda n: next(ticks))
    assert res.evaluated == 4_000 and res.breeding_budget().children == 3_000
    free = presearch(study, db, tech, seed=0, keep=16, budget=replace(b, seconds=1e9), work=lambda n: 0.0)
    assert not free.timed_out and free.breeding_budget() == free.budget


def test_the_work_clock_counts_the_models_work_not_the_machines_time():
    """WorkClock: WORK_S x (designs, rows x k priced, step_cost calls, tree tables asked for).
    By hand: one step_cost call pricing 2,000 rows and one tree table asked for, over 500 designs:
    1.29e-6 x 500 + 3.1e-7 x 2,000 + 3.3e-4 + 9.3e-4 = 0.000645 + 0.00062 + 0.00033 + 0.00093
    = 0.002525 s. And a pre-search the cap stops stops at the same design however slow the machine
    (a clock that jumps 100 s per reading changes nothing) and whether the tree tables were
    built or cached (the second run of the tree study finds them cached)."""
    from dse.model.work import COUNTS
    from dse.search.presearch import WorkClock
    w = WorkClock()
    COUNTS["steps"] += 1
    COUNTS["rows"] += 2_000
    COUNTS["tables"] += 1
    assert w.seconds(500) == pytest.approx(0.002525, rel=1e-12)
    tree = QUICK.parent / "tree-size.yaml"
    b = Budget(initial=4_000, initial_max=4_000, feasible_wanted=0, children=1_000, rounds=8, archive_max=500,
               keep=8, seconds=0.6)
    slow = iter(range(0, 100_000, 100))
    runs = [presearch(*open_study(tree), seed=3, keep=8, budget=b, clock=lambda: float(next(slow))),
            presearch(*open_study(tree), seed=3, keep=8, budget=b)]
    # of 12,000 (6,000 in 2 rounds before an EAGLE tree's first draft step, its extend over the k+1 verified
    # positions, was priced over one row of k candidates instead of one a design: fewer rows counted)
    assert runs[0].timed_out and runs[0].evaluated == 7_000 and runs[0].rounds == 3
    assert runs[0].evaluated == runs[1].evaluated and runs[0].params == runs[1].params


def test_sampling_and_mutation_stay_in_range():
    rng = np.random.default_rng(0)
    log = Knob("t", "target_chip", "peak_tflops", "float", low=100.0, high=2500.0, log=True)
    x = sample_knob(log, 20_000, rng)
    assert x.min() >= 100 and x.max() <= 2500
    # log-uniform: half the mass below the geometric mean sqrt(100 x 2500) = 500
    assert abs(np.mean(x < 500) - 0.5) < 0.02
    stepped = Knob("s", "target_chip", "sram_mb", "float", low=0.0, high=512.0, step=64.0)
    assert set(sample_knob(stepped, 2000, rng).tolist()) <= set(np.arange(0, 513, 64.0).tolist())
    study = load_study(QUICK)
    params = {k.name: sample_knob(k, 500, rng) for k in study.searched}
    kids = mutate(study, params, 0.2, rng)
    changed = np.zeros(500, dtype=bool)
    for k in study.searched:
        v = kids[k.name]
        changed |= v != params[k.name]
        if not k.choices:
            assert v.min() >= k.low and v.max() <= k.high
            if k.kind == "int":
                assert v.dtype == np.int64
        else:
            assert set(v.tolist()) <= set(k.choices)
    # every child moves at least one knob (a categorical redraw may land on the same value)
    assert changed.mean() > 0.9


def test_seed_count_by_hand():
    # half the trials, at least one batch, at most 256 designs
    assert seed_count(1000, 64) == 256 and seed_count(96, 32) == 48
    assert seed_count(40, 32) == 32 and seed_count(10, 32) == 10


def test_auto_enqueues_the_numpy_front_as_its_first_trials(tmp_path):
    """The first trials of sampler auto are presearch's seeds, told to Optuna and written to
    Parquet; they are feasible, none of the front's dominates another, and the last ones (the
    best design of each level the front leaves out, dse.search.levels) try every level the
    front's do not; every trial is a row."""
    s = small(tmp_path, 96, "auto")
    df = run_study(s, storage=":memory:", progress=False).frame
    assert len(df) == 96 and (df["sampler"] == "auto").all()
    study, db, tech = open_study(s)
    seeds = find_seeds(study, 96, 0, db, tech)
    n = len(seeds.params)
    assert n == 48
    first = df.sort_values("trial").head(n)
    for (_, row), p in zip(first.iterrows(), seeds.params):
        for k in study.searched:
            got = row[f"params_{k.name}"]
            assert (pd.isna(got) and k.name not in p) or got == p[k.name], (k.name, got, p.get(k.name))
    assert first["feasible"].all()
    vals = first[["spec_ms_per_token", "cost_usd"]].to_numpy()
    np.testing.assert_allclose(vals, seeds.values, rtol=1e-12)
    front = n - seeds.levels
    assert 0 < seeds.levels < n and pareto_mask(vals[:front], ["minimize", "minimize"]).all()
    assert untried(study, seeds.params[:front]) and untried(study, seeds.params) == []


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_beats_plain_nsga2_at_equal_trials(tmp_path, seed):
    """Same budget (192 trials), same seed: the seeded search's front has more hypervolume
    (reference: 1.1 x the nadir of both fronts together)."""
    fronts = {}
    for sampler in ("auto", "nsga2"):
        df = run_study(small(tmp_path / sampler, 192, sampler, seed), storage=":memory:", progress=False).frame
        fronts[sampler] = df.loc[df["feasible"], ["spec_ms_per_token", "cost_usd"]].to_numpy()
    both = np.concatenate(list(fronts.values()))
    ref = 1.1 * both.max(axis=0)
    hv = {k: hypervolume(v, ["minimize", "minimize"], ref) for k, v in fronts.items()}
    assert hv["auto"] > hv["nsga2"]
