"""``ThreadSettings``: the thread stage's piece of ``Settings``, how long a thread is kept and how it is written."""

from __future__ import annotations

from pydantic import Field

from agent_core import DEFAULT_TTL_SECONDS
from bot.settings_base import SettingsPiece

#: Past this many characters an answer goes as a file: Slack's cap on one Markdown message (12,000); the
#: replies display would split it over two or more messages of 8,000.
DEFAULT_ANSWER_FILE_CHARS = 12_000


class ThreadSettings(SettingsPiece):
    """A thread's retention, the pace of its posts, edits and streams, and where a long answer goes."""

    thread_retention_days: float = Field(
        default=DEFAULT_TTL_SECONDS / 86_400, gt=0,
        description="Days a thread's history, progress and trace are kept after its last step.",
    )
    slack_stream_interval_seconds: float = Field(
        default=1.0, ge=0, description="Least time between two chat.appendStream calls of one stream (0: none)."
    )
    slack_posts_per_second: float = Field(
        default=1.0, ge=0, description="Per-channel chat.postMessage pace across all workers (0: no pacing)."
    )
    slack_updates_per_minute: float = Field(
        default=50.0, ge=0, description="Per-workspace chat.update pace across all workers (0: no pacing)."
    )
    agent_answer_file_chars: int = Field(
        default=DEFAULT_ANSWER_FILE_CHARS, ge=0,
        description="Answer length (characters) past which it is uploaded into the thread as answer.md under a "
        "short summary, not split over messages (0: never).",
    )
    agent_answer_canvas: bool = Field(
        default=False, description="Put an answer past AGENT_ANSWER_FILE_CHARS in a canvas the channel may read "
        "(canvases:write, files:read) instead of answer.md; where Slack refuses, it goes as the file.",
    )

    @property
    def thread_ttl_seconds(self) -> int:
        return max(1, int(self.thread_retention_days * 86_400))
