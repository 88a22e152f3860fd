"""Files in: the files of a turn, and those posted earlier in its thread, gathered for its run.

They are downloaded by ``bot.runs.downloads``. A file that cannot be used becomes an attachment with a ``note``
and no bytes: the model is told, and the thread hears about the message's own files in one short reply before
the run.

Earlier files: each run records its turn's files in the thread's ``files`` hash (expiring with the thread), and
the next runs of the thread get them too, newest first after their own, as far as the per-run cap allows; the
first run in a thread also reads the files of the messages before it (``conversations.replies``, once).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

import aiohttp
from redis.asyncio import Redis
from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Attachment, ScriptCall
from bot.i18n import _
from bot.keys import AppKeys
from bot.markup import escape
from bot.redis import as_text
from bot.runs.downloads import FileCaps, FileFetcher, FileProblem
from bot.turn import FileRef, Turn, files_of_event

log = logging.getLogger(__name__)

#: The task of a message that carries files and no text.
FILES_ONLY_TASK = "Look at the attached file(s) and tell me what they contain."
#: Earlier files of the thread a run gets at most (newest first).
MAX_THREAD_FILES = 20
#: The thread's messages before the bot's first run in it whose files it reads (``conversations.replies``).
SCANNED_MESSAGES = 100
_SCANNED = "scanned"


# KEYS[1]: the thread's files hash. ARGV: its ttl seconds, then field, value, ...
_RECORD = """
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
"""


class EarlierFiles:
    """The files posted in a thread, so a follow-up run can use them (the thread's ``files`` hash).

    The hash holds each turn's files, and once (field ``scanned``) those of the thread's messages before the bot's
    first run in it: a reply mentioning the bot under a message with a PDF gets the PDF. Neither its read nor its
    write costs a round trip of its own: the run reads it with its preflight (``key``) and writes it with its
    ledger's opening (the ``ScriptCall`` of ``for_run``).
    """

    def __init__(self, redis: Redis, keys: AppKeys, ttl_seconds: int) -> None:
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self._record = redis.register_script(_RECORD)

    def key(self, turn: Turn) -> str:
        return self.keys.thread_files(turn.thread)

    async def for_run(
        self, turn: Turn, client: AsyncWebClient, stored: Mapping[bytes | str, bytes | str]
    ) -> tuple[tuple[FileRef, ...], tuple[ScriptCall, ...]]:
        """The turn's own files, then the thread's earlier ones (newest first), from the hash as ``stored``; and
        the write recording the turn's for later (none when there is nothing new), for the caller to send."""
        new = [(turn.message_ts, ref) for ref in turn.files]
        just_scanned = False
        if not any(as_text(field) == _SCANNED for field in stored):
            found = await _files_before(turn, client)
            just_scanned = found is not None
            new.extend(found or ())
        own = {f.id for f in turn.files}
        records = [*(_record(ts, ref) for ts, ref in new)]
        earlier: dict[str, tuple[float, FileRef]] = {}
        raws: list[str | bytes] = [*stored.values(), *records]
        for raw in raws:
            try:
                record = json.loads(raw)
                ref, when = FileRef.from_record(record["file"]), float(record["ts"])
            except (ValueError, TypeError, KeyError):
                continue  # the marker, or not written by this code: skipped, never fatal
            if ref.id not in own and when < float(turn.message_ts):
                earlier[ref.id] = (when, ref)
        fields = [item for (_ts, ref), raw in zip(new, records, strict=True) for item in (ref.id, raw)]
        if just_scanned:
            fields += [_SCANNED, "1"]
        writes = (ScriptCall(self._record, [self.key(turn)], [self.ttl_seconds, *fields]),) if fields else ()
        newest = sorted(earlier.values(), key=lambda e: e[0], reverse=True)[:MAX_THREAD_FILES]
        return (*turn.files, *(ref for _ts, ref in newest)), writes


def _record(ts: str, ref: FileRef) -> str:
    return json.dumps({"ts": ts, "file": ref.to_record()})


async def _files_before(turn: Turn, client: AsyncWebClient) -> list[tuple[str, FileRef]] | None:
    """The files of the thread's messages before this turn, when it is a reply (``[]`` for a thread's first
    message); None when Slack could not say (the next run asks again)."""
    if turn.reply_thread_ts == turn.message_ts:
        return []
    try:
        reply = await client.conversations_replies(
            channel=turn.conversation.channel_id, ts=turn.reply_thread_ts, latest=turn.message_ts, inclusive=False,
            limit=SCANNED_MESSAGES,
        )
    except (SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
        log.info("the files of thread %s were not read: %s", turn.thread, exc)
        return None
    messages = reply.get("messages") or []
    return [
        (str(m["ts"]), ref) for m in messages
        if isinstance(m, dict) and not m.get("bot_id") and _before(m.get("ts"), turn.message_ts)
        for ref in files_of_event(m)
    ]


def _before(ts: object, than: str) -> bool:
    """``ts`` is a message ts older than ``than`` (anything else is not)."""
    try:
        return isinstance(ts, str) and float(ts) < float(than)
    except ValueError:
        return False



def problems_notice(
    attachments: Sequence[Attachment], own: Sequence[FileRef], problems: Mapping[str, FileProblem]
) -> str:
    """One short reply about the message's own files that cannot be used ("" when all can), in the current locale
    (``problems``: why each could not, by file id; the attachment's ``note`` is the same for the model, in English)."""
    ids = {f.id for f in own} & problems.keys()
    lines = [f"• *{escape(a.name)}*: {problems[a.file_id].shown()}" for a in attachments if a.file_id in ids]
    if not lines:
        return ""
    return "\n".join([_(":warning: I can't use every file you attached; I'll go on without these:"), *lines])


async def gather_attachments(
    turn: Turn, client: AsyncWebClient, refs: Sequence[FileRef], caps: FileCaps, *, external: bool = True
) -> tuple[tuple[Attachment, ...], str]:
    """The run's attachments (``refs``: ``EarlierFiles.for_run``'s) and the notice about the problems of the
    turn's own files ("" when none); ``external``: files from outside the workspace are read."""
    if not refs:
        return (), ""
    fetcher = FileFetcher(client, turn.workspace, caps, external=external)
    attachments = await fetcher.fetch(refs)
    for a in attachments:
        if a.note:
            log.info("file %s (%s) of run %s not used: %s", a.file_id, a.name, turn.run_id, a.note)
    return attachments, problems_notice(attachments, turn.files, fetcher.problems)
