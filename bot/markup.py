"""Text the bot did not write (file, tool, channel, model and host names; what people typed), made inert in Slack
mrkdwn: every such value goes through :func:`escape` wherever it is posted (notices, approvals, command replies,
App Home), so ``<!channel>`` pings nobody and ``<https://evil.example|Sign in>`` shows as typed, not as a link::

    >>> escape("<!channel> <https://evil.example/login|Session expired>.pdf")
    '&lt;!channel&gt; &lt;https://evil.example/login|Session expired&gt;.pdf'
"""

from __future__ import annotations

import re

#: Joins ``@`` to ``here``/``channel``/``everyone`` so no client turns a bare one into a ping.
WORD_JOINER = "\u2060"
_BROADCAST = re.compile(r"@(here|channel|everyone)\b", re.IGNORECASE)


def escape(text: str) -> str:
    """Slack's three control characters, escaped; the result can contain no link, mention or ping."""
    return unping(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def unping(text: str) -> str:
    """Bare ``@here``/``@channel``/``@everyone`` made plain words (the rest of ``text`` untouched)."""
    return _BROADCAST.sub(lambda m: f"@{WORD_JOINER}{m.group(1)}", text)
