"""Attack suite, the small faults a user meets: each ends in a result or one line with the right exit code,
never a traceback."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from attackkit import cli, one_line, write_study

DSE = str(Path(sys.executable).with_name("dse"))


def test_dse_report_of_the_current_folder_names_its_report_by_the_folder(tmp_path, monkeypatch):
    """`dse report .` raised ValueError ('.' has an empty name) building the default --out."""
    study = write_study(tmp_path)
    code, *_ = cli("run", study, "--quiet")
    assert code == 0
    monkeypatch.chdir(tmp_path / "results")
    code, out, err, exc = cli("report", ".", "--quiet")
    assert code == 0 and exc is None, (out, err)
    assert (tmp_path / "results-dataset-report" / "index.html").is_file()
    assert sorted(os.listdir(tmp_path / "results")) == ["q.journal", "q.parquet"]    # nothing written into the input


@pytest.mark.parametrize("value,words", [
    ("5", "expected a relative epsilon E in [0, 1), or METRIC=E,... per objective"),
    ("cost_usd=nan", "expected a relative epsilon E in [0, 1), or METRIC=E,... per objective"),
    ("power_w=0.1", "epsilon names power_w, which are not objectives (spec_ms_per_token, cost_usd)")])
def test_dse_run_checks_epsilon_before_the_search(tmp_path, no_evaluation, value, words):
    """`dse run --epsilon 5` searched the whole study, wrote it, then refused the printed front's epsilon."""
    line = one_line(*cli("run", write_study(tmp_path), "--epsilon", value, "--quiet"), want=2)
    assert line == f"error: --epsilon = '{value}': {words}"
    assert no_evaluation == [] and not (tmp_path / "results").exists()       # no search, no journal, no file


@pytest.fixture
def results(tmp_path):
    code, *_ = cli("run", write_study(tmp_path), "--storage", ":memory:", "--quiet")
    assert code == 0
    return tmp_path / "results" / "q.parquet"


@pytest.mark.parametrize("where", ["chips", "1", "params_target_chip_memory"])
def test_dse_pareto_where_must_be_a_condition(results, where):
    """`--where chips` selected the rows whose labels were the chip counts (DataFrame.query's .loc)."""
    line = one_line(*cli("pareto", results, "--where", where), want=2)
    assert line.startswith(f"error: where = {where!r}: is not a condition: it gives ")
    assert line.endswith(", not True or False for each row; write one such as 'chips <= 2'")


@pytest.mark.parametrize("how", [[], ["--json"], ["--csv"], ["--where", "trial > 3"]])
def test_dse_pareto_with_trial_as_an_objective(results, how):
    """`--objective trial:max` put the trial column in the table twice: pyarrow's KeyError, pandas' ValueError."""
    code, out, err, exc = cli("pareto", results, "--objective", "trial:max", "--objective", "cost_usd:min", *how)
    assert code == 0 and exc is None and "Traceback" not in out + err, (out, err)
    if how == ["--json"]:
        rows = json.loads(out)
        assert rows and all(list(r)[:2] == ["trial", "cost_usd"] for r in rows)
    elif how == ["--csv"]:
        assert out.splitlines()[0].split(",").count("trial") == 1
    else:
        assert "trial maximize, cost_usd minimize" in out


def test_dse_pareto_refuses_an_objective_given_twice(results):
    line = one_line(*cli("pareto", results, "--objective", "cost_usd:max", "--objective", "cost_usd:min"), want=2)
    assert line == "error: objective 'cost_usd' is given twice; give each metric once"


@pytest.mark.parametrize("bandwidth", ["1e-300", "1e-150"])
def test_dse_eval_of_a_latency_that_overflows(bandwidth):
    """A memory bandwidth of 1e-300 TB/s made the latency overflow to inf (null in the result): the text
    table raised TypeError formatting None; at 1e-150 it printed 150-digit numbers."""
    code, out, err, exc = cli("eval", "--hw", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                              "--set", f"mem_bw_tb_s={bandwidth}")
    assert code == 0 and exc is None and "Traceback" not in out + err, (out, err)
    assert not re.search(r"\d{20}", out)
    if bandwidth == "1e-300":
        assert ("latency      - (overflows: no finite latency from these hardware figures; check the --set values "
                "and the device file)") in out
    else:
        assert re.search(r"^baseline     1\.\d+e\+151 ms/token", out, re.M)


def test_dse_report_under_a_jupyter_matplotlib_backend(results, tmp_path):
    """Jupyter's MPLBACKEND=module://matplotlib_inline.backend_inline made `import matplotlib` raise in `dse
    report` (run in a new process: matplotlib reads the variable when it is first imported)."""
    env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    r = subprocess.run([DSE, "report", str(results), "--out", str(tmp_path / "rep"), "--quiet"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "rep" / "index.html").is_file() and (tmp_path / "rep" / "front.png").is_file()


def _address_space_kb(env: dict, *modules: str) -> int:
    """The peak address space (kB) of a new Python process that imports ``modules``."""
    code = (f"import {', '.join(modules)}\n"
            "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmPeak')))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
    return int(r.stdout)


def test_running_out_of_address_space_is_one_line(tmp_path):
    """Under `ulimit -v` the out-of-memory handler itself raised (it imported the module that prints, with
    the memory full), and a library that could not be mapped ended in a traceback. The limit lets dse start
    and load numpy but not what a sweep needs (pyarrow, pandas): measured, so it holds on any machine; one
    BLAS thread, so that OpenBLAS reserves the same on any number of cores."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    numpy_kb = _address_space_kb(env, "numpy")
    sweep_kb = _address_space_kb(env, "dse.cli", "dse.campaign.grid")
    limit = (numpy_kb + (sweep_kb - numpy_kb) // 4) * 1024

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    r = subprocess.run([DSE, "sweep", str(write_study(tmp_path)), "--points", "20", "--out", str(tmp_path / "sw"),
                        "--quiet"], env=env, capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert "Traceback" not in r.stderr, r.stderr
    assert (r.returncode, r.stderr.splitlines()) == (
        1, ["error: out of memory (a smaller --chunk-size, --points or batch_size needs less)"])


@pytest.mark.parametrize("kind", ["missing", "not a database"])
def test_dse_hardware_db_that_is_no_database_is_refused(tmp_path, kind):
    """DSE_HARDWARE_DB naming a missing folder listed no accelerator, exit 0."""
    folder = tmp_path / "hw"
    if kind != "missing":
        folder.mkdir()
    line = one_line(*cli("hw", "list", env={"DSE_HARDWARE_DB": str(folder)}), want=2)
    words = ("no such folder; expected a hardware database folder (devices/, models/, runtimes/), or unset it for "
             "the one shipped with dse" if kind == "missing" else
             "holds no devices/ folder, so it is not a hardware database (devices/, models/, runtimes/); unset it "
             "for the one shipped with dse")
    assert line == f"error: DSE_HARDWARE_DB = '{folder}': {words}"
