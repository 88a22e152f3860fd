"""The @tool decorator, Registry lookups and views, strict schemas, the prompt description."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tools import Registry, Tool, ToolContext, tool
from tools.errors import ToolDefinitionError


class EchoArgs(BaseModel):
    text: str = Field(description="What to echo.")
    times: int = Field(1, ge=1, le=5, description="How often.")


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str
    zip_code: str | None = None


class NestedArgs(BaseModel):
    place: Inner = Field(description="Where.")
    tags: list[str] = Field(default_factory=list, max_length=3)
    mode: str = Field("fast", pattern="^(fast|slow)$")


@tool()
async def echo(args: EchoArgs, ctx: ToolContext) -> str:
    """Echo the text back.

    Longer explanation that stays out of the one-line summary.
    """
    return args.text * args.times


@tool(name="nested", description="Takes a nested model.", dangerous=True)
def nested_tool(args: NestedArgs, ctx: ToolContext) -> dict[str, str]:
    return {"city": args.place.city}


def test_decorator_defaults_name_and_description_from_the_function() -> None:
    assert isinstance(echo, Tool)
    assert echo.name == "echo"
    assert echo.description.startswith("Echo the text back.")
    assert echo.summary == "Echo the text back."
    assert echo.args_model is EchoArgs
    assert echo.timeout_seconds == 20.0
    assert not echo.dangerous and not echo.needs_approval
    assert nested_tool.name == "nested" and nested_tool.dangerous


def test_decorator_rejects_functions_without_a_model_argument() -> None:
    with pytest.raises(ToolDefinitionError, match="BaseModel"):

        @tool()
        def bad(args: dict, ctx: ToolContext) -> str:  # type: ignore[type-arg]
            """Doc."""
            return ""

    with pytest.raises(ToolDefinitionError, match="exactly"):

        @tool()
        def one_arg(args: EchoArgs) -> str:
            """Doc."""
            return ""

    with pytest.raises(ToolDefinitionError, match="description"):

        @tool()
        def undocumented(args: EchoArgs, ctx: ToolContext) -> str:
            return ""


def test_tool_names_follow_the_function_name_rule() -> None:
    with pytest.raises(ToolDefinitionError, match="must match"):
        Tool(name="has space", description="x", args_model=EchoArgs, handler=lambda a, c: "")


def test_register_get_names_len_iter_and_duplicates() -> None:
    registry = Registry([echo])
    assert registry.register(nested_tool) is nested_tool
    assert registry.names() == ["echo", "nested"]
    assert len(registry) == 2
    assert [t.name for t in registry] == ["echo", "nested"]
    assert registry.get("echo") is echo
    assert registry.get("missing") is None
    with pytest.raises(ValueError, match="already registered"):
        registry.register(echo)


def test_select_is_a_view_with_only_the_named_tools() -> None:
    registry = Registry([echo, nested_tool])
    view = registry.select(["nested", "does_not_exist"])
    assert view.names() == ["nested"]
    assert registry.select(None).names() == ["echo", "nested"]
    assert registry.select([]).names() == []
    assert len(registry) == 2  # the original is untouched


def test_suggest_finds_the_closest_name() -> None:
    from tools.builtins.calculator import calculator

    registry = Registry([echo, calculator])
    assert registry.suggest("calculater") == "calculator"
    assert registry.suggest("Echo") == "echo"
    assert registry.suggest("zzzzzz") is None


def _walk_objects(schema: dict) -> list[dict]:  # type: ignore[type-arg]
    found = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "object" or (
                isinstance(node.get("type"), list) and "object" in node["type"]
            ):
                found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def test_schemas_are_strict_mode_compatible() -> None:
    schemas = Registry([echo, nested_tool]).schemas()
    assert [s["function"]["name"] for s in schemas] == ["echo", "nested"]
    for entry in schemas:
        assert entry["type"] == "function"
        assert entry["function"]["strict"] is True
        params = entry["function"]["parameters"]
        objects = _walk_objects(params)
        assert objects, "the parameters are an object"
        for obj in objects:
            assert obj["additionalProperties"] is False
            assert sorted(obj["required"]) == sorted(obj["properties"])
        text = repr(params)
        for keyword in (
            "$ref",
            "$defs",
            "'default'",
            "'title'",
            "'minimum'",
            "'maximum'",
            "'maxItems'",
            "'pattern'",
        ):
            assert keyword not in text, keyword


def test_schema_keeps_descriptions_and_makes_optional_fields_nullable() -> None:
    params = Registry([echo]).schemas()[0]["function"]["parameters"]
    assert params["properties"]["text"] == {"type": "string", "description": "What to echo."}
    times = params["properties"]["times"]
    assert times["type"] == ["integer", "null"]
    assert "How often." in times["description"]
    assert (
        ">= 1" in times["description"]
        and "<= 5" in times["description"]
        and "default 1" in times["description"]
    )

    nested = Registry([nested_tool]).schemas()[0]["function"]["parameters"]
    place = nested["properties"]["place"]
    assert place["description"] == "Where."
    assert place["properties"]["zip_code"]["anyOf"][-1] == {"type": "null"}
    assert place["required"] == ["city", "zip_code"]
    assert "fast" in nested["properties"]["mode"]["description"]


def test_describe_gives_one_line_per_tool_with_arguments() -> None:
    text = Registry([echo, nested_tool]).describe()
    lines = text.splitlines()
    assert len(lines) == 2
    assert lines[0] == "- echo(text: string, times: integer = 1): Echo the text back."
    assert lines[1].startswith("- nested(place: Inner, tags: array[string] = [], mode: string = 'fast'):")


class FreeForm(BaseModel):
    data: dict[str, int]


def test_dict_fields_cannot_be_strict() -> None:
    @tool()
    def free(args: FreeForm, ctx: ToolContext) -> str:
        """Free-form."""
        return ""

    with pytest.raises(ToolDefinitionError, match="free-form"):
        Registry([free]).schemas()
