"""The ``/agent schedule`` grammar and its replies' texts. Pure: text in, a typed command (or a usage line) out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bot.i18n import _
from bot.workspace.schedules.store import Schedule
from bot.workspace.schedules.when import describe, grammar

#: The longest task a schedule keeps (a mention's text is capped by Slack at 40,000 characters).
MAX_TASK_CHARS = 4000
Verb = Literal["list", "delete", "pause", "resume", "run"]
VERBS: tuple[Verb, ...] = ("list", "delete", "pause", "resume", "run")
_ID = re.compile(r"S[0-9A-F]{8}")
# Slack turns typed quotes into curly ones in some clients: both open and close the <when>.
_QUOTED = re.compile(r'["\u201c\u201d](.+?)["\u201c\u201d]\s*(.*)', re.DOTALL)


@dataclass(frozen=True, slots=True)
class AddSchedule:
    when: str
    task: str


@dataclass(frozen=True, slots=True)
class ScheduleVerb:
    verb: Verb
    schedule_id: str = ""


@dataclass(frozen=True, slots=True)
class Unclear:
    """Not understood: ``problem`` says why (the usage follows it)."""

    problem: str = ""


AgentCommand = AddSchedule | ScheduleVerb | Unclear


def usage() -> str:
    return _("*Usage:* `/agent schedule add \"<when>\" <task>` · `/agent schedule list` · "
             "`/agent schedule delete|pause|resume|run <id>`. `<when>` is {grammar}.").format(grammar=grammar())


def parse(text: str) -> AgentCommand:
    """One ``/agent`` request's text."""
    words = text.strip().split(maxsplit=1)
    if not words or words[0].lower() != "schedule":
        known = _("`/agent` knows `schedule`, `memory`, `connect`, `disconnect` and `connections`.")
        return Unclear(known if words else "")
    rest = words[1].strip() if len(words) > 1 else ""
    verb, _sep, args = rest.partition(" ")
    verb, args = verb.lower(), args.strip()
    if verb == "add":
        return _add(args)
    if verb == "list":
        return ScheduleVerb("list")
    if verb in VERBS:
        schedule_id = args.upper()
        if not _ID.fullmatch(schedule_id):
            return Unclear(_("`/agent schedule {verb}` takes a schedule's id, like `S1A2B3C4D` "
                             "(`/agent schedule list` shows them).").format(verb=verb))
        return ScheduleVerb(next(v for v in VERBS if v == verb), schedule_id)
    return Unclear(_("Unknown `/agent schedule` command `{verb}`.").format(verb=verb) if verb else "")


def _add(args: str) -> AgentCommand:
    m = _QUOTED.fullmatch(args)
    if m is None:
        return Unclear(_("Put the time in quotes: `/agent schedule add \"every day at 09:00\" summarise #incidents`."))
    when, task = m.group(1).strip(), m.group(2).strip()
    if not task:
        return Unclear(_("Say what to do after the time, e.g. "
                         "`/agent schedule add \"in 10 minutes\" check the build`."))
    if len(task) > MAX_TASK_CHARS:
        return Unclear(_("That task is {n} characters; a schedule keeps at most {cap}.")
                       .format(n=f"{len(task):,}", cap=f"{MAX_TASK_CHARS:,}"))
    return AddSchedule(when, task)


def created_line(schedule: Schedule) -> str:
    return _("Scheduled `{id}`: {when}. Next run {next}. I will post it here and work in its thread as you."
             ).format(id=schedule.id, when=schedule.cadence.text, next=describe(schedule.next_at, schedule.cadence.tz))


def list_line(schedule: Schedule) -> str:
    if schedule.status == "paused":
        nxt = _("paused ({reason})").format(reason=reason_text(schedule.reason))
    elif schedule.next_at:
        nxt = describe(schedule.next_at, schedule.cadence.tz)
    else:
        nxt = _("done")
    return _("• `{id}` by <@{creator}>: {when}; next {next}; last {last}: {task}").format(
        id=schedule.id, creator=schedule.creator, when=schedule.cadence.text, next=nxt,
        last=schedule.last_outcome or _("not run yet"), task=_shorten(schedule.task))


def reason_text(reason: str) -> str:
    texts = {
        "by_person": _("paused by a person"),
        "creator_left": _("its creator left the workspace"),
        "lost_access": _("its creator or the app lost access to the channel"),
        "uninstalled": _("the app was uninstalled"),
        "failures": _("three runs in a row failed"),
        "disabled": _("schedules are off in this workspace"),
    }
    return texts.get(reason, _("paused"))


def _shorten(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
