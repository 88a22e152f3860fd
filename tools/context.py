"""What a tool is given when it runs: the run's identity and the small ports it may use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tools.egress import EgressAnswer, EgressPolicy, EgressRequest
from tools.outbox import Outbox


class SlackReader(Protocol):
    """Read-only view of the current conversation, implemented by the Slack app (``bot``)."""

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        """The channel's most recent messages, newest first, as Slack returns them."""
        ...

    async def search(self, query: str, *, limit: int, cursor: str, filters: Mapping[str, Any]) -> Mapping[str, Any]:
        """Slack's Real-time Search (``assistant.search.context``) as the asker: the response as Slack returns it
        (``results.messages``/``results.files``, ``response_metadata.next_cursor``), holding only results the
        thread's readers may see, with ``searched`` (what was searched, in words) and ``withheld`` (how many results
        were dropped). ``filters`` are the method's own arguments (``channel_types``, ``content_types``, ``before``,
        ``after``); ``channel_types`` is narrowed to the thread's audience. Never stored or cached: the API's terms
        allow no copies. Raises ``ToolError`` when Slack refuses, or the thread's audience is unknown."""
        ...


class RunFile(Protocol):
    """A file given to the run (``agent_core.Attachment`` is one): what ``read_file`` reads."""

    @property
    def name(self) -> str:
        """The file's name, unique within the run ("report.pdf")."""
        ...

    @property
    def mimetype(self) -> str:
        """The type sniffed from the bytes (``tools.files.sniff``)."""
        ...

    @property
    def data(self) -> bytes:
        """The file's bytes."""
        ...

    @property
    def note(self) -> str:
        """Why the file cannot be used ("" when it can): shown to the model instead of its content."""
        ...


class Approver(Protocol):
    """Asked before a tool marked ``needs_approval`` runs."""

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        """True to run the call, False to refuse it."""
        ...


@runtime_checkable
class EgressApprover(Protocol):
    """An ``Approver`` that can also render a guard question (the destination, exactly what is sent) and
    offer "approve for this run"."""

    async def approve_egress(self, request: EgressRequest, ctx: ToolContext) -> EgressAnswer | bool:
        """``EgressAnswer`` (or True for once, False to deny) for sending ``request.payload``."""
        ...


class Parked(Exception):
    """Raised by an ``Approver`` that cannot answer now: the decision may take hours. The engine saves the run at
    this call (the step's reply, the results of its other calls) and ends it without an answer; the caller resumes
    it once decided, and the same call is put to the approver again, who then answers at once."""


class Scheduler(Protocol):
    """Proposes a schedule to the run's asker, implemented by the Slack app (``bot``): nothing is created until
    the asker confirms it themselves, so no tool result or page the run read can schedule work."""

    async def propose(self, when: str, task: str) -> str:
        """Show the asker the proposal with a Confirm button; the text the model reads back (what was proposed,
        or why ``when`` was not understood)."""
        ...


class Memory(Protocol):
    """A person's memory for one run, implemented by the Slack app (``bot``): keyed by the asker alone, filtered by
    where the run is before the model sees anything, written only from the asker's own words in this run."""

    async def remember(self, text: str) -> str:
        """Keep ``text`` (it must quote the asker's message); the text the model reads back."""
        ...

    async def recall(self, query: str) -> str:
        """The asker's memories usable here (and this channel's notes) relevant to ``query``."""
        ...

    async def forget(self, memory_id: str) -> str:
        """Forget one of the asker's memories by id, or ``all`` of them."""
        ...


class Credentials(Protocol):
    """The asker's own tokens for ``"auth": "user"`` MCP servers, implemented by the Slack app (``bot``): a run holds
    the one of its person (the asker, a schedule's creator), never another's."""

    async def token(self, server: str, tool: str, *, refused: str = "") -> str:
        """The asker's access token for ``server``, fresh, to call ``tool`` with (the call is audited as theirs).
        ``refused``: a token the server just refused (401), renewed or dropped. Raises ``ConnectionNeeded`` when
        the asker has no usable token (they are offered to connect)."""
        ...


class RefuseAll:
    """The terminal's default approver: every call needing approval is refused."""

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class ToolContext:
    """The run context a tool receives; never globals.

    ``task`` and ``thought`` steer result shaping (the passages kept from an oversized result are the
    ones most relevant to them).
    """

    run_id: str
    step: int
    task: str = ""
    thought: str = ""
    team_id: str = ""
    channel_id: str = ""
    user_id: str = ""
    slack: SlackReader | None = None
    approver: Approver = field(default_factory=RefuseAll)
    #: What the exfiltration guard needs to know about the run (requester's messages, domain lists, notices).
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    #: Set by the executor on a cleared outbound call: a tool that follows redirects calls it with each hop's
    #: URL, and it raises ``EgressHeld`` for one the guard does not allow.
    egress_hop: Callable[[str], None] | None = None
    #: Where ``attach_file`` hands files over (the Slack app's thread); None outside Slack.
    outbox: Outbox | None = None
    #: Set by the executor on a call of a ``shown_in_thread`` tool once the guard is armed: text as the run may
    #: show it in the thread (links it may not reach shown as text, as in the answer).
    for_thread: Callable[[str], str] | None = None
    #: Where ``schedule_run`` proposes a schedule (the Slack app's asker); None outside Slack.
    scheduler: Scheduler | None = None
    #: The asker's memory (``remember``/``recall``/``forget``); None where memory is off or outside Slack.
    memory: Memory | None = None
    #: The files given to the run, by name (``read_file`` reads them); empty when it has none.
    files: Mapping[str, RunFile] = field(default_factory=dict)
    #: The asker's tokens for ``"auth": "user"`` MCP servers; None outside Slack (such tools then say so).
    credentials: Credentials | None = None
