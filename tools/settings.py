"""``ToolSettings``: every setting of the tool system, read from the environment and ``.env``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tools.egress import DEFAULT_GUARD_MODE, GuardMode
from tools.executor import DEFAULT_OBSERVATION_MAX_CHARS
from tools.files.child import DEFAULT_FILE_READERS
from tools.secrets import secret_values
from tools.ssrf import AllowList

DEFAULT_TOOL_TIMEOUT_SECONDS = 20.0
DEFAULT_FETCH_URL_MAX_BYTES = 2_000_000
DEFAULT_FETCH_URL_TIMEOUT_SECONDS = 10.0
DEFAULT_FETCH_URL_MAX_REDIRECTS = 5
DEFAULT_TOOLS_PER_RUN = 20


def _split_commas(value: Any) -> Any:
    """Comma-separated env values become lists; lists given in code pass through."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class ToolSettings(BaseSettings):
    """Settings of the tool system (field names are the environment names, lower-cased).

    The service composes this class into its own ``Settings``; tests build it directly::

        ToolSettings(_env_file=None, fetch_url_allowed_hosts=["127.0.0.1:8080"])
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    agent_observation_max_chars: int = Field(
        DEFAULT_OBSERVATION_MAX_CHARS,
        ge=200,
        description="Longest tool observation (characters) that enters the history; longer results are "
        "shaped (head + task-relevant passages). The full result stays in the trace.",
    )
    agent_tool_timeout_seconds: float = Field(
        DEFAULT_TOOL_TIMEOUT_SECONDS, gt=0, description="Default time limit of one tool call, in seconds."
    )
    agent_tool_timeouts: dict[str, float] = Field(
        default_factory=dict,
        description='Per-tool time limits overriding the default, as a JSON object: {"fetch_url": 15}.',
    )
    agent_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated allow-list of tool names; empty means every tool not marked dangerous.",
    )
    agent_mcp_config: str | None = Field(
        None,
        description='Path of a JSON file listing MCP servers in the "mcpServers" format; each server\'s '
        "tools become tools named <server>__<tool>. Unset: no MCP servers.",
    )
    agent_mcp_startup_wait_seconds: float = Field(
        5.0,
        gt=0,
        description="How long a process's start-up waits for its MCP servers to connect; a slower server's tools "
        "join once it does (runs started before go without them).",
    )
    agent_tools_per_run: int = Field(
        DEFAULT_TOOLS_PER_RUN,
        ge=1,
        description="Most tools offered to one run; past it the run gets the ones most relevant to the task "
        "(built-ins always kept). The others stay callable.",
    )
    agent_file_readers: int = Field(
        DEFAULT_FILE_READERS,
        ge=1,
        le=64,
        description="Reader processes (PDF, DOCX, XLSX, images; up to 1 GiB each) one process runs at once; more "
        "files wait their turn.",
    )
    fetch_url_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated host[:port] names or CIDRs fetch_url may reach although they are not "
        "public (internal docs, test servers). Empty: public addresses only.",
    )
    fetch_url_max_bytes: int = Field(
        DEFAULT_FETCH_URL_MAX_BYTES, gt=0, description="fetch_url reads at most this many bytes of a body."
    )
    fetch_url_timeout_seconds: float = Field(
        DEFAULT_FETCH_URL_TIMEOUT_SECONDS,
        gt=0,
        description="Time limit of one fetch_url call (all redirects included), in seconds.",
    )
    fetch_url_max_redirects: int = Field(
        DEFAULT_FETCH_URL_MAX_REDIRECTS, ge=0, description="Redirects fetch_url follows, each re-checked."
    )
    agent_exfiltration_guard: GuardMode = Field(
        DEFAULT_GUARD_MODE,
        description="Once a run has read private data, data goes only where the requester or an admin said it "
        "may go (the requester's URLs and words, allow-listed hosts, internal MCP servers, approved destinations): "
        "on (hold back the rest, saying why), approve (ask the requester instead), off.",
    )
    searxng_url: str | None = Field(
        None, description="Base URL of a SearXNG instance (JSON format enabled); enables web_search."
    )
    brave_search_api_key: SecretStr | None = Field(
        None, description="Brave Search API key; enables web_search when SEARXNG_URL is not set."
    )

    @field_validator("agent_tools", "fetch_url_allowed_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return _split_commas(value)

    @field_validator("agent_tool_timeouts")
    @classmethod
    def _positive_timeouts(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {name: seconds for name, seconds in value.items() if not seconds > 0}
        if bad:
            raise ValueError(f"AGENT_TOOL_TIMEOUTS values must be > 0 seconds, got {bad!r}")
        return value

    @field_validator("fetch_url_allowed_hosts")
    @classmethod
    def _valid_hosts(cls, value: list[str]) -> list[str]:
        AllowList.parse(value)  # a malformed entry fails at start-up, naming itself
        return value

    @field_validator("searxng_url", "brave_search_api_key", "agent_mcp_config", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("searxng_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"SEARXNG_URL must start with http:// or https://, got {value!r}")
        return value.rstrip("/") if value else None

    def fetch_allow_list(self) -> AllowList:
        """FETCH_URL_ALLOWED_HOSTS, parsed."""
        return AllowList.parse(self.fetch_url_allowed_hosts)

    def allowlist(self) -> list[str] | None:
        """AGENT_TOOLS as a ``ToolPolicy`` allow-list: None when empty (every non-dangerous tool)."""
        return list(self.agent_tools) or None

    def secrets(self) -> list[str]:
        """Secret values among these settings, for the ``Redactor``."""
        return secret_values(self)
