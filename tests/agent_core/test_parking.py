"""Parked runs in the engine: a call whose approver cannot answer yet saves the run at that call; the resume takes it
up from the saved reply (no LLM call again), keeps what the step's other calls got, and runs the held call once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from agent_core import InMemoryThreadStore, RunRequest, Stopped
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tools import Parked, Registry, ToolContext, tool

RAN: list[str] = []


class NoteArgs(BaseModel):
    text: str


@tool(needs_approval=True)
async def send_note(args: NoteArgs, ctx: ToolContext) -> str:
    """Send a note (asks first)."""
    RAN.append(args.text)
    return f"sent {args.text}"


@tool()
async def count_notes(args: NoteArgs, ctx: ToolContext) -> str:
    """Count notes."""
    RAN.append(f"count {args.text}")
    return "3 notes"


class Decides:
    """Parks until ``answer`` is set, then answers it."""

    def __init__(self) -> None:
        self.answer: bool | None = None
        self.asked: list[tuple[str, int]] = []

    async def approve(self, tool: str, arguments: Mapping[str, Any], ctx: ToolContext) -> bool:
        self.asked.append((tool, ctx.step))
        if self.answer is None:
            raise Parked("waiting for an approver")
        return self.answer


async def test_a_parked_run_resumes_at_its_held_call_and_runs_it_once(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    RAN.clear()
    store = InMemoryThreadStore()
    approver = Decides()
    scope = ToolContext(run_id="", step=0, approver=approver)
    agent = make_agent(store=store, registry=Registry([send_note, count_notes]))
    fake_openai.queue(tool_calls(("count_notes", {"text": "a"}), ("send_note", {"text": "hi"})), text("Done."))
    first = await agent.run(RunRequest("send hi", thread="T1", run_id="r1", scope=scope))
    assert first.parked and first.steps == 1
    assert RAN == ["count a"] and len(fake_openai.requests) == 1
    state = await store.load("T1")
    assert state.progress.status == "parked" and state.progress.pending["message"]["tool_calls"]
    assert not any(m.get("tool_calls") for m in state.history)   # the held step is not in the history yet

    approver.answer = True
    events = [e async for e in agent.events(RunRequest("", thread="T1", resume=True, scope=scope))]
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and not stopped.parked and stopped.answer == "Done."
    assert RAN == ["count a", "hi"]                       # the other call was not run again; the held one once
    assert len(fake_openai.requests) == 2                 # the saved reply stood in for the step's LLM call
    assert approver.asked == [("send_note", 1), ("send_note", 1)]
    sent = fake_openai.requests[1].messages
    tools = [m["content"] for m in sent if m.get("role") == "tool"]
    assert any("3 notes" in t for t in tools) and any("sent hi" in t for t in tools)
    assert stopped.steps == 2
    history = (await store.load("T1")).history
    assert [m["role"] for m in history].count("user") == 1   # the task is stored once


async def test_a_denied_parked_call_reaches_the_model_as_refused(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    RAN.clear()
    store = InMemoryThreadStore()
    approver = Decides()
    scope = ToolContext(run_id="", step=0, approver=approver)
    agent = make_agent(store=store, registry=Registry([send_note]))
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), text("Not sent."))
    assert (await agent.run(RunRequest("send hi", thread="T1", run_id="r1", scope=scope))).parked
    approver.answer = False
    stopped = await agent.run(RunRequest("", thread="T1", resume=True, scope=scope))
    assert stopped.answer == "Not sent." and RAN == []
    tool_message = next(m for m in fake_openai.requests[1].messages if m.get("role") == "tool")
    assert "refused (not approved)" in tool_message["content"]
