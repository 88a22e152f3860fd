"""Where an outbound call sends, as the exfiltration guard sees it: the fixed service a tool sends to, what an
approval shows of it, and whether its words are all the requester's own. Pure functions of a ``Tool`` and its
arguments; the guard (``tools.exfiltration``) decides with them."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tools.context import ToolContext
from tools.integrity import Steer
from tools.tool import Tool

_WORD = re.compile(r"\w+")
#: Besides the requester's words, a query passing unasked may hold only spaces and this punctuation.
_PLAIN_PUNCTUATION = frozenset(" \t\n\"'.,:;!?()-")
#: The source named for internal pages (``Tool.private_result``).
INTERNAL_SOURCE = "internal pages"


@dataclass(frozen=True, slots=True)
class Ask:
    """One destination of a call that needs the requester's approval."""

    #: The URL ("" for a fixed service).
    url: str
    #: Where to, as the requester knows it: the host, or ``Tool.sends_to``.
    destination: str
    #: Exactly what would be sent.
    payload: str
    #: What approving for the run approves (``host:…`` or ``service:…``).
    scope: str
    #: Why the requester is asked, the end of a sentence.
    why: str
    #: Set when the integrity rule asks (untrusted content steers the call), not the secrecy rule.
    steer: Steer | None = None


def private_source(tool: Tool, text: str) -> str | None:
    """The source a result of ``tool`` arms the guard as, or None when it is not private."""
    if tool.reads_private_data:
        return tool.name
    if tool.private_result is not None and tool.private_result(text):
        return f"{INTERNAL_SOURCE} ({tool.name})"
    return None


def private_text(tool: Tool, text: str) -> str:
    """What of a private result is data read: all of a private tool's output; of an internal page, all but its
    ``URL:`` header line. That URL is the one the model asked for, no data read, and counted as private it
    would hold back the next page of the same (allow-listed) host."""
    if tool.reads_private_data:
        return text
    header, gap, body = text.partition("\n\n")
    kept = [line for line in header.splitlines() if not line.startswith("URL: ")]
    return "\n".join(kept) + gap + body


def service_of(tool: Tool, *, urls_found: bool) -> str:
    """The one fixed service an outbound call sends to, or "" when URLs in its arguments name where it goes:
    ``fetch_url``'s ``url``, or (a tool without ``destination_args``) URLs found in this call. A call naming no
    destination still sends somewhere."""
    if tool.destination_args and urls_found:
        return ""
    if tool.sends_to:  # also a tool whose destination argument was left out: it sends to its default
        return tool.sends_to
    if tool.destination_args is None and urls_found:
        return ""
    return f"wherever {tool.name} sends"


def service_rule(tool: Tool, service: str) -> str:
    """Why a call to a fixed service needs the requester, as the rest of a sentence."""
    if tool.requester_words_pass:
        return (f"{service} may receive only words from the requester's own messages without the requester's "
                "approval")
    rule = f"{service} is not trusted with the workspace's data, so each call needs the requester's approval"
    if tool.server is not None:  # the way out is this one tool, never the whole server (it may post to the web)
        rule += (f" (if {tool.name} sends only to the company's own systems, an operator can mark that one tool "
                 '"receives_private_data": true in AGENT_MCP_CONFIG)')
    return rule


def payload(arguments: Mapping[str, Any]) -> str:
    """Exactly what a call to a fixed service sends: its one text argument, else the arguments as JSON."""
    values = list(arguments.values())
    if len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return json.dumps(dict(arguments), ensure_ascii=False, indent=2, sort_keys=True, default=str)


def requester_words_only(arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
    """Every word of the arguments' values is in the requester's own messages (or the task), and nothing else
    but spaces and plain punctuation is: nothing read from private data can ride along, in any encoding."""
    own = {w for text in (*ctx.egress.requester_texts, ctx.task) for w in _WORD.findall(_fold(text))}
    texts = [_fold(text) for text in _values(arguments)]
    words = [w for text in texts for w in _WORD.findall(text)]
    rest = {c for text in texts for c in _WORD.sub("", text)}
    return bool(words) and set(words) <= own and rest <= _PLAIN_PUNCTUATION


def _fold(text: str) -> str:
    """Text compared by its words: fullwidth and other compatibility forms folded, case ignored."""
    return unicodedata.normalize("NFKC", text).casefold()


def _values(value: Any) -> Iterator[str]:
    """Every string value in a JSON-like value (keys are the tool's schema, not data)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _values(item)
