"""slack_search: offered only where Slack's search is there for the run, its results rendered one line each,
and marked as private data (the guard arms on them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tools import Registry, ToolContext, ToolSettings, builtin_registry, run_registry
from tools.builtins.slack_search import MAX_CONTENT, render_results, slack_search
from tools.errors import NotInSlackError

RESPONSE = {
    "ok": True,
    "results": {
        "messages": [{"author_user_id": "U2", "channel_id": "C9", "message_ts": "1.2", "content": "hello\nthere",
                      "permalink": "https://x.slack.com/archives/C9/p12"}],
        "files": [{"title": "plan.pdf", "author_user_id": "U3", "permalink": "https://x.slack.com/files/F1"}],
    },
    "response_metadata": {"next_cursor": "Q1VS"},
}


class Reader:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int, str, Mapping[str, Any]]] = []

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        return []

    async def search(self, query: str, *, limit: int, cursor: str, filters: Mapping[str, Any]) -> Mapping[str, Any]:
        self.asked.append((query, limit, cursor, filters))
        return RESPONSE


def test_results_are_one_line_each_with_permalinks_and_the_next_cursor() -> None:
    out = render_results(RESPONSE)
    assert out.splitlines() == [
        "- message by U2 in C9 at 1.2 <https://x.slack.com/archives/C9/p12>: hello there",
        "- file 'plan.pdf' by U3 <https://x.slack.com/files/F1>",
        "(more results: call again with cursor 'Q1VS')",
    ]
    assert render_results({"ok": True, "results": {"messages": []}}) == "No Slack messages or files matched."
    long = render_results({"results": {"messages": [{"content": "x" * 2000}]}})
    assert len(long) < MAX_CONTENT + 100 and long.endswith("…")


async def test_the_tool_passes_only_the_filters_given_and_is_private_data() -> None:
    reader = Reader()
    ctx = ToolContext(run_id="r", step=1, channel_id="C1", slack=reader)
    args = slack_search.args_model(query="plan", after=1700000000, channel_types=["public_channel", "im"])
    out = await slack_search.handler(args, ctx)
    assert "plan.pdf" in out
    assert reader.asked == [("plan", 10, "", {"channel_types": ["public_channel", "im"], "after": 1700000000})]
    assert slack_search.reads_private_data
    with pytest.raises(NotInSlackError):
        await slack_search.handler(args, ToolContext(run_id="r", step=1))


def test_offered_only_in_a_slack_run_that_can_search() -> None:
    registry: Registry = builtin_registry(ToolSettings(_env_file=None))  # type: ignore[call-arg]
    assert "slack_search" in registry.names()
    names = lambda **kw: run_registry(registry, task="t", **kw).names()  # noqa: E731
    assert "slack_search" not in names(environment="slack")
    assert "slack_search" in names(environment="slack", can_search=True)
    assert "slack_search" not in names(environment="terminal", can_search=True)
