"""The agent engine: a ReAct loop with a four-layer stopper, per-step context and typed events.

It knows nothing of Slack; callers plug in an LLM, tools, a store, a budget and read the event stream.
"""

from agent_core.attachments import Attachment, format_bytes
from agent_core.budget import (
    Budget,
    BudgetLayer,
    BudgetState,
    BudgetUsage,
    InMemoryBudget,
    Period,
    RedisBudget,
    Reservation,
    utc_now,
)
from agent_core.cancel import Cancelled, CancelToken
from agent_core.completion import LLMResponse, ToolCallRequest
from agent_core.cost import MICROS_PER_USD, PRICE_TABLE_DATE, ModelChoice, Price, format_usd, price_for, usd_to_micros
from agent_core.errors import AgentError, ConfigError, LLMCause, LLMError, StoreError
from agent_core.events import (
    AnswerDelta,
    Event,
    FinalAnswer,
    Observed,
    RunStarted,
    StepFinished,
    StopCase,
    StopFacts,
    Stopped,
    StopReason,
    StreamReset,
    StreamResetReason,
    Thought,
    ThoughtDelta,
    ToolCalled,
    Usage,
)
from agent_core.keys import DEFAULT_KEY_PREFIX, Keys
from agent_core.lease import Lease, LeaseKeeper, RunLeases
from agent_core.limits import Limits
from agent_core.llm import LLM, OpenAIChatLLM, StreamingLLM
from agent_core.loop import Agent
from agent_core.options import AgentOptions
from agent_core.preload import preload_engine
from agent_core.redis_batch import ScriptCall, run_together
from agent_core.redis_store import DEFAULT_TTL_SECONDS, RedisThreadStore, RedisTraceSink, awaited
from agent_core.renewal import DEFAULT_LEASE_RENEW_SECONDS, DEFAULT_LEASE_SECONDS
from agent_core.request import RunRequest
from agent_core.settings import AgentSettings
from agent_core.sse import DeltaSink, StreamDelta
from agent_core.store import InMemoryThreadStore, Message, Progress, ThreadState, ThreadStore
from agent_core.telemetry import GENAI_PROVIDER, cost_attributes, use_tracer

__all__ = [
    "Agent",
    "AgentError",
    "AgentOptions",
    "AgentSettings",
    "AnswerDelta",
    "Attachment",
    "Budget",
    "BudgetLayer",
    "BudgetState",
    "BudgetUsage",
    "CancelToken",
    "Cancelled",
    "ConfigError",
    "DEFAULT_KEY_PREFIX",
    "DEFAULT_LEASE_RENEW_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TTL_SECONDS",
    "DeltaSink",
    "Event",
    "FinalAnswer",
    "GENAI_PROVIDER",
    "InMemoryBudget",
    "InMemoryThreadStore",
    "Keys",
    "LLM",
    "LLMCause",
    "LLMError",
    "LLMResponse",
    "Lease",
    "LeaseKeeper",
    "Limits",
    "MICROS_PER_USD",
    "Message",
    "ModelChoice",
    "Observed",
    "OpenAIChatLLM",
    "PRICE_TABLE_DATE",
    "Period",
    "Price",
    "Progress",
    "RedisBudget",
    "RedisThreadStore",
    "RedisTraceSink",
    "Reservation",
    "RunLeases",
    "RunRequest",
    "RunStarted",
    "ScriptCall",
    "StepFinished",
    "StopCase",
    "StopFacts",
    "StopReason",
    "Stopped",
    "StoreError",
    "StreamDelta",
    "StreamReset",
    "StreamResetReason",
    "StreamingLLM",
    "Thought",
    "ThoughtDelta",
    "ThreadState",
    "ThreadStore",
    "ToolCallRequest",
    "ToolCalled",
    "Usage",
    "awaited",
    "cost_attributes",
    "format_bytes",
    "format_usd",
    "preload_engine",
    "price_for",
    "run_together",
    "usd_to_micros",
    "use_tracer",
    "utc_now",
]
