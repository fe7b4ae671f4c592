"""The layout is the architecture: imports only point down the layers (DESIGN.md "Layout"), peers of one
layer do not import each other, and no two modules import each other in a circle. Read from the code's
own imports (AST), function-local imports included, so that it stays true."""

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
