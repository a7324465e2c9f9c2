"""The distribution has a name of its own (issue 21 item 2): `dse` on the package index is an
unrelated project, so every install hint names `specdec-dse` (or `.` in a checkout)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import distribution
from pathlib import Path

from click.testing import CliRunner

from dse.cli.commands import main
from dse.errors import DIST_NAME, install_hint

REPO = Path(__file__).resolve().parent.parent
#: `pip install ... dse` or `dse[extra]` as a requirement: the unrelated project on the index
BAD_HINT = re.compile(r"""pip install\b[^\n`&;|]*?(?<![\w.-])['"]?dse(\[|['"\s`)]|$)""", re.M)


def _text_files():
    for sub in ("dse", "docs", "examples", "studies", "benchmarks", "tests", "hardware_db", ".ci"):
        for p in sorted((REPO / sub).rglob("*")):
            if p.is_file() and p.suffix in {".py", ".md", ".sbatch", ".yaml", ".sh", ".toml", ""}:
                yield p
    yield REPO / "README.md"
    yield REPO / "pyproject.toml"


def test_pyproject_names_the_distribution():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["name"] == DIST_NAME == "specdec-dse"
    assert meta["project"]["scripts"] == {"dse": "dse.cli:main"}     # the command stays `dse`


def test_installed_distribution_is_the_new_name():
    dist = distribution(DIST_NAME)            # raises PackageNotFoundError under the old name
    assert dist.metadata["Name"] == "specdec-dse"
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and "specdec-dse" in r.output and dist.version in r.output


def test_install_hint_names_the_distribution():
    assert install_hint("postgres") == "pip install 'specdec-dse[postgres]'"


def test_bad_hint_pattern_catches_the_old_name():
    for bad in ("pip install 'dse[postgres]'", "pip install dse", "(pip install \"dse[grpc,mysql]\")"):
        assert BAD_HINT.search(bad), bad
    for good in ("pip install 'specdec-dse[postgres]'", "pip install '.[dask]'", "pip install . && dse run x",
                 "pip install -e '.[test]'"):
        assert not BAD_HINT.search(good), good


def test_no_hint_names_the_unrelated_package():
    here = Path(__file__).resolve()
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in _text_files() if p.resolve() != here
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if BAD_HINT.search(line)]
    assert not hits, "\n".join(hits)
