"""The ``AGENT_MCP_CONFIG`` file: the ``mcpServers`` format desktop agent hosts use, checked at start-up.

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"]},
        "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"},
                 "timeout": 30, "trust": "internal", "tools": {"delete_page": {"approval": "always"}}},
        "tickets": {"url": "https://tickets.example.com/mcp", "auth": "user"}}}

``"auth"`` (HTTP servers): ``"service"`` (the default: the ``headers`` the operator configured, one credential for
everyone), ``"none"``, or ``"user"``: each person signs in to the server themselves (OAuth, the MCP authorization
flow) and their calls carry their own token; ``client_id``/``client_secret``/``scopes`` for a server without dynamic
client registration.

``${VAR}`` in ``env``, ``headers`` and ``url`` is expanded from the environment; the expanded values are
secrets (never logged, redacted from observations).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tools.errors import ToolDefinitionError

Approval = Literal["always", "never", "default"]
_APPROVALS: tuple[str, ...] = ("always", "never", "default")
Trust = Literal["internal", "external"]
_TRUSTS: tuple[str, ...] = ("internal", "external")
#: Per-tool guard flags and their defaults (the safe side).
_FLAGS = {"reads_private_data": True, "untrusted_output": True, "receives_private_data": False}
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Server names become the prefix of tool names (``<server>__<tool>``), so they follow the same alphabet.
_SERVER_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_STDIO_KEYS = {"command", "args", "env", "cwd", "timeout", "tools", "type", "trust"}
_HTTP_KEYS = {"url", "headers", "timeout", "tools", "type", "trust", "auth", "client_id", "client_secret", "scopes"}
Auth = Literal["user", "service", "none"]
_AUTHS: tuple[str, ...] = ("user", "service", "none")


class McpConfigError(ToolDefinitionError):
    """The MCP config file is unusable; the message names the server and the field."""


@dataclass(frozen=True, slots=True)
class ToolOverride:
    """Operator overrides for one server tool: each relaxes the guard's defaults for this tool alone
    (``tools.mcp.classify``), never for its server."""

    #: The tool's own prompt; never the guard.
    approval: Approval = "default"
    #: ``False``: what it returns is not the workspace's data (it does not arm the secrecy rule).
    reads_private_data: bool = True
    #: ``False``: what it returns cannot steer a call (the company's own records, written by no outsider).
    untrusted_output: bool = True
    #: ``True``: it sends only to the company's own systems, which may receive private data.
    receives_private_data: bool = False
    #: The argument naming where it sends (a URL or an e-mail address), when its schema does not say.
    destination: str | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One entry of ``mcpServers``: a stdio command or a Streamable HTTP URL."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds one call may take; None: the service's AGENT_TOOL_TIMEOUT_SECONDS.
    timeout: float | None = None
    tools: Mapping[str, ToolOverride] = field(default_factory=dict)
    #: ``"internal"``: the company's own service: its closed-world tools (``openWorldHint: false``) may receive
    #: private data. Never its open-world ones, which reach beyond it (``tools.mcp.classify``): those are relaxed
    #: one by one (``ToolOverride.receives_private_data``).
    trust: Trust = "external"
    #: The service's PATH, the one variable a stdio server inherits besides its own ``env``.
    path: str = ""
    #: Values that came from ``${VAR}`` expansion: redacted everywhere.
    secrets: tuple[str, ...] = ()
    #: Whose credential a call carries: the configured ``headers`` (``service``), none, or the asker's own OAuth
    #: token (``user``: each person connects once; ``bot.oauth.mcp_flow``).
    auth: Auth = "service"
    #: A client registered by hand, for an authorization server without dynamic client registration.
    client_id: str | None = None
    client_secret: str | None = None
    #: Scopes to ask for (space-separated); None: what the server's metadata names.
    scopes: str | None = None

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


def load_config(path: str | Path, environ: Mapping[str, str]) -> list[ServerConfig]:
    """Read and check the file; any problem is an ``McpConfigError`` naming the server and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"AGENT_MCP_CONFIG: cannot read {str(path)!r} ({exc.strerror})") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"AGENT_MCP_CONFIG: {str(path)!r} is not valid JSON ({exc})") from exc
    return parse_config(data, environ)


def parse_config(data: Any, environ: Mapping[str, str]) -> list[ServerConfig]:
    """The servers of an already-parsed ``{"mcpServers": {...}}`` document."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise McpConfigError('AGENT_MCP_CONFIG: the file must be a JSON object with an "mcpServers" object')
    return [_server(name, entry, environ) for name, entry in data["mcpServers"].items()]


def _server(name: str, entry: Any, environ: Mapping[str, str]) -> ServerConfig:
    where = f"MCP server {name!r}"
    if not _SERVER_RE.fullmatch(name) or "__" in name:
        raise McpConfigError(f"{where}: the name must match [A-Za-z0-9_-]{{1,40}} without '__'")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where}: must be an object with \"command\" or \"url\"")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(f"{where}: give exactly one of \"command\" (stdio) or \"url\" (Streamable HTTP)")
    allowed = _STDIO_KEYS if has_command else _HTTP_KEYS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise McpConfigError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    secrets: list[str] = []
    expand = _Expander(where, environ, secrets)
    common: dict[str, Any] = {"name": name, "timeout": _timeout(where, entry), "tools": _overrides(where, entry),
                              "trust": _trust(where, entry)}
    if has_command:
        server = ServerConfig(
            command=_string(where, "command", entry["command"]),
            args=tuple(_string(where, f"args[{i}]", a) for i, a in enumerate(_list(where, "args", entry))),
            env={k: expand(f"env.{k}", v) for k, v in _object(where, "env", entry).items()},
            cwd=_string(where, "cwd", entry["cwd"]) if "cwd" in entry else None,
            path=environ.get("PATH", ""),
            **common,
        )
    else:
        url = expand("url", entry["url"])
        if not url.startswith(("http://", "https://")):
            raise McpConfigError(f"{where}: field 'url' must start with http:// or https://")
        headers = {k: expand(f"headers.{k}", v) for k, v in _object(where, "headers", entry).items()}
        server = ServerConfig(url=url, headers=headers, **common, **_auth(where, entry, headers, expand))
    if server.client_secret:
        secrets.append(server.client_secret)
    return _with_secrets(server, secrets)


def _with_secrets(server: ServerConfig, secrets: list[str]) -> ServerConfig:
    object.__setattr__(server, "secrets", tuple(s for s in secrets if s))
    return server


class _Expander:
    def __init__(self, where: str, environ: Mapping[str, str], secrets: list[str]) -> None:
        self._where, self._environ, self._secrets = where, environ, secrets

    def __call__(self, field_name: str, value: Any) -> str:
        text = _string(self._where, field_name, value)

        def one(match: re.Match[str]) -> str:
            var = match.group(1)
            if var not in self._environ:
                raise McpConfigError(f"{self._where}: field {field_name!r} names ${{{var}}}, which is not set")
            self._secrets.append(self._environ[var])
            return self._environ[var]

        return _VAR_RE.sub(one, text)


def _auth(where: str, entry: dict[str, Any], headers: Mapping[str, str], expand: _Expander) -> dict[str, Any]:
    auth = entry.get("auth", "service")
    if auth not in _AUTHS:
        raise McpConfigError(f"{where}: field 'auth' must be \"user\" (each person signs in), \"service\" (the "
                             "configured headers, the default) or \"none\"")
    extra = [k for k in ("client_id", "client_secret", "scopes") if k in entry]
    if auth != "user" and extra:
        raise McpConfigError(f"{where}: field {extra[0]!r} is for \"auth\": \"user\" servers only")
    if auth == "user" and any(k.lower() == "authorization" for k in headers):
        raise McpConfigError(f"{where}: an \"auth\": \"user\" server sends each person's own token: remove "
                             "headers.Authorization")
    if "client_secret" in entry and "client_id" not in entry:
        raise McpConfigError(f"{where}: field 'client_secret' needs 'client_id'")
    client_id = _string(where, "client_id", entry["client_id"]) if "client_id" in entry else None
    return {"auth": auth, "client_id": client_id,
            "client_secret": expand("client_secret", entry["client_secret"]) if "client_secret" in entry else None,
            "scopes": _string(where, "scopes", entry["scopes"]) if "scopes" in entry else None}


def _timeout(where: str, entry: dict[str, Any]) -> float | None:
    value = entry.get("timeout")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise McpConfigError(f"{where}: field 'timeout' must be a number of seconds > 0")
    return float(value)


def _trust(where: str, entry: dict[str, Any]) -> Trust:
    value = entry.get("trust", "external")
    if value not in _TRUSTS:
        raise McpConfigError(f"{where}: field 'trust' must be \"internal\" (the company's own; never reaches its "
                             "open-world tools) or \"external\" (the default)")
    return "internal" if value == "internal" else "external"


def _overrides(where: str, entry: dict[str, Any]) -> dict[str, ToolOverride]:
    out: dict[str, ToolOverride] = {}
    for tool_name, spec in _object(where, "tools", entry).items():
        label = f"tools.{tool_name}"
        if not isinstance(spec, dict):
            raise McpConfigError(f"{where}: field {label!r} must be an object")
        unknown = sorted(set(spec) - {"approval", *_FLAGS, "destination"})
        if unknown:
            raise McpConfigError(f"{where}: unknown field '{label}.{unknown[0]}'")
        approval = spec.get("approval", "default")
        if approval not in _APPROVALS:
            raise McpConfigError(f"{where}: field '{label}.approval' must be one of {', '.join(_APPROVALS)}")
        flags = {}
        for flag, default in _FLAGS.items():
            flags[flag] = spec.get(flag, default)
            if not isinstance(flags[flag], bool):
                raise McpConfigError(f"{where}: field '{label}.{flag}' must be true or false")
        destination = spec.get("destination")
        if destination is not None and (not isinstance(destination, str) or not destination):
            raise McpConfigError(f"{where}: field '{label}.destination' must name one of the tool's arguments")
        out[tool_name] = ToolOverride(approval=approval, destination=destination, **flags)
    return out


def _string(where: str, field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise McpConfigError(f"{where}: field {field_name!r} must be a non-empty string")
    return value


def _list(where: str, field_name: str, entry: dict[str, Any]) -> list[Any]:
    value = entry.get(field_name, [])
    if not isinstance(value, list):
        raise McpConfigError(f"{where}: field {field_name!r} must be a list of strings")
    return value


def _object(where: str, field_name: str, entry: dict[str, Any]) -> dict[str, Any]:
    value = entry.get(field_name, {})
    if not isinstance(value, dict):
        raise McpConfigError(f"{where}: field {field_name!r} must be an object")
    return value
