"""dse.results.store: Parquet written atomically with the dse metadata, and read back the same
(dse.results.load)."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from dse.errors import DseError, RuntimeFailure
from dse.results import store
from dse.results.load import load_results
from dse.results.store import SCHEMA_VERSION


def frame():
    return pd.DataFrame({
        "study": pd.array(["s", "s", "s"], dtype="string"),
        "trial": np.array([0, 1, 2], dtype=np.int64),
        "spec_ms_per_token": [1.5, np.nan, 3.0],
        "feasible": [True, False, True],
        "is_pareto": pd.array([True, None, False], dtype="boolean"),
        "pareto_rank": pd.array([0, None, 1], dtype="Int64"),
    })


META = {"schema_version": SCHEMA_VERSION, "study": {"name": "s"}, "objectives": []}


def test_roundtrip_keeps_values_nulls_and_metadata(tmp_path):
    path = store.write_parquet(frame(), tmp_path / "a" / "r.parquet", META)
    assert path == tmp_path / "a" / "r.parquet"
    schema = pq.read_schema(path)
    assert str(schema.field("study").type) == "string"          # not large_string: readable everywhere
    assert json.loads(schema.metadata[store.META_KEY]) == META
    df = load_results(path)
    assert df["trial"].tolist() == [0, 1, 2]
    assert df["spec_ms_per_token"].iloc[0] == 1.5 and np.isnan(df["spec_ms_per_token"].iloc[1])
    assert str(df["is_pareto"].dtype) == "boolean" and df["is_pareto"].isna().tolist() == [False, True, False]
    assert str(df["pareto_rank"].dtype) == "Int64" and df["pareto_rank"].iloc[2] == 1
    assert df.attrs["dse"] == META
    assert store.read_metadata(path) == META
    only = load_results(path, columns=["trial"])
    assert list(only.columns) == ["trial"]


def test_results_are_shared_readable(tmp_path):
    umask = os.umask(0o022)
    try:
        path = store.write_parquet(frame(), tmp_path / "r.parquet", META)
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = store.write_parquet(frame(), tmp_path / "r.parquet", META)
    before = path.read_bytes()

    def broken(table, where, **kw):
        with open(where, "wb") as f:
            f.write(b"partial")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(store.pq, "write_table", broken)
    with pytest.raises(RuntimeFailure) as e:        # one line naming the file (issue 18: disk full named no path)
        store.write_parquet(frame().head(1), path, META)
    assert str(e.value) == f"{path}: cannot write it (No space left on device); nothing was written there"
    assert e.value.exit_code == 1
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.parquet"]


def test_newer_schema_is_refused_with_the_version(tmp_path):
    path = store.write_parquet(frame(), tmp_path / "r.parquet", {**META, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(DseError) as e:
        load_results(path)
    assert str(e.value) == (f"{path}: results schema_version = {SCHEMA_VERSION + 1}: this dse reads "
                            f"schema_version <= {SCHEMA_VERSION}; upgrade dse")


def test_parts_of_different_studies_are_refused(tmp_path):
    store.write_parquet(frame(), tmp_path / "d" / "part-0.parquet", META)
    store.write_parquet(frame(), tmp_path / "d" / "part-1.parquet", {**META, "study": {"name": "t"}})
    store.write_parquet(frame(), tmp_path / "d" / ".part-2.parquet.tmp", META)     # skipped: a temp file
    with pytest.raises(DseError, match="different studies"):
        load_results(tmp_path / "d")


def test_dataset_directory_concatenates_parts_in_order(tmp_path):
    store.write_parquet(frame(), tmp_path / "d" / "part-0.parquet", META)
    store.write_parquet(frame().assign(trial=[3, 4, 5]), tmp_path / "d" / "part-1.parquet", META)
    (tmp_path / "d" / "_tmp").mkdir()
    store.write_parquet(frame(), tmp_path / "d" / "_tmp" / "x.parquet", META)        # skipped: _ folder
    assert load_results(tmp_path / "d")["trial"].tolist() == [0, 1, 2, 3, 4, 5]


def test_database_fingerprint_follows_every_yaml_byte(tmp_path):
    import shutil

    from dse.catalog.database import Database, load_database
    from dse.catalog.technology import load_technology
    db = load_database()
    root = tmp_path / "db"
    shutil.copytree(db.root, root)
    a = store.database_fingerprint(Database(root), load_technology(root))
    dev = root / "devices" / "h100-sxm.yaml"
    dev.write_text(dev.read_text() + "\n# a comment\n")
    b = store.database_fingerprint(Database(root), load_technology(root))
    assert a != b and len(a) == 16


def test_to_numpy_reads_the_buffers_as_pyarrow_would():
    """dse.results.arrow.to_numpy (no pandas shim): chunks, slices (bit offsets), nulls."""
    import pyarrow as pa

    from dse.results.arrow import to_numpy
    got = to_numpy(pa.chunked_array([[1.5, None], [3.0]]))
    np.testing.assert_array_equal(got, [1.5, np.nan, 3.0])
    flags = pa.array([True, False, True, True, False, False, True, False, True]).slice(3, 5)
    assert to_numpy(flags).tolist() == [True, False, False, True, False]
    assert to_numpy(pa.array([True, None, True])).tolist() == [True, False, True]     # null -> False
    ints = to_numpy(pa.array([1, None, 3], pa.int64()))
    assert ints.dtype == np.float64 and np.isnan(ints[1]) and ints[[0, 2]].tolist() == [1.0, 3.0]
    assert to_numpy(pa.array([4, 5], pa.int32())).dtype == np.int32
    assert to_numpy(pa.chunked_array([], pa.float64())).shape == (0,)
    rng = np.random.default_rng(0)
    for typ in (pa.float64(), pa.int64(), pa.uint8(), pa.float32()):
        vals = [None if rng.random() < 0.2 else int(x) for x in rng.integers(0, 100, 50)]
        a = pa.array(vals, typ).slice(7, 31)
        want = np.array([np.nan if v is None else v for v in a.to_pylist()], dtype=np.float64)
        np.testing.assert_array_equal(to_numpy(a).astype(np.float64), want)


def test_usable_rows_feasible_then_fits_then_every_row():
    """A row is usable when feasible (null counts as False; else fits; else every row) and every
    objective is finite: the five rows below fail on nothing, a NaN, a null objective, a null
    flag and a False flag."""
    import pyarrow as pa

    from dse.results.arrow import usable_rows
    objs = [("a", "minimize"), ("b", "maximize")]
    cols = {"a": pa.array([1.0, np.nan, 1.0, 1.0, 1.0]), "b": pa.array([2, 2, None, 2, 2], pa.int64())}
    t = pa.table({**cols, "feasible": pa.array([True, True, True, None, False])})
    v, ok = usable_rows(t, objs)
    assert ok.tolist() == [True, False, False, False, False]
    np.testing.assert_array_equal(v[0], [1.0, 2.0])
    _, ok = usable_rows(pa.table({**cols, "fits": pa.array([False, True, True, True, True])}), objs)
    assert ok.tolist() == [False, False, False, True, True]
    _, ok = usable_rows(pa.table(cols), objs)
    assert ok.tolist() == [True, False, False, True, True]


def test_front_text_worked_example():
    """Short names, 4 significant digits (whole from 10^4), whole integers, '-' for null and NaN,
    right-aligned."""
    from dse.cli.text import front_text
    text = front_text({"spec_ms_per_token": [3.95312, 12345.6], "params_target_chip_memory": ["hbm4", None],
                       "params_draft_chip_sram_mb": [float("nan"), 2.0], "trial": [7, 12]})
    assert text.splitlines() == [
        "spec_ms_per_token  memory  draft.sram_mb  trial",
        "            3.953    hbm4              -      7",
        "            12346       -              2     12",
    ]
