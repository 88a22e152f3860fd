"""The pure renderer: events and steps → Slack payloads within Slack's limits."""

from __future__ import annotations

import json

import pytest

from agent_core import Limits, Observed, RunStarted, Stopped, StopReason, ToolCalled, Usage
from bot.thread import render
from bot.thread.render import STOP_WORDS, RunView, Step

VIEW = RunView("run-1", stop_value="-/T1/C1/1.1|run-1", max_steps=15)


def all_text(messages: list[render.SlackMessage]) -> str:
    return "\n".join(b.get("text", {}).get("text", "") for m in messages for b in m.blocks)


def test_started_has_a_stop_button() -> None:
    msg = render.started(RunStarted("run-1", "task", Limits(), ("calculator",)), VIEW)
    button = msg.blocks[-1]["elements"][0]
    assert button["action_id"] == render.STOP_ACTION_ID and button["value"] == VIEW.stop_value
    assert msg.text


def test_step_shows_thought_call_arguments_and_observation() -> None:
    step = Step(
        2, "I need *math*",
        (ToolCalled(2, "c1", "calculator", {"expression": "2+2"}),),
        (Observed(2, "c1", "calculator", "ok", "4", 1),),
    )
    [msg] = render.step_messages(step)
    shown = all_text([msg])
    assert "*Step 2*" in shown and "I need _math_" in shown
    assert "`calculator`" in shown and '"expression": "2+2"' in shown and "```" in shown
    assert "→ ok (1 chars)" in shown


def test_observation_is_shortened_and_neutralised() -> None:
    obs = Observed(1, "c1", "fetch_url", "ok", "<!channel> " + "x" * 20_000, 20_011)
    [msg] = render.step_messages(Step(1, None, (ToolCalled(1, "c1", "fetch_url", {"url": "u"}),), (obs,)))
    shown = all_text([msg])
    assert "<!channel>" not in shown and "more characters not shown" in shown
    assert len(shown) < 3_000


@pytest.mark.parametrize("reason", list(StopReason))
def test_final_carries_the_stop_reason_verbatim(reason: StopReason) -> None:
    stopped = Stopped(reason, "answer", 3, Usage(100, 20, 0, 1_234), detail="max_steps: 15 of 15", run_id="r")
    messages = render.final_messages(stopped)
    footer = messages[-1].blocks[-1]
    assert footer["type"] == "context"
    line = footer["elements"][0]["text"]
    assert f"`{reason.value}` ({STOP_WORDS[reason]})" in line
    assert "3 steps" in line and "120 tokens" in line and "$0.0012" in line


def test_every_stop_reason_has_words() -> None:
    assert set(STOP_WORDS) == set(StopReason)


def test_long_answer_is_split_within_slack_limits() -> None:
    answer = "\n\n".join("p" * 900 for _ in range(40))
    messages = render.final_messages(Stopped(StopReason.FINAL_ANSWER, answer, 1, Usage()))
    assert len(messages) > 1
    for m in messages:
        assert len(m.blocks) <= 50
        assert all(len(b.get("text", {}).get("text", "")) <= 3_000 for b in m.blocks)
        assert sum(len(b.get("text", {}).get("text", "")) for b in m.blocks) <= 12_000
        assert len(m.text) <= 40_000
        json.dumps({"text": m.text, "blocks": list(m.blocks)})


def test_live_status_fits_chat_update() -> None:
    obs = tuple(Observed(1, f"c{i}", "t" * 60, "ok", "", 0) for i in range(100))
    msg = render.live_status(Step(1, None, (), obs), VIEW, steps_done=1)
    assert len(msg.text.encode()) <= 4_000
    assert msg.blocks[-1]["elements"][0]["action_id"] == render.STOP_ACTION_ID


def test_finished_header_has_no_button() -> None:
    msg = render.finished_header(Stopped(StopReason.CANCELLED, "x", 1, Usage()))
    assert all(b["type"] != "actions" for b in msg.blocks) and "`cancelled`" in msg.text


def test_a_cost_counted_offline_says_it_is_an_estimate() -> None:
    counted = Stopped(StopReason.FINAL_ANSWER, "ok", 1, Usage(100, 20, 0, 1_234, estimated=True))
    reported = Stopped(StopReason.FINAL_ANSWER, "ok", 1, Usage(100, 20, 0, 1_234))
    assert "(estimate)" in " ".join(m.text + json.dumps(m.blocks) for m in render.final_messages(counted))
    assert "(estimate)" not in " ".join(m.text + json.dumps(m.blocks) for m in render.final_messages(reported))
