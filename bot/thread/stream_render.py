"""Pure rendering for the streamed displays (``timeline``, ``plan``): agent events → stream chunks. No I/O.

One streamed reply per run. Each tool call is a task card (``task_update`` chunk) that goes ``in_progress`` when
called, then ``complete`` or ``error`` when observed: its title is the tool and a short form of the arguments,
``details`` the thought and the arguments, ``output`` the shortened observation, ``sources`` the URLs that
``fetch_url``/``web_search`` read. ``plan`` opens with a ``plan_update`` chunk titled from the task, so Slack
groups the cards in one plan block. The answer is ``markdown_text``; the stop line (the stop reason verbatim,
steps, tokens, cost) closes the message, and the feedback buttons go in the final blocks.

``compact`` verbosity keeps the cards to their title and status. Model and tool text is defused (no pings);
every field stays inside Slack's limits (``TASK_*_LIMIT``, ``MARKDOWN_LIMIT``).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.models.blocks.block_elements import UrlSourceElement
from slack_sdk.models.messages.chunk import PlanUpdateChunk, TaskUpdateChunk

from agent_core import Observed, Stopped, ToolCalled
from bot.i18n import _
from bot.thread import mrkdwn, render
from bot.workspace import Verbosity

#: ``markdown_text`` per call (Slack's documented cap is 12,000 characters).
MARKDOWN_LIMIT = 12_000
#: A card's title, details and output; 256 is the documented cap of details and output, titles stay shorter.
TASK_TITLE_LIMIT = 120
TASK_TEXT_LIMIT = 256
#: Arguments shown in a card's title.
TITLE_ARGS_LIMIT = 60
#: URL sources per card, and the characters of each one's label.
SOURCES_LIMIT = 5
SOURCE_TEXT_LIMIT = 80
#: Tools whose reads are listed as a card's sources.
SOURCE_TOOLS = frozenset({"fetch_url", "web_search"})

_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
_PING = re.compile(r"<(?=[@#!])")


def defuse(text: str) -> str:
    """Model or tool text made safe to stream as Markdown: no ``<@U1>``/``<!here>`` and no bare ``@channel``."""
    text = _PING.sub("<" + mrkdwn.WORD_JOINER, text)
    return mrkdwn.unping(text)


def short_arguments(arguments: dict[str, Any]) -> str:
    """``"python asyncio"`` for one string argument, else compact JSON; shortened for a title."""
    if len(arguments) == 1 and isinstance(value := next(iter(arguments.values())), str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return mrkdwn.shorten(text, TITLE_ARGS_LIMIT)


def task_title(call: ToolCalled) -> str:
    args = short_arguments(call.arguments) if call.arguments else ""
    return mrkdwn.shorten(defuse(f"{call.tool} {args}".strip()), TASK_TITLE_LIMIT)


def task_started(call: ToolCalled, thought: str | None, verbosity: Verbosity) -> TaskUpdateChunk:
    """The card of a call just made: ``in_progress``; ``full`` shows the thought and the arguments."""
    details = None
    if verbosity == "full":
        args = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True, default=str)
        said = (thought or "").strip()
        thought_part = f"{mrkdwn.shorten(said, TASK_TEXT_LIMIT // 2)}\n" if said else ""
        details = mrkdwn.shorten(defuse(thought_part + _("Arguments: {args}").format(args=args)), TASK_TEXT_LIMIT)
    return TaskUpdateChunk(id=call.call_id, title=task_title(call), status="in_progress", details=details)


def task_finished(call: ToolCalled, obs: Observed, thought: str | None, verbosity: Verbosity) -> TaskUpdateChunk:
    """The same card once observed: ``complete`` or ``error``, with the shortened observation and the sources."""
    card = task_started(call, thought, verbosity)
    card.status = "complete" if obs.outcome == "ok" else "error"
    head = f"{obs.outcome} ({render.size_text(obs)})"
    if verbosity == "full":
        card.output = mrkdwn.shorten(defuse(f"{head}: {obs.text.strip()}"), TASK_TEXT_LIMIT)
    else:
        card.output = defuse(head)[:TASK_TEXT_LIMIT]
    sources = read_sources(call, obs)
    card.sources = sources or None
    return card


def read_sources(call: ToolCalled, obs: Observed) -> list[UrlSourceElement]:
    """The URLs ``fetch_url`` fetched or ``web_search`` found (http and https only, first ones, no repeats)."""
    if call.tool not in SOURCE_TOOLS:
        return []
    urls: list[str] = []
    asked = call.arguments.get("url")
    if isinstance(asked, str) and _URL.fullmatch(asked):
        urls.append(asked)
    if call.tool == "web_search" or not urls:
        urls.extend(_URL.findall(obs.text))
    seen: list[str] = []
    for url in urls:
        url = url.rstrip(".,;:")
        if url not in seen and urlsplit(url).hostname:
            seen.append(url)
    return [UrlSourceElement(url=u, text=_source_label(u)) for u in seen[:SOURCES_LIMIT]]


def _source_label(url: str) -> str:
    parts = urlsplit(url)
    return mrkdwn.shorten(defuse(f"{parts.hostname}{parts.path if parts.path != '/' else ''}"), SOURCE_TEXT_LIMIT)


def plan_title(task: str) -> PlanUpdateChunk:
    """``plan``: the plan block's title, from the first line of the task."""
    first = next((line.strip() for line in task.splitlines() if line.strip()), "") or _("Working on it")
    return PlanUpdateChunk(title=mrkdwn.shorten(defuse(first), TASK_TITLE_LIMIT))


def resumed_markdown(step: int) -> str:
    if step:
        return _("_Resumed after a restart, from step {n}._").format(n=step + 1) + "\n\n"
    return _("_Resumed after a restart._") + "\n\n"


def stop_markdown(event: Stopped) -> str:
    """The closing line: the stop reason verbatim beside human words, then steps, tokens and cost."""
    line = f"\n\n---\n{render.stop_summary(event)}"
    if event.detail and event.reason.value != "final_answer":
        line += f"\n\n{defuse(render.stop_detail(event.detail))}"
    if hint := render.raise_hint(event):
        line += f"\n\n{hint}"
    return line

