"""The package's shape: its packages import each other only downwards, in data-flow order (the
import-linter contract in pyproject.toml), no import circle among hpcshuffle's modules, parsing a
config needs no torch, and the top level keeps only the few plain modules beside the packages (the
data flow reads from `ls hpcshuffle/`).

Imports are read from the source (every `import`, also those inside functions, which is how a
circle hides), not by importing: a module is a node, `from hpcshuffle.a import b` an edge to
`hpcshuffle.a.b` when that is a module, else to `hpcshuffle.a`. An edge from a package's own
modules to the package's `__init__` (re-exports) is kept too, so an `__init__` that imported a
module importing it back would show.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hpcshuffle"
# the layer contract, run on a checkout (its pyproject.toml and hpcshuffle/); exits 1 when broken
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
TOP_LEVEL_MODULES = 8  # __init__, train, errors and the like; everything else lives in a package
LARGEST_MODULE = 400  # lines


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else base)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search with an on-path mark)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (circle := visit(target)):
                return circle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (circle := visit(start)):
            return circle
    return None


def test_the_search_finds_a_circle_and_its_absence():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_among_hpcshuffle_modules():
    graph = import_graph()
    assert "hpcshuffle.analysis.study" in graph and graph["hpcshuffle.train"]  # the walk saw the package
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_top_level_holds_few_plain_modules_and_no_module_is_long():
    plain = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(plain) <= TOP_LEVEL_MODULES, f"plain modules beside the packages: {plain}"
    long = {str(path.relative_to(PACKAGE.parent)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > LARGEST_MODULE}
    assert not long, f"modules over {LARGEST_MODULE} lines (split by what they own): {long}"
    assert len((PACKAGE / "train.py").read_text().splitlines()) < 300, "train.py: parse -> build -> loop -> close"


def lint_imports(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS], cwd=checkout, env={"PYTHONPATH": str(checkout)},
                          capture_output=True, text=True, timeout=120)


def test_packages_import_only_the_layers_below_them(tmp_path):
    """The contract holds here, and breaks, naming the import, when storage/ imports comm/ (a layer above)."""
    kept = lint_imports(PACKAGE.parent)
    assert kept.returncode == 0 and "1 kept, 0 broken" in kept.stdout, kept.stdout + kept.stderr
    shutil.copytree(PACKAGE, tmp_path / "hpcshuffle", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PACKAGE.parent / "pyproject.toml", tmp_path)
    with open(tmp_path / "hpcshuffle" / "storage" / "store.py", "a") as store:
        store.write("from hpcshuffle.comm.world import World  # noqa: E402  (the break under test)\n")
    broken = lint_imports(tmp_path)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "hpcshuffle.storage is not allowed to import hpcshuffle.comm" in broken.stdout, broken.stdout
    assert "hpcshuffle.storage.store -> hpcshuffle.comm.world" in broken.stdout, broken.stdout


def test_parsing_a_run_config_imports_no_torch():
    check = "import sys, hpcshuffle.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=PACKAGE.parent).returncode == 0
