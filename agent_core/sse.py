"""A streamed chat completion: server-sent events read as they arrive, reassembled into a completion body.

The body built here has the shape of a non-streamed answer, so both paths go through one reader
(``completion.to_response``) and cost the same. Text is handed to a :data:`DeltaSink` once per network read, so a
fast endpoint's many tiny chunks become a few deltas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from agent_core.errors import LLMError

#: A streamed body is read up to this many bytes per requested completion token: every chunk repeats an
#: envelope (id, model, fingerprint, padding, content filter results) of a few hundred bytes around one token.
STREAM_BYTES_PER_TOKEN = 1024


@dataclass(frozen=True, slots=True)
class StreamDelta:
    """What one network read of a stream added: content text, and whether a tool call has begun."""

    text: str = ""
    tool_call: bool = False
    #: A new attempt starts (the last stream was cut): everything pushed before is void.
    restart: bool = False


#: Called with each delta as it arrives; must not block (it runs inside the read loop).
DeltaSink = Callable[[StreamDelta], None]


def cut_error(detail: str) -> LLMError:
    """A stream that stopped before its end: retried like a dropped connection, charged if it fails for good."""
    return LLMError(f"the LLM endpoint's stream was cut off before the answer ended ({detail})",
                    cause="server_error", retryable=True, charged=True)


async def read_completion(
    resp: aiohttp.ClientResponse, *, limit: int, text_limit: int, on_delta: DeltaSink | None
) -> dict[str, Any]:
    """Read the event stream of ``resp`` to its end; a cut, oversized or garbled stream is an LLMError.

    ``limit`` bounds the stream's bytes, ``text_limit`` the text and arguments it adds up to (as a
    non-streamed body is bounded), so an endpoint that ignores max_tokens fails fast either way.
    """
    events = _EventReader()
    answer = _Assembler()
    size = 0
    try:
        async for data in resp.content.iter_any():
            size += len(data)
            for kind, payload in events.feed(data):
                answer.add(kind, payload)
            if size > limit or answer.size > text_limit:
                raise LLMError(f"the LLM endpoint's streamed answer is larger than {min(limit, text_limit)} bytes, "
                               "far more than max_tokens allows; the endpoint seems to ignore max_tokens", charged=True)
            delta = answer.take_delta()
            if delta is not None and on_delta is not None:
                on_delta(delta)
            if answer.done:
                break
    except aiohttp.ClientPayloadError as exc:
        raise cut_error(f"the connection closed mid-answer: {type(exc).__name__}") from None
    for kind, payload in events.close():
        answer.add(kind, payload)
    if not answer.finished:
        raise cut_error("no finish_reason and no [DONE] before the connection closed")
    return answer.body()


class _EventReader:
    """Server-sent events (the WHATWG format): ``data:`` lines joined per event, comments skipped."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._kind = ""

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        return [event for line in lines if (event := self._line(line)) is not None]

    def close(self) -> list[tuple[str, str]]:
        """Events still pending when the body ended (a last event without its blank line)."""
        rest = [self._line(self._buffer)] if self._buffer else []
        rest.append(self._line(b""))
        self._buffer = b""
        return [event for event in rest if event is not None]

    def _line(self, raw: bytes) -> tuple[str, str] | None:
        try:
            line = raw.rstrip(b"\r").decode()
        except UnicodeDecodeError:
            raise LLMError("the LLM endpoint's stream is not UTF-8 text", charged=True) from None
        if not line:  # a blank line dispatches the event
            event = (self._kind, "\n".join(self._data)) if self._data else None
            self._data, self._kind = [], ""
            return event
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._kind = value
        return None  # comments (":" keep-alives), ids and retry hints do not matter here


class _Assembler:
    """Chunks of ``chat.completion.chunk`` folded into one message: content joined, tool calls by index."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.refusal: list[str] = []  # ``delta.refusal`` pieces: the model declining, shown once whole
        self.reasoning: list[str] = []  # ``delta.reasoning_content`` / ``delta.reasoning`` pieces
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.size = 0  # characters of text and arguments
        self.done = False  # [DONE] seen
        self._fresh: list[str] = []
        self._fresh_call = False

    @property
    def finished(self) -> bool:
        return self.done or self.finish_reason is not None

    def add(self, kind: str, payload: str) -> None:
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise LLMError("the LLM endpoint's stream held an event that is not JSON", charged=True) from None
        if not isinstance(chunk, dict):
            raise LLMError("the LLM endpoint's stream held JSON that is not an object", charged=True)
        if kind == "error" or chunk.get("error") is not None:
            error = chunk.get("error", chunk)
            message = error.get("message") if isinstance(error, dict) else None
            raise LLMError(f"the LLM endpoint failed mid-stream: {str(message or error)[:300]}",
                           cause="server_error", retryable=True, charged=True)
        try:
            self._add_chunk(chunk)
        except (TypeError, AttributeError, ValueError) as exc:
            raise LLMError(f"the LLM endpoint's stream held a malformed chunk ({type(exc).__name__}: {exc})",
                           charged=True) from None

    def _add_chunk(self, chunk: dict[str, Any]) -> None:
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]  # the last report wins (some servers report running totals)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.content.append(text)
                self.size += len(text)
                self._fresh.append(text)
            elif delta:  # not a content piece: maybe a refusal's or the reasoning's
                self._add_other(delta)
            for position, call in enumerate(delta.get("tool_calls") or ()):
                self._add_call(call, position)
            if choice.get("finish_reason") is not None:
                self.finish_reason = str(choice["finish_reason"])

    def _add_other(self, delta: dict[str, Any]) -> None:
        for field, pieces in (("refusal", self.refusal), ("reasoning_content", self.reasoning),
                              ("reasoning", self.reasoning)):
            text = delta.get(field)
            if isinstance(text, str) and text:
                pieces.append(text)
                self.size += len(text)

    def _add_call(self, call: dict[str, Any], position: int) -> None:
        index = int(call.get("index", position))
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        function = call.get("function") or {}
        # The id and name come whole in the first delta of a call; some servers repeat them in later ones.
        slot["id"] = slot["id"] or str(call.get("id") or "")
        slot["name"] = slot["name"] or str(function.get("name") or "")
        if function.get("arguments"):
            slot["arguments"].append(str(function["arguments"]))
            self.size += len(slot["arguments"][-1])
        self._fresh_call = True

    def take_delta(self) -> StreamDelta | None:
        """What arrived since the last call, or None."""
        if not self._fresh and not self._fresh_call:
            return None
        delta = StreamDelta("".join(self._fresh), self._fresh_call)
        self._fresh, self._fresh_call = [], False
        return delta

    def body(self) -> dict[str, Any]:
        """The stream as a non-streamed ``chat.completion`` body."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) if self.content else None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [
                {"id": slot["id"] or f"call_{index}", "type": "function",
                 "function": {"name": slot["name"], "arguments": "".join(slot["arguments"])}}
                for index, slot in sorted(self.calls.items())
            ]
        body: dict[str, Any] = {"choices": [{"index": 0, "message": message,
                                             "finish_reason": self.finish_reason or "stop"}]}
        if self.usage is not None:
            body["usage"] = self.usage
        return body
