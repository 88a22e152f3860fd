"""A turn: one human message to answer, the unit a run runs (stored in its thread's queue, :mod:`bot.queue.turns`).

Kernel values every stage passes along: the ``Turn``, the files its message carries (``FileRef``, read from an
event by ``files_of_event``), where its run speaks (``Target``), and the one codec of the composite ids that name a
run across processes (``join_id``/``split_id``; ``RunRef`` for the Stop and feedback buttons, ``Turn.lease_id`` for
a run's lease).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from bot.identity import Conversation, Workspace

#: Joins the parts of a composite id: a thread id (``E/T/C/ts``), a ts, a run id and a request id never hold it.
ID_SEP = "|"
#: Files taken from one message (Slack allows 10 a message).
MAX_FILES_PER_MESSAGE = 10


def join_id(*parts: str) -> str:
    """A composite id (a lease's name, a button's value) from its parts, read back by ``split_id``."""
    return ID_SEP.join(parts)


def split_id(value: object, shape: str) -> list[str]:
    """The parts of a composite id ``join_id`` wrote, as many as ``shape`` names (``"thread|run"``); ValueError for
    anything else: not text, another number of parts, or an empty one."""
    if not isinstance(value, str):
        raise ValueError(f"a {shape} value must be text, got {type(value).__name__}")
    parts = value.split(ID_SEP)
    if len(parts) != shape.count(ID_SEP) + 1 or not all(parts):
        raise ValueError(f"a value must be {shape}, got {value[:200]!r}")
    return parts


@dataclass(frozen=True, slots=True)
class RunRef:
    """Names one run of one thread across processes: the Stop button's value, and a feedback button's after its
    vote. Read back only as a thread id this code writes (``Conversation.parse``), so its workspace is known."""

    thread: str
    run_id: str

    def value(self) -> str:
        return join_id(self.thread, self.run_id)

    @classmethod
    def parse(cls, value: object) -> RunRef:
        """A value ``value`` wrote; ValueError for anything else."""
        thread, run_id = split_id(value, "thread|run")
        Conversation.parse(thread)
        return cls(thread, run_id)

    @property
    def workspace(self) -> Workspace:
        return Conversation.parse(self.thread).workspace


@dataclass(frozen=True, slots=True)
class Target:
    """Where a run speaks: its conversation (whose channel it posts in), the Slack thread to reply in (a DM
    conversation spans many), and the human message that asked."""

    conversation: Conversation
    thread_ts: str
    message_ts: str

    @property
    def channel_id(self) -> str:
        return self.conversation.channel_id


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file attached to a message, as the event names it; its bytes are fetched when the run starts
    (:mod:`bot.runs.files`). Everything here is what Slack claims: the bytes decide the type."""

    id: str
    name: str = ""
    mimetype: str = ""
    """Slack's claim, from the name; the run sniffs the real type from the bytes."""
    size: int = 0
    """Declared size in bytes (0: not given); refused against the caps before any download."""
    url: str = ""
    """``url_private_download``: needs the workspace's bot token (scope ``files:read``)."""
    team: str = ""
    """The workspace the file belongs to (``user_team``, else ``source_team``), when the event says."""
    stub: bool = False
    """A Slack Connect stub (``file_access: check_file_info``): ``files.info`` gives the rest."""

    @classmethod
    def of_event(cls, raw: Any) -> FileRef | None:
        """From one entry of a message event's ``files[]``; None when it names no file."""
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
            return None

        def text(name: str) -> str:
            value = raw.get(name)
            return value if isinstance(value, str) else ""

        size = raw.get("size")
        return cls(
            raw["id"], name=text("name") or text("title"), mimetype=text("mimetype"),
            size=size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0,
            url=text("url_private_download") or text("url_private"), team=text("user_team") or text("source_team"),
            stub=raw.get("file_access") == "check_file_info",
        )

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"id": self.id, "name": self.name, "mimetype": self.mimetype, "size": self.size,
                                  "url": self.url, "team": self.team}
        if self.stub:
            record["stub"] = True
        return record

    @classmethod
    def from_record(cls, record: Any) -> FileRef:
        """What ``to_record`` wrote; raises ``TypeError`` for anything else."""
        if not isinstance(record, dict):
            raise TypeError("a file record is a JSON object")
        values = {name: record.get(name, "") for name in ("id", "name", "mimetype", "url", "team")}
        size, stub = record.get("size", 0), record.get("stub", False)
        if not all(isinstance(v, str) for v in values.values()) or not values["id"]:
            raise TypeError(f"a file record's fields are strings and it has an id, got {record!r:.200}")
        if not isinstance(size, int) or not isinstance(stub, bool):
            raise TypeError(f"a file record's size is a number, got {record!r:.200}")
        return cls(size=size, stub=stub, **values)


@dataclass(frozen=True, slots=True)
class Turn:
    """One human message to answer: the conversation it continues and where to reply.

    Stored as JSON in the thread's ``turns`` hash (``to_json``): the conversation is written out as its id and
    its parts, the shape every version reads (the gate's Lua reads ``user_id`` from it too).
    """

    conversation: Conversation
    """A channel thread, or a whole DM."""
    turn_id: str
    """The message's ts: unique in its channel, so retries and double deliveries map to one turn."""
    text: str
    user_id: str
    reply_thread_ts: str
    """The Slack thread the replies go in (a DM conversation spans many)."""
    message_ts: str
    files: tuple[FileRef, ...] = ()
    """The files attached to the message (stored only when there are some: older readers see the same shape)."""
    action_token: str = ""
    """The event's ``action_token`` ("": none): lets the run's ``slack_search`` search as the asker (stored only
    when present, like ``files``)."""
    traceparent: str = ""
    """The W3C ``traceparent`` of the event's receipt ("": tracing off), which the worker's spans continue (stored
    only when present, like ``files``)."""
    schedule_id: str = ""
    """The schedule whose fire this turn is ("": a person's message); its outcome is reported to the schedule's
    creator (:mod:`bot.workspace.schedules.outcomes`). Stored only when present, like ``files``."""
    viewing: str = ""
    """The channel the asker was looking at when they wrote in the agent pane (``app_context_changed``), of the
    turn's own workspace ("": none): the run's "this channel" (``channel_history``, ``slack_search``'s
    ``context_channel_id``). Stored only when present, like ``files``."""

    def to_json(self) -> str:
        conv, ws = self.conversation, self.conversation.workspace
        record: dict[str, Any] = {
            "thread": conv.id, "turn_id": self.turn_id, "text": self.text, "user_id": self.user_id,
            "team_id": ws.team_id, "enterprise_id": ws.enterprise_id, "channel_id": conv.channel_id,
            "reply_thread_ts": self.reply_thread_ts, "message_ts": self.message_ts,
        }
        if self.files:
            record["files"] = [f.to_record() for f in self.files]
        if self.action_token:
            record["action_token"] = self.action_token
        if self.traceparent:
            record["traceparent"] = self.traceparent
        if self.schedule_id:
            record["schedule_id"] = self.schedule_id
        if self.viewing:
            record["viewing"] = self.viewing
        return json.dumps(record, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Turn:
        """A stored turn; raises ``ValueError`` or ``TypeError`` for a record this code did not write. The
        conversation is read from its id alone: the copies of its parts beside it are for older readers."""
        record: Any = json.loads(raw)
        if not isinstance(record, dict):
            raise TypeError("a turn record is a JSON object")

        def text(name: str) -> str:
            value = record.get(name)
            if not isinstance(value, str):
                raise TypeError(f"a turn record's {name!r} is a string, got {value!r}")
            return value

        files = record.get("files", [])
        if not isinstance(files, list):
            raise TypeError("a turn record's 'files' is a list")
        return cls(
            Conversation.parse(text("thread")), text("turn_id"), text("text"), text("user_id"),
            text("reply_thread_ts"), text("message_ts"), tuple(FileRef.from_record(f) for f in files),
            text("action_token") if "action_token" in record else "",
            text("traceparent") if "traceparent" in record else "",
            text("schedule_id") if "schedule_id" in record else "",
            text("viewing") if "viewing" in record else "",
        )

    @property
    def thread(self) -> str:
        """The conversation's id (``Conversation.id``), as the keys, the run ids and the jobs carry it."""
        return self.conversation.id

    @property
    def workspace(self) -> Workspace:
        return self.conversation.workspace

    @property
    def target(self) -> Target:
        """Where this turn's replies go."""
        return Target(self.conversation, self.reply_thread_ts, self.message_ts)

    @property
    def run_id(self) -> str:
        # A ts is unique within its channel only: the thread goes in too, so two workspaces' (or channels')
        # runs never share budget holds or trace bindings.
        digest = hashlib.sha256(self.lease_id.encode()).hexdigest()[:12]
        return f"run-{self.turn_id}-{digest}"

    @property
    def lease_id(self) -> str:
        """The run's lease name: the thread and the turn, so a worker taking it over knows what to resume
        (``parse_lease_id``)."""
        return join_id(self.thread, self.turn_id)

    @property
    def run(self) -> RunRef:
        """This turn's run, as its buttons name it."""
        return RunRef(self.thread, self.run_id)


def parse_lease_id(value: str) -> tuple[Conversation, str]:
    """``(conversation, turn_id)`` of a name ``Turn.lease_id`` wrote; ValueError for anything else."""
    thread, turn_id = split_id(value, "thread|turn")
    return Conversation.parse(thread), turn_id


def files_of_event(event: dict[str, object]) -> tuple[FileRef, ...]:
    """The files a message event carries (``files[]``), at most ``MAX_FILES_PER_MESSAGE``."""
    raw = event.get("files")
    refs = (FileRef.of_event(f) for f in raw) if isinstance(raw, list) else ()
    return tuple(r for r in refs if r is not None)[:MAX_FILES_PER_MESSAGE]
