"""The attack suite's helpers (attackkit.py) are imported by name: this folder goes on sys.path.
Hypothesis runs derandomized with no example database: the same cases on every machine, and no
files left behind."""

import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))
settings.register_profile("dse-attack", derandomize=True, database=None, deadline=None)
settings.load_profile("dse-attack")
