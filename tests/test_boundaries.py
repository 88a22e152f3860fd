"""Imports run one way (bot → agent_core → tools), and each package's __all__ is what it exports."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "agent_core": {"bot", "slack_bolt", "slack_sdk"},
    "tools": {"bot", "agent_core", "slack_bolt", "slack_sdk"},
}


def imported_modules(package: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update((str(path.relative_to(ROOT)), a.name.split(".")[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((str(path.relative_to(ROOT)), node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_run_one_way(package: str) -> None:
    bad = sorted((path, mod) for path, mod in imported_modules(package) if mod in FORBIDDEN[package])
    assert bad == []


@pytest.mark.parametrize("package", ["agent_core", "tools", "bot"])
def test_all_names_exist(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported, f"{package} must declare __all__"
    assert [name for name in exported if not hasattr(module, name)] == []


FACES = {"bot": {"agent_core", "tools"}, "agent_core": {"tools"}}


@pytest.mark.parametrize("package", sorted(FACES))
def test_other_packages_are_imported_through_their_face(package: str) -> None:
    """``from agent_core import X``, never ``from agent_core.loop import X``: a package's __all__ is its port."""
    bad: list[tuple[str, str]] = []
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [])
            bad.extend((str(path.relative_to(ROOT)), n) for n in names if n.split(".")[0] in FACES[package]
                       and "." in n)
    assert bad == []
