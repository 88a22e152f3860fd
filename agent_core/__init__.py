"""The agent engine: a ReAct loop with a four-layer stopper, per-step context and typed events.

It knows nothing of Slack; callers plug in an LLM, tools, a store, a budget and read the event stream.
"""

from agent_core.budget import Budget, InMemoryBudget, Reservation
from agent_core.cancel import CancelToken
from agent_core.cost import PRICE_TABLE_DATE, Price, format_usd, price_for
from agent_core.errors import AgentError, ConfigError, LLMError, StoreError
from agent_core.events import (
    Event,
    FinalAnswer,
    Observed,
    RunStarted,
    Stopped,
    StopReason,
    Thought,
    ToolCalled,
    Usage,
)
from agent_core.limits import Limits
from agent_core.llm import LLM, LLMResponse, OpenAIChatLLM, ToolCallRequest
from agent_core.loop import Agent
from agent_core.settings import AgentSettings
from agent_core.store import InMemoryThreadStore, Message, Progress, ThreadState, ThreadStore

__all__ = [
    "LLM",
    "PRICE_TABLE_DATE",
    "Agent",
    "AgentError",
    "AgentSettings",
    "Budget",
    "CancelToken",
    "ConfigError",
    "Event",
    "FinalAnswer",
    "InMemoryBudget",
    "InMemoryThreadStore",
    "LLMError",
    "LLMResponse",
    "Limits",
    "Message",
    "Observed",
    "OpenAIChatLLM",
    "Price",
    "Progress",
    "Reservation",
    "RunStarted",
    "StopReason",
    "Stopped",
    "StoreError",
    "ThreadState",
    "ThreadStore",
    "Thought",
    "ToolCallRequest",
    "ToolCalled",
    "Usage",
    "format_usd",
    "price_for",
]
