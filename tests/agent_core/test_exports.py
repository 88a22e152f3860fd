"""The engine's public surface: what ``bot``, the terminal and the tests import from ``agent_core``."""

from __future__ import annotations

import agent_core


def test_public_names() -> None:
    assert agent_core.__all__ == sorted(agent_core.__all__)
    assert set(agent_core.__all__) == {
        # the engine and what a run is asked to do
        "Agent",
        "AgentOptions",
        "AgentSettings",
        "RunRequest",
        "Attachment",
        "Limits",
        "CancelToken",
        "Cancelled",
        # the event stream
        "Event",
        "RunStarted",
        "Thought",
        "ThoughtDelta",
        "AnswerDelta",
        "StreamReset",
        "StreamResetReason",
        "ToolCalled",
        "Observed",
        "StepFinished",
        "FinalAnswer",
        "Stopped",
        "StopReason",
        "StopFacts",
        "StopCase",
        "Usage",
        # the LLM port and its OpenAI-compatible implementation
        "LLM",
        "StreamingLLM",
        "LLMResponse",
        "ToolCallRequest",
        "DeltaSink",
        "StreamDelta",
        "OpenAIChatLLM",
        # what a parent that forks the engine's processes loads once for all of them
        "preload_engine",
        # errors
        "AgentError",
        "ConfigError",
        "LLMError",
        "LLMCause",
        "StoreError",
        # money, and sizes as people read them
        "PRICE_TABLE_DATE",
        "MICROS_PER_USD",
        "Price",
        "ModelChoice",
        "format_usd",
        "format_bytes",
        "price_for",
        "usd_to_micros",
        # the budget port and its ledgers
        "Budget",
        "BudgetState",
        "Reservation",
        "InMemoryBudget",
        "RedisBudget",
        "BudgetLayer",
        "BudgetUsage",
        "Period",
        "utc_now",
        # the thread store port and its stores
        "ThreadStore",
        "ThreadState",
        "Message",
        "Progress",
        "InMemoryThreadStore",
        "RedisThreadStore",
        "RedisTraceSink",
        "DEFAULT_TTL_SECONDS",
        "awaited",
        # Redis keys, run leases, and the round trips bot's own scripts share
        "Keys",
        "DEFAULT_KEY_PREFIX",
        "Lease",
        "LeaseKeeper",
        "RunLeases",
        "DEFAULT_LEASE_SECONDS",
        "DEFAULT_LEASE_RENEW_SECONDS",
        "ScriptCall",
        "run_together",
        # traces of the engine's calls (OpenTelemetry), when the service hands a tracer in
        "use_tracer",
        "GENAI_PROVIDER",
        "cost_attributes",
    }
    for name in agent_core.__all__:
        assert getattr(agent_core, name) is not None
