"""The shapes operators run, end to end: each starts as an operator starts it, answers a mention in its thread,
applies an ``/agent-limits`` change, and stops cleanly on SIGTERM (exit 0, no process left).

- ``python -m bot`` with its default process count on a 2-core host (supervisor, web + 2 workers), one token;
- the same in OAuth mode, installed as Slack installs it: an Enterprise Grid org-wide install whose two
  workspaces send events, and a plain workspace beside it;
- ``python -m bot web`` and ``python -m bot worker`` side by side on one host, from one ``.env`` (one PORT),
  filled in from ``.env.example``, both appending to the one audit file it names;
- ``python -m bot`` as in the first, given a PNG and a PDF with a mention: the model sees the image, reads the PDF
  through ``read_file`` (its reader a child of the supervised worker), and its long answer arrives as ``answer.md``;
- ``python -m bot`` as in the first, given three files that download slowly (longer together than a lease): one
  answer, each file downloaded once (issue 37, item 10).

Per-channel agents, usage reports and the audit stream in these shapes: ``test_channel_agent_shapes.py``.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import redis.asyncio as aioredis
from PIL import Image

from agent_core import format_usd
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.bot.oauth_helpers import KEY
from tests.conftest import session_redis_url
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.fakes.slack_api import FakeFile, FakeSlack, Grant
from tests.processes import ROOT, until
from tests.shapes import harness
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, env_file_from_example, free_port_pair, read_audit
from tests.signing import command_body, event_body, mention, next_ts
from tests.tools.file_samples import pdf_bytes

OPENAI_KEY = "sk-test-shapes-key"
#: USD per 1M tokens, both ways: 10 micro-dollars a token, so each run's cost shows in `/agent-limits`.
PRICE_PER_1M = 10
COMPLETION_TOKENS = 100
SUPERVISED_ALL = Counter(web=1, worker=2)
PDF_TEXT = "Quarterly revenue grew by 12 percent"
#: 20,000 characters in 400 numbered lines: past a message's length, so it arrives as ``answer.md``.
LONG_ANSWER = "\n".join(f"Line {i:03d}: " + "x" * 39 for i in range(400))


def settings(key_prefix: str, slack: FakeSlack, openai: FakeOpenAI, port: int) -> dict[str, str]:
    """What every shape sets: the fakes, the test's Redis prefix and queue, JSON logs, no pacing."""
    return {
        "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.base_url, "OPENAI_API_KEY": OPENAI_KEY,
        "OPENAI_BASE_URL": openai.base_url, "OPENAI_MAX_RETRIES": "0",
        "LLM_PRICE_PROMPT_PER_1M": str(PRICE_PER_1M), "LLM_PRICE_COMPLETION_PER_1M": str(PRICE_PER_1M),
        "REDIS_URL": session_redis_url(), "REDIS_KEY_PREFIX": key_prefix, "ARQ_QUEUE_NAME": f"{key_prefix}:queue",
        "HOST": "127.0.0.1", "PORT": str(port), "SLACK_POSTS_PER_SECOND": "0", "SLACK_UPDATES_PER_MINUTE": "0",
        "LOG_FORMAT": "json",
    }


def oauth(slack: FakeSlack) -> dict[str, str]:
    return {"SLACK_CLIENT_ID": slack.client_id, "SLACK_CLIENT_SECRET": slack.client_secret,
            "SLACK_TOKEN_ENCRYPTION_KEY": KEY}


def answers(by_word: dict[str, int]) -> Callable[[RecordedRequest], Reply]:
    """The LLM's script: the answer to a task naming one of ``by_word``, its prompt that many tokens."""

    def script(request: RecordedRequest) -> Reply:
        said = " ".join(str(m.get("content")) for m in request.messages)
        word = next(w for w in by_word if w in said)
        return text(f"The answer for {word}.", prompt_tokens=by_word[word], completion_tokens=COMPLETION_TOKENS)

    return script


def spent(prompt_tokens: int) -> str:
    """What `/agent-limits` shows as spent for one run of ``prompt_tokens``."""
    return format_usd((prompt_tokens + COMPLETION_TOKENS) * PRICE_PER_1M)


def line(shown: str, starting: str) -> str:
    """The line of an `/agent-limits` answer that starts with ``starting`` (after its bullet)."""
    return next((x for x in shown.splitlines() if x.removeprefix("• ").startswith(starting)), f"(no {starting})")


async def limits_changed(slack: SlackSide, **where: object) -> None:
    """An admin sets max-steps to 7 with ``/agent-limits``, and the workspace's limits show it."""
    said = await slack.command(command_body(command="/agent-limits", text="max-steps 7", **where))  # type: ignore[arg-type]
    assert "7" in said, said
    shown = await slack.command(command_body(command="/agent-limits", text="show", **where))  # type: ignore[arg-type]
    assert line(shown, "Max steps") == "• Max steps per run: 7", shown


async def test_python_m_bot_on_two_cores_runs_web_and_two_workers_and_answers(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    # Settings in the environment (as a platform gives them), one bot token.
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN}
    fake_openai.script = answers({"two plus two": 1000})
    fake_slack.users["U1"] = {"is_admin": True}
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    assert tree.children() == SUPERVISED_ALL

    slack, ts = SlackSide(tree.url, SECRET), next_ts()
    assert await slack.event(event_body(mention(text="<@UBOT> what is two plus two?", ts=ts))) == 200
    posts = await answer_in_thread(fake_slack, "C1", ts, "The answer for two plus two.")
    assert {c.token for c in posts} == {BOT_TOKEN}
    await limits_changed(slack, user="U1")

    assert tree.warnings() == []  # Bolt's "`token` will be unused" among them, before
    await tree.stop_cleanly()


async def test_oauth_python_m_bot_serves_an_org_wide_install_and_a_plain_workspace(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), **oauth(fake_slack)}
    fake_slack.add_install("org", Grant(None, enterprise_id="E1", is_enterprise_install=True))
    fake_slack.add_install("plain", Grant("T3"))
    fake_slack.users.update({"U21": {"team_id": "T21", "is_admin": True}, "U22": {"team_id": "T22"},
                             "U3": {"team_id": "T3"}})
    # Each workspace's run costs its own amount, so each workspace's spend says which runs it paid for.
    runs = {"T21": ("E1", "U21", "C21", "grid one", 1000), "T22": ("E1", "U22", "C22", "grid two", 2000),
            "T3": (None, "U3", "C3", "plain three", 3000)}
    fake_openai.script = answers({word: tokens for *_, word, tokens in runs.values()})
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    assert tree.children() == SUPERVISED_ALL

    slack = SlackSide(tree.url, SECRET)
    await slack.install("org")
    await slack.install("plain")
    token = {fake_slack.tokens[t].grant.enterprise_id or fake_slack.tokens[t].grant.team_id: t
             for t in fake_slack.tokens}
    threads = {}
    for team, (enterprise, user, channel, word, _) in runs.items():
        threads[team] = next_ts()
        body = event_body(mention(text=f"<@UBOT> {word}?", user=user, channel=channel, ts=threads[team], team=team),
                          team_id=team, enterprise_id=enterprise, org_wide=enterprise is not None)
        assert await slack.event(body) == 200

    for team, (enterprise, _, channel, word, _) in runs.items():
        posts = await answer_in_thread(fake_slack, channel, threads[team], f"The answer for {word}.")
        # In its own workspace's thread, with the token of the installation that workspace is in.
        assert {c.token for c in posts} == {token[enterprise or team]}, team

    grid = {"enterprise_id": "E1", "org_wide": True}
    await limits_changed(slack, user="U21", channel="C21", team_id="T21", **grid)
    shown = {}
    for team, (enterprise, user, channel, _, _) in runs.items():
        where = {"user": user, "channel": channel, "team_id": team, **(grid if enterprise else {})}
        shown[team] = await slack.command(command_body(command="/agent-limits", text="show", **where))  # type: ignore[arg-type]
        assert (team, line(shown[team], "Max steps")) == (team, f"• Max steps per run: {7 if team == 'T21' else 15}")

    assert tree.warnings() == []
    await tree.stop_cleanly()
    # Each run was charged to the workspace its event named: what its `/agent-limits` shows as spent.
    assert {team: line(shown[team], "Spent") for team in runs} == {
        team: f"• Spent this month: {spent(tokens)}" for team, (*_, tokens) in runs.items()}


async def test_web_and_worker_side_by_side_from_one_env_file(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    # The README's two roles on one host: .env.example filled in (OAuth mode, so SLACK_BOT_TOKEN stays empty),
    # one PORT, then `python -m bot web` and `python -m bot worker` in that folder.
    port = free_port_pair()
    # The audit stream to a file named relative to that folder, which both commands append to.
    env_file = env_file_from_example(ROOT / ".env.example", {
        **settings(key_prefix, fake_slack, fake_openai, port), **oauth(fake_slack), "AUDIT_LOG": "audit.jsonl"})
    fake_slack.add_install("plain", Grant("T5"))
    fake_slack.users["U5"] = {"team_id": "T5", "is_admin": True}
    fake_openai.script = answers({"side by side": 1000})
    web = Tree(["web"], tmp_path, env_file=env_file, name="web")
    worker = Tree(["worker"], tmp_path, name="worker")
    trees += [web, worker]
    web.start()
    worker.start()
    await web.ready(web=1)
    await worker.ready(workers=2)
    assert web.children() == Counter() and worker.children() == Counter(worker=2)
    # The workers' /healthz is on the port after PORT (WORKER_HEALTH_PORT's default), shared by both.
    assert sum(f"worker health on 127.0.0.1:{port + 1}/healthz" in m for m in worker.messages()) == 2

    slack, ts = SlackSide(web.url, SECRET), next_ts()
    await slack.install("plain")
    body = event_body(mention(text="<@UBOT> side by side?", user="U5", channel="C5", ts=ts, team="T5"),
                      team_id="T5")
    assert await slack.event(body) == 200
    await answer_in_thread(fake_slack, "C5", ts, "The answer for side by side.")
    await limits_changed(slack, user="U5", channel="C5", team_id="T5")

    assert web.warnings() == [] and worker.warnings() == []
    await web.stop_cleanly()
    await worker.stop_cleanly()
    assert sorted(x["event"] for x in read_audit(tmp_path / "audit.jsonl")) == [
        "app.installed", "limits.changed", "run.finished"]


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 3), (128, 128, 128)).save(out, "PNG")
    return out.getvalue()


async def test_python_m_bot_takes_a_png_and_a_pdf_and_answers_long_as_a_file(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN}
    fake_openai.queue(tool_calls(("read_file", {"name": "report.pdf"})), text(LONG_ANSWER, completion_tokens=300))
    files = [fake_slack.add_file(FakeFile("F1", "chart.png", png(), "image/png")),
             fake_slack.add_file(FakeFile("F2", "report.pdf", pdf_bytes([PDF_TEXT]), "application/pdf"))]
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)

    slack, ts = SlackSide(tree.url, SECRET), next_ts()
    event = {**mention(text="<@UBOT> summarise the report and the chart", ts=ts), "files": files}
    assert await slack.event(event_body(event)) == 200

    async def answered() -> bool:
        thread = fake_slack.thread_messages("C1", ts)
        return bool(thread) and "Stop reason" in thread[-1].block_text()

    await until(answered, timeout=harness.ANSWER_TIMEOUT, what="the answer in the thread")
    assert sorted(fake_slack.downloads) == [("F1", BOT_TOKEN), ("F2", BOT_TOKEN)]
    # The model (the default gpt-4o-mini: vision on) sees the image as an image part of the task, the PDF named.
    first, second = fake_openai.requests
    [task] = [m for m in first.messages if isinstance(m["content"], list)]
    assert [p["type"] for p in task["content"]].count("image_url") == 1 and "report.pdf" in json.dumps(task)
    # read_file's reader, a child process of the supervised worker, read the PDF's page.
    [observation] = [m["content"] for m in second.messages if m["role"] == "tool"]
    assert "--- page 1 ---" in observation and PDF_TEXT in observation
    # The long answer: answer.md in the thread, under a summary with the stop line.
    [file] = fake_slack.thread_files("C1", ts)
    assert file.filename == "answer.md" and file.text == LONG_ANSWER
    shown = fake_slack.thread_messages("C1", ts)[-1].block_text()
    assert "Line 000" in shown and "is attached as `answer.md`" in shown and "Stop reason: `final_answer`" in shown

    assert tree.warnings() == []
    await tree.stop_cleanly()


async def test_python_m_bot_keeps_a_run_through_slow_downloads_one_answer_each_file_once(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    # Leases of 3 s (renewed every second) and three files of 2 s each: the downloads outlast a lease twice over.
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_LEASE_SECONDS": "3", "AGENT_LEASE_RENEW_SECONDS": "1"}
    fake_openai.script = lambda request: text("The notes say hello.")
    files = [fake_slack.add_file(FakeFile(f"F{i}", f"notes-{i}.txt", b"hello", "text/plain", delay=2.0))
             for i in range(3)]
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    assert tree.children() == SUPERVISED_ALL

    slack, ts = SlackSide(tree.url, SECRET), next_ts()
    event = {**mention(text="<@UBOT> what do my notes say?", ts=ts), "files": files}
    assert await slack.event(event_body(event)) == 200
    await answer_in_thread(fake_slack, "C1", ts, "The notes say hello.")
    # Before: the other worker took the run over while it downloaded, again and again, downloading every file anew.
    assert sorted(fake_slack.downloads) == [("F0", BOT_TOKEN), ("F1", BOT_TOKEN), ("F2", BOT_TOKEN)]
    finals = [m for m in fake_slack.thread_messages("C1", ts) if "Stop reason" in m.block_text()]
    assert len(finals) == 1 and len(fake_openai.requests) == 1

    assert tree.warnings() == []
    await tree.stop_cleanly()
