"""fetch_url: read a web page as text through the SSRF guard, with size, time and redirect caps."""

from __future__ import annotations

import asyncio
import codecs
import re
from collections.abc import Callable
from dataclasses import replace

import aiohttp
from pydantic import BaseModel, ConfigDict, Field
from yarl import URL

from tools.context import ToolContext
from tools.errors import BlockedURLError, FetchError
from tools.registry import tool
from tools.settings import ToolSettings
from tools.ssrf import HostResolver, PinnedResolver, URLGuard, system_resolve
from tools.tool import Tool

from .html_text import html_to_text

MAX_URL_CHARS = 2048
USER_AGENT = "slack-agent-fetch/0.1 (+tool fetch_url)"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-yaml"}
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_READ_CHUNK = 64 * 1024
#: The observation header line of a page from a FETCH_URL_ALLOWED_HOSTS host.
INTERNAL_LINE = "Source: internal host (FETCH_URL_ALLOWED_HOSTS): private data"


class FetchURLArgs(BaseModel):
    """Arguments of the fetch_url tool."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Full http(s) URL of the page to read, e.g. https://example.com/docs.")


def make_fetch_url(settings: ToolSettings, *, resolve: HostResolver = system_resolve) -> Tool:
    """The fetch_url tool configured by ``settings`` (allow-list, caps)."""
    fetcher = Fetcher(
        URLGuard(settings.fetch_allow_list(), resolve),
        max_bytes=settings.fetch_url_max_bytes,
        max_redirects=settings.fetch_url_max_redirects,
        timeout=settings.fetch_url_timeout_seconds,
    )

    @tool(name="fetch_url", timeout=settings.fetch_url_timeout_seconds, outbound=True, destination_args=("url",))
    async def fetch_url(args: FetchURLArgs, ctx: ToolContext) -> str:
        """Fetch a public web page (http or https) and return its readable text, with its title and final URL.

        Internal and private addresses are refused. Long pages are cut to the parts relevant to the task.
        """
        return await fetcher.fetch(args.url, hop=ctx.egress_hop)

    # Internal means private: a page from a FETCH_URL_ALLOWED_HOSTS host arms the exfiltration guard.
    return replace(fetch_url, private_result=is_internal_page)


def is_internal_page(observation: str) -> bool:
    """True for a fetch_url observation of an internal page (its header says so; the page's own text comes
    after the header, so a page cannot unsay it)."""
    header = observation.partition("\n\n")[0]
    return INTERNAL_LINE in header.splitlines()


class Fetcher:
    """GETs one URL: every hop checked by the guard, connections pinned to the checked addresses."""

    def __init__(self, guard: URLGuard, *, max_bytes: int, max_redirects: int, timeout: float) -> None:
        self.guard = guard
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.timeout = timeout

    async def fetch(self, raw_url: str, *, hop: Callable[[str], None] | None = None) -> str:
        """The page at ``raw_url`` as text (see ``render``); ``FetchError`` when it cannot be read.

        ``hop`` (the exfiltration guard's) sees every redirect target before it is requested, and may raise.
        """
        url = parse_url(raw_url)
        resolver = PinnedResolver()
        # A session per call: its resolver answers only for hosts this call checked, and nothing
        # (cookies, pooled connections to other addresses) carries over between calls.
        connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, force_close=True)
        timeout = aiohttp.ClientTimeout(total=self.timeout, sock_connect=self.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
            for _hop in range(self.max_redirects + 1):
                target = await self.guard.check(url)
                resolver.pin(target)
                try:
                    async with session.get(url, allow_redirects=False, headers=_HEADERS) as resp:
                        if resp.status in REDIRECT_STATUSES:
                            url = _redirect_target(url, resp)
                            if hop is not None:
                                hop(str(url))
                            continue
                        return await self._read(url, resp, target.internal)
                except aiohttp.ClientConnectionError as exc:
                    if isinstance(exc, TimeoutError):
                        raise
                    raise FetchError(f"could not connect to {url.host} ({exc})") from exc
                except aiohttp.ClientResponseError as exc:
                    raise FetchError(f"bad HTTP response from {url.host} ({exc.message})") from exc
        raise FetchError(
            f"{raw_url!r} redirected more than {self.max_redirects} times (last hop: {str(url)!r})"
        )

    async def _read(self, url: URL, resp: aiohttp.ClientResponse, internal: bool = False) -> str:
        if resp.status >= 400:
            raise FetchError(f"{str(url)!r} answered HTTP {resp.status} {resp.reason or ''}".rstrip())
        declared = resp.headers.get(aiohttp.hdrs.CONTENT_TYPE)
        content_type = resp.content_type if declared else ""
        if declared and not _is_text(content_type):
            size = resp.headers.get(aiohttp.hdrs.CONTENT_LENGTH)
            detail = f", {int(size):,} bytes" if size and size.isdigit() else ""
            raise FetchError(
                f"{str(url)!r} is {content_type}{detail}, not a text page; fetch_url reads HTML and text only"
            )
        body, truncated = await _read_capped(resp, self.max_bytes)
        if not declared and b"\x00" in body[:1024]:
            raise FetchError(f"{str(url)!r} looks like binary data, not a text page")
        text = body.decode(_charset(resp, body), errors="replace")
        title = ""
        if content_type in _HTML_TYPES or (not declared and "<html" in text[:1024].lower()):
            # Off the event loop: linear, but a 2 MB page still takes most of a second of CPU.
            title, text = await asyncio.to_thread(html_to_text, text, str(url))
        return render(url, title, text, truncated, self.max_bytes, internal)


_HEADERS = {
    "User-Agent": USER_AGENT,
    "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1",
}


def parse_url(raw: str) -> URL:
    """``raw`` as a URL, refusing what fetch_url never fetches (no scheme, too long, malformed)."""
    raw = raw.strip()
    if len(raw) > MAX_URL_CHARS:
        raise BlockedURLError(f"the URL is {len(raw)} characters long; the limit is {MAX_URL_CHARS}")
    if "://" not in raw:
        raise BlockedURLError(f"{raw!r} is not a full URL; send it with its scheme, e.g. https://{raw}")
    try:
        url = URL(raw)
    except ValueError as exc:
        raise BlockedURLError(f"{raw!r} is not a valid URL ({exc})") from exc
    return url.with_fragment(None)


#: Text kept of one page: far more than a model reads (the observation is shaped to AGENT_OBSERVATION_MAX_CHARS),
#: and small enough that redaction, shaping and the guard's checks stay a few milliseconds of CPU each.
MAX_TEXT_CHARS = 200_000


def render(url: URL, title: str, text: str, truncated: bool, max_bytes: int, internal: bool = False) -> str:
    """The observation: final URL, whether it is internal, title, a truncation note, then the text (at most
    ``MAX_TEXT_CHARS``)."""
    lines = [f"URL: {url}"]
    if internal:
        lines.append(INTERNAL_LINE)
    if title:
        lines.append(f"Title: {title}")
    if truncated:
        lines.append(f"(truncated: the page is larger than {max_bytes:,} bytes; only the start was read)")
    text = text.strip()
    if len(text) > MAX_TEXT_CHARS:
        lines.append(f"(cut: the page's text is {len(text):,} characters; only the first {MAX_TEXT_CHARS:,} are kept)")
        text = text[:MAX_TEXT_CHARS]
    return "\n".join(lines) + "\n\n" + text


def _redirect_target(url: URL, resp: aiohttp.ClientResponse) -> URL:
    location = resp.headers.get(aiohttp.hdrs.LOCATION)
    if not location:
        raise FetchError(f"{str(url)!r} answered HTTP {resp.status} without a Location header")
    try:
        return url.join(URL(location)).with_fragment(None)
    except ValueError as exc:
        raise BlockedURLError(f"{str(url)!r} redirected to a malformed URL {location!r}") from exc


def _is_text(content_type: str) -> bool:
    return (
        content_type.startswith("text/")
        or content_type in _HTML_TYPES
        or content_type in _TEXT_TYPES
        or content_type.endswith(("+json", "+xml"))
    )


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, bool]:
    """At most ``max_bytes`` of the body, and whether there was more."""
    chunks: list[bytes] = []
    total = 0
    async for chunk in resp.content.iter_chunked(_READ_CHUNK):
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def _charset(resp: aiohttp.ClientResponse, body: bytes) -> str:
    candidates = [resp.charset]
    match = _META_CHARSET.search(body[:4096])
    if match:
        candidates.append(match.group(1).decode("ascii", "replace"))
    for name in candidates:
        if not name:
            continue
        try:
            return codecs.lookup(name).name
        except LookupError:
            continue
    return "utf-8"
