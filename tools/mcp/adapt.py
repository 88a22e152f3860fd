"""MCP tools as ``Tool`` values: their own JSON schema, annotation-driven policy, content made observations."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Self, cast

import jsonschema
from mcp import types
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from tools.context import ToolContext
from tools.mcp.classify import classify
from tools.mcp.config import ServerConfig
from tools.tool import Tool

#: ``<server>__<tool>``: function names may not hold dots, and the double underscore keeps the split unambiguous.
SEPARATOR = "__"

_UNSAFE_RE = re.compile(r"[^A-Za-z0-9_-]")
#: A run of base64 this long is a binary payload, not words (a data: URL's prefix included).
_BASE64_RE = re.compile(r"(?:data:[\w.+/-]+;base64,)?[A-Za-z0-9+/]{1024,}={0,2}")

#: ``(tool name on the server, arguments) -> CallToolResult``; raises ``McpUnavailable`` when the server is down.
CallFn = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]
#: The same for an ``"auth": "user"`` server, given the run's context (whose person's token the call carries);
#: raises ``ConnectionNeeded`` when that person has not connected.
PersonCallFn = Callable[[str, dict[str, Any], ToolContext], Awaitable[types.CallToolResult]]


class McpToolError(Exception):
    """The server answered ``isError: true``; the message is its text (an error observation)."""


class JsonSchemaArgs(BaseModel):
    """Arguments checked against a server's raw JSON schema (subclassed per tool by ``args_model_for``).

    The executor validates through ``model_validate`` like any pydantic model, so schema errors come back
    to the model field by field in the same ``- field: message`` form as a built-in's.
    """

    model_config = ConfigDict(extra="allow")
    raw_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        validator = jsonschema.Draft202012Validator(cls.raw_schema)
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, [_detail(e) for e in errors])
        return super().model_validate(obj, *args, **kwargs)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return cls.raw_schema


def _detail(err: jsonschema.ValidationError) -> InitErrorDetails:
    loc = tuple(err.absolute_path)
    if err.validator == "required":
        missing = str(err.message).split("'")[1] if "'" in str(err.message) else "?"
        return {"type": "missing", "loc": (*loc, missing), "input": err.instance}
    message = str(err.message).replace("{", "(").replace("}", ")")
    return {"type": PydanticCustomError("json_schema", message), "loc": loc, "input": err.instance}


def args_model_for(name: str, schema: dict[str, Any]) -> type[JsonSchemaArgs]:
    """A ``JsonSchemaArgs`` subclass for one tool; an unusable schema becomes "any object"."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError:
        schema = {"type": "object"}
    return type(f"{name}_args", (JsonSchemaArgs,), {"raw_schema": schema, "__module__": __name__})


def make_tool(server: ServerConfig, spec: types.Tool, call: CallFn | PersonCallFn, default_timeout: float) -> Tool:
    """The ``Tool`` for one server tool: annotations decide its prompt, annotations and schema its class for the
    guard (``tools.mcp.classify``); the config relaxes either for this tool alone."""
    override = server.tools.get(spec.name)
    hints = spec.annotations or types.ToolAnnotations()
    risky = hints.destructive_hint is True or hints.read_only_hint is not True
    approval = override.approval if override else "default"
    needs_approval = approval == "always" or (approval == "default" and risky)
    # Function names may not hold dots or spaces, which MCP tool names may: those become underscores.
    name = f"{server.name}{SEPARATOR}{_UNSAFE_RE.sub('_', spec.name)}"[:64]
    kind = classify(server, spec)

    async def handler(args: JsonSchemaArgs, ctx: ToolContext) -> str:
        payload = args.model_dump(mode="json")
        if server.auth == "user":
            result = await cast(PersonCallFn, call)(spec.name, payload, ctx)
        else:
            result = await cast(CallFn, call)(spec.name, payload)
        text = result_text(result)
        if result.is_error:
            raise McpToolError(text or "the tool reported an error without details")
        return text

    return Tool(
        name=name,
        description=spec.description or spec.title or f"{spec.name} from the {server.name} MCP server",
        args_model=args_model_for(name, dict(spec.input_schema)),
        handler=handler,
        timeout_seconds=server.timeout or default_timeout,
        needs_approval=needs_approval,
        outbound=kind.outbound,
        destination_args=kind.destinations,
        sends_to=f"MCP server {server.name}",
        reads_private_data=kind.reads_private_data,
        consequential=not kind.reader,
        target_args=kind.targets,
        untrusted_output=kind.untrusted_output,
        input_schema=dict(spec.input_schema),
        server=server.name,
    )


def result_text(result: types.CallToolResult) -> str:
    """Text and structured content as text; binary payloads (images, audio, blobs, base64 runs), wherever
    they sit, as a one-line description: neither the model nor the trace gets their bytes as text."""
    parts = [_content_text(item) for item in result.content]
    if result.structured_content is not None and not any(
        isinstance(item, types.TextContent) for item in result.content
    ):
        parts.append(json.dumps(_without_binary(result.structured_content), ensure_ascii=False))
    return _BASE64_RE.sub(_base64_line, "\n".join(p for p in parts if p))


def _without_binary(value: Any) -> Any:
    """Structured content with every ``data``/``blob`` payload (a content item's shape) described instead."""
    if isinstance(value, dict):
        payload = value.get("data", value.get("blob"))
        if isinstance(payload, str) and ("mimeType" in value or "type" in value):
            kind = value.get("type") if value.get("type") in ("image", "audio") else "binary"
            return f"[{kind} {value.get('mimeType', 'application/octet-stream')}, {_b64_bytes(payload):,} bytes, " \
                   "not shown]"
        return {key: _without_binary(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_binary(item) for item in value]
    return value


def _base64_line(match: re.Match[str]) -> str:
    return f"[{_b64_bytes(match.group().rsplit(',', 1)[-1]):,} bytes of base64, not shown]"


def _content_text(item: Any) -> str:
    if isinstance(item, types.TextContent):
        return item.text
    if isinstance(item, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(item, types.ImageContent) else "audio"
        return f"[{kind} {item.mime_type}, {_b64_bytes(item.data):,} bytes, not shown]"
    if isinstance(item, types.EmbeddedResource):
        res = item.resource
        if isinstance(res, types.TextResourceContents):
            return f"[resource {res.uri}]\n{res.text}"
        mime = res.mime_type or "application/octet-stream"
        return f"[binary resource {res.uri} ({mime}), {_b64_bytes(res.blob):,} bytes, not shown]"
    if isinstance(item, types.ResourceLink):
        return f"[resource link {item.uri}: {item.name}]"
    return f"[{getattr(item, 'type', 'unknown')} content, not shown]"


def _b64_bytes(data: str) -> int:
    """Decoded size of base64 text, without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")
