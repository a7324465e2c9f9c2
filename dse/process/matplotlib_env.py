"""matplotlib imported for drawing on its Agg canvas, whatever backend the environment names."""

from __future__ import annotations

import importlib
import os
import sys

#: the environment variable matplotlib takes its backend from when it is first imported
BACKEND_VAR = "MPLBACKEND"


def import_matplotlib(module: str = "matplotlib"):
    """``module`` (matplotlib or one of its modules), with MPLBACKEND set aside while matplotlib itself is
    first imported: dse draws on the Agg canvas (FigureCanvasAgg) and never needs a backend, and one named
    for another program (Jupyter's module://matplotlib_inline.backend_inline) makes that import raise."""
    if "matplotlib" not in sys.modules and BACKEND_VAR in os.environ:
        saved = os.environ.pop(BACKEND_VAR)
        try:
            importlib.import_module("matplotlib")
        finally:
            os.environ[BACKEND_VAR] = saved
    return importlib.import_module(module)
