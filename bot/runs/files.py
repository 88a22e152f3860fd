"""Files in: the files of a turn, and those posted earlier in its thread, downloaded for its run.

Each file is fetched through its ``url_private_download`` with the workspace's bot token (``files:read``),
streamed and capped: by its declared size first, then by the bytes read (``AGENT_FILE_MAX_BYTES`` per file,
``AGENT_FILES_MAX_BYTES_PER_RUN`` for the run), within ``AGENT_FILE_DOWNLOAD_TIMEOUT_SECONDS``. Its type is
sniffed from the bytes (``tools.sniff``), never taken from the name. A file that cannot be used (too large,
gone, another workspace's, a login page in its place) becomes an attachment with a ``note`` and no bytes: the
model is told, and the thread hears about the message's own files in one short reply before the run.

Earlier files: each run records its turn's files in the thread's ``files`` hash (expiring with the thread), and
the next runs of the thread get them too, newest first after their own, as far as the per-run cap allows; the
first run in a thread also reads the files of the messages before it (``conversations.replies``, once). The
token is only ever sent to Slack's own hosts (the Web API's host and its subdomains).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urljoin, urlsplit

import aiohttp
from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Attachment, ScriptCall
from bot.i18n import N_, _
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text
from bot.runs.turn import FileRef, Turn
from bot.settings import Settings
from bot.workspace.replies import format_bytes
from tools import sniff

log = logging.getLogger(__name__)

#: The task of a message that carries files and no text.
FILES_ONLY_TASK = "Look at the attached file(s) and tell me what they contain."
#: Files taken from one message (Slack allows 10 a message).
MAX_FILES_PER_MESSAGE = 10
#: Earlier files of the thread a run gets at most (newest first).
MAX_THREAD_FILES = 20
#: The thread's messages before the bot's first run in it whose files it reads (``conversations.replies``).
SCANNED_MESSAGES = 100
_SCANNED = "scanned"
#: Redirects followed within Slack's hosts (a redirect elsewhere is refused: the token stays with Slack).
MAX_REDIRECTS = 3
_CHUNK = 64 * 1024
_UNKNOWN_TYPE = "application/octet-stream"


class FileProblem(Exception):
    """Why a file cannot be used: ``str()`` in English for the model (it tells the asker in its own words), and
    ``shown()`` in the current locale for the notice to the person who posted the file."""

    def __init__(self, text: str, **fields: object) -> None:
        super().__init__(text.format(**fields))
        self.text = text
        self.fields = fields

    def shown(self) -> str:
        return _(self.text).format(**self.fields)


@dataclass(frozen=True, slots=True)
class FileCaps:
    """``AGENT_FILE_MAX_BYTES``, ``AGENT_FILES_MAX_BYTES_PER_RUN``, ``AGENT_FILE_DOWNLOAD_TIMEOUT_SECONDS``."""

    max_bytes: int
    max_bytes_per_run: int
    timeout: float

    @classmethod
    def of(cls, settings: Settings) -> FileCaps:
        return cls(settings.agent_file_max_bytes, settings.agent_files_max_bytes_per_run,
                   settings.agent_file_download_timeout_seconds)


def files_of_event(event: dict[str, object]) -> tuple[FileRef, ...]:
    """The files a message event carries (``files[]``), at most ``MAX_FILES_PER_MESSAGE``."""
    raw = event.get("files")
    refs = (FileRef.of_event(f) for f in raw) if isinstance(raw, list) else ()
    return tuple(r for r in refs if r is not None)[:MAX_FILES_PER_MESSAGE]


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


class FileFetcher:
    """Downloads one run's files with its workspace's client, within the caps."""

    def __init__(self, client: AsyncWebClient, ws: Workspace, caps: FileCaps) -> None:
        self.client = client
        self.ws = ws
        #: Each unusable file's problem, by file id: the notice to its poster words it in their language.
        self.problems: dict[str, FileProblem] = {}
        self.caps = caps
        api = urlsplit(client.base_url)
        self._slack_host = (api.hostname or "").lower()
        self._api_scheme = api.scheme

    async def fetch(self, refs: Sequence[FileRef]) -> tuple[Attachment, ...]:
        """One attachment per file, in order; a file that cannot be used carries a ``note`` and no bytes."""
        if not refs:
            return ()
        left = self.caps.max_bytes_per_run
        names: set[str] = set()
        out: list[Attachment] = []
        session = self.client.session
        own = session is None  # the client makes a session per call then; one for this run's files
        session = session or aiohttp.ClientSession()
        try:
            for ref in refs:
                try:
                    ref = await self._resolved(ref)  # a stub's name is known from here on
                    data = await self._download(session, ref, left)
                except FileProblem as problem:
                    self.problems[ref.id] = problem
                    out.append(Attachment(name=_unique(ref.name or ref.id, names), mimetype=ref.mimetype
                                          or _UNKNOWN_TYPE, data=b"", file_id=ref.id, note=str(problem)))
                    continue
                left -= len(data)
                out.append(Attachment(name=_unique(ref.name or ref.id, names), mimetype=sniff(data, ref.name),
                                      data=data, file_id=ref.id))
        finally:
            if own:
                await session.close()
        return tuple(out)

    async def _resolved(self, ref: FileRef) -> FileRef:
        """A Slack Connect stub filled in by ``files.info``; a file of another workspace refused."""
        if ref.stub or not ref.url:
            try:
                info = await self.client.files_info(file=ref.id)
            except SlackApiError as exc:
                error = str(exc.response.get("error") or "error")
                if error in ("file_not_found", "file_deleted"):
                    raise FileProblem(N_("Slack says it no longer exists (`{error}`)"), error=error) from exc
                raise FileProblem(N_("Slack would not describe it (`{error}`)"), error=error) from exc
            except (SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
                raise FileProblem(N_("Slack could not be asked about it ({error})"), error=type(exc).__name__) from exc
            full = FileRef.of_event(info.get("file"))
            if full is None:
                raise FileProblem(N_("Slack would not describe it"))
            ref = full
        if ref.team and self.ws.team_id != "-" and ref.team != self.ws.team_id:
            raise FileProblem(N_("it belongs to another workspace, whose files this app may not read"))
        if not ref.url:
            raise FileProblem(N_("Slack gave no download address for it"))
        return ref

    async def _download(self, session: aiohttp.ClientSession, ref: FileRef, left: int) -> bytes:
        cap = min(self.caps.max_bytes, left)
        if ref.size > cap:
            raise self._too_large(ref.size)
        try:
            async with asyncio.timeout(self.caps.timeout):
                return await self._get(session, ref, cap)
        except TimeoutError as exc:
            raise FileProblem(N_("its download took longer than {seconds} s"),
                              seconds=f"{self.caps.timeout:g}") from exc
        except aiohttp.ClientError as exc:
            raise FileProblem(N_("its download failed ({error})"), error=type(exc).__name__) from exc

    async def _get(self, session: aiohttp.ClientSession, ref: FileRef, cap: int) -> bytes:
        url = ref.url
        for _attempt in range(MAX_REDIRECTS + 1):
            if not self._is_slack(url):
                raise FileProblem(N_("its download address is not Slack's"))
            headers = {"Authorization": f"Bearer {self.client.token}"}
            async with session.get(url, headers=headers, allow_redirects=False) as resp:
                if resp.status in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
                    url = urljoin(url, resp.headers["Location"])
                    continue
                if resp.status == 404:
                    raise FileProblem(N_("Slack says it no longer exists (404)"))
                if resp.status != 200:
                    raise FileProblem(N_("Slack answered HTTP {status} for it"), status=resp.status)
                if _is_page(resp.content_type, ref.mimetype):
                    raise FileProblem(_LOGIN_PAGE)
                if (resp.content_length or 0) > cap:
                    raise self._too_large(resp.content_length or 0)
                data = bytearray()
                async for chunk in resp.content.iter_chunked(_CHUNK):
                    data += chunk
                    if len(data) > cap:
                        raise self._too_large(cap + 1, more=True)
                if _is_page(_html_start(bytes(data[:512])), ref.mimetype):
                    raise FileProblem(_LOGIN_PAGE)
                return bytes(data)
        raise FileProblem(N_("Slack redirected its download too many times"))

    def _is_slack(self, url: str) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("https", self._api_scheme) or not self._slack_host:
            return False
        return host == self._slack_host or host.endswith("." + self._slack_host)

    def _too_large(self, size: int, *, more: bool = False) -> FileProblem:
        """Over the cap per file, or over what the run's cap has left (the bytes read: ``more`` than shown)."""
        shown = format_bytes(size - 1 if more else size)
        if size > self.caps.max_bytes:
            text = (N_("it is more than {size}, over the {cap} limit per file") if more
                    else N_("it is {size}, over the {cap} limit per file"))
            return FileProblem(text, size=shown, cap=format_bytes(self.caps.max_bytes))
        text = (N_("it is more than {size}, more than what is left of the {cap} limit for all the files of one run")
                if more else N_("it is {size}, more than what is left of the {cap} limit for all the files of one run"))
        return FileProblem(text, size=shown, cap=format_bytes(self.caps.max_bytes_per_run))


_LOGIN_PAGE = N_(
    "Slack answered with a web page instead of the file (a login page: the app may lack the `files:read` scope; "
    "an admin can reinstall it)"
)


def _is_page(content_type: str, claimed: str) -> bool:
    """An HTML page where the file claimed another type: Slack's login page, not the file."""
    return content_type.split(";")[0].strip().lower() == "text/html" and claimed.lower() != "text/html"


def _html_start(head: bytes) -> str:
    """``text/html`` when the bytes open an HTML document."""
    start = head.lstrip().lower()
    return "text/html" if start.startswith((b"<!doctype html", b"<html")) else ""


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``stem (2).ext`` when the run has a file of that name already."""
    candidate, n = name, 1
    path = PurePosixPath(name)
    while candidate in taken:
        n += 1
        candidate = f"{path.stem} ({n}){path.suffix}"
    taken.add(candidate)
    return candidate


def problems_notice(
    attachments: Sequence[Attachment], own: Sequence[FileRef], problems: Mapping[str, FileProblem]
) -> str:
    """One short reply about the message's own files that cannot be used ("" when all can), in the current locale
    (``problems``: why each could not, by file id; the attachment's ``note`` is the same for the model, in English)."""
    ids = {f.id for f in own} & problems.keys()
    lines = [f"• *{a.name}*: {problems[a.file_id].shown()}" for a in attachments if a.file_id in ids]
    if not lines:
        return ""
    return "\n".join([_(":warning: I can't use every file you attached; I'll go on without these:"), *lines])


async def gather_attachments(
    turn: Turn, client: AsyncWebClient, refs: Sequence[FileRef], caps: FileCaps
) -> tuple[tuple[Attachment, ...], str]:
    """The run's attachments (``refs``: ``EarlierFiles.for_run``'s) and the notice about the problems of the
    turn's own files ("" when none)."""
    if not refs:
        return (), ""
    fetcher = FileFetcher(client, turn.workspace, caps)
    attachments = await fetcher.fetch(refs)
    for a in attachments:
        if a.note:
            log.info("file %s (%s) of run %s not used: %s", a.file_id, a.name, turn.run_id, a.note)
    return attachments, problems_notice(attachments, turn.files, fetcher.problems)
