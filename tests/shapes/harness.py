"""The service in the shapes operators deploy: real ``python -m bot ...`` process trees, driven as Slack drives them.

A :class:`Tree` is one command an operator types (``python -m bot``, ``python -m bot web``, ...), started in a
folder of its own with its settings in the environment or in a ``.env`` file there, and pinned to two CPU cores
(the default process count is one worker per core). ``LOG_FORMAT=json`` lets the harness see which process logged
what. :class:`SlackSide` is Slack itself: signed events and slash commands, and an admin's browser installing the
app. Slack's Web API and the LLM are the HTTP fakes of the test process::

    tree = Tree(["web"], folder, env=env)
    await tree.start()
    await tree.ready(web=1)
    slack = SlackSide(tree.url, SECRET)
    assert await slack.event(event_body(mention(ts=ts))) == 200
    await answer_in_thread(fake_slack, "C1", ts, "the answer")
    await tree.stop_cleanly()        # SIGTERM: exit code 0, and no process of the tree left
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest

from bot import audit
from tests.bot.oauth_helpers import install
from tests.fakes.slack_api import Call, FakeSlack
from tests.processes import START_TIMEOUT, BotProcess, free_port, until
from tests.signing import signed_headers

#: The host the suite acts out: the default process count of ``python -m bot`` is one worker per core.
CORES = 2
#: Start-up of a tree is several interpreters importing the service: long on a loaded 2-core machine.
READY_TIMEOUT = START_TIMEOUT
#: A run is one LLM call on the fake; this bounds a loaded machine, it is not a speed target.
ANSWER_TIMEOUT = 60.0
#: The supervisor drains its children within 25 s (``bot.serve.supervisor.DRAIN_SECONDS``), then exits.
STOP_TIMEOUT = 40.0
Record = dict[str, Any]
#: What a web process logs once it takes events: over HTTP, or over Socket Mode.
WEB_READY = ("listening on", "Socket Mode connected")


def two_cores() -> set[int]:
    """Two of the cores this process may use (the test is skipped on a one-core machine, which has no such host)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < CORES:
        pytest.skip(f"acting out a {CORES}-core host needs {CORES} cores, this machine gives {len(cores)}")
    return set(cores[:CORES])


def free_port_pair() -> int:
    """A free port whose next one is free too: PORT, and the workers' default WORKER_HEALTH_PORT (PORT + 1)."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and _bindable(port + 1):
            return port
    raise AssertionError("no two free ports in a row")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def env_file_from_example(example: Path, values: dict[str, str]) -> str:
    """``.env.example`` as an operator fills it in: each of ``values`` set on its line (uncommented), the rest
    as shipped. A value the example does not list fails the test: the example must list every setting."""
    lines, missing = [], dict(values)
    for line in example.read_text().splitlines():
        name = line.removeprefix("# ").split("=", 1)[0]
        if "=" in line and name in missing:
            line = f"{name}={missing.pop(name)}"
        lines.append(line)
    assert not missing, f".env.example does not list {sorted(missing)}"
    return "\n".join(lines) + "\n"


class Tree:
    """``python -m bot ARGV...`` started in ``folder``: settings from ``env`` and/or ``folder/.env``."""

    def __init__(self, argv: list[str], folder: Path, *, env: dict[str, str] | None = None,
                 env_file: str | None = None, name: str = "bot") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if env_file is not None:
            (folder / ".env").write_text(env_file)
        settings = dict(env or {})
        self.port = int(settings.get("PORT") or _from_env_file(env_file, "PORT") or 0)
        self.bot = BotProcess(argv[0] if argv else "all", settings, folder / f"{name}.log", argv=argv,
                              cpus=two_cores())
        self._seen: set[int] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.bot.process is not None
        return self.bot.process.pid

    def start(self) -> None:
        self.bot.start()

    def records(self) -> list[Record]:
        """Every JSON log line of every process of the tree so far (other lines, like ``error: ...``, skipped)."""
        found = []
        for line in self.bot.log().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append(record)
        return found

    def messages(self) -> list[str]:
        return [str(r.get("message", "")) for r in self.records()]

    async def ready(self, *, web: int = 0, workers: int = 0) -> None:
        """Until ``web`` processes listen and ``workers`` serve their health; fails at once on a restart."""

        async def up() -> bool:
            self.bot.check_alive()
            messages = self.messages()
            restarts = [m for m in messages if "restarting in" in m]
            assert not restarts, f"a process of `{self.bot.command}` died: {restarts[0]}\n{self.bot.log()[-4000:]}"
            return (sum(any(p in m for p in WEB_READY) for m in messages) >= web
                    and sum("worker health on" in m for m in messages) >= workers)

        await until(up, timeout=READY_TIMEOUT, what=f"`{self.bot.command}`: {web} web, {workers} worker process(es)")
        self._seen |= set(descendants(self.pid))

    def children(self) -> Counter[str]:
        """The roles of the processes the command started (``web``, ``worker``), counted."""
        return Counter(_role(pid) for pid in descendants(self.pid))

    async def stop_cleanly(self) -> None:
        """SIGTERM, as a platform stops a service: exit code 0, and no process of the tree left behind."""
        self._seen |= set(descendants(self.pid))
        code = await self.bot.stop(signal.SIGTERM, timeout=STOP_TIMEOUT)
        assert code == 0, f"`{self.bot.command}` exited with {code} on SIGTERM:\n{self.bot.log()[-4000:]}"
        left = [pid for pid in sorted(self._seen) if _running(pid)]
        assert not left, f"processes of `{self.bot.command}` left after it exited: {left}"

    def warnings(self) -> list[str]:
        """Warning and error lines every process logged (a clean start logs none), and any traceback a process
        wrote past its logger."""
        return [f"{r.get('logger')}: {r.get('message')}" for r in self.records()
                if r.get("level") in ("WARNING", "ERROR", "CRITICAL")] + [
            line for line in self.bot.log().splitlines() if line.startswith("Traceback")]

    async def exited(self, timeout: float = READY_TIMEOUT) -> tuple[int, list[str]]:
        """For a tree that must stop by itself (a refused setting): its exit code and every line it wrote."""
        process = self.bot.process
        assert process is not None
        code = await asyncio.to_thread(process.wait, timeout)
        return code, self.bot.log().splitlines()

    async def kill(self) -> None:
        """After a failed test: the tree goes (its children follow their parent's death)."""
        await self.bot.stop(signal.SIGKILL)


class SlackSide:
    """What Slack sends the app at ``url``: signed events and slash commands, and an admin installing it."""

    def __init__(self, url: str, secret: str) -> None:
        self.url = url
        self.secret = secret

    async def event(self, body: bytes) -> int:
        """An Events API request; the HTTP status of the ack."""
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{self.url}/slack/events", data=body,
                                 headers=signed_headers(self.secret, body)) as resp:
                return resp.status

    async def command(self, body: bytes) -> str:
        """A slash command; the ephemeral text it was answered with (the ack's body)."""
        headers = signed_headers(self.secret, body, content_type="application/x-www-form-urlencoded")
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{self.url}/slack/events", data=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                return str((await resp.json())["text"])

    async def install(self, code: str) -> None:
        """An admin adds the app: /slack/install, Slack's consent (``code``), /slack/oauth_redirect."""
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            status, page = await install(http, self.url, code)
        assert status == 200, page


async def answer_in_thread(slack: FakeSlack, channel: str, ts: str, words: str) -> list[Call]:
    """Until the bot's reply saying ``words`` is in thread ``ts`` of ``channel``; every post of that thread."""

    def in_thread(call: Call) -> bool:
        return call.params.get("channel") == channel and call.params.get("thread_ts") == ts

    await slack.wait_for("chat.postMessage", timeout=ANSWER_TIMEOUT,
                         predicate=lambda c: in_thread(c) and words in json.dumps(c.params))
    return [c for c in slack.calls_of("chat.postMessage") if in_thread(c)]


def audit_lines(lines: list[Record]) -> list[Record]:
    """The audit stream's lines among ``lines`` (a file's, or a tree's :meth:`Tree.records` for ``AUDIT_LOG=stdout``),
    each checked against its schema."""
    found = [x for x in lines if "event" in x and "v" in x]
    for line in found:
        jsonschema.validate(line, audit.SCHEMA)
    return found


def read_audit(path: Path) -> list[Record]:
    """The audit lines of the file ``AUDIT_LOG`` named."""
    return audit_lines([json.loads(x) for x in path.read_text().splitlines()])


def descendants(root: int) -> list[int]:
    """Every live process under ``root`` (children, their children, ...), from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                parents[int(entry)] = int(stat[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _stat(pid: int) -> list[str] | None:
    """State, parent pid, ... of ``pid`` (the fields after the command name), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _role(pid: int) -> str:
    """``web`` or ``worker`` for ``python -m bot ROLE ...``, else the program's name."""
    try:
        # A supervisor's child is forked and names itself (setproctitle): one string, its words apart by spaces.
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().replace("\0", " ").split()
    except OSError:
        return "gone"
    if "bot" in argv and argv.index("bot") + 1 < len(argv):
        return argv[argv.index("bot") + 1]
    return Path(argv[0]).name


def _from_env_file(text: str | None, name: str) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1]
    return None
