"""Shared fixtures: a clean environment, a real Redis namespaced per test, and the HTTP fakes.

The session's Redis is the one at ``TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/9``). When nothing
answers there, the run starts the embedded Valkey the package ships (``bot.embedded_redis``, as single-machine
mode does) on a free port and stops it at the end, so the README's test command needs no Redis installed.
``from tests.conftest import TEST_REDIS_URL`` gives whichever is in use: the name is resolved on first use
(module ``__getattr__``), which may come before ``pytest_configure`` when pytest is given one test file.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from bot.embedded_redis import EmbeddedRedis

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"
#: How long the configured Redis gets to answer before the embedded one is started instead.
REDIS_PROBE_SECONDS = 1.0

_redis_url: str | None = None
_embedded: EmbeddedRedis | None = None
#: The temporary directory made for it (removed at the end, with nothing else).
_embedded_dir: Path | None = None


def session_redis_url() -> str:
    """The session's Redis: ``TEST_REDIS_URL`` when it answers, else an embedded Valkey started now (once).

    Tests share it but never FLUSH it: every key a test writes starts with its own prefix.
    """
    global _redis_url, _embedded, _embedded_dir
    if _redis_url is None:
        wanted = os.environ.get("TEST_REDIS_URL") or DEFAULT_TEST_REDIS_URL
        if _answers(wanted):
            _redis_url = wanted
        else:
            _embedded_dir = Path(tempfile.mkdtemp(prefix="test-redis-"))
            _embedded = asyncio.run(EmbeddedRedis.start(_embedded_dir / "valkey"))
            _redis_url = f"redis://127.0.0.1:{_embedded.port}/9"
            print(f"nothing answers at {wanted}: tests use an embedded Valkey at {_redis_url}", file=sys.stderr)
    return _redis_url


def _answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=REDIS_PROBE_SECONDS, socket_timeout=REDIS_PROBE_SECONDS)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def __getattr__(name: str) -> str:
    if name == "TEST_REDIS_URL":
        return session_redis_url()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_report_header() -> str:
    url = session_redis_url()
    return f"redis: {url}" + (" (embedded Valkey, stopped at the end)" if _embedded is not None else "")


def pytest_unconfigure() -> None:
    global _embedded, _embedded_dir
    if _embedded is not None:
        asyncio.run(_embedded.stop())
        _embedded = None
    if _embedded_dir is not None:
        shutil.rmtree(_embedded_dir, ignore_errors=True)
        _embedded_dir = None


_KEEP_ENV = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "TEST_REDIS_URL", "CI"}


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with no settings from the developer's shell (no real keys, no real URLs)."""
    for name in list(os.environ):
        if name not in _KEEP_ENV and not name.startswith(("PYTEST_", "PYENV")):
            monkeypatch.delenv(name, raising=False)
    yield


@pytest.fixture
def key_prefix() -> str:
    """A prefix unique to this test, for every Redis key it writes."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis_client(key_prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A real Redis connection; keys under this test's prefix are deleted afterwards."""
    url = session_redis_url()
    client = aioredis.Redis.from_url(url, decode_responses=False)
    try:
        await client.ping()
    except Exception as exc:  # pragma: no cover - environment problem, not a test failure mode
        pytest.fail(f"Redis is not answering at {url}: {exc}")
    yield client
    async for key in client.scan_iter(match=f"*{key_prefix}*", count=500):
        await client.delete(key)
    await client.aclose()


# The fake OpenAI server. Imported here rather than at the top because this block was appended to the shared
# fixtures above (append-only for each fake's owner).
from tests.fakes.openai_server import FakeOpenAI, ensure_loopback_url  # noqa: E402


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """A fake Chat Completions server on 127.0.0.1 and a random port: ``AsyncOpenAI(base_url=fake.base_url)``.

    Closing it re-raises any exception the test's ``script`` raised, so a broken script fails the test.
    """
    fake = FakeOpenAI()
    await fake.start()
    try:
        ensure_loopback_url(fake.base_url)
        yield fake
    finally:
        await fake.close()
