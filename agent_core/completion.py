"""A Chat Completions answer read into an :class:`LLMResponse`: the body's shape and its usage report checked, so
a broken endpoint is an LLMError (marked charged: it answered, and may bill the call) rather than a crash."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_core.errors import LLMError
from agent_core.reasoning import split_think
from agent_core.store import Message

#: A reported token count above this is not a usage report (the largest context windows are a few million).
MAX_REPORTED_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call the model asked for; ``arguments`` is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class LLMResponse:
    content: str | None
    tool_calls: tuple[ToolCallRequest, ...]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    finish_reason: str = "stop"
    #: The model declined: ``message.refusal`` (OpenAI's structured refusal), shown verbatim.
    refusal: str | None = None
    #: Reasoning that came with the reply: ``reasoning_content`` / ``reasoning`` fields, or a ``<think>`` block
    #: split off ``content`` (agent_core/reasoning.py). Never part of the answer or of the stored history.
    reasoning: str | None = None
    #: The usage may not be the model provider's own count: a gateway that can make it up answered (see
    #: ``gateway_counts_usage``).
    usage_estimated: bool = False

    def assistant_message(self) -> Message:
        """The message to append to the history, in Chat Completions form."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


def json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        raise LLMError("the LLM endpoint answered with something that is not JSON", charged=True) from None
    if not isinstance(data, dict):
        raise LLMError("the LLM endpoint answered with JSON that is not an object", charged=True)
    return data


def gateway_counts_usage(headers: Mapping[str, str]) -> bool:
    """A streamed answer from LiteLLM's proxy (it sends ``x-litellm-*`` headers): when the provider's stream had
    no usage, LiteLLM counts the tokens itself (``stream_chunk_builder``) and the usage chunk it sends looks the
    same either way, so its figures cannot be taken as the provider's."""
    return "x-litellm-call-id" in headers or "x-litellm-version" in headers


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def to_response(completion: dict[str, Any], *, gateway_usage: bool = False) -> LLMResponse:
    """Read a Chat Completions response body (shape checked, so a broken endpoint is an LLMError)."""
    try:
        choice = completion["choices"][0]
        message = choice["message"]
        content = message.get("content")
        reasoning = _text(message.get("reasoning_content")) or _text(message.get("reasoning"))
        if content and "think>" in content:
            content, thought = split_think(content)
            content = content or None  # nothing but reasoning: no content, as a server with a parser sends it
            reasoning = "\n\n".join(r for r in (reasoning, thought) if r) or None
        calls = tuple(
            ToolCallRequest(id=str(c["id"]), name=str(c["function"]["name"]),
                            arguments=str(c["function"].get("arguments") or ""))
            for c in (message.get("tool_calls") or ())
            if c.get("function") is not None
        )
        usage = completion.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return LLMResponse(
            content=content,
            tool_calls=calls,
            prompt_tokens=_token_count(usage, "prompt_tokens"),
            completion_tokens=_token_count(usage, "completion_tokens"),
            cached_tokens=_token_count(details, "cached_tokens"),
            finish_reason=str(choice.get("finish_reason") or "stop"),
            refusal=_text(message.get("refusal")),
            reasoning=reasoning,
            usage_estimated=gateway_usage and bool(usage),
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise LLMError(f"the LLM endpoint's answer is not a chat completion ({type(exc).__name__}: {exc})",
                       charged=True) from None


def _token_count(usage: Mapping[str, Any], name: str) -> int:
    """A reported count, checked: a negative, fractional or absurd one is a broken answer, not a number to bill."""
    value = usage.get(name)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPORTED_TOKENS:
        shown = repr(value)[:40]
        raise LLMError(f"the LLM endpoint reported an impossible usage.{name} ({shown})", charged=True)
    return value
