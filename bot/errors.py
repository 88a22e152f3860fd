"""Errors of the bot: each one, what it means, who raises it and who catches it (engine errors: ``agent_core``).

Limits reached are not errors (a run ends with a reason); a Slack API error is ``slack_sdk``'s own
``SlackApiError``; Redis being away is ``agent_core.StoreError``. These are the bot's own::

    Exception
    ├── SlackLookupError        users.info failed, so nobody's permissions can be decided
    │                           raised by workspace.admin.people; caught by the listeners (the reply: try again), the
    │                           run's start (an error reply, no run) and workspace.admin (shown as a non-admin)
    ├── UnreadableToken         a stored installation opens with none of SLACK_TOKEN_ENCRYPTION_KEY's keys
    │                           raised by oauth.token_crypto; caught by oauth.installations (the record goes),
    │                           oauth.flow (acked, nothing runs), oauth.rekey (named) and oauth.clients
    ├── UnreadableInstallations ``python -m bot rekey`` found such installations, so it changed nothing
    │                           raised by oauth.rekey's ``rekey``; caught by its ``main`` (exit 1, naming them)
    ├── TokenUnavailable        a rotating token could not be refreshed (revoked, spent, no client secret)
    │                           raised by oauth.token_resolver; caught by oauth.flow (nothing runs), oauth.clients
    ├── McpSignInError          signing a person in to an ``"auth": "user"`` MCP server failed (discovery, registration,
    │                           a state unknown, used or expired, the token endpoint); the message says what, in English
    │                           raised by oauth.mcp_discovery and oauth.mcp_flow; caught by oauth.mcp_callback (the
    │                           page), receive.listeners.mcp_connect (the reply) and oauth.mcp_credentials (the call)
    ├── NotInstalled            no usable token for a workspace (none, unreadable or not refreshed): nowhere to post
    │                           raised by oauth.clients; caught by runs.run (not started, logged), queue.jobs
    │                           (the queued turn is not told) and thread.open_streams (nothing left to stop)
    ├── ThreadUnwritable        Slack refused MAX_REFUSED_POSTS posts in a row: the run cannot be shown
    │                           raised by thread.poster; caught by runs.run (the run stops spending)
    ├── StreamRefused           Slack refused a stream call (``error`` is its code)
    │                           raised by thread.stream_writer; caught by thread.stream_sink (falls back to posts)
    ├── ValueError
    │   ├── InvalidValue        a limit someone typed (or one stored) is not acceptable; the message says why
    │   │                       raised by workspace.command and workspace.config; caught by workspace.command
    │   │                       (the reply), workspace.store and workspace.org (stored: unreadable, runs refused)
    │   │                       and receive.views.home (the modal's inline error)
    │   └── Refused             a payload not of a shape Slack sends (``ignore``: well-formed but not for us)
    │                           raised by receive.payloads and serve.app; caught by serve.app (400, or 200 and dropped)
    └── BoltError
        └── StateSpent          another redirect with the same OAuth state stored its install first
                                raised by oauth.state; reaches oauth.flow inside Bolt's failure (the page says so)

Module-private signals (``receive.socket_mode``'s ``_Refused``) stay beside their only use.
"""

from __future__ import annotations

from slack_bolt.error import BoltError


class SlackLookupError(Exception):
    """users.info failed, so nobody's permissions can be decided; the reply asks to try again.

    Its text is English on purpose: the asker's language is their users.info ``locale``, which is what failed (the
    bot's one reply whose reader's language cannot be known besides ``app.NO_INSTALLATION_REPLY``)."""

    def __init__(self, user_id: str, error: str) -> None:
        super().__init__(
            f"Couldn't look up <@{user_id}> in Slack ({error}), so I can't check permissions. "
            "Please try again in a minute."
        )
        self.user_id = user_id
        self.error = error


class UnreadableToken(Exception):
    """A stored value none of the configured keys opens (wrong key, or an old key dropped too early)."""


class UnreadableInstallations(Exception):
    """Some stored values open with no listed key; ``where`` names their installations (never a value)."""

    def __init__(self, where: list[str], setting: str) -> None:
        super().__init__(
            f"{len(where)} installation(s) cannot be read with any key in {setting}: {', '.join(where)}. Nothing "
            f"was changed. Add the key they were written with to {setting} (after the newest) and run again; or "
            "delete them, and those workspaces reinstall the app."
        )
        self.where = where


class TokenUnavailable(Exception):
    """Slack refused to refresh an installation's token (revoked, or the refresh token is spent): no run."""


class McpSignInError(Exception):
    """Signing a person in to an MCP server failed; the message says what (never a token or a code)."""


class NotInstalled(Exception):
    """No usable installation for the workspace: nothing can be posted there."""


class ThreadUnwritable(Exception):
    """Slack refused ``MAX_REFUSED_POSTS`` posts in a row: the run cannot be shown, so it must stop spending."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        #: Slack's error code of the last refusal (``invalid_auth``, ``channel_not_found``...).
        self.error = error


class StreamRefused(Exception):
    """Slack refused a stream call; ``error`` is its error code (``method_not_supported``, ``invalid_chunks``...)."""

    def __init__(self, error: str) -> None:
        super().__init__(f"Slack refused the stream ({error})")
        self.error = error


class InvalidValue(ValueError):
    """A value someone typed (or something stored) is not acceptable; the message says what is."""


class Refused(ValueError):
    """A payload that is not of a shape Slack sends; ``ignore`` when it is well-formed but not for us."""

    def __init__(self, problem: str, *, ignore: bool = False) -> None:
        super().__init__(problem)
        self.ignore = ignore


class StateSpent(BoltError):
    """Another redirect with the same state stored its install first: this one stores nothing."""
