"""How an :class:`~agent_core.loop.Agent` runs: one frozen value, built by ``Agent.from_settings`` or by hand."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from agent_core import files_in, history
from agent_core.budget import DEFAULT_BUDGET_WAIT_SECONDS
from agent_core.cost import Price
from agent_core.limits import Limits
from agent_core.tokens import TokenCounter
from tools import DEFAULT_GUARD_MODE, DEFAULT_OBSERVATION_MAX_CHARS, GuardMode


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOptions:
    """The engine's settings for every run it makes (a run's own limits, budget and model come in its request)."""

    price: Price
    """What the endpoint's model costs: every call's worst case is checked and held against it."""

    limits: Limits = field(default_factory=Limits)
    """The per-run caps of a run whose request brings none."""

    protocol: Literal["tools", "react"] = "tools"
    """How the model calls tools: native tool calls, or the text ReAct format (for endpoints without tools)."""

    note_role: Literal["system", "user"] = "system"
    """The role the progress note is sent with (some endpoints take one system message only)."""

    system_prompt: str | None = None
    """The system prompt; None: the engine's own (``agent_core.context.SYSTEM_PROMPT``)."""

    history_tokens: int = history.DEFAULT_HISTORY_TOKENS
    """Tokens of the thread's earlier runs sent with each call, newest first."""

    counter: TokenCounter | None = None
    """Counts prompt tokens before a call; None: the one for the model's name."""

    clock: Callable[[], float] = time.monotonic
    """The runs' wall clock (a test may drive it)."""

    budget_wait_seconds: float = DEFAULT_BUDGET_WAIT_SECONDS
    """How long a call waits for other runs' budget holds to come back before the run stops ``budget_busy``."""

    secrets: tuple[str, ...] = ()
    """Values redacted from everything the model, the thread and the traces see."""

    observation_max_chars: int = DEFAULT_OBSERVATION_MAX_CHARS
    """Characters of a tool's result the model reads (shaped to fit)."""

    tool_timeouts: Mapping[str, float] = field(default_factory=dict)
    """Seconds a tool call may take, by tool name, where it differs from the tool's own."""

    exfiltration_guard: GuardMode | str = DEFAULT_GUARD_MODE
    """How calls that could carry private data out are guarded (``tools.GuardMode``)."""

    vision: bool | None = None
    """Whether images are sent to the model as images; None: decided by the model's name."""

    image_max_side: int = files_in.DEFAULT_IMAGE_MAX_SIDE
    """Pixels of an image's longer side sent to the model (larger ones are scaled down)."""

    transcribe_model: str = ""
    """The model audio files are transcribed with; empty: audio is not transcribed."""

    transcribe_price: int | None = None
    """What transcription costs, in micro-dollars a minute of audio; None: the price table's for the model."""
