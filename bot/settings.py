"""Settings: the whole service's configuration in one typed object, Slack's own names for Slack settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict
from slack_sdk.oauth.state_utils import OAuthStateUtils

from agent_core import DEFAULT_KEY_PREFIX, DEFAULT_TTL_SECONDS, AgentSettings, ConfigError
from bot.logs import DEFAULT_LOG_FORMAT, DEFAULT_LOG_LEVEL, LogFormat, LogLevel
from bot.redis import STARTUP_WAIT_SECONDS, SentinelMaster
from bot.slack_client import SLACK_HTTP_TIMEOUT
from tools import ToolSettings, secret_values

#: Slack's Web API; the trailing slash matters, the SDK joins method names onto it with urljoin.
DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_PORT = 3000
#: How long an approval request waits for a press when ``AGENT_APPROVAL_TIMEOUT_SECONDS`` is not set.
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 300.0
#: Length of the kernel's queue of connections waiting for accept() (capped by net.core.somaxconn).
LISTEN_BACKLOG = 1024
#: Connections accepted per event-loop pass (asyncio's own default, which it otherwise ties to the backlog).
ACCEPT_BATCH = 100
DEFAULT_QUEUE_NAME = "agent:queue"
#: Longest Retry-After the service honours on a 429 before giving up on that call.
DEFAULT_MAX_RETRY_AFTER_SECONDS = 30.0
#: The bot scopes an OAuth install asks for: exactly manifest.json's (tests/bot/serve/test_manifest.py).
DEFAULT_BOT_SCOPES = (
    "app_mentions:read,assistant:write,canvases:write,channels:history,channels:read,chat:write,commands,"
    "files:read,files:write,groups:history,groups:read,im:history,mpim:history,reactions:write,search:read.public,"
    "usergroups:read,users:read"
)
#: Suggested prompts of a new assistant thread (AGENT_SUGGESTED_PROMPTS overrides them; at most 4 are shown).
DEFAULT_SUGGESTED_PROMPTS = (
    '[{"title": "Summarise a page", "message": "Summarise https://example.com in three bullet points."},'
    ' {"title": "Do the maths", "message": "What is 17% of 2,340, rounded to the cent?"},'
    ' {"title": "What can you do?", "message": "Which tools can you use, and what are your limits?"}]'
)
#: Past this many characters an answer goes as a file: Slack's cap on one Markdown message (12,000); the
#: replies display would split it over two or more messages of 8,000.
DEFAULT_ANSWER_FILE_CHARS = 12_000
#: Runs one workspace has in flight by default (``/agent-limits max-concurrent`` changes it), and the most allowed.
DEFAULT_MAX_CONCURRENT_RUNS = 10
MAX_CONCURRENT_RUNS_CAP = 1000
#: Runs one person has in flight in a workspace by default (``/agent-limits max-concurrent-per-user`` changes it).
DEFAULT_MAX_CONCURRENT_RUNS_PER_USER = 3
#: Files in (bot/runs/downloads.py): the largest file a run downloads, all of one run's files together, and how long
#: one download may take.
DEFAULT_FILE_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_FILES_MAX_BYTES_PER_RUN = 50 * 1024 * 1024
DEFAULT_FILE_DOWNLOAD_TIMEOUT_SECONDS = 30.0
#: ``service.name`` of the traces when OTEL_SERVICE_NAME is not set.
DEFAULT_OTEL_SERVICE_NAME = "slack-agent"
#: Slack shows up to four suggested prompts; a title is a short label, a message is what gets sent.
MAX_SUGGESTED_PROMPTS = 4

Verbosity = Literal["full", "compact"]
#: The thread shape: ``replies`` (a reply per step), or one streamed reply with task cards (``timeline``) or with
#: the task cards grouped in a plan block (``plan``).
Display = Literal["replies", "timeline", "plan"]
Role = Literal["all", "web", "worker"]


class Settings(AgentSettings, ToolSettings):
    """Every setting of ``python -m bot``; the README's settings table documents each with its default."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    slack_bot_token: SecretStr | None = Field(default=None, description="Bot token (xoxb-...).")
    slack_signing_secret: SecretStr | None = Field(default=None, description="Signs every HTTP request from Slack.")
    slack_app_token: SecretStr | None = Field(
        default=None, description="App-level token (xapp-...); when set, Socket Mode replaces the HTTP endpoint."
    )
    slack_api_url: str = Field(default=DEFAULT_SLACK_API_URL, description="Slack Web API base URL.")
    redis_url: str | None = Field(default=None, description="Redis to use; unset starts an embedded one.")
    redis_sentinels: str = Field(
        default="", description="Sentinels (host:port,host:port) that name the Redis master; replaces REDIS_URL."
    )
    redis_sentinel_master: str = Field(
        default="", description="Name of the master the Sentinels monitor (needed with REDIS_SENTINELS)."
    )
    redis_startup_wait_seconds: float = Field(
        default=STARTUP_WAIT_SECONDS, ge=0, description="How long start-up waits for REDIS_URL to answer."
    )
    port: int = Field(
        default=DEFAULT_PORT, ge=0, lt=65536, description="HTTP port of /slack/events and /healthz (0: any free)."
    )
    worker_health_port: int | None = Field(
        default=None, ge=0, lt=65536,
        description="Port of a worker process's /healthz (unset: PORT + 1, so never PORT; 0: any free).",
    )
    host: str = Field(default="0.0.0.0", description="Address the HTTP server binds.")
    redis_key_prefix: str = Field(default=DEFAULT_KEY_PREFIX, min_length=1, description="Prefix of every Redis key.")
    arq_queue_name: str = Field(default=DEFAULT_QUEUE_NAME, min_length=1, description="arq queue of agent runs.")
    thread_retention_days: float = Field(
        default=DEFAULT_TTL_SECONDS / 86_400, gt=0,
        description="Days a thread's history, progress and trace are kept after its last step.",
    )
    agent_verbosity: Verbosity = Field(default="full", description="Default per-workspace thread shape.")
    agent_display: Display = Field(
        default="replies", description="Default per-workspace display: replies, timeline or plan (streamed)."
    )
    agent_models: str = Field(
        default="",
        description="Models workspaces, channels and runs may pick, the first the default: `name` (price from the "
        "price table) or `name:prompt/completion` (USD per 1M tokens), comma-separated; empty: OPENAI_MODEL only.",
    )
    agent_respond_all_per_minute: int = Field(
        default=5, ge=1, description="Runs one person may start per minute in a `respond all` channel without "
        "mentioning the agent (more are not answered).",
    )
    agent_suggested_prompts: str = Field(
        default=DEFAULT_SUGGESTED_PROMPTS,
        description='Suggested prompts of a new assistant thread: a JSON list of {"title", "message"}.',
    )
    slack_stream_interval_seconds: float = Field(
        default=1.0, ge=0, description="Least time between two chat.appendStream calls of one stream (0: none)."
    )
    agent_answer_file_chars: int = Field(
        default=DEFAULT_ANSWER_FILE_CHARS, ge=0,
        description="Answer length (characters) past which it is uploaded into the thread as answer.md under a "
        "short summary, not split over messages (0: never).",
    )
    agent_answer_canvas: bool = Field(
        default=False, description="Put an answer past AGENT_ANSWER_FILE_CHARS in a canvas the channel may read "
        "(canvases:write, files:read) instead of answer.md; where Slack refuses, it goes as the file.",
    )
    data_dir: Path = Field(default=Path("data"), description="Where the embedded Redis keeps its files.")
    slack_max_retry_after_seconds: float = Field(
        default=DEFAULT_MAX_RETRY_AFTER_SECONDS, ge=0, description="Cap on one Retry-After wait after a 429."
    )
    slack_timeout_seconds: float = Field(
        default=SLACK_HTTP_TIMEOUT, gt=0, description="Timeout of one Slack Web API request."
    )
    slack_max_connections: int = Field(
        default=0, ge=0,
        description="Slack requests one process has in flight at most (0: two per WORKER_MAX_JOBS, at least 100).",
    )
    slack_posts_per_second: float = Field(
        default=1.0, ge=0, description="Per-channel chat.postMessage pace across all workers (0: no pacing)."
    )
    slack_updates_per_minute: float = Field(
        default=50.0, ge=0, description="Per-workspace chat.update pace across all workers (0: no pacing)."
    )
    worker_max_jobs: int = Field(
        default=50, gt=0, description="Agent runs one worker process runs at once (each mostly waits on the LLM)."
    )
    agent_max_concurrent_runs_per_workspace: int = Field(
        default=DEFAULT_MAX_CONCURRENT_RUNS, ge=1, le=MAX_CONCURRENT_RUNS_CAP,
        description="Runs one workspace has in flight at most (across all workers); the rest wait their turn.",
    )
    agent_max_concurrent_runs_per_user: int = Field(
        default=DEFAULT_MAX_CONCURRENT_RUNS_PER_USER, ge=1, le=MAX_CONCURRENT_RUNS_CAP,
        description="Runs one person has in flight at most in a workspace; their others wait behind their own.",
    )
    agent_budget_usd: str = Field(
        default="10.00",
        description="Default budget of each workspace per period, USD; empty: no budget; 0 freezes spending.",
    )
    agent_user_budget_usd: str = Field(
        default="",
        description="Default cap on what one person's runs may spend per period in a workspace, USD; empty: none.",
    )
    agent_budget_period: Literal["monthly", "daily"] = Field(
        default="monthly", description="Budget period: monthly (the 1st, 00:00 UTC) or daily (00:00 UTC)."
    )
    agent_admin_user_ids: str = Field(
        default="", description="Comma-separated user ids that may change limits besides Slack admins and owners."
    )
    agent_allow_guests: bool = Field(default=False, description="Let guests start runs on the workspace's budget.")
    agent_allow_external_users: bool = Field(
        default=False, description="Let people of other organisations in shared channels start runs."
    )
    agent_approval_timeout_seconds: float = Field(
        default=DEFAULT_APPROVAL_TIMEOUT_SECONDS, gt=0,
        description="How long a tool call needing approval waits for a press before it is denied.",
    )
    agent_approval_max_timeout_seconds: float = Field(
        default=24 * 3600, gt=0,
        description="Longest wait an approval policy may set (`timeout`); a parked run waits without a worker.",
    )
    agent_file_max_bytes: int = Field(
        default=DEFAULT_FILE_MAX_BYTES, gt=0,
        description="Largest file a run downloads from Slack (bytes); a larger one is refused with a note.",
    )
    agent_files_max_bytes_per_run: int = Field(
        default=DEFAULT_FILES_MAX_BYTES_PER_RUN, gt=0,
        description="All the files one run downloads together (bytes): the message's own first, then the thread's.",
    )
    agent_file_download_timeout_seconds: float = Field(
        default=DEFAULT_FILE_DOWNLOAD_TIMEOUT_SECONDS, gt=0, description="How long one file's download may take."
    )
    slack_client_id: str | None = Field(
        default=None, description="OAuth client id; set instead of SLACK_BOT_TOKEN to serve many workspaces."
    )
    slack_client_secret: SecretStr | None = Field(default=None, description="OAuth client secret.")
    slack_token_encryption_key: SecretStr | None = Field(
        default=None, description="Fernet key(s), comma-separated, newest first: installation tokens at rest."
    )
    slack_scopes: str = Field(default=DEFAULT_BOT_SCOPES, description="Bot scopes an install asks for.")
    slack_user_scopes: str = Field(default="", description="User scopes an install asks for (none by default).")
    slack_redirect_uri: str | None = Field(
        default=None, description="Redirect URL sent to Slack; unset: the app's only configured one."
    )
    slack_state_expiration_seconds: int = Field(
        default=OAuthStateUtils.default_expiration_seconds, gt=0,
        description="How long an install link (its OAuth state) stays valid.",
    )

    # Operations: logs, metrics, processes.
    log_format: LogFormat = Field(
        default=DEFAULT_LOG_FORMAT, description="text: human-readable lines; json: one JSON object per line."
    )
    log_level: LogLevel = Field(default=DEFAULT_LOG_LEVEL, description="Lowest level logged (DEBUG ... CRITICAL).")
    audit_log: str = Field(
        default="stdout",
        description="The audit stream (bot/audit.py): stdout, off, or a file path (one JSON line per event).",
    )
    agent_usage_retention_days: int = Field(
        default=400, ge=1, le=3660,
        description="Days the usage counters of /agent-limits usage are kept (each day's counters expire then).",
    )
    metrics_token: SecretStr | None = Field(
        default=None, description="When set, GET /metrics needs Authorization: Bearer <this token>."
    )
    # Who sees /metrics (bot/serve/metrics_http.py): a listener of its own, and whether workspaces are named in it.
    metrics_port: int | None = Field(
        default=None, ge=0, lt=65536,
        description="Serve /metrics on this port only (not on PORT); one process serves it (0: any free port).",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Address the METRICS_PORT listener binds.")
    metrics_team_labels: bool | None = Field(
        default=None,
        description="Name each workspace (team label) in spend and budget metrics; unset: off in OAuth mode.",
    )

    @field_validator("metrics_port", "metrics_team_labels", mode="before")
    @classmethod
    def _metrics_empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    worker_processes: int = Field(
        default=0, ge=0, description="Worker processes of `worker` and of `python -m bot` (0: one per CPU core)."
    )
    worker_event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop", description="Event loop of `worker` processes: uvloop (less CPU per step) or asyncio."
    )
    http_listen_backlog: int = Field(
        default=LISTEN_BACKLOG, gt=0, description="Kernel queue of connections waiting for accept() (≤ somaxconn)."
    )
    http_accept_batch: int = Field(
        default=ACCEPT_BATCH, gt=0, description="Connections accepted per event-loop pass."
    )
    http_max_connections_per_ip: int = Field(
        default=0, ge=0, description="Open connections per peer address (0: no cap; keep 0 behind a load balancer)."
    )
    http_reuse_port: bool = Field(
        default=False,
        description="Bind PORT (a worker: WORKER_HEALTH_PORT) with SO_REUSEPORT: the supervisor's children share it.",
    )

    # Traces (bot/telemetry.py): off unless an OTLP endpoint is named; the SDK reads the other OTEL_* variables.
    otel_exporter_otlp_endpoint: str = Field(
        default="", description="OTLP/HTTP collector base URL (e.g. http://localhost:4318): traces on; empty: off."
    )
    otel_service_name: str = Field(
        default=DEFAULT_OTEL_SERVICE_NAME, min_length=1, description="service.name of every process's spans."
    )
    otel_capture_content: bool = Field(
        default=False,
        validation_alias=AliasChoices("otel_capture_content", "otel_instrumentation_genai_capture_message_content"),
        description="Put message text (prompts, answers, tool arguments and results) in spans.",
    )

    @field_validator("otel_exporter_otlp_endpoint")
    @classmethod
    def _otlp_url(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("http://", "https://")):
            raise ConfigError(f"OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL (OTLP/HTTP), "
                              f"got {value!r}")
        return value

    @field_validator("slack_bot_token", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # .env.example lists `SLACK_BOT_TOKEN=`: left empty in a copy, it means OAuth mode, not a missing token.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("agent_suggested_prompts")
    @classmethod
    def _prompts(cls, value: str) -> str:
        parse_suggested_prompts(value)
        return value

    def suggested_prompts(self) -> list[dict[str, str]]:
        return parse_suggested_prompts(self.agent_suggested_prompts)

    @property
    def thread_ttl_seconds(self) -> int:
        return max(1, int(self.thread_retention_days * 86_400))

    @property
    def socket_mode(self) -> bool:
        return self.slack_app_token is not None

    @property
    def metrics_name_teams(self) -> bool:
        """METRICS_TEAM_LABELS, whose default follows the mode: one team (the operator's own) is named, many are not."""
        return self.metrics_team_labels if self.metrics_team_labels is not None else not self.oauth_mode

    @property
    def oauth_mode(self) -> bool:
        """Many workspaces, each with its own stored token: a client id and no single SLACK_BOT_TOKEN."""
        return self.slack_bot_token is None and bool(self.slack_client_id)

    def listen_port(self, role: Role) -> tuple[str, int]:
        """The setting naming the port a process of ``role`` listens on, and the port.

        ``all`` and ``web`` serve ``/slack/events`` and ``/healthz`` on PORT; a worker process serves its own
        ``/healthz`` on WORKER_HEALTH_PORT, by default the port after PORT, so a worker started beside the web
        process from the same settings never asks for the web's port.
        """
        if role != "worker":
            return "PORT", self.port
        if self.worker_health_port is not None:
            return "WORKER_HEALTH_PORT", self.worker_health_port
        if self.port >= 65535:
            raise ConfigError("WORKER_HEALTH_PORT is not set and PORT is 65535, so PORT + 1 is no port: set it")
        return "WORKER_HEALTH_PORT", self.port + 1 if self.port else 0

    def require_oauth(self, role: Role) -> None:
        """Raise ConfigError naming the first missing or unusable setting OAuth mode needs."""
        for name in ("slack_client_id", "slack_client_secret", "slack_token_encryption_key"):
            value = getattr(self, name)
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            if not text or not text.strip():
                raise ConfigError(f"{name.upper()} is not set: OAuth mode (no SLACK_BOT_TOKEN) needs it")
        if role in ("all", "web") and not self.socket_mode and not self.slack_signing_secret:
            raise ConfigError("SLACK_SIGNING_SECRET is not set: copy it from the Slack app's settings page")

    def require_slack(self, role: Role) -> None:
        """Raise ConfigError naming the first missing token ``role`` needs."""
        needed = ["slack_bot_token"]
        if role in ("all", "web"):
            needed.append("slack_app_token" if self.socket_mode else "slack_signing_secret")
        for name in needed:
            value = getattr(self, name)
            if value is None or not value.get_secret_value().strip():
                raise ConfigError(f"{name.upper()} is not set: copy it from the Slack app's settings page")
        if not self.slack_api_url.endswith("/"):
            raise ConfigError(f"SLACK_API_URL must end with '/', got {self.slack_api_url!r}")

    def redis_sentinel(self) -> SentinelMaster | None:
        """The Sentinel-monitored master, or None; ConfigError naming REDIS_SENTINELS or its master if wrong."""
        return SentinelMaster.from_settings(self.redis_sentinels, self.redis_sentinel_master)

    @property
    def embedded_redis(self) -> bool:
        """Single-machine mode: neither REDIS_URL nor REDIS_SENTINELS is set."""
        return not self.redis_url and not self.redis_sentinels.strip()

    def bot_token(self) -> str:
        return self.slack_bot_token.get_secret_value() if self.slack_bot_token else ""

    def secrets(self) -> list[str]:
        """Every secret of every part of the service's settings (found by type: none can be forgotten)."""
        return secret_values(self)


def parse_suggested_prompts(raw: str) -> list[dict[str, str]]:
    """AGENT_SUGGESTED_PROMPTS as Slack takes them; raises ConfigError naming the setting when it is malformed."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"AGENT_SUGGESTED_PROMPTS is not valid JSON ({exc.msg} at char {exc.pos})") from None
    shape = 'a JSON list of {"title": "...", "message": "..."} objects'
    if not isinstance(data, list) or not 1 <= len(data) <= MAX_SUGGESTED_PROMPTS:
        raise ConfigError(f"AGENT_SUGGESTED_PROMPTS must be {shape}, 1 to {MAX_SUGGESTED_PROMPTS} of them")
    prompts: list[dict[str, str]] = []
    for i, item in enumerate(data):
        ok = isinstance(item, dict) and set(item) == {"title", "message"}
        if not ok or not all(isinstance(v, str) and v.strip() for v in item.values()):
            raise ConfigError(f"AGENT_SUGGESTED_PROMPTS item {i} must be {{\"title\": str, \"message\": str}}")
        prompts.append({"title": item["title"][:75], "message": item["message"]})
    return prompts
