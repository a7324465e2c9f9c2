"""Attack suite, the small faults a user meets: each ends in a result or one line with the right exit code,
never a traceback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from attackkit import cli, one_line, write_study

import dse.search.asktell
import dse.search.trials

DSE = str(Path(sys.executable).with_name("dse"))


@pytest.fixture
def no_evaluation(monkeypatch):
    """Counts evaluations: a refusal before the search makes none."""
    calls = []
    real = dse.search.asktell.evaluate_study
    for module in (dse.search.asktell, dse.search.trials):      # the batches and the final re-evaluation
        monkeypatch.setattr(module, "evaluate_study", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


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
