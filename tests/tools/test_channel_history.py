"""channel_history: reads through the SlackReader port, oldest first; a clear error outside Slack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools import Executor, Outcome, Registry, ToolContext
from tools.builtins.channel_history import channel_history


class RecordingReader:
    """A SlackReader port implementation holding messages newest first, as Slack returns them."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.calls: list[tuple[str, int]] = []

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        self.calls.append((channel_id, limit))
        return list(self.messages[:limit])


MESSAGES = [
    {"user": "U3", "text": "third\nwith a second line", "ts": "3"},
    {"bot_id": "B1", "text": "second", "ts": "2"},
    {"user": "U1", "text": "first", "ts": "1"},
]


async def history(arguments: dict[str, Any], ctx: ToolContext) -> tuple[Outcome, str, bool]:
    executor = Executor(Registry([channel_history]))
    result = await executor.execute(executor.prepare("channel_history", arguments, call_id="c"), ctx)
    return result.outcome, result.text, result.empty


async def test_lines_oldest_first_with_default_limit() -> None:
    reader = RecordingReader(MESSAGES)
    ctx = ToolContext(run_id="r1", step=1, task="t", channel_id="C1", slack=reader)
    outcome, text, _ = await history({}, ctx)
    assert outcome is Outcome.OK
    assert text == "U1: first\nB1: second\nU3: third\n  with a second line"
    assert reader.calls == [("C1", 20)]


async def test_limit_is_passed_and_bounded() -> None:
    reader = RecordingReader(MESSAGES)
    ctx = ToolContext(run_id="r1", step=1, task="t", channel_id="C1", slack=reader)
    _, text, _ = await history({"limit": 1}, ctx)
    assert text == "U3: third\n  with a second line" and reader.calls == [("C1", 1)]
    outcome, text, _ = await history({"limit": 0}, ctx)
    assert (
        outcome is Outcome.INVALID_ARGUMENTS and "limit: Input should be greater than or equal to 1" in text
    )
    assert reader.calls == [("C1", 1)]  # the invalid call never reached Slack


async def test_empty_channel_is_an_empty_result() -> None:
    ctx = ToolContext(run_id="r1", step=1, task="t", channel_id="C1", slack=RecordingReader([]))
    outcome, text, empty = await history({}, ctx)
    assert outcome is Outcome.OK and text == "" and empty


async def test_outside_slack_is_a_clear_error() -> None:
    outcome, text, _ = await history({}, ToolContext(run_id="r1", step=1, task="t"))
    assert outcome is Outcome.ERROR
    assert "channel_history is only available inside Slack" in text
