"""``/agent-limits usage [today|week|month|<YYYY-MM>] [by user|channel|model|tool|schedule] [org]``: who spent
what, on which model and tools, in which channel, by which schedule; for admins. A table in the reply, or
``usage export ...`` the same as a CSV in the admin's DM. ``org`` (Enterprise Grid org admins) sums the org's
workspaces. The figures are the day counters of :mod:`bot.workspace.spend.usage`: a report reads one hash per day
(and workspace), never a run.
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import re
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import aiohttp
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import MICROS_PER_USD, StopReason, format_usd
from bot.i18n import N_, _, ngettext
from bot.identity import Workspace
from bot.markup import escape
from bot.workspace.admin.people import SlackUsers
from bot.workspace.admin.words import quote
from bot.workspace.settings import unavailable
from bot.workspace.spend import ALL, DIMENSIONS, Dimension, Row, RunLedger, day_id

log = logging.getLogger(__name__)

PERIOD_WORDS = ("today", "week", "month")
_MONTH_RE = re.compile(r"(20[0-9]{2})-(0[1-9]|1[0-2])", re.ASCII)
#: Rows in the reply (the biggest spenders); the export has them all.
SHOWN_ROWS = 20
_LABELS = {"today": N_("today"), "week": N_("the last 7 days"), "month": N_("this month")}
_FAILURES = (aiohttp.ClientError, TimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class UsageCommand:
    """``usage [export] [period] [by <dimension>] [org]``."""

    period: str = "month"
    by: Dimension | None = None
    org: bool = False
    export: bool = False


def parse_usage(args: list[str]) -> UsageCommand | str:
    """The command, or what was wrong with it (the caller adds the usage)."""
    words = [a.lower() for a in args]
    export = bool(words) and words[0] == "export"
    period: str | None = None
    by: Dimension | None = None
    org = False
    rest = iter(words[1:] if export else words)
    for word in rest:
        if word == "by":
            choice = next(rest, "")
            if by is not None or choice not in DIMENSIONS:
                return _("`by` takes one of: user, channel, model, tool, schedule.")
            by = choice
        elif word == "org":
            org = True
        elif period is None and (word in PERIOD_WORDS or _MONTH_RE.fullmatch(word)):
            period = word
        else:
            return _("`usage` takes a period (`today`, `week`, `month` or a month like `2026-11`), then "
                     "optionally `by user|channel|model|tool|schedule` and `org`; got `{word}`.").format(
                word=quote(word))
    return UsageCommand(period or "month", by, org, export)


@dataclass(frozen=True, slots=True)
class Span:
    """The days a report covers (UTC), first to last."""

    label: str
    first: date
    last: date

    def days(self) -> list[str]:
        return [day_id(self.first + timedelta(days=n)) for n in range((self.last - self.first).days + 1)]


def span_of(period: str, today: date, retention_days: int) -> Span | str:
    """The days of ``period`` up to today, or why there are none to show."""
    if period == "today":
        return Span(_(_LABELS[period]), today, today)
    if period == "week":
        return Span(_(_LABELS[period]), today - timedelta(days=6), today)
    if period == "month":
        return Span(_(_LABELS[period]), today.replace(day=1), today)
    first = date(int(period[:4]), int(period[5:]), 1)
    if first > today:
        return _("{month} has not started yet.").format(month=period)
    end = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    if end < today - timedelta(days=retention_days):
        return _("Usage is kept for {days} days (`AGENT_USAGE_RETENTION_DAYS`); {month} is older.").format(
            days=retention_days, month=period)
    return Span(period, first, min(end, today))


def _stops(row: Row) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in row.stops().items())


def format_table(rows: list[Row], by: Dimension | None, span: Span, scope: str) -> str:
    """mrkdwn: a heading, then the rows (the biggest spenders first) as a fixed-width table."""
    heading = _("*Usage {scope}, {period}* ({first} to {last}, UTC)").format(
        scope=scope, period=span.label, first=span.first.isoformat(), last=span.last.isoformat())
    if not rows:
        return heading + "\n" + _("No runs were counted in this period.")
    tools = by == "tool"
    head = [by or "", _("runs"), _("steps"), _("tokens"), _("spend"), _("up"), _("down"),
            *((_("calls"), _("errors"), _("held"), _("denied")) if tools else ()), _("stop reasons")]
    body = [
        [_("all runs") if r.member == ALL else escape(r.member), f"{r['runs']:,}", f"{r['steps']:,}",
         f"{r['tokens']:,}", format_usd(r["spend"]), f"{r['up']:,}", f"{r['down']:,}",
         *((f"{r['calls']:,}", f"{r['errors']:,}", f"{r['held']:,}", f"{r['denied']:,}") if tools else ()),
         _stops(r)]
        for r in rows[:SHOWN_ROWS]
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    last = len(head) - 1

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(widths[i]) if i in (0, last) else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    text = "\n".join([heading, "```", *(line(c) for c in [head, *body]), "```"])
    if tools:
        text += "\n" + _("A run that called several tools counts under each of them.")
    if len(rows) > SHOWN_ROWS:
        text += "\n" + _("…and {n} more; `/agent-limits usage export` sends them all as a CSV.").format(
            n=len(rows) - SHOWN_ROWS)
    return text


CSV_STOPS = tuple(r.value for r in StopReason)
#: A text cell starting with one of these is read as a formula by spreadsheets (OWASP, CSV injection).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_MICRO = Decimal("0.000001")


def to_csv(rows: list[Row], by: Dimension | None, span: Span) -> str:
    """The same rows, all of them, one per line; a column per stop reason. Text is quoted and a cell that would
    open as a formula gets a leading ``'`` (OWASP's advice for CSV injection); numbers stay numbers."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["first_day", "last_day", "dimension", "member", "runs", "steps", "tokens", "spend_usd",
                     "thumbs_up", "thumbs_down", "tool_calls", "tool_errors", "tool_held", "tool_denied",
                     *(f"stop_{s}" for s in CSV_STOPS)])
    for r in rows:
        stops = r.stops()
        writer.writerow([span.first.isoformat(), span.last.isoformat(), by or ALL, inert(r.member), r["runs"],
                         r["steps"], r["tokens"], (Decimal(r["spend"]) / MICROS_PER_USD).quantize(_MICRO),
                         r["up"], r["down"], r["calls"], r["errors"], r["held"], r["denied"],
                         *(stops.get(s, 0) for s in CSV_STOPS)])
    return out.getvalue()


def inert(cell: str) -> str:
    """A text cell no spreadsheet runs: ``'`` before a leading formula character."""
    return f"'{cell}" if cell.startswith(_FORMULA_STARTS) else cell


class UsageReports:
    """Answers ``usage`` for one process: who may see what, the figures, and the export's upload."""

    def __init__(self, runs: RunLedger, users: SlackUsers) -> None:
        self.runs = runs
        self.users = users
        self._uploads: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak references)

    async def answer(self, client: AsyncWebClient, ws: Workspace, user_id: str, command: UsageCommand) -> str:
        refused = await self._refusal(client, ws, user_id, command.org)
        if refused:
            return refused
        retention = self.runs.counters.retention_days
        span = span_of(command.period, self.runs.clock().date(), retention)
        if isinstance(span, str):
            return span
        try:
            workspaces = await self._workspaces(ws, command.org)
            rows = await self.runs.counters.rows(workspaces, span.days(), command.by or ALL)
        except RedisError as exc:
            raise unavailable(exc) from exc
        scope = (ngettext("across the org's {n} workspace", "across the org's {n} workspaces",
                          len(workspaces)).format(n=len(workspaces)) if command.org
                 else _("in this workspace"))
        if not command.export:
            return format_table(rows, command.by, span, scope)
        name = f"agent-usage-{span.first.isoformat()}-to-{span.last.isoformat()}-by-{command.by or ALL}" + (
            "-org" if command.org else "") + ".csv"
        task = asyncio.create_task(self._send(client, user_id, name, to_csv(rows, command.by, span)))
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)
        return ngettext("The CSV ({rows} row) is on its way to your direct messages with the app.",
                        "The CSV ({rows} rows) is on its way to your direct messages with the app.",
                        len(rows)).format(rows=len(rows))

    async def _refusal(self, client: AsyncWebClient, ws: Workspace, user_id: str, org: bool) -> str:
        if not org:
            if await self.users.is_admin(client, ws, user_id):
                return ""
            return _("Only {who} can see usage reports.").format(who=self.users.who_may_change())
        if not ws.enterprise_id:
            return _("`org` sums the workspaces of an Enterprise Grid org; this workspace is not part of one.")
        if await self.users.is_org_admin(client, ws, user_id):
            return ""
        return _("Only the org's admins and owners can see the org's usage.")

    async def _workspaces(self, ws: Workspace, org: bool) -> list[Workspace]:
        if not org:
            return [ws]
        teams = set(await self.runs.counters.org_teams(ws.enterprise_id)) | {ws.team_id}
        return [Workspace(team, ws.enterprise_id) for team in sorted(teams)]

    async def _send(self, client: AsyncWebClient, user_id: str, name: str, text: str) -> None:
        """Upload the CSV into the admin's DM with the app, under a line naming it; a refusal is told there (or
        logged). A message to a user id lands in that DM and names its channel: no ``im:write`` scope needed."""
        channel = ""
        try:
            posted = await client.chat_postMessage(channel=user_id, text=_("Your usage export: `{name}`").format(
                name=name))
            channel = str(posted.get("channel") or "")
            await client.files_upload_v2(channel=channel, filename=name, content=text.encode(), title=name)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "error")
            log.warning("usage export for %s not uploaded: %s", user_id, error)
            if channel:
                await self._tell(client, channel, _(
                    "The usage export could not be uploaded: Slack said `{error}` (the app needs the "
                    "`files:write` scope).").format(error=quote(error)))
        except _FAILURES as exc:
            log.warning("usage export for %s not uploaded: %s", user_id, type(exc).__name__)

    @staticmethod
    async def _tell(client: AsyncWebClient, channel: str, text: str) -> None:
        try:
            await client.chat_postMessage(channel=channel, text=text)
        except (SlackApiError, *_FAILURES) as exc:
            log.warning("usage export failure not told: %s", type(exc).__name__)

