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


# bot/'s stages, bottom up: a module may import its own stage and those below it, never one above. The kernel's
# modules sit at the bottom (keys, identity, turn, ...); only the package's entry points (``python -m bot`` and
# ``bot.__all__``) and the ``Settings`` they read (composed of every stage's piece) stand flat in bot/ and rank with
# serve, the top.
BOT_STAGES = ["kernel", "workspace", "oauth", "thread", "runs", "queue", "receive", "serve"]
KERNEL_RANKS = {"__main__": "serve", "__init__": "serve", "settings": "serve"}


def bot_stage(module: str) -> str:
    """``bot.queue.jobs`` → ``queue``; ``bot.keys`` → ``kernel``; ``bot.__main__`` → ``serve`` (an entry point)."""
    parts = module.split(".")[1:] or ["__init__"]
    if parts[0] in BOT_STAGES:
        return parts[0]
    return KERNEL_RANKS.get(parts[0], "kernel")


def bot_module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def test_bot_stages_import_only_their_own_and_lower_stages() -> None:
    rank = {stage: i for i, stage in enumerate(BOT_STAGES)}
    upward: list[tuple[str, str]] = []
    for path in (ROOT / "bot").rglob("*.py"):
        here = bot_module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] if node.module != "bot" else [f"bot.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            upward.extend((here, t) for t in targets
                          if t.split(".")[0] == "bot" and rank[bot_stage(t)] > rank[bot_stage(here)])
    assert upward == []


def test_every_bot_module_lives_in_a_stage_or_is_a_named_kernel_module() -> None:
    """A new flat module in bot/ has to be placed: in a stage folder, or named here as part of the kernel."""
    kernel = {"settings", "keys", "person_keys", "identity", "redis", "embedded_redis", "metrics", "metrics_settings",
              "logs", "slack_client", "errors", "i18n", "audit", "telemetry", "markup", "turn", "settings_base",
              *KERNEL_RANKS}
    flat = sorted(p.stem for p in (ROOT / "bot").glob("*.py") if p.stem not in kernel)
    assert flat == []


WORKSPACE_FACES = ("bot.workspace.settings", "bot.workspace.spend", "bot.workspace.admin")


def test_workspace_parts_are_imported_through_their_faces() -> None:
    """``from bot.workspace.settings import X`` outside ``settings/``, never ``bot.workspace.settings.store``."""
    deep: list[tuple[str, str]] = []
    for path in (ROOT / "bot").rglob("*.py"):
        here = bot_module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [])
            deep.extend((here, n) for n in names for face in WORKSPACE_FACES
                        if n.startswith(f"{face}.") and not (here == face or here.startswith(f"{face}.")))
    assert deep == []
