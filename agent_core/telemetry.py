"""The engine's spans, in OpenTelemetry's GenAI conventions: ``chat {model}`` per LLM call, and ``execute_tool
{tool}`` per tool call (made by ``tools.Executor``: ``tools/tracing.py``). Off (the default) they cost one global
read per call and create nothing.

The service turns them on by handing in a tracer (``use_tracer``; ``bot/telemetry.py`` does when the OTEL_* settings say
so), and they become children of whatever span is current: the run's. Only opentelemetry-api is used, imported
when tracing is turned on. Message text (prompts, answers, tool arguments and results) goes into a span only with
``content=True`` (OTEL_CAPTURE_CONTENT): a trace backend is not where a workspace's conversations belong.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agent_core.completion import LLMResponse
from agent_core.events import Usage
from agent_core.store import Message
from tools import use_tool_tracer

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

#: The GenAI conventions' provider name of every OpenAI-compatible endpoint the engine talks to.
GENAI_PROVIDER = "openai"

_tracer: Tracer | None = None
_content = False


def use_tracer(tracer: Tracer | None, *, content: bool = False) -> None:
    """Spans from now on through ``tracer`` (None: off again), with message text only when ``content``."""
    global _tracer, _content
    _tracer, _content = tracer, content
    use_tool_tracer(tracer, content=content)


class ChatSpan:
    """``async with chat(...) as span:`` around the LLM call, ``span.answered(reply, usage)`` once it answered.
    This one, the off switch's, does nothing."""

    async def __aenter__(self) -> ChatSpan:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def answered(self, reply: LLMResponse, usage: Usage) -> None:
        return None


_OFF = ChatSpan()


def chat(model: str, max_tokens: int, messages: Sequence[Message]) -> ChatSpan:
    """The span of one LLM call (a shared no-op while tracing is off)."""
    if _tracer is None:
        return _OFF
    return _LiveChat(_tracer, model, max_tokens, messages)


class _LiveChat(ChatSpan):
    def __init__(self, tracer: Tracer, model: str, max_tokens: int, messages: Sequence[Message]) -> None:
        self._tracer, self._model, self._max_tokens, self._messages = tracer, model, max_tokens, messages
        self._span: Span | None = None

    async def __aenter__(self) -> ChatSpan:
        from opentelemetry.trace import SpanKind

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": GENAI_PROVIDER, "gen_ai.system": GENAI_PROVIDER,
            "gen_ai.request.model": self._model, "gen_ai.request.max_tokens": self._max_tokens,
        }
        if _content:
            attributes["gen_ai.input.messages"] = json.dumps([_parts(m) for m in self._messages], ensure_ascii=False)
        self._span = self._tracer.start_span(f"chat {self._model}", kind=SpanKind.CLIENT, attributes=attributes)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._span is None:
            return
        if exc is not None:
            _failed(self._span, str(getattr(exc, "cause", "") or type(exc).__name__))
        self._span.end()

    def answered(self, reply: LLMResponse, usage: Usage) -> None:
        if self._span is None:
            return
        self._span.set_attributes({
            "gen_ai.response.finish_reasons": (reply.finish_reason,),
            "gen_ai.usage.input_tokens": usage.prompt_tokens, "gen_ai.usage.output_tokens": usage.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens, **cost_attributes(usage),
        })
        if _content:
            message = _parts(reply.assistant_message())
            message["finish_reason"] = reply.finish_reason
            self._span.set_attribute("gen_ai.output.messages", json.dumps([message], ensure_ascii=False))


def cost_attributes(usage: Usage) -> dict[str, Any]:
    """What a call or a run cost: dollars for dashboards, micro-dollars exactly, and whether usage was estimated
    (the endpoint did not report it all; ``agent_core/tokens.py`` counted)."""
    return {"agent.cost_usd": usage.cost_micros / 1_000_000, "agent.cost_micros": usage.cost_micros,
            "agent.usage_estimated": usage.estimated}


def _failed(span: Span, error_type: str) -> None:
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR)


def _parts(message: Message) -> dict[str, Any]:
    """A Chat Completions message in the conventions' shape (role and parts); images are named, never copied."""
    role = str(message.get("role", ""))
    content = message.get("content")
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": message.get("tool_call_id", ""), "response": content})
    elif isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        parts.extend({"type": "text", "content": p.get("text", "")} if p.get("type") == "text"
                     else {"type": str(p.get("type", ""))} for p in content if isinstance(p, dict))
    for c in message.get("tool_calls") or ():
        function = c.get("function", {})
        parts.append({"type": "tool_call", "id": c.get("id", ""), "name": function.get("name", ""),
                      "arguments": function.get("arguments", "")})
    return {"role": role, "parts": parts}
