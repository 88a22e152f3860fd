"""Errors of the engine. Limits reached are never errors: they end a run with a ``Stopped`` event.

    AgentError                 base of everything raised on purpose by agent_core
    ├── ConfigError            a setting is missing or wrong; raised at start-up, message names the setting
    ├── LLMError               the model endpoint kept failing (after retries); ends a run with ``error``
    └── StoreError             the state store (Redis) is unreachable; ends a run with ``error`` (fail closed)

A model's own mistakes (unknown tool, invalid arguments, a tool's timeout) are not errors at all: they
become observations and the loop goes on.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base class; the message is meant for the person who can fix it."""


class ConfigError(AgentError):
    """A setting is missing or invalid. One line, naming the setting and what to change."""


class LLMError(AgentError):
    """The LLM endpoint failed for good; ``message`` is the provider's own wording where there is one."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class StoreError(AgentError):
    """The state or budget store cannot be reached; the run fails closed."""
