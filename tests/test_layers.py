"""The layers of docs/design.md hold in the source: no module imports from a row above its own.

Every ``from byoc... import`` / ``import byoc...`` in the package (at module
level or inside a function) is read with ``ast`` and ranked by the row of
the layer picture its module belongs to. Vendor packages (``annotations/``,
``codegens/``) may use the vendor contract and each other, nothing else.
And the package has no import cycles: see :func:`test_the_package_has_no_import_cycles`.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BYOC = ROOT / "byoc"

# rows of the picture in docs/design.md, bottom first: (module prefix, row)
ROWS = [
    ("byoc.errors", 0), ("byoc._version", 0), ("byoc._tvm_ffi", 0),
    ("byoc.vendor", 1), ("byoc.codegens", 1), ("byoc.annotations", 1),  # the contract and the vendors on it
    ("byoc.deploy", 2),  # targets, toolchain; the package itself imports nothing
    ("byoc.deploy.targets", 2), ("byoc.deploy.toolchain", 2),
    ("byoc.host", 3),
    # the pipeline's stage packages, in the order they depend on each other (byoc/pipeline/__init__.py): the
    # artifact is what build makes and placement times, so it ranks below both
    ("byoc.pipeline", 4), ("byoc.pipeline.frontend", 4.0), ("byoc.pipeline.annotate", 4.1),
    ("byoc.pipeline.partitioning", 4.2), ("byoc.pipeline.artifact", 4.3), ("byoc.pipeline.placement", 4.4),
    ("byoc.pipeline.build", 4.5),
    ("byoc.deploy.standalone", 5),
    ("byoc.tools", 6), ("byoc.generation", 6),
    ("byoc._moved", 7),
    ("byoc.partition", 7),  # the callable module behind byoc.partition(...): the API
    ("byoc.partition.__main__", 8), ("byoc.examples", 8), ("byoc.optable", 8), ("byoc.conformance", 8),
]
API_ROW = 7  # byoc/__init__.py, and ``import byoc`` / ``from byoc import X``
VENDOR_SIDE = ("byoc.codegens", "byoc.annotations", "byoc.vendor", "byoc.errors")
# The one convenience the design names: methods that import a higher layer when called.
LAZY_UPWARD = {
    ("byoc.pipeline.artifact.artifact", "byoc.deploy.standalone"),  # Artifact.export_standalone() / run_emulated()
}
STAGES = ["byoc.pipeline.frontend", "byoc.pipeline.annotate", "byoc.pipeline.partitioning", "byoc.pipeline.artifact",
          "byoc.pipeline.placement", "byoc.pipeline.build"]


def _row(module: str) -> float:
    if module == "byoc":
        return API_ROW
    for prefix, row in sorted(ROWS, key=lambda r: -len(r[0])):
        if module == prefix or module.startswith(prefix + "."):
            return row
    raise AssertionError(f"{module} is in no row of the layer picture; add it to docs/design.md and ROWS")


def _module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _imports(path: Path, relative_ok: bool = False) -> list[str]:
    """The byoc modules ``path`` imports, anywhere in it (relative imports only where ``relative_ok``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "byoc":
            if node.module == "byoc":  # from byoc import X: a submodule or an API name
                found += [f"byoc.{a.name}" if (BYOC / a.name).exists() or (BYOC / f"{a.name}.py").exists()
                          else "byoc" for a in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level and not relative_ok:
            raise AssertionError(f"{path}: relative import; byoc uses absolute imports")
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "byoc"]
    return found


def _package_modules():
    for path in sorted(BYOC.rglob("*.py")):
        if path.relative_to(BYOC).parts[0] in ("codegens", "annotations"):
            continue  # symlinks to the vendor packages, checked below
        yield _module_name(path, BYOC, "byoc"), path


def _upward(modules) -> list[str]:
    """The imports of ``modules`` ((name, path) pairs) that reach a higher row, outside :data:`LAZY_UPWARD`."""
    upward = []
    for name, path in modules:
        row = API_ROW if name == "byoc" else _row(name)
        for imported in _imports(path):
            if _row(imported) > row and (name, _base(imported)) not in LAZY_UPWARD:
                upward.append(f"{name} (row {row}) imports {imported} (row {_row(imported)})")
    return upward


def test_every_module_imports_only_from_its_row_or_below():
    upward = _upward(_package_modules())
    assert not upward, "\n".join(upward)


def test_the_stages_rank_in_flow_order_and_hold_every_pipeline_module():
    assert [_row(stage) for stage in STAGES] == sorted({_row(stage) for stage in STAGES})
    loose = [name for name, _ in _package_modules()
             if name.startswith("byoc.pipeline.") and not name.startswith(tuple(s + "." for s in STAGES))
             and name not in STAGES]
    assert not loose, f"pipeline modules outside a stage package: {loose}"


def test_an_import_against_the_flow_is_caught(tmp_path):
    early = tmp_path / "early.py"
    early.write_text("def f():\n    from byoc.pipeline.build.builder import build\n")
    late = tmp_path / "late.py"
    late.write_text("from byoc.pipeline.frontend.onnx_model import TensorSpec\n")
    assert _upward([("byoc.pipeline.frontend.early", early), ("byoc.pipeline.build.late", late)]) == [
        "byoc.pipeline.frontend.early (row 4.0) imports byoc.pipeline.build.builder (row 4.5)"
    ]


def _base(module: str) -> str:
    """The LAZY_UPWARD target ``module`` is (or is inside), else ``module``."""
    for _, target in LAZY_UPWARD:
        if module == target or module.startswith(target + "."):
            return target
    return module


@pytest.mark.parametrize("package", ["annotations", "codegens"])
def test_vendor_packages_use_only_the_vendor_contract(package):
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for imported in _imports(path, relative_ok=True):  # a vendor package is its own
            if not imported.startswith(VENDOR_SIDE) or imported == "byoc":
                offending.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not offending, "\n".join(offending)


def test_the_lazy_upward_imports_are_inside_functions():
    for module, target in LAZY_UPWARD:
        path = BYOC.joinpath(*module.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(path.read_text())
        top_level = [n for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(target)]
        assert not top_level, f"{module} imports {target} at module level"
        assert any(i.startswith(target) for i in _imports(path)), (
            f"{module} no longer imports {target}: drop it from LAZY_UPWARD and docs/design.md"
        )


# -- import cycles --------------------------------------------------------------------
def _import_graph(packages: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Module -> {module it imports: "file:line"}, over the modules of ``packages`` (name -> folder).

    Every import counts, at module level or inside a function, relative ones
    resolved; ``from P import n`` imports ``P.n`` when that is a module, else
    ``P``. Modules outside ``packages`` are left out, and so is the implicit
    import of a module's parent packages (else every module of a package whose
    ``__init__`` re-exports would be in a cycle with it). Imports under ``if
    TYPE_CHECKING:`` count too: a circle that only type checkers follow still
    ties two modules together. An import by a string
    (``importlib.import_module``, as ``byoc._moved`` does for the old paths
    and the vendor registry for the built-in vendors) is not seen.
    """
    files, shown = {}, {}
    for package, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            files[_module_name(path, folder, package)] = path
            shown[path] = path.relative_to(folder.parent).as_posix()

    def known(name: str):  # the longest prefix of ``name`` that is a module here
        parts = name.split(".")
        while parts and ".".join(parts) not in files:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, dict[str, str]] = {}
    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges = graph[module] = {}
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                targets = [known(f"{source}.{a.name}") or known(source) for a in node.names]
            else:
                continue
            for target in targets:
                if target and target != module:
                    edges.setdefault(target, f"{shown[path]}:{node.lineno}")
    return graph


def _cycles(graph: dict[str, dict[str, str]]) -> list[tuple[list[str], set[str]]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected set of more than one module, and the set."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def visit(v):  # Tarjan; the package is a few dozen modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:
        start = min(component)
        paths, seen = [[start]], {start}
        while paths:  # breadth first: the shortest way back to ``start``
            path = paths.pop(0)
            if start in graph[path[-1]]:
                cycles.append((path + [start], component))
                break
            for w in sorted(graph[path[-1]]):
                if w in component and w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
    return cycles


def _describe(cycle: list[str], component: set[str], graph) -> str:
    text = " -> ".join(cycle) + "  (" + ", ".join(graph[a][b] for a, b in zip(cycle, cycle[1:])) + ")"
    others = sorted(component - set(cycle))
    return text + (f"; {', '.join(others)} are in the same circle" if others else "")


def test_the_package_has_no_import_cycles():
    """No chain of imports of ``byoc`` (with its vendor packages) leads back to where it started.

    Every import counts, inside a function and under ``if TYPE_CHECKING:``
    too. There are no exceptions: the one convenience that reaches up
    (:data:`LAZY_UPWARD`) imports a module that does not import back:
    ``deploy/standalone`` lowers partitions with ``pipeline/build/lowering``,
    which imports neither the builder nor the artifact. The report is a
    function of the plan (``byoc.report``), which the pipeline never imports.
    """
    graph = _import_graph({"byoc": BYOC, "byoc.codegens": ROOT / "codegens", "byoc.annotations": ROOT / "annotations"})
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_describe(*c, graph) for c in cycles)


def test_the_cycle_check_finds_a_function_local_relative_cycle(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (package / "c.py").write_text("import pkg.a\n")
    graph = _import_graph({"pkg": package})
    assert [_describe(*c, graph) for c in _cycles(graph)] == [
        "pkg.a -> pkg.sub.b -> pkg.c -> pkg.a  (pkg/a.py:1, pkg/sub/b.py:2, pkg/c.py:1)"
    ]


def test_the_cycle_check_counts_imports_only_type_checkers_run(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.a import f\n"
    )
    graph = _import_graph({"pkg": package})
    assert graph["pkg.b"] == {"pkg.a": "pkg/b.py:3"}
    assert [_describe(*c, graph) for c in _cycles(graph)] == ["pkg.a -> pkg.b -> pkg.a  (pkg/a.py:2, pkg/b.py:3)"]


def test_old_import_paths_give_the_moved_module_with_a_deprecation_warning():
    import importlib
    import sys

    from byoc._moved import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == [
            f"{old} moved to {new}; import it from there (the old path goes in 0.3)"
        ], old
    # state reached through an old path is the same object: one registry, not two
    from byoc.vendor.registry import REGISTRY

    assert importlib.import_module("byoc.registry").REGISTRY is REGISTRY


def test_the_stage_packages_named_like_a_flat_module_still_give_its_names():
    """byoc 0.1's byoc.pipeline.frontend, .artifact and .placement are packages now: each still gives what
    the module gave, as the same objects (the other flat paths are in byoc._moved)."""
    import byoc
    from byoc.pipeline import artifact, frontend, placement
    from byoc.pipeline.placement import placement as placement_module

    assert (frontend.import_model, frontend.load_model, frontend.ImportedModel) == (
        byoc.import_model, byoc.load_model, byoc.ImportedModel)
    assert (artifact.Artifact, artifact.load, artifact.METADATA_FUNCTION) == (byoc.Artifact, byoc.load, "byoc_metadata")
    assert placement.place_by_measurement is placement_module.place_by_measurement
