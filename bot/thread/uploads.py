"""Files out: a long answer (``answer.md``) or a file the model handed over (``attach_file``), uploaded into the
run's thread with slack_sdk's ``files_upload_v2`` (files.getUploadURLExternal, the bytes POSTed to the URL it
gives, files.completeUploadExternal with the channel and thread; scope ``files:write``).

An upload Slack refuses (an install from before ``files:write``, ``not_allowed``, a workspace that blocks app
files...) returns False and the caller falls back to messages, so nothing is lost; the refusal is logged once
per workspace. Files the model attaches wait in :class:`ThreadFiles` (the tools' ``Outbox`` port) until the sink
sends them at the end of their step, after the step's own reply.
"""

from __future__ import annotations

import contextlib
import logging

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from bot.thread.poster import Target
from tools import OutgoingFile

log = logging.getLogger(__name__)

#: The name a long answer is uploaded under.
ANSWER_FILE_NAME = "answer.md"
#: Files one run may attach (``attach_file`` calls past it are refused with this number).
MAX_FILES_PER_RUN = 10
#: How long a workspace's refused upload stays logged as known (then it is logged once more).
REFUSAL_LOG_SECONDS = 86_400


class ThreadFiles:
    """One run's files out: the answer's length rule, the queue of attached files, and the upload itself."""

    def __init__(
        self, client: AsyncWebClient, target: Target, *, answer_chars: int, redis: Redis | None = None,
        refused_key: str = "",
    ) -> None:
        """``answer_chars``: ``AGENT_ANSWER_FILE_CHARS`` (0: answers are never filed); ``refused_key``: the
        workspace's key in ``redis`` saying its refused upload was logged already."""
        self.client = client
        self.target = target
        self.answer_chars = answer_chars
        self._redis = redis
        self._refused_key = refused_key
        self._pending: list[OutgoingFile] = []
        self._taken = 0
        #: The answer went up as a file already (a stream refused after it falls back to replies: not twice).
        self.answer_filed = False

    def files_answer(self, answer: str) -> bool:
        """Whether ``answer`` is too long for messages and goes as a file."""
        return 0 < self.answer_chars < len(answer)

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

    # -- uploading ----------------------------------------------------------------------------------------------
    async def upload(self, file: OutgoingFile) -> bool:
        """Upload ``file`` into the thread; False when Slack refused it or did not answer (the caller falls back)."""
        try:
            await self.client.files_upload_v2(
                channel=self.target.channel_id, thread_ts=self.target.thread_ts, filename=file.name,
                content=file.content.encode(), title=file.title or file.name,
            )
        except SlackApiError as exc:
            await self._refused(str(exc.response.get("error") or exc.response.status_code))
            return False
        except (SlackRequestError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("file upload into %s failed (%s); sent as messages", self.target.channel_id,
                        type(exc).__name__)
            return False
        return True

    async def _refused(self, error: str) -> None:
        first = True
        if self._redis is not None and self._refused_key:
            with contextlib.suppress(RedisError):
                first = bool(await self._redis.set(self._refused_key, error, nx=True, ex=REFUSAL_LOG_SECONDS))
        if first:
            hint = " (reinstall the app to grant files:write)" if error == "missing_scope" else ""
            log.warning("Slack refused a file upload in workspace %s (%s)%s: long answers and attached files go "
                        "as messages", self.target.conversation.workspace.team_id, error, hint)
        else:
            log.debug("file upload refused again (%s); sent as messages", error)
