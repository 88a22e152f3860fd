"""Names the bot did not write reach the channel inert (issue 37 item 3), through the running service: a file
named with Slack markup (``<!channel>``, a ``<url|label>`` link) pings nobody and shows no link, neither in the
"I can't use every file" notice nor in the exfiltration guard's held-back notice."""

from __future__ import annotations

import pytest

from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.signing import event_body, mention, next_ts

GONE = "<!channel> <https://evil.example/login|Session expired>.pdf"
READ = "<!here> <https://evil.example/reset|Reset your password>.txt"


@pytest.fixture
def app(guarded: App) -> App:
    return guarded


async def test_file_names_with_slack_markup_ping_nobody_and_link_nowhere_in_the_notices(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, pages: PageServer
) -> None:
    gone = fake_slack.add_file(FakeFile("F1", GONE, b"%PDF-1.4", "application/pdf", status=404))
    read = fake_slack.add_file(FakeFile("F2", READ, b"the notes", "text/plain"))
    fake_openai.queue(tool_calls(("fetch_url", {"url": pages.url("/text")})), text("Done."))
    ts = next_ts()
    await app.post_event(event_body({**mention(text="<@UBOT> read these", ts=ts), "files": [gone, read]}))
    await app.drain()

    posted = [m.text + "\n" + m.block_text() for m in fake_slack.thread_messages("C1", ts)]
    unusable = next(p for p in posted if "can't use every file" in p)
    held = next(p for p in posted if "I held back a `fetch_url` call" in p)
    for notice, name in ((unusable, GONE), (held, READ)):
        assert "<!" not in notice and "<https://evil.example" not in notice, notice
        escaped = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert escaped in notice, notice  # shown as typed
