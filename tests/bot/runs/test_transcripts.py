"""Audio through the running service, paid for once: a voice memo attached to a mention is transcribed through the
fake endpoint's ``/audio/transcriptions`` once, its follow-ups read the thread's transcript instead of sending the
audio again, the transcription is charged to the run and the workspace budget at whisper-1's price per minute, and
a budget that cannot pay for it gets no transcription (the model is told why)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bot.identity import Workspace
from bot.serve.service import Service
from bot.settings import Settings
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy, WorkspaceLimitsStore
from tests.bot.conftest import App, make_settings
from tests.bot.runs.test_unwritable import recent
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.signing import event_body, mention, message, next_ts
from tests.tools.file_samples import wav_bytes

#: whisper-1: $0.006 a minute of audio.
WHISPER_MICROS_PER_MINUTE = 6_000
MEMO = "Please book the big room for Tuesday at ten."
WS = Workspace.of("T0001", "")


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return make_settings(key_prefix, fake_slack, fake_openai, openai_transcribe_model="whisper-1")


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[App]:
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        yield App(service, http)


def said(request: RecordedRequest) -> str:
    return json.dumps(request.messages)


def answer(prompt_tokens: int = 1000) -> Reply:
    return text("Done.", prompt_tokens=prompt_tokens, completion_tokens=100)


async def spent(app: App) -> int:
    services = app.service.services
    assert services is not None
    limits = WorkspaceParts.create(services.redis, LimitsPolicy.from_settings(app.service.settings),
                                    key_prefix=services.keys.prefix)
    return (await limits.runs.usage(WS, await limits.store.get(WS))).spent_micros


async def mention_with(app: App, fake_slack: FakeSlack, audio: bytes, words: str = "<@UBOT> do what it says") -> str:
    memo = fake_slack.add_file(FakeFile("F1", "memo.wav", audio, "audio/wav"))
    ts = next_ts()
    await app.post_event(event_body({**mention(text=words, ts=ts), "files": [memo]}))
    await app.drain()
    return ts


async def test_a_voice_memo_is_transcribed_once_and_its_follow_ups_do_not_send_it_again(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.transcript, fake_openai.transcript_seconds = MEMO, 60.0
    fake_openai.queue(*[answer()] * 4)
    ts = await mention_with(app, fake_slack, wav_bytes(60))
    for follow_up in ("and on Wednesday?", "who else is coming?", "thanks"):  # text only, as in the field
        await app.post_event(event_body(message(text=follow_up, thread_ts=ts, ts=next_ts())))
        await app.drain()
    # Before: each follow-up got the thread's audio again and sent it to /audio/transcriptions again.
    assert len(fake_openai.transcriptions) == 1
    chats = [r for r in fake_openai.requests if r.path.endswith("/chat/completions")]
    assert len(chats) == 4 and all(MEMO in said(r) for r in chats)  # every run still hears the memo


@pytest.mark.parametrize("reported", [90.0, None], ids=["seconds the endpoint billed", "the file's own length"])
async def test_the_spend_includes_the_transcription_at_whisper_1s_price(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, reported: float | None
) -> None:
    fake_openai.transcript, fake_openai.transcript_seconds = MEMO, reported
    fake_openai.queue(answer(prompt_tokens=1000))
    await mention_with(app, fake_slack, wav_bytes(90))
    llm = 1000 * 1 + 100 * 2  # make_settings' prices: $1 / $2 per 1M tokens
    transcription = 90 * WHISPER_MICROS_PER_MINUTE // 60  # $0.009
    # Before: the transcription was logged, never charged.
    assert await spent(app) == llm + transcription
    [record] = await recent(app)
    assert record.cost_micros == llm + transcription


async def test_a_budget_that_cannot_pay_for_the_transcription_gets_none_and_the_model_is_told(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: Any, key_prefix: str
) -> None:
    # $0.05 left: the LLM call fits, an hour of audio ($0.36) does not.
    await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(WS, "budget_micros", 50_000, "UADMIN")
    fake_openai.queue(text("I could not listen to it: the budget cannot pay.", prompt_tokens=1000,
                           completion_tokens=100))
    await mention_with(app, fake_slack, wav_bytes(3600))
    # Before: it was transcribed with the budget used up.
    assert fake_openai.transcriptions == []
    told = said(fake_openai.requests[-1])
    assert "memo.wav" in told and "not transcribed: the workspace budget cannot pay for its transcription" in told
    assert await spent(app) == 1000 + 200  # the LLM call alone
