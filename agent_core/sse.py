"""A streamed chat completion: server-sent events read as they arrive, reassembled into a completion body.

The body built here has the shape of a non-streamed answer, so both paths go through one reader
(``completion.to_response``) and cost the same. Text is handed to a :data:`DeltaSink` once per network read, so a
fast endpoint's many tiny chunks become a few deltas.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from agent_core.errors import LLMError
from agent_core.provider_errors import error_fields, out_of_quota

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


_DONE = (b"[DONE]", "[DONE]")
#: After ``[DONE]``, the end of the body is waited for this long at most, and this many bytes of it read.
END_SECONDS = 0.25
END_BYTES = 4096

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
    if answer.done and not resp.content.is_eof():
        await _read_end(resp)
    for kind, payload in events.close():
        answer.add(kind, payload)
    if not answer.finished:
        raise cut_error("no finish_reason and no [DONE] before the connection closed")
    return answer.body()


async def _read_end(resp: aiohttp.ClientResponse) -> None:
    """What follows ``[DONE]`` (the body's last few bytes, usually in the next packet): read, so the connection
    goes back to the pool; left unread, it was closed and the next call paid a new one. A server that sends
    more, or keeps the body open, is not waited for."""
    left = END_BYTES
    try:
        async with asyncio.timeout(END_SECONDS):
            while left > 0 and (data := await resp.content.readany()):
                left -= len(data)
    except (TimeoutError, aiohttp.ClientError):
        pass  # the answer is whole: the connection is simply not reused


class _EventReader:
    """Server-sent events (the WHATWG format): ``data:`` lines joined per event, comments skipped.

    The usual event, one ``data:`` line and a blank line, is cut out of the buffer whole (one ``split`` per
    network read, its payload left as bytes for the JSON parser); anything else goes line by line.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._kind = ""

    def feed(self, data: bytes) -> list[tuple[str, bytes | str]]:
        buffer = self._buffer + data if self._buffer else data
        end = buffer.rfind(b"\n\n")
        if end < 0 or self._data or self._kind or b"\r" in buffer:  # an event under way, or CR line ends
            *lines, self._buffer = buffer.split(b"\n")
            return [event for line in lines if (event := self._line(line)) is not None]
        self._buffer = buffer[end + 2 :]
        if buffer.find(b"\n") == end and buffer.startswith(b"data:"):  # the usual read: one event, one line
            return [("", buffer[6:end] if buffer.startswith(b"data: ") else buffer[5:end])]
        events: list[tuple[str, bytes | str]] = []
        for block in buffer[:end].split(b"\n\n"):
            if block.startswith(b"data:") and b"\n" not in block:
                events.append(("", block[6:] if block.startswith(b"data: ") else block[5:]))
            else:
                events.extend(e for line in (*block.split(b"\n"), b"") if (e := self._line(line)) is not None)
        return events

    def close(self) -> list[tuple[str, bytes | str]]:
        """Events still pending when the body ended (a last event without its blank line)."""
        rest = [self._line(line) for line in self._buffer.split(b"\n")] if self._buffer else []
        rest.append(self._line(b""))
        self._buffer = b""
        return [event for event in rest if event is not None]

    def _line(self, raw: bytes) -> tuple[str, str] | None:
        line = _text(raw.rstrip(b"\r"))
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


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise LLMError("the LLM endpoint's stream is not UTF-8 text", charged=True) from None


def _json(payload: bytes | str) -> Any:
    """A payload's JSON: orjson reads it ~4x faster; what orjson refuses (invalid UTF-8, NaN, a 65-bit integer)
    is read as before, by the standard library, so the answer and its errors are the same."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return json.loads(_text(payload) if isinstance(payload, bytes) else payload)


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
        self._call_told = False  # a delta saying a tool call has begun was handed out

    @property
    def finished(self) -> bool:
        return self.done or self.finish_reason is not None

    def add(self, kind: str, payload: bytes | str) -> None:
        first = payload[:1]
        if first != b"{" and first != "{" and payload.strip() in _DONE:  # a chunk is an object: no copy made
            self.done = True
            return
        try:
            chunk = _json(payload)
        except ValueError:
            raise LLMError("the LLM endpoint's stream held an event that is not JSON", charged=True) from None
        if not isinstance(chunk, dict):
            raise LLMError("the LLM endpoint's stream held JSON that is not an object", charged=True)
        if kind == "error" or chunk.get("error") is not None:
            error = error_fields(chunk)
            message = str(error.get("message") or chunk)[:300]
            if out_of_quota(None, error):  # a gateway's stream can end so too: waiting never refills an account
                raise LLMError(f"the LLM provider's quota, credit or budget is used up ({message}); retrying cannot "
                               "help: the operator must add credit or raise the limit", cause="quota", charged=True)
            raise LLMError(f"the LLM endpoint failed mid-stream: {message}",
                           cause="server_error", retryable=True, charged=True)
        try:
            self._add_chunk(chunk)
        except (TypeError, AttributeError, ValueError) as exc:
            raise LLMError(f"the LLM endpoint's stream held a malformed chunk ({type(exc).__name__}: {exc})",
                           charged=True) from None

    def _add_chunk(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = usage  # the last report wins (some servers report running totals)
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
            calls = delta.get("tool_calls")
            if calls:
                for position, call in enumerate(calls):
                    self._add_call(call, position)
            finish = choice.get("finish_reason")
            if finish is not None:
                self.finish_reason = str(finish)

    def _add_other(self, delta: dict[str, Any]) -> None:
        if "refusal" not in delta and "reasoning_content" not in delta and "reasoning" not in delta:
            return  # a tool call's piece or the role: the usual case, three look-ups
        for field, pieces in (("refusal", self.refusal), ("reasoning_content", self.reasoning),
                              ("reasoning", self.reasoning)):
            text = delta.get(field)
            if isinstance(text, str) and text:
                pieces.append(text)
                self.size += len(text)

    def _add_call(self, call: dict[str, Any], position: int) -> None:
        index = int(call.get("index", position))
        slot = self.calls.get(index)
        if slot is None:
            slot = self.calls[index] = {"id": "", "name": "", "arguments": []}
        function = call.get("function") or {}
        # The id and name come whole in the first delta of a call; some servers repeat them in later ones.
        if not slot["id"]:
            slot["id"] = str(call.get("id") or "")
        if not slot["name"]:
            slot["name"] = str(function.get("name") or "")
        arguments = function.get("arguments")
        if arguments:
            text = str(arguments)
            slot["arguments"].append(text)
            self.size += len(text)
        self._fresh_call = True

    def take_delta(self) -> StreamDelta | None:
        """What arrived since the last call, or None. A tool call's later pieces with no text are not told again:
        that one has begun is all a reader learns from them (and each telling cost it a redaction pass)."""
        if not self._fresh:
            if not self._fresh_call or self._call_told:
                self._fresh_call = False
                return None
            self._call_told, self._fresh_call = True, False
            return StreamDelta("", True)
        delta = StreamDelta("".join(self._fresh), self._fresh_call)
        self._call_told = self._call_told or self._fresh_call
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
