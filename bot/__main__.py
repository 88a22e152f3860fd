"""``python -m bot [all|web|worker]``: the Slack app (web), the agent worker, or both in one process."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from pydantic import ValidationError

from agent_core.errors import ConfigError
from bot import logs
from bot.service import Service
from bot.settings import Role, Settings


async def serve(role: Role, settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Service(settings, role):
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__)
    parser.add_argument("role", nargs="?", default="all", choices=["all", "web", "worker"],
                        help="web: Slack endpoint that enqueues; worker: runs agents; all (default): both")
    args = parser.parse_args(argv)
    try:
        settings = Settings()
        logs.configure(settings.log_format, settings.log_level, settings.secrets())
        asyncio.run(serve(args.role, settings))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first.get("loc") else "a setting"
        print(f"error: {name}: {first['msg']}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
