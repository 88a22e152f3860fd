"""A stdio MCP server's own children, in ``python -m bot worker`` as deployed (a supervisor, a worker per core): a
worker that is killed (the drain's SIGKILL, the OOM killer) takes each of its servers' whole process groups with it,
and a SIGTERM of the service ends every process of every group, not only the servers."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

from tests.bot.conftest import BOT_TOKEN
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import until
from tests.shapes.harness import Tree, _stat, descendants, free_port_pair
from tests.shapes.test_shapes import settings


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def server_groups(root: int, marker: str) -> set[int]:
    """The process groups of the stdio servers under ``root`` (each leads its own: pgid == pid)."""
    found = set()
    for pid in descendants(root):
        stat = _stat(pid)
        if stat is not None and int(stat[2]) == pid and marker in _cmdline(pid):
            found.add(pid)
    return found


def members(groups: set[int]) -> list[str]:
    """Every process of ``groups`` still there, running or a zombie, wherever it was re-parented."""
    left = []
    for entry in os.listdir("/proc"):
        stat = _stat(int(entry)) if entry.isdigit() else None
        if stat is not None and int(stat[2]) in groups:
            left.append(f"{entry} {stat[0]} {_cmdline(int(entry))}")
    return left


def workers(tree: Tree) -> list[int]:
    return [pid for pid in descendants(tree.pid) if _cmdline(pid).endswith("-m bot worker --processes 1 ")]


async def test_a_killed_worker_and_a_sigterm_of_the_service_end_each_stdio_servers_whole_group(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, trees: list[Tree],
) -> None:
    marker = f"9{random.randrange(10**6):06d}"  # this test's own sleep times: its processes, no other test's
    mcp = tmp_path / "mcp.json"
    # The server: not an MCP server at all, a shell whose two children share its group.
    mcp.write_text(json.dumps({"mcpServers": {"shell": {
        "command": "sh", "args": ["-c", f"sleep {marker}1 & sleep {marker}2; :"]}}}))
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_MCP_CONFIG": str(mcp)}
    tree = Tree(["worker"], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(workers=2)

    async def servers_up() -> bool:
        return len(server_groups(tree.pid, marker)) == 2

    await until(servers_up, timeout=30, what="each worker's stdio server")
    first, *_ = workers(tree)
    killed = server_groups(first, marker)
    assert len(killed) == 1 and len(members(killed)) == 3  # the shell and its two sleeps

    os.kill(first, signal.SIGKILL)  # as the drain's deadline or the OOM killer does

    async def gone() -> bool:
        return not members(killed)

    # Before: the dead worker's shell and sleeps ran on for good (the supervisor restarted the worker beside them).
    await until(gone, timeout=30, what="the killed worker's server group to end")

    async def restarted() -> bool:
        return len(server_groups(tree.pid, marker) - killed) == 2

    await until(restarted, timeout=60, what="the restarted worker's server")
    groups = server_groups(tree.pid, marker)
    await tree.stop_cleanly()
    assert members(groups) == []


async def test_the_children_a_server_leaves_when_it_exits_are_reaped_not_left_as_zombies(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, trees: list[Tree],
) -> None:
    marker = f"9{random.randrange(10**6):06d}"
    flag, mcp = tmp_path / "started-once", tmp_path / "mcp.json"
    # The first start leaves two children behind and exits (its worker ends them); later ones just wait.
    script = f'[ -e "{flag}" ] && exec sleep {marker}3; sleep {marker}1 & sleep {marker}2 & touch "{flag}"'
    mcp.write_text(json.dumps({"mcpServers": {"shell": {"command": "sh", "args": ["-c", script]}}}))
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_MCP_CONFIG": str(mcp)}
    tree = Tree(["worker"], tmp_path, env=env)
    trees.append(tree)
    tree.start()  # not `ready()`: a server restarting is what this test is about

    def left_behind() -> list[str]:
        """The first start's children still there: running, or zombies nobody reaped."""
        found = []
        for entry in os.listdir("/proc"):
            stat = _stat(int(entry)) if entry.isdigit() else None
            command = _cmdline(int(entry)) if stat is not None else ""
            if stat is not None and (f"{marker}1" in command or f"{marker}2" in command or stat[0] == "Z"
                                     and int(stat[1]) == tree.pid):
                found.append(f"{entry} {stat[0]} {command}")
        return found

    async def reaped() -> bool:
        return flag.exists() and not left_behind()

    # Their group is ended by the worker; as the supervisor adopts them (their parent exited), it must reap them.
    await until(reaped, timeout=60, what="the exited server's children to be ended and reaped")
    await tree.stop_cleanly()
