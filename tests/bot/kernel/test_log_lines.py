"""The text log keeps one record to a line, whatever a name holds (issue 37 item 6): a file whose name carries a
newline and a made-up log line cannot add that line to the running service's log."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from tests.bot.conftest import SECRET
from tests.bot.service_processes import process, service_env
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.signing import event_body, mention, next_ts, signed_headers

FORGED = "2026-12-05 06:00:00,000 ERROR bot.audit: UEVIL was made a workspace admin"


async def test_a_newline_in_a_file_name_forges_no_line_of_the_text_log(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Nothing to read."))
    entry = fake_slack.add_file(FakeFile("F1", f"notes.txt\n{FORGED}", b"x", "text/plain", status=404))
    env = service_env(fake_slack, fake_openai, TEST_REDIS_URL, REDIS_KEY_PREFIX=key_prefix,
                      ARQ_QUEUE_NAME=f"{key_prefix}:queue", LOG_FORMAT="text", LOG_LEVEL="INFO")
    ts = next_ts()
    body = event_body({**mention(text="<@UBOT> read this", ts=ts), "files": [entry]})
    async with process("all", env, tmp_path, "bot") as bot, aiohttp.ClientSession() as http:
        await bot.wait_healthy()
        async with http.post(f"{bot.url}/slack/events", data=body, headers=signed_headers(SECRET, body)) as resp:
            assert resp.status == 200
        await fake_slack.wait_for("chat.postMessage", timeout=30,
                                  predicate=lambda c: "Stop reason" in json.dumps(c.params))
        log = bot.log()
    assert "notes.txt" in log  # the file's line was written ...
    assert not [line for line in log.splitlines() if line.startswith(FORGED)], log  # ... as one line
