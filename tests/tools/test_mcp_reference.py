"""The reference MCP servers nobody here wrote, as real processes: ``mcp-server-fetch`` and ``mcp-server-git``
(pip, the ``dev`` extra), ``server-everything`` over stdio and Streamable HTTP and ``server-filesystem`` (npm,
installed once into a cache; skipped where node is absent)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.pages import PageServer
from tests.tools.mcp_helpers import call, connected, free_port
from tools import Outcome

PNG_HEADER = b"\x89PNG\r\n\x1a\n"
#: A bound on one call for a loaded machine, not a target.
CALL_BOUND_SECONDS = 90.0


async def test_fetch_server_reads_a_page_as_markdown(pages: PageServer) -> None:
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_fetch", "--ignore-robots-txt",
                                                  "--allow-private-ips"]}
    # The server turns the page into Markdown with readability (node, where installed): slow on a loaded machine.
    async with connected({"fetch": entry}, default_timeout=CALL_BOUND_SECONDS) as servers:
        result = await call(servers, "fetch__fetch", {"url": pages.url("/page")})
    assert result.outcome is Outcome.OK, result.text
    assert "Quarterly numbers" in result.text and "twelve" in result.text
    assert "do not show this script" not in result.text


async def test_git_server_reads_the_log_of_a_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "First light"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]}
    async with connected({"git": entry}) as servers:
        log = await call(servers, "git__git_log", {"repo_path": str(repo)})
    assert log.outcome is Outcome.OK, log.text
    assert "First light" in log.text


async def test_everything_over_stdio_echoes_shows_an_image_as_one_line_and_hides_task_only_tools(
    npm_bin: Path,
) -> None:
    entry = {"command": str(npm_bin / "mcp-server-everything"), "args": ["stdio"]}
    async with connected({"ev": entry}) as servers:
        names = {t.name for t in servers.tools()}
        echo = await call(servers, "ev__echo", {"message": "hello"})
        image = await call(servers, "ev__get-tiny-image", {})
    assert "ev__echo" in names and "ev__simulate-research-query" not in names  # taskSupport: required
    assert (echo.outcome, echo.text) == (Outcome.OK, "Echo: hello")
    assert image.outcome is Outcome.OK and "[image image/png," in image.full
    assert "iVBOR" not in image.full  # no base64 PNG anywhere in the result


@pytest.fixture
async def everything_http(npm_bin: Path) -> AsyncIterator[str]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        str(npm_bin / "mcp-server-everything"), "streamableHttp", env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(60):
            while b"listening on port" not in await proc.stderr.readline():
                pass
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        await proc.wait()


async def test_everything_over_streamable_http_adds_numbers(everything_http: str) -> None:
    async with connected({"ev": {"url": everything_http}}) as servers:
        result = await call(servers, "ev__get-sum", {"a": 2, "b": 40})
    assert result.outcome is Outcome.OK and "42" in result.text


async def test_filesystem_read_media_file_never_puts_the_image_bytes_in_the_observation(
    npm_bin: Path, tmp_path: Path
) -> None:
    picture = tmp_path / "photo.png"
    picture.write_bytes(PNG_HEADER + os.urandom(300_000))
    entry = {"command": str(npm_bin / "mcp-server-filesystem"), "args": [str(tmp_path)]}
    async with connected({"fs": entry}) as servers:
        result = await call(servers, "fs__read_media_file", {"path": str(picture)})
    assert result.outcome is Outcome.OK, result.text
    assert "[image image/png, 300,008 bytes, not shown]" in result.text
    assert len(result.full) < 500  # the whole result, as the trace keeps it (was 400,113 characters)
