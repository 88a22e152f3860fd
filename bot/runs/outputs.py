"""What a run writes to its thread, built per run: its ledger, its working status, its files out and its sink."""

from __future__ import annotations

from functools import partial

from redis.asyncio import Redis

from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.runs.settings import RunsSettings
from bot.thread import render
from bot.thread.agent_session import AgentSession, session_title
from bot.thread.fallback import StreamOrReplies
from bot.thread.open_streams import LEFT_GRACE_SECONDS, OpenStreams
from bot.thread.poster import Pacer, Poster, ThreadStatus
from bot.thread.sink import PostedSoFar, RunSink, SinkParts, SlackEventSink
from bot.thread.stream_sink import StreamEventSink
from bot.thread.uploads import ThreadFiles
from bot.turn import Turn
from bot.workspace import Display, Verbosity

#: chat.appendStream calls a minute per workspace, below its Tier 4 limit (100+).
STREAM_CALLS_PER_MINUTE = 90


class ThreadOutputs:
    """Builds each run's writers to its thread, over the worker's shared stream pacer and open-stream records."""

    def __init__(self, settings: RunsSettings, redis: Redis, keys: AppKeys, clients: WorkspaceClients) -> None:
        self.settings, self.redis, self.keys = settings, redis, keys
        # chat.appendStream is Tier 4 (100+ a minute per workspace): every stream of a workspace shares this,
        # on top of each stream's own SLACK_STREAM_INTERVAL_SECONDS.
        per_second = STREAM_CALLS_PER_MINUTE / 60 if settings.slack_stream_interval_seconds > 0 else 0
        self.stream_pacer = Pacer(redis, per_second=per_second, burst=10)
        # A stream outlives no run: past a run's longest life (and its lease's lapse), one still open was left.
        self.open_streams = OpenStreams(redis, keys, clients, abandoned_seconds=(
            settings.agent_max_seconds + 2 * settings.agent_lease_seconds + LEFT_GRACE_SECONDS))

    def ledger(self, turn: Turn) -> PostedSoFar:
        return PostedSoFar(self.redis, self.keys.run(turn.thread, turn.run_id), self.settings.thread_ttl_seconds)

    def files(self, turn: Turn, poster: Poster) -> ThreadFiles:
        """The run's files out: a long answer, and the files its tools attach (uploaded by its sink)."""
        return ThreadFiles(
            poster.client, turn.target, answer_chars=self.settings.agent_answer_file_chars,
            canvas=self.settings.agent_answer_canvas, redis=self.redis,
            refused_key=partial(self.keys.upload_refused, turn.workspace),
        )

    def fallback_key(self, turn: Turn) -> str:
        """The workspace's flag that Slack refused it agent sessions (``bot.thread.agent_session``)."""
        return self.keys.session_fallback(turn.workspace)

    def status(self, turn: Turn, poster: Poster, *, sessions_refused: bool | None = None) -> ThreadStatus:
        """The run's "working" status: its thread's agent session (named by its first line when the turn opened
        the thread), else the assistant status (``bot.thread.agent_session``). ``sessions_refused``: the
        workspace's fallback flag, when the caller read it already."""
        target = turn.target
        session = AgentSession(
            poster.client, target.channel_id, target.thread_ts, title=session_title(turn.text),
            names=target.message_ts == target.thread_ts, redis=self.redis,
            fallback_key=self.fallback_key(turn), refused=sessions_refused,
        )
        return ThreadStatus(poster.client, target, session=session)

    def sink(
        self, turn: Turn, view: render.RunView, ledger: PostedSoFar, poster: Poster, shown: tuple[Display, Verbosity],
        *, files: ThreadFiles | None = None, status: ThreadStatus | None = None,
    ) -> RunSink:
        """The thread's renderer for one run, in the workspace's display and verbosity."""
        display, verbosity = shown
        parts = SinkParts(poster, turn.target, view, ledger, verbosity, status or self.status(turn, poster),
                          files or self.files(turn, poster))
        if display == "replies":
            return SlackEventSink(parts)
        ws = turn.workspace
        stream = StreamEventSink(
            parts, display=display, recipient_user_id=turn.user_id,
            interval=self.settings.slack_stream_interval_seconds,
            pacer=self.stream_pacer, pace_key=self.keys.rate(ws, "slack:stream"),
            trackers=partial(self.open_streams.tracker, ws, turn.target.channel_id, turn.target.thread_ts),
        )
        return StreamOrReplies(stream, redis=self.redis, fallback_key=self.keys.stream_fallback(ws))
