"""Links to a thread for App Home's list of runs, with one ``chat.getPermalink`` per workspace now and then.

A message's permalink is the workspace's archive address, the channel and the ts without its dot
(``https://acme.slack.com/archives/C123/p1700000000000100``). The address is learnt from Slack's own answer and
reused for an hour, so a busy workspace does not spend a Web API call on every run's link.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from slack_sdk.web.async_client import AsyncWebClient

#: How long a workspace's archive address is reused before Slack is asked again (a renamed domain), seconds.
ADDRESS_TTL_SECONDS = 3600.0

_PLAIN = re.compile(r"^(https://[^/?#]+/archives/)([A-Z0-9]+)/p(\d+)$")


class Permalinks:
    """Permalinks of thread roots, per workspace (team id); "" when Slack would not give one."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._addresses: dict[str, tuple[str, float]] = {}  # team -> (archive address, learnt at)

    async def of(self, client: AsyncWebClient, team_id: str, channel_id: str, ts: str) -> str:
        known = self._addresses.get(team_id)
        if known is not None and self._clock() - known[1] < ADDRESS_TTL_SECONDS and "." in ts:
            return f"{known[0]}{channel_id}/p{ts.replace('.', '')}"
        answer = await client.chat_getPermalink(channel=channel_id, message_ts=ts)
        link = str(answer.get("permalink") or "")
        plain = _PLAIN.match(link)
        # Learnt only from an answer that is exactly this message's plain form, so the rule is Slack's own.
        if plain is not None and plain.group(2) == channel_id and plain.group(3) == ts.replace(".", ""):
            self._addresses[team_id] = (plain.group(1), self._clock())
        return link
