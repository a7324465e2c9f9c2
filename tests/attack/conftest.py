"""The attack suite's helpers (attackkit.py) are imported by name: this folder goes on sys.path."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
