"""dse run: Parquet schema and metadata, determinism, resume without loss or duplicates, Pareto flags."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from dse.search.runner import run_study
from dse.study import load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"


def small_study(tmp_path, n_trials=96, source=QUICK, **search):
    """A shipped study with a small search budget, writing into tmp_path."""
    raw = yaml.safe_load(source.read_text())
    raw["search"].update({"batch_size": 32, **search, "n_trials": n_trials})
    raw["output"] = str(tmp_path / f"{source.stem}.parquet")
    tmp_path.mkdir(parents=True, exist_ok=True)
    p = tmp_path / f"{source.stem}.yaml"
    p.write_text(yaml.safe_dump(raw))
    return load_study(p)


def test_parquet_schema_dtypes_and_metadata(tmp_path):
    s = small_study(tmp_path)
    res = run_study(s, storage=":memory:", progress=False)
    df = pd.read_parquet(res.path)
    assert len(df) == 96
    assert df["trial"].dtype == np.int64 and df["fits"].dtype == bool
    assert str(df["study"].dtype).startswith(("string", "str"))
    assert df["params_target_chip_chips"].dtype == np.int64
    assert df["params_target_chip_peak_tflops"].dtype == np.float64
    assert str(df["datetime_start"].dtype) == "datetime64[us, UTC]"
    assert str(df["pareto_rank"].dtype) == "Int64" and str(df["is_pareto"].dtype) == "boolean"
    for col in ("spec_ms_per_token", "baseline_ms_per_token", "speedup", "k", "alpha", "tau", "cost_usd",
                "power_w", "die_area_mm2", "mem_bw_tb_s", "memory_capacity_gb", "memory_shortfall_gb", "state",
                "sampler", "seed", "draft_cost_ratio"):
        assert col in df.columns
    meta = json.loads(pq.read_schema(res.path).metadata[b"dse"])
    assert meta["schema_version"] == 6 and meta["study"]["name"] == "quickstart"
    assert meta["objectives"] == [{"metric": "spec_ms_per_token", "direction": "minimize"},
                                  {"metric": "cost_usd", "direction": "minimize"}]
    assert meta["sampler"] == "auto" and meta["seed"] == 0 and len(meta["tech_fingerprint"]) == 16
    assert (df["sampler"] == "auto").all() and (df["seed"] == 0).all()
    # designs that do not fit have a shortfall and no latency
    nofit = df[~df["fits"]]
    assert (nofit["memory_shortfall_gb"] > 0).all() and nofit["spec_ms_per_token"].isna().all()


def test_same_seed_same_rows(tmp_path):
    a = run_study(small_study(tmp_path / "a"), storage=":memory:", progress=False).frame
    b = run_study(small_study(tmp_path / "b"), storage=":memory:", progress=False).frame
    cols = [c for c in a.columns if not c.startswith("datetime")]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_resume_continues_without_loss_or_duplicates(tmp_path):
    s = small_study(tmp_path)
    journal = str(tmp_path / "q.journal")
    first = run_study(s, n_trials=64, storage=journal, progress=False)
    assert len(first.frame) == 64
    second = run_study(s, n_trials=128, storage=journal, progress=False)
    assert second.n_new == 64 and len(second.frame) == 128
    assert second.frame["trial"].is_unique
    # the first 64 trials are unchanged
    pd.testing.assert_series_equal(first.frame["params_target_chip_peak_tflops"],
                                   second.frame["params_target_chip_peak_tflops"].iloc[:64])
    again = run_study(s, n_trials=128, storage=journal, progress=False)
    assert again.n_new == 0 and len(again.frame) == 128


def test_interrupted_batch_keeps_finished_trials(tmp_path, monkeypatch):
    import dse.search.asktell as search
    s = small_study(tmp_path)
    journal = str(tmp_path / "q.journal")
    calls = {"n": 0}
    real = search.evaluate_study

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(search, "evaluate_study", flaky)
    res = run_study(s, n_trials=128, storage=journal, progress=False)
    assert res.interrupted and res.n_new == 64
    monkeypatch.setattr(search, "evaluate_study", real)
    res = run_study(s, n_trials=128, storage=journal, progress=False)
    assert len(res.frame) == 128 and res.frame["trial"].is_unique


def test_pareto_flags_match_brute_force(tmp_path):
    df = run_study(small_study(tmp_path, n_trials=160), storage=":memory:", progress=False).frame
    feas = df[df["feasible"]]
    v = feas[["spec_ms_per_token", "cost_usd"]].to_numpy()
    dominated = ((v[None, :, :] <= v[:, None, :]).all(-1) & (v[None, :, :] < v[:, None, :]).any(-1)).any(1)
    earlier_tie = np.array([(v[:i] == v[i]).all(-1).any() for i in range(len(v))])    # rows in trial order
    np.testing.assert_array_equal(feas["is_pareto"].to_numpy(bool), ~dominated & ~earlier_tie)
    np.testing.assert_array_equal(feas["pareto_rank"].to_numpy() == 0, ~dominated)
    assert df.loc[~df["feasible"], "is_pareto"].isna().all()
    assert (feas.loc[feas["is_pareto"], "pareto_rank"] == 0).all()
    # every constraint holds on the front
    assert (feas.loc[feas["is_pareto"], "power_w"] <= 1000).all()


@pytest.mark.parametrize("sampler", ["tpe", "random", "qmc", "nsga3"])
def test_other_samplers_run(tmp_path, sampler):
    res = run_study(small_study(tmp_path, n_trials=40, sampler=sampler), storage=":memory:", progress=False)
    assert len(res.frame) == 40 and (res.frame["sampler"] == sampler).all()


def test_two_workers_share_one_journal(tmp_path):
    """Two processes on one journal file: all trials kept once, the study reaches its total."""
    import subprocess
    import sys
    s = small_study(tmp_path, n_trials=256)
    journal = tmp_path / "shared.journal"
    code = ("import sys; from dse.search.runner import run_study; from dse.study import load_study; "
            f"run_study(load_study({s.path!r}), storage={str(journal)!r}, out=sys.argv[1], progress=False)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"w{i}.parquet")]) for i in range(2)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    last = run_study(s, storage=str(journal), progress=False)       # a third call only rewrites Parquet
    assert last.n_new == 0
    df = last.frame
    assert df["trial"].is_unique and 256 <= len(df) <= 256 + 32


def test_resume_with_a_changed_space_is_refused(tmp_path):
    from dse.errors import DseError
    s = small_study(tmp_path)
    journal = str(tmp_path / "q.journal")
    run_study(s, n_trials=32, storage=journal, progress=False)
    raw = yaml.safe_load(Path(s.path).read_text())
    raw["space"]["target_chip"]["chips"] = 8
    Path(s.path).write_text(yaml.safe_dump(raw))
    edited = load_study(s.path)
    # issue 21 item 7: the refusal names what changed; the results file is checked first, before the storage
    with pytest.raises(DseError) as e:
        run_study(edited, n_trials=64, storage=journal, progress=False)
    assert str(e.value) == (f"{s.output}: holds results of another study (space.target_chip.chips [1, 2, 4, 8] -> 8); "
                            "give another --out, or --force to replace it")
    with pytest.raises(DseError) as e:
        run_study(edited, n_trials=64, storage=journal, out=tmp_path / "other.parquet", progress=False)
    assert str(e.value) == (f"{journal}: study {s.name!r} was run with another workload or space: "
                            "space.target_chip.chips [1, 2, 4, 8] -> 8; resuming would mix designs. Rename the study, "
                            "give another --storage / --out, or --force to delete the stored study and start again")
    assert not (tmp_path / "other.parquet").exists()


def test_designs_without_a_link_or_bandwidth_are_infeasible(tmp_path):
    raw = yaml.safe_load(QUICK.read_text())
    raw["space"] = {"target_chip": {"device": ["m3-ultra"], "chips": [1, 2]}}    # m3-ultra: no scale-up link
    raw["workload"].update(target="llama-3.1-8b", dtype="bf16", kv_dtype="bf16")
    raw["search"].update(n_trials=8, batch_size=8, sampler="random")
    raw["constraints"] = []
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(raw))
    df = run_study(load_study(p), storage=":memory:", out=tmp_path / "m.parquet", progress=False).frame
    two = df[df["params_target_chip_chips"] == 2]
    assert len(two) and (~two["feasible"]).all() and (~two["buildable"]).all()
    one = df[df["params_target_chip_chips"] == 1]
    assert one["feasible"].all() and np.isfinite(one["spec_ms_per_token"]).all()


DRAFT = Path(__file__).parent.parent / "studies" / "draft-chip.yaml"


def _draft_study(tmp_path, n_trials=200):
    return small_study(tmp_path, n_trials, source=DRAFT, batch_size=50, sampler="nsga2")


def test_inactive_knobs_are_null_and_not_sampled(tmp_path):
    """Issue 11: draft-chip knobs are null (and not Optuna parameters) when the draft chip is off;
    stacks with SRAM-only memory too; the results columns say so."""
    import optuna
    journal = str(tmp_path / "d.journal")
    df = run_study(_draft_study(tmp_path, n_trials=100), storage=journal, progress=False).frame
    draft = [c for c in df.columns if c.startswith("params_draft_chip_") and c != "params_draft_chip_enabled"]
    assert set(draft) == {f"params_draft_chip_{k}" for k in ("peak_tflops", "memory", "memory_stacks", "sram_mb",
                                                             "link_bw_gb_s")}
    off, on = df[~df.params_draft_chip_enabled], df[df.params_draft_chip_enabled]
    assert len(off) and len(on)
    assert off[draft].isna().all().all() and off["draft_chips"].eq(0).all()
    sram = on[on.params_draft_chip_memory == "sram"]
    assert len(sram) and sram["params_draft_chip_memory_stacks"].isna().all()
    assert on.loc[on.params_draft_chip_memory != "sram", draft].notna().all().all()
    # Optuna never sampled them: the trials hold exactly the active knobs
    ost = optuna.load_study(study_name="draft-chip",
                            storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal)))
    for t in ost.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        if not t.params["draft_chip_enabled"]:
            assert set(t.params) == {"target_chip_peak_tflops", "target_chip_memory", "target_chip_memory_stacks",
                                     "target_chip_stack_height", "draft_chip_enabled"}
        elif t.params["draft_chip_memory"] == "sram":
            assert "draft_chip_memory_stacks" not in t.params


def test_one_chip_needs_no_link(tmp_path):
    """Quickstart: at one chip the link bandwidth is null (and evaluated as no link)."""
    df = run_study(small_study(tmp_path, n_trials=128), storage=":memory:", progress=False).frame
    one = df[df.params_target_chip_chips == 1]
    assert len(one) and one.params_target_chip_link_bw_gb_s.isna().all()
    many = df[df.params_target_chip_chips > 1]
    assert many.params_target_chip_link_bw_gb_s.notna().all()


def test_front_has_one_row_per_design_and_point(tmp_path):
    """No two is_pareto rows share all active knobs or all objective values; duplicate_of points
    at the first trial of the same design (brute force over the params columns)."""
    for df, objs in ((run_study(small_study(tmp_path / "q", n_trials=256), storage=":memory:", progress=False).frame,
                      ["spec_ms_per_token", "cost_usd"]),
                     (run_study(_draft_study(tmp_path / "d"), storage=":memory:", progress=False).frame,
                      ["spec_ms_per_token", "cost_usd", "power_w"])):
        knobs = [c for c in df.columns if c.startswith("params_")]
        front = df[df["is_pareto"].fillna(False).astype(bool)]
        assert len(front) > 3
        assert not front.duplicated(subset=knobs).any() and not front.duplicated(subset=objs).any()
        keys = [tuple("<null>" if pd.isna(x) else x for x in row) for row in df[knobs].itertuples(index=False)]
        first = {}
        for key, trial, dup in zip(keys, df["trial"], df["duplicate_of"]):
            want = first.setdefault(key, trial)
            assert (pd.isna(dup) and want == trial) or dup == want
        # a repeat keeps its design's rank, but never the flag
        rep = df[df["duplicate_of"].notna() & df["feasible"]]
        assert not rep["is_pareto"].fillna(False).any()


def test_dse_run_counts_designs_and_sorts_the_front(tmp_path):
    """`dse run`: one word for one thing ('designs' = distinct designs, from the file's
    duplicate_of), and the front's table sorted by the first objective."""
    from click.testing import CliRunner

    from dse.cli.commands import main
    s = small_study(tmp_path, n_trials=160, sampler="nsga2")
    r = CliRunner().invoke(main, ["run", s.path, "--storage", ":memory:", "--quiet", "--epsilon", "0"],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(s.output)
    designs = int(df["duplicate_of"].isna().sum())
    feasible = int((df["duplicate_of"].isna() & df["feasible"]).sum())
    front = int(df["is_pareto"].fillna(False).sum())
    assert designs < 160                     # plain NSGA-II repeats some designs
    lines = r.output.splitlines()
    assert lines[1].startswith(f"front: {front} designs of {feasible} feasible ({designs} designs in 160 trials); ")
    latency = [float(line.split()[0]) for line in lines[3:] if not line.startswith("same in every row")]
    assert latency == sorted(latency) and len(latency) == min(front, 25)


def test_number_ranges_and_worker_index(monkeypatch):
    from dse.search.workers import number_ranges, worker_index
    assert number_ranges([5, 0, 2, 1, 2]) == [[0, 2], [5, 5]]
    assert number_ranges([]) == []
    for name in ("DSE_WORKER", "SLURM_ARRAY_TASK_ID", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert worker_index() == 0
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert worker_index() == 3
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert worker_index() == 2 * 4 + 3                      # array task 2 of 4 srun tasks each, task 3
    monkeypatch.setenv("DSE_WORKER", "7")
    assert worker_index() == 7


def test_shared_worker_samples_with_its_own_seed_and_rows_name_it(tmp_path, monkeypatch):
    # two runs on one journal: worker 0 (the study seed, 0) then worker 1 (derive_seed(0, 1)); each
    # records the trials it told, and the export names each row's own seed
    from dse.search.runner import derive_seed, run_study
    study = small_study(tmp_path, n_trials=40)
    url = f"journal:{tmp_path / 's.journal'}"
    monkeypatch.setenv("DSE_WORKER", "0")
    a = run_study(study, n_trials=20, sampler="random", storage=url, out=tmp_path / "a.parquet", progress=False)
    monkeypatch.setenv("DSE_WORKER", "1")
    b = run_study(study, n_trials=40, sampler="random", storage=url, out=tmp_path / "b.parquet", progress=False)
    assert a.n_new == 20 and b.n_new == 20
    df = b.frame.sort_values("trial")
    assert df["seed"].tolist() == [0] * 20 + [derive_seed(0, 1)] * 20
