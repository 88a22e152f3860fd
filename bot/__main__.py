"""``python -m bot [all|web|worker] [--processes N]``: the Slack app (web), the agent workers, or both.

``--processes 1`` is one process doing everything its role says; more put a supervisor in front
(``bot/supervisor.py``). Without the flag, ``web`` runs one process, ``worker`` and ``all`` one worker per
core (``WORKER_PROCESSES``), ``all`` with one web process beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from pydantic import ValidationError

from agent_core import ConfigError
from bot import logs
from bot.service import Service, settle_gc
from bot.settings import Role, Settings
from bot.supervisor import processes_for, supervise
from bot.toolbox import mcp_secrets
from bot.worker import loop_factory

log = logging.getLogger("bot")


async def serve(role: Role, settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Service(settings, role):  # a bad setting: its one line, nothing logged before it
        log.info("%s process on the %s event loop", role, type(loop).__module__.split(".")[0])
        settle_gc()
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__)
    parser.add_argument("role", nargs="?", default="all", choices=["all", "web", "worker"],
                        help="web: Slack endpoint that enqueues; worker: runs agents; all (default): both")
    parser.add_argument("--processes", type=_count, metavar="N",
                        help="processes of the role under one supervisor (workers for `all`); 1: no supervisor")
    args = parser.parse_args(argv)
    try:
        settings = Settings()
        # The MCP config's ${VAR} values are secrets too; only the processes that start the servers read it.
        mcp = mcp_secrets(settings) if args.role != "web" else []
        logs.configure(settings.log_format, settings.log_level, [*settings.secrets(), *mcp])
        processes = args.processes or processes_for(args.role, settings)
        if processes > 1:
            return asyncio.run(supervise(args.role, processes, settings))
        with asyncio.Runner(loop_factory=loop_factory(args.role, settings)) as runner:
            runner.run(serve(args.role, settings))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first.get("loc") else "a setting"
        print(f"error: {name}: {first['msg']}", file=sys.stderr)
        return 2
    return 0


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


if __name__ == "__main__":
    sys.exit(main())
