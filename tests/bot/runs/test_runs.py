"""End to end runs: follow-ups after a restart, Stop, 429s, long answers, workspaces, queueing, verbosity."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import redis.asyncio as aioredis

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.jobs import Runtime, Turn
from bot.serve.service import Service
from bot.settings import Settings
from bot.thread import mrkdwn
from bot.workspace import DisplaySettings
from tests.bot.conftest import App, burst_worker, make_settings
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlack, PostedMessage
from tests.signing import action_body, event_body, mention, message, next_ts


def final_of(thread: list[PostedMessage]) -> PostedMessage:
    return next(m for m in reversed(thread) if "Stop reason" in m.block_text())


async def test_follow_up_sees_earlier_turns_after_a_restart(
    settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Noted: your number is 7."), text("It was 7."))
    ts = next_ts()
    async with Service(settings, "web") as first, aiohttp.ClientSession() as http:
        await App(first, http).post_event(event_body(mention(text="<@UBOT> remember the number 7", ts=ts)))
        await App(first, http).drain()
    # Every process restarted: a new web side and a new worker; only Redis remembers.
    async with Service(settings, "web") as second, aiohttp.ClientSession() as http:
        app = App(second, http)
        await app.post_event(event_body(message(text="which number did I say?", thread_ts=ts)))
        await app.drain()
    follow_up = fake_openai.requests[1].messages
    contents = [str(m.get("content")) for m in follow_up]
    assert any("remember the number 7" in c for c in contents)
    assert any("Noted: your number is 7." in c for c in contents)
    assert "It was 7." in final_of(fake_slack.thread_messages("C1", ts)).block_text()


async def test_stop_button_cancels_the_run_and_abandons_the_llm_call(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(delay(60, text("too late")))
    fake_slack.users["U9"] = {"is_admin": False}
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> think hard", ts=ts, user="U1")))
    drain = asyncio.create_task(app.drain())
    started = (await fake_slack.wait_for("chat.postMessage", count=1))[0]
    button = started.params["blocks"][-1]["elements"][0]
    await fake_openai.wait_for_requests(1)
    # Someone else may not stop it: told so privately, the run goes on.
    refused = await app.post_form(action_body(action_id=button["action_id"], value=button["value"], user="U9",
                                              message_ts=started.response["ts"], thread_ts=ts))
    assert refused.status == 200
    note = (await fake_slack.wait_for("chat.postEphemeral"))[0]
    assert "Only <@U1> or a workspace admin" in note.params["text"]
    assert not drain.done()
    resp = await app.post_form(action_body(action_id=button["action_id"], value=button["value"], user="U1",
                                           message_ts=started.response["ts"], thread_ts=ts))
    assert resp.status == 200
    await drain
    await fake_openai.wait_for_cancelled(1)
    final = final_of(fake_slack.thread_messages("C1", ts))
    assert "`cancelled`" in final.block_text()
    assert "too late" not in final.block_text()


async def test_admin_may_stop_another_users_run(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(delay(60, text("too late")))
    fake_slack.users["UADMIN"] = {"is_admin": True}
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> think hard", ts=ts, user="U1")))
    drain = asyncio.create_task(app.drain())
    started = (await fake_slack.wait_for("chat.postMessage", count=1))[0]
    value = started.params["blocks"][-1]["elements"][0]["value"]
    await fake_openai.wait_for_requests(1)
    await app.post_form(action_body(action_id="agent_stop", value=value, user="UADMIN", thread_ts=ts))
    await drain
    assert "`cancelled`" in final_of(fake_slack.thread_messages("C1", ts)).block_text()


async def test_429_on_post_message_still_posts_everything_in_order(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "6*7"}), content="Multiply."),
        tool_calls(("calculator", {"expression": "42+1"}), content="Add one."),
        text("43"),
    )
    fake_slack.fail("chat.postMessage", status=429, retry_after=0, times=3)
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> (6*7)+1", ts=ts)))
    await app.drain()
    assert len([c for c in fake_slack.calls_of("chat.postMessage") if c.status == 429]) == 3
    thread = fake_slack.thread_messages("C1", ts)
    bodies = [m.block_text() for m in thread]
    assert len(thread) == 4, bodies
    assert "Multiply." in bodies[1] and "Add one." in bodies[2] and "43" in bodies[3]


async def test_ten_thousand_character_answer_is_posted_whole(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    paragraphs = [f"Paragraph {i}: " + " ".join(f"word{i}-{j} & <x>" for j in range(40)) for i in range(25)]
    answer = "\n\n".join(paragraphs)
    assert len(answer) >= 10_000
    fake_openai.queue(text(answer))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> write a lot", ts=ts)))
    # Split over messages, as where files are off (past AGENT_ANSWER_FILE_CHARS it is a file: test_files_out.py).
    await app.drain(app.service.settings.model_copy(update={"agent_answer_file_chars": 0}))
    answer_messages = fake_slack.thread_messages("C1", ts)[1:]
    assert len(answer_messages) >= 2
    assert not any(m.truncated for m in answer_messages)
    shown = "".join(
        b["text"]["text"] for m in answer_messages for b in m.blocks if b.get("type") == "section"
    )
    assert _squash(shown) == _squash(mrkdwn.to_mrkdwn(answer))
    assert "`final_answer`" in answer_messages[-1].block_text()


def _squash(s: str) -> str:
    return "".join(s.split())


async def test_two_workspaces_never_see_each_others_threads(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    # A Slack Connect channel has one id in both organisations; the same ts is the worst case.
    fake_openai.queue(text("ok A"), text("ok B"), text("B again"))
    fake_slack.users.update({"UA": {"team_id": "TA"}, "UB": {"team_id": "TB"}})
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> secret of A is 1234", ts=ts, team="TA", user="UA"),
                                    team_id="TA"))
    await app.post_event(event_body(mention(text="<@UBOT> hello from B", ts=ts, team="TB", user="UB"), team_id="TB"))
    await app.drain()
    await app.post_event(event_body(message(text="what did I say?", thread_ts=ts, team="TB", user="UB"),
                                    team_id="TB"))
    await app.drain()
    assert len(fake_openai.requests) == 3
    b_follow_up = json.dumps(fake_openai.requests[2].messages)
    assert "hello from B" in b_follow_up
    assert "1234" not in b_follow_up


async def test_follow_up_during_a_run_waits_and_is_told(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    gate = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        if len(fake_openai.requests) == 1:
            await gate.wait()
            return text("first answer")
        return text("second answer")

    fake_openai.script = script
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> first", ts=ts)))
    drain = asyncio.create_task(app.drain())
    await fake_openai.wait_for_requests(1)
    await app.post_event(event_body(message(text="and a second thing", thread_ts=ts)))
    # Told where only the asker sees it: a notice never takes the channel's posting pace from the run's replies.
    [told] = await fake_slack.wait_for("chat.postEphemeral", predicate=lambda c: "queued" in str(c.params.get("text")))
    assert told.params["user"] == "U1" and told.params["thread_ts"] == ts
    gate.set()
    await drain
    await app.drain()  # the follow-on job the first run enqueued when it ended
    finals = [m.block_text() for m in fake_slack.thread_messages("C1", ts) if "Stop reason" in m.block_text()]
    assert len(finals) == 2 and "first answer" in finals[0] and "second answer" in finals[1]
    second = json.dumps(fake_openai.requests[1].messages)
    assert "first answer" in second and "and a second thing" in second


async def test_compact_verbosity_edits_one_status_message(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    await DisplaySettings(redis_client, AppKeys(key_prefix)).set_verbosity(Workspace("T0001"), "compact")
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "1+1"})), tool_calls(("calculator", {"expression": "2+2"})),
        text("done"),
    )
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> go", ts=ts)))
    await app.drain()
    thread = fake_slack.thread_messages("C1", ts)
    assert len(thread) == 2, [m.block_text() for m in thread]
    status, final = thread
    assert status.edits == 3  # two steps, then the finished header
    assert "`final_answer`" in final.block_text()
    updates = fake_slack.calls_of("chat.update")
    assert all(len(str(c.params.get("text", "")).encode()) <= 4000 for c in updates)


async def test_status_falls_back_to_a_reaction(
    key_prefix: str, fake_openai: FakeOpenAI
) -> None:
    async with FakeSlack(set_status_available=False) as slack:
        settings = make_settings(key_prefix, slack, fake_openai)
        fake_openai.queue(text("hi"))
        ts = next_ts()
        async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
            app = App(service, http)
            await app.post_event(event_body(mention(text="<@UBOT> hi", ts=ts)))
            await app.drain()
        assert [c.params["name"] for c in slack.calls_of("reactions.add")] == ["hourglass_flowing_sand"]
        assert slack.calls_of("reactions.remove")[0].ok
        assert slack.reactions[("C1", ts)] == set()


async def test_status_is_set_and_gone_at_the_end(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("hi"))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> hi", ts=ts)))
    await app.drain()
    statuses = [s for s in fake_slack.statuses if s[1] == ts]
    assert statuses[0][2]
    # Nothing shows "working" once the run is over; the answer's reply cleared it, so no call was spent on it.
    assert ("C1", ts) not in fake_slack.status_now
    assert [s[2] for s in statuses] == [statuses[0][2]]


async def test_status_is_cleared_when_the_answer_could_not_be_posted(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(delay(0.5, text("hi")))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> hi", ts=ts)))
    running = asyncio.ensure_future(app.drain())
    await fake_slack.wait_for("assistant.threads.setStatus", timeout=10)
    fake_slack.fail("chat.postMessage", error="channel_not_found")  # the answer's post, the model being slow
    await running
    assert fake_slack.status_now.get(("C1", ts)) is None
    assert [s[2] for s in fake_slack.statuses if s[1] == ts][-1] == ""


async def test_bots_edits_and_strangers_threads_start_nothing(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, settings: Settings
) -> None:
    ts = next_ts()
    for event in (
        message(text="I am a bot", bot_id="B2", subtype="bot_message", user=None),
        message(text="edited", subtype="message_changed"),
        message(text="gone", subtype="message_deleted"),
        message(text="<@UBOT> from a bot", bot_id="B3"),
        message(text="a reply in a thread the bot never ran in", thread_ts=ts),
        message(text="a plain channel message"),
    ):
        assert (await app.post_event(event_body(event))).status == 200
    assert await redis_client.zcard(settings.arq_queue_name) == 0
    await app.drain()
    assert fake_openai.requests == [] and fake_slack.calls_of("chat.postMessage") == []


async def test_model_text_cannot_ping_anyone(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "<!channel> 1+"})),
        text("Hey <!here> and <@U123> and @everyone, see <https://evil.example|this>"),
    )
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> ping", ts=ts)))
    await app.drain()
    for posted in fake_slack.thread_messages("C1", ts):
        for shown in (posted.text, posted.block_text()):
            assert "<!here>" not in shown and "<!channel>" not in shown and "<@U123>" not in shown
            assert "@everyone" not in shown and "<https://evil.example" not in shown


async def test_dm_continues_the_conversation(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("Hello!"), text("You said hi before."))
    first, second = next_ts(), next_ts()
    await app.post_event(event_body(message(text="hi", channel="D1", channel_type="im", ts=first)))
    await app.drain()
    await app.post_event(event_body(message(text="what did I say?", channel="D1", channel_type="im", ts=second)))
    await app.drain()
    assert "hi" in json.dumps(fake_openai.requests[1].messages)
    assert "You said hi before." in final_of(fake_slack.thread_messages("D1", second)).block_text()


def test_turn_round_trips() -> None:
    turn = Turn(Conversation(Workspace("T1"), "C1", "1.2"), "1.3", "task", "U1", "1.2", "1.3")
    assert Turn.from_json(turn.to_json()) == turn


async def test_worker_killed_mid_run_resumes_from_the_last_step(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, settings: Settings
) -> None:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "6*7"}), content="First multiply."),
        delay(60, text("never answered")),   # the in-flight call when the worker dies
        text("The answer is 42."),
    )
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> 6*7?", ts=ts)))
    async with burst_worker(settings) as doomed:
        main = asyncio.create_task(doomed.main())
        await fake_slack.wait_for("chat.postMessage", count=2)   # started + step 1
        await fake_openai.wait_for_requests(2)
        # The worker process dies: its job task is torn down mid-call, as a shutdown does.
        for task in list(doomed.job_tasks.values()):
            task.cancel()
        await main
    await app.drain()   # a new worker picks the job up again (try 2) and resumes
    thread = [m.block_text() for m in fake_slack.thread_messages("C1", ts)]
    assert sum("First multiply." in t for t in thread) == 1, thread   # step 1 is not posted twice
    assert sum("Working on it" in t or "Finished" in t for t in thread) == 1
    assert any("picking up from the last saved step" in t for t in thread)
    assert "The answer is 42." in thread[-1] and "`final_answer`" in thread[-1]
    resumed = json.dumps(fake_openai.requests[2].messages)
    assert "6*7" in resumed and "42" in resumed  # the step before the crash is in the resumed context


async def test_guest_is_refused_before_any_llm_call(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_slack.users["UGUEST"] = {"is_restricted": True}
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> spend money", ts=ts, user="UGUEST")))
    await app.drain()
    assert fake_openai.requests == []
    [reply] = fake_slack.thread_messages("C1", ts)
    assert "guests can't start runs" in reply.block_text()


async def test_used_up_budget_is_refused_at_once_and_other_workspaces_run(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    from bot.workspace import RunLedger, WorkspaceLimitsStore

    store = WorkspaceLimitsStore(redis_client, key_prefix=key_prefix)
    await store.set(Workspace("T0001"), "budget_micros", 0, "UADMIN")
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> spend money", ts=ts)))
    await app.drain()
    assert fake_openai.requests == []
    [reply] = fake_slack.thread_messages("C1", ts)
    assert "budget_exhausted" in reply.block_text()
    assert "resets" in reply.block_text() and "admin" in reply.block_text()

    fake_openai.queue(text("Another workspace still runs."))
    fake_slack.users["U2"] = {"team_id": "T0002"}
    other = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> hello", ts=other, team="T0002", user="U2"),
                                    team_id="T0002"))
    await app.drain()
    assert len(fake_openai.requests) == 1
    assert "Another workspace still runs." in final_of(fake_slack.thread_messages("C1", other)).block_text()
    runs = await RunLedger(redis_client, AppKeys(key_prefix)).recent_runs(Workspace("T0002"))
    assert runs and runs[0].permalink.startswith("https://fake.example/archives/C1/p")


async def test_a_run_that_ended_before_its_answer_was_posted_posts_it_on_the_rerun(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    from bot.queue.jobs import JOB_FUNCTION, enqueue_turn

    fake_openai.queue(text("The answer is 42."))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> the question", ts=ts)))
    await app.drain()
    assert sum("Stop reason" in m.block_text() for m in fake_slack.thread_messages("C1", ts)) == 1

    # The worker dies after saving the end of the run but before posting it: the ledger has no `final`, and
    # arq runs the job again.
    keys = AppKeys(key_prefix)
    turn = Turn(Conversation(Workspace("T0001"), "C1", ts), turn_id=ts, text="the question", user_id="U1",
                reply_thread_ts=ts, message_ts=ts)
    thread = turn.thread
    await redis_client.hdel(keys.run(thread, turn.run_id), "final")
    services = app.service.services
    assert services is not None
    await enqueue_turn(redis_client, services.queue, keys, turn, ttl_seconds=3600)
    await services.queue.enqueue_job(JOB_FUNCTION, thread, ts, _job_id=f"{key_prefix}:rerun")
    await app.drain()

    finals = [m for m in fake_slack.thread_messages("C1", ts) if "Stop reason" in m.block_text()]
    assert len(finals) == 2 and "The answer is 42." in finals[-1].block_text()
    assert len(fake_openai.requests) == 1  # no second LLM call: the saved answer is posted


async def test_only_a_turn_that_really_waits_is_told_it_is_queued(
    settings: Settings, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    # A job runs the thread's oldest turn: when B's job got the slot first, it is running A, and A's own job must
    # not tell A's asker that A waits behind "an earlier request".
    from bot.queue.jobs import enqueue_turn
    from bot.queue.worker import default_agent
    from bot.redis import RedisHandle
    from bot.slack_client import make_web_client

    keys = AppKeys(key_prefix)
    conversation = Conversation(Workspace("T0001"), "C1", "1700000000.000001")
    thread = conversation.id
    a, b = (Turn(conversation, turn_id=ts, text=ts, user_id="U1", reply_thread_ts="1700000000.000001", message_ts=ts)
            for ts in ("1700000000.000001", "1700000000.000002"))
    handle = RedisHandle(settings.redis_url or "")
    queue = await handle.arq_pool(settings.arq_queue_name)
    slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url, max_retry_after=1)
    runtime = Runtime(settings, handle.client(), queue, slack, default_agent)
    try:
        for turn in (a, b):
            await enqueue_turn(redis_client, queue, keys, turn, ttl_seconds=3600)
        await runtime._tell_queued(conversation, a.turn_id, keys.job_id("turn", thread, a.turn_id))
        await runtime._tell_queued(conversation, b.turn_id, keys.job_id("turn", thread, b.turn_id))
    finally:
        await runtime.aclose()  # lets the notices on their way arrive
        await handle.close()
    # B's asker alone is told, where only they see it; nothing is posted in the thread.
    [notice] = fake_slack.calls_of("chat.postEphemeral")
    assert "queued" in notice.params["text"] and notice.params["thread_ts"] == "1700000000.000001"
    assert fake_slack.thread_messages("C1", "1700000000.000001") == []


async def test_a_runs_tool_calls_are_traced_under_its_thread_with_its_steps(
    app: App, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    from agent_core import RedisThreadStore
    from bot.keys import AppKeys

    fake_openai.queue(tool_calls(("calculator", {"expression": "6*7"})), text("42."))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> 6*7?", ts=ts)))
    await app.drain()
    thread = Conversation(Workspace("T0001"), "C1", ts).id
    [record] = await RedisThreadStore(redis_client, AppKeys(key_prefix)).traces(thread)
    assert record["tool"] == "calculator" and record["outcome"] == "ok" and record["step"] == 1
    assert "42" in record["result_full"]
