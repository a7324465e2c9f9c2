"""Attack suite, the small faults a user meets: each ends in a result or one line with the right exit code,
never a traceback."""

from __future__ import annotations

import os

from attackkit import cli, write_study


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
