"""A sweep ranks its front only: the front of its chunks' fronts is the front of all rows (random
data with ties, duplicates, NaN and infeasible rows, some chunks with no usable row), every rank is
computed when read, and the side file says which it holds."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dse.results.analysis as da
from dse.campaign.grid import Usable, _write_side_files, sweep
from dse.results.identity import part_digest
from dse.results.pareto import front_flags, pareto_ranks
from dse.results.side_files import FRONT_FILE, PARETO_FILE, read_front_file, read_pareto_file
from dse.study import load_study

QUICK = Path(__file__).parent.parent / "studies" / "quickstart.yaml"
DIRS = {3: ["minimize", "maximize", "minimize"], 4: ["maximize", "minimize", "minimize", "maximize"],
        5: ["minimize", "minimize", "maximize", "minimize", "maximize"]}


def _random_parts(tmp: Path, m: int, seed: int):
    """Objective columns on a coarse integer grid (many ties; the last one traded against the
    others, so that fronts hold many rows), a block of exact duplicates spread
    over other parts, ~5% NaN, ~20% infeasible, cut at random into parts (one of them all
    infeasible, one empty); written as Parquet files (the side files name them by footer digest)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 5, size=(1500, m))
    w[:, -1] = 2 * (m - 1) - w[:, :-1].sum(axis=1) // 2 + rng.integers(0, 3, 1500)  # a trade-off: fronts of many rows
    v = np.where([d == "maximize" for d in DIRS[m]], -w, w).astype(float)
    v = np.concatenate([v, v[rng.choice(1500, 300)]])
    v[rng.random(len(v)) < 0.05, rng.integers(0, m)] = np.nan
    feasible = rng.random(len(v)) > 0.2
    cuts = np.sort(rng.choice(np.arange(1, len(v)), 8, replace=False))
    bounds = np.concatenate([[0], cuts, [len(v)]])
    feasible[bounds[2]:bounds[3]] = False                   # a part with no usable row
    bounds = np.insert(bounds, 5, bounds[5])                # and an empty part
    names = [f"o{j}" for j in range(m)]
    files, usable = [], {}
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        t = pa.table({**{n: v[a:b, j] for j, n in enumerate(names)}, "feasible": feasible[a:b],
                      "row": np.arange(a, b)})
        f = tmp / f"part-{i:05d}.parquet"
        pq.write_table(t, f)
        files.append(f)
        usable[f.name] = Usable.of(t, list(zip(names, DIRS[m])))
    return v, feasible, files, usable, list(zip(names, DIRS[m]))


@pytest.mark.parametrize("m", [3, 4, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_front_of_chunk_fronts_equals_front_of_all_rows(tmp_path, m, seed):
    """The sweep's side files (front only, and with every rank) against front_flags over all rows at
    once (the flags the sweep stored before): the same rows on the front, the same first row of each
    point, the same ranks; _front.parquet holds exactly the rows of rank 0."""
    v, feasible, files, usable, objs = _random_parts(tmp_path, m, seed)
    want_first, want_ranks = front_flags(v, DIRS[m], feasible)
    assert (want_ranks == 0).sum() > want_first.sum() >= 3          # ties on the front
    counts = [pq.read_metadata(f).num_rows for f in files]
    for ranks in (False, True):
        _write_side_files(tmp_path, [f.name for f in files], usable, objs, "fp", ranks=ranks)
        got = read_pareto_file(tmp_path, files, counts, objs, "fp", [part_digest(f) for f in files])
        np.testing.assert_array_equal(got.front, want_ranks == 0)
        np.testing.assert_array_equal(got.is_pareto, want_first)
        np.testing.assert_array_equal(got.usable, want_ranks >= 0)
        assert (got.ranks is None) == (not ranks)
        if ranks:
            np.testing.assert_array_equal(got.ranks, want_ranks)
        side = pq.read_table(tmp_path / PARETO_FILE)
        assert side["pareto_rank"].null_count == (0 if ranks else (want_ranks > 0).sum())
        rows, table, _ = read_front_file(tmp_path, files, counts, objs, ["row"], "fp",
                                         [part_digest(f) for f in files])
        assert rows.tolist() == np.flatnonzero(want_ranks == 0).tolist() == table["row"].to_pylist()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("rank") / "sw"
    sweep(load_study(QUICK), points=3, out=out, chunk_size=500, progress=False)
    return out


def test_sweep_stores_the_front_and_ranks_are_computed_when_read(swept, tmp_path):
    """quickstart at 3 points (4,860 designs, 375 feasible: tests/test_sweep_io.py): the side file
    has pareto_rank 0 on the front and null on the other feasible rows; load_results computes the
    ranks (the same as sweep(ranks=True) stores, and as pareto_ranks over the feasible rows)."""
    side = pq.read_table(swept / PARETO_FILE)
    meta = side.schema.metadata[b"dse_pareto"]
    assert b'"ranks": "front"' in meta and side.num_rows == 375
    front = side["pareto_rank"].is_valid().to_numpy(zero_copy_only=False)
    assert 2 <= front.sum() < 375 and set(side["pareto_rank"].drop_null().to_pylist()) == {0}
    df = da.load_results(swept, columns=["spec_ms_per_token", "cost_usd", "feasible", "is_pareto", "pareto_rank"])
    ok = df["feasible"].to_numpy(bool)
    want = pareto_ranks(df[["spec_ms_per_token", "cost_usd"]].to_numpy(float), ["minimize", "minimize"], ok)
    assert want.max() >= 5                                                  # ranks well past the front
    np.testing.assert_array_equal(df["pareto_rank"].fillna(-1).to_numpy(np.int64), want)
    only = da.load_results(swept, columns=["is_pareto"])                  # no ranks needed: none computed
    pd_flags = df["is_pareto"].astype("boolean")
    assert only["is_pareto"].astype("boolean").equals(pd_flags) and int(pd_flags.sum()) == front.sum()
    full = tmp_path / "full"
    sweep(load_study(QUICK), points=3, out=full, chunk_size=500, progress=False, ranks=True)
    side_full = pq.read_table(full / PARETO_FILE)
    assert b'"ranks": "all"' in side_full.schema.metadata[b"dse_pareto"]
    assert side_full["pareto_rank"].to_pylist() == want[want >= 0].tolist()
    assert (full / FRONT_FILE).read_bytes() != b"" and side_full["is_pareto"].equals(side["is_pareto"])
