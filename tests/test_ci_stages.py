"""CI's two stages stay complete (.ci/run): tests/conftest.py fails a skip that lacks the ``servers`` marker
(the first stage would skip it and the second, ``pytest -m servers``, would never select it), and under
DSE_REQUIRE_SERVERS=1 (the second stage) it fails every skip."""

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
TESTS = '''
import pytest

def test_unmarked_skip():
    pytest.skip("no server here")

@pytest.mark.servers
def test_marked_skip():
    pytest.skip("no server here")

def test_plain():
    pass
'''


def _run(pytester, monkeypatch, require: bool):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_stages=TESTS)
    if require:
        monkeypatch.setenv("DSE_REQUIRE_SERVERS", "1")
    else:
        monkeypatch.delenv("DSE_REQUIRE_SERVERS", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-rf")
    failed = sorted(line.split("::")[1].split()[0] for line in result.outlines if line.startswith("FAILED"))
    return result, failed


def test_first_stage_fails_an_unmarked_skip_and_keeps_a_marked_one(pytester, monkeypatch):
    result, failed = _run(pytester, monkeypatch, require=False)
    result.assert_outcomes(passed=1, skipped=1, failed=1)
    assert failed == ["test_unmarked_skip"]


def test_second_stage_fails_every_skip(pytester, monkeypatch):
    result, failed = _run(pytester, monkeypatch, require=True)
    result.assert_outcomes(passed=1, failed=2)
    assert failed == ["test_marked_skip", "test_unmarked_skip"]
