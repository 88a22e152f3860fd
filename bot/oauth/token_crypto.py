"""Tokens at rest: Fernet encryption with a list of keys (``SLACK_TOKEN_ENCRYPTION_KEY=new,old``) for rotation.

The first key encrypts; every listed key decrypts, so a deployment rotates by putting the new key in front
(every later write uses it; ``TokenCipher.rotate`` re-encrypts one stored value) and then dropping the old key::

    cipher = TokenCipher.from_setting("k1NewKey...=,k0OldKey...=")
    stored = cipher.encrypt('{"bot_token": "xoxb-..."}')   # URL-safe base64, no token shape left
    cipher.decrypt(stored)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from agent_core import ConfigError
from bot.errors import UnreadableToken

if TYPE_CHECKING:
    from bot.oauth.settings import OAuthSettings

SETTING = "SLACK_TOKEN_ENCRYPTION_KEY"


class TokenCipher:
    """Encrypts with the first key, decrypts with any of them."""

    def __init__(self, keys: list[bytes]) -> None:
        self._fernet = MultiFernet([Fernet(k) for k in keys])

    @classmethod
    def from_settings(cls, settings: OAuthSettings) -> TokenCipher:
        """The cipher of SLACK_TOKEN_ENCRYPTION_KEY (ConfigError naming it when a key is malformed)."""
        key = settings.slack_token_encryption_key
        return cls.from_setting(key.get_secret_value() if key else "")

    @classmethod
    def from_setting(cls, value: str) -> TokenCipher:
        """Keys from the comma-separated setting; ConfigError naming the setting when one is unusable."""
        keys = [k.strip() for k in value.split(",") if k.strip()]
        if not keys:
            raise ConfigError(f"{SETTING} is not set: OAuth mode needs it (make one with `{generate_command()}`)")
        for position, key in enumerate(keys, start=1):
            try:
                Fernet(key)
            except ValueError:
                raise ConfigError(
                    f"{SETTING}: key {position} is not a Fernet key (32 url-safe base64 bytes); "
                    f"make one with `{generate_command()}`"
                ) from None
        return cls([k.encode() for k in keys])

    def encrypt(self, plain: str) -> str:
        return self._fernet.encrypt(plain.encode()).decode()

    def decrypt(self, stored: str | bytes) -> str:
        try:
            return self._fernet.decrypt(stored if isinstance(stored, bytes) else stored.encode()).decode()
        except InvalidToken:
            raise UnreadableToken(f"a stored installation is not readable with any key in {SETTING}") from None

    def rotate(self, stored: str | bytes) -> str:
        """The same plaintext encrypted with the first key (MultiFernet.rotate)."""
        try:
            return self._fernet.rotate(stored if isinstance(stored, bytes) else stored.encode()).decode()
        except InvalidToken:
            raise UnreadableToken(f"a stored installation is not readable with any key in {SETTING}") from None


def generate_command() -> str:
    return 'python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
