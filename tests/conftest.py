"""Shared fixtures: a clean environment, a real Redis namespaced per test, and the HTTP fakes."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

#: Tests share the session's Redis but never FLUSH it: every key a test writes starts with its own prefix.
TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/9")

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
    client = aioredis.Redis.from_url(TEST_REDIS_URL, decode_responses=False)
    try:
        await client.ping()
    except Exception as exc:  # pragma: no cover - environment problem, not a test failure mode
        pytest.fail(f"Redis is not answering at {TEST_REDIS_URL}: {exc}")
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
