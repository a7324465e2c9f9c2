"""Sampler auto: a front found in numpy (dse.presearch) seeds the Optuna study (issue 11, item 3)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dse.pareto import hypervolume, pareto_mask
from dse.presearch import mutate, sample_knob, thin
from dse.search import find_seeds, run_study, seed_count
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


def test_thin_drops_the_least_hypervolume_first():
    """Front (1,4) (2,3) (3,2) (4,1): reference = nadir + 10% of the range 3 = (4.3, 4.3).
    Contributions: (1,4): 1 x 0.3 = 0.3; (2,3): 1 x 1 = 1; (3,2): 1; (4,1): 0.3 x 1 = 0.3; the
    first of the ties goes. Then (2,3): 1 x 1.3 = 1.3, (3,2): 1 x 1 = 1, (4,1): 0.3: it goes."""
    v = np.array([[1, 4], [2, 3], [3, 2], [4, 1]], dtype=float)
    assert thin(v, 3, ["minimize", "minimize"]).tolist() == [1, 2, 3]
    assert thin(v, 2, ["minimize", "minimize"]).tolist() == [1, 2]
    assert thin(v, 9, ["minimize", "minimize"]).tolist() == [0, 1, 2, 3]


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
    Parquet; they are feasible and none dominates another; every trial is a row."""
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
    assert pareto_mask(vals, ["minimize", "minimize"]).all()


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
