"""The `dse` command line: a thin shell over the public functions (:mod:`.commands`), with plain-text
tables for the terminal (:mod:`.text`). ``dse = dse.cli:main``.
"""

from .commands import main

__all__ = ["main"]
