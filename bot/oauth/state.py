"""OAuth ``state`` values that cost Redis nothing until an install completes.

A state is ``<expiry>.<nonce>.<signature>``: its expiry (Unix seconds), 16 random bytes, and an HMAC-SHA256 of
both under a key derived from SLACK_CLIENT_SECRET. ``GET /slack/install`` signs one and stores nothing, so a flood
of anonymous page loads cannot grow Redis. The redirect checks the signature and the expiry without storage and
reads one key (was it spent?); only an install Slack has accepted (``oauth.v2.access`` answered with tokens)
spends it, with a SET NX that lives as long as the state would, so spent-state keys are bounded by real installs::

    states = SignedStateStore(redis, keys, secret, expiration_seconds=600)
    state = await states.async_issue()          # in the Add-to-Slack link and Bolt's browser cookie
    await states.async_consume(state)           # True: signed here, not expired, not spent (reads only)
    await states.spend(state)                   # after Slack's answer; StateSpent if another redirect won
    await states.refusal(state)                 # "forged" | "expired" | "reused", for the page
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

import redis.asyncio as aioredis
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from bot.errors import StateSpent
from bot.keys import AppKeys
from bot.redis import awaited

log = logging.getLogger(__name__)

StateRefusal = Literal["forged", "reused", "expired"]

#: What the HMAC key is derived for: the client secret itself is never the key (it is Slack's, for oauth.v2.access).
_KEY_PURPOSE = b"slack-agent oauth state v1"
_NONCE_BYTES = 16
#: Longer than any state this module issues (~80 characters): a longer one is refused before any work.
_MAX_STATE_CHARS = 200
_MAX_EXPIRY_DIGITS = 12


def state_key(secret: str) -> bytes:
    """The signing key of every state, derived from SLACK_CLIENT_SECRET (no setting of its own)."""
    return hmac.new(secret.encode(), _KEY_PURPOSE, hashlib.sha256).digest()


class SignedStateStore(AsyncOAuthStateStore):
    """Bolt's state store: signed, self-expiring states; Redis holds only the spent ones, until they expire.

    ``clock`` is the wall clock (tests move it instead of sleeping).
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: AppKeys,
        key: bytes,
        *,
        expiration_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._key = key
        self.expiration_seconds = expiration_seconds
        self._clock = clock

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        expiry = int(self._clock()) + self.expiration_seconds
        body = f"{expiry}.{_b64(secrets.token_bytes(_NONCE_BYTES))}"
        return f"{body}.{self._sign(body)}"

    async def async_consume(self, state: str) -> bool:
        """Whether the redirect may go on to Slack; spends nothing (``spend`` does, once Slack has answered)."""
        return await self._judge(state) is None

    async def spend(self, state: str | None) -> None:
        """Mark a good state spent; StateSpent when another redirect already did (two tabs, one link)."""
        nonce, expiry = self._verified(state or "")
        if nonce is None:
            raise StateSpent("the state is not this app's")
        ttl = max(1, expiry - int(self._clock()))
        if not await awaited(self._redis.set(self._keys.oauth_state_spent(nonce), "1", nx=True, ex=ttl)):
            raise StateSpent("the state was already used")

    async def refusal(self, state: str | None) -> StateRefusal:
        """Why ``state`` is not (or no longer) accepted; call after a refused ``async_consume``."""
        return await self._judge(state or "") or "reused"

    async def _judge(self, state: str) -> StateRefusal | None:
        nonce, expiry = self._verified(state)
        if nonce is None:
            return "forged"
        if self._clock() > expiry:
            return "expired"  # checked before Redis: an expired link costs no round trip
        return "reused" if await awaited(self._redis.exists(self._keys.oauth_state_spent(nonce))) else None

    def _verified(self, state: str) -> tuple[str | None, int]:
        """(nonce, expiry) of a state this app signed, or (None, 0)."""
        parts = state.split(".") if len(state) <= _MAX_STATE_CHARS else []
        if len(parts) != 3:
            return None, 0
        expiry, nonce, signature = parts
        if not (0 < len(expiry) <= _MAX_EXPIRY_DIGITS and expiry.isascii() and expiry.isdigit()):
            return None, 0
        if not hmac.compare_digest(signature.encode(), self._sign(f"{expiry}.{nonce}").encode()):
            return None, 0
        return nonce, int(expiry)

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
