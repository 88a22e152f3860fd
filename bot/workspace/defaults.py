"""``WorkspaceDefaults``: the workspace stage's piece of ``Settings``, what every workspace starts from.

A workspace's limits are the engine's caps (``AgentSettings``) and tools (``ToolSettings``) with its own choices
over them; these are the deployment's defaults of those choices (``/agent-limits`` and App Home change them per
workspace, ``bot.workspace.settings.config.LimitsPolicy`` reads them once at start-up).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent_core import AgentSettings
from bot.settings_base import SettingsPiece
from bot.workspace.shapes import Display, Verbosity
from tools import ToolSettings

#: Runs one workspace has in flight by default (``/agent-limits max-concurrent`` changes it), and the most allowed.
DEFAULT_MAX_CONCURRENT_RUNS = 10
MAX_CONCURRENT_RUNS_CAP = 1000
#: Runs one person has in flight in a workspace by default (``/agent-limits max-concurrent-per-user`` changes it).
DEFAULT_MAX_CONCURRENT_RUNS_PER_USER = 3
#: Files in (bot/runs/downloads.py): the largest file a run downloads, and all of one run's files together.
DEFAULT_FILE_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_FILES_MAX_BYTES_PER_RUN = 50 * 1024 * 1024
#: How long an approval request waits for a press when ``AGENT_APPROVAL_TIMEOUT_SECONDS`` is not set.
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 300.0


class WorkspaceDefaults(SettingsPiece, AgentSettings, ToolSettings):
    """The defaults of every workspace's limits, budget, display and permissions."""

    # -- schedules (bot/workspace/schedules, bot/queue/schedule_clock.py) --------------------------------------
    agent_schedules_per_workspace: int = Field(
        default=100, ge=0, description="Schedules one workspace may have (/agent schedule add refuses past it)."
    )
    agent_schedules_per_person: int = Field(
        default=10, ge=0, description="Schedules one person may have in a workspace."
    )
    agent_schedule_min_interval_seconds: int = Field(
        default=900, ge=1, description="The shortest gap between two fires of a recurring schedule, in seconds."
    )
    agent_schedule_max_lateness_seconds: int = Field(
        default=6 * 3600, ge=1,
        description="A fire missed while the service was down runs once when it is back, unless it is later than this.",
    )
    # -- memory (bot/workspace/memory, bot/runs/memory.py) ------------------------------------------------------
    agent_memory_default: Literal["on", "off"] = Field(
        default="off", description="Memory in a workspace whose admins have not said (`/agent-limits memory on|off`).",
    )
    agent_memory_ttl_days: int = Field(
        default=365, ge=1, le=3660, description="Days a memory is kept after it was last written or used.",
    )
    agent_memory_per_person: int = Field(
        default=200, ge=0, le=10_000, description="Memories one person (or one channel's notes) may hold.",
    )
    # -- approvals (bot/runs/approvals.py; a policy's default and longest timeout: /agent-limits approvals) --------
    agent_approval_timeout_seconds: float = Field(
        default=DEFAULT_APPROVAL_TIMEOUT_SECONDS, gt=0,
        description="How long a tool call needing approval waits for a press before it is denied.",
    )
    agent_approval_max_timeout_seconds: float = Field(
        default=24 * 3600, gt=0,
        description="Longest wait an approval policy may set (`timeout`); a parked run waits without a worker.",
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
    agent_file_max_bytes: int = Field(
        default=DEFAULT_FILE_MAX_BYTES, gt=0,
        description="Largest file a run downloads from Slack (bytes); a larger one is refused with a note.",
    )
    agent_files_max_bytes_per_run: int = Field(
        default=DEFAULT_FILES_MAX_BYTES_PER_RUN, gt=0,
        description="All the files one run downloads together (bytes): the message's own first, then the thread's.",
    )
    agent_usage_retention_days: int = Field(
        default=400, ge=1, le=3660,
        description="Days the usage counters of /agent-limits usage are kept (each day's counters expire then).",
    )
