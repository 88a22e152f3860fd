"""Delivery dedupe: a claim that fails half way holds nothing, so Slack's retry is not taken for a duplicate."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.receive.dedupe import Dedupe
from tests.conftest import TEST_REDIS_URL


class FailsOnMessageKeys(aioredis.Redis):
    """A real client whose SETs of message keys fail, as on a connection drop between the two calls."""

    async def set(self, name: Any, value: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if ":dedupe:msg:" in str(name):
            raise RedisConnectionError("connection lost")
        return await super().set(name, value, *args, **kwargs)


async def test_a_failed_claim_leaves_the_retry_free(redis_client: aioredis.Redis, key_prefix: str) -> None:
    keys = AppKeys(key_prefix)
    flaky = FailsOnMessageKeys.from_url(TEST_REDIS_URL)
    try:
        with pytest.raises(RedisConnectionError):
            await Dedupe(flaky, keys).claim(Workspace("T1"), event_id="Ev1", channel_id="C1", ts="1.2")
    finally:
        await flaky.aclose()
    retry = await Dedupe(redis_client, keys).claim(Workspace("T1"), event_id="Ev1", channel_id="C1", ts="1.2"
    )
    assert retry is not None
    assert await Dedupe(redis_client, keys).claim(Workspace("T1"), event_id="Ev2", channel_id="C1", ts="1.2"
    ) is None  # the double delivery of the same message is still refused
