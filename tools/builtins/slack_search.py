"""slack_search: Slack's own Real-time Search (``assistant.search.context``), through the ``SlackReader`` port.

It searches the messages and files the asker can see, as the asker (the event's ``action_token``); the run is
offered it only when Slack gave one (``tools.policy.SEARCH_TOOLS``). The Slack app narrows every search to what the
thread's readers may see (its ``SlackReader``): in a public channel public channels only, in a private one public
channels and that conversation, in the asker's DM with the app everything the asker can see. The results are
private data: they arm the exfiltration guard. Nothing is kept: each call asks Slack again (its terms forbid
copies and indexes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.context import ToolContext
from tools.errors import NotInSlackError
from tools.registry import tool

DEFAULT_LIMIT = 10
#: The method's own page limit.
MAX_LIMIT = 20
#: A result's text beyond this is cut (the model gets the permalink to read the rest).
MAX_CONTENT = 500

ChannelType = Literal["public_channel", "private_channel", "mpim", "im"]


class SlackSearchArgs(BaseModel):
    """Arguments of the slack_search tool."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=500, description="What to look for, in words or as a question.")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="How many results to return.")
    cursor: str = Field("", max_length=500, description="next_cursor of a previous call, for the next page.")
    channel_types: list[ChannelType] = Field(
        default_factory=list,
        description="Only these kinds of conversation (default: all this thread may show; kinds it may not show are "
                    "never searched).")
    content_types: list[Literal["messages", "files"]] = Field(
        default_factory=list, description="messages and/or files (default: Slack's, messages).")
    after: int | None = Field(None, ge=0, description="Only results after this UNIX time.")
    before: int | None = Field(None, ge=0, description="Only results before this UNIX time.")


def _field(item: Mapping[str, Any], *names: str) -> str:
    for name in names:
        value = item.get(name)
        if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value):
            return str(value)
    return ""


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CONTENT else text[: MAX_CONTENT - 1] + "…"


def render_results(response: Mapping[str, Any]) -> str:
    """Messages and files as one line each (who, where, when, link, text), then the next page's cursor."""
    results = response.get("results")
    results = results if isinstance(results, Mapping) else {}
    lines: list[str] = []
    for message in results.get("messages") or []:
        if isinstance(message, Mapping):
            who = _field(message, "author_user_id", "user")
            where = _field(message, "channel_id", "channel")
            lines.append(f"- message by {who or 'unknown'} in {where or '?'} at {_field(message, 'message_ts', 'ts')} "
                         f"<{_field(message, 'permalink')}>: {_cut(_field(message, 'content', 'text'))}")
    for file in results.get("files") or []:
        if isinstance(file, Mapping):
            title = _field(file, "title", "name") or _field(file, "file_id", "id")
            lines.append(f"- file {title!r} by {_field(file, 'author_user_id', 'user') or 'unknown'} "
                         f"<{_field(file, 'permalink')}>: {_cut(_field(file, 'content', 'preview'))}".rstrip(": "))
    searched = _field(response, "searched")
    withheld = response.get("withheld")
    if isinstance(withheld, int) and withheld > 0:
        lines.append(f"({withheld} more result(s) withheld: their conversations' readers are not this thread's.)")
    if not lines:
        return " ".join(filter(None, ["No Slack messages or files matched.", searched]))
    if searched:
        lines.insert(0, searched)
    meta = response.get("response_metadata")
    cursor = _field(meta, "next_cursor") if isinstance(meta, Mapping) else ""
    if cursor:
        lines.append(f"(more results: call again with cursor {cursor!r})")
    return "\n".join(lines)


@tool(name="slack_search", timeout=15.0, reads_private_data=True)
async def slack_search(args: SlackSearchArgs, ctx: ToolContext) -> str:
    """Search Slack itself: messages and files the asker can see, one line per result with who wrote it, where,
    and its permalink. Only what this thread's readers may see is searched: in a public channel, public channels;
    in a private channel or group DM, public channels and this conversation; in the asker's DM with the app,
    everything the asker can see (DMs and private channels too)."""
    if ctx.slack is None:
        raise NotInSlackError("slack_search is only available inside Slack")
    filters: dict[str, Any] = {
        "channel_types": args.channel_types or None, "content_types": args.content_types or None,
        "after": args.after, "before": args.before,
    }
    found = await ctx.slack.search(
        args.query, limit=args.limit, cursor=args.cursor,
        filters={k: v for k, v in filters.items() if v is not None},
    )
    return render_results(found)
