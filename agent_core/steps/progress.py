"""The progress note: task, step k of N, tools used, what was learned, what the stopper is close to.

It is rebuilt before every LLM call and sent with it, and it is what a hard stop's answer is made of.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from agent_core.cost import format_usd
from agent_core.events import StopReason
from agent_core.stopper import Stopper
from agent_core.store import Progress

#: Findings kept in the note (the newest), and how much of each observation they quote.
MAX_FINDINGS = 8
FINDING_CHARS = 240
#: Longest final answer presented; Slack shows it in a few messages. The rest is cut with a marker.
MAX_ANSWER_CHARS = 40_000
#: A task longer than this is pinned in the note by its start and end only, while the run's own user message,
#: sent with every call, carries it whole: a second full copy would double a long message's tokens.
PINNED_TASK_CHARS = 1_000
_PINNED_HEAD, _PINNED_TAIL = 600, 300

_HUMAN = {
    StopReason.MAX_STEPS: "I reached the step limit",
    StopReason.MAX_TOKENS: "I reached the token limit",
    StopReason.MAX_COST: "I reached this run's cost limit",
    StopReason.NO_PROGRESS: "my last steps brought nothing new",
    StopReason.DANGEROUS_LOOP: "I was repeating the same action",
    StopReason.BUDGET_EXHAUSTED: "the workspace's budget is used up",
    StopReason.BUDGET_BUSY: "the workspace's budget is busy: other runs in progress hold the rest of it for now",
    StopReason.CANCELLED: "the run was stopped",
    StopReason.ERROR: "an error stopped the run",
    StopReason.MAX_TIME: "I ran out of time",
    StopReason.REFUSED: "the model declined to answer",
    StopReason.CUT_OFF: "the answer was cut off at its length limit",
}


#: Made once: ``json.dumps`` with options builds an encoder per call.
_ARGS_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def add_finding(progress: Progress, tool: str, arguments: dict[str, Any], text: str) -> Progress:
    """Remember what a successful call taught us (a short quote), newest last."""
    args = _ARGS_JSON.encode(arguments)
    if len(args) > 80:
        args = args[:77] + "..."
    quote = " ".join(text.split())
    if len(quote) > FINDING_CHARS:
        quote = quote[: FINDING_CHARS - 1] + "…"
    findings = (*progress.findings, f"{tool}({args}) → {quote}")[-MAX_FINDINGS:]
    tools_used = progress.tools_used if tool in progress.tools_used else (*progress.tools_used, tool)
    return replace(progress, findings=findings, tools_used=tools_used)


def note(progress: Progress, stopper: Stopper, *, task_sent: bool = True) -> str:
    """The text sent with every request, after the history. ``task_sent``: the request carries the run's task
    message whole (else the note pins the whole task: a resumed run whose task message was not found)."""
    lim, usage = stopper.limits, stopper.usage
    lines = [
        "## Original task (pinned)",
        pinned_task(progress.task) if task_sent else progress.task,
        "",
        "## Progress",
        f"- Step {stopper.steps + 1} of at most {lim.max_steps}.",
        f"- Tokens used: {usage.total_tokens:,} of {lim.max_tokens:,}; cost: {format_usd(usage.cost_micros)} "
        f"of {format_usd(lim.max_cost_micros)}; time: {stopper.elapsed():.0f}s of {lim.max_seconds:g}s.",
        f"- Tools used so far: {', '.join(progress.tools_used) or 'none'}.",
    ]
    if progress.findings:
        lines.append("- Learned so far:")
        lines.extend(f"  - {f}" for f in progress.findings)
    for warning in stopper.warnings():
        lines.append(f"- Warning: {warning}.")
    return "\n".join(lines)


def pinned_task(task: str) -> str:
    """The task as the note pins it: whole when short, else its start and end around a marker."""
    if len(task) <= PINNED_TASK_CHARS:
        return task
    left_out = len(task) - _PINNED_HEAD - _PINNED_TAIL
    return (f"{task[:_PINNED_HEAD]}\n[… {left_out:,} characters not repeated here: the whole task is the user "
            f"message above …]\n{task[-_PINNED_TAIL:]}")


def graceful_answer(reason: StopReason, detail: str, progress: Progress) -> str:
    """The answer of a run that a limit ended: what was found and what is missing, without an LLM call."""
    lines = [f"I could not finish: {_HUMAN.get(reason, str(reason))} ({detail})."]
    if progress.findings:
        lines.append("What I found so far:")
        lines.extend(f"• {f}" for f in progress.findings)
    else:
        lines.append("I had not found anything useful yet.")
    lines.append(f"Still missing: a complete answer to “{_short(progress.task)}”.")
    if reason is StopReason.BUDGET_EXHAUSTED:
        lines.append("Once an admin raises the budget, reply in this thread and I will continue where I stopped.")
    elif reason is StopReason.BUDGET_BUSY:
        lines.append("The budget is not used up: reply in this thread in a minute, once those runs have finished, "
                     "and I will continue where I stopped.")
    elif reason not in (StopReason.ERROR, StopReason.CANCELLED):
        lines.append("Reply in this thread to let me continue from here.")
    return "\n".join(lines)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cap_answer(answer: str) -> str:
    """``answer`` cut to :data:`MAX_ANSWER_CHARS`, with a marker saying how much was left out."""
    if len(answer) <= MAX_ANSWER_CHARS:
        return answer
    return f"{answer[:MAX_ANSWER_CHARS]}\n[answer cut: {len(answer) - MAX_ANSWER_CHARS} characters left out]"
