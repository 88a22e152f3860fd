"""web_search: top results (title, url, snippet) from SearXNG or the Brave Search API.

The backend is configured by the operator, so it is trusted and not put through the SSRF guard
(a SearXNG instance usually lives on the internal network).
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, Field
from yarl import URL

from tools.context import ToolContext
from tools.errors import SearchError
from tools.registry import tool
from tools.tool import Tool

#: How many results reach the model.
TOP_RESULTS = 5
BRAVE_SEARCH_URL = "https://api.search.brave.com/res/v1/web/search"
MAX_SNIPPET_CHARS = 300
_TAG = re.compile(r"<[^>]+>")


class WebSearchArgs(BaseModel):
    """Arguments of the web_search tool."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=400, description="What to search the web for.")


class SearchBackend(Protocol):
    """One search service: builds the request and reads the answer into result dicts."""

    #: Shown in error messages ("SearXNG answered HTTP 500").
    name: str

    def request(self, query: str) -> tuple[str, dict[str, str], dict[str, str]]:
        """(url, query parameters, headers) for ``query``."""
        ...

    def results(self, payload: Any) -> list[dict[str, str]]:
        """The answer's results as ``{"title", "url", "snippet"}`` dicts."""
        ...


class SearxngBackend:
    """``GET {base}/search?q=…&format=json`` (the instance must allow the json format)."""

    name = "SearXNG"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def request(self, query: str) -> tuple[str, dict[str, str], dict[str, str]]:
        return f"{self.base_url}/search", {"q": query, "format": "json"}, {"Accept": "application/json"}

    def results(self, payload: Any) -> list[dict[str, str]]:
        items = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            raise SearchError("SearXNG answered without a results list (is the json format enabled?)")
        return [_result(i.get("title"), i.get("url"), i.get("content")) for i in items if isinstance(i, dict)]


class BraveBackend:
    """Brave Search API web search, authenticated by the ``X-Subscription-Token`` header."""

    name = "Brave Search"

    def __init__(self, api_key: str, url: str = BRAVE_SEARCH_URL) -> None:
        self._api_key = api_key
        self.url = url

    def request(self, query: str) -> tuple[str, dict[str, str], dict[str, str]]:
        headers = {"Accept": "application/json", "X-Subscription-Token": self._api_key}
        return self.url, {"q": query, "count": str(TOP_RESULTS)}, headers

    def results(self, payload: Any) -> list[dict[str, str]]:
        web = payload.get("web") if isinstance(payload, dict) else None
        items = web.get("results", []) if isinstance(web, dict) else []
        if not isinstance(items, list):
            raise SearchError("Brave Search answered without a results list")
        return [
            _result(i.get("title"), i.get("url"), i.get("description")) for i in items if isinstance(i, dict)
        ]


def _result(title: Any, url: Any, snippet: Any) -> dict[str, str]:
    def clean(value: Any) -> str:
        # Backends mark matches with <strong> and escape entities; the model wants plain text.
        return " ".join(html.unescape(_TAG.sub("", str(value or ""))).split())

    text = clean(snippet)
    if len(text) > MAX_SNIPPET_CHARS:
        text = text[: MAX_SNIPPET_CHARS - 1].rstrip() + "…"
    return {"title": clean(title), "url": str(url or ""), "snippet": text}


async def search(backend: SearchBackend, session: aiohttp.ClientSession, query: str) -> list[dict[str, str]]:
    """The top results for ``query``; ``SearchError`` when the backend fails."""
    url, params, headers = backend.request(query)
    try:
        async with session.get(url, params=params, headers=headers) as resp:
            if resp.status != 200:
                raise SearchError(f"{backend.name} answered HTTP {resp.status} {resp.reason or ''}".rstrip())
            payload = await resp.json(content_type=None)
    except aiohttp.ClientConnectionError as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise SearchError(f"{backend.name} could not be reached ({exc})") from exc
    except ValueError as exc:  # body is not JSON
        raise SearchError(f"{backend.name} answered something that is not JSON ({exc})") from exc
    return [r for r in backend.results(payload) if r["url"]][:TOP_RESULTS]


def provider_name(backend: SearchBackend) -> str:
    """The search provider as an approval names it: "the search provider SearXNG (search.example.com)"."""
    host = URL(backend.request("")[0]).host or "?"
    return f"the search provider {backend.name} ({host})"


def make_web_search(
    backend: SearchBackend, *, http: aiohttp.ClientSession | None = None, timeout: float = 20.0
) -> Tool:
    """The web_search tool over ``backend``, on the shared session ``http`` (or one per call)."""

    @asynccontextmanager
    async def session() -> AsyncIterator[aiohttp.ClientSession]:
        if http is not None:
            yield http
            return
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as own:
            yield own

    # The backend is the operator's choice, not the model's: it is the only destination, and it is a destination
    # like any other. Once the run has read private data, a query goes out unasked only when every word of it
    # is the requester's own.
    @tool(name="web_search", timeout=timeout, outbound=True, destination_args=(),
          sends_to=provider_name(backend), requester_words_pass=True)
    async def web_search(args: WebSearchArgs, ctx: ToolContext) -> list[dict[str, str]]:
        """Search the web; returns the top results as title, url and snippet. Read a result with fetch_url."""
        async with session() as s:
            return await search(backend, s, args.query)

    return web_search
