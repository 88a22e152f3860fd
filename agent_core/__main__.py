"""`python -m agent_core "task"`: one agent run in the terminal, printing every step as it happens."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from pydantic import ValidationError

from agent_core.attachments import Attachment
from agent_core.cost import format_usd
from agent_core.errors import ConfigError
from agent_core.events import Event, FinalAnswer, Observed, RunStarted, Stopped, StopReason, Thought, ToolCalled
from agent_core.loop import Agent
from agent_core.request import RunRequest
from agent_core.settings import AgentSettings
from agent_core.terminal_approver import TerminalApprover
from tools import McpConfigError, McpServers, Registry, ToolSettings

#: Observations are shortened to this many characters on screen (the model sees the shaped result).
SCREEN_OBSERVATION_CHARS = 600
#: ``--file`` reads at most this much in all (the Slack side's per-run default, AGENT_FILES_MAX_BYTES_PER_RUN).
FILES_MAX_BYTES = 50 * 1024 * 1024


class Screen:
    """Prints the events of a run; the terminal is just another consumer of the event stream.

    A step's thought waits for the step's next event: with native tool calling, the reply that ends a run is its
    thought and its answer at once (``Thought`` then ``FinalAnswer``, the same text), shown once, as the answer.
    """

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._thought: Thought | None = None

    def show(self, event: Event) -> None:
        if isinstance(event, FinalAnswer) and self._thought is not None and self._thought.step == event.step \
                and (self._thought.text or "").strip() == event.text.strip():
            self._thought = None  # the answer itself: printed with the stop
        self._flush()
        match event:
            case Thought():
                self._thought = event
            case RunStarted(tools=tools):
                self._print(f"▶ run started — tools: {', '.join(tools) or 'none'}")
            case ToolCalled(tool=tool, arguments=arguments):
                self._print(f"    → {tool} {json.dumps(arguments, ensure_ascii=False)}")
            case Observed(outcome=outcome, text=text, full_chars=full):
                short = text if len(text) <= SCREEN_OBSERVATION_CHARS else text[:SCREEN_OBSERVATION_CHARS] + " …"
                self._print(f"    ← [{outcome}, {full:,} chars] {short}")
            case Stopped(reason=reason, answer=answer, steps=steps, usage=usage, detail=detail):
                self._print(f"\n{answer}\n")
                self._print(
                    f"■ stopped: {reason.value} ({detail}) — {steps} steps, {usage.total_tokens:,} tokens "
                    f"({usage.prompt_tokens:,} prompt, {usage.cached_tokens:,} cached, {usage.completion_tokens:,} "
                    f"completion), {format_usd(usage.cost_micros)}{' (estimate)' if usage.estimated else ''}"
                )
            case _:
                pass  # FinalAnswer: printed with the stop, which carries it; streamed text: each step is printed whole

    def _flush(self) -> None:
        if self._thought is not None:
            step, text = self._thought.step, self._thought.text
            self._print(f"\n[{step}] thought: {text if text is not None else '(the model gave no reason)'}")
            self._thought = None

    def _print(self, line: str) -> None:
        print(line, file=self.out)


def attachments(paths: Sequence[str]) -> tuple[Attachment, ...]:
    """``--file`` paths as the run's files, their types sniffed from their bytes; ValueError says what is wrong."""
    if not paths:
        return ()
    from tools import sniff

    files: dict[str, Attachment] = {}
    total = 0
    for raw in paths:
        path = pathlib.Path(raw)
        if not path.is_file():
            raise ValueError(f"--file {raw}: no such file")
        total += path.stat().st_size
        if total > FILES_MAX_BYTES:
            raise ValueError(f"--file: the files come to more than {FILES_MAX_BYTES // (1024 * 1024)} MB")
        name = path.name
        while name in files:  # names are unique within a run: read_file finds a file by its name
            name = f"{path.stem}-{len(files)}{path.suffix}"
        data = path.read_bytes()
        files[name] = Attachment(name, sniff(data, path.name), data)
    return tuple(files.values())


async def _main(task: str, files: tuple[Attachment, ...] = ()) -> int:
    # SIGTERM ends the run like Ctrl-C, through the finally below: the stdio MCP servers end with it.
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    settings = AgentSettings()
    tool_settings = ToolSettings()
    # One run, so a server that is slow to start (a loaded machine) cannot join later: wait for it as long as a call.
    timeout = tool_settings.agent_tool_timeout_seconds
    servers = McpServers.from_config(
        tool_settings.agent_mcp_config, os.environ, default_timeout=timeout, startup_wait=max(timeout, 5.0)
    )
    await servers.start()
    try:
        final = await _run(task, settings, tool_settings, servers, files)
    finally:
        await servers.aclose()  # stdio servers are child processes: never leave them behind
    if final is not None and final.reason is StopReason.ERROR:
        print(final.detail, file=sys.stderr)
        return 1
    return 0


async def _run(
    task: str, settings: AgentSettings, tool_settings: ToolSettings, servers: McpServers,
    files: tuple[Attachment, ...] = (),
) -> Stopped | None:
    agent, registry = runner(settings, tool_settings, servers)
    try:
        return await run_task(agent, registry, task, tool_settings, files, sys.stdout)
    finally:
        await agent.aclose()


def runner(settings: AgentSettings, tool_settings: ToolSettings, servers: McpServers) -> tuple[Agent, Registry]:
    """The terminal's engine and its tools (built-ins and every MCP server's), for one run or many."""
    from tools import builtin_registry, limit_readers

    limit_readers(tool_settings.agent_file_readers)
    registry = servers.registry(builtin_registry(tool_settings))
    agent = Agent.from_settings(
        settings, registry, secrets=[*tool_settings.secrets(), *servers.secrets()],
        observation_max_chars=tool_settings.agent_observation_max_chars,
        tool_timeouts=tool_settings.agent_tool_timeouts,
        exfiltration_guard=tool_settings.agent_exfiltration_guard,
    )
    return agent, registry


async def run_task(
    agent: Agent, registry: Registry, task: str, tool_settings: ToolSettings, files: tuple[Attachment, ...] = (),
    out: TextIO | None = None,
) -> Stopped | None:
    """One task through ``agent``, as the terminal runs it: its tool policy, and an approver that asks on the
    terminal when stdin is one (else every question is refused); events printed to ``out``."""
    from tools import ToolContext, ToolPolicy, run_registry

    run_tools = run_registry(
        ToolPolicy(tool_settings.agent_tools or None).enabled(registry),
        task=task, environment="terminal", limit=tool_settings.agent_tools_per_run, has_files=bool(files),
    )
    scope = ToolContext(run_id="", step=0, task=task, approver=TerminalApprover()) if sys.stdin.isatty() else None
    final: Stopped | None = None
    screen = Screen(out) if out is not None else None
    async for event in agent.events(RunRequest(task, registry=run_tools, attachments=files, scope=scope)):
        if screen is not None:
            screen.show(event)
            screen.out.flush()
        if isinstance(event, Stopped):
            final = event
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent_core", description="Run one agent task in the terminal.")
    parser.add_argument("task", help="what the agent should do")
    parser.add_argument("--file", action="append", default=[], metavar="PATH",
                        help="a file given with the task (an image, text, PDF, DOCX, audio); repeatable")
    args = parser.parse_args(argv)
    try:
        files = attachments(args.file)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    try:
        return asyncio.run(_main(args.task, files))
    except (ConfigError, McpConfigError) as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]).upper() if first["loc"] else "a setting"
        print(f"configuration error: {name}: {first['msg']}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:  # SIGTERM
        return 128 + signal.SIGTERM


if __name__ == "__main__":
    sys.exit(main())
