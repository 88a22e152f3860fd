"""Fake Slack Web API: real HTTP on loopback, recording every call, with Slack's size limits and injected failures.

The app reaches it through ``SLACK_API_URL`` with the real ``AsyncWebClient`` (design practice 8), so request
building, the rate-limit retry handler and error mapping are all exercised::

    async with FakeSlack() as slack:
        slack.fail("chat.postMessage", status=429, retry_after=0)   # the next call gets a 429
        ...                                                          # drive the app
        posts = slack.thread_messages("C1", "1700000000.000100")     # what a person would see, in order
        await slack.wait_for("chat.postMessage", count=3)            # woken by the server, never polled

Limits follow Slack's documentation: ``chat.postMessage`` truncates ``text`` past 40,000 characters (the
fake records ``truncated``), more than 50 blocks or a section over 3,000 characters is ``invalid_blocks``,
block text over 12,000 characters in total is ``msg_blocks_too_long``, and ``chat.update`` rejects a text
over 4,000 bytes with ``msg_too_long``. A well-behaved app never sees any of these.

Streams: ``chat.startStream`` / ``appendStream`` / ``stopStream`` build a :class:`Stream` (its Markdown, the last
state and the history of each task card, the plan title, the final blocks), also listed in ``messages`` with its
Markdown as text. Each call is checked against Slack's documented limits: ``markdown_text`` at most 12,000
characters per call (``msg_too_long``); chunks of a known type and shape, task titles, details and output at most
256 characters, a known status (``invalid_chunks``); ``recipient_user_id``/``recipient_team_id`` outside DMs; no
call on a stopped stream (``message_not_in_streaming_state``); final blocks as for posts, feedback buttons with
Slack's text and value limits. ``assistant.threads.setSuggestedPrompts`` (1 to 4 prompts) and ``setTitle`` are
recorded in ``suggested_prompts`` (the prompts' heading in ``prompt_titles``) and ``titles``; with ``agent_view``
set, prompts given a ``thread_ts`` are dropped without an error, as Slack does for agent apps.

OAuth: ``add_install(code, Grant(...))`` makes ``oauth.v2.access`` answer that code once (plain, rotating with
``refresh_token``/``expires_in``, or org-wide); a refresh spends the refresh token and revokes the old access
token; ``auth.test`` answers per issued token; a revoked token gets ``token_revoked`` from every method, and
``Call.token`` / ``tokens_used(method)`` tell which token each call carried.

Files in: ``add_file(FakeFile(...))`` returns the ``files[]`` entry of a message event; ``files.info`` describes
it and ``url_private_download`` serves it (``Authorization: Bearer`` required, else a redirect to an HTML login
page, as Slack does), or answers 404, a login page, slowly, or more bytes than declared; ``downloads`` records
each download (file id, token).

Real-time Search: ``search`` (a :class:`FakeSearch`) holds what ``assistant.search.context`` finds and the
``action_token`` values Slack handed out; a bot token must send one of them (``invalid_action_token``), a token
that is neither a bot's nor a user's gets ``not_allowed_token_type``, and ``search.scope_granted = False`` answers
``missing_scope``. Results come in Slack's documented shape (``results.messages``/``files``, ``next_cursor``), each
found only in the ``channel_types`` asked (Slack's default: ``public_channel``), a result's kind being what
``conversations.info`` says of its ``channel_id`` (``channels``; ``D...`` is a DM).

Agent sessions: ``agents.sessions.setStatus`` and ``agents.sessions.rename`` keep ``sessions`` and
``session_statuses``, checked as Slack documents them (a known status, titles of at most 200 characters, a rename
only of a session that exists: ``session_not_found``). They are refused (``agent_sessions_refusal``, by default
``not_allowed``) as for an app not declared as an agent; set it to "" for one that is.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl

from aiohttp import web

__all__ = [
    "Call", "FakeFile", "FakeSlack", "Failure", "Grant", "IssuedToken", "PostedMessage", "Stream", "UploadedFile",
]

MAX_TEXT_CHARS = 40_000
MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3_000
MAX_BLOCK_TEXT_CHARS = 12_000
MAX_UPDATE_TEXT_BYTES = 4_000
MAX_MARKDOWN_CHARS = 12_000
MAX_TASK_TEXT_CHARS = 256
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
MAX_SUGGESTED_PROMPTS = 4
#: Lifetime Slack gives a refreshed rotating token (seconds).
REFRESHED_EXPIRES_IN = 43_200
#: Safety net for ``wait_for``: a hang fails the test after this long instead of blocking the suite.
DEFAULT_WAIT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Call:
    """One request the fake received."""

    method: str
    params: dict[str, Any]
    headers: Mapping[str, str]
    status: int
    response: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == 200 and bool(self.response.get("ok"))

    @property
    def token(self) -> str:
        auth = self.headers.get("Authorization", "")
        return auth.removeprefix("Bearer ").strip() or str(self.params.get("token", ""))


@dataclass
class PostedMessage:
    """A message as it stands now (after any ``chat.update``)."""

    channel: str
    ts: str
    thread_ts: str | None
    text: str
    blocks: list[dict[str, Any]]
    params: dict[str, Any]
    truncated: bool = False
    edits: int = 0

    def block_text(self) -> str:
        """Every text a person sees in the blocks, joined with newlines."""
        return "\n".join(_texts_of(self.blocks))

    def buttons(self) -> list[dict[str, Any]]:
        return [e for b in self.blocks if b.get("type") == "actions" for e in b.get("elements", [])]

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The message metadata it was posted with (``chat.postMessage``'s ``metadata``), as other apps read it."""
        return _metadata_of(self.params)


@dataclass
class Stream:
    """A streamed message as a person sees it: the Markdown so far, each task card's latest state, the plan."""

    channel: str
    ts: str
    thread_ts: str
    mode: str
    recipient_user_id: str
    markdown: str = ""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    task_history: list[dict[str, Any]] = field(default_factory=list)
    plan_title: str = ""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    calls: int = 0
    started: float = field(default_factory=time.monotonic)  # when chat.startStream made it (sealing counts from)
    #: What chat.stopStream set: the message's metadata, and the agent session's status after the stop.
    metadata: dict[str, Any] | None = None
    session_status: str = ""

    def feedback_buttons(self) -> list[dict[str, Any]]:
        return [e for b in self.blocks if b.get("type") == "context_actions" for e in b.get("elements", [])]


@dataclass
class UploadedFile:
    """A file uploaded through files.getUploadURLExternal / POST / files.completeUploadExternal (files out)."""

    file_id: str
    filename: str
    length: int
    data: bytes | None = None
    title: str = ""
    channel: str = ""
    thread_ts: str = ""
    #: The ts of its share in the thread ("" until completed): orders files among themselves.
    shared_at: str = ""

    @property
    def text(self) -> str:
        return (self.data or b"").decode()


@dataclass
class Failure:
    """An injected failure for the next ``times`` calls of ``method``."""

    method: str
    status: int = 200
    error: str = ""
    retry_after: int | None = None
    times: int = 1
    #: Never answer (until the fake closes): a Slack that accepted the connection and went silent.
    hang: bool = False
    #: Do the call (it takes effect) but answer only this many seconds later: a Slack whose answer comes after
    #: the client gave up.
    delay: float = 0.0


@dataclass
class Grant:
    """What ``oauth.v2.access`` answers for one authorization code (set up with ``FakeSlack.add_install``)."""

    team_id: str | None
    enterprise_id: str | None = None
    is_enterprise_install: bool = False
    user_id: str = "UADMIN"
    rotating: bool = False
    expires_in: int = 43_200
    """Lifetime of the installed token; a refreshed one lives ``REFRESHED_EXPIRES_IN`` (Slack's 12 hours)."""
    team_name: str = "Fake team"
    enterprise_name: str = "Fake org"
    #: The bot scopes granted, as oauth.v2.access names them (comma-separated).
    scope: str = "chat:write,app_mentions:read"


@dataclass
class IssuedToken:
    """A token the fake handed out: auth.test answers with its installation; revoked ones fail every call."""

    grant: Grant
    bot_user_id: str
    bot_id: str
    revoked: bool = False


@dataclass
class FakeFile:
    """A file in Slack (files in): what ``files.info`` describes and ``url_private_download`` serves."""

    id: str
    name: str
    data: bytes = b""
    mimetype: str = "application/octet-stream"
    team: str = "T0001"
    """The workspace it belongs to (``user_team``)."""
    declared_size: int | None = None
    """The size the event and files.info claim (default: the bytes' length)."""
    stub: bool = False
    """A Slack Connect stub: the event carries only the id and ``file_access: check_file_info``."""
    info_error: str = ""
    """files.info answers this error (``file_not_found``)."""
    status: int = 200
    """The download's HTTP status (404: gone)."""
    login_page: bool = False
    """The download answers Slack's HTML login page instead of the file."""
    delay: float = 0.0
    """Seconds the download waits before its first byte."""
    endless: bool = False
    """The download streams zeros until the client stops reading (a file far larger than declared)."""
    redirect: str = ""
    """The (authenticated) download answers ``302 Found`` to this address instead of the file."""

    def entry(self, base: str) -> dict[str, Any]:
        """The file as a message event's ``files[]`` lists it (``base``: the fake's own address)."""
        if self.stub:
            return {"id": self.id, "mode": "file_access", "file_access": "check_file_info", "created": 0,
                    "timestamp": 0, "user": ""}
        url = f"{base}/files-pri/{self.id}/{self.name}"
        return {
            "id": self.id, "name": self.name, "title": self.name, "mimetype": self.mimetype,
            "size": len(self.data) if self.declared_size is None else self.declared_size,
            "url_private": url, "url_private_download": url + "?download=1", "user_team": self.team,
            "mode": "hosted", "is_external": False,
        }


@dataclass
class _Waiter:
    predicate: Callable[[], bool]
    future: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def _view_of(params: dict[str, Any]) -> dict[str, Any]:
    """The ``view`` argument of views.open/update, sent as JSON text or an object."""
    view = params.get("view") or {}
    return dict(json.loads(view) if isinstance(view, str) else view)


class FakeSlack:
    """An aiohttp Slack Web API on 127.0.0.1 and a random port."""

    def __init__(
        self,
        *,
        team_id: str = "T0001",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        set_status_available: bool = True,
    ) -> None:
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.set_status_available = set_status_available
        #: users.info answers: user id -> fields merged into the ``user`` object (e.g. ``{"is_admin": True}``;
        #: ``{"locale": "es-ES"}`` is answered only to a call with ``include_locale``, as Slack does).
        self.users: dict[str, dict[str, Any]] = {}
        #: Enterprise Grid: one person's flags in one workspace of the org, (team id, user id) -> fields merged
        #: over ``users[user id]`` when users.info is asked for that workspace (its ``team_id`` argument, else the
        #: calling token's workspace). An org-wide token asked without ``team_id`` answers for the user's home
        #: workspace (their ``team_id``), whichever workspace the caller meant.
        self.members: dict[tuple[str, str], dict[str, Any]] = {}
        #: conversations.info answers: channel id -> fields merged into the ``channel`` object (e.g.
        #: ``{"creator": "U2"}``, ``{"is_ext_shared": True}``); a ``D...`` id is a DM.
        self.channels: dict[str, dict[str, Any]] = {}
        #: conversations.history answers: channel -> messages, newest first.
        self.history: dict[str, list[dict[str, Any]]] = {}
        #: People's messages of a thread, by (channel, thread ts): what ``conversations.replies`` answers besides
        #: the bot's own posts there.
        self.replies: dict[tuple[str, str], list[dict[str, Any]]] = {}
        #: Channels whose messages the bot cannot read: channel -> the error conversations.history / .replies give
        #: (``not_in_channel``, ``channel_not_found``).
        self.unreadable: dict[str, str] = {}
        #: What apps.connections.open hands out: a URL, or what makes a fresh one each time (the Socket Mode
        #: fake's ``issue_url``).
        self.socket_mode_url: str | Callable[[], str] | None = None
        self.calls: list[Call] = []
        self.messages: list[PostedMessage] = []
        self.reactions: dict[tuple[str, str], set[str]] = {}
        self.statuses: list[tuple[str, str, str]] = []
        #: The status each thread shows now, as Slack keeps it: set by setStatus, cleared by a reply.
        self.status_now: dict[tuple[str, str], str] = {}
        self.streams: list[Stream] = []
        #: A workspace where task cards are not available: any stream call carrying one gets ``invalid_chunks``.
        self.refuse_task_cards = False
        self.suggested_prompts: list[tuple[str, str, list[dict[str, Any]]]] = []
        self.titles: list[tuple[str, str, str]] = []
        #: usergroups.users.list answers: user group id (``S…``) -> its members; any other id is ``no_such_subteam``.
        self.usergroups: dict[str, list[str]] = {}
        #: What was posted to a command's ``response_url`` (``response_url(name)``): name -> JSON bodies.
        self.responses: dict[str, list[dict[str, Any]]] = {}
        self._failures: list[Failure] = []
        self._waiters: list[_Waiter] = []
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port = 0
        #: OAuth: the app's credentials, codes waiting for oauth.v2.access, issued tokens and refresh tokens.
        self.client_id = "111.222"
        self.client_secret = "fake-client-secret"
        self.app_id = "AFAKE"
        self.codes: dict[str, Grant] = {}
        self.tokens: dict[str, IssuedToken] = {}
        self.refresh_tokens: dict[str, str] = {}
        self._serial = itertools.count(1)
        #: Files in: the files Slack holds (``add_file``), and each download served: (file id, token).
        self.files: dict[str, FakeFile] = {}
        self.downloads: list[tuple[str, str]] = []
        # --- agent pane (agent_view)
        #: An app declared with agent_view: setSuggestedPrompts with a thread_ts "silently fails", as Slack's method
        #: page says (ok, nothing shown); without one the prompts sit at the top of the DM.
        self.agent_view = False
        #: The title each setSuggestedPrompts call gave its list of prompts, in call order ("" when none).
        self.prompt_titles: list[str] = []
        # --- agent sessions (agents.sessions.*)
        #: What agents.sessions.* answer an app that is not declared as an agent (the default: an app with only
        #: ``assistant_view``); set it to "" to make them available, to another error to refuse them so.
        self.agent_sessions_refusal = "not_allowed"
        #: The sessions as Slack keeps them: (channel, thread ts) -> {"status", "title"}.
        self.sessions: dict[tuple[str, str], dict[str, str]] = {}
        #: Every status set, in order: (channel, thread ts, status).
        self.session_statuses: list[tuple[str, str, str]] = []
        #: The bot scopes a token holds, sent as ``X-OAuth-Scopes`` on every answer as Slack does (an install that
        #: declined optional scopes lacks them); None leaves the header out.
        self.granted_scopes: list[str] | None = None
        #: views.update: each view's hash now (a modal is updated only with its latest hash, or none).
        self.view_hashes: dict[str, str] = {}

    # --- lifecycle

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_post("/api/{method}", self._handle)
        app.router.add_get("/api/{method}", self._handle)
        app.router.add_post("/response/{name}", self._respond)
        # --- files out: the upload URL files.getUploadURLExternal hands out
        app.router.add_post("/upload/{file_id}", self._upload_bytes)
        # Files in: url_private_download and the login page Slack redirects an unauthenticated download to.
        app.router.add_get("/files-pri/{file_id}/{name}", self._serve_file)
        app.router.add_get("/login", self._login_page)
        # A hung handler (`hang=True`) is cancelled a second into close, not after aiohttp's default minute.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        for waiter in self._waiters:
            if not waiter.future.done():
                waiter.future.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def base_url(self) -> str:
        """The ``SLACK_API_URL`` to give the app; the trailing slash matters (urljoin)."""
        return f"http://127.0.0.1:{self._port}/api/"

    def response_url(self, name: str) -> str:
        """A slash command's ``response_url``, served here (Slack's is on its hooks host); see ``responses``."""
        return f"http://127.0.0.1:{self._port}/response/{name}"

    # --- test controls

    def fail(
        self, method: str, *, status: int = 200, error: str = "", retry_after: int | None = None, times: int = 1,
        hang: bool = False, delay: float = 0.0,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail: ``fail("chat.postMessage", status=429, retry_after=0)``;
        ``hang=True`` never answers them; ``delay=5`` does them but answers 5 s late."""
        if status == 429 and not error:
            error = "ratelimited"
        self._failures.append(Failure(method, status, error or "fatal_error", retry_after, times, hang, delay))

    async def wait_for(
        self, method: str | None = None, *, count: int = 1, predicate: Callable[[Call], bool] | None = None,
        timeout: float = DEFAULT_WAIT_TIMEOUT,
    ) -> list[Call]:
        """Wait until ``count`` successful calls of ``method`` (matching ``predicate``) were recorded."""

        def matching() -> list[Call]:
            return [
                c for c in self.calls
                if c.ok and (method is None or c.method == method) and (predicate is None or predicate(c))
            ]

        await self.wait_until(lambda: len(matching()) >= count, timeout=timeout)
        return matching()

    async def wait_until(self, predicate: Callable[[], bool], *, timeout: float = DEFAULT_WAIT_TIMEOUT) -> None:
        """Wait until ``predicate()`` holds, asked again after each call the fake records (cheap predicates only:
        ``wait_for`` re-reads the whole call log each time, which many concurrent waiters make quadratic)."""
        waiter = _Waiter(predicate)
        if not predicate():
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter.future, timeout)
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def add_install(self, code: str, grant: Grant) -> None:
        """The next ``oauth.v2.access`` with ``code`` installs ``grant`` (each code works once, like Slack's)."""
        self.codes[code] = grant

    def revoke(self, token: str) -> None:
        """Slack revoked ``token``: every later call with it gets ``token_revoked``."""
        self.tokens[token].revoked = True

    def tokens_used(self, method: str) -> list[str]:
        """The token each call of ``method`` carried, in order."""
        return [c.token for c in self.calls_of(method)]

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def thread_messages(self, channel: str, thread_ts: str) -> list[PostedMessage]:
        """The bot's messages in one thread, in the order Slack accepted them."""
        return [m for m in self.messages if m.channel == channel and m.thread_ts == thread_ts]

    def message(self, channel: str, ts: str) -> PostedMessage:
        for m in self.messages:
            if m.channel == channel and m.ts == ts:
                return m
        raise KeyError((channel, ts))

    # --- the server

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        if any(f.method == method and f.hang for f in self._failures):
            self.calls.append(Call(method, params, dict(request.headers), 0, {"ok": False, "error": "hang"}))
            await asyncio.Event().wait()  # cancelled when the client gives up or the fake closes
        late = next((f for f in self._failures if f.method == method and f.delay), None)
        if late is not None:
            late.times -= 1
            if late.times <= 0:
                self._failures.remove(late)
        status, body, headers = self._answer(method, params, request)
        self.calls.append(Call(method, params, dict(request.headers), status, body))
        for waiter in list(self._waiters):
            if not waiter.future.done() and waiter.predicate():
                waiter.future.set_result(None)
        if late is not None:
            await asyncio.sleep(late.delay)  # done already; the answer comes after the client's timeout
        if self.granted_scopes is not None:  # Slack names the calling token's scopes on every answer
            headers = {**headers, "X-OAuth-Scopes": ",".join(self.granted_scopes)}
        return web.json_response(body, status=status, headers=headers)

    async def _respond(self, request: web.Request) -> web.Response:
        self.responses.setdefault(request.match_info["name"], []).append(await request.json())
        return web.Response(text="ok")

    def _answer(
        self, method: str, params: dict[str, Any], request: web.Request
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        failure = next((f for f in self._failures if f.method == method and not f.delay), None)
        if failure is not None:
            failure.times -= 1
            if failure.times <= 0:
                self._failures.remove(failure)
            headers = {} if failure.retry_after is None else {"Retry-After": str(failure.retry_after)}
            return failure.status, {"ok": False, "error": failure.error}, headers
        if not request.headers.get("Authorization") and "token" not in params:
            return 200, {"ok": False, "error": "not_authed"}, {}
        if method == "oauth.v2.access":
            return 200, self._oauth_access(params, request.headers.get("Authorization", "")), {}
        issued = self.tokens.get(_bearer(request.headers.get("Authorization", "")) or str(params.get("token", "")))
        if issued is not None and issued.revoked:
            return 200, {"ok": False, "error": "token_revoked"}, {}
        if issued is not None and method == "auth.test":
            return 200, self._auth_test_of(issued), {}
        if method == "users.info":
            return 200, self._users_info(params, issued), {}
        if method == "assistant.search.context":
            return 200, self._search_context(params, _bearer(request.headers.get("Authorization", ""))), {}
        handler = self._methods().get(method)
        if handler is None:
            return 200, {"ok": False, "error": "unknown_method"}, {}
        return 200, handler(params), {}

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.postEphemeral": lambda p: {"ok": True, "message_ts": self._next_ts()},
            "reactions.add": self._reaction_add,
            "reactions.remove": self._reaction_remove,
            "assistant.threads.setStatus": self._set_status,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "conversations.info": self._conversation_info,
            "apps.connections.open": self._connections_open,
            "views.publish": lambda p: {"ok": True, "view": {"id": "V1"}},
            "views.open": lambda p: {"ok": True, "view": {**_view_of(p), "id": "V2", "hash": "1.v2"}},
            "views.update": self._views_update,
            "chat.getPermalink": self._permalink,
            "usergroups.users.list": self._usergroup_users,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "assistant.threads.setSuggestedPrompts": self._set_prompts,
            "assistant.threads.setTitle": self._set_title,
            # --- files out
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "canvases.create": self._create_canvas,
            "canvases.access.set": self._canvas_access,
            "canvases.delete": self._delete_canvas,
            # Files in
            "files.info": self._files_info,
            # --- Real-time Search (issue 29): the token decides too (see ``_answer``)
            "assistant.search.context": lambda p: self._search_context(p, ""),
            # --- agent sessions
            "agents.sessions.setStatus": self._session_set_status,
            "agents.sessions.rename": self._session_rename,
        }

    def stream(self, channel: str, ts: str) -> Stream:
        return next(s for s in self.streams if s.channel == channel and s.ts == ts)

    def thread_streams(self, channel: str, thread_ts: str) -> list[Stream]:
        return [s for s in self.streams if s.channel == channel and s.thread_ts == thread_ts]

    def _start_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(params.get("channel") or ""), str(params.get("thread_ts") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not thread_ts:
            return {"ok": False, "error": "invalid_arguments"}
        if not channel.startswith("D") and not (params.get("recipient_user_id") and params.get("recipient_team_id")):
            return {"ok": False, "error": "invalid_arguments"}
        mode = str(params.get("task_display_mode") or "timeline")
        if mode not in ("timeline", "plan"):
            return {"ok": False, "error": "invalid_arguments"}
        stream = Stream(channel, self._next_ts(), thread_ts, mode, str(params.get("recipient_user_id") or ""))
        problem = self._apply_chunks(stream, params)
        if problem:
            return {"ok": False, "error": problem}
        self.streams.append(stream)
        self.messages.append(PostedMessage(channel, stream.ts, thread_ts, stream.markdown, [], params))
        return {"ok": True, "channel": channel, "ts": stream.ts}

    def _live_stream(self, params: dict[str, Any]) -> Stream | str:
        try:
            stream = self.stream(str(params.get("channel") or ""), str(params.get("ts") or ""))
        except StopIteration:
            return "message_not_found"
        return "message_not_in_streaming_state" if stream.stopped or self.sealed(stream) else stream

    def _append_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._live_stream(params)
        if isinstance(stream, str):
            return {"ok": False, "error": stream}
        problem = self._apply_chunks(stream, params)
        return {"ok": False, "error": problem} if problem else {"ok": True, "channel": stream.channel, "ts": stream.ts}

    def _stop_stream(self, params: dict[str, Any]) -> dict[str, Any]:
        stream = self._live_stream(params)
        if isinstance(stream, str):
            return {"ok": False, "error": stream}
        blocks = _blocks(params)
        problem = _block_problem(blocks) or _feedback_problem(blocks) or self._apply_chunks(stream, params)
        if problem:
            return {"ok": False, "error": problem}
        status = str(params.get("session_status") or "")
        problem = _metadata_problem(params) or ("invalid_arguments" if status and status not in
                                                self.SESSION_STATUSES else "")
        if problem:
            return {"ok": False, "error": problem}
        stream.blocks, stream.stopped = blocks, True
        stream.metadata, stream.session_status = _metadata_of(params), status
        session = self.sessions.get((stream.channel, stream.thread_ts))
        if status and session is not None:
            session["status"] = status  # (``session_statuses`` lists agents.sessions.setStatus calls only)
        return {"ok": True, "channel": stream.channel, "ts": stream.ts}

    def _apply_chunks(self, stream: Stream, params: dict[str, Any]) -> str:
        """Check one call's Markdown and chunks against Slack's limits, then apply them ("" when accepted)."""
        chunks = params.get("chunks") or []
        if isinstance(chunks, str):
            chunks = json.loads(chunks)
        text = str(params.get("markdown_text") or "")
        if not isinstance(chunks, list):
            return "invalid_chunks"
        problem = next((p for p in map(_chunk_problem, chunks) if p), "")
        if self.refuse_task_cards and any(c.get("type") == "task_update" for c in chunks):
            problem = "invalid_chunks"
        if problem:
            return problem
        markdown = text + "".join(str(c["text"]) for c in chunks if c.get("type") == "markdown_text")
        if len(markdown) > MAX_MARKDOWN_CHARS:
            return "msg_too_long"
        stream.calls += 1
        stream.markdown += text
        for chunk in chunks:
            if chunk["type"] == "markdown_text":
                stream.markdown += str(chunk["text"])
            elif chunk["type"] == "plan_update":
                stream.plan_title = str(chunk["title"])
            elif chunk["type"] == "task_update":
                stream.tasks[str(chunk["id"])] = {**stream.tasks.get(str(chunk["id"]), {}), **chunk}
                stream.task_history.append(dict(chunk))
        msg = self.message(stream.channel, stream.ts) if any(m.ts == stream.ts for m in self.messages) else None
        if msg is not None:
            msg.text = stream.markdown
        return ""

    def _set_prompts(self, params: dict[str, Any]) -> dict[str, Any]:
        prompts = params.get("prompts")
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if not params.get("channel_id") or not isinstance(prompts, list):
            return {"ok": False, "error": "invalid_arguments"}
        shaped = all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        if not 1 <= len(prompts) <= MAX_SUGGESTED_PROMPTS or not shaped:
            return {"ok": False, "error": "invalid_arguments"}
        if self.agent_view and params.get("thread_ts"):
            return {"ok": True}
        self.prompt_titles.append(str(params.get("title") or ""))
        self.suggested_prompts.append((str(params["channel_id"]), str(params.get("thread_ts") or ""), prompts))
        return {"ok": True}

    def _set_title(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts, title = (str(params.get(k) or "") for k in ("channel_id", "thread_ts", "title"))
        if not (channel and thread_ts and title):
            return {"ok": False, "error": "invalid_arguments"}
        self.titles.append((channel, thread_ts, title))
        return {"ok": True}

    def _permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel") or ""), str(params.get("message_ts") or "")
        if not channel or not ts:
            return {"ok": False, "error": "channel_not_found" if not channel else "message_not_found"}
        return {"ok": True, "channel": channel,
                "permalink": f"https://fake.example/archives/{channel}/p{ts.replace('.', '')}"}

    def _usergroup_users(self, params: dict[str, Any]) -> dict[str, Any]:
        group = str(params.get("usergroup") or "")
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(self.usergroups[group])}

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True, "url": "https://fake.example/", "team": "Fake", "user": "agent", "team_id": self.team_id,
            "user_id": self.bot_user_id, "bot_id": self.bot_id, "is_enterprise_install": False,
        }

    def _oauth_access(self, params: dict[str, Any], authorization: str) -> dict[str, Any]:
        client_id, client_secret = _client_credentials(params, authorization)
        if client_id != self.client_id:
            return {"ok": False, "error": "invalid_client_id"}
        if client_secret != self.client_secret:
            return {"ok": False, "error": "bad_client_secret"}
        if params.get("grant_type") == "refresh_token":
            return self._refresh(str(params.get("refresh_token") or ""))
        grant = self.codes.pop(str(params.get("code") or ""), None)
        if grant is None:
            return {"ok": False, "error": "invalid_code"}
        body = self._issue(grant)
        body.update({
            "app_id": self.app_id, "scope": grant.scope, "authed_user": {"id": grant.user_id},
            "team": {"id": grant.team_id, "name": grant.team_name} if grant.team_id else None,
            "enterprise": ({"id": grant.enterprise_id, "name": grant.enterprise_name}
                           if grant.enterprise_id else None),
            "is_enterprise_install": grant.is_enterprise_install,
        })
        return body

    def _refresh(self, refresh_token: str) -> dict[str, Any]:
        """A refresh spends the refresh token and revokes the access token issued with it (Slack's rotation)."""
        old_access = self.refresh_tokens.pop(refresh_token, None)
        if old_access is None:
            return {"ok": False, "error": "invalid_refresh_token"}
        old = self.tokens[old_access]
        old.revoked = True
        body = self._issue(old.grant, old.bot_user_id, old.bot_id, expires_in=REFRESHED_EXPIRES_IN)
        body["team"] = {"id": old.grant.team_id} if old.grant.team_id else None
        return body

    def _issue(
        self, grant: Grant, bot_user_id: str = "", bot_id: str = "", expires_in: int | None = None
    ) -> dict[str, Any]:
        n = next(self._serial)
        token = f"xoxe.xoxb-1-fake{n}" if grant.rotating else f"xoxb-fake-{n}"
        self.tokens[token] = IssuedToken(grant, bot_user_id or f"UB{n}", bot_id or f"BB{n}")
        body: dict[str, Any] = {"ok": True, "token_type": "bot", "access_token": token,
                                "bot_user_id": self.tokens[token].bot_user_id}
        if grant.rotating:
            refresh = f"xoxe-1-refresh{n}"
            self.refresh_tokens[refresh] = token
            body.update(refresh_token=refresh, expires_in=expires_in or grant.expires_in)
        return body

    def _auth_test_of(self, issued: IssuedToken) -> dict[str, Any]:
        grant = issued.grant
        return {
            "ok": True, "url": "https://fake.example/", "team": grant.team_name, "user": "agent",
            "team_id": grant.team_id, "enterprise_id": grant.enterprise_id, "user_id": issued.bot_user_id,
            "bot_id": issued.bot_id, "is_enterprise_install": grant.is_enterprise_install,
        }

    def _next_ts(self) -> str:
        return f"1800000000.{next(self._ts):06d}"

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if channel[0] in "UW":  # a user id: Slack posts in the app's DM with them, named D + their id here
            channel = f"D{channel}"
        text = str(params.get("text") or "")
        blocks = _blocks(params)
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        problem = _block_problem(blocks) or _feedback_problem(blocks) or _metadata_problem(params)
        if problem:
            return {"ok": False, "error": problem}
        truncated = len(text) > MAX_TEXT_CHARS
        ts = self._next_ts()
        thread_ts = params.get("thread_ts")
        msg = PostedMessage(
            channel, ts, str(thread_ts) if thread_ts else None, text[:MAX_TEXT_CHARS], blocks, params, truncated
        )
        self.messages.append(msg)
        if thread_ts:
            self.status_now.pop((channel, str(thread_ts)), None)  # Slack clears a thread's status at a reply
        message = {"text": msg.text, "ts": ts, "bot_id": self.bot_id}
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        try:
            msg = self.message(channel, ts)
        except KeyError:
            return {"ok": False, "error": "message_not_found"}
        text = str(params.get("text") or "")
        if len(text.encode()) > MAX_UPDATE_TEXT_BYTES:
            return {"ok": False, "error": "msg_too_long"}
        blocks = _blocks(params)
        problem = _block_problem(blocks)
        if problem:
            return {"ok": False, "error": problem}
        msg.text, msg.blocks, msg.edits = text, blocks, msg.edits + 1
        return {"ok": True, "channel": channel, "ts": ts, "text": text}

    def _reaction_add(self, params: dict[str, Any]) -> dict[str, Any]:
        key = (str(params.get("channel")), str(params.get("timestamp")))
        names = self.reactions.setdefault(key, set())
        name = str(params.get("name"))
        if name in names:
            return {"ok": False, "error": "already_reacted"}
        names.add(name)
        return {"ok": True}

    def _reaction_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        key = (str(params.get("channel")), str(params.get("timestamp")))
        names = self.reactions.get(key, set())
        name = str(params.get("name"))
        if name not in names:
            return {"ok": False, "error": "no_reaction"}
        names.discard(name)
        return {"ok": True}

    def _set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        if not self.set_status_available:
            return {"ok": False, "error": "missing_scope", "needed": "assistant:write"}
        where, status = (str(params.get("channel_id")), str(params.get("thread_ts"))), str(params.get("status"))
        self.statuses.append((*where, status))
        if status:
            self.status_now[where] = status
        else:
            self.status_now.pop(where, None)
        return {"ok": True}

    def _users_info(self, params: dict[str, Any], issued: IssuedToken | None) -> dict[str, Any]:
        user_id = str(params.get("user"))
        user = {"id": user_id, "team_id": self.team_id, "is_admin": False, "is_owner": False,
                "is_primary_owner": False, "is_restricted": False, "is_ultra_restricted": False, "is_bot": False}
        user.update(self.users.get(user_id, {}))
        asked = str(params.get("team_id") or "") or (issued.grant.team_id if issued else None) or user["team_id"]
        user.update(self.members.get((str(asked), user_id), {}))
        # As Slack does: the person's locale (set one in ``users``, default en-US) only with include_locale.
        locale = user.pop("locale", "en-US")
        if str(params.get("include_locale")).lower() in ("1", "true"):
            user["locale"] = locale
        return {"ok": True, "user": user}

    def _views_update(self, params: dict[str, Any]) -> dict[str, Any]:
        """As Slack: the view replaced, a new hash; a stale ``hash`` (another update came first) is refused."""
        view_id = str(params.get("view_id") or "")
        if not view_id:
            return {"ok": False, "error": "invalid_arguments"}
        stale = params.get("hash") and params.get("hash") != self.view_hashes.get(view_id, params.get("hash"))
        if stale:
            return {"ok": False, "error": "hash_conflict"}
        self.view_hashes[view_id] = f"{len(self.view_hashes) + 2}.{view_id}"
        return {"ok": True, "view": {**_view_of(params), "id": view_id, "hash": self.view_hashes[view_id]}}

    def _conversation_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        dm = channel.startswith("D")
        info = {"id": channel, "is_channel": not dm, "is_im": dm, "is_mpim": False, "is_private": dm,
                "is_shared": False, "is_ext_shared": False, "creator": "" if dm else "UCREATOR",
                **self.channels.get(channel, {})}
        return {"ok": True, "channel": info}

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel"))
        if channel in self.unreadable:
            return {"ok": False, "error": self.unreadable[channel]}
        limit = int(params.get("limit") or 100)
        messages = [m for m in self.history.get(channel, []) if _in_range(m, params)]
        return {"ok": True, "messages": messages[:limit], "has_more": len(messages) > limit}

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """The thread holding ``ts`` (its root, or a reply in it, as Slack's method page allows), the parent first
        whatever the range, then the replies within ``oldest``/``latest`` (``inclusive``)."""
        channel, ts = str(params.get("channel")), str(params.get("ts"))
        if channel in self.unreadable:
            return {"ok": False, "error": self.unreadable[channel]}
        root = next((r for (c, r), ms in self.replies.items() if c == channel and any(m.get("ts") == ts for m in ms)),
                    ts)
        people = self.replies.get((channel, root), [])
        bots = [{"type": "message", "bot_id": "BFAKE", "text": m.text, "ts": m.ts}
                for m in self.thread_messages(channel, root)]
        messages = sorted([*people, *bots], key=lambda m: float(m.get("ts") or 0))
        messages = [m for m in messages if m.get("ts") == root or _in_range(m, params)]
        limit = int(params.get("limit") or 1000)
        return {"ok": True, "messages": messages[:limit], "has_more": len(messages) > limit}

    def _connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.socket_mode_url is None:
            return {"ok": False, "error": "not_allowed_token_type"}
        url = self.socket_mode_url if isinstance(self.socket_mode_url, str) else self.socket_mode_url()
        return {"ok": True, "url": url}

    # --- files out: files.getUploadURLExternal -> POST the bytes -> files.completeUploadExternal --------------
    @property
    def uploads(self) -> dict[str, UploadedFile]:
        """Uploads begun and done, by file id (bytes once POSTed; channel and thread once completed). Made on first
        use rather than in ``__init__``, so the files-out block stays in one piece."""
        uploads: dict[str, UploadedFile] = self.__dict__.setdefault("_uploads", {})
        return uploads

    def thread_files(self, channel: str, thread_ts: str) -> list[UploadedFile]:
        """The files shared into one thread (files.completeUploadExternal), in the order Slack shared them."""
        return sorted((f for f in self.uploads.values() if f.channel == channel and f.thread_ts == thread_ts
                       and f.shared_at), key=lambda f: f.shared_at)

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename, length = str(params.get("filename") or ""), str(params.get("length") or "")
        if not filename or not length.isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._serial):08d}"
        self.uploads[file_id] = UploadedFile(file_id, filename, int(length))
        return {"ok": True, "upload_url": f"http://127.0.0.1:{self._port}/upload/{file_id}", "file_id": file_id}

    async def _upload_bytes(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="unknown upload")
        upload.data = await request.read()
        return web.Response(text=f"OK - {len(upload.data)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            files = json.loads(str(params.get("files") or "[]"))
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        channel, thread_ts = str(params.get("channel_id") or ""), str(params.get("thread_ts") or "")
        done = []
        for item in files:
            upload = self.uploads.get(str(item.get("id") or ""))
            if upload is None or upload.data is None:
                return {"ok": False, "error": "file_not_found"}
            if len(upload.data) != upload.length:
                return {"ok": False, "error": "file_upload_size_mismatch"}
            upload.title, upload.channel, upload.thread_ts = str(item.get("title") or ""), channel, thread_ts
            upload.shared_at = self._next_ts()
            done.append({"id": upload.file_id, "name": upload.filename, "title": upload.title,
                         "size": upload.length})
        return {"ok": True, "files": done}

    @property
    def canvases(self) -> dict[str, dict[str, Any]]:
        """Canvases made by canvases.create, by id: ``title``, ``markdown`` and ``readers`` (channel ids)."""
        canvases: dict[str, dict[str, Any]] = self.__dict__.setdefault("_canvases", {})
        return canvases

    def _create_canvas(self, params: dict[str, Any]) -> dict[str, Any]:
        content = params.get("document_content") or {}
        if not isinstance(content, dict) or content.get("type") != "markdown":
            return {"ok": False, "error": "invalid_arguments"}
        canvas_id = f"F{next(self._serial):08d}"
        self.canvases[canvas_id] = {"title": str(params.get("title") or ""), "markdown": str(content.get("markdown")),
                                    "readers": []}
        return {"ok": True, "canvas_id": canvas_id}

    def _delete_canvas(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.canvases.pop(str(params.get("canvas_id") or ""), None) is None:
            return {"ok": False, "error": "canvas_not_found"}
        return {"ok": True}

    def _canvas_access(self, params: dict[str, Any]) -> dict[str, Any]:
        canvas = self.canvases.get(str(params.get("canvas_id") or ""))
        if canvas is None:
            return {"ok": False, "error": "canvas_not_found"}
        canvas["readers"].extend(c for c in str(params.get("channel_ids") or "").split(",") if c)
        return {"ok": True}

    # --- files in (issue 28): files.info and url_private_download ----------------------------------------------

    def add_file(self, file: FakeFile) -> dict[str, Any]:
        """Slack holds ``file`` now; returns its entry for a message event's ``files[]``."""
        self.files[file.id] = file
        return file.entry(f"http://127.0.0.1:{self._port}")

    def _files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        file = self.files.get(str(params.get("file") or ""))
        if file is None:
            return {"ok": False, "error": "file_not_found"}
        if file.info_error:
            return {"ok": False, "error": file.info_error}
        full = replace(file, stub=False)
        return {"ok": True, "file": full.entry(f"http://127.0.0.1:{self._port}")}

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        token = _bearer(request.headers.get("Authorization", ""))
        issued = self.tokens.get(token)
        if not token or (issued is not None and issued.revoked):
            raise web.HTTPFound("/login")  # Slack sends an unauthenticated download to its login page
        file = self.files.get(request.match_info["file_id"])
        if file is None or file.status == 404:
            raise web.HTTPNotFound(text="<html><body>Not found</body></html>", content_type="text/html")
        if file.redirect:
            raise web.HTTPFound(file.redirect)
        self.downloads.append((file.id, token))
        if file.delay:
            await asyncio.sleep(file.delay)
        if file.login_page:
            return await self._login_page(request)
        if file.status != 200:
            return web.Response(status=file.status, text="error")
        if not file.endless:
            return web.Response(body=file.data, content_type=file.mimetype)
        response = web.StreamResponse(headers={"Content-Type": file.mimetype})
        await response.prepare(request)
        chunk = bytes(64 * 1024)
        while True:  # ends when the client stops reading and closes the connection
            await response.write(chunk)

    async def _login_page(self, request: web.Request) -> web.Response:
        page = "<!DOCTYPE html><html><head><title>Sign in | Slack</title></head><body>Sign in</body></html>"
        return web.Response(text=page, content_type="text/html")

    # --- sealed streams (issue 29): Slack seals a stream about five minutes after its start -------------------

    #: Seconds after its ``chat.startStream`` when a stream is sealed (None: never). From then on Slack answers
    #: ``chat.appendStream`` and ``chat.stopStream`` with ``message_not_in_streaming_state`` and the message
    #: keeps what it had, as for a stopped stream (observed, not documented; about 300 s in Slack).
    stream_seal_seconds: float | None = None

    def sealed(self, stream: Stream) -> bool:
        """Whether Slack sealed ``stream``: not stopped, and started ``stream_seal_seconds`` ago or more."""
        seal = self.stream_seal_seconds
        return not stream.stopped and seal is not None and time.monotonic() - stream.started >= seal

    def open_streams(self) -> list[Stream]:
        """The streams still open: neither stopped nor sealed."""
        return [s for s in self.streams if not s.stopped and not self.sealed(s)]


    # --- Real-time Search (issue 29): assistant.search.context ------------------------------------------------

    @property
    def search(self) -> FakeSearch:
        """What Real-time Search finds. Made on first use rather than in ``__init__``, so this block stays whole."""
        search: FakeSearch = self.__dict__.setdefault("_search", FakeSearch())
        return search

    def _search_context(self, params: dict[str, Any], token: str) -> dict[str, Any]:
        search, kind = self.search, (token or str(params.get("token") or "")).removeprefix("xoxe.")[:4]
        if kind not in ("xoxb", "xoxp"):
            return {"ok": False, "error": "not_allowed_token_type"}
        if not search.scope_granted:
            return {"ok": False, "error": "missing_scope", "needed": "search:read.public", "provided": "chat:write"}
        query = str(params.get("query") or "")
        if not query:
            return {"ok": False, "error": "missing_argument"}
        if kind == "xoxb" and str(params.get("action_token") or "") not in search.action_tokens:
            return {"ok": False, "error": "invalid_action_token"}  # a bot token searches only for an event's asker
        search.requests.append(dict(params))
        kinds = str(params.get("content_types") or "messages").split(",")
        words = query.lower().split()

        def hit(item: dict[str, Any]) -> bool:
            return all(w in f"{item.get('content', '')} {item.get('title', '')}".lower() for w in words)

        # Slack's own default: public channels only; a result is found only in the kinds of conversation asked.
        where = str(params.get("channel_types") or "public_channel").split(",")

        def seen(item: dict[str, Any]) -> bool:
            return hit(item) and (not item.get("channel_id") or self._channel_type(str(item["channel_id"])) in where)

        own = search.scoped.get(str(params.get("action_token") or ""), [])
        found = [("messages", m) for m in [*search.messages, *own] if "messages" in kinds and seen(m)]
        found += [("files", f) for f in search.files if "files" in kinds and seen(f)]
        start, limit = int(str(params.get("cursor") or "0")), int(params.get("limit") or 20)
        results: dict[str, list[dict[str, Any]]] = {"messages": [], "files": []}
        for name, item in found[start:start + limit]:
            results[name].append(item)
        more = str(start + limit) if start + limit < len(found) else ""
        return {"ok": True, "results": results, "response_metadata": {"next_cursor": more}}

    def _channel_type(self, channel: str) -> str:
        """The ``channel_types`` name of a conversation, as ``conversations.info`` describes it."""
        info = self._conversation_info({"channel": channel})["channel"]
        if info["is_im"]:
            return "im"
        return "mpim" if info["is_mpim"] else "private_channel" if info["is_private"] else "public_channel"
    # --- agent sessions: a session is named by ``channel_id`` and ``thread_ts`` (its thread's root)

    #: Slack's session statuses and its title limit.
    SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})
    MAX_TITLE_CHARS = 200

    def session_status(self, channel: str, thread_ts: str) -> str | None:
        """The status a session shows now, or None when there is none."""
        return self.sessions.get((channel, thread_ts), {}).get("status")

    def _session_set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        """agents.sessions.setStatus: ``status`` one of Slack's four; creates the session (with ``title``, at most
        200 characters, used only then) when there is none yet."""
        if self.agent_sessions_refusal:
            return {"ok": False, "error": self.agent_sessions_refusal}
        channel, thread_ts = str(params.get("channel_id") or ""), str(params.get("thread_ts") or "")
        status, title = str(params.get("status") or ""), params.get("title")
        if (not channel or status not in self.SESSION_STATUSES
                or (title is not None and len(str(title)) > self.MAX_TITLE_CHARS)):
            return {"ok": False, "error": "invalid_arguments"}
        session = self.sessions.setdefault((channel, thread_ts), {"title": str(title or "")})
        session["status"] = status
        self.session_statuses.append((channel, thread_ts, status))
        return {"ok": True, "status": status, "title": session["title"]}

    def _session_rename(self, params: dict[str, Any]) -> dict[str, Any]:
        """agents.sessions.rename: ``title`` of 1 to 200 characters, on a session that exists."""
        if self.agent_sessions_refusal:
            return {"ok": False, "error": self.agent_sessions_refusal}
        channel, thread_ts = str(params.get("channel_id") or ""), str(params.get("thread_ts") or "")
        title = str(params.get("title") or "")
        if not channel or not 1 <= len(title) <= self.MAX_TITLE_CHARS:
            return {"ok": False, "error": "invalid_arguments"}
        session = self.sessions.get((channel, thread_ts))
        if session is None:
            return {"ok": False, "error": "session_not_found"}
        session["title"] = title
        return {"ok": True, "title": title}


#: Message metadata as Slack's reference describes it: an ``event_type`` of letters, digits and underscores, an
#: ``event_payload`` object; about 4 KB in all.
_EVENT_TYPE = re.compile(r"[A-Za-z0-9_]{1,255}")
MAX_METADATA_BYTES = 4096


def _metadata_of(params: dict[str, Any]) -> dict[str, Any] | None:
    raw = params.get("metadata")
    if isinstance(raw, str):
        raw = json.loads(raw)
    return raw if isinstance(raw, dict) else None


def _metadata_problem(params: dict[str, Any]) -> str:
    """Why Slack would refuse the call's ``metadata`` ("" when it is absent or well formed)."""
    if params.get("metadata") is None:
        return ""
    try:
        metadata = _metadata_of(params)
    except ValueError:
        return "invalid_metadata_format"
    if metadata is None or not isinstance(metadata.get("event_payload"), dict):
        return "invalid_metadata_format"
    if not isinstance(metadata.get("event_type"), str) or not _EVENT_TYPE.fullmatch(metadata["event_type"]):
        return "invalid_metadata_format"
    return "metadata_too_large" if len(json.dumps(metadata).encode()) > MAX_METADATA_BYTES else ""


def _in_range(message: dict[str, Any], params: dict[str, Any]) -> bool:
    """Within ``oldest``..``latest`` as conversations.history and .replies read them (ends excluded unless
    ``inclusive``)."""
    ts = float(message.get("ts") or 0)
    inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
    latest, oldest = params.get("latest"), params.get("oldest")
    if latest and (ts > float(latest) or (ts == float(latest) and not inclusive)):
        return False
    return not (oldest and (ts < float(oldest) or (ts == float(oldest) and not inclusive)))


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    raw = await request.read()
    if not raw:
        return params
    if request.content_type == "application/json":
        loaded = json.loads(raw)
        if isinstance(loaded, dict):
            params.update(loaded)
    else:
        params.update(parse_qsl(raw.decode(), keep_blank_values=True))
    return params


def _bearer(authorization: str) -> str:
    return authorization.removeprefix("Bearer ").strip() if authorization.startswith("Bearer ") else ""


def _client_credentials(params: dict[str, Any], authorization: str) -> tuple[str, str]:
    """oauth.v2.access takes the app's credentials as HTTP Basic auth (the SDK's way) or as form fields."""
    if authorization.startswith("Basic "):
        user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
        return user, password
    return str(params.get("client_id") or ""), str(params.get("client_secret") or "")


def _blocks(params: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = params.get("blocks") or []
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    return list(blocks)


def _texts_of(blocks: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for block in blocks:
        text = block.get("text")
        if isinstance(text, dict):
            out.append(str(text.get("text", "")))
        for element in block.get("elements", []) if block.get("type") == "context" else []:
            out.append(str(element.get("text", "")))
    return out


def _block_problem(blocks: list[dict[str, Any]]) -> str:
    if len(blocks) > MAX_BLOCKS:
        return "invalid_blocks"
    for block in blocks:
        if block.get("type") == "section" and len(str(block.get("text", {}).get("text", ""))) > MAX_SECTION_CHARS:
            return "invalid_blocks"
    if sum(len(t) for t in _texts_of(blocks)) > MAX_BLOCK_TEXT_CHARS:
        return "msg_blocks_too_long"
    return ""


def _chunk_problem(chunk: Any) -> str:
    """A streaming chunk Slack would refuse (``invalid_chunks``), or ""."""
    if not isinstance(chunk, dict):
        return "invalid_chunks"
    kind = chunk.get("type")
    if kind == "markdown_text":
        return "" if isinstance(chunk.get("text"), str) else "invalid_chunks"
    if kind == "plan_update":
        title = chunk.get("title")
        return "" if isinstance(title, str) and 0 < len(title) <= MAX_TASK_TEXT_CHARS else "invalid_chunks"
    if kind != "task_update":
        return "invalid_chunks"
    title, task_id = chunk.get("title"), chunk.get("id")
    if not (isinstance(task_id, str) and task_id and isinstance(title, str) and 0 < len(title) <= MAX_TASK_TEXT_CHARS):
        return "invalid_chunks"
    if chunk.get("status") not in TASK_STATUSES:
        return "invalid_chunks"
    for name in ("details", "output"):
        value = chunk.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_TASK_TEXT_CHARS):
            return "invalid_chunks"
    sources = chunk.get("sources")
    if sources is not None:
        ok = isinstance(sources, list) and all(
            isinstance(src, dict) and src.get("type") == "url" and str(src.get("url", "")).startswith(("http://", "https://"))
            and isinstance(src.get("text"), str) and src["text"]
            for src in sources
        )
        if not ok:
            return "invalid_chunks"
    return ""


def _feedback_problem(blocks: list[dict[str, Any]]) -> str:
    """Context actions hold at most 5 elements; feedback buttons need both buttons, text ≤ 75, value ≤ 2,000."""
    for block in blocks:
        if block.get("type") != "context_actions":
            continue
        elements = block.get("elements") or []
        if not 1 <= len(elements) <= 5:
            return "invalid_blocks"
        for element in elements:
            if element.get("type") != "feedback_buttons":
                continue
            for side in ("positive_button", "negative_button"):
                button = element.get(side) or {}
                text = (button.get("text") or {}).get("text", "")
                if not text or len(text) > 75 or not button.get("value") or len(str(button["value"])) > 2_000:
                    return "invalid_blocks"
    return ""


# --- Real-time Search (issue 29) ---------------------------------------------------------------------------------


@dataclass
class FakeSearch:
    """What ``assistant.search.context`` finds: messages and files (Slack's result objects), matched when every
    word of the query is in their ``content``/``title``; the action tokens events carried; the scope; the
    searches answered (their parameters)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    action_tokens: set[str] = field(default_factory=set)
    scope_granted: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: Messages found only by a search carrying this action token (each eval run's own index, beside the others').
    scoped: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
