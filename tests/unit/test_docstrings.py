"""Every public class and function of the package says what it is in a docstring.

Read from the source with `ast`, nothing imported. Public: a module-level function or class whose
name has no leading underscore, and such a method of a public class (nested classes too); dunders
count as private. A method needs no docstring of its own when its class, or a class it derives
from that is found in the package, documents the same name: a Catalog's `read_chunks` or a
DataPath's `start_epoch` says what the base says, and a property's setter what its getter says.
Base names are resolved through the module's own classes and its imports of hpcshuffle modules,
following re-exports (`from hpcshuffle.plan import EpochPlan` finds plan/common.py's class).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hpcshuffle"
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class Module:
    """One parsed module: its path, its top-level classes and what its imports bind."""

    path: Path
    tree: ast.Module
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # `from m import x as y`: y -> (m, x)
    modules: dict[str, str] = field(default_factory=dict)  # `import m as y`: y -> m


def module_name(package: Path, path: Path) -> str:
    """The dotted name of the module at `path` (a package's `__init__` is the package)."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_package(package: Path) -> dict[str, Module]:
    """Every module under `package`, by dotted name."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        name, tree = module_name(package, path), ast.parse(path.read_text(), str(path))
        module = modules[name] = Module(path, tree)
        module.classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 more
                    anchor = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    source = ".".join(anchor[: len(anchor) - node.level + 1] + ([source] if source else []))
                module.names.update({alias.asname or alias.name: (source, alias.name) for alias in node.names})
            elif isinstance(node, ast.Import):
                module.modules.update({alias.asname: alias.name for alias in node.names if alias.asname})
    return modules


def find_class(modules: dict[str, Module], module: str, name: str, depth: int = 0):
    """(module, class) that `name` means in `module`, following imports; None outside the package."""
    if module not in modules or depth > 10:
        return None
    if name in modules[module].classes:
        return module, modules[module].classes[name]
    if name in modules[module].names:
        return find_class(modules, *modules[module].names[name], depth + 1)
    return None


def base_classes(modules: dict[str, Module], module: str, cls: ast.ClassDef):
    """The package's classes among `cls`'s bases, as (module, class)."""
    found = []
    for base in cls.bases:
        base = base.value if isinstance(base, ast.Subscript) else base  # Generic[T], Protocol[T]
        if isinstance(base, ast.Name):
            found.append(find_class(modules, module, base.id))
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            alias = base.value.id
            source = modules[module].modules.get(alias) or ".".join(modules[module].names.get(alias, ()))
            found.append(find_class(modules, source, base.attr))
    return [pair for pair in found if pair is not None]


def documented(modules: dict[str, Module], module: str, cls: ast.ClassDef, seen: frozenset = frozenset()) -> set[str]:
    """Names `cls` or any of its bases in the package defines with a docstring."""
    names = {node.name for node in cls.body if isinstance(node, DEFS) and ast.get_docstring(node)}
    for base_module, base in base_classes(modules, module, cls):
        if (base_module, base.name) not in seen:
            names |= documented(modules, base_module, base, seen | {(module, cls.name)})
    return names


def missing_docstrings(package: Path) -> list[str]:
    """`path:line name` of every public function, class and method without a docstring."""
    modules, missing = read_package(package), []

    def visit(module: str, body: list[ast.stmt], prefix: str, inherited: set[str]) -> None:
        for node in body:
            if not isinstance(node, DEFS) or node.name.startswith("_"):
                continue
            if ast.get_docstring(node) is None and node.name not in inherited:
                path = modules[module].path.relative_to(package.parent)
                missing.append(f"{path}:{node.lineno} {prefix}{node.name}")
            if isinstance(node, ast.ClassDef):
                visit(module, node.body, f"{prefix}{node.name}.", documented(modules, module, node))

    for name, module in modules.items():
        visit(name, module.tree.body, "", set())
    return missing


def test_every_public_definition_has_a_docstring():
    missing = missing_docstrings(PACKAGE)
    assert not missing, f"{len(missing)} public definitions without a docstring:\n" + "\n".join(missing)


def test_the_check_names_what_lacks_one_and_lets_overrides_go(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""A package."""\n')
    (package / "sub" / "__init__.py").write_text("from pkg.sub.base import Base\n")
    (package / "sub" / "base.py").write_text(
        "class Base:\n"
        '    """A base."""\n'
        "    def read(self):\n"
        '        """Read."""\n'
        "    def write(self): ...\n"
    )
    (package / "paths.py").write_text(
        "import pkg.sub.base as base_module\n"
        "from pkg.sub import Base\n"
        "def undocumented(): ...\n"
        "def _private(): ...\n"
        "class Child(Base):\n"
        '    """A child."""\n'
        "    def read(self): ...\n"  # the base documents it
        "    def write(self): ...\n"  # the base has it, undocumented
        "    def __len__(self): ...\n"
        "    @property\n"
        "    def size(self):\n"
        '        """Its size."""\n'
        "    @size.setter\n"
        "    def size(self, value): ...\n"
        "class Grandchild(Child):\n"
        '    """Two levels down."""\n'
        "    def read(self): ...\n"
        "class Aliased(base_module.Base):\n"
        '    """Through a module alias."""\n'
        "    def read(self): ...\n"
        "class Orphan(dict):\n"
        "    def read(self): ...\n"  # no base in the package documents it
    )
    assert missing_docstrings(package) == [
        "pkg/paths.py:3 undocumented",
        "pkg/paths.py:8 Child.write",
        "pkg/paths.py:21 Orphan",
        "pkg/paths.py:22 Orphan.read",
        "pkg/sub/base.py:5 Base.write",
    ]
