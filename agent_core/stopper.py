"""The stopper: hard caps (steps, tokens, cost, budget, time), dangerous loops and lack of progress.

Every check returns a :class:`Stop` value or None; nothing here raises to end a run.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent_core.cost import Price, format_usd
from agent_core.events import StopFacts, StopReason, Usage
from agent_core.limits import Limits
from tools import ToolResult

#: Word 3-gram Jaccard similarity above which two observations count as the same.
NEAR_IDENTICAL = 0.9
#: How many earlier observations novelty is judged against.
SEEN_WINDOW = 64
#: Cycles of this many distinct calls repeated twice are a loop (A-B-A-B, A-B-C-A-B-C).
CYCLE_LENGTHS = (2, 3)


@dataclass(frozen=True, slots=True)
class Stop:
    """A decision to end the run; ``detail`` names the limit and the value observed."""

    reason: StopReason
    detail: str
    #: The state store failed (see ``Stopped.store_failed``).
    store_failed: bool = False
    #: The run's answer when the usual one (what was found, what is missing) would mislead: set by
    #: ``Stopper.too_long`` for a task no call of the run could carry.
    answer: str = ""
    #: What stopped it, as values (see ``Stopped.facts``).
    facts: StopFacts = StopFacts()
    #: Not an end: the run waits for an approval, saved at the held call (see ``Stopped.parked``).
    parked: bool = False


@dataclass(frozen=True, slots=True)
class CallPlan:
    """What the next LLM call may spend: its completion cap and its worst-case cost."""

    max_tokens: int
    worst_case_micros: int
    prompt_tokens: int = 0


_WORD = re.compile(r"\w+")


def _shingles(text: str) -> frozenset[str]:
    words = _WORD.findall(text.lower())[:4000]
    if len(words) < 3:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + 3]) for i in range(len(words) - 2))


class _Seen:
    """The last :data:`SEEN_WINDOW` observations' shingle sets, each indexed by its prefix: its shingles of the
    smallest hashes, as many as a set :data:`NEAR_IDENTICAL` alike must share at least one of (prefix filtering).
    Only sets sharing a prefix shingle are compared, so a step does not cost more with a full window."""

    def __init__(self) -> None:
        self._sets: dict[int, tuple[frozenset[str], list[str]]] = {}  # by arrival number: oldest first
        self._index: dict[str, set[int]] = {}
        self._count = 0

    def near(self, shingles: frozenset[str]) -> bool:
        """Whether an earlier set is at least NEAR_IDENTICAL alike (Jaccard); if none, ``shingles`` is kept."""
        prefix = _prefix(shingles)
        for number in set().union(*(self._index.get(s, ()) for s in prefix)):
            seen = self._sets[number][0]
            common = len(shingles & seen)  # the union's size follows from it, without building the union
            if common / (len(shingles) + len(seen) - common) >= NEAR_IDENTICAL:
                return True
        self._sets[self._count] = shingles, prefix
        for s in prefix:
            self._index.setdefault(s, set()).add(self._count)
        self._count += 1
        if len(self._sets) > SEEN_WINDOW:
            oldest = next(iter(self._sets))
            for s in self._sets.pop(oldest)[1]:
                self._index[s].discard(oldest)
                if not self._index[s]:
                    del self._index[s]
        return False


def _prefix(shingles: frozenset[str]) -> list[str]:
    """The shingles a set at least NEAR_IDENTICAL alike must share one of: with ``n`` of them, any two such sets
    share at least ceil(0.9 n), so the first n - ceil(0.9 n) + 1 in one fixed order (by hash) meet. Every shingle
    whose hash ties the last one is taken too, and the count errs long: never a match missed."""
    size = len(shingles)
    keep = min(size, size - math.floor(NEAR_IDENTICAL * size) + 1)
    if keep >= size:
        return list(shingles)
    cut = heapq.nsmallest(keep, map(hash, shingles))[-1]
    return [s for s in shingles if hash(s) <= cut]


class Stopper:
    """Keeps the run's accounts and decides when it must end."""

    def __init__(
        self, limits: Limits, price: Price, *, clock: Callable[[], float] = time.monotonic, started: float | None = None
    ) -> None:
        self.limits = limits
        self.price = price
        self._clock = clock
        self._started = clock() if started is None else started
        self.steps = 0
        self.usage = Usage()
        self._calls: list[str] = []
        self._seen = _Seen()
        self._idle_steps: list[str] = []

    # -- time ---------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self._clock() - self._started

    def seconds_left(self) -> float:
        return self.limits.max_seconds - self.elapsed()

    def time_stop(self) -> Stop:
        elapsed = self.elapsed()
        return Stop(StopReason.MAX_TIME, f"max_time: {self.limits.max_seconds:g}s cap, {elapsed:.1f}s elapsed",
                    facts=StopFacts(limit=self.limits.max_seconds, used=elapsed))

    # -- layer 2: hard caps, before every LLM call ----------------------------------------------------
    def plan_call(self, prompt_tokens: int, budget_left: int | None, budget_name: str = "workspace", *,
                  completion_cap: int | None = None) -> CallPlan | Stop:
        """Cap the next call's completion by every limit; a Stop when even a useful minimum does not fit.

        ``budget_name`` names the budget ``budget_left`` is about (a workspace's, its org's, one person's).
        ``completion_cap`` replaces ``max_completion_tokens`` (the one retry of a cut-off answer asks for more)."""
        lim = self.limits
        cap = lim.max_completion_tokens if completion_cap is None else completion_cap
        if self.seconds_left() <= 0:
            return self.time_stop()
        if self.steps >= lim.max_steps:
            return Stop(StopReason.MAX_STEPS, f"max_steps: {lim.max_steps} steps cap reached",
                        facts=StopFacts(limit=lim.max_steps, used=self.steps))
        tokens_left = lim.max_tokens - self.usage.total_tokens - prompt_tokens
        if tokens_left < lim.min_completion_tokens:
            return Stop(
                StopReason.MAX_TOKENS,
                f"max_tokens: {lim.max_tokens:,} cap, {self.usage.total_tokens:,} used, "
                f"next call needs {prompt_tokens:,} prompt tokens + {lim.min_completion_tokens} to answer",
                facts=StopFacts(limit=lim.max_tokens, used=self.usage.total_tokens,
                                needed=prompt_tokens + lim.min_completion_tokens),
            )
        cost_left = lim.max_cost_micros - self.usage.cost_micros
        if self.price.affordable_completion_tokens(prompt_tokens, cost_left) < lim.min_completion_tokens:
            worst = self.price.worst_case_micros(prompt_tokens, min(cap, tokens_left))
            return Stop(
                StopReason.MAX_COST,
                f"max_cost: {format_usd(lim.max_cost_micros)} cap, {format_usd(self.usage.cost_micros)} spent, "
                f"next call could cost {format_usd(worst)}",
                facts=StopFacts(limit=lim.max_cost_micros, used=self.usage.cost_micros, needed=worst),
            )
        max_tokens = min(cap, tokens_left, self.price.affordable_completion_tokens(
            prompt_tokens, cost_left
        ))
        if budget_left is not None:
            affordable = self.price.affordable_completion_tokens(prompt_tokens, budget_left)
            if affordable < lim.min_completion_tokens:
                worst = self.price.worst_case_micros(prompt_tokens, lim.min_completion_tokens)
                return Stop(
                    StopReason.BUDGET_EXHAUSTED,
                    f"budget_exhausted: the {budget_name} budget has {format_usd(budget_left)} left, "
                    f"the next call could cost {format_usd(worst)}",
                    facts=StopFacts(budget=budget_name, left=budget_left, needed=worst),
                )
            max_tokens = min(max_tokens, affordable)
        return CallPlan(max_tokens, self.price.worst_case_micros(prompt_tokens, max_tokens), prompt_tokens)

    def too_long(self, floor_tokens: int, task: str, task_tokens: int) -> Stop | None:
        """A Stop when no call of this run can fit its token cap, whatever it drops: the parts never trimmed
        (``floor_tokens``: system prompt, task, progress note, tool schemas) and a useful answer exceed it.

        Its answer says by how much, in tokens and roughly in characters (at the task's own characters per
        token), and what to do; or, when even an empty task would not fit, that the cap itself is too small."""
        lim = self.limits
        need = floor_tokens + lim.min_completion_tokens
        over = need - lim.max_tokens
        if over <= 0:
            return None
        if over >= task_tokens:  # the instructions and tools alone do not fit: no shorter message would
            return Stop(
                StopReason.MAX_TOKENS,
                f"max_tokens: {lim.max_tokens:,} cap is below the {need - task_tokens:,} tokens every call needs "
                "before the message (instructions, tools, an answer)",
                answer=(f"This run's token limit ({lim.max_tokens:,} tokens) is too small for any call: my "
                        f"instructions and tools alone need about {need - task_tokens:,}. Ask an admin to raise it. "
                        "No LLM call was made."),
                facts=StopFacts(case="cap_too_small", limit=lim.max_tokens, needed=need - task_tokens),
            )
        chars = min(len(task), -(-over * len(task) // max(task_tokens, 1)))
        return Stop(
            StopReason.MAX_TOKENS,
            f"max_tokens: {lim.max_tokens:,} cap; the message is {task_tokens:,} tokens ({len(task):,} characters) "
            f"and a first call needs {need:,}: {over:,} tokens over",
            answer=(f"Your message is too long for this run's token limit: it is about {task_tokens:,} tokens "
                    f"({len(task):,} characters), and with my instructions and tools a first call needs {need:,} "
                    f"tokens of the {lim.max_tokens:,} a run may use. Shorten it by about {over:,} tokens (roughly "
                    f"{chars:,} characters) and send it again, or ask an admin to raise the run's token limit. "
                    "No LLM call was made."),
            facts=StopFacts(case="message_too_long", limit=lim.max_tokens, used=task_tokens, needed=need,
                            count=len(task), shorten_chars=chars),
        )

    def record_call(self, usage: Usage) -> None:
        self.steps += 1
        self.usage = self.usage + usage

    # -- layer 3: dangerous loops, before a call is executed ------------------------------------------
    def check_call(self, tool: str, canonical: str) -> Stop | None:
        """Judge a proposed call; an accepted one is remembered. A refused one must not be executed."""
        calls = self._calls
        if len(calls) >= 2 and calls[-1] == calls[-2] == canonical:
            return Stop(
                StopReason.DANGEROUS_LOOP,
                f"dangerous_loop: {tool} proposed with the same arguments 3 times in a row; the 3rd was not run",
                facts=StopFacts(case="repeated_call", tool=tool, count=3),
            )
        for n in CYCLE_LENGTHS:
            window = [*calls[-(2 * n - 1) :], canonical]
            if len(window) == 2 * n and window[:n] == window[n:] and len(set(window[:n])) > 1:
                return Stop(
                    StopReason.DANGEROUS_LOOP,
                    f"dangerous_loop: the same {n} calls repeated in a cycle; {tool} was not run again",
                    facts=StopFacts(case="cycle", tool=tool, count=n),
                )
        calls.append(canonical)
        return None

    # -- layer 4: no progress, after each step --------------------------------------------------------
    def record_step(self, results: Sequence[ToolResult], *, failure: str | None = None) -> Stop | None:
        """A step is idle when all its results failed, were empty or repeated what was seen already."""
        reasons = [failure] if failure else []
        productive = False
        for result in results:
            if not result.ok:
                reasons.append(result.outcome.value)
            elif result.empty:
                reasons.append("empty result")
            elif self._is_repeat(result.full):
                reasons.append("repeated result")
            else:
                productive = True
        if productive:
            self._idle_steps.clear()
            return None
        self._idle_steps.append(", ".join(reasons) or "nothing new")
        if len(self._idle_steps) >= self.limits.no_progress_steps:
            return Stop(
                StopReason.NO_PROGRESS,
                f"no_progress: {len(self._idle_steps)} steps in a row brought nothing new "
                f"({'; '.join(self._idle_steps)})",
                facts=StopFacts(count=len(self._idle_steps)),
            )
        return None

    def _is_repeat(self, text: str) -> bool:
        return self._seen.near(_shingles(text))

    def warnings(self) -> list[str]:
        """What the stopper is close to, for the progress note."""
        lim = self.limits
        out: list[str] = []
        steps_left = lim.max_steps - self.steps
        if steps_left <= 2:
            out.append(f"only {steps_left} step(s) left: answer now if you can")
        if self.usage.total_tokens >= 0.8 * lim.max_tokens:
            out.append("over 80% of the token cap used")
        if self.usage.cost_micros >= 0.8 * lim.max_cost_micros:
            out.append("over 80% of the cost cap used")
        if self._idle_steps:
            out.append(f"{len(self._idle_steps)} step(s) in a row brought nothing new: try something different")
        if self.seconds_left() < 0.2 * lim.max_seconds:
            out.append("little time left")
        return out
