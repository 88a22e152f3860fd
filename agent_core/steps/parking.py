"""Parked runs: a tool call waits for an approval that may take hours, so the run is saved at that call and ends
without an answer (``Stopped.parked``), and a later resume takes it up at the same call.

Parking (``closing.close`` with a parked stop): the step's reply (the assistant message with its tool calls) is not
written to the history but kept in the progress (``Progress.pending``), with the results the step's other calls
already got; the progress says ``parked``. Resuming (``RunRequest.resume``): the saved reply stands in for the
step's LLM call (nothing is spent again, and the model cannot change its mind), the calls that have a result keep
it, and the others run, the held one asking its approver again, who has the answer by then::

    reply, done = saved_step(progress)       # (None, {}) for a run that is not parked
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_core.completion import LLMResponse, ToolCallRequest
from agent_core.context import Prompt
from agent_core.events import StopReason
from agent_core.steps.run_state import Run
from agent_core.stopper import CallPlan, Stop
from agent_core.store import Message, Progress
from tools import Outcome, ToolResult

#: What the loop's planner is skipped with for a replayed step: no LLM call is made, so nothing is capped.
_REPLAY_CALL = (Prompt([], 0), CallPlan(0, 0))


def planned(run: Run) -> tuple[Prompt, CallPlan] | None:
    """The next call's plan when it is a replay (None: plan it as usual)."""
    return _REPLAY_CALL if run.replay is not None else None


def replayed(run: Run) -> LLMResponse:
    """The saved reply, once: it stands in for the step's LLM call."""
    reply, run.replay = run.replay, None
    assert reply is not None
    run.progress = replace(run.progress, pending={})  # the step goes on as any other now
    return reply


def stop(detail: str) -> Stop:
    """The run's parked (non-)end."""
    return Stop(StopReason.CANCELLED, f"parked: {detail}", parked=True)


def pending_of(run: Run) -> dict[str, Any]:
    """The parked step as ``Progress.pending`` keeps it: the reply (taken out of what the next write saves) and
    the results the step's other calls got."""
    reply: Message = {}
    if run.unsaved and run.unsaved[-1].get("role") == "assistant":
        reply = run.unsaved.pop()
        if run.current and run.current[-1] is reply:
            run.current.pop()
    done = {call_id: {"tool": r.tool, "outcome": r.outcome.value, "text": r.text, "full": r.full, "empty": r.empty}
            for call_id, r in run.done.items()}
    return {"message": reply, "done": done}


def saved_step(progress: Progress) -> tuple[LLMResponse | None, dict[str, ToolResult]]:
    """A parked run's step: the reply to replay and the results already got; (None, {}) when there is none (or
    it cannot be read: the run then asks the model again, as after a crash)."""
    message = progress.pending.get("message") if progress.status == "parked" else None
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None, {}
    try:
        calls = tuple(ToolCallRequest(str(c["id"]), str(c["function"]["name"]), str(c["function"]["arguments"]))
                      for c in message.get("tool_calls") or ())
        done = {str(k): ToolResult(str(v["tool"]), Outcome(v["outcome"]), str(v["text"]), str(v["full"]),
                                   bool(v["empty"]))
                for k, v in dict(progress.pending.get("done") or {}).items()}
    except (KeyError, TypeError, ValueError):
        return None, {}
    content = message.get("content")
    reply = LLMResponse(content if isinstance(content, str) else None, calls, 0, 0,
                        finish_reason="tool_calls" if calls else "stop")
    return reply, done
