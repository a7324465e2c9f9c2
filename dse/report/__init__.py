"""Reports: figures, the HTML page and the comparison with known parts, from results alone.

:mod:`.context` rebuilds the study from the results' metadata and evaluates what the
figures compare against (known parts, speedup against batch, importances); :mod:`.figures`
computes and draws each figure, :mod:`.labels` names columns and values in them, and
:mod:`.page` chooses the figures, saves them and writes ``index.html``; :mod:`.serving_figure` draws a
study with an SLA over concurrency, and :mod:`.rows` rebuilds and names a front row's design.
"""

from .context import build_report, importances, known_parts, speedup_vs_batch, study_from_results
from .page import write_report

__all__ = ["build_report", "importances", "known_parts", "speedup_vs_batch", "study_from_results", "write_report"]
