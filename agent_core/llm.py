"""LLM port and its OpenAI-compatible implementation (official ``openai`` client on aiohttp)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import openai

from agent_core.errors import LLMError
from agent_core.store import Message

log = logging.getLogger(__name__)

#: Longest wait between retries, whatever Retry-After asks: a run has a wall-clock cap to keep.
RETRY_WAIT_CAP_SECONDS = 20.0


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

    def assistant_message(self) -> Message:
        """The message to append to the history, in Chat Completions form."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


class LLM(Protocol):
    """A chat model. ``complete`` raises :class:`LLMError` once retries are spent; never returns partial data."""

    model: str

    async def complete(
        self, messages: Sequence[Message], *, tools: list[dict[str, Any]] | None, max_tokens: int
    ) -> LLMResponse: ...

    async def aclose(self) -> None: ...


def _provider_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return exc.message


def _error_code(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("code") or inner.get("type") or "")
    return ""


def _retry_after(exc: openai.APIStatusError, attempt: int) -> float:
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return min(max(float(value) * scale, 0.0), RETRY_WAIT_CAP_SECONDS)
            except ValueError:
                break
    return min(0.5 * 2.0**attempt + random.uniform(0, 0.25), RETRY_WAIT_CAP_SECONDS)


def _uses_max_completion_tokens(model: str) -> bool:
    # OpenAI's reasoning models refuse `max_tokens`; most compatible servers only know `max_tokens`.
    name = model.lower().rsplit("/", 1)[-1]
    return name.startswith(("o1", "o3", "o4", "gpt-5"))


#: Per-request options: bearer auth from the client's api_key (as ``create()`` asks for it).
_REQUEST_OPTIONS: Any = {"security": {"bearer_auth": True}}


class OpenAIChatLLM:
    """Chat Completions through ``AsyncOpenAI``; retries are ours, so non-retryable 429s fail at once."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 3,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self._max_retries = max_retries
        self._limit_param = "max_completion_tokens" if _uses_max_completion_tokens(model) else "max_tokens"
        # The client's own retries are off: it retries insufficient_quota and waits unbounded.
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(
        self, messages: Sequence[Message], *, tools: list[dict[str, Any]] | None, max_tokens: int
    ) -> LLMResponse:
        params: dict[str, Any] = {"model": self.model, "messages": list(messages), self._limit_param: max_tokens}
        if tools:
            params["tools"] = tools
        attempt = 0
        while True:
            try:
                # The client's own POST, without `create()`'s per-call TypedDict transform of the whole
                # history (several ms of CPU per step, growing with history): our messages are plain JSON.
                # The body comes back as bytes and is read as plain JSON: building the typed models costs more
                # than the whole step's engine work.
                raw = await self._client.post(
                    "/chat/completions", body=params, cast_to=bytes, options=_REQUEST_OPTIONS
                )
                return _to_response(_json_object(raw))
            except openai.APIStatusError as exc:
                retryable = exc.status_code == 429 or exc.status_code >= 500
                if exc.status_code == 429 and _error_code(exc) == "insufficient_quota":
                    retryable = False  # waiting never fixes an empty account
                if not retryable or attempt >= self._max_retries:
                    raise LLMError(_describe_status(exc, self.base_url), status=exc.status_code) from exc
                wait = _retry_after(exc, attempt)
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                if attempt >= self._max_retries:
                    raise LLMError(
                        f"cannot reach the LLM endpoint at {self.base_url} ({type(exc).__name__}: {exc}); "
                        "check OPENAI_BASE_URL",
                        retryable=True,
                    ) from exc
                wait = min(0.5 * 2.0**attempt, RETRY_WAIT_CAP_SECONDS)
            log.info("LLM call failed, retry %d/%d in %.2fs", attempt + 1, self._max_retries, wait)
            attempt += 1
            await asyncio.sleep(wait)


def _describe_status(exc: openai.APIStatusError, base_url: str) -> str:
    message = _provider_message(exc)
    if exc.status_code == 401:
        return f"the LLM endpoint {base_url} refused the API key ({message}); check OPENAI_API_KEY"
    if exc.status_code == 404:
        return f"the LLM endpoint {base_url} answered 404 ({message}); check OPENAI_BASE_URL and OPENAI_MODEL"
    return f"LLM call failed with HTTP {exc.status_code}: {message}"


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        raise LLMError(f"the LLM endpoint answered with something that is not JSON: {raw[:200]!r}") from None
    if not isinstance(data, dict):
        raise LLMError("the LLM endpoint answered with JSON that is not an object")
    return data


def _to_response(completion: dict[str, Any]) -> LLMResponse:
    """Read a Chat Completions response body (shape checked, so a broken endpoint is an LLMError)."""
    try:
        choice = completion["choices"][0]
        message = choice["message"]
        calls = tuple(
            ToolCallRequest(id=str(c["id"]), name=str(c["function"]["name"]),
                            arguments=str(c["function"].get("arguments") or ""))
            for c in (message.get("tool_calls") or ())
            if c.get("function") is not None
        )
        usage = completion.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        return LLMResponse(
            content=message.get("content"),
            tool_calls=calls,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
            finish_reason=str(choice.get("finish_reason") or "stop"),
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise LLMError(f"the LLM endpoint's answer is not a chat completion ({type(exc).__name__}: {exc})") from None
