"""What an MCP tool can do, as the guard sees it: from its annotations and input schema, relaxed per tool only.

Without configuration, an MCP tool's result is untrusted content and the workspace's data (it arms both of the
guard's rules). Its annotations say what a call does, read with the specification's defaults (an unannotated tool
may write, destroy and reach the open world):

- ``readOnlyHint: true``: a **reader**; otherwise an **actor**, whose calls are ``consequential`` (the integrity
  rule: untrusted content may not choose its target);
- ``openWorldHint`` not ``false``: it reaches beyond the server, so it is **outbound** (the secrecy rule): an
  argument that is a URL or an e-mail address (``format: uri``/``email``, or a name such as ``url``/``email``, or
  the tool's ``destination`` in the config) is its destination, checked like ``fetch_url``'s; without one, the
  server is, and each call needs the requester once the run has read private data;
- arguments named like a recipient, a channel, a user or an address are its targets.

The config relaxes one tool at a time (``tools.<name>``): ``reads_private_data: false``, ``untrusted_output: false``,
``receives_private_data: true``, ``destination``. A server's ``"trust": "internal"`` never reaches its open-world
tools: one such tool on a server that also reads the workspace would let everything out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp import types

from tools.integrity import is_target_name
from tools.mcp.config import ServerConfig, ToolOverride
from tools.tool import Tool

#: Schema formats of an argument that is a destination.
DESTINATION_FORMATS = frozenset({"uri", "iri", "uri-reference", "iri-reference", "email", "idn-email"})
_DESTINATION_NAMES = ("url", "uri", "link", "email", "webhook", "endpoint", "address")


@dataclass(frozen=True, slots=True)
class ToolClass:
    """The guard's view of one MCP tool."""

    reader: bool
    open_world: bool
    outbound: bool
    reads_private_data: bool
    untrusted_output: bool
    destinations: tuple[str, ...]
    targets: tuple[str, ...]


def describe(tool: Tool) -> str:
    """One phrase for the start-up log: "reader, closed world" / "actor, sends to url, targets recipient"."""
    parts = ["actor" if tool.consequential else "reader"]
    if tool.outbound:
        parts.append(f"sends to {'/'.join(tool.destination_args or ())}" if tool.destination_args
                     else "sends to the server")
    else:
        parts.append("may receive private data")
    if tool.consequential and tool.target_args:
        parts.append(f"targets {'/'.join(tool.target_args)}")
    if not tool.reads_private_data:
        parts.append("results not private (relaxed)")
    if not tool.untrusted_output:
        parts.append("results trusted (relaxed)")
    return ", ".join(parts)


def classify(server: ServerConfig, spec: types.Tool) -> ToolClass:
    """``spec``'s class on ``server``, with the operator's per-tool relaxations."""
    override = server.tools.get(spec.name) or ToolOverride()
    hints = spec.annotations or types.ToolAnnotations()
    open_world = hints.open_world_hint is not False
    properties = _properties(spec.input_schema)
    destinations = tuple(
        name for name, schema in properties.items()
        if name == override.destination or schema.get("format") in DESTINATION_FORMATS
        or any(name.lower() == n or name.lower().endswith(f"_{n}") for n in _DESTINATION_NAMES)
    )
    targets = tuple(name for name in properties if name in destinations or is_target_name(name))
    return ToolClass(
        reader=hints.read_only_hint is True,
        open_world=open_world,
        outbound=open_world and not override.receives_private_data,
        reads_private_data=override.reads_private_data,
        untrusted_output=override.untrusted_output,
        destinations=destinations,
        targets=targets,
    )


def _properties(schema: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return {}
    return {str(k): dict(v) if isinstance(v, Mapping) else {} for k, v in props.items()}
