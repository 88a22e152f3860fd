"""LLM port and its OpenAI-compatible implementation (configured by the official ``openai`` client); the
answer is read into an ``LLMResponse`` by ``agent_core.completion``."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import aiohttp
import orjson
import yarl

from agent_core import sse
from agent_core.completion import LLMResponse, gateway_counts_usage, json_object, to_response
from agent_core.errors import LLMCause, LLMError
from agent_core.provider_errors import cause_of, error_fields, retryable
from agent_core.sse import DeltaSink, StreamDelta
from agent_core.store import Message
from agent_core.transcripts import Heard

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

#: Longest wait between retries, whatever Retry-After asks: a run has a wall-clock cap to keep.
RETRY_WAIT_CAP_SECONDS = 20.0

#: A response body is read up to this many bytes per requested completion token (JSON escaping, tool-call
#: envelopes and the prompt-independent fields fit easily), plus a fixed floor. An endpoint that ignores
#: ``max_tokens`` cannot make the worker buffer megabytes: the call fails with a clear LLMError instead.
BODY_BYTES_PER_TOKEN = 32
BODY_BYTES_FLOOR = 64 * 1024

_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


class LLM(Protocol):
    """A chat model. ``complete`` raises :class:`LLMError` once retries are spent; never returns partial data."""

    model: str

    async def complete(
        self, messages: Sequence[Message], *, tools: list[dict[str, Any]] | None, max_tokens: int,
        model: str | None = None,
    ) -> LLMResponse: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class StreamingLLM(LLM, Protocol):
    """A chat model that can hand its text to the loop while it writes it (when ``streams`` is True).

    The deltas are provisional: the returned :class:`LLMResponse` is what counts, and a ``restart`` delta
    voids the ones before it (a cut stream, retried).
    """

    streams: bool

    async def complete(
        self, messages: Sequence[Message], *, tools: list[dict[str, Any]] | None, max_tokens: int,
        on_delta: DeltaSink | None = None, model: str | None = None,
    ) -> LLMResponse: ...


def _retry_after(headers: Mapping[str, str], attempt: int) -> float:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return min(max(float(value) * scale, 0.0), RETRY_WAIT_CAP_SECONDS)
            except ValueError:
                break
    return min(0.5 * 2.0**attempt + random.uniform(0, 0.25), RETRY_WAIT_CAP_SECONDS)


def _limit_param_of(model: str) -> str:
    return "max_completion_tokens" if _uses_max_completion_tokens(model) else "max_tokens"


def _uses_max_completion_tokens(model: str) -> bool:
    # OpenAI's reasoning models refuse `max_tokens`; most compatible servers only know `max_tokens`.
    name = model.lower().rsplit("/", 1)[-1]
    return name.startswith(("o1", "o3", "o4", "gpt-5"))


class OpenAIChatLLM:
    """Chat Completions through ``AsyncOpenAI``; retries are ours, so non-retryable 429s fail at once.

    ``stream``: ask for server-sent events and hand the text to ``on_delta`` as it arrives (a call without an
    ``on_delta`` has no reader for it and is one plain request).
    ``api_version``: Azure OpenAI, configured as ``AsyncAzureOpenAI`` would be (``api-key`` header,
    ``api-version`` query, ``/deployments/{model}`` when the base URL names no deployment).
    ``max_connections``: the connection pool's size; 0 is no cap of its own (one connection per call in flight).
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 3,
        stream: bool = True,
        api_version: str | None = None,
        max_connections: int = 0,
    ) -> None:
        import openai  # here, not at the top: a process that makes no LLM calls (the web) skips a second of imports

        self.model = model
        self.streams = stream
        url = yarl.URL(base_url)
        self.base_url = redact_url(base_url)
        self._max_retries = max_retries
        self._max_connections = max_connections
        self._limit_param = _limit_param_of(model)
        # The official client holds the configuration: base URL rules, auth and default headers. Its per-call
        # machinery (request transform, typed responses, the httpx layer) is not on the hot path: it cost more
        # CPU per step than the whole engine (BENCHMARKS.md), so the call itself is one aiohttp POST.
        plain = str(url.with_user(None).with_password(None).with_query(None))
        path = "chat/completions"
        self._client: openai.AsyncOpenAI
        if api_version:
            self._client = openai.AsyncAzureOpenAI(api_key=api_key, api_version=api_version, base_url=plain,
                                                   timeout=timeout, max_retries=0)
            if "/deployments" not in self._client.base_url.path:  # AzureOpenAI's own rule
                path = f"deployments/{model}/{path}"
        else:
            self._client = openai.AsyncOpenAI(api_key=api_key, base_url=plain, timeout=timeout, max_retries=0)
        # A gateway's key in the query string is kept on every request (but never shown, see redact_url).
        query = {**{k: str(v) for k, v in self._client.default_query.items()}, **url.query}
        self._query = query
        self._url = str(yarl.URL(f"{self._client.base_url}{path}").with_query(query))
        headers = {k: v for k, v in self._client.default_headers.items() if isinstance(v, str)}
        self._headers = {**headers, **self._client.auth_headers}
        if url.user is not None:
            # `user:pass@` in the base URL is HTTP Basic auth for a gateway in front of the model server.
            userinfo = f"{url.user}:{url.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(userinfo).decode()
        self._basic_auth = {"Authorization": self._headers["Authorization"]} if url.user is not None else None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._client.close()

    async def transcribe(self, data: bytes, name: str, mimetype: str, *, model: str) -> Heard:
        """Speech to text through the endpoint's ``/audio/transcriptions``, with the seconds it says it billed
        (``usage.seconds``, when it reports a duration); LLMError when it fails."""
        import openai

        try:
            answer = await self._client.audio.transcriptions.create(
                model=model, file=(name, data, mimetype), response_format="json",
                extra_headers=self._basic_auth, extra_query=self._query)
        except openai.APIStatusError as exc:
            raise LLMError(redact_urls(f"transcription failed with HTTP {exc.status_code}: {exc.message}"),
                           cause=cause_of(exc.status_code, error_fields(exc.body)), status=exc.status_code) from None
        except openai.APITimeoutError:
            raise LLMError("transcription timed out", cause="timeout") from None
        except openai.APIError as exc:
            raise LLMError(redact_urls(f"transcription failed: {exc}"), cause="unreachable") from None
        usage = getattr(answer, "usage", None)
        seconds = getattr(usage, "seconds", None) if getattr(usage, "type", None) == "duration" else None
        return Heard(answer.text, float(seconds) if isinstance(seconds, int | float) else None)

    def _open_session(self) -> aiohttp.ClientSession:
        # aiohttp's default pool holds 100 connections: more runs in flight than that would queue for one.
        connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
        self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self._session

    async def complete(
        self, messages: Sequence[Message], *, tools: list[dict[str, Any]] | None, max_tokens: int,
        on_delta: DeltaSink | None = None, model: str | None = None,
    ) -> LLMResponse:
        """``model``: this call's model instead of the client's own (a run's choice)."""
        name = model or self.model
        limit = self._limit_param if name == self.model else _limit_param_of(name)
        params: dict[str, Any] = {"model": name, "messages": list(messages), limit: max_tokens}
        if tools:
            params["tools"] = tools
        if self.streams and on_delta is not None:
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        body = encode_body(params)
        session = self._session or self._open_session()
        sink = _Sink(on_delta)
        attempt = 0
        while True:
            sink.restart()
            answer = await self._attempt(session, body, max_tokens, sink, attempt)
            if isinstance(answer, LLMResponse):
                return answer
            log.info("LLM call failed, retry %d/%d in %.2fs", attempt + 1, self._max_retries, answer)
            attempt += 1
            await asyncio.sleep(answer)

    async def _attempt(
        self, session: aiohttp.ClientSession, body: bytes, max_tokens: int, sink: _Sink, attempt: int
    ) -> LLMResponse | float:
        """One try of a call: its answer, or how long to wait before the next try; raises ``LLMError`` when no
        try is left or waiting would not help."""
        last = attempt >= self._max_retries
        backoff = min(0.5 * 2.0**attempt, RETRY_WAIT_CAP_SECONDS)
        try:
            async with session.post(self._url, data=body, headers=self._headers) as resp:
                status, headers = resp.status, resp.headers
                if status < 300 and resp.content_type == "text/event-stream":
                    completion = await sse.read_completion(
                        resp, limit=stream_body_limit(max_tokens), text_limit=body_limit(max_tokens), on_delta=sink)
                    return to_response(completion, gateway_usage=gateway_counts_usage(headers))
                raw = await _read_bounded(resp, body_limit(max_tokens))
        except (aiohttp.ClientError, TimeoutError) as exc:
            if last:
                timed_out = isinstance(exc, TimeoutError)
                raise LLMError(
                    f"the LLM endpoint at {self.base_url} "
                    + ("did not answer in time" if timed_out else f"cannot be reached ({type(exc).__name__})")
                    + "; check OPENAI_BASE_URL",
                    cause="timeout" if timed_out else "unreachable",
                    retryable=True,
                ) from exc
            return backoff
        except LLMError as exc:
            if not exc.retryable or last:  # a stream cut off: retried as a drop
                raise
            return backoff
        if status < 300:  # a server that ignores `stream` answers one JSON body: fine too
            return to_response(json_object(raw))
        error = error_fields(_maybe_json(raw))
        cause = cause_of(status, error)  # waiting never fixes an empty account: quota is not retried
        if not retryable(status, cause) or last:
            message = str(error.get("message") or raw[:300].decode(errors="replace") or f"HTTP {status}")
            raise LLMError(_describe_status(status, redact_urls(message), self.base_url, cause),
                           cause=cause, status=status)
        return _retry_after(headers, attempt)


class _Sink:
    """Forwards deltas, and tells the receiver when a retry voids the ones it already has."""

    def __init__(self, target: DeltaSink | None) -> None:
        self._target = target
        self._sent = False

    def __call__(self, delta: StreamDelta) -> None:
        if self._target is not None:
            self._sent = True
            self._target(delta)

    def restart(self) -> None:
        if self._sent and self._target is not None:
            self._sent = False
            self._target(StreamDelta(restart=True))


def body_limit(max_tokens: int) -> int:
    """Bytes of a response body read at most for a call asking for ``max_tokens``."""
    return BODY_BYTES_FLOOR + BODY_BYTES_PER_TOKEN * max_tokens


def stream_body_limit(max_tokens: int) -> int:
    """Bytes of an event stream read at most for a call asking for ``max_tokens``."""
    return BODY_BYTES_FLOOR + sse.STREAM_BYTES_PER_TOKEN * max_tokens


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise LLMError(
                f"the LLM endpoint's answer is larger than {limit} bytes, far more than max_tokens allows; "
                "the endpoint seems to ignore max_tokens",
                charged=True,
            )
        chunks.append(chunk)
    return b"".join(chunks)


def encode_body(params: Mapping[str, Any]) -> bytes:
    """A request body as UTF-8 JSON. orjson writes it ~8x faster than json: the whole history goes with every
    request, so json.dumps alone cost ~0.6 ms a step once the history window was full. A value orjson refuses
    (an int beyond 64 bits, a non-str key) takes the standard library's way."""
    try:
        return orjson.dumps(params)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(params, ensure_ascii=False).encode()


def _maybe_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def redact_url(url: str) -> str:
    """``url`` cut to scheme and host: no credentials, path or query (a gateway may put its key there)."""
    parsed = yarl.URL(url)
    return f"{parsed.scheme}://{parsed.host}" if parsed.host else "(the configured URL)"


def redact_urls(text: str) -> str:
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def _describe_status(status: int, message: str, base_url: str, cause: LLMCause) -> str:
    if cause == "quota":
        return (f"the LLM provider's quota, credit or budget is used up (HTTP {status}: {message}); retrying cannot "
                "help: the operator must add credit or raise the limit")
    if status == 401:
        return f"the LLM endpoint {base_url} refused the API key ({message}); check OPENAI_API_KEY"
    if status == 404:
        return f"the LLM endpoint {base_url} answered 404 ({message}); check OPENAI_BASE_URL and OPENAI_MODEL"
    return f"LLM call failed with HTTP {status}: {message}"


