"""A local page server for fetch_url tests: real HTTP on 127.0.0.1, port chosen by the OS.

Routes:

* ``/page`` — an HTML article (title, script, style, a link, a list)
* ``/big?size=N`` — an HTML page of about N bytes
* ``/text``, ``/json`` — plain text and JSON
* ``/binary`` — ``image/png`` bytes; ``/untyped-binary`` — bytes with no Content-Type
* ``/redirect?to=URL[&status=302]`` — a redirect to any URL (another port, another host…)
* ``/chain/N`` — N redirects, then ``/page``
* ``/slow`` — answers only when the server closes (for timeouts; nothing sleeps)
* ``/status/CODE`` — an empty answer with that status
* ``/search?q=…&format=json`` — a SearXNG answer: one result naming the query
* ``/doc/NAME`` — the plain text the test put in ``docs[NAME]`` (a runbook, a page handing out the next URL)

Every request is recorded in ``requests`` as (path, headers).
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from aiohttp import web
from multidict import CIMultiDictProxy

ARTICLE = """<!doctype html>
<html><head><title>The Fake Article</title>
<style>body { color: red; }</style>
<script>var secret = "do not show this script";</script>
</head>
<body>
<nav><a href="/">Home</a></nav>
<h1>Quarterly numbers</h1>
<p>Revenue grew by <b>twelve</b> percent &amp; costs fell.</p>
<p>Read the <a href="/details">details page</a> for more.</p>
<ul><li>First point</li><li>Second point</li></ul>
<noscript>Enable JavaScript</noscript>
</body></html>
"""

PNG_BYTES = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


#: Repeating units of pathological pages: unclosed tags, deep nesting, attribute floods, open comments.
HOSTILE = {
    "unclosed": "<a", "nested": "<div>", "attributes": "<p a=1 b=2 c=3 ", "links": "<a href='/x'>",
    "comment": "<!--<a", "entities": "&amp;&#x41;&lt;",
}


class PageServer:
    """``async with PageServer() as pages: pages.url("/page")``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, CIMultiDictProxy[str]]] = []
        self.docs: dict[str, str] = {}
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def host_port(self) -> str:
        """``127.0.0.1:<port>``, as FETCH_URL_ALLOWED_HOSTS spells it."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """Absolute URL of ``path`` on this server."""
        return f"http://{self.host_port}{path}"

    async def __aenter__(self) -> PageServer:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/page", self._page)
        app.router.add_get("/big", self._big)
        app.router.add_get("/hostile/{shape}", self._hostile)
        app.router.add_get("/text", self._text)
        app.router.add_get("/json", self._json)
        app.router.add_get("/binary", self._binary)
        app.router.add_get("/untyped-binary", self._untyped_binary)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/chain/{n}", self._chain)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/status/{code}", self._status)
        app.router.add_get("/doc/{name}", self._doc)
        app.router.add_get("/search", self._search)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release.set()  # let /slow handlers finish so shutdown does not wait on them
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: web.RequestHandler) -> web.StreamResponse:
        self.requests.append((request.path_qs, request.headers))
        return await handler(request)

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=ARTICLE, content_type="text/html", charset="utf-8")

    async def _big(self, request: web.Request) -> web.Response:
        size = int(request.query.get("size", "100000"))
        paragraph = "<p>" + "filler words about nothing in particular " * 10 + "</p>\n"
        body = "<html><head><title>Big</title></head><body>"
        body += paragraph * (size // len(paragraph) + 1)
        return web.Response(text=body + "</body></html>", content_type="text/html")

    async def _hostile(self, request: web.Request) -> web.Response:
        """2 MB pages of the shapes that make HTML parsers quadratic."""
        size = int(request.query.get("size", "2000000"))
        unit = HOSTILE[request.match_info["shape"]]
        return web.Response(text=(unit * (size // len(unit) + 1))[:size], content_type="text/html")

    async def _search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "")
        return web.json_response({"results": [
            {"title": f"About {query}", "url": f"http://127.0.0.1:{self.port}/page", "content": f"All on {query}."},
        ]})

    async def _doc(self, request: web.Request) -> web.Response:
        text = self.docs.get(request.match_info["name"])
        if text is None:
            return web.Response(status=404)
        return web.Response(text=text, content_type="text/plain")

    async def _text(self, request: web.Request) -> web.Response:
        return web.Response(text="just plain text\nsecond line", content_type="text/plain")

    async def _json(self, request: web.Request) -> web.Response:
        return web.json_response({"answer": 42})

    async def _binary(self, request: web.Request) -> web.Response:
        return web.Response(body=PNG_BYTES, content_type="image/png")

    async def _untyped_binary(self, request: web.Request) -> web.Response:
        response = web.Response(body=b"\x00\x01\x02" * 100)
        response.headers.popall("Content-Type", None)
        response.content_type = ""  # aiohttp adds application/octet-stream otherwise
        return response

    async def _redirect(self, request: web.Request) -> web.Response:
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": request.query["to"]})

    async def _chain(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        target = f"/chain/{n - 1}" if n > 0 else "/page"
        return web.Response(status=302, headers={"Location": target})

    async def _slow(self, request: web.Request) -> web.Response:
        await self._release.wait()
        return web.Response(text="too late", content_type="text/plain")

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="nope")
