"""The ``Tool`` value: what a tool is called, what it takes, how it runs and how careful to be with it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tools.context import ToolContext
from tools.errors import ToolDefinitionError

#: The handler receives the validated arguments and the run context. It may be ``async def`` or a plain
#: function (run in a worker thread), and returns a ``str`` or any JSON-able value.
Handler = Callable[[Any, ToolContext], Any]

#: The function-name rule of the OpenAI tools API; other providers accept a superset of it.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool the model may call.

    Build it with the ``@tool`` decorator rather than by hand::

        class Args(BaseModel):
            expression: str = Field(description="Arithmetic, e.g. 2 * (3 + 4)")

        @tool(timeout=5)
        def calculator(args: Args, ctx: ToolContext) -> str:
            \"\"\"Evaluate an arithmetic expression.\"\"\"
    """

    #: Unique name the model calls it by (``[A-Za-z0-9_-]{1,64}``).
    name: str
    #: What it does, for the model; the first line is the one-line summary in the tool list.
    description: str
    #: Pydantic model the JSON arguments are validated against; its JSON schema is sent to the model.
    args_model: type[BaseModel]
    #: ``(args, ctx) -> str | JSON-able``; async or sync.
    handler: Handler
    #: Seconds one call may take before it ends with the ``timeout`` outcome.
    timeout_seconds: float = 20.0
    #: Has side effects or reaches far (left out unless a workspace names it in its allow-list).
    dangerous: bool = False
    #: Each call is put to ``ctx.approver`` first; a refusal ends it with the ``refused`` outcome.
    needs_approval: bool = False
    #: Sends data out of the workspace (a URL fetched, a query searched): held back by the exfiltration guard
    #: once the run has read private data.
    outbound: bool = False
    #: Returns data private to the workspace (channel messages, internal documents): arms the exfiltration guard.
    reads_private_data: bool = False
    #: For a tool whose results are private only sometimes, decides from one result's text (fetch_url: a page
    #: from a FETCH_URL_ALLOWED_HOSTS host is internal, so private): True arms the exfiltration guard.
    private_result: Callable[[str], bool] | None = None
    #: For an ``outbound`` tool that sends to one fixed service, that service as the requester knows it
    #: ("the search provider search.example.com", "MCP server jira"): the destination an approval names.
    sends_to: str = ""
    #: Once the guard is armed, a call whose every word comes from the requester's own messages may go to
    #: ``sends_to`` without approval (web_search: the requester's own search terms).
    requester_words_pass: bool = False
    #: For an ``outbound`` tool, the arguments naming where it sends (``("url",)``), checked by the
    #: exfiltration guard; ``()`` when it sends only to one service (``sends_to``: web_search's backend);
    #: None: every URL and e-mail address found in any argument (none found: the call still needs approval).
    #: All arguments are leak-checked.
    destination_args: tuple[str, ...] | None = None
    #: Changes something (a write, a send, an invite, a setting or a schedule): once the run has read untrusted
    #: content, the guard's integrity rule checks where it acts and what it carries (``tools.integrity``).
    consequential: bool = False
    #: For a ``consequential`` tool, the arguments naming where it acts (recipient, channel, URL, address);
    #: None: arguments found by name in each call (``tools.integrity.TARGET_NAMES``).
    target_args: tuple[str, ...] | None = None
    #: What it returns may hold instructions from people other than the requester (a page, a message, a file):
    #: once read, it may not steer a ``consequential`` call. Only a tool computing its result itself is trusted.
    untrusted_output: bool = True
    #: What it is given is shown in the run's own thread (attach_file): no exfiltration (the answer goes there
    #: too), but once the guard is armed it gets ``ToolContext.for_thread``, the answer's link rule.
    shown_in_thread: bool = False
    #: The raw JSON schema sent to the model instead of the strict one (MCP tools: the server's own schema,
    #: which need not fit the strict subset; ``args_model`` then validates against it).
    input_schema: dict[str, Any] | None = None
    #: The MCP server the tool comes from; None for a built-in.
    server: str | None = None

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ToolDefinitionError(f"tool name {self.name!r} must match [A-Za-z0-9_-]{{1,64}}")
        if not self.description.strip():
            raise ToolDefinitionError(f"tool {self.name!r} needs a description (or a docstring)")
        if not (isinstance(self.args_model, type) and issubclass(self.args_model, BaseModel)):
            raise ToolDefinitionError(f"tool {self.name!r}: args_model must be a pydantic BaseModel subclass")
        if not self.timeout_seconds > 0:
            raise ToolDefinitionError(f"tool {self.name!r}: timeout_seconds must be > 0")

    @property
    def summary(self) -> str:
        """The description's first line."""
        return self.description.strip().splitlines()[0].strip()
