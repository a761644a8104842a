"""The code's layers: tape <- ops <- kernels <- models (the CLI lives in models). Imports point
one way, no package has an import cycle among its modules, and the engine and its rules import
nothing of their own packages inside functions (no lazy import hiding a cycle).

Read from the source with `ast`, so the test sees what a newcomer reads."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("tape", "ops", "kernels", "models")
# A package may import the ones before it. Above the engine's own modules, tape/ holds its
# public facade: tape/__init__ also loads the standard rules (ops), and tape.scipy (SciPy's
# functions, built on those rules) sits above ops; no other module inside tape/ imports ops.
FACADES = {"__init__": {"ops"}, "scipy": {"ops"}}


def _modules(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        name = ".".join(path.relative_to(ROOT / package).with_suffix("").parts)
        yield name, ast.parse(path.read_text(), str(path))


def _imports(package, module, tree):
    """(imported module or package, whether at module level, line) for the project's own."""
    top = {id(n) for n in tree.body}
    top |= {id(n) for node in tree.body if isinstance(node, (ast.If, ast.Try))
            for n in ast.walk(node)}
    base = module.split(".")[:-1] if not module.endswith("__init__") else \
        module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = [package] + base[:len(base) - (node.level - 1)]
                targets = [".".join(parts + ([node.module] if node.module else [a.name]))
                           for a in (node.names if not node.module else node.names[:1])]
            else:
                targets = [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            if t and t.split(".")[0] in LAYERS:
                yield t, id(node) in top, node.lineno


@pytest.mark.parametrize("package", LAYERS)
def test_imports_point_down_the_layers(package):
    allowed = set(LAYERS[:LAYERS.index(package) + 1])
    wrong = []
    for module, tree in _modules(package):
        extra = FACADES.get(module.split(".")[0], set()) if package == "tape" else set()
        for target, _, line in _imports(package, module, tree):
            if target.split(".")[0] not in allowed | extra:
                wrong.append(f"{package}/{module}.py:{line} imports {target}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


@pytest.mark.parametrize("package", ("tape", "ops"))
def test_no_imports_inside_functions(package):
    lazy = [f"{package}/{module}.py:{line} imports {target}"
            for module, tree in _modules(package)
            for target, at_top, line in _imports(package, module, tree) if not at_top]
    assert not lazy, "imports inside functions:\n" + "\n".join(lazy)


@pytest.mark.parametrize("package", LAYERS)
def test_no_import_cycles_between_modules(package):
    graph = {}
    for module, tree in _modules(package):
        name = f"{package}.{module}".removesuffix(".__init__")
        graph[name] = {t for t, _, _ in _imports(package, module, tree)
                       if t.startswith(package + ".") and t != name}
    graph = {m: {d for d in deps if d in graph} for m, deps in graph.items()}
    done, cycles = set(), []

    def visit(m, path):
        if m in path:
            cycles.append(" -> ".join(path[path.index(m):] + [m]))
            return
        if m in done:
            return
        for d in sorted(graph[m]):
            visit(d, path + [m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
