"""The shapes operators run, end to end: each starts as an operator starts it, answers a mention in its thread,
applies an ``/agent-limits`` change, and stops cleanly on SIGTERM (exit 0, no process left).

- ``python -m bot`` with its default process count on a 2-core host (supervisor, web + 2 workers), one token;
- the same in OAuth mode, installed as Slack installs it: an Enterprise Grid org-wide install whose two
  workspaces send events, and a plain workspace beside it;
- ``python -m bot web`` and ``python -m bot worker`` side by side on one host, from one ``.env`` (one PORT),
  filled in from ``.env.example``, both appending to the one audit file it names;
- ``python -m bot`` as in the first, given a PNG and a PDF with a mention: the model sees the image, reads the PDF
  through ``read_file`` (its reader a child of the supervised worker), and its long answer arrives as ``answer.md``;
- ``python -m bot`` with two priced ``AGENT_MODELS`` and ``AUDIT_LOG`` a file: a Spanish-speaking admin makes a
  channel a help desk (its model, prompt, ``respond all``); a plain message there is answered in Spanish on that
  model and prompt, another channel's is not; ``usage today by model`` counts it at its price; the file has the
  changes and the run, never the message;
- the same in OAuth mode for a Grid org of two workspaces, the audit on stdout as shipped: one workspace's
  channel settings stay out of the other's channel of the same id, and ``usage month org`` sums both.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import redis.asyncio as aioredis
from PIL import Image

from agent_core import format_usd
from bot import audit
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.bot.oauth_helpers import KEY
from tests.conftest import session_redis_url
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.fakes.slack_api import FakeFile, FakeSlack, Grant
from tests.processes import ROOT, until
from tests.shapes import harness
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, env_file_from_example, free_port_pair
from tests.signing import command_body, event_body, mention, message, next_ts
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
    lines = audit_lines([json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()])
    assert sorted(x["event"] for x in lines) == ["app.installed", "limits.changed", "run.finished"]


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


#: ``AGENT_MODELS`` of the help-desk shapes: the default, and a second model at twice its price.
DESK_MODEL, DESK_PRICE_PER_1M = "desk-model", 2 * PRICE_PER_1M
DESK_MODELS = f"gpt-4o-mini:{PRICE_PER_1M}/{PRICE_PER_1M},{DESK_MODEL}:{DESK_PRICE_PER_1M}/{DESK_PRICE_PER_1M}"
DESK_PROMPT = "You are the printer help desk; answer in two lines."


async def desk_channel(slack: SlackSide, applies: str, **where: object) -> None:
    """An admin makes a channel a help desk: its own model and prompt, and every top-level message answered;
    each change confirmed with ``applies`` (in the admin's language)."""
    for setting in (f"channel model {DESK_MODEL}", f"channel prompt {DESK_PROMPT}", "channel respond all"):
        said = await slack.command(command_body(command="/agent-limits", text=setting, **where))  # type: ignore[arg-type]
        assert applies in said, said


def desk_spent(prompt_tokens: int) -> int:
    """Micro-dollars one run of ``prompt_tokens`` costs on the desk model."""
    return (prompt_tokens + COMPLETION_TOKENS) * DESK_PRICE_PER_1M


def usage_row(shown: str, member: str) -> list[str]:
    """The cells of ``member``'s row in an ``/agent-limits usage`` table."""
    rows = [re.split(r"\s{2,}", x.strip()) for x in shown.split("```")[1].strip("\n").splitlines()]
    return next((r for r in rows if r[0] == member), [f"(no {member})"])


async def usage_counted(slack: SlackSide, body: bytes, member: str, runs: int) -> tuple[str, list[str]]:
    """``/agent-limits usage ...`` (``body``) until ``member``'s row counts ``runs`` runs: a run's counters are
    added just after its answer is out. The report, and that row's cells."""
    said: list[str] = []

    async def counted() -> bool:
        said[:] = [await slack.command(body)]
        return "```" in said[0] and usage_row(said[0], member)[1:2] == [str(runs)]

    await until(counted, timeout=harness.ANSWER_TIMEOUT, what=f"{runs} run(s) of {member} in the usage report")
    return said[0], usage_row(said[0], member)


def audit_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The audit stream's lines among ``lines`` (JSON objects), each checked against its schema."""
    found = [x for x in lines if "event" in x and "v" in x]
    for line in found:
        jsonschema.validate(line, audit.SCHEMA)
    return found


async def test_python_m_bot_runs_a_channels_help_desk_in_spanish_counts_it_and_audits_it(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    audit_log = tmp_path / "audit.jsonl"
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_MODELS": DESK_MODELS, "AUDIT_LOG": str(audit_log)}
    fake_openai.script = answers({"printer": 1000})
    fake_slack.users.update({"UADMIN": {"is_admin": True, "locale": "es-ES"}, "UES": {"locale": "es-ES"}})
    tree = Tree([], tmp_path / "bot", env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)

    slack = SlackSide(tree.url, SECRET)
    await desk_channel(slack, "desde la próxima ejecución", user="UADMIN", channel="C1")
    # A plain message (no mention) in another channel first: that channel still waits for a mention.
    task = "my printer prints only blank pages"
    assert await slack.event(event_body(message(text=task, user="UES", channel="C2"))) == 200
    ts = next_ts()
    assert await slack.event(event_body(message(text=task, user="UES", channel="C1", ts=ts))) == 200
    await answer_in_thread(fake_slack, "C1", ts, "The answer for printer.")

    async def finished() -> bool:
        thread = fake_slack.thread_messages("C1", ts)
        return bool(thread) and "Motivo de parada" in thread[-1].block_text() and "Terminado" in thread[0].block_text()

    await until(finished, timeout=harness.ANSWER_TIMEOUT, what="the stop line, and the status line edited to say so")
    [request] = fake_openai.requests  # one run: C1's; C2's message started none
    assert request.model == DESK_MODEL and DESK_PROMPT in str(request.messages[0]["content"])
    thread = fake_slack.thread_messages("C1", ts)
    assert "Terminado: `final_answer` (respondida)" in thread[0].block_text()
    assert "Motivo de parada: `final_answer` (respondida) · 1 paso ·" in thread[-1].block_text()

    usage, row = await usage_counted(
        slack, command_body(command="/agent-limits", text="usage today by model", user="UADMIN"), DESK_MODEL, 1)
    assert "*Uso en este espacio de trabajo, hoy*" in usage
    assert row[1:5] == ["1", "1", "1,100", format_usd(desk_spent(1000))] and "gpt-4o-mini" not in usage, usage

    assert tree.warnings() == []
    await tree.stop_cleanly()
    assert not [m for m in fake_slack.messages if m.channel == "C2"] and len(fake_openai.requests) == 1
    # The audit stream, one file shared by the web process (the changes) and the workers (the run).
    lines = audit_lines([json.loads(x) for x in audit_log.read_text().splitlines()])
    assert not audit_lines(tree.records())  # the file only, not stdout
    changed = [(x["field"], x["actor"], x["new"]) for x in lines if x["event"] == "limits.changed"]
    assert changed == [("channel:C1:model", "UADMIN", DESK_MODEL), ("channel:C1:prompt", "UADMIN", DESK_PROMPT),
                       ("channel:C1:respond", "UADMIN", "all")]
    [run] = [x for x in lines if x["event"] == "run.finished"]
    assert (run["channel"], run["user"], run["model"], run["stop_reason"], run["spend_micros"]) == (
        "C1", "UES", DESK_MODEL, "final_answer", desk_spent(1000))
    assert task not in audit_log.read_text() and "The answer for printer" not in audit_log.read_text()


async def test_oauth_grid_channels_keep_their_workspaces_settings_and_an_org_admin_sums_the_org(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    # AUDIT_LOG as shipped: stdout, which every process of the tree shares (the logs go to stderr).
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), **oauth(fake_slack),
           "AGENT_MODELS": DESK_MODELS}
    fake_slack.add_install("org", Grant(None, enterprise_id="E1", is_enterprise_install=True))
    fake_slack.users.update({"UORG": {"team_id": "T21", "is_admin": True, "enterprise_user": {"is_admin": True}},
                             "U21": {"team_id": "T21"}, "U22": {"team_id": "T22"}})
    fake_openai.script = answers({"toner": 1000, "stapler": 2000})
    tree = Tree([], tmp_path / "bot", env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    slack = SlackSide(tree.url, SECRET)
    await slack.install("org")

    # Workspace T21's channel CX is a help desk; T22 has a channel of the same id, left as it was.
    grid = {"enterprise_id": "E1", "org_wide": True}
    await desk_channel(slack, "from the next run", user="UORG", channel="CX", team_id="T21", **grid)

    def sent(event: dict[str, Any], team: str) -> bytes:
        return event_body(event, team_id=team, enterprise_id="E1", org_wide=True)

    ts21, ts22 = next_ts(), next_ts()
    assert await slack.event(sent(message(text="is the stapler jammed?", user="U22", channel="CX", team="T22"),
                                  "T22")) == 200
    assert await slack.event(sent(message(text="where is the toner?", user="U21", channel="CX", ts=ts21,
                                          team="T21"), "T21")) == 200
    assert await slack.event(sent(mention(text="<@UBOT> is the stapler jammed?", user="U22", channel="CX",
                                          ts=ts22, team="T22"), "T22")) == 200
    await answer_in_thread(fake_slack, "CX", ts21, "The answer for toner.")
    await answer_in_thread(fake_slack, "CX", ts22, "The answer for stapler.")
    # Two runs: T22's plain message started none, and T22's run has the deployment's model and no desk prompt.
    by_word = {("toner" if "toner" in json.dumps(r.messages) else "stapler"): r for r in fake_openai.requests}
    assert sorted(by_word) == ["stapler", "toner"] and len(fake_openai.requests) == 2
    assert by_word["toner"].model == DESK_MODEL and DESK_PROMPT in str(by_word["toner"].messages[0]["content"])
    assert by_word["stapler"].model == "gpt-4o-mini" and DESK_PROMPT not in json.dumps(by_word["stapler"].messages)
    for team, user, respond in (("T21", "U21", "all"), ("T22", "U22", "mention")):
        shown = await slack.command(command_body(command="/agent-limits", text="channel show", user=user,
                                                 channel="CX", team_id=team, **grid))  # type: ignore[arg-type]
        assert (team, f"• respond: {respond}" in shown, DESK_PROMPT in shown) == (team, True, team == "T21"), shown

    org, row = await usage_counted(slack, command_body(command="/agent-limits", text="usage month org", user="UORG",
                                                       channel="CX", team_id="T21", **grid),  # type: ignore[arg-type]
                                   "all runs", 2)
    assert "across the org's 2 workspaces" in org, org
    both = desk_spent(1000) + (2000 + COMPLETION_TOKENS) * PRICE_PER_1M
    assert row[1:5] == ["2", "2", "3,200", format_usd(both)], org
    # The same by model as a CSV, uploaded into the org admin's DM with the org install's token.
    said = await slack.command(command_body(command="/agent-limits", text="usage export month by model org",
                                            user="UORG", channel="CX", team_id="T21", **grid))  # type: ignore[arg-type]
    assert "on its way to your direct messages" in said, said
    await fake_slack.wait_for("files.completeUploadExternal", timeout=harness.ANSWER_TIMEOUT)
    [upload] = [f for f in fake_slack.uploads.values() if f.shared_at]
    assert upload.channel == "DUORG" and upload.filename.endswith("-by-model-org.csv")
    assert {r["member"]: (r["runs"], r["spend_usd"]) for r in csv.DictReader(io.StringIO(upload.text))} == {
        DESK_MODEL: ("1", f"{desk_spent(1000) / 1e6:.6f}"),
        "gpt-4o-mini": ("1", f"{(2000 + COMPLETION_TOKENS) * PRICE_PER_1M / 1e6:.6f}")}

    assert tree.warnings() == []
    await tree.stop_cleanly()
    lines = audit_lines(tree.records())
    assert [(x["team"], x["enterprise"], x["org_wide"]) for x in lines if x["event"] == "app.installed"] == [
        ("", "E1", True)]
    assert [(x["team"], x["enterprise"], x["field"]) for x in lines if x["event"] == "limits.changed"] == [
        ("T21", "E1", f"channel:CX:{s}") for s in ("model", "prompt", "respond")]
    assert sorted((x["team"], x["enterprise"], x["model"], x["spend_micros"])
                  for x in lines if x["event"] == "run.finished") == [
        ("T21", "E1", DESK_MODEL, desk_spent(1000)),
        ("T22", "E1", "gpt-4o-mini", (2000 + COMPLETION_TOKENS) * PRICE_PER_1M)]
