"""Reading the model's reply into a step: a final answer, tool calls to run, or a format error to report back.

Either protocol: native tool calls (``tools``) or the text Thought/Action/Final Answer protocol (``react``).
Secrets the model repeats are redacted first, so they are neither shown, stored nor sent to a tool.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from agent_core import text_react
from agent_core.completion import LLMResponse
from agent_core.steps.run_state import Run, Step
from tools import Redactor


def read(run: Run, reply: LLMResponse, *, protocol: Literal["tools", "react"], redactor: Redactor) -> Step:
    """The step the reply proposes; the reply (and any correction for the model) is remembered in ``run``."""
    reply = _redact(reply, redactor)
    if protocol == "react":
        return _read_react(run, reply)
    thought = (reply.content or "").strip() or None
    run.remember(reply.assistant_message())
    # Reasoning the reply came with is shown as the step's thought (where the display shows thoughts), and
    # never stored or sent back: the history keeps the answer only.
    if not reply.tool_calls:
        if thought is None:
            run.remember({"role": "user", "content": "Your reply was empty. Call a tool or answer."})
            return Step(reply.reasoning, format_error="empty reply")
        return Step(reply.reasoning or thought, final=thought)
    calls = [run.executor.prepare(c.name, c.arguments, call_id=c.id) for c in reply.tool_calls]
    return Step(thought or reply.reasoning, calls=calls)


def _redact(reply: LLMResponse, redactor: Redactor) -> LLMResponse:
    # Almost every reply holds no secret: it is kept as it is then (a dataclasses.replace costs ~4 µs a copy).
    redact = redactor.redact
    content = redact(reply.content) if reply.content else reply.content
    reasoning = redact(reply.reasoning) if reply.reasoning else reply.reasoning
    calls = tuple(c if (a := redact(c.arguments)) == c.arguments else replace(c, arguments=a) for c in reply.tool_calls)
    if content == reply.content and reasoning == reply.reasoning and all(
            new is old for new, old in zip(calls, reply.tool_calls, strict=True)):
        return reply
    return replace(reply, content=content, reasoning=reasoning, tool_calls=calls)


def _read_react(run: Run, reply: LLMResponse) -> Step:
    parsed = text_react.parse(reply.content or "")
    run.remember({"role": "assistant", "content": reply.content or ""})
    thought = parsed.thought or reply.reasoning
    if isinstance(parsed, text_react.ReactFinal):
        return Step(thought, final=parsed.answer)
    if isinstance(parsed, text_react.ReactFormatError):
        run.remember(text_react.format_error_message(parsed))
        return Step(thought, format_error=f"format error: {parsed.message}")
    call = run.executor.prepare(parsed.tool, parsed.arguments, call_id=f"react-{run.stopper.steps}")
    return Step(thought, calls=[call])
