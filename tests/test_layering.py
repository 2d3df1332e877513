"""The architecture DESIGN.md section 2 draws, checked in the source: imports point one way,
and no package reaches into another's private members (the host's internals reach the
layers above only through mnrt/host/internal.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mnrt

ROOT = Path(mnrt.__file__).parent
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())
# Modules every package may use: the error classes, the version and warnings to users.
SHARED = {"errors", "_version", "user_warning"}

# DESIGN.md section 2: device <- host <- capture; format depends on nothing of mnrt;
# replay uses host and format and never capture or compiler.
MAY_NOT_IMPORT = {
    "format": set(PACKAGES) - {"format"},
    "device": set(PACKAGES) - {"device"},
    "host": {"capture", "replay", "runner", "compiler", "dashboard"},
    "capture": {"replay", "runner", "compiler", "dashboard"},
    "replay": {"capture", "compiler", "runner", "dashboard"},
}

# namedtuple's public methods, underscored so as not to clash with field names
NAMEDTUPLE = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> list[tuple[str, bool]]:
    """The mnrt packages or top-level modules `path` imports, each with whether the import
    is at module level (not inside a function)."""
    package = list(path.relative_to(ROOT).parts[:-1])
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module.split(".") if node.module else []
            if node.level:
                full = package[: len(package) - node.level + 1] + module
            elif module[:1] == ["mnrt"]:
                full = module[1:]
            else:
                continue
            targets = full[:1] or [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".")[1] for a in node.names if a.name.startswith("mnrt.")]
        else:
            continue
        found.extend((target, id(node) in top) for target in targets)
    return found


@pytest.mark.parametrize("package", sorted(MAY_NOT_IMPORT))
def test_imports_point_one_way(package):
    wrong = sorted(
        f"{path.relative_to(ROOT.parent)} imports mnrt.{target}"
        for path in _modules(package)
        for target, _ in _imports(path)
        if target in MAY_NOT_IMPORT[package]
    )
    assert not wrong


def test_the_runner_loads_the_compiler_only_when_a_command_needs_it():
    eager = sorted(
        str(path.relative_to(ROOT.parent))
        for path in _modules("runner")
        for target, at_top in _imports(path)
        if target == "compiler" and at_top
    )
    assert not eager


def _defined(package: str) -> set[str]:
    """Every name `package` defines: functions, classes, module and class attributes,
    attributes set on self or cls, and strings (a __slots__ entry)."""
    names = set()
    for path in _modules(package):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_reaches_into_another_s_private_members(package):
    """A private attribute (`x._name`) read or set on anything but self or cls must be one
    the package itself defines."""
    own = _defined(package)
    wrong = sorted(
        f"{path.relative_to(ROOT.parent)}:{node.lineno} .{node.attr}"
        for path in _modules(package)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and node.attr not in NAMEDTUPLE
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        and node.attr not in own
    )
    assert not wrong
