"""The sweep's writer (issue 10): the same rows as the DataFrame path, the Pareto and front side
files, plain readers (pandas, polars, DuckDB), the part-by-part front, and `dse pareto` without
pandas."""

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import dse.results.analysis as da
from dse.campaign.grid import distinct_points, grid_axes, sweep
from dse.cli.commands import main
from dse.evaluation.designs import evaluate_study
from dse.results.frame import results_frame
from dse.results.front import dataset_front
from dse.results.pareto import front_flags
from dse.results.side_files import FRONT_FILE, PARETO_FILE
from dse.study import load_study, open_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
#: 3 points a knob: 5,832 grid points, 4,860 distinct designs (tests/test_sweep.py), 375 of them
#: feasible; 500-row chunks give 12 parts, some without a feasible row
POINTS, CHUNK = 3, 500


@pytest.fixture(scope="module")
def study():
    return load_study(QUICK)


@pytest.fixture(scope="module")
def in_memory(study):
    """The whole grid the pre-change way: one evaluate_study + results_frame (flags over all rows)."""
    return _whole_grid(study, POINTS)


@pytest.fixture(scope="module")
def swept(study, tmp_path_factory):
    out = tmp_path_factory.mktemp("io") / "sw"
    sweep(study, points=POINTS, out=out, chunk_size=CHUNK, progress=False)
    return out


def _same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Every column but the timestamps, dtype and value; floats exactly (they are stored as float64)."""
    cols = [c for c in want.columns if not c.startswith("datetime_")]
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(got[cols].reset_index(drop=True), want[cols].reset_index(drop=True),
                                  check_exact=True)


def test_sweep_writes_the_rows_of_the_dataframe_path(swept, in_memory):
    """The new writer (Arrow from numpy, 12 parts, flags from _pareto.parquet) against one
    results_frame over the whole grid, column by column."""
    df = da.load_results(swept)
    assert len(df) == 4860 and int(df["feasible"].sum()) == 375
    assert len(list(swept.glob("part-*.parquet"))) == 12       # ceil(5,832 / 500) = 12 chunks
    _same_rows(df, in_memory)


def test_side_file_flags_are_front_flags_of_the_concatenation(swept, study):
    df = pd.read_parquet(swept)                # the raw parts: no flags
    assert df["is_pareto"].isna().all() and df["pareto_rank"].isna().all()
    v = df[[o.metric for o in study.objectives]].to_numpy(np.float64)
    mask, ranks = front_flags(v, [o.direction for o in study.objectives], df["feasible"].to_numpy(bool))
    side = pq.read_table(swept / PARETO_FILE)
    assert side.num_rows == (ranks >= 0).sum() == 375
    # some parts have no feasible row: the side file maps parts by name, not by position
    assert side["part"].unique().to_pylist() != sorted(p.name for p in swept.glob("part-*.parquet"))
    got = da.load_results(swept, columns=["trial", "is_pareto", "pareto_rank"])
    np.testing.assert_array_equal(got["pareto_rank"].fillna(-1).to_numpy(np.int64), ranks)
    np.testing.assert_array_equal(got["is_pareto"].fillna(False).to_numpy(bool), mask)
    assert got["is_pareto"].isna().sum() == 4860 - 375


def _flags_of_the_concatenation(df: pd.DataFrame) -> None:
    """is_pareto / pareto_rank == front_flags over the rows in load order (file order)."""
    v = df[["spec_ms_per_token", "cost_usd"]].to_numpy(np.float64)
    mask, ranks = front_flags(v, ["minimize", "minimize"], df["feasible"].to_numpy(bool))
    np.testing.assert_array_equal(df["pareto_rank"].fillna(-1).to_numpy(np.int64), ranks)
    np.testing.assert_array_equal(df["is_pareto"].fillna(False).to_numpy(bool), mask)
    assert (ranks == 0).sum() >= 2


def test_shards_resume_and_stale_side_file(study, tmp_path, in_memory, swept):
    """Three shards: the last to finish writes the global flags; a re-run leaves them; a side file
    that names other parts is ignored and the flags recomputed from the objective columns."""
    out = tmp_path / "sh"
    for i in range(3):
        sweep(study, points=POINTS, shard=(i, 3), out=out, chunk_size=CHUNK, progress=False)
        assert (out / PARETO_FILE).is_file() == (out / FRONT_FILE).is_file() == (i == 2)
    df = da.load_results(out)
    _flags_of_the_concatenation(df)
    # the last shard took the front rows of the other shards' parts from their files
    assert dataset_front(out).table.equals(dataset_front(swept).table)
    rank0 = np.flatnonzero(df["pareto_rank"].fillna(-1).to_numpy(np.int64) == 0)
    assert pq.read_table(out / FRONT_FILE, columns=["_row"])["_row"].to_pylist() == rank0.tolist()
    # rows come shard by shard: in trial order they are the in-memory rows (is_pareto marks the
    # first of equal points in row order, so it is compared above, not here)
    rest = [c for c in in_memory.columns if c != "is_pareto"]
    _same_rows(df.sort_values("trial")[rest], in_memory[rest])
    before = (out / PARETO_FILE).stat().st_mtime_ns
    res = sweep(study, points=POINTS, shard=(1, 3), out=out, chunk_size=CHUNK, progress=False)
    assert res.rows_written == 0 and (out / PARETO_FILE).stat().st_mtime_ns == before
    (out / PARETO_FILE).unlink()
    pd.testing.assert_frame_equal(da.load_results(out), df)          # recomputed from the columns
    sweep(study, points=POINTS, shard=(0, 3), out=out, chunk_size=CHUNK, progress=False)   # writes it again
    assert (out / PARETO_FILE).is_file()
    sorted(out.glob("part-*.parquet"))[0].unlink()      # the side file now names a missing part
    with pytest.warns(UserWarning, match="missing"):
        df = da.load_results(out)
    assert len(df) == 4860 - 416                        # chunk 0: 416 designs of its 500 grid points
    _flags_of_the_concatenation(df)


def test_plain_readers(swept, in_memory):
    """pandas (pyarrow), polars and DuckDB read the parts: the same rows and numbers."""
    raw = pd.read_parquet(swept)
    assert len(raw) == 4860 and raw["cost_usd"].sum() == pytest.approx(in_memory["cost_usd"].sum(), rel=1e-12)
    pl = pytest.importorskip("polars")
    p = pl.read_parquet(str(swept / "part-*.parquet"))
    assert p.height == 4860 and p["cost_usd"].sum() == pytest.approx(raw["cost_usd"].sum(), rel=1e-12)
    assert p["params_target_chip_memory"].to_list() == raw["params_target_chip_memory"].tolist()
    duckdb = pytest.importorskip("duckdb")
    n, cost, fe = duckdb.sql(f"select count(*), sum(cost_usd), count_if(feasible) "
                             f"from read_parquet('{swept}/part-*.parquet')").fetchall()[0]
    assert (n, fe) == (4860, 375) and cost == pytest.approx(raw["cost_usd"].sum(), rel=1e-12)


@pytest.mark.parametrize("kw", [{}, {"where": "params_target_chip_chips >= 2"},
                                {"objectives": ["tokens_per_s_per_w:max", "cost_usd:min"]},
                                {"distinct": False}])
def test_front_of_is_the_front_of_the_whole(swept, kw):
    """Front of part fronts == front of all rows loaded at once (same rows, same order)."""
    whole = da.load_results(swept)
    want = da.front(whole, kw.get("objectives"), where=kw.get("where"), distinct=kw.get("distinct", True))
    got = da.front_of(swept, kw.get("objectives"), where=kw.get("where"), distinct=kw.get("distinct", True))
    assert len(got) >= 2
    # the totals are those of the rows `where` keeps (issue 21: a filtered view filters its header too)
    assert got.attrs["counts"] == da.counts(whole, kw.get("objectives"), where=kw.get("where"))
    assert got.attrs["rows"] == (4860 if "where" not in kw else len(whole.query(kw["where"])))
    cols = [c for c in want.columns if c not in ("is_pareto", "pareto_rank")]
    pd.testing.assert_frame_equal(got[cols], want[cols], check_exact=True)


def test_front_of_results_without_a_duplicate_of_column(swept, tmp_path):
    """Results written by other tools (or older dse) may lack duplicate_of: every row is then a
    design, and the front is still the front of the whole (it used to fail reading the column)."""
    import shutil
    old = tmp_path / "old"
    old.mkdir()
    for f in sorted(swept.glob("part-*.parquet")):
        t = pq.read_table(f)
        pq.write_table(t.drop_columns(["duplicate_of"]), old / f.name)
    shutil.copy(swept / "_manifest.json", old / "_manifest.json")
    whole = da.load_results(old)
    got = da.front_of(old)
    assert got.attrs["designs"] == got.attrs["rows"] == 4860
    assert got["trial"].tolist() == da.front(whole)["trial"].tolist()


def test_front_file_holds_the_full_rows_of_every_rank_0_row(swept):
    """_front.parquet: the rows whose pareto_rank is 0 in the side file (ties included), every
    column as load_results gives it, and their row numbers in the dataset."""
    whole = da.load_results(swept)
    rank0 = np.flatnonzero(whole["pareto_rank"].fillna(-1).to_numpy(np.int64) == 0)
    front = pq.read_table(swept / FRONT_FILE)
    assert front["_row"].to_pylist() == rank0.tolist() and len(rank0) >= 2
    got = front.drop_columns(["_row"]).to_pandas()
    cols = [c for c in whole.columns if c not in ("is_pareto", "pareto_rank")]
    want = pq.read_table(swept, columns=cols).to_pandas().iloc[rank0].reset_index(drop=True)
    pd.testing.assert_frame_equal(got[cols], want, check_exact=True)


def _copy(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


def test_dataset_front_the_same_with_or_without_the_front_file(swept, tmp_path):
    """The front from _front.parquet equals the one computed from the parts (file removed), and a
    front file written for other parts (a part since removed) is not used."""
    want = dataset_front(swept)
    assert want.points == len(da.front(da.load_results(swept))) and want.n_rows == want.n_designs == 4860
    bare = _copy(swept, tmp_path / "bare")
    (bare / FRONT_FILE).unlink()
    got = dataset_front(bare)
    assert got.table.equals(want.table) and got.rows.tolist() == want.rows.tolist()
    assert (got.points, got.n_rows, got.n_designs) == (want.points, 4860, 4860)
    top = dataset_front(swept, top=2)
    assert top.table.equals(want.table.slice(0, 2)) and top.points == want.points
    stale = _copy(swept, tmp_path / "stale")
    sorted(stale.glob("part-*.parquet"))[0].unlink()
    with pytest.warns(UserWarning, match="missing"):
        got = dataset_front(stale)
        whole = da.load_results(stale)
    assert got.n_rows == 4860 - 416 == len(whole)
    assert pq.read_table(stale / FRONT_FILE).num_rows > 0         # still there, but names 12 parts
    assert got.table["trial"].to_pylist() == da.front(whole)["trial"].tolist()


def test_a_part_without_a_column_reads_as_nulls(swept, tmp_path):
    """Parts of an older schema may lack a column: those rows read as null (and the others as
    written); a column no part has is an error naming it."""
    from dse.errors import DseError
    old = _copy(swept, tmp_path / "old")
    first = sorted(old.glob("part-*.parquet"))[0]
    pq.write_table(pq.read_table(first).drop_columns(["alpha"]), first)
    whole = da.load_results(swept, columns=["trial", "alpha"])
    got = da.load_results(old, columns=["trial", "alpha"])
    n = pq.read_metadata(first).num_rows
    assert got["alpha"].iloc[:n].isna().all() and n == 416
    np.testing.assert_array_equal(got["alpha"].iloc[n:].to_numpy(), whole["alpha"].iloc[n:].to_numpy())
    assert got["trial"].tolist() == whole["trial"].tolist()
    with pytest.raises(DseError, match="no column"):
        da.open_results(old).read(["no_such_column"])


def test_cli_pareto_text_without_pandas_is_the_pandas_table(swept):
    """`dse pareto DIR` (no pandas, the front file) prints what the pandas path (--where) prints for
    the same rows: header and table, character for character."""
    runner = CliRunner()
    for extra in ([], ["--top", "3"], ["--objective", "tokens_per_s_per_w:max", "--objective", "cost_usd:min"]):
        fast = runner.invoke(main, ["pareto", str(swept), *extra])
        slow = runner.invoke(main, ["pareto", str(swept), *extra, "--where", "trial >= 0"])
        assert fast.exit_code == slow.exit_code == 0, fast.output + slow.output
        # the same header (the filtered one names its filter, and wraps at another word) and table
        assert fast.output.split("\n", 2)[2] == slow.output.split("\n", 2)[2]
        assert fast.output.split() == slow.output.replace(" where trial >= 0", "").split()
    lines = fast.output.splitlines()
    head = next(i for i, line in enumerate(lines) if not line.startswith(("front:", "  ")))
    assert lines[head].split()[:2] == ["tokens_per_s_per_w", "cost_usd"] and len(lines) >= head + 3


def test_cli_pareto_reads_the_front_only(swept):
    r = CliRunner().invoke(main, ["pareto", str(swept), "--csv"])
    assert r.exit_code == 0, r.output
    want = da.front_table(da.front(da.load_results(swept)))
    assert r.output == want.to_csv(index=False)


def test_sweep_parts_carry_the_dataframe_paths_schema(swept, in_memory):
    """The sweep writes without pandas; its Arrow types and `pandas` metadata (dtypes a pandas
    reader gets: string, Int64, boolean, datetime64[us, UTC]) are those of the DataFrame path."""
    import json

    from dse.results.store import arrow_table
    part = pq.read_schema(sorted(swept.glob("part-*.parquet"))[0])
    ref = arrow_table(in_memory, {}).schema
    assert [(f.name, f.type) for f in part] == [(f.name, f.type) for f in ref]
    got, want = (json.loads(s.metadata[b"pandas"]) for s in (part, ref))
    assert got["columns"] == want["columns"] and got["index_columns"] == want["index_columns"] == []
    seed = next(c for c in got["columns"] if c["name"] == "seed")
    assert seed["numpy_type"] == "Int64"        # an all-null int column still loads as Int64


@pytest.mark.parametrize("cmd, banned", [
    ("eval", ("pandas", "pyarrow", "optuna", "matplotlib", "moocore", "importlib.metadata")),
    # pyarrow imports pandas on its first conversion of a Python value (its pandas shim): the sweep builds
    # its Arrow arrays from numpy buffers (dse.results.arrow) and never converts one
    ("sweep", ("pandas", "optuna", "matplotlib", "dask", "scipy", "sklearn", "dse.search.runner", "dse.report")),
    # the text front reads the sweep's front file with pyarrow alone (pyarrow.dataset costs 0.2 s)
    ("pareto", ("pandas", "pyarrow.dataset", "optuna", "matplotlib", "yaml", "dse.model", "dse.catalog"))])
def test_start_up_imports_only_what_the_command_uses(cmd, banned, swept, tmp_path):
    """Issue 10, start-up: `dse eval`, `dse sweep` and `dse pareto` import nothing they do not use."""
    import subprocess
    import sys
    args = {"sweep": ["sweep", str(QUICK), "--points", "2", "--out", str(tmp_path / "d"), "--quiet"],
            "eval": ["eval", "--hw", "h200", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.8"],
            "pareto": ["pareto", str(swept), "--top", "3"]}
    code = ("import sys; from dse.cli import main; sys.argv = ['dse'] + sys.argv[1:]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            f"print(sorted(m for m in {banned!r} if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code, *args[cmd]], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_yaml_c_loader_reads_what_the_python_loader_reads(tmp_path, monkeypatch):
    """Start-up: YAML through libyaml's CSafeLoader when PyYAML has it; every database file loads
    the same either way, and a malformed file is reported at the same place (line 3, column 1: the
    end of the stream inside the unclosed flow sequence; libyaml words the problem differently)."""
    import yaml

    from dse.catalog import yamlio
    from dse.errors import SpecError
    assert yamlio.SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    files = sorted((Path(__file__).parent.parent / "hardware_db").rglob("*.yaml"))
    assert len(files) > 10
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\nb: [1, 2\n")
    seen = []
    for loader in {yamlio.SAFE_LOADER, yaml.SafeLoader}:
        monkeypatch.setattr(yamlio, "SAFE_LOADER", loader)
        with pytest.raises(SpecError) as e:
            yamlio.load_yaml(bad)
        assert "malformed YAML (line 3, column 1)" in str(e.value)
        seen.append([yamlio.load_yaml(f) for f in files])
    assert all(s == seen[0] for s in seen)


def _whole_grid(study, points):
    """Every distinct design of the grid at ``points``, evaluated in one batch: the pre-change way."""
    axes = grid_axes(study, points)
    shape = tuple(v.size for _, v in axes)
    flat = np.arange(int(np.prod(shape)), dtype=np.int64)
    idx = np.unravel_index(flat, shape)
    params = {k.name: vals[i] for (k, vals), i in zip(axes, idx)}
    keep = distinct_points(study, axes, idx, params, flat.size)
    flat, params = flat[keep], {n: v[keep] for n, v in params.items()}
    _, db, tech = open_study(study)
    designs, metrics = evaluate_study(study, params, flat.size, db, tech)
    return results_frame(study, designs, metrics, params, trial=flat, sampler="grid", seed=None)


@pytest.mark.parametrize("name", ["draft-chip.yaml", "tree-size.yaml"])
def test_other_studies_same_rows(name, tmp_path):
    """Conditional categorical, integer and boolean knobs (null where inactive: draft-chip), known
    devices and tree shapes (tree-size): the Arrow-from-buffers writer against results_frame."""
    study = load_study(QUICK.parent / name)
    sweep(study, points=2, out=tmp_path / "s", chunk_size=300, progress=False)
    df = da.load_results(tmp_path / "s")
    want = _whole_grid(study, 2)
    _same_rows(df, want)
    if name == "draft-chip.yaml":        # nulls written: the draft chip's memory where it is off
        assert df["params_draft_chip_memory"].isna().any() and df["params_draft_chip_memory"].notna().any()
        assert df["params_draft_chip_memory_stacks"].isna().any()
    else:
        assert df["tree_shape"].str.contains("-").any()       # e.g. '3-6-6-5-6'
