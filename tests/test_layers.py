"""The package's layout: imports point one way, down the layers, and the core is framework-free.

Layers, bottom to top (docs/architecture.md draws them). A module may import
modules of its own layer or of lower ones, never of a higher one, and no import
(lazy ones included) may close a cycle.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "looptoolkit"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


LAYERS: list[tuple[str, set[str]]] = [
    # Shared small types (device target, dtype rules, errors, optree's Node) and the
    # background thread: below the backends, which use them too.
    ("leaf", {"looptoolkit._common"}),  # and every module under it
    ("registry", {"looptoolkit.adapters"}),
    (
        "backends",
        {
            "looptoolkit.adapters.numpy",
            "looptoolkit.adapters._torch_cuda",
            "looptoolkit.adapters._torch_blocks",
            "looptoolkit.adapters._torch_gather",
            "looptoolkit.adapters._tensordict",
            "looptoolkit.adapters.torch",
            "looptoolkit.adapters._jax_blocks",
            "looptoolkit.adapters.jax",
            "looptoolkit.adapters.tf",
        },
    ),
    (
        "stores",
        {
            "looptoolkit.stores",
            "looptoolkit.stores._zarr",
            "looptoolkit.stores._hdf5",
            "looptoolkit.stores._arrow",
            "looptoolkit.stores._remote",
            "looptoolkit.stores._bucket_options",
            "looptoolkit.stores._bucket",
            "looptoolkit.stores._disk_cache",
            "looptoolkit.stores._parquet",
        },
    ),
    # Where the batches go: the container rules, the pytree helpers, to_device.
    ("transfer", {"looptoolkit.device", "looptoolkit.tree", "looptoolkit.transforms"}),
    # Which rows when: the epoch orders, their sources and the epoch cursor.
    ("order", {"looptoolkit.order"}),  # and every module under it
    # What the rows are: rectangular rows, records, store reads, mapped files.
    ("rows", {"looptoolkit._rows"}),  # and every module under it
    # Variable-length data: the column, its plans and layouts.
    ("ragged", {"looptoolkit.ragged"}),  # and every module under it
    # Mixtures: data made of several sources, and its order.
    ("mix", {"looptoolkit.mix"}),  # and every module under it
    # Augmentations: ops keyed to each row's place in the epoch, applied where the batch is
    # (token masking reads the ragged layouts' batches).
    ("augment", {"looptoolkit.augment"}),  # and every module under it
    # The one entry that recognises every kind of data, and read advice.
    ("inputs", {"looptoolkit._inputs"}),  # and every module under it
    # The delivery: the epoch's batch stream, the pass, the probe, stats.
    ("pipeline", {"looptoolkit._pipeline"}),  # and every module under it
    ("loader", {"looptoolkit.loader"}),
    (
        "integrations",
        {
            "looptoolkit.torch_data",
            "looptoolkit._torch_ragged",
            "looptoolkit._static",
            "looptoolkit.tf_data",
            "looptoolkit.distributed",
        },
    ),
    ("bench", {"looptoolkit.bench"}),  # and every module under it
    ("entry", {"looptoolkit.cli", "looptoolkit.__main__", "looptoolkit"}),
]
# The framework-free layers: everything below the integrations except the registry and
# backends (the store formats name their libraries, none of them a framework).
CORE_LAYERS = {"leaf", "stores", "transfer", "order", "rows", "mix", "inputs", "pipeline", "loader"}
CORE = {
    module
    for module in MODULES
    if any(
        module == m or module.startswith(m + ".")
        for name, members in LAYERS
        if name in CORE_LAYERS
        for m in members
    )
}
FRAMEWORKS = {"torch", "jax", "jnp", "tensorflow", "tf", "tensordict"}
MAX_LINES = 650  # the shared layering check's limit


def _layer(module: str) -> int:
    for rank, (_, members) in enumerate(LAYERS):
        inside = any(module.startswith(m + ".") for m in members if m != "looptoolkit")
        if module in members or inside:
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and docs/architecture.md)")


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            if name in MODULES and name != module and not module.startswith(name + "."):
                found.add(name)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
    upward = [dep for dep in GRAPH[module] if _layer(dep) > _layer(module)]
    assert upward == [], f"{module} imports from a higher layer: {upward}"


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in sorted(GRAPH[module]):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


@pytest.mark.parametrize("module", sorted(CORE))
def test_core_mentions_no_framework(module):
    hits = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            hits |= {a.name.split(".")[0] for a in node.names} & FRAMEWORKS
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            hits |= {node.module.split(".")[0]} & FRAMEWORKS
        elif isinstance(node, ast.Name) and node.id in FRAMEWORKS:
            hits.add(node.id)
        elif isinstance(node, ast.Constant) and node.value in FRAMEWORKS:
            hits.add(repr(node.value))
    assert hits == set(), f"{module} mentions {sorted(hits)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (> {MAX_LINES})"


def test_adapters_hold_no_benchmark_pipelines():
    # The comparison's loops live in looptoolkit.bench; adapters only adapt.
    for module in MODULES:
        if not module.startswith("looptoolkit.adapters"):
            continue
        tree = ast.parse(MODULES[module].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("looptoolkit.bench"), module
        defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert not defs & {
            "numpy_manual",
            "pure_python",
            "EpochPipeline",
            "naive_loop",
            "randperm_loop",
            "classic_dataset",
            "per_sample_dataloader",
        }, module
