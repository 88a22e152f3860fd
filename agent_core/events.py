"""The run's typed event stream. Every consumer (terminal, Slack, trace) reads these and only these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from agent_core.limits import Limits


class StopReason(StrEnum):
    """Why a run ended. The values are part of the product's interface: Slack replies carry them verbatim."""

    FINAL_ANSWER = "final_answer"
    MAX_STEPS = "max_steps"
    MAX_TOKENS = "max_tokens"
    MAX_COST = "max_cost"
    NO_PROGRESS = "no_progress"
    DANGEROUS_LOOP = "dangerous_loop"
    BUDGET_EXHAUSTED = "budget_exhausted"
    #: Not used up: other runs' calls in flight hold the rest, and the wait for them (AGENT_BUDGET_WAIT_SECONDS)
    #: ran out. Asking again shortly works; raising the budget is not needed.
    BUDGET_BUSY = "budget_busy"
    CANCELLED = "cancelled"
    ERROR = "error"
    MAX_TIME = "max_time"
    #: The model declined (``message.refusal``, shown verbatim as the answer) or the provider's content filter
    #: stopped its reply (``finish_reason: content_filter``). Asking again the same way gets the same.
    REFUSED = "refused"
    #: The answer reached its completion cap (``finish_reason: length``) and no larger call was possible: the
    #: answer is the text so far, marked as cut off. Also when the cap went on reasoning with no answer.
    CUT_OFF = "cut_off"


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and money spent so far (money in integer micro-dollars).

    ``estimated`` is True when some call's usage was not reported by the endpoint and was counted offline
    (agent_core/tokens.py) instead; show it wherever the cost is shown.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_micros: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost_micros + other.cost_micros,
            self.estimated or other.estimated,
        )


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    task: str
    limits: Limits
    tools: tuple[str, ...]
    #: Step number the run resumes from (0 for a fresh run).
    step: int = 0


@dataclass(frozen=True, slots=True)
class Thought:
    """The model's reasoning text for a step; ``text`` is None when the model gave none."""

    step: int
    text: str | None


@dataclass(frozen=True, slots=True)
class ToolCalled:
    step: int
    call_id: str
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Observed:
    """A tool's result as the model saw it (shaped), with its outcome."""

    step: int
    call_id: str
    tool: str
    outcome: str
    text: str
    full_chars: int
    duration_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class StepFinished:
    """Step ``step`` is persisted: its thought, its tool calls and their observations, in call order.

    Sent (when the run asks for it, ``RunRequest.finished_steps``) after the step's ``ThreadStore.append``
    succeeded, so a renderer of whole steps never shows a step a resumed run would redo. A step the run stopped
    in the middle of (cancelled, out of time) is persisted with the end and sent before ``Stopped``, with the
    observations it got. The final answer's step is not one: ``FinalAnswer`` and ``Stopped`` carry it.
    """

    step: int
    thought: str | None
    calls: tuple[ToolCalled, ...] = ()
    observations: tuple[Observed, ...] = ()


@dataclass(frozen=True, slots=True)
class ThoughtDelta:
    """A piece of step ``step``'s reasoning as the model writes it (redacted); provisional, see StreamReset."""

    step: int
    text: str


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """A piece of the answer as the model writes it (redacted); provisional until FinalAnswer or Stopped.

    The deltas of a step, joined, are the start of that step's FinalAnswer; FinalAnswer.text is what counts
    (it may be cut to length). Deltas that turn out not to be the answer are withdrawn by a StreamReset.
    """

    step: int
    text: str


#: Why streamed text was withdrawn (public: renderers may word it).
StreamResetReason = Literal["retry", "failed", "not_final"]


@dataclass(frozen=True, slots=True)
class StreamReset:
    """Forget every ThoughtDelta and AnswerDelta of ``step`` received so far.

    ``reason``: ``retry`` (the stream was cut and the call is made again: new deltas follow), ``failed`` (the
    call ended without a reply: an error, a cancel or the time cap; Stopped follows) or ``not_final`` (the
    reply was a tool call or a malformed answer, not the final answer). Sent only after deltas of the step.
    """

    step: int
    reason: StreamResetReason


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    step: int
    text: str


#: Which way a stop reason came about, where it has more than one (public: callers word each).
#: ``max_tokens``: ``message_too_long`` / ``cap_too_small`` (before any call); ``refused``: ``declined`` /
#: ``declined_silently`` (no reason given) / ``content_filter``; ``cut_off``: ``no_answer`` / ``cut_again`` /
#: ``no_larger_call``; ``dangerous_loop``: ``repeated_call`` / ``cycle``; ``error``: ``llm`` / ``store`` /
#: ``load``; ``cancelled``: ``lease_lost``.
StopCase = Literal[
    "", "message_too_long", "cap_too_small", "declined", "declined_silently", "content_filter", "no_answer",
    "cut_again", "no_larger_call", "repeated_call", "cycle", "llm", "store", "load", "lease_lost",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class StopFacts:
    """What stopped a run, as values a caller words in its reader's language (``Stopped.detail`` is the
    engine's own English line, for logs). Fields a reason does not use stay at their zero value."""

    case: StopCase = ""
    """Which way the reason came about, where it has more than one."""

    limit: float = 0
    """The cap reached: steps, tokens, micro-dollars, seconds; a call's completion cap (``cut_off``); the
    budget's limit in micro-dollars (``budget_busy``, -1: none)."""

    used: float = 0
    """What the run had used against it: steps, tokens, micro-dollars, seconds elapsed; the message's tokens
    (``message_too_long``); the budget's micro-dollars spent (``budget_busy``)."""

    needed: float = 0
    """What the next call needed: tokens (``max_tokens``), its worst-case micro-dollars (``max_cost``,
    ``budget_exhausted``)."""

    left: int = 0
    """Micro-dollars the budget had left (``budget_exhausted``), or held by runs in flight (``budget_busy``)."""

    count: int = 0
    """How many: calls repeated (``dangerous_loop``), idle steps (``no_progress``), runs in flight
    (``budget_busy``), the message's characters (``message_too_long``); 1 when the cap went on reasoning
    (``no_answer``)."""

    shorten_chars: int = 0
    """Roughly how many characters a message too long for the run's token cap must lose."""

    seconds: float = 0
    """How long the run waited for other runs' budget holds (``budget_busy``)."""

    budget: str = ""
    """The budget's name: ``workspace``, ``org``, ``user`` (``budget_exhausted``, ``budget_busy``)."""

    tool: str = ""
    """The tool a dangerous loop repeated."""

    cancelled_by: str = ""
    """Who or what cancelled the run: the cancel token's reason, as its canceller set it."""

    cause: str = ""
    """Why an LLM call failed (``agent_core.errors.LLMCause``), when ``case`` is ``llm``."""

    message: str = ""
    """The error's own message (``error``): the provider's wording where there is one, shown as it is."""

    text: str = ""
    """The model's answer so far, as shown (``cut_again``, ``no_larger_call``)."""

    findings: tuple[str, ...] = ()
    """What the run had learned, as shown, when the engine wrote the answer (``engine_answer``)."""

    task: str = ""
    """The run's task, when the engine wrote the answer (``engine_answer``)."""

    engine_answer: bool = False
    """The answer is the engine's account of a stopped run (what was found, what is missing), not the model's."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """Always the last event of a run. ``answer`` is never empty, whatever stopped the run."""

    reason: StopReason
    answer: str
    steps: int
    usage: Usage
    #: Names the limit and the observed value, in English for logs: "max_cost: $0.50 cap, next call could cost
    #: $0.52". A caller that shows it words ``facts`` instead.
    detail: str = ""
    run_id: str = ""
    #: The run's lease was lost (another runner owns it now): nothing of this end was saved, and the caller
    #: must not post it. ``reason`` is ``cancelled`` then, ``detail`` starts with ``lease_lost:``.
    lease_lost: bool = False
    #: The state store failed under the run (``reason`` is ``error``): its last persisted step is intact, so
    #: a caller with leases may resume it once the store is back instead of giving up.
    store_failed: bool = False
    #: What stopped the run, as values (the limit and the value observed, who cancelled, an error's cause).
    facts: StopFacts = StopFacts()
    #: Not an end: a tool call waits for an approval that may take hours. The run is saved at that call (status
    #: ``parked``) and is resumed with ``RunRequest.resume`` once decided; nothing of this event is to be posted.
    parked: bool = False


Event = (RunStarted | ThoughtDelta | AnswerDelta | StreamReset | Thought | ToolCalled | Observed | StepFinished
         | FinalAnswer | Stopped)
