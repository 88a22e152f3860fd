"""Shared fixtures: a clean environment, a real Redis namespaced per test, and the HTTP fakes.

The session's Redis is one of its own: the embedded Valkey the package ships (``bot.embedded_redis``, as
single-machine mode does), started on a free port in a temporary directory and stopped and removed at the end, so the
README's test command needs no Redis and never writes into one of the developer's. ``TEST_REDIS_URL`` names a server
to use instead (``embedded``, or unset: the embedded one); a named server that does not answer stops the run, naming
it. Under pytest-xdist each worker process resolves its own: worker ``gwN`` takes database number base + N of the
named server, or its own embedded Valkey.
``from tests.conftest import TEST_REDIS_URL`` gives whichever is in use: the name is resolved on first use
(module ``__getattr__``), which may come before ``pytest_configure`` when pytest is given one test file.

Every key a test writes carries its ``key_prefix``, deleted when the test ends; a key of this run's still in Redis
at the end of the session fails it (``no_keys_left``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio as aioredis

from bot.embedded_redis import EmbeddedRedis

#: ``TEST_REDIS_URL=embedded`` (or unset): the embedded Valkey.
EMBEDDED = "embedded"
#: How long a named Redis gets to answer.
REDIS_PROBE_SECONDS = 2.0

#: The `processes` marker and its guard.
pytest_plugins = ["tests.process_tests", "tests.ordering"]

_redis_url: str | None = None
_embedded: EmbeddedRedis | None = None
#: The temporary directory made for it (removed at the end, with nothing else).
_embedded_dir: Path | None = None


def session_redis_url() -> str:
    """The session's Redis: the server ``TEST_REDIS_URL`` names, else an embedded Valkey started now (once).

    Tests share it but never FLUSH it: every key a test writes starts with its own prefix.
    """
    global _redis_url, _embedded, _embedded_dir
    if _redis_url is None:
        wanted = os.environ.get("TEST_REDIS_URL") or EMBEDDED
        if wanted != EMBEDDED:
            if not _answers(wanted):
                raise pytest.UsageError(
                    f"TEST_REDIS_URL={wanted}: no Redis answers there (unset it: the tests start their own)")
            _redis_url = _worker_database(wanted)
        else:
            from tests.process_tests import starting_own_process  # the plugin, imported by pytest by now

            _embedded_dir = Path(tempfile.mkdtemp(prefix="test-redis-"))
            with starting_own_process():
                _embedded = asyncio.run(EmbeddedRedis.start(_embedded_dir / "valkey"))
            _redis_url = f"redis://127.0.0.1:{_embedded.port}/9"
        _keys_before.update(_keys(_redis_url))
    return _redis_url


def _worker_database(url: str) -> str:
    """``url`` itself, or under xdist worker ``gwN`` its database number + N, so workers never share keys.

    Past the server's last database the numbers wrap round to the configured one (workers then share a database,
    which prefixed keys keep safe).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    client = redis.Redis.from_url(url, socket_timeout=REDIS_PROBE_SECONDS)
    try:
        count = int(client.config_get("databases").get("databases", 16))
    except redis.RedisError:  # CONFIG refused (a managed server): Redis's default
        count = 16
    finally:
        client.close()
    number = base + int(worker[2:]) % max(count - base, 1)
    return parts._replace(path=f"/{number}").geturl()


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


def pytest_report_header(config: pytest.Config) -> str:
    if getattr(config.option, "numprocesses", None):  # xdist's controller runs no test: each worker has its own
        return "redis: one per xdist worker (an embedded Valkey each, or TEST_REDIS_URL's database + N)"
    url = session_redis_url()
    return f"redis: {url}" + (" (embedded Valkey, stopped at the end)" if _embedded is not None else "")


#: The run's own temporary directory: TMPDIR of every test and of every process a test starts (a killed
#: ``python -m bot`` leaves its metrics folder behind, a killed MCP server its files), removed when the run ends.
_run_tmp: Path | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    global _run_tmp
    if hasattr(config, "workerinput"):
        return  # an xdist worker: it inherited the controller's TMPDIR
    _run_tmp = Path(tempfile.mkdtemp(prefix="sat-"))  # short: a test's Unix socket path must stay under 100 bytes
    os.environ["TMPDIR"] = str(_run_tmp)
    tempfile.tempdir = str(_run_tmp)  # gettempdir() caches its answer
    if config.option.basetemp is None:
        # tmp_path in it too, without pytest's pytest-of-<user>/pytest-<n> levels (paths as short as before).
        config.option.basetemp = str(_run_tmp / "t")
    # Compiled once, read by every later run: with PYTHONDONTWRITEBYTECODE (the image's setting) each of the four
    # workers rewrote the asserts of every test module again at collection, about 4 CPU-seconds a worker. The
    # bytecode goes to the usual, ignored __pycache__ folders, where the processes tests start (their environment
    # is clean_environ's) already write theirs.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def pytest_unconfigure() -> None:
    global _embedded, _embedded_dir, _run_tmp
    if _embedded is not None:
        asyncio.run(_embedded.stop())
        _embedded = None
    if _embedded_dir is not None:
        shutil.rmtree(_embedded_dir, ignore_errors=True)
        _embedded_dir = None
    if _run_tmp is not None:
        tempfile.tempdir = None
        shutil.rmtree(_run_tmp, ignore_errors=True)
        _run_tmp = None


_KEEP_ENV = {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "TEST_REDIS_URL", "CI"}


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with no settings from the developer's shell (no real keys, no real URLs)."""
    for name in list(os.environ):
        if name not in _KEEP_ENV and not name.startswith(("PYTEST_", "PYENV")):
            monkeypatch.delenv(name, raising=False)
    yield


#: What ``key_prefix`` gives: ``t`` and 12 hex digits, found again in any key that carries it.
_PREFIX = re.compile(rb"t[0-9a-f]{12}")
#: The prefixes given to this process's tests, and the keys the session's Redis held when it was resolved.
_given: set[bytes] = set()
_keys_before: set[bytes] = set()


def _keys(url: str, match: str | None = None) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter(match=match, count=1000))
    finally:
        client.close()


@pytest.fixture
def key_prefix() -> Iterator[str]:
    """A prefix unique to this test, for every Redis key it writes; its keys are deleted when the test ends."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    _given.add(prefix.encode())
    yield prefix
    if _redis_url is not None:
        left = _keys(_redis_url, f"*{prefix}*")
        if left:
            client = redis.Redis.from_url(_redis_url)
            try:
                client.delete(*left)
            finally:
                client.close()


@pytest.fixture(scope="session", autouse=True)
def no_keys_left() -> Iterator[None]:
    """Fails the session when a key this run wrote is still in Redis: one of its prefixes, or a key in none.

    Keys of another run on the same server (another test prefix) and those there before this run are not its own.
    """
    yield
    if _redis_url is None:
        return
    left = []
    for key in _keys(_redis_url):
        prefixes = set(_PREFIX.findall(key))
        if key not in _keys_before and (prefixes & _given or not prefixes):
            left.append(key)
    if left:
        pytest.fail(f"{len(left)} Redis key(s) left in {_redis_url} by this run's tests, e.g. {sorted(left)[:10]}: "
                    "write every key under the test's key_prefix, or delete it", pytrace=False)


@pytest.fixture
async def redis_client(key_prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A real Redis connection; keys under this test's prefix are deleted afterwards (by ``key_prefix``)."""
    url = session_redis_url()
    client = aioredis.Redis.from_url(url, decode_responses=False)
    try:
        await client.ping()
    except Exception as exc:  # pragma: no cover - environment problem, not a test failure mode
        pytest.fail(f"Redis is not answering at {url}: {exc}")
    yield client
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
