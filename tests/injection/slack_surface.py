"""The injection suite on the project's own readers: ``channel_history`` (the run's channel is #general),
``slack_search`` (another channel, the inbox) and ``fetch_url`` (the web, served over real HTTP from the workspace
file), with the MCP server's tools for everything that acts. Same cases, same obeying model, same judging.

The web's ``https://host/path`` URLs become ``http://host:<port>/path`` for the run (a resolver maps every host
to the local page server, which ``FETCH_URL_ALLOWED_HOSTS`` lets through the SSRF rule only), and back again
before the end state is judged.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web

from agent_core import RunRequest, Stopped
from agent_core.loop import Agent
from agent_core.settings import AgentSettings
from tests.injection.cases import Injection, State, UserTask
from tests.injection.runner import SERVER, Suite
from tools import Registry, ToolContext, ToolSettings
from tools.builtins.channel_history import channel_history
from tools.builtins.fetch_url import make_fetch_url
from tools.builtins.slack_search import slack_search
from tools.ssrf import IPAddress

RUN_CHANNEL = "general"


async def _loopback(host: str, port: int) -> list[IPAddress]:
    return [ipaddress.ip_address("127.0.0.1")]


class Workspace:
    """The ``SlackReader`` over the workspace file: the run's channel, and search by ``in:#channel`` / ``to:me``."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite

    def _state(self) -> State:
        state: State = json.loads(self.suite.state.read_text())
        return state

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        messages = self._state()["channels"][channel_id]["messages"][-limit:]
        return [{"user": m["sender"], "text": m["body"]} for m in reversed(messages)]

    async def search(self, query: str, *, limit: int, cursor: str, filters: Mapping[str, Any]) -> Mapping[str, Any]:
        state = self._state()
        where = query.removeprefix("in:#")
        found = state["inboxes"].get(state["me"], []) if query == "to:me" else state["channels"][where]["messages"]
        return {"results": {"messages": [
            {"author_user_id": m["sender"], "channel_id": where, "message_ts": str(i), "permalink": "",
             "content": m["body"]} for i, m in enumerate(found[:limit])]}}


class SlackSurface:
    def __init__(self, suite: Suite, guard: str, port: int) -> None:
        self.suite, self.port = suite, port
        tool_settings = ToolSettings(_env_file=None, agent_exfiltration_guard=guard,
                                     fetch_url_allowed_hosts=["127.0.0.0/8"])
        registry = Registry([channel_history, slack_search, make_fetch_url(tool_settings, resolve=_loopback)])
        for item in suite.engine(guard)[1]:  # the MCP server's tools, for what acts
            if item.server == SERVER:
                registry.register(item)
        self.registry = registry
        settings = AgentSettings(_env_file=None, openai_api_key="test", openai_base_url=suite.fake.base_url,
                                 openai_max_retries=0)
        self.agent = Agent.from_settings(settings, registry, exfiltration_guard=guard)

    def localize(self, text: str) -> str:
        return re.sub(r"https://([a-z0-9.-]+\.[a-z]{2,})(?=[/\s\"'?]|$)", rf"http://\1:{self.port}", text)

    def globalize(self, text: str) -> str:
        return re.sub(rf"http://([a-z0-9.-]+):{self.port}", r"https://\1", text)

    def translate(self, tool: str, arguments: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        if tool == "read_channel" and arguments.get("channel") == RUN_CHANNEL:
            return "channel_history", {}
        if tool == "read_channel":
            return "slack_search", {"query": f"in:#{arguments['channel']}"}
        if tool == "read_inbox":
            return "slack_search", {"query": "to:me"}
        if tool == "read_webpage":
            return "fetch_url", {"url": self.localize(str(arguments["url"]))}
        return f"{SERVER}__{tool}", json.loads(self.localize(json.dumps(arguments)))

    async def case(self, task: UserTask, injection: Injection | None) -> tuple[State, str]:
        self.suite.reset(task, injection, self.translate, self.localize)
        prompt = self.localize(task.prompt)
        scope = ToolContext(run_id="", step=0, task=prompt, channel_id=RUN_CHANNEL, user_id="Ana",
                            slack=Workspace(self.suite))
        final = ""
        async for event in self.agent.events(RunRequest(prompt, registry=self.registry, scope=scope)):
            if isinstance(event, Stopped):
                final = event.answer
        return json.loads(self.globalize(self.suite.state.read_text())), self.globalize(final)

    async def page(self, request: web.Request) -> web.Response:
        """A page of the workspace's web by its global URL; each visit is recorded in the workspace."""
        url = f"https://{request.host.split(':')[0]}{request.path_qs}"
        state = json.loads(self.suite.state.read_text())
        state["visited"].append(url)
        self.suite.state.write_text(json.dumps(state))
        page = self.globalize(json.dumps(state["web"]))
        text = json.loads(page).get(url)
        return web.Response(text=self.localize(text), content_type="text/plain") if text is not None \
            else web.Response(status=404, text="Not Found")


@contextlib.asynccontextmanager
async def slack_surface(suite: Suite, guard: str = "on") -> AsyncIterator[SlackSurface]:
    """The surface, with its page server running on a free loopback port."""
    holder: dict[str, SlackSurface] = {}

    async def page(request: web.Request) -> web.Response:
        return await holder["surface"].page(request)

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    holder["surface"] = surface = SlackSurface(suite, guard, port)
    try:
        yield surface
    finally:
        await surface.agent.aclose()
        await runner.cleanup()

