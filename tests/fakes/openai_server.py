"""Fake OpenAI Chat Completions server: real HTTP on loopback, scripted per test, recording every request.

The engine's tests talk to it through the real ``openai`` client, so request building, retries, streaming and
error mapping are all exercised (design practice 8; no in-process model fakes, anti-pattern 4)::

    async def test_answer(fake_openai: FakeOpenAI) -> None:
        fake_openai.queue(tool_calls(("calculator", {"expr": "2+2"})), text("4", cached_tokens=3))
        client = AsyncOpenAI(base_url=fake_openai.base_url, api_key="test", max_retries=0)
        ...
        assert fake_openai.requests[1].messages[-1]["role"] == "tool"

or scripted by a function, like pydantic-ai's ``FunctionModel`` but over HTTP::

    def script(request: RecordedRequest) -> Reply:
        return text(f"you said {request.messages[-1]['content']!r}")

    fake_openai.script = script

Waiting is event-driven, never polled (anti-pattern 5): ``await fake.wait_for_requests(n)`` is woken by
the server the moment the n-th request is recorded, and ``await fake.wait_for_cancelled(n)`` when a client
hangs up on a request that was still being answered (e.g. one held back by ``delay``).
"""

from __future__ import annotations

import asyncio
import email.policy
import inspect
import json
import math
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from aiohttp import web

__all__ = [
    "DelayedReply",
    "ErrorReply",
    "FakeOpenAI",
    "RecordedRequest",
    "Reply",
    "Script",
    "TextReply",
    "ToolCall",
    "ToolCallsReply",
    "StreamedReply",
    "delay",
    "ensure_loopback_url",
    "error",
    "refusal",
    "streamed",
    "text",
    "tool_calls",
]

#: Host names a test may send model or Slack traffic to; anything else is refused by ``ensure_loopback_url``.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: The model ``GET /v1/models`` lists, and the one echoed when a request names none.
DEFAULT_MODEL = "gpt-4o-mini"
#: Pieces a streamed content string (or each tool call's arguments) is split into.
STREAM_PIECES = 3
#: How long ``wait_for_*`` waits before failing the test; a safety net against hangs, not a poll interval.
DEFAULT_WAIT_TIMEOUT = 5.0

FinishReason = Literal["stop", "length", "content_filter", "refusal"]

# The "type" OpenAI puts in its error body, by status, when the test does not choose one.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


# === Replies: what a script answers with. Build them with text(), tool_calls(), error() and delay().


@dataclass(frozen=True, kw_only=True)
class _Usage:
    prompt_tokens: int | None = None
    """Reported prompt tokens; None means a rough estimate from the request's message characters."""
    completion_tokens: int | None = None
    """Reported completion tokens; None means ``len(content or arguments) // 4 + 1``."""
    cached_tokens: int = 0
    """Reported ``usage.prompt_tokens_details.cached_tokens``."""
    raw_usage: Any = "auto"
    """Sent verbatim as ``usage`` (e.g. negative counts); None sends no usage at all; "auto" computes it."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. the ``x-litellm-*`` ones LiteLLM's proxy sends."""


@dataclass(frozen=True, kw_only=True)
class TextReply(_Usage):
    """An assistant message with text content."""

    content: str | None
    """The message content, sent whole or split into a few stream chunks (null with a refusal)."""
    finish_reason: FinishReason = "stop"
    """``choices[0].finish_reason``; "length" lets a test act out a truncated answer, "refusal" a gateway passing
    on Anthropic's own stop reason."""
    refusal: str | None = None
    """``message.refusal`` (streamed as ``delta.refusal`` pieces): the model declining, as OpenAI sends it."""
    reasoning: str | None = None
    """Reasoning sent beside the content, in the field ``reasoning_field`` names (streamed first)."""
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    """``reasoning_content`` (vLLM and DeepSeek with a reasoning parser) or ``reasoning`` (OpenRouter, Ollama)."""


@dataclass(frozen=True)
class ToolCall:
    """One function call in a ``ToolCallsReply``."""

    name: str
    """``function.name``."""
    arguments: str
    """``function.arguments`` exactly as sent: JSON text, or deliberately malformed text."""


@dataclass(frozen=True, kw_only=True)
class ToolCallsReply(_Usage):
    """An assistant message calling tools; finish_reason is "tool_calls"."""

    calls: tuple[ToolCall, ...]
    """The calls, in order; ids are assigned by the server ("call_1", "call_2", ... per fake)."""
    content: str | None = None
    """Optional text sent alongside the calls."""


@dataclass(frozen=True, kw_only=True)
class ErrorReply:
    """An HTTP error with OpenAI's body shape ``{"error": {"message", "type", "param", "code"}}``."""

    status: int
    """HTTP status, e.g. 400, 429, 500."""
    message: str
    """``error.message``; the official client puts it in the exception text."""
    type: str
    """``error.type``, e.g. "rate_limit_error", "server_error"."""
    code: str | None = None
    """``error.code``, e.g. "rate_limit_exceeded"."""
    param: str | None = None
    """``error.param``, the request field at fault."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"Retry-After": "0"}``."""


@dataclass(frozen=True)
class DelayedReply:
    """Another reply, answered only after ``seconds`` of ``asyncio.sleep`` inside the server."""

    seconds: float
    """How long the server holds the request before answering."""
    reply: Reply
    """What it answers with afterwards."""


@dataclass(frozen=True, kw_only=True)
class StreamedReply:
    """A text or tool-calls reply with a scripted stream: its chunking, pace, usage chunk and faults.

    Answered to a non-streaming request too: then as one JSON body after the stream's whole duration.
    """

    reply: TextReply | ToolCallsReply
    """What the stream carries."""
    pieces: int = STREAM_PIECES
    """Pieces the content (and each call's arguments) is split into, one chunk each."""
    chunk_delay: float = 0.0
    """Seconds slept before each piece: ``pieces * chunk_delay`` is the answer's duration."""
    usage_chunk: bool = True
    """Send the usage chunk when the client asks for it (``stream_options.include_usage``); False acts out an
    endpoint that ignores the option."""
    cut_after: int | None = None
    """Stop after this many chunks (the first opens the message, then one per piece), so before
    finish_reason and ``[DONE]`` when it is at most the number of pieces."""
    cut: Literal["drop", "eof"] = "drop"
    """How the stream is cut: ``drop`` closes the connection mid-body, ``eof`` ends the body cleanly."""
    error: ErrorReply | None = None
    """Sent where the stream is cut (``cut_after``) as an event ``{"error": {...}}``, the body then ended: a
    gateway (LiteLLM) reporting the provider's failure after the 200 was sent."""
    garbage_after: int | None = None
    """After this many chunks, send an event that is not JSON (and go on)."""


Reply = TextReply | ToolCallsReply | ErrorReply | DelayedReply | StreamedReply
_REPLY_TYPES = (TextReply, ToolCallsReply, ErrorReply, DelayedReply, StreamedReply)


def text(
    content: str,
    *,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    cached_tokens: int = 0,
    finish_reason: FinishReason = "stop",
    raw_usage: Any = "auto",
    reasoning: str | None = None,
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content",
    headers: dict[str, str] | None = None,
) -> TextReply:
    """A text answer: ``text("Paris", cached_tokens=12)``; usage left as None is estimated.

    ``content`` may hold ``<think>…</think>`` as an R1-style model on a server without a reasoning parser
    writes it; ``reasoning`` goes in its own field, as servers with a parser send it."""
    _check_usage(prompt_tokens, completion_tokens, cached_tokens)
    return TextReply(
        content=content,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        raw_usage=raw_usage,
        reasoning=reasoning,
        reasoning_field=reasoning_field,
        headers=dict(headers or {}),
    )


def refusal(message: str, *, prompt_tokens: int | None = None, completion_tokens: int | None = None) -> TextReply:
    """The model declining as OpenAI sends it: ``content`` null, the text in ``message.refusal``."""
    _check_usage(prompt_tokens, completion_tokens, 0)
    return TextReply(content=None, refusal=message, prompt_tokens=prompt_tokens,
                     completion_tokens=completion_tokens)


def tool_calls(
    *calls: tuple[str, dict[str, Any] | str],
    content: str | None = None,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    cached_tokens: int = 0,
    raw_usage: Any = "auto",
) -> ToolCallsReply:
    """Tool calls: ``tool_calls(("search", {"q": "x"}), ("calc", '{"expr": '))``.

    A dict is ``json.dumps``'ed; a str is sent as-is, so a test can send malformed JSON or keys in any order.
    """
    if not calls:
        raise ValueError("tool_calls() needs at least one (name, arguments) pair; use text() for no calls")
    _check_usage(prompt_tokens, completion_tokens, cached_tokens)
    built = tuple(ToolCall(name, args if isinstance(args, str) else json.dumps(args)) for name, args in calls)
    return ToolCallsReply(
        calls=built,
        content=content,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached_tokens,
        raw_usage=raw_usage,
    )


def error(
    status: int,
    message: str,
    *,
    type: str | None = None,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> ErrorReply:
    """An OpenAI-shaped error: ``error(429, "Rate limit reached", headers={"Retry-After": "0"})``.

    ``type`` defaults by status as OpenAI does: 429 "rate_limit_error", 4xx "invalid_request_error",
    5xx "server_error".
    """
    if not 400 <= status <= 599:
        raise ValueError(f"error() needs a 4xx or 5xx status, got {status!r}")
    return ErrorReply(
        status=status,
        message=message,
        type=type if type is not None else _ERROR_TYPES.get(status, "server_error"),
        code=code,
        param=param,
        headers=dict(headers or {}),
    )


def delay(seconds: float, reply: Reply) -> DelayedReply:
    """Answer ``reply`` after ``seconds``: for timeout and cancellation tests (see ``wait_for_requests``)."""
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ValueError(f"delay() needs a finite number of seconds >= 0, got {seconds!r}")
    return DelayedReply(seconds, reply)


def streamed(
    reply: TextReply | ToolCallsReply,
    *,
    pieces: int = STREAM_PIECES,
    chunk_delay: float = 0.0,
    usage_chunk: bool = True,
    cut_after: int | None = None,
    cut: Literal["drop", "eof"] = "drop",
    error: ErrorReply | None = None,
    garbage_after: int | None = None,
) -> StreamedReply:
    """``reply`` streamed as scripted: ``streamed(text("Paris"), pieces=5, chunk_delay=0.1, cut_after=2)``."""
    if not isinstance(reply, TextReply | ToolCallsReply):
        raise TypeError(f"streamed() takes a text() or tool_calls() reply, got {reply!r}")
    if pieces < 1 or not (chunk_delay >= 0 and math.isfinite(chunk_delay)):
        raise ValueError(f"streamed() needs pieces >= 1 and a finite chunk_delay >= 0, got {pieces!r}, {chunk_delay!r}")
    return StreamedReply(reply=reply, pieces=pieces, chunk_delay=chunk_delay, usage_chunk=usage_chunk,
                         cut_after=cut_after, cut=cut, garbage_after=garbage_after, error=error)


def _check_usage(prompt_tokens: int | None, completion_tokens: int | None, cached_tokens: int) -> None:
    for name, value in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    if cached_tokens < 0 or (prompt_tokens is not None and cached_tokens > prompt_tokens):
        raise ValueError(f"cached_tokens must be between 0 and prompt_tokens, got {cached_tokens!r}")


# === Recording


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it, recorded before it is answered (even if it is refused)."""

    method: str
    """HTTP method, e.g. "POST"."""
    path: str
    """URL path, e.g. "/v1/chat/completions"."""
    headers: dict[str, str]
    """Request headers, names lower-cased (``headers["authorization"]``)."""
    json: Any
    """The parsed JSON body; None when there was no body or it did not parse."""
    body: bytes = b""
    """The raw body, for asserting on malformed requests."""
    query: dict[str, str] = field(default_factory=dict)
    """The URL's query parameters (a gateway's key, Azure's ``api-version``)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages`` (or [] when absent)."""
        messages = self.json.get("messages") if isinstance(self.json, dict) else None
        return messages if isinstance(messages, list) else []

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The request's ``tools`` list (or [] when none were sent)."""
        tools = self.json.get("tools") if isinstance(self.json, dict) else None
        return tools if isinstance(tools, list) else []

    @property
    def max_tokens(self) -> int | None:
        """``max_tokens`` or, for newer clients, ``max_completion_tokens``."""
        if not isinstance(self.json, dict):
            return None
        value = self.json.get("max_tokens", self.json.get("max_completion_tokens"))
        return value if isinstance(value, int) else None

    @property
    def model(self) -> str | None:
        """The requested model, echoed back in the response."""
        model = self.json.get("model") if isinstance(self.json, dict) else None
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        """True when the client asked for server-sent events."""
        return isinstance(self.json, dict) and self.json.get("stream") is True


#: A per-test script: a sync or async function from the recorded request to the reply.
Script = Callable[[RecordedRequest], Reply | Awaitable[Reply]]


def ensure_loopback_url(url: str) -> str:
    """Return ``url`` unchanged if it points at 127.0.0.1, localhost or ::1; raise ValueError otherwise."""
    host = urlsplit(url).hostname
    if host not in LOOPBACK_HOSTS:
        raise ValueError(
            f"refusing non-loopback URL {url!r} (host {host!r}): tests may only talk to "
            f"{', '.join(sorted(LOOPBACK_HOSTS))}"
        )
    return url


# === The server


class FakeOpenAI:
    """An aiohttp Chat Completions server on 127.0.0.1 and a random port.

    Answers with ``script`` when it is set, otherwise with the replies given to ``queue()`` in order; when
    neither has an answer the request gets a 500 saying the script ran out. A script that raises answers a
    500, and the exception is raised again from ``close()`` so the test fails loudly; clear
    ``script_errors`` to accept it.
    """

    def __init__(self, *, model: str = DEFAULT_MODEL) -> None:
        self.model = model
        """Listed by ``GET /v1/models``; echoed when a request names no model."""
        self.script: Script | None = None
        """The per-test reply function; takes precedence over ``queue()``."""
        self.requests: list[RecordedRequest] = []
        """Every request received, in arrival order, including refused and malformed ones."""
        self.cancelled: list[RecordedRequest] = []
        """Requests whose client hung up (timeout, task cancelled) before the answer was sent."""
        self.script_errors: list[Exception] = []
        """Exceptions raised by ``script``; ``close()`` re-raises the first one."""
        self.accept_basic_auth = False
        """Also accept ``Authorization: Basic``, as a gateway in front of a model server does."""
        self.azure_api_version: str | None = None
        """Act as Azure OpenAI: require this ``api-version`` query and an ``api-key`` header, and serve
        ``/openai/deployments/{deployment}/chat/completions``."""
        self.ignore_stream = False
        """Answer one JSON body even when the client asks to stream, as some compatible servers do."""
        self.max_in_flight = 0
        """The most chat completion requests ever being answered at once (held by ``delay`` or a stream)."""
        self.served: list[dict[str, Any]] = []
        """The usage of every completion the server began to send: what a provider bills, even when the client
        is gone before the end (a worker killed mid-stream)."""
        self._queue: deque[Reply] = deque()
        self._queued_total = 0
        self._call_ids = 0
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._inflight: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        # -- audio transcriptions (issue 28)
        self.transcript = "This is the fake transcript."
        """What ``POST /v1/audio/transcriptions`` answers (``{"text": transcript}``)."""
        self.transcriptions: list[dict[str, Any]] = []
        """Each transcription request's form: ``model``, ``filename``, ``content_type`` and ``size`` of the file."""
        self.transcript_seconds: float | None = None
        """The audio's billed duration, answered as whisper-1 does (``usage: {"type": "duration", "seconds"}``);
        None answers no usage, as a compatible server may."""

    # -- lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1/``, for ``AsyncOpenAI(base_url=...)``; only valid after ``start()``."""
        if self._base_url is None:
            raise RuntimeError("FakeOpenAI.base_url is only known after `await fake.start()`")
        return self._base_url

    async def start(self) -> None:
        """Bind 127.0.0.1 on a free port and start answering."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # handler_cancellation: a client hanging up cancels its handler, which is how `cancelled` is recorded.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._base_url = f"http://{host}:{port}/v1/"

    async def close(self) -> None:
        """Stop the server, abandoning requests still held by ``delay``; re-raise a script's exception."""
        self._closing = True
        for task in list(self._inflight):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for _, future in self._waiters:
            future.cancel()
        if self.script_errors:
            first = self.script_errors[0]
            raise AssertionError(f"FakeOpenAI script raised during the test: {first!r}") from first

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            self.script_errors.clear()  # the test already failed; don't mask its exception
        await self.close()

    @property
    def in_flight(self) -> int:
        """Chat completion requests being answered right now (e.g. a stream still being written)."""
        return len(self._inflight)

    # -- scripting and waiting

    def queue(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order (adds to any still queued)."""
        for reply in replies:
            if not isinstance(reply, _REPLY_TYPES):
                raise TypeError(
                    f"queue() takes replies from text()/tool_calls()/error()/delay(), got {reply!r}"
                )
        self._queue.extend(replies)
        self._queued_total += len(replies)

    async def wait_for_requests(
        self, n: int, *, timeout: float = DEFAULT_WAIT_TIMEOUT
    ) -> list[RecordedRequest]:
        """Return once ``n`` requests have arrived (woken by the server, not polled); the requests so far."""
        return await self._wait_for(self.requests, n, "request(s)", timeout)

    async def wait_for_cancelled(
        self, n: int, *, timeout: float = DEFAULT_WAIT_TIMEOUT
    ) -> list[RecordedRequest]:
        """Return once clients have hung up on ``n`` in-flight requests; the cancelled requests so far."""
        return await self._wait_for(self.cancelled, n, "cancelled request(s)", timeout)

    async def _wait_for(
        self, records: list[RecordedRequest], n: int, what: str, timeout: float
    ) -> list[RecordedRequest]:
        if len(records) < n:
            entry = (lambda: len(records) >= n, asyncio.get_running_loop().create_future())
            self._waiters.append(entry)
            try:
                async with asyncio.timeout(timeout):  # a safety net against a hang, not a poll
                    await entry[1]
            except TimeoutError:
                raise AssertionError(
                    f"FakeOpenAI: waited {timeout}s for {n} {what}, saw {len(records)}"
                ) from None
            finally:
                self._waiters.remove(entry)
        return list(records)

    def _wake(self) -> None:
        for ready, future in self._waiters:
            if not future.done() and ready():
                future.set_result(None)

    # -- HTTP

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            parsed: Any = json.loads(body) if body else None
            malformed = False
        except ValueError:
            parsed, malformed = None, True
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            headers={name.lower(): value for name, value in request.headers.items()},
            json=parsed,
            body=body,
            query=dict(request.query),
        )
        self.requests.append(recorded)
        self._wake()

        if self.azure_api_version is not None:
            return await self._azure(request, recorded)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        schemes = ("Bearer", "Basic") if self.accept_basic_auth else ("Bearer",)
        if scheme not in schemes or not token.strip():
            return _error_response(
                error(
                    401, "You didn't provide an API key (Authorization: Bearer ...).", code="invalid_api_key"
                )
            )
        if malformed and not recorded.headers.get("content-type", "").startswith("multipart/form-data"):
            return _error_response(
                error(400, "We could not parse the JSON body of your request. (HINT: it is not valid JSON.)")
            )
        if (request.method, request.path) == ("GET", "/v1/models"):
            return web.json_response(self._models_body())
        if (request.method, request.path) == ("POST", "/v1/chat/completions"):
            return await self._chat_completions(request, recorded)
        if (request.method, request.path) == ("POST", "/v1/audio/transcriptions"):
            return self._transcription(recorded)
        return _error_response(
            error(
                404, f"Invalid URL ({request.method} {request.path}): FakeOpenAI serves chat completions only"
            )
        )

    async def _azure(self, request: web.Request, recorded: RecordedRequest) -> web.StreamResponse:
        """Azure OpenAI's shape: key in ``api-key``, version in the query, the deployment in the path."""
        if not request.headers.get("api-key", "").strip():
            return _error_response(error(401, "Access denied due to invalid subscription key or wrong API endpoint.",
                                         code="401"))
        parts = request.path.strip("/").split("/")
        if request.query.get("api-version") != self.azure_api_version or len(parts) != 5 or parts[:2] != [
            "openai", "deployments"] or parts[3:] != ["chat", "completions"] or request.method != "POST":
            return _error_response(error(404, "Resource not found", code="404"))
        return await self._chat_completions(request, recorded)

    def _models_body(self) -> dict[str, Any]:
        model = {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "fake-openai"}
        return {"object": "list", "data": [model]}

    async def _chat_completions(self, request: web.Request, recorded: RecordedRequest) -> web.StreamResponse:
        if not isinstance(recorded.json, dict):
            return _error_response(error(400, "The request body must be a JSON object."))
        if not isinstance(recorded.json.get("messages"), list):
            return _error_response(error(400, "Missing required parameter: 'messages'.", param="messages"))
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        self.max_in_flight = max(self.max_in_flight, len(self._inflight))
        try:
            reply = await self._next_reply(recorded)
            return await self._respond(request, recorded, reply)
        except asyncio.CancelledError:
            if not self._closing:  # the client hung up, not our own shutdown
                self.cancelled.append(recorded)
                self._wake()
            raise
        finally:
            self._inflight.discard(task)

    async def _next_reply(self, recorded: RecordedRequest) -> Reply:
        if self.script is not None:
            try:
                result = self.script(recorded)
                reply = await result if inspect.isawaitable(result) else result
            except Exception as exc:
                self.script_errors.append(exc)
                return _fake_failure(f"FakeOpenAI script raised {exc!r}")
            if not isinstance(reply, _REPLY_TYPES):
                return _fake_failure(
                    f"FakeOpenAI script returned {reply!r}; "
                    "expected a reply from text()/tool_calls()/error()/delay()"
                )
            return reply
        if self._queue:
            return self._queue.popleft()
        number = sum(1 for r in self.requests if r.path == "/v1/chat/completions" and r.method == "POST")
        return _fake_failure(
            f"FakeOpenAI: the script ran out: chat completion request #{number} arrived but only "
            f"{self._queued_total} replies were queued and no fake.script is set"
        )

    async def _respond(
        self, request: web.Request, recorded: RecordedRequest, reply: Reply
    ) -> web.StreamResponse:
        if isinstance(reply, DelayedReply):
            await asyncio.sleep(reply.seconds)
            return await self._respond(request, recorded, reply.reply)
        if isinstance(reply, ErrorReply):
            return _error_response(reply)
        script = reply if isinstance(reply, StreamedReply) else StreamedReply(reply=reply)
        completion = _Completion.build(self, recorded, script.reply)
        if isinstance(completion.usage, dict):
            self.served.append(completion.usage)
        if recorded.stream and not self.ignore_stream:
            return await completion.stream(request, recorded, script)
        await asyncio.sleep(script.chunk_delay * script.pieces)  # the same answer, all at once
        return web.json_response(completion.body(), headers={**_response_headers(), **dict(completion.headers)})

    def _next_call_id(self) -> str:
        self._call_ids += 1
        return f"call_{self._call_ids}"

    # -- audio transcriptions (issue 28)

    def _transcription(self, recorded: RecordedRequest) -> web.Response:
        """``/audio/transcriptions``: a multipart form with ``file`` and ``model``; answers ``{"text": ...}``."""
        head = f"Content-Type: {recorded.headers.get('content-type', '')}\r\n\r\n".encode()
        form = BytesParser(policy=email.policy.HTTP).parsebytes(head + recorded.body)
        fields: dict[str, Any] = {}
        for part in form.iter_parts() if form.is_multipart() else ():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True) or b""
            if name == "file":
                fields.update(filename=part.get_filename(), content_type=part.get_content_type(), size=len(payload))
            elif isinstance(name, str):
                fields[name] = payload.decode()
        if "size" not in fields or not fields.get("model"):
            return _error_response(error(400, "Missing required parameters: 'file' and 'model'.", param="file"))
        self.transcriptions.append(fields)
        usage = {} if self.transcript_seconds is None else {
            "usage": {"type": "duration", "seconds": self.transcript_seconds}}
        return web.json_response({"text": self.transcript, **usage})


# === Response shapes


@dataclass(frozen=True)
class _Completion:
    """One successful answer, rendered as a ``chat.completion`` or as ``chat.completion.chunk`` events."""

    id: str
    created: int
    model: str
    content: str | None
    calls: tuple[tuple[str, ToolCall], ...]  # (id, call)
    finish_reason: str
    usage: Any  # None: no usage sent
    refusal: str | None = None
    reasoning: str | None = None
    reasoning_field: str = "reasoning_content"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def build(
        cls, fake: FakeOpenAI, recorded: RecordedRequest, reply: TextReply | ToolCallsReply
    ) -> _Completion:
        content: str | None = reply.content
        calls: tuple[tuple[str, ToolCall], ...] = ()
        finish: str = "tool_calls"
        said: tuple[str | None, str | None, str] = (None, None, "reasoning_content")
        if isinstance(reply, TextReply):
            finish = reply.finish_reason
            said = (reply.refusal, reply.reasoning, reply.reasoning_field)
        else:
            calls = tuple((fake._next_call_id(), call) for call in reply.calls)
        produced = (content or "") + (said[0] or "") + (said[1] or "") + "".join(call.arguments for _, call in calls)
        prompt = (
            reply.prompt_tokens if reply.prompt_tokens is not None else _estimate_prompt(recorded.messages)
        )
        completion = (
            reply.completion_tokens if reply.completion_tokens is not None else len(produced) // 4 + 1
        )
        prompt = max(prompt, reply.cached_tokens)
        return cls(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            created=int(time.time()),
            model=recorded.model or fake.model,
            content=content,
            calls=calls,
            finish_reason=finish,
            usage=_usage(prompt, completion, reply.cached_tokens) if reply.raw_usage == "auto" else reply.raw_usage,
            refusal=said[0],
            reasoning=said[1],
            reasoning_field=said[2],
            headers=tuple(reply.headers.items()),
        )

    def body(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.content,
            "refusal": self.refusal,
            "annotations": [],
        }
        if self.reasoning is not None:
            message[self.reasoning_field] = self.reasoning
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call_id, call in self.calls
            ]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason}
        usage = {} if self.usage is None else {"usage": self.usage}
        return {**self._envelope("chat.completion"), "choices": [choice], **usage}

    async def stream(
        self, request: web.Request, recorded: RecordedRequest, script: StreamedReply
    ) -> web.StreamResponse:
        options = recorded.json.get("stream_options") if isinstance(recorded.json, dict) else None
        include_usage = isinstance(options, dict) and options.get("include_usage") is True and script.usage_chunk
        response = web.StreamResponse(
            headers={
                **_response_headers(),
                **dict(self.headers),
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        chunks = self.chunks(include_usage, script.pieces)
        for number, chunk in enumerate(chunks):  # `number` chunks sent so far
            if number == script.garbage_after:
                await response.write(b'data: {"choices": [{"delta": {"content": "unfinished\n\n')
            if number == script.cut_after:
                if script.error is not None:
                    error = script.error
                    body = {"message": error.message, "type": error.type, "param": error.param, "code": error.code}
                    await response.write(f"data: {json.dumps({'error': body})}\n\n".encode())
                elif script.cut == "drop":
                    assert request.transport is not None
                    request.transport.abort()  # mid-body: the client sees a payload error
                    return response
                break
            carries_a_piece = number > 0 and bool(chunk["choices"]) and bool(chunk["choices"][0]["delta"])
            if carries_a_piece and script.chunk_delay:
                await asyncio.sleep(script.chunk_delay)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        else:
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def chunks(self, include_usage: bool, pieces: int = STREAM_PIECES) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "", "refusal": None}]
        deltas += [{self.reasoning_field: piece} for piece in _pieces(self.reasoning or "", pieces)]
        deltas += [{"content": piece} for piece in _pieces(self.content or "", pieces)]
        deltas += [{"content": None, "refusal": piece} for piece in _pieces(self.refusal or "", pieces)]
        for index, (call_id, call) in enumerate(self.calls):
            head = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            deltas.append({"tool_calls": [head]})
            deltas += [
                {"tool_calls": [{"index": index, "function": {"arguments": a}}]}
                for a in _pieces(call.arguments, pieces)
            ]
        choices: list[list[dict[str, Any]]] = [
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}] for delta in deltas
        ]
        choices.append([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": self.finish_reason}])
        envelope = self._envelope("chat.completion.chunk")
        extra: dict[str, Any] = {"usage": None} if include_usage else {}
        chunks = [{**envelope, "choices": c, **extra} for c in choices]
        if include_usage and self.usage is not None:
            chunks.append({**envelope, "choices": [], "usage": self.usage})
        return chunks

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }


def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _estimate_prompt(messages: list[dict[str, Any]]) -> int:
    """Rough prompt tokens: characters of every message's text (and tool-call arguments) // 4 + 1."""
    chars = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):  # content parts: [{"type": "text", "text": "..."}]
            chars += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            chars += len(str(call.get("function", {}).get("arguments", ""))) if isinstance(call, dict) else 0
    return chars // 4 + 1


def _pieces(value: str, n: int = STREAM_PIECES) -> list[str]:
    """Split ``value`` into at most ``n`` non-empty pieces, in order ("" gives no pieces)."""
    size = max(1, math.ceil(len(value) / n))
    return [value[i : i + size] for i in range(0, len(value), size)]


def _response_headers() -> dict[str, str]:
    return {"x-request-id": f"req_{uuid.uuid4().hex}", "openai-processing-ms": "1"}


def _error_response(reply: ErrorReply) -> web.Response:
    body = {"error": {"message": reply.message, "type": reply.type, "param": reply.param, "code": reply.code}}
    return web.json_response(body, status=reply.status, headers={**_response_headers(), **reply.headers})


def _fake_failure(message: str) -> ErrorReply:
    """A 500 for a broken test script; ``x-should-retry: false`` stops the client retrying it."""
    return error(
        500, message, type="fake_openai_error", code="fake_script", headers={"x-should-retry": "false"}
    )
