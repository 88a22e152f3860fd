"""A supervisor's children are forked from its one import of the service: named by role in ``ps``, holding none of
the supervisor's own descriptors (its ``METRICS_PORT`` listener, the embedded Redis's lock), and the run's metrics
folder goes with the supervisor however its start ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.bot.serve.test_supervisor import ROOT, BotProcess, bot_env, gone, running  # noqa: F401  (a fixture)
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import free_port


def _fd_targets(pid: int) -> set[str]:
    folder = Path(f"/proc/{pid}/fd")
    found = set()
    for fd in folder.iterdir():
        try:
            found.add(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return found


def _listening_inode(port: int) -> str:
    """``socket:[inode]`` of the listener on 127.0.0.1:``port`` (from /proc/net/tcp)."""
    wanted = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == wanted and fields[3] == "0A":  # LISTEN
            return f"socket:[{fields[9]}]"
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_children_are_forked_named_by_role_and_hold_none_of_the_supervisors_descriptors(
    running: list[BotProcess], tmp_path: Path, key_prefix: str, fake_slack: FakeSlack,  # noqa: F811
    fake_openai: FakeOpenAI,
) -> None:
    metrics_port = free_port()
    env = bot_env(key_prefix, fake_slack, fake_openai, DATA_DIR=str(tmp_path / "data"), TMPDIR=str(tmp_path),
                  METRICS_PORT=str(metrics_port))
    del env["REDIS_URL"]  # single-machine mode: the supervisor holds the embedded Redis's lock
    bot = await BotProcess.start("--processes", "2", env=env, cwd=tmp_path)
    running.append(bot)
    children = {"web": await bot.started("web"), "worker": await bot.started("worker 1")}
    await bot.ready(children["web"], "listening on")
    await bot.ready(children["worker"], "worker health on")
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
        assert resp.status == 200  # the supervisor serves it, summing its children's files
    [metrics_dir] = tmp_path.glob("bot-metrics-*")

    lock = str((tmp_path / "data" / "redis" / "owner.lock").resolve())
    listener = _listening_inode(metrics_port)
    assert {lock, listener} <= _fd_targets(bot.process.pid)
    for role, pid in children.items():
        assert _parent(pid) == bot.process.pid
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").split()
        assert [part.decode() for part in command[-4:]] == ["bot", role, "--processes", "1"]
        assert not {lock, listener} & _fd_targets(pid), role

    assert await bot.stop() == 0
    assert all(gone(pid) for pid in children.values())
    assert not metrics_dir.exists()


def test_a_start_refused_on_a_setting_leaves_no_metrics_folder(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    # The folder is made before the service is imported (bot.serve.prefork), the settings read after it.
    env = bot_env(key_prefix, fake_slack, fake_openai, TMPDIR=str(tmp_path), OPENAI_MAX_RETRIES="many")
    done = subprocess.run([sys.executable, "-m", "bot", "worker", "--processes", "2"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: OPENAI_MAX_RETRIES:"), done.stderr
    assert not list(tmp_path.glob("bot-metrics-*"))


def test_the_entry_point_imports_no_prometheus_client_before_the_supervisor_sets_its_folder() -> None:
    # The supervisor reads its process count, then sets PROMETHEUS_MULTIPROC_DIR, which prometheus-client reads
    # once, when first imported: imported before, each child would count in memory, invisible to /metrics.
    script = ("import sys, bot.__main__\nfrom bot.serve.process_count import ProcessCount\nProcessCount()\n"
              "print('prometheus_client' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
