"""dse: design-space explorer for LLM-inference accelerators built around speculative decoding.

The public surface; heavy modules (optuna, pandas, matplotlib) load only when used.

>>> import dse
>>> r = dse.evaluate_design(hw="h200", target="llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k=4)
>>> r["fits"], r["k"]
(True, 4)
"""

from importlib import import_module

_LAZY = {
    "evaluate": "dse.model.evaluate",
    "Metrics": "dse.model.evaluate",
    "DesignBatch": "dse.model.arrays",
    "HardwareArrays": "dse.model.arrays",
    "evaluate_design": "dse.api",
    "load_database": "dse.catalog.database",
    "Database": "dse.catalog.database",
    "DseError": "dse.errors",
    "SpecError": "dse.errors",
    "load_study": "dse.study",
    "parse_study": "dse.study",
    "load_results": "dse.results.load",
    "Workload": "dse.workload.spec",
    "run_study": "dse.search.runner",
    "sweep": "dse.campaign.grid",
    "pareto_mask": "dse.results.pareto",
}

__all__ = sorted(_LAZY) + ["__version__"]


def _version() -> str:
    """The installed distribution's version (importlib.metadata costs ~30 ms: read on first use)."""
    from importlib.metadata import PackageNotFoundError, version

    from .errors import DIST_NAME
    try:
        return version(DIST_NAME)
    except PackageNotFoundError:  # running from a source tree
        return "0.0.0+unknown"


def __getattr__(name):
    if name == "__version__":
        globals()["__version__"] = v = _version()
        return v
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
