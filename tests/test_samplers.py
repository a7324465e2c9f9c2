"""dse.search.samplers: NSGA-II/III memoised per generation choose exactly what Optuna's samplers choose;
dse run's storage calls per trial, counted."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
import yaml

import dse.search.runner as ds
import dse.search.sampler_setup as sampler_setup
from dse.search.samplers import MemoNSGAIIISampler, MemoNSGAIISampler
from dse.study import load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
SPACE = {"x": optuna.distributions.FloatDistribution(0.0, 1.0),
         "n": optuna.distributions.IntDistribution(1, 64, log=True),
         "c": optuna.distributions.CategoricalDistribution(["a", "b", "c"])}

optuna.logging.set_verbosity(optuna.logging.WARNING)


def toy_run(sampler, n_trials: int, batch: int, *, reverse_tells: bool = False, seeds: int = 0):
    """Batched ask/tell on a constrained two-objective toy problem; every trial's params, state
    and generation attribute, in trial order. ``reverse_tells``: a batch is told last trial
    first (trials finishing out of order); ``seeds``: that many enqueued trials first."""
    st = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    rng = np.random.default_rng(7)
    for _ in range(seeds):
        st.enqueue_trial({"x": float(rng.random()), "n": int(rng.integers(1, 65)), "c": "a"})
    told = 0
    while told < n_trials:
        trials = [st.ask(SPACE) for _ in range(min(batch, n_trials - told))]
        for t in (reversed(trials) if reverse_tells else trials):
            p = t.params
            t.set_constraint("n_max", p["n"] - 40.0)              # n > 40 is infeasible
            st.tell(t, [p["x"] + 0.01 * p["n"], (1.0 - p["x"]) ** 2 + (p["c"] == "b")])
        told += len(trials)
    key = "NSGAIISampler:generation" if isinstance(sampler, optuna.samplers.NSGAIISampler) else \
        "NSGAIIISampler:generation"
    return [(t.params, t.state, t.system_attrs.get(key)) for t in st.get_trials()]


@pytest.mark.parametrize("batch,reverse,seeds", [(50, False, 0), (64, True, 0), (30, False, 40)])
def test_memo_nsga2_chooses_what_optuna_chooses(batch, reverse, seeds):
    """300 trials, population 50: the same params, states and generations, trial by trial, with a
    batch of one population, a batch larger than it told in reverse, and enqueued seeds first."""
    stock = toy_run(optuna.samplers.NSGAIISampler(population_size=50, seed=3), 300, batch,
                    reverse_tells=reverse, seeds=seeds)
    memo = toy_run(MemoNSGAIISampler(population_size=50, seed=3), 300, batch, reverse_tells=reverse, seeds=seeds)
    assert memo == stock
    gens = [g for _, _, g in memo if g is not None]
    assert max(gens) >= 4            # 300 trials of population 50: the children of several generations


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_memo_nsga3_chooses_what_optuna_chooses():
    stock = toy_run(optuna.samplers.NSGAIIISampler(population_size=20, seed=5), 120, 20)
    memo = toy_run(MemoNSGAIIISampler(population_size=20, seed=5), 120, 20)
    assert memo == stock


def test_a_study_resumes_across_stock_and_memo_samplers():
    """The attribute keys are the stock ones, so either sampler continues the other's study."""
    assert MemoNSGAIISampler._get_generation_key() == "NSGAIISampler:generation"
    assert MemoNSGAIISampler._get_parent_cache_key_prefix() == "NSGAIISampler:parent:"
    assert MemoNSGAIIISampler._get_generation_key() == "NSGAIIISampler:generation"


def test_a_planted_difference_is_seen():
    """The comparison can fail: another seed chooses other params."""
    a = toy_run(MemoNSGAIISampler(population_size=50, seed=3), 120, 50)
    b = toy_run(MemoNSGAIISampler(population_size=50, seed=4), 120, 50)
    assert a != b


def small_study(tmp_path, n_trials=300, batch=50):
    raw = yaml.safe_load(QUICK.read_text())
    raw["search"].update({"batch_size": batch, "n_trials": n_trials})
    raw["output"] = str(tmp_path / "quickstart.parquet")
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / "quickstart.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study(p)


@pytest.mark.parametrize("sampler", ["nsga2", "auto"])
def test_dse_run_rows_are_those_of_optuna_nsga2(tmp_path, monkeypatch, sampler):
    """dse run with the memoised sampler and with Optuna's own: the same 300 rows (population 50)."""
    memo = ds.run_study(small_study(tmp_path / "memo"), sampler=sampler, storage=":memory:", progress=False).frame

    def stock(name, seed, population):
        assert name in ("nsga2", "auto")
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    monkeypatch.setattr(sampler_setup, "_sampler", stock)
    ref = ds.run_study(small_study(tmp_path / "stock"), sampler=sampler, storage=":memory:", progress=False).frame
    cols = [c for c in ref.columns if not c.startswith("datetime")]
    assert len(memo) == 300
    pd.testing.assert_frame_equal(memo[cols], ref[cols])


class CountingStorage(optuna.storages.InMemoryStorage):
    """An in-memory storage counting every call of its public methods."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()


def _counted(name):
    orig = getattr(optuna.storages.InMemoryStorage, name)

    def method(self, *args, **kwargs):
        self.calls[name] += 1
        return orig(self, *args, **kwargs)
    return method


for _name in dir(optuna.storages.BaseStorage):
    if _name.startswith(("set_", "create_", "get_", "delete_")):
        setattr(CountingStorage, _name, _counted(_name))


@pytest.mark.parametrize("url", [":memory:", "shared"])
def test_storage_writes_per_trial(tmp_path, monkeypatch, url):
    """64 trials of the quickstart study (NSGA-II, population and batch 32), in memory and as a
    shared storage would see them. Writes per trial, the fewest Optuna 5's API allows:
      create_new_trial        1  (ask)
      set_trial_param         1 per active knob (suggest; 8 knobs less the inactive ones: the
                              non-null params_ cells of the results)
      set_trial_system_attr   1 + 3: NSGAIISampler:generation (the sampler's, read back by other
                              workers) and one per constraint (memory_fit_gb, buildable, power_w;
                              Trial.set_constraint takes one key)
      set_trial_state_values  1  (tell: state and values together)
      set_trial_user_attr     0  (heartbeats only when a batch outlasts 10 s on a shared storage)
    Once per run: the study (1), its user attrs dse_space, dse_study and the run's dse_run:<id> record (3;
    on a shared storage that record again with the trials it told, and its dse_worker:<id> record of the
    trials it holds, written before and after it asks each batch and once at the end: 2 x 2 + 1), and the parent
    population of generation 1 (1 study system attr): trials 0-31 are generation 0, 32-63 generation 1.
    Reads: no trial is read back for its constraints (Trial.set_constraint would read its attrs
    once per key: dse writes each key once, under Optuna's name)."""
    store = CountingStorage()
    monkeypatch.setattr(ds, "resolve_storage", lambda study, storage, out: (store, url))
    res = ds.run_study(small_study(tmp_path, n_trials=64, batch=32), sampler="nsga2", storage="x", progress=False)
    n = len(res.frame)
    assert n == 64
    active = int(res.frame[[c for c in res.frame.columns if c.startswith("params_")]].notna().to_numpy().sum())
    assert 5 * n <= active <= 8 * n        # chips, memory, peak_tflops, sram_mb, process_node always active
    c = store.calls
    assert c["create_new_trial"] == n
    assert c["set_trial_param"] == active
    assert c["set_trial_system_attr"] == 4 * n
    assert c["set_trial_state_values"] == n
    assert c["set_trial_user_attr"] == 0
    assert c["set_trial_intermediate_value"] == 0
    # a shared storage also gets this worker's own record of the trials it told (dse_run:<id>) and of the
    # trials it holds (dse_worker:<id>: before and after asking each of the 2 batches, and at the end)
    record = (1 + 2 * 2 + 1) if url == "shared" else 0
    assert (c["create_new_study"], c["set_study_user_attr"], c["set_study_system_attr"]) == (1, 3 + record, 1)
    writes = sum(v for k, v in c.items() if k.startswith(("set_", "create_")))
    assert writes == n * 6 + active + 5 + record
    assert c["get_trial_system_attrs"] == 0
    # what was written is what Optuna's set_constraint writes: FrozenTrial.constraints, in order
    stored = sorted(store.get_all_trials(store.get_study_id_from_name("quickstart")), key=lambda t: t.number)
    df = res.frame.sort_values("trial")
    assert [list(t.constraints) for t in stored] == [["memory_fit_gb", "buildable", "power_w"]] * n
    # power_w <= 1000 W: the value told is power_w - 1000 (e.g. 1250 W -> 250, 800 W -> -200)
    power = df["power_w"].to_numpy()
    told = np.array([t.constraints["power_w"] for t in stored])
    np.testing.assert_allclose(told, np.where(np.isnan(power), 1.0, power - 1000.0), rtol=0, atol=1e-9)
    assert {t.constraints["buildable"] for t in stored} <= {-1.0, 1.0}
