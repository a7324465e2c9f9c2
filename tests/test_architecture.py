"""The package's shape: one direction of flow, no import circles, no reaching into private names."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import dse

#: the source tree (not the installed copy: CI installs the package before testing)
ROOT = Path(__file__).resolve().parent.parent / "dse"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    is_pkg = MODULES[module].name == "__init__.py"
    base = module.split(".")
    if node.level:
        base = base if is_pkg else base[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def _edges(module: str) -> tuple[set[str], list[str]]:
    """Modules of dse that ``module`` imports (anywhere, also inside functions), and the
    private names it imports from other modules."""
    tree = ast.parse(MODULES[module].read_text())
    deps, private = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name.split(".")[0] == "dse"}
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            if target.split(".")[0] != "dse":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                deps.add(sub if sub in MODULES else target)
                if a.name.startswith("_") and sub not in MODULES and a.name != "__version__":
                    private.append(f"{module} imports {a.name} from {target}")
    deps.discard(module)
    return {d for d in deps if d in MODULES}, private


GRAPH = {m: _edges(m)[0] for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert _cycles(GRAPH) == []


def test_cycle_finder_finds_a_planted_circle():
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["dse.catalog.fields"].add("dse.campaign.grid")      # grid -> evaluation -> ... -> catalog.fields
    assert any("dse.catalog.fields" in c for c in _cycles(graph))


def test_no_module_imports_private_names_of_another():
    found = [p for m in MODULES for p in _edges(m)[1]]
    assert found == []


def test_no_private_attribute_access_across_modules():
    """`da._usable(...)`: a module alias followed by a private attribute."""
    bad = []
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _resolve(m, node).startswith("dse"):
                aliases |= {a.asname or a.name for a in node.names
                            if f"{_resolve(m, node)}.{a.name}" in MODULES}
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.name.startswith("dse") and a.asname}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in aliases):
                bad.append(f"{m}: {node.value.id}.{node.attr}")
    assert bad == []


@pytest.mark.parametrize("flow", [
    ("dse.model.evaluate", "dse.study"), ("dse.catalog.specs", "dse.model"), ("dse.evaluation.designs", "dse.search"),
    ("dse.campaign.grid", "dse.search"), ("dse.results.analysis", "dse.report"), ("dse.model.columns", "dse.study"),
    ("dse.study.parse", "dse.evaluation"), ("dse.storage.backends", "dse.search"), ("dse.storage.backends", "dse.study"),
])
def test_flow_runs_one_way(flow):
    """Upstream modules never import downstream ones (model <- catalog; sweep/report do not need Optuna)."""
    src, banned = flow

    def reach(m, seen):
        for d in GRAPH[m]:
            if d not in seen:
                seen.add(d)
                reach(d, seen)
        return seen
    assert not any(d == banned or d.startswith(banned + ".") for d in reach(src, set()))


#: the packages (and root modules) from upstream to downstream: each may import only from its own layer
#: and the layers before it. The flow: a study's YAML (study, with the catalog's specs and the workload)
#: becomes arrays of designs (evaluation) that the model evaluates into columns (results); search and
#: campaign drive evaluations; report, validation and cli sit on top.
LAYERS = (
    ("errors", "units"),
    ("process",),          # progress, signals, SLURM array position
    ("storage",),          # Optuna storages and their credentials
    ("catalog",),          # devices, models, runtimes, technology, acceptance table
    ("workload",),         # drafter, acceptance, k
    ("model",),            # the physics on arrays of designs
    ("acceptance",),       # the acceptance model fitted on the table
    ("api",),              # one design from names and numbers
    ("study",),            # study YAML -> StudySpec
    ("evaluation",),       # StudySpec + knob values -> designs -> metric columns
    ("results",),          # Parquet, fronts, analysis
    ("search",),           # Optuna, pre-search, breeder
    ("report",),           # figures and the HTML page
    ("campaign",),         # sweeps, Dask, export
    ("validation",),       # dse validate
    ("cli",),              # the command line
)
#: modules allowed at the root besides packages: the public entry points
ROOT_MODULES = {"__init__", "api", "errors", "units"}
MAX_MODULE_LINES = 700


def _layer_of(module: str) -> int:
    """``dse`` itself, the lazy facade (it imports only errors; results read its ``__version__``), is outside."""
    return next(i for i, names in enumerate(LAYERS) if module.split(".")[1] in names)


def _upward(graph) -> list[str]:
    return [f"{m} -> {d}" for m, deps in graph.items() if m != "dse" for d in deps
            if d != "dse" and _layer_of(d) > _layer_of(m)]


def test_root_holds_only_the_entry_points():
    assert {p.stem for p in ROOT.glob("*.py")} == ROOT_MODULES


def test_every_package_has_a_layer():
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} | (ROOT_MODULES - {"__init__"})
    assert tops == {n for names in LAYERS for n in names}


def test_packages_import_only_from_their_layer_or_upstream():
    assert _upward(GRAPH) == []


def test_layer_check_finds_a_planted_upward_import():
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["dse.model.roofline"].add("dse.search.runner")
    assert _upward(graph) == ["dse.model.roofline -> dse.search.runner"]


def test_no_module_is_two_concepts():
    """A module over 700 lines is two concepts (DEVELOPERS' guide)."""
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_evaluation_and_sweep_do_not_load_optuna():
    import subprocess
    import sys
    code = ("import sys, dse.evaluation.designs, dse.campaign.grid, dse.results.frame, dse.results.analysis; "
            "print('optuna' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_package_says_what_it_owns():
    for info in pkgutil.walk_packages(dse.__path__, "dse."):
        if info.ispkg:
            doc = importlib.import_module(info.name).__doc__ or ""
            assert len(doc.split()) >= 8, info.name


def test_public_api_is_declared():
    for name in dse.__all__:
        assert getattr(dse, name) is not None, name
    assert {"evaluate_design", "load_study", "parse_study", "run_study", "sweep", "load_results",
            "pareto_mask", "Workload"} <= set(dse.__all__)


def test_every_package_is_installed():
    """pyproject lists packages by hand: a new one left out breaks `pip install .` (not editable)."""
    import tomllib
    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert found <= listed
