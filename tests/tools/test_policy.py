"""ToolPolicy: defaults leave dangerous tools out; an explicit list is exactly what exists of it."""

from __future__ import annotations

from pydantic import BaseModel

from tools import Registry, ToolContext, ToolPolicy, tool


class NoArgs(BaseModel):
    pass


@tool()
async def safe(args: NoArgs, ctx: ToolContext) -> str:
    """Harmless."""
    return "ok"


@tool(dangerous=True)
async def shell(args: NoArgs, ctx: ToolContext) -> str:
    """Runs commands."""
    return "ran"


@tool()
async def other(args: NoArgs, ctx: ToolContext) -> str:
    """Also harmless."""
    return "ok"


REGISTRY = Registry([safe, shell, other])


def test_default_policy_excludes_dangerous_tools() -> None:
    assert ToolPolicy().enabled(REGISTRY).names() == ["safe", "other"]
    assert ToolPolicy(None).enabled(REGISTRY).get("shell") is None


def test_explicit_list_is_exactly_the_named_existing_tools() -> None:
    policy = ToolPolicy(["shell", "other", "typo_tool"])
    assert policy.enabled(REGISTRY).names() == ["shell", "other"]
    assert policy.unknown(REGISTRY) == ["typo_tool"]


def test_explicit_empty_list_enables_nothing() -> None:
    assert len(ToolPolicy([]).enabled(REGISTRY)) == 0
