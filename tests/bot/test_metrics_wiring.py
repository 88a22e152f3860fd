"""/metrics of the running service counts a scripted run's stop reason, its spend and the Slack calls it made."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

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
