"""The layout is the architecture: imports only point down the layers (docs/INTERNALS.md "Packages"), peers
of one layer do not import each other, no two modules import each other in a circle (not even for
annotations), classes are composed rather than assembled from mixins, and imports sit at the top of a module.
Read from the code's own imports and classes (AST), so that it stays true."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# package -> (folder, layer). A module may import its own package and packages of lower layers only.
PACKAGES: dict[str, tuple[str, int]] = {
    "ferry.wire": ("wire", 0),
    "ferry.zk": ("zk", 1),
    "ferry.broker": ("broker", 2),
    "ferry.client": ("client", 2),
    "ferry.audit": ("audit", 3),
    "ferry.schemas": ("schemas", 3),
    "ferry.mirror": ("mirror", 4),
    "ferry.loaders": ("loaders", 4),
    "ferry": ("ferry", 5),  # the console, the demo: composition
    "dags": ("dags", 6),  # Airflow's folder: composition
}
OLD_TOP_LEVEL = {"broker", "audit", "schemas", "mirror", "loaders", "wire", "zk", "client"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, (folder, _) in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts]) if parts else pkg] = path
    return out


MODULES = _modules()


def _package_of(module: str) -> str:
    """The longest PACKAGES key that is a prefix of the module (ferry.zk.x -> ferry.zk, ferry.cli -> ferry)."""
    best = ""
    for pkg in PACKAGES:
        if (module == pkg or module.startswith(pkg + ".")) and len(pkg) > len(best):
            best = pkg
    return best


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (annotations only: no runtime edge)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out.update(id(n) for b in node.body for n in ast.walk(b))
    return out


def _imports(path: Path, runtime_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) for every import of a ferry module in the file, at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_only(tree) if runtime_only else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((node.lineno, sub if sub in MODULES else node.module))
    return [(line, m) for line, m in found if m.split(".")[0] in {"ferry", "dags"} | OLD_TOP_LEVEL]


def test_every_layer_has_code() -> None:
    for pkg, (folder, _) in PACKAGES.items():
        assert (ROOT / folder / "__init__.py").exists() or pkg == "dags", f"{folder}/ is not a package"


def test_imports_point_down() -> None:
    problems = []
    for module, path in MODULES.items():
        own = _package_of(module)
        own_layer = PACKAGES[own][1]
        for line, target in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if target.split(".")[0] in OLD_TOP_LEVEL:
                problems.append(f"{where}: outside the ferry namespace")
                continue
            dep = _package_of(target)
            if not dep or dep == own:
                continue
            dep_layer = PACKAGES[dep][1]
            if dep_layer > own_layer:
                problems.append(f"{where}: upward ({own} is layer {own_layer}, {dep} is {dep_layer})")
            elif dep_layer == own_layer:
                problems.append(f"{where}: sideways between peers {own} and {dep}")
    assert not problems, "\n".join(problems)


def test_no_import_circles() -> None:
    graph = {m: {t for _, t in _imports(p, runtime_only=True) if t in MODULES and t != m} for m, p in MODULES.items()}
    # a package's __init__ re-exporting its modules is not a circle with them
    for m in graph:
        graph[m] = {t for t in graph[m] if not (m.startswith(t + ".") and MODULES[t].name == "__init__.py")}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:  # Tarjan's SCC
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strongconnect(v)
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


# Modules still waiting for their split by duty (issue 14); each entry goes when its module is split
# (strict: a split module left on this list fails).
TO_SPLIT: set[str] = set()


@pytest.mark.parametrize("module", [
    pytest.param(m, marks=pytest.mark.xfail(strict=True, reason="not split yet")) if m in TO_SPLIT else m
    for m in sorted(m for m in MODULES if not m.startswith("dags"))])
def test_no_product_module_over_400_lines(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= 400, f"{MODULES[module].relative_to(ROOT)} has {lines} lines; split it by duty"


def test_every_package_is_installed() -> None:
    """pyproject's explicit package list names every package folder (else a wheel silently lacks it)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {m for m, p in MODULES.items() if p.name == "__init__.py" and not m.startswith("dags")}
    assert found == listed, f"missing from pyproject: {sorted(found - listed)}; extra: {sorted(listed - found)}"


def _product_trees() -> dict[str, ast.Module]:
    return {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}


TREES = _product_trees()


def _classes() -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """class name -> [(module, node)] over the product."""
    out: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append((module, node))
    return out


CLASSES = _classes()


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, ast.Name | ast.Attribute)]


def _is_error(name: str, seen: frozenset[str] = frozenset()) -> bool:
    """An exception class: errors form hierarchies on purpose (one name per idea, caught by family)."""
    if name.endswith(("Error", "Exception", "Warning", "Exit")) or name in {"Exception", "BaseException"}:
        return True
    return any(_is_error(b, seen | {name}) for _, n in CLASSES.get(name, []) for b in _base_names(n)
               if b not in seen)


# Project classes that others may extend, each a kind-of relation with a reason (a part-of relation is a
# collaborator, not a base class).
BASES_ALLOWED: dict[str, str] = {
    "AbstractIndex": "Kafka's AbstractIndex: an offset index and a time index are kinds of index over one file",
}


def test_no_mixins_in_product() -> None:
    """A class is a small coordinator over collaborators, not the sum of mixin parts sharing its `self`."""
    problems = []
    for name, defs in CLASSES.items():
        for module, node in defs:
            for base in _base_names(node):
                if base in CLASSES and not _is_error(base) and base not in BASES_ALLOWED:
                    problems.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno} class {name}({base})")
    assert not problems, "project classes used as base classes (compose instead):\n" + "\n".join(problems)


def test_no_product_class_over_400_lines() -> None:
    """Counting what it inherits from the project, so that a class cannot grow by moving code into a base."""
    def size(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name not in CLASSES or name in seen:
            return 0
        _, node = CLASSES[name][0]
        own = (node.end_lineno or node.lineno) - node.lineno + 1
        return own + sum(size(b, seen | {name}) for b in _base_names(node) if not _is_error(b))

    big = sorted((size(n), n) for n in CLASSES if not _is_error(n))
    assert all(lines < 400 for lines, _ in big), f"classes of 400 lines or more: {[b for b in big if b[0] >= 400]}"


def test_no_class_name_defined_twice() -> None:
    """One name per idea: a reader who finds `UnknownTopicError` must not have to ask which one."""
    twice = {n: sorted(str(MODULES[m].relative_to(ROOT)) for m, _ in d) for n, d in CLASSES.items()
             if len({m for m, _ in d}) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"


def test_no_circles_through_annotations() -> None:
    """TYPE_CHECKING imports included: a circle hidden from the interpreter is still a circle in the design."""
    graph = {m: {t for _, t in _imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    for m in graph:
        graph[m] = {t for t in graph[m] if not (m.startswith(t + ".") and MODULES[t].name == "__init__.py")}
    # iterative reachability: a circle is a module reachable from one of its own imports
    circles = []
    for start in graph:
        todo, seen = list(graph[start]), set()
        while todo:
            v = todo.pop()
            if v == start:
                circles.append(start)
                break
            if v not in seen:
                seen.add(v)
                todo.extend(graph[v])
    assert not circles, f"modules on an import circle (annotations included): {sorted(circles)}"


def _local_imports() -> list[tuple[str, int, str]]:
    """(module, line, imported ferry module) for each import of ferry's own code inside a function."""
    out = []
    for module, tree in TREES.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in {"ferry", "dags"}:
                    out.append((module, node.lineno, node.module))
                elif isinstance(node, ast.Import):
                    out += [(module, node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ferry"]
    return sorted(set(out))


# Function-local imports of ferry's own modules: allowed only where importing at the top would make a light
# command or DAG parse pay for Spark, Airflow or pyarrow; each carries a comment on its line or the one above.
LOCAL_IMPORTS_MAX = 8  # five today; the bar was 30


def test_function_local_imports_are_few_and_explained() -> None:
    found = _local_imports()
    unexplained = []
    for module, line, target in found:
        lines = MODULES[module].read_text().splitlines()
        here, above = lines[line - 1], lines[line - 2] if line >= 2 else ""
        if "#" not in here and not above.strip().startswith("#"):
            unexplained.append(f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}")
    assert not unexplained, "function-local imports of ferry modules without a reason:\n" + "\n".join(unexplained)
    assert len(found) <= LOCAL_IMPORTS_MAX, f"{len(found)} function-local imports of ferry modules (max {LOCAL_IMPORTS_MAX})"
