"""Files out, through the running service (signed mention, worker, fake LLM, fake Slack): an answer too long for
a message arrives as ``answer.md`` under a summary and the stop line; a file the model hands over with
``attach_file`` arrives as a file; an upload Slack refuses falls back to messages, logged once per workspace."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.serve.service import Service
from bot.settings import Settings
from bot.workspace import DisplaySettings
from tests.bot.conftest import App, make_settings
from tests.fakes.openai_server import FakeOpenAI, streamed, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts

#: 20,000 characters in 400 numbered lines: every line is findable, the first ones make the summary.
LONG_ANSWER = "\n".join(f"Line {i:03d}: " + "x" * 39 for i in range(400))
CSV = "region,total\nnorth,12\nsouth,30\n"


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return make_settings(key_prefix, fake_slack, fake_openai, slack_stream_interval_seconds=0.05)


async def ask(app: App, slack: FakeSlack, task: str = "<@UBOT> write the long report") -> str:
    ts = next_ts()
    await app.post_event(event_body(mention(text=task, ts=ts)))
    await app.drain()
    return ts


def answered(answer: str) -> object:
    return text(answer, completion_tokens=300)


async def test_a_20000_character_answer_arrives_as_a_file_under_a_summary_and_the_stop_line(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    assert len(LONG_ANSWER) == 19_999
    fake_openai.queue(answered(LONG_ANSWER))
    ts = await ask(app, fake_slack)
    [file] = fake_slack.thread_files("C1", ts)
    assert file.filename == "answer.md" and file.text == LONG_ANSWER
    summary = fake_slack.thread_messages("C1", ts)[-1]
    shown = summary.block_text()
    assert "Line 000" in shown and "Line 399" not in shown
    assert "The full answer (19,999 characters) is attached as `answer.md`" in shown
    assert "Stop reason: `final_answer`" in shown
    assert file.shared_at < summary.ts  # the file, then its summary with the stop line and feedback buttons
    assert len(summary.text) < 3_000


async def test_a_short_answer_stays_a_message(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(answered("Short and sweet."))
    ts = await ask(app, fake_slack)
    assert fake_slack.thread_files("C1", ts) == []
    assert fake_slack.calls_of("files.getUploadURLExternal") == []
    assert "Short and sweet." in fake_slack.thread_messages("C1", ts)[-1].block_text()


async def test_a_csv_the_model_attaches_arrives_as_a_file_in_the_thread(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(
        tool_calls(("attach_file", {"name": "totals.csv", "content": CSV, "title": "Totals by region"})),
        answered("The totals are attached as totals.csv."),
    )
    ts = await ask(app, fake_slack, "<@UBOT> totals by region as a CSV please")
    [file] = fake_slack.thread_files("C1", ts)
    assert (file.filename, file.title, file.text) == ("totals.csv", "Totals by region", CSV)
    observation = fake_openai.requests[1].messages[-1]["content"]
    assert "totals.csv" in observation and "will be attached" in observation
    messages = fake_slack.thread_messages("C1", ts)
    assert "The totals are attached" in messages[-1].block_text()
    assert file.shared_at < messages[-1].ts


async def test_a_refused_upload_falls_back_to_messages_and_is_logged_once_per_workspace(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_slack.fail("files.getUploadURLExternal", error="missing_scope", times=3)
    fake_openai.queue(
        tool_calls(("attach_file", {"name": "totals.csv", "content": CSV})),
        answered(LONG_ANSWER),
        answered(LONG_ANSWER),
    )
    with caplog.at_level(logging.WARNING, logger="bot.thread.uploads"):
        first = await ask(app, fake_slack)
        second = await ask(app, fake_slack)
    for ts in (first, second):
        assert fake_slack.thread_files("C1", ts) == []
        shown = "\n".join(m.block_text() for m in fake_slack.thread_messages("C1", ts))
        assert "Line 000" in shown and "Line 399" in shown  # the whole answer, split over messages
        assert "is attached as" not in shown and "Stop reason: `final_answer`" in shown
    first_shown = "\n".join(m.block_text() for m in fake_slack.thread_messages("C1", first))
    assert "`totals.csv` (could not be attached as a file)" in first_shown and "south,30" in first_shown
    refused = [r for r in caplog.records if "refused a file upload" in r.getMessage()]
    assert len(refused) == 1 and "missing_scope" in refused[0].getMessage()


async def test_a_streamed_answer_past_the_limit_stops_streaming_and_is_attached(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await DisplaySettings(redis_client, AppKeys(key_prefix)).set_display(Workspace("T0001"), "timeline")
    fake_openai.queue(streamed(answered(LONG_ANSWER), pieces=10))  # type: ignore[arg-type]
    ts = await ask(app, fake_slack)
    [stream] = fake_slack.thread_streams("C1", ts)
    [file] = fake_slack.thread_files("C1", ts)
    assert file.filename == "answer.md" and file.text == LONG_ANSWER
    assert stream.stopped and "Line 000" in stream.markdown and "Line 399" not in stream.markdown
    assert "The full answer (19,999 characters) is attached as answer.md" in stream.markdown
    assert "Stop reason: `final_answer`" in stream.markdown
    assert len(stream.markdown) < 12_000 + 600


async def test_answer_file_chars_zero_keeps_every_answer_in_messages(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, settings: Settings
) -> None:
    fake_openai.queue(answered(LONG_ANSWER))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> the long report", ts=ts)))
    await app.drain(settings.model_copy(update={"agent_answer_file_chars": 0}))
    assert fake_slack.calls_of("files.getUploadURLExternal") == []
    shown = "\n".join(m.block_text() for m in fake_slack.thread_messages("C1", ts))
    assert "Line 000" in shown and "Line 399" in shown


class CanvasSlack(FakeSlack):
    """The fake Slack with ``files.info`` answering for its canvases (their permalink), the rest as the base does."""

    def _methods(self) -> dict[str, Any]:
        methods = super()._methods()
        base = methods.get("files.info")

        def info(params: dict[str, Any]) -> dict[str, Any]:
            canvas_id = str(params.get("file") or "")
            if canvas_id in self.canvases:
                return {"ok": True, "file": {"id": canvas_id, "permalink": f"https://fake.slack/docs/T0001/{canvas_id}"}}
            return base(params) if base is not None else {"ok": False, "error": "file_not_found"}

        methods["files.info"] = info
        return methods


@pytest.fixture
async def canvas_slack() -> AsyncIterator[CanvasSlack]:
    async with CanvasSlack() as slack:
        yield slack


async def test_with_answer_canvas_a_long_answer_is_a_canvas_the_channel_may_read(
    key_prefix: str, canvas_slack: CanvasSlack, fake_openai: FakeOpenAI
) -> None:
    settings = make_settings(key_prefix, canvas_slack, fake_openai, agent_answer_canvas=True)
    fake_openai.queue(answered(LONG_ANSWER))
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        ts = await ask(App(service, http), canvas_slack)
    [(canvas_id, canvas)] = canvas_slack.canvases.items()
    assert canvas["markdown"] == LONG_ANSWER and canvas["readers"] == ["C1"]
    assert canvas_slack.thread_files("C1", ts) == []
    shown = canvas_slack.thread_messages("C1", ts)[-1].block_text()
    assert f"is in <https://fake.slack/docs/T0001/{canvas_id}|this canvas>" in shown
    assert "Line 000" in shown and "Stop reason: `final_answer`" in shown


async def test_a_refused_canvas_becomes_the_file_and_is_deleted(
    key_prefix: str, canvas_slack: CanvasSlack, fake_openai: FakeOpenAI
) -> None:
    canvas_slack.fail("canvases.access.set", error="restricted_action")
    settings = make_settings(key_prefix, canvas_slack, fake_openai, agent_answer_canvas=True)
    fake_openai.queue(answered(LONG_ANSWER))
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        ts = await ask(App(service, http), canvas_slack)
    assert canvas_slack.canvases == {} and canvas_slack.calls_of("canvases.delete")
    [file] = canvas_slack.thread_files("C1", ts)
    assert file.filename == "answer.md" and file.text == LONG_ANSWER
    assert "is attached as `answer.md`" in canvas_slack.thread_messages("C1", ts)[-1].block_text()
