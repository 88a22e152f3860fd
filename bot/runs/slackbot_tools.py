"""Our tools inside Slackbot: the MCP server (the SDK's low-level ``Server``) whose tools are a workspace's own.

Slackbot lists and calls them over ``/mcp`` (``bot.serve.slackbot_mcp`` verifies Slack's signature first). Each
request is answered as the person ``_meta.slack`` names (``bot.runs.slackbot_caller``): the tools are those the
deployment enabled and the workspace turned on (``/agent-limits tools``), minus the built-ins that only work inside
a thread with the agent (:data:`THREAD_TOOLS`) and the tools that need an approval before each call (there is no
thread to ask in). A call runs through the tools' ``Executor`` (validation, the exfiltration guard with the
workspace's host lists, redaction, the timeout) and is audited with ids only::

    face = SlackbotTools(gate, toolbox=lambda: runtime.toolbox, settings=settings)
    manager = StreamableHTTPSessionManager(face.server(), stateless=True, json_response=True)

The guard remembers, per person, what their Slackbot calls read for :data:`GUARD_MEMORY_SECONDS`: a private read
through one call holds back a later call that would send data out, as it would within one run.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from bot import audit
from bot.runs.slackbot_caller import NO_IDENTITY, Caller, CallerGate, CallerRefusal, Reason, caller_of
from bot.runs.start import RunPlan
from bot.runs.toolbox import Toolbox
from bot.workspace.settings import ToolChoice
from tools import EgressPolicy, Executor, Registry, ToolContext, ToolResult, ToolSettings

#: Built-ins that read or write the thread a run answers in (its history, its files, its asker's search token, a
#: schedule proposed there): without a thread they have nothing to work on.
THREAD_TOOLS = frozenset({"channel_history", "attach_file", "slack_search", "read_file", "schedule_run"})
#: How long one person's guard remembers what their Slackbot calls read (a Slackbot conversation's span).
GUARD_MEMORY_SECONDS = 30 * 60
#: People whose guard is remembered at once in this process (the oldest is forgotten first).
GUARD_MEMORY_PEOPLE = 1000
SERVER_NAME = "agent"
INVALID_REQUEST = -32600

UNKNOWN_TOOL = "No tool of that name is available to Slackbot in this workspace."
THREAD_ONLY = "`{tool}` works only in a thread with the agent: mention the agent in a channel and ask there."
NEEDS_APPROVAL = (
    "`{tool}` needs an approval before each call, which can only be given in a thread with the agent: "
    "mention the agent and ask there."
)


class SlackbotTools:
    """The two handlers of the MCP server Slackbot talks to, and the guard each person's calls share."""

    def __init__(self, gate: CallerGate, *, toolbox: Callable[[], Toolbox], settings: ToolSettings) -> None:
        self._gate = gate
        self._toolbox = toolbox
        self._settings = settings
        self._secrets = [*settings.secrets(), *toolbox().secrets()]
        self._executors: OrderedDict[tuple[str, str], tuple[float, Executor]] = OrderedDict()

    def server(self) -> Server[Any]:
        """The SDK server answering ``tools/list`` and ``tools/call``."""
        return Server(SERVER_NAME, on_list_tools=self.list_tools, on_call_tool=self.call_tool)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """The person's workspace's tools; without ``_meta.slack``, the deployment's (no workspace narrows them)."""
        caller = caller_of(ctx.meta)
        choice = ToolChoice()
        if caller is not None:
            plan = await self._gate.admit(caller, call=False)
            if isinstance(plan, CallerRefusal):
                _audit_refusal(caller, "", plan.reason)
                raise MCPError(INVALID_REQUEST, plan.message)
            choice = plan.tools
        return types.ListToolsResult(tools=[_listed(schema, self._offered(choice))
                                            for schema in self._offered(choice).schemas()])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """One call, as the person ``_meta.slack`` names; a refusal is a result with ``is_error`` and the reason."""
        caller = caller_of(ctx.meta or params.meta)
        if caller is None:
            return _error(NO_IDENTITY)
        plan = await self._gate.admit(caller, call=True)
        if isinstance(plan, CallerRefusal):
            return self._refused(caller, params.name, plan.reason, plan.message)
        offered = self._offered(plan.tools)
        if params.name not in offered:
            reason, message = self._why_not(params.name, plan.tools)
            return self._refused(caller, params.name, reason, message)
        executor = self._executor(caller, offered)
        call_id = f"sbmcp-{secrets.token_hex(6)}"
        call = executor.prepare(params.name, dict(params.arguments or {}), call_id=call_id)
        ctx_ = ToolContext(run_id=call_id, step=1, team_id=caller.workspace.team_id, user_id=caller.user_id,
                           egress=_egress(plan))
        result = await executor.execute(call, ctx_)
        ws = caller.workspace
        audit.emit("slackbot_mcp.called", team=ws.team_id, enterprise=ws.enterprise_id, user=caller.user_id,
                   call_id=call_id, tool=params.name, outcome=result.outcome.value)
        return _result(result)

    def _offered(self, choice: ToolChoice) -> Registry:
        enabled = self._toolbox().enabled()
        return enabled.select(t.name for t in enabled
                              if choice.is_on(t.name) and t.name not in THREAD_TOOLS and not t.needs_approval)

    def _why_not(self, name: str, choice: ToolChoice) -> tuple[Reason, str]:
        tool = self._toolbox().enabled().get(name)
        if tool is None or not choice.is_on(name):
            return "unknown_tool", UNKNOWN_TOOL
        if name in THREAD_TOOLS:
            return "thread_only", THREAD_ONLY.format(tool=name)
        return "needs_approval", NEEDS_APPROVAL.format(tool=name)

    def _refused(self, caller: Caller, name: str, reason: Reason, message: str) -> types.CallToolResult:
        known = name if self._toolbox().enabled().get(name) is not None else "unknown"  # never a made-up name
        _audit_refusal(caller, known, reason)
        return _error(message)

    def _executor(self, caller: Caller, offered: Registry) -> Executor:
        """The person's executor (and so their guard) while they keep calling; a new one past the memory span
        or when their workspace's tools changed."""
        key = (caller.workspace.team_id + "/" + caller.workspace.enterprise_id, caller.user_id)
        now = time.monotonic()
        kept = self._executors.pop(key, None)
        if kept is None or kept[0] < now or kept[1].registry.names() != offered.names():
            s = self._settings
            kept = (0.0, Executor(offered, observation_max_chars=s.agent_observation_max_chars,
                                  timeouts=s.agent_tool_timeouts, secrets=self._secrets,
                                  exfiltration_guard=s.agent_exfiltration_guard))
        self._executors[key] = (now + GUARD_MEMORY_SECONDS, kept[1])
        while len(self._executors) > GUARD_MEMORY_PEOPLE:
            self._executors.popitem(last=False)
        return kept[1]


def _listed(schema: dict[str, Any], offered: Registry) -> types.Tool:
    function = schema["function"]
    tool = offered.get(function["name"])
    assert tool is not None
    writes = tool.consequential or tool.dangerous
    hints = types.ToolAnnotations(read_only_hint=not writes, destructive_hint=writes if writes else None,
                                  open_world_hint=tool.outbound or tool.server is not None)
    return types.Tool(name=tool.name, description=tool.description, input_schema=function["parameters"],
                      annotations=hints)


def _egress(plan: RunPlan) -> EgressPolicy:
    return EgressPolicy(allowed_domains=plan.domains.allowed, denied_domains=plan.domains.denied)


def _result(result: ToolResult) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=result.text)], is_error=not result.ok)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def _audit_refusal(caller: Caller, tool: str, reason: Reason) -> None:
    ws = caller.workspace
    audit.emit("slackbot_mcp.refused", team=ws.team_id, enterprise=ws.enterprise_id, user=caller.user_id,
               tool=tool, reason=reason)
