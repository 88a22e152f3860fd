"""The audit stream: one compact JSON object per line for every finished or refused run, limit or setting change,
approval, guard decision and install or uninstall, on a logger of its own (``bot.audit``) that never reaches the
root logger's handlers, so it is an artefact a security team can be handed as it is.

``AUDIT_LOG`` picks where it goes: ``stdout`` (the default; the service's own logs go to stderr), ``off``, or a
file path (appended to; one line per event, so several processes may share it). Each line has ``event`` (a stable
name, :data:`EVENTS`), ``at`` (UTC, ISO 8601), ``v`` (:data:`SCHEMA_VERSION`) and the event's fields
(:data:`SCHEMA`, documented in README's *Audit stream*)::

    audit.configure(settings.audit_log)
    audit.emit("limits.changed", team="T1", enterprise="", scope="workspace", actor="U1", field="budget_micros",
               old="$10.00", new="$25.00")

Only ids, names, counts and outcomes: never a message body, a tool's arguments or results, a token or a secret; a
tool the run's registry does not know is ``unknown``, and a destination is its registrable domain
(:func:`registrable_domain`).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from publicsuffixlist import PublicSuffixList

AuditEvent = Literal[
    "run.finished", "run.refused", "limits.changed", "approval.requested", "approval.decided", "approval.expired",
    "guard.decided", "app.installed", "app.uninstalled", "app.tokens_revoked", "schedule.created", "schedule.deleted",
    "schedule.paused", "schedule.fired", "schedule.skipped", "memory.written", "memory.forgotten", "memory.used",
    "slackbot_mcp.called", "slackbot_mcp.refused", "tool.called_as", "connection.created", "connection.removed",
]
EVENTS: tuple[AuditEvent, ...] = get_args(AuditEvent)
#: Raised when a field is added, renamed or changes meaning (a new event kind alone keeps it).
SCHEMA_VERSION = 1
AUDIT_LOGGER = "bot.audit"
#: ``AUDIT_LOG`` values that are no path.
STDOUT, OFF = "stdout", "off"

log = logging.getLogger(AUDIT_LOGGER)
log.propagate = False  # the root logger's handlers (stderr, LOG_FORMAT) never see an audit line
log.setLevel(logging.INFO)

_STR = {"type": "string"}
_INT = {"type": "integer", "minimum": 0}
_BOOL = {"type": "boolean"}
_WHERE = {"team": _STR, "enterprise": _STR}
_RUN = {**_WHERE, "channel": _STR, "run_id": _STR}
_SCHEDULE = {**_WHERE, "channel": _STR, "schedule": _STR, "creator": _STR, "by": _STR}
_MEMORY = {**_RUN, "user": _STR, "kind": {"enum": ["memory", "channel_note"]},
           "ids": {"type": "array", "items": _STR}}
_OUTCOMES = {"type": "object", "additionalProperties": _INT}
_TOOL = {"type": "object", "additionalProperties": False, "required": ["name", "outcomes"],
         "properties": {"name": _STR, "outcomes": _OUTCOMES}}

#: Each event's own fields (every one required; ``enterprise`` is "" outside Enterprise Grid).
FIELDS: dict[AuditEvent, dict[str, Any]] = {
    "run.finished": {**_RUN, "user": _STR, "model": _STR, "stop_reason": _STR, "steps": _INT,
                     "prompt_tokens": _INT, "completion_tokens": _INT, "spend_micros": _INT, "estimated": _BOOL,
                     "tools": {"type": "array", "items": _TOOL}},
    "run.refused": {**_RUN, "user": _STR,
                    "reason": {"enum": ["guest", "external", "budget_exhausted", "limit_unreadable"]}},
    "limits.changed": {**_WHERE, "scope": {"enum": ["workspace", "org"]}, "actor": _STR, "field": _STR,
                       "old": _STR, "new": _STR},
    "approval.decided": {**_RUN, "kind": {"enum": ["tool", "egress"]}, "tool": _STR, "requester": _STR,
                         "verdict": _STR, "decided_by": _STR},
    # Under an approval policy (``/agent-limits approvals``): the pattern, the people who may decide, how many must.
    "approval.requested": {**_RUN, "kind": {"enum": ["tool", "egress"]}, "tool": _STR, "requester": _STR,
                           "policy": _STR, "approvers": {"type": "array", "items": _STR}, "min": _INT},
    "approval.expired": {**_RUN, "kind": {"enum": ["tool", "egress"]}, "tool": _STR, "requester": _STR,
                         "policy": _STR, "approvers": {"type": "array", "items": _STR}},
    "guard.decided": {**_RUN, "tool": _STR, "decision": {"enum": ["held_back"]}, "reason": _STR, "host": _STR,
                      "service": _STR},
    "app.installed": {**_WHERE, "org_wide": _BOOL, "installer": _STR, "scopes": {"type": "array", "items": _STR}},
    "app.uninstalled": {**_WHERE},
    "app.tokens_revoked": {**_WHERE, "user_tokens": _INT, "bot_token": _BOOL},
    # Schedules: ids only (never the task's text or the <when> someone typed); ``by`` is who acted ("" for the app).
    "schedule.created": {**_SCHEDULE, "kind": {"enum": ["once", "interval", "cron"]}},
    "schedule.deleted": {**_SCHEDULE, "reason": {"enum": ["by_person", "channel_deleted"]}},
    "schedule.paused": {**_SCHEDULE, "reason": {"enum": ["by_person", "creator_left", "lost_access", "uninstalled",
                                                         "failures", "disabled"]}},
    "schedule.fired": {**_SCHEDULE, "run_id": _STR, "late_seconds": _INT, "manual": _BOOL},
    "schedule.skipped": {**_SCHEDULE, "reason": {"enum": ["too_late", "disabled", "not_posted"]},
                         "late_seconds": _INT},
    # Memory: ids only, never the text; ``user`` is whose memory (or who wrote a channel note), ``channel`` and
    # ``run_id`` "" outside a run; an erasure that covers a whole workspace lists no ids.
    "memory.written": {**_MEMORY, "visibility": {"enum": ["private", "public"]}},
    "memory.used": {**_MEMORY},
    "memory.forgotten": {**_MEMORY, "reason": {"enum": ["by_person", "person_left", "uninstalled", "tokens_revoked"]}},
    # A tool call of Slackbot's (``/mcp``): the person, the tool (``unknown`` when no tool of the workspace has that
    # name), its outcome; never its arguments or its result.
    "slackbot_mcp.called": {**_WHERE, "user": _STR, "call_id": _STR, "tool": _STR, "outcome": _STR},
    "slackbot_mcp.refused": {**_WHERE, "user": _STR, "tool": _STR,
                             "reason": {"enum": ["not_installed", "guest", "external", "budget_exhausted",
                                                 "limit_unreadable", "rate_limited", "unknown_tool",
                                                 "thread_only", "needs_approval", "slack_unavailable",
                                                 "model_refused"]}},
    # Per-person MCP sign-in (``"auth": "user"`` servers): ids and the configured server's names, never a token or
    # a tool's arguments.
    "tool.called_as": {**_WHERE, "run_id": _STR, "server": _STR, "tool": _STR, "user": _STR},
    "connection.created": {**_WHERE, "user": _STR, "server": _STR},
    "connection.removed": {**_WHERE, "user": _STR, "server": _STR,
                           "reason": {"enum": ["by_person", "invalid_grant", "deactivated", "resource_changed"]}},
}

#: The JSON Schema (2020-12) every line validates against.
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["event", "at", "v"],
    "properties": {"event": {"enum": list(EVENTS)}, "at": {"type": "string", "format": "date-time"},
                   "v": {"const": SCHEMA_VERSION}},
    "oneOf": [
        {"properties": {"event": {"const": event}, **fields}, "required": ["event", *fields],
         "additionalProperties": False, "patternProperties": {"^(event|at|v)$": True}}
        for event, fields in FIELDS.items()
    ],
}


class _Line(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


def configure(target: str) -> None:
    """Send the stream to ``target``: ``stdout``, ``off`` or a file path (created if missing, appended to)."""
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    where = target.strip()
    if where.lower() == OFF or not where:
        return
    handler: logging.Handler = (logging.StreamHandler(sys.stdout) if where.lower() == STDOUT
                                else logging.FileHandler(where, encoding="utf-8"))
    handler.setFormatter(_Line())
    log.addHandler(handler)


def enabled() -> bool:
    return bool(log.handlers)


def emit(event: AuditEvent, **fields: Any) -> None:
    """Write one line (nothing when ``AUDIT_LOG`` is off). ``fields`` are the event's, as :data:`FIELDS` lists."""
    if not log.handlers:
        return
    at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    line = json.dumps({"event": event, "at": at, "v": SCHEMA_VERSION, **fields}, ensure_ascii=False,
                      separators=(",", ":"))
    log.info("%s", line)


def registrable_domain(host: str) -> str:
    """The part of ``host`` someone registered, as the audit names a destination: ``attacker.example`` for
    ``c2VjcmV0.attacker.example``, whose labels in front may carry the data itself. By the Public Suffix List the
    package ships (never fetched); an IP address, or a name that is itself a public suffix, stays as it is."""
    name = host.strip().strip("[]").rstrip(".").lower()
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    return _suffixes().privatesuffix(name) or name


@functools.cache
def _suffixes() -> PublicSuffixList:
    return PublicSuffixList()
