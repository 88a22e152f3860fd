"""Per-channel agents, usage reports and the audit stream in the shapes operators run (see ``test_shapes.py``),
driven from outside as Slack drives them:

- ``python -m bot`` with two priced ``AGENT_MODELS`` and ``AUDIT_LOG`` a file: a Spanish-speaking admin makes a
  channel a help desk (its model, prompt, ``respond all``); a plain message there is answered in Spanish on that
  model and prompt, another channel's is not; ``usage today by model`` counts it at its price; the file has the
  changes and the run, never the message;
- the same in OAuth mode for a Grid org of two workspaces, the audit on stdout as shipped: one workspace's
  channel settings stay out of the other's channel of the same id, ``usage month org`` sums both, and the org
  admin's CSV export arrives in their DM.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from agent_core import format_usd
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack, Grant
from tests.processes import until
from tests.shapes import harness
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, audit_lines, free_port_pair, read_audit
from tests.shapes.test_shapes import COMPLETION_TOKENS, PRICE_PER_1M, answers, oauth, settings
from tests.signing import command_body, event_body, mention, message, next_ts

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
    lines = read_audit(audit_log)
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
