"""web_search against local SearXNG and Brave-shaped servers (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.tools.conftest import make_settings
from tools import Executor, Outcome, Registry, ToolContext, ToolResult, builtin_registry
from tools.builtins.web_search import BraveBackend, SearchBackend, make_web_search


class SearchServer:
    """Answers /search (SearXNG) and /res/v1/web/search (Brave) from ``payload``; records requests."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.status = 200
        self.body: str | None = None
        self.port = 0

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.query), dict(request.headers)))
        if self.body is not None:
            return web.Response(status=self.status, text=self.body, content_type="application/json")
        query = request.query["q"]
        items = [
            {
                "title": f"<b>Result {i}</b> for {query}",
                "url": f"https://example.com/{i}",
                "content": f"Snippet &amp; text {i}",
                "description": f"Brave <strong>snippet</strong> {i}",
            }
            for i in range(8)
        ]
        if request.path == "/search":
            return web.json_response({"results": items}, status=self.status)
        return web.json_response({"web": {"results": items}}, status=self.status)


@pytest.fixture
async def search_server() -> AsyncIterator[SearchServer]:
    server = SearchServer()
    app = web.Application()
    app.router.add_get("/search", server.handle)
    app.router.add_get("/res/v1/web/search", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = int(runner.addresses[0][1])
    yield server
    await runner.cleanup()


async def search(registry: Registry, query: str, ctx: ToolContext) -> ToolResult:
    executor = Executor(registry)
    return await executor.execute(executor.prepare("web_search", {"query": query}, call_id="c1"), ctx)


async def test_searxng_top_five_results(search_server: SearchServer, ctx: ToolContext) -> None:
    registry = builtin_registry(make_settings(searxng_url=search_server.url() + "/"))
    result = await search(registry, "slack bots", ctx)
    assert result.outcome is Outcome.OK, result.text
    results = json.loads(result.text)
    assert len(results) == 5
    assert results[0] == {
        "title": "Result 0 for slack bots",
        "url": "https://example.com/0",
        "snippet": "Snippet & text 0",
    }
    path, query, _ = search_server.requests[0]
    assert path == "/search" and query == {"q": "slack bots", "format": "json"}


async def test_brave_backend_sends_its_key(search_server: SearchServer, ctx: ToolContext) -> None:
    backend = BraveBackend("brave-key-123456", url=search_server.url("/res/v1/web/search"))
    result = await search(Registry([make_web_search(backend)]), "weather", ctx)
    results = json.loads(result.text)
    assert [r["snippet"] for r in results] == [f"Brave snippet {i}" for i in range(5)]
    _, query, headers = search_server.requests[0]
    assert query == {"q": "weather", "count": "5"}
    assert headers["X-Subscription-Token"] == "brave-key-123456"


async def test_shared_session_is_used_when_given(search_server: SearchServer, ctx: ToolContext) -> None:
    async with aiohttp.ClientSession(headers={"X-Shared": "yes"}) as http:
        registry = builtin_registry(make_settings(searxng_url=search_server.url()), http=http)
        await search(registry, "q", ctx)
        assert not http.closed  # the tool does not close a session it was lent
    assert search_server.requests[0][2]["X-Shared"] == "yes"


async def test_no_results_is_an_empty_result(search_server: SearchServer, ctx: ToolContext) -> None:
    search_server.body = json.dumps({"results": []})
    result = await search(builtin_registry(make_settings(searxng_url=search_server.url())), "nothing", ctx)
    assert result.outcome is Outcome.OK and result.text == "[]" and result.empty


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, "{}", "SearXNG answered HTTP 500"),
        (200, "not json", "not JSON"),
        (200, '{"x": 1}', "results list"),
    ],
)
async def test_backend_failures_are_errors(
    search_server: SearchServer, ctx: ToolContext, status: int, body: str, message: str
) -> None:
    search_server.status, search_server.body = status, body
    result = await search(builtin_registry(make_settings(searxng_url=search_server.url())), "q", ctx)
    assert result.outcome is Outcome.ERROR and "SearchError" in result.text and message in result.text


async def test_unreachable_backend_is_an_error(ctx: ToolContext) -> None:
    # A port that is bound but not listening refuses connections, and stays ours for the test.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        result = await search(
            builtin_registry(make_settings(searxng_url=f"http://127.0.0.1:{port}")), "q", ctx
        )
    assert result.outcome is Outcome.ERROR and "could not be reached" in result.text


def test_web_search_is_registered_only_with_a_backend() -> None:
    assert "web_search" not in builtin_registry(make_settings()).names()
    assert "web_search" in builtin_registry(make_settings(brave_search_api_key="k" * 20)).names()


def test_searxng_wins_when_both_are_set() -> None:
    from tools.builtins import search_backend

    backend: SearchBackend | None = search_backend(
        make_settings(searxng_url="http://searx.local", brave_search_api_key="k" * 20)
    )
    assert backend is not None and backend.name == "SearXNG"


def test_empty_query_is_invalid() -> None:
    executor = Executor(builtin_registry(make_settings(searxng_url="http://searx.local")))
    call = executor.prepare("web_search", {"query": ""}, call_id="c1")
    assert call.error is not None and "query: String should have at least 1 character" in call.error.text
