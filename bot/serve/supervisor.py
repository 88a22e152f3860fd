"""``--processes N``: one parent runs the role's processes, restarts any that dies, and drains them all on SIGTERM.

Each child is ``python -m bot <role> --processes 1`` (one process doing its role), forked from the parent with the
service already imported (``bot.serve.prefork``, ``bot.serve.forked``), with a few settings given in its
environment by the parent:

- ``worker --processes N``: N workers; ``web --processes N``: N receivers. They share their port (a worker's
  ``/healthz`` is on ``WORKER_HEALTH_PORT``, a receiver's on ``PORT``) through ``HTTP_REUSE_PORT``
  (SO_REUSEPORT: the kernel spreads connections over them), or each takes a free port when it is 0.
- ``python -m bot`` (single-machine mode): one web process on ``PORT`` and N workers sharing
  ``WORKER_HEALTH_PORT``. With ``REDIS_URL`` unset the parent starts the embedded Redis once and gives its URL
  to all.
- ``PROMETHEUS_MULTIPROC_DIR``: a fresh directory for the run, where every child's metrics are summed by
  whichever process answers ``/metrics``; removed on exit, or by the next start after a SIGKILL. A dead child's
  live gauges are removed from it. With ``METRICS_PORT`` the parent alone serves ``/metrics`` there (the children
  serve none), so nothing collides and a restart of a child does not interrupt scrapes.

Before any of that, the parent runs the start-up checks (``bot.serve.startup``) for every process it will start,
ports included, and waits for ``REDIS_URL`` to answer: a bad setting is one line and exit 2, not N children
failing in turn.

A child that dies is started again after a backoff (0.5 s, doubling to 30 s, back to 0.5 s once a child has
run a minute). One that exits with 2, the exit code of a bad setting, would fail the same way again: the
supervisor then stops all and exits 2. SIGTERM or SIGINT is passed on as SIGTERM; children get
``DRAIN_SECONDS`` to finish, then SIGKILL (arq runs a killed job again), and the parent exits 0. What a child
that died leaves behind (its stdio MCP servers and their children) is ended with it (``bot.serve.orphans``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.multiprocess import mark_process_dead

from bot.embedded_redis import EmbeddedRedis
from bot.metrics_settings import MULTIPROC_ENV
from bot.redis import require_answer
from bot.serve.forked import ForkedChild
from bot.serve.metrics_http import supervisor_metrics
from bot.serve.orphans import adopt_orphans, end_orphans
from bot.serve.prefork import ChildStart
from bot.serve.settings import ServeSettings
from bot.settings import Settings
from bot.settings_base import Role

log = logging.getLogger(__name__)

#: Platforms (Heroku, Kubernetes' default grace period) SIGKILL about 30 s after SIGTERM: drain within it.
DRAIN_SECONDS = 25.0
RESTART_FIRST_DELAY_SECONDS = 0.5
RESTART_MAX_DELAY_SECONDS = 30.0
#: A child that ran this long before dying was healthy: its next restart waits the first delay again.
STABLE_SECONDS = 60.0
#: How often processes re-parented to the supervisor (it is their subreaper) are ended and reaped.
ORPHAN_SWEEP_SECONDS = 5.0
#: What ``python -m bot`` exits with on a bad setting (``bot.__main__``).
CONFIG_ERROR_EXIT = 2


@dataclass(frozen=True)
class Child:
    """One process the supervisor keeps running."""

    name: str
    role: Role
    env: Mapping[str, str]


def plan(
    role: Role, processes: int, settings: ServeSettings, *, redis_url: str | None, metrics_dir: Path
) -> list[Child]:
    """The children of ``role`` with ``processes`` processes, and each one's environment."""
    base = {**os.environ, MULTIPROC_ENV: str(metrics_dir)}
    if redis_url:
        base["REDIS_URL"] = redis_url
    group: Role = "worker" if role == "all" else role
    shared = dict(base)
    if settings.listen_port(group)[1]:
        shared["HTTP_REUSE_PORT"] = "true"
    children = [Child(f"{group} {n}", group, shared) for n in range(1, processes + 1)]
    return [Child("web", "web", base), *children] if role == "all" else children


def child_title(role: Role) -> str:
    """What ``ps`` shows for a child: the command that would run it on its own."""
    return f"{sys.executable} -m bot {role} --processes 1"


class Supervisor:
    """``await Supervisor(children, metrics_dir).run()``: the exit code, once every child has stopped."""

    def __init__(self, children: list[Child], metrics_dir: Path, start: ChildStart, *,
                 drain_seconds: float = DRAIN_SECONDS, others: Iterable[int] = ()) -> None:
        self.children = children
        self.start = start
        self.metrics_dir = metrics_dir
        self.drain_seconds = drain_seconds
        self.exit_code = 0
        self._stop = asyncio.Event()
        self._running: dict[str, ForkedChild] = {}
        #: Children started outside the keepers (the embedded Redis): never taken for orphans.
        self._others = frozenset(others)
        #: Held while a child is started (until it is in ``_running``) and while orphans are ended, so a child
        #: being started is never taken for one.
        self._spawning = asyncio.Lock()

    async def run(self) -> int:
        adopt_orphans()  # what a killed child leaves behind (its MCP servers' groups) becomes ours to end
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        keepers = [asyncio.create_task(self._keep(child)) for child in self.children]
        sweeper = asyncio.create_task(self._sweep())
        await self._stop.wait()
        sweeper.cancel()
        await self._drain(keepers)
        return self.exit_code

    async def _sweep(self) -> None:
        """Now and then, end and reap what reached this process otherwise: the children an MCP server left when
        it exited become ours as it dies, and would stay zombies until the next child's exit."""
        while True:
            await asyncio.sleep(ORPHAN_SWEEP_SECONDS)
            await self._end_orphans()

    async def _keep(self, child: Child) -> None:
        """Run ``child`` until the supervisor stops: again after a backoff whenever it exits."""
        loop = asyncio.get_running_loop()
        delay = RESTART_FIRST_DELAY_SECONDS
        while not self._stop.is_set():
            async with self._spawning:
                process = ForkedChild.start(functools.partial(self.start.run, child.role), env=child.env,
                                            title=child_title(child.role), keep=self.start.fds)
                self._running[child.name] = process
            if self._stop.is_set():  # the drain began while this one was starting
                process.terminate()
            log.info("%s started (pid %s)", child.name, process.pid)
            started = loop.time()
            code = await process.wait()
            del self._running[child.name]
            mark_process_dead(process.pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
            await self._end_orphans()
            if self._stop.is_set():
                log.info("%s (pid %s) stopped with exit code %s", child.name, process.pid, code)
                return
            if code == CONFIG_ERROR_EXIT:
                log.error("%s (pid %s) exited on a bad setting (exit code 2): stopping every process",
                          child.name, process.pid)
                self.exit_code = CONFIG_ERROR_EXIT
                self._stop.set()
                return
            if loop.time() - started >= STABLE_SECONDS:
                delay = RESTART_FIRST_DELAY_SECONDS
            log.warning("%s (pid %s) exited with %s; restarting in %.1fs", child.name, process.pid, code, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)  # a backoff, cut short by a stop
            delay = min(delay * 2, RESTART_MAX_DELAY_SECONDS)

    async def _drain(self, keepers: list[asyncio.Task[None]]) -> None:
        """SIGTERM to every child; SIGKILL to those still running after ``drain_seconds``."""
        for process in list(self._running.values()):
            process.terminate()
        _, late = await asyncio.wait(keepers, timeout=self.drain_seconds)
        if late:
            for name, process in list(self._running.items()):
                log.warning("%s (pid %s) did not stop within %.0fs: killed", name, process.pid, self.drain_seconds)
                process.kill()
            await asyncio.wait(late)
        await self._end_orphans()

    async def _end_orphans(self) -> None:
        async with self._spawning:
            await end_orphans({*self._others, *(p.pid for p in self._running.values())})


async def supervise(role: Role, processes: int, settings: Settings, metrics_dir: Path, start: ChildStart) -> int:
    """Run ``role`` as ``processes`` supervised processes (plus the web one for ``all``), each forked to run
    ``start.run(role)``; the exit code. ``settings`` passed ``startup.check``; ``metrics_dir`` is the run's
    (``bot.serve.prefork.shared_metrics_dir``), removed by ``python -m bot`` once this returns."""
    # The settings passed startup.check before the preload; here a Redis that does not answer is one wait and one
    # line, not N children failing in turn.
    if not settings.embedded_redis:
        await require_answer(settings.redis_url or "", settings.redis_sentinel(), settings.redis_startup_wait_seconds)
    embedded: EmbeddedRedis | None = None
    try:
        redis_url = settings.redis_url
        if role == "all" and settings.embedded_redis:
            embedded = await EmbeddedRedis.start((settings.data_dir / "redis").resolve())
            redis_url = embedded.url
            log.warning("REDIS_URL is not set: single-machine mode, embedded Redis (Valkey) at %s with data in %s, "
                        "shared by the web process and %s workers", redis_url, embedded.folder, processes)
        children = plan(role, processes, settings, redis_url=redis_url, metrics_dir=metrics_dir)
        async with supervisor_metrics(settings, redis_url, metrics_dir):  # METRICS_PORT: this process serves it
            return await Supervisor(children, metrics_dir, start, others=[embedded.pid] if embedded else []).run()
    finally:
        if embedded is not None:
            await embedded.stop()  # after every child: none of them loses Redis while draining
