"""StepFinished: a step comes whole, and only once its ThreadStore.append succeeded; RunRequest is the run's input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agent_core import (
    CancelToken,
    Event,
    InMemoryThreadStore,
    Message,
    Observed,
    Progress,
    RunRequest,
    StepFinished,
    Stopped,
    StopReason,
    StoreError,
    ToolCalled,
)
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


class FailingAppends(InMemoryThreadStore):
    """Persists the first ``ok`` appends, then refuses every one (a Redis gone mid-run)."""

    def __init__(self, ok: int) -> None:
        super().__init__()
        self.ok = ok
        self.appended = 0

    async def append(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        if self.appended >= self.ok:
            raise StoreError("connection refused")
        self.appended += 1
        await super().append(thread, messages, progress, traces)


def two_steps(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(
        tool_calls(("lookup", {"key": "tokyo"}), ("lookup", {"key": "paris"}), content="Both at once."),
        tool_calls(("echo", {"text": "hi", "times": 2}), content="Now echo."),
        text("Asia/Tokyo, Europe/Paris, hi hi."),
    )


async def test_each_step_is_finished_whole_right_after_it_is_persisted(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    two_steps(fake_openai)
    store = InMemoryThreadStore()
    agent = make_agent(store=store)
    events: list[Event] = []
    async for event in agent.events(RunRequest("zones?", thread="T1", finished_steps=True)):
        if isinstance(event, StepFinished):
            saved = await store.load("T1")  # persisted by the time the step is said to be finished
            assert saved.progress.step == event.step
            answered = {m.get("tool_call_id") for m in saved.history if m["role"] == "tool"}
            assert {o.call_id for o in event.observations} <= answered
        events.append(event)
    finished = [e for e in events if isinstance(e, StepFinished)]
    assert [f.step for f in finished] == [1, 2]  # the answer's step is FinalAnswer/Stopped, not a StepFinished
    first = finished[0]
    assert first.thought == "Both at once."
    assert first.calls == tuple(e for e in events if isinstance(e, ToolCalled) and e.step == 1)
    assert first.observations == tuple(e for e in events if isinstance(e, Observed) and e.step == 1)
    assert [o.text for o in first.observations] == ["Asia/Tokyo", "Europe/Paris"]
    # Order: the fine-grained events of a step, then its StepFinished, then the next step.
    kinds = [type(e).__name__ for e in events if not type(e).__name__.endswith("Delta")]
    assert kinds == ["RunStarted", "Thought", "ToolCalled", "ToolCalled", "Observed", "Observed", "StepFinished",
                     "Thought", "ToolCalled", "Observed", "StepFinished", "Thought", "FinalAnswer", "Stopped"]


async def test_a_step_whose_append_fails_is_never_finished(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    two_steps(fake_openai)
    store = FailingAppends(ok=1)  # step 1 is saved, step 2's write fails (and so does the end's)
    agent = make_agent(store=store)
    events = [e async for e in agent.events(RunRequest("zones?", thread="T1", finished_steps=True))]
    assert [e.step for e in events if isinstance(e, StepFinished)] == [1]
    assert any(isinstance(e, Observed) and e.step == 2 for e in events)  # it ran, but was not persisted
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and stopped.store_failed and stopped.reason is StopReason.ERROR


async def test_a_store_that_fails_every_append_finishes_no_step(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    two_steps(fake_openai)
    agent = make_agent(store=FailingAppends(ok=0))
    events = [e async for e in agent.events(RunRequest("zones?", thread="T1", finished_steps=True))]
    assert not any(isinstance(e, StepFinished) for e in events)
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and stopped.store_failed


async def test_the_step_a_cancel_cut_short_is_finished_with_the_end(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(tool_calls(("lookup", {"key": "tokyo"}), content="Look it up."))
    store, cancel = InMemoryThreadStore(), CancelToken()
    events: list[Event] = []
    async for event in make_agent(store=store).events(
        RunRequest("zone?", thread="T1", cancel=cancel, finished_steps=True)
    ):
        if isinstance(event, ToolCalled):
            cancel.cancel("stop now")
        events.append(event)
    *_, finished, stopped = events
    assert isinstance(finished, StepFinished) and finished.thought == "Look it up."
    assert [c.tool for c in finished.calls] == ["lookup"] and finished.observations == ()
    assert isinstance(stopped, Stopped) and stopped.reason is StopReason.CANCELLED


async def test_the_old_spelling_builds_the_same_request_and_adds_no_step_events(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    two_steps(fake_openai)
    agent = make_agent()
    events = [e async for e in agent.events(RunRequest("zones?", thread=None))]
    assert not any(isinstance(e, StepFinished) for e in events)  # the terminal's stream is unchanged
    assert isinstance(events[-1], Stopped) and events[-1].reason is StopReason.FINAL_ANSWER
    with pytest.raises(TypeError, match="resume"):
        [e async for e in agent.events(RunRequest("zones?"), resume=True)]
