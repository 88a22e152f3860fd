"""A step's actions: the loop checks on its calls, running them, their observations, and the answer shown."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal

from agent_core import text_react
from agent_core.events import Observed
from agent_core.steps import progress
from agent_core.steps.run_state import Run, Step
from agent_core.stopper import Stop
from tools import Parked, PreparedCall, ToolContext, ToolResult, wrap_untrusted


def check_loops(run: Run, step: Step) -> Stop | None:
    """Layer 3, before anything runs: the stop of a call the run keeps repeating, if any."""
    for call in step.calls:
        stop = run.stopper.check_call(call.tool, call.canonical)
        if stop is not None:
            return stop
    return None


async def act(run: Run, step: Step, protocol: Literal["tools", "react"]) -> list[ToolResult]:
    """Run the step's calls at once, and remember each result (wrapped as untrusted) for the next call."""
    def ctx(call: PreparedCall) -> ToolContext:
        return replace(run.scope, run_id=run.run_id, step=run.stopper.steps, task=run.progress.task,
                       thought=step.thought or "")

    async def one(call: PreparedCall) -> ToolResult | Parked:
        earlier = run.done.pop(call.call_id, None)  # a parked step's call that ran before it was parked
        if earlier is not None:
            if (tool := run.executor.registry.get(call.tool)) is not None:
                run.executor.guard.observe(tool, earlier)
            return earlier
        try:
            return await run.executor.execute(call, ctx(call))
        except Parked as exc:
            return exc

    outcomes = await asyncio.gather(*(one(c) for c in step.calls))
    parked = [o for o in outcomes if isinstance(o, Parked)]
    if parked:  # the run is saved here (``agent_core.parking``): the other calls' results are kept for the resume
        run.done = {c.call_id: o for c, o in zip(step.calls, outcomes, strict=True) if isinstance(o, ToolResult)}
        raise parked[0]
    results = [o for o in outcomes if isinstance(o, ToolResult)]
    for call, result in zip(step.calls, results, strict=True):
        wrapped = wrap_untrusted(call.tool, result.text)
        if protocol == "react":
            run.remember(text_react.observation_message(wrapped))
        else:
            run.remember({"role": "tool", "tool_call_id": call.call_id, "content": wrapped})
        if result.ok and not result.empty:
            run.progress = progress.add_finding(run.progress, call.tool, call.arguments, result.text)
    return results


def observed(number: int, step: Step, results: list[ToolResult]) -> tuple[Observed, ...]:
    """The step's tool results as the model saw them, in call order (none when the calls were not run)."""
    return tuple(
        Observed(number, call.call_id, call.tool, result.outcome.value, result.text, len(result.full),
                 result.duration_ms)
        for call, result in zip(step.calls, results, strict=False)
    )


def shown(run: Run, answer: str, *, remembered: bool = False) -> str:
    """The answer as every display and the history get it: armed, links the run may not reach are text.
    ``remembered``: the model's reply holding it is the last message remembered, and is rewritten too."""
    ctx = replace(run.scope, run_id=run.run_id, step=run.stopper.steps, task=run.progress.task)
    text = run.executor.guard.answer(answer, ctx)
    last = run.current[-1] if remembered and run.current else None
    if text != answer and last is not None and isinstance(last.get("content"), str):
        last["content"] = run.executor.guard.answer(last["content"], ctx)
    return text
