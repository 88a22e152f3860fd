"""``python -m bot [all|web|worker] [--processes N]``: the Slack app (web), the agent workers, or both;
``python -m bot rekey``: the stored installations re-encrypted with the newest token key (``bot/oauth/rekey.py``);
``python -m bot eval [...]``: the golden set scored per model (``evalkit/cli.py``; ``python -m bot eval --help``).

``--processes 1`` is one process doing everything its role says; more put a supervisor in front
(``bot/serve/supervisor.py``). Without the flag, ``web`` runs one process, ``worker`` and ``all`` one worker per
core (``WORKER_PROCESSES``), ``all`` with one web process beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import shutil
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pydantic import ValidationError

from agent_core import ConfigError
from bot.serve.prefork import preload, shared_metrics_dir
from bot.serve.process_count import ProcessCount, processes_for
from bot.settings_base import Role

if TYPE_CHECKING:
    from bot.settings import Settings

log = logging.getLogger("bot")


async def serve(role: Role, settings: Settings) -> None:
    from bot.serve.service import Service, settle_gc

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    service = Service(settings, role)
    if not await _unless_stopped(service.__aenter__(), stop):
        log.info("stopped during start-up")
        return
    try:
        # Logged once started: a bad setting's one line comes with nothing before it.
        log.info("%s process on the %s event loop", role, type(loop).__module__.split(".")[0])
        settle_gc()
        await stop.wait()
    finally:
        await service.close()


async def _unless_stopped(start: Awaitable[object], stop: asyncio.Event) -> bool:
    """Await ``start`` unless ``stop`` is set first, then cancel it: True when it finished.

    Start-up can wait long (Redis, Slack's Socket Mode); a SIGTERM meanwhile must end it, not wait behind it.
    """
    starting = asyncio.ensure_future(start)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()  # the service closes what it had started
            await asyncio.gather(starting, return_exceptions=True)
    if starting.cancelled():
        return False
    starting.result()  # a start-up error
    return True


def main(argv: list[str] | None = None) -> int:
    args_given = sys.argv[1:] if argv is None else argv
    if args_given[:1] == ["eval"]:
        return _eval(args_given[1:])
    parser = argparse.ArgumentParser(prog="python -m bot", description=__doc__)
    parser.add_argument("role", nargs="?", default="all", choices=["all", "web", "worker", "rekey"],
                        help="web: Slack endpoint that enqueues; worker: runs agents; all (default): both; "
                             "rekey: re-encrypt the stored installations with the newest key, then exit")
    parser.add_argument("--processes", type=_count, metavar="N",
                        help="processes of the role under one supervisor (workers for `all`); 1: no supervisor")
    args = parser.parse_args(argv)
    try:
        # A supervisor's count comes first, read alone: its metrics folder must be set before the service (and
        # prometheus-client under it) is imported, and its children are forked with that import done.
        processes = 1 if args.role == "rekey" else args.processes or processes_for(args.role, ProcessCount())
        metrics_dir = shared_metrics_dir() if processes > 1 else None
        try:
            return _run(args.role, processes, metrics_dir)
        finally:
            if metrics_dir is not None:  # the supervisor's run is over, or its start-up failed
                shutil.rmtree(metrics_dir, ignore_errors=True)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first.get("loc") else "a setting"
        print(f"error: {name}: {first['msg']}", file=sys.stderr)
        return 2


def _run(role: str, processes: int, metrics_dir: Path | None) -> int:
    """``role`` as one process, or (``metrics_dir`` given) as a supervisor of ``processes``; the exit code."""
    from bot import audit, logs, telemetry
    from bot.runs.toolbox import mcp_secrets
    from bot.settings import Settings

    settings = Settings()
    if role == "rekey":
        from bot.oauth import rekey

        logs.configure(settings.log_format, settings.log_level, settings.secrets())
        return rekey.main(settings)
    serving = cast(Role, role)
    # The MCP config's ${VAR} values are secrets too; only the processes that start the servers read it.
    mcp = mcp_secrets(settings) if serving != "web" else []
    logs.configure(settings.log_format, settings.log_level, [*settings.secrets(), *mcp])
    audit.configure(settings.audit_log)
    if metrics_dir is not None:
        from bot.serve import startup
        from bot.serve.supervisor import supervise

        startup.check(settings, serving, supervisor=True)  # a bad setting stops here, not in every child
        start = preload(serving, settings.openai_model, settings.openai_tokenizer, _child)
        return asyncio.run(supervise(serving, processes, settings, metrics_dir, start))
    from bot.queue.worker import loop_factory

    # Traces, when the settings ask for them, are set up here: in each process, the supervisor's children too.
    with telemetry.tracing(settings, serving):
        with asyncio.Runner(loop_factory=loop_factory(serving, settings)) as runner:
            runner.run(serve(serving, settings))
    return 0


def _child(role: Role) -> int:
    """A supervisor's child, forked: ``python -m bot <role> --processes 1``."""
    return main([role, "--processes", "1"])


def _eval(argv: list[str]) -> int:
    """The evaluation harness lives beside the package (it drives the service through the tests' fakes), so it is
    found only in a checkout; imported by name so the service never loads it."""
    try:
        cli = importlib.import_module("evalkit.cli")
    except ImportError as exc:
        print(f"error: `python -m bot eval` runs from a checkout of the project with the dev and evals extras "
              f"(pip install -e '.[dev,evals]'): {exc}", file=sys.stderr)
        return 2
    run: Callable[[list[str]], int] = cli.main
    return run(argv)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


if __name__ == "__main__":
    sys.exit(main())
