"""What ``/metrics`` of a running service shows, read from outside: its series, and the label values that are not
from a closed set. Shared by the process test (``test_metric_labels.py``) and the shapes suite."""

from __future__ import annotations

from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot import metrics
from tests.fakes.openai_server import Reply, text, tool_calls
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.processes import until
from tests.signing import event_body, mention

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: A file whose name must never become a label (its download URL ends with it).
SECRET_FILE = "salary-review-2026.csv"
#: Tool names the model makes up: each must count as ``other``.
INVENTED = tuple(f"made_up_tool_{n}" for n in range(6))
ANSWER = "Nothing I can use."
#: A run is two LLM calls on the fake; this bounds a loaded machine, it is not a speed target.
ANSWER_TIMEOUT = 60.0
OUTCOMES = metrics.LLM_OUTCOMES | metrics.TOOL_OUTCOMES | set(metrics.SLACK_OUTCOMES) | {metrics.OTHER}


async def scrape(url: str) -> Series:
    """Every sample of ``GET url/metrics``, by name and labels."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}{metrics.METRICS_PATH}") as resp:
        assert resp.status == 200, await resp.text()
        body = await resp.text()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def at(series: Series, name: str, **labels: str) -> float | None:
    """The sample's value, or None when ``/metrics`` does not show it."""
    return series.get((name, frozenset(labels.items())))


def zero_series_of_a_fresh_service(series: Series) -> None:
    """Known outcomes show at 0 before the first of them, so ``rate()`` and ``increase()`` see that first one."""
    for name, labels in [
        ("agent_runs_total", {"stop_reason": "error"}), ("agent_runs_total", {"stop_reason": "max_cost"}),
        ("agent_llm_calls_total", {"outcome": "rate_limited"}), ("agent_llm_calls_total", {"outcome": "timeout"}),
        ("agent_tool_calls_total", {"tool": "calculator", "outcome": "error"}),
        ("agent_tool_calls_total", {"tool": "other", "outcome": "unknown_tool"}),
        ("slack_api_calls_total", {"method": "chat.postMessage", "outcome": "error"}),
        ("slack_api_calls_total", {"method": "files.download", "outcome": "http_error"}),
        ("slack_rate_limited_total", {"method": "chat.update"}),
    ]:
        assert at(series, name, **labels) == 0, (name, labels)


def labelled_run(fake_slack: FakeSlack, ts: str) -> tuple[bytes, list[Reply]]:
    """A mention with a file attached whose model calls six tools it made up, then answers."""
    entry = fake_slack.add_file(FakeFile("F1", SECRET_FILE, b"name,salary\nAda,1\n", "text/csv"))
    body = event_body({**mention(text="<@UBOT> summarise the file", ts=ts), "files": [entry]})
    return body, [tool_calls(*((name, {"q": "x"}) for name in INVENTED)), text(ANSWER)]


def not_closed(before: Series, after: Series) -> list[str]:
    """Series the run added whose labels are not from a closed set: a tool the service did not show before (its
    registry's, at 0 from the start) or ``other``, a Slack method of its list, a known outcome or stop reason."""
    tools = {dict(labels).get("tool") for _, labels in before} | {metrics.OTHER}
    wrong = []
    for name, labels in set(after) - set(before):
        given: dict[str, Any] = dict(labels)
        if "tool" in given and given["tool"] not in tools:
            wrong.append(f"{name} tool={given['tool']!r}")
        if "method" in given and given["method"] not in metrics.SLACK_METHODS | {metrics.OTHER}:
            wrong.append(f"{name} method={given['method']!r}")
        if "outcome" in given and given["outcome"] not in OUTCOMES:
            wrong.append(f"{name} outcome={given['outcome']!r}")
        if "stop_reason" in given and given["stop_reason"] not in metrics.STOP_REASONS:
            wrong.append(f"{name} stop_reason={given['stop_reason']!r}")
    words = [f"{name} {dict(labels)}" for name, labels in after
             if any(SECRET_FILE in v or "made_up" in v for _, v in labels)]
    return wrong + words


async def after_the_run(url: str, before: Series) -> Series:
    """``/metrics`` once the run is counted (its worker records it just after the answer is posted)."""
    seen: list[Series] = []

    async def counted() -> bool:
        seen.append(await scrape(url))
        return delta(before, seen[-1], "agent_runs_total", stop_reason="final_answer") >= 1

    await until(counted, timeout=ANSWER_TIMEOUT, what="the run counted on /metrics")
    return seen[-1]


def delta(before: Series, after: Series, name: str, **labels: str) -> float:
    return (at(after, name, **labels) or 0) - (at(before, name, **labels) or 0)


def counted_as_closed(before: Series, after: Series) -> None:
    """The run's download and its made-up calls were counted, under closed names."""
    assert delta(before, after, "slack_api_calls_total", method="files.download", outcome="ok") == 1
    assert delta(before, after, "agent_tool_calls_total", tool="other", outcome="unknown_tool") == len(INVENTED)
    assert delta(before, after, "agent_runs_total", stop_reason="final_answer") == 1
