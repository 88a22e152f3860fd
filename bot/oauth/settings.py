"""``OAuthSettings``: the OAuth stage's piece of ``Settings``, serving many workspaces from one app.

OAuth mode keeps each workspace's token in Redis, encrypted, so the piece builds on the kernel's Slack and Redis
pieces.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from slack_sdk.oauth.state_utils import OAuthStateUtils

from agent_core import ConfigError
from bot.redis import RedisSettings
from bot.settings_base import Role, blank_is_unset
from bot.slack_client import SlackSettings

#: The bot scopes an OAuth install asks for: exactly manifest.json's, its ``bot_optional`` ones included (the
#: installer may decline those on Slack's page; tests/bot/oauth/test_oauth.py).
DEFAULT_BOT_SCOPES = (
    "app_mentions:read,assistant:write,canvases:write,channels:history,channels:read,chat:write,commands,"
    "files:read,files:write,groups:history,groups:read,im:history,mcp:connect,mpim:history,reactions:read,reactions:write,"
    "search:read.public,usergroups:read,users:read"
)


class OAuthSettings(SlackSettings, RedisSettings):
    """The app's OAuth client, the scopes an install asks for, and the key of the tokens at rest."""

    slack_client_id: str | None = Field(
        default=None, description="OAuth client id; set instead of SLACK_BOT_TOKEN to serve many workspaces."
    )
    slack_client_secret: SecretStr | None = Field(default=None, description="OAuth client secret.")
    slack_token_encryption_key: SecretStr | None = Field(
        default=None, description="Fernet key(s), comma-separated, newest first: installation tokens at rest."
    )
    slack_scopes: str = Field(default=DEFAULT_BOT_SCOPES, description="Bot scopes an install asks for.")
    slack_user_scopes: str = Field(default="", description="User scopes an install asks for (none by default).")
    slack_redirect_uri: str | None = Field(
        default=None, description="Redirect URL sent to Slack; unset: the app's only configured one."
    )
    public_url: str | None = Field(
        default=None, description="The service's https origin as Slack and browsers reach it; needed by "
        '"auth": "user" MCP servers, whose sign-in returns to <PUBLIC_URL>/mcp/oauth/callback.',
    )
    slack_state_expiration_seconds: int = Field(
        default=OAuthStateUtils.default_expiration_seconds, gt=0,
        description="How long an install link (its OAuth state) stays valid.",
    )

    @field_validator("public_url", mode="before")
    @classmethod
    def _blank_public_url(cls, value: object) -> object:
        return blank_is_unset(value)

    @property
    def oauth_mode(self) -> bool:
        """Many workspaces, each with its own stored token: a client id and no single SLACK_BOT_TOKEN."""
        return self.slack_bot_token is None and bool(self.slack_client_id)

    def require_oauth(self, role: Role) -> None:
        """Raise ConfigError naming the first missing or unusable setting OAuth mode needs."""
        for name in ("slack_client_id", "slack_client_secret", "slack_token_encryption_key"):
            value = getattr(self, name)
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            if not text or not text.strip():
                raise ConfigError(f"{name.upper()} is not set: OAuth mode (no SLACK_BOT_TOKEN) needs it")
        if role in ("all", "web") and not self.socket_mode and not self.slack_signing_secret:
            raise ConfigError("SLACK_SIGNING_SECRET is not set: copy it from the Slack app's settings page")
