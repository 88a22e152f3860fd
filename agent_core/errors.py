"""Errors of the engine. Limits reached are never errors: they end a run with a ``Stopped`` event.

    AgentError                 base of everything raised on purpose by agent_core
    ├── ConfigError            a setting is missing or wrong; raised at start-up, message names the setting
    ├── LLMError               the model endpoint kept failing (after retries); ends a run with ``error``
    └── StoreError             the state store (Redis) is unreachable; ends a run with ``error`` (fail closed)

A model's own mistakes (unknown tool, invalid arguments, a tool's timeout) are not errors at all: they
become observations and the loop goes on.
"""

from __future__ import annotations

from typing import Literal


class AgentError(Exception):
    """Base class; the message is meant for the person who can fix it."""


class ConfigError(AgentError):
    """A setting is missing or invalid. One line, naming the setting and what to change."""


#: Why an LLM call failed, for the reply and for the bot's wording (public: bot/ branches on these).
LLMCause = Literal[
    "unreachable", "timeout", "rate_limited", "quota", "auth", "bad_request", "server_error", "bad_response"
]


class LLMError(AgentError):
    """The LLM endpoint failed for good; ``message`` is the provider's own wording where there is one.

    The message never holds a configuration value: URLs in it are cut to scheme and host.
    """

    def __init__(
        self,
        message: str,
        *,
        cause: LLMCause = "bad_response",
        status: int | None = None,
        retryable: bool = False,
        charged: bool = False,
    ) -> None:
        super().__init__(message)
        self.cause: LLMCause = cause
        #: The endpoint answered (2xx) but the answer is unusable: the call may be billed, so the worst case is.
        self.charged = charged
        self.status = status
        self.retryable = retryable


class StoreError(AgentError):
    """The state or budget store cannot be reached; the run fails closed."""
