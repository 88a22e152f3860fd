"""Self-tests for the fake OpenAI server, driven through the real ``openai`` client and raw aiohttp."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import (
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from tests.fakes.openai_server import (
    FakeOpenAI,
    RecordedRequest,
    Reply,
    delay,
    ensure_loopback_url,
    error,
    refusal,
    streamed,
    text,
    tool_calls,
)

USER: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France?"}
]  # 30 chars
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


def make_client(
    fake: FakeOpenAI, transport: Literal["httpx", "aiohttp"], *, max_retries: int = 0, timeout: float = 5.0
) -> AsyncOpenAI:
    """The official client, validating responses strictly against its own models."""
    return AsyncOpenAI(
        base_url=fake.base_url,
        api_key="test",
        max_retries=max_retries,
        timeout=timeout,
        http_client=openai.DefaultAioHttpClient() if transport == "aiohttp" else None,
        _strict_response_validation=True,
    )


def _function_calls(message: ChatCompletionMessage) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    return [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]


@pytest.fixture(params=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> Literal["httpx", "aiohttp"]:
    """Both of the official client's transports: its default and ``DefaultAioHttpClient``."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def client(
    fake_openai: FakeOpenAI, transport: Literal["httpx", "aiohttp"]
) -> AsyncIterator[AsyncOpenAI]:
    async with make_client(fake_openai, transport) as client:
        yield client


async def test_base_url_is_loopback_with_trailing_slash(fake_openai: FakeOpenAI) -> None:
    assert fake_openai.base_url.startswith("http://127.0.0.1:")
    assert fake_openai.base_url.endswith("/v1/")
    assert ensure_loopback_url(fake_openai.base_url) == fake_openai.base_url


@pytest.mark.parametrize("url", ["http://localhost:1/v1", "http://[::1]:8080/", "redis://127.0.0.1:6379/9"])
def test_ensure_loopback_url_accepts_loopback(url: str) -> None:
    assert ensure_loopback_url(url) == url


@pytest.mark.parametrize(
    "url", ["https://api.openai.com/v1", "http://10.0.0.1/", "http://127.0.0.1.nip.io/", ""]
)
def test_ensure_loopback_url_refuses_the_rest(url: str) -> None:
    with pytest.raises(ValueError, match="refusing non-loopback URL"):
        ensure_loopback_url(url)


async def test_text_reply_parses_with_usage_and_cached_tokens(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake_openai.queue(text("Paris", prompt_tokens=40, completion_tokens=2, cached_tokens=32))

    response = await client.chat.completions.create(model="gpt-test", messages=USER, max_tokens=50)

    assert response.object == "chat.completion"
    assert response.model == "gpt-test"
    choice = response.choices[0]
    assert (choice.message.role, choice.message.content, choice.message.tool_calls) == (
        "assistant",
        "Paris",
        None,
    )
    assert choice.finish_reason == "stop"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (
        40,
        2,
        42,
    )
    assert response.usage.prompt_tokens_details is not None
    assert response.usage.prompt_tokens_details.cached_tokens == 32
    response.model_dump()  # serialising back raises no pydantic warnings (filterwarnings=error)

    [recorded] = fake_openai.requests
    assert (recorded.method, recorded.path) == ("POST", "/v1/chat/completions")
    assert recorded.headers["authorization"] == "Bearer test"
    assert recorded.messages == USER
    assert (recorded.tools, recorded.max_tokens, recorded.model) == ([], 50, "gpt-test")


async def test_default_usage_is_estimated_from_characters(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake_openai.queue(text("Paris is the capital.", finish_reason="length"))  # 21 characters

    response = await client.chat.completions.create(
        model="gpt-test",
        messages=USER,
        max_completion_tokens=5,
    )

    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (30 // 4 + 1, 21 // 4 + 1)
    assert fake_openai.requests[0].max_tokens == 5


async def test_tool_calls_reply_parses(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.queue(
        tool_calls(("search", {"q": "Paris"}), ("calculator", '{"expr": "2+'), content="Let me look."),
        tool_calls(("search", '{"z": 1, "a": 2}')),
    )

    first = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    second = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)

    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    assert [
        (c.id, c.type, c.function.name, c.function.arguments) for c in _function_calls(choice.message)
    ] == [
        ("call_1", "function", "search", '{"q": "Paris"}'),
        ("call_2", "function", "calculator", '{"expr": "2+'),  # malformed on purpose, sent raw
    ]
    [call] = _function_calls(second.choices[0].message)
    assert (call.id, call.function.arguments) == ("call_3", '{"z": 1, "a": 2}')
    assert fake_openai.requests[0].tools == TOOLS


async def test_streamed_text_yields_content_pieces_and_usage(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake_openai.queue(text("The capital of France is Paris.", cached_tokens=4))

    stream = await client.chat.completions.create(
        model="gpt-test",
        messages=USER,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]

    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1
    assert "".join(pieces) == "The capital of France is Paris."
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert (usage.completion_tokens, usage.prompt_tokens_details.cached_tokens) == (31 // 4 + 1, 4)
    assert all(c.usage is None for c in chunks[:-1])


async def test_streamed_tool_calls_assemble(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.queue(tool_calls(("search", {"q": "Paris weather"}), ("clock", {})))

    stream = await client.chat.completions.create(
        model="m",
        messages=USER,
        tools=TOOLS,
        stream=True,
    )
    names: dict[int, str] = {}
    ids: dict[int, str] = {}
    args: dict[int, str] = {}
    finish = None
    async for chunk in stream:
        assert chunk.usage is None  # include_usage was not asked for
        for delta in chunk.choices[0].delta.tool_calls or []:
            if delta.id:
                ids[delta.index] = delta.id
            if delta.function and delta.function.name:
                names[delta.index] = delta.function.name
            if delta.function and delta.function.arguments:
                args[delta.index] = args.get(delta.index, "") + delta.function.arguments
        finish = chunk.choices[0].finish_reason or finish

    assert (names, ids, finish) == ({0: "search", 1: "clock"}, {0: "call_1", 1: "call_2"}, "tool_calls")
    assert json.loads(args[0]) == {"q": "Paris weather"} and args[1] == "{}"


async def test_429_reaches_the_client_as_rate_limit_error(
    fake_openai: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake_openai.queue(error(429, "Rate limit reached for gpt-test", code="rate_limit_exceeded"))

    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="gpt-test", messages=USER)

    assert caught.value.status_code == 429
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.type == "rate_limit_error"
    assert "Rate limit reached for gpt-test" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "exception"),
    [(400, openai.BadRequestError), (500, openai.InternalServerError), (503, openai.InternalServerError)],
)
async def test_other_errors_map_to_the_clients_exceptions(
    fake_openai: FakeOpenAI, client: AsyncOpenAI, status: int, exception: type[openai.APIStatusError]
) -> None:
    fake_openai.queue(error(status, f"injected {status}", param="messages"))

    with pytest.raises(exception, match=f"injected {status}"):
        await client.chat.completions.create(model="m", messages=USER)


async def test_retry_after_429_succeeds_and_both_requests_are_recorded(
    fake_openai: FakeOpenAI, transport: Literal["httpx", "aiohttp"]
) -> None:
    fake_openai.queue(error(429, "slow down", headers={"Retry-After": "0"}), text("ok"))

    async with make_client(fake_openai, transport, max_retries=1) as client:
        response = await client.chat.completions.create(model="m", messages=USER)

    assert response.choices[0].message.content == "ok"
    assert [r.messages for r in fake_openai.requests] == [USER, USER]


async def test_running_dry_is_a_clear_500_that_is_not_retried(
    fake_openai: FakeOpenAI, transport: Literal["httpx", "aiohttp"]
) -> None:
    fake_openai.queue(text("only one"))

    async with make_client(fake_openai, transport, max_retries=2) as client:
        await client.chat.completions.create(model="m", messages=USER)
        with pytest.raises(
            openai.InternalServerError, match="the script ran out: chat completion request #2"
        ):
            await client.chat.completions.create(model="m", messages=USER)

    assert len(fake_openai.requests) == 2  # x-should-retry: false, so no retries against an empty script


async def test_script_function_sync_and_async(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    def echo(request: RecordedRequest) -> Reply:
        return text(f"you said {request.messages[-1]['content']}")

    fake_openai.script = echo
    first = await client.chat.completions.create(model="m", messages=USER)

    async def by_tools(request: RecordedRequest) -> Reply:
        return tool_calls(("search", {"q": "x"})) if request.tools else text("no tools")

    fake_openai.script = by_tools
    second = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)

    assert first.choices[0].message.content == "you said What is the capital of France?"
    assert second.choices[0].finish_reason == "tool_calls"


async def test_a_raising_script_answers_500_and_fails_the_test_at_close(
    transport: Literal["httpx", "aiohttp"],
) -> None:
    fake = FakeOpenAI()
    await fake.start()

    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("no such message")

    fake.script = broken
    async with make_client(fake, transport) as client:
        with pytest.raises(openai.InternalServerError, match="FakeOpenAI script raised KeyError"):
            await client.chat.completions.create(model="m", messages=USER)

    with pytest.raises(AssertionError, match="FakeOpenAI script raised during the test"):
        await fake.close()


async def test_delay_and_wait_for_requests(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.queue(delay(0.2, text("late")))

    call = asyncio.create_task(client.chat.completions.create(model="m", messages=USER))
    [arrived] = await fake_openai.wait_for_requests(1)

    assert arrived.messages == USER
    assert not call.done()  # the server holds the answer back
    response = await call
    assert response.choices[0].message.content == "late"


async def test_client_cancellation_is_recorded(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.queue(delay(30, text("never sent")))

    call = asyncio.create_task(client.chat.completions.create(model="m", messages=USER))
    await fake_openai.wait_for_requests(1)
    call.cancel()

    [cancelled] = await fake_openai.wait_for_cancelled(1)
    assert cancelled is fake_openai.requests[0]
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_client_timeout_against_a_delayed_reply(
    fake_openai: FakeOpenAI, transport: Literal["httpx", "aiohttp"]
) -> None:
    fake_openai.queue(delay(30, text("too late")))

    async with make_client(fake_openai, transport, timeout=0.2) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=USER)

    await fake_openai.wait_for_cancelled(1)


async def test_wait_for_requests_fails_clearly_instead_of_hanging(fake_openai: FakeOpenAI) -> None:
    with pytest.raises(AssertionError, match=r"waited 0.01s for 1 request\(s\), saw 0"):
        await fake_openai.wait_for_requests(1, timeout=0.01)


async def test_models_list_has_the_configured_model(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    models = [model.id async for model in client.models.list()]

    assert models == [fake_openai.model]
    assert fake_openai.requests[0].method == "GET"


# Raw aiohttp: what the official client hides (auth, malformed bodies, the wire format of the stream).


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _post(
    http: aiohttp.ClientSession, fake: FakeOpenAI, body: bytes, *, auth: str | None = "Bearer test"
) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Content-Type": "application/json", **({"Authorization": auth} if auth else {})}
    async with http.post(f"{fake.base_url}chat/completions", data=body, headers=headers) as response:
        return response.status, await response.json(), dict(response.headers)


@pytest.mark.parametrize("auth", [None, "Basic dGVzdA==", "Bearer "])
async def test_missing_bearer_token_is_401(
    fake_openai: FakeOpenAI, http: aiohttp.ClientSession, auth: str | None
) -> None:
    status, body, _ = await _post(
        http, fake_openai, json.dumps({"model": "m", "messages": USER}).encode(), auth=auth
    )

    assert status == 401
    assert body["error"]["code"] == "invalid_api_key"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert len(fake_openai.requests) == 1


async def test_malformed_json_is_400_and_recorded(
    fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    fake_openai.queue(text("unused"))

    status, body, _ = await _post(http, fake_openai, b'{"model": "m", "messages": [')

    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert "could not parse the JSON body" in body["error"]["message"]
    [recorded] = fake_openai.requests
    assert (recorded.json, recorded.body, recorded.messages) == (None, b'{"model": "m", "messages": [', [])


async def test_missing_messages_is_400(fake_openai: FakeOpenAI, http: aiohttp.ClientSession) -> None:
    status, body, _ = await _post(http, fake_openai, b'{"model": "m"}')

    assert (status, body["error"]["param"]) == (400, "messages")


async def test_error_headers_are_sent(fake_openai: FakeOpenAI, http: aiohttp.ClientSession) -> None:
    fake_openai.queue(error(429, "slow down", headers={"Retry-After": "7"}))

    status, body, headers = await _post(
        http, fake_openai, json.dumps({"model": "m", "messages": USER}).encode()
    )

    assert (status, headers["Retry-After"]) == (429, "7")
    assert body == {
        "error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}
    }


async def test_stream_wire_format(fake_openai: FakeOpenAI, http: aiohttp.ClientSession) -> None:
    fake_openai.queue(text("Hello there"))
    body = {"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}

    headers = {"Authorization": "Bearer test"}
    async with http.post(f"{fake_openai.base_url}chat/completions", json=body, headers=headers) as response:
        assert response.content_type == "text/event-stream"
        raw = (await response.read()).decode()

    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(event.startswith("data: ") for event in events[:-1])
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


async def test_unknown_path_is_an_openai_shaped_404(
    fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    headers = {"Authorization": "Bearer test"}
    async with http.get(f"{fake_openai.base_url}embeddings", headers=headers) as response:
        assert response.status == 404
        assert "FakeOpenAI serves chat completions only" in (await response.json())["error"]["message"]


async def test_usable_as_async_context_manager() -> None:
    async with FakeOpenAI(model="gpt-ctx") as fake, aiohttp.ClientSession() as http:
        headers = {"Authorization": "Bearer test"}
        async with http.get(f"{fake.base_url}models", headers=headers) as response:
            assert (await response.json())["data"][0]["id"] == "gpt-ctx"


async def _stream_events(
    http: aiohttp.ClientSession, fake: FakeOpenAI, *, include_usage: bool = True
) -> list[str]:
    body = {"model": "m", "messages": USER, "stream": True, "stream_options": {"include_usage": include_usage}}
    headers = {"Authorization": "Bearer test"}
    async with http.post(f"{fake.base_url}chat/completions", json=body, headers=headers) as response:
        raw = (await response.read()).decode()
    return [event for event in raw.split("\n\n") if event]


def _contents(events: list[str]) -> list[str]:
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e != "data: [DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    return [d["content"] for d in deltas if d.get("content")]


async def test_streamed_chunking_and_usage_chunk_are_scripted(
    fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    fake_openai.queue(streamed(text("abcdefghij"), pieces=5), streamed(text("abcdefghij"), usage_chunk=False))
    events = await _stream_events(http, fake_openai)
    assert _contents(events) == ["ab", "cd", "ef", "gh", "ij"]
    assert json.loads(events[-2].removeprefix("data: "))["usage"]["total_tokens"] > 0
    events = await _stream_events(http, fake_openai)
    assert events[-1] == "data: [DONE]" and '"choices": []' not in "".join(events)


async def test_streamed_cuts_and_garbage(fake_openai: FakeOpenAI, http: aiohttp.ClientSession) -> None:
    reply = text("abcdefghij")
    fake_openai.queue(streamed(reply, pieces=5, cut_after=3, cut="eof"), streamed(reply, pieces=5, garbage_after=2),
                      streamed(reply, pieces=5, cut_after=3))
    events = await _stream_events(http, fake_openai)
    assert _contents(events) == ["ab", "cd"] and "[DONE]" not in events[-1] and '"finish_reason": "stop"' not in (
        "".join(events))
    events = await _stream_events(http, fake_openai)
    assert events[2] == 'data: {"choices": [{"delta": {"content": "unfinished' and events[-1] == "data: [DONE]"
    with pytest.raises(aiohttp.ClientPayloadError):
        await _stream_events(http, fake_openai)  # the connection dropped mid-body


async def test_streamed_pace_and_the_same_reply_unstreamed(
    fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    fake_openai.queue(streamed(text("abcdefghij"), pieces=5, chunk_delay=0.04))
    started = asyncio.get_running_loop().time()
    await _stream_events(http, fake_openai)
    assert asyncio.get_running_loop().time() - started >= 0.2  # five paced pieces
    fake_openai.queue(streamed(text("abcdefghij"), pieces=5, chunk_delay=0.04))
    status, body, _ = await _post(http, fake_openai, json.dumps({"model": "m", "messages": USER}).encode())
    assert status == 200 and body["choices"][0]["message"]["content"] == "abcdefghij"


async def test_azure_mode_wants_api_key_and_api_version(fake_openai: FakeOpenAI, http: aiohttp.ClientSession) -> None:
    fake_openai.azure_api_version = "2024-10-21"
    fake_openai.queue(text("azure"))
    root = fake_openai.base_url.removesuffix("v1/")
    url = f"{root}openai/deployments/d1/chat/completions"
    body = {"messages": USER}
    async with http.post(url, json=body, headers={"Authorization": "Bearer test"}) as response:
        assert response.status == 401
    async with http.post(url, json=body, headers={"api-key": "k"}) as response:
        assert response.status == 404  # no api-version
    async with http.post(url, params={"api-version": "2024-10-21"}, json=body, headers={"api-key": "k"}) as response:
        assert response.status == 200 and (await response.json())["choices"][0]["message"]["content"] == "azure"


async def test_refusals_parse_as_the_official_client_reads_them(fake_openai: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake_openai.queue(refusal("I can't help with that."), refusal("I can't help with that."))
    done = await client.chat.completions.create(model="gpt-test", messages=USER)
    assert (done.choices[0].message.content, done.choices[0].message.refusal) == (None, "I can't help with that.")
    stream = await client.chat.completions.create(model="gpt-test", messages=USER, stream=True)
    pieces = [c.choices[0].delta.refusal for c in [c async for c in stream] if c.choices and c.choices[0].delta.refusal]
    assert len(pieces) > 1 and "".join(pieces) == "I can't help with that."


async def test_reasoning_fields_and_extra_headers_are_sent(
    fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    fake_openai.queue(
        text("42", reasoning="6 times 7", reasoning_field="reasoning", headers={"x-litellm-version": "1"}),
        text("42", reasoning="6 times 7"),
    )
    url = fake_openai.base_url + "chat/completions"
    auth = {"Authorization": "Bearer test"}
    async with http.post(url, json={"messages": [], "model": "m"}, headers=auth) as resp:
        body = await resp.json()
        assert resp.headers["x-litellm-version"] == "1"
    assert body["choices"][0]["message"]["reasoning"] == "6 times 7"
    async with http.post(url, json={"messages": [], "model": "m", "stream": True}, headers=auth) as resp:
        raw = (await resp.read()).decode()
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in raw.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "6 times 7"
