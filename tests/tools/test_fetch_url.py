"""fetch_url over real HTTP on 127.0.0.1 (tests/fakes/pages.py): allow-list, redirects, caps, types."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tests.fakes.pages import PageServer
from tests.tools.conftest import make_settings
from tools import Executor, Outcome, Registry, ToolContext, ToolResult, builtin_registry
from tools.builtins.fetch_url import INTERNAL_LINE, make_fetch_url
from tools.ssrf import IPAddress


async def fetch(url: str, ctx: ToolContext, resolve: Any = None, **settings: Any) -> ToolResult:
    config = make_settings(**settings)
    tool = make_fetch_url(config, resolve=resolve) if resolve else builtin_registry(config).get("fetch_url")
    assert tool is not None
    executor = Executor(Registry([tool]), observation_max_chars=100_000)
    return await executor.execute(executor.prepare("fetch_url", {"url": url}, call_id="c1"), ctx)


async def test_allowed_local_page_is_fetched_as_text(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(pages.url("/page"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert result.outcome is Outcome.OK, result.text
    text = result.text
    # A FETCH_URL_ALLOWED_HOSTS page is internal: the header says so (it arms the exfiltration guard).
    assert text.startswith(f"URL: {pages.url('/page')}\n{INTERNAL_LINE}\nTitle: The Fake Article\n")
    assert "# Quarterly numbers" in text
    assert "Revenue grew by twelve percent & costs fell." in text
    assert f"[details page]({pages.url('/details')})" in text
    assert "- First point" in text and "- Second point" in text
    for hidden in ("do not show this script", "color: red", "Enable JavaScript"):
        assert hidden not in text
    ((path, headers),) = pages.requests
    assert path == "/page" and headers["Host"] == pages.host_port and "slack-agent" in headers["User-Agent"]


async def test_same_url_without_the_allow_list_is_refused_before_connecting(
    pages: PageServer, ctx: ToolContext
) -> None:
    result = await fetch(pages.url("/page"), ctx)
    assert result.outcome is Outcome.ERROR
    assert "BlockedURLError" in result.text and "loopback" in result.text
    assert "FETCH_URL_ALLOWED_HOSTS" in result.text
    assert pages.requests == []


async def test_allow_list_is_per_port(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(pages.url("/page"), ctx, fetch_url_allowed_hosts=f"127.0.0.1:{pages.port + 1}")
    assert result.outcome is Outcome.ERROR and pages.requests == []


async def test_redirect_to_a_port_not_allowed_is_refused(pages: PageServer, ctx: ToolContext) -> None:
    async with PageServer() as other:
        target = other.url("/page")
        result = await fetch(
            pages.url(f"/redirect?to={target}"), ctx, fetch_url_allowed_hosts=pages.host_port
        )
        assert result.outcome is Outcome.ERROR
        assert "BlockedURLError" in result.text and target in result.text
        assert other.requests == []  # never connected to the second server
    assert [p for p, _ in pages.requests] == [f"/redirect?to={target}"]


async def test_redirect_to_metadata_and_other_schemes_is_refused(pages: PageServer, ctx: ToolContext) -> None:
    allowed = pages.host_port
    for target, why in [
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://[::ffff:169.254.169.254]/", "cloud metadata"),
        ("http://0x7f.1/", "loopback"),
        ("file:///etc/passwd", "only http and https"),
    ]:
        result = await fetch(
            pages.url(f"/redirect?to={target}&status=301"), ctx, fetch_url_allowed_hosts=allowed
        )
        assert result.outcome is Outcome.ERROR, target
        assert why in result.text, result.text


async def test_redirects_within_allowed_hosts_are_followed(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(pages.url("/chain/3"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert result.outcome is Outcome.OK
    assert result.text.startswith(f"URL: {pages.url('/page')}\n")
    assert [p for p, _ in pages.requests] == ["/chain/3", "/chain/2", "/chain/1", "/chain/0", "/page"]


async def test_too_many_redirects(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(
        pages.url("/chain/10"), ctx, fetch_url_allowed_hosts=pages.host_port, fetch_url_max_redirects=2
    )
    assert result.outcome is Outcome.ERROR and "redirected more than 2 times" in result.text
    assert len(pages.requests) == 3


async def test_big_pages_are_truncated_and_say_so(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(
        pages.url("/big?size=300000"),
        ctx,
        fetch_url_allowed_hosts=pages.host_port,
        fetch_url_max_bytes=20_000,
    )
    assert result.outcome is Outcome.OK
    assert "(truncated: the page is larger than 20,000 bytes; only the start was read)" in result.text
    assert len(result.full) < 25_000


async def test_slow_page_times_out(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(
        pages.url("/slow"), ctx, fetch_url_allowed_hosts=pages.host_port, fetch_url_timeout_seconds=0.2
    )
    assert result.outcome is Outcome.TIMEOUT
    assert result.text == "fetch_url timed out after 0.2s"


async def test_binary_content_gets_a_clear_message(pages: PageServer, ctx: ToolContext) -> None:
    typed = await fetch(pages.url("/binary"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert typed.outcome is Outcome.ERROR
    assert "is image/png, 1,032 bytes, not a text page" in typed.text
    untyped = await fetch(pages.url("/untyped-binary"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert untyped.outcome is Outcome.ERROR and "binary data" in untyped.text


async def test_plain_text_and_json(pages: PageServer, ctx: ToolContext) -> None:
    text = await fetch(pages.url("/text"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert text.text.endswith("\n\njust plain text\nsecond line")
    data = await fetch(pages.url("/json"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert data.text.endswith('{"answer": 42}')


async def test_http_errors_name_the_status(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(pages.url("/status/404"), ctx, fetch_url_allowed_hosts=pages.host_port)
    assert result.outcome is Outcome.ERROR and "HTTP 404 Not Found" in result.text


async def test_urls_without_scheme_get_a_suggestion(ctx: ToolContext) -> None:
    result = await fetch("example.com/page", ctx)
    assert result.outcome is Outcome.ERROR and "https://example.com/page" in result.text


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
    ],
)
async def test_metadata_and_spelled_loopback_are_refused_without_network(url: str, ctx: ToolContext) -> None:
    async def no_dns(host: str, port: int) -> list[IPAddress]:
        raise AssertionError("no DNS for literals")

    result = await fetch(url, ctx, resolve=no_dns)
    assert result.outcome is Outcome.ERROR and "BlockedURLError" in result.text


async def test_the_connection_goes_to_the_checked_address(pages: PageServer, ctx: ToolContext) -> None:
    # docs.internal exists in no DNS: the page can only be reached through the address the guard
    # checked and pinned, which proves the connection does not resolve the name again.
    async def internal_dns(host: str, port: int) -> list[IPAddress]:
        assert host == "docs.internal"
        return [ipaddress.ip_address("127.0.0.1")]

    url = f"http://docs.internal:{pages.port}/page"
    result = await fetch(
        url, ctx, resolve=internal_dns, fetch_url_allowed_hosts=f"docs.internal:{pages.port}"
    )
    assert result.outcome is Outcome.OK, result.text
    assert "Quarterly numbers" in result.text
    assert pages.requests[0][1]["Host"] == f"docs.internal:{pages.port}"


async def test_spelled_out_address_on_the_allow_list_connects(pages: PageServer, ctx: ToolContext) -> None:
    result = await fetch(f"http://0x7f.1:{pages.port}/text", ctx, fetch_url_allowed_hosts=pages.host_port)
    assert result.outcome is Outcome.OK and "just plain text" in result.text
