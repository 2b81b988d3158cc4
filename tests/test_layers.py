"""The library's layers (issue 15): specs -> catalog -> pipeline -> estimate -> the planners and simulators ->
report -> cli. A module imports only from its own layer or the ones below, lazily or not, type
checking included: an upward import is a dependency the layer below cannot be used without."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuplan"

# Lowest first; a top-level module or package of gpuplan belongs to exactly one layer
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "units", "inputs"}),  # the vocabulary: errors, SI units, input parsing
    frozenset({"specs"}),  # what a model, GPU, plan and config are, and which plans are valid
    frozenset({"catalog"}),  # the data: models, GPUs, hosts, prices, cluster files
    frozenset({"pipeline"}),  # schedules as action lists, their simulation, the bubble they leave
    frozenset({"estimate"}),  # memory, FLOPs, step time, calibration
    frozenset({"search", "serve", "cluster", "train", "runs", "experts", "slurm"}),
    frozenset({"report"}),  # the HTML and static reports of any command's document
    frozenset({"cli"}),
)
LAYER = {name: i for i, names in enumerate(LAYERS) for name in names}


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, gpuplan.<top>...) of every import of gpuplan in ``tree``, at any depth."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gpuplan":
                out += [(node.lineno, f"gpuplan.{a.name}") for a in node.names]
            elif node.module.startswith("gpuplan."):
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("gpuplan.")]
    return out


def _top(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def upward_imports() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        top = _top(path)
        if top == "__init__":
            continue
        for line, module in _imports(ast.parse(path.read_text(), str(path))):
            target = module.split(".")[1]
            if target == "__version__":
                continue
            if LAYER[target] > LAYER[top]:
                bad.append(f"{path.relative_to(SRC)}:{line}: {top} imports {module}")
    return bad


def test_every_module_of_the_library_has_a_layer():
    names = {_top(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert names <= set(LAYER), f"give these a layer in LAYERS: {sorted(names - set(LAYER))}"


def test_no_module_imports_from_a_layer_above_its_own():
    assert upward_imports() == []


def test_the_import_check_sees_an_upward_import(tmp_path):
    # the checker itself: an estimate module importing search is reported, a search module
    # importing estimate is not
    up = ast.parse("def f():\n    from gpuplan.search.plans import smallest_fitting_plan\n")
    down = ast.parse("from gpuplan.estimate.train import estimate_training\n")
    assert [LAYER[m.split(".")[1]] > LAYER["estimate"] for _, m in _imports(up)] == [True]
    assert [LAYER[m.split(".")[1]] > LAYER["search"] for _, m in _imports(down)] == [False]
