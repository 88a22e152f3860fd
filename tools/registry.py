"""The tool registry: the ``@tool`` decorator, per-run selections, strict schemas and "did you mean"."""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import BaseModel

from tools.context import ToolContext
from tools.errors import ToolDefinitionError
from tools.schema import strict_schema
from tools.tool import Handler, Tool

#: How alike a misspelt name must be to a registered one before it is suggested (difflib ratio).
SUGGEST_CUTOFF = 0.6


def tool(
    name: str | None = None,
    description: str | None = None,
    timeout: float = 20.0,
    dangerous: bool = False,
    needs_approval: bool = False,
    outbound: bool = False,
    reads_private_data: bool = False,
    destination_args: tuple[str, ...] | None = None,
    sends_to: str = "",
    requester_words_pass: bool = False,
    shown_in_thread: bool = False,
) -> Callable[[Handler], Tool]:
    """Turn ``fn(args: SomeModel, ctx: ToolContext)`` into a ``Tool``.

    The name defaults to the function's name and the description to its docstring::

        @tool(timeout=5)
        async def shout(args: ShoutArgs, ctx: ToolContext) -> str:
            \"\"\"Repeat the text in capitals.\"\"\"
            return args.text.upper()
    """

    def decorate(fn: Handler) -> Tool:
        return Tool(
            name=name or fn.__name__,
            description=description or inspect.getdoc(fn) or "",
            args_model=_args_model_of(fn),
            handler=fn,
            timeout_seconds=timeout,
            dangerous=dangerous,
            needs_approval=needs_approval,
            outbound=outbound,
            reads_private_data=reads_private_data,
            destination_args=destination_args,
            sends_to=sends_to,
            requester_words_pass=requester_words_pass,
            shown_in_thread=shown_in_thread,
        )

    return decorate


def _args_model_of(fn: Handler) -> type[BaseModel]:
    label = getattr(fn, "__qualname__", repr(fn))
    params = list(inspect.signature(fn).parameters.values())
    if len(params) != 2:
        raise ToolDefinitionError(f"@tool function {label} must take exactly (args, ctx), got {len(params)}")
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:  # an annotation names something not importable at module level
        raise ToolDefinitionError(f"@tool function {label}: cannot resolve annotations ({exc})") from exc
    model = hints.get(params[0].name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ToolDefinitionError(
            f"@tool function {label}: annotate the first parameter with a pydantic BaseModel subclass"
        )
    ctx_type = hints.get(params[1].name)
    if ctx_type is not None and ctx_type is not ToolContext:
        raise ToolDefinitionError(f"@tool function {label}: the second parameter must be a ToolContext")
    return model


class Registry:
    """The tools a run may use, by name.

    One registry holds everything the service knows; ``select`` gives each run its own view::

        registry = Registry([calculator, current_time])
        run_tools = registry.select(["calculator"])
        run_tools.schemas()  # the Chat Completions ``tools`` parameter
    """

    def __init__(self, tools: Iterable[Tool] = (), *, offered: Iterable[str] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        #: The names shown to the model (None: all). The others stay callable: a call to one adds it.
        self._offered: set[str] | None = None if offered is None else set(offered)
        # Both are asked for on every step of every run; computing JSON schemas each time costs ~0.5 ms.
        self._schemas: list[dict[str, Any]] | None = None
        self._description: str | None = None
        for item in tools:
            self.register(item)

    def register(self, tool: Tool) -> Tool:
        """Add a tool and return it (so it can be used as a decorator result); duplicate names are refused."""
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._schemas = self._description = None
        return tool

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None; a tool left out of the offer is offered from now on."""
        found = self._tools.get(name)
        if found is not None and self._offered is not None and name not in self._offered:
            self._offered.add(name)  # the model asked for an enabled tool it was not shown: show it next step
            self._schemas = self._description = None
        return found

    def offered(self) -> list[Tool]:
        """The tools shown to the model (schemas, description), in registration order."""
        return [t for t in self._tools.values() if self._offered is None or t.name in self._offered]

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._tools)

    def select(self, enabled: Iterable[str] | None) -> Registry:
        """A view with only the named tools that exist (None: all of them), in registration order."""
        if enabled is None:
            return Registry(self._tools.values())
        wanted = set(enabled)
        return Registry(t for t in self._tools.values() if t.name in wanted)

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI Chat Completions ``tools`` parameter, strict mode (callers must not mutate it)."""
        if self._schemas is None:
            self._schemas = self._build_schemas()
        return self._schemas

    def _build_schemas(self) -> list[dict[str, Any]]:
        return [_schema_of(t) for t in self.offered()]

    def describe(self) -> str:
        """The "available tools" text for a system prompt: one line per tool."""
        if self._description is None:
            self._description = "\n".join(
                f"- {t.name}({_signature(t)}): {t.summary}" for t in self.offered()
            )
        return self._description

    def suggest(self, name: str) -> str | None:
        """The registered name closest to ``name`` (for "did you mean"), or None when none is close."""
        by_lower = {n.lower(): n for n in self._tools}
        if name.lower() in by_lower:
            return by_lower[name.lower()]
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=SUGGEST_CUTOFF)
        return by_lower[close[0]] if close else None

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __repr__(self) -> str:
        return f"Registry({self.names()!r})"


def _schema_of(t: Tool) -> dict[str, Any]:
    if t.input_schema is not None:  # a server's own schema: sent as it is, so not in strict mode
        function = {"name": t.name, "description": t.description, "parameters": t.input_schema, "strict": False}
    else:
        function = {"name": t.name, "description": t.description, "parameters": _strict_parameters(t.args_model),
                    "strict": True}
    return {"type": "function", "function": function}


def _signature(t: Tool) -> str:
    if t.input_schema is not None:
        props: dict[str, Any] = t.input_schema.get("properties", {})
        required = set(t.input_schema.get("required", ()))
        return ", ".join(f"{n}: {_type_label(s)}" + ("" if n in required else " = None") for n, s in props.items())
    props = _properties(t.args_model)
    optional = {
        info.alias or name: info.get_default(call_default_factory=True)
        for name, info in t.args_model.model_fields.items()
        if not info.is_required()
    }
    parts = []
    for name, spec in props.items():
        label = f"{name}: {_type_label(spec)}"
        parts.append(f"{label} = {optional[name]!r}" if name in optional else label)
    return ", ".join(parts)


# A run's registry is new for each run (its workspace's choice of tools), but its tools' argument models are
# the process's own: their schemas are built once per model, not once per run (pydantic's JSON schema
# generation was ~4 % of a worker's CPU). The dicts are shared: callers must not mutate them.
@functools.lru_cache(maxsize=1024)
def _strict_parameters(model: type[BaseModel]) -> dict[str, Any]:
    return strict_schema(model)


@functools.lru_cache(maxsize=1024)
def _properties(model: type[BaseModel]) -> dict[str, Any]:
    return dict(model.model_json_schema().get("properties", {}))


def _type_label(spec: dict[str, Any]) -> str:
    if "anyOf" in spec:
        return " | ".join(_type_label(option) for option in spec["anyOf"])
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[-1]
    kind = spec.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array" and isinstance(spec.get("items"), dict):
        return f"array[{_type_label(spec['items'])}]"
    return str(kind)
