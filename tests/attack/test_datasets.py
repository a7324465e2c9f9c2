"""Attack suite, "Reliability IV": datasets that mix silently, readers that mix datasets, edited
results that lie.

Each case is one defect, replayed: a device file, a model's config.json or a database file edited
between two parts of one dataset; a folder of two datasets, or of a dataset and its backup copy,
read as one; a results file or part with a column dropped, retyped or a row copied. Before the fix
each gave a result (exit 0) that mixed or misread the rows; now each refuses with one line naming
the file that changed or the file and the column, or reads the dataset's own parts and says in
one warning what it left out.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from attackkit import ROOT, cli, one_line, write_study

import dse.results.analysis as da
from dse.errors import DseError
from dse.results.side_files import FRONT_FILE, PARETO_FILE


def parts(out):
    return sorted(out.glob("part-*.parquet"))


def device_file(tmp_path, bw: float):
    """hardware_db's H100 SXM as a device file of the study's folder, at memory bandwidth ``bw``."""
    raw = yaml.safe_load((ROOT / "hardware_db" / "devices" / "h100-sxm.yaml").read_text())
    raw.update(name="my-h100", mem_bw_tb_s=bw)
    p = tmp_path / "parts" / "my-h100.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(yaml.safe_dump(raw))
    return p


def hf_config(tmp_path, layers: int):
    """Llama-3.1-70B's shape as a Hugging Face config.json, with ``layers`` layers."""
    cfg = {"model_type": "llama", "num_hidden_layers": layers, "hidden_size": 8192, "num_attention_heads": 64,
           "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
           "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu"}
    p = tmp_path / "llama-3.1-70b-local" / "config.json"
    p.parent.mkdir(exist_ok=True)
    p.write_text(json.dumps(cfg))
    return p


# --------------------------------------------------------------------------- datasets mix silently

def test_a_device_file_edited_between_sweep_shards_is_refused_naming_it(tmp_path):
    """Reliability IV: the device file's bandwidth went from 3.35 to 30 TB/s between shard 0 and
    shard 1 of one sweep; both definitions ended up side by side in one dataset, exit 0."""
    dev = device_file(tmp_path, 3.35)
    study = write_study(tmp_path, **{"space": {"target_chip": {"device": ["h100-sxm", "parts/my-h100.yaml"],
                                                               "chips": [1, 2, 4, 8]}}})
    out = tmp_path / "sweep"
    args = ("sweep", study, "--chunk-size", 2, "--out", out, "--quiet")
    assert cli(*args, "--shard", "0/2")[0] == 0
    written = [p.name for p in parts(out)]
    device_file(tmp_path, 30.0)
    line = one_line(*cli(*args, "--shard", "1/2"), want=2)
    assert line.startswith(f"error: {out}: holds another dataset (file {dev.resolve()} changed (sha256 ")
    assert "--force" in line
    assert [p.name for p in parts(out)] == written                  # nothing of the other definition
    code, _, err, _ = cli(*args, "--shard", "1/2", "--force")       # a new dataset, at 30 TB/s throughout
    assert code == 0 and "note: --force: removed" in err
    assert cli(*args, "--shard", "0/2")[0] == 0
    df = da.load_results(out)
    assert set(df.loc[df["params_target_chip_device"] == str(dev.resolve()), "mem_bw_tb_s"]) == {30.0}


def test_a_model_config_edited_between_array_tasks_is_refused_naming_it(tmp_path):
    cfg = hf_config(tmp_path, 80)
    study = write_study(tmp_path, **{"workload.target": "llama-3.1-70b-local/config.json"})
    out = tmp_path / "tasks"
    assert cli("run", study, "--task", "0/2", "--out", out, "--quiet")[0] == 0
    hf_config(tmp_path, 40)
    line = one_line(*cli("run", study, "--task", "1/2", "--out", out, "--quiet"), want=2)
    assert f"holds another dataset (file {cfg.resolve()} changed (sha256 " in line
    assert sorted(p.name for p in out.glob("task-*")) == ["task-00000-of-00002.parquet"]


def test_a_database_file_edited_between_array_tasks_is_refused_naming_it(tmp_path):
    """The acceptance table (a CSV: the database's fingerprint covered its YAML files only) edited
    between two tasks of a study that takes its acceptance from the table."""
    db = tmp_path / "db"
    shutil.copytree(ROOT / "hardware_db", db)
    env = {"DSE_HARDWARE_DB": str(db)}
    study = write_study(tmp_path, **{"workload.acceptance": None})
    out = tmp_path / "tasks"
    assert cli("run", study, "--task", "0/2", "--out", out, "--quiet", env=env)[0] == 0
    table = db / "acceptance" / "published.csv"
    table.write_text(table.read_text() + "\n")
    line = one_line(*cli("run", study, "--task", "1/2", "--out", out, "--quiet", env=env), want=2)
    assert "holds another dataset (file hardware_db/acceptance/published.csv changed (sha256 " in line


def test_readers_refuse_parts_made_from_two_versions_of_a_device_file(tmp_path):
    """Parts copied together by hand (no sweep ran to refuse them): readers name the file."""
    dev = device_file(tmp_path, 3.35)
    space = {"space": {"target_chip": {"device": ["h100-sxm", "parts/my-h100.yaml"], "chips": [1, 2, 4, 8]}}}
    study = write_study(tmp_path, **space)
    for name in ("a", "b"):
        assert cli("sweep", study, "--chunk-size", 2, "--out", tmp_path / name, "--quiet")[0] == 0
        device_file(tmp_path, 30.0)
    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "a", mixed)
    shutil.copy(parts(tmp_path / "b")[-1], parts(mixed)[-1])
    line = one_line(*cli("pareto", mixed), want=2)
    assert "part files hold different datasets" in line and f"file {dev.resolve()} changed" in line


# --------------------------------------------------------------------------- readers mix datasets

@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """results/ as a user has it: a search's file, a sweep (6 parts) and two array tasks of one study."""
    tmp = tmp_path_factory.mktemp("res")
    study = write_study(tmp)
    res = tmp / "results"
    assert cli("run", study, "--storage", ":memory:", "--quiet")[0] == 0
    assert cli("sweep", study, "--points", 2, "--chunk-size", 200, "--out", res / "q-sweep", "--quiet")[0] == 0
    for task in ("0/2", "1/2"):
        assert cli("run", study, "--task", task, "--quiet")[0] == 0
    return res


def test_a_folder_of_several_datasets_is_refused_naming_them(results):
    """Reliability IV: `dse pareto results/` added a sweep's 1,008 grid points to the tasks' 48 trials."""
    for args in (("pareto", results), ("pareto", results, "--json")):
        line = one_line(*cli(*args), want=2)
        assert line == (f"error: {results}: holds 2 datasets (q, q-sweep) and 1 results file (q.parquet), each read "
                        "on its own: give one of them")
    with pytest.raises(DseError, match="holds 2 datasets"):
        da.load_results(results)


def test_backup_copies_inside_a_dataset_are_left_out_with_a_warning(results, tmp_path):
    """Reliability IV: `cp -r` of the parts into the dataset's folder, and a Finder-style copy of a
    part, doubled the counts."""
    sweep = tmp_path / "q-sweep"
    shutil.copytree(results / "q-sweep", sweep)
    want = cli("pareto", sweep)[1]
    shutil.copytree(results / "q-sweep", sweep / "parts.bak")
    shutil.copy(parts(sweep)[0], sweep / f"{parts(sweep)[0].stem} copy.parquet")
    code, text, err, _ = cli("pareto", sweep)
    assert code == 0 and text == want
    warned = [x for x in err.splitlines() if x.strip()]
    assert len(warned) == 1 and warned[0].startswith(f"warning: {sweep}: 7 files its _manifest.json does not list "
                                                     "are not read (")
    assert "part-00000-of-00001-000000 copy.parquet" in warned[0]
    with pytest.warns(UserWarning, match="does not list"):
        assert len(da.load_results(sweep)) == 1008


def test_a_copy_of_a_results_file_in_its_folder_is_refused(results, tmp_path):
    """A folder without a manifest (a search's results): the copy's rows repeat every trial."""
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(results / "q.parquet", folder / "q.parquet")
    shutil.copy(results / "q.parquet", folder / "q copy.parquet")
    line = one_line(*cli("pareto", folder), want=2)
    assert line.startswith(f"error: {folder}: trial 0 is in both q copy.parquet and q.parquet;")


# --------------------------------------------------------------------------- edited results lie

@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edit")
    assert cli("run", write_study(tmp), "--storage", ":memory:", "--quiet")[0] == 0
    return tmp / "results" / "q.parquet"


def edited(src, dst, edit):
    t = edit(pq.read_table(src))
    pq.write_table(t, dst)                   # pyarrow keeps the schema's dse metadata
    return dst


READERS = (("pareto",), ("pareto", "--json"), ("pareto", "--where", "chips > 0"), ("report", "--quiet"))


@pytest.mark.parametrize("column", ["feasible", "trial", "spec_ms_per_token"])
def test_a_results_file_without_a_column_it_needs_is_refused_naming_it(searched, tmp_path, column):
    """Reliability IV: without `feasible` the readers fell back to `fits` and dropped the study's
    1 kW power cap (a 4,748 W design on the front)."""
    path = edited(searched, tmp_path / "r.parquet", lambda t: t.drop_columns([column]))
    for args in READERS:
        line = one_line(*cli(args[0], path, *args[1:]), want=2)
        assert line.startswith(f"error: {path}: no column '{column}': ")
    with pytest.raises(DseError, match=f"no column '{column}'"):
        da.load_results(path)


@pytest.mark.parametrize("column, wrong", [("feasible", pa.string()), ("trial", pa.string()),
                                           ("trial", pa.float64()), ("spec_ms_per_token", pa.string())])
def test_a_column_of_the_wrong_type_is_refused_naming_it(searched, tmp_path, column, wrong):
    """Reliability IV: `feasible` or `trial` stored as text raised a traceback."""
    def retype(t):
        i = t.schema.get_field_index(column)
        return t.set_column(i, column, pc.cast(t[column], wrong))
    path = edited(searched, tmp_path / "r.parquet", retype)
    for args in READERS:
        line = one_line(*cli(args[0], path, *args[1:]), want=2)
        assert line.startswith(f"error: {path}: column '{column}' holds {wrong}: expected ")


def test_a_duplicated_trial_is_refused(searched, tmp_path):
    """Reliability IV: a row copied in the file counted as one more design ("25 designs in 25
    trials" for 24 distinct). Refused rather than counted once: a trial number names one evaluation,
    so a repeated one means rows were copied or two results joined, and the copies may differ."""
    path = edited(searched, tmp_path / "r.parquet", lambda t: pa.concat_tables([t, t.slice(5, 1)]))
    trial = pq.read_table(searched, columns=["trial"])["trial"][5].as_py()
    for args in READERS:
        line = one_line(*cli(args[0], path, *args[1:]), want=2)
        assert line.startswith(f"error: {path}: trial {trial} appears 2 times (rows 5 and 24);")
    with pytest.raises(DseError, match=f"trial {trial} appears 2 times"):
        da.load_results(path)


def test_parts_whose_trials_interleave_without_repeating_are_read_as_one(searched, tmp_path):
    """No false alarm: a folder partitioned by hand (even and odd rows, trial ranges overlapping)."""
    folder = tmp_path / "split"
    folder.mkdir()
    t = pq.read_table(searched)
    for k in (0, 1):
        pq.write_table(t.take(list(range(k, t.num_rows, 2))), folder / f"part-{k}.parquet")
    code, text, err, _ = cli("pareto", folder)
    assert code == 0 and err == ""
    assert text.splitlines()[0] == cli("pareto", searched)[1].splitlines()[0]
    assert len(da.load_results(folder)) == t.num_rows


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sw")
    study = write_study(tmp)
    out = tmp / "sweep"
    assert cli("sweep", study, "--points", 2, "--chunk-size", 200, "--out", out, "--quiet")[0] == 0
    return study, out


@pytest.mark.parametrize("edit", ["drop", "text"])
def test_a_sweep_part_with_a_column_dropped_or_retyped_is_refused(swept, tmp_path, edit):
    """Reliability IV: a part without `feasible` counted its rows infeasible without a word, and
    `dse sweep` (writing the side files) then raised a traceback."""
    study, src = swept
    out = tmp_path / "sweep"
    shutil.copytree(src, out)
    for f in (PARETO_FILE, FRONT_FILE):
        (out / f).unlink()
    part = parts(out)[2]
    edited(part, part, (lambda t: t.drop_columns(["feasible"])) if edit == "drop" else
           (lambda t: t.set_column(t.schema.get_field_index("feasible"), "feasible", pc.cast(t["feasible"],
                                                                                               pa.string()))))
    what = "no column 'feasible'" if edit == "drop" else "column 'feasible' holds string"
    for args in (("pareto", out), ("pareto", out, "--json"), ("report", out, "--quiet"),
                 ("sweep", study, "--points", 2, "--chunk-size", 200, "--out", out, "--quiet")):
        line = one_line(*cli(*args), want=2)
        assert line.startswith(f"error: {part}: {what}"), args
