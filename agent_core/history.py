"""Rules of the message list: repair dangling tool calls, and trim to a token budget without breaking pairs."""

from __future__ import annotations

from collections.abc import Sequence

from agent_core.store import Message
from agent_core.tokens import TOKENS_REPLY_PRIMING, TokenCounter, count_message

#: Tokens of earlier conversation sent with each request when AGENT_HISTORY_TOKENS is not set.
DEFAULT_HISTORY_TOKENS = 12_000
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


def _elide(message: Message) -> Message:
    content = message.get("content") or ""
    return {**message, "content": f"[observation removed to fit the context: {len(content)} characters]"}


def _elidable(message: Message) -> bool:
    return message.get("role") == "tool" and not str(message.get("content", "")).startswith("[observation removed")


class Window:
    """Messages with each one's tokens counted once, fitted to any token budget by :meth:`fit`.

    A run's earlier history is the same at every step; only the budget left for it shrinks as the run's own
    messages grow. Counting and eliding it once per run, not once per request, keeps a step's cost flat however
    long the conversation (a full 500-message window was recounted at every step before).
    """

    def __init__(self, messages: Sequence[Message], counter: TokenCounter) -> None:
        self.messages = list(messages)
        self._counter = counter
        self._counts = [count_message(counter, m) for m in self.messages]
        self._total = TOKENS_REPLY_PRIMING + sum(self._counts)
        self._elided: dict[int, tuple[Message, int]] = {}  # made on first need, then the same object every step

    def fit(self, budget_tokens: int) -> tuple[list[Message], int]:
        """The messages fitted into ``budget_tokens``, and their tokens (per-message overhead, no reply priming).

        First the oldest tool observations are replaced by a short marker (the call and its answer stay
        paired); then, if still too long, the oldest whole turns are dropped. The caller keeps the task and
        the current step outside the window: they are never trimmed.
        """
        total = self._total
        work = list(self.messages)
        if total <= budget_tokens:
            return work, total - TOKENS_REPLY_PRIMING
        counts = list(self._counts)
        for i, message in enumerate(self.messages):
            if total <= budget_tokens:
                return work, total - TOKENS_REPLY_PRIMING
            if _elidable(message):
                work[i], elided = self._elide(i)
                total -= counts[i] - elided
                counts[i] = elided
        # Whole turns: an assistant message with its tool answers is one unit, never split.
        starts = [i for i, m in enumerate(work) if i == 0 or m.get("role") != "tool"]
        first = 0
        while first < len(starts) and total > budget_tokens:
            end = starts[first + 1] if first + 1 < len(starts) else len(work)
            total -= sum(counts[starts[first]:end])
            first += 1
        start = starts[first] if first < len(starts) else len(work)
        # A history must not open with tool answers or an assistant tool call cut from its user turn.
        if start < len(work) and work[start].get("role") == "tool":
            start = starts[first + 1] if first + 1 < len(starts) else len(work)
        return work[start:], sum(counts[start:])

    def _elide(self, i: int) -> tuple[Message, int]:
        if i not in self._elided:
            message = _elide(self.messages[i])
            self._elided[i] = message, count_message(self._counter, message)
        return self._elided[i]


class Trail:
    """A run's own messages (its list, which only grows), each counted once, fitted as :meth:`Window.fit` would.

    The budget is the same at every step and the list only grows, so what was elided or dropped for one request
    is elided or dropped for the next: each fit goes on from where the last one stopped, and a step costs the
    same at step 200 as at step 2 (recounting and refitting the whole run each step made it grow with the run).
    """

    def __init__(self, messages: list[Message], counter: TokenCounter) -> None:
        self.messages = messages  # the run's list itself: read here, appended to by the run
        self._counter = counter
        self._counts: list[int] = []  # per message, as fitted (an elided observation's is its marker's)
        self._work: list[Message] = []  # ``messages`` as fitted: elided observations replaced by their marker
        self._budget: int | None = None
        self._whole = TOKENS_REPLY_PRIMING  # of ``messages`` as they are
        self._total = TOKENS_REPLY_PRIMING  # of ``_work[_start:]``
        self._elided_to = 0  # messages before this index were considered for elision
        self._start = 0  # whole turns before this index are dropped

    @property
    def tokens(self) -> int:
        """The whole list's tokens with the reply priming (``count_messages`` of it): nothing elided or dropped."""
        self._take_new()
        return self._whole

    def fit(self, budget_tokens: int) -> tuple[list[Message], int]:
        """The messages fitted into ``budget_tokens``, and their tokens with the reply priming."""
        # What a budget elided and dropped, a smaller one elides and drops too (and goes on from there);
        # only a larger one (never in a run) starts again.
        if self._budget is not None and budget_tokens > self._budget and (self._elided_to or self._start):
            self._restart()
        self._budget = budget_tokens
        self._take_new()
        work = self._work
        if self._total > budget_tokens:
            self._elide_more(budget_tokens)
            if self._total > budget_tokens and self._elided_to == len(work):
                self._drop_turns(budget_tokens)
        start = self._start
        if start < len(work) and work[start].get("role") == "tool":  # never open with tool answers
            start = self._next_start(start)
            return work[start:], TOKENS_REPLY_PRIMING + sum(self._counts[start:])
        return work[start:], self._total

    def _take_new(self) -> None:
        for message in self.messages[len(self._work) :]:
            count = count_message(self._counter, message)
            self._work.append(message)
            self._counts.append(count)
            self._total += count
            self._whole += count

    def _restart(self) -> None:
        self._work = self.messages[: len(self._work)]
        self._counts = [count_message(self._counter, m) for m in self._work]
        self._total = self._whole = TOKENS_REPLY_PRIMING + sum(self._counts)
        self._elided_to = self._start = 0

    def _elide_more(self, budget_tokens: int) -> None:
        work, counts = self._work, self._counts
        i = self._elided_to
        while i < len(work) and self._total > budget_tokens:
            if _elidable(work[i]):
                work[i] = _elide(work[i])
                elided = count_message(self._counter, work[i])
                self._total -= counts[i] - elided
                counts[i] = elided
            i += 1
        self._elided_to = i

    def _drop_turns(self, budget_tokens: int) -> None:
        # Whole turns: an assistant message with its tool answers is one unit, never split.
        while self._start < len(self._work) and self._total > budget_tokens:
            end = self._next_start(self._start)
            self._total -= sum(self._counts[self._start : end])
            self._start = end

    def _next_start(self, i: int) -> int:
        """Where the turn after the one at ``i`` starts (the list's end after the last)."""
        i += 1
        while i < len(self._work) and self._work[i].get("role") == "tool":
            i += 1
        return i


def trim(messages: Sequence[Message], budget_tokens: int, counter: TokenCounter) -> list[Message]:
    """Fit ``messages`` into ``budget_tokens`` (see :meth:`Window.fit`)."""
    return Window(messages, counter).fit(budget_tokens)[0]
