"""The bot's own words in the asker's language (their Slack ``locale``), end to end: signed requests into the
running app, a drained worker, the fake Slack answering ``users.info`` with the person's locale."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.workspace import WorkspaceLimitsStore
from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlack, PostedMessage
from tests.signing import action_body, command_body, event_body, mention, next_ts


async def asked(app: App, fake_slack: FakeSlack, *, user: str) -> list[PostedMessage]:
    """``user`` mentions the bot; the run is drained; the thread as Slack shows it."""
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> what is 2+2?", ts=ts, user=user)))
    await app.drain()
    return fake_slack.thread_messages("C1", ts)


def home_view(fake_slack: FakeSlack, user: str) -> dict[str, Any]:
    [call] = [c for c in fake_slack.calls_of("views.publish") if c.params["user_id"] == user]
    view = call.params["view"]
    return json.loads(view) if isinstance(view, str) else dict(view)


async def test_a_spanish_speaker_is_answered_in_spanish_with_the_stop_reason_verbatim(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UES"] = {"locale": "es-LA"}
    fake_openai.queue(text("4"))
    first, *_, last = await asked(app, fake_slack, user="UES")
    # The status line (edited at the end) and the stop line: Spanish words, the stop reason as it is.
    assert "Terminado: `final_answer` (respondida)" in first.block_text()
    assert "Motivo de parada: `final_answer` (respondida) · 1 paso ·" in last.block_text()
    assert "Stop reason" not in last.block_text() and "4" in last.block_text()
    # The locale was asked for, as Slack requires.
    lookups = [c for c in fake_slack.calls_of("users.info") if c.params["user"] == "UES"]
    assert lookups and all(c.params.get("include_locale") in ("1", "true") for c in lookups)


async def test_the_working_line_and_its_stop_button_are_in_the_askers_language(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UES"] = {"locale": "es-ES"}
    fake_openai.queue(text("4"))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> what is 2+2?", ts=ts, user="UES")))
    await app.drain()
    [started] = [c for c in fake_slack.calls_of("chat.postMessage") if c.params.get("thread_ts") == ts][:1]
    blocks = started.params["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    assert "Estoy en ello" in blocks[0]["text"]["text"]
    assert blocks[-1]["elements"][0]["text"]["text"] == "Detener"


async def test_a_refused_guest_is_told_why_in_their_language(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UGUEST"] = {"locale": "ja-JP", "is_restricted": True}
    [refusal] = await asked(app, fake_slack, user="UGUEST")
    assert refusal.block_text().startswith("申し訳ありませんが、ゲストは実行を開始できません")
    assert "AGENT_ALLOW_GUESTS" in refusal.block_text()
    assert fake_openai.requests == []


async def test_a_queued_spanish_speaker_is_told_in_spanish(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(Workspace("T0001"), "max_concurrent", 1, "UA")
    fake_slack.users["UES"] = {"locale": "es-ES"}
    first_may_end = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        if len(fake_openai.requests) == 1:
            await first_may_end.wait()
        return text("4")

    fake_openai.script = script
    first, second = next_ts(), next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> 2+2?", ts=first, user="U1")))
    drain = asyncio.create_task(app.drain())
    await fake_openai.wait_for_requests(1)
    await app.post_event(event_body(mention(text="<@UBOT> 2+2?", ts=second, user="UES")))
    [told] = await fake_slack.wait_for("chat.postEphemeral", predicate=lambda c: c.params.get("thread_ts") == second)
    first_may_end.set()
    await drain
    assert told.params["user"] == "UES"
    assert told.params["text"].startswith(":hourglass: Este espacio de trabajo ejecuta una petición a la vez")
    assert "(n.º 1 en la fila)" in told.params["text"]


async def test_an_unknown_locale_falls_back_to_english(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UFR"] = {"locale": "fr-FR"}  # no French catalog
    fake_openai.queue(text("4"))
    first, *_, last = await asked(app, fake_slack, user="UFR")
    assert "Finished: `final_answer` (answered)" in first.block_text()
    assert "Stop reason: `final_answer` (answered) · 1 step ·" in last.block_text()


async def test_a_japanese_admin_gets_agent_limits_in_japanese(app: App, fake_slack: FakeSlack) -> None:
    fake_slack.users["UJA"] = {"locale": "ja-JP", "is_admin": True}
    fake_slack.users["UEN"] = {"locale": "en-US"}
    replies = []
    for user, text_ in (("UJA", "show"), ("UJA", "max-steps 40"), ("UEN", "show"), ("UJA", "max-steps lots")):
        response = await app.post_form(command_body(command="/agent-limits", text=text_, user=user))
        assert response.status == 200
        replies.append(str((await response.json())["text"]))
    shown, changed, english, wrong = replies
    assert shown.startswith("*このワークスペースのエージェント制限*")
    assert "• 実行あたりの最大ステップ数: " in shown
    # Commands and setting names stay as they are typed.
    assert changed.startswith("変更しました") and "max-steps: " in changed and "→ 40" in changed
    assert english.startswith("*Agent limits for this workspace*") and "• Max steps per run: 40" in english
    # A mistake is explained, and the usage shown, in Japanese; the commands in it as they are typed.
    assert wrong.startswith("`max-steps` には数字 0-9 で書いた整数が必要です。入力: `lots`。")
    assert "*使い方:* `/agent-limits [show]`" in wrong and "• `/agent-limits max-steps <n>`" in wrong


async def test_app_home_is_drawn_in_the_viewers_language(app: App, fake_slack: FakeSlack) -> None:
    fake_slack.users["UES"] = {"locale": "es-ES"}
    fake_slack.users["UFR"] = {"locale": "fr-FR"}
    for user in ("UES", "UFR"):
        event = {"type": "app_home_opened", "user": user, "channel": "D1", "tab": "home", "event_ts": next_ts()}
        assert (await app.post_event(event_body(event))).status == 200
    await fake_slack.wait_for("views.publish", count=2)
    spanish, fallback = home_view(fake_slack, "UES"), home_view(fake_slack, "UFR")
    assert spanish["blocks"][0]["text"]["text"] == "Límites y presupuesto del agente"
    assert "Todavía no hay ejecuciones." in json.dumps(spanish, ensure_ascii=False)
    assert fallback["blocks"][0]["text"]["text"] == "Agent limits and budget"


async def limits_reply(app: App, user: str, text_: str) -> str:
    response = await app.post_form(command_body(command="/agent-limits", text=text_, user=user))
    assert response.status == 200
    return str((await response.json())["text"])


async def test_a_spanish_speakers_stopped_run_says_who_stopped_it_in_spanish(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UES"] = {"locale": "es-ES"}
    fake_openai.queue(delay(60, text("too late")))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> think hard", ts=ts, user="UES")))
    drain = asyncio.create_task(app.drain())
    [started] = await fake_slack.wait_for("chat.postMessage", count=1)
    button = started.params["blocks"][-1]["elements"][0]
    await fake_openai.wait_for_requests(1)
    await app.post_form(action_body(action_id=button["action_id"], value=button["value"], user="UES",
                                    message_ts=started.response["ts"], thread_ts=ts))
    await drain
    last = fake_slack.thread_messages("C1", ts)[-1].block_text()
    # The stop reason verbatim beside Spanish words, and under it who pressed Stop, in Spanish too.
    assert "Motivo de parada: `cancelled` (detenida a petición)" in last
    assert last.endswith("\ncancelled: detenida por &lt;@UES&gt;")


async def test_a_japanese_admins_bad_allow_domain_is_explained_in_japanese(app: App, fake_slack: FakeSlack) -> None:
    fake_slack.users["UJA"] = {"locale": "ja-JP", "is_admin": True}
    fake_slack.users["UEN"] = {"locale": "en-US", "is_admin": True}
    url = await limits_reply(app, "UJA", "allow-domain https://docs.example.com/x")
    wildcard = await limits_reply(app, "UJA", "deny-domain *.example.com")
    assert url.startswith("`allow-domain`: `https://docs.example.com/x` は URL です。ホスト名だけを指定してください")
    assert wildcard.startswith("`deny-domain`: `*.example.com`: `*.` は付けないでください。`example.com` だけで")
    english = await limits_reply(app, "UEN", "allow-domain docs.example.com:8080")
    assert english.startswith("`allow-domain`: `docs.example.com:8080`: give the host without a port, e.g. "
                              "`docs.example.com`.")
    # Nothing was listed by any of them; the empty lists read in each one's language.
    assert "allowed after reading private data: none; denied: none" in await limits_reply(app, "UEN", "show")
    assert "許可される送信先ホスト: なし、拒否: なし" in await limits_reply(app, "UJA", "show")


async def test_the_agent_panes_heading_follows_the_viewer_and_the_operators_prompts_stay(
    app: App, fake_slack: FakeSlack
) -> None:
    fake_slack.agent_view = True
    fake_slack.users["UJA"] = {"locale": "ja-JP"}
    event = {"type": "app_home_opened", "user": "UJA", "channel": "D1", "tab": "messages", "event_ts": next_ts()}
    assert (await app.post_event(event_body(event))).status == 200
    await fake_slack.wait_for("assistant.threads.setSuggestedPrompts")
    assert fake_slack.prompt_titles == ["質問の例"]
    [(_channel, _thread, prompts)] = fake_slack.suggested_prompts
    assert prompts[0]["title"] == "Summarise a page"  # AGENT_SUGGESTED_PROMPTS, as the operator wrote them


async def test_slacks_search_refusal_is_shown_in_spanish_while_the_model_reads_it_in_english(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UES"] = {"locale": "es-ES"}
    fake_slack.search.action_tokens.add("tok-1")
    fake_slack.search.scope_granted = False
    fake_openai.queue(tool_calls(("slack_search", {"query": "roadmap"})), text("No pude buscar en Slack."))
    await app.post_event(event_body({**mention(text="<@UBOT> find the roadmap", ts=next_ts(), user="UES"),
                                     "action_token": "tok-1"}))
    await app.drain()
    told = [str(m["content"]) for m in fake_openai.requests[-1].messages if m.get("role") == "tool"]
    assert any("lacks the `search:read.public` scope" in t for t in told), told
    reply = await limits_reply(app, "UES", "tools")
    line = next(line for line in reply.splitlines() if "`slack_search`" in line)
    assert "a la app le falta el permiso `search:read.public`" in line, line
    assert "lacks the" not in line
