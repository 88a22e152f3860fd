"""``/healthz``'s Redis check: does Redis take a write, answered within a second whatever state Redis is in.

A PING says nothing of writes: with ``maxmemory`` and ``noeviction`` Redis answers PING while refusing every
write (events got 500s while ``/healthz`` said 200), and a paused Redis held each check, and the health answer, for
as long as it was paused. So the probe writes one small key with a short expiry (``AppKeys.health_probe``) on a
client of its own that gives up after ``PROBE_TIMEOUT_SECONDS``, and remembers the answer for
``PROBE_EVERY_SECONDS``: however often a load balancer asks, a process writes at most once a second, and
concurrent checks share the one probe in flight.
"""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError, ResponseError

#: The longest a probe may take: a check within it, the health answer within a second.
PROBE_TIMEOUT_SECONDS = 0.5
#: How long one probe's answer stands; so each process writes the probe key at most this often.
PROBE_EVERY_SECONDS = 1.0
#: The probe key's life: long enough to outlive the next probe, short enough to leave nothing behind.
PROBE_KEY_TTL_MS = 10_000


class RedisProbe:
    """Whether Redis takes a write (``problem()``: empty when it does), at most once per ``every`` seconds."""

    def __init__(
        self, client: aioredis.Redis, key: str, *, timeout: float = PROBE_TIMEOUT_SECONDS,
        every: float = PROBE_EVERY_SECONDS,
    ) -> None:
        self._client = client
        self._key = key
        self._timeout = timeout
        self._every = every
        self._answer = ""
        self._asked = float("-inf")
        self._probe: asyncio.Task[str] | None = None

    async def problem(self) -> str:
        """Why Redis cannot be written right now, or "" (the last answer when it is under a second old)."""
        if time.monotonic() - self._asked < self._every:
            return self._answer
        if self._probe is None:
            self._probe = asyncio.create_task(self._ask())
            self._probe.add_done_callback(self._answered)
        # Shielded: a health request that gives up does not cancel the probe the others wait on.
        return await asyncio.shield(self._probe)

    def _answered(self, probe: asyncio.Task[str]) -> None:
        self._probe = None
        if not probe.cancelled():
            self._answer, self._asked = probe.result(), time.monotonic()

    async def _ask(self) -> str:
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.set(self._key, b"1", px=PROBE_KEY_TTL_MS)
        except TimeoutError:
            return f"redis did not answer a write within {self._timeout:.1f}s"
        except OutOfMemoryError:
            return "redis refuses writes: out of memory (maxmemory reached)"
        except ReadOnlyError:
            return "redis refuses writes: it is a read-only replica"
        except ResponseError as exc:
            return f"redis refuses writes: {_first_line(exc)}"
        except (RedisError, OSError) as exc:
            return f"redis is not answering ({_first_line(exc)})"
        except Exception as exc:  # the probe's answer is all anyone reads of it: a surprise is a 503, not a 500
            return f"the redis check failed ({type(exc).__name__}: {_first_line(exc)})"
        return ""


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]
