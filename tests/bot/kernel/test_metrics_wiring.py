"""/metrics of the running service counts a scripted run's stop reason, its spend and the Slack calls it made."""

from __future__ import annotations

import io
import json
import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.logs import configure
from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.signing import event_body, mention, next_ts


async def scrape(app: App) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with app.http.get(f"{app.url}/metrics") as resp:
        assert resp.status == 200
        body = await resp.text()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


async def test_a_run_is_counted_on_metrics(app: App, fake_openai: FakeOpenAI) -> None:
    before = await scrape(app)
    fake_openai.queue(tool_calls(("calculator", {"expression": "6*7"})), text("42."))
    await app.post_event(event_body(mention(text="<@UBOT> 6*7?", ts=next_ts())))
    await app.drain()
    after = await scrape(app)
    key = ("agent_runs_total", (("stop_reason", "final_answer"),))
    assert after.get(key, 0) == before.get(key, 0) + 1
    assert sum(v for (n, _), v in after.items() if n == "slack_event_ack_seconds_count") >= 1
    spend = ("agent_spend_usd_total", (("team", "T0001"),))
    assert after.get(spend, 0) > before.get(spend, 0)
    llm = ("agent_llm_calls_total", (("outcome", "ok"),))
    assert after.get(llm, 0) == before.get(llm, 0) + 2  # the calculator call, then the answer
    tool = ("agent_tool_calls_total", (("outcome", "ok"), ("tool", "calculator")))
    assert after.get(tool, 0) == before.get(tool, 0) + 1
    latency = ("agent_tool_latency_seconds_count", (("tool", "calculator"),))
    assert after.get(latency, 0) == before.get(latency, 0) + 1
    # The budget gauge follows the spend: $10.00 default budget minus what was settled so far.
    remaining = after[("agent_budget_remaining_usd", (("team", "T0001"),))]
    assert 0 < remaining < 10.0


async def test_json_logs_of_a_run_carry_its_fields(
    app: App, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.queue(text("fine"))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> hi", ts=ts)))
    caplog.set_level(logging.DEBUG)
    out = io.StringIO()
    handler = configure("json", logging.DEBUG, app.service.settings.secrets(), stream=out)
    try:
        await app.drain()
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    in_run = [line for line in lines if line.get("run_id")]
    assert in_run, lines
    assert all(line["team"] == "T0001" and line["thread"].endswith(f"/C1/{ts}") for line in in_run)
    assert "xoxb-test-token" not in out.getvalue() and "sk-test" not in out.getvalue()
