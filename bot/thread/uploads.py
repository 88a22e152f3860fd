"""Files out: a long answer (``answer.md``, or a canvas with ``AGENT_ANSWER_CANVAS``) or a file the model handed
over (``attach_file``), put into the run's thread.

Files go up with slack_sdk's ``files_upload_v2`` (files.getUploadURLExternal, the bytes POSTed to the URL it
gives, files.completeUploadExternal with the channel and thread; scope ``files:write``). A canvas is
``canvases.create`` (``canvases:write``), made readable by the thread's channel (``canvases.access.set``) and
linked by its permalink (``files.info``); where any of that is refused, the answer goes as a file instead.

An upload Slack refuses (an install from before ``files:write``, ``not_allowed``, a workspace that blocks app
files...) returns False and the caller falls back to messages, so nothing is lost; each kind of refusal is
logged once per workspace. Files the model attaches wait in :class:`ThreadFiles` (the tools' ``Outbox`` port)
until the sink sends them at the end of their step, after the step's own reply.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import N_, _
from bot.turn import Target
from tools import OutgoingFile

log = logging.getLogger(__name__)

#: The name a long answer is uploaded under, and the title of its canvas.
ANSWER_FILE_NAME = "answer.md"
ANSWER_TITLE = N_("The full answer")
#: Files one run may attach (``attach_file`` calls past it are refused with this number).
MAX_FILES_PER_RUN = 10
#: How long a workspace's refusal stays logged as known (then it is logged once more).
REFUSAL_LOG_SECONDS = 86_400
_FAILURES = (SlackRequestError, aiohttp.ClientError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Filed:
    """Where an answer too long for messages went: the file ``answer.md``, or a canvas (its link)."""

    chars: int
    canvas_url: str = ""


class ThreadFiles:
    """One run's files out: the answer's length rule, the queue of attached files, and the uploads."""

    def __init__(
        self, client: AsyncWebClient, target: Target, *, answer_chars: int, canvas: bool = False,
        redis: Redis | None = None, refused_key: Callable[[str], str] | None = None,
    ) -> None:
        """``answer_chars``: ``AGENT_ANSWER_FILE_CHARS`` (0: answers are never filed); ``canvas``:
        ``AGENT_ANSWER_CANVAS``; ``refused_key(kind)``: the workspace's key in ``redis`` saying a refusal of that
        kind (``file``, ``canvas``) was logged already."""
        self.client = client
        self.target = target
        self.answer_chars = answer_chars
        self.canvas = canvas
        self._redis = redis
        self._refused_key = refused_key
        self._pending: list[OutgoingFile] = []
        self._taken = 0
        self._filed: Filed | None = None

    def files_answer(self, answer: str) -> bool:
        """Whether ``answer`` is too long for messages and goes as a file (or canvas)."""
        return 0 < self.answer_chars < len(answer)

    async def file_answer(self, answer: str) -> Filed | None:
        """Put an answer too long for messages in a canvas (when asked) or a file; None when it goes as messages
        (short enough, or Slack refused). Done once: a stream refused after it falls back to replies."""
        if self._filed is None and self.files_answer(answer):
            url = await self._canvas(answer) if self.canvas else ""
            if url or await self.upload(OutgoingFile(ANSWER_FILE_NAME, answer, "text/markdown", _(ANSWER_TITLE))):
                self._filed = Filed(len(answer), url)
        return self._filed

    # -- the tools' Outbox port ---------------------------------------------------------------------------------
    async def attach(self, file: OutgoingFile) -> str:
        if self._taken >= MAX_FILES_PER_RUN:
            raise ValueError(f"a run may attach at most {MAX_FILES_PER_RUN} files; this one was not attached")
        self._taken += 1
        self._pending.append(file)
        return f"{file.name} ({len(file.content):,} characters) will be attached to the thread when this step ends."

    def take_pending(self) -> list[OutgoingFile]:
        """The attached files not sent yet (each is handed out once)."""
        pending, self._pending = self._pending, []
        return pending

    # -- Slack --------------------------------------------------------------------------------------------------
    async def upload(self, file: OutgoingFile) -> bool:
        """Upload ``file`` into the thread; False when Slack refused it or did not answer (the caller falls back)."""
        try:
            await self.client.files_upload_v2(
                channel=self.target.channel_id, thread_ts=self.target.thread_ts, filename=file.name,
                content=file.content.encode(), title=file.title or file.name,
            )
        except SlackApiError as exc:
            await self._refused("file", exc)
            return False
        except _FAILURES as exc:
            log.warning("file upload into %s failed (%s); sent as messages", self.target.channel_id,
                        type(exc).__name__)
            return False
        return True

    async def _canvas(self, markdown: str) -> str:
        """A canvas holding ``markdown`` that the thread's channel may read; its link, or "" when refused."""
        canvas_id = ""
        try:
            created = await self.client.canvases_create(
                title=_(ANSWER_TITLE), document_content={"type": "markdown", "markdown": markdown}
            )
            canvas_id = str(created.get("canvas_id") or "")
            await self.client.canvases_access_set(
                canvas_id=canvas_id, access_level="read", channel_ids=[self.target.channel_id]
            )
            info = await self.client.files_info(file=canvas_id)
            url = str((info.get("file") or {}).get("permalink") or "")
        except SlackApiError as exc:
            await self._refused("canvas", exc)
            url = ""
        except _FAILURES as exc:
            log.warning("canvas for %s failed (%s); the answer goes as a file", self.target.channel_id,
                        type(exc).__name__)
            url = ""
        if canvas_id and not url:  # made, but nobody could open it: not left behind
            with contextlib.suppress(SlackApiError, *_FAILURES):
                await self.client.canvases_delete(canvas_id=canvas_id)
        return url

    async def _refused(self, kind: str, exc: SlackApiError) -> None:
        error = str(exc.response.get("error") or exc.response.status_code)
        first = True
        if self._redis is not None and self._refused_key is not None:
            with contextlib.suppress(RedisError):
                first = bool(await self._redis.set(self._refused_key(kind), error, nx=True, ex=REFUSAL_LOG_SECONDS))
        if not first:
            log.debug("%s refused again (%s)", kind, error)
            return
        scope = "files:write" if kind == "file" else "canvases:write and files:read"
        hint = f" (reinstall the app to grant {scope})" if error == "missing_scope" else ""
        then = "long answers and attached files go as messages" if kind == "file" else "long answers go as files"
        log.warning("Slack refused a %s in workspace %s (%s)%s: %s", "file upload" if kind == "file" else kind,
                    self.target.conversation.workspace.team_id, error, hint, then)
