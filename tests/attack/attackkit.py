"""Helpers of the attack suite (issue 18): small studies written into tmp_path, the CLI run
in-process, and the checks every case ends with (one line, the right exit code, no traceback)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "studies" / "quickstart.yaml"
DRAFT_CHIP = ROOT / "studies" / "draft-chip.yaml"


def write_study(tmp_path: Path, source: Path = QUICK, file: str = "s.yaml", **changes) -> Path:
    """A shipped study with its output in ``tmp_path`` and ``changes`` applied: keys are dotted
    paths ("workload.acceptance.alpha"), values replace what is there."""
    raw = yaml.safe_load(source.read_text())
    raw["output"] = str(tmp_path / "results" / "q.parquet")
    raw["search"].update(n_trials=24, batch_size=8, sampler="random")
    for key, value in changes.items():
        node, *path = key.split(".")
        where = raw
        for k in [node, *path][:-1]:
            where = where.setdefault(k, {})
        where[[node, *path][-1]] = value
    p = tmp_path / file
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    return p


def cli(*args, env=None, input=None):
    """`dse ARGS` in this process: (exit code, stdout, stderr, exception)."""
    from dse.cli.commands import main
    r = CliRunner().invoke(main, [str(a) for a in args], env=env, input=input)
    return r.exit_code, r.stdout, r.stderr, r.exception


def one_line(code: int, out: str, err: str, exc, want: int) -> str:
    """The case ended with one `error: ...` line on stderr, exit ``want``, no traceback; returns the line."""
    assert code == want, (code, out, err, exc)
    assert exc is None or isinstance(exc, SystemExit), repr(exc)
    assert "Traceback" not in out + err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("note:", "warning:"))]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def error_lines(code: int, out: str, err: str, exc, want: int) -> list[str]:
    """Like :func:`one_line` for input with several faults: 1 to 20 lines, each `error: ...`."""
    assert code == want, (code, out, err, exc)
    assert exc is None or isinstance(exc, SystemExit), repr(exc)
    assert "Traceback" not in out + err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("note:", "warning:"))]
    assert 1 <= len(lines) <= 20 and all(x.startswith("error: ") for x in lines), err
    return lines


def password_of(url: str) -> str | None:
    m = re.search(r"://[^:/@]*:([^@]+)@", url)
    return m.group(1) if m else None


def server_url(var: str = "DSE_TEST_PG_URL") -> str:
    """A database server's URL from the environment, else skip (a failure under DSE_REQUIRE_SERVERS=1)."""
    url = os.environ.get(var)
    if not url:
        msg = f"no server: set {var} (.ci/run does)"
        if os.environ.get("DSE_REQUIRE_SERVERS") == "1":
            pytest.fail(msg + "; DSE_REQUIRE_SERVERS=1 makes this a failure")
        pytest.skip(msg)
    return url
