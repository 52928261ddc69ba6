"""The package's two rooms (`tfbook.build`): read from the source with `ast`, no library module imports the book's
machinery and no import cycle exists anywhere in `tfbook`; every library module imports without the ``book`` extra.

An import is an edge from the importing module to the module it names: ``import tfbook.x``, ``from tfbook import
x`` (to ``tfbook.x`` when that is a module, else to ``tfbook``), relative imports, and
``importlib.import_module("tfbook...")`` with a constant name; imports inside functions count too.
"""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
MACHINERY = "tfbook.build"
# The book extra's packages (and the executor's): the library must import without them.
BOOK_ONLY = ("nbformat", "nbclient", "psutil", "jupyter_book", "sphinx", "ipykernel")


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module of the package ``root / "tfbook"`` by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted((root / "tfbook").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(name: str, known: dict[str, pathlib.Path]) -> str | None:
    """The longest known module that ``name`` starts with (``tfbook.x.f`` -> ``tfbook.x``), None outside."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imported(node: ast.AST, package: str, known: dict[str, pathlib.Path]) -> list[str]:
    """The modules of `tfbook` that one AST node imports (empty for other nodes)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[:len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str)
          and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"):
        names = [node.args[0].value]
    else:
        return []
    return [m for m in (_resolve(n, known) for n in names if n == "tfbook" or n.startswith("tfbook.")) if m]


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of `tfbook` it imports (itself left out)."""
    known = modules(root)
    graph = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = {m for node in ast.walk(ast.parse(path.read_text(), str(path))) for m in _imported(node, package, known)}
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def is_machinery(module: str) -> bool:
    return module == MACHINERY or module.startswith(MACHINERY + ".")


def crossings(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Library modules (outside `tfbook.build`) that import the machinery, with what they import."""
    return {m: sorted(filter(is_machinery, edges)) for m, edges in graph.items()
            if not is_machinery(m) and any(map(is_machinery, edges))}


# --- the rule, on tfbook itself --------------------------------------------------------------------------------

def test_no_import_cycle_in_tfbook():
    assert cycles(import_graph()) == []


def test_the_library_never_imports_the_machinery():
    assert crossings(import_graph()) == {}


def test_the_graph_reads_the_package():
    graph = import_graph()
    assert {"tfbook", "tfbook.build", "tfbook.build.bench", "tfbook.besov.transformer"} <= set(graph)
    assert "tfbook.validate" in graph["tfbook.besov.transformer"]
    assert "tfbook.build.bench_core" in graph["tfbook.build.bench"]


def test_every_library_module_imports_without_the_book_extra():
    """Each library module imported in a fresh interpreter in which the book extra's packages raise ImportError."""
    library = sorted(m for m in modules(ROOT) if not is_machinery(m))
    script = textwrap.dedent(f"""
        import importlib, importlib.abc, sys
        BLOCKED = {BOOK_ONLY!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is in the book extra")
                return None

        sys.meta_path.insert(0, Block())
        for name in {library!r}:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED + ("tfbook.build",))
        assert not leaked, leaked
        """)
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]


# --- the checks catch what they must: the old state, on a synthetic package -----------------------------------

def test_cycles_are_found_in_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["e", "e2"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _package(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_old_state_fails_both_rules(tmp_path):
    """Before `tfbook.build`: chapters registered their benchmarks with the runner, and the audit, the claims page
    and the executor imported one another (lazily, by every import form the graph reads)."""
    root = _package(tmp_path, {
        "tfbook/__init__.py": "",
        "tfbook/besov/__init__.py": "from tfbook.build import bench\n",
        "tfbook/foundation.py": "import importlib\nbench = importlib.import_module('tfbook.build.bench')\n",
        "tfbook/colsym/__init__.py": "from ..build.bench import register\n",
        "tfbook/build/__init__.py": "",
        "tfbook/build/bench.py": "import tfbook.build.bench_core\n",
        "tfbook/build/bench_core.py": "from tfbook import besov, colsym\n",
        "tfbook/build/claims_audit.py": "def run():\n    from tfbook.build.notebooks import execute\n",
        "tfbook/build/claims_page.py": "from . import claims_audit\n",
        "tfbook/build/notebooks.py": "from tfbook.build import claims_page\n",
    })
    graph = import_graph(root)
    assert cycles(graph) == [["tfbook.besov", "tfbook.build.bench", "tfbook.build.bench_core", "tfbook.colsym"],
                             ["tfbook.build.claims_audit", "tfbook.build.claims_page", "tfbook.build.notebooks"]]
    assert crossings(graph) == {"tfbook.besov": ["tfbook.build.bench"], "tfbook.colsym": ["tfbook.build.bench"],
                                "tfbook.foundation": ["tfbook.build.bench"]}
