"""dse.results.analysis: loading results files and datasets, fronts, hypervolume."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dse.results.analysis as da
from dse.errors import DseError
from dse.results import pareto

OBJECTIVES = [{"metric": "spec_ms_per_token", "direction": "minimize"},
              {"metric": "cost_usd", "direction": "minimize"}]


def meta(study="toy", **extra):
    m = {"schema_version": 5, "dse_version": "0.0.test",
         "study": {"name": study, "workload": {"target": "llama-70b", "alpha": 0.8, "k": 4},
                   "objectives": OBJECTIVES},
         "objectives": OBJECTIVES, "constraints": [{"metric": "power_w", "max": 700.0}],
         "tech_fingerprint": "abc123"}
    m.update(extra)
    return m


def table(n, start=0, seed=0, study="toy", m=None):
    """A results table as the writers produce it: explicit schema, metadata, no pandas key."""
    rng = np.random.default_rng(seed)
    lat = rng.uniform(1, 20, n)
    cost = 5e4 / lat + rng.uniform(0, 3e3, n)
    fits = rng.random(n) > 0.15
    feasible = fits & (rng.random(n) > 0.1)
    lat_col = pa.array(np.where(fits, lat, np.nan), from_pandas=True)
    now = pd.Timestamp("2026-01-01", tz="UTC")
    schema = pa.schema([
        ("study", pa.string()), ("trial", pa.int64()), ("state", pa.string()),
        ("sampler", pa.string()), ("seed", pa.int64()),
        ("params_mem_bw_tb_s", pa.float64()), ("params_draft_chip_enabled", pa.bool_()),
        ("spec_ms_per_token", pa.float64()), ("cost_usd", pa.float64()),
        ("power_w", pa.float64()), ("alpha", pa.float64()), ("k", pa.int64()),
        ("fits", pa.bool_()), ("feasible", pa.bool_()),
        ("is_pareto", pa.bool_()), ("pareto_rank", pa.int64()),
        ("datetime_start", pa.timestamp("us", tz="UTC")),
    ], metadata={b"dse": json.dumps(m or meta(study)).encode()})
    return pa.table({
        "study": [study] * n, "trial": np.arange(start, start + n), "state": ["COMPLETE"] * n,
        "sampler": ["RandomSampler"] * n, "seed": np.zeros(n, dtype=np.int64),
        "params_mem_bw_tb_s": rng.uniform(1, 8, n),
        "params_draft_chip_enabled": rng.random(n) > 0.5,
        "spec_ms_per_token": lat_col, "cost_usd": cost, "power_w": rng.uniform(300, 900, n),
        "alpha": np.full(n, 0.8), "k": np.full(n, 4),
        "fits": fits, "feasible": feasible,
        "is_pareto": pa.array([None] * n, pa.bool_()),
        "pareto_rank": pa.array([None] * n, pa.int64()),
        "datetime_start": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
    }, schema=schema)


@pytest.fixture
def one_file(tmp_path):
    path = tmp_path / "results.parquet"
    pq.write_table(table(200), path)
    return path


@pytest.fixture
def dataset_dir(tmp_path):
    root = tmp_path / "study"
    (root / "run=a").mkdir(parents=True)
    pq.write_table(table(120, 0, seed=1), root / "run=a" / "part-0-0.parquet")
    pq.write_table(table(80, 120, seed=2), root / "part-1-0.parquet")
    (root / "_part-tmp.parquet").write_bytes(b"half-written")   # temp files: skipped
    (root / ".hidden.parquet").write_bytes(b"junk")
    (root / "_staging").mkdir()
    pq.write_table(table(5, 999, study="other"), root / "_staging" / "part-9.parquet")
    return root


def test_load_file_attrs_and_dtypes(one_file):
    df = da.load_results(one_file)
    assert len(df) == 200
    assert df.attrs["dse"]["study"]["name"] == "toy"
    assert df.attrs["dse"]["objectives"] == OBJECTIVES
    assert df["trial"].dtype == np.int64
    assert df["is_pareto"].dtype == "boolean" and df["pareto_rank"].dtype == "Int64"
    assert str(df["datetime_start"].dt.tz) == "UTC"
    assert df["spec_ms_per_token"].isna().any()       # latencies null where it does not fit


def test_load_dataset_skips_temp_files(dataset_dir):
    df = da.load_results(dataset_dir)
    assert len(df) == 200
    assert sorted(df["trial"]) == list(range(200))
    assert set(df["study"]) == {"toy"}
    assert df.attrs["dse"]["tech_fingerprint"] == "abc123"
    sub = da.load_results(dataset_dir, columns=["trial", "cost_usd"])
    assert list(sub.columns) == ["trial", "cost_usd"] and sub.attrs["dse"]


def test_load_errors(tmp_path, dataset_dir):
    with pytest.raises(DseError, match="does not exist"):
        da.load_results(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DseError, match="no \\*.parquet"):
        da.load_results(tmp_path / "empty")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(DseError, match="not a readable Parquet"):
        da.load_results(junk)
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), plain)
    with pytest.raises(DseError, match="not dse results: the Parquet file carries no dse metadata"):
        da.load_results(plain)
    pq.write_table(table(5, 500, study="other"), dataset_dir / "part-2-0.parquet")
    with pytest.raises(DseError, match="different studies"):
        da.load_results(dataset_dir)
    with pytest.raises(DseError, match="no column"):
        da.load_results(dataset_dir / "run=a", columns=["zz"])


def test_newer_schema_version_refused(tmp_path):
    path = tmp_path / "r.parquet"
    pq.write_table(table(3, m=meta(schema_version=7)), path)
    with pytest.raises(DseError, match="schema_version"):
        da.load_results(path)


def test_objectives_of(one_file):
    df = da.load_results(one_file)
    study = [("spec_ms_per_token", "minimize"), ("cost_usd", "minimize")]
    assert da.objectives_of(df) == study
    assert da.objectives_of(df, ["spec_ms_per_token:min", "power_w:max"]) == [
        ("spec_ms_per_token", "minimize"), ("power_w", "maximize")]
    assert da.objectives_of(df, [("cost_usd", "maximize")]) == [("cost_usd", "maximize")]
    assert da.objectives_of(df, "cost_usd") == [("cost_usd", "minimize")]   # study direction
    with pytest.raises(DseError, match="'latency_ms' is not a column.*cost_usd"):
        da.objectives_of(df, ["latency_ms:min"])
    with pytest.raises(DseError, match="direction"):
        da.objectives_of(df, ["cost_usd:up"])
    with pytest.raises(DseError, match="not numeric"):
        da.objectives_of(df, ["study:min"])
    with pytest.raises(DseError, match="no objectives"):
        da.objectives_of(pd.DataFrame({"a": [1.0]}))


def test_front_matches_pareto_mask(one_file):
    df = da.load_results(one_file)
    f = da.front(df)
    vals = df[["spec_ms_per_token", "cost_usd"]].to_numpy()
    expect = pareto.pareto_mask(vals, ["minimize", "minimize"], df["feasible"].to_numpy())
    assert set(f.index) == set(df.index[expect])
    assert f["feasible"].all()
    assert f["spec_ms_per_token"].is_monotonic_increasing
    assert f.attrs["dse"]["study"]["name"] == "toy"
    # where= filters first; maximised objective sorts descending
    g = da.front(df, ["spec_ms_per_token:min", "power_w:max"], where="power_w <= 700")
    assert (g["power_w"] <= 700).all() and g["spec_ms_per_token"].is_monotonic_increasing
    with pytest.raises(DseError, match="where"):
        da.front(df, where="no_such_column > 1")


def test_front_feasibility_fallbacks():
    df = pd.DataFrame({"a": [1.0, 0.0, 2.0], "b": [1.0, 0.0, 0.5], "fits": [True, False, True]})
    assert list(da.front(df, ["a:min", "b:min"]).index) == [0, 2]
    assert list(da.front(df.drop(columns="fits"), ["a:min", "b:min"]).index) == [1]


def test_ranks(one_file):
    df = da.load_results(one_file)
    r = da.ranks(df)
    assert r.dtype == "Int64" and (r.index == df.index).all()
    assert r[~df["feasible"]].isna().all()
    assert set(df.index[r == 0]) == set(da.front(df).index)


def test_hypervolume_and_compare(dataset_dir):
    df = da.load_results(dataset_dir)
    ref = da.hypervolume_reference(df)
    assert set(ref) == {"spec_ms_per_token", "cost_usd"}
    hv = da.hypervolume(df)
    assert hv > 0
    assert da.hypervolume(df, reference=ref) == hv
    assert da.hypervolume(df, reference=list(ref.values())) == hv
    assert da.hypervolume(da.front(df), reference=ref) == pytest.approx(hv)
    on = df[df["params_draft_chip_enabled"]]
    off = df[~df["params_draft_chip_enabled"]]
    c = da.compare_fronts(on, off)
    assert c["reference"] == pytest.approx(ref)        # union of the two = the whole set
    assert c["hv_union"] == pytest.approx(hv)
    assert max(c["hv_a"], c["hv_b"]) <= c["hv_union"] <= c["hv_a"] + c["hv_b"]
    assert c["hv_only_a"] == pytest.approx(c["hv_union"] - c["hv_b"])
    with pytest.raises(DseError, match="reference"):
        da.hypervolume(df, reference=[1.0])


def test_hypervolume_history(dataset_dir):
    df = da.load_results(dataset_dir).sample(frac=1.0, random_state=0)   # order must not matter
    h = da.hypervolume_history(df)
    assert list(h.columns) == ["trial", "n_rows", "n_designs", "n_feasible", "front_size", "hypervolume"]
    assert len(h) == 200 and h["trial"].tolist() == list(range(200))
    assert h["hypervolume"].is_monotonic_increasing
    assert h["hypervolume"].iloc[-1] == pytest.approx(da.hypervolume(df))
    # a prefix's value equals the hypervolume of that prefix alone, same reference
    ref = h.attrs["reference"]
    first = df[df["trial"] < 50]
    assert h.loc[49, "hypervolume"] == pytest.approx(da.hypervolume(first, reference=ref))
    short = da.hypervolume_history(df, max_points=10)
    assert len(short) == 10 and short["n_designs"].iloc[-1] == 200
    assert short["hypervolume"].iloc[-1] == pytest.approx(h["hypervolume"].iloc[-1])


@pytest.mark.parametrize("version, says", [
    (1, "schema_version 1: written by a dse whose cost_usd of known parts was their street price"),
    (2, "schema_version 2: written before power_w of known parts"),   # the vendor TDP in power_w
    (3, "schema_version 3: written by an older model \\(no overhead_ms_per_token"),   # free TP past a domain
    (4, "schema_version 4: written before pipeline stages and SRAM layer regions"),
    (3, "trees from alpha at the geometric rank profile"),   # and no rank_profile column (issue 17, trees)
    (3, "memory_required_gb then included the runtime reserve"),   # and no energy (issue 17, energy)
    (3, "; no acceptance band and its source: tau_low"),     # no tau_low, ..., acceptance_source
])
def test_old_schema_version_read_with_a_warning(tmp_path, version, says):
    """Results of an older schema still load, with a message that says what changed since."""
    path = tmp_path / "r.parquet"
    pq.write_table(table(3, m=meta(schema_version=version)), path)
    with pytest.warns(UserWarning, match=says):
        df = da.load_results(path)
    assert len(df) == 3


def test_old_schema_dataset_warns_once_not_per_part(tmp_path):
    """A dataset of old parts gives one warning naming how many parts, not one per part file."""
    import warnings
    d = tmp_path / "ds"
    d.mkdir()
    for i in range(3):
        pq.write_table(table(3, start=3 * i, m=meta(schema_version=2)), d / f"part-{i}.parquet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = da.load_results(d)
    msgs = [str(w.message) for w in caught if "schema_version" in str(w.message)]
    assert len(df) == 9 and len(msgs) == 1 and "(3 of 3 part files): results schema_version 2" in msgs[0]
