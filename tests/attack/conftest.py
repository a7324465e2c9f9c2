"""The attack suite's helpers (attackkit.py) are imported by name: this folder goes on sys.path.
Hypothesis runs derandomized with no example database: the same cases on every machine, and no
files left behind."""

import sys
from pathlib import Path

import pytest
from hypothesis import settings

import dse.search.asktell
import dse.search.trials

sys.path.insert(0, str(Path(__file__).parent))
settings.register_profile("dse-attack", derandomize=True, database=None, deadline=None)
settings.load_profile("dse-attack")


@pytest.fixture
def no_evaluation(monkeypatch):
    """Counts evaluations: a refusal before the search makes none."""
    calls = []
    real = dse.search.asktell.evaluate_study
    for module in (dse.search.asktell, dse.search.trials):      # the batches and the final re-evaluation
        monkeypatch.setattr(module, "evaluate_study", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls
