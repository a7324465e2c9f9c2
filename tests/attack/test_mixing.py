"""Attack suite, fault class "a dataset mixes or misreports" (issue 18 item 1, issue 21 item 1).

Each case is one of the issue's defects, replayed: a sweep or array tasks resumed after the
workload changed, side files that no longer describe their parts, a chunk with no distinct
design, a throw-away run over real results, two reports in one folder. Before the fix each
mixed or lost rows silently; now each refuses with one line naming what differs, or (with
--force) starts a new dataset, and readers show a dataset's own rows.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from attackkit import DRAFT_CHIP, cli, one_line, write_study
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dse.results.analysis as da
from dse.campaign.grid import grid_axes, grid_chunk
from dse.results.front import dataset_front
from dse.results.manifest import MANIFEST
from dse.results.side_files import FRONT_FILE, PARETO_FILE
from dse.study import load_study


def sweep(study, out, *extra):
    return cli("sweep", study, "--points", 2, "--chunk-size", 200, "--out", out, "--quiet", *extra)


def parts(out):
    return sorted(out.glob("part-*.parquet"))


def own_front_first(out) -> float:
    """The lowest spec_ms_per_token of the dataset's own feasible rows, read from the parts alone."""
    t = pa.concat_tables([pq.read_table(p, columns=["spec_ms_per_token", "feasible"]) for p in parts(out)])
    v = t["spec_ms_per_token"].to_numpy(zero_copy_only=False)
    return float(v[t["feasible"].to_numpy(zero_copy_only=False)].min())


@pytest.fixture(scope="module")
def two_sweeps(tmp_path_factory):
    """The quickstart's 2-point grid (1,008 designs in 6 parts of 200 rows) at alpha 0.8 and 0.95."""
    tmp = tmp_path_factory.mktemp("two")
    a, b = write_study(tmp, file="a.yaml"), write_study(tmp, file="b.yaml", **{"workload.acceptance": {"alpha": 0.95}})
    for study, out in ((a, tmp / "a"), (b, tmp / "b")):
        assert sweep(study, out)[0] == 0
    return tmp, a, b


def test_a_sweep_resumed_after_the_workload_changed_is_refused_naming_the_key(two_sweeps, tmp_path):
    """Issue 18: alpha 0.8 then 0.95 in one sweep directory mixed both without a word."""
    tmp, _, b = two_sweeps
    out = tmp_path / "a"
    shutil.copytree(tmp / "a", out)
    for p in parts(out)[3:]:                     # as if the first sweep was interrupted after 3 parts
        p.unlink()
    line = one_line(*sweep(b, out), want=2)
    assert line == (f"error: {out}: holds another dataset (workload.acceptance.alpha 0.8 -> 0.95); give another "
                    "--out, or --force to start a new dataset there (its parts are removed)")
    assert len(parts(out)) == 3
    code, _, err, _ = sweep(b, out, "--force")
    assert code == 0 and "note: --force: removed" in err
    df = da.load_results(out)
    assert len(df) == 1008 and set(df["alpha"].dropna()) == {0.95}      # only the new study's rows
    assert {pq.read_schema(p).metadata[b"dse"].count(b"\"alpha\": 0.95") for p in parts(out)} == {1}


def test_array_tasks_resumed_after_the_workload_changed_are_refused(tmp_path):
    a = write_study(tmp_path, file="a.yaml")
    b = write_study(tmp_path, file="b.yaml", **{"workload.acceptance": {"alpha": 0.95}})
    out = tmp_path / "tasks"
    assert cli("run", a, "--task", "0/2", "--out", out, "--quiet")[0] == 0
    line = one_line(*cli("run", b, "--task", "1/2", "--out", out, "--quiet"), want=2)
    assert "(workload.acceptance.alpha 0.8 -> 0.95)" in line and "--force" in line
    assert sorted(p.name for p in out.glob("task-*")) == ["task-00000-of-00002.parquet"]
    assert cli("run", b, "--task", "1/2", "--out", out, "--quiet", "--force")[0] == 0
    assert sorted(p.name for p in out.glob("task-*")) == ["task-00001-of-00002.parquet"]   # the old task is gone


def test_readers_refuse_parts_of_two_datasets(two_sweeps, tmp_path):
    tmp, _, _ = two_sweeps
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for i, p in enumerate(parts(tmp / "a")):
        shutil.copy(p if i < 3 else tmp / "b" / p.name, mixed / p.name)
    for cmd in (("pareto", mixed), ("pareto", mixed, "--json"), ("report", mixed, "--quiet")):
        line = one_line(*cli(*cmd), want=2)
        assert "part files hold different datasets" in line and "workload.acceptance.alpha 0.8 -> 0.95" in line


def test_side_files_of_other_parts_with_the_same_names_and_counts_are_not_used(two_sweeps, tmp_path):
    """Issue 18: `dse pareto` printed a stale _front.parquet's row (3.958 ms where the dataset's own
    row was 2.382 ms): the parts had been rewritten under the same names and row counts."""
    tmp, _, _ = two_sweeps
    out = tmp_path / "a"
    shutil.copytree(tmp / "a", out)
    for p in parts(tmp / "b"):
        shutil.copy(p, out / p.name)                 # the 0.95 rows, under the 0.8 side files
    assert own_front_first(out) < own_front_first(tmp / "a")
    code, text, err, _ = cli("pareto", out, "--json")
    assert code == 0 and f"{out / FRONT_FILE}: not used" in err
    first = json.loads(text)[0]["spec_ms_per_token"]
    assert first == pytest.approx(own_front_first(out), rel=1e-9)
    flags = da.load_results(out, columns=["is_pareto", "spec_ms_per_token"])
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp / "b", fresh)
    for f in (PARETO_FILE, FRONT_FILE):
        (fresh / f).unlink()
    assert flags["is_pareto"].equals(da.load_results(fresh, columns=["is_pareto"])["is_pareto"])


def test_a_part_rewritten_with_its_metadata_kept_is_caught_by_its_content(two_sweeps, tmp_path):
    """Same fingerprint, name and row count: only the content differs (a row made the fastest)."""
    tmp, _, _ = two_sweeps
    out = tmp_path / "a"
    shutil.copytree(tmp / "a", out)
    p = parts(out)[2]
    t = pq.read_table(p)
    v = t["spec_ms_per_token"].to_numpy(zero_copy_only=False).copy()
    feasible = np.flatnonzero(t["feasible"].to_numpy(zero_copy_only=False))
    v[feasible[0]] = 0.5
    t = t.set_column(t.schema.get_field_index("spec_ms_per_token"), "spec_ms_per_token", pa.array(v))
    pq.write_table(t, p)                             # pyarrow keeps the schema's dse metadata
    code, text, err, _ = cli("pareto", out, "--json")
    assert code == 0 and "not used" in err
    assert json.loads(text)[0]["spec_ms_per_token"] == 0.5


def test_a_chunk_with_no_distinct_design_is_an_empty_part(tmp_path):
    """Issue 18: `dse sweep studies/draft-chip.yaml --points 6 --chunk-size 1000` crashed on chunk 4
    (all its grid points repeat designs of other chunks) and every rerun stopped there. The same
    on a grid small enough for a test: draft-chip at 2 points in chunks of 32 (16 of 64 empty)."""
    study = write_study(tmp_path, DRAFT_CHIP)
    s = load_study(study)
    axes = grid_axes(s, 2)
    shape = tuple(v.size for _, v in axes)
    total = int(np.prod(shape))
    sizes = [grid_chunk(s, axes, shape, c * 32, min(total, (c + 1) * 32))[0].size for c in range(-(-total // 32))]
    assert 0 in sizes                                 # the case exists on this grid
    out = tmp_path / "dc"
    code, text, err, exc = cli("sweep", study, "--points", 2, "--chunk-size", 32, "--out", out, "--quiet")
    assert code == 0, (err, exc)
    assert len(parts(out)) == len(sizes) and sum(pq.read_metadata(p).num_rows for p in parts(out)) == sum(sizes)
    assert text.startswith(f"{out}: {sum(sizes):,} designs from {total:,} grid points (")
    assert cli("pareto", out)[0] == 0
    code, text, _, _ = cli("sweep", study, "--points", 2, "--chunk-size", 32, "--out", out, "--quiet")
    assert code == 0 and f"{len(sizes)} already there" in text


# --------------------------------------------------------------------------- nothing lost by accident

def test_a_throw_away_run_does_not_replace_more_finished_trials(tmp_path, monkeypatch):
    """Issue 21: `dse run bad.yaml --n-trials 10 --storage :memory:` replaced a 1,000-trial file."""
    import dse.search.asktell
    import dse.search.trials
    study = write_study(tmp_path)
    out = tmp_path / "results" / "q.parquet"
    assert cli("run", study, "--storage", ":memory:", "--quiet")[0] == 0
    before = out.read_bytes()
    calls = []
    for module in (dse.search.asktell, dse.search.trials):      # the batches and the final re-evaluation
        monkeypatch.setattr(module, "evaluate_study", lambda *a, **k: calls.append(1))
    line = one_line(*cli("run", study, "--n-trials", 10, "--storage", ":memory:", "--quiet"), want=2)
    assert line == (f"error: {out}: holds 24 finished trials of this study and this run writes 10; give another "
                    "--out, or --force to replace it (a smaller --n-trials or --storage :memory: starts a new study)")
    assert out.read_bytes() == before and calls == []
    monkeypatch.undo()
    assert cli("run", study, "--n-trials", 10, "--storage", ":memory:", "--quiet", "--force")[0] == 0
    assert pq.read_metadata(out).num_rows == 10


def test_another_study_does_not_overwrite_the_results_file(tmp_path, monkeypatch):
    """Issue 21: a study copied from the quickstart kept its output and overwrote its results."""
    import dse.search.asktell
    import dse.search.trials
    a = write_study(tmp_path, file="a.yaml")
    b = write_study(tmp_path, file="b.yaml", **{"name": "other", "workload.batch": 4})
    out = tmp_path / "results" / "q.parquet"
    assert cli("run", a, "--storage", ":memory:", "--quiet")[0] == 0
    before = out.read_bytes()
    calls = []
    for module in (dse.search.asktell, dse.search.trials):      # the batches and the final re-evaluation
        monkeypatch.setattr(module, "evaluate_study", lambda *a, **k: calls.append(1))
    line = one_line(*cli("run", b, "--storage", ":memory:", "--quiet"), want=2)
    assert line == (f'error: {out}: holds results of another study (study "quickstart" -> "other"; '
                    'workload.batch 1 -> 4); give another --out, or --force to replace it')
    assert out.read_bytes() == before and calls == []          # refused before any evaluation


def test_export_does_not_overwrite_another_study(tmp_path, shm):
    a = write_study(tmp_path, file="a.yaml")
    journal = shm / "a.journal"
    assert cli("run", a, "--storage", journal, "--quiet")[0] == 0
    other = tmp_path / "other.parquet"
    b = write_study(tmp_path, file="b.yaml", **{"name": "other", "output": str(other)})
    assert cli("run", b, "--storage", ":memory:", "--quiet")[0] == 0
    line = one_line(*cli("export", "--storage", journal, "--study", "quickstart", "--out", other), want=2)
    assert 'holds results of another study (study "other" -> "quickstart")' in line
    assert cli("export", "--storage", journal, "--study", "quickstart", "--out", other, "--force")[0] == 0


def test_reports_of_different_inputs_never_share_a_folder(tmp_path):
    """Issue 21: `dse report` of a --task dataset (results/q/) and of the study's Parquet
    (results/q.parquet) wrote the same folder."""
    study = write_study(tmp_path, **{"search.n_trials": 16})
    res = tmp_path / "results"
    assert cli("run", study, "--storage", ":memory:", "--quiet")[0] == 0
    assert cli("run", study, "--task", "0/1", "--quiet")[0] == 0
    code, text, err, exc = cli("report", res / "q.parquet", "--quiet")
    assert code == 0, (err, exc)
    code, text2, err, exc = cli("report", res / "q", "--quiet")
    assert code == 0, (err, exc)
    assert text.split()[0] == str(res / "q-report" / "index.html")
    assert text2.split()[0] == str(res / "q-dataset-report" / "index.html")
    mark = json.loads((res / "q-report" / ".dse-report.json").read_text())
    assert mark["source"] == str((res / "q.parquet").resolve())
    line = one_line(*cli("report", res / "q", "--out", res / "q-report", "--quiet"), want=2)
    assert line == (f"error: {res / 'q-report'}: holds the report of {(res / 'q.parquet').resolve()}; give --out DIR "
                    "for this one, or --force to replace it")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    line = one_line(*cli("report", res / "q", "--out", tmp_path / "mine", "--quiet"), want=2)
    assert "holds files that are not a dse report" in line


def test_a_stored_study_run_with_another_workload_is_refused_naming_it_or_replaced_with_force(tmp_path, shm):
    a = write_study(tmp_path, file="a.yaml")
    b = write_study(tmp_path, file="b.yaml", **{"workload.acceptance": {"alpha": 0.95}})
    journal = shm / "q.journal"
    assert cli("run", a, "--storage", journal, "--quiet")[0] == 0
    line = one_line(*cli("run", b, "--storage", journal, "--out", tmp_path / "b.parquet", "--quiet"), want=2)
    assert line == (f"error: {journal}: study 'quickstart' was run with another workload or space: "
                    "workload.acceptance.alpha 0.8 -> 0.95; resuming would mix designs. Rename the study, give "
                    "another --storage / --out, or --force to delete the stored study and start again")
    code, _, err, _ = cli("run", b, "--storage", journal, "--out", tmp_path / "b.parquet", "--quiet", "--force")
    assert code == 0 and "note: --force: deleted study 'quickstart' (24 trials)" in err
    assert set(da.load_results(tmp_path / "b.parquet")["alpha"].dropna()) == {0.95}


# --------------------------------------------------------------------------- generated side files and manifests

@pytest.fixture(scope="module")
def swept(two_sweeps):
    tmp, _, _ = two_sweeps
    return tmp / "a"


def _truth(swept, tmp):
    bare = tmp / "truth"
    if not bare.exists():
        shutil.copytree(swept, bare)
        (bare / PARETO_FILE).unlink()
        (bare / FRONT_FILE).unlink()
    return da.load_results(bare, columns=["is_pareto", "pareto_rank"]), dataset_front(bare)


DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("meta"), st.one_of(st.none(), st.integers(), st.text(max_size=6),
                                         st.lists(st.integers(), max_size=3),
                                         st.dictionaries(st.sampled_from(["parts", "objectives", "fingerprint",
                                                                          "designs", "rows"]), st.integers(),
                                                         max_size=3))),
    st.tuples(st.sampled_from(["row", "_row", "part"]),
              st.one_of(st.none(), st.integers(-2**40, -1), st.integers(10**7, 2**62))),
    st.tuples(st.just("drop"), st.integers(1, 50)))


@settings(max_examples=30, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(which=st.sampled_from([PARETO_FILE, FRONT_FILE]), damage=DAMAGE, at=st.integers(0, 10**6))
def test_generated_side_file_damage_never_misreports(swept, tmp_path_factory, which, damage, at):
    """A side file damaged anywhere (cut short, its metadata replaced, a row number out of range or
    null, rows dropped) is not used: the flags and the front a reader gives are the parts' own, with
    a warning, and no case raises (issue 18: out-of-range side-file rows raised a traceback)."""
    tmp = tmp_path_factory.getbasetemp() / "side"
    tmp.mkdir(exist_ok=True)
    want_flags, want_front = _truth(swept, tmp)
    d = tmp / f"case-{len(list(tmp.iterdir()))}"
    shutil.copytree(swept, d)
    path = d / which
    kind, value = damage
    if kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: value % len(data)])
    else:
        t = pq.read_table(path)
        meta = dict(t.schema.metadata)
        if kind == "meta":
            meta[next(k for k in meta if k.startswith(b"dse_"))] = json.dumps(value).encode()
        elif kind == "drop":
            keep = np.ones(t.num_rows, dtype=bool)
            keep[np.random.default_rng(at).choice(t.num_rows, min(value, t.num_rows), replace=False)] = False
            t = t.filter(pa.array(keep))
        elif kind not in t.column_names:
            return                                  # (no such column in this side file)
        else:
            col = t[kind].combine_chunks()
            typ = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
            vals = col.to_pylist()
            vals[at % len(vals)] = value if value is None or not pa.types.is_string(typ) else f"part-{value}.parquet"
            t = t.set_column(t.schema.get_field_index(kind), kind, pa.array(vals, type=typ))
        pq.write_table(t.replace_schema_metadata(meta), path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "not used: ..." when the damage is seen
        got = da.load_results(d, columns=["is_pareto", "pareto_rank"])
        front = dataset_front(d)
    assert got.equals(want_flags)
    assert front.rows.tolist() == want_front.rows.tolist() and front.points == want_front.points


MANIFESTS = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 10**12), st.text(max_size=8)),
                         lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                 st.dictionaries(st.sampled_from(["kind", "study", "parts", "points",
                                                                                  "fingerprint", "identity", "x"]),
                                                                 inner, max_size=5)),
                         max_leaves=12)


@settings(max_examples=30, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(manifest=MANIFESTS)
def test_generated_manifests_are_read_or_refused_in_one_line(swept, tmp_path_factory, manifest):
    """Any JSON in _manifest.json (issue 18: a manifest of the wrong JSON type raised a traceback):
    readers and sweeps either run or exit 2 with one line."""
    d = tmp_path_factory.mktemp("man")
    shutil.copytree(swept, d, dirs_exist_ok=True)
    (d / MANIFEST).write_text(json.dumps(manifest))
    for args in (("pareto", d), ("pareto", d, "--json")):
        code, out, err, exc = cli(*args)
        if code != 0:
            one_line(code, out, err, exc, want=2)
        else:
            assert exc is None and (out.startswith(("front: ", "no feasible design")) or out.lstrip().startswith("["))
