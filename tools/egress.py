"""The exfiltration guard's ports: what the caller tells it about a run, and what it tells the caller back.

The Slack app fills one ``EgressPolicy`` per run and passes it in ``ToolContext.egress``::

    egress = EgressPolicy(
        requester_texts=("read https://docs.example.com/a and compare",),   # the requester's own messages
        private_texts=("U2: the launch moved to May",),                      # thread messages by others
        allowed_domains=("example.com",), denied_domains=("evil.example.com",),
        notices=thread_notices,                                              # told when a call is held back
    )
    scope = ToolContext(run_id=..., approver=slack_approver, egress=egress)

The guard asks ``ctx.approver`` (mode ``approve``): with ``approve_egress(request, ctx)`` when the approver has
it (``tools.context.EgressApprover``: the prompt can highlight the query string), else with the plain ``approve``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol


class GuardMode(StrEnum):
    """``AGENT_EXFILTRATION_GUARD``: what happens to an outbound call that may leak."""

    #: Refuse it, saying why and how to allow it.
    ON = "on"
    #: Ask the requester (Approve/Deny) instead of refusing; a call carrying private text is still refused.
    APPROVE = "approve"
    #: No guard.
    OFF = "off"


DEFAULT_GUARD_MODE = GuardMode.ON


class HoldReason(StrEnum):
    """Why an outbound call was held back."""

    #: The destination is none of: a URL from the requester's messages, an allow-listed host, an approved URL
    #: (or, for a fixed service such as web_search's provider or an external MCP server, it needs approval).
    NOT_ALLOWED = "not_allowed"
    #: Asked (mode ``approve``), and the requester denied it, or nobody answered.
    NOT_APPROVED = "not_approved"
    #: The host is on the workspace's deny-list, which wins over everything else.
    DENIED_DOMAIN = "denied_domain"
    #: An argument carries text read from private data.
    LEAK = "leak"
    #: A redirect led to a destination that is not allowed.
    REDIRECT = "redirect"
    #: Untrusted content the run read chose the target of a consequential call, or rides in it to a target the
    #: requester did not name (``tools.integrity``); the requester did not approve it.
    STEERED = "steered"


@dataclass(frozen=True, slots=True)
class HeldBack:
    """One outbound call the guard stopped: what the thread shows ("a fetch was held back")."""

    tool: str
    reason: HoldReason
    #: The destination: a URL, ``mailto:`` address, or "" for a leak in a call without one. It may carry the
    #: data held back: show it in the run's own thread only, never in logs.
    url: str
    #: The destination's host ("" when none).
    host: str
    #: What the model is told (why, and how to allow it); written for people too.
    detail: str
    #: The private data the run had read, by source ("channel_history", "thread messages from others").
    sources: tuple[str, ...] = ()
    run_id: str = ""
    step: int = 0
    #: A fixed service the call would have sent to ("the search provider …", "MCP server …"): safe to show.
    service: str = ""


class EgressAnswer(StrEnum):
    """The requester's answer to a guard question (an approver may also answer True/False: once/deny)."""

    DENY = "deny"
    #: This call only.
    ONCE = "once"
    #: This call, and every later call of the run to the same destination (``EgressRequest.scope``).
    RUN = "run"


@dataclass(frozen=True, slots=True)
class EgressRequest:
    """An outbound call to put to the requester (mode ``approve``): the pieces of its approval prompt."""

    tool: str
    #: The full URL asked about ("" for a call to a fixed service: web_search's provider, an MCP server).
    url: str
    host: str
    #: The URL without its query string (scheme, host, port, path): shown plainly.
    location: str
    #: The query string without its ``?`` ("" when none): shown highlighted, data travels there.
    query: str
    #: Why the requester is asked, one sentence naming the private data read.
    reason: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    #: Where the data would go, as the requester knows it: a host, "the search provider …", "MCP server …".
    destination: str = ""
    #: Exactly what would be sent there: the URL, the search query, the arguments as JSON.
    payload: str = ""
    #: What "approve for this run" approves: every later call of the run to this destination.
    scope: str = ""

    def prompt(self) -> str:
        """A plain-text prompt: the reason, the destination, and exactly what would be sent."""
        lines = [self.reason, f"{self.tool} wants to send to: {self.destination or self.host}",
                 f"What it sends: {self.payload or self.url}"]
        if self.query:
            lines.append(f"Its query string (check what it sends): ?{self.query}")
        return "\n".join(lines)


class HeldBackSink(Protocol):
    """Told each time an outbound call is held back (the Slack app posts a notice in the thread)."""

    async def held_back(self, event: HeldBack) -> None: ...


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """What the caller knows about one run that the guard needs. Empty: a run with only its task."""

    #: The requester's own messages in this thread. URLs in them may be reached, and their words are never
    #: counted as private. The run's task (``ToolContext.task``) always counts as one.
    requester_texts: tuple[str, ...] = ()
    #: Thread messages by anyone else: private data, arming the guard even before a tool reads any.
    private_texts: tuple[str, ...] = ()
    #: ``/agent-limits allow-domain`` hosts (checked with ``parse_domain``): the host and its subdomains.
    allowed_domains: tuple[str, ...] = ()
    #: ``/agent-limits deny-domain`` hosts (and subdomains): never reached once armed, whatever else allows them.
    denied_domains: tuple[str, ...] = ()
    notices: HeldBackSink | None = None


_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_DOMAIN = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")


#: Why an entry is no host to list: a URL, a ``*.`` wildcard, a port, or no host name at all.
DomainProblem = Literal["url", "wildcard", "port", "not_a_host"]


class BadDomain(ValueError):
    """An entry ``parse_domain`` refuses: its English message, and the parts a caller words for its reader in
    another language (``problem``, the entry as ``given``, the host to type ``instead`` when there is one)."""

    def __init__(self, problem: DomainProblem, given: str, message: str, instead: str = "") -> None:
        super().__init__(message)
        self.problem = problem
        self.given = given
        self.instead = instead


def parse_domain(raw: str) -> str:
    """An ``allow-domain`` / ``deny-domain`` entry as the guard matches it (lower case, no trailing dot);
    BadDomain saying what to type instead. The entry covers its subdomains, so no ``*.`` and no port."""
    given = raw.strip()
    entry = given.lower().rstrip(".")
    if "://" in entry or "/" in entry:
        raise BadDomain("url", given, f"{given!r} is a URL: give its host name alone, e.g. docs.example.com")
    if entry.startswith("*."):
        raise BadDomain("wildcard", given, f"{given!r}: leave out '*.', {entry[2:]} already covers its subdomains",
                        entry[2:])
    if ":" in entry and entry.count(":") == 1:
        host = entry.split(":")[0]
        raise BadDomain("port", given, f"{given!r}: give the host without a port, e.g. {host}", host)
    try:
        return str(ipaddress.ip_address(entry.strip("[]")))
    except ValueError:
        pass
    try:
        ascii_name = entry.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_name = ""
    if not _DOMAIN.match(ascii_name):
        raise BadDomain("not_a_host", given, f"{given!r} is not a host name, e.g. docs.example.com")
    return ascii_name


class EgressHeld(Exception):
    """Raised by a tool (fetch_url's redirect hops, through ``ToolContext.egress_hop``) the guard stopped."""

    def __init__(self, held: HeldBack) -> None:
        super().__init__(held.detail)
        self.held = held
