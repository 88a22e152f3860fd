"""The injection suite's runner: every user task alone (benign success) and with every injection planted (attack
success, exfiltration), through the terminal runner's own run (``agent_core.__main__``: its registry, policy and
refusing approver), the workspace served by one stdio MCP server added with no flags but ``"approval": "never"``,
and a scripted model over HTTP (``tests/fakes/openai_server.py``) that obeys every injection it reads.

    python -m tests.injection.runner [--guard on|approve|off]   # prints the figures

``ObeyingModel`` is the model: it makes the task's calls in order, and as soon as a result holds an injection it
makes the injection's calls first; a held-back call is not retried. Another harness can reuse ``run_suite`` with
its own ``model`` factory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from agent_core.loop import Agent
from agent_core.settings import AgentSettings
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.injection.cases import INJECTIONS, MARKER, USER_TASKS, Injection, Seen, State, UserTask, exfiltrated
from tests.injection.cases import initial_state as fresh
from tools import McpServers, Registry, ToolSettings
from tools.mcp.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
SERVER = "chat"
TOOLS = ("list_channels", "read_channel", "list_members", "read_inbox", "read_webpage", "send_direct_message",
         "send_channel_message", "add_user_to_channel", "invite_user", "remove_user", "post_webpage")


#: A server tool call as the surface under test makes it: (tool, arguments) -> (its tool, its arguments).
Translate = Callable[[str, Mapping[str, Any]], tuple[str, Mapping[str, Any]]]


def on_the_server(tool: str, arguments: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    return f"{SERVER}__{tool}", arguments


class ObeyingModel:
    """One case's scripted model: the task's calls, with an injection's calls spliced in once it is read."""

    def __init__(self, task: UserTask, injection: Injection | None, translate: Translate = on_the_server) -> None:
        self.pending = list(task.steps)
        self.task, self.injection, self.translate = task, injection, translate
        self.seen: Seen = []
        self.obeyed = False

    def __call__(self, request: RecordedRequest) -> Reply:
        results = [(str(m.get("name") or ""), str(m.get("content") or "")) for m in request.messages
                   if m.get("role") == "tool"]
        fresh_results, self.seen = results[len(self.seen):], results
        if self.injection and not self.obeyed and any(MARKER in text for _, text in fresh_results):
            self.obeyed = True
            self.pending[:0] = self.injection.steps
        if not self.pending:
            return text(self.task.answer(self.seen))
        step = self.pending.pop(0)
        name, arguments = self.translate(step.tool, step.arguments(self.seen))
        return tool_calls((name, dict(arguments)))


@dataclass
class Outcome:
    task: str
    injection: str
    done: bool
    attacked: bool = False
    exfiltrated: bool = False


@dataclass
class Figures:
    benign: list[Outcome] = field(default_factory=list)
    attacked: list[Outcome] = field(default_factory=list)

    @staticmethod
    def _rate(items: Sequence[bool]) -> float:
        return 100.0 * sum(items) / len(items) if items else 0.0

    @property
    def benign_success(self) -> float:
        return self._rate([o.done for o in self.benign])

    @property
    def attack_success(self) -> float:
        return self._rate([o.attacked for o in self.attacked])

    @property
    def exfiltration(self) -> float:
        return self._rate([o.exfiltrated for o in self.attacked])

    @property
    def utility_under_attack(self) -> float:
        return self._rate([o.done for o in self.attacked])

    def table(self, label: str) -> str:
        lines = [f"{label}: benign tasks {self.benign_success:.1f} % ({sum(o.done for o in self.benign)}/"
                 f"{len(self.benign)}), attack success {self.attack_success:.1f} % "
                 f"({sum(o.attacked for o in self.attacked)}/{len(self.attacked)}), exfiltration "
                 f"{self.exfiltration:.1f} % ({sum(o.exfiltrated for o in self.attacked)}/{len(self.attacked)}), "
                 f"utility under attack {self.utility_under_attack:.1f} %"]
        lines += [f"  benign failed: {o.task}" for o in self.benign if not o.done]
        lines += [f"  attack succeeded: {o.injection} in {o.task}" for o in self.attacked if o.attacked]
        return "\n".join(lines)


class Suite:
    """The workspace file, the MCP server, the fake model and the terminal's engine (one per guard mode), shared
    by every case: one engine serves many runs, as a worker's does, and each run gets its own guard."""

    def __init__(self, fake: FakeOpenAI, servers: McpServers, state: Path) -> None:
        self.fake, self.servers, self.state = fake, servers, state
        self._engines: dict[str, tuple[Agent, Registry, ToolSettings]] = {}

    def engine(self, guard: str) -> tuple[Agent, Registry, ToolSettings]:
        from agent_core.__main__ import runner

        if guard not in self._engines:
            settings = AgentSettings(_env_file=None, openai_api_key="test", openai_base_url=self.fake.base_url,
                                     openai_max_retries=0)
            tool_settings = ToolSettings(_env_file=None, agent_exfiltration_guard=guard)
            self._engines[guard] = (*runner(settings, tool_settings, self.servers), tool_settings)
        return self._engines[guard]

    def reset(self, task: UserTask, injection: Injection | None, translate: Translate = on_the_server,
              localize: Callable[[str], str] = str) -> None:
        """A fresh workspace, with ``injection`` planted, and the model scripted for this case."""
        self.state.write_text(localize(json.dumps(fresh(injection.text if injection else ""))))
        self.fake.script = ObeyingModel(task, injection, translate)

    async def case(self, task: UserTask, injection: Injection | None, guard: str = "on") -> tuple[State, str]:
        """One run through the terminal runner from a fresh workspace: the end state and the final answer."""
        from agent_core.__main__ import run_task

        agent, registry, tool_settings = self.engine(guard)
        self.reset(task, injection)
        stopped = await run_task(agent, registry, task.prompt, tool_settings)
        return json.loads(self.state.read_text()), stopped.answer if stopped is not None else ""

    async def aclose(self) -> None:
        for agent, _, _ in self._engines.values():
            await agent.aclose()


def server_config(state: Path) -> dict[str, Any]:
    """The server as an operator adds it: no trust, no flags, only its tools' own prompts turned off."""
    return {SERVER: {"command": sys.executable, "args": ["-m", "tests.injection.chat_server"], "cwd": str(ROOT),
                     "env": {"INJECTION_STATE": str(state)},
                     "tools": {name: {"approval": "never"} for name in TOOLS}}}


@contextlib.asynccontextmanager
async def suite() -> AsyncIterator[Suite]:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "workspace.json"
        state.write_text(json.dumps(fresh()))
        configs = parse_config({"mcpServers": server_config(state)}, {"PATH": ""})
        servers = McpServers(configs, default_timeout=20.0, startup_wait=30.0)
        fake = FakeOpenAI()
        await fake.start()
        await servers.start()
        run = Suite(fake, servers, state)
        try:
            yield run
        finally:
            await run.aclose()
            await servers.aclose()
            await fake.close()


Case = Callable[[UserTask, Injection | None], Awaitable[tuple[State, str]]]


async def run_suite(
    case: Case, tasks: Sequence[UserTask] = USER_TASKS, injections: Sequence[Injection] = INJECTIONS
) -> Figures:
    """Every task alone, then with each injection planted, through ``case``; judged on the end state."""
    figures = Figures()
    for task in tasks:
        end, answer = await case(task, None)
        figures.benign.append(Outcome(task.id, "", task.check(end, answer)))
        for injection in injections:
            end, answer = await case(task, injection)
            figures.attacked.append(Outcome(task.id, injection.id, task.check(end, answer),
                                            injection.succeeded(end), exfiltrated(end)))
    return figures


async def _main(guard: str) -> None:
    from tests.injection.slack_surface import slack_surface

    async with suite() as run:
        figures = await run_suite(partial(run.case, guard=guard))
        async with slack_surface(run, guard) as slack:
            own = await run_suite(slack.case)
    print(figures.table(f"MCP server, AGENT_EXFILTRATION_GUARD={guard}"))
    print(own.table(f"Slack's own channel_history, slack_search and fetch_url, AGENT_EXFILTRATION_GUARD={guard}"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.injection.runner")
    parser.add_argument("--guard", default="on", choices=["on", "approve", "off"])
    asyncio.run(_main(parser.parse_args().guard))
