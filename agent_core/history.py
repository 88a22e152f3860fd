"""Rules of the message list: repair dangling tool calls, and trim to a token budget without breaking pairs."""

from __future__ import annotations

from collections.abc import Sequence

from agent_core.store import Message
from agent_core.tokens import TokenCounter, count_messages

NOT_EXECUTED = "[not executed: {reason}]"


def not_executed(call_id: str, reason: str) -> Message:
    """The tool message that answers a call the run did not execute (providers reject unanswered calls)."""
    return {"role": "tool", "tool_call_id": call_id, "content": NOT_EXECUTED.format(reason=reason)}


def unanswered(messages: Sequence[Message]) -> list[str]:
    """Ids of the last assistant message's tool calls that have no tool message yet."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") == "assistant":
            answered = {m.get("tool_call_id") for m in messages[i + 1 :] if m.get("role") == "tool"}
            return [c["id"] for c in message.get("tool_calls") or () if c.get("id") not in answered]
    return []


def repair(messages: Sequence[Message], reason: str = "the run ended before this call ran") -> list[Message]:
    """Give every assistant tool call exactly one tool message, right after its assistant message.

    Missing answers get a "[not executed: …]" message; tool messages that answer no call (or answer one
    twice) are dropped. A history loaded from storage goes through this before it is sent.
    """
    out: list[Message] = []
    pending: list[str] = []  # calls of the last assistant message still waiting for their answer
    answered: set[str] = set()

    def close_pending() -> None:
        for call_id in pending:
            out.append(not_executed(call_id, reason))
        pending.clear()

    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in pending:
                pending.remove(call_id)
                answered.add(call_id)
                out.append(message)
            continue  # an orphan or a duplicate answer: the provider would reject it
        close_pending()
        out.append(message)
        if role == "assistant":
            pending = [c["id"] for c in message.get("tool_calls") or () if c.get("id") not in answered]
    close_pending()
    return out


def _units(messages: Sequence[Message]) -> list[list[Message]]:
    """Group an assistant message with its tool answers, so trimming never separates them."""
    units: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "tool" and units:
            units[-1].append(message)
        else:
            units.append([message])
    return units


def _elide(message: Message) -> Message:
    content = message.get("content") or ""
    return {**message, "content": f"[observation removed to fit the context: {len(content)} characters]"}


def trim(messages: Sequence[Message], budget_tokens: int, counter: TokenCounter) -> list[Message]:
    """Fit ``messages`` into ``budget_tokens``.

    First the oldest tool observations are replaced by a short marker (the call and its answer stay
    paired); then, if still too long, the oldest whole turns are dropped. The caller keeps the task and
    the current step outside ``messages``: they are never trimmed.
    """
    work = list(messages)
    if count_messages(counter, work) <= budget_tokens:
        return work
    total = count_messages(counter, work)
    for i, message in enumerate(work):
        if total <= budget_tokens:
            return work
        if message.get("role") == "tool" and not str(message.get("content", "")).startswith("[observation removed"):
            before = count_messages(counter, [message])
            work[i] = _elide(message)
            total -= before - count_messages(counter, [work[i]])
    units = _units(work)
    while units and total > budget_tokens:
        total -= count_messages(counter, units.pop(0)) - 3
    # A history must not open with tool answers or an assistant tool call cut from its user turn.
    while units and units[0][0].get("role") == "tool":
        units.pop(0)
    return [m for unit in units for m in unit]
